//! Shared pieces of the end-to-end tests and the cluster benchmark: a [`Cluster`] of real
//! nats-server (JetStream) and redis-server processes on ephemeral loopback ports, the fake
//! LLM, and the three service binaries started as separate processes; plus the debate
//! spec and the assertions the tests share.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub use parley_testkit::{
    workspace_bin, ChildProcess, FakeLlm, Fault, Latency, Match, NatsServer, RateLimit, RedisServer,
};
use serde_json::{json, Value};

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
}

impl Cluster {
    pub async fn start() -> Cluster {
        Self::start_with_config(json!({})).await
    }

    /// A cluster whose worker config also holds `extra`'s fields (e.g. `providers`).
    pub async fn start_with_config(extra: Value) -> Cluster {
        let nats = NatsServer::start().unwrap();
        let redis = RedisServer::start().unwrap();
        let fake = FakeLlm::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("debate-config.json");
        let mut file = json!({"baseUrl": fake.base_url()});
        if let (Some(into), Some(from)) = (file.as_object_mut(), extra.as_object()) {
            into.extend(from.clone());
        }
        std::fs::write(&config, serde_json::to_vec(&file).unwrap()).unwrap();
        let client = async_nats::connect(nats.url()).await.unwrap();
        Cluster {
            nats,
            redis,
            fake,
            dir,
            config,
            client,
        }
    }

    pub fn coordinator(&self) -> ChildProcess {
        self.coordinator_with(&[])
    }

    /// A coordinator with extra environment variables.
    pub fn coordinator_with(&self, env: &[(&str, String)]) -> ChildProcess {
        let mut cmd = Command::new(workspace_bin("parley-coordinator"));
        cmd.args([
            "--nats-url",
            &self.nats.url(),
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
            ("--nats-url".into(), self.nats.url()),
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
        let msg = tokio::time::timeout(
            Duration::from_secs(15),
            self.client.request(subject, body.into()),
        )
        .await
        .expect("request timed out")
        .expect("request failed");
        serde_json::from_slice(&msg.payload).expect("reply is JSON")
    }

    pub async fn submit(&self, spec: &Value) -> String {
        let r = self
            .request("parley.debates.submit", serde_json::to_vec(spec).unwrap())
            .await;
        r["debateId"]
            .as_str()
            .unwrap_or_else(|| panic!("no debateId in {r}"))
            .to_string()
    }

    pub async fn status(&self, id: &str) -> Value {
        self.request(
            "parley.debates.status",
            serde_json::to_vec(&json!({"debateId": id})).unwrap(),
        )
        .await
    }

    /// Polls the status until `pred` holds; panics with the last state after `timeout`.
    pub async fn wait_status(
        &self,
        id: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            let s = self.status(id).await;
            if pred(&s) {
                return s;
            }
            if start.elapsed() > timeout {
                panic!(
                    "timed out waiting; last status: {}",
                    serde_json::to_string_pretty(&s).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the debate is completed, failed or cancelled.
    pub async fn wait_done(&self, id: &str, timeout: Duration) -> Value {
        self.wait_status(id, timeout, is_done).await
    }
}

/// The debate reached an end state.
pub fn is_done(s: &Value) -> bool {
    matches!(
        s["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
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
