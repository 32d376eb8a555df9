//! The `openai_http` backend's embeddings (`/v1/embeddings`) and vLLM
//! pooling (`/pooling`) endpoints against the in-process mock server:
//! GuideLLM's spellings, the body GuideLLM sends, the answer parsed into
//! input tokens and no output tokens (no TTFT, ITL or TPOT), faults, and
//! the client's latency against the server's own write instants.

mod common;

use std::sync::Arc;
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{GenerationRequest, GenerationResponse};
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig, StreamTimings};
use guidebench_openai::{OpenAiConfig, OpenAiHttpBackend, RequestFormat, error_label};

use common::HeldClock;

/// GuideLLM's `request_format` spelling of each endpoint, and its path.
const ENDPOINTS: [(&str, &str); 2] = [
    ("/v1/embeddings", "/v1/embeddings"),
    ("/pooling", "/pooling"),
];

async fn server(config: MockServerConfig) -> MockServer {
    MockServer::start(config).await.expect("mock server starts")
}

/// A started backend for `kind=openai_http,target=…,{options}`.
async fn backend(mock: &MockServer, options: &str) -> OpenAiHttpBackend {
    let args = parse_kind_args(&format!("kind=openai_http,target={},{options}", mock.url()))
        .expect("parse");
    let backend = OpenAiHttpBackend::new(OpenAiConfig::from_args(args).expect("config"));
    backend.startup().await.expect("startup");
    backend
}

fn request(id: u64) -> GenerationRequest {
    GenerationRequest::text(
        id,
        "one two three four five",
        Sampling::fixed_length(8).expect("valid"),
    )
}

/// No token instants, so no TTFT, ITL or TPOT; no output tokens.
fn assert_pooled(r: &GenerationResponse, what: &str) {
    assert_eq!(r.output_tokens, 0, "{what}");
    assert!(r.timings.tokens.is_empty(), "{what}");
    assert_eq!(r.timings.ttft(), None, "{what}");
    assert_eq!(r.timings.itl_mean(), None, "{what}");
    assert_eq!(r.timings.tpot(), None, "{what}");
    assert!(r.text.is_empty(), "{what}");
    let (start, end) = (r.timings.start.expect("start"), r.timings.end.expect("end"));
    assert!(start <= end, "{what}");
}

