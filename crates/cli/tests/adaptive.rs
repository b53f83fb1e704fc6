//! Issue 25's modes end to end in the embedded runner: `parley run` as a subprocess against
//! the fake LLM scripted per task kind (`parley_testkit::fake_llm::script`). Call counts are
//! read from the fake's recorded requests by kind.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use parley_testkit::fake_llm::script::{kind_of, DebateScript, VoteRule};
use parley_testkit::{run_parley, FakeLlm};
use parley_tests::{read_json, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// Requests the fake answered, per task kind.
fn calls_by_kind(fake: &FakeLlm) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for r in fake.requests().iter().filter(|r| r.status == 200) {
        *out.entry(kind_of(&r.prompt_text())).or_default() += 1;
    }
    out
}

fn calls(fake: &FakeLlm, kind: &str) -> usize {
    calls_by_kind(fake).get(kind).copied().unwrap_or(0)
}

/// The test spec's config (three agents on their own models, a judge on its own) with
/// `debate` merged in, and `extra_agents` more agents.
fn config(base_url: &str, debate: Value, extra_agents: usize) -> Value {
    let mut cfg = parley_tests::spec_config(Some(base_url));
    for (k, v) in debate.as_object().unwrap() {
        cfg["debate"][k] = v.clone();
    }
    for i in 0..extra_agents {
        cfg["agents"].as_array_mut().unwrap().push(json!({
            "id": format!("agent-extra{i}"), "name": format!("Extra {i}"), "role": "testing",
            "model": format!("model-extra{i}"), "temperature": 0.2
        }));
    }
    cfg
}

