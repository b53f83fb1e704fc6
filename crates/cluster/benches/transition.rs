//! One transition of the coordinator's debate actor, without its I/O: the CPU a task costs
//! the coordinator between reading its result from Redis and handing the writes to Redis
//! and JetStream. Per transition:
//!
//! 1. the stored result's JSON decoded (what `RedisStore::result_of` does);
//! 2. `Machine::handle` with it, and the transition's events set as the state's outbox;
//! 3. the checkpoint made ready by the store's own [`CheckpointWriter`] (the delta against
//!    the last write, packed and linked, or a snapshot) and remembered as written;
//! 4. each dispatched task stamped with its dispatch token, its body's JSON (stored in
//!    Redis) and its reference's JSON (the JetStream message);
//! 5. the transition's events as their JetStream message (a JSON array).
//!
//! ```sh
//! cargo bench -p parley-cluster --bench transition                    # both sizes, timed
//! cargo bench -p parley-cluster --bench transition -- small           # or large
//! # instructions per transition (stable on a shared machine):
//! cargo bench -p parley-cluster --bench transition --no-run
//! valgrind --tool=callgrind --toggle-collect='*measured_transition*' \
//!     target/release/deps/transition-<hash> small
//! ```
//! Under callgrind, only [`measured_transition`] is counted: the instructions it reports
//! ("Collected"), divided by the transitions the bench prints, are the instructions per
//! transition. `small`: a 4-agent, 3-round debate with 150-byte replies, measured once its
//! state reaches 10 KB (of JSON); `large`: a 6-agent, 4-round debate with 3 KB replies,
//! measured once its state reaches 400 KB. `TRANSITIONS` (default 20) sets how many are
//! measured; `REPEAT` (default 1 under callgrind, where the bench is told by
//! `CALLGRIND=1`, else 5) how many times the measured window is replayed from a copy of the
//! machine (the best time is printed).

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use parley_cluster::redis_store::CheckpointWriter;
use parley_engine::{Effect, Input, Machine};
use parley_protocol::*;
use serde_json::json;

fn now(step: usize) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()
        + chrono::Duration::milliseconds(step as i64 * 37)
}

fn spec(agents: usize, rounds: u32) -> DebateSpec {
    let roles = ["architect", "performance", "security", "testing", "kiss"];
    let agents: Vec<_> = (0..agents)
        .map(|i| json!({"id": format!("a{i}"), "name": format!("A{i}"), "role": roles[i % 5], "model": "m", "temperature": 0.3}))
        .collect();
    serde_json::from_value(json!({
        "problem": "Design a rate limiter for a multi-tenant API",
        "agents": agents,
        "judge": {"id": "judge", "name": "J", "role": "generalist", "model": "jm", "temperature": 0.1},
        "debate": {"rounds": rounds, "terminationCondition": {"type": "fixed"}},
    }))
    .expect("the bench's spec")
}

/// About `bytes` of words that do not repeat (a simple generator seeded by the task).
fn prose(task: &str, bytes: usize) -> String {
    let mut x = task.bytes().fold(0x9e37_79b9_7f4a_7c15u64, |h, b| {
        h.wrapping_mul(31) ^ u64::from(b)
    });
    let mut out = String::with_capacity(bytes + 12);
    while out.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for i in 0..(2 + x % 8) {
            out.push(char::from(b'a' + ((x >> (i * 5)) % 26) as u8));
        }
        out.push(if x % 10 == 0 { '.' } else { ' ' });
    }
    out
}

/// The result a worker stores for `task`, as the JSON the coordinator reads.
fn stored_result(task: &Task, reply_bytes: usize) -> String {
    let mut content = format!("{} says about {}: ", task.agent.id, task.id);
    content.push_str(&prose(&task.id, reply_bytes));
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
    let r = TaskResult {
        schema_version: SCHEMA_VERSION,
        task_id: task.id.clone(),
        debate_id: task.debate_id.clone(),
        attempt: task.attempt,
        worker: "agent-worker-1".into(),
        outcome: TaskOutcome::Ok(out),
    };
    serde_json::to_string(&r).expect("a result's JSON")
}

/// A debate as its actor holds it: the machine, the checkpoint writer, the version, and the
/// tasks dispatched and not answered yet.
#[derive(Clone)]
struct Actor {
    machine: Machine,
    version: u64,
    queue: VecDeque<Task>,
    step: usize,
}

const SECRET: &str = "0123456789abcdef0123456789abcdef";

/// What one transition produced (kept out of the optimiser's reach).
#[derive(Default)]
struct Out {
    checkpoint_bytes: usize,
    message_bytes: usize,
    /// Rounds the writer took as unchanged from the machine's revisions.
    rounds_unread: usize,
}

