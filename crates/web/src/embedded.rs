//! [`EmbeddedBackend`]: debates run in this process, as `parley run` runs them.
//!
//! - Same engine, same checkpoints: each debate is driven by
//!   [`parley_engine::run_debate_until`] and saved to `<dir>/<id>.json` (state and
//!   spec) after every transition, so `parley resume` / `parley retry` / `parley report`
//!   work on what the page started, and the page shows what `parley run` saved.
//! - Events: every event the engine emits is appended to `<dir>/<id>.events.jsonl` (one
//!   JSON object a line) before it is offered to event streams, so a stream resumes from any
//!   sequence number, also after the server restarted. A debate saved by `parley run` has
//!   no event log: its stream starts empty and the page shows its state.
//! - Restarts: on stop (Ctrl-C) the debates in flight get [`STOP_GRACE`] for the calls in
//!   flight and are checkpointed `running`; [`EmbeddedBackend::resume_interrupted`] (called
//!   at start) continues those that have an event log (the ones a `serve` started), repeating
//!   no completed call. A `running` debate without a driver (another process's) is listed
//!   with `live: false`; `retry` continues it.
//! - Cancel stops the debate's driver at once (calls in flight are abandoned), then applies
//!   the cancel to the checkpoint and emits `debateCancelled`.
//! - Steering (`pause`, `resume`, `guide`, `stop`, `extend`): a running driver takes the
//!   command and answers once it is applied and checkpointed; a paused debate's driver ends
//!   when its calls in flight are back, and the next command (`resume`, `stop`) starts a
//!   driver that applies it first ([`EmbeddedBackend::steer_debate`]).
//! - Human participants: a running driver takes a contribution like a steering command;
//!   without one, a running debate gets a driver that applies it first (`contribute`).
//! - Clarifications: a debate that asks questions ends its driver in
//!   `awaiting_clarifications` (checkpointed); [`EmbeddedBackend::answer_clarifications`]
//!   records answers through `parley_engine::answer_saved` and, once none is left,
//!   drives the debate on.
//!
//! - Bounds: file work (checkpoints, event logs, the directory listing) runs on the
//!   blocking thread pool, never on the async threads that serve requests; at most
//!   [`MAX_LIVE`] debates are held in memory (a request for another one while every held
//!   debate is driven or watched is refused with 503), an event stream copies at most
//!   [`STREAM_BATCH`] events at a time, and the list keeps the newest [`MAX_LISTED`]
//!   checkpoints however many the directory holds.
//!
//! One debate is driven by at most one task of this process (a per-debate lock); two
//! processes driving one checkpoint file (a `serve` and a `parley resume` of the same id)
//! is not prevented.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use chrono::Utc;
use parley_engine::{
    run_debate_controlled, ContributeCall, Controls, Effect, FileStore, Input, LoadError, Machine,
    Steer, SteerCall, SteerError, TaskRunner,
};
use parley_protocol::{new_debate_id, DebateEvent, DebateSpec, DebateState, DebateStatus};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::{
    AnswersRequest, ApiError, Backend, DebateListItem, EventStream, FeedbackRequest, FormDefaults,
    ReportFn, SpecSource, SubmitRequest, WireEvent,
};

/// How long a stopping server waits for the calls in flight before it checkpoints.
pub const STOP_GRACE: Duration = Duration::from_secs(3);
/// Debates `GET /v1/debates` lists, at most (the most recently updated).
mod contribute;
mod files;

pub const MAX_LISTED: usize = 200;
/// Debates whose events this process keeps in memory, at most: past it the idle ones are
/// forgotten, and when none is idle a request for another debate is refused (503).
pub const MAX_LIVE: usize = 256;
/// Events an event stream copies out of its debate's record at a time.
pub const STREAM_BATCH: usize = 64;

/// Gives a debate its task runner (the CLI's: the agent and judge logic over its provider
/// registry, like `parley run`).
pub trait RunnerSource: Send + Sync + 'static {
    /// The runner for `spec`; an [`ApiError`] when a participant's provider is not usable
    /// (no key, unknown provider, no local model).
    fn runner(&self, spec: &DebateSpec) -> Result<Arc<dyn TaskRunner>, ApiError>;
}

