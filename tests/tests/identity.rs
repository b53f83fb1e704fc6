//! Each client is its own identity, and no client can exhaust what the others need: the
//! attacks of issue 23 (findings 3 and 4) performed against a real nats-server running the
//! shipped configuration (`deploy/nats/parley.conf`, client users written by
//! `deploy/nats/client-user.sh`), with the service binaries as processes.
//!
//! - Replies: a client cannot subscribe to another client's inbox (nor to `_INBOX.>`,
//!   `>`, events, a service's inbox); nothing of another client's debate reaches its own.
//! - Events: a client cannot create a consumer at all — not with a wildcard filter (every
//!   debate), not a durable one, not through the legacy subjects — nor list consumers,
//!   read the stream directly or ask for the list of debates; a follow request with a
//!   wildcard id is refused. It cannot delete another client's consumer.
//! - Consumers: the followers the coordinator creates are ephemeral (no durable name, an
//!   inactivity threshold) and capped (`max_followers`: past it `unavailable`); they
//!   expire once nobody pulls; `parley watch` still ends when they are exhausted (it
//!   follows the status instead); `parley serve` caps the event streams it follows (503).
//! - Limits: the shipped per-connection limits are in force (payload, control line).
//!
//! Build the binaries first: `cargo build -p parley-coordinator -p parley-agent-worker
//! -p parley-judge-worker -p parley-cli --bins`.

use std::time::Duration;

use futures::StreamExt as _;
use parley_cluster::events::{FollowTarget, Follower, FOLLOWER_INACTIVE};
use parley_tests::*;
use serde_json::{json, Value};

/// Waits up to 10 s for a server error containing `needle` on `rx`.
async fn refused(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(e)) if e.contains(needle) => return e,
            Ok(Some(_)) => continue,
            _ => panic!("no server error containing {needle:?} within 10 s"),
        }
    }
}

/// A request's JSON reply (10 s at most).
async fn ask(client: &async_nats::Client, subject: &str, body: Value) -> Value {
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        client.request(subject.to_string(), body.to_string().into()),
    )
    .await
    .unwrap_or_else(|_| panic!("no reply on {subject}"))
    .unwrap_or_else(|e| panic!("request on {subject}: {e}"));
    serde_json::from_slice(&reply.payload).unwrap()
}

/// A cluster with two client users written by `client-user.sh`: alice and mallory.
async fn cluster_with_alice_and_mallory() -> (Cluster, String, String) {
    let (pa, pm) = ("alice-pw-5d1c9e0b7a", "mallory-pw-0f2e8a6c13");
    let users = [client_user_line("alice"), client_user_line("mallory")];
    let c = Cluster::start_with_roles_users_env(
        json!({}),
        &users,
        &[
            ("PARLEY_NATS_ALICE_PASSWORD", pa),
            ("PARLEY_NATS_MALLORY_PASSWORD", pm),
        ],
    )
    .await;
    let (alice, mallory) = (c.nats.url_as("alice", pa), c.nats.url_as("mallory", pm));
    (c, alice, mallory)
}

