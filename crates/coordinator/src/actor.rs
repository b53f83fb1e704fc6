//! The debate actor (ractor); its supervisor is in `crate::supervisor`, the messages both
//! handle in `crate::messages`, what both need in `crate::deps`.
//!
//! # Runtime semantics
//! - One [`DebateActor`] per active debate this coordinator owns; the
//!   [`Supervisor`](crate::supervisor::Supervisor) owns the registry (debate id → actor, or
//!   a debate at rest). A debate is owned by the coordinator holding its Redis lease; the
//!   supervisor takes the lease *before* spawning the actor and renews every lease it holds
//!   every [`Deps::poll_every`] (TTL/3 or less) in one pass; the outcome reaches the actor
//!   as its tick. A lost lease (renew refused) or a lost compare-and-set stops the actor at
//!   once without touching the debate.
//! - An actor that handled nothing for [`Deps::rest_after`] while its debate only waits
//!   puts it to rest (see `crate::supervisor`) and stops, keeping the lease.
//! - The actor processes one message at a time (ractor mailbox order). It never awaits an
//!   LLM call: it awaits only Redis (checkpoints, results) and JetStream publish acks.
//! - Every transition: `Machine::handle` → checkpoint (CAS on the version) → perform the
//!   effects in order (task publishes with `Nats-Msg-Id = task.message_id()`, event
//!   publishes, retry timers). A crash between checkpoint and publish is covered by the
//!   resume: the machine re-dispatches everything in flight with the same message ids, and
//!   JetStream (2 minute duplicate window) or the worker's "result already stored" check
//!   drops the repeats.
//! - Results: a notification on `parley.results.<id>` makes the actor read the result from
//!   Redis (the source of truth); a tick whose renewal saw the number of stored results
//!   change (or that could not tell) also reads Redis for its in-flight tasks, so a
//!   notification lost in a NATS restart only delays the debate.
//! - Authentic results: a result is applied only when the machine waits for it
//!   ([`Machine::expects`]: a task it dispatched and has no result for, an attempt it
//!   dispatched — for a failure, the current one), and only as read from Redis (the record
//!   must be for the task and attempt it was read for). Anything else is dropped with a
//!   warning and `parley_results_dropped_total{reason}`; results of finished tasks and old
//!   failed attempts met while resuming are expected and skipped quietly.
//! - Every dispatched task carries a dispatch token (`parley_cluster::dispatch`) derived
//!   from the debate's secret, loaded (or created, for a debate from an older build) when
//!   the actor starts; workers run no task without a valid one.
//! - A debate waiting for clarification answers (`awaiting_clarifications`) keeps its actor,
//!   its lease and its place in `parley:running`, with nothing in flight and no deadline:
//!   a takeover adopts it like any running debate and it goes on waiting.
//!   [`DebateMsg::Answer`] checks and applies answers; with
//!   [`Deps::clarification_timeout`], a tick past the timeout (counted from
//!   `engine.awaitingSince` in the checkpoint, so a takeover does not restart it) answers
//!   every open question `"NA"`.
//! - A human participant's open task (`state.human.open`) is in the checkpoint with its
//!   deadline: a takeover finds it open and keeps waiting; [`DebateMsg::Contribute`] checks
//!   and applies a person's answer; a tick past its deadline (a debate at rest wakes for
//!   it) expires it.
//! - When a debate is no longer running (completed, failed, cancelled) the actor removes it
//!   from `parley:running`, sets its keys to expire after the `retention`, releases the
//!   lease and stops. `retry` adopts it again (and its keys stop expiring).
//! - If performing an effect fails (NATS down), the actor fails; the supervisor releases
//!   the lease and the periodic scan resumes the debate from its checkpoint.
//!
//! # Bounds (every debate ends)
//! - Task bodies go to Redis (`parley:{id}:tasks`) before their messages, which carry only
//!   a [`parley_protocol::TaskRef`]: no task message grows with the debate.
//! - Deadlines: the machine gives every dispatched attempt a deadline (its timeout plus
//!   [`Deps::task_deadline_margin`]); each tick feeds the clock in when one is due, so a lost
//!   task message or result costs a re-dispatch as a new attempt, never the debate. A
//!   worker's hand-back notice extends the deadline; a dead-letter notice expires it at once.
//! - Cancel: a user's cancel is a durable mark in Redis first. Each tick checks it (in the
//!   lease renewal's round trip); an adoption applies it before anything else — without
//!   resuming the debate, so nothing is re-dispatched — and workers skip the tasks of a
//!   cancelled debate.
//! - Poison: when an actor fails while NATS (core and JetStream) and Redis answer, the
//!   supervisor counts the failure in Redis (`parley:{id}:failures`; the count starts again
//!   once the debate made progress). An adoption that finds [`Deps::max_actor_failures`]
//!   fails the debate with the last error instead of resuming it, so a debate that cannot
//!   be advanced ends `failed` within a few scans instead of looping. Failures while a
//!   backend is down (an outage) are not counted. `retry` clears the count.
//!
//! # Tracing
//! The actor holds the debate's root span (`debate`) and one `node` span per (round,
//! node kind), opened at the node's first dispatch and closed when its round completes (or
//! the debate settles). Every task message carries the node span's W3C trace context in its
//! headers, so the worker's `task` span (and its `llm.call` spans) join the trace. The root
//! span's `traceparent` is checkpointed; a coordinator that takes the debate over opens a
//! `debate` span (`debate.resumed = true`) under it, so the whole debate stays one trace.
//! Spans end (and are exported) when they are dropped.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use parley_protocol::{limits, preview, DebateStatus, TaskOutcome, TaskResult};
use parley_telemetry::DropReason;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::deps::Deps;
use crate::failures::ActorError;
use crate::messages::{
    AnswerRefusal, ContributeRefusal, DebateMsg, Rest, SteerRefusal, SupervisorMsg,
};
use crate::publish::{headers, publish_events, unpublished};
use parley_cluster::redis_store::LeaseCheck;
use parley_engine::{Effect, Expectation, Input, Machine};
use parley_protocol::EventKind;
use parley_telemetry::OpenTelemetrySpanExt as _;

