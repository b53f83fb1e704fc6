//! The Helm chart against the real services: the KEDA trigger in the rendered ScaledObjects
//! names the account, stream and consumers the services create, and the lag KEDA computes
//! from `/jsz` (`num_pending + num_ack_pending` of the kind's consumer) follows a burst of
//! tasks: queued, in flight, drained.
//!
//! The chart is rendered by `scripts/check-chart.sh render-json` (helm 3.17.1 from its
//! pip-fetched, sha256-verified cache). Each service runs as its pod would: the environment
//! of its rendered Deployment (Secret references resolved against the rendered Secret), the
//! rendered ConfigMap's files in place of `/etc/parley` (only the metrics address is
//! overridden, so parallel tests do not collide), against a `nats-server -js` with a
//! monitoring port whose endpoint is the one in the rendered trigger. Two NATS set-ups: no
//! accounts (`nats.auth=none`, KEDA `account` "$G") and the shipped `deploy/nats/parley.conf`
//! (the chart's default: account `PARLEY`, each component its own user, whose password the
//! chart puts in that component's Secret key and URL — `$(NATS_PASSWORD)` expanded as
//! Kubernetes does; the test's client is the config's `client` user). In the `PARLEY`
//! set-up the chart's web page (`serve.enabled`) runs too, as its pod would (its rendered
//! args and environment; only the listen address moved to a loopback port): it connects as
//! the config's `serve` user with its own password, and with the Secret's token lists the
//! burst's debates. `/jsz` is read exactly as KEDA's nats-jetstream scaler reads it:
//! `http://<natsServerMonitoringEndpoint>/jsz?acc=<account>&config=true&consumers=true`,
//! matching the account by id or name, then the stream, then the consumer.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use parley_testkit::{free_port, ChildProcess, FakeLlm, Latency, RedisServer};
use parley_tests::{assert_complete, connect_as, is_done, roles_config, spec, workspace_bin};
use serde_json::{json, Value};

/// Debates submitted at once; each queues one proposal task per agent (3).
const DEBATES: usize = 4;
const AGENTS: usize = 3;
const AGENT_CONCURRENCY: u64 = 2;
const TIMEOUT: Duration = Duration::from_secs(60);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `nats-server -js` with its monitoring port (`-m`), both on ephemeral loopback ports.
struct MonitoredNats {
    _process: ChildProcess,
    port: u16,
    monitor_port: u16,
    _dir: tempfile::TempDir,
}

