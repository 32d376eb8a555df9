//! The `openai_http` backend.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use futures::StreamExt;
use guidebench_core::backend::{Backend, ValidationReport};
use guidebench_core::clock::Clock;
use guidebench_core::options::KindArgs;
use guidebench_core::redact::redact_urls;
use guidebench_core::request::{
    AudioStats, ChatMessage, ContentPart, FinishReason, GenerationRequest, GenerationResponse,
    MediaSource, MessageTool, RequestInput, RequestTimings, ToolCall, ToolCallOutput, ToolChoice,
    ToolSet,
};
use guidebench_core::template::{Placeholders, PromptFormatter, RequestFormat as TemplateFormat};
use guidebench_core::tokenizer::SpecialTokens;
use guidebench_core::{Error, Result};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};
use tokio::time::timeout_at;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::audio::audio_upload;
use crate::config::{OpenAiConfig, RequestFormat, ToolCallMissing};
use crate::error::{OpenAiError, chain, snippet};
use crate::keep_alive::{KeepAlive, idle_timeout_for, unanswered};
use crate::protocol::{
    AudioBody, AudioUsage, Body, FunctionPart, LineSplitter, OutputEvent, OutputItem, PooledBody,
    ResponseObject, ResponsesEvent, ToolCallPart, Usage, data_payload, token_timestamps,
};

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

/// What an audio request sent: the clip's length as its file states it
/// (else the seconds the server's usage says it heard), its size, and the
/// tokens the server charged for it.
fn audio_stats(
    bytes: u64,
    probe: Option<guidebench_core::media::AudioProbe>,
    usage: &AudioUsage,
) -> AudioStats {
    AudioStats {
        seconds: probe
            .map(|p| p.seconds)
            .or(usage.seconds.filter(|s| s.is_finite() && *s >= 0.0)),
        samples: probe.map(|p| p.samples),
        bytes,
        tokens: usage.audio_tokens(),
    }
}

/// The response to an embeddings or pooling request from its whole
/// answer: the vectors must be there (`data[].embedding`, or `data[].data`
/// for `/pooling`), the prompt tokens are the usage's (else the count the
/// data item expected), and there are no output tokens. Timings are the
/// caller's to set.
fn pooled_response(
    format: RequestFormat,
    request: &GenerationRequest,
    body: &[u8],
    url: &str,
) -> std::result::Result<GenerationResponse, OpenAiError> {
    let malformed = |reason: String| OpenAiError::MalformedResponse {
        url: url.to_owned(),
        reason,
        snippet: snippet(&String::from_utf8_lossy(body), SNIPPET_CHARS),
    };
    let answer: PooledBody<'_> =
        serde_json::from_slice(body).map_err(|e| malformed(e.to_string()))?;
    if let Some(error) = &answer.error {
        return Err(OpenAiError::ServerError {
            url: url.to_owned(),
            message: error.message(),
        });
    }
    let field = match format {
        RequestFormat::Pooling => "data",
        _ => "embedding",
    };
    let pooled = answer.vectors(field).map_err(malformed)?;
    tracing::trace!(
        request = request.id,
        vectors = pooled.vectors,
        dimensions = pooled.dimensions,
        "pooled answer"
    );
    Ok(GenerationResponse {
        images: None,
        id: request.id,
        text: String::new(),
        token_ids: Vec::new(),
        prompt_tokens: pooled
            .usage
            .and_then(|u| u.prompt_tokens)
            .or(request.expected_prompt_tokens)
            .unwrap_or(0),
        output_tokens: 0,
        finish_reason: FinishReason::Eos,
        timings: RequestTimings::default(),
        tool_calls: None,
        audio: None,
    })
}

/// The instant of every reading a request's timings are made of: tokio's
/// clock, which is the system's monotonic clock, except in a test that
/// pauses tokio's time and so decides when each event arrived.
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

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The HTTP client for `config`; `idle_timeout` is how long its pool keeps
/// idle connections, `None` keeps none (a fresh connection per request).
fn build_client(config: &OpenAiConfig, idle_timeout: Option<Duration>) -> Result<reqwest::Client> {
    let invalid = |reason: String| Error::InvalidOption {
        context: "backend openai_http".into(),
        key: "headers".into(),
        reason,
    };
    let mut headers = HeaderMap::new();
    if let Some(key) = &config.api_key {
        let mut value =
            HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| Error::InvalidOption {
                context: "backend openai_http".into(),
                key: "api_key".into(),
                reason: "contains characters not allowed in an HTTP header".into(),
            })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    for (name, value) in &config.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| invalid(format!("`{name}` is not a header name: {e}")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|e| invalid(format!("the value of `{name}` is not allowed: {e}")))?;
        headers.insert(name, value);
    }
    let url = reqwest::Url::parse(&config.base_url).map_err(|e| Error::InvalidOption {
        context: "backend openai_http".into(),
        key: "target".into(),
        reason: format!("`{}` is not a URL: {e}", config.base_url),
    })?;
    let mut builder = reqwest::Client::builder()
        .default_headers(headers)
        .connect_timeout(config.connect_timeout)
        .tcp_nodelay(true);
    builder = match idle_timeout {
        Some(idle) => builder
            .pool_idle_timeout(idle)
            .pool_max_idle_per_host(usize::MAX),
        None => builder.pool_max_idle_per_host(0),
    };
    if matches!(
        url.host_str(),
        Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
    ) {
        builder = builder.no_proxy();
    }
    if !config.verify {
        builder = builder
            .danger_accept_invalid_certs(true)
            .danger_accept_invalid_hostnames(true);
    }
    builder = match (config.http2, url.scheme()) {
        (true, "http") => builder.http2_prior_knowledge(),
        (true, _) => builder,
        (false, _) => builder.http1_only(),
    };
    builder
        .build()
        .map_err(|e| Error::Config(format!("cannot build the HTTP client: {}", chain(&e))))
}

/// The warning for a run whose `https://` target's certificate is not
/// verified (`verify=false`), naming the target's origin (scheme, host,
/// port: no credentials, no path); `None` when certificates are verified
/// or the target is `http://`, where `verify` changes nothing.
fn unverified_tls_warning(config: &OpenAiConfig) -> Option<String> {
    if config.verify {
        return None;
    }
    let url = reqwest::Url::parse(&config.base_url).ok()?;
    (url.scheme() == "https").then(|| {
        format!(
            "TLS certificates of {} are not verified (verify=false)",
            url.origin().ascii_serialization()
        )
    })
}

/// A finish reason as the server wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RawFinish {
    Length,
    Stop,
    /// `tool_calls` (or the older `function_call`).
    ToolCalls,
}

/// What has arrived of one response.
#[derive(Debug, Default)]
struct Output {
    text: String,
    events: Vec<OutputEvent>,
    usage: Option<Usage>,
    finish: Option<RawFinish>,
    /// Whether any chunk carried reasoning text.
    reasoned: bool,
    /// When the first event carrying answer text (not reasoning) was read,
    /// once some reasoning came before it.
    first_content: Option<Instant>,
    /// Whether the answer is the Responses API's (typed events, `output`
    /// items) rather than chat or text completions' (`choices`).
    responses: bool,
    /// The Responses API answer's id.
    response_id: Option<String>,
    /// Whether the answer is an audio endpoint's (`text` and an audio
    /// usage; vLLM's transcription chunks or OpenAI's `transcript.text.*`
    /// events).
    audio: bool,
    /// The usage of an audio answer.
    audio_usage: Option<AudioUsage>,
    /// The tool calls assembled so far, by their `index`.
    tool_calls: BTreeMap<u32, ToolCall>,
    /// How many tool-call parts (whole calls or stream fragments) arrived.
    tool_parts: usize,
    /// When the first event carrying a tool-call part was read.
    first_tool_call: Option<Instant>,
    /// The Responses API function call streamed last (by its
    /// `output_index`), for events that do not name theirs.
    current_call: Option<u32>,
}

impl Output {
    /// Handles one SSE line; `Ok(true)` at `[DONE]`.
    fn on_line(
        &mut self,
        line: &[u8],
        now: Instant,
        url: &str,
    ) -> std::result::Result<bool, OpenAiError> {
        let Some(payload) = data_payload(line) else {
            return Ok(false);
        };
        let payload = payload.trim_ascii();
        if payload.is_empty() {
            return Ok(false);
        }
        if payload == b"[DONE]" {
            return Ok(true);
        }
        let content_before = self.text.len();
        let parts_before = self.tool_parts;
        let (text_bytes, done) = if self.responses {
            self.absorb_event(payload, url)?
        } else if self.audio {
            self.absorb_audio(payload, url)?
        } else {
            (self.absorb(payload, url)?, false)
        };
        let called = self.tool_parts > parts_before;
        if called && self.first_tool_call.is_none() {
            self.first_tool_call = Some(now);
        }
        // A tool call is answer output, as GuideLLM counts it for TTFOT.
        if self.reasoned
            && self.first_content.is_none()
            && (self.text.len() > content_before || called)
        {
            self.first_content = Some(now);
        }
        if text_bytes > 0 {
            self.events.push(OutputEvent {
                at: now,
                text_bytes: u32::try_from(text_bytes).unwrap_or(u32::MAX),
            });
            tracing::trace!(target: STREAM_EVENTS, text_bytes, "stream event read");
        }
        Ok(done)
    }

