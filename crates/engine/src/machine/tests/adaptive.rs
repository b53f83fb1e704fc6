//! Unit tests of the adaptive modes: sparse critique topologies, the per-round verdict, the
//! adaptive short path, voting and the independence warnings.

use std::collections::BTreeSet;

use parley_protocol::*;
use serde_json::json;

use super::{ok, spec, Run};
use crate::{Expectation, Input};

/// (critic, target) of every critique task dispatched in round `r`.
fn critique_pairs(r: &Run, round: u32) -> BTreeSet<(String, String)> {
    r.tasks
        .iter()
        .filter(|t| t.kind == TaskKind::Critique && t.round == round)
        .map(|t| (t.agent.id.clone(), t.target_agent_id.clone().unwrap()))
        .collect()
}

fn targets(pairs: &BTreeSet<(String, String)>) -> BTreeSet<String> {
    pairs.iter().map(|(_, t)| t.clone()).collect()
}

#[test]
fn ring_of_four_plans_four_critiques_a_round_not_twelve() {
    let r = Run::run_ok(spec(
        4,
        2,
        "fixed",
        json!({"critique": {"topology": "ring"}}),
    ));
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed);
    assert_eq!(r.count(TaskKind::Critique), 8);
    let want: BTreeSet<(String, String)> = [("a0", "a1"), ("a1", "a2"), ("a2", "a3"), ("a3", "a0")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(critique_pairs(&r, 1), want);
    assert_eq!(critique_pairs(&r, 2), want);
    // Each refinement saw exactly the one critique planned for it.
    let refine = r
        .tasks
        .iter()
        .find(|t| t.kind == TaskKind::Refine && t.agent.id == "a2")
        .unwrap();
    assert_eq!(refine.input.critiques.len(), 1);
    assert_eq!(refine.input.critiques[0].agent_id, "a1");
}

#[test]
fn ring_with_k_two_critiques_the_next_two() {
    let r = Run::run_ok(spec(
        5,
        1,
        "fixed",
        json!({"critique": {"topology": "ring", "k": 2}}),
    ));
    assert_eq!(r.count(TaskKind::Critique), 10);
    let pairs = critique_pairs(&r, 1);
    assert!(pairs.contains(&("a4".into(), "a0".into())));
    assert!(pairs.contains(&("a4".into(), "a1".into())));
}

#[test]
fn random_draws_are_seeded_by_debate_and_round_and_cover_every_agent() {
    let cfg = json!({"critique": {"topology": "random", "k": 1}});
    let a = Run::run_ok(spec(6, 3, "fixed", cfg.clone()));
    let b = Run::run_ok(spec(6, 3, "fixed", cfg));
    let all: BTreeSet<String> = (0..6).map(|i| format!("a{i}")).collect();
    for round in 1..=3 {
        let pa = critique_pairs(&a, round);
        // Same debate id and round: the same draw.
        assert_eq!(pa, critique_pairs(&b, round));
        // k = 1 each, plus at most one extra per agent nobody drew.
        assert!((6..=11).contains(&pa.len()), "{pa:?}");
        assert_eq!(targets(&pa), all, "round {round}: {pa:?}");
        assert!(pa.iter().all(|(c, t)| c != t));
        for critic in &all {
            assert!(pa.iter().any(|(c, _)| c == critic));
        }
    }
    // Another debate id draws differently somewhere (seeded by the id).
    let mut other = Run::new(spec(
        6,
        3,
        "fixed",
        json!({"critique": {"topology": "random", "k": 1}}),
    ));
    other.machine = crate::Machine::new(
        "deb-20260102-030405-zzzzzz".into(),
        other.machine.spec().clone(),
        super::now(),
    );
    other.apply(Input::Start);
    other.drain(|t| Some(ok(t, "x")));
    assert!((1..=3).any(|r| critique_pairs(&other, r) != critique_pairs(&a, r)));
}

#[test]
fn a_result_for_an_unplanned_critique_pair_is_not_expected() {
    let mut r = Run::new(spec(
        4,
        1,
        "fixed",
        json!({"critique": {"topology": "ring"}}),
    ));
    r.apply(Input::Start);
    // Proposals in: the ring's critiques go out.
    let proposals: Vec<Task> = r.queue.drain(..).collect();
    for t in &proposals {
        r.apply(Input::Result(ok(t, "p")));
    }
    let id = r.machine.id().to_string();
    let planned = task_id(&id, 1, TaskKind::Critique, "a0", Some("a1"));
    let unplanned = task_id(&id, 1, TaskKind::Critique, "a0", Some("a2"));
    assert_eq!(r.machine.expects(&planned, 1, true), Expectation::Wanted);
    assert_eq!(
        r.machine.expects(&unplanned, 1, true),
        Expectation::NotDispatched
    );
    // Applying it anyway changes nothing but a warning.
    let mut forged = ok(
        &r.tasks.iter().find(|t| t.id == planned).unwrap().clone(),
        "c",
    );
    forged.task_id = unplanned;
    let before = r.machine.state().rounds[0].contributions.len();
    r.apply(Input::Result(forged));
    assert_eq!(r.machine.state().rounds[0].contributions.len(), before);
}

