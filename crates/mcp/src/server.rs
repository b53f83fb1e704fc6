//! The MCP server: the tools, the resources and the errors, over a
//! [`parley_web::Backend`].
//!
//! Errors: a bad argument is a JSON-RPC error `-32602` (invalid params) whose message
//! starts with the argument's name (`rounds: 0 is out of range 1-20`), as is a debate id
//! no debate has; what goes wrong past the arguments (a debate that is not waiting for
//! answers, a cluster that does not answer) is a tool result with `isError: true` and the
//! reason, so the model reads it.

use std::sync::Arc;

use futures::future::BoxFuture;
use parley_web::{ApiError, Backend, SubmitRequest};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use crate::args::{self, ArgError, DebateArgs, DebateIdArgs, ListArgs, ResultArgs};
use crate::follow::{self, ProgressSink};
use crate::view;

/// What a debate would cost, without starting it (the CLI implements it with `parley
/// estimate`'s simulation of the debate).
pub trait Estimator: Send + Sync + 'static {
    /// The estimate of the debate `request` would start, as JSON; a bad request is an
    /// [`ApiError`] naming the field.
    fn estimate(&self, request: &SubmitRequest) -> Result<Value, ApiError>;
}

/// Parley's MCP server. Cheap to clone: one per connection shares the backend.
#[derive(Clone)]
pub struct ParleyMcp {
    backend: Arc<dyn Backend>,
    estimator: Arc<dyn Estimator>,
}

const INSTRUCTIONS: &str = "Parley runs multi-agent design debates: several expert agents \
propose, critique and refine solutions to a problem, and a judge writes the final solution \
with its tradeoffs and the disagreements left open. A debate takes minutes, so it is a job: \
start_debate returns its id at once; debate_result waits up to wait_seconds (at most 50) and \
returns the solution or where the debate is; call it again until it is done. When the debate \
asks clarification questions (clarify: true), answer them with answer_questions. \
estimate_debate says what a debate will cost before it starts.";

impl ParleyMcp {
    /// A server over `backend`.
    pub fn new(backend: Arc<dyn Backend>, estimator: Arc<dyn Estimator>) -> Self {
        Self { backend, estimator }
    }

