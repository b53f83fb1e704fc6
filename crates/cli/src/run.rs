//! `parley run`: one debate, embedded; `parley resume` / `parley retry` continue one from
//! its checkpoint `./debates/<id>.json`.
//!
//! Every transition is checkpointed (state and spec). Ctrl-C (or SIGTERM) stops dispatching,
//! waits up to [`INTERRUPT_GRACE`] for the calls in flight (their answers are kept), saves
//! the checkpoint and exits 130 naming `parley resume <id>`; a second Ctrl-C exits at once
//! (the checkpoint of the last transition is on disk). `resume` continues an interrupted
//! debate, `retry` a failed one from its failed node; neither repeats a completed call (the
//! results are in the checkpoint), the same semantics as the cluster. The debate's own
//! settings (agents, prompts, rounds, retry policy) come from the checkpoint; the config
//! file only supplies the operator settings (`baseUrl`, `providers`).

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use parley_cli::EmbeddedRunner;
use parley_engine::{run_debate_controlled, Controls, FileStore, Input, LoadError, Machine};
use parley_llm::ratelimit::LocalLimiter;
use parley_llm::{ProviderSettings, Registry};
use parley_protocol::{new_debate_id, DebateSpec, DebateStatus, ErrorKind, ProviderLimits};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Overrides};
use crate::{clarify, human, progress, report, CliError, RunArgs};

/// Where embedded debates are checkpointed.
pub use parley_cli::DEBATES_DIR;

/// How long an interrupted run waits for the calls in flight before it saves and exits.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(3);

/// `parley resume <id>` and the embedded `parley retry <id>`.
#[derive(clap::Args, Debug)]
pub struct SavedArgs {
    /// The debate id (deb-YYYYMMDD-HHMMSS-RAND); its checkpoint is ./debates/<id>.json.
    pub debate_id: String,
    /// Config file for the operator settings (`baseUrl`, `providers`); the debate's own
    /// settings come from its checkpoint (default ./debate-config.json, if present).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Write the result: .json = the full debate state, anything else = the solution text.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write a Markdown report of the whole debate.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Per-round latency and token summary, and each agent's prompt source.
    #[arg(long)]
    pub verbose: bool,
    /// Answers to the debate's clarification questions (JSON: question id → answer);
    /// without it they are asked on the terminal.
    #[arg(long, value_name = "FILE")]
    pub answers: Option<PathBuf>,
    /// Answers of the human participants (JSON: task key → text, see `parley run`);
    /// without it they are typed on the terminal.
    #[arg(long, value_name = "FILE")]
    pub human_answers: Option<PathBuf>,
    /// When the debate completes, also write it as an ADR (MADR 4.0) into this folder.
    #[arg(long, value_name = "DIR")]
    pub adr: Option<PathBuf>,
    /// The status of the ADR --adr writes.
    #[arg(long, value_enum, default_value = "proposed", requires = "adr")]
    pub adr_status: crate::adr::AdrStatus,
    #[command(flatten)]
    pub signing: crate::decisions::SigningArgs,
}

/// What to write when the debate ends, and the config to name in a resume command.
struct Outputs {
    config: Option<PathBuf>,
    output: Option<PathBuf>,
    report: Option<PathBuf>,
    verbose: bool,
    /// Signs the decision record written when the debate finishes.
    signing_key: Option<parley_record::SigningKey>,
    /// `--adr DIR`: the ADR folder, and the ADR's status.
    adr: Option<(PathBuf, crate::adr::AdrStatus)>,
}

