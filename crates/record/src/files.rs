//! Records on disk, beside the debate's state file: `<stem>.record.json` next to
//! `<stem>.json`, and the signing key's public half as `record-key-<key id>.pub` in the same
//! folder (what `parley run`, `parley record` and an embedded `parley serve` write).

use std::path::{Path, PathBuf};

use parley_protocol::{DebateSpec, DebateState};

use crate::{BuildError, Record, SigningKey};

/// Why a record was not written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("cannot write {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// `dir/<stem>.record.json` for a state file `dir/<stem>.json`.
pub fn record_path_of(state_file: &Path) -> PathBuf {
    let name = state_file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".json").unwrap_or(&name);
    state_file.with_file_name(format!("{stem}.record.json"))
}

/// Builds the record of a finished debate, signs it with `key` and writes it to `path`
/// (atomically, replacing an older record of the same debate); publishes the public key
/// next to it.
pub fn write(
    state: &DebateState,
    spec: Option<&DebateSpec>,
    key: Option<&SigningKey>,
    path: &Path,
) -> Result<Record, WriteError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| WriteError::Io { path, source }
    };
    let mut record = crate::build(state, spec, chrono::Utc::now())?;
    if let Some(k) = key {
        k.sign(&mut record);
        let public = k.public();
        let pubfile = path.with_file_name(format!("record-key-{}.pub", public.key_id()));
        if !pubfile.exists() {
            public.write_new(&pubfile).map_err(|e| WriteError::Io {
                path: pubfile.display().to_string(),
                source: std::io::Error::other(e.to_string()),
            })?;
        }
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, record.to_json() + "\n")
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(io(path))?;
    Ok(record)
}
