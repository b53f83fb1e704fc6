//! Checkpoint deltas: what changed in a debate's state between two checkpoints, as a small
//! JSON document of edits, and those edits applied back.
//!
//! A writer keeps a [`Shape`] of the state it last wrote: the hash of every part of the
//! JSON, with the structure below it only where it can still change in place cheaply (the
//! fields of an object, the last elements of an array; earlier array elements and small
//! values are kept as a hash alone). [`Shaper::diff_of`] serializes the next state through
//! a serializer that hashes as it goes, guided by that shape (`hashed`): a part the shape
//! kept as a hash alone is hashed without building its JSON, and built only when its hash
//! changed; the edits ([`Delta`]) are written from what was built. [`apply`] replays them
//! on the JSON of the earlier state.
//! The big parts of a debate's state are arrays that only grow (rounds, contributions), so
//! a transition's delta is mostly the contribution it added.
//!
//! A delta is an edit of the document's root. An edit is
//! - a string, number, boolean or null: the value here becomes it;
//! - an object: edits of this object's members by key, or of this array's elements by
//!   index (`"3"`); a key the object lacks takes a value (a scalar, or `["s", value]`);
//! - an array naming an operation:
//!   - `["s", value]`: the value here becomes `value` (an object or array);
//!   - `["a", n, [items]]`: appends to this array, which must hold exactly `n` elements,
//!     one element per item: a copy of the element before it (null for the first) with
//!     the item applied as an edit (elements next to each other share most of their
//!     fields; an item can also set the element whole);
//!   - `["t", n]`: truncates this array to `n` elements (it must hold at least `n`);
//!   - `["x", len, at, del, [items]]`: in this array, which must hold exactly `len`
//!     elements, removes the `del` elements from index `at` and inserts there one element
//!     per item, as an append does (an insert in the middle: some arrays are kept in an
//!     order other than arrival), or, for an item `["r", k, edit]`, as a copy of the
//!     `k`-th element it removed with `edit` applied;
//!   - `["-", [keys], edit]`: removes `keys` from this object (each must be there), then
//!     applies `edit`;
//!   - `["k", [keys], edit]`: keeps only `keys` in this object (others were removed), then
//!     applies `edit` (the form for an object whose key names were not kept; still read);
//!   - `["m", edit, edit]`: both edits in turn (an array's elements changed in place, then
//!     its end).
//!
//! Nesting shares the path of the edits below a key, so a transition that touches a few
//! fields deep in the state costs little more than their values. Every edit checks what it
//! needs (the member exists, the array's length): a delta applied to the wrong base fails
//! with a [`DeltaError`] instead of producing a state that was never written. An empty
//! object is "no change".
//!
//! The hashes are SipHash-1-3 over words (`sip`), keyed per process ([`Shaper::new`]):
//! they never leave it, and content a user controls cannot be chosen to collide.
//!
//! # Stored form
//! [`pack`] stores a delta as its JSON or, when shorter, as the byte [`PACKED`], the JSON's
//! length (4 bytes, little-endian) and an LZ4 block of the JSON compressed against the
//! last [`DICT_BYTES`] of the delta before it ([`dict_of`]): consecutive deltas share
//! their keys and most of the bookkeeping every transition rewrites (the outbox's events,
//! the spend, `updatedAt`). [`unpack`] reverses it, checking the length (at most
//! [`MAX_DELTA_BYTES`]) and that the block unpacks to exactly it; JSON never starts with
//! [`PACKED`], so a delta stored as JSON reads as itself.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

mod hashed;
mod sip;
use hashed::{Cx, Kind, Node, NotBuilt};

/// Objects and arrays whose JSON is shorter than this are summarised by their hash alone:
/// a change rewrites them whole (no shorter than the paths of edits inside them).
const LEAF_BYTES: usize = 96;

/// An array keeps the structure of this many of its last elements (the ones that still
/// change: the current round, and the one before while the next starts).
const KEPT_TREES: usize = 2;

