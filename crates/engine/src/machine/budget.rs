//! Budgets at the machine level: what a debate needs at least, fitting each call's
//! completion cap to what is left, reserving it before dispatch, settling real usage
//! (overruns recorded), and the degradation steps.
//!
//! # Fitting a call
//! What is *left* is the limit less what was spent and what is reserved (the synthesis
//! held back from the start, and every call in flight). A call of round r gets a fair share
//! of it: its prompt bound, and a completion cap of what remains after that prompt divided
//! by the calls of round r still to be dispatched (itself included), never above the
//! participant's cap, never below its kind's floor ([`crate::budget::completion_floor`]) as
//! long as the floor fits in what is left. A critique also leaves the round's pending
//! refinements room for their floor (the order gives up critiques first), a clarification
//! the round-1 proposals. The fitted cap is
//! written into the task's `maxTokens` and kept in the ledger (`caps`), so a retry or a
//! resume asks for the same.
//!
//! A call whose floor does not fit is not dispatched. While other calls are out it waits
//! when their reservations, once settled, would make room (a call usually uses far less
//! than its cap); otherwise the debate degrades, in this order: drop the critique
//! (`dropCritiques`), start no new round (`noNewRound`, also checked before a round
//! opens: its refinements at their floor must fit, once the calls in flight are back),
//! skip summaries (`skipSummaries`), and synthesize with what exists (`synthesizeNow`).
//!
//! # The synthesis
//! Held back from the start: its prompt bound (the transcript cut to
//! [`Machine::synthesis_transcript_cap`] bytes) and the judge's cap fitted to a quarter of
//! the budget, within what the round-1 proposals at their floor leave, never below
//! [`crate::budget::MIN_SYNTHESIS_TOKENS`]. When it is dispatched it may use its hold and
//! everything left besides, up to the judge's cap.
//!
//! # Overruns
//! A provider may return more than the `maxTokens` asked for. The real usage is what is
//! spent (later calls are fitted to what is really left) and the call is recorded in
//! `overruns`. Only such a provider can take `spent` past the limit; the synthesis then
//! still runs at its floor so the debate ends with a solution.

use chrono::{DateTime, Utc};
use parley_protocol::{
    limits, AgentConfig, Amount, ContributionMetadata, ContributionType, EventKind, Task,
    TaskInput, TaskKind, TerminationType,
};

use super::{Effect, Machine, Planned};
use crate::budget::{completion_floor, less, more, scaled, MIN_SYNTHESIS_TOKENS};

/// What the budget says about a call the plan wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fit {
    /// Reserved (or it already was): dispatch it.
    Go,
    /// Not now: calls in flight hold the room it needs; planned again after they settle.
    Wait,
    /// It does not fit: take its kind's degradation step.
    Degrade,
}

/// Bytes of text a critique not yet written is assumed to add to its target's refinement
/// prompt, per completion token of its floor (room left for refinements).
const BYTES_PER_TOKEN_AHEAD: u64 = 4;

impl Machine {
    /// The operator's prices and completion cap, for a debate with a budget (see
    /// [`crate::budget`]). Set it before [`Input::Start`](super::Input::Start) or [`Input::Resume`](super::Input::Resume).
    pub fn set_pricing(&mut self, pricing: crate::budget::Pricing) {
        self.pricing = pricing;
    }

    /// What the smallest run of a debate with a budget needs: every agent's round-1
    /// proposal and the synthesis, each at its completion floor. A budget below it is
    /// refused at submit (with these figures); nothing above it is.
    pub fn minimum_reservation(&self) -> Amount {
        let task = self.synthesis_task();
        let floor = self.floor_of(&task);
        let prompt = self.pricing.prompt_bound(&task);
        self.proposals_at_floor()
            .plus(self.pricing.amount(&task, prompt, u64::from(floor)))
    }