/// Debates run in this process; see the module docs.
#[derive(Clone)]
pub struct EmbeddedBackend {
    inner: Arc<Inner>,
}

struct Inner {
    store: FileStore,
    specs: Arc<dyn SpecSource>,
    runners: Arc<dyn RunnerSource>,
    report: ReportFn,
    /// Debates this process has looked at: their events and driver.
    live: Mutex<HashMap<String, Arc<Live>>>,
    /// Cancelled when the server stops: drivers checkpoint and end.
    shutdown: CancellationToken,
    /// The drivers, so a stop waits for their last checkpoint.
    tracker: TaskTracker,
    /// List entries by checkpoint file, valid while its modification time and size hold.
    briefs: Mutex<HashMap<PathBuf, (SystemTime, u64, DebateListItem)>>,
    /// The prices and cap budgets reserve with (operator settings: given to every machine,
    /// new or resumed, as `parley run` does).
    pricing: parley_engine::Pricing,
    /// Signs the decision record each finished debate gets (`<id>.record.json`).
    record_key: Option<Arc<parley_record::SigningKey>>,
    /// Told the id of a debate whose event log grew (the webhook outbox).
    events_hook: std::sync::OnceLock<EventsHook>,
}

/// What [`EmbeddedBackend::on_new_events`] calls.
pub type EventsHook = Arc<dyn Fn(&str) + Send + Sync>;

/// One debate's events and driver.
struct Live {
    /// Every event so far, in order (read from the event log at first use).
    events: Mutex<Vec<WireEvent>>,
    /// The newest sequence number; event streams wait on it.
    latest: watch::Sender<u64>,
    /// The task driving the debate, if any (held while starting or stopping one, so two
    /// requests cannot both drive it).
    driver: tokio::sync::Mutex<Option<Driver>>,
}

struct Driver {
    /// Cancelled to stop the debate at once (cancel).
    stop: CancellationToken,
    /// Steering commands for the running debate (checked and answered by the driver).
    steer: mpsc::UnboundedSender<SteerCall>,
    /// Human participants' contributions for the running debate (likewise).
    contribute: mpsc::UnboundedSender<ContributeCall>,
    handle: tokio::task::JoinHandle<()>,
}

impl Driver {
    fn running(&self) -> bool {
        !self.handle.is_finished()
    }
}

/// How long a request waits for a driver whose debate has already stopped (failed, waiting
/// for answers) to finish its last checkpoint and exit.
const SETTLE: Duration = Duration::from_secs(3);

