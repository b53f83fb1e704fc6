//! What a submission chooses beyond the agents and rounds: when the debate stops, its mode,
//! its budget and the context every prompt carries ([`SubmitRequest`]'s `termination`,
//! `threshold`, `mode`, `budget`, `context`), their checks, and how they go into the spec.
//! The HTTP API, the page and the MCP tools send them the same way.

use parley_protocol::{
    limits, Budget, DebateMode, DebateSpec, TerminationCondition, TerminationType,
};
use serde::{Deserialize, Serialize};

use crate::SubmitRequest;

/// When a debate stops before its last round (`debate.terminationCondition.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TerminationChoice {
    /// Every round runs.
    Fixed,
    /// Stops once the judge's confidence that the proposals agree reaches `threshold`.
    Convergence,
    /// Stops once the judge rates the best proposal at `threshold` or more.
    Quality,
}

/// How a debate runs (`debate.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModeChoice {
    /// Its rounds, as configured.
    Debate,
    /// The judge looks at the proposals first and stops at once when they already agree.
    Adaptive,
}

/// The most a debate may spend (`debate.budget`); it degrades (fewer critiques, no new
/// round) to stay under it and still ends with a solution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetRequest {
    /// Dollars (more than 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    /// Tokens, prompt and completion together (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub tokens: Option<u64>,
}

/// Names of the option fields in the messages of [`option_problems`]: the HTTP API's
/// (`budget.usd`) or an MCP tool's (`budget_usd`).
#[derive(Debug, Clone, Copy)]
pub struct FieldNames {
    pub budget_usd: &'static str,
    pub budget_tokens: &'static str,
}

impl FieldNames {
    /// The HTTP API's names.
    pub const API: Self = Self {
        budget_usd: "budget.usd",
        budget_tokens: "budget.tokens",
    };
}

/// Every problem of the request's options, each named by its field (`names`).
pub fn option_problems(r: &SubmitRequest, names: FieldNames) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(t) = r.threshold {
        if !(0.0..=100.0).contains(&t) {
            problems.push(format!("threshold: {t} is out of range 0-100"));
        }
        if r.termination.is_none_or(|t| t == TerminationChoice::Fixed) {
            problems
                .push("threshold: applies to termination `convergence` or `quality` only".into());
        }
    }
    if let Some(b) = &r.budget {
        if b.usd.is_none() && b.tokens.is_none() {
            problems.push("budget: give usd, tokens or both".into());
        }
        if let Some(usd) = b.usd {
            if !(usd > 0.0 && usd <= parley_protocol::MAX_BUDGET_USD) {
                problems.push(format!(
                    "{}: {usd} is out of range (more than 0, at most {})",
                    names.budget_usd,
                    parley_protocol::MAX_BUDGET_USD
                ));
            }
        }
        if let Some(tokens) = b.tokens {
            if !(1..=parley_protocol::MAX_BUDGET_TOKENS).contains(&tokens) {
                problems.push(format!(
                    "{}: {tokens} is out of range 1-{}",
                    names.budget_tokens,
                    parley_protocol::MAX_BUDGET_TOKENS
                ));
            }
        }
    }
    if let Some(c) = &r.context {
        let n = c.chars().count();
        if n > limits::MAX_CONTEXT_CHARS {
            problems.push(format!(
                "context: {n} characters, the limit is {}",
                limits::MAX_CONTEXT_CHARS
            ));
        }
    }
    problems
}

impl SubmitRequest {
    /// Writes the request's options into `spec`, replacing the configuration's settings,
    /// before the spec's validation and its budget's admission. A blank context is none.
    pub fn apply_options(&self, spec: &mut DebateSpec) {
        if let Some(t) = self.termination {
            spec.debate.termination_condition = TerminationCondition {
                kind: match t {
                    TerminationChoice::Fixed => TerminationType::Fixed,
                    TerminationChoice::Convergence => TerminationType::Convergence,
                    TerminationChoice::Quality => TerminationType::Quality,
                },
                threshold: self.threshold,
                max_rounds: None,
            };
        }
        if let Some(m) = self.mode {
            spec.debate.mode = match m {
                ModeChoice::Debate => DebateMode::Debate,
                ModeChoice::Adaptive => DebateMode::Adaptive,
            };
        }
        if let Some(b) = self.budget {
            spec.debate.budget = Some(Budget {
                usd: b.usd,
                tokens: b.tokens,
            });
        }
        if let Some(c) = self.context.as_ref().filter(|c| !c.trim().is_empty()) {
            spec.context = Some(c.clone().into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DebateSpec {
        serde_json::from_value(serde_json::json!({
            "problem": "P",
            "agents": [{"id": "a", "name": "A", "role": "architect", "model": "m"}],
            "judge": {"id": "j", "name": "J", "role": "generalist", "model": "m"},
        }))
        .unwrap()
    }

    #[test]
    fn options_replace_the_configs_settings() {
        let r: SubmitRequest = serde_json::from_value(serde_json::json!({
            "problem": "P",
            "termination": "quality",
            "threshold": 80,
            "mode": "adaptive",
            "budget": {"tokens": 20000},
            "context": "We run on ARM",
        }))
        .unwrap();
        r.validate().unwrap();
        let mut s = spec();
        r.apply_options(&mut s);
        assert_eq!(
            s.debate.termination_condition.kind,
            TerminationType::Quality
        );
        assert_eq!(s.debate.termination_condition.threshold, Some(80.0));
        assert_eq!(s.debate.mode, DebateMode::Adaptive);
        assert_eq!(s.debate.budget.unwrap().tokens, Some(20000));
        assert_eq!(
            s.context.as_deref().map(|c| c.to_string()),
            Some("We run on ARM".into())
        );

        // None chosen: the configuration's settings stay.
        let before = spec();
        let mut s = spec();
        SubmitRequest {
            problem: "P".into(),
            context: Some("  ".into()),
            ..Default::default()
        }
        .apply_options(&mut s);
        assert_eq!(s, before);
    }

    #[test]
    fn every_bad_option_is_named() {
        let r: SubmitRequest = serde_json::from_value(serde_json::json!({
            "problem": "P",
            "threshold": 120,
            "budget": {"usd": -1, "tokens": 0},
            "context": "x".repeat(limits::MAX_CONTEXT_CHARS + 1),
        }))
        .unwrap();
        let e = r.validate().unwrap_err().message;
        for name in [
            "threshold: 120 is out of range",
            "threshold: applies to termination",
            "budget.usd: -1 is out of range",
            "budget.tokens: 0 is out of range",
            "context: ",
        ] {
            assert!(e.contains(name), "{e} lacks {name}");
        }
        let empty: SubmitRequest =
            serde_json::from_value(serde_json::json!({"problem": "P", "budget": {}})).unwrap();
        assert!(empty
            .validate()
            .unwrap_err()
            .message
            .contains("budget: give usd"));
        let unknown = serde_json::from_value::<SubmitRequest>(
            serde_json::json!({"problem": "P", "termination": "forever"}),
        );
        assert!(unknown.is_err());
    }
}
