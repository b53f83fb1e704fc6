//! Per-provider rate limits: requests/min and tokens/min, optionally per model.
//!
//! Both limits are enforced with GCRA (the generic cell rate algorithm): each key keeps a
//! "theoretical arrival time" (TAT); a request of cost `c` is allowed when
//! `max(TAT, now) + c·T − τ ≤ now`, where `T = 60 s / (limit × headroom)` is the emission
//! interval and `τ` the burst tolerance. No timers, one value per key.
//!
//! - [`RedisLimiter`] runs the check as one Lua script on Redis, with Redis server time, so
//!   every worker replica shares one allowance per API key. The request and token keys of a
//!   provider share a hash tag (`parley:rl:{provider/model}:...`), so the script touches one
//!   slot and works on Redis Cluster.
//! - [`LocalLimiter`] is the same algorithm in-process, for the embedded mode.
//!
//! Tokens are charged with an estimate before the call ([`estimate_tokens`]) and corrected
//! with the real usage afterwards ([`Limiter::adjust_tokens`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parley_protocol::ProviderLimits;

/// Share of the configured limit actually used, so clock skew and in-flight requests never
/// push a provider over its own limit.
pub const HEADROOM: f64 = 0.98;

/// The limits that apply to one (provider, model): requests/min and tokens/min.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u32>,
}

impl Rates {
    pub fn is_limited(&self) -> bool {
        self.requests_per_minute.is_some() || self.tokens_per_minute.is_some()
    }
}

/// The limits a key resolves to: the model's entry overrides the provider's, per field.
pub fn rates_for(
    limits: &BTreeMap<String, ProviderLimits>,
    provider: &str,
    model: &str,
) -> (String, Rates) {
    let Some(p) = limits.get(provider) else {
        return (
            provider.to_string(),
            Rates {
                requests_per_minute: None,
                tokens_per_minute: None,
            },
        );
    };
    match p.models.get(model) {
        Some(m) => (
            format!("{provider}/{model}"),
            Rates {
                requests_per_minute: m.requests_per_minute.or(p.requests_per_minute),
                tokens_per_minute: m.tokens_per_minute.or(p.tokens_per_minute),
            },
        ),
        None => (
            provider.to_string(),
            Rates {
                requests_per_minute: p.requests_per_minute,
                tokens_per_minute: p.tokens_per_minute,
            },
        ),
    }
}

/// A rough token count for text: one token per 4 characters, at least 1.
pub fn estimate_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4).max(1)
}

/// GCRA parameters for one limit, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// Emission interval per unit of cost.
    pub interval_us: u64,
    /// Burst tolerance.
    pub tolerance_us: u64,
}

impl Gcra {
    /// `per_minute` units per minute (with [`HEADROOM`]) and a burst of `burst` units.
    pub fn per_minute(per_minute: u32, burst: u32) -> Self {
        let rate = (per_minute.max(1) as f64) * HEADROOM;
        let interval_us = ((60_000_000.0 / rate).ceil() as u64).max(1);
        Self {
            interval_us,
            tolerance_us: interval_us * u64::from(burst.max(1) - 1),
        }
    }

    /// Pure GCRA step: given the stored TAT and `now`, returns `Ok(new_tat)` or
    /// `Err(wait_us)`. A cost larger than the burst is allowed when the key is idle
    /// (otherwise it could never pass).
    pub fn check(&self, tat: u64, now: u64, cost: u64) -> Result<u64, u64> {
        let base = tat.max(now);
        let new_tat = base + self.interval_us * cost;
        let tolerance = self
            .tolerance_us
            .max(self.interval_us * cost.saturating_sub(1));
        let allow_at = new_tat.saturating_sub(tolerance + self.interval_us);
        if allow_at <= now {
            Ok(new_tat)
        } else {
            Err(allow_at - now)
        }
    }
}

/// What a limiter decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// Not before this long.
    Wait(Duration),
}

#[async_trait]
pub trait Limiter: Send + Sync + std::fmt::Debug {
    /// Takes one request and `tokens` estimated tokens from `key`'s allowance, or says how
    /// long to wait. Nothing is taken when the answer is `Wait`.
    async fn acquire(&self, key: &str, rates: Rates, tokens: u64) -> Result<Decision, String>;
    /// Corrects the token charge of an earlier `acquire` by `delta` (real − estimate).
    async fn adjust_tokens(&self, key: &str, rates: Rates, delta: i64) -> Result<(), String>;
}

