//! `fake-llm`: runs a [`FakeLlm`] in its own process until killed (or Ctrl-C).
//!
//! ```text
//! fake-llm [--port N] [--latency-ms N] [--latency-p99-ms N] [--rpm N] [--retry-after-s N]
//!          [--no-responses-api]
//! ```
//! Prints `listening on http://127.0.0.1:PORT/v1` once it accepts requests. With both
//! `--latency-ms` and `--latency-p99-ms`, latency is heavy-tailed (log-normal, p50/p99).

use anyhow::{bail, Context as _};
use parley_testkit::{FakeLlm, Latency, RateLimit};
use std::io::Write as _;
use std::time::Duration;

const USAGE: &str = "usage: fake-llm [--port N] [--latency-ms N] [--latency-p99-ms N] \
                     [--rpm N] [--retry-after-s N] [--no-responses-api]";

#[derive(Debug, Default)]
struct Flags {
    port: u16,
    latency_ms: Option<u64>,
    latency_p99_ms: Option<u64>,
    rpm: Option<u32>,
    retry_after_s: Option<u64>,
    no_responses_api: bool,
}

fn parse_flags(mut args: impl Iterator<Item = String>) -> anyhow::Result<Option<Flags>> {
    fn value<T: std::str::FromStr>(
        flag: &str,
        args: &mut impl Iterator<Item = String>,
    ) -> anyhow::Result<T>
    where
        T::Err: std::error::Error + Send + Sync + 'static,
    {
        let v = args
            .next()
            .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        v.parse()
            .with_context(|| format!("{flag}: {v:?} is not a valid number\n{USAGE}"))
    }
    let mut f = Flags::default();
    while let Some(arg) = args.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut rest = inline.into_iter().chain(&mut args);
        match flag.as_str() {
            "--port" => f.port = value(&flag, &mut rest)?,
            "--latency-ms" => f.latency_ms = Some(value(&flag, &mut rest)?),
            "--latency-p99-ms" => f.latency_p99_ms = Some(value(&flag, &mut rest)?),
            "--rpm" => f.rpm = Some(value(&flag, &mut rest)?),
            "--retry-after-s" => f.retry_after_s = Some(value(&flag, &mut rest)?),
            "--no-responses-api" => f.no_responses_api = true,
            "-h" | "--help" => return Ok(None),
            other => bail!("unknown flag {other:?}\n{USAGE}"),
        }
    }
    Ok(Some(f))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Some(flags) = parse_flags(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(());
    };
    let llm = FakeLlm::start_on_port(flags.port).await?;
    match (flags.latency_ms, flags.latency_p99_ms) {
        (Some(p50), Some(p99)) => llm.set_latency(Latency::HeavyTail {
            p50: Duration::from_millis(p50),
            p99: Duration::from_millis(p99),
        }),
        (Some(ms), None) => llm.set_latency(Latency::Fixed(Duration::from_millis(ms))),
        (None, Some(_)) => bail!("--latency-p99-ms needs --latency-ms (the p50)\n{USAGE}"),
        (None, None) => {}
    }
    if let Some(rpm) = flags.rpm {
        llm.set_rate_limit(Some(RateLimit {
            requests: rpm,
            window: Duration::from_secs(60),
            retry_after: flags.retry_after_s.map(Duration::from_secs),
        }));
    }
    llm.set_responses_api(!flags.no_responses_api);
    println!("listening on {}", llm.base_url());
    std::io::stdout()
        .flush()
        .context("while writing to stdout")?;
    tokio::signal::ctrl_c()
        .await
        .context("while waiting for Ctrl-C")?;
    eprintln!("fake-llm: {} requests served", llm.request_count());
    Ok(())
}
