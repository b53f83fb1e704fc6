//! Unit tests of the budget's fallbacks at the machine level: the adaptive screen skipped
//! when it does not fit (the debate goes on as configured), and the synthesis at once, with
//! what exists, when the budget runs out mid-debate.

use parley_protocol::*;
use serde_json::json;

use super::{now, ok, spec, Run};
use crate::{Input, Machine};

/// `s` with a token budget of its smallest admissible run plus `extra`.
fn with_budget(mut s: DebateSpec, extra: u64) -> DebateSpec {
    let m = Machine::new("deb-20260102-030405-abcdef".into(), s.clone(), now());
    let min = m.minimum_reservation().tokens;
    s.debate.budget = Some(Budget {
        usd: None,
        tokens: Some(min + extra),
    });
    s
}

/// Runs `s` answering every task with `text of <id>`, each call using `tokens`.
fn run_spending(s: DebateSpec, tokens: u64) -> Run {
    let mut r = Run::new(s);
    r.apply(Input::Start);
    r.drain(|t| {
        let mut res = ok(t, &format!("text of {}", t.id));
        if let TaskOutcome::Ok(out) = &mut res.outcome {
            out.metadata.tokens_used = tokens;
        }
        Some(res)
    });
    r
}

fn steps(st: &DebateState) -> Vec<(String, u32)> {
    st.budget
        .as_ref()
        .unwrap()
        .degraded
        .iter()
        .map(|d| (d.step.clone(), d.round))
        .collect()
}

fn assert_within_budget(st: &DebateState) {
    let b = st.budget.as_ref().unwrap();
    assert!(b.spent.within(&b.limit), "{b:?}");
    assert!(b.reservations.is_empty(), "{b:?}");
}

#[test]
fn an_adaptive_screen_the_budget_cannot_afford_is_skipped_and_the_debate_goes_on() {
    // Cheap agents, a judge whose verdict reserves far more than what is left after the
    // proposals.
    let mut s = spec(3, 2, "verdict", json!({"mode": "adaptive"}));
    for a in &mut s.agents {
        a.max_tokens = Some(200);
    }
    let r = run_spending(with_budget(s, 30_000), 10);
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    // No screen was asked for; the reason says why, and the debate went the full path.
    assert!(!r
        .tasks
        .iter()
        .any(|t| t.kind == TaskKind::Verdict && t.round == 0));
    let adaptive = st.adaptive.as_ref().unwrap();
    assert_eq!(adaptive.path, AdaptivePath::Full);
    assert!(
        adaptive.reason.contains("over the debate's budget"),
        "{}",
        adaptive.reason
    );
    assert!(!adaptive.verdict.as_ref().unwrap().verdict.valid);
    assert_eq!(steps(st)[0], ("skipScreen".to_string(), 0));
    assert!(r.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::BudgetDegraded { step, round: 0, .. } if step == "skipScreen"
    )));
    assert!(r.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::AdaptivePathChosen {
            path: AdaptivePath::Full,
            ..
        }
    )));
    // Round 1 was debated: every critique and refinement, then the synthesis.
    let round1 = st.round(1).unwrap();
    assert_eq!(round1.count(ContributionType::Critique), 6);
    assert_eq!(round1.count(ContributionType::Refinement), 3);
    assert!(st.final_solution.is_some());
    assert_within_budget(st);
}

#[test]
fn a_budget_that_runs_out_mid_debate_synthesizes_at_once_with_what_exists() {
    // Every call uses 20k tokens: round 1 fits, round 2's critiques too, its refinements
    // do not.
    let s = with_budget(spec(2, 3, "fixed", json!({})), 130_000);
    let r = run_spending(s, 20_000);
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed, "{:?}", st.error);
    assert_eq!(steps(st), vec![("synthesizeNow".to_string(), 2)]);
    assert_eq!(st.rounds.len(), 2);
    assert_eq!(st.round(2).unwrap().count(ContributionType::Critique), 2);
    assert_eq!(st.round(2).unwrap().count(ContributionType::Refinement), 0);
    assert_eq!(r.count(TaskKind::Refine), 2);
    // The synthesis is the last task, nothing else starts once the budget ran out, and
    // it reads what exists: round 1's refinements.
    let synth = r.tasks.last().unwrap();
    assert_eq!(synth.kind, TaskKind::Synthesize);
    assert_eq!(r.count(TaskKind::Synthesize), 1);
    let transcript = synth.input.transcript.as_deref().unwrap();
    for a in ["a0", "a1"] {
        assert!(
            transcript.contains(&format!("/1/refine/{a}")),
            "{transcript}"
        );
    }
    let degraded_at = r
        .events
        .iter()
        .position(|e| matches!(&e.kind, EventKind::BudgetDegraded { step, .. } if step == "synthesizeNow"))
        .unwrap();
    let later: Vec<&str> = r.events[degraded_at..]
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TaskDispatched { task_id, .. } => Some(task_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(later, vec![synth.id.as_str()]);
    assert!(st.final_solution.is_some());
    assert_within_budget(st);
}
