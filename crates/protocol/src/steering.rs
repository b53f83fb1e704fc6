//! Steering a running debate: [`SteerCommand`] (pause, resume, guide, stop, extend), what
//! the state records of it ([`SteeringRecord`]), the notes the agents see
//! ([`GuideNote`]) and the `parley.debates.steer` request ([`SteerRequest`]).
//!
//! A command is checked at the edge for its shape ([`SteerCommand::validate`]: a guide
//! note's length and characters) and by the debate's machine for whether it applies now
//! (a paused debate cannot be paused again, a finished one is not steered).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::limits;
use crate::subjects::ErrorCode;
use crate::submission::{check_debate_id, decode_request};
use crate::{preview, Rejection};

/// Why a steering command, its note or its sender's label (`by`) is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SteerRequestError {
    #[error("guide: a note is required")]
    NoteRequired,
    /// A command other than `guide` was given a note.
    #[error("{0}: takes no note (only guide does)")]
    NoteNotTaken(&'static str),
    /// Not a command's name (clipped to 40 characters).
    #[error("{0:?} is not a steering command (pause, resume, guide, stop, extend)")]
    UnknownCommand(String),
    #[error("note: must not be empty")]
    EmptyNote,
    #[error(
        "note: {chars} characters, the limit is {}",
        limits::MAX_GUIDE_NOTE_CHARS
    )]
    NoteTooLong { chars: usize },
    /// A control character other than newline and tab, at a character index.
    #[error(
        "note: control character U+{:04X} at character {at} (only newlines and tabs are allowed)",
        u32::from(*character)
    )]
    ControlCharacter { character: char, at: usize },
    /// `by` is not a label (clipped to 40 characters).
    #[error(
        "by: {0:?} is not a name (1-{max} bytes, no control characters)",
        max = limits::MAX_LABEL_BYTES
    )]
    BadBy(String),
}

impl SteerRequestError {
    /// What is wrong with a note, without the `note: ` of its field (for a note that
    /// arrives under another name, e.g. a fork's `guide`).
    pub fn note_problem(&self) -> String {
        let text = self.to_string();
        match text.strip_prefix("note: ") {
            Some(rest) => rest.to_string(),
            None => text,
        }
    }
}

/// One steering command, as every surface sends it: `{"command": "pause"}`,
/// `{"command": "guide", "note": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "camelCase")]
pub enum SteerCommand {
    /// No new task is dispatched; the calls in flight finish and are kept.
    Pause,
    /// A paused debate dispatches again what it needs.
    Resume,
    /// A note every later prompt carries (agents and judge), recorded with its round.
    Guide { note: String },
    /// Synthesize now from what exists: nothing new but the synthesis is dispatched once
    /// the calls in flight are back.
    Stop,
    /// One more round than the debate would otherwise run, within
    /// [`limits::MAX_ROUNDS`].
    Extend,
}

impl SteerCommand {
    /// `pause`, `resume`, `guide`, `stop`, `extend`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Guide { .. } => "guide",
            Self::Stop => "stop",
            Self::Extend => "extend",
        }
    }

    /// A command from its name and, for `guide`, its note (the CLI's and the MCP tool's
    /// arguments); checked with [`SteerCommand::validate`].
    pub fn parse(name: &str, note: Option<String>) -> Result<Self, SteerRequestError> {
        let mut note = note;
        let cmd = match name {
            "pause" => Self::Pause,
            "resume" => Self::Resume,
            "stop" => Self::Stop,
            "extend" => Self::Extend,
            "guide" => Self::Guide {
                note: note.take().ok_or(SteerRequestError::NoteRequired)?,
            },
            other => return Err(SteerRequestError::UnknownCommand(preview(other, 40))),
        };
        if note.is_some() {
            return Err(SteerRequestError::NoteNotTaken(cmd.as_str()));
        }
        cmd.validate()?;
        Ok(cmd)
    }

    /// A guide note is 1 to [`limits::MAX_GUIDE_NOTE_CHARS`] characters with no control
    /// character but newline and tab; the other commands are always well formed.
    pub fn validate(&self) -> Result<(), SteerRequestError> {
        let Self::Guide { note } = self else {
            return Ok(());
        };
        if note.trim().is_empty() {
            return Err(SteerRequestError::EmptyNote);
        }
        let chars = note.chars().count();
        if chars > limits::MAX_GUIDE_NOTE_CHARS {
            return Err(SteerRequestError::NoteTooLong { chars });
        }
        if let Some((at, character)) = note
            .chars()
            .enumerate()
            .find(|(_, c)| c.is_control() && *c != '\n' && *c != '\t')
        {
            return Err(SteerRequestError::ControlCharacter { character, at });
        }
        Ok(())
    }
}

