//! Checking a Markdown report against a record, with no state at hand.
//!
//! The report (`parley report`, `run --report`, the page's and the API's report) marks each
//! text a record digests verbatim with HTML comments, which Markdown renderers hide:
//!
//! ```text
//! <!-- parley:problem bytes=52 -->
//! <the problem, byte for byte>
//! <!-- /parley:problem -->
//!
//! <!-- parley:entry 7 bytes=1804 -->
//! <the contribution's or summary's text, byte for byte>
//! <!-- /parley:entry -->
//! _412 tokens · 950 ms · gpt-4o-mini_
//!
//! <!-- parley:solution <base64 of the solution's canonical JSON> -->
//! <the solution as [`solution_block`] renders it>
//! <!-- /parley:solution -->
//! ```
//!
//! `7` is the entry's position in the record's chain, `bytes` the text's length in bytes,
//! so a text that itself holds a marker is still read whole; a `\n` separates the text from
//! the closing marker. [`check_report`] hashes every marked text
//! against its entry, compares the line under it (tokens, model) with the entry, checks
//! that every text entry of the record is in the report once, that the solution's JSON has
//! the record's solution digest and renders to the visible solution, and that the report's
//! debate id, totals and record digest are the record's. The judgements digested as JSON
//! (evaluations, verdicts, votes) and the judge's summary are not texts of the report: the
//! check counts them as not covered (`--state` covers them).

use std::collections::HashMap;

use base64::Engine as _;
use parley_protocol::Solution;

use crate::build;
use crate::canonical::sha256_hex;
use crate::schema::{EntryKind, Record};
use crate::verify::Mismatch;

const PROBLEM_OPEN: &str = "<!-- parley:problem ";
const PROBLEM_CLOSE: &str = "<!-- /parley:problem -->";
const ENTRY_OPEN: &str = "<!-- parley:entry ";
const ENTRY_CLOSE: &str = "<!-- /parley:entry -->";
const SOLUTION_OPEN: &str = "<!-- parley:solution ";
const SOLUTION_CLOSE: &str = "<!-- /parley:solution -->";
const COMMENT_END: &str = " -->";

/// The largest report [`check_report`] reads.
pub const REPORT_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// `text` between the problem's markers.
pub fn mark_problem(text: &str) -> String {
    format!(
        "{PROBLEM_OPEN}bytes={}{COMMENT_END}\n{text}\n{PROBLEM_CLOSE}",
        text.len()
    )
}

/// `text` between the markers of the record's entry number `index` (from 1).
pub fn mark_entry(index: u32, text: &str) -> String {
    format!(
        "{ENTRY_OPEN}{index} bytes={}{COMMENT_END}\n{text}\n{ENTRY_CLOSE}",
        text.len()
    )
}

/// The solution as [`solution_block`] renders it, between markers that carry its
/// canonical JSON.
pub fn mark_solution(s: &Solution) -> String {
    let json = crate::canonical::of(s).unwrap_or_default();
    let b64 = base64::engine::general_purpose::STANDARD.encode(json);
    format!(
        "{SOLUTION_OPEN}{b64}{COMMENT_END}\n{}\n{SOLUTION_CLOSE}",
        solution_block(s)
    )
}

