//! Function calling over both wire APIs, against the fake OpenAI-compatible server: the
//! request carries the tool schemas, a reply's tool calls come back parsed, the next
//! request carries the calls and their results (`role: "tool"` + `tool_call_id`, or
//! `function_call` + `function_call_output`), and `tool_choice: "none"` gets a text answer.

use std::time::Duration;

use parley_llm::openai::{Api, OpenAiClient};
use parley_llm::tools::{ToolChoice, ToolDefinition, ToolExchange, ToolOutput, ToolRequest};
use parley_llm::{ChatMessage, ChatRequest, Provider};
use parley_testkit::{FakeLlm, FakeToolCall};
use serde_json::json;

fn request(tools: ToolRequest) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![ChatMessage::system("sys"), ChatMessage::user("q")],
        temperature: 0.2,
        max_tokens: None,
        timeout: Duration::from_secs(20),
        seed: None,
        tools,
        response_format: None,
    }
}

fn file_read() -> ToolDefinition {
    ToolDefinition {
        name: "file_read".into(),
        description: "Read a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}},
                           "required": ["path"]}),
    }
}

async fn round_trip(api: Api) {
    let llm = FakeLlm::start().await.unwrap();
    llm.set_tool_caller(|r| {
        if r.tool_outputs().is_empty() {
            vec![FakeToolCall::new("file_read", r#"{"path":"a.rs"}"#)]
        } else {
            Vec::new()
        }
    });
    llm.set_responder(|_| "final answer".into());
    let client = OpenAiClient::new("openai-compatible", llm.base_url(), None, api).unwrap();
    assert!(client.supports_tools());
    let mut tools = ToolRequest {
        definitions: vec![file_read()],
        ..Default::default()
    };
    let first = client.complete(&request(tools.clone())).await.unwrap();
    assert_eq!(first.tool_calls.len(), 1, "{first:?}");
    let call = first.tool_calls[0].clone();
    assert_eq!(call.name, "file_read");
    assert_eq!(call.arguments, r#"{"path":"a.rs"}"#);
    assert!(first.prompt_tokens > 0);
    tools.exchanges.push(ToolExchange {
        calls: vec![call.clone()],
        outputs: vec![ToolOutput {
            call_id: call.id.clone(),
            output: "fn a() {}".into(),
        }],
    });
    let second = client.complete(&request(tools.clone())).await.unwrap();
    assert_eq!(second.text, "final answer");
    assert!(second.tool_calls.is_empty());

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].tool_names(), ["file_read"]);
    assert_eq!(reqs[0].body["tool_choice"], "auto");
    assert_eq!(
        reqs[1].tool_outputs(),
        [(call.id.clone(), "fn a() {}".to_string())]
    );
    match api {
        Api::ChatCompletions => {
            assert_eq!(reqs[0].path, "/v1/chat/completions");
            let schema = &reqs[0].body["tools"][0]["function"]["parameters"];
            assert_eq!(schema["required"][0], "path");
            let m = &reqs[1].body["messages"];
            assert_eq!(m[2]["role"], "assistant");
            assert_eq!(m[2]["tool_calls"][0]["id"], call.id.as_str());
            assert_eq!(m[3]["role"], "tool");
        }
        Api::Responses => {
            assert_eq!(reqs[0].path, "/v1/responses");
            assert_eq!(
                reqs[0].body["tools"][0]["parameters"]["required"][0],
                "path"
            );
            let input = &reqs[1].body["input"];
            assert_eq!(input[1]["type"], "function_call");
            assert_eq!(input[1]["call_id"], call.id.as_str());
            assert_eq!(input[2]["type"], "function_call_output");
        }
    }

    // With tool_choice "none" the server must answer in text even if it would call.
    llm.set_tool_caller(|_| vec![FakeToolCall::new("file_read", "{}")]);
    tools.choice = ToolChoice::None;
    let third = client.complete(&request(tools)).await.unwrap();
    assert!(third.tool_calls.is_empty());
    assert_eq!(third.text, "final answer");
    assert_eq!(llm.requests()[2].body["tool_choice"], "none");
}

#[tokio::test]
async fn chat_completions_round_trip() {
    round_trip(Api::ChatCompletions).await;
}

#[tokio::test]
async fn responses_api_round_trip() {
    round_trip(Api::Responses).await;
}

#[tokio::test]
async fn without_tools_a_request_has_no_tool_fields() {
    let llm = FakeLlm::start().await.unwrap();
    llm.set_tool_caller(|_| vec![FakeToolCall::new("file_read", "{}")]);
    let client = OpenAiClient::new(
        "openai-compatible",
        llm.base_url(),
        None,
        Api::ChatCompletions,
    )
    .unwrap();
    let r = client
        .complete(&request(ToolRequest::default()))
        .await
        .unwrap();
    assert!(r.tool_calls.is_empty() && !r.text.is_empty());
    let body = &llm.requests()[0].body;
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
}
