//! The OTLP receiver gets what parley-telemetry exports, over both transports, with the
//! parent links, service names and trace context propagated through NATS headers.

use parley_telemetry::{
    extract_headers, inject_current, set_parent, LogFormat, OtlpExport, OtlpProtocol,
    TelemetryGuard, TelemetryOptions,
};
use parley_testkit::{OtlpReceiver, ReceivedSpan, SpanStatus};
use std::time::Duration;
use tracing::Dispatch;

/// A service's telemetry exporting to `receiver`, not installed globally (each test and
/// each simulated service gets its own), with logs switched off.
fn telemetry(
    service: &str,
    receiver: &OtlpReceiver,
    protocol: OtlpProtocol,
) -> (Dispatch, TelemetryGuard) {
    let endpoint = match protocol {
        OtlpProtocol::Grpc => receiver.grpc_endpoint(),
        OtlpProtocol::HttpProtobuf => receiver.traces_url(),
    };
    TelemetryOptions {
        service_name: service.to_string(),
        service_version: "1.2.3".into(),
        log_filter: "off".into(),
        trace_filter: "info".into(),
        log_format: LogFormat::Json,
        otlp: Some(OtlpExport::new(protocol, endpoint)),
    }
    .build()
    .unwrap()
}

fn one(spans: &[ReceivedSpan], name: &str) -> ReceivedSpan {
    let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name:?} span expected in {spans:#?}");
    found[0].clone()
}

