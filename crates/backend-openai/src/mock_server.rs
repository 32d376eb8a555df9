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
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use guidebench_core::clock::Clock;
use guidebench_core::options::{
    OptionSpec, OptionType, check_options, from_map, serialize_duration,
};
use guidebench_core::rng::{self, SeededRng};
use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};
use guidebench_core::{Error, Result};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::header::{CONNECTION, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use rand::RngExt;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::precise::PreciseSleep;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::error::OpenAiError;

pub mod audio;
mod responses_tools;

/// The context named in option errors.
const CONTEXT: &str = "mock-server";

/// The options of the mock server (what `guidebench mock-server` accepts
/// besides where to listen).
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional("model", OptionType::String, "the model id the server lists")
        .default_from::<MockServerConfig>(),
    OptionSpec::optional("ttft", OptionType::Latency, "time to the first token").default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "ttft_std",
        OptionType::Latency,
        "standard deviation of ttft",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "ttft_per_request",
        OptionType::Latency,
        "added to ttft for each other request in flight when one arrives (latency that grows with load)",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional("itl", OptionType::Latency, "time between tokens").default_from::<MockServerConfig>(),
    OptionSpec::optional("itl_std", OptionType::Latency, "standard deviation of itl")
        .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "output_tokens",
        OptionType::Int,
        "tokens per response (capped by max_tokens); default: max_tokens",
    ),
    OptionSpec::optional(
        "output_tokens_std",
        OptionType::Float,
        "standard deviation of output_tokens",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "tokens_per_event",
        OptionType::Int,
        "tokens carried by each streamed event",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "reasoning_tokens",
        OptionType::Int,
        "leading tokens sent as reasoning_content (chat)",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "error_after",
        OptionType::Int,
        "answer an error status to every request after the first N",
    ),
    OptionSpec::optional(
        "error_rate",
        OptionType::Float,
        "fraction of requests answered with an error status",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional("error_status", OptionType::Int, "the injected error status")
        .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "error_message",
        OptionType::String,
        "the message of injected errors (the body's error.message)",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "reset_rate",
        OptionType::Float,
        "fraction of requests whose connection is closed mid-answer",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "stall_rate",
        OptionType::Float,
        "fraction of requests that stop answering after the first token",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "truncate_rate",
        OptionType::Float,
        "fraction of streams that end early without [DONE]",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "malformed_rate",
        OptionType::Float,
        "fraction of responses with an invalid JSON chunk",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional("seed", OptionType::Int, "seed of latency and fault draws")
        .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "tokenizer",
        OptionType::String,
        "tokenizer.json or model directory for prompt token counts; default: whitespace words",
    ),
    OptionSpec::optional(
        "keep_alive_timeout",
        OptionType::Duration,
        "close a connection idle for this long; default: never",
    ),
    OptionSpec::optional(
        "keep_alive_max",
        OptionType::Int,
        "serve at most N requests per connection; default: no limit",
    ),
    OptionSpec::optional(
        "connection_close",
        OptionType::Bool,
        "answer every request with `Connection: close` and close the connection",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "announce_keep_alive",
        OptionType::Bool,
        "announce the limits (`Keep-Alive: timeout=T, max=M`, `Connection: close` on the last \
         response); false closes connections without warning",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "shutdown_grace",
        OptionType::Duration,
        "how long shutdown lets open responses finish",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "record_timings",
        OptionType::Bool,
        "record when each streamed token was written, served at GET /debug/timings",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "audio_tokens_per_second",
        OptionType::Float,
        "prompt tokens charged per second of an uploaded audio clip (transcriptions, \
         translations)",
    )
    .default_from::<MockServerConfig>(),
];

/// The mock server's behaviour.
///
/// It serializes as the options of [`OPTIONS`] (durations as text such as
/// `10ms`, which the options accept), leaving out what only code sets (the
/// tokenizer, `record_requests`, `tokio_timer`): its [`Default`] is what
/// [`MockServerConfig::from_options`] gives an unset option and what help
/// prints as the option's default.
#[derive(Clone, Serialize)]
pub struct MockServerConfig {
    /// The model id the server lists and echoes.
    pub model: String,
    /// Mean time to the first token.
    #[serde(serialize_with = "serialize_duration")]
    pub ttft: Duration,
    /// Standard deviation of the time to the first token.
    #[serde(serialize_with = "serialize_duration")]
    pub ttft_std: Duration,
    /// Added to the time to the first token for each other completion
    /// request in flight when a request arrives: a latency that grows with
    /// load, as a saturated server's does.
    #[serde(serialize_with = "serialize_duration")]
    pub ttft_per_request: Duration,
    /// Mean time between tokens.
    #[serde(serialize_with = "serialize_duration")]
    pub itl: Duration,
    /// Standard deviation of the time between tokens.
    #[serde(serialize_with = "serialize_duration")]
    pub itl_std: Duration,
    /// Mean output tokens per response (capped by `max_tokens`); `None`
    /// produces `max_tokens`.
    pub output_tokens: Option<u32>,
    /// Standard deviation of the output token count.
    pub output_tokens_std: f64,
    /// Tokens carried by each streamed event (at least 1).
    pub tokens_per_event: u32,
    /// Leading tokens of a chat response sent as `reasoning_content`.
    pub reasoning_tokens: u32,
    /// Answer `error_status` to every completion request after the first N.
    pub error_after: Option<u64>,
    /// Fraction of completion requests answered with `error_status`.
    pub error_rate: f64,
    /// The status of injected errors.
    pub error_status: u16,
    /// The message of injected errors (`error.message` of the body).
    pub error_message: String,
    /// Fraction of requests whose connection is closed mid-answer.
    pub reset_rate: f64,
    /// Fraction of requests that stop answering after the first token.
    pub stall_rate: f64,
    /// Fraction of streams that end early without `[DONE]`.
    pub truncate_rate: f64,
    /// Fraction of responses with an invalid JSON chunk.
    pub malformed_rate: f64,
    /// Seed of latency and fault draws.
    pub seed: u64,
    /// Counts prompt tokens; `None` counts whitespace-separated words.
    #[serde(skip)]
    pub tokenizer: Option<Arc<dyn Tokenizer>>,
    /// Keep every completion request (see [`MockServer::recorded`]).
    #[serde(skip)]
    pub record_requests: bool,
    /// Record when each streamed token was written (see the module docs,
    /// [`MockServer::timings`] and `GET /debug/timings`).
    pub record_timings: bool,
    /// How long shutdown lets open responses finish before closing them.
    #[serde(serialize_with = "serialize_duration")]
    pub shutdown_grace: Duration,
    /// Close a connection that has had no response in progress for this
    /// long; `None` keeps idle connections open.
    #[serde(serialize_with = "serialize_optional_duration")]
    pub keep_alive_timeout: Option<Duration>,
    /// Serve at most this many requests per connection; `None`: no limit.
    pub keep_alive_max: Option<u64>,
    /// Answer every request with `Connection: close` and close the
    /// connection after it.
    pub connection_close: bool,
    /// Announce the limits (`Keep-Alive: timeout=T, max=M` on every
    /// response, `Connection: close` on a connection's last); when false
    /// they are enforced without warning (see the module docs).
    pub announce_keep_alive: bool,
    /// Prompt tokens charged per second of an uploaded audio clip, rounded
    /// up (GuideLLM's mock's `audio_tokens_per_second`, default 25).
    pub audio_tokens_per_second: f64,
    /// Wait for streamed events on tokio's timer instead of the precise
    /// timer thread: to the millisecond only, but on tokio's clock, so a
    /// test that pauses it gets every event at exactly its planned instant
    /// (see the module docs).
    #[serde(skip)]
    pub tokio_timer: bool,
}

/// [`serialize_duration`] for a duration that may be unset (`null`).
fn serialize_optional_duration<S: serde::Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => serialize_duration(duration, serializer),
        None => serializer.serialize_none(),
    }
}

impl std::fmt::Debug for MockServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServerConfig")
            .field("model", &self.model)
            .field("ttft", &self.ttft)
            .field("ttft_std", &self.ttft_std)
            .field("ttft_per_request", &self.ttft_per_request)
            .field("itl", &self.itl)
            .field("itl_std", &self.itl_std)
            .field("output_tokens", &self.output_tokens)
            .field("output_tokens_std", &self.output_tokens_std)
            .field("tokens_per_event", &self.tokens_per_event)
            .field("reasoning_tokens", &self.reasoning_tokens)
            .field("error_after", &self.error_after)
            .field("error_rate", &self.error_rate)
            .field("error_status", &self.error_status)
            .field("error_message", &self.error_message)
            .field("reset_rate", &self.reset_rate)
            .field("stall_rate", &self.stall_rate)
            .field("truncate_rate", &self.truncate_rate)
            .field("malformed_rate", &self.malformed_rate)
            .field("seed", &self.seed)
            .field("tokenizer", &self.tokenizer.is_some())
            .field("record_requests", &self.record_requests)
            .field("record_timings", &self.record_timings)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("keep_alive_timeout", &self.keep_alive_timeout)
            .field("keep_alive_max", &self.keep_alive_max)
            .field("connection_close", &self.connection_close)
            .field("announce_keep_alive", &self.announce_keep_alive)
            .field("audio_tokens_per_second", &self.audio_tokens_per_second)
            .field("tokio_timer", &self.tokio_timer)
            .finish()
    }
}