/// A guide note as prompts carry it: the round it arrived in and its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuideNote {
    pub round: u32,
    pub note: String,
}

/// One steering command as the state records it: what, who, when, in which round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SteeringEntry {
    #[serde(flatten)]
    pub command: SteerCommand,
    /// Who sent it (an API key's name, a NATS user, `operator`); absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    pub at: DateTime<Utc>,
    /// The debate's current round when it arrived (0: before round 1).
    pub round: u32,
}

/// What steering did to a debate: its log, and the standing effects (paused, stopping,
/// extra rounds, the notes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SteeringRecord {
    /// No new task is dispatched until `resume`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// `stop` was sent: only the synthesis runs, from what exists.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// Rounds added by `extend` to the configured limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub extra_rounds: u32,
    /// Every guide note, in order: every prompt from the next task on carries them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<GuideNote>,
    /// Every command applied, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<SteeringEntry>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl SteeringRecord {
    /// Nothing was steered (the state leaves the field out).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The guide notes as prompt text (empty when there are none).
pub fn guidance_text(notes: &[GuideNote]) -> String {
    let mut out = String::new();
    for n in notes {
        out.push_str(&format!("- (round {}) {}\n", n.round, n.note));
    }
    out
}

/// The problem as a task's prompts state it: with the answered clarifications and the
/// user's guide notes, when any.
pub fn problem_for_prompt<'a>(
    problem: &'a str,
    input: &crate::TaskInput,
) -> std::borrow::Cow<'a, str> {
    let with = crate::problem_with_clarifications(problem, &input.clarifications);
    if input.guidance.is_empty() {
        return with;
    }
    std::borrow::Cow::Owned(format!(
        "{with}\n\nGuidance from the user running this debate (take it into account):\n{}",
        guidance_text(&input.guidance)
    ))
}

/// `parley.debates.steer`: `{"debateId", "command": "pause"|"resume"|"guide"|"stop"|
/// "extend", "note"? (guide only), "by"?}`: a steering command for a debate, with who sent
/// it (a label the requester gives, e.g. the API key's name a web server acts for).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SteerRequest {
    pub debate_id: String,
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl SteerRequest {
    /// The request for `command` on debate `debate_id`.
    pub fn new(debate_id: &str, command: &SteerCommand, by: Option<String>) -> Self {
        let note = match command {
            SteerCommand::Guide { note } => Some(note.clone()),
            _ => None,
        };
        Self {
            debate_id: debate_id.to_string(),
            command: command.as_str().to_string(),
            note,
            by,
        }
    }

    /// The command it names, checked ([`SteerCommand::parse`]).
    pub fn steer_command(&self) -> Result<SteerCommand, SteerRequestError> {
        SteerCommand::parse(&self.command, self.note.clone())
    }
}

/// Decodes and checks a `parley.debates.steer` request: its size, its debate id, the
/// command and its note, `by` (a label). Returns the request and its command.
pub fn decode_steer_request(payload: &[u8]) -> Result<(SteerRequest, SteerCommand), Rejection> {
    let r: SteerRequest = decode_request(payload, limits::MAX_STEER_REQUEST_BYTES, "{\"debateId\": ..., \"command\": \"pause\"|\"resume\"|\"guide\"|\"stop\"|\"extend\", \"note\"?: ..., \"by\"?: ...}")?;
    check_debate_id(&r.debate_id)?;
    if let Some(by) = &r.by {
        check_by(by).map_err(|e| Rejection::new(ErrorCode::InvalidRequest, e.to_string()))?;
    }
    let command = r
        .steer_command()
        .map_err(|e| Rejection::new(ErrorCode::InvalidRequest, e.to_string()))?;
    Ok((r, command))
}