    /// Every agent's round-1 proposal at its floor (with the answered clarifications so
    /// far in its prompt).
    fn proposals_at_floor(&self) -> Amount {
        let mut total = Amount::default();
        // A person's turn costs nothing.
        for i in (0..self.agents.len()).filter(|&i| !self.agents[i].is_human()) {
            let p = Planned {
                round: 1,
                kind: TaskKind::Propose,
                agent: Some(i),
                target: None,
            };
            let task = self.build_task(&p, self.task_id_of(&p), 1);
            let prompt = self.pricing.prompt_bound(&task);
            let floor = self.floor_of(&task);
            total = total.plus(self.pricing.amount(&task, prompt, u64::from(floor)));
        }
        total
    }

    /// The completion floor of `task`, never above its participant's cap.
    fn floor_of(&self, task: &Task) -> u32 {
        completion_floor(task.kind).min(self.pricing.completion_cap(&task.agent))
    }

    /// The synthesis as the hold sizes it: the transcript at its cap under a budget, the
    /// most open issues and vote tally it can carry.
    fn synthesis_task(&self) -> Task {
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
        task
    }

    /// The synthesis held back at the start (see the module docs).
    pub(super) fn synthesis_hold(&self) -> Amount {
        let task = self.synthesis_task();
        let prompt = self.pricing.prompt_bound(&task);
        let floor = self.floor_of(&task);
        let completion = match self.spec.debate.budget {
            Some(limit) => {
                let quarter = self.pricing.fit(&task, prompt, scaled(limit, 0.25));
                let after_proposals = less(limit, self.proposals_at_floor());
                quarter
                    .min(self.pricing.fit(&task, prompt, after_proposals))
                    .max(floor)
            }
            None => floor,
        };
        self.pricing.amount(&task, prompt, u64::from(completion))
    }

    /// Bytes of transcript a synthesis under a budget reads: the judge's summary length
    /// (what a judge's summary of the final round is cut to; the newest text is kept).
    pub(super) fn synthesis_transcript_cap(&self) -> usize {
        self.summarization_for(None)
            .max_length
            .clamp(1_000, limits::MAX_SUMMARY_LENGTH)
    }

    /// Under a budget, the task's `maxTokens` is the cap its reservation was fitted to, and
    /// the judge's JSON tasks ask once.
    pub(super) fn limit_for_budget(
        &self,
        id: &str,
        kind: TaskKind,
        agent: &mut AgentConfig,
        input: &mut TaskInput,
    ) {
        if self.spec.debate.budget.is_none() {
            return;
        }
        let fitted = self
            .state
            .budget
            .as_ref()
            .and_then(|b| b.caps.get(id).copied());
        agent.max_tokens = Some(fitted.unwrap_or_else(|| self.pricing.completion_cap(agent)));
        input.single_ask = matches!(
            kind,
            TaskKind::Synthesize | TaskKind::Evaluate | TaskKind::Verdict
        );
    }

