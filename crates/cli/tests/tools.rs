//! Agent tools end to end: `parley run --context DIR` against the fake OpenAI-compatible
//! server answering with `tool_calls`. What crosses the wire is asserted: the tool schemas
//! in the requests, the tool results (file contents) in the follow-up requests, the limit,
//! errors given back to the model; and what the saved debate records.

use std::path::Path;
use std::process::Output;

use parley_testkit::{run_parley, FakeLlm, FakeToolCall, RecordedRequest};
use parley_tests::read_json;
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// A line only the context directory's `src/cache.rs` holds.
const MARKER: &str = "MARKER-7f3a: evict with a clock sweep";

async fn parley(dir: &Path, args: &[&str]) -> Output {
    run_parley(PARLEY, dir, args, &[]).await
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Two agents with all three tools (and `limit` as their `toolCallLimit` when set), one
/// round, the fake server as the endpoint.
fn write_config(dir: &Path, base_url: &str, limit: Option<u32>) {
    let agent = |id: &str, role: &str, model: &str| {
        let mut a = json!({"id": id, "name": id, "role": role, "model": model,
            "tools": [{"name": "context_search"}, {"name": "file_read"}, {"name": "list_files"}]});
        if let Some(l) = limit {
            a["toolCallLimit"] = json!(l);
        }
        a
    };
    let cfg = json!({
        "baseUrl": base_url,
        "agents": [agent("agent-a", "architect", "model-a"), agent("agent-b", "security", "model-b")],
        "judge": {"id": "judge-main", "name": "Judge", "role": "generalist", "model": "model-judge"},
        "debate": {"rounds": 1}
    });
    std::fs::write(dir.join("debate-config.json"), cfg.to_string()).unwrap();
}

/// The context directory: two text files, a binary one.
fn write_context(dir: &Path) -> std::path::PathBuf {
    let ctx = dir.join("ctx");
    std::fs::create_dir_all(ctx.join("src")).unwrap();
    std::fs::write(ctx.join("README.md"), "# Shop\nA web shop.\n").unwrap();
    std::fs::write(ctx.join("src/cache.rs"), format!("// cache\n{MARKER}\n")).unwrap();
    std::fs::write(ctx.join("logo.png"), [0x89, b'P', b'N', b'G', 0, 0]).unwrap();
    ctx
}

fn state(dir: &Path) -> Value {
    read_json(dir.join("state.json"))
}

fn contributions(state: &Value) -> Vec<Value> {
    state["rounds"][0]["contributions"]
        .as_array()
        .unwrap()
        .clone()
}

/// The user prompt of a Chat Completions request (its first user message).
fn user_prompt(r: &RecordedRequest) -> String {
    r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// `parley run` of a product cache design with `ctx` as its context and the state in
/// `state.json`; it exits 0.
async fn run_with_context(dir: &Path) -> Output {
    let out = parley(
        dir,
        &[
            "run",
            "Design a product cache",
            "--context",
            "ctx",
            "-o",
            "state.json",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_read_a_context_file_through_a_tool_call() {
    let fake = FakeLlm::start().await.unwrap();
    // Every first request of an agent task asks to read the file; the follow-up answers.
    fake.set_tool_caller(|r| {
        if r.tool_outputs().is_empty() {
            vec![FakeToolCall::new("file_read", r#"{"path":"src/cache.rs"}"#)]
        } else {
            Vec::new()
        }
    });
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url(), None);
    write_context(dir.path());
    let out = run_with_context(dir.path()).await;

    let reqs = fake.requests();
    let agent_reqs: Vec<&RecordedRequest> =
        reqs.iter().filter(|r| r.model != "model-judge").collect();
    // 2 proposals + 2 critiques + 2 refinements, each one call asking for the tool and one
    // carrying its result.
    assert_eq!(agent_reqs.len(), 12);
    for r in &agent_reqs {
        assert_eq!(
            r.tool_names(),
            ["context_search", "file_read", "list_files"]
        );
        let tools = r.body["tools"].as_array().unwrap();
        let read = tools
            .iter()
            .find(|t| t["function"]["name"] == "file_read")
            .unwrap();
        assert_eq!(read["type"], "function");
        assert_eq!(read["function"]["parameters"]["required"], json!(["path"]));
    }
    // The judge is offered no tools.
    for r in reqs.iter().filter(|r| r.model == "model-judge") {
        assert!(r.tool_names().is_empty());
    }
    let followups: Vec<&&RecordedRequest> = agent_reqs
        .iter()
        .filter(|r| !r.tool_outputs().is_empty())
        .collect();
    assert_eq!(followups.len(), 6);
    for r in &followups {
        let outputs = r.tool_outputs();
        assert_eq!(outputs.len(), 1);
        assert_eq!(outputs[0].1, format!("// cache\n{MARKER}\n"));
        // The assistant turn with the call precedes its result, same id.
        let m = r.body["messages"].as_array().unwrap();
        let call = m.iter().find(|m| m["role"] == "assistant").unwrap();
        assert_eq!(call["tool_calls"][0]["id"].as_str().unwrap(), outputs[0].0);
        assert_eq!(
            call["tool_calls"][0]["function"]["arguments"],
            r#"{"path":"src/cache.rs"}"#
        );
    }

    let s = state(dir.path());
    assert_eq!(s["status"], "completed");
    let cs = contributions(&s);
    assert_eq!(cs.len(), 6);
    for c in &cs {
        let calls = c["metadata"]["toolCalls"].as_array().unwrap();
        assert_eq!(
            calls,
            &vec![
                json!({"tool": "file_read", "arguments": r#"{"path":"src/cache.rs"}"#,
                         "resultBytes": MARKER.len() + 10, "ok": true})
            ],
            "{c}"
        );
    }
    // Usage of both calls is summed: each task's two requests (same user prompt) against
    // its contribution, per agent.
    let rough = |r: &RecordedRequest| (r.prompt_text().chars().count() as u64 / 4).max(1);
    for (agent, model) in [("agent-a", "model-a"), ("agent-b", "model-b")] {
        let mut by_prompt: std::collections::BTreeMap<String, u64> = Default::default();
        for r in agent_reqs.iter().filter(|r| r.model == model) {
            *by_prompt.entry(user_prompt(r)).or_default() += rough(r);
        }
        let mut sums: Vec<u64> = by_prompt.into_values().collect();
        let mut recorded: Vec<u64> = cs
            .iter()
            .filter(|c| c["agentId"] == agent)
            .map(|c| c["metadata"]["promptTokens"].as_u64().unwrap())
            .collect();
        sums.sort_unstable();
        recorded.sort_unstable();
        assert_eq!(recorded, sums, "{agent}");
    }
    // The snapshot travels in the checkpoint's spec (text files only), not as a path.
    let err = stderr(&out);
    let saved = err
        .lines()
        .find_map(|l| l.strip_prefix("Saved debate to "))
        .unwrap();
    let checkpoint: Value = read_json(dir.path().join(saved));
    let files = checkpoint["spec"]["contextFiles"]["files"]
        .as_array()
        .unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["README.md", "src/cache.rs"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_stops_at_the_tool_call_limit() {
    let fake = FakeLlm::start().await.unwrap();
    // A model that never stops asking: only `tool_choice: "none"` gets an answer.
    fake.set_tool_caller(|_| vec![FakeToolCall::new("list_files", "{}")]);
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url(), Some(3));
    write_context(dir.path());
    run_with_context(dir.path()).await;
    let reqs = fake.requests();
    for model in ["model-a", "model-b"] {
        let mine: Vec<&RecordedRequest> = reqs.iter().filter(|r| r.model == model).collect();
        // 3 tasks × (3 calls + 1 final request).
        assert_eq!(mine.len(), 12, "{model}");
        let finals: Vec<&&RecordedRequest> = mine.iter().filter(|r| !r.may_call_tools()).collect();
        assert_eq!(finals.len(), 3, "{model}");
        for f in finals {
            assert_eq!(f.body["tool_choice"], "none");
            assert_eq!(f.tool_outputs().len(), 3);
            assert!(f.prompt_text().contains("You have used all 3 tool calls"));
            assert!(f.tool_outputs()[0].1.contains("src/cache.rs"));
        }
    }
    let s = state(dir.path());
    assert_eq!(s["status"], "completed");
    for c in contributions(&s) {
        let calls = c["metadata"]["toolCalls"].as_array().unwrap();
        assert_eq!(calls.len(), 3, "{c}");
        assert!(calls
            .iter()
            .all(|k| k["tool"] == "list_files" && k["ok"] == true));
        assert!(!c["content"].as_str().unwrap().is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tool_calls_get_an_error_result_and_the_debate_goes_on() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_tool_caller(|r| {
        if r.tool_outputs().is_empty() {
            vec![
                FakeToolCall::new("file_read", "{not json"),
                FakeToolCall::new("file_read", r#"{"path":"../outside.txt"}"#),
                FakeToolCall::new("file_read", r#"{"path":"/etc/hostname"}"#),
                FakeToolCall::new("shell", r#"{"cmd":"ls"}"#),
                FakeToolCall::new("context_search", r#"{"query":"clock SWEEP"}"#),
            ]
        } else {
            Vec::new()
        }
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("outside.txt"), "not for agents").unwrap();
    write_config(dir.path(), &fake.base_url(), None);
    write_context(dir.path());
    run_with_context(dir.path()).await;
    let followups: Vec<RecordedRequest> = fake
        .requests()
        .into_iter()
        .filter(|r| !r.tool_outputs().is_empty())
        .collect();
    assert_eq!(followups.len(), 6);
    for r in &followups {
        let o: Vec<String> = r.tool_outputs().into_iter().map(|(_, t)| t).collect();
        assert!(
            o[0].starts_with("error: the arguments are not valid JSON"),
            "{}",
            o[0]
        );
        assert!(
            o[1].starts_with("error: path \"../outside.txt\""),
            "{}",
            o[1]
        );
        assert!(
            o[2].starts_with("error: path \"/etc/hostname\""),
            "{}",
            o[2]
        );
        assert!(
            o[3].starts_with("error: unknown tool \"shell\""),
            "{}",
            o[3]
        );
        assert!(
            o[4].contains(&format!("src/cache.rs:2: {MARKER}")),
            "{}",
            o[4]
        );
        assert!(o.iter().all(|t| !t.contains("not for agents")));
    }
    let s = state(dir.path());
    assert_eq!(s["status"], "completed");
    for c in contributions(&s) {
        let calls = c["metadata"]["toolCalls"].as_array().unwrap();
        let ok: Vec<bool> = calls.iter().map(|k| k["ok"].as_bool().unwrap()).collect();
        assert_eq!(ok, [false, false, false, false, true], "{c}");
        assert!(calls[0]["error"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"));
        assert_eq!(calls[1]["arguments"], r#"{"path":"../outside.txt"}"#);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_refusals_and_config_errors_name_the_problem() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url(), None);
    let run = |ctx: &'static str| {
        let d = dir.path().to_path_buf();
        async move { parley(&d, &["run", "P", "--context", ctx]).await }
    };

    // A symbolic link out of the directory.
    let ctx = write_context(dir.path());
    std::fs::write(dir.path().join("secret.txt"), "s3cr3t").unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), ctx.join("src/leak.txt"))
            .unwrap();
        let out = run("ctx").await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--context ctx"), "{err}");
        assert!(err.contains("src/leak.txt is a symbolic link"), "{err}");
        assert!(err.contains("outside the context directory"), "{err}");
        std::fs::remove_file(ctx.join("src/leak.txt")).unwrap();
    }

    // Past the per-file cap: the file is left out with a warning, the debate runs.
    std::fs::write(ctx.join("dump.sql"), "x".repeat(300 * 1024)).unwrap();
    let out = run("ctx").await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("the snapshot is cut at its caps"), "{err}");
    assert!(err.contains("dump.sql (307200 bytes)"), "{err}");
    assert!(
        fake.requests()
            .iter()
            .all(|r| !r.prompt_text().contains(&"x".repeat(1000))),
        "the cut file reached a prompt"
    );
    std::fs::remove_file(ctx.join("dump.sql")).unwrap();
    // No call is made from here on: every remaining case is refused before the debate.
    let calls_so_far = fake.request_count();

    // Within the snapshot's caps, but over one cluster submission: refused before sending.
    for i in 0..5 {
        std::fs::write(ctx.join(format!("part{i}.txt")), "y".repeat(250 * 1024)).unwrap();
    }
    let out = parley(
        dir.path(),
        &[
            "submit",
            "P",
            "--context",
            "ctx",
            "--nats-url",
            "nats://127.0.0.1:1",
        ],
    )
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("over the cap of 1000000 bytes for one cluster submission"),
        "{err}"
    );
    assert!(
        err.contains("bytes of it are the --context snapshot's files"),
        "{err}"
    );
    for i in 0..5 {
        std::fs::remove_file(ctx.join(format!("part{i}.txt"))).unwrap();
    }

    // Not a directory.
    let out = run("nope").await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--context nope"), "{}", stderr(&out));

    // An unknown tool and a limit out of range: configuration errors naming the keys.
    let cfg = json!({
        "baseUrl": fake.base_url(),
        "agents": [
            {"id": "a", "name": "A", "role": "architect", "model": "m",
             "tools": [{"name": "file_read"}, {"name": "shell_exec"}]},
            {"id": "b", "name": "B", "role": "kiss", "model": "m", "toolCallLimit": 51}
        ]
    });
    std::fs::write(dir.path().join("debate-config.json"), cfg.to_string()).unwrap();
    let out = run("ctx").await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("agents[0].tools[1].name: unknown tool \"shell_exec\""),
        "{err}"
    );
    assert!(
        err.contains("context_search, file_read, list_files"),
        "{err}"
    );
    assert!(
        err.contains("agents[1].toolCallLimit: 51 is out of range 1..=50"),
        "{err}"
    );
    assert_eq!(fake.request_count(), calls_so_far);
}

/// Agents with tools and no `--context` read the current directory (as dialectic does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_with_tools_read_the_current_directory_without_context() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url(), None);
    std::fs::write(dir.path().join("NOTES.md"), "the cache must hold 10k keys").unwrap();
    let out = parley(dir.path(), &["run", "P"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The checkpoint's spec holds the snapshot of the directory `run` was started in.
    let debates: Vec<_> = std::fs::read_dir(dir.path().join("debates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        // (Beside it: the debate's decision record.)
        .filter(|p| !p.to_string_lossy().ends_with(".record.json"))
        .collect();
    assert_eq!(debates.len(), 1, "{debates:?}");
    let checkpoint = read_json(&debates[0]);
    let files = checkpoint["spec"]["contextFiles"]["files"]
        .as_array()
        .expect("a context snapshot")
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert!(files.contains(&"NOTES.md".to_string()), "{files:?}");
    assert!(
        files.contains(&"debate-config.json".to_string()),
        "{files:?}"
    );
}
