//! The HTTP routes: the page's assets and the JSON API under `/api/`.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/healthz` | `ok` while the server runs (no token needed; no data) |
//! | GET | `/api/config` | the backend kind and the form's defaults (agents, roles, providers with their allowed models, the agent limit) |
//! | GET | `/api/debates` | the debates, most recently updated first |
//! | POST | `/api/debates` | start one: `{problem, roles? \| agents?: [{name, role, model, provider?, temperature?}], rounds?, idempotencyKey?}` → 201 `{debateId}` |
//! | GET | `/api/debates/{id}` | its state (dialectic's DebateState JSON) |
//! | GET | `/api/debates/{id}/events` | Server-Sent Events, `id:` = the event's sequence number; resumes after `Last-Event-ID` or `?after=N` |
//! | POST | `/api/debates/{id}/retry` | resume a failed (or interrupted) debate |
//! | POST | `/api/debates/{id}/cancel` | cancel it |
//! | POST | `/api/debates/{id}/answers` | `{answers: [{id, answer}]}` to its clarification questions |
//! | POST | `/api/debates/{id}/feedback` | `{feedback: 1 \| -1}`: thumbs up/down on a completed debate (its `userFeedback`) |
//! | GET | `/api/debates/{id}/report` | the Markdown report (download) |
//! | GET | `/api/debates/{id}/state` | the state JSON (download) |
//!
//! Errors are `{"error": {"code", "message"}}` with the matching HTTP status.
//!
//! Guards, in order: the `Host` header (on loopback without a token only loopback names
//! are served, so a web page on another site cannot reach the API through DNS rebinding);
//! the `Origin` header (a browser request from another origin is refused); the bearer token
//! when one is set (`Authorization: Bearer <token>`, compared in constant time, for every
//! `/api/` route; the assets hold no data); a POST must be `Content-Type: application/json`
//! (so a plain cross-site form cannot send one); bodies are capped at [`MAX_BODY_BYTES`].

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
use axum::Router;
use futures::StreamExt as _;
use parley_protocol::subjects::{ErrorCode, ErrorReply};
use serde_json::{json, Value};

use crate::backend::{
    checked_id, AnswersRequest, ApiError, Backend, FeedbackRequest, SubmitRequest,
};
use crate::{assets, auth};

/// Bytes in one request body, at most (a submission's problem is at most 100 000
/// characters).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub backend: Arc<dyn Backend>,
    /// Set when the server requires a bearer token.
    pub token: Option<Arc<auth::Token>>,
    /// Serving on a loopback address without a token: only loopback `Host` names pass.
    pub loopback_only: bool,
    /// Cancelled when the server shuts down: event streams end.
    pub stop: tokio_util::sync::CancellationToken,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorReply::new(self.code, self.message).error;
        no_store(
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                json!({ "error": body }).to_string(),
            )
                .into_response(),
        )
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
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/config", get(config))
        .route("/debates", get(list).post(submit))
        .route("/debates/{id}", get(debate_state))
        .route("/debates/{id}/state", get(state_download))
        .route("/debates/{id}/report", get(report))
        .route("/debates/{id}/events", get(events))
        .route("/debates/{id}/retry", post(retry))
        .route("/debates/{id}/cancel", post(cancel))
        .route("/debates/{id}/answers", post(answers))
        .route("/debates/{id}/feedback", post(feedback))
        .fallback(api_not_found)
        .layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .nest("/api", api)
        .route("/healthz", get(|| async { "ok" }))
        .merge(assets::routes())
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), guard_origin))
        .layer(middleware::from_fn(assets::security_headers))
        .with_state(state)
}

async fn api_not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no API route {method} {}", uri.path()),
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

async fn require_token(State(s): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(token) = &s.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .unwrap_or("");
        if !token.matches(given) {
            let mut r = ApiError::new(
                ErrorCode::InvalidRequest,
                "missing or wrong bearer token (Authorization: Bearer <token>)",
            )
            .with_status(401)
            .into_response();
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"parley\""),
            );
            return r;
        }
    }
    next.run(req).await
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

async fn config(State(s): State<AppState>) -> Response {
    let d = s.backend.defaults();
    json_response(
        StatusCode::OK,
        &json!({
            "backend": s.backend.kind(),
            "auth": s.token.is_some(),
            "defaults": d,
            "limits": { "answerChars": crate::backend::MAX_ANSWER_CHARS },
        }),
    )
}

async fn list(State(s): State<AppState>) -> Result<Response, ApiError> {
    let debates = s.backend.list().await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "debates": debates }),
    ))
}

async fn submit(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let request: SubmitRequest = json_body(&headers, body)?;
    request.validate()?;
    let id = s.backend.submit(request).await?;
    let mut r = json_response(StatusCode::CREATED, &json!({ "debateId": id }));
    if let Ok(v) = HeaderValue::from_str(&format!("/api/debates/{id}")) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

async fn debate_state(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = checked_id(&id)?;
    Ok(json_response(StatusCode::OK, &s.backend.state(id).await?))
}

async fn state_download(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = checked_id(&id)?;
    let state = s.backend.state(id).await?;
    let text = serde_json::to_string_pretty(&state).unwrap_or_default();
    Ok(download(text, "application/json", &format!("{id}.json")))
}

async fn report(State(s): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = checked_id(&id)?;
    let md = s.backend.report(id).await?;
    Ok(download(
        md,
        "text/markdown; charset=utf-8",
        &format!("{id}.md"),
    ))
}

fn download(body: String, content_type: &'static str, file: &str) -> Response {
    let mut r = no_store(([(header::CONTENT_TYPE, content_type)], body).into_response());
    // `file` is a checked debate id plus an extension: no quoting needed.
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{file}\"")) {
        r.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    r
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

async fn events(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let id = checked_id(&id)?;
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

async fn retry(State(s): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = checked_id(&id)?;
    Ok(json_response(StatusCode::OK, &s.backend.retry(id).await?))
}

async fn cancel(State(s): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = checked_id(&id)?;
    Ok(json_response(StatusCode::OK, &s.backend.cancel(id).await?))
}

async fn answers(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let id = checked_id(&id)?.to_string();
    let request: AnswersRequest = json_body(&headers, body)?;
    request.validate()?;
    Ok(json_response(
        StatusCode::OK,
        &s.backend.answer(&id, request).await?,
    ))
}

async fn feedback(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let id = checked_id(&id)?.to_string();
    let request: FeedbackRequest = json_body(&headers, body)?;
    request.validate()?;
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
}
