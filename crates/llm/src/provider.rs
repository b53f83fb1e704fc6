//! The provider trait and its error type.

use std::time::Duration;

use async_trait::async_trait;
pub use parley_protocol::ErrorKind;
use tracing::Instrument as _;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: &'static str,
    pub content: String,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: "system",
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: "user",
            content: content.into(),
        }
    }
}

/// Structured output: a JSON schema the reply must follow.
///
/// OpenAI-compatible Chat Completions send it as `response_format: {type: "json_schema",
/// json_schema: {name, schema, strict}}`, the Responses API as `text.format`, and the local
/// model applies it while sampling. A provider that rejects it (HTTP 400 naming
/// `response_format` / `json_schema`) is asked again without it, and not asked with it again
/// for that model in this process: the caller's prompt still asks for JSON, so the reply is
/// parsed as before (instruct-and-parse).
///
/// Properties are generated in the order of the schema's `required` list by the local
/// model; for strict mode every property must be listed there and `additionalProperties`
/// must be `false`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseFormat {
    /// A short identifier (`[a-zA-Z0-9_-]`, at most 64 characters).
    pub name: String,
    pub schema: serde_json::Value,
    /// Ask the provider to enforce the schema exactly.
    pub strict: bool,
}

impl ResponseFormat {
    pub fn strict(name: impl Into<String>, schema: serde_json::Value) -> Self {
        Self {
            name: name.into(),
            schema,
            strict: true,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub temperature: f64,
    pub max_tokens: Option<u32>,
    /// Deadline for the whole call, retries included.
    pub timeout: Duration,
    /// Sampling seed where the provider supports one (the local model does).
    pub seed: Option<u64>,
    /// Function calling: tools offered and earlier calls (empty: a plain completion).
    pub tools: crate::tools::ToolRequest,
    /// Ask for a reply in this JSON schema (structured output), where supported.
    pub response_format: Option<ResponseFormat>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub text: String,
    pub prompt_tokens: u64,
    /// Of `prompt_tokens`, those the provider read from its prompt cache.
    pub cached_prompt_tokens: u64,
    pub completion_tokens: u64,
    pub model: String,
    pub latency_ms: u64,
    /// The provider said its allowance is used up (`x-ratelimit-remaining-* = 0`) until
    /// this much later (`x-ratelimit-reset-*`).
    pub rate_limit_reset: Option<Duration>,
    /// The tool calls the model asked for (empty for a final answer).
    pub tool_calls: Vec<crate::tools::ToolCall>,
    /// The reply was generated under the request's [`ResponseFormat`] (the provider took
    /// it); false without one, or when the provider rejected it and the call was made
    /// without.
    pub structured: bool,
}

/// A failed call, classified. Messages never contain API keys.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{provider}: {message}")]
pub struct LlmError {
    pub kind: ErrorKind,
    pub provider: String,
    pub message: String,
    /// The provider asked to wait this long before trying again.
    pub retry_after: Option<Duration>,
}

impl LlmError {
    pub fn new(kind: ErrorKind, provider: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind,
            provider: provider.into(),
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn retryable(&self) -> bool {
        self.kind.is_retryable()
    }
    /// The wire form carried in a failed [`parley_protocol::TaskResult`].
    pub fn to_task_error(&self) -> parley_protocol::TaskError {
        parley_protocol::TaskError {
            kind: self.kind,
            // Provider text is outside input: a few hundred characters go into the state.
            message: parley_protocol::preview(
                &self.to_string(),
                parley_protocol::limits::MAX_ERROR_TEXT_CHARS + 200,
            ),
            provider: Some(self.provider.clone()),
            retry_after_ms: self
                .retry_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

#[async_trait]
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// Provider name as configured (`openai`, `openrouter`, `openai-compatible`, `local`).
    fn name(&self) -> &str;
    /// Whether the provider does function calling (`ChatRequest::tools`); one that does
    /// not ignores them.
    fn supports_tools(&self) -> bool {
        false
    }
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError>;
    /// Embeddings of `req.inputs`, one vector per input in order. A provider without an
    /// embedding mode (the local model) answers a configuration error saying so.
    async fn embed(&self, req: &EmbedRequest) -> Result<Embeddings, LlmError> {
        let _ = req;
        Err(LlmError::new(
            ErrorKind::Config,
            self.name(),
            format!("provider {} has no embedding mode", self.name()),
        ))
    }
}

/// Texts to embed (`POST /v1/embeddings`).
#[derive(Debug, Clone)]
pub struct EmbedRequest {
    pub model: String,
    pub inputs: Vec<String>,
    /// Deadline for the whole call, retries included.
    pub timeout: Duration,
}

/// The vectors of an [`EmbedRequest`], in the order of its inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    pub model: String,
    /// Embedding tokens are prompt tokens (there is no completion).
    pub prompt_tokens: u64,
    pub latency_ms: u64,
}

/// Cosine similarity of two vectors: 1 for the same direction, 0 for orthogonal ones
/// (and for an empty or all-zero vector, which has no direction). Vectors of different
/// lengths compare over their common prefix.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    (dot / (na.sqrt() * nb.sqrt())).clamp(-1.0, 1.0)
}

/// Whether LLM spans carry prompts and completions (see [`record_content_on_spans`]).
static RECORD_CONTENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, put each LLM call's messages and reply on its span (as Langfuse's
/// `langfuse.observation.input` / `output`). Off by default: prompts hold the user's
/// problem and must not reach a trace backend nobody asked to send them to. Only the CLI
/// turns it on, for a Langfuse export with `PARLEY_TRACE_CONTENT=true`.
pub fn record_content_on_spans(on: bool) {
    RECORD_CONTENT.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The operator's prices this process charges calls at (see [`set_prices`]).
static PRICES: std::sync::RwLock<Option<std::sync::Arc<parley_protocol::PriceTable>>> =
    std::sync::RwLock::new(None);

/// From now on, price every call with `table` (the operator's price file and inline
/// prices; see [`parley_protocol::prices`]). A process-wide setting like the metrics
/// registry: the CLI and each service set it once at start-up. Without it only `local` has
/// a cost (0); every other call's cost is unknown.
pub fn set_prices(table: parley_protocol::PriceTable) {
    if let Ok(mut p) = PRICES.write() {
        *p = Some(std::sync::Arc::new(table));
    }
}

/// The prices calls are charged at now.
pub fn prices() -> std::sync::Arc<parley_protocol::PriceTable> {
    PRICES
        .read()
        .ok()
        .and_then(|p| p.clone())
        .unwrap_or_default()
}

/// Runs one LLM call for `task` with the task's agent settings, returning the text and the
/// metadata a contribution records (tokens in + out, latency, model, provider).
pub async fn call_for_task(
    provider: &dyn Provider,
    task: &parley_protocol::Task,
    messages: Vec<ChatMessage>,
) -> Result<(String, parley_protocol::ContributionMetadata), LlmError> {
    call_for_task_structured(provider, task, messages, None)
        .await
        .map(|(text, meta, _)| (text, meta))
}

/// [`call_for_task`] offering tools: also returns the calls the model asked for.
pub async fn call_for_task_with_tools(
    provider: &dyn Provider,
    task: &parley_protocol::Task,
    messages: Vec<ChatMessage>,
    tools: crate::tools::ToolRequest,
) -> Result<
    (
        String,
        Vec<crate::tools::ToolCall>,
        parley_protocol::ContributionMetadata,
    ),
    LlmError,
> {
    call(provider, task, messages, tools, None)
        .await
        .map(|c| (c.text, c.tool_calls, c.meta))
}

/// [`call_for_task`] asking for a reply in `format` (structured output) where the provider
/// supports it; the flag says whether the reply was generated under the schema.
pub async fn call_for_task_structured(
    provider: &dyn Provider,
    task: &parley_protocol::Task,
    messages: Vec<ChatMessage>,
    format: Option<&ResponseFormat>,
) -> Result<(String, parley_protocol::ContributionMetadata, bool), LlmError> {
    call(provider, task, messages, Default::default(), format)
        .await
        .map(|c| (c.text, c.meta, c.structured))
}

/// What one call for a task gave.
struct Called {
    text: String,
    tool_calls: Vec<crate::tools::ToolCall>,
    meta: parley_protocol::ContributionMetadata,
    structured: bool,
}

/// The one LLM call every `call_for_task*` makes: the request from the task's agent
/// settings, the `llm.call` span, token metrics.
async fn call(
    provider: &dyn Provider,
    task: &parley_protocol::Task,
    messages: Vec<ChatMessage>,
    tools: crate::tools::ToolRequest,
    format: Option<&ResponseFormat>,
) -> Result<Called, LlmError> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    task.id.hash(&mut h);
    let req = ChatRequest {
        model: task.agent.model.clone(),
        messages,
        temperature: task.agent.temperature,
        max_tokens: task.agent.max_tokens,
        timeout: Duration::from_millis(task.timeout_ms.max(1)),
        seed: Some(h.finish()),
        tools,
        response_format: format.cloned(),
    };
    // GenAI semantic conventions; prompt and completion text only when
    // `record_content_on_spans` turned it on (a Langfuse export that asked for it).
    let span = tracing::info_span!(
        "llm.call",
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.system = provider.name(),
        gen_ai.request.model = req.model.as_str(),
        gen_ai.request.temperature = req.temperature,
        gen_ai.output.type = if format.is_some() { "json" } else { "text" },
        parley.structured_output = tracing::field::Empty,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        parley.cost_usd = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        langfuse.observation.input = tracing::field::Empty,
        langfuse.observation.output = tracing::field::Empty,
    );
    let content = RECORD_CONTENT.load(std::sync::atomic::Ordering::Relaxed);
    if content {
        let input: Vec<serde_json::Value> = req
            .messages
            .iter()
            .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
            .collect();
        span.record(
            "langfuse.observation.input",
            serde_json::Value::Array(input).to_string().as_str(),
        );
    }
    let r = match provider.complete(&req).instrument(span.clone()).await {
        Ok(r) => {
            span.record("gen_ai.response.model", r.model.as_str());
            span.record("gen_ai.usage.input_tokens", r.prompt_tokens);
            span.record("gen_ai.usage.output_tokens", r.completion_tokens);
            if content {
                span.record("langfuse.observation.output", r.text.as_str());
            }
            if format.is_some() {
                span.record("parley.structured_output", r.structured);
            }
            parley_telemetry::metrics().record_tokens(
                provider.name(),
                &r.model,
                r.prompt_tokens,
                r.completion_tokens,
            );
            r
        }
        Err(e) => {
            span.record("error.type", e.kind.as_str());
            span.record("otel.status_code", "ERROR");
            return Err(e);
        }
    };
    // Priced by the model asked for (the reply may name a dated snapshot of it).
    let cost = prices().cost(
        provider.name(),
        &req.model,
        r.prompt_tokens,
        r.cached_prompt_tokens,
        r.completion_tokens,
    );
    if let Some(usd) = cost {
        span.record("parley.cost_usd", usd);
        parley_telemetry::metrics().record_cost(provider.name(), &req.model, usd);
    }
    let meta = parley_protocol::ContributionMetadata {
        tokens_used: r.prompt_tokens + r.completion_tokens,
        latency_ms: r.latency_ms,
        model: r.model,
        prompt_tokens: Some(r.prompt_tokens),
        completion_tokens: Some(r.completion_tokens),
        provider: Some(provider.name().to_string()),
        carried_over: false,
        tool_calls: Vec::new(),
        cached_prompt_tokens: (r.cached_prompt_tokens > 0).then_some(r.cached_prompt_tokens),
        cost_usd: cost,
        human: false,
    };
    Ok(Called {
        text: r.text,
        tool_calls: r.tool_calls,
        meta,
        structured: r.structured,
    })
}

/// Embeds `inputs` with the task's agent's model (the embedder): the `llm.call` span
/// (operation `embeddings`), token metrics and the cost at the operator's prices. Embedding
/// tokens are prompt tokens.
pub async fn embed_for_task(
    provider: &dyn Provider,
    task: &parley_protocol::Task,
    inputs: Vec<String>,
) -> Result<(Vec<Vec<f32>>, parley_protocol::ContributionMetadata), LlmError> {
    let req = EmbedRequest {
        model: task.agent.model.clone(),
        inputs,
        timeout: Duration::from_millis(task.timeout_ms.max(1)),
    };
    let span = tracing::info_span!(
        "llm.call",
        otel.kind = "client",
        gen_ai.operation.name = "embeddings",
        gen_ai.system = provider.name(),
        gen_ai.request.model = req.model.as_str(),
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        parley.cost_usd = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let r = match provider.embed(&req).instrument(span.clone()).await {
        Ok(r) => r,
        Err(e) => {
            span.record("error.type", e.kind.as_str());
            span.record("otel.status_code", "ERROR");
            return Err(e);
        }
    };
    if r.vectors.len() != req.inputs.len() {
        return Err(LlmError::new(
            ErrorKind::Malformed,
            provider.name(),
            format!(
                "{} embeddings for {} inputs",
                r.vectors.len(),
                req.inputs.len()
            ),
        ));
    }
    span.record("gen_ai.response.model", r.model.as_str());
    span.record("gen_ai.usage.input_tokens", r.prompt_tokens);
    parley_telemetry::metrics().record_tokens(provider.name(), &r.model, r.prompt_tokens, 0);
    let cost = prices().cost(provider.name(), &req.model, r.prompt_tokens, 0, 0);
    if let Some(usd) = cost {
        span.record("parley.cost_usd", usd);
        parley_telemetry::metrics().record_cost(provider.name(), &req.model, usd);
    }
    let meta = parley_protocol::ContributionMetadata {
        tokens_used: r.prompt_tokens,
        latency_ms: r.latency_ms,
        model: r.model,
        prompt_tokens: Some(r.prompt_tokens),
        completion_tokens: Some(0),
        provider: Some(provider.name().to_string()),
        carried_over: false,
        tool_calls: Vec::new(),
        cached_prompt_tokens: None,
        cost_usd: cost,
        human: false,
    };
    Ok((r.vectors, meta))
}

/// Adds the cost of a second call (e.g. a stricter retry) to `into`.
pub fn add_usage(
    into: &mut parley_protocol::ContributionMetadata,
    more: &parley_protocol::ContributionMetadata,
) {
    into.tokens_used += more.tokens_used;
    into.latency_ms += more.latency_ms;
    into.prompt_tokens = Some(into.prompt_tokens.unwrap_or(0) + more.prompt_tokens.unwrap_or(0));
    into.completion_tokens =
        Some(into.completion_tokens.unwrap_or(0) + more.completion_tokens.unwrap_or(0));
    if more.cached_prompt_tokens.is_some() {
        into.cached_prompt_tokens =
            Some(into.cached_prompt_tokens.unwrap_or(0) + more.cached_prompt_tokens.unwrap_or(0));
    }
    into.cost_usd = parley_protocol::add_cost(into.cost_usd, more.cost_usd);
}

/// The result message for `task` from an outcome.
pub fn task_result(
    task: &parley_protocol::Task,
    worker: &str,
    outcome: Result<parley_protocol::TaskOutput, LlmError>,
) -> parley_protocol::TaskResult {
    parley_protocol::TaskResult {
        schema_version: parley_protocol::SCHEMA_VERSION,
        task_id: task.id.clone(),
        debate_id: task.debate_id.clone(),
        attempt: task.attempt,
        worker: worker.to_string(),
        outcome: match outcome {
            Ok(o) => parley_protocol::TaskOutcome::Ok(o),
            Err(e) => parley_protocol::TaskOutcome::Error(e.to_task_error()),
        },
    }
}