use parley_engine::trace::DebateTrace;

pub struct DebateArgs {
    pub id: String,
    /// Applied right after resuming: a user's retry or cancel of a debate nobody owned.
    pub follow_up: Option<Input>,
    pub deps: Arc<Deps>,
    /// Where messages go while the debate goes to rest.
    pub sup: ActorRef<SupervisorMsg>,
    /// Waking a debate from rest: what was kept of it.
    pub wake: Option<Box<Rest>>,
}

/// Stateless: everything lives in [`DebateActorState`].
pub struct DebateActor;

pub struct DebateActorState {
    /// Boxed: the actor's task holds its state (by value, in more than one of its await
    /// states); a pointer keeps that task small for as long as the debate lives.
    machine: Box<Machine>,
    /// Version of the checkpoint this actor wrote (or loaded) last.
    version: u64,
    /// Requested on adoption; consumed by `Kick`.
    follow_up: Option<Input>,
    deps: Arc<Deps>,
    sup: ActorRef<SupervisorMsg>,
    /// Set once the debate settled and the lease was released: later messages are refused.
    stopping: bool,
    /// Set once the actor asked to put the debate to rest: later messages go back to the
    /// supervisor.
    resting: bool,
    /// When the actor last handled something other than a tick (or started).
    active_at: std::time::Instant,
    /// The number of stored results the last poll saw (`None`: not polled yet).
    results_seen: Option<u64>,
    /// When the lease was last renewed: a message processed after `poll_every` renews it
    /// too, so a backlog of results in the mailbox (ticks wait behind it) cannot lose it.
    renewed_at: std::time::Instant,
    trace: DebateTrace,
    /// The debate's dispatch secret: every task published is stamped with a token from it.
    secret: String,
}

fn metrics_status(status: DebateStatus) -> parley_telemetry::DebateStatus {
    match status {
        DebateStatus::Pending | DebateStatus::Running | DebateStatus::AwaitingClarifications => {
            parley_telemetry::DebateStatus::Running
        }
        DebateStatus::Completed => parley_telemetry::DebateStatus::Completed,
        DebateStatus::Failed => parley_telemetry::DebateStatus::Failed,
        DebateStatus::Cancelled => parley_telemetry::DebateStatus::Cancelled,
    }
}

impl Actor for DebateActor {
    type Msg = DebateMsg;
    type State = DebateActorState;
    type Arguments = DebateArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: DebateArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        // Boxed, like `handle` and `post_stop`: the actor's task is sized for its largest
        // future and lives as long as the debate (see `DebateActor::handle`).
        Box::pin(start(myself, args)).await
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        Box::pin(stop(state)).await
    }

    /// One message. The work is a boxed future that lives only while the message is
    /// handled: inlined, every await point of a transition (checkpoint, publishes) would
    /// make the actor's task, which lives as long as the debate, several KiB larger.
    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: DebateMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        Box::pin(handle(myself, msg, state)).await
    }
}

