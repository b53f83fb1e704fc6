//! The global subscriber: JSON logs with trace ids, an OpenTelemetry layer, OTLP export.

use anyhow::{anyhow, bail, Context as _};
use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry::{Key, KeyValue};
use opentelemetry_otlp::{
    Protocol, WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::fmt;
use std::time::Duration;
use tracing::{Dispatch, Event, Subscriber};
use tracing_opentelemetry::OtelData;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Filter directives (`EnvFilter` syntax) for the log lines on stderr.
pub const LOG_FILTER_ENV: &str = "PARLEY_LOG";
/// Filter directives (`EnvFilter` syntax) for the spans and span events that are exported.
pub const TRACE_FILTER_ENV: &str = "PARLEY_TRACE";
/// `json` (default) or `text`.
pub const LOG_FORMAT_ENV: &str = "PARLEY_LOG_FORMAT";

const DEFAULT_FILTER: &str = "info";
/// Targets whose spans would be created by the exporter itself while exporting (and would
/// then be exported, and so on); they are switched off in the trace filter unless the
/// `PARLEY_TRACE` directives name them.
const EXPORTER_TARGETS: &[&str] = &[
    "h2",
    "hyper",
    "hyper_util",
    "reqwest",
    "tonic",
    "tower",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry_otlp",
    "opentelemetry-otlp",
    "opentelemetry_http",
];
/// How long dropping the guard waits for the last spans to be exported.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (collector port 4317). The default, as in the OpenTelemetry spec.
    Grpc,
    /// OTLP/HTTP with protobuf bodies (collector port 4318, path `/v1/traces`).
    HttpProtobuf,
}

/// Where and how spans are exported.
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpExport {
    /// Transport.
    pub protocol: OtlpProtocol,
    /// The full URL the exporter sends to: for [`OtlpProtocol::HttpProtobuf`] including the
    /// `/v1/traces` path (e.g. `http://127.0.0.1:4318/v1/traces`), for
    /// [`OtlpProtocol::Grpc`] the collector's base URL (e.g. `http://127.0.0.1:4317`).
    /// `https://` uses TLS (rustls, system and bundled roots).
    pub endpoint: String,
    /// Extra HTTP headers on every export (HTTP only; e.g. Langfuse's `Authorization`),
    /// added to those of `OTEL_EXPORTER_OTLP_HEADERS`. Values are secrets: `Debug` hides them.
    pub headers: Vec<(String, String)>,
}

impl OtlpExport {
    pub fn new(protocol: OtlpProtocol, endpoint: impl Into<String>) -> Self {
        Self {
            protocol,
            endpoint: endpoint.into(),
            headers: Vec::new(),
        }
    }
}

impl fmt::Debug for OtlpExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("OtlpExport")
            .field("protocol", &self.protocol)
            .field("endpoint", &self.endpoint)
            .field("headers", &names)
            .finish()
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One JSON object per line (tracing-subscriber's JSON layout plus `trace_id` and
    /// `span_id`). The default, for services.
    #[default]
    Json,
    /// Human-readable single lines, without colours, ending with `trace_id=… span_id=…`
    /// inside a traced span.
    Text,
}

/// Everything [`TelemetryOptions::init`] needs. [`TelemetryOptions::from_env`] fills it
/// from the environment; fields can be changed before `init`.
#[derive(Debug, Clone)]
pub struct TelemetryOptions {
    /// `service.name`, unless `OTEL_SERVICE_NAME` or `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES` is set (those win).
    pub service_name: String,
    /// `service.version`, unless `OTEL_RESOURCE_ATTRIBUTES` sets it.
    pub service_version: String,
    /// `EnvFilter` directives for the log lines.
    pub log_filter: String,
    /// `EnvFilter` directives for the exported spans and span events.
    pub trace_filter: String,
    /// Log line format.
    pub log_format: LogFormat,
    /// `None`: spans get ids (so logs and propagated contexts carry them) but nothing is
    /// exported and no background thread runs.
    pub otlp: Option<OtlpExport>,
}

