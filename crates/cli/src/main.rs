//! `parley`: run multi-agent debates.
//!
//! # Layout
//! - [`config`]: `debate-config.json`, defaults, prompt files, the problem text.
//! - [`run`]: `parley run`, the embedded debate.
//! - [`progress`]: the progress display on stderr.
//! - [`report`]: the final solution text and the Markdown report.
//! - [`report_cmd`]: `parley report`, the Markdown report of a saved debate.

mod config;
mod progress;
mod remote;
mod report;
mod report_cmd;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// An error with the exit code it maps to: 1 general, 2 invalid arguments, 3 provider
/// error, 4 configuration error.
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
    /// Submit a debate to a cluster over NATS (prints its id; --wait follows it).
    Submit(remote::SubmitArgs),
    /// Replay and follow a debate's events.
    Watch(remote::DebateArgs),
    /// Print a debate's state as JSON.
    Status(remote::DebateArgs),
    /// Resume a failed debate from its failed node.
    Retry(remote::DebateArgs),
    /// Cancel a debate.
    Cancel(remote::DebateArgs),
    /// Write the Markdown report of a saved debate.
    Report(report_cmd::ReportArgs),
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
}

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
    let _telemetry = match telemetry() {
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
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Submit(args) => remote::submit(args).await,
            Command::Watch(args) => remote::watch(args).await,
            Command::Status(args) => remote::status(args).await,
            Command::Retry(args) => remote::command(args, parley_protocol::subjects::RETRY).await,
            Command::Cancel(args) => remote::command(args, parley_protocol::subjects::CANCEL).await,
            Command::Report(args) => report_cmd::report(args),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

/// The CLI's telemetry: plain log lines on stderr (`PARLEY_LOG`, default `warn`), and the
/// debate's spans over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (see
/// `parley_telemetry`). The guard flushes the spans when `main` returns.
fn telemetry() -> anyhow::Result<parley_telemetry::TelemetryGuard> {
    let mut options = parley_telemetry::TelemetryOptions::from_env("parley")?;
    if std::env::var_os(parley_telemetry::LOG_FILTER_ENV).is_none() {
        options.log_filter = "warn".into();
    }
    if std::env::var_os(parley_telemetry::LOG_FORMAT_ENV).is_none() {
        options.log_format = parley_telemetry::LogFormat::Text;
    }
    options.init()
}
