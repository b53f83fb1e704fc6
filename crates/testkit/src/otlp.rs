//! A real OTLP trace receiver for tests: point a service at it and check its spans.
//!
//! [`OtlpReceiver::start`] listens on two ephemeral loopback ports:
//! - OTLP/HTTP, `POST /v1/traces` with a protobuf (`application/x-protobuf`) or JSON
//!   (`application/json`) `ExportTraceServiceRequest`, answered 200 with an empty
//!   `ExportTraceServiceResponse` in the same encoding; any other route → 404, another
//!   content type → 415, an undecodable body → 400 (the body is kept either way);
//! - OTLP/gRPC, `opentelemetry.proto.collector.trace.v1.TraceService/Export`.
//!
//! A service exports to it with `OTEL_EXPORTER_OTLP_ENDPOINT=<endpoint()>` and
//! `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`, or `OTEL_EXPORTER_OTLP_ENDPOINT=
//! <grpc_endpoint()>` (gRPC is the default protocol). Every span received is kept in memory,
//! flattened into a [`ReceivedSpan`], and every request body is kept as bytes so a test can
//! assert that a secret never left the process ([`OtlpReceiver::raw_bodies_contain`]).
//! The servers stop when the receiver is dropped.

use anyhow::Context as _;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode as OtlpStatus};
use prost::Message as _;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A span's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanStatus {
    /// Not set (the default).
    Unset,
    /// Explicitly OK.
    Ok,
    /// An error.
    Error,
}

/// An event recorded on a span (with tracing-opentelemetry: a log event inside the span).
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedEvent {
    /// Event name (for a `tracing` event: its message).
    pub name: String,
    /// Attributes, values stringified as for [`ReceivedSpan::attributes`].
    pub attributes: BTreeMap<String, String>,
}

/// One span the receiver got, flattened with its resource and scope.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// Trace id, 32 lower-case hex digits.
    pub trace_id: String,
    /// Span id, 16 lower-case hex digits.
    pub span_id: String,
    /// Parent span id in hex; empty for a root span.
    pub parent_span_id: String,
    /// Span name.
    pub name: String,
    /// `SPAN_KIND_INTERNAL`, `SPAN_KIND_SERVER`, … (the protobuf enum name).
    pub kind: String,
    /// The resource's `service.name` (empty when absent).
    pub service_name: String,
    /// The instrumentation scope's name.
    pub scope_name: String,
    /// Span attributes. Strings as they are; bools, ints and doubles formatted with
    /// `to_string`; bytes in hex; arrays as `[a, b]`; key-value lists as `{k=v, …}`.
    pub attributes: BTreeMap<String, String>,
    /// Resource attributes, stringified the same way.
    pub resource: BTreeMap<String, String>,
    /// Span events in order.
    pub events: Vec<ReceivedEvent>,
    /// Status code.
    pub status: SpanStatus,
    /// Status message (set with an error status).
    pub status_message: String,
    /// Start time, ns since the Unix epoch.
    pub start_unix_nanos: u64,
    /// End time, ns since the Unix epoch.
    pub end_unix_nanos: u64,
}

impl ReceivedSpan {
    /// Whether the span has no parent.
    pub fn is_root(&self) -> bool {
        self.parent_span_id.is_empty()
    }

    /// Whether `parent` is this span's parent (same trace, parent id matches).
    pub fn is_child_of(&self, parent: &ReceivedSpan) -> bool {
        self.trace_id == parent.trace_id && self.parent_span_id == parent.span_id
    }