#[test]
fn sparse_topology_keys_are_checked() {
    let bad_k = spec(
        4,
        1,
        "fixed",
        json!({"critique": {"topology": "ring", "k": 4}}),
    );
    let e = bad_k.validate().unwrap_err().to_string();
    assert!(
        e.contains("debate.critique.k") && e.contains("1..=3"),
        "{e}"
    );
    let all_k = spec(
        4,
        1,
        "fixed",
        json!({"critique": {"topology": "all", "k": 2}}),
    );
    let e = all_k.validate().unwrap_err().to_string();
    assert!(e.contains("debate.critique.k"), "{e}");
    let unknown: Result<DebateSpec, _> = serde_json::from_value(json!({
        "problem": "p",
        "agents": [{"id": "a", "name": "A", "role": "kiss", "model": "m"}],
        "judge": {"id": "j", "name": "J", "role": "generalist", "model": "m"},
        "debate": {"critique": {"topology": "star"}}
    }));
    let e = unknown.unwrap_err().to_string();
    assert!(
        e.contains("star") && e.contains("ring") && e.contains("random"),
        "{e}"
    );
}

fn verdict(done: bool, confidence: f64, issues: &[&str]) -> Verdict {
    Verdict {
        verdict: if done {
            VerdictDecision::Done
        } else {
            VerdictDecision::Continue
        },
        confidence,
        reasoning: "r".into(),
        open_issues: issues.iter().map(|s| s.to_string()).collect(),
        valid: true,
    }
}

/// `ok` with the verdict `v(task)` on verdict tasks and the ballot `b(task)` on votes.
fn answer(
    t: &Task,
    v: &dyn Fn(&Task) -> Option<Verdict>,
    b: &dyn Fn(&Task) -> Option<Ballot>,
) -> TaskResult {
    let mut r = ok(t, &format!("text of {}", t.id));
    if let TaskOutcome::Ok(out) = &mut r.outcome {
        match t.kind {
            TaskKind::Verdict => out.verdict = v(t),
            TaskKind::Vote => out.vote = b(t),
            _ => {}
        }
    }
    r
}

fn run_with(
    spec: DebateSpec,
    v: &dyn Fn(&Task) -> Option<Verdict>,
    b: &dyn Fn(&Task) -> Option<Ballot>,
) -> Run {
    let mut r = Run::new(spec);
    r.apply(Input::Start);
    r.drain(|t| Some(answer(t, v, b)));
    r
}

fn no_vote(_: &Task) -> Option<Ballot> {
    None
}

fn warnings(r: &Run) -> Vec<String> {
    r.machine.state().engine.warnings.clone()
}

#[test]
fn verdict_stops_at_done_with_confidence_at_the_threshold() {
    let s = spec(
        3,
        5,
        "verdict",
        json!({"terminationCondition": {"type": "verdict", "threshold": 85}}),
    );
    // Round 1: done but under the threshold; round 2: done at 90.
    let r = run_with(
        s,
        &|t| Some(verdict(true, if t.round == 1 { 80.0 } else { 90.0 }, &[])),
        &no_vote,
    );
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    assert_eq!(st.rounds.len(), 2);
    assert_eq!(r.count(TaskKind::Verdict), 2);
    assert!(st.rounds.iter().all(|rd| rd.verdict.is_some()));
    assert_eq!(r.count(TaskKind::Evaluate), 0);
    let given = r
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::VerdictGiven { .. }))
        .count();
    assert_eq!(given, 2);
}

#[test]
fn max_rounds_caps_a_judge_that_never_agrees_and_replaces_debate_rounds() {
    let s = spec(
        2,
        9,
        "verdict",
        json!({"terminationCondition": {"type": "verdict", "maxRounds": 3}}),
    );
    let r = run_with(s, &|_| Some(verdict(false, 99.0, &[])), &no_vote);
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    assert_eq!(st.rounds.len(), 3);
    // No verdict after the last round: nothing is left to decide.
    assert_eq!(r.count(TaskKind::Verdict), 2);
    assert_eq!(r.events[0].progress.rounds, 3);
}