/// One transition (see the crate docs); the result's JSON is `stored`.
fn transition(a: &mut Actor, writer: &CheckpointWriter, input: Option<&str>) -> Out {
    let input = match input {
        Some(json) => Input::Result(serde_json::from_str(json).expect("a stored result")),
        None => Input::Start,
    };
    a.step += 1;
    let effects = a.machine.handle(input, now(a.step));
    a.machine.set_outbox(
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Emit(event) => Some(event.clone()),
                _ => None,
            })
            .collect(),
    );
    let prepared = writer
        .prepare_revised(
            a.machine.state(),
            Some(a.machine.round_revisions()),
            a.version,
        )
        .expect("a checkpoint");
    let mut out = Out {
        checkpoint_bytes: prepared.stored_bytes(),
        message_bytes: 0,
        rounds_unread: prepared.rounds_unread(),
    };
    a.version = prepared.next;
    writer.written(a.machine.id(), prepared);
    let mut events = Vec::new();
    for effect in effects {
        match effect {
            Effect::Dispatch(mut task) => {
                task.dispatch_token = Some(parley_cluster::dispatch::token(
                    SECRET,
                    &task.debate_id,
                    &task.id,
                    task.attempt,
                ));
                let body = serde_json::to_string(&task).expect("a task's JSON");
                let msg = serde_json::to_vec(&task.to_ref()).expect("a task reference's JSON");
                out.message_bytes += body.len() + msg.len() + task.message_id().len();
                a.queue.push_back(task);
            }
            Effect::Emit(event) => events.push(event),
            Effect::ScheduleRetry { .. } => {}
        }
    }
    for m in parley_protocol::encode_event_messages(&events, 1 << 20).expect("the events' JSON") {
        out.message_bytes += m.body.len();
    }
    out
}

/// The transitions measured (the only function callgrind counts in).
#[inline(never)]
fn measured_transition(a: &mut Actor, writer: &CheckpointWriter, input: &str) -> Out {
    transition(a, writer, Some(input))
}

fn state_bytes(a: &Actor) -> usize {
    serde_json::to_string(a.machine.state())
        .expect("the state's JSON")
        .len()
}

struct Case {
    name: &'static str,
    agents: usize,
    rounds: u32,
    reply_bytes: usize,
    target_bytes: usize,
}

fn run(case: &Case, transitions: usize, repeat: usize) {
    let writer = CheckpointWriter::new();
    let mut a = Actor {
        machine: Machine::new(
            format!("bench-{}", case.name),
            spec(case.agents, case.rounds),
            now(0),
        ),
        version: 0,
        queue: VecDeque::new(),
        step: 0,
    };
    transition(&mut a, &writer, None);
    // Up to the target size, unmeasured.
    while state_bytes(&a) < case.target_bytes {
        let task = a
            .queue
            .pop_front()
            .expect("the debate ended before its target size");
        let json = stored_result(&task, case.reply_bytes);
        transition(&mut a, &writer, Some(&json));
    }
    // The window: the same inputs each time, from a copy of the debate. Each replay starts
    // with a snapshot (the copy's writer has no shape of it), which is left unmeasured.
    let mut best = Duration::MAX;
    let (mut sizes, mut stored, mut messages, mut measured) = (0usize, 0usize, 0usize, 0usize);
    let (mut unread, mut rounds) = (0usize, 0usize);
    for _ in 0..repeat {
        let mut b = a.clone();
        let writer = CheckpointWriter::new();
        let warm = b.queue.pop_front().expect("a task to answer");
        transition(
            &mut b,
            &writer,
            Some(&stored_result(&warm, case.reply_bytes)),
        );
        (sizes, stored, messages, measured) = (0, 0, 0, 0);
        (unread, rounds) = (0, 0);
        let mut spent = Duration::ZERO;
        for _ in 0..transitions {
            let Some(task) = b.queue.pop_front() else {
                break;
            };
            let json = stored_result(&task, case.reply_bytes);
            let t = Instant::now();
            let out = black_box(measured_transition(&mut b, &writer, &json));
            spent += t.elapsed();
            stored += out.checkpoint_bytes;
            messages += out.message_bytes;
            unread += out.rounds_unread;
            rounds += b.machine.state().rounds.len();
            sizes += state_bytes(&b);
            measured += 1;
        }
        best = best.min(spent);
    }
    let n = measured.max(1);
    println!(
        "{}: {measured} transitions on a {} B state (mean, JSON); {:.1} us per transition (best of {repeat}); checkpoint {} B and messages {} B per transition; {unread} of {rounds} rounds left unread",
        case.name,
        sizes / n,
        best.as_secs_f64() * 1e6 / n as f64,
        stored / n,
        messages / n,
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let callgrind = std::env::var_os("CALLGRIND").is_some();
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let transitions = env("TRANSITIONS", 20);
    let repeat = env("REPEAT", if callgrind { 1 } else { 5 }).max(1);
    let cases = [
        Case {
            name: "small",
            agents: 4,
            rounds: 3,
            reply_bytes: 150,
            target_bytes: 10 << 10,
        },
        Case {
            name: "large",
            agents: 6,
            rounds: 4,
            reply_bytes: 3000,
            target_bytes: 400 << 10,
        },
    ];
    for case in &cases {
        if args.is_empty() || args.iter().any(|a| a == case.name) {
            run(case, transitions, repeat);
        }
    }
}
