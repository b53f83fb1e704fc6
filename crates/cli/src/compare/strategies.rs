//! The strategies made ready and run: single calls, self-consistency samples, debates.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use parley_cli::EmbeddedRunner;
use parley_engine::{run_debate_until, FileStore, Input, Machine};
use parley_llm::{ChatMessage, ChatRequest, Registry, ResponseFormat};
use parley_protocol::{AgentConfig, DebateSpec, DebateState, DebateStatus};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::file::{ModelRef, StrategySpec};
use super::problems::Problem;
use super::records::{digest, OutDir, RunRecord};
use super::{CompareArgs, ANSWER_SYSTEM_PROMPT, DEFAULT_CALL_TIMEOUT_MS, LOCAL_CALL_TIMEOUT_MS};
use crate::config::{self, Overrides};
use crate::eval;
use crate::CliError;

/// Best-of-N: the judge picks the best of the samples.
pub(super) const SELECT_SYSTEM_PROMPT: &str =
    "You are a strict reviewer of software designs. You are \
given a problem and several candidate answers, numbered from 1. Pick the single best \
answer: the one that meets the most requirements with a sound, concrete design. Reply with \
JSON only: {\"best\": <number>, \"reason\": \"<one sentence>\"}.";

pub(super) fn select_format(n: usize) -> ResponseFormat {
    ResponseFormat::strict(
        "best_sample",
        json!({
            "type": "object",
            "properties": {
                "best": {"type": "integer", "minimum": 1, "maximum": n},
                "reason": {"type": "string"}
            },
            "required": ["best", "reason"],
            "additionalProperties": false
        }),
    )
}

