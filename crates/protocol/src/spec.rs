//! [`DebateSpec`]: everything one debate needs, fixed when it is accepted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    default_schema_version, AgentConfig, DebateSettings, ProviderLimits, RetryPolicy,
    SummarizationConfig, KNOWN_PROVIDERS, SCHEMA_VERSION,
};

/// Validation limits. A submission over any of them is refused with a message naming it.
///
/// Free text (problem, context, prompts) is limited in characters, which also bounds its
/// bytes (at most 4 per character); every other string has a byte limit.
pub mod limits {
    /// Characters in `problem`.
    pub const MAX_PROBLEM_CHARS: usize = 100_000;
    /// Characters in `context`.
    pub const MAX_CONTEXT_CHARS: usize = 200_000;
    /// Enabled agents.
    pub const MAX_AGENTS: usize = 12;
    /// Agents listed, enabled or not.
    pub const MAX_AGENTS_TOTAL: usize = 32;
    pub const MAX_ROUNDS: u32 = 20;
    /// Characters in one prompt text (system or summary prompt).
    pub const MAX_PROMPT_CHARS: usize = 50_000;
    /// Bytes in one submission message.
    pub const MAX_SUBMISSION_BYTES: usize = 1_000_000;
    /// Bytes in a `{"debateId": ...}` request.
    pub const MAX_REQUEST_BYTES: usize = 4_096;
    /// Bytes in an id (`[A-Za-z0-9_-]`, see [`crate::is_valid_id`]).
    pub const MAX_ID_BYTES: usize = 64;
    /// Bytes in an agent's `name`.
    pub const MAX_NAME_BYTES: usize = 256;
    /// Bytes in a `role`, `model`'s provider name, a method or source label.
    pub const MAX_LABEL_BYTES: usize = 64;
    /// Bytes in a `model`.
    pub const MAX_MODEL_BYTES: usize = 256;
    /// Bytes in a prompt path as written in the config (informational; never opened).
    pub const MAX_PATH_BYTES: usize = 4_096;
    /// Bytes in an idempotency key.
    pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 128;
    /// Default operator cap on `maxTokens` (the coordinator's `max_tokens` setting).
    pub const DEFAULT_MAX_TOKENS: u32 = 16_384;
    /// Attempts of one node's retry policy.
    pub const MAX_ATTEMPTS: u32 = 10;
    /// Attempt number of a task (each user `retry` grants a node a fresh budget).
    pub const MAX_TASK_ATTEMPT: u32 = 10_000;
    /// Smallest backoff between attempts.
    pub const MIN_BACKOFF_MS: u64 = 100;
    /// Largest backoff between attempts (1 h).
    pub const MAX_BACKOFF_MS: u64 = 3_600_000;
    /// Shortest per-attempt timeout.
    pub const MIN_TASK_TIMEOUT_MS: u64 = 1_000;
    /// Longest per-attempt timeout (30 min).
    pub const MAX_TASK_TIMEOUT_MS: u64 = 1_800_000;
    /// `debate.timeoutPerRound` (kept for dialectic compatibility): at most a day.
    pub const MAX_TIMEOUT_PER_ROUND_MS: u64 = 86_400_000;
    pub const MAX_CONCURRENCY: usize = 256;
    /// `summarization.threshold` (characters of history).
    pub const MAX_SUMMARY_THRESHOLD: usize = 10_000_000;
    /// `summarization.maxLength` (characters).
    pub const MAX_SUMMARY_LENGTH: usize = 100_000;
    pub const MAX_CLARIFICATIONS_PER_AGENT: u32 = 20;
    pub const MAX_CLARIFICATION_ITERATIONS: u32 = 10;
    /// Questions a debate can hold: every enabled agent asking its most in every iteration.
    pub const MAX_CLARIFICATION_ITEMS: usize =
        MAX_AGENTS * (MAX_CLARIFICATIONS_PER_AGENT * MAX_CLARIFICATION_ITERATIONS) as usize;
    /// Open issues one verdict keeps (more are cut; each is cut to
    /// [`MAX_OPEN_ISSUE_CHARS`]).
    pub const MAX_OPEN_ISSUES: usize = 20;
    pub const MAX_OPEN_ISSUE_CHARS: usize = 300;
    /// Characters kept of a vote's reason (a longer one is cut).
    pub const MAX_VOTE_REASON_CHARS: usize = 500;
    /// Characters kept of one clarification question (a longer one is cut).
    pub const MAX_QUESTION_CHARS: usize = 500;
    /// Characters of one answer to a clarification question.
    pub const MAX_ANSWER_CHARS: usize = 4_000;
    /// Characters of one steering guide note.
    pub const MAX_GUIDE_NOTE_CHARS: usize = 4_000;
    /// Guide notes one debate keeps (every later prompt carries them all).
    pub const MAX_GUIDE_NOTES: usize = 20;
    /// Steering commands one debate records, at most (its log stays bounded).
    pub const MAX_STEERING_ENTRIES: usize = 200;
    /// Bytes in one `parley.debates.steer` request.
    pub const MAX_STEER_REQUEST_BYTES: usize = 32 * 1024;
    /// Characters of one human participant's contribution (a proposal, critique,
    /// refinement or vote).
    pub const MAX_HUMAN_CONTRIBUTION_CHARS: usize = 20_000;
    /// Bytes in one `parley.debates.contribute` request.
    pub const MAX_CONTRIBUTE_REQUEST_BYTES: usize = 128 * 1024;
    /// Bounds of `debate.humanDeadlineSecs` (seconds a human participant's task waits).
    pub const MIN_HUMAN_DEADLINE_SECS: u64 = 1;
    pub const MAX_HUMAN_DEADLINE_SECS: u64 = 7 * 24 * 3600;
    /// Answers in one `parley.debates.answer` request.
    pub const MAX_ANSWERS: usize = MAX_AGENTS * MAX_CLARIFICATIONS_PER_AGENT as usize;
    /// Bytes in one `parley.debates.answer` request.
    pub const MAX_ANSWER_REQUEST_BYTES: usize = 256 * 1024;
    /// Characters of provider error text kept in a debate's state and events.
    pub const MAX_ERROR_TEXT_CHARS: usize = 300;
    /// Bytes of an error reply's message.
    pub const MAX_REPLY_MESSAGE_BYTES: usize = 4_096;
    /// Largest `toolCallLimit`.
    pub const MAX_TOOL_CALL_LIMIT: u32 = 50;
    /// Bytes of one file of a context snapshot (`--context DIR`).
    pub const MAX_CONTEXT_FILE_BYTES: usize = 256 * 1024;
    /// Bytes of all the files of a context snapshot together.
    pub const MAX_CONTEXT_TOTAL_BYTES: usize = 2 * 1024 * 1024;
    /// Files in a context snapshot.
    pub const MAX_CONTEXT_FILES: usize = 1_000;
    /// Bytes of one path in a context snapshot.
    pub const MAX_CONTEXT_PATH_BYTES: usize = 1_024;
    /// Bytes a worker's prompt adds around a task's own texts ([`crate::Task::text_bytes`]):
    /// the built-in role and judge prompts, the templates, a stricter JSON instruction and
    /// the chat format's per-message tokens. The workers' tests check their prompts stay
    /// within it; budgets count a prompt as at most this plus the texts, a token per byte.
    pub const MAX_PROMPT_TEMPLATE_BYTES: u64 = 8_192;
}

