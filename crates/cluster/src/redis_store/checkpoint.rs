//! Checkpoints as a base snapshot and deltas, in the debate's one `state` hash.
//!
//! # Fields of `parley:{<id>}:state`
//! - `version`: the checkpoint's version (the compare-and-set counter, as before).
//! - `state`: the full [`DebateState`] JSON as of version `base` (the snapshot).
//! - `base`: the version of that snapshot. Absent in a checkpoint written before deltas:
//!   `state` is then the state of `version` (it still loads; the next write of this build
//!   is a snapshot).
//! - `d:<v>` for every `v` in `base+1 ..= version`: the delta from version `v-1` to `v`
//!   ([`crate::checkpoint_delta`]), after the link of the record before it (16 hex digits
//!   and a space). The delta is stored as its JSON or, when that is shorter, packed
//!   ([`checkpoint_delta::pack`]: LZ4 against the end of the delta before it, which holds
//!   the same keys and mostly the same bookkeeping; nothing to pack against after the
//!   snapshot). A delta written as JSON (every delta before packing) still loads.
//! - `format`: the checkpoint format of the snapshot's writer ([`CHECKPOINT_FORMAT`];
//!   absent before it was written, which reads as format 1). A reader that finds a format
//!   newer than its own refuses the checkpoint with
//!   [`RedisStoreError::NewerFormat`](super::RedisStoreError::NewerFormat) — not corrupt,
//!   only another build's — so during a rolling upgrade an older coordinator neither fails
//!   nor stops scheduling a debate a newer one wrote. A build that changes the encoding in
//!   a way older readers cannot follow raises the number.
//! - `nonce`: the link of the latest record. A record's link is a digest (SHA-256, 64
//!   bits) of its bytes: of the snapshot's JSON, of a delta's whole field as stored (link
//!   included, so a link names the whole history since the snapshot). A delta is only
//!   appended by a writer whose delta was made against the record `nonce` names, and a
//!   reader checks every link: a delta lost, replaced or altered fails the read.
//!
//! All of it is one key: it expires, persists and is deleted as before, and on Redis
//! Cluster it lives in the debate's slot.
//!
//! # Writing
//! [`RedisStore::save_state`] appends a delta when this process wrote the expected version
//! itself (it keeps a [`Shape`] of it, a few hashes, not the state, and the end of the
//! last delta to pack the next against); otherwise, and by the rule below, it writes a
//! snapshot, which drops the deltas. Both are one Lua script that checks the version first
//! (compare-and-set, as before), the delta script the nonce too, and that stores the
//! transition's task bodies once the checkpoint is in ([`RedisStore::save_transition`]).
//! The CPU side (the delta against the last shape, packing, links) is
//! [`CheckpointWriter::prepare`], without I/O.
//!
//! A snapshot is written
//! - when the writer has no shape of the expected version (the debate's first write, the
//!   first write after an adoption or a restart, a shape dropped after [`SHAPE_IDLE`]);
//! - when the deltas since the snapshot would pass [`LOG_FACTOR`] × the state's size (as
//!   JSON, what a reader replays), or number [`MAX_DELTAS`]: a reader never replays more
//!   than about `LOG_FACTOR` times the state in deltas, nor more than `MAX_DELTAS` deltas;
//! - when one delta would be larger than the state;
//! - at a terminal status (completed, failed, cancelled) only when the deltas since the
//!   snapshot would take more than [`FINAL_FACTOR`] × the state's bytes as stored.
//!   Otherwise a finished debate ends on a delta like any other write and is read as its
//!   snapshot and those deltas: through its retention it keeps at most the snapshot and
//!   `FINAL_FACTOR` times its state (measured: less than its state in all, the snapshot
//!   being the debate's first state). A snapshot there would write the whole state once
//!   more.
//!
//! The writer keeps the shape of a failed debate (a `retry` runs it again: the next write
//! is a delta), not of a completed or cancelled one.
//!
//! Bytes written: the first snapshot, the deltas as stored (each transition's change: what
//! it appended, plus the fields every transition rewrites — the events of its outbox, the
//! spend, `updatedAt` — which packing against the delta before mostly removes), a snapshot
//! each time the deltas pass `LOG_FACTOR` times the state (less than a `LOG_FACTOR`-th of
//! the deltas' JSON before it), and the final state only when the deltas passed
//! `FINAL_FACTOR` times it. The replay test (`checkpoint_deltas` in the coordinator's
//! tests, replies of random letters that do not pack) measured 0.9–1.5× the final state.
//!
//! # Reading
//! [`RedisStore::state`] reads the whole hash at once (`HGETALL`) and replays the deltas on
//! the snapshot, checking the links. A delta that is missing, out of the chain, does not
//! unpack or does not apply fails the read with a [`RedisStoreError::Decode`] naming its
//! version: never an older state. A checkpoint without deltas is read as before.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use parley_protocol::{DebateState, DebateStatus, RoundRevisions};
use redis::Script;
use serde::de::Error as _;

