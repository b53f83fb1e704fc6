//! Unit tests of task deadlines, the clock input, lost attempts, `retry` of a running
//! debate, `abort`, and the size of events: the machine alone, time passed in by hand.

use chrono::{DateTime, Duration, TimeZone, Utc};
use parley_protocol::*;
use serde_json::json;

use crate::{Effect, Input, Machine};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 4, 5, 6, 7).unwrap()
}

fn secs(n: i64) -> Duration {
    Duration::seconds(n)
}

/// 2 agents, 1 fixed round, `timeoutMs` 5000, quick backoff, `attempts` as given.
fn spec(attempts: u32) -> DebateSpec {
    serde_json::from_value(json!({
        "problem": "Design a cache",
        "agents": [
            {"id": "a0", "name": "A0", "role": "architect", "model": "m", "temperature": 0.3},
            {"id": "a1", "name": "A1", "role": "security", "model": "m", "temperature": 0.3}
        ],
        "judge": {"id": "judge", "name": "J", "role": "generalist", "model": "jm", "temperature": 0.1},
        "debate": {"rounds": 1, "terminationCondition": {"type": "fixed"},
                   "retry": {"default": {"attempts": attempts, "initialBackoffMs": 100,
                                         "maxBackoffMs": 100, "timeoutMs": 5000}}}
    }))
    .unwrap()
}

/// A machine with a 10 s deadline margin (deadline = dispatch + 5 s + 10 s).
fn machine(attempts: u32) -> Machine {
    let mut m = Machine::new("deb-20260304-050607-abcdef".into(), spec(attempts), t0());
    m.set_task_deadline_margin(Some(std::time::Duration::from_secs(10)));
    m
}

fn ok(task: &Task) -> TaskResult {
    TaskResult {
        schema_version: SCHEMA_VERSION,
        task_id: task.id.clone(),
        debate_id: task.debate_id.clone(),
        attempt: task.attempt,
        worker: "test".into(),
        outcome: TaskOutcome::Ok(TaskOutput {
            content: format!("text of {}", task.id),
            metadata: ContributionMetadata::default(),
            ..Default::default()
        }),
    }
}

fn fail(task: &Task, message: &str) -> TaskResult {
    TaskResult {
        outcome: TaskOutcome::Error(TaskError {
            kind: ErrorKind::Server,
            message: message.into(),
            provider: None,
            retry_after_ms: None,
        }),
        ..ok(task)
    }
}

fn dispatched(fx: &[Effect]) -> Vec<Task> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Dispatch(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

fn events(fx: &[Effect]) -> Vec<EventKind> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Emit(ev) => Some(ev.kind.clone()),
            _ => None,
        })
        .collect()
}

fn retries(fx: &[Effect]) -> Vec<String> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::ScheduleRetry { task_id, .. } => Some(task_id.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn no_deadlines_unless_a_margin_is_set() {
    let mut m = Machine::new("deb-20260304-050607-abcdef".into(), spec(3), t0());
    let fx = m.handle(Input::Start, t0());
    assert_eq!(dispatched(&fx).len(), 2);
    assert_eq!(m.next_deadline(), None);
    let fx = m.handle(Input::Tick, t0() + secs(100_000));
    assert!(dispatched(&fx).is_empty() && retries(&fx).is_empty());
    assert_eq!(m.in_flight().count(), 2);
}

#[test]
fn an_attempt_past_its_deadline_is_sent_again_as_a_new_attempt() {
    let mut m = machine(3);
    let first = dispatched(&m.handle(Input::Start, t0()));
    assert_eq!(first.len(), 2);
    assert_eq!(m.next_deadline(), Some(t0() + secs(15)));

    // One second early: nothing happens.
    let fx = m.handle(Input::Tick, t0() + secs(14));
    assert!(fx.is_empty(), "{fx:?}");

    let fx = m.handle(Input::Tick, t0() + secs(15));
    let failed: Vec<_> = events(&fx)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::TaskFailed {
                task_id,
                attempt,
                error,
                will_retry,
                ..
            } => Some((task_id, attempt, error, will_retry)),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 2, "{fx:?}");
    for (_, attempt, error, will_retry) in &failed {
        assert_eq!(*attempt, 1);
        assert!(*will_retry);
        assert!(
            error.contains("deadline") && error.contains("lost"),
            "{error}"
        );
    }
    assert_eq!(retries(&fx).len(), 2);
    assert_eq!(
        m.next_deadline(),
        None,
        "nothing in flight while backing off"
    );

    // The backoff elapses: attempt 2 goes out with its own message id and deadline.
    let at = t0() + secs(16);
    let again = dispatched(&m.handle(Input::RetryDue(first[0].id.clone()), at));
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 2);
    assert_ne!(again[0].message_id(), first[0].message_id());
    assert_eq!(m.next_deadline(), Some(at + secs(15)));

    // The lost attempt 1 turns up after all, successfully: taken (first success wins),
    // and attempt 2's answer changes nothing.
    m.handle(Input::Result(ok(&first[0])), at + secs(1));
    let before = m.state().clone();
    m.handle(Input::Result(ok(&again[0])), at + secs(2));
    assert_eq!(m.state().rounds, before.rounds);
    let s = m.state();
    assert_eq!(s.rounds[0].count(ContributionType::Proposal), 1);
    assert_eq!(s.engine.attempts[&first[0].id], 2);
}

