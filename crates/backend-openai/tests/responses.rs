//! The `openai_http` backend's Responses API endpoint (`/v1/responses`)
//! against the in-process mock server: GuideLLM's spelling, the body it
//! sends, streamed events timed against the server's own write instants,
//! usage, non-streamed answers, server-side conversation history
//! (`previous_response_id`), and faults.

mod common;

use std::sync::Arc;
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{ChatMessage, FinishReason, GenerationRequest, RequestInput};
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig, StreamTimings};
use guidebench_openai::{OpenAiConfig, OpenAiHttpBackend, RequestFormat, error_label};
use serde_json::json;

use common::{HeldClock, StreamEvents, resolve_in_lockstep};

async fn server(config: MockServerConfig) -> MockServer {
    MockServer::start(config).await.expect("mock server starts")
}

/// A started backend for `kind=openai_http,target=…,{options}`.
async fn backend(mock: &MockServer, options: &str) -> OpenAiHttpBackend {
    let mut args = format!(
        "kind=openai_http,target={},model=m,request_format=/v1/responses",
        mock.url()
    );
    if !options.is_empty() {
        args.push(',');
        args.push_str(options);
    }
    let args = parse_kind_args(&args).expect("parse");
    let backend = OpenAiHttpBackend::new(OpenAiConfig::from_args(args).expect("config"));
    backend.startup().await.expect("startup");
    backend
}

fn request(id: u64, tokens: u32) -> GenerationRequest {
    GenerationRequest::text(
        id,
        "one two three four five",
        Sampling::fixed_length(tokens).expect("valid"),
    )
}

fn chat(id: u64, messages: Vec<ChatMessage>, tokens: u32) -> GenerationRequest {
    GenerationRequest::new(
        id,
        RequestInput::Chat(messages),
        Sampling::fixed_length(tokens).expect("valid"),
    )
}

#[tokio::test]
async fn guidellm_s_spelling_selects_the_responses_endpoint_and_the_body_guidellm_sends() {
    let mock = server(MockServerConfig {
        record_requests: true,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, "extra_body.store=true").await;
    assert_eq!(b.config().request_format, RequestFormat::Responses);
    let info = b.validate().await.expect("validate").info;
    assert_eq!(info["request_format"], "responses");
    assert_eq!(info["server_history"], false);
    assert!(
        info["endpoint"]
            .as_str()
            .expect("endpoint")
            .ends_with("/v1/responses")
    );
    let messages = vec![
        ChatMessage::text("system", "be brief"),
        ChatMessage::text("user", "one two three"),
    ];
    let r = b.resolve(chat(1, messages, 4)).await.expect("served");
    assert_eq!(r.output_tokens, 4);
    let recorded = mock.recorded();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].path, "/v1/responses");
    assert_eq!(
        recorded[0].body,
        json!({
            "model": "m",
            "instructions": "be brief",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "one two three"}]}],
            "max_output_tokens": 4,
            "temperature": 0.0,
            "ignore_eos": true,
            "stream": true,
            "store": true,
        }),
        "no stream_options, max_output_tokens for max_tokens, the system prompt as instructions"
    );
    b.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

