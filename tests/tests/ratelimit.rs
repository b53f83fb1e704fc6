//! Rate limits and provider errors through the real cluster: worker processes sharing one
//! provider limit through Redis, `Retry-After` honoured (inline when short, by handing the
//! task back to JetStream when long), and a 401 failing the debate without retries.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::time::Duration;

use parley_tests::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_sharing_a_limit_never_get_429() {
    // The provider allows 10 requests in any 5 s (120/min); the operator config says so.
    let c = Cluster::start_with_config(json!({
        "providers": {"openai-compatible": {"requestsPerMinute": 120}}
    }))
    .await;
    c.fake.set_rate_limit(Some(RateLimit {
        requests: 10,
        window: Duration::from_secs(5),
        retry_after: Some(Duration::from_secs(1)),
    }));
    let _coord = c.coordinator();
    let agent1 = c.worker("agent");
    let agent2 = c.worker("agent");
    let _judge = c.worker("judge");

    let id = c.submit(&spec("Design a URL shortener")).await;
    let state = c.wait_done(&id, Duration::from_secs(90)).await;
    assert_complete(&state);
    assert_eq!(
        c.fake.rate_limited_count(),
        0,
        "the shared limit let a burst through"
    );
    assert_eq!(c.fake.request_count(), 22);
    // Both replicas ran tasks (they shared the allowance, not each had its own).
    for w in [&agent1, &agent2] {
        assert!(
            w.log().contains("task done"),
            "a replica ran nothing:\n{}",
            w.log()
        );
    }

    // Control: the same load with no configured limit does trip the provider's quota, and
    // the 429s (with Retry-After) are waited out, so the debate still completes.
    drop((agent1, agent2));
    let unlimited = c.dir.path().join("unlimited.json");
    std::fs::write(
        &unlimited,
        json!({"baseUrl": c.fake.base_url()}).to_string(),
    )
    .unwrap();
    let cfg = unlimited.to_str().unwrap();
    let _a1 = c.worker_with("agent", &["--config", cfg], &[]);
    let _a2 = c.worker_with("agent", &["--config", cfg], &[]);
    let id = c.submit(&spec("Design a URL shortener, again")).await;
    let state = c.wait_done(&id, Duration::from_secs(120)).await;
    assert_complete(&state);
    assert!(
        c.fake.rate_limited_count() > 0,
        "without the limiter the provider should have refused some calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_waited_inline_or_by_handing_the_task_back() {
    let c = Cluster::start().await;
    // Security's first call: "Retry-After: 2" (short: waited in the worker). Kiss's first
    // call: "Retry-After: 7" (longer than a worker holds a slot: handed back to the queue).
    c.fake.add_fault(Fault::RateLimited {
        retry_after: Some(Duration::from_secs(2)),
        matching: Match::Model("model-sec".into()),
        times: Some(1),
    });
    c.fake.add_fault(Fault::RateLimited {
        retry_after: Some(Duration::from_secs(7)),
        matching: Match::Model("model-kiss".into()),
        times: Some(1),
    });
    let _coord = c.coordinator();
    let agent = c.worker_with("agent", &["--ack-wait-secs", "30"], &[]);
    let _judge = c.worker("judge");

    let id = c.submit(&spec("Design a metrics pipeline")).await;
    let state = c.wait_done(&id, Duration::from_secs(90)).await;
    assert_complete(&state);

    let reqs = c.fake.requests();
    for (model, wait) in [("model-sec", 2), ("model-kiss", 7)] {
        // The refused call and its retry (same prompt), sent no sooner than asked.
        let refused = reqs.iter().find(|r| r.model == model).unwrap();
        assert_eq!(refused.status, 429, "{model}");
        let calls: Vec<_> = reqs
            .iter()
            .filter(|r| r.model == model && r.prompt_text() == refused.prompt_text())
            .collect();
        assert_eq!(calls.len(), 2, "{model}");
        assert_eq!(calls[1].status, 200, "{model}");
        let gap = calls[1].received_at - calls[0].received_at;
        assert!(
            gap >= Duration::from_secs(wait),
            "{model}: retried after {gap:?}, Retry-After was {wait} s"
        );
    }
    let log = agent.log();
    assert!(
        log.contains("handing the task back"),
        "the 7 s wait should hand the task back:\n{log}"
    );
    // Neither wait spent the node's retry budget: every task ran on its first attempt.
    assert_eq!(reqs.iter().filter(|r| r.status == 200).count(), 22);
    assert!(
        !log.contains("\"attempt\":2"),
        "a rate-limit wait was turned into a node retry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_fails_the_debate_at_once_naming_the_provider() {
    let c = Cluster::start().await;
    c.fake.add_fault(Fault::Status {
        status: 401,
        body: r#"{"error":{"message":"Incorrect API key provided"}}"#.into(),
        matching: Match::Model("model-sec".into()),
        times: None,
    });
    let key = "sk-parley-test-0123456789abcdef".to_string();
    let env = [("OPENAI_COMPATIBLE_API_KEY", key.clone())];
    let _coord = c.coordinator();
    let agent = c.worker_with("agent", &[], &env);
    let judge = c.worker_with("judge", &[], &env);

    let id = c.submit(&spec("Design a login service")).await;
    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_eq!(state["status"], "failed", "{state}");
    let e = &state["error"];
    assert_eq!(e["agentId"], "agent-security", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("openai-compatible"), "{msg}");
    assert!(msg.contains("401"), "{msg}");
    assert!(msg.contains("OPENAI_COMPATIBLE_API_KEY"), "{msg}");

    let reqs = c.fake.requests();
    // The key went over the wire as a bearer token...
    assert!(reqs
        .iter()
        .all(|r| r.header("authorization") == Some(&format!("Bearer {key}"))));
    // ...no 401 was retried, neither in the call nor by the node (security's critiques
    // may have started too, since they only need the others' proposals)...
    let sec: Vec<String> = reqs
        .iter()
        .filter(|r| r.model == "model-sec")
        .map(|r| r.prompt_text())
        .collect();
    let distinct: std::collections::BTreeSet<&String> = sec.iter().collect();
    assert!(!sec.is_empty());
    assert_eq!(distinct.len(), sec.len(), "a 401 was retried");
    // ...and the key's value is nowhere in the state, the events or the logs.
    assert!(!state.to_string().contains(&key));
    assert!(!agent.log().contains(&key) && !judge.log().contains(&key));
    let js = async_nats::jetstream::new(c.client.clone());
    let mut stream = js.get_stream("PARLEY_EVENTS").await.unwrap();
    let info = stream.info().await.unwrap();
    for seq in 1..=info.state.last_sequence {
        if let Ok(m) = stream.get_raw_message(seq).await {
            assert!(!String::from_utf8_lossy(&m.payload).contains(&key));
        }
    }
}
