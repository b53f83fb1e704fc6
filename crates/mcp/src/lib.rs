//! Parley's Model Context Protocol server: an MCP client (a coding agent, a desktop
//! assistant) starts debates, follows them, answers their questions and reads their
//! results, over either way of running debates ([`parley_web::Backend`]: the embedded
//! engine or a cluster).
//!
//! A debate takes minutes and MCP clients give up on a call after about a minute, so a
//! debate is a job with an id: `start_debate` returns at once, `debate_result` waits a
//! bounded time (sending progress notifications) and says either the solution or "still
//! running, call again".
//!
//! # Layout
//! - [`server`]: [`ParleyMcp`], the `ServerHandler`: the tools, the resources
//!   (`parley://debates/<id>/state`, `parley://debates/<id>/report`,
//!   `parley://debates/<id>/record`) and their errors.
//! - [`args`]: the tools' arguments, their JSON Schemas and their validation (every
//!   problem named by its argument).
//! - [`follow`]: a debate's latest progress and the bounded wait for it to come to rest.
//! - [`view`]: the replies, read from the state's JSON.
//!
//! [`serve_stdio`] runs the server over standard input and output (`parley mcp`);
//! [`http_router`] serves it over streamable HTTP at `/mcp` (mounted by `parley serve`
//! behind the API's credentials; a `user` key's session reaches only its own debates).

pub mod args;
pub mod follow;
pub mod server;
pub mod view;

pub use server::{Estimator, ParleyMcp};

use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

/// The MCP server over streamable HTTP at `/mcp` (sessions kept in this process; a
/// session's requests must reach the replica that created it). `parley serve` mounts it
/// behind its authentication and its `Host`/`Origin` checks (so the transport's own Host
/// check is off), and each request's caller scopes what its tools reach. Sessions end when
/// `stop` is cancelled.
pub fn http_router(server: ParleyMcp, stop: CancellationToken) -> axum::Router {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_cancellation_token(stop)
        .with_max_request_body_bytes(MAX_HTTP_BODY_BYTES);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        std::sync::Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new().route_service("/mcp", service)
}

/// Bytes of one MCP request over HTTP, at most (the API's limit).
pub const MAX_HTTP_BODY_BYTES: usize = 1024 * 1024;

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("the MCP session did not start: {0}")]
    Start(String),
    #[error("the MCP session ended with an error: {0}")]
    Session(String),
}

/// Serves `server` over this process's standard input and output until the client closes
/// the session (end of input) or `shutdown` fires. Nothing else may write to standard
/// output: it carries the protocol.
pub async fn serve_stdio(server: ParleyMcp, shutdown: CancellationToken) -> Result<(), McpError> {
    let running = server
        .serve_with_ct(rmcp::transport::stdio(), shutdown)
        .await
        .map_err(|e| McpError::Start(e.to_string()))?;
    running
        .waiting()
        .await
        .map(|reason| tracing::info!("MCP session ended: {reason:?}"))
        .map_err(|e| McpError::Session(e.to_string()))
}