use super::{key, Checkpoint, RedisStore, RedisStoreError, Result};
use crate::checkpoint_delta::{self, dict_of, pack, unpack, Known, Shape, Shaped, Shaper};

/// The deltas since the snapshot may reach this many times the state's bytes (as JSON).
pub const LOG_FACTOR: usize = 4;
/// A finished debate keeps the deltas since its snapshot if they take at most this many
/// times its state's bytes (else its last write is a snapshot).
pub const FINAL_FACTOR: usize = 2;
/// At most this many deltas after a snapshot.
pub const MAX_DELTAS: u64 = 256;
/// The checkpoint format this build writes and reads up to (see the module docs).
pub const CHECKPOINT_FORMAT: u32 = 1;
/// A shape unused this long is dropped (the debate's next write is a snapshot).
pub const SHAPE_IDLE: Duration = Duration::from_secs(600);
/// Shapes are swept for idle ones every this many writes.
const SWEEP_EVERY: u64 = 1024;

static SAVE_FULL: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
static SAVE_DELTA: std::sync::OnceLock<Script> = std::sync::OnceLock::new();

/// KEYS: state, task bodies. ARGV: expected version, next version, nonce, state JSON,
/// format, then task body fields and values. 1: written; 0: the version was not
/// `expected`. Drops the deltas of the previous snapshot; stores the task bodies with the
/// checkpoint (the transition's dispatches), in the same step.
const SAVE_FULL_SCRIPT: &str = r"
local cur = redis.call('HGET', KEYS[1], 'version')
if not cur then cur = '0' end
if cur ~= ARGV[1] then return 0 end
local last = tonumber(cur) or 0
local base = tonumber(redis.call('HGET', KEYS[1], 'base') or cur) or last
for v = base + 1, last do redis.call('HDEL', KEYS[1], 'd:' .. v) end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'base', ARGV[2], 'nonce', ARGV[3], 'state', ARGV[4], 'format', ARGV[5])
for i = 6, #ARGV - 1, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
return 1
";

/// KEYS: state, task bodies. ARGV: expected version, next version, expected nonce (the
/// link of the record the delta was made against), new nonce (the delta's link), delta
/// field, then task body fields and values. 1: appended (and the bodies stored); 0: the
/// version was not `expected`; 2: it was, but not written by the write this delta was
/// made against (the caller writes a snapshot instead).
const SAVE_DELTA_SCRIPT: &str = r"
local cur = redis.call('HGET', KEYS[1], 'version')
if not cur then cur = '0' end
if cur ~= ARGV[1] then return 0 end
if not redis.call('HGET', KEYS[1], 'base') then return 2 end
if redis.call('HGET', KEYS[1], 'nonce') ~= ARGV[3] then return 2 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'nonce', ARGV[4], 'd:' .. ARGV[2], ARGV[5])
for i = 6, #ARGV - 1, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
return 1
";