    /// The backend as the caller sees it: over HTTP (`/mcp` under `parley serve`), the
    /// request carries the caller's API key ([`parley_web::keys::Principal`], put there by
    /// the server's authentication), and a `user` key reaches only its own debates; over
    /// stdio there is no request, and the backend is the operator's.
    fn backend_for(&self, context: &RequestContext<RoleServer>) -> Arc<dyn Backend> {
        let principal = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<parley_web::keys::Principal>());
        match principal {
            Some(p) => Arc::new(parley_web::scoped::ScopedBackend::new(
                self.backend.clone(),
                p.clone(),
            )),
            None => self.backend.clone(),
        }
    }

    /// Every tool, with its input schema.
    pub fn tools() -> Vec<Tool> {
        use rmcp::handler::server::common::schema_for_type as schema;
        let read_only = ToolAnnotations::new().read_only(true);
        vec![
            Tool::new(
                "estimate_debate",
                "What a debate would cost before it starts: the calls, tokens and dollars \
                 (min, expected, max) per participant and in total. Takes start_debate's \
                 arguments; makes no LLM call.",
                schema::<DebateArgs>(),
            )
            .annotate(read_only.clone()),
            Tool::new(
                "start_debate",
                "Starts a debate on a design problem and returns its id at once (it runs for \
                 minutes). Follow it with debate_result (or debate_status).",
                schema::<DebateArgs>(),
            ),
            Tool::new(
                "debate_status",
                "Where a debate is: status, phase, round, tasks done of total, tokens and \
                 dollars spent, and the clarification questions waiting for answers.",
                schema::<DebateIdArgs>(),
            )
            .annotate(read_only.clone()),
            Tool::new(
                "debate_result",
                "Waits up to wait_seconds (default 25, at most 50) for a debate to finish, \
                 sending progress notifications, then returns the solution (description, \
                 tradeoffs, recommendations, unresolved disagreements, confidence, spend), \
                 the questions it waits for, or 'still running ...; call debate_result again'.",
                schema::<ResultArgs>(),
            )
            .annotate(read_only.clone()),
            Tool::new(
                "answer_questions",
                "Answers a debate's clarification questions (ids from debate_status or \
                 debate_result); when every question has an answer the debate goes on.",
                schema::<args::AnswersArgs>(),
            ),
            Tool::new(
                "steer_debate",
                "Steers a running debate: pause (no new task; the calls in flight finish), \
                 resume, guide with a note (every later prompt carries it), stop (synthesize \
                 now from what exists), extend (one more round).",
                schema::<args::SteerArgs>(),
            ),
            Tool::new(
                "contribute",
                "Answers a human participant's open task (an agent with provider \"human\"): \
                 its proposal, critique, refinement, or vote (the id of the agent voted for \
                 first). debate_status shows the open tasks (human.open).",
                schema::<args::ContributeArgs>(),
            ),
            Tool::new(
                "cancel_debate",
                "Cancels a running debate.",
                schema::<DebateIdArgs>(),
            )
            .annotate(ToolAnnotations::new().destructive(true)),
            Tool::new(
                "list_debates",
                "The debates, most recently updated first: id, status, problem, round, phase.",
                schema::<ListArgs>(),
            )
            .annotate(read_only),
        ]
    }

    async fn call(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, Failure> {
        let backend = self.backend_for(context);
        match name {
            "estimate_debate" => {
                let request = args::parse::<DebateArgs>(arguments)?.into_request()?;
                let estimator = self.estimator.clone();
                tokio::task::spawn_blocking(move || estimator.estimate(&request))
                    .await
                    .map_err(|e| Failure::Tool(format!("the estimate stopped: {e}")))?
                    .map_err(Failure::from_api)
            }
            "start_debate" => {
                let request = args::parse::<DebateArgs>(arguments)?.into_request()?;
                let id = backend.submit(request).await.map_err(Failure::from_api)?;
                tracing::info!(debate = %id, "started over MCP");
                Ok(json!({
                    "debate_id": id,
                    "status": "running",
                    "message": "the debate started; call debate_result with this id to wait \
                                for it (up to 50 s a call), or debate_status to see where it is",
                    "resources": [
                        format!("parley://debates/{id}/state"),
                        format!("parley://debates/{id}/report"),
                    ],
                }))
            }
            "debate_status" => {
                let a: DebateIdArgs = args::parse(arguments)?;
                let id = args::debate_id(&a.debate_id)?;
                let state = backend.state(id).await.map_err(Failure::from_api)?;
                let progress = follow::latest_progress(backend.as_ref(), id)
                    .await
                    .unwrap_or_default();
                Ok(view::status_view(id, &state, &progress))
            }
            "debate_result" => {
                let a: ResultArgs = args::parse(arguments)?;
                let id = args::debate_id(&a.debate_id)?;
                let wait = a.wait()?;
                let sink = context.meta.get_progress_token().map(|token| PeerProgress {
                    peer: context.peer.clone(),
                    token,
                });
                let (state, progress) = follow::wait_for_rest(
                    backend.as_ref(),
                    id,
                    Instant::now() + wait,
                    &context.ct,
                    sink.as_ref().map(|s| s as &dyn ProgressSink),
                )
                .await
                .map_err(Failure::from_api)?;
                Ok(view::result_view(id, &state, &progress))
            }
            "answer_questions" => {
                let a: args::AnswersArgs = args::parse(arguments)?;
                let id = args::debate_id(&a.debate_id)?;
                let request = a.request()?;
                let reply = backend
                    .answer(id, request)
                    .await
                    .map_err(Failure::from_api)?;
                Ok(json!({"debate_id": id, "reply": reply}))
            }
            "steer_debate" => {
                let a: args::SteerArgs = args::parse(arguments)?;
                let id = args::debate_id(&a.debate_id)?;
                let command = a.command()?;
                let reply = self
                    .backend
                    .steer(id, command, Some("mcp".into()))
                    .await
                    .map_err(Failure::from_api)?;
                Ok(json!({"debate_id": id, "reply": reply}))
            }
            "contribute" => {
                let a: args::ContributeArgs = args::parse(arguments)?;
                let id = args::debate_id(&a.debate_id)?;
                let request = parley_web::backend::ContributionRequest {
                    text: a.text,
                    agent_id: a.agent_id,
                    task_id: a.task_id,
                };
                let c = request
                    .contribution(id, Some("mcp".into()))
                    .map_err(Failure::from_api)?;
                let reply = self
                    .backend
                    .contribute(id, c)
                    .await
                    .map_err(Failure::from_api)?;
                Ok(json!({"debate_id": id, "reply": reply}))
            }
            "cancel_debate" => {
                let a: DebateIdArgs = args::parse(arguments)?;
                let id = args::debate_id(&a.debate_id)?;
                let reply = backend.cancel(id).await.map_err(Failure::from_api)?;
                Ok(json!({"debate_id": id, "reply": reply}))
            }
            "list_debates" => {
                let a: ListArgs = args::parse(arguments)?;
                let limit = a.limit()?;
                let mut items = backend.list().await.map_err(Failure::from_api)?;
                items.truncate(limit);
                Ok(json!({"debates": items}))
            }
            other => Err(Failure::Arg(ArgError(format!(
                "name: no tool {:?} (tools: {})",
                parley_protocol::preview(other, 40),
                Self::tools()
                    .iter()
                    .map(|t| t.name.as_ref())
                    .collect::<Vec<_>>()
                    .join(", ")
            )))),
        }
    }
}

/// Why a tool call did not succeed.
enum Failure {
    /// A bad argument: a JSON-RPC invalid-params error.
    Arg(ArgError),
    /// A failure past the arguments: an `isError` tool result.
    Tool(String),
}

