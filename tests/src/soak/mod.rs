//! A seeded nemesis soak over the whole HA cluster: the layout of [`layout`] on one
//! machine, the debates of [`driver`] submitted at a steady rate while the [`nemesis`]
//! injects faults on a schedule drawn from the seed, then the invariants of [`check`] on
//! the [`history`]. The short soak of the test suite (`tests/tests/soak.rs`) and the long
//! one of the bench (`cargo bench -p parley-tests --bench soak`) both call [`run`].
//!
//! A run has three phases: the faults (`minutes`, with submissions at `rate` per minute
//! throughout), the quiet (every fault healed, every process running: each accepted debate
//! must end within [`Config::bound`]), and the checks. A violation prints the seed, the
//! rule, and the history around it; the same seed draws the same schedule and the same
//! debates, so a run can be replayed (timing on a loaded machine still varies).

pub mod check;
pub mod driver;
pub mod history;
pub mod layout;
pub mod nemesis;
pub mod net;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;

use check::{Outcome, Violation};
use history::{History, What};
use layout::Layout;

/// The size of a run.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    /// How long faults are injected (and debates submitted).
    pub duration: Duration,
    /// Debates submitted per minute.
    pub rate: f64,
    /// Faults injected over `duration`.
    pub faults: usize,
    /// How long after the last fault healed every accepted debate must have ended.
    pub bound: Duration,
    /// Print the history as it happens.
    pub echo: bool,
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    /// From the first fault to the end of the quiet phase.
    pub elapsed: Duration,
    pub submitted: usize,
    pub accepted: usize,
    pub completed: usize,
    pub failed: usize,
    /// Faults that happened, by kind.
    pub faults: BTreeMap<&'static str, usize>,
    /// Provider calls answered twice (each overlapping a fault).
    pub repeated_calls: usize,
    /// Provider calls in all, and those answered 200.
    pub calls: usize,
    pub answered_calls: usize,
    /// Texts of final states traced to the provider answer they came from.
    pub provenance_checked: usize,
    /// Process exits the nemesis did not cause.
    pub unexpected_exits: usize,
    /// Task attempts failed at their deadline (the task message or its result lost; the
    /// coordinator dispatched the task again), with their debate and task.
    pub deadline_losses: Vec<String>,
    /// From the end of the last fault to the end of the last debate.
    pub last_fault_to_last_end: Duration,
    pub violations: Vec<Violation>,
    /// Every fault, heal, process exit and note of the history, one per line.
    pub fault_log: String,
    /// The history lines around each violation.
    pub violation_histories: Vec<String>,
}

impl Report {
    /// The figures, one per line (what the benchmarks page publishes).
    pub fn figures(&self) -> String {
        let kinds: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        format!(
            "seed {}\nduration {:.0} s (faults and quiet)\ndebates submitted {}, accepted {}, \
             completed {}, failed {}\nfaults {} ({})\nprovider calls {} ({} answered), repeated \
             calls {}\ntexts traced to their answer {}\nunexpected process exits {}\ntask attempts \
             lost (dispatched again at their deadline) {}\nlast fault to last debate end \
             {:.1} s\nviolations {}",
            self.seed,
            self.elapsed.as_secs_f64(),
            self.submitted,
            self.accepted,
            self.completed,
            self.failed,
            self.faults.values().sum::<usize>(),
            kinds.join(", "),
            self.calls,
            self.answered_calls,
            self.repeated_calls,
            self.provenance_checked,
            self.unexpected_exits,
            self.deadline_losses.len(),
            self.last_fault_to_last_end.as_secs_f64(),
            self.violations.len()
        )
    }

    /// The violations with the seed and their histories; empty when none.
    pub fn violations_text(&self) -> String {
        let mut s = String::new();
        for (v, h) in self.violations.iter().zip(&self.violation_histories) {
            s.push_str(&format!(
                "VIOLATION (seed {}): {}: {}\n--- history around it ---\n{h}\n\n",
                self.seed, v.rule, v.detail
            ));
        }
        s
    }
}

