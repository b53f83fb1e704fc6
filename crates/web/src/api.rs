//! The HTTP routes: the page's assets and the JSON API v1 under `/v1/`.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/healthz` | `ok` while the server runs (no credentials needed; no data) |
//! | GET | `/v1/openapi.json` | the OpenAPI 3.1 document of this API (no credentials needed) |
//! | GET | `/v1/config` | the backend kind and the form's defaults |
//! | GET | `/v1/debates` | the caller's debates, newest first: `?limit=&cursor=` → `{items, nextCursor}` |
//! | POST | `/v1/debates` | start one (`Idempotency-Key` header) → 201 `{debateId}` |
//! | GET | `/v1/debates/{id}` | its state (the DebateState JSON) |
//! | GET | `/v1/debates/{id}/report` | the Markdown report |
//! | GET | `/v1/debates/{id}/events` | Server-Sent Events, `id:` = the event's sequence number; resumes after `Last-Event-ID` or `?after=N` |
//! | POST | `/v1/debates/{id}/retry` | resume a failed (or interrupted) debate |
//! | POST | `/v1/debates/{id}/cancel` | cancel it |
//! | POST | `/v1/debates/{id}/answers` | answers to its clarification questions |
//! | POST | `/v1/debates/{id}/steer` | pause, resume, guide, stop or extend it (recorded with the caller's key name) |
//! | POST | `/v1/debates/{id}/contributions` | answer a human participant's open task (recorded with the caller's key name) |
//! | POST | `/v1/debates/{id}/feedback` | thumbs up/down on a completed debate |
//!
//! The OpenAPI document (`crate::openapi`) is generated from these handlers' annotations
//! and the types they exchange. Errors are `{"error": {"code", "message"}}` with the
//! matching HTTP status, for every route.
//!
//! Guards, in order: the `Host` header (on loopback without credentials only loopback
//! names are served, so a web page on another site cannot reach the API through DNS
//! rebinding); the `Origin` header (a browser request from another origin is refused);
//! the caller's credentials (`Authorization: Bearer <token or API key>`, see
//! [`authenticate`]) for every `/v1/` route but the document; a POST must be
//! `Content-Type: application/json` (so a plain cross-site form cannot send one); bodies
//! are capped at [`MAX_BODY_BYTES`].
//!
//! Ownership: a `user` API key sees and acts only on the debates it created; any other
//! debate is answered exactly as one that does not exist (404 `no debate <id>`), so ids do
//! not leak. An `admin` key and the operator's token see every debate.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use base64::Engine as _;
use futures::StreamExt as _;
use parley_protocol::subjects::{ErrorCode, ErrorReply};
use serde_json::{json, Value};

use crate::backend::{
    checked_id, AnswersRequest, ApiError, Backend, ContributionRequest, FeedbackRequest,
    SteerRequest, SubmitRequest,
};
use crate::idempotency::{self, Begin, IdempotencyStore};
use crate::keys::{KeyFileWatch, Principal};
use crate::replies::{
    CommandReply, ConfigReply, CreatedDebate, DebateList, DebateStateDoc, DecisionRecordDoc,
    ErrorResponse,
};
use crate::{assets, auth};

/// Bytes in one request body, at most (a submission's problem is at most 100 000
/// characters).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Debates one page of `GET /v1/debates` holds by default.
pub const DEFAULT_PAGE: usize = 50;
/// Debates one page holds at most (`limit`).
pub const MAX_PAGE: usize = 200;
/// The header a replayed create carries.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub backend: Arc<dyn Backend>,
    /// Set when the server takes the operator's bearer token (an admin).
    pub token: Option<Arc<auth::Token>>,
    /// Set when the operator lists API keys (`--api-keys`).
    pub keys: Option<Arc<KeyFileWatch>>,
    /// Serving on a loopback address without credentials: only loopback `Host` names pass.
    pub loopback_only: bool,
    /// Cancelled when the server shuts down: event streams end.
    pub stop: tokio_util::sync::CancellationToken,
    /// Idempotency keys of creates seen lately.
    pub idempotency: Arc<IdempotencyStore>,
    /// The OpenAPI document served at `/v1/openapi.json` (`crate::openapi::document`).
    pub openapi: Arc<str>,
    /// The operator's webhook endpoints (`--webhooks`), which submissions may name.
    pub webhooks: Option<Arc<parley_webhooks::Endpoints>>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorReply::new(self.code, self.message).error;
        let mut r = no_store(
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                json!({ "error": body }).to_string(),
            )
                .into_response(),
        );
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"parley\""),
            );
        }
        r
    }
}

