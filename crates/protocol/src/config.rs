//! The debate configuration, dialectic-compatible (`debate-config.json`).
//!
//! Unknown keys are rejected (`deny_unknown_fields`) so a typo such as `"temprature"` is an
//! error that names the key instead of a silently ignored setting.
//!
//! The types derive `JsonSchema` (schemars): [`debate_config_schema`] is the JSON Schema of
//! the file, committed as `docs/src/reference/debate-config.schema.json` (a test keeps it
//! current), which an editor validates a `debate-config.json` with through its `"$schema"`
//! key. The schema follows serde's attributes, so it names the keys the loader takes; the
//! checks that span fields (see `validate`) stay with the loader.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// Provider names a participant may choose. What each means (endpoint, key, limits) is the
/// operator's configuration, never the submission's.
pub const KNOWN_PROVIDERS: &[&str] = &["openai", "openrouter", "openai-compatible", "local"];

/// The `provider` of a human participant: an agent whose turns a person takes (see
/// [`crate::human`]). Not an operator's provider: it has no model, endpoint or key, and
/// the judge cannot be one.
pub const HUMAN_PROVIDER: &str = "human";

/// Built-in roles; any other role string is accepted and uses the architect prompts.
pub const KNOWN_ROLES: &[&str] = &[
    "architect",
    "performance",
    "security",
    "testing",
    "kiss",
    "generalist",
    "datamodeling",
];

/// One debating agent (or the judge).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentConfig {
    pub id: String,
    pub name: String,
    pub role: String,
    /// The model; empty (or absent) only for a human participant (`provider: "human"`).
    #[serde(default)]
    pub model: String,
    /// `openai`, `openrouter`, `openai-compatible` (needs `baseUrl`) or `local`; `None` picks
    /// the default provider (openai when `OPENAI_API_KEY` is set, else local). `human`: a
    /// person takes this agent's turns (see [`HUMAN_PROVIDER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default = "default_temperature")]
    pub temperature: f64,
    /// OpenAI-compatible endpoint for this agent (overrides the global `baseUrl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Path as written in the config file; resolved by the CLI, never opened by services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_prompt_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clarification_prompt_path: Option<String>,
    /// Prompt texts resolved from the paths above (what services actually use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<crate::SharedText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_prompt: Option<crate::SharedText>,
    /// The clarification prompt text (from `clarificationPromptPath`); none: the role's
    /// built-in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clarification_prompt: Option<crate::SharedText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarization: Option<SummarizationConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Tools the agent may call during its tasks (dialectic's `tools: [{name}]`), see
    /// [`TOOL_NAMES`]. The judge calls none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolRef>,
    /// Most tool calls in one task (dialectic's `toolCallLimit`, default
    /// [`DEFAULT_TOOL_CALL_LIMIT`], at most [`crate::limits::MAX_TOOL_CALL_LIMIT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_limit: Option<u32>,
    /// Judge only: `true` makes a judge that shares an agent's model (or agents that all
    /// share one model) a configuration error instead of a warning (see
    /// [`crate::independence_problems`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recuse: Option<bool>,
}

/// The tools an agent may name in `tools`: a search over the debate history and the
/// context snapshot, reading one snapshot file, listing the snapshot's paths.
pub const TOOL_NAMES: &[&str] = &["context_search", "file_read", "list_files"];

/// `toolCallLimit` when the config sets none (dialectic's default).
pub const DEFAULT_TOOL_CALL_LIMIT: u32 = 10;

/// One entry of an agent's `tools` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolRef {
    pub name: String,
}

fn default_temperature() -> f64 {
    0.5
}

impl AgentConfig {
    /// A person takes this participant's turns (`provider: "human"`).
    pub fn is_human(&self) -> bool {
        self.provider.as_deref() == Some(HUMAN_PROVIDER)
    }

