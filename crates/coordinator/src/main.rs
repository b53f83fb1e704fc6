//! `parley-coordinator`: owns debate state, publishes tasks to the workers. See
//! `parley_coordinator::service`. Exit status: 0 after a clean drain, 5 when it gave up on
//! something at the drain deadline, 4 invalid settings, 1 any other error; a second signal
//! exits at once (130 / 143).

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use parley_cluster::settings::{
    at_least, format_duration, CommonArgs, DurationSetting, Layer, Problems, DEFAULT_LEASE_TTL_MS,
    DEFAULT_RETENTION, DEFAULT_TASK_DEADLINE_MARGIN_SECS,
};
use parley_coordinator::service::{run, CoordinatorConfig, DEFAULT_MAX_PENDING_REQUESTS};
use parley_protocol::{limits, SubmissionPolicy};
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
    /// How long a finished (completed, failed, cancelled) debate stays in Redis: seconds,
    /// or a number with s, m, h or d; 0 keeps it forever [default: 7d].
    #[arg(long, env = "PARLEY_RETENTION")]
    retention: Option<String>,
    /// Seconds added to each task's timeout to make its deadline: past it the task is
    /// presumed lost and dispatched again as a new attempt [default: 300].
    #[arg(long, env = "PARLEY_TASK_DEADLINE_MARGIN_SECS")]
    task_deadline_margin_secs: Option<u64>,
    /// Drain deadline in seconds: after SIGTERM / ctrl-c the coordinator stops its debates,
    /// releases their leases and exits within it, whatever the state of NATS and Redis
    /// [default: 10].
    #[arg(long, env = "PARLEY_DRAIN_SECS")]
    drain_secs: Option<u64>,
    /// The operator's debate configuration (the workers' file): its `providers` section's
    /// `allowedModels` are enforced when a debate is submitted.
    #[arg(long, env = "PARLEY_CONFIG", value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Cap on any participant's `maxTokens` [default: 16384].
    #[arg(long, env = "PARLEY_MAX_TOKENS")]
    max_tokens: Option<u32>,
    /// Cap on one debate's spend in dollars; a debate without a budget gets it as its
    /// budget [default: none].
    #[arg(long, env = "PARLEY_MAX_DEBATE_USD")]
    max_debate_usd: Option<f64>,
    /// Cap on one debate's spend in tokens [default: none].
    #[arg(long, env = "PARLEY_MAX_DEBATE_TOKENS")]
    max_debate_tokens: Option<u64>,
    /// Requests handled at once; more are answered `unavailable` [default: 256].
    #[arg(long, env = "PARLEY_MAX_PENDING_REQUESTS")]
    max_pending_requests: Option<usize>,
    /// Event followers (consumers clients read a debate's events from) open at once, for
    /// the whole cluster; past it `parley.debates.follow` answers `unavailable` [default:
    /// 512].
    #[arg(long, env = "PARLEY_MAX_FOLLOWERS")]
    max_followers: Option<usize>,
    /// Seconds a debate waits for answers to its clarification questions; then every open
    /// question is answered "NA" and the debate goes on (at least 1) [default: 86400, a
    /// day].
    #[arg(long, env = "PARLEY_CLARIFICATION_TIMEOUT_SECS")]
    clarification_timeout_secs: Option<u64>,
    /// Seconds a debate's actor stays in memory while the debate only waits (tasks in
    /// flight, questions unanswered); then the debate goes to rest, a few hundred bytes,
    /// and wakes on its next message; 0: never [default: 30].
    #[arg(long, env = "PARLEY_REST_AFTER_SECS")]
    rest_after_secs: Option<u64>,
    /// Ed25519 key file that signs each settled debate's decision record (base64 of a
    /// 32-byte seed; `parley record --generate-key DIR` makes one) [default: none, records
    /// are unsigned].
    #[arg(long, env = "PARLEY_RECORD_SIGNING_KEY", value_name = "FILE")]
    record_signing_key: Option<std::path::PathBuf>,
}

