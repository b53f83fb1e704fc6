//! `parley compare`: every problem of a set under every strategy of a strategy file, at
//! its real cost, judged by evaluator models without their known biases.
//!
//! `parley compare -c compare.json [-p problems/] [-o out/]`
//!
//! - Strategies ([`StrategySpec`]): `single` (one agent, one call), `self-consistency`
//!   (`samples` answers of one agent, then one judge call picks the best) and `debate` (a
//!   `debate-config.json`, relative to the compare file). Each run records its calls,
//!   prompt and completion tokens, cost (when every model has a price) and wall time.
//! - Quality: the rubric of `parley eval` (its evaluator config, prompts and scoring), and
//!   pairwise comparisons of the final answers, each pair asked in both orders; a pair
//!   whose two orders disagree counts as a tie. `recuse: true` keeps an evaluator of the
//!   same model family as a strategy away from that strategy's answers. Win rates come
//!   with 95 % bootstrap intervals over problems ([`stats`]).
//! - Output in `-o` ([`output`]): `report.md`, `runs.csv`, `chart.svg`; the finished runs
//!   in `runs/*.json` and the evaluators' verdicts in `evals/`: a second invocation skips
//!   whatever is there, so an interrupted comparison continues where it stopped.
//! - `--nats-url`: the debate strategies are submitted to a cluster (the `parley submit`
//!   path); single and self-consistency calls and the evaluators run from this machine.

mod file;
mod judging;
mod output;
pub mod problems;
mod records;
pub mod stats;
mod strategies;

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use parley_llm::{ProviderSettings, Registry};
use parley_protocol::PriceTable;
use tokio_util::sync::CancellationToken;

use crate::config;
use crate::eval::{self, Evaluator};
use crate::CliError;
pub use file::{family_of, load_compare_file, CompareFile, StrategySpec};
use judging::{judge_pair, rubric_of};
pub use records::{digest, EvalSpend, FailedRun, PairRecord, Results, RubricRecord, RunRecord};
use records::{read_record, write_record, OutDir};
use strategies::input_digest;
use strategies::{execute, prepare, Prepared};

/// The most samples a self-consistency strategy may draw.
pub const MAX_SAMPLES: u32 = 20;
/// A single or self-consistency call's deadline when the strategy gives none.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 120_000;
/// Same, on the local model (CPU inference).
pub const LOCAL_CALL_TIMEOUT_MS: u64 = 600_000;
/// The system prompt of `single` and of each self-consistency sample, unless the strategy
/// gives its own.
pub const ANSWER_SYSTEM_PROMPT: &str = "You are a senior software architect. Propose a \
concrete design for the problem: components, data flow, storage, failure handling and \
trade-offs. Address every listed requirement explicitly.";

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// The strategy file (JSON): `strategies` (`single`, `self-consistency`, `debate`),
    /// `evaluators` (a `parley eval` config), `recuse`, `prices`; see docs/src/guide/compare.md.
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config: PathBuf,
    /// The problem set: a directory of Markdown problems with a `## Requirements` list.
    #[arg(short = 'p', long, value_name = "DIR", default_value = "problems")]
    pub problems: PathBuf,
    /// Output directory: report.md, runs.csv, chart.svg, and the finished runs (kept for
    /// resuming).
    #[arg(short = 'o', long, value_name = "DIR", default_value = "compare-out")]
    pub out: PathBuf,
    /// Price file (LiteLLM format) for the runs' costs [default: the strategy file's
    /// `prices`; without one only `local` is priced, at 0].
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Submit the debate strategies to this cluster instead of running them here (repeat
    /// the flag, or separate URLs with commas, to name several servers of one NATS cluster).
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub nats_url: Vec<String>,
    /// NATS credentials file for `--nats-url`.
    #[arg(
        long,
        env = "PARLEY_NATS_CREDS",
        value_name = "FILE",
        requires = "nats_url"
    )]
    pub nats_creds: Option<PathBuf>,
    /// Inbox prefix of this client's NATS replies.
    #[arg(long, env = "PARLEY_NATS_INBOX_PREFIX", value_name = "PREFIX")]
    pub nats_inbox_prefix: Option<String>,
    /// Load environment variables (API keys) from this file (default ./.env when present).
    #[arg(short = 'e', long, value_name = "FILE")]
    pub env_file: Option<PathBuf>,
}

/// The progress line on stderr: redrawn in place on a terminal, one line per step otherwise.
struct Progress {
    total: usize,
    done: usize,
    tty: bool,
}

impl Progress {
    fn new(total: usize) -> Self {
        Self {
            total,
            done: 0,
            tty: std::io::stderr().is_terminal(),
        }
    }

