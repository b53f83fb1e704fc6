//! The operator's webhook endpoints: the allow-list (`parley serve --webhooks FILE`).
//!
//! ```toml
//! # How long a message is retried before it is given up (default 86400 = 24 h).
//! retry_for_secs = 86400
//!
//! [[endpoint]]
//! url = "https://hooks.example.com/parley"    # what a debate's `webhooks[].url` names
//! secret = "whsec_..."                        # `parley serve --new-webhook-secret`
//! # Every debate's events of these kinds go here too (the operator's subscription).
//! all_debates = ["completed", "failed"]
//! # The host may resolve to a loopback, private or link-local address (default false:
//! # such addresses are refused when connecting).
//! private_network = false
//! ```
//!
//! A debate can name only a listed URL (compared after parsing: scheme and host in lower
//! case, default port dropped); the secret stays in this file and in memory, never in a
//! debate's spec, state, events, logs or metrics. The file is read once at start; a bad
//! file stops the start with every problem named.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use parley_protocol::{WebhookEvent, WebhookSubscription};
use reqwest::Url;
use serde::Deserialize;

use crate::sign::{Secret, SecretError};

/// Bytes in the file, at most.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// Endpoints in the file, at most.
pub const MAX_ENDPOINTS: usize = 256;
/// The default retry window of a message.
pub const DEFAULT_RETRY_FOR_SECS: u64 = 24 * 3600;
/// The longest retry window of a message (a week).
pub const MAX_RETRY_FOR_SECS: u64 = 7 * 24 * 3600;

/// Why a text is not a webhook URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// The URL parser's complaint.
    #[error("not a URL: {0}")]
    NotAUrl(String),
    #[error("scheme {0:?}: http or https only")]
    Scheme(String),
    #[error("no host")]
    NoHost,
    #[error("must not carry credentials")]
    Credentials,
    #[error("must not have a #fragment")]
    Fragment,
}

/// Why the endpoint file was not loaded: every problem, with its entry
/// (`endpoint[2].secret: ...`), never a secret.
#[derive(Debug, thiserror::Error)]
pub enum EndpointsError {
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {size} bytes, the limit is {MAX_FILE_BYTES}", path.display())]
    TooLarge { path: PathBuf, size: u64 },
    /// Not TOML of the file's shape: the parser's message and where (a byte offset), never
    /// the text there (the file holds secrets).
    #[error(
        "not a webhook endpoint file{}: {message}",
        at.map(|b| format!(" (at byte {b})")).unwrap_or_default()
    )]
    NotAnEndpointFile { at: Option<usize>, message: String },
    #[error("{0} endpoints, the limit is {MAX_ENDPOINTS}")]
    TooManyEndpoints(usize),
    /// The entries' problems, one each, in the file's order.
    #[error("{}", join(.0))]
    BadEntries(Vec<EntryProblem>),
    /// A problem of the file at `path`.
    #[error("{}: {problem}", path.display())]
    InFile {
        path: PathBuf,
        problem: Box<EndpointsError>,
    },
}

/// One problem of an endpoint file's entries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryProblem {
    #[error("endpoint[{index}].url: {source}")]
    Url { index: usize, source: UrlError },
    #[error("endpoint[{index}].url: {url} is listed twice")]
    Duplicate { index: usize, url: Url },
    #[error("endpoint[{index}].secret: {source}")]
    Secret { index: usize, source: SecretError },
    #[error("retry_for_secs: {0} is out of range 1-{MAX_RETRY_FOR_SECS}")]
    RetryFor(u64),
}

fn join(problems: &[EntryProblem]) -> String {
    let texts: Vec<String> = problems.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

/// A debate's webhook names a URL the operator did not list (a submission's 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "webhooks[{index}].url: {url:?} is not one of this server's webhook endpoints \
     (the operator lists them with --webhooks)"
)]
pub struct NotListed {
    /// The subscription's index in the debate's `webhooks`.
    pub index: usize,
    /// The URL as given, clipped to 120 characters.
    pub url: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    retry_for_secs: Option<u64>,
    #[serde(default)]
    endpoint: Vec<EndpointFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointFile {
    url: String,
    secret: String,
    #[serde(default)]
    all_debates: Vec<WebhookEvent>,
    #[serde(default)]
    private_network: bool,
}

/// One allowed endpoint.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The URL, normalised (what [`normalise`] makes of the listed text).
    pub url: Url,
    pub secret: Secret,
    /// The operator's subscription: these events of every debate.
    pub all_debates: BTreeSet<WebhookEvent>,
    /// The host may resolve to a non-global address.
    pub private_network: bool,
}

