//! What `parley compare` writes: `report.md`, `runs.csv` and `chart.svg` (quality against
//! cost, the Pareto frontier marked; plain SVG written by hand).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::stats::{self, Estimate, PairTable};
use super::{Results, RunRecord};
use crate::CliError;

/// One strategy's figures, averaged over the problems it finished.
#[derive(Debug, Clone)]
pub struct Summary {
    pub name: String,
    pub kind: String,
    pub runs: usize,
    pub failed: usize,
    pub calls: f64,
    pub prompt_tokens: f64,
    pub completion_tokens: f64,
    /// Mean dollars per problem; `None` when some run's cost is unknown.
    pub cost: Option<f64>,
    pub wall_s: f64,
    /// Mean rubric overall score over the runs that got one.
    pub rubric: Option<f64>,
    pub rubric_ci: Option<Estimate>,
    pub win_rate: Option<Estimate>,
    pub recused: Vec<String>,
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

pub fn pair_table(results: &Results) -> PairTable {
    let index: BTreeMap<&str, usize> = results
        .file
        .strategies
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name(), i))
        .collect();
    let mut table = PairTable::new();
    for p in &results.pairs {
        let (Some(&a), Some(&b), Some(outcome)) = (
            index.get(p.a.as_str()),
            index.get(p.b.as_str()),
            p.outcome(),
        ) else {
            continue;
        };
        let (key, outcome) = if a < b {
            ((a, b), outcome)
        } else {
            ((b, a), flip(outcome))
        };
        table
            .entry(p.problem.clone())
            .or_default()
            .entry(key)
            .or_default()
            .push(outcome);
    }
    table
}

fn flip(o: stats::Outcome) -> stats::Outcome {
    match o {
        stats::Outcome::AWins => stats::Outcome::BWins,
        stats::Outcome::BWins => stats::Outcome::AWins,
        other => other,
    }
}

pub fn summaries(results: &Results, table: &PairTable) -> Vec<Summary> {
    let boot = &results.file.bootstrap;
    let n = results.file.strategies.len();
    results
        .file
        .strategies
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let runs: Vec<&RunRecord> = results
                .runs
                .iter()
                .filter(|r| r.strategy == s.name())
                .collect();
            let scores: Vec<f64> = runs
                .iter()
                .filter_map(|r| {
                    results
                        .rubric
                        .get(&(r.problem.clone(), r.strategy.clone()))
                        .and_then(|x| x.overall())
                })
                .collect();
            let mut recused: Vec<String> = results
                .rubric
                .iter()
                .filter(|((_, strategy), _)| strategy == s.name())
                .flat_map(|(_, r)| r.recused.iter().cloned())
                .collect();
            recused.sort();
            recused.dedup();
            let cost = runs
                .iter()
                .map(|r| r.cost_usd)
                .collect::<Option<Vec<f64>>>()
                .filter(|c| !c.is_empty())
                .map(|c| mean(c.into_iter()));
            Summary {
                name: s.name().to_string(),
                kind: s.kind().to_string(),
                runs: runs.len(),
                failed: results
                    .failed
                    .iter()
                    .filter(|f| f.strategy == s.name())
                    .count(),
                calls: mean(runs.iter().map(|r| r.calls as f64)),
                prompt_tokens: mean(runs.iter().map(|r| r.prompt_tokens as f64)),
                completion_tokens: mean(runs.iter().map(|r| r.completion_tokens as f64)),
                cost,
                wall_s: mean(runs.iter().map(|r| r.wall_ms as f64 / 1000.0)),
                rubric: (!scores.is_empty()).then(|| mean(scores.iter().copied())),
                rubric_ci: stats::bootstrap_mean(&scores, boot.resamples, boot.seed),
                win_rate: stats::win_rate(table, i, n, boot.resamples, boot.seed),
                recused,
            }
        })
        .collect()
}

/// The x axis of the chart: dollars when every run has a price, else tokens.
fn cost_axis(s: &Summary, dollars: bool) -> f64 {
    if dollars {
        s.cost.unwrap_or(0.0)
    } else {
        s.prompt_tokens + s.completion_tokens
    }
}

