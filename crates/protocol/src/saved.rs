//! Reading a saved debate: Parley's [`DebateState`], or the state file dialectic (0.7.0)
//! writes, converted on load.
//!
//! dialectic's file has the same camelCase shape with a few differences, each converted:
//! - `promptSources` may be absent (a debate suspended before its agents were built), and its
//!   judge entry names the judge `id` (Parley: `agentId`, with a `role`).
//! - A contribution's `tokensUsed` / `latencyMs` / `model` and a summary's `latencyMs` /
//!   `tokensUsed` / `model` are optional (0 / empty when absent); a contribution's
//!   `toolCalls` are `{id, name, arguments}` with the replies in `toolResults` (made into
//!   Parley's [`crate::ToolCallRecord`]s).
//! - A debate waiting for clarification answers stays `running` with
//!   `suspendedAtNode: "clarification_input"`: read as `awaiting_clarifications`, its
//!   unanswered questions (`answer: ""`) as waiting for an answer.
//!
//! `userFeedback` (1 thumbs up, -1 thumbs down) is a field of both. A file that is neither
//! form gets the error of reading it as Parley's state.

use serde_json::{Map, Value};

use crate::{DebateState, ToolCallRecord};

/// The node dialectic names when a debate waits for clarification answers; Parley's own
/// files write it too while a debate is `awaiting_clarifications` (so dialectic's resume
/// continues from the answers).
pub const SUSPENDED_FOR_ANSWERS: &str = "clarification_input";

/// The top-level field naming the node a waiting debate is suspended at.
pub const SUSPENDED_AT_NODE_FIELD: &str = "suspendedAtNode";

/// Reads a saved debate from its JSON (Parley's state or dialectic's; see the module doc).
pub fn parse_saved_state(bytes: &[u8]) -> Result<DebateState, serde_json::Error> {
    let doc: Value = serde_json::from_slice(bytes)?;
    saved_state_from_value(doc)
}

/// [`parse_saved_state`] of a parsed document.
pub fn saved_state_from_value(doc: Value) -> Result<DebateState, serde_json::Error> {
    let parley_err = match serde_json::from_value::<DebateState>(doc.clone()) {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    let mut doc = doc;
    if !from_dialectic(&mut doc) {
        return Err(parley_err);
    }
    serde_json::from_value(doc).map_err(|_| parley_err)
}

/// Converts dialectic's state in place; false when `doc` does not look like one (not an
/// object with an id, a problem, a status and rounds).
fn from_dialectic(doc: &mut Value) -> bool {
    let Some(d) = doc.as_object_mut() else {
        return false;
    };
    if !(d.get("id").is_some_and(Value::is_string)
        && d.get("problem").is_some_and(Value::is_string)
        && d.get("status").is_some_and(Value::is_string)
        && d.get("rounds").is_some_and(Value::is_array))
    {
        return false;
    }
    let sources = d
        .entry("promptSources")
        .or_insert_with(|| serde_json::json!({"agents": []}));
    if let Some(s) = sources.as_object_mut() {
        s.entry("agents")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(j) = s.get_mut("judge").and_then(Value::as_object_mut) {
            if !j.contains_key("agentId") {
                if let Some(id) = j.remove("id") {
                    j.insert("agentId".into(), id);
                }
            }
            j.entry("role").or_insert_with(|| "judge".into());
        }
    }
    let suspended = d
        .get(SUSPENDED_AT_NODE_FIELD)
        .and_then(Value::as_str)
        .is_some_and(|n| n.starts_with("clarification"));
    if suspended && d.get("status").and_then(Value::as_str) == Some("running") {
        d.insert("status".into(), "awaiting_clarifications".into());
        for group in d
            .get_mut("clarifications")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            for item in group
                .get_mut("items")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(i) = item.as_object_mut() {
                    if i.get("answer").and_then(Value::as_str) == Some("") {
                        i.remove("answer");
                    }
                }
            }
        }
    }
    d.entry("currentRound").or_insert(Value::from(0));
    for round in d
        .get_mut("rounds")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let Some(r) = round.as_object_mut() else {
            continue;
        };
        for c in r
            .get_mut("contributions")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(c) = c.as_object_mut() {
                let m = c
                    .entry("metadata")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(m) = m.as_object_mut() {
                    fill_usage(m);
                    convert_tool_calls(m);
                }
            }
        }
        for s in r
            .get_mut("summaries")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flat_map(|m| m.values_mut())
        {
            summary_defaults(s);
        }
    }
    if let Some(s) = d.get_mut("judgeSummary") {
        summary_defaults(s);
    }
    true
}

/// dialectic's optional usage fields, as Parley requires them.
fn fill_usage(m: &mut Map<String, Value>) {
    m.entry("tokensUsed").or_insert(Value::from(0));
    m.entry("latencyMs").or_insert(Value::from(0));
    m.entry("model").or_insert(Value::from(""));
}

