//! The judge worker: synthesis, round evaluation and the judge's summary.
//!
//! # Layout
//! - [`prompts`]: the judge's system prompt and the prompt for each judge task.
//! - [`parse`]: lenient extraction of the judge's JSON replies.
//! - [`schema`]: the JSON schemas of synthesis and evaluation, asked for as structured
//!   output where the provider supports it.
//! - [`service`]: the NATS service (`parley-judge-worker` binary): the shared consume loop of
//!   `parley-worker` running this crate's `execute`.
//! - [`execute`]: runs one judge [`Task`]. Synthesis and evaluation ask for their schema
//!   as structured output (so a provider that supports it, and the local model, reply in
//!   valid JSON the first time); a reply that is still not valid JSON is asked for once
//!   more with a stricter instruction; if that fails too, the evaluation counts as
//!   confidence 0 and the synthesis keeps the raw text, both with a warning.

pub mod parse;
pub mod prompts;
pub mod schema;
pub mod service;

use parley_llm::{
    add_usage, call_for_task, call_for_task_structured, cosine, embed_for_task, task_result,
    ChatMessage, LlmError, Provider,
};
use parley_protocol::{
    ErrorKind, PromptError, Solution, Task, TaskKind, TaskOutput, TaskResult, WorkerKind,
};

/// Runs one judge task.
pub async fn execute(task: &Task, provider: &dyn Provider, worker: &str) -> TaskResult {
    task_result(task, worker, run(task, provider).await)
}

fn system(task: &Task) -> String {
    task.agent
        .system_prompt
        .as_deref()
        .filter(|s| !s.trim().is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| prompts::SYSTEM.to_string())
}

/// The chat messages of a judge task (system prompt, then the task's prompt); an error
/// names what the task lacks. `parley estimate` builds the same messages to count tokens.
pub fn build_messages(task: &Task) -> Result<Vec<ChatMessage>, PromptError> {
    let transcript = task
        .input
        .transcript
        .as_deref()
        .ok_or(PromptError::missing("judge", "a transcript"))?;
    // The judge sees the answered clarifications and the guide notes with the problem.
    let problem = parley_protocol::problem_for_prompt(&task.problem, &task.input);
    let problem = problem.as_ref();
    let user = match task.kind {
        TaskKind::Synthesize => {
            prompts::synthesize(problem, task.context.as_deref(), transcript)
                + &prompts::synthesis_extras(
                    &task.input.open_issues,
                    task.input.vote_result.as_deref(),
                )
        }
        TaskKind::Evaluate => prompts::evaluate(problem, transcript),
        TaskKind::Verdict => prompts::verdict(problem, transcript),
        TaskKind::JudgeSummarize => {
            let max = task.input.max_length.unwrap_or(2500);
            match task
                .agent
                .summary_prompt
                .as_deref()
                .filter(|s| !s.trim().is_empty())
            {
                Some(custom) => {
                    format!("{custom}\n\nKeep it under {max} characters.\n\n{transcript}")
                }
                None => prompts::summarize(problem, transcript, max),
            }
        }
        other => {
            return Err(PromptError::NotThisWorker {
                kind: other,
                worker: WorkerKind::Judge,
            })
        }
    };
    Ok(vec![
        ChatMessage::system(system(task)),
        ChatMessage::user(user),
    ])
}

/// How alike the embedded refinements are: each agent's against its previous one (when
/// it had one) and the mean over every pair of this round's.
pub fn similarity(
    current: &[(String, Vec<f32>)],
    previous: &[(String, Vec<f32>)],
) -> parley_protocol::Similarity {
    let per_agent = current
        .iter()
        .filter_map(|(id, v)| {
            previous
                .iter()
                .find(|(p, _)| p == id)
                .map(|(_, w)| (id.clone(), cosine(v, w)))
        })
        .collect();
    let mut pairs = Vec::new();
    for (i, (_, a)) in current.iter().enumerate() {
        for (_, b) in &current[i + 1..] {
            pairs.push(cosine(a, b));
        }
    }
    let across_agents = (!pairs.is_empty()).then(|| pairs.iter().sum::<f64>() / pairs.len() as f64);
    parley_protocol::Similarity {
        per_agent,
        across_agents,
    }
}

/// Embed: one embeddings call for this round's refinements and the round before's, then
/// their similarities. No chat call.
async fn run_embed(task: &Task, provider: &dyn Provider) -> Result<TaskOutput, LlmError> {
    let (current, previous) = (&task.input.candidates, &task.input.previous);
    if current.is_empty() {
        return Err(LlmError::new(
            ErrorKind::InvalidRequest,
            provider.name(),
            "embed task without refinements",
        ));
    }
    let inputs = current
        .iter()
        .chain(previous)
        .map(|p| p.content.clone())
        .collect();
    let (vectors, metadata) = embed_for_task(provider, task, inputs).await?;
    let (now, before) = vectors.split_at(current.len());
    let ids = |peers: &[parley_protocol::PeerText], vs: &[Vec<f32>]| -> Vec<(String, Vec<f32>)> {
        peers
            .iter()
            .zip(vs)
            .map(|(p, v)| (p.agent_id.clone(), v.clone()))
            .collect()
    };
    let sim = similarity(&ids(current, now), &ids(previous, before));
    Ok(TaskOutput {
        content: String::new(),
        metadata,
        similarity: Some(sim),
        ..Default::default()
    })
}

