//! Rounds: dispatching what the plan wants, opening rounds, carrying refinements over as the
//! next round's proposals, when a round is the last, and the critique topologies.

use chrono::{DateTime, Utc};
use parley_protocol::{
    Contribution, ContributionMetadata, ContributionType, CritiqueTopology, DebateRound,
    DebateStatus, EventKind, Node, TerminationType,
};
use std::collections::{BTreeMap, BTreeSet};

use super::budget::Fit;
use super::graph;
use super::graph::Phase;
use super::{Effect, Machine, Planned};

impl Machine {
    /// Dispatches every task whose inputs exist; opens rounds; completes the debate.
    pub(super) fn advance(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        if self.state.status != DebateStatus::Running {
            return;
        }
        if self.paused() {
            // Steering: nothing new until `resume`; a synthesis that was out still ends it.
            if self.state.final_solution.is_some() {
                self.complete(now, fx);
            }
            return;
        }
        if !self.clarifications_settled() {
            self.advance_clarifications(now, fx);
            if !self.clarifications_settled() {
                return;
            }
        }
        loop {
            let changed = self.open_rounds_and_carry_over(now, fx);
            if !changed {
                break;
            }
        }
        if self.state.final_solution.is_some() {
            self.complete(now, fx);
            return;
        }
        if self.synthesizing_now() {
            self.withdraw_human_tasks(now, fx);
        }
        let mut degraded = false;
        for p in self.plan() {
            degraded |= self.dispatch(p, now, fx);
        }
        if degraded {
            // The state changed (a critique dropped, a summary skipped, the last round
            // set): plan again. Each degradation happens once per task, so this ends.
            self.advance(now, fx);
        }
    }

    /// Dispatches `p` unless it is in flight or backing off. Under a budget it first fits
    /// and reserves the call ([`Self::reserve`]): it may wait for calls in flight to give
    /// room back, or the debate degrades instead ([`Self::degrade`]) and `true` is
    /// returned.
    pub(super) fn dispatch(
        &mut self,
        p: Planned,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let id = self.task_id_of(&p);
        if self.in_flight.contains_key(&id) || self.backing_off.contains(&id) {
            return false;
        }
        if self.is_human_task(&p) {
            // A person's turn: it opens and waits; no call, no reservation.
            return self.open_human(p, id, now, fx);
        }
        match self.reserve(&p, &id) {
            Fit::Go => {}
            Fit::Wait => return false,
            Fit::Degrade => {
                self.degrade(&p, id, now, fx);
                return true;
            }
        }
        // Clarification iterations all belong before round 1.
        let node_round = if graph::def(p.kind).phase == Phase::Clarification {
            0
        } else {
            p.round
        };
        self.enter(fx, now, node_round, p.kind.node());
        self.last_node = Some(p.kind.node());
        // A new attempt only after a failure; an attempt still outstanding (dispatched
        // before a resume) goes out again as itself.
        let last = self.attempts(&id);
        let outstanding = last > 0 && self.state.engine.failed_attempts.get(&id) != Some(&last);
        let attempt = if outstanding { last } else { last + 1 };
        self.state.engine.attempts.insert(id.clone(), attempt);
        let task = self.build_task(&p, id.clone(), attempt);
        self.in_flight.insert(id.clone(), p.clone());
        if let Some(deadline) = self
            .deadline_budget(&id)
            .and_then(|b| now.checked_add_signed(b))
        {
            self.deadlines.insert(id.clone(), deadline);
        }
        let agent_id = task.agent.id.clone();
        self.emit(
            fx,
            now,
            EventKind::TaskDispatched {
                task_id: id,
                node: p.kind.node(),
                agent_id,
                attempt,
            },
        );
        fx.push(Effect::Dispatch(task));
        false
    }

