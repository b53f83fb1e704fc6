//! The evaluator calls and their scores: the prompt, the reply's rubric, the averages.

use parley_llm::{ChatMessage, ChatRequest, Registry, ResponseFormat};
use parley_protocol::{rubric_schema, RUBRIC_SCHEMA_NAME};
use serde_json::{json, Map, Value};
use tracing::Instrument as _;

use super::{CallError, DebateInput, DebateResult, Evaluator, Reply, EVAL_TEMPERATURE, METRICS};

/// The user prompt: the template with the placeholders filled in.
pub fn render_user_prompt(template: &str, d: &DebateInput) -> String {
    template
        .replace("{problem}", &d.problem)
        .replace("{clarifications}", &d.clarifications)
        .replace("{requirements_info}", &d.requirements_info)
        .replace("{final_solution}", &d.final_solution)
}

/// The rubric reply's JSON schema, asked for as structured output (providers that do not
/// take it are asked without it and the reply is parsed as before); the judge workers ask
/// for the same one (`parley eval --nats-url`).
pub fn rubric_format() -> ResponseFormat {
    ResponseFormat::strict(RUBRIC_SCHEMA_NAME, rubric_schema())
}

/// The first `{` to the last `}` of `text`, as a JSON object.
pub fn parse_reply(text: &str) -> Option<Map<String, Value>> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    if end < start {
        return None;
    }
    match serde_json::from_str::<Value>(&text[start..=end]) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// A score at `path`: a finite number (or a numeric string), clamped to 1..10.
pub(super) fn score_at(reply: &Value, path: &[&str], id: &str) -> Option<f64> {
    let v = path.iter().try_fold(reply, |v, k| v.get(k));
    let label = path.join(".");
    let n = match v {
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|n| n.is_finite());
    let Some(n) = n else {
        eprintln!("[{id}] missing or non-numeric score for {label}; not counted");
        return None;
    };
    let c = n.clamp(1.0, 10.0);
    if c != n {
        eprintln!("[{id}] score for {label} clamped to [1,10] from {n}");
    }
    Some(c)
}

/// Runs every evaluator on `d` from this machine, all at once.
pub(crate) async fn call_locally(
    registry: &Registry,
    evaluators: &[Evaluator],
    d: &DebateInput,
) -> Vec<Result<Reply, CallError>> {
    let calls = evaluators.iter().map(|e| {
        let req = ChatRequest {
            model: e.agent.model.clone(),
            messages: vec![
                ChatMessage::system(e.system.clone()),
                ChatMessage::user(render_user_prompt(&e.user_template, d)),
            ],
            temperature: EVAL_TEMPERATURE,
            max_tokens: None,
            timeout: e.timeout,
            seed: None,
            tools: Default::default(),
            response_format: Some(rubric_format()),
        };
        let span = tracing::info_span!(
            "eval.evaluator",
            evaluator.id = e.agent.id.as_str(),
            debate = d.name.as_str(),
            gen_ai.request.model = e.agent.model.as_str(),
        );
        async move {
            let provider = registry.provider_for(&e.agent)?;
            provider.complete(&req).await
        }
        .instrument(span)
    });
    futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| {
            r.map(|r| Reply {
                text: r.text,
                latency_ms: r.latency_ms,
                prompt_tokens: r.prompt_tokens,
                completion_tokens: r.completion_tokens,
            })
            .map_err(CallError::from)
        })
        .collect()
}

/// Scores one debate from its evaluators' replies (in evaluator order).
pub(crate) fn score(
    evaluators: &[Evaluator],
    d: &DebateInput,
    replies: Vec<Result<Reply, CallError>>,
    verbose: bool,
) -> DebateResult {
    let mut sums: Vec<Vec<f64>> = vec![Vec::new(); METRICS.len()];
    let mut agents = Map::new();
    let mut skipped = Map::new();
    for (e, reply) in evaluators.iter().zip(replies) {
        let id = e.agent.id.as_str();
        let reply = match reply {
            Ok(r) => r,
            Err(err) => {
                eprintln!(
                    "[{id}] skipped on debate {}: the call failed: {err}",
                    d.name
                );
                skipped.insert(id.into(), json!(format!("call failed: {err}")));
                continue;
            }
        };
        if verbose {
            eprintln!(
                "[{id}] debate {}: {} ms, {} tokens in, {} out",
                d.name, reply.latency_ms, reply.prompt_tokens, reply.completion_tokens
            );
        }
        let Some(parsed) = parse_reply(&reply.text) else {
            eprintln!(
                "[{id}] skipped on debate {}: the reply is not a JSON object",
                d.name
            );
            skipped.insert(id.into(), json!("invalid JSON reply"));
            continue;
        };
        let parsed = Value::Object(parsed);
        for (i, (_, path)) in METRICS.iter().enumerate() {
            if let Some(s) = score_at(&parsed, path, id) {
                sums[i].push(s);
            }
        }
        agents.insert(id.into(), parsed);
    }
    if !skipped.is_empty() {
        eprintln!(
            "debate {}: {} of {} evaluators returned valid JSON (only those are averaged)",
            d.name,
            agents.len(),
            evaluators.len()
        );
    }
    DebateResult {
        name: d.name.clone(),
        averages: sums.iter().map(|s| average(s)).collect(),
        agents,
        skipped,
    }
}

/// The mean rounded to 2 decimals; `None` for no values.
pub(super) fn average(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    Some((mean * 100.0).round() / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_parsing_takes_the_outer_object() {
        let m = parse_reply("Here:\n```json\n{\"a\": {\"b\": 1}}\n```").unwrap();
        assert_eq!(m["a"]["b"], 1);
        assert!(parse_reply("no json here").is_none());
        assert!(parse_reply("{not json}").is_none());
        assert!(parse_reply("} {").is_none());
    }

    #[test]
    fn scores_clamp_and_average_to_two_decimals() {
        let v = json!({"overall_summary": {"overall_score": 14}});
        assert_eq!(
            score_at(&v, &["overall_summary", "overall_score"], "e"),
            Some(10.0)
        );
        let v = json!({"overall_summary": {"overall_score": "7"}});
        assert_eq!(
            score_at(&v, &["overall_summary", "overall_score"], "e"),
            Some(7.0)
        );
        let v = json!({"overall_summary": {"overall_score": "high"}});
        assert_eq!(
            score_at(&v, &["overall_summary", "overall_score"], "e"),
            None
        );
        assert_eq!(average(&[7.0, 8.0, 8.0]), Some(7.67));
        assert_eq!(average(&[]), None);
    }
}
