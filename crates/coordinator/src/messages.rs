//! The messages of the debate actors ([`DebateMsg`]) and of their supervisor
//! ([`SupervisorMsg`]), and what they carry: kept apart from the actors that handle them, so
//! an actor and its supervisor can message each other without importing each other.

use std::time::Instant;

use chrono::{DateTime, Utc};
use parley_cluster::redis_store::LeaseCheck;
use parley_engine::{Input, Runtime};
use ractor::{ActorRef, RpcReplyPort};

#[derive(Debug)]
pub enum DebateMsg {
    /// Resume from the checkpoint and apply the results stored meanwhile (first message).
    Kick,
    /// A worker stored a result for this task.
    ResultReady { task_id: String, attempt: u32 },
    /// The supervisor's renewal pass: the lease's check and when the pass began (`None`:
    /// the pass could not renew it; the actor renews it itself). Poll Redis for in-flight
    /// results when they changed, feed the clock, maybe go to rest.
    Tick(Option<(LeaseCheck, std::time::Instant)>),
    /// The supervisor holds the debate at rest now: stop (every message routed here before
    /// was handed back).
    Rested,
    /// A failed task's backoff elapsed.
    RetryDue(String),
    /// The user resumes a failed debate.
    Retry(RpcReplyPort<Result<(), String>>),
    /// The user cancels the debate.
    Cancel(RpcReplyPort<Result<(), String>>),
    /// A worker handed this attempt back to the queue for `delay_ms` (rate limit).
    HandedBack {
        task_id: String,
        attempt: u32,
        delay_ms: u64,
    },
    /// This attempt's message exhausted its deliveries unanswered (dead letter).
    Lost { task_id: String, attempt: u32 },
    /// A worker found no dispatch secret of this debate in Redis for this attempt (it gave
    /// the message back to the queue): the actor puts its copy back.
    SecretMissing { task_id: String, attempt: u32 },
    /// The user's answers to clarification questions; the reply is the number of
    /// questions still open.
    Answer {
        answers: Vec<parley_protocol::Answer>,
        reply: RpcReplyPort<Result<usize, AnswerRefusal>>,
    },
    /// A user's steering command (pause, resume, guide, stop, extend).
    Steer {
        steer: parley_engine::Steer,
        reply: RpcReplyPort<Result<(), SteerRefusal>>,
    },
    /// A person's answer to a human participant's open task; the reply is the task it
    /// answered.
    Contribute {
        contribution: parley_engine::Contribute,
        reply: RpcReplyPort<Result<parley_protocol::HumanTask, ContributeRefusal>>,
    },
}

impl DebateMsg {
    /// Answers a user's request this actor will not apply (it is releasing its debate);
    /// other messages are dropped.
    pub fn refuse_releasing(self) {
        match self {
            Self::Retry(reply) | Self::Cancel(reply) => {
                let _ = reply.send(Err(RELEASING.into()));
            }
            Self::Answer { reply, .. } => {
                let _ = reply.send(Err(AnswerRefusal::Other(RELEASING.into())));
            }
            Self::Steer { reply, .. } => {
                let _ = reply.send(Err(SteerRefusal::Other(RELEASING.into())));
            }
            Self::Contribute { reply, .. } => {
                let _ = reply.send(Err(ContributeRefusal::Other(RELEASING.into())));
            }
            _ => {}
        }
    }
}

/// Why an actor did not apply a contribution.
#[derive(Debug)]
pub enum ContributeRefusal {
    /// The debate refuses it (no open task, not a human agent, bad text, ...).
    Refused(parley_engine::ContributeError),
    /// The actor could not apply it now (releasing the debate, a checkpoint failed).
    Other(String),
}

/// Why an actor did not apply a steering command.
#[derive(Debug)]
pub enum SteerRefusal {
    /// The debate refuses it (not running, already paused, over the round limit, ...).
    Refused(parley_engine::SteerError),
    /// The actor could not apply it now (releasing the debate, a checkpoint failed).
    Other(String),
}

/// Why an actor did not apply answers.
#[derive(Debug)]
pub enum AnswerRefusal {
    /// The debate refuses them (not waiting, unknown or answered questions).
    Refused(parley_engine::AnswerError),
    /// The actor could not apply them now (releasing the debate, a checkpoint failed).
    Other(String),
}

/// Reply to a user command that reached an actor which is releasing its debate.
pub const RELEASING: &str = "the debate is being released by its coordinator; try again";

/// The supervisor's messages.
pub enum SupervisorMsg {
    /// Take the lease of a debate and spawn its actor (no-op if already owned here).
    Adopt {
        id: String,
        /// Boxed: an `Input` can carry a whole task result.
        follow_up: Option<Box<Input>>,
        reply: RpcReplyPort<Result<(), AdoptError>>,
    },
    /// Deliver to the debate's actor if this coordinator owns it (waking it from rest).
    Route { id: String, msg: DebateMsg },
    /// The debate's actor, when this coordinator owns it (woken from rest).
    Get {
        id: String,
        reply: RpcReplyPort<Option<ActorRef<DebateMsg>>>,
    },
    /// Of these debates, the ones this coordinator does not own.
    NotOwned {
        ids: Vec<String>,
        reply: RpcReplyPort<Vec<String>>,
    },
    /// Every debate this coordinator owns, with its actor unless it is at rest (the drain
    /// stops them and releases the leases).
    Owned(RpcReplyPort<Vec<(String, Option<ActorRef<DebateMsg>>)>>),
    /// Time for a lease renewal pass.
    Keep,
    /// A renewal pass's outcome: each debate's check (or error) and when the pass began.
    Kept {
        ids: Vec<String>,
        checks: Vec<Result<LeaseCheck, String>>,
        began: Instant,
    },
    /// An actor asks to put its debate to rest.
    Rest {
        id: String,
        actor: ractor::ActorId,
        rest: Box<Rest>,
    },
}

/// What the supervisor keeps of a debate at rest.
#[derive(Debug)]
pub struct Rest {
    /// The checkpoint version the actor wrote or loaded last.
    pub version: u64,
    /// The machine's state beyond its checkpoint.
    pub runtime: Runtime,
    /// The number of stored results when it went to rest (a change wakes it).
    pub results: u64,
    /// When it must wake without news: its earliest deadline.
    pub wake_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum AdoptError {
    #[error("owned by another coordinator")]
    OwnedElsewhere,
    #[error("{0}")]
    Failed(String),
}
