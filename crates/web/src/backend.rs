//! The [`Backend`] trait both ways of running debates implement, and the types the API
//! exchanges with it.
//!
//! Events and states cross this boundary as JSON (not typed): a front end passes on what
//! the engine wrote, including fields and event kinds a newer engine adds, without
//! dropping them.

use std::pin::Pin;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::Stream;
use parley_protocol::subjects::ErrorCode;
use parley_protocol::{DebateSpec, DebateState};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Characters of the problem a list entry shows.
pub const PROBLEM_PREVIEW_CHARS: usize = 240;
/// Clarification answers in one request, at most: the protocol's limit, the same for the
/// terminal, the page and the cluster.
pub const MAX_ANSWERS: usize = parley_protocol::limits::MAX_ANSWERS;
/// Characters in one clarification answer: the protocol's limit (one constant for every
/// way of answering; a longer answer is refused with this number, never cut).
pub const MAX_ANSWER_CHARS: usize = parley_protocol::limits::MAX_ANSWER_CHARS;

/// A failed API call: the HTTP status, the error code every Parley service uses, and a
/// message in the user's terms.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: u16,
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let status = match code {
            ErrorCode::InvalidJson
            | ErrorCode::InvalidRequest
            | ErrorCode::UnsupportedSchemaVersion => 400,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict => 409,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal => 500,
            ErrorCode::Unauthorized => 401,
            ErrorCode::IdempotencyKeyReused => 422,
        };
        Self {
            status,
            code,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }
    pub fn not_found(id: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("no debate {id}"))
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

/// `POST /v1/debates`: what the form sends. The rest of the debate (agents' models,
/// prompts, the judge, retry policies) is the server's configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubmitRequest {
    pub problem: String,
    /// Keep only the agents with these roles (a known role missing from the config gets a
    /// built-in agent), as `parley run --agents`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
    /// The agents of this debate, edited on the page (instead of `roles`): each takes the
    /// prompts and settings of the config's agent of its role (or the built-in one) with
    /// the name, model, provider and temperature chosen here. Two may share a role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<AgentChoice>>,
    /// 1–20, as `parley run --rounds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 20)]
    pub rounds: Option<u32>,
    /// A re-sent submission with the same key names the same debate; the
    /// `Idempotency-Key` header is the same (give one or the other, or both equal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 128)]
    pub idempotency_key: Option<String>,
    /// Agents ask clarification questions before round 1, as `parley run --clarify`; the
    /// debate waits in `awaiting_clarifications` for `POST /v1/debates/{id}/answers`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clarify: bool,
    /// Where to be told when the debate completes, fails, waits for answers or degrades
    /// (at most 4): each URL must be one of the server's webhook endpoints
    /// (`parley serve --webhooks`), or the request is refused with a 400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_items = 4)]
    pub webhooks: Option<Vec<WebhookRequest>>,
    /// When to stop before the last round; default: the server's configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<crate::submit_options::TerminationChoice>,
    /// 0–100: the judge's confidence at which `convergence` or `quality` stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 100)]
    pub threshold: Option<f64>,
    /// `debate` or `adaptive`; default: the server's configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<crate::submit_options::ModeChoice>,
    /// The most the debate may spend; default: the server's configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::submit_options::BudgetRequest>,
    /// Background every prompt carries (the code, constraints, prior decisions); at most
    /// 200,000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// One webhook of a debate: one of the server's endpoints and the events it wants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookRequest {
    /// One of the server's webhook endpoints, as the operator listed it.
    #[schema(max_length = 2048)]
    pub url: String,
    /// At least one, each at most once.
    #[schema(min_items = 1, max_items = 4)]
    pub events: Vec<WebhookEventName>,
}

/// A moment a webhook is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum WebhookEventName {
    /// The debate ended with a solution (payload `type`: `debate.completed`).
    Completed,
    /// The debate failed (`debate.failed`).
    Failed,
    /// The debate waits for answers to its questions (`debate.awaiting_answers`).
    AwaitingAnswers,
    /// The budget made the debate give something up (`debate.degraded`).
    Degraded,
}

impl From<WebhookEventName> for parley_protocol::WebhookEvent {
    fn from(e: WebhookEventName) -> Self {
        match e {
            WebhookEventName::Completed => Self::Completed,
            WebhookEventName::Failed => Self::Failed,
            WebhookEventName::AwaitingAnswers => Self::AwaitingAnswers,
            WebhookEventName::Degraded => Self::Degraded,
        }
    }
}

