//! Picks the provider for an agent and builds each client once.
//!
//! Endpoints and keys are the operator's: a participant names a provider and a model, and
//! this registry decides where the call goes and with which key, from its own settings
//! only. A participant's `baseUrl` is never used (a submission carrying one is refused at
//! the edge; `parley run` moves its local config's per-agent `baseUrl` into
//! [`ProviderSettings::agent_base_urls`], where the user is the operator).
//!
//! Resolution of an agent's `provider`:
//! - `openai`: `OPENAI_API_KEY` required; endpoint: the operator's `providers.openai.baseUrl`,
//!   else the config's top-level `baseUrl`, else `OPENAI_BASE_URL` (as the OpenAI SDKs and
//!   dialectic read it), else the public API.
//! - `openrouter`: `OPENROUTER_API_KEY` required; endpoint `providers.openrouter.baseUrl`,
//!   else `OPENROUTER_BASE_URL`, else the public API.
//! - `openai-compatible`: an endpoint required (`providers.openai-compatible.baseUrl` or the
//!   top-level `baseUrl`); `OPENAI_COMPATIBLE_API_KEY` sent if set.
//! - `local`: the SmolLM2 model file (see `scripts/fetch-model.sh`).
//! - unset: `openai-compatible` when an endpoint for it is configured, else `openai` when
//!   `OPENAI_API_KEY` is set, else `openrouter` when `OPENROUTER_API_KEY` is set, else `local`.
//!
//! (In `parley run`, an agent's own `baseUrl` from the local config comes first.)
//!
//! A model outside the provider's `allowedModels` is refused (`invalid_request`) before
//! any call: the coordinator refuses such a submission already; this is the last line.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use parley_protocol::{AgentConfig, ProviderLimits, KNOWN_PROVIDERS};

use crate::local::LocalProvider;
use crate::openai::{Api, OpenAiClient, Secret};
use crate::provider::{ErrorKind, LlmError, Provider};
use crate::ratelimit::{Limiter, LocalLimiter, RateLimited};

pub const OPENAI_KEY_VAR: &str = "OPENAI_API_KEY";
pub const OPENROUTER_KEY_VAR: &str = "OPENROUTER_API_KEY";
pub const COMPATIBLE_KEY_VAR: &str = "OPENAI_COMPATIBLE_API_KEY";
/// The operator's endpoint for `openai` from the environment (below the config's).
pub const OPENAI_BASE_URL_VAR: &str = "OPENAI_BASE_URL";
/// The operator's endpoint for `openrouter` from the environment (below the config's).
pub const OPENROUTER_BASE_URL_VAR: &str = "OPENROUTER_BASE_URL";
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api/v1";
pub const PROVIDERS: &[&str] = KNOWN_PROVIDERS;

/// Process-wide provider settings: keys (from the environment) and endpoints (from the
/// operator's config).
#[derive(Debug, Clone, Default)]
pub struct ProviderSettings {
    /// The config's top-level OpenAI-compatible endpoint.
    pub base_url: Option<String>,
    /// Per-agent endpoints of an embedded run's local config (agent id → `baseUrl`). Empty
    /// in a worker: there every endpoint is per provider.
    pub agent_base_urls: BTreeMap<String, String>,
    pub openai_key: Option<Secret>,
    pub openrouter_key: Option<Secret>,
    pub compatible_key: Option<Secret>,
    pub model_path: PathBuf,
    /// The operator's cap on one remote call's completion tokens (`max_tokens` setting);
    /// `None`: [`parley_protocol::limits::DEFAULT_MAX_TOKENS`]. Applied to every call,
    /// with or without a participant's `maxTokens` (see `ratelimit::completion_cap`).
    pub max_tokens: Option<u32>,
    /// `OPENAI_BASE_URL` / `OPENROUTER_BASE_URL`: endpoints below the config's, above the
    /// public API (provider name → URL).
    pub env_base_urls: BTreeMap<&'static str, String>,
}

impl ProviderSettings {
    /// Reads the API keys from the environment (empty values count as unset).
    pub fn from_env(base_url: Option<String>) -> Self {
        let key = |var: &str| {
            std::env::var(var)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .map(Secret::new)
        };
        let env_base_urls = [
            ("openai", OPENAI_BASE_URL_VAR),
            ("openrouter", OPENROUTER_BASE_URL_VAR),
        ]
        .into_iter()
        .filter_map(|(kind, var)| {
            let url = std::env::var(var).ok()?.trim().to_string();
            (!url.is_empty()).then_some((kind, url))
        })
        .collect();
        Self {
            base_url,
            agent_base_urls: BTreeMap::new(),
            openai_key: key(OPENAI_KEY_VAR),
            openrouter_key: key(OPENROUTER_KEY_VAR),
            compatible_key: key(COMPATIBLE_KEY_VAR),
            model_path: parley_local::default_model_path(),
            max_tokens: None,
            env_base_urls,
        }
    }
}

