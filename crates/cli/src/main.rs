//! `parley`: run multi-agent debates.
//!
//! # Layout
//! - [`config`]: `debate-config.json`, defaults, prompt files, the problem text.
//! - [`clarify`]: answering clarification questions on the terminal or from `--answers F`.
//! - [`run`]: `parley run`, the embedded debate; `parley resume` / `retry` of a saved one.
//! - [`remote`]: `parley submit / watch / status / retry / cancel` against a cluster.
//! - [`progress`]: the progress display on stderr.
//! - [`report`]: the final solution text and the Markdown report.
//! - [`report_cmd`]: `parley report`, the Markdown report of a saved debate.
//! - [`compat`]: dialectic config keys accepted before the strict parse.
//! - [`context_dir`]: `--context DIR`, the directory snapshot the agents' tools read.
//! - [`eval`]: `parley eval`, evaluator agents scoring saved debates (the evaluator config,
//!   the saved debates, scoring and output in its submodules).
//! - [`compare`]: `parley compare`, strategies side by side on a problem set, judged and
//!   priced (the strategy file, run records, strategies, judging, statistics and output in
//!   its submodules).
//! - [`envfile`]: `--env-file F` / `./.env` for `run`, `eval` and `serve`.
//! - [`serve`]: `parley serve`, the web page and its API (`parley_web`) over this process
//!   or a cluster; opens the backend `serve` and `mcp` share.
//! - [`mcp`]: `parley mcp`, the Model Context Protocol server (`parley_mcp`) over stdio.
//! - [`fork`]: `parley fork` (a new debate sharing a debate's rounds) and `parley diff`.
//! - [`adr`]: a finished debate as an ADR in the MADR layout.
//! - [`decisions`]: `parley adr`, `parley record`, `parley verify`, and the record and ADR
//!   `parley run` writes when a debate finishes.

mod adr;
mod clarify;
mod compare;
mod compat;
mod config;
mod context_dir;
mod contribute;
mod decisions;
mod demo;
mod envfile;
mod eval;
mod fork;
mod human;
mod mcp;
mod progress;
mod remote;
mod report;
mod report_cmd;
mod run;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

