//! Trace context across processes: in NATS message headers, and as a plain W3C
//! `traceparent` string (for checkpoints in Redis).
//!
//! Sending side: `inject_current(&mut headers)` (or [`inject_headers`] with an explicit
//! context) before publishing. Receiving side: create the span for the work, then
//! `set_parent(&span, extract_headers(msg.headers.as_ref()))` **before entering it** (a
//! span's parent can no longer change once it was entered or had children).
//!
//! A coordinator that takes a debate over continues the debate's trace with
//! `set_parent(&debate_span, context_from_traceparent(&checkpointed))`, where the previous
//! owner stored `current_traceparent()` from inside its debate span.

#[cfg(feature = "nats")]
use async_nats::HeaderMap;
use opentelemetry::propagation::TextMapPropagator as _;
#[cfg(feature = "nats")]
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

#[cfg(feature = "nats")]
/// Writes propagation fields into NATS headers (replacing earlier values of the same name).
pub struct NatsInjector<'a>(pub &'a mut HeaderMap);

#[cfg(feature = "nats")]
impl Injector for NatsInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // Fallible on purpose: a value carried in from elsewhere (a `tracestate`) must not
        // panic the header path; an invalid one is left out.
        if let (Ok(k), Ok(v)) = (
            key.parse::<async_nats::HeaderName>(),
            value.parse::<async_nats::HeaderValue>(),
        ) {
            self.0.insert(k, v);
        }
    }
}

#[cfg(feature = "nats")]
/// Reads propagation fields from NATS headers; names match exactly first, then ignoring
/// ASCII case (`Traceparent` from other clients is understood).
pub struct NatsExtractor<'a>(pub &'a HeaderMap);

#[cfg(feature = "nats")]
impl Extractor for NatsExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        if let Some(v) = self.0.get(key) {
            return Some(v.as_str());
        }
        self.0
            .iter()
            .find(|(name, _)| AsRef::<str>::as_ref(*name).eq_ignore_ascii_case(key))
            .and_then(|(_, values)| values.first())
            .map(|v| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(name, _)| name.as_ref()).collect()
    }
}

#[cfg(feature = "nats")]
/// Writes `ctx` into `headers` with the global propagator (W3C TraceContext once
/// [`crate::init_telemetry`] ran; nothing is written before that). A context without a
/// valid span writes nothing.
pub fn inject_headers(ctx: &Context, headers: &mut HeaderMap) {
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(ctx, &mut NatsInjector(headers))
    });
}

#[cfg(feature = "nats")]
/// [`inject_headers`] with the current `tracing` span's context.
pub fn inject_current(headers: &mut HeaderMap) {
    inject_headers(&current_context(), headers);
}

#[cfg(feature = "nats")]
/// The remote context in `headers` (global propagator), to pass to [`set_parent`]. No
/// headers, no trace headers or malformed ones: an empty context (the span becomes a root).
pub fn extract_headers(headers: Option<&HeaderMap>) -> Context {
    match headers {
        Some(headers) => opentelemetry::global::get_text_map_propagator(|p| {
            p.extract_with_context(&Context::new(), &NatsExtractor(headers))
        }),
        None => Context::new(),
    }
}

/// The OpenTelemetry context of the current `tracing` span (empty outside traced spans).
pub fn current_context() -> Context {
    tracing::Span::current().context()
}

/// `traceparent` of the current `tracing` span (`00-<trace id>-<span id>-<flags>`), or
/// `None` outside a span that OpenTelemetry tracks.
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&current_context())
}

/// `traceparent` of the span in `ctx`, or `None` when it holds no valid span context.
pub fn traceparent_of(ctx: &Context) -> Option<String> {
    let span = ctx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// A remote context from a `traceparent` string (W3C TraceContext, whatever the global
/// propagator is); an empty context when the string is not a valid `traceparent`.
pub fn context_from_traceparent(traceparent: &str) -> Context {
    let carrier = std::collections::HashMap::from([(
        "traceparent".to_string(),
        traceparent.trim().to_string(),
    )]);
    TraceContextPropagator::new().extract_with_context(&Context::new(), &carrier)
}

/// Makes `ctx` the OpenTelemetry parent of `span`. Call it right after creating the span,
/// before entering it or creating children; later calls, calls without the telemetry
/// subscriber, and empty contexts change nothing. Returns whether the parent was set.
pub fn set_parent(span: &tracing::Span, ctx: Context) -> bool {
    if !ctx.span().span_context().is_valid() {
        return false;
    }
    span.set_parent(ctx).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn w3c() {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    }

    #[cfg(feature = "nats")]
    #[test]
    fn traceparent_round_trips_through_nats_headers() {
        w3c();
        let ctx = context_from_traceparent(TP);
        assert!(ctx.span().span_context().is_remote());
        assert_eq!(traceparent_of(&ctx).as_deref(), Some(TP));

        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", "task-1");
        inject_headers(&ctx, &mut headers);
        assert_eq!(headers.get("traceparent").map(|v| v.as_str()), Some(TP));
        assert_eq!(
            headers.get("Nats-Msg-Id").map(|v| v.as_str()),
            Some("task-1")
        );

        let back = extract_headers(Some(&headers.clone()));
        assert_eq!(traceparent_of(&back).as_deref(), Some(TP));
        assert_eq!(
            back.span().span_context().trace_id(),
            ctx.span().span_context().trace_id()
        );
    }

    #[cfg(feature = "nats")]
    #[test]
    fn tracestate_is_carried_and_header_names_match_ignoring_case() {
        w3c();
        let mut headers = HeaderMap::new();
        headers.insert("Traceparent", TP);
        headers.insert("tracestate", "vendor=abc");
        let ctx = extract_headers(Some(&headers));
        assert_eq!(traceparent_of(&ctx).as_deref(), Some(TP));
        assert_eq!(
            ctx.span().span_context().trace_state().get("vendor"),
            Some("abc")
        );
        let mut out = HeaderMap::new();
        inject_headers(&ctx, &mut out);
        assert_eq!(
            out.get("tracestate").map(|v| v.as_str()),
            Some("vendor=abc")
        );
    }

    #[cfg(feature = "nats")]
    #[test]
    fn missing_or_malformed_context_is_empty() {
        w3c();
        for ctx in [
            extract_headers(None),
            extract_headers(Some(&HeaderMap::new())),
            context_from_traceparent(""),
            context_from_traceparent("00-zz-00f067aa0ba902b7-01"),
            context_from_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        ] {
            assert!(!ctx.span().span_context().is_valid());
            assert_eq!(traceparent_of(&ctx), None);
        }
        let mut headers = HeaderMap::new();
        inject_headers(&Context::new(), &mut headers);
        assert!(headers.is_empty(), "nothing to inject");
        assert!(!set_parent(&tracing::Span::none(), Context::new()));
        assert_eq!(current_traceparent(), None, "no subscriber, no span");
    }
}
