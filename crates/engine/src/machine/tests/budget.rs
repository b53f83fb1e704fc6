//! Unit tests of budgets at the machine level: each call's `maxTokens` fitted to what is
//! left, the ledger never over the limit, the degradation order, overruns of a provider
//! that returns more than asked, the adaptive screen skipped when it does not fit.

use parley_protocol::*;
use serde_json::json;

use super::{now, ok, spec, Run};
use crate::budget::{Pricing, MIN_COMPLETION_TOKENS, MIN_SYNTHESIS_TOKENS};
use crate::{Input, Machine};

/// `s`'s smallest admissible run, in tokens.
fn minimum(s: &DebateSpec) -> u64 {
    Machine::new("deb-20260102-030405-abcdef".into(), s.clone(), now())
        .minimum_reservation()
        .tokens
}

/// `s` with a token budget of `tokens`.
fn with_tokens(mut s: DebateSpec, tokens: u64) -> DebateSpec {
    s.debate.budget = Some(Budget {
        usd: None,
        tokens: Some(tokens),
    });
    s
}

/// Runs `s` answering every task with `text of <id>`, each call reporting the usage
/// `usage(task)` returns; after every transition, checks the ledger against the limit
/// when `strict`.
fn run_with(s: DebateSpec, strict: bool, usage: impl Fn(&Task) -> u64) -> Run {
    let mut r = Run::new(s);
    r.apply(Input::Start);
    while let Some(t) = r.queue.pop_front() {
        let mut res = ok(&t, &format!("text of {}", t.id));
        if let TaskOutcome::Ok(out) = &mut res.outcome {
            out.metadata.tokens_used = usage(&t);
        }
        r.apply(Input::Result(res));
        if strict {
            let b = r.machine.state().budget.clone().unwrap();
            assert!(b.spent.plus(b.reserved).within(&b.limit), "{b:?}");
        }
    }
    r
}

/// A call that uses a quarter of its prompt bound and every completion token it may.
fn honest(t: &Task) -> u64 {
    Pricing::default().prompt_bound(t) / 4 + u64::from(t.agent.max_tokens.unwrap_or(0))
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
    assert!(b.reservations.is_empty() && b.caps.is_empty(), "{b:?}");
    assert_eq!(b.reserved, Amount::default(), "{b:?}");
}

#[test]
fn every_call_is_fitted_to_what_is_left_and_the_debate_degrades_in_order() {
    let s = spec(3, 3, "fixed", json!({}));
    // Twice the smallest debate: far less than three rounds whose calls all use their caps.
    let limit = minimum(&s) * 2;
    let r = run_with(with_tokens(s, limit), true, honest);
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed, "{:?}", st.error);
    assert!(st.final_solution.is_some());
    assert_within_budget(st);
    // Every call asked for a fitted cap: at least its floor, at most the participant's.
    for t in &r.tasks {
        let cap = t.agent.max_tokens.unwrap();
        let floor = if t.kind == TaskKind::Synthesize {
            MIN_SYNTHESIS_TOKENS
        } else {
            MIN_COMPLETION_TOKENS
        };
        assert!(
            (floor..=limits::DEFAULT_MAX_TOKENS).contains(&cap),
            "{}: {cap}",
            t.id
        );
    }
    // The judge asked once for its JSON.
    let synth = r.tasks.last().unwrap();
    assert_eq!(synth.kind, TaskKind::Synthesize);
    assert!(synth.input.single_ask);
    // A third of the debate cannot hold every round: it degraded, in the documented order.
    let taken = steps(st);
    println!(
        "{limit}: {:?}, caps {:?}",
        taken,
        r.tasks
            .iter()
            .map(|t| (
                t.id.rsplit_once("abcdef/").unwrap().1.to_string(),
                t.agent.max_tokens.unwrap()
            ))
            .collect::<Vec<_>>()
    );
    assert!(!taken.is_empty());
    let order = [
        "dropCritiques",
        "noNewRound",
        "skipSummaries",
        "synthesizeNow",
    ];
    assert!(
        taken.iter().all(|(s, _)| order.contains(&s.as_str())),
        "{taken:?}"
    );
    assert!(st.rounds.len() < 3, "{taken:?}");
}

#[test]
fn the_smallest_admissible_budget_runs_the_proposals_and_the_synthesis() {
    let s = spec(3, 2, "fixed", json!({}));
    let min = minimum(&s);
    let mut refused = with_tokens(s.clone(), min - 1);
    let refusal =
        crate::budget::admit(&mut refused, &Budget::default(), &Pricing::default()).unwrap_err();
    assert!(
        matches!(refusal, crate::budget::AdmitError::BelowMinimum { need_tokens, agents: 3, .. } if need_tokens == min),
        "{refusal:?}"
    );
    let err = refusal.to_string();
    assert!(
        err.contains(&min.to_string())
            && err.contains(&format!("{} tokens", min - 1))
            && err.contains("3 round-1 proposal(s)"),
        "{err}"
    );
    let mut admitted = with_tokens(s, min);
    crate::budget::admit(&mut admitted, &Budget::default(), &Pricing::default()).unwrap();
    let r = run_with(admitted, true, honest);
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed, "{:?}", st.error);
    assert_eq!(r.count(TaskKind::Propose), 3);
    assert_eq!(r.count(TaskKind::Synthesize), 1);
    assert!(st.final_solution.is_some());
    assert_within_budget(st);
    assert!(!steps(st).is_empty());
}