impl Inner {
    /// Whether `driver` is still driving debate `id`. A driver whose debate's checkpoint
    /// says it stopped (anything but running or pending) is between its last event and its
    /// exit: it is given [`SETTLE`] to finish, so a retry or an answer sent right after
    /// `debateFailed` / `clarificationsRequested` is taken, not refused as "running".
    async fn still_driving(self: &Arc<Self>, id: &str, driver: &mut Option<Driver>) -> bool {
        let Some(d) = driver.as_mut() else {
            return false;
        };
        if !d.running() {
            return false;
        }
        let owned = id.to_string();
        let stopped = self
            .off_thread(move |i| i.load(&owned))
            .await
            .is_ok_and(|loaded| {
                loaded.is_ok_and(|(_, state)| {
                    !matches!(state.status, DebateStatus::Running | DebateStatus::Pending)
                })
            });
        if !stopped || tokio::time::timeout(SETTLE, &mut d.handle).await.is_err() {
            return true;
        }
        // Finished, and its handle awaited here: nobody may await it again.
        *driver = None;
        false
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EmbeddedBackend {
    /// Debates checkpointed in `dir` (created when missing at the first save). `shutdown`
    /// stops every driver; [`EmbeddedBackend::stopped`] waits for their last checkpoint.
    pub fn new(
        dir: impl Into<PathBuf>,
        specs: Arc<dyn SpecSource>,
        runners: Arc<dyn RunnerSource>,
        report: ReportFn,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store: FileStore::new(dir),
                specs,
                runners,
                report,
                live: Mutex::new(HashMap::new()),
                shutdown,
                tracker: TaskTracker::new(),
                briefs: Mutex::new(HashMap::new()),
                pricing: Default::default(),
                record_key: None,
                events_hook: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The prices and completion cap this server's debates reserve their budgets with
    /// (default: no prices, the default cap). Call right after [`EmbeddedBackend::new`].
    pub fn with_pricing(mut self, pricing: parley_engine::Pricing) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.pricing = pricing,
            None => tracing::warn!("pricing set after the backend was shared; ignored"),
        }
        self
    }

    /// Signs the decision records of the debates that finish here with `key`.
    pub fn with_record_key(mut self, key: Option<Arc<parley_record::SigningKey>>) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.record_key = key,
            None => tracing::warn!("record key set after the backend was shared; ignored"),
        }
        self
    }

    /// Calls `hook` with a debate's id each time its event log grew (once per batch,
    /// after the batch is written). Set once; a second hook is ignored.
    pub fn on_new_events(&self, hook: EventsHook) {
        if self.inner.events_hook.set(hook).is_err() {
            tracing::warn!("an events hook is already set; ignored");
        }
    }

    /// The folder of the checkpoints and event logs.
    pub fn dir(&self) -> &Path {
        self.inner.store.dir()
    }

    /// The events in debate `id`'s log, in order (reads the file: call it off the async
    /// threads).
    pub fn logged_events(&self, id: &str) -> Vec<WireEvent> {
        read_event_log(&self.inner.events_path(id))
    }

    /// The debate's webhooks, from its checkpoint (reads the file: off the async threads).
    pub fn webhooks_of(
        &self,
        id: &str,
    ) -> Result<Vec<parley_protocol::WebhookSubscription>, ApiError> {
        let (spec, _) = self.inner.load(id)?;
        Ok(spec.webhooks)
    }

    /// The debates with an event log (the ones a `serve` ran).
    pub fn logged_debates(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.inner.store.dir()) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let id = name.strip_suffix(".events.jsonl")?;
                parley_protocol::is_valid_debate_id(id).then(|| id.to_string())
            })
            .collect()
    }

    /// Continues the debates a previous `serve` left `running` (those with an event log).
    /// Returns their ids; one that cannot continue (its provider is not configured any
    /// more) is named in the log and left for `retry`.
    pub async fn resume_interrupted(&self) -> Vec<String> {
        let mut resumed = Vec::new();
        for id in self.logged_debates() {
            let Ok((_, state)) = self.inner.store.load(&id) else {
                continue;
            };
            if !matches!(state.status, DebateStatus::Running | DebateStatus::Pending) {
                continue;
            }
            match self.continue_debate(&id).await {
                Ok(_) => resumed.push(id),
                Err(e) => tracing::warn!(debate = %id, "cannot resume: {}", e.message),
            }
        }
        resumed
    }

    /// Waits until every driver has written its last checkpoint (after `shutdown`).
    pub async fn stopped(&self) {
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }

    /// Answers to a debate's clarification questions (`parley_engine::answer_saved`,
    /// the same entry point as `parley run --clarify`): checked against the checkpoint (a
    /// refusal changes nothing), recorded, and the debate driven on from there.
    pub async fn answer_clarifications(
        &self,
        id: &str,
        answers: AnswersRequest,
    ) -> Result<Value, ApiError> {
        use parley_engine::{AnswerError, AnswerSavedError};
        let inner = &self.inner;
        let live = inner.live_off_thread(id).await?;
        let mut driver = live.driver.lock().await;
        if inner.still_driving(id, &mut driver).await {
            return Err(ApiError::conflict(format!(
                "debate {id} is running, not waiting for answers"
            )));
        }
        let answers = answers
            .answers
            .into_iter()
            .map(|a| parley_protocol::Answer {
                id: a.id,
                answer: a.answer,
            })
            .collect();
        let owned = id.to_string();
        let saved = inner
            .off_thread(move |i| parley_engine::answer_saved(&i.store, &owned, answers))
            .await?;
        let (machine, events) = match saved {
            Ok(done) => done,
            Err(AnswerSavedError::Refused(e @ AnswerError::NotWaiting { .. })) => {
                return Err(ApiError::conflict(e.to_string()))
            }
            Err(AnswerSavedError::Refused(AnswerError::AlreadyAnswered(ids))) => {
                return Err(ApiError::conflict(format!(
                    "already answered: {}",
                    ids.join(", ")
                )))
            }
            Err(AnswerSavedError::Refused(e)) => return Err(ApiError::invalid(e.to_string())),
            Err(AnswerSavedError::Load(e)) => return Err(ApiError::internal(e.to_string())),
            Err(AnswerSavedError::Save(e)) => return Err(ApiError::internal(e.to_string())),
        };
        let remaining = events
            .iter()
            .find_map(|e| match e.kind {
                parley_protocol::EventKind::ClarificationsAnswered { remaining, .. } => {
                    Some(remaining)
                }
                _ => None,
            })
            .unwrap_or(0);
        inner.append_off_thread(id, &live, events).await?;
        if remaining == 0 {
            let runner = inner.runner(machine.spec()).await?;
            *driver = Some(inner.spawn_driver(live.clone(), machine, Input::Resume, runner));
        }
        Ok(json!({ "debateId": id, "accepted": "answer", "remaining": remaining }))
    }

    /// Steers debate `id`: a running driver takes the command (it checks, applies and
    /// checkpoints it before answering); without one (a paused debate whose calls all came
    /// back, one waiting for answers, one no process drives) the command is checked
    /// against the checkpoint and a running debate gets a driver that applies it first
    /// (a paused one ends again at once); a debate waiting for answers takes its guide note
    /// into the checkpoint.
    pub async fn steer_debate(
        &self,
        id: &str,
        command: parley_protocol::SteerCommand,
        by: Option<String>,
    ) -> Result<Value, ApiError> {
        let inner = &self.inner;
        let live = inner.live_off_thread(id).await?;
        let mut driver = live.driver.lock().await;
        let steer = Steer { command, by };
        let accepted =
            json!({ "debateId": id, "accepted": "steer", "command": steer.command.as_str() });
        if let Some(d) = driver.as_ref().filter(|d| d.running()) {
            let (tx, rx) = oneshot::channel();
            if d.steer.send((steer.clone(), tx)).is_ok() {
                match rx.await {
                    Ok(Ok(())) => return Ok(accepted),
                    Ok(Err(e)) => return Err(steer_error(e)),
                    // The run ended meanwhile: its last checkpoint is written.
                    Err(_) => {}
                }
            }
        }
        if let Some(d) = driver.take() {
            let _ = d.handle.await;
        }
        let owned = id.to_string();
        let (spec, state) = inner.off_thread(move |i| i.load(&owned)).await??;
        let status = state.status;
        let mut machine = Machine::from_checkpoint(spec, state);
        machine.set_pricing(inner.pricing.clone());
        machine.check_steer(&steer).map_err(steer_error)?;
        if matches!(status, DebateStatus::Running | DebateStatus::Pending) {
            let runner = inner.runner(machine.spec()).await?;
            *driver = Some(inner.spawn_driver(live.clone(), machine, Input::Steer(steer), runner));
            return Ok(accepted);
        }
        let held = live.clone();
        inner
            .off_thread(move |i| {
                let effects = machine.handle(Input::Steer(steer), Utc::now());
                i.store
                    .save_with_spec(machine.state(), machine.spec())
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                let events = effects
                    .into_iter()
                    .filter_map(|e| match e {
                        Effect::Emit(e) => Some(e),
                        _ => None,
                    })
                    .collect();
                i.append(machine.id(), &held, events);
                Ok::<_, ApiError>(())
            })
            .await??;
        Ok(accepted)
    }

    /// `retry` of a failed debate or `resume` of an interrupted one.
    async fn continue_debate(&self, id: &str) -> Result<Value, ApiError> {
        let inner = &self.inner;
        let live = inner.live_off_thread(id).await?;
        let mut driver = live.driver.lock().await;
        if inner.still_driving(id, &mut driver).await {
            return Err(ApiError::conflict(format!("debate {id} is running")));
        }
        let owned = id.to_string();
        let (spec, state) = inner.off_thread(move |i| i.load(&owned)).await??;
        let (input, what) = match state.status {
            DebateStatus::Failed => (Input::Retry, "retry"),
            DebateStatus::Running | DebateStatus::Pending => (Input::Resume, "resume"),
            other => {
                return Err(ApiError::conflict(format!(
                    "debate {id} is {}; only a failed or interrupted debate continues",
                    other.as_str()
                )))
            }
        };
        let runner = inner.runner(&spec).await?;
        let mut machine = Machine::from_checkpoint(spec, state);
        machine.set_pricing(inner.pricing.clone());
        *driver = Some(inner.spawn_driver(live.clone(), machine, input, runner));
        Ok(json!({ "debateId": id, "accepted": what }))
    }
}

