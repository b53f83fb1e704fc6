//! Makespan / critical-path ratio of the embedded engine.
//!
//! Runs the 3-agent, 2-round, fixed-termination debate in-process against the fake
//! OpenAI-compatible server, then computes the critical path of the debate's task graph from
//! each call's observed latency (the `latencyMs` recorded on every contribution and on the
//! synthesis). With a fixed latency L the critical path is 6 × L: proposal → critique →
//! refinement → (carried over) critique → refinement → synthesis. Edges: a critique needs
//! the target's proposal and (round ≥ 2) the critic's own previous refinement (its history);
//! a refinement needs the agent's proposal and every critique of it.
//!
//! `cargo bench -p parley-cli --bench makespan`

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use parley_cli::EmbeddedRunner;
use parley_engine::{run_debate, Input, Machine};
use parley_llm::{ProviderSettings, Registry};
use parley_protocol::DebateSpec;
use parley_testkit::{FakeLlm, Latency};
use parley_tests::critical_path_ms;
use serde_json::json;

fn spec() -> DebateSpec {
    let agents: Vec<_> = ["architect", "security", "kiss"]
        .iter()
        .map(|r| json!({"id": format!("agent-{r}"), "name": r, "role": r, "model": format!("m-{r}")}))
        .collect();
    serde_json::from_value(json!({
        "problem": "Design a rate limiter",
        "agents": agents,
        "judge": {"id": "judge", "name": "J", "role": "generalist", "model": "m-judge"},
        "debate": {"rounds": 2, "terminationCondition": {"type": "fixed"}}
    }))
    .expect("spec")
}

async fn one(latency: Latency, label: &str, runs: usize) {
    let fake = FakeLlm::start().await.expect("fake llm");
    fake.set_latency(latency);
    let mut ratios = Vec::new();
    for _ in 0..runs {
        // The endpoint is the operator's setting, never the spec's.
        let registry = Arc::new(Registry::new(ProviderSettings {
            base_url: Some(fake.base_url()),
            ..ProviderSettings::default()
        }));
        let runner = Arc::new(EmbeddedRunner {
            registry,
            context_files: None,
        });
        let machine = Machine::new(
            parley_protocol::new_debate_id(Utc::now()),
            spec(),
            Utc::now(),
        );
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let started = Instant::now();
        let state = run_debate(machine, Input::Start, runner, None, tx)
            .await
            .expect("debate");
        let makespan = started.elapsed();
        assert_eq!(state.status, parley_protocol::DebateStatus::Completed);
        let cp = critical_path_ms(&state);
        let ratio = makespan.as_secs_f64() * 1000.0 / cp as f64;
        println!(
            "{label}: makespan {:>6.0} ms  critical path {:>6} ms  ratio {:.3}",
            makespan.as_secs_f64() * 1000.0,
            cp,
            ratio
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "{label}: {runs} runs, ratio median {:.3}, worst {:.3}\n",
        ratios[ratios.len() / 2],
        ratios[ratios.len() - 1]
    );
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    one(
        Latency::Fixed(Duration::from_millis(200)),
        "fixed 200 ms",
        runs,
    )
    .await;
    one(
        Latency::HeavyTail {
            p50: Duration::from_millis(200),
            p99: Duration::from_secs(2),
        },
        "heavy tail p50 200 ms / p99 2 s",
        runs,
    )
    .await;
}
