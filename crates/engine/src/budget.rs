//! Budgets: what a call may cost, fitted to what the budget has left (pure, no I/O).
//!
//! A debate with a budget (`debate.budget`, tightened by the operator's caps) reserves
//! every call before it is dispatched and settles the real usage when its result arrives;
//! the state machine keeps the ledger in the debate's state
//! ([`parley_protocol::BudgetRecord`]), checkpointed with every transition, so the
//! coordinator that owns the debate (one, by lease and compare-and-set) is the only writer
//! in a cluster and a crash loses nothing. A task sent again after a lost worker (a killed
//! process, a deadline) or a failed attempt keeps the reservation and the completion cap it
//! had: nothing leaks, nothing is counted twice.
//!
//! # One call's reservation
//! - **prompt**: counted with the model's own tokenizer where Parley has one (OpenAI
//!   families, see [`crate::tokens`]): every text of the task ([`Task::for_each_text`]) in
//!   tokens, [`TEXT_MARGIN_TOKENS`] beside each (a text's edges may tokenize differently
//!   inside the prompt), plus its kind's template bound in tokens ([`template_tokens`]).
//!   Every other model (the local model included: its tokenizer lives in the process that
//!   runs it, not where budgets are fitted) at a token per byte of the task's texts
//!   ([`Task::text_bytes`]) plus the template bound in bytes ([`template_bytes`]: the
//!   built-in role and judge prompts, the templates, the chat format): a token of any
//!   byte-level BPE (or SentencePiece with byte fallback) covers at least one byte, so
//!   that bound holds whatever the tokenizer (an English prompt is about a quarter of it in
//!   real tokens). What a bound over-counts is given back when the call settles.
//! - **completion**: the cap the machine fits and writes into the task's `maxTokens`: the
//!   participant's cap (its `maxTokens`, else the operator's `max_tokens`), at most what
//!   the budget has left for the call (see the machine's budget concern for the share), at
//!   least the kind's floor ([`completion_floor`]). A call whose cap would fall under its
//!   floor is not dispatched: it waits while other calls are out (they may give room
//!   back), else the debate degrades.
//! - Under a budget the judge asks once ([`parley_protocol::TaskInput::single_ask`]): no
//!   stricter second ask for JSON, which the reservation would not cover.
//!
//! In dollars, the participant's price (provider/model, else model; `local` is free). A
//! dollar budget needs a price for every participant's model: a debate with one missing is
//! refused at submit ([`Pricing::unpriced`]).

use parley_protocol::{
    completion_cap, AgentConfig, Amount, Budget, DebateSpec, ModelPrice, PriceTable, Task, TaskKind,
};

/// The fewest completion tokens a call is dispatched with (a proposal, a critique, a
/// refinement, a summary, a judge's verdict: room to say something, about 75 words).
pub const MIN_COMPLETION_TOKENS: u32 = 96;

/// The fewest completion tokens the synthesis is dispatched with (a short solution in the
/// JSON shape asked for).
pub const MIN_SYNTHESIS_TOKENS: u32 = 192;

/// The kind's completion floor: [`MIN_SYNTHESIS_TOKENS`] for the synthesis, 0 for an
/// embedding (no completion), else [`MIN_COMPLETION_TOKENS`].
pub fn completion_floor(kind: TaskKind) -> u32 {
    match kind {
        TaskKind::Synthesize => MIN_SYNTHESIS_TOKENS,
        TaskKind::Embed => 0,
        _ => MIN_COMPLETION_TOKENS,
    }
}

/// Bytes a worker's prompt for a task of `kind` adds around the task's own texts: the
/// built-in role prompt (when the participant sets none), the kind's template and
/// instructions, and 8 bytes a message for the chat format. The agent and judge workers'
/// tests (`crates/cli/tests/prompt_bound.rs`) check every role's and kind's prompt stays
/// within it.
pub fn template_bytes(kind: TaskKind) -> u64 {
    match kind {
        TaskKind::Embed => 0,
        TaskKind::Synthesize => 2_560,
        _ => 2_048,
    }
}

/// Tokens counted beside each text of a prompt counted with a tokenizer: where a text
/// meets the template, the two may tokenize into a token more than apart.
pub const TEXT_MARGIN_TOKENS: u64 = 2;

/// Tokens a worker's prompt for a task of `kind` adds around the task's own texts, for a
/// model counted with its tokenizer: half of [`template_bytes`] (an English template is
/// about a quarter of its bytes in tokens; the chat format's few tokens a message are
/// included). `crates/cli/tests/prompt_bound.rs` checks every role's and kind's prompt,
/// counted with each OpenAI tokenizer, stays within the bound.
pub fn template_tokens(kind: TaskKind) -> u64 {
    template_bytes(kind) / 2
}

/// The operator's prices and completion cap, as budgets read them.
#[derive(Debug, Clone)]
pub struct Pricing {
    /// The price file and the config's inline prices.
    prices: PriceTable,
    /// The operator's `max_tokens`: the completion cap of a participant without one.
    operator_max_tokens: u32,
    /// Prompt token counts, memoized (a debate counts the same texts at every step).
    counter: crate::tokens::TokenCounter,
}

/// No prices, the default operator cap ([`parley_protocol::limits::DEFAULT_MAX_TOKENS`]):
/// what a machine that was given no pricing reserves with (never a 1-token cap).
impl Default for Pricing {
    fn default() -> Self {
        Self::new(
            PriceTable::new(),
            parley_protocol::limits::DEFAULT_MAX_TOKENS,
        )
    }
}

