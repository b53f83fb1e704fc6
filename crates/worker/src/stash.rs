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
//!
//! The bucket is on the bus, so an entry is untrusted until checked: each one is sealed
//! with the debate's dispatch secret (`parley_cluster::dispatch::seal`, over the result's
//! exact JSON, which names debate, task and attempt). A worker uses an entry only when its
//! seal verifies and the result inside passes [`TaskResult::validate`] (attempt within
//! `MAX_TASK_ATTEMPT`, sizes) and names the task being run; any other entry is ignored,
//! purged and counted (`parley_stash_rejected_total{reason}`).

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use parley_cluster::dispatch;
use parley_protocol::{Task, TaskOutcome, TaskResult};
use parley_telemetry::StashRejectReason;
use serde::{Deserialize, Serialize};

/// The key-value bucket (stream `KV_PARLEY_RESULT_STASH`).
pub const BUCKET: &str = "PARLEY_RESULT_STASH";
/// How long a stashed result is kept if no worker picks it up.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// How long a lookup may take before the worker goes on without it.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// One stash entry: a result's exact JSON and its seal under the debate's secret.
#[derive(Serialize, Deserialize)]
struct Sealed {
    /// `parley_cluster::dispatch::seal` of `result`.
    seal: String,
    /// The [`TaskResult`] as JSON text, kept as the bytes that were sealed.
    result: String,
}

/// The stash bucket of one worker process.
#[derive(Clone)]
pub struct ResultStash {
    kv: kv::Store,
}

