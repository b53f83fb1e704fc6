//! `parley run`: one debate, embedded.

use std::sync::Arc;

use chrono::Utc;
use parley_cli::EmbeddedRunner;
use parley_coordinator::{run_debate, FileStore, Input, Machine};
use parley_llm::ratelimit::LocalLimiter;
use parley_llm::{ProviderSettings, Registry};
use parley_protocol::{new_debate_id, DebateStatus, ErrorKind};

use crate::config::{self, Overrides};
use crate::{progress, report, CliError, RunArgs};

pub async fn run(args: RunArgs) -> Result<(), CliError> {
    let problem = config::resolve_problem(args.problem.clone(), args.problem_file.as_deref())?;
    let mut warn = |w: String| eprintln!("warning: {w}");
    let mut loaded = config::load(args.config.as_deref(), &mut warn)?;
    // Embedded, the user is the operator: the local config's endpoints go to the registry
    // (never into the spec).
    let endpoints = config::take_endpoints(&mut loaded);
    let limits = loaded.file.providers.clone();
    let problems = parley_protocol::validate_providers(&limits);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(CliError::config(format!("config: {}", list.join("; "))));
    }
    let overrides = Overrides {
        roles: args.agents.clone(),
        rounds: args.rounds,
    };
    let spec = config::build_spec(loaded, problem, &overrides, &mut warn)?;

    // Every participant's provider must be usable before anything runs.
    let mut settings = ProviderSettings::from_env(endpoints.base_url);
    settings.agent_base_urls = endpoints.per_agent;
    let registry = Arc::new(Registry::with_limits(
        settings,
        limits,
        Arc::new(LocalLimiter::default()),
    ));
    let mut uses_local = false;
    for a in spec.active_agents().chain(std::iter::once(&spec.judge)) {
        let r = registry
            .resolve(a)
            .map_err(|e| CliError::config(e.to_string()))?;
        uses_local |= r.kind == "local";
    }
    if uses_local {
        let local = registry.local().map_err(|e| CliError::config(e.message))?;
        eprintln!(
            "Using local model {} ({})",
            local.model().model_name(),
            registry.settings().model_path.display()
        );
    }

    let id = new_debate_id(Utc::now());
    let store = FileStore::new("./debates");
    let saved = store.path_of(&id);
    let machine = Machine::new(id, spec.clone(), Utc::now());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let display = tokio::spawn(progress::show(rx));
    let runner = Arc::new(EmbeddedRunner { registry });
    let result = run_debate(machine, Input::Start, runner, Some(store), tx).await;
    let _ = display.await;
    let state = result.map_err(|e| CliError::general(e.to_string()))?;
    eprintln!(
        "Saved debate to ./debates/{}",
        saved
            .file_name()
            .map(|f| f.to_string_lossy())
            .unwrap_or_default()
    );

    if args.verbose {
        eprint!("{}", report::verbose_summary(&spec, &state));
    }
    if let Some(path) = &args.report {
        std::fs::write(path, report::markdown(&spec, &state)).map_err(|e| {
            CliError::general(format!("cannot write report {}: {e}", path.display()))
        })?;
        eprintln!("Wrote report to {}", path.display());
    }
    match state.status {
        DebateStatus::Completed => {
            let text = report::solution_text(&state);
            if let Some(path) = &args.output {
                let body = if path
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("json"))
                {
                    serde_json::to_string_pretty(&state).unwrap_or_default()
                } else {
                    text.clone()
                };
                std::fs::write(path, body).map_err(|e| {
                    CliError::general(format!("cannot write output {}: {e}", path.display()))
                })?;
                eprintln!("Wrote output to {}", path.display());
            }
            print!("{text}");
            Ok(())
        }
        _ => {
            let err = state.error.as_ref();
            let message = match err {
                Some(f) => format!(
                    "debate {} failed at {} (round {}): {}",
                    state.id, f.node, f.round, f.message
                ),
                None => format!("debate {} ended {}", state.id, state.status.as_str()),
            };
            // Provider errors exit 3; a provider misconfiguration found late exits 4.
            let kind = err.and_then(|f| f.kind);
            Err(match kind {
                Some(ErrorKind::Config) => CliError::config(message),
                Some(ErrorKind::Internal) | None => CliError::general(message),
                Some(_) => CliError::provider(message),
            })
        }
    }
}