/// [`DebateActor`]'s `pre_start`: load the debate, build its machine, start its ticks.
async fn start(
    myself: ActorRef<DebateMsg>,
    args: DebateArgs,
) -> Result<DebateActorState, ActorProcessingErr> {
    {
        let store = &args.deps.store;
        let spec = store.spec(&args.id).await?;
        let cp = store.state(&args.id).await?;
        let (Some(spec), Some(cp)) = (spec, cp) else {
            // Nothing to run (deleted, or expired): stop scheduling it.
            store.unmark_running(&args.id).await?;
            return Err(ActorError::Missing(args.id).into());
        };
        let status = cp.state.status;
        if args.follow_up.is_none()
            && !matches!(
                status,
                DebateStatus::Running
                    | DebateStatus::Pending
                    | DebateStatus::AwaitingClarifications
            )
        {
            // A stale entry of the running set: the debate settled meanwhile, or its owner
            // checkpointed the end and failed before it finished settling (NATS without a
            // stream leader for its final events, Redis gone): finish that first.
            finish_settling(&args.deps, &args.id, &spec, &cp.state).await?;
            return Err(ActorError::NotRunning(args.id).into());
        }
        let secret = store.ensure_dispatch_secret(&args.id).await?;
        let mut machine = Box::new(Machine::from_checkpoint(spec, cp.state));
        machine.set_task_deadline_margin(Some(args.deps.task_deadline_margin));
        machine.set_pricing(args.deps.pricing.clone());
        let woken = args.wake.is_some();
        // From rest, at the checkpoint it left: carry on where it was. Otherwise (adopted,
        // or its checkpoint moved on meanwhile) resume it.
        let results_seen = match args.wake {
            Some(rest) if rest.version == cp.version => {
                machine.restore_runtime(rest.runtime);
                Some(rest.results)
            }
            _ => {
                myself.cast(DebateMsg::Kick)?;
                None
            }
        };
        let trace = DebateTrace::open(&mut machine, woken);
        if !woken {
            // A debate at rest stays counted as running.
            parley_telemetry::metrics().debate_status_changed(None, metrics_status(status));
        }
        let now = std::time::Instant::now();
        Ok(DebateActorState {
            machine,
            version: cp.version,
            follow_up: args.follow_up,
            deps: args.deps,
            sup: args.sup,
            stopping: false,
            resting: false,
            active_at: now,
            results_seen,
            renewed_at: now,
            trace,
            secret,
        })
    }
}

/// What settling a debate does after its final checkpoint, done again for a settled
/// debate still in the running set: its last transition's events (the checkpoint's
/// outbox, those the stream does not hold yet), its decision record,
/// its retention; then it leaves the running set. An error (NATS or Redis unreachable)
/// leaves it there, for the next scan.
async fn finish_settling(
    deps: &Deps,
    id: &str,
    spec: &parley_protocol::DebateSpec,
    state: &parley_protocol::DebateState,
) -> Result<(), ActorProcessingErr> {
    let events = unpublished(&deps.js, id, &state.engine.outbox).await?;
    for ack in publish_events(deps, &events).await? {
        ack.await?;
    }
    if deps.store.record(id).await?.is_none() {
        crate::decision_record::store(&deps.store, deps.record_signing_key.as_ref(), spec, state)
            .await;
    }
    if let Some(ttl) = deps.retention {
        deps.store.expire_debate(id, ttl).await?;
    }
    deps.store.unmark_running(id).await?;
    Ok(())
}

/// [`DebateActor`]'s `post_stop`: stop the ticks, release the lease.
async fn stop(state: &mut DebateActorState) -> Result<(), ActorProcessingErr> {
    {
        if state.resting {
            // Its lease and its place in the registry stay: the supervisor holds it.
            return Ok(());
        }
        if !state.stopping {
            // Given up without settling (lease lost, failure): no longer counted here.
            parley_telemetry::metrics()
                .debate_released(metrics_status(state.machine.state().status));
        }
        let id = state.machine.id().to_string();
        let _ = state.deps.store.release_lease(&id, &state.deps.owner).await;
        Ok(())
    }
}

