//! [`Task`]s the coordinator hands to workers and the [`TaskResult`]s they return.

use serde::{Deserialize, Serialize};

use crate::{default_schema_version, AgentConfig, ContributionMetadata, Solution};

/// The state machine's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Node {
    Initialization,
    Clarification,
    RoundManager,
    Summarization,
    Proposal,
    Critique,
    Refinement,
    Evaluation,
    /// The judge's structured verdict on a round (or on the proposals, adaptive).
    Verdict,
    /// Every agent votes for the best final refinement (`synthesisMethod: "voting"`).
    Vote,
    /// The round's refinements embedded and compared (`terminationCondition.type:
    /// "similarity"`).
    Embedding,
    Synthesis,
    Completed,
    Failed,
}

impl Node {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initialization => "initialization",
            Self::Clarification => "clarification",
            Self::RoundManager => "roundManager",
            Self::Summarization => "summarization",
            Self::Proposal => "proposal",
            Self::Critique => "critique",
            Self::Refinement => "refinement",
            Self::Evaluation => "evaluation",
            Self::Verdict => "verdict",
            Self::Vote => "vote",
            Self::Embedding => "embedding",
            Self::Synthesis => "synthesis",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TaskKind {
    /// Before round 1: an agent's clarification questions about the problem. Its task id's
    /// round is the clarification iteration (1-based).
    Clarify,
    Propose,
    Critique,
    Refine,
    Summarize,
    Evaluate,
    /// The judge's verdict after round r (`terminationCondition.type: "verdict"`); round 0
    /// is the adaptive screen of the round-1 proposals (`debate.mode: "adaptive"`).
    Verdict,
    /// An agent's vote for the best final refinement other than its own; the task id's
    /// round is the final round.
    Vote,
    /// Round r's refinements (and round r-1's) embedded by the judge's worker, which
    /// returns the similarities (`terminationCondition.type: "similarity"`).
    Embed,
    JudgeSummarize,
    Synthesize,
}

/// Which worker pool runs a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerKind {
    Agent,
    Judge,
}

impl WorkerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Judge => "judge",
        }
    }
}

/// Why a worker cannot build a task's prompt: a malformed task (the coordinator never
/// makes one), refused as an invalid request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    /// The task lacks an input its kind needs (`critique task without the proposal to
    /// critique`): the task as the worker names it, and what is missing.
    #[error("{task} task without {missing}")]
    MissingInput {
        task: &'static str,
        missing: &'static str,
    },
    /// The task is not one this worker runs (`vote is not a judge task`).
    #[error(
        "{} is not {} task",
        kind.as_str(),
        match worker { WorkerKind::Agent => "an agent", WorkerKind::Judge => "a judge" }
    )]
    NotThisWorker { kind: TaskKind, worker: WorkerKind },
}

impl PromptError {
    /// The task lacks `missing`.
    pub fn missing(task: &'static str, missing: &'static str) -> Self {
        Self::MissingInput { task, missing }
    }
}

impl TaskKind {
    pub fn node(self) -> Node {
        match self {
            Self::Clarify => Node::Clarification,
            Self::Propose => Node::Proposal,
            Self::Critique => Node::Critique,
            Self::Refine => Node::Refinement,
            Self::Summarize | Self::JudgeSummarize => Node::Summarization,
            Self::Evaluate => Node::Evaluation,
            Self::Verdict => Node::Verdict,
            Self::Vote => Node::Vote,
            Self::Embed => Node::Embedding,
            Self::Synthesize => Node::Synthesis,
        }
    }
    pub fn worker(self) -> WorkerKind {
        match self {
            Self::Clarify
            | Self::Propose
            | Self::Critique
            | Self::Refine
            | Self::Summarize
            | Self::Vote => WorkerKind::Agent,
            Self::Evaluate
            | Self::Verdict
            | Self::Embed
            | Self::JudgeSummarize
            | Self::Synthesize => WorkerKind::Judge,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Clarify => "clarify",
            Self::Propose => "propose",
            Self::Critique => "critique",
            Self::Refine => "refine",
            Self::Summarize => "summarize",
            Self::Evaluate => "evaluate",
            Self::Verdict => "verdict",
            Self::Vote => "vote",
            Self::Embed => "embed",
            Self::JudgeSummarize => "judgeSummarize",
            Self::Synthesize => "synthesize",
        }
    }
}

