//! The fake LLM answers in the OpenAI shapes and its knobs do what they say.

use parley_testkit::{FakeLlm, Fault, Latency, Match, RateLimit, StructuredOutput};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn chat_body(model: &str, prompt: &str) -> Value {
    json!({
        "model": model,
        "temperature": 0.2,
        "messages": [
            {"role": "system", "content": "You are an architect."},
            {"role": "user", "content": prompt}
        ]
    })
}

async fn post(llm: &FakeLlm, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", llm.base_url()))
        .bearer_auth("sk-test")
        .json(body)
        .send()
        .await
        .expect("request to the fake LLM")
}

async fn chat(llm: &FakeLlm, model: &str, prompt: &str) -> reqwest::Response {
    post(llm, "/chat/completions", &chat_body(model, prompt)).await
}

#[tokio::test]
async fn chat_completions_reply_in_chat_shape_and_are_recorded() {
    let llm = FakeLlm::start().await.unwrap();
    assert!(llm.base_url().starts_with("http://127.0.0.1:"));
    assert!(llm.base_url().ends_with("/v1"));

    let resp = chat(&llm, "gpt-test", "Design a rate limiter").await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-test");
    assert!(v["id"].is_string());
    assert!(v["created"].is_u64());
    let choice = &v["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["finish_reason"], "stop");
    let text = choice["message"]["content"].as_str().unwrap();
    assert!(text.starts_with("Proposal from gpt-test #1"), "{text}");
    let usage = &v["usage"];
    let (p, c) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
    );
    assert!(p >= 1 && c >= 1);
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), p + c);

    let second = chat(&llm, "gpt-test", "again")
        .await
        .json::<Value>()
        .await
        .unwrap();
    let text = second["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.starts_with("Proposal from gpt-test #2"), "{text}");

    let reqs = llm.requests();
    assert_eq!(llm.request_count(), 2);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(r.header("Authorization"), Some("Bearer sk-test"));
    assert_eq!(r.model, "gpt-test");
    assert_eq!(r.temperature, Some(0.2));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, chat_body("gpt-test", "Design a rate limiter"));
    assert_eq!(
        r.prompt_text(),
        "You are an architect.\nDesign a rate limiter"
    );
    assert!(reqs[0].received_at <= reqs[1].received_at);
}

#[tokio::test]
async fn responses_reply_in_responses_shape_with_json_when_asked() {
    let llm = FakeLlm::start().await.unwrap();
    let body = json!({
        "model": "judge",
        "instructions": "You are the judge.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Answer in JSON."}]}]
    });
    let resp = post(&llm, "/responses", &body).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["model"], "judge");
    let item = &v["output"][0];
    assert_eq!(item["type"], "message");
    assert_eq!(item["role"], "assistant");
    assert_eq!(item["content"][0]["type"], "output_text");
    let text = item["content"][0]["text"].as_str().unwrap();
    let synthesis: Value = serde_json::from_str(text).expect("JSON prompt gets a JSON reply");
    assert!(synthesis["description"]
        .as_str()
        .unwrap()
        .starts_with("Fake synthesized solution"));
    assert!(synthesis["tradeoffs"].is_array());
    assert!(synthesis["recommendations"].is_array());
    assert_eq!(synthesis["confidence"], 85);
    let usage = &v["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        llm.requests()[0].prompt_text(),
        "You are the judge.\nAnswer in JSON."
    );
}

#[tokio::test]
async fn responses_api_off_answers_404_and_chat_still_works() {
    let llm = FakeLlm::start().await.unwrap();
    llm.set_responses_api(false);
    let resp = post(&llm, "/responses", &json!({"model": "m", "input": "hi"})).await;
    assert_eq!(resp.status(), 404);
    assert_eq!(chat(&llm, "m", "hi").await.status(), 200);
    let statuses: Vec<u16> = llm.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [404, 200]);
}

#[tokio::test]
async fn latency_is_applied_before_replying() {
    let llm = FakeLlm::start().await.unwrap();
    llm.set_latency(Latency::Fixed(Duration::from_millis(200)));
    let t0 = Instant::now();
    assert_eq!(chat(&llm, "m", "hi").await.status(), 200);
    assert!(t0.elapsed() >= Duration::from_millis(200));

    llm.set_latency(Latency::HeavyTail {
        p50: Duration::from_millis(20),
        p99: Duration::from_millis(60),
    });
    assert_eq!(chat(&llm, "m", "hi").await.status(), 200);
    llm.set_latency(Latency::Zero);
    assert_eq!(chat(&llm, "m", "hi").await.status(), 200);
}

