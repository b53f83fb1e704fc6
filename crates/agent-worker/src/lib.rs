//! The agent worker: turns agent tasks (clarify, propose, critique, refine, summarize, vote) into
//! LLM calls.
//!
//! # Layout
//! - [`roles`]: the built-in role prompts (architect, performance, security, testing, kiss,
//!   generalist) and the prompt builders for each task kind.
//! - [`clarify`]: the clarification prompt, the JSON schema of its reply
//!   ([`questions_schema`]) and the lenient parser of the reply ([`parse_questions`]).
//! - [`execute`]: runs one [`Task`] against a provider and returns its [`TaskResult`].
//! - [`tools`]: `list_files`, `file_read`, `context_search` over the debate's context
//!   snapshot and history, and the tool-calling loop bounded by `toolCallLimit`.
//! - [`service`]: the NATS service (`parley-agent-worker` binary): the shared consume loop of
//!   `parley-worker` running this crate's `execute`.

pub mod clarify;
pub mod roles;
pub mod service;
pub mod tools;
pub mod vote;

use parley_llm::{call_for_task, task_result, ChatMessage, LlmError, Provider};
use parley_protocol::{
    ContextFiles, PromptError, Task, TaskKind, TaskOutput, TaskResult, WorkerKind,
};

pub use clarify::{parse_questions, questions_schema};
pub use roles::{role_prompts, RolePrompts};

/// Runs one agent task: builds the prompt for its kind and calls the provider. `files` is
/// the debate's context snapshot (`--context DIR`), read by the agent's tools.
///
/// Proposals, critiques and refinements of an agent with `tools` go through the
/// tool-calling loop ([`tools::run_with_tools`]); summaries never call tools. A provider
/// without function calling (the local model) answers without them, and the contribution
/// carries one warning saying the tools were skipped.
pub async fn execute(
    task: &Task,
    provider: &dyn Provider,
    worker: &str,
    files: Option<&ContextFiles>,
) -> TaskResult {
    task_result(task, worker, run(task, provider, files).await)
}

async fn run(
    task: &Task,
    provider: &dyn Provider,
    files: Option<&ContextFiles>,
) -> Result<TaskOutput, LlmError> {
    let mut messages = build_messages(task).map_err(|e| {
        LlmError::new(
            parley_protocol::ErrorKind::InvalidRequest,
            provider.name(),
            e.to_string(),
        )
    })?;
    let mut warnings = Vec::new();
    let wants_tools = !task.agent.tools.is_empty()
        && matches!(
            task.kind,
            TaskKind::Propose | TaskKind::Critique | TaskKind::Refine
        );
    let (content, metadata) = if wants_tools && provider.supports_tools() {
        if let Some(system) = messages.first_mut() {
            system.content.push_str(TOOLS_NOTE);
        }
        tools::run_with_tools(provider, task, messages, files).await?
    } else {
        if wants_tools {
            let names: Vec<&str> = task.agent.tools.iter().map(|t| t.name.as_str()).collect();
            warnings.push(format!(
                "agent {}: provider {} has no function calling; its tools ({}) were skipped",
                task.agent.id,
                provider.name(),
                names.join(", ")
            ));
        }
        let schema = match task.kind {
            TaskKind::Clarify => Some((clarify::QUESTIONS_SCHEMA_NAME, questions_schema())),
            TaskKind::Vote => Some((vote::VOTE_SCHEMA_NAME, vote::vote_schema())),
            _ => None,
        };
        if let Some((name, schema)) = schema {
            // Structured output where the provider takes it (the local model decodes under
            // the schema); the parsers below accept the reply either way.
            let format = parley_llm::ResponseFormat::strict(name, schema);
            let (text, meta, _) =
                parley_llm::call_for_task_structured(provider, task, messages, Some(&format))
                    .await?;
            (text, meta)
        } else {
            call_for_task(provider, task, messages).await?
        }
    };
    let content = match (task.kind, task.input.max_length) {
        (TaskKind::Summarize, Some(max)) => content.chars().take(max).collect(),
        _ => content,
    };
    let mut questions = Vec::new();
    if task.kind == TaskKind::Clarify {
        match parse_questions(&content) {
            Some(qs) => questions = qs,
            None => warnings.push(format!(
                "the clarification reply is not the JSON asked for; agent {} asks nothing (reply began: {:?})",
                task.agent.id,
                parley_protocol::preview(&content, 120)
            )),
        }
    }
    let mut vote = None;
    if task.kind == TaskKind::Vote {
        vote = vote::parse_vote(&content);
        if vote.is_none() {
            warnings.push(format!(
                "the vote reply is not the JSON asked for; agent {}'s vote is not counted (reply began: {:?})",
                task.agent.id,
                parley_protocol::preview(&content, 120)
            ));
        }
    }
    Ok(TaskOutput {
        content,
        metadata,
        vote,
        warnings,
        questions,
        ..Default::default()
    })
}

/// Added to the system prompt when tools are offered.
const TOOLS_NOTE: &str = "\n\nYou may call the tools you are given to consult the files of the \
     context directory the user provided and the debate so far; cite what you found.";

/// The chat messages for an agent task; an error names what the task lacks.
pub fn build_messages(task: &Task) -> Result<Vec<ChatMessage>, PromptError> {
    let prompts = role_prompts(&task.agent.role);
    let system = task
        .agent
        .system_prompt
        .as_deref()
        .filter(|s| !s.trim().is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| prompts.system.to_string());
    let i = &task.input;
    // Every prompt after the clarification phase states the answers with the problem, and
    // the user's guide notes (steering) once there are any.
    let problem = parley_protocol::problem_for_prompt(&task.problem, i);
    let problem = problem.as_ref();
    let user = match task.kind {
        TaskKind::Clarify => clarify::prompt(
            prompts,
            task.agent.clarification_prompt.as_deref(),
            &task.problem,
            task.context.as_deref(),
            &i.clarifications,
            i.max_questions
                .unwrap_or(parley_protocol::DebateSettings::default().clarifications_max_per_agent),
        ),
        TaskKind::Propose => roles::propose(
            prompts,
            problem,
            task.context.as_deref(),
            i.history.as_deref(),
        ),
        TaskKind::Critique => {
            let p = i
                .proposal
                .as_ref()
                .ok_or(PromptError::missing("critique", "the proposal to critique"))?;
            roles::critique(prompts, problem, p, i.history.as_deref())
        }
        TaskKind::Refine => {
            let p = i
                .proposal
                .as_ref()
                .ok_or(PromptError::missing("refine", "the agent's proposal"))?;
            roles::refine(prompts, problem, p, &i.critiques, i.history.as_deref())
        }
        TaskKind::Summarize => {
            let t = i
                .transcript
                .as_deref()
                .ok_or(PromptError::missing("summarize", "history"))?;
            let max = i.max_length.unwrap_or(2500);
            match task
                .agent
                .summary_prompt
                .as_deref()
                .filter(|s| !s.trim().is_empty())
            {
                Some(custom) => format!("{custom}\n\nKeep it under {max} characters.\n\n{t}"),
                None => roles::summarize(prompts, t, max),
            }
        }
        TaskKind::Vote => {
            if i.candidates.is_empty() {
                return Err(PromptError::missing("vote", "candidates"));
            }
            vote::prompt(problem, i.proposal.as_ref(), &i.candidates)
        }
        other => {
            return Err(PromptError::NotThisWorker {
                kind: other,
                worker: WorkerKind::Agent,
            })
        }
    };
    Ok(vec![ChatMessage::system(system), ChatMessage::user(user)])
}
