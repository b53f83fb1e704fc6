//! What every debate actor needs ([`Deps`]), shared by the actors and their supervisor.

use std::time::Duration;

use async_nats::jetstream;
use parley_cluster::RedisStore;

/// What every debate actor needs; shared.
pub struct Deps {
    pub store: RedisStore,
    /// Completion samples for the estimates, written in batches.
    pub samples: std::sync::Arc<parley_cluster::redis_store::calibration::CompletionSamples>,
    pub js: jetstream::Context,
    /// To tell an outage from a poison debate when an actor fails.
    pub nats: async_nats::Client,
    /// This coordinator's lease token.
    pub owner: String,
    pub lease_ttl: Duration,
    /// Lease renewal and result polling period.
    pub poll_every: Duration,
    /// Added to each task's timeout to make its deadline.
    pub task_deadline_margin: Duration,
    /// How long finished debates' keys stay in Redis (`None`: forever).
    pub retention: Option<Duration>,
    /// Failed adoptions (see the module docs) after which a debate is failed.
    pub max_actor_failures: u32,
    /// How long a debate waits for clarification answers (`None`: as long as it takes).
    pub clarification_timeout: Option<Duration>,
    /// Prices and the completion cap a budgeted debate reserves with.
    pub pricing: parley_engine::Pricing,
    /// An actor idle this long while its debate only waits puts it to rest (`None`: never).
    pub rest_after: Option<Duration>,
    /// Signs the decision record of each settled debate (`--record-signing-key`).
    pub record_signing_key: Option<std::sync::Arc<parley_record::SigningKey>>,
}

/// Failed adoptions after which a debate is failed, by default.
pub const DEFAULT_MAX_ACTOR_FAILURES: u32 = 3;
