//! The GCRA Lua script against a real redis-server: burst, steady rate, cost > 1, and
//! concurrent callers on several connections.

use std::sync::Arc;
use std::time::Duration;

use parley_llm::ratelimit::{Decision, Gcra, Limiter, Rates, RedisLimiter};
use parley_testkit::RedisServer;

async fn limiter(url: &str) -> RedisLimiter {
    let client = redis::Client::open(url).unwrap();
    RedisLimiter::new(redis::aio::ConnectionManager::new(client).await.unwrap())
}

fn rpm(n: u32) -> Rates {
    Rates {
        requests_per_minute: Some(n),
        tokens_per_minute: None,
    }
}
fn tpm(n: u32) -> Rates {
    Rates {
        requests_per_minute: None,
        tokens_per_minute: Some(n),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_spaced_by_the_emission_interval() {
    let redis = RedisServer::start().unwrap();
    let l = limiter(&redis.url()).await;
    let interval = Duration::from_micros(Gcra::per_minute(600, 1).interval_us);
    assert_eq!(
        l.acquire("p", rpm(600), 1, Duration::ZERO).await.unwrap(),
        Decision::Allowed
    );
    // Right away: wait about one interval (nothing was taken).
    let Decision::Wait(w) = l.acquire("p", rpm(600), 1, Duration::ZERO).await.unwrap() else {
        panic!("second request allowed")
    };
    assert!(w <= interval && w > interval / 2, "{w:?} vs {interval:?}");
    // Steady rate: after waiting what it said, the next request passes.
    tokio::time::sleep(w).await;
    assert_eq!(
        l.acquire("p", rpm(600), 1, Duration::ZERO).await.unwrap(),
        Decision::Allowed
    );
    // Another key has its own allowance.
    assert_eq!(
        l.acquire("q", rpm(600), 1, Duration::ZERO).await.unwrap(),
        Decision::Allowed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_burst_and_cost_above_one() {
    let redis = RedisServer::start().unwrap();
    let l = limiter(&redis.url()).await;
    // 600 tokens/min: burst of 60 tokens.
    assert_eq!(
        l.acquire("t", tpm(600), 60, Duration::ZERO).await.unwrap(),
        Decision::Allowed
    );
    assert!(matches!(
        l.acquire("t", tpm(600), 1, Duration::ZERO).await.unwrap(),
        Decision::Wait(_)
    ));
    // A cost larger than the whole burst still passes on an idle key...
    assert_eq!(
        l.acquire("big", tpm(600), 200, Duration::ZERO)
            .await
            .unwrap(),
        Decision::Allowed
    );
    // ...and then the key owes it: the wait covers most of those 200 tokens.
    let Decision::Wait(w) = l.acquire("big", tpm(600), 1, Duration::ZERO).await.unwrap() else {
        panic!()
    };
    let per_token = Duration::from_micros(Gcra::per_minute(600, 60).interval_us);
    // 200 tokens owed, minus the 60-token burst: about 140 token intervals.
    assert!(w > per_token * 130 && w <= per_token * 141, "{w:?}");
    // Refunding unused tokens shortens the wait.
    l.adjust_tokens("big", tpm(600), -190).await.unwrap();
    let after = l.acquire("big", tpm(600), 1, Duration::ZERO).await.unwrap();
    assert!(
        matches!(after, Decision::Allowed) || matches!(after, Decision::Wait(d) if d < w),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_on_many_connections_share_one_allowance() {
    let redis = RedisServer::start().unwrap();
    // 8 limiters, each on its own connection, like 8 worker replicas.
    let mut limiters = Vec::new();
    for _ in 0..8 {
        limiters.push(Arc::new(limiter(&redis.url()).await));
    }
    // 100 tokens/min: burst 10 tokens, one more every ~0.6 s.
    let mut handles = Vec::new();
    for i in 0..64 {
        let l = limiters[i % 8].clone();
        handles.push(tokio::spawn(async move {
            l.acquire("shared", tpm(100), 1, Duration::ZERO)
                .await
                .unwrap()
        }));
    }
    let mut allowed = 0;
    for h in handles {
        if h.await.unwrap() == Decision::Allowed {
            allowed += 1;
        }
    }
    assert!(
        (10..=11).contains(&allowed),
        "allowed {allowed}, the burst is 10"
    );
    // Requests and tokens together: one request per ~1 s at most.
    let mut handles = Vec::new();
    for i in 0..16 {
        let l = limiters[i % 8].clone();
        let both = Rates {
            requests_per_minute: Some(60),
            tokens_per_minute: Some(100_000),
        };
        handles.push(tokio::spawn(async move {
            l.acquire("both", both, 5, Duration::ZERO).await.unwrap()
        }));
    }
    let mut allowed = 0;
    for h in handles {
        if h.await.unwrap() == Decision::Allowed {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_callers_reserve_consecutive_slots() {
    let redis = RedisServer::start().unwrap();
    let interval = Duration::from_micros(Gcra::per_minute(600, 1).interval_us);
    // 12 callers on 4 connections at once, each willing to wait up to 2 s: every one gets
    // its own slot, one interval apart, with no polling.
    let mut limiters = Vec::new();
    for _ in 0..4 {
        limiters.push(Arc::new(limiter(&redis.url()).await));
    }
    let mut handles = Vec::new();
    for i in 0..12 {
        let l = limiters[i % 4].clone();
        handles.push(tokio::spawn(async move {
            l.acquire("r", rpm(600), 1, Duration::from_secs(2))
                .await
                .unwrap()
        }));
    }
    let mut waits = Vec::new();
    for h in handles {
        match h.await.unwrap() {
            Decision::Allowed => waits.push(Duration::ZERO),
            Decision::Reserved(d) => waits.push(d),
            Decision::Wait(d) => panic!("denied although within max_wait: {d:?}"),
        }
    }
    waits.sort();
    assert_eq!(waits[0], Duration::ZERO, "{waits:?}");
    for pair in waits.windows(2) {
        let gap = pair[1] - pair[0];
        // Consecutive slots; Redis time moves a little between the calls.
        assert!(
            gap + Duration::from_millis(20) >= interval && gap <= interval,
            "{waits:?}"
        );
    }
    // The queue is now ~1.1 s long: a caller that will not wait that long takes nothing.
    let Decision::Wait(w) = l0(&limiters)
        .acquire("r", rpm(600), 1, Duration::from_millis(100))
        .await
        .unwrap()
    else {
        panic!("a slot beyond max_wait was granted")
    };
    assert!(w > Duration::from_secs(1), "{w:?}");
}

fn l0(limiters: &[Arc<RedisLimiter>]) -> &RedisLimiter {
    &limiters[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_stops_every_connection_until_it_ends() {
    let redis = RedisServer::start().unwrap();
    let a = limiter(&redis.url()).await;
    let b = limiter(&redis.url()).await;
    let both = Rates {
        requests_per_minute: Some(6000),
        tokens_per_minute: Some(1_000_000),
    };
    assert_eq!(
        a.acquire("p", both, 10, Duration::ZERO).await.unwrap(),
        Decision::Allowed
    );
    // A provider said "Retry-After: 2": nobody gets through for about 2 s.
    a.pause("p", both, Duration::from_secs(2)).await.unwrap();
    let Decision::Wait(w) = b.acquire("p", both, 10, Duration::ZERO).await.unwrap() else {
        panic!("allowed during a pause")
    };
    assert!(
        w > Duration::from_millis(1900) && w <= Duration::from_millis(2100),
        "{w:?}"
    );
    // A shorter pause never shortens a longer one.
    a.pause("p", both, Duration::from_millis(10)).await.unwrap();
    assert!(matches!(
        b.acquire("p", both, 10, Duration::ZERO).await.unwrap(),
        Decision::Wait(d) if d > Duration::from_millis(1800)
    ));
    // Tokens-only limits pause too.
    a.pause("t", tpm(600), Duration::from_secs(1))
        .await
        .unwrap();
    assert!(matches!(
        b.acquire("t", tpm(600), 1, Duration::ZERO).await.unwrap(),
        Decision::Wait(d) if d > Duration::from_millis(900)
    ));
}