impl TelemetryOptions {
    /// Options from the environment (see the crate docs for the variables). Errors name the
    /// variable whose value is wrong.
    pub fn from_env(service_name: impl Into<String>) -> anyhow::Result<Self> {
        Self::from_lookup(service_name.into(), |k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) with an explicit variable lookup (for tests).
    pub(crate) fn from_lookup(
        service_name: String,
        get: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let non_empty = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let log_format = match non_empty(LOG_FORMAT_ENV).as_deref() {
            None | Some("json") => LogFormat::Json,
            Some("text") => LogFormat::Text,
            Some(other) => bail!("{LOG_FORMAT_ENV}={other:?}: expected `json` or `text`"),
        };
        Ok(Self {
            service_name,
            service_version: env!("CARGO_PKG_VERSION").to_string(),
            log_filter: non_empty(LOG_FILTER_ENV).unwrap_or_else(|| DEFAULT_FILTER.into()),
            trace_filter: non_empty(TRACE_FILTER_ENV).unwrap_or_else(|| DEFAULT_FILTER.into()),
            log_format,
            otlp: otlp_from_lookup(&non_empty)?,
        })
    }

    /// Installs the global subscriber (see [`init_telemetry`]).
    pub fn init(self) -> anyhow::Result<TelemetryGuard> {
        let (dispatch, guard) = self.build_with_writer(std::io::stderr)?;
        dispatch
            .try_init()
            .map_err(|e| anyhow!("installing the global tracing subscriber: {e}"))?;
        if let Some(provider) = &guard.provider {
            opentelemetry::global::set_tracer_provider(provider.clone());
        }
        Ok(guard)
    }

    /// Builds the subscriber without installing it, logging to stderr: for tests, with
    /// `tracing::dispatcher::with_default` / `set_default`. Also sets the global W3C
    /// TraceContext propagator.
    pub fn build(self) -> anyhow::Result<(Dispatch, TelemetryGuard)> {
        self.build_with_writer(std::io::stderr)
    }

    pub(crate) fn build_with_writer<W>(
        self,
        writer: W,
    ) -> anyhow::Result<(Dispatch, TelemetryGuard)>
    where
        W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
    {
        let log_filter = EnvFilter::try_new(&self.log_filter)
            .with_context(|| format!("{LOG_FILTER_ENV}={:?}: bad filter", self.log_filter))?;
        let trace_filter = trace_filter(&self.trace_filter)?;

        let mut provider = SdkTracerProvider::builder().with_resource(resource(&self));
        let mut export_runtime = None;
        if let Some(otlp) = &self.otlp {
            let exporter = span_exporter(otlp, &mut export_runtime)?;
            provider = provider.with_span_processor(BatchSpanProcessor::builder(exporter).build());
        }
        let provider = provider.build();
        let tracer = provider.tracer("parley");

        let fmt_layer: Box<dyn Layer<Registry> + Send + Sync> = match self.log_format {
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .json()
                .with_writer(writer)
                .event_format(WithTraceIds {
                    inner: tracing_subscriber::fmt::format().json(),
                    json: true,
                })
                .with_filter(log_filter)
                .boxed(),
            LogFormat::Text => tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(writer)
                .event_format(WithTraceIds {
                    inner: tracing_subscriber::fmt::format().with_ansi(false),
                    json: false,
                })
                .with_filter(log_filter)
                .boxed(),
        };
        let otel_layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(trace_filter);
        let subscriber = Registry::default().with(fmt_layer).with(otel_layer);

        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let exporting = self.otlp.is_some();
        Ok((
            Dispatch::new(subscriber),
            TelemetryGuard {
                provider: Some(provider),
                export_runtime,
                exporting,
            },
        ))
    }
}

/// Installs the process's telemetry; call once, first thing in `main` (inside or outside
/// the Tokio runtime), and keep the guard until `main` returns.
///
/// Equivalent to `TelemetryOptions::from_env(service_name)?.init()`. It installs:
/// - a log layer on stderr, filtered by `PARLEY_LOG` (default `info`), JSON by default
///   (`PARLEY_LOG_FORMAT=text` for plain lines). Inside a span known to OpenTelemetry
///   (see `PARLEY_TRACE`), every line carries `trace_id` and `span_id` (hex) of the
///   innermost such span;
/// - an OpenTelemetry layer with its own filter, `PARLEY_TRACE` (default `info`), so a quiet
///   console still exports spans. Spans always get ids (so log lines and contexts sent to
///   other services carry them); they are exported over OTLP only when
///   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set, by a
///   batch span processor on its own thread; the exporter does its I/O on threads of its
///   own too (gRPC: a private single-thread Tokio runtime; HTTP: reqwest's blocking
///   client), never on the application's runtime. Events that pass `PARLEY_TRACE` are recorded
///   as span events, so what must not be logged must not be exported either: never put
///   secrets, prompts or completions in span fields or events;
/// - the resource `service.name` (= `service_name` unless `OTEL_SERVICE_NAME`),
///   `service.version`, `service.instance.id` (`host-pid-random`), plus
///   `OTEL_RESOURCE_ATTRIBUTES`;
/// - the global W3C TraceContext propagator (used by [`crate::inject_headers`]) and the
///   global tracer provider.
///
/// Errors: a bad variable (named in the message), the OTLP exporter could not be built
/// (e.g. a bad URL), or a global subscriber was already installed.
pub fn init_telemetry(service_name: &'static str) -> anyhow::Result<TelemetryGuard> {
    TelemetryOptions::from_env(service_name)?.init()
}

/// Keeps the tracer provider alive; on drop, exports the spans still buffered and shuts
/// the exporter down, blocking the dropping thread for at most 5 s.
///
/// Dropping is safe anywhere — outside a runtime, or inside a Tokio runtime of either
/// flavor, even on its only worker thread — because the exporter never needs the
/// application's runtime: gRPC export runs on a private single-thread runtime owned by the
/// guard, HTTP export on reqwest's blocking-client thread.
#[must_use = "dropping the guard shuts the exporter down"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    /// Drives the gRPC exporter's connection; stopped after the provider shut down.
    export_runtime: Option<ExportRuntime>,
    exporting: bool,
}

