//! Tool calling in chat, against the mock server: the request carries its
//! tools, the answer's tool calls are assembled whole, the time to the
//! first tool call is checked against the instant the server wrote it, and
//! a turn that expected a call and got none does what
//! `tool_call_missing_behavior` says.
//!
//! Nothing here is timed: the checks on instants are causal (a delta
//! cannot be read before its write began), so they hold on any machine.

use std::time::Duration;

use guidebench_core::Error;
use guidebench_core::backend::Backend;
use guidebench_core::request::{
    FinishReason, GenerationRequest, GenerationResponse, ToolCallOutput, ToolChoice, ToolSet,
};
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig};
use guidebench_openai::{OpenAiConfig, OpenAiHttpBackend, ToolCallMissing, error_label};
use serde_json::json;

const TOKENS: u32 = 6;

async fn server(config: MockServerConfig) -> MockServer {
    MockServer::start(MockServerConfig {
        ttft: Duration::from_millis(3),
        itl: Duration::from_millis(1),
        record_timings: true,
        ..config
    })
    .await
    .expect("mock server starts")
}

async fn client(mock: &MockServer, stream: bool, missing: ToolCallMissing) -> OpenAiHttpBackend {
    let mut config = OpenAiConfig::new(&mock.url()).expect("config");
    config.request_id_header = Some("x-request-id".into());
    config.stream = stream;
    config.tool_call_missing_behavior = missing;
    let backend = OpenAiHttpBackend::new(config);
    backend.startup().await.expect("startup");
    backend
}

fn tools(choice: ToolChoice, expect_call: bool) -> ToolSet {
    ToolSet {
        tools: vec![
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}),
            json!({"type": "function", "function": {"name": "lookup"}}),
        ],
        choice,
        expect_call,
    }
}

/// A request offering `set`.
fn request(id: u64, set: ToolSet) -> GenerationRequest {
    let sampling = Sampling::fixed_length(TOKENS).expect("valid");
    let mut request = GenerationRequest::text(id, "what is the weather?", sampling);
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
async fn a_streamed_tool_call_is_assembled_and_its_first_delta_was_read_after_the_server_wrote_it()
{
    let mock = server(MockServerConfig::default()).await;
    let backend = client(&mock, true, ToolCallMissing::ErrorStop).await;
    let sends = (0..8).map(|id| {
        let request = request(100 + id, tools(ToolChoice::Required, false));
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
        assert_eq!(
            call.name, "get_weather",
            "the first tool, tool_choice naming none"
        );
        let arguments: serde_json::Value =
            serde_json::from_str(&call.arguments).expect("the fragments make one JSON object");
        assert!(arguments["text"].is_string());
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(response.output_tokens, TOKENS, "the server's usage counts");
        assert!(response.text.is_empty());

        let server = timings
            .iter()
            .find(|t| t.id == id)
            .unwrap_or_else(|| panic!("the server recorded request {id}"));
        assert_eq!(
            call.id,
            format!("call_mock_{}", server.index),
            "the server's call id"
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
            "argument fragments are output tokens: the first is the first token"
        );
        assert_eq!(response.timings.tokens.len(), server.events.len());
        let start = response.timings.start.expect("start").0;
        let client_ttftc = first.0 - start;
        let server_ttftc = written - server.arrived_ns;
        assert!(client_ttftc >= server_ttftc, "request {id}");
    }
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn a_whole_answers_tool_call_is_read_and_timed_at_its_arrival() {
    let mock = server(MockServerConfig::default()).await;
    let backend = client(&mock, false, ToolCallMissing::ErrorStop).await;
    let request = request(1, tools(ToolChoice::Function("lookup".into()), false));
    let response = backend.resolve(request).await.expect("served");
    let tools = calls_of(&response);
    assert_eq!(tools.count, 1);
    assert_eq!(
        tools.calls[0].name, "lookup",
        "the function tool_choice names"
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.output_tokens, TOKENS);
    let first = tools.first.expect("instant");
    assert_eq!(Some(first), response.timings.first_token());
    assert!(first <= response.timings.end.expect("end"));
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn tool_choice_none_gets_text_and_leaves_no_tool_calls() {
    let mock = server(MockServerConfig::default()).await;
    let backend = client(&mock, true, ToolCallMissing::ErrorStop).await;
    let request = request(1, tools(ToolChoice::None, false));
    let response = backend.resolve(request).await.expect("served");
    assert!(!response.text.is_empty());
    assert_ne!(response.finish_reason, FinishReason::ToolCalls);
    assert!(response.tool_calls.is_none(), "no calls and none expected");
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn a_turn_that_expected_a_call_and_got_text_does_what_tool_call_missing_behavior_says() {
    let mock = server(MockServerConfig::default()).await;
    // tool_choice=none: the mock answers with text where a call was expected.
    for behavior in [
        ToolCallMissing::ErrorStop,
        ToolCallMissing::IgnoreStop,
        ToolCallMissing::IgnoreContinue,
    ] {
        let backend = client(&mock, true, behavior).await;
        let request = request(1, tools(ToolChoice::None, true));
        let result = backend.resolve(request).await;
        match behavior {
            ToolCallMissing::ErrorStop => {
                let err = result.expect_err("fails");
                assert_eq!(error_label(&err), "tool_call_missing");
            }
            ToolCallMissing::IgnoreStop => {
                assert!(matches!(result, Err(Error::Interrupted)), "{result:?}");
            }
            _ => {
                let response = result.expect("served");
                assert!(!response.text.is_empty());
                assert_eq!(
                    calls_of(&response).count,
                    0,
                    "an expected call that did not come counts 0"
                );
            }
        }
        backend.shutdown().await.expect("shutdown");
    }
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn a_tool_call_stream_the_server_cuts_short_or_breaks_fails_as_such() {
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
        let backend = client(&mock, true, ToolCallMissing::IgnoreContinue).await;
        let request = request(1, tools(ToolChoice::Required, false));
        let err = backend.resolve(request).await.expect_err("fails");
        assert_eq!(error_label(&err), label);
        if label != "http_status" {
            let timings = mock.timings();
            assert!(
                !timings[0].events.is_empty(),
                "{label}: the server wrote a tool-call delta before the fault"
            );
        }
        backend.shutdown().await.expect("shutdown");
        mock.shutdown().await.expect("mock shutdown");
    }
}

#[tokio::test]
async fn reasoning_before_a_tool_call_makes_the_call_the_first_output() {
    let mock = server(MockServerConfig {
        reasoning_tokens: 2,
        ..MockServerConfig::default()
    })
    .await;
    let backend = client(&mock, true, ToolCallMissing::ErrorStop).await;
    let request = request(1, tools(ToolChoice::Required, false));
    let response = backend.resolve(request).await.expect("served");
    let tools = calls_of(&response);
    assert_eq!(tools.count, 1);
    let first = tools.first.expect("instant");
    assert_eq!(
        response.timings.first_content,
        Some(first),
        "TTFOT is the call"
    );
    assert_eq!(response.timings.reasoning_tokens, Some(2));
    assert!(response.timings.first_token() < Some(first));
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}
