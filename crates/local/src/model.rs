//! Loading the GGUF model and generating text with it.

use std::fs::File;
use std::io::{BufReader, Cursor, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::quantized::gguf_file::{self, Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use candle_transformers::models::quantized_llama::{ModelWeights, MAX_SEQ_LEN};
use sha2::{Digest, Sha256};

use crate::chat::{fit_prompt, ChatMessage, Prompt};
use crate::tokenizer::Tokenizer;
use crate::{LocalError, MODEL_FILE, MODEL_SHA256, MODEL_SIZE};

/// Prompt tokens fed per forward pass while prefilling. One pass per chunk instead of one
/// per token; chunking bounds the attention matrix of a long prompt
/// (heads × chunk × context floats) to a few tens of MB.
const PREFILL_CHUNK: usize = 512;

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
    /// a caller that timed out does not leave a generation burning a core.
    pub deadline: Option<Instant>,
}

/// How many recent tokens the repeat penalty looks at.
pub const REPEAT_WINDOW: usize = 64;

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
}

/// The loaded model: weights, tokenizer and chat template. `Send + Sync`; share it with `Arc`.
pub struct LocalModel {
    /// Weight handles; the tensors are reference-counted, so each generate call clones this
    /// (cheaply) to get a private KV cache.
    weights: ModelWeights,
    tokenizer: Tokenizer,
    /// `tokenizer.chat_template` from the GGUF.
    chat_template: Option<String>,
    /// Usable context: the GGUF's `llama.context_length`, capped by candle's RoPE table.
    context_length: usize,
    /// `stop[id]`: generation ends at this token (EOS and every control token).
    stop: Vec<bool>,
    name: String,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("name", &self.name)
            .field("context_length", &self.context_length)
            .finish_non_exhaustive()
    }
}

impl LocalModel {
    /// Verifies the file (size, then sha256) and loads it.
    ///
    /// The Q4_1 weight matrices are converted to Q8_0 while loading: candle's CPU backend has
    /// SIMD (AVX2) kernels for Q8_0 but only a scalar one for Q4_1 (3-5x slower here), and
    /// the conversion is nearly lossless (Q8_0's rounding step is 1/8 of Q4_1's or less), at
    /// the cost of ~50 MB more memory.
    ///
    /// Also fixes candle's CPU threading for the process (see [`configure_cpu_threads`]).
    pub fn load(path: &Path) -> Result<Self, LocalError> {
        let started = Instant::now();
        verify_file(path)?;
        configure_cpu_threads();
        let io_error = |source| LocalError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut reader = BufReader::new(File::open(path).map_err(io_error)?);
        let content = Content::read(&mut reader).map_err(|e| LocalError::Gguf(e.to_string()))?;
        let tokenizer = Tokenizer::from_gguf(&content)?;
        let chat_template = match content.metadata.get("tokenizer.chat_template") {
            Some(v) => v.to_string().ok().cloned(),
            None => None,
        };
        let trained_context = content
            .metadata
            .get("llama.context_length")
            .and_then(|v| v.to_u32().ok())
            .map_or(MAX_SEQ_LEN, |n| n as usize);
        let context_length = trained_context.min(MAX_SEQ_LEN);

        let weights = load_weights(content, &mut reader)?;

        let mut stop = vec![false; tokenizer.vocab_size()];
        for (id, flag) in (0u32..).zip(stop.iter_mut()) {
            *flag = tokenizer.is_special(id) || id == tokenizer.eos_token_id();
        }
        let name = MODEL_FILE.trim_end_matches(".gguf").to_string();
        tracing::info!(
            model = %name,
            path = %path.display(),
            context_length,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded local model"
        );
        Ok(Self {
            weights,
            tokenizer,
            chat_template,
            context_length,
            stop,
            name,
        })
    }

    /// E.g. `SmolLM2-135M-Instruct.Q4_1`.
    pub fn model_name(&self) -> &str {
        &self.name
    }

    /// Tokens of context (prompt + completion) one generation can use.
    pub fn context_length(&self) -> usize {
        self.context_length
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
        fit_prompt(&self.tokenizer, messages, self.context_length - reserve)
    }