/// Runs a soak of `config`'s size and checks it. Errors only when the layout cannot start.
pub async fn run(config: Config) -> anyhow::Result<Report> {
    eprintln!(
        "soak: seed {} ({} faults over {:?}, {} debates/min)",
        config.seed, config.faults, config.duration, config.rate
    );
    let layout = Layout::start()
        .await
        .context("while starting the HA layout")?;
    let answers = driver::install_responder(&layout);
    layout.fake.set_latency(nemesis::NORMAL_LATENCY);
    let history = History::new(config.echo);
    history.note(format!("soak seed {}: layout ready", config.seed));

    let stop = Arc::new(AtomicBool::new(false));
    let exits = Arc::new(Mutex::new(0usize));
    let monitor = tokio::spawn(watch_exits(
        layout.clone(),
        history.clone(),
        stop.clone(),
        exits.clone(),
    ));
    let subs: driver::Submissions = Arc::new(Mutex::new(BTreeMap::new()));
    let answering = tokio::spawn(driver::answer_clarifications(
        layout.clone(),
        subs.clone(),
        history.clone(),
        stop.clone(),
    ));

    let count = ((config.duration.as_secs_f64() / 60.0) * config.rate)
        .ceil()
        .max(1.0) as usize;
    let every = Duration::from_secs_f64(60.0 / config.rate.max(0.01));
    let plan = nemesis::schedule(
        config.seed,
        config.duration,
        config.faults,
        layout.services.len(),
    );
    let began = history.now();
    let submitting = tokio::spawn(driver::submit_all(
        layout.clone(),
        config.seed,
        count,
        every,
        history.clone(),
        subs.clone(),
    ));
    let happened = nemesis::run(layout.clone(), plan, history.clone()).await;
    let _ = submitting.await;
    let last_fault = happened.iter().map(|h| h.end).max().unwrap_or(began);
    history.note("every fault healed; waiting for the debates to end");

    let ids: Vec<String> = subs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .filter_map(|s| s.id.clone())
        .collect();
    let (states, ended) = wait_for_ends(&layout, &ids, &history, last_fault + config.bound).await;
    stop.store(true, Ordering::Relaxed);
    let _ = answering.await;
    let _ = monitor.await;

    let mut outcomes: HashMap<String, Outcome> = HashMap::new();
    let mut deadline_losses = Vec::new();
    for id in &ids {
        let evs = read_events(&layout.client, id).await;
        for (_, e) in &evs {
            if let parley_protocol::EventKind::TaskFailed {
                task_id,
                attempt,
                error,
                ..
            } = &e.kind
            {
                if error.contains("within its deadline") {
                    deadline_losses.push(format!("{id} {task_id} attempt {attempt} at {}", e.at));
                }
            }
        }
        outcomes.insert(
            id.clone(),
            Outcome {
                id: id.clone(),
                state: states.get(id).cloned().unwrap_or_default(),
                ended: ended.get(id).copied(),
                last_event: evs.last().map(|(_, e)| e.kind.clone()),
                events: evs.into_iter().map(|(s, _)| s).collect(),
            },
        );
    }
    let stored = stored_specs(&layout).await;
    let requests = layout.fake.requests();
    let calls: Vec<_> = requests
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| (r.received_at, r.model.clone(), r.prompt_text()))
        .collect();
    let subs = subs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let answers = answers.lock().unwrap_or_else(|e| e.into_inner()).clone();

    let mut violations = Vec::new();
    check::ends(&subs, &outcomes, last_fault, config.bound, &mut violations);
    match &stored {
        Ok(stored) => check::no_duplicates(&subs, stored, &mut violations),
        Err(e) => history.note(format!("could not read the specs in Redis: {e:#}")),
    }
    check::events(&outcomes, &mut violations);
    let repeated_calls = check::repeats(
        &calls,
        &happened,
        |t| history.since_start(t),
        &mut violations,
    );
    check::budgets(&subs, &outcomes, &mut violations);
    let provenance_checked = check::provenance(&subs, &outcomes, &answers, &mut violations);

    let mut faults: BTreeMap<&'static str, usize> = BTreeMap::new();
    for h in &happened {
        *faults.entry(h.kind).or_default() += 1;
    }
    let last_end = ended.values().max().copied().unwrap_or(last_fault);
    let status_count = |s: &str| outcomes.values().filter(|o| o.state["status"] == s).count();
    let violation_histories = violations
        .iter()
        .map(|v| history.around(v.from, v.to, v.debate.as_deref()))
        .collect();
    if let Some(dir) = std::env::var_os("PARLEY_SOAK_LOGS") {
        save_logs(&layout, &history, std::path::Path::new(&dir));
    }
    let unexpected_exits = *exits.lock().unwrap_or_else(|e| e.into_inner());
    let fault_log = history
        .entries()
        .iter()
        .filter(|e| {
            matches!(
                e.what,
                What::Fault { .. } | What::Healed { .. } | What::Exit { .. } | What::Note(_)
            )
        })
        .map(history::line)
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Report {
        seed: config.seed,
        elapsed: history.now().saturating_sub(began),
        submitted: subs.len(),
        accepted: ids.len(),
        completed: status_count("completed"),
        failed: status_count("failed"),
        faults,
        repeated_calls,
        calls: requests.len(),
        answered_calls: calls.len(),
        provenance_checked,
        unexpected_exits,
        deadline_losses,
        last_fault_to_last_end: last_end.saturating_sub(last_fault),
        violations,
        fault_log,
        violation_histories,
    })
}