/// Deterministic task id: `debate/round/node/agent[/target]`.
pub fn task_id(
    debate_id: &str,
    round: u32,
    kind: TaskKind,
    agent: &str,
    target: Option<&str>,
) -> String {
    match target {
        Some(t) => format!("{debate_id}/{round}/{}/{agent}/{t}", kind.as_str()),
        None => format!("{debate_id}/{round}/{}/{agent}", kind.as_str()),
    }
}

/// Another participant's text a prompt refers to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerText {
    pub agent_id: String,
    pub agent_role: String,
    pub content: String,
}

/// Everything a worker needs to build the prompt: workers hold no debate state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskInput {
    /// The agent's perspective so far (its newest summary, or its full history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<String>,
    /// Critique: the target's proposal. Refine: the agent's own proposal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<PeerText>,
    /// Refine: the critiques the agent received.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub critiques: Vec<PeerText>,
    /// Summarize / evaluate / synthesize: the text to work on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
    /// Summaries are cut to this many characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<usize>,
    /// The clarifications answered so far (every task after the clarification phase; a
    /// follow-up clarification task sees the earlier questions and answers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clarifications: Vec<crate::AgentClarifications>,
    /// Clarify: the most questions the agent may ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_questions: Option<u32>,
    /// Vote: the other agents' final refinements to choose from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<PeerText>,
    /// Synthesize: the open issues of the judge's last verdict (each must appear under the
    /// solution's unresolved disagreements).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open_issues: Vec<String>,
    /// Synthesize (voting): the tally — the winner (or the tied leaders for the judge to
    /// pick from) and every vote with its reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vote_result: Option<String>,
    /// Embed: the agents' refinements of the round before (`candidates` holds this
    /// round's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous: Vec<PeerText>,
    /// The user's guide notes so far (steering), stated with the problem in every prompt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guidance: Vec<crate::GuideNote>,
    /// The judge asks once, without the stricter second ask for JSON (a debate under a
    /// budget reserved one call): a reply that is not JSON is read leniently.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub single_ask: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    #[serde(default = "default_schema_version")]
    pub schema_version: u32,
    pub id: String,
    pub debate_id: String,
    pub round: u32,
    pub kind: TaskKind,
    /// 1 for the first dispatch; node-level retries increase it.
    pub attempt: u32,
    /// The agent (or judge) that performs the task.
    pub agent: AgentConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_agent_id: Option<String>,
    pub problem: crate::SharedText,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::SharedText>,
    pub input: TaskInput,
    /// Per-attempt deadline the worker enforces.
    pub timeout_ms: u64,
    /// Proof that the coordinator dispatched this task and attempt: a keyed hash of
    /// `debate/task id/attempt` under the debate's secret (see `parley_cluster::dispatch`).
    /// A worker runs no task whose token does not verify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_token: Option<String>,
}

impl Task {
    /// Bytes of every text this task carries into its prompt: the problem, context,
    /// history, proposal, critiques, transcript, clarifications and the participant's own
    /// prompts. A worker's prompt is at most this plus
    /// [`crate::limits::MAX_PROMPT_TEMPLATE_BYTES`].
    pub fn text_bytes(&self) -> u64 {
        let mut total = 0u64;
        self.for_each_text(&mut |text, extra| {
            total = total.saturating_add(text.len() as u64 + extra);
        });
        total
    }

    /// Calls `f` with every text [`Self::text_bytes`] counts and the bytes of formatting
    /// it counts beside that text (a clarification's numbering, a note's round).
    pub fn for_each_text(&self, f: &mut dyn FnMut(&str, u64)) {
        let i = &self.input;
        let mut peer = |p: &PeerText| {
            f(&p.agent_id, 0);
            f(&p.agent_role, 0);
            f(&p.content, 0);
        };
        if let Some(p) = &i.proposal {
            peer(p);
        }
        i.critiques.iter().for_each(&mut peer);
        i.candidates.iter().for_each(&mut peer);
        i.previous.iter().for_each(&mut peer);
        for g in &i.clarifications {
            f(&g.agent_name, 0);
            f(&g.role, 0);
            for q in &g.items {
                f(&q.question, 16);
                f(q.answer.as_deref().unwrap_or_default(), 0);
            }
        }
        for t in [
            self.agent.system_prompt.as_deref(),
            self.agent.summary_prompt.as_deref(),
            self.agent.clarification_prompt.as_deref(),
            Some(&*self.problem),
            self.context.as_deref(),
            i.history.as_deref(),
            i.vote_result.as_deref(),
            i.transcript.as_deref(),
        ]
        .into_iter()
        .flatten()
        {
            f(t, 0);
        }
        for n in &i.guidance {
            f(&n.note, 16);
        }
        for s in &i.open_issues {
            f(s, 4);
        }
        f(&self.agent.name, 0);
        f(&self.agent.role, 0);
    }