pub async fn run(args: RunArgs, interrupt: &CancellationToken) -> Result<(), CliError> {
    let problem = config::resolve_problem(args.problem.clone(), args.problem_file.as_deref())?;
    let mut warn = |w: String| eprintln!("warning: {w}");
    // Embedded, the user is the operator: the local config's endpoints go to the registry
    // (never into the spec).
    let (loaded, endpoints, limits) = config::load_as_operator(args.config.as_deref(), &mut warn)?;
    // Agents with tools read a directory: --context, else the current one (as dialectic).
    let with_tools = loaded
        .file
        .agents
        .iter()
        .flatten()
        .any(|a| a.is_enabled() && !a.tools.is_empty());
    let context = match (&args.context, with_tools) {
        (Some(dir), _) => Some(dir.clone()),
        (None, true) => Some(PathBuf::from(".")),
        (None, false) => None,
    };
    let overrides = Overrides {
        roles: args.agents.clone(),
        rounds: args.rounds,
        clarify: args.clarify,
        context_files: context
            .as_deref()
            .map(crate::context_dir::snapshot)
            .transpose()?,
    };
    let prices = config::load_prices(args.prices.as_deref(), &loaded)?;
    let signing_key = args.signing.load()?;
    let mut spec = config::build_spec(loaded, problem, &overrides, &mut warn)?;
    for note in mode_notes(&spec) {
        eprintln!("{note}");
    }
    if args.estimate {
        return print_estimate(&spec, &prices, &endpoints, &limits, &args, Learned::Saved);
    }
    // Embedded, the user is the operator: no caps beyond the debate's own budget.
    let pricing =
        parley_engine::Pricing::new(prices.clone(), parley_protocol::limits::DEFAULT_MAX_TOKENS);
    parley_engine::budget::admit(&mut spec, &Default::default(), &pricing)
        .map_err(|e| CliError::config(e.to_string()))?;
    parley_llm::set_prices(prices);
    // Before any call: with clarifications, answers must be had (a file or a terminal).
    let answers = clarify::Answers::choose(args.answers.as_deref())?;
    if spec.debate.interactive_clarifications {
        answers.require()?;
    } else if args.answers.is_some() {
        warn(
            "--answers is ignored: this debate asks no clarification questions (use --clarify)"
                .into(),
        );
    }
    let registry = registry_for(&spec, endpoints, limits)?;
    let models = effective_models(&spec, &registry);
    let mut machine = Machine::new(new_debate_id(Utc::now()), spec, Utc::now());
    machine.set_pricing(pricing);
    machine.set_effective_models(models);
    let outputs = Outputs {
        config: args.config,
        output: args.output,
        report: args.report,
        verbose: args.verbose,
        signing_key,
        adr: args.adr.map(|d| (d, args.adr_status)),
    };
    let desk = human::Desk::choose(args.human_answers.as_deref())?;
    drive(
        machine,
        Input::Start,
        registry,
        &outputs,
        &answers,
        &desk,
        interrupt,
    )
    .await
}

/// Where an estimate's reply lengths are learned from.
pub(crate) enum Learned {
    /// The debates saved in `./debates/` (embedded).
    Saved,
    /// A cluster's calls (`parley.debates.calibration`).
    Cluster(parley_protocol::calibration::Calibration),
}

/// `--estimate`: the debate's calls, tokens and cost, with no LLM call (see
/// [`parley_cli::estimate`]).
pub(crate) fn print_estimate(
    spec: &DebateSpec,
    prices: &parley_protocol::PriceTable,
    endpoints: &config::Endpoints,
    limits: &std::collections::BTreeMap<String, ProviderLimits>,
    args: &RunArgs,
    learned: Learned,
) -> Result<(), CliError> {
    spec.validate()
        .map_err(|e| CliError::usage(e.to_string()))?;
    // Which provider each participant would use, without loading any model.
    let mut settings = ProviderSettings::from_env(endpoints.base_url.clone());
    settings.agent_base_urls = endpoints.per_agent.clone();
    let registry =
        Registry::with_limits(settings, limits.clone(), Arc::new(LocalLimiter::default()));
    let local = |a: &parley_protocol::AgentConfig| {
        registry
            .resolve(a)
            .map(|r| r.kind.to_string())
            .unwrap_or_else(|_| a.provider.clone().unwrap_or_else(|| "unknown".into()))
    };
    let mut assumptions = parley_cli::estimate::Assumptions::default();
    if let Some(n) = args.expected_reply_tokens {
        assumptions.reply_tokens = n;
    }
    let provider_of = match learned {
        // Learned from the debates saved here (see `parley_cli::calibration`).
        Learned::Saved => {
            assumptions.calibration = parley_cli::calibration::load(
                std::path::Path::new(parley_cli::DEBATES_DIR),
                &local,
            );
            Box::new(local) as Box<dyn Fn(&parley_protocol::AgentConfig) -> String>
        }
        Learned::Cluster(c) => {
            assumptions.calibration = c.clone();
            parley_cli::calibration::cluster_provider_of(c, local)
        }
    };
    let est = parley_cli::estimate::estimate(spec, prices, &provider_of, &assumptions)
        .map_err(|e| CliError::general(e.to_string()))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&est).map_err(|e| CliError::general(e.to_string()))?
        );
    } else {
        print!("{}", est.table());
    }
    Ok(())
}

