//! Budgets at the machine level: what a debate must reserve first, reserving each task's
//! worst case before dispatch, settling real usage, and recording degradations.

use chrono::{DateTime, Utc};
use parley_protocol::{limits, ContributionMetadata, EventKind, TaskKind, TerminationType};

use super::{Effect, Machine, Planned};

impl Machine {
    /// The operator's prices and completion cap, for a debate with a budget (see
    /// [`crate::budget`]). Set it before [`Input::Start`](super::Input::Start) or [`Input::Resume`](super::Input::Resume).
    pub fn set_pricing(&mut self, pricing: crate::budget::Pricing) {
        self.pricing = pricing;
    }

    /// What a debate with a budget must be able to reserve before its first call: the
    /// synthesis held back, and every agent's round-1 proposal. A budget below it is
    /// refused at submit (with these figures).
    pub fn minimum_reservation(&self) -> parley_protocol::Amount {
        let mut total = self.synthesis_hold();
        for i in 0..self.agents.len() {
            let p = Planned {
                round: 1,
                kind: TaskKind::Propose,
                agent: Some(i),
                target: None,
            };
            let id = self.task_id_of(&p);
            total = total.plus(self.pricing.worst_case(&self.build_task(&p, id, 1)));
        }
        total
    }

    /// The synthesis's worst case: its transcript is at most
    /// [`Self::synthesis_transcript_cap`] bytes under a budget.
    pub(super) fn synthesis_hold(&self) -> parley_protocol::Amount {
        let p = Planned {
            round: self.spec.debate.round_cap(),
            kind: TaskKind::Synthesize,
            agent: None,
            target: None,
        };
        let id = self.task_id_of(&p);
        let mut task = self.build_task(&p, id, 1);
        task.input.transcript = Some("x".repeat(self.synthesis_transcript_cap()));
        // The most a verdict's open issues and a vote's tally can add (4 bytes a char).
        if self.termination() == TerminationType::Verdict || self.adaptive() {
            task.input.open_issues =
                vec!["x".repeat(4 * limits::MAX_OPEN_ISSUE_CHARS); limits::MAX_OPEN_ISSUES];
        }
        if self.spec.debate.voting() {
            let per_vote =
                4 * (limits::MAX_VOTE_REASON_CHARS + 200) + 2 * limits::MAX_ID_BYTES + 64;
            task.input.vote_result = Some("x".repeat(256 + self.agents.len() * per_vote));
        }
        self.pricing.worst_case(&task)
    }

    /// Bytes of transcript a synthesis under a budget reads: the judge's summarization
    /// threshold or summary length, whichever is larger (the newest text is kept).
    pub(super) fn synthesis_transcript_cap(&self) -> usize {
        let s = self.summarization_for(None);
        s.threshold
            .max(s.max_length)
            .clamp(1_000, limits::MAX_SUMMARY_LENGTH)
    }

    /// Reserves `p`'s worst case in the budget (its own reservation if it has one: a
    /// re-dispatched task keeps it; the synthesis takes the hold). False: it does not fit.
    pub(super) fn reserve(&mut self, p: &Planned, id: &str) -> bool {
        let worst = self
            .pricing
            .worst_case(&self.build_task(p, id.to_string(), 1));
        let priced = self.pricing.priced(self.executor(p));
        let Some(b) = self.state.budget.as_mut() else {
            return true;
        };
        if b.reservations.contains_key(id) {
            return true;
        }
        if p.kind == TaskKind::Synthesize {
            let hold = std::mem::take(&mut b.hold);
            b.reservations.insert(id.to_string(), hold);
            return true;
        }
        if (b.limit.usd.is_some() && !priced) || !b.fits(worst) {
            return false;
        }
        b.reserved = b.reserved.plus(worst);
        b.reservations.insert(id.to_string(), worst);
        true
    }

    /// Settles a task's real usage: its reservation is released and what it used is
    /// spent (an unpriced call counts its reserved dollars).
    pub(super) fn settle(&mut self, id: &str, meta: &ContributionMetadata) {
        let Some(b) = self.state.budget.as_mut() else {
            return;
        };
        let held = b.reservations.remove(id).unwrap_or_default();
        b.reserved = b.reserved.minus(held);
        b.spent = b.spent.plus(parley_protocol::Amount {
            usd: meta.cost_usd.unwrap_or(held.usd),
            tokens: meta.tokens_used,
        });
    }

    /// Releases the reservation of a task given up.
    pub(super) fn release(&mut self, id: &str) {
        if let Some(b) = self.state.budget.as_mut() {
            if let Some(held) = b.reservations.remove(id) {
                b.reserved = b.reserved.minus(held);
            }
        }
    }

    /// Adds a degradation to the budget record (a step repeated in the same round joins
    /// the last entry) and emits its event.
    pub(super) fn record_degradation(
        &mut self,
        step: &str,
        round: u32,
        tasks: Vec<String>,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        if let Some(b) = self.state.budget.as_mut() {
            match b.degraded.last_mut() {
                Some(d) if d.step == step && d.round == round => d.tasks.extend(tasks.clone()),
                _ => b.degraded.push(parley_protocol::Degradation {
                    step: step.to_string(),
                    round,
                    tasks: tasks.clone(),
                    at: now,
                }),
            }
        }
        self.emit(
            fx,
            now,
            EventKind::BudgetDegraded {
                step: step.to_string(),
                round,
                tasks,
            },
        );
    }

    /// Under a budget: whether round `r + 1`'s refinements (the least a round needs; its
    /// critiques can be dropped) would not fit next to what is spent and reserved.
    pub(super) fn next_round_unaffordable(&self, r: u32) -> bool {
        let Some(b) = &self.state.budget else {
            return false;
        };
        let mut need = parley_protocol::Amount::default();
        for i in 0..self.agents.len() {
            let p = Planned {
                round: r,
                kind: TaskKind::Refine,
                agent: Some(i),
                target: None,
            };
            let id = self.task_id_of(&p);
            need = need.plus(self.pricing.worst_case(&self.build_task(&p, id, 1)));
        }
        !b.fits(need)
    }

    /// Whether the budget skipped the task with this id.
    pub(super) fn budget_skipped(&self, id: &str) -> bool {
        self.state
            .budget
            .as_ref()
            .is_some_and(|b| b.skipped.contains(id))
    }
}
