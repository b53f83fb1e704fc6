//! The embedded outbox: a debate's event log *is* its outbox, and a cursor beside it says
//! how far its webhooks have been delivered.
//!
//! [`Outbox::notify`] is called when a debate's log grows (and, at start, for every debate
//! whose log may be past its cursor). One worker per debate reads the events after the
//! cursor, in order; for each that a webhook wants it delivers the message to every target
//! (each with its retries, see [`crate::deliver`]) and only then moves the cursor past it.
//! So a kill -9 at any point loses nothing: the next start finds the log past the cursor
//! and delivers from there — at least once (a message sent just before the kill is sent
//! again, with the same `webhook-id`), and in order per debate (one worker per debate,
//! one message at a time). At most [`MAX_WORKERS`] debates deliver at once; the others
//! wait for a slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use parley_protocol::DebateEvent;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::deliver::{Message, Sender};
use crate::endpoints::Endpoints;
use crate::{StoreError, Subscriptions};

/// Debates delivering at once, at most.
pub const MAX_WORKERS: usize = 64;
/// Events read from a log at a time.
pub const BATCH: usize = 256;

/// A debate's event log and its delivery cursor.
#[async_trait]
pub trait EventLog: Subscriptions {
    /// The debate's events with a sequence number above `after`, in order, at most `max`.
    async fn events_after(
        &self,
        id: &str,
        after: u64,
        max: usize,
    ) -> Result<Vec<DebateEvent>, StoreError>;
    /// The sequence number of the last event handled (0: none).
    async fn cursor(&self, id: &str) -> Result<u64, StoreError>;
    /// Records that every event up to `seq` is handled (durably, before it returns).
    async fn set_cursor(&self, id: &str, seq: u64) -> Result<(), StoreError>;
}

/// One debate's worker.
struct Slot {
    /// Set by [`Outbox::notify`] (under the map's lock): the log grew since the worker's
    /// last read, so it must read again before it ends.
    pending: AtomicBool,
}

struct Inner {
    log: Arc<dyn EventLog>,
    endpoints: Arc<Endpoints>,
    sender: Sender,
    stop: CancellationToken,
    /// The debates with a worker.
    workers: Mutex<HashMap<String, Arc<Slot>>>,
    slots: tokio::sync::Semaphore,
    tracker: TaskTracker,
}

/// The embedded outbox; see the module docs. Cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    inner: Arc<Inner>,
}

impl Outbox {
    pub fn new(
        log: Arc<dyn EventLog>,
        endpoints: Arc<Endpoints>,
        sender: Sender,
        stop: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                log,
                endpoints,
                sender,
                stop,
                workers: Mutex::new(HashMap::new()),
                slots: tokio::sync::Semaphore::new(MAX_WORKERS),
                tracker: TaskTracker::new(),
            }),
        }
    }

    /// Debate `id`'s log grew: its worker reads it again (one is started when none runs).
    pub fn notify(&self, id: &str) {
        if self.inner.stop.is_cancelled() {
            return;
        }
        let mut workers = lock(&self.inner.workers);
        if let Some(slot) = workers.get(id) {
            slot.pending.store(true, Ordering::SeqCst);
            return;
        }
        let slot = Arc::new(Slot {
            pending: AtomicBool::new(false),
        });
        workers.insert(id.to_string(), slot.clone());
        drop(workers);
        let inner = self.inner.clone();
        let id = id.to_string();
        self.inner.tracker.spawn(async move {
            work(&inner, &id, &slot).await;
            // Whatever happened, the debate has no worker any more.
            let mut workers = lock(&inner.workers);
            if workers.get(&id).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                workers.remove(&id);
            }
        });
    }

    /// Waits for the workers to end (after the stop token was cancelled).
    pub async fn stopped(&self) {
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Delivers debate `id`'s events past its cursor until the log has no more.
async fn work(inner: &Inner, id: &str, slot: &Slot) {
    let Ok(_permit) = inner.slots.acquire().await else {
        return;
    };
    let subs = match inner.log.subscriptions(id).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(debate = %id, "webhooks: cannot read the debate's subscriptions: {e}");
            return;
        }
    };
    let mut cursor = match inner.log.cursor(id).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(debate = %id, "webhooks: cannot read the outbox cursor: {e}");
            return;
        }
    };
    loop {
        slot.pending.store(false, Ordering::SeqCst);
        let events = match inner.log.events_after(id, cursor, BATCH).await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(debate = %id, "webhooks: cannot read the event log: {e}");
                return;
            }
        };
        if events.is_empty() {
            // Ends unless the log grew meanwhile: checked, and the worker's entry removed,
            // under the lock `notify` takes, so a later `notify` starts a new worker.
            let mut workers = lock(&inner.workers);
            if !slot.pending.load(Ordering::SeqCst) {
                workers.remove(id);
                return;
            }
            continue;
        }
        let mut moved = false;
        for event in events {
            if event.seq <= cursor {
                continue;
            }
            if let Some(message) = Message::of(&event) {
                let targets = inner.endpoints.targets(&subs, message.kind);
                if !targets.is_empty() {
                    let sent = futures::future::join_all(targets.iter().map(|t| {
                        inner
                            .sender
                            .deliver(t, &message, inner.endpoints.retry_for, &inner.stop)
                    }))
                    .await;
                    if sent.iter().any(Option::is_none) {
                        // Stopping: the message stays in the outbox for the next start.
                        return;
                    }
                    cursor = event.seq;
                    if let Err(e) = inner.log.set_cursor(id, cursor).await {
                        tracing::warn!(debate = %id, "webhooks: cannot move the outbox cursor: {e}");
                        return;
                    }
                    moved = false;
                    continue;
                }
            }
            cursor = event.seq;
            moved = true;
        }
        if moved {
            if let Err(e) = inner.log.set_cursor(id, cursor).await {
                tracing::warn!(debate = %id, "webhooks: cannot move the outbox cursor: {e}");
                return;
            }
        }
    }
}
