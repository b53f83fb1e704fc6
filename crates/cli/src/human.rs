//! Human participants from the command line.
//!
//! - `parley contribute <id>`: a person's answer to a human participant's open task in a
//!   cluster debate (`parley.debates.contribute`), from `--text` or `-f FILE` (`-`: stdin);
//!   without either it lists the tasks waiting.
//! - The desk of `parley run` / `resume` / `retry` ([`Desk`]): when a human participant's
//!   task opens, its answer comes from `--human-answers FILE` (a JSON object: task key →
//!   text), else, on a terminal, it is typed there after the context the agent would get
//!   (end with a line holding only `.`); otherwise the task waits until its deadline. A
//!   task key is the task id, or its part after the debate id (`1/propose/alice`,
//!   `1/critique/alice/bob`), or the kind alone (`propose`, `critique`, `refine`, `vote`:
//!   every task of that kind).

use std::collections::BTreeMap;
use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};
use std::path::{Path, PathBuf};

use parley_engine::{ContributeCall, FileStore, Machine};
use parley_protocol::{
    check_contribution_text, subjects, ContributeRequest, DebateEvent, EventKind, HumanTask, Task,
    TaskKind,
};
use tokio::sync::{mpsc, oneshot};

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

/// One line naming an open human task.
fn describe(t: &HumanTask) -> String {
    let about = t
        .target_agent_id
        .as_deref()
        .map(|a| format!(" of {a}'s proposal"))
        .unwrap_or_default();
    format!(
        "{}: {}'s {}{about}, round {} (until {})",
        t.task_id,
        t.agent_id,
        t.kind.as_str(),
        t.round,
        t.deadline.format("%Y-%m-%d %H:%M:%S UTC")
    )
}

/// Where a `parley run` takes its human participants' answers from.
#[derive(Debug, Clone)]
pub struct Desk {
    /// `--human-answers FILE`: task key → text.
    script: Option<(PathBuf, BTreeMap<String, String>)>,
    /// Typed on the terminal (stdin is one).
    terminal: bool,
}

impl Desk {
    /// `--human-answers FILE` when given (read and checked now); the terminal when stdin
    /// is one.
    pub fn choose(file: Option<&Path>) -> Result<Self, CliError> {
        let script = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
                let map: BTreeMap<String, String> = serde_json::from_str(&text).map_err(|e| {
                    CliError::usage(format!(
                        "{}: not a JSON object of task key → text: {e}",
                        path.display()
                    ))
                })?;
                for (k, v) in &map {
                    check_contribution_text(v)
                        .map_err(|m| CliError::usage(format!("{}: {k}: {m}", path.display())))?;
                }
                Some((path.to_path_buf(), map))
            }
            None => None,
        };
        Ok(Self {
            script,
            terminal: std::io::stdin().is_terminal(),
        })
    }

    /// Starts the desk for one run: returns the events channel to give the driver (its
    /// events go on to `progress`), the contributions for the driver, and the task that
    /// answers opened tasks (it ends when the driver drops the events channel).
    pub fn start(
        &self,
        store: FileStore,
        progress: mpsc::UnboundedSender<DebateEvent>,
    ) -> (
        mpsc::UnboundedSender<DebateEvent>,
        mpsc::UnboundedReceiver<ContributeCall>,
        tokio::task::JoinHandle<()>,
    ) {
        let (events_tx, mut events_rx) = mpsc::unbounded_channel::<DebateEvent>();
        let (calls_tx, calls_rx) = mpsc::unbounded_channel();
        let desk = self.clone();
        let handle = tokio::spawn(async move {
            let mut first = true;
            let mut handled = std::collections::BTreeSet::new();
            while let Some(e) = events_rx.recv().await {
                // Tasks opened now, and (at the first event of a resumed run) before.
                let look = std::mem::take(&mut first)
                    || matches!(e.kind, EventKind::HumanTaskOpened { .. });
                let debate = e.debate_id.clone();
                let _ = progress.send(e);
                if !look {
                    continue;
                }
                // The checkpoint holding the open tasks is saved before their events.
                let Ok((spec, state)) = store.load(&debate) else {
                    continue;
                };
                let machine = Machine::from_checkpoint(spec, state);
                let open: Vec<HumanTask> = machine.open_human_tasks().to_vec();
                for t in open {
                    if handled.insert(t.task_id.clone()) {
                        desk.answer(&machine, &t, &calls_tx).await;
                    }
                }
            }
        });
        (events_tx, calls_rx, handle)
    }

    /// Answers one opened task from the script or the terminal (again on the terminal
    /// while the debate refuses what was typed); otherwise says how it can be answered.
    async fn answer(
        &self,
        machine: &Machine,
        open: &HumanTask,
        calls: &mpsc::UnboundedSender<ContributeCall>,
    ) {
        let (debate, task_id) = (machine.id(), open.task_id.as_str());
        let scripted = self.script.as_ref().and_then(|(path, map)| {
            let suffix = task_id
                .strip_prefix(debate)
                .map(|s| s.trim_start_matches('/'))
                .unwrap_or(task_id);
            map.get(task_id)
                .or_else(|| map.get(suffix))
                .or_else(|| map.get(open.kind.as_str()))
                .map(|t| (path.clone(), t.clone()))
        });
        if let Some((path, text)) = scripted {
            if let Err(e) = send(calls, open, text, "script").await {
                eprintln!("{}: {task_id}: refused: {e}", path.display());
            }
            return;
        }
        if !self.terminal {
            eprintln!(
                "debate {debate} waits for {}; answer it with --human-answers FILE or on a terminal (parley resume {debate}), or it is given up at its deadline",
                describe(open)
            );
            return;
        }
        let context = machine.human_task_context(task_id);
        loop {
            let prompt = context_text(open, context.as_ref());
            // A plain thread: one still reading when the run ends does not hold the exit.
            let (tx, rx) = oneshot::channel();
            std::thread::spawn(move || {
                let _ = tx.send(read_typed(&prompt));
            });
            let Ok(Some(text)) = rx.await else {
                eprintln!("no answer typed; {} waits until its deadline", open.task_id);
                return;
            };
            match send(calls, open, text, "terminal").await {
                Ok(()) => return,
                Err(e) => eprintln!("refused: {e}; type it again"),
            }
        }
    }
}

