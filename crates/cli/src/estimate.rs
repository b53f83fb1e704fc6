//! `parley estimate` / `parley run --estimate`: what a debate will cost, before its first
//! call and without any.
//!
//! The debate's own state machine ([`parley_engine::Machine`]) is driven to its end
//! with made-up replies of a chosen length, so every call it would make is planned exactly
//! as in a real run (summaries when the history passes its threshold, the judge's summary,
//! evaluations for early-stopping termination). Each call's prompt is built by the workers'
//! own prompt builders (`parley_agent_worker::build_messages`,
//! `parley_judge_worker::build_messages`) and counted.
//!
//! Three runs give the range:
//! - **min**: one-token replies; a `convergence` / `quality` debate stops after round 1;
//!   no clarification question is asked.
//! - **expected**: replies of [`Assumptions::reply_tokens`] tokens; every round runs.
//! - **max**: every reply as long as its completion cap allows (the participant's
//!   `maxTokens`, else the operator's `max_tokens`; see
//!   [`parley_protocol::completion_cap`]); every round runs; every clarification iteration
//!   asks its most questions.
//!
//! Replies of a provider/model and kind that past debates calibrated
//! ([`Assumptions::calibration`], see [`crate::calibration`]) are their mean in the
//! expected run, and the mean less / plus twice their spread in the min / max runs (at
//! least one token, at most the cap). The estimate lists, per provider/model and kind, which
//! it used ([`Estimate::completions`]).
//!
//! Prompt tokens of OpenAI-family models (`gpt-4o`, `gpt-4.1`, `o3`, `gpt-5`, `gpt-4`,
//! `gpt-3.5-turbo`, also as `openai/<model>` on OpenRouter) are counted with the model's own
//! BPE tokenizer (tiktoken's `o200k_base` / `cl100k_base`, shipped inside the binary) plus
//! the chat format's few tokens per message; other models at
//! [`Assumptions::chars_per_token`] characters per token (4, the usual figure for English
//! text). The max run counts a prompt's UTF-8 bytes instead (a byte-level BPE token is at
//! least one byte), so it stays an upper bound. Tool calls of agents with `tools` are not counted (each may
//! add calls up to its `toolCallLimit`).

use std::collections::BTreeMap;

use chrono::{TimeZone, Utc};
use parley_engine::{Effect, Input, Machine};
use parley_protocol::{
    completion_cap, AgentConfig, Answer, ContributionMetadata, DebateSpec, DebateStatus,
    PriceTable, Solution, Task, TaskKind, TaskOutcome, TaskOutput, TaskResult, TerminationType,
    Verdict, VerdictDecision, WorkerKind,
};
use serde::Serialize;

use crate::calibration::{Basis, Calibration, Key};

/// What the estimate assumes about replies and tokens.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Assumptions {
    /// Expected completion tokens of one reply without a calibration.
    pub reply_tokens: u32,
    /// Characters per token.
    pub chars_per_token: f64,
    /// The operator's completion cap (`max_tokens`), for participants without `maxTokens`.
    pub operator_max_tokens: u32,
    /// Completion tokens of past debates' calls (empty: every reply assumed).
    #[serde(skip)]
    pub calibration: Calibration,
}

impl Default for Assumptions {
    fn default() -> Self {
        Self {
            reply_tokens: 400,
            chars_per_token: 4.0,
            operator_max_tokens: parley_protocol::limits::DEFAULT_MAX_TOKENS,
            calibration: Calibration::default(),
        }
    }
}

/// Tokens the chat format adds to each message (role and separators) for OpenAI models.
const CHAT_TOKENS_PER_MESSAGE: u64 = 4;

/// Min, expected and max of one figure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Range<T> {
    pub min: T,
    pub expected: T,
    pub max: T,
}

/// One participant's (or the total) estimate.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Line {
    pub id: String,
    pub model: String,
    pub provider: String,
    pub calls: Range<u64>,
    pub tokens: Range<u64>,
    /// Dollars; `null` when the model has no price (unknown).
    pub cost_usd: Range<Option<f64>>,
}

