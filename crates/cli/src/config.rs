//! Loading `debate-config.json` and resolving the problem text.
//!
//! Missing file or missing sections fall back to the built-in defaults with a warning on
//! stderr. Prompt paths resolve relative to the config file's folder; a missing or empty
//! prompt file falls back to the built-in prompt with a warning, and the chosen source is
//! recorded in `promptSources`.

use std::path::{Path, PathBuf};

use parley_protocol::{
    AgentConfig, DebateConfigFile, DebateSettings, DebateSpec, PromptSource, PromptSources,
    KNOWN_ROLES, SCHEMA_VERSION,
};

use crate::CliError;

pub const DEFAULT_CONFIG: &str = "debate-config.json";
/// Model named in the built-in agents (the `local` provider ignores it).
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// The built-in agent of a known role (a generalist for any other).
pub fn default_agent(role: &str) -> AgentConfig {
    let name = match role {
        "architect" => "System Architect",
        "performance" => "Performance Engineer",
        "security" => "Security Engineer",
        "testing" => "Test Engineer",
        "kiss" => "Simplicity Advocate",
        "datamodeling" => "Data Modeling Engineer",
        _ => "Generalist",
    };
    AgentConfig::new(format!("agent-{role}"), name, role, DEFAULT_MODEL, 0.5)
}

/// Built-in defaults: two agents (architect, performance), a generalist judge, one round.
pub fn default_agents() -> Vec<AgentConfig> {
    vec![default_agent("architect"), default_agent("performance")]
}

pub fn default_judge() -> AgentConfig {
    AgentConfig {
        id: "judge-main".into(),
        name: "Technical Judge".into(),
        temperature: 0.3,
        ..default_agent("generalist")
    }
}

pub fn default_debate() -> DebateSettings {
    DebateSettings {
        rounds: 1,
        ..Default::default()
    }
}

/// The loaded configuration and the folder prompt paths are relative to.
pub struct LoadedConfig {
    pub file: DebateConfigFile,
    pub base_dir: PathBuf,
}

/// Reads the config at `path` (or `./debate-config.json` when `None`).
pub fn load(path: Option<&Path>, warn: &mut impl FnMut(String)) -> Result<LoadedConfig, CliError> {
    let explicit = path.is_some();
    let path = path
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    let base_dir = path
        .parent()
        .map(Path::to_path_buf)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if explicit {
                return Err(CliError::config(format!(
                    "config file {} not found",
                    path.display()
                )));
            }
            warn(format!(
                "config file {} not found; using built-in defaults (2 agents, 1 round)",
                path.display()
            ));
            let file = DebateConfigFile {
                agents: Some(default_agents()),
                judge: Some(default_judge()),
                debate: Some(default_debate()),
                ..Default::default()
            };
            return Ok(LoadedConfig { file, base_dir });
        }
        Err(e) => {
            return Err(CliError::config(format!(
                "cannot read config file {}: {e}",
                path.display()
            )))
        }
    };
    let mut value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CliError::config(format!("invalid config file {}: {e}", path.display())))?;
    crate::compat::accept_dialectic_keys(&mut value, warn)?;
    let mut file: DebateConfigFile = serde_json::from_value(value)
        .map_err(|e| CliError::config(format!("invalid config file {}: {e}", path.display())))?;
    if file.agents.as_ref().is_none_or(|a| a.is_empty()) {
        warn(format!(
            "{}: no agents configured; using the built-in agents (architect, performance)",
            path.display()
        ));
        file.agents = Some(default_agents());
    }
    if file.judge.is_none() {
        warn(format!(
            "{}: no judge configured; using the built-in judge",
            path.display()
        ));
        file.judge = Some(default_judge());
    }
    if file.debate.is_none() {
        warn(format!(
            "{}: no debate section; using the built-in debate settings (1 round, fixed)",
            path.display()
        ));
        file.debate = Some(default_debate());
    }
    Ok(LoadedConfig { file, base_dir })
}

/// Reads the prompt file at `rel` (relative to `base`). `None` (with a warning) when it is
/// missing or empty.
fn read_prompt(
    base: &Path,
    rel: &str,
    what: &str,
    warn: &mut impl FnMut(String),
) -> Option<(String, String)> {
    let path = base.join(rel);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => Some((t, path.display().to_string())),
        Ok(_) => {
            warn(format!(
                "{what} file {} is empty; using the built-in prompt",
                path.display()
            ));
            None
        }
        Err(e) => {
            warn(format!(
                "{what} file {} cannot be read ({e}); using the built-in prompt",
                path.display()
            ));
            None
        }
    }
}

