//! `parley serve`: the web page and its JSON API (see `parley_web`), over debates run in
//! this process (default) or a cluster (`--nats-url`).
//!
//! The form's defaults and every submitted debate come from the config the server was
//! started with (`--config`, default `./debate-config.json`), read like `parley run`
//! reads it; a submission chooses only the problem, the roles and the rounds. Embedded,
//! the config's endpoints and provider limits go to this process's provider registry;
//! with a cluster they are the operator's business and are not sent.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parley_cli::EmbeddedRunner;
use parley_engine::TaskRunner;
use parley_llm::ratelimit::LocalLimiter;
use parley_llm::{ProviderSettings, Registry};
use parley_protocol::{
    AgentConfig, DebateConfigFile, DebateSpec, ProviderLimits, SubmissionPolicy, KNOWN_PROVIDERS,
    KNOWN_ROLES,
};
use parley_web::backend::AgentView;
use parley_web::embedded::RunnerSource;
use parley_web::{AgentChoice, ProviderView};
use parley_web::{ApiError, Backend, FormDefaults, SpecSource, SubmitRequest};
use tokio_util::sync::CancellationToken;

use crate::config::{self, LoadedConfig, Overrides};
use crate::{report, run, CliError};

#[derive(clap::Args, Debug)]
#[command(
    mut_arg("nats_url", |a| a.env("PARLEY_SERVE_NATS_URL")),
    mut_arg("max_agents", |a| a.env("PARLEY_SERVE_MAX_AGENTS"))
)]
pub struct ServeArgs {
    /// Address to listen on; anything but loopback needs --auth-token or --api-keys.
    #[arg(long, env = "PARLEY_SERVE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Bearer token the API requires (at least 16 characters); the page asks for it.
    /// Without one, a token is generated and printed once, in the page's address
    /// (`http://127.0.0.1:8080/#token=...`).
    #[arg(
        long,
        env = "PARLEY_SERVE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        conflicts_with = "no_auth"
    )]
    pub auth_token: Option<String>,
    /// Serve a loopback address without any token: anyone who can reach it (other users
    /// of this machine, an SSH tunnel, a port-forward) can start debates on your keys.
    #[arg(long, conflicts_with = "api_keys")]
    pub no_auth: bool,
    /// Per-user API keys: a TOML (or `.json`) file listing each key's name, role (`user`:
    /// its own debates only; `admin`: all) and SHA-256, re-read every second while
    /// serving (a file that does not parse keeps the previous keys). See
    /// `--new-api-key`.
    #[arg(long, env = "PARLEY_SERVE_API_KEYS", value_name = "FILE")]
    pub api_keys: Option<PathBuf>,
    /// Print a new random API key for NAME and the entry to add to the --api-keys file
    /// (only its hash goes in the file), then exit.
    #[arg(long, value_name = "NAME")]
    pub new_api_key: Option<String>,
    /// Webhook endpoints: a TOML file listing each endpoint's URL and `whsec_` secret
    /// (and, optionally, the events of every debate it gets, and whether it may be on a
    /// private network). A debate may name only these URLs; see the book's Webhooks page.
    #[arg(long, env = "PARLEY_SERVE_WEBHOOKS", value_name = "FILE")]
    pub webhooks: Option<PathBuf>,
    /// Print a new random webhook secret (`whsec_...`) for the --webhooks file, then exit.
    #[arg(long)]
    pub new_webhook_secret: bool,
    /// The role of --new-api-key's key: `user` or `admin`.
    #[arg(long, value_name = "ROLE", default_value = "user", value_parser = ["user", "admin"])]
    pub api_key_role: String,
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// Builds specs from the server's config, as `parley run` does from its flags.
struct ConfigSpecs {
    file: DebateConfigFile,
    base_dir: PathBuf,
    /// Embedded: the prices and cap a debate's budget is admitted with (`None` in front of
    /// a cluster, whose coordinator admits it).
    pricing: Option<parley_engine::Pricing>,
    /// The config's `providers` section: the providers the editor offers (all known ones
    /// when it names none) and their model allow-lists, enforced on every submission.
    providers: BTreeMap<String, ProviderLimits>,
    /// The most agents one debate may have.
    max_agents: usize,
}

