//! JSON-schema constrained decoding: which bytes may come next so that the completion is
//! JSON matching a schema.
//!
//! [`JsonSchema::compile`] turns a JSON Schema (the subset structured-output APIs accept:
//! `object` with `properties`, `array` with `items`, `string`, `integer`, `number`,
//! `boolean`, `null`, `enum`/`const`) into a small grammar, and [`JsonMatcher`] walks it byte
//! by byte. The generator asks the matcher, for each candidate token, whether the token's
//! bytes may come next, and samples only among tokens that may; so the text is valid
//! JSON of the schema at every step, never repaired or retried afterwards.
//!
//! The texts admitted are compact JSON with a fixed shape, which a small model follows
//! far more reliably than free JSON:
//! - no whitespace between tokens;
//! - an object's properties all present, once each, in the order of its `required` list
//!   (then any others), which is what structured-output APIs require of a strict schema
//!   anyway;
//! - strings of printable ASCII but brackets (`{}[]`), with the escapes `\"`, `\\`, `\/`,
//!   `\n`, `\t`, of at least
//!   [`Limits::min_string_chars`] and at most [`Limits::max_string_chars`] characters (or
//!   the schema's `minLength` / `maxLength`);
//! - arrays of at most [`Limits::max_array_items`] items (or the schema's `maxItems`);
//! - non-negative integers within `minimum`..=`maximum`, numbers with at most three
//!   decimals.
//!
//! Bounded strings and arrays bound the whole text, and [`JsonMatcher::completion`] gives
//! the shortest bytes that close a partial text: when the token budget runs out mid-way
//! the generator appends them, so even a cut-off generation is valid JSON.

use std::sync::Arc;

use serde_json::Value;

/// Bytes a string may not hold: JSON's brackets. A small model that loses track of the
/// structure writes the rest of the object inside a string (`"...],'next':{#1.5}"`);
/// without brackets it has to close the string instead. The schemas asked for hold prose.
const STRUCTURAL: [u8; 4] = [b'{', b'}', b'[', b']'];

/// Bounds applied where the schema sets none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Shortest string, in characters.
    pub min_string_chars: usize,
    /// Longest string, in characters.
    pub max_string_chars: usize,
    /// Most items in an array.
    pub max_array_items: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            min_string_chars: 1,
            max_string_chars: 1200,
            max_array_items: 6,
        }
    }
}

/// Largest integer the matcher admits (keeps the arithmetic in `u64`).
const MAX_INT: u64 = 999_999_999_999;
/// Decimals a `number` may have.
const MAX_DECIMALS: u8 = 3;
/// Deepest nesting a schema may have.
const MAX_DEPTH: usize = 16;

#[derive(Debug, Clone)]
enum Node {
    /// `{"k0":v0,"k1":v1,...}`: (literal before the value, value node) per property, then
    /// the closing literal.
    Object {
        parts: Vec<(Lit, usize)>,
        close: Lit,
    },
    Array {
        items: usize,
        min: usize,
        max: usize,
    },
    String {
        min: usize,
        max: usize,
    },
    /// One of these serialized JSON values (no option a prefix of another).
    Enum(Vec<Vec<u8>>),
    Integer {
        min: u64,
        max: u64,
        decimals: bool,
    },
}

/// Index of a literal in [`Compiled::lits`].
type Lit = usize;

#[derive(Debug)]
struct Compiled {
    nodes: Vec<Node>,
    lits: Vec<Vec<u8>>,
    root: usize,
}

/// A compiled schema; cheap to clone and share.
#[derive(Debug, Clone)]
pub struct JsonSchema(Arc<Compiled>);

/// Why a schema cannot be used for constrained decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported JSON schema at {path}: {reason}")]
pub struct SchemaError {
    /// JSON pointer of the offending part (`""` = the root).
    pub path: String,
    pub reason: String,
}

impl JsonSchema {
    /// Compiles `schema` with `limits` for strings and arrays that set no bound.
    pub fn compile(schema: &Value, limits: Limits) -> Result<Self, SchemaError> {
        let mut c = Compiled {
            nodes: Vec::new(),
            lits: Vec::new(),
            root: 0,
        };
        c.root = compile(&mut c, schema, "", limits, 0)?;
        Ok(Self(Arc::new(c)))
    }

