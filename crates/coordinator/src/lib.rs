//! The debate engine and the coordinator service.
//!
//! Here: the pure state machine, the embedded driver and its file store, and the
//! distributed coordinator (actors, NATS request subjects, leases). Not here: the runtime the
//! coordinator shares with the workers (Redis store, JetStream streams, settings, service
//! start-up, the task span) — that is `parley-cluster`, which this crate builds on.
//!
//! # Layout
//! - [`machine`]: the pure debate state machine ([`Machine`]): inputs in, effects out.
//! - [`driver`]: runs a machine in-process against a [`TaskRunner`] (the embedded mode),
//!   with bounded concurrency, per-task timeouts, retry timers, a checkpoint after every
//!   transition, a failed result for a task that panics, and a bounded stop on interrupt.
//! - [`store`]: checkpoint stores ([`FileStore`] for `./debates/<id>.json`, spec included
//!   so the file alone continues the debate).
//! - [`trace`]: the spans of a debate (`debate` → `node`), opened by whoever drives it.
//! - [`actor`]: the distributed driver: one ractor actor per active debate, checkpoints
//!   (CAS) before effects, result polling. Its runtime semantics are documented there.
//! - [`supervisor`]: the registry of a coordinator's debates, one lease renewal pass for
//!   all of them, and debates at rest (no actor while they only wait).
//! - [`follow`]: creating event followers on request, under caps held in Redis.
//! - [`service`]: the coordinator NATS service (`run(config, shutdown)`): submit, status,
//!   retry, cancel, result routing, takeover scan. `main.rs` is a thin binary over it.

pub mod actor;
pub mod budget;
pub mod decision_record;
pub mod driver;
pub mod follow;
pub mod machine;
pub mod service;
pub mod store;
pub mod supervisor;
pub mod trace;

pub use budget::Pricing;
pub use driver::{run_debate, run_debate_until, Driven, TaskRunner};
pub use machine::{AnswerError, Effect, Expectation, Input, Machine, Runtime};
pub use store::{answer_saved, AnswerSavedError, FileStore, LoadError};

#[cfg(test)]
mod adaptive_tests;
#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod clarify_tests;
#[cfg(test)]
mod deadline_tests;
#[cfg(test)]
mod similarity_tests;
#[cfg(test)]
mod tests;
