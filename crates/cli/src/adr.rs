//! `parley adr` and `parley run --adr DIR`: a finished debate as an Architecture Decision
//! Record in the MADR 4.0 layout.
//!
//! The file has YAML front matter (`status`, `date`, `decision-makers`: the judge and any
//! human participant, `consulted`: each agent as `id: role (model)`), a title from the
//! problem, then the sections "Context and Problem Statement", "Decision Drivers",
//! "Considered Options", "Decision Outcome" (with "Consequences" and "Confirmation"), "Pros
//! and Cons of the Options" and "More Information", in that order. Each option is one
//! agent's final proposal (its last refinement, else its proposal), named by its gist; its
//! pros and cons come from the critiques it received in the last round it was critiqued
//! ("Strengths" → Good, "Weaknesses"/risks → Bad, anything else → Neutral).
//!
//! The name continues the folder's numbering, `NNNN-kebab-title.md` (the highest 4-digit
//! prefix + 1, from 0001), and a file is only ever created, never overwritten: when the
//! number is taken meanwhile, the next one is used.
//!
//! Model text is untrusted: control and bidirectional-override characters are removed,
//! front-matter values are double-quoted YAML scalars, text on one line (titles, list
//! items) has its line breaks folded and `<`/`>` escaped, and in text blocks headings are
//! pushed below the ADR's own levels, an unclosed code fence is closed, and a line that
//! would turn the text above it into a heading gets a blank line before it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use parley_protocol::{ContributionType, DebateSpec, DebateState};

/// The ADR statuses `--status` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AdrStatus {
    Proposed,
    Accepted,
}

impl AdrStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proposed => "proposed",
            Self::Accepted => "accepted",
        }
    }
}

/// The debate's decision record, as the ADR links it.
pub struct RecordLink {
    /// The record file, relative to the ADR's folder (or absolute).
    pub href: String,
    pub digest: String,
    /// `signed with key <id>` or `unsigned`.
    pub signature: String,
}

/// What an ADR is written from.
pub struct AdrInput<'a> {
    pub state: &'a DebateState,
    pub spec: Option<&'a DebateSpec>,
    pub status: AdrStatus,
    pub date: chrono::NaiveDate,
    pub record: Option<RecordLink>,
}

/// The longest option name and title, in characters.
const NAME_CHARS: usize = 72;
/// The longest pro/con item, in characters.
const ITEM_CHARS: usize = 240;
/// Items taken from one section of one critique.
const ITEMS_PER_SECTION: usize = 3;

/// Text without control characters (but line breaks and tabs) and without bidirectional
/// overrides.
fn clean(s: &str) -> String {
    s.chars()
        .filter(|c| {
            !matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
        })
        .filter_map(|c| match c {
            '\n' => Some('\n'),
            '\t' => Some(' '),
            '\u{2028}' | '\u{2029}' => Some('\n'),
            c if c.is_control() => None,
            c => Some(c),
        })
        .collect()
}

/// One line of text: cleaned, whitespace folded, `<`/`>` escaped, cut to `max` chars.
fn inline(s: &str, max: usize) -> String {
    let folded = clean(s).split_whitespace().collect::<Vec<_>>().join(" ");
    let cut = cut(&folded, max);
    cut.replace('<', "&lt;").replace('>', "&gt;")
}

/// `s` cut to `max` characters at a word boundary, with `…` when cut.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let head: String = s.chars().take(max.saturating_sub(1)).collect();
    let at = head
        .rfind(' ')
        .filter(|i| *i > max / 2)
        .unwrap_or(head.len());
    format!("{}…", head[..at].trim_end())
}