/// What this process remembers of a checkpoint it wrote.
struct Written {
    version: u64,
    nonce: String,
    shape: Shape,
    /// Bytes stored, bytes of JSON and number of the deltas written since the snapshot.
    log_bytes: usize,
    log_json: usize,
    deltas: u64,
    /// The end of the last delta's JSON (empty after a snapshot): the next delta is
    /// packed against it.
    dict: Vec<u8>,
    used: Instant,
    /// The rounds as written: their revisions (from the state's owner) and their hashes
    /// and sizes, so the next write need not read a round whose revision did not move.
    rounds: Option<RoundsWritten>,
}

/// The member of the state whose elements carry revisions.
const ROUNDS: &str = "rounds";

struct RoundsWritten {
    instance: u64,
    revs: Vec<u64>,
    elems: Vec<(u64, usize)>,
}

impl RoundsWritten {
    /// What was written, if the owner's revisions and the rounds hashed agree.
    fn of(revisions: Option<RoundRevisions<'_>>, elems: Option<Vec<(u64, usize)>>) -> Option<Self> {
        let (r, elems) = (revisions?, elems?);
        (r.revs.len() == elems.len()).then(|| Self {
            instance: r.instance,
            revs: r.revs.to_vec(),
            elems,
        })
    }

    /// The rounds of `state` known not to have changed since this write.
    fn known(&self, revisions: Option<RoundRevisions<'_>>, state: &DebateState) -> Option<Known> {
        let r = revisions.filter(|r| r.instance == self.instance)?;
        if r.revs.len() != state.rounds.len() {
            return None;
        }
        let elems = r
            .revs
            .iter()
            .enumerate()
            .map(|(i, rev)| (self.revs.get(i) == Some(rev)).then(|| self.elems[i]))
            .collect();
        Some(Known {
            field: ROUNDS,
            elems,
        })
    }
}

/// The shapes of the checkpoints this process wrote last, by debate (shared by clones of
/// the store): the CPU side of a checkpoint write, without I/O.
#[derive(Default)]
pub struct CheckpointWriter {
    shaper: Shaper,
    last: Mutex<HashMap<String, Written>>,
    writes: std::sync::atomic::AtomicU64,
}

/// A checkpoint write made ready (see [`CheckpointWriter::prepare`]): what the store's
/// compare-and-set script is given, and what the writer remembers once it went in.
pub struct PreparedCheckpoint {
    /// The version it writes.
    pub next: u64,
    pub write: CheckpointWrite,
    /// What the writer keeps once the write is in (`None`: a settled debate's).
    keep: Option<Written>,
    /// Rounds taken as unchanged from their revisions, without reading them.
    unread: usize,
}

/// The record a checkpoint write stores.
pub enum CheckpointWrite {
    /// A delta appended after the record whose link is `expected_nonce`.
    Delta {
        expected_nonce: String,
        nonce: String,
        record: Vec<u8>,
    },
    /// The whole state.
    Snapshot { json: String, nonce: String },
}

impl PreparedCheckpoint {
    /// Rounds the write took as unchanged from their revisions, without reading them.
    pub fn rounds_unread(&self) -> usize {
        self.unread
    }

    /// The bytes the write stores (the delta's record or the snapshot's JSON).
    pub fn stored_bytes(&self) -> usize {
        match &self.write {
            CheckpointWrite::Delta { record, .. } => record.len(),
            CheckpointWrite::Snapshot { json, .. } => json.len(),
        }
    }
}