impl fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryGuard")
            .field("exporting", &self.exporting)
            .finish()
    }
}

impl TelemetryGuard {
    /// Whether spans are being exported over OTLP.
    pub fn is_exporting(&self) -> bool {
        self.exporting
    }

    /// Exports the finished spans buffered so far and waits for it (blocking, like drop).
    /// Spans still open are exported when they close.
    pub fn flush(&self) -> anyhow::Result<()> {
        match &self.provider {
            Some(provider) => provider
                .force_flush()
                .map_err(|e| anyhow!("flushing spans: {e}")),
            None => Ok(()),
        }
    }

    /// Shuts down now instead of on drop, reporting an export failure.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        self.shutdown_inner()
    }

    fn shutdown_inner(&mut self) -> anyhow::Result<()> {
        let result = match self.provider.take() {
            Some(provider) => provider
                .shutdown_with_timeout(SHUTDOWN_TIMEOUT)
                .map_err(|e| anyhow!("shutting the span exporter down: {e}")),
            None => Ok(()),
        };
        if let Some(runtime) = self.export_runtime.take() {
            runtime.stop();
        }
        result
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown_inner() {
            if self.exporting {
                // The subscriber may still work; stderr always does.
                eprintln!("parley-telemetry: {e:#}");
            }
        }
    }
}

/// A single-thread Tokio runtime on its own thread, for the gRPC exporter's connection.
struct ExportRuntime {
    handle: tokio::runtime::Handle,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl ExportRuntime {
    fn start() -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the OTLP exporter's runtime")?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("parley-otlp-export".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .context("starting the OTLP exporter's thread")?;
        Ok(Self {
            handle,
            stop,
            thread,
        })
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

fn otlp_from_lookup(get: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Option<OtlpExport>> {
    if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match get("OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            bail!("OTEL_TRACES_EXPORTER={other:?}: only `otlp` and `none` are supported")
        }
    }
    let (protocol_var, protocol) = match get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        Some(p) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Some(p)),
        None => (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            get("OTEL_EXPORTER_OTLP_PROTOCOL"),
        ),
    };
    let protocol = match protocol.as_deref() {
        None | Some("grpc") => OtlpProtocol::Grpc,
        Some("http/protobuf") => OtlpProtocol::HttpProtobuf,
        Some(other) => bail!("{protocol_var}={other:?}: expected `grpc` or `http/protobuf`"),
    };
    let endpoint = if let Some(e) = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        e
    } else if let Some(e) = get("OTEL_EXPORTER_OTLP_ENDPOINT") {
        match protocol {
            OtlpProtocol::Grpc => e,
            OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", e.trim_end_matches('/')),
        }
    } else {
        return Ok(None);
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        bail!("OTLP endpoint {endpoint:?}: expected an http:// or https:// URL");
    }
    Ok(Some(OtlpExport::new(protocol, endpoint)))
}

