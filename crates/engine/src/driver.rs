//! Runs a [`Machine`] in-process: the embedded mode.
//!
//! Tasks run concurrently on the tokio runtime, at most `debate.maxConcurrency` at once;
//! each attempt is bounded by its task's `timeout_ms`. Retry timers are tokio sleeps that
//! feed [`Input::RetryDue`] back. The state is checkpointed (with the spec, see
//! [`FileStore`]) after every transition, so a run that stops for any reason continues with
//! [`Input::Resume`] (interrupted) or [`Input::Retry`] (failed) from the file, repeating no
//! completed call: completed results are in the state.
//!
//! Every spawned task reports exactly once: its result, or a failed result when its runner
//! panicked, was cancelled or its future was dropped ([`ErrorKind::Internal`], not
//! retried). [`run_debate_until`] stops on an interrupt after a grace period for the calls
//! in flight.
//! Spans as in the distributed mode ([`crate::trace`]): `debate` → `node` → `task` →
//! `llm.call`, exported when OTLP is configured.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use parley_protocol::{
    DebateEvent, DebateState, ErrorKind, Task, TaskError, TaskOutcome, TaskResult,
};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::{Contribute, ContributeError, Effect, FileStore, Input, Machine, Steer, SteerError};

/// Executes one task (one LLM call and its prompt building) and reports the outcome.
#[async_trait]
pub trait TaskRunner: Send + Sync + 'static {
    async fn run(&self, task: Task) -> TaskResult;
}

/// Drives `machine` from `input` until the debate is completed, failed or cancelled and no
/// task is still running. Every event goes to `events`; the state is saved to `store` after
/// every transition. Returns the final state. See [`run_debate_until`] for a run that a
/// signal can interrupt.
pub async fn run_debate(
    machine: Machine,
    input: Input,
    runner: Arc<dyn TaskRunner>,
    store: Option<FileStore>,
    events: mpsc::UnboundedSender<DebateEvent>,
) -> Result<DebateState, crate::store::StoreError> {
    let never = CancellationToken::new();
    let driven = run_debate_until(
        machine,
        input,
        runner,
        store,
        events,
        &never,
        Duration::ZERO,
    )
    .await?;
    Ok(driven.state)
}

/// How a run of [`run_debate_until`] ended.
#[derive(Debug, Clone)]
pub struct Driven {
    /// The last state (the one saved last).
    pub state: DebateState,
    /// The run was interrupted: the debate is still `running` and continues with
    /// [`Input::Resume`] from the saved state.
    pub interrupted: bool,
    /// Tasks whose calls had not completed when the run stopped (interrupted runs only):
    /// a resume runs exactly these again, plus what they enable.
    pub abandoned: Vec<String>,
}

/// [`run_debate`] that stops when `interrupt` is cancelled: it dispatches nothing more
/// (tasks waiting for a concurrency slot do not start), waits up to `grace` for the calls in
/// flight and applies their successful results (a failure that comes back meanwhile is not
/// counted: the attempt stays outstanding and a resume sends it again as itself), saves the
/// state and returns with `interrupted` set. Calls still running after `grace` are dropped.
///
/// A task whose runner panics, or whose future is dropped or cancelled, reports a failed
/// result (`ErrorKind::Internal`, not retried): the debate fails at that node, and never
/// waits forever for it.
pub async fn run_debate_until(
    machine: Machine,
    input: Input,
    runner: Arc<dyn TaskRunner>,
    store: Option<FileStore>,
    events: mpsc::UnboundedSender<DebateEvent>,
    interrupt: &CancellationToken,
    grace: Duration,
) -> Result<Driven, crate::store::StoreError> {
    run_debate_steered(
        machine, input, runner, store, events, interrupt, grace, None,
    )
    .await
}

/// A steering command for a running driver and where its verdict goes: `Ok` once it is
/// applied (and checkpointed), or why it does not apply.
pub type SteerCall = (Steer, oneshot::Sender<Result<(), SteerError>>);

/// A person's contribution for a running driver and where its verdict goes: the task it
/// answered once applied (and checkpointed), or why it does not apply.
pub type ContributeCall = (
    Contribute,
    oneshot::Sender<Result<parley_protocol::HumanTask, ContributeError>>,
);

