//! Unit tests of `terminationCondition.type: "similarity"`: the `Embed`
//! node after each round, the stop when every agent's refinement repeats its previous one,
//! the figures kept in the state, resume, retry and the configuration errors.

use std::collections::BTreeSet;

use parley_protocol::*;
use serde_json::json;

use super::{ok, spec, Run};
use crate::Input;

fn similarity_spec(n: usize, rounds: u32, threshold: f64) -> DebateSpec {
    spec(
        n,
        rounds,
        "similarity",
        json!({
            "terminationCondition": {"type": "similarity", "threshold": threshold},
            "embeddings": {"provider": "openai-compatible", "model": "embed-small"},
        }),
    )
}

/// `ok` with, on embed tasks, self-similarity `self_sim(task, agent)` for every agent that
/// has a previous refinement and 0.5 across agents.
fn answer(t: &Task, self_sim: &dyn Fn(&Task, &str) -> f64) -> TaskResult {
    let mut r = ok(t, &format!("text of {}", t.id));
    if let TaskOutcome::Ok(out) = &mut r.outcome {
        if t.kind == TaskKind::Embed {
            out.content = String::new();
            out.similarity = Some(Similarity {
                per_agent: t
                    .input
                    .previous
                    .iter()
                    .map(|p| (p.agent_id.clone(), self_sim(t, &p.agent_id)))
                    .collect(),
                across_agents: Some(0.5),
            });
        }
    }
    r
}

fn run_with(spec: DebateSpec, self_sim: &dyn Fn(&Task, &str) -> f64) -> Run {
    let mut r = Run::new(spec);
    r.apply(Input::Start);
    r.drain(|t| Some(answer(t, self_sim)));
    r
}

#[test]
fn the_debate_stops_once_every_refinement_repeats_the_previous_one() {
    let r = run_with(similarity_spec(3, 5, 0.9), &|_, _| 0.97);
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    assert_eq!(st.rounds.len(), 2, "stops after round 2");
    assert_eq!(r.count(TaskKind::Embed), 2);
    assert_eq!(r.count(TaskKind::Evaluate) + r.count(TaskKind::Verdict), 0);
    // The embed tasks run on the judge's worker with the embedding model, and carry this
    // round's refinements and the round before's.
    let embeds: Vec<&Task> = r
        .tasks
        .iter()
        .filter(|t| t.kind == TaskKind::Embed)
        .collect();
    for t in &embeds {
        assert_eq!(t.agent.id, "judge");
        assert_eq!(t.agent.model, "embed-small");
        assert_eq!(t.agent.provider.as_deref(), Some("openai-compatible"));
        assert_eq!(t.input.candidates.len(), 3);
        assert!(
            t.id.ends_with(&format!("/{}/embed/judge", t.round)),
            "{}",
            t.id
        );
    }
    assert!(embeds[0].input.previous.is_empty());
    assert_eq!(embeds[1].input.previous.len(), 3);
    assert!(embeds[1]
        .input
        .previous
        .iter()
        .all(|p| p.content.contains("/1/refine/")));
    // The figures are kept per round.
    let one = st.rounds[0].similarity.as_ref().unwrap();
    assert!(one.similarity.per_agent.is_empty());
    assert!(!one.converged);
    let two = st.rounds[1].similarity.as_ref().unwrap();
    assert_eq!(two.similarity.per_agent.len(), 3);
    assert_eq!(two.similarity.across_agents, Some(0.5));
    assert_eq!(two.threshold, 0.9);
    assert!(two.converged);
    assert_eq!(two.metadata.tokens_used, 10);
    let measured: Vec<bool> = r
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::SimilarityMeasured { converged, .. } => Some(converged),
            _ => None,
        })
        .collect();
    assert_eq!(measured, vec![false, true]);
    assert!(st.final_solution.is_some());
    // Progress counts the embeddings done, and a debate that stopped early is complete:
    // 2 rounds × (3 proposals, 6 critiques, 3 refinements), 2 embeddings, the synthesis.
    let p = r.machine.progress();
    assert_eq!((p.done, p.total), (2 * 12 + 2 + 1, 2 * 12 + 2 + 1));
}

