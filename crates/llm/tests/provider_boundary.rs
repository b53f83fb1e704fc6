//! What a provider endpoint sends back is outside input, and the operator's key belongs to
//! the configured endpoint only. Against the fake OpenAI-compatible server:
//! - a redirect to another origin is not followed: the other server receives nothing, and
//!   the call fails naming the redirect; a same-origin redirect is followed;
//! - a reply over 8 MiB is refused without being read whole;
//! - a long error body is cut to a few hundred characters;
//! - hostile `Retry-After` / `x-ratelimit-reset-*` values come back clamped to an hour.

use std::time::Duration;

use parley_llm::openai::{Api, OpenAiClient, Secret, MAX_PROVIDER_WAIT, MAX_RESPONSE_BYTES};
use parley_llm::provider::ErrorKind;
use parley_llm::{ChatMessage, ChatRequest, Provider};
use parley_testkit::{FakeLlm, Fault, Match};

const KEY: &str = "sk-operator-secret-123";

fn client(base_url: &str) -> OpenAiClient {
    let mut c = OpenAiClient::new(
        "openai-compatible",
        base_url,
        Some((Secret::new(KEY.into()), "OPENAI_COMPATIBLE_API_KEY")),
        Api::ChatCompletions,
    )
    .unwrap();
    c.retry.max_retries = 0;
    c
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![ChatMessage::user("the confidential prompt")],
        temperature: 0.2,
        max_tokens: None,
        timeout: Duration::from_secs(20),
        seed: None,
        tools: Default::default(),
        response_format: None,
    }
}

fn reply(status: u16, headers: &[(&str, &str)], body: String) -> Fault {
    Fault::Reply {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body,
        matching: Match::Any,
        times: Some(1),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_another_host_is_not_followed() {
    let operator = FakeLlm::start().await.unwrap();
    let elsewhere = FakeLlm::start().await.unwrap();
    let target = format!("{}/chat/completions", elsewhere.base_url());
    for status in [301, 302, 307, 308] {
        operator.add_fault(reply(status, &[("location", &target)], String::new()));
        let e = client(&operator.base_url())
            .complete(&request())
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidRequest, "{status}: {e}");
        assert!(e.to_string().contains("redirect"), "{e}");
    }
    assert_eq!(operator.request_count(), 4);
    assert_eq!(
        elsewhere.request_count(),
        0,
        "the other host received a request (key and prompt)"
    );
    // The operator's endpoint got the key each time.
    for r in operator.requests() {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_origin_redirect_is_followed() {
    let operator = FakeLlm::start().await.unwrap();
    let target = format!("{}/chat/completions", operator.base_url());
    operator.add_fault(reply(307, &[("location", &target)], String::new()));
    let r = client(&operator.base_url())
        .complete(&request())
        .await
        .unwrap();
    assert!(!r.text.is_empty());
    let reqs = operator.requests();
    assert_eq!(reqs.len(), 2, "the redirect was followed once");
    assert!(reqs[1].prompt_text().contains("the confidential prompt"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_reply_is_refused() {
    let llm = FakeLlm::start().await.unwrap();
    let huge = format!(
        "{{\"choices\":[{{\"message\":{{\"content\":\"{}\"}}}}]}}",
        "x".repeat(MAX_RESPONSE_BYTES)
    );
    llm.add_fault(reply(200, &[], huge));
    let e = client(&llm.base_url())
        .complete(&request())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Malformed, "{e}");
    assert!(e.to_string().contains("larger than"), "{e}");
    // Just under the cap is fine.
    let fits = format!(
        "{{\"choices\":[{{\"message\":{{\"content\":\"{}\"}}}}]}}",
        "y".repeat(MAX_RESPONSE_BYTES - 100)
    );
    llm.add_fault(reply(200, &[], fits));
    let r = client(&llm.base_url()).complete(&request()).await.unwrap();
    assert_eq!(r.text.len(), MAX_RESPONSE_BYTES - 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_error_text_is_cut_and_waits_are_clamped() {
    let llm = FakeLlm::start().await.unwrap();
    let long = format!(
        "{{\"error\":{{\"message\":\"{}\"}}}}",
        "no ".repeat(100_000)
    );
    llm.add_fault(reply(400, &[], long));
    let e = client(&llm.base_url())
        .complete(&request())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidRequest);
    let stored = e.to_task_error().message;
    assert!(
        stored.chars().count() < 600,
        "{} chars",
        stored.chars().count()
    );

    for (name, value) in [
        ("retry-after", "1e300"),
        ("retry-after", "-7"),
        ("retry-after-ms", "NaN"),
        ("x-ratelimit-reset-requests", "99999999999999999h"),
    ] {
        llm.add_fault(reply(
            429,
            &[(name, value)],
            "{\"error\":{\"message\":\"slow down\"}}".into(),
        ));
        let e = client(&llm.base_url())
            .complete(&request())
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::RateLimited);
        assert!(
            e.retry_after.is_none_or(|d| d <= MAX_PROVIDER_WAIT),
            "{name}: {value} -> {:?}",
            e.retry_after
        );
    }
}
