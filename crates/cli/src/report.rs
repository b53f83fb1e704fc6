//! The solution text, the Markdown report and the `--verbose` summary.

use std::fmt::Write;

use parley_protocol::{ContributionType, DebateSpec, DebateState};

/// The final solution as plain text (what `parley run` prints on stdout).
pub fn solution_text(state: &DebateState) -> String {
    solution_text_with(state, None)
}

/// [`solution_text`], with `confidence_note` in place of "synthesized by <judge>" on the
/// `Confidence:` line (a judge on the local demo model reports a confidence it did not
/// measure).
pub fn solution_text_with(state: &DebateState, confidence_note: Option<&str>) -> String {
    let mut out = String::new();
    let Some(s) = &state.final_solution else {
        return out;
    };
    out.push_str(&parley_record::report::solution_lists(s));
    if let Some(v) = state.voting.as_ref().filter(|v| v.tallied) {
        let _ = writeln!(out, "{}", vote_line(v));
        if let Some(b) = &s.based_on {
            let _ = writeln!(out, "Written from the final refinement of {b}.");
        }
        out.push('\n');
    }
    if let Some(a) = &state.adaptive {
        let _ = writeln!(out, "Adaptive path: {} ({})\n", a.path.as_str(), a.reason);
    }
    let _ = match confidence_note {
        Some(note) => writeln!(out, "Confidence: {:.0}/100 ({note})", s.confidence),
        None => writeln!(
            out,
            "Confidence: {:.0}/100 (synthesized by {})",
            s.confidence, s.synthesized_by
        ),
    };
    if let Some(sp) = &state.spend {
        let _ = writeln!(
            out,
            "Cost: {} ({} tokens, {} LLM calls)",
            parley_protocol::format_cost(sp.cost_usd),
            sp.total_tokens,
            sp.calls
        );
    }
    out
}

/// The vote in one line: the winner (or the tie) and the valid votes per agent.
pub fn vote_line(v: &parley_protocol::VotingRecord) -> String {
    let counts: Vec<String> = v.counts.iter().map(|(a, c)| format!("{a} {c}")).collect();
    let invalid = v.votes.iter().filter(|b| !b.valid).count();
    let head = match &v.winner {
        Some(w) => format!("Vote: {w} won"),
        None => format!(
            "Vote: tie between {} (the judge chose)",
            v.leaders.join(", ")
        ),
    };
    let mut line = format!("{head} ({})", counts.join(", "));
    if invalid > 0 {
        line.push_str(&format!("; {invalid} invalid vote(s) not counted"));
    }
    line
}

/// Each participant's calls, tokens and cost, one line each (the report and `--verbose`).
pub fn spend_lines(state: &DebateState, bullet: &str) -> String {
    let mut out = String::new();
    if let Some(sp) = &state.spend {
        for (id, p) in &sp.participants {
            let _ = writeln!(
                out,
                "{bullet}{id}: {} calls, {} tokens, {}",
                p.calls,
                p.tokens,
                parley_protocol::format_cost(p.cost_usd)
            );
        }
    }
    out
}