/// An error with the exit code it maps to: 1 general, 2 invalid arguments, 3 provider
/// error, 4 configuration error, 130 interrupted (Ctrl-C / SIGTERM).
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn general(m: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: m.into(),
        }
    }
    pub fn usage(m: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: m.into(),
        }
    }
    pub fn provider(m: impl Into<String>) -> Self {
        Self {
            code: 3,
            message: m.into(),
        }
    }
    pub fn config(m: impl Into<String>) -> Self {
        Self {
            code: 4,
            message: m.into(),
        }
    }
    pub fn interrupted(m: impl Into<String>) -> Self {
        Self {
            code: 130,
            message: m.into(),
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "parley",
    version,
    about = "Multi-agent LLM debates for software design problems"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a debate in this process and print the final solution.
    #[command(alias = "debate")]
    Run(RunArgs),
    /// What a debate would cost: calls, tokens and dollars (min/expected/max), with no LLM
    /// call. Takes `run`'s arguments (`parley run --estimate`).
    Estimate(RunArgs),
    /// Submit a debate to a cluster over NATS (prints its id; --wait follows it).
    Submit(remote::SubmitArgs),
    /// Replay and follow a debate's events.
    Watch(remote::DebateArgs),
    /// Print a debate's state as JSON (or a summary with --summary): the one saved in
    /// ./debates/<id>.json when that file exists (Parley's or dialectic's), else the
    /// cluster's.
    Status(remote::StatusArgs),
    /// Continue an interrupted embedded debate from ./debates/<id>.json.
    Resume(run::SavedArgs),
    /// Resume a failed debate from its failed node: the embedded one saved in
    /// ./debates/<id>.json when that file exists, else the cluster's (over NATS); for a
    /// running cluster debate, send every outstanding task again as a new attempt.
    Retry(RetryArgs),
    /// Cancel a debate.
    Cancel(remote::DebateArgs),
    /// Answer a cluster debate's clarification questions (on the terminal, or --answers F).
    Answer(remote::AnswerArgs),
    /// Fork a debate: a new debate sharing its contributions up to the end of round --at
    /// (no call repeated), running on with -c changes.json (models, judge, rounds, a guide
    /// note). Embedded from ./debates/<id>.json (run here), else the cluster's.
    Fork(fork::ForkArgs),
    /// Compare two debates' solutions (requirements, decisions, tradeoffs, open
    /// disagreements: common and different) and their calls, tokens, cost and wall time.
    Diff(fork::DiffArgs),
    /// Steer a running cluster debate: pause, resume, guide "note", stop (synthesize now),
    /// extend (one more round). Recorded in its state with who and when.
    Steer(remote::SteerArgs),
    /// Answer a human participant's open task in a cluster debate (--text or -f FILE);
    /// without a text, list the tasks waiting for a person.
    Contribute(contribute::ContributeArgs),
    /// Write the Markdown report of a saved debate.
    Report(report_cmd::ReportArgs),
    /// Score saved debates with evaluator agents (dialectic's `eval`).
    Eval(eval::EvalArgs),
    /// Run every problem of a set under every strategy of a strategy file (single call,
    /// self-consistency, debates) and compare quality against cost: report.md, runs.csv,
    /// chart.svg. Resumable: finished runs in the output directory are not repeated.
    Compare(compare::CompareArgs),
    /// Serve the web page and its JSON API: start debates, watch them live (embedded, or
    /// a cluster with --nats-url).
    Serve(serve::ServeArgs),
    /// Serve the Model Context Protocol on standard input and output, for MCP clients
    /// (Claude Code, Cursor, ...): start, follow and answer debates (embedded, or a
    /// cluster with --nats-url).
    Mcp(mcp::McpArgs),
    /// Write a finished debate as an Architecture Decision Record (MADR 4.0 layout) into
    /// an ADR folder, continuing its numbering; never overwrites.
    Adr(decisions::AdrArgs),
    /// Write the decision record of a saved debate (`<state>.record.json`), signed with
    /// --record-signing-key; or make a signing key pair (--generate-key DIR).
    Record(decisions::RecordArgs),
    /// Check a decision record: its chain, its signature (--public-key) and, with --state,
    /// every text against its digest. Exit 0 when it verifies, 5 naming the first thing
    /// that does not match, 2 when a file cannot be read.
    Verify(decisions::VerifyArgs),
}

/// `parley retry`: `--config`, `--output`, `--report`, `--verbose` apply to an embedded
/// debate, `--nats-url` to a cluster's.
#[derive(clap::Args, Debug)]
pub struct RetryArgs {
    #[command(flatten)]
    saved: run::SavedArgs,
    #[command(flatten)]
    nats: remote::NatsArgs,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The problem to debate (or use --problem-file).
    pub problem: Option<String>,
    /// Read the problem from a file (dialectic's `-p` / `--problemDescription` too).
    #[arg(short = 'p', long, alias = "problemDescription", value_name = "FILE")]
    pub problem_file: Option<PathBuf>,
    /// Only the agents with these roles (comma-separated), e.g. architect,security.
    #[arg(short = 'a', long, value_delimiter = ',', value_name = "ROLES")]
    pub agents: Option<Vec<String>>,
    /// Number of rounds (1-20).
    #[arg(short = 'r', long, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: Option<u32>,
    /// Debate configuration (default ./debate-config.json).
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Write the result: .json = the full debate state, anything else = the solution text.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write a Markdown report of the whole debate.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Per-round latency and token summary, and each agent's prompt source.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Load environment variables (API keys) from this file (default ./.env when present);
    /// variables already set are kept.
    #[arg(short = 'e', long, value_name = "FILE")]
    pub env_file: Option<PathBuf>,
    /// Before round 1 the agents ask clarification questions and the debate waits for the
    /// answers (`debate.interactiveClarifications`).
    #[arg(long)]
    pub clarify: bool,
    /// Answers to the clarification questions: a JSON object mapping question ids to
    /// answers (unanswered questions: NA). Without it the questions are asked on the
    /// terminal.
    #[arg(long, value_name = "FILE")]
    pub answers: Option<PathBuf>,
    /// Answers of the human participants (`provider: "human"`): a JSON object mapping task
    /// keys (`1/propose/NAME`, `1/critique/NAME/TARGET`, or a kind: `refine`) to texts.
    /// Without it they are typed on the terminal.
    #[arg(long, value_name = "FILE")]
    pub human_answers: Option<PathBuf>,
    /// A directory whose text files the agents' tools (`list_files`, `file_read`,
    /// `context_search`) may read: snapshotted now (256 KiB per file, 2 MiB, 1000 files).
    #[arg(long, value_name = "DIR")]
    pub context: Option<PathBuf>,
    /// LiteLLM-format price file (model_prices_and_context_window.json): what each call
    /// costs (default: the config's `prices`; without one only `local` is priced, at 0).
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Print what the debate would cost (calls, tokens, dollars; no LLM call) and exit.
    #[arg(long)]
    pub estimate: bool,
    /// With --estimate: print it as JSON.
    #[arg(long)]
    pub json: bool,
    /// With --estimate: the expected length of one reply, in tokens, where past debates do
    /// not calibrate it (embedded: those in ./debates; `submit`: the cluster's samples)
    /// [default: 400].
    #[arg(long, value_name = "N")]
    pub expected_reply_tokens: Option<u32>,
    /// When the debate completes, also write it as an ADR (MADR 4.0) into this folder,
    /// continuing its numbering (e.g. docs/adr).
    #[arg(long, value_name = "DIR")]
    pub adr: Option<PathBuf>,
    /// The status of the ADR --adr writes.
    #[arg(long, value_enum, default_value = "proposed", requires = "adr")]
    pub adr_status: adr::AdrStatus,
    #[command(flatten)]
    pub signing: decisions::SigningArgs,
}

/// With a Langfuse export, `true` puts each LLM call's prompt and completion on its span.
const TRACE_CONTENT_ENV: &str = "PARLEY_TRACE_CONTENT";

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => 2,
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // Before telemetry and the runtime: both read the environment.
    let env_file = match &cli.command {
        Command::Run(a) | Command::Estimate(a) => Some((a.env_file.as_deref(), a.verbose)),
        Command::Eval(a) => Some((a.env_file.as_deref(), a.verbose)),
        Command::Compare(a) => Some((a.env_file.as_deref(), false)),
        Command::Serve(a) => Some((a.backend.env_file.as_deref(), false)),
        Command::Mcp(a) => Some((a.backend.env_file.as_deref(), false)),
        _ => None,
    };
    if let Some((file, verbose)) = env_file {
        if let Err(e) = envfile::load(file, verbose) {
            eprintln!("error: {}", e.message);
            return ExitCode::from(e.code);
        }
    }
    let config_file = match &cli.command {
        Command::Run(a) => Some(a.config.as_deref()),
        Command::Resume(a) => Some(a.config.as_deref()),
        Command::Retry(a) => Some(a.saved.config.as_deref()),
        Command::Fork(a) => Some(a.saved.config.as_deref()),
        _ => None,
    };
    let langfuse = config_file.is_some_and(langfuse_wanted);
    let _telemetry = match telemetry(langfuse) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(4);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // The first Ctrl-C / SIGTERM cancels `interrupt` (the command stops cleanly and exits
    // 130); a second one exits at once.
    let interrupt = CancellationToken::new();
    let result = runtime.block_on(async {
        parley_cluster::cancel_on_signal(interrupt.clone());
        let interrupt = &interrupt;
        match cli.command {
            Command::Run(args) => run::run(args, interrupt).await,
            Command::Estimate(mut args) => {
                args.estimate = true;
                run::run(args, interrupt).await
            }
            Command::Resume(args) => {
                run::continue_saved(args, run::Continue::Resume, interrupt).await
            }
            Command::Retry(args) if run::is_saved(&args.saved.debate_id) => {
                run::continue_saved(args.saved, run::Continue::Retry, interrupt).await
            }
            Command::Retry(args) => {
                let args = remote::DebateArgs {
                    debate_id: args.saved.debate_id,
                    nats: args.nats,
                };
                until_interrupted(
                    interrupt,
                    remote::command(args, parley_protocol::subjects::RETRY),
                )
                .await
            }
            Command::Submit(args) => remote::submit(args, interrupt).await,
            Command::Watch(args) => remote::watch(args, interrupt).await,
            Command::Status(args) => until_interrupted(interrupt, remote::status(args)).await,
            Command::Cancel(args) => {
                until_interrupted(
                    interrupt,
                    remote::command(args, parley_protocol::subjects::CANCEL),
                )
                .await
            }
            Command::Answer(args) => remote::answer(args, interrupt).await,
            Command::Steer(args) => until_interrupted(interrupt, remote::steer(args)).await,
            Command::Contribute(args) => {
                until_interrupted(interrupt, contribute::contribute(args)).await
            }
            Command::Fork(args) => fork::fork(args, interrupt).await,
            Command::Diff(args) => until_interrupted(interrupt, fork::diff(args)).await,
            Command::Report(args) => report_cmd::report(args),
            Command::Eval(args) => until_interrupted(interrupt, eval::eval(args)).await,
            Command::Compare(args) => compare::compare(args, interrupt).await,
            Command::Serve(args) => serve::serve(args, interrupt).await,
            Command::Mcp(args) => mcp::mcp(args, interrupt).await,
            Command::Adr(args) => decisions::adr_command(args),
            Command::Record(args) => decisions::record_command(args),
            Command::Verify(args) => decisions::verify_command(args),
        }
    });
    // Work abandoned by an interrupted command (a local model call on a blocking thread)
    // does not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

/// Runs a command that holds nothing worth a clean stop: an interrupt ends it at once (130).
async fn until_interrupted(
    interrupt: &CancellationToken,
    command: impl std::future::Future<Output = Result<(), CliError>>,
) -> Result<(), CliError> {
    tokio::select! {
        r = command => r,
        _ = interrupt.cancelled() => Err(CliError::interrupted("interrupted")),
    }
}

/// Whether the debate config (`-c`, default `./debate-config.json`) says
/// `debate.trace: "langfuse"`. A file that cannot be read or parsed says no: loading the
/// config later reports it properly.
fn langfuse_wanted(config: Option<&std::path::Path>) -> bool {
    let path = config.unwrap_or(std::path::Path::new(config::DEFAULT_CONFIG));
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v.pointer("/debate/trace").and_then(|t| t.as_str()) == Some("langfuse"))
}

