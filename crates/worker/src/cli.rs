//! Flags of the worker binaries and their `main`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use parley_protocol::WorkerKind;
use tokio_util::sync::CancellationToken;

use parley_cluster::cancel_on_signal;
use parley_cluster::settings::{self, at_least, Problems, SettingsError, WorkerSettings};

use crate::{TaskExecutor, WorkerConfig};

/// The flags of a worker binary named `name`: `--settings` and one per key (see
/// `parley_cluster::settings::WorkerSettings`).
pub fn command(name: &'static str) -> clap::Command {
    settings::command::<WorkerSettings>(
        clap::Command::new(name)
            .version(env!("CARGO_PKG_VERSION"))
            .long_about(
                "A Parley worker. Settings are layered: defaults, then the --settings TOML \
                 file, then PARLEY_* variables, then flags.",
            ),
    )
}

/// The worker's settings, layered and validated (every problem at once).
pub fn settings(
    matches: &clap::ArgMatches,
    kind: WorkerKind,
) -> Result<WorkerConfig, SettingsError> {
    let mut problems = Problems::default();
    let (common, s) = settings::layered::<WorkerSettings>(matches, &mut problems);
    let common = common.resolve(&mut problems);
    let concurrency = at_least(&mut problems, "concurrency", s.concurrency, 1);
    let ack_wait_secs = at_least(&mut problems, "ack_wait_secs", s.ack_wait_secs, 1);
    let drain_secs = at_least(&mut problems, "drain_secs", s.drain_secs, 1);
    let max_tokens = at_least(&mut problems, "max_tokens", s.max_tokens, 1);
    let (base_url, limits) = match s.config {
        Some(p) => provider_settings_from_config(&p).unwrap_or_else(|e| {
            problems.push("config", format!("{e:#}"));
            Default::default()
        }),
        None => Default::default(),
    };
    problems.into_result()?;
    // Every call this worker makes is priced with the file's prices and the config's
    // inline ones.
    parley_llm::set_prices(common.prices.clone().with_inline(&limits));
    Ok(WorkerConfig {
        kind,
        nats_url: common.nats_url,
        nats_creds: common.nats_creds,
        nats_inbox_prefix: common.nats_inbox_prefix,
        redis_url: common.redis_url,
        stream_replicas: common.stream_replicas,
        redis_min_replicas: common.redis_min_replicas,
        base_url,
        limits,
        max_tokens,
        concurrency,
        name: format!("{}-worker-{}", kind.as_str(), std::process::id()),
        drain_timeout: Duration::from_secs(drain_secs),
        ack_wait: Duration::from_secs(ack_wait_secs),
        metrics_addr: common.metrics_addr,
    })
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
    let problems = parley_protocol::validate_providers(&file.providers);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        anyhow::bail!("{}: {}", path.display(), list.join("; "));
    }
    if let Some(url) = &file.base_url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            anyhow::bail!(
                "{}: baseUrl must be an http:// or https:// URL",
                path.display()
            );
        }
    }
    Ok((file.base_url, file.providers))
}

/// `main` of a worker binary. Invalid settings exit with status 4, naming every problem;
/// otherwise the process exits when the worker stopped: 0 after a clean drain, 5 when it
/// gave up on something at the drain deadline, 1 on any other error (see
/// `parley_cluster::exit_service`).
pub async fn main(kind: WorkerKind, executor: Arc<dyn TaskExecutor>) -> anyhow::Result<()> {
    let service = match kind {
        WorkerKind::Agent => "parley-agent-worker",
        WorkerKind::Judge => "parley-judge-worker",
    };
    let config = match settings(&command(service).get_matches(), kind) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(4);
        }
    };
    let telemetry = parley_telemetry::init_telemetry(service)?;
    let token = CancellationToken::new();
    cancel_on_signal(token.clone());
    let result = crate::run(config, executor, token).await;
    parley_cluster::exit_service(result, telemetry)
}
