//! The clarification phase: asking the agents, recording their questions, the user's
//! answers, follow-up iterations and the timeout (see the module docs of [`super`]).

use chrono::{DateTime, Utc};
use parley_protocol::{
    limits, pending_clarifications, AgentClarifications, AgentConfig, Answer, ClarificationItem,
    DebateStatus, EventKind,
};
use std::collections::BTreeSet;

use super::graph::Phase;
use super::{After, Effect, Machine};

/// Why answers to clarification questions were refused (nothing was recorded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("debate {id} is {status}; only a debate in awaiting_clarifications takes answers")]
    NotWaiting { id: String, status: &'static str },
    #[error("no answers given")]
    Empty,
    #[error("question {0:?} is answered twice in this request")]
    Duplicate(String),
    #[error("unknown question id(s) {unknown:?}; the open questions are {open:?}")]
    Unknown {
        unknown: Vec<String>,
        open: Vec<String>,
    },
    #[error("question(s) {0:?} already answered")]
    AlreadyAnswered(Vec<String>),
}

impl AnswerError {
    /// A conflict with the debate's state (not waiting, already answered), as opposed to
    /// a bad request.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::NotWaiting { .. } | Self::AlreadyAnswered(_))
    }
}

impl Machine {
    /// [`Input::Answers`](super::Input::Answers): answers that pass [`Machine::check_answers`] are recorded;
    /// others change nothing.
    pub(super) fn on_answers(
        &mut self,
        answers: Vec<Answer>,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) -> After {
        if self.check_answers(&answers).is_err() {
            return After::Stop;
        }
        self.record_answers(answers, now, fx);
        After::Advance
    }

    /// [`Input::ClarificationTimeout`](super::Input::ClarificationTimeout): every open question is answered
    /// [`parley_protocol::NO_ANSWER`], with a warning.
    pub(super) fn on_clarification_timeout(
        &mut self,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) -> After {
        if self.state.status != DebateStatus::AwaitingClarifications {
            return After::Stop;
        }
        let open: Vec<Answer> = pending_clarifications(&self.state.clarifications)
            .iter()
            .flat_map(|g| &g.items)
            .map(|i| Answer {
                id: i.id.clone(),
                answer: String::new(),
            })
            .collect();
        self.warn(
            fx,
            now,
            format!(
                "no answer to {} clarification question(s) in time; recorded as {}",
                open.len(),
                parley_protocol::NO_ANSWER
            ),
        );
        self.record_answers(open, now, fx);
        After::Advance
    }

    /// Whether this debate has a clarification phase.
    pub(super) fn clarify_enabled(&self) -> bool {
        let d = &self.spec.debate;
        d.interactive_clarifications
            && d.clarifications_max_per_agent > 0
            && d.clarifications_max_iterations > 0
    }

    /// The clarification phase is over (or there is none): round 1 may open. A debate
    /// with rounds already open (a checkpoint of an older build) never goes back to it.
    pub(super) fn clarifications_settled(&self) -> bool {
        !self.clarify_enabled()
            || self.state.engine.clarifications_done
            || !self.state.rounds.is_empty()
    }

    /// The clarification phase while running: ask the agents that have not replied in
    /// this iteration; once all have, suspend for answers or end the phase.
    pub(super) fn advance_clarifications(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        if self.state.clarification_iterations == 0 {
            self.state.clarification_iterations = 1;
        }
        let k = self.state.clarification_iterations;
        let mut missing = Vec::new();
        self.plan_at(Phase::Clarification, k, &mut missing);
        if !missing.is_empty() {
            for p in missing {
                self.dispatch(p, now, fx);
            }
            return;
        }
        let pending = pending_clarifications(&self.state.clarifications);
        if pending.is_empty() {
            self.state.engine.clarifications_done = true;
            self.state.engine.clarification_replies.clear();
            return;
        }
        self.state.status = DebateStatus::AwaitingClarifications;
        self.state.engine.awaiting_since = Some(now);
        let questions = clip_questions(pending);
        self.emit(
            fx,
            now,
            EventKind::ClarificationsRequested {
                iteration: k,
                questions,
            },
        );
    }

    /// Checks answers against the debate without recording anything: it must be waiting,
    /// and each id must name one of its questions not answered yet, once.
    pub fn check_answers(&self, answers: &[Answer]) -> Result<(), AnswerError> {
        if self.state.status != DebateStatus::AwaitingClarifications {
            return Err(AnswerError::NotWaiting {
                id: self.state.id.clone(),
                status: self.state.status.as_str(),
            });
        }
        if answers.is_empty() {
            return Err(AnswerError::Empty);
        }
        let mut seen = BTreeSet::new();
        let mut unknown = Vec::new();
        let mut answered = Vec::new();
        for a in answers {
            if !seen.insert(a.id.as_str()) {
                return Err(AnswerError::Duplicate(a.id.clone()));
            }
            match self.item(&a.id) {
                None => unknown.push(parley_protocol::preview(&a.id, 80)),
                Some(i) if i.answer.is_some() => answered.push(a.id.clone()),
                Some(_) => {}
            }
        }
        if !unknown.is_empty() {
            // Enough to name the problem: an error reply stays small.
            unknown.truncate(10);
            let open = pending_clarifications(&self.state.clarifications)
                .iter()
                .flat_map(|g| g.items.iter().map(|i| i.id.clone()))
                .take(50)
                .collect();
            return Err(AnswerError::Unknown { unknown, open });
        }
        if !answered.is_empty() {
            return Err(AnswerError::AlreadyAnswered(answered));
        }
        Ok(())
    }

