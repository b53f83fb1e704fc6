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

/// The completion tokens a call to `provider`/`model` is sent with: what it asked for
/// (`requested`), never more than the operator's caps — the model's `maxTokens`, the
/// provider's, and the global `cap` — so a call that asks for nothing is capped too.
pub fn completion_cap(
    limits: &BTreeMap<String, ProviderLimits>,
    cap: u32,
    provider: &str,
    model: &str,
    requested: Option<u32>,
) -> u32 {
    let p = limits.get(provider);
    let per_model = p
        .and_then(|p| p.models.get(model))
        .and_then(|m| m.max_tokens);
    let operator = [per_model, p.and_then(|p| p.max_tokens), Some(cap)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(cap);
    parley_protocol::capped_completion(requested, operator)
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

    /// GCRA with reservation: when the wait is at most `max_wait_us` the units are taken
    /// now for a slot that starts after the wait (`Ok((new_tat, wait_us))`), so waiting
    /// callers queue up instead of polling; longer waits take nothing (`Err(wait_us)`).
    pub fn reserve(
        &self,
        tat: u64,
        now: u64,
        cost: u64,
        max_wait_us: u64,
    ) -> Result<(u64, u64), u64> {
        let base = tat.max(now);
        let new_tat = base + self.interval_us * cost;
        let tolerance = self
            .tolerance_us
            .max(self.interval_us * cost.saturating_sub(1));
        let wait = new_tat
            .saturating_sub(tolerance + self.interval_us)
            .saturating_sub(now);
        if wait <= max_wait_us {
            Ok((new_tat, wait))
        } else {
            Err(wait)
        }
    }
}

/// What a limiter decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Go now.
    Allowed,
    /// A slot is reserved: go after this long (at most the `max_wait` asked for).
    Reserved(Duration),
    /// Nothing was taken: the next slot is this far away (more than `max_wait`).
    Wait(Duration),
}

/// Why a limiter could not answer (the call then fails as a network error, or the
/// correction it was making is skipped with a warning).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimiterError {
    /// The shared limiter's Redis did not run the script.
    #[error("rate limiter (redis): {0}")]
    Redis(#[from] redis::RedisError),
}

#[async_trait]
pub trait Limiter: Send + Sync + std::fmt::Debug {
    /// Takes one request and `tokens` estimated tokens from `key`'s allowance, now or, when
    /// the next slot is at most `max_wait` away, as a reservation for that slot. Nothing is
    /// taken when the answer is `Wait`.
    async fn acquire(
        &self,
        key: &str,
        rates: Rates,
        tokens: u64,
        max_wait: Duration,
    ) -> Result<Decision, LimiterError>;
    /// Corrects the token charge of an earlier `acquire` by `delta` (real − estimate).
    async fn adjust_tokens(&self, key: &str, rates: Rates, delta: i64) -> Result<(), LimiterError>;
    /// Lets nothing through `key` for `pause` (the provider said so: a 429's `Retry-After`,
    /// or `x-ratelimit-remaining-* = 0` with its reset time). Every replica sees it.
    async fn pause(&self, key: &str, rates: Rates, pause: Duration) -> Result<(), LimiterError>;
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
    async fn acquire(
        &self,
        key: &str,
        rates: Rates,
        tokens: u64,
        max_wait: Duration,
    ) -> Result<Decision, LimiterError> {
        let now = self.now_us();
        let max_wait_us = max_wait.as_micros() as u64;
        let mut tats = self.tats.lock().unwrap_or_else(|p| p.into_inner());
        let mut updates = Vec::new();
        let mut wait = 0u64;
        let mut denied = false;
        let limits = [
            rates
                .requests_per_minute
                .map(|r| ("requests", Gcra::per_minute(r, REQUEST_BURST), 1)),
            rates
                .tokens_per_minute
                .map(|t| ("tokens", Gcra::per_minute(t, token_burst(t)), tokens)),
        ];
        for (kind, gcra, cost) in limits.into_iter().flatten() {
            let k = (key.to_string(), kind);
            match gcra.reserve(tats.get(&k).copied().unwrap_or(0), now, cost, max_wait_us) {
                Ok((t, w)) => {
                    updates.push((k, t));
                    wait = wait.max(w);
                }
                Err(w) => {
                    denied = true;
                    wait = wait.max(w);
                }
            }
        }
        if denied || wait > max_wait_us {
            return Ok(Decision::Wait(Duration::from_micros(wait)));
        }
        for (k, t) in updates {
            tats.insert(k, t);
        }
        Ok(decision(wait))
    }

