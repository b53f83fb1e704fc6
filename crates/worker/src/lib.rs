//! The NATS consume loop shared by the agent and judge workers.
//!
//! # Layout
//! - [`run`]: pulls tasks of one [`WorkerKind`] from its durable JetStream consumer and runs
//!   them through a [`TaskExecutor`], at most `concurrency` at once.
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
pub mod evals;
pub mod stash;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use async_trait::async_trait;
use futures::StreamExt;
use parley_cluster::redis_store::{Stored, TaskLookup};
use parley_cluster::{streams, RedisStore};
use parley_llm::{Provider, ProviderSettings, Registry};
use parley_protocol::{
    preview, subjects, ContextFiles, ErrorKind, ResultNotice, Task, TaskError, TaskOutcome,
    TaskRef, TaskResult, WorkerKind, SCHEMA_VERSION,
};
use parley_telemetry::{DeadLetterReason, RejectReason};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use crate::stash::ResultStash;

/// How often (at most) a worker tells JetStream it is still working on a task.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// How long one pull request waits on the server for tasks.
const PULL_EXPIRES: Duration = Duration::from_secs(1);
/// How long after its expiry a pull is given up on the client side.
const PULL_GRACE: Duration = Duration::from_millis(500);

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

struct Shared {
    config: WorkerConfig,
    store: RedisStore,
    nats: async_nats::Client,
    registry: Arc<Registry>,
    executor: Arc<dyn TaskExecutor>,
    /// Cancelled when the drain deadline passes: running tasks are nak'ed.
    hard_stop: CancellationToken,
    /// Where an answer that cannot be stored in Redis is kept (see [`stash`]).
    stash: ResultStash,
    /// Ids of the tasks being handled now: what the drain names when it gives up.
    running: Mutex<BTreeSet<String>>,
    /// Answers that could be stored neither in Redis nor in the stash (their calls will run
    /// again): reported by the drain.
    lost: Mutex<Vec<String>>,
    /// Dispatch secrets by debate id (they never change); emptied when it grows large.
    secrets: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// Context snapshots by debate id (from the immutable stored spec); emptied when it
    /// grows past [`SNAPSHOT_CACHE`].
    snapshots: std::sync::Mutex<std::collections::HashMap<String, Arc<Option<ContextFiles>>>>,
}

/// Debates whose context snapshots are cached at most (each up to the snapshot cap).
const SNAPSHOT_CACHE: usize = 16;

/// Debates whose secrets are cached at most.
const SECRET_CACHE: usize = 10_000;

/// Runs the worker until `shutdown` is cancelled and the in-flight tasks are drained.
pub async fn run(
    config: WorkerConfig,
    executor: Arc<dyn TaskExecutor>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // NATS retries its first connection forever: a signal before the backends answer
    // stops the worker at once (it holds nothing yet).
    let Some(started) = parley_cluster::unless_shutdown(&shutdown, start(&config, &shutdown)).await
    else {
        tracing::info!("stopped before NATS and Redis were reachable");
        return Ok(());
    };
    let (nats, store, consumer, registry, stash) = started?;
    let slots = Arc::new(Semaphore::new(config.concurrency.max(1)));
    let registry = Arc::new(registry);
    let shared = Arc::new(Shared {
        config,
        store,
        nats,
        registry: registry.clone(),
        executor,
        hard_stop: CancellationToken::new(),
        stash,
        running: Mutex::new(BTreeSet::new()),
        lost: Mutex::new(Vec::new()),
        secrets: Default::default(),
        snapshots: Default::default(),
    });
    let tracker = TaskTracker::new();
    tokio::spawn(report_queue(
        consumer.clone(),
        shared.config.kind,
        shutdown.clone(),
    ));
    if shared.config.kind == WorkerKind::Judge {
        let service = Arc::new(evals::EvalService {
            nats: shared.nats.clone(),
            registry,
            slots: slots.clone(),
            slots_total: shared.config.concurrency.max(1),
            admitted: Default::default(),
            hard_stop: shared.hard_stop.clone(),
        });
        let (tracker, shutdown) = (tracker.clone(), shutdown.clone());
        tokio::spawn(async move {
            if let Err(e) = evals::serve(service, tracker, shutdown).await {
                tracing::error!(error = %e, "evaluation requests are not served");
            }
        });
    }
    tracing::info!(
        kind = shared.config.kind.as_str(),
        concurrency = shared.config.concurrency,
        "worker ready"
    );
    // The drain deadline counts from the signal, not from the end of the last pull.
    let signalled_at = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            Instant::now()
        })
    };

    while !shutdown.is_cancelled() {
        let first = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = shutdown.cancelled() => break,
        };
        let mut permits = vec![first];
        while let Ok(p) = slots.clone().try_acquire_owned() {
            permits.push(p);
        }
        let batch = consumer
            .batch()
            .max_messages(permits.len())
            .expires(PULL_EXPIRES)
            .messages();
        let Some(batch) = parley_cluster::unless_shutdown(&shutdown, batch).await else {
            break;
        };
        let mut batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "cannot pull tasks; retrying");
                drop(permits);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.cancelled() => {}
                }
                continue;
            }
        };
        // Every message of a batch gets a slot: we asked for no more than we hold.
        // The pull expires after PULL_EXPIRES on the server. A pull lost in a NATS restart
        // is never answered, and the client would only notice seconds later: stop waiting
        // shortly after the server-side expiry (nothing can be delivered after it).
        loop {
            let next = tokio::select! {
                next = tokio::time::timeout(PULL_EXPIRES + PULL_GRACE, batch.next()) => next,
                _ = shutdown.cancelled() => {
                    // Stop now; what this pull still delivers goes straight back.
                    tracker.spawn(hand_back_rest(batch));
                    break;
                }
            };
            let Ok(Some(msg)) = next else {
                break;
            };
            let msg = match msg {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(error = %e, "pull batch ended");
                    break;
                }
            };
            let Some(permit) = permits.pop() else {
                let _ = msg.ack_with(AckKind::Nak(None)).await;
                continue;
            };
            let shared = shared.clone();
            tracker.spawn(async move {
                handle(&shared, msg).await;
                drop(permit);
            });
        }
    }
    let signalled_at = signalled_at.await.unwrap_or_else(|_| Instant::now());
    drain(
        &shared,
        &tracker,
        signalled_at + shared.config.drain_timeout,
    )
    .await
}

