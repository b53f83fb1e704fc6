//! High availability of the backing services: the services run against a 3-node JetStream
//! cluster (R3 streams) and a node dies mid-debate. Real `nats-server` processes clustered on
//! loopback, a real `redis-server` (alone, watched by sentinels, or a Redis Cluster), the
//! service binaries and the fake LLM.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::collections::BTreeMap;
use std::time::Duration;

use parley_testkit::RedisCluster;
use parley_tests::soak::layout::sentinel_master;
use parley_tests::*;

/// Streams whose replicas must follow `stream_replicas`.
const REPLICATED: [&str; 3] = ["PARLEY_TASKS", "PARLEY_EVENTS", "KV_PARLEY_RESULT_STASH"];

/// Debates in flight when the node dies.
const DEBATES: usize = 4;

/// The events of debate `id` carry sequence numbers 1..=n, each once, and end with
/// `debateCompleted`.
async fn assert_events_kept(client: &async_nats::Client, id: &str) {
    // Right after a failover a JetStream API request may time out: try again.
    let mut tries = 0;
    let evs = loop {
        match events(client, &format!("parley.debates.{id}.events")).await {
            Ok(evs) => break evs,
            Err(e) if tries < 10 => {
                eprintln!("reading the events of {id}: {e:#}; again");
                tries += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("reading the events of {id}: {e:#}"),
        }
    };
    let seqs: Vec<u64> = evs.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "{id}: events missing or repeated");
    let last = evs.last().unwrap_or_else(|| panic!("{id}: no events"));
    assert!(
        matches!(
            last.kind,
            parley_protocol::EventKind::DebateCompleted { .. }
        ),
        "{id}: last event {:?}",
        last.kind
    );
}

