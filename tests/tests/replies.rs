//! What a client can make a service do on its behalf, on a real nats-server running the
//! shipped roles (`deploy/nats/parley.conf`, client users from `client-user.sh`):
//!
//! - A request's reply subject is the requester's choice, and a service answers with its
//!   own permissions (`allow_responses`). Replies aimed at the JetStream API (purge and
//!   delete of every stream and bucket, consumer create and delete), a KV bucket or a task
//!   subject get no answer from any service: nothing changes, and each is counted.
//! - What nats-server itself does with such a reply (the reason the services check): a
//!   user with `allow_responses` may answer on any reply subject it received, even one its
//!   own `deny` list names.
//! - Following a debate creates a consumer only for a debate that exists, and the follower
//!   caps hold per client, in total (with a share kept for `serve`) and under concurrent
//!   requests: a client flooding follows leaves the others able to follow.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::time::Duration;

use parley_cluster::events::{FollowTarget, Follower};
use parley_testkit::{free_port, NatsServer};
use parley_tests::*;
use serde_json::{json, Value};

async fn scrape(port: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The sum of the samples of `metric` whose labels contain `label`.
fn samples(text: &str, metric: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(metric) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

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

/// Messages and consumers of a stream, asked with `client`'s permissions.
async fn stream_state(client: &async_nats::Client, stream: &str) -> (u64, u64) {
    let info = jetstream_api(client, &format!("STREAM.INFO.{stream}"))
        .await
        .unwrap();
    assert!(info["error"].is_null(), "{stream}: {info}");
    (
        info["state"]["messages"].as_u64().unwrap(),
        info["state"]["consumer_count"].as_u64().unwrap(),
    )
}

/// A cluster with client users written by `client-user.sh` (`names`), their URLs.
async fn cluster_with_clients(names: &[&str]) -> (Cluster, Vec<String>) {
    let users: Vec<String> = names.iter().map(|n| client_user_line(n)).collect();
    let passwords: Vec<(String, String)> = names
        .iter()
        .map(|n| {
            (
                format!("PARLEY_NATS_{}_PASSWORD", n.to_uppercase()),
                format!("{n}-pw-7a3e91c05d"),
            )
        })
        .collect();
    let env: Vec<(&str, &str)> = passwords
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let c = Cluster::start_with_roles_users_env(json!({}), &users, &env).await;
    let urls = names
        .iter()
        .zip(&passwords)
        .map(|(n, (_, pw))| c.nats.url_as(n, pw))
        .collect();
    (c, urls)
}

/// Every service subject a client may ask, with reply subjects aimed at the JetStream API,
/// a bucket and a task subject: no service answers there, the streams, the bucket and the
/// workers' consumers are untouched, the refusals are counted, and the services go on
/// answering on inboxes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_aimed_at_the_jetstream_api_change_nothing_and_are_counted() {
    let (c, urls) = cluster_with_clients(&["alice"]).await;
    let (coord_metrics, judge_metrics) = (free_port(), free_port());
    let _coord =
        c.coordinator_with(&[("PARLEY_METRICS_ADDR", format!("127.0.0.1:{coord_metrics}"))]);
    let _agent = c.worker("agent");
    let _judge = c.worker_with(
        "judge",
        &[],
        &[("PARLEY_METRICS_ADDR", format!("127.0.0.1:{judge_metrics}"))],
    );
    let id = c.submit(&spec("Design a rate limiter")).await;
    c.wait_done(&id, Duration::from_secs(90)).await;

    let admin = connect_as(&c.nats_url_for("coordinator")).await;
    let worker = connect_as(&c.nats_url_for("agent-worker")).await;
    let events_before = stream_state(&admin, "PARLEY_EVENTS").await;
    let tasks_before = stream_state(&admin, "PARLEY_TASKS").await;
    let stash_before = stream_state(&worker, "KV_PARLEY_RESULT_STASH").await;
    assert!(
        events_before.0 > 5,
        "the debate's events: {events_before:?}"
    );
    assert_eq!(tasks_before.1, 2, "the workers' two consumers");

    let alice = connect_as(&urls[0]).await;
    let hostile = [
        "$JS.API.STREAM.PURGE.PARLEY_EVENTS",
        "$JS.API.STREAM.PURGE.PARLEY_TASKS",
        "$JS.API.STREAM.PURGE.KV_PARLEY_RESULT_STASH",
        "$JS.API.STREAM.DELETE.PARLEY_EVENTS",
        "$JS.API.STREAM.DELETE.PARLEY_TASKS",
        "$JS.API.STREAM.DELETE.KV_PARLEY_RESULT_STASH",
        "$JS.API.CONSUMER.DELETE.PARLEY_TASKS.agent-workers",
        "$JS.API.CONSUMER.DELETE.PARLEY_TASKS.judge-workers",
        "$JS.API.CONSUMER.CREATE.PARLEY_EVENTS",
        "$JS.API.CONSUMER.DURABLE.CREATE.PARLEY_EVENTS.keep",
        "$KV.PARLEY_RESULT_STASH.forged",
        "parley.tasks.agent",
    ];
    let coordinator_subjects = [
        ("parley.debates.submit", "submit"),
        ("parley.debates.status", "status"),
        ("parley.debates.retry", "retry"),
        ("parley.debates.cancel", "cancel"),
        ("parley.debates.answer", "answer"),
        ("parley.debates.steer", "steer"),
        ("parley.debates.contribute", "contribute"),
        ("parley.debates.fork", "fork"),
        ("parley.debates.feedback", "feedback"),
        ("parley.debates.follow.alice", "follow"),
    ];
    let body = json!({"debateId": id}).to_string();
    for reply in hostile {
        for (subject, _) in coordinator_subjects {
            alice
                .publish_with_reply(subject, reply, body.clone().into())
                .await
                .unwrap();
        }
        alice
            .publish_with_reply("parley.evals.submit", reply, "{}".into())
            .await
            .unwrap();
    }
    alice.flush().await.unwrap();

    // Every refusal is counted (the services handle requests concurrently: wait for all).
    let expected = hostile.len() as f64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let coord = scrape(coord_metrics).await;
        let judge = scrape(judge_metrics).await;
        let counted: Vec<f64> = coordinator_subjects
            .iter()
            .map(|(_, label)| {
                samples(
                    &coord,
                    "parley_replies_refused_total",
                    &format!("subject=\"{label}\""),
                )
            })
            .chain(std::iter::once(samples(
                &judge,
                "parley_replies_refused_total",
                "subject=\"evals\"",
            )))
            .collect();
        if counted.iter().all(|n| *n == expected) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "refusals counted per subject: {counted:?}, expected {expected} each"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    assert_eq!(stream_state(&admin, "PARLEY_EVENTS").await, events_before);
    assert_eq!(stream_state(&admin, "PARLEY_TASKS").await, tasks_before);
    assert_eq!(
        stream_state(&worker, "KV_PARLEY_RESULT_STASH").await,
        stash_before
    );
    // The services go on answering on inboxes.
    let status = ask(&alice, "parley.debates.status", json!({"debateId": id})).await;
    assert_eq!(status["status"], "completed", "{status}");
}

/// nats-server's own rule, on the version the tests run: a user with `allow_responses`
/// may publish to the reply subject of a request it received even when its `deny` list
/// names that subject. This is why every Parley service checks reply subjects itself
/// (`parley_cluster::nats::reply_subject`) instead of relying on the roles alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_lets_a_responder_answer_past_its_deny_list() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nats.conf");
    std::fs::write(
        &conf,
        r#"
accounts {
  A {
    jetstream: enabled
    users: [
      {user: admin, password: admin-pw, permissions: {publish: ">", subscribe: ">"}}
      {user: svc, password: svc-pw, permissions: {
        publish: {allow: ["svc.out"], deny: ["$JS.API.>"]},
        subscribe: {allow: ["svc.req"]},
        allow_responses: true
      }}
      {user: cli, password: cli-pw, permissions: {
        publish: {allow: ["svc.req"]}, subscribe: {allow: ["_INBOX_cli.>"]}
      }}
    ]
  }
}
"#,
    )
    .unwrap();
    let nats = NatsServer::start_with_config(&conf, &[]).unwrap();
    let admin = connect_as(&nats.url_as("admin", "admin-pw")).await;
    let js = async_nats::jetstream::new(admin.clone());
    let mut stream = js
        .create_stream(async_nats::jetstream::stream::Config {
            name: "S".into(),
            subjects: vec!["s.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 0..3 {
        js.publish(format!("s.{i}"), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    assert_eq!(stream.info().await.unwrap().state.messages, 3);

    let (svc, mut svc_errors) = connect_watching(&nats.url_as("svc", "svc-pw")).await;
    // Published directly, the deny list holds.
    svc.publish("$JS.API.STREAM.PURGE.S", "{}".into())
        .await
        .unwrap();
    svc.flush().await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), svc_errors.recv())
        .await
        .expect("a permission error")
        .unwrap();
    assert!(e.contains("Permissions Violation"), "{e}");
    assert_eq!(stream.info().await.unwrap().state.messages, 3);

    // As the answer to a request whose reply subject is the purge, it goes through.
    let mut requests = svc.subscribe("svc.req").await.unwrap();
    svc.flush().await.unwrap();
    let cli = connect_as(&nats.url_as("cli", "cli-pw")).await;
    cli.publish_with_reply("svc.req", "$JS.API.STREAM.PURGE.S", "".into())
        .await
        .unwrap();
    cli.flush().await.unwrap();
    use futures::StreamExt as _;
    let req = tokio::time::timeout(Duration::from_secs(10), requests.next())
        .await
        .unwrap()
        .unwrap();
    svc.publish(req.reply.unwrap(), "{}".into()).await.unwrap();
    svc.flush().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while stream.info().await.unwrap().state.messages != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server refused the answer: the deny list now covers responses; update \
             the notes in deploy/nats/parley.conf"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Follows of made-up ids create nothing; a client flooding follows of a real debate, all
/// at once, gets exactly its own cap; other clients then fill what is left of the clients'
/// share; `serve` still follows (its reserved share), and a client that closes nothing
/// stays refused alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_follows_leaves_other_clients_and_serve_able_to_follow() {
    let (c, urls) = cluster_with_clients(&["alice", "mallory", "bob", "carol"]).await;
    // 16 in all: 2 kept for serve, 4 per client, 16 per debate.
    let _coord = c.coordinator_with(&[("PARLEY_MAX_FOLLOWERS", "16".into())]);
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let id = c.submit(&spec("Design a rate limiter")).await;
    c.wait_done(&id, Duration::from_secs(90)).await;
    let admin = connect_as(&c.nats_url_for("coordinator")).await;

    let mallory = connect_as(&urls[1]).await;
    // Made-up ids: not found, and no consumer created.
    let made_up: Vec<_> = (0..40)
        .map(|i| {
            let m = mallory.clone();
            tokio::spawn(async move {
                ask(
                    &m,
                    "parley.debates.follow.mallory",
                    json!({"debateId": format!("deb-20260101-000000-{i:04x}")}),
                )
                .await
            })
        })
        .collect();
    for r in made_up {
        let r = r.await.unwrap();
        assert_eq!(r["error"]["code"], "not_found", "{r}");
    }
    assert_eq!(stream_state(&admin, "PARLEY_EVENTS").await.1, 0);

    // 40 follows of the real debate at once: exactly mallory's cap of 4.
    let flood: Vec<_> = (0..40)
        .map(|_| {
            let m = mallory.clone();
            let id = id.clone();
            tokio::spawn(async move {
                ask(&m, "parley.debates.follow.mallory", json!({"debateId": id})).await
            })
        })
        .collect();
    let mut granted = 0;
    for r in flood {
        let r = r.await.unwrap();
        if r["consumer"].is_string() {
            granted += 1;
        } else {
            assert_eq!(r["error"]["code"], "unavailable", "{r}");
            assert!(
                r["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("the most one client may"),
                "{r}"
            );
        }
    }
    assert_eq!(granted, 4, "mallory's cap");
    // Mallory cannot spend another client's places: a follow asked as alice is answered
    // only on alice's inbox (and mallory may not even publish alice's subject).
    let as_alice = mallory
        .request(
            "parley.debates.follow.alice",
            json!({"debateId": id}).to_string().into(),
        )
        .await;
    assert!(as_alice.is_err(), "mallory asked as alice: {as_alice:?}");

    // Bob and carol take their 4 each; alice gets the last 2 of the clients' 14.
    let mut followers = Vec::new();
    for (i, user) in [(2, "bob"), (3, "carol"), (0, "alice")] {
        let client = connect_as(&urls[i]).await;
        let want = if user == "alice" { 2 } else { 4 };
        for _ in 0..want {
            let target = FollowTarget::Debate {
                id: id.clone(),
                after_stream_seq: 0,
            };
            let f = Follower::start(client.clone(), target)
                .await
                .unwrap_or_else(|e| panic!("{user}: {e:?}"));
            followers.push(f);
        }
    }
    let alice = connect_as(&urls[0]).await;
    let r = ask(
        &alice,
        "parley.debates.follow.alice",
        json!({"debateId": id}),
    )
    .await;
    assert_eq!(r["error"]["code"], "unavailable", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the most this cluster allows"),
        "{r}"
    );
    // `serve` follows from its reserved share, and reads the debate's events.
    let serve = connect_as(&c.nats_url_for("serve")).await;
    let mut f = Follower::start(
        serve,
        FollowTarget::Debate {
            id: id.clone(),
            after_stream_seq: 0,
        },
    )
    .await
    .expect("serve follows from its reserved share");
    let first = tokio::time::timeout(Duration::from_secs(10), f.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        first.subject.as_str(),
        format!("parley.debates.{id}.events")
    );
    // The clients' 14 and serve's 1: the caps held.
    assert_eq!(stream_state(&admin, "PARLEY_EVENTS").await.1, 15);
}

/// A follow subject whose user name is not one (too long, a bad character) is answered
/// with an error naming the rule, never left unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_subject_with_a_bad_user_name_gets_a_clear_error() {
    let c = Cluster::start().await;
    let _coord = c.coordinator();
    for user in ["u".repeat(40), "bad\u{7}name".to_string()] {
        let subject = format!("parley.debates.follow.{user}");
        let r = ask(
            &c.client,
            &subject,
            json!({"debateId": "deb-20260101-000000-abcd"}),
        )
        .await;
        assert_eq!(r["error"]["code"], "invalid_request", "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("user name"),
            "{r}"
        );
    }
}
