//! [`DebateSpec`]: everything one debate needs, fixed when it is accepted.

use serde::{Deserialize, Serialize};

use crate::{default_schema_version, AgentConfig, DebateSettings, SCHEMA_VERSION};

/// Validation limits. A submission over any of them is refused with a message naming it.
pub mod limits {
    /// Characters in `problem`.
    pub const MAX_PROBLEM_CHARS: usize = 100_000;
    /// Characters in `context`.
    pub const MAX_CONTEXT_CHARS: usize = 200_000;
    pub const MAX_AGENTS: usize = 12;
    pub const MAX_ROUNDS: u32 = 20;
    /// Characters in one prompt text (system or summary prompt).
    pub const MAX_PROMPT_CHARS: usize = 50_000;
    /// Bytes in one submission message.
    pub const MAX_SUBMISSION_BYTES: usize = 1_000_000;
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
    pub problem: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    pub agents: Vec<AgentConfig>,
    pub judge: AgentConfig,
    #[serde(default)]
    pub debate: DebateSettings,
    #[serde(default)]
    pub prompt_sources: PromptSources,
    /// A re-sent submission with the same key returns the same debate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
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

impl DebateSpec {
    /// Enabled agents in configuration order.
    pub fn active_agents(&self) -> impl Iterator<Item = &AgentConfig> {
        self.agents.iter().filter(|a| a.is_enabled())
    }

    /// Checks every limit and invariant; returns all problems at once.
    pub fn validate(&self) -> Result<(), SpecErrors> {
        use limits::*;
        let mut errs = Vec::new();
        if self.schema_version != SCHEMA_VERSION {
            errs.push(SpecError::new(
                "schemaVersion",
                format!(
                    "unsupported schema version {} (this build speaks {SCHEMA_VERSION})",
                    self.schema_version
                ),
            ));
        }
        if self.problem.trim().is_empty() {
            errs.push(SpecError::new("problem", "must not be empty"));
        }
        let chars = self.problem.chars().count();
        if chars > MAX_PROBLEM_CHARS {
            errs.push(SpecError::new(
                "problem",
                format!("{chars} characters, the limit is {MAX_PROBLEM_CHARS}"),
            ));
        }
        if let Some(ctx) = &self.context {
            let chars = ctx.chars().count();
            if chars > MAX_CONTEXT_CHARS {
                errs.push(SpecError::new(
                    "context",
                    format!("{chars} characters, the limit is {MAX_CONTEXT_CHARS}"),
                ));
            }
        }
        let active: Vec<&AgentConfig> = self.active_agents().collect();
        if active.is_empty() {
            errs.push(SpecError::new(
                "agents",
                "at least one enabled agent is required",
            ));
        }
        if active.len() > MAX_AGENTS {
            errs.push(SpecError::new(
                "agents",
                format!("{} enabled agents, the limit is {MAX_AGENTS}", active.len()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, a) in self.agents.iter().enumerate() {
            validate_agent(&format!("agents[{i}]"), a, &mut errs);
            if !seen.insert(a.id.as_str()) {
                errs.push(SpecError::new(
                    format!("agents[{i}].id"),
                    format!("duplicate agent id {:?}", a.id),
                ));
            }
        }
        validate_agent("judge", &self.judge, &mut errs);
        let d = &self.debate;
        if d.rounds == 0 || d.rounds > MAX_ROUNDS {
            errs.push(SpecError::new(
                "debate.rounds",
                format!("{} is out of range 1..={MAX_ROUNDS}", d.rounds),
            ));
        }
        if let Some(t) = d.termination_condition.threshold {
            if !(0.0..=100.0).contains(&t) {
                errs.push(SpecError::new(
                    "debate.terminationCondition.threshold",
                    format!("{t} is out of range 0..=100"),
                ));
            }
        }
        if d.summarization.max_length == 0 {
            errs.push(SpecError::new(
                "debate.summarization.maxLength",
                "must be > 0",
            ));
        }
        if d.max_concurrency == 0 {
            errs.push(SpecError::new("debate.maxConcurrency", "must be > 0"));
        }
        for (name, p) in std::iter::once(("default", &d.retry.default))
            .chain(d.retry.nodes.iter().map(|(k, v)| (k.as_str(), v)))
        {
            if p.attempts == 0 {
                errs.push(SpecError::new(
                    format!("debate.retry.{name}.attempts"),
                    "must be at least 1",
                ));
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(SpecErrors(errs))
        }
    }
}

fn validate_agent(field: &str, a: &AgentConfig, errs: &mut Vec<SpecError>) {
    if a.id.trim().is_empty() {
        errs.push(SpecError::new(format!("{field}.id"), "must not be empty"));
    }
    if a.id.contains(['/', '.', '*', '>', ' ']) {
        errs.push(SpecError::new(
            format!("{field}.id"),
            format!("{:?} must not contain '/', '.', '*', '>' or spaces", a.id),
        ));
    }
    if a.model.trim().is_empty() {
        errs.push(SpecError::new(
            format!("{field}.model"),
            "must not be empty",
        ));
    }
    if !(0.0..=2.0).contains(&a.temperature) {
        errs.push(SpecError::new(
            format!("{field}.temperature"),
            format!("{} is out of range 0..=2", a.temperature),
        ));
    }
    for (name, text) in [
        ("systemPrompt", &a.system_prompt),
        ("summaryPrompt", &a.summary_prompt),
    ] {
        if let Some(t) = text {
            if t.chars().count() > limits::MAX_PROMPT_CHARS {
                errs.push(SpecError::new(
                    format!("{field}.{name}"),
                    format!("longer than {} characters", limits::MAX_PROMPT_CHARS),
                ));
            }
        }
    }
}