/// The whole estimate.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    /// Calls per kind (`proposal`, `critique`, `refinement`, `summary`, `clarification`,
    /// `evaluation`, `verdict`, `vote`, `judgeSummary`, `synthesis`).
    pub calls: BTreeMap<String, Range<u64>>,
    pub participants: Vec<Line>,
    pub total: Line,
    /// Per provider/model and kind of call, the reply length the expected run used and
    /// whether it was calibrated from past debates or assumed.
    pub completions: Vec<Basis>,
    pub assumptions: Assumptions,
}

/// One call the simulated debate made.
#[derive(Debug, Clone)]
struct Call {
    participant: String,
    kind: &'static str,
    prompt_tokens: u64,
    completion_tokens: u64,
    /// What the reply's length was based on (none for embeddings).
    basis: Option<Basis>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Min,
    Expected,
    Max,
}

fn kind_name(k: TaskKind) -> &'static str {
    match k {
        TaskKind::Clarify => "clarification",
        TaskKind::Propose => "proposal",
        TaskKind::Critique => "critique",
        TaskKind::Refine => "refinement",
        TaskKind::Summarize => "summary",
        TaskKind::Evaluate => "evaluation",
        TaskKind::Verdict => "verdict",
        TaskKind::Vote => "vote",
        TaskKind::Embed => "embedding",
        TaskKind::JudgeSummarize => "judgeSummary",
        TaskKind::Synthesize => "synthesis",
    }
}

/// The most tasks a simulation runs (far above any valid spec's: 12 agents × 20 rounds).
const MAX_SIMULATED_TASKS: usize = 200_000;

/// Why a debate could not be estimated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EstimateError {
    /// A worker's prompt builder refused a task the machine made (what it lacks).
    #[error(transparent)]
    Prompt(#[from] parley_protocol::PromptError),
    /// The simulated debate did not end within [`MAX_SIMULATED_TASKS`] calls.
    #[error("the debate did not end within {max} simulated calls", max = MAX_SIMULATED_TASKS)]
    NoEnd,
}

/// Estimates `spec` (already validated) under `prices`; `provider_of` names the provider
/// each participant's calls go to.
pub fn estimate(
    spec: &DebateSpec,
    prices: &PriceTable,
    provider_of: &dyn Fn(&AgentConfig) -> String,
    a: &Assumptions,
) -> Result<Estimate, EstimateError> {
    let runs = [
        simulate(spec, Scenario::Min, a, provider_of)?,
        simulate(spec, Scenario::Expected, a, provider_of)?,
        simulate(spec, Scenario::Max, a, provider_of)?,
    ];
    let completions: BTreeMap<(String, String, String), Basis> = runs[1]
        .iter()
        .filter_map(|c| c.basis.clone())
        .map(|b| ((b.provider.clone(), b.model.clone(), b.kind.clone()), b))
        .collect();
    let mut calls: BTreeMap<String, Range<u64>> = BTreeMap::new();
    let participants: Vec<&AgentConfig> = spec
        .active_agents()
        .chain(std::iter::once(&spec.judge))
        .collect();
    let mut lines: Vec<Line> = participants
        .iter()
        .map(|p| Line {
            id: p.id.clone(),
            model: p.model.clone(),
            provider: provider_of(p),
            cost_usd: Range {
                min: Some(0.0),
                expected: Some(0.0),
                max: Some(0.0),
            },
            ..Default::default()
        })
        .collect();
    for (s, run) in runs.iter().enumerate() {
        for c in run {
            *slot(calls.entry(c.kind.to_string()).or_default(), s) += 1;
            let Some(i) = lines.iter().position(|l| l.id == c.participant) else {
                continue;
            };
            let line = &mut lines[i];
            *slot(&mut line.calls, s) += 1;
            *slot(&mut line.tokens, s) += c.prompt_tokens + c.completion_tokens;
            let cost = prices
                .price_of(&line.provider, &line.model)
                .map(|p| p.cost(c.prompt_tokens, 0, c.completion_tokens));
            let into = slot(&mut line.cost_usd, s);
            *into = parley_protocol::add_cost(*into, cost);
        }
    }
    // A participant that makes no call costs nothing, priced or not.
    for (line, p) in lines.iter_mut().zip(&participants) {
        if prices.price_of(&line.provider, &p.model).is_none() {
            let unknown_if = |n: u64| (n == 0).then_some(0.0);
            line.cost_usd = Range {
                min: unknown_if(line.calls.min),
                expected: unknown_if(line.calls.expected),
                max: unknown_if(line.calls.max),
            };
        }
    }
    let mut total = Line {
        id: "total".into(),
        cost_usd: Range {
            min: Some(0.0),
            expected: Some(0.0),
            max: Some(0.0),
        },
        ..Default::default()
    };
    for l in &lines {
        total.calls.min += l.calls.min;
        total.calls.expected += l.calls.expected;
        total.calls.max += l.calls.max;
        total.tokens.min += l.tokens.min;
        total.tokens.expected += l.tokens.expected;
        total.tokens.max += l.tokens.max;
        total.cost_usd.min = parley_protocol::add_cost(total.cost_usd.min, l.cost_usd.min);
        total.cost_usd.expected =
            parley_protocol::add_cost(total.cost_usd.expected, l.cost_usd.expected);
        total.cost_usd.max = parley_protocol::add_cost(total.cost_usd.max, l.cost_usd.max);
    }
    Ok(Estimate {
        calls,
        participants: lines,
        total,
        completions: completions.into_values().collect(),
        assumptions: a.clone(),
    })
}

