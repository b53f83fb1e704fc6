//! The services' operational HTTP endpoints: `GET /metrics`, `/healthz`, `/readyz`.
//!
//! Services take the address as `--metrics-addr` / `PARLEY_METRICS_ADDR`, default
//! `0.0.0.0:9090`, `off` to disable. With clap, keep the raw string and parse it after
//! parsing the arguments (a `value_parser` returning `Option<SocketAddr>` would make clap
//! treat the argument as optional):
//!
//! ```text
//! /// Address of /metrics, /healthz and /readyz (`off` disables them).
//! #[arg(long, env = "PARLEY_METRICS_ADDR", default_value = "0.0.0.0:9090")]
//! metrics_addr: String,
//! ...
//! let metrics_addr = parley_telemetry::parse_metrics_addr(&args.metrics_addr)?;
//! // (a `MetricsAddrError`, whose message names the bad value)
//! ```

use crate::metrics::{metrics, Metrics, CONTENT_TYPE};
use crate::server::{serve_router, ConnectionLimits};
use anyhow::Context as _;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use futures::future::BoxFuture;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Environment variable the services read their metrics address from.
pub const METRICS_ADDR_ENV: &str = "PARLEY_METRICS_ADDR";
/// Default metrics address.
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:9090";
/// How long `/readyz` waits for the readiness check before answering 503.
const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a service is not ready: the `/readyz` 503 body (no secrets in it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The NATS client is not connected; its connection state (`pending`, `disconnected`).
    #[error("NATS connection is {0}")]
    Nats(String),
    /// A dependency's check failed: its name (`redis`) and why.
    #[error("{dependency}: {reason}")]
    Dependency { dependency: String, reason: String },
    /// The check took longer than its 2 s.
    #[error("readiness check timed out")]
    TimedOut,
    /// Several checks failed ([`all_ready`]), each once, in the order given.
    #[error("{}", join(.0))]
    All(Vec<NotReady>),
}

impl NotReady {
    /// A dependency's failed check.
    pub fn dependency(dependency: &str, reason: impl std::fmt::Display) -> Self {
        Self::Dependency {
            dependency: dependency.to_string(),
            reason: reason.to_string(),
        }
    }
}

fn join(reasons: &[NotReady]) -> String {
    let texts: Vec<String> = reasons.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

/// A readiness check: resolves to `Ok(())` when the service can do its work, or to the
/// reason it cannot. Called at most once per [`READINESS_CACHE`], one call at a time; it
/// is given 2 s.
pub type Readiness = Arc<dyn Fn() -> BoxFuture<'static, Result<(), NotReady>> + Send + Sync>;

/// Always ready.
pub fn always_ready() -> Readiness {
    Arc::new(|| Box::pin(async { Ok(()) }))
}

#[cfg(feature = "nats")]
/// Ready while the NATS client is connected (`connection_state() == Connected`).
pub fn nats_ready(client: async_nats::Client) -> Readiness {
    Arc::new(move || {
        let state = client.connection_state();
        Box::pin(async move {
            match state {
                async_nats::connection::State::Connected => Ok(()),
                other => Err(NotReady::Nats(other.to_string())),
            }
        })
    })
}

/// Ready when every check is; otherwise the reason of the one that is not, or
/// [`NotReady::All`] with the reasons of those that are not (shown joined by `; `). The
/// checks run concurrently.
pub fn all_ready(checks: Vec<Readiness>) -> Readiness {
    Arc::new(move || {
        let pending: Vec<_> = checks.iter().map(|check| check()).collect();
        Box::pin(async move {
            let mut reasons: Vec<NotReady> = futures::future::join_all(pending)
                .await
                .into_iter()
                .filter_map(Result::err)
                .collect();
            match reasons.len() {
                0 => Ok(()),
                1 => Err(reasons.remove(0)),
                _ => Err(NotReady::All(reasons)),
            }
        })
    })
}

/// Why a `--metrics-addr` value is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "metrics address {value:?}: {source}; expected an IP and port such as 0.0.0.0:9090, or `off`"
)]
pub struct MetricsAddrError {
    /// The value given (trimmed).
    pub value: String,
    source: std::net::AddrParseError,
}

/// Parses a `--metrics-addr` / `PARLEY_METRICS_ADDR` value: `host:port` (IP literal, e.g.
/// `0.0.0.0:9090`, `[::]:9090`, `127.0.0.1:0`), `:port` (all IPv4 interfaces), or `off`
/// (`Ok(None)`: no HTTP endpoints).
pub fn parse_metrics_addr(value: &str) -> Result<Option<SocketAddr>, MetricsAddrError> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let full;
    let candidate = if value.starts_with(':') {
        full = format!("0.0.0.0{value}");
        full.as_str()
    } else {
        value
    };
    candidate
        .parse::<SocketAddr>()
        .map(Some)
        .map_err(|source| MetricsAddrError {
            value: value.to_string(),
            source,
        })
}

