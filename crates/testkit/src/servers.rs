//! Real `nats-server` (with JetStream) and `redis-server` processes on ephemeral loopback
//! ports, each with a private temporary directory for its data and its log. A NATS server
//! may also run with a configuration file ([`NatsServer::start_with_config`], e.g.
//! `deploy/nats/parley.conf` with its roles): the port, address and store directory still
//! come from the command line, so the file's own `port` never collides.
//!
//! A server is ready when it speaks its protocol, not merely when the port accepts:
//! NATS must send its `INFO` line, Redis must answer `PING` with `+PONG` (so a restarted
//! Redis has finished loading its append-only file). Start and restart wait up to 10 s.

use crate::process::{free_port, kill_and_reap, log_stdio, log_tail};
use anyhow::{anyhow, Context as _};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);
/// How many ports `start` tries when another process takes the chosen port first.
const PORT_ATTEMPTS: usize = 3;
/// Where servers listen unless started `_on` another address.
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Nats,
    Redis,
    /// `redis-server <config> --sentinel`.
    Sentinel,
}

impl Kind {
    fn program(self) -> &'static str {
        match self {
            Kind::Nats => "nats-server",
            Kind::Redis | Kind::Sentinel => "redis-server",
        }
    }

    fn args(
        self,
        host: IpAddr,
        port: u16,
        data_dir: &Path,
        config: Option<&Path>,
    ) -> Vec<std::ffi::OsString> {
        let port = port.to_string();
        let host = host.to_string();
        let mut v: Vec<std::ffi::OsString> = Vec::new();
        match (self, config) {
            (Kind::Nats, Some(c)) => {
                v.push("-c".into());
                v.push(c.into());
            }
            (Kind::Sentinel, Some(c)) => {
                v.push(c.into());
                v.push("--sentinel".into());
            }
            _ => {}
        }
        v.extend::<Vec<std::ffi::OsString>>(match self {
            Kind::Nats => vec![
                "-js".into(),
                "-a".into(),
                host.clone().into(),
                "-p".into(),
                port.into(),
                "-sd".into(),
                data_dir.into(),
            ],
            Kind::Redis => vec![
                "--port".into(),
                port.into(),
                "--bind".into(),
                host.clone().into(),
                "--dir".into(),
                data_dir.into(),
                "--save".into(),
                "".into(),
                "--appendonly".into(),
                "yes".into(),
                "--appendfsync".into(),
                "always".into(),
            ],
            Kind::Sentinel => vec![
                "--port".into(),
                port.into(),
                "--bind".into(),
                host.into(),
                "--dir".into(),
                data_dir.into(),
            ],
        });
        v
    }

    /// Whether the server on `port` speaks its protocol.
    fn ready(self, host: IpAddr, port: u16) -> bool {
        let addr = SocketAddr::new(host, port);
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(250)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
        let expect: &[u8] = match self {
            Kind::Nats => b"INFO",
            Kind::Redis | Kind::Sentinel => {
                if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
                    return false;
                }
                b"+PONG"
            }
        };
        let mut buf = [0u8; 5];
        let mut got = 0;
        while got < expect.len() {
            match s.read(&mut buf[got..expect.len()]) {
                Ok(0) | Err(_) => return false,
                Ok(n) => got += n,
            }
        }
        &buf[..expect.len()] == expect
    }
}

/// Why a launch failed; `port_in_use` lets `start` retry on another port.
struct LaunchError {
    error: anyhow::Error,
    port_in_use: bool,
}

/// One server process plus its directory; shared by [`NatsServer`] and [`RedisServer`].
struct ServerProcess {
    kind: Kind,
    /// The address it listens on (127.0.0.1 unless started `_on` another).
    host: IpAddr,
    port: u16,
    /// `None` after `kill`.
    child: Option<Child>,
    /// Server data (JetStream store, Redis AOF); kept across restarts.
    data_dir: PathBuf,
    /// stdout + stderr of every run, appended.
    log_path: PathBuf,
    /// Owns `data_dir` and the log; removed on drop, after the process is killed.
    dir: tempfile::TempDir,
    /// A configuration file (`-c`) and the environment it expands (`$NAME`); kept for
    /// restarts.
    config: Option<(PathBuf, Vec<(String, String)>)>,
    /// More arguments after the usual ones (e.g. `--replicaof`); kept for restarts.
    extra_args: Vec<String>,
}