    /// Generates the assistant's answer to `req.messages`. Blocking and CPU-bound; safe to
    /// call from several threads at once (each call has its own KV cache).
    ///
    /// Stops at `<|im_end|>`, EOS or any other control token, after `max_tokens`, or when the
    /// context is full. A prompt too long for the context is truncated (see
    /// [`GenerateRequest::max_tokens`] and `truncated_prompt`).
    pub fn generate(&self, req: &GenerateRequest) -> Result<Generation, LocalError> {
        let sampling = sampling(req)?;
        let started = Instant::now();
        let fitted = self.prompt(&req.messages, req.max_tokens)?;
        let prompt = fitted.tokens;
        let prompt_tokens = prompt.len();
        let max_new = req.max_tokens.min(self.context_length - prompt_tokens);
        let mut completion: Vec<u32> = Vec::with_capacity(max_new);
        if max_new > 0 {
            let mut model = self.weights.clone();
            let mut logits = None;
            for (i, chunk) in prompt.chunks(PREFILL_CHUNK).enumerate() {
                logits = Some(forward(&mut model, chunk, i * PREFILL_CHUNK)?);
            }
            let prefilled = Instant::now();
            let mut sampler = LogitsProcessor::from_sampling(req.seed, sampling);
            while let Some(mut l) = logits.take() {
                if req.deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(LocalError::DeadlineExceeded);
                }
                if req.repeat_penalty != 1.0 && !completion.is_empty() {
                    let recent = &completion[completion.len().saturating_sub(REPEAT_WINDOW)..];
                    l = candle_transformers::utils::apply_repeat_penalty(
                        &l,
                        req.repeat_penalty,
                        recent,
                    )
                    .map_err(inference)?;
                }
                let next = sampler.sample(&l).map_err(inference)?;
                if self.stop.get(next as usize).copied().unwrap_or(true) {
                    break;
                }
                completion.push(next);
                if completion.len() >= max_new {
                    break;
                }
                let pos = prompt_tokens + completion.len() - 1;
                logits = Some(forward(&mut model, &[next], pos)?);
            }
            let decode_secs = prefilled.elapsed().as_secs_f64();
            tracing::debug!(
                prompt_tokens,
                completion_tokens = completion.len(),
                prefill_ms = (prefilled - started).as_millis() as u64,
                decode_tokens_per_s = completion.len() as f64 / decode_secs.max(1e-9),
                "local generation"
            );
        }
        Ok(Generation {
            text: self.tokenizer.decode(&completion),
            prompt_tokens,
            completion_tokens: completion.len(),
            truncated_prompt: fitted.truncated,
        })
    }
}

/// Makes candle run each generation's kernels on the calling thread, unless the operator
/// set `CANDLE_NUM_THREADS` / `RAYON_NUM_THREADS` (then those are used as given).
///
/// candle sizes its CPU thread pools from these variables when a kernel first runs. Its
/// default (one thread per core) spreads every matmul over a shared pool whose threads
/// spin-wait for each other and which runs one matmul at a time (a global lock). A token
/// of this model is ~200 small matmuls, so the pool only pays off on an otherwise idle
/// machine. Measured on a 2-core server: one stream ran at 46 tokens/s with the pool when
/// the machine was quiet but at 2-4 tokens/s while other processes competed for the cores
/// (a token then waits for a descheduled pool thread at every matmul); with one thread per
/// generation, 24.5 tokens/s quiet and ~19 under the same competition, and 3 concurrent
/// generations run side by side (49.5 tokens/s aggregate) instead of queueing on the lock.
/// A dedicated, otherwise idle machine serving one stream at a time may prefer
/// `CANDLE_NUM_THREADS=<cores>`.
///
/// Set once, before the first kernel runs (the variables are read once, by candle).
pub fn configure_cpu_threads() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for var in ["CANDLE_NUM_THREADS", "RAYON_NUM_THREADS"] {
            if std::env::var_os(var).is_none() {
                std::env::set_var(var, "1");
            }
        }
    });
}

/// One forward pass over `tokens` at position `pos`; returns the last position's logits.
fn forward(model: &mut ModelWeights, tokens: &[u32], pos: usize) -> Result<Tensor, LocalError> {
    let input = Tensor::new(tokens, &Device::Cpu)
        .and_then(|t| t.unsqueeze(0))
        .map_err(inference)?;
    model
        .forward(&input, pos)
        .and_then(|l| l.squeeze(0))
        .map_err(inference)
}

