//! Steering: a user's pause, resume, guide note, stop and extend, applied to a running
//! debate and recorded in `state.steering` with who sent it and when.
//!
//! - `pause`: [`Machine::advance`] dispatches nothing while paused (results of the calls
//!   in flight are recorded, rounds open and refinements carry over: no call). A paused
//!   debate with nothing in flight holds no worker slot; its checkpoint says `paused`.
//! - `resume`: the plan dispatches what is missing, as after a restart: nothing completed
//!   runs again, an attempt that was out goes out as itself.
//! - `guide`: every task built from now on carries the notes (`TaskInput::guidance`);
//!   at most `limits::MAX_GUIDE_NOTES` per debate.
//! - `stop`: like the budget's `synthesizeNow`: only the synthesis is planned, from what
//!   exists, once nothing is in flight; a paused debate is resumed for it.
//! - `extend`: the round limit is one higher (at most `limits::MAX_ROUNDS`); refused once
//!   the closing tasks (votes, the judge's summary, the synthesis) have been dispatched or
//!   after a stop. An early-stopping termination (verdict, convergence) may still end the
//!   debate before the extra round.

use chrono::{DateTime, Utc};
use parley_protocol::{
    clip_text, limits, DebateStatus, EventKind, GuideNote, SteerCommand, SteeringEntry, TaskKind,
    MAX_EVENT_TEXT_BYTES,
};

use super::graph::{self, Phase};
use super::{After, Effect, Machine};

/// A steering command and who sent it (`None`: unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steer {
    pub command: SteerCommand,
    pub by: Option<String>,
}

