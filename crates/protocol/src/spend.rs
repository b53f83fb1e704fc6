//! What a debate spent ([`Spend`]) and its budget ([`Budget`], [`BudgetRecord`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{add_cost, ContributionMetadata, DebateState};

/// One participant's spend.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParticipantSpend {
    /// LLM calls made (carried-over proposals are not calls).
    pub calls: u64,
    pub tokens: u64,
    /// Dollars; absent when any of the calls had no price (unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl ParticipantSpend {
    fn add(&mut self, tokens: u64, cost: Option<f64>) {
        self.cost_usd = if self.calls == 0 {
            cost
        } else {
            add_cost(self.cost_usd, cost)
        };
        self.calls += 1;
        self.tokens += tokens;
    }
}

/// Tokens and dollars a debate has spent, per participant (agents and the judge) and in
/// total.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spend {
    pub calls: u64,
    pub total_tokens: u64,
    /// Dollars; absent when any call had no price (unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Participant id → its spend.
    pub participants: BTreeMap<String, ParticipantSpend>,
}

impl Spend {
    /// Adds one call of `participant`.
    pub fn add(&mut self, participant: &str, tokens: u64, cost: Option<f64>) {
        self.participants
            .entry(participant.to_string())
            .or_default()
            .add(tokens, cost);
        self.cost_usd = if self.calls == 0 {
            cost
        } else {
            add_cost(self.cost_usd, cost)
        };
        self.calls += 1;
        self.total_tokens += tokens;
    }

    /// Tallies every call recorded in `state`; the judge's calls (evaluations, verdicts, its
    /// summary, the synthesis) count for `judge_id`; votes for their agents.
    pub fn of(state: &DebateState, judge_id: &str) -> Self {
        let mut s = Self::default();
        // A carried-over proposal or a person's contribution is no call.
        let mut meta = |who: &str, m: &ContributionMetadata| {
            if !m.carried_over && !m.human {
                s.add(who, m.tokens_used, m.cost_usd);
            }
        };
        for r in &state.rounds {
            for c in &r.contributions {
                meta(&c.agent_id, &c.metadata);
            }
            if let Some(e) = &r.evaluation {
                meta(judge_id, &e.metadata);
            }
            if let Some(v) = &r.verdict {
                meta(judge_id, &v.metadata);
            }
            if let Some(e) = &r.similarity {
                meta(judge_id, &e.metadata);
            }
        }
        if let Some(m) = state.adaptive.as_ref().and_then(|a| a.metadata()) {
            meta(judge_id, m);
        }
        if let Some(v) = &state.voting {
            for b in &v.votes {
                meta(&b.agent_id, &b.metadata);
            }
        }
        if let Some(m) = &state.synthesis_metadata {
            meta(judge_id, m);
        }
        for r in &state.rounds {
            for (id, sm) in &r.summaries {
                s.add(id, sm.metadata.tokens_used, sm.metadata.cost_usd);
            }
        }
        if let Some(j) = &state.judge_summary {
            s.add(judge_id, j.metadata.tokens_used, j.metadata.cost_usd);
        }
        s
    }
}

/// `debate.budget`: the most a debate may spend, in dollars, in tokens, or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

/// The largest dollar budget taken (a typo guard).
pub const MAX_BUDGET_USD: f64 = 1_000_000.0;
/// The largest token budget taken.
pub const MAX_BUDGET_TOKENS: u64 = 10_000_000_000;

impl Budget {
    /// Problems with the figures (negative, zero, NaN, absurd), each naming `field.<name>`.
    pub fn problems(&self, field: &str) -> Vec<crate::SpecError> {
        let mut out = Vec::new();
        if self.usd.is_none() && self.tokens.is_none() {
            out.push(crate::SpecError::new(field, "give usd, tokens or both"));
        }
        if let Some(u) = self.usd {
            if !(u.is_finite() && u > 0.0 && u <= MAX_BUDGET_USD) {
                out.push(crate::SpecError::new(
                    format!("{field}.usd"),
                    format!("{u} is not a budget (more than 0, at most {MAX_BUDGET_USD} dollars)"),
                ));
            }
        }
        if let Some(t) = self.tokens {
            if !(1..=MAX_BUDGET_TOKENS).contains(&t) {
                out.push(crate::SpecError::new(
                    format!("{field}.tokens"),
                    format!("{t} is not a budget (1 to {MAX_BUDGET_TOKENS} tokens)"),
                ));
            }
        }
        out
    }

