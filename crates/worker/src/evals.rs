//! The judge workers' `parley.evals.submit` service: evaluator calls for `parley eval
//! --nats-url`, under the same operator-owned providers, model allow-lists and
//! cluster-wide rate limits as debate tasks.
//!
//! A request ([`parley_protocol::EvalRequest`], checked by
//! [`parley_protocol::decode_eval_request`]) carries each evaluator's model, provider name,
//! deadline and rendered prompts; the worker runs the calls in parallel (temperature 0.1,
//! dialectic's) and replies with each reply text (cut to
//! [`parley_protocol::MAX_EVAL_REPLY_TEXT_BYTES`]) or error, in request order. The request
//! is served by one judge worker of the queue group.
//!
//! Evaluator calls share the worker's `concurrency` slots with its tasks: an admitted
//! request (at most `concurrency` are, waiting or running; past that `unavailable` at once,
//! the CLI retries) waits a few seconds for a slot (none comes: `unavailable`), then takes
//! as many more as are free, up to one per evaluator, and runs its calls that many at a
//! time. So tasks and evaluations together never make more than
//! `concurrency` LLM calls at once on a worker. Every call goes out with the operator's
//! completion cap (the provider registry applies `max_tokens` to calls that name none).
//! At shutdown the subscription stops first; a request still running at the drain
//! deadline is answered `unavailable`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use parley_llm::{ChatMessage, ChatRequest, Registry, ResponseFormat};
use parley_protocol::subjects::{ErrorCode, ErrorReply};
use parley_protocol::{
    clip_text, decode_eval_request, subjects, AgentConfig, EvalCall, EvalOutcome, EvalReply,
    EVAL_TEMPERATURE, MAX_EVAL_REPLY_TEXT_BYTES,
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

/// What the service needs from the worker.
pub(crate) struct EvalService {
    pub nats: async_nats::Client,
    pub registry: Arc<Registry>,
    /// The worker's task slots: each evaluator call running holds one.
    pub slots: Arc<Semaphore>,
    /// How many slots the worker has (`concurrency`): also the most requests admitted
    /// (waiting for a slot or running) at once.
    pub slots_total: usize,
    /// Requests admitted now.
    pub admitted: Arc<std::sync::atomic::AtomicUsize>,
    /// Cancelled at the drain deadline: requests still running answer `unavailable`.
    pub hard_stop: CancellationToken,
}

/// Subscribes (queue group of the judge workers) and serves until `shutdown`.
pub(crate) async fn serve(
    service: Arc<EvalService>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut requests = service
        .nats
        .queue_subscribe(subjects::EVALS_SUBMIT, subjects::JUDGE_WORKERS_QUEUE.into())
        .await
        .map_err(|e| anyhow::anyhow!("while subscribing to {}: {e}", subjects::EVALS_SUBMIT))?;
    loop {
        let msg = tokio::select! {
            m = requests.next() => match m { Some(m) => m, None => break },
            _ = shutdown.cancelled() => break,
        };
        // Only an inbox is answered (see `parley_cluster::nats::reply_subject`).
        let Some(reply_to) = parley_cluster::nats::reply_subject(&msg, "evals") else {
            continue;
        };
        // Requests waiting for a slot or running are bounded: past the bound, `unavailable`.
        let Some(admitted) = Admitted::try_new(&service.admitted, service.slots_total) else {
            let body = error(ErrorCode::Unavailable, "this judge worker is busy; retry");
            send_reply(&service.nats, reply_to, body).await;
            continue;
        };
        let service = service.clone();
        tracker.spawn(async move {
            // The task loop holds idle slots only while a pull is open (about a second);
            // the semaphore is fair, so a waiting request gets the next slot released.
            let slot = tokio::time::timeout(SLOT_WAIT, service.slots.clone().acquire_owned());
            let body = match slot.await {
                Ok(Ok(permit)) => handle(&service, &msg, permit).await,
                _ => error(ErrorCode::Unavailable, "this judge worker is busy; retry"),
            };
            drop(admitted);
            send_reply(&service.nats, reply_to, body).await;
        });
    }
    let _ = requests.unsubscribe().await;
    Ok(())
}

/// How long an admitted request waits for its first slot before it is answered
/// `unavailable` (a pull holds idle slots for about a second at a time).
const SLOT_WAIT: Duration = Duration::from_secs(5);

/// One admitted request; dropping it frees its place.
struct Admitted(Arc<std::sync::atomic::AtomicUsize>);

impl Admitted {
    fn try_new(count: &Arc<std::sync::atomic::AtomicUsize>, max: usize) -> Option<Self> {
        use std::sync::atomic::Ordering;
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max.max(1)).then_some(n + 1)
            })
            .ok()
            .map(|_| Self(count.clone()))
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Publishes a reply; a failure is logged and counted, never ignored (the requester's
/// timeout then tells its user that no reply came).
async fn send_reply(nats: &async_nats::Client, reply_to: async_nats::Subject, body: Vec<u8>) {
    let published = match nats.publish(reply_to, body.into()).await {
        Ok(()) => nats.flush().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = published {
        parley_telemetry::metrics().request_error("evals", "reply_failed");
        tracing::error!(error = %e, "cannot send an evaluation reply");
    }
}

/// The reply's JSON, made to fit in `max_payload` bytes (the server's limit): when the
/// texts make it too large, each text is cut to an equal share of what is left (a cut
/// text ends with a note saying so), so the calls that were paid for still reach the
/// requester. If even the texts' notes do not fit, the reply is a `payload_too_large`
/// error saying why.
fn fit_reply(mut reply: EvalReply, max_payload: usize) -> Vec<u8> {
    let encode = |r: &EvalReply| serde_json::to_vec(r).unwrap_or_default();
    let body = encode(&reply);
    if body.len() <= max_payload {
        return body;
    }
    const NOTE: &str = "\n[cut: the reply did not fit in the bus's max_payload]";
    let texts = reply.results.iter().filter(|o| o.text.is_some()).count();
    let text_bytes: usize = reply
        .results
        .iter()
        .filter_map(|o| o.text.as_ref())
        .map(|t| serde_json::to_string(t).map_or(t.len(), |j| j.len()))
        .sum();
    // What the reply takes without its texts, and some room for JSON escapes in the cuts.
    let rest = body.len() - text_bytes;
    let share = max_payload
        .saturating_sub(rest + 64)
        .checked_div(texts.max(1))
        .unwrap_or(0)
        / 2;
    if share > NOTE.len() {
        for text in reply.results.iter_mut().filter_map(|o| o.text.as_mut()) {
            if text.len() > share {
                let cut = clip_text(text, share - NOTE.len());
                *text = format!("{cut}{NOTE}");
            }
        }
        let body = encode(&reply);
        if body.len() <= max_payload {
            tracing::warn!(
                max_payload,
                "evaluation reply texts cut to fit the bus's max_payload"
            );
            return body;
        }
    }
    error(
        ErrorCode::PayloadTooLarge,
        format!(
            "the evaluators' replies do not fit in the bus's max_payload ({max_payload} \
             bytes); ask for fewer evaluators per request"
        ),
    )
}

fn error(code: ErrorCode, message: impl Into<String>) -> Vec<u8> {
    serde_json::to_vec(&ErrorReply::new(code, message)).unwrap_or_default()
}

async fn handle(
    service: &EvalService,
    msg: &async_nats::Message,
    first: tokio::sync::OwnedSemaphorePermit,
) -> Vec<u8> {
    let request = match decode_eval_request(&msg.payload) {
        Ok(r) => r,
        Err(rejection) => {
            tracing::warn!(code = rejection.code.as_str(), "evaluation request refused");
            return serde_json::to_vec(&ErrorReply::from(rejection)).unwrap_or_default();
        }
    };
    let span = tracing::info_span!("eval.request", evaluators = request.evaluators.len());
    parley_telemetry::set_parent(
        &span,
        parley_telemetry::extract_headers(msg.headers.as_ref()),
    );
    // One slot per evaluator at most, of those free now; the calls run that many at a time.
    let mut permits = vec![first];
    while permits.len() < request.evaluators.len() {
        match service.slots.clone().try_acquire_owned() {
            Ok(p) => permits.push(p),
            Err(_) => break,
        }
    }
    let calls: Vec<_> = request
        .evaluators
        .into_iter()
        .map(|call| {
            let registry = service.registry.clone();
            async move { run_call(&registry, &call).await }
        })
        .collect();
    let work = futures::stream::iter(calls)
        .buffered(permits.len())
        .collect::<Vec<_>>()
        .instrument(span);
    let results = tokio::select! {
        r = work => r,
        _ = service.hard_stop.cancelled() => {
            return error(ErrorCode::Unavailable, "the judge worker is shutting down; retry");
        }
    };
    let max_payload = service.nats.server_info().max_payload;
    fit_reply(EvalReply { results }, max_payload)
}

async fn run_call(registry: &Registry, call: &EvalCall) -> EvalOutcome {
    let mut out = EvalOutcome {
        id: call.id.clone(),
        text: None,
        error: None,
        model: call.model.clone(),
        latency_ms: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
    };
    let agent = AgentConfig {
        provider: call.provider.clone(),
        ..AgentConfig::new(
            &call.id,
            &call.id,
            "evaluator",
            &call.model,
            EVAL_TEMPERATURE,
        )
    };
    let timeout = Duration::from_millis(call.timeout_ms.max(1));
    let req = ChatRequest {
        model: call.model.clone(),
        messages: vec![
            ChatMessage::system(call.system.clone()),
            ChatMessage::user(call.user.clone()),
        ],
        temperature: EVAL_TEMPERATURE,
        max_tokens: None,
        timeout,
        seed: None,
        tools: Default::default(),
        // The rubric's schema, as a local `parley eval` asks for it (a provider that does not
        // take it is asked again without it); the CLI parses the reply either way.
        response_format: Some(ResponseFormat::strict(
            parley_protocol::RUBRIC_SCHEMA_NAME,
            parley_protocol::rubric_schema(),
        )),
    };
    let span = tracing::info_span!(
        "eval.evaluator",
        evaluator.id = call.id.as_str(),
        gen_ai.request.model = call.model.as_str(),
    );
    let result = async {
        let provider = registry.provider_for(&agent)?;
        match tokio::time::timeout(timeout, provider.complete(&req)).await {
            Ok(r) => r,
            Err(_) => Err(parley_llm::LlmError::new(
                parley_protocol::ErrorKind::Timeout,
                call.provider.as_deref().unwrap_or("default"),
                format!("no reply within {} ms", timeout.as_millis()),
            )),
        }
    }
    .instrument(span)
    .await;
    match result {
        Ok(r) => {
            out.text = Some(clip_text(&r.text, MAX_EVAL_REPLY_TEXT_BYTES));
            out.model = r.model;
            out.latency_ms = r.latency_ms;
            out.prompt_tokens = r.prompt_tokens;
            out.completion_tokens = r.completion_tokens;
        }
        Err(e) => out.error = Some(clip_text(&e.to_string(), 1024)),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_protocol::EvalOutcome;

    fn outcome(id: &str, text: &str) -> EvalOutcome {
        EvalOutcome {
            id: id.into(),
            text: Some(text.into()),
            error: None,
            model: "m".into(),
            latency_ms: 1,
            prompt_tokens: 2,
            completion_tokens: 3,
        }
    }

    #[test]
    fn a_reply_is_cut_to_fit_the_bus_or_refused_with_a_reason() {
        let small = EvalReply {
            results: vec![outcome("a", "short")],
        };
        assert_eq!(
            fit_reply(small.clone(), 1 << 20),
            serde_json::to_vec(&small).unwrap()
        );

        // 16 replies of 40 KB (quotes and escapes included) into 64 KiB: every one is cut,
        // none dropped, and the ids and usage stay.
        let big = EvalReply {
            results: (0..16)
                .map(|i| outcome(&format!("e{i}"), &"\"é".repeat(10_000)))
                .collect(),
        };
        let body = fit_reply(big, 64 * 1024);
        assert!(body.len() <= 64 * 1024, "{}", body.len());
        let reply: EvalReply = serde_json::from_slice(&body).unwrap();
        assert_eq!(reply.results.len(), 16);
        for o in &reply.results {
            assert!(o.text.as_ref().unwrap().ends_with("max_payload]"));
            assert_eq!(o.completion_tokens, 3);
        }

        // Nothing fits: an error that says why.
        let body = fit_reply(
            EvalReply {
                results: vec![outcome("a", &"x".repeat(1000))],
            },
            100,
        );
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "payload_too_large", "{v}");
    }
}
