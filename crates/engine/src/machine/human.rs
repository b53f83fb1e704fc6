//! Human participants: an agent whose `provider` is `human` takes its turns (proposal,
//! critiques, refinement, vote) through a person instead of a call.
//!
//! - When the plan dispatches one of its tasks, no message goes out: the task opens in
//!   `state.human.open` (checkpointed) with its deadline (`debate.humanDeadlineSecs`,
//!   default 30 minutes) and a `humanTaskOpened` event, and counts as in flight, so the
//!   tasks that depend on it wait and everything else goes on. A resume (after a restart or
//!   a takeover) finds it open and keeps its deadline; it is never opened twice.
//! - [`Input::Contribute`](super::Input::Contribute) (checked first with
//!   [`Machine::check_contribution`]) answers it: the text is recorded like an agent's
//!   result (its vote read from the text's first word), marked `human`, with the person's
//!   latency, no tokens and no cost, and a `humanContributed` event. A result a worker
//!   stored under a human task's id is never applied ([`Machine::expects`]).
//! - [`Input::Tick`](super::Input::Tick) past the deadline: a failed agent task (kind
//!   `noAnswer`, not retried): a critique is dropped (or fails the debate with
//!   `onAgentFailure: fail`), a vote is recorded as not given (not counted), a proposal or
//!   refinement fails the debate at its node (`parley retry` opens the task again with a
//!   new deadline); a `humanTaskExpired` event says which. While the debate is paused
//!   nothing expires, and `resume` moves the open tasks' deadlines on by the time it was
//!   paused.
//! - A debate that synthesizes now (`stop`, or its budget) withdraws the open tasks; a
//!   debate that ends (failed, cancelled) closes them.
//! - Clarification questions and summaries are not asked of a person: a human agent asks
//!   no questions and its history is never summarized. Its tasks reserve nothing from a
//!   budget.

use chrono::{DateTime, Utc};
use parley_protocol::{
    check_by, check_contribution_text, human_ballot, ContributionMetadata, DebateStatus, EventKind,
    HumanAnswer, HumanExpiry, HumanTask, TaskError, TaskKind, TaskOutput, HUMAN_MODEL,
    HUMAN_PROVIDER,
};

use super::{After, Effect, Machine, Planned};

/// A person's answer to a human participant's open task. Without `task_id`, the oldest
/// open task of `agent_id` (or of the only human agent with open tasks) is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contribute {
    pub agent_id: Option<String>,
    pub task_id: Option<String>,
    pub text: String,
    /// Who sent it (an API key's name, a NATS user, `terminal`); `None`: unknown.
    pub by: Option<String>,
}

impl Contribute {
    /// The contribution a `parley.debates.contribute` request carries.
    pub fn from_request(r: &parley_protocol::ContributeRequest) -> Self {
        Self {
            agent_id: r.agent_id.clone(),
            task_id: r.task_id.clone(),
            text: r.text.clone(),
            by: r.by.clone(),
        }
    }
}

/// Why a contribution does not apply (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContributeError {
    #[error("{0}")]
    Invalid(String),
    #[error("debate is {0}; only a running debate takes contributions")]
    NotRunning(&'static str),
    #[error("{0:?} is not a human participant of this debate (its human agents: {1})")]
    NotHuman(String, String),
    #[error("no task of {0} waits for an answer")]
    NoOpenTask(String),
    #[error("task {0:?} does not wait for an answer (answered, expired, or not this debate's); open: {1}")]
    NotOpen(String, String),
    #[error("tasks of several human agents wait ({0}); name the agent")]
    Ambiguous(String),
    #[error("vote: {0}")]
    BadVote(String),
}

impl ContributeError {
    /// A conflict with the debate's state (HTTP 409), rather than a bad request.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            Self::NotRunning(_) | Self::NoOpenTask(_) | Self::NotOpen(..)
        )
    }
}

impl Machine {
    /// Whether a person takes this task's turn.
    pub(super) fn is_human_task(&self, p: &Planned) -> bool {
        p.agent.is_some_and(|i| self.agents[i].is_human())
    }

    /// The tasks waiting for a person, in the order they opened.
    pub fn open_human_tasks(&self) -> &[HumanTask] {
        &self.state.human.open
    }

    /// The task an open human task stands for, with the input an agent would get (its
    /// proposal, the proposal it critiques, the critiques it received, the candidates it
    /// votes among): what a person answering it should read.
    pub fn human_task_context(&self, task_id: &str) -> Option<parley_protocol::Task> {
        self.state.human.open_task(task_id)?;
        let p = self.parse_task_id(task_id)?;
        Some(self.build_task(&p, task_id.to_string(), self.attempts(task_id).max(1)))
    }

    /// The earliest deadline of an open human task (none while the debate is paused: a
    /// person is not timed then).
    pub fn human_deadline(&self) -> Option<DateTime<Utc>> {
        if self.paused() {
            return None;
        }
        self.state.human.open.iter().map(|t| t.deadline).min()
    }