/// Where an agent's system/summary prompt came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptSource {
    pub agent_id: String,
    pub role: String,
    /// `built-in` or `file`.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_path: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptSources {
    pub agents: Vec<PromptSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<PromptSource>,
}

/// One debate as accepted: the problem, the participants and the settings. Immutable once
/// stored; a resume always uses the spec the debate started with. Carries prompt texts, never
/// paths a service would open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DebateSpec {
    #[serde(default = "default_schema_version")]
    pub schema_version: u32,
    pub problem: crate::SharedText,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::SharedText>,
    /// The snapshot of `--context DIR` the agents' tools read (never a path to open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_files: Option<crate::ContextFiles>,
    pub agents: Vec<AgentConfig>,
    pub judge: AgentConfig,
    #[serde(default)]
    pub debate: DebateSettings,
    #[serde(default)]
    pub prompt_sources: PromptSources,
    /// A re-sent submission with the same key returns the same debate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The name of the API key that created the debate (`[A-Za-z0-9_-]{1,64}`): set by
    /// `parley serve` from the caller's key, never from an HTTP request body; a `user` key
    /// sees and acts only on the debates it owns. None: a debate only admins see over the
    /// HTTP API (the CLI and the NATS subjects do not filter by owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Where to tell the submitter about the debate's moments (completed, failed, waiting
    /// for answers, degraded): URLs among the operator's webhook endpoints. The server
    /// that accepts the submission checks them against its allow-list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<crate::WebhookSubscription>,
}

