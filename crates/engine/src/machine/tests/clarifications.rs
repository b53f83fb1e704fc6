//! Unit tests of the clarification phase: ask → wait → answer → follow-up → round 1,
//! limits, NA, malformed replies, timeouts, checkpoints.

use chrono::Duration;
use parley_protocol::*;
use serde_json::json;

use super::{now, ok, spec, Run};
use crate::{AnswerError, Input, Machine};

fn clarify_spec(n: usize, extra: serde_json::Value) -> DebateSpec {
    let mut debate = json!({"interactiveClarifications": true});
    if let serde_json::Value::Object(m) = extra {
        for (k, v) in m {
            debate[k] = v;
        }
    }
    spec(n, 1, "fixed", debate)
}

/// A clarify task's reply asking `questions` (with an optional worker warning).
fn asks(task: &Task, questions: &[&str], warning: Option<&str>) -> TaskResult {
    let mut r = ok(task, "{}");
    if let TaskOutcome::Ok(out) = &mut r.outcome {
        out.questions = questions.iter().map(|q| q.to_string()).collect();
        out.warnings = warning.map(|w| vec![w.to_string()]).unwrap_or_default();
    }
    r
}

fn answer(id: &str, text: &str) -> Answer {
    Answer {
        id: id.into(),
        answer: text.into(),
    }
}

/// Answers the queued clarify tasks with `by_agent(agent id, iteration)`.
fn reply_clarify(r: &mut Run, by_agent: impl Fn(&str, u32) -> Vec<&'static str>) {
    let queued: Vec<Task> = r.queue.drain(..).collect();
    for t in queued {
        assert_eq!(t.kind, TaskKind::Clarify, "{}", t.id);
        let qs = by_agent(&t.agent.id, t.round);
        let res = asks(&t, &qs, None);
        r.apply(Input::Result(res));
    }
}

