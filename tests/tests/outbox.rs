//! A coordinator that takes a debate over publishes the previous owner's last events (the
//! checkpoint's outbox) only when the events stream does not hold them yet: long after
//! that transition, past the stream's duplicate window, `Nats-Msg-Id` no longer drops the
//! copies, and the debate's events would restart partway through (the long nemesis soak
//! read 83 debates so, their first transition's events stored twice after their tasks
//! had queued for minutes and a coordinator died).
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use parley_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_past_the_duplicate_window_publishes_no_event_twice() {
    let c = Cluster::start().await;
    // The events stream with a 1 s duplicate window instead of 2 minutes, made before the
    // coordinator starts (which keeps a stream's duplicate window, setting only its limits
    // and replicas).
    let js = jetstream::new(c.client.clone());
    js.create_stream(stream::Config {
        name: parley_protocol::subjects::EVENTS_STREAM.into(),
        subjects: vec!["parley.debates.*.events".into()],
        duplicate_window: Duration::from_secs(1),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut first = c.coordinator();
    // No workers yet: the debate stays after its first transition, whose events (from
    // `debateStarted`, seq 1) are its checkpoint's outbox.
    let id = c.submit(&spec("Design a message queue")).await;
    let subject = format!("parley.debates.{id}.events");
    let mut published = Vec::new();
    for _ in 0..60 {
        published = events(&c.client, &subject).await.unwrap();
        if published
            .iter()
            .any(|e| matches!(e.kind, parley_protocol::EventKind::TaskDispatched { .. }))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(published.first().map(|e| e.seq), Some(1), "{published:?}");
    let cp = parley_cluster::redis_store::RedisStore::connect(&c.redis.url())
        .await
        .unwrap()
        .state(&id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        cp.state.engine.outbox.first().map(|e| e.seq),
        Some(1),
        "the first transition's events are the outbox"
    );
    // Past the duplicate window (the server forgets message ids on a timer of that
    // period), the owner dies; another coordinator takes the debate over.
    tokio::time::sleep(Duration::from_secs(4)).await;
    first.kill9();
    let _second = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let state = c.wait_done(&id, Duration::from_secs(120)).await;
    assert_eq!(state["status"], "completed", "{state}");
    assert_events_contiguous(&c, &id).await;
}
