//! Rounds: the whole graph, node order, carry-over, dataflow scheduling, termination rules,
//! summarization thresholds.

use parley_protocol::*;
use serde_json::json;

use super::{ok, spec, Run};
use crate::Input;

#[test]
fn fixed_two_rounds_three_agents_runs_the_whole_graph() {
    let r = Run::run_ok(spec(3, 2, "fixed", json!({})));
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed);
    assert_eq!(s.rounds.len(), 2);
    for rd in &s.rounds {
        assert_eq!(rd.count(ContributionType::Proposal), 3);
        assert_eq!(rd.count(ContributionType::Critique), 6);
        assert_eq!(rd.count(ContributionType::Refinement), 3);
    }
    // 3 proposals + 6 critiques + 3 refinements, then 6 + 3, then synthesis: 22 LLM calls.
    assert_eq!(r.tasks.len(), 22);
    assert_eq!(r.count(TaskKind::Propose), 3);
    assert_eq!(r.count(TaskKind::Evaluate), 0);
    assert_eq!(s.final_solution.as_ref().unwrap().description, "final");
    assert!(r.events.last().unwrap().is_final());
    // Event sequence numbers are 1..=n with no gaps.
    for (i, e) in r.events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1);
    }
}

#[test]
fn nodes_are_entered_in_graph_order() {
    let r = Run::run_ok(spec(2, 2, "fixed", json!({})));
    let nodes = r.nodes();
    use Node::*;
    let expected_prefix = [
        (0, Initialization),
        (0, Clarification),
        (1, RoundManager),
        (1, Proposal),
        (1, Critique),
        (1, Refinement),
    ];
    assert_eq!(&nodes[..6], &expected_prefix);
    for n in [
        (1, Evaluation),
        (2, RoundManager),
        (2, Proposal),
        (2, Critique),
        (2, Refinement),
        (2, Evaluation),
        (2, Synthesis),
        (2, Completed),
    ] {
        assert!(nodes.contains(&n), "missing {n:?} in {nodes:?}");
    }
    let pos = |n| nodes.iter().position(|x| *x == n).unwrap();
    assert!(pos((2, Evaluation)) < pos((2, Synthesis)));
    assert!(pos((2, Synthesis)) < pos((2, Completed)));
}

#[test]
fn round_two_proposals_carry_over_refinements() {
    let r = Run::run_ok(spec(3, 2, "fixed", json!({})));
    let s = r.machine.state();
    for a in ["a0", "a1", "a2"] {
        let refined = s.rounds[0]
            .find(ContributionType::Refinement, a, None)
            .unwrap();
        let carried = s.rounds[1]
            .find(ContributionType::Proposal, a, None)
            .unwrap();
        assert_eq!(carried.content, refined.content);
        assert_eq!(carried.metadata.tokens_used, 0);
        assert_eq!(carried.metadata.latency_ms, 0);
        assert!(carried.metadata.carried_over);
    }
    assert!(r
        .tasks
        .iter()
        .all(|t| !(t.kind == TaskKind::Propose && t.round == 2)));
}

#[test]
fn empty_refinement_falls_back_to_an_llm_proposal_with_a_warning() {
    let mut r = Run::new(spec(2, 2, "fixed", json!({})));
    r.apply(Input::Start);
    r.drain(|t| {
        let text = if t.kind == TaskKind::Refine && t.round == 1 && t.agent.id == "a0" {
            "  "
        } else {
            "x"
        };
        Some(ok(t, text))
    });
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed);
    let p = r
        .tasks
        .iter()
        .filter(|t| t.kind == TaskKind::Propose && t.round == 2)
        .collect::<Vec<_>>();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].agent.id, "a0");
    assert!(
        !s.rounds[1]
            .find(ContributionType::Proposal, "a0", None)
            .unwrap()
            .metadata
            .carried_over
    );
    assert!(
        s.rounds[1]
            .find(ContributionType::Proposal, "a1", None)
            .unwrap()
            .metadata
            .carried_over
    );
    assert!(
        s.engine
            .warnings
            .iter()
            .any(|w| w.contains("fresh proposal")),
        "{:?}",
        s.engine.warnings
    );
}

