//! The bearer token: required to listen on anything but loopback; on loopback generated at
//! start-up when the operator gives none (unless `--no-auth`).

use sha2::{Digest, Sha256};

/// Bytes in a token, at least (shorter ones are refused at start-up).
pub const MIN_TOKEN_BYTES: usize = 16;

/// A new random token: 32 bytes from the operating system's generator, hex-encoded.
pub fn generate() -> String {
    use rand::RngCore as _;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A bearer token, kept as its SHA-256 so a comparison takes the same time whatever the
/// guess (and the token itself is not kept around).
pub struct Token {
    digest: [u8; 32],
}

/// Why an operator's token is refused (the message never holds the token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(
        "the auth token is {0} bytes; use at least {min} (e.g. `openssl rand -hex 24`)",
        min = MIN_TOKEN_BYTES
    )]
    TooShort(usize),
    #[error("the auth token must be printable ASCII without spaces")]
    NotPrintable,
}

impl Token {
    /// A token from the operator; too short or with characters a header cannot carry is an
    /// error naming the problem (never the token).
    pub fn new(token: &str) -> Result<Self, TokenError> {
        if token.len() < MIN_TOKEN_BYTES {
            return Err(TokenError::TooShort(token.len()));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::NotPrintable);
        }
        Ok(Self {
            digest: Sha256::digest(token.as_bytes()).into(),
        })
    }

    /// Whether `given` is the token, in constant time.
    pub fn matches(&self, given: &str) -> bool {
        let d: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        d.iter()
            .zip(self.digest.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_themselves_and_never_print() {
        let t = Token::new("0123456789abcdef-secret").unwrap();
        assert!(t.matches("0123456789abcdef-secret"));
        assert!(!t.matches("0123456789abcdef-secreT"));
        assert!(!t.matches(""));
        assert!(!format!("{t:?}").contains("secret"));
        let e = Token::new("short").unwrap_err();
        assert_eq!(e, TokenError::TooShort(5));
        let e = e.to_string();
        assert!(e.contains("at least") && !e.contains("short"), "{e}");
        assert_eq!(
            Token::new("has a space in it ok").unwrap_err(),
            TokenError::NotPrintable
        );
    }

    #[test]
    fn generated_tokens_are_long_valid_and_different() {
        let (a, b) = (generate(), generate());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(Token::new(&a).unwrap().matches(&a));
    }
}
