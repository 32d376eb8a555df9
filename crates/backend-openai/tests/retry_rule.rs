//! The retry rule: a request is sent a second time only when its connection
//! closed before any answer arrived (the server never answered it), and
//! then only once. Every other failure reaches the server exactly once and
//! is reported as it happened.
//!
//! Each test counts what the server read: the mock server's
//! [`MockStats::requests`](guidebench_openai::mock_server::MockStats), or,
//! where the mock cannot misbehave that way, the requests a scripted
//! loopback server read in full. Both count a request before any byte of
//! its answer is written, so once the client has its outcome the count is
//! final. Nothing here waits on the wall clock: the one test about a
//! timeout moves tokio's paused clock itself, once the server has the
//! request.
//!
//! | case | test |
//! | ---- | ---- |
//! | HTTP 5xx | [`an_http_5xx_reaches_the_server_once_and_is_not_sent_again`] |
//! | refused connection | [`a_refused_connection_fails_at_the_first_send_and_is_not_sent_again`] |
//! | timeout | [`a_request_that_times_out_reaches_the_server_once_and_is_not_sent_again`] |
//! | reset after bytes arrived | [`a_connection_closed_after_the_answer_began_is_not_sent_again_streamed_or_not`] |
//! | malformed answer | [`a_malformed_answer_reaches_the_server_once_and_is_not_sent_again`], [`an_answer_that_is_not_http_reaches_the_server_once_and_is_not_sent_again`] |
//! | truncated stream | [`a_truncated_stream_reaches_the_server_once_and_is_not_sent_again`] |
//! | closed before any answer | [`a_request_whose_connection_closed_before_any_answer_is_sent_once_more_and_counted`] |
//! | ... and only once | [`a_request_whose_connections_all_close_unanswered_is_sent_twice_and_no_more`] |

use std::sync::Arc;
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::request::{GenerationRequest, GenerationResponse};
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig};
use guidebench_openai::{OpenAiConfig, OpenAiHttpBackend, error_label};

/// What the backend's message says when a request failed on its second send.
const SENT_AGAIN: &str = "again on a fresh connection";

async fn mock(config: MockServerConfig) -> MockServer {
    MockServer::start(config).await.expect("mock server starts")
}

