//! The JSON schemas of the judge's replies, asked for as structured output (see
//! [`parley_llm::ResponseFormat`]): a provider that supports it replies in the schema (the
//! local model by constrained decoding), others fall back to the prompt's instructions.
//!
//! Properties are listed in `required` in the order a model should write them (reasoning
//! before the score it supports); every property is required and no other is allowed, as
//! strict mode demands.

use parley_llm::ResponseFormat;
use serde_json::{json, Value};

fn strings() -> Value {
    json!({"type": "array", "items": {"type": "string"}})
}

/// Synthesis: dialectic's judge shape (`solutionMarkdown`, `tradeoffs`, `recommendations`,
/// `unfulfilledMajorRequirements`, `openQuestions`, `confidence` 0-100).
pub fn synthesis() -> ResponseFormat {
    ResponseFormat::strict(
        "judge_synthesis",
        json!({
            "type": "object",
            "properties": {
                "solutionMarkdown": {"type": "string"},
                "tradeoffs": strings(),
                "recommendations": strings(),
                "unfulfilledMajorRequirements": strings(),
                "openQuestions": strings(),
                "confidence": {"type": "integer", "minimum": 0, "maximum": 100}
            },
            "required": ["solutionMarkdown", "tradeoffs", "recommendations",
                         "unfulfilledMajorRequirements", "openQuestions", "confidence"],
            "additionalProperties": false
        }),
    )
}

/// [`synthesis`] with `basedOn` (a voting debate) and `unresolvedDisagreements` (a debate
/// whose last verdict left issues open) when the task asks for them.
pub fn synthesis_for(voting: bool, open_issues: bool) -> ResponseFormat {
    let mut f = synthesis();
    let mut add = |key: &str, schema: Value| {
        if let Some(props) = f.schema["properties"].as_object_mut() {
            props.insert(key.to_string(), schema);
        }
        if let Some(req) = f.schema["required"].as_array_mut() {
            let at = req.len().saturating_sub(1);
            req.insert(at, json!(key));
        }
    };
    if voting {
        add("basedOn", json!({"type": "string"}));
    }
    if open_issues {
        add("unresolvedDisagreements", strings());
    }
    f
}

/// Per-round verdict: `reasoning`, `verdict` (`done`/`continue`), `confidence` 0-100,
/// `openIssues`.
pub fn verdict() -> ResponseFormat {
    ResponseFormat::strict(
        "judge_verdict",
        json!({
            "type": "object",
            "properties": {
                "reasoning": {"type": "string"},
                "verdict": {"type": "string", "enum": ["done", "continue"]},
                "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
                "openIssues": strings()
            },
            "required": ["reasoning", "verdict", "confidence", "openIssues"],
            "additionalProperties": false
        }),
    )
}

/// Round evaluation: `reasoning`, then `confidence` 0-100.
pub fn evaluation() -> ResponseFormat {
    ResponseFormat::strict(
        "judge_evaluation",
        json!({
            "type": "object",
            "properties": {
                "reasoning": {"type": "string"},
                "confidence": {"type": "integer", "minimum": 0, "maximum": 100}
            },
            "required": ["reasoning", "confidence"],
            "additionalProperties": false
        }),
    )
}