/// Moves the leadership of `stream` to the node named `to` by asking its leader to step
/// down until the election lands there (each step picks a random new leader among the two
/// other nodes, so 40 steps miss with odds of 2^-40).
async fn move_leader(client: &async_nats::Client, stream: &str, to: &str) -> bool {
    for _ in 0..40 {
        let Some(leader) = stream_leader(client, stream).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if leader == to {
            return true;
        }
        let _ = jetstream_api(client, &format!("STREAM.LEADER.STEPDOWN.{stream}")).await;
        // Wait for the new election before looking again.
        let mut waited = 0;
        while waited < 50 {
            match stream_leader(client, stream).await {
                Some(l) if l != leader => break,
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += 1;
        }
    }
    false
}

/// Moves the events stream's leadership to the node leading the tasks stream; returns
/// that node (quick when it is there already).
async fn one_leader_for_both(client: &async_nats::Client) -> String {
    let tasks_leader = stream_leader(client, "PARLEY_TASKS")
        .await
        .expect("the tasks stream has a leader");
    assert!(
        move_leader(client, "PARLEY_EVENTS", &tasks_leader).await,
        "the events stream's leadership did not move to {tasks_leader}"
    );
    tasks_leader
}

/// Several debates in flight with busy workers on a 3-node JetStream cluster with R3
/// streams; the node leading both the tasks and the events stream is killed with SIGKILL,
/// so every publish of the coordinator meets a stream without a leader until the
/// elections end. Every debate completes (the outage is waited out, never counted against
/// a debate), no call whose answer was stored runs again, and every debate's events are
/// all in the events stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debates_survive_the_loss_of_the_jetstream_stream_leader() {
    let mut nats = NatsCluster::start(3).unwrap();
    let urls = nats.urls();
    let client = connect_as(&urls).await;
    wait_for_jetstream(&client, Duration::from_secs(30)).await;
    let redis = RedisServer::start().unwrap();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_latency(Latency::Fixed(Duration::from_millis(400)));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("debate-config.json");
    write_json(&config, &serde_json::json!({"baseUrl": fake.base_url()}));

    let common = |extra: &[(&'static str, String)]| {
        let mut flags = vec![
            ("--nats-url", urls.clone()),
            ("--redis-url", redis.url()),
            ("--stream-replicas", "3".to_string()),
        ];
        flags.extend(extra.iter().cloned());
        flags
    };
    let _coord = start_service(
        "parley-coordinator",
        &common(&[("--lease-ttl-ms", "2000".into())]),
        "coordinator ready",
    );
    let worker = |kind: &str| {
        start_service(
            &format!("parley-{kind}-worker"),
            &common(&[
                ("--concurrency", "4".into()),
                ("--ack-wait-secs", "3".into()),
                ("--config", config.display().to_string()),
            ]),
            "worker ready",
        )
    };
    let _agents = [worker("agent"), worker("agent")];
    let _judge = worker("judge");

    for stream in REPLICATED {
        let info = jetstream_api(&client, &format!("STREAM.INFO.{stream}"))
            .await
            .unwrap();
        assert_eq!(info["config"]["num_replicas"], 3, "{stream}: {info}");
        let replicas = info["cluster"]["replicas"].as_array().map_or(0, Vec::len);
        assert_eq!(replicas, 2, "{stream}: a leader and two replicas: {info}");
    }

    // Both leaderships on one node before the debates start: moving one can take several
    // elections, longer than the debates' round 1.
    one_leader_for_both(&client).await;

    let problems: Vec<String> = (0..DEBATES)
        .map(|i| format!("Design a replicated service number {i}"))
        .collect();
    let mut ids = Vec::new();
    for p in &problems {
        ids.push(submit_on(&client, &spec(p)).await);
    }
    // Mid round 1 in every debate: answers stored, more calls in flight.
    for id in &ids {
        wait_status_on(&client, id, Duration::from_secs(40), |s| {
            contributions(s) >= 2
        })
        .await;
    }

    // Still one node for both (quick unless an election moved one meanwhile).
    let tasks_leader = one_leader_for_both(&client).await;
    let victim = nats.index_of(&tasks_leader).unwrap();
    eprintln!("killing {tasks_leader} (leads PARLEY_TASKS and PARLEY_EVENTS)");
    let before_kill = fake.request_count();
    nats.kill(victim);

    for id in &ids {
        let state = wait_status_on(&client, id, Duration::from_secs(90), is_done).await;
        assert_complete(&state);
    }
    assert!(
        fake.request_count() > before_kill,
        "the debates went on after the kill"
    );
    // A new leader was elected on a surviving node.
    let new_leader = stream_leader(&client, "PARLEY_TASKS").await.unwrap();
    assert_ne!(new_leader, tasks_leader);
    assert_no_completed_call_repeated(&fake);
    assert_eq!(
        successful_calls_by_problem(&fake, &problems),
        vec![22; DEBATES],
        "each debate made each of its 22 calls once"
    );
    for id in &ids {
        assert_events_kept(&client, id).await;
    }
    // The CLI takes the servers as repeated flags, the dead node first: it connects to a
    // live one.
    let mut args = vec!["status".to_string(), ids[0].clone()];
    for i in std::iter::once(victim).chain((0..nats.len()).filter(|i| *i != victim)) {
        args.push("--nats-url".into());
        args.push(nats.node(i).url());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = parley_cli(dir.path(), &args).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["status"], "completed");
}

/// Polls until `check` holds, panicking with `what` after `timeout`.
async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !check().await {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The services of a Redis failover drill (coordinator with a 2 s lease, two agent workers
/// and a judge worker, each waiting for one Redis replica per write) against a fake LLM at
/// 400 ms, with [`DEBATES`] debates submitted and each past its first contributions.
struct Drill {
    fake: FakeLlm,
    problems: Vec<String>,
    ids: Vec<String>,
    _services: Vec<ChildProcess>,
    _dir: tempfile::TempDir,
}

impl Drill {
    async fn start(
        nats_url: &str,
        redis_url: &str,
        client: &async_nats::Client,
        what: &str,
    ) -> Self {
        let fake = FakeLlm::start().await.unwrap();
        fake.set_latency(Latency::Fixed(Duration::from_millis(400)));
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("debate-config.json");
        write_json(&config, &serde_json::json!({"baseUrl": fake.base_url()}));
        let common = |extra: &[(&'static str, String)]| {
            let mut flags = vec![
                ("--nats-url", nats_url.to_string()),
                ("--redis-url", redis_url.to_string()),
                ("--redis-min-replicas", "1".to_string()),
            ];
            flags.extend(extra.iter().cloned());
            flags
        };
        let worker = |kind: &str| {
            start_service(
                &format!("parley-{kind}-worker"),
                &common(&[
                    ("--concurrency", "4".into()),
                    ("--ack-wait-secs", "3".into()),
                    ("--config", config.display().to_string()),
                ]),
                "worker ready",
            )
        };
        let services = vec![
            start_service(
                "parley-coordinator",
                &common(&[("--lease-ttl-ms", "2000".into())]),
                "coordinator ready",
            ),
            worker("agent"),
            worker("agent"),
            worker("judge"),
        ];
        let problems: Vec<String> = (0..DEBATES)
            .map(|i| format!("Design a {what} number {i}"))
            .collect();
        let mut ids = Vec::new();
        for p in &problems {
            ids.push(submit_on(client, &spec(p)).await);
        }
        for id in &ids {
            wait_status_on(client, id, Duration::from_secs(40), |s| {
                contributions(s) >= 2
            })
            .await;
        }
        Self {
            fake,
            problems,
            ids,
            _services: services,
            _dir: dir,
        }
    }

    /// Every debate completes after the kill, no completed call is made again, each
    /// debate made its 22 calls once, and every debate's events are all kept.
    async fn finish(&self, client: &async_nats::Client, before_kill: usize) {
        for id in &self.ids {
            let state = wait_status_on(client, id, Duration::from_secs(90), is_done).await;
            assert_complete(&state);
        }
        assert!(
            self.fake.request_count() > before_kill,
            "the debates went on after the kill"
        );
        assert_no_completed_call_repeated(&self.fake);
        assert_eq!(
            successful_calls_by_problem(&self.fake, &self.problems),
            vec![22; DEBATES],
            "each debate made each of its 22 calls once"
        );
        for id in &self.ids {
            assert_events_kept(client, id).await;
        }
    }
}

/// A Redis master with one replica, watched by three sentinels; the services reach Redis
/// only through the sentinels (`redis+sentinel://`) and wait for one replica on every
/// checkpoint and result write (`--redis-min-replicas 1`). With several debates mid-round
/// the master is killed (SIGKILL): the sentinels promote the replica, the services find it,
/// and every debate completes with no call whose answer was stored made again (a lost
/// checkpoint or result would make its call run again) and all its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debates_survive_a_redis_sentinel_failover() {
    const MASTER: &str = "parley-master";
    let t0 = std::time::Instant::now();
    let nats = NatsServer::start().unwrap();
    let client = connect_as(&nats.url()).await;
    let mut master = RedisServer::start().unwrap();
    let replica = RedisServer::start_replica_of(&master).unwrap();
    let sentinels: Vec<RedisSentinel> = (0..3)
        .map(|_| {
            RedisSentinel::start(MASTER, master.port(), 2, Duration::from_millis(1000)).unwrap()
        })
        .collect();
    // Each sentinel knows the replica and the two other sentinels (needed to agree on the
    // failover), and the replica is in sync.
    for s in &sentinels {
        wait_for(
            "the sentinels to find each other and the replica",
            Duration::from_secs(30),
            || async {
                sentinel_master(&s.addr(), MASTER).await.is_ok_and(|m| {
                    m.get("num-slaves").map(String::as_str) == Some("1")
                        && m.get("num-other-sentinels").map(String::as_str) == Some("2")
                })
            },
        )
        .await;
    }
    let replica_conn = redis_connection(&replica.url()).await;
    wait_for("the replica to sync", Duration::from_secs(30), || {
        let mut conn = replica_conn.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            info.contains("master_link_status:up")
        }
    })
    .await;
    eprintln!("{:?}: sentinels ready, replica in sync", t0.elapsed());
    let redis_url = format!(
        "redis+sentinel://{}/{MASTER}",
        sentinels
            .iter()
            .map(RedisSentinel::addr)
            .collect::<Vec<_>>()
            .join(",")
    );

    let drill = Drill::start(&nats.url(), &redis_url, &client, "failover drill").await;
    let (fake, ids) = (&drill.fake, &drill.ids);
    let before_kill = fake.request_count();
    eprintln!("{:?}: killing the master", t0.elapsed());
    master.kill();
    let old_master = master.port().to_string();
    // The sentinels promote the replica.
    wait_for(
        "the sentinels to promote the replica",
        Duration::from_secs(40),
        || {
            let addr = sentinels[0].addr();
            let old = old_master.clone();
            async move {
                sentinel_master(&addr, MASTER)
                    .await
                    .is_ok_and(|m| m.get("port").is_some_and(|p| *p != old))
            }
        },
    )
    .await;

    eprintln!("{:?}: replica promoted", t0.elapsed());
    drill.finish(&client, before_kill).await;
    eprintln!(
        "{:?}: debates done, every call once, every event kept",
        t0.elapsed()
    );
    // The debates' final checkpoints are on the promoted replica.
    let mut promoted = redis_connection(&replica.url()).await;
    for id in ids {
        let version: Option<u64> = redis::cmd("HGET")
            .arg(format!("parley:{{{id}}}:state"))
            .arg("version")
            .query_async(&mut promoted)
            .await
            .unwrap();
        assert!(
            version.is_some_and(|v| v > 1),
            "{id}: no checkpoint on the new master"
        );
    }
}

/// A Redis Cluster of 3 masters with one replica each; the services reach it through
/// `redis+cluster://` and wait for one replica on every checkpoint and result write
/// (`--redis-min-replicas 1`, `WAIT` sent to the master of the debate's slot). With several
/// debates mid-round the master serving most of the debates' hash slots is killed
/// (SIGKILL): its replica takes over, the cluster client follows the new slot map, and
/// every debate completes with no call whose answer was stored made again and all its
/// events; the final checkpoints are on the masters serving the slots afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debates_survive_a_redis_cluster_master_failover() {
    let t0 = std::time::Instant::now();
    let nats = NatsServer::start().unwrap();
    let client = connect_as(&nats.url()).await;
    let mut cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .unwrap()
        .unwrap();
    eprintln!("{:?}: redis cluster ready", t0.elapsed());

    let drill = Drill::start(
        &nats.url(),
        &cluster.url(),
        &client,
        "cluster failover drill",
    )
    .await;
    let (fake, ids) = (&drill.fake, &drill.ids);
    // The master serving most debates' slots (their keys share the slot of `{<id>}`).
    let mut serving: BTreeMap<usize, usize> = BTreeMap::new();
    for id in ids {
        let master = cluster
            .master_of(&format!("parley:{{{id}}}:state"))
            .unwrap();
        *serving.entry(master).or_default() += 1;
    }
    let (&victim, &held) = serving.iter().max_by_key(|(_, n)| **n).unwrap();
    let victim_port = cluster.node(victim).port();
    let moved: Vec<&String> = ids
        .iter()
        .filter(|id| {
            cluster
                .master_of(&format!("parley:{{{id}}}:state"))
                .unwrap()
                == victim
        })
        .collect();
    assert_eq!(moved.len(), held);
    let before_kill = fake.request_count();
    eprintln!(
        "{:?}: killing the master on port {victim_port}, serving {held} of {DEBATES} debates",
        t0.elapsed()
    );
    cluster.kill(victim);
    // Its replica is promoted and serves the debates' slots.
    let key = format!("parley:{{{}}}:state", moved[0]);
    let mut promoted = None;
    wait_for(
        "the replica to take over the killed master's slots",
        Duration::from_secs(30),
        || {
            let m = cluster.master_of(&key).ok().filter(|&m| m != victim);
            promoted = m;
            std::future::ready(m.is_some())
        },
    )
    .await;
    let promoted = promoted.unwrap();
    eprintln!(
        "{:?}: node on port {} promoted",
        t0.elapsed(),
        cluster.node(promoted).port()
    );

    drill.finish(&client, before_kill).await;
    eprintln!(
        "{:?}: debates done, every call once, every event kept",
        t0.elapsed()
    );
    // Every debate's final checkpoint is on the master serving its slot now (the promoted
    // replica for the debates the killed master held).
    for id in ids {
        let key = format!("parley:{{{id}}}:state");
        let master = cluster.master_of(&key).unwrap();
        assert_ne!(master, victim, "{id}: still mapped to the killed master");
        let mut conn = redis_connection(&cluster.node(master).url()).await;
        let version: Option<u64> = redis::cmd("HGET")
            .arg(&key)
            .arg("version")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            version.is_some_and(|v| v > 1),
            "{id}: no checkpoint on the master of its slot"
        );
    }
}