    /// A participant with only its identity, model and temperature set; every optional
    /// setting (provider, endpoint, prompts, ...) unset, to be filled in by the caller.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        role: impl Into<String>,
        model: impl Into<String>,
        temperature: f64,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            role: role.into(),
            model: model.into(),
            provider: None,
            temperature,
            base_url: None,
            max_tokens: None,
            system_prompt_path: None,
            summary_prompt_path: None,
            clarification_prompt_path: None,
            system_prompt: None,
            summary_prompt: None,
            clarification_prompt: None,
            summarization: None,
            enabled: None,
            tools: Vec::new(),
            tool_call_limit: None,
            recuse: None,
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    /// The tool call limit in effect (`toolCallLimit` or the default).
    pub fn tool_call_limit(&self) -> u32 {
        self.tool_call_limit.unwrap_or(DEFAULT_TOOL_CALL_LIMIT)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TerminationType {
    Fixed,
    Convergence,
    Quality,
    /// After each round the judge gives a structured verdict (`done`/`continue`, confidence,
    /// open issues); the debate stops at `done` with confidence ≥ `threshold`.
    Verdict,
    /// After each round every agent's refinement is embedded (`debate.embeddings`); the
    /// debate stops when each agent's refinement is at least `threshold` (0–1, cosine)
    /// similar to its previous round's.
    Similarity,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TerminationCondition {
    #[serde(rename = "type")]
    pub kind: TerminationType,
    /// Judge confidence (0–100) at which `convergence` / `quality` / `verdict` stop early;
    /// for `similarity` the cosine similarity (0–1) every agent's refinement must reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// `verdict` only: the most rounds the debate runs when the judge never says done. When
    /// set it replaces `debate.rounds` as the cap (see [`DebateSettings::round_cap`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<u32>,
}

impl Default for TerminationCondition {
    fn default() -> Self {
        Self {
            kind: TerminationType::Fixed,
            threshold: None,
            max_rounds: None,
        }
    }
}

impl TerminationCondition {
    pub const DEFAULT_THRESHOLD: f64 = 80.0;
    /// The default of `similarity` (cosine, 0–1).
    pub const DEFAULT_SIMILARITY_THRESHOLD: f64 = 0.95;
    pub fn threshold(&self) -> f64 {
        self.threshold.unwrap_or(match self.kind {
            TerminationType::Similarity => Self::DEFAULT_SIMILARITY_THRESHOLD,
            _ => Self::DEFAULT_THRESHOLD,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SummarizationConfig {
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Perspective history length (chars) above which an agent gets a summary.
    #[serde(default = "default_summary_threshold")]
    pub threshold: usize,
    /// Summaries are cut to this many chars.
    #[serde(default = "default_summary_max_length")]
    pub max_length: usize,
    #[serde(default = "default_summary_method")]
    pub method: String,
}

fn default_true() -> bool {
    true
}
fn default_summary_threshold() -> usize {
    5000
}
fn default_summary_max_length() -> usize {
    2500
}
fn default_summary_method() -> String {
    "length-based".into()
}

impl Default for SummarizationConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: default_summary_threshold(),
            max_length: default_summary_max_length(),
            method: default_summary_method(),
        }
    }
}

/// Node-level retry policy for one kind of node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    /// Total attempts including the first.
    #[serde(default = "default_attempts")]
    pub attempts: u32,
    #[serde(default = "default_backoff_ms")]
    pub initial_backoff_ms: u64,
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
    /// Timeout of one attempt (one LLM call plus its bookkeeping).
    #[serde(default = "default_task_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_attempts() -> u32 {
    3
}
fn default_backoff_ms() -> u64 {
    500
}
fn default_max_backoff_ms() -> u64 {
    30_000
}
fn default_task_timeout_ms() -> u64 {
    300_000
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: default_attempts(),
            initial_backoff_ms: default_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
            timeout_ms: default_task_timeout_ms(),
        }
    }
}

impl RetryPolicy {
    /// Backoff before attempt `next_attempt` (2, 3, ...), before jitter (see
    /// [`crate::retry`]).
    pub fn backoff_ms(&self, next_attempt: u32) -> u64 {
        crate::retry::exponential_ms(
            self.initial_backoff_ms,
            self.max_backoff_ms,
            next_attempt.saturating_sub(2),
        )
    }
}

/// Retry policies per node kind; a kind without an entry uses `default`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicies {
    #[serde(default)]
    pub default: RetryPolicy,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nodes: BTreeMap<String, RetryPolicy>,
}

