//! The HA layout of a soak on one machine: three clustered `nats-server`s (R3 streams),
//! a Redis master with a replica watched by three sentinels, the fake LLM, and the Parley
//! services (two coordinators, two agent workers, one judge worker), each in a network
//! namespace of its own ([`super::net`]) so it can be partitioned, and restartable after a
//! kill. The servers listen on the network's host address.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;

use super::net::Network;
use crate::{connect_as, wait_for_jetstream, workspace_bin, write_json, ChildProcess, FakeLlm};
use parley_testkit::{NatsCluster, RedisSentinel, RedisServer};

/// The sentinels' name of the Redis master.
pub const MASTER: &str = "parley-soak";
/// The coordinators' lease time-to-live.
pub const LEASE_TTL: Duration = Duration::from_millis(2000);
/// The workers' JetStream ack wait.
pub const ACK_WAIT: Duration = Duration::from_secs(3);
/// The coordinators' task deadline margin (see `Layout::start`), unless
/// `PARLEY_SOAK_TASK_DEADLINE_MARGIN_SECS` sets another (e.g. 300, the coordinators' default,
/// to see whether a run needs the short one).
pub const TASK_DEADLINE_MARGIN: Duration = Duration::from_secs(15);

/// [`TASK_DEADLINE_MARGIN`], or the seconds `PARLEY_SOAK_TASK_DEADLINE_MARGIN_SECS` names.
pub fn task_deadline_margin() -> Duration {
    std::env::var("PARLEY_SOAK_TASK_DEADLINE_MARGIN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(TASK_DEADLINE_MARGIN, Duration::from_secs)
}
/// How long a sentinel waits for a silent master before it calls it down.
pub const DOWN_AFTER: Duration = Duration::from_millis(1500);

/// A Parley service process that can be killed and started again with the same command,
/// in the same network namespace. The logs of earlier runs are kept until the end.
pub struct Service {
    /// `coordinator-1`, `agent-worker-2`, ...
    pub name: String,
    /// Its network namespace.
    pub ns: String,
    /// The binary and its flags.
    bin: PathBuf,
    args: Vec<String>,
    /// The line its log prints once it serves.
    ready: &'static str,
    /// The running process, if any.
    pub child: Option<ChildProcess>,
    /// Earlier runs (kept for their logs).
    pub past: Vec<ChildProcess>,
    /// How many times it was started.
    pub starts: usize,
}

impl Service {
    /// Spawns the service and waits (up to `timeout`) for its ready line; the process is
    /// kept either way (a slow start during an outage is still a start).
    pub fn start(&mut self, timeout: Duration) -> anyhow::Result<()> {
        if let Some(old) = self.child.take() {
            self.past.push(old);
        }
        let mut cmd = Network::command_in(&self.ns, &self.bin);
        cmd.args(&self.args)
            .env("PARLEY_LOG", "info")
            .env("PARLEY_METRICS_ADDR", "off")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENROUTER_API_KEY");
        self.starts += 1;
        let p = ChildProcess::spawn(cmd, &format!("{}-{}", self.name, self.starts))?;
        let ready = p.wait_for_log_line(self.ready, timeout).is_some();
        self.child = Some(p);
        anyhow::ensure!(
            ready,
            "{} did not log {:?} within {timeout:?}",
            self.name,
            self.ready
        );
        Ok(())
    }

    /// SIGKILL; the process is kept for its log.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.child.take() {
            p.kill9();
            self.past.push(p);
        }
    }

    /// The running process's id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(ChildProcess::pid)
    }

    /// The exit status when the process ended by itself (it is then moved to `past`).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let p = self.child.as_mut()?;
        if p.is_running() {
            return None;
        }
        let status = p.wait_exit(Duration::ZERO);
        if let Some(p) = self.child.take() {
            self.past.push(p);
        }
        status
    }

    /// The last `lines` lines of the logs of every run.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut all = String::new();
        for p in self.past.iter().chain(self.child.iter()) {
            all.push_str(&p.log());
        }
        let v: Vec<&str> = all.lines().collect();
        v[v.len().saturating_sub(lines)..].join("\n")
    }
}

