//! The task graph: one table, [`NODES`], of the node kinds a debate runs.
//!
//! Each [`NodeDef`] says who performs the kind's tasks ([`Executor`]), in which part of the
//! debate ([`Phase`]) and how many per round ([`Scope`]), and, as plain functions over the
//! machine: which task ids are valid (`valid`), when a task's inputs exist (`enabled`) and
//! when its output is recorded (`done`), how its [`TaskInput`] is built (`input`), what its
//! result records and so unlocks (`record`), and what the debate gives up when the budget
//! cannot afford it (`over_budget`). The machine's `plan`, `is_done`, `parse_task_id`,
//! `build_task`, `record` and `degrade` (below) iterate or dispatch through the table.
//!
//! The table's order is the plan's order: within a round, each agent's tasks (its nodes in
//! table order, a pair node's targets in agent order), then the judge's.

use chrono::{DateTime, Utc};
use parley_protocol::{
    answered_clarifications, task_id, AdaptivePath, AdaptiveRecord, AgentConfig, Contribution,
    ContributionType, DebateSummary, EventKind, PeerText, RoundEvaluation, Solution,
    SummaryMetadata, Task, TaskInput, TaskKind, TaskOutput, TerminationType, Verdict,
    SCHEMA_VERSION,
};

use super::{Effect, Machine, Planned};

/// When the machine plans a node's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Before round 1; the task id's round is the clarification iteration.
    Clarification,
    /// In a round (the adaptive screen is round 0).
    Round,
    /// After the final round; the task id's round is the final round.
    Closing,
}

/// How many tasks of a node a round has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// One per agent.
    Agent,
    /// One per (agent, target) pair `debate.critique` plans.
    Pair,
    /// One, the judge's.
    Judge,
}

/// Who performs a node's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Executor {
    Agent,
    Judge,
    /// The judge's worker, with `debate.embeddings` (the judge's model without it).
    Embeddings,
}

type Pred = fn(&Machine, &Planned) -> bool;
type Now = DateTime<Utc>;

/// One node kind of the task graph.
pub(super) struct NodeDef {
    pub kind: TaskKind,
    pub phase: Phase,
    pub scope: Scope,
    pub executor: Executor,
    /// Whether this debate issues tasks of this kind in round r (parsing a task id).
    pub valid: fn(&Machine, u32) -> bool,
    /// The task's inputs exist (the plan asks only for tasks not `done`).
    pub enabled: Pred,
    /// The task's output is recorded (or it was given up).
    pub done: Pred,
    pub input: fn(&Machine, &Planned) -> TaskInput,
    /// Stores a result in the state (which enables what depends on it).
    pub record: fn(&mut Machine, &Planned, TaskOutput, Now, &mut Vec<Effect>),
    /// The budget cannot afford the task: take this kind's step of the degradation order
    /// and return its name (the task id is the third argument).
    pub over_budget: fn(&mut Machine, &Planned, &str, Now, &mut Vec<Effect>) -> &'static str,
}

