//! The OpenAPI 3.1 document of the HTTP API v1, generated from the handlers' annotations
//! (`#[utoipa::path]` in [`crate::api`]) and the types they exchange.
//!
//! Served at `/v1/openapi.json` (no credentials needed: it describes the API, holds no
//! data) and committed as `docs/src/reference/openapi.json`; a test fails when the
//! committed copy differs from [`document`] (`PARLEY_BLESS=1` rewrites it).

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::SecurityRequirement;
use utoipa::{Modify, OpenApi};

use crate::backend::{
    AgentChoice, AgentView, Answer, AnswersRequest, ContributionRequest, DebateListItem,
    FeedbackRequest, FormDefaults, ProviderView, SteerKind, SteerRequest, SubmitRequest,
    WebhookEventName, WebhookRequest,
};
use crate::replies::{
    CommandReply, ConfigLimits, ConfigReply, CreatedDebate, DebateList, DebateStateDoc,
    DecisionRecordDoc, ErrorCodeDoc, ErrorDetail, ErrorResponse,
};
use crate::submit_options::{BudgetRequest, ModeChoice, TerminationChoice};

/// Every route needs `Authorization: Bearer <token or API key>` (unless the server runs
/// with `--no-auth` on loopback).
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The operator's token (--auth-token) or an API key from --api-keys",
                    ))
                    .build(),
            ),
        );
        openapi.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Parley HTTP API",
        version = "1",
        description = "Start multi-agent LLM debates, follow their events, read their results. \
            Errors are {\"error\": {\"code\", \"message\"}}. A `user` API key sees only the debates \
            it created (any other id is a 404); an `admin` key and the operator's token see all. \
            This document is served at /v1/openapi.json without credentials.",
        license(name = "Apache-2.0")
    ),
    paths(
        crate::api::config,
        crate::api::list,
        crate::api::create,
        crate::api::debate_state,
        crate::api::report,
        crate::api::record,
        crate::api::events,
        crate::api::retry,
        crate::api::cancel,
        crate::api::answers,
        crate::api::steer,
        crate::api::contribute,
        crate::api::feedback,
    ),
    components(schemas(
        ErrorResponse, ErrorDetail, ErrorCodeDoc, CreatedDebate, DebateList, ConfigReply,
        ConfigLimits, DebateStateDoc, DecisionRecordDoc, CommandReply, SubmitRequest, AgentChoice, AnswersRequest,
        TerminationChoice, ModeChoice, BudgetRequest,
        Answer, FeedbackRequest, DebateListItem, FormDefaults, ProviderView, AgentView,
        SteerRequest, SteerKind, ContributionRequest,
        WebhookRequest, WebhookEventName,
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "debates", description = "Debates: start, list, follow, command"),
        (name = "config", description = "What the server offers"),
    )
)]
pub struct ApiDoc;

/// The document, pretty-printed (what `/v1/openapi.json` serves and the book commits).
pub fn document() -> String {
    let mut text = ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot render the document: {e}\"}}"));
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_protocol::subjects::ErrorCode;

    #[test]
    fn the_document_is_openapi_3_1_and_names_every_route() {
        let v: serde_json::Value = serde_json::from_str(&document()).unwrap();
        assert!(
            v["openapi"].as_str().unwrap().starts_with("3.1"),
            "{}",
            v["openapi"]
        );
        for path in [
            "/v1/debates",
            "/v1/debates/{id}",
            "/v1/debates/{id}/events",
            "/v1/debates/{id}/report",
            "/v1/debates/{id}/record",
            "/v1/debates/{id}/retry",
            "/v1/debates/{id}/cancel",
            "/v1/debates/{id}/answers",
            "/v1/debates/{id}/feedback",
            "/v1/config",
        ] {
            assert!(v["paths"][path].is_object(), "{path} missing");
        }
        assert!(v["components"]["securitySchemes"]["bearer"].is_object());
        // The id pattern is the protocol's rule (a suffix of 4 to 6 characters).
        let id = &v["paths"]["/v1/debates/{id}"]["get"]["parameters"][0]["schema"]["pattern"];
        assert_eq!(id, r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$");
        assert!(parley_protocol::is_valid_debate_id(
            "deb-20260101-000000-abcd"
        ));
        assert!(!parley_protocol::is_valid_debate_id(
            "deb-20260101-000000-abc"
        ));
        assert!(!parley_protocol::is_valid_debate_id(
            "deb-20260101-000000-abcdefg"
        ));
    }

    #[test]
    fn the_documented_error_codes_are_the_real_ones() {
        let doc = serde_json::to_value(ErrorCodeDoc::IdempotencyKeyReused).unwrap();
        assert_eq!(doc, ErrorCode::IdempotencyKeyReused.as_str());
        let all = [
            (ErrorCodeDoc::InvalidJson, ErrorCode::InvalidJson),
            (ErrorCodeDoc::InvalidRequest, ErrorCode::InvalidRequest),
            (
                ErrorCodeDoc::UnsupportedSchemaVersion,
                ErrorCode::UnsupportedSchemaVersion,
            ),
            (ErrorCodeDoc::PayloadTooLarge, ErrorCode::PayloadTooLarge),
            (ErrorCodeDoc::NotFound, ErrorCode::NotFound),
            (ErrorCodeDoc::Conflict, ErrorCode::Conflict),
            (ErrorCodeDoc::Unavailable, ErrorCode::Unavailable),
            (ErrorCodeDoc::Internal, ErrorCode::Internal),
            (ErrorCodeDoc::Unauthorized, ErrorCode::Unauthorized),
        ];
        for (d, c) in all {
            // An exhaustive match: a new ErrorCode fails to compile here until documented.
            match c {
                ErrorCode::InvalidJson
                | ErrorCode::InvalidRequest
                | ErrorCode::UnsupportedSchemaVersion
                | ErrorCode::PayloadTooLarge
                | ErrorCode::NotFound
                | ErrorCode::Conflict
                | ErrorCode::Unavailable
                | ErrorCode::Internal
                | ErrorCode::Unauthorized
                | ErrorCode::IdempotencyKeyReused => {}
            }
            assert_eq!(serde_json::to_value(d).unwrap(), c.as_str());
        }
    }

    /// The book's copy (`docs/src/reference/openapi.json`) is this document;
    /// `PARLEY_BLESS=1 cargo test -p parley-web openapi` rewrites it.
    #[test]
    fn the_committed_document_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/src/reference/openapi.json");
        let now = document();
        if std::env::var_os("PARLEY_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &now).unwrap();
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == now,
            "{} is stale: run `PARLEY_BLESS=1 cargo test -p parley-web openapi` and commit it",
            path.display()
        );
    }
}
