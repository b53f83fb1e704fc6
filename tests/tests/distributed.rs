//! End-to-end tests of the distributed mode: real nats-server (JetStream) and redis-server,
//! the three service binaries as separate processes, and the fake LLM.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use parley_tests::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debate_submitted_over_nats_completes() {
    let c = Cluster::start().await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let id = c
        .submit(&spec("Design a rate limiter for a public API"))
        .await;
    assert!(parley_protocol::is_valid_debate_id(&id), "{id}");
    let state = c
        .wait_status(&id, Duration::from_secs(45), |s| {
            s["status"] == "completed" || s["status"] == "failed"
        })
        .await;
    assert_complete(&state);
    assert_eq!(state["id"], id.as_str());
    assert_eq!(state["currentRound"], 2);
    // 3 proposals + 6 critiques + 3 refinements, 6 critiques + 3 refinements, 1 synthesis.
    assert_eq!(c.fake.request_count(), 22);
    assert_no_completed_call_repeated(&c.fake);

    // The events stream holds the whole debate, ending with debateCompleted.
    let js = async_nats::jetstream::new(c.client.clone());
    let stream = js.get_stream("PARLEY_EVENTS").await.unwrap();
    let last = stream
        .get_last_raw_message_by_subject(&format!("parley.debates.{id}.events"))
        .await
        .unwrap();
    let evs: Vec<Value> = parley_protocol::decode_event_message(&last.payload).unwrap();
    let ev = evs.last().unwrap();
    assert_eq!(ev["type"], "debateCompleted", "{ev}");

    // A transition's events are one message: a JSON array of consecutive events, its
    // message id naming the first.
    let messages = event_messages(&c.client, &format!("parley.debates.{id}.events"))
        .await
        .unwrap();
    let (mut count, mut seq) = (0u64, 0u64);
    for m in messages {
        let body: Value = serde_json::from_slice(&m.payload).unwrap();
        let evs = body.as_array().expect("a message is an array of events");
        let first = evs[0]["seq"].as_u64().unwrap();
        let msg_id = m
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Msg-Id"))
            .map(|v| v.to_string());
        assert_eq!(msg_id, Some(format!("{id}/events/{first}")));
        for e in evs {
            seq += 1;
            assert_eq!(e["seq"], seq, "{body}");
        }
        count += 1;
    }
    assert_eq!(seq, evs.last().unwrap()["seq"].as_u64().unwrap());
    assert!(count < seq, "{count} messages for {seq} events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_submissions_get_error_replies() {
    let c = Cluster::start().await;
    let _coord = c.coordinator();
    let code = |v: &Value| {
        v["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {v}"))
            .to_string()
    };
    let msg = |v: &Value| {
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };

    let r = c
        .request("parley.debates.submit", b"this is not json".to_vec())
        .await;
    assert_eq!(code(&r), "invalid_json");

    let mut s = spec("p");
    s["schemaVersion"] = json!(2);
    let r = c
        .request("parley.debates.submit", serde_json::to_vec(&s).unwrap())
        .await;
    assert_eq!(code(&r), "unsupported_schema_version", "{r}");

    let mut s = spec("p");
    s["bogusField"] = json!(1);
    let r = c
        .request("parley.debates.submit", serde_json::to_vec(&s).unwrap())
        .await;
    assert_eq!(code(&r), "invalid_request");
    assert!(msg(&r).contains("bogusField"), "{r}");

    let mut s = spec("p");
    s["agents"] = json!((0..13).map(|i| json!({"id": format!("a{i}"), "name": "A", "role": "architect", "model": "m", "temperature": 0.5})).collect::<Vec<_>>());
    let r = c
        .request("parley.debates.submit", serde_json::to_vec(&s).unwrap())
        .await;
    assert_eq!(code(&r), "invalid_request");
    assert!(msg(&r).contains("agents") && msg(&r).contains("13"), "{r}");

    let r = c
        .request(
            "parley.debates.submit",
            serde_json::to_vec(&spec("   ")).unwrap(),
        )
        .await;
    assert_eq!(code(&r), "invalid_request");
    assert!(msg(&r).contains("problem"), "{r}");

    let big = spec(&"x".repeat(1_010_000));
    let r = c
        .request("parley.debates.submit", serde_json::to_vec(&big).unwrap())
        .await;
    assert_eq!(code(&r), "payload_too_large", "{}", msg(&r));

    let r = c.status("deb-20200101-000000-zzzzzz").await;
    assert_eq!(code(&r), "not_found", "{r}");

    // The service goes on: a good submission is accepted and stored.
    let id = c.submit(&spec("A good problem")).await;
    let s = c.status(&id).await;
    assert_eq!(s["id"], id.as_str(), "{s}");
    assert_eq!(s["problem"], "A good problem");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resent_submissions_with_one_idempotency_key_make_one_debate() {
    let c = Cluster::start().await;
    let _coord1 = c.coordinator();
    let _coord2 = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let mut s = spec("Design a payment ledger");
    s["idempotencyKey"] = json!("ledger-request-1");
    // Five copies at once, spread over both coordinators by the queue group.
    let ids = futures::future::join_all((0..5).map(|_| c.submit(&s))).await;
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    let state = c.wait_done(&ids[0], Duration::from_secs(45)).await;
    assert_complete(&state);
    // A copy sent after it finished still names the same debate.
    assert_eq!(c.submit(&s).await, ids[0]);
    assert_eq!(c.fake.request_count(), 22, "one debate ran, once");
}

