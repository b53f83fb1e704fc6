//! [`ClusterBackend`]: a front end of a cluster, holding no debate state of its own, so any
//! number of `serve` replicas can run side by side.
//!
//! - submit, status, retry, cancel, answer, feedback: the coordinators' request subjects
//!   (`parley.debates.*`), exactly as `parley submit / status / retry / cancel / answer`
//!   send them. A state larger than one NATS message arrives in pages and is put back
//!   together.
//! - events: a consumer of the `PARLEY_EVENTS` stream filtered on the debate's subject,
//!   which a coordinator creates for this server (`parley.debates.follow`; clients may not
//!   create consumers, see `parley_cluster::events`), replayed from the start; events at
//!   or below the resume point are skipped. At most [`DEFAULT_MAX_EVENT_STREAMS`] (or
//!   `--max-event-streams`) at once: past it, and when the coordinators have no follower
//!   to spare, the stream is refused with a 503 the page shows.
//! - the list: a consumer delivering the last event of every debate in the stream
//!   (`parley.debates.list`, which only the `serve` and `operator` roles may ask for):
//!   status, round, phase; the problem of the most recent ones is fetched once with a
//!   status request and cached (it never changes). Debates whose events have expired from
//!   the stream are not listed (their state stays reachable by id).
//!
//! The server connects as a NATS client; with the shipped roles (`deploy/nats/parley.conf`)
//! that is the `serve` user: a client that may also ask for the list and delete the list's
//! consumer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use parley_cluster::events::{FollowTarget, Follower};
use parley_protocol::subjects::{self, ErrorCode, ErrorReply};
use parley_protocol::DebateState;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::backend::{
    problem_preview, AnswersRequest, ApiError, Backend, DebateListItem, EventStream,
    FeedbackRequest, FormDefaults, ReportFn, SpecSource, SubmitRequest, WireEvent,
};

/// The subject clarification answers go to (answered by the coordinators).
pub const ANSWER_SUBJECT: &str = parley_protocol::subjects::ANSWER;
/// How long a request waits for a coordinator.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts of a retry or cancel that a coordinator answered `unavailable`.
const COMMAND_ATTEMPTS: u32 = 4;
/// Wait between those attempts.
const COMMAND_BACKOFF: Duration = Duration::from_millis(500);
/// Event streams one server follows at once by default (each is a consumer in the cluster).
pub const DEFAULT_MAX_EVENT_STREAMS: usize = 64;
/// Debates whose problem the list fetches per call, at most (the rest show theirs once
/// fetched by a later call).
const PROBLEMS_PER_LIST: usize = 24;
/// Problems cached, at most (the cache is emptied when full).
const MAX_CACHED_PROBLEMS: usize = 10_000;

/// A cluster front end; see the module docs.
pub struct ClusterBackend {
    client: async_nats::Client,
    specs: Arc<dyn SpecSource>,
    report: ReportFn,
    /// Debate id → its problem's preview (immutable, so caching it keeps `serve`
    /// stateless in every way that matters).
    problems: Mutex<HashMap<String, String>>,
    /// Debate id → the name of the API key that created it (immutable, like the problem).
    owners: Mutex<HashMap<String, Option<String>>>,
    /// One permit per open event stream: a server follows at most
    /// `max_event_streams` debates at once (each is a consumer in the cluster).
    event_streams: Arc<Semaphore>,
    max_event_streams: usize,
}

impl ClusterBackend {
    pub fn new(client: async_nats::Client, specs: Arc<dyn SpecSource>, report: ReportFn) -> Self {
        Self::with_max_event_streams(client, specs, report, DEFAULT_MAX_EVENT_STREAMS)
    }

    /// A front end that follows at most `max_event_streams` debates' events at once (past
    /// it, a new stream is refused with a 503).
    pub fn with_max_event_streams(
        client: async_nats::Client,
        specs: Arc<dyn SpecSource>,
        report: ReportFn,
        max_event_streams: usize,
    ) -> Self {
        let max_event_streams = max_event_streams.max(1);
        Self {
            client,
            specs,
            report,
            problems: Mutex::new(HashMap::new()),
            owners: Mutex::new(HashMap::new()),
            event_streams: Arc::new(Semaphore::new(max_event_streams)),
            max_event_streams,
        }
    }

