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
    limits, pending_clarifications, task_id, AdaptivePath, AdaptiveRecord, AgentClarifications,
    AgentConfig, Answer, ClarificationItem, Contribution, ContributionMetadata, ContributionType,
    CritiqueTopology, DebateEvent, DebateFailure, DebateMode, DebateRound, DebateSpec, DebateState,
    DebateStatus, DroppedCritique, EventKind, Node, OnAgentFailure, Progress, RoundSimilarity,
    RoundVerdict, Solution, SummarizationConfig, Task, TaskError, TaskKind, TaskOutcome,
    TaskOutput, TaskResult, TerminationType, Verdict, Vote, VotingRecord, SCHEMA_VERSION,
};

mod graph;
use graph::Phase;

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
}

/// Why answers to clarification questions were refused (nothing was recorded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("debate {id} is {status}; only a debate in awaiting_clarifications takes answers")]
    NotWaiting { id: String, status: &'static str },
    #[error("no answers given")]
    Empty,
    #[error("question {0:?} is answered twice in this request")]
    Duplicate(String),
    #[error("unknown question id(s) {unknown:?}; the open questions are {open:?}")]
    Unknown {
        unknown: Vec<String>,
        open: Vec<String>,
    },
    #[error("question(s) {0:?} already answered")]
    AlreadyAnswered(Vec<String>),
}

impl AnswerError {
    /// A conflict with the debate's state (not waiting, already answered), as opposed to
    /// a bad request.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::NotWaiting { .. } | Self::AlreadyAnswered(_))
    }
}

/// The longest task timeout a deadline counts (a larger `timeoutMs` is treated as this).
pub const MAX_TASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

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
}

impl Runtime {
    /// The earliest deadline of an attempt in flight.
    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        earliest_deadline(&self.deadlines, &self.in_flight)
    }
}