    /// When an operator's clarification timeout of `timeout` runs out for a debate waiting
    /// for answers (`None`: it is not waiting).
    pub fn clarification_deadline(&self, timeout: std::time::Duration) -> Option<DateTime<Utc>> {
        if self.state.status != DebateStatus::AwaitingClarifications {
            return None;
        }
        let since = self.state.engine.awaiting_since?;
        let t = chrono::Duration::from_std(timeout).unwrap_or_else(|_| chrono::Duration::days(1));
        since.checked_add_signed(t)
    }

    pub(super) fn item(&self, id: &str) -> Option<&ClarificationItem> {
        self.state
            .clarifications
            .iter()
            .flat_map(|g| &g.items)
            .find(|i| i.id == id)
    }

    /// Records checked answers; once no question is open, the next iteration (or round 1).
    pub(super) fn record_answers(
        &mut self,
        answers: Vec<Answer>,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let answered = answers.len();
        for a in answers {
            let text = a.answer.trim();
            let text = if text.is_empty() {
                parley_protocol::NO_ANSWER.to_string()
            } else {
                parley_protocol::preview(text, limits::MAX_ANSWER_CHARS)
            };
            if let Some(item) = self
                .state
                .clarifications
                .iter_mut()
                .flat_map(|g| g.items.iter_mut())
                .find(|i| i.id == a.id)
            {
                item.answer = Some(text);
            }
        }
        let remaining: usize = pending_clarifications(&self.state.clarifications)
            .iter()
            .map(|g| g.items.len())
            .sum();
        let iteration = self.state.clarification_iterations;
        if remaining == 0 {
            self.state.engine.awaiting_since = None;
            self.state.engine.clarification_replies.clear();
            self.state.status = DebateStatus::Running;
            if iteration < self.spec.debate.clarifications_max_iterations {
                self.state.clarification_iterations = iteration + 1;
            } else {
                self.state.engine.clarifications_done = true;
            }
        }
        self.emit(
            fx,
            now,
            EventKind::ClarificationsAnswered {
                iteration,
                answered,
                remaining,
            },
        );
    }

    /// Adds an agent's clarification questions: trimmed, cut to
    /// [`limits::MAX_QUESTION_CHARS`], without repeats of its earlier ones, at most
    /// `clarificationsMaxPerAgent`; marks its reply of this iteration as in.
    pub(super) fn record_questions(
        &mut self,
        agent: &AgentConfig,
        questions: Vec<String>,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let max = self.spec.debate.clarifications_max_per_agent as usize;
        let norm = |q: &str| {
            q.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase()
        };
        let pos = match self
            .state
            .clarifications
            .iter()
            .position(|g| g.agent_id == agent.id)
        {
            Some(p) => p,
            None => {
                // Groups stay in agent order, whichever agent replied first.
                let order = |id: &str| self.agents.iter().position(|a| a.id == id);
                let mine = order(&agent.id);
                let at = self
                    .state
                    .clarifications
                    .iter()
                    .position(|g| order(&g.agent_id) > mine)
                    .unwrap_or(self.state.clarifications.len());
                self.state.clarifications.insert(
                    at,
                    AgentClarifications {
                        agent_id: agent.id.clone(),
                        agent_name: agent.name.clone(),
                        role: agent.role.clone(),
                        items: Vec::new(),
                    },
                );
                at
            }
        };
        let group = &mut self.state.clarifications[pos];
        let mut seen: BTreeSet<String> = group.items.iter().map(|i| norm(&i.question)).collect();
        let mut added = 0;
        let mut over = 0;
        for q in questions {
            let q = parley_protocol::preview(q.trim(), limits::MAX_QUESTION_CHARS);
            if q.is_empty() || !seen.insert(norm(&q)) {
                continue;
            }
            if added == max {
                over += 1;
                continue;
            }
            let n = group.items.len() + 1;
            group.items.push(ClarificationItem {
                id: format!("{}-q{n}", agent.id),
                question: q,
                answer: None,
            });
            added += 1;
        }
        if group.items.is_empty() {
            self.state.clarifications.remove(pos);
        }
        self.state
            .engine
            .clarification_replies
            .insert(agent.id.clone());
        if over > 0 {
            self.warn(
                fx,
                now,
                format!(
                    "agent {}: asked {} more clarification question(s) than clarificationsMaxPerAgent ({max}); kept the first {max}",
                    agent.id, over
                ),
            );
        }
    }
}

/// Bytes of question text a `clarificationsRequested` event carries in all; each question
/// gets an equal share (at least [`MIN_EVENT_QUESTION_BYTES`]), cut with `…`.
const EVENT_QUESTIONS_BYTES: usize = 32 * 1024;
const MIN_EVENT_QUESTION_BYTES: usize = 64;

/// The open questions as an event carries them: every one, texts cut to share
/// [`EVENT_QUESTIONS_BYTES`].
fn clip_questions(mut groups: Vec<AgentClarifications>) -> Vec<AgentClarifications> {
    let n: usize = groups.iter().map(|g| g.items.len()).sum();
    let share = (EVENT_QUESTIONS_BYTES / n.max(1)).max(MIN_EVENT_QUESTION_BYTES);
    for item in groups.iter_mut().flat_map(|g| g.items.iter_mut()) {
        item.question = parley_protocol::clip_text(&item.question, share);
    }
    groups
}
