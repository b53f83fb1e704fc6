//! A debate's lifecycle: start, the user's retry (of a running or a failed debate), cancel,
//! abort, resume after a restart, completion, and what a debate at rest keeps.

use chrono::{DateTime, Utc};
use parley_protocol::{ContributionType, DebateFailure, DebateStatus, EventKind, Node};
use std::collections::BTreeSet;

use super::{After, Effect, Machine, Runtime, RUNNING_RETRY_INTERVAL_SECS};

impl Machine {
    /// [`Input::Start`](super::Input::Start): a pending debate starts (budget hold, start events, warnings, the
    /// clarification phase if configured).
    pub(super) fn start(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) -> After {
        if self.state.status != DebateStatus::Pending {
            return After::Stop;
        }
        self.state.status = DebateStatus::Running;
        if let Some(limit) = self.spec.debate.budget {
            let hold = self.synthesis_hold();
            self.state.budget = Some(parley_protocol::BudgetRecord {
                limit,
                reserved: hold,
                hold,
                ..Default::default()
            });
        }
        let agents = self.agents.iter().map(|a| a.id.clone()).collect();
        let rounds = self.spec.debate.round_cap();
        self.emit(fx, now, EventKind::DebateStarted { agents, rounds });
        self.enter(fx, now, 0, Node::Initialization);
        for a in &self.agents.clone() {
            if !parley_protocol::KNOWN_ROLES.contains(&a.role.as_str()) {
                self.warn(
                    fx,
                    now,
                    format!(
                        "agent {}: unknown role {:?}, using the architect prompts",
                        a.id, a.role
                    ),
                );
            }
        }
        let problems = parley_protocol::independence_problems_with(&self.spec, |a| {
            self.effective_models
                .get(&a.id)
                .map_or(a.model.as_str(), String::as_str)
        });
        for problem in problems {
            self.warn(fx, now, format!("independence: {problem}"));
        }
        // Without clarifications a pass-through node.
        self.enter(fx, now, 0, Node::Clarification);
        if self.clarify_enabled() {
            self.state.clarification_iterations = 1;
        }
        After::Advance
    }

    /// [`Input::Retry`](super::Input::Retry): a running debate re-sends what is outstanding; a failed one resumes
    /// from its failed node.
    pub(super) fn retry(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) -> After {
        if self.state.status == DebateStatus::Running {
            self.retry_running(now, fx)
        } else {
            self.retry_failed(now, fx)
        }
    }

    /// A running debate that looks stuck: every outstanding attempt (in flight or waiting
    /// for its backoff) is given up and sent again now as a new attempt (a new message id),
    /// with a fresh retry budget. Completed tasks stay done; a late answer of a given-up
    /// attempt is still taken if it is a success. At most once per
    /// [`RUNNING_RETRY_INTERVAL_SECS`]: a retry sooner is a no-op.
    fn retry_running(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) -> After {
        let interval = chrono::Duration::seconds(RUNNING_RETRY_INTERVAL_SECS);
        if self
            .last_running_retry
            .is_some_and(|at| now.signed_duration_since(at) < interval)
        {
            return After::Stop;
        }
        self.last_running_retry = Some(now);
        let outstanding: BTreeSet<String> = self
            .in_flight
            .keys()
            .chain(self.backing_off.iter())
            .cloned()
            .collect();
        for id in &outstanding {
            let used = self.attempts(id);
            self.state.engine.failed_attempts.insert(id.clone(), used);
            self.state.engine.budget_start.insert(id.clone(), used);
            self.in_flight.remove(id);
            self.deadlines.remove(id);
        }
        self.backing_off.clear();
        self.emit(fx, now, EventKind::DebateResumed);
        After::Advance
    }

    /// A failed debate resumes from its failed node; anything else is left as it is.
    fn retry_failed(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) -> After {
        if self.state.status != DebateStatus::Failed {
            return After::Stop;
        }
        self.state.status = DebateStatus::Running;
        // A fresh budget for every task that may run again: the one that failed the
        // debate, others that failed meanwhile, and attempts still out (they may
        // yet come back with an error from before the user fixed the cause).
        let failed = self
            .state
            .error
            .take()
            .map(|e| e.task_id)
            .filter(|t| !t.is_empty());
        // A critique dropped while its target has not refined yet can still be
        // used: it runs again too (the drop stays recorded where the target went on
        // without it).
        for rd in self.rounds_mut() {
            let refined: BTreeSet<&str> = rd
                .contributions
                .iter()
                .filter(|c| c.kind == ContributionType::Refinement)
                .map(|c| c.agent_id.as_str())
                .collect();
            rd.dropped
                .retain(|d| refined.contains(d.target_agent_id.as_str()));
        }
        // Also every dispatched task without an output: after a restart nothing is
        // in flight, yet an attempt may be out, or its failure stored and not read.
        let unanswered: Vec<String> = self
            .state
            .engine
            .attempts
            .keys()
            .filter(|id| self.parse_task_id(id).is_some_and(|p| !self.is_done(&p)))
            .cloned()
            .collect();
        let again: BTreeSet<String> = failed
            .into_iter()
            .chain(self.state.engine.failed_attempts.keys().cloned())
            .chain(self.in_flight.keys().cloned())
            .chain(unanswered)
            .collect();
        for id in again {
            let used = self.attempts(&id);
            self.state.engine.budget_start.insert(id, used);
        }
        self.backing_off.clear();
        self.emit(fx, now, EventKind::DebateResumed);
        After::Advance
    }

