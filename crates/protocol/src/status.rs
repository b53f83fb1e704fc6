//! `parley.debates.status`: a summary view, and the full state inline or in pages.
//!
//! A debate's state grows with its agents, rounds and replies (12 agents with long replies
//! make several MiB), while one NATS message is capped by the server's `max_payload`
//! (1 MiB by default, often less). So:
//!
//! - `{"debateId", "view": "summary"}` → a [`StatusSummary`]: status, round, counts,
//!   error, confidence, sizes. Always small.
//! - `{"debateId"}` (view `full`, the default) → the [`DebateState`](crate::DebateState)
//!   JSON itself when it fits in one page; otherwise the first [`StatusPage`] of a snapshot
//!   the coordinator took of it (stored for a short while).
//! - `{"debateId", "snapshot": n, "page": k}` → page `k` of snapshot `n`.
//!
//! A client tells the two full replies apart with [`StatusPage::from_reply`], fetches the
//! remaining pages and concatenates their `data` ([`StatusPage::assemble`]): the state JSON.
//! Pages split the JSON text on character boundaries, so each `data` is valid UTF-8; as a
//! JSON string it takes at most twice its length (quotes and backslashes are escaped).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{DebateFailure, DebateState, DebateStatus};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatusView {
    /// The whole state (inline or in pages).
    #[default]
    Full,
    /// A [`StatusSummary`].
    Summary,
    /// The debate's decision record (`parley_record`), once it has settled (inline or in
    /// pages, as the full state).
    Record,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRequest {
    pub debate_id: String,
    #[serde(default)]
    pub view: StatusView,
    /// With `page`: which snapshot the page is of (from the first paged reply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
}

/// One page of a snapshot of a debate's state JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusPage {
    pub debate_id: String,
    /// The checkpoint version the snapshot was taken at; names it in page requests.
    pub snapshot: u64,
    /// 0-based.
    pub page: u32,
    pub pages: u32,
    /// Bytes of the whole state JSON.
    pub bytes: u64,
    /// This page's part of the state JSON.
    pub data: String,
}

impl StatusPage {
    /// The page in a status reply, or `None` when the reply is the state (or an error).
    pub fn from_reply(reply: &serde_json::Value) -> Option<StatusPage> {
        if reply.get("pages").is_none() || reply.get("snapshot").is_none() {
            return None;
        }
        serde_json::from_value(reply.clone()).ok()
    }

    /// The state JSON from every page of one snapshot, in any order; an error names what
    /// is missing or inconsistent.
    pub fn assemble(mut pages: Vec<StatusPage>) -> Result<String, AssembleError> {
        pages.sort_by_key(|p| p.page);
        let Some(first) = pages.first() else {
            return Err(AssembleError::NoPages);
        };
        let (snapshot, count, bytes) = (first.snapshot, first.pages, first.bytes);
        if pages.len() != count as usize {
            return Err(AssembleError::MissingPages {
                got: pages.len(),
                count,
            });
        }
        // Sized by what arrived, not by what the first page claims.
        let mut out = String::with_capacity(pages.iter().map(|p| p.data.len()).sum());
        for (i, p) in pages.iter().enumerate() {
            if p.page as usize != i || p.snapshot != snapshot || p.pages != count {
                return Err(AssembleError::ForeignPage {
                    page: p.page,
                    page_snapshot: p.snapshot,
                    snapshot,
                    count,
                });
            }
            out.push_str(&p.data);
        }
        if out.len() as u64 != bytes {
            return Err(AssembleError::WrongSize {
                got: out.len(),
                bytes,
            });
        }
        Ok(out)
    }
}

/// Why [`StatusPage::assemble`] could not rebuild a state from its pages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssembleError {
    #[error("no pages")]
    NoPages,
    /// Fewer (or more) pages than the snapshot has.
    #[error("got {got} of {count} pages")]
    MissingPages { got: usize, count: u32 },
    /// A page of another snapshot, a repeated page, or one that disagrees on the count.
    #[error("page {page} of snapshot {page_snapshot} does not belong to snapshot {snapshot} of {count} pages")]
    ForeignPage {
        page: u32,
        page_snapshot: u64,
        snapshot: u64,
        count: u32,
    },
    /// The pages together are not the snapshot's size.
    #[error("the pages hold {got} bytes, the snapshot {bytes}")]
    WrongSize { got: usize, bytes: u64 },
}

/// The largest state a client reassembles from pages (a first page claiming more, or more
/// than [`MAX_STATE_PAGES`] pages, is refused before any other page is asked for).
pub const MAX_STATE_BYTES: u64 = 256 * 1024 * 1024;
/// The most pages of one snapshot (the server's pages hold at least 4 KiB).
pub const MAX_STATE_PAGES: u32 = 65_536;

/// Splits `text` into parts of at most `max_bytes` bytes (at least one character each),
/// on character boundaries.
pub fn split_pages(text: &str, max_bytes: usize) -> Vec<&str> {
    let max = max_bytes.max(4);
    let mut out = Vec::with_capacity(text.len() / max + 1);
    let mut rest = text;
    while rest.len() > max {
        let mut end = max;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (page, tail) = rest.split_at(end);
        out.push(page);
        rest = tail;
    }
    out.push(rest);
    out
}

