//! The knobs a test turns on a [`FakeLlm`](super::FakeLlm): latency, faults, rate limits.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long the fake LLM waits before it answers a request.
///
/// Latency is a tokio sleep inside the request handler, so concurrent requests wait
/// concurrently. It applies to requests that reach the "model" (normal replies and
/// [`Fault::Status`] / [`Fault::Malformed`]), not to 404s, 400s or 429s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Latency {
    /// Answer immediately.
    #[default]
    Zero,
    /// Wait exactly this long.
    Fixed(Duration),
    /// Log-normal latency fitted so that its median is `p50` and its 99th percentile is
    /// `p99`. Samples come from a seeded generator (reseeded by every `set_latency`), so a
    /// run is reproducible for a given request order. Samples are capped at `10 × p99`.
    HeavyTail {
        /// Median latency.
        p50: Duration,
        /// 99th-percentile latency; when not above `p50` every sample is `p50`.
        p99: Duration,
    },
}

/// Which requests a [`Fault`] applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// Every request.
    Any,
    /// Requests whose `model` field equals this string.
    Model(String),
    /// Requests whose prompt text (see `RecordedRequest::prompt_text`) contains this string.
    PromptContains(String),
}

impl Match {
    pub(crate) fn matches(&self, model: &str, prompt: &str) -> bool {
        match self {
            Match::Any => true,
            Match::Model(m) => m == model,
            Match::PromptContains(s) => prompt.contains(s.as_str()),
        }
    }
}

/// A failure the fake LLM injects instead of a normal reply.
///
/// Faults are checked in the order they were added; the first one that matches and still
/// has runs left applies. `times: None` means "forever", `Some(n)` means the next `n`
/// matching requests, after which the fault is spent and requests are healthy again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this HTTP status and body (sent as `application/json` when the body
    /// parses as JSON, `text/plain` otherwise).
    Status {
        /// HTTP status code, e.g. 500 or 503.
        status: u16,
        /// Response body.
        body: String,
        /// Which requests fail.
        matching: Match,
        /// How many matching requests fail; `None` = all of them.
        times: Option<usize>,
    },
    /// Answer 200 with an `application/json` content type and a body that is not valid
    /// JSON (a truncated API reply).
    Malformed {
        /// Which requests get the malformed reply.
        matching: Match,
        /// How many matching requests; `None` = all of them.
        times: Option<usize>,
    },
    /// Answer 429 (rate limited), with `Retry-After` when set. Not counted by
    /// `FakeLlm::rate_limited_count`, which counts only quota overruns.
    RateLimited {
        /// `Retry-After` in seconds (rounded up).
        retry_after: Option<Duration>,
        /// Which requests are refused.
        matching: Match,
        /// How many matching requests; `None` = all of them.
        times: Option<usize>,
    },
    /// Answer with exactly this status, these headers and this body (a redirect with
    /// `Location`, a 429 with hostile `Retry-After` values, an oversized body, ...).
    Reply {
        /// HTTP status code.
        status: u16,
        /// Response headers (name, value); values that are not valid header text are skipped.
        headers: Vec<(String, String)>,
        /// Response body.
        body: String,
        /// Which requests get it.
        matching: Match,
        /// How many matching requests; `None` = all of them.
        times: Option<usize>,
    },
    /// Never answer: the handler sleeps until the `FakeLlm` is dropped (then it answers
    /// 503 so the connection closes). Recorded with status 0.
    Hang {
        /// Which requests hang.
        matching: Match,
        /// How many matching requests; `None` = all of them.
        times: Option<usize>,
    },
}

impl Fault {
    pub(crate) fn matching(&self) -> &Match {
        match self {
            Fault::Status { matching, .. }
            | Fault::Reply { matching, .. }
            | Fault::RateLimited { matching, .. }
            | Fault::Malformed { matching, .. }
            | Fault::Hang { matching, .. } => matching,
        }
    }

    pub(crate) fn times(&self) -> Option<usize> {
        match self {
            Fault::Status { times, .. }
            | Fault::Reply { times, .. }
            | Fault::RateLimited { times, .. }
            | Fault::Malformed { times, .. }
            | Fault::Hang { times, .. } => *times,
        }
    }
}

/// How the fake LLM answers a request that asks for structured output (a JSON-schema
/// `response_format` in Chat Completions, `text.format` in the Responses API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StructuredOutput {
    /// Like a provider that enforces the schema: the reply is the responder's text when it
    /// is a JSON object with the schema's required keys, else an instance of the schema.
    Honour,
    /// Like a provider or model without structured output: 400, naming `response_format`.
    Reject,
    /// Like a server that ignores the field: the responder's text as is. The default, so
    /// a responder's scripted replies (malformed ones included) reach the client unchanged.
    #[default]
    Ignore,
}

/// A request quota, like a provider's: at most `requests` accepted in any sliding
/// `window`. Accepted replies carry OpenAI's `x-ratelimit-limit-requests`,
/// `x-ratelimit-remaining-requests` and `x-ratelimit-reset-requests` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Accepted requests allowed in any `window`.
    pub requests: u32,
    /// The sliding window (60 s for a per-minute quota).
    pub window: Duration,
    /// When set, 429 replies carry a `Retry-After` header with this many seconds
    /// (rounded up).
    pub retry_after: Option<Duration>,
}

