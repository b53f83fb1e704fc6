//! Publishing a debate's events to its JetStream stream, and the headers every publish
//! carries.

use std::time::Duration;

use async_nats::jetstream;
use async_nats::HeaderMap;
use parley_protocol::{
    decode_event_message, encode_event_messages, preview, subjects, SCHEMA_VERSION,
};
use ractor::ActorProcessingErr;

use crate::deps::Deps;

/// Room left in a message for its headers (message id, schema version, trace context).
const HEADER_ROOM: usize = 4 * 1024;

/// Publishes `events` (one debate's, in order: a transition's) on the debate's events
/// subject, as few messages as the server's `max_payload` allows (one, unless a
/// transition's events are larger than that), each with `Nats-Msg-Id =
/// <id>/events/<first seq>` (a re-publish within the stream's duplicate window is dropped
/// by JetStream). The acknowledgements, to wait for.
pub async fn publish_events(
    deps: &Deps,
    events: &[parley_protocol::DebateEvent],
) -> Result<Vec<jetstream::context::PublishAckFuture>, ActorProcessingErr> {
    let Some(first) = events.first() else {
        return Ok(Vec::new());
    };
    let id = &first.debate_id;
    let max = deps
        .nats
        .server_info()
        .max_payload
        .saturating_sub(HEADER_ROOM)
        .max(HEADER_ROOM);
    let mut acks = Vec::new();
    for m in encode_event_messages(events, max)? {
        let msg_id = format!("{id}/events/{}", m.first_seq);
        acks.push(
            deps.js
                .publish_with_headers(
                    subjects::events_subject(id),
                    headers(&msg_id),
                    m.body.into(),
                )
                .await?,
        );
    }
    Ok(acks)
}

/// Why the last stored event of a debate could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LastEventError {
    /// JetStream did not answer (no stream leader during an election, no responders, a
    /// timeout): an outage to wait out, never the debate's fault.
    #[error("cannot read the debate's last stored event: JetStream unavailable: {0}")]
    Unavailable(String),
    /// The stored event does not decode.
    #[error("the debate's last stored event does not decode: {0}")]
    Undecodable(#[from] serde_json::Error),
}

/// The sequence number of the last event of debate `id` the events stream holds (0 when
/// it holds none), read from the stream leader.
pub async fn last_stored_seq(js: &jetstream::Context, id: &str) -> Result<u64, LastEventError> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let stream = js
        .get_stream_no_info(subjects::EVENTS_STREAM)
        .await
        .map_err(|e| LastEventError::Unavailable(e.to_string()))?;
    match stream
        .get_last_raw_message_by_subject(&subjects::events_subject(id))
        .await
    {
        Ok(m) => Ok(
            decode_event_message::<parley_protocol::DebateEvent>(&m.payload)?
                .last()
                .map_or(0, |e| e.seq),
        ),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(0),
        Err(e) => Err(LastEventError::Unavailable(e.to_string())),
    }
}

/// Of a checkpoint's `outbox` (the events of its debate's last transition, which went out
/// after the checkpoint unless its owner died first), those the stream does not hold yet.
/// (A message is stored whole or not at all, so the outbox is on the stream whole, or
/// from some event on it is not.)
///
/// Publishing the whole outbox again relies on `Nats-Msg-Id` deduplication, which only
/// covers the stream's duplicate window (2 minutes): a debate taken over longer than that
/// after its last transition (its tasks queued behind a backlog, its clarifications
/// unanswered) would get those events stored a second time, its sequence restarting
/// partway through. Events are published in order, so the outbox's events up to the
/// debate's last stored one are on the stream; the rest are not.
pub async fn unpublished(
    js: &jetstream::Context,
    id: &str,
    outbox: &[parley_protocol::DebateEvent],
) -> Result<Vec<parley_protocol::DebateEvent>, LastEventError> {
    if outbox.is_empty() {
        return Ok(Vec::new());
    }
    let stored = last_stored_seq(js, id).await?;
    Ok(outbox.iter().filter(|e| e.seq > stored).cloned().collect())
}

/// Publishes `events`, waited for at most a few seconds; failures are logged.
pub async fn publish_best_effort(deps: &Deps, id: &str, events: &[parley_protocol::DebateEvent]) {
    let published = async {
        for ack in publish_events(deps, events).await? {
            ack.await.map_err(ActorProcessingErr::from)?;
        }
        Ok::<_, ActorProcessingErr>(())
    };
    match tokio::time::timeout(Duration::from_secs(5), published).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(debate = %id, error = %e, "cannot publish the debate's events")
        }
        Err(_) => tracing::warn!(debate = %id, "timed out publishing the debate's events"),
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