impl ServerProcess {
    fn start(kind: Kind, config: Option<(PathBuf, Vec<(String, String)>)>) -> anyhow::Result<Self> {
        Self::start_with_args(kind, config, Vec::new(), LOOPBACK)
    }

    fn start_with_args(
        kind: Kind,
        config: Option<(PathBuf, Vec<(String, String)>)>,
        extra_args: Vec<String>,
        host: IpAddr,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("parley-{}-", kind.program()))
            .tempdir()
            .with_context(|| {
                format!(
                    "while creating a temporary directory for {}",
                    kind.program()
                )
            })?;
        let data_dir = dir.path().join("data");
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("while creating {}", data_dir.display()))?;
        let log_path = dir.path().join(format!("{}.log", kind.program()));
        let mut server = ServerProcess {
            kind,
            host,
            port: 0,
            child: None,
            data_dir,
            log_path,
            dir,
            config,
            extra_args,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            server.port = free_port();
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(e) if e.port_in_use && attempt < PORT_ATTEMPTS => continue,
                Err(e) => return Err(e.error),
            }
        }
    }

    /// Spawns the server on `self.port` and waits until it is ready.
    fn launch(&mut self) -> Result<(), LaunchError> {
        let program = self.kind.program();
        let fail = |error: anyhow::Error| LaunchError {
            error,
            port_in_use: false,
        };
        let log_start = std::fs::metadata(&self.log_path)
            .map(|m| m.len())
            .unwrap_or(0);
        let (out, err) = log_stdio(&self.log_path).map_err(fail)?;
        let config = self.config.as_ref().map(|(p, _)| p.as_path());
        let env = self.config.iter().flat_map(|(_, env)| env.iter().cloned());
        let spawned = Command::new(program)
            .args(self.kind.args(self.host, self.port, &self.data_dir, config))
            .args(&self.extra_args)
            .envs(env)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(fail(anyhow!(
                    "{program} not found: install it with apt-get install {program}"
                )))
            }
            Err(e) => {
                return Err(fail(
                    anyhow!(e).context(format!("while spawning {program}")),
                ))
            }
        };
        let child = self.child.insert(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = child.try_wait().ok().flatten();
            if exited.is_none() && self.kind.ready(self.host, self.port) {
                return Ok(());
            }
            let problem = if let Some(status) = exited {
                format!(
                    "{program} exited ({status}) before accepting connections on {}:{}",
                    self.host, self.port
                )
            } else if Instant::now() >= deadline {
                kill_and_reap(child);
                format!(
                    "{program} did not accept connections on {}:{} within {:?}",
                    self.host, self.port, READY_TIMEOUT
                )
            } else {
                std::thread::sleep(POLL);
                continue;
            };
            self.child = None;
            let new_log = std::fs::read(&self.log_path)
                .map(|b| {
                    String::from_utf8_lossy(&b[(log_start as usize).min(b.len())..]).to_lowercase()
                })
                .unwrap_or_default();
            return Err(LaunchError {
                error: anyhow!(
                    "{problem}; last lines of {}:\n{}",
                    self.log_path.display(),
                    log_tail(&self.log_path, 20)
                ),
                port_in_use: new_log.contains("address already in use"),
            });
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.launch().map_err(|e| e.error).with_context(|| {
            format!(
                "while restarting {} on {}:{}",
                self.kind.program(),
                self.host,
                self.port
            )
        })
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- last lines of {} ({}) ---\n{}",
                self.kind.program(),
                self.log_path.display(),
                log_tail(&self.log_path, 40)
            );
        }
    }
}

impl std::fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.kind.program())
            .field("port", &self.port)
            .field("running", &self.child.is_some())
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// A `nats-server -js` on an ephemeral loopback port, with its JetStream store in a
/// temporary directory. SIGKILLed on drop; the directory is removed.
#[derive(Debug)]
pub struct NatsServer {
    inner: ServerProcess,
    /// Holds a configuration file written by the constructor (e.g.
    /// [`NatsServer::start_with_max_payload`]); dropped after `inner`.
    _config_dir: Option<tempfile::TempDir>,
}