/// `by` is a label: 1 to [`limits::MAX_LABEL_BYTES`] bytes, no control characters.
pub fn check_by(by: &str) -> Result<(), SteerRequestError> {
    if by.is_empty() || by.len() > limits::MAX_LABEL_BYTES || by.chars().any(char::is_control) {
        return Err(SteerRequestError::BadBy(preview(by, 40)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_read_and_write_as_tagged_json() {
        let g: SteerCommand = serde_json::from_str(r#"{"command":"guide","note":"hi"}"#).unwrap();
        assert_eq!(g, SteerCommand::Guide { note: "hi".into() });
        let p: SteerCommand = serde_json::from_str(r#"{"command":"pause"}"#).unwrap();
        assert_eq!(p, SteerCommand::Pause);
        assert!(serde_json::from_str::<SteerCommand>(r#"{"command":"explode"}"#).is_err());
        let (r, cmd) = decode_steer_request(
            br#"{"debateId":"deb-20260101-000000-abc123","command":"extend","by":"alice"}"#,
        )
        .unwrap();
        assert_eq!(cmd, SteerCommand::Extend);
        assert_eq!(r.by.as_deref(), Some("alice"));
        let e = decode_steer_request(
            br#"{"debateId":"deb-20260101-000000-abc123","command":"pause","x":1}"#,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        let g = SteerCommand::Guide { note: "n".into() };
        let back = SteerRequest::new("deb-20260101-000000-abc123", &g, None);
        assert_eq!(back.steer_command().unwrap(), g);
    }

    #[test]
    fn hostile_notes_and_requests_are_refused_with_their_reason() {
        let long = SteerCommand::Guide {
            note: "x".repeat(limits::MAX_GUIDE_NOTE_CHARS + 1),
        };
        assert_eq!(
            long.validate(),
            Err(SteerRequestError::NoteTooLong {
                chars: limits::MAX_GUIDE_NOTE_CHARS + 1
            })
        );
        assert!(long
            .validate()
            .unwrap_err()
            .to_string()
            .contains("the limit is"));
        let ctl = SteerCommand::Guide {
            note: "ok\u{1b}[2J".into(),
        };
        let e = ctl.validate().unwrap_err();
        assert_eq!(
            e,
            SteerRequestError::ControlCharacter {
                character: '\u{1b}',
                at: 2
            }
        );
        assert!(e.to_string().contains("U+001B at character 2"), "{e}");
        assert_eq!(
            e.note_problem(),
            "control character U+001B at character 2 (only newlines and tabs are allowed)"
        );
        let nul = SteerCommand::Guide {
            note: "a\0b".into(),
        };
        assert!(nul
            .validate()
            .unwrap_err()
            .to_string()
            .contains("control character"));
        let fine = SteerCommand::Guide {
            note: "line one\n\tline two".into(),
        };
        assert!(fine.validate().is_ok());
        assert_eq!(
            SteerCommand::parse("guide", Some("  ".into())),
            Err(SteerRequestError::EmptyNote)
        );
        assert_eq!(
            SteerCommand::parse("guide", None),
            Err(SteerRequestError::NoteRequired)
        );
        let e = SteerCommand::parse("explode", None).unwrap_err();
        assert_eq!(e, SteerRequestError::UnknownCommand("explode".into()));
        assert!(e.to_string().contains("not a steering command"), "{e}");
        let e = SteerCommand::parse("pause", Some("x".into())).unwrap_err();
        assert_eq!(e, SteerRequestError::NoteNotTaken("pause"));
        assert_eq!(e.to_string(), "pause: takes no note (only guide does)");
        assert!(matches!(
            check_by("a\u{7}"),
            Err(SteerRequestError::BadBy(_))
        ));
        let big = format!(
            r#"{{"debateId":"deb-20260101-000000-abc123","command":"guide","note":"{}"}}"#,
            "x".repeat(10 * 1024 * 1024)
        );
        let e = decode_steer_request(big.as_bytes()).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        let e = decode_steer_request(br#"{"debateId":"../x","command":"pause"}"#).unwrap_err();
        assert!(e.message.contains("debateId"), "{}", e.message);
        let e = decode_steer_request(
            br#"{"debateId":"deb-20260101-000000-abc123","command":"pause","by":"a\u0007"}"#,
        )
        .unwrap_err();
        assert!(e.message.starts_with("by:"), "{}", e.message);
    }

    #[test]
    fn an_unsteered_record_is_empty_and_an_old_state_reads() {
        assert!(SteeringRecord::default().is_empty());
        let r: SteeringRecord = serde_json::from_str("{}").unwrap();
        assert!(r.is_empty());
    }
}