#[tokio::test]
async fn status_fault_hits_its_model_then_runs_out() {
    let llm = FakeLlm::start().await.unwrap();
    llm.add_fault(Fault::Status {
        status: 500,
        body: r#"{"error":{"message":"boom"}}"#.into(),
        matching: Match::Model("flaky".into()),
        times: Some(2),
    });
    assert_eq!(chat(&llm, "steady", "hi").await.status(), 200);
    let resp = chat(&llm, "flaky", "hi").await;
    assert_eq!(resp.status(), 500);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["message"],
        "boom"
    );
    assert_eq!(chat(&llm, "flaky", "hi").await.status(), 500);
    assert_eq!(chat(&llm, "flaky", "hi").await.status(), 200);
    let statuses: Vec<u16> = llm.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 500, 500, 200]);
}

#[tokio::test]
async fn faults_match_prompt_text_and_can_be_cleared() {
    let llm = FakeLlm::start().await.unwrap();
    llm.add_fault(Fault::Status {
        status: 503,
        body: "overloaded".into(),
        matching: Match::PromptContains("security".into()),
        times: None,
    });
    assert_eq!(chat(&llm, "m", "think about security").await.status(), 503);
    assert_eq!(chat(&llm, "m", "think about security").await.status(), 503);
    assert_eq!(chat(&llm, "m", "think about speed").await.status(), 200);
    llm.clear_faults();
    assert_eq!(chat(&llm, "m", "think about security").await.status(), 200);
}

#[tokio::test]
async fn malformed_fault_returns_200_with_a_body_that_is_not_the_api_json() {
    let llm = FakeLlm::start().await.unwrap();
    llm.add_fault(Fault::Malformed {
        matching: Match::Any,
        times: Some(1),
    });
    let resp = chat(&llm, "m", "hi").await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
    assert_eq!(chat(&llm, "m", "hi").await.status(), 200);
}

#[tokio::test]
async fn hang_fault_never_answers() {
    let llm = FakeLlm::start().await.unwrap();
    llm.add_fault(Fault::Hang {
        matching: Match::Any,
        times: Some(1),
    });
    let err = reqwest::Client::new()
        .post(format!("{}/chat/completions", llm.base_url()))
        .timeout(Duration::from_millis(300))
        .json(&chat_body("m", "hi"))
        .send()
        .await
        .expect_err("a hung request times out");
    assert!(err.is_timeout(), "{err}");
    assert_eq!(llm.requests()[0].status, 0);
    assert_eq!(chat(&llm, "m", "hi").await.status(), 200);
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after_and_counts() {
    let llm = FakeLlm::start().await.unwrap();
    llm.set_rate_limit(Some(RateLimit {
        requests: 2,
        window: Duration::from_secs(60),
        retry_after: Some(Duration::from_secs(3)),
    }));
    let first = chat(&llm, "m", "1").await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-ratelimit-limit-requests"], "2");
    assert_eq!(first.headers()["x-ratelimit-remaining-requests"], "1");
    let second = chat(&llm, "m", "2").await;
    assert_eq!(second.headers()["x-ratelimit-remaining-requests"], "0");
    let reset = second.headers()["x-ratelimit-reset-requests"]
        .to_str()
        .unwrap()
        .trim_end_matches("ms")
        .parse::<u64>()
        .unwrap();
    assert!(reset > 59_000 && reset <= 60_000, "{reset}");
    let resp = chat(&llm, "m", "3").await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "3");
    assert_eq!(chat(&llm, "m", "4").await.status(), 429);
    assert_eq!(llm.rate_limited_count(), 2);
    assert_eq!(llm.request_count(), 4);

    llm.set_rate_limit(None);
    assert_eq!(chat(&llm, "m", "5").await.status(), 200);
    assert_eq!(llm.rate_limited_count(), 2);
}

#[tokio::test]
async fn rate_limit_without_retry_after_sends_no_header() {
    let llm = FakeLlm::start().await.unwrap();
    llm.set_rate_limit(Some(RateLimit {
        requests: 0,
        window: Duration::from_secs(60),
        retry_after: None,
    }));
    let resp = chat(&llm, "m", "1").await;
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().get("retry-after").is_none());
}

#[tokio::test]
async fn responder_overrides_the_reply_text() {
    let llm = FakeLlm::start().await.unwrap();
    llm.set_responder(|r| format!("echo {}: {}", r.model, r.prompt_text().len()));
    let v: Value = chat(&llm, "m", "abc").await.json().await.unwrap();
    let expected = format!("echo m: {}", "You are an architect.\nabc".len());
    assert_eq!(v["choices"][0]["message"]["content"], expected);
}

