//! The parts of the Redis store that keep debates finite, against a real redis-server:
//! task bodies, results that never outlive their debate, the cancel mark, the failure
//! count, retention, status snapshots and the dead-letter list.

use std::time::Duration;

use chrono::Utc;
use parley_cluster::redis_store::{Stored, DEAD_LETTERS_KEPT};
use parley_cluster::RedisStore;
use parley_engine::Machine;
use parley_protocol::{DebateSpec, TaskResult};
use parley_testkit::RedisServer;
use parley_tests::{redis_connection, task_result, two_agent_spec};

const ID: &str = "deb-20260101-000000-aaaaaa";

fn spec() -> DebateSpec {
    two_agent_spec()
}

fn result(task: &str, attempt: u32, ok: bool) -> TaskResult {
    task_result(ID, task, attempt, ok)
}

async fn conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis_connection(&redis.url()).await
}

async fn ttl_ms(c: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(c).await.unwrap()
}

async fn store_with_debate(redis: &RedisServer) -> RedisStore {
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    store.put_spec(ID, &spec()).await.unwrap();
    let m = Machine::new(ID.into(), spec(), Utc::now());
    store.save_state(m.state(), 0).await.unwrap();
    store
}

#[tokio::test]
async fn task_bodies_and_results_by_reference() {
    let redis = RedisServer::start().unwrap();
    let store = store_with_debate(&redis).await;
    let t = format!("{ID}/1/propose/a");
    store
        .put_task_bodies(
            ID,
            &[
                (format!("{t}#1"), "{\"body\":1}".into()),
                (format!("{t}#2"), "{\"body\":2}".into()),
            ],
        )
        .await
        .unwrap();
    let l = store.lookup_task(ID, &t, 2).await.unwrap();
    assert!(l.debate_exists && !l.cancelled && l.done.is_none() && l.answered.is_none());
    assert_eq!(l.body.as_deref(), Some("{\"body\":2}"));

    // A failure answers its attempt and drops that attempt's body only.
    assert_eq!(
        store.store_result(&result(&t, 1, false)).await.unwrap(),
        Stored::New
    );
    let l = store.lookup_task(ID, &t, 1).await.unwrap();
    assert!(l.answered.is_some() && l.body.is_none());
    assert!(store.lookup_task(ID, &t, 2).await.unwrap().body.is_some());
    // A success drops every body of the task; the first success wins.
    assert_eq!(
        store.store_result(&result(&t, 2, true)).await.unwrap(),
        Stored::New
    );
    assert_eq!(
        store.store_result(&result(&t, 3, true)).await.unwrap(),
        Stored::Existing
    );
    let l = store.lookup_task(ID, &t, 2).await.unwrap();
    assert_eq!(l.done.unwrap().attempt, 2);
    assert!(l.body.is_none());
    // Only the fields asked for come back.
    let got = store
        .results_of(ID, &[t.clone(), format!("{t}#1"), "nope".into()])
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
}

