//! The `openai_http` backend.
//!
//! This file is the top layer: [`OpenAiHttpBackend`], its state for one
//! startup..shutdown cycle (`Running`: the connection pool, the model, the
//! Responses API's remembered answers, the drain and interrupt tokens), the
//! [`Backend`] impl, and the send path (`execute`): build the body, send it
//! (once more on a fresh connection if it went unanswered), read the answer
//! streamed or whole, and make its [`GenerationResponse`] (token instants,
//! finish reason, tool calls). The layers below it, each a child module:
//!
//! - `body`: the JSON bodies of chat and text completions, embeddings and
//!   pooling requests: sampling fields, tools in the chat shape, messages
//!   and content parts, media as data URLs, `extra_body`;
//! - `responses`: the Responses API's body (`instructions`, `input` items,
//!   tools in its flat shape) and the conversation state `server_history`
//!   continues with `previous_response_id`; it shares `body`'s pieces, and
//!   `body` hands it a Responses request;
//! - `answer`: reading an answer, streamed or whole, into an `Output`
//!   (text, output events, usage, the finish reason as the server wrote
//!   it, tool calls assembled from their parts), and an embeddings or
//!   pooling answer or an audio upload into what the response holds of it;
//! - `client`: the `reqwest` client (headers, timeouts, TLS, HTTP/2), the
//!   warning for an unverified TLS target, and the message of an error
//!   body.
//!
//! Audio uploads are built by the crate's `audio` module, the wire types
//! read from answers are the `protocol` module's, connection reuse rules
//! the `keep_alive` module's.

mod answer;
mod body;
mod client;
mod responses;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use guidebench_core::backend::{Backend, ValidationReport};
use guidebench_core::clock::Clock;
use guidebench_core::options::KindArgs;
use guidebench_core::redact::redact_urls;
use guidebench_core::request::{
    FinishReason, GenerationRequest, GenerationResponse, RequestTimings, ToolCall, ToolCallOutput,
    ToolSet,
};
use guidebench_core::{Error, Result};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};
use tokio::time::timeout_at;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::answer::{Output, RawFinish, audio_stats, pooled_response};
use self::body::build_body;
// The path the crate's `audio` module takes it by.
pub(crate) use self::body::mime_from_path;
use self::client::{build_client, error_message, unverified_tls_warning};
use self::responses::{ResponseIds, responses_body};
use crate::audio::audio_upload;
use crate::config::{OpenAiConfig, RequestFormat, ToolCallMissing};
use crate::error::{OpenAiError, chain, snippet};
use crate::keep_alive::{KeepAlive, idle_timeout_for, unanswered};
use crate::protocol::{LineSplitter, OutputEvent, token_timestamps};

/// The registered name of this backend kind.
pub const KIND: &str = "openai_http";

/// How long a stream may stay open after the event that ended its answer
/// (`[DONE]`, `response.completed`): it is read to its end so that its
/// connection is reused, unless the server keeps it open longer; then it is
/// dropped, and the answer counts as ended at that event.
const STREAM_END_GRACE: Duration = Duration::from_millis(100);

/// How many characters of a bad body an error message quotes.
const SNIPPET_CHARS: usize = 200;

/// The `tracing` target of the event logged (at trace level, field
/// `text_bytes`) for each streamed event that carried output text, once it
/// was read and stamped: what a test waits on to know the client has read
/// an event.
pub const STREAM_EVENTS: &str = "guidebench_openai::stream_events";

