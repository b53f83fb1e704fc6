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
//!
//! # Writing
//! A coordinator adds a sample for every result it applies, through [`CompletionSamples`]:
//! a buffer and one writer task that takes everything buffered in one script call
//! ([`RedisStore::record_completions`]) as soon as it has something and the call before is
//! done (a group commit). An idle cluster writes each sample at once, as it comes; a busy
//! one writes the samples of many results in one round trip instead of one each. A sample
//! is best effort: a failed write loses the samples it carried, never a debate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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

/// Sample keys written by one script call, at most (a bigger batch takes several).
const KEYS_PER_CALL: usize = 64;

static RECORD: std::sync::OnceLock<Script> = std::sync::OnceLock::new();

/// KEYS: the index, then one list per sample key. ARGV: samples kept, keys kept, the TTL
/// in seconds, the lists' prefix, then for each list: its member, the number of samples,
/// the samples (oldest first).
const RECORD_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kept = tonumber(ARGV[1])
local ttl = tonumber(ARGV[3])
local a = 5
for k = 2, #KEYS do
  local member = ARGV[a]
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  for i = 1, n do
    redis.call('LPUSH', KEYS[k], ARGV[a])
    a = a + 1
  end
  redis.call('LTRIM', KEYS[k], 0, kept - 1)
  redis.call('EXPIRE', KEYS[k], ttl)
  redis.call('ZADD', KEYS[1], now, member)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl * 1000)
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[2])
if over > 0 then
  local old = redis.call('ZPOPMIN', KEYS[1], over)
  for i = 1, #old, 2 do
    redis.call('DEL', ARGV[4] .. old[i])
  end
end
redis.call('EXPIRE', KEYS[1], ttl)
return 1
";

/// Samples waiting to be written, by key (each key's oldest first).
type Batch = HashMap<Key, Vec<u64>>;

/// Completion samples on their way to Redis (see the module docs): [`add`] buffers a
/// sample and wakes the writer task [`CompletionSamples::start`] spawned.
///
/// [`add`]: CompletionSamples::add
pub struct CompletionSamples {
    buffer: Mutex<Batch>,
    wake: Arc<tokio::sync::Notify>,
}

impl CompletionSamples {
    /// A buffer and its writer task (which ends with the last handle).
    pub fn start(store: RedisStore) -> Arc<Self> {
        let wake = Arc::new(tokio::sync::Notify::new());
        let samples = Arc::new(Self {
            buffer: Mutex::new(HashMap::new()),
            wake: wake.clone(),
        });
        let weak = Arc::downgrade(&samples);
        tokio::spawn(async move {
            loop {
                let notified = wake.notified();
                let Some(batch) = weak.upgrade().map(|s| s.take()) else {
                    return;
                };
                if batch.is_empty() {
                    // The handles may all go meanwhile: look again now and then.
                    let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
                    continue;
                }
                if let Err(e) = store.record_completions(&batch).await {
                    let n: usize = batch.values().map(Vec::len).sum();
                    tracing::warn!(error = %e, samples = n, "cannot record completion samples for estimates");
                }
            }
        });
        samples
    }

    /// Adds one call's completion tokens to `key`'s samples.
    /// Adds one call's completion tokens to `key`'s samples. While a write is slow, the
    /// buffer keeps what Redis would: the newest [`SAMPLES_KEPT`] samples of at most
    /// [`KEYS_KEPT`] keys (a sample of a key past that is dropped).
    pub fn add(&self, key: Key, tokens: u64) {
        if let Ok(mut b) = self.buffer.lock() {
            if b.len() >= KEYS_KEPT && !b.contains_key(&key) {
                return;
            }
            let samples = b.entry(key).or_default();
            if samples.len() >= SAMPLES_KEPT {
                samples.remove(0);
            }
            samples.push(tokens);
        }
        self.wake.notify_one();
    }

    fn take(&self) -> Batch {
        self.buffer
            .lock()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default()
    }
}

impl RedisStore {
    /// Adds one call's completion tokens to `key`'s samples (see the module docs).
    pub async fn record_completion(&self, key: &Key, tokens: u64) -> Result<()> {
        self.record_completions(&HashMap::from([(key.clone(), vec![tokens])]))
            .await
    }

    /// Adds each key's samples (oldest first), [`KEYS_PER_CALL`] keys a script call.
    pub async fn record_completions(&self, batch: &Batch) -> Result<()> {
        let mut keys: Vec<(&Key, &Vec<u64>)> =
            batch.iter().filter(|(_, t)| !t.is_empty()).collect();
        keys.sort();
        let script = RECORD.get_or_init(|| Script::new(RECORD_SCRIPT));
        for chunk in keys.chunks(KEYS_PER_CALL) {
            let mut call = script.key(INDEX);
            call.arg(SAMPLES_KEPT)
                .arg(KEYS_KEPT)
                .arg(SAMPLES_TTL.as_secs())
                .arg(LIST_PREFIX);
            for (key, tokens) in chunk {
                let member = serde_json::to_string(key)?;
                call.key(format!("{LIST_PREFIX}{member}"))
                    .arg(member)
                    .arg(tokens.len());
                for t in tokens.iter() {
                    call.arg(*t);
                }
            }
            let _: i64 = call.invoke_async(&mut self.conn()).await?;
        }
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
