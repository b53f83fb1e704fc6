//! `parley mcp`: the Model Context Protocol server (`parley_mcp`) over standard input and
//! output, for an MCP client that starts it (Claude Code, Cursor, ...), over debates run in
//! this process (default, saved in `./debates/`) or a cluster (`--nats-url`).
//!
//! The backend is opened as `parley serve` opens it (the same flags, the same config).
//! Standard output carries the protocol only: every message of this process goes to
//! standard error. When the client ends the session (closes the pipe), the debates this
//! process runs are saved as they are; the next `parley mcp` (or `parley serve`) in the
//! same folder continues them.

use tokio_util::sync::CancellationToken;

use crate::serve::{open_backend, BackendArgs, OpenBackend};
use crate::{run, CliError};

#[derive(clap::Args, Debug)]
#[command(
    mut_arg("nats_url", |a| a.env("PARLEY_MCP_NATS_URL")),
    mut_arg("max_agents", |a| a.env("PARLEY_MCP_MAX_AGENTS"))
)]
pub struct McpArgs {
    #[command(flatten)]
    pub backend: BackendArgs,
}

pub async fn mcp(args: McpArgs, interrupt: &CancellationToken) -> Result<(), CliError> {
    // Ends with the session (or an interrupt): the embedded debates then stop and are
    // saved.
    let session_over = interrupt.child_token();
    let OpenBackend {
        backend,
        embedded,
        estimator,
        ..
    } = open_backend(&args.backend, &session_over).await?;
    eprintln!(
        "Parley MCP server: {} debates, on standard input and output",
        backend.kind()
    );
    let server = parley_mcp::ParleyMcp::new(backend, estimator);
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
