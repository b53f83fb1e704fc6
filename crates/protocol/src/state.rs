//! [`DebateState`]: a debate as saved, in dialectic's camelCase shape.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::{default_schema_version, PromptSources};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DebateStatus {
    Pending,
    Running,
    /// Suspended before round 1 until the user answers the agents' clarification
    /// questions: no task is outstanding and no deadline runs (dialectic's
    /// `suspendedAtNode: "clarification"`).
    #[serde(rename = "awaiting_clarifications")]
    AwaitingClarifications,
    Completed,
    Failed,
    Cancelled,
}

impl DebateStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Cancelled)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::AwaitingClarifications => "awaiting_clarifications",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContributionType {
    Proposal,
    Critique,
    Refinement,
}

impl ContributionType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proposal => "proposal",
            Self::Critique => "critique",
            Self::Refinement => "refinement",
        }
    }
}

/// What one LLM call cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContributionMetadata {
    pub tokens_used: u64,
    pub latency_ms: u64,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Set on round ≥ 2 proposals that carry over the previous refinement (no LLM call).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub carried_over: bool,
    /// The tool calls the agent made for this contribution, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRecord>,
    /// Prompt tokens the provider read from its prompt cache (priced as such).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_prompt_tokens: Option<u64>,
    /// Dollars the call cost, from the provider's reported usage and the operator's prices;
    /// absent when the model has no price (unknown, never guessed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Written by a person (a human participant): no model, no tokens, no cost;
    /// `latencyMs` is how long the person took.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub human: bool,
}

/// One tool call of a contribution: which tool, its arguments as the model sent them (cut
/// to [`ToolCallRecord::MAX_ARGUMENTS_CHARS`]), the size of the result given back, and
/// whether it was an error (with the error text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    pub tool: String,
    pub arguments: String,
    pub result_bytes: usize,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ToolCallRecord {
    /// Characters of the arguments kept in a record.
    pub const MAX_ARGUMENTS_CHARS: usize = 500;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Contribution {
    pub agent_id: String,
    pub agent_role: String,
    #[serde(rename = "type")]
    pub kind: ContributionType,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_agent_id: Option<String>,
    pub metadata: ContributionMetadata,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryMetadata {
    pub before_chars: usize,
    pub after_chars: usize,
    pub method: String,
    pub timestamp: DateTime<Utc>,
    pub latency_ms: u64,
    pub tokens_used: u64,
    pub model: String,
    /// Dollars the summary cost (absent: unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DebateSummary {
    pub agent_id: String,
    pub agent_role: String,
    pub summary: String,
    pub metadata: SummaryMetadata,
}

/// The judge's confidence after a round (convergence / quality termination).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoundEvaluation {
    pub confidence: f64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
    pub metadata: ContributionMetadata,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DebateRound {
    pub round_number: u32,
    pub contributions: Vec<Contribution>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub summaries: BTreeMap<String, DebateSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<RoundEvaluation>,
    /// The judge's verdict on this round (`terminationCondition.type: "verdict"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<RoundVerdict>,
    /// The similarities of this round's refinements (`terminationCondition.type:
    /// "similarity"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similarity: Option<RoundSimilarity>,
    /// Critiques given up after their retry budget (`debate.onAgentFailure: "drop"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedCritique>,
    pub timestamp: DateTime<Utc>,
}

/// How alike a round's refinements are (cosine similarity of their embeddings).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Similarity {
    /// Agent id → cosine(its refinement of this round, of the round before); empty in
    /// round 1. An agent missing a refinement the round before is left out.
    #[serde(default)]
    pub per_agent: BTreeMap<String, f64>,
    /// The mean pairwise cosine of this round's refinements (`None` with one agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub across_agents: Option<f64>,
}

impl Similarity {
    /// The least self-similarity (`None` before round 2).
    pub fn min_per_agent(&self) -> Option<f64> {
        self.per_agent.values().copied().reduce(f64::min)
    }

    /// The change fell under the threshold: every one of `agents` has a self-similarity
    /// of at least `threshold`.
    pub fn converged(&self, agents: &[&str], threshold: f64) -> bool {
        !agents.is_empty()
            && agents
                .iter()
                .all(|a| self.per_agent.get(*a).is_some_and(|s| *s >= threshold))
    }
}

/// A round's [`Similarity`] as recorded in the state, with the threshold it was held to
/// and the embedding call's usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoundSimilarity {
    #[serde(flatten)]
    pub similarity: Similarity,
    pub threshold: f64,
    /// Whether the debate stopped on it.
    pub converged: bool,
    pub metadata: ContributionMetadata,
}

