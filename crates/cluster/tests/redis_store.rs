//! The Redis checkpoint store against a real redis-server.

use chrono::Utc;
use parley_cluster::RedisStore;
use parley_engine::Machine;
use parley_protocol::{DebateSpec, TaskOutcome, TaskResult};
use parley_testkit::RedisServer;
use parley_tests::{task_result, two_agent_spec};

fn spec() -> DebateSpec {
    two_agent_spec()
}

fn result(task: &str, attempt: u32, ok: bool) -> TaskResult {
    task_result("deb-1", task, attempt, ok)
}

#[tokio::test]
async fn spec_state_results_leases_and_idempotency() {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::connect(&redis.url()).await.unwrap();

    // The spec is written once.
    assert!(store.put_spec("deb-1", &spec()).await.unwrap());
    let mut other = spec();
    other.problem = "changed".into();
    assert!(!store.put_spec("deb-1", &other).await.unwrap());
    assert_eq!(store.spec("deb-1").await.unwrap().unwrap().problem, "p");
    assert!(store.spec("deb-2").await.unwrap().is_none());

    // State: compare-and-set on the version.
    let m = Machine::new("deb-1".into(), spec(), Utc::now());
    assert!(store.state("deb-1").await.unwrap().is_none());
    assert_eq!(store.save_state(m.state(), 0).await.unwrap(), Some(1));
    assert_eq!(
        store.save_state(m.state(), 0).await.unwrap(),
        None,
        "stale writer refused"
    );
    assert_eq!(store.save_state(m.state(), 1).await.unwrap(), Some(2));
    let cp = store.state("deb-1").await.unwrap().unwrap();
    assert_eq!(cp.version, 2);
    assert_eq!(&cp.state, m.state());

    // Results: failures per attempt, the first success wins.
    assert!(store.put_result(&result("t1", 1, false)).await.unwrap());
    assert!(store.ok_result("deb-1", "t1").await.unwrap().is_none());
    assert!(matches!(
        store
            .result_of("deb-1", "t1", 1)
            .await
            .unwrap()
            .unwrap()
            .outcome,
        TaskOutcome::Error(_)
    ));
    assert!(store.put_result(&result("t1", 2, true)).await.unwrap());
    assert!(
        !store.put_result(&result("t1", 3, true)).await.unwrap(),
        "second success dropped"
    );
    let r = store.ok_result("deb-1", "t1").await.unwrap().unwrap();
    assert_eq!(r.attempt, 2);
    assert_eq!(
        store
            .result_of("deb-1", "t1", 1)
            .await
            .unwrap()
            .unwrap()
            .attempt,
        2
    );
    assert_eq!(store.results("deb-1").await.unwrap().len(), 2);

    // Leases: only the owner renews or releases.
    assert!(store.acquire_lease("deb-1", "c1", 60_000).await.unwrap());
    assert!(!store.acquire_lease("deb-1", "c2", 60_000).await.unwrap());
    assert!(!store.renew_lease("deb-1", "c2", 60_000).await.unwrap());
    assert!(!store.release_lease("deb-1", "c2").await.unwrap());
    assert!(store.renew_lease("deb-1", "c1", 60_000).await.unwrap());
    assert_eq!(
        store.lease_owner("deb-1").await.unwrap().as_deref(),
        Some("c1")
    );
    assert!(store.release_lease("deb-1", "c1").await.unwrap());
    assert!(store.acquire_lease("deb-1", "c2", 100).await.unwrap());
    // An expired lease is free again.
    let mut free = false;
    for _ in 0..50 {
        if store.acquire_lease("deb-1", "c3", 60_000).await.unwrap() {
            free = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(free);

    // Running set and idempotency keys.
    store.mark_running("deb-1").await.unwrap();
    store.mark_running("deb-2").await.unwrap();
    store.unmark_running("deb-2").await.unwrap();
    assert_eq!(store.running().await.unwrap(), vec!["deb-1".to_string()]);
    assert_eq!(
        store.bind_idempotency_key("k", "deb-1").await.unwrap(),
        "deb-1"
    );
    assert_eq!(
        store.bind_idempotency_key("k", "deb-9").await.unwrap(),
        "deb-1"
    );
}

/// The lease index: ownerless debates are the ones waiting for an owner or whose lease
/// expired; a renewal pass renews only what its owner holds and reports cancels and the
/// number of stored results; a running debate missing from the index is added back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_index_lists_only_debates_without_an_owner() {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let ownerless = || async { store.ownerless(100).await.unwrap() };

    // Accepted: waiting for an owner.
    store.mark_running("deb-1").await.unwrap();
    store.mark_running("deb-2").await.unwrap();
    assert_eq!(ownerless().await, vec!["deb-1", "deb-2"]);
    // Owned: not listed; released: listed again; settled: gone.
    assert!(store.acquire_lease("deb-1", "c1", 60_000).await.unwrap());
    assert!(store.acquire_lease("deb-2", "c1", 60_000).await.unwrap());
    assert!(ownerless().await.is_empty());
    assert!(store.release_lease("deb-2", "c1").await.unwrap());
    assert_eq!(ownerless().await, vec!["deb-2"]);
    store.unmark_running("deb-2").await.unwrap();
    assert!(ownerless().await.is_empty());
    // Marking a running debate again keeps its owner's expiry.
    store.mark_running("deb-1").await.unwrap();
    assert!(ownerless().await.is_empty());

    // A pass: held, lost, cancelled; results counted.
    store.mark_running("deb-3").await.unwrap();
    assert!(store.acquire_lease("deb-3", "c2", 60_000).await.unwrap());
    store.mark_running("deb-4").await.unwrap();
    assert!(store.acquire_lease("deb-4", "c1", 60_000).await.unwrap());
    store.mark_cancelled("deb-4").await.unwrap();
    let m = Machine::new("deb-1".into(), spec(), Utc::now());
    store.save_state(m.state(), 0).await.unwrap();
    store
        .put_result(&task_result("deb-1", "t1", 1, true))
        .await
        .unwrap();
    store
        .put_result(&task_result("deb-1", "t2", 1, false))
        .await
        .unwrap();
    let ids: Vec<String> = ["deb-1", "deb-3", "deb-4"].map(String::from).to_vec();
    let checks: Vec<_> = store
        .keep_leases(&ids, "c1", 60_000)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(checks[0].held && !checks[0].cancel);
    assert_eq!(checks[0].results, 2);
    assert!(!checks[1].held, "deb-3 is c2's");
    assert!(checks[2].held && checks[2].cancel);
    assert_eq!(checks[2].results, 0);

    // An expired lease makes its debate ownerless; the owner's next pass reports it lost.
    assert!(store.release_lease("deb-3", "c2").await.unwrap());
    assert!(store.acquire_lease("deb-3", "c2", 100).await.unwrap());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(ownerless().await, vec!["deb-3"]);
    let lost = store.keep_leases(&ids[1..2], "c2", 60_000).await;
    assert!(!lost[0].as_ref().unwrap().held);

    // A stale entry is brought up to date from the lease key.
    assert!(store.acquire_lease("deb-3", "c3", 60_000).await.unwrap());
    let mut conn = parley_tests::redis_connection(&redis.url()).await;
    let _: i64 = redis::cmd("ZADD")
        .arg("parley:leases")
        .arg(0)
        .arg("deb-3")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(ownerless().await, vec!["deb-3"]);
    store.reindex_lease("deb-3").await.unwrap();
    assert!(ownerless().await.is_empty());

    // A running debate missing from the index (an older build's) is added back, once.
    let _: i64 = redis::cmd("SADD")
        .arg("parley:running")
        .arg("deb-5")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(store.reconcile_lease_index().await.unwrap(), 1);
    assert_eq!(store.reconcile_lease_index().await.unwrap(), 0);
    assert_eq!(ownerless().await, vec!["deb-5"]);
}

/// A checkpoint marked with a newer format than this build's is refused as such (not as
/// corrupt); one without a mark (an older build's) or with this build's reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_of_a_newer_format_is_refused_as_such() {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let m = Machine::new("deb-f".into(), spec(), Utc::now());
    assert_eq!(store.save_state(m.state(), 0).await.unwrap(), Some(1));
    let mut conn = parley_tests::redis_connection(&redis.url()).await;
    let format: Option<u32> = redis::cmd("HGET")
        .arg("parley:{deb-f}:state")
        .arg("format")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(format, Some(parley_cluster::redis_store::CHECKPOINT_FORMAT));
    for (mark, readable) in [
        (None, true),
        (Some("1"), true),
        (Some("99"), false),
        (Some("x"), false),
    ] {
        let mut cmd = redis::cmd(if mark.is_some() { "HSET" } else { "HDEL" });
        cmd.arg("parley:{deb-f}:state").arg("format");
        if let Some(v) = mark {
            cmd.arg(v);
        }
        let _: i64 = cmd.query_async(&mut conn).await.unwrap();
        match store.state("deb-f").await {
            Ok(cp) => assert!(readable && cp.unwrap().state == *m.state(), "{mark:?}"),
            Err(e) => {
                assert!(!readable, "{mark:?}: {e}");
                assert!(
                    matches!(
                        e,
                        parley_cluster::redis_store::RedisStoreError::NewerFormat { .. }
                    ),
                    "{e}"
                );
                assert!(e.to_string().contains("newer build"), "{e}");
            }
        }
    }
}

