//! A typed value hashed as it is serialized ([`Node`]), guided by the [`Shape`] of the
//! document it is diffed against: a part whose last shape is a hash alone is hashed
//! without building its JSON value, and built only when its hash changed. So a
//! transition costs one hashing pass over the state (no copy of it, no allocation in the
//! parts it did not change) and the JSON values of what it changed.
//!
//! The hashes are those of the values' JSON, whatever the type that serializes them: a
//! [`serde_json::Value`] and the typed value it came from hash the same, except for the
//! order of an object's members (a hash follows the order they are serialized in; a
//! writer hashes the same type every time).

use std::borrow::Cow;

use serde::ser::{self, Serialize};
use serde_json::{Map, Number, Value};

use super::sip::Sip;
use super::{Known, Shape, Shaper, LEAF_BYTES};

/// A serialized value: its hash, the approximate length of its JSON, and its content where
/// it was built.
#[derive(Debug)]
pub(super) struct Node {
    pub hash: u64,
    pub size: usize,
    pub kind: Kind,
}

#[derive(Debug)]
pub(super) enum Kind {
    Scalar(Value),
    /// Hashed only: the same hash as the part of the last shape it stands for.
    Opaque,
    /// Members in serialization order: key, hash of the key, value.
    Obj(Vec<(Cow<'static, str>, u64, Node)>),
    Arr(Vec<Node>),
}

/// A part of the new document a diff needs and that was not built (see [`Node::value`]).
#[derive(Debug)]
pub(super) struct NotBuilt;

impl Node {
    /// Its JSON value.
    pub fn value(&self) -> Result<Value, NotBuilt> {
        Ok(match &self.kind {
            Kind::Scalar(v) => v.clone(),
            Kind::Opaque => return Err(NotBuilt),
            Kind::Obj(fields) => {
                let mut m = Map::new();
                for (k, _, n) in fields {
                    m.insert(k.to_string(), n.value()?);
                }
                Value::Object(m)
            }
            Kind::Arr(elems) => {
                Value::Array(elems.iter().map(Node::value).collect::<Result<_, _>>()?)
            }
        })
    }

    /// Whether its unpruned shape keeps its structure (an object or array of
    /// [`LEAF_BYTES`] or more).
    pub fn is_tree(&self) -> bool {
        matches!(self.kind, Kind::Obj(_) | Kind::Arr(_)) && self.size >= LEAF_BYTES
    }
}

/// Hash and size of a scalar's parts, and the context of one serialization.
pub(super) struct Cx<'s> {
    shaper: &'s Shaper,
    /// Hashes of struct field names by address (they are `'static`: an address always
    /// holds the same text).
    names: Vec<(usize, usize, u64)>,
    /// A map key's text while it is hashed (one buffer for every key).
    key_buf: String,
    /// Elements of one member of the root object known not to have changed (their hash
    /// and size are taken as known, their values not read).
    known: Option<Known>,
    /// Objects and arrays open around the value being serialized.
    depth: usize,
    /// The next compound is the member `known` names.
    arm: bool,
    /// Elements taken as known (not read).
    pub unread: usize,
}

const NAME_SLOTS: usize = 256;

/// The field names' hashes go back to the shaper for the next serialization.
impl Drop for Cx<'_> {
    fn drop(&mut self) {
        if let Ok(mut n) = self.shaper.names.lock() {
            *n = std::mem::take(&mut self.names);
        }
    }
}

impl<'s> Cx<'s> {
    pub fn new(shaper: &'s Shaper) -> Self {
        Self {
            shaper,
            names: shaper
                .names
                .lock()
                .map(|mut n| std::mem::take(&mut *n))
                .ok()
                .filter(|n| n.len() == NAME_SLOTS)
                .unwrap_or_else(|| vec![(0, 0, 0); NAME_SLOTS]),
            key_buf: String::new(),
            known: None,
            depth: 0,
            arm: false,
            unread: 0,
        }
    }

    /// A context that takes `known`'s elements as unchanged.
    pub fn with_known(shaper: &'s Shaper, known: Option<Known>) -> Self {
        let mut cx = Self::new(shaper);
        cx.known = known;
        cx
    }