impl ConfigSpecs {
    fn loaded(&self) -> LoadedConfig {
        LoadedConfig {
            file: self.file.clone(),
            base_dir: self.base_dir.clone(),
        }
    }

    /// The providers an agent may name: the config's `providers` section, or every known
    /// provider when it has none.
    fn provider_names(&self) -> Vec<String> {
        if self.providers.is_empty() {
            KNOWN_PROVIDERS.iter().map(|p| p.to_string()).collect()
        } else {
            self.providers.keys().cloned().collect()
        }
    }

    /// The editor's agents as config agents: each starts from the config's first agent of
    /// its role (prompts, tools, limits) or the built-in agent of a known role, and takes
    /// the name, model, provider and temperature chosen; ids are the template's, made
    /// unique (`-2`, `-3`, ...) when two agents share a role. Every problem is reported
    /// at once, each with its field (`agents[1].role`).
    fn editor_agents(&self, choices: &[AgentChoice]) -> Result<Vec<AgentConfig>, ApiError> {
        let providers = self.provider_names();
        let configured: Vec<&AgentConfig> = self.file.agents.iter().flatten().collect();
        let mut problems = Vec::new();
        let mut ids = BTreeSet::new();
        let mut out = Vec::with_capacity(choices.len());
        for (i, c) in choices.iter().enumerate() {
            let field = format!("agents[{i}]");
            let role = c.role.trim();
            let template = match configured.iter().find(|a| a.role == role) {
                Some(a) => (*a).clone(),
                None if KNOWN_ROLES.contains(&role) => config::default_agent(role),
                None => {
                    let mut roles: BTreeSet<&str> = KNOWN_ROLES.iter().copied().collect();
                    roles.extend(configured.iter().map(|a| a.role.as_str()));
                    problems.push(format!(
                        "{field}.role: unknown role {:?} (roles: {})",
                        parley_protocol::preview(role, 40),
                        roles.into_iter().collect::<Vec<_>>().join(", ")
                    ));
                    continue;
                }
            };
            let human = c.provider.as_deref() == Some(parley_protocol::HUMAN_PROVIDER);
            if let Some(p) = c.provider.as_ref().filter(|_| !human) {
                if !providers.contains(p) {
                    problems.push(format!(
                        "{field}.provider: {:?} is not a provider of this server (providers: {}, \
                         or human for a person)",
                        parley_protocol::preview(p, 40),
                        providers.join(", ")
                    ));
                }
            }
            let mut a = template;
            let mut id = a.id.clone();
            let mut n = 2;
            while !ids.insert(id.clone()) {
                id = format!("{}-{n}", a.id);
                n += 1;
            }
            a.id = id;
            a.name = c.name.trim().to_string();
            a.role = role.to_string();
            a.model = if human {
                String::new()
            } else {
                c.model.trim().to_string()
            };
            a.provider = c.provider.clone();
            if let Some(t) = c.temperature {
                a.temperature = t;
            }
            a.enabled = Some(true);
            out.push(a);
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(ApiError::invalid(problems.join("; ")))
        }
    }
}

