//! Checkpoint deltas replayed on real transition sequences: the states of machine-driven
//! debates, after every transition (outbox set as the actor sets it). Base + deltas must
//! give back exactly the latest state after every step, with snapshots at random points;
//! then the same through a real redis-server with the store's own rule, checking the bytes
//! written against the final state, and the store's refusals (stale writer, missing or
//! corrupt delta) and the old checkpoint format. Ignored ones print where a delta's bytes
//! go and what a delta costs the writer in CPU (`--release -- --ignored --nocapture`).

use std::collections::VecDeque;

use chrono::{DateTime, TimeZone, Utc};
use parley_cluster::checkpoint_delta::{apply, Shaper};
use parley_cluster::RedisStore;
use parley_engine::{Effect, Input, Machine};
use parley_protocol::*;
use parley_testkit::RedisServer;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

fn now(step: usize) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()
        + chrono::Duration::milliseconds(step as i64 * 37)
}

fn spec(agents: usize, rounds: u32, extra: Value) -> DebateSpec {
    let roles = ["architect", "performance", "security", "testing", "kiss"];
    let agents: Vec<_> = (0..agents)
        .map(|i| json!({"id": format!("a{i}"), "name": format!("A{i}"), "role": roles[i % 5], "model": "m", "temperature": 0.3}))
        .collect();
    let mut debate = json!({"rounds": rounds, "terminationCondition": {"type": "fixed"}});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            debate[k] = v;
        }
    }
    serde_json::from_value(json!({
        "problem": "Design a rate limiter for a multi-tenant API",
        "agents": agents,
        "judge": {"id": "judge", "name": "J", "role": "generalist", "model": "jm", "temperature": 0.1},
        "debate": debate,
    }))
    .unwrap()
}

fn answer(task: &Task, reply_bytes: usize, ok: bool) -> TaskResult {
    let outcome = if ok {
        let mut content = format!("{} says about {}: ", task.agent.id, task.id);
        content.push_str(&prose(&task.id, task.attempt, reply_bytes));
        let mut out = TaskOutput {
            content,
            metadata: ContributionMetadata {
                tokens_used: 10 + reply_bytes as u64 / 4,
                latency_ms: 5,
                model: task.agent.model.clone(),
                ..Default::default()
            },
            ..Default::default()
        };
        match task.kind {
            TaskKind::Synthesize => {
                out.solution = Some(Solution {
                    confidence: 77.0,
                    ..Solution::text_only("final solution".into(), task.agent.id.clone())
                })
            }
            TaskKind::Evaluate => out.confidence = Some(50.0),
            _ => {}
        }
        TaskOutcome::Ok(out)
    } else {
        TaskOutcome::Error(TaskError {
            kind: ErrorKind::Server,
            message: format!("boom {}", task.id),
            provider: Some("fake".into()),
            retry_after_ms: None,
        })
    };
    TaskResult {
        schema_version: SCHEMA_VERSION,
        task_id: task.id.clone(),
        debate_id: task.debate_id.clone(),
        attempt: task.attempt,
        worker: "w".into(),
        outcome,
    }
}

/// About `bytes` of words that do not repeat (random letters, seeded by the task): replies
/// that packing cannot shrink, unlike a repeated sentence (models' text packs better).
fn prose(task: &str, attempt: u32, bytes: usize) -> String {
    let mut rng = rand::rngs::StdRng::seed_from_u64(
        task.bytes()
            .fold(u64::from(attempt), |h, b| h.wrapping_mul(31) + u64::from(b)),
    );
    let mut out = String::with_capacity(bytes + 12);
    while out.len() < bytes {
        for _ in 0..rng.gen_range(2..10) {
            out.push(char::from(b'a' + rng.gen_range(0..26u8)));
        }
        out.push(if rng.gen_bool(0.1) { '.' } else { ' ' });
    }
    out
}

