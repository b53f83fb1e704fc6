//! The coordinator's requests: submit, status, the user's retry and cancel, answers,
//! steering, feedback, follow, dead letters, and the owner-to-owner control subjects; each a method of
//! the service that [`super::run`] serves.

use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use parley_protocol::subjects::{self, ErrorCode, ErrorReply};
use parley_protocol::{
    decode_answer_request, decode_debate_ref, decode_feedback_request, decode_fork_request,
    decode_steer_request, decode_submission, is_valid_debate_id, new_debate_id, preview,
    split_pages, Answer, DebateStatus, ResultNotice, StatusPage, StatusRequest, StatusSummary,
    StatusView, SteerRequest, TaskRef,
};
use ractor::rpc::CallResult;
use ractor::ActorRef;
use serde_json::{json, Value};

use super::{
    err, unavailable, within_deadline, MaxDeliveries, Reply, Service, CONTROL_PREFIX,
    FEEDBACK_ATTEMPTS, STATUS_SNAPSHOT_TTL,
};
use crate::messages::{AdoptError, DebateMsg, SupervisorMsg, RELEASING};
use parley_engine::{Input, Machine, Steer};

#[derive(Debug, Clone, Copy)]
pub(super) enum Command {
    Retry,
    Cancel,
}

impl Command {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Command::Retry => "retry",
            Command::Cancel => "cancel",
        }
    }
}

/// A cancel whose owner did not answer: the durable mark is stored, so the owner applies
/// it at its next tick (an adoption before anything else).
pub(super) fn accepted_later(id: &str) -> Value {
    json!({ "debateId": id, "accepted": "cancel", "appliedBy": "the debate's owner at its next tick" })
}

/// A status request: `{"debateId"}` plus an optional `view`, `snapshot` and `page`.
/// Bounded like every request (see `parley_protocol::decode_debate_ref`).
pub(super) fn status_request(payload: &[u8]) -> Result<StatusRequest, ErrorReply> {
    if payload.len() > parley_protocol::limits::MAX_REQUEST_BYTES {
        return Err(err(
            ErrorCode::PayloadTooLarge,
            format!(
                "request is {} bytes, the limit is {}",
                payload.len(),
                parley_protocol::limits::MAX_REQUEST_BYTES
            ),
        ));
    }
    let v: Value = serde_json::from_slice(payload)
        .map_err(|e| err(ErrorCode::InvalidJson, format!("not JSON: {e}")))?;
    let r: StatusRequest = serde_json::from_value(v).map_err(|e| {
        err(
            ErrorCode::InvalidRequest,
            format!("expected {{\"debateId\": ..., \"view\"?: \"full\"|\"summary\", \"snapshot\"?, \"page\"?}}: {e}"),
        )
    })?;
    if !is_valid_debate_id(&r.debate_id) {
        return Err(err(
            ErrorCode::InvalidRequest,
            format!(
                "debateId: {:?} is not a debate id (deb-YYYYMMDD-HHMMSS-xxxxxx)",
                preview(&r.debate_id, 64)
            ),
        ));
    }
    Ok(r)
}

pub(super) fn debate_ref(payload: &[u8]) -> Result<String, ErrorReply> {
    decode_debate_ref(payload).map_err(ErrorReply::from)
}

impl Service {
    pub(super) async fn actor(&self, id: &str) -> Option<ActorRef<DebateMsg>> {
        let id = id.to_string();
        match self
            .sup
            .call(
                |reply| SupervisorMsg::Get { id, reply },
                Some(Duration::from_secs(5)),
            )
            .await
        {
            Ok(CallResult::Success(a)) => a,
            _ => None,
        }
    }

    /// Of `ids`, the debates this replica does not own (all of them when the supervisor
    /// does not answer: adopting one owned here is a no-op).
    pub(super) async fn not_owned(&self, ids: Vec<String>) -> Vec<String> {
        let asked = ids.clone();
        match self
            .sup
            .call(
                |reply| SupervisorMsg::NotOwned { ids, reply },
                Some(Duration::from_secs(5)),
            )
            .await
        {
            Ok(CallResult::Success(ids)) => ids,
            _ => asked,
        }
    }