impl SpecSource for ConfigSpecs {
    fn defaults(&self) -> FormDefaults {
        // (A config without agents runs the built-in ones.)
        let agents: Vec<AgentView> = self
            .file
            .agents
            .clone()
            .unwrap_or_else(config::default_agents)
            .iter()
            .filter(|a| a.is_enabled())
            .map(AgentView::from)
            .collect();
        let judge = self
            .file
            .judge
            .clone()
            .unwrap_or_else(config::default_judge);
        let mut roles: BTreeSet<String> = KNOWN_ROLES.iter().map(|r| r.to_string()).collect();
        roles.extend(self.file.agents.iter().flatten().map(|a| a.role.clone()));
        FormDefaults {
            agents,
            judge: AgentView::from(&judge),
            rounds: self
                .file
                .debate
                .as_ref()
                .map_or_else(|| config::default_debate().rounds, |d| d.rounds),
            max_rounds: parley_protocol::limits::MAX_ROUNDS,
            roles: roles.into_iter().collect(),
            clarify: self
                .file
                .debate
                .as_ref()
                .is_some_and(|d| d.interactive_clarifications),
            max_agents: self.max_agents,
            providers: self
                .provider_names()
                .into_iter()
                .map(|name| ProviderView {
                    allowed_models: self
                        .providers
                        .get(&name)
                        .and_then(|p| p.allowed_models.clone()),
                    name,
                })
                .collect(),
            models: {
                let mut models: BTreeSet<String> = self
                    .providers
                    .values()
                    .filter_map(|p| p.allowed_models.clone())
                    .flatten()
                    .collect();
                models.extend(self.file.agents.iter().flatten().map(|a| a.model.clone()));
                models.insert(judge.model.clone());
                models.into_iter().collect()
            },
        }
    }

    fn build(&self, request: &SubmitRequest) -> Result<DebateSpec, ApiError> {
        self.build_spec(request)
    }
}

impl ConfigSpecs {
    /// The spec of `request`, its options (termination, mode, budget, context) applied
    /// before the validation and the budget's admission.
    fn build_spec(&self, request: &SubmitRequest) -> Result<DebateSpec, ApiError> {
        let overrides = Overrides {
            roles: request.roles.clone(),
            rounds: request.rounds,
            clarify: request.clarify,
            ..Default::default()
        };
        let mut loaded = self.loaded();
        if let Some(choices) = &request.agents {
            if choices.len() > self.max_agents {
                return Err(ApiError::invalid(format!(
                    "agents: {} agents, this server allows at most {}",
                    choices.len(),
                    self.max_agents
                )));
            }
            loaded.file.agents = Some(self.editor_agents(choices)?);
        }
        let mut warn = |w: String| tracing::warn!("{w}");
        let mut spec =
            config::assemble_spec(loaded, request.problem.clone(), &overrides, &mut warn).map_err(
                |e| {
                    // The form's field, not the CLI flag.
                    let message = match e.message.strip_prefix("--agents: ") {
                        Some(rest) => format!("roles: {rest}"),
                        None => e.message,
                    };
                    ApiError::invalid(message)
                },
            )?;
        request.apply_options(&mut spec);
        let active = spec.active_agents().count();
        if active > self.max_agents {
            return Err(ApiError::invalid(format!(
                "agents: {active} agents, this server allows at most {}",
                self.max_agents
            )));
        }
        // The submission's validation, every problem named by its field
        // (`agents[1].temperature`); for agents from the editor with the operator's policy
        // (the model allow-lists), as a coordinator applies it. The config's own agents are
        // the operator's choice (their providers check models when called).
        let policy = match &request.agents {
            Some(_) => SubmissionPolicy {
                providers: self.providers.clone(),
                ..Default::default()
            },
            None => SubmissionPolicy::default(),
        };
        spec.validate_with(&policy)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        // As `parley run` does: a budget that cannot work is refused before any call.
        if let Some(pricing) = &self.pricing {
            parley_engine::budget::admit(&mut spec, &Default::default(), pricing)
                .map_err(|e| ApiError::invalid(e.to_string()))?;
        }
        Ok(spec)
    }
}

/// The embedded runner over one provider registry (one rate limiter for every debate).
struct Runners {
    registry: Arc<Registry>,
}

