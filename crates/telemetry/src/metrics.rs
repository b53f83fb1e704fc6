//! Prometheus metrics (OpenMetrics text format), one process-wide set: [`metrics()`].
//!
//! Every metric with its type, labels and help text is listed in the book's generated
//! reference, `docs/src/reference/metrics.md` (`crates/telemetry/tests/reference.rs` keeps
//! it current).
//!
//! `kind` is `agent`|`judge`, `outcome` `ok`|`error`, `direction` `input`|`output`,
//! `status` `running`|`completed`|`failed`|`cancelled`; `reason` of a dead-lettered task
//! `max_deliveries`|`abandoned`|`debate_gone`|`undecodable` (see [`DeadLetterReason`]), of a
//! dropped result: [`DropReason`], of a rejected task: [`RejectReason`]; `subject` `submit`|
//! `status`|`retry`|`cancel`, `code` an error code (`invalid_json`, `unavailable`, ...). Free-form labels (`provider`,
//! `model`, `reason`, `error_kind`, `consumer`) must come from a small fixed set (the
//! configuration, an error enum), never from user input or error messages: every distinct
//! value is a new time series kept for the life of the process.
//!
//! The debate gauge is `parley_debates_current`, not `parley_debates`: in the OpenMetrics
//! format the counter `parley_debates_total` is the family `parley_debates`, and two families
//! may not share a name.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod requests;

/// Content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

macro_rules! label_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    };
}

// After the macro: the module's label enums use it.
mod webhooks;
pub use webhooks::{WebhookAttempt, WebhookResult};

label_enum!(
    /// Which worker ran a task.
    TaskKind {
        /// An agent's contribution.
        Agent => "agent",
        /// A judge's verdict.
        Judge => "judge",
    }
);

label_enum!(
    /// How a task ended.
    Outcome {
        /// Done.
        Ok => "ok",
        /// Failed (after retries).
        Error => "error",
    }
);

label_enum!(
    /// Token direction.
    Direction {
        /// Prompt tokens.
        Input => "input",
        /// Completion tokens.
        Output => "output",
    }
);

label_enum!(
    /// A debate's status.
    DebateStatus {
        /// In progress.
        Running => "running",
        /// Finished with a result.
        Completed => "completed",
        /// Finished without one.
        Failed => "failed",
        /// Cancelled by a user.
        Cancelled => "cancelled",
    }
);

label_enum!(
    /// Why a task message was given up on (a dead letter).
    DeadLetterReason {
        /// JetStream delivered it `MAX_DELIVER` times and nobody acked it (the coordinator
        /// saw the advisory, recorded it and deleted it from the stream).
        MaxDeliveries => "max_deliveries",
        /// A worker could neither run it nor store an error for it on its last delivery
        /// (Redis unreachable past the worker's patience).
        Abandoned => "abandoned",
        /// Its debate (or the task's stored body) is gone: expired or deleted.
        DebateGone => "debate_gone",
        /// Not a task message this build can read.
        Undecodable => "undecodable",
    }
);

impl DeadLetterReason {
    /// Every reason.
    pub const ALL: [DeadLetterReason; 4] = [
        DeadLetterReason::MaxDeliveries,
        DeadLetterReason::Abandoned,
        DeadLetterReason::DebateGone,
        DeadLetterReason::Undecodable,
    ];
}

impl DebateStatus {
    /// Every status.
    pub const ALL: [DebateStatus; 4] = [
        DebateStatus::Running,
        DebateStatus::Completed,
        DebateStatus::Failed,
        DebateStatus::Cancelled,
    ];
}

label_enum!(
    /// Why the coordinator dropped a result instead of applying it.
    DropReason {
        /// The debate never dispatched this task (unknown, or not yet due).
        NotDispatched => "not_dispatched",
        /// The task already has its result.
        Finished => "finished",
        /// Not the attempt the coordinator waits for.
        WrongAttempt => "wrong_attempt",
        /// The stored record does not match the task it was read for, or is invalid.
        Mismatch => "mismatch",
        /// A notification with no stored record behind it.
        Missing => "missing",
        /// A notification that is not a valid result notice.
        Invalid => "invalid",
    }
);