    /// Opens the next round when its time has come and fills in carried-over proposals.
    /// Returns true if anything changed.
    pub(super) fn open_rounds_and_carry_over(
        &mut self,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let mut changed = false;
        if self.state.rounds.is_empty() {
            self.open_round(1, now, fx);
            changed = true;
        }
        let r = self.state.rounds.len() as u32;
        for k in 1..=r {
            if self.round_complete(k) && !self.entered.contains(&(k, Node::Evaluation)) {
                // Round finished: pass through (or enter) evaluation.
                self.enter(fx, now, k, Node::Evaluation);
                self.emit(fx, now, EventKind::RoundCompleted { round: k });
            }
        }
        if r < self.round_cap() && !self.is_final_round(r) {
            let open_next = match self.termination() {
                TerminationType::Fixed => self
                    .round(r)
                    .is_some_and(|rd| rd.count(ContributionType::Refinement) > 0),
                TerminationType::Verdict => self.round(r).is_some_and(|rd| rd.verdict.is_some()),
                TerminationType::Similarity => {
                    self.round(r).is_some_and(|rd| rd.similarity.is_some())
                }
                _ => self.round(r).is_some_and(|rd| rd.evaluation.is_some()),
            };
            // Under a budget that is short now, decided once the calls in flight are back.
            let open_next = open_next && !self.next_round_waits(r);
            if open_next && self.next_round_unaffordable(r) {
                if let Some(b) = self.state.budget.as_mut() {
                    b.final_round = Some(r);
                }
                self.record_degradation("noNewRound", r, Vec::new(), now, fx);
            } else if open_next {
                self.open_round(r + 1, now, fx);
                changed = true;
            }
        }
        // Carry over refinements as the next round's proposals.
        for r in 2..=self.state.rounds.len() as u32 {
            for i in 0..self.agents.len() {
                let agent = &self.agents[i];
                if self.round(r).is_some_and(|rd| {
                    rd.find(ContributionType::Proposal, &agent.id, None)
                        .is_some()
                }) {
                    continue;
                }
                let Some(prev) = self
                    .round(r - 1)
                    .and_then(|rd| rd.find(ContributionType::Refinement, &agent.id, None))
                else {
                    continue;
                };
                if prev.content.trim().is_empty() {
                    continue; // the plan asks the LLM for a fresh proposal instead
                }
                let c = Contribution {
                    agent_id: agent.id.clone(),
                    agent_role: agent.role.clone(),
                    kind: ContributionType::Proposal,
                    content: prev.content.clone(),
                    target_agent_id: None,
                    metadata: ContributionMetadata {
                        tokens_used: 0,
                        latency_ms: 0,
                        model: prev.metadata.model.clone(),
                        carried_over: true,
                        ..Default::default()
                    },
                };
                self.enter(fx, now, r, Node::Proposal);
                self.push_contribution(r, c);
                changed = true;
            }
        }
        changed
    }

    pub(super) fn open_round(&mut self, r: u32, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        self.push_round(DebateRound::new(r, now));
        self.state.current_round = r;
        self.enter(fx, now, r, Node::RoundManager);
    }

    pub(super) fn termination(&self) -> TerminationType {
        self.spec.debate.termination_condition.kind
    }

    pub(super) fn threshold(&self) -> f64 {
        self.spec.debate.termination_condition.threshold()
    }

    /// The final round is complete: the closing nodes (votes, synthesis) may run.
    pub(super) fn finished(&self) -> bool {
        let last = self.state.rounds.len() as u32;
        last > 0 && self.round_complete(last) && self.is_final_round(last)
    }

    /// The judge's check of complete round r (`Evaluate`, `Verdict` or `Embed`, as the
    /// termination says) is due: not after the last possible round.
    pub(super) fn round_check_due(&self, r: u32) -> bool {
        self.round_complete(r)
            && r < self.round_cap()
            && self
                .state
                .budget
                .as_ref()
                .and_then(|b| b.final_round)
                .is_none_or(|f| r < f)
    }

    pub(super) fn round(&self, r: u32) -> Option<&DebateRound> {
        self.state.round(r)
    }

    /// Every agent has refined in round r.
    pub(super) fn round_complete(&self, r: u32) -> bool {
        self.round(r).is_some_and(|rd| {
            self.agents
                .iter()
                .all(|a| rd.find(ContributionType::Refinement, &a.id, None).is_some())
        })
    }