#[test]
fn deadlines_spend_the_node_budget_and_then_fail_the_node() {
    let mut m = machine(2);
    let first = dispatched(&m.handle(Input::Start, t0()));
    let id = first[0].id.clone();
    m.handle(Input::Tick, t0() + secs(15));
    let second = dispatched(&m.handle(Input::RetryDue(id.clone()), t0() + secs(16)));
    assert_eq!(second[0].attempt, 2);
    let fx = m.handle(Input::Tick, t0() + secs(31));
    assert!(events(&fx)
        .iter()
        .any(|k| matches!(k, EventKind::DebateFailed { .. })));
    let s = m.state();
    assert_eq!(s.status, DebateStatus::Failed);
    let e = s.error.as_ref().unwrap();
    assert_eq!(e.kind, Some(ErrorKind::Undelivered));
    assert_eq!(e.node, "proposal");
    assert!(e.message.contains("deadline"), "{}", e.message);

    // `retry` gives it a fresh budget and a new attempt.
    let fx = m.handle(Input::Retry, t0() + secs(40));
    let third: Vec<_> = dispatched(&fx).into_iter().filter(|t| t.id == id).collect();
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].attempt, 3);
}

#[test]
fn a_hand_back_extends_the_deadline_of_the_current_attempt_only() {
    let mut m = machine(3);
    let first = dispatched(&m.handle(Input::Start, t0()));
    let id = &first[0].id;
    // Handed back for 20 s at t0+2: deadline t0+22+15.
    m.extend_deadline(id, 1, t0() + secs(22));
    // A stale attempt number or an earlier time does not move it.
    m.extend_deadline(id, 2, t0() + secs(500));
    m.extend_deadline(id, 1, t0() + secs(1));
    let fx = m.handle(Input::Tick, t0() + secs(16));
    let failed: Vec<_> = events(&fx)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::TaskFailed { task_id, .. } => Some(task_id),
            _ => None,
        })
        .collect();
    assert_eq!(
        failed,
        vec![first[1].id.clone()],
        "only the other task expired"
    );
    assert!(m.in_flight().any(|t| t == id));
    assert_eq!(m.next_deadline(), Some(t0() + secs(37)));
    let fx = m.handle(Input::Tick, t0() + secs(37));
    assert_eq!(retries(&fx), vec![id.clone()]);
}

#[test]
fn a_lost_message_fails_only_its_own_attempt() {
    let mut m = machine(3);
    let first = dispatched(&m.handle(Input::Start, t0()));
    let lost = |attempt| Input::Lost {
        task_id: first[0].id.clone(),
        attempt,
        reason: "delivered 5 times without an answer (dead letter)".into(),
    };
    assert!(
        m.handle(lost(2), t0()).is_empty(),
        "not the current attempt"
    );
    let fx = m.handle(lost(1), t0() + secs(1));
    assert!(events(&fx).iter().any(|k| matches!(
        k,
        EventKind::TaskFailed { error, will_retry: true, .. } if error.contains("dead letter")
    )));
    assert_eq!(retries(&fx), vec![first[0].id.clone()]);
    assert!(
        m.handle(lost(1), t0() + secs(2)).is_empty(),
        "already given up"
    );
}

