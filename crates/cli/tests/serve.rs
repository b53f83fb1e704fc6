//! End-to-end tests of `parley serve`'s JSON API: the real binary, the fake LLM, and for
//! the cluster backend real nats-server / redis-server with the coordinator and worker
//! binaries. Build the binaries first: `cargo build --workspace --bins`.
//!
//! What crosses the wire is asserted: the events a stream delivers (every sequence number,
//! in order, resumed after a reconnect), the state and report the API returns, and the
//! LLM requests (no completed call repeated by a retry or a restart).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use parley_testkit::{free_port, ChildProcess, FakeLlm, Fault, Latency, Match};
use parley_tests::{assert_no_completed_call_repeated, Cluster};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// A running `parley serve`.
struct Serve {
    proc: ChildProcess,
    base: String,
    http: reqwest::Client,
}

/// Three agents (architect, security, kiss), 2 fixed rounds, in `dir/debate-config.json`;
/// with `base_url` the agents call it (embedded).
fn write_config(dir: &Path, base_url: Option<&str>) -> PathBuf {
    let path = dir.join("debate-config.json");
    parley_tests::write_json(&path, &parley_tests::spec_config(base_url));
    path
}

fn serve_in(dir: &Path, port: u16, extra: &[&str], env: &[(&str, &str)]) -> ChildProcess {
    let mut cmd = Command::new(PARLEY);
    cmd.current_dir(dir)
        .arg("serve")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .args(extra)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("PARLEY_SERVE_TOKEN")
        .env_remove("PARLEY_NATS_URL")
        .env("PARLEY_MODEL_DIR", dir.join("no-models"))
        .env("PARLEY_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let p = ChildProcess::spawn(cmd, "serve").unwrap();
    assert!(
        p.wait_for_log_line("Parley is serving", Duration::from_secs(30))
            .is_some(),
        "serve did not start:\n{}",
        p.log()
    );
    p
}

/// The token `serve` generated and printed in its start line (`.../#token=<token>`).
fn generated_token(proc: &ChildProcess) -> Option<String> {
    let line = proc.wait_for_log_line("Parley is serving", Duration::from_secs(1))?;
    let rest = line.split_once("#token=")?.1;
    Some(rest.split_whitespace().next()?.to_string())
}

impl Serve {
    fn start(dir: &Path, extra: &[&str]) -> Serve {
        Self::start_on(dir, free_port(), extra)
    }

    /// Started with `extra` arguments; without `--auth-token` or `--no-auth` the server
    /// generates a token, and this client sends it with every request.
    fn start_on(dir: &Path, port: u16, extra: &[&str]) -> Serve {
        let proc = serve_in(dir, port, extra, &[]);
        let mut http = reqwest::Client::builder();
        if let Some(token) = generated_token(&proc) {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {token}").parse().unwrap(),
            );
            http = http.default_headers(headers);
        }
        Serve {
            proc,
            base: format!("http://127.0.0.1:{port}"),
            http: http.build().unwrap(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(self.url(path)).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn submit(&self, body: Value) -> String {
        let (status, v) = self.post("/v1/debates", body).await;
        assert_eq!(status, 201, "{v}");
        v["debateId"].as_str().unwrap().to_string()
    }

    /// Reads the debate's event stream (from `after`) until `stop` holds for an event or
    /// `timeout` passes; returns the events read.
    async fn events_until(
        &self,
        id: &str,
        after: Option<u64>,
        timeout: Duration,
        stop: impl Fn(&Value) -> bool,
    ) -> Vec<(u64, Value)> {
        read_events(
            &self.http,
            &self.url(&format!("/v1/debates/{id}/events")),
            after,
            timeout,
            stop,
        )
        .await
    }

    /// Posts `cancel` or `retry` for debate `id`: (HTTP status, reply).
    async fn command(&self, id: &str, command: &str) -> (u16, Value) {
        self.post(&format!("/v1/debates/{id}/{command}"), json!({}))
            .await
    }

    /// Submits `problem` and waits (20 s at most) for its first dispatched task.
    async fn submit_running(&self, problem: &str) -> String {
        let id = self.submit(json!({ "problem": problem })).await;
        self.events_until(&id, None, Duration::from_secs(20), |e| {
            e["type"] == "taskDispatched"
        })
        .await;
        id
    }

    /// Reads debate `id`'s events until its end, which must be `debateFailed`: its
    /// sequence number.
    async fn wait_failed(&self, id: &str, timeout: Duration) -> u64 {
        let events = self.events_until(id, None, timeout, is_final).await;
        let (failed_seq, failed) = events.last().unwrap().clone();
        assert_eq!(failed["type"], "debateFailed", "{failed}");
        failed_seq
    }

    /// Retries failed debate `id` (accepted: 200) and reads its events after `failed_seq`
    /// until `debateCompleted`, each once and in order: the reply to the retry.
    async fn retry_to_completion(&self, id: &str, failed_seq: u64, timeout: Duration) -> Value {
        let (status, v) = self.command(id, "retry").await;
        assert_eq!(status, 200, "{v}");
        let more = self
            .events_until(id, Some(failed_seq), timeout, |e| {
                e["type"] == "debateCompleted"
            })
            .await;
        assert_contiguous(&more, failed_seq + 1);
        v
    }

    async fn state(&self, id: &str) -> Value {
        let (status, v) = self.get(&format!("/v1/debates/{id}")).await;
        assert_eq!(status, 200, "{v}");
        v
    }
}

/// An SSE client: `id:` and `data:` lines of each event, with `Last-Event-ID: after`.
async fn read_events(
    http: &reqwest::Client,
    url: &str,
    after: Option<u64>,
    timeout: Duration,
    stop: impl Fn(&Value) -> bool,
) -> Vec<(u64, Value)> {
    let mut req = http.get(url).header("Accept", "text/event-stream");
    if let Some(a) = after {
        req = req.header("Last-Event-ID", a.to_string());
    }
    let mut res = req.send().await.unwrap();
    if res.status() != 200 {
        let status = res.status();
        panic!("{url}: {status}: {}", res.text().await.unwrap_or_default());
    }
    assert_eq!(
        res.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let deadline = Instant::now() + timeout;
    let mut buf = String::new();
    let mut out = Vec::new();
    let (mut id, mut data): (Option<u64>, Vec<String>) = (None, Vec::new());
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = match tokio::time::timeout(left, res.chunk()).await {
            Ok(Ok(Some(c))) => c,
            _ => return out,
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(nl) = buf.find('\n') {
            let line = buf[..nl].trim_end_matches('\r').to_string();
            buf.drain(..=nl);
            if line.is_empty() {
                if !data.is_empty() {
                    let v: Value = serde_json::from_str(&data.join("\n")).unwrap();
                    let seq = id.expect("an event without id:");
                    assert_eq!(v["seq"], seq, "id: is the event's sequence number");
                    let done = stop(&v);
                    out.push((seq, v));
                    if done {
                        return out;
                    }
                }
                id = None;
                data.clear();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push(d.trim_start().to_string());
            } else if let Some(i) = line.strip_prefix("id:") {
                id = i.trim().parse().ok();
            }
        }
    }
}

fn is_final(e: &Value) -> bool {
    matches!(
        e["type"].as_str(),
        Some("debateCompleted" | "debateFailed" | "debateCancelled")
    )
}

/// Sequence numbers `from..=to`, each once, in order.
fn assert_contiguous(events: &[(u64, Value)], from: u64) {
    let seqs: Vec<u64> = events.iter().map(|(s, _)| *s).collect();
    let want: Vec<u64> = (from..from + seqs.len() as u64).collect();
    assert_eq!(seqs, want, "events out of order or missing");
}

fn contributions(state: &Value) -> usize {
    parley_tests::contributions(state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_debate_streams_every_event_in_order_and_resumes() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_latency(Latency::Fixed(Duration::from_millis(40)));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), Some(&fake.base_url()));
    let s = Serve::start(dir.path(), &[]);

    let (status, cfg) = s.get("/v1/config").await;
    assert_eq!(status, 200);
    assert_eq!(cfg["backend"], "embedded");
    assert_eq!(cfg["auth"], true, "a generated token");
    assert_eq!(cfg["limits"]["answerChars"], 4000);
    assert_eq!(cfg["defaults"]["rounds"], 2);
    let roles: Vec<&str> = cfg["defaults"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["architect", "security", "kiss"]);
    assert!(
        !cfg.to_string().contains(&fake.base_url()),
        "endpoints never leave the server"
    );

    let id = s
        .submit(json!({"problem": "Design a rate limiter for a public API"}))
        .await;
    let events = s
        .events_until(&id, None, Duration::from_secs(60), is_final)
        .await;
    assert_contiguous(&events, 1);
    let (_, first) = &events[0];
    assert_eq!(first["type"], "debateStarted", "{first}");
    let (last_seq, last) = events.last().unwrap();
    assert_eq!(last["type"], "debateCompleted", "{last}");
    let completed = events
        .iter()
        .filter(|(_, e)| e["type"] == "taskCompleted")
        .count();
    assert_eq!(
        completed,
        fake.request_count(),
        "one taskCompleted per LLM call"
    );
    assert_eq!(fake.request_count(), 22);

    // A reconnect with Last-Event-ID gets exactly the events after it; so does ?after=.
    let mid = last_seq / 2;
    let rest = s
        .events_until(&id, Some(mid), Duration::from_secs(10), |e| {
            e["seq"] == *last_seq
        })
        .await;
    assert_contiguous(&rest, mid + 1);
    assert_eq!(rest.len() as u64, last_seq - mid);
    assert_eq!(rest.last().unwrap().1, *last);
    let tail = read_events(
        &s.http,
        &s.url(&format!("/v1/debates/{id}/events?after={}", last_seq - 2)),
        None,
        Duration::from_secs(10),
        |e| e["seq"] == *last_seq,
    )
    .await;
    assert_contiguous(&tail, last_seq - 1);

    // The state is the checkpoint `parley run` would have written (without the spec).
    let state = s.state(&id).await;
    assert_eq!(state["status"], "completed");
    assert_eq!(contributions(&state), 24);
    assert!(state.get("spec").is_none());
    let file: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join(format!("debates/{id}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(file["finalSolution"], state["finalSolution"]);

    // Report and state downloads.
    let r = s
        .http
        .get(s.url(&format!("/v1/debates/{id}/report")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/markdown"));
    assert_eq!(
        r.headers()["content-disposition"].to_str().unwrap(),
        format!("attachment; filename=\"{id}.md\"")
    );
    let md = r.text().await.unwrap();
    assert!(md.starts_with(&format!("# Debate {id}")), "{md}");
    assert!(md.contains("Fake synthesized solution"), "{md}");
    assert!(
        md.contains("| agent-security | Security | security | model-sec |"),
        "{md}"
    );
    let r = s
        .http
        .get(s.url(&format!("/v1/debates/{id}")))
        .send()
        .await
        .unwrap();
    let downloaded: Value = r.json().await.unwrap();
    assert_eq!(downloaded, state);

    // The list shows it.
    let (_, list) = s.get("/v1/debates").await;
    let item = &list["items"][0];
    assert_eq!(item["id"], id.as_str());
    assert_eq!(item["status"], "completed");
    assert_eq!(item["problem"], "Design a rate limiter for a public API");
    assert_eq!(
        (item["round"].as_u64(), item["rounds"].as_u64()),
        (Some(2), Some(2))
    );

    // Roles and rounds from the form.
    let before = fake.request_count();
    let id2 = s
        .submit(
            json!({"problem": "Design a queue", "roles": ["architect", "testing"], "rounds": 1}),
        )
        .await;
    s.events_until(&id2, None, Duration::from_secs(60), is_final)
        .await;
    let st = s.state(&id2).await;
    assert_eq!(st["status"], "completed");
    let mut agents: Vec<&str> = st["rounds"][0]["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["agentId"].as_str().unwrap())
        .collect();
    agents.dedup();
    agents.sort();
    agents.dedup();
    assert_eq!(agents, ["agent-architect", "agent-testing"]);
    assert_eq!(st["rounds"].as_array().unwrap().len(), 1);
    // On the wire: the configured architect's model and temperature, the built-in testing
    // agent's model, the config's judge; every prompt carries the problem.
    let calls = fake.requests()[before..].to_vec();
    assert_eq!(
        calls.len(),
        2 + 2 + 2 + 1,
        "proposals, critiques, refinements, synthesis"
    );
    let mut models: Vec<(String, Option<f64>)> = calls
        .iter()
        .map(|r| (r.model.clone(), r.temperature))
        .collect();
    models.sort_by(|a, b| a.0.cmp(&b.0));
    models.dedup();
    assert_eq!(
        models,
        [
            ("gpt-4o-mini".to_string(), Some(0.5)),
            ("model-arch".to_string(), Some(0.1)),
            ("model-judge".to_string(), Some(0.4)),
        ]
    );
    assert!(calls
        .iter()
        .all(|r| r.prompt_text().contains("Design a queue")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_cancel_and_retry() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), Some(&fake.base_url()));
    let s = Serve::start(dir.path(), &[]);

    // Cancel: a debate whose calls take long.
    fake.set_latency(Latency::Fixed(Duration::from_secs(3)));
    let id = s.submit_running("Design a slow thing").await;
    let (status, v) = s.command(&id, "cancel").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "cancelled");
    let events = s
        .events_until(&id, None, Duration::from_secs(20), is_final)
        .await;
    assert_contiguous(&events, 1);
    assert_eq!(events.last().unwrap().1["type"], "debateCancelled");
    assert_eq!(s.state(&id).await["status"], "cancelled");
    let (status, v) = s.command(&id, "cancel").await;
    assert_eq!(status, 409, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already cancelled"),
        "{v}"
    );
    let (status, _) = s.command(&id, "retry").await;
    assert_eq!(status, 409);

    // Retry: one agent's provider refuses (401: not retried), then recovers.
    fake.set_latency(Latency::Zero);
    fake.add_fault(Fault::Status {
        status: 401,
        body: r#"{"error":{"message":"bad key for model-sec"}}"#.into(),
        matching: Match::Model("model-sec".into()),
        times: None,
    });
    let before = fake.request_count();
    let id = s.submit(json!({"problem": "Design a retried thing"})).await;
    let failed_seq = s.wait_failed(&id, Duration::from_secs(30)).await;
    let state = s.state(&id).await;
    assert_eq!(state["status"], "failed");
    assert_eq!(state["error"]["agentId"], "agent-security");
    fake.clear_faults();
    let v = s
        .retry_to_completion(&id, failed_seq, Duration::from_secs(30))
        .await;
    assert_eq!(v["accepted"], "retry");
    let state = s.state(&id).await;
    assert_eq!(state["status"], "completed");
    assert_eq!(contributions(&state), 24);
    // No completed call ran again (the failed ones, 401s, were never answered 200).
    let after: Vec<_> = fake.requests()[before..].to_vec();
    let ok: Vec<_> = after.iter().filter(|r| r.status == 200).collect();
    let mut seen = std::collections::BTreeSet::new();
    for r in &ok {
        assert!(
            seen.insert((r.model.clone(), r.prompt_text())),
            "a completed call ran twice"
        );
    }
    assert_eq!(ok.len(), 22);
    let (status, _) = s
        .post(
            &format!("/v1/debates/{id}/answers"),
            json!({"answers": [{"id": "q1", "answer": "yes"}]}),
        )
        .await;
    assert_eq!(status, 409, "no debate waits for answers in this build");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_debate_continues_and_its_stream_resumes_after_a_server_restart() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_latency(Latency::Fixed(Duration::from_millis(400)));
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), Some(&fake.base_url()));
    let port = free_port();
    let mut s = Serve::start_on(dir.path(), port, &[]);
    let id = s
        .submit(json!({"problem": "Design a restartable service"}))
        .await;
    let seen = s
        .events_until(&id, None, Duration::from_secs(30), |e| {
            e["type"] == "taskCompleted" && e["node"] == "critique"
        })
        .await;
    assert_contiguous(&seen, 1);
    let last_seen = seen.last().unwrap().0;

    // Stop (SIGTERM: the calls in flight get their grace, the checkpoint is saved), start.
    s.proc.terminate();
    assert!(
        s.proc.wait_exit(Duration::from_secs(20)).is_some(),
        "serve did not stop"
    );
    let s = Serve::start_on(dir.path(), port, &[]);
    assert!(
        s.proc
            .wait_for_log_line(&format!("Resuming debate {id}"), Duration::from_secs(10))
            .is_some(),
        "{}",
        s.proc.log()
    );
    let rest = s
        .events_until(&id, Some(last_seen), Duration::from_secs(60), |e| {
            e["type"] == "debateCompleted"
        })
        .await;
    assert_contiguous(&rest, last_seen + 1);
    assert!(
        rest.iter().any(|(_, e)| e["type"] == "debateResumed"),
        "{rest:?}"
    );
    let state = s.state(&id).await;
    assert_eq!(state["status"], "completed");
    assert_eq!(contributions(&state), 24);
    assert_no_completed_call_repeated(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_refuses_what_it_must() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), Some(&fake.base_url()));

    // Another address without a token: refused at start, exit 2.
    let out = Command::new(PARLEY)
        .current_dir(dir.path())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env_remove("PARLEY_SERVE_TOKEN")
        .env("PARLEY_MODEL_DIR", dir.path().join("no-models"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--auth-token"), "{err}");

    // Without any token (--no-auth, loopback only): the Host and Origin guards.
    let s = Serve::start(dir.path(), &["--no-auth"]);
    assert!(
        s.proc.log().contains("warning: --no-auth"),
        "{}",
        s.proc.log()
    );
    let http = &s.http;
    // DNS rebinding: a name other than loopback.
    let r = http
        .get(s.url("/v1/debates"))
        .header("Host", "evil.example:80")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Another origin.
    let r = http
        .post(s.url("/v1/debates"))
        .header("Origin", "http://evil.example")
        .json(&json!({"problem": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Not JSON by content type (what a cross-site form could send).
    let r = http
        .post(s.url("/v1/debates"))
        .header("Content-Type", "text/plain")
        .body(r#"{"problem": "x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // Bad fields, each named.
    let (status, v) = s
        .post(
            "/v1/debates",
            json!({"problem": " ", "rounds": 50, "roles": ["astronaut"]}),
        )
        .await;
    assert_eq!(status, 400);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("problem") && msg.contains("rounds"), "{msg}");
    let (status, v) = s
        .post(
            "/v1/debates",
            json!({"problem": "p", "roles": ["astronaut"]}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("astronaut"),
        "{v}"
    );
    let (status, v) = s
        .post("/v1/debates", json!({"problem": "p", "model": "x"}))
        .await;
    assert_eq!(status, 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("model"),
        "{v}"
    );
    let r = http
        .post(s.url("/v1/debates"))
        .header("Content-Type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_json");
    // Too large: refused from its Content-Length (on a connection of its own: the server
    // closes it without reading the body).
    let big = json!({"problem": "x".repeat(2 * 1024 * 1024)});
    let r = reqwest::Client::new()
        .post(s.url("/v1/debates"))
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "payload_too_large", "{v}");
    // Ids.
    let (status, _) = s.get("/v1/debates/..%2F..%2Fetc").await;
    assert_eq!(status, 400);
    let (status, v) = s.get("/v1/debates/deb-20200101-000000-zzzzzz").await;
    assert_eq!(status, 404);
    assert_eq!(v["error"]["code"], "not_found");
    let (status, _) = s.get("/v1/debates/deb-20200101-000000-zzzzzz/events").await;
    assert_eq!(status, 404);
    let (status, _) = s.get("/v1/nope").await;
    assert_eq!(status, 404);
    let r = http
        .get(s.url("/v1/debates/deb-20200101-000000-zzzzzz/events"))
        .header("Last-Event-ID", "abc")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // The page: a strict CSP on every response.
    let r = http.get(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    drop(s);

    // With a token: every API route needs it; the page itself does not.
    let token = "s3cret-token-for-tests-0123456789";
    let s = Serve::start(dir.path(), &["--auth-token", token]);
    let (status, _) = s.get("/v1/debates").await;
    assert_eq!(status, 401);
    let r = s
        .http
        .get(s.url("/v1/debates"))
        .bearer_auth("wrong-token-wrong-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = s
        .http
        .get(s.url("/v1/debates"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A token may serve other names.
    let r = s
        .http
        .get(s.url("/v1/config"))
        .bearer_auth(token)
        .header("Host", "parley.internal:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (status, _) = s.get("/").await;
    assert_eq!(status, 200);
    assert!(!s.proc.log().contains(token), "the token was logged");
}

/// Loopback is not authentication: started without a token, `serve` generates one, prints
/// it once in the page's address, and refuses every API request that does not carry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_serve_makes_one_and_refuses_requests_without_it() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), Some(&fake.base_url()));
    let s = Serve::start(dir.path(), &[]);
    let token = generated_token(&s.proc).expect("a token in the start line");
    assert_eq!(token.len(), 64, "{token}");
    let line = s
        .proc
        .wait_for_log_line("Parley is serving", Duration::from_secs(1))
        .unwrap();
    assert!(
        line.contains(&format!("{}/#token={token}", s.base)),
        "the sign-in address: {line}"
    );
    assert_eq!(
        s.proc.log().matches(&token).count(),
        1,
        "the token is printed once"
    );

    // A local process without the token (another user, a tunnel, a port-forward) is
    // refused: reading, submitting, streaming.
    let anyone = reqwest::Client::new();
    for path in ["/v1/debates", "/v1/config"] {
        let r = anyone.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert_eq!(r.headers()["www-authenticate"], "Bearer realm=\"parley\"");
    }
    let r = anyone
        .post(s.url("/v1/debates"))
        .json(&json!({"problem": "spend the operator's keys"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = anyone
        .post(s.url("/v1/debates"))
        .bearer_auth("0".repeat(64))
        .json(&json!({"problem": "spend the operator's keys"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(fake.requests().is_empty(), "no call was made");
    // The page and the liveness probe need no token (they hold no data).
    assert_eq!(anyone.get(s.url("/")).send().await.unwrap().status(), 200);
    let r = anyone.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // With the token: served.
    let (status, _) = s.get("/v1/debates").await;
    assert_eq!(status, 200);
    drop(s);

    // --no-auth and --auth-token together: a usage error.
    let out = Command::new(PARLEY)
        .current_dir(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0", "--no-auth"])
        .args(["--auth-token", "s3cret-token-for-tests-0123456789"])
        .env_remove("PARLEY_SERVE_TOKEN")
        .env("PARLEY_MODEL_DIR", dir.path().join("no-models"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // --no-auth is for loopback only.
    let out = Command::new(PARLEY)
        .current_dir(dir.path())
        .args(["serve", "--listen", "0.0.0.0:0", "--no-auth"])
        .env_remove("PARLEY_SERVE_TOKEN")
        .env("PARLEY_MODEL_DIR", dir.path().join("no-models"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loopback"), "{err}");
}

/// Slowloris: 300 connections (more than the 256 `serve` keeps) each send half a request
/// head and then nothing. `/healthz` and the API still answer, and the server closes every
/// one of them (at the cap, or when the 10 s header-read timeout passes) instead of holding
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_cannot_hold_serve_and_healthz_answers_meanwhile() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), Some(&fake.base_url()));
    let s = Serve::start(dir.path(), &[]);
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
        c.write_all(b"GET /v1/debates HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        slow.push(c);
    }
    let fresh = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let r = fresh
        .get(s.url("/healthz"))
        .send()
        .await
        .expect("/healthz answers while 300 slow connections are open");
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "ok");
    let (status, _) = s.get("/v1/debates").await;
    assert_eq!(status, 200);
    for (i, c) in slow.iter_mut().enumerate() {
        let mut buf = [0u8; 256];
        let ended = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                match c.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "slow connection {i} was held open");
    }
}

/// A cluster with the shipped NATS roles; `serve` connects as the `serve` user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_debate_over_the_api_submit_events_cancel_retry_report() {
    let c = Cluster::start_with_roles(json!({})).await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), None);
    let url = c.nats_url_for("serve");
    let s = Serve::start(dir.path(), &["--nats-url", &url]);
    assert!(
        !s.proc.log().contains(&c.roles.as_ref().unwrap().serve),
        "the password was logged"
    );
    let (_, cfg) = s.get("/v1/config").await;
    assert_eq!(cfg["backend"], "cluster");

    let id = s
        .submit(json!({"problem": "Design a rate limiter for a public API"}))
        .await;
    let events = s
        .events_until(&id, None, Duration::from_secs(60), is_final)
        .await;
    assert_contiguous(&events, 1);
    let (last_seq, last) = events.last().unwrap().clone();
    assert_eq!(last["type"], "debateCompleted", "{last}");
    let rest = s
        .events_until(&id, Some(3), Duration::from_secs(10), |e| {
            e["seq"] == last_seq
        })
        .await;
    assert_contiguous(&rest, 4);
    let state = s.state(&id).await;
    parley_tests::assert_complete(&state);
    let r = s
        .http
        .get(s.url(&format!("/v1/debates/{id}/report")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let md = r.text().await.unwrap();
    assert!(
        md.contains("Fake synthesized solution") && md.contains("## Round 2"),
        "{md}"
    );
    let (status, list) = s.get("/v1/debates").await;
    assert_eq!(status, 200, "{list}");
    let item = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not listed: {list}"));
    assert_eq!(item["status"], "completed");
    assert_eq!(item["problem"], "Design a rate limiter for a public API");

    // Cancel a slow one.
    c.fake.set_latency(Latency::Fixed(Duration::from_secs(2)));
    let slow = s.submit_running("Design a slow cluster thing").await;
    let (status, v) = s.command(&slow, "cancel").await;
    assert_eq!(status, 200, "{v}");
    let events = s
        .events_until(&slow, None, Duration::from_secs(30), |e| {
            e["type"] == "debateCancelled"
        })
        .await;
    assert_contiguous(&events, 1);
    assert_eq!(events.last().unwrap().1["type"], "debateCancelled");

    // Retry a failed one.
    c.fake.set_latency(Latency::Zero);
    c.fake.add_fault(Fault::Status {
        status: 401,
        body: r#"{"error":{"message":"bad key"}}"#.into(),
        matching: Match::Model("model-judge".into()),
        times: None,
    });
    let failing = s
        .submit(json!({"problem": "Design a retried cluster thing"}))
        .await;
    let failed_seq = s.wait_failed(&failing, Duration::from_secs(60)).await;
    // A failed debate's state has an `error` field: it is the state, not an error reply.
    let state = s.state(&failing).await;
    assert_eq!(state["status"], "failed", "{state}");
    assert_eq!(state["error"]["node"], "synthesis", "{state}");
    c.fake.clear_faults();
    s.retry_to_completion(&failing, failed_seq, Duration::from_secs(60))
        .await;
    assert_eq!(s.state(&failing).await["status"], "completed");
    assert_no_completed_call_repeated(&c.fake);

    let (status, _) = s.get("/v1/debates/deb-20200101-000000-zzzzzz").await;
    assert_eq!(status, 404);
}

/// Answers to clarification questions go to `parley.debates.answer` as
/// `{debateId, answers}`; the coordinator's reply (or error) comes back as is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_answers_are_forwarded_to_the_answer_subject() {
    use futures::StreamExt as _;
    let nats = parley_testkit::NatsServer::start().unwrap();
    let client = parley_tests::connect_as(&nats.url()).await;
    let mut sub = client.subscribe("parley.debates.answer").await.unwrap();
    let responder = client.clone();
    let seen = tokio::spawn(async move {
        let mut bodies = Vec::new();
        while let Some(msg) = sub.next().await {
            let body: Value = serde_json::from_slice(&msg.payload).unwrap();
            let reply = if bodies.is_empty() {
                json!({"debateId": body["debateId"], "accepted": "answer"})
            } else {
                json!({"error": {"code": "conflict", "message": "this debate is not waiting for answers"}})
            };
            bodies.push(body);
            if let Some(to) = msg.reply {
                responder
                    .publish(to, reply.to_string().into())
                    .await
                    .unwrap();
            }
            if bodies.len() == 2 {
                return bodies;
            }
        }
        bodies
    });
    client.flush().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), None);
    let s = Serve::start(dir.path(), &["--nats-url", &nats.url()]);
    let id = "deb-20260101-000000-abc123";
    let answers =
        json!({"answers": [{"id": "q1", "answer": "EU only"}, {"id": "q2", "answer": "NA"}]});
    let (status, v) = s
        .post(&format!("/v1/debates/{id}/answers"), answers.clone())
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["accepted"], "answer");
    let (status, v) = s
        .post(&format!("/v1/debates/{id}/answers"), answers.clone())
        .await;
    assert_eq!(status, 409, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not waiting"));
    let bodies = tokio::time::timeout(Duration::from_secs(10), seen)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        bodies[0],
        json!({"debateId": id, "answers": answers["answers"]})
    );
    // Bad answers never reach NATS.
    let (status, v) = s
        .post(
            &format!("/v1/debates/{id}/answers"),
            json!({"answers": [{"id": "bad id", "answer": "x"}]}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("answers[0].id"));
}

/// Clarifications through the page's API, embedded: a debate submitted with `clarify`
/// waits in `awaiting_clarifications` with its questions; a wrong id is refused with its
/// name and changes nothing; a partial answer keeps it waiting; the last answer drives it
/// to the end, and every later prompt carries the answers (NA for an empty one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_clarifications_are_answered_over_the_api() {
    const CLARIFY: &str = "{\"questions\": [{\"text\": \"your question\"}]}";
    let fake = FakeLlm::start().await.unwrap();
    fake.set_responder(|r| {
        let prompt = r.prompt_text();
        if prompt.contains(CLARIFY) {
            // One question from the architect, once; nobody asks follow-ups.
            return if r.model == "model-arch" && !prompt.contains("already asked") {
                json!({"questions": [{"text": "How many tenants?"}, {"text": "Which region?"}]})
                    .to_string()
            } else {
                json!({"questions": []}).to_string()
            };
        }
        format!("{} says: shard by tenant.", r.model)
    });
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), Some(&fake.base_url()));
    let s = Serve::start(dir.path(), &[]);
    let id = s
        .submit(json!({"problem": "Design a billing ledger", "rounds": 1, "clarify": true}))
        .await;
    s.events_until(&id, None, Duration::from_secs(30), |e| {
        e["type"] == "clarificationsRequested"
    })
    .await;
    let state = s.state(&id).await;
    assert_eq!(state["status"], "awaiting_clarifications", "{state}");
    let items = state["clarifications"][0]["items"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(items.len(), 2, "{state}");
    let q1 = items[0]["id"].as_str().unwrap().to_string();
    let q2 = items[1]["id"].as_str().unwrap().to_string();

    let answers = format!("/v1/debates/{id}/answers");
    let (status, v) = s
        .post(
            &answers,
            json!({"answers": [{"id": "no-such-q", "answer": "x"}]}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no-such-q"),
        "{v}"
    );
    // An answer over the one limit (4,000 characters, as in the terminal and over NATS)
    // is refused naming it, not cut.
    let (status, v) = s
        .post(
            &answers,
            json!({"answers": [{"id": q1, "answer": "y".repeat(4001)}]}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("answers[0].answer") && msg.contains("4000"),
        "{msg}"
    );
    let (status, v) = s
        .post(
            &answers,
            json!({"answers": [{"id": q1, "answer": "About 40,000 tenants"}]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["remaining"], 1, "{v}");
    assert_eq!(s.state(&id).await["status"], "awaiting_clarifications");
    let (status, v) = s
        .post(
            &answers,
            json!({"answers": [{"id": q1, "answer": "again"}]}),
        )
        .await;
    assert_eq!(status, 409, "{v}");
    let (status, v) = s
        .post(&answers, json!({"answers": [{"id": q2, "answer": ""}]}))
        .await;
    assert_eq!(status, 200, "{v}");
    let events = s
        .events_until(&id, None, Duration::from_secs(60), is_final)
        .await;
    assert_contiguous(&events, 1);
    assert_eq!(
        events.last().unwrap().1["type"],
        "debateCompleted",
        "{:?}",
        events.last()
    );
    let state = s.state(&id).await;
    assert_eq!(state["clarifications"][0]["items"][1]["answer"], "NA");
    // Every call after the questions states both answers.
    let later: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| !r.prompt_text().contains(CLARIFY))
        .collect();
    assert!(!later.is_empty());
    assert!(later.iter().all(|r| {
        let p = r.prompt_text();
        p.contains("About 40,000 tenants") && p.contains("NA")
    }));
    let (status, _) = s
        .post(&answers, json!({"answers": [{"id": q2, "answer": "late"}]}))
        .await;
    assert_eq!(status, 409);
}

/// The form's agent editor over the API: `/v1/config` offers the roles, the providers with
/// their allowed models, the models and the agent limit (`--max-agents`); a submission's
/// agents are checked as any submission is (every problem at once, each naming its
/// field), and two agents may share a role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_agents_are_validated_like_a_submission_and_may_share_a_role() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = parley_tests::spec_config(Some(&fake.base_url()));
    cfg["providers"] = json!({"openai-compatible": {"allowedModels":
        ["model-arch", "model-sec", "model-kiss", "model-judge"]}});
    parley_tests::write_json(dir.path().join("debate-config.json"), &cfg);
    let s = Serve::start(dir.path(), &["--max-agents", "3"]);

    let (status, cfg) = s.get("/v1/config").await;
    assert_eq!(status, 200, "{cfg}");
    let d = &cfg["defaults"];
    assert_eq!(d["maxAgents"], 3, "{d}");
    assert_eq!(
        d["providers"],
        json!([{"name": "openai-compatible", "allowedModels": ["model-arch", "model-sec", "model-kiss", "model-judge"]}])
    );
    assert!(d["roles"].as_array().unwrap().contains(&json!("security")));
    assert_eq!(d["agents"][0]["temperature"], 0.1, "{d}");

    let agent = |name: &str, role: &str, model: &str| json!({"name": name, "role": role, "model": model, "provider": "openai-compatible", "temperature": 0.3});
    // Every problem at once, each with its field.
    let bad = json!({"problem": "P", "agents": [
        agent("A", "architect", "model-arch"),
        {"name": "B", "role": "security", "model": "gpt-forbidden", "temperature": 2.5},
        agent("C", "astronaut", "model-kiss"),
    ]});
    let (status, v) = s.post("/v1/debates", bad).await;
    assert_eq!(status, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("agents[2].role") && msg.contains("astronaut"),
        "{msg}"
    );
    let bad = json!({"problem": "P", "agents": [
        agent("A", "architect", "model-arch"),
        {"name": "B", "role": "security", "model": "gpt-forbidden", "temperature": 2.5},
    ]});
    let (status, v) = s.post("/v1/debates", bad).await;
    assert_eq!(status, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("agents[1].model")
            && msg.contains("gpt-forbidden")
            && msg.contains("agents[1].temperature"),
        "{msg}"
    );
    let (status, v) = s
        .post(
            "/v1/debates",
            json!({"problem": "P", "agents": [
            {"name": "A", "role": "architect", "model": "model-arch", "provider": "openrouter"}]}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("agents[0].provider"),
        "{v}"
    );
    let four: Vec<Value> = (0..4)
        .map(|i| agent(&format!("A{i}"), "architect", "model-arch"))
        .collect();
    let (status, v) = s
        .post("/v1/debates", json!({"problem": "P", "agents": four}))
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 3"),
        "{v}"
    );
    let (status, v) = s
        .post("/v1/debates", json!({"problem": "P", "agents": []}))
        .await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = s
        .post("/v1/debates", json!({"problem": "P", "roles": ["kiss"], "agents": [agent("A", "kiss", "model-kiss")]}))
        .await;
    assert_eq!(status, 400, "{v}");

    // Two security engineers and a simplicity advocate, with the names chosen.
    let id = s
        .submit(json!({"problem": "Design a login service", "agents": [
            agent("Sec One", "security", "model-sec"),
            agent("Sec Two", "security", "model-kiss"),
            agent("Simple", "kiss", "model-kiss"),
        ]}))
        .await;
    let events = s
        .events_until(&id, None, Duration::from_secs(60), is_final)
        .await;
    assert_eq!(events.last().unwrap().1["type"], "debateCompleted");
    let file: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("debates").join(format!("{id}.json"))).unwrap(),
    )
    .unwrap();
    let agents = file["spec"]["agents"].as_array().unwrap();
    let ids: Vec<&str> = agents.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["agent-security", "agent-security-2", "agent-kiss"]);
    let names: Vec<&str> = agents.iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Sec One", "Sec Two", "Simple"]);
    assert_eq!(agents[1]["model"], "model-kiss");
    assert_eq!(agents[1]["temperature"], 0.3);
    let state = s.state(&id).await;
    let proposers: Vec<&str> = state["rounds"][0]["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "proposal")
        .map(|c| c["agentId"].as_str().unwrap())
        .collect();
    assert_eq!(proposers.len(), 3, "{state}");
    assert!(proposers.contains(&"agent-security-2"), "{proposers:?}");
}

/// Thumbs up/down on a completed debate is its state's `userFeedback`, in the state file
/// (embedded); a debate that is not completed, or a verdict that is not 1 or -1, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_feedback_is_stored_in_the_state_file() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), Some(&fake.base_url()));
    let s = Serve::start(dir.path(), &[]);
    fake.set_latency(Latency::Fixed(Duration::from_secs(3)));
    let running = s.submit_running("Design a slow thing").await;
    let (status, v) = s
        .post(
            &format!("/v1/debates/{running}/feedback"),
            json!({"feedback": 1}),
        )
        .await;
    assert_eq!(status, 409, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("completed"),
        "{v}"
    );
    s.command(&running, "cancel").await;
    fake.set_latency(Latency::Zero);

    let id = s.submit(json!({"problem": "Design a cache"})).await;
    s.events_until(&id, None, Duration::from_secs(60), is_final)
        .await;
    for bad in [
        json!({"feedback": 2}),
        json!({"feedback": 0}),
        json!({"verdict": 1}),
    ] {
        let (status, v) = s.post(&format!("/v1/debates/{id}/feedback"), bad).await;
        assert_eq!(status, 400, "{v}");
    }
    let (status, v) = s
        .post(
            &format!("/v1/debates/{id}/feedback"),
            json!({"feedback": -1}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(s.state(&id).await["userFeedback"], -1);
    let (status, _) = s
        .post(
            &format!("/v1/debates/{id}/feedback"),
            json!({"feedback": 1}),
        )
        .await;
    assert_eq!(status, 200);
    let path = dir.path().join("debates").join(format!("{id}.json"));
    let file: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(file["userFeedback"], 1);
    assert_eq!(file["status"], "completed");
    assert!(file["spec"].is_object(), "the spec stays in the checkpoint");
    let (status, _) = s
        .post(
            "/v1/debates/deb-20200101-000000-zzzzzz/feedback",
            json!({"feedback": 1}),
        )
        .await;
    assert_eq!(status, 404);
}

/// In front of a cluster, feedback goes to `parley.debates.feedback`; the coordinator
/// checks it and writes it into the checkpoint in Redis, where the state shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_feedback_is_stored_in_the_checkpoint() {
    let c = Cluster::start_with_roles(json!({})).await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), None);
    let url = c.nats_url_for("serve");
    let s = Serve::start(dir.path(), &["--nats-url", &url]);
    let id = s.submit(json!({"problem": "Design a queue"})).await;
    let events = s
        .events_until(&id, None, Duration::from_secs(60), is_final)
        .await;
    assert_eq!(events.last().unwrap().1["type"], "debateCompleted");
    let (status, v) = s
        .post(
            &format!("/v1/debates/{id}/feedback"),
            json!({"feedback": 1}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["userFeedback"], 1);
    assert_eq!(s.state(&id).await["userFeedback"], 1);
    let (status, _) = s
        .post(
            &format!("/v1/debates/{id}/feedback"),
            json!({"feedback": -1}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(s.state(&id).await["userFeedback"], -1);
    let (status, v) = s
        .post(
            "/v1/debates/deb-20200101-000000-zzzzzz/feedback",
            json!({"feedback": 1}),
        )
        .await;
    assert_eq!(status, 404, "{v}");
}

/// Feedback on a state file dialectic wrote (no spec): stored as its `userFeedback`, the
/// file still lists, shows and reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_on_a_dialectic_state_file_is_kept() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), Some(&fake.base_url()));
    let id = "deb-20261124-150638-6oja";
    let debates = dir.path().join("debates");
    std::fs::create_dir_all(&debates).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/dialectic/debates")
        .join(format!("{id}.json"));
    std::fs::copy(&fixture, debates.join(format!("{id}.json"))).unwrap();
    let s = Serve::start(dir.path(), &[]);
    let problem = s.state(id).await["problem"].clone();
    let (status, v) = s
        .post(
            &format!("/v1/debates/{id}/feedback"),
            json!({"feedback": -1}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let state = s.state(id).await;
    assert_eq!(state["userFeedback"], -1);
    assert_eq!(state["problem"], problem, "the debate is unchanged");
    let file: Value =
        serde_json::from_slice(&std::fs::read(debates.join(format!("{id}.json"))).unwrap())
            .unwrap();
    assert_eq!(file["userFeedback"], -1);
    let (status, list) = s.get("/v1/debates").await;
    assert_eq!(status, 200);
    assert!(list.to_string().contains(id), "{list}");
    let r = s
        .http
        .get(s.url(&format!("/v1/debates/{id}/report")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A running one (dialectic's interrupted debate) takes none.
    let running = "deb-20261124-150649-88u1";
    std::fs::copy(
        fixture.with_file_name(format!("{running}.json")),
        debates.join(format!("{running}.json")),
    )
    .unwrap();
    let (status, v) = s
        .post(
            &format!("/v1/debates/{running}/feedback"),
            json!({"feedback": 1}),
        )
        .await;
    assert_eq!(status, 409, "{v}");
}