    /// Handles a whole non-streamed body.
    fn on_body(&mut self, body: &[u8], url: &str) -> std::result::Result<(), OpenAiError> {
        if self.responses {
            let answer: ResponseObject<'_> = parse_json(body, url)?;
            if let Some(error) = &answer.error {
                return Err(server_error(url, error.message()));
            }
            if answer.status.as_deref() == Some("failed") {
                return Err(server_error(url, "the response failed".to_owned()));
            }
            let (text, reasoning) = answer.texts();
            self.text.push_str(&text);
            self.reasoned |= !reasoning.is_empty();
            self.absorb_function_calls(&answer);
            self.end_response(&answer);
            return Ok(());
        }
        if self.audio {
            let answer: AudioBody<'_> = parse_json(body, url)?;
            if let Some(error) = &answer.error {
                return Err(server_error(url, error.message()));
            }
            // GuideLLM: an answer without `text` is unusable; "" is a
            // valid transcript (silence).
            let Some(text) = &answer.text else {
                return Err(OpenAiError::MalformedResponse {
                    url: url.to_owned(),
                    reason: "the answer has no `text`: no transcript".into(),
                    snippet: snippet(&String::from_utf8_lossy(body), SNIPPET_CHARS),
                });
            };
            self.text.push_str(text);
            self.audio_usage = answer.usage;
            return Ok(());
        }
        self.absorb(body, url).map(|_| ())
    }

    /// Parses one event of a streamed audio answer: a vLLM
    /// `transcription.chunk` (`choices[].delta.content`, a usage chunk) or
    /// an OpenAI `transcript.text.delta` / `transcript.text.done` event;
    /// the bytes of text it carried, and whether it ended the answer
    /// (`transcript.text.done`).
    fn absorb_audio(
        &mut self,
        json: &[u8],
        url: &str,
    ) -> std::result::Result<(usize, bool), OpenAiError> {
        let event: AudioBody<'_> = parse_json(json, url)?;
        if let Some(error) = &event.error {
            return Err(server_error(url, error.message()));
        }
        if let Some(usage) = event.usage {
            self.audio_usage = Some(usage);
        }
        match event.kind.as_deref() {
            Some("transcript.text.delta") => {
                let delta = event.delta.as_deref().unwrap_or("");
                self.text.push_str(delta);
                Ok((delta.len(), false))
            }
            Some("transcript.text.done") => {
                // The deltas made the text; a stream without them has it here.
                if self.text.is_empty()
                    && let Some(text) = &event.text
                {
                    self.text.push_str(text);
                }
                self.finish = Some(RawFinish::Stop);
                Ok((0, true))
            }
            Some("error") => Err(server_error(url, "the transcription failed".to_owned())),
            _ => {
                let mut carried = 0;
                for choice in &event.choices {
                    if let (Some(text), _) = choice.texts() {
                        self.text.push_str(text);
                        carried += text.len();
                    }
                    if self.finish.is_none()
                        && let Some(reason) = choice.finish_reason.as_deref()
                    {
                        self.finish = Some(if reason == "length" {
                            RawFinish::Length
                        } else {
                            RawFinish::Stop
                        });
                    }
                }
                Ok((carried, false))
            }
        }
    }

    /// Parses one event of a streamed Responses API answer; the bytes of
    /// output text (content and reasoning) it carried, and whether it ended
    /// the answer (`response.completed`, `response.incomplete`).
    fn absorb_event(
        &mut self,
        json: &[u8],
        url: &str,
    ) -> std::result::Result<(usize, bool), OpenAiError> {
        let event: ResponsesEvent<'_> = parse_json(json, url)?;
        if let Some(error) = &event.error {
            return Err(server_error(url, error.message()));
        }
        if self.response_id.is_none()
            && let Some(id) = event.response.as_ref().and_then(|r| r.id.as_deref())
        {
            self.response_id = Some(id.to_owned());
        }
        let delta = event.delta.as_deref().unwrap_or("");
        match event.kind.as_deref().unwrap_or("") {
            "response.output_text.delta" => {
                self.text.push_str(delta);
                Ok((delta.len(), false))
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                self.reasoned |= !delta.is_empty();
                Ok((delta.len(), false))
            }
            // A function call's arguments are generated tokens, not text:
            // each fragment is an output event, as chat's are.
            "response.function_call_arguments.delta" => {
                let call = self.streamed_call(event.output_index);
                call.arguments.push_str(delta);
                self.tool_parts += 1;
                Ok((delta.len().max(1), false))
            }
            "response.function_call_arguments.done" => {
                let finished = OutputItem {
                    name: event.name.clone(),
                    arguments: event.arguments.clone(),
                    ..OutputItem::default()
                };
                Ok((self.finish_call(event.output_index, &finished), false))
            }
            "response.output_item.added" => match &event.item {
                Some(item) if item.is_function_call() => {
                    self.current_call = Some(
                        event
                            .output_index
                            .unwrap_or_else(|| next_index(&self.tool_calls)),
                    );
                    Ok((self.finish_call(event.output_index, item), false))
                }
                _ => Ok((0, false)),
            },
            "response.output_item.done" => match &event.item {
                Some(item) if item.is_function_call() => {
                    Ok((self.finish_call(event.output_index, item), false))
                }
                _ => Ok((0, false)),
            },
            "response.completed" | "response.incomplete" => {
                let mut carried = 0;
                if let Some(answer) = &event.response {
                    // Calls the stream did not send as events.
                    if self.tool_calls.is_empty() {
                        carried = self.absorb_function_calls(answer);
                    }
                    self.end_response(answer);
                }
                Ok((carried, true))
            }
            "response.failed" => {
                let message = event
                    .response
                    .as_ref()
                    .and_then(|r| r.error.as_ref())
                    .map_or_else(|| "the response failed".to_owned(), |e| e.message());
                Err(server_error(url, message))
            }
            "error" => Err(server_error(url, event.error_message())),
            _ => Ok((0, false)),
        }
    }

    /// Takes the usage, the id and how it finished from a whole Responses
    /// API answer (`response.completed` says nothing of why it stopped: the
    /// output length decides, as for a finish without a reason).
    fn end_response(&mut self, answer: &ResponseObject<'_>) {
        if let Some(usage) = answer.usage {
            self.usage = Some(usage.into());
        }
        if let Some(id) = &answer.id {
            self.response_id = Some(id.to_string());
        }
        if answer.hit_max_output_tokens() {
            self.finish = Some(RawFinish::Length);
        } else if !self.tool_calls.is_empty() {
            self.finish = Some(RawFinish::ToolCalls);
        } else if answer.status.as_deref() == Some("incomplete") {
            self.finish = Some(RawFinish::Stop);
        }
    }

    /// Reads the `function_call` items of a whole Responses API answer as
    /// tool calls (`call_id` is the id), in the order of `output`; the
    /// weight they carry as output (as [`Output::absorb_tool_call`]
    /// counts a whole call).
    fn absorb_function_calls(&mut self, answer: &ResponseObject<'_>) -> usize {
        let mut carried = 0;
        for (position, item) in answer.output.iter().flatten().enumerate() {
            if item.is_function_call() {
                let part = ToolCallPart {
                    index: u32::try_from(position).ok(),
                    id: item.call_id.clone(),
                    function: Some(FunctionPart {
                        name: item.name.clone(),
                        arguments: item.arguments.clone(),
                    }),
                };
                carried += self.absorb_tool_call(position, &part);
            }
        }
        carried
    }

    /// The streamed Responses API function call an event is about: the
    /// one at its `output_index`, else the one streamed last (created if
    /// new).
    fn streamed_call(&mut self, output_index: Option<u32>) -> &mut ToolCall {
        let index = output_index
            .or(self.current_call)
            .unwrap_or_else(|| next_index(&self.tool_calls));
        self.current_call = Some(index);
        self.tool_calls.entry(index).or_default()
    }

    /// Takes what a streamed function call's `response.output_item.added`,
    /// `response.function_call_arguments.done` or
    /// `response.output_item.done` says of it: its `call_id` and `name`
    /// where it had none yet, and its whole `arguments`, which replace the
    /// fragments (GuideLLM takes the final arguments). The weight it
    /// carries as output: the arguments' bytes when they are the first to
    /// arrive for the call (a server that sends no deltas), else 0.
    fn finish_call(&mut self, output_index: Option<u32>, item: &OutputItem<'_>) -> usize {
        let call = self.streamed_call(output_index);
        if let Some(id) = item.call_id.as_deref().filter(|id| !id.is_empty())
            && call.id.is_empty()
        {
            id.clone_into(&mut call.id);
        }
        if let Some(name) = item.name.as_deref().filter(|n| !n.is_empty())
            && call.name.is_empty()
        {
            name.clone_into(&mut call.name);
        }
        let Some(arguments) = item.arguments.as_deref().filter(|a| !a.is_empty()) else {
            return 0;
        };
        let first = call.arguments.is_empty();
        arguments.clone_into(&mut call.arguments);
        if first {
            self.tool_parts += 1;
            arguments.len()
        } else {
            0
        }
    }

    /// Merges a tool call, or a streamed fragment of one, into the calls
    /// assembled so far (by its `index`, else its position in the list):
    /// the id is replaced, the name and the arguments are appended, as
    /// GuideLLM assembles them. The weight it carries as output: the bytes
    /// of name and arguments, at least 1 (every fragment is an output
    /// event, as GuideLLM counts it).
    fn absorb_tool_call(&mut self, position: usize, part: &ToolCallPart<'_>) -> usize {
        let index = part
            .index
            .unwrap_or_else(|| u32::try_from(position).unwrap_or(u32::MAX));
        let call = self.tool_calls.entry(index).or_default();
        if let Some(id) = part.id.as_deref().filter(|id| !id.is_empty()) {
            id.clone_into(&mut call.id);
        }
        let mut bytes = 0;
        if let Some(function) = &part.function {
            if let Some(name) = function.name.as_deref() {
                call.name.push_str(name);
                bytes += name.len();
            }
            if let Some(arguments) = function.arguments.as_deref() {
                call.arguments.push_str(arguments);
                bytes += arguments.len();
            }
        }
        self.tool_parts += 1;
        bytes.max(1)
    }

