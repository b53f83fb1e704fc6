//! The judge worker as a NATS service: the shared consume loop of `parley-worker` running
//! [`crate::execute`].

use std::sync::Arc;

use async_trait::async_trait;
use parley_llm::Provider;
use parley_protocol::{Task, TaskResult, WorkerKind};
use parley_worker::{TaskExecutor, WorkerConfig};
use tokio_util::sync::CancellationToken;

/// Runs [`crate::execute`] for each task.
pub struct JudgeExecutor;

#[async_trait]
impl TaskExecutor for JudgeExecutor {
    async fn execute(
        &self,
        task: &Task,
        provider: &dyn Provider,
        worker: &str,
        _files: Option<&parley_protocol::ContextFiles>,
    ) -> TaskResult {
        // The judge calls no tools.
        crate::execute(task, provider, worker).await
    }
}

/// Runs the judge worker until `shutdown` is cancelled (`config.kind` is forced to judge).
pub async fn run(mut config: WorkerConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    config.kind = WorkerKind::Judge;
    parley_worker::run(config, Arc::new(JudgeExecutor), shutdown).await
}
