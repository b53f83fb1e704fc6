//! `parley report <id|debate.json>`: the Markdown report of `run --report`, from any saved
//! debate — an embedded run's id (its `./debates/<id>.json`), a `run --output x.json`, the
//! output of `parley status <id>` (the same DebateState JSON), or a state file dialectic wrote.

use std::path::PathBuf;

use parley_protocol::DebateState;

use crate::config::{self, Overrides};
use crate::{report, CliError};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The saved debate: an embedded debate's id (read from ./debates/) or a DebateState
    /// JSON file.
    #[arg(value_name = "ID|DEBATE_JSON", required_unless_present = "debate_flag")]
    pub debate: Option<String>,
    /// The saved debate, as dialectic's `report --debate F` names it.
    #[arg(long = "debate", value_name = "FILE", conflicts_with = "debate")]
    pub debate_flag: Option<PathBuf>,
    /// The debate configuration it ran with, for the agents table (names, models,
    /// temperatures); without it the table lists the agents that contributed.
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Write the report here instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also print where the report went (on stderr).
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

pub fn report(args: ReportArgs) -> Result<(), CliError> {
    let arg = match (&args.debate, &args.debate_flag) {
        (Some(a), _) => a.clone(),
        (None, Some(f)) => f.display().to_string(),
        (None, None) => {
            return Err(CliError::usage(
                "name the saved debate: parley report <id|debate.json>",
            ))
        }
    };
    // An id in ./debates/ or a file; Parley's state or dialectic's, converted.
    let saved = crate::decisions::load_saved(&arg)?;
    let (state, file): (DebateState, PathBuf) = (saved.state, saved.path);
    let spec = match &args.config {
        Some(c) => {
            if !c.is_file() {
                return Err(CliError::config(format!(
                    "configuration file {} not found",
                    c.display()
                )));
            }
            let mut warn = |w: String| eprintln!("warning: {w}");
            let loaded = config::load(Some(c), &mut warn)?;
            let mut spec = config::build_spec(
                loaded,
                state.problem.to_string(),
                &Overrides::default(),
                &mut warn,
            )?;
            // The debate may have run with a subset (`--agents`): the table lists the agents
            // that took part, as the config describes them.
            let spoke: std::collections::BTreeSet<&str> = state
                .rounds
                .iter()
                .flat_map(|r| &r.contributions)
                .map(|c| c.agent_id.as_str())
                .collect();
            if !spoke.is_empty() {
                spec.agents.retain(|a| spoke.contains(a.id.as_str()));
            }
            Some(spec)
        }
        None => None,
    };
    let mut md = report::markdown(spec.as_ref(), &state);
    // The decision record saved next to the state, else the one of the embedded debate in
    // ./debates/ (a `run --output` copy of the state has none beside it).
    let record = crate::decisions::saved_record(&file)
        .or_else(|| {
            parley_protocol::is_valid_debate_id(&state.id).then(|| {
                crate::decisions::saved_record(
                    &std::path::Path::new(crate::run::DEBATES_DIR)
                        .join(format!("{}.json", state.id)),
                )
            })?
        })
        .filter(|r| r.debate_id == state.id);
    if let Some(r) = record {
        md.push_str(&parley_record::report::section(&r));
    }
    match &args.output {
        Some(out) => {
            let out =
                report::write_report(out, &md).map_err(|e| CliError::general(e.to_string()))?;
            if args.verbose {
                eprintln!(
                    "Wrote the report of debate {} to {}",
                    state.id,
                    out.display()
                );
            }
        }
        None => print!("{md}"),
    }
    Ok(())
}
