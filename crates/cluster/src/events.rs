//! Reading debates' events from the `PARLEY_EVENTS` stream as a client does (the CLI's
//! `watch` and `submit --wait`, `parley serve`), through consumers the coordinator creates.
//!
//! Clients never create consumers. NATS permissions cannot tell a consumer-create request
//! for one debate's subject from one whose filter is a wildcard (`parley.debates.*.events`,
//! every debate) or a durable one (never expires): the subject is the same shape. So the
//! shipped roles give clients no consumer-create permission at all, and a client asks:
//!
//! - `parley.debates.follow.<user>` (or the bare `parley.debates.follow` without users;
//!   [`FollowRequest`]: a debate id, and where to resume): the coordinator checks the id
//!   and that the debate exists, then creates an ephemeral pull consumer filtered on
//!   exactly `parley.debates.<id>.events` ([`follower_config`]): a random 128-bit name, no
//!   acks, memory storage, removed by the server after [`FOLLOWER_INACTIVE`] without a
//!   pull. It answers the name ([`FollowReply`]) on the requester's own inbox. Followers
//!   are capped in total (`max_followers`, a coordinator setting, part of it kept for
//!   `serve`), per user and per debate (`parley_coordinator::follow`): past a cap the
//!   answer is `unavailable` — the CLI then follows the debate's status instead, the page
//!   shows a 503. [`Follower`] asks on its user's subject, derived from its inbox prefix
//!   (`_INBOX_<user>`).
//! - `parley.debates.list` (the `serve` and `operator` roles only): the same, delivering the
//!   last event of every debate (the page's list). Not counted against `max_followers`.
//!
//! The client then only pulls (`$JS.API.CONSUMER.MSG.NEXT.PARLEY_EVENTS.<name>`) and reads
//! the consumer's info; it can neither list nor delete consumers. The consumer's name is a
//! capability like the debate's id: only the requester's inbox ever carries it.
//!
//! [`Follower`] is the client side: it asks for a consumer, pulls, and asks again from the
//! last stream sequence it delivered when the consumer is gone (NATS restarted, a pause
//! longer than [`FOLLOWER_INACTIVE`]).

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt as _;
use parley_protocol::subjects::{self, ErrorCode, ErrorReply};
use serde::{Deserialize, Serialize};

/// A follower consumer nobody pulled from for this long is removed by the server.
pub const FOLLOWER_INACTIVE: Duration = Duration::from_secs(30);
/// Largest follow request body accepted.
pub const MAX_FOLLOW_REQUEST_BYTES: usize = 1024;
/// How long a client waits for the coordinator's answer.
pub const FOLLOW_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `parley.debates.follow`'s request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FollowRequest {
    pub debate_id: String,
    /// Deliver the debate's events after this stream sequence (0: from its first event).
    #[serde(default)]
    pub after_stream_seq: u64,
}

/// The answer to `parley.debates.follow` and `parley.debates.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FollowReply {
    /// The consumer to pull from.
    pub consumer: String,
    /// Messages it had to deliver when created.
    pub pending: u64,
}

/// What a follower consumer delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowTarget {
    /// One debate's events, after a stream sequence.
    Debate { id: String, after_stream_seq: u64 },
    /// The last event of every debate.
    LastOfEach,
}

impl FollowTarget {
    /// Decodes a `parley.debates.follow` body; the error names the bad field.
    pub fn decode(body: &[u8]) -> Result<Self, ErrorReply> {
        if body.len() > MAX_FOLLOW_REQUEST_BYTES {
            return Err(ErrorReply::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "a follow request is {} bytes, over the cap of {MAX_FOLLOW_REQUEST_BYTES}",
                    body.len()
                ),
            ));
        }
        let r: FollowRequest = serde_json::from_slice(body)
            .map_err(|e| ErrorReply::new(ErrorCode::InvalidJson, format!("follow request: {e}")))?;
        if !parley_protocol::is_valid_debate_id(&r.debate_id) {
            return Err(ErrorReply::new(
                ErrorCode::InvalidRequest,
                "debateId: not a debate id (deb-YYYYMMDD-HHMMSS-RAND)",
            ));
        }
        Ok(Self::Debate {
            id: r.debate_id,
            after_stream_seq: r.after_stream_seq,
        })
    }

    /// The subject to ask on from `client`: a follow from a named user (an inbox prefix
    /// `_INBOX_<user>`) goes to `parley.debates.follow.<user>`, the identity its caps count
    /// against (see `parley_protocol::subjects::FOLLOW`).
    fn subject(&self, client: &async_nats::Client) -> String {
        match self {
            Self::Debate { .. } => {
                let inbox = client.new_inbox();
                let prefix = inbox.split('.').next().unwrap_or_default();
                match subjects::inbox_user(prefix) {
                    Some(user) => subjects::follow_subject_as(user),
                    None => subjects::FOLLOW.to_string(),
                }
            }
            Self::LastOfEach => subjects::LIST.to_string(),
        }
    }

    fn body(&self, after_stream_seq: u64) -> Vec<u8> {
        match self {
            Self::Debate { id, .. } => serde_json::to_vec(&FollowRequest {
                debate_id: id.clone(),
                after_stream_seq,
            })
            .unwrap_or_default(),
            Self::LastOfEach => b"{}".to_vec(),
        }
    }
}

