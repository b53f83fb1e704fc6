//! Cluster benchmark: the distributed services as separate processes (release build),
//! real nats-server (JetStream) and redis-server, and the fake LLM in this process.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p parley-tests --bench cluster -- [throughput] [makespan] [ratelimit] [scaleout] [memory] [checkpoint]
//! ```
//! No mode = the first three (`scaleout`, `memory` and `checkpoint` run only when named). Knobs (environment):
//! - `DEBATES` (throughput, default 40): debates submitted at once in the loaded run;
//!   `PACED_RATE` / `PACED_SECS` (default 500 tasks/s for 10 s): the paced run's offered
//!   load; `SEQUENTIAL` (default 5): debates run one at a time in the unloaded run.
//! - `RUNS` (makespan, default 5): debates measured, one at a time.
//! - `DURATION` (ratelimit, default 60): seconds of the measured window.
//! - `SCALE_DEBATES` (scaleout, default 100): debates submitted at once per coordinator
//!   count; `RAW_OPS` (default 2000): raw operations of each kind; `SCALE_COORDINATORS`
//!   (default `1,2,4`): the coordinator counts run; `SCALE_COORDINATOR_BIN` (default the
//!   workspace's): the coordinator binary, e.g. an older build's; `TRANSITION_BENCH_BIN`:
//!   the `transition` bench of `parley-cluster` run under callgrind at the end (default the
//!   newest one built in this profile).
//! - `LIVE_DEBATES` (memory, default 100000): debates submitted and left live;
//!   `MEMORY_COORDINATORS` (default 4); `MEMORY_PROMPTS` (default 1; 0: no prompt texts in
//!   the specs); `STATUS_SAMPLE` (default 200) status requests; `SUBMIT_CONCURRENCY`
//!   (default 64) submissions in flight; `MEMORY_COORDINATOR_BIN` (default the workspace's
//!   release `parley-coordinator`): the coordinator binary, e.g. an older build's;
//!   `MEMORY_SETTLE_SECS` (default 45): the wait after the last submission before the
//!   figures (the debates go to rest after the coordinators' `rest_after_secs`);
//!   `MEMORY_REST_AFTER_SECS` (default unset: the coordinators' default): passed to them as
//!   `PARLEY_REST_AFTER_SECS` (0: debates never rest).
//!
//! # Modes
//! - `throughput`: zero-latency fake LLM; 1 coordinator, 2 agent workers and 1 judge worker
//!   (concurrency 16 each). Tasks per second = tasks completed / (first submit → last
//!   `debateCompleted` event). Orchestration overhead per task = its `taskDispatched` →
//!   `taskCompleted` event time (coordinator timestamps) minus the task's LLM latency
//!   (`latencyMs`): checkpoint, publish, queueing, pull, result write, notification and
//!   the coordinator's handling. Reported for the loaded run (which includes the time a
//!   task waits in the queue for a free worker slot) and for an unloaded run (one debate at
//!   a time), and for a paced run that offers a steady 500 tasks/s (one debate every 44 ms)
//!   — the overhead a task sees while the cluster sustains the target rate.
//! - `makespan`: a 3-agent, 2-round debate at a fixed 200 ms latency; makespan
//!   (`debateStarted` → `debateCompleted`) / critical path (computed from the
//!   contributions' latencies, 6 × 200 ms ideally), median and worst of `RUNS`.
//! - `ratelimit`: 4 agent workers (and the judge) sharing `requestsPerMinute: 600` for the
//!   `openai-compatible` provider; the fake accepts 600 requests in any 60 s (429 with
//!   `Retry-After: 1` beyond). A backlog far larger than a minute's allowance; requests
//!   accepted per minute in a window that starts 5 s after the first submit and lasts
//!   `DURATION` seconds, as a fraction of 600, and the 429s.
//! - `scaleout`: 1, 2 and 4 coordinators (sharing debates by lease), 2 agent workers and
//!   1 judge worker (concurrency 16), zero-latency fake LLM, `SCALE_DEBATES` debates at
//!   once: tasks/s and overhead p50/p99 as in `throughput`, and the CPU time per task of
//!   each component (coordinators, agent workers, judge worker, nats-server, redis-server)
//!   from `/proc/<pid>/stat` (utime + stime, `getconf CLK_TCK`) read before the first submit
//!   and after the last debate's end event (a subscription, no status polls in the window). Then the checkpoint bytes of one 6-agent, 2-round
//!   debate run alone (Redis `total_net_input_bytes` over the debate, minus the results'
//!   payloads, next to the final state's JSON), and the raw operations a task needs, with
//!   the same clients on fresh servers: a JetStream publish + pull + ack of a task-sized
//!   message, and one task's Redis commands (claim, result, claim release, result read,
//!   checkpoint) — CPU per op of this process (the client) and of each server; the
//!   components' CPU per task is then printed as a multiple of those. Last, the
//!   instructions per coordinator transition (machine, checkpoint delta, messages' JSON;
//!   no I/O) on a 10 KB and a 400 KB state, from callgrind (`valgrind`) running the
//!   `transition` bench of `parley-cluster` (build it first: `cargo bench -p
//!   parley-cluster --bench transition --no-run`).
//! - `memory`: `MEMORY_COORDINATORS` coordinators (default lease TTL, as in production),
//!   no workers, so every debate stays live (`running`, its round-1 tasks queued in
//!   JetStream). `LIVE_DEBATES` 3-agent debates submitted through `parley.debates.submit`
//!   as users do (`SUBMIT_CONCURRENCY` requests in flight), each spec carrying its agents'
//!   and judge's role prompt texts (`systemPrompt`, the texts of
//!   `crates/agent-worker/prompts`, as the CLI sends for a config with
//!   `systemPromptPath`s) and its own problem. Reported: submissions accepted (all must
//!   be), each coordinator's debates (its lease in Redis) and VmRSS (`/proc/<pid>/status`)
//!   before and after, the bytes per live debate, nats-server's and redis-server's VmRSS,
//!   the CPU the idle-but-live debates cost (lease renewals and result polls, over 20 s),
//!   and the latency of `STATUS_SAMPLE` status requests for random live debates (one at
//!   a time) while they are all live.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use parley_protocol::{DebateEvent, DebateState, EventKind};
use parley_tests::*;
use serde_json::{json, Value};