    /// Sends a request; an `{"error": ...}` reply becomes the matching [`ApiError`].
    async fn request(&self, subject: &str, body: Vec<u8>) -> Result<Value, ApiError> {
        let reply = tokio::time::timeout(
            REQUEST_TIMEOUT,
            self.client.request(subject.to_string(), body.into()),
        )
        .await
        .map_err(|_| {
            ApiError::unavailable(format!(
                "no reply on {subject} within {} s: is a coordinator running?",
                REQUEST_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| ApiError::unavailable(format!("request on {subject} failed: {e}")))?;
        let v: Value = serde_json::from_slice(&reply.payload)
            .map_err(|e| ApiError::internal(format!("unreadable reply on {subject}: {e}")))?;
        // An error reply is `{"error": {"code", "message"}}`; a failed debate's state or
        // summary also has an `error` field (where it failed), without a `code`.
        if let Ok(reply) = serde_json::from_value::<ErrorReply>(v.clone()) {
            return Err(ApiError::new(reply.error.code, reply.error.message));
        }
        Ok(v)
    }

    async fn by_id(&self, subject: &str, id: &str) -> Result<Value, ApiError> {
        self.request(subject, json!({ "debateId": id }).to_string().into_bytes())
            .await
    }

    /// A retry or cancel. A coordinator answers `unavailable` ("did not answer; try
    /// again") when the command reached a debate's actor while it was stopping (e.g. right
    /// after the debate failed); the command was not applied, so it is sent again, up to
    /// [`COMMAND_ATTEMPTS`] times.
    async fn command(&self, subject: &str, id: &str) -> Result<Value, ApiError> {
        let mut attempt = 1;
        loop {
            match self.by_id(subject, id).await {
                Err(e) if e.code == ErrorCode::Unavailable && attempt < COMMAND_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(COMMAND_BACKOFF).await;
                }
                other => return other,
            }
        }
    }

    /// The state JSON: the status reply itself, or its snapshot's pages put together.
    async fn fetch_state(&self, id: &str) -> Result<Value, ApiError> {
        parley_cluster::status::fetch_state(
            id,
            |body| self.request(subjects::STATUS, body),
            ApiError::internal,
        )
        .await
    }

    /// The last event of every debate in the events stream, from a consumer a
    /// coordinator creates for this server (`parley.debates.list`; see
    /// `parley_cluster::events`).
    async fn last_events(&self) -> Result<Vec<Value>, ApiError> {
        let mut follower = Follower::start(self.client.clone(), FollowTarget::LastOfEach)
            .await
            .map_err(api_error)?;
        let mut out = Vec::new();
        if follower.pending_at_start() > 0 {
            while let Ok(Some(msg)) =
                tokio::time::timeout(Duration::from_secs(3), follower.next()).await
            {
                let Ok(msg) = msg else { break };
                let pending = msg.info().map(|i| i.pending).unwrap_or(0);
                // The debate's last message: its last event is the debate's latest.
                let events: Vec<Value> =
                    parley_protocol::decode_event_message(&msg.payload).unwrap_or_default();
                out.extend(events.into_iter().next_back());
                if pending == 0 {
                    break;
                }
            }
        }
        // Not left for the server to expire: a page lists every few seconds. (Only the
        // `serve` role may delete consumers; without it the consumer expires on its own.)
        if let Ok(stream) = jetstream::new(self.client.clone())
            .get_stream_no_info(subjects::EVENTS_STREAM)
            .await
        {
            let _ = stream.delete_consumer(follower.consumer()).await;
        }
        Ok(out)
    }
}

/// A coordinator's error reply as the API's error (`unavailable` is a 503).
fn api_error(e: ErrorReply) -> ApiError {
    ApiError::new(e.error.code, e.error.message)
}

fn list_item(v: &Value) -> Option<DebateListItem> {
    let id = v["debateId"].as_str()?.to_string();
    let p = &v["progress"];
    let num = |x: &Value| x.as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
    Some(DebateListItem {
        id,
        status: v["status"].as_str().unwrap_or("unknown").to_string(),
        problem: String::new(),
        round: num(&p["round"]),
        rounds: num(&p["rounds"]),
        phase: p["phase"].as_str().unwrap_or_default().to_string(),
        confidence: (v["type"] == "debateCompleted")
            .then(|| v["confidence"].as_f64())
            .flatten(),
        updated_at: serde_json::from_value::<DateTime<Utc>>(v["at"].clone()).ok()?,
        owner: None,
        live: true,
    })
}

#[async_trait]
impl Backend for ClusterBackend {
    fn kind(&self) -> &'static str {
        "cluster"
    }

    fn defaults(&self) -> FormDefaults {
        self.specs.defaults()
    }

    async fn submit(&self, request: SubmitRequest) -> Result<String, ApiError> {
        self.submit_owned(request, None).await
    }

    /// The owner travels in the spec; the coordinator records it in the state, so every
    /// `serve` replica reads it back (`owner`).
    async fn submit_owned(
        &self,
        request: SubmitRequest,
        owner: Option<&str>,
    ) -> Result<String, ApiError> {
        let mut spec = self.specs.build(&request)?;
        spec.idempotency_key = request.idempotency_key.clone();
        spec.owner = owner.map(str::to_string);
        spec.webhooks = request.webhook_subscriptions();
        let body = serde_json::to_vec(&spec).map_err(|e| ApiError::internal(e.to_string()))?;
        let reply = self.request(subjects::SUBMIT, body).await?;
        let id = reply["debateId"]
            .as_str()
            .ok_or_else(|| ApiError::internal(format!("unexpected submit reply: {reply}")))?
            .to_string();
        if let Ok(mut cache) = self.problems.lock() {
            cache.insert(id.clone(), problem_preview(&request.problem));
        }
        if let Ok(mut cache) = self.owners.lock() {
            cache.insert(id.clone(), owner.map(str::to_string));
        }
        Ok(id)
    }

    /// From the status summary (the owner never changes: cached).
    async fn owner(&self, id: &str) -> Result<Option<String>, ApiError> {
        if let Some(o) = self.owners.lock().ok().and_then(|c| c.get(id).cloned()) {
            return Ok(o);
        }
        let body = json!({ "debateId": id, "view": "summary" }).to_string();
        let v = self.request(subjects::STATUS, body.into_bytes()).await?;
        let owner = v["owner"].as_str().map(str::to_string);
        if let Ok(mut cache) = self.owners.lock() {
            if cache.len() > MAX_CACHED_PROBLEMS {
                cache.clear();
            }
            cache.insert(id.to_string(), owner.clone());
        }
        Ok(owner)
    }

    async fn list(&self) -> Result<Vec<DebateListItem>, ApiError> {
        let mut items: Vec<DebateListItem> = self
            .last_events()
            .await?
            .iter()
            .filter_map(list_item)
            .collect();
        items.sort_by_key(|i| std::cmp::Reverse(i.updated_at));
        items.truncate(crate::embedded::MAX_LISTED);
        let missing: Vec<String> = {
            let cache = self
                .problems
                .lock()
                .map_err(|_| ApiError::internal("cache poisoned"))?;
            items
                .iter()
                .filter(|i| !cache.contains_key(&i.id))
                .take(PROBLEMS_PER_LIST)
                .map(|i| i.id.clone())
                .collect()
        };
        let fetched: Vec<(String, Option<String>)> = futures::stream::iter(missing)
            .map(|id| async move {
                let problem = self
                    .fetch_state(&id)
                    .await
                    .ok()
                    .and_then(|s| s["problem"].as_str().map(problem_preview));
                (id, problem)
            })
            .buffer_unordered(4)
            .collect()
            .await;
        // Every listed debate's owner (fetched once each, then cached): a user key's list
        // shows only its own debates.
        let owners: Vec<(String, Option<String>)> =
            futures::stream::iter(items.iter().map(|i| i.id.clone()).collect::<Vec<_>>())
                .map(|id| async move {
                    let owner = self.owner(&id).await;
                    (id, owner.ok().flatten())
                })
                .buffer_unordered(8)
                .collect()
                .await;
        let owners: HashMap<String, Option<String>> = owners.into_iter().collect();
        for i in &mut items {
            i.owner = owners.get(&i.id).cloned().flatten();
        }
        if let Ok(mut cache) = self.problems.lock() {
            if cache.len() > MAX_CACHED_PROBLEMS {
                cache.clear();
            }
            for (id, p) in fetched {
                if let Some(p) = p {
                    cache.insert(id, p);
                }
            }
            for i in &mut items {
                if let Some(p) = cache.get(&i.id) {
                    i.problem = p.clone();
                }
            }
        }
        Ok(items)
    }

    async fn state(&self, id: &str) -> Result<Value, ApiError> {
        self.fetch_state(id).await
    }

    async fn report(&self, id: &str) -> Result<String, ApiError> {
        let v = self.fetch_state(id).await?;
        let state: DebateState = serde_json::from_value(v)
            .map_err(|e| ApiError::internal(format!("unreadable state of debate {id}: {e}")))?;
        let mut md = (self.report)(None, &state);
        if state.status.is_terminal() {
            let record = self
                .record(id)
                .await
                .ok()
                .and_then(|v| serde_json::from_value::<parley_record::Record>(v).ok());
            if let Some(r) = record {
                md.push_str(&parley_record::report::section(&r));
            }
        }
        Ok(md)
    }

    async fn record(&self, id: &str) -> Result<Value, ApiError> {
        parley_cluster::status::fetch_view(
            id,
            "record",
            |body| self.request(subjects::STATUS, body),
            ApiError::internal,
        )
        .await
    }

    async fn events(&self, id: &str, after: u64) -> Result<EventStream, ApiError> {
        // 404 for an unknown debate, before a stream that would wait forever.
        let body = json!({ "debateId": id, "view": "summary" }).to_string();
        self.request(subjects::STATUS, body.into_bytes()).await?;
        // At most `max_event_streams` at once per server; the permit lives as long as the
        // stream (a closed browser tab gives it back).
        let permit = self
            .event_streams
            .clone()
            .try_acquire_owned()
            .map_err(|_| {
                ApiError::unavailable(format!(
                    "this server follows {} debates' events at once, the most it allows; \
                 try again later",
                    self.max_event_streams
                ))
            })?;
        let target = FollowTarget::Debate {
            id: id.to_string(),
            after_stream_seq: 0,
        };
        let messages = Follower::start(self.client.clone(), target)
            .await
            .map_err(api_error)?
            .into_messages();
        let mut last = after;
        let events = messages
            .map(move |m| {
                // (The follower goes on after an error, e.g. NATS restarted, from where it
                // was.)
                let _held = &permit;
                // A message holds a transition's events, each passed on as it is.
                let events: Vec<Value> =
                    parley_protocol::decode_event_message(&m.payload).unwrap_or_default();
                let fresh: Vec<WireEvent> = events
                    .iter()
                    .filter_map(|v| {
                        let seq = v.get("seq")?.as_u64()?;
                        (seq > last).then(|| WireEvent {
                            seq,
                            json: v.to_string(),
                        })
                    })
                    .collect();
                if let Some(e) = fresh.last() {
                    last = e.seq;
                }
                futures::stream::iter(fresh)
            })
            .flatten();
        Ok(Box::pin(events))
    }

    async fn retry(&self, id: &str) -> Result<Value, ApiError> {
        self.command(subjects::RETRY, id).await
    }

    async fn cancel(&self, id: &str) -> Result<Value, ApiError> {
        self.command(subjects::CANCEL, id).await
    }

    async fn answer(&self, id: &str, answers: AnswersRequest) -> Result<Value, ApiError> {
        let body = json!({ "debateId": id, "answers": answers.answers });
        self.request(ANSWER_SUBJECT, body.to_string().into_bytes())
            .await
    }

    async fn steer(
        &self,
        id: &str,
        command: parley_protocol::SteerCommand,
        by: Option<String>,
    ) -> Result<Value, ApiError> {
        let request = parley_protocol::SteerRequest::new(id, &command, by);
        let body = serde_json::to_vec(&request).map_err(|e| ApiError::internal(e.to_string()))?;
        self.request(subjects::STEER, body).await
    }

    async fn contribute(&self, id: &str, c: parley_engine::Contribute) -> Result<Value, ApiError> {
        let request = parley_protocol::ContributeRequest {
            debate_id: id.to_string(),
            text: c.text,
            agent_id: c.agent_id,
            task_id: c.task_id,
            by: c.by,
        };
        let body = serde_json::to_vec(&request).map_err(|e| ApiError::internal(e.to_string()))?;
        self.request(subjects::CONTRIBUTE, body).await
    }

    async fn feedback(&self, id: &str, request: FeedbackRequest) -> Result<Value, ApiError> {
        let body = json!({ "debateId": id, "feedback": request.feedback });
        self.request(subjects::FEEDBACK, body.to_string().into_bytes())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_items_come_from_last_events() {
        let v = json!({"debateId": "deb-20260101-000000-abc123", "seq": 9, "at": "2026-01-01T00:00:01Z",
            "status": "completed", "type": "debateCompleted", "confidence": 82.0,
            "progress": {"round": 2, "rounds": 2, "phase": "synthesis", "done": 1, "total": 1, "activeAgents": []}});
        let i = list_item(&v).unwrap();
        assert_eq!((i.round, i.rounds, i.confidence), (2, 2, Some(82.0)));
        assert_eq!(i.status, "completed");
        assert!(list_item(&json!({"status": "running"})).is_none());
    }
}
