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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parley_llm::{ChatMessage, ChatRequest, ProviderSettings, Registry, ResponseFormat};
use parley_protocol::{rubric_schema, AgentConfig, RUBRIC_SCHEMA_NAME};
use serde_json::{json, Map, Value};
use tracing::Instrument as _;

use crate::CliError;

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
                    return Err("no result in the workers' reply".to_string());
                };
                match (&o.text, &o.error) {
                    (Some(text), _) => Ok(Reply {
                        text: text.clone(),
                        latency_ms: o.latency_ms,
                        prompt_tokens: o.prompt_tokens,
                        completion_tokens: o.completion_tokens,
                    }),
                    (None, Some(err)) => Err(err.clone()),
                    (None, None) => Err("an empty result".to_string()),
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

/// Reads and checks the evaluator config; resolves the prompt files.
pub(crate) fn load_config(
    path: &Path,
    verbose: bool,
    warn: &mut impl FnMut(String),
) -> Result<Vec<Evaluator>, CliError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read evaluator config {shown}: {e}")))?;
    let root: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::usage(format!("evaluator config {shown} is not valid JSON: {e}")))?;
    let Some(obj) = root.as_object() else {
        return Err(CliError::usage(format!(
            "evaluator config {shown}: expected a JSON object with an agents array"
        )));
    };
    let base_url = match obj.get("baseUrl") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(CliError::usage(format!(
                "evaluator config {shown}: baseUrl must be a string"
            )))
        }
    };
    for k in obj
        .keys()
        .filter(|k| !["agents", "baseUrl"].contains(&k.as_str()))
    {
        warn(format!(
            "evaluator config {shown}: unknown key {k:?} ignored"
        ));
    }
    let agents = match obj.get("agents") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        _ => {
            return Err(CliError::usage(format!(
                "invalid evaluator config {shown}: an agents array with at least one evaluator is required"
            )))
        }
    };
    let base_dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (i, a) in agents.iter().enumerate() {
        let Some(a) = a.as_object() else {
            return Err(CliError::usage(format!(
                "invalid evaluator config {shown}: agents[{i}] is not an object"
            )));
        };
        let string = |k: &str| -> Result<Option<String>, CliError> {
            match a.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(Value::Number(n)) if k == "id" => Ok(Some(n.to_string())),
                Some(other) => Err(CliError::usage(format!(
                    "invalid evaluator config {shown}: agents[{i}].{k} must be a string, not {other}"
                ))),
            }
        };
        let id = string("id")?
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                CliError::usage(format!(
                    "invalid evaluator config {shown}: agents[{i}] has no id"
                ))
            })?;
        if a.get("enabled") == Some(&Value::Bool(false)) {
            continue;
        }
        let model = string("model")?
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                CliError::usage(format!(
                    "invalid evaluator config {shown}: evaluator {id} has no model"
                ))
            })?;
        for k in a.keys() {
            let known = [
                "id",
                "name",
                "model",
                "provider",
                "timeout",
                "enabled",
                "systemPromptPath",
                "userPromptPath",
                "baseUrl",
            ];
            if k == "temperature" {
                if verbose {
                    eprintln!("[{id}] temperature ignored: evaluators run at {EVAL_TEMPERATURE}");
                }
            } else if k == "role" {
            } else if !known.contains(&k.as_str()) {
                warn(format!(
                    "evaluator config {shown}: evaluator {id}: unknown key {k:?} ignored"
                ));
            }
        }
        let timeout_ms = match a.get("timeout") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_f64() {
                Some(ms) if ms.is_finite() && ms >= 1.0 => Some(ms as u64),
                _ => {
                    return Err(CliError::usage(format!(
                        "invalid evaluator config {shown}: evaluator {id}: timeout must be a positive number of milliseconds, not {v}"
                    )))
                }
            },
        };
        let agent = AgentConfig {
            provider: string("provider")?,
            base_url: string("baseUrl")?.or_else(|| base_url.clone()),
            enabled: Some(true),
            ..AgentConfig::new(
                id.clone(),
                string("name")?.unwrap_or_else(|| id.clone()),
                "evaluator",
                model,
                EVAL_TEMPERATURE,
            )
        };
        let (system, sys_src) = prompt(
            base_dir,
            string("systemPromptPath")?,
            SYSTEM_PROMPT,
            &id,
            "system",
            warn,
        );
        let (user_template, user_src) = prompt(
            base_dir,
            string("userPromptPath")?,
            USER_PROMPT,
            &id,
            "user",
            warn,
        );
        if verbose {
            eprintln!("[{id}] systemPrompt={sys_src} userPrompt={user_src}");
        }
        out.push(Evaluator {
            agent,
            timeout_ms,
            timeout: Duration::from_millis(timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
            system,
            user_template,
        });
    }
    if out.is_empty() {
        return Err(CliError::usage(format!(
            "evaluator config {shown}: no enabled evaluator agents"
        )));
    }
    Ok(out)
}

