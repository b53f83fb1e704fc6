//! Reading a GGUF file's metadata (the key/value header: tokenizer, chat template,
//! hyper-parameters). Tensor data is left to llama.cpp.
//!
//! Format (GGUF v2 and v3, little-endian): magic `GGUF`, version `u32`, tensor count
//! `u64`, metadata count `u64`, then per entry a string key, a `u32` value type and the
//! value; strings are a `u64` length and UTF-8 bytes; arrays an element type, a `u64`
//! count and the elements. Sizes are checked against fixed caps before allocating.

use std::collections::HashMap;
use std::io::Read;

/// Longest string read (the chat template and token texts are far below).
const MAX_STRING: u64 = 16 * 1024 * 1024;
/// Most elements in one array (the vocabulary and merges are ~50 k).
const MAX_ARRAY: u64 = 4 * 1024 * 1024;
/// Most metadata entries.
const MAX_ENTRIES: u64 = 65_536;

/// What is wrong with a GGUF header or one of its values.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("truncated or unreadable GGUF header: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a GGUF file (bad magic)")]
    BadMagic,
    #[error("GGUF version {0} is not supported (2 or 3)")]
    Version(u32),
    #[error("{0} metadata entries (at most {max})", max = MAX_ENTRIES)]
    TooManyEntries(u64),
    /// The value of metadata `key` cannot be read.
    #[error("metadata {key}: {problem}")]
    Entry {
        key: String,
        problem: Box<GgufError>,
    },
    #[error("a string of {0} bytes (at most {max})", max = MAX_STRING)]
    StringTooLong(u64),
    #[error("a string is not UTF-8")]
    NotUtf8,
    #[error("arrays nested too deep")]
    NestedTooDeep,
    #[error("an array of {0} elements (at most {max})", max = MAX_ARRAY)]
    ArrayTooLong(u64),
    #[error("unknown value type {0}")]
    UnknownType(u32),
    /// A value of another type than the key needs (`expected`: "a string", "an integer").
    #[error("expected {expected}, found {found}")]
    WrongType {
        expected: &'static str,
        found: &'static str,
    },
    /// An integer outside the range of the type it is read as (`ty`: "u32", "i32").
    #[error("{value} does not fit {ty}")]
    OutOfRange { value: i64, ty: &'static str },
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    /// A `u64` above `i64::MAX`.
    BigUint(u64),
    Float(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    /// The string, or an error naming what the value is.
    pub fn to_string(&self) -> Result<&String, GgufError> {
        match self {
            Value::String(s) => Ok(s),
            other => Err(other.wrong_type("a string")),
        }
    }

    /// An integer value that fits `u32`.
    pub fn to_u32(&self) -> Result<u32, GgufError> {
        match self {
            Value::Int(n) => u32::try_from(*n).map_err(|_| GgufError::OutOfRange {
                value: *n,
                ty: "u32",
            }),
            other => Err(other.wrong_type("an integer")),
        }
    }

    /// An integer value that fits `i32`.
    pub fn to_i32(&self) -> Result<i32, GgufError> {
        match self {
            Value::Int(n) => i32::try_from(*n).map_err(|_| GgufError::OutOfRange {
                value: *n,
                ty: "i32",
            }),
            other => Err(other.wrong_type("an integer")),
        }
    }

    fn wrong_type(&self, expected: &'static str) -> GgufError {
        GgufError::WrongType {
            expected,
            found: self.kind(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Value::Int(_) | Value::BigUint(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Bool(_) => "a bool",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
        }
    }
}

/// A GGUF file's metadata.
#[derive(Debug, Clone, Default)]
pub struct Content {
    pub metadata: HashMap<String, Value>,
}

impl Content {
    /// Reads the header and metadata from the start of a GGUF file.
    pub fn read(r: &mut impl Read) -> Result<Self, GgufError> {
        let mut magic = [0u8; 4];
        r.read_exact(&mut magic)?;
        if &magic != b"GGUF" {
            return Err(GgufError::BadMagic);
        }
        let version = u32_le(r)?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version(version));
        }
        let _tensors = u64_le(r)?;
        let entries = u64_le(r)?;
        Self::read_entries(r, entries)
    }

    /// Reads `entries` metadata entries (the part after the fixed header).
    pub(crate) fn read_entries(r: &mut impl Read, entries: u64) -> Result<Self, GgufError> {
        if entries > MAX_ENTRIES {
            return Err(GgufError::TooManyEntries(entries));
        }
        let mut metadata = HashMap::with_capacity(entries as usize);
        for _ in 0..entries {
            let key = string(r)?;
            let ty = u32_le(r)?;
            let value = value(r, ty, 0).map_err(|e| GgufError::Entry {
                key: key.clone(),
                problem: Box::new(e),
            })?;
            metadata.insert(key, value);
        }
        Ok(Self { metadata })
    }
}

fn bytes<const N: usize>(r: &mut impl Read) -> Result<[u8; N], GgufError> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn u32_le(r: &mut impl Read) -> Result<u32, GgufError> {
    Ok(u32::from_le_bytes(bytes(r)?))
}

fn u64_le(r: &mut impl Read) -> Result<u64, GgufError> {
    Ok(u64::from_le_bytes(bytes(r)?))
}

/// A GGUF string (`u64` length, UTF-8 bytes).
pub(crate) fn read_string(r: &mut impl Read) -> Result<String, GgufError> {
    string(r)
}

fn string(r: &mut impl Read) -> Result<String, GgufError> {
    let len = u64_le(r)?;
    if len > MAX_STRING {
        return Err(GgufError::StringTooLong(len));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf)?;
    String::from_utf8(buf).map_err(|_| GgufError::NotUtf8)
}

fn value(r: &mut impl Read, ty: u32, depth: u32) -> Result<Value, GgufError> {
    Ok(match ty {
        0 => Value::Int(i64::from(u8::from_le_bytes(bytes(r)?))),
        1 => Value::Int(i64::from(i8::from_le_bytes(bytes(r)?))),
        2 => Value::Int(i64::from(u16::from_le_bytes(bytes(r)?))),
        3 => Value::Int(i64::from(i16::from_le_bytes(bytes(r)?))),
        4 => Value::Int(i64::from(u32::from_le_bytes(bytes(r)?))),
        5 => Value::Int(i64::from(i32::from_le_bytes(bytes(r)?))),
        6 => Value::Float(f64::from(f32::from_le_bytes(bytes(r)?))),
        7 => Value::Bool(u8::from_le_bytes(bytes(r)?) != 0),
        8 => Value::String(string(r)?),
        9 => {
            if depth > 2 {
                return Err(GgufError::NestedTooDeep);
            }
            let elem = u32_le(r)?;
            let n = u64_le(r)?;
            if n > MAX_ARRAY {
                return Err(GgufError::ArrayTooLong(n));
            }
            let mut items = Vec::with_capacity(n as usize);
            for _ in 0..n {
                items.push(value(r, elem, depth + 1)?);
            }
            Value::Array(items)
        }
        10 => {
            let n = u64::from_le_bytes(bytes(r)?);
            i64::try_from(n).map_or(Value::BigUint(n), Value::Int)
        }
        11 => Value::Int(i64::from_le_bytes(bytes(r)?)),
        12 => Value::Float(f64::from_le_bytes(bytes(r)?)),
        other => return Err(GgufError::UnknownType(other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push_str(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }

    #[test]
    fn reads_scalars_strings_and_arrays() {
        let mut f = b"GGUF".to_vec();
        f.extend(3u32.to_le_bytes());
        f.extend(0u64.to_le_bytes());
        f.extend(3u64.to_le_bytes());
        push_str(&mut f, "n");
        f.extend(4u32.to_le_bytes());
        f.extend(8192u32.to_le_bytes());
        push_str(&mut f, "name");
        f.extend(8u32.to_le_bytes());
        push_str(&mut f, "smol");
        push_str(&mut f, "toks");
        f.extend(9u32.to_le_bytes());
        f.extend(8u32.to_le_bytes());
        f.extend(2u64.to_le_bytes());
        push_str(&mut f, "a");
        push_str(&mut f, "b");
        let c = Content::read(&mut f.as_slice()).unwrap();
        assert_eq!(c.metadata["n"].to_u32().unwrap(), 8192);
        assert_eq!(c.metadata["name"].to_string().unwrap(), "smol");
        assert_eq!(
            c.metadata["toks"],
            Value::Array(vec![Value::String("a".into()), Value::String("b".into())])
        );
        assert!(matches!(
            c.metadata["name"].to_u32(),
            Err(GgufError::WrongType {
                expected: "an integer",
                found: "a string"
            })
        ));
    }

    #[test]
    fn bad_files_are_errors_not_panics() {
        assert!(Content::read(&mut b"GGML".as_slice()).is_err());
        let mut f = b"GGUF".to_vec();
        f.extend(3u32.to_le_bytes());
        f.extend(0u64.to_le_bytes());
        f.extend(1u64.to_le_bytes());
        // A key claiming an absurd length.
        f.extend(u64::MAX.to_le_bytes());
        let e = Content::read(&mut f.as_slice()).unwrap_err();
        assert!(matches!(e, GgufError::StringTooLong(u64::MAX)), "{e}");
        assert!(e.to_string().contains("string"));
        let mut truncated = b"GGUF".to_vec();
        truncated.extend(3u32.to_le_bytes());
        assert!(Content::read(&mut truncated.as_slice()).is_err());
    }
}