/// The NATS and Redis connections, the task consumer, the provider registry and the result
/// stash: everything the worker needs before it pulls.
async fn start(
    config: &WorkerConfig,
    shutdown: &CancellationToken,
) -> anyhow::Result<(
    async_nats::Client,
    RedisStore,
    jetstream::consumer::PullConsumer,
    Registry,
    ResultStash,
)> {
    let endpoint = parley_cluster::NatsEndpoint::new(
        config.nats_url.clone(),
        config.nats_creds.clone(),
        config
            .nats_inbox_prefix
            .clone()
            .unwrap_or_else(|| parley_cluster::nats::inbox_worker(config.kind).to_string()),
    );
    let (nats, store) =
        parley_cluster::start_service(&endpoint, &config.redis_url, config.metrics_addr, shutdown)
            .await?;
    let store = store.with_min_replicas(config.redis_min_replicas);
    let js = jetstream::new(nats.clone());
    // Only the coordinator creates streams. A signal while waiting: wait on, the caller's
    // `unless_shutdown` stops this start-up.
    if !streams::wait_for_stream(&js, subjects::TASKS_STREAM, shutdown).await {
        std::future::pending::<()>().await;
    }
    let consumer = streams::task_consumer(&js, config.kind, config.ack_wait)
        .await
        .map_err(|e| anyhow::anyhow!("while creating the task consumer: {e}"))?;
    let stash = ResultStash::open(&js, config.stream_replicas)
        .await
        .map_err(|e| anyhow::anyhow!("while opening the result stash: {e}"))?;
    // The limiter's scripts are small: the client's usual 500 ms answer time.
    // Boxed: the waiting loop's future would make the binary's `main` future too deep.
    let limiter_conn = Box::pin(parley_cluster::service::wait_for_redis(
        "the rate limiter",
        shutdown,
        || parley_cluster::RedisConnection::connect(&config.redis_url, Duration::from_millis(500)),
    ))
    .await?;
    let registry = Registry::with_limits(
        ProviderSettings {
            max_tokens: Some(config.max_tokens),
            ..ProviderSettings::from_env(config.base_url.clone())
        },
        config.limits.clone(),
        Arc::new(parley_llm::ratelimit::RedisLimiter::new(limiter_conn)),
    );
    Ok((nats, store, consumer, registry, stash))
}

/// The part of the drain time kept for handing running tasks back and flushing to NATS:
/// a quarter of it, at most 2 s.
pub fn hand_back_reserve(drain: Duration) -> Duration {
    (drain / 4).min(Duration::from_secs(2))
}