/// Every state a debate's actor would checkpoint, in order.
struct Debate {
    machine: Machine,
    queue: VecDeque<Task>,
    retries: Vec<String>,
    states: Vec<DebateState>,
    /// The machine's round revisions after each state (instance, revisions).
    revisions: Vec<(u64, Vec<u64>)>,
    step: usize,
    /// Time spent in the machine's transitions (handle, outbox, the state's copy).
    busy: std::time::Duration,
}

impl Debate {
    fn new(id: &str, spec: DebateSpec) -> Self {
        Self {
            machine: Machine::new(id.into(), spec, now(0)),
            queue: VecDeque::new(),
            retries: vec![],
            states: vec![],
            revisions: vec![],
            step: 0,
            busy: std::time::Duration::ZERO,
        }
    }

    fn apply(&mut self, input: Input) {
        self.step += 1;
        let t0 = std::time::Instant::now();
        let mut events = vec![];
        for fx in self.machine.handle(input, now(self.step)) {
            match fx {
                Effect::Dispatch(t) => self.queue.push_back(t),
                Effect::Emit(e) => events.push(e),
                Effect::ScheduleRetry { task_id, .. } => self.retries.push(task_id),
            }
        }
        self.machine.set_outbox(events);
        self.states.push(self.machine.state().clone());
        self.busy += t0.elapsed();
        let r = self.machine.round_revisions();
        self.revisions.push((r.instance, r.revs.to_vec()));
    }

    /// Answers every task (`fail` says which attempts fail), applying retries as they come
    /// due, until the debate rests.
    fn run(&mut self, reply_bytes: usize, fail: impl Fn(&Task) -> bool) {
        loop {
            while let Some(t) = self.queue.pop_front() {
                let ok = !fail(&t);
                self.apply(Input::Result(answer(&t, reply_bytes, ok)));
            }
            let due: Vec<_> = self.retries.drain(..).collect();
            if due.is_empty() {
                break;
            }
            for id in due {
                self.apply(Input::RetryDue(id));
            }
        }
    }
}

/// The transition sequences the tests replay: a 6-agent 2-round debate with short and
/// with long replies, one with failures and retries then a permanent failure and `retry`,
/// a cancelled one, one with clarifications answered.
fn sequences() -> Vec<(&'static str, Vec<DebateState>)> {
    timed_sequences()
        .into_iter()
        .map(|(name, states, _)| (name, states))
        .collect()
}

/// [`sequences`], with the time the machine spent in each debate's transitions.
fn timed_sequences() -> Vec<(&'static str, Vec<DebateState>, std::time::Duration)> {
    let mut out = vec![];
    for (name, bytes) in [("6x2 short", 60), ("6x2 long", 8000)] {
        let mut d = Debate::new("deb-wide", spec(6, 2, json!({})));
        d.apply(Input::Start);
        d.run(bytes, |_| false);
        assert_eq!(d.machine.state().status, DebateStatus::Completed, "{name}");
        out.push((name, d.states, d.busy));
    }

    let mut d = Debate::new("deb-retry", spec(3, 2, json!({})));
    d.apply(Input::Start);
    // Every first attempt of a critique fails; every attempt of a2's round-2 refinement
    // fails (the debate fails), then `retry` and success.
    d.run(300, |t| {
        (t.kind == TaskKind::Critique && t.attempt == 1)
            || (t.kind == TaskKind::Refine && t.agent.id == "a2" && t.id.contains("/2/"))
    });
    d.apply(Input::Retry);
    d.run(300, |_| false);
    out.push(("retries, failure, retry", d.states, d.busy));

    let mut d = Debate::new("deb-cancel", spec(4, 3, json!({})));
    d.apply(Input::Start);
    for _ in 0..7 {
        if let Some(t) = d.queue.pop_front() {
            d.apply(Input::Result(answer(&t, 500, true)));
        }
    }
    d.apply(Input::Cancel);
    out.push(("cancelled", d.states, d.busy));

    let mut d = Debate::new(
        "deb-clarify",
        spec(3, 1, json!({"interactiveClarifications": true})),
    );
    d.apply(Input::Start);
    while let Some(t) = d.queue.pop_front() {
        let mut r = answer(&t, 300, true);
        if t.kind == TaskKind::Clarify {
            if let TaskOutcome::Ok(o) = &mut r.outcome {
                o.questions = vec![format!("what about {}?", t.agent.id)];
            }
        }
        d.apply(Input::Result(r));
        if d.machine.state().status == DebateStatus::AwaitingClarifications {
            break;
        }
    }
    if d.machine.state().status == DebateStatus::AwaitingClarifications {
        d.apply(Input::ClarificationTimeout);
    }
    d.run(300, |_| false);
    out.push(("clarifications", d.states, d.busy));
    out
}