fn summary_defaults(s: &mut Value) {
    if let Some(m) = s.get_mut("metadata").and_then(Value::as_object_mut) {
        fill_usage(m);
    }
}

/// dialectic's `toolCalls` (`{id, name, arguments}`) and `toolResults` (`{tool_call_id,
/// content}`) as Parley's records: the tool, its arguments (cut), the result's size.
fn convert_tool_calls(m: &mut Map<String, Value>) {
    let results = m.remove("toolResults");
    m.remove("toolCallIterations");
    let Some(Value::Array(calls)) = m.remove("toolCalls") else {
        return;
    };
    let result_of = |id: &str| {
        results
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|r| r.get("tool_call_id").and_then(Value::as_str) == Some(id))
    };
    let records: Vec<Value> = calls
        .iter()
        .filter_map(|c| {
            let tool = c.get("name")?.as_str()?;
            let arguments: String = match c.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            let result = c
                .get("id")
                .and_then(Value::as_str)
                .and_then(result_of)
                .and_then(|r| r.get("content"))
                .and_then(Value::as_str);
            let record = ToolCallRecord {
                tool: tool.to_string(),
                arguments: arguments
                    .chars()
                    .take(ToolCallRecord::MAX_ARGUMENTS_CHARS)
                    .collect(),
                result_bytes: result.map_or(0, str::len),
                ok: true,
                error: None,
            };
            serde_json::to_value(record).ok()
        })
        .collect();
    m.insert("toolCalls".into(), Value::Array(records));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DebateStatus;

    fn fixture(id: &str) -> Vec<u8> {
        let path = format!(
            "{}/../cli/tests/fixtures/dialectic/debates/{id}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn dialectics_completed_debate_is_read() {
        let s = parse_saved_state(&fixture("deb-20261124-150638-6oja")).unwrap();
        assert_eq!(s.id, "deb-20261124-150638-6oja");
        assert!(crate::is_valid_debate_id(&s.id));
        assert_eq!(s.status, DebateStatus::Completed);
        assert_eq!(s.rounds.len(), 2);
        assert_eq!(s.rounds[0].contributions.len(), 12);
        let judge = s.prompt_sources.judge.as_ref().unwrap();
        assert_eq!(judge.agent_id, "judge-main");
        let sol = s.final_solution.as_ref().unwrap();
        assert_eq!(sol.confidence, 82.0);
        assert_eq!(sol.tradeoffs.len(), 2);
        assert!(s.judge_summary.is_some());
        assert!(!s.rounds[1].summaries.is_empty());
        assert!(s.total_tokens() > 0);
    }

    #[test]
    fn dialectics_suspended_debate_waits_for_answers() {
        let s = parse_saved_state(&fixture("deb-20261124-150649-88u1")).unwrap();
        assert_eq!(s.status, DebateStatus::AwaitingClarifications);
        assert!(s.prompt_sources.agents.is_empty());
        let pending = crate::pending_clarifications(&s.clarifications);
        assert_eq!(pending.iter().map(|g| g.items.len()).sum::<usize>(), 4);
    }

    #[test]
    fn user_feedback_and_tool_calls_are_kept() {
        let mut doc: Value = serde_json::from_slice(&fixture("deb-20261124-151859-fayh")).unwrap();
        doc["userFeedback"] = Value::from(-1);
        doc["rounds"][0]["contributions"][0]["metadata"] = serde_json::json!({
            "toolCalls": [{"id": "c1", "name": "file_read", "arguments": "{\"path\":\"a.rs\"}"}],
            "toolResults": [{"tool_call_id": "c1", "role": "tool", "content": "fn main() {}"}],
            "toolCallIterations": 1
        });
        let s = saved_state_from_value(doc).unwrap();
        assert_eq!(s.user_feedback, Some(-1));
        let m = &s.rounds[0].contributions[0].metadata;
        assert_eq!(m.tool_calls.len(), 1);
        assert_eq!(m.tool_calls[0].tool, "file_read");
        assert_eq!(m.tool_calls[0].result_bytes, 12);
        assert_eq!(
            s.clarifications[0].items[0].answer.as_deref().map(str::len),
            Some(48)
        );
        // Written back as Parley's state, the feedback stays.
        let again = serde_json::to_value(&s).unwrap();
        assert_eq!(again["userFeedback"], -1);
    }

    #[test]
    fn neither_form_gets_parleys_error() {
        for bad in [
            &b"{}"[..],
            br#"{"id":"x","problem":"p","status":"completed"}"#,
            br#"{"id":"x","problem":"p","status":"done","rounds":[]}"#,
            b"[1,2]",
        ] {
            let e = parse_saved_state(bad).unwrap_err().to_string();
            assert!(
                e.contains("missing field")
                    || e.contains("unknown variant")
                    || e.contains("invalid type"),
                "{e}"
            );
        }
    }
}
