//! The strategy file: its format, loading and checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::problems;
use super::MAX_SAMPLES;
use crate::CliError;

/// A problem of the strategy file at a key (`strategies[1].samples`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct KeyProblem {
    pub key: String,
    pub message: String,
}

impl KeyProblem {
    fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
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
        .collect::<Result<_, KeyProblem>>()
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
fn strategy_of(i: usize, v: Value) -> Result<StrategySpec, KeyProblem> {
    let at = format!("strategies[{i}]");
    let Value::Object(mut map) = v else {
        return Err(KeyProblem::new(at, "expected an object with a type"));
    };
    let kind = match map.remove("type") {
        Some(Value::String(t)) => t,
        Some(other) => {
            return Err(KeyProblem::new(
                format!("{at}.type"),
                format!("expected a string, not {other}"),
            ))
        }
        None => {
            return Err(KeyProblem::new(
                format!("{at}.type"),
                "missing (single, self-consistency or debate)",
            ))
        }
    };
    fn read<T: for<'de> Deserialize<'de>>(
        at: &str,
        map: serde_json::Map<String, Value>,
    ) -> Result<T, KeyProblem> {
        serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner().to_string();
            if key == "." || key.is_empty() {
                KeyProblem::new(at, inner)
            } else {
                KeyProblem::new(format!("{at}.{key}"), inner)
            }
        })
    }
    match kind.as_str() {
        "single" => read(&at, map).map(StrategySpec::Single),
        "self-consistency" => read(&at, map).map(StrategySpec::SelfConsistency),
        "debate" => read(&at, map).map(StrategySpec::Debate),
        other => Err(KeyProblem::new(
            format!("{at}.type"),
            format!("unknown strategy type {other:?} (single, self-consistency or debate)"),
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
}
