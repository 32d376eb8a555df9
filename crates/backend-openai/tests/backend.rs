//! The `openai_http` backend against the in-process mock server on loopback.
//! Tests of measured times run the client and the server on one runtime
//! whose paused clock moves only when the test moves it (see `common`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{
    ChatMessage, ContentPart, FinishReason, GenerationRequest, MediaSource, RequestInput,
};
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig};
use guidebench_openai::{OpenAiConfig, OpenAiError, OpenAiHttpBackend, RequestFormat, error_label};

use common::{HeldClock, StreamEvents, resolve_in_lockstep};

async fn server(config: MockServerConfig) -> MockServer {
    MockServer::start(config).await.expect("mock server starts")
}

async fn backend(server: &MockServer, tweak: impl FnOnce(&mut OpenAiConfig)) -> OpenAiHttpBackend {
    let mut config = OpenAiConfig::new(&server.url()).expect("config");
    tweak(&mut config);
    let backend = OpenAiHttpBackend::new(config);
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

async fn failure(backend: &OpenAiHttpBackend, tokens: u32) -> guidebench_core::Error {
    backend
        .resolve(request(1, tokens))
        .await
        .expect_err("the request must fail")
}

#[tokio::test]
async fn a_streamed_chat_request_returns_its_text_usage_and_one_timestamp_per_token() {
    let mock = server(MockServerConfig::default()).await;
    let b = backend(&mock, |_| {}).await;
    let r = b.resolve(request(7, 5)).await.expect("served");
    assert_eq!(r.id, 7);
    assert_eq!(r.text, " the quick brown fox jumps");
    assert_eq!(r.output_tokens, 5);
    assert_eq!(r.prompt_tokens, 5, "the mock counts whitespace words");
    assert_eq!(r.finish_reason, FinishReason::Length);
    assert_eq!(r.timings.tokens.len(), 5);
    assert!(r.timings.start <= r.timings.first_token());
    assert!(r.timings.last_token() <= r.timings.end);
    b.shutdown().await.expect("shutdown");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn non_streamed_chat_and_text_requests_report_the_usage_counts() {
    let mock = server(MockServerConfig::default()).await;
    for format in [RequestFormat::Chat, RequestFormat::Text] {
        let b = backend(&mock, |c| {
            c.stream = false;
            c.request_format = format;
        })
        .await;
        let r = b.resolve(request(1, 4)).await.expect("served");
        assert_eq!(r.text, " the quick brown fox", "{format:?}");
        assert_eq!((r.output_tokens, r.prompt_tokens), (4, 5), "{format:?}");
        assert_eq!(r.timings.tokens.len(), 4, "{format:?}");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test]
async fn the_text_format_streams_from_the_completions_endpoint() {
    let mock = server(MockServerConfig {
        record_requests: true,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, |c| c.request_format = RequestFormat::Text).await;
    let r = b.resolve(request(1, 3)).await.expect("served");
    assert_eq!((r.text.as_str(), r.output_tokens), (" the quick brown", 3));
    let recorded = mock.recorded();
    assert_eq!(recorded[0].path, "/v1/completions");
    assert_eq!(recorded[0].body["prompt"], "one two three four five");
}

#[tokio::test]
async fn an_output_length_below_max_tokens_finishes_at_eos() {
    let mock = server(MockServerConfig {
        output_tokens: Some(3),
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, |_| {}).await;
    let r = b.resolve(request(1, 10)).await.expect("served");
    assert_eq!((r.output_tokens, r.finish_reason), (3, FinishReason::Eos));
}

/// A server whose stream the test writes one chunk at a time, on a clock
/// the test moves: see [`events_carrying_several_tokens_are_counted_from_usage_and_share_their_gap`].
mod scripted {
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use hyper::body::Frame;
    use hyper::header::CONTENT_TYPE;
    use hyper::service::service_fn;
    use hyper::{Request, Response};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio::sync::mpsc;

    /// A chunk this large fills far more than what HTTP/2 flow control lets
    /// the server have in flight: the stream's window (2 MiB for reqwest's
    /// client) plus the server's send buffer (400 KiB). So the server can
    /// only send a chunk after it once the client has consumed most of it,
    /// and with it the event at its start. 8 MiB of SSE comment lines.
    pub const PADDING: usize = 8 << 20;

    /// The body of the one response: chunks as the test sends them; each
    /// time the server asks for the next one, the test hears its number.
    struct Chunks {
        chunks: mpsc::UnboundedReceiver<Bytes>,
        asked: mpsc::UnboundedSender<usize>,
        sent: usize,
        told: bool,
    }

    impl hyper::body::Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            let this = self.get_mut();
            if !this.told {
                this.told = true;
                let _ = this.asked.send(this.sent);
            }
            match this.chunks.poll_recv(cx) {
                Poll::Ready(Some(chunk)) => {
                    this.sent += 1;
                    this.told = false;
                    Poll::Ready(Some(Ok(Frame::data(chunk))))
                }
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        }
    }

    /// An HTTP/2 (prior knowledge) server on loopback that answers one
    /// request with an event stream the test writes.
    pub struct Server {
        pub addr: SocketAddr,
        chunks: Option<mpsc::UnboundedSender<Bytes>>,
        asked: mpsc::UnboundedReceiver<usize>,
        /// Chunks handed to the server so far.
        sent: usize,
    }

    impl Server {
        pub async fn start() -> Server {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind loopback");
            let addr = listener.local_addr().expect("address");
            let (chunks_tx, chunks_rx) = mpsc::unbounded_channel();
            let (asked_tx, asked_rx) = mpsc::unbounded_channel();
            tokio::spawn(async move {
                let (stream, _) = listener.accept().await.expect("the client connects");
                let body = std::sync::Mutex::new(Some(Chunks {
                    chunks: chunks_rx,
                    asked: asked_tx,
                    sent: 0,
                    told: false,
                }));
                let service = service_fn(move |_request: Request<hyper::body::Incoming>| {
                    let body = body
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .take()
                        .expect("one request");
                    async move {
                        let mut response = Response::new(body);
                        response.headers_mut().insert(
                            CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static("text/event-stream"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
            Server {
                addr,
                chunks: Some(chunks_tx),
                asked: asked_rx,
                sent: 0,
            }
        }

        /// Waits until the server asks for the next chunk.
        async fn asked(&mut self) {
            loop {
                let asked = self.asked.recv().await.expect("the response is open");
                if asked == self.sent {
                    return;
                }
            }
        }

        /// Waits until the response has begun: its headers are out.
        pub async fn started(&mut self) {
            self.asked().await;
        }

        /// Hands the server the next chunk of the stream.
        pub fn send(&mut self, chunk: String) {
            self.chunks
                .as_ref()
                .expect("the stream is open")
                .send(Bytes::from(chunk))
                .expect("the response is open");
            self.sent += 1;
        }

        /// Hands the server `chunk` (of at least [`PADDING`] bytes) and
        /// waits until the client has read its start. The server takes the
        /// chunk after it (a comment line) at once, but asks for the one
        /// after that only once it could send the comment, which flow
        /// control allows only once the client consumed most of `chunk`.
        pub async fn send_and_wait_until_read(&mut self, chunk: String) {
            assert!(chunk.len() >= PADDING);
            self.send(chunk);
            self.send(": read?\n".to_owned());
            self.asked().await;
        }

        /// Ends the stream.
        pub fn end(&mut self) {
            self.chunks.take();
        }
    }

    /// One chat chunk carrying `content`.
    pub fn content(content: &str, finish: Option<&str>) -> String {
        let finish = finish.map_or("null".to_owned(), |f| format!("\"{f}\""));
        format!(
            "data: {{\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\
             \"delta\":{{\"content\":\"{content}\"}},\"finish_reason\":{finish}}}]}}\n\n"
        )
    }

    /// [`PADDING`] bytes of SSE comment lines, which carry no event.
    pub fn padding() -> String {
        let line = format!(": {}\n", "x".repeat(1021));
        line.repeat(PADDING / line.len())
    }
}

/// The client stamps each event with the instant it read it. Here the
/// test moves the clock only once the client has read the event before
/// (HTTP/2 flow control tells, see [`scripted::PADDING`]),
/// and the test moves tokio's paused clock (whose auto-advance a blocking
/// task holds off) between events: the events arrive exactly 25, 65 and
/// 75 ms after the request was sent, whatever the machine's load.
#[tokio::test(start_paused = true)]
async fn events_carrying_several_tokens_are_counted_from_usage_and_share_their_gap() {
    let (hold, held) = std::sync::mpsc::channel::<()>();
    // While a blocking task runs, paused time moves only when told to.
    let manual_clock = tokio::task::spawn_blocking(move || held.recv());
    let mut server = scripted::Server::start().await;
    let mut config = OpenAiConfig::new(&format!("http://{}", server.addr)).expect("config");
    config.http2 = true;
    config.model = Some("scripted".into());
    let b = Arc::new(OpenAiHttpBackend::new(config));
    b.startup().await.expect("startup");
    let client = Arc::clone(&b);
    let response = tokio::spawn(async move { client.resolve(request(1, 9)).await });

    // Events of 4, 4 and 1 five-byte tokens (the usage's 9 tokens are
    // shared out in proportion to their text), 25 ms, then 40 ms (4 × 10),
    // then 10 ms apart.
    server.started().await;
    tokio::time::advance(Duration::from_millis(25)).await;
    server
        .send_and_wait_until_read(
            "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":\
             {\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
                .to_owned()
                + &scripted::content(" aaaa bbbb cccc dddd", None)
                + &scripted::padding(),
        )
        .await;
    tokio::time::advance(Duration::from_millis(40)).await;
    server
        .send_and_wait_until_read(
            scripted::content(" eeee ffff gggg hhhh", None) + &scripted::padding(),
        )
        .await;
    tokio::time::advance(Duration::from_millis(10)).await;
    server.send(
        scripted::content(" iiii", Some("length"))
            + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}\n\n\
               data: [DONE]\n\n",
    );
    server.end();
    let r = response.await.expect("resolve task").expect("served");
    drop(hold);
    manual_clock.await.expect("the blocking task ends").ok();

    // Usage says 9 tokens, not the 3 events.
    assert_eq!(r.output_tokens, 9);
    assert_eq!(r.timings.tokens.len(), 9);
    assert_eq!(r.text, " aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii");
    assert_eq!(r.finish_reason, FinishReason::Length);
    // The first event's 4 tokens share its instant, 25 ms after the send;
    // the second event's 4 share its 40 ms gap; the last has its own 10 ms.
    let ttft = r.timings.ttft().expect("ttft");
    assert!((ttft - 0.025).abs() < 1e-9, "ttft {ttft}");
    let gaps_ns: Vec<i64> = r
        .timings
        .tokens
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .collect();
    let expected_ms = [0, 0, 0, 10, 10, 10, 10, 10];
    for (i, (&gap, ms)) in gaps_ns.iter().zip(expected_ms).enumerate() {
        // Splitting 40 ms in four rounds to the nanosecond at most.
        assert!(
            (gap - ms * 1_000_000).abs() <= 1,
            "gap {i} is {gap} ns, not {ms} ms: {gaps_ns:?}"
        );
    }
    let latency = r.timings.latency().expect("latency");
    assert!((latency - 0.075).abs() < 1e-9, "latency {latency}");
}

/// The mock server's events of one token each, the first after `ttft`,
/// then `itl` apart: when each is due after the request's arrival.
fn event_offsets(ttft: Duration, itl: Duration, tokens: u32) -> Vec<Duration> {
    (0..tokens).map(|k| ttft + itl * k).collect()
}

/// A mock server on tokio's timer, for a test that holds the clock.
async fn lockstep_server(config: MockServerConfig) -> MockServer {
    server(MockServerConfig {
        tokio_timer: true,
        ..config
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn reasoning_deltas_count_towards_ttft_and_output_tokens_but_not_the_text() {
    let _clock = HeldClock::hold();
    let mut events = StreamEvents::count();
    let itl = Duration::from_millis(20);
    let mock = lockstep_server(MockServerConfig {
        reasoning_tokens: 3,
        itl,
        ..MockServerConfig::default()
    })
    .await;
    let b = Arc::new(backend(&mock, |_| {}).await);
    let offsets = event_offsets(Duration::ZERO, itl, 6);
    let r = resolve_in_lockstep(&mock, &b, request(1, 6), &offsets, &mut events)
        .await
        .expect("served");
    assert_eq!(r.output_tokens, 6);
    assert_eq!(r.timings.tokens.len(), 6);
    assert_eq!(r.text, " fox jumps over", "only content is kept as text");
    // The first token is the first reasoning delta, sent without delay;
    // content starts after three 20 ms gaps.
    let ttft = r.timings.ttft().expect("ttft");
    assert!(ttft.abs() < 1e-9, "ttft {ttft}");
}

#[tokio::test]
async fn an_error_status_fails_that_request_with_the_server_message_and_the_run_goes_on() {
    let mock = server(MockServerConfig {
        error_after: Some(1),
        error_status: 503,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, |_| {}).await;
    b.resolve(request(1, 2)).await.expect("the first is served");
    let err = failure(&b, 2).await;
    assert_eq!(
        err.label(),
        "http_status",
        "core reports the backend's own label"
    );
    assert_eq!(error_label(&err), "http_status");
    let message = err.to_string();
    assert!(message.contains("503"), "{message}");
    assert!(message.contains("injected error"), "{message}");
    assert!(
        message.contains(&format!("{}/v1/chat/completions", mock.url())),
        "{message}"
    );
    let again = failure(&b, 2).await;
    assert_eq!(error_label(&again), "http_status");
}

#[tokio::test]
async fn malformed_json_fails_with_malformed_response_streamed_or_not() {
    let mock = server(MockServerConfig {
        malformed_rate: 1.0,
        ..MockServerConfig::default()
    })
    .await;
    for stream in [true, false] {
        let b = backend(&mock, |c| c.stream = stream).await;
        let err = failure(&b, 4).await;
        assert_eq!(
            error_label(&err),
            "malformed_response",
            "stream={stream}: {err}"
        );
    }
}

#[tokio::test]
async fn a_stream_ending_without_done_fails_with_stream_truncated() {
    let mock = server(MockServerConfig {
        truncate_rate: 1.0,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, |_| {}).await;
    let err = failure(&b, 8).await;
    assert_eq!(error_label(&err), "stream_truncated", "{err}");
    assert!(err.to_string().contains("after 4 events"), "{err}");
}

/// On a clock that moves only when the test moves it, a millisecond at a
/// time: the stalled request fails with a timeout exactly when its 200 ms
/// are up, not before, and does not hang.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_fails_with_timeout_instead_of_hanging() {
    let _clock = HeldClock::hold();
    let mock = server(MockServerConfig {
        stall_rate: 1.0,
        ..MockServerConfig::default()
    })
    .await;
    let limit = Duration::from_millis(200);
    for stream in [true, false] {
        let b = Arc::new(
            backend(&mock, |c| {
                c.stream = stream;
                c.timeout = limit;
            })
            .await,
        );
        let arrivals = mock.stats().requests;
        let started = tokio::time::Instant::now();
        let client = Arc::clone(&b);
        let request = tokio::spawn(async move {
            let err = failure(&client, 8).await;
            (err, tokio::time::Instant::now())
        });
        while mock.stats().requests == arrivals {
            tokio::task::yield_now().await;
        }
        // Each step lets the request run before the next (a yield runs
        // the tasks its timers woke).
        for _ in 0..1_000 {
            if request.is_finished() {
                break;
            }
            tokio::time::advance(Duration::from_millis(1)).await;
            tokio::task::yield_now().await;
        }
        let (err, failed_at) = request.await.expect("the request task");
        assert_eq!(error_label(&err), "timeout", "stream={stream}: {err}");
        assert_eq!(failed_at - started, limit, "stream={stream}");
    }
}

#[tokio::test]
async fn a_reset_connection_fails_with_connection_streamed_or_not() {
    let mock = server(MockServerConfig {
        reset_rate: 1.0,
        ..MockServerConfig::default()
    })
    .await;
    for stream in [true, false] {
        let b = backend(&mock, |c| c.stream = stream).await;
        let err = failure(&b, 8).await;
        assert_eq!(error_label(&err), "connection", "stream={stream}: {err}");
    }
}

#[tokio::test]
async fn an_error_event_inside_a_stream_fails_with_server_error() {
    // A one-off server that answers an SSE error event.
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
        let body = "data: {\"error\":{\"message\":\"out of memory\"}}\n\n";
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(response.as_bytes()).await.expect("write");
    });
    let mut config = OpenAiConfig::new(&format!("http://{addr}/v1")).expect("config");
    config.model = Some("m".into());
    let b = OpenAiHttpBackend::new(config);
    b.startup().await.expect("startup");
    let err = failure(&b, 2).await;
    assert_eq!(error_label(&err), "server_error");
    assert!(err.to_string().contains("out of memory"), "{err}");
    task.await.expect("server task");
}

#[tokio::test]
async fn shutdown_cancels_requests_still_in_flight_after_the_drain_timeout() {
    let mock = server(MockServerConfig {
        stall_rate: 1.0,
        ..MockServerConfig::default()
    })
    .await;
    let b = Arc::new(
        backend(&mock, |c| {
            c.drain_timeout = Duration::from_millis(50);
            c.model = Some("mock-model".into());
        })
        .await,
    );
    let in_flight = {
        let b = b.clone();
        tokio::spawn(async move { b.resolve(request(1, 8)).await })
    };
    // Wait until the server has the request (no sleeps as synchronisation).
    while mock.stats().requests == 0 {
        tokio::task::yield_now().await;
    }
    tokio::time::timeout(Duration::from_secs(5), b.shutdown())
        .await
        .expect("shutdown does not hang")
        .expect("shutdown");
    let err = in_flight
        .await
        .expect("task")
        .expect_err("cancelled at shutdown");
    assert_eq!(err.label(), "shutting_down");
    let err = b.resolve(request(2, 1)).await.expect_err("stopped");
    assert_eq!(err.label(), "not_started");
    // A fresh start works again.
    b.startup().await.expect("restart");
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn shutdown_lets_requests_in_flight_finish_within_the_drain_timeout() {
    let mock = server(MockServerConfig {
        itl: Duration::from_millis(5),
        ..MockServerConfig::default()
    })
    .await;
    let b = Arc::new(backend(&mock, |c| c.model = Some("mock-model".into())).await);
    let in_flight = {
        let b = b.clone();
        tokio::spawn(async move { b.resolve(request(1, 10)).await })
    };
    while mock.stats().requests == 0 {
        tokio::task::yield_now().await;
    }
    b.shutdown().await.expect("shutdown");
    let r = in_flight.await.expect("task").expect("finished");
    assert_eq!(r.output_tokens, 10);
}

#[tokio::test]
async fn a_request_before_startup_is_refused() {
    let b = OpenAiHttpBackend::new(OpenAiConfig::new("http://127.0.0.1:9").expect("config"));
    let err = b.resolve(request(1, 1)).await.expect_err("not started");
    assert_eq!(err.label(), "not_started");
}

#[tokio::test]
async fn validate_fails_with_a_message_naming_the_url_when_nothing_listens() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let b = OpenAiHttpBackend::new(OpenAiConfig::new(&format!("http://{addr}")).expect("config"));
    b.startup().await.expect("startup");
    let err = b.validate().await.expect_err("nothing listens");
    assert_eq!(error_label(&err), "unreachable");
    let message = err.to_string();
    assert!(
        message.contains(&format!("http://{addr}/health")),
        "{message}"
    );
    assert!(
        matches!(
            OpenAiError::from_core(&err),
            Some(OpenAiError::NotReady { .. })
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn validate_picks_the_first_listed_model_and_reports_it() {
    let mock = server(MockServerConfig {
        model: "served-model".into(),
        record_requests: true,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, |_| {}).await;
    let report = b.validate().await.expect("ready");
    assert_eq!(report.info["model"], "served-model");
    assert_eq!(report.load_time, None);
    b.resolve(request(1, 1)).await.expect("served");
    assert_eq!(mock.recorded()[0].body["model"], "served-model");
}

#[tokio::test]
async fn with_a_model_given_validate_never_lists_the_models() {
    let mock = server(MockServerConfig {
        record_requests: true,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, |c| c.model = Some("asked-for".into())).await;
    let report = b.validate().await.expect("ready");
    assert_eq!(report.info["model"], "asked-for");
    b.resolve(request(1, 1)).await.expect("served");
    let stats = mock.stats();
    assert_eq!(stats.model_listings, 0, "model= given: no GET /v1/models");
    assert_eq!(stats.health_checks, 1);
    assert_eq!(mock.recorded()[0].body["model"], "asked-for");
}

#[tokio::test]
async fn validate_false_sends_nothing_before_the_run_and_guidellm_spellings_are_accepted() {
    let mock = server(MockServerConfig::default()).await;
    // GuideLLM 0.8.1 writes validate_backend, timeout_connect and the
    // endpoint's path as the request format.
    let args = parse_kind_args(&format!(
        "kind=openai_http,target={},model=m,validate_backend=false,timeout_connect=2s,\
         request_format=/v1/completions",
        mock.url()
    ))
    .expect("parse");
    let config = OpenAiConfig::from_args(args).expect("GuideLLM's spellings are accepted");
    assert!(!config.validate);
    assert_eq!(config.request_format, RequestFormat::Text);
    assert_eq!(config.connect_timeout, Duration::from_secs(2));
    let b = OpenAiHttpBackend::new(config);
    b.startup().await.expect("startup");
    let report = b.validate().await.expect("ready without asking the server");
    assert_eq!(report.info["validated"], false);
    let stats = mock.stats();
    assert_eq!((stats.health_checks, stats.model_listings), (0, 0));
    b.resolve(request(1, 2)).await.expect("served");
    // Without a model, the models are listed once, before the run.
    let b = backend(&mock, |c| c.validate = false).await;
    b.validate().await.expect("ready");
    let stats = mock.stats();
    assert_eq!((stats.health_checks, stats.model_listings), (0, 1));
}

#[tokio::test]
async fn an_error_status_is_recorded_with_its_status_and_the_servers_message_once() {
    let mock = server(MockServerConfig {
        error_rate: 1.0,
        error_status: 503,
        error_message: "model overloaded\nretry later".into(),
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, |_| {}).await;
    let err = failure(&b, 2).await;
    let ts = guidebench_core::clock::Timestamp(0);
    let record = guidebench_core::request::RequestRecord::error(1, &err, ts, ts);
    let detail = record.error.expect("error detail");
    assert_eq!(detail.label, "http_status");
    assert_eq!(detail.status, Some(503));
    assert_eq!(detail.server_message.as_deref(), Some("model overloaded"));
    // The message, with its causes as a log or the command line prints
    // them, says it once.
    let mut chain = vec![err.to_string()];
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        chain.push(c.to_string());
        cause = c.source();
    }
    let chain = chain.join(": ");
    assert_eq!(chain.matches("model overloaded").count(), 1, "{chain}");
}

#[tokio::test]
async fn an_html_error_page_is_reduced_to_its_title() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 4096];
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("\r\n\r\n{") {
            let n = socket.read(&mut buf).await.expect("read");
            seen.extend_from_slice(&buf[..n]);
        }
        let body = "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title>\
                    <style>body { color: red }</style></head>\n<body><center><h1>502 Bad \
                    Gateway</h1></center><hr><center>nginx/1.25.3</center>\n</body></html>\n";
        let response = format!(
            "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(response.as_bytes()).await.expect("write");
    });
    let mut config = OpenAiConfig::new(&format!("http://{addr}")).expect("config");
    config.model = Some("m".into());
    let b = OpenAiHttpBackend::new(config);
    b.startup().await.expect("startup");
    let err = failure(&b, 2).await;
    let message = err.to_string();
    assert!(
        message.ends_with("answered HTTP 502: 502 Bad Gateway"),
        "{message}"
    );
    assert!(!message.contains('<'), "{message}");
    let (status, server_message) = err.server_answer();
    assert_eq!(status, Some(502));
    assert_eq!(server_message, Some("502 Bad Gateway"));
    task.await.expect("server task");
}

#[tokio::test]
async fn requests_carry_ignore_eos_the_api_key_headers_and_extra_body() {
    let mock = server(MockServerConfig {
        record_requests: true,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, |c| {
        c.api_key = Some("secret".into());
        c.headers.push(("x-tenant".into(), "bench".into()));
        c.extra_body.insert("priority".into(), serde_json::json!(2));
    })
    .await;
    let messages = vec![ChatMessage {
        role: "user".into(),
        tool: None,
        content: vec![
            ContentPart::text("what is this?"),
            ContentPart::Image {
                source: MediaSource::Url("data:image/png;base64,AAAA".into()),
            },
        ],
    }];
    let chat = GenerationRequest::new(
        1,
        RequestInput::Chat(messages),
        Sampling::fixed_length(2).expect("valid"),
    );
    let r = b.resolve(chat).await.expect("served");
    assert_eq!(r.prompt_tokens, 3);
    let recorded = mock.recorded();
    let sent = &recorded[0];
    let header = |name: &str| {
        sent.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("authorization"), Some("Bearer secret"));
    assert_eq!(header("x-tenant"), Some("bench"));
    assert_eq!(sent.body["ignore_eos"], true);
    assert_eq!(sent.body["max_tokens"], 2);
    assert_eq!(sent.body["priority"], 2);
    assert_eq!(sent.body["stream_options"]["include_usage"], true);
    assert_eq!(
        sent.body["messages"][0]["content"][1]["image_url"]["url"],
        "data:image/png;base64,AAAA"
    );
}

#[tokio::test]
async fn image_bytes_reach_the_server_as_a_base64_data_url_before_the_text() {
    use base64::Engine as _;
    let mock = server(MockServerConfig {
        record_requests: true,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock, |_| {}).await;
    // As `--data kind=synthetic_image` makes them: images, then the text.
    let jpeg: Arc<[u8]> = Arc::from(&[0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, b'J', b'F'][..]);
    let png: Arc<[u8]> = Arc::from(&b"\x89PNG\r\n\x1a\n"[..]);
    let messages = vec![ChatMessage {
        role: "user".into(),
        tool: None,
        content: vec![
            ContentPart::Image {
                source: MediaSource::Bytes {
                    mime: "image/jpeg".into(),
                    data: Arc::clone(&jpeg),
                },
            },
            ContentPart::Image {
                source: MediaSource::Bytes {
                    mime: "image/png".into(),
                    data: Arc::clone(&png),
                },
            },
            ContentPart::text("Describe the image."),
        ],
    }];
    let chat = GenerationRequest::new(
        1,
        RequestInput::Chat(messages),
        Sampling::fixed_length(2).expect("valid"),
    );
    b.resolve(chat).await.expect("served");
    let recorded = mock.recorded();
    let parts = &recorded[0].body["messages"][0]["content"];
    for (i, (mime, data)) in [("image/jpeg", &jpeg), ("image/png", &png)]
        .into_iter()
        .enumerate()
    {
        assert_eq!(parts[i]["type"], "image_url", "{parts}");
        let url = parts[i]["image_url"]["url"].as_str().expect("a URL");
        let encoded = url
            .strip_prefix(&format!("data:{mime};base64,"))
            .unwrap_or_else(|| panic!("a {mime} data URL, got {url}"));
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .expect("base64");
        assert_eq!(decoded, data.as_ref());
    }
    assert_eq!(
        parts[2],
        serde_json::json!({"type": "text", "text": "Describe the image."})
    );
}

#[tokio::test]
async fn the_registered_kind_is_created_from_its_arguments() {
    let mock = server(MockServerConfig::default()).await;
    let args = parse_kind_args(&format!(
        "kind=openai_http,target={}/v1,stream=false",
        mock.url()
    ))
    .expect("parse");
    let b = guidebench_core::registry::create_backend(args).expect("registered");
    assert_eq!(b.kind(), "openai_http");
    b.startup().await.expect("startup");
    b.validate().await.expect("ready");
    let r = b.resolve(request(1, 3)).await.expect("served");
    assert_eq!(r.output_tokens, 3);
    b.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn http2_requests_are_served_over_one_connection() {
    let mock = server(MockServerConfig::default()).await;
    let b = Arc::new(backend(&mock, |c| c.http2 = true).await);
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let b = b.clone();
            tokio::spawn(async move { b.resolve(request(i, 4)).await })
        })
        .collect();
    for h in handles {
        assert_eq!(h.await.expect("task").expect("served").output_tokens, 4);
    }
    assert_eq!(mock.stats().connections, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_the_connection_pool() {
    let mock = server(MockServerConfig::default()).await;
    let b = Arc::new(backend(&mock, |_| {}).await);
    for round in 0..3 {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let b = b.clone();
                tokio::spawn(async move { b.resolve(request(round * 100 + i, 8)).await })
            })
            .collect();
        for h in handles {
            h.await.expect("task").expect("served");
        }
    }
    let stats = mock.stats();
    assert_eq!(stats.requests, 96);
    // Without a pool every request opens its own connection (96). A
    // connection goes back to the pool on a task of its own once its
    // answer is read, so a round that starts at once can find one not
    // back yet and open another (33 seen once on a loaded 2-core
    // machine): fewer than two rounds' worth still shows the later rounds
    // reusing the first round's connections.
    assert!(stats.connections < 64, "{stats:?}");
}

/// On a clock that moves only to the server's planned instants, and only
/// once the client has read what was due before: the measured TTFT and
/// every inter-token gap are exactly the configured ones.
#[tokio::test(start_paused = true)]
async fn measured_ttft_and_itl_match_the_mock_configuration() {
    let _clock = HeldClock::hold();
    let mut events = StreamEvents::count();
    let (ttft, itl) = (Duration::from_millis(80), Duration::from_millis(15));
    let mock = lockstep_server(MockServerConfig {
        ttft,
        itl,
        ..MockServerConfig::default()
    })
    .await;
    for format in [RequestFormat::Chat, RequestFormat::Text] {
        let b = Arc::new(
            backend(&mock, |c| {
                c.model = Some("mock-model".into());
                c.request_format = format;
            })
            .await,
        );
        let offsets = event_offsets(ttft, itl, 12);
        let r = resolve_in_lockstep(&mock, &b, request(1, 12), &offsets, &mut events)
            .await
            .expect("served");
        assert_eq!(r.timings.tokens.len(), 12);
        let measured_ttft = r.timings.ttft().expect("ttft");
        let measured_itl = r.timings.itl_mean().expect("itl");
        assert!(
            (measured_ttft - 0.080).abs() < 1e-9,
            "{format:?}: ttft {measured_ttft} s"
        );
        assert!(
            (measured_itl - 0.015).abs() < 1e-9,
            "{format:?}: itl {measured_itl} s"
        );
        let gaps_ns: Vec<i64> = r
            .timings
            .tokens
            .windows(2)
            .map(|w| w[1].0 - w[0].0)
            .collect();
        assert_eq!(gaps_ns, vec![15_000_000; 11], "{format:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_reasoning_response_records_its_first_answer_token_and_its_reasoning_tokens() {
    let _clock = HeldClock::hold();
    let mut events = StreamEvents::count();
    let itl = Duration::from_millis(20);
    let mock = lockstep_server(MockServerConfig {
        reasoning_tokens: 3,
        itl,
        ..MockServerConfig::default()
    })
    .await;
    let b = Arc::new(backend(&mock, |_| {}).await);
    let offsets = event_offsets(Duration::ZERO, itl, 6);
    let r = resolve_in_lockstep(&mock, &b, request(1, 6), &offsets, &mut events)
        .await
        .expect("served");
    // Three reasoning deltas, then the answer: its first token is the
    // fourth, and the time to it is the time to first output token, three
    // 20 ms gaps after the first token.
    assert_eq!(r.timings.first_content, Some(r.timings.tokens[3]));
    assert_eq!(r.timings.reasoning_tokens, Some(3));
    let ttft = r.timings.ttft().expect("ttft");
    let ttfot = r.timings.ttfot().expect("ttfot");
    assert!(
        (ttfot - ttft - 0.060).abs() < 1e-9,
        "ttft {ttft}, ttfot {ttfot}"
    );

    // Without reasoning, neither is recorded.
    let plain = server(MockServerConfig::default()).await;
    let b = backend(&plain, |_| {}).await;
    let r = b.resolve(request(2, 4)).await.expect("served");
    assert_eq!(r.timings.first_content, None);
    assert_eq!(r.timings.reasoning_tokens, None);
    assert_eq!(r.timings.ttfot(), None);
}