#[test]
fn retry_of_a_running_debate_sends_every_outstanding_task_again() {
    let mut m = machine(1);
    let first = dispatched(&m.handle(Input::Start, t0()));
    // One proposal failed and waits for its backoff... (attempts 1: it fails the node, so
    // use a machine with a budget for this part).
    let mut m2 = machine(3);
    let first2 = dispatched(&m2.handle(Input::Start, t0()));
    m2.handle(Input::Result(fail(&first2[1], "5xx")), t0() + secs(1));
    assert_eq!(m2.in_flight().count(), 1);
    let fx = m2.handle(Input::Retry, t0() + secs(2));
    let again = dispatched(&fx);
    assert_eq!(again.len(), 2, "in flight and backing off: {fx:?}");
    assert!(again.iter().all(|t| t.attempt == 2));
    assert!(events(&fx)
        .iter()
        .any(|k| matches!(k, EventKind::DebateResumed)));
    assert_eq!(m2.state().status, DebateStatus::Running);

    // With attempts = 1, the re-sent attempt has a fresh budget of its own: a late error of
    // the given-up attempt 1 changes nothing, and attempt 2 can still complete the debate.
    let again = dispatched(&m.handle(Input::Retry, t0() + secs(3)));
    assert_eq!(again.len(), 2);
    m.handle(Input::Result(fail(&first[0], "late")), t0() + secs(4));
    assert_eq!(m.state().status, DebateStatus::Running);
    let mut queue: std::collections::VecDeque<Task> = again.into();
    let mut t = t0() + secs(5);
    while let Some(task) = queue.pop_front() {
        t += secs(1);
        queue.extend(dispatched(&m.handle(Input::Result(ok(&task)), t)));
    }
    assert_eq!(m.state().status, DebateStatus::Completed);
}

#[test]
fn abort_fails_a_running_debate_with_the_reason_and_retry_resumes_it() {
    let mut m = machine(3);
    let first = dispatched(&m.handle(Input::Start, t0()));
    let fx = m.handle(
        Input::Abort("the coordinator failed 3 times: cannot publish".into()),
        t0() + secs(1),
    );
    assert!(dispatched(&fx).is_empty());
    let s = m.state();
    assert_eq!(s.status, DebateStatus::Failed);
    assert!(s.error.as_ref().unwrap().message.contains("cannot publish"));
    assert!(events(&fx).iter().any(
        |k| matches!(k, EventKind::DebateFailed { message, .. } if message.contains("3 times"))
    ));
    // Nothing else is aborted twice; a retry resumes the debate where it was.
    assert!(m
        .handle(Input::Abort("again".into()), t0() + secs(2))
        .is_empty());
    let fx = m.handle(Input::Retry, t0() + secs(3));
    assert_eq!(m.state().status, DebateStatus::Running);
    let again = dispatched(&fx);
    assert_eq!(again.len(), first.len());
}

#[test]
fn resume_starts_the_deadlines_again() {
    let mut m = machine(3);
    m.handle(Input::Start, t0());
    let mut resumed = Machine::from_checkpoint(m.spec().clone(), m.state().clone());
    resumed.set_task_deadline_margin(Some(std::time::Duration::from_secs(10)));
    let at = t0() + secs(60);
    let fx = resumed.handle(Input::Resume, at);
    assert!(dispatched(&fx).iter().all(|t| t.attempt == 1));
    assert_eq!(resumed.next_deadline(), Some(at + secs(15)));
}

#[test]
fn events_carry_at_most_a_few_kib_of_error_text() {
    let mut m = machine(3);
    let first = dispatched(&m.handle(Input::Start, t0()));
    let huge = "provider said: ".to_string() + &"x".repeat(200_000);
    let fx = m.handle(Input::Result(fail(&first[0], &huge)), t0() + secs(1));
    for e in fx.iter().filter_map(|e| match e {
        Effect::Emit(ev) => Some(ev),
        _ => None,
    }) {
        let bytes = serde_json::to_vec(e).unwrap().len();
        assert!(bytes < 8 * 1024, "an event of {bytes} bytes");
    }
    assert!(events(&fx).iter().any(
        |k| matches!(k, EventKind::TaskFailed { error, .. } if error.starts_with("provider said"))
    ));
}

#[test]
fn retry_after_a_restart_gives_attempts_still_out_a_fresh_budget() {
    // Two tasks fail at once with attempts = 1; the debate fails on the first. The second's
    // failure is stored but not read before the coordinator restarts and the user retries.
    let mut m = machine(1);
    let first = dispatched(&m.handle(Input::Start, t0()));
    m.handle(Input::Result(fail(&first[0], "5xx")), t0() + secs(1));
    assert_eq!(m.state().status, DebateStatus::Failed);
    let mut rebuilt = Machine::from_checkpoint(m.spec().clone(), m.state().clone());
    rebuilt.handle(Input::Resume, t0() + secs(2));
    let fx = rebuilt.handle(Input::Retry, t0() + secs(3));
    assert_eq!(rebuilt.state().status, DebateStatus::Running);
    // The other task is sent again as its outstanding attempt; its stored failure, read
    // now, is retried instead of failing the debate again.
    assert!(dispatched(&fx)
        .iter()
        .any(|t| t.id == first[1].id && t.attempt == 1));
    let fx = rebuilt.handle(Input::Result(fail(&first[1], "5xx")), t0() + secs(4));
    assert_eq!(rebuilt.state().status, DebateStatus::Running, "{fx:?}");
    assert_eq!(retries(&fx), vec![first[1].id.clone()]);
}
