//! Checkpoint stores.

use std::path::{Path, PathBuf};

use parley_protocol::DebateState;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("while writing checkpoint {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("while encoding debate state: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Saves each debate as `<dir>/<id>.json`, atomically (write a temporary file, then rename),
/// so a crash never leaves a half-written checkpoint.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn path_of(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn save(&self, state: &DebateState) -> Result<PathBuf, StoreError> {
        let path = self.path_of(&state.id);
        let write_err = |source| StoreError::Write {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(write_err)?;
        let bytes = serde_json::to_vec_pretty(state)?;
        let tmp = self.dir.join(format!(".{}.json.tmp", state.id));
        std::fs::write(&tmp, bytes).map_err(write_err)?;
        std::fs::rename(&tmp, &path).map_err(write_err)?;
        Ok(path)
    }
}
