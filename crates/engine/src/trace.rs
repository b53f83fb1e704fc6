//! The spans of a debate: `debate` (root) → `node` (round, phase) → `task` → `llm.call`.
//!
//! One `node` span per (round, node kind), opened at the node's first dispatch and closed
//! when its round completes or the debate settles. The root span's W3C `traceparent` is
//! kept in the checkpoint (`engine.traceparent`); a driver that resumes the debate opens its
//! `debate` span (`debate.resumed = true`) under it, so a debate stays one trace across
//! coordinators. A debate woken from rest (see `parley_coordinator::supervisor`) opens one too
//! (`debate.woken = true`); the node spans open when it went to rest ended then. Spans end (and are exported) when dropped. Prompt and completion text
//! never go on spans. The `task` span itself is [`parley_telemetry::task_span`], shared with the
//! workers.

use std::collections::HashMap;

use parley_protocol::{DebateStatus, Node};
use parley_telemetry::OpenTelemetrySpanExt as _;

use crate::Machine;

/// The spans of one debate, held by whoever drives it (the debate actor, the embedded
/// driver).
pub struct DebateTrace {
    pub debate: tracing::Span,
    nodes: HashMap<(u32, Node), tracing::Span>,
}

impl DebateTrace {
    /// Opens the root span; under the checkpointed one when the debate was started by
    /// another coordinator (or an earlier run of this one), or `woken` from rest.
    pub fn open(machine: &mut Machine, woken: bool) -> Self {
        let spec = machine.spec();
        let agents: Vec<&str> = spec.active_agents().map(|a| a.id.as_str()).collect();
        let stored = machine.state().engine.traceparent.clone();
        let debate = tracing::info_span!(
            parent: None,
            "debate",
            debate.id = %machine.id(),
            debate.agents = %agents.join(","),
            debate.agent_count = agents.len(),
            debate.rounds = spec.debate.rounds,
            debate.resumed = stored.is_some(),
            debate.woken = woken,
            debate.status = tracing::field::Empty,
        );
        match stored {
            Some(tp) => {
                parley_telemetry::set_parent(
                    &debate,
                    parley_telemetry::context_from_traceparent(&tp),
                );
            }
            None => {
                if let Some(tp) = parley_telemetry::traceparent_of(&debate.context()) {
                    machine.set_traceparent(tp);
                }
            }
        }
        Self {
            debate,
            nodes: HashMap::new(),
        }
    }

    /// The node span a task belongs to, opened on first use.
    pub fn node(&mut self, round: u32, node: Node) -> &tracing::Span {
        let debate = &self.debate;
        self.nodes.entry((round, node)).or_insert_with(|| {
            tracing::info_span!(
                parent: debate,
                "node",
                node.round = round,
                node.phase = node.as_str(),
            )
        })
    }

    pub fn round_completed(&mut self, round: u32) {
        self.nodes.retain(|(r, _), _| *r != round);
    }

    pub fn settled(&mut self, status: DebateStatus) {
        self.nodes.clear();
        self.debate.record("debate.status", status.as_str());
    }
}
