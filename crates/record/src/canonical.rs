//! Canonical JSON and digests: the bytes a digest or a signature is taken over.
//!
//! Canonical JSON here is the JSON text of a value with every object's keys sorted by their
//! UTF-8 bytes, no whitespace between tokens, strings escaped as `serde_json` escapes them
//! (`\"`, `\\`, `\n`, `\t`, `\r`, `\b`, `\f`, other control characters as `\u00XX`, everything
//! else as UTF-8), integers in decimal and other numbers in their shortest round-trip form.
//! The same value always gives the same bytes, whatever order its fields were written in.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The canonical JSON bytes of `value`.
pub fn to_bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write(value, &mut out);
    out
}

/// The canonical JSON bytes of anything serializable (through [`serde_json::Value`]).
pub fn of<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    Ok(to_bytes(&serde_json::to_value(value)?))
}

fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => {
            out.extend_from_slice(value.to_string().as_bytes());
        }
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(v, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(k, out);
                out.push(b':');
                write(&map[k], out);
            }
            out.push(b'}');
        }
    }
}

fn write_str(s: &str, out: &mut Vec<u8>) {
    // A `str` always serializes; the fallback never runs.
    let quoted = serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""));
    out.extend_from_slice(quoted.as_bytes());
}

/// SHA-256 of `bytes`, as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

/// Whether `s` has the shape of a digest: 64 lowercase hex digits.
pub fn is_digest(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_and_whitespace_dropped_at_every_depth() {
        let a = json!({"b": 1, "a": {"z": [1, {"y": "x", "x": null}], "c": true}});
        let b: Value = serde_json::from_str(
            r#"{ "a" : { "c":true, "z":[ 1 , {"x":null,"y":"x"} ] }, "b":1 }"#,
        )
        .unwrap();
        let want = br#"{"a":{"c":true,"z":[1,{"x":null,"y":"x"}]},"b":1}"#;
        assert_eq!(to_bytes(&a), want);
        assert_eq!(to_bytes(&b), want);
    }

    #[test]
    fn strings_escape_quotes_and_control_characters() {
        let v = json!({"t": "a\"b\\c\nd\u{1}é"});
        assert_eq!(
            String::from_utf8(to_bytes(&v)).unwrap(),
            "{\"t\":\"a\\\"b\\\\c\\nd\\u0001é\"}"
        );
    }

    #[test]
    fn digest_is_sha256_hex() {
        // SHA-256 of the empty string.
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(is_digest(&sha256_hex(b"x")));
        assert!(!is_digest("E3B0"));
    }
}