/// The coordinator's settings, layered and validated (every problem at once).
fn settings(args: &Args) -> Result<CoordinatorConfig, String> {
    let mut problems = Problems::default();
    let drain_default = parley_coordinator::service::DEFAULT_DRAIN.as_secs();
    let clarification_default =
        parley_coordinator::service::DEFAULT_CLARIFICATION_TIMEOUT.as_secs();
    let rest_default = parley_coordinator::deps::DEFAULT_REST_AFTER.as_secs();
    let defaults = Layer::default()
        .with("lease_ttl_ms", Some(DEFAULT_LEASE_TTL_MS))
        .with("retention", Some(format_duration(DEFAULT_RETENTION)))
        .with(
            "task_deadline_margin_secs",
            Some(DEFAULT_TASK_DEADLINE_MARGIN_SECS),
        )
        .with("drain_secs", Some(drain_default))
        .with("max_tokens", Some(u64::from(limits::DEFAULT_MAX_TOKENS)))
        .with(
            "max_pending_requests",
            Some(DEFAULT_MAX_PENDING_REQUESTS as u64),
        )
        .with(
            "max_followers",
            Some(parley_cluster::events::DEFAULT_MAX_FOLLOWERS as u64),
        )
        .with("clarification_timeout_secs", Some(clarification_default))
        .with("rest_after_secs", Some(rest_default));
    let flags = Layer::default()
        .with("lease_ttl_ms", args.lease_ttl_ms)
        .with("retention", args.retention.clone())
        .with("task_deadline_margin_secs", args.task_deadline_margin_secs)
        .with("drain_secs", args.drain_secs)
        .with_path("config", args.config.as_deref())
        .with("max_tokens", args.max_tokens.map(u64::from))
        .with("max_debate_usd", args.max_debate_usd)
        .with("max_debate_tokens", args.max_debate_tokens)
        .with(
            "max_pending_requests",
            args.max_pending_requests.map(|n| n as u64),
        )
        .with("max_followers", args.max_followers.map(|n| n as u64))
        .with(
            "clarification_timeout_secs",
            args.clarification_timeout_secs,
        )
        .with("rest_after_secs", args.rest_after_secs)
        .with_path("record_signing_key", args.record_signing_key.as_deref());
    let (s, common) = args.common.resolve_layered(&mut problems, defaults, flags);
    // (The defaults layer sets every key read with a fallback; the fallbacks are the same.)
    let lease_ttl_ms = at_least(
        &mut problems,
        "lease_ttl_ms",
        s.lease_ttl_ms.unwrap_or(DEFAULT_LEASE_TTL_MS),
        500,
    );
    let retention = s
        .retention
        .as_ref()
        .map_or(Ok(DEFAULT_RETENTION), DurationSetting::parse)
        .unwrap_or_else(|e| {
            problems.push("retention", e);
            DEFAULT_RETENTION
        });
    let task_deadline_margin_secs = at_least(
        &mut problems,
        "task_deadline_margin_secs",
        s.task_deadline_margin_secs
            .unwrap_or(DEFAULT_TASK_DEADLINE_MARGIN_SECS),
        1,
    );
    let drain_secs = at_least(
        &mut problems,
        "drain_secs",
        s.drain_secs.unwrap_or(drain_default),
        1,
    );
    let max_tokens = at_least(
        &mut problems,
        "max_tokens",
        s.max_tokens.unwrap_or(limits::DEFAULT_MAX_TOKENS),
        1,
    );
    let max_pending_requests = at_least(
        &mut problems,
        "max_pending_requests",
        s.max_pending_requests
            .unwrap_or(DEFAULT_MAX_PENDING_REQUESTS),
        1,
    );
    let max_followers = at_least(
        &mut problems,
        "max_followers",
        s.max_followers
            .unwrap_or(parley_cluster::events::DEFAULT_MAX_FOLLOWERS),
        1,
    );
    let clarification_timeout_secs = at_least(
        &mut problems,
        "clarification_timeout_secs",
        s.clarification_timeout_secs
            .unwrap_or(clarification_default),
        1,
    );
    let providers = match s.config.clone() {
        Some(path) => operator_providers(&path).unwrap_or_else(|e| {
            problems.push("config", e);
            Default::default()
        }),
        None => Default::default(),
    };
    let max_debate = parley_protocol::Budget {
        usd: s.max_debate_usd,
        tokens: s.max_debate_tokens,
    };
    if max_debate.usd.is_some() || max_debate.tokens.is_some() {
        for p in max_debate.problems("max_debate") {
            let key = p.field.replace("max_debate.", "max_debate_");
            problems.push(&key, p.message);
        }
    }
    let record_signing_key = match s.record_signing_key.as_deref() {
        Some(path) => parley_record::SigningKey::from_file(path)
            .map(|k| Some(std::sync::Arc::new(k)))
            .unwrap_or_else(|e| {
                problems.push("record_signing_key", e.to_string());
                None
            }),
        None => None,
    };
    problems.into_result()?;
    let mut config = CoordinatorConfig::new(
        common.nats_url,
        common.redis_url,
        Duration::from_millis(lease_ttl_ms),
    );
    config.nats_creds = common.nats_creds;
    config.stream_replicas = common.stream_replicas;
    config.redis_min_replicas = common.redis_min_replicas;
    config.nats_inbox_prefix = common.nats_inbox_prefix;
    config.metrics_addr = common.metrics_addr;
    config.retention = (!retention.is_zero()).then_some(retention);
    config.task_deadline_margin = Duration::from_secs(task_deadline_margin_secs);
    config.drain = Duration::from_secs(drain_secs);
    config.pricing =
        parley_engine::Pricing::new(common.prices.clone().with_inline(&providers), max_tokens);
    config.policy = SubmissionPolicy {
        max_tokens,
        providers,
        max_debate,
    };
    config.max_pending_requests = max_pending_requests;
    config.max_followers = max_followers;
    config.clarification_timeout = Some(Duration::from_secs(clarification_timeout_secs));
    let rest_after_secs = s.rest_after_secs.unwrap_or(rest_default);
    config.rest_after = (rest_after_secs > 0).then(|| Duration::from_secs(rest_after_secs));
    config.record_signing_key = record_signing_key;
    Ok(config)
}

