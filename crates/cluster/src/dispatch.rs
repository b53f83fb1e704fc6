//! Dispatch tokens: proof that the coordinator sent a task.
//!
//! Each debate has a random secret, stored once in Redis (`parley:{<id>}:secret`, written
//! at submission, see [`crate::RedisStore::ensure_dispatch_secret`]); Redis is reachable
//! only by the services. The coordinator stamps every task it publishes with
//! `token = HMAC-SHA256(secret, "<debate id>\n<task id>\n<attempt>")` (hex); a worker
//! recomputes it from Redis and runs no task whose token does not match. So a Task
//! published on `parley.tasks.*` by anyone else — or replayed with another attempt
//! number — never runs, never writes a result, and can neither pre-empt nor overwrite a
//! real one.
//!
//! Task messages are claim-check references ([`TaskRef`]): the message carries the token,
//! the worker checks it on the reference ([`verify_ref`]) before reading the body the
//! reference names from Redis.
//!
//! A result a worker keeps in the JetStream result stash (when Redis is unreachable) carries
//! a seal ([`seal`]): `HMAC-SHA256(secret, "parley-stash\n" + the result's exact JSON)`.
//! The JSON names the debate, task and attempt, so a stashed answer is bound to them as a
//! dispatch is; the worker that takes it from the stash checks the seal ([`verify_seal`])
//! before reading it. Anyone who can write the bucket but cannot read Redis cannot make one.
//!
//! The token binds the task id and attempt, not the whole body: what a task may contain is
//! guarded by the NATS roles (only the coordinator may publish tasks), and a body-level
//! signature would break between builds that serialise a task differently.

use sha2::{Digest, Sha256};

use parley_protocol::{Task, TaskRef};

/// A new random debate secret (256 bits, hex).
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    hex(&bytes)
}

/// The token of one dispatch of a task.
pub fn token(secret: &str, debate_id: &str, task_id: &str, attempt: u32) -> String {
    let msg = format!("{debate_id}\n{task_id}\n{attempt}");
    hex(&hmac_sha256(secret.as_bytes(), msg.as_bytes()))
}

/// Whether `task` carries the token its coordinator would have given it.
pub fn verify(secret: &str, task: &Task) -> bool {
    verify_token(
        secret,
        &task.debate_id,
        &task.id,
        task.attempt,
        task.dispatch_token.as_deref(),
    )
}

/// Whether a task message (a claim-check reference) carries the token of the dispatch it
/// names. The token covers exactly what a reference names (debate, task, attempt), so a
/// verified reference can only lead to the body the coordinator stored for that dispatch.
pub fn verify_ref(secret: &str, task: &TaskRef) -> bool {
    verify_token(
        secret,
        &task.debate_id,
        &task.id,
        task.attempt,
        task.dispatch_token.as_deref(),
    )
}

fn verify_token(
    secret: &str,
    debate_id: &str,
    task_id: &str,
    attempt: u32,
    got: Option<&str>,
) -> bool {
    let Some(got) = got else {
        return false;
    };
    constant_time_eq(got, &token(secret, debate_id, task_id, attempt))
}

/// The seal of a stashed result: its exact JSON bytes under the debate's secret, behind a
/// prefix that no dispatch token's message starts with (those start with a debate id,
/// which never contains a newline), so a token can never serve as a seal or the reverse.
pub fn seal(secret: &str, result_json: &[u8]) -> String {
    hex(&hmac_sha256(secret.as_bytes(), &stash_message(result_json)))
}

/// Whether `seal` is the seal of `result_json` under `secret` (constant time).
pub fn verify_seal(secret: &str, result_json: &[u8], seal: &str) -> bool {
    constant_time_eq(seal, &self::seal(secret, result_json))
}

fn stash_message(result_json: &[u8]) -> Vec<u8> {
    const PREFIX: &[u8] = b"parley-stash\n";
    let mut msg = Vec::with_capacity(PREFIX.len() + result_json.len());
    msg.extend_from_slice(PREFIX);
    msg.extend_from_slice(result_json);
    msg
}

/// Equal strings, compared without an early exit on the first differing byte.
fn constant_time_eq(got: &str, want: &str) -> bool {
    got.len() == want.len()
        && got
            .bytes()
            .zip(want.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// HMAC-SHA256 (RFC 2104).
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut ipad = [0x36u8; BLOCK];
    let mut opad = [0x5cu8; BLOCK];
    for i in 0..BLOCK {
        ipad[i] ^= k[i];
        opad[i] ^= k[i];
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2.
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn tokens_bind_debate_task_and_attempt() {
        let s = new_secret();
        assert_eq!(s.len(), 64);
        let t = token(&s, "d", "d/1/propose/a", 1);
        assert_eq!(t, token(&s, "d", "d/1/propose/a", 1));
        assert_ne!(t, token(&s, "d", "d/1/propose/a", 2));
        assert_ne!(t, token(&s, "d", "d/1/propose/b", 1));
        assert_ne!(t, token(&new_secret(), "d", "d/1/propose/a", 1));
    }

    #[test]
    fn seals_bind_the_exact_result_and_the_secret() {
        let s = new_secret();
        let body = br#"{"taskId":"d/1/propose/a","attempt":1}"#;
        let sealed = seal(&s, body);
        assert!(verify_seal(&s, body, &sealed));
        assert!(!verify_seal(
            &s,
            br#"{"taskId":"d/1/propose/a","attempt":2}"#,
            &sealed
        ));
        assert!(!verify_seal(&new_secret(), body, &sealed));
        assert!(!verify_seal(&s, body, ""));
        assert!(!verify_seal(&s, body, &sealed[..63]));
        // A seal is never a dispatch token of the same secret.
        assert_ne!(sealed, token(&s, "d", "d/1/propose/a", 1));
    }
}