impl SubmitRequest {
    /// The request's webhooks as the spec carries them.
    pub fn webhook_subscriptions(&self) -> Vec<parley_protocol::WebhookSubscription> {
        self.webhooks
            .iter()
            .flatten()
            .map(|w| parley_protocol::WebhookSubscription {
                url: w.url.clone(),
                events: w.events.iter().map(|&e| e.into()).collect(),
            })
            .collect()
    }

    /// Checks the sizes and ranges before anything else looks at the request; reports
    /// every problem with its field.
    pub fn validate(&self) -> Result<(), ApiError> {
        self.validate_named(crate::submit_options::FieldNames::API)
    }

    /// [`SubmitRequest::validate`], naming the budget's fields with `names` (an MCP tool's
    /// arguments).
    pub fn validate_named(&self, names: crate::submit_options::FieldNames) -> Result<(), ApiError> {
        use parley_protocol::limits;
        let mut problems = Vec::new();
        if self.problem.trim().is_empty() {
            problems.push("problem: must not be empty".to_string());
        }
        let chars = self.problem.chars().count();
        if chars > limits::MAX_PROBLEM_CHARS {
            problems.push(format!(
                "problem: {chars} characters, the limit is {}",
                limits::MAX_PROBLEM_CHARS
            ));
        }
        if let Some(roles) = &self.roles {
            if roles.is_empty() {
                problems.push("roles: choose at least one role".into());
            }
            if roles.len() > limits::MAX_AGENTS {
                problems.push(format!(
                    "roles: {} roles, the limit is {}",
                    roles.len(),
                    limits::MAX_AGENTS
                ));
            }
            for r in roles {
                if r.is_empty() || r.len() > limits::MAX_LABEL_BYTES {
                    problems.push(format!(
                        "roles: {:?} is not a role (1-{} bytes)",
                        parley_protocol::preview(r, 40),
                        limits::MAX_LABEL_BYTES
                    ));
                }
            }
        }
        if self.roles.is_some() && self.agents.is_some() {
            problems.push("agents: give either roles or agents, not both".into());
        }
        if let Some(agents) = &self.agents {
            if agents.is_empty() {
                problems.push("agents: at least one agent is required".into());
            }
            if agents.len() > limits::MAX_AGENTS {
                problems.push(format!(
                    "agents: {} agents, the limit is {}",
                    agents.len(),
                    limits::MAX_AGENTS
                ));
            }
            // The sizes here (so nothing huge is looked at further); the rest (allowed
            // models, providers, ranges) is the submission's validation, on the spec.
            for (i, a) in agents.iter().enumerate().take(limits::MAX_AGENTS) {
                a.check_sizes(&format!("agents[{i}]"), &mut problems);
            }
        }
        if let Some(r) = self.rounds {
            if !(1..=limits::MAX_ROUNDS).contains(&r) {
                problems.push(format!(
                    "rounds: {r} is out of range 1-{}",
                    limits::MAX_ROUNDS
                ));
            }
        }
        if let Some(hooks) = &self.webhooks {
            if hooks.len() > parley_protocol::webhook::MAX_WEBHOOKS {
                problems.push(format!(
                    "webhooks: {} webhooks, the limit is {}",
                    hooks.len(),
                    parley_protocol::webhook::MAX_WEBHOOKS
                ));
            } else {
                problems.extend(
                    parley_protocol::webhook::webhook_problems(&self.webhook_subscriptions())
                        .iter()
                        .map(ToString::to_string),
                );
            }
        }
        problems.extend(crate::submit_options::option_problems(self, names));
        if let Some(k) = &self.idempotency_key {
            if k.is_empty() || k.len() > limits::MAX_IDEMPOTENCY_KEY_BYTES {
                problems.push(format!(
                    "idempotencyKey: 1-{} bytes",
                    limits::MAX_IDEMPOTENCY_KEY_BYTES
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(problems.join("; ")))
        }
    }
}

/// One agent as the page's editor sends it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentChoice {
    pub name: String,
    pub role: String,
    pub model: String,
    /// One of the server's providers, or `human` (a person takes this agent's turns; no
    /// model); none: the server's default for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// 0-2; none: the config's (or built-in) agent's temperature for the role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

impl AgentChoice {
    /// Empty or oversized fields, each named `field.key` (e.g. `agents[1].model`).
    fn check_sizes(&self, field: &str, problems: &mut Vec<String>) {
        use parley_protocol::limits;
        let mut text = |key: &str, v: &str, max: usize| {
            if v.trim().is_empty() {
                problems.push(format!("{field}.{key}: must not be empty"));
            } else if v.len() > max {
                problems.push(format!(
                    "{field}.{key}: {} bytes, the limit is {max}",
                    v.len()
                ));
            }
        };
        text("name", &self.name, limits::MAX_NAME_BYTES);
        text("role", &self.role, limits::MAX_LABEL_BYTES);
        // A person (`provider: "human"`) has no model.
        if self.provider.as_deref() != Some(parley_protocol::HUMAN_PROVIDER) {
            text("model", &self.model, limits::MAX_MODEL_BYTES);
        }
        if let Some(p) = &self.provider {
            text("provider", p, limits::MAX_LABEL_BYTES);
        }
    }
}

/// `POST /v1/debates/{id}/feedback`: the user's thumbs up (1) or down (-1) on a completed
/// debate, stored as the state's `userFeedback`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeedbackRequest {
    /// 1 (thumbs up) or -1 (thumbs down).
    #[schema(minimum = -1, maximum = 1)]
    pub feedback: i8,
}

impl FeedbackRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        if matches!(self.feedback, 1 | -1) {
            Ok(())
        } else {
            Err(ApiError::invalid(format!(
                "feedback: {} is not a verdict (1 thumbs up, -1 thumbs down)",
                self.feedback
            )))
        }
    }
}

