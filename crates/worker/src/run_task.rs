//! Running a verified task: a stashed answer, the claim, the call, and the result stored
//! or the task handed back.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use parley_cluster::redis_store::Stored;
use parley_cluster::streams;
use parley_protocol::{
    ContextFiles, ErrorKind, Task, TaskError, TaskOutcome, TaskResult, WorkerKind,
};
use parley_telemetry::DeadLetterReason;
use tracing::Instrument as _;

use crate::hand_back_reserve;
use crate::results::{notify, notify_hand_back, store_result};
use crate::shared::{
    error_result, keep_alive, lock, metrics_kind, until_hard_stop, Shared, SNAPSHOT_CACHE,
};

/// Runs a task (its stored result and this attempt's answer already checked) unless a
/// stashed answer settles it or another worker runs it right now.
pub(crate) async fn handle_task(
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

/// The longest task timeout a claim covers (24 h); a larger `timeoutMs` claims for this.
pub(crate) const MAX_CLAIM_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

pub(crate) async fn run_claimed(
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

/// How long to hand a rate-limited task back for, when it should be.
pub(crate) fn hand_back_delay(result: &TaskResult, last_delivery: bool) -> Option<Duration> {
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
pub(crate) async fn snapshot_of(
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

pub(crate) async fn execute(shared: &Shared, task: &Task) -> TaskResult {
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