/// Resolves an agent's prompt paths into texts; returns where each came from.
pub fn resolve_prompts(
    agent: &mut AgentConfig,
    base: &Path,
    warn: &mut impl FnMut(String),
) -> PromptSource {
    let mut src = PromptSource {
        agent_id: agent.id.clone(),
        role: agent.role.clone(),
        source: "built-in".into(),
        path: None,
        summary_source: None,
        summary_path: None,
    };
    if let Some(rel) = agent.system_prompt_path.clone() {
        if let Some((text, path)) = read_prompt(
            base,
            &rel,
            &format!("agent {}: system prompt", agent.id),
            warn,
        ) {
            agent.system_prompt = Some(text.into());
            src.source = "file".into();
            src.path = Some(path);
        }
    }
    if let Some(rel) = agent.summary_prompt_path.clone() {
        src.summary_source = Some("built-in".into());
        if let Some((text, path)) = read_prompt(
            base,
            &rel,
            &format!("agent {}: summary prompt", agent.id),
            warn,
        ) {
            agent.summary_prompt = Some(text.into());
            src.summary_source = Some("file".into());
            src.summary_path = Some(path);
        }
    }
    if let Some(rel) = agent.clarification_prompt_path.clone() {
        if let Some((text, _)) = read_prompt(
            base,
            &rel,
            &format!("agent {}: clarification prompt", agent.id),
            warn,
        ) {
            agent.clarification_prompt = Some(text.into());
        }
    }
    src
}

/// The endpoints a local config names: its top-level `baseUrl` and per-agent `baseUrl`s.
/// A spec never carries them (see [`take_endpoints`]).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Endpoints {
    /// The top-level `baseUrl`.
    pub base_url: Option<String>,
    /// Agent (or judge) id → its `baseUrl`.
    pub per_agent: std::collections::BTreeMap<String, String>,
}

impl Endpoints {
    pub fn is_empty(&self) -> bool {
        self.base_url.is_none() && self.per_agent.is_empty()
    }

