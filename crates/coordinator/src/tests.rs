//! Unit tests of the state machine: transitions, termination rules, carry-over,
//! summarization thresholds, dataflow scheduling, failures and retry.

use std::collections::{BTreeSet, VecDeque};

use chrono::{TimeZone, Utc};
use parley_protocol::*;
use serde_json::json;

use crate::{Effect, Input, Machine};

pub(crate) fn now() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()
}

pub(crate) fn spec(
    n: usize,
    rounds: u32,
    termination: &str,
    extra: serde_json::Value,
) -> DebateSpec {
    let roles = ["architect", "performance", "security", "testing", "kiss"];
    let agents: Vec<_> = (0..n)
        .map(|i| json!({"id": format!("a{i}"), "name": format!("A{i}"), "role": roles[i % 5], "model": "m", "temperature": 0.3}))
        .collect();
    let mut debate = json!({"rounds": rounds, "terminationCondition": {"type": termination}});
    if let serde_json::Value::Object(m) = extra {
        for (k, v) in m {
            debate[k] = v;
        }
    }
    serde_json::from_value(json!({
        "problem": "Design a cache",
        "agents": agents,
        "judge": {"id": "judge", "name": "J", "role": "generalist", "model": "jm", "temperature": 0.1},
        "debate": debate,
    }))
    .unwrap()
}

pub(crate) fn ok(task: &Task, content: &str) -> TaskResult {
    let mut out = TaskOutput {
        content: content.to_string(),
        metadata: ContributionMetadata {
            tokens_used: 10,
            latency_ms: 5,
            model: task.agent.model.clone(),
            ..Default::default()
        },
        ..Default::default()
    };
    match task.kind {
        TaskKind::Synthesize => {
            out.solution = Some(Solution {
                confidence: 77.0,
                ..Solution::text_only("final".into(), task.agent.id.clone())
            })
        }
        TaskKind::Evaluate => out.confidence = Some(50.0),
        _ => {}
    }
    result(task, TaskOutcome::Ok(out))
}

pub(crate) fn result(task: &Task, outcome: TaskOutcome) -> TaskResult {
    TaskResult {
        schema_version: SCHEMA_VERSION,
        task_id: task.id.clone(),
        debate_id: task.debate_id.clone(),
        attempt: task.attempt,
        worker: "test".into(),
        outcome,
    }
}

pub(crate) fn fail(task: &Task, kind: ErrorKind) -> TaskResult {
    result(
        task,
        TaskOutcome::Error(TaskError {
            kind,
            message: format!("boom {}", task.id),
            provider: Some("fake".into()),
            retry_after_ms: None,
        }),
    )
}

/// Runs a machine to rest, answering each dispatched task (FIFO) with `answer`.
/// Returns every dispatched task and every event.
pub(crate) struct Run {
    pub(crate) machine: Machine,
    pub(crate) tasks: Vec<Task>,
    pub(crate) events: Vec<DebateEvent>,
    pub(crate) retries: Vec<(String, u64)>,
    pub(crate) queue: VecDeque<Task>,
}

impl Run {
    pub(crate) fn new(spec: DebateSpec) -> Self {
        Self {
            machine: Machine::new("deb-20260102-030405-abcdef".into(), spec, now()),
            tasks: vec![],
            events: vec![],
            retries: vec![],
            queue: VecDeque::new(),
        }
    }
    pub(crate) fn apply(&mut self, input: Input) {
        for fx in self.machine.handle(input, now()) {
            match fx {
                Effect::Dispatch(t) => {
                    self.tasks.push(t.clone());
                    self.queue.push_back(t);
                }
                Effect::Emit(e) => self.events.push(e),
                Effect::ScheduleRetry { task_id, delay_ms } => {
                    self.retries.push((task_id, delay_ms))
                }
            }
        }
    }
    pub(crate) fn drain(&mut self, mut answer: impl FnMut(&Task) -> Option<TaskResult>) {
        while let Some(t) = self.queue.pop_front() {
            if let Some(r) = answer(&t) {
                self.apply(Input::Result(r));
            }
        }
    }
    /// Answers every task (a server error `boom` where `broken` holds, else `x`) and
    /// applies each retry at once, until no retry is due.
    pub(crate) fn drain_with_retries(&mut self, broken: impl Fn(&Task) -> bool) {
        loop {
            self.drain(|t| {
                Some(if broken(t) {
                    fail(t, ErrorKind::Server)
                } else {
                    ok(t, "x")
                })
            });
            let due: Vec<_> = self.retries.drain(..).collect();
            if due.is_empty() {
                break;
            }
            for (id, _) in due {
                self.apply(Input::RetryDue(id));
            }
        }
    }
    pub(crate) fn run_ok(spec: DebateSpec) -> Self {
        let mut r = Self::new(spec);
        r.apply(Input::Start);
        r.drain(|t| Some(ok(t, &format!("text of {}", t.id))));
        r
    }
    pub(crate) fn count(&self, kind: TaskKind) -> usize {
        self.tasks.iter().filter(|t| t.kind == kind).count()
    }
    pub(crate) fn nodes(&self) -> Vec<(u32, Node)> {
        self.events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::NodeEntered { round, node } => Some((*round, *node)),
                _ => None,
            })
            .collect()
    }
}

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

/// A checkpoint of a newer build is nobody's fault here: an adoption that meets one is not
/// counted towards failing the debate.
#[test]
fn a_newer_checkpoint_format_is_not_the_debates_fault() {
    let newer = parley_cluster::redis_store::RedisStoreError::NewerFormat {
        id: "deb-1".into(),
        format: 9,
        known: 1,
    };
    assert_eq!(crate::actor::fault_reason(&newer), None);
    let corrupt = parley_cluster::redis_store::RedisStoreError::Inconsistent("bad");
    assert!(crate::actor::fault_reason(&corrupt).is_some());
}

/// A publish that the shared streams cannot take now (no leader during an election: "no
/// stream found for given subject"; no ack in time; the connection gone) is an outage that
/// every debate waits out, never counted towards failing one; a message refused for what
/// it is (too large) may be the debate's fault.
#[test]
fn a_stream_without_a_leader_is_not_the_debates_fault() {
    use async_nats::jetstream::context::{PublishError, PublishErrorKind as K};
    for kind in [
        K::StreamNotFound,
        K::TimedOut,
        K::BrokenPipe,
        K::MaxAckPending,
    ] {
        let e: Box<dyn std::error::Error + Send + Sync> = Box::new(PublishError::new(kind));
        assert_eq!(crate::actor::fault_reason(e.as_ref()), None, "{kind:?}");
    }
    let too_large: Box<dyn std::error::Error + Send + Sync> =
        Box::new(PublishError::new(K::MaxPayloadExceeded));
    assert!(crate::actor::fault_reason(too_large.as_ref()).is_some());
}
