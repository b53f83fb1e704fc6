//! What the steps of the delivery pipeline share: the worker's state ([`Shared`]), the
//! running-task registry, progress acks, and error results.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use parley_cluster::RedisStore;
use parley_llm::Registry;
use parley_protocol::{
    ContextFiles, ErrorKind, Task, TaskError, TaskOutcome, TaskResult, WorkerKind, SCHEMA_VERSION,
};
use tokio_util::sync::CancellationToken;

use crate::stash::ResultStash;
use crate::{TaskExecutor, WorkerConfig, PROGRESS_EVERY};

pub(crate) struct Shared {
    pub(crate) config: WorkerConfig,
    pub(crate) store: RedisStore,
    pub(crate) nats: async_nats::Client,
    pub(crate) registry: Arc<Registry>,
    pub(crate) executor: Arc<dyn TaskExecutor>,
    /// Cancelled when the drain deadline passes: running tasks are nak'ed.
    pub(crate) hard_stop: CancellationToken,
    /// Where an answer that cannot be stored in Redis is kept (see [`stash`]).
    pub(crate) stash: ResultStash,
    /// Ids of the tasks being handled now: what the drain names when it gives up.
    pub(crate) running: Mutex<BTreeSet<String>>,
    /// Answers that could be stored neither in Redis nor in the stash (their calls will run
    /// again): reported by the drain.
    pub(crate) lost: Mutex<Vec<String>>,
    /// Dispatch secrets by debate id (they never change); emptied when it grows large.
    pub(crate) secrets: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// Context snapshots by debate id (from the immutable stored spec); emptied when it
    /// grows past [`SNAPSHOT_CACHE`].
    pub(crate) snapshots:
        std::sync::Mutex<std::collections::HashMap<String, Arc<Option<ContextFiles>>>>,
}

/// Debates whose context snapshots are cached at most (each up to the snapshot cap).
pub(crate) const SNAPSHOT_CACHE: usize = 16;

/// Debates whose secrets are cached at most.
pub(crate) const SECRET_CACHE: usize = 10_000;

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn running_tasks(shared: &Shared) -> Vec<String> {
    lock(&shared.running).iter().cloned().collect()
}

/// Removes a task from [`Shared::running`] when its handling ends, however it ends.
pub(crate) struct Running<'a> {
    shared: &'a Shared,
    task_id: String,
}

impl<'a> Running<'a> {
    pub(crate) fn new(shared: &'a Shared, task_id: &str) -> Self {
        lock(&shared.running).insert(task_id.to_string());
        Self {
            shared,
            task_id: task_id.to_string(),
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        lock(&self.shared.running).remove(&self.task_id);
    }
}

pub(crate) fn metrics_kind(kind: WorkerKind) -> parley_telemetry::TaskKind {
    match kind {
        WorkerKind::Agent => parley_telemetry::TaskKind::Agent,
        WorkerKind::Judge => parley_telemetry::TaskKind::Judge,
    }
}

pub(crate) fn error_result(
    task: &Task,
    worker: &str,
    kind: ErrorKind,
    message: String,
) -> TaskResult {
    TaskResult {
        schema_version: SCHEMA_VERSION,
        task_id: task.id.clone(),
        debate_id: task.debate_id.clone(),
        attempt: task.attempt,
        worker: worker.to_string(),
        outcome: TaskOutcome::Error(TaskError {
            kind,
            message,
            provider: None,
            retry_after_ms: None,
        }),
    }
}

/// Sends progress acks for `msg` until dropped, so JetStream does not redeliver it.
pub(crate) fn keep_alive(shared: &Shared, msg: &Arc<jetstream::Message>) -> AbortOnDrop {
    let every = PROGRESS_EVERY
        .min(shared.config.ack_wait / 3)
        .max(Duration::from_millis(100));
    let msg = msg.clone();
    AbortOnDrop(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            let _ = msg.ack_with(AckKind::Progress).await;
        }
    }))
}

/// Runs `fut` unless the drain hands running tasks back first (`None`).
pub(crate) async fn until_hard_stop<T>(
    shared: &Shared,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        v = fut => Some(v),
        _ = shared.hard_stop.cancelled() => None,
    }
}

/// Aborts a background task when dropped.
pub(crate) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
