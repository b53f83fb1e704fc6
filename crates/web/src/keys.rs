//! Per-user API keys: the operator's key file, re-read while the server runs, and the
//! principal a request acts as.
//!
//! The file (`--api-keys FILE`) lists each key's name, role and SHA-256 (never the key):
//!
//! ```toml
//! [[keys]]
//! name = "alice"          # [A-Za-z0-9_-]{1,64}; recorded as the owner of her debates
//! role = "user"           # `user`: her own debates only; `admin`: every debate
//! sha256 = "9f86d0...08"  # hex SHA-256 of the key (`parley serve --new-api-key` prints both)
//! ```
//!
//! or the same as JSON (`{"keys": [{"name", "role", "sha256"}]}`, a file ending in `.json`).
//! The file is read at start (a bad file stops the start) and then every
//! [`RELOAD_INTERVAL`]: a changed file replaces the keys at once (a removed key stops
//! working without a restart); a file that does not parse keeps the previous keys and logs
//! the problem (never a key or a hash). A presented key is hashed and compared with every
//! listed hash in constant time.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

/// How often the key file is read again.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);
/// Bytes in a key file, at most.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Keys in a file, at most.
pub const MAX_KEYS: usize = 10_000;
/// The prefix of the keys `parley serve --new-api-key` makes.
pub const KEY_PREFIX: &str = "pk_";

/// Why a key file was not loaded: every problem, with its entry (`keys[2].sha256: ...`),
/// never a key or a hash.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {size} bytes, the limit is {max}", path.display(), max = MAX_FILE_BYTES)]
    TooLarge { path: PathBuf, size: u64 },
    #[error("not UTF-8 text")]
    NotUtf8,
    /// Not JSON or TOML of the key file's shape.
    #[error("not a key file: {0}")]
    NotAKeyFile(String),
    #[error("keys: {0} keys, the limit is {max}", max = MAX_KEYS)]
    TooManyKeys(usize),
    /// The entries' problems (`keys[0].name: ...`), one each.
    #[error("{}", .0.join("; "))]
    BadEntries(Vec<String>),
    /// A problem of the file at `path`.
    #[error("{}: {problem}", path.display())]
    InFile {
        path: PathBuf,
        problem: Box<KeyFileError>,
    },
}

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Its own debates only.
    User,
    /// Every debate.
    Admin,
}

/// Who a request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's name, recorded as the owner of the debates it creates; `None` for the
    /// operator's single token (or no authentication), whose debates have no owner.
    pub name: Option<String>,
    pub role: Role,
}

impl Principal {
    /// The operator (the `--auth-token`, or `--no-auth` on loopback).
    pub fn operator() -> Self {
        Self {
            name: None,
            role: Role::Admin,
        }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether this principal may see a debate owned by `owner`.
    pub fn may_see(&self, owner: Option<&str>) -> bool {
        self.is_admin() || (self.name.is_some() && self.name.as_deref() == owner)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    #[serde(default)]
    keys: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    name: String,
    role: Role,
    sha256: String,
}

/// One listed key.
struct Key {
    name: String,
    role: Role,
    digest: [u8; 32],
}

/// A set of keys, parsed and checked.
#[derive(Default)]
pub struct KeySet {
    keys: Vec<Key>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeySet({} keys)", self.keys.len())
    }
}

impl KeySet {
    /// Parses a key file's text (`json`: JSON, else TOML); every problem is reported with
    /// its entry (`keys[2].sha256: ...`), never with a hash.
    pub fn parse(text: &str, json: bool) -> Result<Self, KeyFileError> {
        let file: KeyFile = if json {
            serde_json::from_str(text).map_err(|e| KeyFileError::NotAKeyFile(e.to_string()))?
        } else {
            toml::from_str(text).map_err(|e| KeyFileError::NotAKeyFile(e.message().to_string()))?
        };
        if file.keys.len() > MAX_KEYS {
            return Err(KeyFileError::TooManyKeys(file.keys.len()));
        }
        let mut problems = Vec::new();
        let mut keys = Vec::with_capacity(file.keys.len());
        for (i, k) in file.keys.iter().enumerate() {
            if !parley_protocol::is_valid_id(&k.name) {
                problems.push(format!(
                    "keys[{i}].name: {:?} is not a key name (1-{} of A-Z a-z 0-9 _ -)",
                    parley_protocol::preview(&k.name, 40),
                    parley_protocol::limits::MAX_ID_BYTES
                ));
            } else if keys.iter().any(|o: &Key| o.name == k.name) {
                problems.push(format!("keys[{i}].name: {:?} is listed twice", k.name));
            }
            match decode_hex32(&k.sha256) {
                Some(digest) => keys.push(Key {
                    name: k.name.clone(),
                    role: k.role,
                    digest,
                }),
                None => problems.push(format!(
                    "keys[{i}].sha256: not a SHA-256 (64 hex digits; `parley serve --new-api-key NAME` prints one)"
                )),
            }
        }
        if problems.is_empty() {
            Ok(Self { keys })
        } else {
            Err(KeyFileError::BadEntries(problems))
        }
    }

