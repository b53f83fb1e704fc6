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

mod output;
pub mod problems;
pub mod stats;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use parley_cli::EmbeddedRunner;
use parley_engine::{run_debate_until, FileStore, Input, Machine};
use parley_llm::{ChatMessage, ChatRequest, ProviderSettings, Registry, ResponseFormat};
use parley_protocol::{AgentConfig, DebateSpec, DebateState, DebateStatus, PriceTable};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Overrides};
use crate::eval::{self, DebateInput, Evaluator};
use crate::CliError;
use problems::Problem;
use stats::{Outcome, Verdict};

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
const SELECT_SYSTEM_PROMPT: &str = "You are a strict reviewer of software designs. You are \
given a problem and several candidate answers, numbered from 1. Pick the single best \
answer: the one that meets the most requirements with a sound, concrete design. Reply with \
JSON only: {\"best\": <number>, \"reason\": \"<one sentence>\"}.";
const PAIR_SYSTEM_PROMPT: &str = "You are an impartial judge of software designs. You are \
given a problem, its requirements and two answers, A and B. Decide which answer is better \
on requirement coverage, soundness and concreteness; answer \"tie\" only if neither is \
better. The order of the answers is arbitrary and must not influence you. Reply with JSON \
only: {\"winner\": \"A\" | \"B\" | \"tie\", \"reason\": \"<one sentence>\"}.";

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

/// The strategy file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompareFile {
    /// The strategies as written: each is read by its `type` in [`load_compare_file`], so
    /// an error names its key (`strategies[1].samples`).
    #[serde(rename = "strategies")]
    raw_strategies: Vec<Value>,
    #[serde(skip)]
    pub strategies: Vec<StrategySpec>,
    /// `parley eval`'s evaluator config, relative to this file.
    pub evaluators: PathBuf,
    /// Keep an evaluator away from the answers of a strategy that uses a model of its
    /// family (rubric and pairs).
    #[serde(default)]
    pub recuse: bool,
    /// Model → family, where the family read from the name is not the right one.
    #[serde(default)]
    pub families: BTreeMap<String, String>,
    /// Ask the pairwise comparisons (default true).
    #[serde(default = "yes")]
    pub pairwise: bool,
    /// The OpenAI-compatible endpoint of the single and self-consistency agents (and of
    /// evaluators without their own).
    #[serde(default)]
    pub base_url: Option<String>,
    /// Price file (LiteLLM format), relative to this file.
    #[serde(default)]
    pub prices: Option<PathBuf>,
    #[serde(default)]
    pub bootstrap: BootstrapSpec,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootstrapSpec {
    #[serde(default = "default_resamples")]
    pub resamples: u32,
    #[serde(default = "default_seed")]
    pub seed: u64,
}

impl Default for BootstrapSpec {
    fn default() -> Self {
        Self {
            resamples: default_resamples(),
            seed: default_seed(),
        }
    }
}

fn default_resamples() -> u32 {
    2000
}
fn default_seed() -> u64 {
    20_260_101
}

/// One strategy of the file, by its `type`: `single`, `self-consistency` or `debate`.
#[derive(Debug, Clone)]
pub enum StrategySpec {
    Single(SingleSpec),
    SelfConsistency(SelfConsistencySpec),
    Debate(DebateStrategySpec),
}