/// The earliest of `deadlines` whose task is still in flight.
fn earliest_deadline(
    deadlines: &BTreeMap<String, DateTime<Utc>>,
    in_flight: &BTreeMap<String, Planned>,
) -> Option<DateTime<Utc>> {
    deadlines
        .iter()
        .filter(|(id, _)| in_flight.contains_key(*id))
        .map(|(_, d)| *d)
        .min()
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
            owner: spec.owner.clone(),
            created_at: now,
            updated_at: now,
        };
        Self::from_checkpoint(spec, state)
    }

    /// Rebuilds the machine from a stored spec and state (follow with [`Input::Resume`]).
    pub fn from_checkpoint(spec: DebateSpec, state: DebateState) -> Self {
        let agents = spec.active_agents().cloned().collect();
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
        }
    }

    /// The models participants really run on where they differ from the configured ones
    /// (participant id → model name). Set it before [`Input::Start`].
    pub fn set_effective_models(&mut self, models: BTreeMap<String, String>) {
        self.effective_models = models;
    }

    /// The operator's prices and completion cap, for a debate with a budget (see
    /// [`crate::budget`]). Set it before [`Input::Start`] or [`Input::Resume`].
    pub fn set_pricing(&mut self, pricing: crate::budget::Pricing) {
        self.pricing = pricing;
    }

    /// What a debate with a budget must be able to reserve before its first call: the
    /// synthesis held back, and every agent's round-1 proposal. A budget below it is
    /// refused at submit (with these figures).
    pub fn minimum_reservation(&self) -> parley_protocol::Amount {
        let mut total = self.synthesis_hold();
        for i in 0..self.agents.len() {
            let p = Planned {
                round: 1,
                kind: TaskKind::Propose,
                agent: Some(i),
                target: None,
            };
            let id = self.task_id_of(&p);
            total = total.plus(self.pricing.worst_case(&self.build_task(&p, id, 1)));
        }
        total
    }

    /// The synthesis's worst case: its transcript is at most
    /// [`Self::synthesis_transcript_cap`] bytes under a budget.
    fn synthesis_hold(&self) -> parley_protocol::Amount {
        let p = Planned {
            round: self.spec.debate.round_cap(),
            kind: TaskKind::Synthesize,
            agent: None,
            target: None,
        };
        let id = self.task_id_of(&p);
        let mut task = self.build_task(&p, id, 1);
        task.input.transcript = Some("x".repeat(self.synthesis_transcript_cap()));
        // The most a verdict's open issues and a vote's tally can add (4 bytes a char).
        if self.termination() == TerminationType::Verdict || self.adaptive() {
            task.input.open_issues =
                vec!["x".repeat(4 * limits::MAX_OPEN_ISSUE_CHARS); limits::MAX_OPEN_ISSUES];
        }
        if self.spec.debate.voting() {
            let per_vote =
                4 * (limits::MAX_VOTE_REASON_CHARS + 200) + 2 * limits::MAX_ID_BYTES + 64;
            task.input.vote_result = Some("x".repeat(256 + self.agents.len() * per_vote));
        }
        self.pricing.worst_case(&task)
    }

    /// Bytes of transcript a synthesis under a budget reads: the judge's summarization
    /// threshold or summary length, whichever is larger (the newest text is kept).
    fn synthesis_transcript_cap(&self) -> usize {
        let s = self.summarization_for(None);
        s.threshold
            .max(s.max_length)
            .clamp(1_000, limits::MAX_SUMMARY_LENGTH)
    }

    /// Gives every attempt dispatched from now on a deadline: its timeout plus `margin`
    /// (`None`: no deadlines, the embedded driver's choice).
    pub fn set_task_deadline_margin(&mut self, margin: Option<std::time::Duration>) {
        self.deadline_margin = margin
            .map(|m| chrono::Duration::from_std(m).unwrap_or_else(|_| chrono::Duration::days(1)));
    }

    /// What this machine keeps beyond its checkpoint, for a debate going to rest; `None`
    /// when it cannot rest: not running nor waiting for answers, or a failed task backing
    /// off (its retry is a timer of the driver's).
    pub fn runtime(&self) -> Option<Runtime> {
        let quiet = matches!(
            self.state.status,
            DebateStatus::Running | DebateStatus::AwaitingClarifications
        ) && self.backing_off.is_empty();
        quiet.then(|| Runtime {
            in_flight: self.in_flight.clone(),
            entered: self.entered.clone(),
            last_node: self.last_node,
            deadlines: self.deadlines.clone(),
            last_running_retry: self.last_running_retry,
        })
    }

    /// Puts back what [`Machine::runtime`] kept, into a machine rebuilt from the same
    /// checkpoint (instead of [`Input::Resume`]).
    pub fn restore_runtime(&mut self, runtime: Runtime) {
        self.in_flight = runtime.in_flight;
        self.entered = runtime.entered;
        self.last_node = runtime.last_node;
        self.deadlines = runtime.deadlines;
        self.last_running_retry = runtime.last_running_retry;
        self.backing_off.clear();
    }

    /// The earliest deadline of an attempt in flight: when the driver should feed
    /// [`Input::Tick`].
    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        earliest_deadline(&self.deadlines, &self.in_flight)
    }

    /// A worker handed `attempt` of `task_id` back to the queue until `until` (rate limit):
    /// its deadline moves to at least `until` plus the task's timeout and the margin. Only
    /// the in-flight attempt counts; deadlines are not checkpointed, so no checkpoint is due.
    pub fn extend_deadline(&mut self, task_id: &str, attempt: u32, until: DateTime<Utc>) {
        if self.attempts(task_id) != attempt || !self.in_flight.contains_key(task_id) {
            return;
        }
        let Some(budget) = self.deadline_budget(task_id) else {
            return;
        };
        let Some(candidate) = until.checked_add_signed(budget) else {
            return;
        };
        if let Some(d) = self.deadlines.get_mut(task_id) {
            if candidate > *d {
                *d = candidate;
            }
        }
    }

    /// An attempt's timeout (capped) plus the margin, when deadlines are on.
    fn deadline_budget(&self, task_id: &str) -> Option<chrono::Duration> {
        let margin = self.deadline_margin?;
        let planned = self.in_flight.get(task_id)?;
        let timeout_ms = self
            .spec
            .debate
            .retry
            .for_node(planned.kind.node().as_str())
            .timeout_ms
            .min(MAX_TASK_TIMEOUT.as_millis() as u64);
        Some(chrono::Duration::milliseconds(timeout_ms as i64) + margin)
    }

    /// Fails every in-flight attempt whose deadline is at or before `now`.
    fn expire_deadlines(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        let due: Vec<(String, DateTime<Utc>)> = self
            .deadlines
            .iter()
            .filter(|(id, d)| **d <= now && self.in_flight.contains_key(*id))
            .map(|(id, d)| (id.clone(), *d))
            .collect();
        for (id, _) in due {
            let attempt = self.attempts(&id);
            let waited = self
                .deadline_budget(&id)
                .map_or(0, |b| b.num_seconds().max(0));
            let message = format!(
                "no answer to attempt {attempt} within its deadline ({waited} s: the task's \
                 timeout plus the coordinator's task_deadline_margin); the task message or its \
                 result was lost"
            );
            self.lose(&id, attempt, message, now, fx);
        }
    }

    /// Fails an in-flight attempt whose message or result is gone (kind `undelivered`).
    fn lose(
        &mut self,
        id: &str,
        attempt: u32,
        message: String,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        if self.attempts(id) != attempt {
            return;
        }
        let Some(planned) = self.in_flight.remove(id) else {
            return;
        };
        self.deadlines.remove(id);
        let err = TaskError {
            kind: parley_protocol::ErrorKind::Undelivered,
            message,
            provider: None,
            retry_after_ms: None,
        };
        self.on_failure(&planned, id, attempt, err, now, fx);
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

    /// Applies one input; returns the effects to perform, in order.
    pub fn handle(&mut self, input: Input, now: DateTime<Utc>) -> Vec<Effect> {
        let mut fx = Vec::new();
        match input {
            Input::Start => {
                if self.state.status != DebateStatus::Pending {
                    return fx;
                }
                self.state.status = DebateStatus::Running;
                if let Some(limit) = self.spec.debate.budget {
                    let hold = self.synthesis_hold();
                    self.state.budget = Some(parley_protocol::BudgetRecord {
                        limit,
                        reserved: hold,
                        hold,
                        ..Default::default()
                    });
                }
                let agents = self.agents.iter().map(|a| a.id.clone()).collect();
                let rounds = self.spec.debate.round_cap();
                self.emit(&mut fx, now, EventKind::DebateStarted { agents, rounds });
                self.enter(&mut fx, now, 0, Node::Initialization);
                for a in &self.agents.clone() {
                    if !parley_protocol::KNOWN_ROLES.contains(&a.role.as_str()) {
                        self.warn(
                            &mut fx,
                            now,
                            format!(
                                "agent {}: unknown role {:?}, using the architect prompts",
                                a.id, a.role
                            ),
                        );
                    }
                }
                let problems = parley_protocol::independence_problems_with(&self.spec, |a| {
                    self.effective_models
                        .get(&a.id)
                        .map_or(a.model.as_str(), String::as_str)
                });
                for problem in problems {
                    self.warn(&mut fx, now, format!("independence: {problem}"));
                }
                // Without clarifications a pass-through node.
                self.enter(&mut fx, now, 0, Node::Clarification);
                if self.clarify_enabled() {
                    self.state.clarification_iterations = 1;
                }
            }
            Input::Answers(answers) => {
                if self.check_answers(&answers).is_err() {
                    return fx;
                }
                self.record_answers(answers, now, &mut fx);
            }
            Input::ClarificationTimeout => {
                if self.state.status != DebateStatus::AwaitingClarifications {
                    return fx;
                }
                let open: Vec<Answer> = pending_clarifications(&self.state.clarifications)
                    .iter()
                    .flat_map(|g| &g.items)
                    .map(|i| Answer {
                        id: i.id.clone(),
                        answer: String::new(),
                    })
                    .collect();
                self.warn(
                    &mut fx,
                    now,
                    format!(
                        "no answer to {} clarification question(s) in time; recorded as {}",
                        open.len(),
                        parley_protocol::NO_ANSWER
                    ),
                );
                self.record_answers(open, now, &mut fx);
            }
            Input::Result(result) => self.on_result(result, now, &mut fx),
            Input::RetryDue(task_id) => {
                self.backing_off.remove(&task_id);
            }
            Input::Retry if self.state.status == DebateStatus::Running => {
                // A running debate that looks stuck: every outstanding attempt (in flight or
                // waiting for its backoff) is given up and sent again now as a new attempt
                // (a new message id), with a fresh retry budget. Completed tasks stay done; a
                // late answer of a given-up attempt is still taken if it is a success. At
                // most once per RUNNING_RETRY_INTERVAL_SECS: a retry sooner is a no-op.
                let interval = chrono::Duration::seconds(RUNNING_RETRY_INTERVAL_SECS);
                if self
                    .last_running_retry
                    .is_some_and(|at| now.signed_duration_since(at) < interval)
                {
                    return fx;
                }
                self.last_running_retry = Some(now);
                let outstanding: BTreeSet<String> = self
                    .in_flight
                    .keys()
                    .chain(self.backing_off.iter())
                    .cloned()
                    .collect();
                for id in &outstanding {
                    let used = self.attempts(id);
                    self.state.engine.failed_attempts.insert(id.clone(), used);
                    self.state.engine.budget_start.insert(id.clone(), used);
                    self.in_flight.remove(id);
                    self.deadlines.remove(id);
                }
                self.backing_off.clear();
                self.emit(&mut fx, now, EventKind::DebateResumed);
            }
            Input::Retry => {
                if self.state.status != DebateStatus::Failed {
                    return fx;
                }
                self.state.status = DebateStatus::Running;
                // A fresh budget for every task that may run again: the one that failed the
                // debate, others that failed meanwhile, and attempts still out (they may
                // yet come back with an error from before the user fixed the cause).
                let failed = self
                    .state
                    .error
                    .take()
                    .map(|e| e.task_id)
                    .filter(|t| !t.is_empty());
                // A critique dropped while its target has not refined yet can still be
                // used: it runs again too (the drop stays recorded where the target went on
                // without it).
                for rd in &mut self.state.rounds {
                    let refined: BTreeSet<&str> = rd
                        .contributions
                        .iter()
                        .filter(|c| c.kind == ContributionType::Refinement)
                        .map(|c| c.agent_id.as_str())
                        .collect();
                    rd.dropped
                        .retain(|d| refined.contains(d.target_agent_id.as_str()));
                }
                // Also every dispatched task without an output: after a restart nothing is
                // in flight, yet an attempt may be out, or its failure stored and not read.
                let unanswered: Vec<String> = self
                    .state
                    .engine
                    .attempts
                    .keys()
                    .filter(|id| self.parse_task_id(id).is_some_and(|p| !self.is_done(&p)))
                    .cloned()
                    .collect();
                let again: BTreeSet<String> = failed
                    .into_iter()
                    .chain(self.state.engine.failed_attempts.keys().cloned())
                    .chain(self.in_flight.keys().cloned())
                    .chain(unanswered)
                    .collect();
                for id in again {
                    let used = self.attempts(&id);
                    self.state.engine.budget_start.insert(id, used);
                }
                self.backing_off.clear();
                self.emit(&mut fx, now, EventKind::DebateResumed);
            }
            Input::Cancel => {
                if matches!(
                    self.state.status,
                    DebateStatus::Completed | DebateStatus::Cancelled
                ) {
                    return fx;
                }
                self.state.status = DebateStatus::Cancelled;
                self.emit(&mut fx, now, EventKind::DebateCancelled);
            }
            Input::Tick => self.expire_deadlines(now, &mut fx),
            Input::Lost {
                task_id,
                attempt,
                reason,
            } => self.lose(&task_id, attempt, reason, now, &mut fx),
            Input::Abort(reason) => {
                if !matches!(
                    self.state.status,
                    DebateStatus::Running
                        | DebateStatus::Pending
                        | DebateStatus::AwaitingClarifications
                ) {
                    return fx;
                }
                self.state.status = DebateStatus::Failed;
                // Nothing outstanding is waited for any more; a retry sends it again.
                self.in_flight.clear();
                self.backing_off.clear();
                let node = self.last_node.unwrap_or(Node::RoundManager);
                let round = self.state.current_round;
                self.state.error = Some(DebateFailure {
                    node: node.as_str().to_string(),
                    round,
                    task_id: String::new(),
                    agent_id: None,
                    message: reason.clone(),
                    kind: Some(parley_protocol::ErrorKind::Internal),
                    attempts: 0,
                    at: now,
                });
                self.enter(&mut fx, now, round, Node::Failed);
                self.emit(
                    &mut fx,
                    now,
                    EventKind::DebateFailed {
                        node,
                        round,
                        message: reason,
                    },
                );
            }
            Input::Resume => {
                self.in_flight.clear();
                self.backing_off.clear();
                self.deadlines.clear();
                if self.state.status == DebateStatus::Pending {
                    return self.handle(Input::Start, now);
                }
                if self.state.status == DebateStatus::Running {
                    self.emit(&mut fx, now, EventKind::DebateResumed);
                }
            }
        }
        self.advance(now, &mut fx);
        let in_flight = &self.in_flight;
        self.deadlines.retain(|id, _| in_flight.contains_key(id));
        self.state.updated_at = now;
        fx
    }

    fn attempts(&self, task_id: &str) -> u32 {
        self.state
            .engine
            .attempts
            .get(task_id)
            .copied()
            .unwrap_or(0)
    }

    fn on_result(&mut self, result: TaskResult, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        if result.debate_id != self.state.id {
            return;
        }
        let Some(planned) = self.parse_task_id(&result.task_id) else {
            self.warn(
                fx,
                now,
                format!("ignored result for unknown task {}", result.task_id),
            );
            return;
        };
        self.last_node = Some(planned.kind.node());
        if self.is_done(&planned) {
            // First result wins; a duplicate delivery changes nothing.
            self.in_flight.remove(&result.task_id);
            return;
        }
        match result.outcome {
            TaskOutcome::Ok(out) => {
                self.in_flight.remove(&result.task_id);
                self.backing_off.remove(&result.task_id);
                for w in &out.warnings {
                    self.warn(fx, now, format!("{}: {w}", result.task_id));
                }
                self.settle(&result.task_id, &out.metadata);
                let (tokens, latency, cost_usd) = (
                    out.metadata.tokens_used,
                    out.metadata.latency_ms,
                    out.metadata.cost_usd,
                );
                self.record(&planned, out, now, fx);
                self.state.spend =
                    Some(parley_protocol::Spend::of(&self.state, &self.spec.judge.id));
                let agent_id = self.executor(&planned).id.clone();
                self.emit(
                    fx,
                    now,
                    EventKind::TaskCompleted {
                        task_id: result.task_id,
                        node: planned.kind.node(),
                        agent_id,
                        tokens,
                        latency_ms: latency,
                        cost_usd,
                    },
                );
            }
            TaskOutcome::Error(err) => {
                // A stale failure of an older attempt does not count against the budget.
                if result.attempt < self.attempts(&result.task_id) {
                    return;
                }
                self.in_flight.remove(&result.task_id);
                self.on_failure(&planned, &result.task_id, result.attempt, err, now, fx);
            }
        }
    }

    fn on_failure(
        &mut self,
        planned: &Planned,
        id: &str,
        attempt: u32,
        err: TaskError,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        self.state
            .engine
            .failed_attempts
            .insert(id.to_string(), attempt);
        let node = planned.kind.node();
        let policy = self.spec.debate.retry.for_node(node.as_str()).clone();
        let base = self.state.engine.budget_start.get(id).copied().unwrap_or(0);
        let used = attempt.saturating_sub(base);
        let running = self.state.status == DebateStatus::Running;
        let will_retry = running && err.retryable() && used < policy.attempts;
        let agent_id = self.executor(planned).id.clone();
        self.emit(
            fx,
            now,
            EventKind::TaskFailed {
                task_id: id.to_string(),
                node,
                agent_id: agent_id.clone(),
                attempt,
                error: err.message.clone(),
                will_retry,
            },
        );
        if will_retry {
            let delay_ms = policy
                .backoff_ms(attempt + 1)
                .max(err.retry_after_ms.unwrap_or(0));
            self.backing_off.insert(id.to_string());
            fx.push(Effect::ScheduleRetry {
                task_id: id.to_string(),
                delay_ms,
            });
            return;
        }
        if !running {
            return;
        }
        if planned.kind == TaskKind::Critique
            && self.spec.debate.on_agent_failure == OnAgentFailure::Drop
        {
            self.drop_critique(planned, id, used, &err, now, fx);
            return;
        }
        let message = match &err.provider {
            Some(p) if !err.message.contains(p.as_str()) => format!("{p}: {}", err.message),
            _ => err.message.clone(),
        };
        self.state.status = DebateStatus::Failed;
        self.state.error = Some(DebateFailure {
            node: node.as_str().to_string(),
            round: planned.round,
            task_id: id.to_string(),
            agent_id: Some(agent_id),
            message: message.clone(),
            kind: Some(err.kind),
            attempts: used,
            at: now,
        });
        self.enter(fx, now, planned.round, Node::Failed);
        self.emit(
            fx,
            now,
            EventKind::DebateFailed {
                node,
                round: planned.round,
                message,
            },
        );
    }

    /// Gives up a critique whose budget is spent: recorded in its round and warned about;
    /// its target refines with the critiques that did arrive.
    fn drop_critique(
        &mut self,
        planned: &Planned,
        id: &str,
        attempts: u32,
        err: &TaskError,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let (Some(i), Some(j)) = (planned.agent, planned.target) else {
            return;
        };
        let agent_id = self.agents[i].id.clone();
        let target_agent_id = self.agents[j].id.clone();
        let Some(rd) = self
            .state
            .rounds
            .iter_mut()
            .find(|r| r.round_number == planned.round)
        else {
            return;
        };
        let dropped = DroppedCritique {
            task_id: id.to_string(),
            agent_id: agent_id.clone(),
            target_agent_id: target_agent_id.clone(),
            error: err.message.clone(),
            attempts,
            at: now,
        };
        rd.dropped.push(dropped);
        self.release(id);
        self.warn(
            fx,
            now,
            format!(
                "round {}: dropped {agent_id}'s critique of {target_agent_id} after {attempts} \
                 attempt(s) ({}); {target_agent_id} refines without it",
                planned.round, err.message
            ),
        );
    }

    /// Dispatches every task whose inputs exist; opens rounds; completes the debate.
    fn advance(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        if self.state.status != DebateStatus::Running {
            return;
        }
        if !self.clarifications_settled() {
            self.advance_clarifications(now, fx);
            if !self.clarifications_settled() {
                return;
            }
        }
        loop {
            let changed = self.open_rounds_and_carry_over(now, fx);
            if !changed {
                break;
            }
        }
        if self.state.final_solution.is_some() {
            self.state.status = DebateStatus::Completed;
            self.enter(fx, now, self.state.current_round, Node::Completed);
            let confidence = self
                .state
                .final_solution
                .as_ref()
                .map_or(0.0, |s| s.confidence);
            self.emit(fx, now, EventKind::DebateCompleted { confidence });
            return;
        }
        let mut degraded = false;
        for p in self.plan() {
            degraded |= self.dispatch(p, now, fx);
        }
        if degraded {
            // The state changed (a critique dropped, a summary skipped, the last round
            // set): plan again. Each degradation happens once per task, so this ends.
            self.advance(now, fx);
        }
    }

    /// Dispatches `p` unless it is in flight or backing off. Under a budget it first
    /// reserves the task's worst case; when that does not fit, the debate degrades
    /// instead ([`Self::degrade`]) and `true` is returned.
    fn dispatch(&mut self, p: Planned, now: DateTime<Utc>, fx: &mut Vec<Effect>) -> bool {
        let id = self.task_id_of(&p);
        if self.in_flight.contains_key(&id) || self.backing_off.contains(&id) {
            return false;
        }
        if self.state.budget.is_some() && !self.reserve(&p, &id) {
            self.degrade(&p, id, now, fx);
            return true;
        }
        // Clarification iterations all belong before round 1.
        let node_round = if graph::def(p.kind).phase == Phase::Clarification {
            0
        } else {
            p.round
        };
        self.enter(fx, now, node_round, p.kind.node());
        self.last_node = Some(p.kind.node());
        // A new attempt only after a failure; an attempt still outstanding (dispatched
        // before a resume) goes out again as itself.
        let last = self.attempts(&id);
        let outstanding = last > 0 && self.state.engine.failed_attempts.get(&id) != Some(&last);
        let attempt = if outstanding { last } else { last + 1 };
        self.state.engine.attempts.insert(id.clone(), attempt);
        let task = self.build_task(&p, id.clone(), attempt);
        self.in_flight.insert(id.clone(), p.clone());
        if let Some(deadline) = self
            .deadline_budget(&id)
            .and_then(|b| now.checked_add_signed(b))
        {
            self.deadlines.insert(id.clone(), deadline);
        }
        let agent_id = task.agent.id.clone();
        self.emit(
            fx,
            now,
            EventKind::TaskDispatched {
                task_id: id,
                node: p.kind.node(),
                agent_id,
                attempt,
            },
        );
        fx.push(Effect::Dispatch(task));
        false
    }

    /// Reserves `p`'s worst case in the budget (its own reservation if it has one: a
    /// re-dispatched task keeps it; the synthesis takes the hold). False: it does not fit.
    fn reserve(&mut self, p: &Planned, id: &str) -> bool {
        let worst = self
            .pricing
            .worst_case(&self.build_task(p, id.to_string(), 1));
        let priced = self.pricing.priced(self.executor(p));
        let Some(b) = self.state.budget.as_mut() else {
            return true;
        };
        if b.reservations.contains_key(id) {
            return true;
        }
        if p.kind == TaskKind::Synthesize {
            let hold = std::mem::take(&mut b.hold);
            b.reservations.insert(id.to_string(), hold);
            return true;
        }
        if (b.limit.usd.is_some() && !priced) || !b.fits(worst) {
            return false;
        }
        b.reserved = b.reserved.plus(worst);
        b.reservations.insert(id.to_string(), worst);
        true
    }

    /// Settles a task's real usage: its reservation is released and what it used is
    /// spent (an unpriced call counts its reserved dollars).
    fn settle(&mut self, id: &str, meta: &ContributionMetadata) {
        let Some(b) = self.state.budget.as_mut() else {
            return;
        };
        let held = b.reservations.remove(id).unwrap_or_default();
        b.reserved = b.reserved.minus(held);
        b.spent = b.spent.plus(parley_protocol::Amount {
            usd: meta.cost_usd.unwrap_or(held.usd),
            tokens: meta.tokens_used,
        });
    }

    /// Releases the reservation of a task given up.
    fn release(&mut self, id: &str) {
        if let Some(b) = self.state.budget.as_mut() {
            if let Some(held) = b.reservations.remove(id) {
                b.reserved = b.reserved.minus(held);
            }
        }
    }

    /// Adds a degradation to the budget record (a step repeated in the same round joins
    /// the last entry) and emits its event.
    fn record_degradation(
        &mut self,
        step: &str,
        round: u32,
        tasks: Vec<String>,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        if let Some(b) = self.state.budget.as_mut() {
            match b.degraded.last_mut() {
                Some(d) if d.step == step && d.round == round => d.tasks.extend(tasks.clone()),
                _ => b.degraded.push(parley_protocol::Degradation {
                    step: step.to_string(),
                    round,
                    tasks: tasks.clone(),
                    at: now,
                }),
            }
        }
        self.emit(
            fx,
            now,
            EventKind::BudgetDegraded {
                step: step.to_string(),
                round,
                tasks,
            },
        );
    }

    /// Under a budget: whether round `r + 1`'s refinements (the least a round needs; its
    /// critiques can be dropped) would not fit next to what is spent and reserved.
    fn next_round_unaffordable(&self, r: u32) -> bool {
        let Some(b) = &self.state.budget else {
            return false;
        };
        let mut need = parley_protocol::Amount::default();
        for i in 0..self.agents.len() {
            let p = Planned {
                round: r,
                kind: TaskKind::Refine,
                agent: Some(i),
                target: None,
            };
            let id = self.task_id_of(&p);
            need = need.plus(self.pricing.worst_case(&self.build_task(&p, id, 1)));
        }
        !b.fits(need)
    }

    /// Whether this debate has a clarification phase.
    fn clarify_enabled(&self) -> bool {
        let d = &self.spec.debate;
        d.interactive_clarifications
            && d.clarifications_max_per_agent > 0
            && d.clarifications_max_iterations > 0
    }

    /// The clarification phase is over (or there is none): round 1 may open. A debate
    /// with rounds already open (a checkpoint of an older build) never goes back to it.
    fn clarifications_settled(&self) -> bool {
        !self.clarify_enabled()
            || self.state.engine.clarifications_done
            || !self.state.rounds.is_empty()
    }

    /// The clarification phase while running: ask the agents that have not replied in
    /// this iteration; once all have, suspend for answers or end the phase.
    fn advance_clarifications(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        if self.state.clarification_iterations == 0 {
            self.state.clarification_iterations = 1;
        }
        let k = self.state.clarification_iterations;
        let mut missing = Vec::new();
        self.plan_at(Phase::Clarification, k, &mut missing);
        if !missing.is_empty() {
            for p in missing {
                self.dispatch(p, now, fx);
            }
            return;
        }
        let pending = pending_clarifications(&self.state.clarifications);
        if pending.is_empty() {
            self.state.engine.clarifications_done = true;
            self.state.engine.clarification_replies.clear();
            return;
        }
        self.state.status = DebateStatus::AwaitingClarifications;
        self.state.engine.awaiting_since = Some(now);
        let questions = clip_questions(pending);
        self.emit(
            fx,
            now,
            EventKind::ClarificationsRequested {
                iteration: k,
                questions,
            },
        );
    }

    /// Checks answers against the debate without recording anything: it must be waiting,
    /// and each id must name one of its questions not answered yet, once.
    pub fn check_answers(&self, answers: &[Answer]) -> Result<(), AnswerError> {
        if self.state.status != DebateStatus::AwaitingClarifications {
            return Err(AnswerError::NotWaiting {
                id: self.state.id.clone(),
                status: self.state.status.as_str(),
            });
        }
        if answers.is_empty() {
            return Err(AnswerError::Empty);
        }
        let mut seen = BTreeSet::new();
        let mut unknown = Vec::new();
        let mut answered = Vec::new();
        for a in answers {
            if !seen.insert(a.id.as_str()) {
                return Err(AnswerError::Duplicate(a.id.clone()));
            }
            match self.item(&a.id) {
                None => unknown.push(parley_protocol::preview(&a.id, 80)),
                Some(i) if i.answer.is_some() => answered.push(a.id.clone()),
                Some(_) => {}
            }
        }
        if !unknown.is_empty() {
            // Enough to name the problem: an error reply stays small.
            unknown.truncate(10);
            let open = pending_clarifications(&self.state.clarifications)
                .iter()
                .flat_map(|g| g.items.iter().map(|i| i.id.clone()))
                .take(50)
                .collect();
            return Err(AnswerError::Unknown { unknown, open });
        }
        if !answered.is_empty() {
            return Err(AnswerError::AlreadyAnswered(answered));
        }
        Ok(())
    }

    /// When an operator's clarification timeout of `timeout` runs out for a debate waiting
    /// for answers (`None`: it is not waiting).
    pub fn clarification_deadline(&self, timeout: std::time::Duration) -> Option<DateTime<Utc>> {
        if self.state.status != DebateStatus::AwaitingClarifications {
            return None;
        }
        let since = self.state.engine.awaiting_since?;
        let t = chrono::Duration::from_std(timeout).unwrap_or_else(|_| chrono::Duration::days(1));
        since.checked_add_signed(t)
    }

    fn item(&self, id: &str) -> Option<&ClarificationItem> {
        self.state
            .clarifications
            .iter()
            .flat_map(|g| &g.items)
            .find(|i| i.id == id)
    }

    /// Records checked answers; once no question is open, the next iteration (or round 1).
    fn record_answers(&mut self, answers: Vec<Answer>, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        let answered = answers.len();
        for a in answers {
            let text = a.answer.trim();
            let text = if text.is_empty() {
                parley_protocol::NO_ANSWER.to_string()
            } else {
                parley_protocol::preview(text, limits::MAX_ANSWER_CHARS)
            };
            if let Some(item) = self
                .state
                .clarifications
                .iter_mut()
                .flat_map(|g| g.items.iter_mut())
                .find(|i| i.id == a.id)
            {
                item.answer = Some(text);
            }
        }
        let remaining: usize = pending_clarifications(&self.state.clarifications)
            .iter()
            .map(|g| g.items.len())
            .sum();
        let iteration = self.state.clarification_iterations;
        if remaining == 0 {
            self.state.engine.awaiting_since = None;
            self.state.engine.clarification_replies.clear();
            self.state.status = DebateStatus::Running;
            if iteration < self.spec.debate.clarifications_max_iterations {
                self.state.clarification_iterations = iteration + 1;
            } else {
                self.state.engine.clarifications_done = true;
            }
        }
        self.emit(
            fx,
            now,
            EventKind::ClarificationsAnswered {
                iteration,
                answered,
                remaining,
            },
        );
    }

    /// Opens the next round when its time has come and fills in carried-over proposals.
    /// Returns true if anything changed.
    fn open_rounds_and_carry_over(&mut self, now: DateTime<Utc>, fx: &mut Vec<Effect>) -> bool {
        let mut changed = false;
        if self.state.rounds.is_empty() {
            self.open_round(1, now, fx);
            changed = true;
        }
        let r = self.state.rounds.len() as u32;
        for k in 1..=r {
            if self.round_complete(k) && !self.entered.contains(&(k, Node::Evaluation)) {
                // Round finished: pass through (or enter) evaluation.
                self.enter(fx, now, k, Node::Evaluation);
                self.emit(fx, now, EventKind::RoundCompleted { round: k });
            }
        }
        if r < self.spec.debate.round_cap() && !self.is_final_round(r) {
            let open_next = match self.termination() {
                TerminationType::Fixed => self
                    .round(r)
                    .is_some_and(|rd| rd.count(ContributionType::Refinement) > 0),
                TerminationType::Verdict => self.round(r).is_some_and(|rd| rd.verdict.is_some()),
                TerminationType::Similarity => {
                    self.round(r).is_some_and(|rd| rd.similarity.is_some())
                }
                _ => self.round(r).is_some_and(|rd| rd.evaluation.is_some()),
            };
            if open_next && self.next_round_unaffordable(r) {
                if let Some(b) = self.state.budget.as_mut() {
                    b.final_round = Some(r);
                }
                self.record_degradation("noNewRound", r, Vec::new(), now, fx);
            } else if open_next {
                self.open_round(r + 1, now, fx);
                changed = true;
            }
        }
        // Carry over refinements as the next round's proposals.
        for r in 2..=self.state.rounds.len() as u32 {
            for i in 0..self.agents.len() {
                let agent = &self.agents[i];
                if self.round(r).is_some_and(|rd| {
                    rd.find(ContributionType::Proposal, &agent.id, None)
                        .is_some()
                }) {
                    continue;
                }
                let Some(prev) = self
                    .round(r - 1)
                    .and_then(|rd| rd.find(ContributionType::Refinement, &agent.id, None))
                else {
                    continue;
                };
                if prev.content.trim().is_empty() {
                    continue; // the plan asks the LLM for a fresh proposal instead
                }
                let c = Contribution {
                    agent_id: agent.id.clone(),
                    agent_role: agent.role.clone(),
                    kind: ContributionType::Proposal,
                    content: prev.content.clone(),
                    target_agent_id: None,
                    metadata: ContributionMetadata {
                        tokens_used: 0,
                        latency_ms: 0,
                        model: prev.metadata.model.clone(),
                        carried_over: true,
                        ..Default::default()
                    },
                };
                self.enter(fx, now, r, Node::Proposal);
                self.push_contribution(r, c);
                changed = true;
            }
        }
        changed
    }

    fn open_round(&mut self, r: u32, now: DateTime<Utc>, fx: &mut Vec<Effect>) {
        self.state.rounds.push(DebateRound::new(r, now));
        self.state.current_round = r;
        self.enter(fx, now, r, Node::RoundManager);
    }

    fn termination(&self) -> TerminationType {
        self.spec.debate.termination_condition.kind
    }

    fn threshold(&self) -> f64 {
        self.spec.debate.termination_condition.threshold()
    }

    fn adaptive(&self) -> bool {
        self.spec.debate.mode == DebateMode::Adaptive
    }

    /// The adaptive screen's node: an embedding of the proposals with `similarity`
    /// termination, else the judge's verdict; none without `debate.mode: "adaptive"`.
    fn screen(&self) -> Option<TaskKind> {
        match (self.adaptive(), self.termination()) {
            (false, _) => None,
            (true, TerminationType::Similarity) => Some(TaskKind::Embed),
            (true, _) => Some(TaskKind::Verdict),
        }
    }

    /// Every agent's round-1 proposal is in: the screen can compare them.
    fn screen_due(&self) -> bool {
        self.round(1).is_some_and(|rd| {
            self.agents
                .iter()
                .all(|a| rd.find(ContributionType::Proposal, &a.id, None).is_some())
        })
    }

    /// Adaptive and the proposals already agreed: synthesize from round 1's proposals.
    fn short_path(&self) -> bool {
        self.state
            .adaptive
            .as_ref()
            .is_some_and(|a| a.path == AdaptivePath::Short)
    }

    /// Round 1's critiques wait for the adaptive screen (and never run on the short path).
    fn critiques_open(&self, r: u32) -> bool {
        r > 1
            || !self.adaptive()
            || self
                .state
                .adaptive
                .as_ref()
                .is_some_and(|a| a.path == AdaptivePath::Full)
    }

    /// The newest verdict: of the last round that has one, else the adaptive screen's.
    fn last_verdict(&self) -> Option<&Verdict> {
        self.state
            .rounds
            .iter()
            .rev()
            .find_map(|rd| rd.verdict.as_ref())
            .or(self
                .state
                .adaptive
                .as_ref()
                .and_then(|a| a.verdict.as_ref()))
            .map(|v| &v.verdict)
    }

    /// Voting debates vote after the final round (not on the adaptive short path).
    fn votes_due(&self) -> bool {
        self.spec.debate.voting() && self.agents.len() >= 2 && !self.short_path()
    }

    /// Every agent has voted and the votes are counted.
    fn votes_tallied(&self) -> bool {
        self.state.voting.as_ref().is_some_and(|v| v.tallied)
    }

    /// No vote is due, or every vote is counted.
    fn votes_settled(&self) -> bool {
        !self.votes_due() || self.votes_tallied()
    }

    /// The final round is complete: the closing nodes (votes, synthesis) may run.
    fn finished(&self) -> bool {
        let last = self.state.rounds.len() as u32;
        last > 0 && self.round_complete(last) && self.is_final_round(last)
    }

    /// The judge's check of complete round r (`Evaluate`, `Verdict` or `Embed`, as the
    /// termination says) is due: not after the last possible round.
    fn round_check_due(&self, r: u32) -> bool {
        self.round_complete(r)
            && r < self.spec.debate.round_cap()
            && self
                .state
                .budget
                .as_ref()
                .and_then(|b| b.final_round)
                .is_none_or(|f| r < f)
    }

    /// The judge summarizes the final transcript before the synthesis.
    fn judge_summary_due(&self) -> bool {
        let cfg = self.summarization_for(None);
        let last = self.state.rounds.len() as u32;
        let id = task_id(
            &self.state.id,
            last,
            TaskKind::JudgeSummarize,
            &self.spec.judge.id,
            None,
        );
        cfg.enabled
            && self.state.judge_summary.is_none()
            && !self.budget_skipped(&id)
            && self.final_transcript().chars().count() > cfg.threshold
    }

    fn round(&self, r: u32) -> Option<&DebateRound> {
        self.state.round(r)
    }

    /// Every agent has refined in round r.
    fn round_complete(&self, r: u32) -> bool {
        self.round(r).is_some_and(|rd| {
            self.agents
                .iter()
                .all(|a| rd.find(ContributionType::Refinement, &a.id, None).is_some())
        })
    }

    /// Round r is the last: the hard cap, or the judge's confidence reached the threshold.
    fn is_final_round(&self, r: u32) -> bool {
        if r >= self.spec.debate.round_cap() {
            return true;
        }
        if self
            .state
            .budget
            .as_ref()
            .and_then(|b| b.final_round)
            .is_some_and(|f| r >= f)
        {
            return true;
        }
        match self.termination() {
            TerminationType::Fixed => false,
            TerminationType::Verdict => self
                .round(r)
                .and_then(|rd| rd.verdict.as_ref())
                .is_some_and(|v| v.verdict.is_done_at(self.threshold())),
            TerminationType::Similarity => self
                .round(r)
                .and_then(|rd| rd.similarity.as_ref())
                .is_some_and(|s| s.converged),
            _ => self
                .round(r)
                .and_then(|rd| rd.evaluation.as_ref())
                .is_some_and(|e| {
                    e.confidence >= self.spec.debate.termination_condition.threshold()
                }),
        }
    }

    fn summarization_for(&self, agent: Option<usize>) -> &SummarizationConfig {
        let own = match agent {
            Some(i) => self.agents[i].summarization.as_ref(),
            None => self.spec.judge.summarization.as_ref(),
        };
        own.unwrap_or(&self.spec.debate.summarization)
    }

    /// Whether agent i's summary for round r is settled: not due, or present.
    /// `None` while that cannot be known yet (previous refinement missing).
    fn summary_settled(&self, i: usize, r: u32) -> Option<bool> {
        if r < 2 || !self.summarization_for(Some(i)).enabled {
            return Some(true);
        }
        let id = &self.agents[i].id;
        self.round(r - 1)?
            .find(ContributionType::Refinement, id, None)?;
        if self.round(r)?.summaries.contains_key(id) {
            return Some(true);
        }
        if self.budget_skipped(&task_id(&self.state.id, r, TaskKind::Summarize, id, None)) {
            return Some(true);
        }
        let len = self.history_chars(i, r);
        Some(len <= self.summarization_for(Some(i)).threshold)
    }

    /// The (critic, target) pairs of round `r` under `debate.critique` (indices into the
    /// active agents). `all`: every ordered pair. `ring`: i critiques i+1 … i+k (mod n).
    /// `random`: k distinct targets per critic from a PRNG seeded by the debate id and the
    /// round (the same pairs after a resume or a takeover); then every agent that no critic
    /// drew gets one critic, drawn the same way.
    fn critique_pairs(&self, r: u32) -> BTreeSet<(usize, usize)> {
        let n = self.agents.len();
        let mut pairs = BTreeSet::new();
        if n < 2 {
            return pairs;
        }
        let cfg = self.spec.debate.critique;
        let k = (cfg.k() as usize).clamp(1, n - 1);
        match cfg.topology {
            CritiqueTopology::All => {
                for i in 0..n {
                    for j in (0..n).filter(|&j| j != i) {
                        pairs.insert((i, j));
                    }
                }
            }
            CritiqueTopology::Ring => {
                for i in 0..n {
                    for d in 1..=k {
                        pairs.insert((i, (i + d) % n));
                    }
                }
            }
            CritiqueTopology::Random => {
                let mut rng = SplitMix64::seeded(&self.state.id, r);
                for i in 0..n {
                    let mut others: Vec<usize> = (0..n).filter(|&j| j != i).collect();
                    // A partial Fisher–Yates shuffle: the first k are the draw.
                    for d in 0..k {
                        let pick = d + rng.below(others.len() - d);
                        others.swap(d, pick);
                        pairs.insert((i, others[d]));
                    }
                }
                for j in 0..n {
                    if !pairs.iter().any(|&(_, t)| t == j) {
                        let critics: Vec<usize> = (0..n).filter(|&c| c != j).collect();
                        pairs.insert((critics[rng.below(critics.len())], j));
                    }
                }
            }
        }
        pairs
    }

    /// Whether the budget skipped the task with this id.
    fn budget_skipped(&self, id: &str) -> bool {
        self.state
            .budget
            .as_ref()
            .is_some_and(|b| b.skipped.contains(id))
    }

    fn executor(&self, p: &Planned) -> &AgentConfig {
        match p.agent {
            Some(i) => &self.agents[i],
            None => &self.spec.judge,
        }
    }

    /// Agent i's perspective history before round r: its proposals, the critiques it
    /// received and its refinements, starting from its newest summary.
    fn history(&self, i: usize, r: u32) -> String {
        let id = &self.agents[i].id;
        let mut out = String::new();
        let mut from = 1;
        for k in (1..=r).rev() {
            if let Some(s) = self.round(k).and_then(|rd| rd.summaries.get(id)) {
                out.push_str(&format!(
                    "Summary of your earlier rounds:\n{}\n\n",
                    s.summary
                ));
                from = k;
                break;
            }
        }
        for k in from..r {
            let Some(rd) = self.round(k) else { continue };
            if let Some(p) = rd.find(ContributionType::Proposal, id, None) {
                out.push_str(&format!("Round {k} - your proposal:\n{}\n\n", p.content));
            }
            for c in rd.contributions.iter().filter(|c| {
                c.kind == ContributionType::Critique && c.target_agent_id.as_deref() == Some(id)
            }) {
                out.push_str(&format!(
                    "Round {k} - critique from {} ({}):\n{}\n\n",
                    c.agent_id, c.agent_role, c.content
                ));
            }
            if let Some(p) = rd.find(ContributionType::Refinement, id, None) {
                out.push_str(&format!("Round {k} - your refinement:\n{}\n\n", p.content));
            }
        }
        out
    }

    fn history_chars(&self, i: usize, r: u32) -> usize {
        self.history(i, r).chars().count()
    }

    fn history_input(&self, i: usize, r: u32) -> Option<String> {
        if !self.spec.debate.include_full_history {
            let id = &self.agents[i].id;
            return (1..=r)
                .rev()
                .find_map(|k| self.round(k).and_then(|rd| rd.summaries.get(id)))
                .map(|s| s.summary.clone());
        }
        let h = self.history(i, r);
        (!h.is_empty()).then_some(h)
    }

    fn round_transcript(&self, r: u32) -> String {
        let mut out = String::new();
        let Some(rd) = self.round(r) else { return out };
        for a in &self.agents {
            if let Some(c) = rd
                .find(ContributionType::Refinement, &a.id, None)
                .or_else(|| rd.find(ContributionType::Proposal, &a.id, None))
            {
                out.push_str(&format!(
                    "### {} ({}) — round {r}\n{}\n\n",
                    a.id, a.role, c.content
                ));
            }
        }
        out
    }

    /// What the judge synthesizes from: the whole debate or just the final round.
    fn final_transcript(&self) -> String {
        let last = self.state.rounds.len() as u32;
        if self.spec.debate.include_full_history {
            (1..=last).map(|r| self.round_transcript(r)).collect()
        } else {
            self.round_transcript(last)
        }
    }

    /// Adds an agent's clarification questions: trimmed, cut to
    /// [`limits::MAX_QUESTION_CHARS`], without repeats of its earlier ones, at most
    /// `clarificationsMaxPerAgent`; marks its reply of this iteration as in.
    fn record_questions(
        &mut self,
        agent: &AgentConfig,
        questions: Vec<String>,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let max = self.spec.debate.clarifications_max_per_agent as usize;
        let norm = |q: &str| {
            q.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase()
        };
        let pos = match self
            .state
            .clarifications
            .iter()
            .position(|g| g.agent_id == agent.id)
        {
            Some(p) => p,
            None => {
                // Groups stay in agent order, whichever agent replied first.
                let order = |id: &str| self.agents.iter().position(|a| a.id == id);
                let mine = order(&agent.id);
                let at = self
                    .state
                    .clarifications
                    .iter()
                    .position(|g| order(&g.agent_id) > mine)
                    .unwrap_or(self.state.clarifications.len());
                self.state.clarifications.insert(
                    at,
                    AgentClarifications {
                        agent_id: agent.id.clone(),
                        agent_name: agent.name.clone(),
                        role: agent.role.clone(),
                        items: Vec::new(),
                    },
                );
                at
            }
        };
        let group = &mut self.state.clarifications[pos];
        let mut seen: BTreeSet<String> = group.items.iter().map(|i| norm(&i.question)).collect();
        let mut added = 0;
        let mut over = 0;
        for q in questions {
            let q = parley_protocol::preview(q.trim(), limits::MAX_QUESTION_CHARS);
            if q.is_empty() || !seen.insert(norm(&q)) {
                continue;
            }
            if added == max {
                over += 1;
                continue;
            }
            let n = group.items.len() + 1;
            group.items.push(ClarificationItem {
                id: format!("{}-q{n}", agent.id),
                question: q,
                answer: None,
            });
            added += 1;
        }
        if group.items.is_empty() {
            self.state.clarifications.remove(pos);
        }
        self.state
            .engine
            .clarification_replies
            .insert(agent.id.clone());
        if over > 0 {
            self.warn(
                fx,
                now,
                format!(
                    "agent {}: asked {} more clarification question(s) than clarificationsMaxPerAgent ({max}); kept the first {max}",
                    agent.id, over
                ),
            );
        }
    }

    /// Stores the judge's verdict on round r (or, r = 0, the adaptive screen): an unreadable
    /// reply counts as continue with a warning; open issues are bounded.
    fn record_verdict(
        &mut self,
        r: u32,
        out: TaskOutput,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let mut verdict = out
            .verdict
            .unwrap_or_else(|| Verdict::unreadable(parley_protocol::preview(&out.content, 2_000)));
        if !verdict.valid {
            self.warn(
                fx,
                now,
                format!("round {r}: the judge's verdict was not the JSON asked for; counted as continue"),
            );
        }
        verdict.confidence = if verdict.confidence.is_finite() {
            verdict.confidence.clamp(0.0, 100.0)
        } else {
            0.0
        };
        verdict.open_issues.truncate(limits::MAX_OPEN_ISSUES);
        for issue in &mut verdict.open_issues {
            *issue = parley_protocol::preview(issue.trim(), limits::MAX_OPEN_ISSUE_CHARS);
        }
        self.emit(
            fx,
            now,
            EventKind::VerdictGiven {
                round: r,
                verdict: verdict.verdict,
                confidence: verdict.confidence,
                open_issues: verdict.open_issues.len(),
                valid: verdict.valid,
            },
        );
        if r == 0 {
            self.choose_path(verdict, out.metadata, now, fx);
        } else if let Some(rd) = self.state.round_mut(r) {
            rd.verdict = Some(RoundVerdict {
                verdict,
                metadata: out.metadata,
            });
        }
    }

    /// Keeps round r's similarities (values outside -1..=1 or not numbers are not kept: a
    /// worker's reply is outside input) and whether the debate stops on them.
    fn record_similarity(
        &mut self,
        r: u32,
        out: TaskOutput,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let valid = |x: &f64| x.is_finite() && (-1.0..=1.0).contains(x);
        let mut similarity = out.similarity.unwrap_or_default();
        similarity
            .per_agent
            .retain(|id, s| valid(s) && self.agents.iter().any(|a| &a.id == id));
        similarity.across_agents = similarity.across_agents.filter(valid);
        if r == 0 {
            // The adaptive screen: the proposals against each other, no round before.
            let screen = RoundSimilarity {
                similarity,
                threshold: self.threshold(),
                converged: false,
                metadata: out.metadata,
            };
            return self.choose_path_by_similarity(screen, now, fx);
        }
        if similarity.per_agent.is_empty() && r >= 2 {
            self.warn(
                fx,
                now,
                format!("round {r}: no similarity could be measured; the debate goes on"),
            );
        }
        let threshold = self.threshold();
        let ids: Vec<&str> = self.agents.iter().map(|a| a.id.as_str()).collect();
        let converged = similarity.converged(&ids, threshold);
        self.emit(
            fx,
            now,
            EventKind::SimilarityMeasured {
                round: r,
                min_per_agent: similarity.min_per_agent(),
                across_agents: similarity.across_agents,
                threshold,
                converged,
            },
        );
        if let Some(rd) = self.state.round_mut(r) {
            rd.similarity = Some(RoundSimilarity {
                similarity,
                threshold,
                converged,
                metadata: out.metadata,
            });
        }
    }

    /// Adaptive: the short path when the screen's verdict is done at the threshold, else
    /// the full debate; recorded with the reason and announced.
    fn choose_path(
        &mut self,
        verdict: Verdict,
        metadata: ContributionMetadata,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let threshold = self.threshold();
        let (path, reason) = if verdict.is_done_at(threshold) {
            (
                AdaptivePath::Short,
                format!(
                    "the judge found the proposals in agreement (done, confidence {} ≥ threshold {threshold}): synthesized at once",
                    verdict.confidence
                ),
            )
        } else if !verdict.valid {
            (
                AdaptivePath::Full,
                format!(
                    "no usable verdict on the proposals ({}): debating as configured",
                    parley_protocol::preview(&verdict.reasoning, 200)
                ),
            )
        } else {
            (
                AdaptivePath::Full,
                format!(
                    "the judge's verdict on the proposals was {} at confidence {} (threshold {threshold}): debating as configured",
                    match verdict.verdict {
                        parley_protocol::VerdictDecision::Done => "done",
                        parley_protocol::VerdictDecision::Continue => "continue",
                    },
                    verdict.confidence
                ),
            )
        };
        self.state.adaptive = Some(AdaptiveRecord {
            path,
            reason: reason.clone(),
            verdict: Some(RoundVerdict { verdict, metadata }),
            similarity: None,
        });
        self.emit(fx, now, EventKind::AdaptivePathChosen { path, reason });
    }

    /// Adaptive with `terminationCondition.type: "similarity"`: the short path when the
    /// round-1 proposals' mean similarity across agents reaches the threshold, else the
    /// full debate; recorded with the reason and announced.
    fn choose_path_by_similarity(
        &mut self,
        mut screen: RoundSimilarity,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let threshold = screen.threshold;
        let (path, reason) = match screen.similarity.across_agents {
            Some(s) if s >= threshold => (
                AdaptivePath::Short,
                format!(
                    "the proposals agree (mean similarity across agents {s:.3} ≥ threshold {threshold}): synthesized at once"
                ),
            ),
            Some(s) => (
                AdaptivePath::Full,
                format!(
                    "the proposals differ (mean similarity across agents {s:.3} < threshold {threshold}): debating as configured"
                ),
            ),
            None => (
                AdaptivePath::Full,
                "no similarity of the proposals could be measured: debating as configured"
                    .to_string(),
            ),
        };
        screen.converged = path == AdaptivePath::Short;
        self.state.adaptive = Some(AdaptiveRecord {
            path,
            reason: reason.clone(),
            verdict: None,
            similarity: Some(screen),
        });
        self.emit(fx, now, EventKind::AdaptivePathChosen { path, reason });
    }

    /// Stores an agent's vote: one for itself, for an unknown id, or none readable is
    /// recorded invalid with a warning. Once every agent has voted, the tally.
    fn record_vote(
        &mut self,
        exec: &AgentConfig,
        out: TaskOutput,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let (vote, reason) = match out.vote {
            Some(b) => (
                parley_protocol::preview(b.vote.trim(), 200),
                parley_protocol::preview(b.reason.trim(), limits::MAX_VOTE_REASON_CHARS),
            ),
            None => (String::new(), String::new()),
        };
        let invalid = if vote.is_empty() {
            Some("no readable vote in the reply".to_string())
        } else if vote == exec.id {
            Some("a vote for itself".to_string())
        } else if !self.agents.iter().any(|a| a.id == vote) {
            Some(format!("{vote:?} is not an agent of this debate"))
        } else {
            None
        };
        if let Some(why) = &invalid {
            self.warn(
                fx,
                now,
                format!("agent {}: invalid vote ({why}); not counted", exec.id),
            );
        }
        self.emit(
            fx,
            now,
            EventKind::VoteCast {
                agent_id: exec.id.clone(),
                vote: vote.clone(),
                valid: invalid.is_none(),
            },
        );
        let order: BTreeMap<&str, usize> = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| (a.id.as_str(), i))
            .collect();
        let record = self.state.voting.get_or_insert_with(VotingRecord::default);
        record.votes.push(Vote {
            agent_id: exec.id.clone(),
            vote,
            reason,
            valid: invalid.is_none(),
            invalid_reason: invalid,
            metadata: out.metadata,
        });
        record.votes.sort_by_key(|v| {
            order
                .get(v.agent_id.as_str())
                .copied()
                .unwrap_or(usize::MAX)
        });
        if record.votes.len() < self.agents.len() {
            return;
        }
        // Plurality of the valid votes; a tie (or no valid vote) goes to the judge.
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for v in record.votes.iter().filter(|v| v.valid) {
            *counts.entry(v.vote.clone()).or_default() += 1;
        }
        let most = counts.values().copied().max().unwrap_or(0);
        let mut leaders: Vec<String> = if most == 0 {
            self.agents.iter().map(|a| a.id.clone()).collect()
        } else {
            counts
                .iter()
                .filter(|(_, c)| **c == most)
                .map(|(a, _)| a.clone())
                .collect()
        };
        leaders.sort_by_key(|a| order.get(a.as_str()).copied().unwrap_or(usize::MAX));
        let tie = leaders.len() > 1;
        let winner = (!tie).then(|| leaders[0].clone());
        record.counts = counts.clone();
        record.leaders = leaders.clone();
        record.tie = tie;
        record.winner = winner.clone();
        record.tallied = true;
        self.emit(
            fx,
            now,
            EventKind::VotesTallied {
                winner,
                tie,
                leaders,
                counts,
            },
        );
    }

    /// What the judge's synthesis prompt says about the vote: the winner (or the tied
    /// leaders to choose from) and every ballot with its reason.
    fn vote_result_text(&self) -> Option<String> {
        let v = self.state.voting.as_ref().filter(|v| v.tallied)?;
        let mut out = match &v.winner {
            Some(w) => format!(
                "The agents voted; the winner is {w} with {} vote(s). Write the solution from {w}'s final refinement and keep the minority's points.\n",
                v.counts.get(w).copied().unwrap_or(0)
            ),
            None => format!(
                "The agents' vote is tied between {}. Pick the best of their final refinements, name it in basedOn, write the solution from it and keep the others' points.\n",
                v.leaders.join(", ")
            ),
        };
        for b in &v.votes {
            if b.valid {
                out.push_str(&format!(
                    "- {} voted for {}: {}\n",
                    b.agent_id, b.vote, b.reason
                ));
            } else {
                out.push_str(&format!(
                    "- {}'s vote was invalid ({}); not counted\n",
                    b.agent_id,
                    b.invalid_reason.as_deref().unwrap_or("invalid")
                ));
            }
        }
        Some(out)
    }

    /// Completes the judge's solution: every open issue of the last verdict the judge left
    /// out is added to the unresolved disagreements (with a warning), and a voting debate
    /// records which refinement it was written from.
    fn complete_solution(
        &mut self,
        solution: &mut Solution,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) {
        let norm = |s: &str| {
            s.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase()
        };
        let issues = self
            .last_verdict()
            .map(|v| v.open_issues.clone())
            .unwrap_or_default();
        let mut added = 0;
        for issue in issues {
            let n = norm(&issue);
            if !solution
                .unresolved_disagreements
                .iter()
                .any(|d| norm(d).contains(&n))
            {
                solution.unresolved_disagreements.push(issue);
                added += 1;
            }
        }
        if added > 0 {
            self.warn(
                fx,
                now,
                format!("the synthesis left out {added} open issue(s) of the judge's last verdict; added to its unresolved disagreements"),
            );
        }
        if let Some(v) = self.state.voting.as_ref().filter(|v| v.tallied) {
            let judge_pick = solution.based_on.clone().filter(|b| v.leaders.contains(b));
            solution.based_on = v.winner.clone().or(judge_pick);
        }
    }

    /// Inserts a contribution keeping a stable order: proposals, critiques, refinements,
    /// each in agent order (critiques by target order).
    fn push_contribution(&mut self, r: u32, c: Contribution) {
        let order: BTreeMap<&str, usize> = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| (a.id.as_str(), i))
            .collect();
        let key = |c: &Contribution| {
            (
                c.kind,
                order
                    .get(c.agent_id.as_str())
                    .copied()
                    .unwrap_or(usize::MAX),
                c.target_agent_id
                    .as_deref()
                    .and_then(|t| order.get(t).copied())
                    .unwrap_or(0),
            )
        };
        let k = key(&c);
        let Some(rd) = self.state.round_mut(r) else {
            return;
        };
        let pos = rd.contributions.partition_point(|x| key(x) <= k);
        rd.contributions.insert(pos, c);
    }

    fn enter(&mut self, fx: &mut Vec<Effect>, now: DateTime<Utc>, round: u32, node: Node) {
        if self.entered.insert((round, node)) {
            self.emit(fx, now, EventKind::NodeEntered { round, node });
        }
    }

    fn warn(&mut self, fx: &mut Vec<Effect>, now: DateTime<Utc>, message: String) {
        self.state.engine.warnings.push(message.clone());
        self.emit(fx, now, EventKind::Warning { message });
    }

    fn emit(&mut self, fx: &mut Vec<Effect>, now: DateTime<Utc>, mut kind: EventKind) {
        // Free text (provider errors, warnings) is cut so an event stays small; the state
        // keeps the whole text.
        use parley_protocol::{clip_text, MAX_EVENT_TEXT_BYTES};
        if let EventKind::TaskFailed { error: text, .. }
        | EventKind::DebateFailed { message: text, .. }
        | EventKind::Warning { message: text } = &mut kind
        {
            if text.len() > MAX_EVENT_TEXT_BYTES {
                *text = clip_text(text, MAX_EVENT_TEXT_BYTES);
            }
        }
        self.state.engine.event_seq += 1;
        fx.push(Effect::Emit(DebateEvent {
            schema_version: SCHEMA_VERSION,
            debate_id: self.state.id.clone(),
            seq: self.state.engine.event_seq,
            at: now,
            status: self.state.status,
            progress: self.progress(),
            kind,
        }));
    }

    /// Where the debate stands, for progress displays.
    /// Whether a result for `task_id`, attempt `attempt` (a success when `ok`) is one this
    /// debate waits for: the drivers apply only [`Expectation::Wanted`] results, so a
    /// result for a task that was never dispatched, is finished, or comes from the wrong
    /// attempt changes nothing.
    pub fn expects(&self, task_id: &str, attempt: u32, ok: bool) -> Expectation {
        let Some(planned) = self.parse_task_id(task_id) else {
            return Expectation::NotDispatched;
        };
        if self.is_done(&planned) {
            return Expectation::Finished;
        }
        if !self.in_flight.contains_key(task_id) {
            return Expectation::NotDispatched;
        }
        let current = self.attempts(task_id);
        let wanted = if ok {
            (1..=current).contains(&attempt)
        } else {
            attempt == current
        };
        if wanted {
            Expectation::Wanted
        } else {
            Expectation::WrongAttempt
        }
    }

    pub fn progress(&self) -> Progress {
        let n = self.agents.len();
        let rounds = self.spec.debate.round_cap();
        let per_round = n + self.critique_pairs(1).len() + n;
        let mut done = 0;
        for rd in &self.state.rounds {
            done += rd.contributions.len();
        }
        let mut total = per_round * rounds as usize + 1;
        let check = match self.termination() {
            TerminationType::Fixed => None,
            TerminationType::Verdict => Some(TaskKind::Verdict),
            TerminationType::Similarity => Some(TaskKind::Embed),
            TerminationType::Convergence | TerminationType::Quality => Some(TaskKind::Evaluate),
        };
        if let Some(check) = check {
            // Every round but the last is checked (the last one ends the debate anyway).
            total += rounds.saturating_sub(1) as usize;
            done += self
                .state
                .rounds
                .iter()
                .filter(|r| match check {
                    TaskKind::Verdict => r.verdict.is_some(),
                    TaskKind::Embed => r.similarity.is_some(),
                    _ => r.evaluation.is_some(),
                })
                .count();
        }
        if self.adaptive() {
            total += 1;
            done += usize::from(self.state.adaptive.is_some());
        }
        if self.votes_due() {
            total += n;
            done += self.state.voting.as_ref().map_or(0, |v| v.votes.len());
        }
        done += usize::from(self.state.final_solution.is_some());
        let phase = self
            .in_flight
            .values()
            .map(|p| p.kind.node())
            .min()
            .unwrap_or(match self.state.status {
                DebateStatus::Completed => Node::Completed,
                DebateStatus::Failed => Node::Failed,
                DebateStatus::AwaitingClarifications => Node::Clarification,
                _ => self.last_node.unwrap_or(Node::RoundManager),
            });
        let mut active: Vec<String> = self
            .in_flight
            .values()
            .map(|p| self.executor(p).id.clone())
            .collect();
        active.sort();
        active.dedup();
        Progress {
            round: self.state.current_round,
            rounds,
            phase: phase.as_str().to_string(),
            done,
            // A completed debate did all it will do (an early stop skips the rest).
            total: if self.state.status == DebateStatus::Completed {
                done
            } else {
                total.max(done)
            },
            active_agents: active,
        }
    }
}