impl Default for MockServerConfig {
    /// Zero latency, `max_tokens` output, no faults.
    fn default() -> Self {
        MockServerConfig {
            model: "mock-model".into(),
            ttft: Duration::ZERO,
            ttft_std: Duration::ZERO,
            ttft_per_request: Duration::ZERO,
            itl: Duration::ZERO,
            itl_std: Duration::ZERO,
            output_tokens: None,
            output_tokens_std: 0.0,
            tokens_per_event: 1,
            reasoning_tokens: 0,
            error_after: None,
            error_rate: 0.0,
            error_status: 500,
            error_message: "mock: injected error".into(),
            reset_rate: 0.0,
            stall_rate: 0.0,
            truncate_rate: 0.0,
            malformed_rate: 0.0,
            seed: 0,
            tokenizer: None,
            record_requests: false,
            record_timings: false,
            shutdown_grace: Duration::from_secs(1),
            keep_alive_timeout: None,
            keep_alive_max: None,
            connection_close: false,
            announce_keep_alive: true,
            audio_tokens_per_second: 25.0,
            tokio_timer: false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOptions {
    model: Option<String>,
    ttft: Option<f64>,
    ttft_std: Option<f64>,
    ttft_per_request: Option<f64>,
    itl: Option<f64>,
    itl_std: Option<f64>,
    output_tokens: Option<i64>,
    output_tokens_std: Option<f64>,
    tokens_per_event: Option<i64>,
    reasoning_tokens: Option<i64>,
    error_after: Option<i64>,
    error_rate: Option<f64>,
    error_status: Option<i64>,
    error_message: Option<String>,
    reset_rate: Option<f64>,
    stall_rate: Option<f64>,
    truncate_rate: Option<f64>,
    malformed_rate: Option<f64>,
    seed: Option<i64>,
    tokenizer: Option<String>,
    shutdown_grace: Option<f64>,
    keep_alive_timeout: Option<f64>,
    keep_alive_max: Option<i64>,
    connection_close: Option<bool>,
    announce_keep_alive: Option<bool>,
    record_timings: Option<bool>,
    audio_tokens_per_second: Option<f64>,
}

fn invalid(key: &str, reason: String) -> Error {
    Error::InvalidOption {
        context: CONTEXT.into(),
        key: key.into(),
        reason,
    }
}

fn duration(key: &str, value: Option<f64>, default: Duration) -> Result<Duration> {
    value.map_or(Ok(default), |secs| seconds(key, secs))
}

fn seconds(key: &str, secs: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| invalid(key, format!("must be a duration >= 0, got {secs}s")))
}

fn rate(key: &str, value: Option<f64>, default: f64) -> Result<f64> {
    let p = value.unwrap_or(default);
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(invalid(key, format!("must be in [0, 1], got {p}")))
    }
}

fn count<T: TryFrom<i64>>(key: &str, value: i64, min: i64) -> Result<T> {
    if value < min {
        return Err(invalid(key, format!("must be at least {min}, got {value}")));
    }
    T::try_from(value).map_err(|_| invalid(key, format!("{value} is too large")))
}

/// GuideLLM 0.8.1's mock-server flags without a meaning here, with what
/// to write instead (see [`refuse_guidellm_flag`]).
pub const REFUSED_GUIDELLM_FLAGS: &[(&str, &str)] = &[
    (
        "--request-latency",
        "a non-streamed answer takes the same time as a streamed one here: \
         --ttft-ms plus --itl-ms per token",
    ),
    (
        "--max-concurrent-requests",
        "this server does not queue requests; make the latency grow with load with \
         --set ttft_per_request=5ms",
    ),
    (
        "--image-tokens and --video-tokens",
        "this server charges no prompt tokens for a chat request's images or video, only for \
         its text (an uploaded audio clip is charged with --audio-tokens-per-second)",
    ),
    (
        "--log-request-received",
        "set GUIDEBENCH_LOG=debug to log the server's requests",
    ),
];

/// Refuses the first of GuideLLM's mock-server flags given (by its entry in
/// [`REFUSED_GUIDELLM_FLAGS`]), saying what to write instead.
///
/// # Errors
///
/// [`Error::InvalidOption`] naming the flag.
pub fn refuse_guidellm_flag(given: &[&str]) -> Result<()> {
    match REFUSED_GUIDELLM_FLAGS
        .iter()
        .find(|(flag, _)| given.contains(flag))
    {
        Some((flag, instead)) => Err(Error::InvalidOption {
            context: "mock-server (GuideLLM's flag has no meaning here)".into(),
            key: (*flag).to_owned(),
            reason: (*instead).to_owned(),
        }),
        None => Ok(()),
    }
}

/// A latency flag's value as the option takes it: `--ttft 50ms` (a
/// duration with its unit) or GuideLLM's `--ttft-ms 50`. A bare number in
/// the first is refused, since GuideLLM's users mean milliseconds and a
/// duration reads seconds.
///
/// # Errors
///
/// [`Error::InvalidOption`] for a bare number, saying what to write.
pub fn latency_flag(flag: &str, with_unit: Option<&str>, ms: Option<f64>) -> Result<Option<Value>> {
    match (with_unit, ms) {
        (Some(value), _) if value.trim().parse::<f64>().is_ok() => Err(Error::InvalidOption {
            context: "mock-server".into(),
            key: format!("--{flag}"),
            reason: format!(
                "give the unit (--{flag} {value}ms) or write --{flag}-ms {value} as GuideLLM does"
            ),
        }),
        (Some(value), _) => Ok(Some(Value::String(value.to_owned()))),
        (None, ms) => Ok(ms.map(|ms| Value::String(format!("{ms}ms")))),
    }
}

impl MockServerConfig {
    /// The configuration from options checked against [`OPTIONS`]
    /// (durations as seconds or text such as `50ms`).
    ///
    /// # Errors
    ///
    /// Core's option errors for an unknown key, a value of the wrong type or
    /// out of range; a tokenizer that cannot be loaded.
    pub fn from_options(mut options: Map<String, Value>) -> Result<Self> {
        check_options(CONTEXT, &[OPTIONS], &mut options)?;
        let raw: RawOptions = from_map(CONTEXT, &options)?;
        let defaults = MockServerConfig::default();
        let tokenizer: Option<Arc<dyn Tokenizer>> = match raw.tokenizer {
            None => None,
            Some(path) => {
                let path = std::path::PathBuf::from(path);
                let tokenizer = if path.is_dir() {
                    HfTokenizer::from_dir(&path)?
                } else {
                    HfTokenizer::from_file(&path)?
                };
                Some(Arc::new(tokenizer))
            }
        };
        let output_tokens_std = raw.output_tokens_std.unwrap_or(defaults.output_tokens_std);
        let audio_tokens_per_second = raw
            .audio_tokens_per_second
            .unwrap_or(defaults.audio_tokens_per_second);
        if !(audio_tokens_per_second.is_finite() && audio_tokens_per_second >= 0.0) {
            return Err(invalid(
                "audio_tokens_per_second",
                format!("must be a number >= 0, got {audio_tokens_per_second}"),
            ));
        }
        if output_tokens_std < 0.0 {
            return Err(invalid(
                "output_tokens_std",
                format!("must be >= 0, got {output_tokens_std}"),
            ));
        }
        Ok(MockServerConfig {
            model: raw.model.unwrap_or(defaults.model),
            ttft: duration("ttft", raw.ttft, defaults.ttft)?,
            ttft_std: duration("ttft_std", raw.ttft_std, defaults.ttft_std)?,
            ttft_per_request: duration(
                "ttft_per_request",
                raw.ttft_per_request,
                defaults.ttft_per_request,
            )?,
            itl: duration("itl", raw.itl, defaults.itl)?,
            itl_std: duration("itl_std", raw.itl_std, defaults.itl_std)?,
            output_tokens: match raw.output_tokens {
                Some(n) => Some(count("output_tokens", n, 1)?),
                None => defaults.output_tokens,
            },
            output_tokens_std,
            tokens_per_event: match raw.tokens_per_event {
                Some(n) => count("tokens_per_event", n, 1)?,
                None => defaults.tokens_per_event,
            },
            reasoning_tokens: match raw.reasoning_tokens {
                Some(n) => count("reasoning_tokens", n, 0)?,
                None => defaults.reasoning_tokens,
            },
            error_after: match raw.error_after {
                Some(n) => Some(count("error_after", n, 0)?),
                None => defaults.error_after,
            },
            error_rate: rate("error_rate", raw.error_rate, defaults.error_rate)?,
            error_status: match raw.error_status {
                None => defaults.error_status,
                Some(s) if (400..600).contains(&s) => count("error_status", s, 400)?,
                Some(s) => {
                    return Err(invalid(
                        "error_status",
                        format!("must be in 400..=599, got {s}"),
                    ));
                }
            },
            error_message: raw.error_message.unwrap_or(defaults.error_message),
            reset_rate: rate("reset_rate", raw.reset_rate, defaults.reset_rate)?,
            stall_rate: rate("stall_rate", raw.stall_rate, defaults.stall_rate)?,
            truncate_rate: rate("truncate_rate", raw.truncate_rate, defaults.truncate_rate)?,
            malformed_rate: rate(
                "malformed_rate",
                raw.malformed_rate,
                defaults.malformed_rate,
            )?,
            seed: raw.seed.map_or(defaults.seed, i64::cast_unsigned),
            tokenizer,
            record_requests: defaults.record_requests,
            record_timings: raw.record_timings.unwrap_or(defaults.record_timings),
            shutdown_grace: duration(
                "shutdown_grace",
                raw.shutdown_grace,
                defaults.shutdown_grace,
            )?,
            keep_alive_timeout: match raw.keep_alive_timeout {
                None => defaults.keep_alive_timeout,
                Some(secs) if secs > 0.0 => Some(seconds("keep_alive_timeout", secs)?),
                Some(secs) => {
                    return Err(invalid(
                        "keep_alive_timeout",
                        format!("must be positive, got {secs}s"),
                    ));
                }
            },
            keep_alive_max: match raw.keep_alive_max {
                Some(n) => Some(count("keep_alive_max", n, 1)?),
                None => defaults.keep_alive_max,
            },
            connection_close: raw.connection_close.unwrap_or(defaults.connection_close),
            announce_keep_alive: raw
                .announce_keep_alive
                .unwrap_or(defaults.announce_keep_alive),
            audio_tokens_per_second,
            tokio_timer: defaults.tokio_timer,
        })
    }
}

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

/// One connection's keep-alive bookkeeping.
struct ConnState {
    /// Requests the connection has started to serve.
    started: AtomicU64,
    /// Responses still being sent.
    in_flight: AtomicU64,
    /// When the connection last had no response in progress.
    idle_since: Mutex<Instant>,
    /// Woken when a response starts or ends.
    changed: tokio::sync::Notify,
    /// Token frames handed to hyper and not yet written (`record_timings`):
    /// the response's slot and the event's index in it.
    unwritten: Mutex<Vec<(TimingSlot, usize)>>,
}

impl ConnState {
    fn new() -> Self {
        ConnState {
            started: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            idle_since: Mutex::new(Instant::now()),
            changed: tokio::sync::Notify::new(),
            unwritten: Mutex::new(Vec::new()),
        }
    }