#[test]
fn an_unreadable_verdict_counts_as_continue_with_a_warning_and_never_loops() {
    let s = spec(
        2,
        3,
        "verdict",
        json!({"terminationCondition": {"type": "verdict", "threshold": 10}}),
    );
    let r = run_with(s, &|_| None, &no_vote);
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    assert_eq!(st.rounds.len(), 3);
    let v = &st.rounds[0].verdict.as_ref().unwrap().verdict;
    assert!(!v.valid);
    assert_eq!(v.verdict, VerdictDecision::Continue);
    assert!(
        warnings(&r)
            .iter()
            .filter(|w| w.contains("not the JSON asked for"))
            .count()
            == 2,
        "{:?}",
        warnings(&r)
    );
}

#[test]
fn the_last_verdicts_open_issues_reach_the_synthesis_and_the_solution() {
    let s = spec(
        2,
        4,
        "verdict",
        json!({"terminationCondition": {"type": "verdict"}}),
    );
    let r = run_with(
        s,
        &|t| {
            if t.round == 1 {
                Some(verdict(false, 50.0, &["old issue"]))
            } else {
                Some(verdict(true, 95.0, &["cache size", "eviction policy"]))
            }
        },
        &no_vote,
    );
    let synth = r
        .tasks
        .iter()
        .find(|t| t.kind == TaskKind::Synthesize)
        .unwrap();
    assert_eq!(
        synth.input.open_issues,
        vec!["cache size", "eviction policy"]
    );
    let sol = r.machine.state().final_solution.as_ref().unwrap();
    // The test judge listed none: the machine added both, with a warning.
    assert_eq!(
        sol.unresolved_disagreements,
        vec!["cache size", "eviction policy"]
    );
    assert!(warnings(&r)
        .iter()
        .any(|w| w.contains("left out 2 open issue")));
}

#[test]
fn adaptive_short_path_synthesizes_from_the_proposals_at_once() {
    let s = spec(
        3,
        3,
        "fixed",
        json!({"mode": "adaptive", "terminationCondition": {"type": "fixed", "threshold": 70}}),
    );
    let r = run_with(s, &|_| Some(verdict(true, 75.0, &["naming"])), &no_vote);
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    assert_eq!(r.count(TaskKind::Propose), 3);
    assert_eq!(r.count(TaskKind::Critique), 0);
    assert_eq!(r.count(TaskKind::Refine), 0);
    assert_eq!(r.count(TaskKind::Verdict), 1);
    let screen = r
        .tasks
        .iter()
        .find(|t| t.kind == TaskKind::Verdict)
        .unwrap();
    assert_eq!(screen.round, 0);
    assert_eq!(screen.id, format!("{}/0/verdict/judge", st.id));
    assert!(screen
        .input
        .transcript
        .as_ref()
        .unwrap()
        .contains("text of"));
    let a = st.adaptive.as_ref().unwrap();
    assert_eq!(a.path, AdaptivePath::Short);
    assert!(a.reason.contains("75"), "{}", a.reason);
    assert_eq!(r.tasks.len(), 3 + 1 + 1);
    assert_eq!(
        st.final_solution.as_ref().unwrap().unresolved_disagreements,
        vec!["naming"]
    );
    assert!(r.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::AdaptivePathChosen {
            path: AdaptivePath::Short,
            ..
        }
    )));
}

#[test]
fn adaptive_full_path_debates_as_configured_after_the_screen() {
    let s = spec(3, 2, "fixed", json!({"mode": "adaptive"}));
    let r = run_with(s, &|_| Some(verdict(true, 50.0, &[])), &no_vote);
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    assert_eq!(st.adaptive.as_ref().unwrap().path, AdaptivePath::Full);
    assert_eq!(st.rounds.len(), 2);
    assert_eq!(r.count(TaskKind::Critique), 12);
    assert_eq!(r.count(TaskKind::Verdict), 1);
    // The screen came before any critique.
    let screen_at = r
        .tasks
        .iter()
        .position(|t| t.kind == TaskKind::Verdict)
        .unwrap();
    let first_critique = r
        .tasks
        .iter()
        .position(|t| t.kind == TaskKind::Critique)
        .unwrap();
    assert!(screen_at < first_critique);
}

fn vote_for(target: &'static str) -> impl Fn(&Task) -> Option<Ballot> {
    move |t| {
        Some(Ballot {
            vote: if t.agent.id == target {
                "a0".into()
            } else {
                target.into()
            },
            reason: "best".into(),
        })
    }
}

