//! The judge workers' `parley.evals.submit` service: evaluator calls for `parley eval
//! --nats-url`, under the same operator-owned providers, model allow-lists and
//! cluster-wide rate limits as debate tasks.
//!
//! A request ([`parley_protocol::EvalRequest`], checked by
//! [`parley_protocol::decode_eval_request`]) carries each evaluator's model, provider name,
//! deadline and rendered prompts; the worker runs the calls in parallel (temperature 0.1,
//! dialectic's) and replies with each reply text (cut to
//! [`parley_protocol::MAX_EVAL_REPLY_TEXT_BYTES`]) or error, in request order. The request
//! is served by one judge worker of the queue group; at most `concurrency` requests run on a
//! worker at once and a request beyond that is answered `unavailable` at once (the CLI
//! retries), never queued without bound. At shutdown the subscription stops first; a
//! request still running at the drain deadline is answered `unavailable`.

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
    /// Requests running at once on this worker.
    pub slots: Arc<Semaphore>,
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
        let Some(reply_to) = msg.reply.clone() else {
            continue;
        };
        let service = service.clone();
        match service.slots.clone().try_acquire_owned() {
            Ok(permit) => {
                tracker.spawn(async move {
                    let body = handle(&service, &msg).await;
                    let _ = service.nats.publish(reply_to, body.into()).await;
                    drop(permit);
                });
            }
            Err(_) => {
                let body = error(ErrorCode::Unavailable, "this judge worker is busy; retry");
                let _ = service.nats.publish(reply_to, body.into()).await;
            }
        }
    }
    let _ = requests.unsubscribe().await;
    Ok(())
}

fn error(code: ErrorCode, message: impl Into<String>) -> Vec<u8> {
    serde_json::to_vec(&ErrorReply::new(code, message)).unwrap_or_default()
}

async fn handle(service: &EvalService, msg: &async_nats::Message) -> Vec<u8> {
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
    let calls = request
        .evaluators
        .iter()
        .map(|call| run_call(&service.registry, call));
    let work = futures::future::join_all(calls).instrument(span);
    let results = tokio::select! {
        r = work => r,
        _ = service.hard_stop.cancelled() => {
            return error(ErrorCode::Unavailable, "the judge worker is shutting down; retry");
        }
    };
    serde_json::to_vec(&EvalReply { results }).unwrap_or_default()
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
