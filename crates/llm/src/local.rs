//! The `local` provider: SmolLM2-135M-Instruct run in-process on the CPU.
//!
//! The model is loaded once per process and shared; each call runs on tokio's blocking pool
//! so generation never stalls the async worker threads (the model's engine batches
//! concurrent calls).
//!
//! A request with a [`ResponseFormat`] is generated under that JSON schema (constrained
//! decoding, see `parley_local::constrain`): the reply is always valid JSON of the schema.
//! A schema the constraint cannot express is reported with a warning and the call is made
//! without it, like a remote provider that rejects structured output.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use parley_local::{GenerateRequest, JsonSchema, Limits, LocalModel};

use crate::provider::{ChatRequest, ChatResponse, ErrorKind, LlmError, Provider, ResponseFormat};

/// Repeat penalty for the small local model, which otherwise tends to loop.
pub const REPEAT_PENALTY: f32 = 1.15;

/// Generation length when the agent config sets no `maxTokens`.
pub const DEFAULT_LOCAL_MAX_TOKENS: u32 = 256;

/// Generation length of a structured (JSON) reply when the agent config sets no
/// `maxTokens`: room for a synthesis with its lists.
pub const DEFAULT_LOCAL_JSON_MAX_TOKENS: u32 = 640;

/// Bounds the constraint puts on JSON strings and arrays whose schema sets none: long
/// enough for a solution section, short enough that a small model cannot ramble past its
/// token budget in one field; and at least a short sentence, so a small model cannot
/// close a field after a stray `,` or a number.
pub const JSON_LIMITS: Limits = Limits {
    min_string_chars: 12,
    max_string_chars: 900,
    max_array_items: 4,
};

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

/// The schema compiled for constrained decoding, or `None` (with a warning) when the
/// constraint cannot express it.
fn compile(format: &ResponseFormat) -> Option<JsonSchema> {
    match JsonSchema::compile(&format.schema, JSON_LIMITS) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(
                schema = %format.name,
                error = %e,
                "local model: JSON schema not supported for constrained decoding; generating without it"
            );
            None
        }
    }
}

/// Drops leading lines of `reply` that echo the instruction: a line that repeats (or is
/// the start of) a line of the prompt's last paragraph (where the prompts put the
/// instruction), or repeats one of its short section labels ending in `:` (e.g.
/// "Refine your proposal:", "Your proposal:"). Small models often echo the instruction
/// before answering. A reply that is nothing but the echo is kept as it is.
pub fn strip_echoed_instruction(reply: &str, prompt: &str) -> String {
    fn norm(line: &str) -> String {
        line.trim()
            .trim_start_matches(['#', '*', '>', '-', ' '])
            .trim_end_matches(['*', ':', ' ', '.'])
            .to_lowercase()
    }
    let last_paragraph = prompt
        .trim_end()
        .rsplit_once("\n\n")
        .map_or(prompt, |(_, p)| p);
    let instruction: Vec<String> = last_paragraph
        .lines()
        .map(norm)
        .filter(|l| l.chars().count() >= 8)
        .collect();
    // Section labels ("Problem:", "Your proposal:") and whole prompt lines of some length
    // (a repeated problem statement).
    let repeated: std::collections::HashSet<String> = prompt
        .lines()
        .filter_map(|l| {
            let n = norm(l);
            let label = l.trim_end().ends_with(':') && l.chars().count() <= 60;
            let len = n.chars().count();
            ((label && len >= 4) || len >= 20).then_some(n)
        })
        .collect();
    let echoes = |line: &str| {
        let n = norm(line);
        !n.is_empty()
            && (repeated.contains(&n)
                || (n.chars().count() >= 8 && instruction.iter().any(|i| i.starts_with(&n))))
    };
    let mut rest = reply.trim_start();
    loop {
        let (first, after) = rest.split_once('\n').unwrap_or((rest, ""));
        if !echoes(first) || after.trim().is_empty() {
            break;
        }
        rest = after.trim_start();
    }
    rest.trim().to_string()
}

