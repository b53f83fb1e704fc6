//! `parley-coordinator`: owns debate state, publishes tasks to the workers. See
//! `parley_coordinator::service`. Exit status: 0 after a clean drain, 5 when it gave up on
//! something at the drain deadline, 4 invalid settings, 1 any other error; a second signal
//! exits at once (130 / 143).

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use parley_cluster::settings::{at_least, pick, CommonArgs, Problems, DEFAULT_LEASE_TTL_MS};
use parley_coordinator::service::{run, CoordinatorConfig};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    name = "parley-coordinator",
    version,
    about = "The Parley debate coordinator",
    long_about = "The Parley debate coordinator. Settings are layered: defaults, then the \
                  --settings TOML file, then PARLEY_* variables, then flags."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Debate ownership lease TTL in milliseconds: how long a crashed replica's debates
    /// wait before another replica takes them over (at least 500) [default: 10000].
    #[arg(long, env = "PARLEY_LEASE_TTL_MS")]
    lease_ttl_ms: Option<u64>,
    /// Drain deadline in seconds: after SIGTERM / ctrl-c the coordinator stops its debates,
    /// releases their leases and exits within it, whatever the state of NATS and Redis
    /// [default: 10].
    #[arg(long, env = "PARLEY_DRAIN_SECS")]
    drain_secs: Option<u64>,
}

/// The coordinator's settings, layered and validated (every problem at once).
fn settings(args: &Args) -> Result<CoordinatorConfig, String> {
    let mut problems = Problems::default();
    let (file, common) = args.common.resolve(&mut problems);
    let lease_ttl_ms = at_least(
        &mut problems,
        "lease_ttl_ms",
        pick(args.lease_ttl_ms, file.lease_ttl_ms, DEFAULT_LEASE_TTL_MS),
        500,
    );
    let drain_secs = at_least(
        &mut problems,
        "drain_secs",
        pick(
            args.drain_secs,
            file.drain_secs,
            parley_coordinator::service::DEFAULT_DRAIN.as_secs(),
        ),
        1,
    );
    problems.into_result()?;
    let mut config = CoordinatorConfig::new(
        common.nats_url,
        common.redis_url,
        Duration::from_millis(lease_ttl_ms),
    );
    config.metrics_addr = common.metrics_addr;
    config.drain = Duration::from_secs(drain_secs);
    Ok(config)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let config = match settings(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(4);
        }
    };
    let telemetry = match parley_cluster::init_telemetry("parley-coordinator") {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(4);
        }
    };
    let token = CancellationToken::new();
    parley_cluster::cancel_on_signal(token.clone());

    // 0 clean drain, 5 gave up on something at the drain deadline, 1 any other error.
    let result = run(config, token).await;
    parley_cluster::exit_service(result, telemetry)
}