/// One answer to a clarification question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Answer {
    /// The question's id.
    pub id: String,
    pub answer: String,
}

/// `POST /v1/debates/{id}/answers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnswersRequest {
    pub answers: Vec<Answer>,
}

impl AnswersRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        let mut problems = Vec::new();
        if self.answers.is_empty() {
            problems.push("answers: at least one answer".to_string());
        }
        if self.answers.len() > MAX_ANSWERS {
            problems.push(format!(
                "answers: {} answers, the limit is {MAX_ANSWERS}",
                self.answers.len()
            ));
        }
        for (i, a) in self.answers.iter().enumerate() {
            if !parley_protocol::is_valid_id(&a.id) {
                problems.push(format!(
                    "answers[{i}].id: {:?} is not a question id",
                    parley_protocol::preview(&a.id, 40)
                ));
            }
            let n = a.answer.chars().count();
            if n > MAX_ANSWER_CHARS {
                problems.push(format!(
                    "answers[{i}].answer: {n} characters, the limit is {MAX_ANSWER_CHARS}"
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(problems.join("; ")))
        }
    }
}

/// `POST /v1/debates/{id}/steer`: `{"command": "pause"}`, `{"command": "guide", "note":
/// "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SteerRequest {
    pub command: SteerKind,
    /// `guide` only: the note every later prompt carries (1 to 4000 characters, no control
    /// characters but newlines and tabs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 4000)]
    pub note: Option<String>,
}

/// A steering command: `pause` (nothing new is dispatched; the calls in flight finish),
/// `resume`, `guide` (a note in every later prompt), `stop` (synthesize now from what
/// exists), `extend` (one more round).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum SteerKind {
    Pause,
    Resume,
    Guide,
    Stop,
    Extend,
}

impl SteerRequest {
    /// The engine's command; an error names what is wrong (a note on a command that takes
    /// none, a missing, long or control-character note).
    pub fn command(self) -> Result<parley_protocol::SteerCommand, ApiError> {
        let name = match self.command {
            SteerKind::Pause => "pause",
            SteerKind::Resume => "resume",
            SteerKind::Guide => "guide",
            SteerKind::Stop => "stop",
            SteerKind::Extend => "extend",
        };
        parley_protocol::SteerCommand::parse(name, self.note)
            .map_err(|e| ApiError::invalid(e.to_string()))
    }
}

/// `POST /v1/debates/{id}/contributions`: a person's answer to a human participant's open
/// task (`provider: "human"`). Without `taskId`, the oldest open task of `agentId` (or of
/// the only human agent with an open task) is answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContributionRequest {
    /// The contribution: a proposal, critique or refinement; a vote starts with the id of
    /// the agent voted for, then why. 1 to 20000 characters, no control characters but
    /// newlines and tabs.
    #[schema(max_length = 20000)]
    pub text: String,
    /// The human agent answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The task answered (`state.human.open[].taskId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

