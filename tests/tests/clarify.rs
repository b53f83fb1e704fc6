//! Clarifications in a cluster, end to end: real nats-server (with the shipped roles) and
//! redis-server, the service binaries, the `parley` CLI, and the fake LLM.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::time::Duration;

use parley_testkit::RecordedRequest;
use parley_tests::*;
use serde_json::{json, Value};

/// Every clarification prompt ends with the reply format (agent-worker's `clarify`).
const CLARIFY: &str = "{\"questions\": [{\"text\": \"your question\"}]}";
const FOLLOW_UP: &str = "Questions already asked and their answers";

/// Iteration 1: the architect asks two questions, security one, kiss none; each follow-up:
/// the architect asks about peak load (new once, then a repeat). Other prompts: the fake's
/// usual texts (a synthesis when JSON is asked for).
fn responder(r: &RecordedRequest) -> String {
    let prompt = r.prompt_text();
    if prompt.contains(CLARIFY) {
        return match (r.model.as_str(), prompt.contains(FOLLOW_UP)) {
            ("model-arch", false) => {
                json!({"questions": [{"text": "How many users?"}, {"text": "Which cloud?"}]})
                    .to_string()
            }
            ("model-arch", true) => {
                json!({"questions": [{"text": "Peak requests per second?"}]}).to_string()
            }
            ("model-sec", false) => json!(["Is there single sign-on?"]).to_string(),
            _ => json!({"questions": []}).to_string(),
        };
    }
    if prompt.contains("JSON") {
        return json!({
            "description": "Fake synthesized solution with the answers",
            "tradeoffs": [], "recommendations": [], "confidence": 80
        })
        .to_string();
    }
    format!("A proposal from {}", r.model)
}

/// [`spec`] with clarifications on and one round.
fn clarify_spec(problem: &str) -> Value {
    let mut s = spec(problem);
    s["debate"]["rounds"] = json!(1);
    s["debate"]["interactiveClarifications"] = json!(true);
    s
}

/// A directory holding `cli.json`: [`spec`] without a problem, one round.
fn cli_config_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = spec_config(None);
    cfg["debate"]["rounds"] = json!(1);
    write_json(dir.path().join("cli.json"), &cfg);
    dir
}

async fn answer(c: &Cluster, body: Value) -> Value {
    c.request("parley.debates.answer", serde_json::to_vec(&body).unwrap())
        .await
}

/// The (code, message) of the error reply to an answer.
async fn answer_error(c: &Cluster, body: Value) -> (String, String) {
    error_of(&answer(c, body).await)
}

fn error_of(v: &Value) -> (String, String) {
    (
        v["error"]["code"].as_str().unwrap_or("").to_string(),
        v["error"]["message"].as_str().unwrap_or("").to_string(),
    )
}

fn clarify_calls(c: &Cluster) -> usize {
    c.fake
        .requests()
        .iter()
        .filter(|r| r.prompt_text().contains(CLARIFY))
        .count()
}

