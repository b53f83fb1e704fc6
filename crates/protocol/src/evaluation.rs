//! `parley.evals.submit`: evaluator calls run by the judge workers (`parley eval
//! --nats-url`), so a cluster's operator-owned providers, keys and cluster-wide rate limits
//! serve evaluations as they serve debates.
//!
//! The CLI renders each evaluator's prompts (dialectic's templates and placeholders) and
//! sends the texts; a judge worker runs the calls in parallel and replies with each
//! evaluator's raw reply or error. Scoring (parsing the rubric JSON, averaging, output
//! formats) stays in the CLI, the same code as a local `parley eval`. A request names
//! providers and models only; an endpoint or key-like field anywhere is refused as in a
//! submission ([`crate::operator_owned_fields`]).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::subjects::ErrorCode;
use crate::{
    is_valid_id, limits, operator_owned_fields, preview, Rejection, SpecError, SpecErrors,
};

/// Evaluators always run at this temperature (dialectic's fixed value), locally and on
/// the judge workers.
pub const EVAL_TEMPERATURE: f64 = 0.1;
/// Name of the rubric's JSON schema when it is asked for as structured output.
pub const RUBRIC_SCHEMA_NAME: &str = "evaluation_rubric";

/// The JSON schema of an evaluator's reply (dialectic's rubric), strict: every score is an
/// integer 1-10 and comes after its reasoning. Asked for as structured output by a local
/// `parley eval` and by the judge workers.
pub fn rubric_schema() -> Value {
    let scored = json!({
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            "score": {"type": "integer", "minimum": 1, "maximum": 10}
        },
        "required": ["reasoning", "score"],
        "additionalProperties": false
    });
    let non_functional = [
        "performance_scalability",
        "security",
        "maintainability_evolvability",
        "regulatory_compliance",
        "testability",
        "requirements_fulfillment",
    ];
    let nf_props: Map<String, Value> = non_functional
        .iter()
        .map(|k| (k.to_string(), scored.clone()))
        .collect();
    json!({
        "type": "object",
        "properties": {
            "evaluation": {
                "type": "object",
                "properties": {
                    "functional_completeness": scored,
                    "non_functional": {
                        "type": "object",
                        "properties": nf_props,
                        "required": non_functional,
                        "additionalProperties": false
                    }
                },
                "required": ["functional_completeness", "non_functional"],
                "additionalProperties": false
            },
            "overall_summary": {
                "type": "object",
                "properties": {
                    "strengths": {"type": "string"},
                    "weaknesses": {"type": "string"},
                    "overall_score": {"type": "integer", "minimum": 1, "maximum": 10}
                },
                "required": ["strengths", "weaknesses", "overall_score"],
                "additionalProperties": false
            }
        },
        "required": ["evaluation", "overall_summary"],
        "additionalProperties": false
    })
}

/// Evaluators in one request at most.
pub const MAX_EVALUATORS: usize = 16;
/// Bytes of one evaluation request at most (prompts hold the debate's problem and solution).
pub const MAX_EVAL_REQUEST_BYTES: usize = 900_000;
/// Bytes of one evaluator's prompt (system + user) at most.
pub const MAX_EVAL_PROMPT_BYTES: usize = 400_000;
/// Bytes of one evaluator's reply text kept in the reply (16 × this stays under NATS's
/// default 1 MiB `max_payload`).
pub const MAX_EVAL_REPLY_TEXT_BYTES: usize = 48 * 1024;

/// One evaluator call: who, which model, and the rendered prompts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvalCall {
    pub id: String,
    pub model: String,
    /// Provider name from the operator's configuration; none = the default provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The call's deadline (1 ms to [`limits::MAX_TASK_TIMEOUT_MS`]).
    pub timeout_ms: u64,
    pub system: String,
    pub user: String,
}

/// The request on `parley.evals.submit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvalRequest {
    pub evaluators: Vec<EvalCall>,
}

/// One evaluator's outcome: its reply text (cut to [`MAX_EVAL_REPLY_TEXT_BYTES`]) and
/// usage, or the error of its call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalOutcome {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub latency_ms: u64,
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

/// The reply: one outcome per evaluator, in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalReply {
    pub results: Vec<EvalOutcome>,
}