impl DropReason {
    /// Every reason.
    pub const ALL: [DropReason; 6] = [
        DropReason::NotDispatched,
        DropReason::Finished,
        DropReason::WrongAttempt,
        DropReason::Mismatch,
        DropReason::Missing,
        DropReason::Invalid,
    ];
}

label_enum!(
    /// Why a worker refused to run a task message.
    RejectReason {
        /// Not a valid task (undecodable, another schema version, bad fields).
        Invalid => "invalid",
        /// Its dispatch token does not verify: the coordinator did not send it.
        Forged => "forged",
        /// Its debate exists but has no dispatch secret in Redis (lost): given back and
        /// reported to the coordinator, which restores it.
        NoSecret => "no_secret",
    }
);

label_enum!(
    /// Why a worker ignored an entry of the result stash.
    StashRejectReason {
        /// Its seal does not verify under the debate's secret: not written by a worker.
        Forged => "forged",
        /// Sealed, but the result inside is invalid or names another task.
        Invalid => "invalid",
    }
);

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StashRejectLabels {
    reason: StashRejectReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DropLabels {
    reason: DropReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RejectLabels {
    reason: RejectReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestErrorLabels {
    subject: String,
    code: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SubjectLabels {
    subject: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CapLabels {
    cap: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: TaskKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TaskDurationLabels {
    kind: TaskKind,
    provider: String,
    outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TaskLabels {
    kind: TaskKind,
    outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FailureLabels {
    kind: TaskKind,
    error_kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ModelLabels {
    provider: String,
    model: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TokenLabels {
    provider: String,
    model: String,
    direction: Direction,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RetryLabels {
    provider: String,
    reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StatusLabels {
    status: DebateStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DeadLetterLabels {
    kind: TaskKind,
    reason: DeadLetterReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ConsumerLabels {
    consumer: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn task_duration_histogram() -> Histogram {
    // 0.1 s … 409.6 s
    Histogram::new(exponential_buckets(0.1, 2.0, 13))
}

fn rate_limit_wait_histogram() -> Histogram {
    // 0.01 s … 81.92 s
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

struct Inner {
    registry: Registry,
    tasks_in_flight: Family<KindLabels, Gauge>,
    task_duration: HistogramFamily<TaskDurationLabels>,
    tasks: Family<TaskLabels, Counter>,
    task_failures: Family<FailureLabels, Counter>,
    llm_tokens: Family<TokenLabels, Counter>,
    /// Dollars spent on LLM calls with a known price.
    llm_cost: Family<ModelLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    llm_retries: Family<RetryLabels, Counter>,
    llm_rate_limited: Family<ProviderLabels, Counter>,
    rate_limit_wait: HistogramFamily<ProviderLabels>,
    rate_limit_handbacks: Family<ProviderLabels, Counter>,
    debates: Family<StatusLabels, Gauge>,
    debates_total: Family<StatusLabels, Counter>,
    debates_resting: Gauge,
    debate_wakes: Counter,
    consumer_pending: Family<ConsumerLabels, Gauge>,
    consumer_ack_pending: Family<ConsumerLabels, Gauge>,
    dead_lettered: Family<DeadLetterLabels, Counter>,
    results_dropped: Family<DropLabels, Counter>,
    tasks_rejected: Family<RejectLabels, Counter>,
    stash_rejected: Family<StashRejectLabels, Counter>,
    request_errors: Family<RequestErrorLabels, Counter>,
    replies_refused: Family<SubjectLabels, Counter>,
    followers_refused: Family<CapLabels, Counter>,
    webhooks: webhooks::WebhookFamilies,
}

/// Parley's metrics; a cheap handle (clones share the same series). Services use the
/// process-wide [`metrics()`]; tests may make their own with [`Metrics::new`].
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The process-wide metrics, served by [`crate::serve_http`]'s `/metrics`.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

impl Metrics {
    /// A fresh, independent set of metrics, all at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let tasks_in_flight: Family<KindLabels, Gauge> = Family::default();
        registry.register(
            "parley_tasks_in_flight",
            "Tasks being worked on by this process",
            Family::clone(&tasks_in_flight),
        );
        let task_duration: HistogramFamily<TaskDurationLabels> =
            Family::new_with_constructor(task_duration_histogram);
        registry.register(
            "parley_task_duration_seconds",
            "Time from taking a task to its outcome, retries and rate-limit waits included",
            task_duration.clone(),
        );
        let tasks: Family<TaskLabels, Counter> = Family::default();
        registry.register(
            "parley_tasks",
            "Tasks finished, by outcome",
            Family::clone(&tasks),
        );
        let task_failures = Family::default();
        registry.register(
            "parley_task_failures",
            "Task attempts that failed, by kind of error",
            Family::clone(&task_failures),
        );
        let llm_tokens = Family::default();
        registry.register(
            "parley_llm_tokens",
            "LLM tokens reported by the provider",
            Family::clone(&llm_tokens),
        );
        let llm_cost = Family::default();
        registry.register(
            "parley_llm_cost_usd",
            "Dollars spent on LLM calls (calls with a known price only)",
            Family::clone(&llm_cost),
        );
        let llm_retries = Family::default();
        registry.register(
            "parley_llm_retries",
            "LLM calls retried, by reason",
            Family::clone(&llm_retries),
        );
        let llm_rate_limited = Family::default();
        registry.register(
            "parley_llm_rate_limited",
            "HTTP 429 answers received from LLM providers",
            Family::clone(&llm_rate_limited),
        );
        let rate_limit_wait: HistogramFamily<ProviderLabels> =
            Family::new_with_constructor(rate_limit_wait_histogram);
        registry.register(
            "parley_rate_limit_wait_seconds",
            "Time spent waiting for the cluster-wide provider rate limit",
            rate_limit_wait.clone(),
        );
        let rate_limit_handbacks = Family::default();
        registry.register(
            "parley_rate_limit_handbacks",
            "Tasks given back to the queue with a delay because of the rate limit",
            Family::clone(&rate_limit_handbacks),
        );
        let debates: Family<StatusLabels, Gauge> = Family::default();
        registry.register(
            "parley_debates_current",
            "Debates this coordinator holds, by status",
            Family::clone(&debates),
        );
        let debates_total: Family<StatusLabels, Counter> = Family::default();
        registry.register(
            "parley_debates",
            "Debates that entered each status",
            Family::clone(&debates_total),
        );
        let debates_resting = Gauge::default();
        registry.register(
            "parley_debates_resting",
            "Debates this coordinator holds at rest (no actor in memory)",
            debates_resting.clone(),
        );
        let debate_wakes = Counter::default();
        registry.register(
            "parley_debate_wakes",
            "Debates woken from rest",
            debate_wakes.clone(),
        );
        let consumer_pending = Family::default();
        registry.register(
            "parley_jetstream_consumer_pending",
            "Messages not yet delivered to a JetStream consumer",
            Family::clone(&consumer_pending),
        );
        let consumer_ack_pending = Family::default();
        registry.register(
            "parley_jetstream_consumer_ack_pending",
            "Messages delivered to a JetStream consumer and not yet acknowledged",
            Family::clone(&consumer_ack_pending),
        );
        let dead_lettered: Family<DeadLetterLabels, Counter> = Family::default();
        registry.register(
            "parley_tasks_dead_lettered",
            "Task messages given up on without a result: deliveries exhausted, abandoned, or their debate gone",
            Family::clone(&dead_lettered),
        );
        let results_dropped: Family<DropLabels, Counter> = Family::default();
        registry.register(
            "parley_results_dropped",
            "Results the coordinator did not apply (not dispatched, finished, wrong attempt, ...)",
            Family::clone(&results_dropped),
        );
        let tasks_rejected: Family<RejectLabels, Counter> = Family::default();
        registry.register(
            "parley_tasks_rejected",
            "Task messages a worker refused to run (invalid, or not sent by the coordinator)",
            Family::clone(&tasks_rejected),
        );
        let stash_rejected: Family<StashRejectLabels, Counter> = Family::default();
        registry.register(
            "parley_stash_rejected",
            "Result-stash entries a worker ignored (forged: no valid seal; invalid)",
            Family::clone(&stash_rejected),
        );
        let request_errors = Family::default();
        registry.register(
            "parley_request_errors",
            "Requests answered with an error, by subject and error code",
            Family::clone(&request_errors),
        );
        let replies_refused = Family::default();
        registry.register(
            "parley_replies_refused",
            "Requests not answered because their reply subject is not an inbox, by request subject",
            Family::clone(&replies_refused),
        );
        let followers_refused = Family::default();
        registry.register(
            "parley_followers_refused",
            "Follow requests refused by a follower cap (total, client, debate)",
            Family::clone(&followers_refused),
        );
        let webhooks = webhooks::WebhookFamilies::register(&mut registry);
        for reason in DropReason::ALL {
            drop(results_dropped.get_or_create(&DropLabels { reason }));
        }
        for reason in [
            RejectReason::Invalid,
            RejectReason::Forged,
            RejectReason::NoSecret,
        ] {
            drop(tasks_rejected.get_or_create(&RejectLabels { reason }));
        }
        for reason in [StashRejectReason::Forged, StashRejectReason::Invalid] {
            drop(stash_rejected.get_or_create(&StashRejectLabels { reason }));
        }
        // Series whose labels are all enums exist from the start (at 0), so dashboards and
        // alerts see them before the first event; families with free-form labels appear
        // with their first value.
        for kind in [TaskKind::Agent, TaskKind::Judge] {
            for reason in DeadLetterReason::ALL {
                drop(dead_lettered.get_or_create(&DeadLetterLabels { kind, reason }));
            }
            drop(tasks_in_flight.get_or_create(&KindLabels { kind }));
            for outcome in [Outcome::Ok, Outcome::Error] {
                drop(tasks.get_or_create(&TaskLabels { kind, outcome }));
            }
        }
        for status in DebateStatus::ALL {
            drop(debates.get_or_create(&StatusLabels { status }));
            drop(debates_total.get_or_create(&StatusLabels { status }));
        }
        Metrics {
            inner: Arc::new(Inner {
                registry,
                tasks_in_flight,
                task_duration,
                tasks,
                task_failures,
                llm_tokens,
                llm_cost,
                llm_retries,
                llm_rate_limited,
                rate_limit_wait,
                rate_limit_handbacks,
                debates,
                debates_total,
                debates_resting,
                debate_wakes,
                consumer_pending,
                consumer_ack_pending,
                dead_lettered,
                results_dropped,
                tasks_rejected,
                stash_rejected,
                request_errors,
                replies_refused,
                followers_refused,
                webhooks,
            }),
        }
    }

    /// A task message was given up on without a result (a dead letter).
    pub fn task_dead_lettered(&self, kind: TaskKind, reason: DeadLetterReason) {
        self.inner
            .dead_lettered
            .get_or_create(&DeadLetterLabels { kind, reason })
            .inc();
    }

    /// All metrics in the OpenMetrics text format ([`CONTENT_TYPE`]), ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(4096);
        prometheus_client::encoding::text::encode(&mut out, &self.inner.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// A task was taken: `parley_tasks_in_flight{kind}` goes up until the guard is dropped.
    /// Call [`InFlightGuard::finish`] with the outcome to record the duration and count it.
    pub fn task_started(&self, kind: TaskKind) -> InFlightGuard {
        self.inner
            .tasks_in_flight
            .get_or_create(&KindLabels { kind })
            .inc();
        InFlightGuard {
            metrics: self.clone(),
            kind,
            started: Instant::now(),
        }
    }

    /// Records a finished task without a guard: duration and `parley_tasks_total`.
    pub fn record_task(&self, kind: TaskKind, provider: &str, outcome: Outcome, took: Duration) {
        self.inner
            .task_duration
            .get_or_create(&TaskDurationLabels {
                kind,
                provider: provider.to_string(),
                outcome,
            })
            .observe(took.as_secs_f64());
        self.inner
            .tasks
            .get_or_create(&TaskLabels { kind, outcome })
            .inc();
    }

    /// A task attempt failed with an error of the given kind (e.g. `timeout`, `provider`,
    /// `bad_output`); counted whether or not it will be retried.
    pub fn task_failed(&self, kind: TaskKind, error_kind: &str) {
        self.inner
            .task_failures
            .get_or_create(&FailureLabels {
                kind,
                error_kind: error_kind.to_string(),
            })
            .inc();
    }

    /// Tokens of one LLM call, as reported by the provider.
    pub fn record_tokens(&self, provider: &str, model: &str, input: u64, output: u64) {
        for (direction, n) in [(Direction::Input, input), (Direction::Output, output)] {
            self.inner
                .llm_tokens
                .get_or_create(&TokenLabels {
                    provider: provider.to_string(),
                    model: model.to_string(),
                    direction,
                })
                .inc_by(n);
        }
    }

    /// Dollars one LLM call cost (a call with no price records nothing).
    pub fn record_cost(&self, provider: &str, model: &str, usd: f64) {
        if !(usd.is_finite() && usd >= 0.0) {
            return;
        }
        self.inner
            .llm_cost
            .get_or_create(&ModelLabels {
                provider: provider.to_string(),
                model: model.to_string(),
            })
            .inc_by(usd);
    }

    /// An LLM call is being retried (e.g. reason `timeout`, `server_error`, `rate_limited`,
    /// `connect`).
    pub fn llm_retry(&self, provider: &str, reason: &str) {
        self.inner
            .llm_retries
            .get_or_create(&RetryLabels {
                provider: provider.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// The provider answered 429.
    pub fn llm_rate_limited(&self, provider: &str) {
        self.inner
            .llm_rate_limited
            .get_or_create(&provider_labels(provider))
            .inc();
    }

    /// Time waited for the cluster-wide rate limiter before a call.
    pub fn rate_limit_wait(&self, provider: &str, waited: Duration) {
        self.inner
            .rate_limit_wait
            .get_or_create(&provider_labels(provider))
            .observe(waited.as_secs_f64());
    }

    /// A task was given back to the queue with a delay instead of waiting for the limiter.
    pub fn rate_limit_handback(&self, provider: &str) {
        self.inner
            .rate_limit_handbacks
            .get_or_create(&provider_labels(provider))
            .inc();
    }

    /// A debate moved from `from` (`None`: a new debate, or one taken over from another
    /// coordinator) to `to`: the gauges move and `parley_debates_total{status=to}` counts it.
    pub fn debate_status_changed(&self, from: Option<DebateStatus>, to: DebateStatus) {
        if let Some(from) = from {
            self.inner
                .debates
                .get_or_create(&StatusLabels { status: from })
                .dec();
        }
        self.inner
            .debates
            .get_or_create(&StatusLabels { status: to })
            .inc();
        self.inner
            .debates_total
            .get_or_create(&StatusLabels { status: to })
            .inc();
    }

    /// This coordinator no longer owns a debate it held in `status` (lease lost, shutdown):
    /// only the gauge moves.
    pub fn debate_released(&self, status: DebateStatus) {
        self.inner
            .debates
            .get_or_create(&StatusLabels { status })
            .dec();
    }

    /// A debate went to rest (`true`) or left it, woken or let go (`false`; `woken` counts
    /// a wake).
    pub fn debate_resting(&self, resting: bool, woken: bool) {
        if resting {
            self.inner.debates_resting.inc();
        } else {
            self.inner.debates_resting.dec();
        }
        if woken {
            self.inner.debate_wakes.inc();
        }
    }

    /// Sets `parley_debates_current{status}` outright (e.g. recounted after a restart, or a
    /// debate handed to another coordinator).
    pub fn set_debates(&self, status: DebateStatus, count: i64) {
        self.inner
            .debates
            .get_or_create(&StatusLabels { status })
            .set(count);
    }

    /// A JetStream consumer's `num_pending` and `num_ack_pending` (from its info).
    pub fn set_consumer_pending(&self, consumer: &str, pending: u64, ack_pending: u64) {
        let labels = ConsumerLabels {
            consumer: consumer.to_string(),
        };
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.inner
            .consumer_pending
            .get_or_create(&labels)
            .set(clamp(pending));
        self.inner
            .consumer_ack_pending
            .get_or_create(&labels)
            .set(clamp(ack_pending));
    }
}

impl Metrics {
    /// The coordinator dropped a result (see [`DropReason`]).
    pub fn result_dropped(&self, reason: DropReason) {
        self.inner
            .results_dropped
            .get_or_create(&DropLabels { reason })
            .inc();
    }

    /// A worker refused a task message (see [`RejectReason`]).
    pub fn task_rejected(&self, reason: RejectReason) {
        self.inner
            .tasks_rejected
            .get_or_create(&RejectLabels { reason })
            .inc();
    }

    /// A worker ignored a result-stash entry (see [`StashRejectReason`]).
    pub fn stash_rejected(&self, reason: StashRejectReason) {
        self.inner
            .stash_rejected
            .get_or_create(&StashRejectLabels { reason })
            .inc();
    }
}

fn provider_labels(provider: &str) -> ProviderLabels {
    ProviderLabels {
        provider: provider.to_string(),
    }
}

/// Holds `parley_tasks_in_flight{kind}` up while a task runs. Dropping it without
/// [`finish`](Self::finish) (task handed back, cancelled, worker shutting down) only lowers
/// the gauge: no outcome, no duration.
#[must_use = "the task counts as in flight until the guard is dropped"]
#[derive(Debug)]
pub struct InFlightGuard {
    metrics: Metrics,
    kind: TaskKind,
    started: Instant,
}

impl InFlightGuard {
    /// Time since the task was taken.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Records the outcome: `parley_task_duration_seconds{kind,provider,outcome}` and
    /// `parley_tasks_total{kind,outcome}`; then lowers the in-flight gauge.
    pub fn finish(self, provider: &str, outcome: Outcome) {
        self.metrics
            .record_task(self.kind, provider, outcome, self.started.elapsed());
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.metrics
            .inner
            .tasks_in_flight
            .get_or_create(&KindLabels { kind: self.kind })
            .dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line that starts with `prefix` (name plus labels).
    fn sample(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .map(|v| v.parse().unwrap())
    }

    #[test]
    fn enum_labelled_series_exist_at_zero() {
        let text = Metrics::new().encode();
        for prefix in [
            "parley_tasks_in_flight{kind=\"agent\"}",
            "parley_tasks_in_flight{kind=\"judge\"}",
            "parley_tasks_total{kind=\"judge\",outcome=\"error\"}",
            "parley_debates_current{status=\"cancelled\"}",
            "parley_debates_total{status=\"running\"}",
        ] {
            assert_eq!(sample(&text, prefix), Some(0.0), "{prefix}\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn encoding_names_every_metric_and_its_type() {
        let m = Metrics::new();
        m.task_started(TaskKind::Agent).finish("p", Outcome::Ok);
        m.task_failed(TaskKind::Agent, "timeout");
        m.record_tokens("p", "m", 1, 1);
        m.record_cost("p", "m", 0.25);
        m.llm_retry("p", "timeout");
        m.llm_rate_limited("p");
        m.rate_limit_wait("p", Duration::ZERO);
        m.rate_limit_handback("p");
        m.set_consumer_pending("c", 0, 0);
        let text = m.encode();
        for (name, kind) in [
            ("parley_tasks_in_flight", "gauge"),
            ("parley_task_duration_seconds", "histogram"),
            ("parley_tasks", "counter"),
            ("parley_task_failures", "counter"),
            ("parley_llm_tokens", "counter"),
            ("parley_llm_cost_usd", "counter"),
            ("parley_llm_retries", "counter"),
            ("parley_llm_rate_limited", "counter"),
            ("parley_rate_limit_wait_seconds", "histogram"),
            ("parley_rate_limit_handbacks", "counter"),
            ("parley_debates_current", "gauge"),
            ("parley_debates", "counter"),
            ("parley_debates_resting", "gauge"),
            ("parley_debate_wakes", "counter"),
            ("parley_jetstream_consumer_pending", "gauge"),
            ("parley_jetstream_consumer_ack_pending", "gauge"),
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "{name} {kind} missing:\n{text}"
            );
        }
    }

    #[test]
    fn recorded_values_show_up_with_their_labels() {
        let m = Metrics::new();
        let agent = m.task_started(TaskKind::Agent);
        let judge = m.task_started(TaskKind::Judge);
        let _other = m.task_started(TaskKind::Agent);
        let text = m.encode();
        assert_eq!(
            sample(&text, "parley_tasks_in_flight{kind=\"agent\"}"),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, "parley_tasks_in_flight{kind=\"judge\"}"),
            Some(1.0)
        );

        agent.finish("openai", Outcome::Ok);
        drop(judge); // handed back: no outcome
        m.task_failed(TaskKind::Judge, "timeout");
        m.record_tokens("openai", "gpt-x", 120, 30);
        m.llm_retry("openai", "server_error");
        m.llm_rate_limited("openai");
        m.llm_rate_limited("openai");
        m.rate_limit_wait("openai", Duration::from_millis(250));
        m.rate_limit_handback("openai");
        m.debate_status_changed(None, DebateStatus::Running);
        m.debate_status_changed(None, DebateStatus::Running);
        m.debate_status_changed(Some(DebateStatus::Running), DebateStatus::Completed);
        m.set_consumer_pending("agent-tasks", 7, 2);

        let text = m.encode();
        let expect = [
            ("parley_tasks_in_flight{kind=\"agent\"}", 1.0),
            ("parley_tasks_in_flight{kind=\"judge\"}", 0.0),
            (
                "parley_task_duration_seconds_count{kind=\"agent\",provider=\"openai\",outcome=\"ok\"}",
                1.0,
            ),
            ("parley_tasks_total{kind=\"agent\",outcome=\"ok\"}", 1.0),
            (
                "parley_task_failures_total{kind=\"judge\",error_kind=\"timeout\"}",
                1.0,
            ),
            (
                "parley_llm_tokens_total{provider=\"openai\",model=\"gpt-x\",direction=\"input\"}",
                120.0,
            ),
            (
                "parley_llm_tokens_total{provider=\"openai\",model=\"gpt-x\",direction=\"output\"}",
                30.0,
            ),
            (
                "parley_llm_retries_total{provider=\"openai\",reason=\"server_error\"}",
                1.0,
            ),
            ("parley_llm_rate_limited_total{provider=\"openai\"}", 2.0),
            ("parley_rate_limit_wait_seconds_sum{provider=\"openai\"}", 0.25),
            ("parley_rate_limit_handbacks_total{provider=\"openai\"}", 1.0),
            ("parley_debates_current{status=\"running\"}", 1.0),
            ("parley_debates_current{status=\"completed\"}", 1.0),
            ("parley_debates_total{status=\"running\"}", 2.0),
            ("parley_debates_total{status=\"completed\"}", 1.0),
            ("parley_jetstream_consumer_pending{consumer=\"agent-tasks\"}", 7.0),
            (
                "parley_jetstream_consumer_ack_pending{consumer=\"agent-tasks\"}",
                2.0,
            ),
        ];
        for (prefix, value) in expect {
            assert_eq!(sample(&text, prefix), Some(value), "{prefix}\n{text}");
        }
        assert_eq!(
            sample(
                &text,
                "parley_tasks_total{kind=\"judge\",outcome=\"error\"}"
            ),
            Some(0.0),
            "a dropped guard records no outcome:\n{text}"
        );
        assert!(
            !text.contains("parley_task_duration_seconds_count{kind=\"judge\""),
            "{text}"
        );
        assert!(
            text.contains(
                "parley_rate_limit_wait_seconds_bucket{le=\"0.32\",provider=\"openai\"} 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_global_instance_is_shared() {
        metrics().llm_rate_limited("global-test");
        assert!(metrics()
            .encode()
            .contains("parley_llm_rate_limited_total{provider=\"global-test\"} 1"));
    }
}
