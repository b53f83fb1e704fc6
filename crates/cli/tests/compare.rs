//! End-to-end tests of `parley compare` as a subprocess against the fake OpenAI-compatible
//! server with scripted answers: both orders asked for every pair, order disagreements
//! counted as ties, recusal, the win rates of the report, the three output files, resuming
//! (after an interrupt, and with finished runs in place) and a strategy file with errors.
//!
//! The script: strategy answers carry a quality marker (WEAK, MEDIUM, STRONG). The `fair`
//! evaluator (model `gpt-judge`) prefers the stronger answer whatever the order; the
//! `biased` one (`claude-judge`) always prefers the answer shown first, so its two orders
//! always disagree. Rubric scores follow the marker: WEAK 3, MEDIUM 6, STRONG 9.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use parley_testkit::{
    parley_command, run_parley, send_signal, wait_until_async, FakeLlm, Fault, Latency, Match,
    RecordedRequest,
};
use parley_tests::{rubric, write_json};
use serde_json::{json, Value};

const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn quality(text: &str) -> u32 {
    if text.contains("STRONG") {
        3
    } else if text.contains("MEDIUM") {
        2
    } else if text.contains("WEAK") {
        1
    } else {
        0
    }
}

/// The text between `start` and `end` (or the end) in `prompt`.
fn section<'a>(prompt: &'a str, start: &str, end: Option<&str>) -> &'a str {
    let Some(i) = prompt.find(start) else {
        return "";
    };
    let rest = &prompt[i + start.len()..];
    match end.and_then(|e| rest.find(e)) {
        Some(j) => &rest[..j],
        None => rest,
    }
}

fn is_pair(r: &RecordedRequest) -> bool {
    r.prompt_text().contains("# Answer A")
}

fn is_selection(r: &RecordedRequest) -> bool {
    r.prompt_text().contains("Which answer (1 to")
}

fn is_evaluator(r: &RecordedRequest) -> bool {
    r.model == "gpt-judge" || r.model == "claude-judge"
}

fn is_rubric(r: &RecordedRequest) -> bool {
    is_evaluator(r) && !is_pair(r)
}

/// (answer A, answer B) of a pairwise request.
fn pair_answers(r: &RecordedRequest) -> (String, String) {
    let p = r.prompt_text();
    (
        section(&p, "# Answer A", Some("# Answer B"))
            .trim()
            .to_string(),
        section(&p, "# Answer B", Some("Which answer is better?"))
            .trim()
            .to_string(),
    )
}

fn script(fake: &FakeLlm) {
    let samples = std::sync::Mutex::new(std::collections::HashMap::<&str, usize>::new());
    fake.set_responder(move |req| {
        let prompt = req.prompt_text();
        if is_pair(req) {
            let (a, b) = pair_answers(req);
            let winner = if req.model == "claude-judge" {
                "A"
            } else {
                match quality(&a).cmp(&quality(&b)) {
                    std::cmp::Ordering::Greater => "A",
                    std::cmp::Ordering::Less => "B",
                    std::cmp::Ordering::Equal => "tie",
                }
            };
            return json!({"winner": winner, "reason": "scripted"}).to_string();
        }
        if is_evaluator(req) {
            // The prompt holds one answer (the problem has no marker).
            let score = [1, 3, 6, 9][quality(&prompt) as usize];
            return rubric(score, score).to_string();
        }
        if is_selection(req) {
            // The scripted judge picks the strong sample, wherever it is.
            let best = (1..=3)
                .find(|k| {
                    section(&prompt, &format!("# Answer {k}"), Some("# Answer")).contains("STRONG")
                })
                .unwrap_or(1);
            return json!({"best": best, "reason": "the most complete"}).to_string();
        }
        match req.model.as_str() {
            "gpt-small" => "SINGLE answer: a WEAK design with one server.".to_string(),
            "llama-sc" => {
                // One sample in three (per problem) is strong.
                let topic = if prompt.contains("a cache") { "cache" } else { "queue" };
                let mut n = samples.lock().unwrap();
                let k = n.entry(topic).or_insert(0);
                *k += 1;
                let q = if *k % 3 == 2 { "STRONG" } else { "WEAK" };
                format!("SC sample {k} on {topic}: a {q} design.")
            }
            model if prompt.contains("JSON") => json!({
                "description": format!("DEBATE synthesis by {model}: a MEDIUM design with a queue."),
                "tradeoffs": ["one more component"],
                "recommendations": ["bound the queue"],
                "confidence": 80
            })
            .to_string(),
            model => format!("DEBATE proposal by {model}: a MEDIUM design with a queue."),
        }
    });
}

