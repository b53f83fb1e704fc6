//! Service settings of the coordinator and the workers, layered:
//! built-in defaults → a TOML settings file (`--settings FILE` / `PARLEY_SETTINGS`) →
//! `PARLEY_*` environment variables → command-line flags. The result is validated once at
//! start-up, and every problem is reported at once, each naming its key.
//!
//! Each key is written once, as a field of a typed settings struct ([`services`]): its doc
//! comment is its reference, its default is in the struct's `Default`. From the structs
//! [`reference`] makes the flags (each with its `PARLEY_*` variable and `[default: …]`),
//! the sample file and the reference page (`docs/src/reference/settings.md`). One settings
//! file serves every service of a deployment; each takes the keys it uses, and a key no
//! service takes is an error.
//!
//! The layers are merged by the `config` crate ([`layered`]): the structs' defaults, then
//! the file, then the flags. Environment variables and flags are read by clap (`env` on
//! each flag), so they arrive together as one layer in which a flag wins over its
//! variable. A service adds a key by giving its struct a field (and its `Default` a value).

pub mod reference;
pub mod services;

pub use services::{CommonSettings, CoordinatorSettings, WorkerSettings};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The most replicas JetStream keeps of a stream.
pub const MAX_STREAM_REPLICAS: usize = 5;

/// A duration setting: a number of seconds, or a number with a unit `s`, `m`, `h` or `d`
/// (`"90s"`, `"12h"`, `"7d"`). `0` means "no limit" where a setting says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum DurationSetting {
    Secs(u64),
    Text(String),
}

/// Why a duration setting is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{text:?} is not a duration (e.g. 30s, 15m, 12h, 7d, or 0)")]
    NotADuration { text: String },
    #[error("{text:?}: unknown unit {unit:?} (use s, m, h or d)")]
    UnknownUnit { text: String, unit: String },
    /// More seconds than a `u64` holds.
    #[error("{text:?} is too long")]
    TooLong { text: String },
}

impl DurationSetting {
    pub fn parse(&self) -> Result<std::time::Duration, DurationError> {
        match self {
            Self::Secs(n) => Ok(std::time::Duration::from_secs(*n)),
            Self::Text(t) => parse_duration(t),
        }
    }
}

/// Parses `"0"`, `"45"` (seconds), `"90s"`, `"15m"`, `"12h"`, `"7d"`.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, DurationError> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits.parse().map_err(|_| DurationError::NotADuration {
        text: text.to_string(),
    })?;
    let per = match unit.trim() {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 24 * 3600,
        other => {
            return Err(DurationError::UnknownUnit {
                text: text.to_string(),
                unit: other.to_string(),
            })
        }
    };
    n.checked_mul(per)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| DurationError::TooLong {
            text: text.to_string(),
        })
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

/// Why the settings file was not read.
#[derive(Debug, thiserror::Error)]
pub enum SettingsFileError {
    #[error("settings file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not TOML, or a value not of its key's type.
    #[error("settings file {}: {source}", path.display())]
    Invalid {
        path: PathBuf,
        source: config::ConfigError,
    },
    /// Keys no service takes (quoted and cut: a key may hold anything), with the keys
    /// there are.
    #[error(
        "settings file {}: unknown key {} (the keys: {})",
        path.display(),
        unknown.join(", "),
        known.join(", ")
    )]
    UnknownKeys {
        path: PathBuf,
        unknown: Vec<String>,
        known: Vec<String>,
    },
}