pub(super) const NODES: &[NodeDef] = &[
    NodeDef {
        kind: TaskKind::Clarify,
        phase: Phase::Clarification,
        scope: Scope::Agent,
        executor: Executor::Agent,
        valid: |m, r| (1..=m.state.clarification_iterations).contains(&r),
        enabled: |m, _| !m.clarifications_settled(),
        done: |m, p| {
            let e = &m.state.engine;
            e.clarifications_done
                || p.round < m.state.clarification_iterations
                || e.clarification_replies.contains(who(m, p))
        },
        input: |m, _| TaskInput {
            max_questions: Some(m.spec.debate.clarifications_max_per_agent),
            ..Default::default()
        },
        record: |m, p, out, now, fx| {
            let exec = m.executor(p).clone();
            m.record_questions(&exec, out.questions, now, fx)
        },
        over_budget: |m, _, _, _, _| {
            m.state.engine.clarifications_done = true;
            "skipClarifications"
        },
    },
    NodeDef {
        kind: TaskKind::Summarize,
        phase: Phase::Round,
        scope: Scope::Agent,
        executor: Executor::Agent,
        valid: in_rounds,
        enabled: |m, p| {
            p.agent
                .is_some_and(|i| m.summary_settled(i, p.round) == Some(false))
        },
        done: |m, p| {
            m.round(p.round)
                .is_some_and(|rd| rd.summaries.contains_key(who(m, p)))
        },
        input: |m, p| match p.agent {
            Some(i) => TaskInput {
                transcript: Some(m.history(i, p.round)),
                max_length: Some(m.summarization_for(Some(i)).max_length),
                ..Default::default()
            },
            None => TaskInput::default(),
        },
        record: record_summary,
        over_budget: skip_summary,
    },
    NodeDef {
        kind: TaskKind::Propose,
        phase: Phase::Round,
        scope: Scope::Agent,
        executor: Executor::Agent,
        valid: in_rounds,
        // Round 1, or no usable refinement to carry over from the round before.
        enabled: |m, p| {
            let fallback = p.round >= 2
                && m.round(p.round - 1)
                    .and_then(|rd| rd.find(ContributionType::Refinement, who(m, p), None))
                    .is_some_and(|c| c.content.trim().is_empty());
            (p.round == 1 || fallback) && settled(m, p)
        },
        done: |m, p| has(m, p.round, ContributionType::Proposal, who(m, p)),
        input: |m, p| TaskInput {
            history: p.agent.and_then(|i| m.history_input(i, p.round)),
            ..Default::default()
        },
        record: |m, p, out, now, fx| {
            if p.round >= 2 {
                let id = &m.executor(p).id;
                let message = format!(
                    "agent {id}: round {} had no usable refinement from round {}; asked for a fresh proposal",
                    p.round,
                    p.round - 1
                );
                m.warn(fx, now, message);
            }
            push(m, p, ContributionType::Proposal, out)
        },
        over_budget: synthesize_now,
    },
    NodeDef {
        kind: TaskKind::Critique,
        phase: Phase::Round,
        scope: Scope::Pair,
        executor: Executor::Agent,
        valid: in_rounds,
        enabled: |m, p| {
            settled(m, p)
                && m.critiques_open(p.round)
                && has(m, p.round, ContributionType::Proposal, target(m, p))
        },
        done: |m, p| {
            m.round(p.round).is_some_and(|rd| {
                rd.find(ContributionType::Critique, who(m, p), Some(target(m, p)))
                    .is_some()
                    || rd.dropped_critique(who(m, p), target(m, p))
            })
        },
        input: |m, p| TaskInput {
            history: p.agent.and_then(|i| m.history_input(i, p.round)),
            proposal: contribution(m, p.round, ContributionType::Proposal, target(m, p)),
            ..Default::default()
        },
        record: |m, p, out, _, _| push(m, p, ContributionType::Critique, out),
        over_budget: |m, p, id, now, fx| {
            let err = parley_protocol::TaskError {
                kind: parley_protocol::ErrorKind::Internal,
                message: "budget: the critique does not fit the debate's budget".into(),
                provider: None,
                retry_after_ms: None,
            };
            m.drop_critique(p, id, 0, &err, now, fx);
            "dropCritiques"
        },
    },
    NodeDef {
        kind: TaskKind::Refine,
        phase: Phase::Round,
        scope: Scope::Agent,
        executor: Executor::Agent,
        valid: in_rounds,
        // Its proposal, and every critique planned for it arrived (or was dropped).
        enabled: |m, p| {
            let (r, id) = (p.round, who(m, p));
            let Some(rd) = m.round(r) else { return false };
            settled(m, p)
                && m.critiques_open(r)
                && rd.find(ContributionType::Proposal, id, None).is_some()
                && m.critique_pairs(r)
                    .iter()
                    .filter(|&&(_, t)| Some(t) == p.agent)
                    .all(|&(k, _)| {
                        let critic = &m.agents[k].id;
                        rd.find(ContributionType::Critique, critic, Some(id))
                            .is_some()
                            || rd.dropped_critique(critic, id)
                    })
        },
        done: |m, p| has(m, p.round, ContributionType::Refinement, who(m, p)),
        input: |m, p| {
            let (r, id) = (p.round, who(m, p));
            TaskInput {
                history: p.agent.and_then(|i| m.history_input(i, r)),
                proposal: contribution(m, r, ContributionType::Proposal, id),
                critiques: m.round(r).map_or_else(Vec::new, |rd| {
                    rd.contributions
                        .iter()
                        .filter(|c| {
                            c.kind == ContributionType::Critique
                                && c.target_agent_id.as_deref() == Some(id)
                        })
                        .map(peer)
                        .collect()
                }),
                ..Default::default()
            }
        },
        record: |m, p, out, _, _| push(m, p, ContributionType::Refinement, out),
        over_budget: synthesize_now,
    },
    NodeDef {
        kind: TaskKind::Evaluate,
        phase: Phase::Round,
        scope: Scope::Judge,
        executor: Executor::Judge,
        valid: in_rounds,
        enabled: |m, p| {
            matches!(
                m.termination(),
                TerminationType::Convergence | TerminationType::Quality
            ) && m.round_check_due(p.round)
        },
        done: |m, p| m.round(p.round).is_some_and(|rd| rd.evaluation.is_some()),
        input: |m, p| TaskInput {
            transcript: Some(m.round_transcript(p.round)),
            ..Default::default()
        },
        record: |m, p, out, _, _| {
            if let Some(rd) = m.round_mut(p.round) {
                rd.evaluation = Some(RoundEvaluation {
                    confidence: out.confidence.unwrap_or(0.0),
                    reasoning: out.content,
                    metadata: out.metadata,
                });
            }
        },
        over_budget: no_new_round,
    },
    // After round r (`terminationCondition.type: "verdict"`); round 0 is the adaptive
    // screen of round 1's proposals (`debate.mode: "adaptive"`).
    NodeDef {
        kind: TaskKind::Verdict,
        phase: Phase::Round,
        scope: Scope::Judge,
        executor: Executor::Judge,
        valid: |m, r| {
            (r == 0 && m.screen() == Some(TaskKind::Verdict))
                || (in_rounds(m, r) && m.termination() == TerminationType::Verdict)
        },
        enabled: |m, p| match p.round {
            0 => m.screen() == Some(TaskKind::Verdict) && m.screen_due(),
            r => m.termination() == TerminationType::Verdict && m.round_check_due(r),
        },
        done: |m, p| match p.round {
            0 => m.state.adaptive.is_some(),
            r => m.round(r).is_some_and(|rd| rd.verdict.is_some()),
        },
        input: |m, p| TaskInput {
            transcript: Some(m.round_transcript(p.round.max(1))),
            ..Default::default()
        },
        record: |m, p, out, now, fx| m.record_verdict(p.round, out, now, fx),
        over_budget: |m, p, id, now, fx| {
            if p.round > 0 {
                return no_new_round(m, p, id, now, fx);
            }
            // The screen does not fit: debate as configured.
            let verdict = Verdict::unreadable("not asked: over the debate's budget".into());
            m.choose_path(verdict, Default::default(), now, fx);
            "skipScreen"
        },
    },
    NodeDef {
        kind: TaskKind::Embed,
        phase: Phase::Round,
        scope: Scope::Judge,
        executor: Executor::Embeddings,
        valid: |m, r| {
            (r == 0 && m.screen() == Some(TaskKind::Embed))
                || (in_rounds(m, r) && m.termination() == TerminationType::Similarity)
        },
        enabled: |m, p| match p.round {
            0 => m.screen() == Some(TaskKind::Embed) && m.screen_due(),
            r => m.termination() == TerminationType::Similarity && m.round_check_due(r),
        },
        done: |m, p| match p.round {
            0 => m.state.adaptive.is_some(),
            r => m.round(r).is_some_and(|rd| rd.similarity.is_some()),
        },
        input: |m, p| {
            if p.round == 0 {
                // The adaptive screen: round 1's proposals against each other.
                let proposals = m.round(1).map_or_else(Vec::new, |rd| {
                    m.agents
                        .iter()
                        .filter_map(|a| rd.find(ContributionType::Proposal, &a.id, None))
                        .map(peer)
                        .collect()
                });
                return TaskInput {
                    candidates: proposals,
                    ..Default::default()
                };
            }
            let refinements = |r: u32| -> Vec<PeerText> {
                let Some(rd) = m.round(r) else {
                    return Vec::new();
                };
                m.agents
                    .iter()
                    .filter_map(|a| rd.find(ContributionType::Refinement, &a.id, None))
                    .map(peer)
                    .collect()
            };
            TaskInput {
                candidates: refinements(p.round),
                previous: refinements(p.round.saturating_sub(1)),
                ..Default::default()
            }
        },
        record: |m, p, out, now, fx| m.record_similarity(p.round, out, now, fx),
        over_budget: |m, p, id, now, fx| {
            if p.round > 0 {
                return no_new_round(m, p, id, now, fx);
            }
            // The screen does not fit: debate as configured.
            let reason = "the proposals were not compared: over the debate's budget; \
                          debating as configured";
            m.state.adaptive = Some(AdaptiveRecord {
                path: AdaptivePath::Full,
                reason: reason.into(),
                verdict: None,
                similarity: None,
            });
            let path = AdaptivePath::Full;
            let reason = reason.into();
            m.emit(fx, now, EventKind::AdaptivePathChosen { path, reason });
            "skipScreen"
        },
    },
    NodeDef {
        kind: TaskKind::Vote,
        phase: Phase::Closing,
        scope: Scope::Agent,
        executor: Executor::Agent,
        valid: |m, r| in_rounds(m, r) && m.spec.debate.voting(),
        enabled: |m, _| m.finished() && m.votes_due() && !m.votes_tallied(),
        done: |m, p| {
            m.state
                .voting
                .as_ref()
                .is_some_and(|v| v.votes.iter().any(|b| b.agent_id == who(m, p)))
        },
        // Its own final refinement and the others' to choose from.
        input: |m, p| {
            let own = who(m, p);
            let last = |a: &AgentConfig| {
                m.round(p.round).and_then(|rd| {
                    rd.find(ContributionType::Refinement, &a.id, None)
                        .or_else(|| rd.find(ContributionType::Proposal, &a.id, None))
                })
            };
            let (mine, others): (Vec<&AgentConfig>, Vec<&AgentConfig>) =
                m.agents.iter().partition(|a| a.id == own);
            TaskInput {
                proposal: mine.into_iter().find_map(last).map(peer),
                candidates: others.into_iter().filter_map(last).map(peer).collect(),
                ..Default::default()
            }
        },
        record: |m, p, out, now, fx| {
            let exec = m.executor(p).clone();
            m.record_vote(&exec, out, now, fx)
        },
        over_budget: synthesize_now,
    },
    NodeDef {
        kind: TaskKind::JudgeSummarize,
        phase: Phase::Closing,
        scope: Scope::Judge,
        executor: Executor::Judge,
        valid: in_rounds,
        enabled: |m, _| {
            !m.short_path() && m.finished() && m.votes_settled() && m.judge_summary_due()
        },
        done: |m, _| m.state.judge_summary.is_some(),
        input: |m, _| TaskInput {
            transcript: Some(m.final_transcript()),
            max_length: Some(m.summarization_for(None).max_length),
            ..Default::default()
        },
        record: record_summary,
        over_budget: skip_summary,
    },
    NodeDef {
        kind: TaskKind::Synthesize,
        phase: Phase::Closing,
        scope: Scope::Judge,
        executor: Executor::Judge,
        valid: in_rounds,
        // Over budget or stopped: with what exists, once nothing else is out.
        enabled: |m, _| {
            if m.synthesizing_now() {
                return m.in_flight.is_empty() && m.backing_off.is_empty();
            }
            m.short_path() || (m.finished() && m.votes_settled() && !m.judge_summary_due())
        },
        done: |m, _| m.state.final_solution.is_some(),
        input: |m, _| {
            let mut t = match &m.state.judge_summary {
                Some(s) => s.summary.clone(),
                None => m.final_transcript(),
            };
            if m.state.budget.is_some() {
                // The hold was reserved for this many bytes: keep the newest text.
                let cap = m.synthesis_transcript_cap();
                if t.len() > cap {
                    let mut cut = t.len() - cap;
                    while !t.is_char_boundary(cut) {
                        cut += 1;
                    }
                    t = t.split_off(cut);
                }
            }
            TaskInput {
                transcript: Some(t),
                open_issues: m
                    .last_verdict()
                    .map(|v| v.open_issues.clone())
                    .unwrap_or_default(),
                vote_result: m.vote_result_text(),
                ..Default::default()
            }
        },
        record: |m, p, out, now, fx| {
            let exec = m.executor(p).id.clone();
            let mut solution = out
                .solution
                .unwrap_or_else(|| Solution::text_only(out.content.clone(), exec));
            m.complete_solution(&mut solution, now, fx);
            m.state.final_solution = Some(solution);
            m.state.synthesis_metadata = Some(out.metadata);
        },
        over_budget: synthesize_now,
    },
];

