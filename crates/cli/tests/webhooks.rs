//! End-to-end tests of webhooks (`parley serve --webhooks`): a real receiver that fails
//! the first deliveries, a kill -9 of the delivering server, and the refusals (a URL off
//! the allow-list, a loopback address not listed as private, a redirect). Embedded, and a
//! cluster with real nats-server / redis-server and the service binaries under the shipped
//! NATS roles. Build the binaries first: `cargo build --workspace --bins`.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use parley_testkit::{free_port, ChildProcess, FakeLlm};
use parley_tests::Cluster;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");
const TOKEN: &str = "webhook-test-token-0123456789";
const CLARIFY: &str = "{\"questions\": [{\"text\": \"your question\"}]}";

/// One request the receiver got, and the status it answered.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    id: String,
    timestamp: String,
    signature: String,
    body: Vec<u8>,
    answered: u16,
}

/// A webhook receiver on a loopback port: records every request and answers the status
/// set with [`Receiver::answer`] (a 3xx carries `Location: redirect_to`).
#[derive(Clone)]
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Received>>>,
    status: Arc<AtomicU16>,
    redirect_to: Arc<Mutex<String>>,
}

impl Receiver {
    async fn start(status: u16) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let r = Receiver {
            port: listener.local_addr().unwrap().port(),
            got: Arc::default(),
            status: Arc::new(AtomicU16::new(status)),
            redirect_to: Arc::default(),
        };
        let me = r.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let me = me.clone();
                tokio::spawn(async move { me.handle(sock).await });
            }
        });
        r
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    async fn handle(&self, mut sock: tokio::net::TcpStream) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            let Ok(n) = sock.read(&mut chunk).await else {
                return;
            };
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let header = |name: &str| {
            head.lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case(name)
                        .then(|| v.trim().to_string())
                })
                .unwrap_or_default()
        };
        let len: usize = header("content-length").parse().unwrap_or(0);
        while buf.len() < head_end + len {
            let Ok(n) = sock.read(&mut chunk).await else {
                return;
            };
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let status = self.status.load(Ordering::SeqCst);
        let path = head
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        self.got.lock().unwrap().push(Received {
            path,
            id: header("webhook-id"),
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
            body: buf[head_end..].to_vec(),
            answered: status,
        });
        let location = self.redirect_to.lock().unwrap().clone();
        let reply = format!(
            "HTTP/1.1 {status} X\r\ncontent-length: 2\r\nlocation: {location}\r\nconnection: close\r\n\r\nok"
        );
        let _ = sock.write_all(reply.as_bytes()).await;
        let _ = sock.shutdown().await;
    }
}

