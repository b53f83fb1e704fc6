//! The result stash: where a worker keeps an answer it could not store in Redis.
//!
//! A worker that got an LLM answer but cannot write it to Redis (Redis down longer than
//! [`crate::STORE_PATIENCE`], or the drain deadline came first) puts the [`TaskResult`] in
//! the JetStream key-value bucket [`BUCKET`] before it hands the task back. Whichever
//! worker gets the task next finds it there, writes it to Redis (when Redis answers again)
//! and acks the task without calling the LLM: an answer that was paid for is never thrown
//! away because Redis was briefly unreachable. Only when NATS is unreachable too is the
//! answer lost (the worker logs it, and the task's call runs again after redelivery).
//!
//! Keys are the task id, made a valid KV key (see [`key`]); entries expire after
//! [`MAX_AGE`] and are deleted once the result is in Redis. The bucket is created by the
//! first worker that starts.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use parley_protocol::{Task, TaskOutcome, TaskResult};

/// The key-value bucket (stream `KV_PARLEY_RESULT_STASH`).
pub const BUCKET: &str = "PARLEY_RESULT_STASH";
/// How long a stashed result is kept if no worker picks it up.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// How long a lookup may take before the worker goes on without it.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// The stash bucket of one worker process.
#[derive(Clone)]
pub struct ResultStash {
    kv: kv::Store,
}

impl ResultStash {
    /// Opens the bucket, creating it when missing.
    pub async fn open(js: &jetstream::Context) -> Result<Self, async_nats::Error> {
        let mut last: Option<async_nats::Error> = None;
        // Two workers creating the bucket at once may race; the second try finds it.
        for i in 0..5u64 {
            // The bucket's stream as `create_key_value` makes it; created directly, because
            // that call first queries the account in a shape older servers do not answer.
            let created = js
                .get_or_create_stream(stream::Config {
                    name: format!("KV_{BUCKET}"),
                    description: Some(
                        "Parley task results a worker could not write to Redis".into(),
                    ),
                    subjects: vec![format!("$KV.{BUCKET}.>")],
                    max_messages_per_subject: 1,
                    max_age: MAX_AGE,
                    allow_rollup: true,
                    deny_delete: true,
                    allow_direct: true,
                    discard: stream::DiscardPolicy::New,
                    ..Default::default()
                })
                .await;
            match created {
                Ok(_) => match js.get_key_value(BUCKET).await {
                    Ok(kv) => return Ok(Self { kv }),
                    Err(e) => last = Some(e.into()),
                },
                Err(e) => last = Some(e.into()),
            }
            tokio::time::sleep(Duration::from_millis(200 * (i + 1))).await;
        }
        Err(last.unwrap_or_else(|| "cannot open the result stash".into()))
    }

    /// Keeps `result` until a worker writes it to Redis.
    pub async fn put(&self, result: &TaskResult) -> Result<(), async_nats::Error> {
        let body = serde_json::to_vec(result)?;
        self.kv.put(key(&result.task_id), body.into()).await?;
        Ok(())
    }

    /// The stashed result that answers this delivery of `task`, if any: a success of any
    /// attempt (the first success wins), or a failure of this very attempt. An entry that
    /// cannot be read is ignored (logged); a lookup error is `None` (logged), so a stash
    /// that is unreachable never stops a task from running.
    pub async fn lookup(&self, task: &Task) -> Option<TaskResult> {
        let raw = match tokio::time::timeout(LOOKUP_TIMEOUT, self.kv.get(key(&task.id))).await {
            Ok(Ok(raw)) => raw?,
            Ok(Err(e)) => {
                tracing::warn!(task = %task.id, error = %e, "cannot read the result stash");
                return None;
            }
            Err(_) => {
                tracing::warn!(task = %task.id, "the result stash did not answer");
                return None;
            }
        };
        let result: TaskResult = match serde_json::from_slice(&raw) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(task = %task.id, error = %e, "ignoring an unreadable stashed result");
                return None;
            }
        };
        let answers = result.task_id == task.id
            && result.debate_id == task.debate_id
            && match result.outcome {
                TaskOutcome::Ok(_) => true,
                TaskOutcome::Error(_) => result.attempt == task.attempt,
            };
        answers.then_some(result)
    }

    /// Forgets the entry of `task_id` (its result is in Redis now).
    pub async fn remove(&self, task_id: &str) {
        if let Err(e) = self.kv.purge(key(task_id)).await {
            // It expires after MAX_AGE; a later lookup finds the result in Redis first.
            tracing::debug!(task = %task_id, error = %e, "cannot remove a stashed result");
        }
    }
}

/// A task id as a KV key: ASCII letters, digits, `-`, `_` and `/` are kept; every other
/// byte (and `=`) becomes `=XX` (hex), so the mapping is one-to-one and the key valid.
pub fn key(task_id: &str) -> String {
    let mut out = String::with_capacity(task_id.len());
    for b in task_id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("={b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn keys_are_valid_and_one_to_one() {
        assert_eq!(
            key("deb-20250101-000000-abcdef/1/critique/agent-a/agent_b"),
            "deb-20250101-000000-abcdef/1/critique/agent-a/agent_b"
        );
        assert_eq!(
            key("deb-x/1/propose/agent é"),
            "deb-x/1/propose/agent=20=C3=A9"
        );
        assert_ne!(key("a=20"), key("a "));
        let k = key(".a.b=");
        assert!(!k.starts_with('.') && !k.ends_with('.'), "{k}");
        assert!(k
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_/=".contains(&b)));
    }
}