/// The solution's own fields as text: the description, the non-empty lists (tradeoffs,
/// recommendations, unfulfilled requirements, open questions, unresolved disagreements),
/// one `- ` line an item, each list followed by a blank line.
pub fn solution_lists(s: &Solution) -> String {
    let mut out = format!("{}\n\n", s.description.trim());
    for (title, items) in [
        ("Tradeoffs", &s.tradeoffs),
        ("Recommendations", &s.recommendations),
        (
            "Unfulfilled major requirements",
            &s.unfulfilled_major_requirements,
        ),
        ("Open questions", &s.open_questions),
        ("Unresolved disagreements", &s.unresolved_disagreements),
    ] {
        if items.is_empty() {
            continue;
        }
        out.push_str(title);
        out.push_str(":\n");
        for i in items {
            out.push_str("- ");
            out.push_str(i);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// The solution as a report shows it: [`solution_lists`] and the confidence line.
pub fn solution_block(s: &Solution) -> String {
    format!(
        "{}Confidence: {:.0}/100 (synthesized by {})",
        solution_lists(s),
        s.confidence,
        s.synthesized_by
    )
}

/// The report's section on the debate's decision record: its digest and signature.
pub fn section(r: &Record) -> String {
    let signature = match &r.signature {
        Some(s) => format!("signed (Ed25519, key `{}`)", s.key_id),
        None => "unsigned".into(),
    };
    format!(
        "\n## Decision Record\n\n- Digest: `{}`\n- Signature: {signature}\n- Contributions chained: {} (head `{}`)\n- Check it: `parley verify <record> --state <state> [--public-key <key>]`, or against this report: `parley verify <record> --report <this file>`\n",
        r.digest(),
        r.entries.len(),
        r.head
    )
}

/// What a report check covered, when everything matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportCheck {
    /// Texts checked against their digests (contributions and summaries).
    pub texts: usize,
    /// Whether the solution was checked.
    pub solution: bool,
    /// Entries a report does not show as text (evaluations, verdicts, votes, the judge's
    /// summary): not covered by this check.
    pub not_covered: usize,
}

fn report_err(m: String) -> Mismatch {
    Mismatch::Report(m)
}

/// Line number (from 1) of byte offset `at` in `md`.
fn line_of(md: &str, at: usize) -> usize {
    md[..at].bytes().filter(|b| *b == b'\n').count() + 1
}

/// The opening marker at `at`: its other words (an entry's number), the `bytes=N` length,
/// and where the text starts (the line after the marker).
fn marker_head<'a>(md: &'a str, at: usize, open: &str) -> Option<(&'a str, usize, usize)> {
    let head_end = at + md[at..].find(COMMENT_END)?;
    let head = md.get(at + open.len()..head_end)?;
    let (words, len) = match head.rsplit_once(' ') {
        Some((w, l)) => (w, l),
        None => ("", head),
    };
    let len: usize = len.strip_prefix("bytes=")?.parse().ok()?;
    let body_start = head_end + COMMENT_END.len() + 1;
    (md.as_bytes().get(body_start - 1) == Some(&b'\n')).then_some((words, len, body_start))
}

/// The `len` bytes from `body_start`, which `\n` and `close` must follow; with the offset
/// just past `close`.
fn marker_body<'a>(
    md: &'a str,
    body_start: usize,
    len: usize,
    close: &str,
) -> Option<(&'a str, usize)> {
    let text = md.get(body_start..body_start.checked_add(len)?)?;
    let rest = md.get(body_start + len..)?.strip_prefix('\n')?;
    rest.strip_prefix(close)?;
    Some((text, md.len() - rest.len() + close.len()))
}

/// Tokens and model from the metadata line under a text (`_412 tokens · 950 ms · m_`,
/// a summary's `_a → b chars · 412 tokens · 950 ms · m_`).
fn meta_line(rest: &str) -> Option<(u64, String)> {
    let line = rest.trim_start_matches('\n').lines().next()?;
    let inner = line.strip_prefix('_')?.strip_suffix('_')?;
    let parts: Vec<&str> = inner.split(" · ").collect();
    let t = parts.iter().position(|p| p.ends_with(" tokens"))?;
    let tokens = parts[t].trim_end_matches(" tokens").parse().ok()?;
    let model = parts.get(t + 2)?.to_string();
    Some((tokens, model))
}

