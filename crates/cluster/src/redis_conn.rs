//! Redis connections of the services, to a single server, to the master of a Sentinel
//! deployment or to a Redis Cluster, chosen by the URL (setting `redis_url`):
//!
//! - `redis://[user:password@]host:port[/db]`, `rediss://...`, `unix://...`: one server; the
//!   connection reconnects to it by itself (the `redis` crate's connection manager).
//! - `redis+sentinel://[user:password@]host:port[,host:port...]/<master name>[/db]`: the
//!   sentinels of a replicated Redis. The master is found by name through the sentinels
//!   (every one that answers is asked, and the master named with the highest configuration
//!   epoch wins; its `ROLE` is checked: see [`SentinelConnection`]), and found again whenever a
//!   command fails in a way that means it may have moved: the connection broke or timed
//!   out, or the server answered `READONLY` (a former master demoted to replica). The
//!   credentials apply to the master and to the sentinels (as with the Bitnami chart's
//!   default `sentinel.auth`).
//! - `redis+cluster://[user:password@]host:port[,host:port...]` (`rediss+cluster://` for
//!   TLS): some nodes of a Redis Cluster (database 0 only). The `redis` crate's cluster
//!   client learns the slot map from them, sends each command (and each script, by its
//!   first key) to the master of the key's slot, and follows `MOVED`/`ASK` redirections and
//!   failovers. A pipeline or transaction goes to one node, so its keys must share a hash
//!   slot: every per-debate key carries the hash tag `{<id>}`, and the global keys
//!   (`parley:running`, `parley:idem:*`, `parley:deadletter`) are only used alone.
//!   [`RedisConnection::wait_replicas`] sends `WAIT` to the master of the written key's slot.
//!
//! A failed command is not sent again (as with the connection manager): the caller sees the
//! error and retries when it is safe, and its next command goes to the master the
//! sentinels name then.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, Value};

/// URL scheme of a Sentinel deployment.
pub const SENTINEL_SCHEME: &str = "redis+sentinel";
/// URL scheme of a Redis Cluster (plain TCP).
pub const CLUSTER_SCHEME: &str = "redis+cluster";
/// URL scheme of a Redis Cluster over TLS.
pub const CLUSTER_TLS_SCHEME: &str = "rediss+cluster";
/// How long connecting to a server (or a sentinel) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the Redis URL points.
/// What is wrong with a Redis URL (never its credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedisUrlError {
    #[error(
        "{s} URL without sentinels: expected {s}://host:26379[,host:26379...]/<master name>",
        s = SENTINEL_SCHEME
    )]
    NoSentinels,
    #[error(
        "{s} URL without a master name: expected {s}://host:26379/<master name>[/db]",
        s = SENTINEL_SCHEME
    )]
    NoMasterName,
    /// The sentinel URL's database is not a number.
    #[error("database {0:?} is not a number")]
    BadDatabase(String),
    #[error(
        "{s} URL: unexpected path after /<master name>/<db>",
        s = SENTINEL_SCHEME
    )]
    PathAfterDatabase,
    /// A cluster URL names a database other than 0.
    #[error("{scheme} URL: a Redis Cluster has only database 0, the path must be empty")]
    ClusterDatabase { scheme: &'static str },
    #[error("{scheme} URL without nodes: expected {scheme}://host:6379[,host:6379...]")]
    NoNodes { scheme: &'static str },
    /// An address without a numeric port (`what`: a sentinel or a cluster node).
    #[error("{what} address {addr:?}: expected host:port (e.g. {example})")]
    NotHostPort {
        what: &'static str,
        addr: String,
        example: &'static str,
    },
}

#[derive(Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server (`redis://`, `rediss://`, `unix://`): the URL as given.
    Server(String),
    /// The master named `master` of the sentinels at `sentinels` (`host:port`).
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        db: i64,
        username: Option<String>,
        password: Option<String>,
    },
    /// Seed nodes (`host:port`) of a Redis Cluster; `tls` for `rediss+cluster`.
    Cluster {
        nodes: Vec<String>,
        tls: bool,
        username: Option<String>,
        password: Option<String>,
    },
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Server(url) => f
                .debug_tuple("Server")
                .field(&crate::nats::redact(url))
                .finish(),
            Self::Sentinel {
                sentinels,
                master,
                db,
                ..
            } => f
                .debug_struct("Sentinel")
                .field("sentinels", sentinels)
                .field("master", master)
                .field("db", db)
                .finish_non_exhaustive(),
            Self::Cluster { nodes, tls, .. } => f
                .debug_struct("Cluster")
                .field("nodes", nodes)
                .field("tls", tls)
                .finish_non_exhaustive(),
        }
    }
}

