//! Byte-level BPE tokenizer built from a GGUF file's `tokenizer.ggml.*` metadata.
//!
//! It reproduces SmolLM2's Hugging Face tokenizer:
//!
//! 1. control tokens (`tokenizer.ggml.token_type` = 3 or 4, e.g. `<|im_start|>`,
//!    `<|im_end|>`) are matched as whole tokens first, anywhere in the text;
//! 2. the text between them is pre-tokenized: every numeric character stands alone
//!    (`Digits(individual_digits)`), then the GPT-2 ByteLevel regex splits the rest;
//! 3. each piece is mapped byte by byte onto the GPT-2 byte↔unicode alphabet and merged
//!    with the ranked `tokenizer.ggml.merges`.
//!
//! Decoding maps the token texts back to bytes, so `decode(encode(s)) == s` for any `s`.

use std::collections::HashMap;

use crate::gguf::{Content, Value};
use fancy_regex::Regex;

use crate::llama_tokenizer::LlamaTokenizer;
use crate::LocalError;

/// GPT-2's ByteLevel pre-tokenizer pattern (what SmolLM2's tokenizer.json uses).
const BYTE_LEVEL_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// GGUF `token_type` values (llama.cpp's `llama_token_type`).
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// Text ↔ token ids for the loaded model: SmolLM2's byte-level BPE, or llama.cpp's
/// tokenizer for the GGUF's vocabulary (see [`crate::spec::TokenizerKind`]).
#[derive(Debug)]
pub enum Tokenizer {
    Bpe(Box<BpeTokenizer>),
    Llama(LlamaTokenizer),
}

impl Tokenizer {
    /// SmolLM2's BPE tokenizer from the GGUF metadata.
    pub fn from_gguf(content: &Content) -> Result<Self, LocalError> {
        BpeTokenizer::from_gguf(content).map(|t| Self::Bpe(Box::new(t)))
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::Bpe(t) => t.vocab_size(),
            Self::Llama(t) => t.vocab_size(),
        }
    }

    /// The beginning-of-sequence token id.
    pub fn bos_token_id(&self) -> u32 {
        match self {
            Self::Bpe(t) => t.bos_token_id(),
            Self::Llama(t) => t.bos_token_id(),
        }
    }

    /// The end-of-sequence token id.
    pub fn eos_token_id(&self) -> u32 {
        match self {
            Self::Bpe(t) => t.eos_token_id(),
            Self::Llama(t) => t.eos_token_id(),
        }
    }

    /// The id of a control token such as `<|im_end|>`, if the vocabulary has it.
    pub fn special_token_id(&self, text: &str) -> Option<u32> {
        match self {
            Self::Bpe(t) => t.special_token_id(text),
            Self::Llama(t) => t.special_token_id(text),
        }
    }

    /// Whether `id` is a control (or user-defined) token rather than text.
    pub fn is_special(&self, id: u32) -> bool {
        match self {
            Self::Bpe(t) => t.is_special(id),
            Self::Llama(t) => t.is_special(id),
        }
    }

    /// Encodes `text`; control-token spellings in the text become those tokens; no BOS is
    /// added.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match self {
            Self::Bpe(t) => t.encode(text),
            Self::Llama(t) => t.encode(text),
        }
    }

    /// Decodes ids back to text; control tokens are spelled out.
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Self::Bpe(t) => t.decode(ids),
            Self::Llama(t) => t.decode(ids),
        }
    }

    /// The raw bytes of one token (empty for an id outside the vocabulary).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        match self {
            Self::Bpe(t) => t.token_bytes(id),
            Self::Llama(t) => t.token_bytes(id),
        }
    }
}

/// SmolLM2's byte-level BPE tokenizer (see the module docs).
#[derive(Debug)]
pub struct BpeTokenizer {
    /// id → the token's raw bytes (decoded from the byte-level alphabet; control tokens verbatim).
    token_bytes: Vec<Vec<u8>>,
    /// The byte-level token for each byte value (the BPE starting symbols).
    byte_tokens: [Option<u32>; 256],
    /// (left id, right id) → (merge rank, merged id).
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Control and user-defined tokens, matched verbatim before BPE; longest first.
    specials: Vec<(String, u32)>,
    /// The ByteLevel pre-tokenizer regex.
    pre_tokenizer: Regex,
    /// `tokenizer.ggml.bos_token_id`.
    bos: u32,
    /// `tokenizer.ggml.eos_token_id`.
    eos: u32,
}