    /// Round r is the last: the hard cap, or the judge's confidence reached the threshold.
    pub(super) fn is_final_round(&self, r: u32) -> bool {
        if r >= self.round_cap() {
            return true;
        }
        if self
            .state
            .budget
            .as_ref()
            .and_then(|b| b.final_round)
            .is_some_and(|f| r >= f)
        {
            return true;
        }
        match self.termination() {
            TerminationType::Fixed => false,
            TerminationType::Verdict => self
                .round(r)
                .and_then(|rd| rd.verdict.as_ref())
                .is_some_and(|v| v.verdict.is_done_at(self.threshold())),
            TerminationType::Similarity => self
                .round(r)
                .and_then(|rd| rd.similarity.as_ref())
                .is_some_and(|s| s.converged),
            _ => self
                .round(r)
                .and_then(|rd| rd.evaluation.as_ref())
                .is_some_and(|e| {
                    e.confidence >= self.spec.debate.termination_condition.threshold()
                }),
        }
    }

    /// The (critic, target) pairs of round `r` under `debate.critique` (indices into the
    /// active agents). `all`: every ordered pair. `ring`: i critiques i+1 … i+k (mod n).
    /// `random`: k distinct targets per critic from a PRNG seeded by the debate id and the
    /// round (the same pairs after a resume or a takeover); then every agent that no critic
    /// drew gets one critic, drawn the same way.
    pub(super) fn critique_pairs(&self, r: u32) -> BTreeSet<(usize, usize)> {
        let n = self.agents.len();
        let mut pairs = BTreeSet::new();
        if n < 2 {
            return pairs;
        }
        let cfg = self.spec.debate.critique;
        let k = (cfg.k() as usize).clamp(1, n - 1);
        match cfg.topology {
            CritiqueTopology::All => {
                for i in 0..n {
                    for j in (0..n).filter(|&j| j != i) {
                        pairs.insert((i, j));
                    }
                }
            }
            CritiqueTopology::Ring => {
                for i in 0..n {
                    for d in 1..=k {
                        pairs.insert((i, (i + d) % n));
                    }
                }
            }
            CritiqueTopology::Random => {
                let mut rng = SplitMix64::seeded(&self.state.id, r);
                for i in 0..n {
                    let mut others: Vec<usize> = (0..n).filter(|&j| j != i).collect();
                    // A partial Fisher–Yates shuffle: the first k are the draw.
                    for d in 0..k {
                        let pick = d + rng.below(others.len() - d);
                        others.swap(d, pick);
                        pairs.insert((i, others[d]));
                    }
                }
                for j in 0..n {
                    if !pairs.iter().any(|&(_, t)| t == j) {
                        let critics: Vec<usize> = (0..n).filter(|&c| c != j).collect();
                        pairs.insert((critics[rng.below(critics.len())], j));
                    }
                }
            }
        }
        pairs
    }

    /// Inserts a contribution keeping a stable order: proposals, critiques, refinements,
    /// each in agent order (critiques by target order).
    pub(super) fn push_contribution(&mut self, r: u32, c: Contribution) {
        let order: BTreeMap<&str, usize> = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| (a.id.as_str(), i))
            .collect();
        let key = |c: &Contribution| {
            (
                c.kind,
                order
                    .get(c.agent_id.as_str())
                    .copied()
                    .unwrap_or(usize::MAX),
                c.target_agent_id
                    .as_deref()
                    .and_then(|t| order.get(t).copied())
                    .unwrap_or(0),
            )
        };
        let k = key(&c);
        // (`round_mut` would borrow all of `self`; `order` borrows the agents.)
        let Some(i) = r
            .checked_sub(1)
            .map(|i| i as usize)
            .filter(|i| *i < self.state.rounds.len())
        else {
            return;
        };
        self.revisions.touch(i);
        let rd = &mut self.state.rounds[i];
        let pos = rd.contributions.partition_point(|x| key(x) <= k);
        rd.contributions.insert(pos, c);
    }
}

/// A small deterministic PRNG (SplitMix64) for the random critique topology: seeded from
/// the debate id and the round, so every coordinator draws the same pairs.
struct SplitMix64(u64);

impl SplitMix64 {
    fn seeded(debate_id: &str, round: u32) -> Self {
        // FNV-1a over the id and the round: stable across builds and platforms.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in debate_id.bytes().chain(round.to_le_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Self(h)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` ≥ 1; the modulo bias is negligible for agent counts).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
