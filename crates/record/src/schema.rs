//! The record: what a decision record holds, field by field.
//!
//! A record is one JSON object ([`Record`]). Its digests are SHA-256 in lowercase hex over
//! canonical JSON ([`crate::canonical`]) or over UTF-8 text, as each field says. The
//! chain: entry *i*'s `link` is `sha256(link(i-1) ":" digest(i))` over the two hex strings,
//! with `link(0)` = [`genesis`] of the debate id; `head` is the last link (the genesis when
//! there is no entry). The signature is Ed25519 over the canonical JSON of the record
//! without its `signature` field.

use serde::{Deserialize, Serialize};

use crate::canonical;

/// The `format` of every record.
pub const FORMAT: &str = "parley.decision-record";
/// The `version` this build writes and reads.
pub const VERSION: u32 = 1;
/// The one signature algorithm.
pub const ED25519: &str = "ed25519";

/// A debate's decision record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Record {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    pub debate_id: String,
    /// The debate's status when the record was made (`completed`, `failed`, `cancelled`).
    pub status: String,
    /// SHA-256 of the problem text (UTF-8).
    pub problem_digest: String,
    /// SHA-256 of the canonical JSON of the debate's spec (absent: the spec was not at hand,
    /// e.g. a record made from a state file that does not carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_digest: Option<String>,
    /// When the debate was created and last updated (RFC 3339, UTC, as the state has them).
    pub created_at: String,
    pub finished_at: String,
    /// When this record was made.
    pub recorded_at: String,
    /// Every contribution, in the order the engine recorded them.
    pub entries: Vec<Entry>,
    /// The last entry's link (the chain's head).
    pub head: String,
    /// SHA-256 of the canonical JSON of the final solution (absent: no solution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solution_digest: Option<String>,
    pub totals: Totals,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
}

/// What kind of contribution an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EntryKind {
    Proposal,
    Critique,
    Refinement,
    /// An agent's summary of its history before a round.
    Summary,
    /// The judge's confidence after a round.
    Evaluation,
    /// The judge's verdict on a round.
    Verdict,
    /// An agent's ballot (voting).
    Vote,
    /// The judge's summary of the final round.
    JudgeSummary,
    /// The judge's final solution.
    Synthesis,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proposal => "proposal",
            Self::Critique => "critique",
            Self::Refinement => "refinement",
            Self::Summary => "summary",
            Self::Evaluation => "evaluation",
            Self::Verdict => "verdict",
            Self::Vote => "vote",
            Self::JudgeSummary => "judge summary",
            Self::Synthesis => "synthesis",
        }
    }
}

/// One link of the chain: a contribution, described and digested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    /// Position in the chain, from 1.
    pub index: u32,
    /// The round it belongs to; 0 for what follows the rounds (votes, the judge's summary,
    /// the synthesis).
    pub round: u32,
    pub kind: EntryKind,
    /// The participant's id (the judge's for judge entries).
    pub author: String,
    /// The participant's role (`judge` for judge entries).
    pub role: String,
    /// Whom it answers: a critique's target, a vote's choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The model that wrote it (empty for a contribution that made no call).
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Tokens the call used (prompt + completion).
    pub tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_in: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_out: Option<u64>,
    /// A round ≥ 2 proposal that is the previous refinement carried over (no call).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub carried_over: bool,
    /// SHA-256 of its text: the content (UTF-8) of a proposal, critique, refinement or
    /// summary; the canonical JSON of the judgement of an evaluation, verdict or vote (see
    /// [`crate::build`]); for the synthesis, the solution digest.
    pub text_digest: String,
    /// The `digest`s of the entries it answered, in chain order: a critique its target's
    /// proposal; a refinement the agent's proposal and the critiques it received; a carried
    /// over proposal the refinement it carries; an evaluation or verdict the round's
    /// refinements; a vote the refinement voted for; the synthesis the refinements it was
    /// written from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<String>,
    /// SHA-256 of the canonical JSON of this entry without `digest` and `link`.
    pub digest: String,
    /// `sha256(previous link ":" digest)`.
    pub link: String,
}

impl Entry {
    /// The digest this entry's fields give (what `digest` must be).
    pub fn computed_digest(&self) -> String {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.remove("digest");
            o.remove("link");
        }
        canonical::sha256_hex(&canonical::to_bytes(&v))
    }

    /// How a message names it: `critique by security of architect, round 2`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} by {}", self.kind.as_str(), self.author);
        if let Some(t) = &self.target {
            s.push_str(match self.kind {
                EntryKind::Vote => " for ",
                _ => " of ",
            });
            s.push_str(t);
        }
        if self.round > 0 {
            s.push_str(&format!(", round {}", self.round));
        }
        s
    }
}

/// What the debate spent, from its state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Totals {
    /// LLM calls (carried-over proposals are not calls).
    pub calls: u64,
    /// Tokens of every call.
    pub tokens: u64,
    /// Prompt and completion tokens, over the calls that reported them.
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// Dollars; absent when a call had no price (unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// An Ed25519 signature of the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Signature {
    /// Always [`ED25519`].
    pub algorithm: String,
    /// The signing key's id: see [`crate::key_id`].
    pub key_id: String,
    /// The 64-byte signature, base64 (standard alphabet, padded).
    pub value: String,
}

/// A record at a glance ([`Record::summary`]): `decisionRecord` in a finished debate's
/// state download (`GET /v1/debates/{id}`). The signature is not verified here: `parley
/// verify` does that with the public key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The record's digest ([`Record::digest`]).
    pub digest: String,
    /// Whether the record carries a signature.
    pub signed: bool,
    /// The signing key's id, when signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// How many contributions it chains.
    pub entries: usize,
    /// The chain's head.
    pub head: String,
}

/// The link before the first entry: `sha256("parley.decision-record/v1:" debate id)`.
pub fn genesis(debate_id: &str) -> String {
    canonical::sha256_hex(format!("{FORMAT}/v{VERSION}:{debate_id}").as_bytes())
}

/// The link after `previous` for an entry with `digest`.
pub fn link(previous: &str, digest: &str) -> String {
    canonical::sha256_hex(format!("{previous}:{digest}").as_bytes())
}

impl Record {
    /// The canonical JSON bytes a signature covers: the record without `signature`.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.remove("signature");
        }
        canonical::to_bytes(&v)
    }

    /// SHA-256 of [`Record::signed_bytes`]: the record's digest (what the report, the ADR
    /// and `parley verify` show).
    pub fn digest(&self) -> String {
        canonical::sha256_hex(&self.signed_bytes())
    }

    /// What the state download and the page show of the record: its digest and signature
    /// status, without the entries.
    pub fn summary(&self) -> Summary {
        Summary {
            digest: self.digest(),
            signed: self.signature.is_some(),
            key_id: self.signature.as_ref().map(|s| s.key_id.clone()),
            entries: self.entries.len(),
            head: self.head.clone(),
        }
    }

    /// The record as pretty JSON (what is written to `<id>.record.json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}
