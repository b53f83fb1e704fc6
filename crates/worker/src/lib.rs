//! The NATS consume loop shared by the agent and judge workers.
//!
//! # Layout
//! - [`run`] (`consume`): pulls tasks of one [`WorkerKind`] from its durable JetStream
//!   consumer and runs them through a [`TaskExecutor`], at most `concurrency` at once; the
//!   drain. Each message then goes down the delivery pipeline, one step per module:
//!   `delivery` (decode, verify the dispatch token, look the task's state up, settle a task
//!   that is done, cancelled or gone) → `run_task` (a stashed answer, the claim, the call,
//!   a hand-back) → `results` (store the result in Redis, tell the coordinator); `shared`
//!   holds what the steps share (the worker's state, progress acks, error results).
//! - [`cli`]: the flags both worker binaries take, and their `main`.
//! - [`evals`]: judge workers also serve `parley.evals.submit` (evaluator calls for
//!   `parley eval --nats-url`).
//!
//! # Delivery semantics (at least once, completed work never repeated)
//! A task message is a [`TaskRef`]: the task's body is in Redis (claim check), so messages
//! stay small whatever the debate's size. (A message that holds the whole task, from a
//! coordinator of an older build, is run as it is: upgrade workers first.) For each message the worker reads, in one round
//! trip, the task's successful result, this attempt's stored failure, the debate's cancel
//! mark, whether the debate still exists, and the body. A task whose result is stored (or
//! this attempt answered) is acked and skipped (no LLM call); so is a task of a cancelled
//! debate. A task whose debate or body is gone (expired) is terminated and counted as a
//! dead letter. Otherwise the worker calls the LLM, sending progress acks every
//! [`PROGRESS_EVERY`] so JetStream does not redeliver a long call; then it writes the result
//! to Redis (first success wins; nothing is written once the debate is gone), THEN publishes
//! a small [`ResultNotice`] on `parley.results.<debateId>`, THEN acks. A crash anywhere before
//! the ack means the message is redelivered after `ack_wait`; a crash after the Redis write
//! means the redelivery finds the result and skips the call. A failed call is a result too
//! (an error outcome the coordinator applies its retry policy to).
//!
//! The last delivery (`MAX_DELIVER`) is never nak'ed into oblivion: the worker waits for
//! Redis (up to [`STORE_PATIENCE`], progress acks going on), runs the task even if a claim
//! is held or cannot be taken, and stores an error result when it cannot run it (a panic, a
//! drain deadline reached on the last delivery, a rate limit that handed the task back on
//! every delivery). A task handed back at the drain on an earlier delivery is just nak'ed:
//! it is not a last-delivery failure. Only when Redis stays unreachable past its patience
//! does it terminate the message and count it as an `abandoned` dead letter (an answer it
//! got is stashed first); the coordinator's task deadline then sends a new attempt, which
//! finds a stashed success.
//!
//! # Trust
//! A task message is outside input until checked: the reference must decode, pass
//! [`TaskRef::validate`], and carry the dispatch token the coordinator derives from the
//! debate's secret in Redis (`parley_cluster::dispatch`; secrets are cached per debate) —
//! checked before the body is read; the body it names must be for the same task and
//! attempt and pass [`Task::validate`]. A debate without a secret (unknown, or its keys
//! expired after the retention) has no valid token. Anything else is terminated (never redelivered) with a warning and
//! `parley_tasks_rejected_total{reason}`: a forged task runs no LLM call and writes no
//! result. The endpoint and key of a call come from this worker's settings only (the
//! operator's config and environment), never from the task; a model outside the
//! provider's allow-list is refused before any call. After storing a result the worker
//! publishes a [`ResultNotice`] (ids only): the coordinator reads the content from Redis.
//!
//! An answer is never thrown away because Redis is briefly unavailable: the result write
//! (idempotent) is retried for up to [`STORE_PATIENCE`] while progress acks continue; if it
//! still fails (or the drain deadline comes first) the answer goes to the [`stash`] before
//! the task is handed back, and the worker that gets the task next stores it from there
//! instead of calling the LLM.
//!
//! Rate limits: a call whose next slot (or the provider's `Retry-After`) is further away
//! than the limiter's inline wait comes back as a `RateLimited` error with `retry_after`;
//! the worker then naks the task with that delay (a hand-back), holding no slot and
//! spending no node retry budget, and tells the coordinator (a notice with `handedBackMs`)
//! so it extends the task's deadline. On the last delivery the error is stored instead,
//! saying the task was handed back on every delivery.
//!
//! Context snapshots (`--context DIR`): an agent task whose agent has `tools` gets the
//! debate's [`ContextFiles`] from the debate's spec as stored in Redis (written once by the
//! coordinator, never changed), read by the debate id of the verified task and cached per
//! debate; task bodies never copy the snapshot. A worker never opens a path from a message.
//!
//! Each delivery runs in a `task` span whose parent is the coordinator's node span (W3C
//! trace context in the message headers); metrics: see `parley_telemetry::Metrics`.
//!
//! Shutdown ([`drain`]): when the token is cancelled the loop stops pulling; in-flight tasks
//! run to the end until shortly before the drain deadline (`drain_timeout` after the
//! signal); those still running then are handed back (nak'ed), an answer that could not be
//! stored in Redis is kept in the [`stash`] first; finally the acks and hand-backs are
//! flushed to NATS. At the deadline the worker gives up on whatever is left (tasks stuck on
//! an unreachable Redis or NATS, a flush NATS never confirmed), logs it, and `run` returns
//! [`parley_cluster::DrainIncomplete`]: the process exits within its deadline whatever the
//! state of NATS and Redis, and nothing is lost (a task that was not acked is redelivered
//! after the consumer's ack wait).

