//! End-to-end tests of a human participant in a cluster debate: real nats-server and
//! redis-server, the service binaries, the fake LLM. One human and two agents: the
//! human's turns are answered with `parley contribute` and on `parley.debates.contribute`,
//! across a kill -9 of the coordinator while its turn is open (the answer given afterwards
//! is used, no LLM call is repeated); hostile contributions get a clear error and change
//! nothing; a deadline that passes drops the human's critiques and fails the debate at its
//! refinement. Build the binaries first: `cargo build --workspace --bins`.

use std::time::{Duration, Instant};

use parley_tests::*;
use serde_json::{json, Value};

/// [`spec`] with the architect a person (`provider: "human"`, no model), one round.
fn human_spec(problem: &str) -> Value {
    let mut s = spec(problem);
    s["agents"][0] =
        json!({"id": "agent-human", "name": "Human", "role": "architect", "provider": "human"});
    s["debate"]["rounds"] = json!(1);
    s
}

async fn contribute(c: &Cluster, body: Value) -> Value {
    c.request(
        "parley.debates.contribute",
        serde_json::to_vec(&body).unwrap(),
    )
    .await
}

fn open_tasks(state: &Value) -> Vec<Value> {
    state["human"]["open"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn error_code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

/// Waits until the debate's human agent has an open task of `kind`.
async fn wait_open(c: &Cluster, id: &str, kind: &str) -> Value {
    let state = c
        .wait_status(id, Duration::from_secs(60), |s| {
            open_tasks(s).iter().any(|t| t["kind"] == kind)
        })
        .await;
    open_tasks(&state)
        .into_iter()
        .find(|t| t["kind"] == kind)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_answers_through_nats_and_the_cli_across_a_coordinator_kill() {
    let c = Cluster::start().await;
    let mut coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let id = c
        .submit(&human_spec("Design a human-in-the-loop cache"))
        .await;

    // The human's proposal opens; the two agents' proposals and their critiques of each
    // other go on without it.
    let open = wait_open(&c, &id, "propose").await;
    assert_eq!(open["agentId"], "agent-human");
    let state = c
        .wait_status(&id, Duration::from_secs(60), |s| contributions(s) >= 4)
        .await;
    assert_eq!(
        contributions(&state),
        4,
        "2 proposals, 2 critiques: {state}"
    );
    let before_kill = c.fake.request_count();
    assert_eq!(before_kill, 4);

    // Its critiques of the two proposals are open too.
    let waiting = open_tasks(&c.status(&id).await).len();
    assert_eq!(waiting, 3);
    // kill -9 of the coordinator while the human's turn is open: another takes over.
    coord.kill9();
    let _coord2 = c.coordinator();

    // Hostile contributions: clear errors, nothing changes.
    let r = contribute(&c, json!({"debateId": id, "text": "x".repeat(200 * 1024)})).await;
    assert_eq!(error_code(&r), "payload_too_large", "{r}");
    let r = contribute(&c, json!({"debateId": id, "text": "x".repeat(20_001)})).await;
    assert_eq!(error_code(&r), "invalid_request", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the limit is"),
        "{r}"
    );
    let r = contribute(&c, json!({"debateId": id, "text": "evil\u{1b}[2J"})).await;
    assert_eq!(error_code(&r), "invalid_request", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("U+001B"),
        "{r}"
    );
    let r = contribute(
        &c,
        json!({"debateId": "deb-20200101-000000-zzzzzz", "text": "wrong debate"}),
    )
    .await;
    assert_eq!(error_code(&r), "not_found", "{r}");
    let other = "deb-20200101-000000-zzzzzz/1/propose/agent-human";
    let r = contribute(&c, json!({"debateId": id, "taskId": other, "text": "t"})).await;
    assert_eq!(error_code(&r), "conflict", "{r}");
    let r = contribute(
        &c,
        json!({"debateId": id, "agentId": "agent-security", "text": "not a person"}),
    )
    .await;
    assert_eq!(error_code(&r), "invalid_request", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a human participant"),
        "{r}"
    );
    let state = c.status(&id).await;
    assert_eq!(open_tasks(&state).len(), waiting, "{state}");
    assert!(state["human"]["answered"].is_null(), "{state}");

    // The answer given after the crash, with the CLI (retried while the lease moves).
    let dir = tempfile::tempdir().unwrap();
    let url = c.nats.url();
    let proposal = "Use a write-through cache keyed by tenant; the human's own design.";
    let start = Instant::now();
    loop {
        let out = parley_cli(
            dir.path(),
            &[
                "contribute",
                &id,
                "--text",
                proposal,
                "--by",
                "alice",
                "--nats-url",
                &url,
            ],
        )
        .await;
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["taskId"], open["taskId"], "{v}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{out:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A second answer to the same task: refused, with the CLI's usage exit code.
    let out = parley_cli(
        dir.path(),
        &[
            "contribute",
            &id,
            "--task",
            open["taskId"].as_str().unwrap(),
            "--text",
            "again",
            "--nats-url",
            &url,
        ],
    )
    .await;
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not wait"),
        "{out:?}"
    );

    // Its critiques (two open at once) and its refinement, on NATS.
    let mut answered = 1;
    let state = loop {
        let state = c
            .wait_status(&id, Duration::from_secs(60), |s| {
                !open_tasks(s).is_empty() || s["status"] != "running"
            })
            .await;
        let Some(t) = open_tasks(&state).into_iter().next() else {
            break state;
        };
        let text = format!("The human's {} ({})", t["kind"], t["taskId"]);
        let r = contribute(
            &c,
            json!({"debateId": id, "agentId": "agent-human", "taskId": t["taskId"], "text": text, "by": "alice"}),
        )
        .await;
        assert_eq!(r["accepted"], "contribution", "{r}");
        answered += 1;
    };
    let state = if state["status"] == "running" {
        c.wait_done(&id, Duration::from_secs(60)).await
    } else {
        state
    };
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(answered, 4, "proposal, 2 critiques, refinement");
    let round = &state["rounds"][0];
    assert_eq!(
        (
            count(round, "proposal"),
            count(round, "critique"),
            count(round, "refinement")
        ),
        (3, 6, 3)
    );
    let human: Vec<&Value> = round["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["agentId"] == "agent-human")
        .collect();
    assert_eq!(human.len(), 4);
    for h in &human {
        assert_eq!(h["metadata"]["human"], true, "{h}");
        assert_eq!(h["metadata"]["tokensUsed"], 0, "{h}");
    }
    let p = human.iter().find(|c| c["type"] == "proposal").unwrap();
    assert_eq!(
        p["content"], proposal,
        "the answer given after the kill is used"
    );
    assert_eq!(state["human"]["answered"].as_array().unwrap().len(), 4);
    assert!(state["human"]["answered"][0]["by"]
        .as_str()
        .unwrap()
        .starts_with("alice"));
    // The LLM calls: 2 proposals, 4 critiques, 2 refinements, the judge's; none twice.
    let judge_calls = 1 + usize::from(!state["judgeSummary"].is_null());
    assert_eq!(
        c.fake.request_count(),
        8 + judge_calls,
        "no LLM call for the human"
    );
    assert_no_completed_call_repeated(&c.fake);
    let events = events(&c.client, &format!("parley.debates.{id}.events"))
        .await
        .unwrap();
    let contributed = events
        .iter()
        .filter(|e| matches!(e.kind, parley_protocol::EventKind::HumanContributed { .. }))
        .count();
    assert_eq!(contributed, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_deadline_a_human_turn_is_a_failed_agent_task() {
    let c = Cluster::start().await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let mut s = human_spec("Design a cache nobody attends");
    s["debate"]["humanDeadlineSecs"] = json!(3);
    let id = c.submit(&s).await;
    let open = wait_open(&c, &id, "propose").await;
    let r = contribute(
        &c,
        json!({"debateId": id, "taskId": open["taskId"], "text": "A proposal in time"}),
    )
    .await;
    assert_eq!(r["accepted"], "contribution", "{r}");
    // Nobody critiques nor refines: the critiques are dropped, the refinement fails the
    // debate at its node.
    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_eq!(state["status"], "failed", "{state}");
    assert_eq!(state["error"]["node"], "refinement", "{state}");
    assert_eq!(state["error"]["kind"], "noAnswer", "{state}");
    assert!(state["error"]["message"]
        .as_str()
        .unwrap()
        .contains("did not answer"));
    // Each of the person's two critiques is dropped when its deadline passes, unless the
    // refinement's passed first: the critiques of the person's proposal can come back
    // before the other agents' proposals (results are applied as they arrive), so the
    // refinement may open, and expire, before the last critique. Its expiry fails the
    // debate, and the critique still open is withdrawn with it.
    let dropped = state["rounds"][0]["dropped"].as_array().unwrap();
    assert!((1..=2).contains(&dropped.len()), "{state}");
    assert!(dropped.iter().all(|d| d["agentId"] == "agent-human"));
    let expired = state["human"]["expired"].as_array().unwrap();
    assert_eq!(expired.len(), 3, "{state}");
    let critiques: Vec<&Value> = expired.iter().filter(|e| e["kind"] == "critique").collect();
    assert_eq!(critiques.len(), 2, "{state}");
    let withdrawn = critiques
        .iter()
        .filter(|e| e["reason"].as_str().unwrap().starts_with("withdrawn"))
        .count();
    assert_eq!(withdrawn, 2 - dropped.len(), "{state}");
    let events = events(&c.client, &format!("parley.debates.{id}.events"))
        .await
        .unwrap();
    let n = events
        .iter()
        .filter(|e| matches!(e.kind, parley_protocol::EventKind::HumanTaskExpired { .. }))
        .count();
    assert_eq!(n, 3);
    // A late answer changes nothing.
    let r = contribute(&c, json!({"debateId": id, "text": "too late"})).await;
    assert_eq!(error_code(&r), "conflict", "{r}");
}
