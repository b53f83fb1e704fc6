//! The JetStream streams and consumers of the distributed mode. The coordinator creates
//! the streams (the only role allowed to, see `deploy/nats/parley.conf`); a worker waits
//! for the tasks stream ([`wait_for_stream`]) and creates its durable consumer if missing.
//!
//! - `PARLEY_TASKS` (`parley.tasks.>`): work-queue retention, a message is removed once a
//!   worker acks it; 2 minute duplicate window for `Nats-Msg-Id`. Limits ([`TASKS_LIMITS`]):
//!   age, message count, bytes and message size, discarding *new* messages when full (a
//!   publish then fails instead of a queued task vanishing). A message that exhausted its
//!   deliveries is a dead letter: the coordinator records it from JetStream's
//!   `MAX_DELIVERIES` advisory and deletes it from the stream.
//! - `PARLEY_EVENTS` (`parley.debates.*.events`): limits retention, replayable, bounded by
//!   age and bytes ([`EVENTS_LIMITS`]); the oldest events go first.
//! - Durable pull consumers `agent-workers` / `judge-workers` on the tasks stream: explicit
//!   ack, [`ACK_WAIT`], [`MAX_DELIVER`].
//!
//! A stream created by an older build gets its limits set at start-up (`update_stream`).
//!
//! Each stream is kept on `replicas` servers (setting `stream_replicas`: 1 on a single
//! `nats-server`, 3 on a JetStream cluster, where a stream then survives the loss of any one
//! node). A stream with another replica count is scaled to it at start-up; the durable
//! consumers inherit the stream's count.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use parley_protocol::{subjects, WorkerKind};

/// How long a worker may hold a task without acking or sending progress.
pub const ACK_WAIT: Duration = Duration::from_secs(30);
/// Deliveries of one task message before JetStream gives up on it.
pub const MAX_DELIVER: i64 = 5;

/// The bounds of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    pub max_age: Duration,
    pub max_messages: i64,
    pub max_bytes: i64,
    /// Bytes of one message; task messages are references of a few hundred bytes, events
    /// a few KiB (free text is clipped).
    pub max_message_size: i32,
    pub discard: stream::DiscardPolicy,
}

/// `PARLEY_TASKS`: a task still queued after a week is long past its deadline (the
/// coordinator re-dispatched it); a million queued tasks or 1 GiB is a backlog no deployment
/// should reach — past it, publishing fails and the debate's actor reports it.
pub const TASKS_LIMITS: StreamLimits = StreamLimits {
    max_age: Duration::from_secs(7 * 24 * 3600),
    max_messages: 1_000_000,
    max_bytes: 1 << 30,
    max_message_size: 64 * 1024,
    discard: stream::DiscardPolicy::New,
};

/// `PARLEY_EVENTS`: a week of events, at most 1 GiB (the oldest are dropped first).
pub const EVENTS_LIMITS: StreamLimits = StreamLimits {
    max_age: Duration::from_secs(7 * 24 * 3600),
    max_messages: -1,
    max_bytes: 1 << 30,
    max_message_size: 64 * 1024,
    discard: stream::DiscardPolicy::Old,
};

impl StreamLimits {
    fn apply(&self, c: &mut stream::Config, replicas: usize) {
        c.num_replicas = replicas;
        c.max_age = self.max_age;
        c.max_messages = self.max_messages;
        c.max_bytes = self.max_bytes;
        c.max_message_size = self.max_message_size;
        c.discard = self.discard;
    }

    fn holds(&self, c: &stream::Config, replicas: usize) -> bool {
        c.num_replicas == replicas
            && c.max_age == self.max_age
            && c.max_messages == self.max_messages
            && c.max_bytes == self.max_bytes
            && c.max_message_size == self.max_message_size
            && c.discard == self.discard
    }
}

