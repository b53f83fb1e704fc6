//! `parley submit / watch / status / retry / cancel`: talk to a cluster over NATS.
//!
//! The CLI reads the config and prompt files on this machine and sends their texts in the
//! DebateSpec; the services never open a path that came in a message. Endpoints are not
//! sent: the cluster's operator chooses them (a `baseUrl` in the local config is left out,
//! with a note on stderr).
//!
//! Credentials: `--nats-url nats://user:password@host:4222` (or `TOKEN@host`), or
//! `--nats-creds FILE` (`.creds` / NKey seed; `PARLEY_NATS_CREDS`). With the shipped NATS
//! roles the CLI is a `client`: it may send requests on `parley.debates.submit|status|
//! retry|cancel` and read a debate's events through an ephemeral ordered consumer whose
//! create subject names the debate's events subject.

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use parley_protocol::{subjects, DebateEvent, DebateState, DebateStatus};
use serde_json::{json, Value};

use crate::config::{self, Overrides};
use crate::{progress, report, CliError, RunArgs};

#[derive(clap::Args, Debug)]
pub struct NatsArgs {
    /// NATS server of the cluster (may carry `user:password@` or `token@`).
    #[arg(long, env = "PARLEY_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    /// NATS credentials file: a `.creds` file (JWT + seed) or an NKey seed file.
    #[arg(long, env = "PARLEY_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<std::path::PathBuf>,
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

async fn connect(n: &NatsArgs) -> Result<async_nats::Client, CliError> {
    let endpoint = parley_cluster::NatsEndpoint::new(
        n.nats_url.clone(),
        n.nats_creds.clone(),
        parley_cluster::nats::INBOX_CLIENT,
    );
    parley_cluster::nats::connect_client(&endpoint, Duration::from_secs(5))
        .await
        .map_err(|e| CliError::general(format!("{e:#}")))
}

/// Sends a request; an `{"error": ...}` reply becomes an error naming the problem.
async fn request(
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
    if let Some(err) = v.get("error") {
        let code = err["code"].as_str().unwrap_or("error");
        let message = err["message"].as_str().unwrap_or("");
        let e = format!("{code}: {message}");
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

fn id_request(id: &str) -> Result<Vec<u8>, CliError> {
    if !parley_protocol::is_valid_debate_id(id) {
        return Err(CliError::usage(format!(
            "{id:?} is not a debate id (deb-YYYYMMDD-HHMMSS-RAND)"
        )));
    }
    Ok(json!({ "debateId": id }).to_string().into_bytes())
}

pub async fn submit(args: SubmitArgs) -> Result<(), CliError> {
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
    };
    let mut spec = config::build_spec(loaded, problem, &overrides, &mut warn)?;
    spec.idempotency_key = args.idempotency_key.clone();
    let client = connect(&args.nats).await?;
    let body = serde_json::to_vec(&spec).map_err(|e| CliError::general(e.to_string()))?;
    let reply = request(&client, subjects::SUBMIT, body).await?;
    let id = reply["debateId"]
        .as_str()
        .ok_or_else(|| CliError::general(format!("unexpected reply: {reply}")))?
        .to_string();
    if !args.wait {
        println!("{id}");
        return Ok(());
    }
    eprintln!("Submitted debate {id}");
    follow(&client, &id).await?;
    let state = fetch_state(&client, &id).await?;
    finish(&spec, &state, r)
}

pub async fn watch(args: DebateArgs) -> Result<(), CliError> {
    id_request(&args.debate_id)?;
    let client = connect(&args.nats).await?;
    follow(&client, &args.debate_id).await?;
    let state = fetch_state(&client, &args.debate_id).await?;
    eprintln!("Debate {} is {}", state.id, state.status.as_str());
    Ok(())
}

pub async fn status(args: DebateArgs) -> Result<(), CliError> {
    let client = connect(&args.nats).await?;
    let v = request(&client, subjects::STATUS, id_request(&args.debate_id)?).await?;
    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    Ok(())
}

pub async fn command(args: DebateArgs, subject: &str) -> Result<(), CliError> {
    let client = connect(&args.nats).await?;
    let v = request(&client, subject, id_request(&args.debate_id)?).await?;
    println!("{v}");
    Ok(())
}

async fn fetch_state(client: &async_nats::Client, id: &str) -> Result<DebateState, CliError> {
    let v = request(client, subjects::STATUS, id_request(id)?).await?;
    serde_json::from_value(v)
        .map_err(|e| CliError::general(format!("unreadable debate state: {e}")))
}

/// Replays the debate's events from the start and follows them until the final one.
async fn follow(client: &async_nats::Client, id: &str) -> Result<(), CliError> {
    let js = jetstream::new(client.clone());
    // No stream info request (a client may not list the stream's subjects): the consumer
    // is created directly, named, so its create subject carries the events filter the
    // client role is allowed.
    let stream = js
        .get_stream_no_info(subjects::EVENTS_STREAM)
        .await
        .map_err(|e| CliError::general(format!("events stream unavailable: {e}")))?;
    let name = format!(
        "watch-{:x}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            name: Some(name),
            filter_subject: subjects::events_subject(id),
            deliver_policy: jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| CliError::general(format!("cannot follow events: {e}")))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| CliError::general(format!("cannot follow events: {e}")))?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<DebateEvent>();
    let display = tokio::spawn(progress::show(rx));
    while let Some(msg) = messages.next().await {
        let msg = msg.map_err(|e| CliError::general(format!("event stream: {e}")))?;
        let Ok(event) = serde_json::from_slice::<DebateEvent>(&msg.payload) else {
            continue;
        };
        let last = event.is_final();
        let _ = tx.send(event);
        if last {
            break;
        }
    }
    drop(tx);
    let _ = display.await;
    Ok(())
}

fn finish(
    spec: &parley_protocol::DebateSpec,
    state: &DebateState,
    r: &RunArgs,
) -> Result<(), CliError> {
    if let Some(path) = &r.report {
        std::fs::write(path, report::markdown(spec, state)).map_err(|e| {
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