    /// Parses a chunk or body; the bytes of output text (content and
    /// reasoning) and tool calls it carried.
    fn absorb(&mut self, json: &[u8], url: &str) -> std::result::Result<usize, OpenAiError> {
        let body: Body<'_> = parse_json(json, url)?;
        if let Some(error) = &body.error {
            return Err(server_error(url, error.message()));
        }
        let mut carried = 0;
        for choice in &body.choices {
            let (content, reasoning) = choice.texts();
            if let Some(text) = content {
                self.text.push_str(text);
                carried += text.len();
            }
            if let Some(reasoning) = reasoning.filter(|r| !r.is_empty()) {
                self.reasoned = true;
                carried += reasoning.len();
            }
            for (position, part) in choice.tool_calls().iter().enumerate() {
                carried += self.absorb_tool_call(position, part);
            }
            if self.finish.is_none()
                && let Some(reason) = choice.finish_reason.as_deref()
            {
                self.finish = Some(match reason {
                    "length" => RawFinish::Length,
                    "tool_calls" | "function_call" => RawFinish::ToolCalls,
                    _ => RawFinish::Stop,
                });
            }
        }
        if let Some(usage) = body.usage {
            self.usage = Some(usage);
        }
        Ok(carried)
    }
}

/// The index after the last of `calls` (0 for none).
fn next_index(calls: &BTreeMap<u32, ToolCall>) -> u32 {
    calls
        .last_key_value()
        .map_or(0, |(&index, _)| index.saturating_add(1))
}

/// `json` parsed as `T`, or a `malformed_response` error quoting it.
fn parse_json<'a, T: serde::Deserialize<'a>>(
    json: &'a [u8],
    url: &str,
) -> std::result::Result<T, OpenAiError> {
    serde_json::from_slice(json).map_err(|e| OpenAiError::MalformedResponse {
        url: url.to_owned(),
        reason: e.to_string(),
        snippet: snippet(&String::from_utf8_lossy(json), SNIPPET_CHARS),
    })
}

/// The error of a server that reported one inside its answer.
fn server_error(url: &str, message: String) -> OpenAiError {
    OpenAiError::ServerError {
        url: url.to_owned(),
        message,
    }
}

/// The message of an error body: `error.message`, `message`, `detail`; for
/// an HTML page its title, else its first line of text (a page is never
/// quoted whole); else the start of the text.
fn error_message(body: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let found = value
            .pointer("/error/message")
            .or_else(|| value.get("error").filter(|e| e.is_string()))
            .or_else(|| value.get("message"))
            .or_else(|| value.get("detail"));
        if let Some(found) = found {
            return match found {
                Value::String(s) => snippet(s, 1_000),
                other => snippet(&other.to_string(), 1_000),
            };
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_string();
    }
    if let Some(page) = html_summary(text) {
        return snippet(&page, SNIPPET_CHARS);
    }
    snippet(text, SNIPPET_CHARS)
}

/// What an HTML page says in one line: its `<title>`, else its first line
/// of text outside tags; `None` for text that is not HTML.
fn html_summary(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let is_html = lower.starts_with("<!doctype html")
        || lower.starts_with("<html")
        || lower.contains("<body")
        || lower.contains("<head");
    if !is_html {
        return None;
    }
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    // ASCII lower-casing keeps byte offsets, so they index `text` too.
    if let Some(open) = lower.find("<title")
        && let Some(start) = lower[open..].find('>').map(|i| open + i + 1)
        && let Some(len) = lower[start..].find("</title")
    {
        let title = squeeze(&text[start..start + len]);
        if !title.is_empty() {
            return Some(title);
        }
    }
    // The first line of text outside tags (and outside script and style).
    let mut out = String::new();
    let mut rest = text;
    let mut skip_until: Option<&str> = None;
    while !rest.is_empty() {
        if let Some(end) = skip_until {
            match rest.to_ascii_lowercase().find(end) {
                Some(i) => rest = &rest[i + end.len()..],
                None => break,
            }
            skip_until = None;
            continue;
        }
        match rest.find('<') {
            Some(i) => {
                out.push_str(&rest[..i]);
                let tag = rest[i..].to_ascii_lowercase();
                if tag.starts_with("<script") {
                    skip_until = Some("</script>");
                } else if tag.starts_with("<style") {
                    skip_until = Some("</style>");
                }
                let name: String = tag
                    .trim_start_matches(['<', '/'])
                    .chars()
                    .take_while(char::is_ascii_alphanumeric)
                    .collect();
                match rest[i..].find('>') {
                    Some(j) => rest = &rest[i + j + 1..],
                    None => break,
                }
                // Inline tags (b, i, a, span, ...) join words; the rest end a line.
                let inline = matches!(
                    name.as_str(),
                    "a" | "b" | "i" | "em" | "strong" | "span" | "code" | "small" | "u"
                );
                out.push(if inline { ' ' } else { '\n' });
            }
            None => {
                out.push_str(rest);
                break;
            }
        }
        if let Some(line) = out.lines().map(squeeze).find(|l| !l.is_empty())
            && out.ends_with('\n')
        {
            return Some(line);
        }
    }
    out.lines()
        .map(squeeze)
        .find(|l| !l.is_empty())
        .or_else(|| Some("(an HTML page without text)".to_string()))
}

/// The JSON body of a completion request.
fn build_body(config: &OpenAiConfig, model: &str, request: &GenerationRequest) -> Result<Vec<u8>> {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_owned()));
    match config.request_format {
        RequestFormat::Chat => {
            let messages = match &request.input {
                RequestInput::Text(text) => vec![json!({"role": "user", "content": text})],
                RequestInput::Chat(messages) => messages
                    .iter()
                    .map(chat_message)
                    .collect::<Result<Vec<_>>>()?,
            };
            body.insert("messages".into(), Value::Array(messages));
            insert_sampling(&mut body, request, "max_tokens");
            if let Some(tools) = request.tools.as_ref().filter(|t| !t.tools.is_empty()) {
                insert_tools(&mut body, tools, "max_tokens");
            }
        }
        RequestFormat::Text => {
            let prompt = match &request.input {
                RequestInput::Text(text) => text.clone(),
                RequestInput::Chat(messages) => flatten_chat(messages, config.request_format)?,
            };
            body.insert("prompt".into(), Value::String(prompt));
            insert_sampling(&mut body, request, "max_tokens");
        }
        RequestFormat::Responses => {
            return responses_body(config, model, request, None).map(|(body, _)| body);
        }
        RequestFormat::Transcriptions | RequestFormat::Translations => {
            return Err(Error::Config(
                "an audio endpoint takes a multipart/form-data upload, not a JSON body".into(),
            ));
        }
        RequestFormat::Embeddings | RequestFormat::Pooling => {
            // As GuideLLM sends it: the model and the input text; no
            // sampling, never streamed (extra_body may add encoding_format,
            // dimensions, truncate_prompt_tokens, ...).
            let input = match &request.input {
                RequestInput::Text(text) => text.clone(),
                RequestInput::Chat(messages) => flatten_chat(messages, config.request_format)?,
            };
            body.insert("input".into(), Value::String(input));
            return finish_body(config, body);
        }
    }
    if config.stream {
        body.insert("stream".into(), Value::Bool(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    finish_body(config, body)
}

/// The request's sampling fields, the output limit under `max_key`
/// (`max_tokens`, or `max_output_tokens` for the Responses API).
fn insert_sampling(body: &mut Map<String, Value>, request: &GenerationRequest, max_key: &str) {
    let sampling = &request.sampling;
    body.insert(max_key.into(), json!(sampling.max_tokens));
    body.insert("temperature".into(), json!(sampling.temperature));
    if sampling.top_p < 1.0 {
        body.insert("top_p".into(), json!(sampling.top_p));
    }
    if sampling.top_k > 0 {
        body.insert("top_k".into(), json!(sampling.top_k));
    }
    if let Some(seed) = sampling.seed {
        body.insert("seed".into(), json!(seed));
    }
    if !sampling.stop.is_empty() {
        body.insert("stop".into(), json!(sampling.stop));
    }
    if sampling.ignore_eos {
        body.insert("ignore_eos".into(), Value::Bool(true));
    }
}

/// The tools of a chat request, as GuideLLM sends them: `tools` (each in
/// the chat shape; a flat Responses API definition, with `name` at the top,
/// is wrapped into `function`) and `tool_choice`. A turn that expects a
/// call drops `ignore_eos`, `stop` and the output limit (`max_key`), which
/// would cut constrained tool decoding short.
fn insert_tools(body: &mut Map<String, Value>, tools: &ToolSet, max_key: &str) {
    let definitions = tools.tools.iter().map(chat_tool).collect();
    body.insert("tools".into(), Value::Array(definitions));
    body.insert("tool_choice".into(), tools.choice.to_json());
    constrain_tool_call_body(body, tools, max_key);
}

/// On a turn that expects a call, drops `ignore_eos`, `stop` and the
/// output limit (`max_key`), which would cut constrained tool decoding
/// short (GuideLLM's `_constrain_tool_call_body`).
fn constrain_tool_call_body(body: &mut Map<String, Value>, tools: &ToolSet, max_key: &str) {
    if tools.expect_call {
        for key in ["ignore_eos", "stop", max_key] {
            body.remove(key);
        }
    }
}

/// The tools of a Responses API request, as GuideLLM sends them: `tools`
/// in the API's flat shape (a chat-shaped definition has its `function`'s
/// fields lifted to the top; a flat one is kept), `tool_choice`
/// ([`responses_tool_choice`]), and on a turn that expects a call no
/// `ignore_eos`, `stop` or `max_output_tokens`.
fn insert_responses_tools(body: &mut Map<String, Value>, tools: &ToolSet) {
    let definitions = tools.tools.iter().map(flat_tool).collect();
    body.insert("tools".into(), Value::Array(definitions));
    body.insert("tool_choice".into(), responses_tool_choice(&tools.choice));
    constrain_tool_call_body(body, tools, "max_output_tokens");
}

/// A tool definition in the Responses API's flat shape (`{"type", "name",
/// "description", "parameters", "strict"}`), as GuideLLM's
/// `_ensure_tool_format` makes it.
fn flat_tool(tool: &Value) -> Value {
    match tool {
        Value::Object(chat) if !chat.contains_key("name") => {
            let Some(Value::Object(function)) = chat.get("function") else {
                return tool.clone();
            };
            let mut flat = Map::new();
            flat.insert(
                "type".into(),
                chat.get("type")
                    .cloned()
                    .unwrap_or_else(|| "function".into()),
            );
            for key in FUNCTION_FIELDS {
                if let Some(value) = function.get(key) {
                    flat.insert(key.to_owned(), value.clone());
                }
            }
            Value::Object(flat)
        }
        other => other.clone(),
    }
}

/// The fields of a function tool's definition, nested under `function` in
/// the chat shape and at the top in the Responses API's.
const FUNCTION_FIELDS: [&str; 4] = ["name", "description", "parameters", "strict"];

/// `tool_choice` as the Responses API spells it: `"auto"`, `"none"`,
/// `"required"`, or `{"type": "function", "name"}` for a named function.
fn responses_tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Function(name) => json!({"type": "function", "name": name}),
        other => other.to_json(),
    }
}

