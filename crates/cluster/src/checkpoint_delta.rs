//! Checkpoint deltas: what changed in a debate's state between two checkpoints, as a short
//! list of edits of its JSON, and those edits applied back.
//!
//! A writer keeps a [`Shape`] of the state it last wrote: the hash of every part of the
//! JSON, with the structure below it only where it can still change in place cheaply (the
//! fields of an object, the last element of an array; earlier array elements and small
//! values are kept as a hash alone). [`Shaper::diff`] compares the next state with it and
//! writes the edits ([`Delta`]); [`apply`] replays them on the JSON of the earlier state.
//! The big parts of a debate's state are arrays that only grow (rounds, contributions), so
//! a transition's delta is mostly the contribution it added.
//!
//! A delta is a JSON array of edits, each an array whose first element names it:
//! - `["s", path, value]`: sets the value at `path` (an object's key, possibly new, or an
//!   existing array index; the empty path replaces the whole document);
//! - `["a", path, n, [values]]`: appends `values` to the array at `path`, which must hold
//!   exactly `n` elements;
//! - `["t", path, n]`: truncates the array at `path` to `n` elements (it must hold at
//!   least `n`);
//! - `["k", path, [keys]]`: keeps only `keys` in the object at `path` (keys were removed).
//!
//! A path is an array of object keys (strings) and array indexes (numbers). Every edit
//! checks what it needs (the path exists, the array's length): a delta applied to the wrong
//! base fails with a [`DeltaError`] instead of producing a state that was never written.
//!
//! The hashes are keyed per process ([`Shaper::new`]): they never leave it, and content a
//! user controls cannot be chosen to collide.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};

use serde::Serialize;
use serde_json::Value;

/// Objects and arrays whose JSON is shorter than this are summarised by their hash alone:
/// a change rewrites them whole (no shorter than the paths of edits inside them).
const LEAF_BYTES: usize = 96;

/// What a writer remembers of a JSON document it wrote: hashes, and the structure where a
/// delta can reach into it (see the module docs).
#[derive(Debug, Clone)]
pub enum Shape {
    /// A scalar, a small object or array, or an array element before the last.
    Leaf(u64),
    /// An object: its hash and its fields as (hash of the key, shape), by key hash.
    Obj(u64, Vec<(u64, Shape)>),
    /// An array: its hash and its elements (all but the last as leaves once pruned).
    Arr(u64, Vec<Shape>),
}

impl Shape {
    pub fn hash(&self) -> u64 {
        match self {
            Shape::Leaf(h) | Shape::Obj(h, _) | Shape::Arr(h, _) => *h,
        }
    }

    /// Approximate bytes this shape takes in memory (what a writer keeps per debate).
    pub fn heap_bytes(&self) -> usize {
        let node = std::mem::size_of::<Shape>();
        node + match self {
            Shape::Leaf(_) => 0,
            Shape::Obj(_, f) => f
                .iter()
                .map(|(_, s)| 8 + s.heap_bytes())
                .sum::<usize>(),
            Shape::Arr(_, e) => e.iter().map(Shape::heap_bytes).sum::<usize>(),
        }
    }

    /// The shape as kept between checkpoints: an array's elements before the last become
    /// leaves (they rarely change; one that does is rewritten whole).
    fn prune(self) -> Shape {
        match self {
            Shape::Leaf(_) => self,
            Shape::Obj(h, f) => Shape::Obj(h, f.into_iter().map(|(k, s)| (k, s.prune())).collect()),
            Shape::Arr(h, e) => {
                let n = e.len();
                Shape::Arr(
                    h,
                    e.into_iter()
                        .enumerate()
                        .map(|(i, s)| if i + 1 < n { Shape::Leaf(s.hash()) } else { s.prune() })
                        .collect(),
                )
            }
        }
    }
}

/// A delta's JSON (see the module docs) and the number of edits in it.
#[derive(Debug, Clone)]
pub struct Delta {
    pub json: String,
    pub edits: usize,
}

/// Builds shapes and deltas with one process's hash keys.
#[derive(Debug, Clone, Default)]
pub struct Shaper {
    keys: RandomState,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

impl Shaper {
    pub fn new() -> Self {
        Self::default()
    }

    fn hash_key(&self, k: &str) -> u64 {
        let mut h = self.keys.build_hasher();
        k.hash(&mut h);
        h.finish()
    }

