//! NATS subjects, stream names, header names and the error reply every service uses.

use serde::{Deserialize, Serialize};

pub const SUBMIT: &str = "parley.debates.submit";
pub const STATUS: &str = "parley.debates.status";
pub const RETRY: &str = "parley.debates.retry";
pub const CANCEL: &str = "parley.debates.cancel";
/// Evaluator calls for `parley eval --nats-url` (request/reply, served by judge workers).
pub const EVALS_SUBMIT: &str = "parley.evals.submit";
/// Queue group of the judge workers on [`EVALS_SUBMIT`].
pub const JUDGE_WORKERS_QUEUE: &str = "parley-judge-workers";
/// Answers to a debate's clarification questions (`parley_protocol::AnswerRequest`).
pub const ANSWER: &str = "parley.debates.answer";
/// The user's thumbs up/down on a completed debate (`parley_protocol::FeedbackRequest`),
/// stored as its state's `userFeedback`.
pub const FEEDBACK: &str = "parley.debates.feedback";
/// A consumer of one debate's events, created by a coordinator for the requester
/// (`parley_cluster::events`): clients never create consumers themselves.
pub const FOLLOW: &str = "parley.debates.follow";
/// A consumer of every debate's last event (the page's list; `serve` and `operator` roles).
pub const LIST: &str = "parley.debates.list";
/// Queue group shared by coordinator replicas.
pub const COORDINATOR_QUEUE: &str = "parley-coordinators";

pub const TASKS_AGENT: &str = "parley.tasks.agent";
pub const TASKS_JUDGE: &str = "parley.tasks.judge";
pub const TASKS_STREAM: &str = "PARLEY_TASKS";
pub const EVENTS_STREAM: &str = "PARLEY_EVENTS";
/// Workers publish result notifications here (the result itself is in Redis first).
pub const RESULTS_PREFIX: &str = "parley.results";

/// JetStream's advisory when a task message exhausted its deliveries (`MAX_DELIVER`)
/// without being acked: the coordinator records it as a dead letter.
pub const TASKS_MAX_DELIVERIES_ADVISORY: &str =
    "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.PARLEY_TASKS.*";

pub fn events_subject(debate_id: &str) -> String {
    format!("parley.debates.{debate_id}.events")
}

pub fn results_subject(debate_id: &str) -> String {
    format!("{RESULTS_PREFIX}.{debate_id}")
}

pub const HEADER_SCHEMA_VERSION: &str = "Parley-Schema-Version";
pub const HEADER_TRACEPARENT: &str = "traceparent";
pub const HEADER_TRACESTATE: &str = "tracestate";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidJson,
    InvalidRequest,
    UnsupportedSchemaVersion,
    PayloadTooLarge,
    NotFound,
    Conflict,
    Unavailable,
    Internal,
    /// Missing or wrong credentials (the HTTP API's 401).
    Unauthorized,
    /// An idempotency key first used with a different request (the HTTP API's 422).
    IdempotencyKeyReused,
}

impl ErrorCode {
    /// The wire name (`invalid_json`, ...), for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidJson => "invalid_json",
            Self::InvalidRequest => "invalid_request",
            Self::UnsupportedSchemaVersion => "unsupported_schema_version",
            Self::PayloadTooLarge => "payload_too_large",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
            Self::Unauthorized => "unauthorized",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

/// `{"error": {"code": ..., "message": ...}}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub error: ErrorBody,
}

impl ErrorReply {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error: ErrorBody {
                code,
                message: message.into(),
            },
        }
    }
}