/// Token bursts may use a tenth of the minute's allowance at once.
fn token_burst(tpm: u32) -> u32 {
    (tpm / 10).max(1)
}

/// Request bursts: one request (evenly spaced), so no sliding one-minute window of the
/// provider ever sees more than the limit.
const REQUEST_BURST: u32 = 1;

/// The in-process limiter (embedded mode).
#[derive(Debug)]
pub struct LocalLimiter {
    /// TAT (µs since `epoch`) per key and limit kind.
    tats: Mutex<HashMap<(String, &'static str), u64>>,
    epoch: Instant,
}

impl Default for LocalLimiter {
    fn default() -> Self {
        Self {
            tats: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
        }
    }
}

impl LocalLimiter {
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }
}

#[async_trait]
impl Limiter for LocalLimiter {
    async fn acquire(&self, key: &str, rates: Rates, tokens: u64) -> Result<Decision, String> {
        let now = self.now_us();
        let mut tats = self.tats.lock().unwrap_or_else(|p| p.into_inner());
        let mut updates = Vec::new();
        let mut wait = 0u64;
        if let Some(rpm) = rates.requests_per_minute {
            let k = (key.to_string(), "requests");
            match Gcra::per_minute(rpm, REQUEST_BURST).check(
                tats.get(&k).copied().unwrap_or(0),
                now,
                1,
            ) {
                Ok(t) => updates.push((k, t)),
                Err(w) => wait = wait.max(w),
            }
        }
        if let Some(tpm) = rates.tokens_per_minute {
            let k = (key.to_string(), "tokens");
            match Gcra::per_minute(tpm, token_burst(tpm)).check(
                tats.get(&k).copied().unwrap_or(0),
                now,
                tokens,
            ) {
                Ok(t) => updates.push((k, t)),
                Err(w) => wait = wait.max(w),
            }
        }
        if wait > 0 {
            return Ok(Decision::Wait(Duration::from_micros(wait)));
        }
        for (k, t) in updates {
            tats.insert(k, t);
        }
        Ok(Decision::Allowed)
    }

    async fn adjust_tokens(&self, key: &str, rates: Rates, delta: i64) -> Result<(), String> {
        let Some(tpm) = rates.tokens_per_minute else {
            return Ok(());
        };
        let now = self.now_us();
        let g = Gcra::per_minute(tpm, token_burst(tpm));
        let mut tats = self.tats.lock().unwrap_or_else(|p| p.into_inner());
        let tat = tats.entry((key.to_string(), "tokens")).or_insert(now);
        let moved = (*tat as i128) + (delta as i128) * (g.interval_us as i128);
        *tat = moved.max(now as i128) as u64;
        Ok(())
    }
}

/// One script for both limits of a key. KEYS: requests key, tokens key. ARGV: request
/// interval µs, request tolerance µs (0 interval = unlimited), token interval µs, token
/// tolerance µs, token cost. Returns 0 when allowed, else the wait in µs.
const ACQUIRE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function check(key, interval, tolerance, cost)
  if interval == 0 then return true, 0, nil end
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new_tat = tat + interval * cost
  local tol = math.max(tolerance, interval * (cost - 1))
  local allow_at = new_tat - tol - interval
  if allow_at <= now then return true, 0, new_tat end
  return false, allow_at - now, nil
end
local ok1, w1, tat1 = check(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), 1)
local ok2, w2, tat2 = check(KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
if ok1 and ok2 then
  if tat1 then redis.call('SET', KEYS[1], string.format('%.0f', tat1), 'PX', math.ceil((tat1 - now) / 1000) + 1000) end
  if tat2 then redis.call('SET', KEYS[2], string.format('%.0f', tat2), 'PX', math.ceil((tat2 - now) / 1000) + 1000) end
  return 0
end
return math.max(w1, w2)
"#;

/// Moves a token key's TAT by `delta` units (ARGV: interval µs, delta), never below now.
const ADJUST_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
tat = tat + tonumber(ARGV[1]) * tonumber(ARGV[2])
if tat < now then tat = now end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
return 0
"#;

/// The cluster-wide limiter: GCRA in Redis, Redis server time.
#[derive(Clone)]
pub struct RedisLimiter {
    conn: redis::aio::ConnectionManager,
    acquire: redis::Script,
    adjust: redis::Script,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisLimiter")
    }
}