async fn run(task: &Task, provider: &dyn Provider) -> Result<TaskOutput, LlmError> {
    if task.kind == TaskKind::Embed {
        return run_embed(task, provider).await;
    }
    let messages = build_messages(task)
        .map_err(|e| LlmError::new(ErrorKind::InvalidRequest, provider.name(), e.to_string()))?;
    let format = match task.kind {
        TaskKind::Synthesize => schema::synthesis_for(
            task.input.vote_result.is_some(),
            !task.input.open_issues.is_empty(),
        ),
        TaskKind::Evaluate => schema::evaluation(),
        TaskKind::Verdict => schema::verdict(),
        _ => {
            // The judge's summary: plain text, cut to its length.
            let max = task.input.max_length.unwrap_or(2500);
            let (content, metadata) = call_for_task(provider, task, messages).await?;
            let content = content.chars().take(max).collect();
            return Ok(TaskOutput {
                content,
                metadata,
                ..Default::default()
            });
        }
    };
    let mut messages = messages;
    let (first, mut metadata, _) =
        call_for_task_structured(provider, task, messages.clone(), Some(&format)).await?;
    let mut content = first;
    let mut parsed = parse::extract_json(&content);
    let mut warnings = Vec::new();
    // Under a budget the call was reserved once: no second ask.
    if parsed.is_none() && !task.input.single_ask {
        messages.push(ChatMessage {
            role: "assistant",
            content: content.clone(),
        });
        messages.push(ChatMessage::user(prompts::STRICT_JSON));
        let (second, more, _) =
            call_for_task_structured(provider, task, messages, Some(&format)).await?;
        add_usage(&mut metadata, &more);
        parsed = parse::extract_json(&second);
        if parsed.is_some() {
            content = second;
        }
    }
    let mut out = TaskOutput {
        content,
        metadata,
        ..Default::default()
    };
    match task.kind {
        TaskKind::Verdict => {
            let verdict = parsed.as_ref().and_then(parse::verdict);
            if verdict.is_none() {
                warnings.push(
                    "judge verdict was not the JSON asked for twice; counting it as continue"
                        .to_string(),
                );
            }
            out.verdict = Some(verdict.unwrap_or_else(|| {
                parley_protocol::Verdict::unreadable(parley_protocol::preview(&out.content, 2_000))
            }));
        }
        TaskKind::Evaluate => {
            let confidence = parsed.as_ref().and_then(parse::confidence);
            if confidence.is_none() {
                warnings.push(
                    "judge evaluation was not valid JSON twice; counting confidence as 0"
                        .to_string(),
                );
            }
            out.confidence = Some(confidence.unwrap_or(0.0));
            if let Some(r) = parsed
                .as_ref()
                .and_then(|v| v.get("reasoning"))
                .and_then(|v| v.as_str())
            {
                out.content = r.to_string();
            }
        }
        _ => {
            let solution = parsed
                .as_ref()
                .and_then(|v| parse::solution(v, &task.agent.id));
            if solution.is_none() {
                warnings.push(
                    "judge synthesis was not valid JSON twice; keeping its text as the solution"
                        .to_string(),
                );
            }
            out.solution = Some(solution.unwrap_or_else(|| {
                Solution::text_only(out.content.clone(), task.agent.id.clone())
            }));
        }
    }
    out.warnings = warnings;
    Ok(out)
}

#[cfg(test)]
mod similarity_tests {
    use super::similarity;

    fn v(id: &str, x: &[f32]) -> (String, Vec<f32>) {
        (id.to_string(), x.to_vec())
    }

    #[test]
    fn self_similarity_per_agent_and_the_mean_across_agents() {
        let now = [
            v("a", &[1.0, 0.0]),
            v("b", &[0.0, 1.0]),
            v("c", &[1.0, 1.0]),
        ];
        // "c" had no refinement the round before: no self-similarity for it.
        let before = [v("a", &[2.0, 0.0]), v("b", &[1.0, 0.0])];
        let s = similarity(&now, &before);
        assert_eq!(s.per_agent.len(), 2);
        assert!((s.per_agent["a"] - 1.0).abs() < 1e-9);
        assert!(s.per_agent["b"].abs() < 1e-9);
        // Pairs: a·b = 0, a·c = b·c = 1/√2.
        let want = 2.0 * std::f64::consts::FRAC_1_SQRT_2 / 3.0;
        assert!((s.across_agents.unwrap() - want).abs() < 1e-6);
        assert_eq!(s.min_per_agent(), Some(s.per_agent["b"]));
        // One agent, round 1: nothing to compare.
        let lone = similarity(&now[..1], &[]);
        assert!(lone.per_agent.is_empty() && lone.across_agents.is_none());
    }
}