impl ContributionRequest {
    /// The engine's contribution by `by`; an error names what is wrong with the text or
    /// the names (whether the debate waits for it is the backend's to say).
    pub fn contribution(
        self,
        id: &str,
        by: Option<String>,
    ) -> Result<parley_engine::Contribute, ApiError> {
        let wire = parley_protocol::ContributeRequest {
            debate_id: id.to_string(),
            text: self.text,
            agent_id: self.agent_id,
            task_id: self.task_id,
            by,
        };
        wire.validate()
            .map_err(|r| ApiError::invalid(r.message.clone()))?;
        Ok(parley_engine::Contribute::from_request(&wire))
    }
}

/// One row of `GET /v1/debates`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DebateListItem {
    pub id: String,
    /// `running`, `completed`, ... as the engine wrote it.
    pub status: String,
    /// The start of the problem (empty when not known yet).
    pub problem: String,
    pub round: u32,
    pub rounds: u32,
    /// The phase of the latest event (empty when unknown).
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
    /// The name of the API key that created it (none: created with the operator's token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// False for an embedded debate that is `running` but that no process drives (the
    /// server stopped while it ran, or another process started it): `retry` continues it.
    pub live: bool,
}

/// One event of a debate, as the engine wrote it: its per-debate sequence number and its
/// JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct WireEvent {
    pub seq: u64,
    pub json: String,
}

impl WireEvent {
    /// From an event's JSON; `None` when it has no sequence number.
    pub fn from_json(json: String) -> Option<Self> {
        let v: Value = serde_json::from_str(&json).ok()?;
        let seq = v.get("seq")?.as_u64()?;
        Some(Self { seq, json })
    }
}

/// A debate's events with sequence numbers above the one asked for, in order, then the
/// new ones as they happen. It does not end by itself.
pub type EventStream = Pin<Box<dyn Stream<Item = WireEvent> + Send>>;

/// What the form offers: the server's configuration, without endpoints or keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FormDefaults {
    pub agents: Vec<AgentView>,
    pub judge: AgentView,
    pub rounds: u32,
    pub max_rounds: u32,
    /// Every role the form can pick (the built-in ones and the config's).
    pub roles: Vec<String>,
    /// Whether clarification questions are on by default (`debate.interactiveClarifications`).
    #[serde(default)]
    pub clarify: bool,
    /// The most agents one debate may have (the operator's limit; the editor offers 1 to this).
    pub max_agents: usize,
    /// The providers an agent may name (the operator's), each with its allowed models.
    pub providers: Vec<ProviderView>,
    /// Models to offer in the editor: every allowed model and the config's agents' models.
    pub models: Vec<String>,
}

/// A provider as the editor offers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderView {
    pub name: String,
    /// The models an agent may use with it; none: any model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_models: Option<Vec<String>>,
}

/// An agent as the page shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    pub id: String,
    pub name: String,
    pub role: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    pub temperature: f64,
}

impl From<&parley_protocol::AgentConfig> for AgentView {
    fn from(a: &parley_protocol::AgentConfig) -> Self {
        Self {
            id: a.id.clone(),
            name: a.name.clone(),
            role: a.role.clone(),
            model: a.model.clone(),
            provider: a.provider.clone(),
            temperature: a.temperature,
        }
    }
}

/// Turns a form's request into a debate spec with the server's configuration (the CLI
/// implements it over `debate-config.json`, like `parley run`).
pub trait SpecSource: Send + Sync + 'static {
    /// What the form starts with.
    fn defaults(&self) -> FormDefaults;
    /// The spec of a new debate; a bad request is an [`ApiError`] naming the field.
    fn build(&self, request: &SubmitRequest) -> Result<DebateSpec, ApiError>;
}

/// Renders a debate as a Markdown report (`parley report`'s renderer).
pub type ReportFn = fn(Option<&DebateSpec>, &DebateState) -> String;

/// The state download (`GET /v1/debates/{id}`, the MCP state resource): the debate's state
/// and, once it has finished and has a record, `decisionRecord` (the record's
/// [`parley_record::Summary`]: digest and signature status). Returns the record's digest
/// too, for a response header.
pub async fn state_download(
    backend: &dyn Backend,
    id: &str,
) -> Result<(Value, Option<String>), ApiError> {
    let mut state = backend.state(id).await?;
    let finished = state
        .get("status")
        .and_then(|v| serde_json::from_value::<parley_protocol::DebateStatus>(v.clone()).ok())
        .is_some_and(|st| st.is_terminal());
    if !finished {
        return Ok((state, None));
    }
    let record = backend.record(id).await.ok();
    let Some(r) = record.and_then(|v| serde_json::from_value::<parley_record::Record>(v).ok())
    else {
        return Ok((state, None));
    };
    let summary = r.summary();
    let digest = summary.digest.clone();
    if let (Some(fields), Ok(v)) = (state.as_object_mut(), serde_json::to_value(summary)) {
        fields.insert("decisionRecord".into(), v);
    }
    Ok((state, Some(digest)))
}

