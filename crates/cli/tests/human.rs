//! End-to-end tests of a human participant in embedded debates: over the HTTP API v1
//! (`parley serve`: `POST /v1/debates/{id}/contributions`, the caller's key recorded,
//! another user's debate a 404, hostile texts refused with no change) and in `parley run`
//! (`--human-answers FILE`), against the fake LLM. Build the binaries first: `cargo build
//! --workspace --bins`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use parley_testkit::{free_port, ChildProcess, FakeLlm};
use parley_tests::{assert_no_completed_call_repeated, count};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// The tests' config: [`parley_tests::spec_config`] with the architect a person.
fn human_config(base_url: &str) -> Value {
    let mut cfg = parley_tests::spec_config(Some(base_url));
    cfg["agents"][0] =
        json!({"id": "agent-human", "name": "Human", "role": "architect", "provider": "human"});
    cfg["debate"]["rounds"] = json!(1);
    cfg
}

/// A key made by `parley serve --new-api-key NAME`: (the key, its `[[keys]]` entry).
fn new_key(name: &str) -> (String, String) {
    let out = Command::new(PARLEY)
        .args(["serve", "--new-api-key", name, "--api-key-role", "user"])
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

struct Api {
    _proc: ChildProcess,
    base: String,
    http: reqwest::Client,
}

impl Api {
    fn start(dir: &Path, keys: &Path) -> Api {
        let port = free_port();
        let mut cmd = Command::new(PARLEY);
        cmd.current_dir(dir)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--api-keys", keys.to_str().unwrap()])
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENROUTER_API_KEY")
            .env_remove("PARLEY_SERVE_TOKEN")
            .env_remove("PARLEY_NATS_URL")
            .env("PARLEY_MODEL_DIR", dir.join("no-models"))
            .env("PARLEY_LOG", "info");
        let p = ChildProcess::spawn(cmd, "serve").unwrap();
        assert!(
            p.wait_for_log_line("Parley is serving", Duration::from_secs(30))
                .is_some(),
            "serve did not start:\n{}",
            p.log()
        );
        Api {
            _proc: p,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        }
    }

    async fn call(&self, key: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .bearer_auth(key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn contribute(&self, key: &str, id: &str, body: Value) -> (u16, Value) {
        self.call(
            key,
            "POST",
            &format!("/v1/debates/{id}/contributions"),
            Some(body),
        )
        .await
    }

    async fn wait_state(&self, key: &str, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (s, v) = self
                .call(key, "GET", &format!("/v1/debates/{id}"), None)
                .await;
            assert_eq!(s, 200, "{v}");
            if pred(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out; last state: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn open_tasks(state: &Value) -> Vec<Value> {
    state["human"]["open"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_answers_its_turns_over_the_http_api() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &human_config(&fake.base_url()),
    );
    let (alice, a) = new_key("alice");
    let (bob, b) = new_key("bob");
    let keys = dir.path().join("keys.toml");
    std::fs::write(&keys, format!("{a}\n{b}")).unwrap();
    let api = Api::start(dir.path(), &keys);

    let (s, v) = api
        .call(
            &alice,
            "POST",
            "/v1/debates",
            Some(json!({"problem": "Design a cache with a person"})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let id = v["debateId"].as_str().unwrap().to_string();
    // The human's proposal and its critiques of the two agents' proposals wait.
    let state = api
        .wait_state(&alice, &id, |s| open_tasks(s).len() == 3)
        .await;
    let before = state.clone();

    // Hostile or misdirected contributions: clear errors, no change.
    let (s, v) = api
        .contribute(&alice, &id, json!({"text": "x".repeat(20_001)}))
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the limit is"),
        "{v}"
    );
    let (s, v) = api
        .contribute(&alice, &id, json!({"text": "bell\u{7}"}))
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("control character"),
        "{v}"
    );
    let (s, v) = api
        .contribute(
            &alice,
            &id,
            json!({"text": "t", "taskId": "deb-20200101-000000-zzzzzz/1/propose/agent-human"}),
        )
        .await;
    assert_eq!(s, 409, "another debate's task: {v}");
    let (s, v) = api
        .contribute(&bob, &id, json!({"text": "not my debate"}))
        .await;
    assert_eq!(s, 404, "another user's debate: {v}");
    let (s, v) = api
        .contribute(&alice, &id, json!({"text": "t", "bogus": 1}))
        .await;
    assert_eq!(s, 400, "{v}");
    let (_, now) = api
        .call(&alice, "GET", &format!("/v1/debates/{id}"), None)
        .await;
    assert_eq!(now["human"], before["human"], "nothing changed");

    // Every turn of the human, answered over the API.
    let mut answered = 0;
    let state = loop {
        let state = api
            .wait_state(&alice, &id, |s| {
                !open_tasks(s).is_empty()
                    || !["running", "pending"].contains(&s["status"].as_str().unwrap())
            })
            .await;
        let Some(t) = open_tasks(&state).into_iter().next() else {
            break state;
        };
        let text = format!("The person's {}", t["kind"].as_str().unwrap());
        let (s, v) = api
            .contribute(
                &alice,
                &id,
                json!({"taskId": t["taskId"], "agentId": "agent-human", "text": text}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["taskId"], t["taskId"]);
        answered += 1;
    };
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(answered, 4);
    let round = &state["rounds"][0];
    assert_eq!(
        (
            count(round, "proposal"),
            count(round, "critique"),
            count(round, "refinement")
        ),
        (3, 6, 3)
    );
    for c in round["contributions"].as_array().unwrap() {
        let human = c["agentId"] == "agent-human";
        assert_eq!(c["metadata"]["human"] == true, human, "{c}");
    }
    let answered = state["human"]["answered"].as_array().unwrap();
    assert!(answered.iter().all(|a| a["by"] == "alice"), "{answered:?}");
    let judge = 1 + usize::from(!state["judgeSummary"].is_null());
    assert_eq!(fake.request_count(), 8 + judge, "no LLM call for the human");
    assert_no_completed_call_repeated(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parley_run_takes_the_human_turns_from_a_script() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &human_config(&fake.base_url()),
    );
    parley_tests::write_json(
        dir.path().join("human.json"),
        &json!({
            "1/propose/agent-human": "My own proposal: a tenant-keyed cache",
            "critique": "A person's critique",
            "refine": "My refinement",
        }),
    );
    let out = Command::new(PARLEY)
        .current_dir(dir.path())
        .args([
            "run",
            "Design a cache with a person",
            "--human-answers",
            "human.json",
            "-o",
            "out.json",
            "--report",
            "r.md",
        ])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env("PARLEY_MODEL_DIR", dir.path().join("no-models"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("human: agent-human answered"), "{stderr}");
    let state = parley_tests::read_json(dir.path().join("out.json"));
    assert_eq!(state["status"], "completed");
    let p = state["rounds"][0]["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["agentId"] == "agent-human" && c["type"] == "proposal")
        .unwrap()
        .clone();
    assert_eq!(p["content"], "My own proposal: a tenant-keyed cache");
    assert_eq!(p["metadata"]["human"], true);
    assert_eq!(state["human"]["answered"].as_array().unwrap().len(), 4);
    let report = std::fs::read_to_string(dir.path().join("r.md")).unwrap();
    assert_eq!(report.matches("written by a person").count(), 4, "{report}");
    // A script with a control character is refused before anything runs.
    std::fs::write(dir.path().join("bad.json"), r#"{"propose": "a\u0007b"}"#).unwrap();
    let before = fake.request_count();
    let out = Command::new(PARLEY)
        .current_dir(dir.path())
        .args(["run", "Another", "--human-answers", "bad.json"])
        .env_remove("OPENAI_API_KEY")
        .env("PARLEY_MODEL_DIR", dir.path().join("no-models"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("control character"));
    assert_eq!(fake.request_count(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parley_run_asks_the_human_on_its_terminal_with_the_agents_context() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &human_config(&fake.base_url()),
    );
    let cmd = parley_testkit::parley_command(
        PARLEY,
        dir.path(),
        &["run", "Design a cache typed by a person", "-o", "out.json"],
    );
    let mut run = parley_testkit::OnPty::spawn(cmd).unwrap();
    let wait = Duration::from_secs(60);
    // Each turn is asked after its context; answered by typing, ended with ".".
    let prompt = "end with a line holding only \".\"";
    let typed = [
        (
            "Type your proposal",
            "A person's proposal typed on the terminal",
        ),
        ("Type your critique", "The person's first critique"),
        ("Type your critique", "The person's second critique"),
        ("Type your refined proposal", "The person's refinement"),
    ];
    for (k, (what, text)) in typed.iter().enumerate() {
        let start = Instant::now();
        while run.output().matches(prompt).count() <= k {
            assert!(start.elapsed() < wait, "no prompt {k}:\n{}", run.output());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let out = run.output();
        let last = &out[out.rfind("=== Your turn").unwrap()..];
        assert!(last.contains(what), "{last}");
        assert!(
            last.contains("Design a cache typed by a person"),
            "the problem: {last}"
        );
        if *what == "Type your critique" {
            assert!(
                last.contains("Proposal of agent-"),
                "the proposal critiqued: {last}"
            );
        }
        run.type_lines(&[text, "."]).unwrap();
    }
    assert_eq!(
        run.exit_code(wait).await.unwrap(),
        Some(0),
        "{}",
        run.output()
    );
    let state = parley_tests::read_json(dir.path().join("out.json"));
    let mine: Vec<&str> = state["rounds"][0]["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["agentId"] == "agent-human")
        .map(|c| c["content"].as_str().unwrap())
        .collect();
    assert_eq!(mine.len(), 4, "{state}");
    assert!(mine.contains(&"A person's proposal typed on the terminal"));
    assert!(state["human"]["answered"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["by"] == "terminal"));
}
