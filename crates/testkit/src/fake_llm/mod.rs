//! An OpenAI-compatible fake LLM server with latency, fault and rate-limit knobs.
//!
//! Routes: `POST /v1/chat/completions` (Chat Completions), `POST /v1/responses`
//! (Responses API) and `POST /v1/embeddings` (a deterministic embedding of each input: a
//! hashed bag of its words, so texts sharing words are close). Every request that reaches the server is recorded, whatever it was
//! answered with. Anything else answers 404 (and is recorded too).
//!
//! Order in which a request is judged, under one lock so concurrent requests see a
//! consistent view:
//! 1. unknown route, or `/v1/responses` while `set_responses_api(false)` → 404;
//! 2. body not a JSON object, or `"stream": true` (streaming is not supported) → 400; a
//!    JSON-schema `response_format` / `text.format` while structured output is
//!    [`StructuredOutput::Reject`]ed → 400 naming `response_format`;
//! 3. rate limit (only requests that got this far count toward the window) → 429;
//! 4. the first matching [`Fault`] with runs left;
//! 5. otherwise a normal reply (from the responder, or the default text) — or, when the
//!    request offers `tools` (and `tool_choice` is not `"none"`) and the tool caller set
//!    with [`FakeLlm::set_tool_caller`] asks for calls, a reply with those tool calls
//!    (Chat Completions `message.tool_calls`, Responses `function_call` output items).
//!    With [`StructuredOutput::Honour`] (not the default) a request that carries a JSON schema gets
//!    the responder's text only when it is a JSON object holding the schema's required
//!    keys, else a JSON instance of the schema, as a provider enforcing the schema would.
//!
//! Steps 4 and 5 wait for the configured [`Latency`] first. Knob changes apply to
//! requests that arrive after the change.

mod knobs;
pub mod script;
mod wire;

pub use knobs::{Fault, Latency, Match, RateLimit, StructuredOutput};
pub use wire::{embed_text, EMBEDDING_DIMENSIONS};

use anyhow::Context as _;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::Router;
use knobs::{ActiveFault, RateWindow, SeededRng, LATENCY_SEED};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// One request the fake LLM received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// URI path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers in arrival order; names are lower-case.
    pub headers: Vec<(String, String)>,
    /// The JSON body; a JSON string holding the raw text when the body was not JSON.
    pub body: Value,
    /// The body's `model` field (`""` when absent).
    pub model: String,
    /// The body's `temperature` field.
    pub temperature: Option<f64>,
    /// When the request arrived.
    pub received_at: Instant,
    /// The status the server answered (or will answer, once latency has passed) with;
    /// 0 for a [`Fault::Hang`].
    pub status: u16,
}

impl RecordedRequest {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every message/input text of the request, joined by newlines (Responses
    /// `instructions`, Chat `messages[].content`, Responses `input`).
    pub fn prompt_text(&self) -> String {
        wire::prompt_text(&self.body)
    }

    /// The names of the tools the request offers (`tools[]`, either wire shape).
    pub fn tool_names(&self) -> Vec<String> {
        wire::tool_names(&self.body)
    }

    /// Whether the request lets the model call tools: it offers some and its
    /// `tool_choice` is not `"none"`.
    pub fn may_call_tools(&self) -> bool {
        !self.tool_names().is_empty()
            && self.body.get("tool_choice").and_then(Value::as_str) != Some("none")
    }

    /// The tool results the request sends back, as (call id, output): Chat `role: "tool"`
    /// messages and Responses `function_call_output` items.
    pub fn tool_outputs(&self) -> Vec<(String, String)> {
        wire::tool_outputs(&self.body)
    }

    /// The JSON schema the request asks the reply to follow: Chat Completions'
    /// `response_format.json_schema.schema` or the Responses API's `text.format.schema`.
    pub fn json_schema(&self) -> Option<&Value> {
        wire::json_schema(&self.body)
    }
}

/// A tool call the fake LLM answers with (see [`FakeLlm::set_tool_caller`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeToolCall {
    pub name: String,
    /// The arguments text, sent as is (it need not be valid JSON).
    pub arguments: String,
}