/// A result whose attempt number is out of range (a forged stash entry once carried
/// u32::MAX, and the store script looped once per attempt: minutes of `BUSY`) is refused
/// before any script runs; the script's loop is bounded on its own too.
#[tokio::test]
async fn a_huge_attempt_number_is_refused_before_any_script_runs() {
    let redis = RedisServer::start().unwrap();
    let store = store_with_debate(&redis).await;
    let mut c = conn(&redis).await;
    let t = format!("{ID}/1/propose/a");
    for attempt in [u32::MAX, parley_protocol::limits::MAX_TASK_ATTEMPT + 1, 0] {
        let e = store
            .store_result(&result(&t, attempt, true))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("attempt"), "{e}");
    }
    let stored: bool = redis::cmd("HEXISTS")
        .arg(format!("parley:{{{ID}}}:results"))
        .arg(&t)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(!stored);
    // The largest valid attempt runs the script at once, and drops that attempt's body.
    let last = parley_protocol::limits::MAX_TASK_ATTEMPT;
    store
        .put_task_bodies(ID, &[(format!("{t}#{last}"), "{}".into())])
        .await
        .unwrap();
    assert_eq!(
        store.store_result(&result(&t, last, true)).await.unwrap(),
        Stored::New
    );
    assert!(store
        .lookup_task(ID, &t, last)
        .await
        .unwrap()
        .body
        .is_none());
    let pong: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn a_result_never_outlives_its_debate() {
    let redis = RedisServer::start().unwrap();
    let store = store_with_debate(&redis).await;
    let mut c = conn(&redis).await;
    let t = format!("{ID}/1/propose/a");

    // The debate finished: every key expires after the retention. A later result takes the
    // state's remaining time to live, even when it creates the results hash.
    store
        .expire_debate(ID, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(ttl_ms(&mut c, &format!("parley:{{{ID}}}:spec")).await > 50_000);
    assert_eq!(
        store.state_ttl(ID).await.unwrap().map(|d| d.as_secs() > 50),
        Some(true)
    );
    store.store_result(&result(&t, 1, true)).await.unwrap();
    let results_ttl = ttl_ms(&mut c, &format!("parley:{{{ID}}}:results")).await;
    assert!(results_ttl > 50_000, "{results_ttl}");

    // A retry keeps it again.
    store.persist_debate(ID).await.unwrap();
    assert_eq!(
        ttl_ms(&mut c, &format!("parley:{{{ID}}}:results")).await,
        -1
    );
    assert_eq!(store.state_ttl(ID).await.unwrap(), None);

    // Once the debate is gone, nothing is written.
    store
        .expire_debate(ID, Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        store
            .store_result(&result(&format!("{ID}/1/propose/b"), 1, true))
            .await
            .unwrap(),
        Stored::DebateGone
    );
    // DBSIZE counts expired keys until Redis reclaims them (ten times a second).
    let mut size = -1;
    for _ in 0..100 {
        size = redis::cmd("DBSIZE").query_async(&mut c).await.unwrap();
        if size == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(size, 0);
    assert!(!store.lookup_task(ID, &t, 1).await.unwrap().debate_exists);
}

#[tokio::test]
async fn cancel_marks_and_the_failure_count() {
    let redis = RedisServer::start().unwrap();
    let store = store_with_debate(&redis).await;
    assert!(store.acquire_lease(ID, "c1", 60_000).await.unwrap());
    assert_eq!(
        store
            .renew_lease_checking_cancel(ID, "c1", 60_000)
            .await
            .unwrap(),
        Some(false)
    );
    store.mark_cancelled(ID).await.unwrap();
    assert!(store.cancel_requested(ID).await.unwrap());
    assert_eq!(
        store
            .renew_lease_checking_cancel(ID, "c1", 60_000)
            .await
            .unwrap(),
        Some(true)
    );
    assert_eq!(
        store
            .renew_lease_checking_cancel(ID, "c2", 60_000)
            .await
            .unwrap(),
        None,
        "not the owner"
    );
    assert!(
        store
            .lookup_task(ID, &format!("{ID}/1/propose/a"), 1)
            .await
            .unwrap()
            .cancelled
    );

    // Failures count up while the debate makes no progress...
    assert_eq!(store.record_actor_failure(ID, "e1").await.unwrap(), 1);
    assert_eq!(store.record_actor_failure(ID, "e2").await.unwrap(), 2);
    // ...and start again once a result was stored in between.
    store
        .store_result(&result(&format!("{ID}/1/propose/a"), 1, true))
        .await
        .unwrap();
    assert_eq!(store.record_actor_failure(ID, "e3").await.unwrap(), 1);
    assert_eq!(store.record_actor_failure(ID, "e4").await.unwrap(), 2);
    assert_eq!(
        store.actor_failures(ID).await.unwrap(),
        (2, Some("e4".into()))
    );
    store.clear_actor_failures(ID).await.unwrap();
    assert_eq!(store.actor_failures(ID).await.unwrap(), (0, None));
}

#[tokio::test]
async fn snapshots_in_pages_and_a_bounded_dead_letter_list() {
    let redis = RedisServer::start().unwrap();
    let store = store_with_debate(&redis).await;
    let pages: Vec<String> = (0..150).map(|i| format!("page {i}")).collect();
    let refs: Vec<&str> = pages.iter().map(String::as_str).collect();
    store
        .put_snapshot(ID, 7, &refs, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        store.snapshot_page(ID, 7, 149).await.unwrap(),
        Some(("page 149".into(), 150))
    );
    assert_eq!(store.snapshot_page(ID, 7, 150).await.unwrap(), None);
    assert_eq!(store.snapshot_page(ID, 8, 0).await.unwrap(), None);
    // Taken again (two readers at once): replaced, not appended.
    store
        .put_snapshot(ID, 7, &refs, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(store.snapshot_page(ID, 7, 0).await.unwrap().unwrap().1, 150);
    let mut c = conn(&redis).await;
    assert!(ttl_ms(&mut c, &format!("parley:{{{ID}}}:snapshot:7")).await > 50_000);

    for i in 0..(DEAD_LETTERS_KEPT + 5) {
        store.record_dead_letter(&format!("{i}")).await.unwrap();
    }
    let newest = store.dead_letters(2).await.unwrap();
    assert_eq!(
        newest,
        vec![
            format!("{}", DEAD_LETTERS_KEPT + 4),
            format!("{}", DEAD_LETTERS_KEPT + 3)
        ]
    );
    let len: i64 = redis::cmd("LLEN")
        .arg("parley:deadletter")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(len, DEAD_LETTERS_KEPT as i64);
}
