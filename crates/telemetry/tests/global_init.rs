//! `TelemetryOptions::init` installs the process-wide subscriber and propagator (its own
//! test binary: a process has one global subscriber).

use parley_telemetry::{
    current_traceparent, extract_headers, inject_current, LogFormat, TelemetryOptions,
};

#[test]
fn init_installs_the_global_subscriber_once() {
    let options = TelemetryOptions {
        service_name: "global-test".into(),
        service_version: "0".into(),
        log_filter: "off".into(),
        trace_filter: "info".into(),
        log_format: LogFormat::Json,
        otlp: None,
    };
    let guard = options.clone().init().unwrap();
    assert!(!guard.is_exporting());

    // Spans of the global subscriber get ids, and the global propagator writes them into
    // NATS headers.
    let span = tracing::info_span!("debate");
    let entered = span.enter();
    let traceparent = current_traceparent().expect("a traced span");
    let mut headers = async_nats::HeaderMap::new();
    inject_current(&mut headers);
    assert_eq!(
        headers.get("traceparent").map(|v| v.as_str().to_string()),
        Some(traceparent.clone())
    );
    drop(entered);
    let remote = extract_headers(Some(&headers));
    assert_eq!(
        parley_telemetry::traceparent_of(&remote).as_deref(),
        Some(traceparent.as_str())
    );

    let err = options.init().unwrap_err();
    assert!(err.to_string().contains("global"), "{err:#}");
    drop(guard);
}
