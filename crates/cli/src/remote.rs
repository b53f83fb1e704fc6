//! `parley submit / watch / status / retry / cancel`: talk to a cluster over NATS.
//!
//! The CLI reads the config and prompt files on this machine and sends their texts in the
//! DebateSpec; the services never open a path that came in a message.
//!
//! Endpoints are not sent: the cluster's operator chooses them (a `baseUrl` in the local
//! config is left out, with a note on stderr).
//!
//! `watch` and `submit --wait` replay the debate's events and stop at its final state: the
//! last event being a final one, or — when events are missing (expired from the stream, or
//! the final one never published) — a status that says the debate ended. Ctrl-C stops them
//! at once with status 130, whatever the state of NATS: the debate goes on in the cluster.
//!
//! A debate's state can be larger than one NATS message: the coordinator then answers a
//! status request with the first page of a snapshot, and the CLI fetches the other pages
//! and reassembles the state (`parley status`, `submit --wait`, `watch`).
//!
//! Clarifications: `parley answer <id>` prints the questions a debate waits on and sends
//! the answers (typed, or `--answers F`) on `parley.debates.answer`; `submit --clarify
//! --wait` does the same each time the debate asks (a `clarificationsRequested` event that
//! is the latest one), with the questions read from the debate's status.
//!
//! Credentials: `--nats-url nats://user:password@host:4222` (or `TOKEN@host`), or
//! `--nats-creds FILE` (`.creds` / NKey seed; `PARLEY_NATS_CREDS`). With the shipped NATS
//! roles the CLI is a client: it may send requests on `parley.debates.submit|status|
//! retry|cancel|answer|follow` and pull a debate's events from the consumer a coordinator
//! created for it (`parley_cluster::events`); replies reach it on its own inbox prefix
//! (`--nats-inbox-prefix`, default `_INBOX_<user>`). When the coordinator has no follower
//! to spare, `watch` and `submit --wait` follow the debate's status instead.

use std::time::Duration;

use parley_cluster::events::{FollowTarget, Follower};
use parley_protocol::subjects::ErrorCode;
use parley_protocol::{subjects, DebateEvent, DebateState, DebateStatus};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Overrides};
use crate::{clarify, progress, report, CliError, RunArgs};