impl Inner {
    /// Runs file work on the blocking thread pool.
    async fn off_thread<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Inner) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let inner = self.clone();
        tokio::task::spawn_blocking(move || work(&inner))
            .await
            .map_err(|e| ApiError::internal(format!("a file task stopped: {e}")))
    }

    /// [`Inner::live`] (which may read the event log) off the async threads.
    async fn live_off_thread(self: &Arc<Self>, id: &str) -> Result<Arc<Live>, ApiError> {
        let id = id.to_string();
        self.off_thread(move |i| i.live(&id)).await?
    }

    /// [`Inner::append`] (which writes the event log) off the async threads.
    async fn append_off_thread(
        self: &Arc<Self>,
        id: &str,
        live: &Arc<Live>,
        events: Vec<DebateEvent>,
    ) -> Result<(), ApiError> {
        let (id, live) = (id.to_string(), live.clone());
        self.off_thread(move |i| i.append(&id, &live, events)).await
    }

    fn events_path(&self, id: &str) -> PathBuf {
        self.store.dir().join(format!("{id}.events.jsonl"))
    }

    /// The runner for `spec`, off the async threads (the first use of the local model
    /// loads it, which takes a while).
    async fn runner(&self, spec: &DebateSpec) -> Result<Arc<dyn TaskRunner>, ApiError> {
        let runners = self.runners.clone();
        let spec = spec.clone();
        tokio::task::spawn_blocking(move || runners.runner(&spec))
            .await
            .map_err(|e| ApiError::internal(format!("while preparing the providers: {e}")))?
    }

    /// The debate's live record; 404 when it has no checkpoint.
    fn live(&self, id: &str) -> Result<Arc<Live>, ApiError> {
        if let Some(l) = lock(&self.live).get(id) {
            return Ok(l.clone());
        }
        if !self.store.exists(id) {
            return Err(ApiError::not_found(id));
        }
        let events = read_event_log(&self.events_path(id));
        let latest = events.last().map_or(0, |e| e.seq);
        let mut map = lock(&self.live);
        if map.len() >= MAX_LIVE && !map.contains_key(id) {
            // Forget debates nobody drives or watches (their events stay in their log).
            map.retain(|_, l| {
                Arc::strong_count(l) > 1
                    || l.latest.receiver_count() > 0
                    || l.driver
                        .try_lock()
                        .map_or(true, |d| d.as_ref().is_some_and(Driver::running))
            });
            if map.len() >= MAX_LIVE {
                return Err(ApiError::unavailable(format!(
                    "{MAX_LIVE} debates are being run or watched on this server; try again when one ends"
                )));
            }
        }
        let live = map
            .entry(id.to_string())
            .or_insert_with(|| {
                Arc::new(Live {
                    events: Mutex::new(events),
                    latest: watch::Sender::new(latest),
                    driver: tokio::sync::Mutex::new(None),
                })
            })
            .clone();
        Ok(live)
    }

    fn load(&self, id: &str) -> Result<(DebateSpec, DebateState), ApiError> {
        self.store.load(id).map_err(|e| load_error(id, e))
    }

    /// Appends events to the debate's log, then offers them to its streams. Events at or
    /// below the newest sequence number are dropped (a resumed debate re-emits nothing,
    /// but a log must never hold one number twice).
    fn append(&self, id: &str, live: &Live, new: Vec<DebateEvent>) {
        let mut events = lock(&live.events);
        let mut last = events.last().map_or(0, |e| e.seq);
        let mut lines = String::new();
        for e in new {
            if e.seq <= last {
                continue;
            }
            let Ok(json) = serde_json::to_string(&e) else {
                continue;
            };
            lines.push_str(&json);
            lines.push('\n');
            last = e.seq;
            events.push(WireEvent { seq: e.seq, json });
        }
        if lines.is_empty() {
            return;
        }
        let path = self.events_path(id);
        // Owner-only, like the checkpoint beside it.
        let written = parley_engine::store::private_file()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(lines.as_bytes()));
        if let Err(e) = written {
            // The stream still gets them; only a resume after a restart would miss them.
            tracing::warn!(debate = %id, "cannot append to {}: {e}", path.display());
        }
        drop(events);
        live.latest.send_replace(last);
        if let Some(hook) = self.events_hook.get() {
            hook(id);
        }
    }

    /// Starts a task driving `machine` from `input` until it ends, the server stops, or
    /// the returned driver is stopped.
    fn spawn_driver(
        self: &Arc<Self>,
        live: Arc<Live>,
        machine: Machine,
        input: Input,
        runner: Arc<dyn TaskRunner>,
    ) -> Driver {
        let stop = CancellationToken::new();
        let (steer, steering) = mpsc::unbounded_channel::<SteerCall>();
        let (contribute, contributions) = mpsc::unbounded_channel::<ContributeCall>();
        let inner = self.clone();
        let stopped = stop.clone();
        let id = machine.id().to_string();
        let spec = machine.spec().clone();
        let handle = self.tracker.spawn(async move {
            let (tx, mut rx) = mpsc::unbounded_channel::<DebateEvent>();
            let forward = {
                let (inner, live, id) = (inner.clone(), live.clone(), id.clone());
                tokio::spawn(async move {
                    while let Some(e) = rx.recv().await {
                        let mut batch = vec![e];
                        while let Ok(more) = rx.try_recv() {
                            batch.push(more);
                        }
                        if let Err(e) = inner.append_off_thread(&id, &live, batch).await {
                            tracing::warn!(debate = %id, "cannot record events: {}", e.message);
                        }
                    }
                })
            };
            let interrupt = inner.shutdown.child_token();
            let store = Some(inner.store.clone());
            let controls = Controls {
                steering: Some(steering),
                contributions: Some(contributions),
            };
            let run = run_debate_controlled(
                machine,
                input,
                runner,
                store,
                tx,
                &interrupt,
                STOP_GRACE,
                controls,
            );
            let outcome = tokio::select! {
                r = run => Some(r),
                _ = stopped.cancelled() => None,
            };
            let _ = forward.await;
            match outcome {
                Some(Ok(d)) if d.interrupted => {
                    tracing::info!(debate = %id, "stopped with the server; resumes at the next start")
                }
                Some(Ok(d)) => {
                    tracing::info!(debate = %id, status = d.state.status.as_str(), "debate ended");
                    if d.state.status.is_terminal() {
                        let _ = inner
                            .off_thread(move |i| i.write_record(&spec, &d.state))
                            .await;
                    }
                }
                Some(Err(e)) => tracing::error!(debate = %id, "debate stopped: {e}"),
                None => tracing::info!(debate = %id, "driver stopped"),
            }
        });
        Driver {
            stop,
            steer,
            contribute,
            handle,
        }
    }
}