#[test]
fn one_agent_still_changing_keeps_the_debate_going_to_the_cap() {
    let r = run_with(similarity_spec(3, 4, 0.9), &|_, a| {
        if a == "a2" {
            0.6
        } else {
            0.99
        }
    });
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    assert_eq!(st.rounds.len(), 4);
    // No embedding after the last round: nothing is left to decide.
    assert_eq!(r.count(TaskKind::Embed), 3);
    for rd in &st.rounds[1..3] {
        let s = rd.similarity.as_ref().unwrap();
        assert!(!s.converged);
        assert_eq!(s.similarity.min_per_agent(), Some(0.6));
    }
    assert!(st.rounds[3].similarity.is_none());
}

#[test]
fn the_default_threshold_is_095_and_values_from_the_worker_are_checked() {
    let mut s = similarity_spec(2, 3, 0.9);
    s.debate.termination_condition.threshold = None;
    // 0.94 is under the default 0.95; a value outside -1..=1 is not kept.
    let r = run_with(s, &|t, a| match (t.round, a) {
        (2, "a0") => 7.0,
        _ => 0.94,
    });
    let st = r.machine.state();
    assert_eq!(st.rounds.len(), 3);
    let two = st.rounds[1].similarity.as_ref().unwrap();
    assert_eq!(two.threshold, 0.95);
    assert_eq!(
        two.similarity.per_agent.keys().collect::<Vec<_>>(),
        vec!["a1"]
    );
}

