//! A debate whose owner checkpointed its end but failed before settling it (its final
//! events not published: JetStream had no stream leader; or Redis went away) is settled by
//! the coordinator that finds it in the running set: its final events are published, its
//! decision record stored, its keys set to expire, and it leaves the running set.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::time::Duration;

use parley_cluster::redis_store::RedisStore;
use parley_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debate_checkpointed_as_completed_but_not_settled_gets_its_final_events() {
    let c = Cluster::start().await;
    let _coord = c.coordinator();
    let _agent = c.worker("agent");
    let _judge = c.worker("judge");
    let done = c.submit(&spec("Design a ledger")).await;
    let state = c.wait_done(&done, Duration::from_secs(90)).await;
    assert_eq!(state["status"], "completed", "{state}");
    let finals = events(&c.client, &format!("parley.debates.{done}.events"))
        .await
        .unwrap();
    assert!(finals.last().is_some_and(|e| e.is_final()));

    // The same end, under another id, as its owner left it: checkpointed `completed` with
    // its last transition's events in the outbox, still in the running set, no lease, no
    // events published, no record.
    let store = RedisStore::connect(&c.redis.url()).await.unwrap();
    let last = if done.ends_with('0') { '1' } else { '0' };
    let id = format!("{}{last}", &done[..done.len() - 1]);
    assert_ne!(id, done);
    let spec_of = store.spec(&done).await.unwrap().unwrap();
    let mut cp = store.state(&done).await.unwrap().unwrap().state;
    cp.id = id.clone();
    let outbox: Vec<_> = finals[finals.len() - 3..]
        .iter()
        .cloned()
        .map(|mut e| {
            e.debate_id = id.clone();
            e
        })
        .collect();
    cp.engine.outbox = outbox.clone();
    assert!(store.put_spec(&id, &spec_of).await.unwrap());
    assert_eq!(store.save_state(&cp, 0).await.unwrap(), Some(1));
    store.mark_running(&id).await.unwrap();

    // The coordinator's scan finds it without an owner and settles it.
    let mut published = Vec::new();
    for _ in 0..60 {
        published = events(&c.client, &format!("parley.debates.{id}.events"))
            .await
            .unwrap();
        if !published.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let seqs: Vec<u64> = published.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = outbox.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, expected, "the outbox's events, once each");
    assert!(published.last().unwrap().is_final());
    // Then it leaves the running set.
    let mut conn = redis_connection(&c.redis.url()).await;
    let mut running = true;
    for _ in 0..100 {
        running = redis::cmd("SISMEMBER")
            .arg("parley:running")
            .arg(&id)
            .query_async(&mut conn)
            .await
            .unwrap();
        if !running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!running, "still in the running set");
    assert!(
        store.record(&id).await.unwrap().is_some(),
        "no decision record"
    );
    let ttl: i64 = redis::cmd("TTL")
        .arg(format!("parley:{{{id}}}:state"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0, "the settled debate's keys expire: TTL {ttl}");
}