    /// Fits `p`'s completion cap to what is left and reserves the call (see the module
    /// docs). A task that already holds a reservation (sent again) keeps it.
    pub(super) fn reserve(&mut self, p: &Planned, id: &str) -> Fit {
        let Some(b) = self.state.budget.as_ref() else {
            return Fit::Go;
        };
        if b.reservations.contains_key(id) {
            return Fit::Go;
        }
        let task = self.build_task(p, id.to_string(), 1);
        if b.limit.usd.is_some() && !self.pricing.priced(&task.agent) {
            return Fit::Degrade;
        }
        let prompt = self.pricing.prompt_bound(&task);
        let floor = self.floor_of(&task);
        let free = b.left();
        let (cap, amount) = if p.kind == TaskKind::Synthesize {
            // Its hold and everything left besides; at least its floor (see Overruns).
            let room = more(free, b.hold);
            let cap = self
                .pricing
                .fit(&task, prompt, room)
                .max(floor.min(MIN_SYNTHESIS_TOKENS));
            (cap, self.pricing.amount(&task, prompt, u64::from(cap)))
        } else {
            let room = less(free, self.room_ahead(p));
            if !self
                .pricing
                .amount(&task, prompt, u64::from(floor))
                .within(&room)
            {
                let out: Amount = b
                    .reservations
                    .values()
                    .fold(Amount::default(), |a, r| a.plus(*r));
                let later = more(room, out);
                let fits_later = !b.reservations.is_empty()
                    && self
                        .pricing
                        .amount(&task, prompt, u64::from(floor))
                        .within(&later);
                return if fits_later { Fit::Wait } else { Fit::Degrade };
            }
            let all = self.pricing.fit(&task, prompt, room);
            let k = self.calls_ahead(p).max(1) as f64;
            let after_prompt = less(room, self.pricing.amount(&task, prompt, 0));
            let share = self.pricing.fit(&task, 0, scaled(after_prompt, 1.0 / k));
            let cap = share.max(floor).min(all);
            (cap, self.pricing.amount(&task, prompt, u64::from(cap)))
        };
        let Some(b) = self.state.budget.as_mut() else {
            return Fit::Go;
        };
        if p.kind == TaskKind::Synthesize {
            let hold = std::mem::take(&mut b.hold);
            b.reserved = b.reserved.minus(hold);
        }
        b.reserved = b.reserved.plus(amount);
        b.reservations.insert(id.to_string(), amount);
        b.caps.insert(id.to_string(), cap);
        Fit::Go
    }

    /// The calls of `p`'s round still to be dispatched (neither answered, given up nor in
    /// flight), `p` included: the ones a fair share divides what is left among.
    fn calls_ahead(&self, p: &Planned) -> usize {
        let r = p.round;
        let Some(rd) = self.round(r) else {
            return 1;
        };
        let waiting = |kind: TaskKind, i: usize, t: Option<usize>| {
            let q = Planned {
                round: r,
                kind,
                agent: Some(i),
                target: t,
            };
            !self.in_flight.contains_key(&self.task_id_of(&q))
        };
        let mut n = 0;
        // A person's turn costs nothing: it takes no share.
        for (i, a) in self
            .agents
            .iter()
            .enumerate()
            .filter(|(_, a)| !a.is_human())
        {
            if rd.find(ContributionType::Proposal, &a.id, None).is_none()
                && waiting(TaskKind::Propose, i, None)
            {
                n += 1;
            }
            if rd.find(ContributionType::Refinement, &a.id, None).is_none()
                && waiting(TaskKind::Refine, i, None)
            {
                n += 1;
            }
        }
        if self.critiques_open(r) {
            for (i, j) in self.critique_pairs(r) {
                if self.agents[i].is_human() {
                    continue;
                }
                let (a, t) = (&self.agents[i].id, &self.agents[j].id);
                if rd.find(ContributionType::Critique, a, Some(t)).is_none()
                    && !rd.dropped_critique(a, t)
                    && waiting(TaskKind::Critique, i, Some(j))
                {
                    n += 1;
                }
            }
        }
        // A summary or a judge's task of the round is not among those counted.
        match p.kind {
            TaskKind::Propose | TaskKind::Critique | TaskKind::Refine => n,
            _ => n + 1,
        }
    }

    /// What a call leaves for calls the debate needs more: a clarification leaves the
    /// round-1 proposals at their floor (prompts with the answers so far); a critique the
    /// refinements of its round not yet dispatched, each at its floor, with a prompt grown
    /// by the critiques it still waits for. Nothing for other kinds.
    fn room_ahead(&self, p: &Planned) -> Amount {
        let mut ahead = Amount::default();
        if p.kind == TaskKind::Clarify {
            return self.proposals_at_floor();
        }
        if p.kind != TaskKind::Critique {
            return ahead;
        }
        let Some(rd) = self.round(p.round) else {
            return ahead;
        };
        let pairs = self.critique_pairs(p.round);
        for (i, a) in self
            .agents
            .iter()
            .enumerate()
            .filter(|(_, a)| !a.is_human())
        {
            let q = Planned {
                round: p.round,
                kind: TaskKind::Refine,
                agent: Some(i),
                target: None,
            };
            let id = self.task_id_of(&q);
            if rd.find(ContributionType::Refinement, &a.id, None).is_some()
                || self.in_flight.contains_key(&id)
            {
                continue;
            }
            let task = self.build_task(&q, id, 1);
            let floor = self.floor_of(&task);
            let missing = pairs
                .iter()
                .filter(|&&(k, t)| {
                    t == i
                        && rd
                            .find(ContributionType::Critique, &self.agents[k].id, Some(&a.id))
                            .is_none()
                        && !rd.dropped_critique(&self.agents[k].id, &a.id)
                })
                .count() as u64;
            let prompt = self.pricing.prompt_bound(&task)
                + missing * BYTES_PER_TOKEN_AHEAD * u64::from(completion_floor(TaskKind::Critique));
            ahead = ahead.plus(self.pricing.amount(&task, prompt, u64::from(floor)));
        }
        ahead
    }

