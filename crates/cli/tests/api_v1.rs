//! End-to-end tests of the HTTP API v1 (`parley serve`): per-user API keys and the
//! ownership of debates (embedded, and a cluster with two `serve` replicas), idempotency
//! keys, cursor pagination, the served OpenAPI document. The real binary, the fake LLM,
//! and for the cluster real nats-server / redis-server with the service binaries. Build the
//! binaries first: `cargo build --workspace --bins`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use parley_testkit::{free_port, ChildProcess, FakeLlm, Latency};
use parley_tests::Cluster;
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// A debate id no test creates.
const NO_SUCH: &str = "deb-20200101-000000-zzzzzz";

/// A key made by `parley serve --new-api-key NAME --api-key-role ROLE`: (the key, its
/// `[[keys]]` entry).
fn new_key(name: &str, role: &str) -> (String, String) {
    let out = Command::new(PARLEY)
        .args(["serve", "--new-api-key", name, "--api-key-role", role])
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
    let entry = text[text.find("[[keys]]").unwrap()..].to_string();
    assert!(!entry.contains(&key), "the key itself goes in no file");
    (key, entry)
}

struct Keys {
    alice: String,
    bob: String,
    root: String,
    entries: Vec<String>,
    path: PathBuf,
}

impl Keys {
    fn write(dir: &Path) -> Keys {
        let (alice, a) = new_key("alice", "user");
        let (bob, b) = new_key("bob", "user");
        let (root, r) = new_key("root", "admin");
        let path = dir.join("keys.toml");
        let keys = Keys {
            alice,
            bob,
            root,
            entries: vec![a, b, r],
            path,
        };
        keys.keep(&[0, 1, 2]);
        keys
    }

    /// Rewrites the file with the entries at `which`.
    fn keep(&self, which: &[usize]) {
        let text: Vec<&str> = which.iter().map(|i| self.entries[*i].as_str()).collect();
        std::fs::write(&self.path, text.join("\n")).unwrap();
    }
}

