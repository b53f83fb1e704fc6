//! Settling a debate without its actor: a cancel or an abort applied straight to the
//! checkpoint of a debate this coordinator holds the lease of but does not run.

use chrono::Utc;
use parley_engine::{Effect, Input, Machine};
use parley_protocol::DebateStatus;

use crate::deps::Deps;
use crate::publish::{publish_best_effort, unpublished};

/// Why a debate could not be settled without its actor.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// Its spec or checkpoint does not decode (it is no longer scheduled).
    #[error("cannot decode {what}: {source}")]
    Undecodable {
        what: String,
        source: serde_json::Error,
    },
    /// Redis did not answer or refused.
    #[error(transparent)]
    Store(#[from] parley_cluster::redis_store::RedisStoreError),
    /// Its spec or state is not stored (it is no longer scheduled).
    #[error("debate {0} has no stored spec or state")]
    NotStored(String),
    /// Another coordinator wrote its checkpoint first (the lease moved on).
    #[error("debate {0}: another coordinator wrote its checkpoint")]
    LostCheckpoint(String),
}

/// Applies a cancel or an abort to a debate whose lease this coordinator holds but which it
/// does not run, without resuming it (nothing is re-dispatched): checkpoint, then its events
/// (best effort: the checkpoint is what counts), then the bookkeeping of a settled debate.
/// Returns the debate's status afterwards.
pub async fn settle_directly(
    deps: &Deps,
    id: &str,
    input: Input,
) -> Result<DebateStatus, SettleError> {
    let store = &deps.store;
    let loaded = async {
        Ok::<_, parley_cluster::redis_store::RedisStoreError>((
            store.spec(id).await?,
            store.state(id).await?,
        ))
    }
    .await;
    let (spec, cp) = match loaded {
        Ok(v) => v,
        Err(parley_cluster::redis_store::RedisStoreError::Decode { what, source }) => {
            // A checkpoint this build cannot read never will be: stop scheduling it.
            tracing::error!(debate = %id, what, error = %source, "cannot decode the debate; it is no longer scheduled");
            let _ = store.unmark_running(id).await;
            return Err(SettleError::Undecodable { what, source });
        }
        Err(e) => return Err(e.into()),
    };
    let (Some(spec), Some(cp)) = (spec, cp) else {
        let _ = store.unmark_running(id).await;
        return Err(SettleError::NotStored(id.to_string()));
    };
    let before = cp.state.status;
    // The previous owner's last events first (best effort: those the stream does not hold
    // yet), so the stream keeps its order.
    match unpublished(&deps.js, id, &cp.state.engine.outbox).await {
        Ok(events) => publish_best_effort(deps, id, &events).await,
        Err(e) => {
            tracing::warn!(debate = %id, error = %e, "cannot tell which of the previous owner's last events were published")
        }
    }
    let mut machine = Machine::from_checkpoint(spec, cp.state);
    machine.set_pricing(deps.pricing.clone());
    let events: Vec<parley_protocol::DebateEvent> = machine
        .handle(input, Utc::now())
        .into_iter()
        .filter_map(|e| match e {
            Effect::Emit(event) => Some(event),
            _ => None,
        })
        .collect();
    machine.set_outbox(events.clone());
    match store.save_state(machine.state(), cp.version).await {
        Ok(Some(_)) => {}
        Ok(None) => return Err(SettleError::LostCheckpoint(id.to_string())),
        Err(e) => return Err(e.into()),
    }
    publish_best_effort(deps, id, &events).await;
    let status = machine.state().status;
    if !matches!(
        status,
        DebateStatus::Running | DebateStatus::Pending | DebateStatus::AwaitingClarifications
    ) {
        store.unmark_running(id).await?;
        crate::decision_record::store(
            store,
            deps.record_signing_key.as_ref(),
            machine.spec(),
            machine.state(),
        )
        .await;
        if let Some(ttl) = deps.retention {
            store.expire_debate(id, ttl).await?;
        }
        if before != status {
            tracing::info!(debate = %id, status = status.as_str(), "debate settled without resuming it");
        }
    }
    Ok(status)
}
