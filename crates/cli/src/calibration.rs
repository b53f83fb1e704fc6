//! Estimates that learn, embedded: the samples of the debates saved in `./debates/`.
//!
//! The model (keys, the mean and spread, when a key is calibrated) is
//! [`parley_protocol::calibration`], shared with a cluster's estimate (whose samples the
//! coordinator keeps in Redis). [`load`] reads the saved debates of a directory (the
//! embedded `./debates/*.json` checkpoints; decision records `*.record.json` and anything
//! that is not a saved debate are skipped), the newest [`MAX_DEBATES`] files of at most
//! [`MAX_FILE_BYTES`] each, and adds every call of each (keyed by the participant's provider
//! as the estimate resolves it, its configured model and the call's kind).

use std::path::Path;

pub use parley_protocol::calibration::{Basis, Calibration, Key, MAX_SAMPLES, MIN_SAMPLES};
use parley_protocol::AgentConfig;

/// The provider an estimate in front of a cluster keys a participant's calls by: the one it
/// names, else the one the cluster's samples of its model were recorded under, else what
/// this machine would resolve (`local`).
pub fn cluster_provider_of<'a>(
    learned: Calibration,
    local: impl Fn(&AgentConfig) -> String + 'a,
) -> Box<dyn Fn(&AgentConfig) -> String + 'a> {
    Box::new(move |a| {
        a.provider
            .clone()
            .or_else(|| learned.provider_of_model(&a.model).map(str::to_string))
            .unwrap_or_else(|| local(a))
    })
}

/// Saved debates read (the newest by modification time).
pub const MAX_DEBATES: usize = 200;
/// A file larger than this is not read.
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// Reads the saved debates of `dir` (see the module docs); a missing directory is an empty
/// calibration, an unreadable file is skipped.
pub fn load(dir: &Path, provider_of: &dyn Fn(&AgentConfig) -> String) -> Calibration {
    let mut cal = Calibration::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return cal;
    };
    let mut files: Vec<(std::time::SystemTime, std::path::PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let name = path.file_name()?.to_str()?;
            if !name.ends_with(".json") || name.ends_with(".record.json") {
                return None;
            }
            let meta = e.metadata().ok()?;
            (meta.is_file() && meta.len() <= MAX_FILE_BYTES)
                .then(|| (meta.modified().unwrap_or(std::time::UNIX_EPOCH), path))
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    files.truncate(MAX_DEBATES);
    // Oldest first: a key past its limit keeps the newest samples.
    for (_, path) in files.into_iter().rev() {
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        add_saved(&mut cal, &bytes, provider_of);
    }
    cal
}

/// Adds the calls of one saved debate (its bytes as stored); not a debate: nothing.
pub fn add_saved(
    cal: &mut Calibration,
    bytes: &[u8],
    provider_of: &dyn Fn(&AgentConfig) -> String,
) {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return;
    };
    let spec: Option<parley_protocol::DebateSpec> = doc
        .get(parley_engine::store::SPEC_FIELD)
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    let Ok(state) = parley_protocol::saved_state_from_value(doc) else {
        return;
    };
    cal.add_debate(spec.as_ref(), &state, provider_of);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_garbage_are_not_debates() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.record.json"), b"{}").unwrap();
        std::fs::write(dir.path().join("y.json"), b"not json").unwrap();
        std::fs::write(dir.path().join("z.json"), br#"{"id": 5}"#).unwrap();
        let c = load(dir.path(), &|_| "openai".into());
        assert!(c.is_empty());
        assert!(load(&dir.path().join("missing"), &|_| String::new()).is_empty());
    }
}