fn no_store(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    no_store(
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            v.to_string(),
        )
            .into_response(),
    )
}

/// The whole application: assets, API and guards.
/// The API's routes (and `mcp`, when given, at `/mcp` behind the same credentials).
pub fn router(state: AppState, mcp: Option<Router>) -> Router {
    let api = Router::new()
        .route("/config", get(config))
        .route("/debates", get(list).post(create))
        .route("/debates/{id}", get(debate_state))
        .route("/debates/{id}/report", get(report))
        .route("/debates/{id}/record", get(record))
        .route("/debates/{id}/events", get(events))
        .route("/debates/{id}/retry", post(retry))
        .route("/debates/{id}/cancel", post(cancel))
        .route("/debates/{id}/answers", post(answers))
        .route("/debates/{id}/steer", post(steer))
        .route("/debates/{id}/contributions", post(contribute))
        .route("/debates/{id}/feedback", post(feedback))
        .fallback(api_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .route("/openapi.json", get(openapi_document));
    let mut app: Router = Router::new()
        .nest("/v1", api)
        .route("/healthz", get(|| async { "ok" }))
        .merge(assets::routes())
        .with_state(state.clone());
    if let Some(mcp) = mcp {
        app = app.merge(mcp.layer(middleware::from_fn_with_state(state.clone(), authenticate)));
    }
    app.layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), guard_origin))
        .layer(middleware::from_fn(assets::security_headers))
}

async fn api_not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no API route {method} {}",
            parley_protocol::preview(uri.path(), 200)
        ),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::invalid(format!(
        "{method} is not a method of {}",
        parley_protocol::preview(uri.path(), 200)
    ))
    .with_status(405)
}

async fn openapi_document(State(s): State<AppState>) -> Response {
    no_store(
        (
            [(header::CONTENT_TYPE, "application/json")],
            s.openapi.to_string(),
        )
            .into_response(),
    )
}

/// `Host` and `Origin` checks (see the module docs).
async fn guard_origin(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if s.loopback_only && !is_loopback_host(host) {
        return ApiError::new(
            ErrorCode::InvalidRequest,
            "this server answers only to localhost, 127.0.0.1 or [::1] (start it with --auth-token to serve other names)",
        )
        .with_status(403)
        .into_response();
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let same = origin.to_str().ok().is_some_and(|o| {
            o.strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
                .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
        });
        if !same {
            return ApiError::new(
                ErrorCode::InvalidRequest,
                "requests from another origin are refused",
            )
            .with_status(403)
            .into_response();
        }
    }
    next.run(req).await
}

/// `localhost`, `127.x.y.z`, `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inner, _)) => return inner == "::1",
            None => return false,
        }
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Who the request acts as: the operator's token (an admin without a name), one of the
/// operator's API keys (its name and role), or, when the server takes neither (`--no-auth`
/// on loopback), the operator. Anything else is a 401. The [`Principal`] goes into the
/// request's extensions for the handlers.
pub async fn authenticate(State(s): State<AppState>, mut req: Request, next: Next) -> Response {
    let principal = if s.token.is_none() && s.keys.is_none() {
        Some(Principal::operator())
    } else {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .unwrap_or("")
            .trim();
        let by_token = s
            .token
            .as_ref()
            .is_some_and(|t| t.matches(given))
            .then(Principal::operator);
        let by_key = s.keys.as_ref().and_then(|k| k.keys().authenticate(given));
        by_token.or(by_key)
    };
    match principal {
        Some(p) => {
            req.extensions_mut().insert(p);
            next.run(req).await
        }
        None => ApiError::new(
            ErrorCode::Unauthorized,
            "missing or wrong credentials (Authorization: Bearer <token or API key>)",
        )
        .into_response(),
    }
}