/// What a writer remembers of a JSON document it wrote: hashes, and the structure where a
/// delta can reach into it (see the module docs). The structure is shared: the shape of a
/// part that did not change is the last shape's, not a copy of it.
#[derive(Debug, Clone)]
pub enum Shape {
    /// A scalar, a small object or array, or an array element before the last.
    Leaf(u64),
    /// An object: its hash, its fields as (hash of the key, shape) by key hash, and their
    /// keys in that order, each followed by a NUL (`None` if a key holds a NUL): a later
    /// delta names the keys it removes.
    Obj(u64, Arc<[(u64, Shape)]>, Option<Arc<str>>),
    /// An array: its hash and its elements (all but the last as leaves once pruned).
    Arr(u64, Arc<[Shape]>),
}

impl Shape {
    pub fn hash(&self) -> u64 {
        match self {
            Shape::Leaf(h) | Shape::Obj(h, _, _) | Shape::Arr(h, _) => *h,
        }
    }

    /// Approximate bytes this shape takes in memory (what a writer keeps per debate).
    pub fn heap_bytes(&self) -> usize {
        let node = std::mem::size_of::<Shape>();
        node + match self {
            Shape::Leaf(_) => 0,
            Shape::Obj(_, f, names) => {
                names.as_ref().map_or(0, |n| n.len())
                    + f.iter().map(|(_, s)| 8 + s.heap_bytes()).sum::<usize>()
            }
            Shape::Arr(_, e) => e.iter().map(Shape::heap_bytes).sum::<usize>(),
        }
    }
}

/// The hash and size of each element of the root's array member `field` in `root`.
fn elems_of(root: &Node, field: &str) -> Option<Vec<(u64, usize)>> {
    let Kind::Obj(fields) = &root.kind else {
        return None;
    };
    let (_, _, member) = fields.iter().find(|(k, _, _)| k == field)?;
    match &member.kind {
        Kind::Arr(elems) => Some(elems.iter().map(|e| (e.hash, e.size)).collect()),
        _ => None,
    }
}

/// A delta's JSON (see the module docs).
#[derive(Debug, Clone)]
pub struct Delta {
    pub json: String,
}

/// Elements of an array member of the document's root (`field`) that the caller knows did
/// not change since the last shape: for element `i`, `elems[i]` holds its hash and size as
/// the last diff or shape reported them ([`Diffed::elems`]), or `None` when it may have
/// changed. A known element is not read at all: what the caller says must be true (debug
/// builds check it).
#[derive(Debug, Clone)]
pub struct Known {
    pub field: &'static str,
    pub elems: Vec<Option<(u64, usize)>>,
}

/// What [`Shaper::shape_with`] makes of a document.
#[derive(Debug)]
pub struct Shaped {
    /// The shape to keep of the document.
    pub shape: Shape,
    /// The approximate length of its JSON.
    pub size: usize,
    /// The hash and size of each element of the array member asked about, when it is one.
    pub elems: Option<Vec<(u64, usize)>>,
}

/// What [`Shaper::diff_with`] makes of a document.
#[derive(Debug)]
pub struct Diffed {
    /// The delta from the last shape.
    pub delta: Delta,
    /// The shape to keep of the new document.
    pub shape: Shape,
    /// The approximate length of its JSON.
    pub size: usize,
    /// The hash and size of each element of the array member asked about, when it is one.
    pub elems: Option<Vec<(u64, usize)>>,
    /// How many elements [`Known`] named were taken as they were, without reading them.
    pub unread: usize,
}

/// Builds shapes and deltas with one process's hash keys.
#[derive(Debug)]
pub struct Shaper {
    keys: sip::Keys,
    /// The hashes of struct field names a serialization looked up, kept for the next one
    /// (see `hashed::Cx`).
    names: std::sync::Mutex<Vec<(usize, usize, u64)>>,
}

impl Clone for Shaper {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            names: Default::default(),
        }
    }
}