/// A spec that cannot run, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

impl SpecError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Every problem found in a spec, reported together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid debate: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct SpecErrors(pub Vec<SpecError>);

/// What the operator decides about submissions; the coordinator loads it from its
/// configuration (`max_tokens` setting, the `providers` section of the debate config).
#[derive(Debug, Clone, PartialEq)]
pub struct SubmissionPolicy {
    /// Cap on any participant's `maxTokens`.
    pub max_tokens: u32,
    /// The operator's providers: their model allow-lists.
    pub providers: BTreeMap<String, ProviderLimits>,
    /// The operator's caps on one debate's spend (`max_debate_usd`, `max_debate_tokens`):
    /// a submission whose `debate.budget` is over them is refused; one without a budget
    /// gets them as its budget.
    pub max_debate: crate::Budget,
}

impl Default for SubmissionPolicy {
    fn default() -> Self {
        Self {
            max_tokens: limits::DEFAULT_MAX_TOKENS,
            providers: BTreeMap::new(),
            max_debate: crate::Budget::default(),
        }
    }
}

/// The most completion tokens one call of `agent` may produce: its `maxTokens`, capped by
/// the operator's `max_tokens` (which applies alone when the participant sets none). The
/// one place estimates (and budgets) read a call's completion bound from.
pub fn completion_cap(agent: &AgentConfig, operator_max_tokens: u32) -> u32 {
    capped_completion(agent.max_tokens, operator_max_tokens)
}

/// A call's completion tokens: what it asked for (`requested`), never above the operator's
/// cap, which applies alone when it asked for none; at least 1.
pub fn capped_completion(requested: Option<u32>, operator_max_tokens: u32) -> u32 {
    requested
        .map_or(operator_max_tokens, |m| m.min(operator_max_tokens))
        .max(1)
}

/// True for an id of `[A-Za-z0-9_-]{1,64}`: safe in NATS subjects and headers, Redis keys,
/// task ids (`/`-separated) and result fields (`#`-separated).
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= limits::MAX_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// At most `max` characters of `s` (with `…` when cut), for echoing outside input in
/// messages without echoing all of it.
pub fn preview(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// Node kinds a `debate.retry.nodes` entry may name.
pub const RETRY_NODES: &[&str] = &[
    "clarification",
    "proposal",
    "critique",
    "refinement",
    "summarization",
    "evaluation",
    "verdict",
    "vote",
    "embedding",
    "synthesis",
];

/// Collects problems with their field paths.
#[derive(Default)]
pub(crate) struct Check(pub(crate) Vec<SpecError>);

impl Check {
    pub(crate) fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(SpecError::new(field, message));
    }

    /// The fields every task message starts with: the schema version and the debate id.
    pub(crate) fn envelope(&mut self, schema_version: u32, debate_id: &str) {
        if schema_version != crate::SCHEMA_VERSION {
            self.push(
                "schemaVersion",
                format!("unsupported schema version {schema_version}"),
            );
        }
        if !crate::is_valid_debate_id(debate_id) {
            self.push("debateId", "not a debate id");
        }
    }

    /// A string of at most `max` bytes.
    pub(crate) fn bytes(&mut self, field: &str, s: &str, max: usize) {
        if s.len() > max {
            self.push(field, format!("{} bytes, the limit is {max}", s.len()));
        }
    }

    /// Free text of at most `max` characters.
    pub(crate) fn chars(&mut self, field: &str, s: &str, max: usize) {
        // Counting stops early: a huge string is not walked to its end.
        if s.len() > max && s.chars().nth(max).is_some() {
            self.push(
                field,
                format!("{} characters, the limit is {max}", s.chars().count()),
            );
        }
    }

    /// A label: at most `max` bytes, no control characters.
    pub(crate) fn label(&mut self, field: &str, s: &str, max: usize) {
        self.bytes(field, s, max);
        if s.chars().any(char::is_control) {
            self.push(field, "must not contain control characters");
        }
    }

    /// An id (see [`is_valid_id`]).
    pub(crate) fn id(&mut self, field: &str, s: &str) {
        if !is_valid_id(s) {
            self.push(
                field,
                format!(
                    "{:?} is not an id: 1 to {} characters of A-Z a-z 0-9 _ -",
                    preview(s, 80),
                    limits::MAX_ID_BYTES
                ),
            );
        }
    }

    /// A number within `range`.
    pub(crate) fn range<T: PartialOrd + std::fmt::Display>(
        &mut self,
        field: &str,
        v: T,
        range: std::ops::RangeInclusive<T>,
    ) {
        if !range.contains(&v) {
            self.push(
                field,
                format!("{v} is out of range {}..={}", range.start(), range.end()),
            );
        }
    }

    pub(crate) fn into_result(self) -> Result<(), SpecErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(SpecErrors(self.0))
        }
    }
}

