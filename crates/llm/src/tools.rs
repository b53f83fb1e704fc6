//! Function calling: the tool definitions a request offers, the calls a reply asks for and
//! the results sent back, in both wire APIs.
//!
//! - Chat Completions: `tools: [{type: "function", function: {name, description,
//!   parameters}}]` and `tool_choice`; a reply's `choices[0].message.tool_calls[]`
//!   (`{id, type: "function", function: {name, arguments}}`); each exchange goes back as the
//!   assistant message with its `tool_calls` followed by one `{role: "tool", tool_call_id,
//!   content}` message per call.
//! - Responses API: `tools: [{type: "function", name, description, parameters}]` and
//!   `tool_choice`; a reply's `output[]` items of `type: "function_call"` (`call_id, name,
//!   arguments`); each exchange goes back as those `function_call` input items followed by
//!   one `{type: "function_call_output", call_id, output}` item per call.
//!
//! What a reply asks for is model output: names and arguments are kept as text (capped)
//! for the caller to parse; a malformed call is skipped, never a panic.

use serde_json::{json, Value};

/// A tool offered to the model: its name, what it does, and a JSON schema of its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// A call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The provider's id of the call (`tool_call_id` / `call_id`), echoed in the result.
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (a JSON text, unchecked).
    pub arguments: String,
}

/// The result of one call, sent back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub call_id: String,
    pub output: String,
}

/// One round trip: the calls of one reply and their results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolExchange {
    pub calls: Vec<ToolCall>,
    pub outputs: Vec<ToolOutput>,
}

/// Whether the model may call tools in this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolChoice {
    #[default]
    Auto,
    /// The tools stay defined (the exchanges refer to them) but the model must answer.
    None,
}

/// The function-calling part of a request: empty by default (no tools offered).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolRequest {
    pub definitions: Vec<ToolDefinition>,
    /// Earlier round trips of this conversation, sent after the request's messages.
    pub exchanges: Vec<ToolExchange>,
    pub choice: ToolChoice,
    /// A user message sent after the exchanges (e.g. "answer now, without tools").
    pub closing_note: Option<String>,
}

impl ToolRequest {
    pub fn is_empty(&self) -> bool {
        self.definitions.is_empty() && self.exchanges.is_empty() && self.closing_note.is_none()
    }
}

/// Largest number of calls read from one reply; the rest are dropped.
pub const MAX_CALLS_PER_REPLY: usize = 16;
/// Bytes of a call's id, name and arguments kept from a reply.
const MAX_ID_BYTES: usize = 256;
const MAX_NAME_BYTES: usize = 128;
pub const MAX_ARGUMENT_BYTES: usize = 16 * 1024;

fn choice_value(c: ToolChoice) -> Value {
    match c {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
    }
}

/// Adds the tools, the exchanges and the closing note to a Chat Completions body.
pub(crate) fn extend_chat_body(body: &mut Value, t: &ToolRequest) {
    if t.is_empty() {
        return;
    }
    if let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) {
        for ex in &t.exchanges {
            let calls: Vec<Value> = ex
                .calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
            for o in &ex.outputs {
                messages
                    .push(json!({"role": "tool", "tool_call_id": o.call_id, "content": o.output}));
            }
        }
        if let Some(note) = &t.closing_note {
            messages.push(json!({"role": "user", "content": note}));
        }
    }
    if !t.definitions.is_empty() {
        let tools: Vec<Value> = t
            .definitions
            .iter()
            .map(|d| {
                json!({"type": "function", "function": {
                    "name": d.name, "description": d.description, "parameters": d.parameters}})
            })
            .collect();
        body["tools"] = json!(tools);
        body["tool_choice"] = choice_value(t.choice);
    }
}

