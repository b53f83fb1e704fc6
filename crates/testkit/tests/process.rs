//! Our own binaries as child processes: the `fake-llm` binary, spawned, used and stopped.

use parley_testkit::{free_port, wait_until, wait_until_async, workspace_bin, ChildProcess};
use std::process::Command;
use std::time::Duration;

#[tokio::test]
async fn fake_llm_binary_serves_until_terminated() {
    let port = free_port();
    let mut cmd = Command::new(workspace_bin("fake-llm"));
    cmd.args([
        "--port",
        &port.to_string(),
        "--latency-ms",
        "5",
        "--rpm",
        "1000",
    ]);
    let mut child = ChildProcess::spawn(cmd, "fake-llm").unwrap();
    let line = child
        .wait_for_log_line("listening on", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no listening line; log:\n{}", child.log()));
    let base = format!("http://127.0.0.1:{port}/v1");
    assert_eq!(line, format!("listening on {base}"));

    let resp = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .json(&serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);

    assert!(child.is_running());
    child.terminate();
    assert!(child.wait_exit(Duration::from_secs(10)).is_some());
    assert!(!child.is_running());
}

#[tokio::test]
async fn kill9_stops_a_process_and_wait_helpers_poll() {
    let mut cmd = Command::new("sleep");
    cmd.arg("60");
    let mut child = ChildProcess::spawn(cmd, "sleep").unwrap();
    assert!(child.pid() > 0);
    assert!(child.is_running());
    assert!(child.wait_exit(Duration::from_millis(50)).is_none());
    child.kill9();
    assert!(wait_until(Duration::from_secs(5), || !child.is_running()));
    assert!(!wait_until(Duration::from_millis(50), || false));
    assert!(wait_until_async(Duration::from_secs(1), || true).await);
}

#[test]
#[should_panic(expected = "binary no-such-binary not built: run cargo build --workspace --bins")]
fn workspace_bin_names_a_missing_binary() {
    workspace_bin("no-such-binary");
}

#[test]
fn bad_flags_are_reported() {
    let out = Command::new(workspace_bin("fake-llm"))
        .arg("--port")
        .arg("nope")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--port"), "{err}");
}
