//! The two wire APIs' bodies: requests built for Chat Completions and Responses, replies
//! (text, usage, embeddings) read back.

use serde_json::{json, Value};

use crate::provider::{ChatRequest, ResponseFormat};

/// Whether a rejected request's error text is about structured output (`response_format`,
/// `json_schema`, `text.format`), i.e. the endpoint or model does not support it.
pub fn names_structured_output(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "response_format",
        "response format",
        "json_schema",
        "json schema",
        "text.format",
        "structured output",
    ]
    .iter()
    .any(|k| m.contains(k))
}

pub(super) fn chat_body(req: &ChatRequest, format: Option<&ResponseFormat>) -> Value {
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    let mut body =
        json!({"model": req.model, "messages": messages, "temperature": req.temperature});
    if let Some(m) = req.max_tokens {
        body["max_tokens"] = json!(m);
    }
    crate::tools::extend_chat_body(&mut body, &req.tools);
    if let Some(f) = format {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": f.name, "schema": f.schema, "strict": f.strict},
        });
    }
    body
}

pub(super) fn responses_body(req: &ChatRequest, format: Option<&ResponseFormat>) -> Value {
    let instructions: Vec<&str> = req
        .messages
        .iter()
        .filter(|m| m.role == "system")
        .map(|m| m.content.as_str())
        .collect();
    let input: Vec<Value> = req
        .messages
        .iter()
        .filter(|m| m.role != "system")
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    let mut body = json!({"model": req.model, "input": input, "temperature": req.temperature});
    if !instructions.is_empty() {
        body["instructions"] = json!(instructions.join("\n\n"));
    }
    if let Some(m) = req.max_tokens {
        body["max_output_tokens"] = json!(m);
    }
    crate::tools::extend_responses_body(&mut body, &req.tools);
    if let Some(f) = format {
        body["text"] = json!({"format": {
            "type": "json_schema",
            "name": f.name,
            "schema": f.schema,
            "strict": f.strict,
        }});
    }
    body
}

/// A reply with tool calls and no text: its usage, with an empty text.
pub(super) fn usage_only(v: &Value, chat: bool) -> (String, u64, u64) {
    let (p, c) = if chat {
        ("/usage/prompt_tokens", "/usage/completion_tokens")
    } else {
        ("/usage/input_tokens", "/usage/output_tokens")
    };
    let n = |ptr: &str| v.pointer(ptr).and_then(Value::as_u64).unwrap_or(0);
    (String::new(), n(p), n(c))
}

pub(super) fn parse_chat(v: &Value) -> Option<(String, u64, u64)> {
    let text = v
        .pointer("/choices/0/message/content")?
        .as_str()?
        .to_string();
    let pt = v
        .pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let ct = v
        .pointer("/usage/completion_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some((text, pt, ct))
}

pub(super) fn parse_responses(v: &Value) -> Option<(String, u64, u64)> {
    let text = if let Some(t) = v.get("output_text").and_then(Value::as_str) {
        t.to_string()
    } else {
        let mut out = String::new();
        for item in v.get("output")?.as_array()? {
            if item.get("type").and_then(Value::as_str) != Some("message") {
                continue;
            }
            for part in item
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if part.get("type").and_then(Value::as_str) == Some("output_text") {
                    out.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
                }
            }
        }
        out
    };
    if text.is_empty() && v.get("output").is_none() {
        return None;
    }
    let pt = v
        .pointer("/usage/input_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let ct = v
        .pointer("/usage/output_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some((text, pt, ct))
}

/// The vectors of an embeddings reply (`data[].embedding`, placed by `data[].index`), or
/// why the reply does not have exactly one numeric vector per input.
pub(super) fn parse_embeddings(v: &Value, inputs: usize) -> Result<Vec<Vec<f32>>, String> {
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or("embeddings reply has no data array")?;
    if data.len() != inputs {
        return Err(format!(
            "embeddings reply has {} vectors for {inputs} inputs",
            data.len()
        ));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; inputs];
    for (i, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .map_or(i, |n| n as usize);
        let slot = out
            .get_mut(index)
            .ok_or_else(|| format!("embeddings reply has index {index} for {inputs} inputs"))?;
        let vector = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("embeddings reply item {i} has no numeric embedding"))?
            .iter()
            .map(|x| x.as_f64().map(|f| f as f32))
            .collect::<Option<Vec<f32>>>()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("embeddings reply item {i} has no numeric embedding"))?;
        if slot.replace(vector).is_some() {
            return Err(format!("embeddings reply repeats index {index}"));
        }
    }
    out.into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| "embeddings reply misses an index".to_string())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn embeddings_replies_are_parsed_by_index_and_checked() {
        let v = json!({"data": [
            {"index": 1, "embedding": [0.0, 1.0]},
            {"index": 0, "embedding": [1.0, 0.0]},
        ]});
        assert_eq!(
            parse_embeddings(&v, 2).unwrap(),
            vec![vec![1.0, 0.0], vec![0.0, 1.0]]
        );
        assert!(parse_embeddings(&v, 3)
            .unwrap_err()
            .contains("2 vectors for 3"));
        let dup =
            json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]});
        assert!(parse_embeddings(&dup, 2).unwrap_err().contains("repeats"));
        let bad = json!({"data": [{"index": 0, "embedding": ["x"]}]});
        assert!(parse_embeddings(&bad, 1).unwrap_err().contains("numeric"));
        assert!(parse_embeddings(&json!({}), 1).is_err());
    }

    #[test]
    fn cosine_of_vectors() {
        use crate::cosine;
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-9);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).abs() < 1e-9);
        assert!((cosine(&[1.0, 1.0], &[1.0, 0.0]) - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
        assert_eq!(cosine(&[], &[]), 0.0);
    }

    #[test]
    fn structured_output_goes_in_each_api_s_field() {
        let format = ResponseFormat::strict("verdict", json!({"type": "object"}));
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![crate::ChatMessage::user("hi")],
            temperature: 0.2,
            max_tokens: None,
            timeout: Duration::from_secs(1),
            seed: None,
            response_format: Some(format.clone()),
            tools: Default::default(),
        };
        let chat = chat_body(&req, Some(&format));
        assert_eq!(
            chat["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "verdict", "schema": {"type": "object"}, "strict": true}})
        );
        let resp = responses_body(&req, Some(&format));
        assert_eq!(
            resp["text"],
            json!({"format": {"type": "json_schema", "name": "verdict", "schema": {"type": "object"}, "strict": true}})
        );
        assert!(chat_body(&req, None).get("response_format").is_none());
        assert!(responses_body(&req, None).get("text").is_none());
    }

    #[test]
    fn rejections_that_name_structured_output_are_recognised() {
        for m in [
            "request rejected (HTTP 400): Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
            "request rejected (HTTP 400): Unsupported parameter: 'text.format'",
            "request rejected (HTTP 400): This model does not support Structured Outputs",
            "request rejected (HTTP 422): json schema not supported",
        ] {
            assert!(names_structured_output(m), "{m}");
        }
        assert!(!names_structured_output(
            "request rejected (HTTP 400): maximum context length exceeded"
        ));
    }

    #[test]
    fn parses_both_shapes() {
        let chat = json!({"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}});
        assert_eq!(parse_chat(&chat), Some(("hi".into(), 3, 1)));
        let resp = json!({"output":[{"type":"message","content":[{"type":"output_text","text":"yo"}]}],"usage":{"input_tokens":4,"output_tokens":2}});
        assert_eq!(parse_responses(&resp), Some(("yo".into(), 4, 2)));
        assert_eq!(parse_chat(&json!({"nope":1})), None);
    }
}
