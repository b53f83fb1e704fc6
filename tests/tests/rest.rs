//! Debates at rest (see `parley_coordinator::supervisor`): a debate whose calls are slow
//! leaves memory while it waits and wakes on its results, without repeating a call or
//! losing an event; a coordinator killed while its debates rest loses nothing; a resting
//! debate answers status and cancel.

use std::time::Duration;

use parley_tests::*;
use serde_json::json;

/// A coordinator whose idle debates rest after a second, logging each rest and wake.
fn resting_coordinator(c: &Cluster) -> ChildProcess {
    c.coordinator_with(&[
        ("PARLEY_REST_AFTER_SECS", "1".into()),
        (
            "PARLEY_LOG",
            "info,parley_coordinator::supervisor=debug".into(),
        ),
    ])
}

/// Waits until the coordinator put a debate to rest.
fn wait_for_rest(coord: &ChildProcess) {
    assert!(
        coord
            .wait_for_log_line("debate at rest", Duration::from_secs(30))
            .is_some(),
        "the debate never rested:\n{}",
        coord.log()
    );
}

fn times(p: &ChildProcess, needle: &str) -> usize {
    p.log().matches(needle).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debates_rest_while_calls_are_slow_and_complete_without_repeating_calls() {
    let c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(2500)));
    let coord = resting_coordinator(&c);
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let ids = [
        c.submit(&spec("Design a rate limiter")).await,
        c.submit(&spec("Design a message queue")).await,
    ];
    for id in &ids {
        let state = c.wait_done(id, Duration::from_secs(180)).await;
        assert_complete(&state);
        assert_events_contiguous(&c, id).await;
    }
    assert_no_completed_call_repeated(&c.fake);
    assert_eq!(c.fake.request_count(), 44);
    let (rests, wakes) = (
        times(&coord, "debate at rest"),
        times(&coord, "waking the debate"),
    );
    assert!(rests >= 2 && wakes >= 2, "rests {rests}, wakes {wakes}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_while_its_debates_rest_loses_nothing() {
    let c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(3000)));
    let mut coord = resting_coordinator(&c);
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");

    let id = c.submit(&spec("Design a job scheduler")).await;
    wait_for_rest(&coord);
    coord.kill9();
    // Found through the lease index once its lease expires.
    let _coord2 = c.coordinator();
    let state = c.wait_done(&id, Duration::from_secs(180)).await;
    assert_complete(&state);
    assert_no_completed_call_repeated(&c.fake);
    assert_eq!(c.fake.request_count(), 22);
    assert_events_contiguous(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resting_debate_answers_status_and_cancel() {
    let c = Cluster::start().await;
    // No workers: the debate waits for its proposals.
    let coord = resting_coordinator(&c);
    let id = c.submit(&spec("Design a cache")).await;
    wait_for_rest(&coord);
    let state = c.status(&id).await;
    assert_eq!(state["status"], "running", "{state}");

    let reply = c
        .request(
            "parley.debates.cancel",
            serde_json::to_vec(&json!({ "debateId": id })).unwrap(),
        )
        .await;
    assert_eq!(reply["accepted"], "cancel", "{reply}");
    let state = c.wait_done(&id, Duration::from_secs(30)).await;
    assert_eq!(state["status"], "cancelled", "{state}");
    assert!(times(&coord, "waking the debate") >= 1, "{}", coord.log());

    // Settled: no longer running, listed nowhere, its lease released.
    let mut conn = redis_connection(&c.redis.url()).await;
    let running: bool = redis::cmd("SISMEMBER")
        .arg("parley:running")
        .arg(&id)
        .query_async(&mut conn)
        .await
        .unwrap();
    let indexed: Option<f64> = redis::cmd("ZSCORE")
        .arg("parley:leases")
        .arg(&id)
        .query_async(&mut conn)
        .await
        .unwrap();
    let lease: Option<String> = redis::cmd("GET")
        .arg(format!("parley:{{{id}}}:lease"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((running, indexed, lease), (false, None, None));
}