fn serve(dir: &Path, extra: &[&str]) -> (ChildProcess, String) {
    let port = free_port();
    let mut cmd = Command::new(PARLEY);
    cmd.current_dir(dir)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
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

/// One HTTP call with `key` (none: no credentials): (status, JSON body or Null, headers).
async fn call(
    base: &str,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
    extra: &[(&str, &str)],
) -> (u16, Value, reqwest::header::HeaderMap) {
    let http = reqwest::Client::new();
    let mut req = http.request(method.parse().unwrap(), format!("{base}{path}"));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    for (h, v) in extra {
        req = req.header(*h, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        headers,
    )
}

async fn create(base: &str, key: &str, body: Value, idem: Option<&str>) -> (u16, Value, bool) {
    let extra: Vec<(&str, &str)> = idem.map(|k| ("Idempotency-Key", k)).into_iter().collect();
    let (s, v, h) = call(base, "POST", "/v1/debates", Some(key), Some(body), &extra).await;
    (s, v, h.get("idempotent-replayed").is_some())
}

async fn ids(base: &str, key: &str) -> Vec<String> {
    let (s, v, _) = call(base, "GET", "/v1/debates?limit=200", Some(key), None, &[]).await;
    assert_eq!(s, 200, "{v}");
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect()
}

/// Every way of reaching debate `id` as `key`: each must be a 404 exactly like the one of
/// a debate that does not exist (same code, same message but for the id).
async fn assert_hidden(base: &str, key: &str, id: &str) {
    let (_, missing, _) = call(
        base,
        "GET",
        &format!("/v1/debates/{NO_SUCH}"),
        Some(key),
        None,
        &[],
    )
    .await;
    let want = missing["error"]["message"]
        .as_str()
        .unwrap()
        .replace(NO_SUCH, id);
    let answers = json!({"answers": [{"id": "q1", "answer": "a"}]});
    for (method, path, body) in [
        ("GET", format!("/v1/debates/{id}"), None),
        ("GET", format!("/v1/debates/{id}/report"), None),
        ("GET", format!("/v1/debates/{id}/record"), None),
        ("GET", format!("/v1/debates/{id}/events"), None),
        ("POST", format!("/v1/debates/{id}/cancel"), Some(json!({}))),
        ("POST", format!("/v1/debates/{id}/retry"), Some(json!({}))),
        ("POST", format!("/v1/debates/{id}/answers"), Some(answers)),
        (
            "POST",
            format!("/v1/debates/{id}/steer"),
            Some(json!({"command": "pause"})),
        ),
        (
            "POST",
            format!("/v1/debates/{id}/contributions"),
            Some(json!({"text": "a person's answer"})),
        ),
        (
            "POST",
            format!("/v1/debates/{id}/feedback"),
            Some(json!({"feedback": 1})),
        ),
    ] {
        let (s, v, _) = call(base, method, &path, Some(key), body, &[]).await;
        assert_eq!(s, 404, "{method} {path}: {v}");
        assert_eq!(v["error"]["code"], "not_found", "{method} {path}: {v}");
        assert_eq!(
            v["error"]["message"], want,
            "{method} {path}: ids must not leak"
        );
    }
    assert!(!ids(base, key).await.contains(&id.to_string()));
}

/// Polls until `f` holds (at most `timeout`).
async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// The first event of debate `id`'s stream as `key` (status 200 and one `id:` line).
async fn first_event(base: &str, key: &str, id: &str) -> u64 {
    let mut r = reqwest::Client::new()
        .get(format!("{base}/v1/debates/{id}/events"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut buf = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, r.chunk()).await {
            Ok(Ok(Some(c))) => buf.push_str(&String::from_utf8_lossy(&c)),
            _ => break,
        }
        if let Some(line) = buf.lines().find(|l| l.starts_with("id:")) {
            return line[3..].trim().parse().unwrap();
        }
    }
    panic!("no event for {id}: {buf}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_keys_see_only_their_debates_and_a_revoked_key_stops_working() {
    let fake = FakeLlm::start().await.unwrap();
    // Debates stay running for the test's length (cancel has something to cancel).
    fake.set_latency(Latency::Fixed(Duration::from_secs(2)));
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(Some(&fake.base_url())),
    );
    let keys = Keys::write(dir.path());
    let (proc, base) = serve(dir.path(), &["--api-keys", keys.path.to_str().unwrap()]);
    let base = base.as_str();

    // The document needs no credentials; everything else does.
    let (s, doc, _) = call(base, "GET", "/v1/openapi.json", None, None, &[]).await;
    assert_eq!(s, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{doc}");
    let (s, v, h) = call(base, "GET", "/v1/debates", None, None, &[]).await;
    assert_eq!(s, 401, "{v}");
    assert_eq!(v["error"]["code"], "unauthorized");
    assert!(h.get("www-authenticate").is_some());
    let (s, _, _) = call(base, "GET", "/v1/debates", Some("pk_wrong"), None, &[]).await;
    assert_eq!(s, 401);

    // Idempotency: the same key and body name the same debate; another body is a 422;
    // another caller's same key is another key.
    let body = json!({"problem": "Alice's cache"});
    let (s, v, replayed) = create(base, &keys.alice, body.clone(), Some("k1")).await;
    assert_eq!(s, 201, "{v}");
    assert!(!replayed);
    let a = v["debateId"].as_str().unwrap().to_string();
    let (s, v, replayed) = create(base, &keys.alice, body.clone(), Some("k1")).await;
    assert_eq!((s, v["debateId"].as_str()), (201, Some(a.as_str())));
    assert!(replayed);
    let (s, v, _) = create(
        base,
        &keys.alice,
        json!({"problem": "Something else"}),
        Some("k1"),
    )
    .await;
    assert_eq!(s, 422, "{v}");
    assert_eq!(v["error"]["code"], "idempotency_key_reused");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Idempotency-Key"));
    let (s, v, replayed) = create(base, &keys.bob, body.clone(), Some("k1")).await;
    assert_eq!(s, 201, "{v}");
    assert!(!replayed);
    let b = v["debateId"].as_str().unwrap().to_string();
    assert_ne!(a, b);

    // Lists: each user their own; the admin all.
    assert_eq!(ids(base, &keys.alice).await, vec![a.clone()]);
    assert_eq!(ids(base, &keys.bob).await, vec![b.clone()]);
    let all = ids(base, &keys.root).await;
    assert!(all.contains(&a) && all.contains(&b), "{all:?}");

    // Bob cannot list, read, follow, cancel, retry, answer or rate Alice's debate: the
    // same 404 as for a debate that does not exist.
    assert_hidden(base, &keys.bob, &a).await;
    assert_hidden(base, &keys.alice, &b).await;
    // Alice can; her state names her as the owner.
    let (s, st, _) = call(
        base,
        "GET",
        &format!("/v1/debates/{a}"),
        Some(&keys.alice),
        None,
        &[],
    )
    .await;
    assert_eq!(s, 200, "{st}");
    assert_eq!(st["owner"], "alice");
    assert!(first_event(base, &keys.alice, &a).await >= 1);
    // The admin can read and command both.
    let (s, _, _) = call(
        base,
        "GET",
        &format!("/v1/debates/{a}/report"),
        Some(&keys.root),
        None,
        &[],
    )
    .await;
    assert_eq!(s, 200);
    let (s, v, _) = call(
        base,
        "POST",
        &format!("/v1/debates/{b}/cancel"),
        Some(&keys.root),
        Some(json!({})),
        &[],
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (s, v, _) = call(
        base,
        "POST",
        &format!("/v1/debates/{a}/cancel"),
        Some(&keys.alice),
        Some(json!({})),
        &[],
    )
    .await;
    assert_eq!(s, 200, "{v}");

    // Pagination: newest first, every debate once.
    let mut made = vec![a.clone()];
    for i in 0..2 {
        let (s, v, _) = create(base, &keys.alice, json!({"problem": format!("p{i}")}), None).await;
        assert_eq!(s, 201, "{v}");
        made.push(v["debateId"].as_str().unwrap().to_string());
        let (s, v, _) = call(
            base,
            "POST",
            &format!("/v1/debates/{}/cancel", made.last().unwrap()),
            Some(&keys.alice),
            Some(json!({})),
            &[],
        )
        .await;
        assert_eq!(s, 200, "{v}");
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/debates?limit=2&cursor={c}"),
            None => "/v1/debates?limit=2".to_string(),
        };
        let (s, v, _) = call(base, "GET", &path, Some(&keys.alice), None, &[]).await;
        assert_eq!(s, 200, "{v}");
        pages += 1;
        for i in v["items"].as_array().unwrap() {
            seen.push(i["id"].as_str().unwrap().to_string());
        }
        match v["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 2);
    made.sort_unstable_by(|x, y| y.cmp(x));
    assert_eq!(seen, made, "newest first, each once");
    let (s, v, _) = call(
        base,
        "GET",
        "/v1/debates?cursor=nonsense",
        Some(&keys.alice),
        None,
        &[],
    )
    .await;
    assert_eq!(s, 400);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("cursor"));

    // Revoked (removed from the file): refused without a restart; the others still work.
    keys.keep(&[1, 2]);
    let alice = keys.alice.clone();
    assert!(
        eventually(Duration::from_secs(10), || {
            let alice = alice.clone();
            async move {
                call(base, "GET", "/v1/debates", Some(&alice), None, &[])
                    .await
                    .0
                    == 401
            }
        })
        .await,
        "a revoked key still works"
    );
    let (s, _, _) = call(base, "GET", "/v1/debates", Some(&keys.bob), None, &[]).await;
    assert_eq!(s, 200);
    // A file that does not parse keeps the previous keys.
    std::fs::write(&keys.path, "[[keys]\nbroken").unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (s, _, _) = call(base, "GET", "/v1/debates", Some(&keys.bob), None, &[]).await;
    assert_eq!(s, 200, "a bad file dropped the keys");
    assert!(
        proc.log().contains("keeping the previous keys"),
        "{}",
        proc.log()
    );
    // Added back: works again.
    keys.keep(&[0, 1, 2]);
    assert!(
        eventually(Duration::from_secs(10), || {
            let alice = alice.clone();
            async move {
                call(base, "GET", "/v1/debates", Some(&alice), None, &[])
                    .await
                    .0
                    == 200
            }
        })
        .await
    );
    let log = proc.log();
    for k in [&keys.alice, &keys.bob, &keys.root] {
        assert!(!log.contains(k.as_str()), "a key was logged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replicas_enforce_ownership_and_idempotency() {
    let c = Cluster::start_with_roles(json!({})).await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(500)));
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(None),
    );
    let keys = Keys::write(dir.path());
    let url = c.nats_url_for("serve");
    let k = keys.path.to_str().unwrap();
    let (_one, r1) = serve(dir.path(), &["--nats-url", &url, "--api-keys", k]);
    let (_two, r2) = serve(dir.path(), &["--nats-url", &url, "--api-keys", k]);

    let body = json!({"problem": "Alice's cluster cache"});
    let (s, v, _) = create(&r1, &keys.alice, body.clone(), Some("c1")).await;
    assert_eq!(s, 201, "{v}");
    let a = v["debateId"].as_str().unwrap().to_string();
    // The other replica has never seen the key: the coordinators bound it to the debate.
    let (s, v, _) = create(&r2, &keys.alice, body.clone(), Some("c1")).await;
    assert_eq!((s, v["debateId"].as_str()), (201, Some(a.as_str())), "{v}");
    let (s, v, _) = create(&r2, &keys.alice, json!({"problem": "other"}), Some("c1")).await;
    assert_eq!(s, 422, "{v}");
    assert_eq!(v["error"]["code"], "idempotency_key_reused");

    // The owner travels with the debate: the other replica enforces it too.
    for base in [&r1, &r2] {
        assert_hidden(base, &keys.bob, &a).await;
        let (s, st, _) = call(
            base,
            "GET",
            &format!("/v1/debates/{a}"),
            Some(&keys.alice),
            None,
            &[],
        )
        .await;
        assert_eq!(s, 200, "{st}");
        assert_eq!(st["owner"], "alice");
        let (s, st, _) = call(
            base,
            "GET",
            &format!("/v1/debates/{a}"),
            Some(&keys.root),
            None,
            &[],
        )
        .await;
        assert_eq!(s, 200, "{st}");
    }
    assert!(first_event(&r2, &keys.alice, &a).await >= 1);
    assert!(
        eventually(Duration::from_secs(20), || {
            let (r2, alice, a) = (r2.clone(), keys.alice.clone(), a.clone());
            async move { ids(&r2, &alice).await.contains(&a) }
        })
        .await,
        "alice's list on the other replica"
    );
    assert!(ids(&r2, &keys.root).await.contains(&a));
    let (s, v, _) = call(
        &r2,
        "POST",
        &format!("/v1/debates/{a}/cancel"),
        Some(&keys.alice),
        Some(json!({})),
        &[],
    )
    .await;
    assert_eq!(s, 200, "{v}");
}

/// An embedded `serve` with a signing key: a finished debate's decision record is served at
/// `/v1/debates/{id}/record` (signed, and beside the checkpoint), the served report names it,
/// and `parley verify` checks the record against that report with the public key; before
/// the debate finishes the record is a 404 that says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_debate_s_record_is_served_and_verifies_against_the_served_report() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_latency(Latency::Fixed(Duration::from_millis(1500)));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    parley_tests::write_json(
        d.join("debate-config.json"),
        &parley_tests::spec_config(Some(&fake.base_url())),
    );
    let keygen = Command::new(PARLEY)
        .current_dir(d)
        .args(["record", "--generate-key", "keys"])
        .output()
        .unwrap();
    assert!(keygen.status.success(), "{keygen:?}");
    let token = "a-token-of-sixteen-chars";
    let (_proc, base) = serve(
        d,
        &[
            "--auth-token",
            token,
            "--record-signing-key",
            "keys/record-signing.key",
        ],
    );
    let base = base.as_str();
    let (s, v, _) = create(base, token, json!({"problem": "Design a cache"}), None).await;
    assert_eq!(s, 201, "{v}");
    let id = v["debateId"].as_str().unwrap().to_string();

    // Running: no record yet, and the 404 says why.
    let (s, v, _) = call(
        base,
        "GET",
        &format!("/v1/debates/{id}/record"),
        Some(token),
        None,
        &[],
    )
    .await;
    assert_eq!(s, 404, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("a record is written when it finishes"),
        "{v}"
    );

    fake.set_latency(Latency::Fixed(Duration::ZERO));
    let done = eventually(Duration::from_secs(90), || async {
        let (_, st, _) = call(
            base,
            "GET",
            &format!("/v1/debates/{id}"),
            Some(token),
            None,
            &[],
        )
        .await;
        st["status"] == "completed"
    })
    .await;
    assert!(done, "the debate did not complete");

    let (s, record, h) = call(
        base,
        "GET",
        &format!("/v1/debates/{id}/record"),
        Some(token),
        None,
        &[],
    )
    .await;
    assert_eq!(s, 200, "{record}");
    assert_eq!(record["debateId"], id.as_str());
    assert_eq!(record["signature"]["algorithm"], "ed25519", "{record}");
    assert!(h
        .get("content-disposition")
        .is_some_and(|v| v.to_str().unwrap().contains(".record.json")));
    assert!(d.join(format!("debates/{id}.record.json")).exists());
    // The state download names the record: digest and signature status.
    let digest = h["parley-record-digest"].to_str().unwrap().to_string();
    let (_, st, sh) = call(
        base,
        "GET",
        &format!("/v1/debates/{id}"),
        Some(token),
        None,
        &[],
    )
    .await;
    assert_eq!(st["decisionRecord"]["digest"], digest.as_str(), "{st}");
    assert_eq!(st["decisionRecord"]["signed"], true, "{st}");
    assert_eq!(
        st["decisionRecord"]["keyId"], record["signature"]["keyId"],
        "{st}"
    );
    assert_eq!(sh["parley-record-digest"].to_str().unwrap(), digest);

    let report = reqwest::Client::new()
        .get(format!("{base}/v1/debates/{id}/report"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(report.contains("## Decision Record"), "{report}");
    assert!(report.contains("signed (Ed25519, key `"), "{report}");
    std::fs::write(d.join("served.record.json"), record.to_string()).unwrap();
    std::fs::write(d.join("served.md"), &report).unwrap();
    let verify = Command::new(PARLEY)
        .current_dir(d)
        .args([
            "verify",
            "served.record.json",
            "--report",
            "served.md",
            "--public-key",
            "keys/record-signing.pub",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&verify.stdout).into_owned()
        + &String::from_utf8_lossy(&verify.stderr);
    assert_eq!(verify.status.code(), Some(0), "{out}");
    assert!(out.contains("signature: verified with key "), "{out}");
    assert!(out.contains("report: served.md matches: 24 texts"), "{out}");
    // The key file's secret is in neither.
    let secret = std::fs::read_to_string(d.join("keys/record-signing.key")).unwrap();
    let seed = secret.lines().last().unwrap();
    assert!(!report.contains(seed) && !record.to_string().contains(seed));
}

/// A submission's termination, mode, budget and context reach the debate: the context is
/// in the prompts on the wire, the budget is the state's, `quality` at a threshold the
/// fake judge's confidence meets stops after round 1 of 3; bad options are each named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_chooses_its_termination_mode_budget_and_context() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cfg = parley_tests::spec_config(Some(&fake.base_url()));
    cfg["debate"]["rounds"] = json!(3);
    parley_tests::write_json(d.join("debate-config.json"), &cfg);
    let token = "a-token-of-sixteen-chars";
    let (_proc, base) = serve(d, &["--auth-token", token]);
    let base = base.as_str();

    let (s, v, _) = create(
        base,
        token,
        json!({
            "problem": "Design a cache",
            "termination": "fixed",
            "threshold": 101,
            "budget": {"usd": -1, "tokens": 0},
            "context": "x".repeat(200_001),
            "mode": "sometimes",
        }),
        None,
    )
    .await;
    assert_eq!(s, 400, "{v}");
    let (s, v, _) = create(
        base,
        token,
        json!({
            "problem": "Design a cache",
            "termination": "fixed",
            "threshold": 101,
            "budget": {"usd": -1, "tokens": 0},
            "context": "x".repeat(200_001),
        }),
        None,
    )
    .await;
    assert_eq!(s, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    for named in [
        "threshold: 101 is out of range",
        "threshold: applies to termination",
        "budget.usd: -1",
        "budget.tokens: 0",
        "context: 200001 characters",
    ] {
        assert!(message.contains(named), "{message} lacks {named}");
    }
    assert_eq!(
        fake.request_count(),
        0,
        "a refused submission calls nothing"
    );

    let (s, v, _) = create(
        base,
        token,
        json!({
            "problem": "Design a cache",
            "termination": "quality",
            "threshold": 1,
            "budget": {"tokens": 900000},
            "context": "The cache runs on ARM boards with 512 MB of memory.",
        }),
        None,
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let id = v["debateId"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(90);
    let state = loop {
        let (_, st, _) = call(
            base,
            "GET",
            &format!("/v1/debates/{id}"),
            Some(token),
            None,
            &[],
        )
        .await;
        if st["status"] == "completed" || st["status"] == "failed" || Instant::now() > deadline {
            break st;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(state["budget"]["limit"]["tokens"], 900000, "{state}");
    assert!(
        state["rounds"].as_array().unwrap().len() < 3,
        "quality at threshold 1 stops early: {state}"
    );
    let requests = fake.requests();
    assert!(!requests.is_empty());
    let proposals: Vec<_> = requests
        .iter()
        .filter(|r| parley_testkit::fake_llm::script::kind_of(&r.prompt_text()) == "propose")
        .collect();
    assert_eq!(proposals.len(), 3, "one round of three agents");
    assert!(
        proposals
            .iter()
            .all(|r| r.prompt_text().contains("ARM boards with 512 MB")),
        "a proposal's prompt lacks the context"
    );
}