/// A Markdown report: problem, agents, each round's contributions with metadata, the final
/// solution and totals, under dialectic's section headings (`## Problem Description`,
/// `## Agents`, `## Judge`, `## Rounds` with `### Round N`, `### Final Synthesis`) so
/// scripts written for dialectic's reports find their sections. Without the spec (`parley report` of a saved debate and no
/// `--config`), the agents are the ones that contributed, as the state records them.
pub fn markdown(spec: Option<&DebateSpec>, state: &DebateState) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Debate {}\n", state.id);
    let _ = writeln!(
        md,
        "Status: **{}** · created {} · updated {}\n",
        state.status.as_str(),
        state.created_at.to_rfc3339(),
        state.updated_at.to_rfc3339()
    );
    let _ = writeln!(
        md,
        "## Problem Description\n\n{}\n",
        parley_record::report::mark_problem(&state.problem)
    );
    let indexes = parley_record::report::EntryIndexes::of(state);
    if let Some(c) = &state.context {
        let _ = writeln!(md, "## Context\n\n{}\n", c.trim());
    }
    if !state.clarifications.is_empty() {
        let _ = writeln!(md, "## Clarifications\n");
        for g in &state.clarifications {
            let _ = writeln!(md, "### {} ({}, {})\n", g.agent_name, g.agent_id, g.role);
            for i in &g.items {
                let answer = i.answer.as_deref().unwrap_or("(not answered yet)");
                let _ = writeln!(
                    md,
                    "- **Q ({}):** {}\n  **A:** {}",
                    i.id,
                    i.question.trim(),
                    answer.trim()
                );
            }
            md.push('\n');
        }
    }
    let prompt_source = |id: &str| {
        state
            .prompt_sources
            .agents
            .iter()
            .find(|s| s.agent_id == id)
            .map(|s| s.source.as_str())
            .unwrap_or("built-in")
    };
    match spec {
        Some(spec) => {
            let _ = writeln!(md, "## Agents\n\n| id | name | role | model | temperature | prompt |\n|---|---|---|---|---|---|");
            for a in spec.active_agents() {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} |",
                    a.id,
                    a.name,
                    a.role,
                    a.model,
                    a.temperature,
                    prompt_source(&a.id)
                );
            }
            let j = &spec.judge;
            let _ = writeln!(
                md,
                "\n## Judge\n\n{} ({}, {}, temperature {})\n",
                j.id, j.role, j.model, j.temperature
            );
        }
        None => {
            let _ = writeln!(
                md,
                "## Agents\n\n| id | role | model | prompt |\n|---|---|---|---|"
            );
            let mut seen = std::collections::BTreeSet::new();
            for c in state.rounds.iter().flat_map(|r| &r.contributions) {
                if seen.insert(c.agent_id.as_str()) {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {} |",
                        c.agent_id,
                        c.agent_role,
                        c.metadata.model,
                        prompt_source(&c.agent_id)
                    );
                }
            }
            if let Some(s) = &state.final_solution {
                let _ = writeln!(md, "\n## Judge\n\n{}\n", s.synthesized_by);
            } else {
                md.push('\n');
            }
        }
    }
    let _ = writeln!(md, "## Rounds\n");
    for rd in &state.rounds {
        let _ = writeln!(md, "### Round {}\n", rd.round_number);
        for (id, s) in &rd.summaries {
            let _ = writeln!(
                md,
                "#### Summary for {id}\n\n{}\n_{} → {} chars · {} tokens · {} ms · {}_\n",
                marked(indexes.summary(rd.round_number, id), &s.summary),
                s.metadata.before_chars,
                s.metadata.after_chars,
                s.metadata.tokens_used,
                s.metadata.latency_ms,
                s.metadata.model
            );
        }
        for kind in [
            ContributionType::Proposal,
            ContributionType::Critique,
            ContributionType::Refinement,
        ] {
            for c in rd.contributions.iter().filter(|c| c.kind == kind) {
                let title = match &c.target_agent_id {
                    Some(t) => format!(
                        "{} by {} ({}) of {t}",
                        kind.as_str(),
                        c.agent_id,
                        c.agent_role
                    ),
                    None => format!("{} by {} ({})", kind.as_str(), c.agent_id, c.agent_role),
                };
                let m = &c.metadata;
                let carried = if m.carried_over {
                    " · carried over"
                } else {
                    ""
                };
                let text = marked(indexes.contribution(rd.round_number, c), &c.content);
                if m.human {
                    // A person's contribution: no model, no tokens; how long they took.
                    let _ = writeln!(
                        md,
                        "#### {title}\n\n{text}\n_written by a person · {} ms{carried}_\n",
                        m.latency_ms
                    );
                    continue;
                }
                let _ = writeln!(
                    md,
                    "#### {title}\n\n{text}\n_{} tokens · {} ms · {}{carried}_\n",
                    m.tokens_used, m.latency_ms, m.model
                );
            }
        }
        if !rd.dropped.is_empty() {
            let _ = writeln!(
                md,
                "#### Dropped critiques
"
            );
            for d in &rd.dropped {
                let _ = writeln!(
                    md,
                    "- {} of {}: gave up after {} attempt(s): {}",
                    d.agent_id,
                    d.target_agent_id,
                    d.attempts,
                    d.error.trim()
                );
            }
            md.push('\n');
        }
        if let Some(e) = &rd.evaluation {
            let _ = writeln!(
                md,
                "#### Judge evaluation\n\nConfidence {:.0}/100. {}\n",
                e.confidence,
                e.reasoning.trim()
            );
        }
        if rd.round_number == 1 {
            if let Some(a) = &state.adaptive {
                let screen = match (&a.verdict, &a.similarity) {
                    (Some(v), _) => verdict_text(&v.verdict),
                    (None, Some(s)) => format!(
                        "The proposals' mean similarity across agents: {} (threshold {:.3}).",
                        s.similarity
                            .across_agents
                            .map_or("not measured".to_string(), |v| format!("{v:.3}")),
                        s.threshold
                    ),
                    (None, None) => "Not screened.".to_string(),
                };
                let _ = writeln!(
                    md,
                    "#### Adaptive screen of the proposals\n\n{screen}\n\nPath: **{}**. {}\n",
                    a.path.as_str(),
                    a.reason
                );
            }
        }
        if let Some(v) = &rd.verdict {
            let _ = writeln!(md, "#### Judge verdict\n\n{}\n", verdict_text(&v.verdict));
        }
        if let Some(s) = &rd.similarity {
            let _ = writeln!(md, "#### Similarity\n\n{}\n", similarity_text(s));
        }
    }
    if let Some(v) = &state.voting {
        let _ = writeln!(md, "### Votes\n");
        for b in &v.votes {
            let mark = if b.valid {
                String::new()
            } else {
                format!(
                    " _(invalid: {})_",
                    b.invalid_reason.as_deref().unwrap_or("?")
                )
            };
            let _ = writeln!(
                md,
                "- {} → {}{mark}: {}",
                b.agent_id,
                if b.vote.is_empty() { "(none)" } else { &b.vote },
                b.reason.trim()
            );
        }
        if v.tallied {
            let _ = writeln!(md, "\n{}\n", vote_line(v));
        } else {
            md.push('\n');
        }
    }
    let _ = writeln!(md, "### Final Synthesis\n");
    match &state.final_solution {
        Some(s) => md.push_str(&solution_report(state, s)),
        None => {
            let _ = writeln!(md, "_No solution: the debate {}._", state.status.as_str());
            if let Some(f) = &state.error {
                let _ = writeln!(
                    md,
                    "\nFailed at {} (round {}): {}",
                    f.node, f.round, f.message
                );
            }
        }
    }
    let calls: usize = state
        .rounds
        .iter()
        .map(|r| {
            r.contributions
                .iter()
                .filter(|c| !c.metadata.carried_over)
                .count()
                + r.summaries.len()
                + usize::from(r.evaluation.is_some())
                + usize::from(r.verdict.is_some())
                + usize::from(r.similarity.is_some())
        })
        .sum::<usize>()
        + usize::from(state.adaptive.as_ref().and_then(|a| a.metadata()).is_some())
        + state.voting.as_ref().map_or(0, |v| v.votes.len())
        + usize::from(state.final_solution.is_some())
        + usize::from(state.judge_summary.is_some());
    let _ = writeln!(
        md,
        "\n## Totals\n\n- Rounds: {}\n- LLM calls: {}\n- Tokens: {}\n- Cost: {}",
        state.rounds.len(),
        calls,
        state.total_tokens(),
        parley_protocol::format_cost(state.spend.as_ref().and_then(|s| s.cost_usd)),
    );
    let per = spend_lines(state, "- ");
    if !per.is_empty() {
        let _ = writeln!(md, "\n### Cost per participant\n\n{per}");
    }
    md
}