impl MonitoredNats {
    /// With `shipped`: `deploy/nats/parley.conf` (its users' passwords from these
    /// environment variables); else no accounts.
    async fn start(shipped: Option<&[(&str, &str)]>) -> anyhow::Result<MonitoredNats> {
        let http = reqwest::Client::new();
        let mut last = String::new();
        // Another process may take a free port before the server binds it: try again.
        for _ in 0..3 {
            let dir = tempfile::tempdir()?;
            let (port, monitor_port) = (free_port(), free_port());
            let listen =
                format!("listen: \"127.0.0.1:{port}\"\nhttp: \"127.0.0.1:{monitor_port}\"\n");
            let store = format!("store_dir: {:?}", dir.path().join("js"));
            let config = match shipped {
                None => format!("{listen}jetstream {{ {store} }}\n"),
                Some(_) => std::fs::read_to_string(roles_config())?
                    .replacen("port: 4222\n", &listen, 1)
                    .replacen("jetstream {\n", &format!("jetstream {{\n  {store}\n"), 1),
            };
            let config_path = dir.path().join("nats.conf");
            std::fs::write(&config_path, config)?;
            let mut cmd = Command::new("nats-server");
            cmd.arg("-c").arg(&config_path);
            for (k, v) in shipped.unwrap_or_default() {
                cmd.env(k, v);
            }
            let mut process = ChildProcess::spawn(cmd, "nats-server")
                .context("while starting nats-server (apt-get install nats-server)")?;
            let healthz = format!("http://127.0.0.1:{monitor_port}/healthz");
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline && process.is_running() {
                if let Ok(r) = http.get(&healthz).send().await {
                    if r.status().is_success() {
                        return Ok(MonitoredNats {
                            _process: process,
                            port,
                            monitor_port,
                            _dir: dir,
                        });
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            last = process.log();
        }
        bail!("nats-server did not become healthy:\n{last}")
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

/// The chart rendered with `--set` flags, as a list of resources.
fn render(sets: &[(&str, String)]) -> anyhow::Result<Vec<Value>> {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/check-chart.sh"))
        .arg("render-json");
    for (k, v) in sets {
        cmd.arg("--set").arg(format!("{k}={v}"));
    }
    let out = cmd
        .output()
        .context("while running scripts/check-chart.sh")?;
    if !out.status.success() {
        bail!(
            "scripts/check-chart.sh render-json failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let docs: Vec<Value> =
        serde_json::from_slice(&out.stdout).context("render-json printed no JSON array")?;
    Ok(docs)
}

fn component(doc: &Value) -> &str {
    doc["metadata"]["labels"]["app.kubernetes.io/component"]
        .as_str()
        .unwrap_or_default()
}

/// The trigger metadata of each rendered ScaledObject, by component.
fn triggers(docs: &[Value]) -> BTreeMap<String, BTreeMap<String, String>> {
    docs.iter()
        .filter(|d| d["kind"] == "ScaledObject")
        .map(|d| {
            let trigger = &d["spec"]["triggers"][0];
            assert_eq!(trigger["type"], "nats-jetstream", "{d}");
            let md = trigger["metadata"]
                .as_object()
                .expect("trigger metadata is a map")
                .iter()
                .map(|(k, v)| {
                    let s = v
                        .as_str()
                        .unwrap_or_else(|| panic!("trigger metadata {k} is not a string: {v}"));
                    (k.clone(), s.to_string())
                })
                .collect();
            (component(d).to_string(), md)
        })
        .collect()
}

/// One consumer as KEDA's nats-jetstream scaler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lag {
    pending: u64,
    ack_pending: u64,
    /// Messages the consumer has delivered so far (its `delivered.consumer_seq`).
    delivered: u64,
}

impl Lag {
    /// What KEDA scales on.
    fn total(&self) -> u64 {
        self.pending + self.ack_pending
    }
}

/// Reads `/jsz` the way KEDA does and finds the trigger's account, stream and consumer.
async fn jsz_lag(
    http: &reqwest::Client,
    trigger: &BTreeMap<String, String>,
) -> anyhow::Result<Lag> {
    let scheme = if trigger.get("useHttps").map(String::as_str) == Some("true") {
        "https"
    } else {
        "http"
    };
    let account = &trigger["account"];
    let body: Value = http
        .get(format!(
            "{scheme}://{}/jsz",
            trigger["natsServerMonitoringEndpoint"]
        ))
        .query(&[
            ("acc", account.as_str()),
            ("config", "true"),
            ("consumers", "true"),
        ])
        .send()
        .await
        .context("while reading /jsz")?
        .json()
        .await
        .context("/jsz is not JSON")?;
    let acc = body["account_details"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|a| a["id"] == account.as_str() || a["name"] == account.as_str())
        })
        .ok_or_else(|| anyhow!("account {account} not in /jsz: {body}"))?;
    let stream = acc["stream_detail"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == trigger["stream"].as_str()))
        .ok_or_else(|| {
            anyhow!(
                "stream {} not in account {account}: {acc}",
                trigger["stream"]
            )
        })?;
    let consumer = stream["consumer_detail"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == trigger["consumer"].as_str()))
        .ok_or_else(|| anyhow!("consumer {} not in stream: {stream}", trigger["consumer"]))?;
    let n = |v: &Value| {
        v.as_u64()
            .ok_or_else(|| anyhow!("not a count: {v} in {consumer}"))
    };
    Ok(Lag {
        pending: n(&consumer["num_pending"])?,
        ack_pending: n(&consumer["num_ack_pending"])?,
        delivered: n(&consumer["delivered"]["consumer_seq"])?,
    })
}

/// Polls `/jsz` until `pred` holds for the trigger's consumer; the last reading otherwise.
async fn wait_lag(
    http: &reqwest::Client,
    trigger: &BTreeMap<String, String>,
    pred: impl Fn(&Lag) -> bool,
) -> Lag {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let lag = jsz_lag(http, trigger).await;
        match lag {
            Ok(l) if pred(&l) => return l,
            Ok(l) if Instant::now() > deadline => return l,
            Err(e) if Instant::now() > deadline => panic!("{e:#}"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Desired replicas of KEDA's HPA for an AverageValue target: ceil(lag / lagThreshold),
/// within min/max; 0 when not active (lag <= activationLagThreshold) and min is 0.
fn keda_replicas(lag: u64, trigger: &BTreeMap<String, String>, min: u64, max: u64) -> u64 {
    let threshold: u64 = trigger["lagThreshold"].parse().expect("lagThreshold");
    let activation: u64 = trigger["activationLagThreshold"]
        .parse()
        .expect("activationLagThreshold");
    if lag <= activation && min == 0 {
        return 0;
    }
    lag.div_ceil(threshold).clamp(min.max(1), max)
}

/// Standard base64 (the `data` of a rendered Secret).
fn base64_decode(s: &str) -> anyhow::Result<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in s.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET
            .iter()
            .position(|&a| a == c)
            .ok_or_else(|| anyhow!("not base64: {s:?}"))?;
        bits = (bits << 6) | v as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    Ok(String::from_utf8(out)?)
}

/// A worker kind's or the coordinator's pod, as rendered: the Deployment's container
/// environment with Secret references resolved against the rendered Secret (an absent
/// optional key stays unset, as in Kubernetes) and `/etc/parley/` (the ConfigMap's mount)
/// moved to `config_dir`.
fn pod_env(docs: &[Value], component_name: &str, config_dir: &Path) -> Vec<(String, String)> {
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && component(d) == component_name)
        .unwrap_or_else(|| panic!("no Deployment for {component_name}"));
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut env = Vec::new();
    for e in container["env"].as_array().expect("env") {
        let name = e["name"].as_str().unwrap().to_string();
        let value = if let Some(v) = e["value"].as_str() {
            v.to_string()
        } else {
            let r = &e["valueFrom"]["secretKeyRef"];
            let secret = docs
                .iter()
                .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == r["name"])
                .unwrap_or_else(|| panic!("{name}: Secret {} is not rendered", r["name"]));
            match secret["data"][r["key"].as_str().unwrap()].as_str() {
                Some(b64) => base64_decode(b64).unwrap(),
                None if r["optional"] == true => continue,
                None => panic!("{name}: key {} is not in the Secret", r["key"]),
            }
        };
        let value = match value.strip_prefix("/etc/parley/") {
            Some(file) => config_dir.join(file).display().to_string(),
            None => value,
        };
        // `$(NAME)` refers to an earlier variable of the container, as Kubernetes expands it.
        let value = env.iter().fold(value, |v, (k, x): &(String, String)| {
            v.replace(&format!("$({k})"), x)
        });
        env.push((name, value));
    }
    env
}

/// A component's container args as rendered, with `$(NAME)` expanded from its environment
/// (as Kubernetes does) and `/etc/parley/` moved to `config_dir`.
fn pod_args(
    docs: &[Value],
    component_name: &str,
    env: &[(String, String)],
    config_dir: &Path,
) -> Vec<String> {
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && component(d) == component_name)
        .unwrap_or_else(|| panic!("no Deployment for {component_name}"));
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap_or_else(|| panic!("{component_name}: no args"));
    args.iter()
        .map(|a| {
            let a = a.as_str().expect("args are strings");
            let a = match a.strip_prefix("/etc/parley/") {
                Some(file) => config_dir.join(file).display().to_string(),
                None => a.to_string(),
            };
            env.iter()
                .fold(a, |v, (k, x)| v.replace(&format!("$({k})"), x))
        })
        .collect()
}

/// A service process with its pod's environment (see [`pod_env`]).
fn service(bin: &str, env: &[(String, String)], ready_line: &str) -> (ChildProcess, u16) {
    let metrics = free_port();
    let mut cmd = Command::new(workspace_bin(bin));
    for (k, _) in std::env::vars() {
        if k.starts_with("PARLEY_") || k.starts_with("OTEL_") || k.ends_with("_API_KEY") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)))
        .env("PARLEY_METRICS_ADDR", format!("127.0.0.1:{metrics}"));
    let p = ChildProcess::spawn(cmd, bin).unwrap();
    assert!(
        p.wait_for_log_line(ready_line, TIMEOUT).is_some(),
        "{bin} did not start with the chart's settings:\n{}",
        p.log()
    );
    (p, metrics)
}