    async fn adjust_tokens(&self, key: &str, rates: Rates, delta: i64) -> Result<(), LimiterError> {
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

    async fn pause(&self, key: &str, rates: Rates, pause: Duration) -> Result<(), LimiterError> {
        let now = self.now_us();
        let until = now + pause.as_micros() as u64;
        let mut tats = self.tats.lock().unwrap_or_else(|p| p.into_inner());
        if rates.requests_per_minute.is_some() {
            let tat = tats.entry((key.to_string(), "requests")).or_insert(0);
            *tat = (*tat).max(until);
        }
        if let Some(tpm) = rates.tokens_per_minute {
            let tol = Gcra::per_minute(tpm, token_burst(tpm)).tolerance_us;
            let tat = tats.entry((key.to_string(), "tokens")).or_insert(0);
            *tat = (*tat).max(until + tol);
        }
        Ok(())
    }
}

fn decision(wait_us: u64) -> Decision {
    if wait_us == 0 {
        Decision::Allowed
    } else {
        Decision::Reserved(Duration::from_micros(wait_us))
    }
}

/// One script for both limits of a key (GCRA with reservation, see [`Gcra::reserve`]).
/// KEYS: requests key, tokens key. ARGV: request interval µs, request tolerance µs
/// (0 interval = unlimited), token interval µs, token tolerance µs, token cost, max wait µs.
/// Returns `{1, wait_us}` when the slot was taken (go after the wait), `{0, wait_us}` when
/// nothing was taken.
const ACQUIRE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local max_wait = tonumber(ARGV[6])
local function check(key, interval, tolerance, cost)
  if interval == 0 then return 0, nil end
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new_tat = tat + interval * cost
  local tol = math.max(tolerance, interval * (cost - 1))
  local wait = new_tat - tol - interval - now
  if wait < 0 then wait = 0 end
  return wait, new_tat
end
local w1, tat1 = check(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), 1)
local w2, tat2 = check(KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
local wait = math.max(w1, w2)
if wait > max_wait then return {0, string.format('%.0f', wait)} end
if tat1 then redis.call('SET', KEYS[1], string.format('%.0f', tat1), 'PX', math.ceil((tat1 - now) / 1000) + 1000) end
if tat2 then redis.call('SET', KEYS[2], string.format('%.0f', tat2), 'PX', math.ceil((tat2 - now) / 1000) + 1000) end
return {1, string.format('%.0f', wait)}
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

/// Pushes both TATs of a key so nothing passes for a while. KEYS: requests key, tokens
/// key. ARGV: pause µs, 1 when requests are limited, token tolerance µs (-1 = tokens not
/// limited). A TAT only ever moves forward here.
const PAUSE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function push(key, until_us)
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < until_us then
    redis.call('SET', key, string.format('%.0f', until_us), 'PX', math.ceil((until_us - now) / 1000) + 1000)
  end
end
if tonumber(ARGV[2]) == 1 then push(KEYS[1], now + tonumber(ARGV[1])) end
if tonumber(ARGV[3]) >= 0 then push(KEYS[2], now + tonumber(ARGV[1]) + tonumber(ARGV[3])) end
return 0
"#;

/// The cluster-wide limiter: GCRA in Redis, Redis server time. `C` is the connection: a
/// `ConnectionManager`, or any other cheap-to-clone connection that reconnects (the
/// services' follows a Sentinel failover).
#[derive(Clone)]
pub struct RedisLimiter<C = redis::aio::ConnectionManager> {
    conn: C,
    acquire: redis::Script,
    adjust: redis::Script,
    pause: redis::Script,
}

impl<C> std::fmt::Debug for RedisLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisLimiter")
    }
}

