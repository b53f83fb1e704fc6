//! Telemetry shared by the service binaries: tracing with OTLP export and JSON logs (see
//! `parley_telemetry::init_telemetry`), and the `/metrics`, `/healthz`, `/readyz` endpoint,
//! ready while both NATS and Redis answer.

use std::net::SocketAddr;
use std::sync::Arc;

use parley_telemetry::Readiness;
use tokio_util::sync::CancellationToken;

use crate::RedisStore;

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