    pub(super) async fn adopt(&self, id: &str, follow_up: Option<Input>) -> Result<(), AdoptError> {
        let id = id.to_string();
        match self
            .sup
            .call(
                |reply| SupervisorMsg::Adopt {
                    id,
                    follow_up: follow_up.map(Box::new),
                    reply,
                },
                Some(Duration::from_secs(10)),
            )
            .await
        {
            Ok(CallResult::Success(r)) => r,
            Ok(_) => Err(AdoptError::Failed("the supervisor did not answer".into())),
            Err(e) => Err(AdoptError::Failed(e.to_string())),
        }
    }

    pub(super) async fn submit(&self, payload: &[u8]) -> Reply {
        let mut spec = decode_submission(payload, &self.policy).map_err(ErrorReply::from)?;
        parley_engine::budget::admit(&mut spec, &self.policy.max_debate, &self.pricing)
            .map_err(|e| err(ErrorCode::InvalidRequest, e.to_string()))?;
        let (id, start) = within_deadline(self.create(spec)).await?;
        if start {
            match self.adopt(&id, None).await {
                // Another replica's scan may have been quicker: it runs the debate.
                Ok(()) | Err(AdoptError::OwnedElsewhere) => {}
                // The scan retries later.
                Err(e) => tracing::warn!(debate = %id, error = %e, "cannot start the debate yet"),
            }
            tracing::info!(debate = %id, "debate accepted");
        }
        Ok(json!({ "debateId": id }))
    }

    /// Stores a submitted debate (every step create-if-absent); its id, and whether this
    /// replica should start it (not when it has already started).
    pub(super) async fn create(
        &self,
        spec: parley_protocol::DebateSpec,
    ) -> Result<(String, bool), ErrorReply> {
        let now = Utc::now();
        let mut id = new_debate_id(now);
        if let Some(key) = &spec.idempotency_key {
            // Every copy of a submission gets the id bound first. Whoever bound it may have
            // died before creating the debate, so each copy makes sure it exists: every
            // step below is create-if-absent.
            let digest = parley_cluster::redis_store::spec_digest(&spec).map_err(unavailable)?;
            let bound = self
                .store
                .bind_idempotency_key_for_spec(key, &id, &digest)
                .await
                .map_err(unavailable)?;
            let same = match &bound.spec_digest {
                Some(d) => *d == digest,
                // Bound by an older build: compare with the stored spec, if any yet.
                None => self
                    .store
                    .spec(&bound.debate_id)
                    .await
                    .map_err(unavailable)?
                    .is_none_or(|stored| stored == spec),
            };
            if !same {
                return Err(err(
                    ErrorCode::Conflict,
                    format!(
                        "idempotencyKey: {:?} was first sent with a different debate ({}); \
                         use a new key for a new debate",
                        preview(key, 64),
                        bound.debate_id
                    ),
                ));
            }
            id = bound.debate_id;
        }
        // Before the debate exists: its actor stamps every task with a token from it.
        self.store
            .ensure_dispatch_secret(&id)
            .await
            .map_err(unavailable)?;
        self.store.put_spec(&id, &spec).await.map_err(unavailable)?;
        let machine = Machine::new(id.clone(), spec, now);
        let created = self
            .store
            .save_state(machine.state(), 0)
            .await
            .map_err(unavailable)?
            .is_some();
        if !created {
            let stored = self.store.state(&id).await.map_err(unavailable)?;
            if stored.is_some_and(|cp| cp.state.status != DebateStatus::Pending) {
                // Already started (or settled): its owner, or the scan, takes care of it.
                return Ok((id, false));
            }
        }
        self.store.mark_running(&id).await.map_err(unavailable)?;
        Ok((id, true))
    }

    pub(super) async fn status(&self, payload: &[u8]) -> Reply {
        let req = status_request(payload)?;
        let id = req.debate_id;
        if let Some(snapshot) = req.snapshot {
            return self.status_page(&id, snapshot, req.page.unwrap_or(0)).await;
        }
        if req.view == StatusView::Record {
            return self.record_reply(&id).await;
        }
        let cp = self.store.state(&id).await.map_err(unavailable)?;
        let cp = cp.ok_or_else(|| self.not_found(&id))?;
        let version = cp.version;
        let mut state = cp.state;
        // The outbox is delivery bookkeeping; its events are on the events stream.
        state.engine.outbox.clear();
        let json =
            serde_json::to_string(&state).map_err(|e| err(ErrorCode::Internal, e.to_string()))?;
        if req.view == StatusView::Summary {
            let summary = StatusSummary::of(&state, version, json.len());
            return serde_json::to_value(summary)
                .map_err(|e| err(ErrorCode::Internal, e.to_string()));
        }
        if json.len() <= self.page_bytes {
            return serde_json::from_str(&json)
                .map_err(|e| err(ErrorCode::Internal, e.to_string()));
        }
        // Too large for one reply: a snapshot in pages (its first entry is the byte count).
        let pages = split_pages(&json, self.page_bytes);
        let bytes = json.len().to_string();
        let entries: Vec<&str> = std::iter::once(bytes.as_str()).chain(pages).collect();
        self.store
            .put_snapshot(&id, version, &entries, STATUS_SNAPSHOT_TTL)
            .await
            .map_err(unavailable)?;
        self.status_page(&id, version, 0).await
    }