/// A block of Markdown from a model, safe to place under an ADR section.
fn block(s: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<&str> = None;
    let mut previous_blank = true;
    let text = clean(s);
    for line in text.trim().lines() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if indent <= 3 && (t.starts_with("```") || t.starts_with("~~~")) {
            let mark = &t[..3];
            match fence {
                None => fence = Some(if mark == "```" { "```" } else { "~~~" }),
                Some(open) if open == mark => fence = None,
                Some(_) => {}
            }
            out.push_str(line);
        } else if fence.is_some() || indent > 3 {
            out.push_str(line);
        } else if t.starts_with('#') {
            // A heading: pushed below the ADR's own levels (##, ###).
            let hashes = t.chars().take_while(|c| *c == '#').count();
            let rest = t[hashes..].trim_start();
            if hashes <= 6 && (t.len() == hashes || t[hashes..].starts_with(' ')) {
                let _ = write!(out, "#### {rest}");
            } else {
                out.push_str(line);
            }
        } else if !t.is_empty()
            && (t.trim_end().chars().all(|c| c == '=') || t.trim_end().chars().all(|c| c == '-'))
        {
            // A setext underline would make the line above a heading.
            if !previous_blank {
                out.push('\n');
            }
            out.push_str(line);
        } else {
            out.push_str(line);
        }
        previous_blank = line.trim().is_empty();
        out.push('\n');
    }
    if let Some(open) = fence {
        out.push_str(open);
        out.push('\n');
    }
    out.trim_end().to_string()
}

/// A YAML double-quoted scalar (JSON's string syntax, which YAML reads the same).
fn yaml_str(s: &str) -> String {
    serde_json::to_string(&inline(s, 400)).unwrap_or_else(|_| "\"\"".into())
}

fn yaml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| yaml_str(s)).collect();
    format!("[{}]", quoted.join(", "))
}

/// The first sentence of the first line with words that is not a heading (headings of
/// model replies are mostly the prompt's own, "Revised architecture"), else of the first
/// heading; without Markdown marks.
fn gist(text: &str) -> String {
    let text = clean(text);
    let strip = |l: &str| {
        l.trim()
            .trim_start_matches(['#', '-', '*', '>', '+'])
            .trim()
            .trim_matches(['*', '_', '`'])
            .trim()
            .to_string()
    };
    let worded = |l: &String| l.chars().any(char::is_alphanumeric);
    let line = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(strip)
        .find(worded)
        .or_else(|| text.lines().map(strip).find(worded))
        .unwrap_or_default();
    let sentence = match line.find(". ") {
        Some(i) => &line[..=i],
        None => line.as_str(),
    };
    let g = inline(sentence.trim_end_matches([':', '.']), NAME_CHARS);
    if g.is_empty() {
        "(empty proposal)".into()
    } else {
        g
    }
}

/// The title: the problem's first sentence.
pub fn title(state: &DebateState) -> String {
    let g = gist(state.problem.as_str());
    if g == "(empty proposal)" {
        format!("Decision of debate {}", state.id)
    } else {
        g
    }
}

/// `kebab-case` of `title`: ASCII letters and digits, at most 50 characters.
pub fn slug(title: &str) -> String {
    let mut s = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
        if s.len() >= 50 {
            break;
        }
    }
    let s = s.trim_matches('-').to_string();
    if s.is_empty() {
        "decision".into()
    } else {
        s
    }
}

/// One considered option: an agent's final proposal.
struct Option_<'a> {
    agent: &'a str,
    role: &'a str,
    model: &'a str,
    text: &'a str,
    name: String,
}

fn options(state: &DebateState) -> Vec<Option_<'_>> {
    let mut out: Vec<Option_<'_>> = Vec::new();
    for c in state.rounds.iter().flat_map(|r| &r.contributions) {
        if c.kind == ContributionType::Critique {
            continue;
        }
        let name = format!("{} ({})", gist(&c.content), inline(&c.agent_role, 40));
        match out.iter_mut().find(|o| o.agent == c.agent_id) {
            Some(o) => {
                o.text = &c.content;
                o.model = &c.metadata.model;
                o.name = name;
            }
            None => out.push(Option_ {
                agent: &c.agent_id,
                role: &c.agent_role,
                model: &c.metadata.model,
                text: &c.content,
                name,
            }),
        }
    }
    // Two options with one name: the agent id tells them apart.
    let names: Vec<String> = out.iter().map(|o| o.name.clone()).collect();
    for o in &mut out {
        if names.iter().filter(|n| **n == o.name).count() > 1 {
            o.name = format!("{} ({})", o.name, inline(o.agent, 40));
        }
    }
    out
}