impl CheckpointWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer hashing with `shaper`'s keys (two writers with the same keys write the
    /// same records for the same states).
    pub fn with_shaper(shaper: Shaper) -> Self {
        Self {
            shaper,
            ..Self::default()
        }
    }

    fn take(&self, id: &str) -> Option<Written> {
        self.last.lock().ok()?.remove(id)
    }

    fn put(&self, id: &str, w: Written) {
        let n = self
            .writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if n % SWEEP_EVERY == SWEEP_EVERY - 1 {
            last.retain(|_, w| w.used.elapsed() < SHAPE_IDLE);
        }
        last.insert(id.to_string(), w);
    }

    /// Number of shapes kept and their approximate bytes (for tests and metrics).
    pub(super) fn footprint(&self) -> (usize, usize) {
        self.last.lock().map_or((0, 0), |l| {
            (
                l.len(),
                l.iter()
                    .map(|(k, w)| {
                        k.len()
                            + w.nonce.len()
                            + w.dict.len()
                            + w.shape.heap_bytes()
                            + w.rounds.as_ref().map_or(0, |r| 24 * r.revs.len() + 56)
                            + 120
                    })
                    .sum(),
            )
        })
    }

    /// The write of `state` as version `expected + 1`: a delta against `expected` when
    /// this writer wrote it, else a snapshot (see the module docs). The writer forgets
    /// the debate's last write until [`CheckpointWriter::written`] says this one went in.
    pub fn prepare(
        &self,
        state: &DebateState,
        expected: u64,
    ) -> serde_json::Result<PreparedCheckpoint> {
        self.prepare_revised(state, None, expected)
    }

    /// [`CheckpointWriter::prepare`], told by the state's owner which rounds changed
    /// (`revisions`): a round whose revision did not move since the last write is not
    /// read again.
    pub fn prepare_revised(
        &self,
        state: &DebateState,
        revisions: Option<RoundRevisions<'_>>,
        expected: u64,
    ) -> serde_json::Result<PreparedCheckpoint> {
        let next = expected + 1;
        let prev = self
            .take(&state.id)
            .filter(|w| w.version == expected && expected > 0);
        let Some(prev) = prev else {
            return self.snapshot(state, revisions, expected, None);
        };
        let known = prev.rounds.as_ref().and_then(|r| r.known(revisions, state));
        let diffed = self.shaper.diff_with(&prev.shape, state, known)?;
        let rounds = RoundsWritten::of(revisions, diffed.elems);
        let unread = diffed.unread;
        let (shape, size) = (diffed.shape, diffed.size);
        let delta = diffed.delta;
        let stored = pack(&delta.json, &prev.dict);
        let log = prev.log_bytes + LINK_LEN + 1 + stored.len();
        let log_json = prev.log_json + delta.json.len();
        // A finished debate keeps its deltas when they are small next to its state
        // (see the module docs).
        let fits = log_json <= LOG_FACTOR * size
            && (!terminal(state.status) || log <= FINAL_FACTOR * size);
        if !(prev.deltas < MAX_DELTAS && fits && delta.json.len() < size) {
            // Time for a snapshot (see the module docs).
            return self.snapshot(state, revisions, expected, Some((shape, rounds)));
        }
        let mut record = Vec::with_capacity(LINK_LEN + 1 + stored.len());
        record.extend_from_slice(prev.nonce.as_bytes());
        record.push(b' ');
        record.extend_from_slice(&stored);
        let nonce = link(&record);
        let keep = (!settled(state.status)).then(|| Written {
            version: next,
            nonce: nonce.clone(),
            shape,
            log_bytes: log,
            log_json,
            deltas: prev.deltas + 1,
            dict: dict_of(delta.json.as_bytes()).to_vec(),
            used: Instant::now(),
            rounds,
        });
        Ok(PreparedCheckpoint {
            next,
            write: CheckpointWrite::Delta {
                expected_nonce: prev.nonce,
                nonce,
                record,
            },
            keep,
            unread,
        })
    }

    /// The write of `state` whole as version `expected + 1` (`known`: its shape and
    /// rounds, if made).
    fn snapshot(
        &self,
        state: &DebateState,
        revisions: Option<RoundRevisions<'_>>,
        expected: u64,
        known: Option<(Shape, Option<RoundsWritten>)>,
    ) -> serde_json::Result<PreparedCheckpoint> {
        let next = expected + 1;
        let json = serde_json::to_string(state)?;
        let nonce = link(json.as_bytes());
        let keep = if settled(state.status) {
            None
        } else {
            let (shape, rounds) = match known {
                Some(known) => known,
                None => {
                    let Shaped { shape, elems, .. } = self.shaper.shape_with(state, ROUNDS)?;
                    (shape, RoundsWritten::of(revisions, elems))
                }
            };
            Some(Written {
                version: next,
                nonce: nonce.clone(),
                shape,
                log_bytes: 0,
                log_json: 0,
                deltas: 0,
                dict: Vec::new(),
                used: Instant::now(),
                rounds,
            })
        };
        Ok(PreparedCheckpoint {
            next,
            write: CheckpointWrite::Snapshot { json, nonce },
            keep,
            unread: 0,
        })
    }

    /// `prepared` went in (the script said so): the writer remembers it (unless the
    /// debate is settled), and the debate's next write can be a delta against it.
    pub fn written(&self, id: &str, prepared: PreparedCheckpoint) {
        if let Some(w) = prepared.keep {
            self.put(id, w);
        }
    }
}

