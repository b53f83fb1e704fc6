//! Forking a debate: a new debate that shares its parent's completed contributions up to
//! the end of a round and runs on from there with changes ([`ForkChanges`]: other models,
//! another judge, more rounds, a guide note).
//!
//! [`fork`] is pure: it reads the parent's spec and state and returns the fork's, which
//! the caller stores and starts like any new debate ([`Input::Start`](crate::Input)); the
//! parent is never modified. The fork's state copies rounds 1 to `at` whole (contributions,
//! summaries, the judge's checks, dropped critiques), the answered clarifications, the
//! adaptive path and the parent's guide notes, and names its parent (`forkedFrom`). Its
//! round limit is the parent's as it ran (rounds added by `extend` included) unless the
//! changes set `rounds`. Its
//! task ids carry its own debate id, and the machine plans from the state alone, so the
//! shared tasks are done: the fork makes only the calls after round `at`. A round the
//! parent's judge ended stays ended (its check is shared): fork at an earlier round to
//! debate on.

use chrono::{DateTime, Utc};
use parley_protocol::{
    limits, ContributionType, DebateSpec, DebateState, DebateStatus, ForkChanges, ForkOrigin,
    GuideNote, ParticipantChange, SteerCommand, SteeringEntry,
};

use crate::Machine;

/// Why a debate cannot be forked as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForkError {
    #[error("atRound: debate {id} has {rounds} round(s); round {at} does not exist")]
    NoSuchRound { id: String, rounds: u32, at: u32 },
    #[error(
        "atRound: round {at} of debate {id} is not complete (agent {agent} has no refinement)"
    )]
    Incomplete { id: String, at: u32, agent: String },
    #[error("changes.agents: {0:?} is not an agent of the debate")]
    UnknownAgent(String),
    #[error("changes.rounds: {rounds} is below the fork round {at}")]
    TooFewRounds { rounds: u32, at: u32 },
    #[error("changes: {0}")]
    Invalid(String),
}

/// The fork of debate (`spec`, `state`) at the end of round `at`, with `changes`, as a
/// new debate `id` created at `now` (status `pending`: start it with `Input::Start`).
/// Check the returned spec against the operator's policy before running it.
pub fn fork(
    spec: &DebateSpec,
    state: &DebateState,
    at: u32,
    changes: &ForkChanges,
    id: String,
    now: DateTime<Utc>,
) -> Result<(DebateSpec, DebateState), ForkError> {
    changes
        .validate()
        .map_err(|e| ForkError::Invalid(e.to_string()))?;
    let rounds = state.rounds.len() as u32;
    if at == 0 || at > rounds {
        return Err(ForkError::NoSuchRound {
            id: state.id.clone(),
            rounds,
            at,
        });
    }
    let shared = &state.rounds[..at as usize];
    if let Some(missing) = spec.active_agents().find(|a| {
        shared[at as usize - 1]
            .find(ContributionType::Refinement, &a.id, None)
            .is_none()
    }) {
        return Err(ForkError::Incomplete {
            id: state.id.clone(),
            at,
            agent: missing.id.clone(),
        });
    }
    let mut new = spec.clone();
    new.idempotency_key = None;
    for (agent, change) in &changes.agents {
        let Some(a) = new
            .agents
            .iter_mut()
            .find(|a| &a.id == agent && a.is_enabled())
        else {
            return Err(ForkError::UnknownAgent(agent.clone()));
        };
        apply(a, change);
    }
    if let Some(j) = &changes.judge {
        apply(&mut new.judge, j);
    }
    // The parent's round limit as it ran (with the rounds `extend` added), unless changed.
    let r = changes.rounds.unwrap_or_else(|| {
        (spec.debate.round_cap() + state.steering.extra_rounds).min(limits::MAX_ROUNDS)
    });
    if r < at {
        return Err(ForkError::TooFewRounds { rounds: r, at });
    }
    new.debate.rounds = r;
    if new.debate.termination_condition.max_rounds.is_some() {
        new.debate.termination_condition.max_rounds = Some(r);
    }
    let mut s = Machine::new(id, new.clone(), now).state().clone();
    s.rounds = shared.to_vec();
    s.current_round = at;
    s.clarifications = state.clarifications.clone();
    s.clarification_iterations = state.clarification_iterations;
    s.engine.clarifications_done = state.engine.clarifications_done;
    s.adaptive = state.adaptive.clone();
    s.steering.notes = state
        .steering
        .notes
        .iter()
        .filter(|n| n.round <= at)
        .take(limits::MAX_GUIDE_NOTES)
        .cloned()
        .collect();
    if let Some(note) = &changes.guide {
        if s.steering.notes.len() < limits::MAX_GUIDE_NOTES {
            s.steering.notes.push(GuideNote {
                round: at,
                note: note.clone(),
            });
            s.steering.log.push(SteeringEntry {
                command: SteerCommand::Guide { note: note.clone() },
                by: Some("fork".into()),
                at: now,
                round: at,
            });
        }
    }
    s.forked_from = Some(ForkOrigin {
        debate_id: state.id.clone(),
        round: at,
    });
    s.status = DebateStatus::Pending;
    Ok((new, s))
}

