//! The agent worker: turns agent tasks (clarify, propose, critique, refine, summarize) into
//! LLM calls.
//!
//! # Layout
//! - [`roles`]: the built-in role prompts (architect, performance, security, testing, kiss,
//!   generalist) and the prompt builders for each task kind.
//! - [`clarify`]: the clarification prompt, the JSON schema of its reply
//!   ([`questions_schema`]) and the lenient parser of the reply ([`parse_questions`]).
//! - [`execute`]: runs one [`Task`] against a provider and returns its [`TaskResult`].
//! - [`service`]: the NATS service (`parley-agent-worker` binary): the shared consume loop of
//!   `parley-worker` running this crate's `execute`.

pub mod clarify;
pub mod roles;
pub mod service;

use parley_llm::{call_for_task, task_result, ChatMessage, LlmError, Provider};
use parley_protocol::{Task, TaskKind, TaskOutput, TaskResult};

pub use clarify::{parse_questions, questions_schema};
pub use roles::{role_prompts, RolePrompts};

/// Runs one agent task: builds the prompt for its kind and calls the provider.
pub async fn execute(task: &Task, provider: &dyn Provider, worker: &str) -> TaskResult {
    task_result(task, worker, run(task, provider).await)
}

async fn run(task: &Task, provider: &dyn Provider) -> Result<TaskOutput, LlmError> {
    let messages = build_messages(task).map_err(|m| {
        LlmError::new(
            parley_protocol::ErrorKind::InvalidRequest,
            provider.name(),
            m,
        )
    })?;
    let (content, metadata) = call_for_task(provider, task, messages).await?;
    let content = match (task.kind, task.input.max_length) {
        (TaskKind::Summarize, Some(max)) => content.chars().take(max).collect(),
        _ => content,
    };
    let mut warnings = Vec::new();
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
    Ok(TaskOutput {
        content,
        metadata,
        solution: None,
        confidence: None,
        warnings,
        questions,
    })
}

/// The chat messages for an agent task; an error names what the task lacks.
pub fn build_messages(task: &Task) -> Result<Vec<ChatMessage>, String> {
    let prompts = role_prompts(&task.agent.role);
    let system = task
        .agent
        .system_prompt
        .clone()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| prompts.system.to_string());
    let i = &task.input;
    // Every prompt after the clarification phase states the answers with the problem.
    let problem = parley_protocol::problem_with_clarifications(&task.problem, &i.clarifications);
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
                .ok_or("critique task without the proposal to critique")?;
            roles::critique(prompts, problem, p, i.history.as_deref())
        }
        TaskKind::Refine => {
            let p = i
                .proposal
                .as_ref()
                .ok_or("refine task without the agent's proposal")?;
            roles::refine(prompts, problem, p, &i.critiques, i.history.as_deref())
        }
        TaskKind::Summarize => {
            let t = i
                .transcript
                .as_deref()
                .ok_or("summarize task without history")?;
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
        other => return Err(format!("{} is not an agent task", other.as_str())),
    };
    Ok(vec![ChatMessage::system(system), ChatMessage::user(user)])
}