/// Which way a critique section leans.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lean {
    Good,
    Bad,
    Neutral,
}

impl Lean {
    fn of_heading(h: &str) -> Self {
        let h = h.to_lowercase();
        if ["strength", "pros", "good", "advantage", "agree"]
            .iter()
            .any(|k| h.contains(k))
        {
            Self::Good
        } else if [
            "weakness", "risk", "concern", "cons", "issue", "problem", "gap", "missing", "bad",
        ]
        .iter()
        .any(|k| h.contains(k))
        {
            Self::Bad
        } else {
            Self::Neutral
        }
    }
    fn word(self) -> &'static str {
        match self {
            Self::Good => "Good",
            Self::Bad => "Bad",
            Self::Neutral => "Neutral",
        }
    }
}

/// The pros and cons in a critique: its list items under each heading.
fn pros_and_cons(critique: &str) -> Vec<(Lean, String)> {
    let mut out = Vec::new();
    let mut lean = None;
    let mut taken = 0;
    let text = clean(critique);
    for line in text.lines() {
        let t = line.trim();
        if let Some(h) = t.strip_prefix('#') {
            lean = Some(Lean::of_heading(h.trim_start_matches('#')));
            taken = 0;
            continue;
        }
        if let Some(l) = lean {
            let item = t
                .strip_prefix("- ")
                .or_else(|| t.strip_prefix("* "))
                .or_else(|| {
                    t.split_once(". ")
                        .filter(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
                        .map(|(_, r)| r)
                });
            if let Some(item) = item.filter(|i| !i.trim().is_empty()) {
                if taken < ITEMS_PER_SECTION {
                    out.push((l, inline(item, ITEM_CHARS)));
                    taken += 1;
                }
            }
        }
    }
    if out.is_empty() {
        let first = gist(critique);
        if first != "(empty proposal)" {
            out.push((Lean::Neutral, first));
        }
    }
    out
}

/// `Good, because …` from a tradeoff: "A at the cost of B" → Good A, Bad B; else Neutral.
fn tradeoff(t: &str) -> Vec<(Lean, String)> {
    let t = inline(t, ITEM_CHARS);
    for sep in [
        " at the cost of ",
        " at the expense of ",
        " in exchange for ",
        " but ",
        " vs. ",
        " vs ",
        " versus ",
    ] {
        if let Some((good, bad)) = t.split_once(sep) {
            let good = good.trim().trim_end_matches(',');
            if !good.is_empty() && !bad.trim().is_empty() {
                return vec![
                    (Lean::Good, good.to_string()),
                    (Lean::Bad, bad.trim().to_string()),
                ];
            }
        }
    }
    vec![(Lean::Neutral, t)]
}

/// Lines of the problem that state a requirement (must, shall, required, ...).
fn requirements(problem: &str) -> Vec<String> {
    const KEYWORDS: &[&str] = &[
        "must",
        "shall",
        "required",
        "needs to",
        "critical",
        "essential",
        "should",
    ];
    clean(problem)
        .lines()
        .map(|l| l.trim().trim_start_matches(['-', '*', '•', ' ']).trim())
        .filter(|l| l.chars().count() >= 8)
        .filter(|l| {
            let lower = l.to_lowercase();
            KEYWORDS.iter().any(|k| lower.contains(k))
        })
        .map(|l| inline(l, ITEM_CHARS))
        .collect()
}

/// Why no ADR can be written.
#[derive(Debug)]
pub struct NoSolution(pub String);

/// The ADR's Markdown.
pub fn render(input: &AdrInput<'_>) -> Result<String, NoSolution> {
    let state = input.state;
    let Some(solution) = &state.final_solution else {
        let why = match &state.error {
            Some(f) => format!(" (failed at {}: {})", f.node, f.message),
            None => String::new(),
        };
        return Err(NoSolution(format!(
            "debate {} ended {} without a solution{why}: there is no decision to record",
            state.id,
            state.status.as_str()
        )));
    };
    let opts = options(state);
    let judge_model = state
        .synthesis_metadata
        .as_ref()
        .map(|m| m.model.clone())
        .filter(|m| !m.is_empty())
        .or_else(|| input.spec.map(|s| s.judge.model.clone()))
        .unwrap_or_else(|| "unknown model".into());
    let mut makers = vec![format!(
        "{} (judge, {judge_model})",
        solution.synthesized_by
    )];
    let mut consulted = Vec::new();
    for o in &opts {
        let human = state
            .rounds
            .iter()
            .flat_map(|r| &r.contributions)
            .any(|c| c.agent_id == o.agent && c.metadata.provider.as_deref() == Some("human"));
        if human {
            makers.push(format!("{} ({}, human)", o.agent, o.role));
        } else {
            consulted.push(format!("{}: {} ({})", o.agent, o.role, o.model));
        }
    }
    let mut md = String::new();
    let _ = writeln!(md, "---");
    let _ = writeln!(md, "status: {}", yaml_str(input.status.as_str()));
    let _ = writeln!(md, "date: {}", input.date.format("%Y-%m-%d"));
    let _ = writeln!(md, "decision-makers: {}", yaml_list(&makers));
    let _ = writeln!(md, "consulted: {}", yaml_list(&consulted));
    let _ = writeln!(md, "---\n");
    let _ = writeln!(md, "# {}\n", title(state));

    let _ = writeln!(md, "## Context and Problem Statement\n");
    let _ = writeln!(md, "{}\n", block(state.problem.as_str()));
    if let Some(c) = &state.context {
        let _ = writeln!(
            md,
            "Context given to the debate:\n\n{}\n",
            block(c.as_str())
        );
    }

    let _ = writeln!(md, "## Decision Drivers\n");
    let mut drivers = requirements(state.problem.as_str());
    for g in parley_protocol::answered_clarifications(&state.clarifications) {
        for i in &g.items {
            drivers.push(format!(
                "{} (asked by {}): {}",
                inline(&i.question, ITEM_CHARS),
                inline(&g.role, 40),
                inline(
                    i.answer.as_deref().unwrap_or(parley_protocol::NO_ANSWER),
                    ITEM_CHARS
                )
            ));
        }
    }
    if drivers.is_empty() {
        drivers.push(
            "The problem statement above, as a whole: it names no separate requirement and the \
             debate asked no clarification question"
                .into(),
        );
    }
    for d in &drivers {
        let _ = writeln!(md, "* {d}");
    }
    md.push('\n');

    let _ = writeln!(md, "## Considered Options\n");
    for o in &opts {
        let _ = writeln!(md, "* {}", o.name);
    }
    md.push('\n');

    let _ = writeln!(md, "## Decision Outcome\n");
    // The refinement the solution was written from: as the judge names it, else the vote's
    // winner.
    let chosen = solution
        .based_on
        .as_deref()
        .or_else(|| state.voting.as_ref().and_then(|v| v.winner.as_deref()))
        .and_then(|b| opts.iter().find(|o| o.agent == b));
    let votes = state.voting.as_ref().filter(|v| v.tallied).map(|v| {
        v.counts
            .iter()
            .map(|(a, c)| format!("{} {c}", inline(a, 40)))
            .collect::<Vec<_>>()
            .join(", ")
    });
    match (chosen, votes) {
        (Some(o), Some(v)) => {
            let _ = writeln!(
                md,
                "Chosen option: \"{}\", because it won the agents' vote ({v}); the judge ({}) wrote \
                 the solution below from it, with confidence {:.0}/100.\n",
                o.name,
                inline(&solution.synthesized_by, 40),
                solution.confidence
            );
        }
        (Some(o), None) => {
            let _ = writeln!(
                md,
                "Chosen option: \"{}\", because the judge ({}) wrote the solution below from it, \
                 with confidence {:.0}/100.\n",
                o.name,
                inline(&solution.synthesized_by, 40),
                solution.confidence
            );
        }
        _ => {
            let _ = writeln!(
                md,
                "Chosen option: \"Synthesis of the considered options\", because the judge ({}, {}) \
                 combined them into the solution below, with confidence {:.0}/100.\n",
                inline(&solution.synthesized_by, 40),
                inline(&judge_model, 60),
                solution.confidence
            );
        }
    }
    let _ = writeln!(md, "{}\n", block(&solution.description));
    let _ = writeln!(md, "### Consequences\n");
    let consequences: Vec<(Lean, String)> = solution
        .tradeoffs
        .iter()
        .flat_map(|t| tradeoff(t))
        .collect();
    if consequences.is_empty() {
        let _ = writeln!(md, "* Neutral, because the judge named no tradeoff");
    }
    for (lean, text) in &consequences {
        let _ = writeln!(md, "* {}, because {text}", lean.word());
    }
    md.push('\n');
    let _ = writeln!(md, "### Confirmation\n");
    if solution.recommendations.is_empty() && solution.unfulfilled_major_requirements.is_empty() {
        let _ = writeln!(
            md,
            "The judge gave no recommendation to check: confirm the implementation in a design \
             review against the Decision Drivers above.\n"
        );
    } else {
        let _ = writeln!(
            md,
            "Check the implementation against the judge's recommendations:\n"
        );
        for r in &solution.recommendations {
            let _ = writeln!(md, "* {}", inline(r, ITEM_CHARS));
        }
        for r in &solution.unfulfilled_major_requirements {
            let _ = writeln!(
                md,
                "* Not met yet, to be confirmed later: {}",
                inline(r, ITEM_CHARS)
            );
        }
        md.push('\n');
    }

    let _ = writeln!(md, "## Pros and Cons of the Options\n");
    for o in &opts {
        let _ = writeln!(md, "### {}\n", o.name);
        let summary = clean(o.text)
            .split("\n\n")
            .map(str::trim)
            .find(|p| !p.is_empty() && !p.starts_with('#'))
            .map(|p| inline(p, 400))
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "Final proposal of {} ({}, {}){}\n",
            inline(o.agent, 40),
            inline(o.role, 40),
            inline(o.model, 60),
            if summary.is_empty() {
                ".".to_string()
            } else {
                format!(": {summary}")
            }
        );
        // The critiques of the last round this option was critiqued in.
        let critiques: Vec<&parley_protocol::Contribution> = state
            .rounds
            .iter()
            .rev()
            .map(|r| {
                r.contributions
                    .iter()
                    .filter(|c| {
                        c.kind == ContributionType::Critique
                            && c.target_agent_id.as_deref() == Some(o.agent)
                    })
                    .collect::<Vec<_>>()
            })
            .find(|cs| !cs.is_empty())
            .unwrap_or_default();
        let mut items: Vec<(Lean, String)> = critiques
            .iter()
            .flat_map(|c| {
                let by = inline(&c.agent_role, 40);
                pros_and_cons(&c.content)
                    .into_iter()
                    .map(move |(l, t)| (l, format!("{t} ({by})")))
            })
            .collect();
        items.sort_by_key(|(l, _)| match l {
            Lean::Good => 0,
            Lean::Neutral => 1,
            Lean::Bad => 2,
        });
        if items.is_empty() {
            let _ = writeln!(
                md,
                "* Neutral, because no other agent critiqued this option"
            );
        }
        for (lean, text) in &items {
            let _ = writeln!(md, "* {}, because {text}", lean.word());
        }
        md.push('\n');
    }

    let _ = writeln!(md, "## More Information\n");
    let list = |items: &[String]| -> String {
        if items.is_empty() {
            "none".into()
        } else {
            items
                .iter()
                .map(|i| inline(i, ITEM_CHARS))
                .collect::<Vec<_>>()
                .join("; ")
        }
    };
    let _ = writeln!(
        md,
        "* Unresolved disagreements: {}",
        list(&solution.unresolved_disagreements)
    );
    let _ = writeln!(md, "* Open questions: {}", list(&solution.open_questions));
    let _ = writeln!(
        md,
        "* Debate: `{}`, {} round(s), {}",
        state.id,
        state.rounds.len(),
        state.status.as_str()
    );
    let models: Vec<String> = opts
        .iter()
        .map(|o| format!("{} {}", inline(o.agent, 40), inline(o.model, 60)))
        .chain(std::iter::once(format!(
            "judge {}",
            inline(&judge_model, 60)
        )))
        .collect();
    let _ = writeln!(md, "* Models: {}", models.join(", "));
    let totals = parley_record::build::totals(state);
    let _ = writeln!(
        md,
        "* Spend: {} LLM calls, {} tokens ({} in, {} out), cost {}",
        totals.calls,
        totals.tokens,
        totals.tokens_in,
        totals.tokens_out,
        parley_protocol::format_cost(totals.cost_usd)
    );
    match &input.record {
        Some(r) => {
            let _ = writeln!(
                md,
                "* Decision record: [{}]({}), digest `{}`, {}; check it with `parley verify`",
                inline(&r.href, 200),
                r.href
                    .replace(' ', "%20")
                    .replace('(', "%28")
                    .replace(')', "%29"),
                r.digest,
                r.signature
            );
        }
        None => {
            let _ = writeln!(
                md,
                "* Decision record: none written; `parley record {}` writes one",
                state.id
            );
        }
    }
    Ok(md)
}