impl NatsServer {
    /// Spawns the server and waits (up to 10 s) until it sends its `INFO` line.
    pub fn start() -> anyhow::Result<Self> {
        Ok(NatsServer {
            inner: ServerProcess::start(Kind::Nats, None)?,
            _config_dir: None,
        })
    }

    /// Like [`NatsServer::start`], with the configuration file `config` (`-c`) and the
    /// environment variables `env` it refers to (`$NAME`). Port, address and store
    /// directory are still set on the command line.
    pub fn start_with_config(config: &Path, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(NatsServer {
            inner: ServerProcess::start(Kind::Nats, Some((config.to_path_buf(), env)))?,
            _config_dir: None,
        })
    }

    /// Like [`NatsServer::start`], with `max_payload` (the largest message the server
    /// accepts, 1 MiB by default) set to `bytes` in a configuration file; kept across
    /// restarts.
    pub fn start_with_max_payload(bytes: usize) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("parley-nats-conf-")
            .tempdir()
            .context("while creating a directory for the nats-server configuration")?;
        let conf = dir.path().join("max-payload.conf");
        std::fs::write(&conf, format!("max_payload: {bytes}\n"))
            .with_context(|| format!("while writing {}", conf.display()))?;
        Ok(NatsServer {
            inner: ServerProcess::start(Kind::Nats, Some((conf, Vec::new())))?,
            _config_dir: Some(dir),
        })
    }

    /// `nats://user:password@127.0.0.1:PORT` (the address it listens on).
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "nats://{user}:{password}@{}:{}",
            self.inner.host, self.inner.port
        )
    }

    /// `nats://127.0.0.1:PORT` (the address it listens on).
    pub fn url(&self) -> String {
        format!("nats://{}:{}", self.inner.host, self.inner.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// The process id of the running server (e.g. to read its CPU time in `/proc`).
    pub fn pid(&self) -> Option<u32> {
        self.inner.child.as_ref().map(std::process::Child::id)
    }

    /// SIGKILL (a crash: no clean shutdown). The store survives for [`NatsServer::restart`].
    pub fn kill(&mut self) {
        self.inner.kill();
    }

    /// Kills the server if it runs, then starts it again on the same port with the same
    /// JetStream store.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.inner.restart()
    }

    /// The JetStream store directory.
    pub fn store_dir(&self) -> &Path {
        &self.inner.data_dir
    }

    /// The server's log (stdout and stderr of every run).
    pub fn log_path(&self) -> &Path {
        &self.inner.log_path
    }
}

/// Several `nats-server -js` processes on loopback, clustered by routes into one
/// JetStream cluster (named `parley`): node `i` is named `n<i>` (its JetStream
/// `server_name`), has its own client port, cluster port and store directory, and routes to
/// every other node. Once a majority of the nodes runs, JetStream elects its meta leader
/// and streams may have up to `size` replicas. SIGKILLed on drop.
#[derive(Debug)]
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
    names: Vec<String>,
    /// The nodes' configuration files (read again by a restart); dropped after the nodes.
    _config_dir: tempfile::TempDir,
}

impl NatsCluster {
    /// Starts `size` nodes (each waits until it sends its `INFO` line). JetStream answers
    /// only once the nodes have found each other and elected a meta leader: poll for it
    /// (`$JS.API.INFO`) before creating streams.
    pub fn start(size: usize) -> anyhow::Result<Self> {
        Self::start_on(size, LOOPBACK)
    }

