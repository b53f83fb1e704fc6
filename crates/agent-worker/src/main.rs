//! `parley-agent-worker`: consumes `parley.tasks.agent` from JetStream. See `parley_worker`.

use std::process::ExitCode;
use std::sync::Arc;

use parley_protocol::WorkerKind;

/// mimalloc: the services allocate and free many small buffers per task from several
/// threads, where glibc's malloc spent about a third of the coordinator's CPU.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