#[test]
fn voting_every_agent_votes_after_the_final_round_and_plurality_wins() {
    let s = spec(3, 1, "fixed", json!({"synthesisMethod": "voting"}));
    let r = run_with(s, &|_| None, &vote_for("a2"));
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    assert_eq!(r.count(TaskKind::Vote), 3);
    let vote = r
        .tasks
        .iter()
        .find(|t| t.kind == TaskKind::Vote && t.agent.id == "a1")
        .unwrap();
    let ids: Vec<&str> = vote
        .input
        .candidates
        .iter()
        .map(|c| c.agent_id.as_str())
        .collect();
    assert_eq!(ids, vec!["a0", "a2"]);
    let v = st.voting.as_ref().unwrap();
    assert!(v.tallied && !v.tie);
    assert_eq!(v.winner.as_deref(), Some("a2"));
    assert_eq!(v.counts.get("a2"), Some(&2));
    assert_eq!(v.counts.get("a0"), Some(&1));
    let synth = r
        .tasks
        .iter()
        .find(|t| t.kind == TaskKind::Synthesize)
        .unwrap();
    let text = synth.input.vote_result.as_ref().unwrap();
    assert!(text.contains("winner is a2"), "{text}");
    assert_eq!(
        st.final_solution.as_ref().unwrap().based_on.as_deref(),
        Some("a2")
    );
    // Votes come after every refinement and before the synthesis.
    let last_refine = r
        .tasks
        .iter()
        .rposition(|t| t.kind == TaskKind::Refine)
        .unwrap();
    let first_vote = r
        .tasks
        .iter()
        .position(|t| t.kind == TaskKind::Vote)
        .unwrap();
    assert!(last_refine < first_vote);
    assert!(r
        .events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::VotesTallied { winner: Some(w), .. } if w == "a2")));
    assert_eq!(
        r.events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::VoteCast { .. }))
            .count(),
        3
    );
}

#[test]
fn a_tie_goes_to_the_judge_and_invalid_votes_are_recorded_not_counted() {
    let s = spec(4, 1, "fixed", json!({"synthesisMethod": "voting"}));
    // a0 → a1, a1 → a0, a2 votes for itself, a3 for an unknown id.
    let r = run_with(s, &|_| None, &|t| {
        let vote = match t.agent.id.as_str() {
            "a0" => "a1",
            "a1" => "a0",
            "a2" => "a2",
            _ => "nobody",
        };
        Some(Ballot {
            vote: vote.into(),
            reason: "x".into(),
        })
    });
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    let v = st.voting.as_ref().unwrap();
    assert!(v.tie);
    assert_eq!(v.winner, None);
    assert_eq!(v.leaders, vec!["a0", "a1"]);
    let invalid: Vec<(&str, &str)> = v
        .votes
        .iter()
        .filter(|b| !b.valid)
        .map(|b| (b.agent_id.as_str(), b.invalid_reason.as_deref().unwrap()))
        .collect();
    assert_eq!(invalid.len(), 2);
    assert!(invalid[0].1.contains("itself"));
    assert!(invalid[1].1.contains("not an agent"));
    assert_eq!(
        warnings(&r)
            .iter()
            .filter(|w| w.contains("invalid vote"))
            .count(),
        2
    );
    let synth = r
        .tasks
        .iter()
        .find(|t| t.kind == TaskKind::Synthesize)
        .unwrap();
    assert!(synth
        .input
        .vote_result
        .as_ref()
        .unwrap()
        .contains("tied between a0, a1"));
}

#[test]
fn voting_config_errors_name_the_allowed_methods() {
    let bad = spec(3, 1, "fixed", json!({"synthesisMethod": "consensus"}));
    let e = bad.validate().unwrap_err().to_string();
    assert!(
        e.contains("debate.synthesisMethod") && e.contains("judge, merge, voting"),
        "{e}"
    );
    for ok in ["judge", "merge", "voting"] {
        spec(3, 1, "fixed", json!({"synthesisMethod": ok}))
            .validate()
            .unwrap();
    }
    let alone = spec(1, 1, "fixed", json!({"synthesisMethod": "voting"}));
    assert!(alone
        .validate()
        .unwrap_err()
        .to_string()
        .contains("two enabled agents"));
}