/// A critique that was dropped instead of failing the debate: who would have critiqued
/// whom, and why it did not arrive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DroppedCritique {
    pub task_id: String,
    pub agent_id: String,
    pub target_agent_id: String,
    pub error: String,
    pub attempts: u32,
    pub at: DateTime<Utc>,
}

impl DebateRound {
    pub fn new(round_number: u32, now: DateTime<Utc>) -> Self {
        Self {
            round_number,
            contributions: Vec::new(),
            summaries: BTreeMap::new(),
            evaluation: None,
            verdict: None,
            similarity: None,
            dropped: Vec::new(),
            timestamp: now,
        }
    }

    /// Whether the critique by `agent_id` of `target`'s proposal was dropped.
    pub fn dropped_critique(&self, agent_id: &str, target: &str) -> bool {
        self.dropped
            .iter()
            .any(|d| d.agent_id == agent_id && d.target_agent_id == target)
    }

    pub fn find(
        &self,
        kind: ContributionType,
        agent_id: &str,
        target: Option<&str>,
    ) -> Option<&Contribution> {
        self.contributions.iter().find(|c| {
            c.kind == kind && c.agent_id == agent_id && c.target_agent_id.as_deref() == target
        })
    }

    pub fn count(&self, kind: ContributionType) -> usize {
        self.contributions.iter().filter(|c| c.kind == kind).count()
    }
}

/// The judge's decision in a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictDecision {
    Done,
    Continue,
}

/// The judge's structured verdict on a round (or, adaptive, on the proposals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub verdict: VerdictDecision,
    /// 0–100.
    pub confidence: f64,
    #[serde(default)]
    pub reasoning: String,
    /// Points the agents still disagree on; every one of the last verdict's ends up in the
    /// solution's `unresolvedDisagreements`.
    #[serde(default)]
    pub open_issues: Vec<String>,
    /// False when the judge's reply was not the JSON asked for (counted as `continue`,
    /// confidence 0, with a warning).
    #[serde(default = "default_true")]
    pub valid: bool,
}

fn default_true() -> bool {
    true
}

impl Verdict {
    /// What a reply that is not a verdict counts as: continue, confidence 0.
    pub fn unreadable(reasoning: String) -> Self {
        Self {
            verdict: VerdictDecision::Continue,
            confidence: 0.0,
            reasoning,
            open_issues: Vec::new(),
            valid: false,
        }
    }

    /// Whether this verdict ends the debate at `threshold`.
    pub fn is_done_at(&self, threshold: f64) -> bool {
        self.valid && self.verdict == VerdictDecision::Done && self.confidence >= threshold
    }
}

/// A verdict as a round (or the adaptive screen) keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoundVerdict {
    #[serde(flatten)]
    pub verdict: Verdict,
    pub metadata: ContributionMetadata,
}

/// `debate.mode: "adaptive"`: the path taken after the proposals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdaptivePath {
    /// The proposals already agreed: synthesized at once.
    Short,
    /// They did not: the debate went on as configured.
    Full,
}

impl AdaptivePath {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Short => "short",
            Self::Full => "full",
        }
    }
}

/// Which path an adaptive debate took and why: with the judge's verdict on the proposals,
/// or (`terminationCondition.type: "similarity"`) the proposals' similarity across agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdaptiveRecord {
    pub path: AdaptivePath,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<RoundVerdict>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similarity: Option<RoundSimilarity>,
}

impl AdaptiveRecord {
    /// The screen's call (none when the budget skipped it).
    pub fn metadata(&self) -> Option<&ContributionMetadata> {
        self.verdict
            .as_ref()
            .map(|v| &v.metadata)
            .or(self.similarity.as_ref().map(|s| &s.metadata))
            .filter(|m| !m.model.is_empty())
    }
}

/// One agent's ballot (`synthesisMethod: "voting"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Vote {
    pub agent_id: String,
    /// The agent id voted for (as the agent wrote it).
    pub vote: String,
    #[serde(default)]
    pub reason: String,
    /// False: a vote for itself, for an unknown id, or no readable vote; recorded, not
    /// counted.
    pub valid: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    pub metadata: ContributionMetadata,
}

