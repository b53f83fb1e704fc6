//! The driver: debates of mixed shapes submitted at a steady rate (sizes, rounds,
//! adaptive mode, voting, budgets, clarifications), the clarification questions answered
//! as they come, and the provider's replies: each names the call it answers (a nonce
//! `[r<n>]`), and the nonces are kept with the debate, task kind and model they were
//! given for, so the checks can tell where every contribution came from.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parley_testkit::fake_llm::script::kind_of;
use parley_testkit::RecordedRequest;
use serde_json::{json, Value};

use super::history::{History, What};
use super::layout::Layout;
use super::nemesis::Rng;
use crate::{is_done, try_request_on, try_status_on};

/// Every problem names its submission as `soak-<k>;` (and nothing else does).
pub fn problem(seed: u64, k: usize) -> String {
    format!("Design service soak-{k}; for the nemesis of seed {seed}")
}

/// The submission number a prompt's problem names.
pub fn submission_of(prompt: &str) -> Option<usize> {
    let rest = prompt.split("soak-").nth(1)?;
    rest.split(';').next()?.parse().ok()
}

/// The shape of a submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub agents: usize,
    pub rounds: u32,
    pub adaptive: bool,
    pub voting: bool,
    /// A token budget.
    pub budget: Option<u64>,
    pub clarify: bool,
}

impl Shape {
    pub fn draw(rng: &mut Rng) -> Shape {
        let agents = 2 + rng.below(3) as usize;
        let clarify = rng.chance(0.2);
        let voting = !clarify && rng.chance(0.2);
        let adaptive = !voting && rng.chance(0.25);
        // Above the smallest run's reservation (about 110k tokens for 4 agents), so a
        // budget is never refused at submit.
        let budget = rng
            .chance(0.2)
            .then_some(if agents == 4 { 160_000 } else { 130_000 });
        let rounds = if clarify || voting {
            1
        } else {
            1 + rng.below(2) as u32
        };
        Shape {
            agents,
            rounds,
            adaptive,
            voting,
            budget,
            clarify,
        }
    }

    /// The spec of submission `k` (agent `i` on model `model-<i>`, judge on `model-judge`),
    /// with an idempotency key so a submission sent again after a lost reply is one debate.
    pub fn spec(&self, seed: u64, k: usize) -> Value {
        const ROLES: [&str; 4] = ["architect", "security", "kiss", "performance"];
        let agents: Vec<Value> = (0..self.agents)
            .map(|i| {
                let mut a = json!({
                    "id": format!("agent-{i}"), "name": format!("Agent {i}"),
                    "role": ROLES[i], "model": format!("model-{i}"), "temperature": 0.2
                });
                if self.budget.is_some() {
                    a["maxTokens"] = json!(120);
                }
                a
            })
            .collect();
        let mut judge = json!({"id": "judge", "name": "Judge", "role": "generalist",
            "model": "model-judge", "temperature": 0.2});
        if self.budget.is_some() {
            judge["maxTokens"] = json!(120);
        }
        let mut debate = json!({
            "rounds": self.rounds,
            "terminationCondition": {"type": "fixed"},
            // Enough attempts to outlast a burst of provider faults.
            "retry": {"default": {"attempts": 8, "initialBackoffMs": 300, "maxBackoffMs": 3000,
                "timeoutMs": 30000}}
        });
        if self.adaptive {
            debate["mode"] = json!("adaptive");
        }
        if self.voting {
            debate["synthesisMethod"] = json!("voting");
        }
        if let Some(tokens) = self.budget {
            debate["budget"] = json!({"tokens": tokens});
        }
        if self.clarify {
            debate["interactiveClarifications"] = json!(true);
        }
        json!({
            "problem": problem(seed, k),
            "agents": agents,
            "judge": judge,
            "debate": debate,
            "idempotencyKey": format!("soak-{seed}-{k}"),
        })
    }
}

/// One answer the provider gave: for which submission, task kind and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub submission: Option<usize>,
    pub kind: &'static str,
    pub model: String,
}

/// The answers by nonce.
pub type Answers = Arc<Mutex<HashMap<u64, Answer>>>;

/// Installs the soak's responder on the fake LLM: every task kind answered in its shape
/// (JSON where JSON is asked for), each reply carrying its nonce. Adaptive verdicts agree
/// for even submissions; agents `0` and `2` ask one clarification question, none in a
/// follow-up; votes go to the next agent.
pub fn install_responder(layout: &Layout) -> Answers {
    let answers: Answers = Arc::new(Mutex::new(HashMap::new()));
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (a, c) = (answers.clone(), counter.clone());
    layout.fake.set_responder(move |r: &RecordedRequest| {
        let n = c.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let prompt = r.prompt_text();
        let kind = kind_of(&prompt);
        let k = submission_of(&prompt);
        a.lock().unwrap_or_else(|e| e.into_inner()).insert(
            n,
            Answer {
                submission: k,
                kind,
                model: r.model.clone(),
            },
        );
        reply(kind, k, &prompt, &r.model, n)
    });
    answers
}

