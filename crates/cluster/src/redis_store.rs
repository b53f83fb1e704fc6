//! The Redis checkpoint store of the distributed mode.
//!
//! # Keys
//! Every per-debate key carries the debate id as a hash tag, so one debate's keys live in
//! one slot and the layout works on Redis Cluster:
//! - `parley:{<id>}:spec`: the [`DebateSpec`] JSON, written once (`SET NX`), never changed.
//! - `parley:{<id>}:state`: a hash: the checkpoint's `version`, a snapshot of the
//!   [`DebateState`] JSON (`state`, as of version `base`) and the deltas since
//!   (`d:<version>`), written only by compare-and-set ([`RedisStore::save_state`], Lua
//!   scripts), so two coordinators can never both advance one debate. A transition appends
//!   its delta; now and then, and always at a terminal status, a snapshot replaces them
//!   (see `checkpoint`). A hash `{version, state}` written before deltas still loads.
//! - `parley:{<id>}:results`: a hash of task results. A successful result is stored under
//!   its task id with `HSETNX` (first result wins, a completed task never runs again); a
//!   failed attempt is stored under `<task id>#<attempt>` (so a later attempt can still
//!   succeed under the task id).
//! - `parley:{<id>}:lease`: the owning coordinator's token (`SET NX PX`); renewed and released
//!   only by its owner (Lua).
//! - `parley:{<id>}:claim:<task id>`: the worker running a task right now (`SET NX PX`,
//!   released by its owner), so a re-dispatch racing a still-running call waits for its
//!   result instead of calling the LLM a second time.
//! - `parley:{<id>}:secret`: the debate's dispatch secret (see `crate::dispatch`), written
//!   once (`SET NX`).
//! - `parley:running`: the set of debates that still need an owner (running, or accepted
//!   and not started).
//! - `parley:leases`: the lease index, a sorted set of the running debates by when their
//!   lease expires (0: waiting for an owner), a hint that lets a scan find debates without
//!   an owner without reading every lease (see `leases`).
//! - `parley:idem:<key>`: idempotency key → `<debate id> <spec digest>` (kept 24 h); a
//!   value without a digest (written by an older build) binds the id only.
//!
//! Kept finite by [`lifecycle`]:
//! - `parley:{<id>}:tasks`: a hash of task bodies, `<task id>#<attempt>` → the [`Task`]
//!   JSON the coordinator stores with the transition's checkpoint (in its script, see
//!   [`RedisStore::save_transition`]) before it publishes the (small) task message;
//!   dropped when that attempt is answered.
//! - `parley:{<id>}:record`: the debate's decision record (JSON, `parley_record`), written
//!   by the coordinator when the debate settles (signed with its key when it has one).
//! - `parley:{<id>}:cancel`: set once a user cancelled the debate; workers skip its tasks.
//! - `parley:{<id>}:failures`: `{count, results, reason}`: how often the debate's actor
//!   failed with NATS and Redis reachable since the debate last made progress.
//! - `parley:{<id>}:snapshot:<version>`: a list of pages of the state JSON for a paged
//!   status reply (kept a minute).
//! - `parley:{calibration}:keys` and `parley:{calibration}:s:<key>`: the completion tokens
//!   of past calls per provider/model and kind that the cluster's estimates learn from,
//!   bounded in keys, samples and time (see [`calibration`]).
//! - `parley:deadletter`: the newest [`lifecycle::DEAD_LETTERS_KEPT`] dead-lettered tasks.
//! - A finished debate's keys ([`lifecycle::DEBATE_KEYS`]) expire after the coordinator's
//!   `retention`; a result stored later takes the state's remaining TTL, and none is
//!   stored once the state is gone.
//!
//! [`Task`]: parley_protocol::Task

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::redis_conn::RedisConnection;
use parley_protocol::{DebateSpec, DebateState, TaskOutcome, TaskResult};
use redis::Script;

pub mod calibration;
mod checkpoint;
pub mod followers;
mod leases;
pub mod lifecycle;
pub use checkpoint::{
    CheckpointWrite, CheckpointWriter, PreparedCheckpoint, CHECKPOINT_FORMAT, FINAL_FACTOR,
    LOG_FACTOR, MAX_DELTAS, SHAPE_IDLE,
};
pub use leases::{LeaseCheck, LEASES};
pub use lifecycle::{Stored, TaskLookup, DEAD_LETTERS_KEPT, DEBATE_KEYS};

