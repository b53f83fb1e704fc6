//! Retries, written once: which errors are worth another try
//! ([`ErrorKind::is_retryable`]), the exponential backoff ([`exponential_ms`], capped), and
//! its jitter ([`jitter_ms`]). The node policy that configures the task layer is
//! [`RetryPolicy`](crate::RetryPolicy) (`debate.retry`).
//!
//! # The three layers, innermost first
//!
//! | layer | where | retries | backoff | budget |
//! | --- | --- | --- | --- | --- |
//! | HTTP call | `parley-llm`'s OpenAI-compatible client (`openai.rs`, `RetrySettings`) | a retryable error (429 only without a shared rate limiter) | [`exponential_ms`] + [`jitter_ms`], or the provider's `Retry-After`, slept inline only up to `max_inline_wait` and within the task's timeout | `max_retries` (2) inside one attempt |
//! | task (node) attempt | the state machine (`parley-engine`, `on_failure`); timers in the embedded driver and the debate actor | a failed attempt whose [`ErrorKind`] is retryable, or an attempt past its deadline / dead-lettered (`undelivered`) | [`RetryPolicy::backoff_ms`](crate::RetryPolicy::backoff_ms) (at least the provider's `retry_after_ms`), then [`jitter_ms`] by the driver | `attempts` per node kind (3), fresh after a user's `retry` |
//! | message delivery | JetStream redelivery to the workers (`parley-worker`) | a task message not acked within `ack_wait` (a crashed or stalled worker), or handed back (nak'ed with a delay) for a rate limit the call could not wait out | `ack_wait`, or the hand-back's delay | `MAX_DELIVER` (5) deliveries; on the last one the worker stores an error result instead of handing back |
//!
//! How they compose: a call's inner retries are invisible outside it — only the last
//! error of an attempt comes back as the task's result. A redelivery is the same attempt
//! (same task id and attempt number): it never spends the node's budget, and a result
//! already stored is not computed again. A rate-limit wait longer than the call's
//! `max_inline_wait` is not slept in the call: the worker hands the task back with that
//! delay (and the coordinator extends the attempt's deadline), spending deliveries, not
//! node attempts. A dead letter, or an attempt the coordinator hears nothing about before
//! its deadline, becomes one failed attempt of kind `undelivered`, which the task layer
//! retries like any retryable failure. So one node costs at most
//! `attempts × (1 + max_retries)` provider calls, plus the calls of crashed workers whose
//! results were never stored.

use crate::ErrorKind;

impl ErrorKind {
    /// Rate limits, 5xx, timeouts, network errors, malformed replies and lost tasks are worth
    /// another try; authentication, invalid requests, configuration and internal errors are
    /// not (they fail at once with their message).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::RateLimited
                | Self::Server
                | Self::Timeout
                | Self::Network
                | Self::Malformed
                | Self::Undelivered
        )
    }
}

/// The backoff before retry `step` (0 for the first retry): `initial_ms · 2^step`, at most
/// `max_ms` (the exponent stops growing at 20). Before jitter.
pub fn exponential_ms(initial_ms: u64, max_ms: u64, step: u32) -> u64 {
    initial_ms.saturating_mul(1u64 << step.min(20)).min(max_ms)
}

/// Between half and all of `delay_ms`, drawn at random, so the retries of many tasks (or
/// many replicas) spread out instead of arriving together. Delays under 2 ms are kept.
pub fn jitter_ms(delay_ms: u64) -> u64 {
    use rand::Rng as _;
    if delay_ms < 2 {
        return delay_ms;
    }
    rand::thread_rng().gen_range(delay_ms / 2..=delay_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        assert_eq!(exponential_ms(500, 30_000, 0), 500);
        assert_eq!(exponential_ms(500, 30_000, 1), 1_000);
        assert_eq!(exponential_ms(500, 30_000, 5), 16_000);
        assert_eq!(exponential_ms(500, 30_000, 6), 30_000);
        assert_eq!(exponential_ms(500, 30_000, u32::MAX), 30_000);
        assert_eq!(exponential_ms(u64::MAX, u64::MAX, 20), u64::MAX);
    }

    #[test]
    fn jitter_stays_between_half_and_all_of_the_delay() {
        for d in [0, 1, 2, 3, 100, 30_000] {
            for _ in 0..200 {
                let j = jitter_ms(d);
                assert!(j <= d && j >= d / 2, "{d} → {j}");
            }
        }
        assert_eq!(jitter_ms(1), 1);
    }

    #[test]
    fn only_transient_errors_are_retried() {
        use ErrorKind::*;
        for k in [
            RateLimited,
            Server,
            Timeout,
            Network,
            Malformed,
            Undelivered,
        ] {
            assert!(k.is_retryable(), "{k:?}");
        }
        for k in [Auth, InvalidRequest, Config, Internal] {
            assert!(!k.is_retryable(), "{k:?}");
        }
    }
}