impl BpeTokenizer {
    /// Builds the tokenizer from a GGUF file's metadata.
    pub fn from_gguf(content: &Content) -> Result<Self, LocalError> {
        let md = &content.metadata;
        let model = string_value(md, "tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(LocalError::Gguf(format!(
                "tokenizer.ggml.model is {model:?}, only byte-level BPE (\"gpt2\") is supported"
            )));
        }
        let tokens = string_array(md, "tokenizer.ggml.tokens")?;
        let merges = string_array(md, "tokenizer.ggml.merges")?;
        let types = match md.get("tokenizer.ggml.token_type") {
            Some(Value::Array(values)) => values
                .iter()
                .map(|v| {
                    v.to_i32()
                        .map_err(|e| gguf_error("tokenizer.ggml.token_type", e))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => {
                return Err(LocalError::Gguf(
                    "tokenizer.ggml.token_type is not an array".into(),
                ))
            }
            None => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() {
            return Err(LocalError::Gguf(format!(
                "tokenizer.ggml.token_type has {} entries for {} tokens",
                types.len(),
                tokens.len()
            )));
        }
        let bos = u32_value(md, "tokenizer.ggml.bos_token_id")?;
        let eos = u32_value(md, "tokenizer.ggml.eos_token_id")?;
        Self::new(&tokens, &types, &merges, bos, eos)
    }

    fn new(
        tokens: &[&str],
        types: &[i32],
        merges: &[&str],
        bos: u32,
        eos: u32,
    ) -> Result<Self, LocalError> {
        let n_tokens = u32::try_from(tokens.len())
            .map_err(|_| LocalError::Gguf("too many tokens in the vocabulary".into()))?;
        for (name, id) in [("bos", bos), ("eos", eos)] {
            if id >= n_tokens {
                return Err(LocalError::Gguf(format!(
                    "{name} token id {id} is outside the vocabulary"
                )));
            }
        }
        let unicode_to_byte = unicode_to_byte();
        let mut vocab: HashMap<&str, u32> = HashMap::with_capacity(tokens.len());
        let mut token_bytes = Vec::with_capacity(tokens.len());
        let mut specials = Vec::new();
        for (id, (&text, &kind)) in (0u32..).zip(tokens.iter().zip(types)) {
            vocab.entry(text).or_insert(id);
            if kind == TOKEN_TYPE_CONTROL || kind == TOKEN_TYPE_USER_DEFINED {
                if !text.is_empty() {
                    specials.push((text.to_string(), id));
                }
                token_bytes.push(text.as_bytes().to_vec());
            } else {
                // A normal token is spelled in the byte-level alphabet; anything outside it
                // (there should be none) is kept as its UTF-8.
                let mut bytes = Vec::with_capacity(text.len());
                for c in text.chars() {
                    match unicode_to_byte.get(&c) {
                        Some(&b) => bytes.push(b),
                        None => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
                token_bytes.push(bytes);
            }
        }
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));

        let mut byte_tokens = [None; 256];
        for (byte, c) in byte_to_unicode().iter().enumerate() {
            byte_tokens[byte] = vocab.get(c.encode_utf8(&mut [0; 4]) as &str).copied();
        }

        let mut merge_table = HashMap::with_capacity(merges.len());
        let mut merged_text = String::new();
        for (rank, line) in (0u32..).zip(merges) {
            let Some((left, right)) = line.split_once(' ') else {
                return Err(LocalError::Gguf(format!("malformed merge rule {line:?}")));
            };
            merged_text.clear();
            merged_text.push_str(left);
            merged_text.push_str(right);
            if let (Some(&l), Some(&r), Some(&m)) = (
                vocab.get(left),
                vocab.get(right),
                vocab.get(merged_text.as_str()),
            ) {
                merge_table.entry((l, r)).or_insert((rank, m));
            }
        }

        let pre_tokenizer = Regex::new(BYTE_LEVEL_PATTERN)
            .map_err(|e| LocalError::Gguf(format!("pre-tokenizer regex: {e}")))?;
        Ok(Self {
            token_bytes,
            byte_tokens,
            merges: merge_table,
            specials,
            pre_tokenizer,
            bos,
            eos,
        })
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// The beginning-of-sequence token id from the GGUF metadata.
    pub fn bos_token_id(&self) -> u32 {
        self.bos
    }

    /// The end-of-sequence token id from the GGUF metadata.
    pub fn eos_token_id(&self) -> u32 {
        self.eos
    }

    /// The id of a control token such as `<|im_end|>`, if the vocabulary has it.
    pub fn special_token_id(&self, text: &str) -> Option<u32> {
        self.specials
            .iter()
            .find(|(s, _)| s == text)
            .map(|&(_, id)| id)
    }

    /// Whether `id` is a control (or user-defined) token rather than text.
    pub fn is_special(&self, id: u32) -> bool {
        self.specials.iter().any(|&(_, s)| s == id)
    }

    /// Encodes `text`. Control-token spellings in the text become those tokens; no BOS is
    /// added (SmolLM2's `add_bos_token` is false, and the chat format starts with
    /// `<|im_start|>` anyway).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        let mut rest = text;
        while !rest.is_empty() {
            match self.find_special(rest) {
                Some((start, len, id)) => {
                    self.encode_text(&rest[..start], &mut ids);
                    ids.push(id);
                    rest = &rest[start + len..];
                }
                None => {
                    self.encode_text(rest, &mut ids);
                    break;
                }
            }
        }
        ids
    }

    /// Decodes ids back to text; control tokens are spelled out. Ids outside the vocabulary
    /// are skipped; byte sequences that are not valid UTF-8 (a generation cut mid-character)
    /// become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            if let Some(b) = self.token_bytes.get(id as usize) {
                bytes.extend_from_slice(b);
            }
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// The raw bytes of one token (empty for an id outside the vocabulary).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Earliest control token in `text`: (byte offset, byte length, id); longest wins at a tie.
    fn find_special(&self, text: &str) -> Option<(usize, usize, u32)> {
        let mut best: Option<(usize, usize, u32)> = None;
        for (s, id) in &self.specials {
            if let Some(pos) = text.find(s.as_str()) {
                // `specials` is sorted longest first, so a strictly earlier match wins.
                if best.is_none_or(|(p, _, _)| pos < p) {
                    best = Some((pos, s.len(), *id));
                }
            }
        }
        best
    }

    /// Pre-tokenizes and BPE-encodes text that holds no control token.
    fn encode_text(&self, text: &str, ids: &mut Vec<u32>) {
        // Digits(individual_digits = true): every numeric char is its own piece.
        let mut start = 0;
        for (i, c) in text.char_indices() {
            if c.is_numeric() {
                self.encode_split(&text[start..i], ids);
                let end = i + c.len_utf8();
                self.encode_split(&text[i..end], ids);
                start = end;
            }
        }
        self.encode_split(&text[start..], ids);
    }

    /// Applies the ByteLevel regex to one piece and BPE-encodes each match.
    fn encode_split(&self, piece: &str, ids: &mut Vec<u32>) {
        if piece.is_empty() {
            return;
        }
        let mut covered = 0;
        for m in self.pre_tokenizer.find_iter(piece) {
            match m {
                Ok(m) => {
                    // The pattern matches every character; be safe about gaps anyway.
                    if m.start() > covered {
                        self.bpe(&piece.as_bytes()[covered..m.start()], ids);
                    }
                    self.bpe(m.as_str().as_bytes(), ids);
                    covered = m.end();
                }
                // Backtracking limit hit (pathological input): encode the rest as one word.
                Err(_) => break,
            }
        }
        if covered < piece.len() {
            self.bpe(&piece.as_bytes()[covered..], ids);
        }
    }

    /// Byte-level BPE of one pre-tokenized word: start from byte tokens, then apply the
    /// lowest-ranked merge (all its non-overlapping occurrences, left to right) until none
    /// applies.
    fn bpe(&self, word: &[u8], ids: &mut Vec<u32>) {
        let mut symbols: Vec<u32> = word
            .iter()
            .filter_map(|&b| self.byte_tokens[b as usize])
            .collect();
        while symbols.len() > 1 {
            let best = symbols
                .windows(2)
                .filter_map(|pair| self.merges.get(&(pair[0], pair[1])))
                .min_by_key(|&&(rank, _)| rank);
            let Some(&(rank, merged)) = best else { break };
            let mut out = Vec::with_capacity(symbols.len());
            let mut i = 0;
            while i < symbols.len() {
                if i + 1 < symbols.len()
                    && self
                        .merges
                        .get(&(symbols[i], symbols[i + 1]))
                        .is_some_and(|&(r, _)| r == rank)
                {
                    out.push(merged);
                    i += 2;
                } else {
                    out.push(symbols[i]);
                    i += 1;
                }
            }
            symbols = out;
        }
        ids.extend_from_slice(&symbols);
    }
}