    /// Like [`NatsCluster::start`], with the client ports listening on `host` (e.g. an
    /// address processes in another network namespace reach); routes stay on loopback.
    pub fn start_on(size: usize, host: IpAddr) -> anyhow::Result<Self> {
        anyhow::ensure!(size >= 1, "a NATS cluster needs at least one node");
        let dir = tempfile::Builder::new()
            .prefix("parley-nats-cluster-")
            .tempdir()
            .context("while creating a directory for the nats-server configurations")?;
        let cluster_ports: Vec<u16> = (0..size).map(|_| free_port()).collect();
        let mut nodes = Vec::with_capacity(size);
        let mut names = Vec::with_capacity(size);
        for (i, port) in cluster_ports.iter().enumerate() {
            let name = format!("n{i}");
            let routes: Vec<String> = cluster_ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| format!("nats-route://127.0.0.1:{p}"))
                .collect();
            let conf = dir.path().join(format!("{name}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "server_name: {name}\n\
                     cluster {{\n  name: parley\n  listen: 127.0.0.1:{port}\n  routes: [{}]\n}}\n",
                    routes.join(", ")
                ),
            )
            .with_context(|| format!("while writing {}", conf.display()))?;
            let node = NatsServer {
                inner: ServerProcess::start_with_args(
                    Kind::Nats,
                    Some((conf, Vec::new())),
                    Vec::new(),
                    host,
                )
                .with_context(|| format!("while starting cluster node {name}"))?,
                _config_dir: None,
            };
            nodes.push(node);
            names.push(name);
        }
        Ok(NatsCluster {
            nodes,
            names,
            _config_dir: dir,
        })
    }

    /// The client URLs of every node, comma-separated (`nats://127.0.0.1:P1,...`).
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &NatsServer {
        &self.nodes[i]
    }

    /// The JetStream server name of node `i` (`n<i>`).
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// The index of the node whose server name is `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// SIGKILLs node `i` (a crash); its store stays for [`NatsCluster::restart`].
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again on its ports with its store; it rejoins the cluster.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].restart()
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no node (never: `start` needs one).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// A `redis-server` on an ephemeral loopback port with append-only persistence
/// (`appendfsync always`), so data written before a kill is there after a restart.
/// SIGKILLed on drop; the directory is removed.
#[derive(Debug)]
pub struct RedisServer {
    inner: ServerProcess,
}

impl RedisServer {
    /// Spawns the server and waits (up to 10 s) until it answers `PING`.
    pub fn start() -> anyhow::Result<Self> {
        Ok(RedisServer {
            inner: ServerProcess::start(Kind::Redis, None)?,
        })
    }

    /// Like [`RedisServer::start`], with more `redis-server` arguments (each option and its
    /// values as separate items, e.g. `["--replicaof", "127.0.0.1", "6379"]`); kept across
    /// restarts.
    pub fn start_with_args(args: &[&str]) -> anyhow::Result<Self> {
        Self::start_on(LOOPBACK, args)
    }

    /// Like [`RedisServer::start_with_args`], listening on `host` instead of loopback.
    pub fn start_on(host: IpAddr, args: &[&str]) -> anyhow::Result<Self> {
        Ok(RedisServer {
            inner: ServerProcess::start_with_args(
                Kind::Redis,
                None,
                args.iter().map(|a| a.to_string()).collect(),
                host,
            )?,
        })
    }

    /// A replica of `master` listening on `master`'s address (`--replicaof <host> <port>`).
    pub fn start_replica_on(master: &RedisServer) -> anyhow::Result<Self> {
        let host = master.inner.host.to_string();
        Self::start_on(
            master.inner.host,
            &["--replicaof", &host, &master.port().to_string()],
        )
    }

    /// A replica of `master` (`--replicaof 127.0.0.1 <port>`).
    pub fn start_replica_of(master: &RedisServer) -> anyhow::Result<Self> {
        Self::start_with_args(&["--replicaof", "127.0.0.1", &master.port().to_string()])
    }

    /// The process id of the running server (for SIGSTOP / SIGCONT in tests).
    pub fn pid(&self) -> Option<u32> {
        self.inner.child.as_ref().map(std::process::Child::id)
    }

