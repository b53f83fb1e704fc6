//! The debate coordinator: the state machine and the drivers that run it.
//!
//! # Layout
//! - [`machine`]: the pure debate state machine ([`Machine`]): inputs in, effects out.
//! - [`driver`]: runs a machine in-process against a [`TaskRunner`] (the embedded mode),
//!   with bounded concurrency, per-task timeouts, retry timers and a checkpoint after every
//!   transition.
//! - [`store`]: checkpoint stores ([`FileStore`] for `./debates/<id>.json`).
//! - [`redis_store`]: the Redis checkpoint store of the distributed mode ([`RedisStore`]):
//!   spec, versioned state, results, leases.
//! - [`streams`]: the JetStream streams and consumers, created if missing.
//! - [`actor`]: the distributed driver: one ractor actor per debate under a supervisor,
//!   leases, checkpoints (CAS) before effects, result polling. Its runtime semantics are
//!   documented there.
//! - [`service`]: the coordinator NATS service (`run(config, shutdown)`): submit, status,
//!   retry, cancel, result routing, takeover scan. `main.rs` is a thin binary over it.

pub mod actor;
pub mod driver;
pub mod machine;
pub mod redis_store;
pub mod service;
pub mod settings;
pub mod store;
pub mod streams;
pub mod telemetry;
pub mod trace;

pub use driver::{run_debate, TaskRunner};
pub use machine::{Effect, Input, Machine};
pub use redis_store::RedisStore;
pub use store::FileStore;

#[cfg(test)]
mod tests;
