//! Task results: recording a success, a failure against the node's retry budget (backoff,
//! dropped critiques, a failed debate), and which results the machine still expects.

use chrono::{DateTime, Utc};
use parley_protocol::{
    DebateFailure, DebateStatus, DroppedCritique, EventKind, Node, OnAgentFailure, TaskError,
    TaskKind, TaskOutcome, TaskResult,
};

use super::{After, Effect, Expectation, Machine, Planned};

impl Machine {
    pub(super) fn on_result(
        &mut self,
        result: TaskResult,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) -> After {
        if result.debate_id != self.state.id {
            return After::Advance;
        }
        let Some(planned) = self.parse_task_id(&result.task_id) else {
            self.warn(
                fx,
                now,
                format!("ignored result for unknown task {}", result.task_id),
            );
            return After::Advance;
        };
        if self.is_human_task(&planned) {
            // Only a person answers a human participant's task (`Input::Contribute`).
            return After::Stop;
        }
        self.last_node = Some(planned.kind.node());
        if self.is_done(&planned) {
            // First result wins; a duplicate delivery changes nothing.
            self.in_flight.remove(&result.task_id);
            return After::Advance;
        }
        match result.outcome {
            TaskOutcome::Ok(out) => self.apply_output(&planned, result.task_id, out, now, fx),
            TaskOutcome::Error(err) => {
                // A stale failure of an older attempt does not count against the budget.
                if result.attempt < self.attempts(&result.task_id) {
                    return After::Advance;
                }
                self.in_flight.remove(&result.task_id);
                self.on_failure(&planned, &result.task_id, result.attempt, err, now, fx);
            }
        }
        After::Advance
    }

    /// Records a task's output (a worker's result or a person's contribution): settles
    /// its reservation, stores it, updates the spend, announces it.
    pub(super) fn apply_output(
        &mut self,
        planned: &Planned,
        task_id: String,
        out: parley_protocol::TaskOutput,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        self.in_flight.remove(&task_id);
        self.backing_off.remove(&task_id);
        for w in &out.warnings {
            self.warn(fx, now, format!("{task_id}: {w}"));
        }
        self.settle(&task_id, &out.metadata);
        let (tokens, latency, cost_usd) = (
            out.metadata.tokens_used,
            out.metadata.latency_ms,
            out.metadata.cost_usd,
        );
        self.record(planned, out, now, fx);
        self.state.spend = Some(parley_protocol::Spend::of(&self.state, &self.spec.judge.id));
        let agent_id = self.executor(planned).id.clone();
        self.emit(
            fx,
            now,
            EventKind::TaskCompleted {
                task_id,
                node: planned.kind.node(),
                agent_id,
                tokens,
                latency_ms: latency,
                cost_usd,
            },
        );
    }

    pub(super) fn on_failure(
        &mut self,
        planned: &Planned,
        id: &str,
        attempt: u32,
        err: TaskError,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        self.state
            .engine
            .failed_attempts
            .insert(id.to_string(), attempt);
        let node = planned.kind.node();
        let policy = self.spec.debate.retry.for_node(node.as_str()).clone();
        let base = self.state.engine.budget_start.get(id).copied().unwrap_or(0);
        let used = attempt.saturating_sub(base);
        let running = self.state.status == DebateStatus::Running;
        let will_retry = running && err.retryable() && used < policy.attempts;
        let agent_id = self.executor(planned).id.clone();
        self.emit(
            fx,
            now,
            EventKind::TaskFailed {
                task_id: id.to_string(),
                node,
                agent_id: agent_id.clone(),
                attempt,
                error: err.message.clone(),
                will_retry,
            },
        );
        if will_retry {
            let delay_ms = policy
                .backoff_ms(attempt + 1)
                .max(err.retry_after_ms.unwrap_or(0));
            self.backing_off.insert(id.to_string());
            fx.push(Effect::ScheduleRetry {
                task_id: id.to_string(),
                delay_ms,
            });
            return;
        }
        if !running {
            return;
        }
        if planned.kind == TaskKind::Critique
            && self.spec.debate.on_agent_failure == OnAgentFailure::Drop
        {
            self.drop_critique(planned, id, used, &err, now, fx);
            return;
        }
        let message = match &err.provider {
            Some(p) if !err.message.contains(p.as_str()) => format!("{p}: {}", err.message),
            _ => err.message.clone(),
        };
        self.state.status = DebateStatus::Failed;
        self.state.error = Some(DebateFailure {
            node: node.as_str().to_string(),
            round: planned.round,
            task_id: id.to_string(),
            agent_id: Some(agent_id),
            message: message.clone(),
            kind: Some(err.kind),
            attempts: used,
            at: now,
        });
        self.enter(fx, now, planned.round, Node::Failed);
        self.emit(
            fx,
            now,
            EventKind::DebateFailed {
                node,
                round: planned.round,
                message,
            },
        );
    }

    /// Gives up a critique whose budget is spent: recorded in its round and warned about;
    /// its target refines with the critiques that did arrive.
    pub(super) fn drop_critique(
        &mut self,
        planned: &Planned,
        id: &str,
        attempts: u32,
        err: &TaskError,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let (Some(i), Some(j)) = (planned.agent, planned.target) else {
            return;
        };
        let agent_id = self.agents[i].id.clone();
        let target_agent_id = self.agents[j].id.clone();
        let Some(at) = self
            .state
            .rounds
            .iter()
            .position(|r| r.round_number == planned.round)
        else {
            return;
        };
        self.revisions.touch(at);
        let rd = &mut self.state.rounds[at];
        let dropped = DroppedCritique {
            task_id: id.to_string(),
            agent_id: agent_id.clone(),
            target_agent_id: target_agent_id.clone(),
            error: err.message.clone(),
            attempts,
            at: now,
        };
        rd.dropped.push(dropped);
        self.release(id);
        self.warn(
            fx,
            now,
            format!(
                "round {}: dropped {agent_id}'s critique of {target_agent_id} after {attempts} \
                 attempt(s) ({}); {target_agent_id} refines without it",
                planned.round, err.message
            ),
        );
    }

    /// Whether a result for `task_id`, attempt `attempt` (a success when `ok`) is one this
    /// debate waits for: the drivers apply only [`Expectation::Wanted`] results, so a
    /// result for a task that was never dispatched, is finished, or comes from the wrong
    /// attempt changes nothing.
    pub fn expects(&self, task_id: &str, attempt: u32, ok: bool) -> Expectation {
        let Some(planned) = self.parse_task_id(task_id) else {
            return Expectation::NotDispatched;
        };
        if self.is_human_task(&planned) {
            // Never dispatched to a worker: only a person answers it.
            return Expectation::NotDispatched;
        }
        if self.is_done(&planned) {
            return Expectation::Finished;
        }
        if !self.in_flight.contains_key(task_id) {
            return Expectation::NotDispatched;
        }
        let current = self.attempts(task_id);
        let wanted = if ok {
            (1..=current).contains(&attempt)
        } else {
            attempt == current
        };
        if wanted {
            Expectation::Wanted
        } else {
            Expectation::WrongAttempt
        }
    }

    /// [`Input::RetryDue`](super::Input::RetryDue): the backoff of a failed task has elapsed; the plan dispatches
    /// its next attempt.
    pub(super) fn on_retry_due(&mut self, task_id: &str) -> After {
        self.backing_off.remove(task_id);
        After::Advance
    }
}
