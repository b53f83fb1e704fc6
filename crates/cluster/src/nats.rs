//! Connecting to NATS with credentials, as every service and the CLI do.
//!
//! Credentials come the ordinary ways:
//! - in the URL: `nats://user:password@host:4222` (user/password; percent-encode special
//!   characters) or `nats://TOKEN@host:4222` (a token);
//! - in a file ([`NatsEndpoint::creds`], `--nats-creds FILE`, `PARLEY_NATS_CREDS`, settings
//!   key `nats_creds`): a `.creds` file (user JWT + NKey seed, decentralized auth) or a
//!   file holding an NKey seed (`SU...`, a user listed by its public `nkey` in the server
//!   config).
//!
//! Giving both is an error (which one would win is not obvious). URLs are never logged or
//! echoed with their credentials ([`redact`]).
//!
//! Each identity uses its own inbox prefix, so the server's permissions can keep replies
//! meant for one identity (request replies, JetStream API answers, pulled task messages and
//! events) away from every other: the coordinator [`INBOX_COORDINATOR`], the workers
//! [`inbox_worker`] (one per kind), and each client its own ([`NatsEndpoint::client`]):
//! given explicitly (`--nats-inbox-prefix`, `PARLEY_NATS_INBOX_PREFIX`), else
//! `_INBOX_<user>` for a user named in the URL, else NATS's default `_INBOX` (a server
//! without per-user permissions). The shipped server config lets each user subscribe only
//! to its own prefix (`deploy/nats/parley.conf`, `deploy/nats/client-user.sh`).
//!
//! Server errors (a permission violation above all) are logged as warnings: with the
//! shipped roles a refused publish is otherwise silent.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context as _};

/// The subject to answer `msg` on: its reply subject when it is an inbox
/// ([`parley_protocol::subjects::reply_refusal`]), else `None` — counted
/// (`parley_replies_refused_total{subject=label}`) and logged with the request subject and
/// the refused reply subject (clipped), never the payload. Every service request handler
/// takes its reply subject from here, so an answer never reaches a subject the requester
/// chose to borrow the service's permissions for (`$JS.API...`, `$KV...`, a task subject).
pub fn reply_subject(
    msg: &async_nats::Message,
    label: &'static str,
) -> Option<async_nats::Subject> {
    let reply = msg.reply.as_ref()?;
    match parley_protocol::subjects::reply_refusal(reply.as_str()) {
        None => Some(reply.clone()),
        Some(why) => {
            parley_telemetry::metrics().reply_refused(label);
            tracing::warn!(
                subject = %parley_protocol::preview(msg.subject.as_str(), 120),
                reply = %parley_protocol::preview(reply.as_str(), 120),
                why,
                "not answering a request whose reply subject is not an inbox"
            );
            None
        }
    }
}

/// Inbox prefix of the coordinator's connections.
pub const INBOX_COORDINATOR: &str = "_INBOX_coordinator";
/// Inbox prefix of the agent workers' connections.
pub const INBOX_AGENT_WORKER: &str = "_INBOX_agent_worker";
/// Inbox prefix of the judge workers' connections.
pub const INBOX_JUDGE_WORKER: &str = "_INBOX_judge_worker";
/// Inbox prefix of a client that names no user: the NATS default.
pub const INBOX_CLIENT: &str = "_INBOX";
/// Longest inbox prefix accepted (a subject token; the server's control line is bounded).
pub const MAX_INBOX_PREFIX_BYTES: usize = 64;

/// Inbox prefix of a worker of `kind`.
pub fn inbox_worker(kind: parley_protocol::WorkerKind) -> &'static str {
    match kind {
        parley_protocol::WorkerKind::Agent => INBOX_AGENT_WORKER,
        parley_protocol::WorkerKind::Judge => INBOX_JUDGE_WORKER,
    }
}

/// Checks an inbox prefix: one subject token of letters, digits, `_` and `-`, at most
/// [`MAX_INBOX_PREFIX_BYTES`] bytes (no `.`, no wildcard, no space).
pub fn validate_inbox_prefix(prefix: &str) -> anyhow::Result<()> {
    let ok = !prefix.is_empty()
        && prefix.len() <= MAX_INBOX_PREFIX_BYTES
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(anyhow!(
            "NATS inbox prefix {:?}: expected 1 to {MAX_INBOX_PREFIX_BYTES} letters, digits, \
             '_' or '-' (one subject token)",
            clip(prefix)
        ))
    }
}

fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Where and as whom to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsEndpoint {
    /// One URL or a comma-separated list; may carry credentials.
    pub url: String,
    /// A `.creds` or NKey seed file.
    pub creds: Option<PathBuf>,
    /// Inbox prefix of this identity (see the module docs).
    pub inbox_prefix: String,
}

