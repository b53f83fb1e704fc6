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
use std::path::Path;

use parley_protocol::{WebhookEvent, WebhookSubscription};
use reqwest::Url;
use serde::Deserialize;

use crate::sign::Secret;

/// Bytes in the file, at most.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// Endpoints in the file, at most.
pub const MAX_ENDPOINTS: usize = 256;
/// The default retry window of a message.
pub const DEFAULT_RETRY_FOR_SECS: u64 = 24 * 3600;

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
pub fn normalise(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("scheme {:?}: http or https only", url.scheme()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials".into());
    }
    if url.fragment().is_some() {
        return Err("must not have a #fragment".into());
    }
    Ok(url)
}

impl Endpoints {
    /// Reads the file; every problem is named with its entry.
    pub fn load(path: &Path) -> Result<Self, String> {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!(
                "{}: {} bytes, the limit is {MAX_FILE_BYTES}",
                path.display(),
                meta.len()
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        // The parser's message may quote the file, which holds secrets: say where, not what.
        let file: File = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => format!(
                "not a webhook endpoint file (at byte {}): {}",
                span.start,
                e.message()
            ),
            None => format!("not a webhook endpoint file: {}", e.message()),
        })?;
        if file.endpoint.len() > MAX_ENDPOINTS {
            return Err(format!(
                "{} endpoints, the limit is {MAX_ENDPOINTS}",
                file.endpoint.len()
            ));
        }
        let mut problems = Vec::new();
        let mut endpoints = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, e) in file.endpoint.into_iter().enumerate() {
            let url = match normalise(&e.url) {
                Ok(u) => u,
                Err(why) => {
                    problems.push(format!("endpoint[{i}].url: {why}"));
                    continue;
                }
            };
            if !seen.insert(url.to_string()) {
                problems.push(format!("endpoint[{i}].url: {url} is listed twice"));
            }
            match Secret::parse(&e.secret) {
                Ok(secret) => endpoints.push(Endpoint {
                    url,
                    secret,
                    all_debates: e.all_debates.into_iter().collect(),
                    private_network: e.private_network,
                }),
                Err(why) => problems.push(format!("endpoint[{i}].secret: {why}")),
            }
        }
        let retry_for = file.retry_for_secs.unwrap_or(DEFAULT_RETRY_FOR_SECS);
        if !(1..=7 * 24 * 3600).contains(&retry_for) {
            problems.push(format!(
                "retry_for_secs: {retry_for} is out of range 1-604800"
            ));
        }
        if !problems.is_empty() {
            return Err(problems.join("; "));
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
    pub fn check(&self, hooks: &[WebhookSubscription]) -> Result<(), String> {
        for (i, h) in hooks.iter().enumerate() {
            if self.find(&h.url).is_none() {
                return Err(format!(
                    "webhooks[{i}].url: {:?} is not one of this server's webhook endpoints \
                     (the operator lists them with --webhooks)",
                    parley_protocol::preview(&h.url, 120)
                ));
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
        assert!(err.starts_with("webhooks[1].url:"), "{err}");
        assert_eq!(e.retry_for.as_secs(), DEFAULT_RETRY_FOR_SECS);
    }

    #[test]
    fn a_bad_file_names_every_problem_and_no_secret() {
        let text = "retry_for_secs = 0\n\
             [[endpoint]]\nurl = \"ftp://x\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n\
             [[endpoint]]\nurl = \"https://u:p@x.example/\"\nsecret = \"s\"\n\
             [[endpoint]]\nurl = \"https://y.example/\"\nsecret = \"whsec_c2hvcnQ=\"\n";
        let err = Endpoints::parse(text).unwrap_err();
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
        assert!(!typo.contains("secretvalue"), "{typo}");
    }
}