/// The `summary` view of a debate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusSummary {
    pub debate_id: String,
    pub view: StatusView,
    pub status: DebateStatus,
    pub current_round: u32,
    /// Rounds opened so far.
    pub rounds: usize,
    pub contributions: usize,
    pub total_tokens: u64,
    /// Dollars spent so far; absent while unknown (a call without a price) or before the
    /// first call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Per participant: calls, tokens, dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::Spend>,
    /// The debate's budget as kept, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::BudgetRecord>,
    /// The final solution's confidence, once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<DebateFailure>,
    /// The name of the API key that created the debate (see `DebateSpec::owner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Checkpoint version.
    pub version: u64,
    /// Bytes of the full state JSON (what `view: full` returns, inline or in pages).
    pub state_bytes: u64,
    /// While `awaiting_clarifications`: the questions waiting for an answer, by agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub questions: Vec<crate::AgentClarifications>,
    /// The newest per-round judge verdict (`terminationCondition.type: "verdict"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictSummary>,
    /// The newest round's similarities (`terminationCondition.type: "similarity"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similarity: Option<SimilaritySummary>,
    /// `debate.mode: "adaptive"`: the path taken after the proposals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive_path: Option<crate::AdaptivePath>,
    /// `synthesisMethod: "voting"`: the votes so far and, once tallied, the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub votes: Option<VotesSummary>,
}

/// A round's verdict in the summary: the decision, and how many issues stay open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerdictSummary {
    pub round: u32,
    pub verdict: crate::VerdictDecision,
    pub confidence: f64,
    pub open_issues: usize,
}

/// A round's similarities in the summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimilaritySummary {
    pub round: u32,
    /// The least self-similarity of an agent's refinement (none in round 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub least_per_agent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub across_agents: Option<f64>,
    pub threshold: f64,
    pub converged: bool,
}

/// The votes in the summary: how many are in, and the tally once every vote is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VotesSummary {
    pub cast: usize,
    pub valid: usize,
    pub tallied: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winner: Option<String>,
    pub tie: bool,
}

impl StatusSummary {
    pub fn of(state: &DebateState, version: u64, state_bytes: usize) -> Self {
        Self {
            debate_id: state.id.clone(),
            view: StatusView::Summary,
            status: state.status,
            current_round: state.current_round,
            rounds: state.rounds.len(),
            contributions: state.rounds.iter().map(|r| r.contributions.len()).sum(),
            total_tokens: state.total_tokens(),
            cost_usd: state.spend.as_ref().and_then(|s| s.cost_usd),
            spend: state.spend.clone(),
            budget: state.budget.clone(),
            confidence: state.final_solution.as_ref().map(|s| s.confidence),
            error: state.error.clone(),
            owner: state.owner.clone(),
            created_at: state.created_at,
            updated_at: state.updated_at,
            version,
            state_bytes: state_bytes as u64,
            questions: crate::pending_clarifications(&state.clarifications),
            verdict: state.rounds.iter().rev().find_map(|r| {
                r.verdict.as_ref().map(|v| VerdictSummary {
                    round: r.round_number,
                    verdict: v.verdict.verdict,
                    confidence: v.verdict.confidence,
                    open_issues: v.verdict.open_issues.len(),
                })
            }),
            similarity: state.rounds.iter().rev().find_map(|r| {
                r.similarity.as_ref().map(|s| SimilaritySummary {
                    round: r.round_number,
                    least_per_agent: s.similarity.min_per_agent(),
                    across_agents: s.similarity.across_agents,
                    threshold: s.threshold,
                    converged: s.converged,
                })
            }),
            adaptive_path: state.adaptive.as_ref().map(|a| a.path),
            votes: state.voting.as_ref().map(|v| VotesSummary {
                cast: v.votes.len(),
                valid: v.votes.iter().filter(|b| b.valid).count(),
                tallied: v.tallied,
                winner: v.winner.clone(),
                tie: v.tie,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_split_on_char_boundaries_and_assemble_back() {
        let text = format!("{{\"a\":\"{}\"}}", "héllo wörld ".repeat(500));
        let parts = split_pages(&text, 97);
        assert!(parts.len() > 10);
        assert!(parts.iter().all(|p| !p.is_empty() && p.len() <= 97));
        let mut pages: Vec<StatusPage> = parts
            .iter()
            .enumerate()
            .map(|(i, d)| StatusPage {
                debate_id: "d".into(),
                snapshot: 7,
                page: i as u32,
                pages: parts.len() as u32,
                bytes: text.len() as u64,
                data: d.to_string(),
            })
            .collect();
        pages.reverse();
        let reply = serde_json::to_value(&pages[0]).unwrap();
        assert!(StatusPage::from_reply(&reply).is_some());
        assert!(StatusPage::from_reply(&serde_json::json!({"status": "running"})).is_none());
        assert_eq!(StatusPage::assemble(pages.clone()).unwrap(), text);
        pages.pop();
        assert!(StatusPage::assemble(pages)
            .unwrap_err()
            .to_string()
            .contains("pages"));
        assert_eq!(split_pages("", 10), vec![""]);
    }
}