/// A text of the report between its record markers, so `parley verify --report` can check
/// it byte for byte; trimmed and unmarked when it has no entry (it always has one).
fn marked(index: Option<u32>, text: &str) -> String {
    match index {
        Some(i) => parley_record::report::mark_entry(i, text),
        None => text.trim().to_string(),
    }
}

/// The report's final synthesis: the solution between its record markers, then the vote,
/// the adaptive path and the cost.
fn solution_report(state: &DebateState, s: &parley_protocol::Solution) -> String {
    let mut out = parley_record::report::mark_solution(s);
    out.push_str("\n\n");
    if let Some(v) = state.voting.as_ref().filter(|v| v.tallied) {
        let _ = writeln!(out, "{}", vote_line(v));
        if let Some(b) = &s.based_on {
            let _ = writeln!(out, "Written from the final refinement of {b}.");
        }
        out.push('\n');
    }
    if let Some(a) = &state.adaptive {
        let _ = writeln!(out, "Adaptive path: {} ({})\n", a.path.as_str(), a.reason);
    }
    if let Some(sp) = &state.spend {
        let _ = writeln!(
            out,
            "Cost: {} ({} tokens, {} LLM calls)",
            parley_protocol::format_cost(sp.cost_usd),
            sp.total_tokens,
            sp.calls
        );
    }
    out
}