impl ApiError {
    /// The same error with another HTTP status (401, 403).
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }
}

/// A POST body: JSON by content type, within the size limit.
fn json_body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<T, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
    if !is_json {
        return Err(ApiError::invalid(
            "send the body as JSON (Content-Type: application/json)",
        ));
    }
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("the body is over the limit of {MAX_BODY_BYTES} bytes"),
            )
        } else {
            ApiError::invalid(format!("cannot read the body: {e}"))
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            ApiError::new(ErrorCode::InvalidJson, format!("not JSON: {e}"))
        } else {
            ApiError::invalid(format!("invalid request: {e}"))
        }
    })
}

/// A debate id from the path that the caller may see: a `user` key's request for another
/// owner's debate is the same 404 as for a debate that does not exist.
async fn visible<'a>(s: &AppState, p: &Principal, id: &'a str) -> Result<&'a str, ApiError> {
    let id = checked_id(id)?;
    if p.is_admin() {
        return Ok(id);
    }
    match s.backend.owner(id).await {
        Ok(owner) if p.may_see(owner.as_deref()) => Ok(id),
        Ok(_) => Err(ApiError::not_found(id)),
        Err(e) if e.code == ErrorCode::NotFound => Err(ApiError::not_found(id)),
        Err(e) => Err(e),
    }
}

/// The form's defaults and the backend kind.
#[utoipa::path(get, path = "/v1/config", tag = "config",
    responses(
        (status = 200, description = "The backend and the form's defaults", body = ConfigReply),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
    ))]
async fn config(State(s): State<AppState>) -> Response {
    let d = s.backend.defaults();
    json_response(
        StatusCode::OK,
        &json!({
            "backend": s.backend.kind(),
            "auth": s.token.is_some() || s.keys.is_some(),
            "defaults": d,
            "limits": { "answerChars": crate::backend::MAX_ANSWER_CHARS },
        }),
    )
}

/// `?limit=&cursor=` of a list.
fn page_query(uri: &Uri) -> Result<(usize, Option<String>), ApiError> {
    let mut limit = DEFAULT_PAGE;
    let mut cursor = None;
    for pair in uri.query().unwrap_or("").split('&') {
        if let Some(v) = pair.strip_prefix("limit=") {
            limit = v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_PAGE).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid(format!(
                        "limit: {:?} is not a number from 1 to {MAX_PAGE}",
                        parley_protocol::preview(v, 40)
                    ))
                })?;
        } else if let Some(v) = pair.strip_prefix("cursor=") {
            cursor = Some(decode_cursor(v)?);
        }
    }
    Ok((limit, cursor))
}

/// A cursor is the last listed debate's id, base64url-encoded (opaque to clients).
fn encode_cursor(id: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id)
}

fn decode_cursor(v: &str) -> Result<String, ApiError> {
    let bad = || {
        ApiError::invalid(format!(
            "cursor: {:?} is not a cursor this API returned (nextCursor)",
            parley_protocol::preview(v, 40)
        ))
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(v)
        .map_err(|_| bad())?;
    let id = String::from_utf8(bytes).map_err(|_| bad())?;
    if parley_protocol::is_valid_debate_id(&id) {
        Ok(id)
    } else {
        Err(bad())
    }
}

/// The caller's debates (a `user` key: those it created; an admin: all), newest first (by
/// creation: the order does not change between pages). At most the 200 most recently
/// updated debates of the server are listed.
#[utoipa::path(get, path = "/v1/debates", tag = "debates",
    params(
        ("limit" = Option<u32>, Query, description = "Debates in this page (1-200, default 50)", minimum = 1, maximum = 200),
        ("cursor" = Option<String>, Query, description = "The `nextCursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "One page of debates", body = DebateList),
        (status = 400, description = "A bad limit or cursor", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 503, description = "The backend cannot answer now", body = ErrorResponse),
    ))]