fn terminal(status: DebateStatus) -> bool {
    matches!(status, DebateStatus::Failed) || settled(status)
}

/// A finished debate that no input runs again (a failed one can be retried): its writer
/// forgets its shape.
fn settled(status: DebateStatus) -> bool {
    matches!(status, DebateStatus::Completed | DebateStatus::Cancelled)
}

/// The link of a record (see the module docs).
fn link(record: &[u8]) -> String {
    use sha2::Digest as _;
    crate::dispatch::hex(&sha2::Sha256::digest(record)[..8])
}

const LINK_LEN: usize = 16;

fn corrupt(id: &str, version: u64, reason: impl std::fmt::Display) -> RedisStoreError {
    RedisStoreError::Decode {
        what: format!("the checkpoint of {id} (delta {version})"),
        source: serde_json::Error::custom(reason.to_string()),
    }
}

impl RedisStore {
    /// The debate's checkpoint: the snapshot with its deltas replayed. An error when a
    /// delta is missing or does not apply (never an older state).
    pub async fn state(&self, id: &str) -> Result<Option<Checkpoint>> {
        let mut fields: HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
            .arg(key(id, "state"))
            .query_async(&mut self.conn())
            .await?;
        let mut text = |name: &str| {
            fields
                .remove(name)
                .map(|v| {
                    String::from_utf8(v).map_err(|_| RedisStoreError::Decode {
                        what: format!("the checkpoint of {id}"),
                        source: serde_json::Error::custom(format!("field {name} is not UTF-8")),
                    })
                })
                .transpose()
        };
        let (version, raw, base, nonce, format) = (
            text("version")?,
            text("state")?,
            text("base")?,
            text("nonce")?,
            text("format")?,
        );
        // Before anything else is read: a newer build's encoding may not parse here.
        if let Some(f) = format {
            let format = f.parse::<u32>().unwrap_or(u32::MAX);
            if format > CHECKPOINT_FORMAT {
                return Err(RedisStoreError::NewerFormat {
                    id: id.to_string(),
                    format,
                    known: CHECKPOINT_FORMAT,
                });
            }
        }
        let (Some(version), Some(raw)) = (version, raw) else {
            return Ok(None);
        };
        let version: u64 = version.parse().map_err(|_| RedisStoreError::Decode {
            what: format!("the checkpoint version of {id}"),
            source: serde_json::Error::custom(format!("{version:?} is not a version")),
        })?;
        let base = match base {
            None => version,
            Some(b) => b
                .parse::<u64>()
                .ok()
                .filter(|b| *b <= version)
                .ok_or_else(|| {
                    corrupt(
                        id,
                        version,
                        format!("base {b:?} is not a version up to {version}"),
                    )
                })?,
        };
        let decode = |source| RedisStoreError::Decode {
            what: format!("the state of {id}"),
            source,
        };
        if base == version {
            let state = serde_json::from_str(&raw).map_err(decode)?;
            return Ok(Some(Checkpoint { version, state }));
        }
        let mut doc: serde_json::Value = serde_json::from_str(&raw).map_err(decode)?;
        let mut prev = link(raw.as_bytes());
        let mut dict: Vec<u8> = Vec::new();
        for v in base + 1..=version {
            let record = fields.remove(&format!("d:{v}")).ok_or_else(|| {
                corrupt(
                    id,
                    v,
                    format!(
                        "missing: the snapshot is version {base}, the checkpoint version {version}"
                    ),
                )
            })?;
            let stored = record
                .strip_prefix(prev.as_bytes())
                .and_then(|d| d.strip_prefix(b" "))
                .ok_or_else(|| {
                    corrupt(
                        id,
                        v,
                        format!(
                            "does not follow version {} (lost, replaced or altered)",
                            v - 1
                        ),
                    )
                })?;
            let delta = unpack(stored, &dict).map_err(|e| corrupt(id, v, e))?;
            checkpoint_delta::apply(&mut doc, &delta).map_err(|e| corrupt(id, v, e))?;
            prev = link(&record);
            dict = dict_of(delta.as_bytes()).to_vec();
        }
        if nonce.as_ref() != Some(&prev) {
            return Err(corrupt(
                id,
                version,
                "the last delta is not the one written last (altered)",
            ));
        }
        let state = serde_json::from_value(doc).map_err(|e| corrupt(id, version, e))?;
        Ok(Some(Checkpoint { version, state }))
    }

