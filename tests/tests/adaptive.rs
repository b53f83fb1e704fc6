//! Issue 25's new nodes in a cluster: real nats-server (JetStream) and redis-server, the
//! service binaries as separate processes, and the fake LLM scripted per task kind
//! (`parley_testkit::fake_llm::script`).
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::time::Duration;

use parley_protocol::EventKind;
use parley_testkit::fake_llm::script::{kind_of, DebateScript, VoteRule};
use parley_tests::*;
use serde_json::json;

fn calls(c: &Cluster, kind: &str) -> usize {
    c.fake
        .requests()
        .iter()
        .filter(|r| r.status == 200 && kind_of(&r.prompt_text()) == kind)
        .count()
}

/// One round, then every agent votes (slowly); once the first vote is stored the
/// coordinator is killed with SIGKILL and another takes over: the missing votes are sent
/// again as themselves, no completed call is repeated, each vote counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_survives_kill_9_of_the_coordinator() {
    let c = Cluster::start().await;
    let script = DebateScript {
        votes: VoteRule::For("agent-kiss".into()),
        ..DebateScript::default()
    };
    c.fake.set_responder(move |r| script.reply(r));
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(400)));
    let mut coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let mut s = spec("Design a feature flag service");
    s["debate"]["rounds"] = json!(1);
    s["debate"]["synthesisMethod"] = json!("voting");
    let id = c.submit(&s).await;
    let mid = c
        .wait_status(&id, Duration::from_secs(45), |s| {
            s["voting"]["votes"]
                .as_array()
                .is_some_and(|v| !v.is_empty())
                || is_done(s)
        })
        .await;
    assert!(
        !is_done(&mid),
        "the debate ended before a vote was seen: {mid}"
    );
    coord.kill9();
    let _coord2 = c.coordinator();

    let state = c.wait_status(&id, Duration::from_secs(60), is_done).await;
    assert_eq!(state["status"], "completed", "{state}");
    let v = &state["voting"];
    assert_eq!(v["tallied"], true, "{v}");
    assert_eq!(v["votes"].as_array().unwrap().len(), 3, "{v}");
    assert_eq!(v["winner"], "agent-kiss");
    assert_eq!(v["counts"]["agent-kiss"], 2);
    assert_eq!(state["finalSolution"]["basedOn"], "agent-kiss");
    assert_no_completed_call_repeated(&c.fake);
    assert_eq!(calls(&c, "vote"), 3);
    assert_eq!(calls(&c, "synthesize"), 1);
    // The events show every vote once and the tally once.
    let evs = events(&c.client, &format!("parley.debates.{id}.events"))
        .await
        .unwrap();
    let cast = evs
        .iter()
        .filter(|e| matches!(e.kind, EventKind::VoteCast { .. }))
        .count();
    let tallied = evs
        .iter()
        .filter(|e| matches!(e.kind, EventKind::VotesTallied { .. }))
        .count();
    assert_eq!((cast, tallied), (3, 1));
    // The small summary view says how the vote went.
    let summary = summary(&c, &id).await;
    assert_eq!(
        summary["votes"],
        json!({"cast": 3, "valid": 3, "tallied": true, "winner": "agent-kiss", "tie": false}),
        "{summary}"
    );
}