/// Ask → wait (status and event show the questions) → the error cases → kill -9 of the
/// coordinator while waiting (the takeover keeps waiting, nothing re-runs) → `parley
/// answer` as the `client` role → a follow-up iteration → completion with the answers in
/// every later prompt and no completed call repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debate_waits_for_answers_across_a_takeover_and_completes_with_them() {
    let c = Cluster::start_with_roles(json!({})).await;
    c.fake.set_responder(responder);
    let mut coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let id = c.submit(&clarify_spec("Design a URL shortener")).await;
    let waiting = c
        .wait_status(&id, Duration::from_secs(45), |s| {
            s["status"] == "awaiting_clarifications" || is_done(s)
        })
        .await;
    assert_eq!(waiting["status"], "awaiting_clarifications", "{waiting}");
    assert_eq!(waiting["clarificationIterations"], 1);
    let groups = waiting["clarifications"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{waiting}");
    assert_eq!(groups[0]["agentId"], "agent-architect");
    assert_eq!(groups[0]["items"][1]["question"], "Which cloud?");
    assert_eq!(groups[1]["items"][0]["id"], "agent-security-q1");
    assert!(waiting["rounds"].as_array().unwrap().is_empty());
    assert_eq!(clarify_calls(&c), 3);
    // The summary view shows the open questions.
    let summary = c
        .request(
            "parley.debates.status",
            serde_json::to_vec(&json!({"debateId": id, "view": "summary"})).unwrap(),
        )
        .await;
    assert_eq!(summary["status"], "awaiting_clarifications");
    assert_eq!(
        summary["questions"][0]["items"][0]["question"],
        "How many users?"
    );

    // Errors change nothing: an unknown question, JSON garbage, an unknown debate.
    let (code, msg) = answer_error(
        &c,
        json!({"debateId": id, "answers": [{"id": "agent-kiss-q1", "answer": "x"}]}),
    )
    .await;
    assert_eq!(code, "invalid_request");
    assert!(
        msg.contains("agent-kiss-q1") && msg.contains("agent-architect-q1"),
        "{msg}"
    );
    let r = c
        .request("parley.debates.answer", b"{not json".to_vec())
        .await;
    assert_eq!(error_of(&r).0, "invalid_json");
    let (code, _) = answer_error(
        &c,
        json!({"debateId": "deb-20990101-000000-zzzzzz", "answers": [{"id": "a-q1", "answer": "x"}]}),
    )
    .await;
    assert_eq!(code, "not_found");
    // A partial answer is recorded; answering it again is a conflict.
    let r = answer(
        &c,
        json!({"debateId": id, "answers": [{"id": "agent-architect-q1", "answer": "About 10k users"}]}),
    )
    .await;
    assert_eq!(r["remaining"], 2, "{r}");
    let (code, msg) = answer_error(
        &c,
        json!({"debateId": id, "answers": [{"id": "agent-architect-q1", "answer": "again"}]}),
    )
    .await;
    assert_eq!(code, "conflict");
    assert!(msg.contains("already answered"), "{msg}");

    // kill -9 while waiting: the takeover keeps waiting and runs nothing again.
    coord.kill9();
    let coord2 = c.coordinator();
    assert!(
        coord2
            .wait_for_log_line("took over a debate", Duration::from_secs(30))
            .is_some(),
        "{}",
        coord2.log()
    );
    let s = c.status(&id).await;
    assert_eq!(s["status"], "awaiting_clarifications", "{s}");
    assert_eq!(
        s["clarifications"][0]["items"][0]["answer"],
        "About 10k users"
    );
    assert_eq!(clarify_calls(&c), 3, "the takeover asked again");

    // `parley answer` with a file (as the client role): the rest; "Which cloud?" is left
    // out of the file, so it is NA.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("answers.json"),
        json!({"agent-security-q1": "Yes, through Okta"}).to_string(),
    )
    .unwrap();
    let url = c.nats_url_for("client");
    let out = parley_cli(
        dir.path(),
        &[
            "answer",
            &id,
            "--answers",
            "answers.json",
            "--nats-url",
            &url,
        ],
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("agent-architect-q2"), "the NA note: {err}");

    // The follow-up iteration asks the architect once more.
    let again = c
        .wait_status(&id, Duration::from_secs(45), |s| {
            s["clarificationIterations"] == 2 && s["status"] == "awaiting_clarifications"
                || is_done(s)
        })
        .await;
    assert_eq!(again["status"], "awaiting_clarifications", "{again}");
    assert_eq!(
        again["clarifications"][0]["items"][2]["question"],
        "Peak requests per second?"
    );
    std::fs::write(
        dir.path().join("more.json"),
        json!({"agent-architect-q3": "Around 500 rps"}).to_string(),
    )
    .unwrap();
    let out = parley_cli(
        dir.path(),
        &["answer", &id, "--answers", "more.json", "--nats-url", &url],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let done = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["clarificationIterations"], 3);
    assert_no_completed_call_repeated(&c.fake);
    // 3 iterations × 3 agents, then 3 + 6 + 3 + 1 calls that all carry the answers.
    assert_eq!(clarify_calls(&c), 9);
    let later: Vec<String> = c
        .fake
        .requests()
        .iter()
        .map(RecordedRequest::prompt_text)
        .filter(|p| !p.contains(CLARIFY))
        .collect();
    assert_eq!(later.len(), 13);
    for p in &later {
        for a in [
            "About 10k users",
            "Yes, through Okta",
            "Around 500 rps",
            "Which cloud?",
        ] {
            assert!(p.contains(a), "a prompt lacks {a:?}:\n{p}");
        }
    }

    // Not waiting any more: a conflict naming the status.
    let (code, msg) = answer_error(
        &c,
        json!({"debateId": id, "answers": [{"id": "agent-architect-q1", "answer": "x"}]}),
    )
    .await;
    assert_eq!(code, "conflict");
    assert!(msg.contains("completed"), "{msg}");
    let out = parley_cli(
        dir.path(),
        &["answer", &id, "--answers", "more.json", "--nats-url", &url],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not waiting"));
}

