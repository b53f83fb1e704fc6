//! Agent tools in a cluster: `parley submit --context DIR` snapshots the directory into the
//! submission; the agent worker (another process, another working directory) serves
//! `file_read` from the snapshot in the debate's stored spec. The directory is deleted right
//! after the submission, so nothing can read it later; task bodies in Redis never copy the
//! snapshot.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::time::Duration;

use parley_testkit::FakeToolCall;
use parley_tests::*;
use serde_json::json;

const MARKER: &str = "MARKER-c1d2: shard the cache by tenant";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_serve_file_read_from_the_submitted_snapshot() {
    let c = Cluster::start().await;
    // Calls take a moment, so task bodies can be looked at while they are in flight.
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(200)));
    c.fake.set_tool_caller(|r| {
        if r.tool_outputs().is_empty() {
            vec![FakeToolCall::new(
                "file_read",
                r#"{"path":"docs/design.md"}"#,
            )]
        } else {
            Vec::new()
        }
    });
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let dir = tempfile::tempdir().unwrap();
    let tools = json!([{"name": "file_read"}, {"name": "list_files"}]);
    let cfg = json!({
        "agents": [
            {"id": "agent-a", "name": "A", "role": "architect", "model": "model-a", "tools": tools},
            {"id": "agent-b", "name": "B", "role": "security", "model": "model-b", "tools": tools,
             "toolCallLimit": 2}
        ],
        "judge": {"id": "judge-main", "name": "Judge", "role": "generalist", "model": "model-judge"},
        "debate": {"rounds": 1}
    });
    std::fs::write(dir.path().join("cli.json"), cfg.to_string()).unwrap();
    let ctx = dir.path().join("ctx");
    std::fs::create_dir_all(ctx.join("docs")).unwrap();
    std::fs::write(ctx.join("docs/design.md"), format!("# Design\n{MARKER}\n")).unwrap();

    let out = tokio::process::Command::new(workspace_bin("parley"))
        .current_dir(dir.path())
        .args([
            "submit",
            "Design a multi-tenant cache",
            "--config",
            "cli.json",
            "--context",
            "ctx",
            "--nats-url",
            &c.nats.url(),
        ])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    std::fs::remove_dir_all(&ctx).unwrap();

    // While tasks are in flight: the spec holds the snapshot, task bodies do not.
    let mut redis = redis::Client::open(c.redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let spec: String = redis::cmd("GET")
        .arg(format!("parley:{{{id}}}:spec"))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(spec.contains(MARKER));
    let mut bodies_seen = 0;
    for _ in 0..200 {
        let bodies: Vec<String> = redis::cmd("HVALS")
            .arg(format!("parley:{{{id}}}:tasks"))
            .query_async(&mut redis)
            .await
            .unwrap();
        bodies_seen += bodies.len();
        for b in &bodies {
            assert!(!b.contains(MARKER), "a task body copies the snapshot: {b}");
            assert!(
                b.contains("\"tools\""),
                "the agent's tools travel with the task: {b}"
            );
        }
        if bodies_seen >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(bodies_seen > 0, "no task body seen in flight");

    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_eq!(state["status"], "completed", "{state}");
    let contributions = state["rounds"][0]["contributions"].as_array().unwrap();
    assert_eq!(contributions.len(), 6);
    for k in contributions {
        assert_eq!(
            k["metadata"]["toolCalls"],
            json!([{"tool": "file_read", "arguments": r#"{"path":"docs/design.md"}"#,
                    "resultBytes": MARKER.len() + 10, "ok": true}]),
            "{k}"
        );
    }
    // What crossed the wire: the worker sent the file's content back to the model.
    let reqs = c.fake.requests();
    let results: Vec<Vec<(String, String)>> = reqs
        .iter()
        .map(RecordedRequest::tool_outputs)
        .filter(|o| !o.is_empty())
        .collect();
    assert_eq!(results.len(), 6);
    for o in &results {
        assert_eq!(o[0].1, format!("# Design\n{MARKER}\n"));
    }
    for r in reqs.iter().filter(|r| r.model != "model-judge") {
        assert_eq!(r.tool_names(), ["file_read", "list_files"]);
    }
}