    /// The principal of a presented key, comparing its hash with every listed one in
    /// constant time (the time does not depend on which key matched, if any).
    pub fn authenticate(&self, presented: &str) -> Option<Principal> {
        let d: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for k in &self.keys {
            let diff = d
                .iter()
                .zip(k.digest.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if diff == 0 && found.is_none() {
                found = Some(Principal {
                    name: Some(k.name.clone()),
                    role: k.role,
                });
            }
        }
        found
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn decode_hex32(s: &str) -> Option<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The hex SHA-256 of a key, as the key file lists it.
pub fn hash_key(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A new random key (`pk_` and 32 bytes from the operating system, hex) and its hash.
pub fn new_key() -> (String, String) {
    let key = format!("{KEY_PREFIX}{}", crate::auth::generate());
    let hash = hash_key(&key);
    (key, hash)
}

/// The operator's key file, re-read every [`RELOAD_INTERVAL`]; see the module docs.
pub struct KeyFileWatch {
    path: PathBuf,
    /// The keys in force (replaced whole when the file changes and parses).
    current: RwLock<Arc<KeySet>>,
    /// The bytes last read, so an unchanged file is not parsed again and a bad file's
    /// problem is logged once.
    last: std::sync::Mutex<Vec<u8>>,
}

impl std::fmt::Debug for KeyFileWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyFileWatch({})", self.path.display())
    }
}

fn read_capped(path: &Path) -> Result<Vec<u8>, KeyFileError> {
    let unreadable = |source| KeyFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(KeyFileError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
        });
    }
    std::fs::read(path).map_err(unreadable)
}

fn parse_bytes(path: &Path, bytes: &[u8]) -> Result<KeySet, KeyFileError> {
    let text = std::str::from_utf8(bytes).map_err(|_| KeyFileError::NotUtf8)?;
    let json = path.extension().is_some_and(|e| e == "json");
    KeySet::parse(text, json).map_err(|e| KeyFileError::InFile {
        path: path.to_path_buf(),
        problem: Box::new(e),
    })
}

impl KeyFileWatch {
    /// Reads `path` now (a missing or bad file is an error naming the problem).
    pub fn open(path: impl Into<PathBuf>) -> Result<Arc<Self>, KeyFileError> {
        let path = path.into();
        let bytes = read_capped(&path)?;
        let set = parse_bytes(&path, &bytes)?;
        Ok(Arc::new(Self {
            path,
            current: RwLock::new(Arc::new(set)),
            last: std::sync::Mutex::new(bytes),
        }))
    }