/// A tool definition in the chat shape (`{"type", "function": {...}}`).
fn chat_tool(tool: &Value) -> Value {
    match tool {
        Value::Object(flat) if flat.contains_key("name") && !flat.contains_key("function") => {
            let function: Map<String, Value> = FUNCTION_FIELDS
                .into_iter()
                .filter_map(|key| Some((key.to_owned(), flat.get(key)?.clone())))
                .collect();
            json!({
                "type": flat.get("type").cloned().unwrap_or_else(|| "function".into()),
                "function": function,
            })
        }
        other => other.clone(),
    }
}

/// How many answers' ids a run keeps for `server_history`; the oldest are
/// forgotten first.
const REMEMBERED_RESPONSES: usize = 65_536;

/// The ids of Responses API answers, each under the key of the
/// conversation it ended ([`ConversationKey::answered`]).
#[derive(Debug, Default)]
struct ResponseIds {
    by_key: HashMap<u64, String>,
    order: VecDeque<u64>,
}

impl ResponseIds {
    /// Keeps `id` as the answer that ended the conversation `key`.
    fn remember(&mut self, key: u64, id: String) {
        if self.by_key.insert(key, id).is_none() {
            self.order.push_back(key);
            if self.order.len() > REMEMBERED_RESPONSES
                && let Some(oldest) = self.order.pop_front()
            {
                self.by_key.remove(&oldest);
            }
        }
    }

    /// The id of the answer that ended the conversation `key`, if known.
    fn get(&self, key: u64) -> Option<&str> {
        self.by_key.get(&key).map(String::as_str)
    }
}

/// A conversation's running hash: its instructions, then each input item
/// as its JSON text. A later turn holds the earlier turn's input items and
/// answer before its new messages, so the hash of that prefix is the key
/// the earlier answer's id was kept under.
#[derive(Debug, Clone)]
struct ConversationKey(DefaultHasher);

impl ConversationKey {
    fn new(instructions: Option<&str>) -> Self {
        let mut hasher = DefaultHasher::new();
        instructions.hash(&mut hasher);
        ConversationKey(hasher)
    }

    fn push(&mut self, item: &Value) {
        item.to_string().hash(&mut self.0);
    }

    fn key(&self) -> u64 {
        self.0.finish()
    }

    /// The key of the conversation once it was answered with `answer`,
    /// or with `calls` when the answer made some (as a later turn's input
    /// holds the answer: [`answer_items`]).
    fn answered<'c>(mut self, answer: &str, calls: impl IntoIterator<Item = &'c ToolCall>) -> u64 {
        let calls: Vec<&ToolCall> = calls.into_iter().collect();
        for item in answer_items(answer, &calls) {
            self.push(&item);
        }
        self.key()
    }
}

/// The body of a Responses API request, and the key of the conversation
/// its input makes. With `ids` (`server_history`), when the input holds an
/// answer whose id is known followed by new messages, only those are sent,
/// after `previous_response_id`.
fn responses_body(
    config: &OpenAiConfig,
    model: &str,
    request: &GenerationRequest,
    ids: Option<&Mutex<ResponseIds>>,
) -> Result<(Vec<u8>, ConversationKey)> {
    let ResponseInput {
        instructions,
        items,
        answer_ends,
    } = response_input(request)?;
    let mut conversation = ConversationKey::new(instructions.as_deref());
    // Where an earlier answer may end: after an assistant message's items
    // (its text, or its function calls) that more items follow.
    let mut answers = Vec::new();
    for (i, item) in items.iter().enumerate() {
        conversation.push(item);
        if i + 1 < items.len() && answer_ends.contains(&(i + 1)) {
            answers.push((i + 1, conversation.key()));
        }
    }
    let previous = ids.and_then(|ids| {
        let ids = lock(ids);
        answers
            .iter()
            .rev()
            .find_map(|&(from, key)| ids.get(key).map(|id| (from, id.to_owned())))
    });
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_owned()));
    if let Some(instructions) = instructions {
        body.insert("instructions".into(), Value::String(instructions));
    }
    let input = match previous {
        Some((from, id)) => {
            body.insert("previous_response_id".into(), Value::String(id));
            items[from..].to_vec()
        }
        None => items,
    };
    body.insert("input".into(), Value::Array(input));
    insert_sampling(&mut body, request, "max_output_tokens");
    if let Some(tools) = request.tools.as_ref().filter(|t| !t.tools.is_empty()) {
        insert_responses_tools(&mut body, tools);
    }
    if config.stream {
        // As GuideLLM: no stream_options (the usage comes with
        // response.completed).
        body.insert("stream".into(), Value::Bool(true));
    }
    Ok((finish_body(config, body)?, conversation))
}

/// What a Responses API request's conversation becomes.
struct ResponseInput {
    /// The leading system messages' text, a line each.
    instructions: Option<String>,
    /// The `input` items.
    items: Vec<Value>,
    /// The positions in `items` just after each assistant message's
    /// items: where an earlier answer ends.
    answer_ends: Vec<usize>,
}

/// The `instructions` and the `input` items of a Responses API request.
///
/// As GuideLLM replays a tool-calling conversation: an assistant message
/// with tool calls becomes its `function_call` items (`call_id`, `name`,
/// `arguments`; its text, if any, is not sent), a `tool` message
/// answering a call a `function_call_output` item (`call_id`, `output`).
fn response_input(request: &GenerationRequest) -> Result<ResponseInput> {
    let messages = match &request.input {
        RequestInput::Text(text) => {
            return Ok(ResponseInput {
                instructions: None,
                items: vec![
                    json!({"role": "user", "content": [{"type": "input_text", "text": text}]}),
                ],
                answer_ends: Vec::new(),
            });
        }
        RequestInput::Chat(messages) => messages,
    };
    let only_text = |m: &ChatMessage| {
        m.content
            .iter()
            .all(|p| matches!(p, ContentPart::Text { .. }))
    };
    let leading = messages
        .iter()
        .take_while(|m| matches!(m.role.as_str(), "system" | "developer") && only_text(m))
        .count();
    let instructions = (leading > 0).then(|| {
        messages[..leading]
            .iter()
            .map(message_text)
            .collect::<Vec<_>>()
            .join("\n")
    });
    let mut items = Vec::with_capacity(messages.len() - leading);
    let mut answer_ends = Vec::new();
    for m in &messages[leading..] {
        match (m.role.as_str(), &m.tool) {
            ("assistant", tool) => {
                if let Some(input) = m.content.iter().find_map(|p| match p {
                    ContentPart::Text { .. } => None,
                    ContentPart::Image { .. } => Some("image"),
                    ContentPart::Audio { .. } => Some("audio"),
                }) {
                    return Err(guidebench_core::registry::unsupported_input(
                        "openai_http with request_format=responses (in an assistant message)",
                        input,
                    ));
                }
                let calls: Vec<&ToolCall> = match tool {
                    Some(MessageTool::Calls(calls)) => calls.iter().collect(),
                    _ => Vec::new(),
                };
                items.extend(answer_items(&message_text(m), &calls));
                answer_ends.push(items.len());
            }
            (_, Some(MessageTool::Answers(call_id))) => items.push(json!({
                "type": "function_call_output",
                "call_id": call_id,
                "output": message_text(m),
            })),
            _ => {
                let parts = m
                    .content
                    .iter()
                    .map(response_part)
                    .collect::<Result<Vec<_>>>()?;
                items.push(json!({"role": m.role, "content": parts}));
            }
        }
    }
    Ok(ResponseInput {
        instructions,
        items,
        answer_ends,
    })
}

