//! Human participants: their tasks open instead of going out, wait durably (a checkpoint
//! resumes them), are answered by contributions (recorded free, with their latency),
//! expire at their deadline as failed agent tasks, and refuse hostile contributions.

use chrono::Duration;
use parley_protocol::*;
use serde_json::json;

use super::{now, ok, Run};
use crate::{Contribute, ContributeError, Expectation, Input, Machine};

/// Three agents, `a0` human; `extra` goes into `debate`.
fn human_spec(rounds: u32, extra: serde_json::Value) -> DebateSpec {
    let mut s = super::spec(3, rounds, "fixed", extra);
    s.agents[0].provider = Some(HUMAN_PROVIDER.into());
    s.agents[0].model = String::new();
    s.validate()
        .expect("a human agent without a model is valid");
    s
}

fn contribute(text: &str) -> Contribute {
    Contribute {
        agent_id: Some("a0".into()),
        task_id: None,
        text: text.into(),
        by: Some("alice".into()),
    }
}

/// Answers LLM tasks and the human's open tasks (after `wait` of the person's time each)
/// until nothing moves; returns how many contributions were made.
fn run_to_rest(r: &mut Run, wait: Duration) -> usize {
    let mut answered = 0;
    loop {
        r.drain(|t| Some(ok(t, &format!("text of {}", t.id))));
        let Some(task) = r.machine.open_human_tasks().first().cloned() else {
            return answered;
        };
        let text = match task.kind {
            TaskKind::Vote => "a1: the clearest".to_string(),
            _ => format!("human text for {}", task.task_id),
        };
        let fx = r
            .machine
            .handle(Input::Contribute(contribute(&text)), now() + wait);
        for f in fx {
            match f {
                crate::Effect::Dispatch(t) => {
                    r.tasks.push(t.clone());
                    r.queue.push_back(t);
                }
                crate::Effect::Emit(e) => r.events.push(e),
                crate::Effect::ScheduleRetry { .. } => {}
            }
        }
        answered += 1;
    }
}

#[test]
fn a_human_takes_every_turn_of_its_agent_and_costs_nothing() {
    let mut r = Run::new(human_spec(2, json!({"synthesisMethod": "voting"})));
    r.apply(Input::Start);
    // Only the two LLM agents' proposals go out; the human's opens and waits.
    assert_eq!(r.queue.len(), 2);
    assert!(r.queue.iter().all(|t| t.agent.id != "a0"));
    let open = r.machine.open_human_tasks().to_vec();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].kind, TaskKind::Propose);
    assert_eq!(open[0].deadline, now() + Duration::seconds(1800));
    assert!(r.events.iter().any(
        |e| matches!(&e.kind, EventKind::HumanTaskOpened { agent_id, .. } if agent_id == "a0")
    ));
    // The context a person reads is the agent's task.
    let ctx = r.machine.human_task_context(&open[0].task_id).unwrap();
    assert_eq!(ctx.kind, TaskKind::Propose);
    // The others go on meanwhile: their critiques of each other go out without the human.
    r.drain(|t| Some(ok(t, "llm")));
    assert_eq!(r.count(TaskKind::Critique), 2);
    let n = run_to_rest(&mut r, Duration::seconds(42));
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed, "{:?}", s.error);
    // Round 1: propose, 2 critiques, refine; round 2: 2 critiques, refine; the vote.
    assert_eq!(n, 1 + 2 + 1 + 2 + 1 + 1);
    assert!(
        r.tasks.iter().all(|t| t.agent.id != "a0"),
        "no call for the human"
    );
    for rd in &s.rounds {
        for c in rd.contributions.iter().filter(|c| c.agent_id == "a0") {
            assert!(c.metadata.carried_over || c.metadata.human, "{c:?}");
            assert_eq!(c.metadata.tokens_used, 0);
            if !c.metadata.carried_over {
                assert_eq!(c.metadata.cost_usd, Some(0.0));
                assert_eq!(c.metadata.model, HUMAN_MODEL);
            }
        }
    }
    // The proposal opened at the start and was answered 42 s later.
    let p = s
        .round(1)
        .unwrap()
        .find(ContributionType::Proposal, "a0", None)
        .unwrap();
    assert_eq!(p.metadata.latency_ms, 42_000);
    assert_eq!(s.human.answered[0].latency_ms, 42_000);
    // A person's contributions are no calls.
    let spend = s.spend.as_ref().unwrap();
    assert_eq!(spend.calls, r.tasks.len() as u64, "{spend:?}");
    let vote = s.voting.as_ref().unwrap();
    let mine = vote.votes.iter().find(|v| v.agent_id == "a0").unwrap();
    assert!(mine.valid && mine.vote == "a1", "{mine:?}");
    assert!(mine.metadata.human);
    assert_eq!(s.human.answered.len(), n);
    assert!(s.human.open.is_empty());
    assert_eq!(s.human.answered[0].by.as_deref(), Some("alice"));
    let contributed = r
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::HumanContributed { .. }))
        .count();
    assert_eq!(contributed, n);
}