    /// The shape of `v` (unpruned) and the approximate length of its JSON.
    fn full_shape(&self, v: &Value) -> (Shape, usize) {
        let mut h = self.keys.build_hasher();
        match v {
            Value::Null => {
                0u8.hash(&mut h);
                (Shape::Leaf(h.finish()), 4)
            }
            Value::Bool(b) => {
                1u8.hash(&mut h);
                b.hash(&mut h);
                (Shape::Leaf(h.finish()), 5)
            }
            Value::Number(n) => {
                2u8.hash(&mut h);
                n.hash(&mut h);
                (Shape::Leaf(h.finish()), 8)
            }
            Value::String(s) => {
                3u8.hash(&mut h);
                s.hash(&mut h);
                (Shape::Leaf(h.finish()), s.len() + 2)
            }
            Value::Array(a) => {
                4u8.hash(&mut h);
                a.len().hash(&mut h);
                let mut size = 2;
                let mut elems = Vec::with_capacity(a.len());
                for e in a {
                    let (s, n) = self.full_shape(e);
                    s.hash().hash(&mut h);
                    size += n + 1;
                    elems.push(s);
                }
                let hash = h.finish();
                if size < LEAF_BYTES {
                    (Shape::Leaf(hash), size)
                } else {
                    (Shape::Arr(hash, elems), size)
                }
            }
            Value::Object(m) => {
                5u8.hash(&mut h);
                m.len().hash(&mut h);
                let mut size = 2;
                let mut fields = Vec::with_capacity(m.len());
                for (k, e) in m {
                    let kh = self.hash_key(k);
                    let (s, n) = self.full_shape(e);
                    kh.hash(&mut h);
                    s.hash().hash(&mut h);
                    size += k.len() + 4 + n;
                    fields.push((kh, s));
                }
                let hash = h.finish();
                if size < LEAF_BYTES {
                    (Shape::Leaf(hash), size)
                } else {
                    fields.sort_unstable_by_key(|(k, _)| *k);
                    (Shape::Obj(hash, fields), size)
                }
            }
        }
    }

    /// The shape a writer keeps of `v`, and the approximate length of its JSON.
    pub fn shape(&self, v: &Value) -> (Shape, usize) {
        let (s, n) = self.full_shape(v);
        (s.prune(), n)
    }

    /// The delta from the document `old` describes to `new`, the shape to keep of `new`
    /// and the approximate length of `new`'s JSON.
    pub fn diff(&self, old: &Shape, new: &Value) -> (Delta, Shape, usize) {
        let (full, size) = self.full_shape(new);
        let mut out = Out {
            buf: Vec::with_capacity(256),
            edits: 0,
        };
        out.buf.push(b'[');
        let mut path = Vec::new();
        self.diff_at(&mut path, old, new, &full, &mut out);
        out.buf.push(b']');
        let delta = Delta {
            // Only serde_json wrote into it: valid UTF-8.
            json: String::from_utf8(out.buf).unwrap_or_default(),
            edits: out.edits,
        };
        (delta, full.prune(), size)
    }

    fn diff_at<'a>(
        &self,
        path: &mut Vec<Seg<'a>>,
        old: &Shape,
        new_v: &'a Value,
        new: &Shape,
        out: &mut Out,
    ) {
        if old.hash() == new.hash() {
            return;
        }
        match (old, new_v, new) {
            (Shape::Obj(_, of), Value::Object(m), Shape::Obj(_, nf)) => {
                let removed = of
                    .iter()
                    .any(|(k, _)| nf.binary_search_by_key(k, |(h, _)| *h).is_err());
                if removed {
                    let keys: Vec<&str> = m.keys().map(String::as_str).collect();
                    out.edit("k", path, &keys);
                }
                for (k, v) in m {
                    let kh = self.hash_key(k);
                    let Some(ns) = nf
                        .binary_search_by_key(&kh, |(h, _)| *h)
                        .ok()
                        .map(|i| &nf[i].1)
                    else {
                        continue;
                    };
                    path.push(Seg::Key(k));
                    match of
                        .binary_search_by_key(&kh, |(h, _)| *h)
                        .ok()
                        .map(|i| &of[i].1)
                    {
                        Some(os) => self.diff_at(path, os, v, ns, out),
                        None => out.edit("s", path, v),
                    }
                    path.pop();
                }
            }
            (Shape::Arr(_, oe), Value::Array(a), Shape::Arr(_, ne)) => {
                let common = oe.len().min(ne.len());
                for i in 0..common {
                    path.push(Seg::Index(i));
                    self.diff_at(path, &oe[i], &a[i], &ne[i], out);
                    path.pop();
                }
                if ne.len() < oe.len() {
                    out.edit("t", path, &ne.len());
                } else if ne.len() > oe.len() {
                    out.append(path, oe.len(), &a[oe.len()..]);
                }
            }
            _ => out.edit("s", path, new_v),
        }
    }
}

