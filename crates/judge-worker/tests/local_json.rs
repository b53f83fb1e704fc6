//! The judge on the local model answers in valid JSON every time: synthesis, evaluation,
//! and (the same mechanism the agents' clarification questions use) a clarification-
//! questions schema, on several problems, by constrained decoding, never by retrying.
//!
//! Loads the real model (SmolLM2-135M-Instruct); when it is missing the test runs
//! `scripts/fetch-model.sh` first.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parley_llm::local::LocalProvider;
use parley_llm::{ChatMessage, ChatRequest, Provider, ResponseFormat};
use parley_protocol::{Task, TaskInput, TaskKind, TaskOutcome};
use serde_json::{json, Value};

/// The local provider, counting calls: a reply that did not parse would cost a second one.
#[derive(Debug, Clone)]
struct Counted {
    inner: LocalProvider,
    calls: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Provider for Counted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn complete(
        &self,
        req: &ChatRequest,
    ) -> Result<parley_llm::ChatResponse, parley_llm::LlmError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.complete(req).await
    }
}

fn provider() -> LocalProvider {
    let path = parley_local::default_model_path();
    if !path.is_file() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(parley_local::FETCH_COMMAND);
        let status = Command::new("bash").arg(&script).status().unwrap();
        assert!(status.success(), "{} failed", script.display());
    }
    LocalProvider::new(Arc::new(
        parley_local::LocalModel::load(&path).unwrap_or_else(|e| panic!("{e}")),
    ))
}

const PROBLEMS: &[(&str, &str)] = &[
    (
        "Design a rate limiter for a public REST API",
        "### architect\nUse a token bucket per API key in Redis, refilled by a Lua script.\n\n### security\nAlso limit by IP before authentication, and return 429 with Retry-After.",
    ),
    (
        "Design a URL shortener service: API, storage, and how to scale reads",
        "### architect\nBase62 ids from a counter, a key-value store, and a CDN cache for redirects.\n\n### performance\nRead-through cache in front of the store; shard by id.",
    ),
    (
        "Design a nightly billing job for 10 million accounts",
        "### architect\nPartition accounts into batches processed by workers from a queue.\n\n### testing\nMake each batch idempotent so a rerun never double-bills.",
    ),
];

fn task(kind: TaskKind, problem: &str, transcript: &str, n: usize) -> Task {
    serde_json::from_value(json!({
        "id": format!("deb-20260101-000000-aaaaa{n}/1/x/judge"),
        "debateId": format!("deb-20260101-000000-aaaaa{n}"),
        "round": 1,
        "kind": kind,
        "attempt": 1,
        "agent": {"id": "judge", "name": "Judge", "role": "generalist", "model": "local", "temperature": 0.3, "maxTokens": 320},
        "problem": problem,
        "input": serde_json::to_value(TaskInput { transcript: Some(transcript.into()), ..Default::default() }).unwrap(),
        "timeoutMs": 300000
    }))
    .unwrap()
}

/// Clarification questions in dialectic's shape (`{"questions": [{"text": ...}]}`).
fn clarification_format() -> ResponseFormat {
    ResponseFormat::strict(
        "clarification_questions",
        json!({
            "type": "object",
            "properties": {
                "questions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"text": {"type": "string"}},
                        "required": ["text"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["questions"],
            "additionalProperties": false
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_judge_json_parses_for_every_schema_on_several_problems() {
    let p = Counted {
        inner: provider(),
        calls: Arc::new(AtomicUsize::new(0)),
    };
    let mut runs = Vec::new();
    for (n, (problem, transcript)) in PROBLEMS.iter().enumerate() {
        let p = p.clone();
        runs.push(tokio::spawn(async move {
            let synth = parley_judge_worker::execute(
                &task(TaskKind::Synthesize, problem, transcript, n),
                &p,
                "test",
            )
            .await;
            let eval = parley_judge_worker::execute(
                &task(TaskKind::Evaluate, problem, transcript, n),
                &p,
                "test",
            )
            .await;
            let questions = p
                .complete(&ChatRequest {
                    model: "local".into(),
                    messages: vec![
                        ChatMessage::system(
                            "You are a software architect preparing a design debate.",
                        ),
                        ChatMessage::user(format!(
                            "Problem:\n{problem}\n\nAsk up to 3 short clarifying questions about \
                             requirements the problem leaves open. Reply with a JSON object: \
                             {{\"questions\": [{{\"text\": string}}]}}."
                        )),
                    ],
                    temperature: 0.5,
                    max_tokens: Some(200),
                    timeout: Duration::from_secs(300),
                    seed: Some(n as u64),
                    response_format: Some(clarification_format()),
                    tools: Default::default(),
                })
                .await;
            (synth, eval, questions)
        }));
    }
    for (run, (problem, _)) in runs.into_iter().zip(PROBLEMS) {
        let (synth, eval, questions) = run.await.unwrap();

        let TaskOutcome::Ok(out) = synth.outcome else {
            panic!("{problem}: synthesis failed: {:?}", synth.outcome)
        };
        assert!(out.warnings.is_empty(), "{problem}: {:?}", out.warnings);
        let v: Value = serde_json::from_str(&out.content)
            .unwrap_or_else(|e| panic!("{problem}: synthesis is not JSON ({e}): {}", out.content));
        for key in [
            "solutionMarkdown",
            "tradeoffs",
            "recommendations",
            "unfulfilledMajorRequirements",
            "openQuestions",
            "confidence",
        ] {
            assert!(v.get(key).is_some(), "{problem}: no {key} in {v}");
        }
        let solution = out.solution.unwrap();
        assert!(!solution.description.trim().is_empty());
        assert!((0.0..=100.0).contains(&solution.confidence));

        let TaskOutcome::Ok(out) = eval.outcome else {
            panic!("{problem}: evaluation failed: {:?}", eval.outcome)
        };
        assert!(out.warnings.is_empty(), "{problem}: {:?}", out.warnings);
        let c = out.confidence.unwrap();
        assert!((0.0..=100.0).contains(&c), "{problem}: {c}");
        assert!(!out.content.trim().is_empty(), "{problem}: empty reasoning");

        let q = questions.unwrap_or_else(|e| panic!("{problem}: {e}"));
        assert!(q.structured);
        let v: Value = serde_json::from_str(&q.text)
            .unwrap_or_else(|e| panic!("{problem}: questions are not JSON ({e}): {}", q.text));
        let list = v["questions"].as_array().unwrap();
        assert!(
            list.iter()
                .all(|x| x["text"].as_str().is_some_and(|t| !t.trim().is_empty())),
            "{v}"
        );
        eprintln!("{problem}:\n  questions {v}");
    }
    // One call per ask: every constrained reply parsed the first time, no stricter retry.
    assert_eq!(p.calls.load(Ordering::SeqCst), 3 * PROBLEMS.len());
}
