//! Steering: pause / resume, guide notes in later prompts, stop, extend, refusals, and the
//! checkpoint (an old one without steering loads; a paused one resumes paused).

use parley_protocol::*;
use serde_json::json;

use super::{ok, spec, Run};
use crate::{Input, Machine, Steer, SteerError};

fn steer(command: SteerCommand) -> Steer {
    Steer {
        command,
        by: Some("alice".into()),
    }
}

fn guide(note: &str) -> SteerCommand {
    SteerCommand::Guide { note: note.into() }
}

/// Answers every queued task, in order.
fn answer_all(r: &mut Run) {
    r.drain(|t| Some(ok(t, &format!("text of {}", t.id))));
}

#[test]
fn pause_stops_dispatch_at_once_and_resume_continues_without_loss_or_repeat() {
    let mut plain = Run::run_ok(spec(3, 2, "fixed", json!({})));
    let mut r = Run::new(spec(3, 2, "fixed", json!({})));
    r.apply(Input::Start);
    // Round 1's proposals are out; pause.
    let out: Vec<Task> = r.queue.drain(..).collect();
    assert_eq!(out.len(), 3);
    let before = r.tasks.len();
    r.apply(Input::Steer(steer(SteerCommand::Pause)));
    assert_eq!(r.tasks.len(), before, "the pause itself dispatches nothing");
    assert!(r.machine.state().steering.paused);
    // The calls in flight come back and are kept; nothing new goes out.
    for t in &out {
        r.apply(Input::Result(ok(t, &format!("text of {}", t.id))));
    }
    assert_eq!(r.tasks.len(), before, "nothing dispatched while paused");
    assert_eq!(r.machine.state().round(1).unwrap().contributions.len(), 3);
    assert_eq!(r.machine.in_flight().count(), 0);
    assert_eq!(r.machine.state().status, DebateStatus::Running);
    assert_eq!(
        r.machine.check_steer(&steer(SteerCommand::Pause)),
        Err(SteerError::AlreadyPaused)
    );
    // A checkpoint taken now resumes paused.
    let json = serde_json::to_string(r.machine.state()).unwrap();
    let mut m = Machine::from_checkpoint(
        r.machine.spec().clone(),
        serde_json::from_str(&json).unwrap(),
    );
    assert!(m
        .handle(Input::Resume, super::now())
        .iter()
        .all(|f| !matches!(f, crate::Effect::Dispatch(_))));
    r.apply(Input::Steer(steer(SteerCommand::Resume)));
    answer_all(&mut r);
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
    // Every task of the unsteered debate, each once.
    let ids = |run: &Run| {
        let mut v: Vec<String> = run.tasks.iter().map(|t| t.id.clone()).collect();
        v.sort();
        v
    };
    assert_eq!(ids(&r), ids(&plain));
    plain.queue.clear();
    let log = &r.machine.state().steering.log;
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].command, SteerCommand::Pause);
    assert_eq!(log[0].by.as_deref(), Some("alice"));
    assert_eq!(log[0].round, 1);
    let steered: Vec<&str> = r
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Steered { command, .. } => Some(command.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(steered, ["pause", "resume"]);
}

#[test]
fn a_guide_note_is_in_every_task_built_after_it() {
    let mut r = Run::new(spec(2, 2, "fixed", json!({})));
    r.apply(Input::Start);
    let first: Vec<Task> = r.queue.drain(..).collect();
    r.apply(Input::Steer(steer(guide("mind the compliance constraint"))));
    for t in &first {
        assert!(t.input.guidance.is_empty(), "dispatched before the note");
        r.apply(Input::Result(ok(t, "p")));
    }
    answer_all(&mut r);
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
    let later = &r.tasks[first.len()..];
    assert!(!later.is_empty());
    for t in later {
        assert_eq!(
            t.input.guidance,
            vec![GuideNote {
                round: 1,
                note: "mind the compliance constraint".into()
            }],
            "{}",
            t.id
        );
        let prompt = problem_for_prompt(&t.problem, &t.input);
        assert!(prompt.contains("mind the compliance constraint"));
    }
    assert!(later.iter().any(|t| t.kind == TaskKind::Synthesize));
}

#[test]
fn stop_synthesizes_from_what_exists_once_the_calls_in_flight_are_back() {
    let mut r = Run::new(spec(3, 3, "fixed", json!({})));
    r.apply(Input::Start);
    let proposals: Vec<Task> = r.queue.drain(..).collect();
    for t in &proposals {
        r.apply(Input::Result(ok(t, &format!("proposal of {}", t.agent.id))));
    }
    // Critiques are out: stop.
    let critiques: Vec<Task> = r.queue.drain(..).collect();
    assert!(critiques.iter().all(|t| t.kind == TaskKind::Critique));
    let n = r.tasks.len();
    r.apply(Input::Steer(steer(SteerCommand::Stop)));
    assert_eq!(
        r.tasks.len(),
        n,
        "nothing before the calls in flight are back"
    );
    for t in &critiques {
        r.apply(Input::Result(ok(t, "c")));
    }
    let synth: Vec<&Task> = r.tasks[n..].iter().collect();
    assert_eq!(synth.len(), 1, "only the synthesis");
    assert_eq!(synth[0].kind, TaskKind::Synthesize);
    let transcript = synth[0].input.transcript.as_deref().unwrap();
    assert!(transcript.contains("proposal of a0"), "{transcript}");
    answer_all(&mut r);
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed);
    assert!(s.final_solution.is_some());
    assert_eq!(s.rounds.len(), 1);
    assert_eq!(
        r.machine.check_steer(&steer(SteerCommand::Stop)),
        Err(SteerError::NotRunning("completed"))
    );
}

