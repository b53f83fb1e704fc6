//! Embedded resilience end to end: `parley run` as a subprocess against the fake LLM,
//! interrupted with SIGINT (Ctrl-C) and continued with `parley resume`, or failed and
//! continued with `parley retry`; the fake LLM counts exactly the calls that had not
//! completed.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use parley_testkit::{
    parley_command, send_signal, wait_until_async, FakeLlm, Fault, Match, RecordedRequest,
};
use parley_tests::{read_json, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");
/// The prompt of every critique (agent-worker's `roles::critique`).
const CRITIQUE: &str = "Critique it from the perspective";

fn command(dir: &Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = parley_command(PARLEY, dir, args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

async fn parley(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().await.expect("run parley")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// 3 agents (models model-arch/-sec/-kiss), 2 fixed rounds (22 calls), fast retries.
fn write_config(dir: &Path, base_url: &str) {
    let cfg = json!({
        "baseUrl": base_url,
        "agents": [
            {"id": "agent-architect", "name": "Architect", "role": "architect", "model": "model-arch", "temperature": 0.1},
            {"id": "agent-security", "name": "Security", "role": "security", "model": "model-sec", "temperature": 0.2},
            {"id": "agent-kiss", "name": "Kiss", "role": "kiss", "model": "model-kiss", "temperature": 0.3}
        ],
        "judge": {"id": "judge-main", "name": "Judge", "role": "generalist", "model": "model-judge", "temperature": 0.4},
        "debate": {"rounds": 2, "terminationCondition": {"type": "fixed"},
                   "retry": {"default": {"attempts": 2, "initialBackoffMs": 100, "maxBackoffMs": 200}}}
    });
    write_json(dir.join("debate-config.json"), &cfg);
}

/// The debate id of the `Saved debate to ./debates/<id>.json` line.
fn saved_id(err: &str) -> String {
    err.lines()
        .find_map(|l| l.strip_prefix("Saved debate to ./debates/"))
        .and_then(|rest| rest.strip_suffix(".json"))
        .unwrap_or_else(|| panic!("no 'Saved debate' line in:\n{err}"))
        .to_string()
}

fn checkpoint(dir: &Path, id: &str) -> Value {
    let path = dir.join("debates").join(format!("{id}.json"));
    read_json(path)
}

/// LLM calls whose results a saved state holds (carried-over proposals made none).
fn calls_in(state: &Value) -> usize {
    let contributions: usize = state["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["contributions"].as_array().unwrap())
        .filter(|c| c["metadata"]["carriedOver"] != true)
        .count();
    contributions + usize::from(state["finalSolution"].is_object())
}

/// (model, prompt) of the requests answered 200.
fn answered(reqs: &[RecordedRequest]) -> BTreeSet<(String, String)> {
    reqs.iter()
        .filter(|r| r.status == 200)
        .map(|r| (r.model.clone(), r.prompt_text()))
        .collect()
}

/// `parley run PROBLEM` in a new directory against a fake LLM on which proposals answer and
/// every critique hangs; returns once the 3 proposals are answered and the 6 critiques of
/// round 1 sent (calls in flight for an interrupt): (the fake, the directory, the run).
async fn run_until_the_critiques_hang(
    problem: &str,
) -> (FakeLlm, tempfile::TempDir, tokio::process::Child) {
    let fake = FakeLlm::start().await.unwrap();
    fake.add_fault(Fault::Hang {
        matching: Match::PromptContains(CRITIQUE.into()),
        times: None,
    });
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let child = command(dir.path(), &["run", problem]).spawn().unwrap();
    assert!(
        wait_until_async(Duration::from_secs(60), || fake.request_count() >= 9).await,
        "the debate never reached its critiques"
    );
    (fake, dir, child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_saves_the_debate_and_resume_makes_only_the_missing_calls() {
    let (fake, dir, child) = run_until_the_critiques_hang("Design a session store").await;
    let pid = child.id().unwrap();
    send_signal(pid, "INT");
    let signalled = std::time::Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("parley run did not exit after Ctrl-C")
        .unwrap();
    // (Informational: the calls in flight hang, so it waits out its 3 s grace period.)
    eprintln!(
        "parley run exited {:?} {} ms after Ctrl-C",
        out.status.code(),
        signalled.elapsed().as_millis()
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let id = saved_id(&err);
    assert!(
        err.contains(&format!("parley resume {id}")) && err.contains("6 task(s) unfinished"),
        "{err}"
    );
    let saved = checkpoint(dir.path(), &id);
    assert_eq!(saved["status"], "running");
    assert_eq!(calls_in(&saved), 3, "{saved}");
    assert_eq!(saved["spec"]["agents"].as_array().unwrap().len(), 3);
    let first = fake.requests();
    assert_eq!(first.len(), 9, "nothing was dispatched after the interrupt");
    assert_eq!(answered(&first).len(), 3);

    // A failed debate is continued by `retry`, an interrupted one by `resume`.
    let out = parley(dir.path(), &["retry", &id]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("parley resume {id}")),
        "{}",
        stderr(&out)
    );

    fake.clear_faults();
    let out = parley(dir.path(), &["resume", &id, "--output", "state.json"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Fake synthesized solution"));
    let done: Value = read_json(dir.path().join("state.json"));
    assert_eq!(done["status"], "completed");
    assert_eq!(done["id"], id.as_str());
    assert_eq!(calls_in(&done), 22);
    assert_eq!(checkpoint(dir.path(), &id)["status"], "completed");
    // Exactly the 19 calls that had not completed, each once; none of the 3 answered ones.
    let resumed = fake.requests()[first.len()..].to_vec();
    assert_eq!(resumed.len(), 19, "{err}");
    let again = answered(&resumed);
    assert_eq!(again.len(), 19, "a call ran twice");
    assert!(
        again.is_disjoint(&answered(&first)),
        "a completed call ran again"
    );

    let out = parley(dir.path(), &["resume", &id]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("already completed"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_ctrl_c_exits_at_once_with_the_last_checkpoint_on_disk() {
    let (_fake, dir, child) = run_until_the_critiques_hang("Design a job queue").await;
    let pid = child.id().unwrap();
    send_signal(pid, "INT");
    // The first signal is being handled (the grace period runs): a second one ends it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    send_signal(pid, "INT");
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("parley run did not exit")
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("second signal, exiting at once"), "{err}");
    // The checkpoint of the last transition is there and resumable.
    let saved: Vec<_> = std::fs::read_dir(dir.path().join("debates"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .collect();
    assert_eq!(saved.len(), 1);
    let state: Value = read_json(saved[0].path());
    assert_eq!(state["status"], "running");
    assert_eq!(calls_in(&state), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_debate_is_retried_from_its_checkpoint_without_repeating_calls() {
    let fake = FakeLlm::start().await.unwrap();
    fake.add_fault(Fault::Status {
        status: 500,
        body: r#"{"error":{"message":"model-sec is on fire"}}"#.into(),
        matching: Match::Model("model-sec".into()),
        times: None,
    });
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    // A failing critique fails the node too (by default it would be dropped, and a target
    // that refined without it keeps the drop: see run.rs's dropped-critique test).
    let path = dir.path().join("debate-config.json");
    let mut cfg: Value = read_json(&path);
    cfg["debate"]["onAgentFailure"] = json!("fail");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let out = parley(dir.path(), &["run", "Design a cache"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let id = saved_id(&err);
    assert!(err.contains(&format!("parley retry {id}")), "{err}");
    let failed = checkpoint(dir.path(), &id);
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["agentId"], "agent-security");
    let completed_before = calls_in(&failed);
    let first = fake.requests();

    let out = parley(dir.path(), &["resume", &id]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(&format!("parley retry {id}")),
        "{}",
        stderr(&out)
    );

    fake.clear_faults();
    let out = parley(dir.path(), &["retry", &id]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(&format!("Retrying debate {id}")), "{err}");
    let done = checkpoint(dir.path(), &id);
    assert_eq!(done["status"], "completed");
    assert_eq!(calls_in(&done), 22);
    // Exactly the calls that had not completed, each once, none of the completed ones.
    let retried = fake.requests()[first.len()..].to_vec();
    assert_eq!(retried.len(), 22 - completed_before, "{err}");
    let again = answered(&retried);
    assert_eq!(again.len(), retried.len(), "a call ran twice");
    assert!(
        again.is_disjoint(&answered(&first)),
        "a completed call ran again"
    );
}
