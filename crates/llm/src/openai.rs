//! OpenAI-style HTTP providers: OpenAI, OpenRouter, and any OpenAI-compatible server.
//!
//! Calls are retried inside the client for rate limits, 5xx, timeouts and connection errors,
//! with exponential backoff and jitter (`parley_protocol::retry`, which also describes how
//! this layer composes with the task and delivery layers), honouring `Retry-After` and
//! `x-ratelimit-reset-*`. A wait longer than [`RetrySettings::max_inline_wait`] is not slept
//! through: the error goes back to the caller with `retry_after`, so the task is handed back
//! with that delay instead of holding a concurrency slot. 401/403 and other 4xx fail at once.
//!
//! What a provider sends back is outside input: a body is read up to [`MAX_RESPONSE_BYTES`]
//! (8 MiB), the error text kept is cut to [`parley_protocol::limits::MAX_ERROR_TEXT_CHARS`] characters, and
//! waits asked for (`Retry-After`, `retry-after-ms`, `x-ratelimit-reset-*`) are clamped to
//! [`MAX_PROVIDER_WAIT`] (1 h); huge, negative or NaN values never panic.
//!
//! The key goes only to the endpoint the operator configured: redirects are followed only
//! within the same origin (scheme, host and port), at most [`MAX_REDIRECTS`] times; a
//! redirect elsewhere is not followed (the call fails naming it), so neither the key nor
//! the prompt leaves for another host.

mod errors;
mod waits;
mod wire;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use crate::provider::{
    ChatRequest, ChatResponse, EmbedRequest, Embeddings, ErrorKind, LlmError, Provider,
};
pub use errors::redact_key_like;
pub use waits::{exhausted_until, parse_go_duration, retry_after};
pub use wire::names_structured_output;
use wire::{chat_body, parse_chat, parse_embeddings, parse_responses, responses_body, usage_only};

/// Largest provider reply read (8 MiB); a longer one is an error, not a memory spike.
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// Longest wait a provider can ask for (`Retry-After`, `x-ratelimit-reset-*`).
pub const MAX_PROVIDER_WAIT: Duration = Duration::from_secs(3600);
/// Same-origin redirects followed at most.
pub const MAX_REDIRECTS: usize = 5;

/// Follows a redirect only to the origin of the original request: the key and the prompt
/// never go to another host.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same = attempt.previous().first().is_some_and(|first| {
            first.scheme() == attempt.url().scheme()
                && first.host_str() == attempt.url().host_str()
                && first.port_or_known_default() == attempt.url().port_or_known_default()
        });
        if same && attempt.previous().len() <= MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// An API key that never prints.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: String) -> Self {
        Self(s)
    }
    fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug, Clone)]
pub struct RetrySettings {
    /// Retries after the first attempt.
    pub max_retries: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Longest wait slept through inside one call.
    pub max_inline_wait: Duration,
    /// Whether 429s are retried here. Off when a [`crate::ratelimit::RateLimited`] wraps
    /// the client: it pauses the key for every replica instead.
    pub retry_rate_limited: bool,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self {
            max_retries: 2,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(4),
            max_inline_wait: Duration::from_secs(5),
            retry_rate_limited: true,
        }
    }
}

/// Which wire API a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// The Responses API, falling back to Chat Completions when the server lacks it.
    Responses,
    ChatCompletions,
}

#[derive(Debug)]
pub struct OpenAiClient {
    /// Provider name used in errors and metadata.
    name: String,
    base_url: String,
    key: Option<Secret>,
    /// Environment variable the key came from, named in authentication errors.
    key_var: Option<&'static str>,
    /// Set once the server answered that it has no Responses API.
    chat_only: AtomicBool,
    /// Models for which this endpoint rejected structured output (`response_format` /
    /// `text.format`): asked without it from then on, for the life of the process.
    no_structured_output: Mutex<HashSet<String>>,
    http: reqwest::Client,
    extra_headers: Vec<(&'static str, String)>,
    pub retry: RetrySettings,
}

impl OpenAiClient {
    pub fn new(
        name: impl Into<String>,
        base_url: impl Into<String>,
        key: Option<(Secret, &'static str)>,
        api: Api,
    ) -> Result<Self, LlmError> {
        let name = name.into();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(120))
            .pool_idle_timeout(Duration::from_secs(90))
            .user_agent(concat!("parley/", env!("CARGO_PKG_VERSION")))
            .redirect(same_origin_redirects())
            .build()
            .map_err(|e| {
                LlmError::new(ErrorKind::Config, name.clone(), format!("HTTP client: {e}"))
            })?;
        let (key, key_var) = match key {
            Some((k, v)) => (Some(k), Some(v)),
            None => (None, None),
        };
        let extra_headers = if name == "openrouter" {
            vec![("X-Title", "Parley".to_string())]
        } else {
            Vec::new()
        };
        Ok(Self {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            name,
            key,
            key_var,
            chat_only: AtomicBool::new(api == Api::ChatCompletions),
            no_structured_output: Mutex::new(HashSet::new()),
            http,
            extra_headers,
            retry: RetrySettings::default(),
        })
    }