impl FakeToolCall {
    pub fn new(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            arguments: arguments.into(),
        }
    }
}

type Responder = Arc<dyn Fn(&RecordedRequest) -> String + Send + Sync>;
type ToolCaller = Arc<dyn Fn(&RecordedRequest) -> Vec<FakeToolCall> + Send + Sync>;

/// A running fake LLM server on `127.0.0.1`. Stops (stops accepting, closes idle
/// connections, releases hung requests with 503) when dropped.
pub struct FakeLlm {
    /// Where the server listens.
    addr: SocketAddr,
    /// Knobs and recordings, shared with the request handlers.
    shared: Arc<Shared>,
    /// Set to `true` on drop: stops the server and wakes sleeping handlers.
    shutdown: watch::Sender<bool>,
}

struct Shared {
    state: Mutex<Knobs>,
    /// Handlers watch this to stop sleeping when the server is dropped.
    shutdown: watch::Receiver<bool>,
}

struct Knobs {
    /// Every request, in arrival order.
    requests: Vec<RecordedRequest>,
    latency: Latency,
    /// Reseeded on every `set_latency`, so heavy-tail runs are reproducible.
    rng: SeededRng,
    faults: Vec<ActiveFault>,
    rate_limit: Option<RateLimit>,
    window: RateWindow,
    /// How many requests were answered 429.
    rate_limited: usize,
    responder: Option<Responder>,
    /// Decides the tool calls of replies to requests that may call tools.
    tool_caller: Option<ToolCaller>,
    /// When false, `/v1/responses` answers 404.
    responses_api: bool,
    /// What a request with a JSON schema gets.
    structured_output: StructuredOutput,
    /// Replies are cut to the request's completion cap (`max_tokens`,
    /// `max_completion_tokens`, `max_output_tokens`; 4 characters a token), as a real
    /// provider's are. Off by default: the reply is whatever the responder says.
    honour_max_tokens: bool,
    /// Numbers the normal replies (`#<n>` in the default text, ids).
    replies: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Chat,
    Responses,
    Embeddings,
}

/// What the server decided to do with a request.
enum Plan {
    NotFound(String),
    BadRequest(String),
    RateLimited(Option<Duration>),
    Fault(Fault, Duration),
    /// A normal reply; with the quota's (limit, remaining, reset) when one is set.
    Reply(Endpoint, u64, Duration, Option<(u32, u32, Duration)>),
}

impl Plan {
    fn status(&self) -> u16 {
        match self {
            Plan::NotFound(_) => 404,
            Plan::BadRequest(_) => 400,
            Plan::RateLimited(_) => 429,
            Plan::Fault(Fault::Status { status, .. } | Fault::Reply { status, .. }, _) => *status,
            Plan::Fault(Fault::RateLimited { .. }, _) => 429,
            Plan::Fault(Fault::Malformed { .. }, _) => 200,
            Plan::Fault(Fault::Hang { .. }, _) => 0,
            Plan::Reply(..) => 200,
        }
    }
}

impl FakeLlm {
    /// Starts the server on an ephemeral port of 127.0.0.1 in the current tokio runtime,
    /// with zero latency, no faults, no rate limit and the Responses API on.
    pub async fn start() -> anyhow::Result<FakeLlm> {
        Self::start_on_port(0).await
    }

