//! The coordinator as a NATS service.
//!
//! - `parley.debates.submit|status|retry|cancel|answer`: request/reply, queue group
//!   `parley-coordinators` (one replica answers each request).
//! - `parley.debates.answer` (`AnswerRequest`): answers to a debate's clarification
//!   questions. Checked against the debate's checkpoint first (waiting, known ids, not yet
//!   answered: else a clear error and nothing changes), then applied by the debate's actor
//!   (here, by adoption when nobody owns it, or by the owner through
//!   `parley.control.<id>.answer`). A debate waiting for answers keeps its actor (and
//!   lease) but has nothing in flight; it survives crashes and takeovers like any other.
//!   With [`CoordinatorConfig::clarification_timeout`] its actor answers every open
//!   question `"NA"` once the debate has waited that long (counted from the checkpoint).
//! - `parley.debates.steer` (`SteerRequest`): pause, resume, guide, stop or extend a
//!   debate, like answers: checked against the checkpoint (a refusal changes nothing), then
//!   applied by the debate's actor (here, by adoption, or by the owner through
//!   `parley.control.<id>.steer`). Who sent it is recorded: the request's `by` and the NATS
//!   user its reply inbox names (`_INBOX_<user>`), when any.
//! - `parley.debates.contribute` (`ContributeRequest`): a person's answer to a human
//!   participant's open task, checked and applied like a steering command (see
//!   `contribute`).
//! - `parley.debates.fork` (`ForkRequest`): a new debate sharing a debate's contributions
//!   up to the end of a round (`parley_engine::fork`), checked like a submission, stored and
//!   started like one; the parent is only read.
//! - `parley.debates.feedback` (`FeedbackRequest`): the user's thumbs up/down on a
//!   completed debate, written into its checkpoint (`userFeedback`) by compare-and-set.
//! - `parley.debates.follow[.<user>]` / `parley.debates.list`: a consumer of one existing
//!   debate's events (under the follower caps: in total, per requester, per debate; see
//!   [`crate::follow`]), or of every debate's last event, created for the requester, who
//!   only pulls from it (`parley_cluster::events`).
//! - Every request is answered only on an inbox (`parley_cluster::nats::reply_subject`):
//!   a reply subject aimed anywhere else (the JetStream API above all) gets no answer.
//! - `parley.results.>`: every replica listens; a notification goes to the local actor of
//!   that debate, if any.
//! - `parley.control.<id>.<retry|cancel>`: every replica listens; only the owner of the
//!   debate answers. A replica that receives a user's retry/cancel for a debate another
//!   replica owns forwards it here.
//! - A scan on start-up and every [`CoordinatorConfig::scan_every`] adopts the debates of
//!   `parley:running` whose lease is free (a crashed or stopped replica's debates).
//! - JetStream's `MAX_DELIVERIES` advisory for the tasks stream (queue group: one replica
//!   handles each): the task message is a dead letter — recorded (`parley:deadletter`, the
//!   `parley_tasks_dead_lettered_total` metric, a log line), deleted from the stream, and
//!   announced on the debate's results subject so its owner re-dispatches it at once.
//!
//! Status replies never outgrow NATS's `max_payload`: a summary view, and the full state
//! inline when it fits in one page (a quarter of the server's `max_payload`, at most
//! 256 KiB) or else in pages of a snapshot kept in Redis for a minute (see
//! `parley_protocol::status`). `retry` of a failed debate resumes it from its failed node;
//! `retry` of a running one sends every outstanding task again as a new attempt (see
//! `Input::Retry`). `cancel` is recorded in Redis before anything else and always wins.
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
//! - Requests are decoded by `parley_protocol` ([`decode_submission`](parley_protocol::decode_submission),
//!   [`decode_debate_ref`](parley_protocol::decode_debate_ref)): sizes, ids, ranges, and the operator's
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
use futures::StreamExt;
use parley_protocol::subjects::{self, ErrorCode, ErrorReply};
use parley_protocol::{preview, ResultNotice, SubmissionPolicy};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef, RactorErr};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::deps::Deps;
use crate::messages::{AdoptError, DebateMsg, SupervisorMsg};
use crate::supervisor::Supervisor;
use parley_cluster::nats::{NatsEndpoint, INBOX_COORDINATOR};
use parley_cluster::{start_service, RedisStore};

