//! Decoding requests at the edge: a submission ([`decode_submission`]) and a
//! `{"debateId": ...}` request ([`decode_debate_ref`]), each to a value that passed every
//! check, or a [`Rejection`] carrying the error code and a message naming every problem.
//!
//! A submission chooses the problem, the participants (role, provider name, model, prompt
//! texts) and the debate settings — nothing more. Endpoints, API keys and limits belong to
//! the operator's configuration, so a submission carrying an endpoint (`baseUrl`, ...) or
//! anything key-like (`apiKey`, `token`, `authorization`, ...) anywhere is refused with
//! `invalid_request`, naming the field. The one URL a submission names is a webhook's
//! (`webhooks[i].url`), which only picks one of the operator's endpoints.

use serde::Deserialize;
use serde_json::Value;

use crate::subjects::{ErrorCode, ErrorReply};
use crate::{is_valid_debate_id, limits, preview, DebateSpec, SpecError, SubmissionPolicy};
use crate::{SpecErrors, SCHEMA_VERSION};

/// A refused request: the reply's error code and its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct Rejection {
    pub code: ErrorCode,
    pub message: String,
}

impl Rejection {
    /// A rejection whose message is cut to [`limits::MAX_REPLY_MESSAGE_BYTES`] (it may
    /// quote outside input, and a reply must stay small).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > limits::MAX_REPLY_MESSAGE_BYTES {
            let mut cut = limits::MAX_REPLY_MESSAGE_BYTES - 3;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        Self { code, message }
    }
}

impl From<Rejection> for ErrorReply {
    fn from(r: Rejection) -> Self {
        ErrorReply::new(r.code, r.message)
    }
}

impl From<SpecErrors> for Rejection {
    fn from(e: SpecErrors) -> Self {
        Rejection::new(ErrorCode::InvalidRequest, e.to_string())
    }
}

/// Why a field name is the operator's to set, if it is: an endpoint or a credential.
pub fn operator_owned(name: &str) -> Option<&'static str> {
    let norm: String = name
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | ' ' | '.'))
        .flat_map(char::to_lowercase)
        .collect();
    const ENDPOINT: &str =
        "endpoints are chosen by the operator's configuration, not by a submission";
    const SECRET: &str =
        "API keys and credentials live in the operator's configuration, never in a submission";
    let endpoint = [
        "baseurl", "url", "uri", "endpoint", "apibase", "host", "proxy",
    ];
    if endpoint.iter().any(|e| norm == *e)
        || norm.ends_with("baseurl")
        || norm.ends_with("endpoint")
        || norm.ends_with("apiurl")
    {
        return Some(ENDPOINT);
    }
    let secret_suffix = [
        "apikey",
        "secret",
        "password",
        "passwd",
        "token",
        "authorization",
        "credential",
        "credentials",
        "bearer",
        "cookie",
    ];
    if matches!(
        norm.as_str(),
        "key" | "auth" | "headers" | "nkey" | "creds" | "jwt"
    ) || secret_suffix.iter().any(|s| norm.ends_with(s))
        || (norm.ends_with("key") && norm != "idempotencykey")
    {
        return Some(SECRET);
    }
    None
}

