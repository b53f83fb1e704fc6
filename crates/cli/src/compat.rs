//! dialectic config keys Parley accepts without a setting of its own, handled before the
//! strict parse of `debate-config.json` (`parley_protocol::DebateConfigFile` rejects unknown
//! keys, so a typo is still an error):
//!
//! - `judge.tools`, `judge.toolCallLimit`: accepted and ignored with one warning: the judge
//!   calls no tools. (An agent's `tools` and `toolCallLimit` are real settings of
//!   `parley_protocol::AgentConfig`, used with `--context DIR`.)
//! - `debate.orchestratorType`: accepted with one line of information; Parley always runs its
//!   own resumable state machine.
//! - `debate.trace: "langfuse"`: the CLI exports the debate's trace to Langfuse's OTLP
//!   endpoint from the `LANGFUSE_*` variables (`main.rs`, `parley_telemetry::langfuse`);
//!   without them, a warning naming the missing variable.
//! - `debate.summarization.promptPath` and `agents[].summarization.promptPath`: honoured as
//!   the summary prompt of every agent without its own `summaryPromptPath` (agent level
//!   first), resolved relative to the config file like the other prompt paths.

use serde_json::Value;

use crate::CliError;

/// Rewrites the dialectic-only keys of a parsed config file in place (see the module doc);
/// `warn` gets one line per kind of key found.
pub fn accept_dialectic_keys(
    config: &mut Value,
    warn: &mut impl FnMut(String),
) -> Result<(), CliError> {
    let mut with_tools = Vec::new();
    let mut default_summary: Option<Value> = None;
    if let Some(debate) = config.get_mut("debate").and_then(Value::as_object_mut) {
        if let Some(kind) = debate.remove("orchestratorType") {
            warn(format!(
                "debate.orchestratorType {kind} accepted and not needed: Parley always runs its own \
                 resumable state machine"
            ));
        }
        match debate.remove("trace") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == "langfuse" => {
                // `main` starts the export before the config is read (see `langfuse_wanted`);
                // here only say why it could not.
                if let Err(e) =
                    parley_telemetry::langfuse::langfuse_export(|k| std::env::var(k).ok())
                {
                    warn(format!("debate.trace \"langfuse\": not exported: {e}"));
                }
            }
            Some(other) => {
                return Err(CliError::config(format!(
                    "debate.trace: unknown value {other} (dialectic's only value is \"langfuse\")"
                )))
            }
        }
        if let Some(s) = debate
            .get_mut("summarization")
            .and_then(Value::as_object_mut)
        {
            default_summary = s.remove("promptPath");
        }
    }
    let mut walk = |agent: &mut Value, is_agent: bool| {
        let Some(a) = agent.as_object_mut() else {
            return;
        };
        if !is_agent {
            let tools = a.remove("tools");
            let limit = a.remove("toolCallLimit");
            if tools.is_some() || limit.is_some() {
                let id = a.get("id").and_then(Value::as_str).unwrap_or("?");
                with_tools.push(id.to_string());
            }
        }
        let own = a
            .get_mut("summarization")
            .and_then(Value::as_object_mut)
            .and_then(|s| s.remove("promptPath"));
        if !a.contains_key("summaryPromptPath") {
            let path = own.or(if is_agent {
                default_summary.clone()
            } else {
                None
            });
            if let Some(p) = path.filter(|p| !p.is_null()) {
                a.insert("summaryPromptPath".into(), p);
            }
        }
    };
    if let Some(agents) = config.get_mut("agents").and_then(Value::as_array_mut) {
        for a in agents {
            walk(a, true);
        }
    }
    if let Some(j) = config.get_mut("judge") {
        walk(j, false);
    }
    if !with_tools.is_empty() {
        warn(format!(
            "judge {}: tools and toolCallLimit accepted but not used: the judge calls no tools",
            with_tools.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::config::{self, Overrides};

    /// Every JSON file under `dir`, recursively, sorted.
    fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                json_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push(p);
            }
        }
        out.sort();
    }

    /// The shapes of dialectic's example and e2e configs (its `examples/` and `e2e-tests/`
    /// layout, keys as it writes them, our values) and of the keys its configuration docs
    /// describe: each debate config loads and builds a debate; each eval config loads.
    #[test]
    fn every_dialectic_config_shape_parses() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dialectic-configs");
        let mut files = Vec::new();
        json_files(&root, &mut files);
        assert!(files.len() >= 22, "{files:?}");
        let (mut debates, mut evals) = (0, 0);
        for f in &files {
            let mut warnings = Vec::new();
            let name = f.file_name().unwrap().to_string_lossy();
            if name.starts_with("eval_config") {
                let e = crate::eval::load_config(f, false, &mut |w| warnings.push(w))
                    .unwrap_or_else(|e| panic!("{}: {}", f.display(), e.message));
                assert!(!e.is_empty());
                assert!(
                    warnings.iter().all(|w| !w.contains("unknown key")),
                    "{warnings:?}"
                );
                evals += 1;
                continue;
            }
            let loaded = config::load(Some(f), &mut |w| warnings.push(w))
                .unwrap_or_else(|e| panic!("{}: {}", f.display(), e.message));
            let spec = config::build_spec(loaded, "P".into(), &Overrides::default(), &mut |w| {
                warnings.push(w)
            })
            .unwrap_or_else(|e| panic!("{}: {}", f.display(), e.message));
            assert!(!spec.agents.is_empty());
            let text = std::fs::read_to_string(f).unwrap();
            // An agent's tools are real settings now: they reach the spec.
            let declares_tools = text.contains("\"tools\"");
            assert_eq!(
                declares_tools,
                spec.agents.iter().any(|a| !a.tools.is_empty()),
                "{}",
                f.display()
            );
            assert!(
                warnings.iter().all(|w| !w.contains("tools")),
                "{}: {warnings:?}",
                f.display()
            );
            for (key, said) in [
                ("\"orchestratorType\"", "Parley always runs its own"),
                // (The test runs without LANGFUSE_* variables: the export is not started.)
                ("\"trace\"", "debate.trace \"langfuse\": not exported"),
            ] {
                assert_eq!(
                    text.contains(key),
                    warnings.iter().any(|w| w.contains(said)),
                    "{}: {key} vs {warnings:?}",
                    f.display()
                );
            }
            debates += 1;
        }
        assert_eq!((debates, evals), (18, 4));
    }

    /// `summarization.promptPath`: the agent's own first, then the debate's, never over an
    /// explicit `summaryPromptPath`; relative to the config file.
    #[test]
    fn summarization_prompt_path_is_honoured() {
        let f = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/dialectic-configs/docs/configuration-tools-summary.json");
        let mut warnings = Vec::new();
        let loaded = config::load(Some(&f), &mut |w| warnings.push(w)).unwrap();
        let spec = config::build_spec(loaded, "P".into(), &Overrides::default(), &mut |w| {
            warnings.push(w)
        })
        .unwrap();
        let summary = |id: &str| {
            spec.agents
                .iter()
                .find(|a| a.id == id)
                .and_then(|a| a.summary_prompt.clone())
                .unwrap_or_default()
        };
        assert_eq!(summary("fx-arch").trim(), "Generic summary fixture prompt.");
        assert_eq!(summary("fx-sec").trim(), "Agent summary fixture prompt.");
        assert_eq!(summary("fx-perf").trim(), "Own summary fixture prompt.");
        assert_eq!(spec.judge.summary_prompt, None);
        let arch = &spec.agents[0];
        let names: Vec<&str> = arch.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["context_search", "file_read", "list_files"]);
        assert_eq!(arch.tool_call_limit, Some(5));
        let src = &spec.prompt_sources.agents[0];
        assert_eq!(src.summary_source.as_deref(), Some("file"));
    }

    /// The judge calls no tools: its `tools` are accepted with a warning and dropped.
    #[test]
    fn judge_tools_are_dropped_with_a_warning() {
        let mut v = serde_json::json!({
            "agents": [{"id": "a", "tools": [{"name": "file_read"}], "toolCallLimit": 3}],
            "judge": {"id": "j", "tools": [{"name": "file_read"}]}
        });
        let mut warnings = Vec::new();
        super::accept_dialectic_keys(&mut v, &mut |w| warnings.push(w)).unwrap();
        assert_eq!(v["agents"][0]["toolCallLimit"], 3);
        assert!(v["judge"].get("tools").is_none());
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("judge j"), "{warnings:?}");
    }

    #[test]
    fn an_unknown_trace_value_is_named() {
        let mut v = serde_json::json!({"debate": {"trace": "zipkin"}});
        let e = super::accept_dialectic_keys(&mut v, &mut |_| {}).unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.message.contains("zipkin"), "{}", e.message);
    }
}