    /// Like [`FakeLlm::start`], on a given port (0 = ephemeral).
    pub async fn start_on_port(port: u16) -> anyhow::Result<FakeLlm> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], port))).await
    }

    /// Like [`FakeLlm::start`], listening on `addr` (e.g. an address processes in another
    /// network namespace reach; port 0 = ephemeral).
    pub async fn start_on(addr: SocketAddr) -> anyhow::Result<FakeLlm> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("while binding the fake LLM to {addr}"))?;
        let addr = listener
            .local_addr()
            .context("while reading the fake LLM's address")?;
        let (tx, rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            state: Mutex::new(Knobs {
                requests: Vec::new(),
                latency: Latency::Zero,
                rng: SeededRng::new(LATENCY_SEED),
                faults: Vec::new(),
                rate_limit: None,
                window: RateWindow::default(),
                rate_limited: 0,
                responder: None,
                tool_caller: None,
                responses_api: true,
                structured_output: StructuredOutput::Ignore,
                honour_max_tokens: false,
                replies: 0,
            }),
            shutdown: rx.clone(),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let mut stop = rx;
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|v| *v).await;
                })
                .await;
        });
        Ok(FakeLlm {
            addr,
            shared,
            shutdown: tx,
        })
    }

    /// `http://127.0.0.1:PORT/v1` — what an OpenAI client takes as its base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in arrival order (failed ones included).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.knobs().requests.clone()
    }

    /// The statuses answered to the requests from the `from`th on (0-based), in arrival
    /// order: cheaper than [`FakeLlm::requests`] for polling.
    pub fn statuses(&self, from: usize) -> Vec<u16> {
        let k = self.knobs();
        k.requests.iter().skip(from).map(|r| r.status).collect()
    }

    /// How many requests were received so far (failed ones included).
    pub fn request_count(&self) -> usize {
        self.knobs().requests.len()
    }

    /// Sets the latency of later requests (and reseeds the heavy-tail generator).
    pub fn set_latency(&self, l: Latency) {
        let mut k = self.knobs();
        k.latency = l;
        k.rng = SeededRng::new(LATENCY_SEED);
    }

    /// Adds a fault after the existing ones (the first matching fault wins).
    pub fn add_fault(&self, f: Fault) {
        let remaining = f.times();
        self.knobs().faults.push(ActiveFault {
            fault: f,
            remaining,
        });
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.knobs().faults.clear();
    }

    /// Sets or removes the requests-per-minute limit. The 60-second window starts empty
    /// each time this is called; the 429 count is kept.
    pub fn set_rate_limit(&self, limit: Option<RateLimit>) {
        let mut k = self.knobs();
        k.rate_limit = limit;
        k.window.clear();
    }

    /// How many requests were answered 429 so far.
    pub fn rate_limited_count(&self) -> usize {
        self.knobs().rate_limited
    }

    /// Replaces the default reply text. The function is called outside the server's
    /// lock, so it may call back into this `FakeLlm`.
    pub fn set_responder(&self, f: impl Fn(&RecordedRequest) -> String + Send + Sync + 'static) {
        self.knobs().responder = Some(Arc::new(f));
    }

    /// Answers requests that may call tools (they offer `tools`, `tool_choice` is not
    /// `"none"`) with the calls `f` returns; an empty list means a normal text reply. Called
    /// outside the server's lock.
    pub fn set_tool_caller(
        &self,
        f: impl Fn(&RecordedRequest) -> Vec<FakeToolCall> + Send + Sync + 'static,
    ) {
        self.knobs().tool_caller = Some(Arc::new(f));
    }

    /// Turns the Responses API route on or off; off answers `/v1/responses` with 404 so
    /// clients can test falling back to Chat Completions.
    pub fn set_responses_api(&self, enabled: bool) {
        self.knobs().responses_api = enabled;
    }

    /// How later requests that carry a JSON schema (structured output) are answered.
    pub fn set_structured_output(&self, mode: StructuredOutput) {
        self.knobs().structured_output = mode;
    }

    /// Cuts later replies to the completion cap each request asks for (see
    /// `Knobs::honour_max_tokens`); off: a reply may be longer than asked.
    pub fn set_honour_max_tokens(&self, on: bool) {
        self.knobs().honour_max_tokens = on;
    }

    fn knobs(&self) -> MutexGuard<'_, Knobs> {
        lock(&self.shared.state)
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl std::fmt::Debug for FakeLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeLlm")
            .field("base_url", &self.base_url())
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<Knobs>) -> MutexGuard<'_, Knobs> {
    // A panic while holding the lock leaves the knobs usable; keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Knobs {
    fn decide(
        &mut self,
        endpoint: Option<Endpoint>,
        body: &Value,
        model: &str,
        prompt: &str,
        now: Instant,
    ) -> Plan {
        let endpoint = match endpoint {
            Some(Endpoint::Responses) if !self.responses_api => {
                return Plan::NotFound("the Responses API is disabled on this server".into())
            }
            Some(e) => e,
            None => return Plan::NotFound("unknown route".into()),
        };
        if !body.is_object() {
            return Plan::BadRequest("the request body is not a JSON object".into());
        }
        if body.get("stream").and_then(Value::as_bool) == Some(true) {
            return Plan::BadRequest("stream: true is not supported by the fake LLM".into());
        }
        if endpoint == Endpoint::Embeddings && wire::embedding_inputs(body).is_none() {
            return Plan::BadRequest(
                "input must be a non-empty string or a non-empty array of strings".into(),
            );
        }
        if self.structured_output == StructuredOutput::Reject && wire::json_schema(body).is_some() {
            return Plan::BadRequest(
                "Invalid parameter: 'response_format' of type 'json_schema' is not supported \
                 with this model."
                    .into(),
            );
        }
        let mut quota = None;
        if let Some(limit) = self.rate_limit {
            match self.window.admit(now, &limit) {
                Some((remaining, reset)) => quota = Some((limit.requests, remaining, reset)),
                None => {
                    self.rate_limited += 1;
                    return Plan::RateLimited(limit.retry_after);
                }
            }
        }
        let delay = self.latency.sample(&mut self.rng);
        if let Some(fault) = knobs::take_fault(&mut self.faults, model, prompt) {
            if let Fault::RateLimited { retry_after, .. } = fault {
                return Plan::RateLimited(retry_after);
            }
            return Plan::Fault(fault, delay);
        }
        self.replies += 1;
        Plan::Reply(endpoint, self.replies, delay, quota)
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let received_at = Instant::now();
    let path = uri.path().to_string();
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body: Value = serde_json::from_slice(&raw)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into_owned()));
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let temperature = body.get("temperature").and_then(Value::as_f64);
    let prompt = wire::prompt_text(&body);
    let endpoint = match (method == Method::POST, path.as_str()) {
        (true, "/v1/chat/completions") => Some(Endpoint::Chat),
        (true, "/v1/responses") => Some(Endpoint::Responses),
        (true, "/v1/embeddings") => Some(Endpoint::Embeddings),
        _ => None,
    };

    let (plan, record, responder, tool_caller, structured, honour) = {
        let mut k = lock(&shared.state);
        let plan = k.decide(endpoint, &body, &model, &prompt, received_at);
        let structured = k.structured_output;
        let honour = k.honour_max_tokens;
        let record = RecordedRequest {
            path,
            headers,
            body,
            model,
            temperature,
            received_at,
            status: plan.status(),
        };
        k.requests.push(record.clone());
        (
            plan,
            record,
            k.responder.clone(),
            k.tool_caller.clone(),
            structured,
            honour,
        )
    };

    match plan {
        Plan::NotFound(msg) => json_response(
            StatusCode::NOT_FOUND,
            wire::error_body(&msg, "invalid_request_error", "not_found"),
        ),
        Plan::BadRequest(msg) => json_response(
            StatusCode::BAD_REQUEST,
            wire::error_body(&msg, "invalid_request_error", "invalid_request"),
        ),
        Plan::RateLimited(retry_after) => {
            let mut resp = json_response(
                StatusCode::TOO_MANY_REQUESTS,
                wire::error_body(
                    "Rate limit reached for requests (fake LLM)",
                    "requests",
                    "rate_limit_exceeded",
                ),
            );
            if let Some(d) = retry_after {
                let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
                if let Ok(v) = secs.to_string().parse() {
                    resp.headers_mut().insert(header::RETRY_AFTER, v);
                }
            }
            resp
        }
        Plan::Fault(fault, delay) => {
            if let Fault::Hang { .. } = fault {
                sleep_or_shutdown(&shared, Duration::from_secs(24 * 3600)).await;
                return stopped();
            }
            if sleep_or_shutdown(&shared, delay).await {
                return stopped();
            }
            match fault {
                Fault::Status { status, body, .. } => {
                    let code =
                        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    if serde_json::from_str::<Value>(&body).is_ok() {
                        json_response(code, body)
                    } else {
                        text_response(code, "text/plain; charset=utf-8", body)
                    }
                }
                Fault::Reply {
                    status,
                    headers,
                    body,
                    ..
                } => {
                    let code =
                        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    let mut resp = text_response(code, "application/json", body);
                    for (name, value) in headers {
                        if let (Ok(n), Ok(v)) = (
                            header::HeaderName::from_bytes(name.as_bytes()),
                            header::HeaderValue::from_str(&value),
                        ) {
                            resp.headers_mut().insert(n, v);
                        }
                    }
                    resp
                }
                _ => json_response(StatusCode::OK, wire::MALFORMED_BODY.to_string()),
            }
        }
        Plan::Reply(endpoint, n, delay, quota) => {
            if sleep_or_shutdown(&shared, delay).await {
                return stopped();
            }
            if endpoint == Endpoint::Embeddings {
                let inputs = wire::embedding_inputs(&record.body).unwrap_or_default();
                return json_response(
                    StatusCode::OK,
                    wire::embeddings_reply(&record.model, &inputs).to_string(),
                );
            }
            let calls = match tool_caller {
                Some(f) if record.may_call_tools() => f(&record),
                _ => Vec::new(),
            };
            let mut text = if !calls.is_empty() {
                String::new()
            } else {
                match responder {
                    Some(f) => f(&record),
                    None => wire::default_reply(&record.model, n, &prompt),
                }
            };
            if structured == StructuredOutput::Honour && calls.is_empty() {
                if let Some(schema) = record.json_schema() {
                    if !wire::holds_required_keys(&text, schema) {
                        text = wire::instance_of(schema, n).to_string();
                    }
                }
            }
            if honour {
                let cap = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
                    .iter()
                    .find_map(|k| record.body.get(*k).and_then(Value::as_u64));
                if let Some(cap) = cap {
                    let most = usize::try_from(cap.saturating_mul(4)).unwrap_or(usize::MAX);
                    if text.chars().count() > most {
                        text = text.chars().take(most).collect();
                    }
                }
            }
            let reply = match endpoint {
                _ if !calls.is_empty() => wire::tool_call_reply(
                    endpoint == Endpoint::Chat,
                    &record.model,
                    n,
                    &calls,
                    &prompt,
                ),
                Endpoint::Chat => wire::chat_completion(&record.model, n, &text, &prompt),
                Endpoint::Responses | Endpoint::Embeddings => {
                    wire::response(&record.model, n, &text, &prompt)
                }
            };
            let mut resp = json_response(StatusCode::OK, reply.to_string());
            if let Some((limit, remaining, reset)) = quota {
                let h = resp.headers_mut();
                for (name, value) in [
                    ("x-ratelimit-limit-requests", limit.to_string()),
                    ("x-ratelimit-remaining-requests", remaining.to_string()),
                    (
                        "x-ratelimit-reset-requests",
                        format!("{}ms", reset.as_millis()),
                    ),
                ] {
                    if let Ok(v) = header::HeaderValue::from_str(&value) {
                        h.insert(name, v);
                    }
                }
            }
            resp
        }
    }
}

/// Sleeps for `d`; returns true when the server was dropped meanwhile.
async fn sleep_or_shutdown(shared: &Shared, d: Duration) -> bool {
    if *shared.shutdown.borrow() {
        return true;
    }
    if d.is_zero() {
        return false;
    }
    let mut rx = shared.shutdown.clone();
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = rx.wait_for(|v| *v) => true,
    }
}

fn stopped() -> Response {
    json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        wire::error_body("the fake LLM was stopped", "server_error", "stopped"),
    )
}

fn json_response(status: StatusCode, body: String) -> Response {
    text_response(status, "application/json", body)
}

fn text_response(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    resp
}