mod contribute;
mod requests;
use requests::Command;

/// Prefix of the owner-to-owner control subjects.
pub const CONTROL_PREFIX: &str = "parley.control";

#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    pub nats_url: String,
    /// NATS credentials file (`.creds` or NKey seed), see `parley_cluster::nats`.
    pub nats_creds: Option<std::path::PathBuf>,
    /// Inbox prefix of the NATS replies; `None`: `_INBOX_coordinator`.
    pub nats_inbox_prefix: Option<String>,
    pub redis_url: String,
    /// Replicas of the JetStream streams (setting `stream_replicas`).
    pub stream_replicas: usize,
    /// Redis replicas each checkpoint write waits for (setting `redis_min_replicas`).
    pub redis_min_replicas: usize,
    /// Lease time-to-live: how long a crashed replica's debates wait before a takeover.
    pub lease_ttl: Duration,
    /// How often the supervisor renews every lease this replica holds, and debate actors
    /// poll Redis for results that changed (≤ TTL/3).
    pub poll_every: Duration,
    /// A debate actor idle this long while its debate only waits puts it to rest (see
    /// `crate::supervisor`); `None`: debates never rest.
    pub rest_after: Option<Duration>,
    /// How often the replica looks for debates without an owner.
    pub scan_every: Duration,
    /// Where `/metrics`, `/healthz` and `/readyz` are served (none: not at all).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// How long a finished (completed, failed, cancelled) debate's keys stay in Redis;
    /// `None`: forever.
    pub retention: Option<Duration>,
    /// Added to each task's timeout to make its deadline (see `parley_engine::machine`).
    pub task_deadline_margin: Duration,
    /// Failed adoptions after which a debate is failed (see `crate::actor`).
    pub max_actor_failures: u32,
    /// How long after shutdown was requested `run` returns at the latest.
    pub drain: Duration,
    /// What the operator allows a submission (maxTokens cap, model allow-lists, spend
    /// caps).
    pub policy: SubmissionPolicy,
    /// Prices and the completion cap budgets reserve with (see [`parley_engine::budget`]).
    pub pricing: parley_engine::Pricing,
    /// Requests handled at once; past it a request is answered `unavailable`.
    pub max_pending_requests: usize,
    /// Event followers open at once (see `parley_cluster::events`).
    pub max_followers: usize,
    /// How long a debate waits for clarification answers before open questions are
    /// answered `"NA"`; `None`: as long as it takes.
    pub clarification_timeout: Option<Duration>,
    /// Signs the decision record of each settled debate; `None`: records are unsigned.
    pub record_signing_key: Option<Arc<parley_record::SigningKey>>,
}

impl CoordinatorConfig {
    /// A configuration with the settings' defaults (see
    /// `parley_cluster::settings::CoordinatorSettings`) but for the given addresses and
    /// lease.
    pub fn new(nats_url: String, redis_url: String, lease_ttl: Duration) -> Self {
        let common = parley_cluster::settings::CommonSettings::default();
        let d = parley_cluster::settings::CoordinatorSettings::default();
        let secs = Duration::from_secs;
        Self {
            nats_url,
            nats_creds: None,
            nats_inbox_prefix: None,
            redis_url,
            stream_replicas: common.stream_replicas,
            redis_min_replicas: common.redis_min_replicas,
            lease_ttl,
            poll_every: (lease_ttl / 3).min(Duration::from_secs(3)),
            rest_after: (d.rest_after_secs > 0).then(|| secs(d.rest_after_secs)),
            scan_every: Duration::from_secs(2),
            metrics_addr: None,
            retention: d.retention.parse().ok().filter(|r| !r.is_zero()),
            task_deadline_margin: secs(d.task_deadline_margin_secs),
            max_actor_failures: crate::deps::DEFAULT_MAX_ACTOR_FAILURES,
            drain: secs(d.drain_secs),
            policy: SubmissionPolicy::default(),
            pricing: Default::default(),
            max_pending_requests: d.max_pending_requests,
            max_followers: d.max_followers,
            clarification_timeout: Some(secs(d.clarification_timeout_secs)),
            record_signing_key: None,
        }
    }
}