/// The table's entry for `kind`.
pub(super) fn def(kind: TaskKind) -> &'static NodeDef {
    NODES
        .iter()
        .find(|n| n.kind == kind)
        .expect("every task kind has an entry in NODES")
}

/// Rounds 1 up to the newest open one.
fn in_rounds(m: &Machine, r: u32) -> bool {
    r >= 1 && r as usize <= m.state.rounds.len()
}

/// The id of the task's agent ("" for the judge's).
fn who<'a>(m: &'a Machine, p: &Planned) -> &'a str {
    p.agent.map_or("", |i| m.agents[i].id.as_str())
}

/// The id of the task's target ("" without one).
fn target<'a>(m: &'a Machine, p: &Planned) -> &'a str {
    p.target.map_or("", |j| m.agents[j].id.as_str())
}

/// The agent's summary for this round is not due, or present.
fn settled(m: &Machine, p: &Planned) -> bool {
    p.agent
        .is_some_and(|i| m.summary_settled(i, p.round) == Some(true))
}

fn peer(c: &Contribution) -> PeerText {
    PeerText {
        agent_id: c.agent_id.clone(),
        agent_role: c.agent_role.clone(),
        content: c.content.clone(),
    }
}

/// Agent `id`'s contribution of `kind` (no target) in round r.
fn contribution(m: &Machine, r: u32, kind: ContributionType, id: &str) -> Option<PeerText> {
    m.round(r).and_then(|rd| rd.find(kind, id, None)).map(peer)
}