    /// The tighter of two budgets, figure by figure.
    pub fn tighter(self, other: Budget) -> Budget {
        fn min<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(if b < a { b } else { a }),
                (a, b) => a.or(b),
            }
        }
        Budget {
            usd: min(self.usd, other.usd),
            tokens: min(self.tokens, other.tokens),
        }
    }
}

/// Dollars and tokens together (a reservation, what was spent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Amount {
    pub usd: f64,
    pub tokens: u64,
}

impl Amount {
    pub fn plus(self, o: Amount) -> Amount {
        Amount {
            usd: self.usd + o.usd,
            tokens: self.tokens.saturating_add(o.tokens),
        }
    }
    pub fn minus(self, o: Amount) -> Amount {
        let usd = self.usd - o.usd;
        Amount {
            // Float sums leave crumbs: below a nano-dollar is nothing.
            usd: if usd < 1e-9 { 0.0 } else { usd },
            tokens: self.tokens.saturating_sub(o.tokens),
        }
    }
    /// Whether this amount stays within `limit` (a figure the limit does not set is free).
    pub fn within(self, limit: &Budget) -> bool {
        // A hair of tolerance for float sums; prices are far above it.
        limit.usd.is_none_or(|u| self.usd <= u + 1e-12)
            && limit.tokens.is_none_or(|t| self.tokens <= t)
    }
}

/// One step of the degradation order a debate under budget pressure took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Degradation {
    /// `dropCritiques`, `noNewRound`, `skipSummaries`, `synthesizeNow`.
    pub step: String,
    pub round: u32,
    /// What was given up (task ids), when any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<String>,
    pub at: DateTime<Utc>,
}

/// A debate's budget as kept: the limit, what was spent and is reserved, and the
/// degradations it took.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRecord {
    pub limit: Budget,
    pub spent: Amount,
    /// What the calls in flight are reserved for (prompt bound and fitted completion cap)
    /// plus the synthesis held back from the start.
    pub reserved: Amount,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<Degradation>,
    /// The synthesis held back from the start (part of `reserved`); taken over by the
    /// synthesis's own reservation when it is dispatched.
    #[serde(default)]
    pub hold: Amount,
    /// Task id → what is reserved for it while it is outstanding (part of
    /// `reserved`); released when its result is settled or the task is given up. A task
    /// re-dispatched after a lost worker keeps its reservation, so nothing leaks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reservations: BTreeMap<String, Amount>,
    /// Summaries skipped for the budget (task ids): their agents go on with the full
    /// history.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub skipped: std::collections::BTreeSet<String>,
    /// No round opens after this one (`noNewRound`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_round: Option<u32>,
    /// Synthesize with what exists, as soon as the calls in flight are back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub synthesize_now: bool,
    /// Task id → the completion cap (`maxTokens`) its reservation was fitted to, while it
    /// is outstanding: a task sent again asks for the same.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub caps: BTreeMap<String, u32>,
    /// Calls that used more than was reserved for them (a provider that returned more than
    /// the `maxTokens` asked for): later calls are fitted to what is really left.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overruns: Vec<Overrun>,
}

/// A call that used more than its reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overrun {
    pub task_id: String,
    /// The completion cap the call asked for.
    pub max_tokens: u32,
    pub reserved: Amount,
    pub used: Amount,
}

impl BudgetRecord {
    /// What is left once spent and reserved are taken off the limit, per figure the limit
    /// sets (never below zero).
    pub fn left(&self) -> Budget {
        let taken = self.spent.plus(self.reserved);
        Budget {
            usd: self.limit.usd.map(|u| (u - taken.usd).max(0.0)),
            tokens: self.limit.tokens.map(|t| t.saturating_sub(taken.tokens)),
        }
    }
}

impl BudgetRecord {
    /// Whether `extra` more fits next to what is spent and reserved.
    pub fn fits(&self, extra: Amount) -> bool {
        self.spent
            .plus(self.reserved)
            .plus(extra)
            .within(&self.limit)
    }
}