fn write_problem(dir: &Path, id: &str, title: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join(format!("{id}.md")),
        format!(
            "# {title}\n\nDesign {title} for a mid-sized company.\n\n## Requirements\n- It must stay up when one node fails\n- Answers within 100 ms\n- Audited changes\n"
        ),
    )
    .unwrap();
}

/// compare.json (single, self-consistency ×3, a one-round debate), the evaluator config
/// (fair + biased), a price file and two problems.
fn setup(dir: &Path, base_url: &str) {
    write_problem(&dir.join("problems"), "cache", "a cache");
    write_problem(&dir.join("problems"), "queue", "a queue");
    let mut debate = parley_tests::spec_config(Some(base_url));
    debate["debate"]["rounds"] = json!(1);
    write_json(dir.join("debate-config.json"), &debate);
    write_json(
        dir.join("eval-config.json"),
        &json!({"agents": [
            {"id": "fair", "name": "Fair", "model": "gpt-judge"},
            {"id": "biased", "name": "Biased", "model": "claude-judge"}
        ]}),
    );
    let price = |i: f64, o: f64| json!({"input_cost_per_token": i, "output_cost_per_token": o});
    write_json(
        dir.join("prices.json"),
        &json!({
            "gpt-small": price(1e-6, 2e-6),
            "llama-sc": price(1e-7, 1e-7),
            "model-arch": price(1e-6, 1e-6),
            "model-sec": price(1e-6, 1e-6),
            "model-kiss": price(1e-6, 1e-6),
            "model-judge": price(1e-6, 1e-6),
            "gpt-judge": price(0.0, 0.0),
            "claude-judge": price(0.0, 0.0)
        }),
    );
    write_json(
        dir.join("compare.json"),
        &json!({
            "baseUrl": base_url,
            "evaluators": "eval-config.json",
            "prices": "prices.json",
            "recuse": true,
            "bootstrap": {"resamples": 500, "seed": 7},
            "strategies": [
                {"type": "single", "name": "single", "model": "gpt-small"},
                {"type": "self-consistency", "name": "sc", "model": "llama-sc", "samples": 3},
                {"type": "debate", "name": "debate", "config": "debate-config.json", "rounds": 1}
            ]
        }),
    );
}

async fn compare(dir: &Path) -> Output {
    run_parley(
        PARLEY,
        dir,
        &["compare", "-c", "compare.json", "-o", "out"],
        &[],
    )
    .await
}

