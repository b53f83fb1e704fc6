//! End-to-end tests of `parley eval` as a subprocess against the fake OpenAI-compatible
//! server: what the evaluators are sent (model, temperature, the debate in the prompt), how
//! replies are averaged (an invalid one is reported, not counted), the three output formats,
//! several debates, dialectic's eval config layout, env files and exit codes.

use std::path::{Path, PathBuf};
use std::process::Output;

use parley_testkit::{run_parley, FakeLlm};
use parley_tests::{read_json, rubric, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

async fn parley_with_env(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    run_parley(PARLEY, dir, args, env).await
}

async fn parley(dir: &Path, args: &[&str]) -> Output {
    parley_with_env(dir, args, &[]).await
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Replies by model: `good-a` scores 6 (overall 7), `good-b` scores 9 (overall 8) inside a
/// fenced block with prose around it, `bad` answers prose.
fn set_replies(fake: &FakeLlm) {
    fake.set_responder(|req| match req.model.as_str() {
        "good-a" => rubric(6, 7).to_string(),
        "good-b" => format!("Here is my review:\n```json\n{}\n```\nDone.", rubric(9, 8)),
        _ => "The design looks fine to me, no JSON today.".to_string(),
    });
}

/// A saved debate (the DebateState fields eval reads) whose solution names `tag`.
fn write_debate(path: &Path, tag: &str) {
    let debate = json!({
        "id": "deb-20260101-000000-ABCD",
        "problem": "Design a ledger service.\n- It must never lose a committed entry\n- Audit trail required for every change",
        "status": "completed",
        "rounds": [{
            "roundNumber": 1,
            "contributions": [{
                "agentId": "agent-architect", "agentRole": "architect", "type": "proposal",
                "content": "Use an append-only log.\n## Requirements Coverage\n- durability: fsync + replicas\n## Risks\nnone",
                "metadata": {"tokensUsed": 1, "latencyMs": 1, "model": "m"}
            }]
        }],
        "finalSolution": {
            "description": format!("SOLUTION-{tag}: an append-only replicated log with hash chaining."),
            "unfulfilledMajorRequirements": ["Cross-region failover"],
            "confidence": 70,
            "synthesizedBy": "judge-main"
        },
        "clarifications": [{
            "agentName": "System Architect", "role": "architect",
            "items": [{"id": "q1", "question": "Peak writes per second?", "answer": "5000"}]
        }]
    });
    write_json(path, &debate);
}

/// Three evaluators against the fake server (root `baseUrl`), one disabled.
fn write_config(dir: &Path, base_url: &str) -> PathBuf {
    let cfg = json!({
        "baseUrl": base_url,
        "agents": [
            {"id": "eval-a", "name": "A", "model": "good-a", "timeout": 20000, "enabled": true},
            {"id": "eval-b", "name": "B", "model": "good-b", "temperature": 0.9},
            {"id": "eval-bad", "name": "Bad", "model": "bad"},
            {"id": "eval-off", "name": "Off", "model": "off", "enabled": false}
        ]
    });
    let path = dir.join("eval-config.json");
    write_json(&path, &cfg);
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_debate_in_all_three_formats() {
    let fake = FakeLlm::start().await.unwrap();
    set_replies(&fake);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, &fake.base_url());
    write_debate(&d.join("deb-one.json"), "ONE");

    // Markdown table on stdout by default.
    let out = parley(d, &["eval", "-c", "eval-config.json", "-d", "deb-one.json"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");
    let table = stdout(&out);
    assert!(
        table.contains("| Functional Completeness | Performance & Scalability | Security | Maintainability & Evolvability | Regulatory Compliance | Testability | Requirements Fulfillment | Overall Score |"),
        "{table}"
    );
    // (6 + 9) / 2 for every metric, (7 + 8) / 2 overall: the invalid reply is not counted.
    assert!(
        table.contains("| 7.50 | 7.50 | 7.50 | 7.50 | 7.50 | 7.50 | 7.50 | 7.50 |"),
        "{table}"
    );
    assert!(
        err.contains("[eval-bad] skipped on debate deb-one: the reply is not a JSON object"),
        "{err}"
    );
    assert!(
        err.contains("2 of 3 evaluators returned valid JSON"),
        "{err}"
    );

    // What crossed the wire: one call per enabled evaluator, its model, temperature 0.1,
    // the built-in prompts filled with the debate.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    let mut models: Vec<&str> = reqs.iter().map(|r| r.model.as_str()).collect();
    models.sort();
    assert_eq!(models, ["bad", "good-a", "good-b"]);
    for r in &reqs {
        assert_eq!(r.temperature, Some(0.1), "{}", r.body);
        assert!(r.path.ends_with("/chat/completions"), "{}", r.path);
        let messages = r.body["messages"].as_array().unwrap();
        assert_eq!(messages[0]["role"], "system");
        assert_eq!(messages[1]["role"], "user");
        let user = messages[1]["content"].as_str().unwrap();
        assert!(user.contains("SOLUTION-ONE: an append-only"), "{user}");
        assert!(user.contains("Design a ledger service."), "{user}");
        assert!(
            user.contains("Peak writes per second?") && user.contains("5000"),
            "{user}"
        );
        assert!(
            user.contains("It must never lose a committed entry"),
            "{user}"
        );
        assert!(user.contains("Cross-region failover"), "{user}");
        assert!(user.contains("durability: fsync + replicas"), "{user}");
        assert!(user.contains("\"requirements_fulfillment\""), "{user}");
        assert!(!user.contains("{final_solution}"), "{user}");
    }

    // JSON: dialectic's aggregate with each valid evaluator's parsed reply.
    let out = parley(
        d,
        &[
            "eval",
            "-c",
            "eval-config.json",
            "-d",
            "deb-one.json",
            "-o",
            "out/r.json",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let v: Value = read_json(d.join("out/r.json"));
    assert_eq!(
        v["evaluation"]["functional_completeness"]["average_score"],
        7.5
    );
    assert_eq!(
        v["evaluation"]["non_functional"]["requirements_fulfillment"]["average_score"],
        7.5
    );
    assert_eq!(v["overall_score"], 7.5);
    assert_eq!(v["debate"], "deb-one");
    assert_eq!(v["agents"]["eval-a"], rubric(6, 7));
    assert_eq!(v["agents"]["eval-b"], rubric(9, 8));
    assert!(v["agents"].get("eval-bad").is_none(), "{v}");
    assert_eq!(v["skipped_agents"]["eval-bad"], "invalid JSON reply");

    // CSV: the header once, one row per run appended.
    for _ in 0..2 {
        let out = parley(
            d,
            &[
                "eval",
                "-c",
                "eval-config.json",
                "-d",
                "deb-one.json",
                "-o",
                "scores.csv",
            ],
        )
        .await;
        assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    }
    let csv = std::fs::read_to_string(d.join("scores.csv")).unwrap();
    assert_eq!(
        csv,
        "debate,Functional Completeness,Performance & Scalability,Security,Maintainability & Evolvability,Regulatory Compliance,Testability,Requirements Fulfillment,Overall Score\n\
         deb-one,7.50,7.50,7.50,7.50,7.50,7.50,7.50,7.50\n\
         deb-one,7.50,7.50,7.50,7.50,7.50,7.50,7.50,7.50\n"
    );

    // Markdown to a file.
    let out = parley(
        d,
        &[
            "eval",
            "-c",
            "eval-config.json",
            "-d",
            "deb-one.json",
            "-o",
            "t.md",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let md = std::fs::read_to_string(d.join("t.md")).unwrap();
    assert!(md.contains("| 7.50 | 7.50 |"), "{md}");
    assert!(stdout(&out).trim().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_of_debates_gives_one_row_each() {
    let fake = FakeLlm::start().await.unwrap();
    // Scores depend on the debate: the solution of debate TWO scores 4 with every evaluator.
    fake.set_responder(|req| {
        if req.prompt_text().contains("SOLUTION-TWO") {
            rubric(4, 4).to_string()
        } else {
            rubric(8, 8).to_string()
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = json!({"baseUrl": fake.base_url(), "agents": [
        {"id": "e1", "name": "E1", "model": "m1"},
        {"id": "e2", "name": "E2", "model": "m2"}
    ]});
    std::fs::write(d.join("ec.json"), cfg.to_string()).unwrap();
    std::fs::create_dir(d.join("debates")).unwrap();
    write_debate(&d.join("debates/a-one.json"), "ONE");
    write_debate(&d.join("debates/b-two.json"), "TWO");
    std::fs::write(
        d.join("debates/notes.json"),
        r#"{"problem": "no solution yet"}"#,
    )
    .unwrap();
    std::fs::write(d.join("debates/readme.txt"), "not json").unwrap();

    let out = parley(d, &["eval", "-c", "ec.json", "-d", "debates"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");
    assert!(err.contains("skipping debates/notes.json"), "{err}");
    assert!(err.contains("finalSolution.description"), "{err}");
    let table = stdout(&out);
    assert!(
        table.starts_with("| Debate | Functional Completeness |"),
        "{table}"
    );
    assert!(table.contains("| a-one | 8.00 | 8.00 |"), "{table}");
    assert!(table.contains("| b-two | 4.00 | 4.00 |"), "{table}");
    assert_eq!(fake.request_count(), 4);

    let out = parley(
        d,
        &["eval", "-c", "ec.json", "-d", "debates", "-o", "all.json"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let v: Value = read_json(d.join("all.json"));
    let debates = v["debates"].as_array().unwrap();
    assert_eq!(debates.len(), 2);
    assert_eq!(debates[0]["debate"], "a-one");
    assert_eq!(debates[0]["overall_score"], 8.0);
    assert_eq!(debates[1]["debate"], "b-two");
    assert_eq!(
        debates[1]["evaluation"]["non_functional"]["security"]["average_score"],
        4.0
    );
    assert_eq!(debates[1]["agents"]["e2"], rubric(4, 4));

    // Several files named one by one, to a CSV: one row each.
    let out = parley(
        d,
        &[
            "eval",
            "-c",
            "ec.json",
            "-d",
            "debates/b-two.json",
            "debates/a-one.json",
            "-o",
            "all.csv",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let csv = std::fs::read_to_string(d.join("all.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[0].starts_with("debate,Functional Completeness"));
    assert_eq!(lines[1], "b-two,4.00,4.00,4.00,4.00,4.00,4.00,4.00,4.00");
    assert_eq!(lines[2], "a-one,8.00,8.00,8.00,8.00,8.00,8.00,8.00,8.00");
}

/// dialectic's example layout: `examples/kata1/eval_config.json` naming `../eval_system.md`
/// and `../eval_user.md`, provider `openrouter`. Our own prompt files with dialectic's
/// placeholders. Plus the root `baseUrl` that points it at the fake server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dialectic_example_eval_config_env_files_and_prompt_files() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_responder(|_| rubric(5, 5).to_string());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let kata = d.join("examples/kata1");
    std::fs::create_dir_all(&kata).unwrap();
    std::fs::write(
        d.join("examples/eval_system.md"),
        "CUSTOM-SYSTEM: grade designs strictly.",
    )
    .unwrap();
    std::fs::write(
        d.join("examples/eval_user.md"),
        "CUSTOM-USER\nProblem: {problem}\nClarifications: {clarifications}\nSolution: {final_solution}\nReply in JSON.",
    )
    .unwrap();
    let agent = |id: &str| {
        json!({
            "id": id, "name": "Sonnet 4 Evaluator", "model": "google/gemini-2.5-flash-lite",
            "provider": "openrouter", "timeout": 30000, "enabled": true,
            "systemPromptPath": "../eval_system.md", "userPromptPath": "../eval_user.md"
        })
    };
    let cfg = json!({"agents": [agent("eval-1"), agent("eval-2")]});
    std::fs::write(kata.join("eval_config.json"), cfg.to_string()).unwrap();
    write_debate(&d.join("deb.json"), "K1");
    let args = [
        "eval",
        "-c",
        "examples/kata1/eval_config.json",
        "-d",
        "deb.json",
    ];

    // dialectic's own shape, no key: a configuration error (4) naming the variable.
    let out = parley(d, &args).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "stderr:\n{err}");
    assert!(err.contains("OPENROUTER_API_KEY"), "{err}");
    assert_eq!(fake.request_count(), 0);

    // The same with our baseUrl and the key in ./.env (loaded by default).
    let mut cfg = cfg;
    cfg["baseUrl"] = json!(fake.base_url());
    std::fs::write(kata.join("eval_config.json"), cfg.to_string()).unwrap();
    std::fs::write(
        d.join(".env"),
        "# keys\nOPENROUTER_API_KEY=\"dotenv-key-123\"\n",
    )
    .unwrap();
    let out = parley(d, &args).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");
    assert!(!err.contains("dotenv-key-123"), "{err}");
    assert!(stdout(&out).contains("| 5.00 | 5.00 |"));
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(r.model, "google/gemini-2.5-flash-lite");
        assert_eq!(r.temperature, Some(0.1));
        assert_eq!(r.header("authorization"), Some("Bearer dotenv-key-123"));
        let text = r.prompt_text();
        assert!(
            text.contains("CUSTOM-SYSTEM: grade designs strictly."),
            "{text}"
        );
        assert!(
            text.contains("CUSTOM-USER\nProblem: Design a ledger service."),
            "{text}"
        );
        assert!(text.contains("Solution: SOLUTION-K1"), "{text}");
        assert!(text.contains("Question q1"), "{text}");
    }

    // --env-file F, verbose: names the variables, never the values; a variable already in
    // the environment wins over the file.
    std::fs::write(
        d.join("keys.env"),
        "export OPENROUTER_API_KEY=file-key-456\nOTHER_VAR=x\n",
    )
    .unwrap();
    let mut with_file = args.to_vec();
    with_file.extend(["--env-file", "keys.env", "-v"]);
    let out = parley_with_env(
        d,
        &with_file,
        &[("OPENROUTER_API_KEY", "process-key-789".into())],
    )
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");
    assert!(err.contains("Loaded OTHER_VAR from keys.env"), "{err}");
    assert!(err.contains("1 already set"), "{err}");
    assert!(
        !err.contains("file-key-456") && !err.contains("process-key-789"),
        "{err}"
    );
    assert!(
        err.contains("[eval-1] provider=openrouter model=google/gemini-2.5-flash-lite"),
        "{err}"
    );
    assert!(
        err.contains("userPrompt=examples/kata1/../eval_user.md"),
        "{err}"
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    for r in &reqs[2..] {
        assert_eq!(r.header("authorization"), Some("Bearer process-key-789"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_for_missing_files_and_bad_configs() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, &fake.base_url());
    write_debate(&d.join("deb.json"), "X");
    std::fs::write(
        d.join("nosol.json"),
        r#"{"problem": "P", "finalSolution": {"description": " "}}"#,
    )
    .unwrap();
    std::fs::write(d.join("empty-agents.json"), r#"{"agents": []}"#).unwrap();
    std::fs::write(
        d.join("all-off.json"),
        r#"{"agents": [{"id": "x", "model": "m", "enabled": false}]}"#,
    )
    .unwrap();
    std::fs::write(d.join("broken.json"), "{ not json").unwrap();
    let unknown = json!({"agents": [{"id": "x", "model": "m", "provider": "acme"}]});
    std::fs::write(d.join("unknown-provider.json"), unknown.to_string()).unwrap();
    std::fs::create_dir(d.join("emptydir")).unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["eval", "-c", "missing.json", "-d", "deb.json"],
            2,
            "missing.json",
        ),
        (
            &["eval", "-c", "broken.json", "-d", "deb.json"],
            2,
            "not valid JSON",
        ),
        (
            &["eval", "-c", "empty-agents.json", "-d", "deb.json"],
            2,
            "agents array",
        ),
        (
            &["eval", "-c", "all-off.json", "-d", "deb.json"],
            2,
            "no enabled evaluator",
        ),
        (
            &["eval", "-c", "eval-config.json", "-d", "gone.json"],
            2,
            "gone.json",
        ),
        (
            &["eval", "-c", "eval-config.json", "-d", "nosol.json"],
            2,
            "finalSolution.description",
        ),
        (
            &["eval", "-c", "eval-config.json", "-d", "broken.json"],
            2,
            "not valid JSON",
        ),
        (
            &["eval", "-c", "eval-config.json", "-d", "emptydir"],
            2,
            "no saved debate",
        ),
        (&["eval", "-c", "eval-config.json"], 2, "--debate"),
        (
            &[
                "eval",
                "-c",
                "eval-config.json",
                "-d",
                "deb.json",
                "--env-file",
                "no.env",
            ],
            2,
            "no.env",
        ),
        (
            &["eval", "-c", "unknown-provider.json", "-d", "deb.json"],
            4,
            "acme",
        ),
    ];
    for (args, code, needle) in cases {
        let out = parley(d, args).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(*code), "{args:?} stderr:\n{err}");
        assert!(err.contains(needle), "{args:?}: {needle:?} not in:\n{err}");
    }
    assert_eq!(
        fake.request_count(),
        0,
        "no evaluator ran on a bad invocation"
    );
}

/// `parley run` loads `./.env` by default and `--env-file F` when given; keys reach the
/// provider, never stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_loads_dotenv_and_env_file() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let agent = |id: &str, role: &str| json!({"id": id, "name": id, "role": role, "model": "m", "provider": "openai-compatible"});
    let cfg = json!({
        "baseUrl": fake.base_url(),
        "agents": [agent("a1", "architect"), agent("a2", "datamodeling")],
        "judge": agent("judge", "generalist"),
        "debate": {"rounds": 1}
    });
    std::fs::write(d.join("debate-config.json"), cfg.to_string()).unwrap();
    std::fs::write(d.join(".env"), "OPENAI_COMPATIBLE_API_KEY=dot-env-key\n").unwrap();
    let out = parley(d, &["run", "Design a ledger"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");
    assert!(!err.contains("dot-env-key"), "{err}");
    let reqs = fake.requests();
    assert!(!reqs.is_empty());
    assert!(reqs
        .iter()
        .all(|r| r.header("authorization") == Some("Bearer dot-env-key")));
    // The datamodeling agent speaks with its own role prompt.
    let datamodeling = reqs
        .iter()
        .filter(|r| {
            r.prompt_text()
                .contains("You are a data modeling engineer.")
        })
        .count();
    assert!(datamodeling >= 2, "proposal and refinement at least");

    std::fs::write(d.join("other.env"), "OPENAI_COMPATIBLE_API_KEY=other-key\n").unwrap();
    let out = parley(d, &["debate", "Design a ledger", "--env-file", "other.env"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let reqs = fake.requests();
    let after = &reqs[reqs.len() / 2..];
    assert!(after
        .iter()
        .all(|r| r.header("authorization") == Some("Bearer other-key")));
}
