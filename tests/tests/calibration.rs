//! A cluster's estimates learn (real nats-server with the shipped roles, redis-server,
//! coordinator and workers; the fake LLM replying a fixed length): before any debate
//! `parley submit --estimate` assumes 400 tokens a reply; after two debates the coordinator
//! has kept their completion tokens in Redis, and the estimate says it is calibrated, uses
//! the fake's length and is within 15 % of a third debate's real spend. The storage holds
//! one bounded list per provider/model and kind.

use std::time::Duration;

use parley_cluster::redis_store::calibration::SAMPLES_KEPT;
use parley_testkit::fake_llm::script::kind_of;
use parley_tests::{parley_cli, redis_connection, spec, spec_config, write_json, Cluster};
use serde_json::{json, Value};

/// Characters of every reply: 600, which the fake counts as 150 completion tokens.
const REPLY_CHARS: usize = 600;
const PROBLEM: &str = "Design a rate limiter for a public API";

fn fixed_length(fake: &parley_testkit::FakeLlm) {
    fake.set_honour_max_tokens(true);
    fake.set_responder(|r| {
        let text: String = "tokens bucket limits rate per key "
            .chars()
            .cycle()
            .take(REPLY_CHARS)
            .collect();
        match kind_of(&r.prompt_text()) {
            "synthesize" => json!({
                "solutionMarkdown": &text[..REPLY_CHARS - 200],
                "tradeoffs": ["memory per key"],
                "recommendations": ["measure first"],
                "unfulfilledMajorRequirements": [],
                "openQuestions": [],
                "unresolvedDisagreements": [],
                "confidence": 80
            })
            .to_string(),
            _ => text,
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_estimates_learn_what_past_debates_used() {
    let c = Cluster::start_with_roles(json!({})).await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    fixed_length(&c.fake);
    let dir = tempfile::tempdir().unwrap();
    write_json(dir.path().join("debate-config.json"), &spec_config(None));
    let url = c.nats_url_for("client");
    let estimate = || async {
        let out = parley_cli(
            dir.path(),
            &[
                "submit",
                PROBLEM,
                "--estimate",
                "--json",
                "--nats-url",
                &url,
            ],
        )
        .await;
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(!err.contains("warning"), "{err}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };

    let before = estimate().await;
    assert!(
        before["completions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["basis"] == "assumed"),
        "{before}"
    );

    for _ in 0..2 {
        let id = c.submit(&spec(PROBLEM)).await;
        let state = c.wait_done(&id, Duration::from_secs(120)).await;
        assert_eq!(state["status"], "completed", "{state}");
    }
    // The samples are written in the background of the results: wait for the last.
    let mut redis = redis_connection(&c.redis.url()).await;
    let mut after = Value::Null;
    for _ in 0..50 {
        after = estimate().await;
        if after["completions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["basis"] == "calibrated")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let completions = after["completions"].as_array().unwrap();
    let basis = |kind: &str, model: &str| {
        completions
            .iter()
            .find(|b| b["kind"] == kind && b["model"] == model)
            .unwrap_or_else(|| panic!("{kind} {model}: {after}"))
            .clone()
    };
    // Two debates of two rounds: 8 critiques of model-arch, 4 refinements and 2
    // proposals (too few of their kind: the model's calls pooled).
    let critiques = basis("critique", "model-arch");
    assert_eq!(critiques["basis"], "calibrated", "{critiques}");
    assert_eq!(critiques["meanTokens"], REPLY_CHARS / 4, "{critiques}");
    assert_eq!(
        critiques["note"],
        "calibrated from 8 calls of model-arch critiques"
    );
    assert_eq!(critiques["provider"], "openai-compatible", "{critiques}");
    let proposals = basis("proposal", "model-arch");
    assert_eq!(
        proposals["note"], "calibrated from 14 calls of model-arch (all kinds)",
        "{proposals}"
    );

    let id = c.submit(&spec(PROBLEM)).await;
    let third = c.wait_done(&id, Duration::from_secs(120)).await;
    let real = third["spend"]["totalTokens"].as_u64().unwrap() as f64;
    let assumed = before["total"]["tokens"]["expected"].as_u64().unwrap() as f64;
    let learned = after["total"]["tokens"]["expected"].as_u64().unwrap() as f64;
    println!(
        "real {real}; estimate assumed {assumed} ({:+.1} %), calibrated {learned} ({:+.1} %)",
        (assumed / real - 1.0) * 100.0,
        (learned / real - 1.0) * 100.0
    );
    assert!(
        (learned / real - 1.0).abs() < (assumed / real - 1.0).abs(),
        "the estimate did not move toward the real spend"
    );
    assert!(
        (0.85..=1.15).contains(&(learned / real)),
        "{learned} vs {real}"
    );

    // One list per provider/model and kind (3 agents × 3 kinds, the judge's synthesis),
    // each within its bound.
    let keys: Vec<String> = redis::cmd("ZRANGE")
        .arg("parley:{calibration}:keys")
        .arg(0)
        .arg(-1)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(keys.len(), 10, "{keys:?}");
    for k in &keys {
        let n: usize = redis::cmd("LLEN")
            .arg(format!("parley:{{calibration}}:s:{k}"))
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!((1..=SAMPLES_KEPT).contains(&n), "{k}: {n}");
    }
}