impl NatsEndpoint {
    pub fn new(
        url: impl Into<String>,
        creds: Option<PathBuf>,
        inbox_prefix: impl Into<String>,
    ) -> Self {
        Self {
            url: url.into(),
            creds,
            inbox_prefix: inbox_prefix.into(),
        }
    }

    /// A client's endpoint (the CLI, `parley serve`): its inbox prefix is `inbox_prefix`
    /// when given, else `_INBOX_<user>` when the (first) URL names a user, else
    /// [`INBOX_CLIENT`]. An invalid prefix (given, or derived from a user name that is not
    /// one subject token) is an error naming it.
    pub fn client(
        url: impl Into<String>,
        creds: Option<PathBuf>,
        inbox_prefix: Option<&str>,
    ) -> anyhow::Result<Self> {
        let url = url.into();
        let prefix = match inbox_prefix.map(str::trim).filter(|p| !p.is_empty()) {
            Some(p) => p.to_string(),
            None => {
                let first = url.split(',').find(|s| !s.trim().is_empty()).unwrap_or("");
                match split_credentials(first).1 {
                    Some(UrlAuth::UserPassword(user, _)) => {
                        let derived = format!("{INBOX_CLIENT}_{user}");
                        validate_inbox_prefix(&derived).map_err(|_| {
                            anyhow!(
                                "the NATS user name {:?} cannot name an inbox (letters, digits, \
                                 '_' and '-' only): give --nats-inbox-prefix",
                                clip(&user)
                            )
                        })?;
                        derived
                    }
                    _ => INBOX_CLIENT.to_string(),
                }
            }
        };
        validate_inbox_prefix(&prefix)?;
        Ok(Self::new(url, creds, prefix))
    }
}

/// Credentials found in a URL's user-info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlAuth {
    UserPassword(String, String),
    Token(String),
}

/// `url` without its user-info, and the credentials it held.
pub fn split_credentials(url: &str) -> (String, Option<UrlAuth>) {
    let url = url.trim();
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return (url.to_string(), None);
    };
    let auth = match userinfo.split_once(':') {
        Some((user, pass)) => UrlAuth::UserPassword(percent_decode(user), percent_decode(pass)),
        None => UrlAuth::Token(percent_decode(userinfo)),
    };
    let bare = match scheme {
        Some(s) => format!("{s}://{host}{tail}"),
        None => format!("{host}{tail}"),
    };
    (bare, Some(auth))
}