impl Default for Shaper {
    fn default() -> Self {
        Self {
            keys: sip::Keys::random(),
            names: Default::default(),
        }
    }
}

impl Shaper {
    pub fn new() -> Self {
        Self::default()
    }

    fn hash_key(&self, k: &str) -> u64 {
        self.keys.str(8, k)
    }

    /// The shape a writer keeps of `v`, and the approximate length of its JSON.
    pub fn shape_of<T: Serialize + ?Sized>(&self, v: &T) -> serde_json::Result<(Shape, usize)> {
        let d = self.shape_with(v, "")?;
        Ok((d.shape, d.size))
    }

    /// [`Shaper::shape_of`], with the hash and size of each element of the root's array
    /// member `field` (what a later [`Known`] names).
    pub fn shape_with<T: Serialize + ?Sized>(
        &self,
        v: &T,
        field: &str,
    ) -> serde_json::Result<Shaped> {
        let node = hashed::node(&mut Cx::new(self), v, None, false).map_err(ser_error)?;
        Ok(Shaped {
            shape: self.kept(&node, None),
            size: node.size,
            elems: elems_of(&node, field),
        })
    }

    /// The delta from the document `old` describes to `new` (serialized as JSON), the
    /// shape to keep of `new` and the approximate length of its JSON. Only the parts of
    /// `new` whose hash changed are built as JSON values (see `hashed`).
    pub fn diff_of<T: Serialize + ?Sized>(
        &self,
        old: &Shape,
        new: &T,
    ) -> serde_json::Result<(Delta, Shape, usize)> {
        let d = self.diff_with(old, new, None)?;
        Ok((d.delta, d.shape, d.size))
    }

    /// [`Shaper::diff_of`], taking the elements `known` names as unchanged (not read), and
    /// reporting the hash and size of each element of its member.
    pub fn diff_with<T: Serialize + ?Sized>(
        &self,
        old: &Shape,
        new: &T,
        known: Option<Known>,
    ) -> serde_json::Result<Diffed> {
        let field = known.as_ref().map_or("", |k| k.field);
        let mut cx = Cx::with_known(self, known);
        let guided = hashed::node(&mut cx, new, Some(old), false).map_err(ser_error)?;
        let (node, edit, unread) = match self.diff_at(old, &guided) {
            Ok(edit) => (guided, edit, cx.unread),
            // A part it needs was hashed alone (an earlier element changed in place, a
            // splice over equal elements): everything built, and read.
            Err(NotBuilt) => {
                let full = hashed::node(&mut Cx::new(self), new, None, false).map_err(ser_error)?;
                let edit = self
                    .diff_at(old, &full)
                    .map_err(|_| ser_error("a part of the state was not built"))?;
                (full, edit, 0)
            }
        };
        let edit = edit.unwrap_or_else(|| Value::Object(Map::new()));
        let json = serde_json::to_string(&edit)?;
        Ok(Diffed {
            delta: Delta { json },
            shape: self.kept(&node, Some(old)),
            size: node.size,
            elems: elems_of(&node, field),
            unread,
        })
    }

    /// [`Shaper::shape_of`] a JSON value.
    pub fn shape(&self, v: &Value) -> (Shape, usize) {
        // A JSON value always serializes (its keys are strings).
        self.shape_of(v).unwrap_or((Shape::Leaf(0), 0))
    }

    /// [`Shaper::diff_of`] a JSON value.
    pub fn diff(&self, old: &Shape, new: &Value) -> (Delta, Shape, usize) {
        self.diff_of(old, new).unwrap_or_else(|_| {
            // Unreachable for a JSON value; still a delta that holds: the document whole.
            let json = serde_json::to_string(&set_value(new)).unwrap_or_default();
            (Delta { json }, Shape::Leaf(0), usize::MAX / 2)
        })
    }

    /// The shape kept of a node: an array's elements before the last [`KEPT_TREES`] and
    /// small values as hashes alone (`old`: the last shape of it, whose key names are
    /// shared when the keys did not change).
    fn kept(&self, n: &Node, old: Option<&Shape>) -> Shape {
        self.tree(n, old, true)
    }

