//! Forking a debate: [`ForkChanges`] (what the fork runs with instead: other models, another
//! judge, more rounds, a guide note) and the `parley.debates.fork` request
//! ([`ForkRequest`]). The fork itself is the engine's (`parley_engine::fork`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::limits;
use crate::spec::{Check, SpecErrors};
use crate::subjects::ErrorCode;
use crate::submission::{check_debate_id, decode_request};
use crate::{preview, Rejection};

/// A participant's settings a fork changes (each one left out keeps the parent's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParticipantChange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

/// What a fork runs with instead of its parent's settings (`parley fork -c changes.json`):
/// `{"agents": {"agent-kiss": {"model": "..."}}, "judge": {"model": "..."}, "rounds": 4,
/// "guide": "..."}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkChanges {
    /// Agent id → its changed settings (the agents themselves stay: their contributions
    /// are shared).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, ParticipantChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<ParticipantChange>,
    /// The fork's round limit (at least the fork round, at most [`limits::MAX_ROUNDS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
    /// A guide note every prompt of the fork carries (see [`crate::SteerCommand::Guide`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guide: Option<String>,
}

impl ForkChanges {
    /// Sizes and shapes, every problem with its field (whether an agent exists and the
    /// rounds fit the fork point is the engine's check; models against the operator's
    /// allow-lists the submission's).
    pub fn validate(&self) -> Result<(), SpecErrors> {
        let mut c = Check::default();
        if self.agents.len() > limits::MAX_AGENTS {
            c.push(
                "agents",
                format!(
                    "{} agents, the limit is {}",
                    self.agents.len(),
                    limits::MAX_AGENTS
                ),
            );
        }
        let mut one = |field: String, p: &ParticipantChange| {
            if let Some(m) = &p.model {
                c.label(&format!("{field}.model"), m, limits::MAX_MODEL_BYTES);
                if m.trim().is_empty() {
                    c.push(format!("{field}.model"), "must not be empty");
                }
            }
            if let Some(v) = &p.provider {
                c.label(&format!("{field}.provider"), v, limits::MAX_LABEL_BYTES);
            }
            if let Some(t) = p.temperature {
                if !(0.0..=2.0).contains(&t) {
                    c.push(
                        format!("{field}.temperature"),
                        format!("{t} is out of range 0-2"),
                    );
                }
            }
        };
        for (id, p) in self.agents.iter().take(limits::MAX_AGENTS) {
            one(format!("agents.{}", preview(id, 64)), p);
        }
        if let Some(j) = &self.judge {
            one("judge".into(), j);
        }
        if let Some(r) = self.rounds {
            if !(1..=limits::MAX_ROUNDS).contains(&r) {
                c.push(
                    "rounds",
                    format!("{r} is out of range 1-{}", limits::MAX_ROUNDS),
                );
            }
        }
        if let Some(note) = &self.guide {
            if let Err(e) = (crate::SteerCommand::Guide { note: note.clone() }).validate() {
                c.push("guide", e.note_problem());
            }
        }
        c.into_result()
    }
}

/// `parley.debates.fork`: a new debate sharing `debateId`'s contributions up to the end of
/// round `atRound`, running on with `changes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkRequest {
    pub debate_id: String,
    pub at_round: u32,
    #[serde(default)]
    pub changes: ForkChanges,
}

/// Decodes and checks a `parley.debates.fork` request.
pub fn decode_fork_request(payload: &[u8]) -> Result<ForkRequest, Rejection> {
    let r: ForkRequest = decode_request(
        payload,
        limits::MAX_STEER_REQUEST_BYTES,
        "{\"debateId\": ..., \"atRound\": N, \"changes\"?: {...}}",
    )?;
    check_debate_id(&r.debate_id)?;
    if !(1..=limits::MAX_ROUNDS).contains(&r.at_round) {
        return Err(Rejection::new(
            ErrorCode::InvalidRequest,
            format!(
                "atRound: {} is out of range 1-{}",
                r.at_round,
                limits::MAX_ROUNDS
            ),
        ));
    }
    r.changes
        .validate()
        .map_err(|m| Rejection::new(ErrorCode::InvalidRequest, format!("changes: {m}")))?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_checked_field_by_field() {
        let c: ForkChanges = serde_json::from_str(
            r#"{"agents": {"a": {"model": "", "temperature": 3}}, "rounds": 0, "guide": "x\u0000"}"#,
        )
        .unwrap();
        let e = c.validate().unwrap_err();
        let fields: Vec<&str> = e.0.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            ["agents.a.model", "agents.a.temperature", "rounds", "guide"]
        );
        let guide = &e.0[3].message;
        assert!(guide.starts_with("control character U+0000"), "{guide}");
        let e = e.to_string();
        for part in ["agents.a.model", "agents.a.temperature", "rounds", "guide"] {
            assert!(e.contains(part), "{e} lacks {part}");
        }
        assert!(serde_json::from_str::<ForkChanges>(r#"{"endpoint": "x"}"#).is_err());
        let ok: ForkChanges =
            serde_json::from_str(r#"{"judge": {"model": "m2"}, "rounds": 4}"#).unwrap();
        assert!(ok.validate().is_ok());
        let r = decode_fork_request(br#"{"debateId": "deb-20260101-000000-abc123", "atRound": 2}"#)
            .unwrap();
        assert_eq!(r.at_round, 2);
        assert!(decode_fork_request(br#"{"debateId": "x", "atRound": 2}"#).is_err());
    }
}
