//! The supervisor of a coordinator's debates (ractor): their registry, their leases, and
//! rest.
//!
//! # Runtime semantics
//! - The registry maps each debate this coordinator owns (holds the lease of) to its
//!   entry: an active [`DebateActor`], or a debate at rest (no actor, a few hundred bytes).
//! - **Leases are kept by the supervisor, all at once.** Every [`Deps::poll_every`] one
//!   pass renews the lease of every debate in the registry (one script per debate,
//!   pipelined on one connection, which also reports a pending cancel and the number of
//!   stored results: [`RedisStore::keep_leases`]) and records the new expiries in the
//!   lease index. An active actor gets the outcome as its [`DebateMsg::Tick`]; a debate at
//!   rest whose lease is lost leaves the registry. A pass still running when the next is
//!   due is not doubled. (An actor whose tick comes late renews its lease itself before
//!   its next message, see `crate::actor`.)
//! - **Rest.** A debate whose actor handled nothing for [`Deps::rest_after`] while it only
//!   waits (tasks in flight, or answers to its questions; no retry backing off) goes to
//!   rest: the actor hands the supervisor its checkpoint version and the machine's
//!   [`Runtime`](parley_engine::Runtime) (attempts in flight and their deadlines), the supervisor replaces the
//!   entry and the actor stops without touching the lease. Any message for the debate
//!   (a result notice, a user command, a dead letter, a hand-back) wakes it: a new actor
//!   is started from the checkpoint with the runtime put back — nothing is dispatched
//!   again, no event is emitted — and gets the message. The renewal pass wakes a debate at
//!   rest when its results changed (a notice lost on the way), a cancel is pending, or
//!   its earliest deadline (a task's, or the clarification timeout) has come. A debate
//!   whose checkpoint moved on meanwhile (it is not ours any more) is resumed like an
//!   adoption instead.
//! - Messages that reach an actor between its request to rest and the supervisor's
//!   answer go back to the supervisor, which delivers them to the woken debate: the
//!   mailbox order of one sender is kept, nothing is lost.
//! - Adoption takes the lease *before* the actor starts; a failed actor's lease is
//!   released (and its failure counted, see `crate::actor`) so the scan resumes it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use parley_cluster::redis_store::LeaseCheck;
use parley_cluster::RedisStore;
use parley_protocol::DebateStatus;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::actor::{DebateActor, DebateArgs};
use crate::deps::Deps;
use crate::failures::{count_failure, fault_reason};
use crate::messages::{AdoptError, DebateMsg, Rest, SupervisorMsg};
use crate::settle::settle_directly;
use parley_engine::Input;

/// One debate this coordinator owns.
enum Entry {
    Active(ActorRef<DebateMsg>),
    Resting(Box<Rest>),
}

/// Owns the registry of debate actors.
pub struct Supervisor;

