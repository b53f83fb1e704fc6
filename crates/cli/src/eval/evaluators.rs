//! The evaluator config: its agents, their prompts and defaults.

use std::path::Path;
use std::time::Duration;

use parley_protocol::AgentConfig;
use serde_json::Value;

use super::{Evaluator, DEFAULT_TIMEOUT_MS, EVAL_TEMPERATURE, SYSTEM_PROMPT, USER_PROMPT};
use crate::CliError;

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
pub(super) fn prompt(
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