    /// `redis://127.0.0.1:PORT` (the address it listens on).
    pub fn url(&self) -> String {
        format!("redis://{}:{}", self.inner.host, self.inner.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// SIGKILL (a crash). Acknowledged writes survive for [`RedisServer::restart`].
    pub fn kill(&mut self) {
        self.inner.kill();
    }

    /// Kills the server if it runs, then starts it again on the same port with the same
    /// data directory; waits until it has loaded its data and answers `PING`.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.inner.restart()
    }

    /// The directory holding the append-only file.
    pub fn data_dir(&self) -> &Path {
        &self.inner.data_dir
    }

    /// The server's log (stdout and stderr of every run).
    pub fn log_path(&self) -> &Path {
        &self.inner.log_path
    }
}

/// A Redis Sentinel (`redis-server <conf> --sentinel`) on an ephemeral loopback port,
/// monitoring one master. SIGKILLed on drop.
#[derive(Debug)]
pub struct RedisSentinel {
    inner: ServerProcess,
    /// Holds the configuration file (Sentinel rewrites it); dropped after `inner`.
    _config_dir: tempfile::TempDir,
}

impl RedisSentinel {
    /// Starts a sentinel watching the master `master_name` at 127.0.0.1:`master_port` with
    /// `quorum`; the master is considered down after `down_after` without an answer, and a
    /// failover may take up to 10 s. Waits until it answers `PING`.
    pub fn start(
        master_name: &str,
        master_port: u16,
        quorum: u32,
        down_after: Duration,
    ) -> anyhow::Result<Self> {
        Self::start_on(LOOPBACK, master_name, master_port, quorum, down_after)
    }

    /// Like [`RedisSentinel::start`], listening on `host`, with the master at
    /// `host`:`master_port`.
    pub fn start_on(
        host: IpAddr,
        master_name: &str,
        master_port: u16,
        quorum: u32,
        down_after: Duration,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("parley-sentinel-conf-")
            .tempdir()
            .context("while creating a directory for the sentinel configuration")?;
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "sentinel monitor {master_name} {host} {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {master_name} {}\n\
                 sentinel failover-timeout {master_name} 10000\n\
                 sentinel parallel-syncs {master_name} 1\n",
                down_after.as_millis()
            ),
        )
        .with_context(|| format!("while writing {}", conf.display()))?;
        Ok(RedisSentinel {
            inner: ServerProcess::start_with_args(
                Kind::Sentinel,
                Some((conf, Vec::new())),
                Vec::new(),
                host,
            )?,
            _config_dir: dir,
        })
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// `127.0.0.1:PORT` (the address it listens on).
    pub fn addr(&self) -> String {
        format!("{}:{}", self.inner.host, self.inner.port)
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        self.inner.kill();
    }

    /// The process id of the running sentinel.
    pub fn pid(&self) -> Option<u32> {
        self.inner.child.as_ref().map(std::process::Child::id)
    }
}

