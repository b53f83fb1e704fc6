//! The debate state machine: pure, no I/O.
//!
//! [`Machine::handle`] takes an [`Input`] (start, a task result, a retry timer, a user retry,
//! a cancel, a resume after a restart, the clock) and returns the [`Effect`]s the driver must
//! perform (dispatch tasks, schedule a retry, emit events). The driver checkpoints
//! [`Machine::state`] after every call that changed it.
//!
//! # Task deadlines
//! With [`Machine::set_task_deadline_margin`] (the distributed driver sets it; the embedded
//! driver bounds each call itself), every dispatched attempt gets a deadline: its
//! `timeout_ms` (capped at [`MAX_TASK_TIMEOUT`]) plus the margin, extended by the time a
//! worker hands the task back to the queue for its rate limit ([`Machine::extend_deadline`]).
//! [`Input::Tick`] carries the time: an attempt past its deadline, or one the transport
//! reports dead-lettered ([`Input::Lost`]), counts as a failed attempt of kind
//! `undelivered` — re-dispatched as a new attempt (a new message id) while the node's retry
//! budget lasts, else the node fails. Deadlines are not checkpointed: a resume re-dispatches
//! what was in flight and starts their clocks again.
//!
//! # Clarifications
//! With `debate.interactiveClarifications` (and a non-zero `clarificationsMaxPerAgent` and
//! `clarificationsMaxIterations`), round 1 waits for a clarification phase. Each iteration
//! asks every agent once (`Clarify(i, k)`, task id round = iteration k); once every agent
//! has replied, its new questions (de-duplicated per agent against everything it asked
//! before, cut to `clarificationsMaxPerAgent`) are either none — the phase ends and round 1
//! opens — or the debate suspends: status `awaiting_clarifications`, nothing in flight, no
//! deadline, a `clarificationsRequested` event. [`Input::Answers`] (checked first with
//! [`Machine::check_answers`]; an empty answer is `"NA"`) records answers; when every
//! question is answered the next iteration starts (agents see the earlier questions and
//! answers), up to `clarificationsMaxIterations`, then round 1 opens.
//! [`Input::ClarificationTimeout`] answers every open question `"NA"`. The phase's progress
//! lives in the state (`clarifications`, `clarificationIterations`, `engine`), so a
//! suspended debate is a checkpoint like any other. Every later task carries the answered
//! clarifications ([`TaskInput::clarifications`](parley_protocol::TaskInput)).
//!
//! # Steering
//! [`Input::Steer`] (checked first with [`Machine::check_steer`]) applies a user's command
//! to a running debate and records it in `state.steering` (who, when, which round) with a
//! `steered` event. `pause`: nothing new is dispatched (results of calls in flight are
//! recorded; rounds open and refinements carry over, which needs no call) until `resume`.
//! `guide`: a note every task dispatched from then on carries (`TaskInput::guidance`).
//! `stop`: like a budget's `synthesizeNow`, only the synthesis is planned, from what
//! exists, once nothing is in flight. `extend`: the round limit is one higher (at most
//! `limits::MAX_ROUNDS`), refused once the synthesis has started. See `steering`.
//!
//! # Human participants
//! An agent with `provider: "human"` takes its turns through a person: its tasks open in
//! `state.human` instead of being dispatched, wait (durably) for
//! [`Input::Contribute`] or their deadline, and cost nothing. See `human`.
//!
//! # Scheduling
//! The machine keeps no phase cursor. After every input it re-derives, from the
//! [`DebateState`] alone, which tasks have their inputs and no output yet, and dispatches
//! those not already in flight. That gives dataflow scheduling — a critique of proposal j
//! starts when proposal j exists, agent i's refinement when every critique of i has arrived,
//! and with `fixed` termination round r+1 starts for agent i as soon as i's refinement of
//! round r exists — and makes resumption trivial: a restarted coordinator rebuilds the
//! machine from the checkpoint, feeds in the results workers stored meanwhile, and
//! dispatches whatever is still missing with the same task ids.
//!
//! The task graph is one table of node kinds, `graph::NODES`: each entry gives its
//! executor, its scope (per agent, per critique pair, the judge's), its inputs, what enables
//! it, when it is done, which task ids are valid, what its result records and what the
//! budget gives up without it. Planning, parsing task ids, building tasks, recording results
//! and degrading under a budget all go through it; the engine here (attempts, retries,
//! deadlines, budgets, events) is the same for every kind.
//!
//! Dependencies (round r, agents i ≠ j):
//! - `Summarize(i, r)`, r ≥ 2: needs `Refine(i, r-1)`; only when i's history exceeds the
//!   summarization threshold.
//! - `Propose(i, 1)`: no inputs. `Propose(i, r ≥ 2)`: the carried-over `Refine(i, r-1)`
//!   (no LLM call); an empty refinement falls back to an LLM proposal with a warning.
//! - `Critique(i→j, r)`, only for the pairs `debate.critique` plans (every pair, a ring, or
//!   seeded random draws; see `critique_pairs`): `Propose(j, r)` and i's summary (if due).
//! - `Refine(i, r)`: `Propose(i, r)`, every planned `Critique(k→i, r)`, i's summary (if due).
//! - `Evaluate(r)` (convergence/quality only): every `Refine(·, r)`.
//! - `Verdict(r)` (`terminationCondition.type: "verdict"`, r below the cap): every
//!   `Refine(·, r)`; round r is the last when it says done with confidence ≥ the threshold.
//! - `Verdict(0)` (`debate.mode: "adaptive"`): every `Propose(·, 1)`; round 1's critiques wait
//!   for it. Done at the threshold: the short path (`Synthesize` from the proposals at once);
//!   otherwise the full debate. Recorded in `state.adaptive` with the reason.
//! - `Embed(r)` (`terminationCondition.type: "similarity"`, r below the cap): every
//!   `Refine(·, r)`; the judge's worker embeds round r's refinements and round r-1's with
//!   `debate.embeddings` (no chat call) and returns each agent's self-similarity and the
//!   mean across agents (`rounds[r].similarity`); round r is the last when every agent's
//!   self-similarity reaches the threshold (never in round 1, which has no round before).
//! - `Vote(i, R)` (`synthesisMethod: "voting"`, R the final round): the final round complete;
//!   the tally once every agent has voted (`state.voting`).
//! - `JudgeSummarize`, then `Synthesize`: the final round complete (and, voting, the
//!   tally). The synthesis carries the last verdict's open issues and the vote; open issues
//!   the judge leaves out are added to the solution's `unresolvedDisagreements`.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use parley_protocol::{
    AgentConfig, Answer, DebateEvent, DebateSpec, DebateState, DebateStatus, Node, Task, TaskKind,
    TaskResult, SCHEMA_VERSION,
};