    /// The shape of a node, its arrays pruned (`prune`) or whole.
    fn tree(&self, n: &Node, old: Option<&Shape>, prune: bool) -> Shape {
        if n.size < LEAF_BYTES {
            return Shape::Leaf(n.hash);
        }
        match old {
            // Unchanged: the same content pruned the same way (the last shape is a kept
            // one), shared.
            Some(o @ (Shape::Obj(..) | Shape::Arr(..))) if prune && o.hash() == n.hash => {
                return o.clone();
            }
            _ => {}
        }
        match &n.kind {
            // Not read because known unchanged: its last shape still holds.
            Kind::Opaque => match old {
                Some(o) if o.hash() == n.hash => o.clone(),
                _ => Shape::Leaf(n.hash),
            },
            Kind::Scalar(_) => Shape::Leaf(n.hash),
            Kind::Obj(fields) => {
                let old_fields = match old {
                    Some(Shape::Obj(_, f, names)) => Some((f, names)),
                    _ => None,
                };
                let mut f: Vec<(u64, Shape, usize)> = fields
                    .iter()
                    .enumerate()
                    .map(|(i, (_, kh, c))| {
                        let o = old_fields.and_then(|(of, _)| {
                            of.binary_search_by_key(kh, |(h, _)| *h)
                                .ok()
                                .map(|j| &of[j].1)
                        });
                        (*kh, self.tree(c, o, prune), i)
                    })
                    .collect();
                f.sort_unstable_by_key(|(k, _, _)| *k);
                let same_keys = old_fields.is_some_and(|(of, _)| {
                    of.len() == f.len() && of.iter().zip(&f).all(|((a, _), (b, _, _))| a == b)
                });
                let names = match old_fields {
                    Some((_, names)) if same_keys => names.clone(),
                    _ => (!fields.iter().any(|(k, _, _)| k.contains('\0'))).then(|| {
                        let mut names = String::new();
                        for (_, _, i) in &f {
                            names.push_str(&fields[*i].0);
                            names.push('\0');
                        }
                        Arc::from(names)
                    }),
                };
                Shape::Obj(
                    n.hash,
                    f.into_iter().map(|(k, s, _)| (k, s)).collect(),
                    names,
                )
            }
            Kind::Arr(elems) => {
                let len = elems.len();
                let old_elems = match old {
                    Some(Shape::Arr(_, e)) => Some(e),
                    _ => None,
                };
                Shape::Arr(
                    n.hash,
                    elems
                        .iter()
                        .enumerate()
                        .map(|(i, e)| {
                            if prune && i + KEPT_TREES < len {
                                Shape::Leaf(e.hash)
                            } else {
                                self.tree(e, old_elems.and_then(|o| o.get(i)), prune)
                            }
                        })
                        .collect(),
                )
            }
        }
    }

