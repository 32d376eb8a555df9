//! An OpenAI-compatible mock server with configurable latencies and fault
//! injection.
//!
//! It answers `POST /v1/chat/completions` and `POST /v1/completions`
//! (streamed as server-sent events or not, with `stream_options.include_usage`),
//! `POST /v1/responses` (OpenAI's Responses API, streamed as typed events or
//! not), `POST /v1/embeddings` and vLLM's `POST /pooling` (never streamed),
//! `POST /v1/audio/transcriptions` and `POST /v1/audio/translations`
//! (`multipart/form-data` uploads, streamed as vLLM's transcription chunks
//! or not; see the [`audio`] module), `GET /v1/models` and `GET /health`,
//! over HTTP/1.1 and HTTP/2 (prior knowledge); every `/v1/...` route also
//! answers without its `/v1`. Output is made of fixed words, one per token.
//!
//! # Timing
//!
//! Times are counted from when a request's body has arrived. A stream sends
//! a role-only chunk at once (chat), the first token after `ttft`, and each
//! later event `k × itl` after the previous one, `k` being the tokens in the
//! event (`tokens_per_event`); each time is drawn from a normal distribution
//! with the configured standard deviation, clamped at zero. A non-streamed
//! response is sent when the last token would have been.
//!
//! A Responses API stream sends `response.created` at once, each
//! `response.output_text.delta` (`response.reasoning_text.delta` for
//! reasoning tokens) as the chat chunks are timed, then the `*.done`
//! events and `response.completed` (`response.incomplete`, reason
//! `max_output_tokens`, when the output was capped by
//! `max_output_tokens`) with the usage, `input_tokens` and
//! `output_tokens`, at the last token's instant. Answers get the ids
//! `resp_mock_N` (N the request's number) and are kept, unless the
//! request says `store: false`: a request naming an unknown
//! `previous_response_id` is answered 400, as OpenAI answers it, and a
//! known one adds the conversation so far to `input_tokens`.
//!
//! An embeddings or pooling answer has no output tokens: like a prefill, it
//! is sent whole `ttft` after its request arrived (plus `ttft_per_request`
//! for each other request in flight). It holds one vector per input
//! (`input`: a string, a list of strings or of token ids; for `/pooling`
//! also GuideLLM's `data`), of the request's `dimensions` or
//! [`EMBEDDING_DIMENSIONS`] numbers, in base64 with
//! `encoding_format=base64`; `usage.prompt_tokens` counts the inputs'
//! tokens.
//!
//! Times are read on tokio's clock. A stream waits for its next event on a
//! timer thread of its own, finer than tokio's millisecond (see the
//! `precise` module), or, with `tokio_timer`, on tokio's timer: then a test
//! that pauses tokio's clock, with the server on the test's own runtime,
//! sends every event at exactly its planned instant as it advances the
//! clock.
//!
//! # Output length
//!
//! With `output_tokens` set, the count is drawn around it (and capped by the
//! request's `max_tokens`, with `finish_reason` `length` when capped and
//! `stop` otherwise); without it, the request's `max_tokens` (default 16) is
//! produced, as a server asked to `ignore_eos` would. The first
//! `reasoning_tokens` tokens of a chat response are sent as
//! `reasoning_content` and reported in `usage.completion_tokens_details`
//! (of a Responses API answer: as reasoning text, reported in
//! `usage.output_tokens_details`); `max_output_tokens` is the Responses
//! API's `max_tokens`.
//!
//! # Tool calls
//!
//! A chat request with `tools` whose `tool_choice` is not `"none"` is
//! answered with one tool call instead of text (GuideLLM's mock answers
//! only `"required"`): of the function `tool_choice` names, else of the
//! first tool, with the id `call_mock_N`. Its output tokens are the
//! arguments, words making the JSON object `{"text":"..."}`, timed as text
//! tokens are: a stream's first `delta.tool_calls` (with the id and the
//! name) comes at `ttft`, each later fragment of the arguments `k × itl`
//! after the previous one, and a non-streamed answer has `message.tool_calls`
//! with `content: null`. The finish reason is `tool_calls` (`length` when
//! a drawn `output_tokens` was capped by the request's limit). Reasoning
//! tokens come first, as reasoning text; faults and write instants apply
//! to these answers as to text.
//!
//! A Responses API request with `tools` whose `tool_choice` is not
//! `"none"` is answered the same way, in that API's shape: one
//! `function_call` output item (`call_id` `call_mock_N`) in place of the
//! `message` item, streamed as `response.output_item.added` and
//! `response.function_call_arguments.delta` events timed as text deltas
//! are (the first at `ttft`), then `response.function_call_arguments.done`
//! and `response.output_item.done` with the whole arguments (see the
//! `responses_tools` module). Such an answer is stored for
//! `previous_response_id` as a text answer is, and a later request's
//! `function_call` and `function_call_output` items count in its
//! `input_tokens`.
//!
//! # Faults
//!
//! Requests are numbered from 0 in arrival order. Each fault is decided per
//! request from a generator seeded with `seed` and the request number, so a
//! run is reproducible:
//!
//! * `error_after=N` / `error_rate=p`: answer `error_status` (default 500)
//!   with an OpenAI-style error body;
//! * `reset_rate`: a stream is aborted after its first token (the connection
//!   is closed mid-body); a non-streamed request's connection is closed
//!   without an answer;
//! * `stall_rate`: a stream stops sending after its first token, a
//!   non-streamed request is never answered (until the server shuts down);
//! * `truncate_rate`: a stream ends cleanly after half of its tokens, with
//!   no `finish_reason`, usage or `[DONE]`; a non-streamed body is cut in half;
//! * `malformed_rate`: an invalid JSON chunk follows the first token (a
//!   non-streamed body is invalid JSON).
//!
//! Embeddings and pooling answers take the faults of a non-streamed
//! response; audio answers take those of a stream or of a whole answer,
//! as chat's do. A Responses API stream cut short (`truncate_rate`) ends
//! without `response.completed`.
//!
//! # Keep-alive
//!
//! Like real servers, the mock can limit how long and how often a
//! connection is reused (HTTP/1.1; an HTTP/2 connection is only closed when
//! idle):
//!
//! * `keep_alive_timeout=T`: a connection with no response in progress for
//!   `T` is closed;
//! * `keep_alive_max=N`: a connection serves at most `N` requests;
//! * `connection_close`: every response says `Connection: close` and the
//!   connection is closed after it.
//!
//! With `announce_keep_alive` (the default) the limits are announced as
//! llama.cpp's server does: `Keep-Alive: timeout=T, max=M` on every
//! response (`T` in whole seconds, `M` the requests the connection has
//! left) and `Connection: close` on the last response a connection serves.
//! Without it they are enforced silently: an idle connection is just
//! closed, and the request after the `N`th on a connection finds it closed
//! — the server drops its bytes unread and closes without an answer, which
//! is what a client sees when its request crosses a server's close (the
//! request is not counted in [`MockStats::requests`] but in
//! [`MockStats::closed_unanswered`]). That makes the keep-alive race of
//! real servers reproducible.
//!
//! # Write instants
//!
//! With `record_timings` the server keeps, for every streamed response,
//! when each event carrying output tokens was handed to hyper (`polled_ns`)
//! and when the first socket write carrying it began (`written_ns`), and
//! for every embeddings, pooling or non-streamed audio answer the same of
//! its whole body (one event of 0 tokens), both
//! in nanoseconds since the Unix epoch through guidebench's own clock
//! ([`Clock::global`]: the same monotonic-to-wall mapping the client uses,
//! so in one process the two sides compare exactly, and across processes
//! up to the error of each process's anchor). A request is named by its
//! `x-request-id` header (the `openai_http` backend sends it with
//! `request_id_header=x-request-id`) or else by its number. The instants
//! are served as JSON at `GET /debug/timings` (every request) and
//! `GET /debug/timings?id=ID` (one), and returned by [`MockServer::timings`].
//! Without the option nothing is recorded and the endpoint answers 404;
//! the only cost left is one test of a flag per socket write.
//!
//! # Serving
//!
//! [`serve`] runs the server on a listener until a shutdown future
//! completes, then stops accepting, lets open responses finish for up to
//! `shutdown_grace` and closes what remains. [`MockServer::start`] runs it
//! in the background on `127.0.0.1` with a free port, for tests.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use guidebench_core::clock::Clock;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::error::OpenAiError;

