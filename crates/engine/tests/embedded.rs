//! The embedded driver's resilience: a task that panics fails its node instead of hanging
//! the run; an interrupted run keeps what completed in its grace period, saves a checkpoint
//! that `Input::Resume` continues without repeating a completed call; a failed run continues
//! with `Input::Retry` the same way. Time is paused (tokio test-util): the grace period
//! elapses as soon as nothing else can run.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use parley_engine::{run_debate, run_debate_until, FileStore, Input, Machine, TaskRunner};
use parley_protocol::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// 3 agents (a0, a1, a2), 2 fixed rounds: 22 LLM calls.
fn spec() -> DebateSpec {
    let agents: Vec<_> = ["architect", "security", "kiss"]
        .iter()
        .enumerate()
        .map(|(i, role)| json!({"id": format!("a{i}"), "name": format!("A{i}"), "role": role, "model": "m", "temperature": 0.3}))
        .collect();
    serde_json::from_value(json!({
        "problem": "Design a cache",
        "agents": agents,
        "judge": {"id": "judge", "name": "J", "role": "generalist", "model": "jm", "temperature": 0.1},
        "debate": {"rounds": 2, "terminationCondition": {"type": "fixed"},
                   "retry": {"default": {"attempts": 2, "initialBackoffMs": 10, "maxBackoffMs": 20}}},
    }))
    .unwrap()
}

fn answer(task: &Task) -> TaskResult {
    let solution = (task.kind == TaskKind::Synthesize).then(|| Solution {
        confidence: 80.0,
        ..Solution::text_only("final".into(), task.agent.id.clone())
    });
    TaskResult {
        schema_version: SCHEMA_VERSION,
        task_id: task.id.clone(),
        debate_id: task.debate_id.clone(),
        attempt: task.attempt,
        worker: "test".into(),
        outcome: TaskOutcome::Ok(TaskOutput {
            content: format!("answer to {}", task.id),
            metadata: ContributionMetadata {
                tokens_used: 10,
                latency_ms: 1,
                model: task.agent.model.clone(),
                ..Default::default()
            },
            solution,
            ..Default::default()
        }),
    }
}

/// What a scripted runner does with a task.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Act {
    Answer,
    /// Waits for the gate, then answers.
    AnswerWhenOpen,
    /// Never answers.
    Hang,
    Panic,
}

/// A runner that records every call it completed and acts on each task by `script`.
struct Scripted {
    script: Box<dyn Fn(&Task) -> Act + Send + Sync>,
    gate: Arc<tokio::sync::Notify>,
    /// Task ids whose call started.
    started: Mutex<Vec<String>>,
    /// Task ids whose call completed (answered).
    completed: Mutex<Vec<String>>,
}

impl Scripted {
    fn new(script: impl Fn(&Task) -> Act + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            script: Box::new(script),
            gate: Arc::new(tokio::sync::Notify::new()),
            started: Mutex::new(Vec::new()),
            completed: Mutex::new(Vec::new()),
        })
    }
    fn started(&self) -> Vec<String> {
        self.started.lock().unwrap().clone()
    }
    fn completed(&self) -> Vec<String> {
        self.completed.lock().unwrap().clone()
    }
}

#[async_trait]
impl TaskRunner for Scripted {
    async fn run(&self, task: Task) -> TaskResult {
        self.started.lock().unwrap().push(task.id.clone());
        match (self.script)(&task) {
            Act::Answer => {}
            Act::AnswerWhenOpen => self.gate.notified().await,
            Act::Hang => std::future::pending::<()>().await,
            Act::Panic => panic!("runner bug on {}", task.id),
        }
        self.completed.lock().unwrap().push(task.id.clone());
        answer(&task)
    }
}

/// Task ids of every LLM call a completed state holds (carried-over proposals excluded).
fn completed_calls(state: &DebateState) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for rd in &state.rounds {
        for c in &rd.contributions {
            if c.metadata.carried_over {
                continue;
            }
            let kind = match c.kind {
                ContributionType::Proposal => TaskKind::Propose,
                ContributionType::Critique => TaskKind::Critique,
                ContributionType::Refinement => TaskKind::Refine,
            };
            out.insert(task_id(
                &state.id,
                rd.round_number,
                kind,
                &c.agent_id,
                c.target_agent_id.as_deref(),
            ));
        }
    }
    if state.final_solution.is_some() {
        let r = state.rounds.len() as u32;
        out.insert(task_id(&state.id, r, TaskKind::Synthesize, "judge", None));
    }
    out
}

fn events() -> tokio::sync::mpsc::UnboundedSender<DebateEvent> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    tx
}