/// [`DebateActor`]'s `handle`.
async fn handle(
    myself: ActorRef<DebateMsg>,
    msg: DebateMsg,
    state: &mut DebateActorState,
) -> Result<(), ActorProcessingErr> {
    {
        if state.resting {
            match msg {
                DebateMsg::Rested => myself.stop(Some("at rest".into())),
                DebateMsg::Tick(_) => {}
                msg => {
                    let id = state.machine.id().to_string();
                    let _ = state.sup.cast(SupervisorMsg::Route { id, msg });
                }
            }
            return Ok(());
        }
        if !matches!(msg, DebateMsg::Tick(_)) {
            state.active_at = std::time::Instant::now();
        }
        if state.stopping {
            msg.refuse_releasing();
            return Ok(());
        }
        if !matches!(msg, DebateMsg::Tick(_)) && state.renewed_at.elapsed() >= state.deps.poll_every
        {
            let id = state.machine.id().to_string();
            let ttl = state.deps.lease_ttl.as_millis() as u64;
            if !state
                .deps
                .store
                .renew_lease(&id, &state.deps.owner, ttl)
                .await?
            {
                tracing::warn!(debate = %id, "lease lost; stopping");
                myself.stop(Some("lease lost".into()));
                msg.refuse_releasing();
                return Ok(());
            }
            state.renewed_at = std::time::Instant::now();
        }
        match msg {
            DebateMsg::Kick => {
                // A pending cancel wins over everything, before anything is re-dispatched.
                let id = state.machine.id().to_string();
                if matches!(state.follow_up, Some(Input::Cancel))
                    || state.deps.store.cancel_requested(&id).await?
                {
                    state.follow_up = None;
                    // The previous owner's last events, if it could publish them (best effort:
                    // the cancel must not depend on it).
                    if let Err(e) = state.publish_outbox().await {
                        tracing::warn!(debate = %id, error = %e, "cannot publish the previous owner's last events");
                    }
                    state.apply(&myself, Input::Cancel).await?;
                    return Ok(());
                }
                // The previous owner may have died between checkpoint and publish.
                state.publish_outbox().await?;
                // Resume and every result stored meanwhile: one transition, one checkpoint
                // (a checkpoint per stored result would make an adoption of a large debate
                // cost as many full-state writes as it has results).
                let before = state.machine.state().status;
                let now = Utc::now();
                let mut effects = state.machine.handle(Input::Resume, now);
                let results = state.deps.store.results(&id).await?;
                let mut fields: Vec<&String> = results.keys().collect();
                fields.sort();
                for f in fields {
                    let r = &results[f];
                    if state.wants(r, None, Noise::Resuming) {
                        state.learn(r);
                        effects
                            .extend(state.machine.handle(Input::Result(bounded(r.clone())), now));
                    }
                }
                // A dispatch the batch answered itself (or superseded) need not go out.
                let machine = &state.machine;
                effects.retain(|e| match e {
                    Effect::Dispatch(t) => {
                        machine.in_flight().any(|id| id == t.id)
                            && machine.state().engine.attempts.get(&t.id) == Some(&t.attempt)
                    }
                    _ => true,
                });
                state
                    .commit(&myself, effects, InputKind::Other, before)
                    .await?;
                if state.stopping {
                    return Ok(());
                }
                if let Some(input) = state.follow_up.take() {
                    if !state.stopping {
                        state.apply(&myself, input).await?;
                    }
                }
            }
            DebateMsg::ResultReady { task_id, attempt } => {
                let id = state.machine.id().to_string();
                match state.deps.store.result_of(&id, &task_id, attempt).await {
                    Ok(Some(r)) => {
                        if state.wants(&r, Some((&task_id, attempt)), Noise::Notified) {
                            state.learn(&r);
                            state.apply(&myself, Input::Result(bounded(r))).await?;
                        }
                    }
                    Ok(None) => drop_result(
                        &id,
                        &task_id,
                        attempt,
                        DropReason::Missing,
                        "a notification with no stored result behind it",
                    ),
                    // An undecodable record is not a reason to stop the debate.
                    Err(parley_cluster::redis_store::RedisStoreError::Decode { .. }) => {
                        drop_result(
                            &id,
                            &task_id,
                            attempt,
                            DropReason::Mismatch,
                            "the stored result cannot be decoded",
                        )
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            DebateMsg::Tick(kept) => {
                if tick(&myself, state, kept).await? {
                    state.maybe_rest(&myself);
                }
            }
            DebateMsg::Rested => {}
            DebateMsg::HandedBack {
                task_id,
                attempt,
                delay_ms,
            } => {
                let until = Utc::now()
                    + chrono::Duration::milliseconds(
                        i64::try_from(delay_ms).unwrap_or(i64::MAX / 2),
                    );
                state.machine.extend_deadline(&task_id, attempt, until);
            }
            DebateMsg::Lost { task_id, attempt } => {
                if state.attempt_of(&task_id) == attempt
                    && state.machine.in_flight().any(|t| t == task_id)
                {
                    let reason = format!(
                        "attempt {attempt} was delivered {} times without an answer (dead letter)",
                        parley_cluster::streams::MAX_DELIVER
                    );
                    state
                        .apply(
                            &myself,
                            Input::Lost {
                                task_id,
                                attempt,
                                reason,
                            },
                        )
                        .await?;
                }
            }
            DebateMsg::SecretMissing { task_id, attempt } => {
                // Only for an attempt this actor waits for: anything else is noise (or a
                // worker credential probing); restoring never replaces a secret.
                if state.attempt_of(&task_id) == attempt
                    && state.machine.in_flight().any(|t| t == task_id)
                {
                    let id = state.machine.id().to_string();
                    match state
                        .deps
                        .store
                        .restore_dispatch_secret(&id, &state.secret)
                        .await
                    {
                        Ok(true) => {
                            tracing::warn!(debate = %id, task = %task_id, "the debate's dispatch secret was missing in Redis; restored it from the coordinator's copy")
                        }
                        Ok(false) => {
                            tracing::debug!(debate = %id, task = %task_id, "a worker reported a missing dispatch secret; it is there")
                        }
                        Err(e) => {
                            tracing::warn!(debate = %id, error = %e, "cannot restore the debate's dispatch secret")
                        }
                    }
                }
            }
            DebateMsg::RetryDue(task_id) => {
                state.apply(&myself, Input::RetryDue(task_id)).await?;
            }
            DebateMsg::Retry(reply) => {
                let status = state.machine.state().status;
                if !matches!(status, DebateStatus::Failed | DebateStatus::Running) {
                    let _ = reply.send(Err(format!(
                        "debate is {}; only a failed or running debate can be retried",
                        status.as_str()
                    )));
                    return Ok(());
                }
                let r = state.apply(&myself, Input::Retry).await;
                let _ = reply.send(r.as_ref().map(|_| ()).map_err(|e| e.to_string()));
                r?;
            }
            DebateMsg::Cancel(reply) => {
                let r = state.apply(&myself, Input::Cancel).await;
                let _ = reply.send(r.as_ref().map(|_| ()).map_err(|e| e.to_string()));
                r?;
            }
            DebateMsg::Answer { answers, reply } => {
                if let Err(e) = state.machine.check_answers(&answers) {
                    let _ = reply.send(Err(AnswerRefusal::Refused(e)));
                    return Ok(());
                }
                let r = state.apply(&myself, Input::Answers(answers)).await;
                let remaining =
                    parley_protocol::pending_clarifications(&state.machine.state().clarifications)
                        .iter()
                        .map(|g| g.items.len())
                        .sum();
                let _ = reply.send(
                    r.as_ref()
                        .map(|_| remaining)
                        .map_err(|e| AnswerRefusal::Other(e.to_string())),
                );
                r?;
            }
            DebateMsg::Steer { steer, reply } => {
                if let Err(e) = state.machine.check_steer(&steer) {
                    let _ = reply.send(Err(SteerRefusal::Refused(e)));
                    return Ok(());
                }
                let r = state.apply(&myself, Input::Steer(steer)).await;
                let _ = reply.send(
                    r.as_ref()
                        .map(|_| ())
                        .map_err(|e| SteerRefusal::Other(e.to_string())),
                );
                r?;
            }
            DebateMsg::Contribute {
                contribution,
                reply,
            } => {
                let task = match state.machine.check_contribution(&contribution) {
                    Ok(task) => task,
                    Err(e) => {
                        let _ = reply.send(Err(ContributeRefusal::Refused(e)));
                        return Ok(());
                    }
                };
                let r = state.apply(&myself, Input::Contribute(contribution)).await;
                let _ = reply.send(
                    r.as_ref()
                        .map(|_| task)
                        .map_err(|e| ContributeRefusal::Other(e.to_string())),
                );
                r?;
            }
        }
        Ok(())
    }
}

/// A tick: the lease (renewed by the supervisor's pass, or here when the pass could not),
/// a pending cancel, the clarification timeout, results stored without a notice, the
/// clock. False when the debate is not this actor's to keep any more (lease lost,
/// cancelled).
async fn tick(
    myself: &ActorRef<DebateMsg>,
    state: &mut DebateActorState,
    kept: Option<(LeaseCheck, std::time::Instant)>,
) -> Result<bool, ActorProcessingErr> {
    let id = state.machine.id().to_string();
    let check = match kept {
        Some((c, _)) => c.held.then_some(c.cancel),
        None => {
            let ttl = state.deps.lease_ttl.as_millis() as u64;
            state
                .deps
                .store
                .renew_lease_checking_cancel(&id, &state.deps.owner, ttl)
                .await?
        }
    };
    match check {
        None => {
            tracing::warn!(debate = %id, "lease lost; stopping");
            myself.stop(Some("lease lost".into()));
            return Ok(false);
        }
        Some(true) => {
            tracing::info!(debate = %id, "cancel requested; cancelling");
            state.apply(myself, Input::Cancel).await?;
            return Ok(false);
        }
        Some(false) => {}
    }
    state.renewed_at = kept.map_or_else(std::time::Instant::now, |(_, at)| at);
    // Nobody answered the clarification questions in time: "NA" for each.
    if let Some(timeout) = state.deps.clarification_timeout {
        if state
            .machine
            .clarification_deadline(timeout)
            .is_some_and(|d| d <= Utc::now())
        {
            tracing::info!(debate = %id, "clarification timeout; answering NA");
            state.apply(myself, Input::ClarificationTimeout).await?;
            return Ok(true);
        }
    }
    let in_flight: Vec<String> = state.machine.in_flight().map(str::to_string).collect();
    // Polled when the stored results changed since the last poll (or nobody could tell).
    let results = kept.map(|(c, _)| c.results);
    let changed = results.is_none() || results != state.results_seen;
    state.results_seen = results;
    if !in_flight.is_empty() && changed {
        // Only the fields that can answer an in-flight attempt.
        let fields: Vec<String> = in_flight
            .iter()
            .flat_map(|t| [t.clone(), format!("{t}#{}", state.attempt_of(t))])
            .collect();
        let results = state.deps.store.results_of(&id, &fields).await?;
        for t in in_flight {
            if state.stopping {
                break;
            }
            let attempt = state.attempt_of(&t);
            let r = results
                .get(&t)
                .or_else(|| results.get(&format!("{t}#{attempt}")));
            if let Some(r) = r {
                if state.wants(r, Some((&t, attempt)), Noise::Resuming) {
                    tracing::info!(debate = %id, task = %t, "result found by polling");
                    state.learn(r);
                    state
                        .apply(myself, Input::Result(bounded(r.clone())))
                        .await?;
                }
            }
        }
    }
    // The clock: attempts past their deadline are sent again (or fail the node).
    let now = Utc::now();
    if !state.stopping && state.machine.next_deadline().is_some_and(|d| d <= now) {
        tracing::warn!(debate = %id, "a task passed its deadline; re-dispatching");
        state.apply(myself, Input::Tick).await?;
    }
    Ok(true)
}

impl DebateActorState {
    /// Puts the debate to rest when the actor has been idle for [`Deps::rest_after`] and
    /// the debate only waits (see `crate::supervisor`).
    fn maybe_rest(&mut self, myself: &ActorRef<DebateMsg>) {
        let Some(after) = self.deps.rest_after else {
            return;
        };
        if self.stopping || self.follow_up.is_some() || self.active_at.elapsed() < after {
            return;
        }
        let (Some(results), Some(runtime)) = (self.results_seen, self.machine.runtime()) else {
            return;
        };
        let clarification = self
            .deps
            .clarification_timeout
            .and_then(|t| self.machine.clarification_deadline(t));
        let wake_at = match (runtime.next_deadline(), clarification) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let rest = Box::new(Rest {
            version: self.version,
            runtime,
            results,
            wake_at,
        });
        let id = self.machine.id().to_string();
        if self
            .sup
            .cast(SupervisorMsg::Rest {
                id,
                actor: myself.get_id(),
                rest,
            })
            .is_ok()
        {
            self.resting = true;
        }
    }

    /// Publishes the events of the checkpoint's outbox the stream does not hold yet (see
    /// `EngineRecord::outbox` and [`unpublished`]).
    async fn publish_outbox(&self) -> Result<(), ActorProcessingErr> {
        let state = self.machine.state();
        let events = unpublished(&self.deps.js, &state.id, &state.engine.outbox).await?;
        for ack in publish_events(&self.deps, &events).await? {
            ack.await?;
        }
        Ok(())
    }

    fn attempt_of(&self, task_id: &str) -> u32 {
        self.machine
            .state()
            .engine
            .attempts
            .get(task_id)
            .copied()
            .unwrap_or(1)
    }

    /// Adds a result about to be applied to what the cluster's estimates learn from
    /// (`parley_cluster::redis_store::calibration`), in the background: a failed write
    /// costs samples, never the debate.
    fn learn(&self, r: &TaskResult) {
        if let Some((key, tokens)) =
            parley_protocol::calibration::sample_of_result(self.machine.spec(), r)
        {
            self.deps.samples.add(key, tokens);
        }
    }

    /// Whether to apply a result read from Redis (for `asked` = the task and attempt it was
    /// read for, if any): only one the machine waits for (see [`Machine::expects`]), and
    /// only a record that is what it claims to be. Drops are counted and, unless expected
    /// while resuming, logged as warnings.
    fn wants(&self, r: &TaskResult, asked: Option<(&str, u32)>, noise: Noise) -> bool {
        let id = self.machine.id();
        let ok = matches!(r.outcome, TaskOutcome::Ok(_));
        let consistent = r.debate_id == id
            && r.validate().is_ok()
            && asked
                .is_none_or(|(task, attempt)| r.task_id == task && (ok || r.attempt == attempt));
        let (task, attempt) = asked.unwrap_or((&r.task_id, r.attempt));
        if !consistent {
            drop_result(
                id,
                task,
                attempt,
                DropReason::Mismatch,
                "the stored record does not match the task it was read for",
            );
            return false;
        }
        let (reason, why) = match self.machine.expects(&r.task_id, r.attempt, ok) {
            Expectation::Wanted => return true,
            Expectation::NotDispatched => (
                DropReason::NotDispatched,
                "a result for a task this debate has not dispatched",
            ),
            Expectation::Finished => (DropReason::Finished, "the task already has its result"),
            Expectation::WrongAttempt => (
                DropReason::WrongAttempt,
                "a result for an attempt the debate is not waiting for",
            ),
        };
        let expected = matches!(noise, Noise::Resuming)
            && matches!(reason, DropReason::Finished | DropReason::WrongAttempt);
        if !expected {
            drop_result(id, &r.task_id, r.attempt, reason, why);
        }
        false
    }

    /// One transition: handle, checkpoint (CAS), perform the effects; stops the actor once
    /// the debate no longer runs.
    async fn apply(
        &mut self,
        myself: &ActorRef<DebateMsg>,
        input: Input,
    ) -> Result<(), ActorProcessingErr> {
        let input_kind = if matches!(input, Input::Retry) {
            InputKind::Retry
        } else {
            InputKind::Other
        };
        let before = self.machine.state().status;
        let effects = self.machine.handle(input, Utc::now());
        self.commit(myself, effects, input_kind, before).await
    }

    /// Checkpoints the machine (CAS) with `effects`' events as its outbox, then performs
    /// the effects; stops the actor once the debate no longer runs. `before`: the status
    /// before the input(s) that produced `effects`.
    async fn commit(
        &mut self,
        myself: &ActorRef<DebateMsg>,
        effects: Vec<Effect>,
        input_kind: InputKind,
        before: DebateStatus,
    ) -> Result<(), ActorProcessingErr> {
        let id = self.machine.id().to_string();
        self.active_at = std::time::Instant::now();
        self.machine.set_outbox(
            effects
                .iter()
                .filter_map(|e| match e {
                    Effect::Emit(event) => Some(event.clone()),
                    _ => None,
                })
                .collect(),
        );
        // Every dispatch carries its token (see `parley_cluster::dispatch`): the stored body
        // and the reference that goes on the stream alike.
        let mut effects = effects;
        for effect in &mut effects {
            if let Effect::Dispatch(task) = effect {
                task.dispatch_token = Some(parley_cluster::dispatch::token(
                    &self.secret,
                    &task.debate_id,
                    &task.id,
                    task.attempt,
                ));
            }
        }
        // Claim check: the task bodies go to Redis with the checkpoint (one script, only
        // if the compare-and-set holds), before their messages, which carry references.
        let bodies = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Dispatch(t) => Some(serde_json::to_string(t).map(|j| (t.message_id(), j))),
                _ => None,
            })
            .collect::<Result<Vec<_>, _>>()?;
        match self
            .deps
            .store
            .save_transition(
                self.machine.state(),
                Some(self.machine.round_revisions()),
                self.version,
                &bodies,
            )
            .await?
        {
            Some(v) => self.version = v,
            None => {
                myself.stop(Some("lost the checkpoint compare-and-set".into()));
                return Err(ActorError::LostCas(id).into());
            }
        }
        let mut acks = Vec::new();
        let mut events = Vec::new();
        for effect in effects {
            match effect {
                Effect::Dispatch(task) => {
                    let subject = parley_cluster::streams::tasks_subject(task.kind.worker());
                    let body = serde_json::to_vec(&task.to_ref())?;
                    let mut h = headers(&task.message_id());
                    let node = self.trace.node(task.round, task.kind.node());
                    parley_telemetry::inject_headers(&node.context(), &mut h);
                    let ack = self
                        .deps
                        .js
                        .publish_with_headers(subject, h, body.into())
                        .await?;
                    acks.push(ack);
                }
                Effect::Emit(event) => {
                    if let EventKind::RoundCompleted { round } = event.kind {
                        self.trace.round_completed(round);
                    }
                    events.push(event);
                }
                Effect::ScheduleRetry { task_id, delay_ms } => {
                    let me = myself.clone();
                    let delay = Duration::from_millis(parley_protocol::retry::jitter_ms(delay_ms));
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = me.cast(DebateMsg::RetryDue(task_id));
                    });
                }
            }
        }
        // The transition's events: one message.
        acks.extend(publish_events(&self.deps, &events).await?);
        for ack in acks {
            ack.await?;
        }
        let status = self.machine.state().status;
        if status == DebateStatus::AwaitingClarifications {
            // Suspended, not settled: the actor keeps the debate (and its lease) and waits.
        } else if status == DebateStatus::Running {
            // A retried debate needs an owner again if this replica dies, and its keys
            // no longer expire.
            if matches!(input_kind, InputKind::Retry) && before != DebateStatus::Running {
                self.deps.store.mark_running(&id).await?;
                self.deps.store.persist_debate(&id).await?;
            }
        } else if status != DebateStatus::Pending && self.follow_up.is_none() {
            // (With a follow-up pending, `Kick` is still resuming: the retry comes next.)
            self.stopping = true;
            self.trace.settled(status);
            parley_telemetry::metrics()
                .debate_status_changed(Some(metrics_status(before)), metrics_status(status));
            tracing::info!(debate = %id, status = status.as_str(), "debate settled; releasing it");
            self.deps.store.unmark_running(&id).await?;
            crate::decision_record::store(
                &self.deps.store,
                self.deps.record_signing_key.as_ref(),
                self.machine.spec(),
                self.machine.state(),
            )
            .await;
            if let Some(ttl) = self.deps.retention {
                self.deps.store.expire_debate(&id, ttl).await?;
            }
            self.deps.store.release_lease(&id, &self.deps.owner).await?;
            myself.stop(Some(format!("debate {}", status.as_str())));
        }
        Ok(())
    }
}

