//! Clarification tasks: the prompt that asks an agent for questions about the problem, the
//! JSON shape of its reply ([`questions_schema`]), and a lenient parser of that reply
//! ([`parse_questions`]).
//!
//! The reply asked for is `{"questions": [{"text": "..."}]}`. Also read: a bare array (of
//! strings or of objects), objects with `question` instead of `text` (dialectic's replies),
//! and any of these inside a Markdown code fence or surrounded by prose. A reply that holds
//! none of these is not an error: the agent asks nothing and the task carries a warning.

use parley_protocol::{clarifications_text, AgentClarifications};
use serde_json::Value;

use crate::roles::RolePrompts;

/// The JSON schema of a clarification reply, for providers that take a structured-output
/// schema (`response_format` / `json_schema`).
pub fn questions_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": { "text": { "type": "string" } },
                    "required": ["text"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["questions"],
        "additionalProperties": false
    })
}

/// The name a structured-output request gives [`questions_schema`].
pub const QUESTIONS_SCHEMA_NAME: &str = "clarification_questions";

/// What the reply must look like, appended to every clarification prompt (built-in or the
/// agent's own), so the parser can read it.
pub const REPLY_FORMAT: &str = "Reply with JSON only, no other text, in this shape: \
{\"questions\": [{\"text\": \"your question\"}]}. If nothing needs clarifying, reply \
{\"questions\": []}.";

/// The user prompt of a clarification task: the agent's own instruction (its
/// `clarificationPromptPath` text) or the role's built-in one, the problem, the questions
/// already asked with their answers (follow-up iterations), the limit and the reply format.
pub fn prompt(
    role: &RolePrompts,
    custom: Option<&str>,
    problem: &str,
    context: Option<&str>,
    earlier: &[AgentClarifications],
    max_questions: u32,
) -> String {
    let instruction = match custom.filter(|c| !c.trim().is_empty()) {
        Some(c) => c.trim().to_string(),
        None => format!(
            "Before the debate starts you may ask the person who posed this problem a few \
questions. Ask only what you need to know about {} and cannot reasonably assume: \
requirements, constraints, scale, the environment. Each question should be short, specific \
and answerable in a sentence. Ask nothing when the problem is clear enough.",
            role.focus
        ),
    };
    let mut out = format!("{instruction}\n\nProblem:\n{problem}\n");
    if let Some(c) = context.filter(|c| !c.trim().is_empty()) {
        out.push_str(&format!("\nAdditional context:\n{c}\n"));
    }
    let asked = clarifications_text(earlier);
    if !asked.is_empty() {
        out.push_str(&format!(
            "\nQuestions already asked and their answers (NA = no answer):\n{asked}\nAsk only \
follow-up questions these answers raise; do not ask any of them again.\n"
        ));
    }
    out.push_str(&format!(
        "\nAsk at most {max_questions} question(s). {REPLY_FORMAT}"
    ));
    out
}

/// The questions in a clarification reply, or `None` when the reply holds no list of
/// questions in any accepted shape (see the module docs). Empty and blank questions are
/// dropped.
pub fn parse_questions(reply: &str) -> Option<Vec<String>> {
    for candidate in candidates(reply) {
        if let Ok(v) = serde_json::from_str::<Value>(candidate) {
            if let Some(qs) = questions_of(&v) {
                return Some(qs);
            }
        }
    }
    None
}

/// Texts that may be the JSON: the whole reply, each fenced block, and the span from the
/// first `{` / `[` to the last `}` / `]`.
fn candidates(reply: &str) -> Vec<&str> {
    let mut out = vec![reply.trim()];
    let mut rest = reply;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        // Skip the info string (`json`) up to the end of the line.
        let body_start = after.find('\n').map_or(after.len(), |n| n + 1);
        let body = &after[body_start..];
        let Some(end) = body.find("```") else { break };
        out.push(body[..end].trim());
        rest = &body[end + 3..];
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        if let (Some(a), Some(b)) = (reply.find(open), reply.rfind(close)) {
            if a < b {
                out.push(&reply[a..=b]);
            }
        }
    }
    out
}

fn questions_of(v: &Value) -> Option<Vec<String>> {
    let list = match v {
        Value::Array(items) => items,
        Value::Object(m) => m
            .get("questions")
            .or_else(|| m.get("clarifications"))?
            .as_array()?,
        _ => return None,
    };
    let mut out = Vec::new();
    for item in list {
        let text = match item {
            Value::String(s) => Some(s.as_str()),
            Value::Object(m) => ["text", "question", "q"]
                .iter()
                .find_map(|k| m.get(*k).and_then(Value::as_str)),
            _ => None,
        };
        match text {
            Some(t) if !t.trim().is_empty() => out.push(t.trim().to_string()),
            Some(_) => {}
            // A list of something else is not a list of questions.
            None => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_protocol::ClarificationItem;

    #[test]
    fn the_shapes_agents_reply_in_are_read() {
        let q = |s: &str| parse_questions(s);
        let two = Some(vec!["Scale?".to_string(), "Budget?".to_string()]);
        assert_eq!(
            q(r#"{"questions": [{"text": "Scale?"}, {"text": "Budget?"}]}"#),
            two
        );
        assert_eq!(q(r#"["Scale?", "Budget?"]"#), two);
        assert_eq!(
            q(r#"{"questions": [{"id": "1", "question": "Scale?"}, {"question": "Budget?"}]}"#),
            two
        );
        assert_eq!(
            q("Sure! Here you go:\n```json\n{\"questions\": [{\"text\": \"Scale?\"}, {\"text\": \"Budget?\"}]}\n```\nThanks"),
            two
        );
        assert_eq!(
            q("Questions: {\"questions\": [\"Scale?\", \" \", \"Budget?\"]} -- end"),
            two
        );
        assert_eq!(q(r#"{"questions": []}"#), Some(vec![]));
    }

    #[test]
    fn replies_without_questions_are_none() {
        for reply in [
            "",
            "I have no questions.",
            "{\"questions\": \"none\"}",
            "{\"answer\": 42}",
            "[1, 2, 3]",
            "```json\n{\"questions\": [\n```",
            "{",
        ] {
            assert_eq!(parse_questions(reply), None, "{reply:?}");
        }
    }

    #[test]
    fn the_prompt_names_the_limit_the_format_and_earlier_answers() {
        let role = crate::roles::role_prompts("security");
        let earlier = vec![AgentClarifications {
            agent_id: "a".into(),
            agent_name: "Sec".into(),
            role: "security".into(),
            items: vec![ClarificationItem {
                id: "a-q1".into(),
                question: "Who are the users?".into(),
                answer: Some("Employees only".into()),
            }],
        }];
        let p = prompt(role, None, "Design a vault", Some("on-prem"), &earlier, 3);
        assert!(p.contains("Design a vault") && p.contains("on-prem"));
        assert!(p.contains("security"));
        assert!(p.contains("at most 3"));
        assert!(p.contains(REPLY_FORMAT));
        assert!(p.contains("Who are the users?") && p.contains("Employees only"));
        let custom = prompt(role, Some("MY OWN INSTRUCTION"), "P", None, &[], 5);
        assert!(custom.starts_with("MY OWN INSTRUCTION"));
        assert!(custom.contains(REPLY_FORMAT));
        // The schema describes the shape the prompt asks for.
        let schema = questions_schema();
        assert_eq!(schema["required"][0], "questions");
        assert_eq!(
            schema["properties"]["questions"]["items"]["required"][0],
            "text"
        );
    }
}