#[derive(clap::Args, Debug)]
pub struct NatsArgs {
    /// NATS server of the cluster (may carry `user:password@` or `token@`). Repeat the
    /// flag, or separate URLs with commas, to name several servers of one NATS cluster:
    /// the client connects to one and fails over to the others.
    #[arg(
        long,
        env = "PARLEY_NATS_URL",
        default_value = "nats://127.0.0.1:4222",
        value_delimiter = ','
    )]
    pub nats_url: Vec<String>,
    /// NATS credentials file: a `.creds` file (JWT + seed) or an NKey seed file.
    #[arg(long, env = "PARLEY_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<std::path::PathBuf>,
    /// Inbox prefix of this client's replies (the only subjects its NATS user may receive
    /// on) [default: `_INBOX_<user>` for a user in the URL, else `_INBOX`].
    #[arg(long, env = "PARLEY_NATS_INBOX_PREFIX", value_name = "PREFIX")]
    pub nats_inbox_prefix: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub nats: NatsArgs,
    /// Follow the debate's progress and print the solution when it completes.
    #[arg(long)]
    pub wait: bool,
    /// A re-sent submission with the same key returns the same debate id.
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct DebateArgs {
    /// The debate id (deb-YYYYMMDD-HHMMSS-RAND).
    pub debate_id: String,
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// `parley answer`.
#[derive(clap::Args, Debug)]
pub struct AnswerArgs {
    #[command(flatten)]
    pub debate: DebateArgs,
    /// Answers: a JSON object mapping question ids to answers (unanswered questions: NA).
    /// Without it the questions are asked on the terminal.
    #[arg(long, value_name = "FILE")]
    pub answers: Option<std::path::PathBuf>,
}

/// `parley steer`.
#[derive(clap::Args, Debug)]
pub struct SteerArgs {
    #[command(flatten)]
    pub debate: DebateArgs,
    /// pause (no new task; the calls in flight finish), resume, guide (a note every later
    /// prompt carries), stop (synthesize now from what exists), extend (one more round).
    #[arg(value_parser = ["pause", "resume", "guide", "stop", "extend"])]
    pub command: String,
    /// The note of `guide` (at most 4000 characters; no control characters but newlines and
    /// tabs).
    pub note: Option<String>,
    /// Who is steering, recorded with the command [default: the NATS user of the inbox].
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub debate: DebateArgs,
    /// Print a summary (status, round, counts, error, sizes) instead of the whole state.
    #[arg(long)]
    pub summary: bool,
    /// Print the debate's decision record instead (once it has settled): save it and check
    /// it with `parley verify`.
    #[arg(long, conflicts_with = "summary")]
    pub record: bool,
}

pub(crate) async fn connect(n: &NatsArgs) -> Result<async_nats::Client, CliError> {
    let endpoint = parley_cluster::NatsEndpoint::client(
        n.nats_url.join(","),
        n.nats_creds.clone(),
        n.nats_inbox_prefix.as_deref(),
    )
    .map_err(|e| CliError::usage(format!("{e:#}")))?;
    parley_cluster::nats::connect_client(&endpoint, Duration::from_secs(5))
        .await
        .map_err(|e| CliError::general(format!("{e:#}")))
}

/// Sends a request; an `{"error": ...}` reply becomes an error naming the problem.
pub(crate) async fn request(
    client: &async_nats::Client,
    subject: &str,
    body: Vec<u8>,
) -> Result<Value, CliError> {
    let reply = tokio::time::timeout(
        Duration::from_secs(30),
        client.request(subject.to_string(), body.into()),
    )
    .await
    .map_err(|_| {
        CliError::general(format!(
            "no reply on {subject} within 30 s: is a coordinator running?"
        ))
    })?
    .map_err(|e| CliError::general(format!("request on {subject} failed: {e}")))?;
    let v: Value = serde_json::from_slice(&reply.payload)
        .map_err(|e| CliError::general(format!("unreadable reply on {subject}: {e}")))?;
    if let Some(err) = error_reply(&v) {
        let code = err.code.as_str();
        let e = format!("{code}: {}", err.message);
        return Err(
            if code == "not_found" || code.starts_with("invalid") || code == "payload_too_large" {
                CliError::usage(e)
            } else {
                CliError::general(e)
            },
        );
    }
    Ok(v)
}

/// What the cluster's calls used (`parley.debates.calibration`), for its estimates.
pub(crate) async fn cluster_calibration(
    client: &async_nats::Client,
) -> Result<parley_protocol::calibration::Calibration, CliError> {
    // An estimate does not wait long for what only sharpens it.
    let v = tokio::time::timeout(
        Duration::from_secs(5),
        request(client, subjects::CALIBRATION, Vec::new()),
    )
    .await
    .map_err(|_| CliError::general("no coordinator answered within 5 s"))??;
    let bytes = serde_json::to_vec(&v).map_err(|e| CliError::general(e.to_string()))?;
    parley_protocol::calibration::CalibrationReply::decode(&bytes)
        .map(|r| r.calibration())
        .map_err(|e| CliError::general(e.to_string()))
}

/// The error of an `{"error": {"code", "message"}}` reply. A debate's state or summary has
/// an `error` field too (why a failed debate failed): that is an answer, not an error.
fn error_reply(v: &Value) -> Option<parley_protocol::subjects::ErrorBody> {
    if v.as_object().is_none_or(|o| o.len() != 1) {
        return None;
    }
    serde_json::from_value::<parley_protocol::subjects::ErrorReply>(v.clone())
        .ok()
        .map(|r| r.error)
}

fn id_request(id: &str) -> Result<Vec<u8>, CliError> {
    if !parley_protocol::is_valid_debate_id(id) {
        return Err(CliError::usage(format!(
            "{id:?} is not a debate id (deb-YYYYMMDD-HHMMSS-RAND)"
        )));
    }
    Ok(json!({ "debateId": id }).to_string().into_bytes())
}

pub async fn submit(args: SubmitArgs, interrupt: &CancellationToken) -> Result<(), CliError> {
    let r = &args.run;
    let problem = config::resolve_problem(r.problem.clone(), r.problem_file.as_deref())?;
    let mut warn = |w: String| eprintln!("warning: {w}");
    let mut loaded = config::load(r.config.as_deref(), &mut warn)?;
    let endpoints = config::take_endpoints(&mut loaded);
    if !endpoints.is_empty() {
        eprintln!(
            "note: not sending the endpoints of the local config ({}): the cluster's \
             operator chooses where calls go",
            endpoints.describe()
        );
    }
    let overrides = Overrides {
        roles: r.agents.clone(),
        rounds: r.rounds,
        clarify: r.clarify,
        context_files: r
            .context
            .as_deref()
            .map(crate::context_dir::snapshot)
            .transpose()?,
    };
    let prices = if r.estimate {
        Some(config::load_prices(r.prices.as_deref(), &loaded)?)
    } else {
        None
    };
    let limits = loaded.file.providers.clone();
    let mut spec = config::build_spec(loaded, problem, &overrides, &mut warn)?;
    if let Some(prices) = prices {
        // What it would cost, from the local price file (the cluster's operator may price
        // it differently), with the reply lengths the cluster's calls taught it; nothing is
        // submitted.
        let learned = match connect(&args.nats).await {
            Ok(client) => cluster_calibration(&client).await,
            Err(e) => Err(e),
        }
        .unwrap_or_else(|e| {
            eprintln!(
                "warning: estimate without the cluster's calibration: {}",
                e.message
            );
            Default::default()
        });
        let learned = crate::run::Learned::Cluster(learned);
        return crate::run::print_estimate(&spec, &prices, &endpoints, &limits, r, learned);
    }
    spec.idempotency_key = args.idempotency_key.clone();
    // `--wait` answers the questions as they come: a file or a terminal is needed.
    let answers = clarify::Answers::choose(r.answers.as_deref())?;
    if args.wait && spec.debate.interactive_clarifications {
        answers.require()?;
    }
    let body = serde_json::to_vec(&spec).map_err(|e| CliError::general(e.to_string()))?;
    if body.len() > parley_protocol::limits::MAX_SUBMISSION_BYTES {
        let files = spec
            .context_files
            .as_ref()
            .map(|f| {
                format!(
                    " ({} bytes of it are the --context snapshot's files; point --context at a \
                     smaller directory)",
                    f.total_bytes()
                )
            })
            .unwrap_or_default();
        return Err(CliError::usage(format!(
            "the submission is {} bytes, over the cap of {} bytes for one cluster submission{files}",
            body.len(),
            parley_protocol::limits::MAX_SUBMISSION_BYTES
        )));
    }
    let client = unless_interrupted(interrupt, "interrupted", connect(&args.nats)).await?;
    let submitted = request(&client, subjects::SUBMIT, body);
    let reply = unless_interrupted(
        interrupt,
        "interrupted before the cluster confirmed the submission: `parley submit` again with the same --idempotency-key does not create a second debate",
        submitted,
    )
    .await?;
    let id = reply["debateId"]
        .as_str()
        .ok_or_else(|| CliError::general(format!("unexpected reply: {reply}")))?
        .to_string();
    if !args.wait {
        println!("{id}");
        return Ok(());
    }
    eprintln!("Submitted debate {id}");
    let stopped = format!(
        "stopped waiting; debate {id} goes on in the cluster (`parley watch {id}`, `parley status {id}`)"
    );
    let asking = spec.debate.interactive_clarifications.then_some(Asking {
        answers: &answers,
        interrupt,
        on_interrupt: &stopped,
    });
    let state = unless_interrupted(interrupt, &stopped, async {
        follow(&client, &id, asking).await?;
        fetch_state(&client, &id).await
    })
    .await?;
    finish(&spec, &state, r)
}

/// `parley answer <id>`: the questions the debate waits on, answered (typed or from a
/// file) and sent on `parley.debates.answer`.
pub async fn answer(args: AnswerArgs, interrupt: &CancellationToken) -> Result<(), CliError> {
    let id = args.debate.debate_id.as_str();
    id_request(id)?;
    let answers = clarify::Answers::choose(args.answers.as_deref())?;
    answers.require()?;
    let client = unless_interrupted(interrupt, "interrupted", connect(&args.debate.nats)).await?;
    let stopped = format!("interrupted; debate {id} still waits (`parley answer {id}`)");
    let asking = Asking {
        answers: &answers,
        interrupt,
        on_interrupt: &stopped,
    };
    let sent = unless_interrupted(
        interrupt,
        &stopped,
        send_answers(&client, id, &asking, true),
    );
    let reply = sent.await?;
    if let Some(v) = reply {
        println!("{v}");
    }
    Ok(())
}

/// How `follow` answers clarification questions.
#[derive(Clone, Copy)]
struct Asking<'a> {
    answers: &'a clarify::Answers,
    interrupt: &'a CancellationToken,
    on_interrupt: &'a str,
}

