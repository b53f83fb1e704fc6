//! Signing keys and public keys, and signing a record.
//!
//! Key files are text: lines starting with `#` are comments, the one other non-empty line is
//! the key in base64 (standard alphabet, padded). A private key file holds the 32-byte
//! Ed25519 seed (RFC 8032's private key); a public key file the 32-byte public key. Both are
//! read with a size cap ([`KEY_FILE_MAX_BYTES`]). A key's id ([`key_id`]) is the first 16
//! bytes of the SHA-256 of its public key, in hex.
//!
//! The private key is held in [`SigningKey`], whose `Debug` prints `[redacted]`, whose
//! errors never quote the file, and which is wiped from memory when dropped.

use std::io::Read as _;
use std::path::Path;

use base64::Engine as _;
use ed25519_dalek::Signer as _;

use crate::canonical::sha256_hex;
use crate::schema::{Record, Signature, ED25519};

/// The largest key file read.
pub const KEY_FILE_MAX_BYTES: u64 = 4096;

/// Why a key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("the {what} {path} is larger than {KEY_FILE_MAX_BYTES} bytes: not a key file")]
    TooLarge { what: &'static str, path: String },
    #[error("the {what} {path} is not a key file: {reason}")]
    Format {
        what: &'static str,
        path: String,
        reason: &'static str,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// The operator's Ed25519 signing key. Never printed: `Debug` shows `[redacted]`.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// A public key that checks signatures.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.key_id())
    }
}

/// The id of the key whose public half is `public`: the first 16 bytes of its SHA-256, hex.
pub fn key_id(public: &[u8; 32]) -> String {
    sha256_hex(public)[..32].to_string()
}

/// The one base64 line of a key file, decoded to 32 bytes.
fn read_key_file(path: &Path, what: &'static str) -> Result<[u8; 32], KeyError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| KeyError::Read {
        what,
        path: shown.clone(),
        source,
    })?;
    let mut bytes = Vec::new();
    file.take(KEY_FILE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| KeyError::Read {
            what,
            path: shown.clone(),
            source,
        })?;
    if bytes.len() as u64 > KEY_FILE_MAX_BYTES {
        return Err(KeyError::TooLarge { what, path: shown });
    }
    let bad = |reason| KeyError::Format {
        what,
        path: shown.clone(),
        reason,
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| bad("it is not UTF-8 text"))?;
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let line = lines.next().ok_or_else(|| bad("it holds no key line"))?;
    if lines.next().is_some() {
        return Err(bad("it holds more than one key line"));
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(line)
        .map_err(|_| bad("the key line is not base64"))?;
    raw.try_into()
        .map_err(|_| bad("the key is not 32 bytes (an Ed25519 seed or public key)"))
}

/// Writes `text` to a new file at `path` (never over an existing one); `private` makes it
/// readable by its owner only.
fn write_new(path: &Path, text: &str, private: bool) -> Result<(), KeyError> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let err = |source| KeyError::Write {
        path: path.display().to_string(),
        source,
    };
    let mut f = options.open(path).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)
}

impl SigningKey {
    /// A new random key (from the operating system's generator).
    pub fn generate() -> Self {
        use rand::RngCore as _;
        let mut seed = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut seed);
        let key = Self(ed25519_dalek::SigningKey::from_bytes(&seed));
        seed.fill(0);
        key
    }

    /// Reads a private key file (see the module doc).
    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        let mut seed = read_key_file(path, "signing key file")?;
        let key = Self(ed25519_dalek::SigningKey::from_bytes(&seed));
        seed.fill(0);
        Ok(key)
    }

    /// Writes the key to a new private file (mode 0600) at `path`; never overwrites.
    pub fn write_new(&self, path: &Path) -> Result<(), KeyError> {
        let text = format!(
            "# Parley decision-record signing key {} (Ed25519 seed, base64). Keep it secret.\n{}\n",
            self.public().key_id(),
            base64::engine::general_purpose::STANDARD.encode(self.0.to_bytes())
        );
        write_new(path, &text, true)
    }

    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// Signs `record` (replacing any signature it had).
    pub fn sign(&self, record: &mut Record) {
        record.signature = None;
        let sig = self.0.sign(&record.signed_bytes());
        record.signature = Some(Signature {
            algorithm: ED25519.into(),
            key_id: self.public().key_id(),
            value: base64::engine::general_purpose::STANDARD.encode(sig.to_bytes()),
        });
    }
}

impl PublicKey {
    /// Reads a public key file (see the module doc).
    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        let raw = read_key_file(path, "public key file")?;
        ed25519_dalek::VerifyingKey::from_bytes(&raw)
            .map(Self)
            .map_err(|_| KeyError::Format {
                what: "public key file",
                path: path.display().to_string(),
                reason: "the key is not a valid Ed25519 public key",
            })
    }

    pub fn key_id(&self) -> String {
        key_id(self.0.as_bytes())
    }

    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0.as_bytes())
    }

    /// The text of its public key file.
    pub fn file_text(&self) -> String {
        format!(
            "# Parley decision-record public key {} (Ed25519, base64)\n{}\n",
            self.key_id(),
            self.to_base64()
        )
    }

    /// Writes its public key file at `path`; never overwrites.
    pub fn write_new(&self, path: &Path) -> Result<(), KeyError> {
        write_new(path, &self.file_text(), false)
    }

    /// Whether `signature` (64 bytes) signs `message` with this key (strict verification:
    /// no malleable or small-order forms).
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        let Ok(bytes) = <[u8; 64]>::try_from(signature) else {
            return false;
        };
        let sig = ed25519_dalek::Signature::from_bytes(&bytes);
        self.0.verify_strict(message, &sig).is_ok()
    }
}