/// A writer told which rounds changed writes exactly the records of one that reads every
/// round, while leaving rounds unread (a debug build also checks every round it leaves
/// unread against its real hash).
#[test]
fn a_writer_told_which_rounds_changed_writes_the_same_records_reading_less() {
    use parley_cluster::redis_store::{CheckpointWrite, CheckpointWriter};
    let bytes = |w: &CheckpointWrite| match w {
        CheckpointWrite::Delta { record, .. } => record.clone(),
        CheckpointWrite::Snapshot { json, .. } => json.clone().into_bytes(),
    };
    let mut d = Debate::new("deb-revised", spec(4, 3, json!({})));
    d.apply(Input::Start);
    d.run(300, |t| t.kind == TaskKind::Critique && t.attempt == 1);
    assert_eq!(d.machine.state().status, DebateStatus::Completed);
    let shaper = Shaper::new();
    let plain = CheckpointWriter::with_shaper(shaper.clone());
    let revised = CheckpointWriter::with_shaper(shaper);
    let (mut unread, mut deltas) = (0, 0);
    for (v, (state, (instance, revs))) in d.states.iter().zip(&d.revisions).enumerate() {
        let v = v as u64;
        let a = plain.prepare(state, v).unwrap();
        let r = RoundRevisions {
            instance: *instance,
            revs,
        };
        let b = revised.prepare_revised(state, Some(r), v).unwrap();
        assert_eq!(bytes(&a.write), bytes(&b.write), "write {v}");
        assert_eq!(a.rounds_unread(), 0);
        unread += b.rounds_unread();
        deltas += usize::from(matches!(b.write, CheckpointWrite::Delta { .. }));
        plain.written(&state.id, a);
        revised.written(&state.id, b);
    }
    eprintln!(
        "{} writes, {deltas} deltas, {unread} rounds left unread",
        d.states.len()
    );
    assert!(deltas > 20, "{deltas} deltas");
    // Rounds 1 and 2 are left unread in most writes of round 3, round 1 in round 2's.
    assert!(
        unread > deltas / 2,
        "{unread} rounds unread in {deltas} deltas"
    );
}

fn canonical(state: &DebateState) -> Value {
    serde_json::from_str(&serde_json::to_string(state).unwrap()).unwrap()
}

#[test]
fn base_plus_deltas_is_the_latest_state_after_every_step() {
    let shaper = Shaper::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(27);
    for (name, states) in sequences() {
        assert!(states.len() > 5, "{name}: {} states", states.len());
        for trial in 0..4 {
            let mut base = String::new();
            let mut deltas: Vec<String> = vec![];
            let mut shape = None;
            let mut written = 0usize;
            for (i, state) in states.iter().enumerate() {
                let value = serde_json::to_value(state).unwrap();
                let snapshot = shape.is_none() || rng.gen_bool(if trial == 0 { 0.0 } else { 0.15 });
                if snapshot {
                    base = serde_json::to_string(state).unwrap();
                    deltas.clear();
                    shape = Some(shaper.shape(&value).0);
                    written += base.len();
                } else {
                    let (d, s, _) = shaper.diff(shape.as_ref().unwrap(), &value);
                    written += d.json.len();
                    deltas.push(d.json);
                    shape = Some(s);
                }
                let mut doc: Value = serde_json::from_str(&base).unwrap();
                for (k, d) in deltas.iter().enumerate() {
                    apply(&mut doc, d).unwrap_or_else(|e| panic!("{name} step {i} delta {k}: {e}"));
                }
                assert_eq!(doc, canonical(state), "{name}: step {i}, trial {trial}");
                let back: DebateState = serde_json::from_value(doc).unwrap();
                assert_eq!(&back, state, "{name}: step {i}");
            }
            if trial == 0 {
                let last = serde_json::to_string(states.last().unwrap()).unwrap().len();
                let full: usize = states
                    .iter()
                    .map(|s| serde_json::to_string(s).unwrap().len())
                    .sum();
                eprintln!(
                    "{name}: {} transitions, final state {last} B; full checkpoints {full} B ({:.1}x); first snapshot + deltas {written} B ({:.2}x)",
                    states.len(),
                    full as f64 / last as f64,
                    written as f64 / last as f64
                );
            }
        }
    }
}