/// Reads the settings file at `path` as a layer: every key must be one some service takes,
/// with a value of its type; relative paths are made relative to the file's folder.
fn load_file(path: &Path) -> Result<config::Config, SettingsFileError> {
    let named = |source: config::ConfigError| SettingsFileError::Invalid {
        path: path.to_path_buf(),
        source,
    };
    // (Read here, so a missing or unreadable file is named with the OS's reason.)
    let text = std::fs::read_to_string(path).map_err(|source| SettingsFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file = config::Config::builder()
        .add_source(config::File::from_str(&text, config::FileFormat::Toml))
        .build()
        .map_err(named)?;
    let table = config::Source::collect(&file).map_err(named)?;
    let known = reference::all_keys();
    // (Quoted and cut: a key may hold anything.)
    let unknown: Vec<String> = table
        .keys()
        .filter(|k| !known.iter().any(|key| &key.name == *k))
        .map(|k| format!("{:?}", parley_protocol::preview(k, 64)))
        .collect();
    if !unknown.is_empty() {
        return Err(SettingsFileError::UnknownKeys {
            path: path.to_path_buf(),
            unknown,
            known: known.iter().map(|k| k.name.clone()).collect(),
        });
    }
    // Every service's keys have the type that service reads.
    file.clone()
        .try_deserialize::<CommonSettings>()
        .map_err(named)?;
    file.clone()
        .try_deserialize::<CoordinatorSettings>()
        .map_err(named)?;
    file.clone()
        .try_deserialize::<WorkerSettings>()
        .map_err(named)?;
    let mut resolved = config::Config::builder().add_source(file);
    for key in known.iter().filter(|k| k.kind == reference::Kind::Path) {
        let Some(value) = table.get(&key.name) else {
            continue;
        };
        let given = PathBuf::from(value.clone().into_string().map_err(named)?);
        if let (true, Some(dir)) = (given.is_relative(), path.parent()) {
            let path = dir.join(given).to_string_lossy().into_owned();
            resolved = resolved.set_override(&key.name, path).map_err(named)?;
        }
    }
    resolved.build().map_err(named)
}

/// The flags of a service whose own keys are `S` (with their `PARLEY_*` variables):
/// `--settings`, the keys of [`CommonSettings`] and those of `S`, added to `command`.
pub fn command<S: JsonSchema>(command: clap::Command) -> clap::Command {
    command
        .arg(
            clap::Arg::new("settings")
                .long("settings")
                .env("PARLEY_SETTINGS")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .help(
                    "TOML settings file; one file can serve every service (see the settings \
                     reference of the book)",
                ),
        )
        .args(reference::flags::<CommonSettings>())
        .args(reference::flags::<S>())
}

/// The settings of a service whose own keys are `S`, from the flags of [`command`]: the
/// structs' defaults, then the settings file, then the variables and flags, merged by the
/// `config` crate. Problems (an unreadable file, an unknown key, a wrong type) are
/// recorded with their key; the defaults stand in for what could not be read.
pub fn layered<S>(matches: &clap::ArgMatches, problems: &mut Problems) -> (CommonSettings, S)
where
    S: JsonSchema + Serialize + DeserializeOwned + Default,
{
    let file = matches
        .get_one::<PathBuf>("settings")
        .and_then(|path| match load_file(path) {
            Ok(f) => Some(f),
            Err(e) => {
                problems.push("settings", e);
                None
            }
        });
    let merged = || -> Result<(CommonSettings, S), config::ConfigError> {
        let mut b = config::Config::builder()
            .add_source(config::Config::try_from(&CommonSettings::default())?)
            .add_source(config::Config::try_from(&S::default())?);
        if let Some(f) = file {
            b = b.add_source(f);
        }
        let keys = reference::keys::<CommonSettings>()
            .into_iter()
            .chain(reference::keys::<S>());
        for key in keys {
            if let Some(v) = reference::flag_value(matches, &key) {
                b = b.set_override(&key.name, v)?;
            }
        }
        let all = b.build()?;
        Ok((all.clone().try_deserialize()?, all.try_deserialize()?))
    };
    merged().unwrap_or_else(|e| {
        problems.push("settings", format!("cannot merge the settings layers: {e}"));
        (CommonSettings::default(), S::default())
    })
}

/// One problem of a service's settings: the key and what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct Problem {
    /// The settings key (`redis_url`), or `settings` for the file and the layering.
    pub key: String,
    pub problem: String,
}