/// Every field anywhere in `v` whose name is the operator's to set, with its path
/// (`agents[1].baseUrl`, `apiKey`, ...).
pub fn operator_owned_fields(v: &Value) -> Vec<SpecError> {
    fn walk(v: &Value, path: &str, out: &mut Vec<SpecError>) {
        // Enough to name the problem; the rest of a hostile payload is not walked.
        if out.len() >= 32 {
            return;
        }
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    let name = preview(k, 64);
                    let here = if path.is_empty() {
                        name
                    } else {
                        format!("{path}.{name}")
                    };
                    // A webhook's `url` is a choice among the operator's endpoints (the
                    // server checks it against its allow-list): not an endpoint the
                    // submission sets. Credentials stay refused there too.
                    let webhook_url = k == "url" && path.starts_with("webhooks[");
                    if let Some(why) = operator_owned(k).filter(|_| !webhook_url) {
                        out.push(SpecError::new(&here, why));
                    }
                    walk(child, &here, out);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out
}

/// Decodes and checks a submission (`parley.debates.submit`): size, JSON, schema version,
/// operator-owned fields, the DebateSpec shape (unknown fields are refused), then every
/// limit and the operator's `policy`. Never panics, whatever the bytes.
pub fn decode_submission(
    payload: &[u8],
    policy: &SubmissionPolicy,
) -> Result<DebateSpec, Rejection> {
    if payload.len() > limits::MAX_SUBMISSION_BYTES {
        return Err(Rejection::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "submission is {} bytes, the limit is {}",
                payload.len(),
                limits::MAX_SUBMISSION_BYTES
            ),
        ));
    }
    let v: Value = serde_json::from_slice(payload)
        .map_err(|e| Rejection::new(ErrorCode::InvalidJson, format!("not JSON: {e}")))?;
    if !v.is_object() {
        return Err(Rejection::new(
            ErrorCode::InvalidRequest,
            "a submission is a JSON object (a DebateSpec)",
        ));
    }
    if let Some(sv) = v.get("schemaVersion") {
        if sv.as_u64() != Some(u64::from(SCHEMA_VERSION)) {
            return Err(Rejection::new(
                ErrorCode::UnsupportedSchemaVersion,
                format!(
                    "schemaVersion: unsupported {} (this build speaks {SCHEMA_VERSION})",
                    preview(&sv.to_string(), 40)
                ),
            ));
        }
    }
    let owned = operator_owned_fields(&v);
    if !owned.is_empty() {
        return Err(SpecErrors(owned).into());
    }
    let spec: DebateSpec = serde_json::from_value(v)
        .map_err(|e| Rejection::new(ErrorCode::InvalidRequest, format!("invalid debate: {e}")))?;
    spec.validate_with(policy)?;
    Ok(spec)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DebateRef {
    debate_id: String,
}

/// Decodes a request of at most `max_bytes`: JSON (else `invalid_json`) of type `T` (else
/// `invalid_request` with `expected`, the shape it should have, and serde's reason).
pub fn decode_request<T: serde::de::DeserializeOwned>(
    payload: &[u8],
    max_bytes: usize,
    expected: &str,
) -> Result<T, Rejection> {
    if payload.len() > max_bytes {
        return Err(Rejection::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "request is {} bytes, the limit is {max_bytes}",
                payload.len()
            ),
        ));
    }
    let v: Value = serde_json::from_slice(payload)
        .map_err(|e| Rejection::new(ErrorCode::InvalidJson, format!("not JSON: {e}")))?;
    serde_json::from_value(v).map_err(|e| {
        Rejection::new(
            ErrorCode::InvalidRequest,
            format!("expected {expected}: {e}"),
        )
    })
}

/// `id` is a debate id, else `invalid_request` naming the `debateId` field.
pub fn check_debate_id(id: &str) -> Result<(), Rejection> {
    if is_valid_debate_id(id) {
        return Ok(());
    }
    Err(Rejection::new(
        ErrorCode::InvalidRequest,
        format!(
            "debateId: {:?} is not a debate id (deb-YYYYMMDD-HHMMSS-xxxxxx)",
            preview(id, 64)
        ),
    ))
}

/// Decodes a `{"debateId": ...}` request (status, retry, cancel).
pub fn decode_debate_ref(payload: &[u8]) -> Result<String, Rejection> {
    let r: DebateRef = decode_request(payload, limits::MAX_REQUEST_BYTES, "{\"debateId\": ...}")?;
    check_debate_id(&r.debate_id)?;
    Ok(r.debate_id)
}

/// One answer to a clarification question: the question's id and the text (empty: the
/// user has no answer, recorded as [`crate::NO_ANSWER`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Answer {
    pub id: String,
    #[serde(default)]
    pub answer: String,
}

/// `parley.debates.answer`: answers to some or all of a waiting debate's questions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnswerRequest {
    pub debate_id: String,
    pub answers: Vec<Answer>,
}