/// The prompt at `rel` (relative to `base`) or the built-in one; returns (text, source).
fn prompt(
    base: &Path,
    rel: Option<String>,
    builtin: &str,
    id: &str,
    what: &str,
    warn: &mut impl FnMut(String),
) -> (String, String) {
    let Some(rel) = rel else {
        return (builtin.to_string(), "built-in".into());
    };
    let path = base.join(&rel);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => (t, path.display().to_string()),
        Ok(_) => {
            warn(format!(
                "evaluator {id}: {what} prompt file {} is empty; using the built-in prompt",
                path.display()
            ));
            (builtin.to_string(), "built-in".into())
        }
        Err(e) => {
            warn(format!(
                "evaluator {id}: {what} prompt file {} cannot be read ({e}); using the built-in prompt",
                path.display()
            ));
            (builtin.to_string(), "built-in".into())
        }
    }
}

/// Expands `-d` arguments: files as given (each must be a debate with a final solution),
/// directories into their `*.json` files by name (those that are not such a debate are
/// skipped with a warning).
fn load_debates(
    paths: &[PathBuf],
    warn: &mut impl FnMut(String),
) -> Result<Vec<DebateInput>, CliError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries = std::fs::read_dir(p).map_err(|e| {
                CliError::usage(format!("cannot list debate directory {}: {e}", p.display()))
            })?;
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.is_file() && f.extension().is_some_and(|x| x == "json"))
                // Decision records sit beside the debates they record.
                .filter(|f| !f.to_string_lossy().ends_with(".record.json"))
                .collect();
            files.sort();
            let before = out.len();
            for f in files {
                match load_debate(&f) {
                    Ok(d) => out.push(d),
                    Err(e) => warn(format!("skipping {}: {}", f.display(), e.message)),
                }
            }
            if out.len() == before {
                return Err(CliError::usage(format!(
                    "debate directory {} holds no saved debate with a final solution",
                    p.display()
                )));
            }
        } else {
            out.push(load_debate(p)?);
        }
    }
    Ok(out)
}

/// Reads one saved debate (Parley's DebateState or dialectic's).
pub fn load_debate(path: &Path) -> Result<DebateInput, CliError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read debate file {shown}: {e}")))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::usage(format!("debate file {shown} is not valid JSON: {e}")))?;
    let problem = v["problem"].as_str().unwrap_or("").trim().to_string();
    if problem.is_empty() {
        return Err(CliError::usage(format!(
            "invalid debate JSON {shown}: missing non-empty problem"
        )));
    }
    let solution = v["finalSolution"]["description"]
        .as_str()
        .unwrap_or("")
        .trim()
        .to_string();
    if solution.is_empty() {
        return Err(CliError::usage(format!(
            "invalid debate JSON {shown}: missing non-empty finalSolution.description"
        )));
    }
    let mut name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.to_ascii_lowercase().ends_with(".json") {
        name.truncate(name.len() - 5);
    }
    let info = requirements_info(&v, &problem);
    Ok(DebateInput {
        name,
        clarifications: clarifications_markdown(&v),
        requirements_info: serde_json::to_string_pretty(&info).unwrap_or_default(),
        problem,
        final_solution: solution,
    })
}