/// Why a service's settings were refused: every problem, each with its key (one line
/// each).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid settings:\n  {}", lines(.problems))]
pub struct SettingsError {
    pub problems: Vec<Problem>,
}

impl SettingsError {
    /// Whether a problem names `key`.
    pub fn names(&self, key: &str) -> bool {
        self.problems.iter().any(|p| p.key == key)
    }
}

fn lines(problems: &[Problem]) -> String {
    let texts: Vec<String> = problems.iter().map(ToString::to_string).collect();
    texts.join("\n  ")
}

/// Collects every problem found while resolving settings.
#[derive(Debug, Default)]
pub struct Problems(Vec<Problem>);

impl Problems {
    pub fn push(&mut self, key: &str, problem: impl std::fmt::Display) {
        self.0.push(Problem {
            key: key.to_string(),
            problem: problem.to_string(),
        });
    }

    /// `Err` with every problem, or `Ok` when there are none.
    pub fn into_result(self) -> Result<(), SettingsError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(SettingsError { problems: self.0 })
        }
    }
}

/// The settings every service shares, checked and resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedCommon {
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

impl CommonSettings {
    /// Checks the shared settings and resolves them (the metrics address parsed, the price
    /// file read), recording every problem with its key.
    pub fn resolve(self, problems: &mut Problems) -> ResolvedCommon {
        let nats_url = self.nats_url;
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
        let nats_creds = self.nats_creds;
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
        let nats_inbox_prefix = self.nats_inbox_prefix;
        if let Some(prefix) = &nats_inbox_prefix {
            if let Err(e) = crate::nats::validate_inbox_prefix(prefix) {
                problems.push("nats_inbox_prefix", format!("{e:#}"));
            }
        }
        let redis_url = self.redis_url;
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
        let stream_replicas = self.stream_replicas;
        if !(1..=MAX_STREAM_REPLICAS).contains(&stream_replicas) {
            problems.push(
                "stream_replicas",
                format!("{stream_replicas} is not between 1 and {MAX_STREAM_REPLICAS}"),
            );
        }
        let redis_min_replicas = self.redis_min_replicas;
        if redis_min_replicas > 16 {
            problems.push(
                "redis_min_replicas",
                format!("{redis_min_replicas} is above 16 (replicas a write waits for)"),
            );
        }
        let metrics_addr =
            parley_telemetry::parse_metrics_addr(&self.metrics_addr).unwrap_or_else(|e| {
                problems.push("metrics_addr", e);
                None
            });
        let prices = match self.prices {
            Some(path) => parley_protocol::PriceTable::load(&path).unwrap_or_else(|e| {
                problems.push("prices", e);
                Default::default()
            }),
            None => Default::default(),
        };
        ResolvedCommon {
            nats_url,
            nats_creds,
            nats_inbox_prefix,
            redis_url,
            stream_replicas,
            redis_min_replicas,
            metrics_addr,
            prices,
        }
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

    /// The settings of a worker started with `args` (no environment variables: the test
    /// names no flag whose variable the machine might set).
    fn worker(args: &[&str]) -> (Result<(), SettingsError>, CommonSettings, WorkerSettings) {
        let matches = command::<WorkerSettings>(clap::Command::new("worker"))
            .try_get_matches_from(std::iter::once("worker").chain(args.iter().copied()))
            .unwrap();
        let mut problems = Problems::default();
        let (common, own) = layered::<WorkerSettings>(&matches, &mut problems);
        (problems.into_result(), common, own)
    }

    fn resolve(args: &[&str]) -> Result<ResolvedCommon, SettingsError> {
        let (r, common, _) = worker(args);
        let mut problems = Problems::default();
        if let Err(e) = r {
            problems.push("layers", e);
        }
        let resolved = common.resolve(&mut problems);
        problems.into_result().map(|()| resolved)
    }

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "nats_url = \"nats://file:4222\"\nredis_url = \"rediss://:pw@file:6380\"\nconfig = \"debate.json\"\n",
        );
        let s = resolve(&[
            "--settings",
            path.to_str().unwrap(),
            "--nats-url",
            "tls://flag:4222",
            "--metrics-addr",
            "off",
        ])
        .unwrap();
        assert_eq!(s.nats_url, "tls://flag:4222");
        assert_eq!(s.redis_url, "rediss://:pw@file:6380");
        assert_eq!(s.metrics_addr, None);
        assert_eq!(s.stream_replicas, CommonSettings::default().stream_replicas);
        let (r, _, own) = worker(&["--settings", path.to_str().unwrap()]);
        r.unwrap();
        assert_eq!(own.config, Some(dir.path().join("debate.json")));
        assert_eq!(own.concurrency, WorkerSettings::default().concurrency);
    }

    #[test]
    fn layers_merge_defaults_then_file_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "concurrency = 3\ndrain_secs = 9\nretention = \"2h\"\nprices = \"p.json\"\n",
        );
        let (r, common, s) = worker(&[
            "--settings",
            path.to_str().unwrap(),
            "--drain-secs",
            "4",
            "--config",
            "rel/debate.json",
        ]);
        r.unwrap();
        assert_eq!(s.concurrency, 3, "the file over the default");
        assert_eq!(s.drain_secs, 4, "a flag over the file");
        assert_eq!(s.ack_wait_secs, 30, "the default when nobody sets it");
        assert_eq!(
            common.prices,
            Some(dir.path().join("p.json")),
            "the file's paths are relative to the file"
        );
        assert_eq!(
            s.config,
            Some(PathBuf::from("rel/debate.json")),
            "a flag's paths are as given"
        );
        let (r, _, coordinator) = {
            let matches = command::<CoordinatorSettings>(clap::Command::new("c"))
                .try_get_matches_from(["c", "--settings", path.to_str().unwrap()])
                .unwrap();
            let mut problems = Problems::default();
            let (c, s) = layered::<CoordinatorSettings>(&matches, &mut problems);
            (problems.into_result(), c, s)
        };
        r.unwrap();
        assert_eq!(coordinator.retention, DurationSetting::Text("2h".into()));
        assert_eq!(coordinator.drain_secs, 9, "one file serves every service");
        assert_eq!(coordinator.max_debate_usd, None, "a key no layer sets");
    }

    #[test]
    fn redis_cluster_urls_are_accepted_and_checked() {
        let check = |url: &str| resolve(&["--redis-url", url]).map(|s| s.redis_url);
        assert_eq!(
            check("redis+cluster://:pw@n1:7000,n2:7001").unwrap(),
            "redis+cluster://:pw@n1:7000,n2:7001"
        );
        check("rediss+cluster://n1:6379").unwrap();
        let e = check("redis+cluster://:hunter2@n1").unwrap_err();
        assert!(e.names("redis_url"), "{e}");
        let e = e.to_string();
        assert!(e.contains("redis_url:") && e.contains("host:port"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let settings = write(dir.path(), "nats_url = \"http://localhost:4222\"\n");
        let creds = dir.path().join("missing.creds");
        let prices = dir.path().join("prices.json");
        let e = resolve(&[
            "--settings",
            settings.to_str().unwrap(),
            "--nats-creds",
            creds.to_str().unwrap(),
            "--nats-inbox-prefix",
            "_INBOX.>",
            "--redis-url",
            "http://:hunter2@x",
            "--metrics-addr",
            "nonsense",
            "--prices",
            prices.to_str().unwrap(),
            "--stream-replicas",
            "7",
        ])
        .unwrap_err();
        for key in [
            "nats_url",
            "nats_creds",
            "nats_inbox_prefix",
            "redis_url",
            "metrics_addr",
            "prices",
            "stream_replicas",
        ] {
            assert!(e.names(key), "{key} missing in {e}");
        }
        let e = e.to_string();
        for key in ["nats_url:", "redis_url:", "stream_replicas:"] {
            assert!(e.contains(key), "{key} missing in {e}");
        }
        assert!(!e.contains("hunter2"), "a password was echoed: {e}");
        let mut problems = Problems::default();
        at_least(&mut problems, "concurrency", 0usize, 1);
        let e = problems.into_result().unwrap_err();
        assert_eq!(
            e.problems,
            [Problem {
                key: "concurrency".into(),
                problem: "0 is below the minimum 1".into()
            }]
        );
        assert!(e.to_string().contains("concurrency:"), "{e}");
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
        assert_eq!(
            secs("7w"),
            Err(DurationError::UnknownUnit {
                text: "7w".into(),
                unit: "w".into()
            })
        );
        assert!(secs("7w").unwrap_err().to_string().contains("unit"));
        assert!(matches!(
            secs("soon"),
            Err(DurationError::NotADuration { .. })
        ));
        assert!(matches!(
            secs("99999999999999999999d"),
            Err(DurationError::NotADuration { .. })
        ));
        assert!(matches!(
            secs("999999999999999999d"),
            Err(DurationError::TooLong { .. })
        ));
        assert_eq!(
            format_duration(std::time::Duration::from_secs(604_800)),
            "7d"
        );
        assert_eq!(format_duration(std::time::Duration::from_secs(5)), "5s");
        assert_eq!(
            DurationSetting::Secs(7200).parse(),
            Ok(std::time::Duration::from_secs(7200))
        );
    }

    #[test]
    fn unknown_keys_wrong_types_and_missing_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let bad = write(dir.path(), "nats_url = \"nats://a:1\"\nconcurency = 4\n");
        let e = load_file(&bad).unwrap_err();
        assert!(
            matches!(&e, SettingsFileError::UnknownKeys { unknown, .. } if unknown == &["\"concurency\""]),
            "{e}"
        );
        let e = e.to_string();
        assert!(e.contains("concurency") && e.contains("parley.toml"), "{e}");
        let bad = write(dir.path(), "concurrency = \"many\"\n");
        let e = load_file(&bad).unwrap_err();
        assert!(matches!(e, SettingsFileError::Invalid { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("concurrency") && e.contains("parley.toml"),
            "{e}"
        );
        let e = load_file(&dir.path().join("nope.toml")).unwrap_err();
        assert!(matches!(e, SettingsFileError::Read { .. }), "{e}");
        assert!(e.to_string().contains("nope.toml"), "{e}");
        let (r, _, own) = worker(&["--settings", bad.to_str().unwrap()]);
        let r = r.unwrap_err();
        assert!(r.names("settings"), "{r}");
        assert!(r.to_string().contains("settings: "));
        assert_eq!(own, WorkerSettings::default(), "the defaults stand in");
    }

    /// Every key has a doc, a flag and a variable named after it, and a default or words
    /// for its absence; the sample file is one the services read back as the defaults.
    #[test]
    fn every_key_is_documented_and_the_sample_reads_back() {
        for key in reference::all_keys() {
            assert!(key.doc.len() > 20, "{}: {:?}", key.name, key.doc);
            assert!(
                key.default.is_some() || key.default_text.is_some() || key.doc.contains("none"),
                "{}: no default and nothing said about its absence",
                key.name
            );
            assert_eq!(key.env(), format!("PARLEY_{}", key.name.to_uppercase()));
        }
        let help = command::<CoordinatorSettings>(clap::Command::new("c"))
            .render_help()
            .to_string();
        assert!(help.contains("--max-followers <N>"), "{help}");
        assert!(help.contains("[default: 512]"), "{help}");
        assert!(help.contains("PARLEY_MAX_FOLLOWERS"), "{help}");
        let dir = tempfile::tempdir().unwrap();
        let sample = write(dir.path(), &reference::sample());
        let (r, common, own) = worker(&["--settings", sample.to_str().unwrap()]);
        r.unwrap();
        assert_eq!((common, own), Default::default());
    }
}