impl RedisTarget {
    /// Reads a Redis URL; the error names what is wrong, never the credentials.
    pub fn parse(url: &str) -> Result<Self, RedisUrlError> {
        let url = url.trim();
        for (scheme, tls) in [(CLUSTER_SCHEME, false), (CLUSTER_TLS_SCHEME, true)] {
            if let Some(rest) = url.strip_prefix(&format!("{scheme}://")) {
                return Self::parse_cluster(scheme, rest, tls);
            }
        }
        let Some(rest) = url.strip_prefix(&format!("{SENTINEL_SCHEME}://")) else {
            return Ok(Self::Server(url.to_string()));
        };
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (username, password, sentinels) = split_authority(authority);
        if sentinels.is_empty() {
            return Err(RedisUrlError::NoSentinels);
        }
        check_host_ports("sentinel", "redis-sentinel:26379", &sentinels)?;
        let mut parts = path.split('/');
        let master = parts.next().unwrap_or("").trim().to_string();
        if master.is_empty() {
            return Err(RedisUrlError::NoMasterName);
        }
        let db = match parts.next().filter(|d| !d.is_empty()) {
            None => 0,
            Some(d) => d
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| RedisUrlError::BadDatabase(d.to_string()))?,
        };
        if parts.next().is_some() {
            return Err(RedisUrlError::PathAfterDatabase);
        }
        Ok(Self::Sentinel {
            sentinels,
            master,
            db,
            username,
            password,
        })
    }

    /// The part after `redis+cluster://`: `[user:password@]host:port[,host:port...][/[0]]`.
    fn parse_cluster(scheme: &'static str, rest: &str, tls: bool) -> Result<Self, RedisUrlError> {
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if !(path.is_empty() || path == "0") {
            return Err(RedisUrlError::ClusterDatabase { scheme });
        }
        let (username, password, nodes) = split_authority(authority);
        if nodes.is_empty() {
            return Err(RedisUrlError::NoNodes { scheme });
        }
        check_host_ports("cluster node", "redis-cluster-0:6379", &nodes)?;
        Ok(Self::Cluster {
            nodes,
            tls,
            username,
            password,
        })
    }
}

/// `[user:password@]h1:p1,h2:p2`: the decoded user and password, and the addresses.
fn split_authority(authority: &str) -> (Option<String>, Option<String>, Vec<String>) {
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(u) => match u.split_once(':') {
            Some((user, pw)) => (
                (!user.is_empty()).then(|| crate::nats::percent_decode(user)),
                Some(crate::nats::percent_decode(pw)),
            ),
            None => (None, Some(crate::nats::percent_decode(u))),
        },
    };
    let hosts = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect();
    (username, password, hosts)
}

/// Every address is `host:port` with a numeric port; the error names the first that is not.
fn check_host_ports(
    what: &'static str,
    example: &'static str,
    addrs: &[String],
) -> Result<(), RedisUrlError> {
    for a in addrs {
        let port = a.rsplit_once(':').map(|(_, p)| p);
        if port.is_none_or(|p| p.parse::<u16>().is_err()) {
            return Err(RedisUrlError::NotHostPort {
                what,
                addr: a.clone(),
                example,
            });
        }
    }
    Ok(())
}

/// A Redis connection that reconnects after errors: cheap to clone (all clones share one
/// multiplexed connection); use it wherever a `ConnectionManager` would go.
#[derive(Clone)]
pub enum RedisConnection {
    Server(ConnectionManager),
    Sentinel(SentinelConnection),
    Cluster(ClusterConnection),
}

