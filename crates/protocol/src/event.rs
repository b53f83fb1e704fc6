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