#[test]
fn tls_and_credential_urls_are_accepted() {
    // `rediss://` needs the rustls feature; without it the client refuses the URL.
    for url in [
        "rediss://:s3cret@redis.example.internal:6380/0",
        "redis://parley:s3cret@127.0.0.1:6379/1",
    ] {
        redis::Client::open(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_bind_a_spec_digest_and_secrets_are_written_once() {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let a = parley_cluster::redis_store::spec_digest(&spec()).unwrap();
    let mut other = spec();
    other.problem = "q".into();
    let b = parley_cluster::redis_store::spec_digest(&other).unwrap();
    assert_ne!(a, b);
    let first = store
        .bind_idempotency_key_for_spec("k", "deb-1", &a)
        .await
        .unwrap();
    assert_eq!(
        (first.debate_id.as_str(), first.spec_digest.as_deref()),
        ("deb-1", Some(a.as_str()))
    );
    // A second copy learns the first binding, digest included.
    let again = store
        .bind_idempotency_key_for_spec("k", "deb-2", &b)
        .await
        .unwrap();
    assert_eq!(again, first);

    let s1 = store.ensure_dispatch_secret("deb-1").await.unwrap();
    let s2 = store.ensure_dispatch_secret("deb-1").await.unwrap();
    assert_eq!(s1, s2, "the secret is written once");
    assert_eq!(s1.len(), 64);
    assert_eq!(
        store.dispatch_secret("deb-1").await.unwrap().as_deref(),
        Some(s1.as_str())
    );
    assert_eq!(store.dispatch_secret("deb-9").await.unwrap(), None);
}

/// The master's replication offset and the offset its replica acknowledged
/// (`INFO replication`: `master_repl_offset`, `slave0:...,offset=N`).
async fn replication_offsets(conn: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await
        .unwrap();
    let master = info
        .lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no master_repl_offset in {info}"));
    let acked = info
        .lines()
        .find(|l| l.starts_with("slave0:"))
        .and_then(|l| l.split(',').find_map(|kv| kv.strip_prefix("offset=")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no slave0 offset in {info}"));
    (master, acked)
}

/// With `redis_min_replicas = 1` a checkpoint or a result write returns only once the
/// replica acknowledged it: the offset the replica acknowledged is past the master's offset
/// from before the write (without `WAIT` the replica acknowledges only once a second), and
/// the value is on the replica. With the replica stopped the writes still succeed (on the master) and
/// reach the replica once it runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_wait_for_a_replica_with_min_replicas() {
    use parley_testkit::send_signal;
    // No pings from the master to its replica (they move its offset) during the test.
    let master = RedisServer::start_with_args(&["--repl-ping-replica-period", "3600"]).unwrap();
    let mut on_master = parley_tests::redis_connection(&master.url()).await;
    let replica = RedisServer::start_replica_of(&master).unwrap();
    let mut on_replica = parley_tests::redis_connection(&replica.url()).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut on_replica)
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replica never synced: {info}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let store = RedisStore::connect(&master.url())
        .await
        .unwrap()
        .with_min_replicas(1);
    let replica_conn = on_replica.clone();
    let version = |id: &'static str| {
        let mut conn = replica_conn.clone();
        async move {
            let v: Option<u64> = redis::cmd("HGET")
                .arg(format!("parley:{{{id}}}:state"))
                .arg("version")
                .query_async(&mut conn)
                .await
                .unwrap();
            v
        }
    };
    let m = Machine::new("deb-1".into(), spec(), Utc::now());
    for v in 0..5 {
        let (before, _) = replication_offsets(&mut on_master).await;
        assert_eq!(store.save_state(m.state(), v).await.unwrap(), Some(v + 1));
        let (_, acked) = replication_offsets(&mut on_master).await;
        assert!(
            acked > before,
            "the checkpoint returned before the replica had it ({acked} <= {before})"
        );
        assert_eq!(
            version("deb-1").await,
            Some(v + 1),
            "checkpoint not on the replica"
        );
    }
    let r = result("t1", 1, true);
    let (before, _) = replication_offsets(&mut on_master).await;
    assert!(store.put_result(&r).await.unwrap());
    let (_, acked) = replication_offsets(&mut on_master).await;
    assert!(
        acked > before,
        "the result returned before the replica had it ({acked} <= {before})"
    );
    let field: Option<String> = redis::cmd("HGET")
        .arg("parley:{deb-1}:results")
        .arg("t1")
        .query_async(&mut on_replica)
        .await
        .unwrap();
    assert!(field.is_some(), "result not on the replica");

    // The replica stops answering: writes succeed on the master all the same.
    let pid = replica.pid().unwrap();
    send_signal(pid, "STOP");
    assert_eq!(store.save_state(m.state(), 5).await.unwrap(), Some(6));
    assert_eq!(store.save_state(m.state(), 6).await.unwrap(), Some(7));
    send_signal(pid, "CONT");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while version("deb-1").await != Some(7) {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never caught up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
