//! `parley eval`: score saved debates with evaluator agents (dialectic's `eval`, extended).
//!
//! `parley eval -c eval-config.json -d debate.json [-d more.json | -d dir/] [-o out]`.
//! The evaluators of the config (`agents[]`: `id, name, model, provider, timeout, enabled,
//! systemPromptPath, userPromptPath`) each get the debate's problem, clarifications (if the
//! debate has any), requirements information and final solution, at temperature
//! [`EVAL_TEMPERATURE`], all in parallel, and return the rubric JSON (dialectic's field
//! names: `evaluation.functional_completeness`, `evaluation.non_functional.{performance_scalability,
//! security, maintainability_evolvability, regulatory_compliance, testability,
//! requirements_fulfillment}`, each `{score, reasoning}`, and `overall_summary.overall_score`).
//! A score is averaged over the evaluators that returned a JSON object holding it; an
//! evaluator whose call failed or whose reply is not JSON is reported on stderr and in the
//! JSON output (`skipped_agents`), and not counted.
//!
//! Output: a Markdown table on stdout (or to `-o x.md`), `-o x.json` the aggregate with every
//! evaluator's parsed reply, `-o x.csv` one row per debate appended (the header only when the
//! file is new). Several debates (`-d` repeated, or a directory of `*.json`) give one row each.
//!
//! Exit codes as dialectic's: 0 done (even when an evaluator was skipped), 2 invalid
//! arguments (missing or malformed files, no enabled evaluator, a debate without a problem or
//! final solution), 4 configuration error (a provider without its API key, no local model).
//! Prompt files resolve relative to the config file; a missing or empty one falls back to the
//! built-in prompt with a warning. User prompt placeholders (dialectic's): `{problem}`,
//! `{clarifications}`, `{final_solution}`, `{requirements_info}`.
//!
//! Parley extensions of the config: a root (or per-evaluator) `baseUrl` sends evaluators to
//! that OpenAI-compatible endpoint, whatever their provider.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parley_llm::{ProviderSettings, Registry};
use parley_protocol::AgentConfig;
use serde_json::{Map, Value};

use crate::CliError;

mod debates;
mod evaluators;
mod output;
mod scoring;

use debates::load_debates;
pub(crate) use evaluators::load_config;
use output::write_results;
pub(crate) use scoring::{call_locally, score};
pub use scoring::{parse_reply, render_user_prompt};

pub use parley_protocol::EVAL_TEMPERATURE;
/// An evaluator call's deadline when the config gives no `timeout` (dialectic's default).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The deadline of a call to the local model when the config gives none (CPU inference).
pub const LOCAL_TIMEOUT_MS: u64 = 600_000;

/// The CSV header, dialectic's (its scripts read these columns).
pub const CSV_HEADER: &str = "debate,Functional Completeness,Performance & Scalability,Security,Maintainability & Evolvability,Regulatory Compliance,Testability,Requirements Fulfillment,Overall Score";

const SYSTEM_PROMPT: &str = include_str!("eval_prompts/system.md");
const USER_PROMPT: &str = include_str!("eval_prompts/user.md");

#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// Evaluator configuration (dialectic's eval config: `agents[]`).
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config: PathBuf,
    /// Saved debates (DebateState JSON, Parley's or dialectic's): files or directories of
    /// `*.json`; repeat the flag or list several after it. One result row each.
    #[arg(short = 'd', long, value_name = "FILE|DIR", required = true, num_args = 1..)]
    pub debate: Vec<PathBuf>,
    /// `.json` = aggregate with each evaluator's reply, `.csv` = append one row per debate,
    /// anything else = the Markdown table (default: the table on stdout).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Load environment variables (API keys) from this file (default ./.env when present);
    /// variables already set are kept.
    #[arg(short = 'e', long, value_name = "FILE")]
    pub env_file: Option<PathBuf>,
    /// Provider, model and prompt source of each evaluator, and each call's latency.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// LiteLLM-format price file: the evaluator calls made from this machine are priced
    /// with it (their `costUsd`; without one only `local` is priced, at 0).
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Run the evaluator calls on a cluster's judge workers (`parley.evals.submit`) with
    /// the operator's providers and rate limits, instead of from this machine. The URL may
    /// carry `user:password@` or `token@`.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
    /// NATS credentials file (`.creds` or NKey seed) for `--nats-url`.
    #[arg(
        long,
        env = "PARLEY_NATS_CREDS",
        value_name = "FILE",
        requires = "nats_url"
    )]
    pub nats_creds: Option<PathBuf>,
    /// Inbox prefix of this client's NATS replies [default: `_INBOX_<user>` for a user in
    /// the URL, else `_INBOX`].
    #[arg(long, env = "PARLEY_NATS_INBOX_PREFIX", value_name = "PREFIX")]
    pub nats_inbox_prefix: Option<String>,
}