/// Redis: the two data servers (either may be the master now) and the sentinels.
pub struct Redis {
    pub servers: Vec<RedisServer>,
    pub sentinels: Vec<RedisSentinel>,
}

impl Redis {
    /// The port of the master the sentinels name now (asked of any sentinel that answers).
    pub async fn master_port(&self) -> Option<u16> {
        for s in &self.sentinels {
            if let Ok(m) = sentinel_master(&s.addr(), MASTER).await {
                if let Some(p) = m.get("port").and_then(|p| p.parse().ok()) {
                    return Some(p);
                }
            }
        }
        None
    }

    /// The index in `servers` of the server on `port`.
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.servers.iter().position(|s| s.port() == port)
    }

    /// The `redis+sentinel://` URL of the services.
    pub fn url(&self) -> String {
        format!(
            "redis+sentinel://{}/{MASTER}",
            self.sentinels
                .iter()
                .map(RedisSentinel::addr)
                .collect::<Vec<_>>()
                .join(",")
        )
    }

    /// Every port a Redis client may talk to (sentinels and servers).
    pub fn ports(&self) -> Vec<u16> {
        self.servers
            .iter()
            .map(RedisServer::port)
            .chain(self.sentinels.iter().map(RedisSentinel::port))
            .collect()
    }
}

/// Everything a soak runs against; shared by the driver, the nemesis and the checks.
pub struct Layout {
    /// Dropped last (fields drop in order): the namespaces outlive the processes in them.
    pub nats: Mutex<NatsCluster>,
    pub redis: tokio::sync::Mutex<Redis>,
    pub fake: FakeLlm,
    pub services: Vec<Mutex<Service>>,
    /// The client ports of the NATS nodes and every Redis port (servers and sentinels):
    /// what partitions cut.
    pub nats_ports: Vec<u16>,
    pub redis_ports: Vec<u16>,
    /// The test's own NATS client (to every node).
    pub client: async_nats::Client,
    /// Holds the workers' config.
    _dir: tempfile::TempDir,
    pub network: Network,
}

