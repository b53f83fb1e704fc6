//! `parley.debates.contribute`: a person's answer to a human participant's open task,
//! handled like a steering command: checked against the checkpoint (a refusal changes
//! nothing), then applied by the debate's actor (here, by adoption, or by the owner
//! through `parley.control.<id>.contribute`). Who sent it is recorded: the request's `by`
//! and the NATS user its reply inbox names.

use std::time::Duration;

use parley_protocol::subjects::{ErrorCode, ErrorReply};
use parley_protocol::{decode_contribute_request, ContributeRequest, HumanTask};
use ractor::rpc::CallResult;
use ractor::ActorRef;
use serde_json::{json, Value};

use super::requests::{no_answer, requester};
use super::{err, Reply, Service};
use crate::messages::{ContributeRefusal, DebateMsg};
use parley_engine::{Contribute, ContributeError, Input};

impl Service {
    /// `parley.debates.contribute` (see the module docs).
    pub(super) async fn contribute(&self, reply_to: &str, payload: &[u8]) -> Reply {
        let req = decode_contribute_request(payload).map_err(ErrorReply::from)?;
        let id = req.debate_id.clone();
        let mut c = Contribute::from_request(&req);
        c.by = requester(reply_to, req.by.clone());
        let task = self
            .checked_machine(&id)
            .await?
            .check_contribution(&c)
            .map_err(contribute_refused)?;
        // The owner records the same `by` and answers the same task.
        let forwarded = ContributeRequest {
            debate_id: id.clone(),
            text: c.text.clone(),
            agent_id: Some(task.agent_id.clone()),
            task_id: Some(task.task_id.clone()),
            by: c.by.clone(),
        };
        let body =
            serde_json::to_vec(&forwarded).map_err(|e| err(ErrorCode::Internal, e.to_string()))?;
        self.route(
            &id,
            "contribute",
            body.into(),
            || Input::Contribute(c.clone()),
            || contributed(&id, &task),
            |actor| {
                let c = c.clone();
                let id = id.clone();
                async move { ask_contribute(&actor, &id, c).await }
            },
        )
        .await
    }

    /// `parley.control.<id>.contribute`: the owner applies a forwarded contribution.
    pub(super) async fn control_contribute(&self, id: &str, payload: &[u8]) -> Option<Reply> {
        let actor = self.actor(id).await?;
        let req = match decode_contribute_request(payload) {
            Ok(r) if r.debate_id == id => r,
            Ok(_) => {
                return Some(Err(err(
                    ErrorCode::InvalidRequest,
                    "the contribution names another debate than its subject",
                )))
            }
            Err(e) => return Some(Err(e.into())),
        };
        Some(ask_contribute(&actor, id, Contribute::from_request(&req)).await)
    }
}

/// The error reply for a contribution the debate refuses.
pub(super) fn contribute_refused(e: ContributeError) -> ErrorReply {
    let code = if e.is_conflict() {
        ErrorCode::Conflict
    } else {
        ErrorCode::InvalidRequest
    };
    err(code, e.to_string())
}

/// The reply to an applied contribution: which task it answered.
fn contributed(id: &str, task: &HumanTask) -> Value {
    json!({
        "debateId": id,
        "accepted": "contribution",
        "taskId": task.task_id,
        "agentId": task.agent_id,
        "kind": task.kind.as_str(),
        "round": task.round,
    })
}

/// Hands a contribution to the debate's actor.
async fn ask_contribute(actor: &ActorRef<DebateMsg>, id: &str, c: Contribute) -> Reply {
    let r = actor
        .call(
            |reply| DebateMsg::Contribute {
                contribution: c,
                reply,
            },
            Some(Duration::from_secs(10)),
        )
        .await;
    match r {
        Ok(CallResult::Success(Ok(task))) => Ok(contributed(id, &task)),
        Ok(CallResult::Success(Err(ContributeRefusal::Refused(e)))) => Err(contribute_refused(e)),
        Ok(CallResult::Success(Err(ContributeRefusal::Other(e)))) => {
            Err(err(ErrorCode::Unavailable, e))
        }
        other => Err(no_answer(
            id,
            other.is_ok_and(|r| matches!(r, CallResult::Timeout)),
        )),
    }
}