fn requested(r: &Run) -> Vec<(u32, Vec<AgentClarifications>)> {
    r.events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ClarificationsRequested {
                iteration,
                questions,
            } => Some((*iteration, questions.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn ask_wait_answer_follow_up_then_round_one_with_the_answers_in_every_prompt() {
    let mut r = Run::new(clarify_spec(2, json!({})));
    r.apply(Input::Start);
    // Iteration 1: one clarify task per agent, nothing else.
    let ids: Vec<&str> = r.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "deb-20260102-030405-abcdef/1/clarify/a0",
            "deb-20260102-030405-abcdef/1/clarify/a1"
        ]
    );
    assert!(r.tasks.iter().all(|t| t.input.max_questions == Some(5)));
    assert!(r.tasks.iter().all(|t| t.validate().is_ok()));
    reply_clarify(&mut r, |a, _| match a {
        "a0" => vec![
            "Which cache size?",
            "  which   CACHE size? ",
            "Read/write ratio?",
        ],
        _ => vec![],
    });
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::AwaitingClarifications);
    assert_eq!(s.clarification_iterations, 1);
    assert!(r.machine.in_flight().next().is_none(), "nothing in flight");
    assert!(
        r.machine.next_deadline().is_none(),
        "no deadline while waiting"
    );
    assert!(r.machine.is_settled());
    assert_eq!(s.engine.awaiting_since, Some(now()));
    // De-duplicated per agent; an agent with nothing to ask has no group.
    assert_eq!(s.clarifications.len(), 1);
    let g = &s.clarifications[0];
    assert_eq!((g.agent_id.as_str(), g.agent_name.as_str()), ("a0", "A0"));
    let items: Vec<(&str, &str)> = g
        .items
        .iter()
        .map(|i| (i.id.as_str(), i.question.as_str()))
        .collect();
    assert_eq!(
        items,
        [
            ("a0-q1", "Which cache size?"),
            ("a0-q2", "Read/write ratio?")
        ]
    );
    let req = requested(&r);
    assert_eq!(req.len(), 1);
    assert_eq!(req[0].0, 1);
    assert_eq!(req[0].1[0].items.len(), 2);
    let last = r.events.last().unwrap();
    assert_eq!(last.status, DebateStatus::AwaitingClarifications);
    assert_eq!(last.progress.phase, "clarification");

    // A partial answer: recorded, still waiting.
    r.apply(Input::Answers(vec![answer("a0-q1", "1 GiB")]));
    assert_eq!(
        r.machine.state().status,
        DebateStatus::AwaitingClarifications
    );
    assert!(r.queue.is_empty());
    // The rest, empty: "NA". Iteration 2 asks everyone again with the Q&A so far.
    r.apply(Input::Answers(vec![answer("a0-q2", "   ")]));
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Running);
    assert_eq!(s.clarification_iterations, 2);
    assert_eq!(s.clarifications[0].items[1].answer.as_deref(), Some("NA"));
    assert_eq!(r.queue.len(), 2);
    for t in &r.queue {
        assert_eq!(t.kind, TaskKind::Clarify);
        assert_eq!(t.round, 2);
        assert_eq!(t.input.clarifications[0].items.len(), 2);
        assert_eq!(
            t.input.clarifications[0].items[0].answer.as_deref(),
            Some("1 GiB")
        );
    }
    let answered: Vec<usize> = r
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::ClarificationsAnswered { remaining, .. } => Some(remaining),
            _ => None,
        })
        .collect();
    assert_eq!(answered, [1, 0]);

    // Iteration 2: a1 follows up, a0 repeats itself (dropped).
    reply_clarify(&mut r, |a, _| match a {
        "a0" => vec!["Which cache size?"],
        _ => vec!["Eviction policy?"],
    });
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::AwaitingClarifications);
    let req = requested(&r);
    assert_eq!(req.len(), 2);
    assert_eq!(req[1].0, 2);
    assert_eq!(req[1].1.len(), 1, "only the open question: {:?}", req[1].1);
    assert_eq!(req[1].1[0].items[0].id, "a1-q1");
    r.apply(Input::Answers(vec![answer("a1-q1", "LRU")]));
    // Iteration 3: nobody asks more: round 1 opens.
    reply_clarify(&mut r, |_, _| vec![]);
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Running);
    assert_eq!(s.clarification_iterations, 3);
    assert!(s.engine.clarifications_done);
    assert_eq!(s.rounds.len(), 1);
    r.drain(|t| Some(ok(t, "x")));
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed);
    // Every task after the phase carries the three answers; the judge's too.
    for t in r.tasks.iter().filter(|t| t.kind != TaskKind::Clarify) {
        let text = clarifications_text(&t.input.clarifications);
        for a in ["1 GiB", "NA", "LRU"] {
            assert!(text.contains(a), "{}: {text}", t.id);
        }
    }
    assert!(r.tasks.iter().any(|t| t.kind == TaskKind::Synthesize));
    assert_eq!(r.count(TaskKind::Clarify), 6);
    // The node order: clarification before round 1.
    let nodes = r.nodes();
    let pos = |n| nodes.iter().position(|x| *x == n).unwrap();
    assert!(pos((0, Node::Clarification)) < pos((1, Node::RoundManager)));
}

#[test]
fn question_groups_keep_the_agent_order_whoever_replies_first() {
    let mut r = Run::new(clarify_spec(3, json!({})));
    r.apply(Input::Start);
    let mut queued: Vec<Task> = r.queue.drain(..).collect();
    queued.reverse();
    for t in queued {
        r.apply(Input::Result(asks(&t, &["Why?"], None)));
    }
    let order: Vec<&str> = r
        .machine
        .state()
        .clarifications
        .iter()
        .map(|g| g.agent_id.as_str())
        .collect();
    assert_eq!(order, ["a0", "a1", "a2"]);
}

