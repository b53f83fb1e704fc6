//! Agent tools over the debate's context snapshot and history, and the bounded
//! tool-calling loop.
//!
//! The tools (an agent names them in `tools`, see [`parley_protocol::TOOL_NAMES`]):
//! - `list_files {prefix?}`: the snapshot's paths (with sizes), optionally under a prefix.
//! - `file_read {path, startLine?, endLine?}`: one snapshot file, or a range of its lines
//!   (1-based, inclusive); the result is cut to [`MAX_RESULT_BYTES`].
//! - `context_search {term}` (dialectic's argument; `query` is accepted too): a case-insensitive search over the debate history the task
//!   carries (the agent's history or summary, the proposal and critiques it works on) and
//!   the snapshot's files; returns up to [`MAX_SEARCH_HITS`] short excerpts, each naming
//!   where it was found.
//!
//! Tools only read the [`ContextFiles`] snapshot that came with the debate's spec: a path
//! is looked up among the snapshot's names, never opened. Arguments are model output: they
//! are parsed with a size cap, and every problem (not JSON, a missing or mistyped field, an
//! unknown path, a path that tries to leave the directory) goes back to the model as the
//! call's result, starting with `error:`; the debate goes on.
//!
//! The loop ([`run_with_tools`]): each reply's calls are run in order and their results
//! sent back; after `toolCallLimit` calls the model gets one more request with
//! `tool_choice: "none"` and a note asking for its final answer. Every call is recorded in
//! the contribution's metadata ([`ToolCallRecord`]: tool, arguments, result bytes, ok or
//! the error) and traced as a `tool.call` span carrying the tool's name and sizes only,
//! never arguments or file contents. Tokens and latency of all the loop's LLM calls are
//! summed into the contribution.

use parley_llm::tools::{
    ToolCall, ToolChoice, ToolDefinition, ToolExchange, ToolOutput, ToolRequest,
};
use parley_llm::{add_usage, call_for_task_with_tools, ChatMessage, LlmError, Provider};
use parley_protocol::{
    snapshot_path_problem, ContextFiles, ContributionMetadata, Task, ToolCallRecord,
};
use serde_json::{json, Value};

/// Bytes of one tool result given back to the model.
pub const MAX_RESULT_BYTES: usize = 16 * 1024;
/// Excerpts a `context_search` returns at most.
pub const MAX_SEARCH_HITS: usize = 20;
/// Characters of one search excerpt.
const EXCERPT_CHARS: usize = 240;
/// Bytes of a call's arguments the tools accept.
const MAX_ARGUMENT_BYTES: usize = 4 * 1024;
/// Bytes of a search query.
const MAX_QUERY_BYTES: usize = 256;

/// Why a tool call did not run: given back to the model as the call's result
/// (`error: ...`), recorded in the contribution's [`ToolCallRecord`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// A tool the agent was not given: its name (cut short) and the tools it has.
    #[error("unknown tool {name:?}; the tools you may call are: {allowed}")]
    UnknownTool { name: String, allowed: String },
    /// A tool the agent was given that this worker does not run.
    #[error("tool {0} is not available")]
    NotAvailable(String),
    /// The debate has no context snapshot to read.
    #[error("no context directory was given for this debate (parley run --context DIR)")]
    NoContext,
    /// The arguments are not what the tool takes: too large, not a JSON object, an
    /// unknown, missing or mistyped argument.
    #[error("{0}")]
    BadArguments(String),
    /// A path that is not a relative path inside the context directory.
    #[error("path {path:?} {problem}: give a path relative to the context directory, inside it")]
    BadPath { path: String, problem: String },
    #[error("no file {0:?} in the context directory (list_files shows the paths)")]
    NoSuchFile(String),
    #[error("line range {start}..{end} is empty: {path} has {lines} lines")]
    EmptyRange {
        path: String,
        start: usize,
        end: usize,
        lines: usize,
    },
    #[error("the query is empty")]
    EmptyQuery,
    #[error("the query is {0} bytes, the limit is {max}", max = MAX_QUERY_BYTES)]
    QueryTooLong(usize),
}

