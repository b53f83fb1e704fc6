//! Webhooks under `parley serve --webhooks FILE`: the submission check and the delivery
//! over either backend (the delivery itself is `parley_webhooks`).
//!
//! - Embedded: the debate's event log (`<id>.events.jsonl`) is the outbox and
//!   `<id>.webhooks.cursor` beside it (the sequence number of the last event handled,
//!   replaced atomically) its cursor; the backend tells the outbox when a log grows, and
//!   at start every debate whose log was written after its cursor is looked at again
//!   ([`start_embedded`]).
//! - Cluster: a durable consumer of the events stream ([`start_cluster`]), the debate's
//!   subscriptions read from its state through the coordinators.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use parley_protocol::{DebateEvent, WebhookSubscription};
use parley_webhooks::{
    ClientError, Endpoints, EventLog, Outbox, Sender, StoreError, Subscriptions,
};
use tokio_util::sync::CancellationToken;

use crate::backend::{ApiError, Backend, SubmitRequest};
use crate::{ClusterBackend, EmbeddedBackend};

/// A submission's webhooks must name the server's endpoints: the 400 otherwise.
pub fn check_submission(
    endpoints: Option<&Endpoints>,
    request: &SubmitRequest,
) -> Result<(), ApiError> {
    let hooks = request.webhook_subscriptions();
    if hooks.is_empty() {
        return Ok(());
    }
    match endpoints {
        None => Err(ApiError::invalid(
            "webhooks: this server has no webhook endpoints (the operator lists them with \
             --webhooks)",
        )),
        Some(e) => e
            .check(&hooks)
            .map_err(|e| ApiError::invalid(e.to_string())),
    }
}

/// Why the embedded outbox's cursor file (`<id>.webhooks.cursor`) could not be read or
/// written (the source of the outbox's [`StoreError`]).
#[derive(Debug, thiserror::Error)]
pub enum CursorError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a sequence number", path.display())]
    NotASequence { path: PathBuf },
}

/// Why the deliveries did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The scan for debates whose log is past its cursor panicked.
    #[error("webhooks: the scan of the event logs failed: {0}")]
    Scan(#[from] tokio::task::JoinError),
}

/// The embedded event log and cursor files.
struct EmbeddedLog {
    backend: EmbeddedBackend,
}

impl EmbeddedLog {
    fn cursor_path(&self, id: &str) -> PathBuf {
        self.backend.dir().join(format!("{id}.webhooks.cursor"))
    }

    /// Whether the debate's log was written after its cursor (or it has no cursor).
    fn behind(&self, id: &str) -> bool {
        let modified = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let log = modified(self.backend.dir().join(format!("{id}.events.jsonl")));
        let cursor = modified(self.cursor_path(id));
        match (log, cursor) {
            (Some(l), Some(c)) => l >= c,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

async fn blocking<T: Send + 'static, E: Into<StoreError> + Send + 'static>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, StoreError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(Into::into),
        Err(e) => Err(StoreError::new(e)),
    }
}

impl From<CursorError> for StoreError {
    fn from(e: CursorError) -> Self {
        StoreError::new(e)
    }
}

#[async_trait]
impl Subscriptions for EmbeddedLog {
    async fn subscriptions(&self, id: &str) -> Result<Vec<WebhookSubscription>, StoreError> {
        let (backend, id) = (self.backend.clone(), id.to_string());
        blocking(move || backend.webhooks_of(&id).map_err(StoreError::new)).await
    }
}

#[async_trait]
impl EventLog for EmbeddedLog {
    async fn events_after(
        &self,
        id: &str,
        after: u64,
        max: usize,
    ) -> Result<Vec<DebateEvent>, StoreError> {
        let (backend, id) = (self.backend.clone(), id.to_string());
        blocking(move || {
            Ok::<_, StoreError>(
                backend
                    .logged_events(&id)
                    .into_iter()
                    .filter(|e| e.seq > after)
                    .take(max)
                    .filter_map(|e| serde_json::from_str(&e.json).ok())
                    .collect(),
            )
        })
        .await
    }

    async fn cursor(&self, id: &str) -> Result<u64, StoreError> {
        let path = self.cursor_path(id);
        blocking(move || match std::fs::read_to_string(&path) {
            Ok(text) => text
                .trim()
                .parse()
                .map_err(|_| CursorError::NotASequence { path }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(source) => Err(CursorError::Io { path, source }),
        })
        .await
    }

    async fn set_cursor(&self, id: &str, seq: u64) -> Result<(), StoreError> {
        let path = self.cursor_path(id);
        blocking(move || {
            use std::io::Write as _;
            let tmp = path.with_extension("cursor.tmp");
            let io = |path: &PathBuf| {
                let path = path.clone();
                move |source| CursorError::Io { path, source }
            };
            let mut f = parley_engine::store::private_file()
                .create(true)
                .write(true)
                .truncate(true)
                .open(&tmp)
                .map_err(io(&tmp))?;
            f.write_all(format!("{seq}\n").as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(io(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(io(&path))
        })
        .await
    }
}

/// Delivers the embedded debates' webhooks: hooks the outbox to `backend`'s event logs
/// and looks again at every debate whose log is past its cursor. Runs until `stop`.
pub async fn start_embedded(
    backend: &EmbeddedBackend,
    endpoints: Arc<Endpoints>,
    stop: CancellationToken,
) -> Result<Outbox, StartError> {
    let sender = Sender::new()?;
    let log = Arc::new(EmbeddedLog {
        backend: backend.clone(),
    });
    let outbox = Outbox::new(log.clone(), endpoints, sender, stop);
    let notify = outbox.clone();
    backend.on_new_events(Arc::new(move |id: &str| notify.notify(id)));
    let scan = backend.clone();
    let behind = tokio::task::spawn_blocking(move || {
        scan.logged_debates()
            .into_iter()
            .filter(|id| log.behind(id))
            .collect::<Vec<_>>()
    })
    .await?;
    for id in behind {
        outbox.notify(&id);
    }
    Ok(outbox)
}

/// A debate's subscriptions, from its state through the coordinators.
struct ClusterSubscriptions {
    backend: Arc<ClusterBackend>,
}

#[async_trait]
impl Subscriptions for ClusterSubscriptions {
    async fn subscriptions(&self, id: &str) -> Result<Vec<WebhookSubscription>, StoreError> {
        let state = match self.backend.state(id).await {
            Ok(s) => s,
            // No such debate (purged by retention, or never stored): it has no webhooks.
            // Its events are acknowledged, not retried, so they never hold up the
            // consumer's other debates.
            Err(e) if e.code == parley_protocol::subjects::ErrorCode::NotFound => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(StoreError::new(e)),
        };
        match state.get("webhooks") {
            None => Ok(Vec::new()),
            Some(v) => serde_json::from_value(v.clone()).map_err(StoreError::new),
        }
    }
}

/// Delivers the cluster's webhooks from the durable consumer (see
/// `parley_webhooks::jetstream`) until `stop`.
pub fn start_cluster(
    client: async_nats::Client,
    backend: Arc<ClusterBackend>,
    endpoints: Arc<Endpoints>,
    stop: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, ClientError> {
    let sender = Sender::new()?;
    let subs = Arc::new(ClusterSubscriptions { backend });
    Ok(tokio::spawn(parley_webhooks::jetstream::run(
        client, endpoints, sender, subs, stop,
    )))
}
