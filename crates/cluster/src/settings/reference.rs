//! What the settings structs ([`super::services`]) generate, read from their JSON Schema
//! (schemars: the field docs, the `Default` values, the types): each key's flag and
//! `PARLEY_*` variable with the `[default: …]` of its help, the sample settings file and
//! the reference page `docs/src/reference/settings.md` (a test in `tests/settings_page.rs`
//! keeps the committed page current).
//!
//! Names follow from the key: `max_followers` is the flag `--max-followers` and the
//! variable `PARLEY_MAX_FOLLOWERS`.

use schemars::JsonSchema;
use serde_json::Value;

use super::services::{CommonSettings, CoordinatorSettings, WorkerSettings};

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A whole number up to `max`.
    Integer {
        max: u64,
    },
    Number,
    Text,
    /// A file; relative to the settings file when the file sets it.
    Path,
    /// Seconds, or a number with a unit (see [`super::parse_duration`]).
    Duration,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Integer { .. } => "integer",
            Self::Number => "number",
            Self::Text => "string",
            Self::Path => "path",
            Self::Duration => "duration",
        }
    }
}

/// One key of a settings struct, as its schema describes it.
#[derive(Debug, Clone)]
pub struct Key {
    /// The key in the settings file (the field's name).
    pub name: String,
    /// Its meaning (the field's doc comment, on one line).
    pub doc: String,
    pub kind: Kind,
    /// The default as TOML writes it; `None` when the key has no default value.
    pub default: Option<String>,
    /// What the absence of the key means, when it has no default value.
    pub default_text: Option<String>,
    /// The placeholder of the flag's value.
    pub value_name: String,
}

impl Key {
    pub fn flag(&self) -> String {
        format!("--{}", self.name.replace('_', "-"))
    }

    pub fn env(&self) -> String {
        format!("PARLEY_{}", self.name.to_ascii_uppercase())
    }

    /// The default as a flag's help says it: the value unquoted, or what its absence means.
    pub fn default_for_help(&self) -> Option<String> {
        match (&self.default, &self.default_text) {
            (_, Some(text)) => Some(text.replace('`', "")),
            (Some(v), None) => Some(v.trim_matches('"').to_string()),
            (None, None) => None,
        }
    }
}

/// The keys of the settings struct `S`, in name order.
pub fn keys<S: JsonSchema>() -> Vec<Key> {
    let schema = schemars::schema_for!(S);
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    props
        .into_iter()
        .map(|(name, p)| {
            let text = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_string);
            let value_name = text("x-value").unwrap_or_else(|| name.to_ascii_uppercase());
            let types: Vec<&str> = match p.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let kind = if value_name == "FILE" {
                Kind::Path
            } else if value_name == "DURATION" {
                Kind::Duration
            } else if types.contains(&"integer") {
                let max = p.get("maximum").and_then(Value::as_u64).unwrap_or(u64::MAX);
                Kind::Integer { max }
            } else if types.contains(&"number") {
                Kind::Number
            } else {
                Kind::Text
            };
            let default = p.get("default").filter(|d| !d.is_null()).map(toml_value);
            Key {
                doc: one_line(&text("description").unwrap_or_default()),
                kind,
                default,
                default_text: text("x-default"),
                value_name,
                name,
            }
        })
        .collect()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A JSON default as TOML writes it.
fn toml_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// The names a `clap::Arg` keeps: clap's builder takes `&'static str` (without its `string`
/// feature); a process builds its flags once.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The flags of the keys of `S`, each with its `PARLEY_*` variable (values hidden from
/// `--help`: URLs may hold passwords) and its default in the help.
pub fn flags<S: JsonSchema>() -> Vec<clap::Arg> {
    keys::<S>()
        .into_iter()
        .map(|key| {
            let mut help = key.doc.clone();
            if let Some(d) = key.default_for_help() {
                help.push_str(&format!(" [default: {d}]"));
            }
            let arg = clap::Arg::new(leak(key.name.clone()))
                .long(leak(key.flag()[2..].to_string()))
                .env(leak(key.env()))
                .hide_env_values(true)
                .value_name(leak(key.value_name.clone()))
                .action(clap::ArgAction::Set)
                .help(help);
            match key.kind {
                Kind::Integer { max } => {
                    arg.value_parser(clap::value_parser!(u64).range(0..=max.min(i64::MAX as u64)))
                }
                Kind::Number => arg.value_parser(clap::value_parser!(f64)),
                _ => arg.value_parser(clap::value_parser!(String)),
            }
        })
        .collect()
}