/// The fields of `SENTINEL MASTER <name>` asked of the sentinel at `addr`, as a map.
pub async fn sentinel_master(addr: &str, name: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let client = redis::Client::open(format!("redis://{addr}"))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let flat: Vec<String> = redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(name)
        .query_async(&mut conn)
        .await?;
    Ok(flat
        .chunks(2)
        .filter(|kv| kv.len() == 2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect())
}

/// `INFO replication` of the Redis server at `url` (empty when it does not answer).
pub async fn replication_info(url: &str) -> String {
    let Ok(client) = redis::Client::open(url) else {
        return String::new();
    };
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    let Ok(mut conn) = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
    else {
        return String::new();
    };
    redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .unwrap_or_default()
}

/// Polls `check` every 100 ms until it holds (→ true) or `timeout` passes (→ false).
pub async fn poll<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Layout {
    /// Starts the servers, waits until JetStream has a meta leader and the sentinels know
    /// the replica and each other, then starts the services (each in its namespace).
    pub async fn start() -> anyhow::Result<Arc<Layout>> {
        let network = Network::create()
            .context("while creating network namespaces (the soak needs root and iproute2)")?;
        let host = network.host();
        let nats = tokio::task::spawn_blocking(move || NatsCluster::start_on(3, host)).await??;
        let urls = nats.urls();
        let client = connect_as(&urls).await;
        wait_for_jetstream(&client, Duration::from_secs(30)).await;
        let master = RedisServer::start_on(host, &["--protected-mode", "no"])?;
        let replica = RedisServer::start_on(
            host,
            &[
                "--protected-mode",
                "no",
                "--replicaof",
                &host.to_string(),
                &master.port().to_string(),
            ],
        )?;
        let sentinels = (0..3)
            .map(|_| RedisSentinel::start_on(host, MASTER, master.port(), 2, DOWN_AFTER))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let redis = Redis {
            servers: vec![master, replica],
            sentinels,
        };
        for s in &redis.sentinels {
            let addr = s.addr();
            let ok = poll(Duration::from_secs(30), || {
                let addr = addr.clone();
                async move {
                    sentinel_master(&addr, MASTER).await.is_ok_and(|m| {
                        m.get("num-slaves").map(String::as_str) == Some("1")
                            && m.get("num-other-sentinels").map(String::as_str) == Some("2")
                    })
                }
            })
            .await;
            anyhow::ensure!(ok, "the sentinels did not find each other and the replica");
        }
        let replica_url = redis.servers[1].url();
        let ok = poll(Duration::from_secs(30), || {
            let url = replica_url.clone();
            async move {
                replication_info(&url)
                    .await
                    .contains("master_link_status:up")
            }
        })
        .await;
        anyhow::ensure!(ok, "the replica did not sync");

        let fake = FakeLlm::start_on(SocketAddr::new(host, 0)).await?;
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("debate-config.json");
        write_json(&config, &json!({"baseUrl": fake.base_url()}));
        let redis_url = redis.url();
        let common = |extra: &[(&str, String)]| {
            let mut v: Vec<String> = vec![
                "--nats-url".into(),
                urls.clone(),
                "--redis-url".into(),
                redis_url.clone(),
                "--stream-replicas".into(),
                "3".into(),
                "--redis-min-replicas".into(),
                "1".into(),
            ];
            for (k, val) in extra {
                v.push(k.to_string());
                v.push(val.clone());
            }
            v
        };
        let mut services = Vec::new();
        let coordinator = common(&[
            ("--lease-ttl-ms", LEASE_TTL.as_millis().to_string()),
            // A task attempt whose message never reaches a worker (seen in bursts around
            // NATS node kills and pauses; see the benchmarks page) is dispatched again at
            // its deadline: the task's timeout plus this margin (300 s by default, longer
            // than a soak's bound). The soak counts them (`Report::deadline_losses`).
            (
                "--task-deadline-margin-secs",
                task_deadline_margin().as_secs().to_string(),
            ),
        ]);
        let worker = common(&[
            ("--concurrency", "4".into()),
            ("--ack-wait-secs", ACK_WAIT.as_secs().to_string()),
            ("--config", config.display().to_string()),
        ]);
        for (name, bin, args, ready) in [
            (
                "coordinator-1",
                "parley-coordinator",
                &coordinator,
                "coordinator ready",
            ),
            (
                "coordinator-2",
                "parley-coordinator",
                &coordinator,
                "coordinator ready",
            ),
            (
                "agent-worker-1",
                "parley-agent-worker",
                &worker,
                "worker ready",
            ),
            (
                "agent-worker-2",
                "parley-agent-worker",
                &worker,
                "worker ready",
            ),
            (
                "judge-worker-1",
                "parley-judge-worker",
                &worker,
                "worker ready",
            ),
        ] {
            let mut s = Service {
                name: name.into(),
                ns: network.namespace()?,
                bin: workspace_bin(bin),
                args: args.clone(),
                ready,
                child: None,
                past: Vec::new(),
                starts: 0,
            };
            let s =
                tokio::task::spawn_blocking(move || s.start(Duration::from_secs(30)).map(|()| s))
                    .await??;
            services.push(Mutex::new(s));
        }
        let nats_ports = (0..nats.len()).map(|i| nats.node(i).port()).collect();
        let redis_ports = redis.ports();
        Ok(Arc::new(Layout {
            nats_ports,
            redis_ports,
            nats: Mutex::new(nats),
            redis: tokio::sync::Mutex::new(redis),
            fake,
            services,
            client,
            _dir: dir,
            network,
        }))
    }

    /// Service `i`, locked.
    pub fn service(&self, i: usize) -> std::sync::MutexGuard<'_, Service> {
        self.services[i].lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sends `signal` (`STOP`, `CONT`) to `pid`; false when `kill` failed (the process is gone).
pub fn signal(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
