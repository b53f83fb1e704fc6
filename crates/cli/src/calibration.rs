//! Estimates that learn: the completion tokens past debates really used, per
//! provider/model and task kind.
//!
//! [`Calibration::load`] reads the saved debates of a directory (the embedded
//! `./debates/*.json` checkpoints; decision records `*.record.json` and anything that is
//! not a saved debate are skipped), newest first, at most [`MAX_DEBATES`] files of at most
//! [`MAX_FILE_BYTES`] each. Every LLM call with a reported completion count is a sample,
//! keyed by the participant's provider (as the estimate resolves it), its configured model
//! and the call's kind: `proposal` (carried-over proposals are not calls), `critique`,
//! `refinement`, `synthesis`. Other kinds (summaries, evaluations, verdicts, votes,
//! clarifications) keep the assumption. At most [`MAX_SAMPLES`] samples a key are kept (the
//! newest).
//!
//! A key with at least [`MIN_SAMPLES`] samples is *calibrated*: the estimate's expected
//! reply is their mean, its min and max replies the mean less and plus twice their
//! standard deviation (at least one token, at most the call's cap). A key with fewer
//! samples uses the provider/model's calls of every kind pooled, when they are at least
//! [`MIN_SAMPLES`] ("calibrated from 30 calls of gpt-4o-mini (all kinds)"). Otherwise the
//! reply is *assumed*: [`super::estimate::Assumptions::reply_tokens`] (400 by default).

use std::collections::BTreeMap;
use std::path::Path;

use parley_protocol::{AgentConfig, ContributionMetadata, ContributionType, DebateSpec};
use serde::Serialize;

/// Samples a key needs before its mean is used (fewer: the assumption).
pub const MIN_SAMPLES: usize = 5;
/// Samples kept per key (the newest).
pub const MAX_SAMPLES: usize = 1_000;
/// Saved debates read (the newest by modification time).
pub const MAX_DEBATES: usize = 200;
/// A file larger than this is not read.
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// Which calls a sample belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub provider: String,
    pub model: String,
    /// The estimate's kind name (`proposal`, `critique`, `refinement`, `synthesis`).
    pub kind: String,
}

/// Completion tokens of past calls, per [`Key`].
#[derive(Debug, Clone, Default)]
pub struct Calibration {
    samples: BTreeMap<Key, Vec<u64>>,
}

/// What the estimate used for one key's replies.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Basis {
    pub provider: String,
    pub model: String,
    pub kind: String,
    /// `calibrated` or `assumed`.
    pub basis: &'static str,
    /// Past calls found for this key (calibrated: at least [`MIN_SAMPLES`]).
    pub samples: usize,
    /// Expected completion tokens of one reply.
    pub mean_tokens: u64,
    /// Standard deviation of the samples (0 when assumed).
    pub spread_tokens: u64,
    /// The sentence the table shows ("calibrated from 14 calls of gpt-4o-mini
    /// proposals", "assumed 400 tokens").
    pub note: String,
}

impl Calibration {
    /// Adds one sample (also to its provider/model's pool of every kind).
    pub fn add(&mut self, key: Key, completion_tokens: u64) {
        let pool = Key {
            kind: String::new(),
            ..key.clone()
        };
        for k in [key, pool] {
            let v = self.samples.entry(k).or_default();
            if v.len() < MAX_SAMPLES {
                v.push(completion_tokens);
            }
        }
    }

    /// Samples of every key.
    pub fn len(&self) -> usize {
        self.samples
            .iter()
            .filter(|(k, _)| !k.kind.is_empty())
            .map(|(_, v)| v.len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the saved debates of `dir` (see the module docs); a missing directory is an
    /// empty calibration, an unreadable file is skipped.
    pub fn load(dir: &Path, provider_of: &dyn Fn(&AgentConfig) -> String) -> Self {
        let mut cal = Self::default();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return cal;
        };
        let mut files: Vec<(std::time::SystemTime, std::path::PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let path = e.path();
                let name = path.file_name()?.to_str()?;
                if !name.ends_with(".json") || name.ends_with(".record.json") {
                    return None;
                }
                let meta = e.metadata().ok()?;
                (meta.is_file() && meta.len() <= MAX_FILE_BYTES)
                    .then(|| (meta.modified().unwrap_or(std::time::UNIX_EPOCH), path))
            })
            .collect();
        files.sort_by_key(|f| std::cmp::Reverse(f.0));
        for (_, path) in files.into_iter().take(MAX_DEBATES) {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            cal.add_saved(&bytes, provider_of);
        }
        cal
    }