#[test]
fn a_provider_returning_more_than_asked_is_recorded_and_later_calls_fit_what_is_left() {
    let s = spec(3, 2, "fixed", json!({}));
    let limit = minimum(&s) * 3;
    // Every agent call uses twice what it was allowed.
    let r = run_with(with_tokens(s, limit), false, |t| {
        let asked = honest(t);
        if t.kind == TaskKind::Synthesize {
            asked
        } else {
            asked * 2
        }
    });
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed, "{:?}", st.error);
    assert!(st.final_solution.is_some());
    let b = st.budget.as_ref().unwrap();
    assert!(!b.overruns.is_empty(), "{b:?}");
    for o in &b.overruns {
        assert!(o.used.tokens > o.reserved.tokens, "{o:?}");
        assert!(o.max_tokens >= MIN_COMPLETION_TOKENS, "{o:?}");
    }
    // The synthesis was fitted to what was really left (the overruns included).
    let synth = r.tasks.last().unwrap();
    let spent_before: u64 = b.spent.tokens - honest(synth);
    let prompt = Pricing::default().prompt_bound(synth);
    let cap = u64::from(synth.agent.max_tokens.unwrap());
    assert!(
        spent_before + prompt + cap <= limit || cap == u64::from(MIN_SYNTHESIS_TOKENS),
        "{spent_before} + {prompt} + {cap} > {limit}"
    );
}

#[test]
fn an_adaptive_screen_the_budget_cannot_afford_is_skipped_and_the_debate_goes_on() {
    // The judge's own prompt is larger than anything the budget leaves for a verdict once
    // the synthesis is held back.
    let mut s = spec(3, 2, "verdict", json!({"mode": "adaptive"}));
    s.judge.system_prompt = Some("x".repeat(40_000).into());
    for a in &mut s.agents {
        a.max_tokens = Some(200);
    }
    let limit = minimum(&s) + 30_000;
    let r = run_with(with_tokens(s, limit), true, |_| 10);
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
    assert_eq!(steps(st)[0], ("skipScreen".to_string(), 0));
    assert!(r.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::BudgetDegraded { step, round: 0, .. } if step == "skipScreen"
    )));
    // Round 1 was debated: every critique and refinement, then the synthesis.
    let round1 = st.round(1).unwrap();
    assert_eq!(round1.count(ContributionType::Critique), 6);
    assert_eq!(round1.count(ContributionType::Refinement), 3);
    assert!(st.final_solution.is_some());
    assert_within_budget(st);
}

#[test]
fn a_resumed_debate_sends_its_calls_again_with_the_caps_they_were_fitted_to() {
    let s = with_tokens(spec(3, 2, "fixed", json!({})), 40_000);
    let mut r = Run::new(s.clone());
    r.apply(Input::Start);
    let first: Vec<(String, Option<u32>)> = r
        .tasks
        .iter()
        .map(|t| (t.id.clone(), t.agent.max_tokens))
        .collect();
    assert_eq!(first.len(), 3);
    // The coordinator dies; another rebuilds the machine from the checkpoint.
    let mut m = Machine::from_checkpoint(s, r.machine.state().clone());
    let again: Vec<(String, Option<u32>)> = m
        .handle(Input::Resume, now())
        .into_iter()
        .filter_map(|e| match e {
            crate::Effect::Dispatch(t) => Some((t.id, t.agent.max_tokens)),
            _ => None,
        })
        .collect();
    assert_eq!(again, first);
    let b = m.state().budget.as_ref().unwrap();
    assert_eq!(b.reservations.len(), 3, "{b:?}");
}

#[test]
fn a_retried_call_keeps_its_reservation_and_its_cap() {
    let s = with_tokens(spec(3, 1, "fixed", json!({})), 40_000);
    let mut r = Run::new(s);
    r.apply(Input::Start);
    let t = r.queue.pop_front().unwrap();
    let held = r.machine.state().budget.clone().unwrap();
    r.apply(Input::Result(super::fail(&t, ErrorKind::Server)));
    r.apply(Input::RetryDue(t.id.clone()));
    let again = r.tasks.last().unwrap();
    assert_eq!((again.id.as_str(), again.attempt), (t.id.as_str(), 2));
    assert_eq!(again.agent.max_tokens, t.agent.max_tokens);
    let b = r.machine.state().budget.clone().unwrap();
    assert_eq!(b.reserved, held.reserved, "nothing counted twice");
    assert_eq!(b.reservations, held.reservations);
}

#[test]
fn a_checkpoint_without_fitted_caps_still_loads() {
    // A budget record as written before caps and overruns were kept.
    let old = json!({
        "limit": {"tokens": 50000},
        "spent": {"usd": 0.0, "tokens": 100},
        "reserved": {"usd": 0.0, "tokens": 900},
        "hold": {"usd": 0.0, "tokens": 500},
        "reservations": {"deb-20260102-030405-abcdef/1/propose/a0": {"usd": 0.0, "tokens": 400}}
    });
    let b: BudgetRecord = serde_json::from_value(old).unwrap();
    assert!(b.caps.is_empty() && b.overruns.is_empty());
    assert_eq!(b.left().tokens, Some(49_000));
}