    /// The debate's decision record (`parley:{<id>}:record`): inline, or a snapshot in
    /// pages like a large state (its snapshot number has bit 62 set, so it never meets a
    /// state version).
    pub(super) async fn record_reply(&self, id: &str) -> Reply {
        let json = self.store.record(id).await.map_err(unavailable)?;
        let Some(json) = json else {
            return Err(err(
                ErrorCode::NotFound,
                format!("debate {id} has no decision record: it has not settled, or its record has expired"),
            ));
        };
        if json.len() <= self.page_bytes {
            return serde_json::from_str(&json)
                .map_err(|e| err(ErrorCode::Internal, e.to_string()));
        }
        let snapshot = (1u64 << 62) | u64::from(rand::random::<u32>());
        let pages = split_pages(&json, self.page_bytes);
        let bytes = json.len().to_string();
        let entries: Vec<&str> = std::iter::once(bytes.as_str()).chain(pages).collect();
        self.store
            .put_snapshot(id, snapshot, &entries, STATUS_SNAPSHOT_TTL)
            .await
            .map_err(unavailable)?;
        self.status_page(id, snapshot, 0).await
    }

    /// Page `page` of a stored snapshot.
    pub(super) async fn status_page(&self, id: &str, snapshot: u64, page: u32) -> Reply {
        let gone = || {
            err(
                ErrorCode::NotFound,
                format!(
                    "debate {id}: no page {page} of status snapshot {snapshot} (snapshots are kept {} s); request the status again",
                    STATUS_SNAPSHOT_TTL.as_secs()
                ),
            )
        };
        let bytes = self
            .store
            .snapshot_page(id, snapshot, 0)
            .await
            .map_err(unavailable)?
            .and_then(|(b, _)| b.parse::<u64>().ok())
            .ok_or_else(gone)?;
        let (data, entries) = self
            .store
            .snapshot_page(id, snapshot, page.saturating_add(1))
            .await
            .map_err(unavailable)?
            .ok_or_else(gone)?;
        let reply = StatusPage {
            debate_id: id.to_string(),
            snapshot,
            page,
            pages: entries.saturating_sub(1),
            bytes,
            data,
        };
        serde_json::to_value(reply).map_err(|e| err(ErrorCode::Internal, e.to_string()))
    }

    /// `not_found` for a debate id, naming the retention (a finished debate's keys expire).
    pub(super) fn not_found(&self, id: &str) -> ErrorReply {
        let kept = match self.retention {
            None => "finished debates are kept forever (retention = 0)".to_string(),
            Some(r) => format!(
                "finished debates are deleted {} after they end (the coordinator's `retention` setting)",
                parley_cluster::settings::format_duration(r)
            ),
        };
        let created = chrono::NaiveDateTime::parse_from_str(
            id.get(4..19).unwrap_or_default(),
            "%Y%m%d-%H%M%S",
        )
        .ok()
        .map(|t| t.and_utc());
        let expired = match (self.retention, created) {
            (Some(r), Some(c))
                if Utc::now() - c > chrono::Duration::from_std(r).unwrap_or_default() =>
            {
                format!(
                    "; it was created {}, so it may have expired",
                    c.format("%Y-%m-%d %H:%M:%S UTC")
                )
            }
            _ => String::new(),
        };
        err(
            ErrorCode::NotFound,
            format!("no debate {id}: {kept}{expired}"),
        )
    }