impl RateLimit {
    /// `rpm` requests in any 60 s, no `Retry-After`.
    pub fn per_minute(rpm: u32) -> Self {
        Self {
            requests: rpm,
            window: WINDOW,
            retry_after: None,
        }
    }
}

/// A fault plus how many runs it has left.
#[derive(Debug)]
pub(crate) struct ActiveFault {
    pub fault: Fault,
    /// `None` = unlimited.
    pub remaining: Option<usize>,
}

/// Picks the first matching fault with runs left and uses one run of it.
pub(crate) fn take_fault(
    faults: &mut Vec<ActiveFault>,
    model: &str,
    prompt: &str,
) -> Option<Fault> {
    let idx = faults
        .iter()
        .position(|f| f.remaining != Some(0) && f.fault.matching().matches(model, prompt))?;
    let entry = &mut faults[idx];
    if let Some(n) = entry.remaining.as_mut() {
        *n -= 1;
    }
    let fault = entry.fault.clone();
    faults.retain(|f| f.remaining != Some(0));
    Some(fault)
}

/// The sliding window of accepted requests.
#[derive(Debug, Default)]
pub(crate) struct RateWindow {
    /// Arrival times of accepted requests in the last window.
    accepted: VecDeque<Instant>,
}

pub(crate) const WINDOW: Duration = Duration::from_secs(60);

impl RateWindow {
    /// Returns the quota left and the time until the oldest accepted request leaves the
    /// window (and counts the request) when it fits under `limit`; `None` when it does not.
    pub fn admit(&mut self, now: Instant, limit: &RateLimit) -> Option<(u32, Duration)> {
        while let Some(first) = self.accepted.front() {
            if now.duration_since(*first) >= limit.window {
                self.accepted.pop_front();
            } else {
                break;
            }
        }
        if self.accepted.len() >= limit.requests as usize {
            return None;
        }
        self.accepted.push_back(now);
        let oldest = *self.accepted.front().unwrap_or(&now);
        let reset = limit.window.saturating_sub(now.duration_since(oldest));
        Some((limit.requests - self.accepted.len() as u32, reset))
    }

    pub fn clear(&mut self) {
        self.accepted.clear();
    }
}

/// A small seeded generator (SplitMix64): reproducible latency without a `rand` dependency.
#[derive(Debug, Clone)]
pub(crate) struct SeededRng(u64);

pub(crate) const LATENCY_SEED: u64 = 0x5EED_0FFA_4E11_A1B2;

impl SeededRng {
    pub fn new(seed: u64) -> Self {
        SeededRng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u1 = self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// z-score of the 99th percentile of the standard normal distribution.
const Z99: f64 = 2.326_347_874_040_841;

impl Latency {
    /// Draws the delay for one request.
    pub(crate) fn sample(&self, rng: &mut SeededRng) -> Duration {
        match *self {
            Latency::Zero => Duration::ZERO,
            Latency::Fixed(d) => d,
            Latency::HeavyTail { p50, p99 } => {
                let p50s = p50.as_secs_f64();
                let p99s = p99.as_secs_f64();
                if p50s <= 0.0 || p99s <= p50s {
                    return p50;
                }
                let mu = p50s.ln();
                let sigma = (p99s.ln() - mu) / Z99;
                let secs = (mu + sigma * rng.normal()).exp().min(10.0 * p99s);
                Duration::from_secs_f64(secs)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_tail_fits_p50_and_p99() {
        let lat = Latency::HeavyTail {
            p50: Duration::from_millis(100),
            p99: Duration::from_millis(1000),
        };
        let mut rng = SeededRng::new(LATENCY_SEED);
        let mut xs: Vec<Duration> = (0..20_000).map(|_| lat.sample(&mut rng)).collect();
        xs.sort();
        let p50 = xs[xs.len() / 2].as_secs_f64();
        let p99 = xs[xs.len() * 99 / 100].as_secs_f64();
        assert!((0.09..0.11).contains(&p50), "p50 = {p50}");
        assert!((0.85..1.15).contains(&p99), "p99 = {p99}");
    }

    #[test]
    fn faults_run_out() {
        let mut faults = vec![ActiveFault {
            fault: Fault::Malformed {
                matching: Match::Model("m".into()),
                times: Some(2),
            },
            remaining: Some(2),
        }];
        assert!(take_fault(&mut faults, "other", "").is_none());
        assert!(take_fault(&mut faults, "m", "").is_some());
        assert!(take_fault(&mut faults, "m", "").is_some());
        assert!(take_fault(&mut faults, "m", "").is_none());
        assert!(faults.is_empty());
    }

    #[test]
    fn window_admits_up_to_rpm() {
        let mut w = RateWindow::default();
        let t0 = Instant::now();
        let limit = RateLimit::per_minute(2);
        assert_eq!(w.admit(t0, &limit), Some((1, WINDOW)));
        assert_eq!(
            w.admit(t0 + Duration::from_secs(1), &limit),
            Some((0, WINDOW - Duration::from_secs(1)))
        );
        assert_eq!(w.admit(t0 + Duration::from_secs(2), &limit), None);
        assert!(w.admit(t0 + WINDOW, &limit).is_some());
    }
}