/// Decodes and checks an evaluation request. Never panics, whatever the bytes.
pub fn decode_eval_request(payload: &[u8]) -> Result<EvalRequest, Rejection> {
    if payload.len() > MAX_EVAL_REQUEST_BYTES {
        return Err(Rejection::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "evaluation request is {} bytes, the limit is {MAX_EVAL_REQUEST_BYTES}",
                payload.len()
            ),
        ));
    }
    let v: Value = serde_json::from_slice(payload)
        .map_err(|e| Rejection::new(ErrorCode::InvalidJson, format!("not JSON: {e}")))?;
    let owned = operator_owned_fields(&v);
    if !owned.is_empty() {
        return Err(SpecErrors(owned).into());
    }
    let req: EvalRequest = serde_json::from_value(v).map_err(|e| {
        Rejection::new(
            ErrorCode::InvalidRequest,
            format!("invalid evaluation request: {e}"),
        )
    })?;
    let mut errors = Vec::new();
    if req.evaluators.is_empty() || req.evaluators.len() > MAX_EVALUATORS {
        errors.push(SpecError::new(
            "evaluators",
            format!(
                "1 to {MAX_EVALUATORS} evaluators, not {}",
                req.evaluators.len()
            ),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, e) in req.evaluators.iter().enumerate() {
        let at = |f: &str| format!("evaluators[{i}].{f}");
        if !is_valid_id(&e.id) {
            errors.push(SpecError::new(
                at("id"),
                format!(
                    "{:?} is not an id ([A-Za-z0-9_-]{{1,64}})",
                    preview(&e.id, 70)
                ),
            ));
        } else if !seen.insert(e.id.as_str()) {
            errors.push(SpecError::new(at("id"), format!("{} appears twice", e.id)));
        }
        if e.model.trim().is_empty() || e.model.len() > limits::MAX_MODEL_BYTES {
            errors.push(SpecError::new(
                at("model"),
                format!("1 to {} bytes", limits::MAX_MODEL_BYTES),
            ));
        }
        if e.provider
            .as_ref()
            .is_some_and(|p| p.is_empty() || p.len() > limits::MAX_LABEL_BYTES)
        {
            errors.push(SpecError::new(
                at("provider"),
                format!("1 to {} bytes", limits::MAX_LABEL_BYTES),
            ));
        }
        if !(1..=limits::MAX_TASK_TIMEOUT_MS).contains(&e.timeout_ms) {
            errors.push(SpecError::new(
                at("timeoutMs"),
                format!(
                    "1 to {} ms, not {}",
                    limits::MAX_TASK_TIMEOUT_MS,
                    e.timeout_ms
                ),
            ));
        }
        if e.user.trim().is_empty() {
            errors.push(SpecError::new(at("user"), "the user prompt is empty"));
        }
        if e.system.len() + e.user.len() > MAX_EVAL_PROMPT_BYTES {
            errors.push(SpecError::new(
                at("user"),
                format!("prompts are over {MAX_EVAL_PROMPT_BYTES} bytes"),
            ));
        }
    }
    if errors.is_empty() {
        Ok(req)
    } else {
        Err(SpecErrors(errors).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Value {
        json!({"id": id, "model": "m", "timeoutMs": 1000, "system": "s", "user": "u"})
    }

    #[test]
    fn a_good_request_decodes() {
        let body = json!({"evaluators": [call("e1"), call("e2")]}).to_string();
        let r = decode_eval_request(body.as_bytes()).unwrap();
        assert_eq!(r.evaluators.len(), 2);
        assert_eq!(r.evaluators[1].id, "e2");
    }

    #[test]
    fn bad_requests_name_their_problem() {
        let code = |v: Value| decode_eval_request(v.to_string().as_bytes()).unwrap_err();
        let mut with_url = call("e1");
        with_url["baseUrl"] = json!("http://evil");
        let e = code(json!({"evaluators": [with_url]}));
        assert!(e.message.contains("evaluators[0].baseUrl"), "{e}");
        let mut with_key = call("e1");
        with_key["apiKey"] = json!("sk-1");
        assert!(code(json!({"evaluators": [with_key]}))
            .message
            .contains("apiKey"));
        assert!(code(json!({"evaluators": []})).message.contains("1 to 16"));
        let e = code(json!({"evaluators": [call("e1"), call("e1"), call("bad id")]}));
        assert!(
            e.message.contains("appears twice") && e.message.contains("evaluators[2].id"),
            "{e}"
        );
        let mut slow = call("e1");
        slow["timeoutMs"] = json!(0);
        assert!(code(json!({"evaluators": [slow]}))
            .message
            .contains("timeoutMs"));
        let mut extra = call("e1");
        extra["temperature"] = json!(2);
        assert_eq!(
            code(json!({"evaluators": [extra]})).code,
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            decode_eval_request(b"{nope").unwrap_err().code,
            ErrorCode::InvalidJson
        );
        let big = vec![b' '; MAX_EVAL_REQUEST_BYTES + 1];
        assert_eq!(
            decode_eval_request(&big).unwrap_err().code,
            ErrorCode::PayloadTooLarge
        );
    }
}
