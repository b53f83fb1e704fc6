//! `parley.debates.contribute`: a person's answer to a human participant's open task,
//! handled like a steering command: checked against the checkpoint (a refusal changes
//! nothing), then applied by the debate's actor (here, by adoption, or by the owner
//! through `parley.control.<id>.contribute`). Who sent it is recorded: the request's `by`
//! and the NATS user its reply inbox names.

use std::time::Duration;

use parley_protocol::subjects::{self, ErrorCode, ErrorReply};
use parley_protocol::{decode_contribute_request, ContributeRequest, HumanTask};
use ractor::rpc::CallResult;
use ractor::ActorRef;
use serde_json::{json, Value};

use super::requests::no_answer;
use super::{err, unavailable, within_deadline, Reply, Service};
use crate::messages::{AdoptError, ContributeRefusal, DebateMsg, RELEASING};
use parley_engine::{Contribute, ContributeError, Input, Machine};

impl Service {
    /// `parley.debates.contribute` (see the module docs).
    pub(super) async fn contribute(&self, reply_to: &str, payload: &[u8]) -> Reply {
        let req = decode_contribute_request(payload).map_err(ErrorReply::from)?;
        let id = req.debate_id.clone();
        let user = reply_to
            .split('.')
            .next()
            .and_then(subjects::inbox_user)
            .map(str::to_string);
        let mut c = Contribute::from_request(&req);
        c.by = match (req.by.clone(), user) {
            (Some(by), Some(user)) if by != user => Some(format!("{by} (via {user})")),
            (Some(by), _) => Some(by),
            (None, user) => user,
        };
        let (spec, cp) = within_deadline(async {
            let spec = self.store.spec(&id).await.map_err(unavailable)?;
            let cp = self.store.state(&id).await.map_err(unavailable)?;
            Ok::<_, ErrorReply>((spec, cp))
        })
        .await?;
        let (Some(spec), Some(cp)) = (spec, cp) else {
            return Err(self.not_found(&id));
        };
        let task = Machine::from_checkpoint(spec, cp.state)
            .check_contribution(&c)
            .map_err(contribute_refused)?;
        let mut last = err(
            ErrorCode::Unavailable,
            format!("debate {id} is busy; try again"),
        );
        for _ in 0..20 {
            if let Some(actor) = self.actor(&id).await {
                match ask_contribute(&actor, &id, c.clone()).await {
                    Err(e) if e.error.message == RELEASING => last = e,
                    r => return r,
                }
            } else {
                match self.adopt(&id, Some(Input::Contribute(c.clone()))).await {
                    Ok(()) => return Ok(contributed(&id, &task)),
                    Err(AdoptError::OwnedElsewhere) => {
                        // The owner records the same `by` and answers the same task.
                        let forwarded = ContributeRequest {
                            debate_id: id.clone(),
                            text: c.text.clone(),
                            agent_id: Some(task.agent_id.clone()),
                            task_id: Some(task.task_id.clone()),
                            by: c.by.clone(),
                        };
                        let body = serde_json::to_vec(&forwarded)
                            .map_err(|e| err(ErrorCode::Internal, e.to_string()))?;
                        match self.forward(&id, "contribute", body.into()).await {
                            Err(e) if e.error.code == ErrorCode::Unavailable => last = e,
                            r => return r,
                        }
                    }
                    Err(AdoptError::Failed(e)) => return Err(err(ErrorCode::Unavailable, e)),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last)
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