#[derive(Debug, thiserror::Error)]
pub enum RedisStoreError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("while decoding {what}: {source}")]
    Decode {
        what: String,
        source: serde_json::Error,
    },
    #[error("while encoding: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("{0}")]
    Inconsistent(&'static str),
    /// A value refused before it reached Redis (e.g. a result with an attempt out of range).
    #[error("refused: {0}")]
    Invalid(String),
    /// A checkpoint written by a newer build in a format this one does not know: not
    /// corrupt, only not this build's to read (a coordinator of the newer build runs it).
    #[error("the checkpoint of {id} is in format {format}; this build reads up to {known}: a coordinator of a newer build runs it")]
    NewerFormat { id: String, format: u32, known: u32 },
}

pub type Result<T> = std::result::Result<T, RedisStoreError>;

const RUNNING: &str = "parley:running";
/// How long one Redis command may take before it fails as timed out.
pub const RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const IDEMPOTENCY_TTL_SECS: u64 = 24 * 3600;
/// How long a write waits for its replicas when `redis_min_replicas` is set: far below a
/// lease's time-to-live, far above a replication round trip.
pub const REPLICA_WAIT: std::time::Duration = std::time::Duration::from_millis(500);
/// After a write's replicas fell short, how long writes do not wait for them.
pub const REPLICA_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// The scripts, built once (a `Script` hashes its source; calls go by `EVALSHA`).
static RENEW: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
static RELEASE: std::sync::OnceLock<Script> = std::sync::OnceLock::new();

const RENEW_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

fn key(id: &str, part: &str) -> String {
    format!("parley:{{{id}}}:{part}")
}

/// The field a result is stored under: the task id for a success, `<task id>#<attempt>`
/// for a failed attempt.
pub fn result_field(result: &TaskResult) -> String {
    match result.outcome {
        TaskOutcome::Ok(_) => result.task_id.clone(),
        TaskOutcome::Error(_) => format!("{}#{}", result.task_id, result.attempt),
    }
}

/// SHA-256 (hex) of a spec's JSON as stored: what an idempotency key is bound to besides
/// the debate id, so the same key with another spec is recognised.
pub fn spec_digest(spec: &DebateSpec) -> Result<String> {
    use sha2::Digest as _;
    let json = serde_json::to_vec(spec)?;
    Ok(crate::dispatch::hex(&sha2::Sha256::digest(&json)))
}

/// A versioned checkpoint as loaded.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub version: u64,
    pub state: DebateState,
}

/// Cheap to clone: one multiplexed, auto-reconnecting connection.
#[derive(Clone)]
pub struct RedisStore {
    /// Reconnects by itself after a Redis restart; through sentinels, follows the master
    /// (see [`crate::redis_conn`]).
    conn: RedisConnection,
    /// Replicas a checkpoint or result write waits for (`WAIT`) before it returns; 0: none.
    min_replicas: usize,
    /// Until when (Unix ms) writes do not wait for replicas: a `WAIT` came back short.
    replicas_short_until: Arc<AtomicU64>,
    /// The shapes of the checkpoints this process wrote last (for deltas).
    shapes: Arc<checkpoint::CheckpointWriter>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisStore")
    }
}

impl RedisStore {
    /// Connects to `url`: one server, or `redis+sentinel://` (see [`crate::redis_conn`]).
    pub async fn connect(url: &str) -> Result<Self> {
        // The client's default (500 ms) is too short for a checkpoint of several MiB on a
        // busy disk (`appendfsync always`): such a write would fail as "timed out".
        let conn = RedisConnection::connect(url, RESPONSE_TIMEOUT).await?;
        Ok(Self {
            conn,
            min_replicas: 0,
            replicas_short_until: Arc::new(AtomicU64::new(0)),
            shapes: Arc::default(),
        })
    }

    /// This store, its checkpoint and result writes waiting (`WAIT n`, at most
    /// [`REPLICA_WAIT`]) until `n` replicas have them before they return (setting
    /// `redis_min_replicas`): with `n ≥ 1` an acknowledged checkpoint or result survives a
    /// failover to a replica. The cost is one replication round trip per write (well under
    /// a millisecond on one host). While fewer than `n` replicas answer (a replica down, or
    /// promoted by a failover and not yet replaced), a write that waited [`REPLICA_WAIT`] in
    /// vain is logged, and the writes of the next [`REPLICA_RECHECK`] do not wait: the
    /// writes stand on the master and the debates go on at full speed, without the
    /// guarantee, until the replicas are back.
    pub fn with_min_replicas(mut self, n: usize) -> Self {
        self.min_replicas = n;
        self
    }

