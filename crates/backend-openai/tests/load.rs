//! The mock server's latency that grows with load, on one runtime whose
//! paused clock moves only when the test moves it (see `common`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::request::GenerationRequest;
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig};
use guidebench_openai::{OpenAiConfig, OpenAiHttpBackend};
use tokio::time::Instant;

use common::{HeldClock, StreamEvents};

#[tokio::test(start_paused = true)]
async fn each_request_in_flight_adds_ttft_per_request_to_a_new_arrival() {
    let _clock = HeldClock::hold();
    let mut events = StreamEvents::count();
    let mock = MockServer::start(MockServerConfig {
        ttft: Duration::from_millis(100),
        ttft_per_request: Duration::from_millis(200),
        tokio_timer: true,
        ..MockServerConfig::default()
    })
    .await
    .expect("mock server starts");
    let backend = Arc::new(OpenAiHttpBackend::new(
        OpenAiConfig::new(&mock.url()).expect("config"),
    ));
    backend.startup().await.expect("startup");
    let sends: Vec<_> = (0..4)
        .map(|id| {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move {
                backend
                    .resolve(GenerationRequest::text(
                        id,
                        "one two three",
                        Sampling::fixed_length(2).expect("valid"),
                    ))
                    .await
            })
        })
        .collect();
    // All four arrive before the clock moves: the k-th arrival finds k
    // others in flight and waits 100 + k × 200 ms for its first token
    // (its second comes with it: no inter-token time).
    while mock.stats().requests < 4 {
        tokio::task::yield_now().await;
    }
    let arrived = Instant::now();
    for k in 1..=4u32 {
        let due = arrived + Duration::from_millis(100) + Duration::from_millis(200) * (k - 1);
        tokio::time::advance(due - Instant::now()).await;
        events.wait_for(2 * k as usize).await;
    }
    let mut ttft_ms = Vec::new();
    for send in sends {
        let response = send.await.expect("the request task").expect("served");
        ttft_ms.push(response.timings.ttft().expect("ttft") * 1e3);
    }
    ttft_ms.sort_by(f64::total_cmp);
    for (k, (ttft, want)) in ttft_ms.iter().zip([100.0, 300.0, 500.0, 700.0]).enumerate() {
        assert!(
            (ttft - want).abs() < 1e-6,
            "arrival {k}: {ttft} ms, not {want} ms: {ttft_ms:?}"
        );
    }
    backend.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}