/// The min (0), expected (1) or max (2) figure of `r`.
fn slot<T>(r: &mut Range<T>, s: usize) -> &mut T {
    match s {
        0 => &mut r.min,
        1 => &mut r.expected,
        _ => &mut r.max,
    }
}

impl Estimate {
    /// The estimate as a text table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let kinds: Vec<String> = self
            .calls
            .iter()
            .map(|(k, r)| {
                if r.min == r.max {
                    format!("{} {k}", r.expected)
                } else {
                    format!("{}-{} {k}", r.min, r.max)
                }
            })
            .collect();
        out.push_str(&format!("Calls: {}\n\n", kinds.join(", ")));
        out.push_str(&format!(
            "{:<14} {:<22} {:>9} {:>26} {:>32}\n",
            "participant", "model", "calls", "tokens min/exp/max", "cost min/exp/max"
        ));
        for l in self.participants.iter().chain(std::iter::once(&self.total)) {
            let calls = if l.calls.min == l.calls.max {
                l.calls.expected.to_string()
            } else {
                format!("{}-{}", l.calls.min, l.calls.max)
            };
            let model = if l.model.is_empty() {
                String::new()
            } else {
                format!("{}/{}", l.provider, l.model)
            };
            out.push_str(&format!(
                "{:<14} {:<22} {:>9} {:>26} {:>32}\n",
                parley_protocol::preview(&l.id, 14),
                parley_protocol::preview(&model, 22),
                calls,
                format!("{}/{}/{}", l.tokens.min, l.tokens.expected, l.tokens.max),
                format!(
                    "{}/{}/{}",
                    parley_protocol::format_cost(l.cost_usd.min),
                    parley_protocol::format_cost(l.cost_usd.expected),
                    parley_protocol::format_cost(l.cost_usd.max)
                ),
            ));
        }
        if !self.completions.is_empty() {
            out.push_str("\nReplies (completion tokens of one call):\n");
        }
        for b in &self.completions {
            let figure = if b.basis == "calibrated" {
                format!("{} ± {}", b.mean_tokens, b.spread_tokens)
            } else {
                b.mean_tokens.to_string()
            };
            out.push_str(&format!(
                "  {:<13} {:<22} {:>11}  {}\n",
                b.kind,
                parley_protocol::preview(&format!("{}/{}", b.provider, b.model), 22),
                figure,
                b.note
            ));
        }
        out.push_str(&format!(
            "\nExpected: every round, each reply as listed (calibrated: the mean of past calls; \
             assumed: {} tokens); min: one-token replies (calibrated: the mean less twice the \
             spread) and the earliest stop; max: every reply at its completion cap \
             (calibrated: the mean plus twice the spread). Prompt tokens at {} characters per \
             token, OpenAI-family models with their tokenizer (max: a token per prompt byte).\n",
            self.assumptions.reply_tokens, self.assumptions.chars_per_token
        ));
        out
    }
}