/// A model and where it runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelRef {
    pub model: String,
    #[serde(default)]
    pub provider: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SingleSpec {
    pub name: String,
    pub model: String,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SelfConsistencySpec {
    pub name: String,
    pub model: String,
    #[serde(default)]
    pub provider: Option<String>,
    pub samples: u32,
    /// The samples' temperature (default 0.8: they should differ).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// The model that picks the best sample (default: the samples' model).
    #[serde(default)]
    pub judge: Option<ModelRef>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DebateStrategySpec {
    pub name: String,
    /// A debate-config.json, relative to the compare file.
    pub config: PathBuf,
    /// Overrides the config's `debate.rounds`.
    #[serde(default)]
    pub rounds: Option<u32>,
}

impl StrategySpec {
    pub fn name(&self) -> &str {
        match self {
            StrategySpec::Single(s) => &s.name,
            StrategySpec::SelfConsistency(s) => &s.name,
            StrategySpec::Debate(s) => &s.name,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            StrategySpec::Single(_) => "single",
            StrategySpec::SelfConsistency(_) => "self-consistency",
            StrategySpec::Debate(_) => "debate",
        }
    }
}

/// Reads and checks the strategy file: every problem is a configuration error (exit 4)
/// naming the file and the key (`strategies[1].samples`).
pub fn load_compare_file(path: &Path) -> Result<CompareFile, CliError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::config(format!("cannot read strategy file {shown}: {e}")))?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    let mut file: CompareFile = serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        if key == "." || key.is_empty() {
            CliError::config(format!("strategy file {shown}: {inner}"))
        } else {
            CliError::config(format!("strategy file {shown}: {key}: {inner}"))
        }
    })?;
    file.strategies = std::mem::take(&mut file.raw_strategies)
        .into_iter()
        .enumerate()
        .map(|(i, v)| strategy_of(i, v))
        .collect::<Result<_, String>>()
        .map_err(|e| CliError::config(format!("strategy file {shown}: {e}")))?;
    let mut problems = Vec::new();
    if file.strategies.is_empty() {
        problems.push("strategies: at least one strategy is required".to_string());
    }
    let mut names = BTreeSet::new();
    for (i, s) in file.strategies.iter().enumerate() {
        let at = format!("strategies[{i}]");
        if !problems::is_safe_id(s.name()) {
            problems.push(format!(
                "{at}.name: {:?} must be 1-80 letters, digits, '-' or '_' (it names output files)",
                s.name()
            ));
        } else if !names.insert(s.name().to_string()) {
            problems.push(format!("{at}.name: {:?} is used twice", s.name()));
        }
        let (model, temperature, timeout) = match s {
            StrategySpec::Single(s) => (Some(&s.model), s.temperature, s.timeout_ms),
            StrategySpec::SelfConsistency(s) => {
                if !(2..=MAX_SAMPLES).contains(&s.samples) {
                    problems.push(format!(
                        "{at}.samples: must be 2 to {MAX_SAMPLES}, not {}",
                        s.samples
                    ));
                }
                if s.judge.as_ref().is_some_and(|j| j.model.trim().is_empty()) {
                    problems.push(format!("{at}.judge.model: must not be empty"));
                }
                (Some(&s.model), s.temperature, s.timeout_ms)
            }
            StrategySpec::Debate(d) => {
                if d.rounds.is_some_and(|r| !(1..=20).contains(&r)) {
                    problems.push(format!("{at}.rounds: must be 1 to 20"));
                }
                (None, None, None)
            }
        };
        if model.is_some_and(|m| m.trim().is_empty()) {
            problems.push(format!("{at}.model: must not be empty"));
        }
        if temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
            problems.push(format!("{at}.temperature: must be 0 to 2"));
        }
        if timeout == Some(0) {
            problems.push(format!("{at}.timeoutMs: must be at least 1"));
        }
    }
    if !(1..=100_000).contains(&file.bootstrap.resamples) {
        problems.push("bootstrap.resamples: must be 1 to 100000".into());
    }
    if problems.is_empty() {
        Ok(file)
    } else {
        Err(CliError::config(format!(
            "strategy file {shown}: {}",
            problems.join("; ")
        )))
    }
}

/// Reads `strategies[i]` by its `type`; an error names the key.
fn strategy_of(i: usize, v: Value) -> Result<StrategySpec, String> {
    let at = format!("strategies[{i}]");
    let Value::Object(mut map) = v else {
        return Err(format!("{at}: expected an object with a type"));
    };
    let kind = match map.remove("type") {
        Some(Value::String(t)) => t,
        Some(other) => return Err(format!("{at}.type: expected a string, not {other}")),
        None => {
            return Err(format!(
                "{at}.type: missing (single, self-consistency or debate)"
            ))
        }
    };
    fn read<T: for<'de> Deserialize<'de>>(
        at: &str,
        map: serde_json::Map<String, Value>,
    ) -> Result<T, String> {
        serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            if key == "." || key.is_empty() {
                format!("{at}: {inner}")
            } else {
                format!("{at}.{key}: {inner}")
            }
        })
    }
    match kind.as_str() {
        "single" => read(&at, map).map(StrategySpec::Single),
        "self-consistency" => read(&at, map).map(StrategySpec::SelfConsistency),
        "debate" => read(&at, map).map(StrategySpec::Debate),
        other => Err(format!(
            "{at}.type: unknown strategy type {other:?} (single, self-consistency or debate)"
        )),
    }
}

/// A model's family: the `families` entry, else the leading letters of its name after any
/// `vendor/` prefix, lower-cased (`gpt-4o` → `gpt`, `SmolLM2-135M` → `smollm`).
pub fn family_of(model: &str, families: &BTreeMap<String, String>) -> String {
    if let Some(f) = families.get(model) {
        return f.to_ascii_lowercase();
    }
    let name = model.rsplit('/').next().unwrap_or(model);
    let letters: String = name
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase();
    if letters.is_empty() {
        name.to_ascii_lowercase()
    } else {
        letters
    }
}