/// Checks the Markdown report `md` against `record` (whose chain and signature
/// [`crate::verify`] has checked). Stops at the first difference and names it.
pub fn check_report(record: &Record, md: &str) -> Result<ReportCheck, Mismatch> {
    let first = md.lines().next().unwrap_or_default();
    match first.strip_prefix("# Debate ") {
        Some(id) if id.trim() == record.debate_id => {}
        Some(id) => {
            return Err(report_err(format!(
                "the report is of debate {}, the record of {}",
                id.trim(),
                record.debate_id
            )))
        }
        None => {
            return Err(report_err(
                "not a Parley report: it does not start with \"# Debate <id>\"".into(),
            ))
        }
    }
    if !md.contains(ENTRY_OPEN) && !md.contains(PROBLEM_OPEN) {
        return Err(report_err(
            "the report carries no text markers (<!-- parley:entry N -->): write it again \
             with `parley report`, or check the state with --state"
                .into(),
        ));
    }
    // The problem.
    let at = md
        .find(PROBLEM_OPEN)
        .ok_or_else(|| report_err("the report lacks the problem's text marker".into()))?;
    let problem = marker_head(md, at, PROBLEM_OPEN)
        .and_then(|(_, len, start)| marker_body(md, start, len, PROBLEM_CLOSE))
        .map(|(text, _)| text)
        .ok_or_else(|| {
            report_err(format!(
                "the problem text (line {}) was changed: it does not end where its marker says",
                line_of(md, at) + 1
            ))
        })?;
    if sha256_hex(problem.as_bytes()) != record.problem_digest {
        return Err(report_err(format!(
            "the problem text (line {}) does not match its digest",
            line_of(md, at) + 1
        )));
    }
    // Every marked text.
    let mut seen: HashMap<u32, usize> = HashMap::new();
    let mut from = 0;
    while let Some(i) = md[from..].find(ENTRY_OPEN) {
        let at = from + i;
        let line = line_of(md, at);
        let (words, len, start) = marker_head(md, at, ENTRY_OPEN)
            .ok_or_else(|| report_err(format!("line {line}: a text marker that was changed")))?;
        let n: u32 = words
            .trim()
            .parse()
            .map_err(|_| report_err(format!("line {line}: a text marker without a number")))?;
        let entry = record
            .entries
            .get((n as usize).wrapping_sub(1))
            .filter(|_| n >= 1)
            .ok_or_else(|| {
                report_err(format!(
                    "line {line}: a text marked as entry {n}, which the record does not have"
                ))
            })?;
        if !is_text_kind(entry.kind) {
            return Err(report_err(format!(
                "line {line}: entry {n} ({}) is not a text",
                entry.describe()
            )));
        }
        let (text, end) = marker_body(md, start, len, ENTRY_CLOSE).ok_or_else(|| {
            report_err(format!(
                "the text of {} (line {}) was changed: it does not end where its marker says",
                entry.describe(),
                line + 1
            ))
        })?;
        if let Some(other) = seen.insert(n, line) {
            return Err(report_err(format!(
                "line {line}: the text of {} appears twice (also line {other})",
                entry.describe()
            )));
        }
        if sha256_hex(text.as_bytes()) != entry.text_digest {
            return Err(report_err(format!(
                "the text of {} (line {}) does not match its digest",
                entry.describe(),
                line + 1
            )));
        }
        match meta_line(&md[end..]) {
            Some((tokens, model)) => {
                if tokens != entry.tokens {
                    return Err(report_err(format!(
                        "tokens of {} differ: record {}, report {tokens}",
                        entry.describe(),
                        entry.tokens
                    )));
                }
                if model != entry.model {
                    return Err(report_err(format!(
                        "model of {} differs: record {:?}, report {model:?}",
                        entry.describe(),
                        entry.model
                    )));
                }
            }
            None => {
                return Err(report_err(format!(
                    "the line under the text of {} (tokens, model) is missing or changed",
                    entry.describe()
                )))
            }
        }
        from = end;
    }
    let mut not_covered = 0;
    for e in &record.entries {
        if is_text_kind(e.kind) {
            if !seen.contains_key(&e.index) {
                return Err(report_err(format!(
                    "the report lacks the text of {}",
                    e.describe()
                )));
            }
        } else if e.kind != EntryKind::Synthesis {
            not_covered += 1;
        }
    }
    // The solution.
    let solution = match (&record.solution_digest, md.find(SOLUTION_OPEN)) {
        (None, None) => false,
        (None, Some(at)) => {
            return Err(report_err(format!(
                "line {}: the report shows a solution, the record has none",
                line_of(md, at)
            )))
        }
        (Some(_), None) => return Err(report_err("the report lacks the solution".into())),
        (Some(want), Some(at)) => {
            let line = line_of(md, at);
            let head_end = md[at..]
                .find(COMMENT_END)
                .map(|j| at + j)
                .ok_or_else(|| report_err(format!("line {line}: an unclosed solution marker")))?;
            let s = base64::engine::general_purpose::STANDARD
                .decode(md[at + SOLUTION_OPEN.len()..head_end].trim())
                .ok()
                .and_then(|b| serde_json::from_slice::<Solution>(&b).ok())
                .ok_or_else(|| {
                    report_err(format!(
                        "line {line}: the solution marker holds no solution"
                    ))
                })?;
            if build::solution_digest(&s) != *want {
                return Err(report_err(
                    "the solution does not match its digest (the report's solution marker)".into(),
                ));
            }
            let want_text = solution_block(&s);
            let shown = md
                .get(head_end + COMMENT_END.len()..)
                .and_then(|r| r.strip_prefix('\n'))
                .and_then(|r| r.get(..want_text.len()));
            let closed = md
                .get(head_end + COMMENT_END.len() + 1 + want_text.len()..)
                .is_some_and(|r| r.starts_with(&format!("\n{SOLUTION_CLOSE}")));
            if shown != Some(want_text.as_str()) || !closed {
                return Err(report_err(format!(
                    "the solution's text (from line {}) is not the solution the record holds",
                    line + 1
                )));
            }
            true
        }
    };
    // Totals and the record's digest, where the report states them.
    for (label, want) in [
        ("- LLM calls: ", record.totals.calls),
        ("- Tokens: ", record.totals.tokens),
    ] {
        if let Some(v) = md.lines().rev().find_map(|l| l.strip_prefix(label)) {
            if v.trim() != want.to_string() {
                return Err(report_err(format!(
                    "{} differ: record {want}, report {}",
                    if label.contains("calls") {
                        "call totals"
                    } else {
                        "token totals"
                    },
                    v.trim()
                )));
            }
        }
    }
    if let Some(v) = md.lines().find_map(|l| l.strip_prefix("- Digest: `")) {
        let shown = v.trim_end_matches('`');
        if shown != record.digest() {
            return Err(report_err(format!(
                "the report names record digest {shown}, this record's is {}",
                record.digest()
            )));
        }
    }
    Ok(ReportCheck {
        texts: seen.len(),
        solution,
        not_covered,
    })
}

