//! The mock server's latency that grows with load.

use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::request::GenerationRequest;
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig};
use guidebench_openai::{OpenAiConfig, OpenAiHttpBackend};

#[tokio::test]
async fn each_request_in_flight_adds_ttft_per_request_to_a_new_arrival() {
    let mock = MockServer::start(MockServerConfig {
        ttft: Duration::from_millis(100),
        ttft_per_request: Duration::from_millis(200),
        ..MockServerConfig::default()
    })
    .await
    .expect("mock server starts");
    let backend = OpenAiHttpBackend::new(OpenAiConfig::new(&mock.url()).expect("config"));
    backend.startup().await.expect("startup");
    let sends = (0..4).map(|id| {
        backend.resolve(GenerationRequest::text(
            id,
            "one two three",
            Sampling::fixed_length(2).expect("valid"),
        ))
    });
    let mut ttft_ms: Vec<f64> = futures::future::join_all(sends)
        .await
        .into_iter()
        .map(|r| r.expect("served").timings.ttft().expect("ttft") * 1e3)
        .collect();
    ttft_ms.sort_by(f64::total_cmp);
    // The requests overlap (each waits at least 100 ms): the k-th arrival
    // found k others in flight, at least 100 + k × 200 ms.
    for (k, ttft) in ttft_ms.iter().enumerate() {
        let floor = 100.0 + 200.0 * f64::from(u32::try_from(k).expect("few"));
        assert!(*ttft >= floor, "arrival {k}: {ttft} ms < {floor} ms");
    }
    assert!(
        ttft_ms[0] < 200.0,
        "the first arrival waits for no one: {ttft_ms:?}"
    );
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}