/// A benchmark target behind an OpenAI-compatible HTTP API (vLLM, SGLang,
/// TGI, llama.cpp, OpenAI, ...).
///
/// One [`reqwest::Client`] (one connection pool) is built at
/// [`startup`](Backend::startup) and shared by every request of the run.
///
/// # Connections
///
/// Connections are reused no longer than the server allows (see the
/// `keep_alive` module): `Connection: close` is obeyed, and a
/// `Keep-Alive: timeout=T` shorter than the pool's idle timeout (90 s)
/// rebuilds the pool so that it drops idle connections before the server
/// closes them. A send on which the connection closed before any answer
/// arrived is sent once more on a fresh connection, never more; the
/// response's [`RequestTimings::retries`] counts it and its timings start
/// at the send that succeeded (the runner then shows the time lost as
/// dispatch delay).
///
/// # Timings
///
/// `start` is when `resolve` was called; every server-sent event that
/// carries output text (`content`, `text`, or reasoning in
/// `reasoning_content` / `reasoning`, which therefore counts towards TTFT)
/// is stamped with the instant its bytes were read, through the process
/// clock ([`Clock::global`]). The output token count is the server's
/// `usage.completion_tokens` (which includes reasoning tokens); how event
/// instants become per-token timestamps when a single event carries several
/// tokens is described at `token_timestamps` in the `protocol` module:
/// the usage's tokens are shared out over the events in proportion to the
/// text each carried, and an event carrying `k` tokens that arrived a gap
/// `g` after the previous one counts `g / k` per token towards inter-token
/// latency (the first event's tokens all share its instant, the first
/// token).
///
/// Reasoning text is not kept in the response. A response that reasoned
/// records in its timings when the first answer (content) token arrived
/// ([`RequestTimings::first_content`], the time to first output token) and
/// how many tokens were reasoning ([`RequestTimings::reasoning_tokens`]:
/// `usage.completion_tokens_details.reasoning_tokens`, else the tokens
/// before the first answer token).
///
/// # Tool calls
///
/// A chat request with [`ToolSet`] tools sends `tools` and `tool_choice`
/// (a turn that expects a call drops `max_tokens`, `ignore_eos` and
/// `stop`, as GuideLLM does). Streamed `delta.tool_calls` fragments are
/// merged by `index` into whole calls (a non-streamed `message.tool_calls`
/// is read whole); each fragment is an event carrying output, like text.
/// The calls, their count and the instant of the first tool-call event are
/// the response's [`GenerationResponse::tool_calls`]; a turn that expected
/// a call and got none then does what `tool_call_missing_behavior` says.
/// `finish_reason: "tool_calls"` is [`FinishReason::ToolCalls`].
///
/// With `request_format=responses` the tools are sent as GuideLLM's
/// Responses handler sends them: in that API's flat shape (a chat-shaped
/// definition's `function` fields lifted to the top), `tool_choice` a
/// string or `{"type": "function", "name"}`, and a turn that expects a
/// call drops `max_output_tokens`, `ignore_eos` and `stop`. An earlier
/// answer with calls is replayed as its `function_call` items, a tool
/// result as a `function_call_output` item. The answer's `function_call`
/// output items are its calls (`call_id` the id); streamed,
/// `response.output_item.added` opens a call, each
/// `response.function_call_arguments.delta` is an event carrying output
/// (as a chat fragment is), and `response.function_call_arguments.done` /
/// `response.output_item.done` give the whole arguments. An answer with
/// calls finishes with [`FinishReason::ToolCalls`] (unless capped at
/// `max_output_tokens`).
///
/// # Embeddings and pooling
///
/// With `request_format=embeddings` (GuideLLM's `/v1/embeddings`) or
/// `pooling` (vLLM's `/pooling`) the body is `{"model", "input"}` (plus
/// `extra_body`), as GuideLLM sends it, never streamed whatever `stream`
/// says. The answer is read whole: it must hold a vector per item of
/// `data` (`embedding`, or `data` for `/pooling`; numbers, rows of numbers
/// or base64), else the request fails as `malformed_response`. The
/// response has the usage's `prompt_tokens`, no output tokens and no token
/// instants: its latency is `start` to the whole answer, and TTFT,
/// inter-token latency and TPOT do not apply.
///
/// # Responses API
///
/// With `request_format=responses` (GuideLLM's `/v1/responses`) the body
/// is as GuideLLM builds it: `model`, `input` (a list of input items: user
/// messages with `input_text`, `input_image` and `input_file` parts,
/// assistant messages with their text), leading system messages as
/// `instructions`, `max_output_tokens` and the sampling fields of the chat
/// body, and `stream` (no `stream_options`). In a stream, each
/// `response.output_text.delta` is an event carrying output text (the
/// first one is the first token), reasoning deltas
/// (`response.reasoning_text.delta`, `response.reasoning_summary_text.delta`)
/// count as for chat, and the usage (`input_tokens`, `output_tokens`) comes
/// from `response.completed` (or `response.incomplete`, which at
/// `max_output_tokens` finishes with `length`). `response.failed` and
/// `error` events fail the request as `server_error` with the server's
/// message. A non-streamed answer's text is its `message` items'
/// `output_text`. A stream kept open after the event that ended its answer
/// (`response.completed`, or `[DONE]` for chat and text) is dropped
/// 100 ms later; the answer counts as ended at that event.
///
/// With `server_history=true` a later turn of a conversation, whose input
/// holds an earlier answer of this run followed by new messages, sends
/// `previous_response_id` (that answer's id) and only the messages after
/// it; the server keeps the history. The earlier answer is recognised by
/// the conversation up to it (instructions, input items and the answer's
/// text); when none is known (another process's answer, a history cut to
/// the last exchange, more than 65,536 answers ago) the whole history is
/// sent as input items, as it always is without `server_history`.
///
/// # Audio
///
/// With `request_format=transcriptions` or `translations` (GuideLLM's
/// `/v1/audio/transcriptions`, `/v1/audio/translations`) the request's one
/// audio clip is uploaded as `multipart/form-data` (see the `audio`
/// module). The answer is `{"text", "usage"}` whole, or streamed as vLLM's
/// `transcription.chunk`s or OpenAI's `transcript.text.delta` /
/// `transcript.text.done` events; each text delta is an event carrying
/// output, as a chat delta is. A whole answer without `text` fails as
/// `malformed_response`. Output tokens are the usage's completion
/// (output) tokens, else one per delta; prompt tokens the usage's prompt
/// (input) tokens, else 0. The response's [`GenerationResponse::audio`]
/// has the clip's length as its file states it (core's
/// [`probe_audio`](guidebench_core::media::probe_audio); else the usage's
/// `seconds`), its size and the audio tokens the server charged.
///
/// # Errors
///
/// Failures of one request are returned as [`Error::Backend`] wrapping an
/// [`OpenAiError`] whose [`label`](OpenAiError::label) is one of
/// `http_status`, `timeout`, `connection`, `stream_truncated`,
/// `malformed_response`, `server_error`, `audio_input`; the run goes on. An error the
/// server answered (an error status, an error event) also carries the
/// status and the first line of the server's message apart
/// ([`guidebench_core::Error::server_answer`]), which the request's record
/// keeps; an HTML error page is reduced to its title.
pub struct OpenAiHttpBackend {
    config: Arc<OpenAiConfig>,
    state: Mutex<Option<Arc<Running>>>,
}

