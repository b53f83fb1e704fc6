//! The typed settings of each service: one struct per service (and one for the keys every
//! service takes). A field is a key of the settings file; its doc comment is the key's
//! reference (the flag's help, the reference page), its default is written once, in the
//! struct's `Default`. Flag and variable names follow from the key (`max_followers`:
//! `--max-followers`, `PARLEY_MAX_FOLLOWERS`), see [`super::reference`].
//!
//! Two schema extensions say what the type does not: `x-value` names a flag's value
//! (`FILE` marks a path, relative to the settings file when the file sets it), and
//! `x-default` describes a default that is not a value (a key whose absence means
//! something).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::DurationSetting;

/// Keys every service takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CommonSettings {
    /// NATS server URL (`nats://`, `tls://`; may carry `user:password@` or `token@`), or
    /// several separated by commas (the servers of one cluster: the client fails over
    /// between them).
    #[schemars(extend("x-value" = "URL"))]
    pub nats_url: String,
    /// NATS credentials file: a `.creds` file (JWT + seed) or an NKey seed file.
    #[schemars(extend(
        "x-value" = "FILE",
        "x-default" = "none: the URL's credentials, if any"
    ))]
    pub nats_creds: Option<PathBuf>,
    /// Inbox prefix of this service's NATS replies (the only subjects its NATS user may
    /// receive replies on).
    #[schemars(extend(
        "x-value" = "PREFIX",
        "x-default" = "the role's: `_INBOX_coordinator`, `_INBOX_agent_worker`, `_INBOX_judge_worker`"
    ))]
    pub nats_inbox_prefix: Option<String>,
    /// Redis URL (`redis://`, `rediss://`; may carry credentials), or the sentinels of a
    /// replicated Redis: `redis+sentinel://[:password@]host:26379[,host:26379...]/<master
    /// name>[/db]`, or nodes of a Redis Cluster: `redis+cluster://[:password@]host:6379[,...]`
    /// (`rediss+cluster://` with TLS).
    #[schemars(extend("x-value" = "URL"))]
    pub redis_url: String,
    /// Address of `/metrics`, `/healthz` and `/readyz`, or `off`.
    #[schemars(extend("x-value" = "ADDR"))]
    pub metrics_addr: String,
    /// LiteLLM-format price file (`model_prices_and_context_window.json`): what each call
    /// costs.
    #[schemars(extend(
        "x-value" = "FILE",
        "x-default" = "none: only `local` has a cost (0), other models' are unknown"
    ))]
    pub prices: Option<PathBuf>,
    /// Replicas of the JetStream streams and the result-stash bucket (1 to 5, at most the
    /// JetStream servers): 3 on a 3-node JetStream cluster, so a stream survives the loss
    /// of one node.
    #[schemars(extend("x-value" = "N"))]
    pub stream_replicas: usize,
    /// Redis replicas every checkpoint and result write waits for (`WAIT`, up to 500 ms)
    /// before it counts as done, so it survives a failover: one replication round trip
    /// per write (at most 16).
    #[schemars(extend("x-value" = "N"))]
    pub redis_min_replicas: usize,
}

impl Default for CommonSettings {
    fn default() -> Self {
        Self {
            nats_url: "nats://127.0.0.1:4222".into(),
            nats_creds: None,
            nats_inbox_prefix: None,
            redis_url: "redis://127.0.0.1:6379".into(),
            metrics_addr: parley_telemetry::DEFAULT_METRICS_ADDR.into(),
            prices: None,
            stream_replicas: 1,
            redis_min_replicas: 0,
        }
    }
}