struct Out {
    buf: Vec<u8>,
    edits: usize,
}

impl Out {
    fn start(&mut self, op: &str, path: &[Seg<'_>]) {
        if self.edits > 0 {
            self.buf.push(b',');
        }
        self.edits += 1;
        self.buf.extend_from_slice(b"[\"");
        self.buf.extend_from_slice(op.as_bytes());
        self.buf.extend_from_slice(b"\",");
        // Serializing strings, numbers and values into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.buf, path);
    }

    fn edit<T: Serialize + ?Sized>(&mut self, op: &str, path: &[Seg<'_>], arg: &T) {
        self.start(op, path);
        self.buf.push(b',');
        let _ = serde_json::to_writer(&mut self.buf, arg);
        self.buf.push(b']');
    }

    fn append(&mut self, path: &[Seg<'_>], at: usize, values: &[Value]) {
        self.start("a", path);
        self.buf.push(b',');
        let _ = serde_json::to_writer(&mut self.buf, &at);
        self.buf.push(b',');
        let _ = serde_json::to_writer(&mut self.buf, values);
        self.buf.push(b']');
    }
}

/// Why a delta could not be applied.
#[derive(Debug, thiserror::Error)]
#[error("edit {edit}: {reason}")]
pub struct DeltaError {
    /// Index of the failing edit in the delta (0-based).
    pub edit: usize,
    pub reason: String,
}

/// Applies a delta (its JSON) to `doc`. On an error `doc` may be partly changed.
pub fn apply(doc: &mut Value, delta: &str) -> Result<(), DeltaError> {
    let edits: Vec<Value> = serde_json::from_str(delta).map_err(|e| DeltaError {
        edit: 0,
        reason: format!("not a delta: {e}"),
    })?;
    for (i, edit) in edits.into_iter().enumerate() {
        apply_edit(doc, edit).map_err(|reason| DeltaError { edit: i, reason })?;
    }
    Ok(())
}

fn apply_edit(doc: &mut Value, edit: Value) -> Result<(), String> {
    let Value::Array(parts) = edit else {
        return Err("an edit is not an array".into());
    };
    let mut parts = parts.into_iter();
    let (Some(Value::String(op)), Some(Value::Array(path))) = (parts.next(), parts.next()) else {
        return Err("an edit has no operation or path".into());
    };
    let arg = parts.next().ok_or("an edit has no argument")?;
    match op.as_str() {
        "s" => {
            let Some((last, parent)) = path.split_last() else {
                *doc = arg;
                return Ok(());
            };
            let parent = walk(doc, parent)?;
            match (parent, last) {
                (Value::Object(m), Value::String(k)) => {
                    m.insert(k.clone(), arg);
                }
                (Value::Array(a), Value::Number(n)) => {
                    let i = index(n)?;
                    let len = a.len();
                    *a.get_mut(i)
                        .ok_or_else(|| format!("index {i} out of range (length {len})"))? = arg;
                }
                (other, last) => return Err(format!("cannot set {last} in {}", kind(other))),
            }
        }
        "a" => {
            let Value::Number(at) = arg else {
                return Err("an append without a length".into());
            };
            let at = index(&at)?;
            let Some(Value::Array(values)) = parts.next() else {
                return Err("an append without values".into());
            };
            match walk(doc, &path)? {
                Value::Array(a) if a.len() == at => a.extend(values),
                Value::Array(a) => {
                    return Err(format!(
                        "append at {at} to an array of {} elements: not the state it was made from",
                        a.len()
                    ))
                }
                other => return Err(format!("append to {}", kind(other))),
            }
        }
        "t" => {
            let Value::Number(n) = arg else {
                return Err("a truncation without a length".into());
            };
            let n = index(&n)?;
            match walk(doc, &path)? {
                Value::Array(a) if a.len() >= n => a.truncate(n),
                Value::Array(a) => {
                    return Err(format!("truncate an array of {} elements to {n}", a.len()))
                }
                other => return Err(format!("truncate {}", kind(other))),
            }
        }
        "k" => {
            let Value::Array(keys) = arg else {
                return Err("a key list is not an array".into());
            };
            let keep: std::collections::BTreeSet<&str> =
                keys.iter().filter_map(Value::as_str).collect();
            match walk(doc, &path)? {
                Value::Object(m) => m.retain(|k, _| keep.contains(k.as_str())),
                other => return Err(format!("keep keys of {}", kind(other))),
            }
        }
        other => return Err(format!("unknown edit {other:?}")),
    }
    Ok(())
}

fn index(n: &serde_json::Number) -> Result<usize, String> {
    n.as_u64()
        .and_then(|i| usize::try_from(i).ok())
        .ok_or_else(|| format!("{n} is not an index"))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn walk<'v>(mut doc: &'v mut Value, path: &[Value]) -> Result<&'v mut Value, String> {
    for seg in path {
        doc = match (doc, seg) {
            (Value::Object(m), Value::String(k)) => m
                .get_mut(k)
                .ok_or_else(|| format!("no key {k:?} on the path"))?,
            (Value::Array(a), Value::Number(n)) => {
                let i = index(n)?;
                let len = a.len();
                a.get_mut(i)
                    .ok_or_else(|| format!("index {i} out of range (length {len}) on the path"))?
            }
            (other, seg) => return Err(format!("cannot follow {seg} into {}", kind(other))),
        };
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roundtrip(a: Value, b: Value) -> Delta {
        let s = Shaper::new();
        let (old, _) = s.shape(&a);
        let (d, _, _) = s.diff(&old, &b);
        let mut doc = a.clone();
        apply(&mut doc, &d.json).unwrap_or_else(|e| panic!("{e}: {}", d.json));
        assert_eq!(doc, b, "delta {}", d.json);
        d
    }

    fn long(s: &str) -> String {
        s.repeat(40)
    }

    #[test]
    fn appends_are_appends() {
        let a = json!({"rounds": [{"n": 1, "cs": [long("a"), long("b")]}], "status": "running"});
        let b = json!({"rounds": [{"n": 1, "cs": [long("a"), long("b"), long("c")]}], "status": "running"});
        let d = roundtrip(a, b);
        assert_eq!(d.edits, 1);
        assert!(d.json.starts_with(r#"[["a",["rounds",0,"cs"],2,"#), "{}", d.json);
        assert!(!d.json.contains(&long("a")), "{}", d.json);
    }

    #[test]
    fn sets_removes_truncates_and_type_changes() {
        let big = json!({"x": long("x"), "y": [long("1"), long("2"), long("3")], "z": {"deep": long("d"), "n": 1}});
        roundtrip(big.clone(), big.clone());
        let mut b = big.clone();
        b["z"]["n"] = json!(2);
        b["new"] = json!("v");
        b.as_object_mut().unwrap().remove("x");
        b["y"] = json!([long("1")]);
        let d = roundtrip(big.clone(), b);
        assert!(d.json.contains(r#"["k",[],"#), "{}", d.json);
        assert!(d.json.contains(r#"["t",["y"],1]"#), "{}", d.json);
        // An earlier array element changed (it is a leaf once pruned): rewritten whole.
        let mut c = big.clone();
        c["y"][0] = json!("changed");
        roundtrip(big.clone(), c);
        // Type changes and a whole new document.
        let mut e = big.clone();
        e["z"] = json!([1, 2]);
        roundtrip(big.clone(), e);
        roundtrip(big, json!(null));
        roundtrip(json!([1, 2, 3]), json!({"a": 1}));
    }

    #[test]
    fn a_delta_on_the_wrong_base_fails() {
        let s = Shaper::new();
        let a = json!({"cs": [long("a")], "k": long("k")});
        let b = json!({"cs": [long("a"), long("b")], "k": long("k")});
        let (old, _) = s.shape(&a);
        let (d, _, _) = s.diff(&old, &b);
        // Applied twice: the array no longer has the length the append expects.
        let mut doc = a.clone();
        apply(&mut doc, &d.json).unwrap();
        let e = apply(&mut doc, &d.json).unwrap_err();
        assert!(e.reason.contains("append at 1"), "{e}");
        // Missing path.
        let mut other = json!({"k": 1});
        assert!(apply(&mut other, &d.json).is_err());
        // Garbage.
        assert!(apply(&mut json!({}), "[[\"s\"").is_err());
        assert!(apply(&mut json!({}), r#"[["x",[],1]]"#).is_err());
    }
}