/// Which way a saved debate continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continue {
    /// An interrupted (still `running`) debate.
    Resume,
    /// A failed debate, from its failed node.
    Retry,
}

/// Whether `./debates/<id>.json` exists: `parley retry` then means the embedded debate.
pub fn is_saved(id: &str) -> bool {
    FileStore::new(DEBATES_DIR).exists(id)
}

/// `parley resume <id>` / `parley retry <id>` of an embedded debate.
pub async fn continue_saved(
    args: SavedArgs,
    how: Continue,
    interrupt: &CancellationToken,
) -> Result<(), CliError> {
    let id = args.debate_id.as_str();
    let store = FileStore::new(DEBATES_DIR);
    let (spec, state) = store.load(id).map_err(|e| match e {
        LoadError::BadId(_) | LoadError::NotFound(_) => CliError::usage(e.to_string()),
        _ => CliError::general(e.to_string()),
    })?;
    let status = state.status;
    let wrong = |what: String| Err(CliError::usage(format!("debate {id} {what}")));
    match (how, status) {
        (
            Continue::Resume,
            DebateStatus::Running | DebateStatus::Pending | DebateStatus::AwaitingClarifications,
        ) => {}
        (Continue::Retry, DebateStatus::AwaitingClarifications) => {
            return wrong(format!(
                "is waiting for answers to its clarification questions; continue it with `parley resume {id}`"
            ))
        }
        (Continue::Retry, DebateStatus::Failed) => {}
        (Continue::Resume, DebateStatus::Failed) => {
            return wrong(format!(
                "failed{}; continue it with `parley retry {id}`",
                failure(&state)
            ))
        }
        (Continue::Retry, DebateStatus::Running | DebateStatus::Pending) => {
            return wrong(format!(
                "was interrupted, it did not fail; continue it with `parley resume {id}`"
            ))
        }
        (_, DebateStatus::Completed | DebateStatus::Cancelled) => {
            return wrong(format!("is already {}", status.as_str()))
        }
    }
    // Only the operator settings of the config file apply: its debate settings are in the
    // checkpoint, so the defaults it would fall back to are not worth a warning.
    let explicit = args.config.is_some();
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_CONFIG));
    let (endpoints, limits, prices) = if explicit || path.is_file() {
        let mut loaded = config::load(Some(&path), &mut |_| {})?;
        let prices = config::load_prices(None, &loaded)?;
        (
            config::take_endpoints(&mut loaded),
            loaded.file.providers,
            prices,
        )
    } else {
        (
            config::Endpoints::default(),
            Default::default(),
            Default::default(),
        )
    };
    let signing_key = args.signing.load()?;
    let answers = clarify::Answers::choose(args.answers.as_deref())?;
    if status == DebateStatus::AwaitingClarifications {
        answers.require()?;
    }
    let registry = registry_for(&spec, endpoints, limits)?;
    let done: usize = state
        .rounds
        .iter()
        .flat_map(|r| &r.contributions)
        .filter(|c| !c.metadata.carried_over)
        .count();
    eprintln!(
        "{} debate {id} from {} ({done} contributions done)",
        match how {
            Continue::Resume => "Resuming",
            Continue::Retry => "Retrying",
        },
        display_path(&store.path_of(id)),
    );
    let pricing =
        parley_engine::Pricing::new(prices.clone(), parley_protocol::limits::DEFAULT_MAX_TOKENS);
    parley_llm::set_prices(prices);
    let mut machine = Machine::from_checkpoint(spec, state);
    machine.set_pricing(pricing);
    let input = match how {
        Continue::Resume => Input::Resume,
        Continue::Retry => Input::Retry,
    };
    let outputs = Outputs {
        config: args.config,
        output: args.output,
        report: args.report,
        verbose: args.verbose,
        signing_key,
        adr: args.adr.map(|d| (d, args.adr_status)),
    };
    let desk = human::Desk::choose(args.human_answers.as_deref())?;
    drive(
        machine, input, registry, &outputs, &answers, &desk, interrupt,
    )
    .await
}