    /// Waits until `min_replicas` replicas have this connection's writes (after a
    /// checkpoint or result write of `what`). Fewer within [`REPLICA_WAIT`] is logged, not
    /// an error: the write is on the master.
    async fn replicate(&self, what: &str, debate_id: &str) -> Result<()> {
        if self.min_replicas == 0 {
            return Ok(());
        }
        let now_ms = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64)
        };
        if now_ms() < self.replicas_short_until.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Every key of a debate is in the slot of its hash tag: under Redis Cluster, WAIT
        // goes to the master that took the write.
        let acked = self
            .conn()
            .wait_replicas(&key(debate_id, "state"), self.min_replicas, REPLICA_WAIT)
            .await?;
        if acked < self.min_replicas as i64 {
            // A master without its replicas may be one the sentinels no longer name (an old
            // master that restarted and calls itself master until they demote it): what is
            // written there is lost when they do. Then the write failed; otherwise it stands
            // on the master and the writes go on without waiting for a while.
            if !self.conn().still_master().await? {
                return Err(RedisStoreError::Redis(redis::RedisError::from(
                    std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        format!(
                            "{what} of debate {debate_id} went to a Redis server the sentinels \
                             no longer name as master; it does not count as written"
                        ),
                    ),
                )));
            }
            self.replicas_short_until.store(
                now_ms() + REPLICA_RECHECK.as_millis() as u64,
                Ordering::Relaxed,
            );
            tracing::warn!(
                debate = %debate_id,
                what,
                acked,
                wanted = self.min_replicas,
                "a Redis write reached fewer replicas than redis_min_replicas; not waiting \
                 for replicas for {REPLICA_RECHECK:?}"
            );
        }
        Ok(())
    }

    fn conn(&self) -> RedisConnection {
        self.conn.clone()
    }

    /// Whether Redis answers (readiness).
    pub async fn ping(&self) -> Result<()> {
        let _: String = redis::cmd("PING").query_async(&mut self.conn()).await?;
        Ok(())
    }

    /// Stores the spec once; returns false when one was already stored (it is kept).
    pub async fn put_spec(&self, id: &str, spec: &DebateSpec) -> Result<bool> {
        let json = serde_json::to_string(spec)?;
        let set: Option<String> = redis::cmd("SET")
            .arg(key(id, "spec"))
            .arg(json)
            .arg("NX")
            .query_async(&mut self.conn())
            .await?;
        Ok(set.is_some())
    }

    pub async fn spec(&self, id: &str) -> Result<Option<DebateSpec>> {
        let raw: Option<String> = redis::cmd("GET")
            .arg(key(id, "spec"))
            .query_async(&mut self.conn())
            .await?;
        decode(raw, || format!("the spec of {id}"))
    }

    /// Stores a result; a success is kept only if none was stored for the task (first
    /// result wins). Returns true when this call stored it.
    pub async fn put_result(&self, result: &TaskResult) -> Result<bool> {
        let json = serde_json::to_string(result)?;
        let set: i64 = redis::cmd("HSETNX")
            .arg(key(&result.debate_id, "results"))
            .arg(result_field(result))
            .arg(json)
            .query_async(&mut self.conn())
            .await?;
        self.replicate("result", &result.debate_id).await?;
        Ok(set == 1)
    }

    /// The successful result of a task, if one is stored.
    pub async fn ok_result(&self, debate_id: &str, task_id: &str) -> Result<Option<TaskResult>> {
        self.field(debate_id, task_id).await
    }

    /// The result of one attempt: the success if any, else that attempt's failure.
    pub async fn result_of(
        &self,
        debate_id: &str,
        task_id: &str,
        attempt: u32,
    ) -> Result<Option<TaskResult>> {
        // Both fields in one round trip.
        let failed = format!("{task_id}#{attempt}");
        let (ok, err): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(key(debate_id, "results"))
            .arg(task_id)
            .arg(&failed)
            .query_async(&mut self.conn())
            .await?;
        match ok {
            Some(raw) => decode(Some(raw), || format!("result {task_id}")),
            None => decode(err, || format!("result {failed}")),
        }
    }

    async fn field(&self, debate_id: &str, field: &str) -> Result<Option<TaskResult>> {
        let raw: Option<String> = redis::cmd("HGET")
            .arg(key(debate_id, "results"))
            .arg(field)
            .query_async(&mut self.conn())
            .await?;
        decode(raw, || format!("result {field}"))
    }

    /// Every stored result of a debate, by field (see [`result_field`]). Undecodable
    /// entries are skipped with a warning.
    pub async fn results(&self, debate_id: &str) -> Result<HashMap<String, TaskResult>> {
        let raw: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(key(debate_id, "results"))
            .query_async(&mut self.conn())
            .await?;
        let mut out = HashMap::with_capacity(raw.len());
        for (field, json) in raw {
            match serde_json::from_str(&json) {
                Ok(r) => {
                    out.insert(field, r);
                }
                Err(e) => {
                    tracing::warn!(debate_id, field, error = %e, "skipping undecodable result")
                }
            }
        }
        Ok(out)
    }

    /// Takes the lease if it is free. Returns true when `owner` now holds it.
    pub async fn acquire_lease(&self, id: &str, owner: &str, ttl_ms: u64) -> Result<bool> {
        let now = self.redis_now_ms().await?;
        let got = self.set_if_absent(key(id, "lease"), owner, ttl_ms).await?;
        if got {
            // The index is a hint (see `leases`): a failure here is not the adoption's.
            if let Err(e) = self.index_leases(&[id], now + ttl_ms).await {
                tracing::warn!(debate = id, error = %e, "cannot update the lease index");
            }
        }
        Ok(got)
    }

    /// Extends the lease if `owner` still holds it; false means it was lost.
    pub async fn renew_lease(&self, id: &str, owner: &str, ttl_ms: u64) -> Result<bool> {
        let ok: i64 = RENEW
            .get_or_init(|| Script::new(RENEW_SCRIPT))
            .key(key(id, "lease"))
            .arg(owner)
            .arg(ttl_ms)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(ok == 1)
    }

    /// Gives the lease up if `owner` holds it.
    pub async fn release_lease(&self, id: &str, owner: &str) -> Result<bool> {
        let released = self.release_if_owner(key(id, "lease"), owner).await?;
        if released {
            // Ownerless now: the next scan of any coordinator adopts it if it still runs.
            if let Err(e) = self.index_leases(&[id], 0).await {
                tracing::warn!(debate = id, error = %e, "cannot update the lease index");
            }
        }
        Ok(released)
    }

    /// Deletes `k` if its value is `owner`; true when it did.
    async fn release_if_owner(&self, k: String, owner: &str) -> Result<bool> {
        let ok: i64 = RELEASE
            .get_or_init(|| Script::new(RELEASE_SCRIPT))
            .key(k)
            .arg(owner)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(ok == 1)
    }

    /// Sets `k` to `owner` for `ttl_ms` unless it exists; true when it did.
    async fn set_if_absent(&self, k: String, owner: &str, ttl_ms: u64) -> Result<bool> {
        let set: Option<String> = redis::cmd("SET")
            .arg(k)
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut self.conn())
            .await?;
        Ok(set.is_some())
    }

    /// Marks a task as being run by `owner` for at most `ttl_ms`; false when another
    /// worker runs it right now.
    pub async fn claim_task(
        &self,
        debate_id: &str,
        task_id: &str,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<bool> {
        self.set_if_absent(key(debate_id, &format!("claim:{task_id}")), owner, ttl_ms)
            .await
    }

    pub async fn release_claim(&self, debate_id: &str, task_id: &str, owner: &str) -> Result<bool> {
        self.release_if_owner(key(debate_id, &format!("claim:{task_id}")), owner)
            .await
    }

    pub async fn lease_owner(&self, id: &str) -> Result<Option<String>> {
        Ok(redis::cmd("GET")
            .arg(key(id, "lease"))
            .query_async(&mut self.conn())
            .await?)
    }

    /// Adds the debate to the running set and, unless it is there already, to the lease
    /// index as waiting for an owner.
    pub async fn mark_running(&self, id: &str) -> Result<()> {
        let _: i64 = redis::cmd("SADD")
            .arg(RUNNING)
            .arg(id)
            .query_async(&mut self.conn())
            .await?;
        let _: i64 = redis::cmd("ZADD")
            .arg(LEASES)
            .arg("NX")
            .arg(0)
            .arg(id)
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }

    /// Removes the debate from the running set and the lease index.
    pub async fn unmark_running(&self, id: &str) -> Result<()> {
        let _: i64 = redis::cmd("SREM")
            .arg(RUNNING)
            .arg(id)
            .query_async(&mut self.conn())
            .await?;
        let _: i64 = redis::cmd("ZREM")
            .arg(LEASES)
            .arg(id)
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }

    pub async fn running(&self) -> Result<Vec<String>> {
        Ok(redis::cmd("SMEMBERS")
            .arg(RUNNING)
            .query_async(&mut self.conn())
            .await?)
    }

    /// Binds an idempotency key to `id` unless it is bound already; returns the debate id
    /// the key is bound to (either `id` or the earlier one).
    pub async fn bind_idempotency_key(&self, idem: &str, id: &str) -> Result<String> {
        let k = format!("parley:idem:{idem}");
        let set: Option<String> = redis::cmd("SET")
            .arg(&k)
            .arg(id)
            .arg("NX")
            .arg("EX")
            .arg(IDEMPOTENCY_TTL_SECS)
            .query_async(&mut self.conn())
            .await?;
        if set.is_some() {
            return Ok(id.to_string());
        }
        let existing: Option<String> = redis::cmd("GET")
            .arg(&k)
            .query_async(&mut self.conn())
            .await?;
        Ok(existing.unwrap_or_else(|| id.to_string()))
    }
}