fn trace_filter(directives: &str) -> anyhow::Result<EnvFilter> {
    let mut filter = EnvFilter::try_new(directives)
        .with_context(|| format!("{TRACE_FILTER_ENV}={directives:?}: bad filter"))?;
    for target in EXPORTER_TARGETS {
        if !directives.contains(target) {
            filter = filter.add_directive(format!("{target}=off").parse()?);
        }
    }
    Ok(filter)
}

fn span_exporter(
    otlp: &OtlpExport,
    export_runtime: &mut Option<ExportRuntime>,
) -> anyhow::Result<opentelemetry_otlp::SpanExporter> {
    let exporter = match otlp.protocol {
        OtlpProtocol::Grpc => {
            // tonic spawns its connection task on the runtime current at build time.
            let runtime = ExportRuntime::start()?;
            let built = {
                let _entered = runtime.handle.enter();
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(otlp.endpoint.clone());
                if otlp.endpoint.starts_with("https://") {
                    builder = builder.with_tls_config(
                        opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                            .with_enabled_roots(),
                    );
                }
                builder.build()
            };
            match built {
                Ok(exporter) => {
                    *export_runtime = Some(runtime);
                    Ok(exporter)
                }
                Err(e) => {
                    runtime.stop();
                    Err(e)
                }
            }
        }
        OtlpProtocol::HttpProtobuf => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(otlp.endpoint.clone());
            if !otlp.headers.is_empty() {
                builder = builder.with_headers(otlp.headers.iter().cloned().collect());
            }
            builder.build()
        }
    };
    exporter.with_context(|| format!("building the OTLP exporter for {}", otlp.endpoint))
}

fn resource(opts: &TelemetryOptions) -> Resource {
    // The default builder already holds OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES; ours
    // only fill what they leave out.
    let from_env = Resource::builder().build();
    let missing = |key: &'static str| from_env.get(&Key::from_static_str(key)).is_none();
    let mut builder = Resource::builder();
    let env_name = from_env.get(&Key::from_static_str("service.name"));
    if env_name.is_none_or(|n| n.as_str() == "unknown_service") {
        builder = builder.with_service_name(opts.service_name.clone());
    }
    if missing("service.version") {
        builder = builder.with_attribute(KeyValue::new(
            "service.version",
            opts.service_version.clone(),
        ));
    }
    if missing("service.instance.id") {
        builder = builder.with_attribute(KeyValue::new("service.instance.id", instance_id()));
    }
    builder.build()
}

/// `hostname-pid-random`: the hostname and pid for people, the random part so a restarted
/// container (same hostname, pid 1) is a new instance.
fn instance_id() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        hasher.finish() as u32
    )
}

/// Wraps an event formatter and appends the innermost OpenTelemetry span's ids.
struct WithTraceIds<F> {
    inner: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some((trace_id, span_id)) = otel_ids(ctx) else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::with_capacity(256);
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let body_len = line.trim_end_matches(['\n', '\r']).len();
        if self.json {
            if line[..body_len].ends_with('}') {
                line.insert_str(
                    body_len - 1,
                    &format!(",\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\""),
                );
            }
        } else {
            line.insert_str(body_len, &format!(" trace_id={trace_id} span_id={span_id}"));
        }
        writer.write_str(&line)
    }
}