/// Why an evaluator has no reply to score (the debate's `skipped` says `call failed: ...`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum CallError {
    /// The call made from this machine failed (classified by the provider client).
    #[error(transparent)]
    Provider(#[from] parley_llm::LlmError),
    /// A worker reported the call's failure.
    #[error("{0}")]
    Worker(String),
    /// The workers' reply has no result for the evaluator.
    #[error("no result in the workers' reply")]
    Missing,
    /// A worker's result with neither a text nor an error.
    #[error("an empty result")]
    Empty,
}

/// One evaluator call's reply, wherever it ran.
pub(crate) struct Reply {
    pub(crate) text: String,
    pub(crate) latency_ms: u64,
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
}

/// The metrics averaged, in table order: (label, JSON path under the reply).
const METRICS: &[(&str, &[&str])] = &[
    (
        "Functional Completeness",
        &["evaluation", "functional_completeness", "score"],
    ),
    (
        "Performance & Scalability",
        &[
            "evaluation",
            "non_functional",
            "performance_scalability",
            "score",
        ],
    ),
    (
        "Security",
        &["evaluation", "non_functional", "security", "score"],
    ),
    (
        "Maintainability & Evolvability",
        &[
            "evaluation",
            "non_functional",
            "maintainability_evolvability",
            "score",
        ],
    ),
    (
        "Regulatory Compliance",
        &[
            "evaluation",
            "non_functional",
            "regulatory_compliance",
            "score",
        ],
    ),
    (
        "Testability",
        &["evaluation", "non_functional", "testability", "score"],
    ),
    (
        "Requirements Fulfillment",
        &[
            "evaluation",
            "non_functional",
            "requirements_fulfillment",
            "score",
        ],
    ),
    ("Overall Score", &["overall_summary", "overall_score"]),
];

/// One evaluator, resolved.
#[derive(Clone)]
pub(crate) struct Evaluator {
    pub(crate) agent: AgentConfig,
    /// The config's `timeout`; without one, [`DEFAULT_TIMEOUT_MS`] or, for the local
    /// model, [`LOCAL_TIMEOUT_MS`].
    timeout_ms: Option<u64>,
    pub(crate) timeout: Duration,
    system: String,
    user_template: String,
}

/// One debate's inputs to the evaluators.
#[derive(Debug, Clone)]
pub struct DebateInput {
    /// File name without `.json` (the CSV `debate` column).
    pub name: String,
    pub problem: String,
    pub final_solution: String,
    pub clarifications: String,
    pub requirements_info: String,
}

/// One debate's results.
pub(crate) struct DebateResult {
    name: String,
    /// Averages in [`METRICS`] order.
    pub(crate) averages: Vec<Option<f64>>,
    agents: Map<String, Value>,
    pub(crate) skipped: Map<String, Value>,
}

pub async fn eval(args: EvalArgs) -> Result<(), CliError> {
    let mut warn = |w: String| eprintln!("warning: {w}");
    let mut evaluators = load_config(&args.config, args.verbose, &mut warn)?;
    let debates = load_debates(&args.debate, &mut warn)?;
    if let Some(path) = &args.prices {
        let table =
            parley_protocol::PriceTable::load(path).map_err(|e| CliError::config(e.to_string()))?;
        parley_llm::set_prices(table);
    }
    if let Some(url) = &args.nats_url {
        return eval_on_cluster(&args, url, &evaluators, &debates).await;
    }
    // Locally the user is the operator: an evaluator's `baseUrl` (its own or the config's
    // top-level one) is its endpoint, given to the registry (which never reads a
    // participant's `baseUrl` itself).
    let mut settings = ProviderSettings::from_env(None);
    settings.agent_base_urls = evaluators
        .iter()
        .filter_map(|e| Some((e.agent.id.clone(), e.agent.base_url.clone()?)))
        .collect();
    let registry = Arc::new(Registry::new(settings));
    let uses_local = resolve_timeouts(&registry, &mut evaluators, args.verbose)?;
    if uses_local {
        crate::config::load_local_model(&registry)?;
    }
    let mut results = Vec::with_capacity(debates.len());
    for d in &debates {
        let replies = call_locally(&registry, &evaluators, d).await;
        results.push(score(&evaluators, d, replies, args.verbose));
    }
    write_results(&results, args.output.as_deref())
}