/// One run of one strategy on one problem, as persisted in `runs/<problem>__<strategy>.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub problem: String,
    pub strategy: String,
    pub kind: String,
    pub answer: String,
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Dollars; absent when a call's model has no price.
    pub cost_usd: Option<f64>,
    pub wall_ms: u64,
    /// The models the strategy called (for `recuse`).
    pub models: Vec<String>,
    /// The debate's id (debate strategies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debate_id: Option<String>,
    /// Self-consistency: which sample (1-based) the judge picked, or why none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<String>,
    /// [`input_digest`] of the problem and strategy this run answered: a run made for
    /// another problem text or strategy setting is made again, not reused.
    #[serde(default)]
    pub input_digest: String,
}

/// A run that did not finish (kept in memory only: a re-run tries it again).
#[derive(Debug, Clone)]
pub struct FailedRun {
    pub problem: String,
    pub strategy: String,
    pub error: String,
}

/// The rubric result of one run, persisted in `evals/rubric/<problem>__<strategy>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RubricRecord {
    /// [`digest`] of the answer scored: a re-made run is scored again.
    pub answer_digest: String,
    /// The averaged scores in `parley eval`'s order (the last one is the overall score).
    pub averages: Vec<Option<f64>>,
    /// Evaluators recused from this strategy.
    pub recused: Vec<String>,
    /// Evaluators whose reply did not count, and why.
    pub skipped: BTreeMap<String, String>,
}

impl RubricRecord {
    pub fn overall(&self) -> Option<f64> {
        self.averages.last().copied().flatten()
    }
}

/// One evaluator's pairwise judgement of two runs, in both orders, persisted in
/// `evals/pairs/<problem>__<a>__<b>__<evaluator>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PairRecord {
    pub problem: String,
    pub a: String,
    pub b: String,
    pub evaluator: String,
    /// [`digest`] of the two answers judged: a re-made run is judged again.
    pub answers_digest: String,
    /// The verdict with `a` shown first (`None`: no usable reply).
    pub a_first: Option<Verdict>,
    /// The verdict with `b` shown first.
    pub b_first: Option<Verdict>,
}

impl PairRecord {
    pub fn outcome(&self) -> Option<Outcome> {
        Some(Outcome::of(self.a_first?, self.b_first?))
    }
}

/// The evaluator calls' own spend (not part of any strategy's cost).
#[derive(Debug, Default, Clone, Copy)]
pub struct EvalSpend {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Everything the report is written from.
pub struct Results<'a> {
    pub file: &'a CompareFile,
    pub problems: &'a [Problem],
    pub runs: Vec<RunRecord>,
    pub failed: Vec<FailedRun>,
    pub rubric: BTreeMap<(String, String), RubricRecord>,
    pub pairs: Vec<PairRecord>,
    /// Cost is plotted in dollars: every run has a known cost and some cost is not zero
    /// (all-local comparisons cost $0: tokens tell them apart).
    pub dollars: bool,
    pub eval_spend: EvalSpend,
    /// Runs and evaluations taken from the out directory rather than made now.
    pub reused: usize,
}

/// Where a comparison keeps its pieces.
struct OutDir {
    root: PathBuf,
}

impl OutDir {
    fn run(&self, problem: &str, strategy: &str) -> PathBuf {
        self.root
            .join("runs")
            .join(format!("{problem}__{strategy}.json"))
    }
    fn rubric(&self, problem: &str, strategy: &str) -> PathBuf {
        self.root
            .join("evals/rubric")
            .join(format!("{problem}__{strategy}.json"))
    }
    fn pair(&self, problem: &str, a: &str, b: &str, evaluator: &str) -> PathBuf {
        self.root
            .join("evals/pairs")
            .join(format!("{problem}__{a}__{b}__{evaluator}.json"))
    }
    fn debates(&self) -> PathBuf {
        self.root.join("debates")
    }
}

