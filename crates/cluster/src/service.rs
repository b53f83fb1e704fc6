//! What every service does at start-up and shutdown: connect to NATS and Redis, serve the
//! `/metrics`, `/healthz`, `/readyz` endpoint (ready while both NATS and Redis answer), and
//! turn SIGTERM / ctrl-c into a cancelled [`CancellationToken`]. Tracing with OTLP export and
//! JSON logs is `parley_telemetry::init_telemetry`, re-exported here.

use std::net::SocketAddr;
use std::sync::Arc;

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
        Box::pin(async move { store.ping().await.map_err(|e| format!("redis: {e}")) })
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

/// Cancels the token on SIGTERM or ctrl-c.
pub fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = match signal(SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    token.cancel();
                    return;
                }
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        token.cancel();
    });
}

/// What every service does first: connect NATS and Redis, then serve `/metrics`,
/// `/healthz` and `/readyz` on `metrics_addr` (if any) until `shutdown`.
pub async fn start_service(
    nats: &NatsEndpoint,
    redis_url: &str,
    metrics_addr: Option<std::net::SocketAddr>,
    shutdown: &CancellationToken,
) -> anyhow::Result<(async_nats::Client, RedisStore)> {
    let (nats, store) = connect_backends(nats, redis_url).await?;
    serve_health(metrics_addr, nats.clone(), store.clone(), shutdown.clone()).await?;
    Ok((nats, store))
}
