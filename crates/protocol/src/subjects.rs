//! NATS subjects, stream names, header names and the error reply every service uses.

use serde::{Deserialize, Serialize};

pub const SUBMIT: &str = "parley.debates.submit";
pub const STATUS: &str = "parley.debates.status";
pub const RETRY: &str = "parley.debates.retry";
pub const CANCEL: &str = "parley.debates.cancel";
/// Steering a running debate (`parley_protocol::SteerRequest`): pause, resume, guide,
/// stop, extend.
pub const STEER: &str = "parley.debates.steer";
/// A human participant's answer to its open task (`parley_protocol::ContributeRequest`).
pub const CONTRIBUTE: &str = "parley.debates.contribute";
/// A new debate sharing an existing one's contributions up to a round
/// (`parley_protocol::ForkRequest`).
pub const FORK: &str = "parley.debates.fork";
/// Evaluator calls for `parley eval --nats-url` (request/reply, served by judge workers).
pub const EVALS_SUBMIT: &str = "parley.evals.submit";
/// Queue group of the judge workers on [`EVALS_SUBMIT`].
pub const JUDGE_WORKERS_QUEUE: &str = "parley-judge-workers";
/// Answers to a debate's clarification questions (`parley_protocol::AnswerRequest`).
pub const ANSWER: &str = "parley.debates.answer";
/// The user's thumbs up/down on a completed debate (`parley_protocol::FeedbackRequest`),
/// stored as its state's `userFeedback`.
pub const FEEDBACK: &str = "parley.debates.feedback";
/// A consumer of one debate's events, created by a coordinator for the requester
/// (`parley_cluster::events`): clients never create consumers themselves. A named NATS user
/// asks on [`follow_subject_as`] (`parley.debates.follow.<user>`), which the shipped roles
/// let only that user publish: the last token is the requester's identity, the one its
/// follower caps count against. The bare subject is for deployments without users.
pub const FOLLOW: &str = "parley.debates.follow";
/// Longest NATS user name that becomes a subject token (`deploy/nats/client-user.sh`).
pub const MAX_USER_NAME_BYTES: usize = 32;
/// Longest reply subject a service answers on.
pub const MAX_REPLY_SUBJECT_BYTES: usize = 256;
/// A consumer of every debate's last event (the page's list; `serve` and `operator` roles).
pub const LIST: &str = "parley.debates.list";
/// What the cluster's estimates learned: the completion tokens of past calls per
/// provider/model and kind (`parley_protocol::calibration::CalibrationReply`); the request
/// body is ignored.
pub const CALIBRATION: &str = "parley.debates.calibration";
/// Queue group shared by coordinator replicas.
pub const COORDINATOR_QUEUE: &str = "parley-coordinators";

pub const TASKS_AGENT: &str = "parley.tasks.agent";
pub const TASKS_JUDGE: &str = "parley.tasks.judge";
pub const TASKS_STREAM: &str = "PARLEY_TASKS";
pub const EVENTS_STREAM: &str = "PARLEY_EVENTS";
/// Workers publish result notifications here (the result itself is in Redis first).
pub const RESULTS_PREFIX: &str = "parley.results";

/// JetStream's advisory when a task message exhausted its deliveries (`MAX_DELIVER`)
/// without being acked: the coordinator records it as a dead letter.
pub const TASKS_MAX_DELIVERIES_ADVISORY: &str =
    "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.PARLEY_TASKS.*";

/// `parley.debates.follow.<user>`: a follow request from the NATS user `user`.
pub fn follow_subject_as(user: &str) -> String {
    format!("{FOLLOW}.{user}")
}

/// The identity a follow request on `subject` counts against: `Some(user)` for
/// `parley.debates.follow.<user>` (a valid user name), `Some("")` for the bare
/// [`FOLLOW`], `None` for anything else.
pub fn follow_identity(subject: &str) -> Option<&str> {
    if subject == FOLLOW {
        return Some("");
    }
    let user = subject.strip_prefix(FOLLOW)?.strip_prefix('.')?;
    is_user_name(user).then_some(user)
}

