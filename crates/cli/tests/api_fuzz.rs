//! The HTTP API v1 against its OpenAPI document: the committed document validates as
//! OpenAPI 3.1 (`openapi-spec-validator`), the running server serves the same document, and
//! `schemathesis` fuzzes the running `parley serve` (embedded, over the fake LLM) from it:
//! no 5xx, every status code, content type, header and body as documented. Tools come from
//! `scripts/api-tools.sh` (pip, cached). Bounded: schemathesis gets [`FUZZ_SECONDS`].
//!
//! The event stream (`/v1/debates/{id}/events`) does not end by itself, so it is left out of
//! the fuzzing; the end-to-end tests (serve.rs, api_v1.rs) read it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use parley_testkit::{free_port, ChildProcess, FakeLlm};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");
const TOKEN: &str = "fuzz-token-0123456789abcdef";
/// schemathesis's time budget.
const FUZZ_SECONDS: u32 = 90;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tools() -> PathBuf {
    let out = Command::new(repo().join("scripts/api-tools.sh"))
        .output()
        .expect("scripts/api-tools.sh");
    assert!(
        out.status.success(),
        "scripts/api-tools.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_matches_its_openapi_document_under_fuzzing() {
    let bin = tools();
    let committed = repo().join("docs/src/reference/openapi.json");
    let v = Command::new(bin.join("openapi-spec-validator"))
        .arg(&committed)
        .output()
        .unwrap();
    assert!(
        v.status.success(),
        "not valid OpenAPI:\n{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );

    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    parley_tests::write_json(
        dir.path().join("debate-config.json"),
        &parley_tests::spec_config(Some(&fake.base_url())),
    );
    let port = free_port();
    let mut cmd = Command::new(PARLEY);
    cmd.current_dir(dir.path())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--auth-token", TOKEN])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("PARLEY_SERVE_TOKEN")
        .env("PARLEY_MODEL_DIR", dir.path().join("no-models"));
    let serve = ChildProcess::spawn(cmd, "serve").unwrap();
    assert!(serve
        .wait_for_log_line("Parley is serving", Duration::from_secs(30))
        .is_some());
    let base = format!("http://127.0.0.1:{port}");

    // The server serves the committed document.
    let served = reqwest::get(format!("{base}/v1/openapi.json"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        served,
        std::fs::read_to_string(&committed).unwrap(),
        "the served document is not the committed one"
    );

    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin.join("schemathesis"))
            .current_dir(dir.path())
            .env("SCHEMATHESIS_HOOKS", "")
            .args(["run", &format!("{base}/v1/openapi.json")])
            .args(["--url", &base])
            .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,\
                 response_headers_conformance,response_schema_conformance",
            ])
            .args(["--exclude-path", "/v1/debates/{id}/events"])
            .args(["--phases", "examples,coverage,fuzzing"])
            .args(["--max-time", &FUZZ_SECONDS.to_string()])
            .args(["--max-examples", "40"])
            .args(["--request-timeout", "10"])
            .args(["--workers", "2", "--seed", "1", "--no-color"])
            .args(["--generation-database", "none"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{report}\n\nserve log:\n{}",
        serve.log()
    );
    // It did test the operations (a filter mistake would pass with nothing tested).
    assert!(report.contains("POST /v1/debates"), "{report}");
    drop(fake);
}