/// The debate's clarifications (dialectic's `clarifications[]: {agentName, role, items[]:
/// {id, question, answer}}`) as Markdown; `None.` when there are none.
fn clarifications_markdown(v: &Value) -> String {
    let mut out = String::new();
    for group in v["clarifications"].as_array().into_iter().flatten() {
        let items: Vec<&Value> = group["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["question"].is_string())
            .collect();
        if items.is_empty() {
            continue;
        }
        let who = group["agentName"]
            .as_str()
            .or(group["agentId"].as_str())
            .unwrap_or("agent");
        let role = group["role"].as_str().unwrap_or("");
        out.push_str(&format!("### Asked by {who} ({role})\n"));
        for i in items {
            let answer = match &i["answer"] {
                Value::String(s) if !s.trim().is_empty() => s.as_str(),
                _ => "NA",
            };
            out.push_str(&format!(
                "Question {}:\n```text\n{}\n```\nAnswer:\n```text\n{}\n```\n\n",
                i["id"].as_str().unwrap_or(""),
                i["question"].as_str().unwrap_or(""),
                answer
            ));
        }
    }
    if out.trim().is_empty() {
        "None.".into()
    } else {
        out.trim_end().to_string()
    }
}

/// What the debate recorded about requirements, as the evaluators' `{requirements_info}`:
/// the problem's lines that read as major requirements (by keyword), the judge's unmet
/// requirements, and each agent's latest "Requirements Coverage" section.
fn requirements_info(v: &Value, problem: &str) -> Value {
    const KEYWORDS: &[&str] = &[
        "must",
        "shall",
        "required",
        "needs to",
        "critical",
        "essential",
    ];
    let major: Vec<String> = problem
        .lines()
        .map(|l| l.trim().trim_start_matches(['-', '*', '•', ' ']).trim())
        .filter(|l| l.chars().count() >= 10)
        .filter(|l| {
            let lower = l.to_lowercase();
            KEYWORDS.iter().any(|k| lower.contains(k))
        })
        .map(str::to_string)
        .collect();
    let unmet: Vec<Value> = v["finalSolution"]["unfulfilledMajorRequirements"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // agent id -> (round, is refinement, role, section)
    let mut coverage: BTreeMap<String, (u64, bool, String, String)> = BTreeMap::new();
    for (idx, round) in v["rounds"].as_array().into_iter().flatten().enumerate() {
        let n = round["roundNumber"].as_u64().unwrap_or(idx as u64 + 1);
        for c in round["contributions"].as_array().into_iter().flatten() {
            let kind = c["type"].as_str().unwrap_or("");
            if kind != "proposal" && kind != "refinement" {
                continue;
            }
            // A carried-over proposal repeats the previous refinement.
            if c["metadata"]["carriedOver"] == Value::Bool(true) {
                continue;
            }
            let (Some(agent), Some(content)) = (c["agentId"].as_str(), c["content"].as_str())
            else {
                continue;
            };
            let Some(section) = coverage_section(content) else {
                continue;
            };
            let refinement = kind == "refinement";
            let newer = match coverage.get(agent) {
                None => true,
                Some((r, was_ref, _, _)) => n > *r || (n == *r && (refinement || !was_ref)),
            };
            if newer {
                let role = c["agentRole"].as_str().unwrap_or("").to_string();
                coverage.insert(agent.to_string(), (n, refinement, role, section));
            }
        }
    }
    let coverage: Vec<Value> = coverage
        .into_iter()
        .map(|(id, (_, _, role, text))| {
            json!({"agentId": id, "agentRole": role, "requirementsCoverage": text})
        })
        .collect();
    json!({
        "majorRequirements": major,
        "judgeUnfulfilledRequirements": unmet,
        "agentRequirementsCoverage": coverage,
    })
}

/// The text under a "Requirements Coverage" heading, up to the next `##` heading or `---`.
fn coverage_section(content: &str) -> Option<String> {
    let mut lines = content.lines();
    lines.by_ref().find(|l| {
        let t = l.trim_start();
        t.starts_with('#')
            && t.trim_start_matches('#')
                .split_whitespace()
                .collect::<String>()
                .eq_ignore_ascii_case("requirementscoverage")
    })?;
    let body: Vec<&str> = lines
        .take_while(|l| !l.starts_with("##") && !l.starts_with("---"))
        .collect();
    let text = body.join("\n").trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The user prompt: the template with the placeholders filled in.
pub fn render_user_prompt(template: &str, d: &DebateInput) -> String {
    template
        .replace("{problem}", &d.problem)
        .replace("{clarifications}", &d.clarifications)
        .replace("{requirements_info}", &d.requirements_info)
        .replace("{final_solution}", &d.final_solution)
}

/// The rubric reply's JSON schema, asked for as structured output (providers that do not
/// take it are asked without it and the reply is parsed as before); the judge workers ask
/// for the same one (`parley eval --nats-url`).
pub fn rubric_format() -> ResponseFormat {
    ResponseFormat::strict(RUBRIC_SCHEMA_NAME, rubric_schema())
}

/// The first `{` to the last `}` of `text`, as a JSON object.
pub fn parse_reply(text: &str) -> Option<Map<String, Value>> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    if end < start {
        return None;
    }
    match serde_json::from_str::<Value>(&text[start..=end]) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// A score at `path`: a finite number (or a numeric string), clamped to 1..10.
fn score_at(reply: &Value, path: &[&str], id: &str) -> Option<f64> {
    let v = path.iter().try_fold(reply, |v, k| v.get(k));
    let label = path.join(".");
    let n = match v {
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|n| n.is_finite());
    let Some(n) = n else {
        eprintln!("[{id}] missing or non-numeric score for {label}; not counted");
        return None;
    };
    let c = n.clamp(1.0, 10.0);
    if c != n {
        eprintln!("[{id}] score for {label} clamped to [1,10] from {n}");
    }
    Some(c)
}

/// Runs every evaluator on `d` from this machine, all at once.
pub(crate) async fn call_locally(
    registry: &Registry,
    evaluators: &[Evaluator],
    d: &DebateInput,
) -> Vec<Result<Reply, String>> {
    let calls = evaluators.iter().map(|e| {
        let req = ChatRequest {
            model: e.agent.model.clone(),
            messages: vec![
                ChatMessage::system(e.system.clone()),
                ChatMessage::user(render_user_prompt(&e.user_template, d)),
            ],
            temperature: EVAL_TEMPERATURE,
            max_tokens: None,
            timeout: e.timeout,
            seed: None,
            tools: Default::default(),
            response_format: Some(rubric_format()),
        };
        let span = tracing::info_span!(
            "eval.evaluator",
            evaluator.id = e.agent.id.as_str(),
            debate = d.name.as_str(),
            gen_ai.request.model = e.agent.model.as_str(),
        );
        async move {
            let provider = registry.provider_for(&e.agent)?;
            provider.complete(&req).await
        }
        .instrument(span)
    });
    futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| {
            r.map(|r| Reply {
                text: r.text,
                latency_ms: r.latency_ms,
                prompt_tokens: r.prompt_tokens,
                completion_tokens: r.completion_tokens,
            })
            .map_err(|e| e.to_string())
        })
        .collect()
}

/// Scores one debate from its evaluators' replies (in evaluator order).
pub(crate) fn score(
    evaluators: &[Evaluator],
    d: &DebateInput,
    replies: Vec<Result<Reply, String>>,
    verbose: bool,
) -> DebateResult {
    let mut sums: Vec<Vec<f64>> = vec![Vec::new(); METRICS.len()];
    let mut agents = Map::new();
    let mut skipped = Map::new();
    for (e, reply) in evaluators.iter().zip(replies) {
        let id = e.agent.id.as_str();
        let reply = match reply {
            Ok(r) => r,
            Err(err) => {
                eprintln!(
                    "[{id}] skipped on debate {}: the call failed: {err}",
                    d.name
                );
                skipped.insert(id.into(), json!(format!("call failed: {err}")));
                continue;
            }
        };
        if verbose {
            eprintln!(
                "[{id}] debate {}: {} ms, {} tokens in, {} out",
                d.name, reply.latency_ms, reply.prompt_tokens, reply.completion_tokens
            );
        }
        let Some(parsed) = parse_reply(&reply.text) else {
            eprintln!(
                "[{id}] skipped on debate {}: the reply is not a JSON object",
                d.name
            );
            skipped.insert(id.into(), json!("invalid JSON reply"));
            continue;
        };
        let parsed = Value::Object(parsed);
        for (i, (_, path)) in METRICS.iter().enumerate() {
            if let Some(s) = score_at(&parsed, path, id) {
                sums[i].push(s);
            }
        }
        agents.insert(id.into(), parsed);
    }
    if !skipped.is_empty() {
        eprintln!(
            "debate {}: {} of {} evaluators returned valid JSON (only those are averaged)",
            d.name,
            agents.len(),
            evaluators.len()
        );
    }
    DebateResult {
        name: d.name.clone(),
        averages: sums.iter().map(|s| average(s)).collect(),
        agents,
        skipped,
    }
}

/// The mean rounded to 2 decimals; `None` for no values.
fn average(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    Some((mean * 100.0).round() / 100.0)
}

/// dialectic's aggregate JSON for one debate, plus `debate` and `skipped_agents`.
fn json_of(r: &DebateResult) -> Value {
    let a = |i: usize| json!(r.averages[i]);
    json!({
        "debate": r.name,
        "evaluation": {
            "functional_completeness": {"average_score": a(0)},
            "non_functional": {
                "performance_scalability": {"average_score": a(1)},
                "security": {"average_score": a(2)},
                "maintainability_evolvability": {"average_score": a(3)},
                "regulatory_compliance": {"average_score": a(4)},
                "testability": {"average_score": a(5)},
                "requirements_fulfillment": {"average_score": a(6)},
            }
        },
        "overall_score": a(7),
        "agents": r.agents,
        "skipped_agents": r.skipped,
    })
}

/// The Markdown table: dialectic's columns; a leading `Debate` column for several debates.
fn markdown_table(results: &[DebateResult]) -> String {
    let several = results.len() > 1;
    let mut out = String::from("|");
    if several {
        out.push_str(" Debate |");
    }
    for (label, _) in METRICS {
        out.push_str(&format!(" {label} |"));
    }
    out.push_str("\n|");
    if several {
        out.push_str("--------|");
    }
    for (label, _) in METRICS {
        out.push_str(&format!("{}|", "-".repeat(label.len() + 2)));
    }
    out.push('\n');
    for r in results {
        out.push('|');
        if several {
            out.push_str(&format!(" {} |", r.name.replace('|', "\\|")));
        }
        for v in &r.averages {
            match v {
                Some(v) => out.push_str(&format!(" {v:.2} |")),
                None => out.push_str(" N/A |"),
            }
        }
        out.push('\n');
    }
    out
}

/// RFC 4180 quoting of one field.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_row(r: &DebateResult) -> String {
    let mut fields = vec![csv_field(&r.name)];
    fields.extend(
        r.averages
            .iter()
            .map(|v| v.map(|v| format!("{v:.2}")).unwrap_or_default()),
    );
    fields.join(",")
}

fn write_results(results: &[DebateResult], output: Option<&Path>) -> Result<(), CliError> {
    let write_err = |p: &Path, e: std::io::Error| {
        CliError::general(format!("cannot write {}: {e}", p.display()))
    };
    let Some(path) = output else {
        println!("{}", markdown_table(results));
        return Ok(());
    };
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| write_err(parent, e))?;
    }
    match ext.as_str() {
        "json" => {
            let value = match results {
                [one] => json_of(one),
                many => json!({"debates": many.iter().map(json_of).collect::<Vec<_>>()}),
            };
            let text = serde_json::to_string_pretty(&value)
                .map_err(|e| CliError::general(format!("cannot encode the results: {e}")))?;
            std::fs::write(path, text + "\n").map_err(|e| write_err(path, e))
        }
        "csv" => {
            use std::io::Write as _;
            let fresh = std::fs::metadata(path)
                .map(|m| m.len() == 0)
                .unwrap_or(true);
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| write_err(path, e))?;
            let mut text = String::new();
            if fresh {
                text.push_str(CSV_HEADER);
                text.push('\n');
            }
            for r in results {
                text.push_str(&csv_row(r));
                text.push('\n');
            }
            f.write_all(text.as_bytes()).map_err(|e| write_err(path, e))
        }
        _ => std::fs::write(path, markdown_table(results)).map_err(|e| write_err(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_parsing_takes_the_outer_object() {
        let m = parse_reply("Here:\n```json\n{\"a\": {\"b\": 1}}\n```").unwrap();
        assert_eq!(m["a"]["b"], 1);
        assert!(parse_reply("no json here").is_none());
        assert!(parse_reply("{not json}").is_none());
        assert!(parse_reply("} {").is_none());
    }

    #[test]
    fn scores_clamp_and_average_to_two_decimals() {
        let v = json!({"overall_summary": {"overall_score": 14}});
        assert_eq!(
            score_at(&v, &["overall_summary", "overall_score"], "e"),
            Some(10.0)
        );
        let v = json!({"overall_summary": {"overall_score": "7"}});
        assert_eq!(
            score_at(&v, &["overall_summary", "overall_score"], "e"),
            Some(7.0)
        );
        let v = json!({"overall_summary": {"overall_score": "high"}});
        assert_eq!(
            score_at(&v, &["overall_summary", "overall_score"], "e"),
            None
        );
        assert_eq!(average(&[7.0, 8.0, 8.0]), Some(7.67));
        assert_eq!(average(&[]), None);
    }

    #[test]
    fn requirements_info_reads_problem_judge_and_coverage() {
        let v = json!({
            "problem": "Build a queue.\n- It must survive a node loss\n- nice to have: UI",
            "finalSolution": {"description": "x", "unfulfilledMajorRequirements": ["HA"]},
            "rounds": [
                {"roundNumber": 1, "contributions": [
                    {"agentId": "a", "agentRole": "architect", "type": "proposal",
                     "content": "Plan\n## Requirements Coverage\n- HA: replicas\n## Next\nmore"},
                    {"agentId": "a", "agentRole": "architect", "type": "refinement",
                     "content": "### Requirements coverage\n- HA: raft\n---\nend"}
                ]}
            ]
        });
        let info = requirements_info(&v, v["problem"].as_str().unwrap());
        assert_eq!(
            info["majorRequirements"],
            json!(["It must survive a node loss"])
        );
        assert_eq!(info["judgeUnfulfilledRequirements"], json!(["HA"]));
        assert_eq!(
            info["agentRequirementsCoverage"][0]["requirementsCoverage"],
            "- HA: raft"
        );
    }

    #[test]
    fn csv_quotes_and_blank_missing_scores() {
        let r = DebateResult {
            name: "a,b".into(),
            averages: vec![Some(7.0), None, None, None, None, None, None, Some(6.5)],
            agents: Map::new(),
            skipped: Map::new(),
        };
        assert_eq!(csv_row(&r), "\"a,b\",7.00,,,,,,,6.50");
    }
}
