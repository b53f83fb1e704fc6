//! A real embedded debate on the local model: 2 agents × 1 round with `provider: local`.
//! The model file comes from `scripts/fetch-model.sh` (the test command runs it first).
//! One agent has tools and a `--context` directory is given: the local model has no
//! function calling, so its tasks run without tools, each with one warning.

use std::path::Path;

use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

fn ensure_model() {
    if parley_local_model_present() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-model.sh");
    let status = std::process::Command::new("bash")
        .arg(script)
        .status()
        .expect("run fetch-model.sh");
    assert!(status.success(), "scripts/fetch-model.sh failed");
}

fn parley_local_model_present() -> bool {
    let dir = std::env::var_os("PARLEY_MODEL_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache/parley/models")
        });
    dir.join("SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
}

#[test]
fn two_agents_one_round_on_the_local_model() {
    ensure_model();
    let dir = tempfile::tempdir().unwrap();
    let agent = |id: &str, role: &str| json!({"id": id, "name": id, "role": role, "model": "smollm2", "provider": "local", "temperature": 0.7, "maxTokens": 48});
    let tooled = |mut a: Value| {
        a["tools"] = json!([{"name": "file_read"}, {"name": "list_files"}]);
        a
    };
    std::fs::create_dir_all(dir.path().join("ctx")).unwrap();
    std::fs::write(dir.path().join("ctx/notes.md"), "cache notes\n").unwrap();
    let cfg = json!({
        "agents": [agent("agent-architect", "architect"), tooled(agent("agent-kiss", "kiss"))],
        "judge": {"id": "judge-main", "name": "Judge", "role": "generalist", "model": "smollm2", "provider": "local", "temperature": 0.2, "maxTokens": 64},
        "debate": {"rounds": 1}
    });
    std::fs::write(dir.path().join("debate-config.json"), cfg.to_string()).unwrap();
    let out = std::process::Command::new(PARLEY)
        .current_dir(dir.path())
        .args([
            "run",
            "Design a simple key-value cache for a web service",
            "--output",
            "state.json",
            "--context",
            "ctx",
        ])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("Using local model SmolLM2-135M-Instruct"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty());
    let state: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("state.json")).unwrap()).unwrap();
    assert_eq!(state["status"], "completed");
    let contributions = state["rounds"][0]["contributions"].as_array().unwrap();
    assert_eq!(contributions.len(), 2 + 2 + 2);
    // The kiss agent's proposal, critique and refinement: one warning each, no tool calls.
    let warnings: Vec<&str> = state["engine"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|w| w.contains("no function calling"))
        .collect();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings.iter().all(|w| w.contains("/agent-kiss")
        && w.contains("provider local has no function calling; its tools (file_read, list_files) were skipped")));
    assert!(contributions
        .iter()
        .all(|c| c["metadata"].get("toolCalls").is_none()));
    for c in contributions {
        assert!(!c["content"].as_str().unwrap().trim().is_empty(), "{c}");
        let m = &c["metadata"];
        assert!(m["tokensUsed"].as_u64().unwrap() > 0, "{c}");
        assert!(m["promptTokens"].as_u64().unwrap() > 0, "{c}");
        assert!(m["completionTokens"].as_u64().unwrap() > 0, "{c}");
        assert!(m["completionTokens"].as_u64().unwrap() <= 48, "{c}");
        assert_eq!(m["model"], "SmolLM2-135M-Instruct.Q4_1");
        assert_eq!(m["provider"], "local");
    }
    assert!(!state["finalSolution"]["description"]
        .as_str()
        .unwrap()
        .trim()
        .is_empty());
}

/// The quick start's shape (no provider named, no key: the agents and the judge fall to the
/// local model): the output says it is a small demo model, qualifies the judge's confidence
/// as self-reported, and shows how to point Parley at a real model.
#[test]
fn a_debate_on_the_local_model_says_it_ran_on_a_demo_model() {
    ensure_model();
    let dir = tempfile::tempdir().unwrap();
    let agent = |id: &str, role: &str| json!({"id": id, "name": id, "role": role, "model": "gpt-4o-mini", "maxTokens": 24});
    let cfg = json!({
        "agents": [agent("agent-architect", "architect"), agent("agent-performance", "performance")],
        "judge": {"id": "judge-main", "name": "Judge", "role": "generalist", "model": "gpt-4o-mini", "maxTokens": 64},
        "debate": {"rounds": 1}
    });
    std::fs::write(dir.path().join("debate-config.json"), cfg.to_string()).unwrap();
    let out = std::process::Command::new(PARLEY)
        .current_dir(dir.path())
        .args(["run", "Design a rate limiter for a public REST API"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENROUTER_BASE_URL")
        .env_remove("PARLEY_LOCAL_MODEL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    let confidence = text
        .lines()
        .find(|l| l.starts_with("Confidence: "))
        .unwrap_or_else(|| panic!("no Confidence line in:\n{text}"));
    assert!(
        confidence.ends_with(
            "/100 (self-reported by smollm2-135m, a small demo model: not a measurement)"
        ),
        "{confidence}"
    );
    for wanted in [
        "Note: the judge and 2 agent(s) ran on smollm2-135m, the local offline demo model",
        "they are not advice to act on",
        "OPENAI_API_KEY=sk-... parley run",
        "OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_API_KEY=unused parley run",
        "Ollama, llama.cpp's server, vLLM",
    ] {
        assert!(text.contains(wanted), "{wanted:?} not in:\n{text}");
    }
}
