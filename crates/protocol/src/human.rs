//! Human participants: an agent whose `provider` is `human` ([`crate::HUMAN_PROVIDER`]) takes
//! its turns like any agent (proposal, critiques, refinement, vote), but a person writes
//! them. When one of its tasks comes up the debate opens a [`HumanTask`] in its state
//! (checkpointed, so it survives a crash of whoever drives the debate) and waits for that
//! task only; everything else goes on. The task is answered by a contribution
//! ([`ContributeRequest`], `parley.debates.contribute`), or, past its deadline
//! (`debate.humanDeadlineSecs`, default [`DEFAULT_HUMAN_DEADLINE_SECS`]), it is a failed
//! agent task. A contribution is untrusted text: [`check_contribution_text`] bounds its
//! size and refuses control characters other than newline and tab.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::limits;
use crate::subjects::ErrorCode;
use crate::submission::{check_debate_id, decode_request};
use crate::{check_by, preview, Rejection, TaskKind};

/// Seconds a human participant's task waits when the debate sets no
/// `debate.humanDeadlineSecs`: 30 minutes.
pub const DEFAULT_HUMAN_DEADLINE_SECS: u64 = 30 * 60;

/// The model name a human participant's contributions record.
pub const HUMAN_MODEL: &str = "human";

/// One task a human participant has to answer: what it is (kind, round, the agent whose
/// proposal a critique is about), when it opened and until when it waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HumanTask {
    pub task_id: String,
    pub agent_id: String,
    pub kind: TaskKind,
    pub round: u32,
    /// A critique's target: the agent whose proposal it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_agent_id: Option<String>,
    pub opened_at: DateTime<Utc>,
    pub deadline: DateTime<Utc>,
}

/// A human task that was answered: who answered, when, how long the person took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HumanAnswer {
    pub task_id: String,
    pub agent_id: String,
    pub kind: TaskKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    pub at: DateTime<Utc>,
    pub latency_ms: u64,
}

/// A human task whose deadline passed (or that the debate gave up: stopped, synthesizing
/// under its budget) without an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HumanExpiry {
    pub task_id: String,
    pub agent_id: String,
    pub kind: TaskKind,
    pub at: DateTime<Utc>,
    pub reason: String,
}

/// What the state records of its human participants: the tasks waiting for them, and
/// those answered or expired.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HumanRecord {
    /// Tasks waiting for a person, in the order they opened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open: Vec<HumanTask>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered: Vec<HumanAnswer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expired: Vec<HumanExpiry>,
}

impl HumanRecord {
    /// No human task was ever opened (the state leaves the field out).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The open task with this id.
    pub fn open_task(&self, task_id: &str) -> Option<&HumanTask> {
        self.open.iter().find(|t| t.task_id == task_id)
    }
}

/// Why a contribution's text is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("text: must not be empty")]
    Empty,
    #[error("text: {chars} characters, the limit is {limit}")]
    TooLong { chars: usize, limit: usize },
    #[error(
        "text: control character U+{code:04X} at character {at} (only newlines and tabs are allowed)"
    )]
    Control { code: u32, at: usize },
}

/// A contribution's text: 1 to [`limits::MAX_HUMAN_CONTRIBUTION_CHARS`] characters, no
/// control character but newline and tab.
pub fn check_contribution_text(text: &str) -> Result<(), TextError> {
    if text.trim().is_empty() {
        return Err(TextError::Empty);
    }
    let n = text.chars().count();
    if n > limits::MAX_HUMAN_CONTRIBUTION_CHARS {
        return Err(TextError::TooLong {
            chars: n,
            limit: limits::MAX_HUMAN_CONTRIBUTION_CHARS,
        });
    }
    if let Some((i, c)) = text
        .chars()
        .enumerate()
        .find(|(_, c)| c.is_control() && *c != '\n' && *c != '\t')
    {
        return Err(TextError::Control {
            code: c as u32,
            at: i,
        });
    }
    Ok(())
}

/// The ballot a human's vote text makes: its first word is the agent voted for (a
/// trailing `:` or `,` dropped), the rest is the reason.
pub fn human_ballot(text: &str) -> crate::Ballot {
    let t = text.trim();
    let (vote, reason) = match t.find(char::is_whitespace) {
        Some(i) => (&t[..i], t[i..].trim()),
        None => (t, ""),
    };
    crate::Ballot {
        vote: vote.trim_end_matches([':', ',', '.']).to_string(),
        reason: reason.to_string(),
    }
}

