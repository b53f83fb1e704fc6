//! The cluster's outbox: a durable JetStream consumer of the `PARLEY_EVENTS` stream.
//!
//! Every `parley serve --nats-url ... --webhooks FILE` replica binds the same durable pull
//! consumer ([`CONSUMER`], every debate's events, from the moment it was first created).
//! It allows one unacknowledged message at a time across all replicas
//! (`max_ack_pending = 1`), and a message is acknowledged only after each of its webhook
//! targets took it (or its retry window passed): so the stream position of the consumer
//! is the outbox cursor, kept by JetStream (replicated with the stream), and messages go
//! out in the stream's order, which is each debate's order. While a message is being
//! retried its holder tells JetStream it is still working on it (`+WPI`); if the holder is
//! killed, the message is delivered again after [`ACK_WAIT`] to whichever replica pulls
//! next, and nothing after it goes out first. Events no webhook wants are acknowledged at
//! once. The debate's subscriptions come from its state (a status request), cached.
//!
//! One message at a time for the whole cluster is the price of the global order: an
//! endpoint that keeps failing holds the others back for up to its retry window.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, AckKind};
use futures::StreamExt as _;
use parley_protocol::{DebateEvent, WebhookSubscription};
use tokio_util::sync::CancellationToken;

use crate::deliver::{Message, Sender};
use crate::endpoints::Endpoints;
use crate::{StoreError, Subscriptions};

/// The durable consumer's name.
pub const CONSUMER: &str = "parley-webhooks";
/// The stream of debate events.
pub const STREAM: &str = "PARLEY_EVENTS";
/// How long JetStream waits for an acknowledgement before it delivers a message again.
pub const ACK_WAIT: Duration = Duration::from_secs(10);
/// Debates whose subscriptions are cached, at most (the cache is emptied when full).
const MAX_CACHED: usize = 10_000;

fn config() -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(CONSUMER.to_string()),
        description: Some("parley serve: webhook deliveries, in order".into()),
        filter_subject: "parley.debates.*.events".into(),
        deliver_policy: consumer::DeliverPolicy::New,
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: ACK_WAIT,
        max_ack_pending: 1,
        max_deliver: -1,
        ..Default::default()
    }
}

/// Delivers the cluster's webhooks until `stop` is cancelled; reconnects the consumer
/// when it fails.
pub async fn run(
    client: async_nats::Client,
    endpoints: Arc<Endpoints>,
    sender: Sender,
    subs: Arc<dyn Subscriptions>,
    stop: CancellationToken,
) {
    let js = jetstream::new(client);
    let mut cache: HashMap<String, Vec<WebhookSubscription>> = HashMap::new();
    while !stop.is_cancelled() {
        match consume(&js, &endpoints, &sender, subs.as_ref(), &mut cache, &stop).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!("webhooks: the events consumer failed, binding it again: {e}");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = stop.cancelled() => return,
                }
            }
        }
    }
}

async fn consume(
    js: &jetstream::Context,
    endpoints: &Endpoints,
    sender: &Sender,
    subs: &dyn Subscriptions,
    cache: &mut HashMap<String, Vec<WebhookSubscription>>,
    stop: &CancellationToken,
) -> Result<(), String> {
    let stream = js
        .get_stream(STREAM)
        .await
        .map_err(|e| format!("stream {STREAM}: {e}"))?;
    let consumer: consumer::PullConsumer = stream
        .get_or_create_consumer(CONSUMER, config())
        .await
        .map_err(|e| format!("consumer {CONSUMER}: {e}"))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| format!("consumer {CONSUMER}: {e}"))?;
    tracing::info!("webhooks: delivering from the durable consumer {CONSUMER}");
    'messages: loop {
        let msg = tokio::select! {
            m = messages.next() => m,
            () = stop.cancelled() => return Ok(()),
        };
        let msg = match msg {
            Some(Ok(m)) => m,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("the message stream ended".into()),
        };
        // A message holds a transition's events: each is delivered in order, and the
        // message is acknowledged once all are (a redelivery sends them again; receivers
        // tell a repeat by its `webhook-id`).
        let events: Vec<DebateEvent> =
            parley_protocol::decode_event_message(&msg.payload).unwrap_or_default();
        for message in events.iter().filter_map(Message::of) {
            let hooks = match cached(cache, subs, &message.debate_id).await {
                Ok(h) => h,
                Err(e) => {
                    // Not acknowledged: tried again (the state may be unreachable now).
                    tracing::warn!(debate = %message.debate_id, "webhooks: subscriptions unreadable: {e}");
                    let _ = msg
                        .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                        .await;
                    continue 'messages;
                }
            };
            let targets = endpoints.targets(&hooks, message.kind);
            if !targets.is_empty() {
                let deliveries = futures::future::join_all(
                    targets
                        .iter()
                        .map(|t| sender.deliver(t, &message, endpoints.retry_for, stop)),
                );
                tokio::pin!(deliveries);
                let sent = loop {
                    tokio::select! {
                        sent = &mut deliveries => break sent,
                        () = tokio::time::sleep(ACK_WAIT / 3) => {
                            let _ = msg.ack_with(AckKind::Progress).await;
                        }
                    }
                };
                if sent.iter().any(Option::is_none) {
                    // Stopping: delivered again by whichever replica pulls next.
                    return Ok(());
                }
            }
        }
        // Acknowledged and confirmed before the next message: a lost acknowledgement would
        // be a duplicate delivery, never a skipped one.
        if let Err(e) = msg.double_ack().await {
            tracing::warn!("webhooks: acknowledgement not confirmed: {e}");
        }
    }
}

async fn cached(
    cache: &mut HashMap<String, Vec<WebhookSubscription>>,
    subs: &dyn Subscriptions,
    id: &str,
) -> Result<Vec<WebhookSubscription>, StoreError> {
    if let Some(h) = cache.get(id) {
        return Ok(h.clone());
    }
    let hooks = subs.subscriptions(id).await?;
    if cache.len() >= MAX_CACHED {
        cache.clear();
    }
    cache.insert(id.to_string(), hooks.clone());
    Ok(hooks)
}
