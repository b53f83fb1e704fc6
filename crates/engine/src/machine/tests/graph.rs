//! The task graph's table: one entry per task kind, and task ids that parse back to their
//! tasks over whole debates.

use parley_protocol::*;
use serde_json::json;

use super::{ok, spec, Run};
use crate::machine::graph::{Executor, Phase, Scope, NODES};
use crate::{Input, Machine};

/// Every task kind. `ordinal` stops compiling when a kind is added: add it here too.
fn all_kinds() -> Vec<TaskKind> {
    use TaskKind::*;
    let ordinal = |k: TaskKind| match k {
        Clarify => 0,
        Propose => 1,
        Critique => 2,
        Refine => 3,
        Summarize => 4,
        Evaluate => 5,
        Verdict => 6,
        Vote => 7,
        Embed => 8,
        JudgeSummarize => 9,
        Synthesize => 10,
    };
    let all = vec![
        Clarify,
        Propose,
        Critique,
        Refine,
        Summarize,
        Evaluate,
        Verdict,
        Vote,
        Embed,
        JudgeSummarize,
        Synthesize,
    ];
    let ordinals: Vec<usize> = all.iter().map(|&k| ordinal(k)).collect();
    assert_eq!(ordinals, (0..all.len()).collect::<Vec<_>>());
    all
}

#[test]
fn the_table_has_one_entry_per_task_kind_each_with_a_retry_policy_and_its_worker() {
    let kinds = all_kinds();
    assert_eq!(NODES.len(), kinds.len());
    for k in kinds {
        let entries: Vec<_> = NODES.iter().filter(|n| n.kind == k).collect();
        assert_eq!(entries.len(), 1, "{k:?}");
        let n = entries[0];
        let node = k.node().as_str();
        assert!(
            RETRY_NODES.contains(&node),
            "{k:?}: node {node} has no retry policy"
        );
        let worker = match n.executor {
            Executor::Agent => WorkerKind::Agent,
            Executor::Judge | Executor::Embeddings => WorkerKind::Judge,
        };
        assert_eq!(worker, k.worker(), "{k:?}");
        assert_eq!(
            n.scope == Scope::Judge,
            worker == WorkerKind::Judge,
            "{k:?}"
        );
    }
    // Phases in order: the plan's order is the table's.
    let phases: Vec<Phase> = NODES.iter().map(|n| n.phase).collect();
    let rank = |p: &Phase| match p {
        Phase::Clarification => 0,
        Phase::Round => 1,
        Phase::Closing => 2,
    };
    assert!(phases.windows(2).all(|w| rank(&w[0]) <= rank(&w[1])));
}

/// `ok` with a verdict (done from round `agree`; 0: the screen agrees), a vote for the
/// next agent, similarities, and questions in the first clarification iteration.
fn answer(t: &Task, agree: u32) -> TaskResult {
    let mut r = ok(t, &format!("text of {}", t.id));
    if let TaskOutcome::Ok(out) = &mut r.outcome {
        match t.kind {
            TaskKind::Verdict => {
                out.verdict = Some(Verdict {
                    verdict: if t.round >= agree {
                        VerdictDecision::Done
                    } else {
                        VerdictDecision::Continue
                    },
                    confidence: 90.0,
                    reasoning: "r".into(),
                    open_issues: vec!["cost".into()],
                    valid: true,
                })
            }
            TaskKind::Vote => {
                let me: usize = t.agent.id[1..].parse().unwrap();
                out.vote = Some(Ballot {
                    vote: format!("a{}", (me + 1) % 3),
                    reason: "best".into(),
                });
            }
            TaskKind::Embed => {
                out.similarity = Some(Similarity {
                    per_agent: t
                        .input
                        .previous
                        .iter()
                        .map(|p| (p.agent_id.clone(), 0.95))
                        .collect(),
                    across_agents: Some(0.5),
                })
            }
            TaskKind::Clarify if t.round == 1 => out.questions = vec!["Scale?".into()],
            _ => {}
        }
    }
    r
}

/// Every task the plan wants now maps to an id that parses back to it.
fn check_round_trip(m: &Machine) -> usize {
    let mut planned = m.plan();
    m.plan_at(
        Phase::Clarification,
        m.state.clarification_iterations,
        &mut planned,
    );
    for p in &planned {
        let id = m.task_id_of(p);
        assert_eq!(m.parse_task_id(&id).as_ref(), Some(p), "{id}");
    }
    planned.len()
}

/// Runs a debate to its end, checking the round trip after every input; returns the run
/// and how many planned tasks were checked.
fn run_checked(spec: DebateSpec, agree: u32) -> (Run, usize) {
    let mut r = Run::new(spec);
    r.apply(Input::Start);
    let mut checked = check_round_trip(&r.machine);
    loop {
        if r.machine.state().status == DebateStatus::AwaitingClarifications {
            let answers = pending_clarifications(&r.machine.state().clarifications)
                .iter()
                .flat_map(|g| &g.items)
                .map(|i| Answer {
                    id: i.id.clone(),
                    answer: "large".into(),
                })
                .collect();
            r.apply(Input::Answers(answers));
        } else if let Some(t) = r.queue.pop_front() {
            r.apply(Input::Result(answer(&t, agree)));
        } else {
            break;
        }
        checked += check_round_trip(&r.machine);
    }
    // Every dispatched task's id parses back to the task.
    for t in &r.tasks {
        let p = r.machine.parse_task_id(&t.id).expect(&t.id);
        assert_eq!((p.round, p.kind), (t.round, t.kind), "{}", t.id);
        assert_eq!(r.machine.task_id_of(&p), t.id);
    }
    (r, checked)
}

#[test]
fn every_planned_task_id_parses_back_to_the_task_over_whole_debates() {
    let emb = json!({"provider": "openai-compatible", "model": "e"});
    let sum = json!({"enabled": true, "threshold": 100, "maxLength": 50});
    let cases = [
        // Adaptive, full path, verdicts until round 2, voting, summaries, a ring.
        (
            spec(
                3,
                3,
                "verdict",
                json!({"mode": "adaptive", "synthesisMethod": "voting",
                       "summarization": sum, "critique": {"topology": "ring"}}),
            ),
            2,
        ),
        // Adaptive short path.
        (spec(3, 3, "verdict", json!({"mode": "adaptive"})), 0),
        // Similarity, random pairs, clarifications, adaptive with fixed rounds.
        (
            spec(
                4,
                3,
                "similarity",
                json!({"terminationCondition": {"type": "similarity", "threshold": 0.9},
                       "embeddings": emb, "mode": "adaptive",
                       "critique": {"topology": "random", "k": 1},
                       "interactiveClarifications": true}),
            ),
            99,
        ),
        (
            spec(3, 2, "convergence", json!({"synthesisMethod": "voting"})),
            99,
        ),
    ];
    let mut kinds = std::collections::BTreeSet::new();
    for (spec, agree) in cases {
        let (r, checked) = run_checked(spec, agree);
        assert_eq!(r.machine.state().status, DebateStatus::Completed);
        assert!(
            checked > r.tasks.len() / 2,
            "{checked} planned tasks checked"
        );
        kinds.extend(r.tasks.iter().map(|t| t.kind));
    }
    // Every node kind ran somewhere.
    assert_eq!(kinds, all_kinds().into_iter().collect());
}
