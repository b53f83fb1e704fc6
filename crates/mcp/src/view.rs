//! What the tools return about a debate, read from its state (JSON, as the engine wrote it)
//! and its latest event's progress: tolerant of fields a newer engine adds or an older one
//! lacks.

use serde::Serialize;
use serde_json::{json, Value};

/// Where a debate is, from its latest event (`progress`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Progress {
    /// The event's sequence number (0: no event seen).
    pub seq: u64,
    pub phase: String,
    pub round: u64,
    pub rounds: u64,
    /// Tasks done and planned in the current step.
    pub done: u64,
    pub total: u64,
    /// The event's type (`taskCompleted`, `debateCompleted`, ...).
    #[serde(skip)]
    pub kind: String,
}

impl Progress {
    /// From an event's JSON; `None` when it is not an event.
    pub fn from_event(event: &Value) -> Option<Self> {
        let seq = event.get("seq")?.as_u64()?;
        let p = event.get("progress");
        let num = |k: &str| p.and_then(|p| p.get(k)).and_then(Value::as_u64);
        Some(Self {
            seq,
            phase: p
                .and_then(|p| p.get("phase"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            round: num("round").unwrap_or(0),
            rounds: num("rounds").unwrap_or(0),
            done: num("done").unwrap_or(0),
            total: num("total").unwrap_or(0),
            kind: event
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        })
    }

    /// True for an event after which the debate waits for someone: it ended, or it asks
    /// questions.
    pub fn is_rest(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "debateCompleted" | "debateFailed" | "debateCancelled" | "clarificationsRequested"
        )
    }

    /// `proposal, round 1/2, 3/6 tasks`.
    pub fn describe(&self) -> String {
        let phase = if self.phase.is_empty() {
            "starting"
        } else {
            &self.phase
        };
        format!(
            "{phase}, round {}/{}, {}/{} tasks",
            self.round, self.rounds, self.done, self.total
        )
    }
}

/// The debate's status (`running`, `completed`, ...), as the state says.
pub fn status(state: &Value) -> &str {
    state
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
}

/// True when the debate does not move until someone acts: it ended, or waits for answers.
pub fn is_at_rest(state: &Value) -> bool {
    matches!(
        status(state),
        "completed" | "failed" | "cancelled" | "awaiting_clarifications"
    )
}

/// The questions without an answer: `[{id, agent, question}]`.
pub fn questions_waiting(state: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for group in state
        .get("clarifications")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let agent = group
            .get("agentName")
            .or_else(|| group.get("agentId"))
            .cloned()
            .unwrap_or(Value::Null);
        for item in group
            .get("items")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if item.get("answer").is_none_or(Value::is_null) {
                out.push(json!({
                    "id": item.get("id").cloned().unwrap_or(Value::Null),
                    "agent": agent,
                    "question": item.get("question").cloned().unwrap_or(Value::Null),
                }));
            }
        }
    }
    out
}

/// Calls, tokens and dollars spent so far (`cost_usd` null: a call had no price).
pub fn spent(state: &Value) -> Value {
    let spend = state.get("spend");
    let get = |k: &str| spend.and_then(|s| s.get(k)).cloned();
    json!({
        "calls": get("calls").unwrap_or(json!(0)),
        "tokens": get("totalTokens").unwrap_or(json!(0)),
        "cost_usd": get("costUsd").unwrap_or(Value::Null),
    })
}

/// `debate_status`'s reply.
pub fn status_view(id: &str, state: &Value, progress: &Progress) -> Value {
    let questions = questions_waiting(state);
    let rounds = if progress.rounds > 0 {
        json!(progress.rounds)
    } else {
        Value::Null
    };
    let mut v = json!({
        "debate_id": id,
        "status": status(state),
        "phase": progress.phase,
        "round": state.get("currentRound").cloned().unwrap_or(json!(progress.round)),
        "rounds": rounds,
        "tasks": {"done": progress.done, "total": progress.total},
        "spent": spent(state),
        "questions_waiting": questions,
    });
    if let Some(e) = state.get("error") {
        v["error"] = e.clone();
    }
    v
}