/// The definitions (name, description, JSON schema) of the named tools, in the order given;
/// unknown names are skipped (the spec's validation refuses them).
pub fn definitions(names: &[String]) -> Vec<ToolDefinition> {
    names.iter().filter_map(|n| definition(n)).collect()
}

fn definition(name: &str) -> Option<ToolDefinition> {
    let (description, parameters) = match name {
        "list_files" => (
            "List the files of the context directory the user gave (relative paths and sizes), \
             optionally only those under a path prefix.",
            json!({"type": "object", "properties": {
                "prefix": {"type": "string", "description": "Only paths starting with this, e.g. \"src/\"."}
            }, "additionalProperties": false}),
        ),
        "file_read" => (
            "Read a text file of the context directory by its relative path (as list_files \
             shows it), optionally only lines startLine..endLine (1-based, inclusive).",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Relative path, e.g. \"src/main.rs\"."},
                "startLine": {"type": "integer", "minimum": 1},
                "endLine": {"type": "integer", "minimum": 1}
            }, "required": ["path"], "additionalProperties": false}),
        ),
        "context_search" => (
            "Search the debate so far (your history, the proposal and critiques of this task) \
             and the context directory's files for a term, case-insensitively; returns short \
             excerpts with where each was found.",
            json!({"type": "object", "properties": {
                "term": {"type": "string", "description": "The text to look for."}
            }, "required": ["term"], "additionalProperties": false}),
        ),
        _ => return None,
    };
    Some(ToolDefinition {
        name: name.to_string(),
        description: description.to_string(),
        parameters,
    })
}

/// What the tools of one task read: the snapshot (if the debate has one) and the history
/// texts the task carries.
pub struct Toolbox<'a> {
    files: Option<&'a ContextFiles>,
    /// (where, text) pairs searched by `context_search`.
    history: Vec<(String, &'a str)>,
    /// The tools the agent may call.
    allowed: Vec<String>,
}

impl<'a> Toolbox<'a> {
    pub fn new(task: &'a Task, files: Option<&'a ContextFiles>) -> Self {
        let i = &task.input;
        let mut history: Vec<(String, &'a str)> = Vec::new();
        if let Some(h) = &i.history {
            history.push(("history".into(), h));
        }
        if let Some(p) = &i.proposal {
            history.push((format!("proposal of {}", p.agent_id), &p.content));
        }
        for c in &i.critiques {
            history.push((format!("critique by {}", c.agent_id), &c.content));
        }
        if let Some(t) = &i.transcript {
            history.push(("transcript".into(), t));
        }
        Self {
            files,
            history,
            allowed: task.agent.tools.iter().map(|t| t.name.clone()).collect(),
        }
    }

    /// Runs one call: its result text, or the error to give back to the model.
    pub fn call(&self, name: &str, arguments: &str) -> Result<String, ToolError> {
        if !self.allowed.iter().any(|a| a == name) {
            return Err(ToolError::UnknownTool {
                name: parley_protocol::preview(name, 40),
                allowed: self.allowed.join(", "),
            });
        }
        let args = parse_arguments(arguments)?;
        match name {
            "list_files" => self.list_files(&args),
            "file_read" => self.file_read(&args),
            "context_search" => self.context_search(&args),
            other => Err(ToolError::NotAvailable(other.to_string())),
        }
    }

    fn snapshot(&self) -> Result<&'a ContextFiles, ToolError> {
        self.files.ok_or(ToolError::NoContext)
    }

    fn list_files(&self, args: &Args) -> Result<String, ToolError> {
        args.only(&["prefix"])?;
        let prefix = args.string("prefix")?.unwrap_or_default();
        let files = self.snapshot()?;
        let mut out = String::new();
        let mut n = 0;
        for f in files.files.iter().filter(|f| f.path.starts_with(&prefix)) {
            n += 1;
            out.push_str(&format!("{} ({} bytes)\n", f.path, f.content.len()));
        }
        if n == 0 {
            return Ok(if prefix.is_empty() {
                "the context directory has no text files".into()
            } else {
                format!("no file path starts with {prefix:?}")
            });
        }
        Ok(cap(out))
    }

