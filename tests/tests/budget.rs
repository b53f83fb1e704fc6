//! Debate budgets in a cluster (real nats-server, redis-server, coordinator and workers;
//! the fake LLM): caps refused at submit with the figures, workers racing on one budget
//! (a third of the unbudgeted spend, in tokens and in dollars), a worker killed while its
//! task holds a reservation.

use std::time::Duration;

use parley_testkit::Latency;
use parley_tests::{spec, Cluster};
use serde_json::{json, Value};

/// The shared spec (3 agents, 2 fixed rounds) with completions capped at 120 tokens and
/// `budget`.
fn budget_spec(problem: &str, budget: Value) -> Value {
    let mut s = spec(problem);
    for a in s["agents"].as_array_mut().unwrap() {
        a["maxTokens"] = json!(120);
    }
    s["judge"]["maxTokens"] = json!(120);
    s["debate"]["budget"] = budget;
    s
}

fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Checks the ledger of a finished debate: never over the limit, every reservation
/// released, and what was spent is what the calls reported.
fn assert_budget_kept(state: &Value, limit: u64) {
    let b = &state["budget"];
    let spent = b["spent"]["tokens"].as_u64().unwrap();
    assert!(spent <= limit, "spent {spent} of {limit}: {b}");
    assert_eq!(b["reserved"]["tokens"], 0, "{b}");
    assert!(b.get("reservations").is_none(), "a reservation leaked: {b}");
    assert_eq!(
        state["spend"]["totalTokens"].as_u64().unwrap(),
        spent,
        "{b}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submissions_over_the_operator_cap_or_their_own_minimum_are_refused_with_figures() {
    let c = Cluster::start().await;
    let _coord = c.coordinator_with(&[("PARLEY_MAX_DEBATE_TOKENS", "100000".into())]);
    let submit = |s: Value| {
        let c = &c;
        async move {
            c.request("parley.debates.submit", serde_json::to_vec(&s).unwrap())
                .await
        }
    };
    let r = submit(budget_spec("p", json!({"tokens": 250000}))).await;
    assert_eq!(r["error"]["code"], "invalid_request", "{r}");
    let m = message(&r);
    assert!(
        m.contains("debate.budget.tokens") && m.contains("250000") && m.contains("100000"),
        "{m}"
    );
    let r = submit(budget_spec("p", json!({"tokens": 2000}))).await;
    let m = message(&r);
    assert!(
        m.contains("debate.budget")
            && m.contains("needs up to")
            && m.contains("over its budget of 2000 tokens"),
        "{m}"
    );
    // A dollar budget needs prices: none are configured.
    let r = submit(budget_spec("p", json!({"usd": 1.0}))).await;
    assert!(message(&r).contains("no price for"), "{r}");
    let r = submit(budget_spec("p", json!({"tokens": -5}))).await;
    assert_eq!(r["error"]["code"], "invalid_request", "{r}");
    // Without its own budget a debate runs under the cap.
    let mut s = budget_spec("p", Value::Null);
    s["debate"].as_object_mut().unwrap().remove("budget");
    let id = c.submit(&s).await;
    let mut limit = Value::Null;
    for _ in 0..100 {
        limit = c.status(&id).await["budget"]["limit"]["tokens"].clone();
        if !limit.is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(limit, 100000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agent_workers_racing_on_one_small_budget_never_overspend() {
    let c = Cluster::start().await;
    let _coord = c.coordinator();
    let _a1 = c.worker("agent");
    let _a2 = c.worker("agent");
    let _judge = c.worker("judge");
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(50)));
    let limit = 15_000;
    let id = c
        .submit(&budget_spec("Design a cache", json!({"tokens": limit})))
        .await;
    let state = c.wait_done(&id, Duration::from_secs(120)).await;
    assert_eq!(state["status"], "completed", "{state}");
    assert!(state["finalSolution"]["description"].is_string());
    assert_budget_kept(&state, limit);
    assert!(
        !state["budget"]["degraded"].as_array().unwrap().is_empty(),
        "the budget was meant to pinch: {}",
        state["budget"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_holding_a_reservation_leaks_nothing() {
    let c = Cluster::start().await;
    let _coord = c.coordinator_with(&[("PARLEY_TASK_DEADLINE_MARGIN_SECS", "2".into())]);
    let _judge = c.worker("judge");
    // Calls hang long enough for the worker to die holding its tasks.
    c.fake.set_latency(Latency::Fixed(Duration::from_secs(30)));
    let mut doomed = c.worker("agent");
    let limit = 80_000;
    let id = c
        .submit(&budget_spec("Design a queue", json!({"tokens": limit})))
        .await;
    for _ in 0..300 {
        if c.fake.request_count() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(c.fake.request_count() > 0, "no call started");
    let state = c.status(&id).await;
    assert!(
        state["budget"]["reservations"]
            .as_object()
            .is_some_and(|r| !r.is_empty()),
        "{}",
        state["budget"]
    );
    doomed.kill9();
    c.fake.set_latency(Latency::Zero);
    let _rescuer = c.worker("agent");
    let state = c.wait_done(&id, Duration::from_secs(180)).await;
    assert_eq!(state["status"], "completed", "{state}");
    assert_budget_kept(&state, limit);
}

/// Characters of every reply of [`fixed_length`]: 1,800 (450 completion tokens).
const REPLY_CHARS: usize = 1_800;

/// Every reply [`REPLY_CHARS`] long, cut to the `maxTokens` asked for: text, or the
/// synthesis's JSON.
fn fixed_length(fake: &parley_testkit::FakeLlm) {
    fake.set_honour_max_tokens(true);
    fake.set_responder(|r| {
        let text: String = "tokens bucket limits rate per key "
            .chars()
            .cycle()
            .take(REPLY_CHARS)
            .collect();
        match parley_testkit::fake_llm::script::kind_of(&r.prompt_text()) {
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

/// The shared spec with three fixed rounds, no summaries, and `budget` (none: `Null`).
fn three_rounds(problem: &str, budget: Value) -> Value {
    let mut s = spec(problem);
    s["debate"]["rounds"] = json!(3);
    s["debate"]["summarization"] = json!({"enabled": false});
    if !budget.is_null() {
        s["debate"]["budget"] = budget;
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_of_the_unbudgeted_spend_completes_on_two_racing_agent_workers() {
    let c = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.json");
    let models = ["model-arch", "model-sec", "model-kiss", "model-judge"];
    let table: serde_json::Map<String, Value> = models
        .iter()
        .map(|m| {
            (
                m.to_string(),
                json!({"input_cost_per_token": 1e-6, "output_cost_per_token": 4e-6}),
            )
        })
        .collect();
    std::fs::write(&prices, serde_json::to_vec(&table).unwrap()).unwrap();
    let env = [("PARLEY_PRICES", prices.display().to_string())];
    let _coord = c.coordinator_with(&env);
    let _a1 = c.worker_with("agent", &[], &env);
    let _a2 = c.worker_with("agent", &[], &env);
    let _judge = c.worker_with("judge", &[], &env);
    fixed_length(&c.fake);
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(20)));

    let id = c
        .submit(&three_rounds("Design a rate limiter", Value::Null))
        .await;
    let full = c.wait_done(&id, Duration::from_secs(180)).await;
    assert_eq!(full["status"], "completed", "{full}");
    let full_tokens = full["spend"]["totalTokens"].as_u64().unwrap();
    let full_usd = full["spend"]["costUsd"].as_f64().unwrap();

    for budget in [
        json!({"tokens": full_tokens / 3}),
        json!({"usd": full_usd / 3.0}),
    ] {
        let id = c
            .submit(&three_rounds("Design a rate limiter", budget.clone()))
            .await;
        let state = c.wait_done(&id, Duration::from_secs(180)).await;
        println!(
            "unbudgeted {full_tokens} tokens / ${full_usd:.6}; budget {budget}: {}",
            serde_json::to_string_pretty(&state["budget"]).unwrap()
        );
        assert_eq!(state["status"], "completed", "{state}");
        assert!(state["finalSolution"]["description"]
            .as_str()
            .unwrap()
            .starts_with("tokens bucket"));
        let b = &state["budget"];
        assert!(!b["degraded"].as_array().unwrap().is_empty(), "{b}");
        assert!(b.get("overruns").is_none(), "{b}");
        assert!(
            b.get("reservations").is_none() && b.get("caps").is_none(),
            "{b}"
        );
        match (budget["tokens"].as_u64(), budget["usd"].as_f64()) {
            (Some(limit), _) => assert_budget_kept(&state, limit),
            (_, Some(limit)) => {
                let spent = b["spent"]["usd"].as_f64().unwrap();
                assert!(spent <= limit + 1e-12, "{b}");
                let real = state["spend"]["costUsd"].as_f64().unwrap();
                assert!((spent - real).abs() < 1e-9, "{spent} vs {real}");
            }
            _ => unreachable!(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_call_resumes_the_ledger_and_the_fitted_caps() {
    let c = Cluster::start().await;
    let mut coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    fixed_length(&c.fake);
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(500)));
    let limit = 20_000;
    let id = c
        .submit(&three_rounds(
            "Design a job queue",
            json!({"tokens": limit}),
        ))
        .await;
    // Calls out, each with its reservation and fitted cap in the checkpoint.
    let mut before = Value::Null;
    for _ in 0..200 {
        before = c.status(&id).await;
        if before["budget"]["caps"]
            .as_object()
            .is_some_and(|m| !m.is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        before["budget"]["caps"]
            .as_object()
            .is_some_and(|m| !m.is_empty()),
        "{}",
        before["budget"]
    );
    coord.kill9();
    let _coord2 = c.coordinator();
    let state = c.wait_done(&id, Duration::from_secs(180)).await;
    assert_eq!(state["status"], "completed", "{state}");
    assert!(state["finalSolution"]["description"].is_string());
    assert_budget_kept(&state, limit);
    // Every call asked for at least its floor (the engine's unit tests check a resumed
    // task asks for the cap it was fitted to before).
    for r in c.fake.requests() {
        let Some(asked) = r.body["max_tokens"]
            .as_u64()
            .or_else(|| r.body["max_output_tokens"].as_u64())
        else {
            continue;
        };
        assert!(asked >= 96, "{asked}");
    }
}