    /// The known hash and size of element `i` of the member `known` names.
    fn known_elem(&self, i: usize) -> Option<(u64, usize)> {
        self.known.as_ref()?.elems.get(i).copied().flatten()
    }

    fn static_key(&mut self, k: &'static str) -> u64 {
        let addr = k.as_ptr() as usize;
        let slot = (addr >> 3) % NAME_SLOTS;
        let e = self.names[slot];
        if e.0 == addr && e.1 == k.len() && addr != 0 {
            return e.2;
        }
        let h = self.shaper.hash_key(k);
        self.names[slot] = (addr, k.len(), h);
        h
    }

    /// The hash of a scalar given as a tag and one word.
    fn scalar(&self, tag: u64, w: u64) -> u64 {
        let mut h = self.shaper.keys.hasher(tag);
        h.word(w);
        h.finish()
    }
}

/// Serializes one value (`old`: its part of the last shape, if any; `opaque`: build
/// nothing, only hash).
pub(super) struct Ser<'c, 's, 'o> {
    pub cx: &'c mut Cx<'s>,
    pub old: Option<&'o Shape>,
    pub opaque: bool,
}

#[derive(Debug)]
pub(super) struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Error {}
impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

/// The node of `v` under `old` (its part of the last shape): hashed alone first when the
/// last shape kept only a hash of it, and built only if that hash changed.
pub(super) fn node<T: Serialize + ?Sized>(
    cx: &mut Cx<'_>,
    v: &T,
    old: Option<&Shape>,
    opaque: bool,
) -> Result<Node, Error> {
    if !opaque {
        if let Some(Shape::Leaf(h)) = old {
            let n = v.serialize(Ser {
                cx: &mut *cx,
                old: None,
                opaque: true,
            })?;
            if n.hash == *h {
                return Ok(n);
            }
            return v.serialize(Ser {
                cx,
                old: None,
                opaque: false,
            });
        }
    }
    v.serialize(Ser { cx, old, opaque })
}

impl<'c, 's, 'o> Ser<'c, 's, 'o> {
    fn leaf(self, hash: u64, size: usize, v: impl FnOnce() -> Value) -> Node {
        Node {
            hash,
            size,
            kind: if self.opaque {
                Kind::Opaque
            } else {
                Kind::Scalar(v())
            },
        }
    }

    fn null(self) -> Node {
        let h = self.cx.scalar(0, 0);
        self.leaf(h, 4, || Value::Null)
    }

    fn u64(self, n: u64) -> Node {
        let h = self.cx.scalar(2, n);
        self.leaf(h, 8, || Value::Number(n.into()))
    }

    fn i64(self, n: i64) -> Node {
        match u64::try_from(n) {
            Ok(u) => self.u64(u),
            Err(_) => {
                let h = self.cx.scalar(6, n as u64);
                self.leaf(h, 8, || Value::Number(n.into()))
            }
        }
    }

    fn f64(self, f: f64) -> Node {
        match Number::from_f64(f) {
            Some(n) => {
                let h = self.cx.scalar(7, f.to_bits());
                self.leaf(h, 8, || Value::Number(n))
            }
            None => self.null(),
        }
    }

    fn str(self, s: &str) -> Node {
        let h = self.cx.shaper.keys.str(3, s);
        self.leaf(h, s.len() + 2, || Value::String(s.to_string()))
    }

    fn compound(self, kind: u64, len: Option<usize>) -> Compound<'c, 's, 'o> {
        let hasher = self.cx.shaper.keys.hasher(kind);
        let known = std::mem::take(&mut self.cx.arm) && kind == ARR;
        self.cx.depth += 1;
        let (fields, elems) = match (self.opaque, kind) {
            (true, _) => (Vec::new(), Vec::new()),
            (false, OBJ) => (Vec::with_capacity(len.unwrap_or(0)), Vec::new()),
            (false, _) => (Vec::new(), Vec::with_capacity(len.unwrap_or(0))),
        };
        Compound {
            cx: self.cx,
            old: self.old,
            opaque: self.opaque,
            hasher,
            kind,
            count: 0,
            size: 2,
            fields,
            elems,
            key: None,
            variant: None,
            known,
        }
    }
}

const ARR: u64 = 4;
const OBJ: u64 = 5;

