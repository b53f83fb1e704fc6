//! Checkpoint stores.

use std::path::{Path, PathBuf};

use parley_protocol::{DebateSpec, DebateState};

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

/// Why a saved debate cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0:?} is not a debate id (deb-YYYYMMDD-HHMMSS-RAND)")]
    BadId(String),
    #[error("no saved debate {}", .0.display())]
    NotFound(PathBuf),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a saved debate: {source}")]
    Decode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{0} holds no debate spec (saved by an older parley): it cannot be continued")]
    NoSpec(PathBuf),
}

/// The top-level field of a checkpoint file that holds the debate's spec.
pub const SPEC_FIELD: &str = "spec";

/// Saves each debate as `<dir>/<id>.json`, atomically (write a temporary file, then rename),
/// so a crash never leaves a half-written checkpoint.
///
/// The file is the [`DebateState`] (dialectic's shape); [`FileStore::save_with_spec`] adds
/// the debate's spec as one more top-level field, `spec`, so the file alone is enough to
/// continue the debate ([`FileStore::load`]): `parley resume` / `parley retry`. Readers of
/// the state shape ignore it.
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

    /// Saves the state alone.
    pub fn save(&self, state: &DebateState) -> Result<PathBuf, StoreError> {
        let mut doc = serde_json::to_value(state)?;
        mark_suspended(state, &mut doc);
        self.write(state, serde_json::to_vec_pretty(&doc)?)
    }

    /// Saves the state with the spec it runs, as a checkpoint [`FileStore::load`] reads.
    pub fn save_with_spec(
        &self,
        state: &DebateState,
        spec: &DebateSpec,
    ) -> Result<PathBuf, StoreError> {
        let mut doc = serde_json::to_value(state)?;
        mark_suspended(state, &mut doc);
        if let Some(fields) = doc.as_object_mut() {
            fields.insert(SPEC_FIELD.into(), serde_json::to_value(spec)?);
        }
        self.write(state, serde_json::to_vec_pretty(&doc)?)
    }

    fn write(&self, state: &DebateState, bytes: Vec<u8>) -> Result<PathBuf, StoreError> {
        let path = self.path_of(&state.id);
        let write_err = |source| StoreError::Write {
            path: path.clone(),
            source,
        };
        create_private_dir(&self.dir).map_err(write_err)?;
        let tmp = self.dir.join(format!(".{}.json.tmp", state.id));
        let _ = std::fs::remove_file(&tmp);
        private_file()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes))
            .map_err(write_err)?;
        std::fs::rename(&tmp, &path).map_err(write_err)?;
        Ok(path)
    }

    /// Whether a checkpoint of debate `id` exists (false for a malformed id).
    pub fn exists(&self, id: &str) -> bool {
        parley_protocol::is_valid_debate_id(id) && self.path_of(id).is_file()
    }

    /// The spec and state of a debate saved with [`FileStore::save_with_spec`]. The id is
    /// checked first, so it can never name a path outside the folder.
    pub fn load(&self, id: &str) -> Result<(DebateSpec, DebateState), LoadError> {
        let (path, mut doc) = self.read(id)?;
        let decode = |source| LoadError::Decode {
            path: path.clone(),
            source,
        };
        let spec = doc
            .as_object_mut()
            .and_then(|fields| fields.remove(SPEC_FIELD))
            .ok_or_else(|| LoadError::NoSpec(path.clone()))?;
        let spec: DebateSpec = serde_json::from_value(spec).map_err(decode)?;
        let state = parley_protocol::saved_state_from_value(doc).map_err(decode)?;
        Ok((spec, state))
    }

    /// The state of a saved debate, with or without its spec: Parley's checkpoint or a state
    /// file dialectic wrote (converted, see [`parley_protocol::saved`]). Enough to show or
    /// report a debate, not to continue it.
    pub fn load_state(&self, id: &str) -> Result<DebateState, LoadError> {
        let (path, mut doc) = self.read(id)?;
        if let Some(fields) = doc.as_object_mut() {
            fields.remove(SPEC_FIELD);
        }
        parley_protocol::saved_state_from_value(doc)
            .map_err(|source| LoadError::Decode { path, source })
    }

    /// The JSON of debate `id`'s file, after checking the id.
    fn read(&self, id: &str) -> Result<(PathBuf, serde_json::Value), LoadError> {
        if !parley_protocol::is_valid_debate_id(id) {
            return Err(LoadError::BadId(id.to_string()));
        }
        let path = self.path_of(id);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LoadError::NotFound(path))
            }
            Err(source) => return Err(LoadError::Read { path, source }),
        };
        match serde_json::from_slice(&bytes) {
            Ok(doc) => Ok((path, doc)),
            Err(source) => Err(LoadError::Decode { path, source }),
        }
    }
}

