//! Task deadlines: each dispatched attempt's deadline, the clock input, lost messages (see
//! the module docs of [`super`]).

use chrono::{DateTime, Utc};
use parley_protocol::TaskError;

use std::collections::BTreeMap;

use super::{After, Effect, Machine, Planned};

/// The longest task timeout a deadline counts (a larger `timeoutMs` is treated as this).
pub const MAX_TASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The earliest of `deadlines` whose task is still in flight.
pub(super) fn earliest_deadline(
    deadlines: &BTreeMap<String, DateTime<Utc>>,
    in_flight: &BTreeMap<String, Planned>,
) -> Option<DateTime<Utc>> {
    deadlines
        .iter()
        .filter(|(id, _)| in_flight.contains_key(*id))
        .map(|(_, d)| *d)
        .min()
}

impl Machine {
    /// Gives every attempt dispatched from now on a deadline: its timeout plus `margin`
    /// (`None`: no deadlines, the embedded driver's choice).
    pub fn set_task_deadline_margin(&mut self, margin: Option<std::time::Duration>) {
        self.deadline_margin = margin
            .map(|m| chrono::Duration::from_std(m).unwrap_or_else(|_| chrono::Duration::days(1)));
    }

    /// The earliest deadline of an attempt in flight or of an open human task: when the
    /// driver should feed [`Input::Tick`](super::Input::Tick).
    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        let calls = earliest_deadline(&self.deadlines, &self.in_flight);
        match (calls, self.human_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A worker handed `attempt` of `task_id` back to the queue until `until` (rate limit):
    /// its deadline moves to at least `until` plus the task's timeout and the margin. Only
    /// the in-flight attempt counts; deadlines are not checkpointed, so no checkpoint is due.
    pub fn extend_deadline(&mut self, task_id: &str, attempt: u32, until: DateTime<Utc>) {
        if self.attempts(task_id) != attempt || !self.in_flight.contains_key(task_id) {
            return;
        }
        let Some(budget) = self.deadline_budget(task_id) else {
            return;
        };
        let Some(candidate) = until.checked_add_signed(budget) else {
            return;
        };
        if let Some(d) = self.deadlines.get_mut(task_id) {
            if candidate > *d {
                *d = candidate;
            }
        }
    }

    /// An attempt's timeout (capped) plus the margin, when deadlines are on.
    pub(super) fn deadline_budget(&self, task_id: &str) -> Option<chrono::Duration> {
        let margin = self.deadline_margin?;
        let planned = self.in_flight.get(task_id)?;
        let timeout_ms = self
            .spec
            .debate
            .retry
            .for_node(planned.kind.node().as_str())
            .timeout_ms
            .min(MAX_TASK_TIMEOUT.as_millis() as u64);
        Some(chrono::Duration::milliseconds(timeout_ms as i64) + margin)
    }

    /// Fails every in-flight attempt (and open human task, unless the debate is paused)
    /// whose deadline is at or before `now`.
    pub(super) fn expire_deadlines(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) -> After {
        if self.state.status == parley_protocol::DebateStatus::Running && !self.paused() {
            self.expire_human_tasks(now, fx);
        }
        let due: Vec<(String, DateTime<Utc>)> = self
            .deadlines
            .iter()
            .filter(|(id, d)| **d <= now && self.in_flight.contains_key(*id))
            .map(|(id, d)| (id.clone(), *d))
            .collect();
        for (id, _) in due {
            let attempt = self.attempts(&id);
            let waited = self
                .deadline_budget(&id)
                .map_or(0, |b| b.num_seconds().max(0));
            let message = format!(
                "no answer to attempt {attempt} within its deadline ({waited} s: the task's \
                 timeout plus the coordinator's task_deadline_margin); the task message or its \
                 result was lost"
            );
            self.lose(&id, attempt, message, now, fx);
        }
        After::Advance
    }

    /// Fails an in-flight attempt whose message or result is gone (kind `undelivered`).
    pub(super) fn lose(
        &mut self,
        id: &str,
        attempt: u32,
        message: String,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        if self.attempts(id) != attempt {
            return;
        }
        let Some(planned) = self.in_flight.remove(id) else {
            return;
        };
        self.deadlines.remove(id);
        let err = TaskError {
            kind: parley_protocol::ErrorKind::Undelivered,
            message,
            provider: None,
            retry_after_ms: None,
        };
        self.on_failure(&planned, id, attempt, err, now, fx);
    }

    /// [`Input::Lost`](super::Input::Lost): the transport gave up on this attempt's message.
    pub(super) fn on_lost(
        &mut self,
        task_id: &str,
        attempt: u32,
        reason: String,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) -> After {
        self.lose(task_id, attempt, reason, now, fx);
        After::Advance
    }
}