    /// Checks a task as a worker receives it: schema version, ids (the task id must be the
    /// one its fields make), the attempt, the timeout, the participant's fields and the
    /// sizes of its texts. Every problem is reported with its field.
    pub fn validate(&self) -> Result<(), crate::SpecErrors> {
        use crate::limits::*;
        let mut c = crate::spec::Check::default();
        c.envelope(self.schema_version, &self.debate_id);
        c.id("agent.id", &self.agent.id);
        if let Some(t) = &self.target_agent_id {
            c.id("targetAgentId", t);
        }
        let expected = task_id(
            &self.debate_id,
            self.round,
            self.kind,
            &self.agent.id,
            self.target_agent_id.as_deref(),
        );
        if self.id != expected {
            c.push(
                "id",
                format!(
                    "{:?} does not match the task's fields",
                    crate::preview(&self.id, 120)
                ),
            );
        }
        c.range("round", self.round, 0..=MAX_ROUNDS + 1);
        c.range("attempt", self.attempt, 1..=MAX_TASK_ATTEMPT);
        c.range(
            "timeoutMs",
            self.timeout_ms,
            MIN_TASK_TIMEOUT_MS..=MAX_TASK_TIMEOUT_MS,
        );
        c.label("agent.name", &self.agent.name, MAX_NAME_BYTES);
        c.label("agent.role", &self.agent.role, MAX_LABEL_BYTES);
        c.label("agent.model", &self.agent.model, MAX_MODEL_BYTES);
        if self.agent.base_url.is_some() {
            c.push("agent.baseUrl", "a task never carries an endpoint");
        }
        if !(0.0..=2.0).contains(&self.agent.temperature) {
            c.push("agent.temperature", "out of range 0..=2");
        }
        if self.agent.max_tokens == Some(0) {
            c.push("agent.maxTokens", "must be at least 1");
        }
        if let Some(l) = self.agent.tool_call_limit {
            c.range("agent.toolCallLimit", l, 1..=MAX_TOOL_CALL_LIMIT);
        }
        if self.agent.tools.len() > crate::TOOL_NAMES.len() {
            c.push("agent.tools", "more entries than there are tools");
        }
        for (i, t) in self
            .agent
            .tools
            .iter()
            .enumerate()
            .take(crate::TOOL_NAMES.len() + 1)
        {
            if !crate::TOOL_NAMES.contains(&t.name.as_str()) {
                c.push(format!("agent.tools[{i}].name"), "unknown tool");
            }
        }
        c.chars("problem", &self.problem, MAX_PROBLEM_CHARS);
        if let Some(ctx) = &self.context {
            c.chars("context", ctx, MAX_CONTEXT_CHARS);
        }
        for (name, text) in [
            ("agent.systemPrompt", &self.agent.system_prompt),
            ("agent.summaryPrompt", &self.agent.summary_prompt),
            (
                "agent.clarificationPrompt",
                &self.agent.clarification_prompt,
            ),
        ] {
            if let Some(t) = text {
                c.chars(name, t, MAX_PROMPT_CHARS);
            }
        }
        if self.input.critiques.len() > MAX_AGENTS_TOTAL {
            c.push("input.critiques", "more critiques than agents");
        }
        if self.input.candidates.len() > MAX_AGENTS_TOTAL {
            c.push("input.candidates", "more candidates than agents");
        }
        if self.input.open_issues.len() > MAX_OPEN_ISSUES {
            c.push(
                "input.openIssues",
                format!("more than {MAX_OPEN_ISSUES} open issues"),
            );
        }
        if self.input.clarifications.len() > MAX_AGENTS_TOTAL {
            c.push(
                "input.clarifications",
                "more clarification groups than agents",
            );
        }
        let items: usize = self
            .input
            .clarifications
            .iter()
            .map(|g| g.items.len())
            .sum();
        if items > MAX_CLARIFICATION_ITEMS {
            c.push(
                "input.clarifications",
                format!("{items} questions, the limit is {MAX_CLARIFICATION_ITEMS}"),
            );
        }
        if let Some(m) = self.input.max_questions {
            c.range("input.maxQuestions", m, 0..=MAX_CLARIFICATIONS_PER_AGENT);
        }
        if let Some(t) = &self.dispatch_token {
            c.label("dispatchToken", t, MAX_LABEL_BYTES + 64);
        }
        c.into_result()
    }