/// A debate waiting for clarification answers says so as dialectic does
/// (`suspendedAtNode`), so dialectic's tools read it as suspended there.
fn mark_suspended(state: &DebateState, doc: &mut serde_json::Value) {
    if state.status == parley_protocol::DebateStatus::AwaitingClarifications {
        if let Some(fields) = doc.as_object_mut() {
            fields.insert(
                parley_protocol::SUSPENDED_AT_NODE_FIELD.into(),
                parley_protocol::SUSPENDED_FOR_ANSWERS.into(),
            );
        }
    }
}

/// Why answers could not be applied to a saved debate.
#[derive(Debug, thiserror::Error)]
pub enum AnswerSavedError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Refused(#[from] crate::AnswerError),
    #[error(transparent)]
    Save(#[from] StoreError),
}

/// Applies `answers` to an embedded debate waiting for clarification answers in `store`
/// (the library entry point of `parley run --clarify`, and of anything else that answers
/// an embedded debate, such as a web page): loads the checkpoint, checks the answers
/// ([`crate::Machine::check_answers`]: a refusal changes nothing), records them and saves
/// the checkpoint before returning, so the answers survive a crash from then on.
///
/// Returns the debate's machine and the events of the transition. The debate goes on when
/// the caller drives the machine with [`crate::Input::Resume`] (e.g.
/// [`crate::run_debate_until`]): the next clarification iteration's tasks, or round 1's,
/// are dispatched then. Answering only some of the open questions keeps the debate waiting
/// (its status stays `awaiting_clarifications`).
pub fn answer_saved(
    store: &FileStore,
    id: &str,
    answers: Vec<parley_protocol::Answer>,
) -> Result<(crate::Machine, Vec<parley_protocol::DebateEvent>), AnswerSavedError> {
    let (spec, state) = store.load(id)?;
    let mut machine = crate::Machine::from_checkpoint(spec, state);
    machine.check_answers(&answers)?;
    let events = machine
        .handle(crate::Input::Answers(answers), chrono::Utc::now())
        .into_iter()
        .filter_map(|e| match e {
            crate::Effect::Emit(event) => Some(event),
            _ => None,
        })
        .collect();
    store.save_with_spec(machine.state(), machine.spec())?;
    Ok((machine, events))
}

/// Options that create a file only its owner can read and write (0600 on Unix): a debate's
/// checkpoint and events hold its problem, context and every contribution. Existing files
/// keep their mode.
pub fn private_file() -> std::fs::OpenOptions {
    let mut o = std::fs::OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o
}

/// Creates `dir` (and its parents) when missing; a folder this creates is its owner's
/// only (0700 on Unix), so the debate ids in it are not listed to other users.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn checkpoints_are_readable_by_their_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("debates");
        let store = FileStore::new(&dir);
        let spec: DebateSpec = serde_json::from_value(serde_json::json!({
            "problem": "p",
            "agents": [{"id": "a", "name": "A", "role": "architect", "model": "m"}],
            "judge": {"id": "j", "name": "J", "role": "generalist", "model": "m"},
        }))
        .unwrap();
        let m = crate::Machine::new(
            "deb-20260101-000000-aaaaaa".into(),
            spec.clone(),
            chrono::Utc::now(),
        );
        let path = store.save_with_spec(m.state(), &spec).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir), 0o700);
        // Saved again (an atomic replace): still private, and readable back.
        store.save_with_spec(m.state(), &spec).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert!(store.load(&m.state().id).is_ok());
    }

    /// Parley's own checkpoint says `suspendedAtNode` as dialectic does while it waits for
    /// answers (and not otherwise), and keeps the user's feedback through a save and a load.
    #[test]
    fn a_waiting_debate_says_where_it_is_suspended_and_feedback_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path());
        let spec = parley_tests::two_agent_spec();
        let id = parley_protocol::new_debate_id(chrono::Utc::now());
        let machine = crate::Machine::new(id.clone(), spec.clone(), chrono::Utc::now());
        let mut state = machine.state().clone();
        state.status = parley_protocol::DebateStatus::AwaitingClarifications;
        state.user_feedback = Some(1);
        let path = store.save_with_spec(&state, &spec).unwrap();
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(doc["suspendedAtNode"], "clarification_input");
        assert_eq!(doc["userFeedback"], 1);
        let (_, loaded) = store.load(&id).unwrap();
        assert_eq!(
            loaded.status,
            parley_protocol::DebateStatus::AwaitingClarifications
        );
        assert_eq!(loaded.user_feedback, Some(1));

        state.status = parley_protocol::DebateStatus::Running;
        store.save(&state).unwrap();
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert!(doc.get("suspendedAtNode").is_none(), "{doc}");
        assert_eq!(store.load_state(&id).unwrap().user_feedback, Some(1));
    }
}
