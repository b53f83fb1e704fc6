//! The waits a provider asks for (`Retry-After`, `retry-after-ms`, `x-ratelimit-*`), read
//! and clamped to [`MAX_PROVIDER_WAIT`](super::MAX_PROVIDER_WAIT).

use std::time::Duration;

use reqwest::header::HeaderMap;

use super::MAX_PROVIDER_WAIT;

/// A duration of `secs` seconds clamped to `0..=MAX_PROVIDER_WAIT`; `None` for NaN.
pub(super) fn clamped_secs(secs: f64) -> Option<Duration> {
    if secs.is_nan() {
        return None;
    }
    Some(Duration::from_secs_f64(
        secs.clamp(0.0, MAX_PROVIDER_WAIT.as_secs_f64()),
    ))
}

/// `retry-after-ms`, else `Retry-After` (seconds), else OpenAI's
/// `x-ratelimit-reset-requests/-tokens` ("1s", "6m0s", "20ms"); clamped to
/// [`MAX_PROVIDER_WAIT`]. An HTTP-date `Retry-After`, NaN or garbage counts as absent.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(v) = headers.get("retry-after-ms").and_then(|v| v.to_str().ok()) {
        if let Ok(ms) = v.trim().parse::<f64>() {
            if let Some(d) = clamped_secs(ms / 1000.0) {
                return Some(d);
            }
        }
    }
    if let Some(v) = headers.get("retry-after").and_then(|v| v.to_str().ok()) {
        if let Ok(s) = v.trim().parse::<f64>() {
            if let Some(d) = clamped_secs(s) {
                return Some(d);
            }
        }
    }
    ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
        .iter()
        .filter_map(|h| {
            headers
                .get(*h)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_go_duration)
        })
        .max()
}

/// When a successful reply says an allowance is used up (`x-ratelimit-remaining-requests`
/// or `-tokens` is 0), how long until it resets (the matching `x-ratelimit-reset-*`, 1 s
/// when absent), clamped to [`MAX_PROVIDER_WAIT`].
pub fn exhausted_until(headers: &HeaderMap) -> Option<Duration> {
    ["requests", "tokens"]
        .iter()
        .filter(|kind| {
            headers
                .get(format!("x-ratelimit-remaining-{kind}"))
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .is_some_and(|n| n <= 0.0)
        })
        .map(|kind| {
            headers
                .get(format!("x-ratelimit-reset-{kind}"))
                .and_then(|v| v.to_str().ok())
                .and_then(parse_go_duration)
                .unwrap_or(Duration::from_secs(1))
        })
        .max()
}

/// Parses durations like `1s`, `6m0s`, `20ms`, `1h2m3.5s`, clamped to
/// [`MAX_PROVIDER_WAIT`]; `None` for anything else.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    let mut total = 0f64;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let value: f64 = num.parse().ok()?;
        num.clear();
        let unit = match (c, chars.peek()) {
            ('m', Some('s')) => {
                chars.next();
                0.001
            }
            ('h', _) => 3600.0,
            ('m', _) => 60.0,
            ('s', _) => 1.0,
            _ => return None,
        };
        total += value * unit;
    }
    if !num.is_empty() {
        total += num.parse::<f64>().ok()?;
    }
    clamped_secs(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_go_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(
            parse_go_duration("2m3.5s"),
            Some(Duration::from_secs_f64(123.5))
        );
        // Clamped to an hour.
        assert_eq!(parse_go_duration("1h2m3.5s"), Some(MAX_PROVIDER_WAIT));
        assert_eq!(parse_go_duration("x"), None);
    }

    #[test]
    fn retry_after_prefers_header() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        h.insert("x-ratelimit-reset-requests", "10s".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.remove("retry-after");
        assert_eq!(retry_after(&h), Some(Duration::from_secs(10)));
    }

    #[test]
    fn exhausted_allowance_reads_remaining_and_reset() {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-remaining-requests", "3".parse().unwrap());
        h.insert("x-ratelimit-reset-requests", "2s".parse().unwrap());
        assert_eq!(exhausted_until(&h), None);
        h.insert("x-ratelimit-remaining-tokens", "0".parse().unwrap());
        h.insert("x-ratelimit-reset-tokens", "750ms".parse().unwrap());
        assert_eq!(exhausted_until(&h), Some(Duration::from_millis(750)));
        h.insert("x-ratelimit-remaining-requests", "0".parse().unwrap());
        assert_eq!(exhausted_until(&h), Some(Duration::from_secs(2)));
    }

    #[test]
    fn provider_waits_are_clamped_and_never_panic() {
        let hour = MAX_PROVIDER_WAIT;
        for (name, value, want) in [
            ("retry-after", "1e300", Some(hour)),
            ("retry-after", "inf", Some(hour)),
            ("retry-after", "-5", Some(Duration::ZERO)),
            ("retry-after", "NaN", None),
            ("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT", None),
            ("retry-after-ms", "18446744073709551615000", Some(hour)),
            ("retry-after-ms", "-1", Some(Duration::ZERO)),
            (
                "x-ratelimit-reset-requests",
                "99999999999999999999h",
                Some(hour),
            ),
            ("x-ratelimit-reset-tokens", "1e3s", None),
            ("x-ratelimit-reset-tokens", &"9".repeat(400), None),
            (
                "x-ratelimit-reset-tokens",
                "2m",
                Some(Duration::from_secs(120)),
            ),
        ] {
            let mut h = HeaderMap::new();
            h.insert(name, value.parse().unwrap());
            assert_eq!(retry_after(&h), want, "{name}: {value}");
            h.insert("x-ratelimit-remaining-tokens", "0".parse().unwrap());
            if name == "x-ratelimit-reset-tokens" {
                assert!(exhausted_until(&h).is_some_and(|d| d <= hour), "{value}");
            }
        }
        assert_eq!(parse_go_duration("1.5.5s"), None);
        assert_eq!(parse_go_duration("...h"), None);
    }
}