fn apply(a: &mut parley_protocol::AgentConfig, c: &ParticipantChange) {
    if let Some(m) = &c.model {
        a.model = m.clone();
    }
    if let Some(p) = &c.provider {
        a.provider = Some(p.clone());
    }
    if let Some(t) = c.temperature {
        a.temperature = t;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Effect, Input};
    use parley_protocol::{TaskKind, TaskOutcome, TaskOutput, TaskResult};
    use serde_json::json;

    fn spec(rounds: u32) -> DebateSpec {
        serde_json::from_value(json!({
            "problem": "Design a cache",
            "agents": [
                {"id": "a0", "name": "A0", "role": "architect", "model": "m", "temperature": 0.3},
                {"id": "a1", "name": "A1", "role": "security", "model": "m", "temperature": 0.3}
            ],
            "judge": {"id": "judge", "name": "J", "role": "generalist", "model": "jm", "temperature": 0.1},
            "debate": {"rounds": rounds, "terminationCondition": {"type": "fixed"}},
        }))
        .unwrap()
    }

    fn now() -> DateTime<Utc> {
        "2026-01-02T03:04:05Z".parse().unwrap()
    }

    /// Runs `m` from `input` to the end, answering every task; the tasks dispatched.
    fn run(m: &mut Machine, input: Input) -> Vec<parley_protocol::Task> {
        let mut queue: Vec<parley_protocol::Task> = Vec::new();
        let mut all = Vec::new();
        let mut next = Some(input);
        loop {
            if let Some(i) = next.take() {
                for fx in m.handle(i, now()) {
                    if let Effect::Dispatch(t) = fx {
                        all.push(t.clone());
                        queue.push(t);
                    }
                }
            }
            let Some(t) = queue.pop() else { break };
            let out = TaskOutput {
                content: format!("text of {}", t.id),
                ..Default::default()
            };
            next = Some(Input::Result(TaskResult {
                schema_version: parley_protocol::SCHEMA_VERSION,
                task_id: t.id.clone(),
                debate_id: t.debate_id.clone(),
                attempt: t.attempt,
                worker: "t".into(),
                outcome: TaskOutcome::Ok(out),
            }));
        }
        all
    }

    #[test]
    fn a_fork_at_round_2_runs_only_what_comes_after_and_leaves_the_parent_alone() {
        let mut parent = Machine::new("deb-20260102-030405-aaaaaa".into(), spec(3), now());
        let parent_tasks = run(&mut parent, Input::Start);
        assert_eq!(parent.state().status, DebateStatus::Completed);
        let before = parent.state().clone();
        let changes: ForkChanges = serde_json::from_value(json!({
            "judge": {"model": "jm2"}, "agents": {"a1": {"model": "m2"}}, "guide": "be brief"
        }))
        .unwrap();
        let (fspec, fstate) = fork(
            parent.spec(),
            parent.state(),
            2,
            &changes,
            "deb-20260102-030406-bbbbbb".into(),
            now(),
        )
        .unwrap();
        assert_eq!(parent.state(), &before);
        assert_eq!(fstate.forked_from.as_ref().unwrap().round, 2);
        assert_eq!(fspec.judge.model, "jm2");
        let mut child = Machine::from_checkpoint(fspec, fstate);
        let tasks = run(&mut child, Input::Start);
        assert_eq!(child.state().status, DebateStatus::Completed);
        assert_eq!(child.state().rounds.len(), 3);
        // Round 3 (2 critiques, 2 refinements) and the synthesis: nothing of rounds 1-2.
        assert!(
            tasks.iter().all(|t| t.round == 3),
            "{:?}",
            tasks.iter().map(|t| &t.id).collect::<Vec<_>>()
        );
        assert_eq!(tasks.len(), 5);
        let parent_after_2 = parent_tasks.iter().filter(|t| t.round == 3).count();
        assert_eq!(tasks.len(), parent_after_2);
        assert!(tasks.iter().all(|t| t.input.guidance.len() == 1));
        let synth = tasks
            .iter()
            .find(|t| t.kind == TaskKind::Synthesize)
            .unwrap();
        assert_eq!(synth.agent.model, "jm2");
        assert!(tasks
            .iter()
            .filter(|t| t.agent.id == "a1")
            .all(|t| t.agent.model == "m2"));
    }

    #[test]
    fn bad_forks_are_refused_with_the_reason() {
        let mut parent = Machine::new("deb-20260102-030405-aaaaaa".into(), spec(2), now());
        run(&mut parent, Input::Start);
        let id = || "deb-20260102-030406-bbbbbb".to_string();
        let none = ForkChanges::default();
        let e = fork(parent.spec(), parent.state(), 3, &none, id(), now()).unwrap_err();
        assert!(matches!(e, ForkError::NoSuchRound { .. }), "{e}");
        let c: ForkChanges =
            serde_json::from_value(json!({"agents": {"zz": {"model": "x"}}})).unwrap();
        let e = fork(parent.spec(), parent.state(), 1, &c, id(), now()).unwrap_err();
        assert_eq!(e, ForkError::UnknownAgent("zz".into()));
        let c: ForkChanges = serde_json::from_value(json!({"rounds": 1})).unwrap();
        assert!(fork(parent.spec(), parent.state(), 2, &c, id(), now()).is_err());
        let mut running = Machine::new("deb-20260102-030405-cccccc".into(), spec(2), now());
        running.handle(Input::Start, now());
        let e = fork(running.spec(), running.state(), 1, &none, id(), now()).unwrap_err();
        assert!(matches!(e, ForkError::Incomplete { .. }), "{e}");
    }
}
