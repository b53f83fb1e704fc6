//! Lifecycle: resume from a checkpoint, rest, cancel, the saved shape, progress, the user's
//! retry of a running debate, which results are expected.

use std::collections::BTreeSet;

use parley_protocol::*;
use serde_json::json;

use super::{fail, now, ok, spec, Run};
use crate::{Effect, Input, Machine};

#[test]
fn resume_from_checkpoint_redispatches_only_missing_tasks() {
    let mut r = Run::new(spec(3, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let ps: Vec<Task> = r.queue.drain(..).collect();
    r.apply(Input::Result(ok(&ps[0], "p0")));
    // Crash: rebuild from the checkpointed state.
    let state = r.machine.state().clone();
    let json = serde_json::to_string(&state).unwrap();
    let restored: DebateState = serde_json::from_str(&json).unwrap();
    let mut m = Machine::from_checkpoint(r.machine.spec().clone(), restored);
    let fx = m.handle(Input::Resume, now());
    let mut ids: Vec<String> = fx
        .iter()
        .filter_map(|f| match f {
            Effect::Dispatch(t) => Some(t.id.clone()),
            _ => None,
        })
        .collect();
    ids.sort();
    let mut expected = vec![ps[1].id.clone(), ps[2].id.clone()];
    expected.extend(
        ["a1", "a2"]
            .iter()
            .map(|a| task_id(&state.id, 1, TaskKind::Critique, a, Some("a0"))),
    );
    expected.sort();
    assert_eq!(ids, expected);
}

/// A debate put to rest after every transition (the machine dropped, rebuilt from its
/// checkpoint's JSON with the runtime it kept) runs exactly as one never put to rest:
/// the same tasks, events and final state, and nothing dispatched or emitted on waking.
#[test]
fn a_debate_rested_after_every_step_runs_as_one_never_rested() {
    for (agents, rounds, termination) in [(3, 2, "fixed"), (2, 3, "convergence"), (1, 1, "fixed")] {
        let spec = spec(agents, rounds, termination, json!({}));
        let margin = Some(std::time::Duration::from_secs(60));
        let mut plain = Run::new(spec.clone());
        plain.machine.set_task_deadline_margin(margin);
        plain.apply(Input::Start);
        plain.drain(|t| Some(ok(t, &format!("text of {}", t.id))));

        let mut rested = Run::new(spec);
        rested.machine.set_task_deadline_margin(margin);
        rested.apply(Input::Start);
        let mut rests = 0;
        while let Some(t) = rested.queue.pop_front() {
            if let Some(runtime) = rested.machine.runtime() {
                let deadline = rested.machine.next_deadline();
                assert_eq!(runtime.next_deadline(), deadline);
                let json = serde_json::to_string(rested.machine.state()).unwrap();
                let mut m = Machine::from_checkpoint(
                    rested.machine.spec().clone(),
                    serde_json::from_str(&json).unwrap(),
                );
                m.set_task_deadline_margin(margin);
                m.restore_runtime(runtime);
                assert_eq!(m.next_deadline(), deadline);
                rested.machine = m;
                rests += 1;
            }
            rested.apply(Input::Result(ok(&t, &format!("text of {}", t.id))));
        }
        assert_eq!(rests, rested.tasks.len(), "a rest before every result");
        assert_eq!(rested.tasks, plain.tasks);
        assert_eq!(rested.events, plain.events);
        assert_eq!(rested.machine.state(), plain.machine.state());
        assert_eq!(plain.machine.state().status, DebateStatus::Completed);
    }
}

/// A debate with a failed task backing off cannot rest (its retry is a timer).
#[test]
fn a_debate_backing_off_or_settled_cannot_rest() {
    let mut r = Run::new(spec(2, 1, "fixed", json!({})));
    assert!(r.machine.runtime().is_none(), "pending");
    r.apply(Input::Start);
    assert!(r.machine.runtime().is_some());
    let t = r.queue.pop_front().unwrap();
    r.apply(Input::Result(fail(&t, ErrorKind::Server)));
    assert_eq!(r.retries.len(), 1);
    assert!(r.machine.runtime().is_none(), "backing off");
    let (id, _) = r.retries.pop().unwrap();
    r.apply(Input::RetryDue(id));
    assert!(r.machine.runtime().is_some());
    r.apply(Input::Cancel);
    assert!(r.machine.runtime().is_none(), "cancelled");
}

#[test]
fn resume_sends_outstanding_attempts_again_as_themselves() {
    let mut r = Run::new(spec(3, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let ps: Vec<Task> = r.queue.drain(..).collect();
    // p1 failed once and is backing off; p0 and p2 are still running.
    r.apply(Input::Result(fail(&ps[1], ErrorKind::Server)));
    let state: DebateState =
        serde_json::from_str(&serde_json::to_string(r.machine.state()).unwrap()).unwrap();
    let mut m = Machine::from_checkpoint(r.machine.spec().clone(), state);
    let fx = m.handle(Input::Resume, now());
    let attempts: std::collections::BTreeMap<String, u32> = fx
        .iter()
        .filter_map(|f| match f {
            Effect::Dispatch(t) => Some((t.id.clone(), t.attempt)),
            _ => None,
        })
        .collect();
    // The takeover spends no budget: the outstanding attempts keep their number (and so
    // their message id); only the failed task gets a new attempt.
    assert_eq!(attempts[&ps[0].id], 1);
    assert_eq!(attempts[&ps[2].id], 1);
    assert_eq!(attempts[&ps[1].id], 2);
}

#[test]
fn cancel_stops_dispatching() {
    let mut r = Run::new(spec(2, 1, "fixed", json!({})));
    r.apply(Input::Start);
    r.apply(Input::Cancel);
    let n = r.tasks.len();
    r.drain(|t| Some(ok(t, "x")));
    assert_eq!(r.machine.state().status, DebateStatus::Cancelled);
    assert_eq!(r.tasks.len(), n);
}

#[test]
fn single_agent_debate_needs_no_critiques() {
    let r = Run::run_ok(spec(1, 2, "fixed", json!({})));
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
    assert_eq!(r.count(TaskKind::Critique), 0);
    assert_eq!(r.tasks.len(), 4); // propose, refine, refine, synthesize
}

#[test]
fn saved_state_has_dialectic_shape() {
    let r = Run::run_ok(spec(2, 1, "fixed", json!({})));
    let v = serde_json::to_value(r.machine.state()).unwrap();
    for key in [
        "id",
        "status",
        "currentRound",
        "rounds",
        "finalSolution",
        "promptSources",
        "createdAt",
        "updatedAt",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let c = &v["rounds"][0]["contributions"][0];
    for key in ["agentId", "agentRole", "type", "content", "metadata"] {
        assert!(c.get(key).is_some(), "missing {key}");
    }
    for key in ["tokensUsed", "latencyMs", "model"] {
        assert!(c["metadata"].get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["rounds"][0]["roundNumber"], 1);
    assert!(v["rounds"][0]["timestamp"].is_string());
    for key in [
        "description",
        "tradeoffs",
        "recommendations",
        "confidence",
        "synthesizedBy",
    ] {
        assert!(v["finalSolution"].get(key).is_some(), "missing {key}");
    }
    let crit = v["rounds"][0]["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "critique")
        .unwrap();
    assert!(crit["targetAgentId"].is_string());
}

#[test]
fn spec_validation_names_each_problem() {
    let mut sp = spec(2, 0, "fixed", json!({}));
    sp.problem = "  ".into();
    sp.agents[1].id = "a0".into();
    sp.agents[0].temperature = 3.0;
    let err = sp.validate().unwrap_err().to_string();
    for needle in [
        "problem: must not be empty",
        "debate.rounds",
        "duplicate agent id",
        "agents[0].temperature",
    ] {
        assert!(err.contains(needle), "{needle} not in {err}");
    }
    let mut sp = spec(13, 1, "fixed", json!({}));
    sp.schema_version = 99;
    let err = sp.validate().unwrap_err().to_string();
    assert!(err.contains("13 enabled agents, the limit is 12"), "{err}");
    assert!(err.contains("unsupported schema version 99"), "{err}");
    assert!(spec(3, 2, "fixed", json!({})).validate().is_ok());
}

#[test]
fn debate_ids_have_the_documented_shape() {
    let id = new_debate_id(now());
    assert!(id.starts_with("deb-20260102-030405-"), "{id}");
    assert!(is_valid_debate_id(&id), "{id}");
    assert!(!is_valid_debate_id("deb-../../etc"));
}

#[test]
fn progress_names_a_real_phase_between_tasks() {
    let r = Run::run_ok(spec(3, 2, "fixed", json!({})));
    let first_dispatch = r
        .events
        .iter()
        .position(|e| matches!(e.kind, EventKind::TaskDispatched { .. }))
        .unwrap();
    // Between a result and the dispatches it enables nothing is in flight; progress keeps
    // the phase of the last task instead of the internal "roundManager".
    let odd: Vec<String> = r.events[first_dispatch..]
        .iter()
        .filter(|e| e.progress.phase == "roundManager")
        .map(|e| format!("{:?}", e.kind))
        .collect();
    assert!(odd.is_empty(), "{odd:?}");
    let phases: BTreeSet<&str> = r.events.iter().map(|e| e.progress.phase.as_str()).collect();
    assert!(
        phases.contains("critique") && phases.contains("synthesis"),
        "{phases:?}"
    );
}

#[test]
fn retrying_a_running_debate_again_and_again_sends_its_tasks_once_a_minute() {
    let mut r = Run::new(spec(3, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let first: Vec<Task> = r.queue.drain(..).collect();
    assert_eq!(first.len(), 3);
    // The first retry re-sends the three proposals as attempt 2...
    r.apply(Input::Retry);
    let again: Vec<Task> = r.queue.drain(..).collect();
    assert_eq!(again.len(), 3);
    assert!(again.iter().all(|t| t.attempt == 2));
    // ...and a hundred more within the minute send nothing.
    for _ in 0..100 {
        r.apply(Input::Retry);
    }
    assert!(r.queue.is_empty(), "{:?}", r.queue);
    // A minute later a retry works again.
    let later = now() + chrono::Duration::seconds(crate::machine::RUNNING_RETRY_INTERVAL_SECS);
    for fx in r.machine.handle(Input::Retry, later) {
        if let Effect::Dispatch(t) = fx {
            assert_eq!(t.attempt, 3);
            r.queue.push_back(t);
        }
    }
    assert_eq!(r.queue.len(), 3);
}

#[test]
fn retry_gives_attempts_still_out_a_fresh_budget() {
    let mut r = Run::new(spec(
        2,
        1,
        "fixed",
        json!({"retry": {"default": {"attempts": 1}}}),
    ));
    r.apply(Input::Start);
    let ps: Vec<Task> = r.queue.drain(..).collect();
    r.apply(Input::Result(fail(&ps[0], ErrorKind::Server)));
    assert_eq!(r.machine.state().status, DebateStatus::Failed);
    // The user fixes the cause and retries while p1's attempt is still out...
    r.apply(Input::Retry);
    assert_eq!(r.machine.state().status, DebateStatus::Running);
    // ...then p1 comes back with an error from before the fix: retried, not fatal.
    r.apply(Input::Result(fail(&ps[1], ErrorKind::Server)));
    assert_eq!(r.machine.state().status, DebateStatus::Running);
    assert!(
        r.retries.iter().any(|(id, _)| *id == ps[1].id),
        "{:?}",
        r.retries
    );
}

#[test]
fn only_dispatched_unfinished_tasks_and_their_attempts_are_expected() {
    use crate::Expectation::*;
    let mut r = Run::new(spec(2, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let proposal = r.queue.front().unwrap().clone();
    let id = &proposal.id;
    let debate = r.machine.id().to_string();
    // In flight, attempt 1: a success or a failure of attempt 1 is wanted.
    assert_eq!(r.machine.expects(id, 1, true), Wanted);
    assert_eq!(r.machine.expects(id, 1, false), Wanted);
    // An attempt never dispatched.
    assert_eq!(r.machine.expects(id, 2, true), WrongAttempt);
    assert_eq!(r.machine.expects(id, 7, false), WrongAttempt);
    assert_eq!(r.machine.expects(id, 0, true), WrongAttempt);
    // Tasks never issued, or not dispatched yet (the synthesis), or of another debate.
    assert_eq!(
        r.machine
            .expects(&format!("{debate}/1/propose/ghost"), 1, true),
        NotDispatched
    );
    assert_eq!(
        r.machine
            .expects(&format!("{debate}/1/synthesize/judge"), 1, true),
        NotDispatched
    );
    assert_eq!(
        r.machine
            .expects("deb-20990101-000000-zzzzzz/1/propose/a0", 1, true),
        NotDispatched
    );
    // Failed once and retried: attempt 1's late success still counts, its failure not.
    r.apply(Input::Result(fail(&proposal, ErrorKind::Server)));
    r.apply(Input::RetryDue(id.clone()));
    assert_eq!(r.machine.expects(id, 2, false), Wanted);
    assert_eq!(r.machine.expects(id, 1, false), WrongAttempt);
    assert_eq!(r.machine.expects(id, 1, true), Wanted);
    // Answered: finished.
    r.apply(Input::Result(ok(&proposal, "done")));
    assert_eq!(r.machine.expects(id, 2, true), Finished);
}