impl AnswerRequest {
    /// Checks sizes and shapes (not whether the questions exist: that is the debate's
    /// business), reporting every problem with its field.
    pub fn validate(&self) -> Result<(), SpecErrors> {
        let mut c = crate::spec::Check::default();
        if !is_valid_debate_id(&self.debate_id) {
            c.push("debateId", "not a debate id (deb-YYYYMMDD-HHMMSS-xxxxxx)");
        }
        if self.answers.is_empty() {
            c.push(
                "answers",
                "no answers: send at least one {\"id\", \"answer\"}",
            );
        }
        if self.answers.len() > limits::MAX_ANSWERS {
            c.push(
                "answers",
                format!(
                    "{} answers, the limit is {}",
                    self.answers.len(),
                    limits::MAX_ANSWERS
                ),
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, a) in self.answers.iter().enumerate().take(limits::MAX_ANSWERS) {
            let field = format!("answers[{i}].id");
            c.label(&field, &a.id, limits::MAX_ID_BYTES + 16);
            if a.id.is_empty() {
                c.push(&field, "must not be empty");
            }
            if !seen.insert(a.id.as_str()) {
                c.push(
                    &field,
                    format!("question {:?} answered twice", preview(&a.id, 80)),
                );
            }
            c.chars(
                &format!("answers[{i}].answer"),
                &a.answer,
                limits::MAX_ANSWER_CHARS,
            );
        }
        c.into_result()
    }
}

/// Decodes and checks an answer request (`parley.debates.answer`): size, JSON, shape
/// (unknown fields refused), ids and text sizes. Never panics, whatever the bytes.
pub fn decode_answer_request(payload: &[u8]) -> Result<AnswerRequest, Rejection> {
    if payload.len() > limits::MAX_ANSWER_REQUEST_BYTES {
        return Err(Rejection::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "request is {} bytes, the limit is {}",
                payload.len(),
                limits::MAX_ANSWER_REQUEST_BYTES
            ),
        ));
    }
    let v: Value = serde_json::from_slice(payload)
        .map_err(|e| Rejection::new(ErrorCode::InvalidJson, format!("not JSON: {e}")))?;
    let r: AnswerRequest = serde_json::from_value(v).map_err(|e| {
        Rejection::new(
            ErrorCode::InvalidRequest,
            format!("expected {{\"debateId\": ..., \"answers\": [{{\"id\", \"answer\"}}]}}: {e}"),
        )
    })?;
    r.validate()?;
    Ok(r)
}

/// `parley.debates.feedback`: the user's verdict on a completed debate, stored as its
/// state's `userFeedback` (1 thumbs up, -1 thumbs down).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeedbackRequest {
    pub debate_id: String,
    pub feedback: i8,
}

