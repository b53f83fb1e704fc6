//! Publishing a debate's events to its JetStream stream, and the headers every publish
//! carries.

use std::time::Duration;

use async_nats::jetstream;
use async_nats::HeaderMap;
use parley_protocol::{preview, subjects, SCHEMA_VERSION};
use ractor::ActorProcessingErr;

use crate::deps::Deps;

/// Publishes one event with `Nats-Msg-Id = <id>/event/<seq>` (a re-publish within the
/// stream's duplicate window is dropped by JetStream).
pub async fn publish_event(
    js: &jetstream::Context,
    event: &parley_protocol::DebateEvent,
) -> Result<jetstream::context::PublishAckFuture, ActorProcessingErr> {
    let id = &event.debate_id;
    let body = serde_json::to_vec(event)?;
    let msg_id = format!("{id}/event/{}", event.seq);
    Ok(js
        .publish_with_headers(subjects::events_subject(id), headers(&msg_id), body.into())
        .await?)
}

/// Publishes `events`, each waited for at most a few seconds; failures are logged.
pub async fn publish_best_effort(deps: &Deps, id: &str, events: &[parley_protocol::DebateEvent]) {
    for event in events {
        let published = async {
            let ack = publish_event(&deps.js, event).await?;
            ack.await.map_err(ActorProcessingErr::from)
        };
        match tokio::time::timeout(Duration::from_secs(5), published).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(debate = %id, error = %e, "cannot publish an event"),
            Err(_) => tracing::warn!(debate = %id, "timed out publishing an event"),
        }
    }
}

/// The headers of every publish: `Nats-Msg-Id` (deduplication) and the schema version.
pub fn headers(msg_id: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    // Ids are validated (`[A-Za-z0-9_-]`), so this holds; still, a header value is never
    // built with a panicking conversion.
    match msg_id.parse::<async_nats::HeaderValue>() {
        Ok(v) => h.insert("Nats-Msg-Id", v),
        Err(_) => {
            tracing::warn!(msg_id = %preview(msg_id, 200), "a message id that is not a header value; sent without deduplication")
        }
    }
    h.insert(
        subjects::HEADER_SCHEMA_VERSION,
        SCHEMA_VERSION.to_string().as_str(),
    );
    h
}