/// A NATS user name that may be a subject token: 1 to [`MAX_USER_NAME_BYTES`] letters,
/// digits, `_` or `-` (what `deploy/nats/client-user.sh` accepts).
pub fn is_user_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_USER_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The user an inbox prefix belongs to: `x` for `_INBOX_x` (the prefix the CLI, `serve`
/// and `client-user.sh` derive from a user name), `None` for the library's `_INBOX` or any
/// other prefix.
pub fn inbox_user(prefix: &str) -> Option<&str> {
    let user = prefix.strip_prefix("_INBOX_")?;
    is_user_name(user).then_some(user)
}

/// Why a service will not answer on `reply`, if it will not. A request's reply subject is
/// chosen by whoever sent the request, and a service's answer goes out with the *service's*
/// permissions (`allow_responses`): a reply subject aimed at `$JS.API.STREAM.PURGE...`
/// would turn an answer into a JetStream API call. So services answer only on inboxes:
/// `_INBOX.<...>` (the client library's default) or `_INBOX_<user>.<...>` (the prefixes of
/// the shipped roles), with plain tokens (no wildcards, no `$`), at most
/// [`MAX_REPLY_SUBJECT_BYTES`] bytes.
pub fn reply_refusal(reply: &str) -> Option<&'static str> {
    if reply.len() > MAX_REPLY_SUBJECT_BYTES {
        return Some("too long");
    }
    let mut tokens = reply.split('.');
    let first = tokens.next().unwrap_or_default();
    if first != "_INBOX" && inbox_user(first).is_none() {
        return Some("not an inbox");
    }
    let mut rest = 0;
    for t in tokens {
        rest += 1;
        if t.is_empty()
            || t.starts_with('$')
            || t.bytes()
                .any(|b| b == b'*' || b == b'>' || b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Some("not a plain subject");
        }
    }
    if rest == 0 {
        return Some("not an inbox");
    }
    None
}

pub fn events_subject(debate_id: &str) -> String {
    format!("parley.debates.{debate_id}.events")
}

pub fn results_subject(debate_id: &str) -> String {
    format!("{RESULTS_PREFIX}.{debate_id}")
}

pub const HEADER_SCHEMA_VERSION: &str = "Parley-Schema-Version";
pub const HEADER_TRACEPARENT: &str = "traceparent";
pub const HEADER_TRACESTATE: &str = "tracestate";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidJson,
    InvalidRequest,
    UnsupportedSchemaVersion,
    PayloadTooLarge,
    NotFound,
    Conflict,
    Unavailable,
    Internal,
    /// Missing or wrong credentials (the HTTP API's 401).
    Unauthorized,
    /// An idempotency key first used with a different request (the HTTP API's 422).
    IdempotencyKeyReused,
}

impl ErrorCode {
    /// The wire name (`invalid_json`, ...), for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidJson => "invalid_json",
            Self::InvalidRequest => "invalid_request",
            Self::UnsupportedSchemaVersion => "unsupported_schema_version",
            Self::PayloadTooLarge => "payload_too_large",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
            Self::Unauthorized => "unauthorized",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

/// `{"error": {"code": ..., "message": ...}}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub error: ErrorBody,
}

impl ErrorReply {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error: ErrorBody {
                code,
                message: message.into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_answer_only_on_inboxes() {
        for ok in [
            "_INBOX.abc.1",
            "_INBOX_client.xyz",
            "_INBOX_coordinator.a.b.c",
            "_INBOX_a-b_c.9",
        ] {
            assert_eq!(reply_refusal(ok), None, "{ok}");
        }
        for (bad, why) in [
            ("$JS.API.STREAM.PURGE.PARLEY_EVENTS", "not an inbox"),
            ("$JS.API.STREAM.DELETE.PARLEY_TASKS", "not an inbox"),
            ("$KV.PARLEY_RESULT_STASH.x", "not an inbox"),
            ("parley.tasks.agent", "not an inbox"),
            ("_INBOX", "not an inbox"),
            ("_INBOX_", "not an inbox"),
            ("_INBOX_x", "not an inbox"),
            ("_INBOXES.a", "not an inbox"),
            ("_INBOX_a.b.$JS", "not a plain subject"),
            ("_INBOX.a.>", "not a plain subject"),
            ("_INBOX.*.b", "not a plain subject"),
            ("_INBOX..b", "not a plain subject"),
            ("_INBOX.a b", "not a plain subject"),
        ] {
            assert_eq!(reply_refusal(bad), Some(why), "{bad}");
        }
        let long = format!("_INBOX.{}", "a".repeat(MAX_REPLY_SUBJECT_BYTES));
        assert_eq!(reply_refusal(&long), Some("too long"));
    }

    #[test]
    fn a_follow_subject_names_its_user() {
        assert_eq!(follow_identity(FOLLOW), Some(""));
        assert_eq!(
            follow_identity("parley.debates.follow.alice"),
            Some("alice")
        );
        assert_eq!(follow_identity(&follow_subject_as("serve")), Some("serve"));
        assert_eq!(follow_identity("parley.debates.follow.a.b"), None);
        assert_eq!(follow_identity("parley.debates.followx"), None);
        assert_eq!(follow_identity("parley.debates.follow."), None);
        let long = format!("parley.debates.follow.{}", "a".repeat(33));
        assert_eq!(follow_identity(&long), None);
        assert_eq!(inbox_user("_INBOX_alice"), Some("alice"));
        assert_eq!(inbox_user("_INBOX"), None);
        assert_eq!(inbox_user("_INBOX_a.b"), None);
    }
}