fn has(m: &Machine, r: u32, kind: ContributionType, id: &str) -> bool {
    m.round(r)
        .is_some_and(|rd| rd.find(kind, id, None).is_some())
}

/// Adds the task's output as its agent's contribution of `kind` (to its target, if any).
fn push(m: &mut Machine, p: &Planned, kind: ContributionType, out: TaskOutput) {
    let exec = m.executor(p);
    let c = Contribution {
        agent_id: exec.id.clone(),
        agent_role: exec.role.clone(),
        kind,
        content: out.content,
        target_agent_id: p.target.map(|j| m.agents[j].id.clone()),
        metadata: out.metadata,
    };
    m.push_contribution(p.round, c);
}

/// An agent's summary of its history, or the judge's of the final transcript.
fn record_summary(m: &mut Machine, p: &Planned, out: TaskOutput, now: Now, _: &mut Vec<Effect>) {
    let exec = m.executor(p).clone();
    let before = match p.agent {
        Some(i) => m.history_chars(i, p.round),
        None => m.final_transcript().chars().count(),
    };
    let cfg = m.summarization_for(p.agent);
    let summary: String = out.content.chars().take(cfg.max_length).collect();
    let s = DebateSummary {
        agent_id: exec.id.clone(),
        agent_role: exec.role.clone(),
        metadata: SummaryMetadata {
            before_chars: before,
            after_chars: summary.chars().count(),
            method: cfg.method.clone(),
            timestamp: now,
            latency_ms: out.metadata.latency_ms,
            tokens_used: out.metadata.tokens_used,
            model: out.metadata.model,
            cost_usd: out.metadata.cost_usd,
        },
        summary,
    };
    if p.agent.is_none() {
        m.state.judge_summary = Some(s);
    } else if let Some(rd) = m.round_mut(p.round) {
        rd.summaries.insert(exec.id, s);
    }
}