#[test]
fn critique_of_a_proposal_starts_as_soon_as_that_proposal_exists() {
    let mut r = Run::new(spec(3, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let proposals: Vec<Task> = r.queue.drain(..).collect();
    assert_eq!(proposals.len(), 3);
    // Only a1's proposal arrives: exactly the two critiques of a1 start.
    r.apply(Input::Result(ok(&proposals[1], "p1")));
    let started: Vec<_> = r
        .queue
        .iter()
        .map(|t| (t.kind, t.agent.id.clone(), t.target_agent_id.clone()))
        .collect();
    assert_eq!(
        started,
        vec![
            (TaskKind::Critique, "a0".into(), Some("a1".into())),
            (TaskKind::Critique, "a2".into(), Some("a1".into()))
        ]
    );
}

#[test]
fn refinement_starts_when_every_critique_of_that_agent_arrived() {
    let mut r = Run::new(spec(3, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let ps: Vec<Task> = r.queue.drain(..).collect();
    for p in &ps {
        r.apply(Input::Result(ok(p, "p")));
    }
    let crits: Vec<Task> = r.queue.drain(..).collect();
    assert_eq!(crits.len(), 6);
    // Deliver the critiques of a2 only.
    for c in crits
        .iter()
        .filter(|c| c.target_agent_id.as_deref() == Some("a2"))
    {
        r.apply(Input::Result(ok(c, "c")));
    }
    let next: Vec<_> = r.queue.drain(..).map(|t| (t.kind, t.agent.id)).collect();
    assert_eq!(next, vec![(TaskKind::Refine, "a2".to_string())]);
    let refine = r.tasks.last().unwrap();
    assert_eq!(refine.input.critiques.len(), 2);
    assert!(refine.input.critiques.iter().all(|c| c.agent_id != "a2"));
}

#[test]
fn fixed_termination_starts_next_round_per_agent_without_a_barrier() {
    let mut r = Run::new(spec(3, 2, "fixed", json!({})));
    r.apply(Input::Start);
    r.drain(|t| {
        if t.kind == TaskKind::Refine && t.agent.id == "a1" {
            None
        } else {
            Some(ok(t, "x"))
        }
    });
    // a1's round-1 refinement is still out, yet a0's round-2 proposal was carried over and
    // a2 already critiqued it; a1 waits (its round-2 summary may depend on that refinement).
    let s = r.machine.state();
    assert_eq!(s.rounds.len(), 2);
    assert!(s.rounds[1]
        .find(ContributionType::Proposal, "a0", None)
        .is_some());
    assert!(s.rounds[1]
        .find(ContributionType::Critique, "a2", Some("a0"))
        .is_some());
    assert!(s.rounds[1]
        .find(ContributionType::Critique, "a1", Some("a0"))
        .is_none());
    assert_eq!(s.status, DebateStatus::Running);
}

#[test]
fn quality_termination_stops_early_when_confidence_reaches_threshold() {
    let mut r = Run::new(spec(2, 5, "quality", json!({})));
    r.apply(Input::Start);
    r.drain(|t| {
        let mut res = ok(t, "x");
        if let (TaskKind::Evaluate, TaskOutcome::Ok(o)) = (t.kind, &mut res.outcome) {
            o.confidence = Some(if t.round == 1 { 40.0 } else { 85.0 });
        }
        Some(res)
    });
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed);
    assert_eq!(s.rounds.len(), 2);
    assert_eq!(r.count(TaskKind::Evaluate), 2);
    assert_eq!(s.rounds[1].evaluation.as_ref().unwrap().confidence, 85.0);
}

#[test]
fn convergence_uses_the_configured_threshold_and_rounds_is_the_hard_cap() {
    let mut sp = spec(2, 3, "convergence", json!({}));
    sp.debate.termination_condition.threshold = Some(95.0);
    let mut r = Run::new(sp);
    r.apply(Input::Start);
    r.drain(|t| Some(ok(t, "x"))); // evaluations always say 50
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed);
    assert_eq!(s.rounds.len(), 3);
    // No evaluation after the last allowed round.
    assert_eq!(r.count(TaskKind::Evaluate), 2);
}

#[test]
fn evaluation_waits_for_every_refinement() {
    let mut r = Run::new(spec(2, 3, "quality", json!({})));
    r.apply(Input::Start);
    r.drain(|t| {
        if t.kind == TaskKind::Refine && t.agent.id == "a0" {
            None
        } else {
            Some(ok(t, "x"))
        }
    });
    assert_eq!(r.count(TaskKind::Evaluate), 0);
    assert_eq!(r.machine.state().rounds.len(), 1);
}

#[test]
fn summarization_runs_only_above_the_threshold() {
    let long = "y".repeat(3000);
    // Threshold 5000 (default): history of one round = proposal + critique + refinement.
    let mut r = Run::new(spec(2, 2, "fixed", json!({})));
    r.apply(Input::Start);
    r.drain(|t| {
        Some(ok(
            t,
            if t.kind == TaskKind::Summarize {
                "short summary"
            } else {
                &long
            },
        ))
    });
    assert_eq!(r.count(TaskKind::Summarize), 2, "3 × 3000 chars > 5000");
    let s = r.machine.state();
    let sum = &s.rounds[1].summaries["a0"];
    assert_eq!(sum.summary, "short summary");
    assert!(sum.metadata.before_chars > 5000);
    // Round-2 prompts use the summary instead of the full history.
    let c = r
        .tasks
        .iter()
        .find(|t| t.kind == TaskKind::Critique && t.round == 2 && t.agent.id == "a0")
        .unwrap();
    assert!(c
        .input
        .history
        .as_deref()
        .unwrap()
        .contains("short summary"));
    assert!(!c.input.history.as_deref().unwrap().contains(&long));

    let r = Run::run_ok(spec(2, 2, "fixed", json!({})));
    assert_eq!(r.count(TaskKind::Summarize), 0, "short history: no summary");
}

#[test]
fn agent_summarization_overrides_the_debate_setting() {
    let mut sp = spec(
        2,
        2,
        "fixed",
        json!({"summarization": {"enabled": true, "threshold": 10, "maxLength": 7}}),
    );
    sp.agents[1].summarization = Some(SummarizationConfig {
        enabled: false,
        ..Default::default()
    });
    let mut r = Run::new(sp);
    r.apply(Input::Start);
    r.drain(|t| Some(ok(t, "a long enough text for the threshold")));
    let sums: Vec<_> = r
        .tasks
        .iter()
        .filter(|t| t.kind == TaskKind::Summarize)
        .map(|t| t.agent.id.clone())
        .collect();
    assert_eq!(sums, vec!["a0".to_string()]);
    let s = r.machine.state();
    // Cut to maxLength.
    assert_eq!(s.rounds[1].summaries["a0"].summary.chars().count(), 7);
    // The judge summarizes the final transcript too (threshold 10).
    assert_eq!(r.count(TaskKind::JudgeSummarize), 1);
    let synth = r
        .tasks
        .iter()
        .find(|t| t.kind == TaskKind::Synthesize)
        .unwrap();
    assert_eq!(
        synth.input.transcript.as_deref().map(|t| t.chars().count()),
        Some(7)
    );
}

#[test]
fn unknown_role_warns_at_start() {
    let mut sp = spec(2, 1, "fixed", json!({}));
    sp.agents[0].role = "astronaut".into();
    let r = Run::run_ok(sp);
    assert!(r.events.iter().any(
        |e| matches!(&e.kind, EventKind::Warning { message } if message.contains("astronaut"))
    ));
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
}

#[test]
fn a_remembered_history_length_is_always_the_history_counted_afresh() {
    // Three rounds, summaries on at a threshold some histories cross: after every
    // transition, each agent's remembered length is the one counted from the state.
    let sp = spec(
        3,
        3,
        "fixed",
        json!({"summarization": {"enabled": true, "threshold": 400, "maxLength": 50}}),
    );
    let mut r = Run::new(sp);
    r.apply(Input::Start);
    let mut checked = 0;
    while let Some(t) = r.queue.pop_front() {
        let text = format!("{} é {}", t.id, "z".repeat(30 + t.id.len() % 7 * 20));
        r.apply(Input::Result(ok(&t, &text)));
        let m = &r.machine;
        for round in 2..=m.state().rounds.len() as u32 {
            for i in 0..3 {
                assert_eq!(
                    m.history_chars(i, round),
                    m.count_history_chars(i, round),
                    "agent {i}, round {round}, after {}",
                    t.id
                );
                checked += 1;
            }
        }
    }
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
    assert!(r.count(TaskKind::Summarize) > 0);
    assert!(checked > 20, "{checked}");
}
