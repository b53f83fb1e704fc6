//! LLM providers: one trait, several clients.
//!
//! # Layout
//! - [`provider`]: the [`Provider`] trait, requests, replies, [`LlmError`] and its
//!   classification (what is retried, what fails at once).
//! - [`openai`]: OpenAI (Responses API, falling back to Chat Completions), OpenRouter and any
//!   OpenAI-compatible base URL, over one HTTP client; its submodules hold the two wire
//!   formats (`wire`), the waits a provider asks for (`waits`) and error replies (`errors`).
//! - [`local`]: the in-process SmolLM2 model (see `parley-local`).
//! - [`ratelimit`]: GCRA rate limits per provider/model, in Redis (cluster-wide, one Lua
//!   script, server time) or in-process, and the [`ratelimit::RateLimited`] provider wrapper.
//! - [`tools`]: function calling in both wire APIs: tool definitions, the calls a reply
//!   asks for, the results sent back.
//! - [`registry`]: picks and caches the provider for an agent's config; reads API keys from
//!   the environment and reports a missing key as a configuration error naming the variable.

pub mod local;
pub mod openai;
pub mod provider;
pub mod ratelimit;
pub mod registry;
pub mod tools;

pub use provider::{
    add_usage, call_for_task, call_for_task_structured, call_for_task_with_tools, cosine,
    embed_for_task, prices, record_content_on_spans, set_prices, task_result, ChatMessage,
    ChatRequest, ChatResponse, EmbedRequest, Embeddings, LlmError, Provider, ResponseFormat,
};
pub use registry::{ProviderSettings, Registry};