    /// `Nats-Msg-Id` of this dispatch: the task id plus the attempt, so a re-publish of the
    /// same attempt is dropped by JetStream while a retry is a new message.
    pub fn message_id(&self) -> String {
        format!("{}#{}", self.id, self.attempt)
    }

    /// The small message that goes on the tasks stream for this task (its body is stored
    /// by the coordinator under [`TaskRef::body_field`]).
    pub fn to_ref(&self) -> TaskRef {
        TaskRef {
            schema_version: self.schema_version,
            id: self.id.clone(),
            debate_id: self.debate_id.clone(),
            attempt: self.attempt,
            kind: self.kind,
            dispatch_token: self.dispatch_token.clone(),
        }
    }
}

/// What a task message on `parley.tasks.*` carries: a reference to the [`Task`] the
/// coordinator stored in Redis before publishing (claim check), never the task itself. A
/// task's inputs (history, every critique, transcripts) grow with the debate; the message
/// stays a few hundred bytes whatever the debate's size, far under NATS's `max_payload`.
///
/// The dispatch token covers the reference: it is the HMAC of exactly the fields a
/// reference names (debate id, task id, attempt; see `parley_cluster::dispatch`), the same
/// token the stored body carries. A worker verifies it on the reference before it reads
/// the body, then runs the body only if its ids and attempt are the reference's. The body
/// itself needs no signature: only the services can write Redis, and the body is read
/// from the field the verified reference names (`<task id>#<attempt>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRef {
    #[serde(default = "default_schema_version")]
    pub schema_version: u32,
    pub id: String,
    pub debate_id: String,
    pub attempt: u32,
    pub kind: TaskKind,
    /// The token of this dispatch (see [`Task::dispatch_token`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_token: Option<String>,
}

impl TaskRef {
    /// The field of the debate's task-body hash holding this attempt's [`Task`] JSON (and
    /// the `Nats-Msg-Id` of its message): `<task id>#<attempt>`.
    pub fn body_field(&self) -> String {
        format!("{}#{}", self.id, self.attempt)
    }