/// Degradation: no summary; the full history is used.
fn skip_summary(
    m: &mut Machine,
    _: &Planned,
    id: &str,
    _: Now,
    _: &mut Vec<Effect>,
) -> &'static str {
    if let Some(b) = m.state.budget.as_mut() {
        b.skipped.insert(id.to_string());
    }
    "skipSummaries"
}

/// Degradation: no round after this one; the debate synthesizes after it.
fn no_new_round(
    m: &mut Machine,
    p: &Planned,
    _: &str,
    _: Now,
    _: &mut Vec<Effect>,
) -> &'static str {
    if let Some(b) = m.state.budget.as_mut() {
        b.final_round = Some(p.round);
    }
    "noNewRound"
}

/// Degradation: synthesize with what exists, as soon as the calls in flight are back.
fn synthesize_now(
    m: &mut Machine,
    _: &Planned,
    _: &str,
    _: Now,
    _: &mut Vec<Effect>,
) -> &'static str {
    if let Some(b) = m.state.budget.as_mut() {
        b.synthesize_now = true;
    }
    "synthesizeNow"
}

impl Machine {
    /// All tasks whose inputs exist and whose output does not, in a stable order: every
    /// round's (the adaptive screen is round 0), then the closing ones. Over budget (or
    /// stopped) only the synthesis is planned.
    pub(super) fn plan(&self) -> Vec<Planned> {
        let mut out = Vec::new();
        let rounds = self.state.rounds.len() as u32;
        for r in 0..=rounds {
            self.plan_at(Phase::Round, r, &mut out);
        }
        if rounds > 0 {
            self.plan_at(Phase::Closing, rounds, &mut out);
        }
        out
    }

