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
    pub fn to_string(&self) -> Result<&String, String> {
        match self {
            Value::String(s) => Ok(s),
            other => Err(format!("expected a string, found {}", other.kind())),
        }
    }

    /// An integer value that fits `u32`.
    pub fn to_u32(&self) -> Result<u32, String> {
        match self {
            Value::Int(n) => u32::try_from(*n).map_err(|_| format!("{n} does not fit u32")),
            other => Err(format!("expected an integer, found {}", other.kind())),
        }
    }

    /// An integer value that fits `i32`.
    pub fn to_i32(&self) -> Result<i32, String> {
        match self {
            Value::Int(n) => i32::try_from(*n).map_err(|_| format!("{n} does not fit i32")),
            other => Err(format!("expected an integer, found {}", other.kind())),
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
    pub fn read(r: &mut impl Read) -> Result<Self, String> {
        let mut magic = [0u8; 4];
        r.read_exact(&mut magic).map_err(io)?;
        if &magic != b"GGUF" {
            return Err("not a GGUF file (bad magic)".into());
        }
        let version = u32_le(r)?;
        if !(2..=3).contains(&version) {
            return Err(format!("GGUF version {version} is not supported (2 or 3)"));
        }
        let _tensors = u64_le(r)?;
        let entries = u64_le(r)?;
        Self::read_entries(r, entries)
    }

    /// Reads `entries` metadata entries (the part after the fixed header).
    pub(crate) fn read_entries(r: &mut impl Read, entries: u64) -> Result<Self, String> {
        if entries > MAX_ENTRIES {
            return Err(format!(
                "{entries} metadata entries (at most {MAX_ENTRIES})"
            ));
        }
        let mut metadata = HashMap::with_capacity(entries as usize);
        for _ in 0..entries {
            let key = string(r)?;
            let ty = u32_le(r)?;
            let value = value(r, ty, 0).map_err(|e| format!("metadata {key}: {e}"))?;
            metadata.insert(key, value);
        }
        Ok(Self { metadata })
    }
}

fn io(e: std::io::Error) -> String {
    format!("truncated or unreadable GGUF header: {e}")
}

fn bytes<const N: usize>(r: &mut impl Read) -> Result<[u8; N], String> {
    let mut b = [0u8; N];
    r.read_exact(&mut b).map_err(io)?;
    Ok(b)
}

fn u32_le(r: &mut impl Read) -> Result<u32, String> {
    Ok(u32::from_le_bytes(bytes(r)?))
}

fn u64_le(r: &mut impl Read) -> Result<u64, String> {
    Ok(u64::from_le_bytes(bytes(r)?))
}

/// A GGUF string (`u64` length, UTF-8 bytes).
pub(crate) fn read_string(r: &mut impl Read) -> Result<String, String> {
    string(r)
}

fn string(r: &mut impl Read) -> Result<String, String> {
    let len = u64_le(r)?;
    if len > MAX_STRING {
        return Err(format!("a string of {len} bytes (at most {MAX_STRING})"));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf).map_err(io)?;
    String::from_utf8(buf).map_err(|_| "a string is not UTF-8".to_string())
}

fn value(r: &mut impl Read, ty: u32, depth: u32) -> Result<Value, String> {
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
                return Err("arrays nested too deep".into());
            }
            let elem = u32_le(r)?;
            let n = u64_le(r)?;
            if n > MAX_ARRAY {
                return Err(format!("an array of {n} elements (at most {MAX_ARRAY})"));
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
        other => return Err(format!("unknown value type {other}")),
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
        assert_eq!(c.metadata["n"].to_u32(), Ok(8192));
        assert_eq!(c.metadata["name"].to_string().unwrap(), "smol");
        assert_eq!(
            c.metadata["toks"],
            Value::Array(vec![Value::String("a".into()), Value::String("b".into())])
        );
        assert!(c.metadata["name"].to_u32().is_err());
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
        assert!(Content::read(&mut f.as_slice())
            .unwrap_err()
            .contains("string"));
        let mut truncated = b"GGUF".to_vec();
        truncated.extend(3u32.to_le_bytes());
        assert!(Content::read(&mut truncated.as_slice()).is_err());
    }
}