/// Alice's replies and events stay hers: mallory, another client, can neither listen to
/// them nor read any debate's events without its id, nor touch alice's consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reads_only_its_own_replies_and_the_events_of_debates_it_names() {
    // The shipped example client is exactly what the generator writes.
    let shipped = std::fs::read_to_string(roles_config()).unwrap();
    assert!(
        shipped.contains(&client_user_line("client")),
        "parley.conf's client user differs from client-user.sh's"
    );
    let (c, alice_url, mallory_url) = cluster_with_alice_and_mallory().await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    // Mallory listens on her own inbox, and tries everyone else's.
    let (mallory, mut errors) = connect_watching(&mallory_url).await;
    let mut own = mallory.subscribe("_INBOX_mallory.>").await.unwrap();
    for subject in [
        "_INBOX.>",
        "_INBOX_alice.>",
        "_INBOX_serve.>",
        "_INBOX_coordinator.>",
        ">",
        "parley.debates.*.events",
        "$JS.EVENT.>",
    ] {
        let _sub = mallory.subscribe(subject).await.unwrap();
        mallory.flush().await.unwrap();
        refused(&mut errors, &format!("Subscription to \"{subject}\"")).await;
    }

    // Alice submits and follows her debate with the CLI, on her own inbox (derived from
    // her user name).
    let dir = tempfile::tempdir().unwrap();
    write_json(dir.path().join("cli.json"), &spec_config(None));
    let (out, err) = submit_and_wait(
        dir.path(),
        "Design a multi-tenant job scheduler",
        "cli.json",
        &alice_url,
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{err}");
    let state: Value = read_json(dir.path().join("state.json"));
    assert_complete(&state);
    let id = state["id"].as_str().unwrap().to_string();
    // Nothing of it reached mallory.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), own.next())
            .await
            .is_err(),
        "mallory's inbox received a message"
    );

    // Mallory tries to read every debate's events, to keep a consumer for ever, to list
    // consumers or debates, to read the stream directly: each refused by NATS.
    let create = |name: &str, filter: &str, durable: bool| {
        let mut config = json!({"name": name, "filter_subject": filter,
            "deliver_policy": "all", "ack_policy": "none"});
        if durable {
            config["durable_name"] = json!(name);
        }
        json!({"stream_name": "PARLEY_EVENTS", "config": config})
    };
    let all = "parley.debates.*.events";
    let hers = format!("parley.debates.{id}.events");
    for (subject, body) in [
        (
            format!("$JS.API.CONSUMER.CREATE.PARLEY_EVENTS.evil.{all}"),
            create("evil", all, false),
        ),
        (
            format!("$JS.API.CONSUMER.CREATE.PARLEY_EVENTS.keep.{hers}"),
            create("keep", &hers, true),
        ),
        (
            format!("$JS.API.CONSUMER.CREATE.PARLEY_EVENTS.mine.{hers}"),
            create("mine", &hers, false),
        ),
        (
            "$JS.API.CONSUMER.DURABLE.CREATE.PARLEY_EVENTS.keep".to_string(),
            create("keep", all, true),
        ),
        (
            "$JS.API.CONSUMER.CREATE.PARLEY_EVENTS".to_string(),
            create("evil", all, false),
        ),
        (
            "$JS.API.CONSUMER.NAMES.PARLEY_EVENTS".to_string(),
            json!({}),
        ),
        ("$JS.API.CONSUMER.LIST.PARLEY_EVENTS".to_string(), json!({})),
        (
            "$JS.API.STREAM.MSG.GET.PARLEY_EVENTS".to_string(),
            json!({"last_by_subj": hers}),
        ),
        (
            "$JS.API.DIRECT.GET.PARLEY_EVENTS".to_string(),
            json!({"next_by_subj": all, "seq": 1}),
        ),
        ("parley.debates.list".to_string(), json!({})),
    ] {
        mallory
            .publish(subject.clone(), body.to_string().into())
            .await
            .unwrap();
        mallory.flush().await.unwrap();
        let e = refused(&mut errors, &format!("Publish to \"{subject}\"")).await;
        assert!(e.contains("Permissions Violation"), "{e}");
    }
    // Asking a coordinator for a follower of "every debate" is refused by name.
    for bad in [json!({"debateId": "*"}), json!({"debateId": ">"})] {
        let r = ask(&mallory, "parley.debates.follow.mallory", bad).await;
        assert_eq!(r["error"]["code"], "invalid_request", "{r}");
        assert!(r["error"]["message"].as_str().unwrap().contains("debateId"));
    }
    let r = ask(
        &mallory,
        "parley.debates.follow.mallory",
        json!({"debateId": id, "durableName": "keep"}),
    )
    .await;
    assert_eq!(r["error"]["code"], "invalid_json", "{r}");

    // Alice follows her debate; mallory cannot delete alice's consumer, which goes on
    // delivering every event of the debate.
    let alice = connect_as(&alice_url).await;
    let target = FollowTarget::Debate {
        id: id.clone(),
        after_stream_seq: 0,
    };
    let mut follower = Follower::start(alice, target).await.unwrap();
    let pending = follower.pending_at_start();
    assert!(pending > 2, "{pending} messages");
    let name = follower.consumer().to_string();
    let delete = format!("$JS.API.CONSUMER.DELETE.PARLEY_EVENTS.{name}");
    mallory.publish(delete.clone(), "".into()).await.unwrap();
    mallory.flush().await.unwrap();
    refused(&mut errors, &format!("Publish to \"{delete}\"")).await;
    let mut seen = Vec::new();
    for _ in 0..pending {
        let msg = tokio::time::timeout(Duration::from_secs(10), follower.next())
            .await
            .expect("an event within 10 s")
            .expect("the follower goes on")
            .expect("an event");
        assert_eq!(msg.subject.as_str(), hers);
        let events: Vec<parley_protocol::DebateEvent> =
            parley_protocol::decode_event_message(&msg.payload).unwrap();
        seen.extend(events);
    }
    assert_eq!(follower.consumer(), name, "the consumer was replaced");
    assert!(seen.last().unwrap().is_final());

    // The shipped per-connection limits are in force.
    assert_eq!(mallory.server_info().max_payload, 1024 * 1024);
    let (probe, mut probe_errors) = connect_watching(&mallory_url).await;
    let _ = probe
        .publish(format!("x.{}", "y".repeat(5000)), "".into())
        .await;
    let _ = probe.flush().await;
    refused(&mut probe_errors, "control line").await;
}

