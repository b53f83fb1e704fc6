//! Building a [`Record`] from a debate's state (and its spec, when at hand).
//!
//! The entries follow the state: round by round, the agents' summaries (by agent id), then
//! the round's contributions in the order the engine recorded them, then the judge's
//! evaluation and verdict of the round; after the rounds, the votes in the order they were
//! recorded, the judge's summary and the synthesis. The text an evaluation, verdict or vote
//! is digested over is the canonical JSON of `{"confidence","reasoning"}`, of the verdict
//! (`verdict, confidence, reasoning, openIssues, valid`) and of `{"vote","reason","valid",
//! "invalidReason"}`.

use std::collections::HashMap;

use chrono::{DateTime, SecondsFormat, Utc};
use parley_protocol::{
    ContributionMetadata, ContributionType, DebateSpec, DebateState, DebateStatus, Spend,
};
use serde_json::json;

use crate::canonical::{self, sha256_hex};
use crate::schema::{genesis, link, Entry, EntryKind, Record, Totals, FORMAT, VERSION};

/// Why no record can be made.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("debate {id} has not finished (it is {status}): a record is made once it has")]
    NotFinished { id: String, status: String },
    #[error("cannot encode the {what} of debate {id}: {source}")]
    Encode {
        id: String,
        what: &'static str,
        source: serde_json::Error,
    },
}

/// RFC 3339 in UTC as records write it (`Z`, as many fraction digits as needed).
pub fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// SHA-256 of the canonical JSON of `spec`.
pub fn spec_digest(spec: &DebateSpec) -> Result<String, serde_json::Error> {
    Ok(sha256_hex(&canonical::of(spec)?))
}

/// The id the judge's entries are written under: the judge's prompt source, else the
/// solution's author, else `judge`.
fn judge_id(state: &DebateState) -> String {
    state
        .prompt_sources
        .judge
        .as_ref()
        .map(|j| j.agent_id.clone())
        .or_else(|| {
            state
                .final_solution
                .as_ref()
                .map(|s| s.synthesized_by.clone())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "judge".into())
}

/// Accumulates entries, their digests and the chain.
struct Chain {
    entries: Vec<Entry>,
    previous: String,
    /// (round, kind, author, target) → entry digest, for `answers`.
    by_key: HashMap<(u32, EntryKind, String, Option<String>), String>,
}

impl Chain {
    fn push(&mut self, mut e: Entry) {
        e.index = self.entries.len() as u32 + 1;
        e.digest = e.computed_digest();
        e.link = link(&self.previous, &e.digest);
        self.previous = e.link.clone();
        self.by_key.insert(
            (e.round, e.kind, e.author.clone(), e.target.clone()),
            e.digest.clone(),
        );
        self.entries.push(e);
    }

    fn find(
        &self,
        round: u32,
        kind: EntryKind,
        author: &str,
        target: Option<&str>,
    ) -> Option<String> {
        self.by_key
            .get(&(round, kind, author.to_string(), target.map(str::to_string)))
            .cloned()
    }

    /// Refinements of `round`, in chain order.
    fn refinements(&self, round: u32) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| e.round == round && e.kind == EntryKind::Refinement)
            .map(|e| e.digest.clone())
            .collect()
    }
}

/// One entry before it is chained (one argument per field it sets).
#[allow(clippy::too_many_arguments)]
fn entry(
    round: u32,
    kind: EntryKind,
    author: &str,
    role: &str,
    target: Option<&str>,
    meta: &ContributionMetadata,
    text_digest: String,
    answers: Vec<String>,
) -> Entry {
    Entry {
        index: 0,
        round,
        kind,
        author: author.to_string(),
        role: role.to_string(),
        target: target.map(str::to_string),
        model: meta.model.clone(),
        provider: meta.provider.clone(),
        tokens: meta.tokens_used,
        tokens_in: meta.prompt_tokens,
        tokens_out: meta.completion_tokens,
        carried_over: meta.carried_over,
        text_digest,
        answers,
        digest: String::new(),
        link: String::new(),
    }
}

