//! Golden replay of the debate state machine.
//!
//! Each scenario drives a [`Machine`] through a scripted debate — fixed clock, fixed debate
//! id, scripted replies per task kind, scripted user input whenever the debate rests — and
//! records every input with the effects it produced (tasks dispatched, events emitted,
//! retries scheduled) and the final state. The record is compared with the committed file
//! `tests/golden/<scenario>.json`; the first difference is reported with its JSON path and
//! the input that produced it.
//!
//! The scenarios cover every termination type (fixed, convergence, quality, verdict,
//! similarity), the adaptive short and full paths, voting with a tie, sparse critique
//! topologies (ring, random k), clarifications with follow-ups and a timeout, failures with
//! drop and with `retry`, deadlines and lost messages, abort, cancel, a resume from a
//! checkpoint, and budgets through every degradation step.
//!
//! `PARLEY_BLESS=1 cargo test --test golden` rewrites the files (review the diff).

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;

use chrono::{DateTime, Duration, TimeZone, Utc};
use parley_engine::{Effect, Input, Machine};
use parley_protocol::*;
use serde_json::{json, Value};

const DEBATE_ID: &str = "deb-20260102-030405-abcdef";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()
}

/// `n` agents, `rounds` rounds, `termination`, and `extra` merged into `debate`.
fn spec(n: usize, rounds: u32, termination: &str, extra: Value) -> DebateSpec {
    let roles = ["architect", "performance", "security", "testing", "kiss"];
    let agents: Vec<_> = (0..n)
        .map(|i| {
            json!({"id": format!("a{i}"), "name": format!("A{i}"), "role": roles[i % 5],
                   "model": "m", "temperature": 0.3})
        })
        .collect();
    let mut debate = json!({"rounds": rounds, "terminationCondition": {"type": termination}});
    if let Value::Object(m) = extra {
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
    .expect("a valid test spec")
}

/// What the scripted worker does with a task.
// Built and consumed once per task: boxing the output would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Reply {
    Ok(TaskOutput),
    Fail(ErrorKind),
    /// The transport reports the attempt's message lost.
    Lost,
    /// No answer at all (a deadline has to notice).
    Silent,
}

/// The default reply: a text naming the task, 10 tokens, 5 ms; per kind: a solution
/// (confidence 77), an evaluation of 50, a verdict to continue at 50, a vote for the next
/// agent, self-similarities of 0.5, no clarification questions.
fn output(t: &Task) -> TaskOutput {
    let mut out = TaskOutput {
        content: format!("text of {}", t.id),
        metadata: ContributionMetadata {
            tokens_used: 10,
            latency_ms: 5,
            model: t.agent.model.clone(),
            ..Default::default()
        },
        ..Default::default()
    };
    match t.kind {
        TaskKind::Synthesize => {
            out.solution = Some(Solution {
                confidence: 77.0,
                ..Solution::text_only("final".into(), t.agent.id.clone())
            })
        }
        TaskKind::Evaluate => out.confidence = Some(50.0),
        TaskKind::Verdict => out.verdict = Some(verdict(false, 50.0, &[])),
        TaskKind::Vote => {
            let me: usize = t.agent.id[1..].parse().unwrap_or(0);
            let n = 1 + t.input.candidates.len();
            out.vote = Some(Ballot {
                vote: format!("a{}", (me + 1) % n),
                reason: format!("{} reads best", (me + 1) % n),
            });
        }
        TaskKind::Embed => out.similarity = Some(similarity(t, 0.5, Some(0.4))),
        _ => {}
    }
    out
}

fn verdict(done: bool, confidence: f64, issues: &[&str]) -> Verdict {
    Verdict {
        verdict: if done {
            VerdictDecision::Done
        } else {
            VerdictDecision::Continue
        },
        confidence,
        reasoning: "reasons".into(),
        open_issues: issues.iter().map(|s| s.to_string()).collect(),
        valid: true,
    }
}

/// Every agent of the previous round at `self_sim`, and `across` across agents.
fn similarity(t: &Task, self_sim: f64, across: Option<f64>) -> Similarity {
    Similarity {
        per_agent: t
            .input
            .previous
            .iter()
            .map(|p| (p.agent_id.clone(), self_sim))
            .collect(),
        across_agents: across,
    }
}

fn ok(out: TaskOutput) -> Reply {
    Reply::Ok(out)
}