/// Binds `addr` and serves, on a spawned task until `shutdown` resolves:
/// - `GET /metrics`: the process-wide [`metrics()`] in the OpenMetrics text format
///   (`application/openmetrics-text; version=1.0.0; charset=utf-8`);
/// - `GET /healthz`: `200 ok` while the process runs (liveness);
/// - `GET /readyz`: `200 ready` when `readiness` passes, else `503` with the reason. The
///   result is kept for [`READINESS_CACHE`] and one check runs at a time, so probes (or
///   anyone else who reaches the port) cost the backends at most one check a second.
///
/// The connections are bounded by [`ConnectionLimits::OPERATIONS`] (see [`crate::server`]):
/// a client that sends its request slowly, or holds connections open, cannot keep the
/// probes from getting an answer.
///
/// What the port shows without authentication: counters and gauges (no debate content, no
/// secrets), `ok`, and readiness reasons such as `redis: connection refused`. Bind it to
/// the pod network or loopback, not to the internet.
///
/// Returns the bound address (bind port 0 in tests). Must be called inside a Tokio runtime.
pub async fn serve_http(
    addr: SocketAddr,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<SocketAddr> {
    serve_http_with(addr, metrics().clone(), readiness, shutdown).await
}

/// [`serve_http`] with an explicit [`Metrics`] instance.
pub async fn serve_http_with(
    addr: SocketAddr,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<SocketAddr> {
    serve_http_limited(
        addr,
        metrics,
        readiness,
        ConnectionLimits::OPERATIONS,
        shutdown,
    )
    .await
}

/// [`serve_http_with`] within explicit connection limits (tests use small ones).
pub async fn serve_http_limited(
    addr: SocketAddr,
    metrics: Metrics,
    readiness: Readiness,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics address {addr}"))?;
    let bound = listener.local_addr()?;
    let router = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz_handler))
        .with_state(AppState {
            metrics,
            readiness: Arc::new(CachedReadiness::new(readiness)),
        });
    tokio::spawn(async move {
        serve_router(listener, router, limits, shutdown).await;
        tracing::debug!(addr = %bound, "metrics HTTP server stopped");
    });
    Ok(bound)
}

/// How long a `/readyz` answer is reused.
pub const READINESS_CACHE: Duration = Duration::from_secs(1);

/// A readiness check run at most once per [`READINESS_CACHE`], one at a time.
struct CachedReadiness {
    check: Readiness,
    /// The last answer and when it was computed; the lock also makes concurrent requests
    /// wait for one check instead of each starting its own.
    last: tokio::sync::Mutex<Option<(tokio::time::Instant, Result<(), NotReady>)>>,
}

impl CachedReadiness {
    fn new(check: Readiness) -> Self {
        Self {
            check,
            last: tokio::sync::Mutex::new(None),
        }
    }

    async fn get(&self) -> Result<(), NotReady> {
        let mut last = self.last.lock().await;
        if let Some((at, result)) = last.as_ref() {
            if at.elapsed() < READINESS_CACHE {
                return result.clone();
            }
        }
        let result = match tokio::time::timeout(READINESS_TIMEOUT, (self.check)()).await {
            Ok(r) => r,
            Err(_) => Err(NotReady::TimedOut),
        };
        *last = Some((tokio::time::Instant::now(), result.clone()));
        result
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    readiness: Arc<CachedReadiness>,
}

async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        state.metrics.encode(),
    )
}