#[test]
fn an_open_human_task_survives_a_checkpoint_and_is_answered_after_it() {
    let mut r = Run::new(human_spec(1, json!({})));
    r.apply(Input::Start);
    r.drain(|t| Some(ok(t, "llm")));
    // Its proposal, and its critiques of the two proposals that exist.
    let open = r.machine.open_human_tasks().to_vec();
    assert_eq!(open.len(), 3);
    assert_eq!(open[0].kind, TaskKind::Propose);
    // A coordinator dies; another rebuilds the machine from the checkpoint.
    let json = serde_json::to_string(r.machine.state()).unwrap();
    let state: DebateState = serde_json::from_str(&json).unwrap();
    let mut m = Machine::from_checkpoint(r.machine.spec().clone(), state);
    let later = now() + Duration::seconds(600);
    let fx = m.handle(Input::Resume, later);
    assert!(
        fx.iter().all(|f| match f {
            crate::Effect::Dispatch(t) => t.agent.id != "a0",
            crate::Effect::Emit(e) => !matches!(e.kind, EventKind::HumanTaskOpened { .. }),
            _ => true,
        }),
        "the human task is neither sent nor opened again"
    );
    assert_eq!(m.open_human_tasks(), &open[..], "same task, same deadline");
    assert_eq!(m.next_deadline(), Some(open[0].deadline));
    // The answer given afterwards is used.
    let task = m
        .check_contribution(&contribute("after the crash"))
        .unwrap();
    assert_eq!(task.task_id, open[0].task_id);
    m.handle(Input::Contribute(contribute("after the crash")), later);
    let rd = m.state().round(1).unwrap();
    let p = rd.find(ContributionType::Proposal, "a0", None).unwrap();
    assert_eq!(p.content, "after the crash");
    assert_eq!(p.metadata.latency_ms, 600_000);
}

#[test]
fn hostile_or_misdirected_contributions_are_refused_and_change_nothing() {
    let mut r = Run::new(human_spec(1, json!({"synthesisMethod": "voting"})));
    r.apply(Input::Start);
    let before = serde_json::to_value(r.machine.state()).unwrap();
    let cases: Vec<(Contribute, &str)> = vec![
        (
            contribute(&"x".repeat(limits::MAX_HUMAN_CONTRIBUTION_CHARS + 1)),
            "the limit is",
        ),
        (contribute("evil\u{1b}[2J"), "U+001B"),
        (contribute("nul\0"), "control character"),
        (contribute("   "), "empty"),
        (
            Contribute {
                agent_id: Some("a1".into()),
                ..contribute("I am not human")
            },
            "not a human participant",
        ),
        (
            Contribute {
                task_id: Some("deb-20990101-000000-zzzzzz/1/propose/a0".into()),
                ..contribute("another debate's task")
            },
            "does not wait for an answer",
        ),
        (
            Contribute {
                by: Some("bad\u{7}".into()),
                ..contribute("fine")
            },
            "by:",
        ),
    ];
    for (c, want) in cases {
        let e = r.machine.check_contribution(&c).unwrap_err();
        assert!(e.to_string().contains(want), "{e} (wanted {want:?})");
        let fx = r.machine.handle(Input::Contribute(c), now());
        assert!(fx.is_empty());
        assert_eq!(serde_json::to_value(r.machine.state()).unwrap(), before);
    }
    // Answered once: the second time there is no open task.
    r.apply(Input::Contribute(contribute("mine")));
    assert_eq!(
        r.machine.check_contribution(&contribute("again")),
        Err(ContributeError::NoOpenTask("a0".into()))
    );
    // A worker's result for a human task is never applied.
    r.drain(|t| Some(ok(t, "llm")));
    let open = r.machine.open_human_tasks()[0].clone();
    assert_eq!(
        r.machine.expects(&open.task_id, 1, true),
        Expectation::NotDispatched
    );
    let mut forged = ok(&r.tasks[0], "forged");
    forged.task_id = open.task_id.clone();
    let snapshot = serde_json::to_value(r.machine.state()).unwrap();
    r.apply(Input::Result(forged));
    assert_eq!(serde_json::to_value(r.machine.state()).unwrap(), snapshot);
}