#[test]
fn the_iteration_limit_ends_the_phase_after_the_answers() {
    let mut r = Run::new(clarify_spec(
        2,
        json!({"clarificationsMaxIterations": 1, "clarificationsMaxPerAgent": 2}),
    ));
    r.apply(Input::Start);
    reply_clarify(&mut r, |_, _| vec!["q1?", "q2?", "q3?", "q4?"]);
    let s = r.machine.state();
    // Capped per agent, with a warning naming the setting.
    assert!(s.clarifications.iter().all(|g| g.items.len() == 2));
    assert!(
        s.engine
            .warnings
            .iter()
            .any(|w| w.contains("clarificationsMaxPerAgent")),
        "{:?}",
        s.engine.warnings
    );
    let all: Vec<Answer> = ["a0-q1", "a0-q2", "a1-q1", "a1-q2"]
        .iter()
        .map(|id| answer(id, "ok"))
        .collect();
    r.apply(Input::Answers(all));
    // No second iteration: round 1 at once.
    assert!(r.queue.iter().all(|t| t.kind == TaskKind::Propose));
    assert_eq!(r.queue.len(), 2);
    assert_eq!(r.machine.state().clarification_iterations, 1);
}

#[test]
fn no_questions_at_all_goes_straight_to_round_one() {
    let mut r = Run::new(clarify_spec(3, json!({})));
    r.apply(Input::Start);
    reply_clarify(&mut r, |_, _| vec![]);
    assert_eq!(r.machine.state().status, DebateStatus::Running);
    assert!(requested(&r).is_empty());
    assert!(r.machine.state().clarifications.is_empty());
    assert_eq!(r.count(TaskKind::Propose), 3);
}

#[test]
fn clarifications_off_dispatches_no_clarify_task() {
    let mut r = Run::new(spec(2, 1, "fixed", json!({})));
    r.apply(Input::Start);
    assert_eq!(r.count(TaskKind::Clarify), 0);
    assert_eq!(r.count(TaskKind::Propose), 2);
    // On, but with no question allowed: the same.
    let mut r = Run::new(clarify_spec(2, json!({"clarificationsMaxPerAgent": 0})));
    r.apply(Input::Start);
    assert_eq!(r.count(TaskKind::Clarify), 0);
}

#[test]
fn a_malformed_reply_means_the_agent_asks_nothing_with_a_warning() {
    let mut r = Run::new(clarify_spec(2, json!({})));
    r.apply(Input::Start);
    let queued: Vec<Task> = r.queue.drain(..).collect();
    for t in queued {
        let res = if t.agent.id == "a0" {
            asks(
                &t,
                &[],
                Some("the clarification reply is not the JSON asked for; this agent asks nothing"),
            )
        } else {
            asks(&t, &["Budget?"], None)
        };
        r.apply(Input::Result(res));
    }
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::AwaitingClarifications);
    assert_eq!(s.clarifications.len(), 1);
    assert_eq!(s.clarifications[0].agent_id, "a1");
    assert!(
        s.engine
            .warnings
            .iter()
            .any(|w| w.contains("/1/clarify/a0") && w.contains("not the JSON")),
        "{:?}",
        s.engine.warnings
    );
    assert!(s.error.is_none());
}

#[test]
fn bad_answers_are_refused_and_change_nothing() {
    let mut r = Run::new(clarify_spec(1, json!({})));
    // Not waiting yet.
    let e = r
        .machine
        .check_answers(&[answer("a0-q1", "x")])
        .unwrap_err();
    assert!(matches!(e, AnswerError::NotWaiting { .. }), "{e}");
    assert!(e.to_string().contains("pending"), "{e}");
    assert!(e.is_conflict());
    r.apply(Input::Start);
    reply_clarify(&mut r, |_, _| vec!["Scale?", "Budget?"]);
    let before = r.machine.state().clone();
    let e = r
        .machine
        .check_answers(&[answer("zz-q9", "x")])
        .unwrap_err();
    assert!(
        e.to_string().contains("zz-q9") && e.to_string().contains("a0-q1"),
        "{e}"
    );
    assert!(!e.is_conflict());
    let e = r
        .machine
        .check_answers(&[answer("a0-q1", "x"), answer("a0-q1", "y")])
        .unwrap_err();
    assert!(matches!(e, AnswerError::Duplicate(_)), "{e}");
    assert!(matches!(
        r.machine.check_answers(&[]).unwrap_err(),
        AnswerError::Empty
    ));
    let events = r.events.len();
    r.apply(Input::Answers(vec![answer("zz-q9", "x")]));
    assert_eq!(r.machine.state(), &before, "state unchanged");
    assert_eq!(r.events.len(), events, "no event");
    // Already answered.
    r.apply(Input::Answers(vec![answer("a0-q1", "10k users")]));
    let e = r
        .machine
        .check_answers(&[answer("a0-q1", "again"), answer("a0-q2", "x")])
        .unwrap_err();
    assert!(matches!(e, AnswerError::AlreadyAnswered(_)), "{e}");
    assert!(e.is_conflict());
    let before = r.machine.state().clone();
    r.apply(Input::Answers(vec![
        answer("a0-q1", "again"),
        answer("a0-q2", "x"),
    ]));
    assert_eq!(r.machine.state(), &before);
    assert_eq!(
        r.machine.state().clarifications[0].items[0]
            .answer
            .as_deref(),
        Some("10k users")
    );
}

