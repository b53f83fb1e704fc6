//! The follower registry's scripts on a real redis-server: caps hold under concurrent
//! reservations, `serve` keeps its share, a refresh keeps live followers and forgets the
//! others (a fresh reservation survives a refresh that does not list it yet).

use parley_cluster::redis_store::followers::{FollowerCaps, Reservation, REFRESH_GRACE};
use parley_cluster::RedisStore;
use parley_testkit::RedisServer;

fn caps() -> FollowerCaps {
    FollowerCaps {
        total: 10,
        reserved_for_serve: 2,
        per_client: 3,
        per_debate: 5,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_hold_under_concurrent_reservations() {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    // 30 reservations of one client at once: exactly its 3.
    let tasks: Vec<_> = (0..30)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .reserve_follower(&format!("follow-m{i}"), "mallory", "deb-a", caps())
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut granted = 0;
    for t in tasks {
        match t.await.unwrap() {
            Reservation::Granted => granted += 1,
            Reservation::Refused(cap) => assert_eq!(cap, "client"),
        }
    }
    assert_eq!(granted, 3);
    // Per debate: 5 followers of deb-a at most, whoever asks.
    for (i, who) in ["alice", "bob"].iter().enumerate() {
        assert_eq!(
            store
                .reserve_follower(&format!("follow-d{i}"), who, "deb-a", caps())
                .await
                .unwrap(),
            Reservation::Granted
        );
    }
    assert_eq!(
        store
            .reserve_follower("follow-d9", "carol", "deb-a", caps())
            .await
            .unwrap(),
        Reservation::Refused("debate")
    );
    // Clients together take at most total - reserved = 8; serve takes the rest.
    for (i, who) in ["carol", "carol", "carol"].iter().enumerate() {
        assert_eq!(
            store
                .reserve_follower(&format!("follow-c{i}"), who, "deb-b", caps())
                .await
                .unwrap(),
            Reservation::Granted
        );
    }
    assert_eq!(store.followers_held("carol").await.unwrap(), (8, 3));
    assert_eq!(
        store
            .reserve_follower("follow-x", "dave", "deb-c", caps())
            .await
            .unwrap(),
        Reservation::Refused("total")
    );
    for i in 0..2 {
        assert_eq!(
            store
                .reserve_follower(&format!("follow-s{i}"), "serve", "deb-c", caps())
                .await
                .unwrap(),
            Reservation::Granted
        );
    }
    assert_eq!(
        store
            .reserve_follower("follow-s9", "serve", "deb-c", caps())
            .await
            .unwrap(),
        Reservation::Refused("total")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_forgets_followers_that_are_gone_and_keeps_fresh_ones() {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    for i in 0..3 {
        store
            .reserve_follower(&format!("follow-{i}"), "mallory", "deb-a", caps())
            .await
            .unwrap();
    }
    // Fresh reservations survive a refresh that does not list them (being created).
    assert_eq!(store.refresh_followers(&[]).await.unwrap(), 3);
    tokio::time::sleep(REFRESH_GRACE + std::time::Duration::from_millis(500)).await;
    // follow-0 still exists (refreshed just now); the others are gone.
    let live = vec!["follow-0".to_string()];
    assert_eq!(store.refresh_followers(&live).await.unwrap(), 1);
    assert_eq!(store.followers_held("mallory").await.unwrap(), (1, 1));
    // A follower that was seen live is forgotten at the first refresh without it, however
    // recently it was refreshed.
    assert_eq!(store.refresh_followers(&[]).await.unwrap(), 0);
    assert_eq!(store.followers_held("mallory").await.unwrap(), (0, 0));
    assert_eq!(
        store
            .reserve_follower("follow-new", "mallory", "deb-a", caps())
            .await
            .unwrap(),
        Reservation::Granted
    );
}