    /// The wait before retry `retry` (0 first), jittered (see [`parley_protocol::retry`]).
    fn backoff(&self, retry: u32) -> Duration {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let delay = parley_protocol::retry::exponential_ms(
            ms(self.retry.initial_backoff),
            ms(self.retry.max_backoff),
            retry,
        );
        Duration::from_millis(parley_protocol::retry::jitter_ms(delay))
    }

    /// Whether this endpoint took structured output for `model` so far.
    fn structured_output_ok(&self, model: &str) -> bool {
        !self
            .no_structured_output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(model)
    }

    /// Remembers that the endpoint rejected structured output for `model`; true the first
    /// time.
    fn reject_structured_output(&self, model: &str) -> bool {
        self.no_structured_output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(model.to_string())
    }

    /// One `POST url` of a JSON body within the call's deadline: the key, the extra
    /// headers, no redirects, the reply read under its size cap. Returns the status, the
    /// headers, the body and the latency; the caller classifies the status.
    async fn post_json(
        &self,
        url: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<(reqwest::StatusCode, HeaderMap, String, u64), LlmError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(LlmError::new(
                ErrorKind::Timeout,
                &self.name,
                "call deadline exceeded",
            ));
        }
        let mut rb = self.http.post(url).timeout(remaining).json(body);
        if let Some(k) = &self.key {
            rb = rb.bearer_auth(k.expose());
        }
        for (h, v) in &self.extra_headers {
            rb = rb.header(*h, v);
        }
        let started = Instant::now();
        let resp = rb.send().await.map_err(|e| self.transport_error(e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        if status.is_redirection() {
            return Err(self.redirect_error(status.as_u16(), &headers));
        }
        let text = self.read_body(resp).await?;
        Ok((status, headers, text, started.elapsed().as_millis() as u64))
    }

    async fn attempt(
        &self,
        req: &ChatRequest,
        deadline: Instant,
    ) -> Result<ChatResponse, LlmError> {
        let chat = self.chat_only.load(Ordering::Relaxed);
        let format = req
            .response_format
            .as_ref()
            .filter(|_| self.structured_output_ok(&req.model));
        let (url, body) = if chat {
            (
                format!("{}/chat/completions", self.base_url),
                chat_body(req, format),
            )
        } else {
            (
                format!("{}/responses", self.base_url),
                responses_body(req, format),
            )
        };
        let (status, headers, text, latency_ms) = self.post_json(&url, &body, deadline).await?;
        if !status.is_success() {
            if !chat && (status.as_u16() == 404 || status.as_u16() == 405) {
                // No Responses API here: use Chat Completions from now on.
                self.chat_only.store(true, Ordering::Relaxed);
                return Err(LlmError::new(ErrorKind::Internal, &self.name, "fallback"));
            }
            return Err(self.status_error(status.as_u16(), &headers, &text));
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            LlmError::new(
                ErrorKind::Malformed,
                &self.name,
                format!("reply is not JSON: {e}"),
            )
        })?;
        let parsed = if chat {
            parse_chat(&v)
        } else {
            parse_responses(&v)
        };
        let tool_calls = if req.tools.definitions.is_empty() {
            Vec::new()
        } else if chat {
            crate::tools::chat_tool_calls(&v)
        } else {
            crate::tools::responses_tool_calls(&v)
        };
        let parsed = parsed.or_else(|| (!tool_calls.is_empty()).then(|| usage_only(&v, chat)));
        let (text, pt, ct) = parsed.ok_or_else(|| {
            LlmError::new(
                ErrorKind::Malformed,
                &self.name,
                "reply has no message text (unexpected response shape)",
            )
        })?;
        let model = v
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(&req.model)
            .to_string();
        // Prompt-cache hits (`prompt_tokens_details` / `input_tokens_details`), priced as
        // such; never more than the prompt.
        let cached = v
            .pointer(if chat {
                "/usage/prompt_tokens_details/cached_tokens"
            } else {
                "/usage/input_tokens_details/cached_tokens"
            })
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(pt);
        Ok(ChatResponse {
            text,
            prompt_tokens: pt,
            cached_prompt_tokens: cached,
            completion_tokens: ct,
            model,
            latency_ms,
            rate_limit_reset: exhausted_until(&headers),
            tool_calls,
            structured: format.is_some(),
        })
    }