#[test]
fn a_vote_must_name_another_agent() {
    let mut r = Run::new(human_spec(1, json!({"synthesisMethod": "voting"})));
    r.apply(Input::Start);
    let _ = run_until_vote(&mut r);
    let e = r
        .machine
        .check_contribution(&contribute("a0 me"))
        .unwrap_err();
    assert!(matches!(e, ContributeError::BadVote(_)), "{e}");
    let e = r
        .machine
        .check_contribution(&contribute("nobody"))
        .unwrap_err();
    assert!(e.to_string().contains("a1, a2"), "{e}");
    assert!(r
        .machine
        .check_contribution(&contribute("a2, simplest"))
        .is_ok());
}

/// Answers everything until the human's vote is the open task.
fn run_until_vote(r: &mut Run) -> HumanTask {
    loop {
        r.drain(|t| Some(ok(t, "llm")));
        let t = r.machine.open_human_tasks()[0].clone();
        if t.kind == TaskKind::Vote {
            return t;
        }
        r.apply(Input::Contribute(contribute("text")));
    }
}

#[test]
fn past_its_deadline_a_human_task_is_a_failed_agent_task() {
    // A proposal: the debate fails at its node; retry opens it again with a new deadline.
    let mut r = Run::new(human_spec(1, json!({"humanDeadlineSecs": 5})));
    r.apply(Input::Start);
    r.drain(|t| Some(ok(t, "llm")));
    let open = r.machine.open_human_tasks()[0].clone();
    assert_eq!(open.deadline, now() + Duration::seconds(5));
    assert!(r
        .machine
        .handle(Input::Tick, now() + Duration::seconds(4))
        .is_empty());
    let fx = r.machine.handle(Input::Tick, now() + Duration::seconds(5));
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Failed);
    let err = s.error.as_ref().unwrap();
    assert_eq!(err.kind, Some(ErrorKind::NoAnswer));
    assert_eq!(err.node, "proposal");
    assert!(err.message.contains("did not answer"), "{}", err.message);
    assert!(fx.iter().any(|f| matches!(f, crate::Effect::Emit(e)
        if matches!(e.kind, EventKind::HumanTaskExpired { .. }))));
    // The proposal expired; its critiques, open too, were withdrawn with the debate.
    assert_eq!(s.human.expired.len(), 3);
    assert_eq!(s.human.expired[0].kind, TaskKind::Propose);
    assert!(s.human.expired[1].reason.contains("withdrawn"));
    assert!(s.human.open.is_empty());
    let later = now() + Duration::seconds(100);
    r.machine.handle(Input::Retry, later);
    let again = r.machine.open_human_tasks()[0].clone();
    assert_eq!(again.task_id, open.task_id);
    assert_eq!(again.deadline, later + Duration::seconds(5));

    // A critique: dropped with a warning; its target refines without it.
    let mut r = Run::new(human_spec(1, json!({"humanDeadlineSecs": 5})));
    r.apply(Input::Start);
    r.drain(|t| Some(ok(t, "llm")));
    r.apply(Input::Contribute(contribute("my proposal")));
    r.drain(|t| Some(ok(t, "llm")));
    // Its refinement (the agents' critiques of it are in) is answered; its critiques not.
    let refine = r
        .machine
        .open_human_tasks()
        .iter()
        .find(|t| t.kind == TaskKind::Refine)
        .unwrap()
        .clone();
    r.apply(Input::Contribute(Contribute {
        task_id: Some(refine.task_id),
        ..contribute("my refinement")
    }));
    let critiques: Vec<_> = r.machine.open_human_tasks().to_vec();
    assert_eq!(critiques.len(), 2);
    assert!(critiques.iter().all(|t| t.kind == TaskKind::Critique));
    r.machine.handle(Input::Tick, now() + Duration::seconds(5));
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Running);
    assert_eq!(s.round(1).unwrap().dropped.len(), critiques.len());
    assert!(s
        .engine
        .warnings
        .iter()
        .any(|w| w.contains("dropped a0's critique")));

    // A vote: recorded as not given, not counted; the debate still ends.
    let mut r = Run::new(human_spec(
        1,
        json!({"humanDeadlineSecs": 5, "synthesisMethod": "voting"}),
    ));
    r.apply(Input::Start);
    let vote = run_until_vote(&mut r);
    let fx = r.machine.handle(Input::Tick, vote.deadline);
    for f in fx {
        if let crate::Effect::Dispatch(t) = f {
            r.queue.push_back(t);
        }
    }
    r.drain(|t| Some(ok(t, "llm")));
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed);
    let v = s.voting.as_ref().unwrap();
    let mine = v.votes.iter().find(|v| v.agent_id == "a0").unwrap();
    assert!(!mine.valid);
    assert_eq!(
        mine.invalid_reason.as_deref(),
        Some("no vote given within the deadline")
    );
}