mod adaptive;
mod budget;
mod clarifications;
mod deadlines;
mod events;
mod graph;
mod human;
mod lifecycle;
mod results;
mod revisions;
mod rounds;
mod steering;
mod summaries;
#[cfg(test)]
mod tests;
mod voting;

pub use clarifications::AnswerError;
use deadlines::earliest_deadline;
pub use deadlines::MAX_TASK_TIMEOUT;
pub use human::{Contribute, ContributeError};
pub use steering::{Steer, SteerError};

/// What drives the machine.
// Inputs and effects are moved once from producer to consumer, never stored in bulk:
// boxing the large variants would only add allocations.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Input {
    /// A new debate: emit the start events and dispatch round 1.
    Start,
    /// A worker's (or the embedded runner's) answer to a task.
    Result(TaskResult),
    /// The backoff of a failed task has elapsed: dispatch its next attempt.
    RetryDue(String),
    /// The user asked to resume a failed debate from its failed node.
    Retry,
    /// The user cancelled the debate.
    Cancel,
    /// The machine was rebuilt from a checkpoint (coordinator restart or takeover):
    /// everything that was in flight is dispatched again with the same attempt number.
    Resume,
    /// The clock: attempts past their deadline fail as `undelivered` (see the module docs).
    Tick,
    /// The transport gave up on this attempt's message (it exhausted its deliveries).
    Lost {
        task_id: String,
        attempt: u32,
        reason: String,
    },
    /// The driver cannot advance the debate (its actor keeps failing): fail it with this
    /// reason. `retry` resumes it like any failed debate.
    Abort(String),
    /// The user's answers to clarification questions (check them first with
    /// [`Machine::check_answers`]: answers that do not pass change nothing).
    Answers(Vec<Answer>),
    /// Nobody answered in time (the operator's clarification timeout): every open
    /// question is answered `"NA"` and the debate goes on.
    ClarificationTimeout,
    /// A user's steering command (check it first with [`Machine::check_steer`]: one that
    /// does not pass changes nothing).
    Steer(Steer),
    /// A person's answer to a human participant's open task (check it first with
    /// [`Machine::check_contribution`]: one that does not pass changes nothing).
    Contribute(Contribute),
}

/// Whether a stored result is one the machine waits for ([`Machine::expects`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    /// Apply it: a task in flight, and an attempt that was dispatched (a success of an
    /// earlier attempt still counts; a failure only of the current one).
    Wanted,
    /// A task this debate never issues, or has not dispatched (yet).
    NotDispatched,
    /// The task already has its result.
    Finished,
    /// An attempt that was never dispatched, or a failure of an attempt that is not the
    /// current one.
    WrongAttempt,
}

