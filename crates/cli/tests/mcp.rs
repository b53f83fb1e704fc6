//! End-to-end tests of `parley mcp`: a real MCP client (the official Python SDK, installed
//! by `scripts/mcp-python.sh` when missing) starts the real binary over stdio against the
//! fake LLM, embedded and in front of a cluster (real nats-server and redis-server, the
//! coordinator and worker binaries). Build the binaries first: `cargo build --workspace
//! --bins`.
//!
//! The client (`tests/mcp_client.py`) sends bad arguments, estimates, starts a debate with
//! clarifications, follows it with `debate_result` and its progress notifications, answers
//! the questions and reads the result and the resources; it prints what it saw as JSON.
//! The test asserts on that and on what reached the LLM.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use parley_testkit::{FakeLlm, Latency};
use parley_tests::Cluster;
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");
const PROBLEM: &str = "Design a billing ledger for a multi-tenant SaaS";
const CONTEXT: &str = "We already run PostgreSQL 16 and must keep EU data in the EU.";
const CLARIFY: &str = "{\"questions\": [{\"text\": \"your question\"}]}";
const ANSWER: &str = "about 40,000 tenants";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python of the environment holding the MCP SDK (installed when missing).
fn mcp_python() -> String {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/mcp-python.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("scripts/mcp-python.sh runs");
    assert!(out.status.success(), "scripts/mcp-python.sh failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .expect("the script prints the python path")
        .trim()
        .to_string()
}

/// The architect asks two questions, once; everyone else answers in prose.
fn script_fake(fake: &FakeLlm) {
    fake.set_responder(|r| {
        let prompt = r.prompt_text();
        if prompt.contains(CLARIFY) {
            return if r.model == "model-arch" && !prompt.contains("already asked") {
                json!({"questions": [{"text": "How many tenants?"}, {"text": "Which region?"}]})
                    .to_string()
            } else {
                json!({"questions": []}).to_string()
            };
        }
        format!("{} says: one ledger table per tenant shard.", r.model)
    });
    // Slow enough that a debate is seen running (progress notifications), fast enough
    // for a test.
    fake.set_latency(Latency::Fixed(Duration::from_millis(150)));
}

/// Runs the Python client against `parley mcp` in `dir` with `args`; returns what it saw.
fn run_client(dir: &Path, args: &[&str]) -> Value {
    run_client_with(dir, args, &[])
}

/// [`run_client`] with environment variables (`PARLEY_MCP_HTTP_URL`, ...: over HTTP).
fn run_client_with(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Value {
    let python = mcp_python();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let out = Command::new(python)
        .arg(script)
        .arg(PARLEY)
        .arg(dir)
        .arg(PROBLEM)
        .arg(CONTEXT)
        .args(args)
        .current_dir(dir)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("PARLEY_MCP_NATS_URL")
        .env("PARLEY_MODEL_DIR", dir.join("no-models"))
        .env("PARLEY_LOG", "info")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("the MCP client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the MCP client failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {last}\nstderr:\n{stderr}"))
}

/// What every run must show, whichever the backend.
fn assert_session(seen: &Value, fake: &FakeLlm) {
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "answer_questions",
            "cancel_debate",
            "contribute",
            "debate_result",
            "debate_status",
            "estimate_debate",
            "list_debates",
            "start_debate",
            "steer_debate"
        ]
    );
    for p in [
        "problem",
        "rounds",
        "roles",
        "agents",
        "budget_usd",
        "context",
    ] {
        assert!(
            seen["start_schema_properties"]
                .as_array()
                .unwrap()
                .contains(&json!(p)),
            "start_debate's schema lacks {p}: {}",
            seen["start_schema_properties"]
        );
    }

    // Bad arguments: JSON-RPC invalid params, the message naming the argument.
    let errors = &seen["errors"];
    for (case, starts) in [
        ("missing_problem", "problem: required"),
        ("rounds_0", "rounds: 0 is out of range"),
        ("rounds_1000", "rounds: 1000 is out of range"),
        (
            "bad_id",
            "debate_id: \"../../etc/passwd\" is not a debate id",
        ),
        ("wait_too_long", "wait_seconds: 600 is out of range"),
        (
            "unknown_debate",
            "debate_id: no debate deb-20200101-000000-zzzzzz",
        ),
        ("bad_resource", "debate_id:"),
    ] {
        assert_eq!(errors[case]["code"], -32602, "{case}: {}", errors[case]);
        let msg = errors[case]["message"].as_str().unwrap();
        assert!(
            msg.starts_with(starts),
            "{case}: {msg:?} does not start with {starts:?}"
        );
    }

    let est = &seen["estimate"];
    assert!(
        est["total"]["calls"]["expected"].as_u64().unwrap() >= 4,
        "{est}"
    );

    // The start did not wait for the debate: the first result was not the solution.
    let results = seen["results"].as_array().unwrap();
    assert_ne!(results[0]["status"], "completed", "{results:?}");
    assert_eq!(seen["answered"], true, "{results:?}");
    let status = &seen["status_while_waiting"];
    assert_eq!(status["status"], "awaiting_clarifications", "{status}");
    let questions = status["questions_waiting"].as_array().unwrap();
    assert_eq!(questions.len(), 2, "{status}");
    assert_eq!(questions[0]["question"], "How many tenants?");
    let reply = &seen["answer_reply"]["reply"];
    assert!(
        reply.get("remaining").is_none_or(|r| r == 0),
        "answers left a question open: {reply}"
    );

    // Followed to the end with progress notifications, then the solution.
    let progress = seen["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "no progress notification: {seen}");
    assert!(
        progress
            .iter()
            .any(|p| p["message"].as_str().unwrap_or("").contains("round 1/1")),
        "{progress:?}"
    );
    let fin = &seen["final"];
    assert_eq!(fin["status"], "completed", "{fin}");
    let description = fin["solution"]["description"].as_str().unwrap_or("");
    assert!(!description.trim().is_empty(), "{fin}");
    assert!(
        fin["solution"]["unresolved_disagreements"].is_array(),
        "{fin}"
    );
    assert!(fin["spent"]["calls"].as_u64().unwrap() > 0, "{fin}");
    assert!(fin["spent"]["tokens"].as_u64().unwrap() > 0, "{fin}");
    assert_eq!(seen["status_at_end"]["status"], "completed");

    // Resources and the list.
    let id = seen["debate_id"].as_str().unwrap();
    assert!(seen["listed"].as_array().unwrap().contains(&json!(id)));
    for what in ["state", "report"] {
        let uri = format!("parley://debates/{id}/{what}");
        assert!(
            seen["resources"].as_array().unwrap().contains(&json!(uri)),
            "{uri} not listed"
        );
    }
    assert_eq!(seen["report_mime"], "text/markdown");
    assert!(
        seen["report"].as_str().unwrap().contains(PROBLEM),
        "{}",
        seen["report"]
    );
    let state = &seen["state"];
    assert_eq!(state["status"], "completed");
    // The decision record: of this debate, with one entry per contribution and a solution.
    let record = &seen["record"];
    assert_eq!(record["debateId"], id, "{record}");
    assert!(record["solutionDigest"].is_string(), "{record}");
    assert!(
        !record["entries"].as_array().unwrap().is_empty(),
        "{record}"
    );
    // The state resource names the record it was written to.
    assert_eq!(
        state["decisionRecord"]["entries"],
        record["entries"].as_array().unwrap().len(),
        "{state}"
    );
    assert!(state["decisionRecord"]["digest"].is_string(), "{state}");
    assert_eq!(state["context"], CONTEXT);

    // What crossed the wire: the problem and the context reached the agents, and every
    // call after the questions carries the answers.
    let requests = fake.requests();
    assert!(requests.iter().any(|r| r.prompt_text().contains(PROBLEM)));
    assert!(requests.iter().any(|r| r.prompt_text().contains(CONTEXT)));
    let later: Vec<_> = requests
        .iter()
        .filter(|r| !r.prompt_text().contains(CLARIFY))
        .collect();
    assert!(!later.is_empty());
    assert!(
        later.iter().all(|r| r.prompt_text().contains(ANSWER)),
        "a call after the answers lacks them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_client_runs_an_embedded_debate_over_stdio() {
    let fake = FakeLlm::start().await.unwrap();
    script_fake(&fake);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("debate-config.json");
    parley_tests::write_json(&config, &parley_tests::spec_config(Some(&fake.base_url())));
    let seen = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || run_client(&dir, &[])
    })
    .await
    .unwrap();
    assert_eq!(seen["server"]["name"], "parley");
    assert_session(&seen, &fake);
    // Embedded: the debate is saved in the folder the server ran in.
    let id = seen["debate_id"].as_str().unwrap();
    assert!(dir.path().join(format!("debates/{id}.json")).exists());
}

