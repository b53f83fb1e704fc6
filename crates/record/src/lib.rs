//! Decision records of finished debates: what the agents and the judge produced, with which
//! models, at what cost, in a form anyone can check.
//!
//! A record ([`Record`]) lists every contribution of a debate as an entry: its author,
//! role, model, provider, tokens, round, kind, the SHA-256 of its text and the digests of
//! the entries it answered; the entries are chained in the order the engine recorded them
//! (each link hashes the previous link with the entry's digest). The record also holds the
//! digests of the problem, the spec and the final solution, the totals (calls, tokens,
//! cost) and the timestamps, as canonical JSON, so its digest is reproducible. The
//! operator may sign it with an Ed25519 key; [`verify`] checks the chain, the signature
//! and, given the debate's state, every text against its digest, and names the first
//! thing that does not match.
//!
//! # Layout
//! - [`canonical`]: canonical JSON and SHA-256 digests.
//! - [`schema`]: the record's types, field by field, the chain's links.
//! - [`build`]: a record from a finished debate's state.
//! - [`keys`]: signing keys, public keys, key files, signing.
//! - [`files`]: records beside their debate's state file, and the public key beside them.
//! - [`verify`]: checking a record, naming the first mismatch.
//! - [`report`]: the markers a Markdown report carries, and checking a report against a
//!   record.

pub mod build;
pub mod canonical;
pub mod files;
pub mod keys;
pub mod report;
pub mod schema;
pub mod verify;

pub use build::{build, BuildError};
pub use keys::{key_id, KeyError, PublicKey, SigningKey};
pub use report::{check_report, ReportCheck};
pub use schema::{Entry, EntryKind, Record, Signature, Summary, Totals};
pub use verify::{verify, Evidence, Mismatch, SignatureCheck, Verified};

/// The largest record file read (a record of a 6-agent, 20-round debate is far smaller).
pub const RECORD_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Why a record file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read the record {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("the record {path} is larger than {RECORD_MAX_BYTES} bytes")]
    TooLarge { path: String },
    #[error("{path} is not a decision record: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
}

/// Reads a record file (at most [`RECORD_MAX_BYTES`]).
pub fn read(path: &std::path::Path) -> Result<Record, ReadError> {
    use std::io::Read as _;
    let shown = path.display().to_string();
    let io = |source| ReadError::Io {
        path: shown.clone(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(RECORD_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > RECORD_MAX_BYTES {
        return Err(ReadError::TooLarge { path: shown });
    }
    parse(&bytes).map_err(|source| ReadError::Parse {
        path: shown,
        source,
    })
}

/// Parses a record (unknown fields are refused: a signature covers only what is read).
pub fn parse(bytes: &[u8]) -> Result<Record, serde_json::Error> {
    serde_json::from_slice(bytes)
}