    /// Which keys held endpoints, for a note (`baseUrl`, `agents[agent-x].baseUrl`).
    pub fn describe(&self) -> String {
        self.base_url
            .iter()
            .map(|_| "baseUrl".to_string())
            .chain(self.per_agent.keys().map(|id| format!("{id}.baseUrl")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Loads the config as its operator (embedded `run`, `serve`): the endpoints moved out of
/// it (for this process's provider registry, never into a spec) and its provider limits,
/// checked (every problem named at once, exit 4).
pub fn load_as_operator(
    path: Option<&Path>,
    warn: &mut impl FnMut(String),
) -> Result<
    (
        LoadedConfig,
        Endpoints,
        std::collections::BTreeMap<String, parley_protocol::ProviderLimits>,
    ),
    CliError,
> {
    let mut loaded = load(path, warn)?;
    let endpoints = take_endpoints(&mut loaded);
    let limits = loaded.file.providers.clone();
    let problems = parley_protocol::validate_providers(&limits);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(CliError::config(format!("config: {}", list.join("; "))));
    }
    Ok((loaded, endpoints, limits))
}

/// The prices `parley run` charges calls at: the price file (`--prices`, else the config's
/// `prices`, relative to the config's folder) plus the config's inline
/// `providers.<p>.models.<m>.price`. A bad file is a configuration error (exit 4) naming
/// the file and the key.
pub fn load_prices(
    flag: Option<&Path>,
    loaded: &LoadedConfig,
) -> Result<parley_protocol::PriceTable, CliError> {
    let path = flag
        .map(Path::to_path_buf)
        .or_else(|| loaded.file.prices.as_ref().map(|p| loaded.base_dir.join(p)));
    let table = match path {
        Some(p) => {
            parley_protocol::PriceTable::load(&p).map_err(|e| CliError::config(e.to_string()))?
        }
        None => parley_protocol::PriceTable::new(),
    };
    Ok(table.with_inline(&loaded.file.providers))
}

/// Moves the endpoints out of a loaded config: the agents' and the judge's `baseUrl` and
/// the top-level one. `parley run` hands them to its provider registry (the user is the
/// operator there); `parley submit` does not send them.
pub fn take_endpoints(loaded: &mut LoadedConfig) -> Endpoints {
    let mut e = Endpoints {
        base_url: loaded.file.base_url.take(),
        ..Default::default()
    };
    let agents = loaded.file.agents.iter_mut().flatten();
    for a in agents.chain(loaded.file.judge.iter_mut()) {
        if let Some(url) = a.base_url.take() {
            e.per_agent.insert(a.id.clone(), url);
        }
    }
    e
}

/// Command-line overrides applied to the config.
#[derive(Debug, Default)]
pub struct Overrides {
    pub roles: Option<Vec<String>>,
    pub rounds: Option<u32>,
    /// `--clarify`: turn the clarification phase on (`debate.interactiveClarifications`).
    pub clarify: bool,
    /// The `--context DIR` snapshot.
    pub context_files: Option<parley_protocol::ContextFiles>,
}

/// Builds the debate spec: config + overrides + resolved prompts, validated.
pub fn build_spec(
    loaded: LoadedConfig,
    problem: String,
    overrides: &Overrides,
    warn: &mut impl FnMut(String),
) -> Result<DebateSpec, CliError> {
    let spec = assemble_spec(loaded, problem, overrides, warn)?;
    spec.validate()
        .map_err(|e| CliError::config(e.to_string()))?;
    Ok(spec)
}

/// [`build_spec`] without the final validation, for a caller that validates with its own
/// policy (`serve`: the operator's model allow-lists), so every problem is reported at once.
pub fn assemble_spec(
    loaded: LoadedConfig,
    problem: String,
    overrides: &Overrides,
    warn: &mut impl FnMut(String),
) -> Result<DebateSpec, CliError> {
    let LoadedConfig { file, base_dir } = loaded;
    let mut agents: Vec<AgentConfig> = file.agents.unwrap_or_else(default_agents);
    let mut judge = file.judge.unwrap_or_else(default_judge);
    let mut debate = file.debate.unwrap_or_else(default_debate);
    if let Some(roles) = &overrides.roles {
        let mut picked = Vec::new();
        for role in roles {
            let matching: Vec<AgentConfig> =
                agents.iter().filter(|a| &a.role == role).cloned().collect();
            if !matching.is_empty() {
                for mut a in matching {
                    a.enabled = Some(true);
                    picked.push(a);
                }
            } else if KNOWN_ROLES.contains(&role.as_str()) {
                picked.push(default_agent(role));
            } else {
                return Err(CliError::usage(format!(
                    "--agents: unknown role {role:?} (known roles: {})",
                    KNOWN_ROLES.join(", ")
                )));
            }
        }
        agents = picked;
    }
    if let Some(r) = overrides.rounds {
        debate.rounds = r;
    }
    if overrides.clarify {
        debate.interactive_clarifications = true;
    }
    let mut sources = PromptSources::default();
    for a in agents.iter_mut().filter(|a| a.is_enabled()) {
        sources.agents.push(resolve_prompts(a, &base_dir, warn));
    }
    sources.judge = Some(resolve_prompts(&mut judge, &base_dir, warn));
    let spec = DebateSpec {
        schema_version: SCHEMA_VERSION,
        problem: problem.into(),
        context: None,
        context_files: overrides.context_files.clone(),
        agents,
        judge,
        debate,
        prompt_sources: sources,
        idempotency_key: None,
        owner: None,
        webhooks: Vec::new(),
    };
    Ok(spec)
}

/// Exactly one of the positional problem and `--problem-file`.
pub fn resolve_problem(problem: Option<String>, file: Option<&Path>) -> Result<String, CliError> {
    match (problem, file) {
        (Some(_), Some(_)) => Err(CliError::usage(
            "give either a PROBLEM or --problem-file, not both",
        )),
        (None, None) => Err(CliError::usage(
            "no problem given: pass PROBLEM or --problem-file FILE",
        )),
        (Some(p), None) => {
            if p.trim().is_empty() {
                Err(CliError::usage("the problem is empty"))
            } else {
                Ok(p)
            }
        }
        (None, Some(f)) => {
            if f.is_dir() {
                return Err(CliError::usage(format!(
                    "--problem-file {} is a directory, not a file",
                    f.display()
                )));
            }
            let text = std::fs::read_to_string(f).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    CliError::usage(format!("--problem-file {} does not exist", f.display()))
                } else {
                    CliError::usage(format!(
                        "--problem-file {} cannot be read: {e}",
                        f.display()
                    ))
                }
            })?;
            if text.trim().is_empty() {
                return Err(CliError::usage(format!(
                    "--problem-file {} is empty",
                    f.display()
                )));
            }
            Ok(text)
        }
    }
}

