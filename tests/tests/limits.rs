//! Every debate ends and nothing grows without bound: task deadlines, the last delivery,
//! dead letters, `retry` of a running debate, poison debates, `cancel`, messages far under a
//! small `max_payload`, and retention — with real nats-server, redis-server, the service
//! binaries as processes and the fake LLM.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::StreamExt;
use parley_protocol::EventKind;
use parley_tests::*;
use serde_json::{json, Value};

/// Polls `check` every 100 ms until it holds or `timeout` passes.
async fn until<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A connection that waits for slow replies ([`redis_connection`]).
async fn redis(c: &Cluster) -> redis::aio::MultiplexedConnection {
    redis_connection(&c.redis.url()).await
}

/// Keys in Redis but the estimates' calibration samples (`parley:{calibration}:*`: bounded
/// on their own, kept 30 days after their last sample, not a debate's).
async fn dbsize(conn: &mut redis::aio::MultiplexedConnection) -> i64 {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(conn).await.unwrap();
    keys.iter()
        .filter(|k| !k.starts_with("parley:{calibration}:"))
        .count() as i64
}

async fn debate_events(c: &Cluster, id: &str) -> Vec<parley_protocol::DebateEvent> {
    events(&c.client, &format!("parley.debates.{id}.events"))
        .await
        .unwrap()
}

/// Messages stored in the tasks stream now.
async fn queued_tasks(c: &Cluster) -> u64 {
    let js = jetstream::new(c.client.clone());
    match js.get_stream("PARLEY_TASKS").await {
        Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
        Err(_) => 0,
    }
}

/// Waits until the tasks stream holds `n` messages (30 s at most).
async fn wait_queued_tasks(c: &Cluster, n: u64) {
    assert!(
        until(Duration::from_secs(30), || async {
            queued_tasks(c).await == n
        })
        .await
    );
}

/// With the agent worker frozen, submits [`spec`]`(problem)` and waits for its three
/// proposals to be queued; then stops Redis and wakes the worker: (the debate's id, when
/// Redis stopped).
async fn queue_proposals_then_stop_redis(
    c: &mut Cluster,
    agent: &ChildProcess,
    problem: &str,
) -> (String, Instant) {
    send_signal(agent.pid(), "STOP");
    let id = c.submit(&spec(problem)).await;
    wait_queued_tasks(c, 3).await;
    c.redis.kill();
    let stopped = Instant::now();
    send_signal(agent.pid(), "CONT");
    (id, stopped)
}

/// Drops every message of the tasks stream: the queued tasks are lost.
async fn purge_tasks(c: &Cluster) {
    jetstream::new(c.client.clone())
        .get_stream("PARLEY_TASKS")
        .await
        .unwrap()
        .purge()
        .await
        .unwrap();
}

/// (task id, attempt) of every `taskDispatched` event.
fn dispatches(events: &[parley_protocol::DebateEvent]) -> Vec<(String, u32)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TaskDispatched {
                task_id, attempt, ..
            } => Some((task_id.clone(), *attempt)),
            _ => None,
        })
        .collect()
}