impl RedisLimiter {
    pub fn new(conn: redis::aio::ConnectionManager) -> Self {
        Self {
            conn,
            acquire: redis::Script::new(ACQUIRE_LUA),
            adjust: redis::Script::new(ADJUST_LUA),
        }
    }

    /// Keys of one limited (provider[/model]); the hash tag keeps both in one slot.
    pub fn keys(key: &str) -> (String, String) {
        (
            format!("parley:rl:{{{key}}}:requests"),
            format!("parley:rl:{{{key}}}:tokens"),
        )
    }
}

#[async_trait]
impl Limiter for RedisLimiter {
    async fn acquire(&self, key: &str, rates: Rates, tokens: u64) -> Result<Decision, String> {
        let (rk, tk) = Self::keys(key);
        let r = rates
            .requests_per_minute
            .map(|r| Gcra::per_minute(r, REQUEST_BURST));
        let t = rates
            .tokens_per_minute
            .map(|t| Gcra::per_minute(t, token_burst(t)));
        let mut conn = self.conn.clone();
        let wait: i64 = self
            .acquire
            .key(rk)
            .key(tk)
            .arg(r.map_or(0, |g| g.interval_us))
            .arg(r.map_or(0, |g| g.tolerance_us))
            .arg(t.map_or(0, |g| g.interval_us))
            .arg(t.map_or(0, |g| g.tolerance_us))
            .arg(tokens.max(1))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| format!("rate limiter (redis): {e}"))?;
        Ok(if wait <= 0 {
            Decision::Allowed
        } else {
            Decision::Wait(Duration::from_micros(wait as u64))
        })
    }

    async fn adjust_tokens(&self, key: &str, rates: Rates, delta: i64) -> Result<(), String> {
        let Some(tpm) = rates.tokens_per_minute else {
            return Ok(());
        };
        if delta == 0 {
            return Ok(());
        }
        let g = Gcra::per_minute(tpm, token_burst(tpm));
        let mut conn = self.conn.clone();
        let _: i64 = self
            .adjust
            .key(Self::keys(key).1)
            .arg(g.interval_us)
            .arg(delta)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| format!("rate limiter (redis): {e}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_spaces_requests_evenly() {
        let g = Gcra::per_minute(60, 1); // ~1 per 1.0204 s with headroom
        assert_eq!(g.interval_us, 1_020_409);
        let t1 = g.check(0, 0, 1).unwrap();
        // Immediately again: must wait one interval.
        assert_eq!(g.check(t1, 0, 1), Err(g.interval_us));
        assert!(g.check(t1, g.interval_us, 1).is_ok());
    }

    #[test]
    fn gcra_burst_then_steady() {
        let g = Gcra::per_minute(600, 5);
        let mut tat = 0;
        for _ in 0..5 {
            tat = g.check(tat, 0, 1).unwrap();
        }
        assert!(g.check(tat, 0, 1).is_err());
    }

    #[test]
    fn gcra_cost_above_burst_passes_only_when_idle() {
        let g = Gcra::per_minute(1000, 10);
        let tat = g.check(0, 0, 50).unwrap();
        let wait = g.check(tat, 0, 1).unwrap_err();
        assert!(wait > 40 * g.interval_us);
    }

    #[test]
    fn model_limits_override_provider_limits() {
        let limits: BTreeMap<String, ProviderLimits> = serde_json::from_value(serde_json::json!({
            "openai": {"requestsPerMinute": 500, "tokensPerMinute": 200000, "models": {"gpt-4o": {"requestsPerMinute": 100}}}
        }))
        .unwrap();
        assert_eq!(
            rates_for(&limits, "openai", "gpt-4o"),
            (
                "openai/gpt-4o".into(),
                Rates {
                    requests_per_minute: Some(100),
                    tokens_per_minute: Some(200000)
                }
            )
        );
        assert_eq!(
            rates_for(&limits, "openai", "gpt-4o-mini")
                .1
                .requests_per_minute,
            Some(500)
        );
        assert!(!rates_for(&limits, "local", "x").1.is_limited());
    }

    #[tokio::test]
    async fn local_limiter_waits_and_refunds() {
        let l = LocalLimiter::default();
        let rates = Rates {
            requests_per_minute: None,
            tokens_per_minute: Some(6000),
        };
        assert_eq!(l.acquire("k", rates, 500).await.unwrap(), Decision::Allowed);
        // 500 estimated tokens used up the 600-token burst; 200 more must wait.
        assert!(matches!(
            l.acquire("k", rates, 200).await.unwrap(),
            Decision::Wait(_)
        ));
        // The call really used 10 tokens: refund 490.
        l.adjust_tokens("k", rates, -490).await.unwrap();
        assert_eq!(l.acquire("k", rates, 200).await.unwrap(), Decision::Allowed);
    }
}

