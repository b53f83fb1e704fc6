//! The debates' files as the API reads them (blocking file work, run off the async
//! threads): the list of checkpoints, one state without its spec, and the decision records
//! beside the checkpoints.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use parley_protocol::{DebateSpec, DebateState};
use serde::Deserialize;
use serde_json::Value;

use super::{lock, Driver, Inner, MAX_LISTED};
use crate::backend::{problem_preview, ApiError, DebateListItem};

impl Inner {
    /// Writes the decision record of a debate that has finished (best effort: a record
    /// that cannot be written is logged; `parley record` can make it again).
    pub(super) fn write_record(
        &self,
        spec: &DebateSpec,
        state: &DebateState,
    ) -> Option<parley_record::Record> {
        let path = parley_record::files::record_path_of(&self.store.path_of(&state.id));
        match parley_record::files::write(state, Some(spec), self.record_key.as_deref(), &path) {
            Ok(r) => {
                tracing::info!(
                    debate = %state.id,
                    digest = %r.digest(),
                    signed = r.signature.is_some(),
                    "decision record written"
                );
                Some(r)
            }
            Err(e) => {
                tracing::warn!(debate = %state.id, error = %e, "no decision record");
                None
            }
        }
    }

    /// Debate `id`'s decision record: the one saved beside its checkpoint, else (a debate
    /// that finished a moment ago, before its driver wrote it) written now; a 404 naming
    /// why for a debate that has not finished.
    pub(super) fn record(&self, id: &str) -> Result<parley_record::Record, ApiError> {
        let path = parley_record::files::record_path_of(&self.store.path_of(id));
        if let Ok(r) = parley_record::read(&path) {
            return Ok(r);
        }
        let (spec, state) = self.load(id)?;
        if !state.status.is_terminal() {
            return Err(ApiError::new(
                parley_protocol::subjects::ErrorCode::NotFound,
                format!(
                    "debate {id} has no decision record yet: it is {}, and a record is \
                     written when it finishes",
                    state.status.as_str()
                ),
            ));
        }
        self.write_record(&spec, &state).ok_or_else(|| {
            ApiError::internal(format!("cannot write the decision record of debate {id}"))
        })
    }

    /// `GET /v1/debates` (blocking file work): the newest [`MAX_LISTED`] checkpoints, kept
    /// in a heap of that size while the directory is read, however many files it holds.
    pub(super) fn list(&self) -> Result<Vec<DebateListItem>, ApiError> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let dir = self.store.dir();
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(ApiError::internal(format!(
                    "cannot read {}: {e}",
                    dir.display()
                )))
            }
        };
        // The oldest of the kept files on top, so a newer one replaces it.
        let mut newest: BinaryHeap<Reverse<(SystemTime, u64, PathBuf)>> =
            BinaryHeap::with_capacity(MAX_LISTED + 1);
        for e in entries.flatten() {
            let Ok(name) = e.file_name().into_string() else {
                continue;
            };
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            if !parley_protocol::is_valid_debate_id(id) {
                continue;
            }
            let Ok(meta) = e.metadata() else { continue };
            let Ok(modified) = meta.modified() else {
                continue;
            };
            newest.push(Reverse((modified, meta.len(), e.path())));
            if newest.len() > MAX_LISTED {
                newest.pop();
            }
        }
        let files: Vec<(SystemTime, u64, PathBuf)> =
            newest.into_iter().map(|Reverse(f)| f).collect();
        // The cache holds the listed files only.
        {
            let mut briefs = lock(&self.briefs);
            briefs.retain(|path, _| files.iter().any(|f| &f.2 == path));
        }
        let mut items = Vec::with_capacity(files.len());
        for (modified, len, path) in files {
            let Some(mut item) = self.brief(&path, modified, len) else {
                continue;
            };
            let live = lock(&self.live).get(&item.id).cloned();
            if let Some(live) = live {
                if let Some(last) = lock(&live.events).last() {
                    if let Ok(v) = serde_json::from_str::<Value>(&last.json) {
                        let p = &v["progress"];
                        item.phase = p["phase"].as_str().unwrap_or_default().to_string();
                        if let Some(r) = p["rounds"].as_u64() {
                            item.rounds = u32::try_from(r).unwrap_or(item.rounds);
                        }
                    }
                }
                item.live = live
                    .driver
                    .try_lock()
                    .map_or(true, |d| d.as_ref().is_some_and(Driver::running));
            }
            items.push(item);
        }
        items.sort_by_key(|i| std::cmp::Reverse(i.updated_at));
        Ok(items)
    }

    /// `GET /v1/debates/{id}` (blocking file work): the checkpoint without its spec.
    pub(super) fn state(&self, id: &str) -> Result<Value, ApiError> {
        let path = self.store.path_of(id);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ApiError::not_found(id))
            }
            Err(e) => return Err(ApiError::internal(format!("cannot read debate {id}: {e}"))),
        };
        let mut v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::internal(format!("debate {id} is not readable: {e}")))?;
        if let Some(fields) = v.as_object_mut() {
            fields.remove(parley_engine::store::SPEC_FIELD);
        }
        // A state file dialectic wrote is shown converted to Parley's shape.
        if serde_json::from_value::<DebateState>(v.clone()).is_err() {
            if let Ok(state) = parley_protocol::saved_state_from_value(v.clone()) {
                v = serde_json::to_value(state).map_err(|e| ApiError::internal(e.to_string()))?;
            }
        }
        Ok(v)
    }

    /// The list entry of a checkpoint file, from the cache while the file is unchanged.
    fn brief(&self, path: &Path, modified: SystemTime, len: u64) -> Option<DebateListItem> {
        if let Some((m, l, item)) = lock(&self.briefs).get(path) {
            if *m == modified && *l == len {
                return Some(item.clone());
            }
        }
        let bytes = std::fs::read(path).ok()?;
        let b: Brief = serde_json::from_slice(&bytes).ok()?;
        let item = DebateListItem {
            problem: problem_preview(&b.problem),
            status: b.status,
            round: b.current_round,
            rounds: b.spec.map_or(0, |s| s.debate.rounds),
            phase: String::new(),
            confidence: b.final_solution.map(|s| s.confidence),
            updated_at: b.updated_at,
            owner: b.owner,
            live: false,
            id: b.id,
        };
        lock(&self.briefs).insert(path.to_path_buf(), (modified, len, item.clone()));
        Some(item)
    }
}

/// What a list entry needs of a checkpoint (the rest is skipped).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Brief {
    id: String,
    status: String,
    problem: String,
    current_round: u32,
    #[serde(default)]
    final_solution: Option<BriefSolution>,
    updated_at: DateTime<Utc>,
    #[serde(default)]
    spec: Option<BriefSpec>,
    #[serde(default)]
    owner: Option<String>,
}

#[derive(Deserialize)]
struct BriefSolution {
    confidence: f64,
}

#[derive(Deserialize)]
struct BriefSpec {
    debate: BriefDebate,
}

#[derive(Deserialize)]
struct BriefDebate {
    rounds: u32,
}