/// Event followers are ephemeral, capped and expire; exhausting them does not stop
/// another client's `watch`; `serve` caps the event streams it follows and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_followers_are_ephemeral_capped_and_their_exhaustion_harms_nobody_else() {
    let (c, alice_url, mallory_url) = cluster_with_alice_and_mallory().await;
    let _coord = c.coordinator_with(&[("PARLEY_MAX_FOLLOWERS", "3".into())]);
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let id = c.submit(&spec("Design a rate limiter")).await;
    c.wait_done(&id, Duration::from_secs(90)).await;

    // Mallory takes every follower the cluster allows.
    let mallory = connect_as(&mallory_url).await;
    let mut names = Vec::new();
    loop {
        let r = ask(
            &mallory,
            "parley.debates.follow.mallory",
            json!({"debateId": id}),
        )
        .await;
        match r["consumer"].as_str() {
            Some(n) => names.push(n.to_string()),
            None => {
                assert_eq!(r["error"]["code"], "unavailable", "{r}");
                assert!(
                    r["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("3 event followers"),
                    "{r}"
                );
                break;
            }
        }
        assert!(names.len() <= 3, "more followers than the cap: {names:?}");
    }
    assert_eq!(names.len(), 3);
    // Each is ephemeral, with an inactivity threshold.
    let js = async_nats::jetstream::new(mallory.clone());
    let stream = js
        .get_stream_no_info(parley_protocol::subjects::EVENTS_STREAM)
        .await
        .unwrap();
    for n in &names {
        let info = stream.consumer_info(n).await.unwrap();
        assert_eq!(info.config.durable_name, None, "{n}");
        assert_eq!(info.config.inactive_threshold, FOLLOWER_INACTIVE, "{n}");
    }

    // Alice's watch still ends, following the status instead.
    let dir = tempfile::tempdir().unwrap();
    let out = parley_cli(dir.path(), &["watch", &id, "--nats-url", &alice_url]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("following its status instead"), "{err}");
    assert!(err.contains("completed"), "{err}");

    // Nobody pulls from mallory's followers: the server removes them, and following works
    // again.
    let start = std::time::Instant::now();
    for n in &names {
        while stream.consumer_info(n).await.is_ok() {
            assert!(
                start.elapsed() < FOLLOWER_INACTIVE * 4,
                "follower {n} still there"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let r = ask(
        &mallory,
        "parley.debates.follow.mallory",
        json!({"debateId": id}),
    )
    .await;
    assert!(r["consumer"].is_string(), "{r}");

    // `parley serve` follows at most --max-event-streams debates at once; past it a clear
    // 503; its list does not count against the followers.
    let token = "serve-token-9c1d7e3a5b";
    let port = parley_testkit::free_port();
    write_json(dir.path().join("debate-config.json"), &spec_config(None));
    let mut cmd = std::process::Command::new(workspace_bin("parley"));
    cmd.current_dir(dir.path())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--nats-url", &c.nats_url_for("serve")])
        .args(["--auth-token", token, "--max-event-streams", "1"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("PARLEY_SERVE_TOKEN")
        .env_remove("PARLEY_NATS_URL")
        .env("PARLEY_LOG", "info");
    let serve = ChildProcess::spawn(cmd, "serve").unwrap();
    assert!(
        serve
            .wait_for_log_line("Parley is serving", Duration::from_secs(30))
            .is_some(),
        "{}",
        serve.log()
    );
    let http = reqwest::Client::new();
    let get = |path: String| {
        http.get(format!("http://127.0.0.1:{port}{path}"))
            .bearer_auth(token)
            .send()
    };
    let first = get(format!("/v1/debates/{id}/events")).await.unwrap();
    assert_eq!(first.status().as_u16(), 200);
    let second = get(format!("/v1/debates/{id}/events")).await.unwrap();
    assert_eq!(second.status().as_u16(), 503);
    let body: Value = second.json().await.unwrap();
    assert!(
        body.to_string().contains("at once, the most it allows"),
        "{body}"
    );
    let list = get("/v1/debates".to_string()).await.unwrap();
    assert_eq!(list.status().as_u16(), 200);
    let list: Value = list.json().await.unwrap();
    assert!(list.to_string().contains(&id), "{list}");
    drop(first);
}