/// The [`spec`] debate with a 3 s task timeout and quick retries.
fn quick_spec(problem: &str) -> Value {
    let mut s = spec(problem);
    s["debate"]["retry"] = json!({"default": {"attempts": 3, "initialBackoffMs": 100,
                                              "maxBackoffMs": 200, "timeoutMs": 3000}});
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_for_15_s_while_tasks_are_queued_the_debate_completes() {
    let mut c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(200)));
    let _coord = c.coordinator();
    let agent = c.worker("agent");
    let _judge = c.worker("judge");

    // The agent worker is frozen while the debate starts: its three proposals wait in the
    // queue. Then Redis stops, and the worker wakes up to a queue it cannot serve.
    let (id, stopped) =
        queue_proposals_then_stop_redis(&mut c, &agent, "Design a session store").await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    c.redis.restart().unwrap();
    eprintln!("redis was down for {:?}", stopped.elapsed());

    let state = c.wait_done(&id, Duration::from_secs(120)).await;
    assert_complete(&state);
    eprintln!("completed {:?} after redis stopped", stopped.elapsed());
    // The queued proposals were delivered (and given back) during the outage.
    let log = agent.log();
    assert!(log.contains("cannot read the task's state"), "{log}");
    assert!(!log.contains("abandoning"), "{log}");
    assert_no_completed_call_repeated(&c.fake);
    assert_eq!(c.fake.request_count(), 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_delivery_of_a_queued_task_waits_for_redis_instead_of_dropping_it() {
    let mut c = Cluster::start().await;
    let _coord = c.coordinator();
    let agent = c.worker("agent");
    let _judge = c.worker("judge");
    let (id, stopped) =
        queue_proposals_then_stop_redis(&mut c, &agent, "Design a rate card service").await;
    // Redis stays down until a queued proposal is on its 5th and last delivery (each failed
    // delivery is given back; the old worker gave the last one back too, and the message
    // was gone for good).
    let on_last = |log: &str| -> BTreeSet<String> {
        log_lines_with_message(
            log,
            "cannot read the task's state on its last delivery; retrying",
        )
        .iter()
        .filter_map(|l| l["fields"]["task"].as_str().map(str::to_string))
        .collect()
    };
    assert!(
        wait_until_async(Duration::from_secs(150), || !on_last(&agent.log())
            .is_empty())
        .await,
        "{}",
        agent.log()
    );
    c.redis.restart().unwrap();
    eprintln!(
        "redis was down for {:?} (until a queued task was on its last delivery)",
        stopped.elapsed()
    );
    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_complete(&state);
    let log = agent.log();
    assert!(on_last(&log).iter().all(|t| t.contains("/1/propose/")));
    assert!(!log.contains("abandoning"), "{log}");
    assert_no_completed_call_repeated(&c.fake);
    assert_eq!(c.fake.request_count(), 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_handed_back_on_every_delivery_fails_its_node_and_retry_completes_it() {
    let c = Cluster::start().await;
    // Every call of kiss: 429 with Retry-After 6 s — longer than a worker waits inline, so
    // each delivery hands the task back to the queue.
    c.fake.add_fault(Fault::RateLimited {
        retry_after: Some(Duration::from_secs(6)),
        matching: Match::Model("model-kiss".into()),
        times: None,
    });
    // A short deadline (3 s timeout + 3 s margin): only the workers' hand-back notices keep
    // the coordinator from presuming kiss's proposal lost while it is handed back.
    let _coord = c.coordinator_with(&[("PARLEY_TASK_DEADLINE_MARGIN_SECS", "3".into())]);
    let agent = c.worker("agent");
    let _judge = c.worker("judge");

    let mut s = quick_spec("Design an image thumbnailer");
    s["debate"]["retry"]["default"]["attempts"] = json!(1);
    let id = c.submit(&s).await;
    let failed = c.wait_done(&id, Duration::from_secs(90)).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let e = &failed["error"];
    // Kiss's proposal, or one of its critiques (dataflow scheduling), fails first.
    assert!(e["node"] == "proposal" || e["node"] == "critique", "{e}");
    assert_eq!(e["agentId"], "agent-kiss", "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("handed back on each of its 5 deliveries"),
        "{message}"
    );
    assert!(!message.contains("deadline"), "{message}");
    // Kiss's proposal (and its critiques, which also run on model-kiss) went back to the
    // queue on deliveries 1-4; the 5th stored the error.
    let mut handbacks: BTreeMap<String, usize> = BTreeMap::new();
    for l in log_lines_with_message(&agent.log(), "rate limited; handing the task back") {
        *handbacks
            .entry(l["fields"]["task"].as_str().unwrap_or_default().to_string())
            .or_default() += 1;
    }
    let failed_task = e["taskId"].as_str().unwrap();
    assert_eq!(handbacks.get(failed_task), Some(&4), "{handbacks:?}");
    assert!(handbacks.values().all(|n| *n <= 4), "{handbacks:?}");

    c.fake.clear_faults();
    let dir = tempfile::tempdir().unwrap();
    let out = parley_cli(dir.path(), &["retry", &id, "--nats-url", &c.nats.url()]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = c
        .wait_status(&id, Duration::from_secs(60), |s| s["status"] == "completed")
        .await;
    assert_complete(&state);
    assert_no_completed_call_repeated(&c.fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_task_messages_are_dispatched_again_at_their_deadline() {
    let c = Cluster::start().await;
    let _coord = c.coordinator_with(&[("PARLEY_TASK_DEADLINE_MARGIN_SECS", "2".into())]);
    let _judge = c.worker("judge");
    let id = c.submit(&quick_spec("Design a DNS cache")).await;
    // The three proposals are queued; no agent worker runs. Then they are lost.
    wait_queued_tasks(&c, 3).await;
    purge_tasks(&c).await;
    let lost_at = Instant::now();
    let _agent = c.worker("agent");

    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_complete(&state);
    eprintln!(
        "completed {:?} after its tasks were lost",
        lost_at.elapsed()
    );
    let events = debate_events(&c, &id).await;
    let lost: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TaskFailed {
                task_id,
                error,
                will_retry: true,
                ..
            } if error.contains("deadline") => Some(task_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(lost.len(), 3, "{lost:?}");
    assert!(lost.iter().all(|t| t.contains("/1/propose/")), "{lost:?}");
    let again = dispatches(&events);
    for t in &lost {
        assert!(
            again.contains(&(t.clone(), 2)),
            "{t} not sent again as attempt 2"
        );
    }
    assert_eq!(c.fake.request_count(), 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_of_a_running_debate_sends_its_lost_tasks_again() {
    let c = Cluster::start().await;
    // The default deadline (the task's 300 s timeout + 300 s): far beyond this test.
    let _coord = c.coordinator();
    let _judge = c.worker("judge");
    let id = c.submit(&spec("Design a job queue")).await;
    wait_queued_tasks(&c, 3).await;
    purge_tasks(&c).await;
    let _agent = c.worker("agent");
    // Stuck: nothing happens.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(c.fake.request_count(), 0);
    assert_eq!(c.status(&id).await["status"], "running");

    let dir = tempfile::tempdir().unwrap();
    let out = parley_cli(dir.path(), &["retry", &id, "--nats-url", &c.nats.url()]).await;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"accepted\":\"retry\""), "{stdout}");
    let state = c.wait_done(&id, Duration::from_secs(30)).await;
    assert_complete(&state);
    let events = debate_events(&c, &id).await;
    let proposals: BTreeMap<String, u32> = dispatches(&events)
        .into_iter()
        .filter(|(t, _)| t.contains("/1/propose/"))
        .fold(BTreeMap::new(), |mut m, (t, a)| {
            let e = m.entry(t).or_insert(0);
            *e = (*e).max(a);
            m
        });
    assert_eq!(proposals.len(), 3);
    assert!(proposals.values().all(|a| *a == 2), "{proposals:?}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::TaskFailed { .. })),
        "a retry of a running debate fails nothing"
    );
    assert_eq!(c.fake.request_count(), 22);

    // A completed debate cannot be retried.
    let out = parley_cli(dir.path(), &["retry", &id, "--nats-url", &c.nats.url()]).await;
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("completed"));
}

/// Fetches the task messages of `agent-workers` and naks each delivery, until every one of
/// `n` messages was delivered `max_deliver` times: a worker that never answers.
async fn nak_every_delivery(c: &Cluster, n: usize) {
    let js = jetstream::new(c.client.clone());
    let stream = js.get_stream("PARLEY_TASKS").await.unwrap();
    let consumer: jetstream::consumer::PullConsumer = stream
        .get_or_create_consumer(
            "agent-workers",
            jetstream::consumer::pull::Config {
                durable_name: Some("agent-workers".into()),
                filter_subject: "parley.tasks.agent".into(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(3),
                max_deliver: 5,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut exhausted = BTreeSet::new();
    let start = Instant::now();
    while exhausted.len() < n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "deliveries stalled"
        );
        let mut batch = consumer
            .fetch()
            .max_messages(10)
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .unwrap();
        while let Some(Ok(m)) = batch.next().await {
            let info = m.info().unwrap();
            if info.delivered >= 5 {
                exhausted.insert(info.stream_sequence);
            }
            m.ack_with(jetstream::AckKind::Nak(None)).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_task_is_recorded_and_dispatched_again() {
    let c = Cluster::start().await;
    let metrics_port = parley_testkit::free_port();
    let coord = c.coordinator_with(&[("PARLEY_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"))]);
    let _judge = c.worker("judge");
    let id = c.submit(&spec("Design a leaderboard")).await;
    wait_queued_tasks(&c, 3).await;
    nak_every_delivery(&c, 3).await;
    // A real worker now: its first pull makes JetStream notice the exhausted messages (the
    // `MAX_DELIVERIES` advisory) instead of delivering them.
    let _agent = c.worker("agent");

    // The coordinator records the three dead letters and sends each proposal again.
    let conn = redis(&c).await;
    let read = |mut conn: redis::aio::MultiplexedConnection| async move {
        redis::cmd("LRANGE")
            .arg("parley:deadletter")
            .arg(0)
            .arg(-1)
            .query_async::<Vec<String>>(&mut conn)
            .await
            .unwrap()
    };
    assert!(
        until(Duration::from_secs(20), || {
            let read = read(conn.clone());
            async move { read.await.len() == 3 }
        })
        .await,
        "dead letters: {:?}\n{}",
        read(conn.clone()).await,
        coord.log()
    );
    let letters = read(conn.clone()).await;
    for l in &letters {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["debateId"], id.as_str(), "{v}");
        assert!(v["taskId"].as_str().unwrap().contains("/1/propose/"), "{v}");
        assert_eq!(v["deliveries"], 5, "{v}");
    }
    let metrics = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "parley_tasks_dead_lettered_total{kind=\"agent\",reason=\"max_deliveries\"} 3"
        ),
        "{metrics}"
    );

    let state = c.wait_done(&id, Duration::from_secs(40)).await;
    assert_complete(&state);
    let events = debate_events(&c, &id).await;
    let again: Vec<_> = dispatches(&events)
        .into_iter()
        .filter(|(t, a)| t.contains("/1/propose/") && *a == 2)
        .collect();
    assert_eq!(again.len(), 3, "{again:?}");
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        EventKind::TaskFailed { error, .. } if error.contains("dead letter")
    )));
    // The dead letters left the work queue; nothing is left behind.
    assert_eq!(queued_tasks(&c).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_debate_fails_within_seconds_with_a_bounded_number_of_events() {
    let c = Cluster::start().await;
    let coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    // Poison: the tasks stream now refuses every task message (16 bytes at most).
    let js = jetstream::new(c.client.clone());
    let mut config = js
        .get_stream("PARLEY_TASKS")
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    let healthy = config.max_message_size;
    config.max_message_size = 16;
    js.update_stream(config.clone()).await.unwrap();

    let submitted = Instant::now();
    let id = c.submit(&spec("Design a poisoned pipeline")).await;
    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    let took = submitted.elapsed();
    assert_eq!(state["status"], "failed", "{state}");
    let message = state["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("failed 3 times"), "{message}");
    assert!(message.to_lowercase().contains("size"), "{message}");
    let first = debate_events(&c, &id).await;
    eprintln!(
        "poison debate failed after {took:?} with {} events",
        first.len()
    );
    assert!(first.len() <= 40, "{} events", first.len());
    assert!(matches!(
        first.last().map(|e| &e.kind),
        Some(EventKind::DebateFailed { .. })
    ));
    // And it stays failed: no more adoptions, no more events.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(debate_events(&c, &id).await.len(), first.len());
    let adopted = log_lines_with_message(&coord.log(), "debate adopted")
        .iter()
        .filter(|l| l["fields"]["debate"] == id.as_str())
        .count();
    assert!(adopted <= 3, "adopted {adopted} times");

    // Cancel wins even over a failure.
    let dir = tempfile::tempdir().unwrap();
    let out = parley_cli(dir.path(), &["cancel", &id, "--nats-url", &c.nats.url()]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.wait_status(&id, Duration::from_secs(10), |s| s["status"] == "cancelled")
        .await;

    // A second poison debate cancelled at once ends cancelled, not failed.
    let id2 = c.submit(&spec("Design another poisoned pipeline")).await;
    let out = parley_cli(dir.path(), &["cancel", &id2, "--nats-url", &c.nats.url()]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s2 = c.wait_done(&id2, Duration::from_secs(30)).await;
    assert_eq!(s2["status"], "cancelled", "{s2}");

    // The cure: the stream takes task messages again, and a new debate completes.
    config.max_message_size = healthy;
    js.update_stream(config).await.unwrap();
    let id3 = c.submit(&spec("Design a healthy pipeline")).await;
    assert_complete(&c.wait_done(&id3, Duration::from_secs(45)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_running_debate_wins_and_its_queued_tasks_are_skipped() {
    let c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(1500)));
    let _coord = c.coordinator();
    let agent = c.worker_with("agent", &["--concurrency", "1"], &[]);
    let _judge = c.worker("judge");
    let id = c.submit(&spec("Design a photo sharing app")).await;
    // One proposal call runs, two wait in the queue.
    assert!(wait_until_async(Duration::from_secs(30), || c.fake.request_count() >= 1).await);
    let dir = tempfile::tempdir().unwrap();
    let out = parley_cli(dir.path(), &["cancel", &id, "--nats-url", &c.nats.url()]).await;
    let cancelled_at = Instant::now();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = c.wait_done(&id, Duration::from_secs(10)).await;
    assert_eq!(state["status"], "cancelled", "{state}");
    let events = debate_events(&c, &id).await;
    assert!(matches!(
        events.last().map(|e| &e.kind),
        Some(EventKind::DebateCancelled)
    ));
    // The queued proposals are skipped, not run.
    assert!(
        wait_until_async(Duration::from_secs(15), || agent
            .log()
            .matches("the debate was cancelled; skipping the task")
            .count()
            >= 2)
        .await,
        "{}",
        agent.log()
    );
    let late: Vec<_> = c
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.received_at > cancelled_at + Duration::from_secs(1))
        .collect();
    assert!(late.is_empty(), "{} LLM calls after the cancel", late.len());
    // Cancelling again is a conflict that names the state.
    let out = parley_cli(dir.path(), &["cancel", &id, "--nats-url", &c.nats.url()]).await;
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already cancelled"));
}

/// 12 agents whose every reply is ~24 KB, one round: a state of several MiB.
fn big_spec(problem: &str) -> Value {
    let roles = [
        "architect",
        "performance",
        "security",
        "testing",
        "kiss",
        "generalist",
    ];
    let agents: Vec<Value> = (0..12)
        .map(|i| {
            json!({"id": format!("agent-{i:02}"), "name": format!("Agent {i}"),
                   "role": roles[i % roles.len()], "model": "model-big", "temperature": 0.5})
        })
        .collect();
    json!({
        "problem": problem,
        "agents": agents,
        "judge": {"id": "judge-main", "name": "Judge", "role": "generalist", "model": "model-judge", "temperature": 0.2},
        "debate": {"rounds": 1, "terminationCondition": {"type": "fixed"}}
    })
}

const BIG_REPLY_BYTES: usize = 24 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_mib_debate_completes_under_a_64_kib_max_payload() {
    let c = Cluster::start_with_max_payload(64 * 1024).await;
    c.fake.set_responder(|r| {
        if r.model == "model-judge" {
            json!({"description": "Fake synthesized solution of the big debate",
                   "tradeoffs": ["t"], "recommendations": ["r"], "confidence": 70})
            .to_string()
        } else {
            let mut text = format!("Reply of {}: ", r.model);
            while text.len() < BIG_REPLY_BYTES {
                text.push_str("use a bounded queue and measure it; ");
            }
            text
        }
    });
    let coord = c.coordinator();
    let _agent = c.worker_with("agent", &["--concurrency", "8"], &[]);
    let _judge = c.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = big_spec("unused");
    cfg.as_object_mut().unwrap().remove("problem");
    std::fs::write(dir.path().join("big.json"), cfg.to_string()).unwrap();
    let url = c.nats.url();

    let started = Instant::now();
    let (out, err) = submit_and_wait(
        dir.path(),
        "Design a global feature store",
        "big.json",
        &url,
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{err}\n{}", coord.log());
    let took = started.elapsed();
    let bytes = std::fs::read(dir.path().join("state.json")).unwrap();
    let state: Value = serde_json::from_slice(&bytes).unwrap();
    eprintln!(
        "a {:.1} MiB debate state completed in {took:?} under max_payload 64 KiB",
        bytes.len() as f64 / (1024.0 * 1024.0)
    );
    assert!(bytes.len() > 3 * 1024 * 1024, "{} bytes", bytes.len());
    assert_eq!(state["status"], "completed");
    let round = &state["rounds"][0];
    assert_eq!(
        (
            count(round, "proposal"),
            count(round, "critique"),
            count(round, "refinement")
        ),
        (12, 132, 12)
    );
    for contribution in round["contributions"].as_array().unwrap() {
        assert!(contribution["content"].as_str().unwrap().len() >= BIG_REPLY_BYTES);
    }
    let id = state["id"].as_str().unwrap().to_string();

    // `parley status` returns the whole state, reassembled from its pages.
    let out = parley_cli(dir.path(), &["status", &id, "--nats-url", &url]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        status, state,
        "status differs from the state submit --wait wrote"
    );
    let out = parley_cli(
        dir.path(),
        &["status", &id, "--nats-url", &url, "--summary"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["status"], "completed");
    assert_eq!(summary["contributions"], 156);
    assert!(
        summary["stateBytes"].as_u64().unwrap() > 3 * 1024 * 1024,
        "{summary}"
    );
    // Refinement prompts carried eleven 24 KB critiques each: far over the 64 KiB limit,
    // so the tasks went by reference.
    let longest = c
        .fake
        .requests()
        .iter()
        .map(|r| r.prompt_text().len())
        .max()
        .unwrap();
    assert!(longest > 11 * BIG_REPLY_BYTES, "{longest}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_debates_expire_after_the_retention() {
    let c = Cluster::start().await;
    let _coord = c.coordinator_with(&[("PARLEY_RETENTION", "3s".into())]);
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let mut conn = redis(&c).await;
    let baseline = dbsize(&mut conn).await;

    const N: usize = 5;
    let problems: Vec<String> = (0..N).map(|i| format!("Design archive tier {i}")).collect();
    let mut ids = Vec::new();
    for p in &problems {
        ids.push(c.submit(&spec(p)).await);
    }
    // One more, cancelled at once: cancelled debates expire too.
    let cancelled = c.submit(&spec("Design a cancelled tier")).await;
    let r = c
        .request(
            "parley.debates.cancel",
            serde_json::to_vec(&json!({"debateId": cancelled})).unwrap(),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    for id in &ids {
        assert_complete(&c.wait_done(id, Duration::from_secs(60)).await);
    }
    c.wait_status(&cancelled, Duration::from_secs(30), |s| {
        s["status"] == "cancelled"
    })
    .await;
    let peak = dbsize(&mut conn).await;
    assert!(peak > baseline, "{peak} keys, baseline {baseline}");
    let settled = Instant::now();

    assert!(
        until(Duration::from_secs(30), || {
            let mut conn = conn.clone();
            async move { dbsize(&mut conn).await == baseline }
        })
        .await,
        "DBSIZE {}, baseline {baseline}",
        dbsize(&mut conn).await
    );
    eprintln!(
        "DBSIZE: baseline {baseline}, {peak} after {} finished debates, back to {baseline} {:?} later",
        N + 1,
        settled.elapsed()
    );
    // Status of an expired debate says so, naming the retention.
    let r = c.status(&ids[0]).await;
    assert_eq!(r["error"]["code"], "not_found", "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("retention") && message.contains("3s"),
        "{message}"
    );

    // The streams are bounded.
    let js = jetstream::new(c.client.clone());
    let tasks = js
        .get_stream("PARLEY_TASKS")
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    assert!(tasks.max_bytes > 0 && tasks.max_messages > 0 && tasks.max_age > Duration::ZERO);
    assert_eq!(tasks.discard, jetstream::stream::DiscardPolicy::New);
    let events = js
        .get_stream("PARLEY_EVENTS")
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    assert!(events.max_bytes > 0 && events.max_age > Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_an_inline_task_of_an_older_coordinator() {
    let c = Cluster::start().await;
    let _coord = c.coordinator();
    let _judge = c.worker("judge");
    let id = c.submit(&spec("Design a changelog service")).await;
    wait_queued_tasks(&c, 3).await;
    // Replace the three task references by the tasks themselves, as a coordinator of an
    // older build published them (and stored no bodies).
    purge_tasks(&c).await;
    let js = jetstream::new(c.client.clone());
    let mut conn = redis(&c).await;
    let key = format!("parley:{{{id}}}:tasks");
    let bodies: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(bodies.len(), 3);
    for (field, body) in &bodies {
        let _: i64 = redis::cmd("HDEL")
            .arg(&key)
            .arg(field)
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("{field}/inline").as_str());
        js.publish_with_headers("parley.tasks.agent", headers, body.clone().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let agent = c.worker("agent");
    assert_complete(&c.wait_done(&id, Duration::from_secs(45)).await);
    assert!(!agent.log().contains("is not stored"), "{}", agent.log());
    assert_eq!(c.fake.request_count(), 22);
}
