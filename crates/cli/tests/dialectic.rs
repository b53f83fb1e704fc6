//! A drop-in for dialectic users, end to end with the real `parley` binary: the state files
//! dialectic 0.7.0 wrote (fixtures under `tests/fixtures/dialectic/`, produced by dialectic
//! itself against a local OpenAI-compatible server) read by `report`, `status`, `eval` and
//! `serve`; `OPENAI_BASE_URL` / `OPENROUTER_BASE_URL` and `-e`; `--report` paths.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use parley_testkit::{free_port, run_parley, ChildProcess, FakeLlm};
use parley_tests::{read_json, rubric, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// dialectic's debates: 3 agents and 2 rounds with summaries; 2 agents with answered
/// clarifications; one suspended waiting for answers.
const DEBATE: &str = "deb-20261124-150638-6oja";
const CLARIFIED: &str = "deb-20261124-151859-fayh";
const SUSPENDED: &str = "deb-20261124-150649-88u1";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dialectic")
}

/// A folder holding dialectic's `./debates/` as dialectic left it.
fn with_debates() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let debates = dir.path().join("debates");
    std::fs::create_dir_all(&debates).unwrap();
    for id in [DEBATE, CLARIFIED, SUSPENDED] {
        let name = format!("{id}.json");
        std::fs::copy(fixtures().join("debates").join(&name), debates.join(&name)).unwrap();
    }
    dir
}