/// What a running driver takes besides task results: steering commands and human
/// participants' contributions.
#[derive(Debug, Default)]
pub struct Controls {
    pub steering: Option<mpsc::UnboundedReceiver<SteerCall>>,
    pub contributions: Option<mpsc::UnboundedReceiver<ContributeCall>>,
}

/// [`run_debate_until`] that also takes steering commands from `steering` while it runs:
/// each is checked ([`Machine::check_steer`]), answered, and applied as the next input.
/// A paused debate whose calls in flight have all come back ends the run (`running`,
/// nothing outstanding): whoever holds it resumes it with [`Input::Steer`] later.
#[allow(clippy::too_many_arguments)]
pub async fn run_debate_steered(
    machine: Machine,
    input: Input,
    runner: Arc<dyn TaskRunner>,
    store: Option<FileStore>,
    events: mpsc::UnboundedSender<DebateEvent>,
    interrupt: &CancellationToken,
    grace: Duration,
    steering: Option<mpsc::UnboundedReceiver<SteerCall>>,
) -> Result<Driven, crate::store::StoreError> {
    let controls = Controls {
        steering,
        contributions: None,
    };
    run_debate_controlled(
        machine, input, runner, store, events, interrupt, grace, controls,
    )
    .await
}

/// [`run_debate_steered`] that also takes human participants' contributions: each is
/// checked ([`Machine::check_contribution`]), applied as the next input and answered once
/// checkpointed. An open human task past its deadline is fed to the machine as
/// [`Input::Tick`]; while one is open the run waits for it (it counts as in flight).
#[allow(clippy::too_many_arguments)]
pub async fn run_debate_controlled(
    mut machine: Machine,
    input: Input,
    runner: Arc<dyn TaskRunner>,
    store: Option<FileStore>,
    events: mpsc::UnboundedSender<DebateEvent>,
    interrupt: &CancellationToken,
    grace: Duration,
    controls: Controls,
) -> Result<Driven, crate::store::StoreError> {
    let Controls {
        mut steering,
        mut contributions,
    } = controls;
    let limit = machine.spec().debate.max_concurrency.max(1);
    let slots = Arc::new(Semaphore::new(limit));
    let (tx, mut rx) = mpsc::unbounded_channel::<Input>();
    let mut pending_timers = 0usize;
    // Tasks spawned that have not reported yet (each reports exactly once).
    let mut reporting = 0usize;
    // Set when interrupted: the end of the grace period.
    let mut stopping: Option<tokio::time::Instant> = None;
    // Cancelled when interrupted: queued tasks do not start.
    let no_new_calls = CancellationToken::new();
    // Cancelled when this function returns: calls still running are dropped.
    let abandon = CancellationToken::new();
    let _abandon_on_return = abandon.clone().drop_guard();
    let mut next = Some(input);
    // The reply of a steering command taken as `next`.
    let mut steered: Option<oneshot::Sender<Result<(), SteerError>>> = None;
    // The reply of a contribution taken as `next`, with the task it answers.
    let mut contributed: Option<(
        oneshot::Sender<Result<parley_protocol::HumanTask, ContributeError>>,
        parley_protocol::HumanTask,
    )> = None;
    let mut trace = crate::trace::DebateTrace::open(&mut machine, false);
    loop {
        if let Some(input) = next.take() {
            let skip = match &input {
                Input::RetryDue(_) => {
                    pending_timers -= 1;
                    stopping.is_some()
                }
                Input::Result(r) => {
                    reporting -= 1;
                    stopping.is_some() && matches!(r.outcome, TaskOutcome::Error(_))
                }
                _ => false,
            };
            if !skip {
                let effects = machine.handle(input, Utc::now());
                if let Some(store) = &store {
                    store.save_with_spec(machine.state(), machine.spec())?;
                }
                if let Some(reply) = steered.take() {
                    let _ = reply.send(Ok(()));
                }
                if let Some((reply, task)) = contributed.take() {
                    let _ = reply.send(Ok(task));
                }
                for effect in effects {
                    match effect {
                        Effect::Emit(e) => {
                            if let parley_protocol::EventKind::RoundCompleted { round } = e.kind {
                                trace.round_completed(round);
                            }
                            let _ = events.send(e);
                        }
                        // Interrupted: the task stays outstanding in the checkpoint.
                        Effect::Dispatch(_) if stopping.is_some() => {}
                        Effect::Dispatch(task) => {
                            let span = parley_telemetry::task_span(
                                trace.node(task.round, task.kind.node()),
                                &task,
                            );
                            reporting += 1;
                            spawn_task(
                                task,
                                runner.clone(),
                                slots.clone(),
                                tx.clone(),
                                span,
                                no_new_calls.clone(),
                                abandon.clone(),
                            );
                        }
                        Effect::ScheduleRetry { .. } if stopping.is_some() => {}
                        Effect::ScheduleRetry { task_id, delay_ms } => {
                            pending_timers += 1;
                            let tx = tx.clone();
                            let jittered = parley_protocol::retry::jitter_ms(delay_ms);
                            tokio::spawn(async move {
                                tokio::time::sleep(Duration::from_millis(jittered)).await;
                                let _ = tx.send(Input::RetryDue(task_id));
                            });
                        }
                    }
                }
            }
        }
        if stopping.is_some() {
            if reporting == 0 {
                break;
            }
        } else {
            let running = machine.state().status == parley_protocol::DebateStatus::Running;
            let idle = machine.in_flight().next().is_none();
            // Done (or failed/cancelled) with nothing left running; or, defensively, a
            // running debate with nothing in flight and no timer pending could never move
            // again.
            if idle && (!running || pending_timers == 0) {
                trace.settled(machine.state().status);
                return Ok(Driven {
                    state: machine.state().clone(),
                    interrupted: false,
                    abandoned: Vec::new(),
                });
            }
        }
        let grace_over = async {
            match stopping {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        // An open human task's deadline: the clock input that expires it.
        let human_due = machine.human_deadline();
        let human_deadline = async {
            match human_due {
                Some(at) => {
                    let wait = at
                        .signed_duration_since(Utc::now())
                        .to_std()
                        .unwrap_or_default();
                    tokio::time::sleep(wait).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            input = rx.recv() => match input {
                Some(input) => next = Some(input),
                // Unreachable while this function holds `tx`; end like an interruption.
                None => break,
            },
            _ = interrupt.cancelled(), if stopping.is_none() => {
                stopping = Some(tokio::time::Instant::now() + grace);
                no_new_calls.cancel();
            }
            _ = grace_over => break,
            call = next_steer(&mut steering), if steering.is_some() && stopping.is_none() && next.is_none() => match call {
                Some((steer, reply)) => match machine.check_steer(&steer) {
                    Ok(()) => {
                        next = Some(Input::Steer(steer));
                        // Answered once applied and checkpointed.
                        steered = Some(reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                },
                None => steering = None,
            },
            call = next_contribution(&mut contributions), if contributions.is_some() && stopping.is_none() && next.is_none() => match call {
                Some((c, reply)) => match machine.check_contribution(&c) {
                    Ok(task) => {
                        next = Some(Input::Contribute(c));
                        contributed = Some((reply, task));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                },
                None => contributions = None,
            },
            _ = human_deadline, if stopping.is_none() && next.is_none() => next = Some(Input::Tick),
        }
    }
    // Interrupted: the state as of the last transition is the checkpoint.
    if let Some(store) = &store {
        store.save_with_spec(machine.state(), machine.spec())?;
    }
    Ok(Driven {
        state: machine.state().clone(),
        interrupted: true,
        abandoned: machine.in_flight().map(str::to_string).collect(),
    })
}

/// The next steering call, if a receiver is there (the `select!` guard checks it is).
async fn next_steer(
    steering: &mut Option<mpsc::UnboundedReceiver<SteerCall>>,
) -> Option<SteerCall> {
    match steering {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next contribution, if a receiver is there (the `select!` guard checks it is).
async fn next_contribution(
    contributions: &mut Option<mpsc::UnboundedReceiver<ContributeCall>>,
) -> Option<ContributeCall> {
    match contributions {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Sends a failed result for its task when dropped before [`Report::send`]: a task whose
/// future is dropped (or unwinds) still reports, so the driver never waits for it forever.
struct Report {
    tx: mpsc::UnboundedSender<Input>,
    task_id: String,
    debate_id: String,
    attempt: u32,
    sent: bool,
}

impl Report {
    fn send(mut self, result: TaskResult) {
        self.sent = true;
        let _ = self.tx.send(Input::Result(result));
    }

    fn fail(self, kind: ErrorKind, message: String) {
        let result = self.error(kind, message);
        self.send(result);
    }

    fn error(&self, kind: ErrorKind, message: String) -> TaskResult {
        TaskResult {
            schema_version: parley_protocol::SCHEMA_VERSION,
            task_id: self.task_id.clone(),
            debate_id: self.debate_id.clone(),
            attempt: self.attempt,
            worker: "embedded".into(),
            outcome: TaskOutcome::Error(TaskError {
                kind,
                message,
                provider: None,
                retry_after_ms: None,
            }),
        }
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        if !self.sent {
            let message = if std::thread::panicking() {
                "the task panicked".to_string()
            } else {
                "the task was dropped before it reported".to_string()
            };
            let _ = self
                .tx
                .send(Input::Result(self.error(ErrorKind::Internal, message)));
        }
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a panic carried, as text.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

fn spawn_task(
    task: Task,
    runner: Arc<dyn TaskRunner>,
    slots: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<Input>,
    span: tracing::Span,
    no_new_calls: CancellationToken,
    abandon: CancellationToken,
) {
    tokio::spawn(
        async move {
            let report = Report {
                tx,
                task_id: task.id.clone(),
                debate_id: task.debate_id.clone(),
                attempt: task.attempt,
                sent: false,
            };
            let _permit = tokio::select! {
                permit = slots.acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => return report.fail(ErrorKind::Internal, "the task queue was closed".into()),
                },
                _ = no_new_calls.cancelled() => {
                    return report.fail(ErrorKind::Internal, "not started: the run was interrupted".into());
                }
            };
            let timeout = Duration::from_millis(task.timeout_ms.max(1));
            let started = Instant::now();
            // Its own task, so a panic in the runner is caught here as a JoinError.
            let mut call = AbortOnDrop(tokio::spawn(
                async move { runner.run(task).await }.in_current_span(),
            ));
            let joined = tokio::select! {
                r = tokio::time::timeout(timeout, &mut call.0) => r,
                // The run returned: nobody waits for this call any more.
                _ = abandon.cancelled() => return,
            };
            let result = match joined {
                Ok(Ok(r)) => r,
                Ok(Err(e)) if e.is_panic() => {
                    let message = format!("the task panicked: {}", panic_message(&*e.into_panic()));
                    tracing::error!(task = %report.task_id, "{message}");
                    report.error(ErrorKind::Internal, message)
                }
                Ok(Err(_)) => report.error(ErrorKind::Internal, "the task was cancelled".into()),
                Err(_) => report.error(
                    ErrorKind::Timeout,
                    format!("task timed out after {} ms", started.elapsed().as_millis()),
                ),
            };
            report.send(result);
        }
        .instrument(span),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(tx: mpsc::UnboundedSender<Input>) -> Report {
        Report {
            tx,
            task_id: "deb-20260101-000000-aaaaaa/1/propose/a".into(),
            debate_id: "deb-20260101-000000-aaaaaa".into(),
            attempt: 2,
            sent: false,
        }
    }

    #[test]
    fn a_task_dropped_before_it_reported_reports_a_failure() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        drop(report(tx));
        let Ok(Input::Result(r)) = rx.try_recv() else {
            panic!("no result reported");
        };
        assert_eq!(r.attempt, 2);
        match r.outcome {
            TaskOutcome::Error(e) => {
                assert_eq!(e.kind, ErrorKind::Internal);
                assert!(e.message.contains("dropped"), "{}", e.message);
            }
            TaskOutcome::Ok(_) => panic!("a dropped task reported success"),
        }
    }

    #[test]
    fn a_task_that_reported_reports_once() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let r = report(tx);
        let result = r.error(ErrorKind::Timeout, "slow".into());
        r.send(result);
        assert!(matches!(rx.try_recv(), Ok(Input::Result(_))));
        assert!(rx.try_recv().is_err(), "reported twice");
    }
}
