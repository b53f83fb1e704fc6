//! Prompt tokens as budgets and estimates count them: with the model's own tokenizer where
//! Parley has one, else a safe bound.
//!
//! - **OpenAI families** (`gpt-4o`, `gpt-4.1`, `o1`/`o3`/`o4`, `gpt-5`, `gpt-4`,
//!   `gpt-3.5-turbo`; also as `openai/<model>`, as OpenRouter names them): tiktoken's BPE
//!   (`o200k_base`, `o200k_harmony` or `cl100k_base`, by model name), compiled into the
//!   binary (the `tiktoken-rs` crate: no file is fetched at run time, no network).
//! - **Every other model** (the local model, other OpenAI-compatible servers): a token per
//!   byte. A token of any byte-level BPE (or SentencePiece with byte fallback) covers at
//!   least one byte, so this holds whatever the model's tokenizer.
//!
//! A text is counted with the tokenizer only when no run of it (of whitespace or of
//! anything else) is longer than [`MAX_RUN_BYTES`]: BPE merges within one pre-token in
//! quadratic time, so a long unbroken run (a model's or a user's) is counted at its bytes,
//! which bounds it and keeps counting linear. Counts are memoized per text (a bounded map),
//! as the budget counts the same contributions again at every planning step.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use tiktoken_rs::CoreBPE;

/// A text with a run (of whitespace or non-whitespace) longer than this is counted at its
/// bytes.
pub const MAX_RUN_BYTES: usize = 256;

/// Texts whose counts are memoized; past it the memo starts over.
const MEMO_ENTRIES: usize = 4_096;

/// A tokenizer Parley has for some models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    O200k,
    O200kHarmony,
    Cl100k,
}

impl Encoding {
    /// The tokenizer of `model` when it is an OpenAI-family model tiktoken knows (a
    /// provider prefix `openai/` is taken off first); `None` for every other model.
    pub fn of_model(model: &str) -> Option<Self> {
        use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};
        let name = model.strip_prefix("openai/").unwrap_or(model);
        match get_tokenizer(name)? {
            Tokenizer::O200kBase => Some(Self::O200k),
            Tokenizer::O200kHarmony => Some(Self::O200kHarmony),
            Tokenizer::Cl100kBase => Some(Self::Cl100k),
            _ => None,
        }
    }

    /// The BPE (built once per process).
    pub fn bpe(self) -> &'static CoreBPE {
        match self {
            Self::O200k => tiktoken_rs::o200k_base_singleton(),
            Self::O200kHarmony => tiktoken_rs::o200k_harmony_singleton(),
            Self::Cl100k => tiktoken_rs::cl100k_base_singleton(),
        }
    }

    /// Tokens of `text`: the BPE's count, or its bytes when a run is too long (see the
    /// module docs). Never more than its bytes.
    pub fn count(self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        if longest_run(text) > MAX_RUN_BYTES {
            return text.len() as u64;
        }
        (self.bpe().encode_ordinary(text).len() as u64).min(text.len() as u64)
    }
}

/// The longest run of whitespace or of non-whitespace characters in `text`, in bytes.
fn longest_run(text: &str) -> usize {
    let (mut longest, mut run, mut last) = (0, 0, None);
    for c in text.chars() {
        let ws = c.is_whitespace();
        if Some(ws) == last {
            run += c.len_utf8();
        } else {
            run = c.len_utf8();
            last = Some(ws);
        }
        longest = longest.max(run);
    }
    longest
}

/// Memoized token counts (cheap to clone: one shared map).
#[derive(Debug, Clone, Default)]
pub struct TokenCounter {
    /// (encoding, hash of the text) → its count.
    memo: Arc<Mutex<HashMap<(Encoding, u64), u64>>>,
}

impl TokenCounter {
    /// [`Encoding::count`], memoized.
    pub fn count(&self, enc: Encoding, text: &str) -> u64 {
        if text.len() < 64 {
            return enc.count(text);
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        let key = (enc, h.finish());
        if let Some(&n) = self
            .memo
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return n;
        }
        let n = enc.count(text);
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if memo.len() >= MEMO_ENTRIES {
            memo.clear();
        }
        memo.insert(key, n);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_models_are_counted_with_their_own_tokenizer() {
        let text = "Design a rate limiter for a public REST API.";
        for model in [
            "gpt-4o",
            "gpt-4o-mini",
            "openai/gpt-4.1",
            "o3",
            "gpt-4",
            "gpt-3.5-turbo",
        ] {
            let enc = Encoding::of_model(model).unwrap_or_else(|| panic!("{model}: none"));
            let n = enc.count(text);
            // A real BPE count: far fewer tokens than characters, more than words.
            assert!((9..=14).contains(&n), "{model}: {n} tokens");
        }
        for model in [
            "model-arch",
            "smollm2",
            "claude-3-5-sonnet",
            "meta-llama/llama-3-8b",
        ] {
            assert!(Encoding::of_model(model).is_none(), "{model}");
        }
    }

    #[test]
    fn long_runs_are_counted_at_their_bytes_in_linear_time() {
        let enc = Encoding::O200k;
        let run = "x".repeat(1_000_000);
        assert_eq!(enc.count(&run), 1_000_000);
        let spaces = format!("a{}b", " ".repeat(MAX_RUN_BYTES + 1));
        assert_eq!(enc.count(&spaces), spaces.len() as u64);
        let words = "lorem ipsum ".repeat(1_000);
        let n = enc.count(&words);
        assert!(n < words.len() as u64 / 3, "{n}");
        let memo = TokenCounter::default();
        assert_eq!(memo.count(enc, &words), n);
        assert_eq!(memo.count(enc, &words), n);
    }
}
