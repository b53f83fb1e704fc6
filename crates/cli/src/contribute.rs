//! `parley contribute <id>`: a person's answer to a human participant's open task in a
//! cluster debate (`parley.debates.contribute`), from `--text` or `-f FILE` (`-`: stdin);
//! without either it lists the tasks waiting.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use parley_protocol::{subjects, ContributeRequest};

use crate::human::describe;
use crate::remote::{self, DebateArgs};
use crate::CliError;

/// `parley contribute`.
#[derive(clap::Args, Debug)]
pub struct ContributeArgs {
    #[command(flatten)]
    pub debate: DebateArgs,
    /// The human agent answering [default: the only human agent with an open task].
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// The task answered [default: the agent's oldest open task].
    #[arg(long, value_name = "TASK_ID")]
    pub task: Option<String>,
    /// The contribution (a proposal, critique or refinement; a vote names the agent voted
    /// for first, then why). At most 20000 characters; no control characters but newlines
    /// and tabs.
    #[arg(long, conflicts_with = "file")]
    pub text: Option<String>,
    /// Read the contribution from this file (`-`: stdin).
    #[arg(short = 'f', long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Who is answering, recorded with it [default: the NATS user of the inbox].
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

/// `parley contribute`: checked here (debate id, text, names), then sent on
/// `parley.debates.contribute`; the reply (or the debate's refusal) is printed. Without a
/// text, the open human tasks are listed.
pub async fn contribute(args: ContributeArgs) -> Result<(), CliError> {
    let id = args.debate.debate_id.clone();
    if !parley_protocol::is_valid_debate_id(&id) {
        return Err(CliError::usage(format!(
            "{id:?} is not a debate id (deb-YYYYMMDD-HHMMSS-RAND)"
        )));
    }
    let text = match (&args.text, &args.file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(f)) => Some(read_text(f)?),
        (None, None) => None,
    };
    let client = remote::connect(&args.debate.nats).await?;
    let Some(text) = text else {
        let state = remote::fetch_state(&client, &id).await?;
        if state.human.open.is_empty() {
            println!("debate {id}: no human task waits for an answer");
        }
        for t in &state.human.open {
            println!("{}", describe(t));
        }
        return Ok(());
    };
    let req = ContributeRequest {
        debate_id: id,
        text,
        agent_id: args.agent,
        task_id: args.task,
        by: args.by,
    };
    req.validate()
        .map_err(|r| CliError::usage(r.message.clone()))?;
    let body = serde_json::to_vec(&req).map_err(|e| CliError::general(e.to_string()))?;
    let v = remote::request(&client, subjects::CONTRIBUTE, body).await?;
    println!("{v}");
    Ok(())
}

fn read_text(path: &Path) -> Result<String, CliError> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| {
            CliError::usage(format!("cannot read the contribution from stdin: {e}"))
        })?;
        return Ok(s);
    }
    std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))
}
