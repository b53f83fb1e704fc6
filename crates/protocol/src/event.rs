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

/// One message of a debate's events subject (`parley.debates.<id>.events`), encoded: the
/// first event's `seq` (its `Nats-Msg-Id` is `<id>/events/<first>`) and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMessage {
    pub first_seq: u64,
    pub last_seq: u64,
    pub body: Vec<u8>,
}

/// The messages that carry `events` (one debate's, in order): a JSON array of consecutive
/// events per message, as many events per message as fit in `max_bytes` (an event larger
/// than that still goes, alone in its message). A transition's events are one message.
pub fn encode_event_messages(
    events: &[DebateEvent],
    max_bytes: usize,
) -> Result<Vec<EventMessage>, serde_json::Error> {
    let mut out: Vec<EventMessage> = Vec::new();
    let mut open: Option<EventMessage> = None;
    for event in events {
        let json = serde_json::to_vec(event)?;
        if let Some(m) = open.as_mut() {
            // `,` + the event + the closing `]`.
            if m.body.len() + 1 + json.len() < max_bytes {
                m.body.push(b',');
                m.body.extend_from_slice(&json);
                m.last_seq = event.seq;
                continue;
            }
            out.extend(open.take());
        }
        let mut body = Vec::with_capacity(json.len() + 2);
        body.push(b'[');
        body.extend_from_slice(&json);
        open = Some(EventMessage {
            first_seq: event.seq,
            last_seq: event.seq,
            body,
        });
    }
    out.extend(open);
    for m in &mut out {
        m.body.push(b']');
    }
    Ok(out)
}

/// The events of one message of a debate's events subject, in order: a JSON array of
/// events, or one event object (a message a coordinator of an earlier version stored,
/// which the stream keeps for its retention). `T`: [`DebateEvent`], or
/// `serde_json::Value` to pass events on as they are.
pub fn decode_event_message<T: serde::de::DeserializeOwned>(
    payload: &[u8],
) -> Result<Vec<T>, serde_json::Error> {
    let array = payload
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[');
    if array {
        serde_json::from_slice(payload)
    } else {
        Ok(vec![serde_json::from_slice(payload)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, warning: &str) -> DebateEvent {
        DebateEvent {
            schema_version: crate::SCHEMA_VERSION,
            debate_id: "deb-1".into(),
            seq,
            at: DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap(),
            status: DebateStatus::Running,
            progress: Progress::default(),
            kind: EventKind::Warning {
                message: warning.into(),
            },
        }
    }

    #[test]
    fn a_transitions_events_are_one_message_and_split_only_past_the_size() {
        let events: Vec<_> = (1..=3).map(|s| event(s, "w")).collect();
        let one = encode_event_messages(&events, 1 << 20).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].first_seq, one[0].last_seq), (1, 3));
        let back: Vec<DebateEvent> = decode_event_message(&one[0].body).unwrap();
        assert_eq!(back, events);
        // Each event is about 200 bytes: two fit in 450, the third opens a message.
        let size = serde_json::to_vec(&events[0]).unwrap().len();
        let split = encode_event_messages(&events, 2 * size + 10).unwrap();
        assert_eq!(
            split
                .iter()
                .map(|m| (m.first_seq, m.last_seq))
                .collect::<Vec<_>>(),
            [(1, 2), (3, 3)]
        );
        for m in &split {
            assert!(m.body.len() <= 2 * size + 10, "{}", m.body.len());
        }
        let rejoined: Vec<DebateEvent> = split
            .iter()
            .flat_map(|m| decode_event_message::<DebateEvent>(&m.body).unwrap())
            .collect();
        assert_eq!(rejoined, events);
        // An event over the size still goes, alone.
        let big = encode_event_messages(&events, 10).unwrap();
        assert_eq!(big.len(), 3);
        assert!(encode_event_messages(&[], 10).unwrap().is_empty());
    }

    #[test]
    fn a_message_of_one_event_object_reads_as_that_event() {
        let e = event(7, "old");
        let body = serde_json::to_vec(&e).unwrap();
        let back: Vec<DebateEvent> = decode_event_message(&body).unwrap();
        assert_eq!(back, [e]);
        let values: Vec<serde_json::Value> = decode_event_message(b" [{\"seq\":1}]").unwrap();
        assert_eq!(values[0]["seq"], 1);
        assert!(decode_event_message::<DebateEvent>(b"[1,2]").is_err());
        assert!(decode_event_message::<DebateEvent>(b"").is_err());
    }

    #[test]
    fn a_hostile_events_message_is_an_error_or_nothing_never_a_panic() {
        let decode = |b: &[u8]| decode_event_message::<DebateEvent>(b);
        assert!(decode(b"[]").unwrap().is_empty());
        // Nesting past serde_json's recursion limit, a raw control character in a
        // string, bytes that are not UTF-8, a sequence number out of range, a truncation.
        let deep = "[".repeat(100_000);
        assert!(decode(deep.as_bytes()).is_err());
        let mut one = serde_json::to_string(&event(1, "w")).unwrap();
        let raw_control = one.replace("\"w\"", "\"\u{1}\"");
        assert!(decode(raw_control.as_bytes()).is_err());
        assert!(decode(b"[\xff\xfe]").is_err());
        let huge_seq = one.replace("\"seq\":1", "\"seq\":1e400");
        assert!(decode(huge_seq.as_bytes()).is_err());
        one.truncate(one.len() / 2);
        assert!(decode(format!("[{one}").as_bytes()).is_err());
        // Escaped control characters are text like any other.
        let escaped = serde_json::to_vec(&[event(1, "\u{1}\u{7f}")]).unwrap();
        assert_eq!(decode(&escaped).unwrap().len(), 1);
    }

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
