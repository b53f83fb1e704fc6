//! `parley fork <id> --at <round> [-c changes.json]`: a new debate sharing a debate's
//! contributions up to the end of a round, running on with changes (embedded: from
//! `./debates/<id>.json`, run here like `parley resume`; a cluster: `parley.debates.fork`).
//! `parley diff <a> <b>`: two debates' solutions side by side (text or `--json`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use chrono::Utc;
use parley_engine::FileStore;
use parley_protocol::{new_debate_id, DebateState, ForkChanges, Solution, Spend};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::remote::NatsArgs;
use crate::run::{self, SavedArgs, DEBATES_DIR};
use crate::CliError;

/// Bytes of a changes file, at most.
const MAX_CHANGES_BYTES: u64 = 64 * 1024;

/// `parley fork`.
#[derive(clap::Args, Debug)]
pub struct ForkArgs {
    #[command(flatten)]
    pub saved: SavedArgs,
    /// The last round the fork shares with its parent (the parent's round must be complete).
    #[arg(long, value_name = "ROUND")]
    pub at: u32,
    /// What the fork changes (JSON): `{"agents": {"<id>": {"model", "provider",
    /// "temperature"}}, "judge": {...}, "rounds": N, "guide": "note"}`.
    #[arg(short = 'c', long = "changes", value_name = "FILE")]
    pub changes: Option<PathBuf>,
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// `parley diff`.
#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// A debate id (./debates/<id>.json, else the cluster's) or a saved state file.
    pub a: String,
    /// The other debate.
    pub b: String,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub nats: NatsArgs,
}

fn read_changes(path: Option<&Path>) -> Result<ForkChanges, CliError> {
    let Some(path) = path else {
        return Ok(ForkChanges::default());
    };
    let meta =
        std::fs::metadata(path).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
    if meta.len() > MAX_CHANGES_BYTES {
        return Err(CliError::usage(format!(
            "{}: {} bytes, the limit is {MAX_CHANGES_BYTES}",
            path.display(),
            meta.len()
        )));
    }
    let bytes =
        std::fs::read(path).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
    let changes: ForkChanges = serde_json::from_slice(&bytes)
        .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
    changes
        .validate()
        .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
    Ok(changes)
}

/// `parley fork`: embedded when `./debates/<id>.json` exists (the fork is saved beside it
/// and run here), else over NATS.
pub async fn fork(args: ForkArgs, interrupt: &CancellationToken) -> Result<(), CliError> {
    let parent = args.saved.debate_id.clone();
    let changes = read_changes(args.changes.as_deref())?;
    if !run::is_saved(&parent) {
        let body = json!({ "debateId": parent, "atRound": args.at, "changes": changes });
        let client = crate::remote::connect(&args.nats).await?;
        let v = crate::remote::request(
            &client,
            parley_protocol::subjects::FORK,
            body.to_string().into_bytes(),
        )
        .await?;
        println!("{v}");
        return Ok(());
    }
    let store = FileStore::new(DEBATES_DIR);
    let (spec, state) = store
        .load(&parent)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let now = Utc::now();
    let id = new_debate_id(now);
    let (fspec, fstate) = parley_engine::fork(&spec, &state, args.at, &changes, id.clone(), now)
        .map_err(|e| CliError::usage(e.to_string()))?;
    fspec
        .validate_with(&parley_protocol::SubmissionPolicy::default())
        .map_err(|e| CliError::usage(e.to_string()))?;
    store
        .save_with_spec(&fstate, &fspec)
        .map_err(|e| CliError::general(e.to_string()))?;
    eprintln!("forked {parent} at round {} as {id}", args.at);
    let saved = SavedArgs {
        debate_id: id,
        ..args.saved
    };
    run::continue_saved(saved, run::Continue::Resume, interrupt).await
}

/// One debate's state for `diff`: a file path, `./debates/<id>.json`, or the cluster's.
async fn load(what: &str, nats: &NatsArgs) -> Result<DebateState, CliError> {
    let path = Path::new(what);
    let file = if parley_protocol::is_valid_debate_id(what) {
        let store = FileStore::new(DEBATES_DIR);
        store.exists(what).then(|| store.path_of(what))
    } else {
        Some(path.to_path_buf())
    };
    match file {
        Some(p) => {
            let bytes =
                std::fs::read(&p).map_err(|e| CliError::usage(format!("{}: {e}", p.display())))?;
            parley_protocol::parse_saved_state(&bytes)
                .map_err(|e| CliError::usage(format!("{}: not a debate state: {e}", p.display())))
        }
        None => {
            let client = crate::remote::connect(nats).await?;
            crate::remote::fetch_state(&client, what).await
        }
    }
}