    /// The edit that turns what `old` describes into `new`; `None` when they are the
    /// same; [`NotBuilt`] when it needs a part of `new` that was hashed alone.
    fn diff_at(&self, old: &Shape, new: &Node) -> Result<Option<Value>, NotBuilt> {
        if old.hash() == new.hash {
            return Ok(None);
        }
        if !new.is_tree() {
            return set(new).map(Some);
        }
        match (old, &new.kind) {
            (Shape::Obj(_, of, names), Kind::Obj(nf)) => {
                let at = |f: &[(u64, Shape)], k: u64| -> Option<usize> {
                    f.binary_search_by_key(&k, |(h, _)| *h).ok()
                };
                let mut edits = Map::new();
                for (k, kh, v) in nf {
                    match at(of, *kh) {
                        Some(o) => {
                            if let Some(e) = self.diff_at(&of[o].1, v)? {
                                edits.insert(k.to_string(), e);
                            }
                        }
                        None => {
                            edits.insert(k.to_string(), set(v)?);
                        }
                    }
                }
                let mut new_keys: Vec<u64> = nf.iter().map(|(_, kh, _)| *kh).collect();
                new_keys.sort_unstable();
                let removed: Vec<usize> = (0..of.len())
                    .filter(|i| new_keys.binary_search(&of[*i].0).is_err())
                    .collect();
                if removed.is_empty() {
                    return Ok(Some(Value::Object(edits)));
                }
                // The keys removed, by name; or, without their names, the keys kept.
                let gone: Option<Vec<Value>> = names.as_ref().map(|names| {
                    let names: Vec<&str> = names.split('\0').collect();
                    removed
                        .iter()
                        .filter_map(|i| names.get(*i))
                        .map(|k| Value::String((*k).to_string()))
                        .collect()
                });
                Ok(Some(match gone {
                    Some(gone) if gone.len() == removed.len() => {
                        op("-", [Value::Array(gone), Value::Object(edits)])
                    }
                    _ => {
                        let keys: Vec<Value> = nf
                            .iter()
                            .map(|(k, _, _)| Value::String(k.to_string()))
                            .collect();
                        op("k", [Value::Array(keys), Value::Object(edits)])
                    }
                }))
            }
            (Shape::Arr(_, oe), Kind::Arr(ne)) => {
                // The unchanged ends, then what lies between them: changed in place
                // (element by element) then grown or cut at the end, or spliced.
                let (ol, nl) = (oe.len(), ne.len());
                let mut p = 0;
                while p < ol && p < nl && oe[p].hash() == ne[p].hash {
                    p += 1;
                }
                let mut q = 0;
                while q < ol - p && q < nl - p && oe[ol - 1 - q].hash() == ne[nl - 1 - q].hash {
                    q += 1;
                }
                let (om, nm) = (ol - p - q, nl - p - q);
                if om != nm && q > 0 {
                    // Inserted or removed before an unchanged end.
                    let items = self.items(ne, p, p + nm, &trees(oe, p, om))?;
                    return Ok(Some(op("x", [ol.into(), p.into(), om.into(), items])));
                }
                let mut edits = Map::new();
                for i in p..p + om.min(nm) {
                    if let Some(e) = self.diff_at(&oe[i], &ne[i])? {
                        edits.insert(i.to_string(), e);
                    }
                }
                let end = if nl > ol {
                    Some(op("a", [ol.into(), self.items(ne, ol, nl, &[])?]))
                } else if nl < ol {
                    Some(op("t", [nl.into()]))
                } else {
                    None
                };
                let in_place = match (edits.is_empty(), end) {
                    (_, None) => Value::Object(edits),
                    (true, Some(end)) => end,
                    (false, Some(end)) => op("m", [Value::Object(edits), end]),
                };
                // Elements kept as a hash alone were rewritten whole in place: as a splice,
                // each is an edit of the one before it, which may be shorter.
                let rewritten =
                    (p..p + om.min(nm)).any(|i| matches!(oe[i], Shape::Leaf(_)) && ne[i].is_tree());
                if rewritten {
                    let items = self.items(ne, p, p + nm, &trees(oe, p, om))?;
                    let splice = op("x", [ol.into(), p.into(), om.into(), items]);
                    if json_len(&splice) < json_len(&in_place) {
                        return Ok(Some(splice));
                    }
                }
                Ok(Some(in_place))
            }
            _ => set(new).map(Some),
        }
    }

