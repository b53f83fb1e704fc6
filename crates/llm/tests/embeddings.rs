//! Embeddings over the OpenAI-compatible `POST /v1/embeddings`, against the fake server:
//! the registry resolves the embedder like an agent (endpoint, key), the reply's vectors
//! come back in input order, errors are classified and never carry the key, and the local
//! provider is refused because it has no embedding mode.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use parley_llm::openai::Secret;
use parley_llm::provider::ErrorKind;
use parley_llm::{cosine, ProviderSettings, Registry};
use parley_protocol::AgentConfig;
use parley_testkit::{embed_text, FakeLlm, Fault, Match};

const KEY: &str = "sk-embedding-operator-secret-42";

fn registry(base_url: Option<String>) -> Registry {
    Registry::new(ProviderSettings {
        base_url,
        agent_base_urls: BTreeMap::new(),
        openai_key: None,
        openrouter_key: None,
        compatible_key: Some(Secret::new(KEY.into())),
        model_path: PathBuf::from("/nonexistent/model.gguf"),
        max_tokens: None,
        env_base_urls: BTreeMap::new(),
    })
}

fn embedder(provider: &str) -> AgentConfig {
    serde_json::from_value(serde_json::json!({
        "id": "embeddings", "name": "embeddings", "role": "embeddings",
        "model": "text-embed-small", "provider": provider,
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_come_back_in_order_with_usage_and_the_key_on_the_wire() {
    let fake = FakeLlm::start().await.unwrap();
    let reg = registry(Some(fake.base_url()));
    let inputs = vec![
        "use a bounded queue with retries".to_string(),
        "Use a bounded queue, with retries!".to_string(),
        "shard the database by tenant".to_string(),
    ];
    let e = reg
        .embed(
            &embedder("openai-compatible"),
            &inputs,
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    assert_eq!(e.vectors.len(), 3);
    assert_eq!(e.model, "text-embed-small");
    assert!(e.prompt_tokens > 0);
    for (v, t) in e.vectors.iter().zip(&inputs) {
        assert_eq!(v, &embed_text(t));
    }
    assert!(cosine(&e.vectors[0], &e.vectors[1]) > 0.999);
    assert!(cosine(&e.vectors[0], &e.vectors[2]) < 0.5);

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/embeddings");
    assert_eq!(r.model, "text-embed-small");
    assert_eq!(r.body["input"].as_array().unwrap().len(), 3);
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_embeddings_call_is_classified_and_keeps_no_key() {
    let fake = FakeLlm::start().await.unwrap();
    fake.add_fault(Fault::Status {
        status: 401,
        body: format!(r#"{{"error":{{"message":"bad key {KEY}"}}}}"#),
        matching: Match::Any,
        times: Some(1),
    });
    let reg = registry(Some(fake.base_url()));
    let e = reg
        .embed(
            &embedder("openai-compatible"),
            &["text".to_string()],
            Duration::from_secs(20),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
    assert!(!e.to_string().contains(KEY), "{e}");
    assert!(e.to_string().contains("OPENAI_COMPATIBLE_API_KEY"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_provider_has_no_embedding_mode() {
    let reg = registry(None);
    let e = reg
        .embed(
            &embedder("local"),
            &["text".to_string()],
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.to_string().contains("no embedding mode"), "{e}");
}
