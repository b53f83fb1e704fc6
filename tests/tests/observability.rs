//! Observability through the real cluster: one trace per debate across the coordinator and
//! both workers (exported over OTLP/HTTP to a real receiver), Prometheus metrics during a
//! debate, and `/readyz` following NATS.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use parley_testkit::{free_port, OtlpReceiver, ReceivedSpan};
use parley_tests::*;

const KEY: &str = "sk-parley-otel-secret-42424242";

fn otel_env(receiver: &OtlpReceiver) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "200".into()),
        ("OPENAI_COMPATIBLE_API_KEY", KEY.into()),
    ]
}

/// The spans of one trace, by name.
fn by_name<'a>(spans: &'a [ReceivedSpan], trace: &str) -> BTreeMap<&'a str, Vec<&'a ReceivedSpan>> {
    let mut m: BTreeMap<&str, Vec<&ReceivedSpan>> = BTreeMap::new();
    for s in spans.iter().filter(|s| s.trace_id == trace) {
        m.entry(s.name.as_str()).or_default().push(s);
    }
    m
}

fn ids(spans: &[&ReceivedSpan]) -> BTreeSet<String> {
    spans.iter().map(|s| s.span_id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_holds_the_debate_across_all_services() {
    let receiver = OtlpReceiver::start().await.unwrap();
    let c = Cluster::start().await;
    let env = otel_env(&receiver);
    let mut coord = c.coordinator_with(&env);
    let mut agent = c.worker_with("agent", &[], &env);
    let mut judge = c.worker_with("judge", &[], &env);

    let problem = "Design a telemetry pipeline for 4711 edge devices";
    let id = c.submit(&spec(problem)).await;
    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_complete(&state);

    // SIGTERM flushes every service's exporter on the way out.
    for p in [&mut coord, &mut agent, &mut judge] {
        p.terminate();
        assert!(p.wait_exit(Duration::from_secs(30)).is_some());
    }
    let spans = receiver
        .wait_for_spans(Duration::from_secs(10), |s| {
            s.iter().any(|s| s.name == "debate")
                && s.iter().filter(|s| s.name == "llm.call").count() >= 22
        })
        .await
        .unwrap();

    let debate: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.name == "debate" && s.attr("debate.id") == Some(id.as_str()))
        .collect();
    assert_eq!(debate.len(), 1, "{debate:#?}");
    let root = debate[0];
    assert!(root.is_root());
    assert_eq!(root.service_name, "parley-coordinator");
    assert_eq!(root.attr("debate.rounds"), Some("2"));
    assert_eq!(
        root.attr("debate.agents"),
        Some("agent-architect,agent-security,agent-kiss")
    );
    assert_eq!(root.attr("debate.status"), Some("completed"));

    let trace = by_name(&spans, &root.trace_id);
    // Nodes: round 1 proposal, critique, refinement; round 2 critique, refinement
    // (proposals are carried over); synthesis.
    let nodes = &trace["node"];
    assert_eq!(nodes.len(), 6, "{nodes:#?}");
    assert!(nodes.iter().all(|n| n.is_child_of(root)));
    let phases: BTreeSet<String> = nodes
        .iter()
        .map(|n| {
            format!(
                "{}/{}",
                n.attr("node.round").unwrap(),
                n.attr("node.phase").unwrap()
            )
        })
        .collect();
    assert!(
        phases.contains("1/proposal") && phases.contains("2/refinement"),
        "{phases:?}"
    );

    // 22 tasks, each on a worker, each under its node.
    let tasks = &trace["task"];
    assert_eq!(tasks.len(), 22, "{tasks:#?}");
    let node_ids = ids(nodes);
    assert!(tasks.iter().all(|t| node_ids.contains(&t.parent_span_id)));
    let services: BTreeSet<&str> = tasks.iter().map(|t| t.service_name.as_str()).collect();
    assert_eq!(
        services,
        BTreeSet::from(["parley-agent-worker", "parley-judge-worker"])
    );
    for t in tasks {
        assert_eq!(t.attr("debate.id"), Some(id.as_str()));
        assert!(
            t.attr("task.id").is_some() && t.attr("agent.role").is_some(),
            "{t:#?}"
        );
        assert_eq!(t.attr("task.attempt"), Some("1"));
    }

    // One llm.call per task, with the GenAI attributes.
    let calls = &trace["llm.call"];
    assert_eq!(calls.len(), 22);
    let task_ids = ids(tasks);
    for call in calls {
        assert!(task_ids.contains(&call.parent_span_id), "{call:#?}");
        assert_eq!(call.attr("gen_ai.system"), Some("openai-compatible"));
        assert!(call
            .attr("gen_ai.request.model")
            .unwrap()
            .starts_with("model-"));
        let input: u64 = call
            .attr("gen_ai.usage.input_tokens")
            .unwrap()
            .parse()
            .unwrap();
        assert!(input > 0);
        assert!(call.attr("gen_ai.usage.output_tokens").is_some());
    }

    // No secret and no prompt text left the services in any span.
    assert!(!receiver.raw_bodies_contain(KEY.as_bytes()));
    assert!(!receiver.raw_bodies_contain(problem.as_bytes()));
    assert!(!receiver.raw_bodies_contain(b"4711 edge devices"));

    // Every log line of a service inside a span carries that span's trace id.
    let log = agent.log();
    assert!(
        log.lines()
            .filter(|l| l.contains("\"task done\""))
            .all(|l| l.contains(&format!("\"trace_id\":\"{}\"", root.trace_id))),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debate_taken_over_by_another_coordinator_stays_one_trace() {
    let receiver = OtlpReceiver::start().await.unwrap();
    let c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(300)));
    let env = otel_env(&receiver);
    let mut coord = c.coordinator_with(&env);
    let mut agent = c.worker_with("agent", &[], &env);
    let mut judge = c.worker_with("judge", &[], &env);

    let id = c.submit(&spec("Design a search index")).await;
    c.wait_status(&id, Duration::from_secs(30), |s| contributions(s) >= 3)
        .await;
    coord.kill9();
    let mut coord2 = c.coordinator_with(&env);
    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_complete(&state);
    for p in [&mut coord2, &mut agent, &mut judge] {
        p.terminate();
        assert!(p.wait_exit(Duration::from_secs(30)).is_some());
    }
    let spans = receiver
        .wait_for_spans(Duration::from_secs(10), |s| {
            s.iter()
                .any(|s| s.name == "debate" && s.attr("debate.status") == Some("completed"))
        })
        .await
        .unwrap();
    // The killed coordinator never ended its root span; the new one continued under it.
    let resumed: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.name == "debate" && s.attr("debate.id") == Some(id.as_str()))
        .collect();
    assert_eq!(resumed.len(), 1, "{resumed:#?}");
    assert_eq!(resumed[0].attr("debate.resumed"), Some("true"));
    assert!(
        !resumed[0].is_root(),
        "the resumed debate span has the original as parent"
    );
    // Every task and LLM call of the debate, before and after the takeover, is in that trace.
    let traces: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.name == "task" && s.attr("debate.id") == Some(id.as_str()))
        .map(|s| s.trace_id.as_str())
        .collect();
    assert_eq!(traces, BTreeSet::from([resumed[0].trace_id.as_str()]));
}

