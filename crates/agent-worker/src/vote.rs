//! Vote tasks (`synthesisMethod: "voting"`): after the final round every agent votes for the
//! best final refinement other than its own. The prompt lists the candidates by agent id;
//! the reply asked for is `{"vote": "<agent id>", "reason": "..."}` (structured output where
//! the provider takes it). The parser also reads it fenced or inside prose; a reply without
//! a vote is not an error: the vote is recorded invalid (by the coordinator) with a warning.

use parley_protocol::{Ballot, PeerText};
use serde_json::Value;

/// The name a structured-output request gives [`vote_schema`].
pub const VOTE_SCHEMA_NAME: &str = "agent_vote";

/// The first words of every vote prompt (tests and the benchmark recognise votes by them).
pub const VOTE_HEADER: &str = "Vote for the best final solution";

/// The JSON schema of a vote.
pub fn vote_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "vote": { "type": "string" },
            "reason": { "type": "string" }
        },
        "required": ["vote", "reason"],
        "additionalProperties": false
    })
}

/// The user prompt of a vote: the problem, the agent's own final text (for reference), the
/// candidates by id, the rule (not its own) and the reply format.
pub fn prompt(problem: &str, own: Option<&PeerText>, candidates: &[PeerText]) -> String {
    let ids: Vec<&str> = candidates.iter().map(|c| c.agent_id.as_str()).collect();
    let mut out = format!(
        "{VOTE_HEADER} among the other agents' final refinements below. Judge which best \
solves the problem as stated; you may not vote for your own.\n\nProblem:\n{problem}\n"
    );
    if let Some(o) = own {
        out.push_str(&format!(
            "\nYour agent id is {}. Your own final refinement (not a candidate):\n{}\n",
            o.agent_id, o.content
        ));
    }
    for c in candidates {
        out.push_str(&format!(
            "\n### Candidate {} ({})\n{}\n",
            c.agent_id, c.agent_role, c.content
        ));
    }
    out.push_str(&format!(
        "\nReply with JSON only, no other text, in this shape: {{\"vote\": \"<agent id>\", \
\"reason\": \"why, in one or two sentences\"}}. The vote must be one of: {}.",
        ids.join(", ")
    ));
    out
}

/// The ballot in a vote reply (bare JSON, fenced, or inside prose); `None` without a
/// non-empty `vote` string.
pub fn parse_vote(text: &str) -> Option<Ballot> {
    let t = text.trim();
    let candidates = std::iter::once(t).chain(t.match_indices('{').map(|(i, _)| &t[i..]));
    for c in candidates {
        let end = c.rfind('}').map_or(c.len(), |e| e + 1);
        let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&c[..end]) else {
            continue;
        };
        let vote = m.get("vote").and_then(Value::as_str).map(str::trim)?;
        if vote.is_empty() {
            return None;
        }
        let reason = m
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim()
            .to_string();
        return Some(Ballot {
            vote: vote.to_string(),
            reason,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn votes_are_read_bare_fenced_or_in_prose() {
        let b = parse_vote(r#"{"vote": " a2 ", "reason": "clearest"}"#).unwrap();
        assert_eq!((b.vote.as_str(), b.reason.as_str()), ("a2", "clearest"));
        let b = parse_vote("Sure.\n```json\n{\"vote\": \"a1\", \"reason\": \"x\"}\n```").unwrap();
        assert_eq!(b.vote, "a1");
        assert!(parse_vote("I pick a1").is_none());
        assert!(parse_vote(r#"{"vote": "", "reason": "none"}"#).is_none());
        assert!(parse_vote(r#"{"reason": "no vote"}"#).is_none());
    }

    #[test]
    fn the_prompt_lists_the_candidates_and_the_reply_format() {
        let c = |id: &str| PeerText {
            agent_id: id.into(),
            agent_role: "kiss".into(),
            content: format!("text of {id}"),
        };
        let p = prompt("Design a cache", Some(&c("a0")), &[c("a1"), c("a2")]);
        assert!(p.starts_with(VOTE_HEADER));
        assert!(p.contains("### Candidate a1") && p.contains("text of a2"));
        assert!(p.contains("one of: a1, a2"));
        assert!(!p.contains("### Candidate a0"));
    }
}