fn pair_requests(fake: &FakeLlm) -> Vec<RecordedRequest> {
    fake.requests().into_iter().filter(is_pair).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairs_in_both_orders_ties_on_disagreement_and_the_three_outputs() {
    let fake = FakeLlm::start().await.unwrap();
    script(&fake);
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d, &fake.base_url());

    let out = compare(d).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");

    // Every pair was asked in both orders, by every evaluator not recused: the fair one
    // (gpt family) never sees the single strategy's (gpt-small) answer.
    let pairs = pair_requests(&fake);
    let mut asked: Vec<(String, String, String)> = pairs
        .iter()
        .map(|r| {
            let (a, b) = pair_answers(r);
            (r.model.clone(), a, b)
        })
        .collect();
    for (model, a, b) in &asked {
        assert!(
            asked.contains(&(model.clone(), b.clone(), a.clone())),
            "{model} was asked {a:?} vs {b:?} but not the other way round"
        );
        assert!(
            !(model == "gpt-judge" && (a.contains("SINGLE") || b.contains("SINGLE"))),
            "the recused evaluator judged the single strategy"
        );
    }
    asked.sort();
    asked.dedup();
    // Per problem: the biased judge 3 pairs × 2 orders, the fair one 1 pair × 2.
    assert_eq!(pairs.len(), 2 * (3 * 2 + 2), "{asked:#?}");
    // Both orders of a pair carry the same problem.
    for r in &pairs {
        let p = r.prompt_text();
        assert!(p.contains("a cache") || p.contains("a queue"), "{p}");
    }
    // Self-consistency: 3 samples with distinct seeds, then one selection call per problem.
    let reqs = fake.requests();
    let sc: Vec<&RecordedRequest> = reqs.iter().filter(|r| r.model == "llama-sc").collect();
    assert_eq!(sc.len(), 2 * 4);
    assert_eq!(sc.iter().filter(|r| is_selection(r)).count(), 2);
    // The rubric: both evaluators on sc and debate, only the biased one on single.
    let rubric_calls: Vec<&RecordedRequest> = reqs.iter().filter(|r| is_rubric(r)).collect();
    assert_eq!(rubric_calls.len(), 2 * 5);
    assert!(!rubric_calls
        .iter()
        .any(|r| r.model == "gpt-judge" && r.prompt_text().contains("SINGLE")));

    // The saved runs.
    let run: Value = parley_tests::read_json(d.join("out/runs/cache__sc.json"));
    assert_eq!(run["calls"], 4);
    assert!(run["answer"].as_str().unwrap().contains("STRONG"), "{run}");
    assert!(
        run["selection"].as_str().unwrap().starts_with("sample "),
        "{run}"
    );
    assert!(
        !run["selection"].as_str().unwrap().contains("no valid"),
        "{run}"
    );
    let single: Value = parley_tests::read_json(d.join("out/runs/cache__single.json"));
    assert_eq!(single["calls"], 1);
    // Priced from the usage the fake reported.
    let (p, c) = (
        single["promptTokens"].as_f64().unwrap(),
        single["completionTokens"].as_f64().unwrap(),
    );
    assert!(p > 0.0 && c > 0.0);
    let cost = single["costUsd"].as_f64().unwrap();
    assert!((cost - (p * 1e-6 + c * 2e-6)).abs() < 1e-12, "{single}");
    let debate: Value = parley_tests::read_json(d.join("out/runs/queue__debate.json"));
    assert!(debate["calls"].as_u64().unwrap() >= 4, "{debate}");
    assert!(
        debate["answer"].as_str().unwrap().contains("MEDIUM"),
        "{debate}"
    );

    // The report: agreement 1 of 4 judgements per problem (only the fair judge's sc vs
    // debate), disagreements are ties; win rates: single ½, sc (½ + ¾)/2, debate
    // (½ + ¼)/2, the same on both problems, so the intervals are points.
    let report = std::fs::read_to_string(d.join("out/report.md")).unwrap();
    assert!(
        report.contains(
            "the two orders agreed on 2 of 8 judgements (25 %); the 6 others count as ties"
        ),
        "{report}"
    );
    let row = |name: &str| {
        report
            .lines()
            .find(|l| l.starts_with(&format!("| {name} | ")))
            .unwrap_or_else(|| panic!("no row {name} in\n{report}"))
            .to_string()
    };
    assert!(
        row("single").ends_with("| 3.00 [3.00, 3.00] | 50 % [50, 50] |"),
        "{}",
        row("single")
    );
    assert!(
        row("sc").ends_with("| 9.00 [9.00, 9.00] | 62 % [62, 62] |"),
        "{}",
        row("sc")
    );
    assert!(
        row("debate").ends_with("| 6.00 [6.00, 6.00] | 38 % [38, 38] |"),
        "{}",
        row("debate")
    );
    assert!(report.contains("- single: fair"), "{report}");
    // Head to head: sc beats the debate 75 % (fair: win, biased: tie).
    let sc_row = report
        .lines()
        .filter(|l| l.starts_with("| sc |"))
        .nth(1)
        .expect("the head-to-head table's sc row");
    assert!(
        sc_row.contains("| 50 % [50, 50] | — | 75 % [75, 75] |"),
        "{sc_row}"
    );

    // The CSV: one row per run.
    let csv = std::fs::read_to_string(d.join("out/runs.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "problem,strategy,type,calls,prompt_tokens,completion_tokens,cost_usd,wall_ms,rubric_overall,error"
    );
    assert_eq!(lines.len(), 1 + 6, "{csv}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("cache,sc,self-consistency,4,") && l.ends_with(",9.00,")),
        "{csv}"
    );

    // The chart: a point per strategy; sc (best score) is on the frontier, and so is the
    // cheapest one.
    let svg = std::fs::read_to_string(d.join("out/chart.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<circle").count(), 3, "{svg}");
    let frontier_names: Vec<&str> = svg
        .split("<circle class=\"point frontier\"")
        .skip(1)
        .filter_map(|s| s.split("<title>").nth(1)?.split(':').next())
        .collect();
    assert!(frontier_names.contains(&"sc"), "{frontier_names:?}");
    assert!(svg.contains("cost per problem (USD)"), "{svg}");

    // A second invocation makes no call at all: everything is in out/.
    let before = fake.request_count();
    let again = compare(d).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(
        fake.request_count(),
        before,
        "a finished comparison was repeated"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("out/report.md"))
            .unwrap()
            .lines()
            .find(|l| l.starts_with("| sc | ")),
        report.lines().find(|l| l.starts_with("| sc | "))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_removed_is_the_only_one_made_again() {
    let fake = FakeLlm::start().await.unwrap();
    script(&fake);
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d, &fake.base_url());
    let first = compare(d).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let first_calls = fake.request_count();

    // As if the comparison had stopped before this run finished.
    std::fs::remove_file(d.join("out/runs/queue__sc.json")).unwrap();
    let before = fake.request_count();
    let again = compare(d).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let new: Vec<RecordedRequest> = fake.requests().split_off(before);
    // The run itself: 3 samples + 1 selection, all on the sc model.
    let runs: Vec<&RecordedRequest> = new
        .iter()
        .filter(|r| !r.model.ends_with("-judge"))
        .collect();
    assert_eq!(
        runs.len(),
        4,
        "{:?}",
        runs.iter().map(|r| &r.model).collect::<Vec<_>>()
    );
    assert!(runs.iter().all(|r| r.model == "llama-sc"));
    // Its new answer (the script numbers samples) is evaluated again, and only it: the
    // rubric by both evaluators, the pairs it is in (vs single: the biased judge, the fair
    // one is recused; vs debate: both), each in both orders.
    let answer = parley_tests::read_json(d.join("out/runs/queue__sc.json"))["answer"]
        .as_str()
        .unwrap()
        .to_string();
    let evals: Vec<&RecordedRequest> = new.iter().filter(|r| is_evaluator(r)).collect();
    assert!(
        evals.iter().all(|r| r.prompt_text().contains(&answer)),
        "{answer}"
    );
    assert_eq!(evals.iter().filter(|r| is_rubric(r)).count(), 2);
    assert_eq!(evals.iter().filter(|r| is_pair(r)).count(), 2 + 4);
    assert_eq!(
        new.len(),
        4 + 2 + 6,
        "only the removed run and its evaluations were made"
    );
    assert!(fake.request_count() < 2 * first_calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_comparison_continues_without_repeating_finished_runs() {
    let fake = FakeLlm::start().await.unwrap();
    script(&fake);
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d, &fake.base_url());
    // Slow replies, so the interrupt lands mid-comparison.
    fake.set_latency(Latency::Fixed(Duration::from_millis(150)));
    let child = parley_command(PARLEY, d, &["compare", "-c", "compare.json", "-o", "out"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let runs_dir = d.join("out/runs");
    let count_runs = || std::fs::read_dir(&runs_dir).map(|r| r.count()).unwrap_or(0);
    assert!(
        wait_until_async(Duration::from_secs(60), || count_runs() >= 2).await,
        "no run finished"
    );
    send_signal(child.id().unwrap(), "INT");
    let out = child.wait_with_output().await.unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("run the same command again to continue"),
        "{err}"
    );
    let finished: Vec<PathBuf> = std::fs::read_dir(&runs_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert!(
        finished.len() < 6,
        "the interrupt came too late to test anything"
    );
    let saved: Vec<String> = finished
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();

    fake.set_latency(Latency::Zero);
    let before = fake.request_count();
    let again = compare(d).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    // The runs finished before the interrupt are untouched and were not made again.
    for (p, text) in finished.iter().zip(&saved) {
        assert_eq!(
            &std::fs::read_to_string(p).unwrap(),
            text,
            "{} rewritten",
            p.display()
        );
    }
    let new = fake.requests().split_off(before);
    for p in &finished {
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        let (problem, strategy) = name.split_once("__").unwrap();
        let model = match strategy {
            "single" => "gpt-small",
            "sc" => "llama-sc",
            _ => continue,
        };
        let topic = if problem == "cache" {
            "a cache"
        } else {
            "a queue"
        };
        let repeated = new
            .iter()
            .filter(|r| r.model == model && r.prompt_text().contains(topic))
            .count();
        assert_eq!(repeated, 0, "finished run {name} was made again");
    }
    assert_eq!(
        std::fs::read_dir(&runs_dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "json")
            })
            .count(),
        6
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_file_with_errors_is_refused_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d, "http://127.0.0.1:9");
    write_json(
        d.join("compare.json"),
        &json!({
            "evaluators": "eval-config.json",
            "strategies": [
                {"type": "single", "name": "single", "model": "gpt-small"},
                {"type": "self-consistency", "name": "sc", "model": "llama-sc", "samplez": 3}
            ]
        }),
    );
    let out = compare(d).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("compare.json"), "{err}");
    assert!(err.contains("strategies[1]"), "{err}");
    assert!(err.contains("samplez"), "{err}");
    // A debate config that does not exist is named too.
    write_json(
        d.join("compare.json"),
        &json!({
            "evaluators": "eval-config.json",
            "strategies": [{"type": "debate", "name": "d", "config": "missing.json"}]
        }),
    );
    let out = compare(d).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("missing.json"), "{err}");
    assert!(!d.join("out/report.md").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_is_reported_and_tried_again_next_time() {
    let fake = FakeLlm::start().await.unwrap();
    script(&fake);
    // The single strategy's model refuses every call.
    fake.add_fault(Fault::Status {
        status: 400,
        body: r#"{"error": {"message": "model gpt-small is not available"}}"#.into(),
        matching: Match::Model("gpt-small".into()),
        times: None,
    });
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d, &fake.base_url());
    let out = compare(d).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("2 run(s) failed"), "{err}");
    // The report and the CSV are written all the same, naming the failures.
    let report = std::fs::read_to_string(d.join("out/report.md")).unwrap();
    assert!(report.contains("## Failed runs"), "{report}");
    assert!(report.contains("- cache · single:"), "{report}");
    assert!(
        report.contains("| single | single | 0 (2 failed) |"),
        "{report}"
    );
    let csv = std::fs::read_to_string(d.join("out/runs.csv")).unwrap();
    assert!(
        csv.lines()
            .any(|l| l.starts_with("cache,single,single,,,,,,,") && l.len() > 30),
        "{csv}"
    );
    assert!(!d.join("out/runs/cache__single.json").exists());

    // Fixed: the next invocation makes the two failed runs and their evaluations only.
    fake.clear_faults();
    let before = fake.request_count();
    let again = compare(d).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let new = fake.requests().split_off(before);
    let runs: Vec<&str> = new
        .iter()
        .filter(|r| !is_evaluator(r))
        .map(|r| r.model.as_str())
        .collect();
    assert_eq!(runs, ["gpt-small", "gpt-small"]);
    assert!(d.join("out/runs/cache__single.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_strategy_is_run_again_the_others_are_reused() {
    let fake = FakeLlm::start().await.unwrap();
    script(&fake);
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d, &fake.base_url());
    let first = compare(d).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));

    // Two samples instead of three: the sc runs are stale.
    let mut cfg = parley_tests::read_json(d.join("compare.json"));
    cfg["strategies"][1]["samples"] = json!(2);
    write_json(d.join("compare.json"), &cfg);
    let before = fake.request_count();
    let again = compare(d).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let new = fake.requests().split_off(before);
    let runs: Vec<&str> = new
        .iter()
        .filter(|r| !is_evaluator(r))
        .map(|r| r.model.as_str())
        .collect();
    // Per problem: 2 samples + 1 selection, nothing for single or the debate.
    assert_eq!(runs, ["llama-sc"; 6]);
    let run = parley_tests::read_json(d.join("out/runs/cache__sc.json"));
    assert_eq!(run["calls"], 3);
}
