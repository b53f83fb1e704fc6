//! Tests against the real model (SmolLM2-135M-Instruct Q4_1, ~98 MB).
//!
//! The model is expected at `default_model_path()`; when it is missing the tests run
//! `scripts/fetch-model.sh` first. It is loaded once per test binary.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use parley_local::{
    default_model_path, format_chat, ChatMessage, GenerateRequest, JsonSchema, Limits, LocalError,
    LocalModel, FETCH_COMMAND, MODEL_SIZE,
};

fn model() -> &'static LocalModel {
    static MODEL: OnceLock<LocalModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let path = default_model_path();
        if !path.is_file() {
            let script = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(FETCH_COMMAND);
            let status = Command::new("bash")
                .arg(&script)
                .status()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
            assert!(status.success(), "{} failed: {status}", script.display());
        }
        LocalModel::load(&path).unwrap_or_else(|e| panic!("{e}"))
    })
}

fn greedy(messages: Vec<ChatMessage>, max_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        messages,
        max_tokens,
        temperature: 0.0,
        top_p: 1.0,
        ..Default::default()
    }
}

#[test]
fn model_identity_and_metadata() {
    let m = model();
    assert_eq!(m.model_name(), "SmolLM2-135M-Instruct.Q4_1");
    // The GGUF says 8192; the engine keeps 4096 tokens per generation.
    assert_eq!(m.context_length(), 4096);
    assert!(m.threads() >= 1);
    let t = m.tokenizer();
    assert_eq!(t.vocab_size(), 49152);
    assert_eq!(t.special_token_id("<|im_start|>"), Some(t.bos_token_id()));
    assert_eq!(t.special_token_id("<|im_end|>"), Some(t.eos_token_id()));
}

#[test]
fn tokenizer_round_trips_arbitrary_text() {
    let t = model().tokenizer();
    let mut texts: Vec<String> = [
        "",
        "Hello, world!",
        "  leading, trailing and   inner   spaces   ",
        "tabs\t\tnewlines\n\n\r\n and a lone \r",
        "Ünïcödé: naïve café, Ελληνικά, русский, 日本語, العربية, emoji 🎉👩‍💻 and ①②③",
        "fn main() {\n    let v: Vec<u32> = (0..10).map(|i| i * i).collect();\n    println!(\"{v:?}\");\n}\n",
        "def f(x):\n\treturn x**2  # 1e-9 <= x < 3.14159\n",
        "numbers 1234567890 and 1,000,000.50 and ٣٤٥ and ²³",
        "<|im_start|>user\nhi<|im_end|>\nnot special: <|im_start and im_end|>",
        "\u{0}\u{1}\u{7f} control chars and \u{200b} zero-width",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // A long pseudo-random mix of ASCII, whitespace and multi-byte characters.
    let alphabet: Vec<char> = "ab Z9\n\t  é日🎉.,;'\"{}()-_=+".chars().collect();
    let mut state = 0x2545_f491_u64;
    texts.push(
        (0..5000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                alphabet[(state % alphabet.len() as u64) as usize]
            })
            .collect(),
    );
    for text in &texts {
        let ids = t.encode(text);
        assert_eq!(&t.decode(&ids), text, "round trip of {text:?} via {ids:?}");
    }
}

/// Reference encodings produced by the Hugging Face `tokenizers` library configured like
/// SmolLM2's tokenizer.json (Digits + ByteLevel pre-tokenizer, BPE with the GGUF's vocab and
/// merges); see `fixtures/make_tokenizer_reference.py`.
#[test]
fn tokenizer_matches_reference_encodings() {
    let t = model().tokenizer();
    let reference: Vec<serde_json::Value> =
        serde_json::from_str(include_str!("fixtures/tokenizer_reference.json")).unwrap();
    assert!(reference.len() >= 10);
    for case in reference {
        let text = case["text"].as_str().unwrap();
        let expected: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(t.encode(text), expected, "encoding of {text:?}");
    }
}

