//! Progress on stderr while a debate runs: round n/N, phase, done/total tasks, active
//! agents. On a terminal one status line is redrawn in place; otherwise plain lines are
//! printed when something changes.

use std::io::{IsTerminal, Write};

use parley_protocol::{DebateEvent, EventKind, Progress};
use tokio::sync::mpsc::UnboundedReceiver;

pub fn status_line(p: &Progress) -> String {
    let active = if p.active_agents.is_empty() {
        "-".to_string()
    } else {
        p.active_agents.join(", ")
    };
    format!(
        "[round {}/{}] {} · {}/{} tasks · active: {}",
        p.round, p.rounds, p.phase, p.done, p.total, active
    )
}

/// One line for a verdict, a round's similarity, the adaptive path or the vote tally.
fn mode_line(kind: &EventKind) -> String {
    match kind {
        EventKind::VerdictGiven {
            round,
            verdict,
            confidence,
            open_issues,
            valid,
        } => {
            let what = if *round == 0 {
                "the proposals".to_string()
            } else {
                format!("round {round}")
            };
            let decision = match verdict {
                parley_protocol::VerdictDecision::Done => "done",
                parley_protocol::VerdictDecision::Continue => "continue",
            };
            let unreadable = if *valid { "" } else { " (unreadable reply)" };
            format!(
                "verdict on {what}: {decision}, confidence {confidence:.0}, {open_issues} open issue(s){unreadable}"
            )
        }
        EventKind::AdaptivePathChosen { path, reason } => {
            format!("adaptive: {} path: {reason}", path.as_str())
        }
        EventKind::SimilarityMeasured {
            round,
            min_per_agent,
            across_agents,
            threshold,
            converged,
        } => {
            let own = min_per_agent.map_or("-".to_string(), |m| format!("{m:.3}"));
            let across = across_agents.map_or("-".to_string(), |m| format!("{m:.3}"));
            let decision = if *converged { "stop" } else { "go on" };
            format!(
                "similarity after round {round}: least self-similarity {own}, across agents {across} (threshold {threshold}): {decision}"
            )
        }
        EventKind::VotesTallied {
            winner, leaders, ..
        } => match winner {
            Some(w) => format!("vote: {w} won"),
            None => format!("vote: tie between {} (the judge picks)", leaders.join(", ")),
        },
        _ => String::new(),
    }
}

/// Prints events until the channel closes.
pub async fn show(mut rx: UnboundedReceiver<DebateEvent>) {
    let tty = std::io::stderr().is_terminal();
    let mut last = String::new();
    while let Some(e) = rx.recv().await {
        let mut err = std::io::stderr().lock();
        match &e.kind {
            EventKind::Warning { message } => {
                if tty {
                    let _ = write!(err, "\r\x1b[K");
                }
                let _ = writeln!(err, "warning: {message}");
            }
            EventKind::ClarificationsRequested { questions, .. } => {
                if tty {
                    let _ = write!(err, "\r\x1b[K");
                }
                let n: usize = questions.iter().map(|g| g.items.len()).sum();
                let _ = writeln!(
                    err,
                    "debate {} waits for answers to {n} clarification question(s)",
                    e.debate_id
                );
            }
            EventKind::TaskFailed {
                task_id,
                error,
                will_retry,
                ..
            } => {
                if tty {
                    let _ = write!(err, "\r\x1b[K");
                }
                let then = if *will_retry { "retrying" } else { "giving up" };
                let _ = writeln!(err, "task {task_id} failed: {error} ({then})");
            }
            EventKind::BudgetDegraded { step, round, tasks } => {
                if tty {
                    let _ = write!(err, "\r\x1b[K");
                }
                let what = match step.as_str() {
                    "dropCritiques" => "dropped critique(s) that do not fit",
                    "noNewRound" => "no new round starts",
                    "skipSummaries" => "skipped summary(ies)",
                    "synthesizeNow" => "synthesizing with what exists",
                    "skipScreen" => "skipped the adaptive screen (debating as configured)",
                    _ => "skipped the clarification questions",
                };
                let n = if tasks.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", tasks.len())
                };
                let _ = writeln!(err, "budget: round {round}: {what}{n}");
            }
            EventKind::HumanTaskOpened { .. }
            | EventKind::HumanContributed { .. }
            | EventKind::HumanTaskExpired { .. } => {
                if tty {
                    let _ = write!(err, "\r\x1b[K");
                }
                let _ = writeln!(err, "{}", human_line(&e.kind));
            }
            EventKind::VerdictGiven { .. }
            | EventKind::SimilarityMeasured { .. }
            | EventKind::AdaptivePathChosen { .. }
            | EventKind::VotesTallied { .. } => {
                if tty {
                    let _ = write!(err, "\r\x1b[K");
                }
                let _ = writeln!(err, "{}", mode_line(&e.kind));
            }
            _ => {}
        }
        let line = status_line(&e.progress);
        if line != last {
            if tty {
                let _ = write!(err, "\r\x1b[K{line}");
            } else {
                let _ = writeln!(err, "{line}");
            }
            last = line;
        }
        if e.is_final() && tty {
            let _ = writeln!(err);
        }
    }
}

/// One line about a human participant's task: opened (until when), answered (in how
/// long), expired (and what the debate does without it).
pub(crate) fn human_line(kind: &EventKind) -> String {
    match kind {
        EventKind::HumanTaskOpened {
            task_id,
            agent_id,
            deadline,
            ..
        } => format!(
            "human: {agent_id}'s turn ({task_id}), waiting until {}",
            deadline.format("%H:%M:%S UTC")
        ),
        EventKind::HumanContributed {
            task_id,
            agent_id,
            latency_ms,
            by,
            ..
        } => {
            let by = by
                .as_deref()
                .map(|b| format!(" by {b}"))
                .unwrap_or_default();
            format!(
                "human: {agent_id} answered {task_id}{by} after {:.1} s",
                *latency_ms as f64 / 1000.0
            )
        }
        EventKind::HumanTaskExpired {
            task_id,
            agent_id,
            reason,
            ..
        } => format!("human: {agent_id}'s task {task_id} closed unanswered: {reason}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod mode_line_tests {
    use super::mode_line;
    use parley_protocol::{AdaptivePath, EventKind, VerdictDecision};

    #[test]
    fn verdicts_paths_and_tallies_read_as_one_line() {
        let v = EventKind::VerdictGiven {
            round: 0,
            verdict: VerdictDecision::Continue,
            confidence: 42.4,
            open_issues: 2,
            valid: false,
        };
        assert_eq!(
            mode_line(&v),
            "verdict on the proposals: continue, confidence 42, 2 open issue(s) (unreadable reply)"
        );
        let p = EventKind::AdaptivePathChosen {
            path: AdaptivePath::Full,
            reason: "why".into(),
        };
        assert_eq!(mode_line(&p), "adaptive: full path: why");
        let t = EventKind::VotesTallied {
            winner: None,
            tie: true,
            leaders: vec!["a".into(), "b".into()],
            counts: Default::default(),
        };
        assert_eq!(mode_line(&t), "vote: tie between a, b (the judge picks)");
    }
}