/// What the driver must do.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Dispatch(Task),
    /// Feed `Input::RetryDue(task_id)` back after `delay_ms` (plus jitter).
    ScheduleRetry {
        task_id: String,
        delay_ms: u64,
    },
    Emit(DebateEvent),
}

/// What [`Machine::handle`] does once an input's method returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Dispatch what the new state enables, drop stale deadlines, stamp the time.
    Advance,
    /// Nothing more: the input did not apply (e.g. a retry of a debate that is not failed).
    Stop,
}

/// A task the plan wants, before it becomes a [`Task`] message.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Planned {
    round: u32,
    kind: TaskKind,
    /// Index into the active agents; `None` for judge tasks.
    agent: Option<usize>,
    target: Option<usize>,
}

/// One debate's state machine.
#[derive(Debug, Clone)]
pub struct Machine {
    spec: DebateSpec,
    /// Enabled agents in configuration order (indices used by the plan).
    agents: Vec<AgentConfig>,
    state: DebateState,
    /// Tasks dispatched and not yet answered (not checkpointed: a resume re-dispatches).
    in_flight: BTreeMap<String, Planned>,
    /// Failed tasks waiting for their backoff to elapse.
    backing_off: BTreeSet<String>,
    /// (round, node) pairs already announced with `NodeEntered`.
    entered: BTreeSet<(u32, Node)>,
    /// The node of the last task dispatched or answered: the phase progress shows while
    /// nothing is in flight (between a result and the dispatches it enables).
    last_node: Option<Node>,
    /// Added to each attempt's timeout to make its deadline; `None`: no deadlines.
    deadline_margin: Option<chrono::Duration>,
    /// Deadline of each in-flight attempt (entries of answered tasks are dropped lazily).
    deadlines: BTreeMap<String, DateTime<Utc>>,
    /// When a user's retry of this running debate last re-sent its attempts (not
    /// checkpointed): another within [`RUNNING_RETRY_INTERVAL_SECS`] is a no-op.
    last_running_retry: Option<DateTime<Utc>>,
    /// Prices and the completion cap budgets reserve with (operator settings: not
    /// checkpointed, set again by the driver).
    pricing: crate::budget::Pricing,
    /// Participant id → the model it really runs on, where that differs from its
    /// configured one (e.g. embedded, falling back to the local model). Operator
    /// knowledge, not checkpointed; used for the independence warnings.
    effective_models: BTreeMap<String, String>,
    /// Agents' history lengths already counted (derived from the state, not
    /// checkpointed).
    history_lengths: summaries::HistoryLengths,
    /// A revision per round: which rounds each input changed (not checkpointed).
    revisions: revisions::Revisions,
}

/// What a machine knows beyond its checkpoint: the attempts in flight and their deadlines,
/// the nodes announced, the last user retry. A debate actor that goes to rest keeps this
/// (a few hundred bytes) instead of the machine, and a machine rebuilt from the same
/// checkpoint with it ([`Machine::restore_runtime`]) carries on as if it had never been
/// dropped: nothing is dispatched again, no event is emitted.
#[derive(Debug, Clone, Default)]
pub struct Runtime {
    in_flight: BTreeMap<String, Planned>,
    entered: BTreeSet<(u32, Node)>,
    last_node: Option<Node>,
    deadlines: BTreeMap<String, DateTime<Utc>>,
    last_running_retry: Option<DateTime<Utc>>,
    /// The earliest deadline of an open human task (checkpointed; kept here so a debate
    /// at rest wakes for it).
    human_deadline: Option<DateTime<Utc>>,
}

