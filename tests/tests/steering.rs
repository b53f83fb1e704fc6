//! End-to-end tests of steering a cluster debate over NATS (`parley.debates.steer` and
//! `parley steer`): real nats-server and redis-server, the service binaries, the fake LLM.
//! Pause stops dispatch (also across a kill -9 of the coordinator), guide notes reach the
//! prompts on the wire, extend runs exactly one more round, resume loses and repeats no
//! call, stop ends with a synthesized solution; hostile requests get clear errors and
//! change nothing. Build the binaries first: `cargo build --workspace --bins`.

use std::time::{Duration, Instant};

use parley_tests::*;
use serde_json::{json, Value};

async fn steer(c: &Cluster, id: &str, body: Value) -> Value {
    let mut body = body;
    body["debateId"] = json!(id);
    c.request("parley.debates.steer", serde_json::to_vec(&body).unwrap())
        .await
}

/// Waits until the fake LLM has had no new request for `quiet`: the number of requests.
async fn settled_requests(c: &Cluster, quiet: Duration) -> usize {
    let mut n = c.fake.request_count();
    let mut since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    while since.elapsed() < quiet {
        assert!(Instant::now() < deadline, "the fake LLM kept being called");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = c.fake.request_count();
        if now != n {
            n = now;
            since = Instant::now();
        }
    }
    n
}

