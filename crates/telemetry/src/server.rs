//! One HTTP/1 server loop for every HTTP port Parley opens (`parley serve` and the services'
//! `/metrics` `/healthz` `/readyz`), bounded against slow and idle clients.
//!
//! `axum::serve` waits as long as a client likes for a request's headers and accepts
//! connections until the process runs out of file descriptors; a few dozen connections that
//! send half a request and then nothing hold a port, and at the file limit a normal request
//! times out. [`serve_router`] serves an axum [`Router`] with three bounds instead:
//!
//! - **header-read timeout** ([`ConnectionLimits::header_read_timeout`]): a request's head
//!   must arrive within it, counted from when the server starts waiting for it — on a new
//!   connection and between the requests of a kept-alive one, so it also closes idle
//!   kept-alive connections;
//! - **idle timeout** ([`ConnectionLimits::idle_timeout`]): a connection on which no byte has
//!   moved either way for this long is closed (a body that stalls, a client that stops
//!   reading a response). An event stream's keep-alive comments count as bytes, so a
//!   stream to a reading client stays open;
//! - **connection cap** ([`ConnectionLimits::max_connections`], kept well below the usual
//!   1,024 file descriptors): at the cap, a new connection closes the oldest connection that
//!   has no request in progress (one still sending its headers, or kept alive between
//!   requests); only when every connection is busy with a request is the new one closed at
//!   once. So connections that only hold a slot cannot lock a newcomer out, and `/healthz`
//!   keeps answering while they try.
//!
//! Shutdown: when `shutdown` resolves the listener closes, connections between requests
//! close, and the ones in a request finish it (every wait in them is bounded by the
//! timeouts above).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The bounds [`serve_router`] keeps on its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a request's head (request line and headers) may take to arrive.
    pub header_read_timeout: Duration,
    /// How long a connection may go without a byte read or written.
    pub idle_timeout: Duration,
    /// Connections open at once, at most.
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// `parley serve`: room for many tabs, each with an event stream and a few kept-alive
    /// connections. The idle timeout is four event-stream keep-alive intervals (15 s).
    pub const WEB: Self = Self {
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_connections: 256,
    };
    /// The services' `/metrics` `/healthz` `/readyz`: a scraper and a few probes.
    pub const OPERATIONS: Self = Self {
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        max_connections: 32,
    };
}

/// Serves `router` on `listener` within `limits` until `shutdown` resolves, then drains (see
/// the module docs). Returns once every connection has closed.
pub async fn serve_router(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let connections = Arc::new(Connections::default());
    let draining = CancellationToken::new();
    let tracker = TaskTracker::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let http = Arc::new(http);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors (EMFILE/ENFILE) or memory: wait for some to
                    // close rather than spin.
                    tracing::warn!(error = %e, "cannot accept a connection; retrying shortly");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some((id, conn)) = connections.admit(limits.max_connections) else {
            tracing::debug!("every connection is in a request: closing a new one");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let task = serve_connection(
            stream,
            conn,
            router.clone(),
            http.clone(),
            limits.idle_timeout,
            draining.clone(),
        );
        let connections = connections.clone();
        tracker.spawn(async move {
            task.await;
            connections.remove(id);
        });
    }
    drop(listener);
    draining.cancel();
    tracker.close();
    tracker.wait().await;
}

/// Errors of one accepted connection, not of the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// The open connections, oldest first.
#[derive(Default)]
struct Connections {
    /// Connection number (increasing with age) → its state.
    open: Mutex<BTreeMap<u64, Arc<Connection>>>,
    /// The next connection number.
    next: AtomicU64,
}

/// What the accept loop knows about one open connection.
#[derive(Default)]
struct Connection {
    /// Requests in progress: from their head's arrival until their response body is done
    /// (an event stream stays busy while it streams).
    busy: AtomicUsize,
    /// Cancelled to close the connection at once (evicted at the cap).
    evict: CancellationToken,
}

impl Connections {
    /// Registers a new connection, first closing the oldest one with no request in progress
    /// when `max` are open; `None` when every open connection is busy.
    fn admit(&self, max: usize) -> Option<(u64, Arc<Connection>)> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= max.max(1) {
            let oldest_idle = open
                .iter()
                .find(|(_, c)| c.busy.load(Ordering::SeqCst) == 0)
                .map(|(id, _)| *id)?;
            if let Some(c) = open.remove(&oldest_idle) {
                c.evict.cancel();
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Connection::default());
        open.insert(id, conn.clone());
        Some((id, conn))
    }

    fn remove(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

async fn serve_connection(
    stream: TcpStream,
    conn: Arc<Connection>,
    router: Router,
    http: Arc<hyper::server::conn::http1::Builder>,
    idle_timeout: Duration,
    draining: CancellationToken,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Metered {
        inner: stream,
        activity: activity.clone(),
    });
    let state = conn.clone();
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let busy = Busy::enter(state.clone());
        let mut router = router.clone();
        async move {
            // Router is always ready: `call` without `poll_ready` is what axum::serve does.
            let response = tower_service::Service::call(&mut router, req.map(Body::new)).await;
            Ok::<_, Infallible>(response.map_or_else(
                |never: Infallible| match never {},
                |r| r.map(|body| Tracked { body, _busy: busy }),
            ))
        }
    });
    let served = http.serve_connection(io, service);
    tokio::pin!(served);
    let mut draining_now = false;
    loop {
        tokio::select! {
            result = served.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "HTTP connection ended");
                }
                return;
            }
            () = conn.evict.cancelled() => return,
            () = activity.idle_for(idle_timeout) => return,
            () = draining.cancelled(), if !draining_now => {
                draining_now = true;
                served.as_mut().graceful_shutdown();
            }
        }
    }
}

/// When a byte last moved on a connection.
struct Activity {
    /// When the connection was accepted: the origin of `last_ms`.
    start: Instant,
    /// Milliseconds after `start`.
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves once no byte has moved for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let deadline =
                self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// The TCP stream, noting every read and write that moved bytes.
struct Metered {
    inner: TcpStream,
    /// Shared with the connection's idle watch.
    activity: Arc<Activity>,
}

impl AsyncRead for Metered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl AsyncWrite for Metered {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Marks a connection busy while it lives.
struct Busy(Arc<Connection>);

impl Busy {
    fn enter(conn: Arc<Connection>) -> Self {
        conn.busy.fetch_add(1, Ordering::SeqCst);
        Self(conn)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its connection marked busy until it is done or dropped.
struct Tracked {
    body: Body,
    /// Dropped with the body: the connection is idle again (evictable at the cap).
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_oldest_idle_connection_goes_and_busy_ones_stay() {
        let c = Connections::default();
        let (a, conn_a) = c.admit(2).unwrap();
        let _busy_a = Busy::enter(conn_a.clone());
        let (_b, conn_b) = c.admit(2).unwrap();
        // a is busy: b (idle) is evicted for the newcomer.
        let (_c, conn_c) = c.admit(2).unwrap();
        assert!(conn_b.evict.is_cancelled());
        assert!(!conn_a.evict.is_cancelled());
        // Both left are busy: a new one is refused.
        let _busy_c = Busy::enter(conn_c.clone());
        assert!(c.admit(2).is_none());
        drop(_busy_a);
        assert!(c.admit(2).is_some());
        assert!(conn_a.evict.is_cancelled());
        c.remove(a);
    }
}
