//! Budgets a user can set, embedded, against the fake LLM replying a fixed length: the
//! estimate learns from a first run and is within 15 % of a second; a third of the
//! unbudgeted spend (in tokens, in dollars) completes with a synthesized solution, records
//! its degradations and never spends past the budget; a budget below the smallest debate is
//! refused with the figures.

use std::path::Path;
use std::process::Output;

use parley_testkit::fake_llm::script::kind_of;
use parley_testkit::{run_parley, FakeLlm};
use parley_tests::{read_json, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// Characters of every reply: 1,800, which the fake counts as 450 completion tokens.
const REPLY_CHARS: usize = 1_800;
const PROBLEM: &str = "Design a rate limiter for a public API";

async fn parley(dir: &Path, args: &[&str]) -> Output {
    run_parley(PARLEY, dir, args, &[]).await
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    err
}

/// A fake whose every reply is [`REPLY_CHARS`] long (at most the call's `maxTokens`): text,
/// or the synthesis's JSON with a description of that length.
async fn fixed_length_fake() -> FakeLlm {
    let fake = FakeLlm::start().await.unwrap();
    // A real provider's reply stops at the `maxTokens` asked for.
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
    fake
}

/// Three agents on one model, a judge on another, three fixed rounds, no summaries; both
/// models priced.
fn config(base_url: &str, budget: Option<Value>) -> Value {
    config_for(base_url, budget, "model-a", "model-judge")
}

/// [`config`] with the agents on `model` and the judge on `judge`.
fn config_for(base_url: &str, budget: Option<Value>, model: &str, judge: &str) -> Value {
    let roles = ["architect", "security", "kiss"];
    let agents: Vec<Value> = roles
        .iter()
        .enumerate()
        .map(|(i, role)| {
            json!({"id": format!("agent-{i}"), "name": format!("A{i}"), "role": role,
                   "model": model, "provider": "openai-compatible", "temperature": 0.2})
        })
        .collect();
    let mut cfg = json!({
        "baseUrl": base_url,
        "prices": "prices.json",
        "agents": agents,
        "judge": {"id": "judge", "name": "Judge", "role": "generalist", "model": judge,
                  "provider": "openai-compatible", "temperature": 0.2},
        "debate": {"rounds": 3, "terminationCondition": {"type": "fixed"},
                   "summarization": {"enabled": false}}
    });
    if let Some(b) = budget {
        cfg["debate"]["budget"] = b;
    }
    cfg
}

fn prices() -> Value {
    json!({
        "model-a": {"input_cost_per_token": 1e-6, "output_cost_per_token": 4e-6},
        "model-judge": {"input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6}
    })
}

/// Runs the debate in `dir` (its config written with `budget`), returns its state.
async fn run(dir: &Path, base_url: &str, budget: Option<Value>, out: &str) -> Value {
    run_config(dir, &config(base_url, budget), out).await
}

/// Runs the debate of `cfg` in `dir`, returns its state.
async fn run_config(dir: &Path, cfg: &Value, out: &str) -> Value {
    write_json(dir.join("debate-config.json"), cfg);
    let output = parley(dir, &["run", PROBLEM, "--output", out]).await;
    let err = ok(&output);
    println!(
        "$ parley run {PROBLEM:?} --output {out}\n{}{err}",
        String::from_utf8_lossy(&output.stdout)
    );
    read_json(dir.join(out))
}

fn tokens(state: &Value) -> u64 {
    state["spend"]["totalTokens"].as_u64().unwrap()
}

/// A finished budgeted debate: completed with a synthesized solution, degraded, every
/// reservation released, the ledger equal to the calls' usage, never over the limit.
fn assert_kept(state: &Value) {
    assert_eq!(state["status"], "completed", "{state}");
    let description = state["finalSolution"]["description"].as_str().unwrap();
    assert!(description.starts_with("tokens bucket"), "{description}");
    let b = &state["budget"];
    assert!(
        !b["degraded"].as_array().unwrap().is_empty(),
        "a third of the debate must degrade: {b}"
    );
    assert!(
        b.get("reservations").is_none() && b.get("caps").is_none(),
        "{b}"
    );
    assert_eq!(b["reserved"]["tokens"], 0, "{b}");
    assert_eq!(b["spent"]["tokens"].as_u64().unwrap(), tokens(state), "{b}");
    if let Some(limit) = b["limit"]["tokens"].as_u64() {
        assert!(b["spent"]["tokens"].as_u64().unwrap() <= limit, "{b}");
    }
    if let Some(limit) = b["limit"]["usd"].as_f64() {
        let spent = b["spent"]["usd"].as_f64().unwrap();
        assert!(spent <= limit + 1e-12, "{b}");
        let real = state["spend"]["costUsd"].as_f64().unwrap();
        assert!((spent - real).abs() < 1e-9, "{spent} vs {real}");
    }
    assert!(
        b.get("overruns").is_none(),
        "the fake gave what was asked: {b}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_estimate_learns_from_a_run_and_a_third_of_its_spend_completes_within_budget() {
    let fake = fixed_length_fake().await;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    write_json(dir.join("prices.json"), &prices());
    write_json(
        dir.join("debate-config.json"),
        &config(&fake.base_url(), None),
    );

    // Before any debate: every reply assumed.
    let out = parley(dir, &["estimate", PROBLEM, "--json"]).await;
    ok(&out);
    let before: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        before["completions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["basis"] == "assumed" && b["note"] == "assumed 400 tokens"),
        "{before}"
    );

    let first = run(dir, &fake.base_url(), None, "first.json").await;
    let full = tokens(&first);
    let full_usd = first["spend"]["costUsd"].as_f64().unwrap();

    let out = parley(dir, &["estimate", PROBLEM, "--json"]).await;
    ok(&out);
    let est: Value = serde_json::from_slice(&out.stdout).unwrap();
    let table =
        String::from_utf8_lossy(&parley(dir, &["estimate", PROBLEM]).await.stdout).to_string();
    println!("{table}");
    let completions = est["completions"].as_array().unwrap();
    let basis = |kind: &str, model: &str| {
        completions
            .iter()
            .find(|b| b["kind"] == kind && b["model"] == model)
            .unwrap_or_else(|| panic!("{kind} {model}: {est}"))
            .clone()
    };
    let critiques = basis("critique", "model-a");
    assert_eq!(critiques["basis"], "calibrated", "{critiques}");
    assert_eq!(critiques["samples"], 18, "{critiques}");
    assert_eq!(critiques["meanTokens"], 450, "{critiques}");
    assert_eq!(
        critiques["note"],
        "calibrated from 18 calls of model-a critiques"
    );
    // Three proposals are too few of their kind: the model's calls of every kind, pooled.
    assert_eq!(
        basis("proposal", "model-a")["note"],
        "calibrated from 30 calls of model-a (all kinds)"
    );
    assert_eq!(basis("synthesis", "model-judge")["basis"], "assumed");
    assert!(
        table.contains("calibrated from 18 calls of model-a critiques")
            && table.contains("assumed 400 tokens"),
        "{table}"
    );

    let second = run(dir, &fake.base_url(), None, "second.json").await;
    let real = tokens(&second);
    let expected = est["total"]["tokens"]["expected"].as_u64().unwrap();
    let ratio = real as f64 / expected as f64;
    println!("first run {full} tokens (${full_usd:.6}); estimate {expected}; second run {real} ({ratio:.3})");
    assert!((0.85..=1.15).contains(&ratio), "{real} vs {expected}");

    // A third of the unbudgeted spend, in tokens.
    let limit = full / 3;
    let state = run(
        dir,
        &fake.base_url(),
        Some(json!({ "tokens": limit })),
        "tokens.json",
    )
    .await;
    println!(
        "token budget {limit}: {}",
        serde_json::to_string_pretty(&state["budget"]).unwrap()
    );
    assert_kept(&state);

    // A third of its cost, in dollars.
    let usd = full_usd / 3.0;
    let state = run(
        dir,
        &fake.base_url(),
        Some(json!({ "usd": usd })),
        "usd.json",
    )
    .await;
    println!(
        "dollar budget {usd}: {}",
        serde_json::to_string_pretty(&state["budget"]).unwrap()
    );
    assert_kept(&state);

    // Below the smallest debate: refused before any call, with the figures.
    write_json(
        dir.join("debate-config.json"),
        &config(&fake.base_url(), Some(json!({"tokens": 2000}))),
    );
    let calls = fake.request_count();
    let out = parley(dir, &["run", PROBLEM]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    println!("{err}");
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("needs up to")
            && err.contains("over its budget of 2000 tokens")
            && err.contains("3 round-1 proposal(s) at 96 completion tokens"),
        "{err}"
    );
    assert_eq!(fake.request_count(), calls, "no call was made");
}

/// Prompts of OpenAI-family models are counted with their own tokenizer, so a budget of a
/// third of the unbudgeted spend uses more of itself than with the byte bound of models
/// Parley has no tokenizer for, and still never spends past it. The fake reports an
/// OpenAI-family model's prompt tokens with its tokenizer, as OpenAI does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_counted_with_the_models_tokenizer_uses_more_of_itself_and_never_overspends() {
    let fake = fixed_length_fake().await;
    let mut used = Vec::new();
    for (model, judge) in [("model-a", "model-judge"), ("gpt-4o-mini", "gpt-4o")] {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        write_json(dir.join("prices.json"), &prices());
        let full = tokens(
            &run_config(
                dir,
                &config_for(&fake.base_url(), None, model, judge),
                "full.json",
            )
            .await,
        );
        let limit = full / 3;
        let state = run_config(
            dir,
            &config_for(
                &fake.base_url(),
                Some(json!({ "tokens": limit })),
                model,
                judge,
            ),
            "third.json",
        )
        .await;
        assert_kept(&state);
        let spent = tokens(&state);
        let share = spent as f64 / limit as f64;
        println!(
            "{model} / {judge}: unbudgeted {full} tokens; budget {limit}: spent {spent} \
             ({:.0} %), degraded {}",
            share * 100.0,
            state["budget"]["degraded"]
        );
        used.push(share);
    }
    assert!(
        used[1] > used[0],
        "the tokenizer's count used {:.2} of the budget, the byte bound {:.2}",
        used[1],
        used[0]
    );
}