    /// The keys in force.
    pub fn keys(&self) -> Arc<KeySet> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the file again; a change that parses replaces the keys. Returns whether the
    /// keys changed.
    pub fn reload(&self) -> bool {
        let bytes = match read_capped(&self.path) {
            Ok(b) => b,
            Err(e) => {
                let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
                if !last.is_empty() {
                    tracing::error!("API key file unreadable; keeping the previous keys: {e}");
                    last.clear();
                }
                return false;
            }
        };
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == bytes {
            return false;
        }
        let changed = match parse_bytes(&self.path, &bytes) {
            Ok(set) => {
                tracing::info!(keys = set.len(), "API keys reloaded");
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(set);
                true
            }
            Err(e) => {
                tracing::error!("API key file not loaded; keeping the previous keys: {e}");
                false
            }
        };
        *last = bytes;
        changed
    }

    /// Re-reads the file every [`RELOAD_INTERVAL`] (on the blocking pool) until `stop`.
    pub fn spawn_reloader(self: &Arc<Self>, stop: CancellationToken) {
        let watch = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(RELOAD_INTERVAL) => {}
                }
                let w = watch.clone();
                let _ = tokio::task::spawn_blocking(move || w.reload()).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_authenticate_by_hash_only() {
        let (key, hash) = new_key();
        assert!(key.starts_with(KEY_PREFIX));
        let text = format!("[[keys]]\nname = \"alice\"\nrole = \"user\"\nsha256 = \"{hash}\"\n");
        let set = KeySet::parse(&text, false).unwrap();
        let p = set.authenticate(&key).unwrap();
        assert_eq!(p.name.as_deref(), Some("alice"));
        assert_eq!(p.role, Role::User);
        assert!(set.authenticate(&hash).is_none(), "the hash is not the key");
        assert!(set.authenticate("").is_none());
        assert!(!format!("{set:?}").contains(&hash));
    }

    #[test]
    fn bad_files_name_every_entry() {
        let json = r#"{"keys": [{"name": "a b", "role": "user", "sha256": "00"},
                                {"name": "ok", "role": "admin", "sha256": "zz"}]}"#;
        let e = KeySet::parse(json, true).unwrap_err();
        assert!(
            matches!(&e, KeyFileError::BadEntries(problems) if problems.len() == 3),
            "{e}"
        );
        let e = e.to_string();
        assert!(e.contains("keys[0].name"), "{e}");
        assert!(e.contains("keys[0].sha256"), "{e}");
        assert!(e.contains("keys[1].sha256"), "{e}");
        let e = KeySet::parse(
            "[[keys]]\nname = \"x\"\nrole = \"root\"\nsha256 = \"\"",
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("root") || e.contains("role"), "{e}");
        let h = hash_key("k");
        let dup = format!(
            r#"{{"keys": [{{"name": "x", "role": "user", "sha256": "{h}"}}, {{"name": "x", "role": "user", "sha256": "{h}"}}]}}"#
        );
        assert!(KeySet::parse(&dup, true)
            .unwrap_err()
            .to_string()
            .contains("twice"));
    }

    #[test]
    fn a_bad_reload_keeps_the_previous_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let (key, hash) = new_key();
        std::fs::write(
            &path,
            format!("[[keys]]\nname = \"a\"\nrole = \"admin\"\nsha256 = \"{hash}\"\n"),
        )
        .unwrap();
        let w = KeyFileWatch::open(&path).unwrap();
        assert!(w.keys().authenticate(&key).is_some());
        std::fs::write(&path, "not [ toml").unwrap();
        assert!(!w.reload());
        assert!(w.keys().authenticate(&key).is_some());
        std::fs::write(&path, "keys = []\n").unwrap();
        assert!(w.reload());
        assert!(w.keys().authenticate(&key).is_none(), "revoked");
    }

    #[test]
    fn principals_see_their_own_debates() {
        let alice = Principal {
            name: Some("alice".into()),
            role: Role::User,
        };
        assert!(alice.may_see(Some("alice")));
        assert!(!alice.may_see(Some("bob")));
        assert!(!alice.may_see(None));
        assert!(Principal::operator().may_see(None));
        assert!(Principal::operator().may_see(Some("bob")));
    }
}