    /// Checks a reference as a worker receives it: schema version, the ids (the task id
    /// within the debate), the attempt and the token's size.
    pub fn validate(&self) -> Result<(), crate::SpecErrors> {
        let mut c = crate::spec::Check::default();
        c.envelope(self.schema_version, &self.debate_id);
        if !is_task_id_of(&self.id, &self.debate_id) {
            c.push("id", "not a task id of this debate");
        }
        c.range("attempt", self.attempt, 1..=crate::limits::MAX_TASK_ATTEMPT);
        if let Some(t) = &self.dispatch_token {
            c.label("dispatchToken", t, crate::limits::MAX_LABEL_BYTES + 64);
        }
        c.into_result()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskOutput {
    pub content: String,
    pub metadata: ContributionMetadata,
    /// Synthesize: the parsed solution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solution: Option<Solution>,
    /// Evaluate: the judge's confidence (0–100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// Verdict: the judge's verdict (an unreadable reply comes back as
    /// [`crate::Verdict::unreadable`], with a warning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<crate::Verdict>,
    /// Vote: the agent id voted for and why (`None`: no readable vote, with a warning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vote: Option<Ballot>,
    /// Embed: the round's similarities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similarity: Option<crate::Similarity>,
    /// Clarify: the questions the agent asks (none when its reply held none or could not
    /// be read; a warning then says which).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub questions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// An agent's vote as its worker read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ballot {
    pub vote: String,
    #[serde(default)]
    pub reason: String,
}

/// How a failed call should be treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    RateLimited,
    Server,
    Timeout,
    Network,
    Auth,
    InvalidRequest,
    Malformed,
    Config,
    Internal,
    /// The task (or its result) never came back: its deadline passed, its message exhausted
    /// its deliveries, or the worker shut down on its last delivery. Worth a new attempt.
    Undelivered,
    /// A human participant did not answer its task within the debate's
    /// `humanDeadlineSecs`. Not retried (`parley retry` opens the task again).
    NoAnswer,
}

impl ErrorKind {
    /// Snake-case name, for metrics labels and span attributes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limited",
            Self::Server => "server",
            Self::Timeout => "timeout",
            Self::Network => "network",
            Self::Auth => "auth",
            Self::InvalidRequest => "invalid_request",
            Self::Malformed => "malformed",
            Self::Config => "config",
            Self::Internal => "internal",
            Self::Undelivered => "undelivered",
            Self::NoAnswer => "no_answer",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskError {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The provider asked to wait this long (Retry-After).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl TaskError {
    pub fn retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

// A result lives briefly (decoded, applied, dropped) and is almost always `Ok`: boxing the
// output would cost an allocation per result to save bytes on the rare error.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "status")]
pub enum TaskOutcome {
    Ok(TaskOutput),
    Error(TaskError),
}

/// What a worker publishes on `parley.results.<debateId>`: which result to read, never
/// the result itself; the coordinator takes the content from the Redis record only, and
/// only for a task and attempt it waits for. By default a notice says "a result of this
/// attempt is stored"; `handedBackMs` says instead that the task went back to the queue
/// for that long (rate limit), so the coordinator extends its deadline; `deadLettered`
/// (from the coordinator's dead-letter handler) that the message exhausted its deliveries
/// unanswered; `secretMissing` that a worker found no dispatch secret for the debate in
/// Redis (the task cannot be verified; the worker gives it back to the queue). Each is a
/// hint only: what the coordinator does is bounded by its own state (a deadline moves by
/// at most the clamped hand-back, a dead letter only re-sends the attempt it waits for, a
/// missing secret is put back from the coordinator's own copy, never replaced).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultNotice {
    #[serde(default = "default_schema_version")]
    pub schema_version: u32,
    pub debate_id: String,
    pub task_id: String,
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_back_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dead_lettered: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret_missing: bool,
}

/// The longest hand-back a notice may announce (what the rate limiter clamps a
/// `Retry-After` to).
pub const MAX_HANDED_BACK_MS: u64 = 3_600_000;

impl ResultNotice {
    /// "A result of this attempt is stored in Redis."
    pub fn result(debate_id: &str, task_id: &str, attempt: u32) -> Self {
        Self {
            schema_version: crate::SCHEMA_VERSION,
            debate_id: debate_id.to_string(),
            task_id: task_id.to_string(),
            attempt,
            handed_back_ms: None,
            dead_lettered: false,
            secret_missing: false,
        }
    }

    pub fn of(result: &TaskResult) -> Self {
        Self::result(&result.debate_id, &result.task_id, result.attempt)
    }

    /// Ids of the right shape (the task id within the debate), an attempt ≥ 1.
    pub fn validate(&self) -> Result<(), crate::SpecErrors> {
        let mut c = crate::spec::Check::default();
        if !crate::is_valid_debate_id(&self.debate_id) {
            c.push("debateId", "not a debate id");
        }
        if !is_task_id_of(&self.task_id, &self.debate_id) {
            c.push("taskId", "not a task id of this debate");
        }
        c.range("attempt", self.attempt, 1..=crate::limits::MAX_TASK_ATTEMPT);
        if let Some(ms) = self.handed_back_ms {
            c.range("handedBackMs", ms, 0..=MAX_HANDED_BACK_MS);
        }
        c.into_result()
    }
}

/// Whether `task_id` has the shape of a task id of `debate_id`:
/// `<debate>/<round>/<kind>/<agent>[/<target>]` with valid ids.
pub fn is_task_id_of(task_id: &str, debate_id: &str) -> bool {
    if task_id.len() > 4 * crate::limits::MAX_ID_BYTES + 64 {
        return false;
    }
    let Some(rest) = task_id
        .strip_prefix(debate_id)
        .and_then(|r| r.strip_prefix('/'))
    else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    matches!(parts.len(), 3 | 4)
        && parts[0].parse::<u32>().is_ok()
        && parts[1..].iter().all(|p| crate::is_valid_id(p))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult {
    #[serde(default = "default_schema_version")]
    pub schema_version: u32,
    pub task_id: String,
    pub debate_id: String,
    pub attempt: u32,
    /// Which worker produced it (for diagnostics).
    #[serde(default)]
    pub worker: String,
    pub outcome: TaskOutcome,
}

impl TaskResult {
    /// Ids of the right shape (the task id within the debate), an attempt ≥ 1, bounded
    /// diagnostics.
    pub fn validate(&self) -> Result<(), crate::SpecErrors> {
        let mut c = crate::spec::Check::default();
        if !crate::is_valid_debate_id(&self.debate_id) {
            c.push("debateId", "not a debate id");
        }
        if !is_task_id_of(&self.task_id, &self.debate_id) {
            c.push("taskId", "not a task id of this debate");
        }
        c.range("attempt", self.attempt, 1..=crate::limits::MAX_TASK_ATTEMPT);
        c.label("worker", &self.worker, crate::limits::MAX_NAME_BYTES);
        c.into_result()
    }
}