/// Which provider an agent uses and where.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resolved {
    pub kind: &'static str,
    pub base_url: Option<String>,
}

#[derive(Debug)]
pub struct Registry {
    settings: ProviderSettings,
    /// One client per (provider, base URL), shared by all agents using it.
    clients: Mutex<HashMap<Resolved, Arc<dyn Provider>>>,
    /// The local model, loaded on first use.
    local: OnceLock<Arc<LocalProvider>>,
    /// Operator limits per provider (and model), enforced by `limiter`.
    limits: Arc<BTreeMap<String, ProviderLimits>>,
    limiter: Arc<dyn Limiter>,
}

fn config_error(msg: impl Into<String>, provider: &str) -> LlmError {
    LlmError::new(ErrorKind::Config, provider, msg)
}

impl Registry {
    pub fn new(settings: ProviderSettings) -> Self {
        Self::with_limits(settings, BTreeMap::new(), Arc::new(LocalLimiter::default()))
    }

    /// A registry whose remote clients honour `limits` through `limiter` (in-process for
    /// the embedded mode, Redis for a cluster of workers).
    pub fn with_limits(
        settings: ProviderSettings,
        limits: BTreeMap<String, ProviderLimits>,
        limiter: Arc<dyn Limiter>,
    ) -> Self {
        Self {
            settings,
            clients: Mutex::new(HashMap::new()),
            local: OnceLock::new(),
            limits: Arc::new(limits),
            limiter,
        }
    }

    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    /// The operator's endpoint for `kind`, if any: an embedded run's per-agent endpoint,
    /// then `providers.<kind>.baseUrl`, then (openai, openai-compatible) the top-level one,
    /// then (openai, openrouter) `OPENAI_BASE_URL` / `OPENROUTER_BASE_URL`.
    fn endpoint(&self, kind: &str, agent: &AgentConfig) -> Option<String> {
        self.settings
            .agent_base_urls
            .get(&agent.id)
            .or_else(|| self.limits.get(kind).and_then(|p| p.base_url.as_ref()))
            .or(match kind {
                "openai" | "openai-compatible" => self.settings.base_url.as_ref(),
                _ => None,
            })
            .or_else(|| self.settings.env_base_urls.get(kind))
            .cloned()
    }