/// `debate_result`'s reply: the solution, the questions to answer, the failure, or where
/// the debate is and the instruction to call again.
pub fn result_view(id: &str, state: &Value, progress: &Progress) -> Value {
    let s = status(state);
    let mut v = json!({"debate_id": id, "status": s, "spent": spent(state)});
    match s {
        "completed" => {
            let sol = state.get("finalSolution").cloned().unwrap_or(Value::Null);
            let list = |k: &str| sol.get(k).cloned().unwrap_or(json!([]));
            v["solution"] = json!({
                "description": sol.get("description").cloned().unwrap_or(Value::Null),
                "tradeoffs": list("tradeoffs"),
                "recommendations": list("recommendations"),
                "unresolved_disagreements": list("unresolvedDisagreements"),
                "open_questions": list("openQuestions"),
                "unmet_requirements": list("unfulfilledMajorRequirements"),
                "confidence": sol.get("confidence").cloned().unwrap_or(Value::Null),
            });
            v["report"] = json!(format!("parley://debates/{id}/report"));
            v["message"] = json!("the debate is complete");
        }
        "awaiting_clarifications" => {
            let q = questions_waiting(state);
            v["message"] = json!(format!(
                "the debate waits for answers to {} question(s): call answer_questions with \
                 their ids, then debate_result again",
                q.len()
            ));
            v["questions_waiting"] = json!(q);
        }
        "failed" => {
            let e = state.get("error").cloned().unwrap_or(Value::Null);
            v["message"] = json!(format!(
                "the debate failed at {}: {}",
                e.get("node").and_then(Value::as_str).unwrap_or("?"),
                e.get("message").and_then(Value::as_str).unwrap_or("?")
            ));
            v["error"] = e;
        }
        "cancelled" => {
            v["message"] = json!("the debate was cancelled");
        }
        _ => {
            v["phase"] = json!(progress.phase);
            v["round"] = json!(progress.round);
            v["rounds"] = json!(progress.rounds);
            v["tasks"] = json!({"done": progress.done, "total": progress.total});
            v["message"] = json!(format!(
                "still running ({}); call debate_result again",
                progress.describe()
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> Value {
        json!({
            "id": "deb-20260101-000000-abc123",
            "status": "awaiting_clarifications",
            "currentRound": 0,
            "clarifications": [
                {"agentId": "a", "agentName": "Arch", "role": "architect", "items": [
                    {"id": "a-q1", "question": "How many tenants?", "answer": "40k"},
                    {"id": "a-q2", "question": "Which region?"},
                ]},
            ],
            "spend": {"calls": 3, "totalTokens": 1200, "costUsd": 0.01, "participants": {}},
        })
    }

    #[test]
    fn questions_waiting_are_the_unanswered_ones() {
        let q = questions_waiting(&state());
        assert_eq!(q.len(), 1);
        assert_eq!(q[0]["id"], "a-q2");
        assert_eq!(q[0]["agent"], "Arch");
        assert!(is_at_rest(&state()));
        let v = result_view("d", &state(), &Progress::default());
        assert!(v["message"].as_str().unwrap().contains("answer_questions"));
        assert_eq!(v["spent"]["tokens"], 1200);
    }

    #[test]
    fn a_running_debate_says_where_it_is_and_to_call_again() {
        let event = json!({"seq": 9, "type": "taskCompleted",
            "progress": {"round": 1, "rounds": 2, "phase": "critique", "done": 3, "total": 6}});
        let p = Progress::from_event(&event).unwrap();
        assert!(!p.is_rest());
        let v = result_view("d", &json!({"status": "running"}), &p);
        assert_eq!(
            v["message"],
            "still running (critique, round 1/2, 3/6 tasks); call debate_result again"
        );
        let s = status_view("d", &json!({"status": "running", "currentRound": 1}), &p);
        assert_eq!(s["tasks"]["total"], 6);
        assert_eq!(s["phase"], "critique");
    }

    #[test]
    fn a_completed_debate_returns_its_solution() {
        let st = json!({"status": "completed", "finalSolution": {
            "description": "Shard by tenant", "tradeoffs": ["cost"], "recommendations": [],
            "unresolvedDisagreements": ["cache or not"], "confidence": 82.0,
            "synthesizedBy": "judge"}});
        let v = result_view("d", &st, &Progress::default());
        assert_eq!(v["solution"]["description"], "Shard by tenant");
        assert_eq!(v["solution"]["unresolved_disagreements"][0], "cache or not");
        assert_eq!(v["report"], "parley://debates/d/report");
    }
}