    /// A matcher at the start of the text.
    pub fn matcher(&self) -> JsonMatcher {
        JsonMatcher {
            schema: self.0.clone(),
            stack: vec![Frame::Value(self.0.root)],
        }
    }

    /// Upper bound on the bytes of any text the schema admits.
    pub fn max_bytes(&self) -> usize {
        max_bytes(&self.0, self.0.root)
    }
}

fn max_bytes(c: &Compiled, node: usize) -> usize {
    match &c.nodes[node] {
        Node::Object { parts, close } => parts
            .iter()
            .map(|(lit, v)| c.lits[*lit].len() + max_bytes(c, *v))
            .sum::<usize>()
            .saturating_add(c.lits[*close].len()),
        Node::Array { items, max, .. } => max_bytes(c, *items)
            .saturating_add(1)
            .saturating_mul(*max)
            .saturating_add(2),
        // Every character may be a two-byte escape.
        Node::String { max, .. } => max.saturating_mul(2).saturating_add(2),
        Node::Enum(options) => options.iter().map(Vec::len).max().unwrap_or(0),
        Node::Integer { max, decimals, .. } => {
            max.to_string().len()
                + if *decimals {
                    1 + MAX_DECIMALS as usize
                } else {
                    0
                }
        }
    }
}

fn err(path: &str, reason: impl Into<String>) -> SchemaError {
    SchemaError {
        path: path.to_string(),
        reason: reason.into(),
    }
}

fn usize_key(schema: &Value, key: &str, path: &str) -> Result<Option<usize>, SchemaError> {
    match schema.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| err(path, format!("{key} must be a non-negative integer"))),
    }
}

