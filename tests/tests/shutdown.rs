//! Bounded shutdown (issue 18): busy services stopped with SIGTERM while NATS or Redis is
//! down exit within their drain deadline, say in their exit status whether they gave up on
//! something, and lose nothing: once NATS and Redis are back and the services restarted,
//! every debate completes and no completed LLM call ran twice.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::time::{Duration, Instant};

use parley_testkit::wait_until;
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
        for line in log_lines_with_message(&s.log, "drain incomplete") {
            eprintln!("    gave up on: {}", line["fields"]["gave_up"]);
        }
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

// --- The CLI: Ctrl-C while NATS is down, and the end of `watch` ------------------------

/// `parley <args>` as a child process logging to a file.
fn parley_child(dir: &std::path::Path, args: &[&str]) -> ChildProcess {
    let mut cmd = std::process::Command::new(workspace_bin("parley"));
    cmd.current_dir(dir)
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY");
    ChildProcess::spawn(cmd, "parley").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_watch_and_submit_wait_exit_130_on_ctrl_c_while_nats_is_down() {
    let mut c = Cluster::start().await;
    c.fake.set_latency(Latency::Fixed(SLOW));
    let _coordinator = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    write_json(dir.path().join("cli.json"), &spec_config(None));
    let url = c.nats.url();

    let submit = parley_child(
        dir.path(),
        &[
            "submit",
            "Design a mail relay",
            "--config",
            "cli.json",
            "--nats-url",
            &url,
            "--wait",
        ],
    );
    let line = tokio::task::spawn_blocking({
        let log = submit.log_path().to_path_buf();
        move || {
            let found = wait_until(Duration::from_secs(30), || {
                std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Submitted debate "))
            });
            found.then(|| std::fs::read_to_string(&log).unwrap_or_default())
        }
    })
    .await
    .unwrap()
    .expect("submit --wait did not submit");
    let id = line
        .lines()
        .find_map(|l| l.strip_prefix("Submitted debate "))
        .unwrap()
        .trim()
        .to_string();
    let watch = parley_child(dir.path(), &["watch", &id, "--nats-url", &url]);
    // Both follow the debate's events: progress lines are out.
    for p in [&submit, &watch] {
        let log = p.log_path().to_path_buf();
        let following = tokio::task::spawn_blocking(move || {
            wait_until(Duration::from_secs(30), || {
                std::fs::read_to_string(&log).is_ok_and(|l| l.contains("[round 1/2]"))
            })
        })
        .await
        .unwrap();
        assert!(following, "{}", p.log());
    }

    c.nats.kill();
    send_signal(submit.pid(), "INT");
    send_signal(watch.pid(), "INT");
    let signalled = Instant::now();
    for (name, mut p) in [("submit --wait", submit), ("watch", watch)] {
        let (p, status) = tokio::task::spawn_blocking(move || {
            let s = p.wait_exit(Duration::from_secs(30));
            (p, s)
        })
        .await
        .unwrap();
        eprintln!(
            "NATS down: parley {name} exited {:?} {} ms after Ctrl-C",
            status.and_then(|s| s.code()),
            signalled.elapsed().as_millis()
        );
        let log = p.log();
        assert_eq!(status.and_then(|s| s.code()), Some(130), "{name}:\n{log}");
        assert!(
            log.contains(&format!("debate {id} goes on in the cluster")),
            "{name}:\n{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_ends_at_the_final_state_even_when_events_are_gone() {
    let c = Cluster::start().await;
    let _coordinator = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    let url = c.nats.url();
    let id = c.submit(&spec("Design a DNS cache")).await;
    assert_complete(&c.wait_done(&id, Duration::from_secs(60)).await);
    let js = async_nats::jetstream::new(c.client.clone());
    let stream = js.get_stream("PARLEY_EVENTS").await.unwrap();
    let subject = format!("parley.debates.{id}.events");

    // The final event is missing: watch replays the rest and stops on the status.
    let last = stream
        .get_last_raw_message_by_subject(&subject)
        .await
        .unwrap();
    assert!(stream.delete_message(last.sequence).await.unwrap());
    let out = parley_cli(dir.path(), &["watch", &id, "--nats-url", &url]).await;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("[round 2/2]"), "{err}");
    assert!(
        err.contains("its final event is not in the events stream"),
        "{err}"
    );
    assert!(err.contains("is completed"), "{err}");

    // Every event is gone (expired): watch says so and exits at once.
    stream.purge().filter(&subject).await.unwrap();
    let out = parley_cli(dir.path(), &["watch", &id, "--nats-url", &url]).await;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "Debate {id} is completed; its events are no longer in the events stream"
        )),
        "{err}"
    );
}