/// `url` (or a comma-separated list) with any credentials replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    url.split(',')
        .map(|u| match split_credentials(u) {
            (bare, Some(_)) => match bare.split_once("://") {
                Some((s, r)) => format!("{s}://***@{r}"),
                None => format!("***@{bare}"),
            },
            (bare, None) => bare,
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(v) = hex {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a credentials file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredsFile {
    /// A `.creds` file (JWT and seed); passed to the client as is.
    Jwt(String),
    /// A bare NKey user seed.
    NkeySeed(String),
}

/// Reads and recognises a credentials file; the error names the file, never its content.
pub fn read_creds(path: &Path) -> anyhow::Result<CredsFile> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the NATS credentials file {}", path.display()))?;
    if text.contains("BEGIN NATS USER JWT") {
        return Ok(CredsFile::Jwt(text));
    }
    text.lines()
        .map(str::trim)
        .find(|l| {
            l.starts_with("SU") && l.len() > 50 && l.bytes().all(|b| b.is_ascii_alphanumeric())
        })
        .map(|l| CredsFile::NkeySeed(l.to_string()))
        .ok_or_else(|| {
            anyhow!(
                "{}: neither a .creds file (user JWT and seed) nor an NKey user seed (SU...)",
                path.display()
            )
        })
}

/// Connection options carrying the endpoint's credentials, and the server list without
/// them.
pub fn connect_options(
    endpoint: &NatsEndpoint,
) -> anyhow::Result<(async_nats::ConnectOptions, Vec<String>)> {
    let mut servers = Vec::new();
    let mut url_auth = None;
    for server in endpoint.url.split(',').filter(|s| !s.trim().is_empty()) {
        let (bare, auth) = split_credentials(server);
        servers.push(bare);
        if url_auth.is_none() {
            url_auth = auth;
        }
    }
    if servers.is_empty() {
        return Err(anyhow!("no NATS server URL given"));
    }
    validate_inbox_prefix(&endpoint.inbox_prefix)?;
    let mut options =
        async_nats::ConnectOptions::new().custom_inbox_prefix(endpoint.inbox_prefix.clone());
    match (&endpoint.creds, url_auth) {
        (Some(_), Some(_)) => {
            return Err(anyhow!(
                "NATS credentials given twice: in the URL and in a credentials file; keep one"
            ))
        }
        (Some(path), None) => {
            options = match read_creds(path)? {
                CredsFile::Jwt(text) => options
                    .credentials(&text)
                    .with_context(|| format!("invalid NATS credentials file {}", path.display()))?,
                CredsFile::NkeySeed(seed) => options.nkey(seed),
            };
        }
        (None, Some(UrlAuth::UserPassword(u, p))) => options = options.user_and_password(u, p),
        (None, Some(UrlAuth::Token(t))) => options = options.token(t),
        (None, None) => {}
    }
    options = options.event_callback(|event| async move {
        match event {
            async_nats::Event::ServerError(e) => {
                tracing::warn!(error = %e, "the NATS server reported an error");
            }
            async_nats::Event::SlowConsumer(sid) => {
                tracing::warn!(subscription = sid, "NATS: slow consumer; messages dropped");
            }
            other => tracing::debug!(event = %other, "NATS connection event"),
        }
    });
    Ok((options, servers))
}

/// Connects a service: retries until the server is up (a service may start first).
pub async fn connect_service(endpoint: &NatsEndpoint) -> anyhow::Result<async_nats::Client> {
    let (options, servers) = connect_options(endpoint)?;
    options
        .retry_on_initial_connect()
        .connect(servers.as_slice())
        .await
        .with_context(|| format!("while connecting to NATS at {}", redact(&endpoint.url)))
}

/// Connects a command-line client: fails after `timeout` when the server does not answer.
pub async fn connect_client(
    endpoint: &NatsEndpoint,
    timeout: Duration,
) -> anyhow::Result<async_nats::Client> {
    let (options, servers) = connect_options(endpoint)?;
    options
        .connection_timeout(timeout)
        .connect(servers.as_slice())
        .await
        .map_err(|e| anyhow!("cannot connect to NATS at {}: {e}", redact(&endpoint.url)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_out_of_urls() {
        assert_eq!(
            split_credentials("nats://worker:p%40ss%3Aw@nats:4222"),
            (
                "nats://nats:4222".to_string(),
                Some(UrlAuth::UserPassword("worker".into(), "p@ss:w".into()))
            )
        );
        assert_eq!(
            split_credentials("tls://s3cr3t@nats.example:4443"),
            (
                "tls://nats.example:4443".to_string(),
                Some(UrlAuth::Token("s3cr3t".into()))
            )
        );
        assert_eq!(
            split_credentials("nats://127.0.0.1:4222"),
            ("nats://127.0.0.1:4222".to_string(), None)
        );
        assert_eq!(split_credentials("a:b@host:1").0, "host:1");
        let r = redact("nats://u:hunter2@a:1,nats://b:2");
        assert_eq!(r, "nats://***@a:1,nats://b:2");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn credentials_files_are_recognised_and_never_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let seed = dir.path().join("worker.nk");
        let s = format!("# worker\nSU{}\n", "A".repeat(56));
        std::fs::write(&seed, &s).unwrap();
        assert!(
            matches!(read_creds(&seed).unwrap(), CredsFile::NkeySeed(k) if k.starts_with("SUAAA"))
        );
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "password=SUPERSECRET").unwrap();
        let e = read_creds(&bad).unwrap_err().to_string();
        assert!(!e.contains("SUPERSECRET"), "{e}");
        let both = NatsEndpoint::new("nats://u:p@h:1", Some(seed), INBOX_CLIENT);
        assert!(connect_options(&both).is_err());
    }

    #[test]
    fn each_client_gets_its_own_inbox_prefix() {
        let prefix = |url: &str, given: Option<&str>| {
            NatsEndpoint::client(url, None, given).map(|e| e.inbox_prefix)
        };
        assert_eq!(prefix("nats://alice:pw@h:1", None).unwrap(), "_INBOX_alice");
        assert_eq!(
            prefix("nats://alice:pw@h:1,nats://h2:2", Some("_INBOX_team-a")).unwrap(),
            "_INBOX_team-a"
        );
        assert_eq!(prefix("nats://h:1", None).unwrap(), "_INBOX");
        assert_eq!(prefix("nats://tok@h:1", None).unwrap(), "_INBOX");
        for bad in ["_INBOX.>", "a b", "*", &"x".repeat(65)] {
            let e = prefix("nats://h:1", Some(bad)).unwrap_err().to_string();
            assert!(e.contains("inbox prefix"), "{e}");
        }
        // A user name that cannot be a subject token needs an explicit prefix.
        let e = prefix("nats://a.b:pw@h:1", None).unwrap_err().to_string();
        assert!(
            e.contains("--nats-inbox-prefix") && !e.contains("pw"),
            "{e}"
        );
        assert_eq!(
            prefix("nats://a.b:pw@h:1", Some("_INBOX_ab")).unwrap(),
            "_INBOX_ab"
        );
    }
}