    fn file_read(&self, args: &Args) -> Result<String, ToolError> {
        args.only(&["path", "startLine", "endLine"])?;
        let path = args.string("path")?.ok_or_else(|| {
            ToolError::BadArguments(
                "missing argument \"path\" (a relative path as list_files shows it)".into(),
            )
        })?;
        let path = path.strip_prefix("./").unwrap_or(&path);
        if let Some(p) = snapshot_path_problem(path) {
            return Err(ToolError::BadPath {
                path: parley_protocol::preview(path, 120),
                problem: p,
            });
        }
        let files = self.snapshot()?;
        let file = files
            .get(path)
            .ok_or_else(|| ToolError::NoSuchFile(parley_protocol::preview(path, 120)))?;
        let start = args.line("startLine")?;
        let end = args.line("endLine")?;
        if start.is_none() && end.is_none() {
            return Ok(cap(file.content.clone()));
        }
        let lines: Vec<&str> = file.content.lines().collect();
        let start = start.unwrap_or(1);
        let end = end.unwrap_or(lines.len()).min(lines.len());
        if start > end || start > lines.len() {
            return Err(ToolError::EmptyRange {
                path: path.to_string(),
                start,
                end,
                lines: lines.len(),
            });
        }
        Ok(cap(lines[start - 1..end].join("\n")))
    }

    fn context_search(&self, args: &Args) -> Result<String, ToolError> {
        args.only(&["term", "query"])?;
        let query = match args.string("term")? {
            Some(t) => t,
            None => args.string("query")?.ok_or_else(|| {
                ToolError::BadArguments("missing argument \"term\" (the text to look for)".into())
            })?,
        };
        let query = query.trim().to_lowercase();
        if query.is_empty() {
            return Err(ToolError::EmptyQuery);
        }
        if query.len() > MAX_QUERY_BYTES {
            return Err(ToolError::QueryTooLong(query.len()));
        }
        let files = self
            .files
            .into_iter()
            .flat_map(|f| &f.files)
            .map(|f| (f.path.clone(), f.content.as_str()));
        let mut hits = Vec::new();
        'sources: for (place, text) in self.history.iter().cloned().chain(files) {
            for (n, line) in text.lines().enumerate() {
                if line.to_lowercase().contains(&query) {
                    hits.push(format!(
                        "{place}:{}: {}",
                        n + 1,
                        parley_protocol::preview(line.trim(), EXCERPT_CHARS)
                    ));
                    if hits.len() >= MAX_SEARCH_HITS {
                        break 'sources;
                    }
                }
            }
        }
        if hits.is_empty() {
            return Ok(format!("no match for {query:?}"));
        }
        Ok(cap(hits.join("\n")))
    }
}

/// A call's arguments: a JSON object.
struct Args(serde_json::Map<String, Value>);

fn parse_arguments(raw: &str) -> Result<Args, ToolError> {
    let bad = ToolError::BadArguments;
    if raw.len() > MAX_ARGUMENT_BYTES {
        return Err(bad(format!(
            "the arguments are {} bytes, the limit is {MAX_ARGUMENT_BYTES}",
            raw.len()
        )));
    }
    if raw.trim().is_empty() {
        return Ok(Args(serde_json::Map::new()));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(m)) => Ok(Args(m)),
        Ok(_) => Err(bad("the arguments must be a JSON object".into())),
        Err(e) => Err(bad(format!("the arguments are not valid JSON: {e}"))),
    }
}

impl Args {
    fn only(&self, known: &[&str]) -> Result<(), ToolError> {
        match self.0.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(ToolError::BadArguments(format!(
                "unknown argument {:?} (expected: {})",
                parley_protocol::preview(k, 40),
                known.join(", ")
            ))),
            None => Ok(()),
        }
    }

    fn string(&self, name: &str) -> Result<Option<String>, ToolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ToolError::BadArguments(format!(
                "argument {name:?} must be a string"
            ))),
        }
    }

    fn line(&self, name: &str) -> Result<Option<usize>, ToolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|n| *n >= 1)
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    ToolError::BadArguments(format!(
                        "argument {name:?} must be a line number (1 or more)"
                    ))
                }),
        }
    }
}