impl RetryPolicies {
    pub fn for_node(&self, node: &str) -> &RetryPolicy {
        self.nodes.get(node).unwrap_or(&self.default)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DebateSettings {
    #[serde(default = "default_rounds")]
    pub rounds: u32,
    #[serde(default)]
    pub termination_condition: TerminationCondition,
    /// How the debate's solution is made: `judge`, `merge` or `voting` (see
    /// [`SYNTHESIS_METHODS`]).
    #[serde(default = "default_synthesis")]
    #[schemars(extend("enum" = ["judge", "merge", "voting"]))]
    pub synthesis_method: String,
    #[serde(default = "default_true")]
    pub include_full_history: bool,
    /// Milliseconds; kept for dialectic compatibility (per-task timeouts come from `retry`).
    #[serde(default = "default_timeout_per_round")]
    pub timeout_per_round: u64,
    #[serde(default)]
    pub summarization: SummarizationConfig,
    #[serde(default)]
    pub interactive_clarifications: bool,
    #[serde(default = "default_clarifications_max")]
    pub clarifications_max_per_agent: u32,
    #[serde(default = "default_clarifications_iterations")]
    pub clarifications_max_iterations: u32,
    #[serde(default)]
    pub retry: RetryPolicies,
    /// Upper bound on concurrently running tasks of one debate (embedded mode).
    #[serde(default = "default_max_concurrency")]
    pub max_concurrency: usize,
    /// What a critique whose retry budget is spent does (dialectic's `onAgentFailure`).
    #[serde(default)]
    pub on_agent_failure: OnAgentFailure,
    /// The most the debate may spend (dollars, tokens or both); see [`crate::Budget`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::Budget>,
    /// `debate` (default): every debate runs its rounds. `adaptive`: the judge gives a
    /// verdict on the round-1 proposals first; when they already agree (done at the
    /// threshold) it synthesizes at once, otherwise the debate goes on as configured.
    #[serde(default, skip_serializing_if = "DebateMode::is_default")]
    pub mode: DebateMode,
    /// Who critiques whom each round (default: every agent every other).
    #[serde(default, skip_serializing_if = "CritiqueConfig::is_default")]
    pub critique: CritiqueConfig,
    /// Where `similarity` termination gets its embeddings: a provider and model resolved
    /// like an agent's (the operator's endpoints and keys; never a participant's URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<EmbeddingsConfig>,
    /// Seconds a human participant's task waits for its answer (default
    /// [`crate::DEFAULT_HUMAN_DEADLINE_SECS`], 30 minutes); past it the task is a failed
    /// agent task (see [`crate::human`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_deadline_secs: Option<u64>,
}

impl DebateSettings {
    /// How long a human participant's task waits for its answer.
    pub fn human_deadline(&self) -> std::time::Duration {
        std::time::Duration::from_secs(
            self.human_deadline_secs
                .unwrap_or(crate::DEFAULT_HUMAN_DEADLINE_SECS),
        )
    }
}

/// `debate.embeddings`: the provider and model that embed refinements (`POST
/// /v1/embeddings`). The local model has no embedding mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EmbeddingsConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    pub model: String,
}

impl EmbeddingsConfig {
    /// The embedder as a participant the provider registry resolves, under `id` (the
    /// judge's: its worker runs the embedding task).
    pub fn as_agent(&self, id: &str) -> AgentConfig {
        let mut a = AgentConfig::new(id, "embeddings", "embeddings", self.model.clone(), 0.0);
        a.provider = self.provider.clone();
        a
    }
}

/// Who critiques whom (`debate.critique`): `all` (every agent every other, N×(N−1) a
/// round), `ring` (agent i critiques the next `k` agents in configuration order, default 1)
/// or `random` (`k` distinct targets per critic, default 1, drawn from a PRNG seeded by the
/// debate id and the round, so a resume or a takeover plans the same pairs). Whatever the
/// topology, every agent receives at least one critique a round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CritiqueConfig {
    #[serde(default)]
    pub topology: CritiqueTopology,
    /// Targets per critic (`ring` and `random`; at least 1, at most agents − 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<u32>,
}