/// `parley submit --clarify --wait --answers F` answers as the questions come and prints
/// the solution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_wait_answers_each_iteration() {
    let c = Cluster::start().await;
    c.fake.set_responder(responder);
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = cli_config_dir();
    std::fs::write(
        dir.path().join("answers.json"),
        json!({"agent-architect-q1": "About 10k users", "agent-architect-q3": "Around 500 rps"})
            .to_string(),
    )
    .unwrap();
    let url = c.nats.url();
    // Without answers and without a terminal: refused before anything is submitted.
    let out = parley_cli(
        dir.path(),
        &[
            "submit",
            "Design a URL shortener",
            "--config",
            "cli.json",
            "--clarify",
            "--wait",
            "--nats-url",
            &url,
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--answers"));

    let (out, err) = submit_and_wait(
        dir.path(),
        "Design a URL shortener",
        "cli.json",
        &url,
        &["--clarify", "--answers", "answers.json"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("with the answers"));
    let state: Value = read_json(dir.path().join("state.json"));
    assert_eq!(state["status"], "completed");
    let answers = clarification_answers(&state);
    assert_eq!(answers, ["About 10k users", "NA", "Around 500 rps", "NA"]);
    assert_no_completed_call_repeated(&c.fake);
}

/// With the operator's `clarification_timeout_secs`, unanswered questions become NA and
/// the debate goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clarification_timeout_answers_na() {
    let c = Cluster::start().await;
    c.fake.set_responder(responder);
    let _coord = c.coordinator_with(&[("PARLEY_CLARIFICATION_TIMEOUT_SECS", "1".into())]);
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let mut s = clarify_spec("Design a URL shortener");
    s["debate"]["clarificationsMaxIterations"] = json!(1);
    let id = c.submit(&s).await;
    let done = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let items: Vec<&Value> = done["clarifications"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["items"].as_array().unwrap())
        .collect();
    assert_eq!(items.len(), 3);
    assert!(items.iter().all(|i| i["answer"] == "NA"), "{items:?}");
    let warnings = done["engine"]["warnings"].to_string();
    assert!(warnings.contains("in time"), "{warnings}");
    // The events: the questions asked, then answered (by the timeout), then round 1.
    let evs = events(&c.client, &format!("parley.debates.{id}.events"))
        .await
        .unwrap();
    let asked = evs
        .iter()
        .position(|e| match &e.kind {
            parley_protocol::EventKind::ClarificationsRequested {
                questions,
                iteration,
            } => *iteration == 1 && questions.iter().map(|g| g.items.len()).sum::<usize>() == 3,
            _ => false,
        })
        .expect("a clarificationsRequested event");
    let answered = evs
        .iter()
        .position(|e| {
            matches!(
                e.kind,
                parley_protocol::EventKind::ClarificationsAnswered { remaining: 0, .. }
            )
        })
        .expect("a clarificationsAnswered event");
    assert_eq!(
        evs[asked].status,
        parley_protocol::DebateStatus::AwaitingClarifications
    );
    assert!(asked < answered);
    assert!(evs.last().unwrap().is_final());
}

/// `parley submit --clarify --wait` on a terminal asks each iteration's questions as they
/// come (typed answers, Enter alone for NA) and prints the solution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_wait_asks_on_a_terminal() {
    let c = Cluster::start().await;
    c.fake.set_responder(responder);
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = cli_config_dir();
    let wait = Duration::from_secs(60);
    let cmd = parley_command(
        workspace_bin("parley"),
        dir.path(),
        &[
            "submit",
            "Design a URL shortener",
            "--config",
            "cli.json",
            "--clarify",
            "--wait",
            "--output",
            "state.json",
            "--nats-url",
            &c.nats.url(),
        ],
    );
    let mut cli = parley_testkit::OnPty::spawn(cmd).unwrap();
    cli.wait_for("1. How many users? >", wait).await.unwrap();
    assert!(
        cli.output()
            .contains("3. Is there single sign-on?  [agent-security-q1]"),
        "{}",
        cli.output()
    );
    cli.type_lines(&["About 10k users", "", "Yes, through Okta"])
        .unwrap();
    cli.wait_for("1. Peak requests per second? >", wait)
        .await
        .unwrap();
    cli.type_lines(&["Around 500 rps"]).unwrap();
    assert_eq!(
        cli.exit_code(wait).await.unwrap(),
        Some(0),
        "{}",
        cli.output()
    );
    assert!(
        cli.output().contains("with the answers"),
        "{}",
        cli.output()
    );
    let state: Value = read_json(dir.path().join("state.json"));
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
    assert_no_completed_call_repeated(&c.fake);
}
