//! Runs a [`Machine`] in-process: the embedded mode.
//!
//! Tasks run concurrently on the tokio runtime, at most `debate.maxConcurrency` at once;
//! each attempt is bounded by its task's `timeout_ms`. Retry timers are tokio sleeps that
//! feed [`Input::RetryDue`] back. The state is checkpointed after every transition.
//! Spans as in the distributed mode ([`crate::trace`]): `debate` → `node` → `task` →
//! `llm.call`, exported when OTLP is configured.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use parley_protocol::{
    DebateEvent, DebateState, ErrorKind, Task, TaskError, TaskOutcome, TaskResult,
};
use rand::Rng;
use tokio::sync::{mpsc, Semaphore};
use tracing::Instrument as _;

use crate::{Effect, FileStore, Input, Machine};

/// Executes one task (one LLM call and its prompt building) and reports the outcome.
#[async_trait]
pub trait TaskRunner: Send + Sync + 'static {
    async fn run(&self, task: Task) -> TaskResult;
}

/// Drives `machine` from `input` until the debate is completed, failed or cancelled and no
/// task is still running. Every event goes to `events`; the state is saved to `store` after
/// every transition. Returns the final state.
pub async fn run_debate(
    mut machine: Machine,
    input: Input,
    runner: Arc<dyn TaskRunner>,
    store: Option<FileStore>,
    events: mpsc::UnboundedSender<DebateEvent>,
) -> Result<DebateState, crate::store::StoreError> {
    let limit = machine.spec().debate.max_concurrency.max(1);
    let slots = Arc::new(Semaphore::new(limit));
    let (tx, mut rx) = mpsc::unbounded_channel::<Input>();
    let mut pending_timers = 0usize;
    let mut next = Some(input);
    let mut trace = crate::trace::DebateTrace::open(&mut machine);
    loop {
        if let Some(input) = next.take() {
            if matches!(input, Input::RetryDue(_)) {
                pending_timers -= 1;
            }
            let effects = machine.handle(input, Utc::now());
            if let Some(store) = &store {
                store.save(machine.state())?;
            }
            for effect in effects {
                match effect {
                    Effect::Emit(e) => {
                        if let parley_protocol::EventKind::RoundCompleted { round } = e.kind {
                            trace.round_completed(round);
                        }
                        let _ = events.send(e);
                    }
                    Effect::Dispatch(task) => {
                        let span = parley_cluster::task_span(
                            trace.node(task.round, task.kind.node()),
                            &task,
                        );
                        spawn_task(task, runner.clone(), slots.clone(), tx.clone(), span);
                    }
                    Effect::ScheduleRetry { task_id, delay_ms } => {
                        pending_timers += 1;
                        let tx = tx.clone();
                        let jittered = jitter(delay_ms);
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(jittered)).await;
                            let _ = tx.send(Input::RetryDue(task_id));
                        });
                    }
                }
            }
        }
        let running = machine.state().status == parley_protocol::DebateStatus::Running;
        let idle = machine.in_flight().next().is_none();
        // Done (or failed/cancelled) with nothing left running; or, defensively, a running
        // debate with nothing in flight and no timer pending could never move again.
        if idle && (!running || pending_timers == 0) {
            trace.settled(machine.state().status);
            return Ok(machine.state().clone());
        }
        match rx.recv().await {
            Some(input) => next = Some(input),
            None => return Ok(machine.state().clone()),
        }
    }
}

/// Full jitter between half and all of the delay, so retries of many tasks spread out.
fn jitter(delay_ms: u64) -> u64 {
    if delay_ms < 2 {
        return delay_ms;
    }
    rand::thread_rng().gen_range(delay_ms / 2..=delay_ms)
}

fn spawn_task(
    task: Task,
    runner: Arc<dyn TaskRunner>,
    slots: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<Input>,
    span: tracing::Span,
) {
    tokio::spawn(
        async move {
            let Ok(_permit) = slots.acquire_owned().await else {
                return;
            };
            let (id, debate_id, attempt) = (task.id.clone(), task.debate_id.clone(), task.attempt);
            let timeout = Duration::from_millis(task.timeout_ms.max(1));
            let started = Instant::now();
            let result = match tokio::time::timeout(timeout, runner.run(task)).await {
                Ok(r) => r,
                Err(_) => TaskResult {
                    schema_version: parley_protocol::SCHEMA_VERSION,
                    task_id: id,
                    debate_id,
                    attempt,
                    worker: "embedded".into(),
                    outcome: TaskOutcome::Error(TaskError {
                        kind: ErrorKind::Timeout,
                        message: format!(
                            "task timed out after {} ms",
                            started.elapsed().as_millis()
                        ),
                        provider: None,
                        retry_after_ms: None,
                    }),
                },
            };
            let _ = tx.send(Input::Result(result));
        }
        .instrument(span),
    );
}
