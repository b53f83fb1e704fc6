//! Wire types shared by every Parley process.
//!
//! # Layout
//! - [`calibration`]: estimates that learn: the completion tokens past calls used, per
//!   provider/model and kind of call, and what an estimate makes of them ([`calibration::Basis`]).
//! - [`config`]: the dialectic-compatible debate configuration (`agents`, `judge`, `debate`)
//!   and the per-provider limits operators set.
//! - [`context_files`]: [`ContextFiles`], the `--context DIR` snapshot a spec carries for
//!   the agents' tools (and where it is stored so tasks need not copy it).
//! - [`spec`]: [`DebateSpec`], the immutable description of one debate, its limits
//!   ([`limits`]) and validation ([`DebateSpec::validate_with`] under the operator's
//!   [`SubmissionPolicy`]).
//! - [`submission`]: decoding requests at the edge ([`decode_submission`],
//!   [`decode_debate_ref`]): refuses endpoints and credentials in a submission, reports
//!   every problem with its field, never panics.
//! - [`spend`]: what a debate spent ([`Spend`]) and its budget ([`Budget`],
//!   [`BudgetRecord`]).
//! - [`state`]: [`DebateState`], the saved debate in dialectic's camelCase shape.
//! - [`saved`]: reading a saved debate, Parley's or dialectic's ([`parse_saved_state`]).
//! - [`task`]: [`Task`] and [`TaskResult`], what the coordinator sends to workers and gets
//!   back, and the [`ResultNotice`] a worker publishes once a result is stored.
//! - [`event`]: [`DebateEvent`], the progress stream of a debate.
//! - [`evaluation`]: `parley.evals.submit`, evaluator calls run by the judge workers
//!   ([`decode_eval_request`]).
//! - [`fork`]: what a fork of a debate changes ([`ForkChanges`]) and the
//!   `parley.debates.fork` request.
//! - [`human`]: human participants (`provider: "human"`): their open tasks in the state
//!   and the `parley.debates.contribute` request that answers one.
//! - [`prices`]: model prices (a LiteLLM-format file, inline config entries) and the cost
//!   of a call; unknown without a price, 0 on `local`.
//! - [`retry`]: retries written once: which errors are retried, the exponential backoff and
//!   its jitter, and how the three retry layers (HTTP call, task attempt, redelivery)
//!   compose.
//! - [`shared_text`]: [`SharedText`], a string whose equal copies share one allocation
//!   (prompt texts, problem and context), serialized as a plain string.
//! - [`steering`]: steering a running debate ([`SteerCommand`]: pause, resume, guide,
//!   stop, extend), what the state records of it and the `parley.debates.steer` request.
//! - [`subjects`]: NATS subjects, header names and error replies.
//! - [`webhook`]: [`WebhookSubscription`], a debate's webhooks (which of the operator's
//!   endpoints, which events), and [`WebhookEvent`], the moments they are told about.
//! - [`status`]: the replies of `parley.debates.status`: a summary view, and the full state
//!   inline or in pages (so no reply outgrows NATS's `max_payload`).

pub mod calibration;
pub mod config;
pub mod context_files;
pub mod evaluation;
pub mod event;
pub mod fork;
pub mod human;
pub mod prices;
pub mod retry;
pub mod saved;
pub mod shared_text;
pub mod spec;
pub mod spend;
pub mod state;
pub mod status;
pub mod steering;
pub mod subjects;
pub mod submission;
pub mod task;
pub mod webhook;

pub use config::*;
pub use context_files::*;
pub use evaluation::*;
pub use event::*;
pub use fork::*;
pub use human::*;
pub use prices::{add_cost, format_cost, ModelPrice, PriceError, PriceTable};
pub use saved::*;
pub use shared_text::SharedText;
pub use spec::*;
pub use spend::*;
pub use state::*;
pub use status::*;
pub use steering::*;
pub use submission::*;
pub use task::*;
pub use webhook::{WebhookEvent, WebhookSubscription};

/// Version of every message and checkpoint this build writes. Readers refuse other versions
/// with a clear error instead of misreading them.
pub const SCHEMA_VERSION: u32 = 1;

fn default_schema_version() -> u32 {
    SCHEMA_VERSION
}
