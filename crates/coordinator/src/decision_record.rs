//! The decision record of a settled debate (`parley_record`): built from its final state
//! and spec, signed with the coordinator's key when one is configured
//! (`--record-signing-key`; workers never hold it), and stored under the debate's hash tag
//! (`parley:{<id>}:record`), where it expires with the debate's other keys.
//! `parley.debates.status` with `"view": "record"` returns it.
//!
//! Best effort: a record that cannot be stored is logged and the debate settles all the
//! same (the record can be made again from the state with `parley record`, unsigned).

use std::sync::Arc;

use parley_protocol::{DebateSpec, DebateState};
use parley_record::SigningKey;

/// Builds, signs and stores the record of `state`.
pub async fn store(
    store: &parley_cluster::redis_store::RedisStore,
    key: Option<&Arc<SigningKey>>,
    spec: &DebateSpec,
    state: &DebateState,
) {
    let mut record = match parley_record::build(state, Some(spec), chrono::Utc::now()) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(debate = %state.id, error = %e, "no decision record");
            return;
        }
    };
    if let Some(k) = key {
        k.sign(&mut record);
    }
    let json = match serde_json::to_string(&record) {
        Ok(j) => j,
        Err(e) => {
            tracing::warn!(debate = %state.id, error = %e, "cannot encode the decision record");
            return;
        }
    };
    match store.put_record(&state.id, &json).await {
        Ok(()) => tracing::info!(
            debate = %state.id,
            digest = %record.digest(),
            signed = record.signature.is_some(),
            "decision record stored"
        ),
        Err(e) => {
            tracing::warn!(debate = %state.id, error = %e, "cannot store the decision record")
        }
    }
}
