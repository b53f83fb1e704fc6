//! End-to-end tests of steering an embedded debate over the HTTP API v1 (`parley serve`):
//! pause / resume (no call lost or repeated), a guide note in the prompts the fake LLM
//! receives, extend (exactly one more round), stop (a synthesized solution from what
//! exists), and hostile commands (10 MB note, control characters, another user's debate)
//! refused with a clear error and no change. Build the binaries first: `cargo build
//! --workspace --bins`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use parley_testkit::{free_port, ChildProcess, FakeLlm, Latency};
use parley_tests::{assert_no_completed_call_repeated, contributions, count};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

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

    async fn steer(&self, key: &str, id: &str, body: Value) -> (u16, Value) {
        self.call(key, "POST", &format!("/v1/debates/{id}/steer"), Some(body))
            .await
    }

    async fn state(&self, key: &str, id: &str) -> Value {
        let (s, v) = self
            .call(key, "GET", &format!("/v1/debates/{id}"), None)
            .await;
        assert_eq!(s, 200, "{v}");
        v
    }

    async fn submit(&self, key: &str, body: Value) -> String {
        let (s, v) = self.call(key, "POST", "/v1/debates", Some(body)).await;
        assert_eq!(s, 201, "{v}");
        v["debateId"].as_str().unwrap().to_string()
    }

    async fn wait_state(
        &self,
        key: &str,
        id: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.state(key, id).await;
            if pred(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out; last state: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The debate's events as the server logged them (`debates/<id>.events.jsonl`).
fn logged_events(dir: &Path, id: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("debates").join(format!("{id}.events.jsonl")))
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits until the fake LLM has had no new request for `quiet` (the calls in flight
/// are back): the number of requests.
async fn settled_requests(fake: &FakeLlm, quiet: Duration) -> usize {
    let mut n = fake.request_count();
    let mut since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    while since.elapsed() < quiet {
        assert!(Instant::now() < deadline, "the fake LLM kept being called");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = fake.request_count();
        if now != n {
            n = now;
            since = Instant::now();
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_debate_is_paused_guided_extended_resumed_and_stopped_over_the_api() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(Some(&fake.base_url())),
    );
    let (alice, a) = new_key("alice");
    let (bob, b) = new_key("bob");
    let keys = dir.path().join("keys.toml");
    std::fs::write(&keys, format!("{a}\n{b}")).unwrap();
    let api = Api::start(dir.path(), &keys);
    fake.set_latency(Latency::Fixed(Duration::from_millis(400)));

    // Pause while round 1's proposals are out.
    let id = api
        .submit(&alice, json!({"problem": "Design a steered cache"}))
        .await;
    api.wait_state(&alice, &id, Duration::from_secs(20), |_| {
        fake.request_count() >= 1
    })
    .await;
    let (s, v) = api.steer(&alice, &id, json!({"command": "pause"})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["command"], "pause");
    let paused_at = settled_requests(&fake, Duration::from_millis(1500)).await;
    let state = api.state(&alice, &id).await;
    assert_eq!(state["status"], "running");
    assert_eq!(state["steering"]["paused"], true);
    // No task was dispatched after the pause was applied (within one transition).
    let events = logged_events(dir.path(), &id);
    let at = events
        .iter()
        .position(|e| e["type"] == "steered" && e["command"] == "pause")
        .expect("a steered event");
    assert_eq!(events[at]["by"], "alice");
    assert!(
        events[at..].iter().all(|e| e["type"] != "taskDispatched"),
        "dispatched while paused: {:?}",
        &events[at..]
    );
    // Every call that was out came back and was kept.
    assert_eq!(contributions(&state), paused_at, "{state}");

    // Hostile commands change nothing.
    // 10 MB: a 413, or (when the server answers before the body is sent) the connection
    // closed under the client's write; either way nothing is applied.
    let huge = "x".repeat(10 * 1024 * 1024);
    let sent = api
        .http
        .post(format!("{}/v1/debates/{id}/steer", api.base))
        .bearer_auth(&alice)
        .json(&json!({"command": "guide", "note": huge}))
        .send()
        .await;
    match sent {
        Ok(r) => assert_eq!(r.status().as_u16(), 413),
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }
    let (s, v) = api
        .steer(
            &alice,
            &id,
            json!({"command": "guide", "note": "a\u{1b}[2Jb"}),
        )
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
        .steer(
            &alice,
            &id,
            json!({"command": "guide", "note": "x".repeat(4001)}),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("4000"),
        "{v}"
    );
    let (s, v) = api.steer(&alice, &id, json!({"command": "explode"})).await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = api.steer(&bob, &id, json!({"command": "resume"})).await;
    assert_eq!(s, 404, "another user's debate: {v}");
    assert_eq!(v["error"]["code"], "not_found");
    let (s, v) = api.steer(&alice, &id, json!({"command": "pause"})).await;
    assert_eq!(s, 409, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("already paused"));
    let log = api.state(&alice, &id).await["steering"]["log"].clone();
    assert_eq!(log.as_array().unwrap().len(), 1, "{log}");

    // Guide and extend while paused, then resume.
    let note = "Mind the GDPR retention constraint";
    let (s, v) = api
        .steer(&alice, &id, json!({"command": "guide", "note": note}))
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = api.steer(&alice, &id, json!({"command": "extend"})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(fake.request_count(), paused_at, "nothing ran while paused");
    let (s, v) = api.steer(&alice, &id, json!({"command": "resume"})).await;
    assert_eq!(s, 200, "{v}");
    let state = api
        .wait_state(&alice, &id, Duration::from_secs(60), |s| {
            s["status"] == "completed" || s["status"] == "failed"
        })
        .await;
    assert_eq!(state["status"], "completed", "{state}");
    // Exactly one more round: 3 rounds of 3 agents; 22 calls + 6 critiques + 3 refinements.
    let rounds = state["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 3);
    for r in rounds {
        assert_eq!(
            (count(r, "critique"), count(r, "refinement")),
            (6, 3),
            "{r}"
        );
    }
    assert_eq!(fake.request_count(), 31, "no call lost or repeated");
    assert_no_completed_call_repeated(&fake);
    // The note is in every prompt sent after the resume, and in none before it.
    let requests = fake.requests();
    assert!(requests[..paused_at]
        .iter()
        .all(|r| !r.prompt_text().contains(note)));
    assert!(requests[paused_at..]
        .iter()
        .all(|r| r.prompt_text().contains(note)));
    let steering = &state["steering"];
    assert_eq!(steering["extraRounds"], 1);
    assert_eq!(steering["notes"][0]["note"], note);
    let commands: Vec<&str> = steering["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["command"].as_str().unwrap())
        .collect();
    assert_eq!(commands, ["pause", "guide", "extend", "resume"]);
    assert!(steering["log"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["by"] == "alice" && e["at"].is_string()));
    let (s, v) = api.steer(&alice, &id, json!({"command": "stop"})).await;
    assert_eq!(s, 409, "a completed debate is not steered: {v}");

    // Stop: a 3-round debate stopped in round 1 ends with a synthesized solution.
    let before = fake.request_count();
    let id = api
        .submit(
            &alice,
            json!({"problem": "Design a stopped queue", "rounds": 3}),
        )
        .await;
    api.wait_state(&alice, &id, Duration::from_secs(20), |s| {
        contributions(s) >= 3
    })
    .await;
    let (s, v) = api.steer(&alice, &id, json!({"command": "stop"})).await;
    assert_eq!(s, 200, "{v}");
    let state = api
        .wait_state(&alice, &id, Duration::from_secs(60), |s| {
            s["status"] == "completed" || s["status"] == "failed"
        })
        .await;
    assert_eq!(state["status"], "completed", "{state}");
    assert!(state["finalSolution"]["description"]
        .as_str()
        .unwrap()
        .contains("Fake synthesized solution"));
    assert_eq!(state["steering"]["stopped"], true);
    assert_eq!(state["rounds"].as_array().unwrap().len(), 1);
    let made = fake.request_count() - before;
    assert!(made < 40, "a stopped debate made {made} calls");
    let synth = fake.requests()[before..]
        .iter()
        .filter(|r| r.model == "model-judge")
        .count();
    assert_eq!(synth, 1, "one synthesis");
}