#[test]
fn control_tokens_are_matched_whole() {
    let t = model().tokenizer();
    let ids = t.encode("<|im_start|>user\nhi<|im_end|>");
    let start = t.special_token_id("<|im_start|>").unwrap();
    let end = t.special_token_id("<|im_end|>").unwrap();
    assert_eq!((start, end), (1, 2));
    assert_eq!(ids.first(), Some(&start));
    assert_eq!(ids.last(), Some(&end));
    assert_eq!(
        ids.iter().filter(|&&id| id == start || id == end).count(),
        2
    );
    assert_eq!(t.decode(&ids[1..ids.len() - 1]), "user\nhi");
}

#[test]
fn chat_format_matches_the_gguf_chat_template() {
    let template = model()
        .chat_template()
        .expect("the GGUF has a tokenizer.chat_template");
    let messages = [
        ChatMessage::system("You are a careful reviewer."),
        ChatMessage::user("Is `x = x + 1` idempotent?\nAnswer briefly."),
        ChatMessage::assistant("No."),
        ChatMessage::user("Why?"),
    ];
    let mut env = minijinja::Environment::new();
    env.add_template("chat", template).unwrap();
    let rendered = env
        .get_template("chat")
        .unwrap()
        .render(minijinja::context! {
            messages => messages
                .iter()
                .map(|m| minijinja::context! { role => m.role.clone(), content => m.content.clone() })
                .collect::<Vec<_>>(),
            add_generation_prompt => true,
        })
        .unwrap();
    assert_eq!(format_chat(&messages), rendered);
    assert_eq!(format_chat(&messages[..2]), {
        let two = env
            .get_template("chat")
            .unwrap()
            .render(minijinja::context! {
                messages => messages[..2]
                    .iter()
                    .map(|m| minijinja::context! { role => m.role.clone(), content => m.content.clone() })
                    .collect::<Vec<_>>(),
                add_generation_prompt => true,
            })
            .unwrap();
        two
    });
}

#[test]
fn greedy_generation_is_deterministic() {
    let m = model();
    let req = greedy(
        vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user("What is the capital of France?"),
        ],
        24,
    );
    let first = m.generate(&req).unwrap();
    let second = m.generate(&req).unwrap();
    assert_eq!(first, second);
    assert!(!first.text.trim().is_empty(), "empty completion");
    assert!(first.completion_tokens > 0 && first.completion_tokens <= 24);
    assert_eq!(
        first.prompt_tokens,
        m.tokenizer().encode(&format_chat(&req.messages)).len()
    );
    assert!(!first.truncated_prompt);
    assert!(!first.text.contains("<|im_end|>"));
    assert!(
        first.text.contains("Paris"),
        "unexpected answer {:?}",
        first.text
    );
}

#[test]
fn a_shared_prompt_prefix_is_not_processed_again() {
    let m = model();
    let system = ChatMessage::system(
        "You are the security reviewer of a design debate. Look first at authentication, \
         authorisation, secrets, input validation and abuse of the public endpoints.",
    );
    let propose = greedy(
        vec![
            system.clone(),
            ChatMessage::user("Propose a design for a URL shortener."),
        ],
        8,
    );
    let critique = greedy(
        vec![
            system.clone(),
            ChatMessage::user("Critique this design: one Redis instance stores every URL."),
        ],
        8,
    );
    let encode = |r: &GenerateRequest| m.tokenizer().encode(&format_chat(&r.messages));
    let (a, b) = (encode(&propose), encode(&critique));
    let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let system_part = m.tokenizer().encode(&format_chat(&[system])).len() - 3;
    assert!(shared >= system_part, "{shared} < {system_part}");
    let (_, first) = m.generate_with_stats(&propose).unwrap();
    let (g, second) = m.generate_with_stats(&critique).unwrap();
    // The second prompt's shared beginning (its system part) comes from the first one's
    // cache.
    assert_eq!(
        second.cached_prompt_tokens, shared,
        "cached {} of {} prompt tokens (first call cached {})",
        second.cached_prompt_tokens, g.prompt_tokens, first.cached_prompt_tokens
    );
    // The same request again reuses all but its last prompt token, and answers the same.
    let (again, third) = m.generate_with_stats(&critique).unwrap();
    assert_eq!(third.cached_prompt_tokens, g.prompt_tokens - 1);
    assert_eq!(again, g);
}

