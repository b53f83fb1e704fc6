//! `parley mcp`: the Model Context Protocol server (`parley_mcp`) over standard input and
//! output, for an MCP client that starts it (Claude Code, Cursor, ...), over debates run in
//! this process (default, saved in `./debates/`) or a cluster (`--nats-url`).
//!
//! The backend is opened as `parley serve` opens it (the same flags, the same config).
//! Standard output carries the protocol only: every message of this process goes to
//! standard error. When the client ends the session (closes the pipe), the debates this
//! process runs are saved as they are; the next `parley mcp` (or `parley serve`) in the
//! same folder continues them.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use crate::serve::{open_backend, BackendFlags, OpenBackend};
use crate::{run, CliError};

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// Front this cluster over NATS instead of running debates in this process. Repeat
    /// the flag, or separate URLs with commas, to name several servers of one NATS
    /// cluster. From the environment (`PARLEY_MCP_NATS_URL`), a URL holding a password
    /// stays out of the process's command line.
    #[arg(
        long,
        env = "PARLEY_MCP_NATS_URL",
        hide_env_values = true,
        value_name = "URL",
        value_delimiter = ','
    )]
    pub nats_url: Vec<String>,
    /// NATS credentials file for --nats-url: a `.creds` file or an NKey seed file.
    #[arg(long, env = "PARLEY_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// Inbox prefix of this server's NATS replies [default: `_INBOX_<user>` for a user in
    /// the URL, else `_INBOX`].
    #[arg(long, env = "PARLEY_NATS_INBOX_PREFIX", value_name = "PREFIX")]
    pub nats_inbox_prefix: Option<String>,
    /// With --nats-url: debates' event streams followed at once [default: 64].
    #[arg(long, env = "PARLEY_MAX_EVENT_STREAMS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_event_streams: Option<u32>,
    /// Debate configuration: the settings of every debate a tool call starts (default
    /// ./debate-config.json).
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Load environment variables (API keys) from this file (default ./.env when present).
    #[arg(short = 'e', long, value_name = "FILE")]
    pub env_file: Option<PathBuf>,
    /// The most agents one debate may have.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=parley_protocol::limits::MAX_AGENTS as i64))]
    pub max_agents: Option<u32>,
    /// Embedded: the LiteLLM-format price file calls are charged at (default: the
    /// config's `prices`); also the prices of `estimate_debate`.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Embedded: the key each finished debate's decision record is signed with.
    #[command(flatten)]
    pub signing: crate::decisions::SigningArgs,
}

pub async fn mcp(args: McpArgs, interrupt: &CancellationToken) -> Result<(), CliError> {
    let flags = BackendFlags {
        nats_url: &args.nats_url,
        nats_creds: args.nats_creds.as_deref(),
        nats_inbox_prefix: args.nats_inbox_prefix.as_deref(),
        max_event_streams: args.max_event_streams,
        config: args.config.as_deref(),
        max_agents: args.max_agents,
        prices: args.prices.as_deref(),
        signing: &args.signing,
    };
    // Ends with the session (or an interrupt): the embedded debates then stop and are
    // saved.
    let session_over = interrupt.child_token();
    let tickets = parley_mcp::Tickets::default();
    let OpenBackend {
        backend,
        embedded,
        estimator,
        ..
    } = open_backend(flags, &session_over, tickets.clone()).await?;
    eprintln!(
        "Parley MCP server: {} debates, on standard input and output",
        backend.kind()
    );
    let server = parley_mcp::ParleyMcp::new(backend, estimator, tickets);
    let served = parley_mcp::serve_stdio(server, session_over.clone()).await;
    session_over.cancel();
    if let Some(e) = embedded {
        e.stopped().await;
        eprintln!("Saved the debates in flight to {}", run::DEBATES_DIR);
    }
    if interrupt.is_cancelled() {
        return Err(CliError::interrupted("interrupted"));
    }
    served.map_err(|e| CliError::general(e.to_string()))
}