impl std::fmt::Debug for OpenAiHttpBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiHttpBackend")
            .field("base_url", &self.config.base_url)
            .field("model", &self.config.model)
            .field("request_format", &self.config.request_format)
            .field("stream", &self.config.stream)
            .finish_non_exhaustive()
    }
}

/// How long the pool keeps idle connections until a server announces less.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// One startup..shutdown cycle.
struct Running {
    config: Arc<OpenAiConfig>,
    /// The pooled client, rebuilt when a server announces a shorter
    /// keep-alive timeout than its pool's idle timeout.
    pool: Mutex<Pool>,
    /// A client that keeps no idle connection: every request on it opens a
    /// fresh one. For the one retry of a send that went unanswered.
    fresh: reqwest::Client,
    completions_url: reqwest::Url,
    completions_label: String,
    model: tokio::sync::OnceCell<Arc<str>>,
    /// The ids of the Responses API answers later turns may continue, with
    /// `server_history`.
    response_ids: Mutex<ResponseIds>,
    /// Set (under the backend's state lock) when shutdown begins.
    closed: AtomicBool,
    /// Cancels requests still in flight when the drain time is over.
    cancel: CancellationToken,
    /// Cancelled by [`Backend::interrupt`]: sends and reads in flight
    /// stop, streams keep what they received.
    interrupt: CancellationToken,
    tracker: TaskTracker,
}

/// The pooled client and how long it keeps connections idle.
struct Pool {
    client: reqwest::Client,
    idle_timeout: Duration,
    /// The last `Keep-Alive` header seen, as the server wrote it.
    announced: Option<String>,
}

impl Running {
    /// The pooled client.
    fn client(&self) -> reqwest::Client {
        lock(&self.pool).client.clone()
    }