/// Every participant's provider must be usable before anything runs.
pub(crate) fn registry_for(
    spec: &DebateSpec,
    endpoints: config::Endpoints,
    limits: std::collections::BTreeMap<String, ProviderLimits>,
) -> Result<Arc<Registry>, CliError> {
    // Every participant's provider must be usable before anything runs.
    let mut settings = ProviderSettings::from_env(endpoints.base_url);
    settings.agent_base_urls = endpoints.per_agent;
    let registry = Arc::new(Registry::with_limits(
        settings,
        limits,
        Arc::new(LocalLimiter::default()),
    ));
    let mut uses_local = false;
    // A human participant calls no provider.
    let callers = spec.active_agents().filter(|a| !a.is_human());
    for a in callers.chain(std::iter::once(&spec.judge)) {
        let r = registry
            .resolve(a)
            .map_err(|e| CliError::config(e.to_string()))?;
        uses_local |= r.kind == "local";
    }
    if let Some(e) = &spec.debate.embeddings {
        // Resolved like a participant; the local model has no embedding mode.
        let r = registry
            .resolve(&e.as_agent(&spec.judge.id))
            .map_err(|e| CliError::config(format!("debate.embeddings: {e}")))?;
        if r.kind == "local" {
            return Err(CliError::config(format!(
                "debate.embeddings: no remote provider is configured (no endpoint or API key), \
                 and {}",
                parley_protocol::LOCAL_EMBEDDINGS_REFUSED
            )));
        }
    }
    if uses_local {
        crate::config::load_local_model(&registry)?;
    }
    Ok(registry)
}

/// The model each participant really runs on where it differs from its configured one:
/// participants the registry places on the local model run the local model's file, whatever
/// model their config names (for the independence warnings).
pub(crate) fn effective_models(
    spec: &DebateSpec,
    registry: &Registry,
) -> std::collections::BTreeMap<String, String> {
    let on_local: Vec<&str> = spec
        .active_agents()
        .filter(|a| !a.is_human())
        .chain(std::iter::once(&spec.judge))
        .filter(|a| registry.resolve(a).is_ok_and(|r| r.kind == "local"))
        .map(|a| a.id.as_str())
        .collect();
    // Only then: `local()` loads the model (registry_for already did).
    let name = match on_local.is_empty() {
        true => None,
        false => registry.local().ok(),
    };
    let Some(local) = name else {
        return Default::default();
    };
    on_local
        .into_iter()
        .map(|id| (id.to_string(), local.model().model_name().to_string()))
        .collect()
}

