//! `parley-agent-worker`: consumes `parley.tasks.agent` from JetStream. See `parley_worker`.

use std::process::ExitCode;
use std::sync::Arc;

use parley_protocol::WorkerKind;

#[tokio::main]
async fn main() -> ExitCode {
    let exec = Arc::new(parley_agent_worker::service::AgentExecutor);
    match parley_worker::cli::main(WorkerKind::Agent, exec).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
