//! The nemesis: a schedule of faults drawn from a seeded generator, and their injection
//! against a [`Layout`]. A fault holds its target (a service, the NATS cluster, Redis, the
//! provider) until it is healed, so two faults never fight over one target; a fault
//! whose target is busy when its time comes waits for the next free slot of the schedule.
//!
//! Kinds (see [`Kind`]): kill -9 of a Parley process and its restart; kill -9 of a NATS
//! node (the tasks stream's leader half the time) and its restart; a Redis failover (kill
//! -9 of the master, Sentinel promotes the replica, the old master comes back as a
//! replica); SIGSTOP/SIGCONT of a Parley process or a NATS node for longer than a lease's
//! time-to-live and an ack wait; a partition of a Parley process from NATS, Redis or
//! both; and at the provider, a burst of 429s, a burst of 5xx and a spell of slow calls.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use parley_testkit::{Fault, Latency, Match};

use super::history::{History, What};
use super::layout::{poll, replication_info, signal, Layout};
use crate::stream_leader;

/// A small seeded generator (SplitMix64): the same seed gives the same schedule.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `[lo, hi]` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }

    /// True with probability `p` (0–1).
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// What a partition cuts a process off from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Nats,
    Redis,
    Both,
}

/// A kind of fault, with its target and how long it lasts.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// kill -9 service `i`, start it again after `down`.
    KillService { service: usize, down: Duration },
    /// kill -9 NATS node `node` (`None`: the node leading the tasks stream now), start it
    /// again after `down`.
    KillNats { node: Option<usize>, down: Duration },
    /// kill -9 the Redis master; Sentinel promotes the replica; the old master comes back
    /// (after `down`, once the promotion is seen) as a replica.
    RedisFailover { down: Duration },
    /// SIGSTOP service `i` for `pause`, then SIGCONT.
    PauseService { service: usize, pause: Duration },
    /// SIGSTOP NATS node `node` for `pause`, then SIGCONT.
    PauseNats { node: usize, pause: Duration },
    /// Cut service `i` off from `side` for `length`.
    Partition {
        service: usize,
        side: Side,
        length: Duration,
    },
    /// The next `calls` provider calls answer 429 with `Retry-After: 1`.
    RateLimitBurst { calls: usize },
    /// The next `calls` provider calls answer 503.
    ServerErrorBurst { calls: usize },
    /// Every provider call takes `latency` for `length`.
    SlowCalls { latency: Duration, length: Duration },
}

/// Every kind's name, in the order of [`Kind::name`].
pub const KIND_NAMES: [&str; 9] = [
    "kill-process",
    "kill-nats-node",
    "redis-failover",
    "pause-process",
    "pause-nats-node",
    "partition",
    "provider-429-burst",
    "provider-5xx-burst",
    "provider-slow-calls",
];

impl Kind {
    pub fn name(&self) -> &'static str {
        KIND_NAMES[self.index()]
    }

    fn index(&self) -> usize {
        match self {
            Kind::KillService { .. } => 0,
            Kind::KillNats { .. } => 1,
            Kind::RedisFailover { .. } => 2,
            Kind::PauseService { .. } => 3,
            Kind::PauseNats { .. } => 4,
            Kind::Partition { .. } => 5,
            Kind::RateLimitBurst { .. } => 6,
            Kind::ServerErrorBurst { .. } => 7,
            Kind::SlowCalls { .. } => 8,
        }
    }

    /// The target it holds while it lasts.
    fn target(&self) -> Target {
        match self {
            Kind::KillService { service, .. }
            | Kind::PauseService { service, .. }
            | Kind::Partition { service, .. } => Target::Service(*service),
            Kind::KillNats { .. } | Kind::PauseNats { .. } => Target::Nats,
            Kind::RedisFailover { .. } => Target::Redis,
            Kind::RateLimitBurst { .. }
            | Kind::ServerErrorBurst { .. }
            | Kind::SlowCalls { .. } => Target::Provider,
        }
    }

    /// Draws kind number `index` (of [`KIND_NAMES`]) with its parameters.
    fn draw(index: usize, services: usize, rng: &mut Rng) -> Kind {
        let service = rng.below(services as u64) as usize;
        match index {
            0 => Kind::KillService {
                service,
                down: rng.millis(200, 3000),
            },
            1 => Kind::KillNats {
                node: if rng.chance(0.5) {
                    None
                } else {
                    Some(rng.below(3) as usize)
                },
                down: rng.millis(1000, 6000),
            },
            2 => Kind::RedisFailover {
                down: rng.millis(500, 4000),
            },
            // Longer than a lease (2 s) and an ack wait (3 s).
            3 => Kind::PauseService {
                service,
                pause: rng.millis(3500, 8000),
            },
            4 => Kind::PauseNats {
                node: rng.below(3) as usize,
                pause: rng.millis(3500, 8000),
            },
            5 => Kind::Partition {
                service,
                side: match rng.below(3) {
                    0 => Side::Nats,
                    1 => Side::Redis,
                    _ => Side::Both,
                },
                length: rng.millis(2000, 9000),
            },
            6 => Kind::RateLimitBurst {
                calls: 5 + rng.below(20) as usize,
            },
            7 => Kind::ServerErrorBurst {
                calls: 3 + rng.below(10) as usize,
            },
            _ => Kind::SlowCalls {
                latency: rng.millis(1500, 6000),
                length: rng.millis(3000, 10000),
            },
        }
    }
}

