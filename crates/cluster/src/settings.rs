//! Service settings of the coordinator and the workers, layered:
//! built-in defaults → a TOML settings file (`--settings FILE` / `PARLEY_SETTINGS`) →
//! `PARLEY_*` environment variables → command-line flags. The result is validated once at
//! start-up, and every problem is reported at once, each naming its key.
//!
//! One settings file serves every service of a deployment; each takes the keys it uses:
//!
//! ```toml
//! nats_url = "nats://nats:4222"        # PARLEY_NATS_URL, --nats-url (may carry user:password@ or token@)
//! nats_creds = "worker.creds"          # PARLEY_NATS_CREDS, --nats-creds (.creds or NKey seed file)
//! nats_inbox_prefix = "_INBOX_agent_worker" # PARLEY_NATS_INBOX_PREFIX (default: the role's, see `nats`)
//! redis_min_replicas = 1               # PARLEY_REDIS_MIN_REPLICAS: checkpoint and result writes wait (WAIT) for this many Redis replicas (default 0)
//! stream_replicas = 3                  # PARLEY_STREAM_REPLICAS, --stream-replicas: replicas of the JetStream streams and the stash bucket (1 to 5)
//! redis_url = "redis://redis:6379"     # PARLEY_REDIS_URL, --redis-url; or redis+sentinel://s1:26379,s2:26379/<master>, or redis+cluster://n1:6379,n2:6379 (see `redis_conn`)
//! metrics_addr = "0.0.0.0:9090"        # PARLEY_METRICS_ADDR, --metrics-addr ("off" disables)
//! lease_ttl_ms = 10000                 # coordinator
//! concurrency = 8                      # workers
//! drain_secs = 20                      # drain deadline; workers (20), coordinator (10)
//! ack_wait_secs = 30                   # workers
//! config = "debate-config.json"        # operator config (providers); relative to the settings file
//! retention = "7d"                     # coordinator: finished debates' Redis keys ("0": forever)
//! task_deadline_margin_secs = 300      # coordinator: added to each task's timeout
//! max_tokens = 16384                   # coordinator: cap on a participant's maxTokens; workers: cap on every call
//! max_pending_requests = 256           # coordinator: requests handled at once
//! max_followers = 512                  # coordinator: event followers (consumers) open at once
//! clarification_timeout_secs = 3600    # coordinator: unanswered clarification questions become "NA" (default: a day)
//! rest_after_secs = 30                 # coordinator: a debate idle this long while it waits goes to rest ("0": never)
//! max_debate_usd = 5.0                 # coordinator: cap on one debate's spend (and its budget when it sets none)
//! max_debate_tokens = 2000000          # coordinator: the same in tokens
//! prices = "model_prices.json"         # PARLEY_PRICES, --prices: LiteLLM-format price file; relative to the settings file
//! record_signing_key = "record-signing.key" # coordinator: PARLEY_RECORD_SIGNING_KEY, --record-signing-key: Ed25519 key signing decision records; relative to the settings file
//! ```
//!
//! The layers are merged by the `config` crate ([`SettingsFile::layered`]): a service's
//! defaults, then the file, then its flags. Environment variables and flags are read by
//! clap (`env` on each flag), so they arrive together as one layer ([`Layer`]) in which a
//! flag wins over its variable. A service adds a key by giving [`SettingsFile`] a field and
//! its [`Layer`]s the key's default and flag.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
pub const DEFAULT_LEASE_TTL_MS: u64 = 10_000;
pub const DEFAULT_CONCURRENCY: usize = 8;
pub const DEFAULT_DRAIN_SECS: u64 = 20;
pub const DEFAULT_ACK_WAIT_SECS: u64 = 30;
/// Replicas of each JetStream stream (and the result-stash bucket): 1 on a single
/// `nats-server`, 3 on a JetStream cluster.
pub const DEFAULT_STREAM_REPLICAS: usize = 1;
/// The most replicas JetStream keeps of a stream.
pub const MAX_STREAM_REPLICAS: usize = 5;
/// How long a finished debate's keys stay in Redis.
pub const DEFAULT_RETENTION: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);
/// Added to a task's timeout to make its deadline in the coordinator: the time a task may
/// wait in the queue (a backlog) plus the worker's patience with Redis and NATS.
pub const DEFAULT_TASK_DEADLINE_MARGIN_SECS: u64 = 300;

