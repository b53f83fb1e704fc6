//! `parley serve`: a JSON API with Server-Sent Events and a page built into the binary,
//! over either way of running debates.
//!
//! # Layout
//! - [`backend`]: the [`Backend`] trait (submit, list, state, events, retry, cancel,
//!   answer, report) and the API's request and reply types, with their validation.
//! - [`embedded`]: [`EmbeddedBackend`], debates run in this process by the same engine as
//!   `parley run`, checkpointed to `./debates/<id>.json`, their events logged next to them
//!   (`<id>.events.jsonl`) so an event stream resumes across server restarts.
//! - [`cluster`]: [`ClusterBackend`], a stateless front end of a cluster: the NATS request
//!   subjects and the JetStream events stream (any number of replicas).
//! - [`api`]: the HTTP API v1 (`/v1/...`): routes, guards (Host/Origin checks,
//!   credentials, JSON-only POSTs, body limit), ownership checks, the SSE endpoint.
//! - [`openapi`]: the OpenAPI 3.1 document, generated from the handlers and types.
//! - [`auth`]: the operator's bearer token, compared in constant time; generated at
//!   start-up when the operator gives neither a token nor API keys (unless `--no-auth`).
//! - [`keys`]: per-user API keys (hashed in the operator's file, re-read while serving).
//! - [`idempotency`]: idempotency keys of creates.
//! - [`submit_options`]: a submission's termination, mode, budget and context: their
//!   checks and how they go into the spec.
//! - [`scoped`]: [`scoped::ScopedBackend`], a backend as one API key sees it (the MCP
//!   server under `/mcp`).
//! - [`webhooks`]: the submission's webhook check and the delivery over either backend
//!   (the event log and a cursor file embedded, a durable consumer in a cluster).
//! - [`assets`]: the page (HTML, CSS and JavaScript ES modules in `assets/`, compiled in,
//!   no build step) and the security headers (a strict Content-Security-Policy).

pub mod api;
pub mod assets;
pub mod auth;
pub mod backend;
pub mod cluster;
pub mod embedded;
pub mod idempotency;
pub mod keys;
pub mod openapi;
pub mod replies;
pub mod scoped;
pub mod submit_options;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;

pub use backend::{
    AgentChoice, Answer, AnswersRequest, ApiError, Backend, DebateListItem, FeedbackRequest,
    FormDefaults, ProviderView, ReportFn, SpecSource, SubmitRequest, WebhookEventName,
    WebhookRequest,
};
pub use cluster::ClusterBackend;
pub use embedded::EmbeddedBackend;
pub use submit_options::{BudgetRequest, ModeChoice, TerminationChoice};
use tokio_util::sync::CancellationToken;

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--listen {0} is not a loopback address: set --auth-token (or PARLEY_SERVE_TOKEN) or --api-keys to serve other machines (--no-auth is for loopback only)")]
    TokenRequired(SocketAddr),
    #[error("--no-auth contradicts --auth-token and --api-keys: give one")]
    AuthConflict,
    #[error("--api-keys: {0}")]
    BadKeys(#[from] keys::KeyFileError),
    #[error("--auth-token: {0}")]
    BadToken(#[from] auth::TokenError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// The bearer token; required unless `listen` is a loopback address. On loopback
    /// without one, a token is generated (see [`Server::sign_in_url`]) unless `no_auth`.
    pub token: Option<String>,
    /// Serve a loopback address with no token at all (only loopback `Host` names pass):
    /// anyone who can reach the address (other local users, tunnels, port-forwards) can
    /// start debates on the operator's keys.
    pub no_auth: bool,
    /// Bounds on the connections (header-read and idle timeouts, connection cap).
    pub limits: parley_telemetry::ConnectionLimits,
    /// The operator's API key file (see [`keys`]), re-read while the server runs.
    pub api_keys: Option<std::path::PathBuf>,
    /// The operator's webhook endpoints (`--webhooks`): a submission may name only these.
    pub webhooks: Option<Arc<parley_webhooks::Endpoints>>,
    /// Served at `/mcp` behind the same credentials as `/v1` (the MCP server over
    /// streamable HTTP): each request carries the caller's [`keys::Principal`] in its
    /// extensions.
    pub mcp: Option<axum::Router>,
}

impl ServeOptions {
    /// `listen` with a generated token and the default connection limits.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            token: None,
            no_auth: false,
            limits: parley_telemetry::ConnectionLimits::WEB,
            api_keys: None,
            webhooks: None,
            mcp: None,
        }
    }
}

/// A bound server, not yet serving: its address is known (port 0 picks one).
pub struct Server {
    listener: tokio::net::TcpListener,
    app: axum::Router,
    addr: SocketAddr,
    /// The token generated at start-up (none when the operator gave one or chose
    /// `--no-auth`): shown once, in [`Server::sign_in_url`].
    generated: Option<String>,
    limits: parley_telemetry::ConnectionLimits,
    /// Cancelled when the server shuts down: ends the open event streams, which would
    /// otherwise hold the graceful shutdown forever.
    stop: CancellationToken,
}

impl Server {
    /// Checks the options and binds.
    pub async fn bind(
        options: ServeOptions,
        backend: Arc<dyn Backend>,
    ) -> Result<Self, ServeError> {
        let loopback = options.listen.ip().is_loopback();
        let mut generated = None;
        let stop = CancellationToken::new();
        let keys = match &options.api_keys {
            Some(_) if options.no_auth => return Err(ServeError::AuthConflict),
            Some(path) => {
                let watch = keys::KeyFileWatch::open(path).map_err(ServeError::BadKeys)?;
                watch.spawn_reloader(stop.clone());
                Some(watch)
            }
            None => None,
        };
        let token = match (options.token.as_deref(), options.no_auth) {
            (Some(_), true) => return Err(ServeError::AuthConflict),
            (Some(t), false) => Some(Arc::new(auth::Token::new(t).map_err(ServeError::BadToken)?)),
            // API keys alone: no operator token.
            (None, false) if keys.is_some() => None,
            (None, _) if !loopback => return Err(ServeError::TokenRequired(options.listen)),
            (None, true) => None,
            (None, false) => {
                let t = auth::generate();
                let token = auth::Token::new(&t).map_err(ServeError::BadToken)?;
                generated = Some(t);
                Some(Arc::new(token))
            }
        };
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .map_err(|source| ServeError::Bind {
                addr: options.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: options.listen,
            source,
        })?;
        let state = api::AppState {
            backend,
            loopback_only: token.is_none() && keys.is_none(),
            token,
            keys,
            stop: stop.clone(),
            idempotency: Default::default(),
            openapi: openapi::document().into(),
            webhooks: options.webhooks.clone(),
        };
        Ok(Self {
            listener,
            app: api::router(state, options.mcp),
            addr,
            generated,
            limits: options.limits,
            stop,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's address; with a generated token, carrying it in the fragment
    /// (`#token=...`): the fragment is not sent to the server, and the page keeps the token
    /// for the tab and removes it from the address bar. Print it once, to the operator.
    pub fn sign_in_url(&self) -> String {
        match &self.generated {
            Some(t) => format!("http://{}/#token={t}", self.addr),
            None => format!("http://{}/", self.addr),
        }
    }

    /// Serves until `shutdown` is cancelled, within the connection limits (see
    /// `parley_telemetry::server`). Open event streams end then.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ServeError> {
        let stop = self.stop;
        parley_telemetry::serve_router(self.listener, self.app, self.limits, async move {
            shutdown.cancelled().await;
            stop.cancel();
        })
        .await;
        Ok(())
    }
}