/// Creates the stream if missing; sets its limits and replica count if it exists with
/// others.
async fn bounded_stream(
    js: &jetstream::Context,
    mut config: stream::Config,
    limits: StreamLimits,
    replicas: usize,
) -> Result<stream::Stream, Error> {
    limits.apply(&mut config, replicas);
    let stream = js.get_or_create_stream(config).await?;
    let current = &stream.cached_info().config;
    if limits.holds(current, replicas) {
        return Ok(stream);
    }
    let mut updated = current.clone();
    limits.apply(&mut updated, replicas);
    tracing::info!(stream = %updated.name, replicas, "setting the stream's limits and replicas");
    js.update_stream(updated.clone()).await?;
    Ok(js.get_stream(&updated.name).await?)
}

pub type Error = async_nats::Error;

async fn retry<T, F, Fut>(what: &str, mut f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    // Two processes creating the same stream at once may race; the second try finds it.
    let mut last = None;
    for i in 0..5u64 {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                tracing::debug!(what, error = %e, "retrying JetStream setup");
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(200 * (i + 1))).await;
            }
        }
    }
    Err(last.unwrap_or_else(|| format!("cannot set up {what}").into()))
}

/// Creates (or updates) `PARLEY_TASKS` with `replicas` replicas.
pub async fn tasks_stream(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<stream::Stream, Error> {
    retry("the tasks stream", || async {
        bounded_stream(
            js,
            stream::Config {
                name: subjects::TASKS_STREAM.into(),
                subjects: vec!["parley.tasks.>".into()],
                retention: stream::RetentionPolicy::WorkQueue,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            },
            TASKS_LIMITS,
            replicas,
        )
        .await
    })
    .await
}

/// Creates (or updates) `PARLEY_EVENTS` with `replicas` replicas.
pub async fn events_stream(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<stream::Stream, Error> {
    retry("the events stream", || async {
        bounded_stream(
            js,
            stream::Config {
                name: subjects::EVENTS_STREAM.into(),
                subjects: vec!["parley.debates.*.events".into()],
                retention: stream::RetentionPolicy::Limits,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            },
            EVENTS_LIMITS,
            replicas,
        )
        .await
    })
    .await
}

pub fn consumer_name(kind: WorkerKind) -> &'static str {
    match kind {
        WorkerKind::Agent => "agent-workers",
        WorkerKind::Judge => "judge-workers",
    }
}

pub fn tasks_subject(kind: WorkerKind) -> &'static str {
    match kind {
        WorkerKind::Agent => subjects::TASKS_AGENT,
        WorkerKind::Judge => subjects::TASKS_JUDGE,
    }
}

/// Whether a JetStream setup error is one waiting cannot cure: the server refused the
/// request itself (`400`: a name or configuration it will never accept). Everything else —
/// `503` (no stream or meta leader while a node restarts or an election runs), a stream not
/// found during an election, timeouts, no responders, a lost connection — is an outage to
/// wait out.
pub fn is_permanent(e: &Error) -> bool {
    // `async_nats::jetstream::Error` displays as `<description> (code <code>, error code <n>)`.
    e.to_string().contains("(code 400")
}

