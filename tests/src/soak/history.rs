//! The soak's history: every submission, answer, fault, heal and process exit with its
//! time since the start, printed as it happens (so a run's log is its history) and kept
//! for the checks, which print the entries around a violation.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What an entry records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// The driver sent a submission (`k`: its number).
    Submit { k: usize },
    /// A submission was accepted as debate `id`.
    Accepted { k: usize, id: String },
    /// A submission was refused (not retried) with this reply.
    Refused { k: usize, reply: String },
    /// The driver answered the clarification questions of debate `id`.
    Answered { id: String, questions: usize },
    /// A fault began (`kind`: [`super::nemesis::Kind::name`]).
    Fault { kind: &'static str, target: String },
    /// The fault begun at entry `started` ended (process restarted, link healed, ...).
    Healed { kind: &'static str, target: String },
    /// A process exited without the nemesis killing it.
    Exit { process: String, status: String },
    /// A debate reached its final status.
    Ended { id: String, status: String },
    /// Anything else worth a line (a failover observed, a restart that failed).
    Note(String),
}

/// One line of the history.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Since the start of the run.
    pub at: Duration,
    pub what: What,
}

/// The shared, append-only history.
#[derive(Debug, Clone)]
pub struct History {
    start: Instant,
    entries: Arc<Mutex<Vec<Entry>>>,
    /// Print entries as they are added.
    echo: bool,
}

impl History {
    pub fn new(echo: bool) -> Self {
        Self {
            start: Instant::now(),
            entries: Arc::new(Mutex::new(Vec::new())),
            echo,
        }
    }

    /// Time since the start.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// The instant `at` after the start.
    pub fn instant(&self, at: Duration) -> Instant {
        self.start + at
    }

    /// Time since the start of `t` (zero before it).
    pub fn since_start(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.start)
    }

    pub fn log(&self, what: What) {
        let entry = Entry {
            at: self.now(),
            what,
        };
        if self.echo {
            eprintln!("{}", line(&entry));
        }
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entry);
    }

    pub fn note(&self, text: impl Into<String>) {
        self.log(What::Note(text.into()));
    }

    /// Every entry so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The entries from `from - margin` to `to + margin`, as lines, plus the entries that
    /// name `id` anywhere in the history: the shortest history around a violation.
    pub fn around(&self, from: Duration, to: Duration, id: Option<&str>) -> String {
        let margin = Duration::from_secs(3);
        let lo = from.saturating_sub(margin);
        let hi = to + margin;
        self.entries()
            .iter()
            .filter(|e| {
                (e.at >= lo && e.at <= hi)
                    || id.is_some_and(|id| format!("{:?}", e.what).contains(id))
            })
            .map(line)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `[  12.345s] what`.
pub fn line(e: &Entry) -> String {
    let what = match &e.what {
        What::Submit { k } => format!("submit #{k}"),
        What::Accepted { k, id } => format!("accepted #{k} as {id}"),
        What::Refused { k, reply } => format!("refused #{k}: {reply}"),
        What::Answered { id, questions } => format!("answered {questions} question(s) of {id}"),
        What::Fault { kind, target } => format!("FAULT {kind} {target}"),
        What::Healed { kind, target } => format!("healed {kind} {target}"),
        What::Exit { process, status } => format!("EXIT {process}: {status}"),
        What::Ended { id, status } => format!("ended {id}: {status}"),
        What::Note(t) => t.clone(),
    };
    format!("[{:>9.3}s] {what}", e.at.as_secs_f64())
}