async fn readyz_handler(State(state): State<AppState>) -> impl IntoResponse {
    match state.readiness.get().await {
        Ok(()) => (StatusCode::OK, "ready".to_string()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn metrics_addresses() {
        assert_eq!(parse_metrics_addr("off"), Ok(None));
        assert_eq!(parse_metrics_addr(" OFF "), Ok(None));
        assert_eq!(
            parse_metrics_addr(DEFAULT_METRICS_ADDR),
            Ok(Some("0.0.0.0:9090".parse().unwrap()))
        );
        assert_eq!(
            parse_metrics_addr(":9191"),
            Ok(Some("0.0.0.0:9191".parse().unwrap()))
        );
        assert_eq!(
            parse_metrics_addr("[::1]:0"),
            Ok(Some("[::1]:0".parse().unwrap()))
        );
        let err = parse_metrics_addr("localhost").unwrap_err();
        assert_eq!(err.value, "localhost");
        assert!(err.to_string().contains("\"localhost\""), "{err}");
        assert!(parse_metrics_addr("").is_err());
    }

    #[tokio::test]
    async fn healthz_readyz_and_metrics_over_tcp() {
        let ready = Arc::new(AtomicBool::new(false));
        let flag = ready.clone();
        let readiness: Readiness = Arc::new(move || {
            let ok = flag.load(Ordering::SeqCst);
            Box::pin(async move {
                if ok {
                    Ok(())
                } else {
                    Err(NotReady::Nats("pending".into()))
                }
            })
        });
        let m = Metrics::new();
        m.llm_rate_limited("p1");
        let _in_flight = m.task_started(crate::TaskKind::Judge);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let addr = serve_http_with("127.0.0.1:0".parse().unwrap(), m, readiness, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
        assert_ne!(addr.port(), 0);
        let base = format!("http://{addr}");
        let http = reqwest::Client::new();
        let get = |path: &str| http.get(format!("{base}{path}")).send();

        let r = get("/healthz").await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "ok");

        let r = get("/readyz").await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.text().await.unwrap(), "NATS connection is pending");
        ready.store(true, Ordering::SeqCst);
        // The last answer is kept for READINESS_CACHE.
        tokio::time::sleep(READINESS_CACHE).await;
        let r = get("/readyz").await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "ready");

        let r = get("/metrics").await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        let body = r.text().await.unwrap();
        assert!(
            body.contains("# TYPE parley_tasks_in_flight gauge"),
            "{body}"
        );
        assert!(
            body.contains("parley_tasks_in_flight{kind=\"judge\"} 1"),
            "{body}"
        );
        assert!(
            body.contains("parley_llm_rate_limited_total{provider=\"p1\"} 1"),
            "{body}"
        );
        assert!(body.ends_with("# EOF\n"));

        assert_eq!(get("/nope").await.unwrap().status(), 404);
        let r = http.post(format!("{base}/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 405);

        stop.send(()).unwrap();
        let mut refused = false;
        for _ in 0..100 {
            // A new client: no pooled keep-alive connection.
            if reqwest::Client::new()
                .get(format!("{base}/healthz"))
                .send()
                .await
                .is_err()
            {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(refused, "the server stops after shutdown resolves");
    }

    /// The slowloris attack: 50 connections that each send half a request head and then
    /// nothing, against a server capped at 8 connections. `/healthz` still answers, and
    /// every one of the 50 is closed by the server (evicted at the cap or timed out waiting
    /// for its headers) instead of being held.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_clients_are_closed_and_healthz_answers_meanwhile() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(5),
            max_connections: 8,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let addr = serve_http_limited(
            "127.0.0.1:0".parse().unwrap(),
            Metrics::new(),
            always_ready(),
            limits,
            async {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap();
        let mut slow = Vec::new();
        for _ in 0..50 {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .await
                .unwrap();
            slow.push(c);
        }
        let r = reqwest::Client::new()
            .get(format!("http://{addr}/healthz"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("/healthz answers while 50 slow connections are open");
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "ok");
        // Every slow connection is closed by the server: a read ends (EOF or reset) long
        // before the 30 s this allows, where without the bounds it would wait forever.
        for (i, c) in slow.iter_mut().enumerate() {
            let mut buf = [0u8; 256];
            let ended = tokio::time::timeout(Duration::from_secs(30), async {
                loop {
                    match c.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => continue, // a 408 before the close
                    }
                }
            })
            .await;
            assert!(ended.is_ok(), "slow connection {i} was held open");
        }
        // A kept-alive connection that sends nothing more is closed too (header timeout
        // between requests).
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(30), idle.read_to_end(&mut got)).await;
        assert!(
            closed.is_ok(),
            "an idle kept-alive connection was held open"
        );
        assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
        let _ = stop.send(());
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_is_checked_at_most_once_a_second() {
        use std::sync::atomic::AtomicUsize;
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let check: Readiness = Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        });
        let cached = CachedReadiness::new(check);
        for _ in 0..20 {
            assert_eq!(cached.get().await, Ok(()));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        tokio::time::advance(READINESS_CACHE).await;
        assert_eq!(cached.get().await, Ok(()));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[cfg(feature = "nats")]
    #[tokio::test]
    async fn readiness_combinators_and_nats() {
        // No server on port 1: the client exists but is not connected.
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect("127.0.0.1:1")
            .await
            .unwrap();
        let err = nats_ready(client)().await.unwrap_err();
        let NotReady::Nats(state) = &err else {
            panic!("{err:?}");
        };
        assert_ne!(state, "connected");
        assert!(err.to_string().starts_with("NATS connection is "), "{err}");

        let down = || NotReady::dependency("redis", "connection refused");
        let failing: Readiness = Arc::new(move || Box::pin(async move { Err(down()) }));
        assert_eq!(
            all_ready(vec![always_ready(), always_ready()])().await,
            Ok(())
        );
        assert_eq!(
            all_ready(vec![failing.clone(), always_ready()])().await,
            Err(down())
        );
        let both = all_ready(vec![failing.clone(), always_ready(), failing])()
            .await
            .unwrap_err();
        assert_eq!(both, NotReady::All(vec![down(), down()]));
        assert_eq!(
            both.to_string(),
            "redis: connection refused; redis: connection refused"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_readiness_check_times_out() {
        let hanging: Readiness = Arc::new(|| Box::pin(futures::future::pending()));
        let state = AppState {
            metrics: Metrics::new(),
            readiness: Arc::new(CachedReadiness::new(hanging)),
        };
        let response = readyz_handler(State(state)).await.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