impl RedisConnection {
    /// Connects to `url` (see the module docs), each command answering within
    /// `response_timeout`. Through sentinels, fails when no sentinel names a reachable
    /// master.
    pub async fn connect(url: &str, response_timeout: Duration) -> RedisResult<Self> {
        let target = RedisTarget::parse(url).map_err(|e| {
            RedisError::from((redis::ErrorKind::InvalidClientConfig, "", e.to_string()))
        })?;
        match target {
            RedisTarget::Server(url) => {
                let client = redis::Client::open(url.as_str())?;
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(response_timeout));
                Ok(Self::Server(
                    client.get_connection_manager_with_config(config).await?,
                ))
            }
            RedisTarget::Sentinel {
                sentinels,
                master,
                db,
                username,
                password,
            } => {
                let auth = match (&username, &password) {
                    (Some(u), Some(p)) => format!("{}:{}@", encode(u), encode(p)),
                    (None, Some(p)) => format!(":{}@", encode(p)),
                    _ => String::new(),
                };
                let sentinels = sentinels
                    .iter()
                    .map(|s| redis::Client::open(format!("redis://{auth}{s}")))
                    .collect::<RedisResult<Vec<_>>>()?;
                let mut info = redis::RedisConnectionInfo::default().set_db(db);
                if let Some(u) = &username {
                    info = info.set_username(u);
                }
                if let Some(p) = &password {
                    info = info.set_password(p);
                }
                let conn = SentinelConnection {
                    shared: Arc::new(SentinelShared {
                        sentinels,
                        master_info: info,
                        lookup: tokio::sync::Mutex::new(()),
                        current: Mutex::new(None),
                        generation: AtomicU64::new(0),
                        config: redis::AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(CONNECT_TIMEOUT))
                            .set_response_timeout(Some(response_timeout)),
                        master,
                        db,
                    }),
                };
                conn.current().await?;
                Ok(Self::Sentinel(conn))
            }
            RedisTarget::Cluster {
                nodes,
                tls,
                username,
                password,
            } => {
                let scheme = if tls { "rediss" } else { "redis" };
                let urls: Vec<String> = nodes.iter().map(|n| format!("{scheme}://{n}")).collect();
                let mut builder = ClusterClientBuilder::new(urls)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(response_timeout);
                if let Some(u) = &username {
                    builder = builder.username(u);
                }
                if let Some(p) = &password {
                    builder = builder.password(p);
                }
                let conn = builder.build()?.get_async_connection().await?;
                Ok(Self::Cluster(conn))
            }
        }
    }

    /// Whether the server this connection writes to is the master its deployment names
    /// now: through sentinels, asks them (see [`SentinelConnection`]) and, when they name
    /// another, drops the connection; a single server or a cluster (whose client follows
    /// its slot map) always is.
    pub async fn still_master(&self) -> RedisResult<bool> {
        match self {
            Self::Sentinel(c) => c.still_master().await,
            Self::Server(_) | Self::Cluster(_) => Ok(true),
        }
    }

    /// `WAIT replicas timeout` for this connection's writes to `key`: under Redis Cluster
    /// it goes to the master of `key`'s slot (the node that took the write), elsewhere to
    /// the one master. The number of replicas that acknowledged them.
    pub async fn wait_replicas(
        &mut self,
        key: &str,
        replicas: usize,
        timeout: Duration,
    ) -> RedisResult<i64> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(timeout.as_millis() as u64);
        match self {
            Self::Cluster(c) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let v = c
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?;
                redis::from_redis_value(v).map_err(RedisError::from)
            }
            _ => cmd.query_async(self).await,
        }
    }
}

/// Percent-encodes the characters that would end a URL's user-info.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The master of a Sentinel deployment, found again after it moved.
///
/// Every sentinel that answers is asked (`SENTINEL MASTER <name>`), and the master named
/// with the highest configuration epoch wins (among equal epochs, the address most
/// sentinels name): a sentinel that has not heard of the last failover yet still names the
/// old master, and an old master that restarted calls itself master until the sentinels
/// demote it, so taking the first answer (as the `redis` crate's sentinel client does)
/// could write to a server whose data the sentinels are about to replace.
#[derive(Clone)]
pub struct SentinelConnection {
    shared: Arc<SentinelShared>,
}