/// Adds the tools, the exchanges and the closing note to a Responses API body.
pub(crate) fn extend_responses_body(body: &mut Value, t: &ToolRequest) {
    if t.is_empty() {
        return;
    }
    if let Some(input) = body.get_mut("input").and_then(Value::as_array_mut) {
        for ex in &t.exchanges {
            for c in &ex.calls {
                input.push(json!({"type": "function_call", "call_id": c.id,
                                  "name": c.name, "arguments": c.arguments}));
            }
            for o in &ex.outputs {
                input.push(json!({"type": "function_call_output", "call_id": o.call_id,
                                  "output": o.output}));
            }
        }
        if let Some(note) = &t.closing_note {
            input.push(json!({"role": "user", "content": note}));
        }
    }
    if !t.definitions.is_empty() {
        let tools: Vec<Value> = t
            .definitions
            .iter()
            .map(|d| {
                json!({"type": "function", "name": d.name, "description": d.description,
                       "parameters": d.parameters})
            })
            .collect();
        body["tools"] = json!(tools);
        body["tool_choice"] = choice_value(t.choice);
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn capped(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s[..cut].to_string()
}

/// A call from its parts, if it has a name; `arguments` may be a JSON text or (some
/// servers) an object.
fn call(
    id: Option<&Value>,
    name: Option<&Value>,
    arguments: Option<&Value>,
    n: usize,
) -> Option<ToolCall> {
    let name = name.and_then(Value::as_str).filter(|s| !s.is_empty())?;
    let arguments = match arguments {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let id = id
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| capped(s, MAX_ID_BYTES))
        .unwrap_or_else(|| format!("call_{n}"));
    Some(ToolCall {
        id,
        name: capped(name, MAX_NAME_BYTES),
        arguments: capped(&arguments, MAX_ARGUMENT_BYTES),
    })
}

/// The calls of a Chat Completions reply (`choices[0].message.tool_calls`).
pub(crate) fn chat_tool_calls(v: &Value) -> Vec<ToolCall> {
    v.pointer("/choices/0/message/tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(MAX_CALLS_PER_REPLY)
        .enumerate()
        .filter_map(|(n, c)| {
            let f = c.get("function")?;
            call(c.get("id"), f.get("name"), f.get("arguments"), n)
        })
        .collect()
}

/// The calls of a Responses API reply (`output[]` items of type `function_call`).
pub(crate) fn responses_tool_calls(v: &Value) -> Vec<ToolCall> {
    v.get("output")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
        .take(MAX_CALLS_PER_REPLY)
        .enumerate()
        .filter_map(|(n, i)| {
            call(
                i.get("call_id").or(i.get("id")),
                i.get("name"),
                i.get("arguments"),
                n,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ToolRequest {
        ToolRequest {
            definitions: vec![ToolDefinition {
                name: "file_read".into(),
                description: "Read a file".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            }],
            exchanges: vec![ToolExchange {
                calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "file_read".into(),
                    arguments: r#"{"path":"a.rs"}"#.into(),
                }],
                outputs: vec![ToolOutput {
                    call_id: "c1".into(),
                    output: "fn main() {}".into(),
                }],
            }],
            choice: ToolChoice::None,
            closing_note: Some("answer now".into()),
        }
    }

    #[test]
    fn chat_body_carries_tools_calls_and_results() {
        let mut body = json!({"messages": [{"role": "user", "content": "q"}]});
        extend_chat_body(&mut body, &request());
        assert_eq!(body["tools"][0]["function"]["name"], "file_read");
        assert_eq!(body["tool_choice"], "none");
        let m = &body["messages"];
        assert_eq!(m[1]["tool_calls"][0]["id"], "c1");
        assert_eq!(m[2]["role"], "tool");
        assert_eq!(m[2]["tool_call_id"], "c1");
        assert_eq!(m[2]["content"], "fn main() {}");
        assert_eq!(m[3]["content"], "answer now");
    }

    #[test]
    fn responses_body_carries_tools_calls_and_results() {
        let mut body = json!({"input": [{"role": "user", "content": "q"}]});
        extend_responses_body(&mut body, &request());
        assert_eq!(body["tools"][0]["name"], "file_read");
        assert_eq!(body["input"][1]["type"], "function_call");
        assert_eq!(body["input"][2]["type"], "function_call_output");
        assert_eq!(body["input"][2]["call_id"], "c1");
        assert_eq!(body["input"][2]["output"], "fn main() {}");
    }

    #[test]
    fn no_tools_leaves_the_body_alone() {
        let mut body = json!({"messages": []});
        extend_chat_body(&mut body, &ToolRequest::default());
        assert_eq!(body, json!({"messages": []}));
    }

    #[test]
    fn replies_are_read_defensively() {
        let chat = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "list_files", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"arguments": "{}"}},
            {"type": "function", "function": {"name": "x", "arguments": {"k": 1}}},
            "garbage"
        ]}}]});
        let calls = chat_tool_calls(&chat);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "list_files");
        assert_eq!(calls[1].arguments, r#"{"k":1}"#);
        assert!(!calls[1].id.is_empty());
        let resp = json!({"output": [
            {"type": "function_call", "call_id": "z", "name": "file_read", "arguments": "{\"path\":\"a\"}"},
            {"type": "message", "content": []}
        ]});
        let calls = responses_tool_calls(&resp);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id, "z");
        assert!(chat_tool_calls(&json!({"choices": 5})).is_empty());
    }
}