/// The votes of a voting debate and their tally.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VotingRecord {
    pub votes: Vec<Vote>,
    /// Valid votes per agent voted for (set once every vote is in).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counts: BTreeMap<String, u32>,
    /// The plurality winner; none on a tie (the judge picks among `leaders`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winner: Option<String>,
    #[serde(default)]
    pub tie: bool,
    /// The agents with the most valid votes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaders: Vec<String>,
    /// Every vote is in and counted.
    #[serde(default)]
    pub tallied: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Solution {
    pub description: String,
    #[serde(default)]
    pub tradeoffs: Vec<String>,
    #[serde(default)]
    pub recommendations: Vec<String>,
    /// Major requirements of the problem the solution does not meet (dialectic's
    /// `unfulfilledMajorRequirements`); when any, `confidence` is at most
    /// [`Solution::CONFIDENCE_CAP_WHEN_UNMET`].
    #[serde(default)]
    pub unfulfilled_major_requirements: Vec<String>,
    /// Questions the debate left open.
    #[serde(default)]
    pub open_questions: Vec<String>,
    /// Points the agents still disagree on: every open issue of the judge's last verdict
    /// (the judge is asked to list them; the coordinator adds any it omitted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unresolved_disagreements: Vec<String>,
    /// `synthesisMethod: "voting"`: the refinement the solution was written from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on: Option<String>,
    /// 0–100.
    pub confidence: f64,
    pub synthesized_by: String,
}

impl Solution {
    /// The highest confidence a solution that leaves a major requirement unmet may claim.
    pub const CONFIDENCE_CAP_WHEN_UNMET: f64 = 40.0;

    /// A solution that is only text: the judge's reply when it never gave the JSON asked
    /// for (confidence 0, no lists).
    pub fn text_only(description: String, synthesized_by: String) -> Self {
        Self {
            description,
            tradeoffs: Vec::new(),
            recommendations: Vec::new(),
            unfulfilled_major_requirements: Vec::new(),
            open_questions: Vec::new(),
            unresolved_disagreements: Vec::new(),
            based_on: None,
            confidence: 0.0,
            synthesized_by,
        }
    }
}

/// One question an agent asked before round 1, and the user's answer (`"NA"` when the user
/// gave none). `answer` is absent while the question waits for one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClarificationItem {
    /// `<agentId>-q<n>`: unique in the debate, stable across restarts.
    pub id: String,
    pub question: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

/// One agent's clarification questions (dialectic's `clarifications[]` entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentClarifications {
    pub agent_id: String,
    pub agent_name: String,
    pub role: String,
    pub items: Vec<ClarificationItem>,
}

/// The answer written for a question the user left empty (or did not answer in time).
pub const NO_ANSWER: &str = "NA";

/// The groups of `all` reduced to their answered items (groups left empty are dropped):
/// what prompts and reports show.
pub fn answered_clarifications(all: &[AgentClarifications]) -> Vec<AgentClarifications> {
    filter_items(all, |i| i.answer.is_some())
}

/// The groups of `all` reduced to the questions still waiting for an answer.
pub fn pending_clarifications(all: &[AgentClarifications]) -> Vec<AgentClarifications> {
    filter_items(all, |i| i.answer.is_none())
}

fn filter_items(
    all: &[AgentClarifications],
    keep: impl Fn(&ClarificationItem) -> bool,
) -> Vec<AgentClarifications> {
    all.iter()
        .filter_map(|g| {
            let items: Vec<ClarificationItem> =
                g.items.iter().filter(|i| keep(i)).cloned().collect();
            (!items.is_empty()).then(|| AgentClarifications { items, ..g.clone() })
        })
        .collect()
}

/// Answered clarifications as prompt text (empty when there are none): one block per agent,
/// each question followed by its answer.
pub fn clarifications_text(all: &[AgentClarifications]) -> String {
    let mut out = String::new();
    for g in all {
        let answered: Vec<&ClarificationItem> =
            g.items.iter().filter(|i| i.answer.is_some()).collect();
        if answered.is_empty() {
            continue;
        }
        out.push_str(&format!("Asked by {} ({}):\n", g.agent_name, g.role));
        for i in answered {
            out.push_str(&format!(
                "- Q: {}\n  A: {}\n",
                i.question,
                i.answer.as_deref().unwrap_or(NO_ANSWER)
            ));
        }
    }
    out
}

/// The problem as prompts state it: followed by the answered clarifications, when any.
pub fn problem_with_clarifications<'a>(
    problem: &'a str,
    clarifications: &[AgentClarifications],
) -> std::borrow::Cow<'a, str> {
    let text = clarifications_text(clarifications);
    if text.is_empty() {
        std::borrow::Cow::Borrowed(problem)
    } else {
        std::borrow::Cow::Owned(format!(
            "{problem}\n\nClarifications (questions the agents asked before the debate, with the \
             user's answers; NA = no answer):\n{text}"
        ))
    }
}

/// Where a forked debate comes from: its parent and the last round it shares with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkOrigin {
    pub debate_id: String,
    pub round: u32,
}