/// Drains the worker by `deadline` (the loop has stopped pulling): lets running tasks
/// finish until [`hand_back_reserve`] before it, hands the rest back, flushes acks and
/// hand-backs to NATS, and names what it gave up on.
async fn drain(
    shared: &Arc<Shared>,
    tracker: &TaskTracker,
    deadline: Instant,
) -> anyhow::Result<()> {
    let reserve = hand_back_reserve(shared.config.drain_timeout);
    tracing::info!(
        running = tracker.len(),
        deadline_ms = shared.config.drain_timeout.as_millis() as u64,
        "worker draining"
    );
    tracker.close();
    let mut gave_up = Vec::new();
    if tokio::time::timeout_at(deadline - reserve, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            tasks = ?running_tasks(shared),
            "drain deadline passed; giving running tasks back"
        );
        shared.hard_stop.cancel();
        // Half the reserve for the hand-backs, the rest for the flush.
        if tokio::time::timeout_at(deadline - reserve / 2, tracker.wait())
            .await
            .is_err()
        {
            for task in running_tasks(shared) {
                gave_up.push(format!(
                    "task {task} (still running: Redis or NATS did not answer; redelivered after the ack wait)"
                ));
            }
        }
    }
    for task in std::mem::take(&mut *lock(&shared.lost)) {
        gave_up.push(format!(
            "the answer of task {task} (neither Redis nor the stash took it; the call runs again)"
        ));
    }
    match tokio::time::timeout_at(deadline, shared.nats.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => gave_up.push(format!(
            "confirming acks and hand-backs to NATS ({e}; unacked tasks are redelivered after the ack wait)"
        )),
        Err(_) => gave_up.push(
            "confirming acks and hand-backs to NATS (unreachable; unacked tasks are redelivered after the ack wait)"
                .into(),
        ),
    }
    for what in &gave_up {
        tracing::warn!(gave_up = %what, "drain incomplete");
    }
    tracing::info!(clean = gave_up.is_empty(), "worker stopped");
    parley_cluster::DrainIncomplete::check(gave_up)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn running_tasks(shared: &Shared) -> Vec<String> {
    lock(&shared.running).iter().cloned().collect()
}

/// Removes a task from [`Shared::running`] when its handling ends, however it ends.
struct Running<'a> {
    shared: &'a Shared,
    task_id: String,
}