impl Runtime {
    /// The earliest deadline of an attempt in flight or of an open human task.
    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        let calls = earliest_deadline(&self.deadlines, &self.in_flight);
        match (calls, self.human_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A user's `retry` of a running debate re-sends its outstanding attempts at most once in
/// this many seconds; retries in between are no-ops, so repeating `retry` cannot multiply
/// a debate's calls (each one re-sends at most what is in flight, once a minute).
pub const RUNNING_RETRY_INTERVAL_SECS: i64 = 60;

impl Machine {
    /// A new debate in `pending` state.
    pub fn new(id: String, spec: DebateSpec, now: DateTime<Utc>) -> Self {
        let state = DebateState {
            schema_version: SCHEMA_VERSION,
            id,
            problem: spec.problem.clone(),
            context: spec.context.clone(),
            status: DebateStatus::Pending,
            current_round: 0,
            clarifications: Vec::new(),
            clarification_iterations: 0,
            rounds: Vec::new(),
            judge_summary: None,
            final_solution: None,
            synthesis_metadata: None,
            prompt_sources: spec.prompt_sources.clone(),
            error: None,
            spend: None,
            budget: None,
            engine: Default::default(),
            user_feedback: None,
            adaptive: None,
            voting: None,
            steering: Default::default(),
            human: Default::default(),
            forked_from: None,
            owner: spec.owner.clone(),
            webhooks: spec.webhooks.clone(),
            created_at: now,
            updated_at: now,
        };
        Self::from_checkpoint(spec, state)
    }

    /// Rebuilds the machine from a stored spec and state (follow with [`Input::Resume`]).
    pub fn from_checkpoint(spec: DebateSpec, state: DebateState) -> Self {
        let agents = spec.active_agents().cloned().collect();
        let revisions = revisions::Revisions::new(state.rounds.len());
        Self {
            spec,
            agents,
            state,
            in_flight: BTreeMap::new(),
            backing_off: BTreeSet::new(),
            entered: BTreeSet::new(),
            last_node: None,
            deadline_margin: None,
            deadlines: BTreeMap::new(),
            last_running_retry: None,
            pricing: Default::default(),
            effective_models: BTreeMap::new(),
            history_lengths: Default::default(),
            revisions,
        }
    }

    /// The models participants really run on where they differ from the configured ones
    /// (participant id → model name). Set it before [`Input::Start`].
    pub fn set_effective_models(&mut self, models: BTreeMap<String, String>) {
        self.effective_models = models;
    }

    /// Keeps `events` (the effects of the transition just made) in the checkpoint's outbox.
    pub fn set_outbox(&mut self, events: Vec<parley_protocol::DebateEvent>) {
        self.state.engine.outbox = events;
    }

    /// Records the W3C `traceparent` of the debate's root span in the checkpoint, so a
    /// coordinator that resumes the debate continues its trace. Kept once set.
    pub fn set_traceparent(&mut self, traceparent: String) {
        self.state.engine.traceparent.get_or_insert(traceparent);
    }

    pub fn state(&self) -> &DebateState {
        &self.state
    }

    pub fn spec(&self) -> &DebateSpec {
        &self.spec
    }

    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// Task ids dispatched and not yet answered.
    pub fn in_flight(&self) -> impl Iterator<Item = &str> {
        self.in_flight.keys().map(String::as_str)
    }

    /// True once nothing more will happen without outside input (done, failed, cancelled)
    /// and no task is still running.
    pub fn is_settled(&self) -> bool {
        self.state.status != DebateStatus::Running
            && self.state.status != DebateStatus::Pending
            && self.in_flight.is_empty()
    }

    /// Applies one input; returns the effects to perform, in order. Each input goes to one
    /// method; unless that method says the input changed nothing more (`After::Stop`),
    /// the machine then dispatches whatever the new state enables.
    pub fn handle(&mut self, input: Input, now: DateTime<Utc>) -> Vec<Effect> {
        #[cfg(debug_assertions)]
        let before = self.rounds_before();
        let fx = self.handle_input(input, now);
        self.settle_revisions(
            #[cfg(debug_assertions)]
            before,
        );
        fx
    }

    fn handle_input(&mut self, input: Input, now: DateTime<Utc>) -> Vec<Effect> {
        let mut fx = Vec::new();
        let after = match input {
            Input::Start => self.start(now, &mut fx),
            Input::Answers(answers) => self.on_answers(answers, now, &mut fx),
            Input::ClarificationTimeout => self.on_clarification_timeout(now, &mut fx),
            Input::Result(result) => self.on_result(result, now, &mut fx),
            Input::RetryDue(task_id) => self.on_retry_due(&task_id),
            Input::Retry => self.retry(now, &mut fx),
            Input::Cancel => self.cancel(now, &mut fx),
            Input::Tick => self.expire_deadlines(now, &mut fx),
            Input::Lost {
                task_id,
                attempt,
                reason,
            } => self.on_lost(&task_id, attempt, reason, now, &mut fx),
            Input::Abort(reason) => self.abort(reason, now, &mut fx),
            Input::Resume => self.resume(now, &mut fx),
            Input::Steer(steer) => self.on_steer(steer, now, &mut fx),
            Input::Contribute(c) => self.on_contribute(c, now, &mut fx),
        };
        if after == After::Stop {
            return fx;
        }
        self.advance(now, &mut fx);
        if self.state.status != DebateStatus::Running {
            // Failed, cancelled, completed: no person is waited for (a retry opens anew).
            self.withdraw_human_tasks(now, &mut fx);
        }
        let in_flight = &self.in_flight;
        self.deadlines.retain(|id, _| in_flight.contains_key(id));
        self.state.updated_at = now;
        fx
    }

    fn executor(&self, p: &Planned) -> &AgentConfig {
        match p.agent {
            Some(i) => &self.agents[i],
            None => &self.spec.judge,
        }
    }

    fn attempts(&self, task_id: &str) -> u32 {
        self.state
            .engine
            .attempts
            .get(task_id)
            .copied()
            .unwrap_or(0)
    }
}