/// What a fault holds while it lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Service(usize),
    Nats,
    Redis,
    Provider,
}

/// One planned fault: when (since the start of the faults) and what.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub at: Duration,
    pub kind: Kind,
}

/// The schedule of a run: `count` faults spread over `span` at seeded gaps, the first
/// ones covering every kind once (in a seeded order), the rest drawn by weight.
pub fn schedule(seed: u64, span: Duration, count: usize, services: usize) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..KIND_NAMES.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    // Weights of the later draws: process faults and partitions most often.
    const WEIGHTS: [u64; 9] = [4, 2, 1, 3, 1, 3, 2, 2, 1];
    let total: u64 = WEIGHTS.iter().sum();
    let gap = span.as_millis() as u64 / count.max(1) as u64;
    let mut at = Duration::ZERO;
    (0..count)
        .map(|i| {
            let index = match order.get(i) {
                Some(&k) => k,
                None => {
                    let mut x = rng.below(total);
                    WEIGHTS
                        .iter()
                        .position(|w| {
                            if x < *w {
                                true
                            } else {
                                x -= w;
                                false
                            }
                        })
                        .unwrap_or(0)
                }
            };
            let kind = Kind::draw(index, services, &mut rng);
            let planned = Planned { at, kind };
            // Gaps between half and one and a half of the mean.
            at += Duration::from_millis(gap / 2 + rng.below(gap.max(1)));
            planned
        })
        .collect()
}

/// A fault as it happened: its kind, target and interval since the start of the run.
#[derive(Debug, Clone)]
pub struct Happened {
    pub kind: &'static str,
    pub target: String,
    pub start: Duration,
    pub end: Duration,
}

/// Runs the schedule against the layout, then waits for every fault to heal. Returns the
/// faults as they happened.
pub async fn run(layout: Arc<Layout>, plan: Vec<Planned>, history: History) -> Vec<Happened> {
    let busy: Arc<Mutex<Vec<Target>>> = Arc::new(Mutex::new(Vec::new()));
    let happened: Arc<Mutex<Vec<Happened>>> = Arc::new(Mutex::new(Vec::new()));
    let mut running = Vec::new();
    let mut queue: Vec<Planned> = plan;
    let begin = history.now();
    while let Some(first) = queue.first() {
        let due = begin + first.at;
        let now = history.now();
        if due > now {
            tokio::time::sleep(due - now).await;
        }
        // The first due fault whose target is free (a busy target delays only its own).
        let now = history.now();
        let pick = {
            let mut b = busy.lock().unwrap_or_else(|e| e.into_inner());
            let i = queue
                .iter()
                .position(|p| begin + p.at <= now && !b.contains(&p.kind.target()));
            if let Some(i) = i {
                b.push(queue[i].kind.target());
            }
            i
        };
        let Some(i) = pick else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let next = queue.remove(i);
        let target = next.kind.target();
        let (layout, history, busy, happened) = (
            layout.clone(),
            history.clone(),
            busy.clone(),
            happened.clone(),
        );
        running.push(tokio::spawn(async move {
            let start = history.now();
            let target_name = inject(&layout, &next.kind, &history).await;
            let end = history.now();
            happened
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Happened {
                    kind: next.kind.name(),
                    target: target_name,
                    start,
                    end,
                });
            if let Kind::RedisFailover { .. } = next.kind {
                // Sentinel starts no new failover of a master within twice its failover
                // timeout (10 s) of the last one: the target stays held a while.
                tokio::time::sleep(Duration::from_secs(12)).await;
            }
            busy.lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|t| *t != target);
        }));
    }
    for t in running {
        let _ = t.await;
    }
    let mut v = happened.lock().unwrap_or_else(|e| e.into_inner()).clone();
    v.sort_by_key(|h| h.start);
    v
}

