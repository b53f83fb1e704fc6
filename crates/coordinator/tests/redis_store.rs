//! The Redis checkpoint store against a real redis-server.

use chrono::Utc;
use parley_cluster::RedisStore;
use parley_coordinator::Machine;
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
