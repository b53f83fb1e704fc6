//! Flags of the worker binaries and their `main`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use parley_protocol::WorkerKind;
use tokio_util::sync::CancellationToken;

use parley_cluster::cancel_on_signal;
use parley_cluster::settings::{
    at_least, CommonArgs, Layer, Problems, DEFAULT_ACK_WAIT_SECS, DEFAULT_CONCURRENCY,
    DEFAULT_DRAIN_SECS,
};

use crate::{TaskExecutor, WorkerConfig};

#[derive(Parser, Debug)]
#[command(
    version,
    long_about = "A Parley worker. Settings are layered: defaults, then the --settings TOML \
                  file, then PARLEY_* variables, then flags."
)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The operator's debate configuration JSON: its `baseUrl` (the default
    /// OpenAI-compatible endpoint) and `providers` (per provider: `baseUrl`,
    /// `allowedModels`, rate limits shared by every replica).
    #[arg(long, env = "PARLEY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Tasks run at once [default: 8].
    #[arg(long, env = "PARLEY_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// Drain deadline in seconds: after SIGTERM / ctrl-c the worker exits within it,
    /// letting in-flight tasks finish until shortly before it and handing the rest back
    /// [default: 20].
    #[arg(long, env = "PARLEY_DRAIN_SECS")]
    pub drain_secs: Option<u64>,
    /// JetStream ack wait of the task consumer in seconds (used when this worker creates
    /// it): how soon a crashed worker's tasks are redelivered [default: 30].
    #[arg(long, env = "PARLEY_ACK_WAIT_SECS")]
    pub ack_wait_secs: Option<u64>,
    /// The most completion tokens one LLM call may ask for: a task's `maxTokens` above it,
    /// or none (an evaluation, a participant without one), is sent as this; the
    /// `providers` section may set lower caps per provider and model [default: 16384].
    #[arg(long, env = "PARLEY_MAX_TOKENS")]
    pub max_tokens: Option<u32>,
}

/// The worker's settings, layered and validated (every problem at once).
pub fn settings(args: &WorkerArgs, kind: WorkerKind) -> Result<WorkerConfig, String> {
    let mut problems = Problems::default();
    let max_tokens_default = parley_protocol::limits::DEFAULT_MAX_TOKENS;
    let defaults = Layer::default()
        .with("concurrency", Some(DEFAULT_CONCURRENCY as u64))
        .with("ack_wait_secs", Some(DEFAULT_ACK_WAIT_SECS))
        .with("drain_secs", Some(DEFAULT_DRAIN_SECS))
        .with("max_tokens", Some(u64::from(max_tokens_default)));
    let flags = Layer::default()
        .with_path("config", args.config.as_deref())
        .with("concurrency", args.concurrency.map(|n| n as u64))
        .with("ack_wait_secs", args.ack_wait_secs)
        .with("drain_secs", args.drain_secs)
        .with("max_tokens", args.max_tokens.map(u64::from));
    let (s, common) = args.common.resolve_layered(&mut problems, defaults, flags);
    // (The defaults layer sets these keys; the fallbacks are the same values.)
    let concurrency = at_least(
        &mut problems,
        "concurrency",
        s.concurrency.unwrap_or(DEFAULT_CONCURRENCY),
        1,
    );
    let ack_wait_secs = at_least(
        &mut problems,
        "ack_wait_secs",
        s.ack_wait_secs.unwrap_or(DEFAULT_ACK_WAIT_SECS),
        1,
    );
    let drain_secs = at_least(
        &mut problems,
        "drain_secs",
        s.drain_secs.unwrap_or(DEFAULT_DRAIN_SECS),
        1,
    );
    let max_tokens = at_least(
        &mut problems,
        "max_tokens",
        s.max_tokens.unwrap_or(max_tokens_default),
        1,
    );
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
    let args = WorkerArgs::parse();
    let config = match settings(&args, kind) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(4);
        }
    };
    let service = match kind {
        WorkerKind::Agent => "parley-agent-worker",
        WorkerKind::Judge => "parley-judge-worker",
    };
    let telemetry = parley_telemetry::init_telemetry(service)?;
    let token = CancellationToken::new();
    cancel_on_signal(token.clone());
    let result = crate::run(config, executor, token).await;
    parley_cluster::exit_service(result, telemetry)
}