/// Counters of what the limiter did, for metrics.
#[derive(Debug, Default)]
pub struct LimitStats {
    pub waits: std::sync::atomic::AtomicU64,
    pub wait_ms: std::sync::atomic::AtomicU64,
    pub handed_back: std::sync::atomic::AtomicU64,
    pub tokens: std::sync::atomic::AtomicU64,
}

/// A provider whose calls first take their share of the configured limits.
#[derive(Debug)]
pub struct RateLimited {
    inner: std::sync::Arc<dyn crate::Provider>,
    limiter: std::sync::Arc<dyn Limiter>,
    limits: std::sync::Arc<BTreeMap<String, ProviderLimits>>,
    /// Longest total wait slept through in one call; longer waits hand the task back.
    pub max_wait: Duration,
    pub stats: std::sync::Arc<LimitStats>,
}

impl RateLimited {
    pub fn new(
        inner: std::sync::Arc<dyn crate::Provider>,
        limiter: std::sync::Arc<dyn Limiter>,
        limits: std::sync::Arc<BTreeMap<String, ProviderLimits>>,
        stats: std::sync::Arc<LimitStats>,
    ) -> Self {
        Self {
            inner,
            limiter,
            limits,
            max_wait: Duration::from_secs(5),
            stats,
        }
    }
}

#[async_trait]
impl crate::Provider for RateLimited {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(
        &self,
        req: &crate::ChatRequest,
    ) -> Result<crate::ChatResponse, crate::LlmError> {
        use std::sync::atomic::Ordering::Relaxed;
        let (key, rates) = rates_for(&self.limits, self.inner.name(), &req.model);
        if !rates.is_limited() {
            return self.inner.complete(req).await;
        }
        let chars: usize = req.messages.iter().map(|m| m.content.chars().count()).sum();
        let estimate = estimate_tokens(chars) + u64::from(req.max_tokens.unwrap_or(512));
        let mut waited = Duration::ZERO;
        loop {
            let decision = self
                .limiter
                .acquire(&key, rates, estimate)
                .await
                .map_err(|e| {
                    crate::LlmError::new(parley_protocol::ErrorKind::Network, self.inner.name(), e)
                })?;
            match decision {
                Decision::Allowed => break,
                Decision::Wait(d) if waited + d <= self.max_wait => {
                    self.stats.waits.fetch_add(1, Relaxed);
                    self.stats.wait_ms.fetch_add(d.as_millis() as u64, Relaxed);
                    tracing::debug!(key = %key, wait_ms = d.as_millis() as u64, "rate limit: waiting");
                    tokio::time::sleep(d).await;
                    waited += d;
                }
                Decision::Wait(d) => {
                    self.stats.handed_back.fetch_add(1, Relaxed);
                    let mut e = crate::LlmError::new(
                        parley_protocol::ErrorKind::RateLimited,
                        self.inner.name(),
                        format!(
                            "configured rate limit for {key}: next slot in {} ms",
                            d.as_millis()
                        ),
                    );
                    e.retry_after = Some(d);
                    return Err(e);
                }
            }
        }
        let result = self.inner.complete(req).await;
        if let Ok(r) = &result {
            let used = r.prompt_tokens + r.completion_tokens;
            self.stats.tokens.fetch_add(used, Relaxed);
            let delta = used as i64 - estimate as i64;
            if let Err(e) = self.limiter.adjust_tokens(&key, rates, delta).await {
                tracing::warn!(key = %key, error = %e, "rate limit: could not correct the token charge");
            }
        }
        result
    }
}