/// On a clock that moves only to the server's planned instants, and only
/// once the client has read what was due before: the first
/// `response.output_text.delta` is the first token and every later delta
/// one inter-token gap, exactly as configured.
#[tokio::test(start_paused = true)]
async fn a_streamed_run_measures_the_configured_ttft_and_itl_from_output_text_deltas() {
    let _clock = HeldClock::hold();
    let mut events = StreamEvents::count();
    let (ttft, itl) = (Duration::from_millis(80), Duration::from_millis(15));
    let mock = server(MockServerConfig {
        ttft,
        itl,
        tokio_timer: true,
        ..MockServerConfig::default()
    })
    .await;
    let b = Arc::new(backend(&mock, "").await);
    let offsets: Vec<Duration> = (0..12).map(|k| ttft + itl * k).collect();
    let r = resolve_in_lockstep(&mock, &b, request(1, 12), &offsets, &mut events)
        .await
        .expect("served");
    assert_eq!(r.timings.tokens.len(), 12);
    let measured_ttft = r.timings.ttft().expect("ttft");
    let measured_itl = r.timings.itl_mean().expect("itl");
    assert!(
        (measured_ttft - 0.080).abs() < 1e-9,
        "ttft {measured_ttft} s"
    );
    assert!((measured_itl - 0.015).abs() < 1e-9, "itl {measured_itl} s");
    let gaps_ns: Vec<i64> = r
        .timings
        .tokens
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .collect();
    assert_eq!(gaps_ns, vec![15_000_000; 11]);
    // max_output_tokens capped the output: response.incomplete says so.
    assert_eq!(r.finish_reason, FinishReason::Length);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_delta_the_client_stamps_was_read_after_the_server_began_writing_it() {
    let mock = server(MockServerConfig {
        ttft: Duration::from_millis(3),
        itl: Duration::from_millis(1),
        record_timings: true,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, "request_id_header=x-request-id").await;
    let sends = (0..8).map(|id| b.resolve(request(100 + id, 6)));
    let responses: Vec<_> = futures::future::join_all(sends)
        .await
        .into_iter()
        .map(|r| r.expect("served"))
        .collect();
    let timings = mock.timings();
    assert_eq!(timings.len(), 8, "one record per streamed request");
    for response in &responses {
        let id = response.id.to_string();
        let server: &StreamTimings = timings
            .iter()
            .find(|t| t.id == id)
            .unwrap_or_else(|| panic!("the server recorded request {id}"));
        let client = &response.timings;
        assert_eq!(client.tokens.len(), server.events.len(), "request {id}");
        let start = client.start.expect("start").0;
        assert!(start <= server.received_ns, "request {id}");
        for (k, (read, event)) in client.tokens.iter().zip(&server.events).enumerate() {
            assert_eq!(event.tokens, 1);
            let written = event.written_ns.expect("every delta was written");
            assert!(
                read.0 >= written,
                "request {id} token {k}: read at {} before the write began at {written}",
                read.0
            );
        }
        let client_ttft = client.tokens[0].0 - start;
        let server_ttft = server.events[0].written_ns.expect("written") - server.arrived_ns;
        assert!(client_ttft >= server_ttft, "request {id}");
    }
    b.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn token_counts_come_from_the_usage_of_response_completed() {
    // Three tokens per delta: the usage, not the deltas, counts them.
    let mock = server(MockServerConfig {
        output_tokens: Some(7),
        tokens_per_event: 3,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, "").await;
    let r = b.resolve(request(1, 32)).await.expect("served");
    assert_eq!(r.output_tokens, 7);
    assert_eq!(r.timings.tokens.len(), 7);
    assert_eq!(r.prompt_tokens, 5, "input_tokens (the mock counts words)");
    assert_eq!(r.text, " the quick brown fox jumps over a");
    assert_eq!(
        r.finish_reason,
        FinishReason::Eos,
        "completed below max_output_tokens"
    );
    b.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn a_non_streamed_run_reads_the_output_text_and_the_usage() {
    let mock = server(MockServerConfig {
        record_requests: true,
        reasoning_tokens: 2,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, "stream=false").await;
    let r = b.resolve(request(1, 5)).await.expect("served");
    assert_eq!(r.output_tokens, 5);
    assert_eq!(r.prompt_tokens, 5);
    assert_eq!(r.text, " brown fox jumps", "the message's output_text only");
    assert_eq!(r.finish_reason, FinishReason::Length);
    assert_eq!(r.timings.reasoning_tokens, Some(2));
    let end = r.timings.tokens.last().copied();
    assert!(r.timings.tokens.iter().all(|t| Some(*t) == end));
    assert!(mock.recorded()[0].body.get("stream").is_none());
    b.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

/// Two turns as the runner builds them: the second holds the first
/// question, the first answer as the backend returned it, and a new
/// question.
async fn two_turns(b: &OpenAiHttpBackend) {
    let system = ChatMessage::text("system", "be brief");
    let first = ChatMessage::text("user", "one two three");
    let r = b
        .resolve(chat(1, vec![system.clone(), first.clone()], 3))
        .await
        .expect("first turn");
    let second = vec![
        system,
        first,
        ChatMessage::text("assistant", r.text.clone()),
        ChatMessage::text("user", "four five"),
    ];
    let r = b.resolve(chat(2, second, 3)).await.expect("second turn");
    assert_eq!(r.output_tokens, 3);
}

#[tokio::test]
async fn under_server_history_a_second_turn_sends_the_first_answers_id_and_only_its_new_input() {
    let mock = server(MockServerConfig {
        record_requests: true,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, "server_history=true").await;
    two_turns(&b).await;
    let recorded = mock.recorded();
    assert_eq!(recorded.len(), 2);
    assert!(recorded[0].body.get("previous_response_id").is_none());
    let body = &recorded[1].body;
    assert_eq!(body["previous_response_id"], "resp_mock_0");
    assert_eq!(
        body["input"],
        json!([{"role": "user", "content": [{"type": "input_text", "text": "four five"}]}])
    );
    assert_eq!(
        body["instructions"], "be brief",
        "instructions are not carried over"
    );
    b.shutdown().await.expect("shutdown");

    // Without server history, the whole history goes as input items.
    let b = backend(&mock, "server_history=false").await;
    two_turns(&b).await;
    let recorded = mock.recorded();
    let body = &recorded[3].body;
    assert!(body.get("previous_response_id").is_none(), "{body}");
    assert_eq!(
        body["input"],
        json!([
            {"role": "user", "content": [{"type": "input_text", "text": "one two three"}]},
            {"role": "assistant", "content": " the quick brown"},
            {"role": "user", "content": [{"type": "input_text", "text": "four five"}]},
        ])
    );
    b.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn the_mock_server_counts_the_history_in_input_tokens_and_refuses_an_unknown_id() {
    let mock = server(MockServerConfig::default()).await;
    let b = backend(&mock, "server_history=true").await;
    let first = ChatMessage::text("user", "one two three");
    let r1 = b
        .resolve(chat(1, vec![first.clone()], 3))
        .await
        .expect("first turn");
    assert_eq!(r1.prompt_tokens, 3);
    let turn = vec![
        first,
        ChatMessage::text("assistant", r1.text.clone()),
        ChatMessage::text("user", "four five"),
    ];
    let r2 = b.resolve(chat(2, turn, 3)).await.expect("second turn");
    assert_eq!(r2.prompt_tokens, 3 + 3 + 2, "the history and the new input");
    b.shutdown().await.expect("shutdown");

    let client = reqwest::Client::new();
    let answer = client
        .post(format!("{}/v1/responses", mock.url()))
        .header("content-type", "application/json")
        .body(json!({"model": "m", "input": "hi", "previous_response_id": "resp_nope"}).to_string())
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status(), reqwest::StatusCode::BAD_REQUEST);
    let bytes = answer.bytes().await.expect("a body");
    let body: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(
        body["error"]["message"],
        "Previous response with id 'resp_nope' not found."
    );
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn an_injected_error_status_fails_that_request_and_the_run_goes_on() {
    let mock = server(MockServerConfig {
        error_after: Some(1),
        error_status: 503,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, "").await;
    b.resolve(request(1, 2)).await.expect("the first is served");
    for id in 2..4 {
        let err = b.resolve(request(id, 2)).await.expect_err("injected");
        assert_eq!(error_label(&err), "http_status");
        let message = err.to_string();
        assert!(message.contains("503"), "{message}");
        assert!(message.contains("injected error"), "{message}");
        assert!(message.contains("/v1/responses"), "{message}");
    }
    b.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn truncated_malformed_and_reset_answers_fail_with_their_labels_streamed_or_not() {
    for (fault, label) in [
        ("truncate", "stream_truncated"),
        ("malformed", "malformed_response"),
        ("reset", "connection"),
    ] {
        let mut config = MockServerConfig::default();
        match fault {
            "truncate" => config.truncate_rate = 1.0,
            "malformed" => config.malformed_rate = 1.0,
            _ => config.reset_rate = 1.0,
        }
        let mock = server(config).await;
        let b = backend(&mock, "").await;
        let err = b.resolve(request(1, 6)).await.expect_err(fault);
        assert_eq!(error_label(&err), label, "{fault}: {err}");
        b.shutdown().await.expect("shutdown");
        let b = backend(&mock, "stream=false").await;
        let err = b.resolve(request(2, 6)).await.expect_err(fault);
        let expected = if fault == "truncate" {
            "malformed_response"
        } else {
            label
        };
        assert_eq!(error_label(&err), expected, "{fault}, not streamed: {err}");
        b.shutdown().await.expect("shutdown");
        mock.shutdown().await.expect("mock shutdown");
    }
}

/// A one-off server that answers one request with `body` as an event
/// stream.
async fn one_answer(body: &'static str) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut buf = vec![0u8; 64 * 1024];
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("\r\n\r\n{") {
            let n = socket.read(&mut buf).await.expect("read");
            seen.extend_from_slice(&buf[..n]);
        }
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(response.as_bytes()).await.expect("write");
    });
    (format!("http://{addr}"), task)
}

#[tokio::test]
async fn a_failed_response_or_an_error_event_fails_with_the_servers_message() {
    for (body, message) in [
        (
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\"}}\n\n\
             event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n\
             event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"r1\",\
             \"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"out of memory\"}}}\n\n",
            "out of memory",
        ),
        (
            "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\
             \"message\":\"slow down\",\"param\":null}\n\n",
            "rate_limit_exceeded: slow down",
        ),
        (
            "data: {\"error\":{\"message\":\"engine dead\"}}\n\ndata: [DONE]\n\n",
            "engine dead",
        ),
    ] {
        let (url, task) = one_answer(body).await;
        let mut config = OpenAiConfig::new(&url).expect("config");
        config.model = Some("m".into());
        config.request_format = RequestFormat::Responses;
        let b = OpenAiHttpBackend::new(config);
        b.startup().await.expect("startup");
        let err = b.resolve(request(1, 4)).await.expect_err("an error");
        assert_eq!(error_label(&err), "server_error", "{err}");
        assert!(err.to_string().contains(message), "{err}");
        task.await.expect("server task");
    }
}

#[tokio::test]
async fn a_stream_kept_open_after_response_completed_ends_the_request_without_a_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut buf = vec![0u8; 64 * 1024];
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("\r\n\r\n{") {
            let n = socket.read(&mut buf).await.expect("read");
            seen.extend_from_slice(&buf[..n]);
        }
        let events = "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\"}}\n\n\
             data: {\"type\":\"response.output_text.delta\",\"delta\":\" a\"}\n\n\
             data: {\"type\":\"response.output_text.delta\",\"delta\":\" b\"}\n\n\
             data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r1\",\
             \"status\":\"completed\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n";
        // Chunked, and the last chunk never comes: the stream stays open.
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
             transfer-encoding: chunked\r\n\r\n{:x}\r\n{events}\r\n",
            events.len()
        );
        socket.write_all(response.as_bytes()).await.expect("write");
        let _ = done_rx.await;
    });
    let mut config = OpenAiConfig::new(&format!("http://{addr}")).expect("config");
    config.model = Some("m".into());
    config.request_format = RequestFormat::Responses;
    config.timeout = Duration::from_secs(20);
    let b = OpenAiHttpBackend::new(config);
    b.startup().await.expect("startup");
    let sent = std::time::Instant::now();
    let r = b.resolve(request(1, 4)).await.expect("the answer is whole");
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!((r.text.as_str(), r.output_tokens), (" a b", 2));
    let latency = r
        .timings
        .end
        .expect("end")
        .secs_since(r.timings.start.expect("start"));
    let last = r.timings.tokens[1].secs_since(r.timings.start.expect("start"));
    assert!(
        latency - last < 0.05,
        "the answer ended at response.completed, not when the stream was dropped: \
         {latency} s against {last} s"
    );
    let _ = done_tx.send(());
    task.await.expect("server task");
}