async fn list(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (limit, cursor) = page_query(&uri)?;
    let mut items = s.backend.list().await?;
    items.retain(|i| p.may_see(i.owner.as_deref()));
    items.sort_by(|a, b| b.id.cmp(&a.id));
    if let Some(c) = &cursor {
        items.retain(|i| i.id.as_str() < c.as_str());
    }
    let next = (items.len() > limit).then(|| encode_cursor(&items[limit - 1].id));
    items.truncate(limit);
    Ok(json_response(
        StatusCode::OK,
        &json!({ "items": items, "nextCursor": next }),
    ))
}

/// The `Idempotency-Key` header: 1-128 printable ASCII characters.
fn idempotency_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let text = v.to_str().unwrap_or("");
    let ok = !text.is_empty()
        && text.len() <= idempotency::MAX_KEY_BYTES
        && text.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    if ok {
        Ok(Some(text.to_string()))
    } else {
        Err(ApiError::invalid(format!(
            "Idempotency-Key: 1-{} printable ASCII characters",
            idempotency::MAX_KEY_BYTES
        )))
    }
}

fn reused_key() -> ApiError {
    ApiError::new(
        ErrorCode::IdempotencyKeyReused,
        "Idempotency-Key: this key was first sent with a different request; use a new key for a new debate",
    )
}

/// Starts a debate. With an `Idempotency-Key` (header, or `idempotencyKey` in the body),
/// sending the same request again returns the same debate (201, `Idempotent-Replayed:
/// true`); the same key with a different request is a 422.
#[utoipa::path(post, path = "/v1/debates", tag = "debates",
    request_body = SubmitRequest,
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retried create return the same debate (1-128 printable ASCII characters, scoped to the caller, remembered 24 h)"),
    ),
    responses(
        (status = 201, description = "Started (or, with a key already used for this request, the same debate again)", body = CreatedDebate,
            headers(("Location" = String, description = "The debate's URL"))),
        (status = 400, description = "A bad request: the message names every bad field", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 409, description = "The first request with this Idempotency-Key is still being handled", body = ErrorResponse),
        (status = 413, description = "The body is over 1 MiB", body = ErrorResponse),
        (status = 422, description = "The Idempotency-Key was first used with a different request", body = ErrorResponse),
        (status = 503, description = "The backend cannot take a debate now", body = ErrorResponse),
    ))]
async fn create(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let mut request: SubmitRequest = json_body(&headers, body)?;
    let header_key = idempotency_header(&headers)?;
    request.validate()?;
    crate::webhooks::check_submission(s.webhooks.as_deref(), &request)?;
    let key = match (header_key, request.idempotency_key.take()) {
        (Some(h), Some(b)) if h != b => {
            return Err(ApiError::invalid(
                "idempotencyKey: differs from the Idempotency-Key header; send one of them",
            ))
        }
        (h, b) => h.or(b),
    };
    let owner = p.name.as_deref();
    let Some(key) = key else {
        let id = s.backend.submit_owned(request, owner).await?;
        return Ok(created(&id, false));
    };
    let scoped = idempotency::scoped_key(owner, &key);
    let canonical = serde_json::to_vec(&request).map_err(|e| ApiError::internal(e.to_string()))?;
    match s
        .idempotency
        .begin(&scoped, idempotency::fingerprint(&canonical))
    {
        Begin::Replay(id) => Ok(created(&id, true)),
        Begin::Mismatch => Err(reused_key()),
        Begin::InFlight => Err(ApiError::conflict(
            "Idempotency-Key: the first request with this key is still being handled; try again",
        )),
        Begin::New => {
            request.idempotency_key = Some(scoped.clone());
            let result = s.backend.submit_owned(request, owner).await;
            s.idempotency.finish(&scoped, result.as_ref().ok().cloned());
            match result {
                Ok(id) => Ok(created(&id, false)),
                // The coordinators bound the key to another request (another replica saw
                // it, or this one before a restart).
                Err(e) if e.code == ErrorCode::Conflict && e.message.contains("idempotencyKey") => {
                    Err(reused_key())
                }
                Err(e) => Err(e),
            }
        }
    }
}