pub(crate) fn kind_of(k: ContributionType) -> EntryKind {
    match k {
        ContributionType::Proposal => EntryKind::Proposal,
        ContributionType::Critique => EntryKind::Critique,
        ContributionType::Refinement => EntryKind::Refinement,
    }
}

/// The entries of `state`, chained.
pub fn entries(state: &DebateState) -> Vec<Entry> {
    let judge = judge_id(state);
    let mut chain = Chain {
        entries: Vec::new(),
        previous: genesis(&state.id),
        by_key: HashMap::new(),
    };
    for r in &state.rounds {
        let n = r.round_number;
        for (id, s) in &r.summaries {
            let meta = ContributionMetadata {
                tokens_used: s.metadata.tokens_used,
                model: s.metadata.model.clone(),
                ..Default::default()
            };
            chain.push(entry(
                n,
                EntryKind::Summary,
                id,
                &s.agent_role,
                None,
                &meta,
                sha256_hex(s.summary.as_bytes()),
                Vec::new(),
            ));
        }
        for c in &r.contributions {
            let kind = kind_of(c.kind);
            let answers: Vec<String> = match c.kind {
                ContributionType::Proposal if c.metadata.carried_over => chain
                    .find(
                        n.saturating_sub(1),
                        EntryKind::Refinement,
                        &c.agent_id,
                        None,
                    )
                    .into_iter()
                    .collect(),
                ContributionType::Proposal => Vec::new(),
                ContributionType::Critique => c
                    .target_agent_id
                    .as_deref()
                    .and_then(|t| chain.find(n, EntryKind::Proposal, t, None))
                    .into_iter()
                    .collect(),
                ContributionType::Refinement => {
                    let mut a: Vec<String> = chain
                        .find(n, EntryKind::Proposal, &c.agent_id, None)
                        .into_iter()
                        .collect();
                    a.extend(
                        chain
                            .entries
                            .iter()
                            .filter(|e| {
                                e.round == n
                                    && e.kind == EntryKind::Critique
                                    && e.target.as_deref() == Some(c.agent_id.as_str())
                            })
                            .map(|e| e.digest.clone()),
                    );
                    a
                }
            };
            chain.push(entry(
                n,
                kind,
                &c.agent_id,
                &c.agent_role,
                c.target_agent_id.as_deref(),
                &c.metadata,
                sha256_hex(c.content.as_bytes()),
                answers,
            ));
        }
        if let Some(e) = &r.evaluation {
            let text = json!({"confidence": e.confidence, "reasoning": e.reasoning});
            let answers = chain.refinements(n);
            chain.push(entry(
                n,
                EntryKind::Evaluation,
                &judge,
                "judge",
                None,
                &e.metadata,
                sha256_hex(&canonical::to_bytes(&text)),
                answers,
            ));
        }
        if let Some(v) = &r.verdict {
            let text = serde_json::to_value(&v.verdict).unwrap_or_default();
            let answers = chain.refinements(n);
            chain.push(entry(
                n,
                EntryKind::Verdict,
                &judge,
                "judge",
                None,
                &v.metadata,
                sha256_hex(&canonical::to_bytes(&text)),
                answers,
            ));
        }
    }
    let last_round = state.rounds.last().map_or(0, |r| r.round_number);
    let role_of = |id: &str| {
        state
            .rounds
            .iter()
            .flat_map(|r| &r.contributions)
            .find(|c| c.agent_id == id)
            .map(|c| c.agent_role.clone())
            .unwrap_or_default()
    };
    for b in state.voting.iter().flat_map(|v| &v.votes) {
        let text = json!({
            "vote": b.vote, "reason": b.reason, "valid": b.valid, "invalidReason": b.invalid_reason,
        });
        let answers = chain
            .find(last_round, EntryKind::Refinement, &b.vote, None)
            .into_iter()
            .collect();
        chain.push(entry(
            0,
            EntryKind::Vote,
            &b.agent_id,
            &role_of(&b.agent_id),
            Some(&b.vote),
            &b.metadata,
            sha256_hex(&canonical::to_bytes(&text)),
            answers,
        ));
    }
    if let Some(s) = &state.judge_summary {
        let meta = ContributionMetadata {
            tokens_used: s.metadata.tokens_used,
            model: s.metadata.model.clone(),
            ..Default::default()
        };
        chain.push(entry(
            0,
            EntryKind::JudgeSummary,
            &judge,
            "judge",
            None,
            &meta,
            sha256_hex(s.summary.as_bytes()),
            Vec::new(),
        ));
    }
    if let Some(s) = &state.final_solution {
        let meta = state.synthesis_metadata.clone().unwrap_or_default();
        let answers = match &s.based_on {
            Some(b) => chain
                .find(last_round, EntryKind::Refinement, b, None)
                .into_iter()
                .collect(),
            None => chain.refinements(last_round),
        };
        chain.push(entry(
            0,
            EntryKind::Synthesis,
            &s.synthesized_by,
            "judge",
            None,
            &meta,
            solution_digest(s),
            answers,
        ));
    }
    chain.entries
}