/// A duration setting: a number of seconds, or a number with a unit `s`, `m`, `h` or `d`
/// (`"90s"`, `"12h"`, `"7d"`). `0` means "no limit" where a setting says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DurationSetting {
    Secs(u64),
    Text(String),
}

impl DurationSetting {
    pub fn parse(&self) -> Result<std::time::Duration, String> {
        match self {
            Self::Secs(n) => Ok(std::time::Duration::from_secs(*n)),
            Self::Text(t) => parse_duration(t),
        }
    }
}

/// Parses `"0"`, `"45"` (seconds), `"90s"`, `"15m"`, `"12h"`, `"7d"`.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 30s, 15m, 12h, 7d, or 0)"))?;
    let per = match unit.trim() {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 24 * 3600,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (use s, m, h or d)"
            ))
        }
    };
    n.checked_mul(per)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// A duration as the settings write it: `7d`, `12h`, `15m`, `30s`, `0`.
pub fn format_duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0".into(),
        s if s % (24 * 3600) == 0 => format!("{}d", s / (24 * 3600)),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// The settings file: every key any service takes; an unknown key is an error. Also the
/// merged result of the layers (a key no layer sets is `None`).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_addr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_wait_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<DurationSetting>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_deadline_margin_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_creds: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_inbox_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending_requests: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_followers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clarification_timeout_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest_after_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prices: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_debate_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_debate_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_replicas: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_min_replicas: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_signing_key: Option<PathBuf>,
}

impl SettingsFile {
    /// Reads `path` (none: an empty layer). Relative `config` paths are made relative to
    /// the settings file's folder.
    pub fn load(path: Option<&Path>) -> Result<Self, String> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let named = |e: config::ConfigError| format!("settings file {}: {e}", path.display());
        // (Read here, so a missing or unreadable file is named with the OS's reason.)
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("settings file {}: {e}", path.display()))?;
        let mut file: Self = config::Config::builder()
            .add_source(config::File::from_str(&text, config::FileFormat::Toml))
            .build()
            .and_then(config::Config::try_deserialize)
            .map_err(named)?;
        for c in [
            file.config.as_mut(),
            file.nats_creds.as_mut(),
            file.prices.as_mut(),
            file.record_signing_key.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            if c.is_relative() {
                if let Some(dir) = path.parent() {
                    *c = dir.join(&*c);
                }
            }
        }
        Ok(file)
    }
}