async fn request(client: &async_nats::Client, subject: &'static str, body: &Value) -> Value {
    let msg = tokio::time::timeout(
        Duration::from_secs(15),
        client.request(subject, serde_json::to_vec(body).unwrap().into()),
    )
    .await
    .unwrap_or_else(|_| panic!("request on {subject} timed out"))
    .unwrap_or_else(|e| panic!("request on {subject} failed: {e}"));
    serde_json::from_slice(&msg.payload).unwrap()
}

/// The NATS set-up of a run.
enum Account {
    /// No accounts: JetStream lives in `$G` (`nats.auth=none`, `keda.account=$G`).
    Global,
    /// `deploy/nats/parley.conf`, the chart's default: account `PARLEY`, one user per
    /// component with its password in the chart's Secret.
    Parley,
}

/// The passwords of the shipped config's users in the `Parley` set-up (environment
/// variable of the server, value of the chart, password).
const PASSWORDS: [(&str, &str, &str); 5] = [
    (
        "PARLEY_NATS_COORDINATOR_PASSWORD",
        "secrets.nats.coordinator",
        "helm-coordinator-pw",
    ),
    (
        "PARLEY_NATS_AGENT_WORKER_PASSWORD",
        "secrets.nats.agentWorker",
        "helm-agent-worker-pw",
    ),
    (
        "PARLEY_NATS_JUDGE_WORKER_PASSWORD",
        "secrets.nats.judgeWorker",
        "helm-judge-worker-pw",
    ),
    ("PARLEY_NATS_SERVE_PASSWORD", "serve", "helm-serve-pw"),
    ("PARLEY_NATS_CLIENT_PASSWORD", "client", "helm-client-pw"),
];