#[tokio::test]
async fn embeddings_against_the_mock_server_report_input_tokens_and_no_ttft() {
    let mock = server(MockServerConfig {
        record_requests: true,
        ..MockServerConfig::default()
    })
    .await;
    // GuideLLM's spelling; `stream` is left at its default (true).
    let b = backend(&mock, "model=m,request_format=/v1/embeddings").await;
    assert_eq!(b.config().request_format, RequestFormat::Embeddings);
    let info = b.validate().await.expect("validate").info;
    assert_eq!(info["request_format"], "embeddings");
    assert_eq!(info["stream"], false, "embeddings are never streamed");
    assert!(
        info["endpoint"]
            .as_str()
            .expect("endpoint")
            .ends_with("/v1/embeddings")
    );
    let r = b.resolve(request(3)).await.expect("served");
    assert_eq!(r.id, 3);
    assert_eq!(
        r.prompt_tokens, 5,
        "the usage's prompt tokens (the mock counts words)"
    );
    assert_pooled(&r, "embeddings");
    let recorded = mock.recorded();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].path, "/v1/embeddings");
    assert_eq!(
        recorded[0].body,
        serde_json::json!({"model": "m", "input": "one two three four five"}),
        "the body GuideLLM sends: no sampling, no stream"
    );
    b.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn pooling_against_the_mock_server_reports_input_tokens_and_no_ttft() {
    let mock = server(MockServerConfig {
        record_requests: true,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(
        &mock,
        "model=m,request_format=/pooling,extra_body.task=embed",
    )
    .await;
    assert_eq!(b.config().request_format, RequestFormat::Pooling);
    let r = b.resolve(request(4)).await.expect("served");
    assert_eq!(r.prompt_tokens, 5);
    assert_pooled(&r, "pooling");
    let recorded = mock.recorded();
    assert_eq!(recorded[0].path, "/pooling");
    assert_eq!(
        recorded[0].body,
        serde_json::json!({"model": "m", "input": "one two three four five", "task": "embed"})
    );
    b.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn base64_vectors_and_asked_dimensions_are_read() {
    let mock = server(MockServerConfig::default()).await;
    for (format, _) in ENDPOINTS {
        let b = backend(
            &mock,
            &format!(
                "model=m,request_format={format},extra_body.encoding_format=base64,\
                 extra_body.dimensions=3"
            ),
        )
        .await;
        let r = b.resolve(request(1)).await.expect("served");
        assert_eq!(r.prompt_tokens, 5, "{format}");
        assert_pooled(&r, format);
        b.shutdown().await.expect("shutdown");
    }
    // The mock answers what was asked: 3 floats of 4 bytes, in base64.
    let answer: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/embeddings", mock.url()))
        .header("content-type", "application/json")
        .body(
            serde_json::json!({"input": ["a b", "c"], "encoding_format": "base64", "dimensions": 3})
                .to_string(),
        )
        .send()
        .await
        .expect("answered")
        .bytes()
        .await
        .map(|b| serde_json::from_slice(&b).expect("JSON"))
        .expect("a body");
    assert_eq!(answer["usage"]["prompt_tokens"], 3);
    let data = answer["data"].as_array().expect("data");
    assert_eq!(data.len(), 2, "one vector per input");
    assert_eq!(data[1]["index"], 1);
    assert_eq!(data[0]["embedding"].as_str().expect("base64").len(), 16);
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn faults_on_the_embeddings_and_pooling_endpoints_fail_only_their_own_request() {
    // (fault option, the label the client gives it)
    let faults = [
        ("error_rate", "http_status"),
        ("reset_rate", "connection"),
        ("truncate_rate", "malformed_response"),
        ("malformed_rate", "malformed_response"),
    ];
    for (format, _) in ENDPOINTS {
        for (option, label) in faults {
            // Every request of the first two fails; the rest are served.
            let mut config = MockServerConfig::default();
            match option {
                "error_rate" => config.error_rate = 1.0,
                "reset_rate" => config.reset_rate = 1.0,
                "truncate_rate" => config.truncate_rate = 1.0,
                _ => config.malformed_rate = 1.0,
            }
            let faulty = server(config).await;
            let b = backend(&faulty, &format!("model=m,request_format={format}")).await;
            for id in 0..2 {
                let err = b
                    .resolve(request(id))
                    .await
                    .expect_err("the fault fails it");
                assert_eq!(error_label(&err), label, "{format} {option}: {err}");
            }
            b.shutdown().await.expect("shutdown");
            faulty.shutdown().await.expect("mock shutdown");
        }
        // `error_after=2`: the first two are served, every later one fails,
        // and the backend goes on answering each on its own.
        let mock = server(MockServerConfig {
            error_after: Some(2),
            error_status: 503,
            ..MockServerConfig::default()
        })
        .await;
        let b = backend(&mock, &format!("model=m,request_format={format}")).await;
        let mut labels = Vec::new();
        for id in 0..4 {
            labels.push(match b.resolve(request(id)).await {
                Ok(r) => {
                    assert_pooled(&r, format);
                    "ok".to_owned()
                }
                Err(e) => {
                    assert!(e.to_string().contains("503"), "{e}");
                    error_label(&e).to_owned()
                }
            });
        }
        assert_eq!(
            labels,
            ["ok", "ok", "http_status", "http_status"],
            "{format}"
        );
        b.shutdown().await.expect("shutdown");
        mock.shutdown().await.expect("mock shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_latency_covers_the_servers_from_arrival_to_the_write_of_its_answer() {
    let mock = server(MockServerConfig {
        ttft: Duration::from_millis(3),
        record_timings: true,
        ..MockServerConfig::default()
    })
    .await;
    for (format, path) in ENDPOINTS {
        let b = backend(
            &mock,
            &format!("model=m,request_format={format},request_id_header=x-request-id"),
        )
        .await;
        let base = if path == "/pooling" { 200 } else { 100 };
        let sends = (0..8).map(|k| b.resolve(request(base + k)));
        let responses: Vec<_> = futures::future::join_all(sends)
            .await
            .into_iter()
            .map(|r| r.expect("served"))
            .collect();
        let ids: Vec<String> = responses.iter().map(|r| r.id.to_string()).collect();
        let timings = common::written_timings(&mock, &ids).await;
        for r in &responses {
            let id = r.id.to_string();
            let server: &StreamTimings = timings
                .iter()
                .find(|t| t.id == id)
                .unwrap_or_else(|| panic!("{format}: the server recorded request {id}"));
            assert_eq!(
                server.events.len(),
                1,
                "{format}: one answer, written whole"
            );
            let answer = &server.events[0];
            assert_eq!(answer.tokens, 0, "{format}: no output tokens");
            let written = answer.written_ns.expect("the answer was written");
            assert!(answer.polled_ns <= written, "{format} {id}");
            let (start, end) = (
                r.timings.start.expect("start").0,
                r.timings.end.expect("end").0,
            );
            assert!(server.received_ns <= server.arrived_ns, "{format} {id}");
            assert!(
                start <= server.received_ns,
                "{format} {id}: sent after it arrived"
            );
            assert!(
                end >= written,
                "{format} {id}: ended before the answer was written"
            );
            assert!(
                end - start >= written - server.arrived_ns,
                "{format} {id}: the client's latency is shorter than the server's"
            );
            // The server waited its prefill-like latency before answering.
            assert!(written - server.arrived_ns >= 3_000_000, "{format} {id}");
        }
        b.shutdown().await.expect("shutdown");
    }
    mock.shutdown().await.expect("mock shutdown");
}

/// On a clock that moves only when the test moves it: the measured
/// latency is exactly the server's configured one.
#[tokio::test(start_paused = true)]
async fn the_measured_latency_is_exactly_the_mock_servers_latency() {
    let _clock = HeldClock::hold();
    let latency = Duration::from_millis(80);
    let mock = server(MockServerConfig {
        ttft: latency,
        tokio_timer: true,
        ..MockServerConfig::default()
    })
    .await;
    for (format, _) in ENDPOINTS {
        let b = Arc::new(backend(&mock, &format!("model=m,request_format={format}")).await);
        let arrivals = mock.stats().requests;
        let client = Arc::clone(&b);
        let response = tokio::spawn(async move { client.resolve(request(1)).await });
        // The clock stays where it is until the server has the request.
        while mock.stats().requests == arrivals {
            tokio::task::yield_now().await;
        }
        tokio::time::advance(latency).await;
        let r = response.await.expect("the resolve task").expect("served");
        let (start, end) = (r.timings.start.expect("start"), r.timings.end.expect("end"));
        assert_eq!(end.0 - start.0, 80_000_000, "{format}");
        assert_pooled(&r, format);
        b.shutdown().await.expect("shutdown");
    }
}