#[async_trait]
impl Provider for LocalProvider {
    fn name(&self) -> &str {
        "local"
    }

    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let schema = req.response_format.as_ref().and_then(compile);
        let default_max = if schema.is_some() {
            DEFAULT_LOCAL_JSON_MAX_TOKENS
        } else {
            DEFAULT_LOCAL_MAX_TOKENS
        };
        let structured = schema.is_some();
        let gen = GenerateRequest {
            messages: req
                .messages
                .iter()
                .map(|m| parley_local::ChatMessage {
                    role: m.role.to_string(),
                    content: m.content.clone(),
                })
                .collect(),
            max_tokens: req.max_tokens.unwrap_or(default_max) as usize,
            temperature: req.temperature,
            top_p: 0.9,
            seed: req.seed.unwrap_or(42),
            repeat_penalty: REPEAT_PENALTY,
            deadline: Some(Instant::now() + req.timeout),
            schema,
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
            parley_local::LocalError::InvalidRequest(_) => {
                LlmError::new(ErrorKind::InvalidRequest, "local", e.to_string())
            }
            e => LlmError::new(ErrorKind::Internal, "local", e.to_string()),
        })?;
        if out.closed_at_budget {
            tracing::warn!(
                completion_tokens = out.completion_tokens,
                "local model: JSON reply reached its token budget; closed it early (raise maxTokens for longer answers)"
            );
        }
        let text = if structured {
            out.text
        } else {
            let instruction = req
                .messages
                .iter()
                .rev()
                .find(|m| m.role == "user")
                .map_or("", |m| m.content.as_str());
            strip_echoed_instruction(&out.text, instruction)
        };
        Ok(ChatResponse {
            text,
            prompt_tokens: out.prompt_tokens as u64,
            cached_prompt_tokens: 0,
            completion_tokens: out.completion_tokens as u64,
            model: self.model.model_name().to_string(),
            latency_ms: started.elapsed().as_millis() as u64,
            rate_limit_reset: None,
            tool_calls: Vec::new(),
            structured,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_instruction_lines_are_dropped() {
        let prompt =
            "Problem: design X.\n\nYour proposal:\nUse a queue.\n\nCritique from a1:\nok\n\n\
                      Refine your proposal: address the valid points of the critiques.";
        assert_eq!(
            strip_echoed_instruction("Refine your proposal:\n\nUse a queue.", prompt),
            "Use a queue."
        );
        assert_eq!(
            strip_echoed_instruction("## Refine your proposal\nUse a queue.\nMore.", prompt),
            "Use a queue.\nMore."
        );
        // Only leading lines go; a reply that is only the echo is kept as is.
        assert_eq!(
            strip_echoed_instruction("Use a queue.\nRefine your proposal:", prompt),
            "Use a queue.\nRefine your proposal:"
        );
        assert_eq!(
            strip_echoed_instruction("Refine your proposal:", prompt),
            "Refine your proposal:"
        );
        // Labels of the prompt, and the whole instruction line, count too.
        assert_eq!(
            strip_echoed_instruction("Your proposal:\nRefine your proposal: address the valid points of the critiques.\nShard it.", prompt),
            "Shard it."
        );
        // The proposal's own text is not an echo, nor are short lines ("Yes.").
        assert_eq!(
            strip_echoed_instruction("Use a queue.\nMore.", prompt),
            "Use a queue.\nMore."
        );
        assert_eq!(strip_echoed_instruction("Yes.\nNo.", "Yes."), "Yes.\nNo.");
        // A repeated problem block goes too.
        let prompt =
            "Problem:\nDesign a rate limiter for a public REST API.\n\nPropose a solution.";
        assert_eq!(
            strip_echoed_instruction(
                "Problem:\nDesign a rate limiter for a public REST API.\nUse a token bucket.",
                prompt
            ),
            "Use a token bucket."
        );
    }
}
