//! The failure policy of debate actors: which failures count against a debate (its fault,
//! not an outage or another coordinator's win), and counting them.

use std::time::Duration;

use parley_protocol::subjects;

use crate::deps::Deps;

#[derive(Debug, thiserror::Error)]
pub enum ActorError {
    #[error("debate {0} has no stored spec or state")]
    Missing(String),
    #[error("debate {0}: another coordinator wrote its checkpoint; giving it up")]
    LostCas(String),
    #[error("debate {0} is not running")]
    NotRunning(String),
}

/// The reason to count an actor's failure towards [`Deps::max_actor_failures`], if it may
/// be the debate's own fault: not when it lost its lease or checkpoint to another
/// coordinator, not a Redis error (an outage), not a checkpoint of a newer build. A publish refused, an encoding error or a
/// panic may be — when NATS and Redis answer (`backends_up`).
pub fn fault_reason(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(e) = err.downcast_ref::<ActorError>() {
        if !matches!(e, ActorError::Missing(_)) {
            return None;
        }
    }
    // A shared stream that cannot take a publish now (no leader during an election, no
    // responders, no ack in time, the connection gone) is an outage of the whole cluster,
    // not a fault of this debate; only a message the stream refuses for what it is (too
    // large, a failed expectation) may be.
    if let Some(e) = err.downcast_ref::<async_nats::jetstream::context::PublishError>() {
        use async_nats::jetstream::context::PublishErrorKind as K;
        if matches!(
            e.kind(),
            K::StreamNotFound | K::TimedOut | K::BrokenPipe | K::MaxAckPending
        ) {
            return None;
        }
    }
    // The events stream without a leader while a takeover looks for the previous owner's
    // unpublished events: an outage.
    if let Some(crate::publish::LastEventError::Unavailable(_)) =
        err.downcast_ref::<crate::publish::LastEventError>()
    {
        return None;
    }
    // An outage, or a checkpoint of a newer build (a coordinator of that build runs it):
    // not the debate's fault.
    if let Some(
        parley_cluster::redis_store::RedisStoreError::Redis(_)
        | parley_cluster::redis_store::RedisStoreError::NewerFormat { .. },
    ) = err.downcast_ref::<parley_cluster::redis_store::RedisStoreError>()
    {
        return None;
    }
    Some(parley_protocol::clip_text(&err.to_string(), 1000))
}

/// NATS (core and JetStream) and Redis answer within a few seconds.
async fn backends_up(deps: &Deps) -> bool {
    // JetStream answers when it can describe the tasks stream.
    let probe = async {
        deps.nats.flush().await.ok()?;
        deps.js.get_stream(subjects::TASKS_STREAM).await.ok()?;
        deps.store.ping().await.ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(3), probe).await,
        Ok(Some(()))
    )
}

/// Counts a failure of the debate's actor when the debate may be at fault (see
/// [`fault_reason`]) and the backends are up.
pub async fn count_failure(deps: &Deps, id: &str, reason: Option<String>) {
    let Some(reason) = reason else {
        return;
    };
    if !backends_up(deps).await {
        return;
    }
    match deps.store.record_actor_failure(id, &reason).await {
        Ok(n) => {
            tracing::warn!(debate = %id, failures = n, error = %reason, "the debate's actor failed with NATS and Redis up")
        }
        Err(e) => tracing::warn!(debate = %id, error = %e, "cannot count an actor failure"),
    }
}

#[cfg(test)]
mod tests {
    use super::fault_reason;

    /// A checkpoint of a newer build is nobody's fault here: an adoption that meets one is not
    /// counted towards failing the debate.
    /// A takeover that cannot read the debate's last stored event (the events stream has no
    /// leader: a 503) is not counted towards failing the debate; the soak failed debates
    /// so while a NATS node was down.
    #[test]
    fn an_events_stream_without_a_leader_at_a_takeover_is_not_the_debates_fault() {
        let unavailable = crate::publish::LastEventError::Unavailable(
            "JetStream error: JetStream system temporarily unavailable (code 503, error code 10008)"
                .into(),
        );
        let boxed: ractor::ActorProcessingErr = Box::new(unavailable);
        assert_eq!(fault_reason(boxed.as_ref()), None);
        let undecodable = crate::publish::LastEventError::Undecodable(
            serde_json::from_str::<u8>("x").unwrap_err(),
        );
        assert!(fault_reason(&undecodable).is_some());
    }

    #[test]
    fn a_newer_checkpoint_format_is_not_the_debates_fault() {
        let newer = parley_cluster::redis_store::RedisStoreError::NewerFormat {
            id: "deb-1".into(),
            format: 9,
            known: 1,
        };
        assert_eq!(fault_reason(&newer), None);
        let corrupt = parley_cluster::redis_store::RedisStoreError::Inconsistent("bad");
        assert!(fault_reason(&corrupt).is_some());
    }

    /// A publish that the shared streams cannot take now (no leader during an election:
    /// "no stream found for given subject"; no ack in time; the connection gone) is an
    /// outage that every debate waits out, never counted towards failing one; a message
    /// refused for what it is (too large) may be the debate's fault.
    #[test]
    fn a_stream_without_a_leader_is_not_the_debates_fault() {
        use async_nats::jetstream::context::{PublishError, PublishErrorKind as K};
        for kind in [
            K::StreamNotFound,
            K::TimedOut,
            K::BrokenPipe,
            K::MaxAckPending,
        ] {
            let e: Box<dyn std::error::Error + Send + Sync> = Box::new(PublishError::new(kind));
            assert_eq!(fault_reason(e.as_ref()), None, "{kind:?}");
        }
        let too_large: Box<dyn std::error::Error + Send + Sync> =
            Box::new(PublishError::new(K::MaxPayloadExceeded));
        assert!(fault_reason(too_large.as_ref()).is_some());
    }
}
