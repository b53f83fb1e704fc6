//! Wire types shared by every Parley process.
//!
//! # Layout
//! - [`config`]: the dialectic-compatible debate configuration (`agents`, `judge`, `debate`)
//!   and the per-provider limits operators set.
//! - [`spec`]: [`DebateSpec`], the immutable description of one debate, and its validation.
//! - [`state`]: [`DebateState`], the saved debate in dialectic's camelCase shape.
//! - [`task`]: [`Task`] and [`TaskResult`], what the coordinator sends to workers and gets back.
//! - [`event`]: [`DebateEvent`], the progress stream of a debate.
//! - [`subjects`]: NATS subjects, header names and error replies.
//! - [`status`]: the replies of `parley.debates.status`: a summary view, and the full state
//!   inline or in pages (so no reply outgrows NATS's `max_payload`).

pub mod config;
pub mod event;
pub mod spec;
pub mod state;
pub mod status;
pub mod subjects;
pub mod task;

pub use config::*;
pub use event::*;
pub use spec::*;
pub use state::*;
pub use status::*;
pub use task::*;

/// Version of every message and checkpoint this build writes. Readers refuse other versions
/// with a clear error instead of misreading them.
pub const SCHEMA_VERSION: u32 = 1;

fn default_schema_version() -> u32 {
    SCHEMA_VERSION
}