/// Entries whose digest is over a text a report shows byte for byte.
fn is_text_kind(k: EntryKind) -> bool {
    matches!(
        k,
        EntryKind::Proposal | EntryKind::Critique | EntryKind::Refinement | EntryKind::Summary
    )
}

/// Where each text of a debate sits in its record's chain: what the report writes in
/// [`mark_entry`].
pub struct EntryIndexes(HashMap<(u32, EntryKind, String, Option<String>), u32>);

impl EntryIndexes {
    /// The indexes of `state`'s record (the same entries [`build::entries`] chains).
    pub fn of(state: &parley_protocol::DebateState) -> Self {
        Self(
            build::entries(state)
                .into_iter()
                .filter(|e| is_text_kind(e.kind))
                .map(|e| ((e.round, e.kind, e.author, e.target), e.index))
                .collect(),
        )
    }

    /// The entry of contribution `c` of round `round`.
    pub fn contribution(&self, round: u32, c: &parley_protocol::Contribution) -> Option<u32> {
        let key = (
            round,
            build::kind_of(c.kind),
            c.agent_id.clone(),
            c.target_agent_id.clone(),
        );
        self.0.get(&key).copied()
    }

    /// The entry of `agent`'s summary before round `round`.
    pub fn summary(&self, round: u32, agent: &str) -> Option<u32> {
        self.0
            .get(&(round, EntryKind::Summary, agent.to_string(), None))
            .copied()
    }
}