/// The CLI's telemetry: plain log lines on stderr (`PARLEY_LOG`, default `warn`), and the
/// debate's spans over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (see
/// `parley_telemetry`) — or to Langfuse when the config asks for it (`debate.trace:
/// "langfuse"`) and the `LANGFUSE_*` keys are set; then, and only then, `PARLEY_TRACE_CONTENT=true`
/// also puts prompts and completions on the LLM spans. The guard flushes the spans when
/// `main` returns.
fn telemetry(langfuse: bool) -> anyhow::Result<parley_telemetry::TelemetryGuard> {
    let mut options = parley_telemetry::TelemetryOptions::from_env("parley")?;
    if langfuse {
        // A missing key is reported when the config is loaded (`compat`), as a warning.
        if let Ok(export) = parley_telemetry::langfuse::langfuse_export(|k| std::env::var(k).ok()) {
            options.otlp = Some(export);
            let content = std::env::var(TRACE_CONTENT_ENV)
                .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
            parley_llm::record_content_on_spans(content);
        }
    }
    if std::env::var_os(parley_telemetry::LOG_FILTER_ENV).is_none() {
        options.log_filter = "warn".into();
    }
    if std::env::var_os(parley_telemetry::LOG_FORMAT_ENV).is_none() {
        options.log_format = parley_telemetry::LogFormat::Text;
    }
    options.init()
}