impl Pricing {
    pub fn new(prices: PriceTable, operator_max_tokens: u32) -> Self {
        Self {
            prices,
            operator_max_tokens,
            counter: Default::default(),
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

    /// The bound of `task`'s prompt in tokens (see the module docs): its texts with the
    /// model's tokenizer and its kind's template in tokens, else a token per byte of its
    /// texts and its kind's template (an embedding: a token per byte of its texts).
    pub fn prompt_bound(&self, task: &Task) -> u64 {
        let enc = crate::tokens::Encoding::of_model(&task.agent.model);
        match enc.filter(|_| task.kind != TaskKind::Embed) {
            Some(enc) => {
                let mut total = template_tokens(task.kind);
                task.for_each_text(&mut |text, extra| {
                    if !text.is_empty() || extra > 0 {
                        total = total.saturating_add(
                            self.counter.count(enc, text) + extra + TEXT_MARGIN_TOKENS,
                        );
                    }
                });
                total
            }
            None => task.text_bytes().saturating_add(template_bytes(task.kind)),
        }
    }

    /// What one call of `task` costs with this prompt and completion (an unpriced call:
    /// 0 dollars, and [`Self::priced`] says a dollar budget cannot take it).
    pub fn amount(&self, task: &Task, prompt: u64, completion: u64) -> Amount {
        let usd = self
            .price_of(&task.agent)
            .map_or(0.0, |p| p.cost(prompt, 0, completion));
        Amount {
            usd,
            tokens: prompt.saturating_add(completion),
        }
    }

    /// The most completion tokens of `task` (with `prompt` tokens of prompt) that fit in
    /// `room` (each figure it sets), at most the participant's cap; 0 when not even the
    /// prompt fits. An embedding has no completion: its cap is 0.
    pub fn fit(&self, task: &Task, prompt: u64, room: Budget) -> u32 {
        if task.kind == TaskKind::Embed {
            return 0;
        }
        let cap = u64::from(self.completion_cap(&task.agent));
        let mut most = cap;
        if let Some(t) = room.tokens {
            most = most.min(t.saturating_sub(prompt));
        }
        if let Some(u) = room.usd {
            let price = self.price_of(&task.agent).unwrap_or(ModelPrice {
                input_cost_per_token: 0.0,
                output_cost_per_token: 0.0,
                cache_read_input_token_cost: None,
                max_input_tokens: None,
                max_output_tokens: None,
            });
            let after_prompt = u - prompt as f64 * price.input_cost_per_token;
            if after_prompt < 0.0 {
                return 0;
            }
            if price.output_cost_per_token > 0.0 {
                // Rounded down, and a hair under for float sums.
                let n = (after_prompt / price.output_cost_per_token * (1.0 - 1e-9)).floor();
                most = most.min(if n.is_finite() && n >= 0.0 {
                    n as u64
                } else {
                    0
                });
            }
        }
        u32::try_from(most).unwrap_or(u32::MAX)
    }
}

/// `b` scaled by `f` (each figure it sets).
pub(crate) fn scaled(b: Budget, f: f64) -> Budget {
    Budget {
        usd: b.usd.map(|u| u * f),
        tokens: b.tokens.map(|t| (t as f64 * f) as u64),
    }
}

/// `a` less `b`, per figure `a` sets (never below zero).
pub(crate) fn less(a: Budget, b: Amount) -> Budget {
    Budget {
        usd: a.usd.map(|u| (u - b.usd).max(0.0)),
        tokens: a.tokens.map(|t| t.saturating_sub(b.tokens)),
    }
}

/// `a` plus `b`, per figure `a` sets.
pub(crate) fn more(a: Budget, b: Amount) -> Budget {
    Budget {
        usd: a.usd.map(|u| u + b.usd),
        tokens: a.tokens.map(|t| t.saturating_add(b.tokens)),
    }
}

/// Why [`admit`] refuses a debate's budget (the message names the figures).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdmitError {
    /// A dollar budget with participants whose model has no price.
    #[error(
        "debate.budget.usd: no price for {} (a dollar budget needs the operator's price of \
         every participant's model)",
        .models.join(", ")
    )]
    Unpriced { models: Vec<String> },
    /// The budget is below the smallest run of the debate.
    #[error(
        "debate.budget: the smallest run of this debate needs up to {need_tokens} tokens / \
         ${need_usd:.6} ({agents} round-1 proposal(s) at {MIN_COMPLETION_TOKENS} completion \
         tokens and the synthesis at {MIN_SYNTHESIS_TOKENS}, prompts counted with the model's \
         tokenizer or at a token per byte), over its budget of {limit}"
    )]
    BelowMinimum {
        need_tokens: u64,
        need_usd: f64,
        agents: usize,
        /// The budget as set (`$0.5 / 20000 tokens`).
        limit: String,
    },
}

/// Fixes a submitted debate's budget before it is accepted: its own `debate.budget`
/// tightened by the operator's `caps` (which alone apply when it sets none) is written into
/// the spec. Refused, with the figures: a dollar budget with an unpriced participant, and
/// a budget below [`crate::Machine::minimum_reservation`] (every round-1 proposal and the
/// synthesis, each at its completion floor). Nothing else is refused: a larger budget
/// runs, fitting its calls to what is left and degrading when they no longer fit.
pub fn admit(
    spec: &mut DebateSpec,
    caps: &parley_protocol::Budget,
    pricing: &Pricing,
) -> Result<(), AdmitError> {
    spec.debate.budget = spec.effective_budget(caps);
    let Some(budget) = spec.debate.budget else {
        return Ok(());
    };
    if budget.usd.is_some() {
        let unpriced = pricing.unpriced(spec);
        if !unpriced.is_empty() {
            return Err(AdmitError::Unpriced { models: unpriced });
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
        return Err(AdmitError::BelowMinimum {
            need_tokens: need.tokens,
            need_usd: need.usd,
            agents: spec.active_agents().count(),
            limit,
        });
    }
    Ok(())
}
