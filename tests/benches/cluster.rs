//! Cluster benchmark: the distributed services as separate processes (release build),
//! real nats-server (JetStream) and redis-server, and the fake LLM in this process.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p parley-tests --bench cluster -- [throughput] [makespan] [ratelimit]
//! ```
//! No mode = all three. Knobs (environment):
//! - `DEBATES` (throughput, default 40): debates submitted at once in the loaded run;
//!   `PACED_RATE` / `PACED_SECS` (default 500 tasks/s for 10 s): the paced run's offered
//!   load; `SEQUENTIAL` (default 5): debates run one at a time in the unloaded run.
//! - `RUNS` (makespan, default 5): debates measured, one at a time.
//! - `DURATION` (ratelimit, default 60): seconds of the measured window.
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
            other => {
                eprintln!("unknown mode {other:?}: use throughput, makespan or ratelimit");
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