impl From<ArgError> for Failure {
    fn from(e: ArgError) -> Self {
        Failure::Arg(e)
    }
}

impl Failure {
    /// A backend's refusal: a bad request or an unknown debate is the caller's argument;
    /// the rest is the tool's failure.
    fn from_api(e: ApiError) -> Self {
        match e.status {
            400 | 413 => Failure::Arg(ArgError(e.message)),
            404 => Failure::Arg(ArgError(format!("debate_id: {}", e.message))),
            _ => Failure::Tool(e.message),
        }
    }
}

/// Progress notifications to the client that asked with a progress token.
struct PeerProgress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
}

impl ProgressSink for PeerProgress {
    fn report(&self, seq: u64, message: String) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let param = ProgressNotificationParam::new(self.token.clone(), seq as f64)
                .with_message(message);
            if let Err(e) = self.peer.notify_progress(param).await {
                tracing::debug!("progress notification not sent: {e}");
            }
        })
    }
}

/// `parley://debates/<id>/state`, `.../report` or `.../record` → (id, what).
fn parse_uri(uri: &str) -> Result<(&str, &str), ErrorData> {
    let bad = || {
        ErrorData::invalid_params(
            format!(
                "uri: {:?} is not a Parley resource (parley://debates/<id>/state, \
                 parley://debates/<id>/report or parley://debates/<id>/record)",
                parley_protocol::preview(uri, 80)
            ),
            None,
        )
    };
    let rest = uri.strip_prefix("parley://debates/").ok_or_else(bad)?;
    let (id, what) = rest.split_once('/').ok_or_else(bad)?;
    if !matches!(what, "state" | "report" | "record") {
        return Err(bad());
    }
    let id = args::debate_id(id).map_err(|e| ErrorData::invalid_params(e.0, None))?;
    Ok((id, what))
}

fn text_contents(uri: &str, mime: &str, text: String) -> ResourceContents {
    ResourceContents::TextResourceContents {
        uri: uri.to_string(),
        mime_type: Some(mime.to_string()),
        text,
        meta: None,
    }
}

impl ServerHandler for ParleyMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("parley", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(Self::tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        match self.call(&name, request.arguments, &context).await {
            Ok(v) => Ok(CallToolResult::structured(v).into()),
            Err(Failure::Arg(e)) => {
                tracing::info!(tool = %name, "refused: {e}");
                Err(ErrorData::invalid_params(e.0, None))
            }
            Err(Failure::Tool(message)) => {
                tracing::warn!(tool = %name, "failed: {message}");
                Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into())
            }
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let items = self
            .backend_for(&context)
            .list()
            .await
            .map_err(|e| ErrorData::internal_error(e.message, None))?;
        let mut resources = Vec::with_capacity(items.len() * 2);
        for d in items {
            let title = parley_protocol::preview(&d.problem, 80);
            resources.push(
                Resource::new(
                    format!("parley://debates/{}/state", d.id),
                    format!("{} state", d.id),
                )
                .with_title(format!("{} ({}): state", title, d.status))
                .with_description("The debate's state as JSON")
                .with_mime_type("application/json"),
            );
            resources.push(
                Resource::new(
                    format!("parley://debates/{}/report", d.id),
                    format!("{} report", d.id),
                )
                .with_title(format!("{} ({}): report", title, d.status))
                .with_description("The debate's report in Markdown")
                .with_mime_type("text/markdown"),
            );
        }
        // The list changes as debates start and end: not to be cached.
        Ok(ListResourcesResult::with_all_items(resources).with_ttl_ms(0))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("parley://debates/{id}/state", "debate state")
                .with_description("A debate's state as JSON")
                .with_mime_type("application/json"),
            ResourceTemplate::new("parley://debates/{id}/report", "debate report")
                .with_description("A debate's report in Markdown")
                .with_mime_type("text/markdown"),
            ResourceTemplate::new("parley://debates/{id}/record", "decision record")
                .with_description(
                    "A finished debate's decision record as JSON (`parley verify` checks it)",
                )
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let backend = self.backend_for(&context);
        let uri = request.uri.as_str();
        let (id, what) = parse_uri(uri)?;
        let refuse = |e: ApiError| match e.status {
            404 => ErrorData::resource_not_found(e.message, Some(json!({"uri": uri}))),
            400 | 413 => ErrorData::invalid_params(e.message, None),
            _ => ErrorData::internal_error(e.message, None),
        };
        let contents = if what == "state" || what == "record" {
            let v = if what == "state" {
                parley_web::backend::state_download(backend.as_ref(), id)
                    .await
                    .map(|(state, _)| state)
            } else {
                backend.record(id).await
            }
            .map_err(refuse)?;
            let text = serde_json::to_string_pretty(&v)
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            text_contents(uri, "application/json", text)
        } else {
            let md = backend.report(id).await.map_err(refuse)?;
            text_contents(uri, "text/markdown", md)
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}