fn compile(
    c: &mut Compiled,
    schema: &Value,
    path: &str,
    limits: Limits,
    depth: usize,
) -> Result<usize, SchemaError> {
    if depth > MAX_DEPTH {
        return Err(err(path, format!("nested deeper than {MAX_DEPTH} levels")));
    }
    let obj = schema
        .as_object()
        .ok_or_else(|| err(path, "a schema must be a JSON object"))?;
    let options = match (obj.get("enum"), obj.get("const")) {
        (Some(Value::Array(vs)), _) => Some(vs.clone()),
        (Some(_), _) => return Err(err(path, "enum must be an array")),
        (None, Some(v)) => Some(vec![v.clone()]),
        (None, None) => None,
    };
    if let Some(options) = options {
        if options.is_empty() {
            return Err(err(path, "enum is empty"));
        }
        let mut texts = Vec::with_capacity(options.len());
        for o in &options {
            if !matches!(o, Value::String(_) | Value::Bool(_) | Value::Null) {
                return Err(err(
                    path,
                    "only string, boolean and null enum values are supported",
                ));
            }
            let t = o.to_string().into_bytes();
            if !t.iter().all(|b| (0x20..0x7f).contains(b)) {
                return Err(err(path, "enum values must be printable ASCII"));
            }
            texts.push(t);
        }
        texts.sort();
        texts.dedup();
        let node = c.nodes.len();
        c.nodes.push(Node::Enum(texts));
        return Ok(node);
    }
    let ty = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(_) => {
            return Err(err(
                path,
                "type must be a single type name (unions are not supported)",
            ))
        }
        None if obj.contains_key("properties") => "object",
        None if obj.contains_key("items") => "array",
        None => return Err(err(path, "no type")),
    };
    let node = match ty {
        "object" => {
            let props = match obj.get("properties") {
                Some(Value::Object(p)) => p.clone(),
                None => serde_json::Map::new(),
                Some(_) => return Err(err(path, "properties must be an object")),
            };
            // The `required` order first (JSON objects, and so `properties`, may come
            // sorted by key), then any other property.
            let mut order: Vec<&String> = Vec::with_capacity(props.len());
            if let Some(Value::Array(req)) = obj.get("required") {
                for k in req.iter().filter_map(Value::as_str) {
                    if let Some((key, _)) = props.get_key_value(k) {
                        if !order.contains(&key) {
                            order.push(key);
                        }
                    }
                }
            }
            for key in props.keys() {
                if !order.contains(&key) {
                    order.push(key);
                }
            }
            let mut parts = Vec::with_capacity(props.len());
            for (i, (key, sub)) in order.iter().map(|k| (*k, &props[k.as_str()])).enumerate() {
                let sub_path = format!("{path}/properties/{key}");
                let key_json = Value::String(key.clone()).to_string();
                if !key_json.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                    return Err(err(&sub_path, "property names must be printable ASCII"));
                }
                let lit = format!("{}{key_json}:", if i == 0 { "{" } else { "," });
                let lit_id = c.lits.len();
                c.lits.push(lit.into_bytes());
                let value = compile(c, sub, &sub_path, limits, depth + 1)?;
                parts.push((lit_id, value));
            }
            let close = c.lits.len();
            c.lits.push(if parts.is_empty() {
                b"{}".to_vec()
            } else {
                b"}".to_vec()
            });
            Node::Object { parts, close }
        }
        "array" => {
            let items_schema = obj
                .get("items")
                .ok_or_else(|| err(path, "an array needs items"))?;
            let items = compile(c, items_schema, &format!("{path}/items"), limits, depth + 1)?;
            let min = usize_key(schema, "minItems", path)?.unwrap_or(0);
            let max = usize_key(schema, "maxItems", path)?
                .unwrap_or(limits.max_array_items)
                .min(limits.max_array_items.max(min));
            if min > max {
                return Err(err(path, "minItems is above maxItems"));
            }
            Node::Array { items, min, max }
        }
        "string" => {
            let min = usize_key(schema, "minLength", path)?.unwrap_or(limits.min_string_chars);
            let max = usize_key(schema, "maxLength", path)?
                .unwrap_or(limits.max_string_chars)
                .min(limits.max_string_chars.max(min));
            if min > max {
                return Err(err(path, "minLength is above maxLength"));
            }
            Node::String { min, max }
        }
        "integer" | "number" => {
            let bound = |key: &str| -> Result<Option<u64>, SchemaError> {
                match obj.get(key) {
                    None => Ok(None),
                    Some(v) => match v.as_f64() {
                        Some(f) if f.is_finite() && f >= 0.0 => Ok(Some((f as u64).min(MAX_INT))),
                        Some(f) if f.is_finite() => Err(err(
                            path,
                            format!("{key} {f}: negative numbers are not supported"),
                        )),
                        _ => Err(err(path, format!("{key} must be a number"))),
                    },
                }
            };
            let min = bound("minimum")?.unwrap_or(0);
            let max = bound("maximum")?.unwrap_or(MAX_INT);
            if min > max {
                return Err(err(path, "minimum is above maximum"));
            }
            Node::Integer {
                min,
                max,
                decimals: ty == "number",
            }
        }
        "boolean" => Node::Enum(vec![b"false".to_vec(), b"true".to_vec()]),
        "null" => Node::Enum(vec![b"null".to_vec()]),
        other => return Err(err(path, format!("type {other:?} is not supported"))),
    };
    let id = c.nodes.len();
    c.nodes.push(node);
    Ok(id)
}