fn new_secret() -> String {
    let out = Command::new(PARLEY)
        .args(["serve", "--new-webhook-secret"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn serve(dir: &Path, extra: &[&str]) -> (ChildProcess, String) {
    let port = free_port();
    let mut cmd = Command::new(PARLEY);
    cmd.current_dir(dir)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--auth-token", TOKEN])
        .args(extra)
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
    (p, format!("http://127.0.0.1:{port}"))
}

async fn call(base: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method.parse().unwrap(), format!("{base}{path}"))
        .bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn eventually<F: FnMut() -> bool>(timeout: Duration, what: &str, mut f: F) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Answers every question of debate `id` (waiting until it asks them).
async fn answer_all(base: &str, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, state) = call(base, "GET", &format!("/v1/debates/{id}"), None).await;
        if s == 200 && state["status"] == "awaiting_clarifications" {
            let answers: Vec<Value> = state["clarifications"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|c| c["items"].as_array().unwrap().clone())
                .filter(|i| i["answer"].is_null())
                .map(|i| json!({"id": i["id"], "answer": "about ten"}))
                .collect();
            let (s, v) = call(
                base,
                "POST",
                &format!("/v1/debates/{id}/answers"),
                Some(json!({ "answers": answers })),
            )
            .await;
            assert_eq!(s, 200, "{v}");
            return;
        }
        assert!(Instant::now() < deadline, "{id} never asked: {state}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The architect asks one question once; every other call answers plainly.
fn ask_once(fake: &FakeLlm) {
    fake.set_responder(|r| {
        let prompt = r.prompt_text();
        if prompt.contains(CLARIFY) {
            return if r.model == "model-arch" && !prompt.contains("already asked") {
                json!({"questions": [{"text": "How many tenants?"}]}).to_string()
            } else {
                json!({"questions": []}).to_string()
            };
        }
        format!("{} says: shard by tenant.", r.model)
    });
}

/// Every request carries a valid signature of its id, timestamp and body; the distinct
/// messages taken (2xx) are `want` (payload types), in this order, for debate `id`, and no
/// message was attempted before the previous one was taken.
fn assert_delivered_in_order(got: &[Received], secret: &str, id: &str, want: &[&str]) {
    let secret = parley_webhooks::Secret::parse(secret).unwrap();
    for r in got {
        let ts: i64 = r.timestamp.parse().unwrap();
        assert!(
            secret.verify(&r.id, ts, &r.body, &r.signature),
            "bad signature on {r:?}"
        );
        assert!(!secret.verify(&r.id, ts + 1, &r.body, &r.signature));
    }
    let mut taken: Vec<(String, Value)> = Vec::new();
    for r in got {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["data"]["debateId"], id, "{body}");
        let seq = body["data"]["seq"].as_u64().unwrap();
        assert_eq!(r.id, format!("msg_{id}_{seq}"));
        assert_eq!(body["data"]["event"]["seq"], seq);
        let done: Vec<&String> = taken.iter().map(|(i, _)| i).collect();
        if !done.contains(&&r.id) {
            // Not yet taken: it must be the next one (nothing overtakes it).
            assert_eq!(
                taken.len(),
                want.iter()
                    .position(|t| *t == body["type"])
                    .unwrap_or_else(|| panic!("unexpected {body}")),
                "out of order: {body}"
            );
            if (200..300).contains(&r.answered) {
                taken.push((r.id.clone(), body));
            }
        }
    }
    let types: Vec<&str> = taken
        .iter()
        .map(|(_, b)| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, want);
}

fn endpoint_file(dir: &Path, entries: &[(String, String, bool)], retry_for: u64) -> String {
    let mut text = format!("retry_for_secs = {retry_for}\n");
    for (url, secret, private) in entries {
        text.push_str(&format!(
            "[[endpoint]]\nurl = \"{url}\"\nsecret = \"{secret}\"\nprivate_network = {private}\n"
        ));
    }
    let path = dir.join("webhooks.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// Embedded: the receiver refuses the first deliveries (503), the server is killed with
/// SIGKILL while it retries and started again; every message arrives, signed, in order
/// (waiting for answers, then completed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_webhooks_arrive_in_order_signed_across_failures_and_a_kill_9() {
    let fake = FakeLlm::start().await.unwrap();
    ask_once(&fake);
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(Some(&fake.base_url())),
    );
    let rx = Receiver::start(503).await;
    let secret = new_secret();
    let file = endpoint_file(dir.path(), &[(rx.url("/hook"), secret.clone(), true)], 600);
    let (mut first, base) = serve(dir.path(), &["--webhooks", &file]);

    let (s, v) = call(
        &base,
        "POST",
        "/v1/debates",
        Some(json!({
            "problem": "Design a billing ledger", "rounds": 1, "clarify": true,
            "webhooks": [{"url": rx.url("/hook"), "events": ["awaitingAnswers", "completed"]}]
        })),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let id = v["debateId"].as_str().unwrap().to_string();
    // The secret is nowhere in the debate.
    let (_, state) = call(&base, "GET", &format!("/v1/debates/{id}"), None).await;
    assert_eq!(state["webhooks"][0]["url"], rx.url("/hook"), "{state}");
    let b64 = secret.trim_start_matches("whsec_");
    for entry in std::fs::read_dir(dir.path().join("debates")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        assert!(!text.contains(b64), "the secret leaked into a debate file");
    }

    eventually(Duration::from_secs(60), "two failed attempts", || {
        rx.got().len() >= 2
    })
    .await;
    first.kill9();
    rx.answer(204);
    let (_second, base) = serve(dir.path(), &["--webhooks", &file]);
    eventually(Duration::from_secs(60), "the question's message", || {
        rx.got().iter().any(|r| r.answered == 204)
    })
    .await;
    answer_all(&base, &id).await;
    eventually(Duration::from_secs(90), "the completion's message", || {
        rx.got()
            .iter()
            .filter(|r| r.answered == 204)
            .any(|r| String::from_utf8_lossy(&r.body).contains("debate.completed"))
    })
    .await;
    let got = rx.got();
    assert!(got.iter().all(|r| r.path == "/hook"));
    assert!(got.iter().filter(|r| r.answered == 503).count() >= 2);
    assert_delivered_in_order(
        &got,
        &secret,
        &id,
        &["debate.awaiting_answers", "debate.completed"],
    );
    // Delivered once taken: nothing more arrives for them.
    let (_, state) = call(&base, "GET", &format!("/v1/debates/{id}"), None).await;
    assert_eq!(state["status"], "completed", "{state}");
}

/// Refusals: a URL off the allow-list is a 400 at submission; a listed loopback endpoint
/// not marked private (by address or by a name that resolves to loopback) is never
/// called; a redirect is not followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_list_private_and_redirecting_targets_are_refused_or_not_called() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(Some(&fake.base_url())),
    );
    let private = Receiver::start(200).await;
    let landing = Receiver::start(200).await;
    let redirecting = Receiver::start(307).await;
    *redirecting.redirect_to.lock().unwrap() = landing.url("/landed");
    let secret = new_secret();
    let by_name = format!("http://localhost:{}/named", private.port);
    let file = endpoint_file(
        dir.path(),
        &[
            (private.url("/literal"), secret.clone(), false),
            (by_name.clone(), secret.clone(), false),
            (redirecting.url("/moved"), secret.clone(), true),
        ],
        3,
    );
    let (proc, base) = serve(dir.path(), &["--webhooks", &file]);

    let (s, v) = call(
        &base,
        "POST",
        "/v1/debates",
        Some(json!({"problem": "p", "webhooks": [
            {"url": "http://169.254.169.254/latest/meta-data", "events": ["completed"]}
        ]})),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("webhooks[0].url")
            && msg.contains("not one of this server's webhook endpoints"),
        "{msg}"
    );
    let (s, v) = call(
        &base,
        "POST",
        "/v1/debates",
        Some(json!({"problem": "p", "webhooks": [{"url": private.url("/literal"), "events": []}]})),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("webhooks[0].events"),
        "{v}"
    );

    let (s, v) = call(
        &base,
        "POST",
        "/v1/debates",
        Some(
            json!({"problem": "Design a cache", "rounds": 1, "webhooks": [
                {"url": private.url("/literal"), "events": ["completed"]},
                {"url": by_name, "events": ["completed"]},
                {"url": redirecting.url("/moved"), "events": ["completed"]}
            ]}),
        ),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    eventually(Duration::from_secs(60), "the redirect's attempts", || {
        redirecting.got().len() >= 2
    })
    .await;
    eventually(Duration::from_secs(30), "the refusals in the log", || {
        proc.log().contains("non-global")
    })
    .await;
    assert!(private.got().is_empty(), "a private address was called");
    assert!(landing.got().is_empty(), "a redirect was followed");
    let log = proc.log();
    assert!(
        !log.contains(secret.trim_start_matches("whsec_")),
        "the secret was logged"
    );
}

/// A cluster: the `serve` replica that delivers is killed with SIGKILL while the receiver
/// refuses; another replica takes the durable consumer over; every message arrives,
/// signed, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_webhooks_survive_a_kill_9_of_the_delivering_replica() {
    let c = Cluster::start_with_roles(json!({})).await;
    ask_once(&c.fake);
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(None),
    );
    let rx = Receiver::start(500).await;
    let secret = new_secret();
    let file = endpoint_file(dir.path(), &[(rx.url("/c"), secret.clone(), true)], 600);
    let url = c.nats_url_for("serve");
    let (mut first, base) = serve(dir.path(), &["--nats-url", &url, "--webhooks", &file]);
    // The consumer exists before the debate's first event.
    assert!(
        first
            .wait_for_log_line(
                "delivering from the durable consumer",
                Duration::from_secs(30)
            )
            .is_some(),
        "{}",
        first.log()
    );
    let (s, v) = call(
        &base,
        "POST",
        "/v1/debates",
        Some(json!({
            "problem": "Design a billing ledger", "rounds": 1, "clarify": true,
            "webhooks": [{"url": rx.url("/c"), "events": ["awaitingAnswers", "completed"]}]
        })),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let id = v["debateId"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(60), "two failed attempts", || {
        rx.got().len() >= 2
    })
    .await;
    first.kill9();
    rx.answer(200);
    let (_second, base) = serve(dir.path(), &["--nats-url", &url, "--webhooks", &file]);
    eventually(Duration::from_secs(60), "the question's message", || {
        rx.got().iter().any(|r| r.answered == 200)
    })
    .await;
    answer_all(&base, &id).await;
    eventually(Duration::from_secs(90), "the completion's message", || {
        rx.got()
            .iter()
            .filter(|r| r.answered == 200)
            .any(|r| String::from_utf8_lossy(&r.body).contains("debate.completed"))
    })
    .await;
    assert_delivered_in_order(
        &rx.got(),
        &secret,
        &id,
        &["debate.awaiting_answers", "debate.completed"],
    );
}

/// The cluster's deliveries go one message at a time through one durable consumer: the
/// events of a debate whose state is gone (purged, or never stored) must be passed over,
/// not retried for ever in front of every other debate's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_webhooks_pass_over_the_events_of_an_unknown_debate() {
    use parley_protocol::{DebateEvent, DebateStatus, EventKind, Node, Progress};
    let c = Cluster::start_with_roles(json!({})).await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(None),
    );
    let rx = Receiver::start(200).await;
    let secret = new_secret();
    let file = endpoint_file(dir.path(), &[(rx.url("/c"), secret.clone(), true)], 600);
    let url = c.nats_url_for("serve");
    let (first, base) = serve(dir.path(), &["--nats-url", &url, "--webhooks", &file]);
    assert!(
        first
            .wait_for_log_line(
                "delivering from the durable consumer",
                Duration::from_secs(30)
            )
            .is_some(),
        "{}",
        first.log()
    );
    // A final event of a debate no coordinator knows, first in the consumer's way.
    let ghost = "deb-20200101-000000-zzzzzz";
    let event = DebateEvent {
        schema_version: 1,
        debate_id: ghost.into(),
        seq: 1,
        at: chrono::Utc::now(),
        status: DebateStatus::Failed,
        progress: Progress::default(),
        kind: EventKind::DebateFailed {
            node: Node::Proposal,
            round: 1,
            message: "gone".into(),
        },
    };
    let (nc, _) = parley_tests::connect_watching(&c.nats_url_for("coordinator")).await;
    async_nats::jetstream::new(nc)
        .publish(
            parley_protocol::subjects::events_subject(ghost),
            serde_json::to_vec(&event).unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();

    let (s, v) = call(
        &base,
        "POST",
        "/v1/debates",
        Some(json!({
            "problem": "Design a billing ledger", "rounds": 1,
            "webhooks": [{"url": rx.url("/c"), "events": ["completed"]}]
        })),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let id = v["debateId"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(90), "the completion's message", || {
        rx.got()
            .iter()
            .any(|r| String::from_utf8_lossy(&r.body).contains("debate.completed"))
    })
    .await;
    assert!(
        rx.got()
            .iter()
            .all(|r| !String::from_utf8_lossy(&r.body).contains(ghost)),
        "the unknown debate had no webhooks to call"
    );
    assert_delivered_in_order(&rx.got(), &secret, &id, &["debate.completed"]);
}
