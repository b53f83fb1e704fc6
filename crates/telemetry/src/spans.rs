//! The span of one task run, shared by the embedded driver and the workers.

use parley_protocol::Task;

/// The span of one task run: under its node span in this process (the embedded driver),
/// or a root here whose OpenTelemetry parent comes from the task message's headers (a
/// worker: pass `&Span::none()`, then `parley_telemetry::set_parent`). A worker records
/// `task.delivery`, `task.outcome` and `otel.status_code` on it.
pub fn task_span(parent: &tracing::Span, task: &Task) -> tracing::Span {
    tracing::info_span!(
        parent: parent,
        "task",
        task.id = task.id.as_str(),
        debate.id = task.debate_id.as_str(),
        agent.id = task.agent.id.as_str(),
        agent.role = task.agent.role.as_str(),
        task.kind = task.kind.as_str(),
        task.round = task.round,
        task.attempt = task.attempt,
        task.delivery = tracing::field::Empty,
        task.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}
