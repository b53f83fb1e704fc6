//! Webhooks: a debate's moments (completed, failed, waiting for answers, degraded) posted
//! to the operator's allowed endpoints, signed the Standard Webhooks way, retried with
//! backoff for a bounded time, at least once and in order per debate, from a durable
//! outbox.
//!
//! # Layout
//! - [`endpoints`]: the operator's allow-list file (URLs, secrets, the operator's own
//!   subscriptions, which endpoints may be on private networks) and the checks of a
//!   debate's `webhooks`.
//! - [`sign`]: Standard Webhooks signatures (`whsec_` secrets, `v1,` HMAC-SHA256).
//! - [`address`]: which addresses a delivery may connect to (global ones, unless the
//!   endpoint is listed with `private_network`), checked on the resolved address.
//! - [`deliver`]: the payload, one bounded signed attempt, the retries.
//! - [`outbox`]: the embedded outbox (the debate's event log and a cursor beside it).
//! - [`jetstream`]: the cluster's outbox (a durable consumer of the events stream).

pub mod address;
pub mod deliver;
pub mod endpoints;
pub mod jetstream;
pub mod outbox;
pub mod sign;

pub use address::Refused;
pub use deliver::{AttemptError, ClientError, Message, Sender};
pub use endpoints::{Endpoint, Endpoints, EndpointsError, EntryProblem, NotListed, UrlError};
pub use outbox::{EventLog, Outbox};
pub use sign::{Secret, SecretError};

use parley_protocol::WebhookSubscription;

/// Why a debate's subscriptions, events or delivery cursor could not be read or written
/// now: the implementor's own error (an I/O error, a backend's reply), kept whole so a
/// caller can downcast it ([`std::error::Error::source`]). The delivery logs it and tries
/// the debate again later.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StoreError(Box<dyn std::error::Error + Send + Sync>);

impl StoreError {
    /// Wraps an error (or a message: `&str` and `String` convert too).
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }

    /// The implementor's error.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self.0.as_ref()
    }
}

/// Where a debate's subscriptions are read from (its state).
#[async_trait::async_trait]
pub trait Subscriptions: Send + Sync + 'static {
    /// The debate's `webhooks`; an error when its state cannot be read now.
    async fn subscriptions(&self, id: &str) -> Result<Vec<WebhookSubscription>, StoreError>;
}