    /// The elements `from..to` of the new array `ne` as items of an append or splice:
    /// each the edit of a copy of the element before it (elements next to each other —
    /// events, contributions — share most of their fields), or of one of the elements
    /// the splice removes (`removed`: their index among them and shape;
    /// `["r", index, edit]`), or the element whole, whichever is shortest.
    fn items(
        &self,
        ne: &[Node],
        from: usize,
        to: usize,
        removed: &[(usize, &Shape)],
    ) -> Result<Value, NotBuilt> {
        let mut out = Vec::with_capacity(to - from);
        for i in from..to {
            let mut best: Option<(Value, usize)> = None;
            let mut consider = |e: Value| {
                let n = json_len(&e);
                if best.as_ref().is_none_or(|(_, b)| n < *b) {
                    best = Some((e, n));
                }
            };
            if i > 0 {
                let before = self.tree(&ne[i - 1], None, false);
                consider(
                    self.diff_at(&before, &ne[i])?
                        .unwrap_or_else(|| Value::Object(Map::new())),
                );
            }
            for (k, shape) in removed {
                let e = self
                    .diff_at(shape, &ne[i])?
                    .unwrap_or_else(|| Value::Object(Map::new()));
                consider(op("r", [(*k).into(), e]));
            }
            // The element whole, unless an edit is already shorter than its JSON (about
            // its `size`): building it would copy all its text for nothing.
            let best = match best {
                Some((e, n)) if n < ne[i].size => e,
                best => {
                    let whole = set(&ne[i])?;
                    match best {
                        Some((e, n)) if n < json_len(&whole) => e,
                        _ => whole,
                    }
                }
            };
            out.push(best);
        }
        Ok(Value::Array(out))
    }
}

fn ser_error(e: impl std::fmt::Display) -> serde_json::Error {
    <serde_json::Error as serde::ser::Error>::custom(e)
}

/// Applies the items of an append or splice (see [`Shaper::items`]) into `a` from index
/// `at`; `removed` are the elements the splice removed.
fn insert_items(
    a: &mut Vec<Value>,
    at: usize,
    items: Vec<Value>,
    removed: &[Value],
    path: &mut Vec<String>,
) -> Result<(), String> {
    for (k, item) in items.into_iter().enumerate() {
        let i = at + k;
        path.push(format!("+{i}"));
        let (mut v, edit) = match item {
            Value::Array(parts) if parts.first().is_some_and(|n| n == "r") => {
                let mut parts = parts.into_iter().skip(1);
                let j = parts.next().and_then(|j| j.as_u64()).unwrap_or(u64::MAX);
                let base = usize::try_from(j)
                    .ok()
                    .and_then(|j| removed.get(j))
                    .ok_or_else(|| format!("no removed element {j} to copy"))?;
                (base.clone(), parts.next().ok_or("\"r\" without an edit")?)
            }
            item => (
                if i == 0 {
                    Value::Null
                } else {
                    a[i - 1].clone()
                },
                item,
            ),
        };
        apply_at(&mut v, edit, path)?;
        path.pop();
        a.insert(i, v);
    }
    Ok(())
}

/// The elements `p..p + n` of an old array that kept their structure, by their index
/// among those elements.
fn trees(oe: &[Shape], p: usize, n: usize) -> Vec<(usize, &Shape)> {
    oe[p..p + n]
        .iter()
        .enumerate()
        .filter(|(_, s)| !matches!(s, Shape::Leaf(_)))
        .collect()
}

/// The length of `v`'s JSON.
fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    serde_json::to_writer(&mut c, v).map_or(usize::MAX, |()| c.0)
}

/// The edit that sets the value of `n`.
fn set(n: &Node) -> Result<Value, NotBuilt> {
    Ok(match &n.kind {
        Kind::Scalar(v) => v.clone(),
        _ => op("s", [n.value()?]),
    })
}

/// The edit that sets `v`.
fn set_value(v: &Value) -> Value {
    match v {
        Value::Object(_) | Value::Array(_) => op("s", [v.clone()]),
        scalar => scalar.clone(),
    }
}

fn op<const N: usize>(name: &str, args: [Value; N]) -> Value {
    let mut a = Vec::with_capacity(N + 1);
    a.push(Value::String(name.into()));
    a.extend(args);
    Value::Array(a)
}

/// The first byte of a packed delta (JSON never starts with it; see the module docs).
pub const PACKED: u8 = 0;
/// A delta is packed against at most this many last bytes of the one before it (its
/// writer keeps them per live debate).
pub const DICT_BYTES: usize = 4 << 10;
/// A packed delta unpacks to at most this many bytes (a stored value is checked as input).
pub const MAX_DELTA_BYTES: usize = 64 << 20;

