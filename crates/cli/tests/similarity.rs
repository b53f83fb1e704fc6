//! `terminationCondition: {type: "similarity"}` end to end in the embedded runner: `parley
//! run` as a subprocess against the fake LLM, whose `/v1/embeddings` embeds each text as a
//! hashed bag of its words. The fake's default replies repeat themselves from round to
//! round (only a counter changes), so the debate stops after round 2.

use std::path::Path;

use parley_testkit::{run_parley, FakeLlm};
use parley_tests::{read_json, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");
const KEY: &str = "sk-similarity-test-0123456789";

fn config(base_url: &str, debate: Value) -> Value {
    let mut cfg = parley_tests::spec_config(Some(base_url));
    for (k, v) in debate.as_object().unwrap() {
        cfg["debate"][k] = v.clone();
    }
    cfg
}

async fn run(dir: &Path, cfg: &Value) -> std::process::Output {
    write_json(dir.join("debate-config.json"), cfg);
    run_parley(
        PARLEY,
        dir,
        &[
            "run",
            "Design a cache",
            "--output",
            "state.json",
            "--report",
            "report.md",
        ],
        &[("OPENAI_COMPATIBLE_API_KEY", KEY.to_string())],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debate_whose_refinements_repeat_stops_after_round_two() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &fake.base_url(),
        json!({
            "rounds": 5,
            "terminationCondition": {"type": "similarity", "threshold": 0.9},
            "embeddings": {"provider": "openai-compatible", "model": "embed-small"},
        }),
    );
    let out = run(dir.path(), &cfg).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert!(
        stderr.contains("terminationCondition \"similarity\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("similarity after round 1: least self-similarity -")
            && stderr.contains("similarity after round 2: least self-similarity 0.9")
            && stderr.contains("(threshold 0.9): stop"),
        "{stderr}"
    );
    let state = read_json(dir.path().join("state.json"));
    assert_eq!(state["status"], "completed");
    let rounds = state["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "stops after round 2 of 5");
    let agents = state["config"]["agents"].as_array().map_or(3, |a| a.len());
    // Round 1: no round before; round 2: every agent over the threshold.
    assert_eq!(rounds[0]["similarity"]["perAgent"], json!({}));
    assert_eq!(rounds[0]["similarity"]["converged"], false);
    let two = &rounds[1]["similarity"];
    assert_eq!(two["converged"], true, "{two}");
    assert_eq!(two["threshold"], 0.9);
    let per_agent = two["perAgent"].as_object().unwrap();
    assert_eq!(per_agent.len(), agents);
    assert!(
        per_agent.values().all(|v| v.as_f64().unwrap() >= 0.9),
        "{two}"
    );
    assert!(two["acrossAgents"].as_f64().is_some(), "{two}");
    assert_eq!(two["metadata"]["model"], "embed-small");
    // The report shows each round's similarities and where the debate stopped.
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        report.contains("#### Similarity")
            && report.contains("No earlier refinement to compare with (first round).")
            && report.contains("Threshold 0.900: **converged: the debate stopped here**."),
        "{report}"
    );
    assert!(two["metadata"]["promptTokens"].as_u64().unwrap() > 0);

    // On the wire: two embeddings calls (after rounds 1 and 2), the model, this round's
    // refinements and (round 2) the round before's, the operator's key.
    let embeds: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/embeddings")
        .collect();
    assert_eq!(embeds.len(), 2);
    let inputs: Vec<usize> = embeds
        .iter()
        .map(|r| r.body["input"].as_array().unwrap().len())
        .collect();
    assert_eq!(inputs, vec![agents, 2 * agents]);
    for r in &embeds {
        assert_eq!(r.status, 200);
        assert_eq!(r.model, "embed-small");
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn similarity_config_errors_are_refused_before_any_call() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (debate, want) in [
        (
            json!({"terminationCondition": {"type": "similarity", "threshold": 2},
                   "embeddings": {"provider": "openai-compatible", "model": "e"}}),
            "0..=1",
        ),
        (
            json!({"terminationCondition": {"type": "similarity"},
                   "embeddings": {"provider": "local", "model": "e"}}),
            "the local model has no embedding mode",
        ),
        (
            json!({"terminationCondition": {"type": "similarity"}}),
            "needs debate.embeddings",
        ),
    ] {
        let out = run(dir.path(), &config(&fake.base_url(), debate)).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0));
        assert!(stderr.contains(want), "want {want:?} in:\n{stderr}");
    }
    assert_eq!(fake.request_count(), 0);
}