#[test]
fn votes_and_verdicts_resume_from_the_checkpoint_without_repeating_calls() {
    let s = spec(
        3,
        2,
        "verdict",
        json!({"synthesisMethod": "voting", "terminationCondition": {"type": "verdict"}}),
    );
    let mut r = Run::new(s.clone());
    r.apply(Input::Start);
    // Answer everything but hold back the votes once one is in.
    let mut held = Vec::new();
    let v = |_: &Task| Some(verdict(false, 10.0, &["x"]));
    let b = vote_for("a1");
    while let Some(t) = r.queue.pop_front() {
        if t.kind == TaskKind::Vote && t.agent.id != "a0" {
            held.push(t);
            continue;
        }
        let res = answer(&t, &v, &b);
        r.apply(Input::Result(res));
    }
    assert_eq!(held.len(), 2);
    let state = r.machine.state().clone();
    assert_eq!(state.voting.as_ref().unwrap().votes.len(), 1);
    // A new coordinator from the checkpoint re-dispatches exactly the missing votes.
    let mut m = crate::Machine::from_checkpoint(s, state);
    let fx = m.handle(Input::Resume, super::now());
    let again: BTreeSet<String> = fx
        .iter()
        .filter_map(|e| match e {
            crate::Effect::Dispatch(t) => Some(t.id.clone()),
            _ => None,
        })
        .collect();
    let want: BTreeSet<String> = held.iter().map(|t| t.id.clone()).collect();
    assert_eq!(again, want);
    for t in &held {
        m.handle(Input::Result(answer(t, &v, &b)), super::now());
    }
    assert!(m.state().voting.as_ref().unwrap().tallied);
}

#[test]
fn a_failed_verdict_fails_the_debate_and_retry_continues_it() {
    let s = spec(
        2,
        3,
        "verdict",
        json!({"terminationCondition": {"type": "verdict"},
               "retry": {"nodes": {"verdict": {"attempts": 1, "initialBackoffMs": 10}}}}),
    );
    let mut r = Run::new(s);
    r.apply(Input::Start);
    r.drain(|t| {
        Some(if t.kind == TaskKind::Verdict {
            super::fail(t, ErrorKind::Server)
        } else {
            answer(t, &|_| None, &no_vote)
        })
    });
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Failed);
    let err = st.error.as_ref().unwrap();
    assert_eq!(err.node, "verdict");
    assert!(err.task_id.ends_with("/1/verdict/judge"), "{}", err.task_id);
    r.apply(Input::Retry);
    r.drain(|t| Some(answer(t, &|_| Some(verdict(true, 95.0, &[])), &no_vote)));
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
    assert_eq!(r.machine.state().rounds.len(), 1);
}

#[test]
fn independence_warnings_and_recusal() {
    // Every agent on model "m": a warning at start.
    let r = Run::run_ok(spec(3, 1, "fixed", json!({})));
    assert!(
        warnings(&r)
            .iter()
            .any(|w| w.contains("every agent uses the same model")),
        "{:?}",
        warnings(&r)
    );
    // The judge on an agent's model.
    let mut s = spec(2, 1, "fixed", json!({}));
    s.agents[1].model = "other".into();
    s.judge.model = "m".into();
    let r = Run::run_ok(s.clone());
    let w = warnings(&r);
    assert!(
        w.iter()
            .any(|w| w.contains("judge uses the model") && w.contains("a0")),
        "{w:?}"
    );
    assert!(!w.iter().any(|w| w.contains("every agent")), "{w:?}");
    // judge.recuse turns it into a configuration error.
    s.judge.recuse = Some(true);
    let e = s.validate().unwrap_err().to_string();
    assert!(e.contains("judge.recuse"), "{e}");
    // Independent participants: nothing.
    s.judge.model = "judge-model".into();
    s.validate().unwrap();
    let r = Run::run_ok(s);
    assert!(!warnings(&r).iter().any(|w| w.contains("independence")));
}

#[test]
fn under_a_budget_verdicts_and_votes_are_reserved_and_spent() {
    let s = spec(
        3,
        2,
        "verdict",
        json!({"synthesisMethod": "voting", "mode": "adaptive",
               "terminationCondition": {"type": "verdict"},
               "budget": {"tokens": 100000000}}),
    );
    let r = run_with(s, &|_| Some(verdict(false, 10.0, &["x"])), &vote_for("a1"));
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    let b = st.budget.as_ref().unwrap();
    // Every call (10 tokens each in these tests) is spent, nothing stays reserved.
    assert_eq!(b.spent.tokens, 10 * r.tasks.len() as u64);
    assert_eq!(b.reserved.tokens, 0, "{b:?}");
    assert!(b.reservations.is_empty());
    // The screen, one verdict (not after the last round) and three votes were among them.
    assert_eq!(r.count(TaskKind::Verdict), 2);
    assert_eq!(r.count(TaskKind::Vote), 3);
    assert_eq!(st.spend.as_ref().unwrap().calls, r.tasks.len() as u64);
}