/// Where debates run. Every method is what one API route does.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// `embedded` or `cluster`.
    fn kind(&self) -> &'static str;
    /// The form's defaults.
    fn defaults(&self) -> FormDefaults;
    /// Starts a debate; returns its id.
    async fn submit(&self, request: SubmitRequest) -> Result<String, ApiError>;
    /// The debates, most recently updated first.
    async fn list(&self) -> Result<Vec<DebateListItem>, ApiError>;
    /// The debate's state (dialectic's DebateState shape).
    async fn state(&self, id: &str) -> Result<Value, ApiError>;
    /// The Markdown report (with its decision record's section once there is a record).
    async fn report(&self, id: &str) -> Result<String, ApiError>;
    /// The debate's decision record (`parley_record::Record` JSON): written when the debate
    /// finishes; a 404 naming that before.
    async fn record(&self, id: &str) -> Result<Value, ApiError>;
    /// The events with a sequence number above `after`, then the new ones.
    async fn events(&self, id: &str, after: u64) -> Result<EventStream, ApiError>;
    /// Resumes a failed (or interrupted) debate from where it stopped.
    async fn retry(&self, id: &str) -> Result<Value, ApiError>;
    async fn cancel(&self, id: &str) -> Result<Value, ApiError>;
    /// Answers to a debate's clarification questions.
    async fn answer(&self, id: &str, answers: AnswersRequest) -> Result<Value, ApiError>;
    /// Records the user's verdict (1 or -1) on a completed debate as its `userFeedback`.
    async fn feedback(&self, id: &str, feedback: FeedbackRequest) -> Result<Value, ApiError>;
    /// Steers a running debate (pause, resume, guide, stop, extend); `by` names who (an
    /// API key's name, `operator`). A command the debate refuses changes nothing.
    async fn steer(
        &self,
        id: &str,
        command: parley_protocol::SteerCommand,
        by: Option<String>,
    ) -> Result<Value, ApiError>;
    /// Answers a human participant's open task (`c.by` names who). One the debate does
    /// not wait for changes nothing.
    async fn contribute(&self, id: &str, c: parley_engine::Contribute) -> Result<Value, ApiError>;

    /// Starts a debate owned by `owner` (the name of the caller's API key, recorded in the
    /// spec and the state so every front end enforces it). The default serves backends that
    /// record no owner: it refuses an owner rather than drop it.
    async fn submit_owned(
        &self,
        request: SubmitRequest,
        owner: Option<&str>,
    ) -> Result<String, ApiError> {
        match owner {
            None => self.submit(request).await,
            Some(_) => Err(ApiError::internal(format!(
                "the {} backend does not record debate owners",
                self.kind()
            ))),
        }
    }

    /// The name of the API key that created the debate (`None`: the operator's); a debate
    /// that does not exist is a 404. The default reads the state's `owner`.
    async fn owner(&self, id: &str) -> Result<Option<String>, ApiError> {
        let state = self.state(id).await?;
        Ok(state
            .get("owner")
            .and_then(Value::as_str)
            .map(str::to_string))
    }
}

/// The problem's first [`PROBLEM_PREVIEW_CHARS`] characters, on one line.
pub fn problem_preview(problem: &str) -> String {
    let one_line: String = problem.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= PROBLEM_PREVIEW_CHARS {
        return one_line;
    }
    let mut s: String = one_line.chars().take(PROBLEM_PREVIEW_CHARS - 1).collect();
    s.push('…');
    s
}