impl Endpoint {
    /// The endpoint's scheme, host and port: what logs name it by (a path or query may
    /// hold a token of the receiver's).
    pub fn origin(&self) -> String {
        self.url.origin().ascii_serialization()
    }
}

/// The allow-list.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    pub endpoints: Vec<Endpoint>,
    /// How long one message is retried before it is given up.
    pub retry_for: std::time::Duration,
}

/// `text` as a webhook URL: `http`/`https`, a host, no credentials, no fragment.
pub fn normalise(text: &str) -> Result<Url, UrlError> {
    let url = Url::parse(text).map_err(|e| UrlError::NotAUrl(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(UrlError::Scheme(url.scheme().to_string()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(UrlError::NoHost);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlError::Credentials);
    }
    if url.fragment().is_some() {
        return Err(UrlError::Fragment);
    }
    Ok(url)
}

impl Endpoints {
    /// Reads the file; every problem is named with its entry.
    pub fn load(path: &Path) -> Result<Self, EndpointsError> {
        let read = |source| EndpointsError::Read {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read)?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(EndpointsError::TooLarge {
                path: path.to_path_buf(),
                size: meta.len(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Self::parse(&text).map_err(|problem| EndpointsError::InFile {
            path: path.to_path_buf(),
            problem: Box::new(problem),
        })
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, EndpointsError> {
        // The parser's message may quote the file, which holds secrets: say where, not what.
        let file: File = toml::from_str(text).map_err(|e| EndpointsError::NotAnEndpointFile {
            at: e.span().map(|span| span.start),
            message: e.message().to_string(),
        })?;
        if file.endpoint.len() > MAX_ENDPOINTS {
            return Err(EndpointsError::TooManyEndpoints(file.endpoint.len()));
        }
        let mut problems = Vec::new();
        let mut endpoints = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, e) in file.endpoint.into_iter().enumerate() {
            let url = match normalise(&e.url) {
                Ok(u) => u,
                Err(source) => {
                    problems.push(EntryProblem::Url { index: i, source });
                    continue;
                }
            };
            if !seen.insert(url.to_string()) {
                problems.push(EntryProblem::Duplicate {
                    index: i,
                    url: url.clone(),
                });
            }
            match Secret::parse(&e.secret) {
                Ok(secret) => endpoints.push(Endpoint {
                    url,
                    secret,
                    all_debates: e.all_debates.into_iter().collect(),
                    private_network: e.private_network,
                }),
                Err(source) => problems.push(EntryProblem::Secret { index: i, source }),
            }
        }
        let retry_for = file.retry_for_secs.unwrap_or(DEFAULT_RETRY_FOR_SECS);
        if !(1..=MAX_RETRY_FOR_SECS).contains(&retry_for) {
            problems.push(EntryProblem::RetryFor(retry_for));
        }
        if !problems.is_empty() {
            return Err(EndpointsError::BadEntries(problems));
        }
        Ok(Self {
            endpoints,
            retry_for: std::time::Duration::from_secs(retry_for),
        })
    }

    /// The listed endpoint `url` names, if any.
    pub fn find(&self, url: &str) -> Option<&Endpoint> {
        let url = normalise(url).ok()?;
        self.endpoints.iter().find(|e| e.url == url)
    }

    /// Whether a debate's subscriptions name only listed endpoints; the error names the
    /// first that is not (a submission's 400).
    pub fn check(&self, hooks: &[WebhookSubscription]) -> Result<(), NotListed> {
        for (i, h) in hooks.iter().enumerate() {
            if self.find(&h.url).is_none() {
                return Err(NotListed {
                    index: i,
                    url: parley_protocol::preview(&h.url, 120),
                });
            }
        }
        Ok(())
    }

    /// The endpoints an event of kind `kind` of a debate with subscriptions `hooks` goes
    /// to: the debate's own (listed ones only) and the operator's, each once, in the
    /// file's order.
    pub fn targets(&self, hooks: &[WebhookSubscription], kind: WebhookEvent) -> Vec<&Endpoint> {
        self.endpoints
            .iter()
            .filter(|e| {
                e.all_debates.contains(&kind)
                    || hooks.iter().any(|h| {
                        h.events.contains(&kind) && normalise(&h.url).is_ok_and(|u| u == e.url)
                    })
            })
            .collect()
    }

    /// Whether any endpoint takes every debate's events (then every debate is followed).
    pub fn has_operator_subscriptions(&self) -> bool {
        self.endpoints.iter().any(|e| !e.all_debates.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn a_listed_url_is_found_however_it_is_written() {
        let e = Endpoints::parse(&format!(
            "[[endpoint]]\nurl = \"https://Hooks.Example.com:443/p\"\nsecret = \"{SECRET}\"\n\
             all_debates = [\"failed\"]\n"
        ))
        .unwrap();
        assert!(e.find("https://hooks.example.com/p").is_some());
        assert!(e.find("https://hooks.example.com/p/").is_none());
        assert!(e.find("http://hooks.example.com/p").is_none());
        let sub = WebhookSubscription {
            url: "https://hooks.example.com/p".into(),
            events: vec![WebhookEvent::Completed],
        };
        assert!(e.check(std::slice::from_ref(&sub)).is_ok());
        assert_eq!(
            e.targets(std::slice::from_ref(&sub), WebhookEvent::Completed)
                .len(),
            1
        );
        assert_eq!(e.targets(&[], WebhookEvent::Failed).len(), 1);
        assert_eq!(e.targets(&[], WebhookEvent::Degraded).len(), 0);
        let off = WebhookSubscription {
            url: "https://evil.example/".into(),
            events: vec![WebhookEvent::Completed],
        };
        let err = e.check(&[sub, off]).unwrap_err();
        assert_eq!(err.index, 1);
        assert!(err.to_string().starts_with("webhooks[1].url:"), "{err}");
        assert_eq!(e.retry_for.as_secs(), DEFAULT_RETRY_FOR_SECS);
    }

    #[test]
    fn a_bad_file_names_every_problem_and_no_secret() {
        let text = "retry_for_secs = 0\n\
             [[endpoint]]\nurl = \"ftp://x\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n\
             [[endpoint]]\nurl = \"https://u:p@x.example/\"\nsecret = \"s\"\n\
             [[endpoint]]\nurl = \"https://y.example/\"\nsecret = \"whsec_c2hvcnQ=\"\n";
        let err = Endpoints::parse(text).unwrap_err();
        let EndpointsError::BadEntries(problems) = &err else {
            panic!("{err}");
        };
        assert!(matches!(
            problems[..],
            [
                EntryProblem::Url {
                    index: 0,
                    source: UrlError::Scheme(_)
                },
                EntryProblem::Url {
                    index: 1,
                    source: UrlError::Credentials
                },
                EntryProblem::Secret {
                    index: 2,
                    source: SecretError::Length { .. }
                },
                EntryProblem::RetryFor(0),
            ]
        ));
        let err = err.to_string();
        for needle in [
            "endpoint[0].url",
            "endpoint[1].url",
            "endpoint[2].secret",
            "retry_for_secs",
        ] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
        assert!(!err.contains("c2hvcnQ"), "{err}");
        let typo = Endpoints::parse(
            "[[endpoint]]\nurl = \"https://x/\"\nsecret = \"whsec_secretvalue\"\nprivate = true\n",
        )
        .unwrap_err();
        assert!(
            matches!(typo, EndpointsError::NotAnEndpointFile { at: Some(_), .. }),
            "{typo}"
        );
        assert!(!typo.to_string().contains("secretvalue"), "{typo}");
    }
}