/// An array or object being serialized.
pub(super) struct Compound<'c, 's, 'o> {
    cx: &'c mut Cx<'s>,
    old: Option<&'o Shape>,
    opaque: bool,
    hasher: Sip,
    kind: u64,
    count: usize,
    size: usize,
    fields: Vec<(Cow<'static, str>, u64, Node)>,
    elems: Vec<Node>,
    /// A map's key, between `serialize_key` and `serialize_value`: its hash, its length
    /// and, when this compound is built, its text.
    key: Option<(u64, usize, Option<Cow<'static, str>>)>,
    /// An enum variant's name wrapped around this compound (`{"Variant": ...}`).
    variant: Option<&'static str>,
    /// The array member of the root whose elements `Cx::known` may name.
    known: bool,
}

impl<'o> Compound<'_, '_, 'o> {
    fn old_elem(&self, i: usize) -> Option<&'o Shape> {
        match self.old {
            Some(Shape::Arr(_, e)) => e.get(i),
            _ => None,
        }
    }

    fn old_field(&self, kh: u64) -> Option<&'o Shape> {
        match self.old {
            Some(Shape::Obj(_, f, _)) => f
                .binary_search_by_key(&kh, |(h, _)| *h)
                .ok()
                .map(|i| &f[i].1),
            _ => None,
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        let i = self.count;
        let old = self.old_elem(i);
        let n = match self.known.then(|| self.cx.known_elem(i)).flatten() {
            // Known unchanged (and the last shape agrees): not read.
            Some((hash, size)) if old.is_none_or(|o| o.hash() == hash) => {
                #[cfg(debug_assertions)]
                {
                    let real = node(self.cx, v, None, true)?;
                    assert_eq!(
                        (real.hash, real.size),
                        (hash, size),
                        "element {i} was given as unchanged but changed"
                    );
                }
                self.cx.unread += 1;
                Node {
                    hash,
                    size,
                    kind: Kind::Opaque,
                }
            }
            // An element the next shape keeps as a hash alone is hashed alone unless it
            // changed: built only if the last shape had it as a tree.
            _ => node(self.cx, v, old, self.opaque)?,
        };
        self.hasher.word(n.hash);
        self.size += n.size + 1;
        self.count += 1;
        if !self.opaque {
            self.elems.push(n);
        }
        Ok(())
    }

    fn field<T: Serialize + ?Sized>(
        &mut self,
        k: Cow<'static, str>,
        kh: u64,
        v: &T,
    ) -> Result<(), Error> {
        let len = k.len();
        self.field_of(Some(k), len, kh, v)
    }

    /// A member whose key is `len` bytes long and hashes to `kh`; its text `k` is needed
    /// only when the compound is built.
    fn field_of<T: Serialize + ?Sized>(
        &mut self,
        k: Option<Cow<'static, str>>,
        len: usize,
        kh: u64,
        v: &T,
    ) -> Result<(), Error> {
        let old = self.old_field(kh);
        let arm = self.cx.depth == 1
            && self
                .cx
                .known
                .as_ref()
                .is_some_and(|known| k.as_deref() == Some(known.field));
        self.cx.arm = arm;
        let n = node(self.cx, v, old, self.opaque);
        self.cx.arm = false;
        let n = n?;
        self.hasher.word(kh);
        self.hasher.word(n.hash);
        self.size += len + 4 + n.size;
        self.count += 1;
        if !self.opaque {
            let k = k.ok_or_else(|| Error("a built member without its key".into()))?;
            self.fields.push((k, kh, n));
        }
        Ok(())
    }

    fn end(mut self) -> Result<Node, Error> {
        self.cx.depth -= 1;
        self.hasher.word(self.count as u64);
        let hash = self.hasher.finish();
        let kind = if self.opaque {
            Kind::Opaque
        } else if self.kind == OBJ {
            Kind::Obj(self.fields)
        } else {
            Kind::Arr(self.elems)
        };
        let node = Node {
            hash,
            size: self.size,
            kind,
        };
        match self.variant {
            None => Ok(node),
            Some(name) => Ok(wrap(self.cx, name, node, self.opaque)),
        }
    }
}

