//! `parley compare --nats-url`: the debate strategies go to a cluster (coordinator, agent and
//! judge workers, NATS, Redis) through the `parley submit` path, the single strategy and the
//! evaluators run from the CLI; a second invocation makes no call and submits nothing.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use parley_tests::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debate_strategies_run_on_the_cluster() {
    let c = Cluster::start().await;
    c.fake.set_responder(|req| {
        let prompt = req.prompt_text();
        if prompt.contains("# Answer A") {
            // Prefers the debate's answer in either order.
            let a = prompt.split("# Answer A").nth(1).unwrap_or("");
            let a = a.split("# Answer B").next().unwrap_or("");
            let winner = if a.contains("CLUSTER") { "A" } else { "B" };
            return json!({"winner": winner, "reason": "scripted"}).to_string();
        }
        if req.model == "eval-model" {
            return rubric(5, 5).to_string();
        }
        if prompt.contains("JSON") {
            return json!({
                "description": "CLUSTER synthesis: shard by key.",
                "tradeoffs": ["t"], "recommendations": ["r"], "confidence": 70
            })
            .to_string();
        }
        format!("{} answer: a design.", req.model)
    });
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("problems")).unwrap();
    std::fs::write(
        d.join("problems/kv.md"),
        "# KV store\n\nDesign a key-value store.\n\n## Requirements\n- Survives a node loss\n- Reads under 5 ms\n",
    )
    .unwrap();
    let mut debate = spec_config(None);
    debate["debate"]["rounds"] = json!(1);
    write_json(d.join("debate-config.json"), &debate);
    write_json(
        d.join("eval-config.json"),
        &json!({"agents": [{"id": "ev", "name": "Ev", "model": "eval-model"}]}),
    );
    write_json(
        d.join("compare.json"),
        &json!({
            "baseUrl": c.fake.base_url(),
            "evaluators": "eval-config.json",
            "strategies": [
                {"type": "single", "name": "single", "model": "single-model"},
                {"type": "debate", "name": "debate", "config": "debate-config.json"}
            ]
        }),
    );
    let run = || {
        tokio::process::Command::new(workspace_bin("parley"))
            .current_dir(d)
            .args([
                "compare",
                "-c",
                "compare.json",
                "-o",
                "out",
                "--nats-url",
                &c.nats.url(),
            ])
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENROUTER_API_KEY")
            .env_remove("PARLEY_NATS_URL")
            .output()
    };
    let out = run().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");

    // The debate ran on the cluster: its id is recorded, its state is the coordinator's,
    // and nothing was checkpointed locally.
    let rec = read_json(d.join("out/runs/kv__debate.json"));
    let id = rec["debateId"].as_str().expect("a debate id").to_string();
    assert!(!d.join("out/debates").exists());
    assert!(rec["answer"].as_str().unwrap().contains("CLUSTER"), "{rec}");
    assert!(rec["calls"].as_u64().unwrap() >= 4, "{rec}");
    let state = c.status(&id).await;
    assert_eq!(state["status"], "completed", "{state}");
    // The pair was judged in both orders and the debate won both.
    let report = std::fs::read_to_string(d.join("out/report.md")).unwrap();
    assert!(
        report.contains("agreed on 1 of 1 judgements (100 %)"),
        "{report}"
    );
    assert!(report.contains("| debate | debate | 1 |"), "{report}");

    // Resumed: nothing is asked or submitted again.
    let before = c.fake.request_count();
    let again = run().await.unwrap();
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(c.fake.request_count(), before);
}