/// A started backend for `url`, with the model set so that nothing but
/// completion requests reaches the server.
async fn backend(url: &str, tweak: impl FnOnce(&mut OpenAiConfig)) -> OpenAiHttpBackend {
    let mut config = OpenAiConfig::new(url).expect("config");
    config.model = Some("mock-model".into());
    tweak(&mut config);
    let backend = OpenAiHttpBackend::new(config);
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

/// The failure of one request, with its label and message.
async fn failure(backend: &OpenAiHttpBackend) -> guidebench_core::Error {
    backend
        .resolve(request(1))
        .await
        .expect_err("the request must fail")
}

/// Asserts a failure was reported from the first send, not from a second.
fn not_sent_again(err: &guidebench_core::Error, case: &str) {
    let message = err.to_string();
    assert!(
        !message.contains(SENT_AGAIN),
        "{case}: the request was sent again: {message}"
    );
}

/// A loopback HTTP/1.1 server written byte by byte, for what the mock
/// server does not do: it reads each request in full (head and
/// `content-length` body), counts it, writes what the script says for that
/// request's number (from 0, across connections) and closes the
/// connection; a script that says nothing closes it without a byte.
mod scripted {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    type Script = dyn Fn(u64) -> Option<String> + Send + Sync;

    pub struct Server {
        pub addr: SocketAddr,
        requests: Arc<AtomicU64>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Server {
        pub async fn start(script: impl Fn(u64) -> Option<String> + Send + Sync + 'static) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind loopback");
            let addr = listener.local_addr().expect("address");
            let requests = Arc::new(AtomicU64::new(0));
            let script: Arc<Script> = Arc::new(script);
            let counter = requests.clone();
            let task = tokio::spawn(async move {
                loop {
                    let Ok((socket, _)) = listener.accept().await else {
                        continue;
                    };
                    tokio::spawn(serve(socket, counter.clone(), script.clone()));
                }
            });
            Server {
                addr,
                requests,
                task,
            }
        }

        pub fn url(&self) -> String {
            format!("http://{}", self.addr)
        }

        /// Requests read in full so far.
        pub fn requests(&self) -> u64 {
            self.requests.load(Ordering::SeqCst)
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    async fn serve(mut socket: TcpStream, requests: Arc<AtomicU64>, script: Arc<Script>) {
        if !read_request(&mut socket).await {
            return;
        }
        let number = requests.fetch_add(1, Ordering::SeqCst);
        if let Some(answer) = script(number) {
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.flush().await;
        }
        // Everything sent was read, so closing sends a FIN, not a reset.
        let _ = socket.shutdown().await;
    }

    /// Reads one request's head and body; false if the client went away first.
    async fn read_request(socket: &mut TcpStream) -> bool {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0);
                if seen.len() >= end + 4 + length {
                    return true;
                }
            }
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// A complete non-streamed chat answer of two tokens.
    pub fn answer() -> String {
        let body = "{\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":\
                    {\"role\":\"assistant\",\"content\":\" a b\"},\"finish_reason\":\"stop\"}],\
                    \"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}";
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        )
    }
}

#[tokio::test]
async fn an_http_5xx_reaches_the_server_once_and_is_not_sent_again() {
    for status in [500, 502, 503] {
        for stream in [true, false] {
            let case = format!("HTTP {status}, stream={stream}");
            let server = mock(MockServerConfig {
                error_after: Some(0),
                error_status: status,
                ..MockServerConfig::default()
            })
            .await;
            let b = backend(&server.url(), |c| c.stream = stream).await;
            let err = failure(&b).await;
            assert_eq!(error_label(&err), "http_status", "{case}: {err}");
            assert!(
                err.to_string().contains(&status.to_string()),
                "{case}: {err}"
            );
            assert_eq!(server.stats().requests, 1, "{case}: {err}");
            not_sent_again(&err, &case);
        }
    }
}

#[tokio::test]
async fn a_refused_connection_fails_at_the_first_send_and_is_not_sent_again() {
    // Nothing listens on the port: the connection is refused.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let b = backend(&format!("http://{addr}"), |_| {}).await;
    let err = failure(&b).await;
    assert_eq!(error_label(&err), "connection", "{err}");
    let message = err.to_string();
    assert!(message.contains("sending the request: "), "{message}");
    not_sent_again(&err, "refused");
}

/// The request times out at the server, streamed (after its head and
/// first token arrived) or not (before any answer). tokio's clock is
/// paused and held (a blocking task keeps it from advancing by itself): it
/// moves past the timeout only once the server has the request, and then
/// stands still while the test watches for a second request, until the
/// client has its outcome.
#[tokio::test(start_paused = true)]
async fn a_request_that_times_out_reaches_the_server_once_and_is_not_sent_again() {
    const TIMEOUT: Duration = Duration::from_secs(30);
    let (hold, held) = std::sync::mpsc::channel::<()>();
    let manual_clock = tokio::task::spawn_blocking(move || held.recv());
    let mut seen = Vec::new();
    for stream in [false, true] {
        let server = mock(MockServerConfig {
            stall_rate: 1.0,
            ..MockServerConfig::default()
        })
        .await;
        let b = Arc::new(
            backend(&server.url(), |c| {
                c.stream = stream;
                c.timeout = TIMEOUT;
            })
            .await,
        );
        let client = Arc::clone(&b);
        let task = tokio::spawn(async move { client.resolve(request(1)).await });
        while server.stats().requests == 0 {
            tokio::task::yield_now().await;
        }
        tokio::time::advance(TIMEOUT).await;
        // A second send would reach the server while the clock stands still.
        while !task.is_finished() && server.stats().requests < 2 {
            tokio::task::yield_now().await;
        }
        let requests = server.stats().requests;
        task.abort();
        let outcome = task.await;
        seen.push((stream, requests, outcome));
    }
    drop(hold);
    manual_clock.await.expect("the blocking task ends").ok();
    for (stream, requests, outcome) in seen {
        let case = format!("timeout, stream={stream}");
        assert_eq!(requests, 1, "{case}: the server had the request twice");
        let err = outcome
            .expect("the request ended by itself")
            .expect_err("the request must fail");
        assert_eq!(error_label(&err), "timeout", "{case}: {err}");
        not_sent_again(&err, &case);
    }
}

#[tokio::test]
async fn a_connection_closed_after_the_answer_began_is_not_sent_again_streamed_or_not() {
    // Streamed: the mock aborts the connection after the first token.
    let server = mock(MockServerConfig {
        reset_rate: 1.0,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&server.url(), |c| c.stream = true).await;
    let err = failure(&b).await;
    assert_eq!(error_label(&err), "connection", "{err}");
    assert!(err.to_string().contains("reading the stream"), "{err}");
    assert_eq!(server.stats().requests, 1, "{err}");
    not_sent_again(&err, "reset mid-stream");

    // Not streamed: the head and the start of the body, then the end.
    // (The mock's non-streamed reset closes before any answer, which is
    // the case that is retried.)
    let server = scripted::Server::start(|_| {
        Some(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n\
             {\"choices\":["
                .to_owned(),
        )
    })
    .await;
    let b = backend(&server.url(), |c| c.stream = false).await;
    let err = failure(&b).await;
    assert_eq!(error_label(&err), "connection", "{err}");
    assert!(err.to_string().contains("reading the response"), "{err}");
    assert_eq!(server.requests(), 1, "{err}");
    not_sent_again(&err, "closed mid-body");
}

#[tokio::test]
async fn a_malformed_answer_reaches_the_server_once_and_is_not_sent_again() {
    for stream in [true, false] {
        let case = format!("malformed, stream={stream}");
        let server = mock(MockServerConfig {
            malformed_rate: 1.0,
            ..MockServerConfig::default()
        })
        .await;
        let b = backend(&server.url(), |c| c.stream = stream).await;
        let err = failure(&b).await;
        assert_eq!(error_label(&err), "malformed_response", "{case}: {err}");
        assert_eq!(server.stats().requests, 1, "{case}: {err}");
        not_sent_again(&err, &case);
    }
}

/// An answer whose head is not HTTP fails the send itself, like a closed
/// connection, but the server did answer: it is not sent again.
#[tokio::test]
async fn an_answer_that_is_not_http_reaches_the_server_once_and_is_not_sent_again() {
    let server = scripted::Server::start(|_| Some("not an HTTP answer\r\n\r\n".to_owned())).await;
    let b = backend(&server.url(), |_| {}).await;
    let err = failure(&b).await;
    assert_eq!(error_label(&err), "connection", "{err}");
    assert!(err.to_string().contains("sending the request: "), "{err}");
    assert_eq!(server.requests(), 1, "{err}");
    not_sent_again(&err, "not HTTP");
}

#[tokio::test]
async fn a_truncated_stream_reaches_the_server_once_and_is_not_sent_again() {
    let server = mock(MockServerConfig {
        truncate_rate: 1.0,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&server.url(), |_| {}).await;
    let err = failure(&b).await;
    assert_eq!(error_label(&err), "stream_truncated", "{err}");
    assert_eq!(server.stats().requests, 1, "{err}");
}

/// The server reads the first request and closes the connection without a
/// byte of answer, as a server closing an idle keep-alive connection does
/// under a request; it answers the next one.
#[tokio::test]
async fn a_request_whose_connection_closed_before_any_answer_is_sent_once_more_and_counted() {
    let server = scripted::Server::start(|n| (n > 0).then(scripted::answer)).await;
    let b = backend(&server.url(), |c| c.stream = false).await;
    let r: GenerationResponse = b.resolve(request(1)).await.expect("served on the retry");
    assert_eq!(r.timings.retries, 1);
    assert_eq!((r.text.as_str(), r.output_tokens), (" a b", 2));
    assert_eq!(server.requests(), 2);
    // The next request is not retried: retries count per request.
    let r = b.resolve(request(2)).await.expect("served");
    assert_eq!(r.timings.retries, 0);
    assert_eq!(server.requests(), 3);
}

/// Every connection closes before any answer: the request is sent twice,
/// the second failure is reported, and there is no third send.
#[tokio::test]
async fn a_request_whose_connections_all_close_unanswered_is_sent_twice_and_no_more() {
    let server = scripted::Server::start(|_| None).await;
    let b = backend(&server.url(), |_| {}).await;
    let err = failure(&b).await;
    assert_eq!(error_label(&err), "connection", "{err}");
    assert!(err.to_string().contains(SENT_AGAIN), "{err}");
    assert_eq!(server.requests(), 2, "{err}");
}