/// GPT-2's reversible byte → printable unicode char map.
fn byte_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let code = if printable {
            u32::from(b)
        } else {
            extra += 1;
            255 + extra
        };
        map[usize::from(b)] = char::from_u32(code).unwrap_or('\0');
    }
    map
}

fn unicode_to_byte() -> HashMap<char, u8> {
    (0..=255u8)
        .zip(byte_to_unicode())
        .map(|(b, c)| (c, b))
        .collect()
}

fn gguf_error(key: &str, e: impl std::fmt::Display) -> LocalError {
    LocalError::Gguf(format!("{key}: {e}"))
}

fn string_value<'a>(md: &'a HashMap<String, Value>, key: &str) -> Result<&'a str, LocalError> {
    match md.get(key) {
        Some(v) => v
            .to_string()
            .map(String::as_str)
            .map_err(|e| gguf_error(key, e)),
        None => Err(LocalError::Gguf(format!("missing metadata {key}"))),
    }
}

fn u32_value(md: &HashMap<String, Value>, key: &str) -> Result<u32, LocalError> {
    match md.get(key) {
        Some(v) => v.to_u32().map_err(|e| gguf_error(key, e)),
        None => Err(LocalError::Gguf(format!("missing metadata {key}"))),
    }
}

fn string_array<'a>(md: &'a HashMap<String, Value>, key: &str) -> Result<Vec<&'a str>, LocalError> {
    match md.get(key) {
        Some(Value::Array(values)) => values
            .iter()
            .map(|v| {
                v.to_string()
                    .map(String::as_str)
                    .map_err(|e| gguf_error(key, e))
            })
            .collect(),
        Some(_) => Err(LocalError::Gguf(format!("{key} is not an array"))),
        None => Err(LocalError::Gguf(format!("missing metadata {key}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy vocabulary: the 256 byte tokens, two control tokens and a few merges.
    fn toy() -> BpeTokenizer {
        let alphabet = byte_to_unicode();
        let mut tokens: Vec<String> = vec!["<|endoftext|>".into(), "<|im_start|>".into()];
        let mut types = vec![3, 3];
        tokens.extend(alphabet.iter().map(|c| c.to_string()));
        types.extend(std::iter::repeat_n(1, 256));
        for t in ["he", "ll", "hell", "hello", "Ġw", "Ġwo"] {
            tokens.push(t.into());
            types.push(1);
        }
        let merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o"];
        let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
        BpeTokenizer::new(&tokens, &types, &merges, 1, 0).unwrap()
    }

    #[test]
    fn byte_map_is_a_bijection() {
        let map = byte_to_unicode();
        let inverse = unicode_to_byte();
        assert_eq!(inverse.len(), 256);
        assert_eq!(map[usize::from(b' ')], 'Ġ');
        assert_eq!(map[usize::from(b'\n')], 'Ċ');
        assert_eq!(map[usize::from(b'a')], 'a');
    }

    #[test]
    fn merges_by_rank_and_keeps_specials_whole() {
        let t = toy();
        let ids = t.encode("hello wo<|im_start|>x");
        let hello = 2 + 256 + 3;
        let space_wo = 2 + 256 + 5;
        assert_eq!(ids[0], hello);
        assert_eq!(ids[1], space_wo);
        assert_eq!(ids[2], 1);
        assert_eq!(t.decode(&ids), "hello wo<|im_start|>x");
    }

    #[test]
    fn digits_stand_alone_and_whitespace_runs_split_like_gpt2() {
        let t = toy();
        let mut pieces = Vec::new();
        for text in ["a 123", "x   y", "tab\t\tend  "] {
            pieces.push(t.decode(&t.encode(text)));
        }
        assert_eq!(pieces, ["a 123", "x   y", "tab\t\tend  "]);
    }
}