enum InputKind {
    Retry,
    Other,
}
/// Where a result to check came from: a worker's notification (every drop is news), or a
/// resume / poll (results of finished tasks and old failures are expected there).
#[derive(Debug, Clone, Copy)]
enum Noise {
    Notified,
    Resuming,
}

/// Counts and logs a result that is not applied.
fn drop_result(debate: &str, task: &str, attempt: u32, reason: DropReason, why: &str) {
    parley_telemetry::metrics().result_dropped(reason);
    tracing::warn!(
        debate,
        task = %preview(task, 200),
        attempt,
        reason = reason.as_str(),
        "dropping a result: {why}"
    );
}

/// The result with its error text cut to a few hundred characters: provider text is
/// outside input, and it goes into the state and the events.
fn bounded(mut r: TaskResult) -> TaskResult {
    if let TaskOutcome::Error(e) = &mut r.outcome {
        e.message = preview(&e.message, limits::MAX_ERROR_TEXT_CHARS + 200);
        if let Some(p) = &mut e.provider {
            *p = preview(p, limits::MAX_LABEL_BYTES);
        }
        // A provider's wait is clamped to an hour where it is read; keep it so.
        e.retry_after_ms = e.retry_after_ms.map(|ms| ms.min(3_600_000));
    }
    r
}
