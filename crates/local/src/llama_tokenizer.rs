//! llama.cpp's tokenizer for a GGUF's vocabulary (e.g. Gemma's SentencePiece model), for
//! models whose tokenizer this crate does not reimplement
//! ([`crate::spec::TokenizerKind::LlamaCpp`]).
//!
//! The GGUF is loaded vocabulary-only (no weights, ~1 s for a 262k-token vocabulary) and
//! kept for encoding; each token's bytes are read once into a table (control tokens spelled
//! out), which decoding and the engine's token table use.

use std::path::Path;
use std::sync::Arc;

use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::LocalError;

/// llama.cpp's tokenizer for one GGUF vocabulary.
pub struct LlamaTokenizer {
    /// The vocabulary-only model (llama.cpp's tokenizer lives in it).
    model: Arc<LlamaModel>,
    /// id → the token's bytes (control tokens as their text).
    token_bytes: Vec<Vec<u8>>,
    /// id → whether it is a control token.
    control: Vec<bool>,
    /// id → whether llama.cpp says it ends a generation (EOS, end of turn, ...).
    eog: Vec<bool>,
    bos: u32,
    eos: u32,
}

impl std::fmt::Debug for LlamaTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaTokenizer")
            .field("vocab_size", &self.token_bytes.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish_non_exhaustive()
    }
}

impl LlamaTokenizer {
    /// Loads the vocabulary of the GGUF at `path` (a verified file).
    pub fn load(path: &Path) -> Result<Self, LocalError> {
        let backend = crate::engine::backend()?;
        let params = LlamaModelParams::default().with_vocab_only(true);
        let model = LlamaModel::load_from_file(backend, path, &params).map_err(|e| {
            LocalError::Gguf(format!(
                "llama.cpp cannot read the vocabulary of {}: {e}",
                path.display()
            ))
        })?;
        let (token_bytes, control, eog, bos, eos) = {
            let vocab = model.vocab();
            let n = usize::try_from(vocab.n_tokens()).unwrap_or(0);
            let mut token_bytes = Vec::with_capacity(n);
            let mut control = Vec::with_capacity(n);
            let mut eog = Vec::with_capacity(n);
            for t in vocab.tokens() {
                token_bytes.push(vocab.token_to_piece(t, true, None));
                control.push(vocab.is_control(t));
                eog.push(vocab.is_eog(t));
            }
            let id = |t: LlamaToken| u32::try_from(t.0).unwrap_or(u32::MAX);
            (token_bytes, control, eog, id(vocab.bos()), id(vocab.eos()))
        };
        Ok(Self {
            model: Arc::new(model),
            token_bytes,
            control,
            eog,
            bos,
            eos,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    pub fn bos_token_id(&self) -> u32 {
        self.bos
    }

    pub fn eos_token_id(&self) -> u32 {
        self.eos
    }

    /// The id of the control token spelled `text`.
    pub fn special_token_id(&self, text: &str) -> Option<u32> {
        let ids = self.encode(text);
        match ids.as_slice() {
            [id] if self.is_special(*id) => Some(*id),
            _ => None,
        }
    }

    /// Whether `id` is a control token or one llama.cpp treats as the end of a generation.
    pub fn is_special(&self, id: u32) -> bool {
        let i = id as usize;
        self.control.get(i).copied().unwrap_or(false) || self.eog.get(i).copied().unwrap_or(false)
    }

    /// Encodes `text` with llama.cpp's tokenizer; control-token spellings become those
    /// tokens; no BOS is added.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), false, true)
            .into_iter()
            .filter_map(|t| u32::try_from(t.0).ok())
            .collect()
    }

    /// Concatenates the tokens' bytes (invalid UTF-8 becomes U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            bytes.extend_from_slice(self.token_bytes(id));
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}