async fn state_bytes(
    conn: &mut redis::aio::MultiplexedConnection,
    id: &str,
) -> Vec<(String, usize)> {
    let fields: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
        .arg(format!("parley:{{{id}}}:state"))
        .query_async(conn)
        .await
        .unwrap();
    fields.into_iter().map(|(k, v)| (k, v.len())).collect()
}

/// Through redis-server with the store's own rule: every checkpoint reads back exactly;
/// bytes written stay within 3x the final state in every sequence (measured 0.9-1.5x;
/// before packing and the final delta 2.1-5.4x); a finished debate keeps at most
/// `FINAL_FACTOR` (2) times its state in deltas next to its snapshot.
#[tokio::test]
async fn the_store_writes_deltas_and_reads_them_back() {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut over = vec![];
    for (name, states) in sequences() {
        let id = states[0].id.clone();
        let _: () = redis::cmd("DEL")
            .arg(format!("parley:{{{id}}}:state"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut version = 0;
        let mut written = 0usize;
        let mut snapshots = 0;
        for (i, state) in states.iter().enumerate() {
            let before: usize = state_bytes(&mut conn, &id).await.iter().map(|f| f.1).sum();
            let fields_before = state_bytes(&mut conn, &id).await.len();
            version = store
                .save_state(state, version)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{name}: step {i} refused"));
            let after = state_bytes(&mut conn, &id).await;
            let grown = after.iter().map(|f| f.1).sum::<usize>();
            // The bytes this write sent: a delta adds one field; a snapshot replaces all.
            if after.len() > fields_before || i == 0 {
                written += grown.saturating_sub(before);
            } else {
                snapshots += 1;
                written += grown;
            }
            let cp = store.state(&id).await.unwrap().unwrap();
            assert_eq!(cp.version, version);
            assert_eq!(&cp.state, state, "{name}: step {i}");
        }
        let fields = state_bytes(&mut conn, &id).await;
        let final_len = serde_json::to_string(states.last().unwrap()).unwrap().len();
        let ratio = written as f64 / final_len as f64;
        eprintln!(
            "{name} via the store: {} writes, {snapshots} snapshots, ~{written} B written, final state {final_len} B: {ratio:.2}x; shapes kept {:?}",
            states.len(),
            store.checkpoint_shapes()
        );
        // A finished debate keeps at most FINAL_FACTOR times its state in deltas.
        let stored: usize = fields.iter().map(|f| f.1).sum();
        let snapshot = fields.iter().find(|f| f.0 == "state").map_or(0, |f| f.1);
        assert!(
            stored - snapshot <= parley_cluster::redis_store::FINAL_FACTOR * final_len + 64,
            "{name}: {stored} B stored, snapshot {snapshot} B, final state {final_len} B"
        );
        if ratio >= 3.0 {
            over.push(format!("{name}: {ratio:.2}x the final state"));
        }
    }
    assert!(over.is_empty(), "{over:?}");
}

fn running_states() -> Vec<DebateState> {
    let mut d = Debate::new("deb-x", spec(3, 2, json!({})));
    d.apply(Input::Start);
    for _ in 0..6 {
        let t = d.queue.pop_front().unwrap();
        d.apply(Input::Result(answer(&t, 400, true)));
    }
    d.states
}

/// A stale writer is refused; another coordinator's write (or a debate written again
/// under the same id) makes this one write a snapshot, never a delta on the wrong base; a
/// missing or corrupt delta fails the read; the format before deltas still loads.
#[tokio::test]
async fn refusals_takeover_corruption_and_the_old_format() {
    let redis = RedisServer::start().unwrap();
    let a = RedisStore::connect(&redis.url()).await.unwrap();
    let b = RedisStore::connect(&redis.url()).await.unwrap();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let k = "parley:{deb-x}:state";
    let states = running_states();

    for (v, state) in (0u64..).zip(&states[..4]) {
        assert_eq!(a.save_state(state, v).await.unwrap(), Some(v + 1));
    }
    let names: Vec<String> = redis::cmd("HKEYS")
        .arg(k)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(names.contains(&"d:4".to_string()), "{names:?}");
    // A stale writer (version 2 expected, 4 stored) is refused, by either store.
    assert_eq!(a.save_state(&states[4], 2).await.unwrap(), None);
    assert_eq!(b.save_state(&states[4], 2).await.unwrap(), None);
    // A loses its shape with the failed write: its next write is a snapshot (still CAS).
    assert_eq!(a.save_state(&states[4], 4).await.unwrap(), Some(5));
    assert_eq!(a.state("deb-x").await.unwrap().unwrap().state, states[4]);
    // B takes over: reads, writes (a snapshot: it wrote nothing before) ...
    let cp = b.state("deb-x").await.unwrap().unwrap();
    assert_eq!((cp.version, &cp.state), (5, &states[4]));
    assert_eq!(b.save_state(&states[5], 5).await.unwrap(), Some(6));
    // ... and A, which wrote version 5, can no longer write on top of anything.
    assert_eq!(a.save_state(&states[5], 5).await.unwrap(), None);
    assert_eq!(b.state("deb-x").await.unwrap().unwrap().state, states[5]);

    // The debate is written again from scratch by B while A still has a shape of version
    // 1 of the first one: A's write against version 1 finds another nonce and writes a
    // snapshot.
    let _: () = redis::cmd("DEL")
        .arg(k)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(a.save_state(&states[0], 0).await.unwrap(), Some(1));
    let _: () = redis::cmd("DEL")
        .arg(k)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(b.save_state(&states[2], 0).await.unwrap(), Some(1));
    assert_eq!(a.save_state(&states[3], 1).await.unwrap(), Some(2));
    assert_eq!(a.state("deb-x").await.unwrap().unwrap().state, states[3]);

    // A missing delta fails the read, naming it.
    assert_eq!(a.save_state(&states[4], 2).await.unwrap(), Some(3));
    assert_eq!(a.save_state(&states[5], 3).await.unwrap(), Some(4));
    let names: Vec<String> = redis::cmd("HKEYS")
        .arg(k)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        names.contains(&"d:3".to_string()) && names.contains(&"d:4".to_string()),
        "{names:?}"
    );
    let d3: Vec<u8> = redis::cmd("HGET")
        .arg(k)
        .arg("d:3")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("HDEL")
        .arg(k)
        .arg("d:3")
        .query_async(&mut conn)
        .await
        .unwrap();
    let e = a.state("deb-x").await.unwrap_err().to_string();
    assert!(e.contains("delta 3") && e.contains("missing"), "{e}");
    // A corrupt one too (garbage, or a delta that does not fit its base).
    let _: () = redis::cmd("HSET")
        .arg(k)
        .arg("d:3")
        .arg("[[\"a\",[\"rou")
        .query_async(&mut conn)
        .await
        .unwrap();
    let e = a.state("deb-x").await.unwrap_err().to_string();
    assert!(e.contains("delta 3"), "{e}");
    let d4: Vec<u8> = redis::cmd("HGET")
        .arg(k)
        .arg("d:4")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(k)
        .arg("d:3")
        .arg(&d4)
        .query_async(&mut conn)
        .await
        .unwrap();
    let r = a.state("deb-x").await;
    // (d:4 applied in place of d:3: an append at the wrong length, or a state that is not
    // version 4's: either way never returned as version 4.)
    if let Ok(Some(cp)) = &r {
        assert_ne!(cp.state, states[5], "a wrong delta gave the right state?");
        panic!("a wrong delta was applied silently");
    }
    let _: () = redis::cmd("HSET")
        .arg(k)
        .arg("d:3")
        .arg(&d3)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(a.state("deb-x").await.unwrap().unwrap().state, states[5]);

    // Retention: everything is in the one key, expired together.
    a.expire_debate("deb-x", std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let ttl: i64 = redis::cmd("PTTL")
        .arg(k)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 50_000, "{ttl}");
    // A delta write keeps the TTL.
    assert_eq!(a.save_state(&states[5], 4).await.unwrap(), Some(5));
    let ttl: i64 = redis::cmd("PTTL")
        .arg(k)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 50_000, "{ttl}");

    // A checkpoint written before deltas: `{version, state}` only.
    let _: () = redis::cmd("DEL")
        .arg(k)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(k)
        .arg("version")
        .arg(7)
        .arg("state")
        .arg(serde_json::to_string(&states[3]).unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    let cp = b.state("deb-x").await.unwrap().unwrap();
    assert_eq!((cp.version, &cp.state), (7, &states[3]));
    // Written on by this build: a snapshot, then deltas.
    assert_eq!(b.save_state(&states[4], 7).await.unwrap(), Some(8));
    assert_eq!(b.save_state(&states[5], 8).await.unwrap(), Some(9));
    let names: Vec<String> = redis::cmd("HKEYS")
        .arg(k)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        names.contains(&"d:9".to_string()) && !names.contains(&"d:8".to_string()),
        "{names:?}"
    );
    assert_eq!(a.state("deb-x").await.unwrap().unwrap().state, states[5]);
}