// The layers, from the request's arrival to its answer's last byte:
// `config` (the options), `connection` (keep-alive and the socket's write
// instants, around `handle` below), `request` (what every request goes
// through first), `plan` (the request's fault, output length and timing,
// drawn from its seeded generator), `body` (how a planned or whole answer
// is written), and the endpoints' answers: `chat`, `responses` (with
// `responses_tools`), `pooling` and `audio`.
mod body;
mod chat;
mod config;
mod connection;
mod plan;
mod pooling;
mod request;
mod responses;
mod responses_tools;

pub mod audio;
pub use config::{
    MockServerConfig, OPTIONS, REFUSED_GUIDELLM_FLAGS, latency_flag, refuse_guidellm_flag,
};
pub use pooling::EMBEDDING_DIMENSIONS;

use body::{Abort, Answer, MockBody, error_body, full};
use chat::completion;
use connection::{ConnState, KeepAliveIo, serve_on};
use pooling::{Pooling, pooled};
use responses::responses;

/// A completion request as the mock server received it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The request path.
    pub path: String,
    /// The request headers, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Value,
}

/// The write instants of one streamed response (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamTimings {
    /// The request's `x-request-id` header, or else its number as text.
    pub id: String,
    /// The request's number, in arrival order from 0.
    pub index: u64,
    /// When hyper handed the request over (its head parsed), in ns since
    /// the Unix epoch.
    pub received_ns: i64,
    /// When the request's body had arrived (times count from here), in ns
    /// since the Unix epoch.
    pub arrived_ns: i64,
    /// One entry per event carrying output tokens, in the order sent.
    pub events: Vec<EventTimes>,
}