/// Injects one fault and heals it; returns the name of its target.
async fn inject(layout: &Arc<Layout>, kind: &Kind, history: &History) -> String {
    let name = kind.name();
    match kind {
        Kind::KillService { service, down } => {
            let target = layout.service(*service).name.clone();
            history.log(What::Fault {
                kind: name,
                target: target.clone(),
            });
            layout.service(*service).kill9();
            tokio::time::sleep(*down).await;
            restart_service(layout, *service, history).await;
            history.log(What::Healed {
                kind: name,
                target: target.clone(),
            });
            target
        }
        Kind::KillNats { node, down } => {
            let node = match node {
                Some(n) => *n,
                None => {
                    let leader = stream_leader(&layout.client, "PARLEY_TASKS").await;
                    let nats = layout.nats.lock().unwrap_or_else(|e| e.into_inner());
                    leader.and_then(|l| nats.index_of(&l)).unwrap_or(0)
                }
            };
            let target = format!("nats n{node}");
            history.log(What::Fault {
                kind: name,
                target: target.clone(),
            });
            layout
                .nats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .kill(node);
            tokio::time::sleep(*down).await;
            let l = layout.clone();
            let restarted = tokio::task::spawn_blocking(move || {
                l.nats
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .restart(node)
            })
            .await;
            if !matches!(restarted, Ok(Ok(()))) {
                history.note(format!("restarting nats n{node} failed: {restarted:?}"));
            }
            // Let it catch up before the cluster loses another node.
            tokio::time::sleep(Duration::from_secs(2)).await;
            history.log(What::Healed {
                kind: name,
                target: target.clone(),
            });
            target
        }
        Kind::RedisFailover { down } => redis_failover(layout, *down, history).await,
        Kind::PauseService { service, pause } => {
            let (target, pid) = {
                let s = layout.service(*service);
                (s.name.clone(), s.pid())
            };
            history.log(What::Fault {
                kind: name,
                target: target.clone(),
            });
            if let Some(pid) = pid {
                signal(pid, "STOP");
                tokio::time::sleep(*pause).await;
                signal(pid, "CONT");
            }
            history.log(What::Healed {
                kind: name,
                target: target.clone(),
            });
            target
        }
        Kind::PauseNats { node, pause } => {
            let target = format!("nats n{node}");
            let pid = layout
                .nats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .node(*node)
                .pid();
            history.log(What::Fault {
                kind: name,
                target: target.clone(),
            });
            if let Some(pid) = pid {
                signal(pid, "STOP");
                tokio::time::sleep(*pause).await;
                signal(pid, "CONT");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            history.log(What::Healed {
                kind: name,
                target: target.clone(),
            });
            target
        }
        Kind::Partition {
            service,
            side,
            length,
        } => {
            let (svc, ns) = {
                let s = layout.service(*service);
                (s.name.clone(), s.ns.clone())
            };
            let mut ports = Vec::new();
            if matches!(side, Side::Nats | Side::Both) {
                ports.extend(&layout.nats_ports);
            }
            if matches!(side, Side::Redis | Side::Both) {
                ports.extend(&layout.redis_ports);
            }
            let target = format!("{svc} from {side:?}").to_lowercase();
            history.log(What::Fault {
                kind: name,
                target: target.clone(),
            });
            if let Err(e) = layout.network.partition(&ns, &ports) {
                history.note(format!("partition of {svc} failed: {e:#}"));
            }
            tokio::time::sleep(*length).await;
            if let Err(e) = layout.network.heal(&ns) {
                history.note(format!("healing {svc} failed: {e:#}"));
            }
            history.log(What::Healed {
                kind: name,
                target: target.clone(),
            });
            target
        }
        Kind::RateLimitBurst { calls } => {
            let target = format!("provider, {calls} calls");
            history.log(What::Fault {
                kind: name,
                target: target.clone(),
            });
            let from = layout.fake.request_count();
            layout.fake.add_fault(Fault::RateLimited {
                retry_after: Some(Duration::from_secs(1)),
                matching: Match::Any,
                times: Some(*calls),
            });
            provider_burst_end(layout, from, *calls, 429).await;
            history.log(What::Healed {
                kind: name,
                target: target.clone(),
            });
            target
        }
        Kind::ServerErrorBurst { calls } => {
            let target = format!("provider, {calls} calls");
            history.log(What::Fault {
                kind: name,
                target: target.clone(),
            });
            let from = layout.fake.request_count();
            layout.fake.add_fault(Fault::Status {
                status: 503,
                body: r#"{"error":{"message":"soak: overloaded"}}"#.into(),
                matching: Match::Any,
                times: Some(*calls),
            });
            provider_burst_end(layout, from, *calls, 503).await;
            history.log(What::Healed {
                kind: name,
                target: target.clone(),
            });
            target
        }
        Kind::SlowCalls { latency, length } => {
            let target = format!(
                "provider, {} ms for {} ms",
                latency.as_millis(),
                length.as_millis()
            );
            history.log(What::Fault {
                kind: name,
                target: target.clone(),
            });
            layout.fake.set_latency(Latency::Fixed(*latency));
            tokio::time::sleep(*length).await;
            layout.fake.set_latency(NORMAL_LATENCY);
            // Calls that started slow answer up to `latency` later.
            tokio::time::sleep(*latency).await;
            history.log(What::Healed {
                kind: name,
                target: target.clone(),
            });
            target
        }
    }
}

/// The provider's latency outside faults.
pub const NORMAL_LATENCY: Latency = Latency::HeavyTail {
    p50: Duration::from_millis(120),
    p99: Duration::from_millis(600),
};

/// Waits until the provider has given the burst's `calls` faulty answers (status
/// `status`) to requests after the `from`th, or 30 s pass.
async fn provider_burst_end(layout: &Arc<Layout>, from: usize, calls: usize, status: u16) {
    let _ = poll(Duration::from_secs(30), || {
        let n = layout
            .fake
            .statuses(from)
            .iter()
            .filter(|s| **s == status)
            .count();
        std::future::ready(n >= calls)
    })
    .await;
}

/// Starts service `i` again; a start that does not log ready within 30 s is noted (the
/// process keeps running and may get there later).
pub async fn restart_service(layout: &Arc<Layout>, i: usize, history: &History) {
    let l = layout.clone();
    let r = tokio::task::spawn_blocking(move || l.service(i).start(Duration::from_secs(30))).await;
    if !matches!(r, Ok(Ok(()))) {
        history.note(format!("restart of service {i}: {r:?}"));
    }
}

/// Kills the Redis master, waits for Sentinel to promote the replica (up to 30 s), brings
/// the old master back after `down` and waits (up to 30 s) until it replicates the new one.
async fn redis_failover(layout: &Arc<Layout>, down: Duration, history: &History) -> String {
    let name = "redis-failover";
    let mut redis = layout.redis.lock().await;
    let Some(old) = redis
        .master_port()
        .await
        .and_then(|p| redis.index_of_port(p))
    else {
        history.note("redis-failover: no sentinel names a known master; skipped");
        return "redis (skipped)".into();
    };
    let old_port = redis.servers[old].port();
    let target = format!("redis master :{old_port}");
    history.log(What::Fault {
        kind: name,
        target: target.clone(),
    });
    redis.servers[old].kill();
    let promoted = poll(Duration::from_secs(30), || {
        let r = &*redis;
        async move { r.master_port().await.is_some_and(|p| p != old_port) }
    })
    .await;
    history.note(format!(
        "redis-failover: {}",
        if promoted {
            "the sentinels promoted the replica"
        } else {
            "no promotion within 30 s"
        }
    ));
    tokio::time::sleep(down).await;
    if let Err(e) = redis.servers[old].restart() {
        history.note(format!("restarting redis :{old_port} failed: {e:#}"));
    }
    let url = redis.servers[old].url();
    let synced = poll(Duration::from_secs(30), || {
        let url = url.clone();
        async move {
            let info = replication_info(&url).await;
            info.contains("role:slave") && info.contains("master_link_status:up")
        }
    })
    .await;
    if !synced {
        history.note(format!(
            "redis :{old_port} is not a synced replica after 30 s"
        ));
    }

    history.log(What::Healed {
        kind: name,
        target: target.clone(),
    });
    target
}