/// FNV-1a (64 bits) of `parts`, in hex: a stable fingerprint of the answers an
/// evaluation saw.
pub fn digest(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// What a run depends on: the problem's text and the strategy's settings (for a debate,
/// its whole spec but the problem: agents, prompts, rounds, endpoints left out).
fn input_digest(problem: &Problem, spec: &StrategySpec, prepared: &Prepared) -> String {
    let settings = match prepared {
        Prepared::Calls { system, .. } => format!("{spec:?}\n{system}"),
        Prepared::Debate { template, .. } => {
            serde_json::to_string(template.as_ref()).unwrap_or_else(|_| format!("{spec:?}"))
        }
    };
    digest(&[&problem.text, &settings])
}

/// Reads a persisted record; a missing or unreadable one (an interrupted write) is absent.
fn read_record<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes a record atomically (temporary file, then rename): an interrupt never leaves a
/// half-written record that a resume would trust.
fn write_record<T: Serialize>(path: &Path, record: &T) -> Result<(), CliError> {
    let err =
        |e: std::io::Error| CliError::general(format!("cannot write {}: {e}", path.display()));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    let text = serde_json::to_string_pretty(record)
        .map_err(|e| CliError::general(format!("cannot encode {}: {e}", path.display())))?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n").map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
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

/// A strategy made ready to run: its agents and the registry they call through.
enum Prepared {
    Calls {
        registry: Arc<Registry>,
        /// Answering agent (single, samples).
        agent: Box<AgentConfig>,
        /// Self-consistency: (samples, picking agent).
        select: Option<(u32, Box<AgentConfig>)>,
        system: String,
        timeout: Duration,
    },
    Debate {
        /// The spec for a problem (its `problem` is replaced per run).
        template: Box<DebateSpec>,
        registry: Option<Arc<Registry>>,
    },
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

fn agent_for(id: &str, model: &str, provider: Option<&String>, temperature: f64) -> AgentConfig {
    AgentConfig {
        provider: provider.cloned(),
        ..AgentConfig::new(id, id, "architect", model, temperature)
    }
}

fn prepare(
    spec: &StrategySpec,
    base_dir: &Path,
    registry: &Arc<Registry>,
    args: &CompareArgs,
    uses_local: &mut bool,
) -> Result<Prepared, CliError> {
    let mut check = |a: &AgentConfig| -> Result<Duration, CliError> {
        let r = registry
            .resolve(a)
            .map_err(|e| CliError::config(format!("strategy {}: {e}", spec.name())))?;
        *uses_local |= r.kind == "local";
        Ok(Duration::from_millis(if r.kind == "local" {
            LOCAL_CALL_TIMEOUT_MS
        } else {
            DEFAULT_CALL_TIMEOUT_MS
        }))
    };
    match spec {
        StrategySpec::Single(s) => {
            let agent = agent_for(
                &s.name,
                &s.model,
                s.provider.as_ref(),
                s.temperature.unwrap_or(0.2),
            );
            let default = check(&agent)?;
            Ok(Prepared::Calls {
                registry: registry.clone(),
                agent: Box::new(agent),
                select: None,
                system: s
                    .system_prompt
                    .clone()
                    .unwrap_or_else(|| ANSWER_SYSTEM_PROMPT.into()),
                timeout: s.timeout_ms.map(Duration::from_millis).unwrap_or(default),
            })
        }
        StrategySpec::SelfConsistency(s) => {
            let agent = agent_for(
                &s.name,
                &s.model,
                s.provider.as_ref(),
                s.temperature.unwrap_or(0.8),
            );
            let default = check(&agent)?;
            let judge_ref = s.judge.clone().unwrap_or(ModelRef {
                model: s.model.clone(),
                provider: s.provider.clone(),
            });
            let judge = agent_for(
                &format!("{}-select", s.name),
                &judge_ref.model,
                judge_ref.provider.as_ref(),
                eval::EVAL_TEMPERATURE,
            );
            let judge_default = check(&judge)?;
            Ok(Prepared::Calls {
                registry: registry.clone(),
                agent: Box::new(agent),
                select: Some((s.samples, Box::new(judge))),
                system: s
                    .system_prompt
                    .clone()
                    .unwrap_or_else(|| ANSWER_SYSTEM_PROMPT.into()),
                timeout: s
                    .timeout_ms
                    .map(Duration::from_millis)
                    .unwrap_or(default.max(judge_default)),
            })
        }
        StrategySpec::Debate(d) => {
            let path = base_dir.join(&d.config);
            let mut warn = |w: String| eprintln!("warning: strategy {}: {w}", d.name);
            let (loaded, endpoints, limits) = config::load_as_operator(Some(&path), &mut warn)?;
            let overrides = Overrides {
                rounds: d.rounds,
                ..Default::default()
            };
            // The problem is set per run; a placeholder lets the spec validate now.
            let mut spec =
                config::build_spec(loaded, "(set per problem)".into(), &overrides, &mut warn)?;
            // Nobody answers questions in a comparison.
            spec.debate.interactive_clarifications = false;
            if !args.nats_url.is_empty() {
                return Ok(Prepared::Debate {
                    template: Box::new(spec),
                    registry: None,
                });
            }
            let registry = crate::run::registry_for(&spec, endpoints, limits)?;
            Ok(Prepared::Debate {
                template: Box::new(spec),
                registry: Some(registry),
            })
        }
    }
}

/// One call, its usage and cost.
struct Call {
    text: String,
    prompt_tokens: u64,
    completion_tokens: u64,
    cost: Option<f64>,
}

async fn call(
    registry: &Registry,
    agent: &AgentConfig,
    req: ChatRequest,
) -> Result<Call, CliError> {
    let kind = registry
        .resolve(agent)
        .map_err(|e| CliError::config(e.to_string()))?
        .kind;
    let provider = registry
        .provider_for(agent)
        .map_err(|e| CliError::config(e.to_string()))?;
    let r = provider
        .complete(&req)
        .await
        .map_err(|e| CliError::provider(format!("{} ({}): {e}", agent.id, agent.model)))?;
    let cost = parley_llm::prices().cost(
        kind,
        &agent.model,
        r.prompt_tokens,
        r.cached_prompt_tokens,
        r.completion_tokens,
    );
    Ok(Call {
        text: r.text,
        prompt_tokens: r.prompt_tokens,
        completion_tokens: r.completion_tokens,
        cost,
    })
}

fn request(
    agent: &AgentConfig,
    system: &str,
    user: String,
    timeout: Duration,
    seed: Option<u64>,
    format: Option<ResponseFormat>,
) -> ChatRequest {
    ChatRequest {
        model: agent.model.clone(),
        messages: vec![
            ChatMessage::system(system.to_string()),
            ChatMessage::user(user),
        ],
        temperature: agent.temperature,
        max_tokens: None,
        timeout,
        seed,
        tools: Default::default(),
        response_format: format,
    }
}

/// Runs one strategy on one problem.
async fn execute(
    spec: &StrategySpec,
    prepared: &Prepared,
    problem: &Problem,
    out: &OutDir,
    cluster: Option<&async_nats::Client>,
    interrupt: &CancellationToken,
) -> Result<RunRecord, CliError> {
    let mut record = RunRecord {
        problem: problem.id.clone(),
        strategy: spec.name().to_string(),
        kind: spec.kind().to_string(),
        answer: String::new(),
        calls: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        cost_usd: Some(0.0),
        wall_ms: 0,
        models: Vec::new(),
        debate_id: None,
        selection: None,
        input_digest: String::new(),
    };
    let add = |r: &mut RunRecord, c: &Call| {
        r.calls += 1;
        r.prompt_tokens += c.prompt_tokens;
        r.completion_tokens += c.completion_tokens;
        r.cost_usd = parley_protocol::add_cost(r.cost_usd, c.cost);
    };
    match prepared {
        Prepared::Calls {
            registry,
            agent,
            select,
            system,
            timeout,
        } => {
            record.models.push(agent.model.clone());
            let Some((samples, judge)) = select else {
                let c = call(
                    registry,
                    agent,
                    request(agent, system, problem.text.clone(), *timeout, None, None),
                )
                .await?;
                add(&mut record, &c);
                record.answer = c.text;
                return Ok(record);
            };
            let calls = (0..*samples).map(|i| {
                call(
                    registry,
                    agent,
                    request(
                        agent,
                        system,
                        problem.text.clone(),
                        *timeout,
                        Some(u64::from(i) + 1),
                        None,
                    ),
                )
            });
            let answers: Vec<Call> = futures::future::join_all(calls)
                .await
                .into_iter()
                .collect::<Result<_, _>>()?;
            for c in &answers {
                add(&mut record, c);
            }
            if !record.models.contains(&judge.model) {
                record.models.push(judge.model.clone());
            }
            let mut user = format!("# Problem\n\n{}\n\n", problem.text);
            for (i, c) in answers.iter().enumerate() {
                user.push_str(&format!("# Answer {}\n\n{}\n\n", i + 1, c.text.trim()));
            }
            user.push_str(&format!(
                "Which answer (1 to {}) is best? Reply with the JSON object only.",
                answers.len()
            ));
            let picked = call(
                registry,
                judge,
                request(
                    judge,
                    SELECT_SYSTEM_PROMPT,
                    user,
                    *timeout,
                    None,
                    Some(select_format(answers.len())),
                ),
            )
            .await?;
            add(&mut record, &picked);
            let (index, selection) = match parse_selection(&picked.text, answers.len()) {
                Some(i) => (i, format!("sample {}", i + 1)),
                None => (
                    0,
                    "sample 1: the judge's reply named no valid sample".to_string(),
                ),
            };
            record.selection = Some(selection);
            record.answer = answers[index].text.clone();
            Ok(record)
        }
        Prepared::Debate { template, registry } => {
            let mut spec = (**template).clone();
            spec.problem = problem.text.as_str().into();
            spec.idempotency_key = Some(idempotency_key(&out.root, &problem.id, &record.strategy));
            let mut models: Vec<String> = spec
                .active_agents()
                .chain(std::iter::once(&spec.judge))
                .map(|a| a.model.clone())
                .collect();
            models.sort();
            models.dedup();
            record.models = models;
            let state = match (registry, cluster) {
                (Some(registry), _) => {
                    run_embedded_debate(spec.clone(), registry.clone(), out, interrupt).await?
                }
                (None, Some(client)) => crate::remote::submit_and_wait(client, &spec).await?,
                (None, None) => {
                    return Err(CliError::general(
                        "a debate strategy has neither a registry nor a cluster",
                    ))
                }
            };
            record.debate_id = Some(state.id.clone());
            if state.status != DebateStatus::Completed {
                let why = state
                    .error
                    .as_ref()
                    .map(|f| format!(": {}", f.message))
                    .unwrap_or_default();
                return Err(CliError::provider(format!(
                    "debate {} ended {}{why}",
                    state.id,
                    state.status.as_str()
                )));
            }
            let spend = parley_protocol::Spend::of(&state, &spec.judge.id);
            record.calls = spend.calls;
            record.cost_usd = spend.cost_usd;
            let (prompt, completion) = token_split(&state);
            record.prompt_tokens = prompt;
            record.completion_tokens = completion;
            record.answer = crate::report::solution_text(&state);
            Ok(record)
        }
    }
}

/// The key of one run's cluster submission: the same out directory, problem and strategy
/// give the same key (a resumed comparison follows the debate it started), at most 128
/// bytes.
fn idempotency_key(out: &Path, problem: &str, strategy: &str) -> String {
    let dir = std::fs::canonicalize(out).unwrap_or_else(|_| out.to_path_buf());
    format!(
        "compare-{}",
        digest(&[&dir.to_string_lossy(), problem, strategy])
    )
}

/// Prompt and completion tokens of every call a debate made. A call that reported only
/// its total (a summary, or a contribution without the split) counts as prompt tokens.
fn token_split(state: &DebateState) -> (u64, u64) {
    let split =
        |m: &parley_protocol::ContributionMetadata| match (m.prompt_tokens, m.completion_tokens) {
            (Some(p), Some(c)) => (p, c),
            _ => (m.tokens_used, 0),
        };
    let mut calls: Vec<(u64, u64)> = Vec::new();
    for r in &state.rounds {
        calls.extend(
            r.contributions
                .iter()
                .map(|c| &c.metadata)
                .filter(|m| !m.carried_over)
                .map(split),
        );
        calls.extend(r.evaluation.iter().map(|e| split(&e.metadata)));
        calls.extend(r.summaries.values().map(|s| (s.metadata.tokens_used, 0)));
    }
    calls.extend(state.synthesis_metadata.iter().map(split));
    calls.extend(
        state
            .judge_summary
            .iter()
            .map(|j| (j.metadata.tokens_used, 0)),
    );
    calls
        .iter()
        .fold((0, 0), |(p, c), (dp, dc)| (p + dp, c + dc))
}

async fn run_embedded_debate(
    mut spec: DebateSpec,
    registry: Arc<Registry>,
    out: &OutDir,
    interrupt: &CancellationToken,
) -> Result<DebateState, CliError> {
    let pricing = parley_engine::Pricing::new(
        parley_llm::prices().as_ref().clone(),
        parley_protocol::limits::DEFAULT_MAX_TOKENS,
    );
    // As `parley run`: the debate's own budget (if any) is admitted for this problem.
    parley_engine::budget::admit(&mut spec, &Default::default(), &pricing)
        .map_err(CliError::config)?;
    let runner = Arc::new(EmbeddedRunner {
        registry,
        context_files: None,
    });
    let mut machine = Machine::new(parley_protocol::new_debate_id(Utc::now()), spec, Utc::now());
    machine.set_pricing(pricing);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The compare progress line stands for the debate's own.
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let driven = run_debate_until(
        machine,
        Input::Start,
        runner,
        Some(FileStore::new(out.debates())),
        tx,
        interrupt,
        crate::run::INTERRUPT_GRACE,
    )
    .await
    .map_err(|e| CliError::general(e.to_string()))?;
    let _ = drain.await;
    if driven.interrupted {
        return Err(CliError::interrupted("interrupted"));
    }
    Ok(driven.state)
}

fn select_format(n: usize) -> ResponseFormat {
    ResponseFormat::strict(
        "best_sample",
        json!({
            "type": "object",
            "properties": {
                "best": {"type": "integer", "minimum": 1, "maximum": n},
                "reason": {"type": "string"}
            },
            "required": ["best", "reason"],
            "additionalProperties": false
        }),
    )
}

/// The judge's pick, 0-based, from `{"best": n}` (a number or numeric string, 1..=n).
fn parse_selection(text: &str, n: usize) -> Option<usize> {
    let reply = eval::parse_reply(text)?;
    let best = match reply.get("best")? {
        Value::Number(x) => x.as_u64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    (1..=n as u64).contains(&best).then(|| best as usize - 1)
}

/// The rubric of `parley eval` on one run's answer, by the evaluators not recused.
async fn rubric_of(
    registry: &Registry,
    evaluators: &[Evaluator],
    file: &CompareFile,
    problem: &Problem,
    run: &RunRecord,
    spend: &mut EvalSpend,
) -> RubricRecord {
    let (recused, judging): (Vec<&Evaluator>, Vec<&Evaluator>) =
        evaluators.iter().partition(|e| recused(file, e, run));
    let judging: Vec<Evaluator> = judging.into_iter().cloned().collect();
    let input = DebateInput {
        name: format!("{}__{}", problem.id, run.strategy),
        problem: problem.text.clone(),
        final_solution: run.answer.clone(),
        clarifications: "None.".into(),
        requirements_info: serde_json::to_string_pretty(&json!({
            "majorRequirements": problem.requirements,
        }))
        .unwrap_or_default(),
    };
    let replies = eval::call_locally(registry, &judging, &input).await;
    for r in replies.iter().flatten() {
        spend.calls += 1;
        spend.prompt_tokens += r.prompt_tokens;
        spend.completion_tokens += r.completion_tokens;
    }
    let scored = eval::score(&judging, &input, replies, false);
    RubricRecord {
        answer_digest: digest(&[&run.answer]),
        averages: scored.averages,
        recused: recused.iter().map(|e| e.agent.id.clone()).collect(),
        skipped: scored
            .skipped
            .into_iter()
            .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
            .collect(),
    }
}

fn pair_format() -> ResponseFormat {
    ResponseFormat::strict(
        "pairwise_verdict",
        json!({
            "type": "object",
            "properties": {
                "winner": {"type": "string", "enum": ["A", "B", "tie"]},
                "reason": {"type": "string"}
            },
            "required": ["winner", "reason"],
            "additionalProperties": false
        }),
    )
}

/// The pairwise prompt: the problem, its requirements, `first` as answer A and `second`
/// as answer B.
pub fn pair_prompt(problem: &Problem, first: &str, second: &str) -> String {
    let mut reqs = String::new();
    for r in &problem.requirements {
        reqs.push_str(&format!("- {r}\n"));
    }
    format!(
        "# Problem\n\n{}\n\n# Requirements\n\n{reqs}\n# Answer A\n\n{}\n\n# Answer B\n\n{}\n\n\
         Which answer is better? Reply with the JSON object only.",
        problem.text,
        first.trim(),
        second.trim()
    )
}

/// `{"winner": "A" | "B" | "tie"}` (any case) as a verdict.
pub fn parse_verdict(text: &str) -> Option<Verdict> {
    let reply = eval::parse_reply(text)?;
    match reply
        .get("winner")?
        .as_str()?
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "a" => Some(Verdict::First),
        "b" => Some(Verdict::Second),
        "tie" => Some(Verdict::Tie),
        _ => None,
    }
}

/// Asks evaluator `e` about `a` and `b` in both orders (the two calls at once).
async fn judge_pair(
    registry: &Registry,
    e: &Evaluator,
    problem: &Problem,
    a: &RunRecord,
    b: &RunRecord,
    spend: &mut EvalSpend,
) -> PairRecord {
    let ask = |first: &RunRecord, second: &RunRecord| {
        let req = request(
            &e.agent,
            PAIR_SYSTEM_PROMPT,
            pair_prompt(problem, &first.answer, &second.answer),
            e.timeout,
            None,
            Some(pair_format()),
        );
        call(registry, &e.agent, req)
    };
    let (ab, ba) = futures::join!(ask(a, b), ask(b, a));
    let mut verdict = |r: Result<Call, CliError>, order: &str| match r {
        Ok(c) => {
            spend.calls += 1;
            spend.prompt_tokens += c.prompt_tokens;
            spend.completion_tokens += c.completion_tokens;
            let v = parse_verdict(&c.text);
            if v.is_none() {
                eprintln!(
                    "[{}] {} {order}: the reply names no winner; not counted",
                    e.agent.id, problem.id
                );
            }
            v
        }
        Err(err) => {
            eprintln!("[{}] {} {order}: {}", e.agent.id, problem.id, err.message);
            None
        }
    };
    PairRecord {
        problem: problem.id.clone(),
        a: a.strategy.clone(),
        b: b.strategy.clone(),
        evaluator: e.agent.id.clone(),
        answers_digest: digest(&[&a.answer, &b.answer]),
        a_first: verdict(ab, &format!("{} first", a.strategy)),
        b_first: verdict(ba, &format!("{} first", b.strategy)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<CompareFile, CliError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("compare.json");
        std::fs::write(&path, text).unwrap();
        load_compare_file(&path)
    }

    #[test]
    fn a_misspelt_key_is_named_with_its_path() {
        let e = load(
            r#"{"evaluators": "e.json", "strategies": [
            {"type": "single", "name": "one", "model": "m"},
            {"type": "self-consistency", "name": "sc", "model": "m", "sampels": 3}
        ]}"#,
        )
        .unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.message.contains("compare.json"), "{}", e.message);
        assert!(e.message.contains("strategies[1]"), "{}", e.message);
        assert!(e.message.contains("sampels"), "{}", e.message);
    }

    #[test]
    fn a_wrong_type_and_bad_values_are_named() {
        let e = load(
            r#"{"evaluators": "e.json", "strategies": [
            {"type": "single", "name": "one", "model": "m", "temperature": "hot"}
        ]}"#,
        )
        .unwrap_err();
        assert!(
            e.message.contains("strategies[0].temperature"),
            "{}",
            e.message
        );
        let e = load(
            r#"{"evaluators": "e.json", "strategies": [
            {"type": "self-consistency", "name": "sc", "model": "m", "samples": 1},
            {"type": "single", "name": "sc", "model": "m"},
            {"type": "debate", "name": "../x", "config": "d.json"}
        ]}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("strategies[0].samples"), "{}", e.message);
        assert!(e.message.contains("strategies[1].name"), "{}", e.message);
        assert!(e.message.contains("strategies[2].name"), "{}", e.message);
        let e = load(r#"{"evaluators": "e.json", "strategies": [{"type": "vote", "name": "v"}]}"#)
            .unwrap_err();
        assert!(e.message.contains("vote"), "{}", e.message);
        let e = load(r#"{"strategies": []}"#).unwrap_err();
        assert!(e.message.contains("evaluators"), "{}", e.message);
    }

    #[test]
    fn families_come_from_names_or_the_table() {
        let none = BTreeMap::new();
        assert_eq!(family_of("gpt-4o-mini", &none), "gpt");
        assert_eq!(family_of("openai/gpt-4.1", &none), "gpt");
        assert_eq!(family_of("SmolLM2-135M-Instruct", &none), "smollm");
        assert_eq!(family_of("claude-3-5-sonnet", &none), "claude");
        let table = BTreeMap::from([("o3".to_string(), "GPT".to_string())]);
        assert_eq!(family_of("o3", &table), "gpt");
    }

    #[test]
    fn verdicts_and_selections_parse() {
        assert_eq!(
            parse_verdict(r#"{"winner": "A", "reason": "x"}"#),
            Some(Verdict::First)
        );
        assert_eq!(
            parse_verdict(r#"ok ```{"winner":"b"}```"#),
            Some(Verdict::Second)
        );
        assert_eq!(parse_verdict(r#"{"winner": "Tie"}"#), Some(Verdict::Tie));
        assert_eq!(parse_verdict(r#"{"winner": "both"}"#), None);
        assert_eq!(parse_verdict("A is better"), None);
        assert_eq!(parse_selection(r#"{"best": 2}"#, 3), Some(1));
        assert_eq!(parse_selection(r#"{"best": "3"}"#, 3), Some(2));
        assert_eq!(parse_selection(r#"{"best": 4}"#, 3), None);
        assert_eq!(parse_selection(r#"{"best": 0}"#, 3), None);
    }
}