impl RunnerSource for Runners {
    fn runner(&self, spec: &DebateSpec) -> Result<Arc<dyn TaskRunner>, ApiError> {
        // A human participant calls no provider.
        let callers = spec.active_agents().filter(|a| !a.is_human());
        for a in callers.chain(std::iter::once(&spec.judge)) {
            let r = self
                .registry
                .resolve(a)
                .map_err(|e| ApiError::invalid(format!("agent {}: {e}", a.id)))?;
            if r.kind == "local" {
                self.registry
                    .local()
                    .map_err(|e| ApiError::invalid(e.message))?;
            }
        }
        Ok(Arc::new(EmbeddedRunner {
            registry: self.registry.clone(),
            // The page does not upload a context directory (yet): no agent tools' files.
            context_files: spec.context_files.clone().map(Arc::new),
        }))
    }
}

/// `estimate_debate`: `parley estimate`'s simulation of the debate a request would start,
/// built from the server's config as a submission is (with the call's options).
struct ConfigEstimator {
    specs: Arc<ConfigSpecs>,
    prices: parley_protocol::PriceTable,
    /// Which provider each participant would call (the config's endpoints, this
    /// process's environment), as `parley estimate` resolves it.
    endpoints: config::Endpoints,
    limits: BTreeMap<String, ProviderLimits>,
    /// In front of a cluster: its connection, to ask what its calls used
    /// (`parley.debates.calibration`); embedded, the debates saved here calibrate.
    cluster: Option<async_nats::Client>,
}

impl parley_mcp::Estimator for ConfigEstimator {
    fn estimate(&self, request: &SubmitRequest) -> Result<serde_json::Value, ApiError> {
        let spec = self.specs.build_spec(request)?;
        let mut settings = ProviderSettings::from_env(self.endpoints.base_url.clone());
        settings.agent_base_urls = self.endpoints.per_agent.clone();
        let registry = Registry::with_limits(
            settings,
            self.limits.clone(),
            Arc::new(LocalLimiter::default()),
        );
        let local = |a: &AgentConfig| {
            registry
                .resolve(a)
                .map(|r| r.kind.to_string())
                .unwrap_or_else(|_| a.provider.clone().unwrap_or_else(|| "unknown".into()))
        };
        let (calibration, provider_of) = match &self.cluster {
            // Learned from the cluster's calls (this runs on a blocking thread of the
            // runtime); unreachable: assumed, with a warning.
            Some(client) => {
                let learned = tokio::runtime::Handle::current()
                    .block_on(crate::remote::cluster_calibration(client))
                    .unwrap_or_else(|e| {
                        eprintln!(
                            "warning: estimate without the cluster's calibration: {}",
                            e.message
                        );
                        Default::default()
                    });
                let provider_of =
                    parley_cli::calibration::cluster_provider_of(learned.clone(), local);
                (learned, provider_of)
            }
            // Learned from the debates saved here (see `parley_cli::calibration`).
            None => (
                parley_cli::calibration::load(
                    std::path::Path::new(parley_cli::DEBATES_DIR),
                    &local,
                ),
                Box::new(local) as Box<dyn Fn(&AgentConfig) -> String + '_>,
            ),
        };
        let assumptions = parley_cli::estimate::Assumptions {
            calibration,
            ..Default::default()
        };
        let estimate =
            parley_cli::estimate::estimate(&spec, &self.prices, &provider_of, &assumptions)
                .map_err(|e| ApiError::internal(e.to_string()))?;
        serde_json::to_value(&estimate).map_err(|e| ApiError::internal(e.to_string()))
    }
}

