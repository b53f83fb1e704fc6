//! The delivery against a real HTTP receiver on a loopback port: retries until taken, in
//! order, signed; the embedded outbox's cursor; refusals (a loopback address not listed as
//! private, by address or by name; a redirect, not followed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use parley_protocol::{DebateEvent, WebhookEvent, WebhookSubscription};
use parley_webhooks::deliver::AttemptError;
use parley_webhooks::{
    Endpoints, EventLog, Message, Outbox, Refused, Secret, Sender, StoreError, Subscriptions,
};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const DEBATE: &str = "deb-20260101-120000-abc123";

/// One request: (webhook-id, webhook-timestamp, webhook-signature, body).
type Request = (String, String, String, Vec<u8>);

/// A receiver that answers `fail_first` requests with 500, then `status`; records each
/// request's (webhook-id, timestamp, signature, body).
#[derive(Clone)]
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Request>>>,
    fail_first: usize,
    status: u16,
    seen: Arc<AtomicUsize>,
}

impl Receiver {
    async fn start(fail_first: usize, status: u16) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let r = Receiver {
            port: listener.local_addr().unwrap().port(),
            got: Arc::default(),
            fail_first,
            status,
            seen: Arc::default(),
        };
        let me = r.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let me = me.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let end = loop {
                        let n = sock.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                    let header = |name: &str| {
                        head.lines()
                            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                            .unwrap_or_default()
                            .trim()
                            .to_string()
                    };
                    let len: usize = header("content-length").parse().unwrap_or(0);
                    while buf.len() < end + len {
                        let n = sock.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    // Header values as sent (the signature is case-sensitive base64).
                    let raw = String::from_utf8_lossy(&buf[..end]).to_string();
                    let exact = |name: &str| {
                        raw.lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                            })
                            .unwrap_or_default()
                    };
                    me.got.lock().unwrap().push((
                        exact("webhook-id"),
                        exact("webhook-timestamp"),
                        exact("webhook-signature"),
                        buf[end..].to_vec(),
                    ));
                    let n = me.seen.fetch_add(1, Ordering::SeqCst);
                    let status = if n < me.fail_first { 500 } else { me.status };
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\nlocation: http://127.0.0.1:9/elsewhere\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let _ = sock.write_all(reply.as_bytes()).await;
                });
            }
        });
        r
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    fn ids(&self) -> Vec<String> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|g| g.0.clone())
            .collect()
    }
}

fn event(seq: u64, kind: serde_json::Value) -> DebateEvent {
    let mut v = json!({
        "debateId": DEBATE, "seq": seq, "at": "2026-01-01T12:00:00Z", "status": "running",
        "progress": {"round": 1, "rounds": 1, "phase": "proposal", "done": 0, "total": 1,
                     "activeAgents": []}
    });
    v.as_object_mut()
        .unwrap()
        .extend(kind.as_object().unwrap().clone());
    serde_json::from_value(v).unwrap()
}

fn endpoints(url: &str, private: bool, retry_for: u64) -> Endpoints {
    Endpoints::parse(&format!(
        "retry_for_secs = {retry_for}\n[[endpoint]]\nurl = \"{url}\"\nsecret = \"{SECRET}\"\nprivate_network = {private}\n"
    ))
    .unwrap()
}

/// An in-memory event log and cursor.
struct MemoryLog {
    events: Vec<DebateEvent>,
    subs: Vec<WebhookSubscription>,
    cursor: Mutex<HashMap<String, u64>>,
}

#[async_trait]
impl Subscriptions for MemoryLog {
    async fn subscriptions(&self, _id: &str) -> Result<Vec<WebhookSubscription>, StoreError> {
        Ok(self.subs.clone())
    }
}

