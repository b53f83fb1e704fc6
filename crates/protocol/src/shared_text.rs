//! [`SharedText`]: an immutable string whose equal copies share one allocation.
//!
//! Every live debate holds its spec (prompt texts, problem, context) and its state (the
//! problem and context again); debates submitted with the same prompt files carry the
//! same texts. A `SharedText` long enough to matter ([`INTERN_MIN_BYTES`] or more) is
//! interned when it is made: a process-wide table keyed by a hash of the content (with a
//! per-process random key, so a submitter cannot aim collisions at one bucket) maps it to
//! the one `Arc<str>` every equal text shares.
//!
//! The table holds a strong reference; when the last `SharedText` other than the table's
//! is dropped, the drop removes the entry (checked again under the shard's lock, where no
//! new copy can appear), so the table never holds a text nobody uses: unique texts (a
//! hostile submitter's) are freed with the debates that carried them.
//!
//! It serializes as a plain JSON string and derefs to `str`, so wire and checkpoint formats
//! do not change.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Texts shorter than this are not interned (the table entry would cost more than a copy).
pub const INTERN_MIN_BYTES: usize = 64;

const SHARDS: usize = 16;

/// One shard: content hash → the texts with that hash (almost always one).
type Shard = Mutex<HashMap<u64, Vec<Arc<str>>>>;

struct Table {
    hasher: RandomState,
    shards: [Shard; SHARDS],
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| Table {
        hasher: RandomState::new(),
        shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
    })
}

impl Table {
    fn locate(&self, s: &str) -> (u64, &Shard) {
        let h = self.hasher.hash_one(s);
        (h, &self.shards[(h as usize) % SHARDS])
    }
}

/// An immutable string, shared by content (see the module docs).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharedText(Arc<str>);

impl SharedText {
    /// The text, interned when it is [`INTERN_MIN_BYTES`] long or more.
    pub fn new(s: &str) -> Self {
        if s.len() < INTERN_MIN_BYTES {
            return Self(Arc::from(s));
        }
        let (h, shard) = table().locate(s);
        let mut map = shard.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = map.entry(h).or_default();
        if let Some(found) = bucket.iter().find(|t| ***t == *s) {
            return Self(found.clone());
        }
        let text: Arc<str> = Arc::from(s);
        bucket.push(text.clone());
        Self(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when `self` and `other` share one allocation.
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Texts interned in this process right now (for tests and diagnostics).
    pub fn interned_count() -> usize {
        table()
            .shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .values()
                    .map(Vec::len)
                    .sum::<usize>()
            })
            .sum()
    }
}

impl Drop for SharedText {
    fn drop(&mut self) {
        // Only an interned text's last user (besides the table) has work to do. The count
        // is read again under the lock: there nobody can make a new copy (interning takes
        // the lock; cloning needs a copy, and ours is the only one left).
        if self.0.len() < INTERN_MIN_BYTES || Arc::strong_count(&self.0) != 2 {
            return;
        }
        let (h, shard) = table().locate(&self.0);
        let mut map = shard.lock().unwrap_or_else(|p| p.into_inner());
        if Arc::strong_count(&self.0) != 2 {
            return;
        }
        if let Some(bucket) = map.get_mut(&h) {
            bucket.retain(|t| !Arc::ptr_eq(t, &self.0));
            if bucket.is_empty() {
                map.remove(&h);
            }
        }
    }
}

impl Deref for SharedText {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SharedText {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SharedText {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A string in a schema, as it is on the wire.
impl schemars::JsonSchema for SharedText {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SharedText".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <String as schemars::JsonSchema>::json_schema(generator)
    }
}

impl Default for SharedText {
    fn default() -> Self {
        Self::new("")
    }
}

impl fmt::Debug for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl From<&str> for SharedText {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for SharedText {
    fn from(s: String) -> Self {
        Self::new(&s)
    }
}

impl From<&String> for SharedText {
    fn from(s: &String) -> Self {
        Self::new(s)
    }
}

impl From<SharedText> for String {
    fn from(s: SharedText) -> Self {
        s.as_str().to_string()
    }
}

impl PartialEq<str> for SharedText {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for SharedText {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for SharedText {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<SharedText> for String {
    fn eq(&self, other: &SharedText) -> bool {
        **self == *other.0
    }
}

impl PartialEq<SharedText> for &str {
    fn eq(&self, other: &SharedText) -> bool {
        **self == *other.0
    }
}

impl Serialize for SharedText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SharedText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SharedText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SharedText, E> {
                Ok(SharedText::new(v))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(tag: &str) -> String {
        format!(
            "{tag}: {}",
            "a role prompt text shared by many debates. ".repeat(4)
        )
    }

    #[test]
    fn equal_long_texts_share_one_allocation() {
        let a = SharedText::new(&long("share"));
        let b: SharedText =
            serde_json::from_str(&serde_json::to_string(&long("share")).unwrap()).unwrap();
        assert!(a.ptr_eq(&b));
        assert_eq!(a, b);
        assert_eq!(&*a, long("share"));
        let short = SharedText::new("architect");
        assert!(!short.ptr_eq(&SharedText::new("architect")));
        assert_eq!(short, "architect");
    }

    #[test]
    fn serializes_as_a_plain_string() {
        let text = "line\n\"quoted\" ü".to_string() + &long("serde");
        let shared = SharedText::new(&text);
        assert_eq!(
            serde_json::to_string(&shared).unwrap(),
            serde_json::to_string(&text).unwrap()
        );
        let back: SharedText =
            serde_json::from_str(&serde_json::to_string(&text).unwrap()).unwrap();
        assert_eq!(back, text);
        assert!(serde_json::from_str::<SharedText>("42").is_err());
    }

    #[test]
    fn a_text_nobody_uses_leaves_the_table() {
        let text = long(&format!("unique-{}", rand::random::<u64>()));
        let present = |t: &str| {
            let (h, shard) = table().locate(t);
            shard
                .lock()
                .unwrap()
                .get(&h)
                .is_some_and(|b| b.iter().any(|x| &**x == t))
        };
        let a = SharedText::new(&text);
        let b = a.clone();
        let c = SharedText::new(&text);
        assert!(present(&text));
        drop(a);
        drop(c);
        assert!(present(&text), "still used by b");
        drop(b);
        assert!(!present(&text), "the last user's drop removes the entry");
        // Interned again from scratch afterwards.
        let d = SharedText::new(&text);
        assert!(present(&text));
        drop(d);
        assert!(!present(&text));
    }

    #[test]
    fn many_unique_texts_do_not_grow_the_table() {
        let tag = rand::random::<u64>();
        let texts: Vec<SharedText> = (0..2_000)
            .map(|i| SharedText::new(&long(&format!("hostile-{tag}-{i}"))))
            .collect();
        let count_ours = || {
            table()
                .shards
                .iter()
                .map(|s| {
                    s.lock()
                        .unwrap()
                        .values()
                        .flatten()
                        .filter(|t| t.contains(&format!("hostile-{tag}-")))
                        .count()
                })
                .sum::<usize>()
        };
        assert_eq!(count_ours(), 2_000);
        drop(texts);
        assert_eq!(count_ours(), 0);
    }

    #[test]
    fn concurrent_interning_and_dropping_keeps_one_copy() {
        let text = long(&format!("race-{}", rand::random::<u64>()));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let text = text.clone();
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        let a = SharedText::new(&text);
                        let b = SharedText::new(&text);
                        assert!(a.ptr_eq(&b));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let (h, shard) = table().locate(&text);
        assert!(shard.lock().unwrap().get(&h).is_none());
    }
}
