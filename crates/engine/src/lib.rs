//! The debate engine: the pure state machine, its task graph, budgets, the embedded driver
//! and the file store.
//!
//! Everything here runs in one process and does no network I/O of its own: the distributed
//! coordinator (`parley-coordinator`) drives the same [`Machine`] from its actors, with a
//! Redis store and NATS around it; the CLI and the web server drive it in-process with
//! [`run_debate_until`] and a [`FileStore`]. This crate has no NATS, Redis or actor
//! dependency (`scripts/check-house.sh` checks it).
//!
//! # Layout
//! - [`machine`]: the pure debate state machine ([`Machine`]): inputs in, effects out.
//!   `machine/mod.rs` holds the types and `handle`, which hands each [`Input`] to one
//!   method; each concern is a file with its own `impl Machine` block:
//!   - `lifecycle`: start, user retry, cancel, abort, resume, completion, rest;
//!   - `results`: task results and failures (retry budget, backoff, dropped critiques),
//!     which results are expected;
//!   - `rounds`: dispatching what the plan wants, opening rounds, carrying refinements
//!     over, termination, critique topologies;
//!   - `deadlines`: attempt deadlines, the clock, lost messages;
//!   - `budget`: fitting each call's completion cap to what is left, reservations,
//!     settlement, overruns, the degradation steps;
//!   - `clarifications`: questions, answers, follow-up iterations, the timeout;
//!   - `steering`: the user's pause, resume, guide notes, stop and extend;
//!   - `adaptive`: per-round verdicts, similarities, the adaptive screen and its path;
//!   - `voting`: votes, the tally, completing the judge's solution;
//!   - `summaries`: histories, transcripts, when a summary is due;
//!   - `events`: events, node entries, warnings, progress;
//!   - `graph`: the task graph, one table of node kinds;
//!   - `tests`: the unit tests, one file per concern, shared fixtures in `tests/mod.rs`.
//! - [`budget`]: what a call costs in tokens and dollars ([`Pricing`]: the prompt bound,
//!   the completion floors, fitting a cap to a room) and the admission of a debate with a
//!   budget.
//! - [`driver`]: runs a machine in-process against a [`TaskRunner`] (the embedded mode),
//!   with bounded concurrency, per-task timeouts, retry timers, a checkpoint after every
//!   transition, a failed result for a task that panics, and a bounded stop on interrupt.
//! - [`fork`]: a new debate sharing a debate's contributions up to a round ([`fork()`]).
//! - [`store`]: the checkpoint store of the embedded mode ([`FileStore`] for
//!   `./debates/<id>.json`, spec included so the file alone continues the debate).
//! - [`tokens`]: prompt tokens with the model's own tokenizer (OpenAI families) or a token
//!   per byte, as budgets and estimates count them.
//! - [`trace`]: the spans of a debate (`debate` → `node`), opened by whoever drives it.

pub mod budget;
pub mod driver;
pub mod fork;
pub mod machine;
pub mod store;
pub mod tokens;
pub mod trace;

pub use budget::Pricing;
pub use driver::{
    run_debate, run_debate_controlled, run_debate_steered, run_debate_until, ContributeCall,
    Controls, Driven, SteerCall, TaskRunner,
};
pub use fork::{fork, ForkError};
pub use machine::{
    AnswerError, Contribute, ContributeError, Effect, Expectation, Input, Machine, Runtime, Steer,
    SteerError, MAX_TASK_TIMEOUT, RUNNING_RETRY_INTERVAL_SECS,
};
pub use store::{answer_saved, AnswerSavedError, FileStore, LoadError};