/// Reads the debate's open questions from its status, asks for the answers and sends them.
/// `None` when the debate is not waiting (someone answered meanwhile) — an error instead
/// when `must_wait`.
async fn send_answers(
    client: &async_nats::Client,
    id: &str,
    asking: &Asking<'_>,
    must_wait: bool,
) -> Result<Option<Value>, CliError> {
    let state = fetch_state(client, id).await?;
    if state.status != DebateStatus::AwaitingClarifications {
        if must_wait {
            return Err(CliError::general(format!(
                "debate {id} is {}: it is not waiting for answers to clarification questions",
                state.status.as_str()
            )));
        }
        return Ok(None);
    }
    let pending = parley_protocol::pending_clarifications(&state.clarifications);
    let given = asking
        .answers
        .collect(
            &pending,
            state.clarification_iterations,
            asking.interrupt,
            asking.on_interrupt,
        )
        .await?;
    let body = serde_json::to_vec(&parley_protocol::AnswerRequest {
        debate_id: id.to_string(),
        answers: given,
    })
    .map_err(|e| CliError::general(e.to_string()))?;
    // A takeover in progress answers `unavailable` for a few seconds: ask again.
    let mut tries = 0;
    loop {
        match request(client, subjects::ANSWER, body.clone()).await {
            Err(e) if e.message.starts_with("unavailable") && tries < 30 => {
                tries += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            r => return r.map(Some),
        }
    }
}

pub async fn watch(args: DebateArgs, interrupt: &CancellationToken) -> Result<(), CliError> {
    let id = args.debate_id.as_str();
    id_request(id)?;
    let stopped =
        format!("stopped watching; debate {id} goes on in the cluster (`parley watch {id}`)");
    let state = unless_interrupted(interrupt, &stopped, async {
        let client = connect(&args.nats).await?;
        follow(&client, id, None).await?;
        fetch_state(&client, id).await
    })
    .await?;
    eprintln!("Debate {} is {}", state.id, state.status.as_str());
    Ok(())
}

/// Runs `fut` unless the user interrupts first: then exits 130 with `message`.
async fn unless_interrupted<T>(
    interrupt: &CancellationToken,
    message: &str,
    fut: impl std::future::Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    tokio::select! {
        r = fut => r,
        _ = interrupt.cancelled() => Err(CliError::interrupted(message)),
    }
}

pub async fn status(args: StatusArgs) -> Result<(), CliError> {
    if args.record {
        return status_record(&args).await;
    }
    if let Some(v) = saved_status(&args)? {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    let client = connect(&args.debate.nats).await?;
    let id = &args.debate.debate_id;
    let v = if args.summary {
        id_request(id)?;
        let body = json!({ "debateId": id, "view": "summary" }).to_string();
        request(&client, subjects::STATUS, body.into_bytes()).await?
    } else {
        fetch_state_value(&client, id).await?
    };
    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    Ok(())
}

/// `parley status <id> --record`: the decision record saved next to `./debates/<id>.json`,
/// else the cluster's.
async fn status_record(args: &StatusArgs) -> Result<(), CliError> {
    let id = &args.debate.debate_id;
    id_request(id)?;
    let store = parley_engine::FileStore::new(parley_cli::DEBATES_DIR);
    let v = if store.exists(id) {
        let path = crate::decisions::record_path_of(&store.path_of(id));
        let record = parley_record::read(&path).map_err(|e| CliError::usage(e.to_string()))?;
        serde_json::to_value(&record).map_err(|e| CliError::general(e.to_string()))?
    } else {
        let client = connect(&args.debate.nats).await?;
        parley_cluster::status::fetch_view(
            id,
            "record",
            |body| request(&client, subjects::STATUS, body),
            CliError::general,
        )
        .await?
    };
    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    Ok(())
}

/// The status of a debate saved in `./debates/<id>.json` (an embedded run's, or one
/// dialectic wrote, converted), when that file exists: the state as Parley writes it, or
/// its summary. `None`: not saved here, ask the cluster.
fn saved_status(args: &StatusArgs) -> Result<Option<Value>, CliError> {
    let id = &args.debate.debate_id;
    id_request(id)?;
    let store = parley_engine::FileStore::new(parley_cli::DEBATES_DIR);
    if !store.exists(id) {
        return Ok(None);
    }
    let state = store
        .load_state(id)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let v = if args.summary {
        let bytes = std::fs::metadata(store.path_of(id)).map_or(0, |m| m.len() as usize);
        serde_json::to_value(parley_protocol::StatusSummary::of(&state, 0, bytes))
    } else {
        serde_json::to_value(&state)
    };
    v.map(Some)
        .map_err(|e| CliError::general(format!("cannot encode debate {id}: {e}")))
}

pub async fn command(args: DebateArgs, subject: &str) -> Result<(), CliError> {
    let client = connect(&args.nats).await?;
    let v = request(&client, subject, id_request(&args.debate_id)?).await?;
    println!("{v}");
    Ok(())
}

/// `parley steer`: checked here (the command, the note, `--by`), then sent on
/// `parley.debates.steer`; the reply (or the debate's refusal) is printed.
pub async fn steer(args: SteerArgs) -> Result<(), CliError> {
    let id = args.debate.debate_id.as_str();
    id_request(id)?;
    let command = parley_protocol::SteerCommand::parse(&args.command, args.note)
        .map_err(|e| CliError::usage(e.to_string()))?;
    if let Some(by) = &args.by {
        parley_protocol::check_by(by).map_err(|e| CliError::usage(e.to_string()))?;
    }
    let body = parley_protocol::SteerRequest::new(id, &command, args.by);
    let body = serde_json::to_vec(&body).map_err(|e| CliError::general(e.to_string()))?;
    let client = connect(&args.debate.nats).await?;
    let v = request(&client, subjects::STEER, body).await?;
    println!("{v}");
    Ok(())
}

pub(crate) async fn fetch_state(
    client: &async_nats::Client,
    id: &str,
) -> Result<DebateState, CliError> {
    let v = fetch_state_value(client, id).await?;
    serde_json::from_value(v)
        .map_err(|e| CliError::general(format!("unreadable debate state: {e}")))
}

/// The debate's state as JSON: the status reply itself, or the pages of its snapshot
/// fetched (a few at a time) and put back together.
async fn fetch_state_value(client: &async_nats::Client, id: &str) -> Result<Value, CliError> {
    id_request(id)?;
    parley_cluster::status::fetch_state(
        id,
        |body| request(client, subjects::STATUS, body),
        CliError::general,
    )
    .await
}

/// How long `follow` waits for an event before it asks whether the debate has ended.
const QUIET_CHECK: Duration = Duration::from_secs(5);

/// Whether a debate in this status has ended (until someone retries it).
fn has_ended(status: DebateStatus) -> bool {
    matches!(
        status,
        DebateStatus::Completed | DebateStatus::Failed | DebateStatus::Cancelled
    )
}

/// The debate's status from the small `summary` view of `parley.debates.status` (not the
/// full state, which may take many pages).
async fn fetch_status(client: &async_nats::Client, id: &str) -> Result<DebateStatus, CliError> {
    id_request(id)?;
    let body = json!({ "debateId": id, "view": "summary" }).to_string();
    let v = request(client, subjects::STATUS, body.into_bytes()).await?;
    serde_json::from_value(v["status"].clone())
        .map_err(|e| CliError::general(format!("unreadable status of debate {id}: {e}")))
}

/// The debate's status if it answers within [`QUIET_CHECK`] (none: unknown for now).
async fn quick_status(client: &async_nats::Client, id: &str) -> Option<DebateStatus> {
    let status = tokio::time::timeout(QUIET_CHECK, fetch_status(client, id)).await;
    status.ok()?.ok()
}

/// Replays the debate's events from the start and follows them until it reaches a final
/// state: a final event that is the latest one, or — when its events are gone — a status
/// saying it ended (checked at the start when no event is left, and after every
/// [`QUIET_CHECK`] without an event).
async fn follow(
    client: &async_nats::Client,
    id: &str,
    asking: Option<Asking<'_>>,
) -> Result<(), CliError> {
    // The coordinator creates the consumer (clients may not): see
    // `parley_cluster::events`. When it refuses (every follower it allows is open), the
    // debate's status is followed instead.
    let target = FollowTarget::Debate {
        id: id.to_string(),
        after_stream_seq: 0,
    };
    let mut follower = match Follower::start(client.clone(), target).await {
        Ok(f) => f,
        Err(e) if e.error.code == ErrorCode::Unavailable => {
            eprintln!(
                "note: cannot follow the events of debate {id} ({}); following its status \
                 instead",
                e.error.message
            );
            return follow_status(client, id, asking).await;
        }
        Err(e) => {
            return Err(CliError::general(format!(
                "cannot follow events: {}: {}",
                e.error.code.as_str(),
                e.error.message
            )))
        }
    };
    if follower.pending_at_start() == 0 {
        // No event at all: just submitted, or its events are gone.
        let status = fetch_status(client, id).await?;
        if has_ended(status) {
            eprintln!(
                "Debate {id} is {}; its events are no longer in the events stream (they expire \
                 after its retention): `parley status {id}` shows its state",
                status.as_str()
            );
            return Ok(());
        }
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<DebateEvent>();
    let display = tokio::spawn(progress::show(rx));
    let mut warned = false;
    let mut expected_seq = 1;
    loop {
        let next = tokio::time::timeout(QUIET_CHECK, follower.next()).await;
        let msg = match next {
            Ok(Some(Ok(msg))) => msg,
            Ok(Some(Err(e))) => {
                // The follower asks for a new consumer once NATS is back.
                if !warned {
                    eprintln!(
                        "warning: {}; still following (Ctrl-C to stop)",
                        e.error.message
                    );
                    warned = true;
                }
                continue;
            }
            Ok(None) => break,
            Err(_) => {
                if let Some(status) = quick_status(client, id).await {
                    if has_ended(status) {
                        eprintln!(
                            "Debate {id} is {}; its final event is not in the events stream",
                            status.as_str()
                        );
                        break;
                    }
                }
                continue;
            }
        };
        let Ok(events) = parley_protocol::decode_event_message::<DebateEvent>(&msg.payload) else {
            continue;
        };
        // A final event followed by more (a retried debate) is not the end.
        let latest_message = msg.info().map(|i| i.pending == 0).unwrap_or(true);
        let count = events.len();
        let mut ended = false;
        let mut asks = false;
        for (i, event) in events.into_iter().enumerate() {
            if expected_seq == 1 && event.seq > 1 {
                eprintln!(
                    "note: the first {} events of debate {id} are no longer in the events stream",
                    event.seq - 1
                );
            }
            expected_seq = event.seq + 1;
            ended = event.is_final() && latest_message && i + 1 == count;
            asks |= latest_message
                && matches!(
                    event.kind,
                    parley_protocol::EventKind::ClarificationsRequested { .. }
                );
            let _ = tx.send(event);
        }
        if ended {
            break;
        }
        if let (true, Some(asking)) = (asks, asking.as_ref()) {
            if let Some(reply) = send_answers(client, id, asking, false).await? {
                let left = reply["remaining"].as_u64().unwrap_or(0);
                eprintln!("Sent the answers; {left} question(s) left");
            }
        }
    }
    drop(tx);
    let _ = display.await;
    Ok(())
}

/// How often [`follow_status`] asks for the status.
const STATUS_POLL: Duration = Duration::from_secs(2);

/// Follows a debate by its status (when no event follower is available): prints each new
/// status, answers clarification questions when asked, returns when the debate ended.
async fn follow_status(
    client: &async_nats::Client,
    id: &str,
    asking: Option<Asking<'_>>,
) -> Result<(), CliError> {
    let mut last = None;
    loop {
        if let Some(status) = quick_status(client, id).await {
            if last != Some(status) {
                eprintln!("Debate {id} is {}", status.as_str());
                last = Some(status);
            }
            if has_ended(status) {
                return Ok(());
            }
            if let (DebateStatus::AwaitingClarifications, Some(asking)) = (status, asking.as_ref())
            {
                if let Some(reply) = send_answers(client, id, asking, false).await? {
                    let left = reply["remaining"].as_u64().unwrap_or(0);
                    eprintln!("Sent the answers; {left} question(s) left");
                }
            }
        }
        tokio::time::sleep(STATUS_POLL).await;
    }
}

fn finish(
    spec: &parley_protocol::DebateSpec,
    state: &DebateState,
    r: &RunArgs,
) -> Result<(), CliError> {
    if let Some(path) = &r.report {
        std::fs::write(path, report::markdown(Some(spec), state)).map_err(|e| {
            CliError::general(format!("cannot write report {}: {e}", path.display()))
        })?;
    }
    if state.status != DebateStatus::Completed {
        let why = state
            .error
            .as_ref()
            .map(|f| format!(" at {} (round {}): {}", f.node, f.round, f.message))
            .unwrap_or_default();
        return Err(CliError::provider(format!(
            "debate {} {}{why}",
            state.id,
            state.status.as_str()
        )));
    }
    let text = report::solution_text(state);
    if let Some(path) = &r.output {
        let body = if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            serde_json::to_string_pretty(state).unwrap_or_default()
        } else {
            text.clone()
        };
        std::fs::write(path, body).map_err(|e| {
            CliError::general(format!("cannot write output {}: {e}", path.display()))
        })?;
    }
    print!("{text}");
    Ok(())
}

/// Submits `spec` to the cluster and follows the debate to its end (`parley submit
/// --wait` without the clarification answers: the caller's debates ask none); returns the
/// final state. The spec's idempotency key makes a second submission of the same run (a
/// resumed `parley compare`) follow the debate already started.
pub(crate) async fn submit_and_wait(
    client: &async_nats::Client,
    spec: &parley_protocol::DebateSpec,
) -> Result<DebateState, CliError> {
    let body = serde_json::to_vec(spec).map_err(|e| CliError::general(e.to_string()))?;
    if body.len() > parley_protocol::limits::MAX_SUBMISSION_BYTES {
        return Err(CliError::usage(format!(
            "the submission is {} bytes, over the cap of {} bytes for one cluster submission",
            body.len(),
            parley_protocol::limits::MAX_SUBMISSION_BYTES
        )));
    }
    let reply = request(client, subjects::SUBMIT, body).await?;
    let id = reply["debateId"]
        .as_str()
        .ok_or_else(|| CliError::general(format!("unexpected reply: {reply}")))?
        .to_string();
    follow(client, &id, None).await?;
    fetch_state(client, &id).await
}

#[cfg(test)]
mod reply_tests {
    use super::*;

    #[test]
    fn only_an_error_reply_is_an_error_not_a_failed_debates_state() {
        let e = error_reply(&json!({"error": {"code": "not_found", "message": "no debate x"}}))
            .expect("an error reply");
        assert_eq!(e.message, "no debate x");
        let failed = json!({"id": "deb-1", "status": "failed",
            "error": {"node": "proposal", "message": "provider down"}});
        assert!(error_reply(&failed).is_none());
        let summary = json!({"status": "failed", "error": {"code": "x", "message": "y"}});
        assert!(error_reply(&summary).is_none());
        assert!(error_reply(&json!({"error": "just text"})).is_none());
    }
}