/// Decodes and checks a feedback request (`parley.debates.feedback`): size, JSON, shape
/// (unknown fields refused), the id and the verdict (1 or -1). Never panics.
pub fn decode_feedback_request(payload: &[u8]) -> Result<FeedbackRequest, Rejection> {
    if payload.len() > limits::MAX_REQUEST_BYTES {
        return Err(Rejection::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "request is {} bytes, the limit is {}",
                payload.len(),
                limits::MAX_REQUEST_BYTES
            ),
        ));
    }
    let v: Value = serde_json::from_slice(payload)
        .map_err(|e| Rejection::new(ErrorCode::InvalidJson, format!("not JSON: {e}")))?;
    let r: FeedbackRequest = serde_json::from_value(v).map_err(|e| {
        Rejection::new(
            ErrorCode::InvalidRequest,
            format!("expected {{\"debateId\": ..., \"feedback\": 1 or -1}}: {e}"),
        )
    })?;
    let mut c = crate::spec::Check::default();
    if !is_valid_debate_id(&r.debate_id) {
        c.push("debateId", "not a debate id (deb-YYYYMMDD-HHMMSS-xxxxxx)");
    }
    if !matches!(r.feedback, 1 | -1) {
        c.push(
            "feedback",
            format!(
                "{} is not a verdict (1 thumbs up, -1 thumbs down)",
                r.feedback
            ),
        );
    }
    c.into_result()?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn feedback_requests_are_checked() {
        let id = "deb-20200101-000000-aaaaaa";
        let r = decode_feedback_request(
            json!({"debateId": id, "feedback": -1})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(r.feedback, -1);
        let e = decode_feedback_request(
            json!({"debateId": "x", "feedback": 3})
                .to_string()
                .as_bytes(),
        )
        .unwrap_err();
        let text = ErrorReply::from(e).error.message;
        assert!(
            text.contains("debateId") && text.contains("feedback"),
            "{text}"
        );
        assert!(decode_feedback_request(b"{\"debateId\": 1}").is_err());
        assert!(decode_feedback_request(&[b' '; 5000]).is_err());
    }

    #[test]
    fn answer_requests_are_bounded_and_name_the_field() {
        let id = "deb-20200101-000000-aaaaaa";
        let ok =
            json!({"debateId": id, "answers": [{"id": "a-q1", "answer": "yes"}, {"id": "a-q2"}]});
        let r = decode_answer_request(ok.to_string().as_bytes()).unwrap();
        assert_eq!(r.answers[1].answer, "");
        let empty = json!({"debateId": id, "answers": []});
        let e = decode_answer_request(empty.to_string().as_bytes()).unwrap_err();
        assert!(e.message.contains("answers"), "{e}");
        let twice = json!({"debateId": id, "answers": [{"id": "a-q1"}, {"id": "a-q1"}]});
        let e = decode_answer_request(twice.to_string().as_bytes()).unwrap_err();
        assert!(
            e.message.contains("answers[1].id") && e.message.contains("twice"),
            "{e}"
        );
        let long = json!({"debateId": id, "answers": [{"id": "a-q1", "answer": "x".repeat(limits::MAX_ANSWER_CHARS + 1)}]});
        let e = decode_answer_request(long.to_string().as_bytes()).unwrap_err();
        assert!(e.message.contains("answers[0].answer"), "{e}");
        let extra = json!({"debateId": id, "answers": [{"id": "a-q1", "answr": "typo"}]});
        let e = decode_answer_request(extra.to_string().as_bytes()).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest, "{e}");
        let bad_id = json!({"debateId": "../x", "answers": [{"id": "a-q1"}]});
        let e = decode_answer_request(bad_id.to_string().as_bytes()).unwrap_err();
        assert!(e.message.contains("debateId"), "{e}");
        let big = vec![b' '; limits::MAX_ANSWER_REQUEST_BYTES + 1];
        assert_eq!(
            decode_answer_request(&big).unwrap_err().code,
            ErrorCode::PayloadTooLarge
        );
        assert_eq!(
            decode_answer_request(b"\xff").unwrap_err().code,
            ErrorCode::InvalidJson
        );
    }

    fn agent(id: &str) -> Value {
        json!({"id": id, "name": "A", "role": "architect", "model": "m"})
    }

    fn spec() -> Value {
        json!({
            "problem": "Design a cache",
            "agents": [agent("a1"), agent("a2")],
            "judge": {"id": "judge", "name": "J", "role": "generalist", "model": "m"},
        })
    }

    fn reject(v: &Value) -> Rejection {
        decode_submission(v.to_string().as_bytes(), &SubmissionPolicy::default()).unwrap_err()
    }

    #[test]
    fn a_good_spec_decodes() {
        let s =
            decode_submission(spec().to_string().as_bytes(), &SubmissionPolicy::default()).unwrap();
        assert_eq!(s.agents.len(), 2);
    }

    #[test]
    fn endpoints_and_keys_are_refused_naming_the_field() {
        for (path, patch) in [
            ("baseUrl", json!({"baseUrl": "http://evil"})),
            ("agents[1].baseUrl", json!(null)),
            ("judge.baseUrl", json!(null)),
            ("apiKey", json!({"apiKey": "sk-x"})),
            ("judge.openaiApiKey", json!(null)),
            ("agents[0].authorization", json!(null)),
            ("debate.token", json!(null)),
        ] {
            let mut v = spec();
            match path {
                "agents[1].baseUrl" => v["agents"][1]["baseUrl"] = json!("http://evil"),
                "judge.baseUrl" => v["judge"]["baseUrl"] = json!("http://evil"),
                "judge.openaiApiKey" => v["judge"]["openaiApiKey"] = json!("sk"),
                "agents[0].authorization" => v["agents"][0]["authorization"] = json!("Bearer x"),
                "debate.token" => v["debate"] = json!({"token": "t"}),
                _ => {
                    for (k, x) in patch.as_object().unwrap() {
                        v[k] = x.clone();
                    }
                }
            }
            let r = reject(&v);
            assert_eq!(r.code, ErrorCode::InvalidRequest, "{path}: {r}");
            assert!(
                r.message.contains(path),
                "{path} not named in {}",
                r.message
            );
        }
        // Not key-like: the idempotency key and maxTokens.
        assert_eq!(operator_owned("idempotencyKey"), None);
        assert_eq!(operator_owned("maxTokens"), None);
        assert_eq!(operator_owned("tokensUsed"), None);
    }

    #[test]
    fn model_allow_list_names_the_model() {
        let mut policy = SubmissionPolicy::default();
        policy.providers.insert(
            "openai".into(),
            crate::ProviderLimits {
                allowed_models: Some(vec!["gpt-4o-mini".into()]),
                ..Default::default()
            },
        );
        let mut v = spec();
        v["agents"][0]["provider"] = json!("openai");
        v["agents"][0]["model"] = json!("gpt-4o");
        v["agents"][1]["provider"] = json!("openai");
        v["agents"][1]["model"] = json!("gpt-4o-mini");
        v["judge"]["provider"] = json!("local");
        let r = decode_submission(v.to_string().as_bytes(), &policy).unwrap_err();
        assert!(
            r.message.contains("agents[0].model") && r.message.contains("\"gpt-4o\""),
            "{r}"
        );
        assert!(!r.message.contains("agents[1]"), "{r}");
        // Without a provider the model must be allowed everywhere it may land.
        v["agents"][0]["model"] = json!("gpt-4o-mini");
        v["judge"]["provider"] = json!(null);
        let r = decode_submission(v.to_string().as_bytes(), &policy).unwrap_err();
        assert!(r.message.contains("judge.model"), "{r}");
        v["judge"]["model"] = json!("gpt-4o-mini");
        decode_submission(v.to_string().as_bytes(), &policy).unwrap();
        // The embedding model of a similarity debate is held to the same lists.
        v["debate"]["terminationCondition"] = json!({"type": "similarity", "threshold": 0.9});
        v["debate"]["embeddings"] =
            json!({"provider": "openai", "model": "text-embedding-3-large"});
        let r = decode_submission(v.to_string().as_bytes(), &policy).unwrap_err();
        assert!(
            r.message.contains("debate.embeddings.model")
                && r.message.contains("\"text-embedding-3-large\""),
            "{r}"
        );
        policy
            .providers
            .get_mut("openai")
            .unwrap()
            .allowed_models
            .as_mut()
            .unwrap()
            .push("text-embedding-3-large".into());
        decode_submission(v.to_string().as_bytes(), &policy).unwrap();
    }

    #[test]
    fn ranges_and_sizes_are_enforced_with_every_problem_named() {
        let mut v = spec();
        v["agents"][0]["id"] = json!("bad\nid");
        v["agents"][1]["id"] = json!("a#1");
        v["agents"][1]["maxTokens"] = json!(16_385);
        v["judge"]["id"] = json!("x".repeat(65));
        v["idempotencyKey"] = json!("k".repeat(129));
        v["debate"] = json!({"retry": {
            "default": {"attempts": 11, "initialBackoffMs": 99, "timeoutMs": 1_800_001},
            "nodes": {"bogus": {}}
        }});
        let r = reject(&v);
        for field in [
            "agents[0].id",
            "agents[1].id",
            "agents[1].maxTokens",
            "judge.id",
            "idempotencyKey",
            "debate.retry.default.attempts",
            "debate.retry.default.initialBackoffMs",
            "debate.retry.default.timeoutMs",
            "debate.retry.nodes.bogus",
        ] {
            assert!(
                r.message.contains(field),
                "{field} missing in {}",
                r.message
            );
        }
        let mut v = spec();
        let many: Vec<Value> = (0..33)
            .map(|i| {
                let mut a = agent(&format!("a{i}"));
                a["enabled"] = json!(i < 2);
                a
            })
            .collect();
        v["agents"] = json!(many);
        assert!(reject(&v).message.contains("33 agents listed"));
    }

    #[test]
    fn tools_and_context_files_are_checked_at_the_edge() {
        let mut v = spec();
        v["agents"][0]["tools"] = json!([{"name": "file_read"}, {"name": "rm_rf"}]);
        v["agents"][1]["toolCallLimit"] = json!(0);
        v["contextFiles"] = json!({"files": [
            {"path": "ok.md", "content": "x"},
            {"path": "../etc/passwd", "content": "x"},
            {"path": "/abs", "content": "x"},
            {"path": "nul\u{0}name", "content": "x"}
        ]});
        let r = reject(&v);
        for field in [
            "agents[0].tools[1].name: unknown tool \"rm_rf\"",
            "agents[1].toolCallLimit: 0 is out of range 1..=50",
            "contextFiles.files[1].path",
            "contextFiles.files[2].path",
            "contextFiles.files[3].path",
        ] {
            assert!(
                r.message.contains(field),
                "{field} missing in {}",
                r.message
            );
        }
        assert!(!r.message.contains("files[0]"), "{}", r.message);
        // A tool entry with another key is refused (a typo is not ignored).
        let mut v = spec();
        v["agents"][0]["tools"] = json!([{"nmae": "file_read"}]);
        assert!(reject(&v).message.contains("nmae"));
        let mut v = spec();
        v["agents"][0]["tools"] = json!([{"name": "list_files"}]);
        v["agents"][0]["toolCallLimit"] = json!(50);
        v["contextFiles"] = json!({"files": [{"path": "src/a.rs", "content": "fn a() {}"}]});
        let s = decode_submission(v.to_string().as_bytes(), &SubmissionPolicy::default()).unwrap();
        assert_eq!(s.agents[0].tool_call_limit(), 50);
        assert_eq!(
            s.agents[1].tool_call_limit(),
            crate::DEFAULT_TOOL_CALL_LIMIT
        );
        assert!(s.context_files.unwrap().get("src/a.rs").is_some());
    }

    #[test]
    fn garbage_gets_the_right_codes() {
        let p = SubmissionPolicy::default();
        assert_eq!(
            decode_submission(b"\xff\xfe", &p).unwrap_err().code,
            ErrorCode::InvalidJson
        );
        assert_eq!(
            decode_submission(b"[1,2]", &p).unwrap_err().code,
            ErrorCode::InvalidRequest
        );
        let deep = "[".repeat(10_000);
        assert_eq!(
            decode_submission(deep.as_bytes(), &p).unwrap_err().code,
            ErrorCode::InvalidJson
        );
        let big = vec![b' '; limits::MAX_SUBMISSION_BYTES + 1];
        assert_eq!(
            decode_submission(&big, &p).unwrap_err().code,
            ErrorCode::PayloadTooLarge
        );
        let huge_key = format!("{{\"{}\": 1}}", "k".repeat(900_000));
        let r = decode_submission(huge_key.as_bytes(), &p).unwrap_err();
        assert!(
            r.message.len() <= limits::MAX_REPLY_MESSAGE_BYTES,
            "{}",
            r.message.len()
        );
        assert_eq!(
            decode_debate_ref(br#"{"debateId": "deb-20200101-000000-aaaaaa"}"#).unwrap(),
            "deb-20200101-000000-aaaaaa"
        );
        assert_eq!(
            decode_debate_ref(br#"{"debateId": "../x"}"#)
                .unwrap_err()
                .code,
            ErrorCode::InvalidRequest
        );
    }
}
