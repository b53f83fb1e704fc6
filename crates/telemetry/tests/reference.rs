//! The metrics reference page, `docs/src/reference/metrics.md`, is generated from the
//! metrics a process registers ([`parley_telemetry::Metrics`]: each family's name, type,
//! help text and labels) and committed; this test fails when the committed page differs
//! from what the registry says now. Regenerate it with
//!
//! ```sh
//! PARLEY_BLESS=1 cargo test -p parley-telemetry --test reference
//! ```
//!
//! A family is encoded only once it has a series, so [`populated`] records one sample
//! through every typed method whose labels are free-form (provider, model, ...); the test
//! also checks that every `registry.register` of `src/metrics.rs` (and its modules) shows up, so a new metric
//! that nothing here records fails the test instead of missing from the page.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use parley_telemetry::{Metrics, Outcome, TaskKind};

const BLESS: &str = "PARLEY_BLESS";
const REGENERATE: &str = "PARLEY_BLESS=1 cargo test -p parley-telemetry --test reference";

fn page_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/reference/metrics.md")
}

/// Metrics with a series in every family (the values are irrelevant: only names, types,
/// help texts and label names reach the page).
fn populated() -> Metrics {
    let m = Metrics::new();
    m.record_task(
        TaskKind::Agent,
        "openai",
        Outcome::Ok,
        Duration::from_secs(1),
    );
    m.task_failed(TaskKind::Agent, "timeout");
    m.record_tokens("openai", "gpt-4o", 1, 1);
    m.record_cost("openai", "gpt-4o", 0.01);
    m.llm_retry("openai", "server");
    m.llm_rate_limited("openai");
    m.rate_limit_wait("openai", Duration::from_secs(1));
    m.rate_limit_handback("openai");
    m.set_consumer_pending("agent-workers", 1, 1);
    m.request_error("submit", "invalid_json");
    m.reply_refused("status");
    m.follower_refused("client");
    m.webhook_attempt(parley_telemetry::WebhookAttempt::Status);
    m.webhook_message(parley_telemetry::WebhookResult::Delivered);
    m
}

/// One metric family as the OpenMetrics text declares it.
#[derive(Debug, PartialEq)]
struct Family {
    name: String,
    kind: String,
    help: String,
    labels: BTreeSet<String>,
}

/// The families of an OpenMetrics text, in its order: `# TYPE` and `# HELP` lines, and the
/// label names of their samples (a histogram's `le` left out).
fn families(text: &str) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (Some(what), Some(name)) = (parts.next(), parts.next()) else {
                continue;
            };
            let rest = parts.next().unwrap_or("").to_string();
            let i = match out.iter().position(|f| f.name == name) {
                Some(i) => i,
                None => {
                    out.push(Family {
                        name: name.to_string(),
                        kind: String::new(),
                        help: String::new(),
                        labels: BTreeSet::new(),
                    });
                    out.len() - 1
                }
            };
            match what {
                "TYPE" => out[i].kind = rest,
                "HELP" => out[i].help = rest,
                _ => {}
            }
            continue;
        }
        let Some((sample, labels)) = line.split_once('{') else {
            continue;
        };
        let Some(family) = out
            .iter_mut()
            .filter(|f| sample.starts_with(f.name.as_str()))
            .max_by_key(|f| f.name.len())
        else {
            continue;
        };
        let labels = labels.split('}').next().unwrap_or("");
        for pair in labels.split(',') {
            if let Some((key, _)) = pair.split_once('=') {
                if key != "le" {
                    family.labels.insert(key.to_string());
                }
            }
        }
    }
    out
}

/// The name to query: a counter's samples end in `_total`.
fn series(f: &Family) -> String {
    match f.kind.as_str() {
        "counter" => format!("{}_total", f.name),
        _ => f.name.clone(),
    }
}

fn render(families: &[Family]) -> String {
    let mut page = String::from("# Metrics reference\n\n");
    page.push_str(&format!(
        "<!-- Generated from parley_telemetry::Metrics: do not edit. Regenerate with `{REGENERATE}`. -->\n\n"
    ));
    page.push_str(
        "Every service (`parley-coordinator`, `parley-agent-worker`, `parley-judge-worker`) \
         serves these on `/metrics` of its `--metrics-addr` (OpenMetrics text format). This \
         page is generated from the metrics registry itself. What the label values mean, and \
         the traces and logs next to these: [Observability](../operations/observability.md).\n\n",
    );
    page.push_str("| metric | type | labels | what it counts |\n| --- | --- | --- | --- |\n");
    for f in families {
        let labels: Vec<String> = f.labels.iter().map(|l| format!("`{l}`")).collect();
        page.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            series(f),
            f.kind,
            labels.join(", "),
            f.help.replace('|', "\\|")
        ));
    }
    page
}

#[test]
fn the_metrics_reference_page_is_current() {
    let text = populated().encode();
    let families = families(&text);
    let registered: usize = [
        include_str!("../src/metrics.rs"),
        include_str!("../src/metrics/webhooks.rs"),
    ]
    .iter()
    .map(|source| source.matches("registry.register(").count())
    .sum();
    assert_eq!(
        families.len(),
        registered,
        "src/metrics.rs registers {registered} metrics but the encoded text holds {} \
         families: record the new metric in `populated()` so it reaches the page:\n{text}",
        families.len()
    );
    let fresh = render(&families);
    let path = page_path();
    if std::env::var_os(BLESS).is_some() {
        std::fs::write(&path, &fresh).expect("write docs/src/reference/metrics.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "docs/src/reference/metrics.md is stale; regenerate it with `{REGENERATE}`\n\
         --- committed\n{committed}\n--- now\n{fresh}"
    );
}

#[test]
fn families_are_read_from_type_help_and_sample_lines() {
    let text = "# HELP parley_x Things.\n# TYPE parley_x counter\nparley_x_total{kind=\"a\",provider=\"p\"} 0\n\
                # HELP parley_x_seconds Time | spent.\n# TYPE parley_x_seconds histogram\n# UNIT parley_x_seconds seconds\n\
                parley_x_seconds_bucket{provider=\"p\",le=\"1.0\"} 0\n# EOF\n";
    let f = families(text);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(
        (f[0].name.as_str(), f[0].kind.as_str()),
        ("parley_x", "counter")
    );
    assert_eq!(
        f[0].labels,
        BTreeSet::from(["kind".into(), "provider".into()])
    );
    assert_eq!(f[1].labels, BTreeSet::from(["provider".into()]));
    assert_eq!(series(&f[0]), "parley_x_total");
    assert_eq!(series(&f[1]), "parley_x_seconds");
    assert!(
        render(&f).contains("| `parley_x_seconds` | histogram | `provider` | Time \\| spent. |")
    );
}