/// The prefix of every follower consumer's name.
pub const FOLLOWER_PREFIX: &str = "follow-";

/// A fresh follower consumer's name: 128 random bits.
pub fn follower_name() -> String {
    use rand::Rng as _;
    let bits: u128 = rand::thread_rng().gen();
    format!("{FOLLOWER_PREFIX}{bits:032x}")
}

/// The consumer the coordinator creates for `target`.
pub fn follower_config(target: &FollowTarget) -> consumer::pull::Config {
    let (filter_subject, deliver_policy) = match target {
        FollowTarget::Debate {
            id,
            after_stream_seq,
        } => (
            subjects::events_subject(id),
            match after_stream_seq {
                0 => consumer::DeliverPolicy::All,
                n => consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: n.saturating_add(1),
                },
            },
        ),
        FollowTarget::LastOfEach => (
            subjects::events_subject("*"),
            consumer::DeliverPolicy::LastPerSubject,
        ),
    };
    consumer::pull::Config {
        name: Some(follower_name()),
        filter_subject,
        deliver_policy,
        ack_policy: consumer::AckPolicy::None,
        inactive_threshold: FOLLOWER_INACTIVE,
        memory_storage: true,
        num_replicas: 1,
        // One reader: a handful of outstanding pulls is plenty.
        max_waiting: 8,
        ..Default::default()
    }
}

/// Creates the follower consumer for `target` (the coordinator's side). With
/// `max_followers`, refuses (`unavailable`) when the events stream already has that many
/// consumers.
pub async fn create_follower(
    js: &jetstream::Context,
    target: &FollowTarget,
    max_followers: Option<usize>,
) -> Result<FollowReply, ErrorReply> {
    create_follower_named(js, target, max_followers, follower_name()).await
}

/// [`create_follower`] with the consumer's name chosen by the caller (one from
/// [`follower_name`], reserved beforehand).
pub async fn create_follower_named(
    js: &jetstream::Context,
    target: &FollowTarget,
    max_followers: Option<usize>,
    name: String,
) -> Result<FollowReply, ErrorReply> {
    let unavailable = |what: &str, e: &dyn std::fmt::Display| {
        ErrorReply::new(ErrorCode::Unavailable, format!("{what}: {e}; try again"))
    };
    let stream = js
        .get_stream_no_info(subjects::EVENTS_STREAM)
        .await
        .map_err(|e| unavailable("the events stream is unavailable", &e))?;
    if let Some(max) = max_followers {
        let info = stream
            .get_info()
            .await
            .map_err(|e| unavailable("the events stream is unavailable", &e))?;
        if info.state.consumer_count >= max {
            return Err(ErrorReply::new(
                ErrorCode::Unavailable,
                format!(
                    "{max} event followers are open, the most this cluster allows; follow the \
                     status instead, or try again later"
                ),
            ));
        }
    }
    let config = consumer::pull::Config {
        name: Some(name),
        ..follower_config(target)
    };
    let consumer = stream
        .create_consumer(config)
        .await
        .map_err(|e| unavailable("cannot follow the events", &e))?;
    let info = consumer.cached_info();
    Ok(FollowReply {
        consumer: info.name.clone(),
        pending: info.num_pending,
    })
}

/// A client following one debate's events (or the last event of each).
pub struct Follower {
    client: async_nats::Client,
    target: FollowTarget,
    /// The current consumer's messages; `None` after it failed (asked for again).
    messages: Option<consumer::pull::Stream>,
    /// Stream sequence of the last message delivered: a new consumer resumes after it.
    last_stream_seq: u64,
    /// Messages the first consumer had to deliver when created.
    pending_at_start: u64,
    /// The current consumer's name.
    consumer: String,
    /// A new consumer was asked for and the ask failed: wait before the next ask.
    backoff: bool,
}

impl Follower {
    /// Asks the coordinator for a consumer and starts pulling. The error is the
    /// coordinator's reply (`unavailable` past `max_followers`) or a NATS failure.
    pub async fn start(
        client: async_nats::Client,
        target: FollowTarget,
    ) -> Result<Self, ErrorReply> {
        let after = match &target {
            FollowTarget::Debate {
                after_stream_seq, ..
            } => *after_stream_seq,
            FollowTarget::LastOfEach => 0,
        };
        let mut f = Self {
            client,
            target,
            messages: None,
            last_stream_seq: after,
            pending_at_start: 0,
            consumer: String::new(),
            backoff: false,
        };
        f.pending_at_start = f.open().await?;
        Ok(f)
    }

    /// Messages the consumer had to deliver when it was created.
    pub fn pending_at_start(&self) -> u64 {
        self.pending_at_start
    }