/// The same session in front of a cluster: `parley mcp --nats-url` as the `serve` NATS
/// user, the shipped roles, the coordinator and both workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_client_runs_a_cluster_debate_over_stdio() {
    let c = Cluster::start_with_roles(json!({})).await;
    script_fake(&c.fake);
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(None),
    );
    let url = c.nats_url_for("serve");
    let seen = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || run_client(&dir, &["--nats-url", &url])
    })
    .await
    .unwrap();
    assert_session(&seen, &c.fake);
    assert!(
        !dir.path().join("debates").exists(),
        "a cluster debate is not saved locally"
    );
}

/// A key made by `parley serve --new-api-key NAME`: (the key, its `[[keys]]` entry).
fn new_key(name: &str) -> (String, String) {
    let out = Command::new(PARLEY)
        .args(["serve", "--new-api-key", name])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let key = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("pk_"))
        .unwrap()
        .to_string();
    (key, text[text.find("[[keys]]").unwrap()..].to_string())
}

/// `parley serve` in `dir` with two user keys (alice, bob): the server, its address, the
/// keys.
fn serve_with_keys(
    dir: &Path,
    extra: &[&str],
) -> (parley_testkit::ChildProcess, String, String, String) {
    let (alice, a) = new_key("alice");
    let (bob, b) = new_key("bob");
    let keys = dir.join("keys.toml");
    std::fs::write(&keys, format!("{a}\n{b}")).unwrap();
    let port = parley_testkit::free_port();
    let mut cmd = Command::new(PARLEY);
    cmd.current_dir(dir)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--api-keys", keys.to_str().unwrap()])
        .args(extra)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("PARLEY_SERVE_TOKEN")
        .env_remove("PARLEY_NATS_URL")
        .env("PARLEY_MODEL_DIR", dir.join("no-models"))
        .env("PARLEY_LOG", "info");
    let p = parley_testkit::ChildProcess::spawn(cmd, "serve").unwrap();
    assert!(
        p.wait_for_log_line("Parley is serving", Duration::from_secs(30))
            .is_some(),
        "serve did not start:\n{}",
        p.log()
    );
    (p, format!("http://127.0.0.1:{port}"), alice, bob)
}