/// One layer of settings given in code: a service's defaults, or the values its flags and
/// `PARLEY_*` variables carry. A key left unset is left to the layers below.
#[derive(Debug, Default, Clone)]
pub struct Layer(Vec<(&'static str, config::Value)>);

impl Layer {
    /// Sets `key` to `value` when there is one.
    pub fn with<T: Into<config::Value>>(mut self, key: &'static str, value: Option<T>) -> Self {
        if let Some(v) = value {
            self.0.push((key, v.into()));
        }
        self
    }

    /// A path's value (settings hold paths as text).
    pub fn with_path(self, key: &'static str, value: Option<&Path>) -> Self {
        self.with(key, value.map(|p| p.to_string_lossy().into_owned()))
    }
}

impl SettingsFile {
    /// The layers merged by the `config` crate, lowest first: `defaults`, `file` (a loaded
    /// settings file, its relative paths already resolved), `flags`.
    pub fn layered(defaults: &Layer, file: &SettingsFile, flags: &Layer) -> Result<Self, String> {
        let merge = || -> Result<Self, config::ConfigError> {
            let mut b = config::Config::builder();
            for (key, value) in &defaults.0 {
                b = b.set_default(*key, value.clone())?;
            }
            b = b.add_source(config::Config::try_from(file)?);
            for (key, value) in &flags.0 {
                b = b.set_override(*key, value.clone())?;
            }
            b.build()?.try_deserialize()
        };
        merge().map_err(|e| format!("cannot merge the settings layers: {e}"))
    }
}

/// Collects every problem found while resolving settings.
#[derive(Debug, Default)]
pub struct Problems(Vec<String>);

impl Problems {
    pub fn push(&mut self, key: &str, problem: impl std::fmt::Display) {
        self.0.push(format!("{key}: {problem}"));
    }

    /// `Err` with one line per problem, or `Ok` when there are none.
    pub fn into_result(self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(format!("invalid settings:\n  {}", self.0.join("\n  ")))
        }
    }
}

/// The layered value: flag/environment, else file, else default.
pub fn pick<T>(cli: Option<T>, file: Option<T>, default: T) -> T {
    cli.or(file).unwrap_or(default)
}

/// Settings every service shares.
#[derive(Debug, Clone, PartialEq)]
pub struct CommonSettings {
    pub nats_url: String,
    /// NATS credentials file (`.creds` or NKey seed).
    pub nats_creds: Option<PathBuf>,
    /// Inbox prefix of this service's NATS replies; `None`: its role's
    /// ([`crate::nats::INBOX_COORDINATOR`], [`crate::nats::inbox_worker`]).
    pub nats_inbox_prefix: Option<String>,
    pub redis_url: String,
    /// Replicas of the JetStream streams and the result-stash bucket (1 to
    /// [`MAX_STREAM_REPLICAS`]; at most the number of JetStream servers).
    pub stream_replicas: usize,
    /// Redis replicas each checkpoint and result write waits for (`WAIT`, see
    /// [`crate::RedisStore::with_min_replicas`]); 0: none.
    pub redis_min_replicas: usize,
    pub metrics_addr: Option<SocketAddr>,
    /// The price file's prices (empty without one); the services add the operator
    /// config's inline prices.
    pub prices: parley_protocol::PriceTable,
}

/// Flags (with their `PARLEY_*` variables) every service takes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// TOML settings file (see the docs of `parley_cluster::settings`).
    #[arg(long, env = "PARLEY_SETTINGS", value_name = "FILE")]
    pub settings: Option<PathBuf>,
    /// NATS server URL (`nats://`, `tls://`; may carry credentials), or several separated
    /// by commas (the servers of one cluster: the client fails over between them)
    /// [default: nats://127.0.0.1:4222].
    #[arg(long, env = "PARLEY_NATS_URL")]
    pub nats_url: Option<String>,
    /// NATS credentials file: a `.creds` file (JWT + seed) or an NKey seed file.
    #[arg(long, env = "PARLEY_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// Inbox prefix of this service's NATS replies (the only subjects its NATS user may
    /// receive replies on) [default: `_INBOX_coordinator`, `_INBOX_agent_worker`,
    /// `_INBOX_judge_worker`].
    #[arg(long, env = "PARLEY_NATS_INBOX_PREFIX", value_name = "PREFIX")]
    pub nats_inbox_prefix: Option<String>,
    /// Redis URL (`redis://`, `rediss://`; may carry credentials), or the sentinels of a
    /// replicated Redis: `redis+sentinel://[:password@]host:26379[,host:26379...]/<master
    /// name>[/db]`, or nodes of a Redis Cluster: `redis+cluster://[:password@]host:6379[,...]`
    /// (`rediss+cluster://` with TLS) [default: redis://127.0.0.1:6379].
    #[arg(long, env = "PARLEY_REDIS_URL")]
    pub redis_url: Option<String>,
    /// Address of `/metrics`, `/healthz` and `/readyz`, or `off` [default: 0.0.0.0:9090].
    #[arg(long, env = "PARLEY_METRICS_ADDR")]
    pub metrics_addr: Option<String>,
    /// LiteLLM-format price file (`model_prices_and_context_window.json`): what each call
    /// costs. Without one only `local` has a cost (0); others are "unknown".
    #[arg(long, env = "PARLEY_PRICES", value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Replicas of the JetStream streams and the result-stash bucket: 3 on a 3-node
    /// JetStream cluster (a stream then survives the loss of one node) [default: 1].
    #[arg(long, env = "PARLEY_STREAM_REPLICAS", value_name = "N")]
    pub stream_replicas: Option<usize>,
    /// Redis replicas every checkpoint and result write waits for (`WAIT`, up to 500 ms)
    /// before it counts as done, so it survives a failover: one replication round trip
    /// per write [default: 0].
    #[arg(long, env = "PARLEY_REDIS_MIN_REPLICAS", value_name = "N")]
    pub redis_min_replicas: Option<usize>,
}