/// Hands a contribution to the driver and waits for its verdict.
async fn send(
    calls: &mpsc::UnboundedSender<ContributeCall>,
    open: &HumanTask,
    text: String,
    by: &str,
) -> Result<(), String> {
    let c = parley_engine::Contribute {
        agent_id: Some(open.agent_id.clone()),
        task_id: Some(open.task_id.clone()),
        text,
        by: Some(by.to_string()),
    };
    let (tx, rx) = oneshot::channel();
    calls
        .send((c, tx))
        .map_err(|_| "the debate is no longer running".to_string())?;
    match rx.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the debate is no longer running".into()),
    }
}

/// What a person reads before answering: the task and the input the agent would get.
fn context_text(open: &HumanTask, task: Option<&Task>) -> String {
    let mut out = format!(
        "\n=== Your turn as {} ===\n{}\n",
        open.agent_id,
        describe(open)
    );
    if let Some(t) = task {
        out.push_str(&format!("\nProblem:\n{}\n", t.problem));
        if let Some(h) = &t.input.history {
            out.push_str(&format!("\nYour history:\n{h}\n"));
        }
        if let Some(p) = &t.input.proposal {
            out.push_str(&format!(
                "\nProposal of {} ({}):\n{}\n",
                p.agent_id, p.agent_role, p.content
            ));
        }
        for c in &t.input.critiques {
            out.push_str(&format!(
                "\nCritique from {} ({}):\n{}\n",
                c.agent_id, c.agent_role, c.content
            ));
        }
        for c in &t.input.candidates {
            out.push_str(&format!(
                "\nCandidate {} ({}):\n{}\n",
                c.agent_id, c.agent_role, c.content
            ));
        }
        for n in &t.input.guidance {
            out.push_str(&format!("\nGuidance (round {}): {}\n", n.round, n.note));
        }
    }
    let how = match open.kind {
        TaskKind::Vote => "Type the id of the agent you vote for, then why",
        TaskKind::Critique => "Type your critique",
        TaskKind::Refine => "Type your refined proposal",
        _ => "Type your proposal",
    };
    out.push_str(&format!("\n{how}; end with a line holding only \".\":\n"));
    out
}

/// Reads lines from stdin up to a line holding only `.` (or the end of input); `None`
/// when nothing was typed.
fn read_typed(prompt: &str) -> Option<String> {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{prompt}");
    let _ = err.flush();
    drop(err);
    let mut lines = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim_end() == "." {
            break;
        }
        lines.push(line);
    }
    let text = lines.join("\n");
    (!text.trim().is_empty()).then_some(text)
}