/// Services started with nothing but `--settings parley.toml` (relative `config` path
/// included) run a debate; a settings file with a typo stops a service at start-up with
/// exit status 4, naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_take_their_settings_from_a_toml_file() {
    let c = Cluster::start().await;
    let dir = c.dir.path();
    std::fs::write(
        dir.join("parley.toml"),
        format!(
            "nats_url = \"{}\"\nredis_url = \"{}\"\nmetrics_addr = \"off\"\n\
             lease_ttl_ms = 2000\nconcurrency = 2\nack_wait_secs = 5\n\
             config = \"debate-config.json\"\n",
            c.nats.url(),
            c.redis.url()
        ),
    )
    .unwrap();
    let start = |bin: &str, settings: &str| {
        let mut cmd = std::process::Command::new(workspace_bin(bin));
        cmd.arg("--settings")
            .arg(dir.join(settings))
            .env("PARLEY_LOG", "info")
            .env_remove("PARLEY_METRICS_ADDR")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENROUTER_API_KEY");
        ChildProcess::spawn(cmd, bin).unwrap()
    };
    let procs = [
        start("parley-coordinator", "parley.toml"),
        start("parley-agent-worker", "parley.toml"),
        start("parley-judge-worker", "parley.toml"),
    ];
    for (p, ready) in procs
        .iter()
        .zip(["coordinator ready", "worker ready", "worker ready"])
    {
        assert!(
            p.wait_for_log_line(ready, Duration::from_secs(30))
                .is_some(),
            "{}",
            p.log()
        );
    }
    let id = c.submit(&spec("Design a config service")).await;
    assert_complete(&c.wait_done(&id, Duration::from_secs(45)).await);
    assert_eq!(c.fake.request_count(), 22);

    std::fs::write(dir.join("typo.toml"), "concurency = 4\n").unwrap();
    let mut bad = start("parley-agent-worker", "typo.toml");
    let status = bad
        .wait_exit(Duration::from_secs(10))
        .expect("a bad settings file must stop the worker");
    assert_eq!(status.code(), Some(4));
    assert!(bad.log().contains("concurency"), "{}", bad.log());
}

