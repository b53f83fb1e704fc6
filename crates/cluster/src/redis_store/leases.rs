//! Leases at scale: one coordinator renews all of its debates' leases in one pass, and
//! finds debates without an owner without looking at every running debate.
//!
//! # The lease index, `parley:leases`
//! A sorted set: debate id → when its lease expires (Unix ms, as its owner last renewed
//! it), 0 for a debate that waits for an owner (accepted and not started, released by a
//! coordinator that stopped). It is a hint, never the truth: the lease key decides who
//! owns a debate (`SET NX PX`, owner-checked scripts), so a stale or missing entry costs at
//! most a wasted adoption attempt or a later takeover, never a debate run twice.
//! - [`RedisStore::mark_running`] adds the debate at 0 (unless it is in already);
//!   [`RedisStore::unmark_running`] removes it.
//! - Taking a lease and each renewal pass set its owner's expiry (`ZADD XX`: a debate
//!   settled meanwhile is not added back); releasing a lease sets 0.
//! - A scan asks only for the entries whose expiry has passed
//!   ([`RedisStore::ownerless`]): the work of finding orphans is the number of orphans,
//!   not the number of running debates.
//! - Expiries are on Redis's clock (`TIME`), not the coordinators': a coordinator whose
//!   clock runs ahead would otherwise delay the takeover of its debates by as much. (On
//!   Redis Cluster, `TIME` comes from any node: their clocks should agree within the
//!   lease TTL; a disagreement costs a wasted adoption attempt or a later takeover.)
//! - A debate in `parley:running` without an entry (accepted by an older build, or an
//!   index write lost in a Redis failover) is added back at 0 by
//!   [`RedisStore::reconcile_lease_index`], which walks the running set in pages.

use futures::StreamExt as _;
use redis::Script;

use super::{key, RedisStore, Result, RUNNING};

/// The lease index (see the module docs).
pub const LEASES: &str = "parley:leases";
/// Renewals in flight at once in a pass (one connection pipelines them).
const RENEWALS_IN_FLIGHT: usize = 256;
/// Members per `ZADD` / `SSCAN` page.
const PAGE: usize = 1000;

static KEEP: std::sync::OnceLock<Script> = std::sync::OnceLock::new();

/// KEYS: lease, cancel, results. ARGV: owner, ttl ms. `{0|1|2, results}`: 0 the lease is
/// lost, 1 renewed, 2 renewed and a cancel is pending; `results` the number of stored
/// results (a change is news for a debate that is not looking).
const KEEP_SCRIPT: &str = r"
local n = redis.call('HLEN', KEYS[3])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, n} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then return {2, n} end
return {1, n}
";

/// One debate's lease after a renewal pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseCheck {
    /// The lease is still this owner's (renewed).
    pub held: bool,
    /// A user asked to cancel the debate.
    pub cancel: bool,
    /// How many results the debate has stored (fields of its results hash).
    pub results: u64,
}

impl RedisStore {
    /// Now on Redis's clock, in Unix milliseconds.
    pub(super) async fn redis_now_ms(&self) -> Result<u64> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut self.conn()).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// Renews the leases of `ids` that `owner` holds, for `ttl_ms`, and reports each one
    /// (in the order of `ids`; an error for a debate whose renewal failed), then records
    /// the new expiries in the lease index. One pass costs one script call per debate,
    /// pipelined on the store's connection, and a `ZADD` per thousand debates held.
    pub async fn keep_leases(
        &self,
        ids: &[String],
        owner: &str,
        ttl_ms: u64,
    ) -> Vec<Result<LeaseCheck>> {
        let script = KEEP.get_or_init(|| Script::new(KEEP_SCRIPT));
        // Taken before the renewals: an expiry never later than the lease's own.
        let expires = self.redis_now_ms().await.map(|now| now + ttl_ms);
        // (Built up front, owning what they use: a stream adapter's closure taking a
        // borrowed id would make the pass's future generic over lifetimes, and unspawnable.)
        let calls: Vec<_> = ids
            .iter()
            .map(|id| {
                let mut invocation = script.prepare_invoke();
                invocation
                    .key(key(id, "lease"))
                    .key(key(id, "cancel"))
                    .key(key(id, "results"))
                    .arg(owner)
                    .arg(ttl_ms);
                let mut conn = self.conn();
                async move {
                    let (status, results): (i64, u64) = invocation.invoke_async(&mut conn).await?;
                    Ok(LeaseCheck {
                        held: status != 0,
                        cancel: status == 2,
                        results,
                    })
                }
            })
            .collect();
        let checks: Vec<Result<LeaseCheck>> = futures::stream::iter(calls)
            .buffered(RENEWALS_IN_FLIGHT)
            .collect()
            .await;
        let held: Vec<&String> = ids
            .iter()
            .zip(&checks)
            .filter(|(_, c)| matches!(c, Ok(c) if c.held))
            .map(|(id, _)| id)
            .collect();
        if let Err(e) = async { self.index_leases(&held, expires?).await }.await {
            // A hint only: other coordinators may try (and fail) to adopt these meanwhile.
            tracing::warn!(error = %e, "cannot update the lease index");
        }
        checks
    }

    /// Sets the index entries of `ids` (those in it) to `expires_ms`.
    pub(super) async fn index_leases<S: AsRef<str>>(
        &self,
        ids: &[S],
        expires_ms: u64,
    ) -> Result<()> {
        for page in ids.chunks(PAGE) {
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(LEASES).arg("XX");
            for id in page {
                cmd.arg(expires_ms).arg(id.as_ref());
            }
            let _: i64 = cmd.query_async(&mut self.conn()).await?;
        }
        Ok(())
    }

    /// Sets the debate's index entry (if any) from its lease key: the lease's expiry, or 0
    /// when nobody holds it.
    pub async fn reindex_lease(&self, id: &str) -> Result<()> {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key(id, "lease"))
            .query_async(&mut self.conn())
            .await?;
        let expires = match u64::try_from(ttl) {
            Ok(t) => self.redis_now_ms().await? + t,
            Err(_) => 0,
        };
        self.index_leases(&[id], expires).await
    }

    /// Up to `limit` debates of the lease index whose lease has expired (or that wait for
    /// an owner), the longest-expired first.
    pub async fn ownerless(&self, limit: usize) -> Result<Vec<String>> {
        Ok(redis::cmd("ZRANGEBYSCORE")
            .arg(LEASES)
            .arg("-inf")
            .arg(self.redis_now_ms().await?)
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.conn())
            .await?)
    }

    /// Adds every running debate missing from the lease index at 0 (ownerless), a page of
    /// the running set at a time; returns how many it added.
    pub async fn reconcile_lease_index(&self) -> Result<u64> {
        let mut cursor: u64 = 0;
        let mut added = 0;
        loop {
            let (next, ids): (u64, Vec<String>) = redis::cmd("SSCAN")
                .arg(RUNNING)
                .arg(cursor)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut self.conn())
                .await?;
            if !ids.is_empty() {
                let mut cmd = redis::cmd("ZADD");
                cmd.arg(LEASES).arg("NX");
                for id in &ids {
                    cmd.arg(0).arg(id);
                }
                let n: u64 = cmd.query_async(&mut self.conn()).await?;
                added += n;
            }
            if next == 0 {
                return Ok(added);
            }
            cursor = next;
        }
    }
}
