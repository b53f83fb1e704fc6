//! Failures: retries with backoff, retry budgets, dropped critiques, errors that fail at
//! once, duplicate and stale results.

use parley_protocol::*;
use serde_json::json;

use super::{fail, ok, spec, Run};
use crate::Input;

#[test]
fn retryable_failure_is_retried_with_backoff_then_succeeds() {
    let mut r = Run::new(spec(2, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let mut failed_once = false;
    r.drain(|t| {
        if t.kind == TaskKind::Critique && !failed_once {
            failed_once = true;
            return Some(fail(t, ErrorKind::Server));
        }
        Some(ok(t, "x"))
    });
    assert_eq!(r.retries.len(), 1);
    let (id, delay) = r.retries[0].clone();
    assert_eq!(delay, 500, "default initial backoff");
    assert_eq!(r.machine.state().status, DebateStatus::Running);
    r.apply(Input::RetryDue(id.clone()));
    let again = r.queue.back().unwrap().clone();
    assert_eq!(again.id, id);
    assert_eq!(again.attempt, 2);
    r.drain(|t| Some(ok(t, "x")));
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
}

#[test]
fn retry_after_from_the_provider_lengthens_the_backoff() {
    let mut r = Run::new(spec(2, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let t = r.queue.pop_front().unwrap();
    let mut res = fail(&t, ErrorKind::RateLimited);
    if let TaskOutcome::Error(e) = &mut res.outcome {
        e.retry_after_ms = Some(7000);
    }
    r.apply(Input::Result(res));
    assert_eq!(r.retries, vec![(t.id.clone(), 7000)]);
}

#[test]
fn budget_spent_fails_the_debate_at_that_node_and_retry_resumes_without_repeats() {
    let mut r = Run::new(spec(
        3,
        1,
        "fixed",
        json!({"retry": {"default": {"attempts": 2}}, "onAgentFailure": "fail"}),
    ));
    r.apply(Input::Start);
    let broken = "a2";
    r.drain_with_retries(|t| t.agent.id == broken && t.kind == TaskKind::Critique);
    let s = r.machine.state().clone();
    assert_eq!(s.status, DebateStatus::Failed);
    let err = s.error.as_ref().unwrap();
    assert_eq!(err.node, "critique");
    assert_eq!(err.agent_id.as_deref(), Some("a2"));
    assert!(err.message.contains("boom"), "{}", err.message);
    assert!(r.events.iter().any(|e| matches!(
        e.kind,
        EventKind::DebateFailed {
            node: Node::Critique,
            ..
        }
    )));
    let done_before: Vec<String> = r.tasks.iter().map(|t| t.id.clone()).collect();

    // Retry: only missing work is dispatched; nothing that completed runs again.
    let before = r.tasks.len();
    r.apply(Input::Retry);
    r.drain(|t| Some(ok(t, "x")));
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
    let rerun: Vec<&Task> = r.tasks[before..].iter().collect();
    for t in &rerun {
        let completed_before = s.rounds[0].contributions.iter().any(|c| {
            let id = task_id(
                &s.id,
                1,
                match c.kind {
                    ContributionType::Proposal => TaskKind::Propose,
                    ContributionType::Critique => TaskKind::Critique,
                    ContributionType::Refinement => TaskKind::Refine,
                },
                &c.agent_id,
                c.target_agent_id.as_deref(),
            );
            id == t.id
        });
        assert!(!completed_before, "{} ran again", t.id);
        assert!(t.attempt > 1 || !done_before.contains(&t.id));
    }
    assert!(rerun
        .iter()
        .any(|t| t.kind == TaskKind::Critique && t.agent.id == broken));
}

#[test]
fn a_critique_whose_budget_is_spent_is_dropped_and_the_debate_goes_on() {
    let mut r = Run::new(spec(
        3,
        2,
        "fixed",
        json!({"retry": {"default": {"attempts": 2}}}),
    ));
    r.apply(Input::Start);
    // a2's critique of a0 fails every attempt, in both rounds; everything else succeeds.
    let broken =
        |t: &Task| t.kind == TaskKind::Critique && t.agent.id == "a2" && t.id.ends_with("/a0");
    r.drain_with_retries(broken);
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed, "{:?}", s.error);
    assert!(s.final_solution.is_some());
    for (i, rd) in s.rounds.iter().enumerate() {
        assert_eq!(rd.dropped.len(), 1, "round {}", i + 1);
        let d = &rd.dropped[0];
        assert_eq!(
            (d.agent_id.as_str(), d.target_agent_id.as_str()),
            ("a2", "a0")
        );
        assert_eq!(d.attempts, 2);
        assert!(d.error.contains("boom"), "{}", d.error);
        // a0 refined with the one critique that arrived; every agent stayed in.
        assert_eq!(
            rd.contributions
                .iter()
                .filter(|c| c.kind == ContributionType::Refinement)
                .count(),
            3
        );
        assert!(rd
            .find(ContributionType::Critique, "a1", Some("a0"))
            .is_some());
    }
    // Two attempts per round, no more: a dropped critique is not dispatched again.
    assert_eq!(r.tasks.iter().filter(|t| broken(t)).count(), 4);
    let warned = s
        .engine
        .warnings
        .iter()
        .filter(|w| w.contains("dropped a2's critique of a0"))
        .count();
    assert_eq!(warned, 2, "{:?}", s.engine.warnings);
    // The saved state round-trips with the dropped list.
    let back: DebateState = serde_json::from_value(serde_json::to_value(s).unwrap()).unwrap();
    assert_eq!(back.rounds[0].dropped, s.rounds[0].dropped);
}

#[test]
fn retry_runs_again_a_critique_dropped_before_its_target_refined() {
    let mut r = Run::new(spec(
        3,
        1,
        "fixed",
        json!({"retry": {"default": {"attempts": 2}}}),
    ));
    r.apply(Input::Start);
    // a2's critiques are dropped; then a0's refinement fails the debate.
    let broken = |t: &Task| {
        (t.kind == TaskKind::Critique && t.agent.id == "a2")
            || (t.kind == TaskKind::Refine && t.agent.id == "a0")
    };
    r.drain_with_retries(broken);
    assert_eq!(r.machine.state().status, DebateStatus::Failed);
    assert!(!r.machine.state().rounds[0].dropped.is_empty());
    r.apply(Input::Retry);
    r.drain(|t| Some(ok(t, "x")));
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed, "{:?}", s.error);
    let rd = &s.rounds[0];
    // a0 had not refined: a2's critique of a0 ran again and a0 refined with it.
    assert!(rd
        .find(ContributionType::Critique, "a2", Some("a0"))
        .is_some());
    assert!(!rd.dropped.iter().any(|d| d.target_agent_id == "a0"));
}

#[test]
fn auth_errors_fail_at_once_without_retry() {
    let mut r = Run::new(spec(2, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let t = r.queue.pop_front().unwrap();
    r.apply(Input::Result(fail(&t, ErrorKind::Auth)));
    assert!(r.retries.is_empty());
    assert_eq!(r.machine.state().status, DebateStatus::Failed);
    assert_eq!(r.machine.state().error.as_ref().unwrap().node, "proposal");
}

#[test]
fn duplicate_and_stale_results_change_nothing() {
    let mut r = Run::new(spec(2, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let t = r.queue.front().unwrap().clone();
    r.apply(Input::Result(ok(&t, "first")));
    let state = r.machine.state().clone();
    let n = r.tasks.len();
    r.apply(Input::Result(ok(&t, "second")));
    assert_eq!(r.machine.state().rounds, state.rounds);
    assert_eq!(r.tasks.len(), n);
    // A result for a task this debate never issued is ignored with a warning.
    let mut bogus = ok(&t, "x");
    bogus.task_id = format!("{}/9/propose/zz", t.debate_id);
    r.apply(Input::Result(bogus));
    assert_eq!(r.machine.state().rounds, state.rounds);
}