impl<'a> Running<'a> {
    fn new(shared: &'a Shared, task_id: &str) -> Self {
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

/// Hands back (naks) every message a pull still delivers after shutdown was requested,
/// until the pull ends (its server-side expiry).
async fn hand_back_rest(mut batch: jetstream::consumer::pull::Batch) {
    while let Ok(Some(Ok(msg))) =
        tokio::time::timeout(PULL_EXPIRES + PULL_GRACE, batch.next()).await
    {
        let _ = msg.ack_with(AckKind::Nak(None)).await;
    }
}

/// Publishes the task consumer's backlog (`num_pending`, `num_ack_pending`) as metrics
/// every few seconds.
async fn report_queue(
    consumer: jetstream::consumer::PullConsumer,
    kind: WorkerKind,
    shutdown: CancellationToken,
) {
    let name = streams::consumer_name(kind);
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        if let Ok(info) = consumer.get_info().await {
            parley_telemetry::metrics().set_consumer_pending(
                name,
                info.num_pending,
                info.num_ack_pending as u64,
            );
        }
    }
}

/// The `task` span of one delivery, a child of the coordinator's node span whose context
/// came in the message's `traceparent` header.
fn task_span(msg: &jetstream::Message, task: &Task, delivered: i64) -> tracing::Span {
    let span = parley_cluster::task_span(&tracing::Span::none(), task);
    span.record("task.delivery", delivered);
    parley_telemetry::set_parent(
        &span,
        parley_telemetry::extract_headers(msg.headers.as_ref()),
    );
    span
}

fn metrics_kind(kind: WorkerKind) -> parley_telemetry::TaskKind {
    match kind {
        WorkerKind::Agent => parley_telemetry::TaskKind::Agent,
        WorkerKind::Judge => parley_telemetry::TaskKind::Judge,
    }
}

fn error_result(task: &Task, worker: &str, kind: ErrorKind, message: String) -> TaskResult {
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

/// Terminates a task message the worker refuses to run (it is never redelivered).
async fn reject(msg: jetstream::Message, reason: RejectReason, why: &str, detail: String) {
    parley_telemetry::metrics().task_rejected(reason);
    tracing::warn!(subject = %msg.subject, reason = reason.as_str(), detail = %preview(&detail, 300), "refusing a task message: {why}");
    let _ = msg.ack_with(AckKind::Term).await;
}

/// The dispatch secret of a debate: from the cache, else from Redis.
async fn secret_of(
    shared: &Shared,
    debate_id: &str,
) -> parley_cluster::redis_store::Result<Option<String>> {
    if let Some(s) = shared
        .secrets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(debate_id)
    {
        return Ok(Some(s.clone()));
    }
    let secret = shared.store.dispatch_secret(debate_id).await?;
    if let Some(s) = &secret {
        let mut cache = shared.secrets.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= SECRET_CACHE {
            cache.clear();
        }
        cache.insert(debate_id.to_string(), s.clone());
    }
    Ok(secret)
}

async fn handle(shared: &Arc<Shared>, msg: jetstream::Message) {
    let delivered = msg.info().map(|i| i.delivered).unwrap_or(1);
    let last_delivery = delivered >= streams::MAX_DELIVER;
    let kind = metrics_kind(shared.config.kind);
    let tref: TaskRef = match serde_json::from_slice(&msg.payload) {
        Ok(t) => t,
        Err(e) => {
            reject(
                msg,
                RejectReason::Invalid,
                "not a task reference",
                e.to_string(),
            )
            .await;
            return;
        }
    };
    if tref.schema_version != SCHEMA_VERSION {
        let v = format!("schema version {}", tref.schema_version);
        reject(msg, RejectReason::Invalid, "another schema version", v).await;
        return;
    }
    if let Err(e) = tref.validate() {
        reject(
            msg,
            RejectReason::Invalid,
            "an invalid task reference",
            e.to_string(),
        )
        .await;
        return;
    }
    let msg = Arc::new(msg);
    let looked_up = {
        // Progress acks keep the message ours while Redis is slow to answer (a failing
        // connection takes seconds to give up); on the last delivery the worker waits for
        // Redis rather than give the message back.
        let _alive = keep_alive(shared, &msg);
        verify_and_lookup(shared, &tref, last_delivery).await
    };
    let (secret, lookup) = match looked_up {
        Ok(Verified::Yes(secret, lookup)) => (secret, *lookup),
        Ok(Verified::NoSecret) => {
            // The debate exists but Redis lost its secret: the coordinator (which keeps a
            // copy) is told and puts it back; the message returns to the queue meanwhile.
            // On the last delivery it ends here, and the coordinator's deadline re-sends
            // the attempt (by then with the secret restored).
            parley_telemetry::metrics().task_rejected(RejectReason::NoSecret);
            tracing::warn!(task = %tref.id, debate = %tref.debate_id, "the debate's dispatch secret is missing in Redis; telling the coordinator and giving the task back");
            notify_secret_missing(shared, &tref).await;
            let _ = if last_delivery {
                msg.ack_with(AckKind::Term).await
            } else {
                msg.ack_with(AckKind::Nak(Some(Duration::from_secs(2))))
                    .await
            };
            return;
        }
        Ok(Verified::No) => {
            let detail = format!("task {} attempt {}", tref.id, tref.attempt);
            reject_shared(
                msg,
                RejectReason::Forged,
                "its dispatch token does not verify (not sent by the coordinator, or its \
                 debate's keys are gone)",
                detail,
            )
            .await;
            return;
        }
        Err(e) if last_delivery => {
            tracing::error!(task = %tref.id, error = %e, "cannot reach Redis on the task's last delivery; abandoning it (the coordinator dispatches it again at its deadline)");
            parley_telemetry::metrics().task_dead_lettered(kind, DeadLetterReason::Abandoned);
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
        Err(e) => {
            tracing::warn!(task = %tref.id, error = %e, "cannot read the task's state; giving the task back");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(2))))
                .await;
            return;
        }
    };
    if let Some(done) = &lookup.done {
        tracing::info!(task = %tref.id, "result already stored; skipping");
        let _ = shared
            .store
            .drop_task_body(&tref.debate_id, &tref.body_field())
            .await;
        notify(shared, done).await;
        let _ = msg.ack().await;
        return;
    }
    if !lookup.debate_exists {
        tracing::warn!(task = %tref.id, "the task's debate is gone (expired or deleted); dropping the task");
        parley_telemetry::metrics().task_dead_lettered(kind, DeadLetterReason::DebateGone);
        let _ = msg.ack_with(AckKind::Term).await;
        return;
    }
    if lookup.cancelled {
        tracing::info!(task = %tref.id, "the debate was cancelled; skipping the task");
        let _ = msg.ack().await;
        return;
    }
    if let Some(answered) = &lookup.answered {
        tracing::info!(task = %tref.id, attempt = tref.attempt, "attempt already answered; skipping");
        notify(shared, answered).await;
        let _ = msg.ack().await;
        return;
    }
    // A coordinator of an older build put the whole task in the message (a rolling
    // upgrade: workers first); it stored no body.
    let body = lookup
        .body
        .as_deref()
        .map(serde_json::from_str::<Task>)
        .or_else(|| serde_json::from_slice::<Task>(&msg.payload).ok().map(Ok));
    let task: Task = match body {
        Some(Ok(t))
            if t.id == tref.id && t.debate_id == tref.debate_id && t.attempt == tref.attempt =>
        {
            t
        }
        Some(Ok(_)) | Some(Err(_)) => {
            tracing::error!(task = %tref.id, "the stored task body does not decode to this task; dropping it");
            parley_telemetry::metrics().task_dead_lettered(kind, DeadLetterReason::Undecodable);
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
        None => {
            tracing::warn!(task = %tref.id, attempt = tref.attempt, "the task's body is not stored (its debate expired?); dropping the task");
            parley_telemetry::metrics().task_dead_lettered(kind, DeadLetterReason::DebateGone);
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
    };
    // The body is the coordinator's (only the services write Redis); it is still checked
    // like any task before it reaches a prompt.
    if let Err(e) = task.validate() {
        reject_shared(msg, RejectReason::Invalid, "an invalid task", e.to_string()).await;
        return;
    }
    let span = task_span(&msg, &task, delivered);
    let _running = Running::new(shared, &task.id);
    handle_task(shared, msg, task, &secret, delivered)
        .instrument(span)
        .await;
}

/// [`reject`] for a message already shared with a progress-ack task.
async fn reject_shared(
    msg: Arc<jetstream::Message>,
    reason: RejectReason,
    why: &str,
    detail: String,
) {
    parley_telemetry::metrics().task_rejected(reason);
    tracing::warn!(subject = %msg.subject, reason = reason.as_str(), detail = %preview(&detail, 300), "refusing a task message: {why}");
    let _ = msg.ack_with(AckKind::Term).await;
}

/// What [`verify_and_lookup`] found.
enum Verified {
    /// The token verifies: the debate's secret (it seals a stashed answer) and the task's
    /// lookup.
    Yes(String, Box<TaskLookup>),
    /// The token does not verify, or the debate has no secret and no state (unknown, or its
    /// keys expired).
    No,
    /// The debate's state exists but its secret does not: Redis lost it.
    NoSecret,
}

/// Checks the reference's dispatch token against the debate's secret, then reads what the
/// worker must know before running the task. On the last delivery keeps trying for up to
/// [`STORE_PATIENCE`] (Redis restarting).
async fn verify_and_lookup(
    shared: &Shared,
    tref: &TaskRef,
    last_delivery: bool,
) -> Result<Verified, parley_cluster::redis_store::RedisStoreError> {
    let deadline = tokio::time::Instant::now() + STORE_PATIENCE;
    let mut backoff = Duration::from_millis(100);
    loop {
        let attempt = async {
            let secret = match secret_of(shared, &tref.debate_id).await? {
                Some(secret) if parley_cluster::dispatch::verify_ref(&secret, tref) => secret,
                Some(_) => return Ok(Verified::No),
                None => {
                    let lookup = shared
                        .store
                        .lookup_task(&tref.debate_id, &tref.id, tref.attempt)
                        .await?;
                    return Ok(if lookup.debate_exists {
                        Verified::NoSecret
                    } else {
                        Verified::No
                    });
                }
            };
            shared
                .store
                .lookup_task(&tref.debate_id, &tref.id, tref.attempt)
                .await
                .map(|lookup| Verified::Yes(secret, Box::new(lookup)))
        };
        let e = match attempt.await {
            Ok(l) => return Ok(l),
            Err(e) if last_delivery && tokio::time::Instant::now() + backoff < deadline => e,
            Err(e) => return Err(e),
        };
        tracing::warn!(task = %tref.id, error = %e, retry_ms = backoff.as_millis() as u64, "cannot read the task's state on its last delivery; retrying");
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            // The drain gives the task up (see `handle`): no more retries.
            _ = shared.hard_stop.cancelled() => return Err(e),
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Sends progress acks for `msg` until dropped, so JetStream does not redeliver it.
fn keep_alive(shared: &Shared, msg: &Arc<jetstream::Message>) -> AbortOnDrop {
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

/// Runs a task (its stored result and this attempt's answer already checked) unless a
/// stashed answer settles it or another worker runs it right now.
async fn handle_task(
    shared: &Arc<Shared>,
    msg: Arc<jetstream::Message>,
    task: Task,
    secret: &str,
    delivered: i64,
) {
    let last_delivery = delivered >= streams::MAX_DELIVER;
    let worker = shared.config.name.as_str();
    let kind = metrics_kind(shared.config.kind);
    // An answer another worker could not store in Redis: store it, no LLM call. Only a
    // redelivery or a later attempt can have one (an answer is stashed right before its
    // task is handed back), so the first delivery of a first attempt skips the lookup.
    let may_be_stashed = delivered > 1 || task.attempt > 1;
    let stashed = if may_be_stashed {
        shared.stash.lookup(&task, secret).await
    } else {
        None
    };
    if let Some(stashed) = stashed {
        tracing::info!(task = %task.id, "result found in the stash; storing it");
        let stored = {
            let _alive = keep_alive(shared, &msg);
            store_result(shared, &stashed).await
        };
        match stored {
            Some(Stored::DebateGone) => {
                tracing::warn!(task = %task.id, "the debate is gone (expired or deleted); its stashed result is dropped");
                shared.stash.remove(&task.id).await;
                parley_telemetry::metrics().task_dead_lettered(kind, DeadLetterReason::DebateGone);
                let _ = msg.ack().await;
            }
            Some(_) => {
                shared.stash.remove(&task.id).await;
                notify(shared, &stashed).await;
                let _ = msg.ack().await;
            }
            None if last_delivery => {
                // The answer stays in the stash: the attempt the coordinator sends at this
                // one's deadline finds it there.
                tracing::error!(task = %task.id, "cannot store the stashed result on the task's last delivery; abandoning this delivery (the coordinator dispatches the task again at its deadline)");
                parley_telemetry::metrics().task_dead_lettered(kind, DeadLetterReason::Abandoned);
                let _ = msg.ack_with(AckKind::Term).await;
            }
            None => {
                tracing::warn!(task = %task.id, "cannot store the stashed result yet; giving the task back");
                let _ = msg
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(2))))
                    .await;
            }
        }
        return;
    }

    // One run of a task at a time: a re-dispatch that races a still-running call (e.g. after
    // a coordinator takeover) waits for that call's result. On its last delivery it runs
    // anyway, so a task is never dropped because a crashed worker's claim has not expired.
    let claim_owner = format!(
        "{worker}-{}",
        msg.info().map(|i| i.stream_sequence).unwrap_or(0)
    );
    // Capped: Redis refuses an expiry it cannot represent, and a claim only needs to
    // outlive the call.
    let claim_ttl = task
        .timeout_ms
        .min(MAX_CLAIM_TIMEOUT_MS)
        .saturating_add(30_000);
    match shared
        .store
        .claim_task(&task.debate_id, &task.id, &claim_owner, claim_ttl)
        .await
    {
        Ok(true) => {}
        Ok(false) if !last_delivery => {
            tracing::info!(task = %task.id, "another worker runs this task; waiting for its result");
            // 2, 4, 6, 8 s: about 20 s for the other run to finish before the last delivery.
            let delay = Duration::from_secs(2 * delivered.max(1) as u64);
            let _ = msg.ack_with(AckKind::Nak(Some(delay))).await;
            return;
        }
        Ok(false) => {}
        Err(e) if last_delivery => {
            tracing::warn!(task = %task.id, error = %e, "cannot claim the task on its last delivery; running it anyway");
        }
        Err(e) => {
            tracing::warn!(task = %task.id, error = %e, "cannot claim the task; giving it back");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(2))))
                .await;
            return;
        }
    }
    run_claimed(shared, msg, &task, secret, last_delivery).await;
    // (A claim not released expires after its TTL.)
    let release = shared
        .store
        .release_claim(&task.debate_id, &task.id, &claim_owner);
    let _ = until_hard_stop(shared, release).await;
}

