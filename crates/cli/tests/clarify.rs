//! Clarifications end to end, embedded: `parley run --clarify` as a subprocess against the
//! fake LLM — answered from `--answers F`, typed through a pseudo-terminal, interrupted
//! with Ctrl-C while it waits and continued with `parley resume` — and the fake server's
//! later prompts carry the answers.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use parley_testkit::{parley_command, send_signal, FakeLlm, OnPty, RecordedRequest};
use parley_tests::{clarification_answers, read_json, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");
/// Every clarification prompt ends with the reply format (agent-worker's `clarify`).
const CLARIFY: &str = "{\"questions\": [{\"text\": \"your question\"}]}";
/// Follow-up iterations list the earlier questions.
const FOLLOW_UP: &str = "Questions already asked and their answers";
/// How long a pseudo-terminal test waits for a prompt or an exit.
const WAIT: Duration = Duration::from_secs(60);

fn command(dir: &Path, args: &[&str]) -> tokio::process::Command {
    parley_command(PARLEY, dir, args)
}

async fn parley(dir: &Path, args: &[&str]) -> Output {
    command(dir, args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run parley")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// 3 agents, 1 round (3 proposals, 6 critiques, 3 refinements, 1 synthesis: 13 calls after
/// the clarifications).
fn write_config(dir: &Path, base_url: &str) {
    let cfg = json!({
        "baseUrl": base_url,
        "agents": [
            {"id": "agent-architect", "name": "Architect", "role": "architect", "model": "model-arch"},
            {"id": "agent-security", "name": "Security", "role": "security", "model": "model-sec"},
            {"id": "agent-kiss", "name": "Kiss", "role": "kiss", "model": "model-kiss"}
        ],
        "judge": {"id": "judge-main", "name": "Judge", "role": "generalist", "model": "model-judge"},
        "debate": {"rounds": 1, "terminationCondition": {"type": "fixed"}}
    });
    write_json(dir.join("debate-config.json"), &cfg);
}

/// Clarification replies: iteration 1 the architect asks two questions (one twice), the
/// security agent one in a code fence, kiss replies with prose (malformed: asks nothing);
/// every follow-up iteration the architect asks about peak load (a repeat after the first
/// time: de-duplicated). Other prompts get a proposal text, or a synthesis when JSON is
/// asked for.
fn responder(r: &RecordedRequest) -> String {
    let prompt = r.prompt_text();
    if prompt.contains(CLARIFY) {
        let follow_up = prompt.contains(FOLLOW_UP);
        return match (r.model.as_str(), follow_up) {
            ("model-arch", false) => json!({"questions": [
                {"text": "How many users?"}, {"text": "how many  users?"}, {"text": "Which cloud?"}
            ]})
            .to_string(),
            ("model-arch", true) => {
                json!({"questions": [{"text": "Peak requests per second?"}]}).to_string()
            }
            ("model-sec", false) => {
                "Here:\n```json\n[\"Is there single sign-on?\"]\n```".to_string()
            }
            ("model-kiss", false) => "I would not ask anything, it is clear.".to_string(),
            _ => json!({"questions": []}).to_string(),
        };
    }
    if prompt.contains("JSON") {
        return json!({
            "description": "Synthesized with the answers",
            "tradeoffs": [], "recommendations": [], "confidence": 80
        })
        .to_string();
    }
    format!("A proposal from {}", r.model)
}

fn checkpoint(dir: &Path, id: &str) -> Value {
    let path = dir.join("debates").join(format!("{id}.json"));
    read_json(path)
}

fn saved_id(err: &str) -> String {
    err.lines()
        .find_map(|l| {
            l.trim_start_matches(['\r', '\u{1b}', '[', 'K'])
                .strip_prefix("Saved debate to ./debates/")
        })
        .and_then(|rest| rest.trim_end().strip_suffix(".json"))
        .unwrap_or_else(|| panic!("no 'Saved debate' line in:\n{err}"))
        .to_string()
}

fn clarify_requests(fake: &FakeLlm) -> Vec<RecordedRequest> {
    fake.requests()
        .into_iter()
        .filter(|r| r.prompt_text().contains(CLARIFY))
        .collect()
}

/// Every request after the clarification phase states every answer (its text, or NA).
fn assert_later_prompts_carry(fake: &FakeLlm, answers: &[&str]) {
    let later: Vec<RecordedRequest> = fake
        .requests()
        .into_iter()
        .filter(|r| !r.prompt_text().contains(CLARIFY))
        .collect();
    assert_eq!(later.len(), 13, "one round and a synthesis");
    for r in &later {
        let p = r.prompt_text();
        for a in answers {
            assert!(p.contains(a), "{} prompt lacks {a:?}:\n{p}", r.model);
        }
        assert!(p.contains("How many users?"), "{p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_from_a_file_reach_every_later_prompt_and_the_report() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_responder(responder);
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    std::fs::write(
        dir.path().join("answers.json"),
        json!({
            "agent-architect-q1": "About 10k users",
            "agent-security-q1": "Yes, through Okta",
            "agent-architect-q3": "  Around 500 rps  "
        })
        .to_string(),
    )
    .unwrap();
    let out = parley(
        dir.path(),
        &[
            "run",
            "Design a URL shortener",
            "--clarify",
            "--answers",
            "answers.json",
            "--report",
            "report.md",
        ],
    )
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // The file does not answer "Which cloud?": NA, with a note naming it.
    assert!(err.contains("agent-architect-q2"), "{err}");
    let state = checkpoint(dir.path(), &saved_id(&err));
    assert_eq!(state["status"], "completed");
    // Iteration 1: 3 questions; 2: the architect's follow-up; 3: nothing new.
    assert_eq!(state["clarificationIterations"], 3);
    let groups = state["clarifications"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "kiss asked nothing: {groups:?}");
    assert_eq!(groups[0]["agentId"], "agent-architect");
    assert_eq!(groups[0]["agentName"], "Architect");
    assert_eq!(groups[0]["role"], "architect");
    let items: Vec<(String, String, String)> = groups[0]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["id"].as_str().unwrap().to_string(),
                i["question"].as_str().unwrap().to_string(),
                i["answer"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        items,
        [
            (
                "agent-architect-q1".into(),
                "How many users?".into(),
                "About 10k users".into()
            ),
            (
                "agent-architect-q2".into(),
                "Which cloud?".into(),
                "NA".into()
            ),
            (
                "agent-architect-q3".into(),
                "Peak requests per second?".into(),
                "Around 500 rps".into()
            ),
        ]
    );
    assert_eq!(
        groups[1]["items"][0]["question"],
        "Is there single sign-on?"
    );
    // Kiss's prose is a warning, not a failure.
    let warnings = state["engine"]["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("agent-kiss asks nothing")),
        "{warnings:?}"
    );
    // 3 agents × 3 iterations, each once; then the debate, every prompt with the answers.
    assert_eq!(clarify_requests(&fake).len(), 9);
    assert_later_prompts_carry(
        &fake,
        &[
            "About 10k users",
            "Yes, through Okta",
            "Around 500 rps",
            "Which cloud?",
        ],
    );
    // A follow-up prompt showed the earlier answers.
    let follow_ups: Vec<String> = clarify_requests(&fake)
        .iter()
        .map(RecordedRequest::prompt_text)
        .filter(|p| p.contains(FOLLOW_UP))
        .collect();
    assert_eq!(follow_ups.len(), 6);
    assert!(follow_ups.iter().all(|p| p.contains("About 10k users")));
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.contains("## Clarifications"), "{report}");
    assert!(report.contains("How many users?") && report.contains("About 10k users"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_or_an_answers_file_it_exits_2_naming_answers() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let out = parley(dir.path(), &["run", "Design a URL shortener", "--clarify"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--answers"), "{err}");
    assert_eq!(fake.request_count(), 0, "nothing ran");
    // The config's own setting asks too.
    let mut cfg: Value = read_json(dir.path().join("debate-config.json"));
    cfg["debate"]["interactiveClarifications"] = json!(true);
    std::fs::write(dir.path().join("debate-config.json"), cfg.to_string()).unwrap();
    let out = parley(dir.path(), &["run", "Design a URL shortener"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--answers"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_typed_on_a_terminal_and_ctrl_c_while_waiting_then_resume_asks_again() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_responder(responder);
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());

    // The questions are shown grouped by agent and numbered; Ctrl-C while they wait.
    let mut run = OnPty::spawn(command(
        dir.path(),
        &["run", "Design a URL shortener", "--clarify"],
    ))
    .unwrap();
    run.wait_for("Enter alone answers NA", WAIT).await.unwrap();
    run.wait_for("1. How many users? >", WAIT).await.unwrap();
    let shown = run.output();
    assert!(
        shown.contains("Architect (agent-architect, architect):")
            && shown.contains("1. How many users?  [agent-architect-q1]")
            && shown.contains("2. Which cloud?  [agent-architect-q2]")
            && shown.contains("Security (agent-security, security):")
            && shown.contains("3. Is there single sign-on?  [agent-security-q1]"),
        "{shown}"
    );
    assert!(
        !shown.contains("Kiss (agent-kiss"),
        "kiss asked nothing: {shown}"
    );
    send_signal(run.child.id().unwrap(), "INT");
    assert_eq!(
        run.exit_code(WAIT).await.unwrap(),
        Some(130),
        "{}",
        run.output()
    );
    let out = run.output();
    let at = out
        .find("parley resume deb-")
        .unwrap_or_else(|| panic!("no resume hint in:\n{out}"));
    let id = out[at + "parley resume ".len()..][..26].to_string();
    let saved = checkpoint(dir.path(), &id);
    assert_eq!(saved["status"], "awaiting_clarifications");
    assert_eq!(
        saved["clarifications"][0]["items"][0]["id"],
        "agent-architect-q1"
    );
    assert!(saved["clarifications"][0]["items"][0]
        .get("answer")
        .is_none());
    assert_eq!(clarify_requests(&fake).len(), 3);

    // Resume asks the same questions again, with no new call; the answers are typed
    // (Enter alone for NA), then the follow-up.
    let mut resume = OnPty::spawn(command(dir.path(), &["resume", &id])).unwrap();
    resume.wait_for("1. How many users? >", WAIT).await.unwrap();
    assert_eq!(clarify_requests(&fake).len(), 3, "no call repeated");
    resume
        .type_lines(&["About 10k users", "", "Yes, through Okta"])
        .unwrap();
    resume
        .wait_for("Peak requests per second? >", WAIT)
        .await
        .unwrap();
    resume.type_lines(&["Around 500 rps"]).unwrap();
    assert_eq!(
        resume.exit_code(WAIT).await.unwrap(),
        Some(0),
        "{}",
        resume.output()
    );
    let state = checkpoint(dir.path(), &id);
    assert_eq!(state["status"], "completed");
    let answers = clarification_answers(&state);
    assert_eq!(
        answers,
        [
            "About 10k users",
            "NA",
            "Around 500 rps",
            "Yes, through Okta"
        ]
    );
    assert_eq!(clarify_requests(&fake).len(), 9);
    assert_later_prompts_carry(
        &fake,
        &["About 10k users", "Yes, through Okta", "Around 500 rps"],
    );
    assert!(resume.output().contains("Synthesized with the answers"));
}
