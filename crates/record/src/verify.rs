//! Verifying a record: its chain, its signature and, given the debate's state, every
//! digest against the texts. Verification stops at the first thing that does not match
//! and names it ([`Mismatch`]).

use base64::Engine as _;
use parley_protocol::{DebateSpec, DebateState};

use crate::build;
use crate::canonical::{is_digest, sha256_hex};
use crate::keys::PublicKey;
use crate::schema::{genesis, link, Entry, EntryKind, Record, ED25519, FORMAT, VERSION};

/// The first thing that does not match, in words that name it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// The record is not a record this build reads (format, version, a digest's shape).
    #[error("not a valid record: {0}")]
    Malformed(String),
    /// An entry's digest or link does not follow from the record itself.
    #[error("{0}")]
    Chain(String),
    #[error("{0}")]
    Signature(String),
    /// The record and the debate's state differ.
    #[error("{0}")]
    State(String),
    /// The record and the debate's Markdown report differ.
    #[error("{0}")]
    Report(String),
}

/// What was checked, when everything matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The record's digest ([`Record::digest`]).
    pub digest: String,
    pub entries: usize,
    pub signature: SignatureCheck,
    /// Whether the texts were checked against a state (and the spec, when both had one).
    pub state: Option<StateCheck>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureCheck {
    Unsigned,
    /// Signed, and the signature verifies with the key given.
    Verified {
        key_id: String,
    },
    /// Signed, but no public key was given to check it with.
    NotChecked {
        key_id: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateCheck {
    /// Whether the spec's digest was compared too.
    pub spec_checked: bool,
}

/// The debate's own files to check the record against.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    pub state: &'a DebateState,
    pub spec: Option<&'a DebateSpec>,
}

fn named(i: usize, e: &Entry) -> String {
    format!("contribution {} ({})", i + 1, e.describe())
}

/// Checks `record`: format, chain, signature (with `key`, when given), then `evidence`.
pub fn verify(
    record: &Record,
    key: Option<&PublicKey>,
    evidence: Option<Evidence<'_>>,
) -> Result<Verified, Mismatch> {
    check_shape(record)?;
    check_chain(record)?;
    let signature = check_signature(record, key)?;
    let state = match evidence {
        Some(ev) => Some(check_state(record, ev)?),
        None => None,
    };
    Ok(Verified {
        digest: record.digest(),
        entries: record.entries.len(),
        signature,
        state,
    })
}

fn check_shape(r: &Record) -> Result<(), Mismatch> {
    let bad = |m: String| Err(Mismatch::Malformed(m));
    if r.format != FORMAT {
        return bad(format!("format is {:?}, not {FORMAT:?}", r.format));
    }
    if r.version != VERSION {
        return bad(format!(
            "version {} (this build reads version {VERSION})",
            r.version
        ));
    }
    for (field, v) in [("problemDigest", &r.problem_digest), ("head", &r.head)] {
        if !is_digest(v) {
            return bad(format!("{field} is not a SHA-256 digest"));
        }
    }
    for (field, v) in [
        ("specDigest", &r.spec_digest),
        ("solutionDigest", &r.solution_digest),
    ] {
        if v.as_deref().is_some_and(|d| !is_digest(d)) {
            return bad(format!("{field} is not a SHA-256 digest"));
        }
    }
    for (i, e) in r.entries.iter().enumerate() {
        for (field, v) in [
            ("textDigest", &e.text_digest),
            ("digest", &e.digest),
            ("link", &e.link),
        ] {
            if !is_digest(v) {
                return bad(format!("entry {}: {field} is not a SHA-256 digest", i + 1));
            }
        }
        if e.answers.iter().any(|a| !is_digest(a)) {
            return bad(format!("entry {}: answers holds a non-digest", i + 1));
        }
    }
    Ok(())
}

fn check_chain(r: &Record) -> Result<(), Mismatch> {
    let mut previous = genesis(&r.debate_id);
    for (i, e) in r.entries.iter().enumerate() {
        if e.index as usize != i + 1 {
            return Err(Mismatch::Chain(format!(
                "chain broken at link {}: the entry there says it is number {}",
                i + 1,
                e.index
            )));
        }
        if e.computed_digest() != e.digest {
            return Err(Mismatch::Chain(format!(
                "{}: its digest does not match its fields",
                named(i, e)
            )));
        }
        let expected = link(&previous, &e.digest);
        if expected != e.link {
            return Err(Mismatch::Chain(format!("chain broken at link {}", i + 1)));
        }
        previous = expected;
    }
    if previous != r.head {
        return Err(Mismatch::Chain(format!(
            "chain broken at the head: it is not the link of entry {}",
            r.entries.len()
        )));
    }
    Ok(())
}

fn check_signature(r: &Record, key: Option<&PublicKey>) -> Result<SignatureCheck, Mismatch> {
    let Some(sig) = &r.signature else {
        return match key {
            Some(k) => Err(Mismatch::Signature(format!(
                "the record is unsigned: nothing for key {} to verify",
                k.key_id()
            ))),
            None => Ok(SignatureCheck::Unsigned),
        };
    };
    if sig.algorithm != ED25519 {
        return Err(Mismatch::Signature(format!(
            "signature algorithm {:?} is not {ED25519}",
            sig.algorithm
        )));
    }
    let Some(key) = key else {
        return Ok(SignatureCheck::NotChecked {
            key_id: sig.key_id.clone(),
        });
    };
    if sig.key_id != key.key_id() {
        return Err(Mismatch::Signature(format!(
            "signed with key {}, not with the public key given ({})",
            sig.key_id,
            key.key_id()
        )));
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(&sig.value)
        .unwrap_or_default();
    if !key.verifies(&r.signed_bytes(), &raw) {
        return Err(Mismatch::Signature(format!(
            "signature does not verify with key {}",
            sig.key_id
        )));
    }
    Ok(SignatureCheck::Verified {
        key_id: sig.key_id.clone(),
    })
}

fn differ<T: std::fmt::Display>(what: String, record: T, state: T) -> Mismatch {
    Mismatch::State(format!("{what} differ: record {record}, state {state}"))
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "(none)".to_string(), ToString::to_string)
}

fn check_state(r: &Record, ev: Evidence<'_>) -> Result<StateCheck, Mismatch> {
    let s = ev.state;
    let state_err = |m: String| Err(Mismatch::State(m));
    if r.debate_id != s.id {
        return state_err(format!(
            "debate id differs: record {}, state {}",
            r.debate_id, s.id
        ));
    }
    if r.problem_digest != sha256_hex(s.problem.as_str().as_bytes()) {
        return state_err("the problem text does not match its digest".into());
    }
    let mut spec_checked = false;
    if let (Some(want), Some(spec)) = (&r.spec_digest, ev.spec) {
        let got = build::spec_digest(spec)
            .map_err(|e| Mismatch::State(format!("cannot encode the state's spec: {e}")))?;
        if *want != got {
            return state_err("the debate's spec does not match its digest".into());
        }
        spec_checked = true;
    }
    let expected = build::entries(s);
    for i in 0..r.entries.len().max(expected.len()) {
        let (rec, st) = match (r.entries.get(i), expected.get(i)) {
            (Some(a), Some(b)) => (a, b),
            (Some(a), None) => {
                return state_err(format!("{} is not in the state", named(i, a)));
            }
            (None, Some(b)) => {
                return state_err(format!(
                    "the state has {} that the record lacks",
                    named(i, b)
                ));
            }
            (None, None) => break,
        };
        check_entry(i, rec, st, &expected)?;
    }
    let solution = s.final_solution.as_ref().map(build::solution_digest);
    if r.solution_digest != solution {
        return state_err(match (&r.solution_digest, &solution) {
            (Some(_), None) => "the record has a solution digest but the state no solution".into(),
            (None, Some(_)) => "the state has a solution the record does not".into(),
            _ => "the solution does not match its digest".into(),
        });
    }
    let t = build::totals(s);
    if r.totals.tokens != t.tokens {
        return Err(differ("token totals".into(), r.totals.tokens, t.tokens));
    }
    if r.totals.calls != t.calls {
        return Err(differ("call totals".into(), r.totals.calls, t.calls));
    }
    if r.totals.tokens_in != t.tokens_in {
        return Err(differ(
            "input token totals".into(),
            r.totals.tokens_in,
            t.tokens_in,
        ));
    }
    if r.totals.tokens_out != t.tokens_out {
        return Err(differ(
            "output token totals".into(),
            r.totals.tokens_out,
            t.tokens_out,
        ));
    }
    if r.totals.cost_usd != t.cost_usd {
        return Err(differ(
            "cost totals".into(),
            opt(&r.totals.cost_usd),
            opt(&t.cost_usd),
        ));
    }
    if r.status != s.status.as_str() {
        return Err(differ(
            "statuses".into(),
            r.status.as_str(),
            s.status.as_str(),
        ));
    }
    let (created, finished) = (
        build::timestamp(s.created_at),
        build::timestamp(s.updated_at),
    );
    if r.created_at != created {
        return Err(differ("creation times".into(), &r.created_at, &created));
    }
    if r.finished_at != finished {
        return Err(differ("finish times".into(), &r.finished_at, &finished));
    }
    Ok(StateCheck { spec_checked })
}

/// Compares entry `i` of the record with the state's, field by field.
fn check_entry(i: usize, rec: &Entry, st: &Entry, all: &[Entry]) -> Result<(), Mismatch> {
    let who = |e: &Entry| (e.round, e.kind, e.author.clone(), e.target.clone());
    if who(rec) != who(st) {
        let elsewhere = all.iter().any(|e| who(e) == who(rec));
        return Err(Mismatch::State(if elsewhere {
            format!(
                "{}: the state has {} in its place: the order of the contributions differs",
                named(i, rec),
                st.describe()
            )
        } else {
            format!(
                "{} is not in the state (it has {} in its place)",
                named(i, rec),
                st.describe()
            )
        }));
    }
    let name = named(i, rec);
    if rec.role != st.role {
        return Err(differ(format!("roles of {name}"), &rec.role, &st.role));
    }
    if rec.model != st.model {
        return Err(Mismatch::State(format!(
            "model of {name} differs: record {:?}, state {:?}",
            rec.model, st.model
        )));
    }
    if rec.provider != st.provider {
        return Err(differ(
            format!("providers of {name}"),
            opt(&rec.provider),
            opt(&st.provider),
        ));
    }
    if rec.tokens != st.tokens {
        return Err(differ(format!("tokens of {name}"), rec.tokens, st.tokens));
    }
    if rec.tokens_in != st.tokens_in || rec.tokens_out != st.tokens_out {
        return Err(differ(
            format!("tokens in/out of {name}"),
            format!("{}/{}", opt(&rec.tokens_in), opt(&rec.tokens_out)),
            format!("{}/{}", opt(&st.tokens_in), opt(&st.tokens_out)),
        ));
    }
    if rec.carried_over != st.carried_over {
        return Err(Mismatch::State(format!(
            "{name}: carried over in one and not the other"
        )));
    }
    if rec.text_digest != st.text_digest {
        return Err(Mismatch::State(match rec.kind {
            EntryKind::Synthesis => {
                format!("the solution does not match its digest ({name})")
            }
            _ => format!("{name}: text digest does not match the state"),
        }));
    }
    if rec.answers != st.answers {
        return Err(Mismatch::State(format!(
            "{name}: what it answers differs from the state"
        )));
    }
    if rec.digest != st.digest {
        return Err(Mismatch::State(format!(
            "{name}: its digest differs from the state's"
        )));
    }
    Ok(())
}