    fn show(&self, what: &str) {
        const WIDTH: usize = 24;
        let filled = (self.done * WIDTH).checked_div(self.total).unwrap_or(WIDTH);
        let line = format!(
            "[{}{}] {}/{} {what}",
            "#".repeat(filled),
            "-".repeat(WIDTH - filled),
            self.done,
            self.total
        );
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[K{line}");
            let _ = err.flush();
        } else {
            let _ = writeln!(err, "{line}");
        }
    }

    fn step(&mut self, what: &str) {
        self.done += 1;
        self.show(what);
    }

    fn note(&self, message: &str) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[K");
        }
        let _ = writeln!(err, "{message}");
    }

    fn finish(&self) {
        if self.tty {
            let _ = writeln!(std::io::stderr());
        }
    }
}

pub async fn compare(args: CompareArgs, interrupt: &CancellationToken) -> Result<(), CliError> {
    let file = load_compare_file(&args.config)?;
    let base_dir = args
        .config
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let problems = problems::load_dir(&args.problems)?;
    let mut warn = |w: String| eprintln!("warning: {w}");
    let mut evaluators = eval::load_config(&base_dir.join(&file.evaluators), false, &mut warn)?;
    for e in &evaluators {
        if !problems::is_safe_id(&e.agent.id) {
            return Err(CliError::config(format!(
                "evaluator id {:?} must be letters, digits, '-' or '_' (it names output files)",
                e.agent.id
            )));
        }
    }
    let prices_path = args
        .prices
        .clone()
        .or_else(|| file.prices.as_ref().map(|p| base_dir.join(p)));
    let prices = match &prices_path {
        Some(p) => PriceTable::load(p).map_err(|e| CliError::config(e.to_string()))?,
        None => PriceTable::new(),
    };
    parley_llm::set_prices(prices.clone());

    // One registry for the single / self-consistency agents and the evaluators.
    let mut settings = ProviderSettings::from_env(file.base_url.clone());
    settings.agent_base_urls = evaluators
        .iter()
        .filter_map(|e| Some((e.agent.id.clone(), e.agent.base_url.clone()?)))
        .collect();
    let registry = Arc::new(Registry::new(settings));
    let mut uses_local = eval::resolve_timeouts(&registry, &mut evaluators, false)?;
    let strategies: Vec<(StrategySpec, Prepared)> = file
        .strategies
        .iter()
        .map(|s| {
            let p = prepare(s, &base_dir, &registry, &args, &mut uses_local)?;
            Ok((s.clone(), p))
        })
        .collect::<Result<_, CliError>>()?;
    if uses_local {
        config::load_local_model(&registry)?;
    }
    let out = OutDir {
        root: args.out.clone(),
    };
    std::fs::create_dir_all(&out.root)
        .map_err(|e| CliError::general(format!("cannot create {}: {e}", out.root.display())))?;

    let cluster = match &args.nats_url {
        urls if !urls.is_empty() && strategies.iter().any(|(s, _)| s.kind() == "debate") => {
            let nats = crate::remote::NatsArgs {
                nats_url: urls.clone(),
                nats_creds: args.nats_creds.clone(),
                nats_inbox_prefix: args.nats_inbox_prefix.clone(),
            };
            Some(crate::remote::connect(&nats).await?)
        }
        _ => None,
    };

    // 1. The runs.
    let n_pairs = strategies.len() * strategies.len().saturating_sub(1) / 2;
    let total = problems.len() * strategies.len()
        + problems.len() * strategies.len()
        + if file.pairwise {
            problems.len() * n_pairs
        } else {
            0
        };
    let mut progress = Progress::new(total);
    progress.show("starting");
    let mut runs = Vec::new();
    let mut failed = Vec::new();
    let mut reused = 0;
    let stopped = |progress: &Progress| {
        progress.finish();
        CliError::interrupted(format!(
            "interrupted; the finished runs are kept in {}: run the same command again to continue",
            out.root.display()
        ))
    };
    for problem in &problems {
        for (spec, prepared) in &strategies {
            if interrupt.is_cancelled() {
                return Err(stopped(&progress));
            }
            let path = out.run(&problem.id, spec.name());
            let label = format!("{} · {}", problem.id, spec.name());
            let wanted = input_digest(problem, spec, prepared);
            if let Some(r) = read_record::<RunRecord>(&path).filter(|r| r.input_digest == wanted) {
                reused += 1;
                runs.push(r);
                progress.step(&format!("{label} (done before)"));
                continue;
            }
            progress.show(&format!("{label} running"));
            let started = Instant::now();
            let result = tokio::select! {
                r = execute(spec, prepared, problem, &out, cluster.as_ref(), interrupt) => r,
                _ = interrupt.cancelled() => return Err(stopped(&progress)),
            };
            match result {
                Ok(mut r) => {
                    r.wall_ms = started.elapsed().as_millis() as u64;
                    r.input_digest = wanted;
                    write_record(&path, &r)?;
                    runs.push(r);
                }
                Err(e) if e.code == 130 => return Err(stopped(&progress)),
                Err(e) => {
                    progress.note(&format!("run {label} failed: {}", e.message));
                    failed.push(FailedRun {
                        problem: problem.id.clone(),
                        strategy: spec.name().to_string(),
                        error: e.message,
                    });
                }
            }
            progress.step(&label);
        }
    }

    // 2. The rubric, per run, by the evaluators not recused from its strategy.
    let mut eval_spend = EvalSpend::default();
    let mut rubric = BTreeMap::new();
    for problem in &problems {
        for (spec, _) in &strategies {
            if interrupt.is_cancelled() {
                return Err(stopped(&progress));
            }
            let label = format!("rubric {} · {}", problem.id, spec.name());
            let Some(run) = runs
                .iter()
                .find(|r| r.problem == problem.id && r.strategy == spec.name())
            else {
                progress.step(&format!("{label} (no answer)"));
                continue;
            };
            let path = out.rubric(&problem.id, spec.name());
            let wanted = digest(&[&run.answer]);
            let record = match read_record::<RubricRecord>(&path)
                .filter(|r| r.answer_digest == wanted)
            {
                Some(r) => {
                    reused += 1;
                    r
                }
                None => {
                    let r = tokio::select! {
                        r = rubric_of(&registry, &evaluators, &file, problem, run, &mut eval_spend) => r,
                        _ = interrupt.cancelled() => return Err(stopped(&progress)),
                    };
                    write_record(&path, &r)?;
                    r
                }
            };
            rubric.insert((problem.id.clone(), spec.name().to_string()), record);
            progress.step(&label);
        }
    }

    // 3. Pairwise, both orders.
    let mut pairs = Vec::new();
    if file.pairwise {
        for problem in &problems {
            for (i, (a, _)) in strategies.iter().enumerate() {
                for (b, _) in &strategies[i + 1..] {
                    if interrupt.is_cancelled() {
                        return Err(stopped(&progress));
                    }
                    let label = format!("pairs {} · {} vs {}", problem.id, a.name(), b.name());
                    let find = |s: &StrategySpec| {
                        runs.iter()
                            .find(|r| r.problem == problem.id && r.strategy == s.name())
                    };
                    let (Some(ra), Some(rb)) = (find(a), find(b)) else {
                        progress.step(&format!("{label} (an answer is missing)"));
                        continue;
                    };
                    for e in &evaluators {
                        if recused(&file, e, ra) || recused(&file, e, rb) {
                            continue;
                        }
                        let path = out.pair(&problem.id, a.name(), b.name(), &e.agent.id);
                        let wanted = digest(&[&ra.answer, &rb.answer]);
                        let record = match read_record::<PairRecord>(&path)
                            .filter(|r| r.answers_digest == wanted)
                        {
                            Some(r) => {
                                reused += 1;
                                r
                            }
                            None => {
                                let r = tokio::select! {
                                    r = judge_pair(&registry, e, problem, ra, rb, &mut eval_spend) => r,
                                    _ = interrupt.cancelled() => return Err(stopped(&progress)),
                                };
                                write_record(&path, &r)?;
                                r
                            }
                        };
                        pairs.push(record);
                    }
                    progress.step(&label);
                }
            }
        }
    }
    progress.finish();

    let results = Results {
        file: &file,
        problems: &problems,
        dollars: runs.iter().all(|r| r.cost_usd.is_some())
            && runs.iter().any(|r| r.cost_usd.is_some_and(|c| c > 0.0)),
        runs,
        failed,
        rubric,
        pairs,
        eval_spend,
        reused,
    };
    output::write_all(&out.root, &results)?;
    eprintln!(
        "Wrote {}, {} and {}",
        out.root.join("report.md").display(),
        out.root.join("runs.csv").display(),
        out.root.join("chart.svg").display()
    );
    if !results.failed.is_empty() {
        return Err(CliError::provider(format!(
            "{} run(s) failed (see the report); run the same command again to retry them",
            results.failed.len()
        )));
    }
    Ok(())
}

/// Whether `recuse` keeps evaluator `e` away from `run`'s answer.
fn recused(file: &CompareFile, e: &Evaluator, run: &RunRecord) -> bool {
    if !file.recuse {
        return false;
    }
    let family = family_of(&e.agent.model, &file.families);
    run.models
        .iter()
        .any(|m| family_of(m, &file.families) == family)
}
