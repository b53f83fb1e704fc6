//! `parley.debates.follow[.<user>]`: the coordinator's side of following a debate's events.
//!
//! A follow creates a JetStream consumer, a resource of the whole account, on a requester's
//! behalf, so each one is checked before it is created:
//! - the requester's identity is the last token of `parley.debates.follow.<user>`, a
//!   subject the shipped roles let only that user publish (`deploy/nats/client-user.sh`);
//!   its answer must go to that user's own inbox (`_INBOX_<user>.`), so nobody spends
//!   another user's places. The bare `parley.debates.follow` (deployments without users)
//!   counts as one shared identity;
//! - the debate must exist (its spec is in Redis): made-up ids create nothing;
//! - the caps ([`FollowerCaps`]): in total (`max_followers`, minus a share only `serve`
//!   may take, so the page's event streams keep working while clients are at their caps),
//!   per identity and per debate — reserved in one Redis script
//!   ([`parley_cluster::redis_store::followers`]), so they hold across replicas and
//!   concurrent requests. A refusal is `unavailable` naming the cap, counted in
//!   `parley_followers_refused_total{cap}`;
//! - the account's consumer count is checked too (the server's truth).
//!
//! [`refresh`] runs on every replica: it lists the events stream's consumers every
//! [`REFRESH_EVERY`] and keeps the registry entries of the followers that still exist.

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt as _;
use parley_cluster::events::{FollowReply, FollowTarget};
use parley_cluster::redis_store::followers::{FollowerCaps, Reservation};
use parley_cluster::RedisStore;
use parley_protocol::subjects::{self, ErrorCode, ErrorReply};

/// How often each replica refreshes the follower registry from the stream's consumers.
pub const REFRESH_EVERY: Duration = Duration::from_secs(10);

/// Creates a follower for the request `payload` received on `subject` with the reply
/// subject `reply` (an inbox: checked before this is called).
pub async fn follow(
    store: &RedisStore,
    js: &jetstream::Context,
    caps: FollowerCaps,
    subject: &str,
    reply: &str,
    payload: &[u8],
) -> Result<FollowReply, ErrorReply> {
    let identity = subjects::follow_identity(subject)
        .ok_or_else(|| ErrorReply::new(ErrorCode::InvalidRequest, "not a follow subject"))?;
    if !identity.is_empty() && !reply.starts_with(&format!("_INBOX_{identity}.")) {
        return Err(ErrorReply::new(
            ErrorCode::InvalidRequest,
            format!(
                "a follow asked on {subject} is answered only on the inbox of user {identity} \
                 (_INBOX_{identity}.…)"
            ),
        ));
    }
    let target = FollowTarget::decode(payload)?;
    let FollowTarget::Debate { id, .. } = &target else {
        return Err(ErrorReply::new(ErrorCode::InvalidRequest, "not a debate"));
    };
    let unavailable = |e: &dyn std::fmt::Display| {
        ErrorReply::new(ErrorCode::Unavailable, format!("storage unavailable: {e}"))
    };
    match store.spec(id).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            return Err(ErrorReply::new(
                ErrorCode::NotFound,
                format!("no debate {id} (never submitted, or expired)"),
            ))
        }
        Err(e) => return Err(unavailable(&e)),
    }
    let name = parley_cluster::events::follower_name();
    let mut reserved = store.reserve_follower(&name, identity, id, caps).await;
    if matches!(reserved, Ok(Reservation::Refused(_))) && refresh_due() {
        // A full cap may hold followers the server has removed since the last refresh.
        if let Some(live) = live_followers(js).await {
            if store.refresh_followers(&live).await.is_ok() {
                reserved = store.reserve_follower(&name, identity, id, caps).await;
            }
        }
    }
    match reserved {
        Ok(Reservation::Granted) => {}
        Ok(Reservation::Refused(cap)) => {
            parley_telemetry::metrics().follower_refused(cap);
            let message = match cap {
                "client" => format!(
                    "this client has {} event followers open, the most one client may; close \
                     one, follow the status instead, or try again later",
                    caps.per_client
                ),
                "debate" => format!(
                    "debate {id} has {} event followers open, the most one debate may; follow \
                     the status instead, or try again later",
                    caps.per_debate
                ),
                _ => format!(
                    "{} event followers are open, the most this cluster allows; follow the \
                     status instead, or try again later",
                    caps.total
                ),
            };
            return Err(ErrorReply::new(ErrorCode::Unavailable, message));
        }
        Err(e) => return Err(unavailable(&e)),
    }
    let created =
        parley_cluster::events::create_follower_named(js, &target, Some(caps.total), name.clone())
            .await;
    if created.is_err() {
        if let Err(e) = store.release_follower(&name, identity, id).await {
            tracing::warn!(error = %e, "cannot release a follower's place");
        }
    }
    created
}

/// Keeps the registry entries of the follower consumers that still exist, every
/// [`REFRESH_EVERY`], until the task is aborted.
pub async fn refresh(store: RedisStore, js: jetstream::Context) {
    let mut tick = tokio::time::interval(REFRESH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // A partial list would drop live followers' entries: wait for the next tick.
        let Some(live) = live_followers(&js).await else {
            continue;
        };
        if let Err(e) = store.refresh_followers(&live).await {
            tracing::warn!(error = %e, "cannot refresh the follower registry");
        }
    }
}

/// The names of every follower consumer of the events stream; `None` unless the whole
/// list was read.
async fn live_followers(js: &jetstream::Context) -> Option<Vec<String>> {
    tokio::time::timeout(LIST_TIMEOUT, list_followers(js))
        .await
        .ok()
        .flatten()
}

/// How long listing the consumers may take (a request waits for it when a cap is full).
const LIST_TIMEOUT: Duration = Duration::from_secs(2);

async fn list_followers(js: &jetstream::Context) -> Option<Vec<String>> {
    let stream = js.get_stream_no_info(subjects::EVENTS_STREAM).await.ok()?;
    let mut names = stream.consumer_names();
    let mut live = Vec::new();
    while let Some(n) = names.next().await {
        let n = n.ok()?;
        if n.starts_with(parley_cluster::events::FOLLOWER_PREFIX) {
            live.push(n);
        }
    }
    Some(live)
}

/// Whether a request that met a full cap may refresh the registry now: at most once a
/// second per replica, so a flood of refused requests costs one listing a second.
fn refresh_due() -> bool {
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let Ok(mut last) = LAST.lock() else {
        return false;
    };
    let now = std::time::Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
        return false;
    }
    *last = Some(now);
    true
}