/// Loads the local model once, before the debate (or evaluation) starts, and says which:
/// a missing model file is a configuration error (exit 4) naming the path, not a failure of
/// the first call.
pub fn load_local_model(registry: &parley_llm::Registry) -> Result<(), CliError> {
    let local = registry.local().map_err(|e| CliError::config(e.message))?;
    eprintln!(
        "Using local model {} ({})",
        local.model().model_name(),
        registry.settings().model_path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect() -> (Vec<String>, impl FnMut(String)) {
        (Vec::new(), |_| {})
    }

    /// A config may name its JSON Schema (`"$schema"`, for editors); the loader takes it,
    /// and the shipped configs load with the same loader the schema is checked against.
    #[test]
    fn a_config_with_its_schema_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("debate-config.json");
        std::fs::write(
            &path,
            r#"{"$schema": "./debate-config.schema.json",
                "agents": [{"id": "a", "name": "A", "role": "architect", "model": "m"}],
                "debate": {"rounds": 2}}"#,
        )
        .unwrap();
        let loaded = load(Some(&path), &mut |_| {}).unwrap();
        assert_eq!(loaded.file.debate.unwrap().rounds, 2);
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for shipped in [
            "deploy/config.json",
            "docs/src/guide/compare-sample/debate-config.json",
            "docs/src/design/model-choice/debate-smollm2.json",
            "docs/src/design/model-choice/debate-gemma3.json",
        ] {
            load(Some(&root.join(shipped)), &mut |_| {})
                .unwrap_or_else(|e| panic!("{shipped}: {}", e.message));
        }
    }

    #[test]
    fn problem_resolution_errors_are_usage_errors() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.txt");
        std::fs::write(&empty, "  \n").unwrap();
        let good = dir.path().join("p.txt");
        std::fs::write(&good, "Design X").unwrap();
        let cases: Vec<(Option<String>, Option<PathBuf>, &str)> = vec![
            (Some("a".into()), Some(good.clone()), "not both"),
            (None, None, "no problem given"),
            (None, Some(dir.path().join("missing.txt")), "does not exist"),
            (None, Some(dir.path().to_path_buf()), "is a directory"),
            (None, Some(empty), "is empty"),
            (Some("   ".into()), None, "empty"),
        ];
        for (p, f, needle) in cases {
            let e = resolve_problem(p, f.as_deref()).unwrap_err();
            assert_eq!(e.code, 2);
            assert!(e.message.contains(needle), "{} lacks {needle}", e.message);
        }
        assert_eq!(resolve_problem(None, Some(&good)).unwrap(), "Design X");
    }

    #[test]
    fn missing_default_config_warns_and_uses_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = std::env::current_dir().unwrap();
        let mut warnings = Vec::new();
        // Explicit path that does not exist is an error; the implicit default is a warning.
        let e = load(Some(&dir.path().join("nope.json")), &mut |w| {
            warnings.push(w)
        })
        .err()
        .unwrap();
        assert_eq!(e.code, 4);
        drop(cwd);
        let loaded = load(Some(&dir.path().join("nope.json")), &mut |_| {}).err();
        assert!(loaded.is_some());
    }

    #[test]
    fn missing_sections_get_defaults_with_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(&path, r#"{"debate": {"rounds": 2}}"#).unwrap();
        let mut warnings = Vec::new();
        let loaded = load(Some(&path), &mut |w| warnings.push(w)).unwrap();
        assert_eq!(loaded.file.agents.as_ref().unwrap().len(), 2);
        assert_eq!(loaded.file.debate.as_ref().unwrap().rounds, 2);
        assert!(
            warnings.iter().any(|w| w.contains("no agents")),
            "{warnings:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("no judge")),
            "{warnings:?}"
        );
        let (_, _) = collect();
    }

    #[test]
    fn unknown_config_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(&path, r#"{"debate": {"rounds": 2, "roundz": 3}}"#).unwrap();
        let e = load(Some(&path), &mut |_| {}).err().unwrap();
        assert_eq!(e.code, 4);
        assert!(e.message.contains("roundz"), "{}", e.message);
    }

    #[test]
    fn prompt_files_resolve_relative_to_config_and_fall_back() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("prompts")).unwrap();
        std::fs::write(dir.path().join("prompts/arch.md"), "You are Arch.").unwrap();
        std::fs::write(dir.path().join("prompts/empty.md"), "").unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(
            &path,
            r#"{"agents": [
                {"id":"a1","name":"A","role":"architect","model":"m","systemPromptPath":"prompts/arch.md","clarificationPromptPath":"prompts/arch.md"},
                {"id":"a2","name":"B","role":"security","model":"m","systemPromptPath":"prompts/empty.md"},
                {"id":"a3","name":"C","role":"kiss","model":"m","systemPromptPath":"prompts/missing.md","summaryPromptPath":"prompts/arch.md"}
            ]}"#,
        )
        .unwrap();
        let mut warnings = Vec::new();
        let loaded = load(Some(&path), &mut |w| warnings.push(w)).unwrap();
        let spec = build_spec(loaded, "P".into(), &Overrides::default(), &mut |w| {
            warnings.push(w)
        })
        .unwrap();
        assert_eq!(
            spec.agents[0].system_prompt.as_deref(),
            Some("You are Arch.")
        );
        assert_eq!(spec.agents[1].system_prompt, None);
        assert_eq!(spec.agents[2].system_prompt, None);
        assert_eq!(
            spec.agents[0].clarification_prompt.as_deref(),
            Some("You are Arch."),
            "clarificationPromptPath is read into the spec as text"
        );
        assert_eq!(spec.agents[1].clarification_prompt, None);
        assert_eq!(
            spec.agents[2].summary_prompt.as_deref(),
            Some("You are Arch.")
        );
        let s = &spec.prompt_sources.agents;
        assert_eq!(s[0].source, "file");
        assert!(s[0].path.as_deref().unwrap().ends_with("prompts/arch.md"));
        assert_eq!(s[1].source, "built-in");
        assert_eq!(s[2].source, "built-in");
        assert_eq!(s[2].summary_source.as_deref(), Some("file"));
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("empty.md") && w.contains("empty")),
            "{warnings:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("missing.md")),
            "{warnings:?}"
        );
    }

    #[test]
    fn endpoints_are_taken_out_of_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(
            &path,
            r#"{"baseUrl": "http://g/v1", "agents": [
                {"id":"a1","name":"A","role":"architect","model":"m","baseUrl":"http://a1/v1"},
                {"id":"a2","name":"B","role":"security","model":"m"}
            ], "judge": {"id":"j","name":"J","role":"generalist","model":"m","baseUrl":"http://j/v1"}}"#,
        )
        .unwrap();
        let mut loaded = load(Some(&path), &mut |_| {}).unwrap();
        let e = take_endpoints(&mut loaded);
        assert_eq!(e.base_url.as_deref(), Some("http://g/v1"));
        assert_eq!(e.per_agent.len(), 2);
        assert_eq!(e.describe(), "baseUrl, a1.baseUrl, j.baseUrl");
        // What is left validates as a spec: no endpoint in it.
        let spec = build_spec(loaded, "P".into(), &Overrides::default(), &mut |_| {}).unwrap();
        assert!(spec.agents.iter().all(|a| a.base_url.is_none()));
        assert!(spec.judge.base_url.is_none());
    }

    #[test]
    fn agents_filter_by_role_and_rejects_unknown_roles() {
        let loaded = LoadedConfig {
            file: DebateConfigFile {
                agents: Some(default_agents()),
                ..Default::default()
            },
            base_dir: ".".into(),
        };
        let o = Overrides {
            roles: Some(vec!["performance".into(), "security".into()]),
            rounds: Some(2),
            clarify: true,
            ..Default::default()
        };
        let spec = build_spec(loaded, "P".into(), &o, &mut |_| {}).unwrap();
        let roles: Vec<_> = spec.agents.iter().map(|a| a.role.as_str()).collect();
        assert_eq!(roles, ["performance", "security"]);
        assert_eq!(spec.debate.rounds, 2);
        assert!(
            spec.debate.interactive_clarifications,
            "--clarify turns them on"
        );
        let loaded = LoadedConfig {
            file: DebateConfigFile::default(),
            base_dir: ".".into(),
        };
        let o = Overrides {
            roles: Some(vec!["astronaut".into()]),
            ..Default::default()
        };
        let e = build_spec(loaded, "P".into(), &o, &mut |_| {})
            .err()
            .unwrap();
        assert_eq!(e.code, 2);
        assert!(e.message.contains("astronaut"));
    }
}