/// Runs `fut` unless the drain hands running tasks back first (`None`).
async fn until_hard_stop<T>(
    shared: &Shared,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        v = fut => Some(v),
        _ = shared.hard_stop.cancelled() => None,
    }
}

/// The longest task timeout a claim covers (24 h); a larger `timeoutMs` claims for this.
const MAX_CLAIM_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

async fn run_claimed(
    shared: &Arc<Shared>,
    msg: Arc<jetstream::Message>,
    task: &Task,
    secret: &str,
    last_delivery: bool,
) {
    let worker = shared.config.name.as_str();
    let kind = metrics_kind(shared.config.kind);
    let progress = keep_alive(shared, &msg);
    let in_flight = parley_telemetry::metrics().task_started(kind);
    let run = {
        let shared = shared.clone();
        let task = task.clone();
        tokio::spawn(async move { execute(&shared, &task).await }.in_current_span())
    };
    let outcome = tokio::select! {
        r = run => Some(r),
        _ = shared.hard_stop.cancelled() => None,
    };
    // Progress acks go on until the result is stored (see `store_result`).
    let _progress = progress;
    let mut result = match outcome {
        None if last_delivery => {
            // Shutting down on the task's last delivery: an error result (tried once, the
            // drain deadline has passed) so the coordinator sends a new attempt at once.
            let r = error_result(
                task,
                worker,
                ErrorKind::Undelivered,
                "the worker shut down while running the task on its last delivery".into(),
            );
            // Within the drain's hand-back reserve.
            let patience = hand_back_reserve(shared.config.drain_timeout) / 4;
            let stored = tokio::time::timeout(patience, shared.store.store_result(&r)).await;
            if matches!(stored, Ok(Ok(_))) {
                notify(shared, &r).await;
                let _ = msg.ack().await;
            } else {
                parley_telemetry::metrics().task_dead_lettered(kind, DeadLetterReason::Abandoned);
                let _ = msg.ack_with(AckKind::Term).await;
            }
            return;
        }
        None => {
            let _ = msg.ack_with(AckKind::Nak(None)).await;
            return;
        }
        Some(Ok(r)) => r,
        Some(Err(e)) if last_delivery => error_result(
            task,
            worker,
            ErrorKind::Internal,
            format!("the worker could not run the task: {e}"),
        ),
        Some(Err(e)) => {
            tracing::error!(task = %task.id, error = %e, "task crashed; giving it back");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
            return;
        }
    };
    let provider = match &result.outcome {
        TaskOutcome::Ok(o) => o.metadata.provider.clone(),
        TaskOutcome::Error(e) => e.provider.clone(),
    }
    .unwrap_or_else(|| "none".into());
    if let Some(delay) = hand_back_delay(&result, last_delivery) {
        parley_telemetry::metrics().rate_limit_handback(&provider);
        tracing::Span::current().record("task.outcome", "handed_back");
        // A long rate-limit wait: give the task back to the queue with that delay rather
        // than hold a slot (or spend the node's retry budget). The coordinator hears of it
        // and moves the task's deadline. On the last delivery the error is stored instead
        // and the coordinator's node retry takes over.
        tracing::info!(task = %task.id, delay_ms = delay.as_millis() as u64, "rate limited; handing the task back");
        notify_hand_back(shared, task, delay).await;
        let _ = msg.ack_with(AckKind::Nak(Some(delay))).await;
        return;
    }
    if last_delivery {
        if let TaskOutcome::Error(e) = &mut result.outcome {
            if e.kind == ErrorKind::RateLimited {
                e.message = format!(
                    "{} (the task was handed back on each of its {} deliveries)",
                    e.message,
                    streams::MAX_DELIVER
                );
            }
        }
    }
    match store_result(shared, &result).await {
        Some(Stored::DebateGone) => {
            tracing::warn!(task = %task.id, "the debate is gone (expired or deleted); its result is dropped");
            parley_telemetry::metrics().task_dead_lettered(kind, DeadLetterReason::DebateGone);
            let _ = msg.ack().await;
            return;
        }
        Some(_) => {}
        None => {
            // Keep the answer for the next delivery or attempt (see `stash`) before handing
            // the task back.
            match shared.stash.put(&result, secret).await {
                Ok(()) => {
                    tracing::warn!(task = %task.id, "cannot store the result; stashed it")
                }
                Err(e) => {
                    tracing::error!(task = %task.id, error = %e, "cannot store the result nor stash it; its call will run again");
                    lock(&shared.lost).push(task.id.clone());
                }
            }
            if last_delivery {
                // No delivery is left to hand back to: the coordinator dispatches a new
                // attempt at this one's deadline (which finds a stashed success).
                tracing::error!(task = %task.id, "cannot store the result on the task's last delivery; abandoning it (the coordinator dispatches it again at its deadline)");
                parley_telemetry::metrics().task_dead_lettered(kind, DeadLetterReason::Abandoned);
                let _ = msg.ack_with(AckKind::Term).await;
            } else {
                tracing::warn!(task = %task.id, "giving the task back");
                let _ = msg
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(2))))
                    .await;
            }
            return;
        }
    }
    notify(shared, &result).await;
    if let Err(e) = msg.ack().await {
        tracing::warn!(task = %task.id, error = %e, "ack failed; the redelivery will find the stored result");
    }
    let outcome = match &result.outcome {
        TaskOutcome::Ok(_) => {
            in_flight.finish(&provider, parley_telemetry::Outcome::Ok);
            "ok"
        }
        TaskOutcome::Error(e) => {
            in_flight.finish(&provider, parley_telemetry::Outcome::Error);
            parley_telemetry::metrics().task_failed(kind, e.kind.as_str());
            tracing::Span::current().record("otel.status_code", "ERROR");
            "error"
        }
    };
    tracing::Span::current().record("task.outcome", outcome);
    tracing::info!(task = %task.id, attempt = task.attempt, outcome, "task done");
}