/// Parent and child spans exported by one service, flushed by dropping the guard inside
/// the runtime (on a runtime with a single worker, which the receiver also runs on).
async fn parent_and_child(protocol: OtlpProtocol) {
    let receiver = OtlpReceiver::start().await.unwrap();
    let (dispatch, guard) = telemetry("parley-test-svc", &receiver, protocol);
    assert!(guard.is_exporting());
    tracing::dispatcher::with_default(&dispatch, || {
        let debate = tracing::info_span!("debate", debate_id = "d-1", rounds = 2_i64);
        debate.in_scope(|| {
            tracing::info_span!("task", kind = "agent").in_scope(|| {
                tracing::info!(tokens = 12_i64, "llm call done");
            });
            tracing::info_span!("judge").in_scope(|| tracing::error!("judge failed"));
        });
    });
    drop(guard);

    let spans = receiver
        .wait_for_spans(Duration::from_secs(5), |s| s.len() >= 3)
        .await
        .unwrap();
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let debate = one(&spans, "debate");
    let task = one(&spans, "task");
    let judge = one(&spans, "judge");

    assert!(debate.is_root(), "{debate:#?}");
    assert!(task.is_child_of(&debate), "{task:#?} / {debate:#?}");
    assert!(judge.is_child_of(&debate));
    assert_eq!(debate.trace_id.len(), 32);
    assert_eq!(task.span_id.len(), 16);
    for span in &spans {
        assert_eq!(span.service_name, "parley-test-svc");
        assert_eq!(span.resource["service.version"], "1.2.3");
        assert!(span.resource.contains_key("service.instance.id"));
        assert!(span.end_unix_nanos >= span.start_unix_nanos);
    }
    assert_eq!(debate.attr("debate_id"), Some("d-1"));
    assert_eq!(debate.attr("rounds"), Some("2"));
    assert_eq!(task.attr("kind"), Some("agent"));
    assert_eq!(task.events.len(), 1, "{task:#?}");
    assert_eq!(task.events[0].name, "llm call done");
    assert_eq!(task.events[0].attributes["tokens"], "12");
    assert_eq!(task.status, SpanStatus::Unset);
    assert!(
        judge.is_error(),
        "an error event marks its span: {judge:#?}"
    );

    assert!(receiver.export_requests() >= 1);
    assert!(receiver.raw_bodies_contain(b"llm call done"));
    assert!(!receiver.raw_bodies_contain(b"sk-never-exported"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn http_protobuf_export_keeps_parent_links_and_service_name() {
    parent_and_child(OtlpProtocol::HttpProtobuf).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn grpc_export_keeps_parent_links_and_service_name() {
    parent_and_child(OtlpProtocol::Grpc).await;
}

/// The coordinator's span context travels in NATS headers to a worker, whose task span
/// becomes its child in the same trace; the worker's log-free trace reaches the collector
/// under the worker's own service name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_crosses_services_through_nats_headers() {
    let receiver = OtlpReceiver::start().await.unwrap();
    let (coordinator, coordinator_guard) =
        telemetry("parley-coordinator", &receiver, OtlpProtocol::Grpc);
    let (worker, worker_guard) =
        telemetry("parley-agent-worker", &receiver, OtlpProtocol::HttpProtobuf);

    let mut headers = async_nats::HeaderMap::new();
    tracing::dispatcher::with_default(&coordinator, || {
        tracing::info_span!("dispatch", node = "n1").in_scope(|| inject_current(&mut headers));
    });
    assert!(headers.get("traceparent").is_some());

    tracing::dispatcher::with_default(&worker, || {
        let task = tracing::info_span!("run_task");
        assert!(set_parent(&task, extract_headers(Some(&headers))));
        task.in_scope(|| tracing::info_span!("llm_call").in_scope(|| {}));
    });
    coordinator_guard.shutdown().unwrap();
    worker_guard.shutdown().unwrap();

    let spans = receiver
        .wait_for_spans(Duration::from_secs(5), |s| s.len() >= 3)
        .await
        .unwrap();
    let dispatch = one(&spans, "dispatch");
    let run_task = one(&spans, "run_task");
    let llm_call = one(&spans, "llm_call");
    assert_eq!(dispatch.service_name, "parley-coordinator");
    assert_eq!(run_task.service_name, "parley-agent-worker");
    assert!(
        run_task.is_child_of(&dispatch),
        "{run_task:#?} / {dispatch:#?}"
    );
    assert!(llm_call.is_child_of(&run_task));
    assert_eq!(receiver.trace(&dispatch.trace_id).len(), 3);
}

#[tokio::test]
async fn http_json_is_accepted_and_bad_requests_are_refused_but_kept() {
    let receiver = OtlpReceiver::start().await.unwrap();
    let http = reqwest::Client::new();
    let body = serde_json::json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "json-svc"}}
            ]},
            "scopeSpans": [{
                "scope": {"name": "manual"},
                "spans": [{
                    "traceId": "5b8efff798038103d269b633813fc60c",
                    "spanId": "eee19b7ec3c1b174",
                    "parentSpanId": "eee19b7ec3c1b173",
                    "name": "json-span",
                    "kind": 3,
                    "startTimeUnixNano": "1000",
                    "endTimeUnixNano": "2000",
                    "attributes": [
                        {"key": "ok", "value": {"boolValue": true}},
                        {"key": "n", "value": {"intValue": "7"}}
                    ],
                    "status": {"code": 2, "message": "boom"}
                }]
            }]
        }]
    });
    let r = http
        .post(receiver.traces_url())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let spans = receiver.spans();
    assert_eq!(spans.len(), 1);
    let s = &spans[0];
    assert_eq!(s.trace_id, "5b8efff798038103d269b633813fc60c");
    assert_eq!(s.span_id, "eee19b7ec3c1b174");
    assert_eq!(s.parent_span_id, "eee19b7ec3c1b173");
    assert_eq!(s.service_name, "json-svc");
    assert_eq!(s.scope_name, "manual");
    assert_eq!(s.kind, "SPAN_KIND_CLIENT");
    assert_eq!(s.attr("ok"), Some("true"));
    assert_eq!(s.attr("n"), Some("7"));
    assert_eq!(
        (s.status, s.status_message.as_str()),
        (SpanStatus::Error, "boom")
    );
    assert_eq!((s.start_unix_nanos, s.end_unix_nanos), (1000, 2000));

    let post = |content_type: &'static str, body: &'static [u8]| {
        http.post(receiver.traces_url())
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    assert_eq!(
        post("text/plain", b"secret-in-text")
            .await
            .unwrap()
            .status(),
        415
    );
    assert_eq!(
        post("application/x-protobuf", b"\xff\xff\xff")
            .await
            .unwrap()
            .status(),
        400
    );
    let r = http
        .post(format!("{}/v1/logs", receiver.endpoint()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(receiver.spans().len(), 1);
    assert_eq!(receiver.export_requests(), 3, "refused bodies are kept too");
    assert!(receiver.raw_bodies_contain(b"secret-in-text"));

    receiver.clear();
    assert!(receiver.spans().is_empty());
    assert!(!receiver.raw_bodies_contain(b"secret-in-text"));
    let err = receiver
        .wait_for_spans(Duration::from_millis(50), |s| !s.is_empty())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("0 spans"), "{err}");
}
