//! Events: emitting them (numbered, free text clipped), node entries, warnings, and the
//! progress every event carries.

use chrono::{DateTime, Utc};
use parley_protocol::{
    DebateEvent, DebateStatus, EventKind, Node, Progress, TaskKind, TerminationType, SCHEMA_VERSION,
};

use super::{Effect, Machine};

impl Machine {
    pub(super) fn enter(
        &mut self,
        fx: &mut Vec<Effect>,
        now: DateTime<Utc>,
        round: u32,
        node: Node,
    ) {
        if self.entered.insert((round, node)) {
            self.emit(fx, now, EventKind::NodeEntered { round, node });
        }
    }

    pub(super) fn warn(&mut self, fx: &mut Vec<Effect>, now: DateTime<Utc>, message: String) {
        self.state.engine.warnings.push(message.clone());
        self.emit(fx, now, EventKind::Warning { message });
    }

    pub(super) fn emit(&mut self, fx: &mut Vec<Effect>, now: DateTime<Utc>, mut kind: EventKind) {
        // Free text (provider errors, warnings) is cut so an event stays small; the state
        // keeps the whole text.
        use parley_protocol::{clip_text, MAX_EVENT_TEXT_BYTES};
        if let EventKind::TaskFailed { error: text, .. }
        | EventKind::DebateFailed { message: text, .. }
        | EventKind::Warning { message: text } = &mut kind
        {
            if text.len() > MAX_EVENT_TEXT_BYTES {
                *text = clip_text(text, MAX_EVENT_TEXT_BYTES);
            }
        }
        self.state.engine.event_seq += 1;
        fx.push(Effect::Emit(DebateEvent {
            schema_version: SCHEMA_VERSION,
            debate_id: self.state.id.clone(),
            seq: self.state.engine.event_seq,
            at: now,
            status: self.state.status,
            progress: self.progress(),
            kind,
        }));
    }

    /// Where the debate stands, for progress displays.
    pub fn progress(&self) -> Progress {
        let n = self.agents.len();
        let rounds = self.round_cap();
        let per_round = n + self.critique_pairs(1).len() + n;
        let mut done = 0;
        for rd in &self.state.rounds {
            done += rd.contributions.len();
        }
        let mut total = per_round * rounds as usize + 1;
        let check = match self.termination() {
            TerminationType::Fixed => None,
            TerminationType::Verdict => Some(TaskKind::Verdict),
            TerminationType::Similarity => Some(TaskKind::Embed),
            TerminationType::Convergence | TerminationType::Quality => Some(TaskKind::Evaluate),
        };
        if let Some(check) = check {
            // Every round but the last is checked (the last one ends the debate anyway).
            total += rounds.saturating_sub(1) as usize;
            done += self
                .state
                .rounds
                .iter()
                .filter(|r| match check {
                    TaskKind::Verdict => r.verdict.is_some(),
                    TaskKind::Embed => r.similarity.is_some(),
                    _ => r.evaluation.is_some(),
                })
                .count();
        }
        if self.adaptive() {
            total += 1;
            done += usize::from(self.state.adaptive.is_some());
        }
        if self.votes_due() {
            total += n;
            done += self.state.voting.as_ref().map_or(0, |v| v.votes.len());
        }
        done += usize::from(self.state.final_solution.is_some());
        let phase = self
            .in_flight
            .values()
            .map(|p| p.kind.node())
            .min()
            .unwrap_or(match self.state.status {
                DebateStatus::Completed => Node::Completed,
                DebateStatus::Failed => Node::Failed,
                DebateStatus::AwaitingClarifications => Node::Clarification,
                _ => self.last_node.unwrap_or(Node::RoundManager),
            });
        let mut active: Vec<String> = self
            .in_flight
            .values()
            .map(|p| self.executor(p).id.clone())
            .collect();
        active.sort();
        active.dedup();
        Progress {
            round: self.state.current_round,
            rounds,
            phase: phase.as_str().to_string(),
            done,
            // A completed debate did all it will do (an early stop skips the rest).
            total: if self.state.status == DebateStatus::Completed {
                done
            } else {
                total.max(done)
            },
            active_agents: active,
        }
    }
}