/// What an idempotency key is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyBinding {
    pub debate_id: String,
    /// Digest of the spec first sent with the key (`None` when bound without one).
    pub spec_digest: Option<String>,
}

impl RedisStore {
    /// Binds an idempotency key to `id` and the digest of the spec sent with it, unless the
    /// key is bound already; returns what the key is bound to (this binding, or the
    /// earlier one, whose digest tells whether the spec was the same).
    pub async fn bind_idempotency_key_for_spec(
        &self,
        idem: &str,
        id: &str,
        spec_digest: &str,
    ) -> Result<IdempotencyBinding> {
        let k = format!("parley:idem:{idem}");
        let value = format!("{id} {spec_digest}");
        let set: Option<String> = redis::cmd("SET")
            .arg(&k)
            .arg(&value)
            .arg("NX")
            .arg("EX")
            .arg(IDEMPOTENCY_TTL_SECS)
            .query_async(&mut self.conn())
            .await?;
        let stored = if set.is_some() {
            value
        } else {
            let existing: Option<String> = redis::cmd("GET")
                .arg(&k)
                .query_async(&mut self.conn())
                .await?;
            existing.unwrap_or(value)
        };
        Ok(match stored.split_once(' ') {
            Some((debate_id, digest)) => IdempotencyBinding {
                debate_id: debate_id.to_string(),
                spec_digest: Some(digest.to_string()),
            },
            None => IdempotencyBinding {
                debate_id: stored,
                spec_digest: None,
            },
        })
    }