/// One line of the final summary.
struct Row {
    mode: &'static str,
    metric: String,
    value: String,
    target: String,
    /// `None` = informational.
    ok: Option<bool>,
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms_between(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_microseconds().unwrap_or(0) as f64 / 1000.0
}

/// The `p`-quantile (0..=1) of sorted values (nearest rank).
fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Starts the services of a bench cluster: 1 coordinator, `agents` agent workers and a
/// judge worker with the given concurrency. Logs at `info` (one JSON line per task), as
/// in production.
fn services(c: &Cluster, agents: usize, concurrency: usize) -> Vec<ChildProcess> {
    let conc = concurrency.to_string();
    let flags = ["--concurrency", conc.as_str(), "--ack-wait-secs", "30"];
    let mut ps = vec![c.coordinator()];
    for _ in 0..agents {
        ps.push(c.worker_with("agent", &flags, &[]));
    }
    ps.push(c.worker_with("judge", &flags, &[]));
    ps
}

/// Waits for every debate to end; panics when one does not complete.
async fn wait_all(c: &Cluster, ids: &[String], timeout: Duration) -> Vec<Value> {
    let mut states = Vec::with_capacity(ids.len());
    for id in ids {
        let s = c.wait_done(id, timeout).await;
        assert_eq!(
            s["status"], "completed",
            "debate {id} did not complete: {s}"
        );
        states.push(s);
    }
    states
}

/// The events of the given debates, by debate id.
async fn events_of(c: &Cluster, ids: &[String]) -> HashMap<String, Vec<DebateEvent>> {
    let all = events(&c.client, "parley.debates.*.events")
        .await
        .expect("events");
    let mut by: HashMap<String, Vec<DebateEvent>> =
        ids.iter().map(|i| (i.clone(), Vec::new())).collect();
    for e in all {
        if let Some(v) = by.get_mut(&e.debate_id) {
            v.push(e);
        }
    }
    by
}

/// One task's coordinator timestamps (last dispatch, completion) and LLM latency.
struct TaskTiming {
    task_id: String,
    dispatched: DateTime<Utc>,
    completed: DateTime<Utc>,
    latency_ms: u64,
}

impl TaskTiming {
    /// Dispatch → completion minus the LLM latency, in ms.
    fn overhead(&self) -> f64 {
        ms_between(self.dispatched, self.completed) - self.latency_ms as f64
    }
}

fn task_timings(events: &[DebateEvent]) -> Vec<TaskTiming> {
    let mut dispatched: HashMap<&str, DateTime<Utc>> = HashMap::new();
    let mut out = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::TaskDispatched { task_id, .. } => {
                dispatched.insert(task_id, e.at);
            }
            EventKind::TaskCompleted {
                task_id,
                latency_ms,
                ..
            } => {
                if let Some(d) = dispatched.get(task_id.as_str()) {
                    out.push(TaskTiming {
                        task_id: task_id.clone(),
                        dispatched: *d,
                        completed: e.at,
                        latency_ms: *latency_ms,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// Converts the fake LLM's `Instant`s to wall-clock time (the fake runs in this process).
#[derive(Clone, Copy)]
struct Clock {
    instant: Instant,
    wall: DateTime<Utc>,
}

impl Clock {
    fn now() -> Self {
        Self {
            instant: Instant::now(),
            wall: Utc::now(),
        }
    }

    fn wall(&self, t: Instant) -> DateTime<Utc> {
        let d = chrono::Duration::from_std(t.saturating_duration_since(self.instant))
            .unwrap_or_default();
        let back = chrono::Duration::from_std(self.instant.saturating_duration_since(t))
            .unwrap_or_default();
        self.wall + d - back
    }
}

/// When the fake LLM received each task's call, by task id. A request is mapped to its task
/// by its prompt: the problem (→ debate), the model (→ agent, see [`spec`]), the kind
/// (propose / critique + target / refine; the judge's call is the synthesis) and, for a
/// task kind that runs every round, the order of arrival (→ round).
fn call_times(
    reqs: &[RecordedRequest],
    debates: &[(String, String)],
    clock: Clock,
) -> HashMap<String, DateTime<Utc>> {
    let agent_of = |model: &str| match model {
        "model-arch" => Some("agent-architect"),
        "model-sec" => Some("agent-security"),
        "model-kiss" => Some("agent-kiss"),
        "model-judge" => Some("judge-main"),
        _ => None,
    };
    let needles: Vec<(String, &str)> = debates
        .iter()
        .map(|(id, p)| (format!("Problem:\n{p}\n"), id.as_str()))
        .collect();
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut out = HashMap::new();
    let mut ok: Vec<&RecordedRequest> = reqs.iter().filter(|r| r.status == 200).collect();
    ok.sort_by_key(|r| r.received_at);
    for r in ok {
        let text = r.prompt_text();
        let Some((_, id)) = needles.iter().find(|(n, _)| text.contains(n.as_str())) else {
            continue;
        };
        let Some(agent) = agent_of(&r.model) else {
            continue;
        };
        let (node, target) = if agent == "judge-main" {
            ("synthesize", None)
        } else if text.contains("Refine your proposal") {
            ("refine", None)
        } else if let Some(rest) = text.split("Here is the proposal of ").nth(1) {
            ("critique", rest.split(" (").next())
        } else if text.contains("Propose a solution") {
            ("propose", None)
        } else {
            continue;
        };
        let key = format!("{id}/{node}/{agent}/{}", target.unwrap_or(""));
        let n = seen.entry(key).or_insert(0);
        *n += 1;
        // The synthesis belongs to the last round (2 in the bench's debates).
        let round = if node == "synthesize" { 2 } else { *n };
        let task_id = match target {
            Some(t) => format!("{id}/{round}/{node}/{agent}/{t}"),
            None => format!("{id}/{round}/{node}/{agent}"),
        };
        out.insert(task_id, clock.wall(r.received_at));
    }
    out
}

/// Overheads of a set of tasks: total, and split at the LLM call into "before" (dispatch →
/// call received: checkpoint, publish, waiting for a worker slot, pull, claim) and "after"
/// (answer → completion: result write, notification, the coordinator's read and
/// transition).
struct Overheads {
    total: Vec<f64>,
    before: Vec<f64>,
    after: Vec<f64>,
}

fn overheads(timings: &[TaskTiming], calls: &HashMap<String, DateTime<Utc>>) -> Overheads {
    let mut o = Overheads {
        total: Vec::new(),
        before: Vec::new(),
        after: Vec::new(),
    };
    for t in timings {
        o.total.push(t.overhead());
        if let Some(call) = calls.get(&t.task_id) {
            o.before.push(ms_between(t.dispatched, *call));
            o.after
                .push(ms_between(*call, t.completed) - t.latency_ms as f64);
        }
    }
    o
}

fn completed_at(events: &[DebateEvent]) -> Option<DateTime<Utc>> {
    events
        .iter()
        .find(|e| matches!(e.kind, EventKind::DebateCompleted { .. }))
        .map(|e| e.at)
}

fn started_at(events: &[DebateEvent]) -> Option<DateTime<Utc>> {
    events
        .iter()
        .find(|e| matches!(e.kind, EventKind::DebateStarted { .. }))
        .map(|e| e.at)
}

fn overhead_rows(rows: &mut Vec<Row>, label: &str, mut o: Overheads) {
    for v in [&mut o.total, &mut o.before, &mut o.after] {
        v.sort_by(f64::total_cmp);
    }
    let (p50, p99) = (quantile(&o.total, 0.50), quantile(&o.total, 0.99));
    println!(
        "  {label}: {} tasks, overhead p50 {p50:.1} ms, p90 {:.1} ms, p99 {p99:.1} ms, max {:.1} ms",
        o.total.len(),
        quantile(&o.total, 0.90),
        o.total.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "    split at the LLM call ({} tasks matched): dispatch → call p50 {:.1} / p99 {:.1} ms; answer → completed p50 {:.1} / p99 {:.1} ms",
        o.before.len(),
        quantile(&o.before, 0.5),
        quantile(&o.before, 0.99),
        quantile(&o.after, 0.5),
        quantile(&o.after, 0.99)
    );
    rows.push(Row {
        mode: "throughput",
        metric: format!("overhead p50, {label}"),
        value: format!("{p50:.1} ms"),
        target: "<= 5 ms".into(),
        ok: Some(p50 <= 5.0),
    });
    rows.push(Row {
        mode: "throughput",
        metric: format!("overhead p99, {label}"),
        value: format!("{p99:.1} ms"),
        target: "-".into(),
        ok: None,
    });
    rows.push(Row {
        mode: "throughput",
        metric: format!("  {label}: dispatch→call p50/p99"),
        value: format!(
            "{:.1}/{:.1} ms",
            quantile(&o.before, 0.5),
            quantile(&o.before, 0.99)
        ),
        target: "-".into(),
        ok: None,
    });
    rows.push(Row {
        mode: "throughput",
        metric: format!("  {label}: answer→completed p50/p99"),
        value: format!(
            "{:.1}/{:.1} ms",
            quantile(&o.after, 0.5),
            quantile(&o.after, 0.99)
        ),
        target: "-".into(),
        ok: None,
    });
}

/// What a batch of debates measured.
struct Batch {
    /// Tasks completed.
    tasks: usize,
    /// Seconds from the first submit to the last `debateCompleted`.
    wall_s: f64,
    overheads: Overheads,
}

/// Waits for the debates `ids` (submitted for `problems`, in order) and measures them.
async fn measure_batch(
    c: &Cluster,
    ids: &[String],
    problems: Vec<String>,
    first_submit: DateTime<Utc>,
    clock: Clock,
) -> Batch {
    wait_all(c, ids, Duration::from_secs(300)).await;
    let evs = events_of(c, ids).await;
    let last_done = evs
        .values()
        .filter_map(|e| completed_at(e))
        .max()
        .expect("no debate completed");
    let tasks = evs
        .values()
        .flatten()
        .filter(|e| matches!(e.kind, EventKind::TaskCompleted { .. }))
        .count();
    let named: Vec<(String, String)> = ids.iter().cloned().zip(problems).collect();
    let calls = call_times(&c.fake.requests(), &named, clock);
    let timings: Vec<TaskTiming> = evs.values().flat_map(|e| task_timings(e)).collect();
    Batch {
        tasks,
        wall_s: ms_between(first_submit, last_done) / 1000.0,
        overheads: overheads(&timings, &calls),
    }
}

async fn throughput(rows: &mut Vec<Row>) {
    let debates = env_num("DEBATES", 40) as usize;
    let sequential = env_num("SEQUENTIAL", 5) as usize;
    println!("== throughput: {debates} debates at once, then {sequential} one at a time; zero LLM latency; load {}", load_average());
    let c = Cluster::start().await;
    let clock = Clock::now();
    let _services = services(&c, 2, 16);

    // Warm-up: streams, consumers, connections, caches.
    let warm = c
        .submit(&spec("Warm-up debate for the throughput bench"))
        .await;
    wait_all(&c, &[warm], Duration::from_secs(60)).await;

    // Loaded: everything at once.
    let problems: Vec<String> = (0..debates)
        .map(|i| format!("Throughput debate {i:03}: design service {i}"))
        .collect();
    let specs: Vec<Value> = problems.iter().map(|p| spec(p)).collect();
    let first_submit = Utc::now();
    let started = Instant::now();
    let ids: Vec<String> = futures::future::join_all(specs.iter().map(|s| c.submit(s))).await;
    let submitted_in = started.elapsed();
    let Batch {
        tasks,
        wall_s,
        overheads: loaded,
    } = measure_batch(&c, &ids, problems, first_submit, clock).await;
    let rate = tasks as f64 / wall_s;
    println!("  loaded = {debates} debates submitted at once (includes waiting for worker slots and for the debate's actor); unloaded = one debate at a time");
    println!(
        "  loaded: {tasks} tasks in {wall_s:.2} s (first submit → last debateCompleted; submits took {:.0} ms): {rate:.0} tasks/s",
        submitted_in.as_secs_f64() * 1000.0
    );
    rows.push(Row {
        mode: "throughput",
        metric: format!("tasks/s, {debates} debates x 22 at once"),
        value: format!("{rate:.0}"),
        target: ">= 500".into(),
        ok: Some(rate >= 500.0),
    });
    overhead_rows(rows, "loaded", loaded);

    // Paced: an offered load of PACED_RATE tasks/s (one 22-task debate every 22/rate s)
    // for PACED_SECS: the overhead a task sees while the cluster sustains that rate.
    let paced_rate = env_num("PACED_RATE", 500) as f64;
    let paced_secs = env_num("PACED_SECS", 10) as f64;
    let n = ((paced_rate * paced_secs) / 22.0).ceil() as usize;
    let problems: Vec<String> = (0..n)
        .map(|i| format!("Paced debate {i:04}: design service {i}"))
        .collect();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(22.0 / paced_rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let first_submit = Utc::now();
    let mut ids = Vec::with_capacity(n);
    for p in &problems {
        tick.tick().await;
        ids.push(c.submit(&spec(p)).await);
    }
    let Batch {
        tasks,
        wall_s,
        overheads: paced,
    } = measure_batch(&c, &ids, problems, first_submit, clock).await;
    let achieved = tasks as f64 / wall_s;
    println!(
        "  paced: {n} debates offered at {paced_rate:.0} tasks/s for {paced_secs:.0} s: {tasks} tasks in {wall_s:.2} s = {achieved:.0} tasks/s"
    );
    rows.push(Row {
        mode: "throughput",
        metric: format!("tasks/s sustained at an offered {paced_rate:.0}/s"),
        value: format!("{achieved:.0}"),
        target: format!(">= {:.0}", paced_rate * 0.95),
        ok: Some(achieved >= paced_rate * 0.95),
    });
    overhead_rows(rows, &format!("paced at {paced_rate:.0} tasks/s"), paced);

    // Unloaded: one debate at a time.
    let mut timings = Vec::new();
    let mut named = Vec::new();
    for i in 0..sequential {
        let problem = format!("Unloaded debate {i:03}: design a cache");
        let id = c.submit(&spec(&problem)).await;
        wait_all(&c, std::slice::from_ref(&id), Duration::from_secs(60)).await;
        let evs = events_of(&c, std::slice::from_ref(&id)).await;
        timings.extend(task_timings(&evs[&id]));
        named.push((id, problem));
    }
    let calls = call_times(&c.fake.requests(), &named, clock);
    overhead_rows(rows, "unloaded", overheads(&timings, &calls));
    assert_no_completed_call_repeated(&c.fake);
}

async fn makespan(rows: &mut Vec<Row>) {
    let runs = env_num("RUNS", 5).max(1) as usize;
    let latency = Duration::from_millis(200);
    println!(
        "== makespan: {runs} runs of 3 agents x 2 rounds at {latency:?} fixed latency; load {}",
        load_average()
    );
    let c = Cluster::start().await;
    c.fake.set_latency(Latency::Fixed(latency));
    let _services = services(&c, 2, 8);
    let warm = c
        .submit(&spec("Warm-up debate for the makespan bench"))
        .await;
    wait_all(&c, &[warm], Duration::from_secs(60)).await;

    let mut ratios = Vec::new();
    for i in 0..runs {
        let submitted = Utc::now();
        let id = c
            .submit(&spec(&format!(
                "Makespan debate {i:02}: design a rate limiter"
            )))
            .await;
        let state = wait_all(&c, std::slice::from_ref(&id), Duration::from_secs(60)).await;
        let state: DebateState = serde_json::from_value(state[0].clone()).expect("a debate state");
        let evs = events_of(&c, std::slice::from_ref(&id)).await;
        let (Some(start), Some(end)) = (started_at(&evs[&id]), completed_at(&evs[&id])) else {
            panic!("debate {id}: no debateStarted/debateCompleted event");
        };
        let span = ms_between(start, end);
        let from_submit = ms_between(submitted, end);
        let cp = critical_path_ms(&state) as f64;
        let ratio = span / cp;
        println!(
            "  run {i}: makespan {span:.0} ms (submit → completed {from_submit:.0} ms), critical path {cp:.0} ms, ratio {ratio:.3}"
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    let (median, worst) = (ratios[ratios.len() / 2], ratios[ratios.len() - 1]);
    println!("  {runs} runs: ratio median {median:.3}, worst {worst:.3}");
    rows.push(Row {
        mode: "makespan",
        metric: format!("makespan / critical path, median of {runs}"),
        value: format!("{median:.3}"),
        target: "<= 1.05".into(),
        ok: Some(median <= 1.05),
    });
    rows.push(Row {
        mode: "makespan",
        metric: format!("makespan / critical path, worst of {runs}"),
        value: format!("{worst:.3}"),
        target: "<= 1.05".into(),
        ok: Some(worst <= 1.05),
    });
}

async fn ratelimit(rows: &mut Vec<Row>) {
    let duration = Duration::from_secs(env_num("DURATION", 60).max(1));
    let skip = Duration::from_secs(5);
    let limit = 600u32;
    // About 9.8 calls/s get through: keep the queue full past the end of the window.
    let debates = ((skip + duration).as_secs() as usize * 10 + 25 * 10).div_ceil(22);
    println!(
        "== ratelimit: 4 agent workers sharing {limit} requests/min; {debates} debates ({} calls) at once; window {skip:?} + {duration:?}; load {}",
        debates * 22,
        load_average()
    );
    let c = Cluster::start_with_config(json!({
        "providers": {"openai-compatible": {"requestsPerMinute": limit}}
    }))
    .await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(50)));
    c.fake.set_rate_limit(Some(RateLimit {
        requests: limit,
        window: Duration::from_secs(60),
        retry_after: Some(Duration::from_secs(1)),
    }));
    let services = services(&c, 4, 8);

    let specs: Vec<Value> = (0..debates)
        .map(|i| spec(&format!("Rate-limited debate {i:03}: design service {i}")))
        .collect();
    let t0 = Instant::now();
    let ids: Vec<String> = futures::future::join_all(specs.iter().map(|s| c.submit(s))).await;
    let window_start = t0 + skip;
    let window_end = window_start + duration;
    tokio::time::sleep_until((window_end + Duration::from_secs(1)).into()).await;

    let reqs = c.fake.requests();
    let in_window =
        |r: &&RecordedRequest| r.received_at >= window_start && r.received_at < window_end;
    let accepted = reqs
        .iter()
        .filter(in_window)
        .filter(|r| r.status != 429)
        .count();
    let refused_in_window = reqs
        .iter()
        .filter(in_window)
        .filter(|r| r.status == 429)
        .count();
    let refused = c.fake.rate_limited_count();
    let after = reqs.iter().filter(|r| r.received_at >= window_end).count();
    let calls_left = (debates * 22).saturating_sub(reqs.iter().filter(|r| r.status != 429).count());
    let per_min = accepted as f64 * 60.0 / duration.as_secs_f64();
    let fraction = per_min / limit as f64;
    let handed_back: usize = services
        .iter()
        .map(|p| p.log().matches("handing the task back").count())
        .sum();
    // Busiest 60 s of the run so far, by the fake's own sliding window.
    let mut times: Vec<Instant> = reqs
        .iter()
        .filter(|r| r.status != 429)
        .map(|r| r.received_at)
        .collect();
    times.sort();
    let mut busiest = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= Duration::from_secs(60) {
            lo += 1;
        }
        busiest = busiest.max(hi - lo + 1);
    }
    let states: BTreeMap<String, usize> = {
        let mut m = BTreeMap::new();
        for id in &ids {
            let s = c.status(id).await;
            *m.entry(s["status"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
        }
        m
    };
    println!(
        "  window: {accepted} accepted in {:.0} s = {per_min:.1}/min = {:.1} % of {limit}; 429s: {refused_in_window} in the window, {refused} in all",
        duration.as_secs_f64(),
        fraction * 100.0
    );
    println!(
        "  busiest 60 s: {busiest} accepted; calls in the 1 s after the window: {after}; calls still queued: {calls_left}; tasks handed back: {handed_back}; debates: {states:?}"
    );
    if after == 0 || calls_left == 0 {
        println!("  WARNING: the queue drained before the window ended; raise the backlog");
    }
    rows.push(Row {
        mode: "ratelimit",
        metric: format!("accepted/min over {duration:?} (of {limit})"),
        value: format!("{per_min:.1} ({:.1} %)", fraction * 100.0),
        target: ">= 95 %".into(),
        ok: Some(fraction >= 0.95),
    });
    rows.push(Row {
        mode: "ratelimit",
        metric: "429 replies (first submit to window end)".into(),
        value: refused.to_string(),
        target: "0".into(),
        ok: Some(refused == 0),
    });
}

/// CPU time (user + system) of a process so far, in seconds, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32, ticks_per_s: f64) -> f64 {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    // Fields after the command name (in parentheses, may hold spaces): state is field 3,
    // utime field 14, stime field 15.
    let rest = &stat[stat
        .rfind(')')
        .unwrap_or_else(|| panic!("{path}: no ')' in {stat:?}"))
        + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> f64 {
        fields
            .get(i - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{path}: field {i} is not a tick count: {stat:?}"))
            as f64
    };
    (tick(14) + tick(15)) / ticks_per_s
}

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`).
fn clock_ticks() -> f64 {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("running getconf CLK_TCK");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|t| *t > 0.0)
        .unwrap_or_else(|| panic!("getconf CLK_TCK printed {text:?}"))
}

/// Waits until every debate of `ids` published its end event (completed, failed or
/// cancelled) on `events`, a core subscription to the event subjects made before the
/// submits: unlike status polls, it adds no work to the services. A second without an
/// event (or a dropped one: a core subscription may lose messages to a slow reader) asks
/// the open debates' status once. Panics after `timeout`.
async fn wait_end_events(
    c: &Cluster,
    events: &mut async_nats::Subscriber,
    ids: &[String],
    timeout: Duration,
) {
    use futures::StreamExt;
    let mut open: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let deadline = Instant::now() + timeout;
    while !open.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} debates did not end in {timeout:?}",
            open.len()
        );
        match tokio::time::timeout(Duration::from_secs(1), events.next()).await {
            Ok(Some(msg)) => {
                let events: Vec<DebateEvent> =
                    parley_protocol::decode_event_message(&msg.payload).unwrap_or_default();
                for e in events {
                    if matches!(
                        e.kind,
                        EventKind::DebateCompleted { .. }
                            | EventKind::DebateFailed { .. }
                            | EventKind::DebateCancelled
                    ) {
                        open.remove(e.debate_id.as_str());
                    }
                }
            }
            Ok(None) => panic!("the event subscription ended"),
            Err(_) => {
                let mut ended = Vec::new();
                for id in &open {
                    if is_done(&c.status(id).await) {
                        ended.push(*id);
                    }
                }
                for id in ended {
                    open.remove(id);
                }
            }
        }
    }
}

/// The processes whose CPU time a scale-out run reads, by component.
struct Components {
    ticks: f64,
    groups: Vec<(&'static str, Vec<u32>)>,
}

impl Components {
    /// CPU seconds of each component so far.
    fn sample(&self) -> Vec<f64> {
        self.groups
            .iter()
            .map(|(_, pids)| pids.iter().map(|p| cpu_seconds(*p, self.ticks)).sum())
            .collect()
    }
}

/// What one scale-out run measured.
struct ScaleRun {
    coordinators: usize,
    tasks: usize,
    rate: f64,
    p50: f64,
    p99: f64,
    /// ms of CPU per task, by component (as in [`Components::groups`]).
    cpu_ms: Vec<(&'static str, f64)>,
    /// Messages the events and tasks streams stored, per task.
    messages: (f64, f64),
}

/// `n` coordinators, 2 agent workers and a judge worker (concurrency 16 each), zero-latency
/// fake LLM: a batch of `debates` submitted at once, CPU read before and after.
async fn scaleout_run(n: usize, debates: usize, ticks: f64) -> ScaleRun {
    let c = Cluster::start().await;
    let conc = "16";
    let flags = ["--concurrency", conc, "--ack-wait-secs", "30"];
    let coordinators: Vec<ChildProcess> = (0..n)
        .map(|_| match std::env::var_os("SCALE_COORDINATOR_BIN") {
            Some(bin) => c.coordinator_from(std::path::Path::new(&bin), &[]),
            None => c.coordinator(),
        })
        .collect();
    let agents: Vec<ChildProcess> = (0..2)
        .map(|_| c.worker_with("agent", &flags, &[]))
        .collect();
    let judge = c.worker_with("judge", &flags, &[]);
    let pids = |ps: &[ChildProcess]| ps.iter().map(ChildProcess::pid).collect::<Vec<_>>();
    let comps = Components {
        ticks,
        groups: vec![
            ("coordinators", pids(&coordinators)),
            ("agent workers", pids(&agents)),
            ("judge worker", vec![judge.pid()]),
            ("nats-server", vec![c.nats.pid().expect("nats-server runs")]),
            (
                "redis-server",
                vec![c.redis.pid().expect("redis-server runs")],
            ),
        ],
    };
    let clock = Clock::now();
    // Warm-up: a few debates so that every coordinator has run one.
    let warm_specs: Vec<Value> = (0..2 * n)
        .map(|i| spec(&format!("Warm-up debate {i} for the scale-out bench")))
        .collect();
    let warm: Vec<String> = futures::future::join_all(warm_specs.iter().map(|s| c.submit(s))).await;
    wait_all(&c, &warm, Duration::from_secs(60)).await;

    let problems: Vec<String> = (0..debates)
        .map(|i| format!("Scale-out debate {i:04}: design service {i}"))
        .collect();
    let specs: Vec<Value> = problems.iter().map(|p| spec(p)).collect();
    let mut end_events = c
        .client
        .subscribe("parley.debates.*.events")
        .await
        .expect("subscribing to the debates' events");
    let before = comps.sample();
    let first_submit = Utc::now();
    let ids: Vec<String> = futures::future::join_all(specs.iter().map(|s| c.submit(s))).await;
    wait_end_events(&c, &mut end_events, &ids, Duration::from_secs(600)).await;
    let after = comps.sample();
    drop(end_events);
    let Batch {
        tasks,
        wall_s,
        overheads: mut o,
    } = measure_batch(&c, &ids, problems, first_submit, clock).await;
    o.total.sort_by(f64::total_cmp);
    let cpu_ms = comps
        .groups
        .iter()
        .zip(before.iter().zip(&after))
        .map(|((name, _), (b, a))| (*name, (a - b) * 1000.0 / tasks as f64))
        .collect();
    assert_no_completed_call_repeated(&c.fake);
    drop((coordinators, agents, judge));
    // The streams are fresh: their last sequence is every message they stored.
    let js = async_nats::jetstream::new(c.client.clone());
    let mut stored = [0u64; 2];
    for (n, name) in stored.iter_mut().zip(["PARLEY_EVENTS", "PARLEY_TASKS"]) {
        let mut stream = js.get_stream(name).await.expect("the stream");
        *n = stream
            .info()
            .await
            .expect("the stream's info")
            .state
            .last_sequence;
    }
    let per_task = |n: u64| n as f64 / tasks as f64;
    ScaleRun {
        messages: (per_task(stored[0]), per_task(stored[1])),
        coordinators: n,
        tasks,
        rate: tasks as f64 / wall_s,
        p50: quantile(&o.total, 0.5),
        p99: quantile(&o.total, 0.99),
        cpu_ms,
    }
}

/// CPU per raw operation, in µs: the bench process (client) and each server.
struct RawCost {
    client_us: f64,
    nats_us: f64,
    redis_us: f64,
}

/// The bytes of a task message in the raw JetStream loop (a task reference: ids, attempt,
/// kind, dispatch token: about 250 bytes of JSON).
const RAW_TASK_BYTES: usize = 256;

/// `ops` JetStream round trips of a task-sized message: publish (awaiting the stream's
/// ack) into a work-queue stream, pull (batches of 16) and ack, as a worker does; at most
/// 16 publishes in flight.
async fn raw_jetstream(c: &Cluster, ops: usize, ticks: f64) -> RawCost {
    use async_nats::jetstream::{consumer::pull, stream};
    let js = async_nats::jetstream::new(c.client.clone());
    let s = js
        .create_stream(stream::Config {
            name: "SCALEOUT_RAW".into(),
            subjects: vec!["scaleout.raw".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .expect("creating the raw stream");
    let consumer = s
        .create_consumer(pull::Config {
            durable_name: Some("raw".into()),
            ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("creating the raw consumer");
    let payload = vec![b'x'; RAW_TASK_BYTES];
    let sample = || raw_sample(c, ticks);
    let before = sample();
    let publisher = async {
        use futures::StreamExt;
        futures::stream::iter(0..ops)
            .map(|_| {
                let js = js.clone();
                let payload = payload.clone();
                async move {
                    js.publish("scaleout.raw", payload.into())
                        .await
                        .expect("publish")
                        .await
                        .expect("publish ack")
                }
            })
            .buffer_unordered(16)
            .count()
            .await
    };
    let puller = async {
        use futures::StreamExt;
        let mut got = 0;
        while got < ops {
            let mut batch = consumer
                .fetch()
                .max_messages(16)
                .expires(Duration::from_millis(500))
                .messages()
                .await
                .expect("fetch");
            while let Some(m) = batch.next().await {
                m.expect("message").ack().await.expect("ack");
                got += 1;
            }
        }
        got
    };
    let (published, pulled) = tokio::join!(publisher, puller);
    assert_eq!((published, pulled), (ops, ops));
    raw_cost(before, sample(), ops)
}

/// CPU seconds so far of this process (the raw loops' client), nats-server, redis-server.
fn raw_sample(c: &Cluster, ticks: f64) -> [f64; 3] {
    [
        cpu_seconds(std::process::id(), ticks),
        cpu_seconds(c.nats.pid().expect("nats-server runs"), ticks),
        cpu_seconds(c.redis.pid().expect("redis-server runs"), ticks),
    ]
}

fn raw_cost(before: [f64; 3], after: [f64; 3], ops: usize) -> RawCost {
    let us = |i: usize| (after[i] - before[i]) * 1e6 / ops as f64;
    RawCost {
        client_us: us(0),
        nats_us: us(1),
        redis_us: us(2),
    }
}

/// The byte sizes of one task's Redis values in the raw loop.
struct TaskSizes {
    /// The task body the coordinator stores before publishing its reference.
    body: usize,
    /// The result the worker stores.
    result: usize,
    /// The checkpoint the coordinator writes after applying the result.
    state: usize,
}

/// `ops` times the Redis commands one task causes, with the same keys, commands and
/// script logic as the store: the worker's lookup (pipeline of 3 `HGET` + 2 `EXISTS`),
/// claim (`SET NX PX`), result write (script: `EXISTS`, `HSETNX`, `HDEL` of the body,
/// `PTTL`) and claim release (script), the coordinator's result read (`HMGET` of the
/// success and the attempt's failure) and checkpoint (version-checked script, which stores
/// the next task's body too, as the store's does). 16 tasks in flight on one multiplexed
/// connection, 22 tasks per debate.
async fn raw_redis(c: &Cluster, ops: usize, sizes: &TaskSizes, ticks: f64) -> RawCost {
    use futures::StreamExt;
    let conn = redis_connection(&c.redis.url()).await;
    let store = redis::Script::new(
        "if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end \
         local set = redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) \
         redis.call('HDEL', KEYS[3], ARGV[3]) \
         local ttl = redis.call('PTTL', KEYS[1]) \
         if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end return set",
    );
    let release = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    // The store's delta checkpoint (version and link checked, one field appended), with
    // the transition's task body.
    let cas = redis::Script::new(
        "local cur = redis.call('HGET', KEYS[1], 'version') if not cur then cur = '0' end \
         if cur ~= ARGV[1] then return 0 end \
         if not redis.call('HGET', KEYS[1], 'base') then return 2 end \
         if redis.call('HGET', KEYS[1], 'nonce') ~= ARGV[3] then return 2 end \
         redis.call('HSET', KEYS[1], 'version', ARGV[2], 'nonce', ARGV[4], 'd:' .. ARGV[2], ARGV[5]) \
         for i = 6, #ARGV - 1, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end \
         return 1",
    );
    let (body, result, state) = (
        "b".repeat(sizes.body),
        "r".repeat(sizes.result),
        "s".repeat(sizes.state),
    );
    // The debates' states exist (the result script checks it) before the window.
    let debates = ops.div_ceil(22);
    let mut setup = conn.clone();
    for d in 0..debates {
        let _: () = redis::cmd("HSET")
            .arg(format!("parley:{{raw-{d}}}:state"))
            .arg("version")
            .arg(0)
            .arg("base")
            .arg(0)
            .arg("nonce")
            .arg(0)
            .arg("state")
            .arg(&state)
            .query_async(&mut setup)
            .await
            .expect("HSET initial state");
    }
    let sample = || raw_sample(c, ticks);
    let before = sample();
    // The checkpoints of one debate are serial (version-checked), as in its actor.
    let done = futures::stream::iter(0..debates)
        .map(|d| {
            let mut conn = conn.clone();
            let (store, release, cas) = (&store, &release, &cas);
            let (body, result, state) = (&body, &result, &state);
            async move {
                let k = |part: &str| format!("parley:{{raw-{d}}}:{part}");
                let tasks = (d * 22..((d + 1) * 22).min(ops)).len();
                // The first task's body goes in with the debate's first checkpoint; each
                // later one with the checkpoint of the transition before it.
                let _: i64 = redis::cmd("HSET")
                    .arg(k("tasks"))
                    .arg(format!("raw-{d}/task-0#1"))
                    .arg(body)
                    .query_async(&mut conn)
                    .await
                    .expect("HSET body");
                for t in 0..tasks {
                    let task = format!("raw-{d}/task-{t}");
                    let field = format!("{task}#1");
                    let (_, _, _, exists, got): (
                        Option<String>,
                        Option<String>,
                        bool,
                        bool,
                        Option<String>,
                    ) = redis::pipe()
                        .cmd("HGET")
                        .arg(k("results"))
                        .arg(&task)
                        .cmd("HGET")
                        .arg(k("results"))
                        .arg(&field)
                        .cmd("EXISTS")
                        .arg(k("cancel"))
                        .cmd("EXISTS")
                        .arg(k("state"))
                        .cmd("HGET")
                        .arg(k("tasks"))
                        .arg(&field)
                        .query_async(&mut conn)
                        .await
                        .expect("lookup pipeline");
                    assert!(
                        exists && got.is_some(),
                        "task {task}: state or body missing"
                    );
                    let claim = k(&format!("claim:{task}"));
                    let set: Option<String> = redis::cmd("SET")
                        .arg(&claim)
                        .arg("worker-1")
                        .arg("NX")
                        .arg("PX")
                        .arg(30_000)
                        .query_async(&mut conn)
                        .await
                        .expect("SET claim");
                    assert!(set.is_some(), "claim {claim} already held");
                    let stored: i64 = store
                        .key(k("state"))
                        .key(k("results"))
                        .key(k("tasks"))
                        .arg(&task)
                        .arg(result)
                        .arg(&field)
                        .invoke_async(&mut conn)
                        .await
                        .expect("store result");
                    assert_eq!(stored, 1, "result of {task} not stored");
                    let _: i64 = release
                        .key(&claim)
                        .arg("worker-1")
                        .invoke_async(&mut conn)
                        .await
                        .expect("release claim");
                    let _: Vec<Option<String>> = redis::cmd("HMGET")
                        .arg(k("results"))
                        .arg(&task)
                        .arg(&field)
                        .query_async(&mut conn)
                        .await
                        .expect("HMGET result");
                    let saved: i64 = cas
                        .key(k("state"))
                        .key(k("tasks"))
                        .arg(t)
                        .arg(t + 1)
                        .arg(t)
                        .arg(t + 1)
                        .arg(state)
                        .arg(format!("raw-{d}/task-{}#1", t + 1))
                        .arg(body)
                        .invoke_async(&mut conn)
                        .await
                        .expect("checkpoint");
                    assert_eq!(saved, 1, "checkpoint {t} of raw-{d} refused");
                }
                tasks
            }
        })
        .buffer_unordered(16)
        .fold(0, |n, t| async move { n + t })
        .await;
    assert_eq!(done, ops);
    raw_cost(before, sample(), ops)
}

/// A `agents`-agent, 2-round debate spec (roles cycle through the built-in ones).
fn wide_spec(problem: &str, agents: usize) -> Value {
    let roles = [
        "architect",
        "security",
        "kiss",
        "performance",
        "testing",
        "datamodeling",
    ];
    let list: Vec<Value> = (0..agents)
        .map(|i| {
            json!({"id": format!("agent-{i}"), "name": format!("Agent {i}"),
                   "role": roles[i % roles.len()], "model": "model-arch", "temperature": 0.1})
        })
        .collect();
    json!({
        "problem": problem,
        "agents": list,
        "judge": {"id": "judge-main", "name": "Judge", "role": "generalist", "model": "model-judge", "temperature": 0.4},
        "debate": {"rounds": 2, "terminationCondition": {"type": "fixed"}}
    })
}

/// The fields of Redis `INFO <section>` as numbers (the ones that are).
async fn redis_info(
    conn: &mut redis::aio::MultiplexedConnection,
    section: &str,
) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .expect("INFO");
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// The arguments of one `MONITOR` line (`<time> [<db> <client>] "ARG" "ARG" ...`), as byte
/// counts of the unescaped values: Redis escapes `\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b`
/// and other bytes as `\xHH`. Also returns the values themselves, lossily (for keys).
fn monitor_args(line: &str) -> Vec<(usize, String)> {
    let Some(start) = line.find("] \"") else {
        return Vec::new();
    };
    let bytes = &line.as_bytes()[start + 2..];
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        i += 1;
        let (mut len, mut text) = (0, Vec::new());
        while i < bytes.len() && bytes[i] != b'"' {
            if bytes[i] == b'\\' && i + 1 < bytes.len() {
                i += if bytes[i + 1] == b'x' { 4 } else { 2 };
                text.push(b'?');
            } else {
                text.push(bytes[i]);
                i += 1;
            }
            len += 1;
        }
        i += 1;
        out.push((len, String::from_utf8_lossy(&text).into_owned()));
    }
    out
}

/// Bytes of the commands a debate caused, by what they are (from `MONITOR`).
#[derive(Default)]
struct RedisWrites {
    /// Checkpoints (the version-checked state scripts, snapshots and deltas): count,
    /// bytes of the snapshot or delta.
    checkpoints: (usize, usize),
    /// The snapshots among them: count, bytes.
    snapshots: (usize, usize),
    /// Task bodies (in the checkpoint script, or an `HSET` of the tasks hash): count, body
    /// bytes.
    bodies: (usize, usize),
    /// Results (the result script): count, result bytes.
    results: (usize, usize),
    /// Every argument of every command about the debate (keys, scripts' hashes, values).
    all_args: usize,
    commands: usize,
}

impl RedisWrites {
    fn add(&mut self, args: &[(usize, String)]) {
        let Some((_, cmd)) = args.first() else {
            return;
        };
        self.commands += 1;
        self.all_args += args.iter().map(|(n, _)| n).sum::<usize>();
        let key = |i: usize| args.get(i).map(|(_, k)| k.as_str()).unwrap_or("");
        match cmd.to_ascii_uppercase().as_str() {
            "EVALSHA" | "EVAL" => {
                let numkeys: usize = key(2).parse().unwrap_or(0);
                let argv = args.get(3 + numkeys..).unwrap_or(&[]);
                if !key(3).ends_with(":state") {
                    return;
                }
                match numkeys {
                    // A checkpoint (KEYS: state, task bodies): a snapshot (expected, next,
                    // link, state JSON, format) or a delta (expected, next, expected
                    // link, link, delta), then the transition's task bodies (field, JSON).
                    1 | 2 if argv.len() >= 5 => {
                        let bytes = if argv[3].1.starts_with('{') {
                            self.snapshots.0 += 1;
                            self.snapshots.1 += argv[3].0;
                            argv[3].0
                        } else {
                            argv[4].0
                        };
                        self.checkpoints.0 += 1;
                        self.checkpoints.1 += bytes;
                        for pair in argv[5..].chunks(2) {
                            if let [_, (n, _)] = pair {
                                self.bodies.0 += 1;
                                self.bodies.1 += n;
                            }
                        }
                    }
                    3 if argv.len() >= 2 => {
                        self.results.0 += 1;
                        self.results.1 += argv[1].0;
                    }
                    _ => {}
                }
            }
            "HSET" if key(1).ends_with(":tasks") => {
                for pair in args[2..].chunks(2) {
                    if let [_, (n, _)] = pair {
                        self.bodies.0 += 1;
                        self.bodies.1 += n;
                    }
                }
            }
            _ => {}
        }
    }
}

/// Everything Redis `MONITOR` reports on a connection of its own, until the returned
/// sender is used (then the lines seen so far).
async fn redis_monitor(
    port: u16,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Vec<String>>,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connecting to redis-server for MONITOR");
    s.write_all(b"MONITOR\r\n").await.expect("MONITOR");
    let mut lines = BufReader::new(s).lines();
    let first = lines.next_line().await.expect("MONITOR reply");
    assert_eq!(first.as_deref(), Some("+OK"), "MONITOR refused: {first:?}");
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                line = lines.next_line() => match line.expect("reading MONITOR") {
                    Some(l) => seen.push(l),
                    None => break,
                },
            }
        }
        seen
    });
    (stop, task)
}

/// What one 6-agent, 2-round debate run alone (1 coordinator, 2 agent workers, 1 judge
/// worker) writes into Redis, next to its final state's JSON: `MONITOR` splits the
/// commands, `INFO stats` gives all bytes received. Returns the sizes of one task's values
/// (mean body, mean result, mean checkpoint) for the raw loop.
async fn checkpoint_bytes(rows: &mut Vec<Row>) -> TaskSizes {
    let c = Cluster::start().await;
    let _services = services(&c, 2, 16);
    let warm = c
        .submit(&spec("Warm-up debate for the checkpoint bytes"))
        .await;
    wait_all(&c, &[warm], Duration::from_secs(60)).await;
    let mut conn = redis_connection(&c.redis.url()).await;
    let net_in = |m: &HashMap<String, String>| -> u64 {
        m.get("total_net_input_bytes")
            .and_then(|v| v.parse().ok())
            .expect("INFO stats has total_net_input_bytes")
    };
    let (stop, monitor) = redis_monitor(c.redis.port()).await;
    let in0 = net_in(&redis_info(&mut conn, "stats").await);
    let id = c
        .submit(&wide_spec("Checkpoint bytes: design a 6-team platform", 6))
        .await;
    wait_all(&c, std::slice::from_ref(&id), Duration::from_secs(60)).await;
    let in1 = net_in(&redis_info(&mut conn, "stats").await);
    // The marker ends what MONITOR has to report about the debate.
    let marker = format!("scaleout-monitor-end-{id}");
    let _: String = redis::cmd("ECHO")
        .arg(&marker)
        .query_async(&mut conn)
        .await
        .expect("ECHO");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = stop.send(());
    let lines = monitor.await.expect("the MONITOR task");
    assert!(
        lines.iter().any(|l| l.contains(&marker)),
        "MONITOR did not report the end marker"
    );
    let tag = format!("{{{id}}}");
    let mut w = RedisWrites::default();
    for l in lines.iter().filter(|l| l.contains(&tag)) {
        w.add(&monitor_args(l));
    }
    // The final state as the coordinator reads it (a finished debate may keep its last
    // deltas next to an earlier snapshot).
    let store = parley_cluster::RedisStore::connect(&c.redis.url())
        .await
        .expect("connecting the store");
    let final_state = store
        .state(&id)
        .await
        .expect("reading the checkpoint")
        .expect("the debate's state is stored");
    let final_state = serde_json::to_string(&final_state.state)
        .expect("the state as JSON")
        .len();
    let tasks = w.results.0;
    assert!(
        w.checkpoints.0 > 0 && tasks > 0 && w.bodies.0 > 0,
        "MONITOR saw no checkpoint, result or body of {id}"
    );
    let ratio = w.checkpoints.1 as f64 / final_state as f64;
    println!(
        "  6 agents x 2 rounds, {tasks} tasks: {} commands naming the debate, {} bytes of arguments; {} bytes into Redis in all (INFO total_net_input_bytes, every client)",
        w.commands,
        w.all_args,
        in1 - in0
    );
    println!(
        "  checkpoints: {} writes, {} bytes of snapshots and deltas (mean {}; {} snapshots of {} bytes); final state JSON {final_state} bytes: {ratio:.2} x the final state (42.9 x before deltas)",
        w.checkpoints.0,
        w.checkpoints.1,
        w.checkpoints.1 / w.checkpoints.0,
        w.snapshots.0,
        w.snapshots.1
    );
    println!(
        "  task bodies: {} writes, {} bytes (mean {}); results: {} writes, {} bytes (mean {})",
        w.bodies.0,
        w.bodies.1,
        w.bodies.1 / w.bodies.0,
        w.results.0,
        w.results.1,
        w.results.1 / w.results.0
    );
    let mut row = |metric: &str, value: String| {
        rows.push(Row {
            mode: "checkpoint",
            metric: metric.into(),
            value,
            target: "-".into(),
            ok: None,
        })
    };
    row(
        "6x2 debate: checkpoints (writes, bytes)",
        format!("{}, {}", w.checkpoints.0, w.checkpoints.1),
    );
    row(
        "6x2 debate: final state JSON bytes",
        final_state.to_string(),
    );
    row(
        "6x2 debate: checkpoint snapshots (writes, bytes)",
        format!("{}, {}", w.snapshots.0, w.snapshots.1),
    );
    row(
        "6x2 debate: checkpoint bytes / final state (42.9 before deltas)",
        format!("{ratio:.2}"),
    );
    row(
        "6x2 debate: bodies + results bytes",
        format!("{} + {}", w.bodies.1, w.results.1),
    );
    row(
        "6x2 debate: bytes into Redis, all clients",
        (in1 - in0).to_string(),
    );
    TaskSizes {
        body: w.bodies.1 / w.bodies.0,
        result: w.results.1 / w.results.0,
        state: w.checkpoints.1 / w.checkpoints.0,
    }
}

/// `checkpoint` (only when named): the checkpoint bytes of one 6-agent, 2-round debate, as
/// in `scaleout`, without the rest of it.
async fn checkpoint_only(rows: &mut Vec<Row>) {
    println!(
        "== checkpoint bytes (one debate alone; load {})",
        load_average()
    );
    checkpoint_bytes(rows).await;
}

async fn scaleout(rows: &mut Vec<Row>) {
    let debates = env_num("SCALE_DEBATES", 100).max(1) as usize;
    let raw_ops = env_num("RAW_OPS", 2000).max(1) as usize;
    let ticks = clock_ticks();
    println!(
        "== scaleout: 1, 2, 4 coordinators; 2 agent workers + 1 judge worker (concurrency 16); {debates} debates at once; zero LLM latency; load {}",
        load_average()
    );
    let counts: Vec<usize> = std::env::var("SCALE_COORDINATORS")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .filter(|n| *n > 0)
        .collect();
    let mut runs = Vec::new();
    for n in counts {
        let r = scaleout_run(n, debates, ticks).await;
        println!(
            "  {n} coordinator(s): {} tasks, {:.0} tasks/s, overhead p50 {:.1} / p99 {:.1} ms; messages stored per task: events {:.2}, tasks {:.2}; CPU ms/task: {}",
            r.tasks,
            r.rate,
            r.p50,
            r.p99,
            r.messages.0,
            r.messages.1,
            r.cpu_ms
                .iter()
                .map(|(k, v)| format!("{k} {v:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        runs.push(r);
    }

    println!(
        "== checkpoint bytes (one debate alone; load {})",
        load_average()
    );
    let sizes = checkpoint_bytes(rows).await;

    println!("== raw operations: {raw_ops} of each, same clients, fresh servers, no services");
    let c = Cluster::start().await;
    let js = raw_jetstream(&c, raw_ops, ticks).await;
    // Values of the sizes the 6-agent debate wrote (means).
    let rd = raw_redis(&c, raw_ops, &sizes, ticks).await;
    println!(
        "  JetStream publish+pull+ack of {RAW_TASK_BYTES} B: client {:.1} µs, nats-server {:.1} µs, redis-server {:.1} µs CPU per op",
        js.client_us, js.nats_us, js.redis_us
    );
    println!(
        "  one task's Redis commands (body {} B, result {} B, checkpoint {} B): client {:.1} µs, nats-server {:.1} µs, redis-server {:.1} µs CPU per task",
        sizes.body,
        sizes.result,
        sizes.state,
        rd.client_us, rd.nats_us, rd.redis_us
    );

    println!(
        "\n{:>5} {:>8} {:>10} {:>10} | CPU ms per task: {:>7} {:>7} {:>7} {:>7} {:>7} | x raw: {:>6} {:>6} {:>6} {:>6}",
        "coord", "tasks/s", "ovh p50", "ovh p99", "coord", "agents", "judge", "nats", "redis", "coord", "agent", "nats", "redis"
    );
    let raw_client_ms = (js.client_us + rd.client_us) / 1000.0;
    for r in &runs {
        let v: Vec<f64> = r.cpu_ms.iter().map(|(_, v)| *v).collect();
        let (coord, agents, judge, nats, redis) = (v[0], v[1], v[2], v[3], v[4]);
        let x = |a: f64, b: f64| {
            if b > 0.0 {
                format!("{:.1}", a / b)
            } else {
                "-".into()
            }
        };
        println!(
            "{:>5} {:>8.0} {:>7.1} ms {:>7.1} ms |                  {coord:>7.3} {agents:>7.3} {judge:>7.3} {nats:>7.3} {redis:>7.3} |        {:>6} {:>6} {:>6} {:>6}",
            r.coordinators,
            r.rate,
            r.p50,
            r.p99,
            x(coord, raw_client_ms),
            x(agents + judge, raw_client_ms),
            x(nats, js.nats_us / 1000.0),
            x(redis, rd.redis_us / 1000.0),
        );
        rows.push(Row {
            mode: "scaleout",
            metric: format!("{} coordinator(s): tasks/s, ovh p50/p99", r.coordinators),
            value: format!("{:.0}, {:.1}/{:.1} ms", r.rate, r.p50, r.p99),
            target: "-".into(),
            ok: None,
        });
        rows.push(Row {
            mode: "scaleout",
            metric: format!("{} coord.: CPU ms/task coord/workers", r.coordinators),
            value: format!("{coord:.3}/{:.3}", agents + judge),
            target: "-".into(),
            ok: None,
        });
    }
    println!("  x raw: coordinator and workers (agent + judge) CPU per task over the client CPU of one raw JetStream op + one task's raw Redis commands ({raw_client_ms:.3} ms); nats-server over its CPU per raw JetStream op; redis-server over its CPU per task's raw Redis commands");
    for (size, instructions) in transition_instructions() {
        println!("  {size}");
        rows.push(Row {
            mode: "scaleout",
            metric: "instructions per transition (callgrind)".into(),
            value: instructions,
            target: "-".into(),
            ok: None,
        });
    }
}

/// Instructions per coordinator transition (the `transition` bench of `parley-cluster`,
/// under callgrind: stable on a shared machine), for its small and large state: (the
/// line it printed, the figure). Needs `valgrind` and the bench built
/// (`cargo bench -p parley-cluster --bench transition --no-run`); `TRANSITION_BENCH_BIN`
/// names its binary (default: the newest `transition-*` of this profile's `deps`).
fn transition_instructions() -> Vec<(String, String)> {
    let bin = std::env::var_os("TRANSITION_BENCH_BIN")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let deps = std::env::current_exe().ok()?.parent()?.to_path_buf();
            std::fs::read_dir(&deps)
                .ok()?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("transition-") && !n.contains('.'))
                })
                .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        });
    let Some(bin) = bin else {
        println!("  instructions per transition: build `cargo bench -p parley-cluster --bench transition --no-run` (and install valgrind) to measure them here");
        return Vec::new();
    };
    let transitions = 10;
    let mut out = Vec::new();
    for case in ["small", "large"] {
        let run = std::process::Command::new("valgrind")
            .args([
                "--tool=callgrind",
                "--toggle-collect=*measured_transition*",
                "--callgrind-out-file=/dev/null",
            ])
            .arg(&bin)
            .arg(case)
            .env("CALLGRIND", "1")
            .env("TRANSITIONS", transitions.to_string())
            .output();
        let Ok(run) = run else {
            println!("  instructions per transition: valgrind did not start");
            return out;
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        let collected = text
            .lines()
            .find_map(|l| l.split("Collected :").nth(1))
            .and_then(|n| n.trim().parse::<u64>().ok());
        let line = text
            .lines()
            .find(|l| l.starts_with(case))
            .unwrap_or_default();
        let measured = line
            .split(": ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| *n > 0);
        let state = line
            .split("on a ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap_or("?");
        match (collected, measured) {
            (Some(c), Some(m)) => out.push((
                format!(
                    "instructions per transition, {case} state ({state} B): {} (callgrind, {m} transitions, {})",
                    c / m,
                    bin.display()
                ),
                format!("{case} ({state} B): {}", c / m),
            )),
            _ => println!("  instructions per transition ({case}): no figure from {}", bin.display()),
        }
    }
    out
}

// ---- memory: live debates per coordinator ----

/// VmRSS of a process in bytes (`/proc/<pid>/status`).
fn rss_bytes(pid: u32) -> u64 {
    proc_status_bytes(pid, "VmRSS:")
}

/// The largest resident set the process ever had (`VmHWM`).
fn peak_rss_bytes(pid: u32) -> u64 {
    proc_status_bytes(pid, "VmHWM:")
}

/// A `kB` field of `/proc/<pid>/status`, in bytes.
fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("{path}: no {field}"))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The built-in prompt text of `role` (`crates/agent-worker/prompts/<role>.md`).
fn role_prompt(role: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/agent-worker/prompts")
        .join(format!("{role}.md"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// [`spec`] for `problem`, with every participant's role prompt text as its `systemPrompt`
/// when `prompts` (what the CLI sends for a config naming prompt files).
fn memory_spec(problem: &str, prompts: Option<&BTreeMap<&'static str, String>>) -> Value {
    let mut v = spec(problem);
    if let Some(texts) = prompts {
        let with_prompt = |p: &mut Value| {
            let role = p["role"].as_str().expect("role").to_string();
            p["systemPrompt"] = json!(texts[role.as_str()]);
        };
        for a in v["agents"].as_array_mut().expect("agents") {
            with_prompt(a);
        }
        with_prompt(&mut v["judge"]);
    }
    v
}

/// `parley-coordinator` (or `MEMORY_COORDINATOR_BIN`) with the production lease TTL.
fn memory_coordinator(c: &Cluster) -> ChildProcess {
    let bin = std::env::var("MEMORY_COORDINATOR_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| workspace_bin("parley-coordinator"));
    let mut cmd = std::process::Command::new(&bin);
    cmd.args(["--nats-url", &c.nats.url(), "--redis-url", &c.redis.url()])
        .env("PARLEY_LOG", "info")
        .env("PARLEY_METRICS_ADDR", "off");
    if let Ok(secs) = std::env::var("MEMORY_REST_AFTER_SECS") {
        cmd.env("PARLEY_REST_AFTER_SECS", secs);
    }
    let p = ChildProcess::spawn(cmd, "coordinator").unwrap();
    assert!(
        p.wait_for_log_line("coordinator ready", Duration::from_secs(30))
            .is_some(),
        "{} did not start:\n{}",
        bin.display(),
        p.log()
    );
    p
}

/// The lease owner of each debate, as the pid in `coordinator-<pid>-<hex>`.
async fn lease_pids(c: &Cluster, ids: &[String]) -> Vec<Option<u32>> {
    let mut conn = redis_connection(&c.redis.url()).await;
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(2000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            pipe.cmd("GET").arg(format!("parley:{{{id}}}:lease"));
        }
        let owners: Vec<Option<String>> = pipe.query_async(&mut conn).await.expect("lease GETs");
        out.extend(owners.into_iter().map(|o| {
            o.and_then(|o| {
                o.strip_prefix("coordinator-")
                    .and_then(|r| r.split('-').next())
                    .and_then(|p| p.parse().ok())
            })
        }));
    }
    out
}

async fn memory(rows: &mut Vec<Row>) {
    use futures::StreamExt;
    let n_debates = env_num("LIVE_DEBATES", 100_000).max(1) as usize;
    let n_coord = env_num("MEMORY_COORDINATORS", 4).max(1) as usize;
    let with_prompts = env_num("MEMORY_PROMPTS", 1) != 0;
    let sample = env_num("STATUS_SAMPLE", 200).max(1) as usize;
    let in_flight = env_num("SUBMIT_CONCURRENCY", 64).max(1) as usize;
    let ticks = clock_ticks();
    println!(
        "== memory: {n_debates} live debates over {n_coord} coordinator(s), no workers; prompt texts in the specs: {with_prompts}; load {}",
        load_average()
    );
    let c = Cluster::start().await;
    let coordinators: Vec<ChildProcess> = (0..n_coord).map(|_| memory_coordinator(&c)).collect();
    let nats_pid = c.nats.pid().expect("nats-server runs");
    let redis_pid = c.redis.pid().expect("redis-server runs");
    let coord_pids: Vec<u32> = coordinators.iter().map(ChildProcess::pid).collect();
    // A warm-up debate per coordinator (first-use allocations), then the idle figures.
    let prompts: BTreeMap<&'static str, String> = ["architect", "security", "kiss", "generalist"]
        .into_iter()
        .map(|r| (r, role_prompt(r)))
        .collect();
    let prompts = with_prompts.then_some(&prompts);
    for i in 0..4 * n_coord {
        c.submit(&memory_spec(&format!("Warm-up debate {i}"), prompts))
            .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle: Vec<u64> = coord_pids.iter().map(|p| rss_bytes(*p)).collect();
    let (nats_idle, redis_idle) = (rss_bytes(nats_pid), rss_bytes(redis_pid));

    // Submit.
    let started = Instant::now();
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids: Vec<String> = Vec::with_capacity(n_debates);
    let client = c.client.clone();
    let mut replies = futures::stream::iter(0..n_debates)
        .map(|i| {
            let client = client.clone();
            let body = serde_json::to_vec(&memory_spec(
                &format!("Live debate {i:06}: design service {i} of the memory bench"),
                prompts,
            ))
            .unwrap();
            async move { try_request_on(&client, "parley.debates.submit", body).await }
        })
        .buffer_unordered(in_flight);
    let mut last_report = Instant::now();
    while let Some(r) = replies.next().await {
        match r {
            Ok(v) => match v["debateId"].as_str() {
                Some(id) => ids.push(id.to_string()),
                None => {
                    *refused
                        .entry(v["code"].as_str().unwrap_or("?").to_string())
                        .or_default() += 1
                }
            },
            Err(e) => *refused.entry(format!("{e}")).or_default() += 1,
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            last_report = Instant::now();
            println!(
                "  … {} accepted, {} refused, {:.0} s; coordinators' RSS {} MiB; load {}",
                ids.len(),
                refused.values().sum::<usize>(),
                started.elapsed().as_secs_f64(),
                coord_pids
                    .iter()
                    .map(|p| format!("{:.0}", mib(rss_bytes(*p))))
                    .collect::<Vec<_>>()
                    .join("/"),
                load_average()
            );
        }
    }
    drop(replies);
    let submit_s = started.elapsed().as_secs_f64();
    let accepted = ids.len();
    println!(
        "  submitted {n_debates} in {submit_s:.0} s ({:.0}/s): {accepted} accepted, refused {refused:?}",
        n_debates as f64 / submit_s
    );

    // Settle (the debates go to rest after the coordinators' `rest_after_secs`, 30 s by
    // default), then the CPU the live debates cost while nothing happens.
    let settle = env_num("MEMORY_SETTLE_SECS", 45);
    println!("  settling {settle} s");
    tokio::time::sleep(Duration::from_secs(settle)).await;
    let cpu = |pids: &[u32]| pids.iter().map(|p| cpu_seconds(*p, ticks)).sum::<f64>();
    let window = Duration::from_secs(20);
    let before = (cpu(&coord_pids), cpu(&[nats_pid]), cpu(&[redis_pid]));
    tokio::time::sleep(window).await;
    let after = (cpu(&coord_pids), cpu(&[nats_pid]), cpu(&[redis_pid]));
    let w = window.as_secs_f64();
    let idle_cpu = (
        (after.0 - before.0) / w,
        (after.1 - before.1) / w,
        (after.2 - before.2) / w,
    );
    println!(
        "  CPU while {accepted} debates are live and idle: coordinators {:.2}, nats-server {:.2}, redis-server {:.2} cores",
        idle_cpu.0, idle_cpu.1, idle_cpu.2
    );

    // Status while loaded: random live debates, one request at a time.
    let mut latencies = Vec::with_capacity(sample);
    let mut not_running = 0usize;
    use rand::Rng as _;
    let mut rng = rand::thread_rng();
    for _ in 0..sample.min(accepted) {
        let id = &ids[rng.gen_range(0..accepted)];
        let t = Instant::now();
        let s = c.try_status(id).await;
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        match s {
            Ok(s) if s["status"] == "running" => {}
            other => {
                not_running += 1;
                if not_running <= 3 {
                    println!("  status of {id}: {other:?}");
                }
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    let (p50, p99) = (quantile(&latencies, 0.5), quantile(&latencies, 0.99));

    // Who owns what, and what it costs.
    let owners = lease_pids(&c, &ids).await;
    let rss: Vec<u64> = coord_pids.iter().map(|p| rss_bytes(*p)).collect();
    let (nats_rss, redis_rss) = (rss_bytes(nats_pid), rss_bytes(redis_pid));
    let mut owned_total = 0usize;
    let mut max_rss = 0u64;
    let mut max_peak = 0u64;
    let mut growth = 0u64;
    for (k, pid) in coord_pids.iter().enumerate() {
        let owned = owners.iter().filter(|o| **o == Some(*pid)).count();
        owned_total += owned;
        max_rss = max_rss.max(rss[k]);
        growth += rss[k].saturating_sub(idle[k]);
        let peak = peak_rss_bytes(*pid);
        max_peak = max_peak.max(peak);
        println!(
            "  coordinator {k} (pid {pid}): {owned} live debates, RSS {:.1} MiB (idle {:.1} MiB, peak {:.1} MiB), {:.0} B per debate",
            mib(rss[k]),
            mib(idle[k]),
            mib(peak),
            rss[k].saturating_sub(idle[k]) as f64 / owned.max(1) as f64
        );
    }
    let per_debate = growth as f64 / owned_total.max(1) as f64;
    println!(
        "  {owned_total} of {accepted} debates leased; {:.0} B per live debate (RSS growth over all coordinators / debates); nats-server RSS {:.1} MiB (idle {:.1}), redis-server RSS {:.1} MiB (idle {:.1})",
        per_debate,
        mib(nats_rss),
        mib(nats_idle),
        mib(redis_rss),
        mib(redis_idle)
    );
    println!(
        "  status of {} random live debates while loaded: p50 {p50:.1} ms, p99 {p99:.1} ms, {not_running} not running",
        latencies.len()
    );
    let m = "memory";
    rows.push(Row {
        mode: m,
        metric: format!("{n_debates} submissions accepted"),
        value: format!("{accepted}"),
        target: format!("{n_debates}"),
        ok: Some(accepted == n_debates),
    });
    rows.push(Row {
        mode: m,
        metric: format!("largest coordinator RSS ({n_coord} coord.)"),
        value: format!("{:.0} MiB", mib(max_rss)),
        target: "< 500 MB".into(),
        ok: Some(max_rss < 500_000_000),
    });
    rows.push(Row {
        mode: m,
        metric: format!("largest coordinator peak RSS ({n_coord} coord.)"),
        value: format!("{:.0} MiB", mib(max_peak)),
        target: "< 500 MB".into(),
        ok: Some(max_peak < 500_000_000),
    });
    rows.push(Row {
        mode: m,
        metric: "bytes per live debate (coordinator)".into(),
        value: format!("{per_debate:.0}"),
        target: "-".into(),
        ok: None,
    });
    rows.push(Row {
        mode: m,
        metric: "status p50/p99 while loaded".into(),
        value: format!("{p50:.1}/{p99:.1} ms"),
        target: "-".into(),
        ok: Some(not_running == 0),
    });
    rows.push(Row {
        mode: m,
        metric: "nats-server / redis-server RSS".into(),
        value: format!("{:.0}/{:.0} MiB", mib(nats_rss), mib(redis_rss)),
        target: "-".into(),
        ok: None,
    });
    rows.push(Row {
        mode: m,
        metric: "CPU cores while live: coord/nats/redis".into(),
        value: format!("{:.2}/{:.2}/{:.2}", idle_cpu.0, idle_cpu.1, idle_cpu.2),
        target: "-".into(),
        ok: None,
    });
    drop(coordinators);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; every other argument is a mode.
    let mut modes: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if modes.is_empty() {
        modes = vec!["throughput".into(), "makespan".into(), "ratelimit".into()];
    }
    let load_before = load_average();
    let mut rows = Vec::new();
    for m in &modes {
        match m.as_str() {
            "throughput" => throughput(&mut rows).await,
            "makespan" => makespan(&mut rows).await,
            "ratelimit" => ratelimit(&mut rows).await,
            "scaleout" => scaleout(&mut rows).await,
            "memory" => memory(&mut rows).await,
            "checkpoint" => checkpoint_only(&mut rows).await,
            other => {
                eprintln!(
                    "unknown mode {other:?}: use throughput, makespan, ratelimit, scaleout, memory or checkpoint"
                );
                std::process::exit(2);
            }
        }
    }
    println!(
        "\n== summary (load average before {load_before}, after {})",
        load_average()
    );
    println!(
        "{:<11} {:<46} {:>16} {:>10}  result",
        "mode", "metric", "value", "target"
    );
    for r in &rows {
        let result = match r.ok {
            Some(true) => "ok",
            Some(false) => "MISSED",
            None => "",
        };
        println!(
            "{:<11} {:<46} {:>16} {:>10}  {result}",
            r.mode, r.metric, r.value, r.target
        );
    }
}
