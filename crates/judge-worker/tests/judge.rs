//! The judge's JSON handling: a reply that is not valid JSON is asked for once more with a
//! stricter instruction; after that, evaluation counts as confidence 0 and synthesis keeps
//! the raw text, both with a warning.

use std::sync::Mutex;

use async_trait::async_trait;
use parley_llm::{ChatRequest, ChatResponse, LlmError, Provider};
use parley_protocol::{Task, TaskInput, TaskKind, TaskOutcome, TaskOutput};

/// Answers with the scripted replies in order and records every request.
#[derive(Debug)]
struct Scripted {
    replies: Mutex<Vec<String>>,
    seen: Mutex<Vec<ChatRequest>>,
}

impl Scripted {
    fn new(replies: &[&str]) -> Self {
        Self {
            replies: Mutex::new(replies.iter().rev().map(|s| s.to_string()).collect()),
            seen: Mutex::new(vec![]),
        }
    }
    fn calls(&self) -> Vec<ChatRequest> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.seen.lock().unwrap().push(req.clone());
        let text = self
            .replies
            .lock()
            .unwrap()
            .pop()
            .expect("more calls than scripted replies");
        Ok(ChatResponse {
            text,
            prompt_tokens: 10,
            cached_prompt_tokens: 0,
            completion_tokens: 5,
            model: "judge-model".into(),
            latency_ms: 3,
            rate_limit_reset: None,
            tool_calls: Vec::new(),
            structured: req.response_format.is_some(),
        })
    }
}

fn task(kind: TaskKind) -> Task {
    serde_json::from_value(serde_json::json!({
        "id": "deb-20260101-000000-aaaaaa/1/x/judge",
        "debateId": "deb-20260101-000000-aaaaaa",
        "round": 1,
        "kind": kind,
        "attempt": 1,
        "agent": {"id": "judge", "name": "J", "role": "generalist", "model": "judge-model", "temperature": 0.2},
        "problem": "Design a cache",
        "input": serde_json::to_value(TaskInput { transcript: Some("### a0\nuse LRU".into()), ..Default::default() }).unwrap(),
        "timeoutMs": 10000
    }))
    .unwrap()
}

async fn run(kind: TaskKind, replies: &[&str]) -> (TaskOutput, Vec<ChatRequest>) {
    let p = Scripted::new(replies);
    let r = parley_judge_worker::execute(&task(kind), &p, "test").await;
    let TaskOutcome::Ok(out) = r.outcome else {
        panic!("failed: {:?}", r.outcome)
    };
    (out, p.calls())
}

#[tokio::test]
async fn valid_synthesis_json_takes_one_call() {
    let (out, calls) = run(TaskKind::Synthesize, &[r#"```json
{"description": "Use a write-through LRU", "tradeoffs": ["memory"], "recommendations": ["measure hit rate"], "confidence": 82}
```"#]).await;
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].model, "judge-model");
    assert_eq!(calls[0].temperature, 0.2);
    assert!(calls[0].messages[1].content.contains("\"confidence\""));
    let s = out.solution.unwrap();
    assert_eq!(s.description, "Use a write-through LRU");
    assert_eq!(s.confidence, 82.0);
    assert_eq!(s.synthesized_by, "judge");
    assert!(out.warnings.is_empty());
    assert_eq!(out.metadata.tokens_used, 15);
}

#[tokio::test]
async fn invalid_json_is_retried_once_with_a_stricter_instruction() {
    let (out, calls) = run(
        TaskKind::Evaluate,
        &[
            "I think it is pretty good.",
            r#"{"confidence": 91, "reasoning": "converged"}"#,
        ],
    )
    .await;
    assert_eq!(calls.len(), 2);
    let second = &calls[1].messages;
    assert_eq!(second[2].role, "assistant");
    assert_eq!(second[2].content, "I think it is pretty good.");
    assert!(
        second[3].content.contains("ONLY the JSON object"),
        "{}",
        second[3].content
    );
    assert_eq!(out.confidence, Some(91.0));
    assert_eq!(out.content, "converged");
    assert!(out.warnings.is_empty());
    // Both calls are counted.
    assert_eq!(out.metadata.tokens_used, 30);
}

#[tokio::test]
async fn evaluation_that_is_never_json_counts_as_zero_with_a_warning() {
    let (out, calls) = run(TaskKind::Evaluate, &["nope", "still nope"]).await;
    assert_eq!(calls.len(), 2);
    assert_eq!(out.confidence, Some(0.0));
    assert!(
        out.warnings[0].contains("confidence as 0"),
        "{:?}",
        out.warnings
    );
}

#[tokio::test]
async fn synthesis_that_is_never_json_keeps_the_text_with_a_warning() {
    let (out, _) = run(
        TaskKind::Synthesize,
        &["Plain prose answer.", "More prose."],
    )
    .await;
    let s = out.solution.unwrap();
    assert_eq!(s.description, "Plain prose answer.");
    assert_eq!(s.confidence, 0.0);
    assert!(
        out.warnings[0].contains("not valid JSON"),
        "{:?}",
        out.warnings
    );
}

#[tokio::test]
async fn judge_summary_is_cut_to_max_length() {
    let mut t = task(TaskKind::JudgeSummarize);
    t.input.max_length = Some(5);
    let p = Scripted::new(&["a long summary"]);
    let r = parley_judge_worker::execute(&t, &p, "test").await;
    let TaskOutcome::Ok(out) = r.outcome else {
        panic!()
    };
    assert_eq!(out.content, "a lon");
}