/// Submits [`spec`]`(problem)`; mid round 1 (some proposals or critiques stored, more in
/// flight) kills `coord` (-9) and starts another coordinator: (the debate's id, the new
/// coordinator).
async fn kill_coordinator_mid_round_1(
    c: &Cluster,
    coord: &mut ChildProcess,
    problem: &str,
) -> (String, ChildProcess) {
    let id = c.submit(&spec(problem)).await;
    c.wait_status(&id, Duration::from_secs(30), |s| contributions(s) >= 3)
        .await;
    coord.kill9();
    (id, c.coordinator())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_killed_mid_debate_resumes_without_repeating_calls() {
    let c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(300)));
    let mut coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let (id, _coord2) =
        kill_coordinator_mid_round_1(&c, &mut coord, "Design a job scheduler").await;

    let state = c
        .wait_status(&id, Duration::from_secs(50), |s| {
            s["status"] == "completed" || s["status"] == "failed"
        })
        .await;
    assert_complete(&state);
    assert_no_completed_call_repeated(&c.fake);
    assert_eq!(c.fake.request_count(), 22);
    // The events stream has every event once, with no gap, across the crash.
    assert_events_contiguous(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_worker_killed_mid_critique_loses_nothing() {
    let c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(1000)));
    let _coord = c.coordinator();
    let mut agent1 = c.worker("agent");
    let _agent2 = c.worker("agent");
    let _judge = c.worker("judge");

    let id = c.submit(&spec("Design a feature flag service")).await;
    // All proposals of round 1 stored: the critiques are running on both workers.
    c.wait_status(&id, Duration::from_secs(30), |s| {
        s["rounds"][0].is_object() && count(&s["rounds"][0], "proposal") == 3
    })
    .await;
    agent1.kill9();
    let killed_at = Instant::now();

    let state = c
        .wait_status(&id, Duration::from_secs(50), |s| {
            s["status"] == "completed" || s["status"] == "failed"
        })
        .await;
    assert_complete(&state);
    // Only the calls the killed worker had in flight (sent, answer never received) may be
    // sent again; every call whose answer a live worker got ran once.
    let reqs = c.fake.requests();
    let mut by_prompt: BTreeMap<(String, String), Vec<Instant>> = BTreeMap::new();
    for r in &reqs {
        by_prompt
            .entry((r.model.clone(), r.prompt_text()))
            .or_default()
            .push(r.received_at);
    }
    for ((model, _), times) in by_prompt.iter().filter(|(_, t)| t.len() > 1) {
        assert_eq!(times.len(), 2, "{model}: sent {} times", times.len());
        let first = times.iter().min().unwrap();
        // Latency 1 s: a call answered before the kill arrived more than 1 s before it.
        assert!(
            *first + Duration::from_millis(900) > killed_at,
            "{model}: a call answered before the kill was repeated"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_agent_fails_the_node_and_retry_completes() {
    let c = Cluster::start().await;
    c.fake.add_fault(Fault::Status {
        status: 500,
        body: r#"{"error":{"message":"model-sec is on fire"}}"#.into(),
        matching: Match::Model("model-sec".into()),
        times: None,
    });
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let mut s = spec("Design a cache");
    s["debate"]["retry"] =
        json!({"default": {"attempts": 2, "initialBackoffMs": 100, "maxBackoffMs": 100}});
    // A failing critique fails the node too (the default drops it; see the CLI's
    // `a_critique_that_keeps_failing_is_dropped_and_the_debate_completes`).
    s["debate"]["onAgentFailure"] = json!("fail");
    let id = c.submit(&s).await;
    let failed = c
        .wait_status(&id, Duration::from_secs(45), |s| {
            s["status"] == "failed" || s["status"] == "completed"
        })
        .await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let e = &failed["error"];
    // Security's proposal, or one of its critiques (dataflow scheduling), fails first.
    assert!(e["node"] == "proposal" || e["node"] == "critique", "{e}");
    assert_eq!(e["agentId"], "agent-security", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("500")
            || e["message"].as_str().unwrap().contains("on fire"),
        "{e}"
    );

    c.fake.clear_faults();
    let r = c
        .request(
            "parley.debates.retry",
            serde_json::to_vec(&json!({"debateId": id})).unwrap(),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    // The reply means "accepted": the retry is applied when a coordinator adopts the
    // debate, so wait for completion or for a *new* failure.
    let first_failure = failed["error"]["at"].clone();
    let state = c
        .wait_status(&id, Duration::from_secs(45), |s| {
            s["status"] == "completed"
                || (s["status"] == "failed" && s["error"]["at"] != first_failure)
        })
        .await;
    assert_complete(&state);
    assert_no_completed_call_repeated(&c.fake);
    let ok = c.fake.requests().iter().filter(|r| r.status == 200).count();
    assert_eq!(ok, 22, "each task completed exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_submit_wait_watch_status() {
    let c = Cluster::start().await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let dir = tempfile::tempdir().unwrap();
    write_json(dir.path().join("cli.json"), &spec_config(None));
    let url = c.nats.url();

    let (out, err) =
        submit_and_wait(dir.path(), "Design a rate limiter", "cli.json", &url, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Fake synthesized solution"));
    assert!(err.contains("[round 2/2]"), "{err}");
    let state: Value = read_json(dir.path().join("state.json"));
    assert_complete(&state);
    let id = state["id"].as_str().unwrap().to_string();
    assert_eq!(c.fake.request_count(), 22);

    let out = parley_cli(dir.path(), &["status", &id, "--nats-url", &url]).await;
    assert_eq!(out.status.code(), Some(0));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["status"], "completed");

    let out = parley_cli(dir.path(), &["watch", &id, "--nats-url", &url]).await;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("is completed"), "{err}");

    let out = parley_cli(
        dir.path(),
        &["status", "deb-20990101-000000-zzzzzz", "--nats-url", &url],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not_found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_debates_on_two_coordinators_each_complete_exactly_once() {
    let c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(20)));
    let coordinators = [c.coordinator(), c.coordinator()];
    let _agent1 = c.worker("agent");
    let _agent2 = c.worker("agent");
    let _judge = c.worker("judge");

    // Distinct problems, none a part of another: the fake's requests are grouped by them.
    let problems: Vec<String> = (0..20)
        .map(|i| format!("Design service {i:02} of the fleet (cluster test)"))
        .collect();
    let specs: Vec<Value> = problems.iter().map(|p| spec(p)).collect();
    let ids: Vec<String> = futures::future::join_all(specs.iter().map(|s| c.submit(s))).await;
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 20, "{ids:?}");

    for (id, problem) in ids.iter().zip(&problems) {
        let state = c.wait_done(id, Duration::from_secs(50)).await;
        assert_complete(&state);
        assert_eq!(state["problem"], problem.as_str());
    }
    // Each debate made exactly its 22 calls, and no call ran twice.
    let per_debate = successful_calls_by_problem(&c.fake, &problems);
    assert_eq!(per_debate, vec![22; 20], "successful calls per debate");
    assert_no_completed_call_repeated(&c.fake);
    assert_eq!(
        c.fake.request_count(),
        20 * 22,
        "no call failed or was retried"
    );

    // Which coordinator ran which debate (informational: the submit queue group picks a
    // replica at random, so both almost surely got some; only coverage is asserted).
    let mut owners: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, coordinator) in coordinators.iter().enumerate() {
        for line in log_lines_with_message(&coordinator.log(), "debate adopted") {
            let id = line["fields"]["debate"]
                .as_str()
                .or_else(|| line["debate"].as_str())
                .unwrap_or_default()
                .to_string();
            owners.entry(id).or_default().push(i);
        }
    }
    for id in &ids {
        assert!(
            owners.contains_key(id),
            "no coordinator logged adopting {id}"
        );
    }
    let per_coordinator: Vec<usize> = (0..2)
        .map(|i| owners.values().filter(|o| o.contains(&i)).count())
        .collect();
    eprintln!("debates adopted per coordinator: {per_coordinator:?}");
    // The queue group picks a replica at random per submission: one replica getting all 20
    // has probability 2^-19, and the other one's periodic scan can only add adoptions.
    assert!(
        per_coordinator.iter().all(|&n| n > 0),
        "one coordinator ran every debate: {per_coordinator:?}"
    );
}

/// A debate survives a Redis crash and then a NATS crash (both restarted on the same port
/// with their data), and the cluster takes new work afterwards.
async fn redis_and_nats_restart() {
    const LATENCY: Duration = Duration::from_millis(400);
    let mut c = Cluster::start().await;
    c.fake.set_latency(Latency::Fixed(LATENCY));
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let problems = [
        "Design a payment ledger".to_string(),
        "Design an audit log for the payment ledger".to_string(),
    ];
    let id = c.submit(&spec(&problems[0])).await;
    // Round 1 proposals stored, critiques in flight.
    c.wait_status(&id, Duration::from_secs(30), |s| contributions(s) >= 3)
        .await;

    // Redis crashes (append-only file, fsync always) and comes back on the same port.
    c.redis.kill();
    tokio::time::sleep(Duration::from_millis(700)).await;
    c.redis.restart().unwrap();
    let mid = c
        .wait_status(&id, Duration::from_secs(40), |s| {
            contributions(s) >= 12 || is_done(s)
        })
        .await;
    assert_ne!(mid["status"], "failed", "{mid}");

    // Then NATS crashes and comes back with its JetStream store (tasks, consumers, events).
    c.nats.kill();
    tokio::time::sleep(Duration::from_millis(700)).await;
    c.nats.restart().unwrap();

    let state = c.wait_done(&id, Duration::from_secs(50)).await;
    assert_complete(&state);

    // The cluster still takes new work.
    let id2 = c.submit(&spec(&problems[1])).await;
    let state2 = c.wait_done(&id2, Duration::from_secs(50)).await;
    assert_complete(&state2);

    let sends: BTreeSet<(String, String)> = c
        .fake
        .requests()
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| (r.model.clone(), r.prompt_text()))
        .collect();
    // No call whose answer reached a worker ran twice: a worker that cannot store a
    // result while Redis is down keeps it and retries.
    assert_no_completed_call_repeated(&c.fake);
    // Every task completed: 22 distinct calls per debate.
    let distinct = |p: &str| {
        let needle = format!("Problem:\n{p}\n");
        sends.iter().filter(|(_, t)| t.contains(&needle)).count()
    };
    assert_eq!(distinct(&problems[0]), 22);
    assert_eq!(distinct(&problems[1]), 22);
    // The debate submitted after the restarts ran each call exactly once.
    assert_eq!(successful_calls_by_problem(&c.fake, &problems)[1], 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_and_nats_restart_mid_debate() {
    redis_and_nats_restart().await;
}

/// Tasks a worker's log says it finished (`task done`), by task id.
fn tasks_done(worker: &ChildProcess) -> Vec<String> {
    log_lines_with_message(&worker.log(), "task done")
        .iter()
        .filter_map(|l| l["fields"]["task"].as_str().map(str::to_string))
        .collect()
}

/// Waits (off the runtime's threads, so the fake LLM keeps serving) for a process to exit.
async fn wait_exit(
    mut p: ChildProcess,
    timeout: Duration,
) -> (ChildProcess, Option<std::process::ExitStatus>) {
    tokio::task::spawn_blocking(move || {
        let status = p.wait_exit(timeout);
        (p, status)
    })
    .await
    .unwrap()
}

/// A cluster whose only agent worker (`--drain-secs drain_secs`) got SIGTERM while it held
/// the debate's three proposal calls (each `latency` long). Returns the cluster (with its
/// coordinator and judge worker), the terminated worker and the debate id.
async fn sigterm_mid_proposals(
    latency: Duration,
    drain_secs: &str,
    problem: &str,
) -> (Cluster, [ChildProcess; 2], ChildProcess, String) {
    let c = Cluster::start().await;
    c.fake.set_latency(Latency::Fixed(latency));
    let services = [c.coordinator(), c.worker("judge")];
    let mut draining = c.worker_with("agent", &["--drain-secs", drain_secs], &[]);
    let id = c.submit(&spec(problem)).await;
    // The three proposals run on the only agent worker.
    assert!(wait_until_async(Duration::from_secs(30), || c.fake.request_count() >= 3).await);
    draining.terminate();
    (c, services, draining, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_worker_without_losing_tasks() {
    // Long calls: the SIGTERM lands while the worker holds three of them, and the worker's
    // last pull (1 s) expires before any new task exists.
    let (c, _services, draining, id) = sigterm_mid_proposals(
        Duration::from_millis(2000),
        "10",
        "Design a notification service",
    )
    .await;
    let sent_before_sigterm = c.fake.request_count();
    assert_eq!(sent_before_sigterm, 3);
    // Another replica takes over the queue.
    let _replica = c.worker("agent");

    // It finishes its calls and exits 0 within its drain deadline (10 s; 2 s calls).
    let (draining, status) = wait_exit(draining, Duration::from_secs(15)).await;
    let log = draining.log();
    assert!(
        status.is_some_and(|s| s.success()),
        "exit {status:?}:\n{log}"
    );
    assert!(
        log.contains("worker draining") && log.contains("worker stopped"),
        "{log}"
    );
    assert!(!log.contains("drain deadline passed"), "{log}");
    // It completed exactly the calls it had in flight, and pulled nothing after SIGTERM.
    let done = tasks_done(&draining);
    assert_eq!(done.len(), sent_before_sigterm, "{done:?}");
    assert!(done.iter().all(|t| t.contains("/1/propose/")), "{done:?}");

    let state = c.wait_done(&id, Duration::from_secs(50)).await;
    assert_complete(&state);
    // Nothing lost, nothing run twice: each of the 22 calls exactly once.
    assert_no_completed_call_repeated(&c.fake);
    assert_eq!(c.fake.request_count(), 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_past_the_drain_deadline_hands_running_tasks_back() {
    let (c, _services, draining, id) =
        sigterm_mid_proposals(Duration::from_millis(4000), "1", "Design a search index").await;
    // Calls sent from now on answer quickly.
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(100)));
    let _replica = c.worker("agent");

    // The 4 s calls outlive the 1 s drain: the worker gives them back and exits 0.
    let (draining, status) = wait_exit(draining, Duration::from_secs(10)).await;
    let log = draining.log();
    assert!(
        status.is_some_and(|s| s.success()),
        "exit {status:?}:\n{log}"
    );
    assert!(log.contains("drain deadline passed"), "{log}");
    assert!(tasks_done(&draining).is_empty(), "{log}");

    // The replica runs the handed-back proposals and the rest of the debate.
    let state = c.wait_done(&id, Duration::from_secs(50)).await;
    assert_complete(&state);
    // The three abandoned proposal calls were sent again (their answers never reached a
    // worker); every other call ran once.
    let reqs = c.fake.requests();
    let mut sends: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in &reqs {
        *sends.entry((r.model.clone(), r.prompt_text())).or_default() += 1;
    }
    let twice: Vec<_> = sends.iter().filter(|(_, n)| **n > 1).collect();
    assert_eq!(twice.len(), 3, "{twice:?}");
    assert!(twice.iter().all(|(_, n)| **n == 2), "{twice:?}");
    for (key, _) in &twice {
        assert!(
            reqs[..3]
                .iter()
                .any(|r| r.model == key.0 && r.prompt_text() == key.1),
            "a call other than the abandoned proposals ran twice: {}",
            key.0
        );
    }
    assert_eq!(reqs.len(), 25);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_takeover_redispatches_with_the_same_attempt() {
    let c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(300)));
    let mut coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let (id, _coord2) =
        kill_coordinator_mid_round_1(&c, &mut coord, "Design a webhook relay").await;
    let state = c.wait_done(&id, Duration::from_secs(50)).await;
    assert_complete(&state);

    // No task failed, so every task ran as attempt 1, before and after the takeover: the
    // resume re-dispatches what was in flight with the same attempt (and message id).
    let events = events(&c.client, &format!("parley.debates.{id}.events"))
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, parley_protocol::EventKind::DebateResumed)),
        "no takeover happened"
    );
    let failed = events
        .iter()
        .filter(|e| matches!(e.kind, parley_protocol::EventKind::TaskFailed { .. }))
        .count();
    assert_eq!(failed, 0);
    let bumped: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            parley_protocol::EventKind::TaskDispatched {
                task_id, attempt, ..
            } if *attempt > 1 => Some(format!("{task_id} attempt {attempt}")),
            _ => None,
        })
        .collect();
    assert!(
        bumped.is_empty(),
        "dispatched again with a higher attempt although nothing failed: {bumped:#?}"
    );
}