/// `{"name": node}` (an enum variant with content).
fn wrap(cx: &mut Cx<'_>, name: &'static str, node: Node, opaque: bool) -> Node {
    let kh = cx.static_key(name);
    let mut h = cx.shaper.keys.hasher(OBJ);
    h.word(kh);
    h.word(node.hash);
    h.word(1);
    let size = 2 + name.len() + 4 + node.size;
    Node {
        hash: h.finish(),
        size,
        kind: if opaque {
            Kind::Opaque
        } else {
            Kind::Obj(vec![(Cow::Borrowed(name), kh, node)])
        },
    }
}

impl<'c, 's, 'o> ser::Serializer for Ser<'c, 's, 'o> {
    type Ok = Node;
    type Error = Error;
    type SerializeSeq = Compound<'c, 's, 'o>;
    type SerializeTuple = Compound<'c, 's, 'o>;
    type SerializeTupleStruct = Compound<'c, 's, 'o>;
    type SerializeTupleVariant = Compound<'c, 's, 'o>;
    type SerializeMap = Compound<'c, 's, 'o>;
    type SerializeStruct = Compound<'c, 's, 'o>;
    type SerializeStructVariant = Compound<'c, 's, 'o>;

    fn serialize_bool(self, b: bool) -> Result<Node, Error> {
        let h = self.cx.scalar(1, u64::from(b));
        Ok(self.leaf(h, 5, || Value::Bool(b)))
    }
    fn serialize_i8(self, v: i8) -> Result<Node, Error> {
        Ok(self.i64(v.into()))
    }
    fn serialize_i16(self, v: i16) -> Result<Node, Error> {
        Ok(self.i64(v.into()))
    }
    fn serialize_i32(self, v: i32) -> Result<Node, Error> {
        Ok(self.i64(v.into()))
    }
    fn serialize_i64(self, v: i64) -> Result<Node, Error> {
        Ok(self.i64(v))
    }
    fn serialize_u8(self, v: u8) -> Result<Node, Error> {
        Ok(self.u64(v.into()))
    }
    fn serialize_u16(self, v: u16) -> Result<Node, Error> {
        Ok(self.u64(v.into()))
    }
    fn serialize_u32(self, v: u32) -> Result<Node, Error> {
        Ok(self.u64(v.into()))
    }
    fn serialize_u64(self, v: u64) -> Result<Node, Error> {
        Ok(self.u64(v))
    }
    fn serialize_f32(self, v: f32) -> Result<Node, Error> {
        Ok(self.f64(v.into()))
    }
    fn serialize_f64(self, v: f64) -> Result<Node, Error> {
        Ok(self.f64(v))
    }
    fn serialize_char(self, c: char) -> Result<Node, Error> {
        Ok(self.str(c.encode_utf8(&mut [0; 4])))
    }
    fn serialize_str(self, s: &str) -> Result<Node, Error> {
        Ok(self.str(s))
    }
    fn serialize_bytes(self, b: &[u8]) -> Result<Node, Error> {
        use ser::SerializeSeq;
        let mut seq = self.serialize_seq(Some(b.len()))?;
        for x in b {
            seq.serialize_element(x)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Result<Node, Error> {
        Ok(self.null())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<Node, Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<Node, Error> {
        Ok(self.null())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Node, Error> {
        Ok(self.null())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Node, Error> {
        Ok(self.str(variant))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<Node, Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<Node, Error> {
        let inner_old = match self.old {
            Some(Shape::Obj(_, f, _)) if f.len() == 1 => Some(&f[0].1),
            _ => None,
        };
        let opaque = self.opaque;
        let n = node(self.cx, v, inner_old, opaque)?;
        Ok(wrap(self.cx, variant, n, opaque))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'c, 's, 'o>, Error> {
        Ok(self.compound(ARR, len))
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'c, 's, 'o>, Error> {
        Ok(self.compound(ARR, Some(len)))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        len: usize,
    ) -> Result<Compound<'c, 's, 'o>, Error> {
        Ok(self.compound(ARR, Some(len)))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'c, 's, 'o>, Error> {
        let old = match self.old {
            Some(Shape::Obj(_, f, _)) if f.len() == 1 => Some(&f[0].1),
            _ => None,
        };
        let mut c = Ser { old, ..self }.compound(ARR, Some(len));
        c.variant = Some(variant);
        Ok(c)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'c, 's, 'o>, Error> {
        Ok(self.compound(OBJ, len))
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<Compound<'c, 's, 'o>, Error> {
        Ok(self.compound(OBJ, Some(len)))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'c, 's, 'o>, Error> {
        let old = match self.old {
            Some(Shape::Obj(_, f, _)) if f.len() == 1 => Some(&f[0].1),
            _ => None,
        };
        let mut c = Ser { old, ..self }.compound(OBJ, Some(len));
        c.variant = Some(variant);
        Ok(c)
    }
}

/// The serde traits of a compound whose items are elements (`method` names the trait's
/// item method): each item is an element, the end is [`Compound::end`].
macro_rules! element_compound {
    ($($trait:ident::$method:ident),* $(,)?) => {$(
        impl ser::$trait for Compound<'_, '_, '_> {
            type Ok = Node;
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
                self.element(v)
            }
            fn end(self) -> Result<Node, Error> {
                Compound::end(self)
            }
        }
    )*};
}

element_compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl ser::SerializeMap for Compound<'_, '_, '_> {
    type Ok = Node;
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Error> {
        // The key's text goes into a buffer kept across keys: only a key that is built
        // (not hashed alone) is copied out of it.
        let mut text = std::mem::take(&mut self.cx.key_buf);
        text.clear();
        let written = k.serialize(KeySer(&mut text));
        let key = written.map(|()| {
            let kh = self.cx.shaper.hash_key(&text);
            let owned = (!self.opaque).then(|| Cow::Owned(text.clone()));
            (kh, text.len(), owned)
        });
        self.cx.key_buf = text;
        self.key = Some(key?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        let (kh, len, k) = self
            .key
            .take()
            .ok_or_else(|| Error("a map value without its key".into()))?;
        self.field_of(k, len, kh, v)
    }
    fn end(self) -> Result<Node, Error> {
        Compound::end(self)
    }
}

impl ser::SerializeStruct for Compound<'_, '_, '_> {
    type Ok = Node;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        k: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        let kh = self.cx.static_key(k);
        self.field(Cow::Borrowed(k), kh, v)
    }
    fn end(self) -> Result<Node, Error> {
        Compound::end(self)
    }
}

impl ser::SerializeStructVariant for Compound<'_, '_, '_> {
    type Ok = Node;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        k: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        let kh = self.cx.static_key(k);
        self.field(Cow::Borrowed(k), kh, v)
    }
    fn end(self) -> Result<Node, Error> {
        Compound::end(self)
    }
}