/// Bytes of question text a `clarificationsRequested` event carries in all; each question
/// gets an equal share (at least [`MIN_EVENT_QUESTION_BYTES`]), cut with `…`.
const EVENT_QUESTIONS_BYTES: usize = 32 * 1024;
const MIN_EVENT_QUESTION_BYTES: usize = 64;

/// The open questions as an event carries them: every one, texts cut to share
/// [`EVENT_QUESTIONS_BYTES`].
fn clip_questions(mut groups: Vec<AgentClarifications>) -> Vec<AgentClarifications> {
    let n: usize = groups.iter().map(|g| g.items.len()).sum();
    let share = (EVENT_QUESTIONS_BYTES / n.max(1)).max(MIN_EVENT_QUESTION_BYTES);
    for item in groups.iter_mut().flat_map(|g| g.items.iter_mut()) {
        item.question = parley_protocol::clip_text(&item.question, share);
    }
    groups
}

/// A small deterministic PRNG (SplitMix64) for the random critique topology: seeded from
/// the debate id and the round, so every coordinator draws the same pairs.
struct SplitMix64(u64);

impl SplitMix64 {
    fn seeded(debate_id: &str, round: u32) -> Self {
        // FNV-1a over the id and the round: stable across builds and platforms.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in debate_id.bytes().chain(round.to_le_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Self(h)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` ≥ 1; the modulo bias is negligible for agent counts).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