/// `s` cut to [`MAX_RESULT_BYTES`] with a note saying so.
fn cap(mut s: String) -> String {
    if s.len() <= MAX_RESULT_BYTES {
        return s;
    }
    let total = s.len();
    let mut cut = MAX_RESULT_BYTES;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str(&format!(
        "\n… (cut at {MAX_RESULT_BYTES} of {total} bytes; read a line range for the rest)"
    ));
    s
}

/// The note of the last request once the limit is reached.
fn limit_note(limit: u32) -> String {
    format!(
        "You have used all {limit} tool calls this task allows. Give your final answer now, \
         without calling tools."
    )
}

/// Runs the conversation `messages` with the task agent's tools: calls the model, runs the
/// tools it asks for, sends the results back, until it answers (or the limit is reached,
/// then once more without tools). Returns the answer and the summed usage with every call
/// recorded.
pub async fn run_with_tools(
    provider: &dyn Provider,
    task: &Task,
    messages: Vec<ChatMessage>,
    files: Option<&ContextFiles>,
) -> Result<(String, ContributionMetadata), LlmError> {
    let toolbox = Toolbox::new(task, files);
    let names: Vec<String> = task.agent.tools.iter().map(|t| t.name.clone()).collect();
    let limit = task.agent.tool_call_limit();
    let mut request = ToolRequest {
        definitions: definitions(&names),
        ..ToolRequest::default()
    };
    let mut made: u32 = 0;
    let mut records: Vec<ToolCallRecord> = Vec::new();
    let mut total: Option<ContributionMetadata> = None;
    loop {
        let may_call = made < limit;
        if !may_call {
            request.choice = ToolChoice::None;
            request.closing_note = Some(limit_note(limit));
        }
        let (text, calls, meta) =
            call_for_task_with_tools(provider, task, messages.clone(), request.clone()).await?;
        match &mut total {
            Some(t) => add_usage(t, &meta),
            None => total = Some(meta),
        }
        if !may_call && text.trim().is_empty() {
            // A provider that ignored `tool_choice: "none"`: worth another attempt.
            return Err(LlmError::new(
                parley_protocol::ErrorKind::Malformed,
                provider.name(),
                format!(
                    "the model gave no answer after its {limit} tool calls (it kept asking for \
                     tools)"
                ),
            ));
        }
        if calls.is_empty() || !may_call {
            let mut meta = total.unwrap_or_default();
            meta.tool_calls = records;
            return Ok((text, meta));
        }
        let mut exchange = ToolExchange {
            calls: calls.clone(),
            outputs: Vec::with_capacity(calls.len()),
        };
        for call in &calls {
            let output = if made < limit {
                made += 1;
                let (output, record) = run_one(&toolbox, call);
                records.push(record);
                output
            } else {
                format!(
                    "error: not run: the tool call limit of {limit} is reached; give your final \
                     answer"
                )
            };
            exchange.outputs.push(ToolOutput {
                call_id: call.id.clone(),
                output,
            });
        }
        request.exchanges.push(exchange);
    }
}