    /// The enabled tasks without an output of `phase`'s nodes in round r: each agent's (in
    /// agent order), then the judge's.
    pub(super) fn plan_at(&self, phase: Phase, r: u32, out: &mut Vec<Planned>) {
        let over = self.synthesizing_now();
        let nodes = || {
            NODES
                .iter()
                .filter(move |n| n.phase == phase && (!over || n.kind == TaskKind::Synthesize))
        };
        let mut push = |n: &NodeDef, agent, target| {
            let p = Planned {
                round: r,
                kind: n.kind,
                agent,
                target,
            };
            // `done` first: it is a lookup, `enabled` may read a history.
            if !(n.done)(self, &p) && (n.enabled)(self, &p) {
                out.push(p);
            }
        };
        let pairs = self.critique_pairs(r);
        for i in 0..self.agents.len() {
            for n in nodes() {
                match n.scope {
                    Scope::Agent => push(n, Some(i), None),
                    Scope::Pair => {
                        for &(_, j) in pairs.range((i, 0)..(i + 1, 0)) {
                            push(n, Some(i), Some(j));
                        }
                    }
                    Scope::Judge => {}
                }
            }
        }
        for n in nodes().filter(|n| n.scope == Scope::Judge) {
            push(n, None, None);
        }
    }

    pub(super) fn is_done(&self, p: &Planned) -> bool {
        (def(p.kind).done)(self, p)
    }