    /// Adds the calls of one saved debate (its bytes as stored); not a debate: nothing.
    pub fn add_saved(&mut self, bytes: &[u8], provider_of: &dyn Fn(&AgentConfig) -> String) {
        let Ok(doc) = serde_json::from_slice::<serde_json::Value>(bytes) else {
            return;
        };
        let spec: Option<DebateSpec> = doc
            .get(parley_engine::store::SPEC_FIELD)
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        let Ok(state) = parley_protocol::saved_state_from_value(doc) else {
            return;
        };
        let participant = |id: &str| {
            spec.as_ref().and_then(|s| {
                s.agents
                    .iter()
                    .chain(std::iter::once(&s.judge))
                    .find(|a| a.id == id)
            })
        };
        let mut add = |id: &str, kind: &str, meta: &ContributionMetadata| {
            let Some(tokens) = meta.completion_tokens else {
                return;
            };
            if meta.carried_over {
                return;
            }
            let (provider, model) = match participant(id) {
                Some(a) => (provider_of(a), a.model.clone()),
                None => (
                    meta.provider.clone().unwrap_or_else(|| "unknown".into()),
                    meta.model.clone(),
                ),
            };
            self.add(
                Key {
                    provider,
                    model,
                    kind: kind.to_string(),
                },
                tokens,
            );
        };
        for rd in &state.rounds {
            for c in &rd.contributions {
                let kind = match c.kind {
                    ContributionType::Proposal => "proposal",
                    ContributionType::Critique => "critique",
                    ContributionType::Refinement => "refinement",
                };
                add(&c.agent_id, kind, &c.metadata);
            }
        }
        if let (Some(meta), Some(sol)) = (&state.synthesis_metadata, &state.final_solution) {
            let judge = spec
                .as_ref()
                .map(|s| s.judge.id.clone())
                .unwrap_or_else(|| sol.synthesized_by.clone());
            add(&judge, "synthesis", meta);
        }
    }

    /// What the estimate uses for `key`'s replies, `assumed` tokens without enough samples.
    pub fn basis(&self, key: &Key, assumed: u32) -> Basis {
        let of = |k: &Key| self.samples.get(k).map_or(&[][..], Vec::as_slice);
        let own = of(key);
        let pool = Key {
            kind: String::new(),
            ..key.clone()
        };
        let (samples, pooled) = if own.len() >= MIN_SAMPLES {
            (own, false)
        } else {
            (of(&pool), true)
        };
        let n = samples.len();
        if n < MIN_SAMPLES {
            return Basis {
                provider: key.provider.clone(),
                model: key.model.clone(),
                kind: key.kind.clone(),
                basis: "assumed",
                samples: own.len(),
                mean_tokens: u64::from(assumed),
                spread_tokens: 0,
                note: format!("assumed {assumed} tokens"),
            };
        }
        let mean = samples.iter().sum::<u64>() as f64 / n as f64;
        let var = samples
            .iter()
            .map(|&s| (s as f64 - mean).powi(2))
            .sum::<f64>()
            / n as f64;
        let plural = match key.kind.as_str() {
            "synthesis" => "syntheses".to_string(),
            k => format!("{k}s"),
        };
        Basis {
            provider: key.provider.clone(),
            model: key.model.clone(),
            kind: key.kind.clone(),
            basis: "calibrated",
            samples: n,
            mean_tokens: mean.round() as u64,
            spread_tokens: var.sqrt().round() as u64,
            note: if pooled {
                format!("calibrated from {n} calls of {} (all kinds)", key.model)
            } else {
                format!("calibrated from {n} calls of {} {plural}", key.model)
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: &str) -> Key {
        Key {
            provider: "openai".into(),
            model: "gpt-4o-mini".into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn enough_samples_calibrate_fewer_assume() {
        let mut c = Calibration::default();
        for t in [100, 120, 140, 160, 180] {
            c.add(key("proposal"), t);
        }
        for t in [10, 20] {
            c.add(key("critique"), t);
        }
        let b = c.basis(&key("proposal"), 400);
        assert_eq!((b.basis, b.samples, b.mean_tokens), ("calibrated", 5, 140));
        assert_eq!(b.spread_tokens, 28);
        assert_eq!(b.note, "calibrated from 5 calls of gpt-4o-mini proposals");
        // Too few of a kind: the model's calls of every kind, pooled.
        let b = c.basis(&key("critique"), 400);
        assert_eq!((b.basis, b.samples), ("calibrated", 7));
        assert_eq!(b.note, "calibrated from 7 calls of gpt-4o-mini (all kinds)");
        let other = Key {
            model: "other".into(),
            ..key("synthesis")
        };
        assert_eq!(c.basis(&other, 300).note, "assumed 300 tokens");
        assert_eq!(c.len(), 7);
    }

    #[test]
    fn records_and_garbage_are_not_debates() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.record.json"), b"{}").unwrap();
        std::fs::write(dir.path().join("y.json"), b"not json").unwrap();
        std::fs::write(dir.path().join("z.json"), br#"{"id": 5}"#).unwrap();
        let c = Calibration::load(dir.path(), &|_| "openai".into());
        assert!(c.is_empty());
        assert!(Calibration::load(&dir.path().join("missing"), &|_| String::new()).is_empty());
    }
}