pub struct SupervisorState {
    deps: Arc<Deps>,
    /// Debate id → its actor, or what is kept of it at rest.
    debates: HashMap<String, Entry>,
    /// Actor id → debate id, to clean up on supervision events.
    by_actor: HashMap<ractor::ActorId, String>,
    /// A renewal pass is under way.
    keeping: bool,
    /// The renewal timer.
    keeper: Option<tokio::task::JoinHandle<()>>,
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = Arc<Deps>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        deps: Arc<Deps>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let keeper = Some(myself.send_interval(deps.poll_every, || SupervisorMsg::Keep));
        Ok(SupervisorState {
            deps,
            debates: HashMap::new(),
            by_actor: HashMap::new(),
            keeping: false,
            keeper,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: SupervisorMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        Box::pin(handle(myself, msg, state)).await
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(k) = state.keeper.take() {
            k.abort();
        }
        // Each debate actor releases its lease as it stops, so another replica (or this
        // one restarted) resumes the debate at once instead of after the lease TTL; a
        // debate at rest has no actor: its lease is released here.
        for (id, entry) in state.debates.drain() {
            match entry {
                Entry::Active(a) => {
                    let _ = a
                        .stop_and_wait(Some("shutdown".into()), Some(Duration::from_secs(5)))
                        .await;
                }
                Entry::Resting(_) => {
                    parley_telemetry::metrics().debate_resting(false, false);
                    parley_telemetry::metrics()
                        .debate_released(parley_telemetry::DebateStatus::Running);
                    let _ = state.deps.store.release_lease(&id, &state.deps.owner).await;
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failure) = match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(err)),
            _ => return Ok(()),
        };
        // An actor gone to rest left `by_actor` already: its debate stays.
        if let Some(id) = state.by_actor.remove(&cell.get_id()) {
            state.debates.remove(&id);
            let deps = state.deps.clone();
            // Off the supervisor's loop: the backend probes may take a few seconds.
            let reason = failure.map(|err| {
                tracing::warn!(debate = %id, error = %err, "debate actor failed; releasing the lease for a resume");
                fault_reason(err.as_ref())
            });
            tokio::spawn(async move {
                if let Some(reason) = reason {
                    count_failure(&deps, &id, reason).await;
                }
                // Owner-checked: a no-op when the actor released it already or lost it.
                let _ = deps.store.release_lease(&id, &deps.owner).await;
            });
        }
        Ok(())
    }
}

/// [`Supervisor`]'s `handle` (boxed: see `DebateActor::handle`).
async fn handle(
    myself: ActorRef<SupervisorMsg>,
    msg: SupervisorMsg,
    state: &mut SupervisorState,
) -> Result<(), ActorProcessingErr> {
    match msg {
        SupervisorMsg::Adopt {
            id,
            follow_up,
            reply,
        } => {
            let r = adopt(&myself, state, id, follow_up.map(|b| *b)).await;
            let _ = reply.send(r);
        }
        SupervisorMsg::Route { id, msg } => {
            if let Some(a) = active(&myself, state, &id).await {
                let _ = a.cast(msg);
            }
        }
        SupervisorMsg::Get { id, reply } => {
            let a = active(&myself, state, &id).await;
            let _ = reply.send(a);
        }
        SupervisorMsg::NotOwned { ids, reply } => {
            let ids = ids
                .into_iter()
                .filter(|id| !state.debates.contains_key(id))
                .collect();
            let _ = reply.send(ids);
        }
        SupervisorMsg::Owned(reply) => {
            let owned = state
                .debates
                .iter()
                .map(|(id, e)| {
                    let actor = match e {
                        Entry::Active(a) => Some(a.clone()),
                        Entry::Resting(_) => None,
                    };
                    (id.clone(), actor)
                })
                .collect();
            let _ = reply.send(owned);
        }
        SupervisorMsg::Keep => {
            if !state.keeping && !state.debates.is_empty() {
                state.keeping = true;
                let ids: Vec<String> = state.debates.keys().cloned().collect();
                let deps = state.deps.clone();
                let me = myself.clone();
                tokio::spawn(async move {
                    let began = Instant::now();
                    let checks = keep(&deps.store, &ids, &deps).await;
                    let _ = me.cast(SupervisorMsg::Kept { ids, checks, began });
                });
            }
        }
        SupervisorMsg::Kept { ids, checks, began } => {
            state.keeping = false;
            let now = Utc::now();
            for (id, check) in ids.into_iter().zip(checks) {
                kept(&myself, state, id, check, began, now).await;
            }
        }
        SupervisorMsg::Rest { id, actor, rest } => match state.debates.get(&id) {
            Some(Entry::Active(a)) if a.get_id() == actor => {
                let a = a.clone();
                state.by_actor.remove(&actor);
                tracing::debug!(debate = %id, "debate at rest");
                parley_telemetry::metrics().debate_resting(true, false);
                state.debates.insert(id, Entry::Resting(rest));
                // Behind every message routed to it so far, which it hands back.
                let _ = a.cast(DebateMsg::Rested);
            }
            // The actor is gone (failed, stopped): nothing to keep.
            _ => {}
        },
    }
    Ok(())
}

/// A renewal pass over `ids` (see the module docs). A pass that takes longer than the
/// lease TTL is moot: every debate is reported as not renewed (active actors renew their
/// own lease then), so the next pass is never held up by this one.
async fn keep(store: &RedisStore, ids: &[String], deps: &Deps) -> Vec<Result<LeaseCheck, String>> {
    let ttl = deps.lease_ttl.as_millis() as u64;
    match tokio::time::timeout(deps.lease_ttl, store.keep_leases(ids, &deps.owner, ttl)).await {
        Ok(checks) => checks
            .into_iter()
            .map(|c| c.map_err(|e| e.to_string()))
            .collect(),
        Err(_) => {
            tracing::warn!(debates = ids.len(), "a lease renewal pass timed out");
            vec![Err("the renewal pass timed out".to_string()); ids.len()]
        }
    }
}

/// Applies one debate's renewal outcome.
async fn kept(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    id: String,
    check: Result<LeaseCheck, String>,
    began: Instant,
    now: DateTime<Utc>,
) {
    match (state.debates.get(&id), check) {
        (None, _) => {}
        (Some(Entry::Active(a)), check) => {
            let _ = a.cast(DebateMsg::Tick(check.ok().map(|c| (c, began))));
        }
        (Some(Entry::Resting(_)), Ok(c)) if !c.held => {
            tracing::warn!(debate = %id, "lease lost while at rest; letting it go");
            state.debates.remove(&id);
            parley_telemetry::metrics().debate_resting(false, false);
            parley_telemetry::metrics().debate_released(parley_telemetry::DebateStatus::Running);
        }
        (Some(Entry::Resting(rest)), Ok(c)) => {
            let due =
                c.cancel || c.results != rest.results || rest.wake_at.is_some_and(|w| w <= now);
            if due {
                if let Some(a) = active(myself, state, &id).await {
                    let _ = a.cast(DebateMsg::Tick(Some((c, began))));
                }
            }
        }
        // Redis did not answer for it: the next pass tries again (the lease outlives a
        // few passes).
        (Some(Entry::Resting(_)), Err(_)) => {}
    }
}

/// The debate's actor, woken from rest if need be; `None` when it is not owned here (or
/// could not be woken: its lease is released, so a scan resumes it).
async fn active(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    id: &str,
) -> Option<ActorRef<DebateMsg>> {
    let rest = match state.debates.remove(id)? {
        Entry::Active(a) => {
            state
                .debates
                .insert(id.to_string(), Entry::Active(a.clone()));
            return Some(a);
        }
        Entry::Resting(rest) => rest,
    };
    tracing::debug!(debate = %id, "waking the debate");
    parley_telemetry::metrics().debate_resting(false, true);
    let args = DebateArgs {
        id: id.to_string(),
        follow_up: None,
        deps: state.deps.clone(),
        sup: myself.clone(),
        wake: Some(rest),
    };
    match spawn(myself, state, id, args).await {
        Ok(a) => Some(a),
        Err(e) => {
            tracing::warn!(debate = %id, error = %e, "cannot wake the debate; releasing it for a resume");
            None
        }
    }
}

/// Spawns a debate's actor (its lease held) and registers it; on failure the failure is
/// counted (when it may be the debate's) and the lease released.
async fn spawn(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    id: &str,
    args: DebateArgs,
) -> Result<ActorRef<DebateMsg>, AdoptError> {
    let deps = &state.deps;
    match Actor::spawn_linked(None, DebateActor, args, myself.get_cell()).await {
        Ok((actor, _join)) => {
            state.by_actor.insert(actor.get_id(), id.to_string());
            state
                .debates
                .insert(id.to_string(), Entry::Active(actor.clone()));
            Ok(actor)
        }
        Err(e) => {
            if let ractor::SpawnErr::StartupFailed(err) = &e {
                let reason = fault_reason(err.as_ref());
                count_failure(deps, id, reason).await;
            }
            let _ = deps.store.release_lease(id, &deps.owner).await;
            Err(AdoptError::Failed(e.to_string()))
        }
    }
}

async fn adopt(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    id: String,
    follow_up: Option<Input>,
) -> Result<(), AdoptError> {
    if state.debates.contains_key(&id) {
        return Ok(());
    }
    let deps = state.deps.clone();
    let ttl = deps.lease_ttl.as_millis() as u64;
    let got = deps
        .store
        .acquire_lease(&id, &deps.owner, ttl)
        .await
        .map_err(|e| AdoptError::Failed(e.to_string()))?;
    if !got {
        return Err(AdoptError::OwnedElsewhere);
    }
    if let Some(r) = settle_on_adoption(&deps, &id, &follow_up).await {
        let _ = deps.store.release_lease(&id, &deps.owner).await;
        return r.map(|_| ()).map_err(AdoptError::Failed);
    }
    let args = DebateArgs {
        id: id.clone(),
        follow_up,
        deps: deps.clone(),
        sup: myself.clone(),
        wake: None,
    };
    spawn(myself, state, &id, args).await?;
    tracing::info!(debate = %id, "debate adopted");
    Ok(())
}

/// What an adoption does instead of resuming the debate, if anything: apply a cancel (the
/// user's, or one marked in Redis) at once, or fail a debate whose actor failed
/// [`Deps::max_actor_failures`] times. `None`: resume it.
async fn settle_on_adoption(
    deps: &Deps,
    id: &str,
    follow_up: &Option<Input>,
) -> Option<Result<DebateStatus, String>> {
    let cancel = match follow_up {
        Some(Input::Cancel) => true,
        _ => match deps.store.cancel_requested(id).await {
            Ok(c) => c,
            Err(e) => return Some(Err(e.to_string())),
        },
    };
    if cancel {
        return Some(
            settle_directly(deps, id, Input::Cancel)
                .await
                .map_err(|e| e.to_string()),
        );
    }
    if matches!(follow_up, Some(Input::Retry)) {
        return None;
    }
    match deps.store.actor_failures(id).await {
        Ok((n, reason)) if n >= deps.max_actor_failures => {
            let reason = format!(
                "the coordinator could not advance this debate: its actor failed {n} times in a row \
                 while NATS and Redis were reachable; last error: {}",
                reason.unwrap_or_default()
            );
            tracing::error!(debate = %id, failures = n, "failing a debate that cannot be advanced");
            Some(
                settle_directly(deps, id, Input::Abort(reason))
                    .await
                    .map_err(|e| e.to_string()),
            )
        }
        Ok(_) => None,
        Err(e) => Some(Err(e.to_string())),
    }
}
