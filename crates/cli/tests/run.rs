//! End-to-end tests of `parley run` as a subprocess against the fake OpenAI-compatible server.

use std::path::{Path, PathBuf};
use std::process::Output;

use parley_testkit::{run_parley, FakeLlm, Fault, Match};
use parley_tests::{count, read_json, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// Runs `parley` in `dir` with no API keys in the environment.
async fn parley(dir: &Path, args: &[&str]) -> Output {
    parley_with_env(dir, args, &[]).await
}

/// [`parley`] with extra environment variables.
async fn parley_with_env(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    run_parley(PARLEY, dir, args, env).await
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Three agents with distinct models and temperatures, 2 rounds, fixed termination (the
/// distributed tests' spec, as a config file).
fn write_config(dir: &Path, base_url: &str) -> PathBuf {
    let path = dir.join("debate-config.json");
    write_json(&path, &parley_tests::spec_config(Some(base_url)));
    path
}

/// `parley run "Design a cache" --rounds 1 --output state.json --report r.md` with
/// `extra` arguments; it exits 0: (its stderr, the state).
async fn run_one_round(dir: &Path, extra: &[&str]) -> (String, Value) {
    let mut args = vec![
        "run",
        "Design a cache",
        "--rounds",
        "1",
        "--output",
        "state.json",
        "--report",
        "r.md",
    ];
    args.extend_from_slice(extra);
    let out = parley(dir, &args).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    (err, read_json(dir.join("state.json")))
}

fn saved_path(err: &str) -> String {
    let line = err
        .lines()
        .find(|l| l.starts_with("Saved debate to ./debates/"))
        .unwrap_or_else(|| panic!("no 'Saved debate' line in:\n{err}"));
    line.trim_start_matches("Saved debate to ").to_string()
}

/// A debate on an OpenAI-compatible provider says nothing about the local demo model: the
/// confidence is the judge's, and no notice follows the solution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_demo_model_notice_with_an_openai_compatible_provider() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let out = parley(
        dir.path(),
        &["run", "Design a rate limiter", "--rounds", "1"],
    )
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");
    let text = stdout(&out);
    assert!(
        text.contains("Confidence: 85/100 (synthesized by judge-main)"),
        "stdout:\n{text}"
    );
    for unwanted in ["demo model", "Note:", "OPENAI_BASE_URL", "self-reported"] {
        assert!(!text.contains(unwanted), "{unwanted:?} in:\n{text}");
        assert!(!err.contains(unwanted), "{unwanted:?} in:\n{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_two_rounds_against_fake_llm() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let out = parley(
        dir.path(),
        &["run", "Design a rate limiter for a public API"],
    )
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");

    // The solution is on stdout; progress and the saved path on stderr.
    let text = stdout(&out);
    assert!(
        text.contains("Fake synthesized solution"),
        "stdout:\n{text}"
    );
    assert!(text.contains("Confidence: 85/100"), "stdout:\n{text}");
    assert!(err.contains("[round 1/2]"), "stderr:\n{err}");
    let saved = saved_path(&err);
    let state: Value = read_json(dir.path().join(&saved));

    let id = state["id"].as_str().unwrap();
    assert!(parley_protocol::is_valid_debate_id(id), "{id}");
    assert_eq!(state["status"], "completed");
    assert_eq!(state["currentRound"], 2);
    let rounds = state["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2);
    assert_eq!(
        (
            count(&rounds[0], "proposal"),
            count(&rounds[0], "critique"),
            count(&rounds[0], "refinement")
        ),
        (3, 6, 3)
    );
    assert_eq!(
        (
            count(&rounds[1], "proposal"),
            count(&rounds[1], "critique"),
            count(&rounds[1], "refinement")
        ),
        (3, 6, 3)
    );
    for p in rounds[1]["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "proposal")
    {
        assert_eq!(p["metadata"]["tokensUsed"], 0);
        assert_eq!(p["metadata"]["latencyMs"], 0);
        let refined = rounds[0]["contributions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "refinement" && c["agentId"] == p["agentId"])
            .unwrap();
        assert_eq!(p["content"], refined["content"]);
    }
    for c in rounds[0]["contributions"].as_array().unwrap() {
        assert!(c["metadata"]["tokensUsed"].as_u64().unwrap() > 0);
        assert!(
            c["content"].as_str().unwrap().contains("Proposal from"),
            "{c}"
        );
    }
    let sol = &state["finalSolution"];
    assert!(sol["description"]
        .as_str()
        .unwrap()
        .contains("Fake synthesized solution"));
    assert_eq!(sol["confidence"], 85.0);
    assert_eq!(sol["synthesizedBy"], "judge-main");

    // What crossed the wire: 3 + 6 + 3 + 6 + 3 + 1 = 22 calls, each with its agent's model
    // and temperature, as Chat Completions to the configured base URL, with no API key.
    let reqs = fake.requests();
    assert_eq!(
        reqs.len(),
        22,
        "requests: {:?}",
        reqs.iter().map(|r| &r.model).collect::<Vec<_>>()
    );
    let expected = [
        ("model-arch", 0.1),
        ("model-sec", 0.2),
        ("model-kiss", 0.3),
        ("model-judge", 0.4),
    ];
    for r in &reqs {
        assert_eq!(r.path, "/v1/chat/completions");
        let (_, t) = expected
            .iter()
            .find(|(m, _)| *m == r.model)
            .unwrap_or_else(|| panic!("unexpected model {}", r.model));
        assert_eq!(r.temperature, Some(*t), "{}", r.model);
        assert!(
            r.header("authorization").is_none(),
            "no key should be sent to a compatible server"
        );
        let msgs = r.body["messages"].as_array().unwrap();
        assert_eq!(msgs[0]["role"], "system");
        assert!(r.prompt_text().contains("Design a rate limiter"));
    }
    let per_model = |m: &str| reqs.iter().filter(|r| r.model == m).count();
    // Each agent: 1 proposal + 2 critiques + 1 refinement, then 2 critiques + 1 refinement.
    assert_eq!(per_model("model-arch"), 7);
    assert_eq!(per_model("model-sec"), 7);
    assert_eq!(per_model("model-kiss"), 7);
    assert_eq!(per_model("model-judge"), 1);
}

/// Embedded, the user is the operator: an agent's own `baseUrl` in the local config is
/// where that agent's calls go (the spec never carries it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_keeps_per_agent_endpoints_from_the_local_config() {
    let fake = FakeLlm::start().await.unwrap();
    let kiss_server = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &fake.base_url());
    let mut cfg: Value = read_json(&path);
    cfg["agents"][2]["baseUrl"] = json!(kiss_server.base_url());
    std::fs::write(&path, cfg.to_string()).unwrap();
    let out = parley(
        dir.path(),
        &["run", "Design a rate limiter", "--rounds", "1"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let kiss = kiss_server.requests();
    assert_eq!(kiss.len(), 4, "1 proposal, 2 critiques, 1 refinement");
    assert!(kiss.iter().all(|r| r.model == "model-kiss"));
    assert!(fake.requests().iter().all(|r| r.model != "model-kiss"));
    assert_eq!(fake.request_count(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_and_report_files() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let (err, state) = run_one_round(dir.path(), &["--verbose"]).await;
    assert_eq!(state["status"], "completed");
    assert_eq!(state["rounds"].as_array().unwrap().len(), 1);
    assert_eq!(fake.request_count(), 3 + 6 + 3 + 1);
    let md = std::fs::read_to_string(dir.path().join("r.md")).unwrap();
    for needle in [
        "## Problem Description",
        "Design a cache",
        "## Agents",
        "agent-security",
        "## Judge",
        "## Rounds",
        "### Round 1",
        "#### critique by agent-kiss (kiss) of agent-architect",
        "tokens",
        "### Final Synthesis",
        "Fake synthesized solution",
        "## Totals",
        "LLM calls: 13",
    ] {
        assert!(md.contains(needle), "report lacks {needle:?}:\n{md}");
    }
    // --verbose: per-round summary and prompt sources.
    assert!(err.contains("Round 1: 12 contributions"), "{err}");
    assert!(
        err.contains("agent-architect [architect]: built-in"),
        "{err}"
    );

    // Any other extension: the solution text.
    let out = parley(
        dir.path(),
        &[
            "run",
            "Design a cache",
            "--rounds",
            "1",
            "--agents",
            "architect,kiss",
            "--output",
            "solution.txt",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let txt = std::fs::read_to_string(dir.path().join("solution.txt")).unwrap();
    assert!(
        txt.contains("Fake synthesized solution") && !txt.trim_start().starts_with('{'),
        "{txt}"
    );
    assert_eq!(txt, stdout(&out));
    // --agents architect,kiss: 2 proposals + 2 critiques + 2 refinements + synthesis.
    assert_eq!(fake.request_count(), 13 + 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_exit_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("empty.txt"), "\n").unwrap();
    std::fs::write(dir.path().join("p.txt"), "Design a queue").unwrap();
    std::fs::create_dir(dir.path().join("folder")).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["run"], "no problem given"),
        (&["run", "x", "--problem-file", "p.txt"], "not both"),
        (
            &["run", "--problem-file", "missing.txt"],
            "missing.txt does not exist",
        ),
        (&["run", "--problem-file", "folder"], "is a directory"),
        (&["run", "--problem-file", "empty.txt"], "is empty"),
        (&["run", "x", "--rounds", "0"], "--rounds"),
        (
            &["run", "x", "--agents", "astronaut"],
            "unknown role \"astronaut\"",
        ),
        (&["run", "x", "--bogus"], "--bogus"),
    ];
    for (args, needle) in cases {
        let out = parley(dir.path(), args).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
        assert!(
            !dir.path().join("debates").exists(),
            "{args:?} must not start a debate"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_errors_exit_4() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A typo'd key is named.
    std::fs::write(
        d.join("typo.json"),
        r#"{"debate": {"rounds": 1, "terminationCondtion": {"type": "fixed"}}}"#,
    )
    .unwrap();
    let out = parley(d, &["run", "x", "--config", "typo.json"]).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("terminationCondtion"),
        "{}",
        stderr(&out)
    );
    // An explicit config path that does not exist.
    let out = parley(d, &["run", "x", "--config", "nope.json"]).await;
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("nope.json not found"),
        "{}",
        stderr(&out)
    );
    // A remote provider without its key names the variable.
    std::fs::write(d.join("openai.json"), r#"{"agents": [{"id":"a","name":"A","role":"architect","model":"gpt-4o","provider":"openai"}]}"#).unwrap();
    let out = parley(d, &["run", "x", "--config", "openai.json"]).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("OPENAI_API_KEY"), "{}", stderr(&out));
    // No key, no config: the local model is the default, and its file is missing here.
    let out = parley(d, &["run", "x"]).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("config file debate-config.json not found"),
        "{err}"
    );
    assert!(err.contains("scripts/fetch-model.sh"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_failures_exit_3_and_name_the_provider() {
    let fake = FakeLlm::start().await.unwrap();
    fake.add_fault(Fault::Status {
        status: 401,
        body: r#"{"error":{"message":"Incorrect API key provided"}}"#.into(),
        matching: Match::Model("model-sec".into()),
        times: None,
    });
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let out = parley(dir.path(), &["run", "Design a cache", "--rounds", "1"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("openai-compatible") && err.contains("authentication failed (HTTP 401)"),
        "{err}"
    );
    assert!(err.contains("Incorrect API key provided"), "{err}");
    // Auth errors are not retried: the failing proposal was sent exactly once (the agent's
    // critiques of proposals that already existed may have started meanwhile).
    let sec_proposals = fake
        .requests()
        .iter()
        .filter(|r| r.model == "model-sec" && r.prompt_text().contains("Propose a solution"))
        .count();
    assert_eq!(sec_proposals, 1);
    // The failed state is saved with the failing node.
    let saved = saved_path(&err);
    let state: Value = read_json(dir.path().join(saved));
    assert_eq!(state["status"], "failed");
    // Whichever of agent-security's calls got its 401 first failed the debate: its proposal,
    // or (dataflow scheduling) its critique of a proposal that was already there.
    let node = state["error"]["node"].as_str().unwrap_or_default();
    assert!(node == "proposal" || node == "critique", "{node}");
    assert_eq!(state["error"]["agentId"], "agent-security");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_are_retried() {
    let fake = FakeLlm::start().await.unwrap();
    fake.add_fault(Fault::Status {
        status: 503,
        body: "busy".into(),
        matching: Match::Model("model-kiss".into()),
        times: Some(2),
    });
    fake.add_fault(Fault::Malformed {
        matching: Match::Model("model-arch".into()),
        times: Some(1),
    });
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let out = parley(dir.path(), &["run", "Design a cache", "--rounds", "1"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // 13 successful calls plus the 3 failed ones.
    assert_eq!(fake.request_count(), 16);
}

/// An embedded debate is one trace too: `debate` → `node` → `task` → `llm.call`, exported
/// over OTLP when the standard variables are set, with no problem text on any span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_debate_exports_one_trace() {
    let fake = FakeLlm::start().await.unwrap();
    let receiver = parley_testkit::OtlpReceiver::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let problem = "Design a feature store for 5150 models";
    let out = parley_with_env(
        dir.path(),
        &["run", problem],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The exporter flushed on exit.
    let spans = receiver.spans();
    let roots: Vec<_> = spans.iter().filter(|s| s.name == "debate").collect();
    assert_eq!(roots.len(), 1, "{roots:#?}");
    let root = roots[0];
    assert!(root.is_root());
    assert_eq!(root.service_name, "parley");
    assert_eq!(root.attr("debate.status"), Some("completed"));
    let in_trace = |name: &str| -> Vec<_> {
        spans
            .iter()
            .filter(|s| s.name == name && s.trace_id == root.trace_id)
            .collect()
    };
    let nodes = in_trace("node");
    assert_eq!(nodes.len(), 6);
    assert!(nodes.iter().all(|n| n.is_child_of(root)));
    let tasks = in_trace("task");
    assert_eq!(tasks.len(), 22);
    assert!(tasks.iter().all(|t| nodes.iter().any(|n| t.is_child_of(n))));
    let calls = in_trace("llm.call");
    assert_eq!(calls.len(), 22);
    assert!(calls.iter().all(
        |c| tasks.iter().any(|t| c.is_child_of(t)) && c.attr("gen_ai.request.model").is_some()
    ));
    assert!(!receiver.raw_bodies_contain(b"5150 models"));
}

/// `parley report` of a saved debate gives `run --report`'s Markdown (the same bytes with
/// the config it ran with); a judge answering in dialectic's JSON shape
/// (`solutionMarkdown`, `unfulfilledMajorRequirements`, `openQuestions`) is understood, its
/// confidence capped at 40 because a major requirement is unmet, and shown on stdout and in
/// the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_of_a_saved_debate_and_dialectic_judge_shape() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_responder(|req| {
        let prompt = req.prompt_text();
        if prompt.contains("unfulfilledMajorRequirements") {
            json!({
                "solutionMarkdown": "## Design\nA token bucket per API key in Redis.",
                "tradeoffs": ["Redis is a dependency"],
                "recommendations": ["Return Retry-After on 429"],
                "unfulfilledMajorRequirements": ["Per-region limits"],
                "openQuestions": ["What is the peak request rate?"],
                "confidence": 90
            })
            .to_string()
        } else {
            "A contribution.".to_string()
        }
    });
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &fake.base_url());
    let out = parley(
        dir.path(),
        &[
            "debate",
            "Design a rate limiter",
            "-r",
            "1",
            "-a",
            "architect,kiss",
            "-o",
            "state.json",
            "--report",
            "run.md",
        ],
    )
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("not valid JSON"), "{err}");
    let text = stdout(&out);
    for needle in [
        "A token bucket per API key",
        "Unfulfilled major requirements:\n- Per-region limits",
        "Open questions:\n- What is the peak request rate?",
        "Confidence: 40/100",
    ] {
        assert!(text.contains(needle), "stdout lacks {needle:?}:\n{text}");
    }
    let state: Value = read_json(dir.path().join("state.json"));
    let sol = &state["finalSolution"];
    assert_eq!(
        sol["description"],
        "## Design\nA token bucket per API key in Redis."
    );
    assert_eq!(
        sol["unfulfilledMajorRequirements"],
        json!(["Per-region limits"])
    );
    assert_eq!(
        sol["openQuestions"],
        json!(["What is the peak request rate?"])
    );
    assert_eq!(sol["confidence"], 40.0);
    let calls = fake.request_count();

    // With the config it ran with: the same report as `run --report`.
    let out = parley(
        dir.path(),
        &[
            "report",
            "state.json",
            "-c",
            "debate-config.json",
            "-o",
            "again.md",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run_md = std::fs::read_to_string(dir.path().join("run.md")).unwrap();
    let again = std::fs::read_to_string(dir.path().join("again.md")).unwrap();
    assert_eq!(again, run_md);
    assert!(run_md.contains("Per-region limits"), "{run_md}");

    // Without it (dialectic's `--debate` spelling, to stdout): the agents that spoke.
    let out = parley(dir.path(), &["report", "--debate", "state.json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md = stdout(&out);
    assert!(md.contains("| agent-architect | architect |"), "{md}");
    assert!(md.contains("| agent-kiss | kiss |"), "{md}");
    assert!(md.contains("### Final Synthesis"), "{md}");
    assert_eq!(fake.request_count(), calls, "a report calls no model");

    // Bad input names the problem and exits 2 (4 for a missing config).
    let out = parley(dir.path(), &["report", "nope.json"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nope.json"), "{}", stderr(&out));
    std::fs::write(dir.path().join("bad.json"), "{\"id\": 1}").unwrap();
    let out = parley(dir.path(), &["report", "bad.json"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a saved debate"),
        "{}",
        stderr(&out)
    );
    let out = parley(
        dir.path(),
        &["report", "state.json", "--config", "missing.json"],
    )
    .await;
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains("missing.json"), "{}", stderr(&out));
}

/// A critique that keeps failing is dropped (dialectic's `onAgentFailure`, Parley's default
/// `drop`): the debate completes, the state lists the dropped critiques in their round, the
/// report and stderr say so, and the target refines with the critique that did arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_critique_that_keeps_failing_is_dropped_and_the_debate_completes() {
    let fake = FakeLlm::start().await.unwrap();
    // Every critique by the kiss agent (its critique prompt names its focus).
    fake.add_fault(Fault::Status {
        status: 500,
        body: "critic down".into(),
        matching: Match::PromptContains("Critique it from the perspective of simplicity".into()),
        times: None,
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &fake.base_url());
    let mut v: Value = read_json(&cfg);
    v["debate"]["retry"] = json!({"default": {"attempts": 2, "initialBackoffMs": 100}});
    write_json(&cfg, &v);
    let (err, state) = run_one_round(dir.path(), &[]).await;
    assert!(
        err.contains("dropped agent-kiss's critique of agent-architect"),
        "{err}"
    );
    assert_eq!(state["status"], "completed");
    let round = &state["rounds"][0];
    let dropped = round["dropped"].as_array().expect("dropped list");
    let mut targets: Vec<&str> = dropped
        .iter()
        .map(|d| {
            assert_eq!(d["agentId"], "agent-kiss");
            assert_eq!(d["attempts"], 2);
            assert!(d["error"].as_str().unwrap().contains("critic down"), "{d}");
            d["targetAgentId"].as_str().unwrap()
        })
        .collect();
    targets.sort();
    assert_eq!(targets, ["agent-architect", "agent-security"]);
    assert_eq!(count(round, "critique"), 4);
    assert_eq!(count(round, "refinement"), 3);
    let report = std::fs::read_to_string(dir.path().join("r.md")).unwrap();
    assert!(report.contains("### Dropped critiques"), "{report}");
    assert!(report.contains("agent-kiss of agent-security: gave up after 2 attempt(s)"));
}

/// `debate.trace: "langfuse"` sends the trace to Langfuse's OTLP route with Basic auth from
/// the `LANGFUSE_*` keys; prompt text reaches the spans only with `PARLEY_TRACE_CONTENT=true`;
/// without the keys the debate runs and a warning names the missing variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langfuse_export_uses_the_keys_and_carries_prompts_only_when_asked() {
    let fake = FakeLlm::start().await.unwrap();
    let receiver = parley_testkit::OtlpReceiver::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &fake.base_url());
    let mut v: Value = read_json(&cfg);
    v["debate"]["trace"] = json!("langfuse");
    write_json(&cfg, &v);
    let keys = |content: bool| {
        let mut env = vec![
            ("LANGFUSE_PUBLIC_KEY", "pk-lf-test".to_string()),
            ("LANGFUSE_SECRET_KEY", "sk-lf-secret-4242".to_string()),
            ("LANGFUSE_HOST", receiver.langfuse_host()),
        ];
        if content {
            env.push(("PARLEY_TRACE_CONTENT", "true".to_string()));
        }
        env
    };
    let problem = "Design a ledger for 7311 tenants";
    let out = parley_with_env(dir.path(), &["run", problem, "--rounds", "1"], &keys(false)).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("sk-lf-secret-4242") && !err.contains("langfuse"),
        "{err}"
    );
    let calls = receiver.spans_named("llm.call");
    assert_eq!(calls.len(), 13, "one span per LLM call");
    assert!(calls
        .iter()
        .all(|c| c.attr("langfuse.observation.input").is_none()));
    assert!(!receiver.raw_bodies_contain(b"7311 tenants"));
    let auth = receiver.authorizations();
    assert!(!auth.is_empty());
    // base64("pk-lf-test:sk-lf-secret-4242")
    assert!(
        auth.iter()
            .all(|a| a == "Basic cGstbGYtdGVzdDpzay1sZi1zZWNyZXQtNDI0Mg=="),
        "{auth:?}"
    );

    receiver.clear();
    let out = parley_with_env(dir.path(), &["run", problem, "--rounds", "1"], &keys(true)).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let calls = receiver.spans_named("llm.call");
    assert_eq!(calls.len(), 13);
    assert!(calls.iter().all(|c| {
        c.attr("langfuse.observation.input")
            .is_some_and(|i| i.contains("7311 tenants"))
            && c.attr("langfuse.observation.output").is_some()
    }));

    receiver.clear();
    let out = parley_with_env(
        dir.path(),
        &["run", problem, "--rounds", "1"],
        &[("LANGFUSE_PUBLIC_KEY", "pk-lf-test".to_string())],
    )
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("not exported") && err.contains("LANGFUSE_SECRET_KEY"),
        "{err}"
    );
    assert_eq!(receiver.export_requests(), 0);
}