    /// [`Input::Cancel`](super::Input::Cancel): the debate is cancelled unless it already ended that way or
    /// completed.
    pub(super) fn cancel(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) -> After {
        if matches!(
            self.state.status,
            DebateStatus::Completed | DebateStatus::Cancelled
        ) {
            return After::Stop;
        }
        self.state.status = DebateStatus::Cancelled;
        self.emit(fx, now, EventKind::DebateCancelled);
        After::Advance
    }

    /// [`Input::Abort`](super::Input::Abort): the driver cannot advance the debate; it fails with `reason` at
    /// the node it was in, and nothing outstanding is waited for any more.
    pub(super) fn abort(
        &mut self,
        reason: String,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) -> After {
        if !matches!(
            self.state.status,
            DebateStatus::Running | DebateStatus::Pending | DebateStatus::AwaitingClarifications
        ) {
            return After::Stop;
        }
        self.state.status = DebateStatus::Failed;
        // Nothing outstanding is waited for any more; a retry sends it again.
        self.in_flight.clear();
        self.backing_off.clear();
        let node = self.last_node.unwrap_or(Node::RoundManager);
        let round = self.state.current_round;
        self.state.error = Some(DebateFailure {
            node: node.as_str().to_string(),
            round,
            task_id: String::new(),
            agent_id: None,
            message: reason.clone(),
            kind: Some(parley_protocol::ErrorKind::Internal),
            attempts: 0,
            at: now,
        });
        self.enter(fx, now, round, Node::Failed);
        self.emit(
            fx,
            now,
            EventKind::DebateFailed {
                node,
                round,
                message: reason,
            },
        );
        After::Advance
    }

    /// [`Input::Resume`](super::Input::Resume): rebuilt from a checkpoint, nothing is in flight; a pending debate
    /// starts, a running one announces that it resumed (the plan re-dispatches).
    pub(super) fn resume(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) -> After {
        self.in_flight.clear();
        self.backing_off.clear();
        self.deadlines.clear();
        if self.state.status == DebateStatus::Pending {
            return self.start(now, fx);
        }
        if self.state.status == DebateStatus::Running {
            self.emit(fx, now, EventKind::DebateResumed);
        }
        After::Advance
    }

    /// The judge's solution is in: the debate completes.
    pub(super) fn complete(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        self.state.status = DebateStatus::Completed;
        self.enter(fx, now, self.state.current_round, Node::Completed);
        let confidence = self
            .state
            .final_solution
            .as_ref()
            .map_or(0.0, |s| s.confidence);
        self.emit(fx, now, EventKind::DebateCompleted { confidence });
    }

    /// What this machine keeps beyond its checkpoint, for a debate going to rest; `None`
    /// when it cannot rest: not running nor waiting for answers, or a failed task backing
    /// off (its retry is a timer of the driver's).
    pub fn runtime(&self) -> Option<Runtime> {
        let quiet = matches!(
            self.state.status,
            DebateStatus::Running | DebateStatus::AwaitingClarifications
        ) && self.backing_off.is_empty();
        quiet.then(|| Runtime {
            in_flight: self.in_flight.clone(),
            entered: self.entered.clone(),
            last_node: self.last_node,
            deadlines: self.deadlines.clone(),
            last_running_retry: self.last_running_retry,
            human_deadline: self.human_deadline(),
        })
    }

    /// Puts back what [`Machine::runtime`] kept, into a machine rebuilt from the same
    /// checkpoint (instead of [`Input::Resume`](super::Input::Resume)).
    pub fn restore_runtime(&mut self, runtime: Runtime) {
        self.in_flight = runtime.in_flight;
        self.entered = runtime.entered;
        self.last_node = runtime.last_node;
        self.deadlines = runtime.deadlines;
        self.last_running_retry = runtime.last_running_retry;
        self.backing_off.clear();
    }
}
