//! The coordinator as a NATS service.
//!
//! - `parley.debates.submit|status|retry|cancel`: request/reply, queue group
//!   `parley-coordinators` (one replica answers each request).
//! - `parley.results.>`: every replica listens; a notification goes to the local actor of
//!   that debate, if any.
//! - `parley.control.<id>.<retry|cancel>`: every replica listens; only the owner of the
//!   debate answers. A replica that receives a user's retry/cancel for a debate another
//!   replica owns forwards it here.
//! - A scan on start-up and every [`CoordinatorConfig::scan_every`] adopts the debates of
//!   `parley:running` whose lease is free (a crashed or stopped replica's debates).
//!
//! Shutdown ([`CoordinatorConfig::drain`] after the signal at the latest, whatever the state
//! of NATS and Redis): stop answering and scanning, stop the debate actors after their
//! current message (each releases its lease so another replica resumes the debate without
//! waiting for the TTL), release every lease this replica still holds, flush NATS. An
//! actor still waiting on NATS or Redis when the deadline nears is killed; a lease Redis
//! did not release expires after its TTL; checkpointed events not yet published are
//! published by whichever replica resumes the debate. What it gave up on is logged and
//! returned as [`parley_cluster::DrainIncomplete`].

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use bytes::Bytes;
use chrono::Utc;
use futures::StreamExt;
use parley_protocol::subjects::{self, ErrorCode, ErrorReply};
use parley_protocol::{
    is_valid_debate_id, limits, new_debate_id, DebateSpec, DebateStatus, SCHEMA_VERSION,
};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef, RactorErr};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::actor::{AdoptError, DebateMsg, Deps, Supervisor, SupervisorMsg};
use crate::{Input, Machine};
use parley_cluster::{start_service, RedisStore};

/// Prefix of the owner-to-owner control subjects.
pub const CONTROL_PREFIX: &str = "parley.control";

/// Default drain deadline of a coordinator (setting `drain_secs`).
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    pub nats_url: String,
    pub redis_url: String,
    /// Lease time-to-live: how long a crashed replica's debates wait before a takeover.
    pub lease_ttl: Duration,
    /// How often a debate actor renews its lease and polls Redis for results (≤ TTL/3).
    pub poll_every: Duration,
    /// How often the replica looks for debates without an owner.
    pub scan_every: Duration,
    /// Where `/metrics`, `/healthz` and `/readyz` are served (none: not at all).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// How long after shutdown was requested `run` returns at the latest.
    pub drain: Duration,
}

impl CoordinatorConfig {
    pub fn new(nats_url: String, redis_url: String, lease_ttl: Duration) -> Self {
        Self {
            nats_url,
            redis_url,
            lease_ttl,
            poll_every: (lease_ttl / 3).min(Duration::from_secs(3)),
            scan_every: Duration::from_secs(2),
            metrics_addr: None,
            drain: DEFAULT_DRAIN,
        }
    }
}

type Reply = Result<Value, ErrorReply>;

fn err(code: ErrorCode, message: impl Into<String>) -> ErrorReply {
    ErrorReply::new(code, message)
}

fn unavailable(e: impl std::fmt::Display) -> ErrorReply {
    err(ErrorCode::Unavailable, format!("storage unavailable: {e}"))
}

struct Service {
    store: RedisStore,
    nats: async_nats::Client,
    sup: ActorRef<SupervisorMsg>,
}