    /// Takes note of a response's `Keep-Alive` header: a timeout shorter
    /// than the pool's idle timeout rebuilds the pool with a shorter one
    /// (see the `keep_alive` module). Connections of the old pool close once
    /// their requests are done.
    fn observe(&self, headers: &HeaderMap) {
        let Some(value) = headers.get("keep-alive").and_then(|v| v.to_str().ok()) else {
            return;
        };
        let mut pool = lock(&self.pool);
        if pool.announced.as_deref() != Some(value) {
            pool.announced = Some(value.to_owned());
        }
        let Some(timeout) = KeepAlive::parse(value).timeout else {
            return;
        };
        let idle = idle_timeout_for(timeout);
        if idle >= pool.idle_timeout {
            return;
        }
        match build_client(&self.config, (!idle.is_zero()).then_some(idle)) {
            Ok(client) => {
                tracing::info!(
                    keep_alive = value,
                    idle_timeout_s = idle.as_secs_f64(),
                    "the server closes idle connections: the pool drops them sooner"
                );
                pool.client = client;
                pool.idle_timeout = idle;
            }
            Err(e) => tracing::warn!(error = %e, "cannot rebuild the HTTP client"),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; the Option inside is intact.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl OpenAiHttpBackend {
    /// A backend for the given configuration. Nothing is contacted until
    /// [`validate`](Backend::validate) or the first request.
    pub fn new(config: OpenAiConfig) -> Self {
        OpenAiHttpBackend {
            config: Arc::new(config),
            state: Mutex::new(None),
        }
    }

    /// Builds the backend from `kind=openai_http,target=...,...`.
    ///
    /// # Errors
    ///
    /// Core's option errors, see [`OpenAiConfig::from_args`].
    pub fn from_args(args: KindArgs) -> Result<Box<dyn Backend>> {
        Ok(Box::new(OpenAiHttpBackend::new(OpenAiConfig::from_args(
            args,
        )?)))
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    fn running(&self) -> Result<Arc<Running>> {
        lock(&self.state).clone().ok_or(Error::NotStarted)
    }

    fn url(&self, path: &str) -> Result<reqwest::Url> {
        let text = format!("{}{path}", self.config.base_url);
        reqwest::Url::parse(&text).map_err(|e| Error::InvalidOption {
            context: "backend openai_http".into(),
            key: "target".into(),
            reason: format!("`{text}` is not a URL: {e}"),
        })
    }

    /// `GET url` within `limit`, as a `NotReady` error on failure.
    async fn probe(
        running: &Running,
        url: &reqwest::Url,
        limit: Duration,
    ) -> std::result::Result<(u16, bytes::Bytes), OpenAiError> {
        let not_ready = |reason: String| OpenAiError::NotReady {
            url: shown(url),
            reason,
        };
        let work = async {
            let response = running
                .client()
                .get(url.clone())
                .send()
                .await
                .map_err(|e| not_ready(chain(&e)))?;
            running.observe(response.headers());
            let status = response.status().as_u16();
            let body = response.bytes().await.map_err(|e| not_ready(chain(&e)))?;
            Ok((status, body))
        };
        tokio::time::timeout(limit, work)
            .await
            .map_err(|_| not_ready(format!("no answer within {:.3}s", limit.as_secs_f64())))?
    }

    /// The model ids of `GET /v1/models`.
    async fn list_models(
        running: &Running,
        url: &reqwest::Url,
        limit: Duration,
    ) -> std::result::Result<Vec<String>, OpenAiError> {
        let (status, body) = Self::probe(running, url, limit).await?;
        let not_ready = |reason: String| OpenAiError::NotReady {
            url: shown(url),
            reason,
        };
        if !(200..300).contains(&status) {
            return Err(not_ready(format!(
                "HTTP {status}: {}",
                error_message(&body)
            )));
        }
        let value: Value = serde_json::from_slice(&body).map_err(|e| {
            not_ready(format!(
                "invalid JSON ({e}): {}",
                snippet(&String::from_utf8_lossy(&body), SNIPPET_CHARS)
            ))
        })?;
        Ok(value
            .get("data")
            .and_then(Value::as_array)
            .map(|models| {
                models
                    .iter()
                    .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The model to request: configured, or the first the server lists.
    async fn model(&self, running: &Running) -> Result<Arc<str>> {
        running
            .model
            .get_or_try_init(|| async {
                if let Some(model) = &self.config.model {
                    return Ok(Arc::from(model.as_str()));
                }
                let url = self.url("/v1/models")?;
                let models = Self::list_models(running, &url, self.config.timeout).await?;
                models
                    .into_iter()
                    .next()
                    .map(|m| Arc::from(m.as_str()))
                    .ok_or_else(|| {
                        Error::from(OpenAiError::NotReady {
                            url: shown(&url),
                            reason: "the server lists no models; set `model=`".into(),
                        })
                    })
            })
            .await
            .cloned()
    }

    async fn execute(
        &self,
        running: &Running,
        request: GenerationRequest,
    ) -> Result<GenerationResponse> {
        // Resolved once per run (by `validate`, or by the first request).
        let model = self.model(running).await?;
        let started = now();
        let deadline = tokio::time::Instant::from_std(started) + self.config.timeout;
        let responses = self.config.request_format == RequestFormat::Responses;
        let audio = self.config.request_format.audio();
        let url_label = running.completions_label.as_str();
        let mut content_type = HeaderValue::from_static("application/json");
        let mut upload = None;
        let (body, conversation) = if responses {
            let ids = self.config.server_history.then_some(&running.response_ids);
            let (body, conversation) = responses_body(&self.config, &model, &request, ids)?;
            (body, Some(conversation))
        } else if audio {
            let form = audio_upload(&self.config, &model, &request, url_label)?;
            content_type = HeaderValue::from_str(&form.content_type)
                .map_err(|e| Error::Config(format!("the upload's content type: {e}")))?;
            upload = Some((form.bytes, form.probe));
            (form.body, None)
        } else {
            (build_body(&self.config, &model, &request)?, None)
        };
        let body = bytes::Bytes::from(body);
        let timeout = || OpenAiError::Timeout {
            url: url_label.to_owned(),
            after: self.config.timeout,
        };
        // At most one retry, on a fresh connection, of a send that went
        // unanswered (see `keep_alive::unanswered`). The request's timings
        // start at the send that succeeded.
        let mut retries = 0u32;
        let (response, sent) = loop {
            let client = if retries == 0 {
                running.client()
            } else {
                running.fresh.clone()
            };
            let mut post = client
                .post(running.completions_url.clone())
                .header(CONTENT_TYPE, content_type.clone())
                .body(body.clone());
            if let Some(name) = &self.config.request_id_header {
                post = post.header(name.as_str(), request.id);
            }
            let sent = now();
            let send = post.send();
            match unless_interrupted(&running.interrupt, timeout_at(deadline, send))
                .await?
                .map_err(|_| timeout())?
            {
                Ok(response) => break (response, sent),
                Err(e) if retries == 0 && unanswered(&e) => {
                    tracing::debug!(
                        request = request.id,
                        error = %chain(&e),
                        "the connection closed before any answer: sending again on a fresh one"
                    );
                    retries += 1;
                }
                Err(e) => {
                    let during = if retries == 0 {
                        "sending the request"
                    } else {
                        "sending the request again on a fresh connection"
                    };
                    return Err(self.classify(&e, url_label, during).into());
                }
            }
        };
        running.observe(response.headers());
        let start = Clock::global().wall(sent);
        let status = response.status();
        if !status.is_success() {
            let body =
                unless_interrupted(&running.interrupt, timeout_at(deadline, response.bytes()))
                    .await?
                    .map_err(|_| timeout())?
                    .unwrap_or_default();
            return Err(OpenAiError::HttpStatus {
                url: url_label.to_owned(),
                status: status.as_u16(),
                message: error_message(&body),
            }
            .into());
        }
        if self.config.request_format.pools() {
            let body =
                unless_interrupted(&running.interrupt, timeout_at(deadline, response.bytes()))
                    .await?
                    .map_err(|_| timeout())?
                    .map_err(|e| self.classify(&e, url_label, "reading the response"))?;
            let mut answer =
                pooled_response(self.config.request_format, &request, &body, url_label)?;
            answer.timings = RequestTimings {
                start: Some(start),
                end: Some(Clock::global().wall(now())),
                retries,
                ..RequestTimings::default()
            };
            return Ok(answer);
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));

        let mut output = Output {
            responses,
            audio,
            ..Output::default()
        };
        let arrived;
        // When the answer ended, if not when the last byte was read.
        let mut end_at = None;
        let mut interrupted = false;
        if is_sse {
            let mut stream = response.bytes_stream();
            let mut splitter = LineSplitter::default();
            let mut finished = false;
            // When the event that ended the answer was read.
            let mut ended: Option<Instant> = None;
            loop {
                let limit = ended.map_or(deadline, |at| {
                    deadline.min(tokio::time::Instant::from_std(at) + STREAM_END_GRACE)
                });
                let next = tokio::select! {
                    biased;
                    // Interrupted: keep what arrived, drop the connection.
                    () = running.interrupt.cancelled(), if !finished => {
                        interrupted = true;
                        break;
                    }
                    next = timeout_at(limit, stream.next()) => match next {
                        Ok(next) => next,
                        // The answer is whole but the server keeps its
                        // stream open: drop it, the answer ended then.
                        Err(_) if finished => {
                            end_at = ended;
                            break;
                        }
                        Err(_) => return Err(timeout().into()),
                    },
                };
                let Some(chunk) = next else { break };
                let chunk = match chunk {
                    Ok(chunk) => chunk,
                    // The answer is whole: what fails after it is no loss.
                    Err(_) if finished => break,
                    Err(e) => {
                        return Err(self
                            .classify(
                                &e,
                                url_label,
                                &format!("reading the stream after {} events", output.events.len()),
                            )
                            .into());
                    }
                };
                if finished {
                    continue; // drain to the end, so the connection is reused
                }
                let read_at = now();
                finished =
                    splitter.feed(&chunk, |line| output.on_line(line, read_at, url_label))?;
                if finished {
                    ended = Some(read_at);
                }
            }
            arrived = end_at.unwrap_or_else(now);
            if !interrupted && !finished && !splitter.remainder().is_empty() {
                let line = std::mem::take(&mut splitter).remainder().to_vec();
                finished = output.on_line(&line, arrived, url_label)?;
            }
            interrupted &= !finished && output.finish.is_none();
            if !interrupted && !finished && output.finish.is_none() {
                return Err(OpenAiError::StreamTruncated {
                    url: url_label.to_owned(),
                    detail: if responses {
                        format!(
                            "after {} events carrying output, without response.completed",
                            output.events.len()
                        )
                    } else {
                        format!(
                            "after {} events carrying output, without a finish_reason or [DONE]",
                            output.events.len()
                        )
                    },
                }
                .into());
            }
        } else {
            let body =
                unless_interrupted(&running.interrupt, timeout_at(deadline, response.bytes()))
                    .await?
                    .map_err(|_| timeout())?
                    .map_err(|e| self.classify(&e, url_label, "reading the response"))?;
            arrived = now();
            output.on_body(&body, url_label)?;
        }

        if self.config.server_history
            && !interrupted
            && let (Some(conversation), Some(id)) = (conversation, output.response_id.take())
        {
            let key = conversation.answered(&output.text, output.tool_calls.values());
            lock(&running.response_ids).remember(key, id);
        }
        let audio_usage = output.audio_usage.unwrap_or_default();
        let usage = if audio {
            audio_usage.tokens()
        } else {
            output.usage.unwrap_or_default()
        };
        if let Some(reasoning) = usage.reasoning_tokens() {
            tracing::debug!(
                request = request.id,
                reasoning_tokens = reasoning,
                "reasoning output"
            );
        }
        let mut events = std::mem::take(&mut output.events);
        if events.is_empty()
            && usage.completion_tokens.is_none()
            && (!output.text.is_empty() || !output.tool_calls.is_empty())
        {
            events.push(OutputEvent {
                at: arrived,
                text_bytes: u32::try_from(output.text.len()).unwrap_or(u32::MAX),
            });
        }
        let (tokens, output_tokens) = token_timestamps(&events, usage.completion_tokens, arrived);
        let first_content = output
            .first_content
            .filter(|_| output.reasoned)
            .map(|at| Clock::global().wall(at));
        // The reasoning tokens: as the usage counts them, else those that
        // arrived before the answer's first (all of them without an answer).
        let reasoning_tokens = output.reasoned.then(|| {
            usage.reasoning_tokens().unwrap_or_else(|| {
                let before = first_content.map_or(tokens.len(), |first| {
                    tokens.iter().take_while(|t| **t < first).count()
                });
                u32::try_from(before).unwrap_or(u32::MAX)
            })
        });
        let finish_reason = match output.finish {
            None if interrupted => FinishReason::Interrupted,
            Some(RawFinish::Length) => FinishReason::Length,
            Some(RawFinish::Stop) if !audio && !request.sampling.stop.is_empty() => {
                FinishReason::Stop
            }
            Some(RawFinish::Stop) => FinishReason::Eos,
            Some(RawFinish::ToolCalls) => FinishReason::ToolCalls,
            // An audio request asks for no output limit.
            None if !audio && output_tokens >= request.sampling.max_tokens => FinishReason::Length,
            None => FinishReason::Eos,
        };
        let tool_calls = match &request.tools {
            Some(tools) if !audio => {
                self.tool_calls(tools, &mut output, arrived, interrupted, url_label)?
            }
            _ => None,
        };
        // An audio answer's prompt tokens are the server's, else none (the
        // data's text prompt was not sent).
        let prompt_tokens = if audio {
            usage.prompt_tokens
        } else {
            usage.prompt_tokens.or(request.expected_prompt_tokens)
        };
        Ok(GenerationResponse {
            images: None,
            tool_calls,
            audio: upload.map(|(bytes, probe)| audio_stats(bytes, probe, &audio_usage)),
            id: request.id,
            text: output.text,
            token_ids: Vec::new(),
            prompt_tokens: prompt_tokens.unwrap_or(0),
            output_tokens,
            finish_reason,
            timings: RequestTimings {
                start: Some(start),
                tokens,
                end: Some(Clock::global().wall(end_at.unwrap_or_else(now))),
                retries,
                first_content,
                reasoning_tokens,
                ..RequestTimings::default()
            },
        })
    }

    /// The answer's tool calls (when it made some, or was expected to),
    /// after `tool_call_missing_behavior` is applied to a turn that
    /// expected a call and got none.
    fn tool_calls(
        &self,
        tools: &ToolSet,
        output: &mut Output,
        arrived: Instant,
        interrupted: bool,
        url: &str,
    ) -> Result<Option<ToolCallOutput>> {
        let calls: Vec<ToolCall> = std::mem::take(&mut output.tool_calls)
            .into_values()
            .collect();
        if calls.is_empty() && !tools.expect_call {
            return Ok(None);
        }
        let first = (!calls.is_empty())
            .then(|| output.first_tool_call.unwrap_or(arrived))
            .map(|at| Clock::global().wall(at));
        let missing = calls.is_empty() && !interrupted;
        let answer = ToolCallOutput {
            count: u32::try_from(calls.len()).unwrap_or(u32::MAX),
            with_text: !output.text.is_empty(),
            first,
            calls,
        };
        if !missing {
            return Ok(Some(answer));
        }
        match self.config.tool_call_missing_behavior {
            ToolCallMissing::IgnoreContinue => Ok(Some(answer)),
            ToolCallMissing::IgnoreStop => Err(Error::Interrupted),
            ToolCallMissing::ErrorStop => Err(OpenAiError::ToolCallMissing {
                url: url.to_owned(),
            }
            .into()),
        }
    }

    fn classify(&self, error: &reqwest::Error, url: &str, during: &str) -> OpenAiError {
        if error.is_timeout() {
            OpenAiError::Timeout {
                url: url.to_owned(),
                after: self.config.connect_timeout,
            }
        } else {
            OpenAiError::Connection {
                url: url.to_owned(),
                reason: format!("{during}: {}", chain(error)),
            }
        }
    }
}

/// `work`, unless the run is interrupted first ([`Error::Interrupted`]).
async fn unless_interrupted<T>(
    interrupt: &CancellationToken,
    work: impl std::future::Future<Output = T>,
) -> Result<T> {
    tokio::select! {
        biased;
        () = interrupt.cancelled() => Err(Error::Interrupted),
        out = work => Ok(out),
    }
}

/// A URL as errors and reports show it: a password in it (`http://user:pass@host`)
/// is redacted; requests still use the real one.
fn shown(url: &reqwest::Url) -> String {
    redact_urls(url.as_str()).into_owned()
}

/// The instant of every reading a request's timings are made of: tokio's
/// clock, which is the system's monotonic clock, except in a test that
/// pauses tokio's time and so decides when each event arrived.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

#[async_trait]
impl Backend for OpenAiHttpBackend {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn startup(&self) -> Result<()> {
        let client = build_client(&self.config, Some(DEFAULT_IDLE_TIMEOUT))?;
        let fresh = build_client(&self.config, None)?;
        if let Some(warning) = unverified_tls_warning(&self.config) {
            tracing::warn!("{warning}");
        }
        let completions_url = self.url(self.config.request_format.path())?;
        let model = tokio::sync::OnceCell::new();
        let running = Running {
            config: self.config.clone(),
            pool: Mutex::new(Pool {
                client,
                idle_timeout: DEFAULT_IDLE_TIMEOUT,
                announced: None,
            }),
            fresh,
            completions_label: shown(&completions_url),
            completions_url,
            model,
            response_ids: Mutex::new(ResponseIds::default()),
            closed: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            interrupt: CancellationToken::new(),
            tracker: TaskTracker::new(),
        };
        *lock(&self.state) = Some(Arc::new(running));
        Ok(())
    }

    /// Makes the backend ready for the run: unless `validate=false`,
    /// `GET /health` must answer (a 404 or 405 counts as a server without
    /// the route); without a `model`, `GET /v1/models` names the first
    /// model. With both `validate=false` and `model=`, nothing is sent.
    async fn validate(&self) -> Result<ValidationReport> {
        let running = self.running()?;
        let limit = self.config.timeout.min(Duration::from_secs(60));
        let mut info = Map::new();
        if self.config.validate {
            let health_url = self.url("/health")?;
            let (health, body) = Self::probe(&running, &health_url, limit).await?;
            // Servers without /health (OpenAI itself) answer 404 or 405.
            if !((200..300).contains(&health) || health == 404 || health == 405) {
                return Err(OpenAiError::NotReady {
                    url: shown(&health_url),
                    reason: format!(
                        "HTTP {health}: {} (validate=false skips this check)",
                        error_message(&body)
                    ),
                }
                .into());
            }
            info.insert("health_status".into(), json!(health));
        }
        let model = match &self.config.model {
            Some(model) => model.clone(),
            None => {
                let models_url = self.url("/v1/models")?;
                let models = Self::list_models(&running, &models_url, limit).await?;
                let first = models.first().cloned().ok_or_else(|| {
                    Error::from(OpenAiError::NotReady {
                        url: shown(&models_url),
                        reason: "the server lists no models; set `model=`".into(),
                    })
                })?;
                info.insert("models".into(), json!(models));
                first
            }
        };
        let _ = running.model.set(Arc::from(model.as_str()));
        info.insert("target".into(), json!(redact_urls(&self.config.base_url)));
        info.insert("endpoint".into(), json!(running.completions_label));
        info.insert("model".into(), json!(model));
        info.insert("validated".into(), json!(self.config.validate));
        info.insert(
            "request_format".into(),
            json!(self.config.request_format.name()),
        );
        if self.config.request_format == RequestFormat::Responses {
            info.insert("server_history".into(), json!(self.config.server_history));
        }
        // Embeddings and pooling answers are never streamed.
        info.insert(
            "stream".into(),
            json!(self.config.stream && !self.config.request_format.pools()),
        );
        info.insert("http2".into(), json!(self.config.http2));
        {
            let pool = lock(&running.pool);
            if let Some(announced) = &pool.announced {
                info.insert("keep_alive".into(), json!(announced));
            }
            info.insert(
                "pool_idle_timeout_s".into(),
                json!(pool.idle_timeout.as_secs_f64()),
            );
        }
        Ok(ValidationReport {
            load_time: None,
            info,
        })
    }

    async fn resolve(&self, request: GenerationRequest) -> Result<GenerationResponse> {
        let (running, _token) = {
            let state = lock(&self.state);
            let running = state.clone().ok_or(Error::NotStarted)?;
            if running.closed.load(Ordering::Acquire) {
                return Err(Error::ShuttingDown);
            }
            if running.interrupt.is_cancelled() {
                return Err(Error::Interrupted);
            }
            let token = running.tracker.token();
            (running, token)
        };
        tokio::select! {
            biased;
            () = running.cancel.cancelled() => Err(Error::ShuttingDown),
            result = self.execute(&running, request) => result,
        }
    }

    /// Stops what is in flight: a request not answered yet ends with
    /// [`Error::Interrupted`]; a stream ends at once with the events it
    /// received and [`FinishReason::Interrupted`] (its connection is
    /// dropped).
    fn interrupt(&self) {
        if let Some(running) = lock(&self.state).as_ref() {
            running.interrupt.cancel();
        }
    }

    async fn shutdown(&self) -> Result<()> {
        let running = {
            let state = lock(&self.state);
            let Some(running) = state.clone() else {
                return Ok(());
            };
            running.closed.store(true, Ordering::Release);
            running
        };
        running.tracker.close();
        if tokio::time::timeout(self.config.drain_timeout, running.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("cancelling the requests still in flight at shutdown");
            running.cancel.cancel();
            running.tracker.wait().await;
        }
        let mut state = lock(&self.state);
        if state.as_ref().is_some_and(|r| Arc::ptr_eq(r, &running)) {
            *state = None;
        }
        Ok(())
    }
}

/// Fixtures the child modules' tests share: a configuration, a request's
/// body as JSON, a tool set.
#[cfg(test)]
mod fixtures {
    use guidebench_core::request::{GenerationRequest, ToolSet};
    use serde_json::{Value, json};

    use super::body::build_body;
    use super::responses::responses_body;
    use crate::config::{OpenAiConfig, RequestFormat};

    pub(super) fn config(format: RequestFormat) -> OpenAiConfig {
        let mut c = OpenAiConfig::new("http://127.0.0.1:1").expect("config");
        c.request_format = format;
        c
    }

    /// The body the send path builds for `request` (a Responses API body
    /// without server-side history).
    pub(super) fn body_of(config: &OpenAiConfig, request: &GenerationRequest) -> Value {
        let body = match config.request_format {
            RequestFormat::Responses => responses_body(config, "m", request, None).map(|(b, _)| b),
            _ => build_body(config, "m", request),
        };
        serde_json::from_slice(&body.expect("body")).expect("json")
    }

    pub(super) fn weather_tools(expect_call: bool) -> ToolSet {
        ToolSet {
            tools: vec![
                json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}),
                json!({"type": "function", "name": "lookup", "description": "flat", "extra": 1}),
            ],
            choice: guidebench_core::request::ToolChoice::Required,
            expect_call,
        }
    }
}
