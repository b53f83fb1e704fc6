//! Unit tests of the state machine, one file per concern, and their shared fixtures: a
//! spec builder, scripted results, and [`Run`], which drives a machine to rest.

use std::collections::VecDeque;

use chrono::{TimeZone, Utc};
use parley_protocol::*;
use serde_json::json;

use crate::{Effect, Input, Machine};

mod adaptive;
mod budget;
mod clarifications;
mod deadlines;
mod failures;
mod graph;
mod human;
mod lifecycle;
mod revisions;
mod rounds;
mod similarity;
mod steering;

pub(crate) fn now() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()
}

pub(crate) fn spec(
    n: usize,
    rounds: u32,
    termination: &str,
    extra: serde_json::Value,
) -> DebateSpec {
    let roles = ["architect", "performance", "security", "testing", "kiss"];
    let agents: Vec<_> = (0..n)
        .map(|i| json!({"id": format!("a{i}"), "name": format!("A{i}"), "role": roles[i % 5], "model": "m", "temperature": 0.3}))
        .collect();
    let mut debate = json!({"rounds": rounds, "terminationCondition": {"type": termination}});
    if let serde_json::Value::Object(m) = extra {
        for (k, v) in m {
            debate[k] = v;
        }
    }
    serde_json::from_value(json!({
        "problem": "Design a cache",
        "agents": agents,
        "judge": {"id": "judge", "name": "J", "role": "generalist", "model": "jm", "temperature": 0.1},
        "debate": debate,
    }))
    .unwrap()
}

pub(crate) fn ok(task: &Task, content: &str) -> TaskResult {
    let mut out = TaskOutput {
        content: content.to_string(),
        metadata: ContributionMetadata {
            tokens_used: 10,
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
                ..Solution::text_only("final".into(), task.agent.id.clone())
            })
        }
        TaskKind::Evaluate => out.confidence = Some(50.0),
        _ => {}
    }
    result(task, TaskOutcome::Ok(out))
}

pub(crate) fn result(task: &Task, outcome: TaskOutcome) -> TaskResult {
    TaskResult {
        schema_version: SCHEMA_VERSION,
        task_id: task.id.clone(),
        debate_id: task.debate_id.clone(),
        attempt: task.attempt,
        worker: "test".into(),
        outcome,
    }
}

pub(crate) fn fail(task: &Task, kind: ErrorKind) -> TaskResult {
    result(
        task,
        TaskOutcome::Error(TaskError {
            kind,
            message: format!("boom {}", task.id),
            provider: Some("fake".into()),
            retry_after_ms: None,
        }),
    )
}

/// Runs a machine to rest, answering each dispatched task (FIFO) with `answer`.
/// Returns every dispatched task and every event.
pub(crate) struct Run {
    pub(crate) machine: Machine,
    pub(crate) tasks: Vec<Task>,
    pub(crate) events: Vec<DebateEvent>,
    pub(crate) retries: Vec<(String, u64)>,
    pub(crate) queue: VecDeque<Task>,
}

impl Run {
    pub(crate) fn new(spec: DebateSpec) -> Self {
        Self {
            machine: Machine::new("deb-20260102-030405-abcdef".into(), spec, now()),
            tasks: vec![],
            events: vec![],
            retries: vec![],
            queue: VecDeque::new(),
        }
    }
    pub(crate) fn apply(&mut self, input: Input) {
        for fx in self.machine.handle(input, now()) {
            match fx {
                Effect::Dispatch(t) => {
                    self.tasks.push(t.clone());
                    self.queue.push_back(t);
                }
                Effect::Emit(e) => self.events.push(e),
                Effect::ScheduleRetry { task_id, delay_ms } => {
                    self.retries.push((task_id, delay_ms))
                }
            }
        }
    }
    pub(crate) fn drain(&mut self, mut answer: impl FnMut(&Task) -> Option<TaskResult>) {
        while let Some(t) = self.queue.pop_front() {
            if let Some(r) = answer(&t) {
                self.apply(Input::Result(r));
            }
        }
    }
    /// Answers every task (a server error `boom` where `broken` holds, else `x`) and
    /// applies each retry at once, until no retry is due.
    pub(crate) fn drain_with_retries(&mut self, broken: impl Fn(&Task) -> bool) {
        loop {
            self.drain(|t| {
                Some(if broken(t) {
                    fail(t, ErrorKind::Server)
                } else {
                    ok(t, "x")
                })
            });
            let due: Vec<_> = self.retries.drain(..).collect();
            if due.is_empty() {
                break;
            }
            for (id, _) in due {
                self.apply(Input::RetryDue(id));
            }
        }
    }
    pub(crate) fn run_ok(spec: DebateSpec) -> Self {
        let mut r = Self::new(spec);
        r.apply(Input::Start);
        r.drain(|t| Some(ok(t, &format!("text of {}", t.id))));
        r
    }
    pub(crate) fn count(&self, kind: TaskKind) -> usize {
        self.tasks.iter().filter(|t| t.kind == kind).count()
    }
    pub(crate) fn nodes(&self) -> Vec<(u32, Node)> {
        self.events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::NodeEntered { round, node } => Some((*round, *node)),
                _ => None,
            })
            .collect()
    }
}