/// How long the pages of a paged status reply stay available.
pub const STATUS_SNAPSHOT_TTL: Duration = Duration::from_secs(60);

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
    js: jetstream::Context,
    sup: ActorRef<SupervisorMsg>,
    /// For `not_found` messages.
    retention: Option<Duration>,
    /// Largest status reply body (a page, or the state inline).
    page_bytes: usize,
    /// What submissions may choose.
    policy: SubmissionPolicy,
    pricing: parley_engine::Pricing,
    /// One permit per request being handled (bounds the spawned handlers).
    requests: Arc<Semaphore>,
    /// Event followers open at once, at most.
    max_followers: usize,
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
        samples: parley_cluster::redis_store::calibration::CompletionSamples::start(store.clone()),
        store: store.clone(),
        js: js.clone(),
        nats: nats.clone(),
        owner: owner.clone(),
        lease_ttl: config.lease_ttl,
        poll_every: config.poll_every,
        task_deadline_margin: config.task_deadline_margin,
        retention: config.retention,
        max_actor_failures: config.max_actor_failures,
        clarification_timeout: config.clarification_timeout,
        pricing: config.pricing.clone(),
        rest_after: config.rest_after,
        record_signing_key: config.record_signing_key.clone(),
    });
    let (sup, sup_join) = Actor::spawn(None, Supervisor, deps)
        .await
        .context("while starting the supervisor")?;
    // A status reply (and each of its pages' JSON, at most twice its data) stays at or
    // under half of what the server accepts.
    let page_bytes = (nats.server_info().max_payload / 4).clamp(4 * 1024, 256 * 1024);
    let svc = Arc::new(Service {
        store,
        nats: nats.clone(),
        js,
        sup: sup.clone(),
        retention: config.retention,
        page_bytes,
        policy: config.policy.clone(),
        pricing: config.pricing.clone(),
        requests: Arc::new(Semaphore::new(config.max_pending_requests.max(1))),
        max_followers: config.max_followers.max(1),
    });

    let mut loops = Vec::new();
    for subject in [
        subjects::SUBMIT,
        subjects::STATUS,
        subjects::RETRY,
        subjects::CANCEL,
        subjects::ANSWER,
        subjects::STEER,
        subjects::CONTRIBUTE,
        subjects::FORK,
        subjects::FEEDBACK,
        subjects::FOLLOW,
        // `parley.debates.follow.<user>` (see `crate::follow`).
        FOLLOW_AS_ANY,
        subjects::LIST,
        subjects::CALIBRATION,
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
    let advisories = nats
        .queue_subscribe(
            subjects::TASKS_MAX_DELIVERIES_ADVISORY,
            subjects::COORDINATOR_QUEUE.into(),
        )
        .await
        .context("while subscribing to the dead-letter advisories")?;
    loops.push(tokio::spawn(dead_letters(svc.clone(), advisories)));
    loops.push(tokio::spawn(scan(svc.clone(), config.scan_every)));
    loops.push(tokio::spawn(crate::follow::refresh(
        svc.store.clone(),
        svc.js.clone(),
    )));
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
        config
            .nats_inbox_prefix
            .clone()
            .unwrap_or_else(|| INBOX_COORDINATOR.to_string()),
    );
    let (nats, store) =
        start_service(&endpoint, &config.redis_url, config.metrics_addr, shutdown).await?;
    let store = store.with_min_replicas(config.redis_min_replicas);
    let js = jetstream::new(nats.clone());
    // A JetStream without a leader for a while (`503`) is an outage to wait out; a signal
    // meanwhile: the caller's `unless_shutdown` stops this start-up.
    use parley_cluster::streams::{events_stream, tasks_stream, wait_for_jetstream};
    let replicas = config.stream_replicas;
    let tasks = wait_for_jetstream("the tasks stream", shutdown, || tasks_stream(&js, replicas))
        .await
        .map_err(|e| anyhow::anyhow!("while creating the tasks stream: {e}"))?;
    let events = wait_for_jetstream("the events stream", shutdown, || {
        events_stream(&js, replicas)
    })
    .await
    .map_err(|e| anyhow::anyhow!("while creating the events stream: {e}"))?;
    if tasks.is_none() || events.is_none() {
        return std::future::pending().await;
    }
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
        // A debate at rest has no actor: its lease is released below.
        let actor = actor.as_ref()?;
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

