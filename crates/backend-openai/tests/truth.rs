//! Measurement truth: the client's token instants against the instants the
//! mock server wrote each token, on one clock (both sides map monotonic time
//! to wall time through `Clock::global` in this process).
//!
//! Nothing here is timed: the checks are causal (a token cannot be read
//! before its write began, a request cannot arrive before it was sent), so
//! they hold on any machine. The figures (the client's overhead) are printed
//! by `bench/truth`.

use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::request::GenerationRequest;
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig, StreamTimings};
use guidebench_openai::{OpenAiConfig, OpenAiHttpBackend};

const TOKENS: u32 = 6;

async fn recording_server() -> MockServer {
    MockServer::start(MockServerConfig {
        ttft: Duration::from_millis(3),
        itl: Duration::from_millis(1),
        record_timings: true,
        ..MockServerConfig::default()
    })
    .await
    .expect("mock server starts")
}

async fn client(mock: &MockServer) -> OpenAiHttpBackend {
    let mut config = OpenAiConfig::new(&mock.url()).expect("config");
    config.request_id_header = Some("x-request-id".into());
    let backend = OpenAiHttpBackend::new(config);
    backend.startup().await.expect("startup");
    backend
}

fn request(id: u64) -> GenerationRequest {
    GenerationRequest::text(
        id,
        "one two three",
        Sampling::fixed_length(TOKENS).expect("valid"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_token_the_client_stamps_was_read_after_the_server_began_writing_it() {
    let mock = recording_server().await;
    let backend = client(&mock).await;
    let sends = (0..16).map(|id| backend.resolve(request(100 + id)));
    let responses: Vec<_> = futures::future::join_all(sends)
        .await
        .into_iter()
        .map(|r| r.expect("served"))
        .collect();
    let timings = mock.timings();
    assert_eq!(timings.len(), 16, "one record per streamed request");
    for response in &responses {
        let id = response.id.to_string();
        let server: &StreamTimings = timings
            .iter()
            .find(|t| t.id == id)
            .unwrap_or_else(|| panic!("the server recorded request {id} by its x-request-id"));
        let client = &response.timings;
        assert_eq!(client.tokens.len(), server.events.len(), "request {id}");
        let start = client.start.expect("start").0;
        assert!(server.received_ns <= server.arrived_ns, "request {id}");
        assert!(
            start <= server.received_ns,
            "request {id}: sent at {start}, arrived at {}",
            server.arrived_ns
        );
        for (k, (read, event)) in client.tokens.iter().zip(&server.events).enumerate() {
            assert_eq!(event.tokens, 1);
            let written = event.written_ns.expect("every token was written");
            assert!(event.polled_ns <= written, "request {id} token {k}");
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
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn the_debug_endpoint_serves_one_request_by_id_or_all_of_them() {
    let mock = recording_server().await;
    let backend = client(&mock).await;
    for id in [7, 8] {
        backend.resolve(request(id)).await.expect("served");
    }
    let get = |query: &'static str| {
        let url = format!("{}/debug/timings{query}", mock.url());
        async move {
            let response = reqwest::get(url).await.expect("answered");
            assert!(response.status().is_success());
            let bytes = response.bytes().await.expect("a body");
            let body: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
            assert_eq!(body["clock"], "unix_ns");
            serde_json::from_value::<Vec<StreamTimings>>(body["requests"].clone())
                .expect("stream timings")
        }
    };
    let all = get("").await;
    assert_eq!(
        all.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["7", "8"]
    );
    let one = get("?id=8").await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0], all[1]);
    assert_eq!(one[0].events.len(), TOKENS as usize);
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn without_record_timings_nothing_is_recorded_and_the_endpoint_is_absent() {
    let mock = MockServer::start(MockServerConfig::default())
        .await
        .expect("mock server starts");
    let backend = client(&mock).await;
    backend.resolve(request(1)).await.expect("served");
    assert!(mock.timings().is_empty());
    let status = reqwest::get(format!("{}/debug/timings", mock.url()))
        .await
        .expect("answered")
        .status();
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}