/// The value a flag (or its variable) gave key `key`, as a settings layer holds it.
pub(super) fn flag_value(matches: &clap::ArgMatches, key: &Key) -> Option<config::Value> {
    match key.kind {
        Kind::Integer { .. } => matches.get_one::<u64>(&key.name).map(|v| (*v).into()),
        Kind::Number => matches.get_one::<f64>(&key.name).map(|v| (*v).into()),
        _ => matches
            .get_one::<String>(&key.name)
            .map(|v| v.clone().into()),
    }
}

/// One section of the reference: a heading, who takes the keys, the keys.
struct Section {
    heading: &'static str,
    intro: &'static str,
    keys: Vec<Key>,
}

fn sections() -> Vec<Section> {
    vec![
        Section {
            heading: "Every service",
            intro: "The coordinator and both workers take these keys.",
            keys: keys::<CommonSettings>(),
        },
        Section {
            heading: "Coordinator",
            intro: "`parley-coordinator` also takes these keys.",
            keys: keys::<CoordinatorSettings>(),
        },
        Section {
            heading: "Workers",
            intro: "`parley-agent-worker` and `parley-judge-worker` also take these keys.",
            keys: keys::<WorkerSettings>(),
        },
    ]
}

/// Every key some service takes (a settings file may hold only these).
pub fn all_keys() -> Vec<Key> {
    let mut all: Vec<Key> = sections().into_iter().flat_map(|s| s.keys).collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all.dedup_by(|a, b| a.name == b.name);
    all
}

/// A settings file with every key at its default, by service. Commented out: the keys
/// without a default value, and those two services share (`drain_secs`, `max_tokens`,
/// `config`): each has its own default, a file sets one value for both.
pub fn sample() -> String {
    let sections = sections();
    let shared = |name: &str| {
        sections
            .iter()
            .filter(|s| s.keys.iter().any(|k| k.name == name))
            .count()
            > 1
    };
    let mut out = String::new();
    for (i, s) in sections.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("# {}\n", s.heading.to_lowercase()));
        for k in &s.keys {
            match &k.default {
                Some(v) if !shared(&k.name) => out.push_str(&format!("{} = {v}\n", k.name)),
                Some(v) => out.push_str(&format!("# {} = {v}\n", k.name)),
                None => out.push_str(&format!("# {} = ...\n", k.name)),
            }
        }
    }
    out
}

/// The reference page, `docs/src/reference/settings.md`.
pub fn page(regenerate: &str) -> String {
    let mut out = String::from("# Service settings\n\n");
    out.push_str(&format!(
        "<!-- Generated from the settings structs of `parley_cluster::settings`: do not edit. \
         Regenerate with `{regenerate}`. -->\n\n"
    ));
    out.push_str(INTRO);
    for s in sections() {
        out.push_str(&format!("\n## {}\n\n{}\n\n", s.heading, s.intro));
        out.push_str("| Key | Type | Default | Variable | Flag | Meaning |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        for k in &s.keys {
            let default = match (&k.default, &k.default_text) {
                (_, Some(text)) => text.clone(),
                (Some(v), None) => format!("`{v}`"),
                (None, None) => "none".into(),
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | `{}` | `{} {}` | {} |\n",
                k.name,
                k.kind.name(),
                cell(&default),
                k.env(),
                k.flag(),
                k.value_name,
                cell(&k.doc)
            ));
        }
    }
    out.push_str(
        "\n## A settings file\n\nEvery key at its default, by service; one file may serve \
         every service, each takes the keys it uses. Commented out: the keys without a \
         default value, and those two services share (each has its own default; a file \
         sets one value for both):\n\n```toml\n",
    );
    out.push_str(&sample());
    out.push_str("```\n");
    out.push_str(OUTRO);
    out
}

/// Text in a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

const INTRO: &str = "\
Service settings are layered: built-in defaults → a TOML file (`--settings parley.toml`
or `PARLEY_SETTINGS`; one file can serve every service) → `PARLEY_*` variables → flags
(the layers are merged by the `config` crate). They are validated once at start-up;
every problem is reported at once with its key, and the service exits with status 4.
A key no service takes is an error in the file, and so is a value of the wrong type.

Paths in the file are relative to the file; a flag's or a variable's, to the working
directory. Durations are seconds or a number with a unit: `90s`, `15m`, `12h`, `7d`.
URLs may carry credentials (`nats://user:pass@host` or `nats://token@host`,
`redis://:pass@host`) and use TLS (`tls://` for NATS, `rediss://` for Redis; rustls with
the system's root certificates); NATS credentials may also come from a file
(`nats_creds`). Credentials are never echoed in errors, and `--help` does not show the
variables' values.
";

const OUTRO: &str = "
The Helm chart writes one such file per component from its values (`settings:` in each
component's section); see [Deploying](../operations/deploying.md). `parley serve` and
`parley mcp` take flags only: see the [CLI reference](cli.md).
";
