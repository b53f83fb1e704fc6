//! What a comparison keeps: the run and verdict records and the out directory they live in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::file::CompareFile;
use super::problems::Problem;
use super::stats::{Outcome, Verdict};
use crate::CliError;

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
    /// `strategies::input_digest` of the problem and strategy this run answered: a run made for
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
pub(super) struct OutDir {
    pub(super) root: PathBuf,
}

impl OutDir {
    pub(super) fn run(&self, problem: &str, strategy: &str) -> PathBuf {
        self.root
            .join("runs")
            .join(format!("{problem}__{strategy}.json"))
    }
    pub(super) fn rubric(&self, problem: &str, strategy: &str) -> PathBuf {
        self.root
            .join("evals/rubric")
            .join(format!("{problem}__{strategy}.json"))
    }
    pub(super) fn pair(&self, problem: &str, a: &str, b: &str, evaluator: &str) -> PathBuf {
        self.root
            .join("evals/pairs")
            .join(format!("{problem}__{a}__{b}__{evaluator}.json"))
    }
    pub(super) fn debates(&self) -> PathBuf {
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

/// Reads a persisted record; a missing or unreadable one (an interrupted write) is absent.
pub(super) fn read_record<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes a record atomically (temporary file, then rename): an interrupt never leaves a
/// half-written record that a resume would trust.
pub(super) fn write_record<T: Serialize>(path: &Path, record: &T) -> Result<(), CliError> {
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