    /// An attribute's stringified value.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    /// Whether the status is [`SpanStatus::Error`].
    pub fn is_error(&self) -> bool {
        self.status == SpanStatus::Error
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// Every request body as received (gRPC: the decoded request re-encoded).
    bodies: Vec<Vec<u8>>,
    /// `Authorization` headers of the HTTP exports (a Langfuse export carries Basic auth).
    authorizations: Vec<String>,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Received>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Received> {
        // A test that panicked while holding the lock must not hide the spans.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record_body(&self, body: Vec<u8>) {
        self.lock().bodies.push(body);
    }

    fn record_request(&self, request: &ExportTraceServiceRequest) {
        let spans = flatten(request);
        self.lock().spans.extend(spans);
    }
}

/// A running OTLP trace receiver on `127.0.0.1` (HTTP and gRPC). Stops when dropped.
pub struct OtlpReceiver {
    http_addr: SocketAddr,
    grpc_addr: SocketAddr,
    shared: Shared,
    shutdown: watch::Sender<bool>,
}

impl std::fmt::Debug for OtlpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpReceiver")
            .field("endpoint", &self.endpoint())
            .field("grpc_endpoint", &self.grpc_endpoint())
            .finish_non_exhaustive()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl OtlpReceiver {
    /// Starts both servers on ephemeral loopback ports (inside a Tokio runtime).
    pub async fn start() -> anyhow::Result<OtlpReceiver> {
        let shared = Shared::default();
        let (shutdown, stop) = watch::channel(false);
        let stopped = |mut stop: watch::Receiver<bool>| async move {
            let _ = stop.wait_for(|v| *v).await;
        };

        let http = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("while binding the OTLP/HTTP receiver to 127.0.0.1:0")?;
        let http_addr = http.local_addr()?;
        let app = Router::new()
            .route("/v1/traces", post(http_export))
            // Langfuse's OTLP route (`$LANGFUSE_HOST/api/public/otel`).
            .route("/api/public/otel/v1/traces", post(http_export))
            .with_state(shared.clone());
        let stop_http = stopped(stop.clone());
        tokio::spawn(async move {
            let _ = axum::serve(http, app)
                .with_graceful_shutdown(stop_http)
                .await;
        });

        let grpc = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("while binding the OTLP/gRPC receiver to 127.0.0.1:0")?;
        let grpc_addr = grpc.local_addr()?;
        let service = TraceServiceServer::new(GrpcSink(shared.clone()));
        let stop_grpc = stopped(stop);
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(grpc),
                    stop_grpc,
                )
                .await;
        });

        Ok(OtlpReceiver {
            http_addr,
            grpc_addr,
            shared,
            shutdown,
        })
    }

    /// Base URL of the OTLP/HTTP receiver, e.g. `http://127.0.0.1:PORT`: the value for
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` with `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// Full URL of the OTLP/HTTP traces route (`…/v1/traces`): the value for
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
    pub fn traces_url(&self) -> String {
        format!("http://{}/v1/traces", self.http_addr)
    }

    /// URL of the OTLP/gRPC receiver, e.g. `http://127.0.0.1:PORT`: the value for
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` with the default protocol (`grpc`).
    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.grpc_addr)
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.shared.lock().spans.clone()
    }

    /// The spans with this name, in arrival order.
    pub fn spans_named(&self, name: &str) -> Vec<ReceivedSpan> {
        self.shared
            .lock()
            .spans
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }

    /// The spans of one trace, in arrival order.
    pub fn trace(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        self.shared
            .lock()
            .spans
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }

    /// How many export requests arrived (over both transports), decodable or not.
    pub fn export_requests(&self) -> usize {
        self.shared.lock().bodies.len()
    }

    /// Whether any received request body contains `needle` (e.g. an API key or the debate's
    /// problem text, which must never be exported).
    pub fn raw_bodies_contain(&self, needle: &[u8]) -> bool {
        !needle.is_empty()
            && self
                .shared
                .lock()
                .bodies
                .iter()
                .any(|b| b.windows(needle.len()).any(|w| w == needle))
    }

    /// The `Authorization` header of every OTLP/HTTP export request, in arrival order.
    pub fn authorizations(&self) -> Vec<String> {
        self.shared.lock().authorizations.clone()
    }

    /// Base URL to give as `LANGFUSE_HOST`: exports then arrive on Langfuse's route.
    pub fn langfuse_host(&self) -> String {
        self.endpoint()
    }

    /// Forgets every span and body received so far.
    pub fn clear(&self) {
        let mut received = self.shared.lock();
        received.spans.clear();
        received.bodies.clear();
    }

    /// Waits (polling every 20 ms, sleeping with tokio) until `done` holds for the spans
    /// received so far; returns them, or an error listing the span names after `timeout`.
    pub async fn wait_for_spans(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&[ReceivedSpan]) -> bool,
    ) -> anyhow::Result<Vec<ReceivedSpan>> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return Ok(spans);
            }
            if Instant::now() >= deadline {
                let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
                anyhow::bail!(
                    "after {timeout:?} the OTLP receiver has {} spans, not what was awaited: {names:?}",
                    spans.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

async fn http_export(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    shared.record_body(body.to_vec());
    if let Some(auth) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        shared.lock().authorizations.push(auth.to_string());
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match content_type.as_str() {
        PROTOBUF => match ExportTraceServiceRequest::decode(body) {
            Ok(request) => {
                shared.record_request(&request);
                (
                    [(header::CONTENT_TYPE, PROTOBUF)],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
                    .into_response()
            }
            Err(e) => (StatusCode::BAD_REQUEST, format!("bad protobuf: {e}")).into_response(),
        },
        JSON => match serde_json::from_slice::<ExportTraceServiceRequest>(&body) {
            Ok(request) => {
                shared.record_request(&request);
                ([(header::CONTENT_TYPE, JSON)], "{}").into_response()
            }
            Err(e) => (StatusCode::BAD_REQUEST, format!("bad JSON: {e}")).into_response(),
        },
        other => (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content type {other:?}: expected {PROTOBUF} or {JSON}"),
        )
            .into_response(),
    }
}

struct GrpcSink(Shared);

#[tonic::async_trait]
impl TraceService for GrpcSink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        self.0.record_body(request.encode_to_vec());
        self.0.record_request(&request);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn flatten(request: &ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for resource_spans in &request.resource_spans {
        let resource = resource_spans
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service_name = resource.get("service.name").cloned().unwrap_or_default();
        for scope_spans in &resource_spans.scope_spans {
            let scope_name = scope_spans
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for span in &scope_spans.spans {
                let (status, status_message) = match &span.status {
                    Some(s) => (
                        match OtlpStatus::try_from(s.code) {
                            Ok(OtlpStatus::Ok) => SpanStatus::Ok,
                            Ok(OtlpStatus::Error) => SpanStatus::Error,
                            _ => SpanStatus::Unset,
                        },
                        s.message.clone(),
                    ),
                    None => (SpanStatus::Unset, String::new()),
                };
                out.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    kind: SpanKind::try_from(span.kind)
                        .unwrap_or(SpanKind::Unspecified)
                        .as_str_name()
                        .to_string(),
                    service_name: service_name.clone(),
                    scope_name: scope_name.clone(),
                    attributes: attributes(&span.attributes),
                    resource: resource.clone(),
                    events: span
                        .events
                        .iter()
                        .map(|e| ReceivedEvent {
                            name: e.name.clone(),
                            attributes: attributes(&e.attributes),
                        })
                        .collect(),
                    status,
                    status_message,
                    start_unix_nanos: span.start_time_unix_nano,
                    end_unix_nanos: span.end_time_unix_nano,
                });
            }
        }
    }
    out
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(value).unwrap_or_default(),
            )
        })
        .collect()
}

fn value(v: &AnyValue) -> String {
    match &v.value {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BytesValue(b)) => hex(b),
        Some(any_value::Value::ArrayValue(a)) => {
            let items: Vec<String> = a.values.iter().map(value).collect();
            format!("[{}]", items.join(", "))
        }
        Some(any_value::Value::KvlistValue(l)) => {
            let items: Vec<String> = l
                .values
                .iter()
                .map(|kv| {
                    format!(
                        "{}={}",
                        kv.key,
                        kv.value.as_ref().map(value).unwrap_or_default()
                    )
                })
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
