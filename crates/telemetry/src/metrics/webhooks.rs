//! The metrics of webhook deliveries (`parley serve --webhooks`).

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::Metrics;

label_enum!(
    /// How one HTTP attempt of a webhook delivery ended.
    WebhookAttempt {
        /// The endpoint answered 2xx.
        Ok => "ok",
        /// The endpoint answered another status (a redirect counts here: none is followed).
        Status => "status",
        /// No answer: connection refused or reset, TLS, timeout.
        Network => "network",
        /// Not sent: the target resolved to an address the operator did not allow.
        Refused => "refused",
    }
);

label_enum!(
    /// How one webhook message ended.
    WebhookResult {
        /// An attempt was answered 2xx.
        Delivered => "delivered",
        /// Every attempt within the retry window failed: the message was given up.
        GaveUp => "gave_up",
    }
);

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct AttemptLabels {
    outcome: WebhookAttempt,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ResultLabels {
    result: WebhookResult,
}

/// The webhook families, registered in `registry`, every series at 0.
pub(super) struct WebhookFamilies {
    attempts: Family<AttemptLabels, Counter>,
    messages: Family<ResultLabels, Counter>,
}

impl WebhookFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let attempts: Family<AttemptLabels, Counter> = Family::default();
        registry.register(
            "parley_webhook_attempts",
            "HTTP attempts of webhook deliveries, by outcome",
            Family::clone(&attempts),
        );
        let messages: Family<ResultLabels, Counter> = Family::default();
        registry.register(
            "parley_webhook_messages",
            "Webhook messages finished, delivered or given up after the retry window",
            Family::clone(&messages),
        );
        for outcome in [
            WebhookAttempt::Ok,
            WebhookAttempt::Status,
            WebhookAttempt::Network,
            WebhookAttempt::Refused,
        ] {
            drop(attempts.get_or_create(&AttemptLabels { outcome }));
        }
        for result in [WebhookResult::Delivered, WebhookResult::GaveUp] {
            drop(messages.get_or_create(&ResultLabels { result }));
        }
        Self { attempts, messages }
    }
}

impl Metrics {
    /// One HTTP attempt of a webhook delivery ended with `outcome`.
    pub fn webhook_attempt(&self, outcome: WebhookAttempt) {
        self.inner
            .webhooks
            .attempts
            .get_or_create(&AttemptLabels { outcome })
            .inc();
    }

    /// A webhook message was delivered or given up.
    pub fn webhook_message(&self, result: WebhookResult) {
        self.inner
            .webhooks
            .messages
            .get_or_create(&ResultLabels { result })
            .inc();
    }
}