    /// Dispatching a human agent's task: it opens (once) instead of going out. A
    /// clarification is answered at once with no question. Returns true when the state
    /// changed in a way that needs another plan.
    pub(super) fn open_human(
        &mut self,
        p: Planned,
        id: String,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) -> bool {
        if p.kind == TaskKind::Clarify {
            let out = TaskOutput {
                metadata: human_metadata(0),
                ..Default::default()
            };
            self.record(&p, out, now, fx);
            return false;
        }
        self.enter(fx, now, p.round, p.kind.node());
        self.last_node = Some(p.kind.node());
        if self.state.human.open_task(&id).is_none() {
            let last = self.attempts(&id);
            self.state.engine.attempts.insert(id.clone(), last + 1);
            let wait = chrono::Duration::from_std(self.spec.debate.human_deadline())
                .unwrap_or_else(|_| chrono::Duration::days(1));
            let deadline = now.checked_add_signed(wait).unwrap_or(now);
            let agent_id = self.executor(&p).id.clone();
            let target_agent_id = p.target.map(|j| self.agents[j].id.clone());
            self.state.human.open.push(HumanTask {
                task_id: id.clone(),
                agent_id: agent_id.clone(),
                kind: p.kind,
                round: p.round,
                target_agent_id: target_agent_id.clone(),
                opened_at: now,
                deadline,
            });
            self.emit(
                fx,
                now,
                EventKind::HumanTaskOpened {
                    task_id: id.clone(),
                    node: p.kind.node(),
                    agent_id,
                    round: p.round,
                    target_agent_id,
                    deadline,
                },
            );
        }
        self.in_flight.insert(id, p);
        false
    }

    /// Whether `c` applies to this debate now, and which open task it answers; an error
    /// says why not (and the contribution changes nothing).
    pub fn check_contribution(&self, c: &Contribute) -> Result<HumanTask, ContributeError> {
        check_contribution_text(&c.text).map_err(|e| ContributeError::Invalid(e.to_string()))?;
        if let Some(by) = &c.by {
            check_by(by).map_err(|e| ContributeError::Invalid(e.to_string()))?;
        }
        if self.state.status != DebateStatus::Running {
            return Err(ContributeError::NotRunning(self.state.status.as_str()));
        }
        let humans: Vec<&str> = self
            .agents
            .iter()
            .filter(|a| a.is_human())
            .map(|a| a.id.as_str())
            .collect();
        if let Some(agent) = &c.agent_id {
            if !humans.contains(&agent.as_str()) {
                let list = if humans.is_empty() {
                    "none".to_string()
                } else {
                    humans.join(", ")
                };
                return Err(ContributeError::NotHuman(
                    parley_protocol::preview(agent, 40),
                    list,
                ));
            }
        }
        let open = &self.state.human.open;
        let mine = |t: &&HumanTask| c.agent_id.as_ref().is_none_or(|a| t.agent_id == *a);
        let task = match &c.task_id {
            Some(id) => open
                .iter()
                .filter(mine)
                .find(|t| t.task_id == *id)
                .ok_or_else(|| {
                    let ids: Vec<&str> = open.iter().map(|t| t.task_id.as_str()).collect();
                    let ids = if ids.is_empty() {
                        "none".to_string()
                    } else {
                        ids.join(", ")
                    };
                    ContributeError::NotOpen(parley_protocol::preview(id, 80), ids)
                })?,
            None => {
                let Some(first) = open.iter().find(mine) else {
                    let who = c
                        .agent_id
                        .clone()
                        .unwrap_or_else(|| "any human participant".into());
                    return Err(ContributeError::NoOpenTask(who));
                };
                if c.agent_id.is_none() {
                    let mut waiting: Vec<&str> = open.iter().map(|t| t.agent_id.as_str()).collect();
                    waiting.sort();
                    waiting.dedup();
                    if waiting.len() > 1 {
                        return Err(ContributeError::Ambiguous(waiting.join(", ")));
                    }
                }
                first
            }
        };
        if task.kind == TaskKind::Vote {
            let ballot = human_ballot(&c.text);
            let others: Vec<&str> = self
                .agents
                .iter()
                .filter(|a| a.id != task.agent_id)
                .map(|a| a.id.as_str())
                .collect();
            if !others.contains(&ballot.vote.as_str()) {
                return Err(ContributeError::BadVote(format!(
                    "{:?} is not another agent of this debate; start the text with one of: {}",
                    parley_protocol::preview(&ballot.vote, 40),
                    others.join(", ")
                )));
            }
        }
        Ok(task.clone())
    }