fn ci(e: Option<Estimate>, percent: bool) -> String {
    match e {
        None => "n/a".into(),
        Some(e) if percent => format!(
            "{:.0} % [{:.0}, {:.0}]",
            e.value * 100.0,
            e.low * 100.0,
            e.high * 100.0
        ),
        Some(e) => format!("{:.2} [{:.2}, {:.2}]", e.value, e.low, e.high),
    }
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

pub fn markdown(results: &Results) -> String {
    let table = pair_table(results);
    let sums = summaries(results, &table);
    let file = results.file;
    let mut md = String::from("# Strategy comparison\n\n");
    let _ = writeln!(
        md,
        "{} problem(s) × {} strategy(ies); {} run(s) finished, {} failed. Evaluators: \
         rubric of `parley eval`{}{}.\n",
        results.problems.len(),
        file.strategies.len(),
        results.runs.len(),
        results.failed.len(),
        if file.pairwise {
            ", pairwise comparisons in both orders"
        } else {
            ""
        },
        if file.recuse {
            "; evaluators recused from strategies of their model family"
        } else {
            ""
        },
    );
    md.push_str("## Strategies\n\n");
    md.push_str(
        "| Strategy | Type | Runs | Calls | Prompt tokens | Completion tokens | Cost / problem | Wall time / problem | Rubric overall (1-10) | Win rate |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in &sums {
        let runs = if s.failed > 0 {
            format!("{} ({} failed)", s.runs, s.failed)
        } else {
            s.runs.to_string()
        };
        let _ = writeln!(
            md,
            "| {} | {} | {runs} | {:.1} | {:.0} | {:.0} | {} | {:.1} s | {} | {} |",
            md_cell(&s.name),
            s.kind,
            s.calls,
            s.prompt_tokens,
            s.completion_tokens,
            parley_protocol::format_cost(s.cost),
            s.wall_s,
            ci(s.rubric_ci, false),
            ci(s.win_rate, true),
        );
    }
    let _ = writeln!(
        md,
        "\nFigures are means per problem. Intervals are 95 % percentile bootstrap intervals \
         over problems ({} resamples, seed {}). The win rate is the mean, over problems, of \
         a strategy's score against the others (win 1, tie ½, loss 0, averaged over \
         evaluators).\n",
        file.bootstrap.resamples, file.bootstrap.seed
    );
    if file.pairwise {
        let (agree, n) = stats::order_agreement(&table);
        let invalid = results
            .pairs
            .iter()
            .filter(|p| p.outcome().is_none())
            .count();
        md.push_str("## Pairwise comparisons\n\n");
        if n > 0 {
            let _ = writeln!(
                md,
                "Each pair was judged in both orders: the two orders agreed on {agree} of {n} \
                 judgements ({:.0} %); the {} others count as ties.{}\n",
                agree as f64 * 100.0 / n as f64,
                n - agree,
                if invalid > 0 {
                    format!(" {invalid} judgement(s) without a usable verdict in one order are left out.")
                } else {
                    String::new()
                }
            );
        } else {
            md.push_str("No pair was judged in both orders.\n\n");
        }
        md.push_str("Row strategy's win rate against the column strategy:\n\n| |");
        for s in &sums {
            let _ = write!(md, " {} |", md_cell(&s.name));
        }
        md.push_str("\n|---|");
        md.push_str(&"---|".repeat(sums.len()));
        md.push('\n');
        for (i, s) in sums.iter().enumerate() {
            let _ = write!(md, "| {} |", md_cell(&s.name));
            for j in 0..sums.len() {
                let cell = if i == j {
                    "—".to_string()
                } else {
                    ci(
                        stats::head_to_head(
                            &table,
                            i,
                            j,
                            file.bootstrap.resamples,
                            file.bootstrap.seed,
                        ),
                        true,
                    )
                };
                let _ = write!(md, " {cell} |");
            }
            md.push('\n');
        }
        md.push('\n');
    }
    let recusals: Vec<String> = sums
        .iter()
        .filter(|s| !s.recused.is_empty())
        .map(|s| format!("- {}: {}", s.name, s.recused.join(", ")))
        .collect();
    if !recusals.is_empty() {
        md.push_str("## Recused evaluators\n\n");
        md.push_str(&recusals.join("\n"));
        md.push_str("\n\n");
    }
    md.push_str("## Quality against cost\n\n![quality against cost](chart.svg)\n\n");
    let dollars = results.dollars;
    let points: Vec<(f64, f64)> = sums
        .iter()
        .filter_map(|s| Some((cost_axis(s, dollars), s.rubric?)))
        .collect();
    let named: Vec<&Summary> = sums.iter().filter(|s| s.rubric.is_some()).collect();
    let frontier = stats::pareto_frontier(&points);
    if !frontier.is_empty() {
        let names: Vec<&str> = frontier.iter().map(|&i| named[i].name.as_str()).collect();
        let _ = writeln!(
            md,
            "On the Pareto frontier (no other strategy both costs less and scores higher, by {}): {}.\n",
            if dollars { "dollars" } else { "tokens" },
            names.join(", ")
        );
    }
    md.push_str("## Runs\n\n| Problem | Strategy | Calls | Tokens (prompt + completion) | Cost | Wall time | Rubric overall |\n|---|---|---|---|---|---|---|\n");
    for r in &results.runs {
        let score = results
            .rubric
            .get(&(r.problem.clone(), r.strategy.clone()))
            .and_then(|x| x.overall())
            .map(|v| format!("{v:.2}"))
            .unwrap_or_else(|| "n/a".into());
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} + {} | {} | {:.1} s | {score} |",
            r.problem,
            r.strategy,
            r.calls,
            r.prompt_tokens,
            r.completion_tokens,
            parley_protocol::format_cost(r.cost_usd),
            r.wall_ms as f64 / 1000.0,
        );
    }
    if !results.failed.is_empty() {
        md.push_str("\n## Failed runs\n\n");
        for f in &results.failed {
            let _ = writeln!(
                md,
                "- {} · {}: {}",
                f.problem,
                f.strategy,
                md_cell(&f.error)
            );
        }
    }
    let e = results.eval_spend;
    let _ = writeln!(
        md,
        "\nEvaluator calls made by this invocation (not counted in any strategy's cost): {} \
         ({} prompt + {} completion tokens). Records reused from an earlier invocation: {}.",
        e.calls, e.prompt_tokens, e.completion_tokens, results.reused
    );
    md
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub const CSV_HEADER: &str = "problem,strategy,type,calls,prompt_tokens,completion_tokens,cost_usd,wall_ms,rubric_overall,error";

