//! Chat messages, the ChatML prompt format, and fitting a conversation into the context.

use crate::spec::ChatFormat;
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
/// Gemma's turn header that opens the model's answer.
const GEMMA_GENERATION_PROMPT: &str = "<start_of_turn>model\n";
/// Gemma's prompt starts with the BOS token.
const GEMMA_HEAD: &str = "<bos>";

/// Renders a conversation in ChatML, ready for the assistant's answer:
/// `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then `<|im_start|>assistant\n`.
///
/// This is what SmolLM2's own chat template renders with `add_generation_prompt = true`,
/// except that the template inserts a default system prompt ("You are a helpful AI
/// assistant named SmolLM, ...") when the conversation has none; this function adds
/// nothing the caller did not send.
pub fn format_chat(messages: &[ChatMessage]) -> String {
    format_chat_as(ChatFormat::ChatMl, messages)
}

/// Renders a conversation in `format` (see [`ChatFormat`]), ready for the model's answer.
pub fn format_chat_as(format: ChatFormat, messages: &[ChatMessage]) -> String {
    let mut out = String::from(head(format));
    for m in messages {
        push_message(format, &mut out, m);
    }
    out.push_str(generation_prompt(format));
    out
}

fn head(format: ChatFormat) -> &'static str {
    match format {
        ChatFormat::ChatMl => "",
        ChatFormat::Gemma => GEMMA_HEAD,
    }
}

fn generation_prompt(format: ChatFormat) -> &'static str {
    match format {
        ChatFormat::ChatMl => GENERATION_PROMPT,
        ChatFormat::Gemma => GEMMA_GENERATION_PROMPT,
    }
}

fn push_message(format: ChatFormat, out: &mut String, m: &ChatMessage) {
    match format {
        ChatFormat::ChatMl => {
            out.push_str("<|im_start|>");
            out.push_str(&m.role);
            out.push('\n');
            out.push_str(&m.content);
            out.push_str("<|im_end|>\n");
        }
        ChatFormat::Gemma => {
            out.push_str("<start_of_turn>");
            // Gemma knows two roles; a system message is a user turn of its own.
            out.push_str(if m.role == "assistant" {
                "model"
            } else {
                "user"
            });
            out.push('\n');
            out.push_str(&m.content);
            out.push_str("<end_of_turn>\n");
        }
    }
}

fn encode_message(format: ChatFormat, tokenizer: &Tokenizer, m: &ChatMessage) -> Vec<u32> {
    let mut s = String::with_capacity(m.content.len() + m.role.len() + 24);
    push_message(format, &mut s, m);
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
    format: ChatFormat,
    tokenizer: &Tokenizer,
    messages: &[ChatMessage],
    budget: usize,
) -> Result<Prompt, LocalError> {
    let mut messages: Vec<ChatMessage> = messages.to_vec();
    let mut encoded: Vec<Vec<u32>> = messages
        .iter()
        .map(|m| encode_message(format, tokenizer, m))
        .collect();
    let head_tokens = tokenizer.encode(head(format));
    let tail = tokenizer.encode(generation_prompt(format));
    let total = |encoded: &[Vec<u32>]| {
        head_tokens.len() + encoded.iter().map(Vec::len).sum::<usize>() + tail.len()
    };
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
                encoded[i] = encode_message(format, tokenizer, &messages[i]);
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
    tokens.extend_from_slice(&head_tokens);
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

    #[test]
    fn gemma_format() {
        let s = format_chat_as(
            ChatFormat::Gemma,
            &[
                ChatMessage::system("Be brief."),
                ChatMessage::user("hi"),
                ChatMessage::assistant("hello"),
                ChatMessage::user("why?"),
            ],
        );
        assert_eq!(
            s,
            "<bos><start_of_turn>user\nBe brief.<end_of_turn>\n<start_of_turn>user\nhi<end_of_turn>\n\
             <start_of_turn>model\nhello<end_of_turn>\n<start_of_turn>user\nwhy?<end_of_turn>\n\
             <start_of_turn>model\n"
        );
        assert_eq!(
            format_chat_as(ChatFormat::Gemma, &[]),
            "<bos><start_of_turn>model\n"
        );
    }
}