/// Why a steering command does not apply (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SteerError {
    #[error("{0}")]
    Invalid(String),
    #[error("debate is {0}; only a running debate is steered")]
    NotRunning(&'static str),
    #[error("debate waits for answers to its clarification questions; only guide applies now")]
    AwaitingAnswers,
    #[error("debate is already paused")]
    AlreadyPaused,
    #[error("debate is not paused")]
    NotPaused,
    #[error("debate was stopped: it is synthesizing from what exists")]
    Stopped,
    #[error("debate is already closing (its {0} has been dispatched)")]
    Closing(&'static str),
    #[error("debate would run {wanted} rounds; the limit is {limit}")]
    RoundLimit { wanted: u32, limit: u32 },
    #[error("debate has {0} guide notes already, the limit")]
    TooManyNotes(usize),
    #[error("debate has recorded {0} steering commands, the limit")]
    TooManyCommands(usize),
}

impl SteerError {
    /// A conflict with the debate's state (HTTP 409), rather than a bad request.
    pub fn is_conflict(&self) -> bool {
        !matches!(self, Self::Invalid(_))
    }
}

impl Machine {
    /// Whether `steer` applies to this debate now; an error says why not (and the command
    /// changes nothing). [`Input::Steer`](super::Input::Steer) checks it again.
    pub fn check_steer(&self, steer: &Steer) -> Result<(), SteerError> {
        let invalid = |e: parley_protocol::SteerRequestError| SteerError::Invalid(e.to_string());
        steer.command.validate().map_err(invalid)?;
        if let Some(by) = &steer.by {
            parley_protocol::check_by(by).map_err(invalid)?;
        }
        let s = &self.state.steering;
        match self.state.status {
            DebateStatus::Running | DebateStatus::Pending => {}
            DebateStatus::AwaitingClarifications => {
                if !matches!(steer.command, SteerCommand::Guide { .. }) {
                    return Err(SteerError::AwaitingAnswers);
                }
            }
            other => return Err(SteerError::NotRunning(other.as_str())),
        }
        if s.log.len() >= limits::MAX_STEERING_ENTRIES {
            return Err(SteerError::TooManyCommands(s.log.len()));
        }
        match &steer.command {
            SteerCommand::Pause if s.paused => Err(SteerError::AlreadyPaused),
            SteerCommand::Pause if s.stopped => Err(SteerError::Stopped),
            SteerCommand::Resume if !s.paused => Err(SteerError::NotPaused),
            SteerCommand::Guide { .. } if s.notes.len() >= limits::MAX_GUIDE_NOTES => {
                Err(SteerError::TooManyNotes(s.notes.len()))
            }
            SteerCommand::Stop | SteerCommand::Extend if s.stopped => Err(SteerError::Stopped),
            SteerCommand::Stop => match self.dispatched_closing() {
                Some(TaskKind::Synthesize) => Err(SteerError::Closing("synthesis")),
                _ => Ok(()),
            },
            SteerCommand::Extend => {
                if let Some(kind) = self.dispatched_closing() {
                    return Err(SteerError::Closing(closing_name(kind)));
                }
                let wanted = self.round_cap() + 1;
                if wanted > limits::MAX_ROUNDS {
                    return Err(SteerError::RoundLimit {
                        wanted,
                        limit: limits::MAX_ROUNDS,
                    });
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// [`Input::Steer`](super::Input::Steer): applies and records a command that passes
    /// [`Machine::check_steer`]; one that does not changes nothing.
    pub(super) fn on_steer(
        &mut self,
        steer: Steer,
        now: DateTime<Utc>,
        fx: &mut Vec<Effect>,
    ) -> After {
        if self.check_steer(&steer).is_err() {
            return After::Stop;
        }
        let round = self.state.current_round;
        let s = &mut self.state.steering;
        let mut note = None;
        match &steer.command {
            SteerCommand::Pause => s.paused = true,
            SteerCommand::Resume => {
                s.paused = false;
                // A person is not timed while the debate is paused: their open tasks'
                // deadlines move on by the time it was.
                let since = s
                    .log
                    .iter()
                    .rev()
                    .find(|e| matches!(e.command, SteerCommand::Pause))
                    .map(|e| e.at);
                if let Some(paused) = since.map(|at| now.signed_duration_since(at)) {
                    if paused > chrono::Duration::zero() {
                        for t in &mut self.state.human.open {
                            t.deadline =
                                t.deadline.checked_add_signed(paused).unwrap_or(t.deadline);
                        }
                    }
                }
            }
            SteerCommand::Guide { note: text } => {
                s.notes.push(GuideNote {
                    round,
                    note: text.clone(),
                });
                note = Some(clip_text(text, MAX_EVENT_TEXT_BYTES));
            }
            SteerCommand::Stop => {
                s.stopped = true;
                s.paused = false;
            }
            SteerCommand::Extend => s.extra_rounds += 1,
        }
        s.log.push(SteeringEntry {
            command: steer.command.clone(),
            by: steer.by.clone(),
            at: now,
            round,
        });
        let command = steer.command.as_str().to_string();
        let by = steer.by;
        self.emit(
            fx,
            now,
            EventKind::Steered {
                command,
                by,
                round,
                note,
            },
        );
        After::Advance
    }

    /// The most rounds the debate runs: the configured limit plus the rounds `extend`
    /// added.
    pub(super) fn round_cap(&self) -> u32 {
        self.spec.debate.round_cap() + self.state.steering.extra_rounds
    }

    /// Nothing new is dispatched (`pause`).
    pub(super) fn paused(&self) -> bool {
        self.state.steering.paused
    }

    /// Only the synthesis is planned, from what exists: the budget's `synthesizeNow` or
    /// the user's `stop`.
    pub(super) fn synthesizing_now(&self) -> bool {
        self.state.steering.stopped || self.state.budget.as_ref().is_some_and(|b| b.synthesize_now)
    }

    /// The first closing task kind (vote, judge summary, synthesis) dispatched so far,
    /// from the checkpointed attempts (so a machine rebuilt from a checkpoint knows too);
    /// the synthesis first.
    fn dispatched_closing(&self) -> Option<TaskKind> {
        let mut found = None;
        for id in self.state.engine.attempts.keys() {
            let Some(p) = self.parse_task_id(id) else {
                continue;
            };
            if graph::def(p.kind).phase != Phase::Closing {
                continue;
            }
            if p.kind == TaskKind::Synthesize {
                return Some(p.kind);
            }
            found = Some(p.kind);
        }
        found
    }
}

fn closing_name(kind: TaskKind) -> &'static str {
    match kind {
        TaskKind::Vote => "vote",
        TaskKind::JudgeSummarize => "judge's summary",
        _ => "synthesis",
    }
}
