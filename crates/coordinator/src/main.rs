//! `parley-coordinator`: owns debate state, publishes tasks to the workers. See
//! `parley_coordinator::service`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use parley_coordinator::service::{run, CoordinatorConfig};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    name = "parley-coordinator",
    version,
    about = "The Parley debate coordinator"
)]
struct Args {
    /// NATS server URL.
    #[arg(long, env = "PARLEY_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// Redis URL.
    #[arg(
        long,
        env = "PARLEY_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
    /// Debate ownership lease TTL in milliseconds (how long a crashed replica's debates
    /// wait before another replica takes them over).
    #[arg(long, env = "PARLEY_LEASE_TTL_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(500..))]
    lease_ttl_ms: u64,
    /// Address of `/metrics`, `/healthz` and `/readyz` (`off` to disable).
    #[arg(long, env = "PARLEY_METRICS_ADDR", default_value = parley_telemetry::DEFAULT_METRICS_ADDR,
          value_parser = parse_metrics_addr)]
    metrics_addr: MetricsAddr,
}

/// A parsed `--metrics-addr`: an address, or none for `off`.
type MetricsAddr = Option<std::net::SocketAddr>;

fn parse_metrics_addr(s: &str) -> Result<MetricsAddr, String> {
    parley_coordinator::telemetry::parse_metrics_addr(s)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let _telemetry = match parley_coordinator::telemetry::init_telemetry("parley-coordinator") {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(4);
        }
    };
    let token = CancellationToken::new();
    let signal_token = token.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            if let Ok(mut term) = signal(SignalKind::terminate()) {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            } else {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        signal_token.cancel();
    });
    let mut config = CoordinatorConfig::new(
        args.nats_url,
        args.redis_url,
        Duration::from_millis(args.lease_ttl_ms),
    );
    config.metrics_addr = args.metrics_addr;
    match run(config, token).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