/// The judge's pick, 0-based, from `{"best": n}` (a number or numeric string, 1..=n).
pub(super) fn parse_selection(text: &str, n: usize) -> Option<usize> {
    let reply = eval::parse_reply(text)?;
    let best = match reply.get("best")? {
        Value::Number(x) => x.as_u64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    (1..=n as u64).contains(&best).then(|| best as usize - 1)
}

/// A strategy made ready to run: its agents and the registry they call through.
pub(super) enum Prepared {
    Calls {
        registry: Arc<Registry>,
        /// Answering agent (single, samples).
        agent: Box<AgentConfig>,
        /// Self-consistency: (samples, picking agent).
        select: Option<(u32, Box<AgentConfig>)>,
        system: String,
        timeout: Duration,
    },
    Debate {
        /// The spec for a problem (its `problem` is replaced per run).
        template: Box<DebateSpec>,
        registry: Option<Arc<Registry>>,
    },
}

pub(super) fn agent_for(
    id: &str,
    model: &str,
    provider: Option<&String>,
    temperature: f64,
) -> AgentConfig {
    AgentConfig {
        provider: provider.cloned(),
        ..AgentConfig::new(id, id, "architect", model, temperature)
    }
}

pub(super) fn prepare(
    spec: &StrategySpec,
    base_dir: &Path,
    registry: &Arc<Registry>,
    args: &CompareArgs,
    uses_local: &mut bool,
) -> Result<Prepared, CliError> {
    let mut check = |a: &AgentConfig| -> Result<Duration, CliError> {
        let r = registry
            .resolve(a)
            .map_err(|e| CliError::config(format!("strategy {}: {e}", spec.name())))?;
        *uses_local |= r.kind == "local";
        Ok(Duration::from_millis(if r.kind == "local" {
            LOCAL_CALL_TIMEOUT_MS
        } else {
            DEFAULT_CALL_TIMEOUT_MS
        }))
    };
    match spec {
        StrategySpec::Single(s) => {
            let agent = agent_for(
                &s.name,
                &s.model,
                s.provider.as_ref(),
                s.temperature.unwrap_or(0.2),
            );
            let default = check(&agent)?;
            Ok(Prepared::Calls {
                registry: registry.clone(),
                agent: Box::new(agent),
                select: None,
                system: s
                    .system_prompt
                    .clone()
                    .unwrap_or_else(|| ANSWER_SYSTEM_PROMPT.into()),
                timeout: s.timeout_ms.map(Duration::from_millis).unwrap_or(default),
            })
        }
        StrategySpec::SelfConsistency(s) => {
            let agent = agent_for(
                &s.name,
                &s.model,
                s.provider.as_ref(),
                s.temperature.unwrap_or(0.8),
            );
            let default = check(&agent)?;
            let judge_ref = s.judge.clone().unwrap_or(ModelRef {
                model: s.model.clone(),
                provider: s.provider.clone(),
            });
            let judge = agent_for(
                &format!("{}-select", s.name),
                &judge_ref.model,
                judge_ref.provider.as_ref(),
                eval::EVAL_TEMPERATURE,
            );
            let judge_default = check(&judge)?;
            Ok(Prepared::Calls {
                registry: registry.clone(),
                agent: Box::new(agent),
                select: Some((s.samples, Box::new(judge))),
                system: s
                    .system_prompt
                    .clone()
                    .unwrap_or_else(|| ANSWER_SYSTEM_PROMPT.into()),
                timeout: s
                    .timeout_ms
                    .map(Duration::from_millis)
                    .unwrap_or(default.max(judge_default)),
            })
        }
        StrategySpec::Debate(d) => {
            let path = base_dir.join(&d.config);
            let mut warn = |w: String| eprintln!("warning: strategy {}: {w}", d.name);
            let (loaded, endpoints, limits) = config::load_as_operator(Some(&path), &mut warn)?;
            let overrides = Overrides {
                rounds: d.rounds,
                ..Default::default()
            };
            // The problem is set per run; a placeholder lets the spec validate now.
            let mut spec =
                config::build_spec(loaded, "(set per problem)".into(), &overrides, &mut warn)?;
            // Nobody answers questions in a comparison.
            spec.debate.interactive_clarifications = false;
            if !args.nats_url.is_empty() {
                return Ok(Prepared::Debate {
                    template: Box::new(spec),
                    registry: None,
                });
            }
            let registry = crate::run::registry_for(&spec, endpoints, limits)?;
            Ok(Prepared::Debate {
                template: Box::new(spec),
                registry: Some(registry),
            })
        }
    }
}

/// One call, its usage and cost.
pub(super) struct Call {
    pub(super) text: String,
    pub(super) prompt_tokens: u64,
    pub(super) completion_tokens: u64,
    pub(super) cost: Option<f64>,
}

pub(super) async fn call(
    registry: &Registry,
    agent: &AgentConfig,
    req: ChatRequest,
) -> Result<Call, CliError> {
    let kind = registry
        .resolve(agent)
        .map_err(|e| CliError::config(e.to_string()))?
        .kind;
    let provider = registry
        .provider_for(agent)
        .map_err(|e| CliError::config(e.to_string()))?;
    let r = provider
        .complete(&req)
        .await
        .map_err(|e| CliError::provider(format!("{} ({}): {e}", agent.id, agent.model)))?;
    let cost = parley_llm::prices().cost(
        kind,
        &agent.model,
        r.prompt_tokens,
        r.cached_prompt_tokens,
        r.completion_tokens,
    );
    Ok(Call {
        text: r.text,
        prompt_tokens: r.prompt_tokens,
        completion_tokens: r.completion_tokens,
        cost,
    })
}

pub(super) fn request(
    agent: &AgentConfig,
    system: &str,
    user: String,
    timeout: Duration,
    seed: Option<u64>,
    format: Option<ResponseFormat>,
) -> ChatRequest {
    ChatRequest {
        model: agent.model.clone(),
        messages: vec![
            ChatMessage::system(system.to_string()),
            ChatMessage::user(user),
        ],
        temperature: agent.temperature,
        max_tokens: None,
        timeout,
        seed,
        tools: Default::default(),
        response_format: format,
    }
}

/// Runs one strategy on one problem.
pub(super) async fn execute(
    spec: &StrategySpec,
    prepared: &Prepared,
    problem: &Problem,
    out: &OutDir,
    cluster: Option<&async_nats::Client>,
    interrupt: &CancellationToken,
) -> Result<RunRecord, CliError> {
    let mut record = RunRecord {
        problem: problem.id.clone(),
        strategy: spec.name().to_string(),
        kind: spec.kind().to_string(),
        answer: String::new(),
        calls: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        cost_usd: Some(0.0),
        wall_ms: 0,
        models: Vec::new(),
        debate_id: None,
        selection: None,
        input_digest: String::new(),
    };
    let add = |r: &mut RunRecord, c: &Call| {
        r.calls += 1;
        r.prompt_tokens += c.prompt_tokens;
        r.completion_tokens += c.completion_tokens;
        r.cost_usd = parley_protocol::add_cost(r.cost_usd, c.cost);
    };
    match prepared {
        Prepared::Calls {
            registry,
            agent,
            select,
            system,
            timeout,
        } => {
            record.models.push(agent.model.clone());
            let Some((samples, judge)) = select else {
                let c = call(
                    registry,
                    agent,
                    request(agent, system, problem.text.clone(), *timeout, None, None),
                )
                .await?;
                add(&mut record, &c);
                record.answer = c.text;
                return Ok(record);
            };
            let calls = (0..*samples).map(|i| {
                call(
                    registry,
                    agent,
                    request(
                        agent,
                        system,
                        problem.text.clone(),
                        *timeout,
                        Some(u64::from(i) + 1),
                        None,
                    ),
                )
            });
            let answers: Vec<Call> = futures::future::join_all(calls)
                .await
                .into_iter()
                .collect::<Result<_, _>>()?;
            for c in &answers {
                add(&mut record, c);
            }
            if !record.models.contains(&judge.model) {
                record.models.push(judge.model.clone());
            }
            let mut user = format!("# Problem\n\n{}\n\n", problem.text);
            for (i, c) in answers.iter().enumerate() {
                user.push_str(&format!("# Answer {}\n\n{}\n\n", i + 1, c.text.trim()));
            }
            user.push_str(&format!(
                "Which answer (1 to {}) is best? Reply with the JSON object only.",
                answers.len()
            ));
            let picked = call(
                registry,
                judge,
                request(
                    judge,
                    SELECT_SYSTEM_PROMPT,
                    user,
                    *timeout,
                    None,
                    Some(select_format(answers.len())),
                ),
            )
            .await?;
            add(&mut record, &picked);
            let (index, selection) = match parse_selection(&picked.text, answers.len()) {
                Some(i) => (i, format!("sample {}", i + 1)),
                None => (
                    0,
                    "sample 1: the judge's reply named no valid sample".to_string(),
                ),
            };
            record.selection = Some(selection);
            record.answer = answers[index].text.clone();
            Ok(record)
        }
        Prepared::Debate { template, registry } => {
            let mut spec = (**template).clone();
            spec.problem = problem.text.as_str().into();
            spec.idempotency_key = Some(idempotency_key(&out.root, &problem.id, &record.strategy));
            let mut models: Vec<String> = spec
                .active_agents()
                .chain(std::iter::once(&spec.judge))
                .map(|a| a.model.clone())
                .collect();
            models.sort();
            models.dedup();
            record.models = models;
            let state = match (registry, cluster) {
                (Some(registry), _) => {
                    run_embedded_debate(spec.clone(), registry.clone(), out, interrupt).await?
                }
                (None, Some(client)) => crate::remote::submit_and_wait(client, &spec).await?,
                (None, None) => {
                    return Err(CliError::general(
                        "a debate strategy has neither a registry nor a cluster",
                    ))
                }
            };
            record.debate_id = Some(state.id.clone());
            if state.status != DebateStatus::Completed {
                let why = state
                    .error
                    .as_ref()
                    .map(|f| format!(": {}", f.message))
                    .unwrap_or_default();
                return Err(CliError::provider(format!(
                    "debate {} ended {}{why}",
                    state.id,
                    state.status.as_str()
                )));
            }
            let spend = parley_protocol::Spend::of(&state, &spec.judge.id);
            record.calls = spend.calls;
            record.cost_usd = spend.cost_usd;
            let (prompt, completion) = token_split(&state);
            record.prompt_tokens = prompt;
            record.completion_tokens = completion;
            record.answer = crate::report::solution_text(&state);
            Ok(record)
        }
    }
}

/// The key of one run's cluster submission: the same out directory, problem and strategy
/// give the same key (a resumed comparison follows the debate it started), at most 128
/// bytes.
pub(super) fn idempotency_key(out: &Path, problem: &str, strategy: &str) -> String {
    let dir = std::fs::canonicalize(out).unwrap_or_else(|_| out.to_path_buf());
    format!(
        "compare-{}",
        digest(&[&dir.to_string_lossy(), problem, strategy])
    )
}

/// Prompt and completion tokens of every call a debate made. A call that reported only
/// its total (a summary, or a contribution without the split) counts as prompt tokens.
pub(super) fn token_split(state: &DebateState) -> (u64, u64) {
    let split =
        |m: &parley_protocol::ContributionMetadata| match (m.prompt_tokens, m.completion_tokens) {
            (Some(p), Some(c)) => (p, c),
            _ => (m.tokens_used, 0),
        };
    let mut calls: Vec<(u64, u64)> = Vec::new();
    for r in &state.rounds {
        calls.extend(
            r.contributions
                .iter()
                .map(|c| &c.metadata)
                .filter(|m| !m.carried_over)
                .map(split),
        );
        calls.extend(r.evaluation.iter().map(|e| split(&e.metadata)));
        calls.extend(r.summaries.values().map(|s| (s.metadata.tokens_used, 0)));
    }
    calls.extend(state.synthesis_metadata.iter().map(split));
    calls.extend(
        state
            .judge_summary
            .iter()
            .map(|j| (j.metadata.tokens_used, 0)),
    );
    calls
        .iter()
        .fold((0, 0), |(p, c), (dp, dc)| (p + dp, c + dc))
}

pub(super) async fn run_embedded_debate(
    mut spec: DebateSpec,
    registry: Arc<Registry>,
    out: &OutDir,
    interrupt: &CancellationToken,
) -> Result<DebateState, CliError> {
    let pricing = parley_engine::Pricing::new(
        parley_llm::prices().as_ref().clone(),
        parley_protocol::limits::DEFAULT_MAX_TOKENS,
    );
    // As `parley run`: the debate's own budget (if any) is admitted for this problem.
    parley_engine::budget::admit(&mut spec, &Default::default(), &pricing)
        .map_err(|e| CliError::config(e.to_string()))?;
    let runner = Arc::new(EmbeddedRunner {
        registry,
        context_files: None,
    });
    let mut machine = Machine::new(parley_protocol::new_debate_id(Utc::now()), spec, Utc::now());
    machine.set_pricing(pricing);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The compare progress line stands for the debate's own.
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let driven = run_debate_until(
        machine,
        Input::Start,
        runner,
        Some(FileStore::new(out.debates())),
        tx,
        interrupt,
        crate::run::INTERRUPT_GRACE,
    )
    .await
    .map_err(|e| CliError::general(e.to_string()))?;
    let _ = drain.await;
    if driven.interrupted {
        return Err(CliError::interrupted("interrupted"));
    }
    Ok(driven.state)
}

/// What a run depends on: the problem's text and the strategy's settings (for a debate,
/// its whole spec but the problem: agents, prompts, rounds, endpoints left out).
pub(super) fn input_digest(problem: &Problem, spec: &StrategySpec, prepared: &Prepared) -> String {
    let settings = match prepared {
        Prepared::Calls { system, .. } => format!("{spec:?}\n{system}"),
        Prepared::Debate { template, .. } => {
            serde_json::to_string(template.as_ref()).unwrap_or_else(|_| format!("{spec:?}"))
        }
    };
    digest(&[&problem.text, &settings])
}
