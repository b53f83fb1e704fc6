//! What a cluster's estimates learn: the completion tokens of past calls, per
//! provider/model and kind of call (the model is [`parley_protocol::calibration`]).
//!
//! # Keys (one hash tag, so the script works on Redis Cluster)
//! - `parley:{calibration}:keys`: a sorted set of the sample keys (the [`Key`] as JSON) by
//!   when a sample was last added (Redis's clock, Unix ms).
//! - `parley:{calibration}:s:<key JSON>`: a list of completion tokens, newest first.
//!
//! # Bounds
//! Models come from submissions, so nothing here grows with them: a list keeps its newest
//! [`SAMPLES_KEPT`] samples, the index at most [`KEYS_KEPT`] keys (adding a key past it
//! drops the least recently sampled one with its list), and every key expires
//! [`SAMPLES_TTL`] after its last sample. One script adds a sample and enforces all three,
//! so concurrent coordinators cannot overshoot. At most `KEYS_KEPT × SAMPLES_KEPT` numbers
//! are kept, and [`RedisStore::calibration`] reads them all in two round trips.

use std::time::Duration;

use parley_protocol::calibration::{CalibrationEntry, CalibrationReply, Key};
use redis::Script;

use super::{RedisStore, Result};

/// Samples kept per key (the newest).
pub const SAMPLES_KEPT: usize = 100;
/// Keys kept (the most recently sampled).
pub const KEYS_KEPT: usize = 256;
/// A key with no sample for this long expires.
pub const SAMPLES_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

const INDEX: &str = "parley:{calibration}:keys";
const LIST_PREFIX: &str = "parley:{calibration}:s:";

static RECORD: std::sync::OnceLock<Script> = std::sync::OnceLock::new();

/// KEYS: the index, the key's list. ARGV: the member, the tokens, samples kept, keys kept,
/// the TTL in seconds, the lists' prefix.
const RECORD_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[5])
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
redis.call('EXPIRE', KEYS[2], ttl)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl * 1000)
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if over > 0 then
  local old = redis.call('ZPOPMIN', KEYS[1], over)
  for i = 1, #old, 2 do
    redis.call('DEL', ARGV[6] .. old[i])
  end
end
redis.call('EXPIRE', KEYS[1], ttl)
return 1
";

impl RedisStore {
    /// Adds one call's completion tokens to `key`'s samples (see the module docs).
    pub async fn record_completion(&self, key: &Key, tokens: u64) -> Result<()> {
        let member = serde_json::to_string(key)?;
        let script = RECORD.get_or_init(|| Script::new(RECORD_SCRIPT));
        let _: i64 = script
            .key(INDEX)
            .key(format!("{LIST_PREFIX}{member}"))
            .arg(&member)
            .arg(tokens)
            .arg(SAMPLES_KEPT)
            .arg(KEYS_KEPT)
            .arg(SAMPLES_TTL.as_secs())
            .arg(LIST_PREFIX)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(())
    }

    /// Every key's samples, newest first (a member that does not decode is skipped).
    pub async fn calibration(&self) -> Result<CalibrationReply> {
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(INDEX)
            .arg(0)
            .arg(KEYS_KEPT as i64 - 1)
            .query_async(&mut self.conn())
            .await?;
        if members.is_empty() {
            return Ok(CalibrationReply::default());
        }
        let mut pipe = redis::pipe();
        for m in &members {
            pipe.cmd("LRANGE")
                .arg(format!("{LIST_PREFIX}{m}"))
                .arg(0)
                .arg(SAMPLES_KEPT as i64 - 1);
        }
        let lists: Vec<Vec<u64>> = pipe.query_async(&mut self.conn()).await?;
        let entries = members
            .iter()
            .zip(lists)
            .filter(|(_, tokens)| !tokens.is_empty())
            .filter_map(|(m, tokens)| {
                let key: Key = serde_json::from_str(m).ok()?;
                Some(CalibrationEntry { key, tokens })
            })
            .collect();
        Ok(CalibrationReply { entries })
    }

    /// How many sample keys the index holds (for tests and operators).
    pub async fn calibration_keys(&self) -> Result<usize> {
        Ok(redis::cmd("ZCARD")
            .arg(INDEX)
            .query_async(&mut self.conn())
            .await?)
    }
}
