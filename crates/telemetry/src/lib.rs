//! Telemetry for Parley's services: logs, traces, metrics and health endpoints.
//!
//! # Layout
//! - [`init_telemetry`] (or [`TelemetryOptions::init`]): one call per binary. Installs the
//!   global `tracing` subscriber — JSON log lines on stderr that carry the OpenTelemetry
//!   `trace_id`/`span_id`, plus an OpenTelemetry layer that exports spans over OTLP when an
//!   endpoint is configured — and the W3C TraceContext propagator. Returns a
//!   [`TelemetryGuard`] that flushes and shuts the exporter down when dropped.
//! - [`propagation`]: trace context in NATS headers (`inject_headers`, `extract_headers`;
//!   feature `nats`, on by default) and as a plain `traceparent` string ([`current_traceparent`],
//!   [`context_from_traceparent`]) for checkpoints.
//! - [`mod@metrics`]: the process-wide Prometheus [`Metrics`] ([`metrics()`]), with one typed
//!   method per thing a service records.
//! - [`http`]: [`serve_http`] serves `GET /metrics`, `/healthz` and `/readyz`;
//!   `nats_ready` (feature `nats`) is a ready-made readiness check; [`parse_metrics_addr`] parses the
//!   `--metrics-addr` / `PARLEY_METRICS_ADDR` value.
//! - `spans`: [`task_span`], the span of one task run (the embedded driver and the workers).
//! - [`server`]: [`serve_router`], the HTTP loop of every port Parley opens (this one and
//!   `parley serve`), with a header-read timeout, an idle timeout and a connection cap.
//!
//! # Environment
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `PARLEY_LOG` | `EnvFilter` directives for the log lines on stderr | `info` |
//! | `PARLEY_TRACE` | `EnvFilter` directives for the spans (and span events) that are exported | `info` |
//! | `PARLEY_LOG_FORMAT` | `json` or `text` | `json` |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | where to export spans; neither set: no exporter | unset |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` | `grpc` or `http/protobuf` | `grpc` |
//! | `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`, `..._TIMEOUT`, `..._COMPRESSION` | read by the OTLP exporter | |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | resource attributes, win over the built-in ones | |
//! | `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_BSP_*` | sampler and batch processor settings, read by the SDK | |
//! | `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none` | no exporter | |
//! | `PARLEY_METRICS_ADDR` | where the services serve `/metrics`, `/healthz`, `/readyz` ([`parse_metrics_addr`]) | `0.0.0.0:9090` |
//!
//! # Wiring a service
//! ```no_run
//! use std::sync::Arc;
//! # async fn run() -> anyhow::Result<()> {
//! let _telemetry = parley_telemetry::init_telemetry("parley-coordinator")?;
//! let nats = async_nats::connect("127.0.0.1:4222").await?;
//! let shutdown = async { let _ = tokio::signal::ctrl_c().await; };
//! if let Some(addr) = parley_telemetry::parse_metrics_addr("0.0.0.0:9090")? {
//!     let bound = parley_telemetry::serve_http(addr, parley_telemetry::nats_ready(nats.clone()), shutdown).await?;
//!     tracing::info!(%bound, "serving /metrics, /healthz, /readyz");
//! }
//! // ... run the service; `_telemetry` is dropped last and flushes the spans.
//! # Ok(()) }
//! ```

pub mod http;
mod init;
pub mod langfuse;
pub mod metrics;
pub mod propagation;
pub mod server;
mod spans;

#[cfg(feature = "nats")]
pub use http::nats_ready;
pub use http::{
    all_ready, always_ready, parse_metrics_addr, serve_http, MetricsAddrError, NotReady, Readiness,
    DEFAULT_METRICS_ADDR, METRICS_ADDR_ENV,
};
pub use init::{
    init_telemetry, LogFormat, OtlpExport, OtlpProtocol, TelemetryGuard, TelemetryOptions,
    LOG_FILTER_ENV, LOG_FORMAT_ENV, TRACE_FILTER_ENV,
};
pub use metrics::{
    metrics, DeadLetterReason, DebateStatus, Direction, DropReason, InFlightGuard, Metrics,
    Outcome, RejectReason, StashRejectReason, TaskKind, WebhookAttempt, WebhookResult,
};
pub use propagation::{
    context_from_traceparent, current_context, current_traceparent, set_parent, traceparent_of,
};
#[cfg(feature = "nats")]
pub use propagation::{
    extract_headers, inject_current, inject_headers, NatsExtractor, NatsInjector,
};
pub use server::{serve_router, ConnectionLimits};
pub use spans::task_span;

/// Re-exported so services need no direct dependency to name a context or call
/// `OpenTelemetrySpanExt::set_parent` / `context()`.
pub use opentelemetry::Context as OtelContext;
pub use tracing_opentelemetry::OpenTelemetrySpanExt;
