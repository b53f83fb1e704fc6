//! The short nemesis soak: the whole HA layout (3 clustered nats-servers with R3 streams,
//! Redis with a replica and 3 sentinels, 2 coordinators, 2 agent workers, a judge worker,
//! the fake LLM) under a fixed seed's schedule of at least 30 faults of every kind while
//! debates of mixed shapes run; every invariant of `parley_tests::soak::check` must hold.
//! The long soak is `cargo bench -p parley-tests --bench soak`.
//!
//! Needs root (network namespaces for the partitions) and the binaries:
//! `cargo build --workspace --bins`.

use std::time::Duration;

use parley_tests::soak::{self, Config};

/// The seed of the suite's soak (`PARLEY_SOAK_SEED` replays another).
const SEED: u64 = 0x50A4_2026;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_keeps_every_debate_through_a_seeded_nemesis() {
    let seed = std::env::var("PARLEY_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let report = soak::run(Config {
        seed,
        duration: Duration::from_secs(100),
        rate: 15.0,
        faults: 34,
        bound: Duration::from_secs(120),
        echo: std::env::var_os("PARLEY_SOAK_ECHO").is_some(),
    })
    .await
    .expect("the soak's layout starts (as root, with nats-server and redis-server)");
    eprintln!("{}\n{}", report.fault_log, report.figures());
    assert!(report.violations.is_empty(), "{}", report.violations_text());
    let faults: usize = report.faults.values().sum();
    assert!(faults >= 30, "only {faults} faults: {:?}", report.faults);
    assert!(report.faults.len() >= 5, "{:?}", report.faults);
    for kind in [
        "partition",
        "redis-failover",
        "kill-process",
        "kill-nats-node",
    ] {
        assert!(
            report.faults.contains_key(kind),
            "no {kind}: {:?}",
            report.faults
        );
    }
    assert!(report.accepted >= 20, "{}", report.figures());
    assert_eq!(report.completed + report.failed, report.accepted);
}