/// Case, spacing and trailing punctuation do not make two items different.
fn norm(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches(['.', ';', ',', '!'])
        .to_lowercase()
}

/// `{common, onlyA, onlyB}` of two lists.
fn compare(a: &[String], b: &[String]) -> Value {
    let nb: BTreeSet<String> = b.iter().map(|s| norm(s)).collect();
    let na: BTreeSet<String> = a.iter().map(|s| norm(s)).collect();
    let common: Vec<&String> = a.iter().filter(|s| nb.contains(&norm(s))).collect();
    let only_a: Vec<&String> = a.iter().filter(|s| !nb.contains(&norm(s))).collect();
    let only_b: Vec<&String> = b.iter().filter(|s| !na.contains(&norm(s))).collect();
    json!({ "common": common, "onlyA": only_a, "onlyB": only_b })
}

fn totals(s: &DebateState) -> Value {
    let judge = s
        .final_solution
        .as_ref()
        .map_or("", |f| f.synthesized_by.as_str());
    let spend = s.spend.clone().unwrap_or_else(|| Spend::of(s, judge));
    let wall_ms = (s.updated_at - s.created_at).num_milliseconds().max(0);
    json!({
        "id": s.id,
        "status": s.status.as_str(),
        "rounds": s.rounds.len(),
        "calls": spend.calls,
        "tokens": spend.total_tokens,
        "costUsd": spend.cost_usd,
        "wallMs": wall_ms,
        "confidence": s.final_solution.as_ref().map(|f| f.confidence),
        "forkedFrom": s.forked_from,
    })
}

/// The comparison `parley diff --json` prints.
pub fn diff_value(a: &DebateState, b: &DebateState) -> Value {
    let empty = Solution::text_only(String::new(), String::new());
    let sa = a.final_solution.as_ref().unwrap_or(&empty);
    let sb = b.final_solution.as_ref().unwrap_or(&empty);
    json!({
        "a": totals(a),
        "b": totals(b),
        "requirements": compare(&sa.unfulfilled_major_requirements, &sb.unfulfilled_major_requirements),
        "decisions": compare(&sa.recommendations, &sb.recommendations),
        "tradeoffs": compare(&sa.tradeoffs, &sb.tradeoffs),
        "openDisagreements": compare(
            &[sa.unresolved_disagreements.clone(), sa.open_questions.clone()].concat(),
            &[sb.unresolved_disagreements.clone(), sb.open_questions.clone()].concat(),
        ),
    })
}

/// The comparison as text.
pub fn diff_text(v: &Value) -> String {
    let mut out = String::new();
    let (a, b) = (&v["a"], &v["b"]);
    let row =
        |name: &str, x: &Value, y: &Value| format!("{name:<12} {:<28} {}\n", show(x), show(y));
    out.push_str(&row("", &a["id"], &b["id"]));
    for (k, name) in [
        ("status", "status"),
        ("rounds", "rounds"),
        ("calls", "calls"),
        ("tokens", "tokens"),
        ("costUsd", "cost (USD)"),
        ("wallMs", "wall (ms)"),
        ("confidence", "confidence"),
    ] {
        out.push_str(&row(name, &a[k], &b[k]));
    }
    for (k, title) in [
        ("requirements", "Unmet requirements"),
        ("decisions", "Decisions (recommendations)"),
        ("tradeoffs", "Tradeoffs"),
        ("openDisagreements", "Open disagreements and questions"),
    ] {
        out.push_str(&format!("\n## {title}\n"));
        for (part, mark) in [("common", "="), ("onlyA", "A"), ("onlyB", "B")] {
            for item in v[k][part].as_array().into_iter().flatten() {
                out.push_str(&format!("{mark} {}\n", item.as_str().unwrap_or_default()));
            }
        }
    }
    out
}

fn show(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n
            .as_f64()
            .filter(|f| f.fract() != 0.0)
            .map_or_else(|| n.to_string(), |f| format!("{f:.4}")),
        other => other.to_string(),
    }
}

/// `parley diff`.
pub async fn diff(args: DiffArgs) -> Result<(), CliError> {
    let a = load(&args.a, &args.nats).await?;
    let b = load(&args.b, &args.nats).await?;
    let v = diff_value(&a, &b);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", diff_text(&v));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_compare_ignoring_case_spacing_and_final_stops() {
        let a = vec!["Use Redis.".to_string(), "Shard by tenant".to_string()];
        let b = vec!["use  redis".to_string(), "Add a CDN".to_string()];
        let v = compare(&a, &b);
        assert_eq!(v["common"], json!(["Use Redis."]));
        assert_eq!(v["onlyA"], json!(["Shard by tenant"]));
        assert_eq!(v["onlyB"], json!(["Add a CDN"]));
    }
}