/// Ids of the innermost span in the event's scope that the OpenTelemetry layer tracks.
fn otel_ids<S, N>(ctx: &FmtContext<'_, S, N>) -> Option<(TraceId, SpanId)>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    for span in ctx.event_scope()? {
        let extensions = span.extensions();
        let Some(data) = extensions.get::<OtelData>() else {
            continue;
        };
        if let (Some(trace_id), Some(span_id)) = (data.trace_id(), data.span_id()) {
            if trace_id != TraceId::INVALID {
                return Some((trace_id, span_id));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::propagation::{context_from_traceparent, current_traceparent};
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    /// A `MakeWriter` that appends to a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<serde_json::Value> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect()
        }
    }

    fn options(log_format: LogFormat) -> TelemetryOptions {
        TelemetryOptions {
            service_name: "test".into(),
            service_version: "0".into(),
            log_filter: "info".into(),
            trace_filter: "info".into(),
            log_format,
            otlp: None,
        }
    }

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn json_lines_carry_the_trace_id_inside_a_traced_span() {
        let out = Captured::default();
        let mut o = options(LogFormat::Json);
        o.log_filter = "info,parley_telemetry=debug".into();
        let (dispatch, guard) = o.build_with_writer(out.clone()).unwrap();
        assert!(!guard.is_exporting());
        let mut span_traceparent = None;
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info!("outside");
            let span = tracing::info_span!("task", task = "t1");
            span.set_parent(context_from_traceparent(PARENT)).unwrap();
            let _entered = span.enter();
            tracing::info!(n = 1, "inside");
            span_traceparent = current_traceparent();
            let child = tracing::info_span!("llm_call");
            child.in_scope(|| tracing::warn!("nested"));
            // A debug span is logged but not traced (PARLEY_TRACE=info): its events carry
            // the ids of the nearest traced ancestor.
            tracing::debug_span!("quiet").in_scope(|| tracing::info!("in quiet"));
        });
        let lines = out.lines();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[0]["fields"]["message"], "outside");
        assert!(lines[0].get("trace_id").is_none(), "{}", lines[0]);

        let inside = &lines[1];
        assert_eq!(inside["fields"]["message"], "inside");
        assert_eq!(inside["fields"]["n"], 1);
        assert_eq!(inside["span"]["name"], "task");
        assert_eq!(inside["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        let span_id = inside["span_id"].as_str().unwrap();
        assert_eq!(span_id.len(), 16);
        assert_ne!(
            span_id, "00f067aa0ba902b7",
            "the span's own id, not its parent's"
        );
        assert_eq!(
            span_traceparent.as_deref(),
            Some(format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span_id}-01").as_str())
        );

        let nested = &lines[2];
        assert_eq!(nested["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_ne!(nested["span_id"], inside["span_id"]);
        assert_eq!(lines[3]["fields"]["message"], "in quiet");
        assert_eq!(lines[3]["span"]["name"], "quiet");
        assert_eq!(lines[3]["span_id"], inside["span_id"]);
        drop(guard);
    }

    #[test]
    fn a_root_span_gets_a_fresh_trace_id_and_text_lines_carry_it_too() {
        let out = Captured::default();
        let (dispatch, _guard) = options(LogFormat::Text)
            .build_with_writer(out.clone())
            .unwrap();
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info_span!("debate").in_scope(|| tracing::info!("hello"));
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let line = text.lines().next().unwrap();
        assert!(line.contains("hello"), "{line}");
        let trace_id = line
            .split(" trace_id=")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap();
        assert_eq!(trace_id.len(), 32, "{line}");
        assert_ne!(trace_id, "0".repeat(32));
        assert!(line.contains(" span_id="), "{line}");
    }

    #[test]
    fn options_from_environment() {
        let env = |pairs: &[(&str, &str)]| {
            let map: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            TelemetryOptions::from_lookup("svc".into(), move |k| map.get(k).cloned())
        };

        let o = env(&[]).unwrap();
        assert_eq!(
            (o.log_filter.as_str(), o.trace_filter.as_str()),
            ("info", "info")
        );
        assert_eq!(o.log_format, LogFormat::Json);
        assert_eq!(o.otlp, None, "no endpoint, no exporter");

        let o = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            (LOG_FILTER_ENV, "warn"),
            (TRACE_FILTER_ENV, "debug"),
        ])
        .unwrap();
        assert_eq!(
            (o.log_filter.as_str(), o.trace_filter.as_str()),
            ("warn", "debug")
        );
        assert_eq!(
            o.otlp,
            Some(OtlpExport::new(OtlpProtocol::Grpc, "http://collector:4317"))
        );

        let o = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ])
        .unwrap();
        assert_eq!(
            o.otlp.unwrap().endpoint,
            "http://collector:4318/v1/traces",
            "the generic endpoint gets the signal path"
        );

        let o = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://wrong:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:9999/custom"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ])
        .unwrap();
        assert_eq!(
            o.otlp,
            Some(OtlpExport::new(
                OtlpProtocol::HttpProtobuf,
                "http://c:9999/custom"
            )),
            "the traces variables win and the traces endpoint is used as is"
        );

        for disabled in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            let o = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"), disabled]).unwrap();
            assert_eq!(o.otlp, None, "{disabled:?}");
        }

        let err = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ])
        .unwrap_err();
        assert!(
            err.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"),
            "{err}"
        );
        let err = env(&[(LOG_FORMAT_ENV, "yaml")]).unwrap_err();
        assert!(err.to_string().contains(LOG_FORMAT_ENV), "{err}");
        let err = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]).unwrap_err();
        assert!(err.to_string().contains("collector:4317"), "{err}");
    }

    #[test]
    fn bad_filters_are_reported_with_their_variable() {
        let mut o = options(LogFormat::Json);
        o.log_filter = "info,[".into();
        let err = o.build().unwrap_err();
        assert!(err.to_string().contains(LOG_FILTER_ENV), "{err:#}");
        let mut o = options(LogFormat::Json);
        o.trace_filter = "=bogus=".into();
        let err = o.build().unwrap_err();
        assert!(err.to_string().contains(TRACE_FILTER_ENV), "{err:#}");
    }

    fn unreachable(protocol: OtlpProtocol) -> TelemetryOptions {
        let mut o = options(LogFormat::Json);
        // Port 1 on loopback: connection refused.
        o.otlp = Some(OtlpExport::new(
            protocol,
            match protocol {
                OtlpProtocol::Grpc => "http://127.0.0.1:1",
                OtlpProtocol::HttpProtobuf => "http://127.0.0.1:1/v1/traces",
            },
        ));
        o
    }

    /// Emits a span into the guard's buffer, drops the guard, and checks that drop returned
    /// well before the shutdown timeout (the export fails fast: connection refused).
    fn drop_with_a_buffered_span(protocol: OtlpProtocol) {
        let (dispatch, guard) = unreachable(protocol)
            .build_with_writer(Captured::default())
            .unwrap();
        assert!(guard.is_exporting());
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info_span!("buffered").in_scope(|| tracing::info!("x"));
        });
        let started = std::time::Instant::now();
        drop(guard);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{protocol:?}: {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn exporters_work_outside_a_runtime() {
        drop_with_a_buffered_span(OtlpProtocol::Grpc);
        drop_with_a_buffered_span(OtlpProtocol::HttpProtobuf);
    }

    /// The exporter needs nothing from the application's runtime, so dropping the guard on
    /// the runtime's only worker thread neither deadlocks nor waits for a timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn dropping_the_guard_inside_a_multi_thread_runtime_does_not_deadlock() {
        drop_with_a_buffered_span(OtlpProtocol::Grpc);
        drop_with_a_buffered_span(OtlpProtocol::HttpProtobuf);
        // The runtime still works afterwards.
        tokio::task::spawn(async {}).await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn dropping_the_guard_inside_a_current_thread_runtime_does_not_deadlock() {
        drop_with_a_buffered_span(OtlpProtocol::Grpc);
        drop_with_a_buffered_span(OtlpProtocol::HttpProtobuf);
    }

    #[test]
    fn resource_names_the_service_and_instance() {
        let r = resource(&options(LogFormat::Json));
        let get = |k: &'static str| r.get(&Key::from_static_str(k)).map(|v| v.to_string());
        // OTEL_SERVICE_NAME is not set in the test environment.
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            assert_eq!(get("service.name").as_deref(), Some("test"));
        }
        assert_eq!(get("service.version").as_deref(), Some("0"));
        let instance = get("service.instance.id").unwrap();
        assert!(
            instance.contains(&format!("-{}-", std::process::id())),
            "{instance}"
        );
        assert_ne!(instance_id(), instance_id(), "random part");
    }
}