/// `parley status --summary` against the cluster.
async fn summary(c: &Cluster, id: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let out = parley_cli(
        dir.path(),
        &["status", id, "--nats-url", &c.nats.url(), "--summary"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A similarity debate on the cluster: the judge's worker embeds each round's refinements
/// with the configured embedding model; the scripted replies repeat, so the debate stops
/// after round 2 of 4, and the summary says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_similarity_debate_stops_when_the_refinements_repeat() {
    let c = Cluster::start().await;
    let script = DebateScript::agreeing();
    c.fake.set_responder(move |r| script.reply(r));
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let mut s = spec("Design a search index for product listings");
    s["debate"]["rounds"] = json!(4);
    s["debate"]["terminationCondition"] = json!({"type": "similarity", "threshold": 0.9});
    s["debate"]["embeddings"] = json!({"provider": "openai-compatible", "model": "embed-small"});
    let id = c.submit(&s).await;
    let state = c.wait_status(&id, Duration::from_secs(60), is_done).await;
    assert_eq!(state["status"], "completed", "{state}");
    let rounds = state["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "stops after round 2 of 4");
    assert_eq!(rounds[1]["similarity"]["converged"], true, "{state}");
    let embeds: Vec<_> = c
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/embeddings" && r.status == 200)
        .collect();
    assert_eq!(embeds.len(), 2, "one embeddings call a round");
    assert!(embeds.iter().all(|r| r.model == "embed-small"));
    assert_no_completed_call_repeated(&c.fake);
    let summary = summary(&c, &id).await;
    assert_eq!(summary["similarity"]["round"], 2, "{summary}");
    assert_eq!(summary["similarity"]["converged"], true, "{summary}");
    assert!(
        summary["similarity"]["leastPerAgent"].as_f64().unwrap() >= 0.9,
        "{summary}"
    );
}

/// The judge's verdict keeps failing (500): the debate fails at the verdict node; after the
/// provider recovers, `parley retry` continues it from there without repeating a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parley_retry_continues_a_debate_whose_verdict_failed() {
    let c = Cluster::start().await;
    let script = DebateScript::agreeing();
    c.fake.set_responder(move |r| script.reply(r));
    c.fake.add_fault(Fault::Status {
        status: 500,
        body: r#"{"error":{"message":"the judge is down"}}"#.into(),
        matching: Match::PromptContains("Give your verdict on the debate so far".into()),
        times: None,
    });
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let mut s = spec("Design a metrics pipeline");
    s["debate"]["terminationCondition"] = json!({"type": "verdict", "maxRounds": 3});
    s["debate"]["retry"] = json!({"nodes": {"verdict": {"attempts": 2, "initialBackoffMs": 100, "maxBackoffMs": 100}}});
    let id = c.submit(&s).await;
    let failed = c.wait_status(&id, Duration::from_secs(45), is_done).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["node"], "verdict", "{failed}");
    assert_eq!(
        failed["error"]["taskId"],
        format!("{id}/1/verdict/judge-main")
    );

    c.fake.clear_faults();
    let dir = tempfile::tempdir().unwrap();
    let out = parley_cli(dir.path(), &["retry", &id, "--nats-url", &c.nats.url()]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first_failure = failed["error"]["at"].clone();
    let state = c
        .wait_status(&id, Duration::from_secs(45), |s| {
            s["status"] == "completed"
                || (s["status"] == "failed" && s["error"]["at"] != first_failure)
        })
        .await;
    assert_eq!(state["status"], "completed", "{state}");
    // The verdict said done: one round, its verdict kept.
    assert_eq!(state["rounds"].as_array().unwrap().len(), 1);
    assert_eq!(state["rounds"][0]["verdict"]["verdict"], "done");
    assert_no_completed_call_repeated(&c.fake);
    assert_eq!(calls(&c, "verdict"), 1);
    assert_eq!(calls(&c, "refine"), 3);
    let summary = summary(&c, &id).await;
    assert_eq!(summary["verdict"]["round"], 1, "{summary}");
    assert_eq!(summary["verdict"]["verdict"], "done", "{summary}");
}

/// Adaptive mode with a ring of critics on the cluster. Proposals the judge finds in
/// agreement take the short path (3 proposals, the screen, the synthesis: nothing else);
/// proposals it never finds in agreement take the full debate, where the ring plans one
/// critique per agent a round (3, not 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_paths_and_a_ring_of_critics_on_the_cluster() {
    let c = Cluster::start().await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let mut s = spec("Design a job scheduler");
    s["debate"]["mode"] = json!("adaptive");
    s["debate"]["critique"] = json!({"topology": "ring"});

    let agreeing = DebateScript::agreeing();
    c.fake.set_responder(move |r| agreeing.reply(r));
    let id = c.submit(&s).await;
    let state = c.wait_status(&id, Duration::from_secs(60), is_done).await;
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(state["adaptive"]["path"], "short", "{state}");
    let kinds = ["propose", "critique", "refine", "verdict", "synthesize"];
    let counts: Vec<usize> = kinds.iter().map(|k| calls(&c, k)).collect();
    assert_eq!(counts, vec![3, 0, 0, 1, 1], "{kinds:?}");
    assert_eq!(summary(&c, &id).await["adaptivePath"], "short");

    let before = counts;
    let never = DebateScript::never_agreeing();
    c.fake.set_responder(move |r| never.reply(r));
    s["problem"] = json!("Design a job scheduler with priorities");
    let id = c.submit(&s).await;
    let state = c.wait_status(&id, Duration::from_secs(60), is_done).await;
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(state["adaptive"]["path"], "full", "{state}");
    let counts: Vec<usize> = kinds
        .iter()
        .zip(&before)
        .map(|(k, b)| calls(&c, k) - b)
        .collect();
    // Two rounds: round 2's proposals are round 1's refinements, carried over.
    assert_eq!(counts, vec![3, 6, 6, 1, 1], "{kinds:?}");
    assert_no_completed_call_repeated(&c.fake);
}