#[test]
fn a_resumed_coordinator_dispatches_the_same_missing_embedding() {
    let s = similarity_spec(2, 3, 0.9);
    let mut r = Run::new(s.clone());
    r.apply(Input::Start);
    let mut held = Vec::new();
    while let Some(t) = r.queue.pop_front() {
        if t.kind == TaskKind::Embed && t.round == 2 {
            held.push(t);
            continue;
        }
        r.apply(Input::Result(answer(&t, &|_, _| 0.99)));
    }
    assert_eq!(held.len(), 1);
    let state = r.machine.state().clone();
    assert!(state.rounds[1].similarity.is_none());
    let mut m = crate::Machine::from_checkpoint(s, state);
    let fx = m.handle(Input::Resume, super::now());
    let again: Vec<Task> = fx
        .into_iter()
        .filter_map(|e| match e {
            crate::Effect::Dispatch(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(
        again.iter().map(|t| t.id.clone()).collect::<BTreeSet<_>>(),
        BTreeSet::from([held[0].id.clone()])
    );
    assert_eq!(again[0].input, held[0].input);
    let mut fx = m.handle(Input::Result(answer(&held[0], &|_, _| 0.99)), super::now());
    // Converged at round 2: the judge's synthesis follows, no round 3.
    let mut n = 0;
    while let Some(t) = fx.iter().find_map(|e| match e {
        crate::Effect::Dispatch(t) => Some(t.clone()),
        _ => None,
    }) {
        assert_ne!(t.kind, TaskKind::Propose, "no new round after convergence");
        fx = m.handle(Input::Result(ok(&t, "x")), super::now());
        n += 1;
        assert!(n < 10);
    }
    assert_eq!(m.state().status, DebateStatus::Completed);
    assert_eq!(m.state().rounds.len(), 2);
}

#[test]
fn a_failed_embedding_fails_the_debate_under_its_retry_policy_and_retry_continues_it() {
    let mut s = similarity_spec(2, 3, 0.9);
    s.debate.retry.nodes.insert(
        "embedding".into(),
        serde_json::from_value(json!({"attempts": 1, "initialBackoffMs": 10})).unwrap(),
    );
    let mut r = Run::new(s);
    r.apply(Input::Start);
    r.drain(|t| {
        Some(if t.kind == TaskKind::Embed {
            super::fail(t, ErrorKind::Server)
        } else {
            answer(t, &|_, _| 0.99)
        })
    });
    let st = r.machine.state();
    assert_eq!(st.status, DebateStatus::Failed);
    let err = st.error.as_ref().unwrap();
    assert_eq!(err.node, "embedding");
    assert!(err.task_id.ends_with("/1/embed/judge"), "{}", err.task_id);
    r.apply(Input::Retry);
    r.drain(|t| Some(answer(t, &|_, _| 0.99)));
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
    assert_eq!(r.machine.state().rounds.len(), 2);
}

#[test]
fn similarity_configuration_errors_name_the_problem() {
    let err = |s: &DebateSpec| s.validate().unwrap_err().to_string();
    let mut s = similarity_spec(2, 3, 1.5);
    let e = err(&s);
    assert!(
        e.contains("debate.terminationCondition.threshold") && e.contains("0..=1"),
        "{e}"
    );
    s.debate.termination_condition.threshold = Some(0.9);
    s.validate().unwrap();
    s.debate.embeddings = None;
    let e = err(&s);
    assert!(
        e.contains("debate.embeddings") && e.contains("needs debate.embeddings"),
        "{e}"
    );
    s.debate.embeddings = Some(EmbeddingsConfig {
        provider: Some("local".into()),
        model: "e".into(),
    });
    let e = err(&s);
    assert!(
        e.contains("debate.embeddings.provider") && e.contains("no embedding mode"),
        "{e}"
    );
    s.debate.embeddings = Some(EmbeddingsConfig {
        provider: Some("acme".into()),
        model: "".into(),
    });
    let e = err(&s);
    assert!(
        e.contains("unknown provider") && e.contains("debate.embeddings.model"),
        "{e}"
    );
    // Embeddings without similarity, and adaptive with similarity.
    let mut fixed = spec(2, 2, "fixed", json!({"embeddings": {"model": "e"}}));
    assert!(err(&fixed).contains("only used with terminationCondition type"));
    fixed.debate.embeddings = None;
    fixed.validate().unwrap();
    let mut adaptive = similarity_spec(2, 3, 0.9);
    adaptive.debate.mode = DebateMode::Adaptive;
    adaptive.validate().unwrap();
    // An unknown key inside embeddings is refused by name.
    let bad: Result<EmbeddingsConfig, _> =
        serde_json::from_value(json!({"model": "e", "baseUrl": "http://x"}));
    assert!(bad.unwrap_err().to_string().contains("baseUrl"));
}

/// Adaptive with similarity: the screen embeds round 1's proposals (task round 0, no round
/// before) and takes the short path when their mean similarity across agents reaches the
/// threshold, the full debate otherwise; the state keeps the screen's figures and the
/// reason, and a resume after the screen does not ask for it again.
#[test]
fn the_adaptive_screen_compares_the_proposals_by_similarity() {
    let across = |value: f64| {
        move |t: &Task| {
            let mut r = answer(t, &|_, _| 0.1);
            if let TaskOutcome::Ok(out) = &mut r.outcome {
                if let Some(s) = out.similarity.as_mut() {
                    s.across_agents = Some(value);
                }
            }
            Some(r)
        }
    };
    let mut s = similarity_spec(3, 3, 0.9);
    s.debate.mode = DebateMode::Adaptive;

    let mut short = Run::new(s.clone());
    short.apply(Input::Start);
    short.drain(across(0.95));
    let st = short.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    let a = st.adaptive.as_ref().unwrap();
    assert_eq!(a.path, AdaptivePath::Short, "{}", a.reason);
    assert!(a.reason.contains("0.950 ≥ threshold 0.9"), "{}", a.reason);
    assert!(a.verdict.is_none());
    let screen = a.similarity.as_ref().unwrap();
    assert_eq!(screen.similarity.across_agents, Some(0.95));
    assert!(screen.converged);
    let embeds: Vec<&Task> = short
        .tasks
        .iter()
        .filter(|t| t.kind == TaskKind::Embed)
        .collect();
    assert_eq!(embeds.len(), 1);
    assert!(embeds[0].id.ends_with("/0/embed/judge"), "{}", embeds[0].id);
    assert_eq!(embeds[0].input.candidates.len(), 3);
    assert!(embeds[0].input.previous.is_empty());
    assert!(embeds[0]
        .input
        .candidates
        .iter()
        .all(|c| c.content.contains("/1/propose/")));
    for kind in [TaskKind::Critique, TaskKind::Refine, TaskKind::Verdict] {
        assert_eq!(short.count(kind), 0, "{kind:?}");
    }
    assert_eq!(short.count(TaskKind::Synthesize), 1);
    // The screen's call counts in the spend.
    assert_eq!(st.spend.as_ref().unwrap().calls, 3 + 1 + 1);

    let mut full = Run::new(s);
    full.apply(Input::Start);
    full.drain(across(0.5));
    let st = full.machine.state();
    assert_eq!(st.status, DebateStatus::Completed);
    let a = st.adaptive.as_ref().unwrap();
    assert_eq!(a.path, AdaptivePath::Full, "{}", a.reason);
    assert!(a.reason.contains("0.500 < threshold 0.9"), "{}", a.reason);
    // The full debate: 3 rounds, embedded after rounds 1 and 2 as configured.
    assert_eq!(st.rounds.len(), 3);
    assert_eq!(full.count(TaskKind::Embed), 1 + 2);
    assert_eq!(full.count(TaskKind::Critique), 3 * 6);
}
