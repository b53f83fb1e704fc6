//! Library side of the `parley` CLI: what benchmarks and tests reuse.

use std::sync::Arc;

use async_trait::async_trait;
use parley_coordinator::TaskRunner;
use parley_llm::Registry;
use parley_protocol::{Task, TaskResult, WorkerKind};

/// Runs tasks in this process: the agent and judge workers' logic over the provider
/// registry (the embedded mode's [`TaskRunner`]).
pub struct EmbeddedRunner {
    pub registry: Arc<Registry>,
}

#[async_trait]
impl TaskRunner for EmbeddedRunner {
    async fn run(&self, task: Task) -> TaskResult {
        let provider = match self.registry.provider_for(&task.agent) {
            Ok(p) => p,
            Err(e) => return parley_llm::task_result(&task, "embedded", Err(e)),
        };
        match task.kind.worker() {
            WorkerKind::Agent => {
                parley_agent_worker::execute(&task, provider.as_ref(), "embedded").await
            }
            WorkerKind::Judge => {
                parley_judge_worker::execute(&task, provider.as_ref(), "embedded").await
            }
        }
    }
}
