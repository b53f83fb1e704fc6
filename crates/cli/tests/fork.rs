//! `parley fork` and `parley diff` end to end, embedded: a 3-round debate run against the
//! fake LLM, forked at round 2 with another judge and a guide note; the fake LLM counts
//! exactly the calls after round 2; the parent's file is untouched; `retry` continues a
//! fork that failed; `diff` compares the two (text and --json).

use std::path::Path;
use std::process::{Output, Stdio};

use parley_testkit::{parley_command, FakeLlm, Fault, Match};
use parley_tests::{read_json, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

async fn parley(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = parley_command(PARLEY, dir, args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.output().await.expect("run parley")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The debate id of the last `Saved debate to ./debates/<id>.json` line.
fn saved_id(err: &str) -> String {
    err.lines()
        .filter_map(|l| l.strip_prefix("Saved debate to ./debates/"))
        .filter_map(|rest| rest.strip_suffix(".json"))
        .next_back()
        .unwrap_or_else(|| panic!("no 'Saved debate' line in:\n{err}"))
        .to_string()
}

fn write_config(dir: &Path, base_url: &str) {
    let cfg = json!({
        "baseUrl": base_url,
        "agents": [
            {"id": "agent-architect", "name": "Architect", "role": "architect", "model": "model-arch", "temperature": 0.1},
            {"id": "agent-security", "name": "Security", "role": "security", "model": "model-sec", "temperature": 0.2},
            {"id": "agent-kiss", "name": "Kiss", "role": "kiss", "model": "model-kiss", "temperature": 0.3}
        ],
        "judge": {"id": "judge-main", "name": "Judge", "role": "generalist", "model": "model-judge", "temperature": 0.4},
        "debate": {"rounds": 3, "terminationCondition": {"type": "fixed"},
                   "retry": {"default": {"attempts": 2, "initialBackoffMs": 100, "maxBackoffMs": 200}}}
    });
    write_json(dir.join("debate-config.json"), &cfg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_at_round_2_makes_only_the_later_calls_and_diff_compares_the_two() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, &fake.base_url());
    let out = parley(d, &["run", "Design a forked cache"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let parent = saved_id(&stderr(&out));
    // 3 rounds of 3 agents: 3 proposals + 3 × (6 critiques + 3 refinements) + 1 synthesis.
    assert_eq!(fake.request_count(), 31);
    let parent_path = d.join("debates").join(format!("{parent}.json"));
    let parent_bytes = std::fs::read(&parent_path).unwrap();

    // The fork's judge fails (401, not retried) first: the fork fails, `retry` finishes it.
    fake.add_fault(Fault::Status {
        status: 401,
        body: r#"{"error":{"message":"bad key for model-judge-2"}}"#.into(),
        matching: Match::Model("model-judge-2".into()),
        times: Some(1),
    });
    write_json(
        d.join("changes.json"),
        &json!({"judge": {"model": "model-judge-2"}, "guide": "Prefer boring technology"}),
    );
    let before = fake.request_count();
    let out = parley(d, &["fork", &parent, "--at", "2", "-c", "changes.json"]).await;
    assert!(!out.status.success(), "the judge's 401 fails the fork");
    let err = stderr(&out);
    assert!(
        err.contains(&format!("forked {parent} at round 2 as ")),
        "{err}"
    );
    let child = err
        .lines()
        .filter(|l| l.starts_with("forked "))
        .find_map(|l| l.rsplit_once(" as ").map(|(_, id)| id.trim().to_string()))
        .unwrap();
    let out = parley(d, &["retry", &child]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let made: Vec<_> = fake.requests()[before..].to_vec();
    // Round 3 only: 6 critiques + 3 refinements, the synthesis (failed once, then done).
    let ok: Vec<_> = made.iter().filter(|r| r.status == 200).collect();
    assert_eq!(ok.len(), 10, "only the calls after round 2");
    assert_eq!(made.len(), 11);
    assert!(made
        .iter()
        .all(|r| r.prompt_text().contains("Prefer boring technology")));
    assert!(made
        .iter()
        .filter(|r| r.model.starts_with("model-judge"))
        .all(|r| r.model == "model-judge-2"));
    assert_eq!(
        std::fs::read(&parent_path).unwrap(),
        parent_bytes,
        "the parent is untouched"
    );
    let state = read_json(d.join("debates").join(format!("{child}.json")));
    assert_eq!(state["status"], "completed");
    assert_eq!(state["forkedFrom"], json!({"debateId": parent, "round": 2}));
    assert_eq!(state["rounds"].as_array().unwrap().len(), 3);
    assert_eq!(
        state["steering"]["notes"][0]["note"],
        "Prefer boring technology"
    );

    // A fork of a round that does not exist, or with an unknown agent: refused, exit 2.
    let out = parley(d, &["fork", &parent, "--at", "4"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("round 4 does not exist"));
    write_json(
        d.join("bad.json"),
        &json!({"agents": {"nobody": {"model": "x"}}}),
    );
    let out = parley(d, &["fork", &parent, "--at", "1", "-c", "bad.json"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nobody"));

    // diff: text and JSON.
    let out = parley(d, &["diff", &parent, &child, "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["a"]["id"], parent.as_str());
    assert_eq!(v["b"]["id"], child.as_str());
    assert_eq!(v["b"]["forkedFrom"]["debateId"], parent.as_str());
    for k in [
        "requirements",
        "decisions",
        "tradeoffs",
        "openDisagreements",
    ] {
        for part in ["common", "onlyA", "onlyB"] {
            assert!(v[k][part].is_array(), "{k}.{part}: {v}");
        }
    }
    for k in ["calls", "tokens", "wallMs"] {
        assert!(v["a"][k].is_number() && v["b"][k].is_number(), "{k}: {v}");
    }
    let out = parley(d, &["diff", &parent, &child]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for part in [
        "calls",
        "tokens",
        "wall (ms)",
        "## Tradeoffs",
        "## Decisions",
    ] {
        assert!(text.contains(part), "{part} missing:\n{text}");
    }
}
