//! The parts of the store that keep a debate finite: task bodies by reference, results
//! that never outlive their debate, the cancel mark, the count of failed adoptions,
//! retention (expiry) of finished debates, status snapshots and the dead-letter list.
//! Key layout: see the parent module.

use std::time::Duration;

use parley_protocol::{TaskOutcome, TaskResult};
use redis::Script;

use super::{decode, key, result_field, RedisStore, Result};

/// Every key a debate owns that has no TTL of its own (lease, claims and snapshots have
/// one): what retention expires and `retry` keeps again.
pub const DEBATE_KEYS: [&str; 8] = [
    "spec", "state", "results", "tasks", "cancel", "failures", "secret", "record",
];

/// Entries kept in `parley:deadletter` (the newest first).
pub const DEAD_LETTERS_KEPT: isize = 1000;
const DEAD_LETTERS: &str = "parley:deadletter";

static STORE_RESULT: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
static RENEW_CHECK_CANCEL: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
static RECORD_FAILURE: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
static EXPIRE_ALL: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
static PERSIST_ALL: std::sync::OnceLock<Script> = std::sync::OnceLock::new();

/// KEYS: state, results, tasks. ARGV: field, result JSON, task id, attempt, 1 if a success.
/// Writes nothing when the debate's state is gone (expired or deleted), so a late result
/// never re-creates a key without a TTL; the results hash takes the state's remaining TTL.
/// A success drops the task bodies of its attempt and of at most 31 attempts before it
/// (earlier attempts' bodies were dropped by their own failures, or expire with the
/// debate): the loop runs at most 32 times whatever the attempt says (it is also checked
/// before the script runs, [`TaskResult::validate`]).
const STORE_RESULT_SCRIPT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local set = redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2])
if ARGV[5] == '1' then
  local last = tonumber(ARGV[4]) or 0
  for a = math.max(1, last - 31), last do redis.call('HDEL', KEYS[3], ARGV[3] .. '#' .. a) end
else
  redis.call('HDEL', KEYS[3], ARGV[3] .. '#' .. ARGV[4])
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return set
";

/// KEYS: lease, cancel. ARGV: owner, ttl ms. 0: lease lost; 1: renewed; 2: renewed and a
/// cancel is pending.
const RENEW_CHECK_CANCEL_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then return 2 end
return 1
";

/// KEYS: failures, results. ARGV: reason. A failure after the debate made progress (its
/// stored results changed since the last failure) starts the count again at 1.
const RECORD_FAILURE_SCRIPT: &str = r"
local n = redis.call('HLEN', KEYS[2])
local prev = tonumber(redis.call('HGET', KEYS[1], 'results') or '-1')
local count = tonumber(redis.call('HGET', KEYS[1], 'count') or '0')
if n ~= prev then count = 1 else count = count + 1 end
redis.call('HSET', KEYS[1], 'count', count, 'results', n, 'reason', ARGV[1])
return count
";

const EXPIRE_ALL_SCRIPT: &str = r"
for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ARGV[1]) end
return 1
";

const PERSIST_ALL_SCRIPT: &str = r"
for _, k in ipairs(KEYS) do redis.call('PERSIST', k) end
return 1
";

/// What [`RedisStore::store_result`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// This call stored it.
    New,
    /// A result was already stored under its field (first one wins).
    Existing,
    /// The debate is gone (expired after its retention, or deleted): nothing was written.
    DebateGone,
}

/// What a worker needs to know about a task message before running it, read in one round
/// trip ([`RedisStore::lookup_task`]).
#[derive(Debug, Clone, Default)]
pub struct TaskLookup {
    /// The task's successful result, if any (it never runs again).
    pub done: Option<TaskResult>,
    /// This attempt's stored failure, if any (this attempt was answered).
    pub answered: Option<TaskResult>,
    /// The debate was cancelled: its tasks are skipped.
    pub cancelled: bool,
    /// The debate's state exists.
    pub debate_exists: bool,
    /// The task's JSON as the coordinator stored it for this attempt.
    pub body: Option<String>,
}