type Replier<'a> = &'a dyn Fn(&Task) -> Reply;
/// The next user input when the debate rests: a label, the input, and how many seconds the
/// clock jumps before it.
type AtRest<'a> = &'a mut dyn FnMut(&Replay) -> Option<(String, Input, i64)>;

/// A machine under replay and the record of what it did.
struct Replay {
    spec: DebateSpec,
    machine: Machine,
    clock: DateTime<Utc>,
    queue: VecDeque<Task>,
    retries: Vec<String>,
    steps: Vec<Value>,
}

impl Replay {
    fn new(spec: DebateSpec) -> Self {
        Self {
            machine: Machine::new(DEBATE_ID.into(), spec.clone(), t0()),
            spec,
            clock: t0(),
            queue: VecDeque::new(),
            retries: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// Applies `input` one second after the previous one (plus `skip`).
    fn apply_after(&mut self, skip: Duration, label: String, input: Input) {
        self.clock += Duration::seconds(1) + skip;
        let fx = self.machine.handle(input, self.clock);
        let mut effects = Vec::new();
        for e in fx {
            match e {
                Effect::Dispatch(t) => {
                    effects.push(json!({ "dispatch": t }));
                    self.queue.push_back(t);
                }
                Effect::Emit(ev) => effects.push(json!({ "emit": ev })),
                Effect::ScheduleRetry { task_id, delay_ms } => {
                    effects
                        .push(json!({"scheduleRetry": {"taskId": task_id, "delayMs": delay_ms}}));
                    self.retries.push(task_id);
                }
            }
        }
        self.steps.push(json!({
            "input": label,
            "at": self.clock,
            "effects": effects,
        }));
    }

    fn apply(&mut self, label: impl Into<String>, input: Input) {
        self.apply_after(Duration::zero(), label.into(), input)
    }

    /// Answers queued tasks (FIFO) with `reply`, feeds due retries back, and asks `at_rest`
    /// for the next input whenever nothing else is pending; stops when it has none.
    fn run(&mut self, reply: Replier, at_rest: AtRest) {
        loop {
            if let Some(t) = self.queue.pop_front() {
                let label = format!("result {} #{}", t.id, t.attempt);
                let outcome = match reply(&t) {
                    Reply::Ok(out) => TaskOutcome::Ok(out),
                    Reply::Fail(kind) => TaskOutcome::Error(TaskError {
                        kind,
                        message: format!("{} failed ({})", t.id, kind.as_str()),
                        provider: Some("fake".into()),
                        retry_after_ms: None,
                    }),
                    Reply::Lost => {
                        let input = Input::Lost {
                            task_id: t.id.clone(),
                            attempt: t.attempt,
                            reason: "exhausted its deliveries".into(),
                        };
                        self.apply(format!("lost {} #{}", t.id, t.attempt), input);
                        continue;
                    }
                    Reply::Silent => continue,
                };
                let result = TaskResult {
                    schema_version: SCHEMA_VERSION,
                    task_id: t.id.clone(),
                    debate_id: t.debate_id.clone(),
                    attempt: t.attempt,
                    worker: "golden".into(),
                    outcome,
                };
                self.apply(label, Input::Result(result));
                continue;
            }
            if !self.retries.is_empty() {
                for id in std::mem::take(&mut self.retries) {
                    self.apply(format!("retryDue {id}"), Input::RetryDue(id));
                }
                continue;
            }
            match at_rest(self) {
                Some((label, input, skip)) => {
                    self.apply_after(Duration::seconds(skip), label, input)
                }
                None => break,
            }
        }
    }

    /// Starts the debate and runs it with `reply`, nothing at rest.
    fn start_and_run(mut self, reply: Replier) -> Self {
        self.apply("start", Input::Start);
        self.run(reply, &mut |_| None);
        self
    }

    fn record(&self) -> Value {
        let state = self.machine.state();
        json!({
            "steps": self.steps,
            "final": {
                "state": state,
                "inFlight": self.machine.in_flight().collect::<Vec<_>>(),
                "settled": self.machine.is_settled(),
                "nextDeadline": self.machine.next_deadline(),
                "progress": self.machine.progress(),
            },
        })
    }

    fn state(&self) -> &DebateState {
        self.machine.state()
    }
}

fn default_reply(t: &Task) -> Reply {
    ok(output(t))
}

// ---- scenarios ------------------------------------------------------------------------

fn fixed() -> Replay {
    Replay::new(spec(3, 2, "fixed", json!({}))).start_and_run(&default_reply)
}

/// Convergence: the judge's confidence reaches 85 ≥ 80 after round 2 of 4.
fn convergence() -> Replay {
    let s = spec(
        2,
        4,
        "convergence",
        json!({"terminationCondition": {"type": "convergence", "threshold": 80}}),
    );
    Replay::new(s).start_and_run(&|t| {
        let mut out = output(t);
        if t.kind == TaskKind::Evaluate {
            out.confidence = Some(if t.round == 1 { 60.0 } else { 85.0 });
        }
        ok(out)
    })
}

/// Quality: the judge never reaches the threshold; the round cap ends it.
fn quality() -> Replay {
    Replay::new(spec(2, 3, "quality", json!({}))).start_and_run(&default_reply)
}

/// Verdict: continue with an issue after round 1, done at 90 with two issues after round 2.
fn verdict_termination() -> Replay {
    let s = spec(
        2,
        4,
        "verdict",
        json!({"terminationCondition": {"type": "verdict", "threshold": 85}}),
    );
    Replay::new(s).start_and_run(&|t| {
        let mut out = output(t);
        if t.kind == TaskKind::Verdict {
            out.verdict = Some(if t.round == 1 {
                verdict(false, 60.0, &["old issue"])
            } else {
                verdict(true, 90.0, &["cache size", "eviction policy"])
            });
        }
        ok(out)
    })
}

/// Similarity: every refinement repeats the previous one (0.95 ≥ 0.9) in round 2.
fn similarity_termination() -> Replay {
    let s = spec(
        2,
        4,
        "similarity",
        json!({
            "terminationCondition": {"type": "similarity", "threshold": 0.9},
            "embeddings": {"provider": "openai-compatible", "model": "embed-small"},
        }),
    );
    Replay::new(s).start_and_run(&|t| {
        let mut out = output(t);
        if t.kind == TaskKind::Embed {
            out.similarity = Some(similarity(t, 0.95, Some(0.7)));
        }
        ok(out)
    })
}

/// Adaptive: the screen finds the proposals in agreement; synthesized at once.
fn adaptive_short() -> Replay {
    let s = spec(
        3,
        3,
        "fixed",
        json!({"mode": "adaptive", "terminationCondition": {"type": "fixed", "threshold": 70}}),
    );
    Replay::new(s).start_and_run(&|t| {
        let mut out = output(t);
        if t.kind == TaskKind::Verdict {
            out.verdict = Some(verdict(true, 75.0, &["naming"]));
        }
        ok(out)
    })
}

/// Adaptive: the screen says continue; the debate runs as configured.
fn adaptive_full() -> Replay {
    Replay::new(spec(3, 2, "fixed", json!({"mode": "adaptive"}))).start_and_run(&default_reply)
}

/// Voting: a0 and a1 vote for each other, a2 for itself (invalid): a tie for the judge.
fn voting_tie() -> Replay {
    let s = spec(3, 1, "fixed", json!({"synthesisMethod": "voting"}));
    Replay::new(s).start_and_run(&|t| {
        let mut out = output(t);
        if t.kind == TaskKind::Vote {
            let vote = match t.agent.id.as_str() {
                "a0" => "a1",
                "a1" => "a0",
                _ => "a2",
            };
            out.vote = Some(Ballot {
                vote: vote.into(),
                reason: "clearest".into(),
            });
        }
        if t.kind == TaskKind::Synthesize {
            if let Some(s) = &mut out.solution {
                s.based_on = Some("a1".into());
            }
        }
        ok(out)
    })
}

fn critique_ring() -> Replay {
    let s = spec(4, 2, "fixed", json!({"critique": {"topology": "ring"}}));
    Replay::new(s).start_and_run(&default_reply)
}

fn critique_random() -> Replay {
    let s = spec(
        5,
        2,
        "fixed",
        json!({"critique": {"topology": "random", "k": 2}}),
    );
    Replay::new(s).start_and_run(&default_reply)
}

/// Clarifications over two iterations: questions (one over the limit), a partial answer,
/// the rest, follow-ups (one a repeat), then the timeout answers what is left.
fn clarifications() -> Replay {
    let s = spec(
        2,
        1,
        "fixed",
        json!({"interactiveClarifications": true, "clarificationsMaxPerAgent": 2,
               "clarificationsMaxIterations": 2}),
    );
    let mut r = Replay::new(s);
    r.apply("start", Input::Start);
    let reply = |t: &Task| {
        let mut out = output(t);
        if t.kind == TaskKind::Clarify {
            out.content = "{}".into();
            out.questions = match (t.agent.id.as_str(), t.round) {
                ("a0", 1) => vec!["Scale?".into(), "Budget?".into(), "Region?".into()],
                ("a1", 1) => vec!["Latency target?".into()],
                ("a0", 2) => vec!["scale?".into(), "Read/write ratio?".into()],
                _ => vec![],
            };
        }
        ok(out)
    };
    let mut answered = 0;
    r.run(&reply, &mut |r| {
        if r.state().status != DebateStatus::AwaitingClarifications {
            return None;
        }
        answered += 1;
        let open: Vec<String> = pending_clarifications(&r.state().clarifications)
            .iter()
            .flat_map(|g| g.items.iter().map(|i| i.id.clone()))
            .collect();
        match answered {
            1 => Some((
                "answers (first)".into(),
                Input::Answers(vec![Answer {
                    id: open[0].clone(),
                    answer: "  ten thousand users  ".into(),
                }]),
                0,
            )),
            2 => Some((
                "answers (the rest)".into(),
                Input::Answers(
                    open.iter()
                        .map(|id| Answer {
                            id: id.clone(),
                            answer: String::new(),
                        })
                        .collect(),
                ),
                0,
            )),
            _ => Some((
                "clarification timeout".into(),
                Input::ClarificationTimeout,
                600,
            )),
        }
    });
    r
}

/// `onAgentFailure: drop`: one critique fails on every attempt and is dropped; one
/// refinement fails once (rate limited) and succeeds on its retry.
fn failure_drop() -> Replay {
    let s = spec(
        3,
        1,
        "fixed",
        json!({"onAgentFailure": "drop",
               "retry": {"default": {"attempts": 2, "initialBackoffMs": 100, "maxBackoffMs": 1000}}}),
    );
    Replay::new(s).start_and_run(&|t| {
        if t.id.ends_with("/critique/a0/a1") {
            return Reply::Fail(ErrorKind::Server);
        }
        if t.id.ends_with("/refine/a2") && t.attempt == 1 {
            return Reply::Fail(ErrorKind::RateLimited);
        }
        default_reply(t)
    })
}

/// A proposal fails for good (authentication): the debate fails; `retry` resumes it and
/// the proposal succeeds.
fn failure_retry() -> Replay {
    let s = spec(2, 1, "fixed", json!({}));
    let mut r = Replay::new(s);
    r.apply("start", Input::Start);
    let mut retried = false;
    r.run(
        &|t| {
            if t.id.ends_with("/propose/a1") && t.attempt == 1 {
                return Reply::Fail(ErrorKind::Auth);
            }
            default_reply(t)
        },
        &mut |r| {
            if r.state().status == DebateStatus::Failed && !retried {
                retried = true;
                return Some(("retry".into(), Input::Retry, 0));
            }
            None
        },
    );
    r
}

/// Deadlines on: one attempt never answers (the clock expires it), one message is lost,
/// then a running `retry` re-sends what is outstanding.
fn deadlines() -> Replay {
    let s = spec(
        2,
        1,
        "fixed",
        json!({"retry": {"default": {"attempts": 3, "initialBackoffMs": 100, "timeoutMs": 5000}}}),
    );
    let mut r = Replay::new(s);
    r.machine
        .set_task_deadline_margin(Some(std::time::Duration::from_secs(10)));
    r.apply("start", Input::Start);
    let mut rest = 0;
    r.run(
        &|t| {
            if t.id.ends_with("/propose/a0") && t.attempt == 1 {
                return Reply::Silent;
            }
            if t.id.ends_with("/critique/a1/a0") && t.attempt == 1 {
                return Reply::Lost;
            }
            if t.id.ends_with("/refine/a1") && t.attempt == 1 {
                return Reply::Silent;
            }
            default_reply(t)
        },
        &mut |r| {
            rest += 1;
            r.machine.in_flight().next()?;
            match rest {
                1 => Some(("tick (before the deadline)".into(), Input::Tick, 0)),
                // The clock passes the deadline: 5 s timeout + 10 s margin.
                2 => Some(("tick (past the deadline)".into(), Input::Tick, 20)),
                _ => Some(("retry (running)".into(), Input::Retry, 0)),
            }
        },
    );
    r
}

/// An actor that keeps failing aborts the debate; `retry` resumes it.
fn abort_and_retry() -> Replay {
    let mut r = Replay::new(spec(2, 1, "fixed", json!({})));
    r.apply("start", Input::Start);
    // Answer the proposals only, then abort with the critiques in flight.
    for _ in 0..2 {
        let t = r.queue.pop_front().expect("a proposal");
        let result = result_of(&t, output(&t));
        r.apply(format!("result {}", t.id), Input::Result(result));
    }
    r.apply(
        "abort",
        Input::Abort("the debate actor failed 3 times".into()),
    );
    r.queue.clear();
    r.apply("retry", Input::Retry);
    r.run(&default_reply, &mut |_| None);
    r
}

/// A coordinator restart mid-round: the machine is rebuilt from the checkpoint and
/// resumed; what was in flight goes out again with the same attempt numbers.
fn resume_from_checkpoint() -> Replay {
    let mut r = Replay::new(spec(3, 1, "fixed", json!({})));
    r.apply("start", Input::Start);
    for _ in 0..4 {
        let t = r.queue.pop_front().expect("a task");
        let result = result_of(&t, output(&t));
        r.apply(format!("result {}", t.id), Input::Result(result));
    }
    let state = r.machine.state().clone();
    r.machine = Machine::from_checkpoint(r.spec.clone(), state);
    r.queue.clear();
    r.apply("resume", Input::Resume);
    r.run(&default_reply, &mut |_| None);
    r
}

/// Cancelled mid-round: late results change nothing.
fn cancel() -> Replay {
    let mut r = Replay::new(spec(2, 2, "fixed", json!({})));
    r.apply("start", Input::Start);
    let t = r.queue.pop_front().expect("a proposal");
    let result = result_of(&t, output(&t));
    r.apply(format!("result {}", t.id), Input::Result(result));
    r.apply("cancel", Input::Cancel);
    r.run(&default_reply, &mut |_| None);
    r
}

fn result_of(t: &Task, out: TaskOutput) -> TaskResult {
    TaskResult {
        schema_version: SCHEMA_VERSION,
        task_id: t.id.clone(),
        debate_id: t.debate_id.clone(),
        attempt: t.attempt,
        worker: "golden".into(),
        outcome: TaskOutcome::Ok(out),
    }
}

/// `s` with a token budget of its smallest admissible run plus `extra`.
fn with_budget(mut s: DebateSpec, extra: u64) -> DebateSpec {
    let m = Machine::new(DEBATE_ID.into(), s.clone(), t0());
    let min = m.minimum_reservation().tokens;
    s.debate.budget = Some(Budget {
        usd: None,
        tokens: Some(min + extra),
    });
    s
}

/// Runs `s` under a budget, every call using `tokens` (questions in clarify replies), every
/// contribution `chars` long (at least its default text).
fn run_spending(s: DebateSpec, tokens: u64, chars: usize) -> Replay {
    Replay::new(s).start_and_run(&move |t| {
        let mut out = output(t);
        out.metadata.tokens_used = tokens;
        if out.content.len() < chars {
            out.content.push_str(&"x".repeat(chars - out.content.len()));
        }
        if t.kind == TaskKind::Clarify {
            out.questions = vec!["Scale?".into()];
        }
        ok(out)
    })
}

/// Long critiques make a refinement too dear for what is left: the synthesis at once,
/// with what exists.
fn budget_synthesize_now() -> Replay {
    run_spending(with_budget(spec(2, 1, "fixed", json!({})), 0), 10, 3_000)
}

/// The adaptive screen does not fit (the judge's own prompt is larger than what is left
/// besides the synthesis): skipped, the debate goes the full path.
fn budget_skip_screen() -> Replay {
    let mut s = spec(3, 2, "verdict", json!({"mode": "adaptive"}));
    s.judge.system_prompt = Some("x".repeat(40_000).into());
    for a in &mut s.agents {
        a.max_tokens = Some(200);
    }
    run_spending(with_budget(s, 30_000), 10, 0)
}

/// The smallest budget: round 1's critiques are dropped, and round 2's refinements would
/// not fit: no new round after round 1.
fn budget_no_new_round() -> Replay {
    let mut s = spec(2, 3, "fixed", json!({}));
    for a in &mut s.agents {
        a.max_tokens = Some(200);
    }
    run_spending(with_budget(s, 0), 10, 0)
}

/// Critiques that do not fit are dropped; the targets refine without them; then the
/// synthesis at once.
fn budget_drop_critiques() -> Replay {
    run_spending(with_budget(spec(3, 1, "fixed", json!({})), 2_000), 10, 0)
}

/// The judge's summary of a long final round does not fit: skipped; the synthesis reads
/// the transcript (cut to what its hold was sized for).
fn budget_skip_summaries() -> Replay {
    run_spending(
        with_budget(spec(2, 1, "fixed", json!({})), 3_000),
        10,
        3_000,
    )
}

/// Long answers to the first iteration's questions make the follow-up questions too
/// dear: the rest of the clarification phase is skipped and round 1 opens.
fn budget_skip_clarifications() -> Replay {
    let mut s = spec(
        2,
        1,
        "fixed",
        json!({"interactiveClarifications": true, "clarificationsMaxIterations": 2}),
    );
    for a in &mut s.agents {
        a.max_tokens = Some(200);
    }
    let mut r = Replay::new(with_budget(s, 16_000));
    r.apply("start", Input::Start);
    r.run(
        &|t| {
            let mut out = output(t);
            if t.kind == TaskKind::Clarify && t.round == 1 {
                out.questions = vec!["Scale?".into()];
            }
            ok(out)
        },
        &mut |r| {
            if r.state().status != DebateStatus::AwaitingClarifications {
                return None;
            }
            let answers = pending_clarifications(&r.state().clarifications)
                .iter()
                .flat_map(|g| g.items.iter())
                .map(|i| Answer {
                    id: i.id.clone(),
                    answer: "x".repeat(4000),
                })
                .collect();
            Some(("answers (long)".into(), Input::Answers(answers), 0))
        },
    );
    r
}

/// A scenario: its name (the golden file's) and how to replay it.
type Scenario = (&'static str, fn() -> Replay);

const SCENARIOS: &[Scenario] = &[
    ("fixed", fixed),
    ("convergence", convergence),
    ("quality", quality),
    ("verdict", verdict_termination),
    ("similarity", similarity_termination),
    ("adaptive-short", adaptive_short),
    ("adaptive-full", adaptive_full),
    ("voting-tie", voting_tie),
    ("critique-ring", critique_ring),
    ("critique-random", critique_random),
    ("clarifications", clarifications),
    ("failure-drop", failure_drop),
    ("failure-retry", failure_retry),
    ("deadlines", deadlines),
    ("abort-and-retry", abort_and_retry),
    ("resume-from-checkpoint", resume_from_checkpoint),
    ("cancel", cancel),
    ("budget-synthesize-now", budget_synthesize_now),
    ("budget-skip-screen", budget_skip_screen),
    ("budget-no-new-round", budget_no_new_round),
    ("budget-drop-critiques", budget_drop_critiques),
    ("budget-skip-summaries", budget_skip_summaries),
    ("budget-skip-clarifications", budget_skip_clarifications),
];

// ---- comparison -----------------------------------------------------------------------

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn clip(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 400 {
        let mut cut = 400;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}… ({} bytes)", &s[..cut], s.len())
    } else {
        s
    }
}

/// The first place where `actual` differs from `expected`, as a JSON path with both values.
fn first_difference(path: &str, expected: &Value, actual: &Value) -> Option<String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            let keys: BTreeSet<&String> = e.keys().chain(a.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (e.get(k), a.get(k)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = first_difference(&p, x, y) {
                            return Some(d);
                        }
                    }
                    (Some(x), None) => return Some(format!("{p}: missing, expected {}", clip(x))),
                    (None, Some(y)) => return Some(format!("{p}: unexpected {}", clip(y))),
                    (None, None) => {}
                }
            }
            None
        }
        (Value::Array(e), Value::Array(a)) => {
            for (i, (x, y)) in e.iter().zip(a).enumerate() {
                if let Some(d) = first_difference(&format!("{path}[{i}]"), x, y) {
                    return Some(d);
                }
            }
            match e.len().cmp(&a.len()) {
                std::cmp::Ordering::Equal => None,
                std::cmp::Ordering::Greater => Some(format!(
                    "{path}: {} element(s) instead of {}; first missing: {}",
                    a.len(),
                    e.len(),
                    clip(&e[a.len()])
                )),
                std::cmp::Ordering::Less => Some(format!(
                    "{path}: {} element(s) instead of {}; first extra: {}",
                    a.len(),
                    e.len(),
                    clip(&a[e.len()])
                )),
            }
        }
        (x, y) if x == y => None,
        (x, y) => Some(format!(
            "{path}:\n  expected {}\n  actual   {}",
            clip(x),
            clip(y)
        )),
    }
}