async fn get(url: &str) -> (u16, String) {
    match reqwest::get(url).await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.text().await.unwrap_or_default())
        }
        Err(e) => (0, e.to_string()),
    }
}

/// The value of the first sample line starting with `series` (name and labels).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_during_a_debate_and_readiness_follows_nats() {
    let mut c = Cluster::start().await;
    c.fake
        .set_latency(Latency::Fixed(Duration::from_millis(200)));
    let (coord_port, agent_port) = (free_port(), free_port());
    let _coord = c.coordinator_with(&[("PARLEY_METRICS_ADDR", format!("127.0.0.1:{coord_port}"))]);
    let _agent = c.worker_with(
        "agent",
        &[],
        &[("PARLEY_METRICS_ADDR", format!("127.0.0.1:{agent_port}"))],
    );
    let _judge = c.worker("judge");
    let agent_url = format!("http://127.0.0.1:{agent_port}");
    let coord_url = format!("http://127.0.0.1:{coord_port}");
    assert_eq!(get(&format!("{agent_url}/healthz")).await.0, 200);
    assert_eq!(get(&format!("{agent_url}/readyz")).await.0, 200);

    let id = c.submit(&spec("Design a log shipper")).await;
    // While the debate runs, the agent worker reports tasks in flight.
    let mut max_in_flight = 0.0f64;
    loop {
        let (_, m) = get(&format!("{agent_url}/metrics")).await;
        if let Some(v) = sample(&m, "parley_tasks_in_flight{kind=\"agent\"}") {
            max_in_flight = max_in_flight.max(v);
        }
        if is_done(&c.status(&id).await) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(max_in_flight >= 1.0, "no task seen in flight");
    assert_complete(&c.status(&id).await);

    let (status, m) = get(&format!("{agent_url}/metrics")).await;
    assert_eq!(status, 200);
    assert_eq!(
        sample(&m, "parley_tasks_total{kind=\"agent\",outcome=\"ok\"}"),
        Some(21.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "parley_tasks_in_flight{kind=\"agent\"}"),
        Some(0.0)
    );
    let durations = m
        .lines()
        .find(|l| {
            l.starts_with("parley_task_duration_seconds_count")
                && l.contains("kind=\"agent\"")
                && l.contains("outcome=\"ok\"")
        })
        .unwrap_or_else(|| panic!("no task duration histogram:\n{m}"));
    assert!(durations.ends_with(" 21"), "{durations}");
    let input_tokens = m
        .lines()
        .filter(|l| {
            l.starts_with("parley_llm_tokens_total")
                && l.contains("provider=\"openai-compatible\"")
                && l.contains("direction=\"input\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    assert!(input_tokens > 0.0, "{m}");
    assert!(
        m.contains("parley_jetstream_consumer_pending{consumer=\"agent-workers\"}"),
        "{m}"
    );

    let (_, cm) = get(&format!("{coord_url}/metrics")).await;
    assert_eq!(
        sample(&cm, "parley_debates_total{status=\"completed\"}"),
        Some(1.0),
        "{cm}"
    );

    // NATS down: not ready (but alive); NATS back: ready again.
    c.nats.kill();
    let down = wait_for(Duration::from_secs(20), || async {
        get(&format!("{agent_url}/readyz")).await.0 == 503
    })
    .await;
    assert!(down, "/readyz stayed ready with NATS down");
    let (_, body) = get(&format!("{agent_url}/readyz")).await;
    assert!(body.to_lowercase().contains("nats"), "{body}");
    assert_eq!(get(&format!("{agent_url}/healthz")).await.0, 200);
    c.nats.restart().unwrap();
    let up = wait_for(Duration::from_secs(30), || async {
        get(&format!("{agent_url}/readyz")).await.0 == 200
    })
    .await;
    assert!(up, "/readyz did not recover after NATS came back");
}

async fn wait_for<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