#[test]
fn stop_while_paused_resumes_into_the_synthesis() {
    let mut r = Run::new(spec(2, 2, "fixed", json!({})));
    r.apply(Input::Start);
    r.apply(Input::Steer(steer(SteerCommand::Pause)));
    answer_all(&mut r);
    let n = r.tasks.len();
    r.apply(Input::Steer(steer(SteerCommand::Stop)));
    assert_eq!(r.tasks.len(), n + 1);
    assert_eq!(r.tasks[n].kind, TaskKind::Synthesize);
    answer_all(&mut r);
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
}

#[test]
fn extend_runs_exactly_one_more_round() {
    let plain = Run::run_ok(spec(2, 2, "fixed", json!({})));
    let mut r = Run::new(spec(2, 2, "fixed", json!({})));
    r.apply(Input::Start);
    r.apply(Input::Steer(steer(SteerCommand::Extend)));
    answer_all(&mut r);
    let s = r.machine.state();
    assert_eq!(s.status, DebateStatus::Completed);
    assert_eq!(s.rounds.len(), 3);
    assert_eq!(plain.machine.state().rounds.len(), 2);
    let per_round = |run: &Run, k| run.tasks.iter().filter(|t| t.kind == k).count();
    // Round 3 adds critiques and refinements (proposals carry over).
    assert_eq!(
        per_round(&r, TaskKind::Critique),
        per_round(&plain, TaskKind::Critique) * 3 / 2
    );
    assert_eq!(per_round(&r, TaskKind::Synthesize), 1);
    assert_eq!(r.events.last().unwrap().progress.rounds, 3);
    // After the synthesis was dispatched, extending is refused.
    let mut late = Run::new(spec(2, 1, "fixed", json!({})));
    late.apply(Input::Start);
    while let Some(t) = late.queue.pop_front() {
        if t.kind == TaskKind::Synthesize {
            break;
        }
        late.apply(Input::Result(ok(&t, "x")));
    }
    assert_eq!(
        late.machine.check_steer(&steer(SteerCommand::Extend)),
        Err(SteerError::Closing("synthesis"))
    );
}

#[test]
fn extend_stays_within_the_round_limit() {
    let mut r = Run::new(spec(2, limits::MAX_ROUNDS, "fixed", json!({})));
    r.apply(Input::Start);
    assert_eq!(
        r.machine.check_steer(&steer(SteerCommand::Extend)),
        Err(SteerError::RoundLimit {
            wanted: limits::MAX_ROUNDS + 1,
            limit: limits::MAX_ROUNDS
        })
    );
    let before = r.machine.state().clone();
    r.apply(Input::Steer(steer(SteerCommand::Extend)));
    assert_eq!(
        r.machine.state().steering,
        before.steering,
        "a refused command changes nothing"
    );
}

#[test]
fn hostile_or_untimely_commands_are_refused_and_change_nothing() {
    let mut r = Run::new(spec(2, 1, "fixed", json!({})));
    r.apply(Input::Start);
    let before = r.machine.state().clone();
    let events = r.events.len();
    for (cmd, want) in [
        (
            guide(&"x".repeat(limits::MAX_GUIDE_NOTE_CHARS + 1)),
            "the limit is",
        ),
        (guide("bell\u{7}"), "control character"),
        (guide("   "), "must not be empty"),
    ] {
        let e = r.machine.check_steer(&steer(cmd.clone())).unwrap_err();
        assert!(!e.is_conflict());
        assert!(e.to_string().contains(want), "{e}");
        r.apply(Input::Steer(steer(cmd)));
    }
    let e = r
        .machine
        .check_steer(&steer(SteerCommand::Resume))
        .unwrap_err();
    assert_eq!(e, SteerError::NotPaused);
    assert!(e.is_conflict());
    let bad_by = Steer {
        command: SteerCommand::Pause,
        by: Some("a\nb".into()),
    };
    assert!(matches!(
        r.machine.check_steer(&bad_by),
        Err(SteerError::Invalid(_))
    ));
    r.apply(Input::Steer(bad_by));
    assert_eq!(r.machine.state(), &before);
    assert_eq!(r.events.len(), events);
    // Notes are bounded per debate.
    for i in 0..limits::MAX_GUIDE_NOTES {
        r.apply(Input::Steer(steer(guide(&format!("note {i}")))));
    }
    assert_eq!(
        r.machine.check_steer(&steer(guide("one more"))),
        Err(SteerError::TooManyNotes(limits::MAX_GUIDE_NOTES))
    );
}

#[test]
fn an_old_checkpoint_without_steering_loads_and_an_unsteered_state_omits_it() {
    let r = Run::run_ok(spec(2, 1, "fixed", json!({})));
    let v = serde_json::to_value(r.machine.state()).unwrap();
    assert!(v.get("steering").is_none());
    assert!(v.get("forkedFrom").is_none());
    let back: DebateState = serde_json::from_value(v).unwrap();
    assert!(back.steering.is_empty());
}