/// A map key as JSON writes it: strings, and numbers and booleans as their text.
struct KeySer<'b>(&'b mut String);

impl KeySer<'_> {
    /// A number or boolean key: its text, as JSON writes it.
    fn text(self, v: impl std::fmt::Display) -> Result<(), Error> {
        use std::fmt::Write as _;
        write!(self.0, "{v}").map_err(|e| Error(e.to_string()))
    }
}

fn key_error() -> Error {
    Error("a map key that is not a string".into())
}

impl ser::Serializer for KeySer<'_> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = ser::Impossible<(), Error>;
    type SerializeTuple = ser::Impossible<(), Error>;
    type SerializeTupleStruct = ser::Impossible<(), Error>;
    type SerializeTupleVariant = ser::Impossible<(), Error>;
    type SerializeMap = ser::Impossible<(), Error>;
    type SerializeStruct = ser::Impossible<(), Error>;
    type SerializeStructVariant = ser::Impossible<(), Error>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.text(v)
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.text(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.text(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.text(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.text(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.text(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.text(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.text(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.text(v)
    }
    fn serialize_f32(self, _: f32) -> Result<(), Error> {
        Err(key_error())
    }
    fn serialize_f64(self, _: f64) -> Result<(), Error> {
        Err(key_error())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.0.push(v);
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.0.push_str(v);
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Error> {
        Err(key_error())
    }
    fn serialize_none(self) -> Result<(), Error> {
        Err(key_error())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), Error> {
        Err(key_error())
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Err(key_error())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        Err(key_error())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.0.push_str(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Error> {
        Err(key_error())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(key_error())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
        Err(key_error())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        Err(key_error())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(key_error())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(key_error())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
        Err(key_error())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(key_error())
    }
}