/// The `providers` section of the operator's debate configuration, checked.
fn operator_providers(
    path: &std::path::Path,
) -> Result<std::collections::BTreeMap<String, parley_protocol::ProviderLimits>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file: parley_protocol::DebateConfigFile = serde_json::from_slice(&bytes)
        .map_err(|e| format!("invalid config file {}: {e}", path.display()))?;
    let problems = parley_protocol::validate_providers(&file.providers);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(format!("{}: {}", path.display(), list.join("; ")));
    }
    Ok(file.providers)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<CoordinatorConfig, String> {
        let mut argv = vec!["parley-coordinator"];
        argv.extend_from_slice(args);
        settings(&Args::parse_from(argv))
    }

    #[test]
    fn retention_and_deadline_margin_are_layered_and_validated() {
        let c = parse(&["--metrics-addr", "off"]).unwrap();
        assert_eq!(c.retention, Some(DEFAULT_RETENTION));
        assert_eq!(
            c.task_deadline_margin,
            Duration::from_secs(DEFAULT_TASK_DEADLINE_MARGIN_SECS)
        );
        let c = parse(&[
            "--metrics-addr",
            "off",
            "--retention",
            "2h",
            "--task-deadline-margin-secs",
            "7",
        ])
        .unwrap();
        assert_eq!(c.retention, Some(Duration::from_secs(7200)));
        assert_eq!(c.task_deadline_margin, Duration::from_secs(7));
        let c = parse(&["--metrics-addr", "off", "--retention", "0"]).unwrap();
        assert_eq!(c.retention, None, "0 keeps finished debates forever");

        let dir =
            std::env::temp_dir().join(format!("parley-coord-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("parley.toml");
        let parse_file = || {
            parse(&[
                "--metrics-addr",
                "off",
                "--settings",
                file.to_str().unwrap(),
            ])
        };
        std::fs::write(&file, "retention = 3600\ntask_deadline_margin_secs = 0\n").unwrap();
        let e = parse_file().unwrap_err();
        assert!(e.contains("task_deadline_margin_secs"), "{e}");
        std::fs::write(&file, "retention = \"a week\"\n").unwrap();
        let e = parse_file().unwrap_err();
        assert!(e.contains("retention"), "{e}");
        std::fs::write(&file, "retention = 3600\n").unwrap();
        let c = parse_file().unwrap();
        assert_eq!(c.retention, Some(Duration::from_secs(3600)));
        assert_eq!(
            c.clarification_timeout,
            Some(Duration::from_secs(24 * 3600)),
            "a day by default"
        );
        std::fs::write(&file, "clarification_timeout_secs = 90\n").unwrap();
        assert_eq!(
            parse_file().unwrap().clarification_timeout,
            Some(Duration::from_secs(90))
        );
        std::fs::write(&file, "clarification_timeout_secs = 0\n").unwrap();
        let e = parse_file().unwrap_err();
        assert!(e.contains("clarification_timeout_secs"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