/// Prints the deltas of the 6-agent debate (`SHOW=1`) and their sizes: what a transition
/// writes.
#[test]
#[ignore]
fn show_deltas() {
    let shaper = Shaper::new();
    let (_, states) = sequences().into_iter().next().unwrap();
    let mut shape = shaper.shape(&serde_json::to_value(&states[0]).unwrap()).0;
    let mut total = 0;
    for s in &states[1..] {
        let (d, sh, _) = shaper.diff(&shape, &serde_json::to_value(s).unwrap());
        shape = sh;
        total += d.json.len();
        if std::env::var("SHOW").is_ok() {
            eprintln!("{} {}", d.json.len(), d.json);
        }
    }
    eprintln!("{} deltas, {total} bytes", states.len() - 1);
}

/// The bytes of a delta by where they land: the top-level member, and below `engine`,
/// `rounds` and `spend` the member under it (the bookkeeping each transition rewrites).
fn bytes_by_path(delta: &Value, out: &mut std::collections::BTreeMap<String, usize>) {
    let mut add = |k: String, v: &Value| *out.entry(k).or_default() += v.to_string().len();
    match delta {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("engine" | "spend", Value::Object(inner)) => {
                        for (k2, v2) in inner {
                            let op = match v2 {
                                Value::Array(a) => a.first().and_then(Value::as_str).unwrap_or("?"),
                                Value::Object(_) => "in place",
                                _ => "",
                            };
                            add(format!("{k}.{k2} {op}"), v2);
                        }
                    }
                    ("rounds", Value::Object(inner)) => {
                        for v2 in inner.values() {
                            match v2 {
                                Value::Object(r) => {
                                    for (k3, v3) in r {
                                        add(format!("rounds.N.{k3}"), v3);
                                    }
                                }
                                other => add("rounds.N".into(), other),
                            }
                        }
                    }
                    _ => add(k.clone(), v),
                }
            }
        }
        other => add("(root op)".into(), other),
    }
}