fn error_code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_debate_is_paused_across_a_crash_guided_extended_resumed_and_stopped() {
    let c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(400)));
    let mut coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let id = c.submit(&spec("Design a steered scheduler")).await;
    let start = Instant::now();
    while c.fake.request_count() == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "no call started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = steer(&c, &id, json!({"command": "pause", "by": "alice"})).await;
    assert_eq!(r["accepted"], "steer", "{r}");
    let paused_at = settled_requests(&c, Duration::from_millis(1500)).await;
    let state = c.status(&id).await;
    assert_eq!(state["status"], "running");
    assert_eq!(state["steering"]["paused"], true, "{state}");
    assert_eq!(
        contributions(&state),
        paused_at,
        "the calls in flight are kept"
    );
    // No task was dispatched once the pause was applied.
    let events = events(&c.client, &format!("parley.debates.{id}.events"))
        .await
        .unwrap();
    let at = events
        .iter()
        .position(|e| matches!(&e.kind, parley_protocol::EventKind::Steered { command, .. } if command == "pause"))
        .expect("a steered event");
    assert!(events[at..]
        .iter()
        .all(|e| !matches!(e.kind, parley_protocol::EventKind::TaskDispatched { .. })));

    // A paused debate stays paused across a kill -9 of its coordinator.
    coord.kill9();
    let _coord2 = c.coordinator();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(c.fake.request_count(), paused_at, "resumed by the takeover");

    // Hostile requests: clear errors, nothing changes.
    let big = "x".repeat(100 * 1024);
    let r = steer(&c, &id, json!({"command": "guide", "note": big})).await;
    assert_eq!(error_code(&r), "payload_too_large", "{r}");
    let r = steer(&c, &id, json!({"command": "guide", "note": "a\u{7}b"})).await;
    assert_eq!(error_code(&r), "invalid_request", "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("control character"));
    let r = steer(
        &c,
        &id,
        json!({"command": "guide", "note": "x".repeat(4001)}),
    )
    .await;
    assert_eq!(error_code(&r), "invalid_request", "{r}");
    let r = steer(&c, &id, json!({"command": "explode"})).await;
    assert_eq!(error_code(&r), "invalid_request", "{r}");
    let r = steer(
        &c,
        "deb-20200101-000000-zzzzzz",
        json!({"command": "pause"}),
    )
    .await;
    assert_eq!(error_code(&r), "not_found", "{r}");
    let r = steer(&c, &id, json!({"command": "pause"})).await;
    assert_eq!(error_code(&r), "conflict", "{r}");
    let r = steer(&c, &id, json!({"command": "pause", "by": "a\nb"})).await;
    assert_eq!(error_code(&r), "invalid_request", "{r}");
    let state = c.status(&id).await;
    assert_eq!(state["steering"]["log"].as_array().unwrap().len(), 1);

    // Guide (with the CLI), extend, resume (with the CLI).
    let note = "Mind the GDPR retention constraint";
    let dir = tempfile::tempdir().unwrap();
    let url = c.nats.url();
    let out = parley_cli(
        dir.path(),
        &[
            "steer",
            &id,
            "guide",
            note,
            "--by",
            "bob",
            "--nats-url",
            &url,
        ],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let out = parley_cli(
        dir.path(),
        &["steer", &id, "guide", "bell\u{7}", "--nats-url", &url],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("control character"));
    let r = steer(&c, &id, json!({"command": "extend"})).await;
    assert_eq!(r["accepted"], "steer", "{r}");
    assert_eq!(
        c.fake.request_count(),
        paused_at,
        "nothing ran while paused"
    );
    let out = parley_cli(dir.path(), &["steer", &id, "resume", "--nats-url", &url]).await;
    assert!(out.status.success(), "{out:?}");
    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_eq!(state["status"], "completed", "{state}");
    let rounds = state["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 3, "exactly one more round");
    for r in rounds {
        assert_eq!(
            (count(r, "critique"), count(r, "refinement")),
            (6, 3),
            "{r}"
        );
    }
    assert_eq!(c.fake.request_count(), 31, "no call lost or repeated");
    assert_no_completed_call_repeated(&c.fake);
    let requests = c.fake.requests();
    assert!(requests[..paused_at]
        .iter()
        .all(|r| !r.prompt_text().contains(note)));
    assert!(requests[paused_at..]
        .iter()
        .all(|r| r.prompt_text().contains(note)));
    let log: Vec<(String, String)> = state["steering"]["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["command"].as_str().unwrap().to_string(),
                e["by"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        log,
        [
            ("pause".to_string(), "alice".to_string()),
            ("guide".into(), "bob".into()),
            ("extend".into(), "".into()),
            ("resume".into(), "".into()),
        ]
    );

    // Fork the 3-round debate at round 2 with another judge: only round 3 and the
    // synthesis are called; the parent is untouched.
    let parent_state = c.status(&id).await;
    let before = c.fake.request_count();
    let body =
        json!({"debateId": id, "atRound": 2, "changes": {"judge": {"model": "model-judge-2"}}});
    let r = c
        .request("parley.debates.fork", serde_json::to_vec(&body).unwrap())
        .await;
    let child = r["debateId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let forked = c.wait_done(&child, Duration::from_secs(60)).await;
    assert_eq!(forked["status"], "completed", "{forked}");
    assert_eq!(forked["forkedFrom"], json!({"debateId": id, "round": 2}));
    let made = &c.fake.requests()[before..];
    assert_eq!(made.len(), 10, "6 critiques + 3 refinements + 1 synthesis");
    assert_eq!(
        made.iter().filter(|r| r.model == "model-judge-2").count(),
        1
    );
    let mut after = c.status(&id).await;
    let mut was = parent_state.clone();
    after["updatedAt"] = Value::Null;
    was["updatedAt"] = Value::Null;
    assert_eq!(after, was, "the parent is untouched");
    let bad = json!({"debateId": id, "atRound": 9});
    let r = c
        .request("parley.debates.fork", serde_json::to_vec(&bad).unwrap())
        .await;
    assert_eq!(error_code(&r), "invalid_request", "{r}");

    // Stop: a 3-round debate stopped in round 1 ends with a synthesized solution.
    let before = c.fake.request_count();
    let mut three = spec("Design a stopped queue");
    three["debate"]["rounds"] = json!(3);
    let id = c.submit(&three).await;
    c.wait_status(&id, Duration::from_secs(30), |s| contributions(s) >= 3)
        .await;
    let r = steer(&c, &id, json!({"command": "stop"})).await;
    assert_eq!(r["accepted"], "steer", "{r}");
    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_eq!(state["status"], "completed", "{state}");
    assert!(state["finalSolution"]["description"]
        .as_str()
        .unwrap()
        .contains("Fake synthesized solution"));
    assert_eq!(state["rounds"].as_array().unwrap().len(), 1);
    let synth = c.fake.requests()[before..]
        .iter()
        .filter(|r| r.model == "model-judge")
        .count();
    assert_eq!(synth, 1);
    let r = steer(&c, &id, json!({"command": "extend"})).await;
    assert_eq!(error_code(&r), "conflict", "{r}");
}
