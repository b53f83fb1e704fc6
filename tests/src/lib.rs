//! Shared pieces of the end-to-end tests and the cluster benchmark: a [`Cluster`] of real
//! nats-server (JetStream) and redis-server processes on ephemeral loopback ports, the fake
//! LLM, and the three service binaries started as separate processes; plus the debate
//! spec and the assertions the tests share.
//!
//! Also: reading a debate's events back from JetStream ([`events`]), grouping the fake
//! LLM's requests by debate ([`successful_calls_by_problem`]) and the critical path of a
//! finished debate's task graph ([`critical_path_ms`]), used by the cluster benchmark.
//!
//! [`soak`]: the seeded nemesis soak over the HA layout (the short one in
//! `tests/tests/soak.rs`, the long one in `benches/soak.rs`).
//!
//! Build the binaries first: `cargo build --workspace --bins`.

pub mod soak;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use parley_protocol::{
    AgentConfig, ContributionMetadata, ContributionType, DebateEvent, DebateSpec, DebateState,
    ErrorKind, TaskError, TaskOutcome, TaskOutput, TaskResult, SCHEMA_VERSION,
};
pub use parley_testkit::{
    parley_command, send_signal, wait_until_async, workspace_bin, ChildProcess, FakeLlm, Fault,
    Latency, Match, NatsCluster, NatsServer, RateLimit, RecordedRequest, RedisSentinel,
    RedisServer,
};
use serde_json::{json, Value};

/// The passwords of the NATS users of `deploy/nats/parley.conf` in a [`Cluster`] started
/// with [`Cluster::start_with_roles`].
#[derive(Debug, Clone)]
pub struct Roles {
    pub client: String,
    pub coordinator: String,
    pub agent_worker: String,
    pub judge_worker: String,
    pub serve: String,
}

/// The users' passwords, the NATS config text and more environment for the server.
type RolesSetup = (Roles, String, Vec<(String, String)>);

/// `deploy/nats/client-user.sh`: writes a client user line for the shipped config.
pub fn client_user_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/nats/client-user.sh")
}