/// Where the bytes of the deltas go in the replayed debates (`--ignored --nocapture`).
#[test]
#[ignore]
fn where_the_bytes_go() {
    let shaper = Shaper::new();
    for (name, states) in sequences() {
        let mut shape = shaper.shape(&serde_json::to_value(&states[0]).unwrap()).0;
        let first = serde_json::to_string(&states[0]).unwrap().len();
        let mut by = std::collections::BTreeMap::new();
        let (mut total, mut packed) = (0, 0);
        let mut dict = vec![];
        for s in &states[1..] {
            let (d, sh, _) = shaper.diff(&shape, &serde_json::to_value(s).unwrap());
            shape = sh;
            total += d.json.len() + 17;
            packed += parley_cluster::checkpoint_delta::pack(&d.json, &dict).len() + 17;
            dict = parley_cluster::checkpoint_delta::dict_of(d.json.as_bytes()).to_vec();
            bytes_by_path(&serde_json::from_str(&d.json).unwrap(), &mut by);
        }
        let last = serde_json::to_string(states.last().unwrap()).unwrap().len();
        eprintln!(
            "{name}: {} transitions; first state {first} B, final {last} B; deltas as JSON (with links) {total} B = {:.2}x, packed {packed} B = {:.2}x; by path, as JSON:",
            states.len(),
            total as f64 / last as f64,
            packed as f64 / last as f64
        );
        let mut rows: Vec<_> = by.into_iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1));
        for (k, n) in rows {
            eprintln!("  {k:<28} {n:>7} B  {:.2}x", n as f64 / last as f64);
        }
    }
}