fn inference(e: candle_core::Error) -> LocalError {
    LocalError::Inference(e.to_string())
}

fn sampling(req: &GenerateRequest) -> Result<Sampling, LocalError> {
    let (t, p) = (req.temperature, req.top_p);
    if !t.is_finite() || t < 0.0 {
        return Err(LocalError::InvalidRequest(format!(
            "temperature must be a number >= 0, got {t}"
        )));
    }
    if !p.is_finite() || p < 0.0 {
        return Err(LocalError::InvalidRequest(format!(
            "top_p must be a number in [0, 1], got {p}"
        )));
    }
    Ok(if t == 0.0 || p == 0.0 {
        Sampling::ArgMax
    } else if p < 1.0 {
        Sampling::TopP { p, temperature: t }
    } else {
        Sampling::All { temperature: t }
    })
}

/// Checks that `path` is the expected model: present, the right size, the right sha256.
fn verify_file(path: &Path) -> Result<(), LocalError> {
    let io_error = |source| LocalError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Err(missing(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing(path)),
        Err(e) => return Err(io_error(e)),
    };
    let expected = format!("{MODEL_SIZE} bytes, sha256 {MODEL_SHA256}");
    if meta.len() != MODEL_SIZE {
        return Err(LocalError::ChecksumMismatch {
            path: path.to_path_buf(),
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
    if digest != MODEL_SHA256 {
        return Err(LocalError::ChecksumMismatch {
            path: path.to_path_buf(),
            expected,
            actual: format!("{} bytes, sha256 {digest}", meta.len()),
        });
    }
    Ok(())
}

fn missing(path: &Path) -> LocalError {
    LocalError::ModelMissing {
        path: PathBuf::from(path),
    }
}

/// Builds the llama weights, converting Q4_1 matrices to Q8_0 (see [`LocalModel::load`]).
///
/// `ModelWeights` can only be built from a GGUF reader, so the converted tensors are written
/// to an in-memory GGUF (with just the model hyper-parameters) and read back from there.
fn load_weights(
    content: Content,
    reader: &mut BufReader<File>,
) -> Result<ModelWeights, LocalError> {
    let gguf = |e: candle_core::Error| LocalError::Gguf(e.to_string());
    let device = Device::Cpu;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(&str, QTensor)> = Vec::with_capacity(names.len());
    for name in names {
        let t = content.tensor(reader, name, &device).map_err(gguf)?;
        let t = if t.dtype() == GgmlDType::Q4_1 {
            let dense = t.dequantize(&device).map_err(gguf)?;
            QTensor::quantize(&dense, GgmlDType::Q8_0).map_err(gguf)?
        } else {
            t
        };
        tensors.push((name.as_str(), t));
    }
    let metadata: Vec<(&str, &Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("llama.") || k.as_str() == "general.architecture")
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut buffer = Cursor::new(Vec::new());
    gguf_file::write(&mut buffer, &metadata, &tensor_refs).map_err(gguf)?;
    drop(tensors);
    buffer.set_position(0);
    let converted = Content::read(&mut buffer).map_err(gguf)?;
    ModelWeights::from_gguf(converted, &mut buffer, &device).map_err(gguf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn local_model_is_send_and_sync() {
        assert_send_sync::<LocalModel>();
    }

    #[test]
    fn sampling_modes() {
        let req = |temperature, top_p| GenerateRequest {
            messages: vec![],
            max_tokens: 1,
            temperature,
            top_p,
            ..Default::default()
        };
        assert!(matches!(sampling(&req(0.0, 0.9)), Ok(Sampling::ArgMax)));
        assert!(matches!(
            sampling(&req(0.7, 0.9)),
            Ok(Sampling::TopP { .. })
        ));
        assert!(matches!(sampling(&req(0.7, 1.0)), Ok(Sampling::All { .. })));
        assert!(sampling(&req(-1.0, 1.0)).is_err());
        assert!(sampling(&req(f64::NAN, 1.0)).is_err());
    }
}