    /// Writes `state` as version `expected + 1` if the stored version is still `expected`
    /// (0 = none stored yet): a delta against `expected` when this process wrote it, else a
    /// snapshot (see the module docs). Returns the new version, or `None` when someone
    /// else wrote.
    pub async fn save_state(&self, state: &DebateState, expected: u64) -> Result<Option<u64>> {
        self.save_transition(state, None, expected, &[]).await
    }

    /// [`RedisStore::save_state`] with the transition's task bodies (`<task id>#<attempt>`
    /// → the task's JSON, see `put_task_bodies`), stored by the same script only when the
    /// checkpoint is: one round trip for the transition's writes. `revisions`: which
    /// rounds changed, from the state's owner (see [`CheckpointWriter::prepare_revised`]).
    pub async fn save_transition(
        &self,
        state: &DebateState,
        revisions: Option<RoundRevisions<'_>>,
        expected: u64,
        bodies: &[(String, String)],
    ) -> Result<Option<u64>> {
        let id = state.id.as_str();
        let mut prepared = self.shapes.prepare_revised(state, revisions, expected)?;
        loop {
            let mut script = match &prepared.write {
                CheckpointWrite::Delta {
                    expected_nonce,
                    nonce,
                    record,
                } => {
                    let mut s = SAVE_DELTA
                        .get_or_init(|| Script::new(SAVE_DELTA_SCRIPT))
                        .key(key(id, "state"));
                    s.key(key(id, "tasks"))
                        .arg(expected)
                        .arg(prepared.next)
                        .arg(expected_nonce)
                        .arg(nonce)
                        .arg(record);
                    s
                }
                CheckpointWrite::Snapshot { json, nonce } => {
                    let mut s = SAVE_FULL
                        .get_or_init(|| Script::new(SAVE_FULL_SCRIPT))
                        .key(key(id, "state"));
                    s.key(key(id, "tasks"))
                        .arg(expected)
                        .arg(prepared.next)
                        .arg(nonce)
                        .arg(json)
                        .arg(CHECKPOINT_FORMAT);
                    s
                }
            };
            for (field, json) in bodies {
                script.arg(field).arg(json);
            }
            let r: i64 = script.invoke_async(&mut self.conn()).await?;
            match r {
                1 => {
                    let next = prepared.next;
                    self.shapes.written(id, prepared);
                    self.replicate("checkpoint", id).await?;
                    return Ok(Some(next));
                }
                // The delta's version was current, but not written by the write this
                // delta was made against: a snapshot instead.
                2 if matches!(prepared.write, CheckpointWrite::Delta { .. }) => {
                    let known = prepared.keep.map(|w| (w.shape, w.rounds));
                    prepared = self.shapes.snapshot(state, revisions, expected, known)?;
                }
                _ => return Ok(None),
            }
        }
    }

    /// How many checkpoint shapes this store keeps, and their approximate bytes.
    pub fn checkpoint_shapes(&self) -> (usize, usize) {
        self.shapes.footprint()
    }
}
