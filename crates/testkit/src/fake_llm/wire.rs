//! The OpenAI wire shapes the fake LLM reads and writes: prompt text extraction from
//! Chat Completions / Responses requests, reply bodies, error bodies.

use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// Every text in a request, in order, joined by newlines: Responses `instructions`,
/// Chat `messages[].content` and Responses `input` (a string, or items whose `content` is a
/// string or a list of parts with `text`).
pub(crate) fn prompt_text(body: &Value) -> String {
    let mut parts: Vec<&str> = Vec::new();
    if let Some(s) = body.get("instructions").and_then(Value::as_str) {
        parts.push(s);
    }
    if let Some(messages) = body.get("messages").and_then(Value::as_array) {
        for m in messages {
            if let Some(c) = m.get("content") {
                content_texts(c, &mut parts);
            }
        }
    }
    match body.get("input") {
        Some(Value::String(s)) => parts.push(s),
        Some(Value::Array(items)) => {
            for item in items {
                match item {
                    Value::String(s) => parts.push(s),
                    Value::Object(o) => {
                        if let Some(c) = o.get("content") {
                            content_texts(c, &mut parts);
                        } else if let Some(s) = o.get("text").and_then(Value::as_str) {
                            parts.push(s);
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
    parts.join("\n")
}

/// A message's `content`: a string, or a list of parts (`{"type":"text","text":..}`,
/// `{"type":"input_text","text":..}`, ...).
fn content_texts<'a>(content: &'a Value, out: &mut Vec<&'a str>) {
    match content {
        Value::String(s) => out.push(s),
        Value::Array(ps) => {
            for p in ps {
                match p {
                    Value::String(s) => out.push(s),
                    other => {
                        if let Some(s) = other.get("text").and_then(Value::as_str) {
                            out.push(s);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// The JSON schema a request asks for: Chat Completions' `response_format` of type
/// `json_schema` (`.json_schema.schema`) or the Responses API's `text.format` of type
/// `json_schema` (`.schema`).
pub(crate) fn json_schema(body: &Value) -> Option<&Value> {
    if let Some(f) = body.get("response_format") {
        if f.get("type").and_then(Value::as_str) == Some("json_schema") {
            return f.pointer("/json_schema/schema");
        }
    }
    let f = body.pointer("/text/format")?;
    if f.get("type").and_then(Value::as_str) == Some("json_schema") {
        return f.get("schema");
    }
    None
}

/// Whether `text` is a JSON object holding every key the schema's top level `required`s.
pub(crate) fn holds_required_keys(text: &str, schema: &Value) -> bool {
    let Ok(Value::Object(o)) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .all(|k| o.contains_key(k))
}

/// A value of `schema` (objects with every property, one item per array, strings naming
/// the reply, integers at the middle of their range, the first enum value), deterministic
/// given `n`.
pub(crate) fn instance_of(schema: &Value, n: u64) -> Value {
    instance(schema, n, "value", 0)
}

fn instance(schema: &Value, n: u64, name: &str, depth: usize) -> Value {
    if depth > 16 {
        return Value::Null;
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "string",
    };
    match ty {
        "object" => {
            let mut o = serde_json::Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, sub) in props {
                    o.insert(k.clone(), instance(sub, n, k, depth + 1));
                }
            }
            Value::Object(o)
        }
        "array" => {
            let item = schema
                .get("items")
                .cloned()
                .unwrap_or(json!({"type": "string"}));
            Value::Array(vec![instance(&item, n, name, depth + 1)])
        }
        "integer" | "number" => {
            let lo = schema.get("minimum").and_then(Value::as_i64).unwrap_or(0);
            let hi = schema
                .get("maximum")
                .and_then(Value::as_i64)
                .unwrap_or(lo + 100);
            json!(lo + (hi - lo) / 2)
        }
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!(format!("Structured {name} #{n} from the fake LLM.")),
    }
}

/// Length of the fake embeddings.
pub const EMBEDDING_DIMENSIONS: usize = 64;

/// The texts of an embeddings request's `input` (a string or an array of strings), or
/// `None` when it is missing, empty or holds anything else.
pub(crate) fn embedding_inputs(body: &Value) -> Option<Vec<String>> {
    match body.get("input")? {
        Value::String(s) => Some(vec![s.clone()]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => None,
    }
}

/// A deterministic embedding of `text`: its lower-cased words counted into
/// [`EMBEDDING_DIMENSIONS`] buckets by an FNV-1a hash, normalised to length 1 (all zeros
/// for a text without words). Texts with the same words get the same vector.
pub fn embed_text(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; EMBEDDING_DIMENSIONS];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in word.to_lowercase().bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        v[(h % EMBEDDING_DIMENSIONS as u64) as usize] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// An embeddings reply (`object: "list"`, one `data[]` item per input, usage).
pub(crate) fn embeddings_reply(model: &str, inputs: &[String]) -> Value {
    let tokens: u64 = inputs.iter().map(|t| rough_tokens(t)).sum();
    json!({
        "object": "list",
        "model": model,
        "data": inputs.iter().enumerate().map(|(i, t)| json!({
            "object": "embedding",
            "index": i,
            "embedding": embed_text(t),
        })).collect::<Vec<_>>(),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })
}

/// Rough token count: characters / 4, at least 1.
pub(crate) fn rough_tokens(text: &str) -> u64 {
    ((text.chars().count() / 4) as u64).max(1)
}

/// The prompt tokens the fake reports for `model`: an OpenAI-family model's (`gpt-4o`,
/// `gpt-4`, ... as tiktoken knows them) with its own tokenizer, as OpenAI would, plus a
/// few tokens of chat format; any other model at four characters a token. A prompt with
/// a run of over 256 characters without a break stays at the rough count (BPE is slow on
/// such runs).
pub(crate) fn prompt_tokens(model: &str, prompt: &str) -> u64 {
    use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};
    let name = model.strip_prefix("openai/").unwrap_or(model);
    let bpe = match get_tokenizer(name) {
        Some(Tokenizer::O200kBase) => tiktoken_rs::o200k_base_singleton(),
        Some(Tokenizer::O200kHarmony) => tiktoken_rs::o200k_harmony_singleton(),
        Some(Tokenizer::Cl100kBase) => tiktoken_rs::cl100k_base_singleton(),
        _ => return rough_tokens(prompt),
    };
    let long_run = prompt.split(char::is_whitespace).any(|w| w.len() > 256)
        || prompt.contains(&" ".repeat(257));
    if long_run {
        return rough_tokens(prompt);
    }
    bpe.encode_ordinary(prompt).len() as u64 + 10
}

/// The default reply when no responder is set: a JSON synthesis when the prompt asks for
/// `JSON`, a short proposal paragraph otherwise. Deterministic given (model, n).
pub(crate) fn default_reply(model: &str, n: u64, prompt: &str) -> String {
    if prompt.contains("JSON") {
        json!({
            "description": format!(
                "Fake synthesized solution from {model} #{n}: put a bounded queue between \
                 producers and consumers and retry failed work with backoff."
            ),
            "tradeoffs": [
                "A queue adds an operational component to run and monitor.",
                "Retries need idempotent handlers."
            ],
            "recommendations": [
                "Bound the queue and shed load when it is full.",
                "Add tracing across the queue boundary."
            ],
            "confidence": 85
        })
        .to_string()
    } else {
        format!(
            "Proposal from {model} #{n}: use a queue between the producer and the consumers, \
             bound it, and retry failed work with exponential backoff. Trade-off: one more \
             component to operate in exchange for isolation from load spikes."
        )
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A Chat Completions reply.
pub(crate) fn chat_completion(model: &str, n: u64, text: &str, prompt: &str) -> Value {
    let prompt_tokens = prompt_tokens(model, prompt);
    let completion_tokens = rough_tokens(text);
    json!({
        "id": format!("chatcmpl-fake-{n}"),
        "object": "chat.completion",
        "created": unix_now(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": text },
            "finish_reason": "stop"
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens
        }
    })
}

/// A Responses API reply.
pub(crate) fn response(model: &str, n: u64, text: &str, prompt: &str) -> Value {
    let input_tokens = prompt_tokens(model, prompt);
    let output_tokens = rough_tokens(text);
    json!({
        "id": format!("resp_fake_{n}"),
        "object": "response",
        "created_at": unix_now(),
        "status": "completed",
        "model": model,
        "output": [{
            "type": "message",
            "id": format!("msg_fake_{n}"),
            "status": "completed",
            "role": "assistant",
            "content": [{ "type": "output_text", "text": text, "annotations": [] }]
        }],
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens
        }
    })
}

/// The names of the tools a request offers: Chat `tools[].function.name`, Responses
/// `tools[].name`.
pub(crate) fn tool_names(body: &Value) -> Vec<String> {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t.pointer("/function/name")
                .or_else(|| t.get("name"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

/// The tool results a request sends back, as (call id, output).
pub(crate) fn tool_outputs(body: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if m.get("role").and_then(Value::as_str) == Some("tool") {
            let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
            let text = m.get("content").and_then(Value::as_str).unwrap_or("");
            out.push((id.to_string(), text.to_string()));
        }
    }
    for i in body
        .get("input")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if i.get("type").and_then(Value::as_str) == Some("function_call_output") {
            let id = i.get("call_id").and_then(Value::as_str).unwrap_or("");
            let text = i.get("output").and_then(Value::as_str).unwrap_or("");
            out.push((id.to_string(), text.to_string()));
        }
    }
    out
}

/// A reply asking for tool calls (`chat`: Chat Completions, else Responses API).
pub(crate) fn tool_call_reply(
    chat: bool,
    model: &str,
    n: u64,
    calls: &[super::FakeToolCall],
    prompt: &str,
) -> Value {
    let prompt_tokens = prompt_tokens(model, prompt);
    let completion_tokens: u64 = calls.iter().map(|c| rough_tokens(&c.arguments)).sum();
    if chat {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"id": format!("call_fake_{n}_{i}"), "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        json!({
            "id": format!("chatcmpl-fake-{n}"),
            "object": "chat.completion",
            "created": unix_now(),
            "model": model,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": null, "tool_calls": calls },
                "finish_reason": "tool_calls"
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens
            }
        })
    } else {
        let items: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"type": "function_call", "id": format!("fc_fake_{n}_{i}"),
                       "call_id": format!("call_fake_{n}_{i}"), "name": c.name,
                       "arguments": c.arguments, "status": "completed"})
            })
            .collect();
        json!({
            "id": format!("resp_fake_{n}"),
            "object": "response",
            "created_at": unix_now(),
            "status": "completed",
            "model": model,
            "output": items,
            "usage": {
                "input_tokens": prompt_tokens,
                "output_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens
            }
        })
    }
}

/// An OpenAI-style error body.
pub(crate) fn error_body(message: &str, kind: &str, code: &str) -> String {
    json!({ "error": { "message": message, "type": kind, "param": null, "code": code } })
        .to_string()
}

/// What a [`Fault::Malformed`](super::Fault::Malformed) reply sends: a chat completion
/// cut off mid-way, so it is not valid JSON.
pub(crate) const MALFORMED_BODY: &str =
    r#"{"id":"chatcmpl-fake-malformed","object":"chat.completion","choices":[{"index":0,"mess"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_text_reads_chat_and_responses_shapes() {
        let chat = json!({"messages":[
            {"role":"system","content":"sys"},
            {"role":"user","content":[{"type":"text","text":"hello"}]}
        ]});
        assert_eq!(prompt_text(&chat), "sys\nhello");
        let resp = json!({"instructions":"be brief","input":[
            {"role":"user","content":[{"type":"input_text","text":"a"}]},
            {"role":"user","content":"b"}
        ]});
        assert_eq!(prompt_text(&resp), "be brief\na\nb");
        assert_eq!(prompt_text(&json!({"input":"plain"})), "plain");
    }

    #[test]
    fn schemas_are_read_from_both_apis_and_instantiated() {
        let schema = json!({"type":"object","properties":{
            "solutionMarkdown":{"type":"string"},
            "tradeoffs":{"type":"array","items":{"type":"string"}},
            "confidence":{"type":"integer","minimum":0,"maximum":100}},
            "required":["solutionMarkdown","tradeoffs","confidence"]});
        let chat = json!({"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":schema,"strict":true}}});
        let resp = json!({"text":{"format":{"type":"json_schema","name":"s","schema":schema,"strict":true}}});
        assert_eq!(json_schema(&chat), Some(&schema));
        assert_eq!(json_schema(&resp), Some(&schema));
        assert_eq!(
            json_schema(&json!({"response_format":{"type":"json_object"}})),
            None
        );
        let v = instance_of(&schema, 3);
        assert_eq!(v["confidence"], 50);
        assert_eq!(v["tradeoffs"].as_array().map(Vec::len), Some(1));
        assert!(v["solutionMarkdown"]
            .as_str()
            .is_some_and(|s| s.contains("#3")));
        assert!(holds_required_keys(&v.to_string(), &schema));
        assert!(!holds_required_keys(r#"{"solutionMarkdown":"x"}"#, &schema));
        assert!(!holds_required_keys("not json", &schema));
    }

    #[test]
    fn json_prompts_get_json_replies() {
        let r = default_reply("m", 1, "answer in JSON");
        let v: Value = serde_json::from_str(&r).unwrap();
        assert_eq!(v["confidence"], 85);
        assert!(default_reply("m", 2, "json lower case").starts_with("Proposal from m #2"));
        assert!(serde_json::from_str::<Value>(MALFORMED_BODY).is_err());
    }
}