/// A round's similarities as one paragraph: each agent's refinement against its previous
/// one, the mean across agents, and whether the debate stopped on them.
fn similarity_text(s: &parley_protocol::RoundSimilarity) -> String {
    let per_agent = if s.similarity.per_agent.is_empty() {
        "No earlier refinement to compare with (first round).".to_string()
    } else {
        let each: Vec<String> = s
            .similarity
            .per_agent
            .iter()
            .map(|(agent, v)| format!("{agent} {v:.3}"))
            .collect();
        format!(
            "Each agent against its previous refinement: {}.",
            each.join(", ")
        )
    };
    let across = s
        .similarity
        .across_agents
        .map(|v| format!(" Across agents: {v:.3}."))
        .unwrap_or_default();
    let decision = if s.converged {
        "converged: the debate stopped here"
    } else {
        "not converged"
    };
    format!(
        "{per_agent}{across} Threshold {:.3}: **{decision}**.",
        s.threshold
    )
}

/// A verdict as one paragraph: decision, confidence, reasoning and open issues.
fn verdict_text(v: &parley_protocol::Verdict) -> String {
    let decision = match v.verdict {
        parley_protocol::VerdictDecision::Done => "done",
        parley_protocol::VerdictDecision::Continue => "continue",
    };
    let mut out = format!(
        "Verdict: **{decision}**, confidence {:.0}/100{}. {}",
        v.confidence,
        if v.valid {
            ""
        } else {
            " (unreadable reply: counted as continue)"
        },
        v.reasoning.trim()
    );
    if !v.open_issues.is_empty() {
        out.push_str("\n\nOpen issues:\n");
        for i in &v.open_issues {
            out.push_str(&format!("\n- {i}"));
        }
    }
    out
}

/// A report that could not be written, with the path tried (`.md` appended).
#[derive(Debug, thiserror::Error)]
#[error("cannot write the report {}: {source}", path.display())]
pub struct ReportWriteError {
    pub path: std::path::PathBuf,
    pub source: std::io::Error,
}

/// Writes a report to `path` as dialectic does: `.md` appended when the name has no
/// extension, missing folders created. Returns where it went; the error names the path.
pub fn write_report(
    path: &std::path::Path,
    md: &str,
) -> Result<std::path::PathBuf, ReportWriteError> {
    let path = if path.extension().is_none() {
        let mut p = path.as_os_str().to_owned();
        p.push(".md");
        std::path::PathBuf::from(p)
    } else {
        path.to_path_buf()
    };
    let written = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, md)),
        None => std::fs::write(&path, md),
    };
    match written {
        Ok(()) => Ok(path),
        Err(source) => Err(ReportWriteError { path, source }),
    }
}

/// Per-round latency and tokens, and each agent's prompt source (`--verbose`).
pub fn verbose_summary(spec: &DebateSpec, state: &DebateState) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Prompt sources:");
    for s in state
        .prompt_sources
        .agents
        .iter()
        .chain(state.prompt_sources.judge.iter())
    {
        let path = s
            .path
            .as_deref()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {} [{}]: {}{path}", s.agent_id, s.role, s.source);
    }
    for rd in &state.rounds {
        let tokens: u64 = rd
            .contributions
            .iter()
            .map(|c| c.metadata.tokens_used)
            .sum();
        let latency: u64 = rd.contributions.iter().map(|c| c.metadata.latency_ms).sum();
        let max = rd
            .contributions
            .iter()
            .map(|c| c.metadata.latency_ms)
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            out,
            "Round {}: {} contributions, {} tokens, {} ms total call latency (slowest {} ms)",
            rd.round_number,
            rd.contributions.len(),
            tokens,
            latency,
            max
        );
    }
    let _ = writeln!(
        out,
        "Total tokens: {} across {} agents; cost {}",
        state.total_tokens(),
        spec.active_agents().count(),
        parley_protocol::format_cost(state.spend.as_ref().and_then(|s| s.cost_usd)),
    );
    out.push_str(&spend_lines(state, "  "));
    out
}

#[cfg(test)]
mod write_tests {
    use super::*;

    #[test]
    fn a_report_gets_md_and_its_folders_and_a_failure_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_report(&dir.path().join("out/report"), "# r\n").unwrap();
        assert_eq!(written, dir.path().join("out/report.md"));
        assert_eq!(std::fs::read_to_string(&written).unwrap(), "# r\n");
        // A folder where a file stands: the error names the report's path.
        let e = write_report(&written.join("inner.md"), "x").unwrap_err();
        assert_eq!(e.path, written.join("inner.md"));
        assert!(e.to_string().starts_with("cannot write the report "), "{e}");
    }
}