#[test]
fn the_timeout_answers_na_and_the_debate_goes_on() {
    let mut r = Run::new(clarify_spec(1, json!({"clarificationsMaxIterations": 1})));
    r.apply(Input::Start);
    assert_eq!(
        r.machine
            .clarification_deadline(std::time::Duration::from_secs(60)),
        None,
        "no clarification deadline while asking"
    );
    reply_clarify(&mut r, |_, _| vec!["Scale?", "Budget?"]);
    assert_eq!(
        r.machine
            .clarification_deadline(std::time::Duration::from_secs(60)),
        Some(now() + Duration::seconds(60))
    );
    r.apply(Input::Answers(vec![answer("a0-q1", "big")]));
    r.apply(Input::ClarificationTimeout);
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Running);
    let answers: Vec<Option<&str>> = s.clarifications[0]
        .items
        .iter()
        .map(|i| i.answer.as_deref())
        .collect();
    assert_eq!(answers, [Some("big"), Some("NA")]);
    assert!(s.engine.warnings.iter().any(|w| w.contains("in time")));
    assert!(r.queue.iter().all(|t| t.kind == TaskKind::Propose));
    // A timeout when not waiting changes nothing.
    let before = r.machine.state().clone();
    r.apply(Input::ClarificationTimeout);
    assert_eq!(r.machine.state().clarifications, before.clarifications);
}