/// One call, traced: the text for the model and the record for the metadata.
fn run_one(toolbox: &Toolbox<'_>, call: &ToolCall) -> (String, ToolCallRecord) {
    let span = tracing::info_span!(
        "tool.call",
        tool.name = %parley_protocol::preview(&call.name, 40),
        tool.arguments_bytes = call.arguments.len(),
        tool.result_bytes = tracing::field::Empty,
        tool.ok = tracing::field::Empty,
    );
    let _enter = span.enter();
    let (output, ok, error) = match toolbox.call(&call.name, &call.arguments) {
        Ok(text) => (text, true, None),
        Err(e) => (format!("error: {e}"), false, Some(e)),
    };
    span.record("tool.result_bytes", output.len());
    span.record("tool.ok", ok);
    let record = ToolCallRecord {
        tool: parley_protocol::preview(&call.name, 64),
        arguments: parley_protocol::preview(&call.arguments, ToolCallRecord::MAX_ARGUMENTS_CHARS),
        result_bytes: output.len(),
        ok,
        error: error.map(|e| parley_protocol::preview(&e.to_string(), 300)),
    };
    (output, record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_protocol::ContextFile;

    fn task(tools: &[&str]) -> Task {
        let tools: Vec<Value> = tools.iter().map(|t| json!({"name": t})).collect();
        serde_json::from_value(json!({
            "id": "deb-20250101-000000-abcdef/1/critique/a1/a2",
            "debateId": "deb-20250101-000000-abcdef",
            "round": 1, "kind": "critique", "attempt": 1,
            "agent": {"id": "a1", "name": "A", "role": "architect", "model": "m", "tools": tools},
            "targetAgentId": "a2",
            "problem": "P",
            "input": {
                "history": "Earlier I proposed a Redis cache.",
                "proposal": {"agentId": "a2", "agentRole": "security", "content": "Use mTLS\nand a WAF"}
            },
            "timeoutMs": 10000
        }))
        .unwrap()
    }

    fn files() -> ContextFiles {
        ContextFiles {
            files: vec![
                ContextFile {
                    path: "README.md".into(),
                    content: "# Shop\nThe cache is Redis.\n".into(),
                },
                ContextFile {
                    path: "src/main.rs".into(),
                    content: "fn main() {\n    serve();\n}\n".into(),
                },
            ],
        }
    }

    const ALL: &[&str] = &["list_files", "file_read", "context_search"];

    #[test]
    fn list_and_read() {
        let t = task(ALL);
        let f = files();
        let b = Toolbox::new(&t, Some(&f));
        let list = b.call("list_files", "{}").unwrap();
        assert!(
            list.contains("README.md (27 bytes)") && list.contains("src/main.rs"),
            "{list}"
        );
        assert_eq!(
            b.call("list_files", r#"{"prefix":"src/"}"#).unwrap().trim(),
            "src/main.rs (27 bytes)"
        );
        assert_eq!(
            b.call(
                "file_read",
                r#"{"path":"./src/main.rs","startLine":2,"endLine":2}"#
            )
            .unwrap(),
            "    serve();"
        );
        assert!(b
            .call("file_read", r#"{"path":"README.md"}"#)
            .unwrap()
            .contains("Redis"));
    }

    #[test]
    fn escapes_and_bad_arguments_are_errors_for_the_model() {
        let t = task(ALL);
        let f = files();
        let b = Toolbox::new(&t, Some(&f));
        for (args, says) in [
            (r#"{"path":"../etc/passwd"}"#, ".. components"),
            (r#"{"path":"/etc/passwd"}"#, "relative path"),
            (r#"{"path":"src/../../x"}"#, ".. components"),
            (r#"{"path":"nope.rs"}"#, "no file \"nope.rs\""),
            (r#"{"path":5}"#, "must be a string"),
            (r#"{"file":"a"}"#, "unknown argument \"file\""),
            (r#"{"path":"README.md","startLine":0}"#, "line number"),
            (r#"{"path":"README.md","startLine":9}"#, "is empty"),
            ("{not json", "not valid JSON"),
            ("[1]", "JSON object"),
            ("{}", "missing argument \"path\""),
        ] {
            let e = b.call("file_read", args).unwrap_err().to_string();
            assert!(e.contains(says), "{args}: {e}");
        }
        let e = b.call("shell", "{}").unwrap_err();
        assert!(matches!(e, ToolError::UnknownTool { .. }), "{e}");
        let e = e.to_string();
        assert!(e.contains("unknown tool \"shell\""), "{e}");
        let only_list = task(&["list_files"]);
        let e = Toolbox::new(&only_list, Some(&f))
            .call("file_read", r#"{"path":"README.md"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("may call are: list_files"), "{e}");
        let e = Toolbox::new(&t, None).call("list_files", "").unwrap_err();
        assert_eq!(e, ToolError::NoContext);
        assert!(e.to_string().contains("--context"), "{e}");
    }

    #[test]
    fn search_covers_history_and_files_case_insensitively() {
        let t = task(ALL);
        let f = files();
        let b = Toolbox::new(&t, Some(&f));
        let r = b.call("context_search", r#"{"query":"REDIS"}"#).unwrap();
        assert!(
            r.contains("history:1: Earlier I proposed a Redis cache."),
            "{r}"
        );
        assert!(r.contains("README.md:2: The cache is Redis."), "{r}");
        let r = b.call("context_search", r#"{"term":"waf"}"#).unwrap();
        assert!(r.contains("proposal of a2:2: and a WAF"), "{r}");
        assert!(b
            .call("context_search", r#"{"query":"kafka"}"#)
            .unwrap()
            .starts_with("no match"));
        assert_eq!(
            b.call("context_search", r#"{"query":"  "}"#),
            Err(ToolError::EmptyQuery)
        );
        let e = b.call("context_search", "{}").unwrap_err().to_string();
        assert!(e.contains("missing argument \"term\""), "{e}");
        // Without a snapshot the history is still searched.
        let r = Toolbox::new(&t, None)
            .call("context_search", r#"{"query":"mtls"}"#)
            .unwrap();
        assert!(r.contains("proposal of a2:1"), "{r}");
    }

    #[test]
    fn results_are_capped() {
        let t = task(ALL);
        let big = ContextFiles {
            files: vec![ContextFile {
                path: "big.txt".into(),
                content: "y".repeat(MAX_RESULT_BYTES * 3),
            }],
        };
        let r = Toolbox::new(&t, Some(&big))
            .call("file_read", r#"{"path":"big.txt"}"#)
            .unwrap();
        assert!(r.len() < MAX_RESULT_BYTES + 200);
        assert!(
            r.contains("cut at 16384 of 49152 bytes"),
            "{}",
            &r[r.len() - 100..]
        );
    }

    /// A provider that asks for a tool on every reply, whatever `tool_choice` says.
    #[derive(Debug, Default)]
    struct Insistent {
        calls: std::sync::Mutex<Vec<parley_llm::ChatRequest>>,
    }

    #[async_trait::async_trait]
    impl Provider for Insistent {
        fn name(&self) -> &str {
            "insistent"
        }
        fn supports_tools(&self) -> bool {
            true
        }
        async fn complete(
            &self,
            req: &parley_llm::ChatRequest,
        ) -> Result<parley_llm::ChatResponse, LlmError> {
            self.calls.lock().unwrap().push(req.clone());
            Ok(parley_llm::ChatResponse {
                text: String::new(),
                prompt_tokens: 10,
                cached_prompt_tokens: 0,
                completion_tokens: 1,
                model: "m".into(),
                latency_ms: 1,
                rate_limit_reset: None,
                structured: false,
                tool_calls: vec![ToolCall {
                    id: "c".into(),
                    name: "list_files".into(),
                    arguments: "{}".into(),
                }],
            })
        }
    }

    #[tokio::test]
    async fn a_model_that_ignores_the_limit_gets_a_retryable_error() {
        let mut t = task(ALL);
        t.agent.tool_call_limit = Some(2);
        let p = Insistent::default();
        let f = files();
        let e = run_with_tools(&p, &t, vec![ChatMessage::user("q")], Some(&f))
            .await
            .unwrap_err();
        assert_eq!(e.kind, parley_protocol::ErrorKind::Malformed);
        assert!(e.message.contains("after its 2 tool calls"), "{e}");
        let calls = p.calls.lock().unwrap();
        // Two calls with tools allowed, then the final request without.
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[1].tools.exchanges.len(), 1);
        assert_eq!(calls[2].tools.choice, ToolChoice::None);
        assert_eq!(calls[2].tools.exchanges.len(), 2);
        assert!(calls[2].tools.closing_note.is_some());
    }

    #[test]
    fn definitions_have_schemas() {
        let d = definitions(&["file_read".into(), "bogus".into()]);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].parameters["required"][0], "path");
    }
}