fn debate_keys(id: &str) -> Vec<String> {
    DEBATE_KEYS.iter().map(|p| key(id, p)).collect()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisStore {
    /// Stores a result (first result per field wins) unless the debate is gone; a success
    /// also drops the task's stored bodies, a failure that attempt's body.
    /// A result that is not valid ([`TaskResult::validate`]: an attempt out of range, sizes)
    /// is refused before any script runs.
    pub async fn store_result(&self, result: &TaskResult) -> Result<Stored> {
        result
            .validate()
            .map_err(|e| super::RedisStoreError::Invalid(format!("a task result: {e}")))?;
        let json = serde_json::to_string(result)?;
        let ok = matches!(result.outcome, TaskOutcome::Ok(_));
        let id = &result.debate_id;
        let r: i64 = STORE_RESULT
            .get_or_init(|| Script::new(STORE_RESULT_SCRIPT))
            .key(key(id, "state"))
            .key(key(id, "results"))
            .key(key(id, "tasks"))
            .arg(result_field(result))
            .arg(json)
            .arg(&result.task_id)
            .arg(result.attempt)
            .arg(if ok { "1" } else { "0" })
            .invoke_async(&mut self.conn())
            .await?;
        // An existing result too: the write that stored it may not have reached the
        // replicas yet (its worker died before its WAIT).
        if r >= 0 {
            self.replicate("result", id).await?;
        }
        Ok(match r {
            1 => Stored::New,
            0 => Stored::Existing,
            _ => Stored::DebateGone,
        })
    }

    /// The stored results under `fields` (see [`result_field`]), by field: what a
    /// coordinator polls for its in-flight tasks (never the whole hash, which holds every
    /// result of the debate). Undecodable entries are skipped with a warning.
    pub async fn results_of(
        &self,
        debate_id: &str,
        fields: &[String],
    ) -> Result<std::collections::HashMap<String, TaskResult>> {
        let mut out = std::collections::HashMap::new();
        if fields.is_empty() {
            return Ok(out);
        }
        let raw: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(key(debate_id, "results"))
            .arg(fields)
            .query_async(&mut self.conn())
            .await?;
        for (field, json) in fields.iter().zip(raw) {
            let Some(json) = json else { continue };
            match serde_json::from_str(&json) {
                Ok(r) => {
                    out.insert(field.clone(), r);
                }
                Err(e) => {
                    tracing::warn!(debate_id, field, error = %e, "skipping undecodable result")
                }
            }
        }
        Ok(out)
    }

    /// Stores task bodies (`(field, Task JSON)`, field = `<task id>#<attempt>`) before
    /// their messages are published.
    pub async fn put_task_bodies(
        &self,
        debate_id: &str,
        bodies: &[(String, String)],
    ) -> Result<()> {
        if bodies.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("HSET");
        cmd.arg(key(debate_id, "tasks"));
        for (field, json) in bodies {
            cmd.arg(field).arg(json);
        }
        let _: i64 = cmd.query_async(&mut self.conn()).await?;
        Ok(())
    }

    /// Drops one stored task body (its task is answered).
    pub async fn drop_task_body(&self, debate_id: &str, field: &str) -> Result<()> {
        let _: i64 = redis::cmd("HDEL")
            .arg(key(debate_id, "tasks"))
            .arg(field)
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }

    /// Everything a worker checks before running attempt `attempt` of `task_id`.
    pub async fn lookup_task(
        &self,
        debate_id: &str,
        task_id: &str,
        attempt: u32,
    ) -> Result<TaskLookup> {
        let field = format!("{task_id}#{attempt}");
        let (done, answered, cancelled, exists, body): (
            Option<String>,
            Option<String>,
            bool,
            bool,
            Option<String>,
        ) = redis::pipe()
            .cmd("HGET")
            .arg(key(debate_id, "results"))
            .arg(task_id)
            .cmd("HGET")
            .arg(key(debate_id, "results"))
            .arg(&field)
            .cmd("EXISTS")
            .arg(key(debate_id, "cancel"))
            .cmd("EXISTS")
            .arg(key(debate_id, "state"))
            .cmd("HGET")
            .arg(key(debate_id, "tasks"))
            .arg(&field)
            .query_async(&mut self.conn())
            .await?;
        Ok(TaskLookup {
            done: decode(done, || format!("result {task_id}"))?,
            answered: decode(answered, || format!("result {field}"))?,
            cancelled,
            debate_exists: exists,
            body,
        })
    }

    /// Records that a user cancelled the debate (durable; never cleared). Workers skip its
    /// tasks; its owner applies the cancel at its next tick, an adoption before anything else.
    pub async fn mark_cancelled(&self, id: &str) -> Result<()> {
        let _: () = redis::cmd("SET")
            .arg(key(id, "cancel"))
            .arg("1")
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }

    pub async fn cancel_requested(&self, id: &str) -> Result<bool> {
        Ok(redis::cmd("EXISTS")
            .arg(key(id, "cancel"))
            .query_async(&mut self.conn())
            .await?)
    }

    /// Renews the lease like [`RedisStore::renew_lease`] and reports a pending cancel in the
    /// same round trip: `None` when the lease was lost, else `Some(cancel requested)`.
    pub async fn renew_lease_checking_cancel(
        &self,
        id: &str,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<Option<bool>> {
        let r: i64 = RENEW_CHECK_CANCEL
            .get_or_init(|| Script::new(RENEW_CHECK_CANCEL_SCRIPT))
            .key(key(id, "lease"))
            .key(key(id, "cancel"))
            .arg(owner)
            .arg(ttl_ms)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(match r {
            0 => None,
            n => Some(n == 2),
        })
    }

    /// Counts one failure of the debate's actor (with NATS and Redis reachable) and returns
    /// the count: failures since the debate last made progress (stored results changed).
    pub async fn record_actor_failure(&self, id: &str, reason: &str) -> Result<u32> {
        let n: u32 = RECORD_FAILURE
            .get_or_init(|| Script::new(RECORD_FAILURE_SCRIPT))
            .key(key(id, "failures"))
            .key(key(id, "results"))
            .arg(reason)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(n)
    }

    /// The failure count and the last reason.
    pub async fn actor_failures(&self, id: &str) -> Result<(u32, Option<String>)> {
        let (count, reason): (Option<u32>, Option<String>) = redis::cmd("HMGET")
            .arg(key(id, "failures"))
            .arg("count")
            .arg("reason")
            .query_async(&mut self.conn())
            .await?;
        Ok((count.unwrap_or(0), reason))
    }

    /// Forgets the failures (a user retries the debate).
    pub async fn clear_actor_failures(&self, id: &str) -> Result<()> {
        let _: i64 = redis::cmd("DEL")
            .arg(key(id, "failures"))
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }

    /// Every key of a finished debate expires after `ttl` (retention).
    pub async fn expire_debate(&self, id: &str, ttl: Duration) -> Result<()> {
        let mut inv = EXPIRE_ALL
            .get_or_init(|| Script::new(EXPIRE_ALL_SCRIPT))
            .prepare_invoke();
        for k in debate_keys(id) {
            inv.key(k);
        }
        let _: i64 = inv.arg(millis(ttl)).invoke_async(&mut self.conn()).await?;
        Ok(())
    }

    /// Stores the debate's decision record (JSON), replacing an older one; it expires with
    /// the debate's other keys ([`RedisStore::expire_debate`]).
    pub async fn put_record(&self, id: &str, record_json: &str) -> Result<()> {
        let () = redis::cmd("SET")
            .arg(key(id, "record"))
            .arg(record_json)
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }

    /// The debate's decision record (JSON), when one was stored.
    pub async fn record(&self, id: &str) -> Result<Option<String>> {
        Ok(redis::cmd("GET")
            .arg(key(id, "record"))
            .query_async(&mut self.conn())
            .await?)
    }

    /// The debate's keys no longer expire (a retried debate runs again).
    pub async fn persist_debate(&self, id: &str) -> Result<()> {
        let mut inv = PERSIST_ALL
            .get_or_init(|| Script::new(PERSIST_ALL_SCRIPT))
            .prepare_invoke();
        for k in debate_keys(id) {
            inv.key(k);
        }
        let _: i64 = inv.invoke_async(&mut self.conn()).await?;
        Ok(())
    }

    /// Remaining time to live of the debate's state; `None` when it does not expire (or
    /// does not exist).
    pub async fn state_ttl(&self, id: &str) -> Result<Option<Duration>> {
        let ms: i64 = redis::cmd("PTTL")
            .arg(key(id, "state"))
            .query_async(&mut self.conn())
            .await?;
        Ok((ms >= 0).then(|| Duration::from_millis(ms as u64)))
    }

    /// Stores a snapshot of a state JSON as its pages (replacing any copy), kept for `ttl`.
    pub async fn put_snapshot(
        &self,
        id: &str,
        version: u64,
        pages: &[&str],
        ttl: Duration,
    ) -> Result<()> {
        let k = key(id, &format!("snapshot:{version}"));
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("DEL").arg(&k).ignore();
        for chunk in pages.chunks(64) {
            pipe.cmd("RPUSH").arg(&k).arg(chunk).ignore();
        }
        pipe.cmd("PEXPIRE").arg(&k).arg(millis(ttl)).ignore();
        let () = pipe.query_async(&mut self.conn()).await?;
        Ok(())
    }

    /// Page `page` of a stored snapshot and the number of pages; `None` once it expired.
    pub async fn snapshot_page(
        &self,
        id: &str,
        version: u64,
        page: u32,
    ) -> Result<Option<(String, u32)>> {
        let k = key(id, &format!("snapshot:{version}"));
        let (data, pages): (Option<String>, u32) = redis::pipe()
            .cmd("LINDEX")
            .arg(&k)
            .arg(page)
            .cmd("LLEN")
            .arg(&k)
            .query_async(&mut self.conn())
            .await?;
        Ok(data.map(|d| (d, pages)))
    }

    /// Records a dead-lettered task (JSON) in the bounded `parley:deadletter` list.
    pub async fn record_dead_letter(&self, entry: &str) -> Result<()> {
        let () = redis::pipe()
            .atomic()
            .cmd("LPUSH")
            .arg(DEAD_LETTERS)
            .arg(entry)
            .ignore()
            .cmd("LTRIM")
            .arg(DEAD_LETTERS)
            .arg(0)
            .arg(DEAD_LETTERS_KEPT - 1)
            .ignore()
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }

    /// The newest `n` dead letters.
    pub async fn dead_letters(&self, n: usize) -> Result<Vec<String>> {
        Ok(redis::cmd("LRANGE")
            .arg(DEAD_LETTERS)
            .arg(0)
            .arg(n.saturating_sub(1))
            .query_async(&mut self.conn())
            .await?)
    }
}