pub fn csv(results: &Results) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for r in &results.runs {
        let score = results
            .rubric
            .get(&(r.problem.clone(), r.strategy.clone()))
            .and_then(|x| x.overall())
            .map(|v| format!("{v:.2}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{score},",
            csv_field(&r.problem),
            csv_field(&r.strategy),
            r.kind,
            r.calls,
            r.prompt_tokens,
            r.completion_tokens,
            r.cost_usd.map(|c| format!("{c:.6}")).unwrap_or_default(),
            r.wall_ms,
        );
    }
    for f in &results.failed {
        let kind = results
            .file
            .strategies
            .iter()
            .find(|s| s.name() == f.strategy)
            .map(|s| s.kind())
            .unwrap_or("");
        let _ = writeln!(
            out,
            "{},{},{kind},,,,,,,{}",
            csv_field(&f.problem),
            csv_field(&f.strategy),
            csv_field(&f.error)
        );
    }
    out
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The chart: one point per strategy with a rubric score (x = mean cost per problem,
/// y = mean rubric overall score), frontier points filled and joined by a line.
pub fn svg(results: &Results) -> String {
    let table = pair_table(results);
    let sums: Vec<Summary> = summaries(results, &table)
        .into_iter()
        .filter(|s| s.rubric.is_some())
        .collect();
    let dollars = results.dollars;
    let points: Vec<(f64, f64)> = sums
        .iter()
        .map(|s| (cost_axis(s, dollars), s.rubric.unwrap_or(0.0)))
        .collect();
    let frontier = stats::pareto_frontier(&points);
    let (w, h) = (640.0, 420.0);
    let (left, right, top, bottom) = (70.0, 30.0, 40.0, 60.0);
    let max_x = points.iter().map(|p| p.0).fold(0.0, f64::max);
    let max_x = if max_x > 0.0 { max_x * 1.1 } else { 1.0 };
    let x = |v: f64| left + v / max_x * (w - left - right);
    let y = |v: f64| top + (10.0 - v.clamp(0.0, 10.0)) / 10.0 * (h - top - bottom);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">Quality against cost (Pareto frontier filled)</text>\n",
        w / 2.0
    );
    // Axes and grid.
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>",
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for q in (0..=10).step_by(2) {
        let yy = y(q as f64);
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{yy:.1}\" x2=\"{}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{q}</text>",
            w - right,
            left - 6.0,
            yy + 4.0
        );
    }
    for k in 0..=4 {
        let v = max_x * k as f64 / 4.0;
        let label = if dollars {
            format!("${v:.4}")
        } else {
            format!("{v:.0}")
        };
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            x(v),
            h - bottom + 18.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n<text x=\"18\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {})\">rubric overall score (1-10)</text>",
        (left + w - right) / 2.0,
        h - 16.0,
        if dollars {
            "cost per problem (USD)"
        } else {
            "tokens per problem (prompt + completion)"
        },
        (top + h - bottom) / 2.0,
        (top + h - bottom) / 2.0
    );
    // The frontier line, cheapest first.
    let mut line: Vec<(f64, f64)> = frontier.iter().map(|&i| points[i]).collect();
    line.sort_by(|a, b| a.0.total_cmp(&b.0));
    if line.len() > 1 {
        let pts: Vec<String> = line
            .iter()
            .map(|&(cx, cy)| format!("{:.1},{:.1}", x(cx), y(cy)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline class=\"frontier\" points=\"{}\" fill=\"none\" stroke=\"#1f77b4\" stroke-dasharray=\"4 3\"/>",
            pts.join(" ")
        );
    }
    for (i, (sum, &(cx, cy))) in sums.iter().zip(&points).enumerate() {
        let on = frontier.contains(&i);
        let _ = writeln!(
            s,
            "<circle class=\"{}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"6\" fill=\"{}\" stroke=\"#1f77b4\" stroke-width=\"2\"><title>{}: {:.2} at {}</title></circle>\n<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            if on { "point frontier" } else { "point" },
            x(cx),
            y(cy),
            if on { "#1f77b4" } else { "white" },
            xml_escape(&sum.name),
            cy,
            if dollars { format!("${cx:.6}") } else { format!("{cx:.0} tokens") },
            x(cx) + 9.0,
            y(cy) - 8.0,
            xml_escape(&sum.name)
        );
    }
    if points.is_empty() {
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no strategy has a rubric score</text>",
            w / 2.0,
            h / 2.0
        );
    }
    s.push_str("</svg>\n");
    s
}