/// The web page's bearer token in the `Parley` set-up.
const SERVE_TOKEN: &str = "helm-serve-token-0123456789";

/// Runs the chart's services against a monitored NATS, queues a burst and checks `/jsz` as
/// KEDA reads it. With `drain`, also one worker holding tasks, then workers finishing every
/// debate.
async fn trigger_and_lag(account: Account, drain: bool) {
    let env: Vec<(&str, &str)> = PASSWORDS.iter().map(|(var, _, pw)| (*var, *pw)).collect();
    let nats = match account {
        Account::Global => MonitoredNats::start(None).await,
        Account::Parley => MonitoredNats::start(Some(&env)).await,
    }
    .unwrap();
    let redis = RedisServer::start().unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let http = reqwest::Client::new();
    let endpoint = format!("127.0.0.1:{}", nats.monitor_port);
    let (client_url, expected_account) = match account {
        Account::Global => (nats.url(), "$G"),
        Account::Parley => (
            format!("nats://client:helm-client-pw@127.0.0.1:{}", nats.port),
            "PARLEY",
        ),
    };

    // The chart with KEDA on, pointed at this NATS / Redis / fake LLM.
    let mut sets = vec![
        ("keda.enabled", "true".to_string()),
        ("keda.natsServerMonitoringEndpoint", endpoint.clone()),
        ("keda.minReplicaCount", "1".into()),
        ("keda.maxReplicaCount", "20".into()),
        ("nats.url", nats.url()),
        ("redis.url", redis.url()),
        ("debateConfig.baseUrl", fake.base_url()),
        ("agentWorker.concurrency", AGENT_CONCURRENCY.to_string()),
        ("judgeWorker.concurrency", "1".into()),
        ("agentWorker.ackWaitSecs", "3".into()),
        ("judgeWorker.ackWaitSecs", "3".into()),
        ("agentWorker.drainSecs", "2".into()),
        ("judgeWorker.drainSecs", "2".into()),
    ];
    match account {
        Account::Global => {
            sets.push(("keda.account", "$G".into()));
            sets.push(("nats.auth", "none".into()));
        }
        Account::Parley => {
            for (_, key, pw) in &PASSWORDS[..3] {
                sets.push((key, pw.to_string()));
            }
            // The web page, as its own NATS user.
            sets.push(("serve.enabled", "true".into()));
            sets.push(("secrets.nats.serve", PASSWORDS[3].2.into()));
            sets.push(("secrets.serveToken", SERVE_TOKEN.into()));
        }
    }
    let docs = render(&sets).unwrap();
    let triggers = triggers(&docs);
    assert_eq!(
        triggers.keys().collect::<Vec<_>>(),
        ["agent-worker", "judge-worker"],
        "one ScaledObject per worker kind"
    );
    let (agent_trigger, judge_trigger) = (&triggers["agent-worker"], &triggers["judge-worker"]);
    for t in [agent_trigger, judge_trigger] {
        assert_eq!(t["natsServerMonitoringEndpoint"], endpoint);
        assert_eq!(t["account"], expected_account);
        assert_eq!(t["stream"], "PARLEY_TASKS");
    }
    assert_eq!(agent_trigger["lagThreshold"], AGENT_CONCURRENCY.to_string());

    // The services run as their pods would.
    let dir = tempfile::tempdir().unwrap();
    let config_map = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    for (name, text) in config_map["data"].as_object().unwrap() {
        std::fs::write(dir.path().join(name), text.as_str().unwrap()).unwrap();
    }
    let env = |c: &str| pod_env(&docs, c, dir.path());
    if let Account::Parley = account {
        // Each component connects as its own user, with its own password.
        for (c, user, pw) in [
            ("coordinator", "coordinator", PASSWORDS[0].2),
            ("agent-worker", "agent-worker", PASSWORDS[1].2),
            ("judge-worker", "judge-worker", PASSWORDS[2].2),
        ] {
            let url = format!("nats://{user}:{pw}@127.0.0.1:{}", nats.port);
            let e = env(c);
            assert!(
                e.iter().any(|(k, v)| k == "PARLEY_NATS_URL" && v == &url),
                "{c} does not connect as {user}: {e:?}"
            );
        }
    }
    let (_coordinator, coordinator_metrics) = service(
        "parley-coordinator",
        &env("coordinator"),
        "coordinator ready",
    );
    let (mut agent, _) = service("parley-agent-worker", &env("agent-worker"), "worker ready");
    let (mut judge, _) = service("parley-judge-worker", &env("judge-worker"), "worker ready");
    // The readiness probe the chart gives every pod passes.
    let readyz = http
        .get(format!("http://127.0.0.1:{coordinator_metrics}/readyz"))
        .send()
        .await
        .unwrap();
    assert!(readyz.status().is_success(), "{readyz:?}");

    // 1. What the trigger names exists: account, stream, both durable consumers on their
    //    subjects, no lag.
    for t in [agent_trigger, judge_trigger] {
        let lag = wait_lag(&http, t, |l| l.total() == 0).await;
        assert_eq!(lag.total(), 0, "{t:?}");
    }
    let body: Value = http
        .get(format!("http://{endpoint}/jsz"))
        .query(&[
            ("acc", expected_account),
            ("config", "true"),
            ("consumers", "true"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let consumers: BTreeMap<String, Value> = body["account_details"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["name"] == expected_account)
        .flat_map(|a| a["stream_detail"].as_array().cloned().unwrap_or_default())
        .filter(|s| s["name"] == "PARLEY_TASKS")
        .flat_map(|s| s["consumer_detail"].as_array().cloned().unwrap_or_default())
        .map(|c| (c["name"].as_str().unwrap().to_string(), c))
        .collect();
    for (consumer, subject) in [
        ("agent-workers", "parley.tasks.agent"),
        ("judge-workers", "parley.tasks.judge"),
    ] {
        let c = &consumers[consumer];
        assert_eq!(c["config"]["durable_name"], consumer, "{c}");
        assert_eq!(c["config"]["filter_subject"], subject, "{c}");
    }

    // 2. A burst with no worker running: every proposal task is pending.
    for p in [&mut agent, &mut judge] {
        p.terminate();
        assert!(p.wait_exit(TIMEOUT).is_some(), "a worker did not drain");
    }
    let client = connect_as(&client_url).await;
    let mut ids = Vec::new();
    for i in 0..DEBATES {
        let r = request(
            &client,
            "parley.debates.submit",
            &spec(&format!("Design queue {i} of the Helm burst test")),
        )
        .await;
        ids.push(
            r["debateId"]
                .as_str()
                .unwrap_or_else(|| panic!("{r}"))
                .to_string(),
        );
    }
    let burst = (DEBATES * AGENTS) as u64;
    // (A message a just-stopped worker's expiring pull took would be ack-pending until
    // its ack wait passes, then pending again: wait for the settled state.)
    let queued = wait_lag(&http, agent_trigger, |l| {
        l.pending == burst && l.ack_pending == 0
    })
    .await;
    assert_eq!(
        queued,
        Lag {
            pending: burst,
            ack_pending: 0,
            delivered: queued.delivered
        },
        "agent-workers after the burst"
    );
    let judge_idle = jsz_lag(&http, judge_trigger).await.unwrap();
    assert_eq!(judge_idle.total(), 0, "no judge task before the proposals");
    let wanted = keda_replicas(queued.total(), agent_trigger, 1, 20);
    assert_eq!(wanted, burst.div_ceil(AGENT_CONCURRENCY));
    eprintln!(
        "[account {expected_account}] /jsz after a burst of {DEBATES} debates, no worker: agent-workers \
         num_pending={} num_ack_pending={} → lag {} → KEDA wants {wanted} agent-worker replicas \
         (lagThreshold {}); judge-workers lag {}",
        queued.pending,
        queued.ack_pending,
        queued.total(),
        agent_trigger["lagThreshold"],
        judge_idle.total()
    );
    if let Account::Parley = account {
        serve_lists_the_burst(&docs, dir.path(), nats.port, &ids).await;
    }
    if !drain {
        return;
    }

    // 3. One worker holding its `concurrency` tasks on a slow model: the lag stays the burst.
    fake.set_latency(Latency::Fixed(Duration::from_secs(3600)));
    let (mut slow, _) = service("parley-agent-worker", &env("agent-worker"), "worker ready");
    let busy = wait_lag(&http, agent_trigger, |l| l.ack_pending == AGENT_CONCURRENCY).await;
    assert_eq!(
        (busy.pending, busy.ack_pending),
        (burst - AGENT_CONCURRENCY, AGENT_CONCURRENCY),
        "agent-workers with one worker busy"
    );
    assert_eq!(busy.total(), burst);
    eprintln!(
        "[account {expected_account}] /jsz with one agent worker (concurrency {AGENT_CONCURRENCY}) busy: \
         num_pending={} num_ack_pending={} → lag {}",
        busy.pending,
        busy.ack_pending,
        busy.total()
    );
    slow.kill9();

    // 4. Workers with a fast model drain it: every debate completes, both lags return to 0.
    fake.set_latency(Latency::Zero);
    let started = Instant::now();
    let (_agent, _) = service("parley-agent-worker", &env("agent-worker"), "worker ready");
    let (_judge, _) = service("parley-judge-worker", &env("judge-worker"), "worker ready");
    for id in &ids {
        let deadline = Instant::now() + TIMEOUT;
        let state = loop {
            let s = request(&client, "parley.debates.status", &json!({"debateId": id})).await;
            if is_done(&s) || Instant::now() > deadline {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_complete(&state);
    }
    let agent_done = wait_lag(&http, agent_trigger, |l| l.total() == 0).await;
    let judge_done = wait_lag(&http, judge_trigger, |l| l.total() == 0).await;
    assert_eq!((agent_done.total(), judge_done.total()), (0, 0));
    assert!(
        judge_done.delivered >= DEBATES as u64,
        "every synthesis went through judge-workers: {judge_done:?}"
    );
    assert!(
        agent_done.delivered > burst,
        "critiques and refinements went through agent-workers: {agent_done:?}"
    );
    eprintln!(
        "[account {expected_account}] /jsz after the drain ({:.1} s): agent-workers lag 0 ({} deliveries), \
         judge-workers lag 0 ({} deliveries) → KEDA wants {} replica(s) of each (minReplicaCount 1)",
        started.elapsed().as_secs_f64(),
        agent_done.delivered,
        judge_done.delivered,
        keda_replicas(0, agent_trigger, 1, 20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_in_the_global_account_names_what_the_services_create_and_lag_follows_a_burst() {
    trigger_and_lag(Account::Global, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_in_the_parley_account_names_what_the_services_create_and_counts_a_burst() {
    trigger_and_lag(Account::Parley, false).await;
}

/// The chart's web page as its pod runs it: `parley serve` with the rendered args and
/// environment (only the listen address moved to a loopback port), connected as the
/// shipped config's `serve` user. /healthz needs no token; the API needs the Secret's token
/// and lists every debate of the burst (`parley.debates.list`, which only `serve` may ask).
async fn serve_lists_the_burst(docs: &[Value], config_dir: &Path, nats_port: u16, ids: &[String]) {
    let env = pod_env(docs, "serve", config_dir);
    let expected_url = format!("nats://serve:{}@127.0.0.1:{nats_port}", PASSWORDS[3].2);
    assert!(
        env.iter()
            .any(|(k, v)| k == "PARLEY_SERVE_NATS_URL" && v == &expected_url),
        "serve does not connect as the serve user: {env:?}"
    );
    assert!(
        env.iter()
            .any(|(k, v)| k == "PARLEY_SERVE_TOKEN" && v == SERVE_TOKEN),
        "serve's token is not the Secret's: {env:?}"
    );
    let mut args = pod_args(docs, "serve", &env, config_dir);
    assert!(
        !args.iter().any(|a| a.contains(PASSWORDS[3].2)),
        "serve's NATS password is on its command line: {args:?}"
    );
    let listen = args
        .iter()
        .position(|a| a == "--listen")
        .expect("serve has --listen")
        + 1;
    assert_eq!(args[listen], "0.0.0.0:8080", "the pod listens on its port");
    let port = free_port();
    args[listen] = format!("127.0.0.1:{port}");
    let mut cmd = Command::new(workspace_bin("parley"));
    for (k, _) in std::env::vars() {
        if k.starts_with("PARLEY_") || k.starts_with("OTEL_") || k.ends_with("_API_KEY") {
            cmd.env_remove(k);
        }
    }
    cmd.args(&args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(config_dir);
    let serve = ChildProcess::spawn(cmd, "parley serve").unwrap();
    assert!(
        serve
            .wait_for_log_line("Parley is serving", TIMEOUT)
            .is_some(),
        "parley serve did not start with the chart's settings:\n{}",
        serve.log()
    );
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200, "the probes' /healthz");
    let anonymous = http.get(format!("{base}/v1/debates")).send().await.unwrap();
    assert_eq!(
        anonymous.status().as_u16(),
        401,
        "the API without the token"
    );
    let list = http
        .get(format!("{base}/v1/debates"))
        .bearer_auth(SERVE_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status().as_u16(), 200, "{}", serve.log());
    let list: Value = list.json().await.unwrap();
    for id in ids {
        assert!(
            list.to_string().contains(id.as_str()),
            "{id} not listed: {list}"
        );
    }
    eprintln!(
        "[account PARLEY] the chart's serve pod (NATS user serve) lists the {} debates of the burst",
        ids.len()
    );
}