    /// The current consumer's name (a role allowed to may delete it when done; it expires
    /// after [`FOLLOWER_INACTIVE`] anyway).
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    async fn ask(&self) -> Result<FollowReply, ErrorReply> {
        let subject = self.target.subject(&self.client);
        let body = self.target.body(self.last_stream_seq);
        let reply = tokio::time::timeout(
            FOLLOW_REQUEST_TIMEOUT,
            self.client.request(subject.clone(), body.into()),
        )
        .await
        .map_err(|_| {
            ErrorReply::new(
                ErrorCode::Unavailable,
                format!(
                    "no reply on {subject} within {} s: is a coordinator running, and may \
                     this NATS user ask it?",
                    FOLLOW_REQUEST_TIMEOUT.as_secs()
                ),
            )
        })?
        .map_err(|e| {
            ErrorReply::new(
                ErrorCode::Unavailable,
                format!("request on {subject} failed: {e}"),
            )
        })?;
        if let Ok(e) = serde_json::from_slice::<ErrorReply>(&reply.payload) {
            return Err(e);
        }
        serde_json::from_slice::<FollowReply>(&reply.payload).map_err(|e| {
            ErrorReply::new(
                ErrorCode::Internal,
                format!("unreadable reply on {subject}: {e}"),
            )
        })
    }

    /// Asks for a consumer and opens its messages; the pending count.
    async fn open(&mut self) -> Result<u64, ErrorReply> {
        let reply = self.ask().await?;
        let failed = |e: &dyn std::fmt::Display| {
            ErrorReply::new(
                ErrorCode::Unavailable,
                format!("cannot read the events stream: {e}"),
            )
        };
        let stream = jetstream::new(self.client.clone())
            .get_stream_no_info(subjects::EVENTS_STREAM)
            .await
            .map_err(|e| failed(&e))?;
        let consumer: consumer::PullConsumer = stream
            .get_consumer(&reply.consumer)
            .await
            .map_err(|e| failed(&e))?;
        self.messages = Some(consumer.messages().await.map_err(|e| failed(&e))?);
        self.consumer = reply.consumer;
        Ok(reply.pending)
    }

    /// The next message. An error (the consumer gone, NATS away) is returned once; the
    /// next call asks for a new consumer that resumes after the last message delivered.
    /// `None` only if the messages end for good.
    pub async fn next(&mut self) -> Option<Result<jetstream::Message, ErrorReply>> {
        if self.messages.is_none() {
            if std::mem::take(&mut self.backoff) {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            if let Err(e) = self.open().await {
                self.backoff = true;
                return Some(Err(e));
            }
        }
        let messages = self.messages.as_mut()?;
        match messages.next().await {
            Some(Ok(m)) => {
                if let Ok(info) = m.info() {
                    self.last_stream_seq = info.stream_sequence;
                }
                Some(Ok(m))
            }
            Some(Err(e)) => {
                self.messages = None;
                self.backoff = true;
                Some(Err(ErrorReply::new(
                    ErrorCode::Unavailable,
                    format!("event stream: {e}"),
                )))
            }
            None => None,
        }
    }

    /// The follower as a stream of messages (errors left out: it goes on after them).
    pub fn into_messages(self) -> impl futures::Stream<Item = jetstream::Message> + Send {
        futures::stream::unfold(self, |mut f| async move {
            loop {
                match f.next().await? {
                    Ok(m) => return Some((m, f)),
                    Err(e) => tracing::debug!(error = %e.error.message, "event stream"),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_requests_name_one_debate() {
        let id = "deb-20260101-000000-abc123";
        let ok = FollowTarget::decode(format!(r#"{{"debateId":"{id}"}}"#).as_bytes()).unwrap();
        let c = follower_config(&ok);
        assert_eq!(c.filter_subject, format!("parley.debates.{id}.events"));
        assert_eq!(c.deliver_policy, consumer::DeliverPolicy::All);
        assert!(c.durable_name.is_none());
        assert_eq!(c.inactive_threshold, FOLLOWER_INACTIVE);
        let resumed = FollowTarget::decode(
            format!(r#"{{"debateId":"{id}","afterStreamSeq":41}}"#).as_bytes(),
        )
        .unwrap();
        assert_eq!(
            follower_config(&resumed).deliver_policy,
            consumer::DeliverPolicy::ByStartSequence { start_sequence: 42 }
        );
        // Wildcards, other shapes, unknown fields and huge bodies are refused by name.
        for (body, code) in [
            (r#"{"debateId":"*"}"#.to_string(), ErrorCode::InvalidRequest),
            (r#"{"debateId":">"}"#.to_string(), ErrorCode::InvalidRequest),
            (
                format!(r#"{{"debateId":"{id}","durableName":"x"}}"#),
                ErrorCode::InvalidJson,
            ),
            ("not json".to_string(), ErrorCode::InvalidJson),
            ("x".repeat(2000), ErrorCode::PayloadTooLarge),
        ] {
            let e = FollowTarget::decode(body.as_bytes()).unwrap_err();
            assert_eq!(e.error.code, code, "{body:.40}");
        }
        // Names are fresh and long.
        let (a, b) = (follower_name(), follower_name());
        assert_ne!(a, b);
        assert_eq!(a.len(), "follow-".len() + 32);
    }
}
