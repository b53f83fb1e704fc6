//! Test-only helpers for Parley's integration tests and benchmarks.
//!
//! # Layout
//! - [`fake_llm`]: [`FakeLlm`], an OpenAI-compatible HTTP server (Chat Completions and
//!   Responses API) whose latency, faults, rate limit and replies are knobs, and which
//!   records every request. The `fake-llm` binary runs one in its own process.
//! - [`servers`]: [`NatsServer`] and [`RedisServer`], real server processes on ephemeral
//!   loopback ports with private data directories; kill and restart them to test crashes.
//! - [`webdriver`]: [`Browser`], a headless Chromium driven over the W3C WebDriver
//!   protocol (`chromedriver`), for the web page's browser tests.
//! - [`process`]: [`ChildProcess`] for our own binaries ([`workspace_bin`] finds them),
//!   [`parley_command`] and [`run_parley`] for the CLI in a clean environment, plus [`free_port`],
//!   [`send_signal`], [`wait_until`] and [`wait_until_async`].
//! - [`pty`]: [`OnPty`], a process on a pseudo-terminal, for interactive commands.
//!
//! Every process and server is killed when its handle is dropped, and its temporary
//! directory removed. Logs go to files, never to the test's terminal; when a test panics,
//! the handles print the tail of their logs as they drop.

pub mod fake_llm;
pub mod otlp;
pub mod process;
pub mod pty;
pub mod servers;
pub mod webdriver;

pub use fake_llm::{
    embed_text, FakeLlm, FakeToolCall, Fault, Latency, Match, RateLimit, RecordedRequest,
    StructuredOutput, EMBEDDING_DIMENSIONS,
};
pub use otlp::{OtlpReceiver, ReceivedEvent, ReceivedSpan, SpanStatus};
pub use process::{
    free_port, parley_command, run_parley, send_signal, wait_until, wait_until_async,
    workspace_bin, ChildProcess,
};
pub use pty::OnPty;
pub use servers::{ClusterNode, NatsCluster, NatsServer, RedisCluster, RedisSentinel, RedisServer};
pub use webdriver::{browser_available, Browser};