pub fn write_all(dir: &Path, results: &Results) -> Result<(), CliError> {
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| CliError::general(format!("cannot write {}: {e}", path.display())))
    };
    write("report.md", markdown(results))?;
    write("runs.csv", csv(results))?;
    write("chart.svg", svg(results))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{load_compare_file, FailedRun, RubricRecord};

    fn run(problem: &str, strategy: &str, cost: Option<f64>, tokens: u64) -> RunRecord {
        RunRecord {
            problem: problem.into(),
            strategy: strategy.into(),
            kind: "single".into(),
            answer: format!("{strategy} on {problem}"),
            calls: 1,
            prompt_tokens: tokens,
            completion_tokens: tokens,
            cost_usd: cost,
            wall_ms: 1500,
            models: vec!["m".into()],
            debate_id: None,
            selection: None,
            input_digest: String::new(),
        }
    }

    fn rubric(overall: f64) -> RubricRecord {
        RubricRecord {
            answer_digest: String::new(),
            averages: vec![None; 7].into_iter().chain([Some(overall)]).collect(),
            recused: Vec::new(),
            skipped: Default::default(),
        }
    }

    #[test]
    fn unknown_costs_plot_tokens_and_failures_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(
            &path,
            r#"{"evaluators": "e.json", "pairwise": false, "strategies": [
                {"type": "single", "name": "cheap", "model": "m"},
                {"type": "single", "name": "dear", "model": "m"},
                {"type": "single", "name": "a<b", "model": "m"}
            ]}"#,
        )
        .unwrap();
        let file = load_compare_file(&path);
        // `a<b` is not a usable name: the file is refused before anything is written.
        assert!(file.is_err());
        std::fs::write(
            &path,
            r#"{"evaluators": "e.json", "pairwise": false, "strategies": [
                {"type": "single", "name": "cheap", "model": "m"},
                {"type": "single", "name": "dear", "model": "m"}
            ]}"#,
        )
        .unwrap();
        let file = load_compare_file(&path).unwrap();
        let results = Results {
            file: &file,
            problems: &[],
            runs: vec![
                run("p", "cheap", Some(0.01), 100),
                run("p", "dear", None, 900),
            ],
            failed: vec![FailedRun {
                problem: "q".into(),
                strategy: "dear".into(),
                error: "timeout, after 3 tries".into(),
            }],
            rubric: [
                (("p".to_string(), "cheap".to_string()), rubric(4.0)),
                (("p".to_string(), "dear".to_string()), rubric(8.0)),
            ]
            .into(),
            pairs: Vec::new(),
            dollars: false,
            eval_spend: Default::default(),
            reused: 0,
        };
        let md = markdown(&results);
        assert!(md.contains("| dear | single | 1 (1 failed) | 1.0 | 900 | 900 | unknown | 1.5 s | 8.00 [8.00, 8.00] | n/a |"), "{md}");
        assert!(md.contains("- q · dear: timeout, after 3 tries"), "{md}");
        assert!(md.contains("by tokens): cheap, dear."), "{md}");
        assert!(!md.contains("## Pairwise"), "{md}");
        let csv = csv(&results);
        assert!(
            csv.contains("\nq,dear,single,,,,,,,\"timeout, after 3 tries\"\n"),
            "{csv}"
        );
        assert!(
            csv.contains("\np,cheap,single,1,100,100,0.010000,1500,4.00,\n"),
            "{csv}"
        );
        let svg = svg(&results);
        assert!(svg.contains("tokens per problem"), "{svg}");
        // Both are on the frontier: one is cheaper, the other better.
        assert_eq!(svg.matches("class=\"point frontier\"").count(), 2, "{svg}");
        assert!(svg.contains("<polyline class=\"frontier\""), "{svg}");
    }
}