impl CommonArgs {
    /// Loads the settings file and resolves the shared settings, recording problems:
    /// [`CommonArgs::resolve_layered`] without service keys.
    pub fn resolve(&self, problems: &mut Problems) -> (SettingsFile, CommonSettings) {
        self.resolve_layered(problems, Layer::default(), Layer::default())
    }

    /// Loads the settings file and merges the layers (see [`SettingsFile::layered`]): the
    /// service's `defaults` and `flags` for its own keys, with the shared keys added to
    /// them here. Returns the merged settings and the shared ones resolved, recording
    /// every problem with its key.
    pub fn resolve_layered(
        &self,
        problems: &mut Problems,
        defaults: Layer,
        flags: Layer,
    ) -> (SettingsFile, CommonSettings) {
        let file = match SettingsFile::load(self.settings.as_deref()) {
            Ok(f) => f,
            Err(e) => {
                problems.push("settings", e);
                SettingsFile::default()
            }
        };
        let defaults = defaults
            .with("nats_url", Some(DEFAULT_NATS_URL))
            .with("redis_url", Some(DEFAULT_REDIS_URL))
            .with("metrics_addr", Some(parley_telemetry::DEFAULT_METRICS_ADDR))
            .with("stream_replicas", Some(DEFAULT_STREAM_REPLICAS as u64));
        let flags = flags
            .with("nats_url", self.nats_url.clone())
            .with_path("nats_creds", self.nats_creds.as_deref())
            .with("nats_inbox_prefix", self.nats_inbox_prefix.clone())
            .with("redis_url", self.redis_url.clone())
            .with("metrics_addr", self.metrics_addr.clone())
            .with_path("prices", self.prices.as_deref())
            .with("stream_replicas", self.stream_replicas.map(|n| n as u64))
            .with(
                "redis_min_replicas",
                self.redis_min_replicas.map(|n| n as u64),
            );
        let merged = SettingsFile::layered(&defaults, &file, &flags).unwrap_or_else(|e| {
            problems.push("settings", e);
            file.clone()
        });
        // (The defaults layer sets these; the fallbacks are the same values.)
        let nats_url = merged
            .nats_url
            .clone()
            .unwrap_or_else(|| DEFAULT_NATS_URL.into());
        // NATS takes a comma-separated server list, and bare `host:port` entries.
        for server in nats_url.split(',') {
            if server.contains("://") || server.trim().is_empty() {
                check_scheme(
                    problems,
                    "nats_url",
                    server.trim(),
                    &["nats", "tls", "ws", "wss"],
                );
            }
        }
        let nats_creds = merged.nats_creds.clone();
        if let Some(path) = &nats_creds {
            if let Err(e) = crate::nats::read_creds(path) {
                problems.push("nats_creds", format!("{e:#}"));
            }
            if nats_url
                .split(',')
                .any(|u| crate::nats::split_credentials(u).1.is_some())
            {
                problems.push(
                    "nats_creds",
                    "the NATS URL carries credentials too; keep one of them",
                );
            }
        }
        let nats_inbox_prefix = merged.nats_inbox_prefix.clone();
        if let Some(prefix) = &nats_inbox_prefix {
            if let Err(e) = crate::nats::validate_inbox_prefix(prefix) {
                problems.push("nats_inbox_prefix", format!("{e:#}"));
            }
        }
        let redis_url = merged
            .redis_url
            .clone()
            .unwrap_or_else(|| DEFAULT_REDIS_URL.into());
        check_scheme(
            problems,
            "redis_url",
            &redis_url,
            &[
                "redis",
                "rediss",
                "unix",
                "redis+unix",
                "redis+sentinel",
                "redis+cluster",
                "rediss+cluster",
            ],
        );
        if let Err(e) = crate::redis_conn::RedisTarget::parse(&redis_url) {
            problems.push("redis_url", e);
        }
        let stream_replicas = merged.stream_replicas.unwrap_or(DEFAULT_STREAM_REPLICAS);
        if !(1..=MAX_STREAM_REPLICAS).contains(&stream_replicas) {
            problems.push(
                "stream_replicas",
                format!("{stream_replicas} is not between 1 and {MAX_STREAM_REPLICAS}"),
            );
        }
        let redis_min_replicas = merged.redis_min_replicas.unwrap_or(0);
        if redis_min_replicas > 16 {
            problems.push(
                "redis_min_replicas",
                format!("{redis_min_replicas} is above 16 (replicas a write waits for)"),
            );
        }
        let metrics = merged
            .metrics_addr
            .clone()
            .unwrap_or_else(|| parley_telemetry::DEFAULT_METRICS_ADDR.into());
        let metrics_addr = parley_telemetry::parse_metrics_addr(&metrics).unwrap_or_else(|e| {
            problems.push("metrics_addr", e);
            None
        });
        let prices = match merged.prices.clone() {
            Some(path) => parley_protocol::PriceTable::load(&path).unwrap_or_else(|e| {
                problems.push("prices", e);
                Default::default()
            }),
            None => Default::default(),
        };
        (
            merged,
            CommonSettings {
                nats_url,
                nats_creds,
                nats_inbox_prefix,
                redis_url,
                stream_replicas,
                redis_min_replicas,
                metrics_addr,
                prices,
            },
        )
    }
}