/// The flags that choose and set up the backend, shared by `serve` and `mcp`. The two
/// commands differ only in the variables of `--nats-url` and `--max-agents`
/// (`PARLEY_SERVE_*`, `PARLEY_MCP_*`), which each sets on its own arguments (`mut_arg`).
#[derive(clap::Args, Debug)]
pub struct BackendArgs {
    /// Front this cluster over NATS instead of running debates in this process. Repeat
    /// the flag, or separate URLs with commas, to name several servers of one NATS
    /// cluster (the connection fails over between them). From the environment
    /// (`PARLEY_SERVE_NATS_URL` for `serve`, `PARLEY_MCP_NATS_URL` for `mcp`), a URL
    /// holding a password stays out of the process's command line.
    #[arg(
        long,
        hide_env_values = true,
        value_name = "URL",
        value_delimiter = ','
    )]
    pub nats_url: Vec<String>,
    /// NATS credentials file for --nats-url: a `.creds` file or an NKey seed file.
    #[arg(long, env = "PARLEY_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// Inbox prefix of this server's NATS replies [default: `_INBOX_<user>` for a user in
    /// the URL, else `_INBOX`].
    #[arg(long, env = "PARLEY_NATS_INBOX_PREFIX", value_name = "PREFIX")]
    pub nats_inbox_prefix: Option<String>,
    /// With --nats-url: debates' event streams followed at once (each is a consumer in the
    /// cluster); past it a new stream is refused (a page's with a 503).
    #[arg(long, env = "PARLEY_MAX_EVENT_STREAMS", value_name = "N",
          default_value_t = parley_web::cluster::DEFAULT_MAX_EVENT_STREAMS as u32,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_event_streams: u32,
    /// Debate configuration: the settings of every debate (the page's form defaults, the
    /// debates an MCP tool call starts) (default ./debate-config.json).
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Load environment variables (API keys) from this file (default ./.env when present).
    #[arg(short = 'e', long, value_name = "FILE")]
    pub env_file: Option<PathBuf>,
    /// The most agents one debate may have (the page's editor offers 1 to N).
    #[arg(long, value_name = "N",
          default_value_t = parley_protocol::limits::MAX_AGENTS as u32,
          value_parser = clap::value_parser!(u32).range(1..=parley_protocol::limits::MAX_AGENTS as i64))]
    pub max_agents: u32,
    /// Embedded: the LiteLLM-format price file calls are charged at (default: the
    /// config's `prices`), with the config's inline prices; also the prices of
    /// `estimate_debate`. In front of a cluster the operator's services price the calls.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Embedded: the key each finished debate's decision record
    /// (`./debates/<id>.record.json`) is signed with; in front of a cluster the coordinator
    /// signs.
    #[command(flatten)]
    pub signing: crate::decisions::SigningArgs,
}

/// A backend ready to serve, and what its users need beside it.
pub struct OpenBackend {
    pub backend: Arc<dyn Backend>,
    /// The embedded backend, to wait for its debates to be saved at the end.
    pub embedded: Option<parley_web::EmbeddedBackend>,
    /// Estimates of the debates this server's config makes (`estimate_debate`).
    pub estimator: Arc<dyn parley_mcp::Estimator>,
    /// In front of a cluster: the NATS connection and the backend (webhook deliveries).
    pub cluster: Option<(async_nats::Client, Arc<parley_web::ClusterBackend>)>,
}