#[tokio::test(start_paused = true)]
async fn a_panicking_task_fails_its_node_and_retry_repeats_no_completed_call() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let machine = Machine::new(new_debate_id(Utc::now()), spec(), Utc::now());
    let id = machine.id().to_string();
    let panicky = Scripted::new(|t| {
        if t.kind == TaskKind::Refine && t.agent.id == "a1" {
            Act::Panic
        } else {
            Act::Answer
        }
    });
    let state = tokio::time::timeout(
        Duration::from_secs(600),
        run_debate(
            machine,
            Input::Start,
            panicky.clone(),
            Some(store.clone()),
            events(),
        ),
    )
    .await
    .expect("a panicking task must not hang the run")
    .unwrap();
    assert_eq!(state.status, DebateStatus::Failed);
    let failure = state.error.as_ref().unwrap();
    assert_eq!(failure.node, "refinement");
    assert_eq!(failure.agent_id.as_deref(), Some("a1"));
    assert_eq!(failure.kind, Some(ErrorKind::Internal));
    assert!(
        failure.message.contains("panicked") && failure.message.contains("runner bug"),
        "{failure:?}"
    );
    // Internal errors are not retried: the refinement ran once.
    let refine_a1 = task_id(&id, 1, TaskKind::Refine, "a1", None);
    assert_eq!(
        panicky
            .started()
            .iter()
            .filter(|t| **t == refine_a1)
            .count(),
        1
    );

    // Retry from the saved file: exactly the calls that had not completed run.
    let (saved_spec, saved) = store.load(&id).unwrap();
    assert_eq!(saved, state);
    let done_before = completed_calls(&saved);
    let good = Scripted::new(|_| Act::Answer);
    let machine = Machine::from_checkpoint(saved_spec, saved);
    let state = run_debate(
        machine,
        Input::Retry,
        good.clone(),
        Some(store.clone()),
        events(),
    )
    .await
    .unwrap();
    assert_eq!(state.status, DebateStatus::Completed, "{:?}", state.error);
    let all = completed_calls(&state);
    assert_eq!(all.len(), 22);
    let rerun: BTreeSet<String> = good.completed().into_iter().collect();
    assert_eq!(good.completed().len(), rerun.len(), "a call ran twice");
    assert!(
        rerun.is_disjoint(&done_before),
        "a completed call ran again"
    );
    assert_eq!(rerun.len(), 22 - done_before.len());
    assert!(rerun.contains(&refine_a1));
}

#[tokio::test(start_paused = true)]
async fn interrupt_keeps_calls_done_in_the_grace_and_resume_runs_only_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let machine = Machine::new(new_debate_id(Utc::now()), spec(), Utc::now());
    let id = machine.id().to_string();
    // Proposals answer; a0's critiques answer once the gate opens (after the interrupt,
    // within the grace); every other critique hangs.
    let first = Scripted::new(|t| match (t.kind, t.agent.id.as_str()) {
        (TaskKind::Propose, _) => Act::Answer,
        (TaskKind::Critique, "a0") => Act::AnswerWhenOpen,
        _ => Act::Hang,
    });
    let interrupt = CancellationToken::new();
    let run = tokio::spawn({
        let (first, store, interrupt) = (first.clone(), store.clone(), interrupt.clone());
        async move {
            run_debate_until(
                machine,
                Input::Start,
                first,
                Some(store),
                events(),
                &interrupt,
                Duration::from_secs(3),
            )
            .await
        }
    });
    // Wait until the six critiques are running.
    while first.started().len() < 9 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    interrupt.cancel();
    tokio::task::yield_now().await;
    first.gate.notify_waiters();
    let driven = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the grace period bounds the stop")
        .unwrap()
        .unwrap();
    assert!(driven.interrupted);
    assert_eq!(driven.state.status, DebateStatus::Running);
    // 3 proposals and a0's 2 critiques completed; the other 4 critiques were abandoned,
    // and nothing new started after the interrupt (a0's critiques enabled nothing yet).
    let done = completed_calls(&driven.state);
    assert_eq!(done.len(), 5, "{done:?}");
    assert_eq!(first.started().len(), 9);
    let abandoned: BTreeSet<String> = driven.abandoned.iter().cloned().collect();
    assert_eq!(abandoned.len(), 4, "{abandoned:?}");
    assert!(abandoned
        .iter()
        .all(|t| t.contains("/critique/") && !t.contains("/a0/")));

    // The checkpoint on disk is that state; resuming runs exactly the 17 missing calls.
    let (saved_spec, saved) = store.load(&id).unwrap();
    assert_eq!(saved, driven.state);
    let good = Scripted::new(|_| Act::Answer);
    let machine = Machine::from_checkpoint(saved_spec, saved);
    let state = run_debate(machine, Input::Resume, good.clone(), Some(store), events())
        .await
        .unwrap();
    assert_eq!(state.status, DebateStatus::Completed);
    let rerun: BTreeSet<String> = good.completed().into_iter().collect();
    assert_eq!(good.completed().len(), 17);
    assert_eq!(rerun.len(), 17, "a call ran twice");
    assert!(rerun.is_disjoint(&done), "a completed call ran again");
    assert!(abandoned.is_subset(&rerun));
    // The abandoned attempts went out again as themselves: no retry budget spent.
    assert!(
        state.engine.failed_attempts.is_empty(),
        "{:?}",
        state.engine
    );
    assert!(state.engine.attempts.values().all(|a| *a == 1));
}

#[tokio::test(start_paused = true)]
async fn interrupt_before_a_queued_task_starts_does_not_start_it() {
    let mut s = spec();
    s.debate.max_concurrency = 1;
    let machine = Machine::new(new_debate_id(Utc::now()), s, Utc::now());
    // One slot: the first proposal hangs, the two others wait for the slot.
    let runner = Scripted::new(|_| Act::Hang);
    let interrupt = CancellationToken::new();
    let run = tokio::spawn({
        let (runner, interrupt) = (runner.clone(), interrupt.clone());
        async move {
            run_debate_until(
                machine,
                Input::Start,
                runner,
                None,
                events(),
                &interrupt,
                Duration::from_secs(2),
            )
            .await
        }
    });
    while runner.started().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    interrupt.cancel();
    let driven = run.await.unwrap().unwrap();
    assert!(driven.interrupted);
    assert_eq!(
        runner.started().len(),
        1,
        "a queued task started after the interrupt"
    );
    assert_eq!(driven.abandoned.len(), 3);
}
