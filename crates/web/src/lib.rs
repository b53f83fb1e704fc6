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
//! - [`api`]: the routes, the guards (Host/Origin checks, bearer token, JSON-only POSTs,
//!   body limit) and the SSE endpoint.
//! - [`auth`]: the bearer token, compared in constant time.
//! - [`assets`]: the page (HTML/CSS/JS in `assets/`, compiled in) and the security
//!   headers (a strict Content-Security-Policy).

pub mod api;
pub mod assets;
pub mod auth;
pub mod backend;
pub mod cluster;
pub mod embedded;

use std::net::SocketAddr;
use std::sync::Arc;

pub use backend::{
    Answer, AnswersRequest, ApiError, Backend, DebateListItem, FormDefaults, ReportFn, SpecSource,
    SubmitRequest,
};
pub use cluster::ClusterBackend;
pub use embedded::EmbeddedBackend;
use tokio_util::sync::CancellationToken;

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--listen {0} is not a loopback address: set --auth-token (or PARLEY_SERVE_TOKEN) to serve other machines")]
    TokenRequired(SocketAddr),
    #[error("--auth-token: {0}")]
    BadToken(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the server stopped: {0}")]
    Serve(std::io::Error),
}

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// The bearer token; required unless `listen` is a loopback address.
    pub token: Option<String>,
}

/// A bound server, not yet serving: its address is known (port 0 picks one).
pub struct Server {
    listener: tokio::net::TcpListener,
    app: axum::Router,
    addr: SocketAddr,
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
        let token = match options.token.as_deref() {
            Some(t) => Some(Arc::new(auth::Token::new(t).map_err(ServeError::BadToken)?)),
            None if loopback => None,
            None => return Err(ServeError::TokenRequired(options.listen)),
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
        let stop = CancellationToken::new();
        let state = api::AppState {
            backend,
            loopback_only: token.is_none(),
            token,
            stop: stop.clone(),
        };
        Ok(Self {
            listener,
            app: api::router(state),
            addr,
            stop,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` is cancelled. Open event streams end then.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ServeError> {
        let stop = self.stop;
        axum::serve(self.listener, self.app)
            .with_graceful_shutdown(async move {
                shutdown.cancelled().await;
                stop.cancel();
            })
            .await
            .map_err(ServeError::Serve)
    }
}