/// Loads the config and opens the backend `flags` name: the cluster's over NATS, or this
/// process's (resuming the debates a previous run left running; they stop and are saved
/// when `shutdown` fires).
pub async fn open_backend(
    flags: &BackendArgs,
    shutdown: &CancellationToken,
) -> Result<OpenBackend, CliError> {
    // A bad key file stops here (exit 4), before anything runs.
    let record_key = flags.signing.load()?;
    let mut warn = |w: String| eprintln!("warning: {w}");
    // The config's endpoints go to the embedded backend's registry (never into a spec); in
    // front of a cluster they are not sent.
    let (loaded, endpoints, limits) = config::load_as_operator(flags.config.as_deref(), &mut warn)?;
    // Embedded, this process charges the calls (a bad price file: exit 4, naming it).
    let nats_url = (!flags.nats_url.is_empty()).then(|| flags.nats_url.join(","));
    let (pricing, prices) = match nats_url {
        // In front of a cluster its services price the calls; the estimates use the local
        // price file when it can be read.
        Some(_) => (
            None,
            config::load_prices(flags.prices.as_deref(), &loaded).unwrap_or_else(|e| {
                eprintln!("warning: estimates without prices: {}", e.message);
                parley_protocol::PriceTable::new()
            }),
        ),
        None => {
            let prices = config::load_prices(flags.prices.as_deref(), &loaded)?;
            parley_llm::set_prices(prices.clone());
            (
                Some(parley_engine::Pricing::new(
                    prices.clone(),
                    parley_protocol::limits::DEFAULT_MAX_TOKENS,
                )),
                prices,
            )
        }
    };
    let specs = Arc::new(ConfigSpecs {
        file: loaded.file,
        base_dir: loaded.base_dir,
        pricing: pricing.clone(),
        providers: limits.clone(),
        max_agents: flags.max_agents as usize,
    });
    let mut estimator = ConfigEstimator {
        specs: specs.clone(),
        prices,
        endpoints: endpoints.clone(),
        limits: limits.clone(),
        cluster: None,
    };
    // The config must make a debate before anything is served.
    let probe = SubmitRequest {
        problem: "(configuration check)".into(),
        ..Default::default()
    };
    let default_spec = specs
        .build(&probe)
        .map_err(|e| CliError::config(e.message))?;

    let mut embedded = None;
    let mut cluster = None;
    let backend: Arc<dyn Backend> = match &nats_url {
        Some(url) => {
            if !endpoints.is_empty() {
                eprintln!(
                    "note: not sending the endpoints of the local config ({}): the cluster's \
                     operator chooses where calls go",
                    endpoints.describe()
                );
            }
            let endpoint = parley_cluster::NatsEndpoint::client(
                url.clone(),
                flags.nats_creds.clone(),
                flags.nats_inbox_prefix.as_deref(),
            )
            .map_err(|e| CliError::usage(format!("{e:#}")))?;
            let client = parley_cluster::nats::connect_client(&endpoint, Duration::from_secs(10))
                .await
                .map_err(|e| CliError::general(format!("{e:#}")))?;
            let backend = Arc::new(parley_web::ClusterBackend::with_max_event_streams(
                client.clone(),
                specs,
                report::markdown,
                flags.max_event_streams as usize,
            ));
            estimator.cluster = Some(client.clone());
            cluster = Some((client, backend.clone()));
            backend
        }
        None => {
            let mut settings = ProviderSettings::from_env(endpoints.base_url);
            settings.agent_base_urls = endpoints.per_agent;
            let registry = Arc::new(Registry::with_limits(
                settings,
                limits,
                Arc::new(LocalLimiter::default()),
            ));
            let runners = Runners {
                registry: registry.clone(),
            };
            // Loads the local model now (when the default debate uses it), not at the
            // first submission; a provider without its key stops here (exit 4).
            for a in default_spec
                .active_agents()
                .filter(|a| !a.is_human())
                .chain(std::iter::once(&default_spec.judge))
            {
                let r = registry
                    .resolve(a)
                    .map_err(|e| CliError::config(e.to_string()))?;
                if r.kind == "local" {
                    config::load_local_model(&registry)?;
                    break;
                }
            }
            runners
                .runner(&default_spec)
                .map_err(|e| CliError::config(e.message))?;
            let backend = parley_web::EmbeddedBackend::new(
                run::DEBATES_DIR,
                specs,
                Arc::new(runners),
                report::markdown,
                shutdown.clone(),
            )
            .with_pricing(pricing.unwrap_or_default())
            .with_record_key(record_key.map(Arc::new));
            for id in backend.resume_interrupted().await {
                eprintln!("Resuming debate {id}");
            }
            embedded = Some(backend.clone());
            Arc::new(backend)
        }
    };
    Ok(OpenBackend {
        backend,
        embedded,
        estimator: Arc::new(estimator),
        cluster,
    })
}