/// An answer as the input items of a later turn: its `function_call`
/// items when it made calls (GuideLLM sends a tool-call turn's calls
/// only), else an assistant message with its text.
fn answer_items(text: &str, calls: &[&ToolCall]) -> Vec<Value> {
    if calls.is_empty() {
        return vec![assistant_item(text)];
    }
    calls
        .iter()
        .map(|call| {
            json!({
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            })
        })
        .collect()
}

/// An assistant message as a Responses API input item.
fn assistant_item(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// A message's text parts, joined by a space (as the plain prompt format
/// joins them).
fn message_text(message: &ChatMessage) -> String {
    message
        .content
        .iter()
        .filter_map(|p| match p {
            ContentPart::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A content part as a Responses API input part, as GuideLLM writes them:
/// `input_text`, `input_image` (a URL or a data URL), `input_file` (audio,
/// its bytes in base64, or its URL).
fn response_part(part: &ContentPart) -> Result<Value> {
    Ok(match part {
        ContentPart::Text { text } => json!({"type": "input_text", "text": text}),
        ContentPart::Image { source } => {
            let url = match source {
                MediaSource::Url(url) => url.clone(),
                MediaSource::Path(path) => {
                    let data = read_media(path)?;
                    data_url(mime_from_path(path, "image"), &data)
                }
                MediaSource::Bytes { mime, data } => data_url(mime, data),
            };
            json!({"type": "input_image", "image_url": url})
        }
        ContentPart::Audio { source } => match source {
            MediaSource::Url(url) => match url
                .strip_prefix("data:")
                .and_then(|rest| rest.split_once(";base64,"))
            {
                Some((_, data)) => json!({"type": "input_file", "file_data": data}),
                None => json!({"type": "input_file", "file_url": url}),
            },
            MediaSource::Path(path) => {
                let data = read_media(path)?;
                json!({
                    "type": "input_file",
                    "file_data": base64::engine::general_purpose::STANDARD.encode(&data),
                })
            }
            MediaSource::Bytes { data, .. } => json!({
                "type": "input_file",
                "file_data": base64::engine::general_purpose::STANDARD.encode(data),
            }),
        },
    })
}

/// `body` with `extra_body` merged in (its keys win), as JSON bytes.
fn finish_body(config: &OpenAiConfig, mut body: Map<String, Value>) -> Result<Vec<u8>> {
    for (key, value) in &config.extra_body {
        body.insert(key.clone(), value.clone());
    }
    serde_json::to_vec(&Value::Object(body)).map_err(|e| Error::Json {
        context: "the request body".into(),
        source: e,
    })
}

/// A chat message in the OpenAI shape: a string for text-only content,
/// a list of parts otherwise.
///
/// An assistant message with tool calls has them as `tool_calls` (its
/// content `null` when it had no text), a `tool` message names the call it
/// answers as `tool_call_id`: the history GuideLLM sends after a tool call.
fn chat_message(message: &ChatMessage) -> Result<Value> {
    let content = match (message.content.as_slice(), &message.tool) {
        ([], Some(MessageTool::Calls(_))) => Value::Null,
        ([ContentPart::Text { text }], _) => Value::String(text.clone()),
        (parts, _) => Value::Array(parts.iter().map(content_part).collect::<Result<_>>()?),
    };
    let mut value = json!({"role": message.role, "content": content});
    match &message.tool {
        Some(MessageTool::Calls(calls)) => {
            value["tool_calls"] = calls
                .iter()
                .map(|call| {
                    json!({
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    })
                })
                .collect();
        }
        Some(MessageTool::Answers(id)) => value["tool_call_id"] = Value::String(id.clone()),
        None => {}
    }
    Ok(value)
}

fn content_part(part: &ContentPart) -> Result<Value> {
    Ok(match part {
        ContentPart::Text { text } => json!({"type": "text", "text": text}),
        ContentPart::Image { source } => {
            let url = match source {
                MediaSource::Url(url) => url.clone(),
                MediaSource::Path(path) => {
                    let data = read_media(path)?;
                    data_url(mime_from_path(path, "image"), &data)
                }
                MediaSource::Bytes { mime, data } => data_url(mime, data),
            };
            json!({"type": "image_url", "image_url": {"url": url}})
        }
        ContentPart::Audio { source } => match source {
            MediaSource::Url(url) => match url
                .strip_prefix("data:")
                .and_then(|rest| rest.split_once(";base64,"))
            {
                Some((mime, data)) => input_audio(mime, data.to_owned()),
                None => json!({"type": "audio_url", "audio_url": {"url": url}}),
            },
            MediaSource::Path(path) => {
                let data = read_media(path)?;
                input_audio(
                    mime_from_path(path, "audio"),
                    base64::engine::general_purpose::STANDARD.encode(&data),
                )
            }
            MediaSource::Bytes { mime, data } => {
                input_audio(mime, base64::engine::general_purpose::STANDARD.encode(data))
            }
        },
    })
}

fn input_audio(mime: &str, data: String) -> Value {
    let format = match mime.rsplit('/').next().unwrap_or("wav") {
        "mpeg" | "mp3" => "mp3",
        "x-wav" | "wave" | "wav" => "wav",
        other => other,
    };
    json!({"type": "input_audio", "input_audio": {"data": data, "format": format}})
}

fn read_media(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn data_url(mime: &str, data: &[u8]) -> String {
    format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(data)
    )
}

/// The MIME type of a file by its extension; an unknown audio file is
/// `audio/wav`.
pub(crate) fn mime_from_path(path: &Path, kind: &str) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match (kind, ext.as_deref()) {
        (_, Some("png")) => "image/png",
        (_, Some("jpg" | "jpeg")) => "image/jpeg",
        (_, Some("gif")) => "image/gif",
        (_, Some("webp")) => "image/webp",
        (_, Some("mp3")) => "audio/mp3",
        (_, Some("flac")) => "audio/flac",
        (_, Some("ogg")) => "audio/ogg",
        ("audio", _) => "audio/wav",
        _ => "application/octet-stream",
    }
}

/// A chat as one prompt for the text, embeddings and pooling endpoints,
/// exactly as the offline backend's plain format writes it (core's
/// [`PromptFormatter`]: a message's text parts joined by a space, messages
/// by a newline); media cannot be sent.
fn flatten_chat(messages: &[ChatMessage], format: RequestFormat) -> Result<String> {
    for part in messages.iter().flat_map(|m| &m.content) {
        let input = match part {
            ContentPart::Text { .. } => continue,
            ContentPart::Image { .. } => "image",
            ContentPart::Audio { .. } => "audio",
        };
        return Err(guidebench_core::registry::unsupported_input(
            format!("openai_http with request_format={}", format.name()),
            input,
        ));
    }
    let plain = PromptFormatter::new(
        &TemplateFormat::Plain,
        None,
        &SpecialTokens::default(),
        Placeholders::default(),
    )?;
    Ok(plain.format(&RequestInput::Chat(messages.to_vec()))?.text)
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

#[cfg(test)]
mod tests {
    use guidebench_core::sampling::{Sampling, SamplingParams};

    use super::*;

    fn config(format: RequestFormat) -> OpenAiConfig {
        let mut c = OpenAiConfig::new("http://127.0.0.1:1").expect("config");
        c.request_format = format;
        c
    }

    fn body_of(config: &OpenAiConfig, request: &GenerationRequest) -> Value {
        serde_json::from_slice(&build_body(config, "m", request).expect("body")).expect("json")
    }

    #[test]
    fn a_chat_body_carries_sampling_streaming_and_extra_body() {
        let mut c = config(RequestFormat::Chat);
        c.extra_body.insert("ignore_eos".into(), Value::Bool(false));
        c.extra_body.insert("priority".into(), json!(3));
        let sampling = SamplingParams {
            max_tokens: Some(8),
            ignore_eos: Some(true),
            temperature: Some(0.5),
            top_k: Some(4),
            seed: Some(7),
            stop: Some(vec!["\n".into()]),
            ..SamplingParams::default()
        }
        .validate()
        .expect("valid");
        let body = body_of(&c, &GenerationRequest::text(1, "hi", sampling));
        assert_eq!(body["model"], "m");
        assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
        assert_eq!(body["max_tokens"], 8);
        assert_eq!(body["top_k"], 4);
        assert_eq!(body["seed"], 7);
        assert_eq!(body["stop"], json!(["\n"]));
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["ignore_eos"], false, "extra_body overrides ignore_eos");
        assert_eq!(body["priority"], 3);
        assert!(body.get("top_p").is_none());
    }

    #[test]
    fn multimodal_parts_become_image_url_and_input_audio() {
        let c = config(RequestFormat::Chat);
        let messages = vec![ChatMessage {
            role: "user".into(),
            tool: None,
            content: vec![
                ContentPart::text("look"),
                ContentPart::Image {
                    source: MediaSource::Url("https://x/cat.png".into()),
                },
                ContentPart::Image {
                    source: MediaSource::Bytes {
                        mime: "image/png".into(),
                        data: Arc::from(&b"abc"[..]),
                    },
                },
                ContentPart::Audio {
                    source: MediaSource::Bytes {
                        mime: "audio/wav".into(),
                        data: Arc::from(&b"abc"[..]),
                    },
                },
            ],
        }];
        let request = GenerationRequest::new(
            1,
            RequestInput::Chat(messages),
            Sampling::fixed_length(4).expect("valid"),
        );
        let body = body_of(&c, &request);
        let parts = &body["messages"][0]["content"];
        assert_eq!(parts[0], json!({"type": "text", "text": "look"}));
        assert_eq!(parts[1]["image_url"]["url"], "https://x/cat.png");
        assert_eq!(parts[2]["image_url"]["url"], "data:image/png;base64,YWJj");
        assert_eq!(
            parts[3],
            json!({"type": "input_audio", "input_audio": {"data": "YWJj", "format": "wav"}})
        );
        assert_eq!(body["ignore_eos"], true);
    }

    #[test]
    fn a_multi_part_chat_is_the_same_prompt_as_on_the_offline_backend() {
        // The offline backend with request_format=plain formats through
        // core's PromptFormatter; the text endpoint must send exactly that.
        let chat = vec![
            ChatMessage::text("system", "be brief"),
            ChatMessage {
                role: "user".into(),
                tool: None,
                content: vec![
                    ContentPart::Text {
                        text: "first part".into(),
                    },
                    ContentPart::Text {
                        text: "second part".into(),
                    },
                ],
            },
        ];
        let offline = PromptFormatter::new(
            &TemplateFormat::Plain,
            None,
            &SpecialTokens::default(),
            Placeholders::default(),
        )
        .expect("plain")
        .format(&RequestInput::Chat(chat.clone()))
        .expect("formats")
        .text;
        assert_eq!(offline, "be brief\nfirst part second part");
        let request = GenerationRequest::new(
            1,
            RequestInput::Chat(chat),
            Sampling::fixed_length(2).expect("valid"),
        );
        let body = body_of(&config(RequestFormat::Text), &request);
        assert_eq!(body["prompt"], offline.as_str());
        // The chat endpoint keeps the parts as parts.
        let body = body_of(&config(RequestFormat::Chat), &request);
        assert_eq!(
            body["messages"][1]["content"],
            json!([
                {"type": "text", "text": "first part"},
                {"type": "text", "text": "second part"}
            ])
        );
    }

    #[test]
    fn the_text_format_sends_a_prompt_and_refuses_media() {
        let c = config(RequestFormat::Text);
        let chat = vec![
            ChatMessage::text("system", "be brief"),
            ChatMessage::text("user", "hi"),
        ];
        let request = GenerationRequest::new(
            1,
            RequestInput::Chat(chat),
            Sampling::fixed_length(2).expect("valid"),
        );
        assert_eq!(body_of(&c, &request)["prompt"], "be brief\nhi");
        let media = vec![ChatMessage {
            role: "user".into(),
            tool: None,
            content: vec![ContentPart::Image {
                source: MediaSource::Url("u".into()),
            }],
        }];
        let request = GenerationRequest::new(
            1,
            RequestInput::Chat(media),
            Sampling::fixed_length(2).expect("valid"),
        );
        let err = build_body(&c, "m", &request).expect_err("media");
        assert_eq!(err.label(), "unsupported_input");
    }

    #[test]
    fn an_embeddings_body_is_model_and_input_without_sampling_or_streaming() {
        for format in [RequestFormat::Embeddings, RequestFormat::Pooling] {
            let mut c = config(format);
            assert!(c.stream, "streaming is on by default");
            c.extra_body
                .insert("encoding_format".into(), json!("base64"));
            let request =
                GenerationRequest::text(1, "embed me", Sampling::fixed_length(8).expect("valid"));
            let body = body_of(&c, &request);
            assert_eq!(
                body,
                json!({"model": "m", "input": "embed me", "encoding_format": "base64"}),
                "{format:?}"
            );
            let chat = vec![
                ChatMessage::text("system", "be brief"),
                ChatMessage::text("user", "hi"),
            ];
            let request = GenerationRequest::new(
                2,
                RequestInput::Chat(chat),
                Sampling::fixed_length(2).expect("valid"),
            );
            assert_eq!(body_of(&c, &request)["input"], "be brief\nhi");
            let media = vec![ChatMessage {
                role: "user".into(),
                tool: None,
                content: vec![ContentPart::Image {
                    source: MediaSource::Url("u".into()),
                }],
            }];
            let request = GenerationRequest::new(
                3,
                RequestInput::Chat(media),
                Sampling::fixed_length(2).expect("valid"),
            );
            let err = build_body(&c, "m", &request).expect_err("media");
            assert_eq!(err.label(), "unsupported_input");
            assert!(err.to_string().contains(format.name()), "{err}");
        }
    }

    #[test]
    fn a_pooled_answer_becomes_a_response_with_prompt_tokens_and_no_output() {
        let mut request =
            GenerationRequest::text(4, "x", Sampling::fixed_length(8).expect("valid"));
        request.expected_prompt_tokens = Some(99);
        let answer = br#"{"data":[{"embedding":[0.5,0.5]}],"usage":{"prompt_tokens":3}}"#;
        let r = pooled_response(RequestFormat::Embeddings, &request, answer, "u").expect("ok");
        assert_eq!((r.id, r.prompt_tokens, r.output_tokens), (4, 3, 0));
        assert!(r.timings.tokens.is_empty() && r.text.is_empty());
        // Without usage, the count the data item expected.
        let answer = br#"{"data":[{"data":[0.5,0.5]}]}"#;
        let r = pooled_response(RequestFormat::Pooling, &request, answer, "u").expect("ok");
        assert_eq!(r.prompt_tokens, 99);
        let err = pooled_response(RequestFormat::Embeddings, &request, answer, "u")
            .expect_err("no embedding field");
        assert_eq!(err.label(), "malformed_response");
        let err = pooled_response(
            RequestFormat::Embeddings,
            &request,
            b"{\"error\":\"no\"}",
            "u",
        )
        .expect_err("an error object");
        assert_eq!(err.label(), "server_error");
        let err = pooled_response(RequestFormat::Embeddings, &request, b"{not json", "u")
            .expect_err("not JSON");
        assert_eq!(err.label(), "malformed_response");
    }

    #[test]
    fn a_responses_body_has_input_items_instructions_media_and_max_output_tokens() {
        let mut c = config(RequestFormat::Responses);
        c.stream = false;
        let messages = vec![
            ChatMessage::text("system", "be brief"),
            ChatMessage {
                role: "user".into(),
                tool: None,
                content: vec![
                    ContentPart::text("look"),
                    ContentPart::Image {
                        source: MediaSource::Bytes {
                            mime: "image/png".into(),
                            data: Arc::from(&b"abc"[..]),
                        },
                    },
                    ContentPart::Audio {
                        source: MediaSource::Url("data:audio/wav;base64,YWJj".into()),
                    },
                ],
            },
            ChatMessage::text("assistant", "seen"),
            ChatMessage::text("user", "and?"),
        ];
        let request = GenerationRequest::new(
            1,
            RequestInput::Chat(messages),
            Sampling::fixed_length(4).expect("valid"),
        );
        let body = body_of(&c, &request);
        assert_eq!(body["instructions"], "be brief");
        assert_eq!(body["max_output_tokens"], 4);
        assert!(body.get("max_tokens").is_none() && body.get("stream").is_none());
        assert_eq!(
            body["input"],
            json!([
                {"role": "user", "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "data:image/png;base64,YWJj"},
                    {"type": "input_file", "file_data": "YWJj"},
                ]},
                {"role": "assistant", "content": "seen"},
                {"role": "user", "content": [{"type": "input_text", "text": "and?"}]},
            ])
        );
        // An answer holding media cannot be sent back as an input item.
        let media_answer = vec![ChatMessage {
            role: "assistant".into(),
            tool: None,
            content: vec![ContentPart::Image {
                source: MediaSource::Url("u".into()),
            }],
        }];
        let request = GenerationRequest::new(
            2,
            RequestInput::Chat(media_answer),
            Sampling::fixed_length(2).expect("valid"),
        );
        let err = build_body(&c, "m", &request).expect_err("media answer");
        assert_eq!(err.label(), "unsupported_input");
    }

    #[test]
    fn a_later_turn_names_the_answer_it_continues_once_that_answer_is_remembered() {
        let mut c = config(RequestFormat::Responses);
        c.server_history = true;
        let first = vec![ChatMessage::text("user", "q1")];
        let request = GenerationRequest::new(
            1,
            RequestInput::Chat(first.clone()),
            Sampling::fixed_length(2).expect("valid"),
        );
        let ids = Mutex::new(ResponseIds::default());
        let (_, conversation) = responses_body(&c, "m", &request, Some(&ids)).expect("body");
        let mut second = first;
        second.push(ChatMessage::text("assistant", "a1"));
        second.push(ChatMessage::text("user", "q2"));
        let request = GenerationRequest::new(
            2,
            RequestInput::Chat(second),
            Sampling::fixed_length(2).expect("valid"),
        );
        let body = |ids: &Mutex<ResponseIds>| -> Value {
            let (bytes, _) = responses_body(&c, "m", &request, Some(ids)).expect("body");
            serde_json::from_slice(&bytes).expect("json")
        };
        // Not yet remembered: the whole history.
        assert_eq!(body(&ids)["input"].as_array().map(Vec::len), Some(3));
        // Another answer text is another conversation.
        lock(&ids).remember(conversation.clone().answered("other", &[]), "r0".into());
        assert!(body(&ids).get("previous_response_id").is_none());
        lock(&ids).remember(conversation.answered("a1", &[]), "r1".into());
        let sent = body(&ids);
        assert_eq!(sent["previous_response_id"], "r1");
        assert_eq!(
            sent["input"],
            json!([{"role": "user", "content": [{"type": "input_text", "text": "q2"}]}])
        );
    }

    fn weather_tools(expect_call: bool) -> ToolSet {
        ToolSet {
            tools: vec![
                json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}),
                json!({"type": "function", "name": "lookup", "description": "flat", "extra": 1}),
            ],
            choice: guidebench_core::request::ToolChoice::Required,
            expect_call,
        }
    }

    #[test]
    fn a_chat_body_with_tools_sends_them_in_the_chat_shape_with_tool_choice() {
        let sampling = SamplingParams {
            max_tokens: Some(8),
            ignore_eos: Some(true),
            stop: Some(vec!["\n".into()]),
            ..SamplingParams::default()
        }
        .validate()
        .expect("valid");
        let mut request = GenerationRequest::text(1, "hi", sampling);
        request.tools = Some(weather_tools(false));
        let body = body_of(&config(RequestFormat::Chat), &request);
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(
            body["tools"][1],
            json!({"type": "function", "function": {"name": "lookup", "description": "flat"}}),
            "a flat definition is wrapped, unknown keys left out"
        );
        assert_eq!(
            body["max_tokens"], 8,
            "a turn that expects no call keeps its limits"
        );
        assert_eq!(body["ignore_eos"], true);
        request.tools = Some(weather_tools(true));
        let body = body_of(&config(RequestFormat::Chat), &request);
        for key in ["max_tokens", "ignore_eos", "stop"] {
            assert!(
                body.get(key).is_none(),
                "{key} is dropped on a tool-call turn"
            );
        }
        request.tools = None;
        let body = body_of(&config(RequestFormat::Chat), &request);
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
    }

    #[test]
    fn a_tool_call_history_sends_the_calls_and_the_answers_to_them() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "get_data".into(),
            arguments: r#"{"query":"x"}"#.into(),
        };
        let messages = vec![
            ChatMessage::text("user", "look it up"),
            ChatMessage::tool_calls("", vec![call]),
            ChatMessage::tool_result("call_1", r#"{"status": "ok"}"#),
        ];
        let request = GenerationRequest::new(
            1,
            RequestInput::Chat(messages),
            Sampling::fixed_length(4).expect("valid"),
        );
        let body = body_of(&config(RequestFormat::Chat), &request);
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "look it up"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_data", "arguments": "{\"query\":\"x\"}"}}
                ]},
                {"role": "tool", "content": "{\"status\": \"ok\"}", "tool_call_id": "call_1"},
            ])
        );
    }

    #[test]
    fn streamed_tool_call_deltas_are_assembled_by_index_and_each_is_an_output_event() {
        let url = "u";
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut out = Output::default();
        let lines: [&[u8]; 6] = [
            br#"data: {"choices":[{"delta":{"role":"assistant","content":null,"tool_calls":null}}]}"#,
            br#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
            br#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}"#,
            br#"data: {"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"lookup","arguments":"{}"}}]}}]}"#,
            br#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}"#,
            br#"data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":9}}"#,
        ];
        for (i, line) in lines.iter().enumerate() {
            assert!(!out.on_line(line, at(10 * i as u64), url).expect("parsed"));
        }
        assert!(out.on_line(b"data: [DONE]", at(99), url).expect("parsed"));
        let calls: Vec<&ToolCall> = out.tool_calls.values().collect();
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (
                calls[0].id.as_str(),
                calls[0].name.as_str(),
                calls[0].arguments.as_str()
            ),
            ("call_a", "get_weather", r#"{"city":"Paris"}"#)
        );
        assert_eq!(
            (
                calls[1].id.as_str(),
                calls[1].name.as_str(),
                calls[1].arguments.as_str()
            ),
            ("call_b", "lookup", "{}")
        );
        assert_eq!(
            out.first_tool_call,
            Some(at(10)),
            "the first tool-call delta"
        );
        assert_eq!(
            out.events.len(),
            4,
            "every tool-call delta is an output event"
        );
        assert_eq!(out.finish, Some(RawFinish::ToolCalls));
        assert!(out.text.is_empty());
    }

    #[test]
    fn a_whole_answers_tool_calls_are_read_in_order() {
        let mut out = Output::default();
        let body = br#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":12}}"#;
        out.on_body(body, "u").expect("parsed");
        let names: Vec<(&str, &str)> = out
            .tool_calls
            .values()
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(names, [("c1", "f"), ("c2", "g")]);
        assert_eq!(out.finish, Some(RawFinish::ToolCalls));
        assert_eq!(out.usage.and_then(|u| u.completion_tokens), Some(12));
    }

    #[test]
    fn responses_events_give_text_usage_id_and_errors() {
        let url = "u";
        let now = Instant::now();
        let mut out = Output {
            responses: true,
            ..Output::default()
        };
        let lines: [&[u8]; 6] = [
            b"event: response.created",
            br#"data: {"type":"response.created","response":{"id":"r9","status":"in_progress","usage":null,"error":null}}"#,
            br#"data: {"type":"response.reasoning_text.delta","delta":"hmm"}"#,
            br#"data: {"type":"response.output_text.delta","delta":"hi"}"#,
            br#"data: {"type":"response.output_text.delta","delta":""}"#,
            br#"data: {"type":"response.output_text.done","text":"hi"}"#,
        ];
        for line in lines {
            assert!(!out.on_line(line, now, url).expect("parsed"));
        }
        let done = br#"data: {"type":"response.incomplete","response":{"id":"r9","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":3,"output_tokens":4,"output_tokens_details":{"reasoning_tokens":1}}}}"#;
        assert!(out.on_line(done, now, url).expect("parsed"), "the end");
        assert_eq!(out.text, "hi");
        assert_eq!(out.events.len(), 2, "the reasoning and the text delta");
        assert!(out.reasoned);
        assert_eq!(out.response_id.as_deref(), Some("r9"));
        assert_eq!(out.finish, Some(RawFinish::Length));
        let usage = out.usage.expect("usage");
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.reasoning_tokens()
            ),
            (Some(3), Some(4), Some(1))
        );

        let mut out = Output {
            responses: true,
            ..Output::default()
        };
        let body = br#"{"id":"r1","status":"completed","output":[
            {"type":"reasoning","summary":[{"type":"summary_text","text":"think"}]},
            {"type":"message","content":[{"type":"output_text","text":"a"},{"type":"refusal","refusal":"x"},{"type":"output_text","text":"b"}]}],
            "usage":{"input_tokens":2,"output_tokens":5}}"#;
        out.on_body(body, url).expect("parsed");
        assert_eq!(
            (out.text.as_str(), out.reasoned, out.finish),
            ("ab", true, None)
        );
        assert_eq!(out.usage.and_then(|u| u.completion_tokens), Some(5));
        let failed =
            br#"{"id":"r2","status":"failed","error":{"code":"server_error","message":"boom"}}"#;
        let err = out.on_body(failed, url).expect_err("failed");
        assert_eq!(err.label(), "server_error");
        assert!(err.to_string().contains("boom"), "{err}");
    }

    #[test]
    fn error_messages_are_taken_from_the_body() {
        assert_eq!(
            error_message(br#"{"error":{"message":"boom","type":"x"}}"#),
            "boom"
        );
        assert_eq!(error_message(br#"{"detail":"nope"}"#), "nope");
        assert_eq!(error_message(b"plain text"), "plain text");
        assert_eq!(error_message(b""), "(empty body)");
    }

    #[test]
    fn an_html_error_body_is_reduced_to_its_title_or_first_line_of_text() {
        let page = b"<!DOCTYPE html>\n<html>\n<head><title>\n  503 Service\n Unavailable</title>\
            <style>p { x: y }</style></head><body><h1>Sorry</h1><p>long text</p></body></html>";
        assert_eq!(error_message(page), "503 Service Unavailable");
        let untitled = b"<html><head><script>var a = '<b>';</script></head>\
            <body>\n<h1>Upstream <b>timed</b> out</h1><p>more</p></body></html>";
        assert_eq!(error_message(untitled), "Upstream timed out");
        let empty = b"<html><body></body></html>";
        assert_eq!(error_message(empty), "(an HTML page without text)");
        // Text that merely mentions a tag is not a page.
        assert_eq!(error_message(b"bad <input> field"), "bad <input> field");
    }

    #[test]
    fn the_unverified_tls_warning_names_only_the_https_targets_origin() {
        let warning = |target: &str, verify: bool| {
            let mut c = OpenAiConfig::new(target).expect("config");
            c.verify = verify;
            unverified_tls_warning(&c)
        };
        assert_eq!(
            warning("https://user:secret@gpu.example:8443/prefix/v1", false).as_deref(),
            Some("TLS certificates of https://gpu.example:8443 are not verified (verify=false)")
        );
        assert_eq!(
            warning("https://gpu.example", false).as_deref(),
            Some("TLS certificates of https://gpu.example are not verified (verify=false)")
        );
        assert_eq!(warning("https://gpu.example:8443", true), None);
        assert_eq!(warning("http://gpu.example:8000", false), None);
    }

    fn responses_body_json(
        config: &OpenAiConfig,
        request: &GenerationRequest,
        ids: Option<&Mutex<ResponseIds>>,
    ) -> Value {
        let (bytes, _) = responses_body(config, "m", request, ids).expect("body");
        serde_json::from_slice(&bytes).expect("json")
    }

    #[test]
    fn a_responses_body_with_tools_sends_them_flat_with_the_responses_tool_choice() {
        let c = config(RequestFormat::Responses);
        let mut sampling = Sampling::fixed_length(8).expect("valid");
        sampling.stop = vec!["END".into()];
        let mut request = GenerationRequest::text(1, "weather?", sampling);
        request.tools = Some(weather_tools(false));
        let body = responses_body_json(&c, &request, None);
        assert_eq!(
            body["tools"],
            json!([
                {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
                {"type": "function", "name": "lookup", "description": "flat", "extra": 1},
            ]),
            "a chat-shaped tool is flattened, a flat one kept as it is"
        );
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["max_output_tokens"], 8, "not a tool-call turn");
        assert_eq!(body["stop"], json!(["END"]));

        request.tools = Some(ToolSet {
            choice: ToolChoice::Function("lookup".into()),
            ..weather_tools(true)
        });
        let body = responses_body_json(&c, &request, None);
        assert_eq!(
            body["tool_choice"],
            json!({"type": "function", "name": "lookup"})
        );
        for key in ["max_output_tokens", "stop", "ignore_eos"] {
            assert!(
                body.get(key).is_none(),
                "{key} is dropped on a tool-call turn"
            );
        }
        for choice in [ToolChoice::Auto, ToolChoice::None] {
            request.tools = Some(ToolSet {
                choice: choice.clone(),
                ..weather_tools(false)
            });
            assert_eq!(
                responses_body_json(&c, &request, None)["tool_choice"],
                choice.to_json()
            );
        }
        request.tools = None;
        let body = responses_body_json(&c, &request, None);
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
    }

    /// A results turn: the question, the answer's calls, their results and
    /// a new question.
    fn results_turn() -> (Vec<ChatMessage>, Vec<ChatMessage>, Vec<ToolCall>) {
        let calls = vec![
            ToolCall {
                id: "call_1".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
            },
            ToolCall {
                id: "call_2".into(),
                name: "lookup".into(),
                arguments: "{}".into(),
            },
        ];
        let first = vec![
            ChatMessage::text("system", "be brief"),
            ChatMessage::text("user", "weather?"),
        ];
        let mut second = first.clone();
        second.push(ChatMessage::tool_calls("let me look", calls.clone()));
        second.push(ChatMessage::tool_result("call_1", "sunny"));
        second.push(ChatMessage::tool_result("call_2", "found"));
        second.push(ChatMessage::text("user", "thanks"));
        (first, second, calls)
    }

    #[test]
    fn a_results_turn_sends_function_call_and_function_call_output_items() {
        let c = config(RequestFormat::Responses);
        let (_, second, _) = results_turn();
        let request = GenerationRequest::new(
            2,
            RequestInput::Chat(second),
            Sampling::fixed_length(4).expect("valid"),
        );
        let body = responses_body_json(&c, &request, None);
        assert_eq!(body["instructions"], "be brief");
        assert_eq!(
            body["input"],
            json!([
                {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                 "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "lookup", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2", "output": "found"},
                {"role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
            ]),
            "the calls replace the tool-call turn's text, as GuideLLM replays it"
        );
    }

    #[test]
    fn under_server_history_a_results_turn_sends_only_the_outputs_and_the_new_message() {
        let mut c = config(RequestFormat::Responses);
        c.server_history = true;
        let (first, second, calls) = results_turn();
        let sampling = Sampling::fixed_length(4).expect("valid");
        let ids = Mutex::new(ResponseIds::default());
        let request = GenerationRequest::new(1, RequestInput::Chat(first), sampling.clone());
        let (_, conversation) = responses_body(&c, "m", &request, Some(&ids)).expect("body");
        let request = GenerationRequest::new(2, RequestInput::Chat(second), sampling);
        // The answer remembered with its text only is not the one the
        // history holds.
        lock(&ids).remember(
            conversation.clone().answered("let me look", &[]),
            "r0".into(),
        );
        assert!(
            responses_body_json(&c, &request, Some(&ids))
                .get("previous_response_id")
                .is_none()
        );
        // As `execute` remembers an answer with calls: by its calls.
        lock(&ids).remember(
            conversation.answered("let me look", calls.iter()),
            "r1".into(),
        );
        let body = responses_body_json(&c, &request, Some(&ids));
        assert_eq!(body["previous_response_id"], "r1");
        assert_eq!(
            body["input"],
            json!([
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2", "output": "found"},
                {"role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
            ])
        );
    }

    #[test]
    fn streamed_function_call_events_are_assembled_and_each_arguments_delta_is_an_output_event() {
        let url = "u";
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut out = Output {
            responses: true,
            ..Output::default()
        };
        let lines: [&[u8]; 9] = [
            br#"data: {"type":"response.created","response":{"id":"r5","status":"in_progress"}}"#,
            br#"data: {"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_a","call_id":"call_a","name":"get_weather","arguments":""}}"#,
            br#"data: {"type":"response.function_call_arguments.delta","output_index":0,"item_id":"fc_a","delta":"{\"city\":"}"#,
            br#"data: {"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","id":"fc_b","call_id":"call_b","name":"lookup","arguments":""}}"#,
            br#"data: {"type":"response.function_call_arguments.delta","output_index":1,"delta":"{}"}"#,
            br#"data: {"type":"response.function_call_arguments.delta","output_index":0,"delta":"\"Par"}"#,
            // The final arguments win over the fragments.
            br#"data: {"type":"response.function_call_arguments.done","output_index":0,"arguments":"{\"city\":\"Paris\"}"}"#,
            br#"data: {"type":"response.output_item.done","output_index":0,"item":{"type":"function_call","call_id":"call_a","name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}"#,
            br#"data: {"type":"response.output_item.done","output_index":1,"item":{"type":"function_call","call_id":"call_b","name":"lookup","arguments":"{}"}}"#,
        ];
        for (i, line) in lines.iter().enumerate() {
            assert!(!out.on_line(line, at(10 * i as u64), url).expect("parsed"));
        }
        let completed = br#"data: {"type":"response.completed","response":{"id":"r5","status":"completed","output":[],"usage":{"input_tokens":5,"output_tokens":9}}}"#;
        assert!(out.on_line(completed, at(99), url).expect("parsed"));
        let calls: Vec<(&str, &str, &str)> = out
            .tool_calls
            .values()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            vec![
                ("call_a", "get_weather", r#"{"city":"Paris"}"#),
                ("call_b", "lookup", "{}"),
            ]
        );
        assert_eq!(
            out.first_tool_call,
            Some(at(20)),
            "the first arguments delta, not the item's announcement"
        );
        let instants: Vec<Instant> = out.events.iter().map(|e| e.at).collect();
        assert_eq!(
            instants,
            vec![at(20), at(40), at(50)],
            "every arguments delta, and only they, is an output event"
        );
        assert_eq!(out.finish, Some(RawFinish::ToolCalls));
        assert_eq!(out.usage.and_then(|u| u.completion_tokens), Some(9));
        assert!(out.text.is_empty());
        assert_eq!(out.response_id.as_deref(), Some("r5"));
    }

    #[test]
    fn a_function_call_streamed_without_deltas_still_arrives_as_output() {
        let url = "u";
        let t0 = Instant::now();
        let mut out = Output {
            responses: true,
            ..Output::default()
        };
        let added = br#"data: {"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","call_id":"c","name":"f","arguments":""}}"#;
        let done = br#"data: {"type":"response.output_item.done","output_index":0,"item":{"type":"function_call","call_id":"c","name":"f","arguments":"{\"a\":1}"}}"#;
        assert!(!out.on_line(added, t0, url).expect("parsed"));
        let later = t0 + Duration::from_millis(5);
        assert!(!out.on_line(done, later, url).expect("parsed"));
        assert_eq!(out.tool_calls[&0].arguments, r#"{"a":1}"#);
        assert_eq!(out.first_tool_call, Some(later));
        assert_eq!(out.events.len(), 1);

        // Nor with no call event at all: response.completed's output has it.
        let mut out = Output {
            responses: true,
            ..Output::default()
        };
        let completed = br#"data: {"type":"response.completed","response":{"id":"r","status":"completed","output":[{"type":"function_call","call_id":"c9","name":"g","arguments":"{}"}],"usage":{"output_tokens":2}}}"#;
        assert!(out.on_line(completed, t0, url).expect("parsed"));
        assert_eq!(out.tool_calls[&0].id, "c9");
        assert_eq!(out.first_tool_call, Some(t0));
        assert_eq!(out.finish, Some(RawFinish::ToolCalls));
    }

    #[test]
    fn a_whole_responses_answer_s_function_calls_are_read_in_order() {
        let mut out = Output {
            responses: true,
            ..Output::default()
        };
        let body = br#"{"id":"r1","status":"completed","output":[
            {"type":"reasoning","summary":[{"type":"summary_text","text":"think"}]},
            {"type":"function_call","id":"fc_1","call_id":"c1","name":"f","arguments":"{\"a\":1}","status":"completed"},
            {"type":"function_call","id":"fc_2","call_id":"c2","name":"g","arguments":"{}","status":"completed"}],
            "usage":{"input_tokens":2,"output_tokens":12}}"#;
        out.on_body(body, "u").expect("parsed");
        let calls: Vec<(&str, &str, &str)> = out
            .tool_calls
            .values()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(calls, vec![("c1", "f", r#"{"a":1}"#), ("c2", "g", "{}")]);
        assert_eq!(out.finish, Some(RawFinish::ToolCalls));
        assert_eq!(out.usage.and_then(|u| u.completion_tokens), Some(12));
        assert!(out.text.is_empty() && out.reasoned);

        // Capped by max_output_tokens: length wins.
        let mut out = Output {
            responses: true,
            ..Output::default()
        };
        let capped = br#"{"id":"r2","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[
            {"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\""}]}"#;
        out.on_body(capped, "u").expect("parsed");
        assert_eq!(out.finish, Some(RawFinish::Length));
        assert_eq!(out.tool_calls.len(), 1);
    }
}