pub mod cli;
mod consume;
mod delivery;
pub mod evals;
mod results;
mod run_task;
mod shared;
pub mod stash;

use std::time::Duration;

use async_trait::async_trait;
use parley_llm::Provider;
use parley_protocol::{ContextFiles, Task, TaskResult, WorkerKind};

pub use consume::run;

/// How often (at most) a worker tells JetStream it is still working on a task.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Runs one task against a provider: the agent or judge worker's logic.
#[async_trait]
pub trait TaskExecutor: Send + Sync + 'static {
    /// `files` is the debate's context snapshot, read for agent tasks whose agent has tools.
    async fn execute(
        &self,
        task: &Task,
        provider: &dyn Provider,
        worker: &str,
        files: Option<&ContextFiles>,
    ) -> TaskResult;
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub kind: WorkerKind,
    pub nats_url: String,
    /// NATS credentials file (`.creds` or NKey seed), see `parley_cluster::nats`.
    pub nats_creds: Option<std::path::PathBuf>,
    /// Inbox prefix of the NATS replies; `None`: the kind's (`parley_cluster::nats`).
    pub nats_inbox_prefix: Option<String>,
    pub redis_url: String,
    /// Replicas of the result-stash bucket when this worker creates it (setting
    /// `stream_replicas`).
    pub stream_replicas: usize,
    /// Redis replicas each result write waits for (setting `redis_min_replicas`).
    pub redis_min_replicas: usize,
    /// Global OpenAI-compatible base URL (the debate config's `baseUrl`).
    pub base_url: Option<String>,
    /// The operator's `providers` section: rate limits per provider (and model), shared by
    /// every replica through Redis; endpoints and model allow-lists per provider.
    pub limits: std::collections::BTreeMap<String, parley_protocol::ProviderLimits>,
    /// The operator's cap on one call's completion tokens (applied to every call).
    pub max_tokens: u32,
    /// Tasks run at once.
    pub concurrency: usize,
    /// Name recorded in results.
    pub name: String,
    /// How long after shutdown was requested the worker exits at the latest: in-flight
    /// tasks run until shortly before it ([`hand_back_reserve`]), then are handed back.
    pub drain_timeout: Duration,
    /// JetStream ack wait of the task consumer (when this worker creates it): how soon a
    /// crashed worker's tasks are redelivered. Progress acks go out every third of it.
    pub ack_wait: Duration,
    /// Where `/metrics`, `/healthz` and `/readyz` are served (none: not at all).
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// The part of the drain time kept for handing running tasks back and flushing to NATS:
/// a quarter of it, at most 2 s.
pub fn hand_back_reserve(drain: Duration) -> Duration {
    (drain / 4).min(Duration::from_secs(2))
}

/// How long a worker keeps trying to store a result while Redis is unavailable (a restart,
/// a failover) before it gives the task back: an LLM answer is worth waiting for. The same
/// patience applies to reading a task's state on its last delivery.
pub const STORE_PATIENCE: Duration = Duration::from_secs(60);