fn created(id: &str, replayed: bool) -> Response {
    let mut r = json_response(StatusCode::CREATED, &json!({ "debateId": id }));
    if let Ok(v) = HeaderValue::from_str(&format!("/v1/debates/{id}")) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    if replayed {
        r.headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    r
}

/// The debate's state.
#[utoipa::path(get, path = "/v1/debates/{id}", tag = "debates",
    params(("id" = String, Path, description = "The debate id (deb-YYYYMMDD-HHMMSS-RAND)", pattern = r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$")),
    responses(
        (status = 200, description = "The debate's state; once it has finished, with `decisionRecord` (its record's digest and signature status)", body = DebateStateDoc,
            headers(("parley-record-digest" = String, description = "A finished debate's record digest (absent before it finishes)"))),
        (status = 400, description = "Not a debate id", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 404, description = "No such debate (or not the caller's)", body = ErrorResponse),
        (status = 503, description = "The backend cannot answer now", body = ErrorResponse),
    ))]
async fn debate_state(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = visible(&s, &p, &id).await?;
    let (state, digest) = crate::backend::state_download(s.backend.as_ref(), id).await?;
    let mut r = json_response(StatusCode::OK, &state);
    if let Some(v) = digest.and_then(|d| HeaderValue::from_str(&d).ok()) {
        r.headers_mut().insert("parley-record-digest", v);
    }
    Ok(r)
}

/// The debate's Markdown report.
#[utoipa::path(get, path = "/v1/debates/{id}/report", tag = "debates",
    params(("id" = String, Path, description = "The debate id", pattern = r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$")),
    responses(
        (status = 200, description = "The report", body = String, content_type = "text/markdown"),
        (status = 400, description = "Not a debate id", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 404, description = "No such debate (or not the caller's)", body = ErrorResponse),
        (status = 503, description = "The backend cannot answer now", body = ErrorResponse),
    ))]
async fn report(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = visible(&s, &p, &id).await?;
    let md = s.backend.report(id).await?;
    let mut r =
        no_store(([(header::CONTENT_TYPE, "text/markdown; charset=utf-8")], md).into_response());
    // `id` is a checked debate id: no quoting needed.
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{id}.md\"")) {
        r.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(r)
}

/// The debate's decision record, once it has finished (`parley verify` checks it).
#[utoipa::path(get, path = "/v1/debates/{id}/record", tag = "debates",
    params(("id" = String, Path, description = "The debate id", pattern = r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$")),
    responses(
        (status = 200, description = "The decision record", body = DecisionRecordDoc,
            headers(("parley-record-digest" = String, description = "The record's digest: SHA-256 (hex) of its canonical JSON"))),
        (status = 400, description = "Not a debate id", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 404, description = "No such debate (or not the caller's), or no record yet: one is written when the debate finishes", body = ErrorResponse),
        (status = 503, description = "The backend cannot answer now", body = ErrorResponse),
    ))]
async fn record(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = visible(&s, &p, &id).await?;
    let record = s.backend.record(id).await?;
    let mut r = json_response(StatusCode::OK, &record);
    // Its digest (SHA-256 of its canonical JSON), so a client need not canonicalize.
    if let Ok(rec) = serde_json::from_value::<parley_record::Record>(record) {
        if let Ok(v) = HeaderValue::from_str(&rec.digest()) {
            r.headers_mut().insert("parley-record-digest", v);
        }
    }
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{id}.record.json\"")) {
        r.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(r)
}