/// The MCP session over streamable HTTP at `base`/mcp as alice; bob's session neither
/// sees nor reaches her debate; a request without a key is a 401.
async fn http_session(base: &str, alice: &str, bob: &str, dir: &Path, fake: &FakeLlm) {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let http = reqwest::Client::new();
    for key in [None, Some("pk_not_a_key")] {
        let mut req = http
            .post(format!("{base}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init.to_string());
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401, "{key:?}");
    }
    let env = [
        ("PARLEY_MCP_HTTP_URL", format!("{base}/mcp")),
        ("PARLEY_MCP_HTTP_KEY", alice.to_string()),
        ("PARLEY_MCP_HTTP_OTHER_KEY", bob.to_string()),
    ];
    let seen = tokio::task::spawn_blocking({
        let dir = dir.to_path_buf();
        move || run_client_with(&dir, &[], &env)
    })
    .await
    .unwrap();
    assert_eq!(seen["server"]["name"], "parley");
    assert_session(&seen, fake);
    let id = seen["debate_id"].as_str().unwrap();
    // Bob's session: the debate is unknown to him, exactly like one that does not exist.
    let other = &seen["other_key"];
    for call in ["status", "cancel"] {
        assert_eq!(other[call]["code"], -32602, "{other}");
        let msg = other[call]["message"].as_str().unwrap();
        assert!(msg.starts_with("debate_id:"), "{msg}");
    }
    assert!(
        !other["listed"].as_array().unwrap().contains(&json!(id)),
        "{other}"
    );
    // Alice owns it, as if she had created it over /v1.
    let state: Value = http
        .get(format!("{base}/v1/debates/{id}"))
        .bearer_auth(alice)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["owner"], "alice", "{state}");
    assert_eq!(state["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_client_runs_an_embedded_debate_over_streamable_http() {
    let fake = FakeLlm::start().await.unwrap();
    script_fake(&fake);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("debate-config.json");
    parley_tests::write_json(&config, &parley_tests::spec_config(Some(&fake.base_url())));
    let (_serve, base, alice, bob) = serve_with_keys(dir.path(), &[]);
    http_session(&base, &alice, &bob, dir.path(), &fake).await;
}

/// The same over HTTP in front of a cluster: `parley serve --nats-url` as the `serve` NATS
/// user, the shipped roles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_client_runs_a_cluster_debate_over_streamable_http() {
    let c = Cluster::start_with_roles(json!({})).await;
    script_fake(&c.fake);
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(None),
    );
    let url = c.nats_url_for("serve");
    let (_serve, base, alice, bob) = serve_with_keys(dir.path(), &["--nats-url", &url]);
    http_session(&base, &alice, &bob, dir.path(), &c.fake).await;
}
