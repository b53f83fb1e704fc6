//! Adaptive-debate benchmark: what the modes of issue 25 cost in calls and tokens. Embedded
//! debates (`parley run`, one process per debate) against the fake LLM in this process,
//! scripted per task kind: 4 agents (their own models) and a judge, for each critique
//! topology {all, ring, random k=1} × termination {fixed 3 rounds, verdict (max 3 rounds),
//! adaptive (screen, then fixed 3 rounds)} × judge {agrees from its first verdict, never
//! agrees}. Prints one Markdown table row per debate: the LLM calls, and the prompt and
//! completion tokens as the fake counts them (characters / 4, as its `usage` reports).
//!
//! ```sh
//! cargo build -p parley-cli --bin parley
//! cargo test -p parley-tests --bench adaptive     # the dev build's parley
//! # or, after `cargo build --release -p parley-cli --bin parley`:
//! cargo bench -p parley-tests --bench adaptive
//! ```
//! `PARLEY_BIN` names another `parley` binary. A fixed-termination debate makes no verdict
//! call, so its rows are the same whatever the judge would say.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parley_testkit::fake_llm::script::{kind_of, DebateScript};
use parley_tests::*;
use serde_json::{json, Value};

/// Tokens as the fake LLM reports them (`usage`): characters / 4, at least 1.
fn rough_tokens(text: &str) -> u64 {
    ((text.chars().count() / 4) as u64).max(1)
}

struct Row {
    topology: &'static str,
    termination: &'static str,
    judge: &'static str,
    rounds: usize,
    calls: usize,
    critiques: usize,
    prompt_tokens: u64,
    completion_tokens: u64,
}

fn config(base_url: &str, topology: &str, termination: &str) -> Value {
    let mut cfg = spec_config(Some(base_url));
    cfg["agents"].as_array_mut().unwrap().push(json!({
        "id": "agent-perf", "name": "Perf", "role": "performance", "model": "model-perf",
        "temperature": 0.2
    }));
    let debate = &mut cfg["debate"];
    debate["rounds"] = json!(3);
    debate["critique"] = match topology {
        "random k=1" => json!({"topology": "random", "k": 1}),
        t => json!({"topology": t}),
    };
    match termination {
        "fixed 3" => debate["terminationCondition"] = json!({"type": "fixed"}),
        "verdict" => {
            debate["terminationCondition"] =
                json!({"type": "verdict", "threshold": 80, "maxRounds": 3})
        }
        _ => {
            debate["terminationCondition"] = json!({"type": "fixed", "threshold": 80});
            debate["mode"] = json!("adaptive");
        }
    }
    cfg
}

async fn one(bin: &PathBuf, topology: &'static str, termination: &'static str, agree: bool) -> Row {
    let fake = FakeLlm::start().await.unwrap();
    let script = if agree {
        DebateScript::agreeing()
    } else {
        DebateScript::never_agreeing()
    };
    let completion = Arc::new(AtomicU64::new(0));
    let counted = completion.clone();
    fake.set_responder(move |r| {
        let text = script.reply(r);
        counted.fetch_add(rough_tokens(&text), Ordering::SeqCst);
        text
    });
    let dir = tempfile::tempdir().unwrap();
    write_json(
        dir.path().join("debate-config.json"),
        &config(&fake.base_url(), topology, termination),
    );
    let out = parley_command(
        bin,
        dir.path(),
        &["run", "Design a cache", "--output", "state.json"],
    )
    .output()
    .await
    .expect("run parley");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = read_json(dir.path().join("state.json"));
    let requests = fake.requests();
    Row {
        topology,
        termination,
        judge: if agree {
            "agrees after round 1"
        } else {
            "never agrees"
        },
        rounds: state["rounds"].as_array().map_or(0, Vec::len),
        calls: requests.len(),
        critiques: requests
            .iter()
            .filter(|r| kind_of(&r.prompt_text()) == "critique")
            .count(),
        prompt_tokens: requests
            .iter()
            .map(|r| rough_tokens(&r.prompt_text()))
            .sum(),
        completion_tokens: completion.load(Ordering::SeqCst),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let bin = std::env::var_os("PARLEY_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_bin("parley"));
    assert!(
        bin.exists(),
        "no parley binary at {} (build it first, see the module docs)",
        bin.display()
    );
    println!("| topology | termination | judge | rounds | calls | critiques | prompt tokens | completion tokens |");
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    for topology in ["all", "ring", "random k=1"] {
        for termination in ["fixed 3", "verdict", "adaptive"] {
            for agree in [true, false] {
                let r = one(&bin, topology, termination, agree).await;
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.topology,
                    r.termination,
                    r.judge,
                    r.rounds,
                    r.calls,
                    r.critiques,
                    r.prompt_tokens,
                    r.completion_tokens
                );
            }
        }
    }
}
