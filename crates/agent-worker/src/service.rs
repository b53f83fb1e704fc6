//! The agent worker as a NATS service: the shared consume loop of `parley-worker` running
//! [`crate::execute`].

use std::sync::Arc;

use async_trait::async_trait;
use parley_llm::Provider;
use parley_protocol::{ContextFiles, Task, TaskResult, WorkerKind};
use parley_worker::{TaskExecutor, WorkerConfig};
use tokio_util::sync::CancellationToken;

/// Runs [`crate::execute`] for each task.
pub struct AgentExecutor;

#[async_trait]
impl TaskExecutor for AgentExecutor {
    async fn execute(
        &self,
        task: &Task,
        provider: &dyn Provider,
        worker: &str,
        files: Option<&ContextFiles>,
    ) -> TaskResult {
        crate::execute(task, provider, worker, files).await
    }
}

/// Runs the agent worker until `shutdown` is cancelled (`config.kind` is forced to agent).
pub async fn run(mut config: WorkerConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    config.kind = WorkerKind::Agent;
    parley_worker::run(config, Arc::new(AgentExecutor), shutdown).await
}