/// A debate id from a URL, checked before it names a file or a subject.
pub fn checked_id(id: &str) -> Result<&str, ApiError> {
    if parley_protocol::is_valid_debate_id(id) {
        Ok(id)
    } else {
        Err(ApiError::invalid(format!(
            "{:?} is not a debate id (deb-YYYYMMDD-HHMMSS-RAND)",
            parley_protocol::preview(id, 40)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_requests_report_every_bad_field() {
        let r = SubmitRequest {
            problem: "  ".into(),
            roles: Some(vec![String::new()]),
            rounds: Some(21),
            idempotency_key: Some(String::new()),
            clarify: false,
            ..Default::default()
        };
        let e = r.validate().unwrap_err();
        assert_eq!(e.status, 400);
        for field in ["problem", "roles", "rounds", "idempotencyKey"] {
            assert!(e.message.contains(field), "{} lacks {field}", e.message);
        }
        let ok = SubmitRequest {
            problem: "Design a cache".into(),
            rounds: Some(2),
            ..Default::default()
        };
        assert!(ok.validate().is_ok());
    }

    #[test]
    fn edited_agents_are_bounded_and_exclusive_with_roles() {
        let agent = |name: &str| AgentChoice {
            name: name.into(),
            role: "architect".into(),
            model: "m".into(),
            provider: None,
            temperature: Some(0.5),
        };
        let r = SubmitRequest {
            problem: "P".into(),
            agents: Some(vec![
                agent("A"),
                AgentChoice {
                    model: " ".into(),
                    ..agent("B")
                },
                AgentChoice {
                    name: "n".repeat(parley_protocol::limits::MAX_NAME_BYTES + 1),
                    ..agent("C")
                },
            ]),
            roles: Some(vec!["architect".into()]),
            ..Default::default()
        };
        let e = r.validate().unwrap_err();
        for part in [
            "not both",
            "agents[1].model: must not be empty",
            "agents[2].name",
        ] {
            assert!(e.message.contains(part), "{} lacks {part}", e.message);
        }
        let too_many = SubmitRequest {
            problem: "P".into(),
            agents: Some(vec![agent("A"); parley_protocol::limits::MAX_AGENTS + 1]),
            ..Default::default()
        };
        assert!(too_many
            .validate()
            .unwrap_err()
            .message
            .contains("the limit is"));
        let none = SubmitRequest {
            problem: "P".into(),
            agents: Some(vec![]),
            ..Default::default()
        };
        assert!(none.validate().is_err());
        let ok = SubmitRequest {
            problem: "P".into(),
            agents: Some(vec![agent("A"), agent("B")]),
            ..Default::default()
        };
        assert!(ok.validate().is_ok(), "two agents may share a role");
        // A person has no model.
        let person = SubmitRequest {
            problem: "P".into(),
            agents: Some(vec![
                agent("A"),
                AgentChoice {
                    model: String::new(),
                    provider: Some(parley_protocol::HUMAN_PROVIDER.into()),
                    ..agent("Me")
                },
            ]),
            ..Default::default()
        };
        assert!(person.validate().is_ok(), "{:?}", person.validate());
    }

    #[test]
    fn feedback_is_up_or_down() {
        assert!(FeedbackRequest { feedback: 1 }.validate().is_ok());
        assert!(FeedbackRequest { feedback: -1 }.validate().is_ok());
        for bad in [0, 2, -2] {
            let e = FeedbackRequest { feedback: bad }.validate().unwrap_err();
            assert!(e.message.starts_with("feedback:"), "{}", e.message);
        }
    }

    #[test]
    fn answers_are_bounded() {
        let r = AnswersRequest {
            answers: vec![Answer {
                id: "q 1".into(),
                answer: "x".repeat(MAX_ANSWER_CHARS + 1),
            }],
        };
        let e = r.validate().unwrap_err();
        assert!(e.message.contains("answers[0].id"), "{}", e.message);
        assert!(e.message.contains("answers[0].answer"), "{}", e.message);
        assert!(AnswersRequest { answers: vec![] }.validate().is_err());
        // One limit for every way of answering: the protocol's (what the terminal and the
        // NATS subject enforce), refused with its number, never cut.
        assert_eq!(MAX_ANSWER_CHARS, parley_protocol::limits::MAX_ANSWER_CHARS);
        let long = AnswersRequest {
            answers: vec![Answer {
                id: "q1".into(),
                answer: "é".repeat(MAX_ANSWER_CHARS + 1),
            }],
        };
        let e = long.validate().unwrap_err();
        assert!(
            e.message
                .contains(&format!("the limit is {MAX_ANSWER_CHARS}")),
            "{}",
            e.message
        );
        let at_limit = AnswersRequest {
            answers: vec![Answer {
                id: "q1".into(),
                answer: "é".repeat(MAX_ANSWER_CHARS),
            }],
        };
        assert!(at_limit.validate().is_ok());
    }

    #[test]
    fn previews_are_one_line_and_short() {
        assert_eq!(problem_preview("a\n  b"), "a b");
        let long = problem_preview(&"é".repeat(1000));
        assert_eq!(long.chars().count(), PROBLEM_PREVIEW_CHARS);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn ids_are_checked() {
        assert!(checked_id("../etc/passwd").is_err());
        assert!(checked_id("deb-20260101-000000-abc123").is_ok());
    }
}