/// How long the storage part of a submission or a status request may take before it is
/// answered `unavailable`: under the 10 s a NATS client waits for a reply by default,
/// although one Redis call may take up to `parley_cluster::redis_store::RESPONSE_TIMEOUT`
/// (10 s, for large checkpoints). A submission cut short may have stored its spec without
/// starting (as after any storage error); with an idempotency key, sending it again
/// completes it. (Starting the debate's actor is not cut short: the debate exists then.)
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(7);

/// `fut`'s reply, or `unavailable` when it takes longer than [`REQUEST_DEADLINE`].
async fn within_deadline<T>(
    fut: impl std::future::Future<Output = Result<T, ErrorReply>>,
) -> Result<T, ErrorReply> {
    tokio::time::timeout(REQUEST_DEADLINE, fut)
        .await
        .unwrap_or_else(|_| {
            Err(err(
                ErrorCode::Unavailable,
                format!(
                    "storage did not answer within {} s; try again",
                    REQUEST_DEADLINE.as_secs()
                ),
            ))
        })
}

/// `parley.debates.follow.<user>` for every user.
const FOLLOW_AS_ANY: &str = "parley.debates.follow.*";

/// Compare-and-set attempts of a feedback write.
const FEEDBACK_ATTEMPTS: u32 = 5;

/// The metric label of a request subject.
fn subject_label(subject: &str) -> &'static str {
    match subject {
        subjects::SUBMIT => "submit",
        subjects::STATUS => "status",
        subjects::RETRY => "retry",
        subjects::CANCEL => "cancel",
        subjects::ANSWER => "answer",
        subjects::STEER => "steer",
        subjects::CONTRIBUTE => "contribute",
        subjects::FORK => "fork",
        subjects::FEEDBACK => "feedback",
        s if subjects::follow_identity(s).is_some() => "follow",
        subjects::LIST => "list",
        subjects::CALIBRATION => "calibration",
        _ => "control",
    }
}

