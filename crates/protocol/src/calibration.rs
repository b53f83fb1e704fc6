//! Estimates that learn: the calibration model both the embedded estimate (past debates
//! in `./debates/`) and a cluster's (samples the coordinator keeps in Redis) use.
//!
//! A *sample* is the completion tokens one LLM call really used, keyed ([`Key`]) by the
//! participant's provider, its configured model and the call's kind. Only the kinds of
//! [`calibrated_kind`] are sampled (`proposal`, `critique`, `refinement`, `synthesis`;
//! carried-over proposals are not calls); other kinds keep the assumption. A key keeps at
//! most [`MAX_SAMPLES`] samples.
//!
//! A key with at least [`MIN_SAMPLES`] samples is *calibrated*: the estimate's expected
//! reply is their mean, its min and max replies the mean less and plus twice their
//! standard deviation (at least one token, at most the call's cap). A key with fewer
//! samples uses the provider/model's calls of every kind pooled, when they are at least
//! [`MIN_SAMPLES`] ("calibrated from 30 calls of gpt-4o-mini (all kinds)"). Otherwise the
//! reply is *assumed* (400 tokens by default).
//!
//! On the wire (`parley.debates.calibration`, [`CalibrationReply`]) a calibration is its
//! entries, each key with its samples; a reply is bounded ([`MAX_WIRE_KEYS`] keys of at
//! most [`MAX_SAMPLES`] samples) and checked when it arrives.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    AgentConfig, ContributionMetadata, ContributionType, DebateSpec, DebateState, TaskKind,
    TaskOutcome, TaskResult,
};

/// Samples a key needs before its mean is used (fewer: the assumption).
pub const MIN_SAMPLES: usize = 5;
/// Samples kept per key (the newest).
pub const MAX_SAMPLES: usize = 1_000;
/// Keys a calibration reply may carry.
pub const MAX_WIRE_KEYS: usize = 1_024;

/// Which calls a sample belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Key {
    pub provider: String,
    pub model: String,
    /// The estimate's kind name (`proposal`, `critique`, `refinement`, `synthesis`).
    pub kind: String,
}

/// The estimate's name of a kind of call whose completions are sampled; `None` for the
/// kinds that keep the assumption.
pub fn calibrated_kind(kind: TaskKind) -> Option<&'static str> {
    match kind {
        TaskKind::Propose => Some("proposal"),
        TaskKind::Critique => Some("critique"),
        TaskKind::Refine => Some("refinement"),
        TaskKind::Synthesize => Some("synthesis"),
        _ => None,
    }
}

/// The sample of one call's result (`model`: the participant's configured model): its key and completion tokens; `None` when the call
/// reported no completion count or was carried over (no call).
pub fn sample_of(
    provider: String,
    model: &str,
    kind: TaskKind,
    meta: &ContributionMetadata,
) -> Option<(Key, u64)> {
    let kind = calibrated_kind(kind)?;
    let tokens = meta.completion_tokens?;
    if meta.carried_over {
        return None;
    }
    Some((
        Key {
            provider,
            model: model.to_string(),
            kind: kind.to_string(),
        },
        tokens,
    ))
}

/// The sample of a task's successful result in `spec`'s debate: the task id names the kind
/// and the participant (`<debate>/<round>/<kind>/<agent>[/<target>]`), the result's
/// metadata the provider that answered (else the participant's named provider) and the
/// completion tokens. `None` for a failure, a kind that is not sampled, an unknown
/// participant or a call without a completion count.
pub fn sample_of_result(spec: &DebateSpec, result: &TaskResult) -> Option<(Key, u64)> {
    let TaskOutcome::Ok(output) = &result.outcome else {
        return None;
    };
    let rest = result
        .task_id
        .strip_prefix(result.debate_id.as_str())?
        .strip_prefix('/')?;
    let mut parts = rest.split('/');
    let (_round, kind, agent) = (parts.next()?, parts.next()?, parts.next()?);
    let kind = [
        TaskKind::Propose,
        TaskKind::Critique,
        TaskKind::Refine,
        TaskKind::Synthesize,
    ]
    .into_iter()
    .find(|k| k.as_str() == kind)?;
    let participant = spec
        .agents
        .iter()
        .chain(std::iter::once(&spec.judge))
        .find(|a| a.id == agent)?;
    let meta = &output.metadata;
    let provider = meta
        .provider
        .clone()
        .or_else(|| participant.provider.clone())
        .unwrap_or_else(|| "unknown".into());
    sample_of(provider, &participant.model, kind, meta)
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

/// One key's samples on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CalibrationEntry {
    #[serde(flatten)]
    pub key: Key,
    /// Completion tokens, newest first.
    pub tokens: Vec<u64>,
}

/// The reply of `parley.debates.calibration`: what the cluster has learned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CalibrationReply {
    pub entries: Vec<CalibrationEntry>,
}

/// Why a calibration reply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalibrationError {
    #[error("calibration reply: not JSON of the expected shape: {0}")]
    Decode(String),
    #[error("calibration reply: {0} keys, more than {MAX_WIRE_KEYS}")]
    TooManyKeys(usize),
    #[error("calibration reply: entries[{0}] has more than {MAX_SAMPLES} samples or a field over its limit")]
    Entry(usize),
}