    /// Settles a task's real usage: its reservation is released and what it used is
    /// spent (an unpriced call counts its reserved dollars). A call that used more than
    /// was reserved is recorded in `overruns`.
    pub(super) fn settle(&mut self, id: &str, meta: &ContributionMetadata) {
        let Some(b) = self.state.budget.as_mut() else {
            return;
        };
        let held = b.reservations.remove(id).unwrap_or_default();
        let cap = b.caps.remove(id);
        b.reserved = b.reserved.minus(held);
        let used = Amount {
            usd: meta.cost_usd.unwrap_or(held.usd),
            tokens: meta.tokens_used,
        };
        b.spent = b.spent.plus(used);
        let over = used.tokens > held.tokens || used.usd > held.usd + 1e-12;
        if over && (held.tokens > 0 || cap.is_some()) {
            b.overruns.push(parley_protocol::Overrun {
                task_id: id.to_string(),
                max_tokens: cap.unwrap_or(0),
                reserved: held,
                used,
            });
        }
    }

    /// Releases the reservation of a task given up.
    pub(super) fn release(&mut self, id: &str) {
        if let Some(b) = self.state.budget.as_mut() {
            b.caps.remove(id);
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

    /// Under a budget: whether round `r + 1`'s refinements at their floor (the least a
    /// round needs; its critiques can be dropped) would not fit next to what is spent and
    /// reserved.
    pub(super) fn next_round_unaffordable(&self, r: u32) -> bool {
        let Some(b) = &self.state.budget else {
            return false;
        };
        !b.fits(self.next_round_need(r))
    }

    /// Under a budget: whether round `r + 1` should not open yet: its refinements at their
    /// floor do not fit now, but would once the calls in flight settle (they usually give
    /// most of their reservation back). It is decided when they are back.
    pub(super) fn next_round_waits(&self, r: u32) -> bool {
        let Some(b) = &self.state.budget else {
            return false;
        };
        if b.reservations.is_empty() {
            return false;
        }
        let need = self.next_round_need(r);
        let out = b
            .reservations
            .values()
            .fold(Amount::default(), |a, x| a.plus(*x));
        !b.fits(need) && need.within(&more(b.left(), out))
    }

    /// Round `r + 1`'s refinements at their floor (prompts as round r's).
    fn next_round_need(&self, r: u32) -> Amount {
        let mut need = Amount::default();
        for i in (0..self.agents.len()).filter(|&i| !self.agents[i].is_human()) {
            let p = Planned {
                round: r,
                kind: TaskKind::Refine,
                agent: Some(i),
                target: None,
            };
            let task = self.build_task(&p, self.task_id_of(&p), 1);
            let prompt = self.pricing.prompt_bound(&task);
            let floor = self.floor_of(&task);
            need = need.plus(self.pricing.amount(&task, prompt, u64::from(floor)));
        }
        need
    }

    /// Whether the budget skipped the task with this id.
    pub(super) fn budget_skipped(&self, id: &str) -> bool {
        self.state
            .budget
            .as_ref()
            .is_some_and(|b| b.skipped.contains(id))
    }
}