impl CritiqueConfig {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
    /// Targets per critic for a sparse topology (1 when `k` is unset).
    pub fn k(&self) -> u32 {
        self.k.unwrap_or(1)
    }
}

/// A value of a field that takes one of a few words (`debate.mode`,
/// `debate.critique.topology`) that is none of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: unknown value {value:?} (expected one of: {})", expected.join(", "))]
pub struct UnknownValue {
    /// The field's path (`debate.mode`).
    pub field: &'static str,
    /// The value given, clipped to 40 characters.
    pub value: String,
    /// The values the field takes.
    pub expected: &'static [&'static str],
}

impl UnknownValue {
    fn new(field: &'static str, value: &str, expected: &'static [&'static str]) -> Self {
        Self {
            field,
            value: crate::preview(value, 40),
            expected,
        }
    }
}

/// The allowed values of `debate.mode`.
pub const DEBATE_MODES: &[&str] = &["debate", "adaptive"];

/// `debate.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum DebateMode {
    #[default]
    Debate,
    Adaptive,
}

impl TryFrom<String> for DebateMode {
    type Error = UnknownValue;
    fn try_from(v: String) -> Result<Self, UnknownValue> {
        match v.as_str() {
            "debate" => Ok(Self::Debate),
            "adaptive" => Ok(Self::Adaptive),
            _ => Err(UnknownValue::new("debate.mode", &v, DEBATE_MODES)),
        }
    }
}

impl JsonSchema for DebateMode {
    fn schema_name() -> Cow<'static, str> {
        "DebateMode".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        string_enum(DEBATE_MODES)
    }
}

impl DebateMode {
    fn is_default(&self) -> bool {
        *self == Self::Debate
    }
}

/// The allowed values of `debate.synthesisMethod`: `judge` and `merge` (the judge
/// synthesizes from the debate), `voting` (every agent votes for the best final refinement
/// other than its own; the judge writes the solution from the winner).
pub const SYNTHESIS_METHODS: &[&str] = &["judge", "merge", "voting"];

impl DebateSettings {
    /// The most rounds the debate runs: `terminationCondition.maxRounds` when set (verdict
    /// termination), else `rounds`.
    pub fn round_cap(&self) -> u32 {
        self.termination_condition.max_rounds.unwrap_or(self.rounds)
    }

    /// `synthesisMethod: "voting"`.
    pub fn voting(&self) -> bool {
        self.synthesis_method == "voting"
    }
}

/// The allowed values of `debate.critique.topology`.
pub const CRITIQUE_TOPOLOGIES: &[&str] = &["all", "ring", "random"];

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum CritiqueTopology {
    #[default]
    All,
    Ring,
    Random,
}

impl TryFrom<String> for CritiqueTopology {
    type Error = UnknownValue;
    fn try_from(v: String) -> Result<Self, UnknownValue> {
        match v.as_str() {
            "all" => Ok(Self::All),
            "ring" => Ok(Self::Ring),
            "random" => Ok(Self::Random),
            _ => Err(UnknownValue::new(
                "debate.critique.topology",
                &v,
                CRITIQUE_TOPOLOGIES,
            )),
        }
    }
}

impl JsonSchema for CritiqueTopology {
    fn schema_name() -> Cow<'static, str> {
        "CritiqueTopology".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        string_enum(CRITIQUE_TOPOLOGIES)
    }
}

/// The schema of a string that takes one of `values` (the enums read through
/// `TryFrom<String>`, whose own schema would be any string).
fn string_enum(values: &[&str]) -> Schema {
    schemars::json_schema!({ "type": "string", "enum": values })
}