/// `Last-Event-ID` (what a browser's EventSource sends on reconnect) or `?after=N`;
/// the larger wins. A value that is not a number is an error naming it.
fn resume_point(headers: &HeaderMap, uri: &Uri) -> Result<u64, ApiError> {
    let mut after = 0;
    if let Some(v) = headers.get("last-event-id") {
        let text = v.to_str().unwrap_or("").trim();
        if !text.is_empty() {
            after = text.parse::<u64>().map_err(|_| {
                ApiError::invalid(format!(
                    "Last-Event-ID: {:?} is not an event sequence number",
                    parley_protocol::preview(text, 40)
                ))
            })?;
        }
    }
    for pair in uri.query().unwrap_or("").split('&') {
        if let Some(v) = pair.strip_prefix("after=") {
            let n = v.parse::<u64>().map_err(|_| {
                ApiError::invalid(format!(
                    "after: {:?} is not an event sequence number",
                    parley_protocol::preview(v, 40)
                ))
            })?;
            after = after.max(n);
        }
    }
    Ok(after)
}

/// How often an idle event stream sends a comment, so proxies keep it open and a dead
/// client is noticed.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The debate's events as Server-Sent Events: each is `event: debate`, `id:` its
/// per-debate sequence number, `data:` the event's JSON (its `type`, `seq`, `at`,
/// `progress`, ...). The stream starts after `Last-Event-ID` (or `?after=`), sends every
/// later event in order, then the new ones as they happen; it does not end by itself.
#[utoipa::path(get, path = "/v1/debates/{id}/events", tag = "debates",
    params(
        ("id" = String, Path, description = "The debate id", pattern = r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$"),
        ("after" = Option<u64>, Query, description = "Start after this sequence number"),
        ("Last-Event-ID" = Option<String>, Header, description = "Start after this sequence number (a reconnecting EventSource sends it)"),
    ),
    responses(
        (status = 200, description = "The event stream", body = String, content_type = "text/event-stream"),
        (status = 400, description = "Not a debate id, or a bad resume point", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 404, description = "No such debate (or not the caller's)", body = ErrorResponse),
        (status = 503, description = "Too many event streams at once", body = ErrorResponse),
    ))]
async fn events(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let id = visible(&s, &p, &id).await?;
    let after = resume_point(&headers, &uri)?;
    let stream = s.backend.events(id, after).await?;
    let sse = stream
        .take_until(s.stop.clone().cancelled_owned())
        .map(|e| {
            Ok::<_, Infallible>(
                Event::default()
                    .id(e.seq.to_string())
                    .event("debate")
                    .data(e.json),
            )
        });
    let mut r = Sse::new(sse)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Proxies that buffer (nginx) pass events on at once.
    r.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(r)
}

/// Resumes a failed (or interrupted) debate from the node where it stopped, repeating no
/// completed call.
#[utoipa::path(post, path = "/v1/debates/{id}/retry", tag = "debates",
    params(("id" = String, Path, description = "The debate id", pattern = r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$")),
    responses(
        (status = 200, description = "Accepted", body = CommandReply),
        (status = 400, description = "Not a debate id", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 404, description = "No such debate (or not the caller's)", body = ErrorResponse),
        (status = 409, description = "The debate cannot be retried now (running, completed)", body = ErrorResponse),
        (status = 503, description = "The backend cannot answer now", body = ErrorResponse),
    ))]
async fn retry(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = visible(&s, &p, &id).await?;
    Ok(json_response(StatusCode::OK, &s.backend.retry(id).await?))
}

/// Cancels the debate.
#[utoipa::path(post, path = "/v1/debates/{id}/cancel", tag = "debates",
    params(("id" = String, Path, description = "The debate id", pattern = r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$")),
    responses(
        (status = 200, description = "Cancelled", body = CommandReply),
        (status = 400, description = "Not a debate id", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 404, description = "No such debate (or not the caller's)", body = ErrorResponse),
        (status = 409, description = "Already completed or cancelled", body = ErrorResponse),
        (status = 503, description = "The backend cannot answer now", body = ErrorResponse),
    ))]