/// Checks each evaluator's provider and sets its deadline (the config's `timeout`, else
/// [`DEFAULT_TIMEOUT_MS`] or, on the local model, [`LOCAL_TIMEOUT_MS`]). Returns whether
/// one of them uses the local model.
pub(crate) fn resolve_timeouts(
    registry: &Registry,
    evaluators: &mut [Evaluator],
    verbose: bool,
) -> Result<bool, CliError> {
    let mut uses_local = false;
    for e in evaluators {
        let r = registry
            .resolve(&e.agent)
            .map_err(|err| CliError::config(err.to_string()))?;
        uses_local |= r.kind == "local";
        let default = if r.kind == "local" {
            LOCAL_TIMEOUT_MS
        } else {
            DEFAULT_TIMEOUT_MS
        };
        e.timeout = Duration::from_millis(e.timeout_ms.unwrap_or(default));
        if verbose {
            eprintln!(
                "[{}] provider={} model={} timeout={}ms",
                e.agent.id,
                r.kind,
                e.agent.model,
                e.timeout.as_millis()
            );
        }
    }
    Ok(uses_local)
}

/// `--nats-url`: each debate's evaluator calls go to the judge workers in one
/// `parley.evals.submit` request; scoring and output are the local path's.
async fn eval_on_cluster(
    args: &EvalArgs,
    url: &str,
    evaluators: &[Evaluator],
    debates: &[DebateInput],
) -> Result<(), CliError> {
    use parley_protocol::{EvalCall, EvalReply, EvalRequest};
    for e in evaluators.iter().filter(|e| e.agent.base_url.is_some()) {
        eprintln!(
            "warning: evaluator {}: baseUrl ignored: on a cluster the operator's configuration \
             chooses endpoints",
            e.agent.id
        );
    }
    let endpoint = parley_cluster::NatsEndpoint::client(
        url.to_string(),
        args.nats_creds.clone(),
        args.nats_inbox_prefix.as_deref(),
    )
    .map_err(|e| CliError::usage(format!("{e:#}")))?;
    let client = parley_cluster::nats::connect_client(&endpoint, Duration::from_secs(5))
        .await
        .map_err(|e| CliError::general(format!("{e:#}")))?;
    let timeout_of = |e: &Evaluator| e.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    // The workers' deadline per call, plus room for the queue and the reply.
    let wait = Duration::from_millis(evaluators.iter().map(timeout_of).max().unwrap_or(0))
        + Duration::from_secs(30);
    let mut results = Vec::with_capacity(debates.len());
    for d in debates {
        let request = EvalRequest {
            evaluators: evaluators
                .iter()
                .map(|e| EvalCall {
                    id: e.agent.id.clone(),
                    model: e.agent.model.clone(),
                    provider: e.agent.provider.clone(),
                    timeout_ms: timeout_of(e),
                    system: e.system.clone(),
                    user: render_user_prompt(&e.user_template, d),
                })
                .collect(),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|e| CliError::general(format!("encoding the request: {e}")))?;
        let reply = request_evals(&client, body, wait).await?;
        let reply: EvalReply = serde_json::from_value(reply).map_err(|e| {
            CliError::general(format!(
                "unreadable reply on {}: {e}",
                parley_protocol::subjects::EVALS_SUBMIT
            ))
        })?;
        let replies = evaluators
            .iter()
            .map(|e| {
                let Some(o) = reply.results.iter().find(|o| o.id == e.agent.id) else {
                    return Err(CallError::Missing);
                };
                match (&o.text, &o.error) {
                    (Some(text), _) => Ok(Reply {
                        text: text.clone(),
                        latency_ms: o.latency_ms,
                        prompt_tokens: o.prompt_tokens,
                        completion_tokens: o.completion_tokens,
                    }),
                    (None, Some(err)) => Err(CallError::Worker(err.clone())),
                    (None, None) => Err(CallError::Empty),
                }
            })
            .collect();
        results.push(score(evaluators, d, replies, args.verbose));
    }
    write_results(&results, args.output.as_deref())
}

/// Sends one evaluation request; a busy worker (`unavailable`) is asked again, up to 5
/// times, a second apart. An `{"error": ...}` reply becomes an error naming the problem.
async fn request_evals(
    client: &async_nats::Client,
    body: Vec<u8>,
    wait: Duration,
) -> Result<Value, CliError> {
    use parley_protocol::subjects::EVALS_SUBMIT;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let request = async_nats::Request::new()
            .payload(body.clone().into())
            .timeout(Some(wait));
        let reply = client
            .send_request(EVALS_SUBMIT.to_string(), request)
            .await
            .map_err(|e| {
                CliError::general(format!(
                    "no reply on {EVALS_SUBMIT} ({e}): is a judge worker running?"
                ))
            })?;
        let v: Value = serde_json::from_slice(&reply.payload)
            .map_err(|e| CliError::general(format!("unreadable reply on {EVALS_SUBMIT}: {e}")))?;
        let Some(err) = v.get("error") else {
            return Ok(v);
        };
        let code = err["code"].as_str().unwrap_or("error");
        let message = format!("{code}: {}", err["message"].as_str().unwrap_or(""));
        if code == "unavailable" && attempt < 5 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        return Err(
            if code.starts_with("invalid") || code == "payload_too_large" {
                CliError::usage(message)
            } else {
                CliError::general(message)
            },
        );
    }
}
