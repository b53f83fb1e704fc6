//! The consume loop: start-up, pulling tasks into free slots, and the drain.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures::StreamExt;
use parley_cluster::{streams, RedisStore};
use parley_llm::{ProviderSettings, Registry};
use parley_protocol::{subjects, WorkerKind};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::delivery::handle;
use crate::evals;
use crate::shared::{lock, running_tasks, Shared};
use crate::stash::ResultStash;
use crate::{hand_back_reserve, TaskExecutor, WorkerConfig};

/// How long one pull request waits on the server for tasks.
pub(crate) const PULL_EXPIRES: Duration = Duration::from_secs(1);
/// How long after its expiry a pull is given up on the client side.
pub(crate) const PULL_GRACE: Duration = Duration::from_millis(500);

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
pub(crate) async fn start(
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
    // A JetStream without a leader for a while (`503`) is an outage to wait out.
    let consumer = streams::wait_for_task_consumer(&js, config.kind, config.ack_wait, shutdown)
        .await
        .map_err(|e| anyhow::anyhow!("while creating the task consumer: {e}"))?;
    let Some(consumer) = consumer else {
        // Signalled while waiting: the caller's `unless_shutdown` stops this start-up.
        return std::future::pending().await;
    };
    let stash = ResultStash::open(&js, config.stream_replicas, shutdown)
        .await
        .map_err(|e| anyhow::anyhow!("while opening the result stash: {e}"))?;
    let Some(stash) = stash else {
        return std::future::pending().await;
    };
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

/// Drains the worker by `deadline` (the loop has stopped pulling): lets running tasks
/// finish until [`hand_back_reserve`] before it, hands the rest back, flushes acks and
/// hand-backs to NATS, and names what it gave up on.
pub(crate) async fn drain(
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

/// Hands back (naks) every message a pull still delivers after shutdown was requested,
/// until the pull ends (its server-side expiry).
pub(crate) async fn hand_back_rest(mut batch: jetstream::consumer::pull::Batch) {
    while let Ok(Some(Ok(msg))) =
        tokio::time::timeout(PULL_EXPIRES + PULL_GRACE, batch.next()).await
    {
        let _ = msg.ack_with(AckKind::Nak(None)).await;
    }
}

/// Publishes the task consumer's backlog (`num_pending`, `num_ack_pending`) as metrics
/// every few seconds.
pub(crate) async fn report_queue(
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