/// Where and why a debate failed; `retry` resumes from here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DebateFailure {
    pub node: String,
    pub round: u32,
    pub task_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    pub message: String,
    /// How the failing call was classified (provider error, configuration, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<crate::ErrorKind>,
    pub attempts: u32,
    pub at: DateTime<Utc>,
}

/// Engine bookkeeping that must survive a restart: attempts per task id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineRecord {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attempts: BTreeMap<String, u32>,
    /// The last attempt of each task that came back failed. A dispatched attempt that is
    /// not here is still outstanding: a resume sends it again with the same attempt number
    /// (and message id), so a takeover spends no retry budget.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_attempts: BTreeMap<String, u32>,
    /// Attempt number at which a task's current retry budget started (set by `retry`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub budget_start: BTreeMap<String, u32>,
    /// Sequence number of the last event emitted.
    #[serde(default)]
    pub event_seq: u64,
    /// Warnings raised while running (unknown role, missing refinement, unparsable judge reply).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// W3C `traceparent` of the debate's root span, so a resumed debate continues its trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The events of the last transition (an outbox): checkpointed with the state that
    /// produced them and published after it, so a coordinator resuming the debate publishes
    /// those the events stream does not hold yet (its last stored event for the debate
    /// tells) and a crash in between loses none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbox: Vec<crate::DebateEvent>,
    /// Agents whose clarification task of the current iteration has come back.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub clarification_replies: std::collections::BTreeSet<String>,
    /// The clarification phase is over: round 1 may open.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clarifications_done: bool,
    /// When the debate started waiting for answers (an operator's clarification timeout
    /// counts from here, across restarts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting_since: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DebateState {
    #[serde(default = "default_schema_version")]
    pub schema_version: u32,
    pub id: String,
    pub problem: crate::SharedText,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::SharedText>,
    pub status: DebateStatus,
    pub current_round: u32,
    /// Questions the agents asked before round 1, with the user's answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clarifications: Vec<AgentClarifications>,
    /// Clarification iterations started (each asks every agent once).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub clarification_iterations: u32,
    pub rounds: Vec<DebateRound>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_summary: Option<DebateSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_solution: Option<Solution>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesis_metadata: Option<ContributionMetadata>,
    pub prompt_sources: PromptSources,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<DebateFailure>,
    /// Tokens and dollars spent so far, per participant and in total (refreshed after
    /// every result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::Spend>,
    /// The debate's budget and how it was kept (`debate.budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::BudgetRecord>,
    /// `debate.mode: "adaptive"`: the path taken after the proposals and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveRecord>,
    /// `synthesisMethod: "voting"`: the votes, the winner or the tie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voting: Option<VotingRecord>,
    #[serde(default)]
    pub engine: EngineRecord,
    /// Steering: pause, stop, extra rounds, guide notes and who sent each command when.
    #[serde(default, skip_serializing_if = "crate::SteeringRecord::is_empty")]
    pub steering: crate::SteeringRecord,
    /// Human participants: the tasks waiting for a person, those answered and expired.
    #[serde(default, skip_serializing_if = "crate::HumanRecord::is_empty")]
    pub human: crate::HumanRecord,
    /// A fork: the debate it was forked from and the round it shares up to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// The user's verdict on the debate (dialectic's `userFeedback`): 1 thumbs up, -1
    /// thumbs down; any other number read as its sign (0: none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "feedback"
    )]
    pub user_feedback: Option<i8>,
    /// The name of the API key that created the debate (the spec's `owner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The debate's webhooks (the spec's `webhooks`): where its moments are delivered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<crate::WebhookSubscription>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What the owner of a [`DebateState`] knows of which of its rounds changed: a revision
/// number per round (`revs[i]` for `rounds[i]`), drawn from a clock of one owner
/// (`instance`, unique in the process) that moves on every change of a round. A round
/// whose revision is the same as at an earlier look, under the same `instance`, has not
/// changed since: a checkpoint writer need not read it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundRevisions<'a> {
    pub instance: u64,
    pub revs: &'a [u64],
}