/// `parley.debates.contribute`: `{"debateId", "text", "agentId"?, "taskId"?, "by"?}`: a
/// human participant's answer to its open task. Without `taskId`, the oldest open task of
/// `agentId` (or of the only human agent with an open task) is answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContributeRequest {
    pub debate_id: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl ContributeRequest {
    /// Checks everything but the debate's state: the debate id, the text, the names.
    pub fn validate(&self) -> Result<(), Rejection> {
        check_debate_id(&self.debate_id)?;
        let bad = |m: String| Rejection::new(ErrorCode::InvalidRequest, m);
        check_contribution_text(&self.text).map_err(|e| bad(e.to_string()))?;
        if let Some(a) = &self.agent_id {
            if a.is_empty() || a.len() > limits::MAX_ID_BYTES || a.chars().any(char::is_control) {
                return Err(bad(format!(
                    "agentId: {:?} is not an agent id",
                    preview(a, 40)
                )));
            }
        }
        if let Some(t) = &self.task_id {
            if t.is_empty() || t.len() > 512 || t.chars().any(char::is_control) {
                return Err(bad(format!(
                    "taskId: {:?} is not a task id",
                    preview(t, 40)
                )));
            }
        }
        if let Some(by) = &self.by {
            check_by(by).map_err(|e| bad(e.to_string()))?;
        }
        Ok(())
    }
}

/// Decodes and checks a `parley.debates.contribute` request (size, shape, debate id, text,
/// names); whether the debate waits for it is the machine's to say.
pub fn decode_contribute_request(payload: &[u8]) -> Result<ContributeRequest, Rejection> {
    let r: ContributeRequest = decode_request(
        payload,
        limits::MAX_CONTRIBUTE_REQUEST_BYTES,
        "{\"debateId\": ..., \"text\": ..., \"agentId\"?: ..., \"taskId\"?: ..., \"by\"?: ...}",
    )?;
    r.validate()?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "deb-20260101-000000-abc123";

    #[test]
    fn contributions_are_bounded_plain_text() {
        assert!(check_contribution_text("line one\n\tline two").is_ok());
        assert_eq!(check_contribution_text("  \n"), Err(TextError::Empty));
        let long = "x".repeat(limits::MAX_HUMAN_CONTRIBUTION_CHARS + 1);
        assert!(matches!(
            check_contribution_text(&long),
            Err(TextError::TooLong { chars, .. }) if chars == limits::MAX_HUMAN_CONTRIBUTION_CHARS + 1
        ));
        let esc = check_contribution_text("a\u{1b}[2Jb").unwrap_err();
        assert_eq!(esc, TextError::Control { code: 0x1b, at: 1 });
        assert!(esc.to_string().contains("U+001B"));
        assert!(check_contribution_text("a\0b")
            .unwrap_err()
            .to_string()
            .contains("control character"));
    }

    #[test]
    fn requests_decode_and_hostile_ones_are_refused_with_their_reason() {
        let r = decode_contribute_request(
            format!(r#"{{"debateId":"{ID}","text":"my proposal","agentId":"alice"}}"#).as_bytes(),
        )
        .unwrap();
        assert_eq!(r.agent_id.as_deref(), Some("alice"));
        let e = decode_contribute_request(br#"{"debateId":"../x","text":"t"}"#).unwrap_err();
        assert!(e.message.contains("debateId"), "{}", e.message);
        let e = decode_contribute_request(
            format!(r#"{{"debateId":"{ID}","text":"a\u0007"}}"#).as_bytes(),
        )
        .unwrap_err();
        assert!(e.message.contains("U+0007"), "{}", e.message);
        let big = format!(
            r#"{{"debateId":"{ID}","text":"{}"}}"#,
            "x".repeat(limits::MAX_CONTRIBUTE_REQUEST_BYTES)
        );
        let e = decode_contribute_request(big.as_bytes()).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        let e = decode_contribute_request(
            format!(r#"{{"debateId":"{ID}","text":"t","extra":1}}"#).as_bytes(),
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn a_vote_reads_its_first_word_as_the_agent() {
        let b = human_ballot("bob: the simplest design\nand cheapest");
        assert_eq!(b.vote, "bob");
        assert!(b.reason.starts_with("the simplest"));
        assert_eq!(human_ballot("carol").vote, "carol");
    }
}
