//! Decision records in a cluster: the coordinator signs each settled debate's record with
//! its key (workers never hold it), stores it under the debate's hash tag, and
//! `parley.debates.status` (`"view": "record"`, `parley status --record`) returns it; the
//! record verifies against the debate's state with the public key alone.

use std::time::Duration;

use parley_tests::{parley_cli, read_json, spec, write_json, Cluster};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_signs_the_record_and_status_returns_one_that_verifies() {
    let c = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let keygen = parley_cli(d, &["record", "--generate-key", "keys"]).await;
    assert_eq!(keygen.status.code(), Some(0), "{keygen:?}");
    let key = d.join("keys/record-signing.key");
    let seed = std::fs::read_to_string(&key)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_string();
    let coord = c.coordinator_with(&[("PARLEY_RECORD_SIGNING_KEY", key.display().to_string())]);
    let agent = c.worker("agent");
    let judge = c.worker("judge");
    let id = c.submit(&spec("Design a cache")).await;
    let state = c.wait_done(&id, Duration::from_secs(120)).await;
    assert_eq!(state["status"], "completed", "{state}");
    write_json(d.join("state.json"), &state);

    // The record, as the status request gives it.
    let mut record = json!(null);
    for _ in 0..50 {
        record = c
            .request(
                "parley.debates.status",
                json!({"debateId": id, "view": "record"})
                    .to_string()
                    .into_bytes(),
            )
            .await;
        if record.get("error").is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(record["debateId"], id.as_str(), "{record}");
    assert!(record["signature"]["keyId"].is_string(), "{record}");
    write_json(d.join("record.json"), &record);
    let ok = parley_cli(
        d,
        &[
            "verify",
            "record.json",
            "--state",
            "state.json",
            "--public-key",
            "keys/record-signing.pub",
        ],
    )
    .await;
    let out = String::from_utf8_lossy(&ok.stdout).into_owned();
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert!(out.contains("signature: verified with key"), "{out}");

    // `parley status --record` downloads the same record.
    let st = parley_cli(d, &["status", &id, "--record", "--nats-url", &c.nats.url()]).await;
    assert_eq!(st.status.code(), Some(0), "{st:?}");
    std::fs::write(d.join("downloaded.json"), &st.stdout).unwrap();
    assert_eq!(read_json(d.join("downloaded.json")), record);

    // An edited state is caught.
    let mut edited = state.clone();
    edited["finalSolution"]["description"] = json!("something else");
    write_json(d.join("edited.json"), &edited);
    let bad = parley_cli(d, &["verify", "record.json", "--state", "edited.json"]).await;
    assert_eq!(bad.status.code(), Some(5), "{bad:?}");

    // The signing key is in no log, state or record.
    for (what, text) in [
        ("coordinator log", coord.log()),
        ("agent worker log", agent.log()),
        ("judge worker log", judge.log()),
        ("state", state.to_string()),
        ("record", record.to_string()),
    ] {
        assert!(!text.contains(&seed), "the signing key is in the {what}");
    }
}
