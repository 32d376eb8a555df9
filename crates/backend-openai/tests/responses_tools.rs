//! Tool calling through the Responses API (`request_format=responses`)
//! against the mock server: the request carries its tools in that API's
//! flat shape, the answer's `function_call` item is assembled whole from
//! its streamed events (or read whole), the time to the first tool call is
//! checked against the instant the server wrote it, and a results turn
//! replays the calls and their outputs as `function_call` and
//! `function_call_output` items, or under `server_history` only the
//! outputs after `previous_response_id`.
//!
//! Nothing here is timed: the checks on instants are causal (a delta
//! cannot be read before its write began), so they hold on any machine.

use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::request::{
    ChatMessage, FinishReason, GenerationRequest, GenerationResponse, RequestInput, ToolCallOutput,
    ToolChoice, ToolSet,
};
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig};
use guidebench_openai::{
    OpenAiConfig, OpenAiHttpBackend, RequestFormat, ToolCallMissing, error_label,
};
use serde_json::{Value, json};

const TOKENS: u32 = 6;

async fn server(config: MockServerConfig) -> MockServer {
    MockServer::start(MockServerConfig {
        ttft: Duration::from_millis(3),
        itl: Duration::from_millis(1),
        record_timings: true,
        record_requests: true,
        ..config
    })
    .await
    .expect("mock server starts")
}

async fn client(mock: &MockServer, stream: bool, server_history: bool) -> OpenAiHttpBackend {
    let mut config = OpenAiConfig::new(&mock.url()).expect("config");
    config.request_format = RequestFormat::Responses;
    config.request_id_header = Some("x-request-id".into());
    config.stream = stream;
    config.server_history = server_history;
    config.tool_call_missing_behavior = ToolCallMissing::ErrorStop;
    let backend = OpenAiHttpBackend::new(config);
    backend.startup().await.expect("startup");
    backend
}

/// Two tools in chat's shape, as a dataset's `tools_column` holds them.
fn tools(choice: ToolChoice, expect_call: bool) -> ToolSet {
    ToolSet {
        tools: vec![
            json!({"type": "function", "function": {
                "name": "get_weather",
                "description": "the weather in a city",
                "parameters": {"type": "object"},
            }}),
            json!({"type": "function", "function": {"name": "lookup"}}),
        ],
        choice,
        expect_call,
    }
}

fn question() -> Vec<ChatMessage> {
    vec![ChatMessage::text("user", "what is the weather?")]
}

/// A request of `messages` offering `set`.
fn request(id: u64, messages: Vec<ChatMessage>, set: ToolSet) -> GenerationRequest {
    let sampling = Sampling::fixed_length(TOKENS).expect("valid");
    let mut request = GenerationRequest::new(id, RequestInput::Chat(messages), sampling);
    request.tools = Some(set);
    request
}