async fn serve(svc: Arc<Service>, mut sub: async_nats::Subscriber) {
    while let Some(msg) = sub.next().await {
        let label = subject_label(msg.subject.as_str());
        // A request without a reply subject cannot be answered; one whose reply subject is
        // not an inbox is not (counted and logged): nothing to do.
        let Some(reply_to) = parley_cluster::nats::reply_subject(&msg, label) else {
            continue;
        };
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
                subjects::STATUS => Some(within_deadline(svc.status(&msg.payload)).await),
                subjects::RETRY => Some(svc.user_command(&msg.payload, Command::Retry).await),
                subjects::CANCEL => Some(svc.user_command(&msg.payload, Command::Cancel).await),
                subjects::ANSWER => Some(svc.answer(&msg.payload).await),
                subjects::STEER => Some(svc.steer(reply_to.as_str(), &msg.payload).await),
                subjects::CONTRIBUTE => Some(svc.contribute(reply_to.as_str(), &msg.payload).await),
                subjects::FORK => Some(svc.fork(&msg.payload).await),
                subjects::FEEDBACK => Some(within_deadline(svc.feedback(&msg.payload)).await),
                s if subjects::follow_identity(s).is_some() => {
                    Some(within_deadline(svc.follow(s, reply_to.as_str(), &msg.payload)).await)
                }
                subjects::LIST => Some(within_deadline(svc.follow_all()).await),
                subjects::CALIBRATION => Some(within_deadline(svc.calibration()).await),
                s if s.starts_with("parley.debates.follow.") => Some(Err(err(
                    ErrorCode::InvalidRequest,
                    format!(
                        "{}: the user name after parley.debates.follow. must be 1 to {} \
                         letters, digits, '_' or '-'",
                        parley_protocol::preview(s, 120),
                        subjects::MAX_USER_NAME_BYTES
                    ),
                ))),
                s => svc.control(s, &msg.payload).await,
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
        let (task_id, attempt) = (n.task_id, n.attempt);
        let routed = if n.dead_lettered {
            DebateMsg::Lost { task_id, attempt }
        } else if n.secret_missing {
            DebateMsg::SecretMissing { task_id, attempt }
        } else if let Some(delay_ms) = n.handed_back_ms {
            DebateMsg::HandedBack {
                task_id,
                attempt,
                delay_ms,
            }
        } else {
            DebateMsg::ResultReady { task_id, attempt }
        };
        let _ = svc.sup.cast(SupervisorMsg::Route {
            id: n.debate_id,
            msg: routed,
        });
    }
}

/// JetStream's `MAX_DELIVERIES` advisory (the fields used).
#[derive(serde::Deserialize)]
struct MaxDeliveries {
    stream_seq: u64,
    #[serde(default)]
    consumer: String,
    #[serde(default)]
    deliveries: u64,
}

async fn dead_letters(svc: Arc<Service>, mut sub: async_nats::Subscriber) {
    while let Some(msg) = sub.next().await {
        match serde_json::from_slice::<MaxDeliveries>(&msg.payload) {
            Ok(a) => svc.dead_letter(a).await,
            Err(e) => tracing::warn!(error = %e, "ignoring an undecodable advisory"),
        }
    }
}

/// Debates a scan tries to adopt at most (more wait for the next scan).
const SCAN_BATCH: usize = 500;
/// Every this many scans (and at start-up) the running set is checked against the lease
/// index.
const RECONCILE_EVERY: u32 = 30;

/// Adopts the debates whose lease expired (or that wait for an owner), as the lease index
/// lists them: the work is the number of such debates, not of running ones (see
/// `parley_cluster::redis_store` `leases`).
async fn scan(svc: Arc<Service>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    let mut scans: u32 = 0;
    loop {
        tick.tick().await;
        if scans.is_multiple_of(RECONCILE_EVERY) {
            match svc.store.reconcile_lease_index().await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(
                        debates = n,
                        "running debates missing from the lease index added"
                    )
                }
                Err(e) => tracing::warn!(error = %e, "cannot check the lease index"),
            }
        }
        scans = scans.wrapping_add(1);
        let ids = match svc.store.ownerless(SCAN_BATCH).await {
            Ok(ids) if ids.is_empty() => continue,
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list debates without an owner");
                continue;
            }
        };
        for id in svc.not_owned(ids).await {
            match svc.adopt(&id, None).await {
                Ok(()) => tracing::info!(debate = %id, "took over a debate without an owner"),
                Err(AdoptError::OwnedElsewhere) => {
                    // The index was behind its owner's lease: bring it up to date, so the
                    // next scan does not try again.
                    if let Err(e) = svc.store.reindex_lease(&id).await {
                        tracing::warn!(debate = %id, error = %e, "cannot update the lease index");
                    }
                }
                Err(e) => tracing::warn!(debate = %id, error = %e, "cannot take over a debate"),
            }
        }
    }
}
