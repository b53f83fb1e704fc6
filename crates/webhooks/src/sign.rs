//! Standard Webhooks signatures.
//!
//! A message is signed over `"{webhook-id}.{webhook-timestamp}.{body}"` with HMAC-SHA256
//! under the endpoint's secret; the `webhook-signature` header is `v1,<base64 signature>`
//! (several space-separated when a secret is being rotated; Parley sends one). A secret
//! is written `whsec_<base64 of 24-64 random bytes>`; the bytes after decoding are the
//! HMAC key.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ring::hmac;

/// The prefix of a written secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// Key bytes of a secret, at least and at most.
pub const SECRET_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// Why a written secret is not one; names the problem, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("must start with {SECRET_PREFIX}")]
    NoPrefix,
    #[error("is not {SECRET_PREFIX} followed by base64")]
    NotBase64,
    /// The decoded key is shorter or longer than [`SECRET_BYTES`].
    #[error("holds {bytes} bytes, a secret holds {}-{}", SECRET_BYTES.start(), SECRET_BYTES.end())]
    Length { bytes: usize },
}

/// An endpoint's signing key. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct Secret(hmac::Key);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

impl Secret {
    /// Reads `whsec_<base64>`; the error names the problem, never the secret.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let Some(b64) = text.strip_prefix(SECRET_PREFIX) else {
            return Err(SecretError::NoPrefix);
        };
        let bytes = STANDARD.decode(b64).map_err(|_| SecretError::NotBase64)?;
        if !SECRET_BYTES.contains(&bytes.len()) {
            return Err(SecretError::Length { bytes: bytes.len() });
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, &bytes)))
    }

    /// A new random secret, written `whsec_...` (`parley serve --new-webhook-secret`).
    pub fn generate() -> String {
        let bytes: [u8; 32] = rand::random();
        format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
    }

    /// The `webhook-signature` header value of a message.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let tag = hmac::sign(&self.0, &signed_content(id, timestamp, body));
        format!("v1,{}", STANDARD.encode(tag.as_ref()))
    }

    /// Whether `header` (a `webhook-signature` value, possibly several space-separated
    /// signatures) holds a valid `v1` signature of the message. Constant time per
    /// signature. The caller checks that `timestamp` is recent (replay protection).
    pub fn verify(&self, id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
        let content = signed_content(id, timestamp, body);
        header.split(' ').any(|sig| {
            let Some(b64) = sig.strip_prefix("v1,") else {
                return false;
            };
            let Ok(tag) = STANDARD.decode(b64) else {
                return false;
            };
            hmac::verify(&self.0, &content, &tag).is_ok()
        })
    }
}

fn signed_content(id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let mut content = Vec::with_capacity(id.len() + body.len() + 24);
    content.extend_from_slice(id.as_bytes());
    content.push(b'.');
    content.extend_from_slice(timestamp.to_string().as_bytes());
    content.push(b'.');
    content.extend_from_slice(body);
    content
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification.
    #[test]
    fn the_specification_example_signs_and_verifies() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        let sig = secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(secret.verify("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, &sig));
        assert!(secret.verify(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            body,
            &format!("v1,bm9wZQ== {sig}")
        ));
        assert!(!secret.verify("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265331, body, &sig));
        assert!(!secret.verify("msg_other", 1614265330, body, &sig));
        assert!(!secret.verify("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b"{}", &sig));
        assert!(!secret.verify("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, "v2,x"));
    }

    #[test]
    fn bad_secrets_are_named_without_being_shown() {
        for (bad, why) in [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", SecretError::NoPrefix),
            ("whsec_!!", SecretError::NotBase64),
            ("whsec_c2hvcnQ=", SecretError::Length { bytes: 5 }),
        ] {
            let e = Secret::parse(bad).unwrap_err();
            assert_eq!(e, why);
            assert!(!e.to_string().contains(bad), "{e}");
        }
        let made = Secret::generate();
        assert!(Secret::parse(&made).is_ok());
        assert_eq!(
            format!("{:?}", Secret::parse(&made).unwrap()),
            "Secret(redacted)"
        );
    }
}
