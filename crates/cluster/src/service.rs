//! What every service does at start-up and shutdown: connect to NATS and Redis, serve the
//! `/metrics`, `/healthz`, `/readyz` endpoint (ready while both NATS and Redis answer),
//! turn the first SIGTERM / ctrl-c into a cancelled [`CancellationToken`] (a second one exits
//! at once), and exit with a status that says how the drain went ([`exit_service`]). Tracing
//! with OTLP export and JSON logs is `parley_telemetry::init_telemetry`, re-exported here.
//!
//! # Shutdown contract
//! Each service's `run(config, shutdown)` returns by its drain deadline whatever the state
//! of NATS and Redis: it drains what it can, gives up on the rest at the deadline and
//! returns [`DrainIncomplete`] naming it; `main` then calls [`exit_service`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use parley_telemetry::Readiness;
use tokio_util::sync::CancellationToken;

use crate::{NatsEndpoint, RedisStore};

pub use parley_telemetry::init_telemetry;

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` (none: nothing) until `shutdown`.
pub async fn serve_health(
    addr: Option<SocketAddr>,
    nats: async_nats::Client,
    store: RedisStore,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let Some(addr) = addr else {
        return Ok(());
    };
    let redis: Readiness = Arc::new(move || {
        let store = store.clone();
        Box::pin(async move {
            store
                .ping()
                .await
                .map_err(|e| parley_telemetry::NotReady::dependency("redis", e))
        })
    });
    let ready = parley_telemetry::all_ready(vec![parley_telemetry::nats_ready(nats), redis]);
    let bound = parley_telemetry::serve_http(addr, ready, async move {
        shutdown.cancelled().await;
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "cannot serve metrics on {addr} (--metrics-addr / PARLEY_METRICS_ADDR): {e:#}"
        )
    })?;
    tracing::info!(addr = %bound, "metrics and health endpoints listening");
    Ok(())
}

/// Connects to NATS (retrying until it is up; with the endpoint's credentials, see
/// [`crate::nats`]) and to the Redis store: what every service needs first.
pub async fn connect_backends(
    nats: &NatsEndpoint,
    redis_url: &str,
) -> anyhow::Result<(async_nats::Client, RedisStore)> {
    let nats = crate::nats::connect_service(nats).await?;
    let store = RedisStore::connect(redis_url)
        .await
        .context("while connecting to Redis")?;
    Ok((nats, store))
}

/// Cancels the token on the first SIGTERM or SIGINT (ctrl-c): the service drains. A second
/// signal exits the process at once with status 128 + the signal number (143 for SIGTERM,
/// 130 for SIGINT), without draining: what it held is redelivered or expires (see
/// `docs/src/operations/drain.md`).
pub fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        // Both listeners are installed once, so a second signal is never missed.
        let Some(mut signals) = Signals::install() else {
            // No handler: ctrl-c alone, once.
            if tokio::signal::ctrl_c().await.is_ok() {
                token.cancel();
            }
            return;
        };
        let first = signals.next().await;
        tracing::info!(
            signal = first.name(),
            "shutdown requested; draining (a second signal exits at once)"
        );
        token.cancel();
        let second = signals.next().await;
        tracing::warn!(
            signal = second.name(),
            "second signal: exiting at once without draining"
        );
        eprintln!("{}: second signal, exiting at once", second.name());
        std::process::exit(second.exit_code());
    });
}

/// The SIGTERM and SIGINT listeners of the process.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// `None` when a handler cannot be installed.
    fn install() -> Option<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Some(Self {
                term: signal(SignalKind::terminate()).ok()?,
                int: signal(SignalKind::interrupt()).ok()?,
            })
        }
        #[cfg(not(unix))]
        {
            Some(Self {})
        }
    }

    /// The next signal (a closed listener counts as a signal: nothing can wait on it).
    async fn next(&mut self) -> Signal {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => Signal::Terminate,
                _ = self.int.recv() => Signal::Interrupt,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Interrupt
        }
    }
}

/// A shutdown signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Terminate,
    Interrupt,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Terminate => "SIGTERM",
            Signal::Interrupt => "SIGINT",
        }
    }

    /// 128 + the signal number, as a shell reports a process killed by it.
    pub fn exit_code(self) -> i32 {
        match self {
            Signal::Terminate => 143,
            Signal::Interrupt => 130,
        }
    }
}

/// Exit status of a service that gave up on something at its drain deadline (see
/// [`DrainIncomplete`]).
pub const EXIT_DRAIN_INCOMPLETE: i32 = 5;

/// How long a service waits for the trace exporter to flush before it exits anyway.
pub const TELEMETRY_FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// The service stopped at its drain deadline with work it could not finish, hand back or
/// release: each entry names one thing it gave up on. Nothing is lost by it — JetStream
/// redelivers unacknowledged tasks after their ack wait and a lease that was not released
/// expires after its TTL — but the exit status says so ([`EXIT_DRAIN_INCOMPLETE`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("drain incomplete; gave up on: {}", .gave_up.join("; "))]
pub struct DrainIncomplete {
    pub gave_up: Vec<String>,
}

impl DrainIncomplete {
    /// `Ok` when nothing was given up on.
    pub fn check(gave_up: Vec<String>) -> anyhow::Result<()> {
        if gave_up.is_empty() {
            Ok(())
        } else {
            Err(DrainIncomplete { gave_up }.into())
        }
    }
}

/// The last thing a service's `main` does: maps the result of its `run` to an exit status
/// (0 clean drain, [`EXIT_DRAIN_INCOMPLETE`] when it gave up on something, 1 any other
/// error), flushes the trace exporter for at most [`TELEMETRY_FLUSH_LIMIT`], and exits the
/// process without waiting for anything else (a background task stuck on an unreachable
/// NATS or Redis cannot hold the process).
pub fn exit_service(result: anyhow::Result<()>, telemetry: parley_telemetry::TelemetryGuard) -> ! {
    let mut code = match &result {
        Ok(()) => 0,
        Err(e) if e.downcast_ref::<DrainIncomplete>().is_some() => {
            tracing::warn!(error = %e, "stopped at the drain deadline");
            EXIT_DRAIN_INCOMPLETE
        }
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "service failed");
            eprintln!("error: {e:#}");
            1
        }
    };
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let flushing = std::thread::Builder::new()
        .name("parley-telemetry-flush".into())
        .spawn(move || {
            let r = telemetry.shutdown();
            let _ = done_tx.send(r);
        });
    if flushing.is_ok() {
        match done_rx.recv_timeout(TELEMETRY_FLUSH_LIMIT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: {e:#}"),
            Err(_) => {
                eprintln!(
                    "warning: gave up flushing spans to the trace exporter after {} s",
                    TELEMETRY_FLUSH_LIMIT.as_secs()
                );
                if code == 0 {
                    code = EXIT_DRAIN_INCOMPLETE;
                }
            }
        }
    }
    std::process::exit(code)
}

/// Runs `fut` unless `shutdown` comes first (`None`): for start-up steps that wait on a
/// backend (NATS retries its first connection forever), so a service that is asked to
/// stop before it is ready exits at once.
pub async fn unless_shutdown<T>(
    shutdown: &CancellationToken,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        v = fut => Some(v),
        _ = shutdown.cancelled() => None,
    }
}

/// What every service does first: connect NATS and Redis, then serve `/metrics`,
/// `/healthz` and `/readyz` on `metrics_addr` (if any) until `shutdown`.
pub async fn start_service(
    nats: &NatsEndpoint,
    redis_url: &str,
    metrics_addr: Option<std::net::SocketAddr>,
    shutdown: &CancellationToken,
) -> anyhow::Result<(async_nats::Client, RedisStore)> {
    let nats = crate::nats::connect_service(nats).await?;
    let store = Box::pin(connect_redis(redis_url, shutdown)).await?;
    serve_health(metrics_addr, nats.clone(), store.clone(), shutdown.clone()).await?;
    Ok((nats, store))
}

/// Connects to the Redis store, waiting while Redis cannot be reached (see
/// [`wait_for_redis`]).
pub async fn connect_redis(url: &str, shutdown: &CancellationToken) -> anyhow::Result<RedisStore> {
    wait_for_redis("Redis", shutdown, || async {
        RedisStore::connect(url).await.map_err(|e| match e {
            crate::redis_store::RedisStoreError::Redis(e) => e,
            other => redis::RedisError::from((
                redis::ErrorKind::Client,
                "cannot connect",
                other.to_string(),
            )),
        })
    })
    .await
}

/// Runs `connect` until it succeeds, waiting (backing off up to 2 s) while Redis cannot
/// be reached — a server starting, a Sentinel-managed master failing over, a network cut —
/// as the NATS connection waits for NATS: a service started during an outage comes up
/// when it ends instead of exiting. An error retrying cannot cure (a malformed URL, refused
/// credentials) fails at once, and so does a shutdown while waiting. `what` names the
/// connection in the log line (`cannot reach Redis yet; waiting for it`) and errors.
pub async fn wait_for_redis<T, F, Fut>(
    what: &str,
    shutdown: &CancellationToken,
    mut connect: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<T>>,
{
    let mut backoff = Duration::from_millis(200);
    let mut waiting = false;
    loop {
        let e = match connect().await {
            Ok(v) => {
                if waiting {
                    tracing::info!(what, "connected to Redis");
                }
                return Ok(v);
            }
            Err(e) if !matches!(e.retry_method(), redis::RetryMethod::NoRetry) => e,
            Err(e) => return Err(anyhow::Error::new(e).context(format!("while connecting {what}"))),
        };
        if !waiting {
            tracing::warn!(what, error = %e, "cannot reach Redis yet; waiting for it");
            waiting = true;
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.cancelled() => {
                return Err(anyhow::anyhow!("stopped while waiting for {what} (last error: {e})"));
            }
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}