/// Where the matcher is inside one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// A value of this node is still to start.
    Value(usize),
    /// Bytes of a literal still to match.
    Lit { lit: Lit, pos: usize },
    /// Inside a string, after its opening quote.
    Str {
        len: usize,
        min: usize,
        max: usize,
        escape: bool,
    },
    /// Inside an array, after `[`.
    Arr {
        node: usize,
        count: usize,
        phase: ArrPhase,
    },
    /// Inside an enum value: `pos` bytes matched, consistent with option `option`.
    Enum {
        node: usize,
        option: usize,
        pos: usize,
    },
    /// Inside a number: the integer part so far (`digits` of them), then the decimals.
    Int {
        node: usize,
        value: u64,
        digits: u8,
        /// `None` before a `.`, else decimals after it.
        decimals: Option<u8>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArrPhase {
    /// Just after `[`: `]` or the first item.
    Open,
    /// After `,`: an item.
    NeedItem,
    /// After an item: `,` or `]`.
    AfterItem,
}

/// Working space for [`JsonMatcher::accepts`], so checking many tokens allocates once.
#[derive(Debug, Clone, Default)]
pub struct MatchScratch(Vec<Frame>);

/// A position in a text being matched against a [`JsonSchema`]. Cloning it is cheap.
#[derive(Debug, Clone)]
pub struct JsonMatcher {
    schema: Arc<Compiled>,
    /// Frames still to finish, innermost last.
    stack: Vec<Frame>,
}

impl JsonMatcher {
    /// Whether the text so far is a complete value (nothing more may follow, or only more
    /// digits of a trailing number).
    pub fn is_complete(&self) -> bool {
        match self.stack.as_slice() {
            [] => true,
            [f @ Frame::Int { .. }] => self.int_complete(f),
            _ => false,
        }
    }

    /// Whether the text is complete and nothing more may follow.
    pub fn is_finished(&self) -> bool {
        self.stack.is_empty()
    }

    /// Whether `bytes` may come next (the matcher is not changed; `scratch` is working
    /// space reused across calls).
    pub fn accepts(&self, bytes: &[u8], scratch: &mut MatchScratch) -> bool {
        let s = &mut scratch.0;
        s.clear();
        s.extend_from_slice(&self.stack);
        bytes.iter().all(|&b| step(&self.schema, s, b))
    }

    /// Consumes `bytes`; returns false (and leaves the matcher unchanged) when they may
    /// not come next.
    pub fn advance(&mut self, bytes: &[u8]) -> bool {
        let mut next = self.stack.clone();
        if bytes.iter().all(|&b| step(&self.schema, &mut next, b)) {
            self.stack = next;
            true
        } else {
            false
        }
    }

    /// The shortest bytes that make the text so far a complete value.
    pub fn completion(&self) -> Vec<u8> {
        let mut stack = self.stack.clone();
        let mut out = Vec::new();
        // Each step either pops a frame or moves within one toward its end; the schema is
        // finite, so this ends. The bound guards against a bug turning into a hang.
        for _ in 0..1_000_000 {
            let Some(top) = stack.last().copied() else {
                break;
            };
            if let Frame::Int { .. } = top {
                if self.int_complete(&top) {
                    stack.pop();
                    continue;
                }
            }
            let Some(b) = shortest_next(&self.schema, &top) else {
                break;
            };
            if !step(&self.schema, &mut stack, b) {
                break;
            }
            out.push(b);
        }
        out
    }

    fn int_complete(&self, f: &Frame) -> bool {
        int_complete(&self.schema, f)
    }
}

fn int_complete(c: &Compiled, f: &Frame) -> bool {
    match *f {
        Frame::Int {
            node,
            value,
            digits,
            decimals,
        } => {
            let Node::Integer { min, max, .. } = c.nodes[node] else {
                return false;
            };
            digits > 0 && decimals != Some(0) && (min..=max).contains(&value)
        }
        _ => false,
    }
}

/// Whether an integer prefix (`value`, `digits` digits) can still grow into `min..=max`.
fn int_viable(value: u64, digits: u8, min: u64, max: u64) -> bool {
    if digits > 1 && value == 0 {
        return false;
    }
    let mut lo = value;
    let mut hi = value;
    for _ in digits..13 {
        if lo > max {
            return false;
        }
        if hi >= min {
            return true;
        }
        if value == 0 {
            // A leading zero admits no more digits.
            return false;
        }
        lo = lo.saturating_mul(10);
        hi = hi.saturating_mul(10).saturating_add(9);
    }
    false
}

/// Feeds one byte; false when it may not come next (`stack` is then unspecified).
fn step(c: &Compiled, stack: &mut Vec<Frame>, b: u8) -> bool {
    loop {
        let Some(top) = stack.last_mut() else {
            return false;
        };
        match *top {
            Frame::Value(node) => {
                let start = match &c.nodes[node] {
                    Node::Object { parts, close } => {
                        stack.pop();
                        stack.push(Frame::Lit {
                            lit: *close,
                            pos: 0,
                        });
                        for (lit, value) in parts.iter().rev() {
                            stack.push(Frame::Value(*value));
                            stack.push(Frame::Lit { lit: *lit, pos: 0 });
                        }
                        continue;
                    }
                    Node::Array { .. } => {
                        if b != b'[' {
                            return false;
                        }
                        Frame::Arr {
                            node,
                            count: 0,
                            phase: ArrPhase::Open,
                        }
                    }
                    Node::String { min, max } => {
                        if b != b'"' {
                            return false;
                        }
                        Frame::Str {
                            len: 0,
                            min: *min,
                            max: *max,
                            escape: false,
                        }
                    }
                    Node::Enum(_) => {
                        *top = Frame::Enum {
                            node,
                            option: 0,
                            pos: 0,
                        };
                        continue;
                    }
                    Node::Integer { .. } => {
                        *top = Frame::Int {
                            node,
                            value: 0,
                            digits: 0,
                            decimals: None,
                        };
                        continue;
                    }
                };
                *top = start;
                return true;
            }
            Frame::Lit { lit, pos } => {
                let text = &c.lits[lit];
                if text.get(pos) != Some(&b) {
                    return false;
                }
                if pos + 1 == text.len() {
                    stack.pop();
                } else {
                    *top = Frame::Lit { lit, pos: pos + 1 };
                }
                return true;
            }
            Frame::Str {
                len,
                min,
                max,
                escape,
            } => {
                if escape {
                    if !matches!(b, b'"' | b'\\' | b'/' | b'n' | b't') {
                        return false;
                    }
                    *top = Frame::Str {
                        len: len + 1,
                        min,
                        max,
                        escape: false,
                    };
                    return true;
                }
                if b == b'"' {
                    if len < min {
                        return false;
                    }
                    stack.pop();
                    return true;
                }
                if len >= max || !(0x20..0x7f).contains(&b) || STRUCTURAL.contains(&b) {
                    return false;
                }
                *top = Frame::Str {
                    len: if b == b'\\' { len } else { len + 1 },
                    min,
                    max,
                    escape: b == b'\\',
                };
                return true;
            }
            Frame::Arr { node, count, phase } => {
                let Node::Array { items, min, max } = c.nodes[node] else {
                    return false;
                };
                match phase {
                    ArrPhase::Open if b == b']' => {
                        if min > 0 {
                            return false;
                        }
                        stack.pop();
                        return true;
                    }
                    ArrPhase::Open | ArrPhase::NeedItem => {
                        if count >= max {
                            return false;
                        }
                        *top = Frame::Arr {
                            node,
                            count: count + 1,
                            phase: ArrPhase::AfterItem,
                        };
                        stack.push(Frame::Value(items));
                        continue;
                    }
                    ArrPhase::AfterItem => {
                        if b == b',' && count < max {
                            *top = Frame::Arr {
                                node,
                                count,
                                phase: ArrPhase::NeedItem,
                            };
                            return true;
                        }
                        if b == b']' && count >= min {
                            stack.pop();
                            return true;
                        }
                        return false;
                    }
                }
            }
            Frame::Enum { node, option, pos } => {
                let Node::Enum(options) = &c.nodes[node] else {
                    return false;
                };
                let prefix = &options[option][..pos];
                let Some(next) = options
                    .iter()
                    .position(|o| o.len() > pos && &o[..pos] == prefix && o[pos] == b)
                else {
                    return false;
                };
                if options[next].len() == pos + 1 {
                    stack.pop();
                } else {
                    *top = Frame::Enum {
                        node,
                        option: next,
                        pos: pos + 1,
                    };
                }
                return true;
            }
            Frame::Int {
                node,
                value,
                digits,
                decimals,
            } => {
                let Node::Integer {
                    min,
                    max,
                    decimals: allow_decimals,
                } = c.nodes[node]
                else {
                    return false;
                };
                match (decimals, b) {
                    (None, b'0'..=b'9') => {
                        let v = value.saturating_mul(10).saturating_add(u64::from(b - b'0'));
                        if digits >= 12 || !int_viable(v, digits + 1, min, max) {
                            return false;
                        }
                        *top = Frame::Int {
                            node,
                            value: v,
                            digits: digits + 1,
                            decimals: None,
                        };
                        return true;
                    }
                    (None, b'.') => {
                        // A fraction only where the integer part is in range and below max.
                        if !allow_decimals || digits == 0 || value < min || value >= max {
                            return false;
                        }
                        *top = Frame::Int {
                            node,
                            value,
                            digits,
                            decimals: Some(0),
                        };
                        return true;
                    }
                    (Some(n), b'0'..=b'9') if n < MAX_DECIMALS => {
                        *top = Frame::Int {
                            node,
                            value,
                            digits,
                            decimals: Some(n + 1),
                        };
                        return true;
                    }
                    _ => {
                        // The number ends here; the byte belongs to what follows.
                        let f = *top;
                        if !int_complete(c, &f) {
                            return false;
                        }
                        stack.pop();
                        continue;
                    }
                }
            }
        }
    }
}

/// The byte that leads fastest to the end of `frame` (for [`JsonMatcher::completion`]).
fn shortest_next(c: &Compiled, frame: &Frame) -> Option<u8> {
    Some(match *frame {
        Frame::Value(node) => match &c.nodes[node] {
            Node::Object { parts, close } => {
                let lit = parts.first().map_or(*close, |(l, _)| *l);
                c.lits[lit][0]
            }
            Node::Array { .. } => b'[',
            Node::String { .. } => b'"',
            Node::Enum(options) => options.iter().min_by_key(|o| o.len())?[0],
            Node::Integer { min, .. } => min.to_string().as_bytes()[0],
        },
        Frame::Lit { lit, pos } => *c.lits[lit].get(pos)?,
        Frame::Str {
            len, min, escape, ..
        } => {
            if escape {
                b'n'
            } else if len >= min {
                b'"'
            } else {
                b'-'
            }
        }
        Frame::Arr { node, count, phase } => {
            let Node::Array { items, min, .. } = c.nodes[node] else {
                return None;
            };
            match phase {
                ArrPhase::Open if min == 0 => b']',
                ArrPhase::AfterItem if count >= min => b']',
                ArrPhase::AfterItem => b',',
                _ => shortest_next(c, &Frame::Value(items))?,
            }
        }
        Frame::Enum { node, option, pos } => {
            let Node::Enum(options) = &c.nodes[node] else {
                return None;
            };
            *options[option].get(pos)?
        }
        Frame::Int {
            node,
            value,
            digits,
            decimals,
        } => {
            let Node::Integer { min, .. } = c.nodes[node] else {
                return None;
            };
            if decimals == Some(0) {
                b'0'
            } else if digits == 0 {
                min.to_string().as_bytes()[0]
            } else {
                // value < min: the next digit of min at this position, or 0.
                let target = min.to_string();
                let have = value.to_string();
                if target.len() > have.len() && target.starts_with(&have) {
                    target.as_bytes()[have.len()]
                } else {
                    b'0'
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> JsonSchema {
        JsonSchema::compile(
            &json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                    "score": {"type": "integer", "minimum": 1, "maximum": 10},
                    "ok": {"type": "boolean"},
                    "kind": {"enum": ["a", "ab"]},
                    "ratio": {"type": "number", "maximum": 100}
                },
                "required": ["title", "tags", "score", "ok", "kind", "ratio"],
                "additionalProperties": false
            }),
            Limits::default(),
        )
        .unwrap()
    }

    fn accepts_all(s: &JsonSchema, text: &str) -> bool {
        let mut m = s.matcher();
        m.advance(text.as_bytes()) && m.is_complete()
    }

    #[test]
    fn admits_the_compact_form_of_the_schema() {
        let s = schema();
        for ok in [
            r#"{"title":"x","tags":[],"score":1,"ok":true,"kind":"a","ratio":0}"#,
            r#"{"title":"a \"b\"\n","tags":["p","q"],"score":10,"ok":false,"kind":"ab","ratio":99.125}"#,
        ] {
            assert!(accepts_all(&s, ok), "{ok}");
            assert!(serde_json::from_str::<Value>(ok).is_ok());
        }
        for bad in [
            r#" {"title":"x"#,                      // leading space
            r#"{"tags":[],"title":"x""#,            // wrong order
            r#"{"title":"","#,                      // empty string
            r#"{"title":"x","tags":["a","b","c"]"#, // too many items
            r#"{"title":"x","tags":[],"score":0"#,  // below minimum
            r#"{"title":"x","tags":[],"score":11"#, // above maximum
            r#"{"title":"x","tags":[],"score":05"#, // leading zero
            r#"{"title":"x","tags":[],"score":1,"ok":yes"#,
            r#"{"title":"x","tags":[],"score":1,"ok":true,"kind":"b""#,
            r#"{"title":"x","tags":[],"score":1,"ok":true,"kind":"a","ratio":100.5"#,
            "{\"title\":\"tab\tinside\"", // raw control character
            r#"{"title":"\x""#,           // unknown escape
        ] {
            let mut m = s.matcher();
            assert!(!m.advance(bad.as_bytes()), "{bad}");
        }
        // Something may still follow a complete-looking prefix.
        let mut m = s.matcher();
        assert!(m.advance(br#"{"title":"x""#));
        assert!(!m.is_complete());
    }

    #[test]
    fn every_prefix_completes_to_valid_json_of_the_schema() {
        let s = schema();
        let full = r#"{"title":"a \"b\"\n","tags":["p","q"],"score":10,"ok":false,"kind":"ab","ratio":99.125}"#;
        for cut in 0..=full.len() {
            let mut m = s.matcher();
            assert!(m.advance(&full.as_bytes()[..cut]));
            let mut text = full.as_bytes()[..cut].to_vec();
            text.extend(m.completion());
            let text = String::from_utf8(text).unwrap();
            assert!(accepts_all(&s, &text), "cut {cut}: {text}");
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(
                v["score"].as_u64().is_some_and(|n| (1..=10).contains(&n)),
                "{text}"
            );
        }
        let mut m = s.matcher();
        assert!(m.advance(br#"{"title":"x","tags":[],"score":1,"ok":true,"kind":"a","ratio":1"#));
        // Inside the object a number may still grow; only "}" ends it.
        assert!(!m.is_complete());
        assert_eq!(m.completion(), b"}");
        // At the top level a number is complete as soon as it has a digit.
        let n = JsonSchema::compile(
            &json!({"type": "integer", "maximum": 50}),
            Limits::default(),
        )
        .unwrap();
        let mut m = n.matcher();
        assert!(m.advance(b"5"));
        assert!(m.is_complete() && !m.is_finished());
        assert!(m.clone().advance(b"0"));
        assert!(!m.clone().advance(b"1"), "51 is above the maximum");
    }

    #[test]
    fn strings_and_arrays_are_bounded() {
        let s = JsonSchema::compile(
            &json!({"type":"array","items":{"type":"string","maxLength":3}}),
            Limits {
                min_string_chars: 1,
                max_string_chars: 100,
                max_array_items: 2,
            },
        )
        .unwrap();
        assert!(!s.matcher().advance(br#"["abcd"#));
        let mut m = s.matcher();
        assert!(m.advance(br#"["abc""#));
        assert!(!m.clone().advance(b"d"));
        assert!(m.advance(br#","x"]"#));
        assert!(m.is_finished());
        assert!(s.max_bytes() >= r#"["\n\n\n","\n\n\n"]"#.len());
        let mut scratch = MatchScratch::default();
        let m = s.matcher();
        assert!(m.accepts(b"[\"", &mut scratch));
        assert!(!m.accepts(b"{", &mut scratch));
    }

    #[test]
    fn strings_hold_no_brackets() {
        let s = JsonSchema::compile(
            &json!({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},
                "required":["a","b"]}),
            Limits::default(),
        )
        .unwrap();
        let mut m = s.matcher();
        assert!(m.advance(br#"{"a":"x, y (z) 'q'"#));
        for b in [b"]", b"[", b"{", b"}"] {
            assert!(!m.clone().advance(b), "{:?}", b);
        }
        assert!(m.advance(br#"","b":3}"#));
        assert!(m.is_finished());
    }

    #[test]
    fn unsupported_schemas_name_the_place() {
        let e = JsonSchema::compile(
            &json!({"type":"object","properties":{"a":{"type":["string","null"]}}}),
            Limits::default(),
        )
        .unwrap_err();
        assert_eq!(e.path, "/properties/a");
        let e = JsonSchema::compile(&json!({"type":"integer","minimum":-5}), Limits::default())
            .unwrap_err();
        assert!(e.reason.contains("negative"), "{e}");
        assert!(JsonSchema::compile(&json!({"type":"tuple"}), Limits::default()).is_err());
    }
}