/// The coordinator's own keys (`parley-coordinator`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CoordinatorSettings {
    /// Debate ownership lease TTL in milliseconds: how long a crashed replica's debates
    /// wait before another replica takes them over (at least 500).
    #[schemars(extend("x-value" = "MS"))]
    pub lease_ttl_ms: u64,
    /// How long a finished (completed, failed, cancelled) debate stays in Redis: seconds,
    /// or a number with s, m, h or d; 0 keeps it forever.
    #[schemars(extend("x-value" = "DURATION"))]
    pub retention: DurationSetting,
    /// Seconds added to each task's timeout to make its deadline (the time a task may wait
    /// in the queue plus the worker's patience with Redis and NATS): past it the task is
    /// presumed lost and dispatched again as a new attempt (at least 1).
    #[schemars(extend("x-value" = "SECS"))]
    pub task_deadline_margin_secs: u64,
    /// Drain deadline in seconds: after SIGTERM / ctrl-c the coordinator stops its debates,
    /// releases their leases and exits within it, whatever the state of NATS and Redis (at
    /// least 1).
    #[schemars(extend("x-value" = "SECS"))]
    pub drain_secs: u64,
    /// The operator's debate configuration (the workers' file): its `providers` section's
    /// `allowedModels` are enforced when a debate is submitted.
    #[schemars(extend("x-value" = "FILE", "x-default" = "none: any model"))]
    pub config: Option<PathBuf>,
    /// Cap on any participant's `maxTokens` (at least 1).
    #[schemars(extend("x-value" = "N"))]
    pub max_tokens: u32,
    /// Cap on one debate's spend in dollars; a debate without a budget gets it as its
    /// budget.
    #[schemars(extend("x-value" = "USD", "x-default" = "none"))]
    pub max_debate_usd: Option<f64>,
    /// Cap on one debate's spend in tokens; a debate without a budget gets it as its
    /// budget.
    #[schemars(extend("x-value" = "N", "x-default" = "none"))]
    pub max_debate_tokens: Option<u64>,
    /// Requests handled at once; more are answered `unavailable` (at least 1).
    #[schemars(extend("x-value" = "N"))]
    pub max_pending_requests: usize,
    /// Event followers (consumers clients read a debate's events from) open at once, for
    /// the whole cluster; past it `parley.debates.follow` answers `unavailable`. The
    /// `PARLEY` account allows 1,000 consumers; the rest is headroom for the workers'
    /// consumers and the page's list (at least 1).
    #[schemars(extend("x-value" = "N"))]
    pub max_followers: usize,
    /// Seconds a debate waits for answers to its clarification questions; then every open
    /// question is answered "NA" and the debate goes on, so a debate nobody answers does
    /// not hold its keys forever (at least 1; 86400 is a day).
    #[schemars(extend("x-value" = "SECS"))]
    pub clarification_timeout_secs: u64,
    /// Seconds a debate's actor stays in memory while the debate only waits (tasks in
    /// flight, questions unanswered); then the debate goes to rest, a few hundred bytes,
    /// and wakes on its next message; 0: never.
    #[schemars(extend("x-value" = "SECS"))]
    pub rest_after_secs: u64,
    /// Ed25519 key file that signs each settled debate's decision record (base64 of a
    /// 32-byte seed; `parley record --generate-key DIR` makes one).
    #[schemars(extend("x-value" = "FILE", "x-default" = "none: records are unsigned"))]
    pub record_signing_key: Option<PathBuf>,
}

impl Default for CoordinatorSettings {
    fn default() -> Self {
        Self {
            lease_ttl_ms: 10_000,
            retention: DurationSetting::Text("7d".into()),
            task_deadline_margin_secs: 300,
            drain_secs: 10,
            config: None,
            max_tokens: parley_protocol::limits::DEFAULT_MAX_TOKENS,
            max_debate_usd: None,
            max_debate_tokens: None,
            max_pending_requests: 256,
            max_followers: 512,
            clarification_timeout_secs: 24 * 3600,
            rest_after_secs: 30,
            record_signing_key: None,
        }
    }
}

/// A worker's own keys (`parley-agent-worker`, `parley-judge-worker`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct WorkerSettings {
    /// The operator's debate configuration JSON: its `baseUrl` (the default
    /// OpenAI-compatible endpoint) and `providers` (per provider: `baseUrl`,
    /// `allowedModels`, rate limits shared by every replica).
    #[schemars(extend(
        "x-value" = "FILE",
        "x-default" = "none: the built-in endpoints, no limits"
    ))]
    pub config: Option<PathBuf>,
    /// Tasks run at once (at least 1).
    #[schemars(extend("x-value" = "N"))]
    pub concurrency: usize,
    /// Drain deadline in seconds: after SIGTERM / ctrl-c the worker exits within it,
    /// letting in-flight tasks finish until shortly before it and handing the rest back
    /// (at least 1).
    #[schemars(extend("x-value" = "SECS"))]
    pub drain_secs: u64,
    /// JetStream ack wait of the task consumer in seconds (used when this worker creates
    /// it): how soon a crashed worker's tasks are redelivered (at least 1).
    #[schemars(extend("x-value" = "SECS"))]
    pub ack_wait_secs: u64,
    /// The most completion tokens one LLM call may ask for: a task's `maxTokens` above it,
    /// or none (an evaluation, a participant without one), is sent as this; the
    /// `providers` section may set lower caps per provider and model (at least 1).
    #[schemars(extend("x-value" = "N"))]
    pub max_tokens: u32,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            config: None,
            concurrency: 8,
            drain_secs: 20,
            ack_wait_secs: 30,
            max_tokens: parley_protocol::limits::DEFAULT_MAX_TOKENS,
        }
    }
}
