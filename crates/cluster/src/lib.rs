//! The runtime the cluster's services share: the coordinator and both worker kinds build on
//! it. It holds plumbing only — no debate logic (that is `parley-coordinator`'s engine) and no
//! LLM calls (that is `parley-llm`).
//!
//! # Layout
//! - [`redis_store`]: the Redis checkpoint store ([`RedisStore`]) and its Lua scripts: spec,
//!   versioned state (compare-and-set), task results, leases, task claims, idempotency keys;
//!   in [`redis_store::lifecycle`] what keeps a debate finite: task bodies by reference,
//!   results bound to their debate, the cancel mark, the failure count, retention, status
//!   snapshots, dead letters.
//! - [`redis_conn`]: the Redis connection of the services: one server, or the master of a
//!   Sentinel deployment found again after a failover (`redis+sentinel://` URLs).
//! - [`streams`]: the JetStream streams (with their limits) and durable consumers, created
//!   if missing.
//! - [`settings`]: layered service settings (defaults → TOML file → `PARLEY_*` → flags),
//!   validated once with every problem named by key; one typed struct per service
//!   (`settings::services`), from which `settings::reference` makes the flags, the sample
//!   file and the reference page.
//! - [`service`]: start-up and shutdown of a service process: connect NATS + Redis, serve
//!   `/metrics` `/healthz` `/readyz`, cancel a token on SIGTERM / ctrl-c (a second signal
//!   exits at once), the exit status of a drain ([`DrainIncomplete`], [`exit_service`]).
//! - [`task_span`]: the `task` span every task run opens (from `parley-telemetry`).
//! - [`nats`]: connecting with credentials (URL user/password or token, `.creds` / NKey
//!   seed file), a per-role inbox prefix, URLs redacted in messages.
//! - [`events`]: following a debate's events as a client through a consumer the
//!   coordinator creates (`parley.debates.follow` / `list`), and creating those consumers.
//! - [`status`]: a debate's full state read as a client: inline or in pages, put back
//!   together.
//! - [`dispatch`]: dispatch tokens (HMAC of task id and attempt under a per-debate secret)
//!   that let a worker refuse a task the coordinator did not send.
//!
//! Dependencies point one way: binaries → services (`parley-coordinator`,
//! `parley-worker`) → this crate → `parley-protocol`.

pub mod checkpoint_delta;
pub mod dispatch;
pub mod events;
pub mod nats;
pub mod redis_conn;
pub mod redis_store;
pub mod service;
pub mod settings;
pub mod status;
pub mod streams;

pub use nats::NatsEndpoint;
pub use parley_telemetry::task_span;
pub use redis_conn::RedisConnection;
pub use redis_store::RedisStore;
pub use service::{
    cancel_on_signal, connect_backends, exit_service, init_telemetry, serve_health, start_service,
    unless_shutdown, DrainIncomplete,
};