/// Runs `f` until it succeeds, waiting (backing off up to 5 s) while JetStream cannot do
/// it — a stream or meta leader being elected, a node restarting, NATS unreachable — as a
/// service started while Redis is down waits for Redis ([`crate::service::wait_for_redis`]):
/// a service started during an outage comes up when it ends instead of exiting. The first
/// failure is logged as a warning (`JetStream cannot set up <what> yet; waiting for it`),
/// then one in every 10 tries. An error the server gives for the request itself (a 400,
/// see [`is_permanent`]) fails at once; a shutdown while waiting answers `None`.
pub async fn wait_for_jetstream<T, F, Fut>(
    what: &str,
    shutdown: &tokio_util::sync::CancellationToken,
    mut f: F,
) -> Result<Option<T>, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut backoff = Duration::from_millis(200);
    let mut tries = 0u64;
    loop {
        let e = match f().await {
            Ok(v) => {
                if tries > 0 {
                    tracing::info!(what, tries = tries + 1, "JetStream set up {what}");
                }
                return Ok(Some(v));
            }
            Err(e) if is_permanent(&e) => return Err(e),
            Err(e) => e,
        };
        if tries.is_multiple_of(10) {
            tracing::warn!(what, tries = tries + 1, error = %e, "JetStream cannot set up {what} yet; waiting for it");
        }
        tries += 1;
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.cancelled() => return Ok(None),
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// The durable pull consumer of one worker kind, created if missing; waits while
/// JetStream cannot answer (see [`wait_for_jetstream`]); `None` after `shutdown`.
/// `ack_wait` applies when this call creates the consumer (the first worker to start
/// decides).
pub async fn wait_for_task_consumer(
    js: &jetstream::Context,
    kind: WorkerKind,
    ack_wait: Duration,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<Option<consumer::PullConsumer>, Error> {
    wait_for_jetstream("the task consumer", shutdown, || {
        task_consumer_once(js, kind, ack_wait)
    })
    .await
}

/// One try at [`wait_for_task_consumer`].
async fn task_consumer_once(
    js: &jetstream::Context,
    kind: WorkerKind,
    ack_wait: Duration,
) -> Result<consumer::PullConsumer, Error> {
    let stream = js.get_stream(subjects::TASKS_STREAM).await?;
    let name = consumer_name(kind);
    Ok(stream
        .get_or_create_consumer(
            name,
            consumer::pull::Config {
                durable_name: Some(name.into()),
                filter_subject: tasks_subject(kind).into(),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait,
                max_deliver: MAX_DELIVER,
                ..Default::default()
            },
        )
        .await?)
}

/// Waits until the stream `name` exists (a worker started before any coordinator), or
/// `shutdown` is cancelled (false). Logs once while waiting.
pub async fn wait_for_stream(
    js: &jetstream::Context,
    name: &str,
    shutdown: &tokio_util::sync::CancellationToken,
) -> bool {
    let mut logged = false;
    loop {
        match js.get_stream(name).await {
            Ok(_) => return true,
            Err(e) => {
                if !logged {
                    tracing::info!(stream = name, error = %e, "waiting for a coordinator to create the stream");
                    logged = true;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = shutdown.cancelled() => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio_util::sync::CancellationToken;

    /// What a JetStream without a meta leader answers a consumer create (as
    /// `async_nats::jetstream::Error` displays it).
    const UNAVAILABLE: &str =
        "JetStream error: JetStream system temporarily unavailable (code 503, error code 10008)";

    #[tokio::test(start_paused = true)]
    async fn a_jetstream_503_at_start_up_is_waited_out_past_any_number_of_tries() {
        // The worker used to give up after 5 tries; 20 failures in a row (over a minute of
        // backing off) must still end in the consumer.
        let tries = AtomicU32::new(0);
        let got = wait_for_jetstream("the task consumer", &CancellationToken::new(), || async {
            if tries.fetch_add(1, Ordering::SeqCst) < 20 {
                Err::<u32, Error>(UNAVAILABLE.into())
            } else {
                Ok(7)
            }
        })
        .await
        .unwrap();
        assert_eq!(got, Some(7));
        assert_eq!(tries.load(Ordering::SeqCst), 21);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_request_fails_at_once_and_a_shutdown_stops_the_wait() {
        let tries = AtomicU32::new(0);
        let refused = "JetStream error: consumer name in subject does not match durable name \
                       in request (code 400, error code 10017)";
        let e = wait_for_jetstream("the task consumer", &CancellationToken::new(), || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err::<u32, Error>(refused.into())
        })
        .await
        .unwrap_err();
        assert!(e.to_string().contains("code 400"), "{e}");
        assert_eq!(tries.load(Ordering::SeqCst), 1);

        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            stop.cancel();
        });
        let got = wait_for_jetstream("the task consumer", &shutdown, || async {
            Err::<u32, Error>("timed out".into())
        })
        .await
        .unwrap();
        assert_eq!(got, None);
    }
}