#[test]
fn a_waiting_debate_is_a_checkpoint_in_dialectics_shape_and_resumes_at_the_questions() {
    let mut r = Run::new(clarify_spec(2, json!({"clarificationsMaxIterations": 1})));
    r.apply(Input::Start);
    reply_clarify(&mut r, |a, _| {
        vec![if a == "a0" { "Scale?" } else { "Budget?" }]
    });
    let json = serde_json::to_value(r.machine.state()).unwrap();
    assert_eq!(json["status"], "awaiting_clarifications");
    assert_eq!(json["clarificationIterations"], 1);
    assert_eq!(json["clarifications"][0]["agentId"], "a0");
    assert_eq!(json["clarifications"][0]["agentName"], "A0");
    assert_eq!(json["clarifications"][0]["role"], "architect");
    assert_eq!(json["clarifications"][1]["items"][0]["id"], "a1-q1");
    assert_eq!(json["clarifications"][1]["items"][0]["question"], "Budget?");
    let state: DebateState = serde_json::from_value(json).unwrap();
    // A takeover: nothing is dispatched, the debate keeps waiting.
    let mut m = Machine::from_checkpoint(r.machine.spec().clone(), state);
    let fx = m.handle(Input::Resume, now());
    assert!(fx.iter().all(|e| !matches!(e, crate::Effect::Dispatch(_))));
    assert_eq!(m.state().status, DebateStatus::AwaitingClarifications);
    let fx = m.handle(
        Input::Answers(vec![answer("a0-q1", "huge"), answer("a1-q1", "")]),
        now(),
    );
    let proposals: Vec<&Task> = fx
        .iter()
        .filter_map(|e| match e {
            crate::Effect::Dispatch(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(proposals.len(), 2);
    assert!(proposals.iter().all(|t| t.kind == TaskKind::Propose));
    assert!(clarifications_text(&proposals[0].input.clarifications).contains("huge"));
}

#[test]
fn a_resume_while_asking_sends_only_the_missing_clarify_task_again_as_itself() {
    let mut r = Run::new(clarify_spec(2, json!({})));
    r.apply(Input::Start);
    let first = r.queue.pop_front().unwrap();
    r.apply(Input::Result(asks(&first, &["Scale?"], None)));
    let state = r.machine.state().clone();
    let mut m = Machine::from_checkpoint(r.machine.spec().clone(), state);
    let fx = m.handle(Input::Resume, now());
    let again: Vec<&Task> = fx
        .iter()
        .filter_map(|e| match e {
            crate::Effect::Dispatch(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, "deb-20260102-030405-abcdef/1/clarify/a1");
    assert_eq!(again[0].attempt, 1);
    // The first agent's reply again (a duplicate delivery) is finished, not applied twice.
    assert_eq!(m.expects(&first.id, 1, true), crate::Expectation::Finished);
}

#[test]
fn a_failing_clarify_task_is_retried_then_fails_the_debate_at_clarification() {
    let mut r = Run::new(clarify_spec(
        1,
        json!({"retry": {"default": {"attempts": 2, "initialBackoffMs": 100}}}),
    ));
    r.apply(Input::Start);
    let t = r.queue.pop_front().unwrap();
    r.apply(Input::Result(super::fail(&t, ErrorKind::Server)));
    assert_eq!(r.retries.len(), 1);
    r.apply(Input::RetryDue(t.id.clone()));
    let t2 = r.queue.pop_front().unwrap();
    assert_eq!(t2.attempt, 2);
    r.apply(Input::Result(super::fail(&t2, ErrorKind::Server)));
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Failed);
    assert_eq!(s.error.as_ref().unwrap().node, "clarification");
    // Retry resumes at the questions.
    r.apply(Input::Retry);
    let t3 = r.queue.pop_front().unwrap();
    assert_eq!((t3.kind, t3.attempt), (TaskKind::Clarify, 3));
    r.apply(Input::Result(asks(&t3, &["Scale?"], None)));
    assert_eq!(
        r.machine.state().status,
        DebateStatus::AwaitingClarifications
    );
}

#[test]
fn cancel_while_waiting_cancels() {
    let mut r = Run::new(clarify_spec(1, json!({})));
    r.apply(Input::Start);
    reply_clarify(&mut r, |_, _| vec!["Scale?"]);
    r.apply(Input::Cancel);
    assert_eq!(r.machine.state().status, DebateStatus::Cancelled);
    let e = r
        .machine
        .check_answers(&[answer("a0-q1", "x")])
        .unwrap_err();
    assert!(e.to_string().contains("cancelled"), "{e}");
}

#[test]
fn a_requested_event_stays_small_whatever_the_questions() {
    let mut r = Run::new(clarify_spec(12, json!({"clarificationsMaxPerAgent": 20})));
    r.apply(Input::Start);
    let long: Vec<String> = (0..20)
        .map(|i| format!("{i} {}", "é".repeat(600)))
        .collect();
    let queued: Vec<Task> = r.queue.drain(..).collect();
    for t in queued {
        let qs: Vec<&str> = long.iter().map(String::as_str).collect();
        r.apply(Input::Result(asks(&t, &qs, None)));
    }
    let ev = r.events.last().unwrap();
    assert!(matches!(ev.kind, EventKind::ClarificationsRequested { .. }));
    let bytes = serde_json::to_vec(ev).unwrap().len();
    assert!(bytes < 64 * 1024, "{bytes} bytes");
    // The state keeps each question up to the limit.
    let q = &r.machine.state().clarifications[0].items[0].question;
    assert_eq!(
        q.chars().count(),
        limits::MAX_QUESTION_CHARS + 1,
        "cut with …"
    );
}