    pub(super) fn task_id_of(&self, p: &Planned) -> String {
        let agent = &self.executor(p).id;
        let target = p.target.map(|j| self.agents[j].id.as_str());
        task_id(&self.state.id, p.round, p.kind, agent, target)
    }

    /// Inverse of [`Self::task_id_of`]; `None` for ids this debate never issues.
    pub(super) fn parse_task_id(&self, id: &str) -> Option<Planned> {
        let rest = id.strip_prefix(&self.state.id)?.strip_prefix('/')?;
        let mut parts = rest.split('/');
        let round: u32 = parts.next()?.parse().ok()?;
        let kind = parts.next()?;
        let node = NODES.iter().find(|n| n.kind.as_str() == kind)?;
        let (who, target) = (parts.next()?, parts.next());
        if parts.next().is_some() || !(node.valid)(self, round) {
            return None;
        }
        let index = |id: &str| self.agents.iter().position(|a| a.id == id);
        let (agent, target) = match (node.scope, target) {
            (Scope::Judge, None) if who == self.spec.judge.id => (None, None),
            (Scope::Agent, None) => (Some(index(who)?), None),
            (Scope::Pair, Some(t)) => {
                let (a, t) = (index(who)?, index(t)?);
                // Only the pairs the topology plans.
                if !self.critique_pairs(round).contains(&(a, t)) {
                    return None;
                }
                (Some(a), Some(t))
            }
            _ => return None,
        };
        Some(Planned {
            round,
            kind: node.kind,
            agent,
            target,
        })
    }

    pub(super) fn build_task(&self, p: &Planned, id: String, attempt: u32) -> Task {
        let node = def(p.kind);
        let mut input = (node.input)(self, p);
        input.clarifications = answered_clarifications(&self.state.clarifications);
        input.guidance = self.state.steering.notes.clone();
        let mut agent = match (node.executor, &self.spec.debate.embeddings) {
            (Executor::Embeddings, Some(e)) => e.as_agent(&self.spec.judge.id),
            _ => self.executor(p).clone(),
        };
        // Under a budget: the completion cap the reservation was fitted to.
        self.limit_for_budget(&id, p.kind, &mut agent, &mut input);
        Task {
            schema_version: SCHEMA_VERSION,
            id,
            debate_id: self.state.id.clone(),
            round: p.round,
            kind: p.kind,
            attempt,
            agent,
            target_agent_id: p.target.map(|j| self.agents[j].id.clone()),
            problem: self.spec.problem.clone(),
            context: self.spec.context.clone(),
            input,
            timeout_ms: self
                .spec
                .debate
                .retry
                .for_node(p.kind.node().as_str())
                .timeout_ms,
            dispatch_token: None,
        }
    }

    /// Stores a task's output in the state.
    pub(super) fn record(&mut self, p: &Planned, out: TaskOutput, now: Now, fx: &mut Vec<Effect>) {
        (def(p.kind).record)(self, p, out, now, fx)
    }

    /// The next task does not fit the budget: take its kind's step of the degradation order
    /// (see [`NodeDef::over_budget`]), record it and announce it. (Before a new round
    /// opens, [`Self::open_rounds_and_carry_over`] also checks that its refinements would
    /// fit, else no new round starts.)
    pub(super) fn degrade(&mut self, p: &Planned, id: String, now: Now, fx: &mut Vec<Effect>) {
        let step = (def(p.kind).over_budget)(self, p, &id, now, fx);
        self.record_degradation(step, p.round, vec![id], now, fx);
    }
}
