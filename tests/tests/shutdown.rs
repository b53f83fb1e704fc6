//! Bounded shutdown (issue 18): busy services stopped with SIGTERM while NATS or Redis is
//! down exit within their drain deadline, say in their exit status whether they gave up on
//! something, and lose nothing: once NATS and Redis are back and the services restarted,
//! every debate completes and no completed LLM call ran twice.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::time::{Duration, Instant};

use parley_tests::*;

/// Drain deadline of every service in these tests (`--drain-secs`, `PARLEY_DRAIN_SECS`).
const DRAIN: Duration = Duration::from_secs(6);
/// What a process may take beyond its deadline to exit (process teardown on a loaded
/// machine); the deadline itself is the requirement.
const MARGIN: Duration = Duration::from_secs(3);
/// LLM latency while the services are busy: calls are running when the signal comes, and
/// each one finishes well before the drain hands running tasks back (at 4.5 s).
const SLOW: Duration = Duration::from_millis(1500);
const DEBATES: usize = 5;

/// Which backend dies before the SIGTERM.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outage {
    Nats,
    Redis,
}

/// One stopped service: its name, how long after the SIGTERM it exited, its exit status
/// and its log.
struct Stopped {
    name: &'static str,
    after: Duration,
    code: Option<i32>,
    log: String,
}

/// Sends SIGTERM to every process at once and waits (off the runtime's threads, so the
/// fake LLM keeps serving) until each has exited or `limit` passed.
async fn terminate_all(procs: Vec<(&'static str, ChildProcess)>, limit: Duration) -> Vec<Stopped> {
    let signalled = Instant::now();
    let waits = procs.into_iter().map(|(name, mut p)| {
        p.terminate();
        tokio::task::spawn_blocking(move || {
            let status = p.wait_exit(limit);
            let after = signalled.elapsed();
            if status.is_none() {
                p.kill9();
            }
            Stopped {
                name,
                after,
                code: status.and_then(|s| s.code()),
                log: p.log(),
            }
        })
    });
    futures::future::join_all(waits)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect()
}

/// Busy coordinator and workers; `outage` kills NATS or Redis, then SIGTERM to all three;
/// then the backend comes back, the services restart and every debate must complete with
/// each of its 22 calls made exactly once.
async fn stop_during_outage(outage: Outage) {
    let mut c = Cluster::start().await;
    c.fake.set_latency(Latency::Fixed(SLOW));
    let drain = DRAIN.as_secs().to_string();
    let coordinator = c.coordinator_with(&[("PARLEY_DRAIN_SECS", drain.clone())]);
    let agent = c.worker_with("agent", &["--drain-secs", &drain], &[]);
    let judge = c.worker_with("judge", &["--drain-secs", &drain], &[]);

    let problems: Vec<String> = (0..DEBATES)
        .map(|i| format!("Design shard {i} of the billing pipeline (shutdown test)"))
        .collect();
    let mut ids = Vec::new();
    for p in &problems {
        ids.push(c.submit(&spec(p)).await);
    }
    // The agent worker runs 4 calls at once: all four are in flight.
    assert!(
        wait_until_async(Duration::from_secs(30), || c.fake.request_count() >= 4).await,
        "the agent worker never got busy"
    );
    match outage {
        Outage::Nats => c.nats.kill(),
        Outage::Redis => c.redis.kill(),
    }
    let stopped = terminate_all(
        vec![
            ("coordinator", coordinator),
            ("agent-worker", agent),
            ("judge-worker", judge),
        ],
        DRAIN + Duration::from_secs(30),
    )
    .await;
    for s in &stopped {
        eprintln!(
            "{outage:?} down: {} exited {:?} after {} ms",
            s.name,
            s.code,
            s.after.as_millis()
        );
    }
    for s in &stopped {
        assert!(
            s.after <= DRAIN + MARGIN,
            "{} took {} ms to exit (deadline {} s):\n{}",
            s.name,
            s.after.as_millis(),
            DRAIN.as_secs(),
            s.log
        );
        // An exit status, not a signal: 0 after a clean drain, 5 when it gave up.
        match s.code {
            Some(0) => assert!(!s.log.contains("drain incomplete"), "{}", s.log),
            Some(5) => assert!(s.log.contains("drain incomplete"), "{}", s.log),
            other => panic!("{} exited {other:?}:\n{}", s.name, s.log),
        }
    }
    let agent = &stopped[1];
    assert!(agent.log.contains("worker draining"), "{}", agent.log);
    if outage == Outage::Nats {
        // Its acks could not reach NATS: it says so (JetStream redelivers those tasks).
        assert_eq!(agent.code, Some(5), "{}", agent.log);
        assert!(agent.log.contains("confirming acks"), "{}", agent.log);
    } else {
        // The answers it got while Redis was down went to the stash; none was lost.
        assert!(agent.log.contains("stashed it"), "{}", agent.log);
        assert!(!agent.log.contains("the answer of task"), "{}", agent.log);
    }

    // The backend comes back; fresh services finish every debate.
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(50)));
    match outage {
        Outage::Nats => c.nats.restart().unwrap(),
        Outage::Redis => c.redis.restart().unwrap(),
    }
    let _coordinator = c.coordinator();
    let agent = c.worker("agent");
    let _judge = c.worker("judge");
    for id in &ids {
        let state = c.wait_done(id, Duration::from_secs(90)).await;
        assert_complete(&state);
    }
    if outage == Outage::Redis {
        assert!(
            agent.log().contains("result found in the stash"),
            "{}",
            agent.log()
        );
    }
    // Every call whose answer a worker got was made once: none ran again after the restart.
    assert_no_completed_call_repeated(&c.fake);
    assert_eq!(
        successful_calls_by_problem(&c.fake, &problems),
        vec![22; DEBATES],
        "successful calls per debate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_nats_down_exits_within_the_deadline_and_loses_nothing() {
    stop_during_outage(Outage::Nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_redis_down_exits_within_the_deadline_and_loses_nothing() {
    stop_during_outage(Outage::Redis).await;
}
