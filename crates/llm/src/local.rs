//! The `local` provider: SmolLM2-135M-Instruct run in-process on the CPU.
//!
//! The model is loaded once per process and shared; each call runs on tokio's blocking pool
//! so generation never stalls the async worker threads.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use parley_local::{GenerateRequest, LocalModel};

use crate::provider::{ChatRequest, ChatResponse, ErrorKind, LlmError, Provider};

/// Repeat penalty for the small local model, which otherwise tends to loop.
pub const REPEAT_PENALTY: f32 = 1.15;

/// Generation length when the agent config sets no `maxTokens`.
pub const DEFAULT_LOCAL_MAX_TOKENS: u32 = 256;

#[derive(Debug, Clone)]
pub struct LocalProvider {
    model: Arc<LocalModel>,
}

impl LocalProvider {
    pub fn new(model: Arc<LocalModel>) -> Self {
        Self { model }
    }
    pub fn model(&self) -> &LocalModel {
        &self.model
    }
}

#[async_trait]
impl Provider for LocalProvider {
    fn name(&self) -> &str {
        "local"
    }

    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let gen = GenerateRequest {
            messages: req
                .messages
                .iter()
                .map(|m| parley_local::ChatMessage {
                    role: m.role.to_string(),
                    content: m.content.clone(),
                })
                .collect(),
            max_tokens: req.max_tokens.unwrap_or(DEFAULT_LOCAL_MAX_TOKENS) as usize,
            temperature: req.temperature,
            top_p: 0.9,
            seed: req.seed.unwrap_or(42),
            repeat_penalty: REPEAT_PENALTY,
            deadline: Some(Instant::now() + req.timeout),
        };
        let model = self.model.clone();
        let started = Instant::now();
        let out = tokio::time::timeout(
            req.timeout,
            tokio::task::spawn_blocking(move || model.generate(&gen)),
        )
        .await
        .map_err(|_| LlmError::new(ErrorKind::Timeout, "local", "generation timed out"))?
        .map_err(|e| {
            LlmError::new(
                ErrorKind::Internal,
                "local",
                format!("generation task: {e}"),
            )
        })?
        .map_err(|e| match e {
            parley_local::LocalError::DeadlineExceeded => {
                LlmError::new(ErrorKind::Timeout, "local", e.to_string())
            }
            e => LlmError::new(ErrorKind::Internal, "local", e.to_string()),
        })?;
        Ok(ChatResponse {
            text: out.text.trim().to_string(),
            prompt_tokens: out.prompt_tokens as u64,
            completion_tokens: out.completion_tokens as u64,
            model: self.model.model_name().to_string(),
            latency_ms: started.elapsed().as_millis() as u64,
            rate_limit_reset: None,
            tool_calls: Vec::new(),
        })
    }
}
