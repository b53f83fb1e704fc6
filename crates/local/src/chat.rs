//! Chat messages, the ChatML prompt format, and fitting a conversation into the context.

use crate::tokenizer::Tokenizer;
use crate::LocalError;

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `"system"`, `"user"` or `"assistant"`.
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }

    fn is_system(&self) -> bool {
        self.role == "system"
    }
}

/// The ChatML turn header that opens the model's answer.
const GENERATION_PROMPT: &str = "<|im_start|>assistant\n";

/// Renders a conversation in ChatML, ready for the assistant's answer:
/// `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then `<|im_start|>assistant\n`.
///
/// This is what SmolLM2's own chat template renders with `add_generation_prompt = true`,
/// except that the template inserts a default system prompt ("You are a helpful AI
/// assistant named SmolLM, ...") when the conversation has none; this function adds
/// nothing the caller did not send.
pub fn format_chat(messages: &[ChatMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        push_message(&mut out, m);
    }
    out.push_str(GENERATION_PROMPT);
    out
}

fn push_message(out: &mut String, m: &ChatMessage) {
    out.push_str("<|im_start|>");
    out.push_str(&m.role);
    out.push('\n');
    out.push_str(&m.content);
    out.push_str("<|im_end|>\n");
}

fn encode_message(tokenizer: &Tokenizer, m: &ChatMessage) -> Vec<u32> {
    let mut s = String::with_capacity(m.content.len() + m.role.len() + 24);
    push_message(&mut s, m);
    tokenizer.encode(&s)
}

/// A conversation encoded as a ChatML prompt that fits the context window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// The token ids fed to the model, ending with the `<|im_start|>assistant\n` header.
    pub tokens: Vec<u32>,
    /// Whether messages were dropped or cut to fit.
    pub truncated: bool,
}

/// Encodes `messages` as a ChatML prompt of at most `budget` tokens.
///
/// When the whole conversation is too long, the oldest non-system messages are dropped,
/// keeping at least the newest non-system message; if it is still too long, the front of
/// that message's text is cut. System messages are never dropped or cut: if they alone do
/// not fit, the request is refused.
///
/// The token count of a ChatML prompt is the sum over its messages (control tokens split
/// pre-tokenization, so messages never share a token), which lets each message be encoded
/// once.
pub(crate) fn fit_prompt(
    tokenizer: &Tokenizer,
    messages: &[ChatMessage],
    budget: usize,
) -> Result<Prompt, LocalError> {
    let mut messages: Vec<ChatMessage> = messages.to_vec();
    let mut encoded: Vec<Vec<u32>> = messages
        .iter()
        .map(|m| encode_message(tokenizer, m))
        .collect();
    let tail = tokenizer.encode(GENERATION_PROMPT);
    let total = |encoded: &[Vec<u32>]| encoded.iter().map(Vec::len).sum::<usize>() + tail.len();
    let original_tokens = total(&encoded);

    let mut dropped = 0usize;
    let mut cut_chars = 0usize;
    while total(&encoded) > budget {
        let non_system: Vec<usize> = (0..messages.len())
            .filter(|&i| !messages[i].is_system())
            .collect();
        match non_system.as_slice() {
            [] => {
                let tokens = total(&encoded);
                return Err(LocalError::InvalidRequest(format!(
                    "the system prompt alone is {tokens} tokens, over the {budget} tokens \
                     the context leaves for the prompt"
                )));
            }
            [only] => {
                let i = *only;
                let excess = total(&encoded) - budget;
                let content = &messages[i].content;
                if content.is_empty() {
                    let tokens = total(&encoded);
                    return Err(LocalError::InvalidRequest(format!(
                        "the system prompt and message headers alone are {tokens} tokens, \
                         over the {budget} tokens the context leaves for the prompt"
                    )));
                }
                let cut = cut_point(tokenizer, content, excess);
                cut_chars += content[..cut].chars().count();
                messages[i].content = content[cut..].to_string();
                encoded[i] = encode_message(tokenizer, &messages[i]);
            }
            [oldest, ..] => {
                let i = *oldest;
                messages.remove(i);
                encoded.remove(i);
                dropped += 1;
            }
        }
    }
    let truncated = dropped > 0 || cut_chars > 0;
    if truncated {
        tracing::warn!(
            prompt_tokens = original_tokens,
            budget,
            dropped_messages = dropped,
            cut_chars,
            "local model prompt exceeds the context window; truncated it"
        );
    }
    let mut tokens = Vec::with_capacity(total(&encoded));
    for e in &encoded {
        tokens.extend_from_slice(e);
    }
    tokens.extend_from_slice(&tail);
    Ok(Prompt { tokens, truncated })
}

/// Byte offset (a char boundary, > 0) at which to cut the front of `content` so that about
/// `excess` tokens go: the offset where the `excess`-th token of the content ends.
fn cut_point(tokenizer: &Tokenizer, content: &str, excess: usize) -> usize {
    let ids = tokenizer.encode(content);
    let drop = excess.clamp(1, ids.len().max(1));
    let bytes: usize = ids[..drop.min(ids.len())]
        .iter()
        .map(|&id| tokenizer.token_bytes(id).len())
        .sum();
    let mut cut = bytes.clamp(1, content.len());
    while !content.is_char_boundary(cut) {
        cut += 1;
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_format() {
        let s = format_chat(&[ChatMessage::system("Be brief."), ChatMessage::user("hi")]);
        assert_eq!(
            s,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(format_chat(&[]), "<|im_start|>assistant\n");
    }
}
