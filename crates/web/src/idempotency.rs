//! Idempotency keys of `POST /v1/debates` (`Idempotency-Key` header).
//!
//! A key is scoped to its caller (the API key's name): the same key and the same body
//! name the same debate (the reply repeats its id, with `Idempotent-Replayed: true`); the
//! same key with a different body is refused with 422 `idempotency_key_reused`; a second
//! request with a key whose first request is still being handled gets 409.
//!
//! This server remembers a key for [`TTL`], at most [`MAX_ENTRIES`] keys (past it the
//! oldest is forgotten). In front of a cluster the key also travels with the submission
//! (scoped, as [`scoped_key`]), and the coordinators bind it to the debate in Redis, so a
//! retry that reaches another `serve` replica, or this one after a restart, gets the same
//! debate too.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// How long a key is remembered by one server.
pub const TTL: Duration = Duration::from_secs(24 * 3600);
/// Keys remembered by one server, at most.
pub const MAX_ENTRIES: usize = 10_000;
/// Bytes in a key, at most (the protocol's limit).
pub const MAX_KEY_BYTES: usize = parley_protocol::limits::MAX_IDEMPOTENCY_KEY_BYTES;

enum Slot {
    /// The first request with the key is being handled.
    Pending,
    /// It created this debate.
    Done(String),
}

struct Entry {
    /// SHA-256 of the request body as parsed (so spacing and field order do not matter).
    fingerprint: [u8; 32],
    slot: Slot,
    at: Instant,
}

/// What a request with a key does.
#[derive(Debug, PartialEq, Eq)]
pub enum Begin {
    /// First time: create the debate, then [`IdempotencyStore::finish`].
    New,
    /// Seen with the same body: this debate.
    Replay(String),
    /// Seen with another body.
    Mismatch,
    /// The first request with this key is still being handled.
    InFlight,
}

/// The keys one server remembers; see the module docs.
#[derive(Default)]
pub struct IdempotencyStore {
    entries: Mutex<HashMap<String, Entry>>,
}

/// The key as the cluster sees it: the caller's name and the key, hashed, so two callers'
/// keys never meet and the length is fixed.
pub fn scoped_key(owner: Option<&str>, key: &str) -> String {
    let mut h = Sha256::new();
    h.update(owner.unwrap_or("").as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("v1-{hex}")
}

/// The fingerprint of a request body.
pub fn fingerprint(canonical: &[u8]) -> [u8; 32] {
    Sha256::digest(canonical).into()
}

impl IdempotencyStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks the scoped key up and, when new, holds it as pending.
    pub fn begin(&self, scoped: &str, fingerprint: [u8; 32]) -> Begin {
        let now = Instant::now();
        let mut entries = self.lock();
        if let Some(e) = entries.get(scoped) {
            if now.duration_since(e.at) < TTL {
                if e.fingerprint != fingerprint {
                    return Begin::Mismatch;
                }
                return match &e.slot {
                    Slot::Pending => Begin::InFlight,
                    Slot::Done(id) => Begin::Replay(id.clone()),
                };
            }
        }
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, e| now.duration_since(e.at) < TTL);
        }
        if entries.len() >= MAX_ENTRIES {
            if let Some(oldest) = entries
                .iter()
                .filter(|(_, e)| matches!(e.slot, Slot::Done(_)))
                .min_by_key(|(_, e)| e.at)
                .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(
            scoped.to_string(),
            Entry {
                fingerprint,
                slot: Slot::Pending,
                at: now,
            },
        );
        Begin::New
    }

    /// The first request's outcome: its debate, or `None` when it failed (the key is
    /// forgotten, so a retry may create the debate).
    pub fn finish(&self, scoped: &str, debate: Option<String>) {
        let mut entries = self.lock();
        match debate {
            Some(id) => {
                if let Some(e) = entries.get_mut(scoped) {
                    e.slot = Slot::Done(id);
                }
            }
            None => {
                entries.remove(scoped);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_key_same_body_replays_other_body_mismatches() {
        let s = IdempotencyStore::default();
        let k = scoped_key(Some("alice"), "k1");
        assert_eq!(s.begin(&k, fingerprint(b"a")), Begin::New);
        assert_eq!(s.begin(&k, fingerprint(b"a")), Begin::InFlight);
        s.finish(&k, Some("deb-1".into()));
        assert_eq!(
            s.begin(&k, fingerprint(b"a")),
            Begin::Replay("deb-1".into())
        );
        assert_eq!(s.begin(&k, fingerprint(b"b")), Begin::Mismatch);
        // Another caller's same key is another key.
        let other = scoped_key(Some("bob"), "k1");
        assert_ne!(k, other);
        assert_eq!(s.begin(&other, fingerprint(b"b")), Begin::New);
        // A failed first request frees the key.
        s.finish(&other, None);
        assert_eq!(s.begin(&other, fingerprint(b"c")), Begin::New);
        assert!(k.len() <= MAX_KEY_BYTES);
    }

    #[test]
    fn the_store_is_bounded() {
        let s = IdempotencyStore::default();
        for i in 0..MAX_ENTRIES + 10 {
            let k = format!("k{i}");
            assert_eq!(s.begin(&k, fingerprint(b"x")), Begin::New);
            s.finish(&k, Some(format!("d{i}")));
        }
        assert!(s.len() <= MAX_ENTRIES);
    }
}