pub async fn serve(args: ServeArgs, interrupt: &CancellationToken) -> Result<(), CliError> {
    if let Some(name) = &args.new_api_key {
        if !parley_protocol::is_valid_id(name) {
            return Err(CliError::usage(format!(
                "--new-api-key: {:?} is not a key name (1-64 of A-Z a-z 0-9 _ -)",
                parley_protocol::preview(name, 40)
            )));
        }
        let (key, hash) = parley_web::keys::new_key();
        println!(
            "API key for {name} (give it to its user; it is not stored anywhere):\n\n  {key}\n"
        );
        println!("Add to the --api-keys file:\n");
        println!(
            "[[keys]]\nname = \"{name}\"\nrole = \"{}\"\nsha256 = \"{hash}\"",
            args.api_key_role
        );
        return Ok(());
    }
    if args.new_webhook_secret {
        println!("{}", parley_webhooks::Secret::generate());
        return Ok(());
    }
    // A bad endpoint file stops the start (exit 4), naming every problem.
    let webhooks = match &args.webhooks {
        Some(path) => Some(Arc::new(
            parley_webhooks::Endpoints::load(path)
                .map_err(|e| CliError::config(format!("--webhooks: {e}")))?,
        )),
        None => None,
    };
    let OpenBackend {
        backend,
        embedded,
        cluster,
        estimator,
    } = open_backend(&args.backend, interrupt).await?;
    let kind = backend.kind();
    // The MCP server over streamable HTTP at /mcp, behind the API's credentials.
    let mcp = parley_mcp::http_router(
        parley_mcp::ParleyMcp::new(backend.clone(), estimator),
        interrupt.child_token(),
    );
    let options = parley_web::ServeOptions {
        token: args.auth_token.clone(),
        no_auth: args.no_auth,
        api_keys: args.api_keys.clone(),
        webhooks: webhooks.clone(),
        mcp: Some(mcp),
        ..parley_web::ServeOptions::new(args.listen)
    };
    // Deliveries stop with the server; what is not delivered stays in the outbox.
    let mut outbox = None;
    let mut consumer = None;
    if let Some(endpoints) = webhooks {
        if let Some(e) = &embedded {
            outbox = Some(
                parley_web::webhooks::start_embedded(e, endpoints, interrupt.clone())
                    .await
                    .map_err(|e| CliError::general(e.to_string()))?,
            );
        } else if let Some((client, backend)) = cluster {
            consumer = Some(
                parley_web::webhooks::start_cluster(client, backend, endpoints, interrupt.clone())
                    .map_err(|e| CliError::general(e.to_string()))?,
            );
        }
    }
    let server = parley_web::Server::bind(options, backend)
        .await
        .map_err(|e| match e {
            parley_web::ServeError::TokenRequired(_)
            | parley_web::ServeError::BadToken(_)
            | parley_web::ServeError::AuthConflict => CliError::usage(e.to_string()),
            parley_web::ServeError::BadKeys(_) => CliError::config(e.to_string()),
            _ => CliError::general(e.to_string()),
        })?;
    // The generated token is printed here, once (never logged); a token the operator gave
    // is not printed at all.
    eprintln!(
        "Parley is serving {kind} debates on {} (Ctrl-C to stop)",
        server.sign_in_url()
    );
    if args.no_auth {
        eprintln!(
            "warning: --no-auth: anyone who can reach {} can start debates on this \
             machine's API keys",
            server.local_addr()
        );
    }
    let served = server.run(interrupt.clone()).await;
    if let Some(o) = outbox {
        o.stopped().await;
    }
    if let Some(c) = consumer {
        let _ = c.await;
    }
    if let Some(e) = embedded {
        e.stopped().await;
        eprintln!("Saved the debates in flight to {}", run::DEBATES_DIR);
    }
    served.map_err(|e| CliError::general(e.to_string()))
}