/// The highest `NNNN-` number in `dir` (0 when there is none).
pub fn highest_number(dir: &Path) -> std::io::Result<u32> {
    let mut max = 0;
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for e in entries {
        let name = e?.file_name();
        let name = name.to_string_lossy();
        let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
        if digits.len() >= 4 && name[digits.len()..].starts_with('-') && name.ends_with(".md") {
            if let Ok(n) = digits.parse::<u32>() {
                max = max.max(n);
            }
        }
    }
    Ok(max)
}

/// Why the next ADR was not written.
#[derive(Debug, thiserror::Error)]
pub enum AdrWriteError {
    #[error("cannot create the ADR folder {}: {source}", dir.display())]
    CreateFolder {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the ADR folder {}: {source}", dir.display())]
    ReadFolder {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A thousand numbers after the highest were all taken meanwhile.
    #[error("no free ADR number in {}", dir.display())]
    NoFreeNumber { dir: PathBuf },
}

/// Writes `markdown` as the next ADR in `dir` (created when missing): never over an
/// existing file; a number taken meanwhile moves it to the next.
pub fn write_next(dir: &Path, title: &str, markdown: &str) -> Result<PathBuf, AdrWriteError> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir).map_err(|source| AdrWriteError::CreateFolder {
        dir: dir.to_path_buf(),
        source,
    })?;
    let slug = slug(title);
    let mut n = highest_number(dir).map_err(|source| AdrWriteError::ReadFolder {
        dir: dir.to_path_buf(),
        source,
    })? + 1;
    for _ in 0..1000 {
        let path = dir.join(format!("{n:04}-{slug}.md"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut f) => {
                return match f.write_all(markdown.as_bytes()).and_then(|()| f.sync_all()) {
                    Ok(()) => Ok(path),
                    Err(source) => Err(AdrWriteError::Write { path, source }),
                };
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(source) => return Err(AdrWriteError::Create { path, source }),
        }
    }
    Err(AdrWriteError::NoFreeNumber {
        dir: dir.to_path_buf(),
    })
}

/// `target` relative to the folder `from` (both made absolute first), with `/`.
pub fn relative(from: &Path, target: &Path) -> String {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (from, target) = (abs(from), abs(target));
    let a: Vec<_> = from.components().collect();
    let b: Vec<_> = target.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = vec!["..".into(); a.len() - common];
    parts.extend(
        b[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

#[cfg(test)]
#[path = "adr_tests.rs"]
mod tests;