/// The user line `deploy/nats/client-user.sh NAME` writes (its password variable is
/// `PARLEY_NATS_<NAME>_PASSWORD`).
pub fn client_user_line(name: &str) -> String {
    let out = Command::new("sh")
        .arg(client_user_script())
        .arg(name)
        .output()
        .expect("run deploy/nats/client-user.sh");
    assert!(
        out.status.success(),
        "client-user.sh {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The inbox prefix a connection as NATS user `user` of the shipped config receives on.
pub fn inbox_of(user: &str) -> String {
    match user {
        "coordinator" => "_INBOX_coordinator".into(),
        "worker" | "agent-worker" => "_INBOX_agent_worker".into(),
        "judge-worker" => "_INBOX_judge_worker".into(),
        other => format!("_INBOX_{other}"),
    }
}

/// `deploy/nats/parley.conf`: the shipped NATS configuration with its roles.
pub fn roles_config() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/nats/parley.conf")
}

/// A running cluster's backing services and the fake LLM; services are started on demand.
pub struct Cluster {
    pub nats: NatsServer,
    pub redis: RedisServer,
    pub fake: FakeLlm,
    /// Holds the worker config file.
    pub dir: tempfile::TempDir,
    /// The debate config file the workers load (`baseUrl` = the fake LLM, plus extras).
    pub config: PathBuf,
    pub client: async_nats::Client,
    /// Set when NATS runs with the roles configuration: services connect as their role and
    /// `client` as the `client` role.
    pub roles: Option<Roles>,
}

impl Cluster {
    pub async fn start() -> Cluster {
        Self::start_with_config(json!({})).await
    }

    /// A cluster whose worker config also holds `extra`'s fields (e.g. `providers`).
    pub async fn start_with_config(extra: Value) -> Cluster {
        Self::start_inner(extra, None, None).await
    }

    /// A cluster whose nats-server accepts messages of at most `bytes` (`max_payload`).
    pub async fn start_with_max_payload(bytes: usize) -> Cluster {
        Self::start_inner(json!({}), None, Some(bytes)).await
    }

    /// A cluster whose NATS server runs `deploy/nats/parley.conf` (account `PARLEY`, users
    /// `coordinator`, `agent-worker`, `judge-worker`, `serve`, `client` with random
    /// passwords); every service connects as its user, [`Cluster::client`] as `client`.
    pub async fn start_with_roles(extra: Value) -> Cluster {
        Self::start_with_roles_and_users(extra, &[]).await
    }

    /// [`Cluster::start_with_roles`] with more user entries in the `PARLEY` account, e.g.
    /// `{nkey: U..., permissions: $JUDGE_WORKER_PERMISSIONS}`.
    pub async fn start_with_roles_and_users(extra: Value, users: &[String]) -> Cluster {
        Self::start_with_roles_users_env(extra, users, &[]).await
    }

    /// [`Cluster::start_with_roles_and_users`] with more environment variables for the
    /// NATS server (e.g. the passwords of the added users).
    pub async fn start_with_roles_users_env(
        extra: Value,
        users: &[String],
        env: &[(&str, &str)],
    ) -> Cluster {
        let pw = |role: &str| format!("{role}-{:016x}", rand_u64());
        let roles = Roles {
            client: pw("client"),
            coordinator: pw("coordinator"),
            agent_worker: pw("agent-worker"),
            judge_worker: pw("judge-worker"),
            serve: pw("serve"),
        };
        let shipped = std::fs::read_to_string(roles_config()).unwrap();
        let marker = "{user: client,";
        let at = shipped
            .find(marker)
            .and_then(|i| shipped[i..].find('\n').map(|j| i + j + 1))
            .expect("the client user line in deploy/nats/parley.conf");
        let conf = format!("{}{}\n{}", &shipped[..at], users.join("\n"), &shipped[at..]);
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self::start_inner(extra, Some((roles, conf, env)), None).await
    }

    async fn start_inner(
        extra: Value,
        roles: Option<RolesSetup>,
        max_payload: Option<usize>,
    ) -> Cluster {
        // Holds the worker config and the NATS config (read again by a NATS restart).
        let dir = tempfile::tempdir().unwrap();
        let nats = match &roles {
            None => match max_payload {
                None => NatsServer::start().unwrap(),
                Some(bytes) => NatsServer::start_with_max_payload(bytes).unwrap(),
            },
            Some((r, conf, more)) => {
                let mut env: Vec<(&str, &str)> = vec![
                    ("PARLEY_NATS_CLIENT_PASSWORD", &r.client),
                    ("PARLEY_NATS_COORDINATOR_PASSWORD", &r.coordinator),
                    ("PARLEY_NATS_AGENT_WORKER_PASSWORD", &r.agent_worker),
                    ("PARLEY_NATS_JUDGE_WORKER_PASSWORD", &r.judge_worker),
                    ("PARLEY_NATS_SERVE_PASSWORD", &r.serve),
                ];
                env.extend(more.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                NatsServer::start_with_config(
                    &{
                        let p = dir.path().join("nats-parley.conf");
                        std::fs::write(&p, conf).unwrap();
                        p
                    },
                    &env,
                )
                .unwrap()
            }
        };
        let redis = RedisServer::start().unwrap();
        let fake = FakeLlm::start().await.unwrap();
        let config = dir.path().join("debate-config.json");
        let mut file = json!({"baseUrl": fake.base_url()});
        if let (Some(into), Some(from)) = (file.as_object_mut(), extra.as_object()) {
            into.extend(from.clone());
        }
        std::fs::write(&config, serde_json::to_vec(&file).unwrap()).unwrap();
        let roles = roles.map(|(r, _, _)| r);
        let client_url = match &roles {
            None => nats.url(),
            Some(r) => nats.url_as("client", &r.client),
        };
        let client = connect_as(&client_url).await;
        Cluster {
            nats,
            redis,
            fake,
            dir,
            config,
            client,
            roles,
        }
    }

    /// The NATS URL a service of `role` (`coordinator`, `agent-worker` (or `worker`),
    /// `judge-worker`, `serve`, `client`) connects to: as that user, with its password, when
    /// the cluster runs with roles.
    pub fn nats_url_for(&self, role: &str) -> String {
        match &self.roles {
            None => self.nats.url(),
            Some(r) => {
                let (user, pw) = match role {
                    "coordinator" => ("coordinator", &r.coordinator),
                    "worker" | "agent-worker" => ("agent-worker", &r.agent_worker),
                    "judge-worker" => ("judge-worker", &r.judge_worker),
                    "serve" => ("serve", &r.serve),
                    _ => ("client", &r.client),
                };
                self.nats.url_as(user, pw)
            }
        }
    }

    pub fn coordinator(&self) -> ChildProcess {
        self.coordinator_with(&[])
    }

    /// A coordinator with extra environment variables.
    pub fn coordinator_with(&self, env: &[(&str, String)]) -> ChildProcess {
        self.coordinator_from(&workspace_bin("parley-coordinator"), env)
    }

    /// A coordinator from the binary `bin` (another build's, for a bench's comparison),
    /// with extra environment variables.
    pub fn coordinator_from(&self, bin: &std::path::Path, env: &[(&str, String)]) -> ChildProcess {
        let mut cmd = Command::new(bin);
        cmd.args([
            "--nats-url",
            &self.nats_url_for("coordinator"),
            "--redis-url",
            &self.redis.url(),
            "--lease-ttl-ms",
            "2000",
        ])
        .env("PARLEY_LOG", "info")
        .env("PARLEY_METRICS_ADDR", "off");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let p = ChildProcess::spawn(cmd, "coordinator").unwrap();
        assert!(
            p.wait_for_log_line("coordinator ready", Duration::from_secs(30))
                .is_some(),
            "coordinator did not start:\n{}",
            p.log()
        );
        p
    }

    /// A worker (`agent` or `judge`) with concurrency 4 and a 3 s ack wait.
    pub fn worker(&self, kind: &str) -> ChildProcess {
        self.worker_with(kind, &[], &[])
    }

    /// A worker with flags (`--flag value` pairs, replacing the defaults: NATS and Redis of
    /// this cluster, `--concurrency 4`, `--ack-wait-secs 3`, `--config` this cluster's
    /// config) and extra environment variables.
    pub fn worker_with(&self, kind: &str, args: &[&str], env: &[(&str, String)]) -> ChildProcess {
        let mut flags: Vec<(String, String)> = vec![
            (
                "--nats-url".into(),
                self.nats_url_for(&format!("{kind}-worker")),
            ),
            ("--redis-url".into(), self.redis.url()),
            ("--concurrency".into(), "4".into()),
            ("--ack-wait-secs".into(), "3".into()),
            ("--config".into(), self.config.display().to_string()),
        ];
        for pair in args.chunks(2) {
            let (flag, value) = (
                pair[0].to_string(),
                pair.get(1).copied().unwrap_or_default(),
            );
            match flags.iter_mut().find(|(f, _)| *f == flag) {
                Some(slot) => slot.1 = value.to_string(),
                None => flags.push((flag, value.to_string())),
            }
        }
        let mut cmd = Command::new(workspace_bin(&format!("parley-{kind}-worker")));
        for (flag, value) in &flags {
            cmd.arg(flag).arg(value);
        }
        cmd.env("PARLEY_LOG", "info")
            .env("PARLEY_METRICS_ADDR", "off")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENROUTER_API_KEY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let p = ChildProcess::spawn(cmd, &format!("{kind}-worker")).unwrap();
        assert!(
            p.wait_for_log_line("worker ready", Duration::from_secs(30))
                .is_some(),
            "worker did not start:\n{}",
            p.log()
        );
        p
    }

    pub async fn request(&self, subject: &'static str, body: Vec<u8>) -> Value {
        self.try_request(subject, body)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A request whose failure (timeout, no responders while a service reconnects,
    /// a reply that is not JSON) is an error instead of a panic.
    pub async fn try_request(&self, subject: &'static str, body: Vec<u8>) -> anyhow::Result<Value> {
        try_request_on(&self.client, subject, body).await
    }

    pub async fn submit(&self, spec: &Value) -> String {
        submit_on(&self.client, spec).await
    }

    /// The status reply: the debate's state (reassembled from its pages when it is larger
    /// than one reply), or the error reply.
    pub async fn status(&self, id: &str) -> Value {
        self.try_status(id).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Cluster::status`], with failures as errors.
    pub async fn try_status(&self, id: &str) -> anyhow::Result<Value> {
        try_status_on(&self.client, id).await
    }

    /// Polls the status until `pred` holds; panics with the last state after `timeout`.
    /// A failed status request (e.g. while NATS restarts and the services reconnect) is
    /// polled again, not a failure.
    pub async fn wait_status(
        &self,
        id: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_status_on(&self.client, id, timeout, pred).await
    }

    /// Waits until the debate is completed, failed or cancelled.
    pub async fn wait_done(&self, id: &str, timeout: Duration) -> Value {
        self.wait_status(id, timeout, is_done).await
    }
}

/// A request on `client` whose failure (timeout, no responders while a service
/// reconnects, a reply that is not JSON) is an error instead of a panic.
pub async fn try_request_on(
    client: &async_nats::Client,
    subject: &'static str,
    body: Vec<u8>,
) -> anyhow::Result<Value> {
    let msg = tokio::time::timeout(
        Duration::from_secs(15),
        client.request(subject, body.into()),
    )
    .await
    .map_err(|_| anyhow::anyhow!("request on {subject} timed out"))?
    .map_err(|e| anyhow::anyhow!("request on {subject} failed: {e}"))?;
    serde_json::from_slice(&msg.payload)
        .map_err(|e| anyhow::anyhow!("reply on {subject} is not JSON: {e}"))
}

/// Submits `spec` on `client`; panics unless a debate id comes back.
pub async fn submit_on(client: &async_nats::Client, spec: &Value) -> String {
    let r = try_request_on(
        client,
        "parley.debates.submit",
        serde_json::to_vec(spec).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    r["debateId"]
        .as_str()
        .unwrap_or_else(|| panic!("no debateId in {r}"))
        .to_string()
}

/// The status reply of debate `id` on `client`: its state (reassembled from its pages
/// when it is larger than one reply), or the error reply.
pub async fn try_status_on(client: &async_nats::Client, id: &str) -> anyhow::Result<Value> {
    let body = serde_json::to_vec(&json!({"debateId": id})).unwrap();
    let first = try_request_on(client, "parley.debates.status", body).await?;
    let Some(page) = parley_protocol::StatusPage::from_reply(&first) else {
        return Ok(first);
    };
    let mut pages = vec![page.clone()];
    for k in 1..page.pages {
        let body = json!({"debateId": id, "snapshot": page.snapshot, "page": k});
        let v = try_request_on(
            client,
            "parley.debates.status",
            serde_json::to_vec(&body).unwrap(),
        )
        .await?;
        pages.push(
            parley_protocol::StatusPage::from_reply(&v)
                .ok_or_else(|| anyhow::anyhow!("not a status page: {v}"))?,
        );
    }
    let text = parley_protocol::StatusPage::assemble(pages).map_err(anyhow::Error::msg)?;
    Ok(serde_json::from_str(&text)?)
}

/// Polls debate `id`'s status on `client` until `pred` holds; panics with the last state
/// after `timeout`. A failed status request (a service reconnecting) is polled again.
pub async fn wait_status_on(
    client: &async_nats::Client,
    id: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let last = match try_status_on(client, id).await {
            Ok(s) if pred(&s) => return s,
            Ok(s) => serde_json::to_string_pretty(&s).unwrap(),
            Err(e) => e.to_string(),
        };
        if start.elapsed() > timeout {
            panic!("timed out waiting for {id}; last status: {last}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A JetStream API request (`$JS.API.<api>`, e.g. `STREAM.INFO.PARLEY_TASKS`) on `client`
/// with an empty body: the JSON answer, or an error naming the API's error.
pub async fn jetstream_api(client: &async_nats::Client, api: &str) -> anyhow::Result<Value> {
    let subject = format!("$JS.API.{api}");
    let msg = tokio::time::timeout(
        Duration::from_secs(5),
        client.request(subject.clone(), Vec::new().into()),
    )
    .await
    .map_err(|_| anyhow::anyhow!("{subject}: no answer"))?
    .map_err(|e| anyhow::anyhow!("{subject}: {e}"))?;
    let v: Value = serde_json::from_slice(&msg.payload)
        .map_err(|e| anyhow::anyhow!("{subject}: not JSON: {e}"))?;
    match v.get("error") {
        Some(e) => Err(anyhow::anyhow!("{subject}: {e}")),
        None => Ok(v),
    }
}

/// Waits until JetStream answers `$JS.API.INFO` on `client` (a clustered JetStream
/// answers once its nodes have elected a meta leader); panics after `timeout`.
pub async fn wait_for_jetstream(client: &async_nats::Client, timeout: Duration) {
    let start = Instant::now();
    loop {
        let last = match jetstream_api(client, "INFO").await {
            Ok(_) => return,
            Err(e) => e.to_string(),
        };
        assert!(
            start.elapsed() < timeout,
            "JetStream not ready after {timeout:?}: {last}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The server name of the node leading `stream`'s replicas, if it has a leader now.
pub async fn stream_leader(client: &async_nats::Client, stream: &str) -> Option<String> {
    let info = jetstream_api(client, &format!("STREAM.INFO.{stream}"))
        .await
        .ok()?;
    info["cluster"]["leader"].as_str().map(str::to_string)
}

/// Starts the service binary `bin` (e.g. `parley-coordinator`) with `flags`
/// (`--flag value` pairs), logging at `info` without `/metrics`, and waits (30 s) until its
/// log says `ready` (`coordinator ready`, `worker ready`).
pub fn start_service(bin: &str, flags: &[(&str, String)], ready: &str) -> ChildProcess {
    let mut cmd = Command::new(workspace_bin(bin));
    for (flag, value) in flags {
        cmd.arg(flag).arg(value);
    }
    cmd.env("PARLEY_LOG", "info")
        .env("PARLEY_METRICS_ADDR", "off")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY");
    let p = ChildProcess::spawn(cmd, bin).unwrap();
    assert!(
        p.wait_for_log_line(ready, Duration::from_secs(30))
            .is_some(),
        "{bin} did not start:\n{}",
        p.log()
    );
    p
}

/// Runs the `parley` CLI in `dir` in a clean environment ([`parley_command`]); async, so
/// the fake LLM in this runtime keeps serving.
pub async fn parley_cli(dir: &Path, args: &[&str]) -> std::process::Output {
    parley_command(workspace_bin("parley"), dir, args)
        .output()
        .await
        .expect("run parley")
}

/// `parley submit PROBLEM --config CONFIG --nats-url URL --wait --output state.json` in
/// `dir` ([`parley_cli`]), with `extra` arguments: its output and its stderr.
pub async fn submit_and_wait(
    dir: &Path,
    problem: &str,
    config: &str,
    url: &str,
    extra: &[&str],
) -> (std::process::Output, String) {
    let mut args = vec![
        "submit",
        problem,
        "--config",
        config,
        "--nats-url",
        url,
        "--wait",
        "--output",
        "state.json",
    ];
    args.extend_from_slice(extra);
    let out = parley_cli(dir, &args).await;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}

/// A Redis connection to `url` that waits for slow replies (the default gives up after
/// 500 ms, too soon for a loaded machine).
pub async fn redis_connection(url: &str) -> redis::aio::MultiplexedConnection {
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// A NATS client for `url` (or several, comma-separated); `user:password@` in the (single)
/// URL is applied.
pub async fn connect_as(url: &str) -> async_nats::Client {
    connect_watching(url).await.0
}

/// A NATS client for `url` and a channel receiving every error the server reports to it
/// (e.g. `Permissions Violation for Publish to "parley.tasks.agent"`).
pub async fn connect_watching(
    url: &str,
) -> (
    async_nats::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (user, pass, bare) = match url.split_once("://").and_then(|(s, r)| {
        let (auth, host) = r.rsplit_once('@')?;
        let (u, p) = auth.split_once(':')?;
        Some((u.to_string(), p.to_string(), format!("{s}://{host}")))
    }) {
        Some(t) => (Some(t.0), Some(t.1), t.2),
        None => (None, None, url.to_string()),
    };
    let mut options = async_nats::ConnectOptions::new().event_callback(move |e| {
        let tx = tx.clone();
        async move {
            if let async_nats::Event::ServerError(err) = e {
                let _ = tx.send(err.to_string());
            }
        }
    });
    if let (Some(u), Some(p)) = (user, pass) {
        // Every user may only receive on its own inbox prefix.
        options = options
            .custom_inbox_prefix(inbox_of(&u))
            .user_and_password(u, p);
    }
    // Several servers (one cluster) are separated by commas.
    let servers: Vec<String> = bare.split(',').map(str::to_string).collect();
    (options.connect(servers.as_slice()).await.unwrap(), rx)
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish()
}

/// The debate reached an end state.
pub fn is_done(s: &Value) -> bool {
    matches!(
        s["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

/// The debate's events carry sequence numbers 1..=n, each once, ending with completion.
/// The status turns `completed` when the checkpoint is written, a moment before the
/// coordinator publishes its last events: they are read until the completion arrives (or
/// 15 s pass).
pub async fn assert_events_contiguous(c: &Cluster, id: &str) {
    use futures::StreamExt;
    let js = async_nats::jetstream::new(c.client.clone());
    let stream = js.get_stream("PARLEY_EVENTS").await.unwrap();
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            filter_subject: format!("parley.debates.{id}.events"),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut seqs = Vec::new();
    let mut last_type = String::new();
    let until = Instant::now() + Duration::from_secs(15);
    while last_type != "debateCompleted" && Instant::now() < until {
        let mut msgs = consumer
            .fetch()
            .max_messages(10_000)
            .expires(Duration::from_secs(2))
            .messages()
            .await
            .unwrap();
        while let Some(Ok(m)) = msgs.next().await {
            for ev in parley_protocol::decode_event_message::<Value>(&m.payload).unwrap() {
                seqs.push(ev["seq"].as_u64().unwrap());
                last_type = ev["type"].as_str().unwrap().to_string();
            }
        }
    }
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "events missing or repeated");
    assert_eq!(last_type, "debateCompleted");
}

/// 3 agents (architect, security, kiss; models model-arch/-sec/-kiss), 2 fixed rounds.
pub fn spec(problem: &str) -> Value {
    json!({
        "problem": problem,
        "agents": [
            {"id": "agent-architect", "name": "Architect", "role": "architect", "model": "model-arch", "temperature": 0.1},
            {"id": "agent-security", "name": "Security", "role": "security", "model": "model-sec", "temperature": 0.2},
            {"id": "agent-kiss", "name": "Kiss", "role": "kiss", "model": "model-kiss", "temperature": 0.3}
        ],
        "judge": {"id": "judge-main", "name": "Judge", "role": "generalist", "model": "model-judge", "temperature": 0.4},
        "debate": {"rounds": 2, "terminationCondition": {"type": "fixed"}}
    })
}

/// The smallest typed spec, for store tests: agents `a` and `b`, judge `j` (all architects
/// on model `m`), problem `p`, default debate settings.
pub fn two_agent_spec() -> DebateSpec {
    let agent = |id: &str| -> AgentConfig {
        serde_json::from_value(json!({
            "id": id, "name": id, "role": "architect", "model": "m", "temperature": 0.5
        }))
        .unwrap()
    };
    DebateSpec {
        schema_version: SCHEMA_VERSION,
        problem: "p".into(),
        context: None,
        context_files: None,
        agents: vec![agent("a"), agent("b")],
        judge: agent("j"),
        debate: Default::default(),
        prompt_sources: Default::default(),
        idempotency_key: None,
        owner: None,
        webhooks: Vec::new(),
    }
}

/// Attempt `attempt` of `task` of debate `debate_id` by worker `w`: content `ok {attempt}`
/// when `ok`, else a server error `boom`.
pub fn task_result(debate_id: &str, task: &str, attempt: u32, ok: bool) -> TaskResult {
    TaskResult {
        schema_version: SCHEMA_VERSION,
        task_id: task.into(),
        debate_id: debate_id.into(),
        attempt,
        worker: "w".into(),
        outcome: if ok {
            TaskOutcome::Ok(TaskOutput {
                content: format!("ok {attempt}"),
                metadata: ContributionMetadata::default(),
                ..Default::default()
            })
        } else {
            TaskOutcome::Error(TaskError {
                kind: ErrorKind::Server,
                message: "boom".into(),
                provider: None,
                retry_after_ms: None,
            })
        },
    }
}

/// The JSON file at `path` (a saved state, a config, a report).
pub fn read_json(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The answers to a state's clarification questions, in order (every question answered).
pub fn clarification_answers(state: &Value) -> Vec<&str> {
    state["clarifications"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["items"].as_array().unwrap())
        .map(|i| i["answer"].as_str().unwrap())
        .collect()
}

/// [`spec`] as the CLI's config file (no problem); with `base_url` the agents call it.
pub fn spec_config(base_url: Option<&str>) -> Value {
    let mut cfg = spec("");
    let obj = cfg.as_object_mut().unwrap();
    obj.remove("problem");
    if let Some(url) = base_url {
        obj.insert("baseUrl".into(), json!(url));
    }
    cfg
}

/// Writes `value` to `path` as pretty JSON.
pub fn write_json(path: impl AsRef<Path>, value: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
}

/// Contributions of one kind in a round.
pub fn count(round: &Value, kind: &str) -> usize {
    round["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == kind)
        .count()
}

/// All contributions of a state.
pub fn contributions(state: &Value) -> usize {
    state["rounds"].as_array().map_or(0, |rs| {
        rs.iter()
            .map(|r| r["contributions"].as_array().map_or(0, Vec::len))
            .sum()
    })
}

/// Every round of a [`spec`] debate has 3 proposals, 6 critiques and 3 refinements, each
/// (type, agent, target) exactly once, and the judge's solution is there.
pub fn assert_complete(state: &Value) {
    assert_eq!(state["status"], "completed", "{state}");
    let rounds = state["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2);
    for r in rounds {
        assert_eq!(
            (
                count(r, "proposal"),
                count(r, "critique"),
                count(r, "refinement")
            ),
            (3, 6, 3),
            "{r}"
        );
        let keys: BTreeSet<String> = r["contributions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| format!("{}/{}/{}", c["type"], c["agentId"], c["targetAgentId"]))
            .collect();
        assert_eq!(keys.len(), 12, "a contribution is duplicated: {r}");
    }
    let sol = &state["finalSolution"];
    assert!(
        sol["description"]
            .as_str()
            .unwrap()
            .contains("Fake synthesized solution"),
        "{sol}"
    );
    assert_eq!(sol["synthesizedBy"], "judge-main");
}

/// Successful LLM calls per (model, prompt): a completed call must never be repeated.
pub fn assert_no_completed_call_repeated(fake: &FakeLlm) {
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in fake.requests().iter().filter(|r| r.status == 200) {
        *seen.entry((r.model.clone(), r.prompt_text())).or_default() += 1;
    }
    let repeated: Vec<_> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|((m, p), n)| format!("{m} x{n}: {}", &p[..p.len().min(120)]))
        .collect();
    assert!(
        repeated.is_empty(),
        "completed calls repeated: {repeated:#?}"
    );
}

/// The fake LLM's successful calls per problem: for each of `problems`, how many requests
/// answered 200 carried that problem in their prompt (`Problem:\n<problem>\n`, as every
/// agent and judge prompt does). Panics when a successful request carries none or several
/// of them (the problems must not contain one another).
pub fn successful_calls_by_problem(fake: &FakeLlm, problems: &[String]) -> Vec<usize> {
    let needles: Vec<String> = problems
        .iter()
        .map(|p| format!("Problem:\n{p}\n"))
        .collect();
    let mut counts = vec![0; problems.len()];
    for r in fake.requests().iter().filter(|r| r.status == 200) {
        let text = r.prompt_text();
        let hits: Vec<usize> = (0..needles.len())
            .filter(|&i| text.contains(&needles[i]))
            .collect();
        match hits.as_slice() {
            [i] => counts[*i] += 1,
            _ => panic!(
                "a request matches {} problems: {}",
                hits.len(),
                &text[..text.len().min(300)]
            ),
        }
    }
    counts
}

/// The events of the `PARLEY_EVENTS` stream on subjects matching `filter` (one debate's
/// `parley.debates.<id>.events`, or `parley.debates.*.events` for all), in stream order.
/// Reads what the stream holds now; returns an empty list when nothing matches.
pub async fn events(client: &async_nats::Client, filter: &str) -> anyhow::Result<Vec<DebateEvent>> {
    use anyhow::Context as _;
    let mut out = Vec::new();
    for msg in event_messages(client, filter).await? {
        let events: Vec<DebateEvent> = parley_protocol::decode_event_message(&msg.payload)
            .with_context(|| format!("undecodable events on {}", msg.subject))?;
        out.extend(events);
    }
    Ok(out)
}

/// The messages of the `PARLEY_EVENTS` stream on subjects matching `filter`, in stream
/// order, as [`events`] reads them (each a transition's events).
pub async fn event_messages(
    client: &async_nats::Client,
    filter: &str,
) -> anyhow::Result<Vec<async_nats::jetstream::Message>> {
    use anyhow::Context as _;
    use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
    let js = async_nats::jetstream::new(client.clone());
    let stream = js
        .get_stream(parley_protocol::subjects::EVENTS_STREAM)
        .await
        .context("while opening the events stream")?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: filter.to_string(),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .context("while creating an ordered consumer on the events stream")?;
    let mut messages = consumer
        .messages()
        .await
        .context("while reading the events stream")?;
    let mut out = Vec::new();
    // The first message may take a moment; an empty filter yields none at all.
    while let Ok(next) = tokio::time::timeout(Duration::from_secs(3), messages.next()).await {
        let Some(msg) = next else { break };
        let msg = msg.context("while reading the events stream")?;
        let pending = msg.info().map(|i| i.pending).unwrap_or(0);
        out.push(msg);
        if pending == 0 {
            break;
        }
    }
    Ok(out)
}

/// Longest path through a finished debate's task graph, weighting each task by its
/// observed LLM latency (the `latencyMs` of every contribution and of the synthesis): what
/// the makespan would be with no orchestration overhead at all. With a fixed latency L and
/// the [`spec`] debate it is 6 × L: proposal → critique → refinement → (carried over)
/// critique → refinement → synthesis.
///
/// Edges: a critique needs the target's proposal and (round ≥ 2) the critic's own previous
/// refinement (its history); a refinement needs the agent's proposal and every critique of
/// it; a carried-over proposal (round ≥ 2) finishes with the previous refinement.
/// Used by the embedded `makespan` bench (`crates/cli`) and the cluster bench.
pub fn critical_path_ms(state: &DebateState) -> u64 {
    type Key = (u32, ContributionType, String, Option<String>);
    let mut finish: HashMap<Key, u64> = HashMap::new();
    let Some(first) = state.rounds.first() else {
        return 0;
    };
    let agents: Vec<String> = first
        .contributions
        .iter()
        .filter(|c| c.kind == ContributionType::Proposal)
        .map(|c| c.agent_id.clone())
        .collect();
    let mut last = 0;
    for rd in &state.rounds {
        let r = rd.round_number;
        let get = |f: &HashMap<Key, u64>, k: ContributionType, a: &str, t: Option<&str>| {
            f.get(&(r, k, a.to_string(), t.map(String::from)))
                .copied()
                .unwrap_or(0)
        };
        let prev_refinement = |f: &HashMap<Key, u64>, a: &str| {
            if r == 1 {
                0
            } else {
                f.get(&(r - 1, ContributionType::Refinement, a.to_string(), None))
                    .copied()
                    .unwrap_or(0)
            }
        };
        for a in &agents {
            let latency = rd
                .find(ContributionType::Proposal, a, None)
                .map_or(0, |p| p.metadata.latency_ms);
            let start = prev_refinement(&finish, a);
            finish.insert(
                (r, ContributionType::Proposal, a.clone(), None),
                start + latency,
            );
        }
        for c in rd
            .contributions
            .iter()
            .filter(|c| c.kind == ContributionType::Critique)
        {
            let Some(t) = c.target_agent_id.clone() else {
                continue;
            };
            let start = get(&finish, ContributionType::Proposal, &t, None)
                .max(prev_refinement(&finish, &c.agent_id));
            finish.insert(
                (r, ContributionType::Critique, c.agent_id.clone(), Some(t)),
                start + c.metadata.latency_ms,
            );
        }
        for a in &agents {
            let own = get(&finish, ContributionType::Proposal, a, None);
            let critiques = agents
                .iter()
                .filter(|k| *k != a)
                .map(|k| get(&finish, ContributionType::Critique, k, Some(a)))
                .max()
                .unwrap_or(0);
            let latency = rd
                .find(ContributionType::Refinement, a, None)
                .map_or(0, |c| c.metadata.latency_ms);
            let f = own.max(critiques) + latency;
            finish.insert((r, ContributionType::Refinement, a.clone(), None), f);
            last = last.max(f);
        }
    }
    last + state
        .synthesis_metadata
        .as_ref()
        .map_or(0, |m| m.latency_ms)
}

/// Lines of a service's JSON log whose message is `message`, e.g. `"debate adopted"`.
pub fn log_lines_with_message(log: &str, message: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["fields"]["message"] == message || v["message"] == message || v["msg"] == message
        })
        .collect()
}

/// A reply in dialectic's evaluation rubric: every metric scored `s`, overall `overall`.
pub fn rubric(s: u32, overall: u32) -> Value {
    let m = |n: u32| json!({"score": n, "reasoning": format!("because {n}")});
    json!({
        "evaluation": {
            "functional_completeness": m(s),
            "non_functional": {
                "performance_scalability": m(s),
                "security": m(s),
                "maintainability_evolvability": m(s),
                "regulatory_compliance": m(s),
                "testability": m(s),
                "requirements_fulfillment": m(s)
            }
        },
        "overall_summary": {"strengths": "s", "weaknesses": "w", "overall_score": overall}
    })
}

/// The page's browser tests: `parley serve` (the `parley` binary at `parley`) on a free
/// loopback port in `dir`, with no provider key or server token in its environment and no
/// local model, and the token it generated: (the server, its address, the token).
pub fn serve_page(parley: &str, dir: &Path) -> (ChildProcess, String, String) {
    let port = parley_testkit::free_port();
    let mut cmd = Command::new(parley);
    cmd.current_dir(dir)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("PARLEY_SERVE_TOKEN")
        .env("PARLEY_MODEL_DIR", dir.join("no-models"));
    let serve = ChildProcess::spawn(cmd, "serve").unwrap();
    let line = serve
        .wait_for_log_line("Parley is serving", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("serve did not start: {}", serve.log()));
    let token = line
        .split_once("#token=")
        .and_then(|(_, r)| r.split_whitespace().next())
        .unwrap_or_default()
        .to_string();
    assert!(!token.is_empty(), "no generated token in {line:?}");
    (serve, format!("http://127.0.0.1:{port}"), token)
}

/// The page at `base` signed in with `token`: types `problem` into the form, starts the
/// debate and returns its id (from the page's address).
pub async fn start_from_page(
    b: &parley_testkit::Browser,
    base: &str,
    token: &str,
    problem: &str,
) -> String {
    b.goto(&format!("{base}/#token={token}")).await.unwrap();
    let field = b
        .wait_for("#problem", Duration::from_secs(15))
        .await
        .unwrap();
    b.type_text(&field, problem).await.unwrap();
    let start = b.wait_for("#start", Duration::from_secs(5)).await.unwrap();
    b.click(&start).await.unwrap();
    let id = b
        .wait_until(
            "return new URLSearchParams(location.search).get('d');",
            Duration::from_secs(15),
        )
        .await
        .unwrap();
    id.as_str().unwrap().to_string()
}