/// Drives the machine to its end with made-up replies; returns every call it made.
fn simulate(
    spec: &DebateSpec,
    s: Scenario,
    a: &Assumptions,
    provider_of: &dyn Fn(&AgentConfig) -> String,
) -> Result<Vec<Call>, EstimateError> {
    let now = Utc
        .with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or_else(Utc::now);
    let mut m = Machine::new("deb-20000101-000000-estim8".into(), spec.clone(), now);
    let mut calls = Vec::new();
    let mut queue: std::collections::VecDeque<Task> = Default::default();
    let mut fx = m.handle(Input::Start, now);
    let mut asked = 0u64;
    for _ in 0..MAX_SIMULATED_TASKS {
        queue.extend(fx.drain(..).filter_map(|e| match e {
            Effect::Dispatch(t) => Some(t),
            _ => None,
        }));
        let Some(task) = queue.pop_front() else {
            if m.state().status == DebateStatus::AwaitingClarifications {
                let answers: Vec<Answer> =
                    parley_protocol::pending_clarifications(&m.state().clarifications)
                        .iter()
                        .flat_map(|g| &g.items)
                        .map(|i| Answer {
                            id: i.id.clone(),
                            answer: String::new(),
                        })
                        .collect();
                fx = m.handle(Input::Answers(answers), now);
                continue;
            }
            // A human participant's turn: a person answers it, at no cost.
            if let Some(t) = m.open_human_tasks().first() {
                let text = match t.kind {
                    TaskKind::Vote => spec
                        .active_agents()
                        .find(|a| a.id != t.agent_id)
                        .map_or_else(String::new, |a| a.id.clone()),
                    _ => "a person's answer".to_string(),
                };
                let c = parley_engine::Contribute {
                    agent_id: Some(t.agent_id.clone()),
                    task_id: Some(t.task_id.clone()),
                    text,
                    by: None,
                };
                fx = m.handle(Input::Contribute(c), now);
                continue;
            }
            return Ok(calls);
        };
        let messages = match task.kind.worker() {
            // Embeddings: every refinement embedded is prompt.
            _ if task.kind == TaskKind::Embed => Ok(task
                .input
                .candidates
                .iter()
                .chain(&task.input.previous)
                .map(|p| parley_llm::ChatMessage::user(p.content.clone()))
                .collect()),
            WorkerKind::Agent => parley_agent_worker::build_messages(&task),
            WorkerKind::Judge => parley_judge_worker::build_messages(&task),
        }
        .map_err(EstimateError::Prompt)?;
        let cpt = a.chars_per_token.max(0.5);
        let enc = parley_engine::tokens::Encoding::of_model(&task.agent.model);
        let prompt_tokens: u64 = messages
            .iter()
            .map(|msg| match (s, enc) {
                (Scenario::Max, _) => msg.content.len() as u64 + 8,
                (_, Some(enc)) => enc.count(&msg.content) + CHAT_TOKENS_PER_MESSAGE,
                _ => (msg.content.chars().count() as f64 / cpt).ceil() as u64,
            })
            .sum();
        let cap = completion_cap(&task.agent, a.operator_max_tokens);
        let basis = (task.kind != TaskKind::Embed).then(|| {
            let key = Key {
                provider: provider_of(&task.agent),
                model: task.agent.model.clone(),
                kind: kind_name(task.kind).to_string(),
            };
            a.calibration.basis(&key, a.reply_tokens)
        });
        let calibrated = basis.as_ref().filter(|b| b.basis == "calibrated");
        let clamp = |t: u64| u32::try_from(t).unwrap_or(u32::MAX).clamp(1, cap.max(1));
        let reply_tokens = match (s, calibrated) {
            _ if task.kind == TaskKind::Embed => 0,
            (Scenario::Min, Some(b)) => clamp(b.mean_tokens.saturating_sub(2 * b.spread_tokens)),
            (Scenario::Min, None) => 1,
            (Scenario::Expected, Some(b)) => clamp(b.mean_tokens),
            (Scenario::Expected, None) => a.reply_tokens.min(cap),
            (Scenario::Max, Some(b)) => clamp(b.mean_tokens + 2 * b.spread_tokens),
            (Scenario::Max, None) => cap,
        };
        let reply_chars = (f64::from(reply_tokens) * cpt) as usize;
        calls.push(Call {
            participant: task.agent.id.clone(),
            kind: kind_name(task.kind),
            prompt_tokens,
            completion_tokens: u64::from(reply_tokens),
            basis,
        });
        asked += 1;
        let output = made_up_output(&task, s, reply_chars, spec, asked);
        let result = TaskResult {
            schema_version: parley_protocol::SCHEMA_VERSION,
            task_id: task.id.clone(),
            debate_id: task.debate_id.clone(),
            attempt: task.attempt,
            worker: "estimate".into(),
            outcome: TaskOutcome::Ok(output),
        };
        fx = m.handle(Input::Result(result), now);
    }
    Err(EstimateError::NoEnd)
}