impl CalibrationReply {
    /// Decodes and bounds a reply that came from the bus.
    pub fn decode(bytes: &[u8]) -> Result<Self, CalibrationError> {
        let reply: Self =
            serde_json::from_slice(bytes).map_err(|e| CalibrationError::Decode(e.to_string()))?;
        if reply.entries.len() > MAX_WIRE_KEYS {
            return Err(CalibrationError::TooManyKeys(reply.entries.len()));
        }
        for (i, e) in reply.entries.iter().enumerate() {
            let long = |s: &str| s.len() > crate::limits::MAX_ID_BYTES * 4;
            if e.tokens.len() > MAX_SAMPLES
                || long(&e.key.provider)
                || long(&e.key.model)
                || long(&e.key.kind)
            {
                return Err(CalibrationError::Entry(i));
            }
        }
        Ok(reply)
    }

    /// The calibration the entries make.
    pub fn calibration(&self) -> Calibration {
        let mut c = Calibration::default();
        for e in &self.entries {
            // Oldest first, so the newest are the ones kept.
            for &t in e.tokens.iter().rev() {
                c.add(e.key.clone(), t);
            }
        }
        c
    }
}

impl Calibration {
    /// Adds one sample (also to its provider/model's pool of every kind); past
    /// [`MAX_SAMPLES`] the oldest goes.
    pub fn add(&mut self, key: Key, completion_tokens: u64) {
        let pool = Key {
            kind: String::new(),
            ..key.clone()
        };
        for k in [key, pool] {
            let v = self.samples.entry(k).or_default();
            if v.len() >= MAX_SAMPLES {
                v.remove(0);
            }
            v.push(completion_tokens);
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

    /// The provider the samples of `model` were recorded under, when it is only one (an
    /// estimate in front of a cluster does not know which provider the workers resolve).
    pub fn provider_of_model(&self, model: &str) -> Option<&str> {
        let mut providers = self
            .samples
            .keys()
            .filter(|k| k.model == model && k.kind.is_empty())
            .map(|k| k.provider.as_str());
        let first = providers.next()?;
        providers.next().is_none().then_some(first)
    }

    /// Adds the calls of one finished or running debate: its contributions and its
    /// synthesis. `spec` names each participant's model (without it, the model each call
    /// reported); `provider_of` the provider its calls went to.
    pub fn add_debate(
        &mut self,
        spec: Option<&DebateSpec>,
        state: &DebateState,
        provider_of: &dyn Fn(&AgentConfig) -> String,
    ) {
        let participant = |id: &str| {
            spec.and_then(|s| {
                s.agents
                    .iter()
                    .chain(std::iter::once(&s.judge))
                    .find(|a| a.id == id)
            })
        };
        let mut add = |id: &str, kind: TaskKind, meta: &ContributionMetadata| {
            let (provider, model) = match participant(id) {
                Some(a) => (provider_of(a), a.model.as_str()),
                None => (
                    meta.provider.clone().unwrap_or_else(|| "unknown".into()),
                    meta.model.as_str(),
                ),
            };
            if let Some((key, tokens)) = sample_of(provider, model, kind, meta) {
                self.add(key, tokens);
            }
        };
        for rd in &state.rounds {
            for c in &rd.contributions {
                let kind = match c.kind {
                    ContributionType::Proposal => TaskKind::Propose,
                    ContributionType::Critique => TaskKind::Critique,
                    ContributionType::Refinement => TaskKind::Refine,
                };
                add(&c.agent_id, kind, &c.metadata);
            }
        }
        if let (Some(meta), Some(sol)) = (&state.synthesis_metadata, &state.final_solution) {
            let judge = spec
                .map(|s| s.judge.id.clone())
                .unwrap_or_else(|| sol.synthesized_by.clone());
            add(&judge, TaskKind::Synthesize, meta);
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
        assert_eq!(c.provider_of_model("gpt-4o-mini"), Some("openai"));
        assert_eq!(c.provider_of_model("other"), None);
    }

    #[test]
    fn a_key_keeps_its_newest_samples() {
        let mut c = Calibration::default();
        for t in 0..(MAX_SAMPLES as u64 + 10) {
            c.add(key("proposal"), t);
        }
        assert_eq!(c.len(), MAX_SAMPLES);
        let b = c.basis(&key("proposal"), 400);
        // 10..=1009: the ten oldest went.
        assert_eq!(b.mean_tokens, 510);
    }

    #[test]
    fn wire_replies_are_bounded_and_round_trip() {
        let reply = CalibrationReply {
            entries: vec![CalibrationEntry {
                key: key("proposal"),
                tokens: vec![5, 6, 7, 8, 9],
            }],
        };
        let bytes = serde_json::to_vec(&reply).unwrap();
        let back = CalibrationReply::decode(&bytes).unwrap();
        assert_eq!(back, reply);
        assert_eq!(
            back.calibration().basis(&key("proposal"), 400).mean_tokens,
            7
        );
        let big = CalibrationReply {
            entries: vec![CalibrationEntry {
                key: key("proposal"),
                tokens: vec![1; MAX_SAMPLES + 1],
            }],
        };
        assert_eq!(
            CalibrationReply::decode(&serde_json::to_vec(&big).unwrap()),
            Err(CalibrationError::Entry(0))
        );
        assert!(matches!(
            CalibrationReply::decode(b"[1,2]"),
            Err(CalibrationError::Decode(_))
        ));
    }
}
