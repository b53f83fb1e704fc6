//! Human participants from the command line (`parley contribute` is in
//! [`crate::contribute`]).
//!
//! - The desk of `parley run` / `resume` / `retry` ([`Desk`]): when a human participant's
//!   task opens, its answer comes from `--human-answers FILE` (a JSON object: task key →
//!   text), else, on a terminal, it is typed there after the context the agent would get
//!   (end with a line holding only `.`); otherwise the task waits until its deadline. A
//!   task key is the task id, or its part after the debate id (`1/propose/alice`,
//!   `1/critique/alice/bob`), or the kind alone (`propose`, `critique`, `refine`, `vote`:
//!   every task of that kind).

use std::collections::BTreeMap;
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use parley_engine::{ContributeCall, FileStore, Machine};
use parley_protocol::{check_contribution_text, DebateEvent, EventKind, HumanTask, Task, TaskKind};
use tokio::sync::{mpsc, oneshot};

use crate::CliError;

/// One line naming an open human task.
pub(crate) fn describe(t: &HumanTask) -> String {
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

/// The desk during one run.
pub struct DeskRun {
    done: oneshot::Sender<()>,
    handle: tokio::task::JoinHandle<()>,
}

impl DeskRun {
    /// The driver returned: stops answering (a person typing is no longer waited for)
    /// and forwards every event still queued, so the last warnings reach the terminal.
    pub async fn finish(self) {
        let _ = self.done.send(());
        let _ = self.handle.await;
    }
}

/// Events the driver sent before it returned, passed on to the progress display.
fn forward_rest(
    events: &mut mpsc::UnboundedReceiver<DebateEvent>,
    progress: &mpsc::UnboundedSender<DebateEvent>,
) {
    events.close();
    while let Ok(e) = events.try_recv() {
        let _ = progress.send(e);
    }
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
    /// events go on to `progress`), the contributions for the driver, and the desk's
    /// handle; [`DeskRun::finish`] once the driver returned forwards what is still queued.
    pub fn start(
        &self,
        store: FileStore,
        progress: mpsc::UnboundedSender<DebateEvent>,
    ) -> (
        mpsc::UnboundedSender<DebateEvent>,
        mpsc::UnboundedReceiver<ContributeCall>,
        DeskRun,
    ) {
        let (events_tx, mut events_rx) = mpsc::unbounded_channel::<DebateEvent>();
        let (calls_tx, calls_rx) = mpsc::unbounded_channel();
        let (done_tx, mut done_rx) = oneshot::channel::<()>();
        let desk = self.clone();
        let handle = tokio::spawn(async move {
            let mut first = true;
            let mut handled = std::collections::BTreeSet::new();
            loop {
                let e = tokio::select! {
                    e = events_rx.recv() => match e {
                        Some(e) => e,
                        None => return,
                    },
                    _ = &mut done_rx => break,
                };
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
                        // A person typing when the run ended: their answer is no longer
                        // wanted.
                        tokio::select! {
                            () = desk.answer(&machine, &t, &calls_tx) => {}
                            _ = &mut done_rx => {
                                forward_rest(&mut events_rx, &progress);
                                return;
                            }
                        }
                    }
                }
            }
            forward_rest(&mut events_rx, &progress);
        });
        let run = DeskRun {
            done: done_tx,
            handle,
        };
        (events_tx, calls_rx, run)
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