    /// Stamps every frame handed over since the last write with `at`, when a
    /// write that began at `at` succeeded.
    fn written(&self, at: std::time::Instant) {
        let mut unwritten = lock(&self.unwritten);
        if unwritten.is_empty() {
            return;
        }
        let at = wall_ns(at);
        for (slot, index) in unwritten.drain(..) {
            if let Some(event) = lock(&slot).events.get_mut(index) {
                event.written_ns.get_or_insert(at);
            }
        }
    }

    fn idle_since(&self) -> Instant {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Completes once the connection has had no response in progress for
    /// `timeout`; never without a timeout.
    async fn idle_for(&self, timeout: Option<Duration>) {
        let Some(timeout) = timeout else {
            return std::future::pending().await;
        };
        loop {
            // Registered before the state is read, so no change is missed.
            let changed = self.changed.notified();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                let deadline = self.idle_since() + timeout;
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {
                        if self.in_flight.load(Ordering::Acquire) == 0
                            && self.idle_since() + timeout <= Instant::now()
                        {
                            return;
                        }
                    }
                    () = changed => {}
                }
            } else {
                changed.await;
            }
        }
    }
}

/// A response in progress on a connection; its end makes the connection
/// idle again.
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn new(conn: Arc<ConnState>) -> Self {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        conn.changed.notify_one();
        InFlight(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self
            .0
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

/// A connection's socket, which past an unannounced `keep_alive_max` reads
/// the next request's bytes as the end of the stream: the request is
/// dropped unread and hyper closes the connection without an answer.
struct KeepAliveIo {
    inner: tokio::net::TcpStream,
    conn: Arc<ConnState>,
    shared: Arc<Shared>,
}

impl KeepAliveIo {
    /// With `record_timings`, stamps the frames waiting for a write once a
    /// write that began at `began` has written bytes.
    fn stamp(&self, began: Option<std::time::Instant>, written: &Poll<std::io::Result<usize>>) {
        if let (Some(began), Poll::Ready(Ok(n))) = (began, written)
            && *n > 0
        {
            self.conn.written(began);
        }
    }

    fn spent(&self) -> bool {
        let config = &self.shared.config;
        !config.announce_keep_alive
            && config
                .keep_alive_max
                .is_some_and(|max| self.conn.started.load(Ordering::Acquire) >= max)
            && self.conn.in_flight.load(Ordering::Acquire) == 0
    }
}

impl tokio::io::AsyncRead for KeepAliveIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.spent() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let mut scratch = [0u8; 1024];
        let mut discard = tokio::io::ReadBuf::new(&mut scratch);
        match Pin::new(&mut this.inner).poll_read(cx, &mut discard) {
            Poll::Ready(Ok(())) => {
                if !discard.filled().is_empty() {
                    this.shared
                        .closed_unanswered
                        .fetch_add(1, Ordering::Relaxed);
                }
                // Nothing added to `buf`: the end of the stream.
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl tokio::io::AsyncWrite for KeepAliveIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let began = this
            .shared
            .config
            .record_timings
            .then(std::time::Instant::now);
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.stamp(began, &written);
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let began = this
            .shared
            .config
            .record_timings
            .then(std::time::Instant::now);
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.stamp(began, &written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The `Keep-Alive` header announcing the limits, after the `number`th
/// request of a connection; `None` without limits.
fn keep_alive_header(config: &MockServerConfig, number: u64) -> Option<HeaderValue> {
    let mut parts = Vec::new();
    if let Some(timeout) = config.keep_alive_timeout {
        // Whole seconds, rounded down: never later than the server closes.
        parts.push(format!("timeout={}", timeout.as_secs()));
    }
    if let Some(max) = config.keep_alive_max {
        parts.push(format!("max={}", max.saturating_sub(number)));
    }
    if parts.is_empty() {
        return None;
    }
    HeaderValue::from_str(&parts.join(", ")).ok()
}

/// Serves one request of a connection: its keep-alive bookkeeping and
/// headers around [`handle`].
async fn serve_on(
    shared: Arc<Shared>,
    conn: Arc<ConnState>,
    request: Request<Incoming>,
) -> std::result::Result<Response<TrackedBody>, Abort> {
    let number = conn.started.fetch_add(1, Ordering::AcqRel) + 1;
    let in_flight = InFlight::new(conn.clone());
    let mut response = handle(shared.clone(), &conn, request).await?;
    let config = &shared.config;
    let last = config.keep_alive_max.is_some_and(|max| number >= max);
    let headers = response.headers_mut();
    if config.connection_close || (last && config.announce_keep_alive) {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    } else if config.announce_keep_alive
        && let Some(value) = keep_alive_header(config, number)
    {
        headers.insert(HeaderName::from_static("keep-alive"), value);
    }
    Ok(response.map(|body| TrackedBody {
        body,
        _in_flight: in_flight,
    }))
}

/// A response body that keeps its connection busy until it is dropped.
struct TrackedBody {
    body: MockBody,
    _in_flight: InFlight,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = Abort;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Abort>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
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

/// A response the service aborts: the connection is closed. Private to
/// hyper's plumbing; clients see a closed connection.
#[derive(Debug)]
struct Abort;

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("mock server: connection closed on purpose")
    }
}

impl std::error::Error for Abort {}

/// The body of every mock response.
enum MockBody {
    Full(Option<Bytes>),
    Stream(Box<SseStream>),
}

/// One step of a planned stream.
enum Step {
    /// Send these bytes, carrying this many output tokens, not before the
    /// instant.
    Send(Instant, Bytes, u32),
    /// Send this whole answer (of an embeddings or pooling request: no
    /// output tokens), not before the instant; its write instants are
    /// recorded as one event of 0 tokens.
    Answer(Instant, Bytes),
    /// Send nothing more until the server stops, then abort.
    Stall,
    /// Let hyper write what it holds before the next step: an abort drops
    /// what hyper has buffered and not yet written, the head included.
    Flush,
    /// Abort the connection.
    Abort,
}

struct SseStream {
    steps: std::vec::IntoIter<Step>,
    /// With `record_timings`: where this response's write instants go, and
    /// its connection (which stamps them when written).
    timings: Option<(TimingSlot, Arc<ConnState>)>,
    /// The next event: when, its bytes, the output tokens it carries, and
    /// whether its write instants are recorded.
    pending: Option<(Instant, Bytes, u32, bool)>,
    sleep: Option<EventSleep>,
    stalled: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    shared: Arc<Shared>,
    finished: bool,
    /// Counts the request as in flight until the stream ends or is dropped.
    _active: Active,
}

/// A completion request in flight, counted in [`Shared::active`] until
/// dropped.
struct Active(Arc<Shared>);

impl Active {
    /// Counts a request that just arrived; also returns how many others
    /// were in flight.
    fn arrive(shared: &Arc<Shared>) -> (Active, u64) {
        let others = shared.active.fetch_add(1, Ordering::AcqRel);
        (Active(Arc::clone(shared)), others)
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl hyper::body::Body for MockBody {
    type Data = Bytes;
    type Error = Abort;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Abort>>> {
        match self.get_mut() {
            MockBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Stream(stream) => stream.poll_next(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, MockBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            MockBody::Stream(_) => SizeHint::default(),
        }
    }
}

impl SseStream {
    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Abort>>> {
        if let Some(stalled) = &mut self.stalled {
            return match stalled.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Abort))),
                Poll::Pending => Poll::Pending,
            };
        }
        loop {
            if let Some((at, _, _, _)) = &self.pending {
                if *at > Instant::now() {
                    let at = *at;
                    let tokio_timer = self.shared.config.tokio_timer;
                    let sleep = self
                        .sleep
                        .get_or_insert_with(|| EventSleep::until(at, tokio_timer));
                    if sleep.deadline() != at {
                        *sleep = EventSleep::until(at, tokio_timer);
                    }
                    if sleep.poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
                if let Some((_, bytes, tokens, recorded)) = self.pending.take() {
                    if recorded && let Some((slot, conn)) = &self.timings {
                        let polled_ns = wall_ns(std::time::Instant::now());
                        let index = {
                            let mut timings = lock(slot);
                            timings.events.push(EventTimes {
                                tokens,
                                polled_ns,
                                written_ns: None,
                            });
                            timings.events.len() - 1
                        };
                        lock(&conn.unwritten).push((slot.clone(), index));
                    }
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
            }
            match self.steps.next() {
                Some(Step::Send(at, bytes, tokens)) => {
                    self.pending = Some((at, bytes, tokens, tokens > 0));
                }
                Some(Step::Answer(at, bytes)) => self.pending = Some((at, bytes, 0, true)),
                Some(Step::Stall) => {
                    self.stalled = Some(Box::pin(self.shared.stop.clone().cancelled_owned()));
                    return self.poll_next(cx);
                }
                Some(Step::Flush) => {
                    // Pending once: hyper flushes, then polls again.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Some(Step::Abort) => return Poll::Ready(Some(Err(Abort))),
                None => {
                    if !self.finished {
                        self.finished = true;
                        self.shared.completed.fetch_add(1, Ordering::Relaxed);
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

/// The wait for a stream's next event: on the precise timer thread, or on
/// tokio's timer (`tokio_timer`).
enum EventSleep {
    Precise(PreciseSleep),
    Tokio(Pin<Box<tokio::time::Sleep>>),
}

impl EventSleep {
    fn until(at: Instant, tokio_timer: bool) -> Self {
        if tokio_timer {
            EventSleep::Tokio(Box::pin(tokio::time::sleep_until(at)))
        } else {
            EventSleep::Precise(PreciseSleep::until(at.into_std()))
        }
    }

    fn deadline(&self) -> Instant {
        match self {
            EventSleep::Precise(sleep) => Instant::from_std(sleep.deadline()),
            EventSleep::Tokio(sleep) => sleep.deadline(),
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self {
            EventSleep::Precise(sleep) => Pin::new(sleep).poll(cx),
            EventSleep::Tokio(sleep) => sleep.as_mut().poll(cx),
        }
    }
}

type Answer = std::result::Result<Response<MockBody>, Abort>;

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

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Answer {
    let mut response = Response::new(MockBody::Full(Some(body.into())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}

/// An answer written as its `steps` come due (server-sent events, or a
/// whole body written at its instant), with `content_type`; `active`
/// counts the request in flight until the stream ends or is dropped.
fn stream_answer(
    shared: &Arc<Shared>,
    steps: Vec<Step>,
    timings: Option<(TimingSlot, Arc<ConnState>)>,
    active: Active,
    content_type: &'static str,
) -> Answer {
    let stream = SseStream {
        steps: steps.into_iter(),
        timings,
        pending: None,
        sleep: None,
        stalled: None,
        shared: shared.clone(),
        finished: false,
        _active: active,
    };
    let mut response = Response::new(MockBody::Stream(Box::new(stream)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}

/// A non-streamed JSON answer sent at `end` (when its last token would
/// have been produced), with the request's fault: a stall holds it until
/// shutdown, a reset drops the connection, a truncated or malformed body
/// is cut or replaced.
async fn whole_answer(
    shared: &Shared,
    end: Instant,
    fault: Fault,
    body: impl FnOnce() -> String,
) -> Answer {
    match fault {
        Fault::Stall => {
            shared.stop.cancelled().await;
            return Err(Abort);
        }
        Fault::Reset => return Err(Abort),
        _ => {}
    }
    tokio::select! {
        () = tokio::time::sleep_until(end) => {}
        () = shared.stop.cancelled() => return Err(Abort),
    }
    let body = body();
    shared.completed.fetch_add(1, Ordering::Relaxed);
    match fault {
        Fault::Truncate => {
            let half = body.len() / 2;
            full(StatusCode::OK, "application/json", body[..half].to_owned())
        }
        Fault::Malformed => full(StatusCode::OK, "application/json", "{not json"),
        _ => full(StatusCode::OK, "application/json", body),
    }
}

/// A 400 answer, as OpenAI words a request it refuses.
fn bad_request(message: &str) -> Answer {
    error_body(StatusCode::BAD_REQUEST, message, "invalid_request_error")
}

/// The JSON body as the endpoint's request type, or the reason to refuse
/// it (for [`bad_request`]).
fn parse_body<T: serde::de::DeserializeOwned>(value: &Value) -> std::result::Result<T, String> {
    T::deserialize(value).map_err(|e| format!("invalid request: {e}"))
}

fn error_body(status: StatusCode, message: &str, kind: &str) -> Answer {
    let body = json!({"error": {"message": message, "type": kind, "code": status.as_u16()}});
    full(status, "application/json", body.to_string())
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

/// The fields of a completion request that the mock reads.
#[derive(Debug, Default, Deserialize)]
struct CompletionRequest {
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    prompt: Option<Value>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default)]
    tool_choice: Option<Value>,
}

/// The tool call a chat answer makes instead of text: one call of the
/// function `tool_choice` names, else of the first tool.
#[derive(Debug, Clone)]
struct ToolAnswer {
    /// The call's id: `call_mock_N`, N the request's number.
    id: String,
    /// The function called.
    name: String,
}

impl ToolAnswer {
    /// The call a chat request gets: when it offers tools and its
    /// `tool_choice` is not `"none"`.
    fn of(request: &CompletionRequest, index: u64) -> Option<Self> {
        Self::offered(&request.tools, request.tool_choice.as_ref(), index)
    }

    /// The call a request offering `tools` with `tool_choice` gets (chat's
    /// or the Responses API's shapes of either), `None` when it offers
    /// none or `tool_choice` is `"none"`.
    fn offered(tools: &[Value], tool_choice: Option<&Value>, index: u64) -> Option<Self> {
        if tools.is_empty() || tool_choice.and_then(Value::as_str) == Some("none") {
            return None;
        }
        let named = tool_choice
            .and_then(|c| c.get("function").unwrap_or(c).get("name"))
            .and_then(Value::as_str);
        let first = tools.first().and_then(|tool| {
            tool.get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| tool.get("name"))
                .and_then(Value::as_str)
        });
        Some(ToolAnswer {
            id: format!("call_mock_{index}"),
            name: named.or(first).unwrap_or("mock_function").to_owned(),
        })
    }

    /// The arguments' fragment carried by the event with output tokens
    /// `from..from + n` of `total` (the reasoning tokens before it
    /// excluded): words, opened by `{"text":"` and closed by `"}`, so that
    /// the fragments make one JSON object.
    fn fragment(from: u32, n: u32, first: bool, last: bool) -> String {
        let mut text = String::new();
        if first {
            text.push_str(r#"{"text":""#);
        }
        text.push_str(&words(from, n));
        if last {
            text.push_str(r#""}"#);
        }
        text
    }
}

#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// What was decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Status,
    Reset,
    Stall,
    Truncate,
    Malformed,
}

/// The draws of one request: core's seeded generator on the request's
/// own stream, with `rand_distr`'s normal.
struct Rng(SeededRng);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        Rng(rng::seeded(seed, stream))
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.0.random::<f64>()
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.uniform() < p
    }

    /// Standard normal.
    fn normal(&mut self) -> f64 {
        StandardNormal.sample(&mut self.0)
    }

    fn duration(&mut self, mean: Duration, std: Duration) -> Duration {
        if std.is_zero() {
            return mean;
        }
        let secs = mean.as_secs_f64() + std.as_secs_f64() * self.normal();
        Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::ZERO)
    }
}

/// The words output tokens are made of.
const WORDS: &[&str] = &[
    " the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", " and", " runs",
    " far", " away", " from", " home", " today",
];

fn words(from: u32, n: u32) -> String {
    let mut text = String::with_capacity(n as usize * 6);
    for i in from..from + n {
        text.push_str(WORDS[i as usize % WORDS.len()]);
    }
    text
}

fn prompt_tokens(shared: &Shared, request: &CompletionRequest) -> u32 {
    let mut text = String::new();
    let mut push = |s: &str| {
        text.push_str(s);
        text.push('\n');
    };
    if let Some(prompt) = &request.prompt {
        match prompt {
            Value::String(s) => push(s),
            other => push(&other.to_string()),
        }
    }
    for message in &request.messages {
        match message.get("content") {
            Some(Value::String(s)) => push(s),
            Some(Value::Array(parts)) => {
                for part in parts {
                    if let Some(s) = part.get("text").and_then(Value::as_str) {
                        push(s);
                    }
                }
            }
            _ => {}
        }
    }
    count_tokens(shared, &text)
}

async fn completion(
    shared: Arc<Shared>,
    conn: &Arc<ConnState>,
    request: Request<Incoming>,
    path: String,
    chat: bool,
) -> Answer {
    let Arrival {
        received,
        parts,
        arrived,
        active,
        others,
        index,
        value,
    } = match Arrival::read(&shared, request).await {
        Ok(arrival) => arrival,
        Err(answer) => return answer,
    };
    let parsed: CompletionRequest = match parse_body(&value) {
        Ok(p) => p,
        Err(reason) => return bad_request(&reason),
    };
    record_request(&shared, &parts, path, value);

    let config = &shared.config;
    let mut rng = Rng::new(config.seed, index);
    let fault = decide_fault(config, &mut rng, index);
    if fault == Fault::Status {
        return status_fault(config);
    }

    let limit = parsed.max_tokens.or(parsed.max_completion_tokens);
    let (tokens, finish) = output_length(config, &mut rng, limit);
    let tool = chat.then(|| ToolAnswer::of(&parsed, index)).flatten();
    // A tool call ends with `tool_calls`, unless a drawn length
    // (`output_tokens`) was cut by the request's limit; without
    // `output_tokens` the limit is the call's length, its arguments whole.
    let finish = match &tool {
        Some(_) if config.output_tokens.is_none() || finish == "stop" => "tool_calls",
        _ => finish,
    };
    let reasoning = if chat {
        config.reasoning_tokens.min(tokens)
    } else {
        0
    };
    let usage = Usage {
        prompt: prompt_tokens(&shared, &parsed),
        completion: tokens,
        reasoning,
        seconds: None,
    };
    let ids = Ids {
        index,
        chat,
        audio: false,
        model: &shared.model_json,
    };
    let load = queue_wait(config, others);
    let ttft = rng.duration(config.ttft, config.ttft_std) + load;
    if parsed.stream {
        let include_usage = parsed.stream_options.is_some_and(|o| o.include_usage);
        let steps = plan_stream(
            &shared,
            &ids,
            &mut rng,
            arrived + ttft,
            arrived,
            usage,
            finish,
            include_usage,
            fault,
            tool.as_ref(),
        );
        let timings = timing_slot(&shared, conn, &parts, index, received, arrived, steps.len());
        return stream_answer(&shared, steps, timings, active, "text/event-stream");
    }

    // Non-streamed: answer when the last token would have been produced.
    let end = last_token_at(config, &mut rng, arrived + ttft, tokens);
    whole_answer(&shared, end, fault, || {
        full_response(&ids, usage, finish, tool.as_ref())
    })
    .await
}

/// How many tokens to produce, and the finish reason: drawn around
/// `output_tokens` and capped by the request's `limit` (`length` when
/// capped, else `stop`), or without `output_tokens` the limit (default 16).
fn output_length(
    config: &MockServerConfig,
    rng: &mut Rng,
    limit: Option<u32>,
) -> (u32, &'static str) {
    match config.output_tokens {
        Some(mean) => {
            let drawn = (f64::from(mean) + config.output_tokens_std * rng.normal()).round();
            // Cast: clamped to the range of u32 first.
            let drawn = drawn.clamp(1.0, f64::from(u32::MAX)) as u32;
            match limit {
                Some(max) if drawn >= max => (max, "length"),
                _ => (drawn, "stop"),
            }
        }
        None => (limit.unwrap_or(16), "length"),
    }
}

/// When the last of `tokens` tokens is produced, the first at `first`: a
/// non-streamed answer is sent then.
fn last_token_at(config: &MockServerConfig, rng: &mut Rng, first: Instant, tokens: u32) -> Instant {
    let mut end = first;
    let per_event = config.tokens_per_event.max(1);
    let mut left = tokens.saturating_sub(per_event.min(tokens));
    while left > 0 {
        let k = per_event.min(left);
        end += event_gap(config, rng, k);
        left -= k;
    }
    end
}

/// Keeps a completion, embeddings or pooling request, with
/// `record_requests`.
fn record_request(shared: &Shared, parts: &hyper::http::request::Parts, path: String, body: Value) {
    if !shared.config.record_requests {
        return;
    }
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    lock(&shared.recorded).push(RecordedRequest {
        path,
        headers,
        body,
    });
}

/// The fault decided for request number `index` (see the module docs).
fn decide_fault(config: &MockServerConfig, rng: &mut Rng, index: u64) -> Fault {
    if config.error_after.is_some_and(|n| index >= n) || rng.chance(config.error_rate) {
        Fault::Status
    } else if rng.chance(config.reset_rate) {
        Fault::Reset
    } else if rng.chance(config.stall_rate) {
        Fault::Stall
    } else if rng.chance(config.truncate_rate) {
        Fault::Truncate
    } else if rng.chance(config.malformed_rate) {
        Fault::Malformed
    } else {
        Fault::None
    }
}

/// The answer of a request whose fault is [`Fault::Status`].
fn status_fault(config: &MockServerConfig) -> Answer {
    let status =
        StatusCode::from_u16(config.error_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    error_body(status, &config.error_message, "server_error")
}

/// With `record_timings`, the slot of a response's write instants, named
/// by its `x-request-id` (else its number), and its connection.
fn timing_slot(
    shared: &Shared,
    conn: &Arc<ConnState>,
    parts: &hyper::http::request::Parts,
    index: u64,
    received: Option<std::time::Instant>,
    arrived: Instant,
    events: usize,
) -> Option<(TimingSlot, Arc<ConnState>)> {
    shared.config.record_timings.then(|| {
        let id = parts
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| index.to_string(), str::to_owned);
        let slot = Arc::new(Mutex::new(StreamTimings {
            id,
            index,
            received_ns: received.map_or(0, wall_ns),
            arrived_ns: wall_ns(arrived.into_std()),
            events: Vec::with_capacity(events),
        }));
        lock(&shared.timings).push(slot.clone());
        (slot, conn.clone())
    })
}

/// The numbers in each vector of an embeddings or pooling answer, unless
/// the request asks for `dimensions`.
pub const EMBEDDING_DIMENSIONS: usize = 16;

/// The most `dimensions` a request may ask for.
const MAX_DIMENSIONS: u64 = 65_536;

/// Which pooled endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pooling {
    /// `/v1/embeddings`: vectors under `data[].embedding`.
    Embeddings,
    /// vLLM's `/pooling`: vectors under `data[].data`.
    Pooling,
}

/// The inputs of an embeddings or pooling request, each as its token
/// count: `input` as a string, a list of strings, a list of token ids or a
/// list of such lists; for `/pooling` without `input`, GuideLLM's `data`
/// (counted as its JSON text) as one input.
fn pooled_inputs(
    shared: &Shared,
    body: &Value,
    endpoint: Pooling,
) -> std::result::Result<Vec<u32>, String> {
    let count = |text: &str| count_tokens(shared, text);
    let ids = |list: &[Value]| -> Option<u32> {
        list.iter()
            .all(Value::is_u64)
            .then(|| u32::try_from(list.len()).unwrap_or(u32::MAX))
    };
    let input = match (body.get("input"), endpoint) {
        (Some(input), _) => input,
        (None, Pooling::Pooling) if body.get("data").is_some_and(|d| !d.is_null()) => {
            return Ok(vec![count(&body["data"].to_string())]);
        }
        (None, _) => return Err("`input` is required".to_owned()),
    };
    let inputs = match input {
        Value::String(text) => vec![count(text)],
        Value::Array(items) if items.is_empty() => return Err("`input` is empty".to_owned()),
        Value::Array(items) => {
            if let Some(n) = ids(items) {
                vec![n]
            } else {
                items
                    .iter()
                    .map(|item| match item {
                        Value::String(text) => Ok(count(text)),
                        Value::Array(list) => ids(list).ok_or(()),
                        _ => Err(()),
                    })
                    .collect::<std::result::Result<Vec<u32>, ()>>()
                    .map_err(|()| {
                        "`input` must be a string, a list of strings, a list of token ids or a \
                         list of such lists"
                            .to_owned()
                    })?
            }
        }
        _ => {
            return Err(
                "`input` must be a string, a list of strings, a list of token ids or a list of \
                 such lists"
                    .to_owned(),
            );
        }
    };
    Ok(inputs)
}

/// The tokens of `text`, by the configured tokenizer, else by words.
fn count_tokens(shared: &Shared, text: &str) -> u32 {
    let n = match &shared.config.tokenizer {
        Some(tokenizer) => tokenizer
            .count(text)
            .unwrap_or_else(|_| text.split_whitespace().count()),
        None => text.split_whitespace().count(),
    };
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A completion, embeddings or pooling request whose body has been read:
/// when it came and what it holds.
struct Arrival {
    /// When its handling began (with `record_timings`).
    received: Option<std::time::Instant>,
    parts: hyper::http::request::Parts,
    /// When its body was read: the latency model counts from here.
    arrived: Instant,
    /// Counts it in flight until dropped.
    active: Active,
    /// How many others were in flight when it arrived.
    others: u64,
    /// Its index among the server's requests (its generator's seed).
    index: u64,
    /// Its JSON body.
    value: Value,
}

impl Arrival {
    /// Reads `request`'s body as JSON and counts it in flight; a body that
    /// is not JSON gets its 400 answer as the error, a body cut off the
    /// connection's end.
    async fn read(
        shared: &Arc<Shared>,
        request: Request<Incoming>,
    ) -> std::result::Result<Arrival, Answer> {
        let (mut arrival, bytes) = Arrival::read_raw(shared, request).await?;
        match serde_json::from_slice(&bytes) {
            Ok(value) => {
                arrival.value = value;
                Ok(arrival)
            }
            Err(e) => Err(bad_request(&format!("invalid JSON body: {e}"))),
        }
    }

    /// Reads `request`'s whole body and counts it in flight; the body is
    /// returned as it came (the arrival's `value` is `null`), the error is
    /// a body cut off the connection's end.
    async fn read_raw(
        shared: &Arc<Shared>,
        request: Request<Incoming>,
    ) -> std::result::Result<(Arrival, Bytes), Answer> {
        let received = shared.config.record_timings.then(std::time::Instant::now);
        let (parts, body) = request.into_parts();
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => return Err(Err(Abort)),
        };
        let arrived = Instant::now();
        let (active, others) = Active::arrive(shared);
        let index = shared.requests.fetch_add(1, Ordering::Relaxed);
        let arrival = Arrival {
            received,
            parts,
            arrived,
            active,
            others,
            index,
            value: Value::Null,
        };
        Ok((arrival, bytes))
    }
}

/// What `others` requests in flight add to a request's first answer
/// (`ttft_per_request` each).
fn queue_wait(config: &MockServerConfig, others: u64) -> Duration {
    config
        .ttft_per_request
        .saturating_mul(u32::try_from(others).unwrap_or(u32::MAX))
}

/// `POST /v1/embeddings` and `POST /pooling`: one whole answer, `ttft`
/// after the request arrived (see the module docs).
async fn pooled(
    shared: Arc<Shared>,
    conn: &Arc<ConnState>,
    request: Request<Incoming>,
    path: String,
    endpoint: Pooling,
) -> Answer {
    let Arrival {
        received,
        parts,
        arrived,
        active,
        others,
        index,
        value,
    } = match Arrival::read(&shared, request).await {
        Ok(arrival) => arrival,
        Err(answer) => return answer,
    };
    let inputs = match pooled_inputs(&shared, &value, endpoint) {
        Ok(inputs) => inputs,
        Err(reason) => {
            return bad_request(&format!("invalid request: {reason}"));
        }
    };
    let dimensions = match value.get("dimensions") {
        None | Some(Value::Null) => EMBEDDING_DIMENSIONS,
        Some(d) => match d.as_u64().filter(|d| (1..=MAX_DIMENSIONS).contains(d)) {
            Some(d) => usize::try_from(d).unwrap_or(EMBEDDING_DIMENSIONS),
            None => {
                return bad_request(&format!(
                    "invalid request: `dimensions` must be 1 to {MAX_DIMENSIONS}"
                ));
            }
        },
    };
    let base64 = value.get("encoding_format").and_then(Value::as_str) == Some("base64");
    record_request(&shared, &parts, path, value);

    let config = &shared.config;
    let mut rng = Rng::new(config.seed, index);
    let fault = decide_fault(config, &mut rng, index);
    if fault == Fault::Status {
        return status_fault(config);
    }
    let load = queue_wait(config, others);
    let at = arrived + rng.duration(config.ttft, config.ttft_std) + load;
    let answer = whole_step(&shared, fault, at, || {
        pooled_answer(
            endpoint,
            index,
            &shared.model_json,
            &inputs,
            dimensions,
            base64,
            &mut rng,
        )
    })
    .await?;
    let timings = timing_slot(&shared, conn, &parts, index, received, arrived, 1);
    stream_answer(&shared, vec![answer], timings, active, "application/json")
}

/// A whole answer (of an embeddings, pooling or non-streamed audio
/// request) as the step that sends it at `at`, its write instants recorded
/// as one event of 0 tokens, with the request's fault: a stall holds it
/// until the server stops and a reset drops the connection (both as the
/// error), a truncated body is cut in half, a malformed one is not JSON.
async fn whole_step(
    shared: &Shared,
    fault: Fault,
    at: Instant,
    answer: impl FnOnce() -> String,
) -> std::result::Result<Step, Abort> {
    match fault {
        Fault::Stall => {
            shared.stop.cancelled().await;
            return Err(Abort);
        }
        Fault::Reset => return Err(Abort),
        _ => {}
    }
    let answer = answer();
    let answer = match fault {
        Fault::Truncate => Bytes::from(answer[..answer.len() / 2].to_owned()),
        Fault::Malformed => Bytes::from_static(b"{not json"),
        _ => Bytes::from(answer),
    };
    Ok(Step::Answer(at, answer))
}

/// A whole embeddings or pooling answer: a unit vector of `dimensions`
/// numbers per input (drawn from the request's generator), and the usage.
fn pooled_answer(
    endpoint: Pooling,
    index: u64,
    model: &str,
    inputs: &[u32],
    dimensions: usize,
    base64: bool,
    rng: &mut Rng,
) -> String {
    let mut data = Vec::with_capacity(inputs.len());
    for i in 0..inputs.len() {
        // Casts: an f32 vector, as servers answer.
        let mut vector: Vec<f32> = (0..dimensions).map(|_| rng.normal() as f32).collect();
        let norm = vector
            .iter()
            .map(|v| v * v)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        for v in &mut vector {
            *v /= norm;
        }
        let vector = if base64 {
            use base64::Engine as _;
            let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        } else {
            json!(vector)
        };
        data.push(match endpoint {
            Pooling::Embeddings => json!({"object": "embedding", "index": i, "embedding": vector}),
            Pooling::Pooling => json!({"object": "pooling", "index": i, "data": vector}),
        });
    }
    let prompt: u64 = inputs.iter().map(|&n| u64::from(n)).sum();
    let model: Value = serde_json::from_str(model).unwrap_or(Value::Null);
    match endpoint {
        Pooling::Embeddings => json!({
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
        }),
        Pooling::Pooling => json!({
            "id": format!("pool-mock-{index}"),
            "object": "list",
            "created": 0,
            "model": model,
            "data": data,
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt, "completion_tokens": 0},
        }),
    }
    .to_string()
}

/// The time an event of `k` tokens follows the previous one.
fn event_gap(config: &MockServerConfig, rng: &mut Rng, k: u32) -> Duration {
    if config.itl_std.is_zero() {
        return config.itl * k;
    }
    (0..k)
        .map(|_| rng.duration(config.itl, config.itl_std))
        .sum()
}

#[derive(Debug, Clone, Copy)]
struct Usage {
    prompt: u32,
    completion: u32,
    reasoning: u32,
    /// Seconds of an uploaded audio clip (audio endpoints).
    seconds: Option<f64>,
}

impl Usage {
    fn json(self) -> String {
        let mut s = format!(
            r#"{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{}"#,
            self.prompt,
            self.completion,
            u64::from(self.prompt) + u64::from(self.completion)
        );
        if self.reasoning > 0 {
            let _ = write!(
                s,
                r#","completion_tokens_details":{{"reasoning_tokens":{}}}"#,
                self.reasoning
            );
        }
        if let Some(seconds) = self.seconds {
            let _ = write!(s, r#","seconds":{}"#, Value::from(seconds));
        }
        s.push('}');
        s
    }
}

struct Ids<'a> {
    index: u64,
    /// Chat completions (else text completions, or audio).
    chat: bool,
    /// An audio endpoint's answer: vLLM's `transcription.chunk`s, with
    /// chat's `delta.content`.
    audio: bool,
    model: &'a str,
}

impl Ids<'_> {
    /// The `object` of a stream chunk.
    fn chunk_object(&self) -> &'static str {
        if self.audio {
            "transcription.chunk"
        } else if self.chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        }
    }

    fn head(&self, object: &str) -> String {
        let prefix = if self.audio {
            "trsc"
        } else if self.chat {
            "chatcmpl"
        } else {
            "cmpl"
        };
        format!(
            r#"{{"id":"{prefix}-mock-{}","object":"{object}","created":0,"model":{}"#,
            self.index, self.model
        )
    }
}

fn finish_json(finish: Option<&str>) -> String {
    finish.map_or_else(|| "null".to_string(), |f| format!("\"{f}\""))
}

/// One SSE event carrying `text` (content or reasoning).
fn chunk(ids: &Ids<'_>, text: &str, reasoning: bool, finish: Option<&str>) -> Bytes {
    let head = ids.head(ids.chunk_object());
    let text = Value::String(text.to_owned());
    let finish = finish_json(finish);
    let choice = if ids.chat || ids.audio {
        let field = if reasoning {
            "reasoning_content"
        } else {
            "content"
        };
        format!(r#"{{"index":0,"delta":{{"{field}":{text}}},"finish_reason":{finish}}}"#)
    } else {
        format!(r#"{{"index":0,"text":{text},"finish_reason":{finish}}}"#)
    };
    Bytes::from(format!("data: {head},\"choices\":[{choice}]}}\n\n"))
}

/// One SSE event carrying a fragment of a tool call's arguments; the first
/// fragment also carries the call's id and function name.
fn tool_chunk(
    ids: &Ids<'_>,
    tool: &ToolAnswer,
    arguments: &str,
    first: bool,
    finish: Option<&str>,
) -> Bytes {
    let head = ids.head("chat.completion.chunk");
    let arguments = Value::String(arguments.to_owned());
    let call = if first {
        format!(
            r#"{{"index":0,"id":{},"type":"function","function":{{"name":{},"arguments":{arguments}}}}}"#,
            Value::String(tool.id.clone()),
            Value::String(tool.name.clone()),
        )
    } else {
        format!(r#"{{"index":0,"function":{{"arguments":{arguments}}}}}"#)
    };
    let finish = finish_json(finish);
    Bytes::from(format!(
        "data: {head},\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{call}]}},\"finish_reason\":{finish}}}]}}\n\n"
    ))
}

#[allow(clippy::too_many_arguments)]
fn plan_stream(
    shared: &Shared,
    ids: &Ids<'_>,
    rng: &mut Rng,
    first: Instant,
    arrived: Instant,
    usage: Usage,
    finish: &str,
    include_usage: bool,
    fault: Fault,
    tool: Option<&ToolAnswer>,
) -> Vec<Step> {
    let config = &shared.config;
    let per_event = config.tokens_per_event.max(1);
    let mut steps = Vec::with_capacity((usage.completion / per_event) as usize + 4);
    if ids.chat {
        let head = ids.head("chat.completion.chunk");
        steps.push(Step::Send(
            arrived,
            Bytes::from(format!(
                "data: {head},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"finish_reason\":null}}]}}\n\n"
            )),
            0,
        ));
    }
    let total = usage.completion;
    let events = total.div_ceil(per_event);
    let cut = match fault {
        Fault::Truncate => Some((events / 2).max(1)),
        Fault::Reset | Fault::Stall | Fault::Malformed => Some(1),
        Fault::None | Fault::Status => None,
    };
    let mut at = first;
    let mut produced = 0u32;
    let mut event = 0u32;
    while produced < total {
        // An event never mixes reasoning and content.
        let reasoning = produced < usage.reasoning;
        let boundary = if reasoning { usage.reasoning } else { total };
        let k = per_event.min(boundary - produced);
        if event > 0 {
            at += event_gap(config, rng, k);
        }
        let last = produced + k == total;
        let finish_here = last && fault != Fault::Truncate;
        let bytes = match tool {
            Some(tool) if !reasoning => {
                let first = produced == usage.reasoning;
                let arguments = ToolAnswer::fragment(produced, k, first, last);
                tool_chunk(ids, tool, &arguments, first, finish_here.then_some(finish))
            }
            _ => chunk(
                ids,
                &words(produced, k),
                reasoning,
                finish_here.then_some(finish),
            ),
        };
        steps.push(Step::Send(at, bytes, k));
        produced += k;
        event += 1;
        if cut == Some(event) {
            match fault {
                Fault::Truncate => return steps,
                Fault::Reset => {
                    steps.push(Step::Flush);
                    steps.push(Step::Abort);
                    return steps;
                }
                Fault::Stall => {
                    steps.push(Step::Stall);
                    return steps;
                }
                Fault::Malformed => {
                    steps.push(Step::Send(
                        at,
                        Bytes::from_static(b"data: {\"choices\": [\n\n"),
                        0,
                    ));
                }
                Fault::None | Fault::Status => {}
            }
        }
    }
    if include_usage {
        let head = ids.head(ids.chunk_object());
        steps.push(Step::Send(
            at,
            Bytes::from(format!(
                "data: {head},\"choices\":[],\"usage\":{}}}\n\n",
                usage.json()
            )),
            0,
        ));
    }
    steps.push(Step::Send(at, Bytes::from_static(b"data: [DONE]\n\n"), 0));
    steps
}

/// A whole non-streamed response.
fn full_response(ids: &Ids<'_>, usage: Usage, finish: &str, tool: Option<&ToolAnswer>) -> String {
    let reasoning = usage.reasoning;
    let answer = usage.completion - reasoning;
    let (content, tool_calls) = match tool {
        Some(tool) => {
            let call = serde_json::json!([{
                "id": tool.id,
                "type": "function",
                "function": {
                    "name": tool.name,
                    "arguments": ToolAnswer::fragment(reasoning, answer, true, true),
                },
            }]);
            (Value::Null, format!(r#","tool_calls":{call}"#))
        }
        None => (Value::String(words(reasoning, answer)), String::new()),
    };
    let choice = if ids.chat {
        let reasoning_field = if reasoning > 0 {
            format!(
                r#","reasoning_content":{}"#,
                Value::String(words(0, reasoning))
            )
        } else {
            String::new()
        };
        format!(
            r#"{{"index":0,"message":{{"role":"assistant","content":{content}{reasoning_field}{tool_calls}}},"finish_reason":"{finish}"}}"#
        )
    } else {
        format!(r#"{{"index":0,"text":{content},"finish_reason":"{finish}"}}"#)
    };
    let head = ids.head(if ids.chat {
        "chat.completion"
    } else {
        "text_completion"
    });
    format!("{head},\"choices\":[{choice}],\"usage\":{}}}", usage.json())
}

/// The fields of a Responses API request that the mock reads.
#[derive(Debug, Default, Deserialize)]
struct ResponsesRequest {
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    max_output_tokens: Option<u32>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    store: Option<bool>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default)]
    tool_choice: Option<Value>,
}

/// The tokens of a Responses API request's own input: its instructions
/// and its `input` (a string, or items whose `content` is a string or a
/// list of parts with `text`).
fn responses_input_tokens(shared: &Shared, request: &ResponsesRequest) -> u32 {
    let mut text = String::new();
    let mut push = |s: &str| {
        text.push_str(s);
        text.push('\n');
    };
    if let Some(instructions) = &request.instructions {
        push(instructions);
    }
    match &request.input {
        Some(Value::String(s)) => push(s),
        Some(Value::Array(items)) => {
            for item in items {
                match item.get("content") {
                    Some(Value::String(s)) => push(s),
                    Some(Value::Array(parts)) => {
                        for part in parts {
                            if let Some(s) = part.get("text").and_then(Value::as_str) {
                                push(s);
                            }
                        }
                    }
                    _ => {
                        // A function call's output, or a function call's
                        // arguments.
                        for field in ["output", "arguments"] {
                            if let Some(s) = item.get(field).and_then(Value::as_str) {
                                push(s);
                            }
                        }
                    }
                }
            }
        }
        _ => {}
    }
    count_tokens(shared, &text)
}

/// `POST /v1/responses`: OpenAI's Responses API, with chat's latency model
/// and faults (see the module docs).
async fn responses(
    shared: Arc<Shared>,
    conn: &Arc<ConnState>,
    request: Request<Incoming>,
    path: String,
) -> Answer {
    let Arrival {
        received,
        parts,
        arrived,
        active,
        others,
        index,
        value,
    } = match Arrival::read(&shared, request).await {
        Ok(arrival) => arrival,
        Err(answer) => return answer,
    };
    let parsed: ResponsesRequest = match parse_body(&value) {
        Ok(p) => p,
        Err(reason) => return bad_request(&reason),
    };
    record_request(&shared, &parts, path, value);
    let history = match &parsed.previous_response_id {
        None => 0,
        Some(id) => match lock(&shared.responses).get(id) {
            Some(&tokens) => tokens,
            None => {
                return bad_request(&format!("Previous response with id '{id}' not found."));
            }
        },
    };

    let config = &shared.config;
    let mut rng = Rng::new(config.seed, index);
    let fault = decide_fault(config, &mut rng, index);
    if fault == Fault::Status {
        return status_fault(config);
    }
    let (tokens, finish) = output_length(config, &mut rng, parsed.max_output_tokens);
    let tool = ToolAnswer::of_responses(&parsed, index);
    let own_input = u64::from(responses_input_tokens(&shared, &parsed));
    let input = u32::try_from(history + own_input).unwrap_or(u32::MAX);
    let usage = Usage {
        prompt: input,
        completion: tokens,
        reasoning: config.reasoning_tokens.min(tokens),
        seconds: None,
    };
    let answer = ResponsesAnswer {
        id: format!("resp_mock_{index}"),
        model: &shared.model_json,
        usage,
        // As for chat: without `output_tokens` the limit is the call's
        // length, its arguments whole.
        capped: finish == "length"
            && parsed.max_output_tokens.is_some()
            && (tool.is_none() || config.output_tokens.is_some()),
        tool,
    };
    if fault == Fault::None && parsed.store != Some(false) {
        lock(&shared.responses).insert(answer.id.clone(), u64::from(input) + u64::from(tokens));
    }
    let load = queue_wait(config, others);
    let ttft = rng.duration(config.ttft, config.ttft_std) + load;
    if parsed.stream {
        let steps =
            plan_responses_stream(&shared, &answer, &mut rng, arrived + ttft, arrived, fault);
        let timings = timing_slot(&shared, conn, &parts, index, received, arrived, steps.len());
        return stream_answer(&shared, steps, timings, active, "text/event-stream");
    }

    let end = last_token_at(config, &mut rng, arrived + ttft, tokens);
    whole_answer(&shared, end, fault, || answer.object(true).to_string()).await
}

/// One Responses API answer of the mock.
struct ResponsesAnswer<'a> {
    id: String,
    /// The model id, as JSON text.
    model: &'a str,
    usage: Usage,
    /// Whether `max_output_tokens` cut the output short.
    capped: bool,
    /// The function call the answer makes in place of text, if any.
    tool: Option<ToolAnswer>,
}

impl ResponsesAnswer<'_> {
    fn message_id(&self) -> String {
        format!("msg_{}", self.id)
    }

    /// The response object: in progress and empty, or whole (its output
    /// items and usage).
    fn object(&self, done: bool) -> Value {
        let model: Value = serde_json::from_str(self.model).unwrap_or(Value::Null);
        let mut object = json!({
            "id": self.id,
            "object": "response",
            "created_at": 0,
            "status": "in_progress",
            "model": model,
            "output": [],
            "usage": null,
            "error": null,
            "incomplete_details": null,
        });
        if done {
            let reasoning = self.usage.reasoning;
            let mut output = Vec::new();
            if reasoning > 0 {
                output.push(json!({
                    "id": format!("rs_{}", self.id),
                    "type": "reasoning",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": words(0, reasoning)}],
                }));
            }
            let answer = self.usage.completion - reasoning;
            output.push(match &self.tool {
                Some(tool) => tool.item(&ToolAnswer::fragment(reasoning, answer, true, true), true),
                None => json!({
                    "id": self.message_id(),
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{
                        "type": "output_text",
                        "text": words(reasoning, answer),
                        "annotations": [],
                    }],
                }),
            });
            object["output"] = Value::Array(output);
            object["status"] = json!(if self.capped {
                "incomplete"
            } else {
                "completed"
            });
            if self.capped {
                object["incomplete_details"] = json!({"reason": "max_output_tokens"});
            }
            object["usage"] = json!({
                "input_tokens": self.usage.prompt,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": self.usage.completion,
                "output_tokens_details": {"reasoning_tokens": reasoning},
                "total_tokens": u64::from(self.usage.prompt) + u64::from(self.usage.completion),
            });
        }
        object
    }
}

/// One server-sent event of a Responses API stream: `event:` and `data:`
/// lines, the data its `type` and `fields`.
fn response_event(kind: &str, sequence: &mut u32, mut fields: Value) -> Bytes {
    fields["type"] = json!(kind);
    fields["sequence_number"] = json!(*sequence);
    *sequence += 1;
    Bytes::from(format!("event: {kind}\ndata: {fields}\n\n"))
}

/// The steps of a Responses API stream (see the module docs).
fn plan_responses_stream(
    shared: &Shared,
    answer: &ResponsesAnswer<'_>,
    rng: &mut Rng,
    first: Instant,
    arrived: Instant,
    fault: Fault,
) -> Vec<Step> {
    let config = &shared.config;
    let usage = answer.usage;
    let per_event = config.tokens_per_event.max(1);
    let mut steps = Vec::with_capacity((usage.completion / per_event) as usize + 8);
    let mut seq = 0u32;
    let message = answer.message_id();
    let send = |at: Instant, bytes: Bytes| Step::Send(at, bytes, 0);
    steps.push(send(
        arrived,
        response_event(
            "response.created",
            &mut seq,
            json!({"response": answer.object(false)}),
        ),
    ));
    steps.push(send(
        arrived,
        response_event(
            "response.in_progress",
            &mut seq,
            json!({"response": answer.object(false)}),
        ),
    ));
    let total = usage.completion;
    let events = total.div_ceil(per_event);
    let cut = match fault {
        Fault::Truncate => Some((events / 2).max(1)),
        Fault::Reset | Fault::Stall | Fault::Malformed => Some(1),
        Fault::None | Fault::Status => None,
    };
    let mut at = first;
    let mut produced = 0u32;
    let mut event = 0u32;
    while produced < total {
        // An event never mixes reasoning and output text.
        let reasoning = produced < usage.reasoning;
        let boundary = if reasoning { usage.reasoning } else { total };
        let k = per_event.min(boundary - produced);
        if event > 0 {
            at += event_gap(config, rng, k);
        }
        let output_index = usize::from(!reasoning && usage.reasoning > 0);
        if produced == usage.reasoning {
            // The message (or function call) item opens with its first
            // output.
            let opened = match &answer.tool {
                Some(tool) => responses_tools::call_added(tool, output_index, &mut seq),
                None => response_event(
                    "response.output_item.added",
                    &mut seq,
                    json!({"output_index": output_index, "item": {
                        "id": message, "type": "message", "status": "in_progress",
                        "role": "assistant", "content": []}}),
                ),
            };
            steps.push(send(at, opened));
        }
        let bytes = match &answer.tool {
            Some(tool) if !reasoning => {
                let first = produced == usage.reasoning;
                let fragment = ToolAnswer::fragment(produced, k, first, produced + k == total);
                responses_tools::arguments_delta(tool, output_index, &fragment, &mut seq)
            }
            _ => {
                let (kind, item) = if reasoning {
                    ("response.reasoning_text.delta", format!("rs_{}", answer.id))
                } else {
                    ("response.output_text.delta", message.clone())
                };
                let delta = json!({
                    "item_id": item,
                    "output_index": output_index,
                    "content_index": 0,
                    "delta": words(produced, k),
                });
                response_event(kind, &mut seq, delta)
            }
        };
        steps.push(Step::Send(at, bytes, k));
        produced += k;
        event += 1;
        if cut == Some(event) {
            match fault {
                Fault::Truncate => return steps,
                Fault::Reset => {
                    steps.push(Step::Flush);
                    steps.push(Step::Abort);
                    return steps;
                }
                Fault::Stall => {
                    steps.push(Step::Stall);
                    return steps;
                }
                Fault::Malformed => steps.push(send(
                    at,
                    Bytes::from_static(
                        b"event: response.output_text.delta\ndata: {\"type\": \"response.\n\n",
                    ),
                )),
                Fault::None | Fault::Status => {}
            }
        }
    }
    let done = answer.object(true);
    let output_index = usize::from(usage.reasoning > 0);
    let answered = usage.reasoning;
    if let Some(tool) = &answer.tool {
        let arguments = ToolAnswer::fragment(answered, total - answered, true, true);
        for bytes in responses_tools::call_done(tool, output_index, &arguments, &mut seq) {
            steps.push(send(at, bytes));
        }
    } else {
        let text = words(answered, total - answered);
        steps.push(send(
            at,
            response_event(
                "response.output_text.done",
                &mut seq,
                json!({"item_id": message, "output_index": output_index,
                       "content_index": 0, "text": text}),
            ),
        ));
        steps.push(send(
            at,
            response_event(
                "response.output_item.done",
                &mut seq,
                json!({"output_index": output_index,
                       "item": done["output"].as_array().and_then(|o| o.last()).cloned()}),
            ),
        ));
    }
    let last = if answer.capped {
        "response.incomplete"
    } else {
        "response.completed"
    };
    steps.push(send(
        at,
        response_event(last, &mut seq, json!({"response": done})),
    ));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_build_a_config_with_durations_and_rates() {
        let mut options = Map::new();
        options.insert("ttft".into(), json!("50ms"));
        options.insert("itl".into(), json!("10ms"));
        options.insert("output_tokens".into(), json!(32));
        options.insert("error_rate".into(), json!(0.25));
        let c = MockServerConfig::from_options(options).expect("valid");
        assert_eq!(c.ttft, Duration::from_millis(50));
        assert_eq!(c.itl, Duration::from_millis(10));
        assert_eq!(c.output_tokens, Some(32));
        assert!((c.error_rate - 0.25).abs() < 1e-12);

        // A latency without its unit: 0.01 ms or 0.01 s?
        let mut bare = Map::new();
        bare.insert("itl".into(), json!(0.01));
        let err = MockServerConfig::from_options(bare).expect_err("ambiguous");
        assert!(err.to_string().contains("`0.01ms` or `0.01s`"), "{err}");

        let mut bad = Map::new();
        bad.insert("error_rate".into(), json!(2));
        let err = MockServerConfig::from_options(bad).expect_err("out of range");
        assert_eq!(err.label(), "invalid_option");
        let mut unknown = Map::new();
        unknown.insert("ttfb".into(), json!(1));
        let err = MockServerConfig::from_options(unknown).expect_err("unknown");
        assert!(err.to_string().contains("ttft"));
    }

    #[test]
    fn every_default_help_prints_is_the_one_parsing_applies() {
        for spec in OPTIONS.iter().filter(|s| s.default.is_some()) {
            assert!(
                spec.default_text().is_some(),
                "`{}` names a default its struct lacks",
                spec.name
            );
        }
        let text = |name: &str| {
            OPTIONS
                .iter()
                .find(|s| s.name == name)
                .and_then(OptionSpec::default_text)
        };
        assert_eq!(text("model").as_deref(), Some("mock-model"));
        assert_eq!(text("ttft").as_deref(), Some("0s"));
        assert_eq!(text("tokens_per_event").as_deref(), Some("1"));
        assert_eq!(text("error_status").as_deref(), Some("500"));
        assert_eq!(text("announce_keep_alive").as_deref(), Some("true"));
        assert_eq!(text("shutdown_grace").as_deref(), Some("1s"));
        assert_eq!(text("output_tokens"), None);
        assert_eq!(text("keep_alive_timeout"), None);

        let c = MockServerConfig::from_options(Map::new()).expect("valid");
        let d = MockServerConfig::default();
        assert_eq!(c.model, d.model);
        assert_eq!(c.ttft, d.ttft);
        assert_eq!(c.itl, d.itl);
        assert_eq!(c.output_tokens, d.output_tokens);
        assert_eq!(c.tokens_per_event, d.tokens_per_event);
        assert_eq!(c.error_status, d.error_status);
        assert_eq!(c.error_rate.to_bits(), d.error_rate.to_bits());
        assert_eq!(c.shutdown_grace, d.shutdown_grace);
        assert_eq!(c.keep_alive_timeout, d.keep_alive_timeout);
        assert_eq!(c.announce_keep_alive, d.announce_keep_alive);
    }

    #[test]
    fn the_generator_is_reproducible_and_its_normal_draws_are_centred() {
        let mut a = Rng::new(7, 3);
        let mut b = Rng::new(7, 3);
        assert_eq!(a.uniform().to_bits(), b.uniform().to_bits());
        let mut r = Rng::new(1, 0);
        let n = 20_000;
        let mean: f64 = (0..n).map(|_| r.normal()).sum::<f64>() / f64::from(n);
        assert!(mean.abs() < 0.05, "mean {mean}");
    }
}
