//! The debate coordinator: the state machine and the drivers that run it.
//!
//! # Layout
//! - [`machine`]: the pure debate state machine ([`Machine`]): inputs in, effects out.
//! - [`driver`]: runs a machine in-process against a [`TaskRunner`] (the embedded mode),
//!   with bounded concurrency, per-task timeouts, retry timers and a checkpoint after every
//!   transition.
//! - [`store`]: checkpoint stores ([`FileStore`] for `./debates/<id>.json`).

pub mod driver;
pub mod machine;
pub mod store;

pub use driver::{run_debate, TaskRunner};
pub use machine::{Effect, Input, Machine};
pub use store::FileStore;

#[cfg(test)]
mod tests;
