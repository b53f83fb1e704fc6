//! The bodies of the HTTP API v1's replies, as the OpenAPI document describes them
//! (shared by the handlers in [`crate::api`] and the document in [`crate::openapi`]).

use serde::Serialize;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use crate::backend::{DebateListItem, FormDefaults};

/// Every error: `{"error": {"code", "message"}}`.
#[derive(Serialize, ToSchema)]
pub struct ErrorResponse {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    pub code: ErrorCodeDoc,
    /// In the user's terms, naming every bad field.
    pub message: String,
}

/// The error codes (the same as every Parley service's).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCodeDoc {
    InvalidJson,
    InvalidRequest,
    UnsupportedSchemaVersion,
    PayloadTooLarge,
    NotFound,
    Conflict,
    Unavailable,
    Internal,
    Unauthorized,
    IdempotencyKeyReused,
}

/// `POST /v1/debates`'s reply.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedDebate {
    pub debate_id: String,
}

/// One page of `GET /v1/debates`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DebateList {
    pub items: Vec<DebateListItem>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// `GET /v1/config`'s reply.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigReply {
    /// `embedded` or `cluster`.
    pub backend: String,
    /// Whether requests need credentials.
    pub auth: bool,
    pub defaults: FormDefaults,
    pub limits: ConfigLimits,
}

/// Limits the page applies before sending.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigLimits {
    /// Characters in one clarification answer, at most.
    pub answer_chars: u64,
}

/// A debate's state: the DebateState JSON the engine checkpoints (`id`, `status`,
/// `problem`, `rounds` with every contribution, `finalSolution`, `spend`, `owner`, ...),
/// passed on as written, including fields a newer engine adds.
pub struct DebateStateDoc;

impl PartialSchema for DebateStateDoc {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some(
                "The debate's state as the engine checkpoints it (DebateState)",
            ))
            .property("id", ObjectBuilder::new().schema_type(Type::String))
            .property("status", ObjectBuilder::new().schema_type(Type::String))
            .property(
                "decisionRecord",
                ObjectBuilder::new()
                    .description(Some(
                        "A finished debate's decision record at a glance (the record itself: `GET /v1/debates/{id}/record`)",
                    ))
                    .property("digest", ObjectBuilder::new().schema_type(Type::String))
                    .property("signed", ObjectBuilder::new().schema_type(Type::Boolean))
                    .property("keyId", ObjectBuilder::new().schema_type(Type::String))
                    .property("entries", ObjectBuilder::new().schema_type(Type::Integer))
                    .property("head", ObjectBuilder::new().schema_type(Type::String))
                    .required("digest")
                    .required("signed")
                    .required("entries")
                    .required("head"),
            )
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .into()
    }
}
impl ToSchema for DebateStateDoc {}

/// A debate's decision record: the digests of its contributions chained in engine order,
/// the spec's, the problem's and the solution's digests, totals, timestamps and an optional
/// Ed25519 signature (the book's "Decisions" page documents every field; `parley verify`
/// checks it).
pub struct DecisionRecordDoc;

impl PartialSchema for DecisionRecordDoc {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some(
                "The debate's decision record (format parley.decision-record)",
            ))
            .property("format", ObjectBuilder::new().schema_type(Type::String))
            .property("debateId", ObjectBuilder::new().schema_type(Type::String))
            .property("head", ObjectBuilder::new().schema_type(Type::String))
            .property("entries", ObjectBuilder::new().schema_type(Type::Array))
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .into()
    }
}
impl ToSchema for DecisionRecordDoc {}

/// The reply of a command (retry, cancel, answers, feedback): the debate id and what was
/// done (`accepted`, `status`, `remaining`, `userFeedback`, ...).
pub struct CommandReply;

impl PartialSchema for CommandReply {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some("The debate id and what the command did"))
            .property("debateId", ObjectBuilder::new().schema_type(Type::String))
            .required("debateId")
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .into()
    }
}
impl ToSchema for CommandReply {}