async fn parley(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    run_parley(PARLEY, dir, args, env).await
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_reads_dialectics_files_with_dialectics_headings() {
    let dir = with_debates();
    let d = dir.path();
    let file = format!("debates/{DEBATE}.json");
    let out = parley(d, &["report", &file], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let md = text(&out.stdout);
    // dialectic's own report of this debate has these headings, in this order.
    let theirs = std::fs::read_to_string(fixtures().join(format!("reports/{DEBATE}.md"))).unwrap();
    let mut at = 0;
    for heading in [
        "## Problem Description",
        "## Agents",
        "## Judge",
        "## Rounds",
        "### Round 1",
        "### Round 2",
        "### Final Synthesis",
    ] {
        assert!(
            theirs.contains(heading),
            "dialectic's report lacks {heading}"
        );
        let found = md[at..]
            .find(heading)
            .unwrap_or_else(|| panic!("no {heading:?} after byte {at}:\n{md}"));
        at += found + heading.len();
    }
    for needle in [
        "It must return 429 with Retry-After.",
        "| agent-kiss | kiss | gpt-4o-mini |",
        "judge-main",
        "#### critique by agent-security (security) of agent-architect",
        "#### Summary for agent-architect",
        "- Run Redis with a replica",
        "Confidence: 82/100",
    ] {
        assert!(md.contains(needle), "report lacks {needle:?}:\n{md}");
    }

    // The clarified one keeps its questions and answers; `-o` without an extension gets
    // `.md` and its folder.
    let file = format!("debates/{CLARIFIED}.json");
    let out = parley(d, &["report", &file, "-o", "out/nested/clarified"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let md = std::fs::read_to_string(d.join("out/nested/clarified.md")).unwrap();
    assert!(
        md.contains("Yes, one Redis per region shared by all replicas"),
        "{md}"
    );

    // A file that is neither Parley's nor dialectic's: today's error, exit 2.
    write_json(
        d.join("other.json"),
        &json!({"hello": "world", "rounds": []}),
    );
    let out = parley(d, &["report", "other.json"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("other.json is not a saved debate (DebateState JSON): missing field"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_dialectics_saved_debates() {
    let dir = with_debates();
    let d = dir.path();
    // No cluster is asked: the file is here (an unreachable NATS URL proves it).
    let nats = ("PARLEY_NATS_URL", "nats://127.0.0.1:1".to_string());
    let out = parley(d, &["status", DEBATE], std::slice::from_ref(&nats)).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["id"], DEBATE);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["rounds"].as_array().unwrap().len(), 2);
    assert_eq!(v["promptSources"]["judge"]["agentId"], "judge-main");

    let out = parley(
        d,
        &["status", SUSPENDED, "--summary"],
        std::slice::from_ref(&nats),
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "awaiting_clarifications");
    let questions: usize = v["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["items"].as_array().unwrap().len())
        .sum();
    assert_eq!(questions, 4);

    // A hostile id is refused before any file or cluster is touched.
    let out = parley(d, &["status", "deb-20261124-150638-../x"], &[nats]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is not a debate id"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_scores_dialectics_debate_through_openai_base_url() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_responder(|_| rubric(7, 8).to_string());
    let dir = with_debates();
    let d = dir.path();
    // No endpoint in the config: OPENAI_BASE_URL says where `openai` is.
    write_json(
        d.join("eval-config.json"),
        &json!({"agents": [{"id": "eval-1", "name": "E", "model": "gpt-4o-mini", "provider": "openai"}]}),
    );
    let file = format!("debates/{DEBATE}.json");
    let out = parley(
        d,
        &[
            "eval",
            "-c",
            "eval-config.json",
            "-d",
            &file,
            "-o",
            "scores.json",
        ],
        &[
            ("OPENAI_API_KEY", "sk-test".into()),
            ("OPENAI_BASE_URL", fake.base_url()),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(fake.request_count(), 1);
    let req = &fake.requests()[0];
    assert_eq!(req.header("authorization"), Some("Bearer sk-test"));
    assert!(req.prompt_text().contains("Run Redis with a replica"));
    let v: Value = read_json(d.join("scores.json"));
    assert_eq!(v["agents"]["eval-1"], rubric(7, 8), "{v}");
}

/// The fake LLM's config with every participant on `provider`, no endpoint.
fn write_provider_config(dir: &Path, provider: &str, extra: Value) {
    let mut cfg = parley_tests::spec_config(None);
    for a in cfg["agents"].as_array_mut().unwrap() {
        a["provider"] = json!(provider);
    }
    cfg["judge"]["provider"] = json!(provider);
    if let (Some(c), Some(e)) = (cfg.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    write_json(dir.join("debate-config.json"), &cfg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_calls_the_environments_endpoints_below_the_configs() {
    let env_llm = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // OPENAI_BASE_URL and the key from an env file named with `-e`.
    write_provider_config(d, "openai", json!({}));
    std::fs::write(
        d.join("custom.env"),
        format!(
            "OPENAI_API_KEY=sk-from-file\nOPENAI_BASE_URL={}\n",
            env_llm.base_url()
        ),
    )
    .unwrap();
    let out = parley(
        d,
        &["run", "Design a cache", "-r", "1", "-e", "custom.env"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Fake synthesized solution"));
    assert_eq!(env_llm.request_count(), 3 + 6 + 3 + 1);
    assert!(env_llm
        .requests()
        .iter()
        .all(|r| r.header("authorization") == Some("Bearer sk-from-file")));

    // OPENROUTER_BASE_URL for openrouter.
    let before = env_llm.request_count();
    write_provider_config(d, "openrouter", json!({}));
    let env = [
        ("OPENROUTER_API_KEY", "or-test".to_string()),
        ("OPENROUTER_BASE_URL", env_llm.base_url()),
    ];
    let out = parley(
        d,
        &["run", "Design a cache", "-r", "1", "-e", "none.env"],
        &env,
    )
    .await;
    // A missing `-e` file is an error (as `--env-file`): nothing was called.
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(env_llm.request_count(), before);
    let out = parley(d, &["run", "Design a cache", "-r", "1"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let or_calls: Vec<_> = env_llm.requests().into_iter().skip(before).collect();
    assert_eq!(or_calls.len(), 13);
    assert!(or_calls
        .iter()
        .all(|r| r.header("authorization") == Some("Bearer or-test")
            && r.path == "/v1/chat/completions"));

    // The config's `providers.openai.baseUrl` wins over OPENAI_BASE_URL.
    let config_llm = FakeLlm::start().await.unwrap();
    write_provider_config(
        d,
        "openai",
        json!({"providers": {"openai": {"baseUrl": config_llm.base_url()}}}),
    );
    let before = env_llm.request_count();
    let env = [
        ("OPENAI_API_KEY", "sk-test".to_string()),
        ("OPENAI_BASE_URL", env_llm.base_url()),
    ];
    let out = parley(d, &["run", "Design a cache", "-r", "1"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(config_llm.request_count(), 13);
    assert_eq!(env_llm.request_count(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_paths_as_dialectic_and_an_unwritable_report_is_a_warning() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_json(
        d.join("debate-config.json"),
        &parley_tests::spec_config(Some(&fake.base_url())),
    );
    // No extension: `.md` appended; missing folders made.
    let out = parley(
        d,
        &[
            "run",
            "Design a cache",
            "-r",
            "1",
            "--report",
            "reports/q4/cache",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let md = std::fs::read_to_string(d.join("reports/q4/cache.md")).unwrap();
    assert!(md.contains("## Problem Description") && md.contains("### Final Synthesis"));
    assert!(text(&out.stderr).contains("Wrote report to reports/q4/cache.md"));
    // An extension is kept.
    let out = parley(
        d,
        &["run", "Design a cache", "-r", "1", "--report", "r.txt"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0));
    assert!(d.join("r.txt").is_file() && !d.join("r.txt.md").exists());

    // A report that cannot be written (its folder is a file): a warning, the solution is
    // printed, the exit status is the debate's.
    std::fs::write(d.join("blocker"), "a file").unwrap();
    let out = parley(
        d,
        &[
            "run",
            "Design a cache",
            "-r",
            "1",
            "--report",
            "blocker/r.md",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Fake synthesized solution"));
    let err = text(&out.stderr);
    assert!(
        err.contains("warning: cannot write the report blocker/r.md"),
        "{err}"
    );
}

/// `parley serve` (embedded) in a folder holding dialectic's `./debates/`: the list shows
/// them, each one's state and report are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_lists_and_shows_dialectics_debates() {
    let fake = FakeLlm::start().await.unwrap();
    let dir = with_debates();
    write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(Some(&fake.base_url())),
    );
    let port = free_port();
    let mut cmd = Command::new(PARLEY);
    cmd.current_dir(dir.path())
        .args([
            "serve",
            "--no-auth",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("PARLEY_SERVE_TOKEN")
        .env_remove("PARLEY_NATS_URL")
        .env("PARLEY_MODEL_DIR", dir.path().join("no-models"))
        .env("PARLEY_LOG", "info");
    let proc = ChildProcess::spawn(cmd, "serve").unwrap();
    assert!(
        proc.wait_for_log_line("Parley is serving", Duration::from_secs(30))
            .is_some(),
        "{}",
        proc.log()
    );
    let http = reqwest::Client::new();
    let get = |path: String| {
        let http = http.clone();
        async move {
            let r = http
                .get(format!("http://127.0.0.1:{port}{path}"))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, body) = get("/v1/debates".into()).await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    let mut ids: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["id"].as_str())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [DEBATE, SUSPENDED, CLARIFIED]);

    let (status, body) = get(format!("/v1/debates/{DEBATE}")).await;
    assert_eq!(status, 200, "{body}");
    let state: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["status"], "completed");
    assert_eq!(state["promptSources"]["judge"]["agentId"], "judge-main");
    assert_eq!(state["finalSolution"]["confidence"], 82.0);

    let (status, body) = get(format!("/v1/debates/{SUSPENDED}")).await;
    assert_eq!(status, 200, "{body}");
    let state: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["status"], "awaiting_clarifications");

    let (status, md) = get(format!("/v1/debates/{DEBATE}/report")).await;
    assert_eq!(status, 200, "{md}");
    assert!(
        md.contains("### Round 2") && md.contains("- Run Redis with a replica"),
        "{md}"
    );
    drop(proc);
}