/// SHA-256 of the canonical JSON of the solution.
pub fn solution_digest(s: &parley_protocol::Solution) -> String {
    sha256_hex(&canonical::of(s).unwrap_or_default())
}

/// Every metadata block of a call in `state` (for tokens in/out).
fn call_metadata(state: &DebateState) -> Vec<&ContributionMetadata> {
    let mut out: Vec<&ContributionMetadata> = Vec::new();
    for r in &state.rounds {
        out.extend(r.contributions.iter().map(|c| &c.metadata));
        out.extend(r.evaluation.as_ref().map(|e| &e.metadata));
        out.extend(r.verdict.as_ref().map(|v| &v.metadata));
        out.extend(r.similarity.as_ref().map(|s| &s.metadata));
    }
    out.extend(state.adaptive.as_ref().and_then(|a| a.metadata()));
    out.extend(
        state
            .voting
            .iter()
            .flat_map(|v| &v.votes)
            .map(|b| &b.metadata),
    );
    out.extend(state.synthesis_metadata.as_ref());
    out
}

/// The totals of `state`: calls, tokens and cost as the state's spend shows them (tallied
/// from its calls when it holds none), tokens in and out summed over its calls.
pub fn totals(state: &DebateState) -> Totals {
    let spend = state
        .spend
        .clone()
        .unwrap_or_else(|| Spend::of(state, &judge_id(state)));
    let metas = call_metadata(state);
    let live = || metas.iter().filter(|m| !m.carried_over);
    Totals {
        calls: spend.calls,
        tokens: spend.total_tokens,
        tokens_in: live().filter_map(|m| m.prompt_tokens).sum(),
        tokens_out: live().filter_map(|m| m.completion_tokens).sum(),
        cost_usd: spend.cost_usd,
    }
}

/// Whether a debate in `status` has finished (a record can be made).
pub fn is_finished(status: DebateStatus) -> bool {
    matches!(
        status,
        DebateStatus::Completed | DebateStatus::Failed | DebateStatus::Cancelled
    )
}

/// The (unsigned) record of a finished debate. `spec` adds its digest.
pub fn build(
    state: &DebateState,
    spec: Option<&DebateSpec>,
    recorded_at: DateTime<Utc>,
) -> Result<Record, BuildError> {
    if !is_finished(state.status) {
        return Err(BuildError::NotFinished {
            id: state.id.clone(),
            status: state.status.as_str().into(),
        });
    }
    let spec_digest = spec
        .map(spec_digest)
        .transpose()
        .map_err(|source| BuildError::Encode {
            id: state.id.clone(),
            what: "spec",
            source,
        })?;
    let entries = entries(state);
    let head = entries
        .last()
        .map_or_else(|| genesis(&state.id), |e| e.link.clone());
    Ok(Record {
        format: FORMAT.into(),
        version: VERSION,
        debate_id: state.id.clone(),
        status: state.status.as_str().into(),
        problem_digest: sha256_hex(state.problem.as_str().as_bytes()),
        spec_digest,
        created_at: timestamp(state.created_at),
        finished_at: timestamp(state.updated_at),
        recorded_at: timestamp(recorded_at),
        entries,
        head,
        solution_digest: state.final_solution.as_ref().map(solution_digest),
        totals: totals(state),
        signature: None,
    })
}