fn calls_of(response: &GenerationResponse) -> ToolCallOutput {
    response
        .tool_calls
        .clone()
        .expect("the answer carries its tool calls")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_function_call_is_assembled_and_its_first_delta_was_read_after_the_server_wrote_it()
 {
    let mock = server(MockServerConfig::default()).await;
    let backend = client(&mock, true, false).await;
    let sends = (0..8).map(|id| {
        let request = request(100 + id, question(), tools(ToolChoice::Required, false));
        let backend = &backend;
        async move { backend.resolve(request).await.expect("served") }
    });
    let answers = futures::future::join_all(sends).await;
    let timings = mock.timings();
    for response in answers {
        let id = response.id.to_string();
        let tools = calls_of(&response);
        assert_eq!(tools.count, 1, "request {id}");
        assert!(!tools.with_text, "a tool-only answer");
        let call = &tools.calls[0];
        assert_eq!(call.name, "get_weather", "the first tool");
        let arguments: Value =
            serde_json::from_str(&call.arguments).expect("the deltas make one JSON object");
        assert!(arguments["text"].is_string());
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(response.output_tokens, TOKENS, "usage.output_tokens");
        assert!(response.text.is_empty());

        let server = timings
            .iter()
            .find(|t| t.id == id)
            .unwrap_or_else(|| panic!("the server recorded request {id}"));
        assert_eq!(
            call.id,
            format!("call_mock_{}", server.index),
            "the call_id"
        );
        let first = tools.first.expect("the first tool call's instant");
        let written = server.events[0].written_ns.expect("written");
        assert!(
            first.0 >= written,
            "request {id}: the first tool call read at {} before its write began at {written}",
            first.0
        );
        assert_eq!(
            Some(first),
            response.timings.first_token(),
            "argument deltas are output tokens: the first is the first token"
        );
        assert_eq!(response.timings.tokens.len(), server.events.len());
        let start = response.timings.start.expect("start").0;
        assert!(
            first.0 - start >= written - server.arrived_ns,
            "request {id}"
        );
    }
    let recorded = mock.recorded();
    assert_eq!(recorded.len(), 8);
    let body = &recorded[0].body;
    assert_eq!(recorded[0].path, "/v1/responses");
    assert_eq!(
        body["tools"],
        json!([
            {"type": "function", "name": "get_weather",
             "description": "the weather in a city", "parameters": {"type": "object"}},
            {"type": "function", "name": "lookup"},
        ]),
        "the tools were sent flat, as the Responses API takes them"
    );
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["max_output_tokens"], TOKENS, "not a tool-call turn");
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn a_whole_answers_function_call_is_read_and_timed_at_its_arrival() {
    let mock = server(MockServerConfig::default()).await;
    let backend = client(&mock, false, false).await;
    let set = tools(ToolChoice::Function("lookup".into()), true);
    let response = backend
        .resolve(request(1, question(), set))
        .await
        .expect("served");
    let tools = calls_of(&response);
    assert_eq!(tools.count, 1);
    let call = &tools.calls[0];
    assert_eq!(call.name, "lookup", "the function tool_choice names");
    assert_eq!(call.id, "call_mock_0");
    serde_json::from_str::<Value>(&call.arguments).expect("whole JSON arguments");
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    let first = tools.first.expect("instant");
    assert_eq!(Some(first), response.timings.first_token());
    assert!(first <= response.timings.end.expect("end"));

    let body = &mock.recorded()[0].body;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "name": "lookup"})
    );
    assert!(
        body.get("max_output_tokens").is_none(),
        "a turn that expects a call sends no output limit"
    );
    assert_eq!(
        response.output_tokens, 16,
        "with no limit the mock's default length"
    );
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn tool_choice_none_gets_text_and_a_turn_that_expected_a_call_fails_as_tool_call_missing() {
    let mock = server(MockServerConfig::default()).await;
    let backend = client(&mock, true, false).await;
    let response = backend
        .resolve(request(1, question(), tools(ToolChoice::None, false)))
        .await
        .expect("served");
    assert!(!response.text.is_empty());
    assert_ne!(response.finish_reason, FinishReason::ToolCalls);
    assert!(response.tool_calls.is_none(), "no calls and none expected");

    let err = backend
        .resolve(request(2, question(), tools(ToolChoice::None, true)))
        .await
        .expect_err("a call was expected");
    assert_eq!(error_label(&err), "tool_call_missing");
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

/// Sends a tool-call turn, then its results turn (the call's output and a
/// new question); the results turn's body as the server received it.
async fn results_turn_body(server_history: bool) -> Value {
    let mock = server(MockServerConfig::default()).await;
    let backend = client(&mock, true, server_history).await;
    let first = backend
        .resolve(request(1, question(), tools(ToolChoice::Required, true)))
        .await
        .expect("served");
    let calls = calls_of(&first).calls;
    let mut messages = question();
    messages.push(ChatMessage::tool_calls(first.text.clone(), calls.clone()));
    messages.push(ChatMessage::tool_result(calls[0].id.clone(), "sunny"));
    messages.push(ChatMessage::text("user", "and tomorrow?"));
    let second = backend
        .resolve(request(2, messages, tools(ToolChoice::None, false)))
        .await
        .expect("the results turn is served");
    assert!(!second.text.is_empty(), "text after the results");
    let recorded = mock.recorded();
    assert_eq!(recorded.len(), 2);
    let mut body = recorded[1].body.clone();
    // The arguments are the mock's words; the call id and name are checked.
    if let Some(input) = body["input"].as_array_mut() {
        for item in input {
            if item["type"] == "function_call" {
                let arguments = item["arguments"].as_str().expect("arguments");
                serde_json::from_str::<Value>(arguments).expect("the call's whole arguments");
                item["arguments"] = json!("…");
            }
        }
    }
    // Under server_history the server counts the stored history.
    if server_history {
        assert!(second.prompt_tokens > first.prompt_tokens + first.output_tokens);
    }
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
    body
}

#[tokio::test]
async fn a_results_turn_replays_the_call_and_its_output_as_input_items() {
    let body = results_turn_body(false).await;
    assert!(body.get("previous_response_id").is_none());
    assert_eq!(
        body["input"],
        json!([
            {"role": "user", "content": [{"type": "input_text", "text": "what is the weather?"}]},
            {"type": "function_call", "call_id": "call_mock_0", "name": "get_weather",
             "arguments": "…"},
            {"type": "function_call_output", "call_id": "call_mock_0", "output": "sunny"},
            {"role": "user", "content": [{"type": "input_text", "text": "and tomorrow?"}]},
        ])
    );
}

#[tokio::test]
async fn under_server_history_a_results_turn_sends_only_the_output_after_the_calls_answer_id() {
    let body = results_turn_body(true).await;
    assert_eq!(
        body["previous_response_id"], "resp_mock_0",
        "the answer that made the call"
    );
    assert_eq!(
        body["input"],
        json!([
            {"type": "function_call_output", "call_id": "call_mock_0", "output": "sunny"},
            {"role": "user", "content": [{"type": "input_text", "text": "and tomorrow?"}]},
        ])
    );
}

#[tokio::test]
async fn a_function_call_stream_the_server_cuts_short_or_breaks_fails_as_such() {
    for (config, label) in [
        (
            MockServerConfig {
                truncate_rate: 1.0,
                ..MockServerConfig::default()
            },
            "stream_truncated",
        ),
        (
            MockServerConfig {
                malformed_rate: 1.0,
                ..MockServerConfig::default()
            },
            "malformed_response",
        ),
        (
            MockServerConfig {
                error_rate: 1.0,
                ..MockServerConfig::default()
            },
            "http_status",
        ),
    ] {
        let mock = server(config).await;
        let backend = client(&mock, true, false).await;
        let set = tools(ToolChoice::Required, false);
        let err = backend
            .resolve(request(1, question(), set))
            .await
            .expect_err("fails");
        assert_eq!(error_label(&err), label);
        if label != "http_status" {
            assert!(
                !mock.timings()[0].events.is_empty(),
                "{label}: the server wrote an arguments delta before the fault"
            );
        }
        backend.shutdown().await.expect("shutdown");
        mock.shutdown().await.expect("mock shutdown");
    }
}

#[tokio::test]
async fn reasoning_before_a_function_call_makes_the_call_the_first_output() {
    let mock = server(MockServerConfig {
        reasoning_tokens: 2,
        ..MockServerConfig::default()
    })
    .await;
    let backend = client(&mock, true, false).await;
    let set = tools(ToolChoice::Required, false);
    let response = backend
        .resolve(request(1, question(), set))
        .await
        .expect("served");
    let tools = calls_of(&response);
    assert_eq!(tools.count, 1);
    serde_json::from_str::<Value>(&tools.calls[0].arguments).expect("whole JSON arguments");
    let first = tools.first.expect("instant");
    assert_eq!(
        response.timings.first_content,
        Some(first),
        "TTFOT is the call"
    );
    assert_eq!(response.timings.reasoning_tokens, Some(2));
    assert!(response.timings.first_token() < Some(first));
    assert_eq!(response.output_tokens, TOKENS, "reasoning and arguments");
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}