#[test]
fn a_human_reserves_nothing_from_a_budget_and_stop_withdraws_its_task() {
    let mut r = Run::new(human_spec(1, json!({"budget": {"tokens": 200000}})));
    r.apply(Input::Start);
    let open = r.machine.open_human_tasks()[0].clone();
    let b = r.machine.state().budget.as_ref().unwrap();
    assert!(!b.reservations.contains_key(&open.task_id));
    assert_eq!(b.reservations.len(), 2, "the two LLM proposals only");
    r.drain(|t| Some(ok(t, "llm")));
    let spent = r.machine.state().budget.as_ref().unwrap().spent;
    r.apply(Input::Contribute(contribute("free")));
    assert_eq!(r.machine.state().budget.as_ref().unwrap().spent, spent);
    // Stop: the open human tasks are withdrawn and the synthesis runs.
    r.drain(|t| Some(ok(t, "llm")));
    assert!(!r.machine.open_human_tasks().is_empty());
    r.apply(Input::Steer(crate::Steer {
        command: SteerCommand::Stop,
        by: None,
    }));
    assert!(r.machine.open_human_tasks().is_empty());
    r.drain(|t| Some(ok(t, "llm")));
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
}

#[test]
fn the_judge_cannot_be_human_and_the_deadline_is_bounded() {
    let mut s = human_spec(1, json!({}));
    s.judge.provider = Some(HUMAN_PROVIDER.into());
    let e = s.validate().unwrap_err().to_string();
    assert!(e.contains("the judge cannot be human"), "{e}");
    let mut s = human_spec(1, json!({}));
    s.debate.human_deadline_secs = Some(0);
    let e = s.validate().unwrap_err().to_string();
    assert!(e.contains("debate.humanDeadlineSecs"), "{e}");
    // Another agent without a model is still refused.
    let mut s = human_spec(1, json!({}));
    s.agents[1].model = String::new();
    let e = s.validate().unwrap_err().to_string();
    assert!(e.contains("agents[1].model"), "{e}");
}

#[test]
fn a_paused_debate_does_not_time_its_people_and_resume_moves_their_deadlines_on() {
    let mut r = Run::new(human_spec(1, json!({"humanDeadlineSecs": 5})));
    r.apply(Input::Start);
    r.drain(|t| Some(ok(t, "llm")));
    let open = r.machine.open_human_tasks()[0].clone();
    assert_eq!(open.deadline, now() + Duration::seconds(5));
    let pause = |command| {
        Input::Steer(crate::Steer {
            command,
            by: Some("alice".into()),
        })
    };
    // Paused at +2 s: no deadline to wait for, and a tick long past it expires nothing.
    r.machine
        .handle(pause(SteerCommand::Pause), now() + Duration::seconds(2));
    assert_eq!(r.machine.human_deadline(), None);
    let fx = r.machine.handle(Input::Tick, now() + Duration::seconds(60));
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(r.machine.state().status, DebateStatus::Running);
    assert!(r.machine.state().human.expired.is_empty());
    // Resumed at +62 s, after 60 s paused: 3 s of the 5 are left.
    r.machine
        .handle(pause(SteerCommand::Resume), now() + Duration::seconds(62));
    let moved = r.machine.open_human_tasks()[0].clone();
    assert_eq!(moved.task_id, open.task_id);
    assert_eq!(moved.deadline, now() + Duration::seconds(65));
    assert_eq!(r.machine.human_deadline(), Some(moved.deadline));
    assert!(r
        .machine
        .handle(Input::Tick, now() + Duration::seconds(64))
        .is_empty());
    r.machine.handle(Input::Tick, now() + Duration::seconds(65));
    assert_eq!(r.machine.state().status, DebateStatus::Failed);
}