struct SentinelShared {
    sentinels: Vec<redis::Client>,
    /// Database and credentials of the master.
    master_info: redis::RedisConnectionInfo,
    /// One lookup at a time.
    lookup: tokio::sync::Mutex<()>,
    /// The connection to the master in use, its generation and address; `None` once it
    /// failed.
    current: Mutex<Option<Current>>,
    generation: AtomicU64,
    config: redis::AsyncConnectionConfig,
    master: String,
    db: i64,
}

#[derive(Clone)]
struct Current {
    generation: u64,
    conn: MultiplexedConnection,
    addr: (String, u16),
}

/// What one sentinel says of the master: its address and the configuration epoch of
/// that sentinel's view.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Named {
    addr: (String, u16),
    epoch: u64,
}

/// The master the sentinels' answers agree on: the highest epoch, then the address named
/// most often, then the first named.
fn choose(named: &[Named]) -> Option<&Named> {
    let top = named.iter().map(|n| n.epoch).max()?;
    let newest: Vec<&Named> = named.iter().filter(|n| n.epoch == top).collect();
    let votes = |a: &(String, u16)| newest.iter().filter(|n| &n.addr == a).count();
    let mut best: Option<&Named> = None;
    for n in newest.iter().copied() {
        if best.is_none_or(|b| votes(&n.addr) > votes(&b.addr)) {
            best = Some(n);
        }
    }
    best
}

/// A sentinel's `SENTINEL MASTER` reply read: `None` when it knows the master as down or
/// not as a master.
fn named_by(reply: &std::collections::HashMap<String, String>) -> Option<Named> {
    let flags = reply.get("flags")?;
    let flags: Vec<&str> = flags.split(',').collect();
    if !flags.contains(&"master") || flags.iter().any(|f| *f == "s_down" || *f == "o_down") {
        return None;
    }
    let ip = reply.get("ip")?.clone();
    let port = reply.get("port")?.parse().ok()?;
    let epoch = reply
        .get("config-epoch")
        .and_then(|e| e.parse().ok())
        .unwrap_or(0);
    Some(Named {
        addr: (ip, port),
        epoch,
    })
}

impl SentinelConnection {
    /// The connection to the master, looked up through the sentinels when there is none.
    async fn current(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(c) = self.cached() {
            return Ok((c.generation, c.conn));
        }
        let _lookup = self.shared.lookup.lock().await;
        // Another command may have connected while this one waited.
        if let Some(c) = self.cached() {
            return Ok((c.generation, c.conn));
        }
        let (addr, conn) = self.connect_master().await.map_err(|e| {
            tracing::warn!(master = %self.shared.master, error = %e, "cannot reach the Redis master through the sentinels");
            e
        })?;
        let generation = self.shared.generation.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::info!(master = %self.shared.master, generation, address = %format!("{}:{}", addr.0, addr.1), "connected to the Redis master named by the sentinels");
        *self.lock() = Some(Current {
            generation,
            conn: conn.clone(),
            addr,
        });
        Ok((generation, conn))
    }