fn feedback<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i8>, D::Error> {
    let v = Option::<f64>::deserialize(d)?;
    Ok(v.and_then(|f| {
        if f > 0.0 {
            Some(1)
        } else if f < 0.0 {
            Some(-1)
        } else {
            None
        }
    }))
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl DebateState {
    pub fn round(&self, n: u32) -> Option<&DebateRound> {
        n.checked_sub(1).and_then(|i| self.rounds.get(i as usize))
    }
    pub fn round_mut(&mut self, n: u32) -> Option<&mut DebateRound> {
        n.checked_sub(1)
            .and_then(|i| self.rounds.get_mut(i as usize))
    }
    /// Sum of tokens over every contribution, summary, evaluation, verdict, vote and the
    /// synthesis.
    pub fn total_tokens(&self) -> u64 {
        let rounds: u64 = self
            .rounds
            .iter()
            .map(|r| {
                r.contributions
                    .iter()
                    .map(|c| c.metadata.tokens_used)
                    .sum::<u64>()
                    + r.summaries
                        .values()
                        .map(|s| s.metadata.tokens_used)
                        .sum::<u64>()
                    + r.evaluation.as_ref().map_or(0, |e| e.metadata.tokens_used)
                    + r.verdict.as_ref().map_or(0, |v| v.metadata.tokens_used)
                    + r.similarity.as_ref().map_or(0, |s| s.metadata.tokens_used)
            })
            .sum();
        let screen = self
            .adaptive
            .as_ref()
            .and_then(AdaptiveRecord::metadata)
            .map_or(0, |m| m.tokens_used);
        let votes: u64 = self
            .voting
            .iter()
            .flat_map(|v| &v.votes)
            .map(|b| b.metadata.tokens_used)
            .sum();
        rounds
            + screen
            + votes
            + self
                .judge_summary
                .as_ref()
                .map_or(0, |s| s.metadata.tokens_used)
            + self
                .synthesis_metadata
                .as_ref()
                .map_or(0, |m| m.tokens_used)
    }
}

/// A new debate id: `deb-YYYYMMDD-HHMMSS-RAND` (RAND: 6 lowercase base-36 chars).
pub fn new_debate_id(now: DateTime<Utc>) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    let rand: String = (0..6)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect();
    format!("deb-{}-{rand}", now.format("%Y%m%d-%H%M%S"))
}

/// Shortest random suffix of a debate id: dialectic's ids end in 4 base-36 characters
/// (`deb-20261124-132750-br56`), Parley's in 6.
pub const MIN_DEBATE_ID_SUFFIX: usize = 4;

/// True when `id` has the shape [`new_debate_id`] produces, or dialectic's (a 4-character
/// suffix): `deb-` 8 digits `-` 6 digits `-` 4 to 6 of `[a-z0-9]`, so at most 26 ASCII
/// bytes, safe in NATS subjects, Redis keys and file names.
pub fn is_valid_debate_id(id: &str) -> bool {
    let b = id.as_bytes();
    (20 + MIN_DEBATE_ID_SUFFIX..=26).contains(&b.len())
        && id.starts_with("deb-")
        && b[4..12].iter().all(u8::is_ascii_digit)
        && b[12] == b'-'
        && b[13..19].iter().all(u8::is_ascii_digit)
        && b[19] == b'-'
        && b[20..]
            .iter()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
}

#[cfg(test)]
mod id_tests {
    use super::*;

    #[test]
    fn parleys_and_dialectics_ids_are_accepted() {
        for id in [
            new_debate_id(Utc::now()),
            "deb-20261124-132750-br56".into(),
            "deb-20261124-132750-br5z9".into(),
            "deb-20261124-132750-abc123".into(),
        ] {
            assert!(is_valid_debate_id(&id), "{id}");
        }
    }

    #[test]
    fn hostile_ids_are_refused() {
        let long = format!("deb-20261124-132750-{}", "a".repeat(4096));
        for id in [
            "",
            "deb-",
            "deb-20261124-132750-",
            "deb-20261124-132750-br5",
            "deb-20261124-132750-abc1234",
            "deb-20261124-132750-BR56",
            "deb-20261124-132750-br.6",
            "deb-20261124-132750-b*56",
            "deb-20261124-132750-b>56",
            "deb-20261124-132750-b 56",
            "deb-20261124-132750-b/56",
            "deb-20261124-132750-../.",
            "deb-20261124-132750-br56\n",
            "deb-20261124-132750-br56.json",
            "deb-20261124-132750-{br5}",
            "deb-20261124-132750-br\u{e9}6",
            "deb-2026112a-132750-br56",
            "deb-20261124_132750-br56",
            "DEB-20261124-132750-br56",
            "../../etc/passwd",
            long.as_str(),
        ] {
            assert!(!is_valid_debate_id(id), "{id:?} accepted");
        }
        // Non-ASCII that would fit the byte count.
        assert!(!is_valid_debate_id("deb-20261124-132750-b\u{e9}5"));
        assert!(!is_valid_debate_id("deb-20261124-132750-\u{1f600}"));
    }
}
