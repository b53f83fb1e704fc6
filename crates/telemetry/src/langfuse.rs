//! Langfuse as a trace destination (dialectic's `debate.trace: "langfuse"`).
//!
//! Langfuse ingests OpenTelemetry over OTLP/HTTP at `<host>/api/public/otel/v1/traces`
//! with HTTP Basic authentication of `public key : secret key`. [`langfuse_export`] builds
//! that export from the variables dialectic uses, so a dialectic user's `.env` works as it
//! is:
//!
//! | variable | meaning |
//! | --- | --- |
//! | `LANGFUSE_PUBLIC_KEY`, `LANGFUSE_SECRET_KEY` | the project's keys (both required) |
//! | `LANGFUSE_HOST` (or `LANGFUSE_BASE_URL`) | the Langfuse server, default Langfuse Cloud (EU) |
//!
//! The keys go only into the export's `Authorization` header, which [`OtlpExport`]'s
//! `Debug` never prints.

use base64::Engine as _;

use crate::{OtlpExport, OtlpProtocol};

pub const PUBLIC_KEY_ENV: &str = "LANGFUSE_PUBLIC_KEY";
pub const SECRET_KEY_ENV: &str = "LANGFUSE_SECRET_KEY";
pub const HOST_ENV: &str = "LANGFUSE_HOST";
pub const BASE_URL_ENV: &str = "LANGFUSE_BASE_URL";
/// Langfuse Cloud's EU region, Langfuse's own default.
pub const DEFAULT_HOST: &str = "https://cloud.langfuse.com";

/// Why the trace cannot be exported to Langfuse: what is missing or wrong, never a key's
/// value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LangfuseError {
    /// These key variables are not set (or empty).
    #[error(
        "exporting the trace to Langfuse needs {} (and optionally {})",
        .0.join(" and "),
        HOST_ENV
    )]
    MissingKeys(Vec<&'static str>),
    /// The host (from [`HOST_ENV`] or [`BASE_URL_ENV`]) is not an http(s) URL.
    #[error("{}={:?}: expected an http:// or https:// URL", HOST_ENV, .0)]
    BadHost(String),
}

/// The OTLP export to Langfuse from the environment; the error names what is missing or
/// wrong (never a key's value).
pub fn langfuse_export(get: impl Fn(&str) -> Option<String>) -> Result<OtlpExport, LangfuseError> {
    let non_empty = |k: &str| {
        get(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let (public, secret) = match (non_empty(PUBLIC_KEY_ENV), non_empty(SECRET_KEY_ENV)) {
        (Some(p), Some(s)) => (p, s),
        (p, s) => {
            let missing: Vec<&str> = [(PUBLIC_KEY_ENV, p.is_none()), (SECRET_KEY_ENV, s.is_none())]
                .into_iter()
                .filter(|(_, m)| *m)
                .map(|(k, _)| k)
                .collect();
            return Err(LangfuseError::MissingKeys(missing));
        }
    };
    let host = non_empty(HOST_ENV)
        .or_else(|| non_empty(BASE_URL_ENV))
        .unwrap_or_else(|| DEFAULT_HOST.to_string());
    if !(host.starts_with("http://") || host.starts_with("https://")) {
        return Err(LangfuseError::BadHost(host));
    }
    let credentials =
        base64::engine::general_purpose::STANDARD.encode(format!("{public}:{secret}"));
    let mut export = OtlpExport::new(
        OtlpProtocol::HttpProtobuf,
        format!("{}/api/public/otel/v1/traces", host.trim_end_matches('/')),
    );
    export
        .headers
        .push(("Authorization".into(), format!("Basic {credentials}")));
    Ok(export)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn keys_become_basic_auth_on_the_hosts_otel_route() {
        let e = langfuse_export(lookup(&[
            (PUBLIC_KEY_ENV, "pk-lf-1"),
            (SECRET_KEY_ENV, "sk-lf-2"),
            (HOST_ENV, "http://lf.internal:3000/"),
        ]))
        .unwrap();
        assert_eq!(e.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(
            e.endpoint,
            "http://lf.internal:3000/api/public/otel/v1/traces"
        );
        // base64("pk-lf-1:sk-lf-2")
        assert_eq!(
            e.headers,
            vec![(
                "Authorization".to_string(),
                "Basic cGstbGYtMTpzay1sZi0y".to_string()
            )]
        );
        let shown = format!("{e:?}");
        assert!(
            !shown.contains("cGst") && !shown.contains("sk-lf-2"),
            "{shown}"
        );
    }

    #[test]
    fn default_host_base_url_fallback_and_errors_name_the_variable() {
        let keys = [(PUBLIC_KEY_ENV, "p"), (SECRET_KEY_ENV, "s")];
        let e = langfuse_export(lookup(&keys)).unwrap();
        assert_eq!(
            e.endpoint,
            format!("{DEFAULT_HOST}/api/public/otel/v1/traces")
        );
        let with_base = [keys[0], keys[1], (BASE_URL_ENV, "https://eu.example")];
        let e = langfuse_export(lookup(&with_base)).unwrap();
        assert!(e.endpoint.starts_with("https://eu.example/api/public/otel"));
        let err = langfuse_export(lookup(&[(PUBLIC_KEY_ENV, "p")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(SECRET_KEY_ENV) && !err.contains(PUBLIC_KEY_ENV),
            "{err}"
        );
        let bad = [keys[0], keys[1], (HOST_ENV, "lf.internal")];
        assert_eq!(
            langfuse_export(lookup(&bad)).unwrap_err(),
            LangfuseError::BadHost("lf.internal".into())
        );
        assert!(langfuse_export(lookup(&bad))
            .unwrap_err()
            .to_string()
            .contains(HOST_ENV));
    }
}
