//! Following a debate's events: its latest progress (for `debate_status`) and a bounded
//! wait for it to come to rest (for `debate_result`), reporting progress as it goes.
//!
//! Both read the backend's event stream from the start (a replay, then the new events):
//! the latest event says the phase, the round and the tasks done. Every wait is bounded
//! by the caller's deadline, and ends early when the client cancels the call.

use std::time::Duration;

use futures::StreamExt;
use parley_web::{ApiError, Backend};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::view::Progress;

/// How long a status read waits for the first event of the replay.
const FIRST_EVENT: Duration = Duration::from_secs(2);
/// A replay is taken as read once no event came for this long.
const REPLAY_IDLE: Duration = Duration::from_millis(200);
/// The longest a status read spends on the replay.
const STATUS_READ: Duration = Duration::from_secs(4);
/// Progress notifications are sent at most this often (and at the last event).
const NOTIFY_EVERY: Duration = Duration::from_millis(500);
/// When the event stream ends early, the state is read this often until the deadline.
const POLL_EVERY: Duration = Duration::from_secs(1);

/// The debate's latest progress, from a replay of its events (bounded in time).
pub async fn latest_progress(backend: &dyn Backend, id: &str) -> Result<Progress, ApiError> {
    let mut events = backend.events(id, 0).await?;
    let started = Instant::now();
    let mut latest = Progress::default();
    loop {
        let idle = if latest.seq == 0 {
            FIRST_EVENT
        } else {
            REPLAY_IDLE
        };
        let left = STATUS_READ.saturating_sub(started.elapsed());
        match tokio::time::timeout(idle.min(left), events.next()).await {
            Ok(Some(e)) => {
                if let Some(p) = serde_json::from_str::<Value>(&e.json)
                    .ok()
                    .as_ref()
                    .and_then(Progress::from_event)
                {
                    latest = p;
                }
            }
            Ok(None) | Err(_) => return Ok(latest),
        }
    }
}

/// Where a progress report goes (an MCP progress notification).
pub trait ProgressSink: Send + Sync {
    /// `seq` grows with every call (the MCP progress value); `message` says where the
    /// debate is.
    fn report(&self, seq: u64, message: String) -> futures::future::BoxFuture<'_, ()>;
}

/// Follows the debate until it comes to rest (ends or asks questions), `deadline`
/// passes, or `cancel` fires; returns its state and latest progress then.
pub async fn wait_for_rest(
    backend: &dyn Backend,
    id: &str,
    deadline: Instant,
    cancel: &CancellationToken,
    sink: Option<&dyn ProgressSink>,
) -> Result<(Value, Progress), ApiError> {
    let state = backend.state(id).await?;
    if crate::view::is_at_rest(&state) {
        let progress = latest_progress(backend, id).await.unwrap_or_default();
        return Ok((state, progress));
    }
    let mut latest = Progress::default();
    let mut reported: Option<(u64, Instant)> = None;
    let mut stream_open = true;
    let mut events = match backend.events(id, 0).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(debate = id, "cannot follow the events: {e}");
            stream_open = false;
            None
        }
    };
    loop {
        let next = async {
            match events.as_mut() {
                Some(s) if stream_open => s.next().await,
                _ => {
                    tokio::time::sleep(POLL_EVERY).await;
                    None
                }
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep_until(deadline) => break,
            e = next => match e {
                Some(e) => {
                    let Some(p) = serde_json::from_str::<Value>(&e.json)
                        .ok()
                        .as_ref()
                        .and_then(Progress::from_event)
                    else {
                        continue;
                    };
                    latest = p;
                    // A rest in the replay may be over (questions answered, a failure
                    // retried): the state says whether the debate rests now.
                    if latest.is_rest() && crate::view::is_at_rest(&backend.state(id).await?) {
                        break;
                    }
                    if let Some(sink) = sink {
                        let due = reported.is_none_or(|(seq, at)| {
                            latest.seq > seq && at.elapsed() >= NOTIFY_EVERY
                        });
                        if due {
                            sink.report(latest.seq, format!("running: {}", latest.describe()))
                                .await;
                            reported = Some((latest.seq, Instant::now()));
                        }
                    }
                }
                None => {
                    // The stream ended (or never opened): read the state instead.
                    stream_open = false;
                    let state = backend.state(id).await?;
                    if crate::view::is_at_rest(&state) {
                        break;
                    }
                }
            }
        }
    }
    let state = backend.state(id).await?;
    if let Some(sink) = sink {
        if reported.is_none_or(|(seq, _)| latest.seq > seq) {
            sink.report(
                latest.seq.max(1),
                format!("{}: {}", crate::view::status(&state), latest.describe()),
            )
            .await;
        }
    }
    Ok((state, latest))
}