/// How long a worker keeps trying to store a result while Redis is unavailable (a restart,
/// a failover) before it gives the task back: an LLM answer is worth waiting for. The same
/// patience applies to reading a task's state on its last delivery.
pub const STORE_PATIENCE: Duration = Duration::from_secs(60);

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Stores `result` in Redis, retrying with backoff for up to [`STORE_PATIENCE`] (the
/// task's progress acks keep JetStream from redelivering it meanwhile). `None` when it
/// could not, or the drain deadline passed.
async fn store_result(shared: &Shared, result: &TaskResult) -> Option<Stored> {
    let deadline = tokio::time::Instant::now() + STORE_PATIENCE;
    let mut backoff = Duration::from_millis(100);
    loop {
        // A call may wait out Redis's reconnection attempts: the drain does not.
        let stored = until_hard_stop(shared, shared.store.store_result(result)).await?;
        match stored {
            Ok(stored) => return Some(stored),
            Err(e) if tokio::time::Instant::now() + backoff < deadline => {
                tracing::warn!(task = %result.task_id, error = %e, retry_ms = backoff.as_millis() as u64, "cannot store the result yet; retrying");
            }
            Err(e) => {
                tracing::warn!(task = %result.task_id, error = %e, "cannot store the result");
                return None;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shared.hard_stop.cancelled() => return None,
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// How long to hand a rate-limited task back for, when it should be.
fn hand_back_delay(result: &TaskResult, last_delivery: bool) -> Option<Duration> {
    match &result.outcome {
        TaskOutcome::Error(TaskError {
            kind: ErrorKind::RateLimited,
            retry_after_ms: Some(ms),
            ..
        }) if !last_delivery => Some(Duration::from_millis((*ms).clamp(100, 600_000))),
        _ => None,
    }
}

/// The context snapshot of `debate_id`'s spec: from the cache, else from Redis.
async fn snapshot_of(
    shared: &Shared,
    debate_id: &str,
) -> parley_cluster::redis_store::Result<Arc<Option<ContextFiles>>> {
    if let Some(s) = shared
        .snapshots
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(debate_id)
    {
        return Ok(s.clone());
    }
    let files = Arc::new(
        shared
            .store
            .spec(debate_id)
            .await?
            .and_then(|s| s.context_files),
    );
    let mut cache = shared.snapshots.lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= SNAPSHOT_CACHE {
        cache.clear();
    }
    cache.insert(debate_id.to_string(), files.clone());
    Ok(files)
}

async fn execute(shared: &Shared, task: &Task) -> TaskResult {
    let worker = shared.config.name.as_str();
    let provider = match shared.registry.provider_for(&task.agent) {
        Ok(p) => p,
        Err(e) => return parley_llm::task_result(task, worker, Err(e)),
    };
    let files = if task.kind.worker() == WorkerKind::Agent && !task.agent.tools.is_empty() {
        match snapshot_of(shared, &task.debate_id).await {
            Ok(f) => f,
            Err(e) => {
                return error_result(
                    task,
                    worker,
                    ErrorKind::Network,
                    format!("cannot read the debate's context snapshot from Redis: {e}"),
                )
            }
        }
    } else {
        Arc::new(None)
    };
    let timeout = Duration::from_millis(task.timeout_ms.max(1));
    let started = std::time::Instant::now();
    match tokio::time::timeout(
        timeout,
        shared
            .executor
            .execute(task, provider.as_ref(), worker, files.as_ref().as_ref()),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => error_result(
            task,
            worker,
            ErrorKind::Timeout,
            format!("task timed out after {} ms", started.elapsed().as_millis()),
        ),
    }
}

/// Tells the coordinator a result of this attempt is stored: a [`ResultNotice`], ids only;
/// the content stays in Redis.
async fn notify(shared: &Shared, result: &TaskResult) {
    publish_notice(shared, &ResultNotice::of(result)).await;
}

/// Tells the coordinator the task went back to the queue for `delay` (it moves the task's
/// deadline accordingly).
async fn notify_hand_back(shared: &Shared, task: &Task, delay: Duration) {
    let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
    let notice = ResultNotice {
        handed_back_ms: Some(ms.min(parley_protocol::MAX_HANDED_BACK_MS)),
        ..ResultNotice::result(&task.debate_id, &task.id, task.attempt)
    };
    publish_notice(shared, &notice).await;
}

/// Tells the coordinator this debate's dispatch secret is missing in Redis (it restores it).
async fn notify_secret_missing(shared: &Shared, tref: &TaskRef) {
    let notice = ResultNotice {
        secret_missing: true,
        ..ResultNotice::result(&tref.debate_id, &tref.id, tref.attempt)
    };
    publish_notice(shared, &notice).await;
}

async fn publish_notice(shared: &Shared, notice: &ResultNotice) {
    let Ok(body) = serde_json::to_vec(notice) else {
        return;
    };
    if let Err(e) = shared
        .nats
        .publish(subjects::results_subject(&notice.debate_id), body.into())
        .await
    {
        // The coordinator also polls Redis for its in-flight tasks.
        tracing::warn!(task = %notice.task_id, error = %e, "cannot publish the result notification");
    }
}
