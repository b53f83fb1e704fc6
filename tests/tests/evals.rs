//! `parley eval --nats-url`: evaluator calls run on the judge workers
//! (`parley.evals.submit`), with the operator's endpoint and model allow-list, over the
//! shipped NATS roles; a bad request is refused with its field named and the worker goes on.

use parley_protocol::subjects::EVALS_SUBMIT;
use parley_tests::{parley_cli, rubric, Cluster};
use serde_json::{json, Value};
use std::path::Path;

fn write_debate(path: &Path) {
    let debate = json!({
        "id": "deb-20260101-000000-ABCD",
        "problem": "Design a ledger service for 8123 merchants.",
        "status": "completed",
        "rounds": [],
        "finalSolution": {"description": "An append-only replicated log.", "confidence": 70,
                          "synthesizedBy": "judge-main"}
    });
    std::fs::write(path, serde_json::to_vec(&debate).unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_runs_on_judge_workers_under_the_operators_allow_list() {
    let cluster = Cluster::start_with_roles(json!({
        "providers": {"openai-compatible": {"allowedModels": ["eval-a", "eval-b"]}}
    }))
    .await;
    cluster.fake.set_responder(|req| match req.model.as_str() {
        "eval-a" => rubric(6, 6).to_string(),
        _ => rubric(8, 8).to_string(),
    });
    let _coordinator = cluster.coordinator();
    let mut worker = cluster.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_debate(&d.join("debate.json"));
    // No baseUrl: in cluster mode the CLI holds no endpoint; the workers' config does.
    let cfg = json!({"agents": [
        {"id": "e1", "name": "E1", "model": "eval-a", "provider": "openai-compatible"},
        {"id": "e2", "name": "E2", "model": "eval-b", "provider": "openai-compatible"},
        {"id": "e3", "name": "E3", "model": "eval-x", "provider": "openai-compatible"}
    ]});
    std::fs::write(d.join("eval.json"), cfg.to_string()).unwrap();
    let url = cluster.nats_url_for("client");
    let out = parley_cli(
        d,
        &[
            "eval",
            "-c",
            "eval.json",
            "-d",
            "debate.json",
            "-o",
            "out.json",
            "--nats-url",
            &url,
        ],
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let result: Value =
        serde_json::from_slice(&std::fs::read(d.join("out.json")).unwrap()).unwrap();
    assert_eq!(result["overall_score"], json!(7.0), "{result}");
    assert_eq!(
        result["evaluation"]["non_functional"]["security"]["average_score"],
        json!(7.0)
    );
    // The model outside the operator's allow-list was refused by the worker, not called.
    let skipped = result["skipped_agents"]["e3"].as_str().unwrap_or_default();
    assert!(skipped.contains("not allowed"), "{result}");
    let requests = cluster.fake.requests();
    assert_eq!(
        requests.len(),
        2,
        "{:?}",
        requests.iter().map(|r| &r.model).collect::<Vec<_>>()
    );
    assert!(requests
        .iter()
        .all(|r| { r.temperature == Some(0.1) && r.prompt_text().contains("8123 merchants") }));
    // The worker asks for the rubric's schema as structured output, as a local eval does.
    for r in &requests {
        assert_eq!(
            r.body
                .pointer("/response_format/json_schema/name")
                .and_then(Value::as_str),
            Some("evaluation_rubric"),
            "{}",
            r.body
        );
        assert_eq!(r.json_schema(), Some(&parley_protocol::rubric_schema()));
        // An evaluation names no completion limit; the operator's cap goes out anyway
        // (the workers' default `max_tokens`).
        assert_eq!(
            r.body["max_tokens"],
            json!(parley_protocol::limits::DEFAULT_MAX_TOKENS),
            "{}",
            r.body
        );
    }

    // Raw requests: an endpoint in the request is refused naming the field; the worker
    // goes on serving.
    let bad = json!({"evaluators": [{"id": "e1", "model": "eval-a", "timeoutMs": 1000,
        "system": "s", "user": "u", "baseUrl": "http://attacker"}]});
    let reply = cluster
        .request(EVALS_SUBMIT, serde_json::to_vec(&bad).unwrap())
        .await;
    assert_eq!(reply["error"]["code"], "invalid_request", "{reply}");
    assert!(reply["error"]["message"]
        .as_str()
        .unwrap()
        .contains("evaluators[0].baseUrl"));
    let garbage = cluster.request(EVALS_SUBMIT, b"{not json".to_vec()).await;
    assert_eq!(garbage["error"]["code"], "invalid_json");
    let good = json!({"evaluators": [{"id": "e1", "model": "eval-a", "provider":
        "openai-compatible", "timeoutMs": 10000, "system": "grade", "user": "the design"}]});
    let reply = cluster
        .request(EVALS_SUBMIT, serde_json::to_vec(&good).unwrap())
        .await;
    let text = reply["results"][0]["text"].as_str().expect("a reply text");
    assert!(text.contains("overall_summary"), "{reply}");
    assert!(worker.is_running());
}