    /// Where the sentinels that answer say the master is (see the type's docs).
    async fn named_master(&self) -> RedisResult<(String, u16)> {
        let ask = |client: &redis::Client| {
            let client = client.clone();
            let config = self.shared.config.clone();
            let master = self.shared.master.clone();
            async move {
                let mut c = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                let reply: std::collections::HashMap<String, String> = redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(&master)
                    .query_async(&mut c)
                    .await?;
                Ok::<_, RedisError>(named_by(&reply))
            }
        };
        let answers = futures::future::join_all(self.shared.sentinels.iter().map(ask)).await;
        let mut named = Vec::new();
        let mut last_err = None;
        for a in answers {
            match a {
                Ok(Some(n)) => named.push(n),
                Ok(None) => {}
                Err(e) => last_err = Some(e),
            }
        }
        match choose(&named) {
            Some(n) => Ok(n.addr.clone()),
            None => Err(last_err.unwrap_or_else(|| {
                RedisError::from((
                    redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown),
                    "no sentinel names a master that is up",
                    self.shared.master.clone(),
                ))
            })),
        }
    }

    /// Connects to the master the sentinels name, checking that it calls itself master.
    async fn connect_master(&self) -> RedisResult<((String, u16), MultiplexedConnection)> {
        let addr = self.named_master().await?;
        let info = redis::ConnectionAddr::Tcp(addr.0.clone(), addr.1)
            .into_connection_info()?
            .set_redis_settings(self.shared.master_info.clone());
        let mut conn = redis::Client::open(info)?
            .get_multiplexed_async_connection_with_config(&self.shared.config)
            .await?;
        let role: Value = redis::cmd("ROLE").query_async(&mut conn).await?;
        let is_master = match &role {
            Value::Array(parts) => {
                matches!(parts.first(), Some(Value::BulkString(b)) if b.as_slice() == b"master")
            }
            _ => false,
        };
        if !is_master {
            return Err(RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                "the server the sentinels name is not a master (yet)",
                format!("{}:{}", addr.0, addr.1),
            )));
        }
        Ok((addr, conn))
    }

    /// Whether the server this connection writes to is still the master the sentinels
    /// name; when it is not, the connection is dropped (the next command asks the
    /// sentinels again).
    pub async fn still_master(&self) -> RedisResult<bool> {
        let Some(current) = self.cached() else {
            return Ok(false);
        };
        let named = self.named_master().await?;
        if named == current.addr {
            return Ok(true);
        }
        let mut slot = self.lock();
        if slot
            .as_ref()
            .is_some_and(|c| c.generation == current.generation)
        {
            tracing::warn!(master = %self.shared.master, was = %format!("{}:{}", current.addr.0, current.addr.1), now = %format!("{}:{}", named.0, named.1), "the sentinels name another Redis master than the one written to; asking them again");
            *slot = None;
        }
        Ok(false)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Current>> {
        self.shared
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cached(&self) -> Option<Current> {
        self.lock().clone()
    }

    /// After `e` on the connection of `generation`: forget it when the master may have
    /// moved, so the next command asks the sentinels.
    fn failed(&self, generation: u64, e: &RedisError) {
        if !master_may_have_moved(e) {
            return;
        }
        let mut current = self.lock();
        if current.as_ref().is_some_and(|c| c.generation == generation) {
            tracing::warn!(master = %self.shared.master, error = %e, "the Redis master failed; asking the sentinels again");
            *current = None;
        }
    }
}

/// Whether an error means the connection is gone or the server is no longer the master.
pub fn master_may_have_moved(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.current().await?;
            let r = conn.req_packed_command(cmd).await;
            if let Err(e) = &r {
                self.failed(generation, e);
            }
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut conn) = self.current().await?;
            let r = conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &r {
                self.failed(generation, e);
            }
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.db
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Server(c) => c.req_packed_command(cmd),
            Self::Sentinel(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Server(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Server(c) => c.get_db(),
            Self::Sentinel(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(ip: &str, port: u16, epoch: u64) -> Named {
        Named {
            addr: (ip.into(), port),
            epoch,
        }
    }

    #[test]
    fn the_master_named_with_the_newest_epoch_wins_then_the_most_named() {
        // The first sentinel has not heard of the failover: its answer loses.
        let old = named("10.0.0.1", 6379, 3);
        let new = named("10.0.0.2", 6379, 4);
        assert_eq!(choose(&[old.clone(), new.clone(), new.clone()]), Some(&new));
        assert_eq!(choose(&[old.clone(), new.clone()]), Some(&new));
        // Equal epochs: the address most sentinels name, else the first.
        let other = named("10.0.0.3", 6379, 4);
        assert_eq!(
            choose(&[new.clone(), other.clone(), other.clone()]),
            Some(&other)
        );
        assert_eq!(choose(&[new.clone(), other.clone()]), Some(&new));
        assert_eq!(choose(&[]), None);
    }

    #[test]
    fn a_master_a_sentinel_knows_as_down_is_not_named() {
        let reply = |flags: &str, epoch: &str| -> std::collections::HashMap<String, String> {
            [
                ("name", "mymaster"),
                ("ip", "10.0.0.2"),
                ("port", "6380"),
                ("flags", flags),
                ("config-epoch", epoch),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
        };
        assert_eq!(
            named_by(&reply("master", "7")),
            Some(named("10.0.0.2", 6380, 7))
        );
        assert_eq!(named_by(&reply("master,s_down", "7")), None);
        assert_eq!(named_by(&reply("master,s_down,o_down", "7")), None);
        assert_eq!(named_by(&reply("slave", "7")), None);
        // No epoch (a sentinel that never failed over): 0.
        assert_eq!(
            named_by(&reply("master", "x")),
            Some(named("10.0.0.2", 6380, 0))
        );
    }

    #[test]
    fn sentinel_urls_name_sentinels_master_and_db() {
        assert_eq!(
            RedisTarget::parse("redis://:pw@h:6379/2").unwrap(),
            RedisTarget::Server("redis://:pw@h:6379/2".into())
        );
        assert_eq!(
            RedisTarget::parse("redis+sentinel://:p%40ss@s1:26379,s2:26379/mymaster/3").unwrap(),
            RedisTarget::Sentinel {
                sentinels: vec!["s1:26379".into(), "s2:26379".into()],
                master: "mymaster".into(),
                db: 3,
                username: None,
                password: Some("p@ss".into()),
            }
        );
        assert_eq!(
            RedisTarget::parse("redis+sentinel://app:pw@s1:26379/m").unwrap(),
            RedisTarget::Sentinel {
                sentinels: vec!["s1:26379".into()],
                master: "m".into(),
                db: 0,
                username: Some("app".into()),
                password: Some("pw".into()),
            }
        );
        for (bad, says) in [
            ("redis+sentinel://s1:26379", "master name"),
            ("redis+sentinel:///m", "without sentinels"),
            ("redis+sentinel://:hunter2@s1/m", "host:port"),
            ("redis+sentinel://s1:26379/m/x", "not a number"),
            ("redis+sentinel://s1:26379/m/1/2", "unexpected path"),
        ] {
            let e = RedisTarget::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let dbg = format!(
            "{:?}",
            RedisTarget::parse("redis+sentinel://:hunter2@s1:1/m").unwrap()
        );
        assert!(!dbg.contains("hunter2"), "{dbg}");
        assert_eq!(encode("p@ss:w/rd"), "p%40ss%3Aw%2Frd");
    }

    #[test]
    fn cluster_urls_name_seed_nodes_and_tls() {
        assert_eq!(
            RedisTarget::parse("redis+cluster://:p%40ss@n1:7000, n2:7001").unwrap(),
            RedisTarget::Cluster {
                nodes: vec!["n1:7000".into(), "n2:7001".into()],
                tls: false,
                username: None,
                password: Some("p@ss".into()),
            }
        );
        assert_eq!(
            RedisTarget::parse("rediss+cluster://app:pw@n1:6379/").unwrap(),
            RedisTarget::Cluster {
                nodes: vec!["n1:6379".into()],
                tls: true,
                username: Some("app".into()),
                password: Some("pw".into()),
            }
        );
        for (bad, says) in [
            ("redis+cluster://", "without nodes"),
            ("redis+cluster://:hunter2@n1", "host:port"),
            ("redis+cluster://:hunter2@n1:7000,n2:x", "\"n2:x\""),
            ("redis+cluster://:hunter2@n1:7000/2", "only database 0"),
        ] {
            let e = RedisTarget::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let dbg = format!(
            "{:?}",
            RedisTarget::parse("redis+cluster://:hunter2@n1:1").unwrap()
        );
        assert!(!dbg.contains("hunter2") && dbg.contains("n1:1"), "{dbg}");
    }
}
