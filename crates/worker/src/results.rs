//! Storing a result in Redis and telling the coordinator (result notices).

use std::time::Duration;

use parley_cluster::redis_store::Stored;
use parley_protocol::{subjects, ResultNotice, Task, TaskRef, TaskResult};

use crate::shared::{until_hard_stop, Shared};
use crate::STORE_PATIENCE;

/// Stores `result` in Redis, retrying with backoff for up to [`STORE_PATIENCE`] (the
/// task's progress acks keep JetStream from redelivering it meanwhile). `None` when it
/// could not, or the drain deadline passed.
pub(crate) async fn store_result(shared: &Shared, result: &TaskResult) -> Option<Stored> {
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

/// Tells the coordinator a result of this attempt is stored: a [`ResultNotice`], ids only;
/// the content stays in Redis.
pub(crate) async fn notify(shared: &Shared, result: &TaskResult) {
    publish_notice(shared, &ResultNotice::of(result)).await;
}

/// Tells the coordinator the task went back to the queue for `delay` (it moves the task's
/// deadline accordingly).
pub(crate) async fn notify_hand_back(shared: &Shared, task: &Task, delay: Duration) {
    let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
    let notice = ResultNotice {
        handed_back_ms: Some(ms.min(parley_protocol::MAX_HANDED_BACK_MS)),
        ..ResultNotice::result(&task.debate_id, &task.id, task.attempt)
    };
    publish_notice(shared, &notice).await;
}

/// Tells the coordinator this debate's dispatch secret is missing in Redis (it restores it).
pub(crate) async fn notify_secret_missing(shared: &Shared, tref: &TaskRef) {
    let notice = ResultNotice {
        secret_missing: true,
        ..ResultNotice::result(&tref.debate_id, &tref.id, tref.attempt)
    };
    publish_notice(shared, &notice).await;
}

pub(crate) async fn publish_notice(shared: &Shared, notice: &ResultNotice) {
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