async fn cancel(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = visible(&s, &p, &id).await?;
    Ok(json_response(StatusCode::OK, &s.backend.cancel(id).await?))
}

/// Answers the debate's clarification questions (while it is `awaiting_clarifications`).
#[utoipa::path(post, path = "/v1/debates/{id}/answers", tag = "debates",
    params(("id" = String, Path, description = "The debate id", pattern = r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$")),
    request_body = AnswersRequest,
    responses(
        (status = 200, description = "Recorded", body = CommandReply),
        (status = 400, description = "A bad request: the message names every bad field", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 404, description = "No such debate (or not the caller's)", body = ErrorResponse),
        (status = 409, description = "Not waiting for answers, or already answered", body = ErrorResponse),
        (status = 413, description = "The body is over 1 MiB", body = ErrorResponse),
        (status = 503, description = "The backend cannot answer now", body = ErrorResponse),
    ))]
async fn answers(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let request: AnswersRequest = json_body(&headers, body)?;
    request.validate()?;
    let id = visible(&s, &p, &id).await?.to_string();
    Ok(json_response(
        StatusCode::OK,
        &s.backend.answer(&id, request).await?,
    ))
}

/// Steers a running debate: `pause` (no new task; the calls in flight finish), `resume`,
/// `guide` (a note every later prompt carries), `stop` (synthesize now from what exists),
/// `extend` (one more round). Recorded in the state's `steering` with the caller's key name
/// (`operator` for the operator's token) and a `steered` event.
#[utoipa::path(post, path = "/v1/debates/{id}/steer", tag = "debates",
    params(("id" = String, Path, description = "The debate id", pattern = r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$")),
    request_body = SteerRequest,
    responses(
        (status = 200, description = "Applied", body = CommandReply),
        (status = 400, description = "A bad command or note: the message says what is wrong", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 404, description = "No such debate (or not the caller's)", body = ErrorResponse),
        (status = 409, description = "Not running, already paused, not paused, closing, or over the round limit", body = ErrorResponse),
        (status = 413, description = "The body is over 1 MiB", body = ErrorResponse),
        (status = 503, description = "The backend cannot answer now", body = ErrorResponse),
    ))]
async fn steer(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let request: SteerRequest = json_body(&headers, body)?;
    let command = request.command()?;
    let id = visible(&s, &p, &id).await?.to_string();
    let by = p.name.clone().unwrap_or_else(|| "operator".to_string());
    Ok(json_response(
        StatusCode::OK,
        &s.backend.steer(&id, command, Some(by)).await?,
    ))
}

/// Answers a human participant's open task (`provider: "human"`) with a person's text: a
/// proposal, critique or refinement, or a vote (the id of the agent voted for first).
/// Recorded as the agent's contribution, marked `human`, with its latency and no cost, and
/// in `human.answered` with the caller's key name (`operator` for the operator's token).
#[utoipa::path(post, path = "/v1/debates/{id}/contributions", tag = "debates",
    params(("id" = String, Path, description = "The debate id", pattern = r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$")),
    request_body = ContributionRequest,
    responses(
        (status = 200, description = "Recorded: the task it answered", body = CommandReply),
        (status = 400, description = "A bad text (empty, over 20000 characters, control characters), not a human agent, a vote for no other agent, several human agents waiting: the message says what is wrong", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 404, description = "No such debate (or not the caller's)", body = ErrorResponse),
        (status = 409, description = "Not running, or no such task waiting (answered, expired, another debate's)", body = ErrorResponse),
        (status = 413, description = "The body is over 1 MiB", body = ErrorResponse),
        (status = 503, description = "The backend cannot answer now", body = ErrorResponse),
    ))]