/// A steering command the debate refuses, as the API's error (409 for the debate's
/// state, 400 for the command itself).
fn steer_error(e: SteerError) -> ApiError {
    if e.is_conflict() {
        ApiError::conflict(e.to_string())
    } else {
        ApiError::invalid(e.to_string())
    }
}

/// A checkpoint that cannot be loaded, as the API's error.
fn load_error(id: &str, e: LoadError) -> ApiError {
    match e {
        LoadError::BadId(_) => ApiError::invalid(e.to_string()),
        LoadError::NotFound(_) => ApiError::not_found(id),
        _ => ApiError::internal(e.to_string()),
    }
}

/// The events in a log file; a line that does not parse (a torn last write) is skipped, as
/// is one out of order.
fn read_event_log(path: &Path) -> Vec<WireEvent> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut out: Vec<WireEvent> = Vec::new();
    for line in text.lines() {
        let Some(e) = WireEvent::from_json(line.to_string()) else {
            continue;
        };
        if out.last().is_none_or(|l| e.seq > l.seq) {
            out.push(e);
        }
    }
    out
}

#[async_trait]
impl Backend for EmbeddedBackend {
    fn kind(&self) -> &'static str {
        "embedded"
    }

    fn defaults(&self) -> FormDefaults {
        self.inner.specs.defaults()
    }

    async fn submit(&self, request: SubmitRequest) -> Result<String, ApiError> {
        self.submit_owned(request, None).await
    }

    /// The owner is recorded in the checkpoint's spec and state (`owner`).
    async fn submit_owned(
        &self,
        request: SubmitRequest,
        owner: Option<&str>,
    ) -> Result<String, ApiError> {
        let inner = &self.inner;
        let mut spec = inner.specs.build(&request)?;
        spec.owner = owner.map(str::to_string);
        spec.webhooks = request.webhook_subscriptions();
        let runner = inner.runner(&spec).await?;
        let mut machine = Machine::new(new_debate_id(Utc::now()), spec, Utc::now());
        machine.set_pricing(inner.pricing.clone());
        let id = machine.id().to_string();
        // Saved before the reply, so the debate exists for every later request.
        let (machine, live) = inner
            .off_thread(move |i| {
                i.store
                    .save_with_spec(machine.state(), machine.spec())
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                let live = i.live(machine.id())?;
                Ok::<_, ApiError>((machine, live))
            })
            .await??;
        let mut driver = live.driver.lock().await;
        *driver = Some(inner.spawn_driver(live.clone(), machine, Input::Start, runner));
        Ok(id)
    }

    async fn list(&self) -> Result<Vec<DebateListItem>, ApiError> {
        self.inner.off_thread(Inner::list).await?
    }

    async fn state(&self, id: &str) -> Result<Value, ApiError> {
        let id = id.to_string();
        self.inner.off_thread(move |i| i.state(&id)).await?
    }

    async fn record(&self, id: &str) -> Result<Value, ApiError> {
        let id = id.to_string();
        let r = self.inner.off_thread(move |i| i.record(&id)).await??;
        serde_json::to_value(&r).map_err(|e| ApiError::internal(e.to_string()))
    }

    async fn report(&self, id: &str) -> Result<String, ApiError> {
        let id = id.to_string();
        self.inner
            .off_thread(move |i| match i.store.load(&id) {
                // dialectic's files have no spec: their report lists the agents that spoke.
                Err(LoadError::NoSpec(_)) => {
                    let state = i
                        .store
                        .load_state(&id)
                        .map_err(|e| ApiError::internal(e.to_string()))?;
                    Ok((i.report)(None, &state))
                }
                _ => {
                    let (spec, state) = i.load(&id)?;
                    let mut md = (i.report)(Some(&spec), &state);
                    if state.status.is_terminal() {
                        if let Ok(r) = i.record(&id) {
                            md.push_str(&parley_record::report::section(&r));
                        }
                    }
                    Ok(md)
                }
            })
            .await?
    }

    async fn events(&self, id: &str, after: u64) -> Result<EventStream, ApiError> {
        let live = self.inner.live_off_thread(id).await?;
        let rx = live.latest.subscribe();
        let stream = futures::stream::unfold(
            (live, rx, after, std::collections::VecDeque::new()),
            |(live, mut rx, mut last, mut buf)| async move {
                loop {
                    if let Some(e) = buf.pop_front() {
                        let e: WireEvent = e;
                        last = e.seq;
                        return Some((e, (live, rx, last, buf)));
                    }
                    let _ = rx.borrow_and_update();
                    {
                        // The events after `last`, STREAM_BATCH at a time (a stream that
                        // starts at 0 does not copy a whole debate at once).
                        let events = lock(&live.events);
                        let from = events.partition_point(|e| e.seq <= last);
                        buf.extend(events[from..].iter().take(STREAM_BATCH).cloned());
                    }
                    if !buf.is_empty() {
                        // More may be waiting: read them before waiting for a change.
                        continue;
                    }
                    if buf.is_empty() && rx.changed().await.is_err() {
                        return None;
                    }
                }
            },
        );
        Ok(Box::pin(stream))
    }

    async fn retry(&self, id: &str) -> Result<Value, ApiError> {
        self.continue_debate(id).await
    }

    async fn cancel(&self, id: &str) -> Result<Value, ApiError> {
        let inner = &self.inner;
        let live = inner.live_off_thread(id).await?;
        let mut driver = live.driver.lock().await;
        if let Some(d) = driver.take() {
            d.stop.cancel();
            let _ = d.handle.await;
        }
        let (owned, held) = (id.to_string(), live.clone());
        inner
            .off_thread(move |i| {
                let id = owned.as_str();
                let (spec, state) = i.load(id)?;
                if matches!(
                    state.status,
                    DebateStatus::Completed | DebateStatus::Cancelled
                ) {
                    return Err(ApiError::conflict(format!(
                        "debate {id} is already {}",
                        state.status.as_str()
                    )));
                }
                let mut machine = Machine::from_checkpoint(spec, state);
                let effects = machine.handle(Input::Cancel, Utc::now());
                i.store
                    .save_with_spec(machine.state(), machine.spec())
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                let events = effects
                    .into_iter()
                    .filter_map(|e| match e {
                        Effect::Emit(e) => Some(e),
                        _ => None,
                    })
                    .collect();
                i.append(id, &held, events);
                Ok(json!({ "debateId": id, "status": machine.state().status.as_str() }))
            })
            .await?
    }

    async fn answer(&self, id: &str, answers: AnswersRequest) -> Result<Value, ApiError> {
        self.answer_clarifications(id, answers).await
    }

    async fn steer(
        &self,
        id: &str,
        command: parley_protocol::SteerCommand,
        by: Option<String>,
    ) -> Result<Value, ApiError> {
        self.steer_debate(id, command, by).await
    }

    async fn contribute(&self, id: &str, c: parley_engine::Contribute) -> Result<Value, ApiError> {
        self.contribute_debate(id, c).await
    }

    /// Writes `userFeedback` into the debate's file (a completed debate has no driver; the
    /// driver lock is held anyway so nothing else writes the file meanwhile). A state file
    /// dialectic wrote (no spec) is saved in Parley's shape, keeping what it holds.
    async fn feedback(&self, id: &str, request: FeedbackRequest) -> Result<Value, ApiError> {
        let inner = &self.inner;
        let live = inner.live_off_thread(id).await?;
        let _driver = live.driver.lock().await;
        let owned = id.to_string();
        let verdict = request.feedback;
        inner
            .off_thread(move |i| {
                let id = owned.as_str();
                let completed = |state: &DebateState| {
                    if state.status == DebateStatus::Completed {
                        Ok(())
                    } else {
                        Err(ApiError::conflict(format!(
                            "debate {id} is {}; feedback is for a completed debate",
                            state.status.as_str()
                        )))
                    }
                };
                let saved = match i.store.load(id) {
                    Ok((spec, mut state)) => {
                        completed(&state)?;
                        state.user_feedback = Some(verdict);
                        i.store.save_with_spec(&state, &spec)
                    }
                    Err(LoadError::NoSpec(_)) => {
                        let mut state = i
                            .store
                            .load_state(id)
                            .map_err(|e| ApiError::internal(e.to_string()))?;
                        completed(&state)?;
                        state.user_feedback = Some(verdict);
                        i.store.save(&state)
                    }
                    Err(e) => return Err(load_error(id, e)),
                };
                saved.map_err(|e| ApiError::internal(e.to_string()))?;
                Ok(json!({ "debateId": id, "userFeedback": verdict }))
            })
            .await?
    }
}