/// Restarts every service that exits without the nemesis killing it, logging the exit.
async fn watch_exits(
    layout: Arc<Layout>,
    history: History,
    stop: Arc<AtomicBool>,
    exits: Arc<Mutex<usize>>,
) {
    while !stop.load(Ordering::Relaxed) {
        for i in 0..layout.services.len() {
            let exited = match layout.services[i].try_lock() {
                Ok(mut s) => s.exited().map(|status| (s.name.clone(), status)),
                Err(_) => None,
            };
            if let Some((name, status)) = exited {
                *exits.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                let tail = layout.service(i).log_tail(5);
                history.log(What::Exit {
                    process: name,
                    status: format!("{status}; last lines:\n{tail}"),
                });
                nemesis::restart_service(&layout, i, &history).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Polls the debates until each has ended or `deadline` (since the start) passes: their
/// last states and when each was seen ending.
async fn wait_for_ends(
    layout: &Layout,
    ids: &[String],
    history: &History,
    deadline: Duration,
) -> (
    HashMap<String, serde_json::Value>,
    HashMap<String, Duration>,
) {
    let mut states = HashMap::new();
    let mut ended = HashMap::new();
    loop {
        for id in ids {
            if ended.contains_key(id) {
                continue;
            }
            if let Ok(s) = crate::try_status_on(&layout.client, id).await {
                if crate::is_done(&s) {
                    let status = s["status"].as_str().unwrap_or("?").to_string();
                    history.log(What::Ended {
                        id: id.clone(),
                        status,
                    });
                    ended.insert(id.clone(), history.now());
                }
                states.insert(id.clone(), s);
            }
        }
        if ended.len() == ids.len() || history.now() > deadline {
            return (states, ended);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Debate `id`'s events, each with where the stream holds it. The status turns final when
/// the checkpoint is written, a moment before the coordinator publishes the last events:
/// they are read again (and after a failed read) until the last one is final, for up to
/// 15 s.
async fn read_events(
    client: &async_nats::Client,
    id: &str,
) -> Vec<(check::StoredEvent, parley_protocol::DebateEvent)> {
    let until = std::time::Instant::now() + Duration::from_secs(15);
    let mut last = Vec::new();
    while std::time::Instant::now() < until {
        if let Ok(evs) = stored_events(client, &format!("parley.debates.{id}.events")).await {
            if evs.last().is_some_and(|(_, e)| e.is_final()) {
                return evs;
            }
            last = evs;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    last
}

/// The events on `filter`, in stream order, through an ordered consumer (as
/// [`crate::events`]), each with its stream sequence, time and message id.
async fn stored_events(
    client: &async_nats::Client,
    filter: &str,
) -> anyhow::Result<Vec<(check::StoredEvent, parley_protocol::DebateEvent)>> {
    use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
    use futures::StreamExt as _;
    let js = async_nats::jetstream::new(client.clone());
    let stream = js
        .get_stream(parley_protocol::subjects::EVENTS_STREAM)
        .await
        .context("while opening the events stream")?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: filter.to_string(),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .context("while creating an ordered consumer on the events stream")?;
    let mut messages = consumer
        .messages()
        .await
        .context("while reading the events stream")?;
    let mut out = Vec::new();
    while let Ok(next) = tokio::time::timeout(Duration::from_secs(3), messages.next()).await {
        let Some(msg) = next else { break };
        let msg = msg.context("while reading the events stream")?;
        let info = msg
            .info()
            .map_err(|e| anyhow::anyhow!("an event without JetStream info: {e}"))?;
        let (pending, stream_seq, published) = (
            info.pending,
            info.stream_sequence,
            info.published.to_string(),
        );
        let events: Vec<parley_protocol::DebateEvent> =
            parley_protocol::decode_event_message(&msg.payload)
                .with_context(|| format!("undecodable events on {}", msg.subject))?;
        let msg_id = msg
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Msg-Id"))
            .map(|v| v.to_string())
            .unwrap_or_default();
        for event in events {
            let kind = serde_json::to_value(&event.kind)
                .ok()
                .and_then(|v| v["type"].as_str().map(str::to_string))
                .unwrap_or_default();
            out.push((
                check::StoredEvent {
                    stream_seq,
                    seq: event.seq,
                    published: published.clone(),
                    msg_id: msg_id.clone(),
                    kind,
                },
                event,
            ));
        }
        if pending == 0 {
            break;
        }
    }
    Ok(out)
}

/// Every debate whose spec is in Redis (the master now): (id, problem).
async fn stored_specs(layout: &Layout) -> anyhow::Result<Vec<(String, String)>> {
    let redis = layout.redis.lock().await;
    let port = redis
        .master_port()
        .await
        .context("no sentinel names a master")?;
    let url = format!("redis://{}:{port}", layout.network.host());
    drop(redis);
    let mut conn = crate::redis_connection(&url).await;
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("parley:{*}:spec")
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    let mut out = Vec::new();
    for key in keys {
        let text: String = redis::cmd("GET").arg(&key).query_async(&mut conn).await?;
        let spec: serde_json::Value = serde_json::from_str(&text)?;
        let id = key
            .trim_start_matches("parley:{")
            .trim_end_matches("}:spec")
            .to_string();
        out.push((id, spec["problem"].as_str().unwrap_or_default().to_string()));
    }
    Ok(out)
}

/// Writes the history and every service's log (all its runs) into `dir`.
fn save_logs(layout: &Layout, history: &History, dir: &std::path::Path) {
    let _ = std::fs::create_dir_all(dir);
    let lines: Vec<String> = history.entries().iter().map(history::line).collect();
    let _ = std::fs::write(dir.join("history.log"), lines.join("\n"));
    for i in 0..layout.services.len() {
        let s = layout.service(i);
        let _ = std::fs::write(dir.join(format!("{}.log", s.name)), s.log_tail(usize::MAX));
    }
}