async fn contribute(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let request: ContributionRequest = json_body(&headers, body)?;
    let id = visible(&s, &p, &id).await?.to_string();
    let by = p.name.clone().unwrap_or_else(|| "operator".to_string());
    let c = request.contribution(&id, Some(by))?;
    Ok(json_response(
        StatusCode::OK,
        &s.backend.contribute(&id, c).await?,
    ))
}

/// Records the caller's verdict on a completed debate (its `userFeedback`).
#[utoipa::path(post, path = "/v1/debates/{id}/feedback", tag = "debates",
    params(("id" = String, Path, description = "The debate id", pattern = r"^deb-[0-9]{8}-[0-9]{6}-[0-9a-z]{4,6}$")),
    request_body = FeedbackRequest,
    responses(
        (status = 200, description = "Recorded", body = CommandReply),
        (status = 400, description = "A bad request: the message names the bad field", body = ErrorResponse),
        (status = 401, description = "Missing or wrong credentials", body = ErrorResponse),
        (status = 404, description = "No such debate (or not the caller's)", body = ErrorResponse),
        (status = 409, description = "The debate is not completed", body = ErrorResponse),
        (status = 413, description = "The body is over 1 MiB", body = ErrorResponse),
        (status = 503, description = "The backend cannot answer now", body = ErrorResponse),
    ))]
async fn feedback(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let request: FeedbackRequest = json_body(&headers, body)?;
    request.validate()?;
    let id = visible(&s, &p, &id).await?.to_string();
    Ok(json_response(
        StatusCode::OK,
        &s.backend.feedback(&id, request).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "127.1.2.3",
            "[::1]:80",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "",
            "evil.example",
            "evil.example:8080",
            "10.0.0.1:80",
            "[::2]",
            "localhost.evil",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn resume_point_takes_the_header_or_the_query() {
        let mut h = HeaderMap::new();
        let uri: Uri = "/x?after=7".parse().unwrap();
        assert_eq!(resume_point(&h, &uri).unwrap(), 7);
        h.insert("last-event-id", HeaderValue::from_static("9"));
        assert_eq!(resume_point(&h, &uri).unwrap(), 9);
        h.insert("last-event-id", HeaderValue::from_static("x"));
        assert!(resume_point(&h, &uri)
            .unwrap_err()
            .message
            .contains("Last-Event-ID"));
        let bad: Uri = "/x?after=-1".parse().unwrap();
        assert!(resume_point(&HeaderMap::new(), &bad)
            .unwrap_err()
            .message
            .contains("after"));
    }

    #[test]
    fn pages_take_a_limit_and_an_opaque_cursor() {
        let id = "deb-20260101-000000-abc123";
        let c = encode_cursor(id);
        let uri: Uri = format!("/v1/debates?limit=2&cursor={c}").parse().unwrap();
        assert_eq!(page_query(&uri).unwrap(), (2, Some(id.to_string())));
        let none: Uri = "/v1/debates".parse().unwrap();
        assert_eq!(page_query(&none).unwrap(), (DEFAULT_PAGE, None));
        for bad in [
            "limit=0",
            "limit=201",
            "limit=x",
            "cursor=%%",
            "cursor=Li4v",
        ] {
            let uri: Uri = format!("/v1/debates?{bad}").parse().unwrap();
            let e = page_query(&uri).unwrap_err();
            let field = bad.split('=').next().unwrap();
            assert!(e.message.starts_with(field), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn idempotency_headers_are_bounded() {
        let mut h = HeaderMap::new();
        assert_eq!(idempotency_header(&h).unwrap(), None);
        h.insert("idempotency-key", HeaderValue::from_static("abc-1"));
        assert_eq!(idempotency_header(&h).unwrap().as_deref(), Some("abc-1"));
        h.insert(
            "idempotency-key",
            HeaderValue::from_str(&"k".repeat(idempotency::MAX_KEY_BYTES + 1)).unwrap(),
        );
        assert!(idempotency_header(&h)
            .unwrap_err()
            .message
            .starts_with("Idempotency-Key"));
    }
}
