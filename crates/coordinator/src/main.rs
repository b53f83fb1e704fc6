//! `parley-coordinator`: owns debate state, publishes tasks to the workers. See
//! `parley_coordinator::service`. Exit status: 0 after a clean drain, 5 when it gave up on
//! something at the drain deadline, 4 invalid settings, 1 any other error; a second signal
//! exits at once (130 / 143).

use std::process::ExitCode;
use std::time::Duration;

use parley_cluster::settings::{self, at_least, CoordinatorSettings, Problems, SettingsError};
use parley_coordinator::service::{run, CoordinatorConfig};
use parley_protocol::SubmissionPolicy;
use tokio_util::sync::CancellationToken;

/// mimalloc: the services allocate and free many small buffers per task from several
/// threads, where glibc's malloc spent about a third of the coordinator's CPU.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The coordinator's flags: `--settings` and one per key (see
/// `parley_cluster::settings::CoordinatorSettings`).
fn command() -> clap::Command {
    settings::command::<CoordinatorSettings>(
        clap::Command::new("parley-coordinator")
            .version(env!("CARGO_PKG_VERSION"))
            .about("The Parley debate coordinator")
            .long_about(
                "The Parley debate coordinator. Settings are layered: defaults, then the \
                 --settings TOML file, then PARLEY_* variables, then flags.",
            ),
    )
}

/// The coordinator's settings, layered and validated (every problem at once).
fn settings(matches: &clap::ArgMatches) -> Result<CoordinatorConfig, SettingsError> {
    let mut problems = Problems::default();
    let (common, s) = settings::layered::<CoordinatorSettings>(matches, &mut problems);
    let common = common.resolve(&mut problems);
    let lease_ttl_ms = at_least(&mut problems, "lease_ttl_ms", s.lease_ttl_ms, 500);
    let retention = s.retention.parse().unwrap_or_else(|e| {
        problems.push("retention", e);
        Duration::ZERO
    });
    let task_deadline_margin_secs = at_least(
        &mut problems,
        "task_deadline_margin_secs",
        s.task_deadline_margin_secs,
        1,
    );
    let drain_secs = at_least(&mut problems, "drain_secs", s.drain_secs, 1);
    let max_tokens = at_least(&mut problems, "max_tokens", s.max_tokens, 1);
    let max_pending_requests = at_least(
        &mut problems,
        "max_pending_requests",
        s.max_pending_requests,
        1,
    );
    let max_followers = at_least(&mut problems, "max_followers", s.max_followers, 1);
    let clarification_timeout_secs = at_least(
        &mut problems,
        "clarification_timeout_secs",
        s.clarification_timeout_secs,
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
    config.rest_after = (s.rest_after_secs > 0).then(|| Duration::from_secs(s.rest_after_secs));
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
    let config = match settings(&command().get_matches()) {
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

    fn parse(args: &[&str]) -> Result<CoordinatorConfig, SettingsError> {
        let mut argv = vec!["parley-coordinator"];
        argv.extend_from_slice(args);
        settings(&command().try_get_matches_from(argv).unwrap())
    }

    #[test]
    fn retention_and_deadline_margin_are_layered_and_validated() {
        let c = parse(&["--metrics-addr", "off"]).unwrap();
        assert_eq!(c.retention, Some(Duration::from_secs(7 * 24 * 3600)));
        assert_eq!(c.task_deadline_margin, Duration::from_secs(300));
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
        assert!(e.names("task_deadline_margin_secs"), "{e}");
        std::fs::write(&file, "retention = \"a week\"\n").unwrap();
        let e = parse_file().unwrap_err();
        assert!(e.names("retention"), "{e}");
        assert!(
            e.to_string().contains("\"a week\" is not a duration"),
            "{e}"
        );
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
        assert!(e.names("clarification_timeout_secs"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
