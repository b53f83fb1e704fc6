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
//! (8 MiB), the error text kept is cut to [`limits::MAX_ERROR_TEXT_CHARS`] characters, and
//! waits asked for (`Retry-After`, `retry-after-ms`, `x-ratelimit-reset-*`) are clamped to
//! [`MAX_PROVIDER_WAIT`] (1 h); huge, negative or NaN values never panic.
//!
//! The key goes only to the endpoint the operator configured: redirects are followed only
//! within the same origin (scheme, host and port), at most [`MAX_REDIRECTS`] times; a
//! redirect elsewhere is not followed (the call fails naming it), so neither the key nor
//! the prompt leaves for another host.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use parley_protocol::limits;

use crate::provider::{
    ChatRequest, ChatResponse, EmbedRequest, Embeddings, ErrorKind, LlmError, Provider,
    ResponseFormat,
};

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

/// A duration of `secs` seconds clamped to `0..=MAX_PROVIDER_WAIT`; `None` for NaN.
fn clamped_secs(secs: f64) -> Option<Duration> {
    if secs.is_nan() {
        return None;
    }
    Some(Duration::from_secs_f64(
        secs.clamp(0.0, MAX_PROVIDER_WAIT.as_secs_f64()),
    ))
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

    /// A redirect that was not followed (another origin, or too many).
    fn redirect_error(&self, status: u16, headers: &HeaderMap) -> LlmError {
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

    fn transport_error(&self, e: reqwest::Error) -> LlmError {
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
    fn scrub(&self, text: &str) -> String {
        let text = match &self.key {
            Some(k) if !k.expose().is_empty() => text.replace(k.expose(), "[redacted]"),
            _ => text.to_string(),
        };
        redact_key_like(&text)
    }

    fn status_error(&self, status: u16, headers: &HeaderMap, body: &str) -> LlmError {
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

/// Whether a rejected request's error text is about structured output (`response_format`,
/// `json_schema`, `text.format`), i.e. the endpoint or model does not support it.
pub fn names_structured_output(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "response_format",
        "response format",
        "json_schema",
        "json schema",
        "text.format",
        "structured output",
    ]
    .iter()
    .any(|k| m.contains(k))
}

fn chat_body(req: &ChatRequest, format: Option<&ResponseFormat>) -> Value {
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    let mut body =
        json!({"model": req.model, "messages": messages, "temperature": req.temperature});
    if let Some(m) = req.max_tokens {
        body["max_tokens"] = json!(m);
    }
    crate::tools::extend_chat_body(&mut body, &req.tools);
    if let Some(f) = format {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": f.name, "schema": f.schema, "strict": f.strict},
        });
    }
    body
}

fn responses_body(req: &ChatRequest, format: Option<&ResponseFormat>) -> Value {
    let instructions: Vec<&str> = req
        .messages
        .iter()
        .filter(|m| m.role == "system")
        .map(|m| m.content.as_str())
        .collect();
    let input: Vec<Value> = req
        .messages
        .iter()
        .filter(|m| m.role != "system")
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    let mut body = json!({"model": req.model, "input": input, "temperature": req.temperature});
    if !instructions.is_empty() {
        body["instructions"] = json!(instructions.join("\n\n"));
    }
    if let Some(m) = req.max_tokens {
        body["max_output_tokens"] = json!(m);
    }
    crate::tools::extend_responses_body(&mut body, &req.tools);
    if let Some(f) = format {
        body["text"] = json!({"format": {
            "type": "json_schema",
            "name": f.name,
            "schema": f.schema,
            "strict": f.strict,
        }});
    }
    body
}

/// A reply with tool calls and no text: its usage, with an empty text.
fn usage_only(v: &Value, chat: bool) -> (String, u64, u64) {
    let (p, c) = if chat {
        ("/usage/prompt_tokens", "/usage/completion_tokens")
    } else {
        ("/usage/input_tokens", "/usage/output_tokens")
    };
    let n = |ptr: &str| v.pointer(ptr).and_then(Value::as_u64).unwrap_or(0);
    (String::new(), n(p), n(c))
}

fn parse_chat(v: &Value) -> Option<(String, u64, u64)> {
    let text = v
        .pointer("/choices/0/message/content")?
        .as_str()?
        .to_string();
    let pt = v
        .pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let ct = v
        .pointer("/usage/completion_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some((text, pt, ct))
}

fn parse_responses(v: &Value) -> Option<(String, u64, u64)> {
    let text = if let Some(t) = v.get("output_text").and_then(Value::as_str) {
        t.to_string()
    } else {
        let mut out = String::new();
        for item in v.get("output")?.as_array()? {
            if item.get("type").and_then(Value::as_str) != Some("message") {
                continue;
            }
            for part in item
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if part.get("type").and_then(Value::as_str) == Some("output_text") {
                    out.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
                }
            }
        }
        out
    };
    if text.is_empty() && v.get("output").is_none() {
        return None;
    }
    let pt = v
        .pointer("/usage/input_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let ct = v
        .pointer("/usage/output_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some((text, pt, ct))
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

/// The vectors of an embeddings reply (`data[].embedding`, placed by `data[].index`), or
/// why the reply does not have exactly one numeric vector per input.
fn parse_embeddings(v: &Value, inputs: usize) -> Result<Vec<Vec<f32>>, String> {
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or("embeddings reply has no data array")?;
    if data.len() != inputs {
        return Err(format!(
            "embeddings reply has {} vectors for {inputs} inputs",
            data.len()
        ));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; inputs];
    for (i, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .map_or(i, |n| n as usize);
        let slot = out
            .get_mut(index)
            .ok_or_else(|| format!("embeddings reply has index {index} for {inputs} inputs"))?;
        let vector = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("embeddings reply item {i} has no numeric embedding"))?
            .iter()
            .map(|x| x.as_f64().map(|f| f as f32))
            .collect::<Option<Vec<f32>>>()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("embeddings reply item {i} has no numeric embedding"))?;
        if slot.replace(vector).is_some() {
            return Err(format!("embeddings reply repeats index {index}"));
        }
    }
    out.into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| "embeddings reply misses an index".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeddings_replies_are_parsed_by_index_and_checked() {
        let v = json!({"data": [
            {"index": 1, "embedding": [0.0, 1.0]},
            {"index": 0, "embedding": [1.0, 0.0]},
        ]});
        assert_eq!(
            parse_embeddings(&v, 2).unwrap(),
            vec![vec![1.0, 0.0], vec![0.0, 1.0]]
        );
        assert!(parse_embeddings(&v, 3)
            .unwrap_err()
            .contains("2 vectors for 3"));
        let dup =
            json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]});
        assert!(parse_embeddings(&dup, 2).unwrap_err().contains("repeats"));
        let bad = json!({"data": [{"index": 0, "embedding": ["x"]}]});
        assert!(parse_embeddings(&bad, 1).unwrap_err().contains("numeric"));
        assert!(parse_embeddings(&json!({}), 1).is_err());
    }

    #[test]
    fn cosine_of_vectors() {
        use crate::cosine;
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-9);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).abs() < 1e-9);
        assert!((cosine(&[1.0, 1.0], &[1.0, 0.0]) - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
        assert_eq!(cosine(&[], &[]), 0.0);
    }

    #[test]
    fn provider_error_text_never_keeps_a_key() {
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

    #[test]
    fn secret_debug_hides_key() {
        let s = Secret::new("sk-very-secret".into());
        assert!(!format!("{s:?}").contains("sk-very"));
    }

    #[test]
    fn structured_output_goes_in_each_api_s_field() {
        let format = ResponseFormat::strict("verdict", json!({"type": "object"}));
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![crate::ChatMessage::user("hi")],
            temperature: 0.2,
            max_tokens: None,
            timeout: Duration::from_secs(1),
            seed: None,
            response_format: Some(format.clone()),
            tools: Default::default(),
        };
        let chat = chat_body(&req, Some(&format));
        assert_eq!(
            chat["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "verdict", "schema": {"type": "object"}, "strict": true}})
        );
        let resp = responses_body(&req, Some(&format));
        assert_eq!(
            resp["text"],
            json!({"format": {"type": "json_schema", "name": "verdict", "schema": {"type": "object"}, "strict": true}})
        );
        assert!(chat_body(&req, None).get("response_format").is_none());
        assert!(responses_body(&req, None).get("text").is_none());
    }

    #[test]
    fn rejections_that_name_structured_output_are_recognised() {
        for m in [
            "request rejected (HTTP 400): Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
            "request rejected (HTTP 400): Unsupported parameter: 'text.format'",
            "request rejected (HTTP 400): This model does not support Structured Outputs",
            "request rejected (HTTP 422): json schema not supported",
        ] {
            assert!(names_structured_output(m), "{m}");
        }
        assert!(!names_structured_output(
            "request rejected (HTTP 400): maximum context length exceeded"
        ));
    }

    #[test]
    fn parses_both_shapes() {
        let chat = json!({"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}});
        assert_eq!(parse_chat(&chat), Some(("hi".into(), 3, 1)));
        let resp = json!({"output":[{"type":"message","content":[{"type":"output_text","text":"yo"}]}],"usage":{"input_tokens":4,"output_tokens":2}});
        assert_eq!(parse_responses(&resp), Some(("yo".into(), 4, 2)));
        assert_eq!(parse_chat(&json!({"nope":1})), None);
    }
}