    /// One `POST {base}/embeddings` (same key, headers, size cap and error handling as a
    /// chat call).
    async fn embed_attempt(
        &self,
        req: &EmbedRequest,
        deadline: Instant,
    ) -> Result<Embeddings, LlmError> {
        let body = json!({"model": req.model, "input": req.inputs, "encoding_format": "float"});
        let url = format!("{}/embeddings", self.base_url);
        let (status, headers, text, latency_ms) = self.post_json(&url, &body, deadline).await?;
        if !status.is_success() {
            return Err(self.status_error(status.as_u16(), &headers, &text));
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            LlmError::new(
                ErrorKind::Malformed,
                &self.name,
                format!("embeddings reply is not JSON: {e}"),
            )
        })?;
        let vectors = parse_embeddings(&v, req.inputs.len())
            .map_err(|why| LlmError::new(ErrorKind::Malformed, &self.name, why))?;
        Ok(Embeddings {
            vectors,
            model: v
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or(&req.model)
                .to_string(),
            prompt_tokens: v
                .pointer("/usage/prompt_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            latency_ms,
        })
    }

    /// The body, read up to [`MAX_RESPONSE_BYTES`].
    async fn read_body(&self, mut resp: reqwest::Response) -> Result<String, LlmError> {
        let too_big = || {
            LlmError::new(
                ErrorKind::Malformed,
                &self.name,
                format!("reply is larger than {MAX_RESPONSE_BYTES} bytes; not read"),
            )
        };
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
        {
            return Err(too_big());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport_error(e))? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

#[async_trait]
impl Provider for OpenAiClient {
    fn name(&self) -> &str {
        &self.name
    }

    fn supports_tools(&self) -> bool {
        true
    }

    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let deadline = Instant::now() + req.timeout;
        let mut retries = 0;
        loop {
            match self.attempt(req, deadline).await {
                Ok(r) => return Ok(r),
                Err(e) if e.kind == ErrorKind::Internal && e.message == "fallback" => continue,
                Err(e)
                    if e.kind == ErrorKind::InvalidRequest
                        && req.response_format.is_some()
                        && self.structured_output_ok(&req.model)
                        && names_structured_output(&e.message) =>
                {
                    // The endpoint does not take structured output for this model: ask
                    // again without it (the prompt still asks for JSON), and from now on.
                    if self.reject_structured_output(&req.model) {
                        tracing::warn!(
                            provider = %self.name,
                            model = %req.model,
                            "structured output (JSON schema) rejected; using instruct-and-parse for this model from now on"
                        );
                    }
                    continue;
                }
                Err(e)
                    if e.retryable()
                        && retries < self.retry.max_retries
                        && (e.kind != ErrorKind::RateLimited || self.retry.retry_rate_limited) =>
                {
                    let wait = e.retry_after.unwrap_or_else(|| self.backoff(retries));
                    if wait > self.retry.max_inline_wait || Instant::now() + wait >= deadline {
                        return Err(e);
                    }
                    tracing::warn!(provider = %self.name, kind = ?e.kind, wait_ms = wait.as_millis() as u64, "LLM call failed, retrying");
                    parley_telemetry::metrics().llm_retry(&self.name, e.kind.as_str());
                    tokio::time::sleep(wait).await;
                    retries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn embed(&self, req: &EmbedRequest) -> Result<Embeddings, LlmError> {
        let deadline = Instant::now() + req.timeout;
        let mut retries = 0;
        loop {
            match self.embed_attempt(req, deadline).await {
                Ok(r) => return Ok(r),
                Err(e)
                    if e.retryable()
                        && retries < self.retry.max_retries
                        && (e.kind != ErrorKind::RateLimited || self.retry.retry_rate_limited) =>
                {
                    let wait = e.retry_after.unwrap_or_else(|| self.backoff(retries));
                    if wait > self.retry.max_inline_wait || Instant::now() + wait >= deadline {
                        return Err(e);
                    }
                    tracing::warn!(provider = %self.name, kind = ?e.kind, wait_ms = wait.as_millis() as u64, "embeddings call failed, retrying");
                    parley_telemetry::metrics().llm_retry(&self.name, e.kind.as_str());
                    tokio::time::sleep(wait).await;
                    retries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_debug_hides_key() {
        let s = Secret::new("sk-very-secret".into());
        assert!(!format!("{s:?}").contains("sk-very"));
    }
}