/// The end of a delta's JSON that the next delta is packed against.
pub fn dict_of(json: &[u8]) -> &[u8] {
    &json[json.len().saturating_sub(DICT_BYTES)..]
}

/// A delta's JSON as stored: packed (LZ4, against `dict`) when that is shorter.
pub fn pack(json: &str, dict: &[u8]) -> Vec<u8> {
    let packed = lz4_flex::block::compress_with_dict(json.as_bytes(), dict);
    if packed.len() + 5 >= json.len() {
        return json.as_bytes().to_vec();
    }
    let len = u32::try_from(json.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(packed.len() + 5);
    out.push(PACKED);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&packed);
    out
}

/// Why a stored delta could not be read (see [`unpack`]).
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("a packed delta cut short")]
    CutShort,
    /// Its header claims more than [`MAX_DELTA_BYTES`].
    #[error("a packed delta of {0} bytes")]
    TooLarge(usize),
    #[error("a packed delta that does not unpack: {0}")]
    Corrupt(#[from] lz4_flex::block::DecompressError),
    /// It unpacked to another length than its header says.
    #[error("a packed delta of {got} bytes, not {len}")]
    WrongLength { got: usize, len: usize },
    #[error("a delta that is not UTF-8")]
    NotUtf8,
}

/// A stored delta's JSON (see [`pack`]).
pub fn unpack(stored: &[u8], dict: &[u8]) -> Result<String, UnpackError> {
    let json = match stored.split_first() {
        Some((&PACKED, rest)) => {
            let (len, block) = rest.split_at_checked(4).ok_or(UnpackError::CutShort)?;
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            if len > MAX_DELTA_BYTES {
                return Err(UnpackError::TooLarge(len));
            }
            let mut out = vec![0; len];
            let n = lz4_flex::block::decompress_into_with_dict(block, &mut out, dict)?;
            if n != len {
                return Err(UnpackError::WrongLength { got: n, len });
            }
            out
        }
        _ => stored.to_vec(),
    };
    String::from_utf8(json).map_err(|_| UnpackError::NotUtf8)
}

/// Why a delta could not be applied.
#[derive(Debug, thiserror::Error)]
#[error("at {path}: {reason}")]
pub struct DeltaError {
    /// Where in the document (`/`-separated keys and indexes).
    pub path: String,
    pub reason: String,
}

/// Applies a delta (its JSON) to `doc`. On an error `doc` may be partly changed.
pub fn apply(doc: &mut Value, delta: &str) -> Result<(), DeltaError> {
    let edit: Value = serde_json::from_str(delta).map_err(|e| DeltaError {
        path: "/".into(),
        reason: format!("not a delta: {e}"),
    })?;
    let mut path = Vec::new();
    apply_at(doc, edit, &mut path).map_err(|reason| DeltaError {
        path: format!("/{}", path.join("/")),
        reason,
    })
}

/// Applies `edit` to `doc`; on an error `path` is where it failed.
fn apply_at(doc: &mut Value, edit: Value, path: &mut Vec<String>) -> Result<(), String> {
    match edit {
        Value::Object(edits) => {
            for (k, e) in edits {
                path.push(k);
                let k = path.last().map(String::as_str).unwrap_or_default();
                match doc {
                    Value::Object(m) => match m.get_mut(k) {
                        Some(child) => apply_at(child, e, path)?,
                        None => {
                            let v = new_value(e)?;
                            m.insert(k.to_string(), v);
                        }
                    },
                    Value::Array(a) => {
                        let len = a.len();
                        let child = k
                            .parse::<usize>()
                            .ok()
                            .and_then(|i| a.get_mut(i))
                            .ok_or_else(|| format!("no element {k:?} in an array of {len}"))?;
                        apply_at(child, e, path)?;
                    }
                    other => return Err(format!("an edit of members of {}", kind(other))),
                }
                path.pop();
            }
            Ok(())
        }
        Value::Array(parts) => apply_op(doc, parts, path),
        scalar => {
            *doc = scalar;
            Ok(())
        }
    }
}

