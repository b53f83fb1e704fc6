//! Human participants' contributions to embedded debates: a running driver takes them (it
//! checks, applies and checkpoints one before answering); without a driver (the server
//! restarted, a debate no process drives) the contribution is checked against the
//! checkpoint and a running debate gets a driver that applies it first.

use parley_engine::{Contribute, ContributeError, Input, Machine};
use parley_protocol::{DebateStatus, HumanTask};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::EmbeddedBackend;
use crate::backend::ApiError;

impl EmbeddedBackend {
    /// Answers a human participant's open task of debate `id` (see the module docs).
    pub async fn contribute_debate(&self, id: &str, c: Contribute) -> Result<Value, ApiError> {
        let inner = &self.inner;
        let live = inner.live_off_thread(id).await?;
        let mut driver = live.driver.lock().await;
        if let Some(d) = driver.as_ref().filter(|d| d.running()) {
            let (tx, rx) = oneshot::channel();
            if d.contribute.send((c.clone(), tx)).is_ok() {
                match rx.await {
                    Ok(Ok(task)) => return Ok(contributed(id, &task)),
                    Ok(Err(e)) => return Err(contribute_error(e)),
                    // The run ended meanwhile: its last checkpoint is written.
                    Err(_) => {}
                }
            }
        }
        if let Some(d) = driver.take() {
            let _ = d.handle.await;
        }
        let owned = id.to_string();
        let (spec, state) = inner.off_thread(move |i| i.load(&owned)).await??;
        let status = state.status;
        let mut machine = Machine::from_checkpoint(spec, state);
        machine.set_pricing(inner.pricing.clone());
        let task = machine.check_contribution(&c).map_err(contribute_error)?;
        if status != DebateStatus::Running {
            return Err(ApiError::conflict(format!(
                "debate {id} is {}; only a running debate takes contributions",
                status.as_str()
            )));
        }
        let runner = inner.runner(machine.spec()).await?;
        // The new driver applies the contribution as its first input; the plan then
        // dispatches what is missing (and finds the other open human tasks open).
        *driver = Some(inner.spawn_driver(live.clone(), machine, Input::Contribute(c), runner));
        Ok(contributed(id, &task))
    }
}

/// The reply to an applied contribution: which task it answered.
pub(super) fn contributed(id: &str, task: &HumanTask) -> Value {
    json!({
        "debateId": id,
        "accepted": "contribution",
        "taskId": task.task_id,
        "agentId": task.agent_id,
        "kind": task.kind.as_str(),
        "round": task.round,
    })
}

/// A contribution the debate refuses, as the API's error (409 for the debate's state, 400
/// for the contribution itself).
fn contribute_error(e: ContributeError) -> ApiError {
    if e.is_conflict() {
        ApiError::conflict(e.to_string())
    } else {
        ApiError::invalid(e.to_string())
    }
}