    /// Which provider `agent` uses; a configuration error names what is missing, an
    /// invalid-request error a model the operator does not allow.
    pub fn resolve(&self, agent: &AgentConfig) -> Result<Resolved, LlmError> {
        let kind: &'static str = match agent.provider.as_deref() {
            Some(p) => PROVIDERS.iter().copied().find(|k| *k == p).ok_or_else(|| {
                config_error(
                    format!(
                        "agent {}: unknown provider {:?} (expected one of: {})",
                        agent.id,
                        parley_protocol::preview(p, 40),
                        PROVIDERS.join(", ")
                    ),
                    "unknown",
                )
            })?,
            None if self.endpoint("openai-compatible", agent).is_some() => "openai-compatible",
            None if self.settings.openai_key.is_some() => "openai",
            None if self.settings.openrouter_key.is_some() => "openrouter",
            None => "local",
        };
        if let Some(limits) = self.limits.get(kind) {
            if !limits.allows(&agent.model) {
                return Err(LlmError::new(
                    ErrorKind::InvalidRequest,
                    kind,
                    format!(
                        "agent {}: model {:?} is not allowed for provider {kind} by the operator",
                        agent.id,
                        parley_protocol::preview(&agent.model, 80)
                    ),
                ));
            }
        }
        let base_url = match kind {
            "openai" => Some(
                self.endpoint(kind, agent)
                    .unwrap_or_else(|| OPENAI_BASE_URL.into()),
            ),
            "openrouter" => Some(
                self.endpoint(kind, agent)
                    .unwrap_or_else(|| OPENROUTER_BASE_URL.into()),
            ),
            "openai-compatible" => Some(self.endpoint(kind, agent).ok_or_else(|| {
                config_error(
                    format!(
                        "agent {}: provider openai-compatible has no endpoint: set \
                         providers.openai-compatible.baseUrl (or baseUrl) in the config",
                        agent.id
                    ),
                    kind,
                )
            })?),
            _ => None,
        };
        match kind {
            "openai" if self.settings.openai_key.is_none() => Err(config_error(
                format!(
                    "agent {} uses provider openai but {OPENAI_KEY_VAR} is not set",
                    agent.id
                ),
                kind,
            )),
            "openrouter" if self.settings.openrouter_key.is_none() => Err(config_error(
                format!(
                    "agent {} uses provider openrouter but {OPENROUTER_KEY_VAR} is not set",
                    agent.id
                ),
                kind,
            )),
            _ => Ok(Resolved { kind, base_url }),
        }
    }

    /// The client for `agent`, built on first use.
    pub fn provider_for(&self, agent: &AgentConfig) -> Result<Arc<dyn Provider>, LlmError> {
        let resolved = self.resolve(agent)?;
        if resolved.kind == "local" {
            return Ok(self.local()? as Arc<dyn Provider>);
        }
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&resolved) {
            return Ok(c.clone());
        }
        let url = resolved.base_url.clone().unwrap_or_default();
        let mut client = match resolved.kind {
            "openai" => OpenAiClient::new(
                "openai",
                url,
                self.settings
                    .openai_key
                    .clone()
                    .map(|k| (k, OPENAI_KEY_VAR)),
                Api::Responses,
            )?,
            "openrouter" => OpenAiClient::new(
                "openrouter",
                url,
                self.settings
                    .openrouter_key
                    .clone()
                    .map(|k| (k, OPENROUTER_KEY_VAR)),
                Api::ChatCompletions,
            )?,
            _ => OpenAiClient::new(
                "openai-compatible",
                url,
                self.settings
                    .compatible_key
                    .clone()
                    .map(|k| (k, COMPATIBLE_KEY_VAR)),
                Api::ChatCompletions,
            )?,
        };
        // 429s are handled by the wrapper, which pauses the key for every replica.
        client.retry.retry_rate_limited = false;
        let client: Arc<dyn Provider> = Arc::new(RateLimited::new(
            Arc::new(client),
            self.limiter.clone(),
            self.limits.clone(),
            self.settings
                .max_tokens
                .unwrap_or(parley_protocol::limits::DEFAULT_MAX_TOKENS),
        ));
        clients.insert(resolved, client.clone());
        Ok(client)
    }

    /// Embeddings of `inputs` from the provider and model `embedder` names (resolved like
    /// an agent: same endpoints, keys, allowed models and rate limits). The local model has
    /// no embedding mode: that is a configuration error saying so, before any model load.
    pub async fn embed(
        &self,
        embedder: &AgentConfig,
        inputs: &[String],
        timeout: std::time::Duration,
    ) -> Result<crate::Embeddings, LlmError> {
        if self.resolve(embedder)?.kind == "local" {
            return Err(config_error(
                "the local model has no embedding mode: similarity needs embeddings from a \
                 remote provider (embeddings.provider)",
                "local",
            ));
        }
        self.provider_for(embedder)?
            .embed(&crate::EmbedRequest {
                model: embedder.model.clone(),
                inputs: inputs.to_vec(),
                timeout,
            })
            .await
    }

    /// The shared local model provider, loading the model on first use.
    pub fn local(&self) -> Result<Arc<LocalProvider>, LlmError> {
        if let Some(p) = self.local.get() {
            return Ok(p.clone());
        }
        let model = parley_local::LocalModel::load(&self.settings.model_path)
            .map_err(|e| config_error(e.to_string(), "local"))?;
        let p = Arc::new(LocalProvider::new(Arc::new(model)));
        Ok(self.local.get_or_init(|| p).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(provider: Option<&str>, base_url: Option<&str>) -> AgentConfig {
        serde_json::from_value(serde_json::json!({
            "id": "a1", "name": "A", "role": "architect", "model": "m",
            "provider": provider, "baseUrl": base_url,
        }))
        .unwrap()
    }

    fn settings(openai: bool, openrouter: bool, base: Option<&str>) -> ProviderSettings {
        ProviderSettings {
            base_url: base.map(String::from),
            agent_base_urls: BTreeMap::new(),
            openai_key: openai.then(|| Secret::new("sk-test".into())),
            openrouter_key: openrouter.then(|| Secret::new("or-test".into())),
            compatible_key: None,
            model_path: PathBuf::from("/nonexistent"),
            max_tokens: None,
            env_base_urls: BTreeMap::new(),
        }
    }

    #[test]
    fn environment_endpoints_sit_between_the_config_and_the_public_api() {
        let mut s = settings(true, true, None);
        s.env_base_urls
            .insert("openai", "http://env-openai/v1".into());
        s.env_base_urls
            .insert("openrouter", "http://env-openrouter/v1".into());
        let url = |r: &Registry, p: &str| r.resolve(&agent(Some(p), None)).unwrap().base_url;
        let r = Registry::new(s.clone());
        assert_eq!(url(&r, "openai").as_deref(), Some("http://env-openai/v1"));
        assert_eq!(
            url(&r, "openrouter").as_deref(),
            Some("http://env-openrouter/v1")
        );
        // The config's endpoints win: providers.<p>.baseUrl, and openai's top-level one.
        let r = with_providers(
            s.clone(),
            serde_json::json!({"openrouter": {"baseUrl": "http://cfg-or/v1"}}),
        );
        assert_eq!(url(&r, "openrouter").as_deref(), Some("http://cfg-or/v1"));
        let mut top = s;
        top.base_url = Some("http://cfg-top/v1".into());
        assert_eq!(
            url(&Registry::new(top), "openai").as_deref(),
            Some("http://cfg-top/v1")
        );
        // Without them, the public APIs.
        let r = Registry::new(settings(true, true, None));
        assert_eq!(url(&r, "openai").as_deref(), Some(OPENAI_BASE_URL));
        assert_eq!(url(&r, "openrouter").as_deref(), Some(OPENROUTER_BASE_URL));
    }

    fn with_providers(s: ProviderSettings, providers: serde_json::Value) -> Registry {
        Registry::with_limits(
            s,
            serde_json::from_value(providers).unwrap(),
            Arc::new(LocalLimiter::default()),
        )
    }

    #[test]
    fn default_provider_order() {
        let r = Registry::new(settings(false, false, None));
        assert_eq!(r.resolve(&agent(None, None)).unwrap().kind, "local");
        let r = Registry::new(settings(true, true, None));
        assert_eq!(r.resolve(&agent(None, None)).unwrap().kind, "openai");
        let r = Registry::new(settings(false, true, None));
        assert_eq!(r.resolve(&agent(None, None)).unwrap().kind, "openrouter");
        let r = Registry::new(settings(true, false, Some("http://x/v1")));
        let res = r.resolve(&agent(None, None)).unwrap();
        assert_eq!(res.kind, "openai-compatible");
        assert_eq!(res.base_url.as_deref(), Some("http://x/v1"));
    }

    #[test]
    fn an_agents_own_base_url_is_never_used() {
        // With the operator's key for openai, a participant's endpoint must not get it.
        let r = Registry::new(settings(true, true, None));
        for p in ["openai", "openrouter"] {
            let res = r
                .resolve(&agent(Some(p), Some("http://evil.example/v1")))
                .unwrap();
            assert!(
                !res.base_url.unwrap().contains("evil"),
                "{p} used the participant's endpoint"
            );
        }
        let e = r
            .resolve(&agent(
                Some("openai-compatible"),
                Some("http://evil.example/v1"),
            ))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        // The embedded mode's local config names per-agent endpoints through the settings.
        let mut s = settings(false, false, None);
        s.agent_base_urls
            .insert("a1".into(), "http://local:8000/v1".into());
        let res = Registry::new(s).resolve(&agent(None, None)).unwrap();
        assert_eq!(res.kind, "openai-compatible");
        assert_eq!(res.base_url.as_deref(), Some("http://local:8000/v1"));
    }

    #[test]
    fn operator_endpoints_and_allow_lists_per_provider() {
        let r = with_providers(
            settings(true, false, Some("http://global/v1")),
            serde_json::json!({
                "openai": {"baseUrl": "http://gateway/v1", "allowedModels": ["m"]},
                "openai-compatible": {"allowedModels": ["other"]},
            }),
        );
        let res = r.resolve(&agent(Some("openai"), None)).unwrap();
        assert_eq!(res.base_url.as_deref(), Some("http://gateway/v1"));
        let e = r
            .resolve(&agent(Some("openai-compatible"), None))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidRequest);
        assert!(e.to_string().contains("\"m\" is not allowed"), "{e}");
    }

    #[test]
    fn missing_key_names_the_variable() {
        let r = Registry::new(settings(false, false, None));
        let e = r.resolve(&agent(Some("openai"), None)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(e.to_string().contains("OPENAI_API_KEY"), "{e}");
        let e = r.resolve(&agent(Some("openrouter"), None)).unwrap_err();
        assert!(e.to_string().contains("OPENROUTER_API_KEY"), "{e}");
        let e = r.resolve(&agent(Some("bogus"), None)).unwrap_err();
        assert!(e.to_string().contains("unknown provider \"bogus\""), "{e}");
        let e = r
            .resolve(&agent(Some("openai-compatible"), None))
            .unwrap_err();
        assert!(e.to_string().contains("baseUrl"), "{e}");
    }

    #[test]
    fn missing_model_file_is_a_config_error() {
        let r = Registry::new(settings(false, false, None));
        let e = r.provider_for(&agent(Some("local"), None)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(e.to_string().contains("fetch-model"), "{e}");
    }
}