impl DebateSpec {
    /// Enabled agents in configuration order.
    pub fn active_agents(&self) -> impl Iterator<Item = &AgentConfig> {
        self.agents.iter().filter(|a| a.is_enabled())
    }

    /// Checks every limit and invariant under the default [`SubmissionPolicy`]; returns
    /// all problems at once.
    pub fn validate(&self) -> Result<(), SpecErrors> {
        self.validate_with(&SubmissionPolicy::default())
    }

    /// Checks every limit and invariant, and the operator's `policy` (the `maxTokens` cap,
    /// model allow-lists); returns all problems at once, each with its field.
    pub fn validate_with(&self, policy: &SubmissionPolicy) -> Result<(), SpecErrors> {
        use limits::*;
        let mut c = Check::default();
        if self.schema_version != SCHEMA_VERSION {
            c.push(
                "schemaVersion",
                format!(
                    "unsupported schema version {} (this build speaks {SCHEMA_VERSION})",
                    self.schema_version
                ),
            );
        }
        if self.problem.trim().is_empty() {
            c.push("problem", "must not be empty");
        }
        c.chars("problem", &self.problem, MAX_PROBLEM_CHARS);
        if let Some(ctx) = &self.context {
            c.chars("context", ctx, MAX_CONTEXT_CHARS);
        }
        if let Some(files) = &self.context_files {
            files.check("contextFiles", &mut c);
        }
        if let Some(key) = &self.idempotency_key {
            if key.is_empty() {
                c.push("idempotencyKey", "must not be empty");
            }
            c.label("idempotencyKey", key, MAX_IDEMPOTENCY_KEY_BYTES);
        }
        if let Some(owner) = &self.owner {
            c.id("owner", owner);
        }
        for e in crate::webhook::webhook_problems(&self.webhooks) {
            c.push(e.field, e.message);
        }
        if self.agents.len() > MAX_AGENTS_TOTAL {
            c.push(
                "agents",
                format!(
                    "{} agents listed, the limit is {MAX_AGENTS_TOTAL} (enabled or not)",
                    self.agents.len()
                ),
            );
        }
        let active = self.active_agents().count();
        if active == 0 {
            c.push("agents", "at least one enabled agent is required");
        }
        if active > MAX_AGENTS {
            c.push(
                "agents",
                format!("{active} enabled agents, the limit is {MAX_AGENTS}"),
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        // Past the limit the list is refused anyway: do not walk a huge one.
        for (i, a) in self.agents.iter().enumerate().take(MAX_AGENTS_TOTAL) {
            validate_agent(&format!("agents[{i}]"), a, policy, &mut c);
            if !seen.insert(a.id.as_str()) {
                c.push(
                    format!("agents[{i}].id"),
                    format!("duplicate agent id {:?}", preview(&a.id, 80)),
                );
            }
        }
        validate_agent("judge", &self.judge, policy, &mut c);
        validate_settings(&self.debate, &mut c);
        if let Some(e) = &self.debate.embeddings {
            // The embedding calls are the judge side's: the same allow-lists apply.
            check_model_allowed(
                "debate.embeddings",
                &e.as_agent(&self.judge.id),
                policy,
                &mut c,
            );
        }
        validate_critique(&self.debate.critique, active, &mut c);
        if self.debate.voting() && active < 2 {
            c.push(
                "debate.synthesisMethod",
                "\"voting\" needs at least two enabled agents (each votes for another's refinement)",
            );
        }
        for (i, a) in self.agents.iter().enumerate().take(MAX_AGENTS_TOTAL) {
            if a.recuse.is_some() {
                c.push(
                    format!("agents[{i}].recuse"),
                    "only the judge recuses (judge.recuse)",
                );
            }
        }
        if self.judge.recuse == Some(true) {
            for problem in independence_problems(self) {
                c.push(
                    "judge.recuse",
                    format!("{problem}; give the judge (or the agents) another model, or drop judge.recuse"),
                );
            }
        }
        validate_budget(self, policy, &mut c);
        validate_prompt_sources(&self.prompt_sources, &mut c);
        c.into_result()
    }
}

/// Checks the debate settings (`debate.*`).
fn validate_settings(d: &DebateSettings, c: &mut Check) {
    use limits::*;
    c.range("debate.rounds", d.rounds, 1..=MAX_ROUNDS);
    let similarity = d.termination_condition.kind == crate::TerminationType::Similarity;
    if let Some(t) = d.termination_condition.threshold {
        let max = if similarity { 1.0 } else { 100.0 };
        if !(0.0..=max).contains(&t) {
            c.push(
                "debate.terminationCondition.threshold",
                if similarity {
                    format!(
                        "{t} is out of range 0..=1 (type \"similarity\" takes a cosine similarity)"
                    )
                } else {
                    format!("{t} is out of range 0..=100")
                },
            );
        }
    }
    validate_embeddings(d, similarity, c);
    if !crate::SYNTHESIS_METHODS.contains(&d.synthesis_method.as_str()) {
        c.push(
            "debate.synthesisMethod",
            format!(
                "unknown method {:?} (expected one of: {})",
                preview(&d.synthesis_method, 40),
                crate::SYNTHESIS_METHODS.join(", ")
            ),
        );
    }
    if let Some(m) = d.termination_condition.max_rounds {
        if d.termination_condition.kind != crate::TerminationType::Verdict {
            c.push(
                "debate.terminationCondition.maxRounds",
                "only with type \"verdict\" (other types run debate.rounds)",
            );
        }
        c.range("debate.terminationCondition.maxRounds", m, 1..=MAX_ROUNDS);
    }
    c.range(
        "debate.timeoutPerRound",
        d.timeout_per_round,
        0..=MAX_TIMEOUT_PER_ROUND_MS,
    );
    validate_summarization("debate.summarization", &d.summarization, c);
    c.range(
        "debate.clarificationsMaxPerAgent",
        d.clarifications_max_per_agent,
        0..=MAX_CLARIFICATIONS_PER_AGENT,
    );
    c.range(
        "debate.clarificationsMaxIterations",
        d.clarifications_max_iterations,
        0..=MAX_CLARIFICATION_ITERATIONS,
    );
    if let Some(secs) = d.human_deadline_secs {
        c.range(
            "debate.humanDeadlineSecs",
            secs,
            MIN_HUMAN_DEADLINE_SECS..=MAX_HUMAN_DEADLINE_SECS,
        );
    }
    c.range(
        "debate.maxConcurrency",
        d.max_concurrency,
        1..=MAX_CONCURRENCY,
    );
    validate_retry("debate.retry.default", &d.retry.default, c);
    for (name, p) in d.retry.nodes.iter().take(RETRY_NODES.len() + 1) {
        let field = format!("debate.retry.nodes.{}", preview(name, 40));
        if !RETRY_NODES.contains(&name.as_str()) {
            c.push(
                &field,
                format!(
                    "unknown node kind (expected one of: {})",
                    RETRY_NODES.join(", ")
                ),
            );
        }
        validate_retry(&field, p, c);
    }
}

/// The reason `similarity` termination cannot run on the local model (the book's adaptive
/// debates page, `docs/src/guide/adaptive-debates.md`, says the same).
pub const LOCAL_EMBEDDINGS_REFUSED: &str = "the local model has no embedding mode \
    (llama.cpp's embedding mode needs an embedding model, and none is packaged): \
    terminationCondition type \"similarity\" needs debate.embeddings with a remote provider \
    (openai, openrouter or openai-compatible)";

/// `debate.embeddings`: required by `similarity` (and only used by it), a known remote
/// provider and a model name.
fn validate_embeddings(d: &DebateSettings, similarity: bool, c: &mut Check) {
    match (&d.embeddings, similarity) {
        (None, true) => c.push(
            "debate.embeddings",
            "terminationCondition type \"similarity\" needs debate.embeddings {provider, model}",
        ),
        (Some(_), false) => c.push(
            "debate.embeddings",
            "only used with terminationCondition type \"similarity\"",
        ),
        _ => {}
    }
    let Some(e) = &d.embeddings else { return };
    c.label("debate.embeddings.model", &e.model, limits::MAX_MODEL_BYTES);
    if e.model.trim().is_empty() {
        c.push("debate.embeddings.model", "must not be empty");
    }
    match e.provider.as_deref() {
        Some("local") => c.push("debate.embeddings.provider", LOCAL_EMBEDDINGS_REFUSED),
        Some(p) if !crate::KNOWN_PROVIDERS.contains(&p) => c.push(
            "debate.embeddings.provider",
            format!(
                "unknown provider {:?} (expected one of: {})",
                preview(p, 40),
                crate::KNOWN_PROVIDERS
                    .iter()
                    .filter(|k| **k != "local")
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        _ => {}
    }
}

/// What makes a debate's participants less than independent: every agent (two or more) on
/// the same model — they tend to agree with each other — or the judge on a model one of the
/// agents uses — it tends to favour that agent's answers. Warnings at start; errors with
/// `judge.recuse: true`.
pub fn independence_problems(spec: &DebateSpec) -> Vec<String> {
    independence_problems_with(spec, |a| a.model.as_str())
}

/// [`independence_problems`] with the model each participant really runs on (`model_of`),
/// e.g. the local model a participant falls back to when its provider is not configured.
pub fn independence_problems_with<'a>(
    spec: &'a DebateSpec,
    model_of: impl Fn(&'a AgentConfig) -> &'a str,
) -> Vec<String> {
    let mut out = Vec::new();
    // A person has no model to share.
    let agents: Vec<(&AgentConfig, &str)> = spec
        .active_agents()
        .filter(|a| !a.is_human())
        .map(|a| (a, model_of(a)))
        .collect();
    if agents.len() >= 2 && agents.iter().all(|(_, m)| *m == agents[0].1) {
        out.push(format!(
            "every agent uses the same model {:?}: their answers are not independent",
            preview(agents[0].1, 80)
        ));
    }
    let judge = model_of(&spec.judge);
    let shared: Vec<&str> = agents
        .iter()
        .filter(|(_, m)| *m == judge)
        .map(|(a, _)| a.id.as_str())
        .collect();
    if !shared.is_empty() {
        out.push(format!(
            "the judge uses the model {:?} of agent(s) {}: it may favour their answers",
            preview(judge, 80),
            shared.join(", ")
        ));
    }
    out
}

/// `debate.critique`: `k` only with a sparse topology, between 1 and the agents − 1.
fn validate_critique(cfg: &crate::CritiqueConfig, agents: usize, c: &mut Check) {
    let Some(k) = cfg.k else { return };
    if cfg.topology == crate::CritiqueTopology::All {
        c.push(
            "debate.critique.k",
            "only with topology \"ring\" or \"random\" (\"all\" critiques every other agent)",
        );
        return;
    }
    let most = agents.saturating_sub(1).max(1);
    if k == 0 || k as usize > most {
        c.push(
            "debate.critique.k",
            format!(
                "{k} is out of range 1..={most} (targets per critic: at most the other agents)"
            ),
        );
    }
}

/// `debate.budget`: sane figures, within the operator's caps, and no participant whose
/// calls a budget cannot bound (tools add calls the reservation does not know).
fn validate_budget(spec: &DebateSpec, policy: &SubmissionPolicy, c: &mut Check) {
    let Some(b) = &spec.debate.budget else {
        return;
    };
    c.0.extend(b.problems("debate.budget"));
    let cap = &policy.max_debate;
    if let (Some(v), Some(max)) = (b.usd, cap.usd) {
        if v > max {
            c.push(
                "debate.budget.usd",
                format!("${v} is over the operator's cap of ${max} per debate"),
            );
        }
    }
    if let (Some(v), Some(max)) = (b.tokens, cap.tokens) {
        if v > max {
            c.push(
                "debate.budget.tokens",
                format!("{v} tokens is over the operator's cap of {max} per debate"),
            );
        }
    }
    for (i, a) in spec.active_agents().enumerate() {
        if !a.tools.is_empty() {
            c.push(
                format!("agents[{i}].tools"),
                "a debate with a budget cannot give agents tools (their calls are not bounded in advance)",
            );
        }
    }
}

impl DebateSpec {
    /// The budget this debate runs under: its own `debate.budget`, tightened by the
    /// operator's caps (which alone apply when it sets none); `None`: unlimited.
    pub fn effective_budget(&self, caps: &crate::Budget) -> Option<crate::Budget> {
        let b = match self.debate.budget {
            Some(b) => b.tighter(*caps),
            None => *caps,
        };
        (b.usd.is_some() || b.tokens.is_some()).then_some(b)
    }
}

fn validate_retry(field: &str, p: &RetryPolicy, c: &mut Check) {
    use limits::*;
    c.range(&format!("{field}.attempts"), p.attempts, 1..=MAX_ATTEMPTS);
    c.range(
        &format!("{field}.initialBackoffMs"),
        p.initial_backoff_ms,
        MIN_BACKOFF_MS..=MAX_BACKOFF_MS,
    );
    c.range(
        &format!("{field}.maxBackoffMs"),
        p.max_backoff_ms,
        p.initial_backoff_ms.clamp(MIN_BACKOFF_MS, MAX_BACKOFF_MS)..=MAX_BACKOFF_MS,
    );
    c.range(
        &format!("{field}.timeoutMs"),
        p.timeout_ms,
        MIN_TASK_TIMEOUT_MS..=MAX_TASK_TIMEOUT_MS,
    );
}

fn validate_summarization(field: &str, s: &SummarizationConfig, c: &mut Check) {
    use limits::*;
    c.range(
        &format!("{field}.threshold"),
        s.threshold,
        0..=MAX_SUMMARY_THRESHOLD,
    );
    c.range(
        &format!("{field}.maxLength"),
        s.max_length,
        1..=MAX_SUMMARY_LENGTH,
    );
    c.label(&format!("{field}.method"), &s.method, MAX_LABEL_BYTES);
}

fn validate_prompt_sources(p: &PromptSources, c: &mut Check) {
    use limits::*;
    if p.agents.len() > MAX_AGENTS_TOTAL {
        c.push(
            "promptSources.agents",
            format!(
                "{} entries, the limit is {MAX_AGENTS_TOTAL}",
                p.agents.len()
            ),
        );
    }
    let sources = p
        .agents
        .iter()
        .take(MAX_AGENTS_TOTAL)
        .enumerate()
        .map(|(i, s)| (format!("promptSources.agents[{i}]"), s))
        .chain(
            p.judge
                .iter()
                .map(|s| ("promptSources.judge".to_string(), s)),
        );
    for (field, s) in sources {
        c.label(&format!("{field}.agentId"), &s.agent_id, MAX_ID_BYTES);
        c.label(&format!("{field}.role"), &s.role, MAX_LABEL_BYTES);
        c.label(&format!("{field}.source"), &s.source, MAX_LABEL_BYTES);
        if let Some(v) = &s.summary_source {
            c.label(&format!("{field}.summarySource"), v, MAX_LABEL_BYTES);
        }
        for (name, path) in [("path", &s.path), ("summaryPath", &s.summary_path)] {
            if let Some(v) = path {
                c.label(&format!("{field}.{name}"), v, MAX_PATH_BYTES);
            }
        }
    }
}

/// Checks one participant (an agent or the judge) under `policy`.
fn validate_agent(field: &str, a: &AgentConfig, policy: &SubmissionPolicy, c: &mut Check) {
    use limits::*;
    c.id(&format!("{field}.id"), &a.id);
    c.label(&format!("{field}.name"), &a.name, MAX_NAME_BYTES);
    c.label(&format!("{field}.role"), &a.role, MAX_LABEL_BYTES);
    let human = a.is_human() && field != "judge";
    if a.model.trim().is_empty() && !human {
        c.push(format!("{field}.model"), "must not be empty");
    }
    if !a.model.is_empty() {
        c.label(&format!("{field}.model"), &a.model, MAX_MODEL_BYTES);
    }
    if a.is_human() && field == "judge" {
        c.push(
            format!("{field}.provider"),
            "the judge cannot be human (only agents take human turns)",
        );
    }
    if let Some(p) = &a.provider {
        if !KNOWN_PROVIDERS.contains(&p.as_str()) && !a.is_human() {
            let human = if field == "judge" { "" } else { ", human" };
            c.push(
                format!("{field}.provider"),
                format!(
                    "unknown provider {:?} (expected one of: {}{human})",
                    preview(p, 40),
                    KNOWN_PROVIDERS.join(", ")
                ),
            );
        }
    }
    if !human {
        check_model_allowed(field, a, policy, c);
    }
    if !(0.0..=2.0).contains(&a.temperature) {
        c.push(
            format!("{field}.temperature"),
            format!("{} is out of range 0..=2", a.temperature),
        );
    }
    if a.base_url.is_some() {
        c.push(
            format!("{field}.baseUrl"),
            "endpoints are chosen by the operator's configuration, not by a submission",
        );
    }
    if let Some(m) = a.max_tokens {
        c.range(&format!("{field}.maxTokens"), m, 1..=policy.max_tokens);
    }
    if let Some(l) = a.tool_call_limit {
        c.range(
            &format!("{field}.toolCallLimit"),
            l,
            1..=MAX_TOOL_CALL_LIMIT,
        );
    }
    if a.tools.len() > crate::TOOL_NAMES.len() {
        c.push(
            format!("{field}.tools"),
            format!(
                "{} entries; there are {} tools",
                a.tools.len(),
                crate::TOOL_NAMES.len()
            ),
        );
    }
    for (i, t) in a.tools.iter().enumerate().take(crate::TOOL_NAMES.len() + 1) {
        if !crate::TOOL_NAMES.contains(&t.name.as_str()) {
            c.push(
                format!("{field}.tools[{i}].name"),
                format!(
                    "unknown tool {:?} (expected one of: {})",
                    preview(&t.name, 40),
                    crate::TOOL_NAMES.join(", ")
                ),
            );
        }
    }
    for (name, path) in [
        ("systemPromptPath", &a.system_prompt_path),
        ("summaryPromptPath", &a.summary_prompt_path),
        ("clarificationPromptPath", &a.clarification_prompt_path),
    ] {
        if let Some(p) = path {
            c.label(&format!("{field}.{name}"), p, MAX_PATH_BYTES);
        }
    }
    for (name, text) in [
        ("systemPrompt", &a.system_prompt),
        ("summaryPrompt", &a.summary_prompt),
        ("clarificationPrompt", &a.clarification_prompt),
    ] {
        if let Some(t) = text {
            c.chars(&format!("{field}.{name}"), t, MAX_PROMPT_CHARS);
        }
    }
    if let Some(s) = &a.summarization {
        validate_summarization(&format!("{field}.summarization"), s, c);
    }
}

/// The operator's model allow-lists. A participant naming a provider must use a model on
/// that provider's list (if it has one). A participant without a provider is placed by the
/// worker's default order and may land on any provider, so when the operator restricts
/// models its model must be on every list.
fn check_model_allowed(field: &str, a: &AgentConfig, policy: &SubmissionPolicy, c: &mut Check) {
    let model = a.model.as_str();
    match a.provider.as_deref() {
        Some(p) => {
            if let Some(limits) = policy.providers.get(p) {
                if !limits.allows(model) {
                    c.push(
                        format!("{field}.model"),
                        format!(
                            "model {:?} is not allowed for provider {p} (allowed: {})",
                            preview(model, 80),
                            limits
                                .allowed_models
                                .as_deref()
                                .unwrap_or_default()
                                .join(", ")
                        ),
                    );
                }
            }
        }
        None => {
            let refusing: Vec<&str> = policy
                .providers
                .iter()
                .filter(|(_, l)| !l.allows(model))
                .map(|(p, _)| p.as_str())
                .collect();
            if !refusing.is_empty() {
                c.push(
                    format!("{field}.model"),
                    format!(
                        "model {:?} is not allowed for provider {} and no provider is named; \
                         name a provider whose allowed models include it",
                        preview(model, 80),
                        refusing.join(", ")
                    ),
                );
            }
        }
    }
}