/// When one event carrying output tokens left the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventTimes {
    /// The output tokens the event carries.
    pub tokens: u32,
    /// When the event's frame was handed to hyper, in ns since the epoch.
    pub polled_ns: i64,
    /// When the first socket write carrying (part of) the frame began, in ns
    /// since the epoch; `None` if no write followed (the connection closed).
    pub written_ns: Option<i64>,
}

/// One response's write instants, shared by its body and its connection.
type TimingSlot = Arc<Mutex<StreamTimings>>;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Nanoseconds since the epoch of a monotonic instant, through the process
/// clock (the client's mapping).
fn wall_ns(at: std::time::Instant) -> i64 {
    Clock::global().wall(at).0
}

/// Counters of a running mock server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MockStats {
    /// Completion requests received.
    pub requests: u64,
    /// Completion responses whose body ended without an injected abort or stall.
    pub completed: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Requests whose connection the server closed unread, past an
    /// unannounced `keep_alive_max`.
    pub closed_unanswered: u64,
    /// `GET /health` requests received.
    pub health_checks: u64,
    /// `GET /v1/models` requests received.
    pub model_listings: u64,
}

/// State shared by every connection.
struct Shared {
    config: MockServerConfig,
    model_json: String,
    requests: AtomicU64,
    completed: AtomicU64,
    connections: AtomicU64,
    closed_unanswered: AtomicU64,
    health_checks: AtomicU64,
    model_listings: AtomicU64,
    /// Completion requests in flight.
    active: AtomicU64,
    recorded: Mutex<Vec<RecordedRequest>>,
    /// Write instants of streamed responses, with `record_timings`.
    timings: Mutex<Vec<TimingSlot>>,
    /// The Responses API answers kept, by id: the tokens of their
    /// conversation so far (input and output).
    responses: Mutex<HashMap<String, u64>>,
    /// Cancelled at shutdown: stalled responses end.
    stop: CancellationToken,
}