/// Runs the machine to its end (or an interrupt), then reports like `parley run`. When the
/// debate stops to wait for clarification answers (its checkpoint is saved then), the
/// answers are asked for (`answers`), recorded in the checkpoint
/// ([`parley_engine::answer_saved`]) and the debate goes on.
async fn drive(
    mut machine: Machine,
    mut input: Input,
    registry: Arc<Registry>,
    outputs: &Outputs,
    answers: &clarify::Answers,
    desk: &human::Desk,
    interrupt: &CancellationToken,
) -> Result<(), CliError> {
    if interrupt.is_cancelled() {
        // Ctrl-C while the run was being prepared (e.g. the local model loading).
        return Err(CliError::interrupted(
            "interrupted before the debate started",
        ));
    }
    let spec = machine.spec().clone();
    let id = machine.id().to_string();
    let demo = crate::demo::DemoModel::of(&spec, &registry);
    let store = FileStore::new(DEBATES_DIR);
    let saved = display_path(&store.path_of(&id));
    let runner: Arc<EmbeddedRunner> = Arc::new(EmbeddedRunner {
        registry,
        context_files: spec.context_files.clone().map(Arc::new),
    });
    let config = outputs
        .config
        .as_deref()
        .map(|p| format!(" --config {}", shell_word(p)))
        .unwrap_or_default();
    let driven = loop {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let display = tokio::spawn(progress::show(rx));
        // Human participants' turns: answered from the script or the terminal.
        let (tx, contributions, at_desk) = desk.start(store.clone(), tx);
        let controls = Controls {
            steering: None,
            contributions: Some(contributions),
        };
        let result = run_debate_controlled(
            machine,
            input,
            runner.clone(),
            Some(store.clone()),
            tx,
            interrupt,
            INTERRUPT_GRACE,
            controls,
        )
        .await;
        at_desk.finish().await;
        let _ = display.await;
        let driven = result.map_err(|e| CliError::general(e.to_string()))?;
        if driven.interrupted || driven.state.status != DebateStatus::AwaitingClarifications {
            break driven;
        }
        // Waiting for answers, with the checkpoint saved: Ctrl-C here loses nothing.
        if std::io::stderr().is_terminal() {
            eprintln!();
        }
        let pending = parley_protocol::pending_clarifications(&driven.state.clarifications);
        let on_interrupt = format!(
            "debate {id} is waiting for answers to its clarification questions (saved to {saved});              continue it with `parley resume {id}{config}`"
        );
        let given = answers
            .collect(
                &pending,
                driven.state.clarification_iterations,
                interrupt,
                &on_interrupt,
            )
            .await?;
        let (next, events) = parley_engine::answer_saved(&store, &id, given)
            .map_err(|e| CliError::general(format!("debate {id}: {e}")))?;
        for e in &events {
            if let parley_protocol::EventKind::ClarificationsAnswered { remaining, .. } = e.kind {
                eprintln!("Recorded the answers; {remaining} question(s) left");
            }
        }
        machine = next;
        input = Input::Resume;
    };
    if driven.interrupted && std::io::stderr().is_terminal() {
        eprintln!();
    }
    eprintln!("Saved debate to {saved}");
    let state = driven.state;
    if driven.interrupted {
        return Err(CliError::interrupted(format!(
            "debate {id} interrupted with {} task(s) unfinished; continue it with `parley resume {id}{config}`",
            driven.abandoned.len()
        )));
    }

    if outputs.verbose {
        eprint!("{}", report::verbose_summary(&spec, &state));
    }
    let record = finished_outputs(&spec, &state, &store, outputs);
    if let Some(path) = &outputs.report {
        let mut md = report::markdown(Some(&spec), &state);
        if let Some(r) = &record {
            md.push_str(&parley_record::report::section(r));
        }
        // As dialectic: a report that cannot be written never stops the run.
        match report::write_report(path, &md) {
            Ok(written) => eprintln!("Wrote report to {}", written.display()),
            Err(e) => eprintln!("warning: {e}"),
        }
    }
    match state.status {
        DebateStatus::Completed => {
            let note = demo.as_ref().and_then(|d| d.confidence_note());
            let text = report::solution_text_with(&state, note.as_deref());
            if let Some(path) = &outputs.output {
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
            if let Some(demo) = &demo {
                print!("\n{}", demo.notice());
            }
            Ok(())
        }
        _ => {
            let err = state.error.as_ref();
            let message = match err {
                Some(_) => format!(
                    "debate {}{}; once the cause is fixed, continue it with `parley retry {}`",
                    state.id,
                    failure(&state),
                    state.id
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

/// What a finished debate leaves besides its checkpoint: its decision record
/// (`./debates/<id>.record.json`, signed when a key is configured) and, with `--adr`, its
/// ADR. Neither stops the run when it cannot be written (a warning says why).
fn finished_outputs(
    spec: &DebateSpec,
    state: &parley_protocol::DebateState,
    store: &FileStore,
    outputs: &Outputs,
) -> Option<parley_record::Record> {
    if !parley_record::build::is_finished(state.status) {
        return None;
    }
    let path = crate::decisions::record_path_of(&store.path_of(&state.id));
    let record = match crate::decisions::write_record(
        state,
        Some(spec),
        outputs.signing_key.as_ref(),
        &path,
    ) {
        Ok(r) => {
            eprintln!(
                "Wrote decision record to {} ({})",
                display_path(&path),
                crate::decisions::signature_words(&r)
            );
            Some(r)
        }
        Err(e) => {
            eprintln!("warning: no decision record: {}", e.message);
            None
        }
    };
    if let Some((dir, status)) = &outputs.adr {
        let link = record.as_ref().map(|r| (r, path.as_path()));
        match crate::decisions::write_adr(state, Some(spec), link, dir, *status) {
            Ok(p) => eprintln!("Wrote ADR to {}", p.display()),
            Err(e) => eprintln!("warning: no ADR: {}", e.message),
        }
    }
    record
}

/// ` failed at <node> (round r): <message>`, or nothing when the state holds no failure.
fn failure(state: &parley_protocol::DebateState) -> String {
    state
        .error
        .as_ref()
        .map(|f| format!(" failed at {} (round {}): {}", f.node, f.round, f.message))
        .unwrap_or_default()
}

/// `./debates/<id>.json` as the user sees it.
fn display_path(path: &Path) -> String {
    path.display().to_string()
}

/// A path as one shell word (single-quoted when it needs to be).
fn shell_word(path: &Path) -> String {
    let s = path.display().to_string();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./,:+@%".contains(c))
    {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// One line per non-default debate mode, so a config that asks for one (a dialectic config
/// with `"synthesisMethod": "voting"`, say) sees that it now takes effect.
pub fn mode_notes(spec: &parley_protocol::DebateSpec) -> Vec<String> {
    use parley_protocol::{CritiqueTopology, DebateMode, TerminationType};
    let d = &spec.debate;
    let mut out = Vec::new();
    if d.voting() {
        out.push(
            "synthesisMethod \"voting\": after the final round every agent votes for the best \
             refinement other than its own; the judge writes the solution from the winner"
                .to_string(),
        );
    }
    if d.termination_condition.kind == TerminationType::Verdict {
        out.push(format!(
            "terminationCondition \"verdict\": the judge gives a verdict after each round; the \
             debate stops at done with confidence >= {} (at most {} rounds)",
            d.termination_condition.threshold(),
            d.round_cap()
        ));
    }
    if d.termination_condition.kind == TerminationType::Similarity {
        out.push(format!(
            "terminationCondition \"similarity\": each round's refinements are embedded with {}; \
             the debate stops when every agent's refinement is >= {} similar (cosine) to its \
             previous one (at most {} rounds)",
            d.embeddings.as_ref().map_or("?", |e| e.model.as_str()),
            d.termination_condition.threshold(),
            d.round_cap()
        ));
    }
    if d.mode == DebateMode::Adaptive {
        out.push(format!(
            "mode \"adaptive\": the judge screens the proposals first; done with confidence >= {} \
             synthesizes at once, otherwise the debate goes on",
            d.termination_condition.threshold()
        ));
    }
    match d.critique.topology {
        CritiqueTopology::All => {}
        CritiqueTopology::Ring => out.push(format!(
            "critique topology \"ring\": each agent critiques the next {} agent(s)",
            d.critique.k()
        )),
        CritiqueTopology::Random => out.push(format!(
            "critique topology \"random\": each agent critiques {} agent(s) drawn per round \
             (seeded by the debate id); every agent gets at least one critique",
            d.critique.k()
        )),
    }
    out
}