    /// The debate's dispatch secret, created (once, `SET NX`) if it has none yet.
    pub async fn ensure_dispatch_secret(&self, id: &str) -> Result<String> {
        let k = key(id, "secret");
        let _: Option<String> = redis::cmd("SET")
            .arg(&k)
            .arg(crate::dispatch::new_secret())
            .arg("NX")
            .query_async(&mut self.conn())
            .await?;
        let secret: Option<String> = redis::cmd("GET")
            .arg(&k)
            .query_async(&mut self.conn())
            .await?;
        secret.ok_or(RedisStoreError::Inconsistent(
            "the dispatch secret vanished right after it was written",
        ))
    }

    /// Puts the debate's dispatch secret back (the coordinator's copy) when Redis lost it
    /// (a failover that dropped the key, an operator's mistake), so tokens already issued
    /// verify again. Only while the debate's state exists, with the state's TTL if it has
    /// one; an existing secret is never replaced. True when it was put back.
    pub async fn restore_dispatch_secret(&self, id: &str, secret: &str) -> Result<bool> {
        static RESTORE: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
        let restored: i64 = RESTORE
            .get_or_init(|| {
                Script::new(
                    r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX') then return 0 end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
",
                )
            })
            .key(key(id, "state"))
            .key(key(id, "secret"))
            .arg(secret)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(restored == 1)
    }

    /// The debate's dispatch secret, if it has one (a debate that does not exist has none).
    pub async fn dispatch_secret(&self, id: &str) -> Result<Option<String>> {
        Ok(redis::cmd("GET")
            .arg(key(id, "secret"))
            .query_async(&mut self.conn())
            .await?)
    }
}

/// Decodes an optional stored JSON value; `what` names it in the error.
fn decode<T: serde::de::DeserializeOwned>(
    raw: Option<String>,
    what: impl FnOnce() -> String,
) -> Result<Option<T>> {
    raw.map(|r| {
        serde_json::from_str(&r).map_err(|source| RedisStoreError::Decode {
            what: what(),
            source,
        })
    })
    .transpose()
}
