//! One delivered message: decoded, its dispatch token verified, the task's state looked
//! up, and settled at once when it is done, cancelled or gone.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use parley_cluster::redis_store::TaskLookup;
use parley_cluster::streams;
use parley_protocol::{preview, Task, TaskRef, SCHEMA_VERSION};
use parley_telemetry::{DeadLetterReason, RejectReason};
use tracing::Instrument as _;

use crate::results::{notify, notify_secret_missing};
use crate::run_task::handle_task;
use crate::shared::{keep_alive, metrics_kind, Running, Shared, SECRET_CACHE};
use crate::STORE_PATIENCE;

/// The `task` span of one delivery, a child of the coordinator's node span whose context
/// came in the message's `traceparent` header.
pub(crate) fn task_span(msg: &jetstream::Message, task: &Task, delivered: i64) -> tracing::Span {
    let span = parley_cluster::task_span(&tracing::Span::none(), task);
    span.record("task.delivery", delivered);
    parley_telemetry::set_parent(
        &span,
        parley_telemetry::extract_headers(msg.headers.as_ref()),
    );
    span
}

/// Terminates a task message the worker refuses to run (it is never redelivered).
pub(crate) async fn reject(
    msg: jetstream::Message,
    reason: RejectReason,
    why: &str,
    detail: String,
) {
    parley_telemetry::metrics().task_rejected(reason);
    tracing::warn!(subject = %msg.subject, reason = reason.as_str(), detail = %preview(&detail, 300), "refusing a task message: {why}");
    let _ = msg.ack_with(AckKind::Term).await;
}

/// The dispatch secret of a debate: from the cache, else from Redis.
pub(crate) async fn secret_of(
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

pub(crate) async fn handle(shared: &Arc<Shared>, msg: jetstream::Message) {
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
pub(crate) async fn reject_shared(
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
pub(crate) enum Verified {
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
pub(crate) async fn verify_and_lookup(
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
