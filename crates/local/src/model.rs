//! Loading the GGUF model and generating text with it.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::gguf::Content;
use sha2::{Digest, Sha256};

use crate::chat::{fit_prompt, ChatMessage, Prompt};
use crate::constrain::JsonSchema;
use crate::engine::{self, Engine, Job, TokenTable, SLOT_CONTEXT};
use crate::llama_tokenizer::LlamaTokenizer;
use crate::sample::Sampler;
use crate::spec::{ModelSpec, TokenizerKind};
use crate::tokenizer::Tokenizer;
use crate::{fetch_command, LocalError};

pub use crate::engine::REPEAT_WINDOW;

/// One generation request.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub messages: Vec<ChatMessage>,
    /// Upper bound on completion tokens. At most half the context is reserved for them: the
    /// prompt may use `context_length - min(max_tokens, context_length / 2)` tokens, and
    /// generation also stops when the context is full.
    pub max_tokens: usize,
    /// 0 = greedy (deterministic); otherwise softmax temperature.
    pub temperature: f64,
    /// Nucleus sampling mass in (0, 1]; 1 (or more) disables it, 0 means greedy.
    pub top_p: f64,
    /// Seed of the sampler; the same request with the same seed gives the same text.
    pub seed: u64,
    /// Penalty applied to the logits of tokens among the last [`REPEAT_WINDOW`] generated
    /// ones (1.0 = off). Small models loop without it.
    pub repeat_penalty: f32,
    /// Stop generating (with [`LocalError::DeadlineExceeded`]) once this instant passes, so
    /// a caller that timed out does not leave a generation occupying the engine.
    pub deadline: Option<Instant>,
    /// Constrain the completion to JSON of this schema (see [`crate::constrain`]): every
    /// sampled token keeps the text a valid prefix, and a completion cut by `max_tokens`
    /// is closed with the shortest valid ending, so the text always parses.
    pub schema: Option<JsonSchema>,
}

impl Default for GenerateRequest {
    fn default() -> Self {
        Self {
            messages: Vec::new(),
            max_tokens: 256,
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
            repeat_penalty: 1.0,
            deadline: None,
            schema: None,
        }
    }
}

/// The result of one generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The completion, without the closing `<|im_end|>`.
    pub text: String,
    /// Tokens of the prompt as fed to the model (after any truncation).
    pub prompt_tokens: usize,
    /// Tokens generated, not counting the stop token.
    pub completion_tokens: usize,
    /// Whether the prompt was cut to fit the context window.
    pub truncated_prompt: bool,
    /// A constrained (JSON) completion reached `max_tokens` before its end and was closed
    /// with the shortest valid ending (empty strings became `"-"`, open arrays closed).
    pub closed_at_budget: bool,
}

/// Where one generation's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GenerationStats {
    /// From the engine taking the request to the first sampled token: the prompt's forward
    /// passes (shared with other generations running meanwhile).
    pub prefill: Duration,
    /// From the first sampled token to the last.
    pub decode: Duration,
    /// Leading prompt tokens an earlier generation had already processed (their KV cache
    /// was reused, see [`crate::engine`]); `prefill` covers only the rest.
    pub cached_prompt_tokens: usize,
}