#[test]
fn sampling_is_reproducible_with_a_seed() {
    let m = model();
    let mut req = greedy(vec![ChatMessage::user("Name a color.")], 12);
    req.temperature = 0.8;
    req.top_p = 0.9;
    req.seed = 7;
    assert_eq!(m.generate(&req).unwrap(), m.generate(&req).unwrap());
}

#[test]
fn concurrent_generations_are_independent() {
    let m = model();
    let a = greedy(vec![ChatMessage::user("Write a haiku about rain.")], 20);
    let b = greedy(vec![ChatMessage::user("List three prime numbers.")], 20);
    let (ra, rb) = std::thread::scope(|s| {
        let ha = s.spawn(|| m.generate(&a));
        let hb = s.spawn(|| m.generate(&b));
        (ha.join().unwrap(), hb.join().unwrap())
    });
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(ra.completion_tokens > 0 && rb.completion_tokens > 0);
    // Each call has its own KV cache: the same answers as one at a time.
    assert_eq!(ra, m.generate(&a).unwrap());
    assert_eq!(rb, m.generate(&b).unwrap());
}

#[test]
fn missing_model_names_the_path_and_the_fetch_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nothing-here.gguf");
    let err = LocalModel::load(&path).unwrap_err();
    assert!(matches!(err, LocalError::ModelMissing { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains(FETCH_COMMAND), "{msg}");
}

#[test]
fn wrong_file_is_refused_before_loading() {
    let dir = tempfile::tempdir().unwrap();
    // Wrong size.
    let small = dir.path().join("small.gguf");
    std::fs::write(&small, b"GGUF but not really").unwrap();
    // Right size, wrong content (a sparse file of zeros).
    let zeros = dir.path().join("zeros.gguf");
    std::fs::File::create(&zeros)
        .unwrap()
        .set_len(MODEL_SIZE)
        .unwrap();
    for path in [small, zeros] {
        let err = LocalModel::load(&path).unwrap_err();
        assert!(
            matches!(err, LocalError::ChecksumMismatch { .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains(FETCH_COMMAND), "{msg}");
    }
}

fn long_conversation(system: &str) -> Vec<ChatMessage> {
    let mut messages = vec![ChatMessage::system(system)];
    for i in 0..40 {
        messages.push(ChatMessage::user(format!(
            "Turn {i}: {}",
            "please consider the tradeoffs of this design in depth. ".repeat(12)
        )));
        messages.push(ChatMessage::assistant(format!(
            "Answer {i}: {}",
            "the design trades latency for durability and simplicity. ".repeat(12)
        )));
    }
    messages.push(ChatMessage::user(
        "Final question: reply with just the word OK.",
    ));
    messages
}

#[test]
fn over_long_conversation_drops_oldest_turns_and_keeps_the_system_prompt() {
    let m = model();
    let system = "You are the judge of a debate. Be fair.";
    let messages = long_conversation(system);
    let full = m.tokenizer().encode(&format_chat(&messages)).len();
    assert!(full > m.context_length(), "{full} tokens should overflow");

    let max_tokens = m.context_length() / 2;
    let prompt = m.prompt(&messages, max_tokens).unwrap();
    assert!(prompt.truncated);
    assert!(prompt.tokens.len() <= m.context_length() - max_tokens);
    let text = m.tokenizer().decode(&prompt.tokens);
    assert!(
        text.starts_with(&format!("<|im_start|>system\n{system}<|im_end|>\n")),
        "{text}"
    );
    assert!(text.ends_with(
        "<|im_start|>user\nFinal question: reply with just the word OK.<|im_end|>\n<|im_start|>assistant\n"
    ));
    assert!(!text.contains("Turn 0:"), "the oldest turns go first");
    assert!(text.contains("Answer 39:"), "the newest turns stay");

    let g = m.generate(&greedy(messages, max_tokens)).unwrap();
    assert!(g.truncated_prompt);
    assert_eq!(g.prompt_tokens, prompt.tokens.len());
    assert!(g.prompt_tokens + g.completion_tokens <= m.context_length());
}

#[test]
fn over_long_single_message_is_cut_at_the_front() {
    let m = model();
    let system = "Summarize the user's text.";
    let body: String = (0..3000)
        .map(|i| format!("sentence {i} of the report. "))
        .collect();
    let messages = vec![ChatMessage::system(system), ChatMessage::user(body.clone())];
    let prompt = m.prompt(&messages, 2048).unwrap();
    assert!(prompt.truncated);
    assert!(prompt.tokens.len() <= m.context_length() - 2048);
    let text = m.tokenizer().decode(&prompt.tokens);
    assert!(text.starts_with(&format!(
        "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"
    )));
    assert!(text.ends_with("sentence 2999 of the report. <|im_end|>\n<|im_start|>assistant\n"));
    assert!(!text.contains("sentence 0 of"));
    // Nearly all of the budget is used.
    assert!(
        prompt.tokens.len() > m.context_length() - 2048 - 64,
        "{}",
        prompt.tokens.len()
    );

    // A system prompt that alone overflows the context is refused, never cut.
    let huge_system = vec![ChatMessage::system(body), ChatMessage::user("hi")];
    let err = m.prompt(&huge_system, 16).unwrap_err();
    assert!(matches!(err, LocalError::InvalidRequest(_)), "{err:?}");
}

#[test]
fn zero_max_tokens_generates_nothing() {
    let g = model()
        .generate(&greedy(vec![ChatMessage::user("hi")], 0))
        .unwrap();
    assert_eq!(g.completion_tokens, 0);
    assert!(g.text.is_empty());
    assert!(g.prompt_tokens > 0);
}

fn verdict_schema() -> JsonSchema {
    JsonSchema::compile(
        &serde_json::json!({
            "type": "object",
            "properties": {
                "summary": {"type": "string"},
                "risks": {"type": "array", "items": {"type": "string"}},
                "score": {"type": "integer", "minimum": 1, "maximum": 10}
            },
            "required": ["summary", "risks", "score"],
            "additionalProperties": false
        }),
        Limits {
            min_string_chars: 1,
            max_string_chars: 300,
            max_array_items: 3,
        },
    )
    .unwrap()
}

#[test]
fn constrained_generation_is_json_of_the_schema_even_when_cut_short() {
    let m = model();
    let messages = vec![
        ChatMessage::system("You review software designs."),
        ChatMessage::user(
            "Review this design: a single Postgres database behind a REST API, no cache. \
             Reply in JSON with a summary, the risks and a score from 1 to 10.",
        ),
    ];
    for max_tokens in [6, 300] {
        let req = GenerateRequest {
            messages: messages.clone(),
            max_tokens,
            temperature: 0.7,
            top_p: 0.9,
            seed: 3,
            repeat_penalty: 1.15,
            schema: Some(verdict_schema()),
            ..Default::default()
        };
        let g = m.generate(&req).unwrap();
        let v: serde_json::Value = serde_json::from_str(&g.text)
            .unwrap_or_else(|e| panic!("max_tokens {max_tokens}: not JSON ({e}): {}", g.text));
        assert!(v["summary"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
        assert!(v["risks"].as_array().is_some_and(|r| r.len() <= 3), "{v}");
        assert!(
            v["score"].as_u64().is_some_and(|n| (1..=10).contains(&n)),
            "{v}"
        );
        assert!(g.completion_tokens <= max_tokens);
        if max_tokens == 6 {
            assert!(g.closed_at_budget, "{}", g.text);
        }
        // Compact: starts with the object, no prose or fences around it.
        assert!(g.text.starts_with("{\"summary\":\""), "{}", g.text);
    }
}

#[test]
fn different_seeds_give_different_answers() {
    let m = model();
    let req = |seed| GenerateRequest {
        messages: vec![ChatMessage::user(
            "Propose an architecture for a chat service.",
        )],
        max_tokens: 48,
        temperature: 0.5,
        top_p: 0.9,
        seed,
        repeat_penalty: 1.15,
        ..Default::default()
    };
    let answers: Vec<String> = (1..=3).map(|s| m.generate(&req(s)).unwrap().text).collect();
    assert!(
        answers[0] != answers[1] || answers[1] != answers[2],
        "{answers:?}"
    );
}

#[test]
fn a_selected_model_is_verified_against_its_own_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    // The right size and content for SmolLM2 is still the wrong file for Gemma.
    let zeros = dir.path().join("zeros.gguf");
    std::fs::File::create(&zeros)
        .unwrap()
        .set_len(parley_local::spec::GEMMA3_270M.size)
        .unwrap();
    let err = LocalModel::load_model(&parley_local::spec::GEMMA3_270M, &zeros).unwrap_err();
    assert!(
        matches!(err, LocalError::ChecksumMismatch { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(parley_local::spec::GEMMA3_270M.sha256),
        "{msg}"
    );
    assert!(msg.contains("fetch-model.sh gemma3-270m"), "{msg}");
    let missing = dir.path().join("absent.gguf");
    let err = LocalModel::load_model(&parley_local::spec::GEMMA3_270M, &missing).unwrap_err();
    assert!(
        err.to_string().contains("fetch-model.sh gemma3-270m"),
        "{err}"
    );
}

/// Gemma 3 270M (base) through llama.cpp's tokenizer and the Gemma turn format; runs only
/// when `scripts/fetch-model.sh gemma3-270m` has installed it (253 MB, not fetched here).
#[test]
fn gemma_loads_tokenizes_and_generates_when_installed() {
    let spec = &parley_local::spec::GEMMA3_270M;
    let path = parley_local::model_path(spec);
    if !path.is_file() {
        eprintln!("skipped: {} not installed", path.display());
        return;
    }
    let m = LocalModel::load_model(spec, &path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.model_name(), "gemma-3-270m-q4_k_m");
    assert_eq!(m.context_length(), 4096);
    let t = m.tokenizer();
    assert_eq!(t.vocab_size(), 262_144);
    assert_eq!(t.special_token_id("<start_of_turn>"), Some(105));
    assert_eq!(t.special_token_id("<end_of_turn>"), Some(106));
    assert_eq!(t.bos_token_id(), 2);
    let text = "Rate limits: 100 req/s per key, burst 20 — token bucket.\n";
    assert_eq!(t.decode(&t.encode(text)), text);
    let prompt = m
        .prompt(
            &[ChatMessage::system("Be brief."), ChatMessage::user("hi")],
            16,
        )
        .unwrap();
    let rendered = parley_local::format_chat_as(
        parley_local::ChatFormat::Gemma,
        &[ChatMessage::system("Be brief."), ChatMessage::user("hi")],
    );
    assert_eq!(prompt.tokens, t.encode(&rendered));
    assert_eq!(prompt.tokens[0], 2, "the prompt starts with <bos>");
    let g = m
        .generate(&greedy(
            vec![ChatMessage::user("Name one HTTP method.")],
            12,
        ))
        .unwrap();
    assert!(
        g.completion_tokens > 0 && g.completion_tokens <= 12,
        "{g:?}"
    );
    // JSON by constrained decoding works over the 262k-token vocabulary too.
    let g = m
        .generate(&GenerateRequest {
            schema: Some(verdict_schema()),
            ..greedy(vec![ChatMessage::user("Review: use a token bucket.")], 24)
        })
        .unwrap();
    serde_json::from_str::<serde_json::Value>(&g.text)
        .unwrap_or_else(|e| panic!("{e}: {}", g.text));
}