/// `parley run "Design a cache" --output state.json --report r.md` in `dir` with the config
/// `cfg` and `script`; exits 0: (stdout, stderr, state, report).
async fn run(
    dir: &Path,
    fake: &FakeLlm,
    cfg: &Value,
    script: DebateScript,
) -> (String, String, Value, String) {
    fake.set_responder(move |r| script.reply(r));
    write_json(dir.join("debate-config.json"), cfg);
    let out: Output = run_parley(
        PARLEY,
        dir,
        &[
            "run",
            "Design a cache",
            "--output",
            "state.json",
            "--report",
            "r.md",
        ],
        &[],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    let state = read_json(dir.join("state.json"));
    let report = std::fs::read_to_string(dir.join("r.md")).unwrap();
    (stdout, stderr, state, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_agents_in_a_ring_make_four_critiques_a_round_not_twelve() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &fake.base_url(),
        json!({"rounds": 2, "critique": {"topology": "ring"}}),
        1,
    );
    let (_, err, state, _) = run(dir.path(), &fake, &cfg, DebateScript::never_agreeing()).await;
    assert!(err.contains("critique topology \"ring\""), "{err}");
    assert_eq!(state["status"], "completed");
    let by_kind = calls_by_kind(&fake);
    assert_eq!(by_kind.get("critique"), Some(&8), "{by_kind:?}");
    assert_eq!(by_kind.get("propose"), Some(&4), "{by_kind:?}");
    assert_eq!(by_kind.get("refine"), Some(&8), "{by_kind:?}");
    assert_eq!(by_kind.get("synthesize"), Some(&1), "{by_kind:?}");
    for r in state["rounds"].as_array().unwrap() {
        let crits = r["contributions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] == "critique")
            .count();
        assert_eq!(crits, 4);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_of_done_stops_early_and_every_open_issue_reaches_the_solution() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &fake.base_url(),
        json!({"terminationCondition": {"type": "verdict", "threshold": 85, "maxRounds": 4}}),
        0,
    );
    let script = DebateScript {
        agree_from_verdict: Some(2),
        open_issues: vec!["eviction policy".into(), "cache warm-up".into()],
        // The judge's synthesis lists only the first: the coordinator adds the second.
        issues_in_synthesis: 1,
        ..DebateScript::default()
    };
    let (out, err, state, report) = run(dir.path(), &fake, &cfg, script).await;
    // Verdict 1: continue; verdict 2: done at 90 ≥ 85 — two rounds of at most four.
    assert_eq!(state["rounds"].as_array().unwrap().len(), 2, "{err}");
    assert_eq!(calls(&fake, "verdict"), 2);
    assert_eq!(calls(&fake, "refine"), 6);
    assert_eq!(state["rounds"][1]["verdict"]["verdict"], "done");
    let unresolved = &state["finalSolution"]["unresolvedDisagreements"];
    assert_eq!(unresolved, &json!(["eviction policy", "cache warm-up"]));
    assert!(
        out.contains("Unresolved disagreements:\n- eviction policy\n- cache warm-up"),
        "{out}"
    );
    assert!(
        report.contains("#### Judge verdict") && report.contains("cache warm-up"),
        "{report}"
    );
    assert!(err.contains("left out 1 open issue"), "{err}");
    // The synthesis prompt named both issues.
    let synth = fake
        .requests()
        .into_iter()
        .find(|r| kind_of(&r.prompt_text()) == "synthesize")
        .unwrap();
    assert!(synth.prompt_text().contains("- cache warm-up"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_verdict_counts_as_continue_until_max_rounds() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &fake.base_url(),
        json!({"terminationCondition": {"type": "verdict", "maxRounds": 2}}),
        0,
    );
    let script = DebateScript {
        agree_from_verdict: Some(1),
        garbage_verdicts: true,
        ..DebateScript::default()
    };
    let (_, err, state, _) = run(dir.path(), &fake, &cfg, script).await;
    assert_eq!(state["status"], "completed");
    assert_eq!(state["rounds"].as_array().unwrap().len(), 2);
    assert_eq!(state["rounds"][0]["verdict"]["valid"], false);
    assert!(err.contains("counted as continue"), "{err}");
    // The judge was asked twice (the strict JSON re-ask), once per round with a verdict.
    assert_eq!(calls(&fake, "verdict"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_proposals_that_agree_are_synthesized_at_once() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &fake.base_url(),
        json!({"rounds": 3, "mode": "adaptive"}),
        0,
    );
    let (out, err, state, report) = run(dir.path(), &fake, &cfg, DebateScript::agreeing()).await;
    assert!(err.contains("mode \"adaptive\""), "{err}");
    let by_kind = calls_by_kind(&fake);
    assert_eq!(
        by_kind,
        BTreeMap::from([("propose", 3), ("verdict", 1), ("synthesize", 1)]),
    );
    assert_eq!(state["adaptive"]["path"], "short");
    assert!(state["adaptive"]["reason"].as_str().unwrap().contains("90"));
    assert!(out.contains("Adaptive path: short"), "{out}");
    assert!(
        report.contains("Adaptive screen of the proposals"),
        "{report}"
    );

    // Never agreeing: the full debate, three rounds, after the screen.
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &fake.base_url(),
        json!({"rounds": 3, "mode": "adaptive"}),
        0,
    );
    let (_, _, state, _) = run(dir.path(), &fake, &cfg, DebateScript::never_agreeing()).await;
    assert_eq!(state["adaptive"]["path"], "full");
    assert_eq!(state["rounds"].as_array().unwrap().len(), 3);
    assert_eq!(calls(&fake, "verdict"), 1);
    assert_eq!(calls(&fake, "critique"), 18);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voting_picks_the_plurality_winner_and_a_tie_goes_to_the_judge() {
    // Everyone votes for kiss (kiss itself for the first other candidate): kiss wins 2–1.
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &fake.base_url(),
        json!({"rounds": 1, "synthesisMethod": "voting"}),
        0,
    );
    let script = DebateScript {
        votes: VoteRule::For("agent-kiss".into()),
        ..DebateScript::default()
    };
    let (out, err, state, report) = run(dir.path(), &fake, &cfg, script).await;
    assert!(err.contains("synthesisMethod \"voting\""), "{err}");
    assert_eq!(calls(&fake, "vote"), 3);
    let v = &state["voting"];
    assert_eq!(v["winner"], "agent-kiss", "{v}");
    assert_eq!(v["tie"], false);
    assert_eq!(v["counts"]["agent-kiss"], 2);
    assert_eq!(state["finalSolution"]["basedOn"], "agent-kiss");
    assert!(out.contains("Vote: agent-kiss won"), "{out}");
    assert!(
        report.contains("### Votes") && report.contains("agent-architect → agent-kiss"),
        "{report}"
    );
    let synth = fake
        .requests()
        .into_iter()
        .find(|r| kind_of(&r.prompt_text()) == "synthesize")
        .unwrap();
    assert!(synth.prompt_text().contains("the winner is agent-kiss"));

    // Each votes for the next agent: a three-way tie; the judge picks the first named.
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (out, _, state, _) = run(
        dir.path(),
        &fake,
        &cfg_with(&fake, &cfg),
        DebateScript::default(),
    )
    .await;
    let v = &state["voting"];
    assert_eq!(v["tie"], true, "{v}");
    assert_eq!(v["leaders"].as_array().unwrap().len(), 3);
    assert!(v.get("winner").is_none());
    assert_eq!(state["finalSolution"]["basedOn"], "agent-architect");
    assert!(out.contains("Vote: tie between"), "{out}");

    // Invalid votes (for itself) are recorded, not counted, with a warning.
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = DebateScript {
        votes: VoteRule::Itself,
        ..DebateScript::default()
    };
    let (_, err, state, _) = run(dir.path(), &fake, &cfg_with(&fake, &cfg), script).await;
    let votes = state["voting"]["votes"].as_array().unwrap();
    assert!(votes.iter().all(|b| b["valid"] == false), "{votes:?}");
    assert!(err.contains("invalid vote (a vote for itself)"), "{err}");
    assert_eq!(state["status"], "completed");
}

/// `cfg` pointed at `fake`.
fn cfg_with(fake: &FakeLlm, cfg: &Value) -> Value {
    let mut c = cfg.clone();
    c["baseUrl"] = json!(fake.base_url());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_values_are_config_errors_that_name_the_key_and_the_allowed_values() {
    let dir = tempfile::tempdir().unwrap();
    for (debate, key, allowed) in [
        (
            json!({"synthesisMethod": "consensus"}),
            "debate.synthesisMethod",
            "judge, merge, voting",
        ),
        (json!({"critique": {"topology": "star"}}), "star", "ring"),
        (
            json!({"critique": {"topology": "ring", "k": 9}}),
            "debate.critique.k",
            "1..=2",
        ),
        (json!({"mode": "lazy"}), "lazy", "adaptive"),
    ] {
        let cfg = config("http://127.0.0.1:9/v1", debate, 0);
        write_json(dir.path().join("debate-config.json"), &cfg);
        let out = run_parley(PARLEY, dir.path(), &["run", "Design a cache"], &[]).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{err}");
        assert!(err.contains(key) && err.contains(allowed), "{key}: {err}");
    }
}