/// How long a new Redis Cluster may take to agree on its slots and replicas.
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A Redis Cluster on loopback: `masters` masters with one replica each, every node a
/// `redis-server --cluster-enabled yes` on ephemeral ports (client and bus port), without
/// persistence, joined by `redis-cli --cluster create --cluster-replicas 1`. Node timeout
/// 1 s and replica validity factor 0, so a killed master's replica takes over within a few
/// seconds. SIGKILLed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `2 * masters` nodes (at least 3 masters: a cluster needs a majority of
    /// masters to fail one over), creates the cluster and waits until every node reports
    /// `cluster_state:ok`, every master has its replica and every replica has finished its
    /// first sync.
    pub fn start(masters: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(masters >= 3, "a Redis Cluster needs at least 3 masters");
        let mut nodes = Vec::with_capacity(masters * 2);
        for _ in 0..masters * 2 {
            // The bus port is set explicitly: the default (port + 10000) may not exist
            // for a high ephemeral port.
            let bus = free_port().to_string();
            nodes.push(RedisServer::start_with_args(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                // A replica takes over however long ago it last heard from its master
                // (otherwise a master that took no writes for ~10 s cannot fail over).
                "--cluster-replica-validity-factor",
                "0",
                // Replicas get their first full copy at once, not after 5 s.
                "--repl-diskless-sync-delay",
                "0",
                "--cluster-port",
                &bus,
                "--appendonly",
                "no",
            ])?);
        }
        let cluster = RedisCluster { nodes };
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", n.port()));
        }
        let out = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .context("while running redis-cli --cluster create")?;
        anyhow::ensure!(
            out.status.success(),
            "redis-cli --cluster create failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + CLUSTER_READY_TIMEOUT;
        loop {
            let ok = (0..cluster.nodes.len()).all(|i| {
                cluster
                    .cli(i, &["CLUSTER", "INFO"])
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            }) && cluster.masters_with_replica().is_ok_and(|n| n == masters)
                && cluster.replicas_in_sync() == masters;
            if ok {
                return Ok(cluster);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the Redis Cluster was not ready within {CLUSTER_READY_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Nodes that are replicas with their replication link up (they hold a full copy).
    fn replicas_in_sync(&self) -> usize {
        (0..self.nodes.len())
            .filter(|&i| {
                self.cli(i, &["INFO", "replication"]).is_ok_and(|info| {
                    info.contains("role:slave") && info.contains("master_link_status:up")
                })
            })
            .count()
    }

    /// Masters that have a connected replica, as a node sees them.
    fn masters_with_replica(&self) -> anyhow::Result<usize> {
        let nodes = self.cluster_nodes()?;
        Ok(nodes
            .iter()
            .filter(|n| n.master && n.connected)
            .filter(|m| {
                nodes
                    .iter()
                    .any(|r| r.replica_of.as_deref() == Some(m.id.as_str()) && r.connected)
            })
            .count())
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...` (every node, as seeds).
    pub fn url(&self) -> String {
        format!(
            "redis+cluster://{}",
            self.nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port()))
                .collect::<Vec<_>>()
                .join(",")
        )
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// Number of nodes (masters and replicas).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes (never, once started).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// SIGKILLs node `i`.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Runs `redis-cli -p <node i's port> args...`; its stdout, or an error naming the
    /// node when it fails or answers with an error.
    pub fn cli(&self, i: usize, args: &[&str]) -> anyhow::Result<String> {
        let port = self.nodes[i].port();
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("while running redis-cli against 127.0.0.1:{port}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        anyhow::ensure!(
            out.status.success()
                && !stdout.starts_with("ERR")
                && !stdout.starts_with("CLUSTERDOWN"),
            "redis-cli {args:?} on 127.0.0.1:{port}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(stdout)
    }

    /// `CLUSTER NODES` as seen by the first running node that answers.
    pub fn cluster_nodes(&self) -> anyhow::Result<Vec<ClusterNode>> {
        let mut last = anyhow!("no Redis Cluster node is running");
        for i in 0..self.nodes.len() {
            if self.nodes[i].pid().is_none() {
                continue;
            }
            match self.cli(i, &["CLUSTER", "NODES"]) {
                Ok(text) => return Ok(text.lines().filter_map(ClusterNode::parse).collect()),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The index of the node that is the master serving `key`'s hash slot now, as seen by
    /// a running node.
    pub fn master_of(&self, key: &str) -> anyhow::Result<usize> {
        let live = (0..self.nodes.len())
            .find(|&i| self.nodes[i].pid().is_some())
            .ok_or_else(|| anyhow!("no Redis Cluster node is running"))?;
        let slot: u16 = self
            .cli(live, &["CLUSTER", "KEYSLOT", key])?
            .trim()
            .parse()
            .context("CLUSTER KEYSLOT did not answer a number")?;
        let node = self
            .cluster_nodes()?
            .into_iter()
            .find(|n| n.master && n.connected && n.slots.iter().any(|r| r.contains(&slot)))
            .ok_or_else(|| anyhow!("no connected master serves slot {slot}"))?;
        self.index_of_port(node.port)
            .ok_or_else(|| anyhow!("slot {slot} is served by unknown port {}", node.port))
    }

    /// The index of the node listening on `port`.
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port() == port)
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// Not flagged `fail`/`fail?` and its link is `connected`.
    pub connected: bool,
    /// The master's id, for a replica.
    pub replica_of: Option<String>,
    pub slots: Vec<std::ops::RangeInclusive<u16>>,
}

impl ClusterNode {
    /// `<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot>...`.
    fn parse(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            return None;
        }
        let port = f[1].split('@').next()?.rsplit_once(':')?.1.parse().ok()?;
        let flags: Vec<&str> = f[2].split(',').collect();
        let slots = f[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| match s.split_once('-') {
                Some((a, b)) => Some(a.parse().ok()?..=b.parse().ok()?),
                None => s.parse().ok().map(|n| n..=n),
            })
            .collect();
        Some(ClusterNode {
            id: f[0].to_string(),
            port,
            master: flags.contains(&"master"),
            connected: f[7] == "connected" && !flags.iter().any(|x| x.starts_with("fail")),
            replica_of: (f[3] != "-").then(|| f[3].to_string()),
            slots,
        })
    }
}
