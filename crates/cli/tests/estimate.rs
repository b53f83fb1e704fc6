//! `parley estimate` against what debates really use on the fake OpenAI-compatible server
//! (which reports usage), and the cost of each call from a price file.

use std::path::Path;
use std::process::Output;

use parley_testkit::{run_parley, FakeLlm};
use parley_tests::{read_json, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// The fake's plain reply is about 225 characters: ~56 tokens at 4 characters a token.
const FAKE_REPLY_TOKENS: &str = "56";

async fn parley(dir: &Path, args: &[&str]) -> Output {
    run_parley(PARLEY, dir, args, &[]).await
}

const ROLES: [&str; 6] = [
    "architect",
    "security",
    "kiss",
    "performance",
    "testing",
    "generalist",
];

/// A config of `agents` agents, `rounds` fixed rounds, summarization on (a 600-character
/// threshold, so summaries are due from round 2) or off.
fn config(base_url: &str, agents: usize, rounds: u32, summarize: bool) -> Value {
    let agents: Vec<Value> = (0..agents)
        .map(|i| {
            json!({"id": format!("agent-{i}"), "name": format!("A{i}"), "role": ROLES[i % ROLES.len()],
                   "model": format!("model-{i}"), "provider": "openai-compatible", "temperature": 0.2})
        })
        .collect();
    json!({
        "baseUrl": base_url,
        "prices": "prices.json",
        "agents": agents,
        "judge": {"id": "judge", "name": "Judge", "role": "generalist", "model": "model-judge",
                  "provider": "openai-compatible", "temperature": 0.2},
        "debate": {"rounds": rounds, "terminationCondition": {"type": "fixed"},
                   "summarization": {"enabled": summarize, "threshold": 600, "maxLength": 400}}
    })
}

fn prices() -> Value {
    // model-0 is priced per provider, the judge by model name; the others have no price.
    json!({
        "openai-compatible/model-0": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
        "model-judge": {"input_cost_per_token": 3e-6, "output_cost_per_token": 4e-6,
                        "cache_read_input_token_cost": 1e-7},
        "sample_spec": {"max_tokens": "LEGACY parameter", "input_cost_per_token": 0}
    })
}

fn total_tokens(state: &Value) -> u64 {
    state["spend"]["totalTokens"]
        .as_u64()
        .expect("spend.totalTokens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn estimate_matches_real_usage_within_15_percent_and_never_exceeds_max() {
    let fake = FakeLlm::start().await.unwrap();
    let cases: [(usize, u32, bool); 10] = [
        (2, 1, false),
        (2, 3, true),
        (3, 1, true),
        (3, 2, false),
        (3, 3, true),
        (4, 2, true),
        (4, 3, false),
        (5, 1, false),
        (5, 2, true),
        (6, 3, true),
    ];
    let mut table = vec![
        "| agents | rounds | summaries | calls est. | calls real | tokens min | expected | max | real | real/expected |".to_string(),
        "|---|---|---|---|---|---|---|---|---|---|".to_string(),
    ];
    let mut failures = Vec::new();
    for (agents, rounds, summarize) in cases {
        let dir = tempfile::tempdir().unwrap();
        write_json(
            dir.path().join("debate-config.json"),
            &config(&fake.base_url(), agents, rounds, summarize),
        );
        write_json(dir.path().join("prices.json"), &prices());
        let out = parley(
            dir.path(),
            &[
                "estimate",
                "Design a rate limiter for a public API",
                "--json",
                "--expected-reply-tokens",
                FAKE_REPLY_TOKENS,
            ],
        )
        .await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let est: Value = serde_json::from_slice(&out.stdout).unwrap();
        let calls_before = fake.request_count();
        let out = parley(
            dir.path(),
            &[
                "run",
                "Design a rate limiter for a public API",
                "--output",
                "state.json",
            ],
        )
        .await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let state = read_json(dir.path().join("state.json"));
        let real_calls = fake.request_count() - calls_before;
        let real = total_tokens(&state);
        let t = &est["total"]["tokens"];
        let (min, expected, max) = (
            t["min"].as_u64().unwrap(),
            t["expected"].as_u64().unwrap(),
            t["max"].as_u64().unwrap(),
        );
        let est_calls = est["total"]["calls"]["expected"].as_u64().unwrap();
        let ratio = real as f64 / expected as f64;
        table.push(format!(
            "| {agents} | {rounds} | {} | {est_calls} | {real_calls} | {min} | {expected} | {max} | {real} | {ratio:.3} |",
            if summarize { "on" } else { "off" }
        ));
        if est_calls != real_calls as u64 {
            failures.push(format!(
                "{agents}/{rounds}/{summarize}: {est_calls} calls estimated, {real_calls} made"
            ));
        }
        if !(0.85..=1.15).contains(&ratio) || real > max || real < min {
            failures.push(format!(
                "{agents}/{rounds}/{summarize}: real {real} vs {min}/{expected}/{max}"
            ));
        }
        // Each call is priced from its reported usage: model-0 per provider, the judge by
        // model name, the others unknown.
        let r0 = &state["rounds"][0]["contributions"];
        for c in r0.as_array().unwrap() {
            let m = &c["metadata"];
            let cost = m["costUsd"].as_f64();
            if c["agentId"] == "agent-0" {
                let want = m["promptTokens"].as_f64().unwrap() * 1e-6
                    + m["completionTokens"].as_f64().unwrap() * 2e-6;
                assert!((cost.unwrap() - want).abs() < 1e-12, "{c}");
            } else {
                assert_eq!(cost, None, "{c}");
            }
        }
        let judge = &state["synthesisMetadata"];
        assert!(judge["costUsd"].as_f64().unwrap() > 0.0, "{judge}");
        assert!(
            state["spend"]["costUsd"].is_null(),
            "unpriced agents make the total unknown"
        );
        assert!(
            state["spend"]["participants"]["agent-0"]["costUsd"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        let e0 = &est["participants"][0]["costUsd"]["expected"];
        assert!(e0.as_f64().unwrap() > 0.0, "{est}");
        assert!(
            est["participants"][1]["costUsd"]["expected"].is_null(),
            "{est}"
        );
    }
    println!("{}", table.join("\n"));
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        table.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_stopping_termination_is_a_range_and_the_table_names_every_participant() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("http://127.0.0.1:9", 3, 3, false);
    cfg["debate"]["terminationCondition"] = json!({"type": "convergence", "threshold": 80});
    write_json(dir.path().join("debate-config.json"), &cfg);
    write_json(dir.path().join("prices.json"), &prices());
    let out = parley(dir.path(), &["estimate", "Design a cache", "--json"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let est: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Stopping after round 1: 3 proposals, 6 critiques, 3 refinements, 1 evaluation, the
    // synthesis. All 3 rounds: 3 + 18 + 9 + 2 evaluations + 1.
    assert_eq!(est["calls"]["critique"]["min"], 6, "{est}");
    assert_eq!(est["calls"]["critique"]["max"], 18, "{est}");
    assert_eq!(est["calls"]["evaluation"]["min"], 1, "{est}");
    assert_eq!(est["calls"]["evaluation"]["max"], 2, "{est}");
    assert_eq!(est["total"]["calls"]["min"], 14, "{est}");
    assert_eq!(est["total"]["calls"]["max"], 33, "{est}");
    // `submit --estimate` prints the same and submits nothing (no NATS here: it warns that
    // the cluster's calibration is missing and assumes the replies).
    let out = parley(
        dir.path(),
        &["submit", "Design a cache", "--estimate", "--json"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["total"]["calls"], est["total"]["calls"]);
    let out = parley(dir.path(), &["run", "Design a cache", "--estimate"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["agent-0", "agent-1", "agent-2", "judge", "total", "unknown"] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_price_files_exit_4_naming_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    write_json(
        dir.path().join("debate-config.json"),
        &config("http://127.0.0.1:9", 2, 1, false),
    );
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("missing.json", Vec::new(), "cannot open"),
        ("text.json", b"prices: cheap".to_vec(), "not JSON"),
        (
            "negative.json",
            br#"{"gpt-x": {"input_cost_per_token": -0.5, "output_cost_per_token": 1e-6}}"#.to_vec(),
            "\"gpt-x\".input_cost_per_token",
        ),
        ("junk.json", vec![b'{'; 17 * 1024 * 1024], "larger than"),
    ];
    for (name, body, wanted) in cases {
        if !body.is_empty() {
            std::fs::write(dir.path().join(name), body).unwrap();
        }
        let out = parley(dir.path(), &["run", "Design a cache", "--prices", name]).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{name}: {err}");
        assert!(err.contains(name) && err.contains(wanted), "{name}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A 3-agent, 3-round debate with `budget` and completions capped at 120 tokens.
fn budget_config(base_url: &str, budget: Value) -> Value {
    let mut cfg = config(base_url, 3, 3, false);
    for a in cfg["agents"].as_array_mut().unwrap() {
        a["maxTokens"] = json!(120);
    }
    cfg["judge"]["maxTokens"] = json!(120);
    cfg["debate"]["budget"] = budget;
    cfg
}

/// Runs the [`budget_config`] debate in `dir` on `budget` (none: `Null`) with `extra`
/// flags; its stderr and final state, after checking it exited 0.
async fn run_on_budget(
    dir: &Path,
    base_url: &str,
    budget: Value,
    extra: &[&str],
) -> (String, Value) {
    let mut cfg = budget_config(base_url, budget.clone());
    if budget.is_null() {
        cfg["debate"].as_object_mut().unwrap().remove("budget");
    }
    write_json(dir.join("debate-config.json"), &cfg);
    write_json(dir.join("prices.json"), &prices());
    let mut args = vec!["run", "Design a cache", "--output", "state.json"];
    args.extend_from_slice(extra);
    let out = parley(dir, &args).await;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    (err, read_json(dir.join("state.json")))
}

/// The smallest token budget [`budget_config`]'s debate takes, from the refusal's figures.
async fn smallest_budget(dir: &Path, base_url: &str) -> u64 {
    write_json(dir.join("prices.json"), &prices());
    write_json(
        dir.join("debate-config.json"),
        &budget_config(base_url, json!({"tokens": 1})),
    );
    let out = parley(dir, &["run", "Design a cache"]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let rest = err
        .split("needs up to ")
        .nth(1)
        .unwrap_or_else(|| panic!("no figures: {err}"));
    rest.split(' ').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thirds_of_the_debate_ends_with_a_synthesis_and_never_overspends() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_, full) = run_on_budget(dir.path(), &fake.base_url(), Value::Null, &[]).await;
    // (A third of this debate of short replies is below its smallest run: prompts are
    // counted at a token per byte.)
    let budget = total_tokens(&full) * 2 / 3;
    let (err, state) = run_on_budget(
        dir.path(),
        &fake.base_url(),
        json!({ "tokens": budget }),
        &["--verbose"],
    )
    .await;
    assert_eq!(state["status"], "completed", "{err}");
    assert!(state["finalSolution"]["description"].is_string());
    let b = &state["budget"];
    println!("{}", serde_json::to_string_pretty(b).unwrap());
    let spent = b["spent"]["tokens"].as_u64().unwrap();
    assert!(spent <= budget, "spent {spent} of {budget}");
    assert_eq!(spent, total_tokens(&state), "the ledger settles real usage");
    assert_eq!(b["reserved"]["tokens"], 0, "{b}");
    assert!(
        b.get("reservations").is_none(),
        "nothing left reserved: {b}"
    );
    let rounds = state["rounds"].as_array().unwrap().len();
    assert!(rounds < 3, "{rounds} rounds ran on a budget for fewer");
    let steps: Vec<&str> = b["degraded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["step"].as_str().unwrap())
        .collect();
    assert!(steps.contains(&"noNewRound"), "{steps:?}");
    // Every degradation was announced as it happened.
    let events = err.matches("budget:").count();
    assert!(events >= 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_just_over_the_smallest_debate_drops_critiques_and_still_synthesizes() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let budget = smallest_budget(dir.path(), &fake.base_url()).await + 2_000;
    let (_err, state) = run_on_budget(
        dir.path(),
        &fake.base_url(),
        json!({ "tokens": budget }),
        &[],
    )
    .await;
    assert_eq!(state["status"], "completed");
    assert!(state["finalSolution"]["description"].is_string());
    let spent = state["budget"]["spent"]["tokens"].as_u64().unwrap();
    assert!(spent <= budget, "spent {spent} of {budget}");
    let dropped = state["rounds"][0]["dropped"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!dropped.is_empty(), "{state}");
    assert!(dropped
        .iter()
        .all(|d| d["error"].as_str().unwrap().starts_with("budget")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_that_cannot_work_are_refused_before_any_call_with_the_figures() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_json(dir.path().join("prices.json"), &prices());
    let cases = [
        (json!({"tokens": 1000}), "needs up to"),
        (json!({"tokens": 0}), "debate.budget.tokens"),
        (json!({"usd": -1.0}), "debate.budget.usd"),
        (json!({"usd": 1e12}), "debate.budget.usd"),
        (json!({}), "debate.budget"),
        // model-1 and model-2 have no price: a dollar budget cannot be kept.
        (json!({"usd": 5.0}), "no price for agents[1]: model-1"),
    ];
    for (budget, wanted) in cases {
        write_json(
            dir.path().join("debate-config.json"),
            &budget_config(&fake.base_url(), budget.clone()),
        );
        let out = parley(dir.path(), &["run", "Design a cache"]).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(2) | Some(4)),
            "{budget}: {:?} {err}",
            out.status.code()
        );
        assert!(err.contains(wanted), "{budget}: {err}");
    }
    assert_eq!(fake.request_count(), 0, "no call was made");
}