    /// [`Input::Contribute`](super::Input::Contribute): records a contribution that passes
    /// [`Machine::check_contribution`] as its task's result; one that does not changes
    /// nothing.
    pub(super) fn on_contribute(
        &mut self,
        c: Contribute,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) -> After {
        let Ok(task) = self.check_contribution(&c) else {
            return After::Stop;
        };
        let Some(p) = self.parse_task_id(&task.task_id) else {
            return After::Stop;
        };
        self.state.human.open.retain(|t| t.task_id != task.task_id);
        let latency_ms = now
            .signed_duration_since(task.opened_at)
            .num_milliseconds()
            .max(0) as u64;
        self.state.human.answered.push(HumanAnswer {
            task_id: task.task_id.clone(),
            agent_id: task.agent_id.clone(),
            kind: task.kind,
            by: c.by.clone(),
            at: now,
            latency_ms,
        });
        self.emit(
            fx,
            now,
            EventKind::HumanContributed {
                task_id: task.task_id.clone(),
                node: task.kind.node(),
                agent_id: task.agent_id.clone(),
                latency_ms,
                by: c.by,
            },
        );
        let vote = (task.kind == TaskKind::Vote).then(|| human_ballot(&c.text));
        let out = TaskOutput {
            content: c.text,
            metadata: human_metadata(latency_ms),
            vote,
            ..Default::default()
        };
        self.last_node = Some(p.kind.node());
        self.apply_output(&p, task.task_id, out, now, fx);
        After::Advance
    }

    /// Open human tasks past their deadline are failed agent tasks (see the module docs).
    pub(super) fn expire_human_tasks(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        let due: Vec<HumanTask> = self
            .state
            .human
            .open
            .iter()
            .filter(|t| t.deadline <= now)
            .cloned()
            .collect();
        for t in due {
            if self.state.status != DebateStatus::Running {
                // An earlier one failed the debate: the rest are withdrawn with it.
                break;
            }
            let secs = t.deadline.signed_duration_since(t.opened_at).num_seconds();
            let message = format!(
                "human participant {} did not answer {} within its deadline ({secs} s, \
                 debate.humanDeadlineSecs)",
                t.agent_id, t.task_id
            );
            self.expire_human(t, message, now, fx);
        }
    }

    fn expire_human(
        &mut self,
        t: HumanTask,
        message: String,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        self.state.human.open.retain(|o| o.task_id != t.task_id);
        self.in_flight.remove(&t.task_id);
        let Some(p) = self.parse_task_id(&t.task_id) else {
            return;
        };
        let reason = match t.kind {
            TaskKind::Vote => "its vote is not counted",
            TaskKind::Critique
                if self.spec.debate.on_agent_failure == parley_protocol::OnAgentFailure::Drop =>
            {
                "the critique is dropped; its target refines without it"
            }
            _ => "the debate fails at this node (parley retry opens the task again)",
        };
        self.state.human.expired.push(HumanExpiry {
            task_id: t.task_id.clone(),
            agent_id: t.agent_id.clone(),
            kind: t.kind,
            at: now,
            reason: reason.into(),
        });
        self.emit(
            fx,
            now,
            EventKind::HumanTaskExpired {
                task_id: t.task_id.clone(),
                node: t.kind.node(),
                agent_id: t.agent_id.clone(),
                reason: reason.into(),
            },
        );
        if t.kind == TaskKind::Vote {
            self.warn(fx, now, format!("{message}; {reason}"));
            let exec = self.executor(&p).clone();
            let out = TaskOutput {
                metadata: human_metadata(0),
                ..Default::default()
            };
            self.record_vote(&exec, out, now, fx);
            return;
        }
        let attempt = self.attempts(&t.task_id).max(1);
        let err = TaskError {
            kind: parley_protocol::ErrorKind::NoAnswer,
            message,
            provider: Some(HUMAN_PROVIDER.into()),
            retry_after_ms: None,
        };
        self.on_failure(&p, &t.task_id, attempt, err, now, fx);
    }

    /// A debate that synthesizes now or has ended waits for no person: its open tasks
    /// are withdrawn.
    pub(super) fn withdraw_human_tasks(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        if self.state.human.open.is_empty() {
            return;
        }
        let reason = match self.state.status {
            DebateStatus::Running => "withdrawn: the debate synthesizes from what exists",
            _ => "withdrawn: the debate ended",
        };
        for t in std::mem::take(&mut self.state.human.open) {
            self.in_flight.remove(&t.task_id);
            self.state.human.expired.push(HumanExpiry {
                task_id: t.task_id.clone(),
                agent_id: t.agent_id.clone(),
                kind: t.kind,
                at: now,
                reason: reason.into(),
            });
            self.emit(
                fx,
                now,
                EventKind::HumanTaskExpired {
                    task_id: t.task_id,
                    node: t.kind.node(),
                    agent_id: t.agent_id,
                    reason: reason.into(),
                },
            );
        }
    }
}

/// What a person's contribution records: no model, tokens or cost; its latency.
fn human_metadata(latency_ms: u64) -> ContributionMetadata {
    ContributionMetadata {
        tokens_used: 0,
        latency_ms,
        model: HUMAN_MODEL.into(),
        provider: Some(HUMAN_PROVIDER.into()),
        cost_usd: Some(0.0),
        human: true,
        ..Default::default()
    }
}
