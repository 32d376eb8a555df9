//! Connection reuse against servers that limit keep-alive, as llama.cpp's
//! `llama-server` does (`Keep-Alive: timeout=5, max=100`), on loopback.
//! The tests of idle timeouts run the client and the server on one runtime
//! whose paused clock moves only when the test moves it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::request::{GenerationRequest, GenerationResponse};
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig};
use guidebench_openai::{OpenAiConfig, OpenAiHttpBackend};

use common::HeldClock;

async fn backend(server: &MockServer) -> Arc<OpenAiHttpBackend> {
    let backend = OpenAiHttpBackend::new(OpenAiConfig::new(&server.url()).expect("config"));
    backend.startup().await.expect("startup");
    Arc::new(backend)
}

fn request(id: u64) -> GenerationRequest {
    GenerationRequest::text(
        id,
        "one two three",
        Sampling::fixed_length(4).expect("valid"),
    )
}

/// `streams` tasks each sending `per_stream` requests one after the other
/// (the `concurrent` profile); every outcome, in no particular order.
async fn concurrent(
    backend: &Arc<OpenAiHttpBackend>,
    streams: u64,
    per_stream: u64,
    first_id: u64,
) -> Vec<guidebench_core::Result<GenerationResponse>> {
    let tasks: Vec<_> = (0..streams)
        .map(|stream| {
            let backend = backend.clone();
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for i in 0..per_stream {
                    let id = first_id + stream * per_stream + i;
                    outcomes.push(backend.resolve(request(id)).await);
                }
                outcomes
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.extend(task.await.expect("task"));
    }
    outcomes
}

fn errors(outcomes: &[guidebench_core::Result<GenerationResponse>]) -> Vec<String> {
    outcomes
        .iter()
        .filter_map(|o| o.as_ref().err().map(ToString::to_string))
        .collect()
}

/// The server closes every connection after its second request without
/// saying so: the third request sent on a pooled connection always finds it
/// closed, as a request does that crosses a server's idle close. Nothing
/// here depends on timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_find_their_pooled_connection_closed_are_retried_once_and_never_fail() {
    let mock = MockServer::start(MockServerConfig {
        itl: Duration::from_millis(1),
        keep_alive_max: Some(2),
        announce_keep_alive: false,
        ..MockServerConfig::default()
    })
    .await
    .expect("mock server");
    let b = backend(&mock).await;
    let outcomes = concurrent(&b, 8, 8, 0).await;
    let stats = mock.stats();
    assert_eq!(errors(&outcomes), Vec::<String>::new(), "{stats:?}");
    assert!(
        stats.closed_unanswered > 0,
        "reuse was never tried: {stats:?}"
    );
    // The server answered each request exactly once.
    assert_eq!((stats.requests, stats.completed), (64, 64), "{stats:?}");
    let retries: u64 = outcomes
        .iter()
        .map(|o| u64::from(o.as_ref().expect("served").timings.retries))
        .sum();
    assert_eq!(retries, stats.closed_unanswered, "{stats:?}");
    b.shutdown().await.expect("shutdown");
}

/// llama.cpp's behaviour: `Keep-Alive: timeout=1, max=3` on every response,
/// `Connection: close` on a connection's third.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_request_limit_is_honoured_without_retries() {
    let mock = MockServer::start(MockServerConfig {
        itl: Duration::from_millis(1),
        keep_alive_timeout: Some(Duration::from_secs(1)),
        keep_alive_max: Some(3),
        ..MockServerConfig::default()
    })
    .await
    .expect("mock server");
    let b = backend(&mock).await;
    let outcomes = concurrent(&b, 8, 8, 0).await;
    let stats = mock.stats();
    assert_eq!(errors(&outcomes), Vec::<String>::new(), "{stats:?}");
    assert_eq!(stats.closed_unanswered, 0, "{stats:?}");
    assert!(stats.connections >= 64 / 3, "{stats:?}");
    assert!(
        outcomes
            .iter()
            .all(|o| o.as_ref().is_ok_and(|r| r.timings.retries == 0))
    );
    b.shutdown().await.expect("shutdown");
}

/// A server announcing `Keep-Alive: timeout=1` and answering at once, with
/// a client that has heard it (the pool then keeps connections idle for
/// half of it, 500 ms), and a wave of 8 concurrent requests behind it; on
/// paused time that moves only when the test moves it. Returns the server,
/// the backend, the outcomes so far, and the clock's hold.
async fn after_a_wave_of_eight() -> (
    MockServer,
    Arc<OpenAiHttpBackend>,
    Vec<guidebench_core::Result<GenerationResponse>>,
    HeldClock,
) {
    let clock = HeldClock::hold();
    let mock = MockServer::start(MockServerConfig {
        keep_alive_timeout: Some(Duration::from_secs(1)),
        ..MockServerConfig::default()
    })
    .await
    .expect("mock server");
    let b = backend(&mock).await;
    // The first answer announces the timeout.
    let mut all = vec![b.resolve(request(1000)).await];
    all.extend(concurrent(&b, 8, 1, 0).await);
    (mock, b, all, clock)
}

/// Idle connections are evicted before the announced timeout: after a
/// pause shorter than the server's 1 s, but longer than the client keeps
/// connections idle for such a server (half of it), a wave of requests opens
/// new connections instead of reusing ones the server is about to close.
#[tokio::test(start_paused = true)]
async fn idle_connections_are_evicted_before_the_announced_timeout() {
    let (mock, b, mut all, _clock) = after_a_wave_of_eight().await;
    let before = mock.stats().connections;
    tokio::time::advance(Duration::from_millis(750)).await;
    all.extend(concurrent(&b, 8, 1, 100).await);
    let stats = mock.stats();
    assert_eq!(errors(&all), Vec::<String>::new(), "{stats:?}");
    assert_eq!(stats.connections - before, 8, "{stats:?}");
    b.shutdown().await.expect("shutdown");
}

/// The other side of the same rule: after a pause shorter than the
/// client's idle timeout for that server, the wave reuses the connections
/// it has, and opens none.
#[tokio::test(start_paused = true)]
async fn idle_connections_are_reused_within_the_pools_idle_timeout() {
    let (mock, b, mut all, _clock) = after_a_wave_of_eight().await;
    let before = mock.stats().connections;
    tokio::time::advance(Duration::from_millis(250)).await;
    all.extend(concurrent(&b, 8, 1, 100).await);
    let stats = mock.stats();
    assert_eq!(errors(&all), Vec::<String>::new(), "{stats:?}");
    assert_eq!(stats.connections, before, "{stats:?}");
    b.shutdown().await.expect("shutdown");
}