/// What happens when a critique's retry budget is spent. A critique is one voice among
/// N-1 for its target, so by default it is dropped with a warning (recorded in the round's
/// `dropped` list and the report) and the target refines with the critiques that did
/// arrive; every agent stays in the debate. `fail` ends the debate at the critique as any
/// other node does. Proposals, refinements and judge tasks always fail the debate: without
/// them a round or the synthesis has nothing to work on (`parley retry` continues it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnAgentFailure {
    #[default]
    Drop,
    Fail,
}

fn default_rounds() -> u32 {
    3
}
fn default_synthesis() -> String {
    "judge".into()
}
fn default_timeout_per_round() -> u64 {
    300_000
}
fn default_clarifications_max() -> u32 {
    5
}
fn default_clarifications_iterations() -> u32 {
    3
}
fn default_max_concurrency() -> usize {
    16
}

impl Default for DebateSettings {
    fn default() -> Self {
        Self {
            rounds: default_rounds(),
            termination_condition: TerminationCondition::default(),
            synthesis_method: default_synthesis(),
            include_full_history: true,
            timeout_per_round: default_timeout_per_round(),
            summarization: SummarizationConfig::default(),
            interactive_clarifications: false,
            clarifications_max_per_agent: default_clarifications_max(),
            clarifications_max_iterations: default_clarifications_iterations(),
            retry: RetryPolicies::default(),
            max_concurrency: default_max_concurrency(),
            on_agent_failure: OnAgentFailure::default(),
            budget: None,
            mode: DebateMode::default(),
            critique: CritiqueConfig::default(),
            embeddings: None,
            human_deadline_secs: None,
        }
    }
}

/// One provider's operator settings (the `providers` section; never from a submission):
/// request and token limits, and at the provider level also its endpoint and the models
/// participants may choose.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_minute: Option<u32>,
    /// The most completion tokens one call may ask for (provider or model level): a
    /// participant's `maxTokens` above it, or none at all, is sent as this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, ProviderLimits>,
    /// The endpoint of this provider (provider level only); overrides the built-in one
    /// (and, for `openai-compatible`, the file's top-level `baseUrl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The models a submission may choose for this provider (provider level only); absent
    /// means any model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_models: Option<Vec<String>>,
    /// The model's price (per-model entries only; LiteLLM's field names), over the price
    /// file's (see [`crate::prices`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<crate::ModelPrice>,
}

impl ProviderLimits {
    /// Whether `model` may be used with this provider.
    pub fn allows(&self, model: &str) -> bool {
        self.allowed_models
            .as_ref()
            .is_none_or(|m| m.iter().any(|a| a == model))
    }
}

/// Problems of an operator's `providers` section: unknown provider names, an endpoint that
/// is not an http(s) URL, endpoint or allow-list settings inside a per-model entry.
pub fn validate_providers(providers: &BTreeMap<String, ProviderLimits>) -> Vec<crate::SpecError> {
    let mut errs = Vec::new();
    for (name, p) in providers {
        let field = format!("providers.{name}");
        if !KNOWN_PROVIDERS.contains(&name.as_str()) {
            errs.push(crate::SpecError::new(
                &field,
                format!(
                    "unknown provider (expected one of: {})",
                    KNOWN_PROVIDERS.join(", ")
                ),
            ));
        }
        if let Some(url) = &p.base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                errs.push(crate::SpecError::new(
                    format!("{field}.baseUrl"),
                    "must be an http:// or https:// URL",
                ));
            }
        }
        let caps = std::iter::once((field.clone(), p.max_tokens)).chain(
            p.models
                .iter()
                .map(|(model, m)| (format!("{field}.models.{model}"), m.max_tokens)),
        );
        for (at, cap) in caps {
            if cap == Some(0) {
                errs.push(crate::SpecError::new(
                    format!("{at}.maxTokens"),
                    "must be at least 1",
                ));
            }
        }
        if p.allowed_models.as_ref().is_some_and(|m| m.is_empty()) {
            errs.push(crate::SpecError::new(
                format!("{field}.allowedModels"),
                "is empty: no model could be used (remove it to allow any model)",
            ));
        }
        if p.price.is_some() {
            errs.push(crate::SpecError::new(
                format!("{field}.price"),
                "a price belongs to a model: providers.<p>.models.<m>.price",
            ));
        }
        for (model, m) in &p.models {
            if m.base_url.is_some() || m.allowed_models.is_some() || !m.models.is_empty() {
                errs.push(crate::SpecError::new(
                    format!("{field}.models.{model}"),
                    "a per-model entry takes only requestsPerMinute, tokensPerMinute, maxTokens and price",
                ));
            }
            if let Some(price) = &m.price {
                for problem in price.problems(&format!("{field}.models.{model}.price")) {
                    let (f, msg) = problem.split_once(": ").unwrap_or(("", &problem));
                    errs.push(crate::SpecError::new(f, msg));
                }
            }
        }
    }
    errs
}