/// Serves the mock API on `listener` until `shutdown` completes.
///
/// On shutdown it stops accepting, asks open connections to close once
/// their responses are done, waits up to `config.shutdown_grace`, and then
/// closes whatever is left.
///
/// # Errors
///
/// None while serving (a failed `accept` is logged and retried); the result
/// is kept for future failures.
pub async fn serve(
    config: MockServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> std::result::Result<(), OpenAiError> {
    serve_shared(Arc::new(Shared::new(config)), listener, shutdown).await
}

impl Shared {
    fn new(config: MockServerConfig) -> Self {
        Shared {
            model_json: Value::String(config.model.clone()).to_string(),
            config,
            requests: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            closed_unanswered: AtomicU64::new(0),
            health_checks: AtomicU64::new(0),
            model_listings: AtomicU64::new(0),
            active: AtomicU64::new(0),
            recorded: Mutex::new(Vec::new()),
            timings: Mutex::new(Vec::new()),
            responses: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
        }
    }

    /// The recorded write instants, of every request or of the one named `id`.
    fn timings(&self, id: Option<&str>) -> Vec<StreamTimings> {
        lock(&self.timings)
            .iter()
            .map(|slot| lock(slot).clone())
            .filter(|t| id.is_none_or(|id| t.id == id))
            .collect()
    }

    fn stats(&self) -> MockStats {
        MockStats {
            requests: self.requests.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
            closed_unanswered: self.closed_unanswered.load(Ordering::Relaxed),
            health_checks: self.health_checks.load(Ordering::Relaxed),
            model_listings: self.model_listings.load(Ordering::Relaxed),
        }
    }
}

async fn serve_shared(
    shared: Arc<Shared>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> std::result::Result<(), OpenAiError> {
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "mock server: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        shared.connections.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(ConnState::new());
        let io = KeepAliveIo {
            inner: stream,
            conn: conn.clone(),
            shared: shared.clone(),
        };
        let state = shared.clone();
        let service_conn = conn.clone();
        let service = hyper::service::service_fn(move |request| {
            serve_on(state.clone(), service_conn.clone(), request)
        });
        let connection = builder.serve_connection(TokioIo::new(io), service);
        let watched = graceful.watch(connection.into_owned());
        let idle_timeout = shared.config.keep_alive_timeout;
        connections.spawn(async move {
            tokio::select! {
                ended = watched => {
                    if let Err(e) = ended {
                        tracing::debug!(error = %e, "mock server: connection ended");
                    }
                }
                // Dropping the connection closes it.
                () = conn.idle_for(idle_timeout) => {
                    tracing::debug!("mock server: closing an idle connection");
                }
            }
        });
    }
    drop(listener);
    shared.stop.cancel();
    let grace = shared.config.shutdown_grace;
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("mock server: closing connections still open after the grace period");
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// A mock server running in the background.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<std::result::Result<(), OpenAiError>>>,
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockServer {
    /// Starts a server on `127.0.0.1` with a free port.
    ///
    /// # Errors
    ///
    /// [`OpenAiError::MockServer`] when no port can be bound.
    pub async fn start(config: MockServerConfig) -> std::result::Result<Self, OpenAiError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(OpenAiError::MockServer)?;
        Self::start_on(config, listener)
    }

    /// Starts a server on an already bound listener.
    ///
    /// # Errors
    ///
    /// [`OpenAiError::MockServer`] when the listener has no local address.
    pub fn start_on(
        config: MockServerConfig,
        listener: TcpListener,
    ) -> std::result::Result<Self, OpenAiError> {
        let addr = listener.local_addr().map_err(OpenAiError::MockServer)?;
        let shared = Arc::new(Shared::new(config));
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve_shared(
            shared.clone(),
            listener,
            stop.clone().cancelled_owned(),
        ));
        Ok(MockServer {
            addr,
            shared,
            stop,
            task: Some(task),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its counters.
    pub fn stats(&self) -> MockStats {
        self.shared.stats()
    }

    /// The write instants of every streamed response so far, in arrival
    /// order, when [`MockServerConfig::record_timings`] is set (see the
    /// module docs).
    pub fn timings(&self) -> Vec<StreamTimings> {
        self.shared.timings(None)
    }

    /// The completion requests received so far, when
    /// [`MockServerConfig::record_requests`] is set.
    pub fn recorded(&self) -> Vec<RecordedRequest> {
        self.shared
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Stops the server and waits for it (see [`serve`]).
    ///
    /// # Errors
    ///
    /// What [`serve`] returned.
    pub async fn shutdown(mut self) -> std::result::Result<(), OpenAiError> {
        self.stop.cancel();
        match self.task.take() {
            Some(task) => match task.await {
                Ok(result) => result,
                Err(e) => Err(OpenAiError::MockServer(std::io::Error::other(e))),
            },
            None => Ok(()),
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn handle(
    shared: Arc<Shared>,
    conn: &Arc<ConnState>,
    request: Request<Incoming>,
) -> std::result::Result<Response<MockBody>, Abort> {
    let path = request.uri().path().to_owned();
    match (request.method(), path.as_str()) {
        (&Method::GET, "/health") => {
            shared.health_checks.fetch_add(1, Ordering::Relaxed);
            full(StatusCode::OK, "text/plain", "")
        }
        (&Method::GET, "/v1/models" | "/models") => {
            shared.model_listings.fetch_add(1, Ordering::Relaxed);
            let body = format!(
                r#"{{"object":"list","data":[{{"id":{},"object":"model","created":0,"owned_by":"guidebench"}}]}}"#,
                shared.model_json
            );
            full(StatusCode::OK, "application/json", body)
        }
        (&Method::GET, "/debug/timings") => debug_timings(&shared, request.uri().query()),
        (&Method::POST, "/v1/chat/completions" | "/chat/completions") => {
            completion(shared, conn, request, path, true).await
        }
        (&Method::POST, "/v1/completions" | "/completions") => {
            completion(shared, conn, request, path, false).await
        }
        (&Method::POST, "/v1/responses" | "/responses") => {
            responses(shared, conn, request, path).await
        }
        (&Method::POST, "/v1/embeddings" | "/embeddings") => {
            pooled(shared, conn, request, path, Pooling::Embeddings).await
        }
        (&Method::POST, "/pooling") => pooled(shared, conn, request, path, Pooling::Pooling).await,
        (&Method::POST, "/v1/audio/transcriptions" | "/audio/transcriptions") => {
            audio::audio(shared, conn, request, path, audio::Task::Transcription).await
        }
        (&Method::POST, "/v1/audio/translations" | "/audio/translations") => {
            audio::audio(shared, conn, request, path, audio::Task::Translation).await
        }
        (
            _,
            "/health"
            | "/v1/models"
            | "/v1/chat/completions"
            | "/v1/completions"
            | "/v1/responses"
            | "/v1/embeddings"
            | "/pooling"
            | "/v1/audio/transcriptions"
            | "/v1/audio/translations",
        ) => error_body(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed",
            "invalid_request_error",
        ),
        _ => error_body(
            StatusCode::NOT_FOUND,
            &format!("no route for {path}"),
            "not_found",
        ),
    }
}

/// `GET /debug/timings[?id=ID]`: the recorded write instants as JSON,
/// `{"clock": "unix_ns", "requests": [StreamTimings...]}`.
fn debug_timings(shared: &Shared, query: Option<&str>) -> Answer {
    if !shared.config.record_timings {
        return error_body(
            StatusCode::NOT_FOUND,
            "write instants are not recorded: start the server with record_timings=true",
            "not_found",
        );
    }
    let id = query.and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("id="))
            .map(str::to_owned)
    });
    let body = json!({"clock": "unix_ns", "requests": shared.timings(id.as_deref())});
    full(StatusCode::OK, "application/json", body.to_string())
}