/// The writer's CPU per transition (`--release --ignored --nocapture`; printed, never
/// asserted): the state as a JSON value, its diff against the last shape and the delta
/// packed, next to the machine's own transition and a full snapshot's JSON.
#[test]
#[ignore]
fn what_a_delta_costs() {
    use parley_cluster::checkpoint_delta::{dict_of, pack};
    use std::time::{Duration, Instant};
    let shaper = Shaper::new();
    for (name, states, machine) in timed_sequences() {
        let n = states.len() - 1;
        let bytes: usize = states[1..]
            .iter()
            .map(|s| serde_json::to_string(s).unwrap().len())
            .sum();
        // The best of 5 runs of each part.
        let best = |f: &mut dyn FnMut() -> Duration| (0..5).map(|_| f()).min().unwrap();
        let to_value = best(&mut || {
            let t = Instant::now();
            for s in &states[1..] {
                std::hint::black_box(serde_json::to_value(s).unwrap());
            }
            t.elapsed()
        });
        let values: Vec<Value> = states
            .iter()
            .map(|s| serde_json::to_value(s).unwrap())
            .collect();
        let mut deltas = vec![];
        let diff = best(&mut || {
            deltas.clear();
            let mut shape = shaper.shape(&values[0]).0;
            let t = Instant::now();
            for v in &values[1..] {
                let (d, s, _) = shaper.diff(&shape, v);
                shape = s;
                deltas.push(d.json);
            }
            t.elapsed()
        });
        let mut packed = 0;
        let pack_time = best(&mut || {
            packed = 0;
            let mut dict: &[u8] = &[];
            let t = Instant::now();
            for d in &deltas {
                packed += pack(d, dict).len();
                dict = dict_of(d.as_bytes());
            }
            t.elapsed()
        });
        let snapshot = best(&mut || {
            let t = Instant::now();
            for s in &states[1..] {
                std::hint::black_box(serde_json::to_string(s).unwrap());
            }
            t.elapsed()
        });
        let us = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        let json: usize = deltas.iter().map(String::len).sum();
        eprintln!(
            "{name}: {n} transitions, mean state {} B; per transition: to_value {:.1} us + diff {:.1} us + pack {:.1} us = {:.1} us ({:.2} us per KB of state); machine {:.1} us; a snapshot's JSON {:.1} us; deltas {json} B of JSON, {packed} B packed",
            bytes / n,
            us(to_value),
            us(diff),
            us(pack_time),
            us(to_value + diff + pack_time),
            (to_value + diff + pack_time).as_secs_f64() * 1e6 / (bytes as f64 / 1024.0),
            us(machine),
            us(snapshot),
        );
    }
}
