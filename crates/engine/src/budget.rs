//! Budgets: the worst case of a task, in tokens and dollars (pure, no I/O).
//!
//! A debate with a budget (`debate.budget`, tightened by the operator's caps) reserves the
//! worst case of every task before it is dispatched and settles the real usage when its
//! result arrives; the state machine keeps the ledger in the debate's state
//! ([`parley_protocol::BudgetRecord`]), checkpointed with every transition, so the
//! coordinator that owns the debate (one, by lease and compare-and-set) is the only writer
//! in a cluster and a crash loses nothing. A task sent again after a lost worker (a killed
//! process, a deadline) keeps the reservation it had: nothing leaks, nothing is counted
//! twice.
//!
//! The worst case of one call:
//! - prompt: the task's texts ([`Task::text_bytes`]) plus the template bound
//!   ([`limits::MAX_PROMPT_TEMPLATE_BYTES`]), a token per byte (a byte-level BPE token is
//!   at least one byte);
//! - completion: the call's cap ([`completion_cap`]), which the machine also writes into
//!   the task's `maxTokens` so the worker asks for no more;
//! - synthesis and evaluation may ask once more with a stricter JSON instruction (the
//!   first reply goes back into the prompt): two prompts and three completions.
//!
//! In dollars, the participant's price (provider/model, else model; `local` is free). A
//! dollar budget needs a price for every participant's model: a debate with one missing is
//! refused at submit ([`Pricing::unpriced`]).

use parley_protocol::{
    completion_cap, limits, AgentConfig, Amount, DebateSpec, ModelPrice, PriceTable, Task, TaskKind,
};

/// The operator's prices and completion cap, as budgets read them.
#[derive(Debug, Clone)]
pub struct Pricing {
    /// The price file and the config's inline prices.
    prices: PriceTable,
    /// The operator's `max_tokens`: the completion cap of a participant without one.
    operator_max_tokens: u32,
}

/// No prices, the default operator cap ([`limits::DEFAULT_MAX_TOKENS`]): what a machine
/// that was given no pricing reserves with (never a 1-token cap).
impl Default for Pricing {
    fn default() -> Self {
        Self::new(PriceTable::new(), limits::DEFAULT_MAX_TOKENS)
    }
}

impl Pricing {
    pub fn new(prices: PriceTable, operator_max_tokens: u32) -> Self {
        Self {
            prices,
            operator_max_tokens,
        }
    }

    /// The completion cap of `agent`'s calls.
    pub fn completion_cap(&self, agent: &AgentConfig) -> u32 {
        completion_cap(agent, self.operator_max_tokens.max(1))
    }

    /// `agent`'s price: its provider's entry for the model, else the model's; `local` (and
    /// a budget in tokens only) needs none.
    pub fn price_of(&self, agent: &AgentConfig) -> Option<ModelPrice> {
        match agent.provider.as_deref() {
            Some(p) => self.prices.price_of(p, &agent.model),
            None => self.prices.lookup("", &agent.model).copied(),
        }
    }

    /// Participants whose model has no price, as `field: model` (a dollar budget refuses
    /// them).
    pub fn unpriced(&self, spec: &DebateSpec) -> Vec<String> {
        let agents = spec
            .agents
            .iter()
            .enumerate()
            .filter(|(_, a)| a.is_enabled())
            .map(|(i, a)| (format!("agents[{i}]"), a));
        let embedder = spec
            .debate
            .embeddings
            .as_ref()
            .map(|e| e.as_agent(&spec.judge.id));
        agents
            .chain(std::iter::once(("judge".to_string(), &spec.judge)))
            .chain(
                embedder
                    .as_ref()
                    .map(|e| ("debate.embeddings".to_string(), e)),
            )
            .filter(|(_, a)| self.price_of(a).is_none())
            .map(|(f, a)| format!("{f}: {}", a.model))
            .collect()
    }

    /// Whether `agent`'s calls have a price (a dollar budget can reserve them).
    pub fn priced(&self, agent: &AgentConfig) -> bool {
        self.price_of(agent).is_some()
    }

    /// The most `task` can spend.
    pub fn worst_case(&self, task: &Task) -> Amount {
        let prompt = task
            .text_bytes()
            .saturating_add(limits::MAX_PROMPT_TEMPLATE_BYTES);
        let completion = u64::from(self.completion_cap(&task.agent));
        let (prompt, completion) = match task.kind {
            // A stricter second ask carries the first reply in its prompt.
            TaskKind::Synthesize | TaskKind::Evaluate | TaskKind::Verdict => (
                prompt.saturating_mul(2).saturating_add(completion),
                completion.saturating_mul(2),
            ),
            // Embeddings: the texts are the prompt, there is no completion.
            TaskKind::Embed => (task.text_bytes(), 0),
            _ => (prompt, completion),
        };
        // Unpriced: 0 here, and [`Self::priced`] says a dollar budget cannot take it.
        let usd = self
            .price_of(&task.agent)
            .map_or(0.0, |p| p.cost(prompt, 0, completion));
        Amount {
            usd,
            tokens: prompt.saturating_add(completion),
        }
    }
}

/// Fixes a submitted debate's budget before it is accepted: its own `debate.budget`
/// tightened by the operator's `caps` (which alone apply when it sets none) is written into
/// the spec. Refused, with the figures: a dollar budget with an unpriced participant, and
/// a budget below [`crate::Machine::minimum_reservation`] (the synthesis held back and
/// every round-1 proposal, worst case).
pub fn admit(
    spec: &mut DebateSpec,
    caps: &parley_protocol::Budget,
    pricing: &Pricing,
) -> Result<(), String> {
    spec.debate.budget = spec.effective_budget(caps);
    let Some(budget) = spec.debate.budget else {
        return Ok(());
    };
    if budget.usd.is_some() {
        let unpriced = pricing.unpriced(spec);
        if !unpriced.is_empty() {
            return Err(format!(
                "debate.budget.usd: no price for {} (a dollar budget needs the operator's \
                 price of every participant's model)",
                unpriced.join(", ")
            ));
        }
    }
    let mut m = crate::Machine::new(
        "deb-20000101-000000-budget".into(),
        spec.clone(),
        chrono::Utc::now(),
    );
    m.set_pricing(pricing.clone());
    let need = m.minimum_reservation();
    if !need.within(&budget) {
        let limit = [
            budget.usd.map(|u| format!("${u}")),
            budget.tokens.map(|t| format!("{t} tokens")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" / ");
        return Err(format!(
            "debate.budget: the smallest run of this debate reserves up to {} tokens / ${:.6} \
             before its first call (the synthesis held back and {} round-1 proposal(s), \
             worst case), over its budget of {limit}",
            need.tokens,
            need.usd,
            spec.active_agents().count()
        ));
    }
    Ok(())
}