/// The value a member the object lacks takes.
fn new_value(edit: Value) -> Result<Value, String> {
    match edit {
        Value::Array(parts) if parts.len() == 2 && parts[0] == "s" => {
            Ok(parts.into_iter().nth(1).unwrap_or_default())
        }
        Value::Object(_) | Value::Array(_) => Err("an edit of a member that does not exist".into()),
        scalar => Ok(scalar),
    }
}

fn apply_op(doc: &mut Value, parts: Vec<Value>, path: &mut Vec<String>) -> Result<(), String> {
    let mut parts = parts.into_iter();
    let Some(Value::String(name)) = parts.next() else {
        return Err("an operation without a name".into());
    };
    let num = |what: &str, v: Option<Value>| match v {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| format!("{n} is not {what}")),
        _ => Err(format!("{name:?} without {what}")),
    };
    let values = |v: Option<Value>| match v {
        Some(Value::Array(values)) => Ok(values),
        _ => Err(format!("{name:?} without values")),
    };
    match name.as_str() {
        "s" => *doc = parts.next().ok_or("\"s\" without a value")?,
        "a" => {
            let n = num("a length", parts.next())?;
            let values = values(parts.next())?;
            match doc {
                Value::Array(a) if a.len() == n => insert_items(a, n, values, &[], path)?,
                Value::Array(a) => {
                    return Err(format!(
                        "an append made for {n} elements to an array of {}",
                        a.len()
                    ))
                }
                other => return Err(format!("an append to {}", kind(other))),
            }
        }
        "t" => {
            let n = num("a length", parts.next())?;
            match doc {
                Value::Array(a) if a.len() >= n => a.truncate(n),
                Value::Array(a) => return Err(format!("a cut to {n} of an array of {}", a.len())),
                other => return Err(format!("a cut of {}", kind(other))),
            }
        }
        "x" => {
            let len = num("a length", parts.next())?;
            let at = num("a position", parts.next())?;
            let del = num("a count", parts.next())?;
            let values = values(parts.next())?;
            match doc {
                Value::Array(a) if a.len() == len && at + del <= len => {
                    let removed: Vec<Value> = a.drain(at..at + del).collect();
                    insert_items(a, at, values, &removed, path)?;
                }
                Value::Array(a) => {
                    return Err(format!(
                        "a splice at {at} (-{del}) made for {len} elements into an array of {}",
                        a.len()
                    ))
                }
                other => return Err(format!("a splice into {}", kind(other))),
            }
        }
        "k" => {
            let keys = values(parts.next())?;
            let keep: std::collections::BTreeSet<&str> =
                keys.iter().filter_map(Value::as_str).collect();
            match doc {
                Value::Object(m) => m.retain(|k, _| keep.contains(k.as_str())),
                other => return Err(format!("a key list for {}", kind(other))),
            }
            let edit = parts.next().ok_or("\"k\" without an edit")?;
            apply_at(doc, edit, path)?;
        }
        "-" => {
            let keys = values(parts.next())?;
            let Value::Object(m) = doc else {
                return Err(format!("a removal of members of {}", kind(doc)));
            };
            for k in &keys {
                let k = k
                    .as_str()
                    .ok_or("a removal of a key that is not a string")?;
                m.remove(k)
                    .ok_or_else(|| format!("a removal of {k:?}, which is not there"))?;
            }
            let edit = parts.next().ok_or("\"-\" without an edit")?;
            apply_at(doc, edit, path)?;
        }
        "m" => {
            for edit in parts {
                apply_at(doc, edit, path)?;
            }
        }
        other => return Err(format!("unknown operation {other:?}")),
    }
    Ok(())
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

#[cfg(test)]
mod tests;
