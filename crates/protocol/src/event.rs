//! [`DebateEvent`]: the replayable progress stream of a debate.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{default_schema_version, DebateStatus, Node};

/// Where a debate stands; carried by every event so a watcher needs only the latest one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    pub round: u32,
    pub rounds: u32,
    pub phase: String,
    pub done: usize,
    pub total: usize,
    /// Agents with a task in flight.
    pub active_agents: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum EventKind {
    #[serde(rename_all = "camelCase")]
    DebateStarted {
        agents: Vec<String>,
        rounds: u32,
    },
    #[serde(rename_all = "camelCase")]
    NodeEntered {
        round: u32,
        node: Node,
    },
    #[serde(rename_all = "camelCase")]
    TaskDispatched {
        task_id: String,
        node: Node,
        agent_id: String,
        attempt: u32,
    },
    #[serde(rename_all = "camelCase")]
    TaskCompleted {
        task_id: String,
        node: Node,
        agent_id: String,
        tokens: u64,
        latency_ms: u64,
        /// Dollars the task cost (absent: unknown).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    #[serde(rename_all = "camelCase")]
    TaskFailed {
        task_id: String,
        node: Node,
        agent_id: String,
        attempt: u32,
        error: String,
        will_retry: bool,
    },
    #[serde(rename_all = "camelCase")]
    RoundCompleted {
        round: u32,
    },
    #[serde(rename_all = "camelCase")]
    Warning {
        message: String,
    },
    #[serde(rename_all = "camelCase")]
    DebateCompleted {
        confidence: f64,
    },
    #[serde(rename_all = "camelCase")]
    DebateFailed {
        node: Node,
        round: u32,
        message: String,
    },
    DebateResumed,
    DebateCancelled,
    /// The next task did not fit the debate's budget: the debate took one step of the
    /// degradation order (`dropCritiques`, `noNewRound`, `skipSummaries`, `synthesizeNow`).
    #[serde(rename_all = "camelCase")]
    BudgetDegraded {
        step: String,
        round: u32,
        /// What was given up (task ids), when any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tasks: Vec<String>,
    },
    /// The agents asked questions: the debate waits for answers
    /// (`awaiting_clarifications`). `questions` holds the questions still unanswered,
    /// grouped by agent (texts may be cut to keep the event small; the state has them whole).
    #[serde(rename_all = "camelCase")]
    ClarificationsRequested {
        iteration: u32,
        questions: Vec<crate::AgentClarifications>,
    },
    /// The judge's verdict on a round (`terminationCondition.type: "verdict"`) or, at round 0,
    /// on the round-1 proposals (`debate.mode: "adaptive"`). `valid: false`: the reply was not
    /// the JSON asked for and counts as `continue`.
    #[serde(rename_all = "camelCase")]
    VerdictGiven {
        round: u32,
        verdict: crate::VerdictDecision,
        confidence: f64,
        open_issues: usize,
        valid: bool,
    },
    /// `terminationCondition.type: "similarity"`: how alike round `round`'s refinements
    /// are (the least self-similarity, none in round 1; the mean across agents) and
    /// whether the debate stops on it.
    #[serde(rename_all = "camelCase")]
    SimilarityMeasured {
        round: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_per_agent: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        across_agents: Option<f64>,
        threshold: f64,
        converged: bool,
    },
    /// `debate.mode: "adaptive"`: which path the debate takes after the proposals, and why.
    #[serde(rename_all = "camelCase")]
    AdaptivePathChosen {
        path: crate::AdaptivePath,
        reason: String,
    },
    /// One agent's vote (`synthesisMethod: "voting"`); an invalid vote is recorded, not
    /// counted.
    #[serde(rename_all = "camelCase")]
    VoteCast {
        agent_id: String,
        vote: String,
        valid: bool,
    },
    /// Every vote is in: the plurality winner, or a tie the judge breaks.
    #[serde(rename_all = "camelCase")]
    VotesTallied {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        winner: Option<String>,
        tie: bool,
        /// The agents with the most votes (more than one on a tie).
        leaders: Vec<String>,
        counts: std::collections::BTreeMap<String, u32>,
    },
    /// A steering command was applied (`pause`, `resume`, `guide`, `stop`, `extend`): who
    /// sent it, in which round; a guide note's text (cut to keep the event small; the state
    /// has it whole).
    #[serde(rename_all = "camelCase")]
    Steered {
        command: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        round: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// A human participant's task opened: the debate waits for a person's answer to it
    /// (and only to it) until `deadline`.
    #[serde(rename_all = "camelCase")]
    HumanTaskOpened {
        task_id: String,
        node: Node,
        agent_id: String,
        round: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target_agent_id: Option<String>,
        deadline: DateTime<Utc>,
    },
    /// A person answered a human participant's task (`latencyMs`: how long it took; it
    /// cost nothing).
    #[serde(rename_all = "camelCase")]
    HumanContributed {
        task_id: String,
        node: Node,
        agent_id: String,
        latency_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// A human participant's task got no answer in time (or the debate gave it up): it is
    /// a failed agent task (`reason` says what the debate does without it).
    #[serde(rename_all = "camelCase")]
    HumanTaskExpired {
        task_id: String,
        node: Node,
        agent_id: String,
        reason: String,
    },
    /// Answers were recorded; `remaining` questions still wait (0: the debate goes on).
    #[serde(rename_all = "camelCase")]
    ClarificationsAnswered {
        iteration: u32,
        answered: usize,
        remaining: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DebateEvent {
    #[serde(default = "default_schema_version")]
    pub schema_version: u32,
    pub debate_id: String,
    /// Per-debate sequence number, starting at 1, no gaps.
    pub seq: u64,
    pub at: DateTime<Utc>,
    pub status: DebateStatus,
    pub progress: Progress,
    #[serde(flatten)]
    pub kind: EventKind,
}

impl DebateEvent {
    /// True for the last event a debate emits until someone retries it.
    pub fn is_final(&self) -> bool {
        matches!(
            self.kind,
            EventKind::DebateCompleted { .. }
                | EventKind::DebateFailed { .. }
                | EventKind::DebateCancelled
        )
    }
}

/// Bytes of free text (an error, a warning) one event carries at most; longer texts are
/// cut (the full text stays in the debate state). With every other field bounded by the
/// validation limits, an event stays a few KiB, far under NATS's `max_payload`.
pub const MAX_EVENT_TEXT_BYTES: usize = 4096;

/// `text` cut to at most `max_bytes` bytes on a character boundary, with `…` appended
/// when something was cut.
pub fn clip_text(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let mut end = max_bytes.saturating_sub('…'.len_utf8());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_text_keeps_short_texts_and_cuts_on_a_char_boundary() {
        assert_eq!(clip_text("short", 10), "short");
        let long = "é".repeat(100);
        let cut = clip_text(&long, 11);
        assert!(cut.len() <= 11, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(cut.starts_with("éééé"));
    }
}