/// Runs a coordinator replica until `shutdown` is cancelled.
pub async fn run(config: CoordinatorConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    // NATS retries its first connection forever: a signal before the backends answer
    // stops the coordinator at once (it owns nothing yet).
    let Some(started) =
        parley_cluster::unless_shutdown(&shutdown, connect(&config, &shutdown)).await
    else {
        tracing::info!("stopped before NATS and Redis were reachable");
        return Ok(());
    };
    let (nats, store, js) = started?;
    let owner = format!(
        "coordinator-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let deps = Arc::new(Deps {
        store: store.clone(),
        js,
        owner: owner.clone(),
        lease_ttl: config.lease_ttl,
        poll_every: config.poll_every,
    });
    let (sup, sup_join) = Actor::spawn(None, Supervisor, deps)
        .await
        .context("while starting the supervisor")?;
    let svc = Arc::new(Service {
        store,
        nats: nats.clone(),
        sup: sup.clone(),
    });

    let mut loops = Vec::new();
    for subject in [
        subjects::SUBMIT,
        subjects::STATUS,
        subjects::RETRY,
        subjects::CANCEL,
    ] {
        let sub = nats
            .queue_subscribe(subject, subjects::COORDINATOR_QUEUE.into())
            .await
            .with_context(|| format!("while subscribing to {subject}"))?;
        loops.push(tokio::spawn(serve(svc.clone(), sub)));
    }
    let results = nats
        .subscribe(format!("{}.>", subjects::RESULTS_PREFIX))
        .await
        .context("while subscribing to results")?;
    loops.push(tokio::spawn(route_results(svc.clone(), results)));
    let control = nats
        .subscribe(format!("{CONTROL_PREFIX}.>"))
        .await
        .context("while subscribing to control")?;
    loops.push(tokio::spawn(serve(svc.clone(), control)));
    loops.push(tokio::spawn(scan(svc.clone(), config.scan_every)));
    // (A signal meanwhile goes straight to the drain.)
    if let Some(flushed) = parley_cluster::unless_shutdown(&shutdown, nats.flush()).await {
        flushed.context("while flushing subscriptions")?;
        tracing::info!(owner = %owner, "coordinator ready");
    }

    shutdown.cancelled().await;
    let deadline = Instant::now() + config.drain;
    tracing::info!(
        deadline_ms = config.drain.as_millis() as u64,
        "coordinator draining"
    );
    for l in &loops {
        l.abort();
    }
    let gave_up = drain(&svc, &owner, sup_join, deadline, &config).await;
    for what in &gave_up {
        tracing::warn!(gave_up = %what, "drain incomplete");
    }
    tracing::info!(clean = gave_up.is_empty(), "coordinator stopped");
    parley_cluster::DrainIncomplete::check(gave_up)
}

/// NATS, Redis and the JetStream streams.
async fn connect(
    config: &CoordinatorConfig,
    shutdown: &CancellationToken,
) -> anyhow::Result<(async_nats::Client, RedisStore, jetstream::Context)> {
    let (nats, store) = start_service(
        &config.nats_url,
        &config.redis_url,
        config.metrics_addr,
        shutdown,
    )
    .await?;
    let js = jetstream::new(nats.clone());
    parley_cluster::streams::tasks_stream(&js)
        .await
        .map_err(|e| anyhow::anyhow!("while creating the tasks stream: {e}"))?;
    parley_cluster::streams::events_stream(&js)
        .await
        .map_err(|e| anyhow::anyhow!("while creating the events stream: {e}"))?;
    Ok((nats, store, js))
}

/// Stops this replica's debates and releases their leases by `deadline` (the request
/// loops and the scan are stopped already); returns what it gave up on. The last quarter
/// of the drain time (at most 2 s) is kept for releasing leases and flushing NATS.
async fn drain(
    svc: &Service,
    owner: &str,
    sup_join: tokio::task::JoinHandle<()>,
    deadline: Instant,
    config: &CoordinatorConfig,
) -> Vec<String> {
    let reserve = (config.drain / 4).min(Duration::from_secs(2));
    let ttl_ms = config.lease_ttl.as_millis();
    let mut gave_up = Vec::new();
    let owned = match tokio::time::timeout_at(
        deadline - reserve,
        svc.sup.call(SupervisorMsg::Owned, None),
    )
    .await
    {
        Ok(Ok(CallResult::Success(owned))) => owned,
        _ => {
            gave_up.push(format!(
                "this replica's debates (the supervisor did not answer; their leases expire within {ttl_ms} ms)"
            ));
            Vec::new()
        }
    };
    // Each actor finishes its current message, then releases its lease and stops. One still
    // waiting on NATS or Redis near the deadline is killed: its debate is resumed from its
    // checkpoint by the replica that takes it over.
    let stop_by = deadline - reserve;
    let stops = owned.iter().map(|(id, actor)| async move {
        let left = stop_by.saturating_duration_since(Instant::now());
        match actor.stop_and_wait(Some("shutdown".into()), Some(left)).await {
            Err(RactorErr::Timeout) => {
                actor.kill();
                Some(format!(
                    "debate {id} (its actor was still waiting on NATS or Redis; another replica resumes it from its checkpoint)"
                ))
            }
            // Stopped, or had stopped already.
            _ => None,
        }
    });
    gave_up.extend(futures::future::join_all(stops).await.into_iter().flatten());
    // Owner-checked: a no-op for the leases the actors released themselves.
    let release_by = deadline - reserve / 2;
    let releases = owned.iter().map(|(id, _)| async move {
        match tokio::time::timeout_at(release_by, svc.store.release_lease(id, owner)).await {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(format!(
                "the lease of debate {id} ({e}; it expires within {ttl_ms} ms)"
            )),
            Err(_) => Some(format!(
                "the lease of debate {id} (Redis did not answer; it expires within {ttl_ms} ms)"
            )),
        }
    });
    gave_up.extend(
        futures::future::join_all(releases)
            .await
            .into_iter()
            .flatten(),
    );
    svc.sup.stop(Some("shutdown".into()));
    if tokio::time::timeout_at(release_by, sup_join).await.is_err() {
        tracing::warn!("the supervisor did not stop in time");
    }
    match tokio::time::timeout_at(deadline, svc.nats.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => gave_up.push(format!("flushing replies and publishes to NATS ({e})")),
        Err(_) => gave_up.push("flushing replies and publishes to NATS (unreachable)".into()),
    }
    gave_up
}