/// The input of the step a path `$.steps[i]…` is in.
fn step_label(record: &Value, diff: &str) -> Option<String> {
    let rest = diff.strip_prefix("$.steps[")?;
    let i: usize = rest.split(']').next()?.parse().ok()?;
    let step = record.get("steps")?.get(i)?;
    Some(format!(
        "step {i} (input {}, at {})",
        step.get("input")?,
        step.get("at")?
    ))
}

#[test]
fn scripted_debates_replay_as_recorded() {
    let bless = std::env::var_os("PARLEY_BLESS").is_some_and(|v| v == "1");
    let dir = golden_dir();
    let mut failures = Vec::new();
    let mut steps_seen = BTreeSet::new();
    for (name, scenario) in SCENARIOS {
        let replay = scenario();
        let st = replay.state();
        if let Some(b) = &st.budget {
            steps_seen.extend(b.degraded.iter().map(|d| d.step.clone()));
            assert!(b.spent.within(&b.limit), "{name}: over budget: {b:?}");
        }
        let record = replay.record();
        let path = dir.join(format!("{name}.json"));
        let text = serde_json::to_string_pretty(&record).expect("a record serializes") + "\n";
        if bless {
            std::fs::create_dir_all(&dir).expect("create tests/golden");
            std::fs::write(&path, text).expect("write a golden file");
            continue;
        }
        let Ok(stored) = std::fs::read_to_string(&path) else {
            failures.push(format!(
                "{name}: no {} (run with PARLEY_BLESS=1 to record it)",
                path.display()
            ));
            continue;
        };
        let expected: Value = serde_json::from_str(&stored).expect("a golden file is JSON");
        // The steps first: the earliest input whose effects differ is the one to read.
        let diff = ["steps", "final"]
            .iter()
            .find_map(|k| first_difference(&format!("$.{k}"), &expected[k], &record[k]))
            .or_else(|| first_difference("$", &expected, &record));
        if let Some(diff) = diff {
            let at = step_label(&record, &diff).unwrap_or_default();
            failures.push(format!("{name}: first difference {at}\n{diff}"));
        }
    }
    // No stale file: every golden file belongs to a scenario.
    if !bless {
        let names: BTreeSet<String> = SCENARIOS.iter().map(|(n, _)| format!("{n}.json")).collect();
        for entry in std::fs::read_dir(&dir).expect("tests/golden exists") {
            let file = entry.expect("a directory entry").file_name();
            let file = file.to_string_lossy().to_string();
            if !names.contains(&file) {
                failures.push(format!("{file}: a golden file of no scenario (delete it)"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "the machine's behaviour differs from the golden files \
         (PARLEY_BLESS=1 re-records them if the change is intended):\n\n{}",
        failures.join("\n\n")
    );
    // The budget scenarios go through every step of the degradation order.
    let all: BTreeSet<String> = [
        "skipClarifications",
        "skipSummaries",
        "dropCritiques",
        "skipScreen",
        "noNewRound",
        "synthesizeNow",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(steps_seen, all, "degradation steps covered");
}

#[test]
fn every_scenario_ends_as_scripted() {
    use DebateStatus::*;
    let expect = [
        ("fixed", Completed, 2),
        ("convergence", Completed, 2),
        ("quality", Completed, 3),
        ("verdict", Completed, 2),
        ("similarity", Completed, 2),
        ("adaptive-short", Completed, 1),
        ("adaptive-full", Completed, 2),
        ("voting-tie", Completed, 1),
        ("critique-ring", Completed, 2),
        ("critique-random", Completed, 2),
        ("clarifications", Completed, 1),
        ("failure-drop", Completed, 1),
        ("failure-retry", Completed, 1),
        ("deadlines", Completed, 1),
        ("abort-and-retry", Completed, 1),
        ("resume-from-checkpoint", Completed, 1),
        ("cancel", Cancelled, 1),
    ];
    for (name, status, rounds) in expect {
        let (_, scenario) = SCENARIOS.iter().find(|(n, _)| *n == name).unwrap();
        let r = scenario();
        assert_eq!(r.state().status, status, "{name}: {:?}", r.state().error);
        assert_eq!(r.state().rounds.len(), rounds, "{name}");
    }
}
