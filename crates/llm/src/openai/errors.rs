//! What a failed call becomes: an [`LlmError`] of the right kind, its text scrubbed of keys.

use reqwest::header::HeaderMap;
use serde_json::Value;

use parley_protocol::limits;

use super::{retry_after, OpenAiClient};
use crate::provider::{ErrorKind, LlmError};

impl OpenAiClient {
    /// A redirect that was not followed (another origin, or too many).
    pub(super) fn redirect_error(&self, status: u16, headers: &HeaderMap) -> LlmError {
        let target = headers
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|l| reqwest::Url::parse(l).ok())
            .and_then(|u| u.host_str().map(str::to_string))
            .map(|h| format!(" to {}", parley_protocol::preview(&h, 100)))
            .unwrap_or_default();
        LlmError::new(
            ErrorKind::InvalidRequest,
            &self.name,
            format!(
                "the endpoint redirected (HTTP {status}){target}; redirects to another \
                 origin are not followed, so the key stays with the configured endpoint"
            ),
        )
    }

    pub(super) fn transport_error(&self, e: reqwest::Error) -> LlmError {
        let kind = if e.is_timeout() {
            ErrorKind::Timeout
        } else if e.is_connect() || e.is_request() || e.is_body() {
            ErrorKind::Network
        } else if e.is_decode() {
            ErrorKind::Malformed
        } else {
            ErrorKind::Network
        };
        // reqwest errors carry the URL, never headers; strip the URL's query anyway.
        LlmError::new(
            kind,
            &self.name,
            format!("{kind:?} error: {}", e.without_url()),
        )
    }

    /// `text` without this client's key, nor anything shaped like an API key (an endpoint
    /// may echo a key it refused, or another one): what the rest of Parley may keep.
    pub(super) fn scrub(&self, text: &str) -> String {
        let text = match &self.key {
            Some(k) if !k.expose().is_empty() => text.replace(k.expose(), "[redacted]"),
            _ => text.to_string(),
        };
        redact_key_like(&text)
    }

    pub(super) fn status_error(&self, status: u16, headers: &HeaderMap, body: &str) -> LlmError {
        let detail = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| {
                v.pointer("/error/message")
                    .or_else(|| v.get("message"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| body.to_string());
        // Provider text is outside input: the key it may echo is taken out first, then a
        // few hundred characters are kept.
        let detail = self.scrub(&detail);
        let detail = parley_protocol::preview(detail.trim(), limits::MAX_ERROR_TEXT_CHARS);
        let (kind, message) = match status {
            401 | 403 => (
                ErrorKind::Auth,
                format!(
                    "authentication failed (HTTP {status}){}: {detail}",
                    self.key_var
                        .map(|v| format!("; check {v}"))
                        .unwrap_or_default()
                ),
            ),
            429 => (
                ErrorKind::RateLimited,
                format!("rate limited (HTTP 429): {detail}"),
            ),
            500..=599 => (
                ErrorKind::Server,
                format!("server error (HTTP {status}): {detail}"),
            ),
            408 => (
                ErrorKind::Timeout,
                format!("request timeout (HTTP 408): {detail}"),
            ),
            _ => (
                ErrorKind::InvalidRequest,
                format!("request rejected (HTTP {status}): {detail}"),
            ),
        };
        let mut err = LlmError::new(kind, &self.name, message);
        err.retry_after = retry_after(headers);
        err
    }
}

/// `text` with every word that looks like an API key (`sk-`, `sk_`, `or-`, `key-` or
/// `Bearer ` followed by 16 or more key characters) replaced by `[redacted]`. Linear time.
pub fn redact_key_like(text: &str) -> String {
    const PREFIXES: [&str; 5] = ["sk-", "sk_", "or-", "key-", "Bearer "];
    let is_key_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while !rest.is_empty() {
        // Only at the start of a word.
        let at_word_start = out.chars().next_back().is_none_or(|c| !is_key_char(c));
        if at_word_start {
            for p in PREFIXES {
                if let Some(after) = rest.strip_prefix(p) {
                    let len = after.find(|c: char| !is_key_char(c)).unwrap_or(after.len());
                    if len >= 16 {
                        out.push_str("[redacted]");
                        rest = &after[len..];
                        continue 'scan;
                    }
                }
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Api, Secret};
    use super::*;

    #[test]
    pub(super) fn provider_error_text_never_keeps_a_key() {
        let key = "sk-parley-test-0123456789abcdef";
        let c = OpenAiClient::new(
            "openai",
            "http://127.0.0.1:9/v1",
            Some((Secret::new(key.into()), "OPENAI_API_KEY")),
            Api::ChatCompletions,
        )
        .unwrap();
        let body = format!(
            r#"{{"error":{{"message":"Incorrect API key provided: {key}. Other: sk-proj-ABCDEFGHIJKLMNOPQRST, Authorization: Bearer abcdefghijklmnopqrstuvwx; desk-top sk-short"}}}}"#
        );
        let e = c.status_error(401, &HeaderMap::new(), &body);
        let m = e.to_string();
        assert!(!m.contains(key) && !m.contains("0123456789abcdef"), "{m}");
        assert!(
            !m.contains("ABCDEFGHIJKLMNOPQRST") && !m.contains("abcdefghijklmnop"),
            "{m}"
        );
        // Words that only contain a prefix, and short ones, stay.
        assert!(m.contains("desk-top sk-short"), "{m}");
        assert!(m.contains("Incorrect API key provided: [redacted]"), "{m}");
        assert_eq!(
            redact_key_like("é sk-ééééééééééééééééé"),
            "é sk-ééééééééééééééééé"
        );
    }
}
