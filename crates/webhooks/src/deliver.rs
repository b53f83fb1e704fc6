//! Sending one webhook message: the payload, the signed request, the bounds, the retries.
//!
//! - The payload (Standard Webhooks' shape): `{"type": "debate.completed", "timestamp":
//!   the event's time, "data": {"debateId", "seq", "status", "event": the debate event}}`.
//!   `webhook-id` is `msg_<debate id>_<seq>`: the same for every attempt, so a receiver
//!   drops a duplicate by it; `webhook-timestamp` is the attempt's time (Unix seconds).
//! - Bounds: a connect timeout, a whole-request timeout, no redirect followed (a 3xx is a
//!   failed attempt), no proxy, the response body never read (only its status matters),
//!   the target's addresses checked when connecting ([`crate::address`]).
//! - Retries: any answer but 2xx, and any network error, is retried with exponential
//!   backoff and jitter (1 s doubling to 10 min) until the operator's `retry_for_secs`
//!   window since the first attempt has passed; then the message is given up (logged,
//!   counted) and the debate's next message goes on. A target refused by the address
//!   check is retried the same way (DNS may change), never sent.

use std::time::{Duration, Instant};

use parley_protocol::{DebateEvent, WebhookEvent};
use parley_telemetry::{metrics, WebhookAttempt, WebhookResult};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::address::{check_literal, Guarded, Refused};
use crate::endpoints::Endpoint;

/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one attempt may take, connecting included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// The first retry's delay (before jitter); it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// One message, ready to sign and send.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// `webhook-id`.
    pub id: String,
    pub kind: WebhookEvent,
    pub debate_id: String,
    pub seq: u64,
    /// The JSON payload.
    pub body: Vec<u8>,
}

impl Message {
    /// The message of `event`, if its kind is one webhooks are told about.
    pub fn of(event: &DebateEvent) -> Option<Self> {
        let kind = WebhookEvent::of(event)?;
        let body = json!({
            "type": kind.type_name(),
            "timestamp": event.at,
            "data": {
                "debateId": event.debate_id,
                "seq": event.seq,
                "status": event.status,
                "event": event,
            }
        });
        Some(Self {
            id: format!("msg_{}_{}", event.debate_id, event.seq),
            kind,
            debate_id: event.debate_id.clone(),
            seq: event.seq,
            body: body.to_string().into_bytes(),
        })
    }
}

/// Why an attempt failed (a message for the log; it names no secret).
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    #[error("answered {0}")]
    Status(u16),
    #[error("refused: {0}")]
    Refused(#[from] Refused),
    #[error("{0}")]
    Network(String),
}

/// The delivery HTTP client could not be built (the TLS backend did not start).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the webhook HTTP client: {0}")]
pub struct ClientError(#[source] reqwest::Error);

/// The HTTP clients of deliveries (one that connects only to global addresses, one that
/// may connect anywhere, for endpoints listed with `private_network`).
#[derive(Clone)]
pub struct Sender {
    strict: reqwest::Client,
    open: reqwest::Client,
}

impl Sender {
    pub fn new() -> Result<Self, ClientError> {
        let build = |private_network: bool| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(REQUEST_TIMEOUT)
                .user_agent("parley-webhooks")
                .dns_resolver(std::sync::Arc::new(Guarded { private_network }))
                .build()
                .map_err(ClientError)
        };
        Ok(Self {
            strict: build(false)?,
            open: build(true)?,
        })
    }

    /// One attempt: signs `message` for `endpoint` now and posts it.
    pub async fn attempt(
        &self,
        endpoint: &Endpoint,
        message: &Message,
    ) -> Result<(), AttemptError> {
        let result = self.post(endpoint, message).await;
        metrics().webhook_attempt(match &result {
            Ok(()) => WebhookAttempt::Ok,
            Err(AttemptError::Status(_)) => WebhookAttempt::Status,
            Err(AttemptError::Refused(_)) => WebhookAttempt::Refused,
            Err(AttemptError::Network(_)) => WebhookAttempt::Network,
        });
        result
    }

    async fn post(&self, endpoint: &Endpoint, message: &Message) -> Result<(), AttemptError> {
        check_literal(&endpoint.url, endpoint.private_network)?;
        let client = if endpoint.private_network {
            &self.open
        } else {
            &self.strict
        };
        let timestamp = chrono::Utc::now().timestamp();
        let signature = endpoint.secret.sign(&message.id, timestamp, &message.body);
        let reply = client
            .post(endpoint.url.clone())
            .header("content-type", "application/json")
            .header("webhook-id", &message.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(message.body.clone())
            .send()
            .await
            .map_err(|e| {
                // The resolver's refusal travels as the error's source.
                let mut source: Option<&dyn std::error::Error> = Some(&e);
                while let Some(s) = source {
                    if let Some(r) = s.downcast_ref::<Refused>() {
                        return AttemptError::Refused(r.clone());
                    }
                    source = s.source();
                }
                AttemptError::Network(error_chain(&e.without_url()))
            })?;
        // The body is never read: dropping the reply closes it, however large.
        let status = reply.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(AttemptError::Status(status.as_u16()))
        }
    }

    /// Sends `message` to `endpoint` until it is taken (2xx) or `retry_for` has passed
    /// since the first attempt. Returns whether it was delivered; `None` when `stop` was
    /// cancelled first (the message stays in the outbox).
    pub async fn deliver(
        &self,
        endpoint: &Endpoint,
        message: &Message,
        retry_for: Duration,
        stop: &CancellationToken,
    ) -> Option<bool> {
        let started = Instant::now();
        let mut step = 0u32;
        loop {
            let attempt = tokio::select! {
                r = self.attempt(endpoint, message) => r,
                () = stop.cancelled() => return None,
            };
            match attempt {
                Ok(()) => {
                    metrics().webhook_message(WebhookResult::Delivered);
                    tracing::debug!(endpoint = %endpoint.origin(), id = %message.id, "webhook delivered");
                    return Some(true);
                }
                Err(e) => {
                    let wait = Duration::from_millis(parley_protocol::retry::jitter_ms(
                        parley_protocol::retry::exponential_ms(
                            FIRST_BACKOFF.as_millis() as u64,
                            MAX_BACKOFF.as_millis() as u64,
                            step,
                        ),
                    ));
                    step = step.saturating_add(1);
                    if started.elapsed() + wait > retry_for {
                        metrics().webhook_message(WebhookResult::GaveUp);
                        tracing::warn!(
                            endpoint = %endpoint.origin(), id = %message.id, error = %e,
                            "webhook given up after its retry window"
                        );
                        return Some(false);
                    }
                    tracing::info!(
                        endpoint = %endpoint.origin(), id = %message.id, error = %e,
                        retry_in_ms = wait.as_millis() as u64, "webhook attempt failed"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = stop.cancelled() => return None,
                    }
                }
            }
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    parley_protocol::clip_text(&text, 512)
}