impl ResultStash {
    /// Opens the bucket, creating it with `replicas` replicas when missing; waits while
    /// JetStream cannot answer (`parley_cluster::streams::wait_for_jetstream`), `None`
    /// after `shutdown`. Two workers creating the bucket at once may race; the next try
    /// finds it.
    pub async fn open(
        js: &jetstream::Context,
        replicas: usize,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> Result<Option<Self>, async_nats::Error> {
        parley_cluster::streams::wait_for_jetstream("the result stash", shutdown, || {
            Self::open_once(js, replicas)
        })
        .await
    }

    async fn open_once(
        js: &jetstream::Context,
        replicas: usize,
    ) -> Result<Self, async_nats::Error> {
        // The bucket's stream as `create_key_value` makes it; created directly, because
        // that call first queries the account in a shape older servers do not answer.
        js.get_or_create_stream(stream::Config {
            name: format!("KV_{BUCKET}"),
            description: Some("Parley task results a worker could not write to Redis".into()),
            subjects: vec![format!("$KV.{BUCKET}.>")],
            max_messages_per_subject: 1,
            max_age: MAX_AGE,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: stream::DiscardPolicy::New,
            num_replicas: replicas,
            ..Default::default()
        })
        .await?;
        Ok(Self {
            kv: js.get_key_value(BUCKET).await?,
        })
    }

    /// Keeps `result`, sealed with its debate's dispatch `secret`, until a worker writes it
    /// to Redis.
    pub async fn put(&self, result: &TaskResult, secret: &str) -> Result<(), async_nats::Error> {
        let json = serde_json::to_string(result)?;
        let entry = Sealed {
            seal: dispatch::seal(secret, json.as_bytes()),
            result: json,
        };
        self.kv
            .put(key(&result.task_id), serde_json::to_vec(&entry)?.into())
            .await?;
        Ok(())
    }

    /// The stashed result that answers this delivery of `task`, if any: a success of any
    /// attempt (the first success wins), or a failure of this very attempt. An entry whose
    /// seal does not verify under the debate's `secret`, or whose result is invalid or
    /// names another task, is ignored, purged and counted. A lookup error is `None`
    /// (logged), so a stash that is unreachable never stops a task from running.
    pub async fn lookup(&self, task: &Task, secret: &str) -> Option<TaskResult> {
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
        match open_entry(&raw, task, secret) {
            Ok(result) => result,
            Err((reason, why)) => {
                parley_telemetry::metrics().stash_rejected(reason);
                tracing::warn!(task = %task.id, reason = reason.as_str(), "ignoring a stashed result: {why}");
                self.remove(&task.id).await;
                None
            }
        }
    }

    /// Forgets the entry of `task_id` (its result is in Redis now).
    pub async fn remove(&self, task_id: &str) {
        if let Err(e) = self.kv.purge(key(task_id)).await {
            // It expires after MAX_AGE; a later lookup finds the result in Redis first.
            tracing::debug!(task = %task_id, error = %e, "cannot remove a stashed result");
        }
    }
}

/// The result a stash entry holds for `task`: `Ok(None)` when it is authentic but does not
/// answer this delivery (a failure of another attempt); `Err` when it must not be used.
fn open_entry(
    raw: &[u8],
    task: &Task,
    secret: &str,
) -> Result<Option<TaskResult>, (StashRejectReason, String)> {
    let forged = |why: String| (StashRejectReason::Forged, why);
    let entry: Sealed = serde_json::from_slice(raw)
        .map_err(|e| forged(format!("not a sealed stash entry ({e})")))?;
    if !dispatch::verify_seal(secret, entry.result.as_bytes(), &entry.seal) {
        return Err(forged(
            "its seal does not verify under the debate's secret (not written by a worker)".into(),
        ));
    }
    let invalid = |why: String| (StashRejectReason::Invalid, why);
    let result: TaskResult = serde_json::from_str(&entry.result)
        .map_err(|e| invalid(format!("not a task result ({e})")))?;
    result
        .validate()
        .map_err(|e| invalid(format!("an invalid task result ({e})")))?;
    if result.task_id != task.id || result.debate_id != task.debate_id {
        return Err(invalid(format!(
            "it is sealed for task {} of debate {}",
            result.task_id, result.debate_id
        )));
    }
    let answers = match result.outcome {
        TaskOutcome::Ok(_) => true,
        TaskOutcome::Error(_) => result.attempt == task.attempt,
    };
    Ok(answers.then_some(result))
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
    use super::*;
    use parley_telemetry::StashRejectReason::{Forged, Invalid};

    const DEBATE: &str = "deb-20250101-000000-abcdef";

    fn task(attempt: u32) -> Task {
        serde_json::from_value(serde_json::json!({
            "id": format!("{DEBATE}/1/propose/agent-a"), "debateId": DEBATE, "round": 1,
            "kind": "propose", "attempt": attempt,
            "agent": {"id": "agent-a", "name": "A", "role": "architect", "model": "m"},
            "problem": "p", "input": {}, "timeoutMs": 1000,
        }))
        .unwrap()
    }

    fn result(task_id: &str, attempt: u32, ok: bool) -> TaskResult {
        let outcome = if ok {
            serde_json::json!({"status": "ok", "content": "answer",
                "metadata": {"tokensUsed": 1, "latencyMs": 1, "model": "m"}})
        } else {
            serde_json::json!({"status": "error", "kind": "timeout", "message": "slow"})
        };
        serde_json::from_value(serde_json::json!({
            "taskId": task_id, "debateId": DEBATE, "attempt": attempt, "worker": "w",
            "outcome": outcome,
        }))
        .unwrap()
    }

    fn sealed(secret: &str, r: &TaskResult) -> Vec<u8> {
        let json = serde_json::to_string(r).unwrap();
        let seal = dispatch::seal(secret, json.as_bytes());
        serde_json::to_vec(&Sealed { seal, result: json }).unwrap()
    }

    fn reason(r: Result<Option<TaskResult>, (StashRejectReason, String)>) -> StashRejectReason {
        r.expect_err("the entry must be refused").0
    }

    #[test]
    fn only_entries_sealed_with_the_debates_secret_are_used() {
        let secret = dispatch::new_secret();
        let t = task(2);
        let ok = result(&t.id, 1, true);
        // Sealed by a worker: a success of any attempt answers.
        assert_eq!(
            open_entry(&sealed(&secret, &ok), &t, &secret).unwrap(),
            Some(ok.clone())
        );
        // A failure answers only its own attempt.
        let failed = result(&t.id, 1, false);
        assert_eq!(
            open_entry(&sealed(&secret, &failed), &t, &secret).unwrap(),
            None
        );
        let failed = result(&t.id, 2, false);
        assert!(open_entry(&sealed(&secret, &failed), &t, &secret)
            .unwrap()
            .is_some());

        // Forgeries: a bare result (the old format), another secret, a tampered result, junk.
        let bare = serde_json::to_vec(&ok).unwrap();
        assert_eq!(reason(open_entry(&bare, &t, &secret)), Forged);
        let other = dispatch::new_secret();
        assert_eq!(
            reason(open_entry(&sealed(&other, &ok), &t, &secret)),
            Forged
        );
        let mut entry: Sealed = serde_json::from_slice(&sealed(&secret, &ok)).unwrap();
        entry.result = entry.result.replace("answer", "FORGED");
        let tampered = serde_json::to_vec(&entry).unwrap();
        assert_eq!(reason(open_entry(&tampered, &t, &secret)), Forged);
        assert_eq!(reason(open_entry(b"\x00not json", &t, &secret)), Forged);

        // Authentic but unusable: an attempt past the limit, another task.
        let huge = result(&t.id, u32::MAX, true);
        assert_eq!(
            reason(open_entry(&sealed(&secret, &huge), &t, &secret)),
            Invalid
        );
        let elsewhere = result(&format!("{DEBATE}/1/propose/agent-b"), 1, true);
        assert_eq!(
            reason(open_entry(&sealed(&secret, &elsewhere), &t, &secret)),
            Invalid
        );
    }

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