async fn serve(svc: Arc<Service>, mut sub: async_nats::Subscriber) {
    while let Some(msg) = sub.next().await {
        let svc = svc.clone();
        tokio::spawn(async move {
            let Some(reply_to) = msg.reply.clone() else {
                return;
            };
            let subject = msg.subject.to_string();
            let reply = match subject.as_str() {
                subjects::SUBMIT => Some(svc.submit(&msg.payload).await),
                subjects::STATUS => Some(svc.status(&msg.payload).await),
                subjects::RETRY => Some(svc.user_command(&msg.payload, Command::Retry).await),
                subjects::CANCEL => Some(svc.user_command(&msg.payload, Command::Cancel).await),
                s => svc.control(s).await,
            };
            let Some(reply) = reply else { return };
            let body = match reply {
                Ok(v) => serde_json::to_vec(&v),
                Err(e) => serde_json::to_vec(&e),
            }
            .unwrap_or_default();
            if let Err(e) = svc.nats.publish(reply_to, body.into()).await {
                tracing::warn!(error = %e, "cannot send a reply");
            }
        });
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Notification {
    debate_id: String,
    task_id: String,
    attempt: u32,
}

async fn route_results(svc: Arc<Service>, mut sub: async_nats::Subscriber) {
    while let Some(msg) = sub.next().await {
        let Ok(n) = serde_json::from_slice::<Notification>(&msg.payload) else {
            tracing::warn!(subject = %msg.subject, "ignoring an undecodable result notification");
            continue;
        };
        let _ = svc.sup.cast(SupervisorMsg::Route {
            id: n.debate_id,
            msg: DebateMsg::ResultReady {
                task_id: n.task_id,
                attempt: n.attempt,
            },
        });
    }
}

async fn scan(svc: Arc<Service>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let ids = match svc.store.running().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list running debates");
                continue;
            }
        };
        for id in ids {
            if svc.actor(&id).await.is_some() {
                continue;
            }
            match svc.adopt(&id, None).await {
                Ok(()) => tracing::info!(debate = %id, "took over a debate without an owner"),
                Err(AdoptError::OwnedElsewhere) => {}
                Err(e) => tracing::warn!(debate = %id, error = %e, "cannot take over a debate"),
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Command {
    Retry,
    Cancel,
}

impl Command {
    fn as_str(self) -> &'static str {
        match self {
            Command::Retry => "retry",
            Command::Cancel => "cancel",
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DebateRef {
    debate_id: String,
}

fn debate_ref(payload: &[u8]) -> Result<String, ErrorReply> {
    let v: Value = serde_json::from_slice(payload)
        .map_err(|e| err(ErrorCode::InvalidJson, format!("not JSON: {e}")))?;
    let r: DebateRef = serde_json::from_value(v).map_err(|e| {
        err(
            ErrorCode::InvalidRequest,
            format!("expected {{\"debateId\": ...}}: {e}"),
        )
    })?;
    if !is_valid_debate_id(&r.debate_id) {
        return Err(err(
            ErrorCode::InvalidRequest,
            format!("debateId: {:?} is not a debate id", r.debate_id),
        ));
    }
    Ok(r.debate_id)
}

impl Service {
    async fn actor(&self, id: &str) -> Option<ActorRef<DebateMsg>> {
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

    async fn adopt(&self, id: &str, follow_up: Option<Input>) -> Result<(), AdoptError> {
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

    async fn submit(&self, payload: &[u8]) -> Reply {
        if payload.len() > limits::MAX_SUBMISSION_BYTES {
            return Err(err(
                ErrorCode::PayloadTooLarge,
                format!(
                    "submission is {} bytes, the limit is {}",
                    payload.len(),
                    limits::MAX_SUBMISSION_BYTES
                ),
            ));
        }
        let v: Value = serde_json::from_slice(payload)
            .map_err(|e| err(ErrorCode::InvalidJson, format!("not JSON: {e}")))?;
        if let Some(sv) = v.get("schemaVersion") {
            if sv.as_u64() != Some(u64::from(SCHEMA_VERSION)) {
                return Err(err(
                    ErrorCode::UnsupportedSchemaVersion,
                    format!("schemaVersion: unsupported {sv} (this build speaks {SCHEMA_VERSION})"),
                ));
            }
        }
        let spec: DebateSpec = serde_json::from_value(v)
            .map_err(|e| err(ErrorCode::InvalidRequest, format!("invalid debate: {e}")))?;
        spec.validate()
            .map_err(|e| err(ErrorCode::InvalidRequest, e.to_string()))?;

        let now = Utc::now();
        let mut id = new_debate_id(now);
        if let Some(key) = &spec.idempotency_key {
            // Every copy of a submission gets the id bound first. Whoever bound it may have
            // died before creating the debate, so each copy makes sure it exists: every
            // step below is create-if-absent.
            id = self
                .store
                .bind_idempotency_key(key, &id)
                .await
                .map_err(unavailable)?;
        }
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
                return Ok(json!({ "debateId": id }));
            }
        }
        self.store.mark_running(&id).await.map_err(unavailable)?;
        match self.adopt(&id, None).await {
            // Another replica's scan may have been quicker: it runs the debate.
            Ok(()) | Err(AdoptError::OwnedElsewhere) => {}
            // The scan retries later.
            Err(e) => tracing::warn!(debate = %id, error = %e, "cannot start the debate yet"),
        }
        tracing::info!(debate = %id, "debate accepted");
        Ok(json!({ "debateId": id }))
    }

    async fn status(&self, payload: &[u8]) -> Reply {
        let id = debate_ref(payload)?;
        let cp = self.store.state(&id).await.map_err(unavailable)?;
        let mut state = cp
            .ok_or_else(|| err(ErrorCode::NotFound, format!("no debate {id}")))?
            .state;
        // The outbox is delivery bookkeeping; its events are on the events stream.
        state.engine.outbox.clear();
        serde_json::to_value(&state).map_err(|e| err(ErrorCode::Internal, e.to_string()))
    }

    async fn user_command(&self, payload: &[u8], cmd: Command) -> Reply {
        let id = debate_ref(payload)?;
        let cp = self.store.state(&id).await.map_err(unavailable)?;
        let cp = cp.ok_or_else(|| err(ErrorCode::NotFound, format!("no debate {id}")))?;
        let status = cp.state.status;
        match cmd {
            Command::Retry if status != DebateStatus::Failed => {
                return Err(err(
                    ErrorCode::Conflict,
                    format!(
                        "debate {id} is {}; only a failed debate can be retried",
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
        // The owner may be changing hands (an actor releasing the debate, a scan holding
        // the lease for a moment): try the local actor, adoption, then the owner, a few times.
        if cmd == Command::Retry {
            self.store.mark_running(&id).await.map_err(unavailable)?;
        }
        let mut last = err(
            ErrorCode::Unavailable,
            format!("debate {id} is busy; try again"),
        );
        for _ in 0..20 {
            if let Some(actor) = self.actor(&id).await {
                match ask(&actor, &id, cmd).await {
                    Err(e) if e.error.message == crate::actor::RELEASING => last = e,
                    r => return r,
                }
            } else {
                let follow_up = match cmd {
                    Command::Retry => Input::Retry,
                    Command::Cancel => Input::Cancel,
                };
                match self.adopt(&id, Some(follow_up)).await {
                    Ok(()) => return Ok(json!({ "debateId": id, "accepted": cmd.as_str() })),
                    Err(AdoptError::OwnedElsewhere) => match self.forward(&id, cmd).await {
                        Err(e) if e.error.code == ErrorCode::Unavailable => last = e,
                        r => return r,
                    },
                    Err(AdoptError::Failed(e)) => return Err(err(ErrorCode::Unavailable, e)),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last)
    }

    /// Hands a user command to the replica that owns the debate.
    async fn forward(&self, id: &str, cmd: Command) -> Reply {
        let subject = format!("{CONTROL_PREFIX}.{id}.{}", cmd.as_str());
        let req = self.nats.request(subject, Bytes::new());
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
    async fn control(&self, subject: &str) -> Option<Reply> {
        let rest = subject.strip_prefix(CONTROL_PREFIX)?.strip_prefix('.')?;
        let (id, op) = rest.rsplit_once('.')?;
        let cmd = match op {
            "retry" => Command::Retry,
            "cancel" => Command::Cancel,
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

async fn ask(actor: &ActorRef<DebateMsg>, id: &str, cmd: Command) -> Reply {
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
        _ => Err(err(
            ErrorCode::Unavailable,
            format!("debate {id} did not answer; try again"),
        )),
    }
}