/// The whole `debate-config.json`. Every section is optional; missing ones take the
/// built-in defaults (the CLI warns about each).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DebateConfigFile {
    /// The JSON Schema this file follows (`debate-config.schema.json`), for editors; the
    /// loader takes and ignores it.
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<AgentConfig>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<AgentConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debate: Option<DebateSettings>,
    /// Global OpenAI-compatible endpoint used by agents without their own `baseUrl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, ProviderLimits>,
    /// An operator setting of `parley run`: the LiteLLM-format price file (relative to this
    /// file's folder); `--prices` wins over it. Never sent with a submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<String>,
}

/// The JSON Schema (draft 7, which editors support best) of `debate-config.json`, generated
/// from [`DebateConfigFile`] and the types it holds.
pub fn debate_config_schema() -> Schema {
    let mut schema = schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<DebateConfigFile>();
    schema.insert("title".into(), "Parley debate configuration".into());
    // The dialectic keys the CLI's loader takes before the strict parse (`parley run`,
    // `serve`, `mcp`; see the CLI's `compat` module), so a dialectic config validates too.
    let defs = schema
        .get_mut("definitions")
        .and_then(|d| d.as_object_mut());
    if let Some(defs) = defs {
        let mut add = |def: &str, key: &str, property: serde_json::Value| {
            if let Some(props) = defs
                .get_mut(def)
                .and_then(|d| d.get_mut("properties"))
                .and_then(|p| p.as_object_mut())
            {
                props.insert(key.into(), property);
            }
        };
        add(
            "DebateSettings",
            "orchestratorType",
            serde_json::json!({
                "description": "dialectic's orchestrator choice: accepted by the CLI with a \
                    note and not needed (Parley always runs its own resumable state machine).",
                "type": "string"
            }),
        );
        add(
            "DebateSettings",
            "trace",
            serde_json::json!({
                "description": "dialectic's tracing: \"langfuse\" makes the CLI export the \
                    debate's trace to Langfuse's OTLP endpoint from the LANGFUSE_* variables.",
                "enum": ["langfuse", null]
            }),
        );
        add(
            "SummarizationConfig",
            "promptPath",
            serde_json::json!({
                "description": "dialectic's summary prompt file (CLI): the summaryPromptPath of \
                    every agent without its own (agent level first), relative to this file.",
                "type": "string"
            }),
        );
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_mode_or_topology_names_its_field_and_the_values() {
        let e = DebateMode::try_from("fast".to_string()).unwrap_err();
        assert_eq!(
            e,
            UnknownValue {
                field: "debate.mode",
                value: "fast".into(),
                expected: DEBATE_MODES
            }
        );
        assert_eq!(
            e.to_string(),
            "debate.mode: unknown value \"fast\" (expected one of: debate, adaptive)"
        );
        let e = CritiqueTopology::try_from("x".repeat(100)).unwrap_err();
        assert_eq!(e.field, "debate.critique.topology");
        assert!(e.value.len() < 100, "{e}");
        assert!(e
            .to_string()
            .ends_with("(expected one of: all, ring, random)"));
        // serde reports it as the field's error.
        let e = serde_json::from_str::<DebateMode>("\"fast\"").unwrap_err();
        assert!(e.to_string().contains("debate.mode: unknown value"), "{e}");
        assert_eq!(
            DebateMode::try_from("adaptive".to_string()),
            Ok(DebateMode::Adaptive)
        );
    }
}