/// Records a problem unless `url` starts with one of `schemes` followed by `://`. The URL
/// itself is not repeated: it may hold a password.
fn check_scheme(problems: &mut Problems, key: &str, url: &str, schemes: &[&str]) {
    let scheme = url.split_once("://").map(|(s, _)| s);
    if !scheme.is_some_and(|s| schemes.contains(&s)) {
        problems.push(
            key,
            format!(
                "not a URL with a scheme of {} (e.g. {}://host:port)",
                schemes.join(", "),
                schemes[0]
            ),
        );
    }
}

/// Records a problem when `value` is below `min`.
pub fn at_least<T: PartialOrd + std::fmt::Display>(
    problems: &mut Problems,
    key: &str,
    value: T,
    min: T,
) -> T {
    if value < min {
        problems.push(key, format!("{value} is below the minimum {min}"));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("parley.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "nats_url = \"nats://file:4222\"\nredis_url = \"rediss://:pw@file:6380\"\nconfig = \"debate.json\"\n",
        );
        let args = CommonArgs {
            settings: Some(path),
            nats_url: Some("tls://flag:4222".into()),
            nats_creds: None,
            nats_inbox_prefix: None,
            redis_url: None,
            metrics_addr: Some("off".into()),
            prices: None,
            stream_replicas: None,
            redis_min_replicas: None,
        };
        let mut problems = Problems::default();
        let (file, s) = args.resolve(&mut problems);
        problems.into_result().unwrap();
        assert_eq!(s.nats_url, "tls://flag:4222");
        assert_eq!(s.redis_url, "rediss://:pw@file:6380");
        assert_eq!(s.metrics_addr, None);
        assert_eq!(s.stream_replicas, DEFAULT_STREAM_REPLICAS);
        assert_eq!(file.config, Some(dir.path().join("debate.json")));
        assert_eq!(pick(None, file.concurrency, DEFAULT_CONCURRENCY), 8);
    }

    #[test]
    fn layers_merge_defaults_then_file_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "concurrency = 3\ndrain_secs = 9\nretention = \"2h\"\nprices = \"p.json\"\n",
        );
        let file = SettingsFile::load(Some(&path)).unwrap();
        let defaults = Layer::default()
            .with("concurrency", Some(8u64))
            .with("drain_secs", Some(20u64))
            .with("ack_wait_secs", Some(30u64))
            .with("retention", Some("7d"));
        let flags = Layer::default()
            .with("drain_secs", Some(4u64))
            .with("ack_wait_secs", None::<u64>)
            .with_path("config", Some(Path::new("rel/debate.json")));
        let s = SettingsFile::layered(&defaults, &file, &flags).unwrap();
        assert_eq!(s.concurrency, Some(3), "the file over the default");
        assert_eq!(s.drain_secs, Some(4), "a flag over the file");
        assert_eq!(s.ack_wait_secs, Some(30), "the default when nobody sets it");
        assert_eq!(s.retention, Some(DurationSetting::Text("2h".into())));
        assert_eq!(s.max_tokens, None, "a key no layer sets");
        assert_eq!(
            s.prices,
            Some(dir.path().join("p.json")),
            "the file's paths are relative to the file"
        );
        assert_eq!(
            s.config,
            Some(PathBuf::from("rel/debate.json")),
            "a flag's paths are as given"
        );
    }

    #[test]
    fn redis_cluster_urls_are_accepted_and_checked() {
        let check = |url: &str| {
            let args = CommonArgs {
                redis_url: Some(url.into()),
                ..CommonArgs::default()
            };
            let mut problems = Problems::default();
            let (_, s) = args.resolve(&mut problems);
            problems.into_result().map(|()| s.redis_url)
        };
        assert_eq!(
            check("redis+cluster://:pw@n1:7000,n2:7001").unwrap(),
            "redis+cluster://:pw@n1:7000,n2:7001"
        );
        check("rediss+cluster://n1:6379").unwrap();
        let e = check("redis+cluster://:hunter2@n1").unwrap_err();
        assert!(e.contains("redis_url:") && e.contains("host:port"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let args = CommonArgs {
            settings: Some(write(dir.path(), "nats_url = \"http://localhost:4222\"\n")),
            nats_url: None,
            nats_creds: Some(dir.path().join("missing.creds")),
            nats_inbox_prefix: Some("_INBOX.>".into()),
            redis_url: Some("http://:hunter2@x".into()),
            metrics_addr: Some("nonsense".into()),
            prices: Some(dir.path().join("prices.json")),
            stream_replicas: Some(7),
            redis_min_replicas: None,
        };
        let mut problems = Problems::default();
        args.resolve(&mut problems);
        at_least(&mut problems, "concurrency", 0usize, 1);
        let e = problems.into_result().unwrap_err();
        for key in [
            "nats_url:",
            "nats_creds:",
            "nats_inbox_prefix:",
            "redis_url:",
            "metrics_addr:",
            "concurrency:",
            "prices:",
            "stream_replicas:",
        ] {
            assert!(e.contains(key), "{key} missing in {e}");
        }
        assert!(!e.contains("hunter2"), "a password was echoed: {e}");
    }

    #[test]
    fn durations_take_a_unit_or_seconds() {
        let secs = |t: &str| parse_duration(t).map(|d| d.as_secs());
        assert_eq!(secs("0"), Ok(0));
        assert_eq!(secs("45"), Ok(45));
        assert_eq!(secs("90s"), Ok(90));
        assert_eq!(secs("15m"), Ok(900));
        assert_eq!(secs("12h"), Ok(43_200));
        assert_eq!(secs("7d"), Ok(604_800));
        assert!(secs("7w").unwrap_err().contains("unit"));
        assert!(secs("soon").is_err());
        assert_eq!(format_duration(DEFAULT_RETENTION), "7d");
        assert_eq!(format_duration(std::time::Duration::from_secs(5)), "5s");
        let dir = tempfile::tempdir().unwrap();
        let f = SettingsFile::load(Some(&write(dir.path(), "retention = \"2h\"\n"))).unwrap();
        assert_eq!(
            f.retention.unwrap().parse(),
            Ok(std::time::Duration::from_secs(7200))
        );
        let f = SettingsFile::load(Some(&write(dir.path(), "retention = 0\n"))).unwrap();
        assert_eq!(f.retention.unwrap().parse(), Ok(std::time::Duration::ZERO));
    }

    #[test]
    fn unknown_keys_and_missing_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let bad = write(dir.path(), "nats_url = \"nats://a:1\"\nconcurency = 4\n");
        let e = SettingsFile::load(Some(&bad)).unwrap_err();
        assert!(e.contains("concurency") && e.contains("parley.toml"), "{e}");
        let e = SettingsFile::load(Some(&dir.path().join("nope.toml"))).unwrap_err();
        assert!(e.contains("nope.toml"), "{e}");
    }
}