    pub(super) async fn user_command(&self, payload: &[u8], cmd: Command) -> Reply {
        let id = debate_ref(payload)?;
        let cp = self.store.state(&id).await.map_err(unavailable)?;
        let cp = cp.ok_or_else(|| self.not_found(&id))?;
        let status = cp.state.status;
        match cmd {
            Command::Retry if !matches!(status, DebateStatus::Failed | DebateStatus::Running) => {
                return Err(err(
                    ErrorCode::Conflict,
                    format!(
                        "debate {id} is {}; only a failed or running debate can be retried",
                        status.as_str()
                    ),
                ));
            }
            Command::Cancel if status.is_terminal() => {
                return Err(err(
                    ErrorCode::Conflict,
                    format!("debate {id} is already {}", status.as_str()),
                ));
            }
            _ => {}
        }
        match cmd {
            // A user retry is a fresh start for the failure count, and needs an owner.
            Command::Retry => {
                self.store
                    .clear_actor_failures(&id)
                    .await
                    .map_err(unavailable)?;
                self.store.mark_running(&id).await.map_err(unavailable)?;
            }
            // Durable first: whoever runs (or next adopts) the debate applies it, and
            // workers skip its tasks from now on.
            Command::Cancel => self.store.mark_cancelled(&id).await.map_err(unavailable)?,
        }
        // The owner may be changing hands (an actor releasing the debate, a scan holding
        // the lease for a moment): try the local actor, adoption, then the owner, a few times.
        let mut last = err(
            ErrorCode::Unavailable,
            format!("debate {id} is busy; try again"),
        );
        for _ in 0..20 {
            if let Some(actor) = self.actor(&id).await {
                match ask(&actor, &id, cmd).await {
                    Err(e) if e.error.message == RELEASING => last = e,
                    Err(e) if cmd == Command::Cancel && e.error.code == ErrorCode::Unavailable => {
                        return Ok(accepted_later(&id));
                    }
                    r => return r,
                }
            } else {
                let follow_up = match cmd {
                    Command::Retry => Input::Retry,
                    Command::Cancel => Input::Cancel,
                };
                match self.adopt(&id, Some(follow_up)).await {
                    Ok(()) => return Ok(json!({ "debateId": id, "accepted": cmd.as_str() })),
                    Err(AdoptError::OwnedElsewhere) => match self.forward_command(&id, cmd).await {
                        Err(e)
                            if cmd == Command::Cancel && e.error.code == ErrorCode::Unavailable =>
                        {
                            return Ok(accepted_later(&id));
                        }
                        Err(e) if e.error.code == ErrorCode::Unavailable => last = e,
                        r => return r,
                    },
                    Err(AdoptError::Failed(e)) => return Err(err(ErrorCode::Unavailable, e)),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if cmd == Command::Cancel {
            return Ok(accepted_later(&id));
        }
        Err(last)
    }

    /// Records a dead-lettered task message, deletes it from the stream and tells the
    /// debate's owner (see the module docs).
    pub(super) async fn dead_letter(&self, a: MaxDeliveries) {
        let kind = if a.consumer
            == parley_cluster::streams::consumer_name(parley_protocol::WorkerKind::Judge)
        {
            parley_telemetry::TaskKind::Judge
        } else {
            parley_telemetry::TaskKind::Agent
        };
        let stream = match self.js.get_stream(subjects::TASKS_STREAM).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the tasks stream for a dead letter");
                return;
            }
        };
        let task = match stream.get_raw_message(a.stream_seq).await {
            Ok(m) => serde_json::from_slice::<TaskRef>(&m.payload).ok(),
            Err(e) => {
                // Acked or deleted meanwhile (a last delivery answered late): nothing to do.
                tracing::debug!(seq = a.stream_seq, error = %e, "dead letter already gone");
                return;
            }
        };
        parley_telemetry::metrics()
            .task_dead_lettered(kind, parley_telemetry::DeadLetterReason::MaxDeliveries);
        let entry = json!({
            "at": Utc::now(),
            "consumer": a.consumer,
            "streamSeq": a.stream_seq,
            "deliveries": a.deliveries,
            "debateId": task.as_ref().map(|t| t.debate_id.clone()),
            "taskId": task.as_ref().map(|t| t.id.clone()),
            "attempt": task.as_ref().map(|t| t.attempt),
        });
        tracing::warn!(seq = a.stream_seq, consumer = %a.consumer, task = ?task.as_ref().map(|t| &t.id), "a task message exhausted its deliveries: dead letter");
        if let Err(e) = self.store.record_dead_letter(&entry.to_string()).await {
            tracing::warn!(error = %e, "cannot record a dead letter");
        }
        if let Err(e) = stream.delete_message(a.stream_seq).await {
            tracing::warn!(seq = a.stream_seq, error = %e, "cannot delete a dead letter from the tasks stream");
        }
        if let Some(t) = task {
            if is_valid_debate_id(&t.debate_id) {
                let notice = ResultNotice {
                    dead_lettered: true,
                    ..ResultNotice::result(&t.debate_id, &t.id, t.attempt)
                };
                if let Ok(body) = serde_json::to_vec(&notice) {
                    let _ = self
                        .nats
                        .publish(subjects::results_subject(&t.debate_id), body.into())
                        .await;
                }
            }
        }
    }

    /// `parley.debates.answer`: checked against the checkpoint, then applied by the
    /// debate's actor (see the module docs).
    /// `parley.debates.follow`: a consumer of exactly one debate's events, created for the
    /// requester (clients may not create consumers; see `parley_cluster::events`).
    pub(super) async fn follow(&self, subject: &str, reply_to: &str, payload: &[u8]) -> Reply {
        let caps =
            parley_cluster::redis_store::followers::FollowerCaps::for_total(self.max_followers);
        let reply =
            crate::follow::follow(&self.store, &self.js, caps, subject, reply_to, payload).await?;
        serde_json::to_value(reply).map_err(|e| err(ErrorCode::Internal, e.to_string()))
    }

    /// `parley.debates.list`: a consumer of every debate's last event (only the `serve`
    /// and `operator` roles may ask). Not counted against `max_followers`: the page's list
    /// keeps working when followers are exhausted.
    pub(super) async fn follow_all(&self) -> Reply {
        let target = parley_cluster::events::FollowTarget::LastOfEach;
        let reply = parley_cluster::events::create_follower(&self.js, &target, None).await?;
        serde_json::to_value(reply).map_err(|e| err(ErrorCode::Internal, e.to_string()))
    }

    /// `parley.debates.calibration`: the completion tokens the cluster's calls used, per
    /// provider/model and kind (bounded: see `parley_cluster::redis_store::calibration`).
    pub(super) async fn calibration(&self) -> Reply {
        let reply = self.store.calibration().await.map_err(unavailable)?;
        serde_json::to_value(reply).map_err(|e| err(ErrorCode::Internal, e.to_string()))
    }

    pub(super) async fn answer(&self, payload: &[u8]) -> Reply {
        let req = decode_answer_request(payload).map_err(ErrorReply::from)?;
        let id = req.debate_id.clone();
        let (spec, cp) = within_deadline(async {
            let spec = self.store.spec(&id).await.map_err(unavailable)?;
            let cp = self.store.state(&id).await.map_err(unavailable)?;
            Ok::<_, ErrorReply>((spec, cp))
        })
        .await?;
        let (Some(spec), Some(cp)) = (spec, cp) else {
            return Err(self.not_found(&id));
        };
        Machine::from_checkpoint(spec, cp.state)
            .check_answers(&req.answers)
            .map_err(answer_refused)?;
        let mut last = err(
            ErrorCode::Unavailable,
            format!("debate {id} is busy; try again"),
        );
        for _ in 0..20 {
            if let Some(actor) = self.actor(&id).await {
                match ask_answer(&actor, &id, req.answers.clone()).await {
                    Err(e) if e.error.message == RELEASING => last = e,
                    r => return r,
                }
            } else {
                match self
                    .adopt(&id, Some(Input::Answers(req.answers.clone())))
                    .await
                {
                    Ok(()) => return Ok(json!({ "debateId": id, "accepted": "answer" })),
                    Err(AdoptError::OwnedElsewhere) => {
                        let body = Bytes::copy_from_slice(payload);
                        match self.forward(&id, "answer", body).await {
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

    /// `parley.debates.steer`: checked against the checkpoint (a refusal changes nothing),
    /// then applied by the debate's actor, like answers. `reply_to` names who asks: the
    /// NATS user of an `_INBOX_<user>` inbox is recorded with the request's `by`.
    pub(super) async fn steer(&self, reply_to: &str, payload: &[u8]) -> Reply {
        let (req, command) = decode_steer_request(payload).map_err(ErrorReply::from)?;
        let id = req.debate_id.clone();
        let steer = Steer {
            command,
            by: requester(reply_to, req.by.clone()),
        };
        self.checked_machine(&id)
            .await?
            .check_steer(&steer)
            .map_err(steer_refused)?;
        // The owner records the same `by`.
        let forwarded = SteerRequest::new(&id, &steer.command, steer.by.clone());
        let body =
            serde_json::to_vec(&forwarded).map_err(|e| err(ErrorCode::Internal, e.to_string()))?;
        self.route(
            &id,
            "steer",
            body.into(),
            || Input::Steer(steer.clone()),
            || steer_accepted(&id, &steer),
            |actor| {
                let steer = steer.clone();
                let id = id.clone();
                async move { ask_steer(&actor, &id, steer).await }
            },
        )
        .await
    }

    /// The debate's machine as its checkpoint holds it (for checking a command before it
    /// is routed); not found when the debate has no spec or state.
    pub(super) async fn checked_machine(&self, id: &str) -> Result<Machine, ErrorReply> {
        let (spec, cp) = within_deadline(async {
            let spec = self.store.spec(id).await.map_err(unavailable)?;
            let cp = self.store.state(id).await.map_err(unavailable)?;
            Ok::<_, ErrorReply>((spec, cp))
        })
        .await?;
        let (Some(spec), Some(cp)) = (spec, cp) else {
            return Err(self.not_found(id));
        };
        Ok(Machine::from_checkpoint(spec, cp.state))
    }

    /// Applies a checked command to debate `id`: by its actor here (`ask`), by adopting
    /// the debate with the command's `input` as the first thing it does (then the reply
    /// is `applied`), or by its owner elsewhere (`body` forwarded on
    /// `parley.control.<id>.<op>`). A debate between owners (its actor releasing it, its
    /// owner not answering) is tried again for about 2 s.
    pub(super) async fn route<Ask, Fut>(
        &self,
        id: &str,
        op: &str,
        body: Bytes,
        input: impl Fn() -> Input,
        applied: impl Fn() -> Value,
        ask: Ask,
    ) -> Reply
    where
        Ask: Fn(ActorRef<DebateMsg>) -> Fut,
        Fut: std::future::Future<Output = Reply>,
    {
        let mut last = err(
            ErrorCode::Unavailable,
            format!("debate {id} is busy; try again"),
        );
        for _ in 0..20 {
            if let Some(actor) = self.actor(id).await {
                match ask(actor).await {
                    Err(e) if e.error.message == RELEASING => last = e,
                    r => return r,
                }
            } else {
                match self.adopt(id, Some(input())).await {
                    Ok(()) => return Ok(applied()),
                    Err(AdoptError::OwnedElsewhere) => {
                        match self.forward(id, op, body.clone()).await {
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

    /// `parley.debates.fork`: a new debate sharing the parent's contributions up to the end
    /// of a round, with the request's changes (checked like a submission against the
    /// operator's policy), stored and started like a submitted one. The parent is only
    /// read.
    pub(super) async fn fork(&self, payload: &[u8]) -> Reply {
        let req = decode_fork_request(payload).map_err(ErrorReply::from)?;
        let parent = req.debate_id.as_str();
        let (spec, cp) = within_deadline(async {
            let spec = self.store.spec(parent).await.map_err(unavailable)?;
            let cp = self.store.state(parent).await.map_err(unavailable)?;
            Ok::<_, ErrorReply>((spec, cp))
        })
        .await?;
        let (Some(spec), Some(cp)) = (spec, cp) else {
            return Err(self.not_found(parent));
        };
        let now = Utc::now();
        let id = new_debate_id(now);
        let (mut fspec, fstate) = parley_engine::fork(
            &spec,
            &cp.state,
            req.at_round,
            &req.changes,
            id.clone(),
            now,
        )
        .map_err(|e| err(ErrorCode::InvalidRequest, e.to_string()))?;
        fspec
            .validate_with(&self.policy)
            .map_err(|e| err(ErrorCode::InvalidRequest, e.to_string()))?;
        parley_engine::budget::admit(&mut fspec, &self.policy.max_debate, &self.pricing)
            .map_err(|e| err(ErrorCode::InvalidRequest, e.to_string()))?;
        within_deadline(async {
            self.store
                .ensure_dispatch_secret(&id)
                .await
                .map_err(unavailable)?;
            self.store
                .put_spec(&id, &fspec)
                .await
                .map_err(unavailable)?;
            self.store
                .save_state(&fstate, 0)
                .await
                .map_err(unavailable)?;
            self.store.mark_running(&id).await.map_err(unavailable)?;
            Ok::<_, ErrorReply>(())
        })
        .await?;
        match self.adopt(&id, None).await {
            Ok(()) | Err(AdoptError::OwnedElsewhere) => {}
            Err(e) => tracing::warn!(debate = %id, error = %e, "cannot start the fork yet"),
        }
        tracing::info!(debate = %id, parent, round = req.at_round, "fork accepted");
        Ok(json!({ "debateId": id, "forkedFrom": parent, "atRound": req.at_round }))
    }

    /// `parley.debates.feedback`: the user's verdict on a completed debate, written into its
    /// checkpoint (`userFeedback`) by compare-and-set, so a write of the debate's actor in
    /// between is never lost (the verdict is applied again to the newer checkpoint).
    pub(super) async fn feedback(&self, payload: &[u8]) -> Reply {
        let req = decode_feedback_request(payload).map_err(ErrorReply::from)?;
        let id = req.debate_id.as_str();
        for _ in 0..FEEDBACK_ATTEMPTS {
            let cp = self.store.state(id).await.map_err(unavailable)?;
            let cp = cp.ok_or_else(|| self.not_found(id))?;
            if cp.state.status != DebateStatus::Completed {
                return Err(err(
                    ErrorCode::Conflict,
                    format!(
                        "debate {id} is {}; feedback is for a completed debate",
                        cp.state.status.as_str()
                    ),
                ));
            }
            let mut state = cp.state;
            state.user_feedback = Some(req.feedback);
            if self
                .store
                .save_state(&state, cp.version)
                .await
                .map_err(unavailable)?
                .is_some()
            {
                return Ok(json!({ "debateId": id, "userFeedback": req.feedback }));
            }
        }
        Err(err(
            ErrorCode::Unavailable,
            format!("debate {id} was being written; try again"),
        ))
    }

    /// Hands a user command to the replica that owns the debate.
    pub(super) async fn forward_command(&self, id: &str, cmd: Command) -> Reply {
        self.forward(id, cmd.as_str(), Bytes::new()).await
    }

    /// Sends `parley.control.<id>.<op>` with `body` to the replica that owns the debate.
    pub(super) async fn forward(&self, id: &str, op: &str, body: Bytes) -> Reply {
        let subject = format!("{CONTROL_PREFIX}.{id}.{op}");
        let req = self.nats.request(subject, body);
        match tokio::time::timeout(Duration::from_secs(2), req).await {
            Ok(Ok(msg)) => serde_json::from_slice::<Value>(&msg.payload)
                .map_err(|e| err(ErrorCode::Internal, e.to_string()))
                .and_then(|v| match serde_json::from_value::<ErrorReply>(v.clone()) {
                    Ok(e) => Err(e),
                    Err(_) => Ok(v),
                }),
            _ => Err(err(
                ErrorCode::Unavailable,
                format!("debate {id} is owned by a replica that did not answer; try again"),
            )),
        }
    }

    /// `parley.control.<id>.<op>`: answered only by the owner (None = not ours, stay quiet).
    pub(super) async fn control(&self, subject: &str, payload: &[u8]) -> Option<Reply> {
        let rest = subject.strip_prefix(CONTROL_PREFIX)?.strip_prefix('.')?;
        let (id, op) = rest.rsplit_once('.')?;
        if !is_valid_debate_id(id) {
            return None;
        }
        let cmd = match op {
            "retry" => Command::Retry,
            "cancel" => Command::Cancel,
            "answer" => {
                let actor = self.actor(id).await?;
                let req = match decode_answer_request(payload) {
                    Ok(r) if r.debate_id == id => r,
                    Ok(_) => {
                        return Some(Err(err(
                            ErrorCode::InvalidRequest,
                            "the answer names another debate than its subject",
                        )))
                    }
                    Err(e) => return Some(Err(e.into())),
                };
                return Some(ask_answer(&actor, id, req.answers).await);
            }
            "steer" => {
                let actor = self.actor(id).await?;
                let (req, command) = match decode_steer_request(payload) {
                    Ok((r, c)) if r.debate_id == id => (r, c),
                    Ok(_) => {
                        return Some(Err(err(
                            ErrorCode::InvalidRequest,
                            "the steering command names another debate than its subject",
                        )))
                    }
                    Err(e) => return Some(Err(e.into())),
                };
                let steer = Steer {
                    command,
                    by: req.by,
                };
                return Some(ask_steer(&actor, id, steer).await);
            }
            "contribute" => return self.control_contribute(id, payload).await,
            _ => return None,
        };
        let actor = self.actor(id).await?;
        Some(ask(&actor, id, cmd).await)
    }
}

impl PartialEq for Command {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

/// The error reply for answers the debate refuses.
pub(super) fn answer_refused(e: parley_engine::AnswerError) -> ErrorReply {
    let code = if e.is_conflict() {
        ErrorCode::Conflict
    } else {
        ErrorCode::InvalidRequest
    };
    err(code, e.to_string())
}

/// The error reply for a steering command the debate refuses.
/// Who sends a command: the request's `by` and the NATS user its reply inbox names
/// (`_INBOX_<user>`), both when they differ.
pub(super) fn requester(reply_to: &str, by: Option<String>) -> Option<String> {
    let user = reply_to
        .split('.')
        .next()
        .and_then(subjects::inbox_user)
        .map(str::to_string);
    match (by, user) {
        (Some(by), Some(user)) if by != user => Some(format!("{by} (via {user})")),
        (Some(by), _) => Some(by),
        (None, user) => user,
    }
}

pub(super) fn steer_refused(e: parley_engine::SteerError) -> ErrorReply {
    let code = if e.is_conflict() {
        ErrorCode::Conflict
    } else {
        ErrorCode::InvalidRequest
    };
    err(code, format!("{}", e))
}

/// The reply to an applied steering command.
fn steer_accepted(id: &str, steer: &Steer) -> Value {
    json!({ "debateId": id, "accepted": "steer", "command": steer.command.as_str() })
}

/// Hands a steering command to the debate's actor.
pub(super) async fn ask_steer(actor: &ActorRef<DebateMsg>, id: &str, steer: Steer) -> Reply {
    let accepted = steer_accepted(id, &steer);
    let r = actor
        .call(
            |reply| DebateMsg::Steer { steer, reply },
            Some(Duration::from_secs(10)),
        )
        .await;
    match r {
        Ok(CallResult::Success(Ok(()))) => Ok(accepted),
        Ok(CallResult::Success(Err(crate::messages::SteerRefusal::Refused(e)))) => {
            Err(steer_refused(e))
        }
        Ok(CallResult::Success(Err(crate::messages::SteerRefusal::Other(e)))) => {
            Err(err(ErrorCode::Unavailable, e))
        }
        other => Err(no_answer(
            id,
            other.is_ok_and(|r| matches!(r, CallResult::Timeout)),
        )),
    }
}

/// Hands answers to the debate's actor; the reply says how many questions remain open.
pub(super) async fn ask_answer(
    actor: &ActorRef<DebateMsg>,
    id: &str,
    answers: Vec<Answer>,
) -> Reply {
    let r = actor
        .call(
            |reply| DebateMsg::Answer { answers, reply },
            Some(Duration::from_secs(10)),
        )
        .await;
    match r {
        Ok(CallResult::Success(Ok(remaining))) => Ok(json!({
            "debateId": id,
            "accepted": "answer",
            "remaining": remaining,
        })),
        Ok(CallResult::Success(Err(crate::messages::AnswerRefusal::Refused(e)))) => {
            Err(answer_refused(e))
        }
        Ok(CallResult::Success(Err(crate::messages::AnswerRefusal::Other(e)))) => {
            Err(err(ErrorCode::Unavailable, e))
        }
        other => Err(no_answer(
            id,
            other.is_ok_and(|r| matches!(r, CallResult::Timeout)),
        )),
    }
}

/// The reply when a debate's actor did not answer a call: after a timeout, "try again";
/// when it had stopped (the message could not be sent, or its reply port was dropped), the
/// debate is between owners, which the callers treat as [`RELEASING`]: they
/// look again for an actor, then adopt (seen when a retry arrives just as the debate
/// fails and its actor stops).
pub(super) fn no_answer(id: &str, timed_out: bool) -> ErrorReply {
    if timed_out {
        err(
            ErrorCode::Unavailable,
            format!("debate {id} did not answer; try again"),
        )
    } else {
        err(ErrorCode::Unavailable, RELEASING)
    }
}

pub(super) async fn ask(actor: &ActorRef<DebateMsg>, id: &str, cmd: Command) -> Reply {
    let r = match cmd {
        Command::Retry => {
            actor
                .call(DebateMsg::Retry, Some(Duration::from_secs(10)))
                .await
        }
        Command::Cancel => {
            actor
                .call(DebateMsg::Cancel, Some(Duration::from_secs(10)))
                .await
        }
    };
    match r {
        Ok(CallResult::Success(Ok(()))) => Ok(json!({ "debateId": id, "accepted": cmd.as_str() })),
        Ok(CallResult::Success(Err(e))) => Err(err(ErrorCode::Conflict, e)),
        other => Err(no_answer(
            id,
            other.is_ok_and(|r| matches!(r, CallResult::Timeout)),
        )),
    }
}
