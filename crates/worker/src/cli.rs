//! Flags of the worker binaries and their `main`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use parley_protocol::WorkerKind;
use tokio_util::sync::CancellationToken;

use crate::{TaskExecutor, WorkerConfig};

#[derive(Parser, Debug)]
pub struct WorkerArgs {
    /// NATS server URL.
    #[arg(long, env = "PARLEY_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    /// Redis URL.
    #[arg(
        long,
        env = "PARLEY_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// Debate configuration JSON; its `baseUrl` is the default OpenAI-compatible endpoint.
    #[arg(long, env = "PARLEY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Tasks run at once.
    #[arg(long, env = "PARLEY_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,
    /// Seconds in-flight tasks may run after SIGTERM / ctrl-c.
    #[arg(long, env = "PARLEY_DRAIN_SECS", default_value_t = 20)]
    pub drain_secs: u64,
    /// JetStream ack wait of the task consumer in seconds (used when this worker creates
    /// it): how soon a crashed worker's tasks are redelivered.
    #[arg(long, env = "PARLEY_ACK_WAIT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub ack_wait_secs: u64,
    /// Address of `/metrics`, `/healthz` and `/readyz` (`off` to disable).
    #[arg(long, env = "PARLEY_METRICS_ADDR", default_value = parley_telemetry::DEFAULT_METRICS_ADDR,
          value_parser = parse_metrics_addr)]
    pub metrics_addr: MetricsAddr,
}

/// A parsed `--metrics-addr`: an address, or none for `off`.
pub type MetricsAddr = Option<std::net::SocketAddr>;

fn parse_metrics_addr(s: &str) -> Result<MetricsAddr, String> {
    parley_telemetry::parse_metrics_addr(s)
}

/// The operator settings of a debate configuration file: the global `baseUrl` and the
/// per-provider rate limits (`providers`).
pub fn provider_settings_from_config(
    path: &std::path::Path,
) -> anyhow::Result<(
    Option<String>,
    std::collections::BTreeMap<String, parley_protocol::ProviderLimits>,
)> {
    let bytes = std::fs::read(path).with_context(|| format!("while reading {}", path.display()))?;
    let file: parley_protocol::DebateConfigFile = serde_json::from_slice(&bytes)
        .with_context(|| format!("while parsing {}", path.display()))?;
    Ok((file.base_url, file.providers))
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

/// `main` of a worker binary.
pub async fn main(kind: WorkerKind, executor: Arc<dyn TaskExecutor>) -> anyhow::Result<()> {
    let args = WorkerArgs::parse();
    let service = match kind {
        WorkerKind::Agent => "parley-agent-worker",
        WorkerKind::Judge => "parley-judge-worker",
    };
    let _telemetry = parley_telemetry::init_telemetry(service)?;
    let (base_url, limits) = match &args.config {
        Some(p) => provider_settings_from_config(p)?,
        None => Default::default(),
    };
    let config = WorkerConfig {
        kind,
        nats_url: args.nats_url,
        redis_url: args.redis_url,
        base_url,
        limits,
        concurrency: args.concurrency.max(1),
        name: format!("{}-worker-{}", kind.as_str(), std::process::id()),
        drain_timeout: Duration::from_secs(args.drain_secs),
        ack_wait: Duration::from_secs(args.ack_wait_secs),
        metrics_addr: args.metrics_addr,
    };
    let token = CancellationToken::new();
    cancel_on_signal(token.clone());
    crate::run(config, executor, token).await
}