/// A reply of `chars` characters for `task`, shaped as its kind needs.
fn made_up_output(task: &Task, s: Scenario, chars: usize, spec: &DebateSpec, n: u64) -> TaskOutput {
    let text: String = "lorem ipsum dolor sit amet "
        .chars()
        .cycle()
        .take(chars.max(1))
        .collect();
    let mut out = TaskOutput {
        content: text.clone(),
        metadata: ContributionMetadata {
            model: task.agent.model.clone(),
            ..Default::default()
        },
        ..Default::default()
    };
    match task.kind {
        TaskKind::Evaluate => {
            let early = matches!(
                spec.debate.termination_condition.kind,
                TerminationType::Convergence | TerminationType::Quality
            );
            out.confidence = Some(if s == Scenario::Min && early {
                100.0
            } else {
                0.0
            });
        }
        TaskKind::Verdict => {
            // Min: the judge agrees at once (the adaptive short path, the earliest stop);
            // otherwise it never does (every round runs).
            let done = s == Scenario::Min;
            out.verdict = Some(Verdict {
                verdict: if done {
                    VerdictDecision::Done
                } else {
                    VerdictDecision::Continue
                },
                confidence: if done { 100.0 } else { 0.0 },
                reasoning: text,
                open_issues: Vec::new(),
                valid: true,
            });
        }
        TaskKind::Embed => {
            // Min: every refinement repeats the one before (the earliest stop, round 2)
            // and the proposals agree (the adaptive short path); otherwise none does
            // (every round runs).
            let same = if s == Scenario::Min { 1.0 } else { 0.0 };
            out.similarity = Some(parley_protocol::Similarity {
                per_agent: task
                    .input
                    .previous
                    .iter()
                    .map(|p| (p.agent_id.clone(), same))
                    .collect(),
                across_agents: Some(same),
            });
        }
        TaskKind::Vote => {
            let other = task
                .input
                .candidates
                .first()
                .map(|c| c.agent_id.clone())
                .unwrap_or_default();
            out.vote = Some(parley_protocol::Ballot {
                vote: other,
                reason: text,
            });
        }
        TaskKind::Synthesize => {
            out.solution = Some(Solution::text_only(text, task.agent.id.clone()));
        }
        TaskKind::Clarify if s == Scenario::Max => {
            let most = task.input.max_questions.unwrap_or(0);
            out.questions = (0..most)
                .map(|q| format!("question {n}-{q}: {}", &text[..text.len().min(200)]))
                .collect();
        }
        _ => {}
    }
    out
}