fn reply(kind: &str, k: Option<usize>, prompt: &str, model: &str, n: u64) -> String {
    let nonce = format!("[r{n}]");
    match kind {
        "clarify" => {
            let asks = !prompt.contains("Questions already asked")
                && (model == "model-0" || model == "model-2");
            let questions: Vec<Value> = if asks {
                vec![json!({"text": format!("How many users does {model} plan for? {nonce}")})]
            } else {
                Vec::new()
            };
            json!({ "questions": questions }).to_string()
        }
        "verdict" => {
            let done = k.is_some_and(|k| k % 2 == 0);
            json!({
                "reasoning": format!("verdict {nonce}"),
                "verdict": if done { "done" } else { "continue" },
                "confidence": if done { 90 } else { 40 },
                "openIssues": [],
            })
            .to_string()
        }
        "vote" => {
            let candidates: Vec<&str> = prompt
                .rsplit_once("The vote must be one of: ")
                .map(|(_, rest)| rest.trim_end().trim_end_matches('.'))
                .unwrap_or_default()
                .split(", ")
                .filter(|s| !s.is_empty())
                .collect();
            let choice = candidates.first().copied().unwrap_or_default();
            json!({"vote": choice, "reason": format!("clearest {nonce}")}).to_string()
        }
        "synthesize" => json!({
            "solutionMarkdown": format!("Soak synthesis from {model} {nonce}"),
            "description": format!("Soak synthesis from {model} {nonce}"),
            "tradeoffs": ["one more component"],
            "recommendations": ["measure first"],
            "unfulfilledMajorRequirements": [],
            "openQuestions": [],
            "unresolvedDisagreements": [],
            "confidence": 80
        })
        .to_string(),
        "evaluate" => json!({"reasoning": format!("ok {nonce}"), "confidence": 50}).to_string(),
        kind => format!("A {kind} from {model}: bound the queue and retry with backoff. {nonce}"),
    }
}

/// The nonces `[r<n>]` in a text.
pub fn nonces(text: &str) -> Vec<u64> {
    text.split("[r")
        .skip(1)
        .filter_map(|s| s.split(']').next()?.parse().ok())
        .collect()
}

/// What the driver knows of a submission.
#[derive(Debug, Clone)]
pub struct Submission {
    pub k: usize,
    pub shape: Shape,
    /// The debate id, once accepted.
    pub id: Option<String>,
    /// The refusal, when the submission was refused (not retried).
    pub refused: Option<String>,
}

/// The submissions by number.
pub type Submissions = Arc<Mutex<BTreeMap<usize, Submission>>>;

/// Submits `count` debates, one every `every`, each in a task of its own that sends it
/// again (with the same idempotency key) until a reply comes, for up to 3 minutes;
/// returns when every submission has its answer.
pub async fn submit_all(
    layout: Arc<Layout>,
    seed: u64,
    count: usize,
    every: Duration,
    history: History,
    subs: Submissions,
) {
    let mut rng = Rng::new(seed ^ 0x5EED_D41E);
    let mut tasks = Vec::new();
    let begin = history.now();
    for k in 0..count {
        let due = begin + every * k as u32;
        let now = history.now();
        if due > now {
            tokio::time::sleep(due - now).await;
        }
        let shape = Shape::draw(&mut rng);
        let spec = shape.spec(seed, k);
        subs.lock().unwrap_or_else(|e| e.into_inner()).insert(
            k,
            Submission {
                k,
                shape,
                id: None,
                refused: None,
            },
        );
        let (layout, history, subs) = (layout.clone(), history.clone(), subs.clone());
        tasks.push(tokio::spawn(async move {
            history.log(What::Submit { k });
            let body = serde_json::to_vec(&spec).unwrap_or_default();
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_secs(180) {
                match try_request_on(&layout.client, "parley.debates.submit", body.clone()).await {
                    Ok(r) if r["debateId"].is_string() => {
                        let id = r["debateId"].as_str().unwrap_or_default().to_string();
                        history.log(What::Accepted { k, id: id.clone() });
                        if let Some(s) = subs.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&k)
                        {
                            s.id = Some(id);
                        }
                        return;
                    }
                    Ok(r)
                        if matches!(
                            r["error"]["code"].as_str(),
                            Some("unavailable" | "internal")
                        ) => {}
                    Ok(r) => {
                        history.log(What::Refused {
                            k,
                            reply: r.to_string(),
                        });
                        if let Some(s) = subs.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&k)
                        {
                            s.refused = Some(r.to_string());
                        }
                        return;
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            history.note(format!("submission #{k}: no reply in 3 minutes"));
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Answers the clarification questions of every accepted clarifying debate while `until`
/// is not set: polls each such debate's status every second.
pub async fn answer_clarifications(
    layout: Arc<Layout>,
    subs: Submissions,
    history: History,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut finished: std::collections::HashSet<String> = Default::default();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let ids: Vec<String> = subs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|s| s.shape.clarify)
            .filter_map(|s| s.id.clone())
            .filter(|id| !finished.contains(id))
            .collect();
        for id in ids {
            let Ok(state) = try_status_on(&layout.client, &id).await else {
                continue;
            };
            if is_done(&state) {
                finished.insert(id);
                continue;
            }
            if state["status"] != "awaiting_clarifications" {
                continue;
            }
            let answers: Vec<Value> = state["clarifications"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["items"].as_array().cloned().unwrap_or_default())
                .filter(|i| i["answer"].is_null() || i["answer"] == "")
                .filter_map(|i| {
                    let qid = i["id"].as_str()?;
                    Some(json!({"id": qid, "answer": format!("About 10k users ({qid})")}))
                })
                .collect();
            if answers.is_empty() {
                continue;
            }
            let body = json!({"debateId": id, "answers": answers});
            let r = try_request_on(
                &layout.client,
                "parley.debates.answer",
                serde_json::to_vec(&body).unwrap_or_default(),
            )
            .await;
            if matches!(&r, Ok(v) if v.get("error").is_none()) {
                history.log(What::Answered {
                    id: id.clone(),
                    questions: answers.len(),
                });
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
