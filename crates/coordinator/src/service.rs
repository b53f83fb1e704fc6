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
//!
//! # The edge
//! - Requests are decoded by `parley_protocol` ([`decode_submission`],
//!   [`decode_debate_ref`]): sizes, ids, ranges, and the operator's
//!   [`SubmissionPolicy`] (the `max_tokens` cap and the model allow-lists of the
//!   `providers` section of [`CoordinatorConfig::policy`]) — a model outside an allow-list
//!   is refused here, at submit time. A submission naming an endpoint or carrying anything
//!   key-like is refused (`invalid_request`, naming the field).
//! - At most [`CoordinatorConfig::max_pending_requests`] requests are handled at once; past
//!   that a request is answered `unavailable` at once instead of spawning without bound.
//! - An idempotency key sent again with a different spec is a `conflict` (the key is bound
//!   to the debate id and a SHA-256 digest of the spec first sent with it).
//! - Result notifications are hints: a [`ResultNotice`] names a result; the debate actor
//!   reads it from Redis and applies it only if it is for a task and attempt it is waiting
//!   for (see [`crate::actor`]).
//! - Each debate gets a dispatch secret at submission; tasks carry a token derived from it
//!   (`parley_cluster::dispatch`), so workers run only tasks the coordinator sent.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use bytes::Bytes;
use chrono::Utc;
use futures::StreamExt;
use parley_protocol::subjects::{self, ErrorCode, ErrorReply};
use parley_protocol::{
    decode_debate_ref, decode_submission, is_valid_debate_id, new_debate_id, preview, DebateStatus,
    ResultNotice, SubmissionPolicy,
};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef, RactorErr};
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::actor::{AdoptError, DebateMsg, Deps, Supervisor, SupervisorMsg};
use crate::{Input, Machine};
use parley_cluster::nats::{NatsEndpoint, INBOX_COORDINATOR};
use parley_cluster::{start_service, RedisStore};

/// Default of [`CoordinatorConfig::max_pending_requests`].
pub const DEFAULT_MAX_PENDING_REQUESTS: usize = 256;

/// Prefix of the owner-to-owner control subjects.
pub const CONTROL_PREFIX: &str = "parley.control";

/// Default drain deadline of a coordinator (setting `drain_secs`).
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    pub nats_url: String,
    /// NATS credentials file (`.creds` or NKey seed), see `parley_cluster::nats`.
    pub nats_creds: Option<std::path::PathBuf>,
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
    /// What the operator allows a submission (maxTokens cap, model allow-lists).
    pub policy: SubmissionPolicy,
    /// Requests handled at once; past it a request is answered `unavailable`.
    pub max_pending_requests: usize,
}

impl CoordinatorConfig {
    pub fn new(nats_url: String, redis_url: String, lease_ttl: Duration) -> Self {
        Self {
            nats_url,
            nats_creds: None,
            redis_url,
            lease_ttl,
            poll_every: (lease_ttl / 3).min(Duration::from_secs(3)),
            scan_every: Duration::from_secs(2),
            metrics_addr: None,
            drain: DEFAULT_DRAIN,
            policy: SubmissionPolicy::default(),
            max_pending_requests: DEFAULT_MAX_PENDING_REQUESTS,
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
    /// What submissions may choose.
    policy: SubmissionPolicy,
    /// One permit per request being handled (bounds the spawned handlers).
    requests: Arc<Semaphore>,
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
        policy: config.policy.clone(),
        requests: Arc::new(Semaphore::new(config.max_pending_requests.max(1))),
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
    let endpoint = NatsEndpoint::new(
        config.nats_url.clone(),
        config.nats_creds.clone(),
        INBOX_COORDINATOR,
    );
    let (nats, store) =
        start_service(&endpoint, &config.redis_url, config.metrics_addr, shutdown).await?;
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

/// The metric label of a request subject.
fn subject_label(subject: &str) -> &'static str {
    match subject {
        subjects::SUBMIT => "submit",
        subjects::STATUS => "status",
        subjects::RETRY => "retry",
        subjects::CANCEL => "cancel",
        _ => "control",
    }
}

async fn serve(svc: Arc<Service>, mut sub: async_nats::Subscriber) {
    while let Some(msg) = sub.next().await {
        // A request without a reply subject cannot be answered: nothing to do.
        let Some(reply_to) = msg.reply.clone() else {
            continue;
        };
        let label = subject_label(msg.subject.as_str());
        let Ok(permit) = svc.requests.clone().try_acquire_owned() else {
            // Refused at once: a burst never turns into an unbounded number of handlers.
            let e = err(
                ErrorCode::Unavailable,
                "the coordinator is handling as many requests as it takes; try again",
            );
            parley_telemetry::metrics().request_error(label, e.error.code.as_str());
            let body = serde_json::to_vec(&e).unwrap_or_default();
            if let Err(e) = svc.nats.publish(reply_to, body.into()).await {
                tracing::warn!(error = %e, "cannot send a reply");
            }
            continue;
        };
        let svc = svc.clone();
        tokio::spawn(async move {
            let _permit = permit;
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
                Err(e) => {
                    parley_telemetry::metrics().request_error(label, e.error.code.as_str());
                    serde_json::to_vec(&e)
                }
            }
            .unwrap_or_default();
            if let Err(e) = svc.nats.publish(reply_to, body.into()).await {
                tracing::warn!(error = %e, "cannot send a reply");
            }
        });
    }
}

/// Routes result notices to the debate's actor. A notice is only a hint: the actor reads
/// the result from Redis and decides whether it waits for it.
async fn route_results(svc: Arc<Service>, mut sub: async_nats::Subscriber) {
    while let Some(msg) = sub.next().await {
        let notice = serde_json::from_slice::<ResultNotice>(&msg.payload)
            .ok()
            .filter(|n| n.validate().is_ok())
            .filter(|n| msg.subject.as_str() == subjects::results_subject(&n.debate_id));
        let Some(n) = notice else {
            parley_telemetry::metrics().result_dropped(parley_telemetry::DropReason::Invalid);
            tracing::warn!(
                subject = %preview(msg.subject.as_str(), 120),
                "dropping a result notification that is not a valid notice for its subject"
            );
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

fn debate_ref(payload: &[u8]) -> Result<String, ErrorReply> {
    decode_debate_ref(payload).map_err(ErrorReply::from)
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
        let spec = decode_submission(payload, &self.policy).map_err(ErrorReply::from)?;

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
        if !is_valid_debate_id(id) {
            return None;
        }
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