#[async_trait]
impl EventLog for MemoryLog {
    async fn events_after(
        &self,
        _id: &str,
        after: u64,
        max: usize,
    ) -> Result<Vec<DebateEvent>, StoreError> {
        Ok(self
            .events
            .iter()
            .filter(|e| e.seq > after)
            .take(max)
            .cloned()
            .collect())
    }
    async fn cursor(&self, id: &str) -> Result<u64, StoreError> {
        Ok(self.cursor.lock().unwrap().get(id).copied().unwrap_or(0))
    }
    async fn set_cursor(&self, id: &str, seq: u64) -> Result<(), StoreError> {
        self.cursor.lock().unwrap().insert(id.to_string(), seq);
        Ok(())
    }
}

#[tokio::test]
async fn the_outbox_delivers_each_wanted_event_in_order_signed_after_failures() {
    let rx = Receiver::start(2, 200).await;
    let log = Arc::new(MemoryLog {
        events: vec![
            event(
                1,
                json!({"type": "debateStarted", "agents": ["a"], "rounds": 1}),
            ),
            event(
                2,
                json!({"type": "clarificationsRequested", "iteration": 1, "questions": []}),
            ),
            event(3, json!({"type": "roundCompleted", "round": 1})),
            event(
                4,
                json!({"type": "budgetDegraded", "step": "dropCritiques", "round": 1}),
            ),
            event(5, json!({"type": "debateCompleted", "confidence": 80.0})),
        ],
        subs: vec![WebhookSubscription {
            url: rx.url(),
            events: vec![WebhookEvent::AwaitingAnswers, WebhookEvent::Completed],
        }],
        cursor: Mutex::default(),
    });
    let stop = CancellationToken::new();
    let outbox = Outbox::new(
        log.clone(),
        Arc::new(endpoints(&rx.url(), true, 120)),
        Sender::new().unwrap(),
        stop.clone(),
    );
    outbox.notify(DEBATE);
    outbox.notify(DEBATE);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while log.cursor(DEBATE).await.unwrap() < 5 {
        assert!(std::time::Instant::now() < deadline, "got {:?}", rx.ids());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = format!("msg_{DEBATE}_2");
    let last = format!("msg_{DEBATE}_5");
    // Two refusals and the success of the first, then the last; nothing for the others.
    assert_eq!(rx.ids(), vec![first.clone(), first.clone(), first, last]);
    let secret = Secret::parse(SECRET).unwrap();
    for (id, ts, sig, body) in rx.got.lock().unwrap().iter() {
        assert!(secret.verify(id, ts.parse().unwrap(), body, sig), "{sig}");
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(v["data"]["debateId"], DEBATE);
        assert!(v["type"].as_str().unwrap().starts_with("debate."));
    }
    stop.cancel();
    outbox.stopped().await;
}

#[tokio::test]
async fn non_global_targets_are_not_called_and_redirects_are_not_followed() {
    let rx = Receiver::start(0, 200).await;
    let sender = Sender::new().unwrap();
    let message = Message::of(&event(
        7,
        json!({"type": "debateCompleted", "confidence": 1.0}),
    ))
    .unwrap();
    for url in [rx.url(), format!("http://localhost:{}/hook", rx.port)] {
        let list = endpoints(&url, false, 1);
        match sender.attempt(&list.endpoints[0], &message).await {
            // The name is refused when it resolves: the resolver's error is typed too.
            Err(AttemptError::Refused(why @ Refused::NonGlobal { ip, .. })) => {
                assert!(ip.is_loopback(), "{ip}");
                assert!(why.to_string().contains("non-global"), "{why}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    assert!(rx.ids().is_empty(), "a private address was called");
    // A listed private endpoint is called.
    let list = endpoints(&rx.url(), true, 1);
    assert!(sender.attempt(&list.endpoints[0], &message).await.is_ok());
    assert_eq!(rx.ids().len(), 1);

    let moved = Receiver::start(0, 302).await;
    let list = endpoints(&moved.url(), true, 1);
    match sender.attempt(&list.endpoints[0], &message).await {
        Err(AttemptError::Status(302)) => {}
        other => panic!("{other:?}"),
    }
    // Within a one-second window the message is given up, not retried forever.
    let stop = CancellationToken::new();
    assert_eq!(
        sender
            .deliver(&list.endpoints[0], &message, list.retry_for, &stop)
            .await,
        Some(false)
    );
}