/// The loaded model: tokenizer, chat template and the engine thread that runs llama.cpp.
/// `Send + Sync`; share it with `Arc`.
pub struct LocalModel {
    /// Handle to the thread that owns llama.cpp's context and batches every generation.
    engine: Engine,
    tokenizer: Tokenizer,
    /// `tokenizer.chat_template` from the GGUF.
    chat_template: Option<String>,
    /// Usable context per generation: the GGUF's `llama.context_length`, capped at
    /// [`SLOT_CONTEXT`] (the engine's KV cache holds that many tokens per sequence).
    context_length: usize,
    /// Forward-pass threads.
    threads: usize,
    name: String,
    spec: &'static ModelSpec,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("name", &self.name)
            .field("context_length", &self.context_length)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl LocalModel {
    /// Verifies the file of the selected model ([`ModelSpec::selected`]: size, then
    /// sha256) and loads it, with one forward-pass thread per core.
    pub fn load(path: &Path) -> Result<Self, LocalError> {
        Self::load_model(ModelSpec::selected()?, path)
    }

    /// Verifies that `path` is `spec`'s file and loads it, with one forward-pass thread per
    /// core.
    pub fn load_model(spec: &'static ModelSpec, path: &Path) -> Result<Self, LocalError> {
        Self::load_model_with_threads(spec, path, engine::default_threads())
    }

    /// Like [`load`](Self::load) with a given number of forward-pass threads (benchmarks).
    pub fn load_with_threads(path: &Path, threads: usize) -> Result<Self, LocalError> {
        Self::load_model_with_threads(ModelSpec::selected()?, path, threads)
    }

    /// Like [`load_model`](Self::load_model) with a given number of forward-pass threads.
    pub fn load_model_with_threads(
        spec: &'static ModelSpec,
        path: &Path,
        threads: usize,
    ) -> Result<Self, LocalError> {
        let started = Instant::now();
        verify_file(spec, path)?;
        let io_error = |source| LocalError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut reader = BufReader::new(File::open(path).map_err(io_error)?);
        let content = Content::read(&mut reader).map_err(|e| LocalError::Gguf(e.to_string()))?;
        let tokenizer = match spec.tokenizer {
            TokenizerKind::SmolLm2Bpe => Tokenizer::from_gguf(&content)?,
            TokenizerKind::LlamaCpp => Tokenizer::Llama(LlamaTokenizer::load(path)?),
        };
        let chat_template = match content.metadata.get("tokenizer.chat_template") {
            Some(v) => v.to_string().ok().cloned(),
            None => None,
        };
        let arch = content
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok().cloned())
            .unwrap_or_else(|| "llama".to_string());
        let trained_context = content
            .metadata
            .get(&format!("{arch}.context_length"))
            .and_then(|v| v.to_u32().ok())
            .map_or(SLOT_CONTEXT, |n| n as usize);
        let context_length = trained_context.min(SLOT_CONTEXT).min(spec.context);
        drop(content);

        let stop_ids: Vec<u32> = spec
            .stop
            .iter()
            .map(|s| {
                tokenizer.special_token_id(s).ok_or_else(|| {
                    LocalError::Gguf(format!("the vocabulary has no stop token {s:?}"))
                })
            })
            .collect::<Result<_, _>>()?;
        let table = Arc::new(TokenTable {
            bytes: (0..tokenizer.vocab_size() as u32)
                .map(|id| tokenizer.token_bytes(id).to_vec())
                .collect(),
            stop: (0..tokenizer.vocab_size() as u32)
                .map(|id| {
                    tokenizer.is_special(id)
                        || id == tokenizer.eos_token_id()
                        || stop_ids.contains(&id)
                })
                .collect(),
        });
        let threads = threads.max(1);
        // The Q8_0 copy (faster kernels); the original file when it cannot be written.
        let weights = if spec.convert_q8_0 {
            match crate::convert::ensure_q8_0(path) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot write the Q8_0 copy of the local model; using the Q4_1 file (slower)");
                    path.to_path_buf()
                }
            }
        } else {
            path.to_path_buf()
        };
        let engine = Engine::start(&weights, threads, table)?;
        let name = spec.display_name().to_string();
        tracing::info!(
            model = %name,
            path = %path.display(),
            context_length,
            threads,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded local model"
        );
        Ok(Self {
            engine,
            tokenizer,
            chat_template,
            context_length,
            threads,
            name,
            spec,
        })
    }

    /// The descriptor of the loaded model.
    pub fn spec(&self) -> &'static ModelSpec {
        self.spec
    }

    /// E.g. `SmolLM2-135M-Instruct.Q4_1`.
    pub fn model_name(&self) -> &str {
        &self.name
    }

    /// Tokens of context (prompt + completion) one generation can use.
    pub fn context_length(&self) -> usize {
        self.context_length
    }

    /// Threads of the forward pass.
    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The GGUF's `tokenizer.chat_template` (Jinja) text.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Encodes `messages` as the ChatML prompt [`generate`](Self::generate) would feed the
    /// model for a request of `max_tokens`, truncated to fit the context: the prompt gets
    /// `context_length - min(max_tokens, context_length / 2)` tokens; beyond that the oldest
    /// non-system messages are dropped, then the front of the remaining one is cut. System
    /// messages are always kept (a system prompt that alone does not fit is an
    /// [`LocalError::InvalidRequest`]).
    pub fn prompt(
        &self,
        messages: &[ChatMessage],
        max_tokens: usize,
    ) -> Result<Prompt, LocalError> {
        let reserve = max_tokens.min(self.context_length / 2);
        fit_prompt(
            self.spec.chat,
            &self.tokenizer,
            messages,
            self.context_length - reserve,
        )
    }

    /// Generates the assistant's answer to `req.messages`. Blocking (call it from
    /// `spawn_blocking` in async code); safe to call from several threads at once:
    /// concurrent calls are batched by the engine (see [`crate::engine`]).
    ///
    /// Stops at `<|im_end|>`, EOS or any other control token, after `max_tokens`, when the
    /// context is full, or (with a schema) when the JSON value is complete. A prompt too
    /// long for the context is truncated (see [`GenerateRequest::max_tokens`] and
    /// `truncated_prompt`).
    pub fn generate(&self, req: &GenerateRequest) -> Result<Generation, LocalError> {
        self.generate_with_stats(req).map(|(g, _)| g)
    }

    /// [`generate`](Self::generate), also returning where the time went (benchmarks).
    pub fn generate_with_stats(
        &self,
        req: &GenerateRequest,
    ) -> Result<(Generation, GenerationStats), LocalError> {
        let sampler = Sampler::new(req.temperature, req.top_p, req.repeat_penalty, req.seed)?;
        let started = Instant::now();
        let fitted = self.prompt(&req.messages, req.max_tokens)?;
        let prompt_tokens = fitted.tokens.len();
        let max_new = req.max_tokens.min(self.context_length - prompt_tokens);
        if max_new == 0 {
            let g = Generation {
                text: String::new(),
                prompt_tokens,
                completion_tokens: 0,
                truncated_prompt: fitted.truncated,
                closed_at_budget: false,
            };
            return Ok((g, GenerationStats::default()));
        }
        let (reply, rx) = mpsc::sync_channel(1);
        let job = Job {
            prompt: fitted.tokens,
            max_new,
            sampler,
            matcher: req.schema.as_ref().map(JsonSchema::matcher),
            deadline: req.deadline,
            reply,
        };
        let out = self.engine.run(job, rx)?;
        let mut text = self.tokenizer.decode(&out.tokens);
        text.push_str(&String::from_utf8_lossy(&out.suffix));
        tracing::debug!(
            prompt_tokens,
            cached_prompt_tokens = out.cached,
            completion_tokens = out.tokens.len(),
            prefill_ms = out.prefill.as_millis() as u64,
            decode_tokens_per_s = out.tokens.len() as f64 / out.decode.as_secs_f64().max(1e-9),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "local generation"
        );
        let g = Generation {
            text,
            prompt_tokens,
            completion_tokens: out.tokens.len(),
            truncated_prompt: fitted.truncated,
            closed_at_budget: !out.suffix.is_empty(),
        };
        let stats = GenerationStats {
            prefill: out.prefill,
            decode: out.decode,
            cached_prompt_tokens: out.cached,
        };
        Ok((g, stats))
    }
}

/// Checks that `path` is the expected model: present, the right size, the right sha256.
fn verify_file(spec: &ModelSpec, path: &Path) -> Result<(), LocalError> {
    let io_error = |source| LocalError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Err(missing(spec, path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing(spec, path)),
        Err(e) => return Err(io_error(e)),
    };
    let expected = format!("{} bytes, sha256 {}", spec.size, spec.sha256);
    if meta.len() != spec.size {
        return Err(LocalError::ChecksumMismatch {
            path: path.to_path_buf(),
            fetch: fetch_command(spec),
            expected,
            actual: format!("{} bytes", meta.len()),
        });
    }
    let mut file = File::open(path).map_err(io_error)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io_error)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let digest: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if digest != spec.sha256 {
        return Err(LocalError::ChecksumMismatch {
            path: path.to_path_buf(),
            fetch: fetch_command(spec),
            expected,
            actual: format!("{} bytes, sha256 {digest}", meta.len()),
        });
    }
    Ok(())
}

fn missing(spec: &ModelSpec, path: &Path) -> LocalError {
    LocalError::ModelMissing {
        path: PathBuf::from(path),
        fetch: fetch_command(spec),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn local_model_is_send_and_sync() {
        assert_send_sync::<LocalModel>();
    }
}
