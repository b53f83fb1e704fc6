//! The coordinator service: the distributed driver of the debate engine.
//!
//! Here: one ractor actor per active debate over the engine's [`parley_engine::Machine`],
//! the registry of a coordinator's debates with their leases, and the NATS request
//! subjects. Not here: the engine itself (`parley-engine`: the state machine, budgets, the
//! embedded driver) and the runtime the coordinator shares with the workers (Redis store,
//! JetStream streams, settings, service start-up — `parley-cluster`), which this crate
//! builds on.
//!
//! # Layout
//! - [`deps`]: what every debate actor needs ([`deps::Deps`]) and its defaults.
//! - [`messages`]: the messages of the debate actors and of the supervisor.
//! - [`failures`]: the failure policy of debate actors (which failures count against a
//!   debate) and counting them.
//! - [`publish`]: publishing a debate's events, and the headers of every publish.
//! - [`settle`]: a cancel or an abort applied to a debate without starting its actor.
//! - [`actor`]: the distributed driver: one ractor actor per active debate, checkpoints
//!   (CAS) before effects, result polling. Its runtime semantics are documented there.
//! - [`supervisor`]: the registry of a coordinator's debates, one lease renewal pass for
//!   all of them, and debates at rest (no actor while they only wait).
//! - [`follow`]: creating event followers on request, under caps held in Redis.
//! - [`service`]: the coordinator NATS service (`run(config, shutdown)`): submit, status,
//!   retry, cancel, result routing, takeover scan. `main.rs` is a thin binary over it.

pub mod actor;
pub mod decision_record;
pub mod deps;
pub mod failures;
pub mod follow;
pub mod messages;
pub mod publish;
pub mod service;
pub mod settle;
pub mod supervisor;