#[tokio::test]
async fn bad_requests_are_recorded_too() {
    let llm = FakeLlm::start().await.unwrap();
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{}/chat/completions", llm.base_url()))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let resp = client
        .get(format!("{}/models", llm.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body, Value::String("not json".into()));
    assert_eq!((reqs[0].status, reqs[1].status), (400, 404));
    assert_eq!(reqs[1].path, "/v1/models");
}

#[tokio::test]
async fn dropping_the_server_releases_hung_requests() {
    let llm = FakeLlm::start().await.unwrap();
    llm.add_fault(Fault::Hang {
        matching: Match::Any,
        times: None,
    });
    let url = format!("{}/chat/completions", llm.base_url());
    let pending = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .timeout(Duration::from_secs(60))
            .json(&chat_body("m", "hi"))
            .send()
            .await
    });
    assert!(
        parley_testkit::wait_until_async(Duration::from_secs(10), || llm.request_count() == 1)
            .await
    );
    drop(llm);
    match pending.await.unwrap() {
        Ok(resp) => assert_eq!(resp.status(), 503),
        Err(e) => assert!(!e.is_timeout(), "hung request was not released: {e}"),
    }
}

#[tokio::test]
async fn rate_limited_fault_answers_429_and_is_spent() {
    let llm = FakeLlm::start().await.unwrap();
    llm.add_fault(Fault::RateLimited {
        retry_after: Some(Duration::from_millis(1500)),
        matching: Match::Model("m".into()),
        times: Some(1),
    });
    let resp = chat(&llm, "m", "1").await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "2");
    assert_eq!(chat(&llm, "m", "2").await.status(), 200);
    assert_eq!(
        llm.rate_limited_count(),
        0,
        "injected 429s are not quota overruns"
    );
}

#[tokio::test]
async fn structured_output_is_honoured_rejected_or_ignored() {
    let llm = FakeLlm::start().await.unwrap();
    llm.set_responder(|_| "Sure! Here is my answer, not JSON.".to_string());
    let schema = json!({"type": "object",
        "properties": {"answer": {"type": "string"}, "score": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["answer", "score"], "additionalProperties": false});
    let mut chat = chat_body("m", "Reply in JSON");
    chat["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": true}});
    let mut responses = json!({"model": "m", "input": "Reply in JSON"});
    responses["text"] =
        json!({"format": {"type": "json_schema", "name": "a", "schema": schema, "strict": true}});

    // Default: ignored, the responder's text goes out as is.
    let v: Value = post(&llm, "/chat/completions", &chat)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Sure! Here is my answer, not JSON."
    );

    // Honoured: an instance of the schema instead of text that does not hold it.
    llm.set_structured_output(StructuredOutput::Honour);
    let v: Value = post(&llm, "/chat/completions", &chat)
        .await
        .json()
        .await
        .unwrap();
    let reply: Value =
        serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(reply["score"], 5);
    assert!(reply["answer"].is_string());
    let v: Value = post(&llm, "/responses", &responses)
        .await
        .json()
        .await
        .unwrap();
    let text = v["output"][0]["content"][0]["text"].as_str().unwrap();
    assert!(serde_json::from_str::<Value>(text).unwrap()["answer"].is_string());
    // A responder that already answers in the schema is passed through.
    llm.set_responder(|_| r#"{"answer":"mine","score":9}"#.to_string());
    let v: Value = post(&llm, "/chat/completions", &chat)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        r#"{"answer":"mine","score":9}"#
    );
    // A request without a schema is untouched.
    let v: Value = chat_plain(&llm).await;
    assert_eq!(
        v["choices"][0]["message"]["content"],
        r#"{"answer":"mine","score":9}"#
    );

    // Rejected: 400 naming response_format, for both APIs.
    llm.set_structured_output(StructuredOutput::Reject);
    for (path, body) in [("/chat/completions", &chat), ("/responses", &responses)] {
        let resp = post(&llm, path, body).await;
        assert_eq!(resp.status(), 400, "{path}");
        let e: Value = resp.json().await.unwrap();
        assert!(e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("response_format"));
    }
    assert_eq!(chat_plain(&llm).await["object"], "chat.completion");

    let recorded = llm.requests();
    assert_eq!(recorded[0].json_schema(), Some(&schema));
    assert_eq!(recorded[2].json_schema(), Some(&schema));
    assert_eq!(recorded[4].json_schema(), None);
}

async fn chat_plain(llm: &FakeLlm) -> Value {
    post(llm, "/chat/completions", &chat_body("m", "no schema"))
        .await
        .json()
        .await
        .unwrap()
}
