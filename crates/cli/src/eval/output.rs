//! The results written: a Markdown table, dialectic's JSON, CSV rows.

use std::path::Path;

use serde_json::{json, Value};

use super::{DebateResult, CSV_HEADER, METRICS};
use crate::CliError;

/// dialectic's aggregate JSON for one debate, plus `debate` and `skipped_agents`.
pub(super) fn json_of(r: &DebateResult) -> Value {
    let a = |i: usize| json!(r.averages[i]);
    json!({
        "debate": r.name,
        "evaluation": {
            "functional_completeness": {"average_score": a(0)},
            "non_functional": {
                "performance_scalability": {"average_score": a(1)},
                "security": {"average_score": a(2)},
                "maintainability_evolvability": {"average_score": a(3)},
                "regulatory_compliance": {"average_score": a(4)},
                "testability": {"average_score": a(5)},
                "requirements_fulfillment": {"average_score": a(6)},
            }
        },
        "overall_score": a(7),
        "agents": r.agents,
        "skipped_agents": r.skipped,
    })
}

/// The Markdown table: dialectic's columns; a leading `Debate` column for several debates.
pub(super) fn markdown_table(results: &[DebateResult]) -> String {
    let several = results.len() > 1;
    let mut out = String::from("|");
    if several {
        out.push_str(" Debate |");
    }
    for (label, _) in METRICS {
        out.push_str(&format!(" {label} |"));
    }
    out.push_str("\n|");
    if several {
        out.push_str("--------|");
    }
    for (label, _) in METRICS {
        out.push_str(&format!("{}|", "-".repeat(label.len() + 2)));
    }
    out.push('\n');
    for r in results {
        out.push('|');
        if several {
            out.push_str(&format!(" {} |", r.name.replace('|', "\\|")));
        }
        for v in &r.averages {
            match v {
                Some(v) => out.push_str(&format!(" {v:.2} |")),
                None => out.push_str(" N/A |"),
            }
        }
        out.push('\n');
    }
    out
}

/// RFC 4180 quoting of one field.
pub(super) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub(super) fn csv_row(r: &DebateResult) -> String {
    let mut fields = vec![csv_field(&r.name)];
    fields.extend(
        r.averages
            .iter()
            .map(|v| v.map(|v| format!("{v:.2}")).unwrap_or_default()),
    );
    fields.join(",")
}

pub(super) fn write_results(
    results: &[DebateResult],
    output: Option<&Path>,
) -> Result<(), CliError> {
    let write_err = |p: &Path, e: std::io::Error| {
        CliError::general(format!("cannot write {}: {e}", p.display()))
    };
    let Some(path) = output else {
        println!("{}", markdown_table(results));
        return Ok(());
    };
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| write_err(parent, e))?;
    }
    match ext.as_str() {
        "json" => {
            let value = match results {
                [one] => json_of(one),
                many => json!({"debates": many.iter().map(json_of).collect::<Vec<_>>()}),
            };
            let text = serde_json::to_string_pretty(&value)
                .map_err(|e| CliError::general(format!("cannot encode the results: {e}")))?;
            std::fs::write(path, text + "\n").map_err(|e| write_err(path, e))
        }
        "csv" => {
            use std::io::Write as _;
            let fresh = std::fs::metadata(path)
                .map(|m| m.len() == 0)
                .unwrap_or(true);
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| write_err(path, e))?;
            let mut text = String::new();
            if fresh {
                text.push_str(CSV_HEADER);
                text.push('\n');
            }
            for r in results {
                text.push_str(&csv_row(r));
                text.push('\n');
            }
            f.write_all(text.as_bytes()).map_err(|e| write_err(path, e))
        }
        _ => std::fs::write(path, markdown_table(results)).map_err(|e| write_err(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;

    #[test]
    fn csv_quotes_and_blank_missing_scores() {
        let r = DebateResult {
            name: "a,b".into(),
            averages: vec![Some(7.0), None, None, None, None, None, None, Some(6.5)],
            agents: Map::new(),
            skipped: Map::new(),
        };
        assert_eq!(csv_row(&r), "\"a,b\",7.00,,,,,,,6.50");
    }
}
