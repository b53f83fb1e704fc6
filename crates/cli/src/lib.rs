//! Library side of the `parley` CLI: what benchmarks and tests reuse.
//!
//! - [`estimate`]: what a debate will cost, from its spec, with no LLM call.
//! - [`calibration`]: the completion tokens past debates really used, which estimates
//!   learn from.

pub mod calibration;
pub mod estimate;

/// Where embedded debates are saved (`<id>.json`, with their events, records and reports).
pub const DEBATES_DIR: &str = "./debates";

use std::sync::Arc;

use async_trait::async_trait;
use parley_engine::TaskRunner;
use parley_llm::Registry;
use parley_protocol::{ContextFiles, Task, TaskResult, WorkerKind};

/// Runs tasks in this process: the agent and judge workers' logic over the provider
/// registry (the embedded mode's [`TaskRunner`]). One runner serves one debate.
pub struct EmbeddedRunner {
    pub registry: Arc<Registry>,
    /// The debate's context snapshot (its spec's `contextFiles`), read by agents' tools.
    pub context_files: Option<Arc<ContextFiles>>,
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
                parley_agent_worker::execute(
                    &task,
                    provider.as_ref(),
                    "embedded",
                    self.context_files.as_deref(),
                )
                .await
            }
            WorkerKind::Judge => {
                parley_judge_worker::execute(&task, provider.as_ref(), "embedded").await
            }
        }
    }
}