impl<C> RedisLimiter<C> {
    pub fn new(conn: C) -> Self {
        Self {
            conn,
            acquire: redis::Script::new(ACQUIRE_LUA),
            adjust: redis::Script::new(ADJUST_LUA),
            pause: redis::Script::new(PAUSE_LUA),
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
impl<C> Limiter for RedisLimiter<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn acquire(
        &self,
        key: &str,
        rates: Rates,
        tokens: u64,
        max_wait: Duration,
    ) -> Result<Decision, LimiterError> {
        let (rk, tk) = Self::keys(key);
        let r = rates
            .requests_per_minute
            .map(|r| Gcra::per_minute(r, REQUEST_BURST));
        let t = rates
            .tokens_per_minute
            .map(|t| Gcra::per_minute(t, token_burst(t)));
        let mut conn = self.conn.clone();
        let (taken, wait): (i64, u64) = self
            .acquire
            .key(rk)
            .key(tk)
            .arg(r.map_or(0, |g| g.interval_us))
            .arg(r.map_or(0, |g| g.tolerance_us))
            .arg(t.map_or(0, |g| g.interval_us))
            .arg(t.map_or(0, |g| g.tolerance_us))
            .arg(tokens.max(1))
            .arg(max_wait.as_micros() as u64)
            .invoke_async(&mut conn)
            .await
            .map_err(LimiterError::Redis)?;
        Ok(if taken == 1 {
            decision(wait)
        } else {
            Decision::Wait(Duration::from_micros(wait))
        })
    }

    async fn adjust_tokens(&self, key: &str, rates: Rates, delta: i64) -> Result<(), LimiterError> {
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
            .map_err(LimiterError::Redis)?;
        Ok(())
    }

    async fn pause(&self, key: &str, rates: Rates, pause: Duration) -> Result<(), LimiterError> {
        let (rk, tk) = Self::keys(key);
        let token_tol = rates.tokens_per_minute.map_or(-1, |t| {
            Gcra::per_minute(t, token_burst(t)).tolerance_us as i64
        });
        let mut conn = self.conn.clone();
        let _: i64 = self
            .pause
            .key(rk)
            .key(tk)
            .arg(pause.as_micros() as u64)
            .arg(i64::from(rates.requests_per_minute.is_some()))
            .arg(token_tol)
            .invoke_async(&mut conn)
            .await
            .map_err(LimiterError::Redis)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_gets_the_lowest_of_its_own_and_the_operators_caps() {
        let limits: BTreeMap<String, ProviderLimits> = serde_json::from_value(serde_json::json!({
            "openai": {"maxTokens": 4000, "models": {"gpt-4o": {"maxTokens": 1000}}},
            "openrouter": {}
        }))
        .unwrap();
        let cap = |p: &str, m: &str, r: Option<u32>| completion_cap(&limits, 16_384, p, m, r);
        // Asking for nothing still gets a cap: the model's, the provider's, the global one.
        assert_eq!(cap("openai", "gpt-4o", None), 1000);
        assert_eq!(cap("openai", "gpt-4.1", None), 4000);
        assert_eq!(cap("openrouter", "x", None), 16_384);
        assert_eq!(cap("openai-compatible", "x", None), 16_384);
        // Asking for more gets the cap; asking for less gets what it asked.
        assert_eq!(cap("openai", "gpt-4o", Some(50_000)), 1000);
        assert_eq!(cap("openai", "gpt-4o", Some(200)), 200);
        assert_eq!(cap("openrouter", "x", Some(u32::MAX)), 16_384);
        assert_eq!(cap("openrouter", "x", Some(0)), 1);
    }

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
        assert_eq!(
            l.acquire("k", rates, 500, Duration::ZERO).await.unwrap(),
            Decision::Allowed
        );
        // 500 estimated tokens used up the 600-token burst; 200 more must wait.
        assert!(matches!(
            l.acquire("k", rates, 200, Duration::ZERO).await.unwrap(),
            Decision::Wait(_)
        ));
        // The call really used 10 tokens: refund 490.
        l.adjust_tokens("k", rates, -490).await.unwrap();
        assert_eq!(
            l.acquire("k", rates, 200, Duration::ZERO).await.unwrap(),
            Decision::Allowed
        );
    }
}

/// 429 replies a call retries (after waiting as told) before it gives up.
const MAX_THROTTLED_RETRIES: u32 = 3;

/// A provider whose calls first take their share of the configured limits, and which owns
/// the reaction to a provider's own rate-limit signals:
///
/// - before the call: one request and the estimated tokens from the (cluster-wide) limiter;
///   waits up to [`RateLimited::max_wait`] in total, longer waits return `RateLimited` with
///   `retry_after` so the worker hands the task back to the queue with that delay;
/// - after a 429: the provider's `Retry-After` (or `x-ratelimit-reset-*`, else a backoff)
///   pauses the key for every replica, then the call waits or hands back as above;
/// - after a success whose `x-ratelimit-remaining-*` is 0: the key pauses until the reset.
///
/// The inner client must not retry 429s itself (see `RetrySettings::retry_rate_limited`).
/// Keys without configured limits skip the limiter but still wait out a 429 inline when
/// short, or hand the task back when long.
#[derive(Debug)]
pub struct RateLimited {
    inner: std::sync::Arc<dyn crate::Provider>,
    limiter: std::sync::Arc<dyn Limiter>,
    limits: std::sync::Arc<BTreeMap<String, ProviderLimits>>,
    /// The operator's global cap on one call's completion tokens (see [`completion_cap`]).
    max_tokens: u32,
    /// Longest total wait slept through in one call; longer waits hand the task back.
    pub max_wait: Duration,
}

impl RateLimited {
    /// `max_tokens`: the operator's global cap on one call's completion tokens.
    pub fn new(
        inner: std::sync::Arc<dyn crate::Provider>,
        limiter: std::sync::Arc<dyn Limiter>,
        limits: std::sync::Arc<BTreeMap<String, ProviderLimits>>,
        max_tokens: u32,
    ) -> Self {
        Self {
            inner,
            limiter,
            limits,
            max_tokens,
            max_wait: Duration::from_secs(5),
        }
    }

    fn hand_back(&self, key: &str, wait: Duration, why: &str) -> crate::LlmError {
        let mut e = crate::LlmError::new(
            parley_protocol::ErrorKind::RateLimited,
            self.inner.name(),
            format!("{why} for {key}: next slot in {} ms", wait.as_millis()),
        );
        e.retry_after = Some(wait);
        e
    }

    /// Takes the call's share of the limits, sleeping while the total stays within
    /// `max_wait`.
    async fn take_slot(
        &self,
        key: &str,
        rates: Rates,
        estimate: u64,
        waited: &mut Duration,
    ) -> Result<(), crate::LlmError> {
        let budget = self.max_wait.saturating_sub(*waited);
        let decision = self
            .limiter
            .acquire(key, rates, estimate, budget)
            .await
            .map_err(|e| {
                crate::LlmError::new(
                    parley_protocol::ErrorKind::Network,
                    self.inner.name(),
                    e.to_string(),
                )
            })?;
        match decision {
            Decision::Allowed => Ok(()),
            Decision::Reserved(d) => {
                parley_telemetry::metrics().rate_limit_wait(self.inner.name(), d);
                tracing::debug!(key = %key, wait_ms = d.as_millis() as u64, "rate limit: waiting for a reserved slot");
                tokio::time::sleep(d).await;
                *waited += d;
                Ok(())
            }
            Decision::Wait(d) => Err(self.hand_back(key, d, "configured rate limit")),
        }
    }

    async fn pause(&self, key: &str, rates: Rates, d: Duration) {
        if let Err(e) = self.limiter.pause(key, rates, d).await {
            tracing::warn!(key = %key, error = %e, "rate limit: could not pause the key");
        }
    }
}

#[async_trait]
impl crate::Provider for RateLimited {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn supports_tools(&self) -> bool {
        self.inner.supports_tools()
    }

    /// One request and the inputs' estimated tokens from the limiter; a 429 pauses the key
    /// for every replica and hands the task back (embedding calls are short and rare).
    async fn embed(&self, req: &crate::EmbedRequest) -> Result<crate::Embeddings, crate::LlmError> {
        let (key, rates) = rates_for(&self.limits, self.inner.name(), &req.model);
        let limited = rates.is_limited();
        let estimate = estimate_tokens(req.inputs.iter().map(|s| s.chars().count()).sum());
        let mut waited = Duration::ZERO;
        if limited {
            self.take_slot(&key, rates, estimate, &mut waited).await?;
        }
        let result = self.inner.embed(req).await;
        if limited {
            let used = result.as_ref().map_or(0, |r| r.prompt_tokens);
            if let Err(e) = self
                .limiter
                .adjust_tokens(&key, rates, used as i64 - estimate as i64)
                .await
            {
                tracing::warn!(key = %key, error = %e, "rate limit: could not correct the token charge");
            }
        }
        match result {
            Err(e) if e.kind == parley_protocol::ErrorKind::RateLimited => {
                parley_telemetry::metrics().llm_rate_limited(self.inner.name());
                let d = e.retry_after.unwrap_or(Duration::from_secs(1));
                if limited {
                    self.pause(&key, rates, d).await;
                }
                Err(self.hand_back(&key, d, "provider rate limit"))
            }
            other => other,
        }
    }

    async fn complete(
        &self,
        req: &crate::ChatRequest,
    ) -> Result<crate::ChatResponse, crate::LlmError> {
        // Every call goes out with a completion cap, whether or not it asked for one.
        let cap = completion_cap(
            &self.limits,
            self.max_tokens,
            self.inner.name(),
            &req.model,
            req.max_tokens,
        );
        let capped;
        let req = if req.max_tokens == Some(cap) {
            req
        } else {
            capped = crate::ChatRequest {
                max_tokens: Some(cap),
                ..req.clone()
            };
            &capped
        };
        let (key, rates) = rates_for(&self.limits, self.inner.name(), &req.model);
        let limited = rates.is_limited();
        let chars: usize = req
            .messages
            .iter()
            .map(|m| m.content.chars().count())
            .sum::<usize>()
            + req
                .tools
                .exchanges
                .iter()
                .flat_map(|e| &e.outputs)
                .map(|o| o.output.chars().count())
                .sum::<usize>();
        let estimate = estimate_tokens(chars) + u64::from(cap);
        let mut waited = Duration::ZERO;
        let mut throttled = 0;
        loop {
            if limited {
                self.take_slot(&key, rates, estimate, &mut waited).await?;
            }
            match self.inner.complete(req).await {
                Ok(r) => {
                    let used = r.prompt_tokens + r.completion_tokens;
                    if limited {
                        let delta = used as i64 - estimate as i64;
                        if let Err(e) = self.limiter.adjust_tokens(&key, rates, delta).await {
                            tracing::warn!(key = %key, error = %e, "rate limit: could not correct the token charge");
                        }
                        if let Some(d) = r.rate_limit_reset {
                            self.pause(&key, rates, d).await;
                        }
                    }
                    return Ok(r);
                }
                Err(e) if e.kind == parley_protocol::ErrorKind::RateLimited => {
                    parley_telemetry::metrics().llm_rate_limited(self.inner.name());
                    throttled += 1;
                    // The provider did not serve the call: give the estimate back.
                    if limited {
                        let _ = self
                            .limiter
                            .adjust_tokens(&key, rates, -(estimate as i64))
                            .await;
                    }
                    if throttled > MAX_THROTTLED_RETRIES {
                        return Err(e);
                    }
                    parley_telemetry::metrics().llm_retry(self.inner.name(), e.kind.as_str());
                    let d = e
                        .retry_after
                        .unwrap_or_else(|| Duration::from_millis(500u64 << throttled.min(5)));
                    tracing::warn!(key = %key, wait_ms = d.as_millis() as u64, "provider answered 429");
                    if limited {
                        // Every replica waits; take_slot then sleeps or hands back.
                        self.pause(&key, rates, d).await;
                    } else if waited + d <= self.max_wait {
                        tokio::time::sleep(d).await;
                        waited += d;
                    } else {
                        return Err(self.hand_back(&key, d, "provider rate limit"));
                    }
                }
                Err(e) => {
                    if limited {
                        let _ = self
                            .limiter
                            .adjust_tokens(&key, rates, -(estimate as i64))
                            .await;
                    }
                    return Err(e);
                }
            }
        }
    }
}
