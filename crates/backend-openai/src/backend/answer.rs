//! Reading answers. An [`Output`] takes in an answer streamed line by line
//! (the server-sent events of chat or text completions, of the Responses
//! API or of an audio endpoint) or whole, and keeps what arrived: the
//! text, the events that carried output and when each was read, the usage,
//! the finish reason as the server wrote it ([`RawFinish`]), the Responses
//! answer's id, and the tool calls assembled from their parts. An
//! embeddings or pooling answer becomes its response whole
//! ([`pooled_response`]); an audio upload the response's [`AudioStats`]
//! ([`audio_stats`]).
//!
//! The parent's send path feeds an [`Output`] and makes the response of
//! it (token instants, the [`FinishReason`], the tool calls after
//! `tool_call_missing_behavior`). The wire types are the `protocol`
//! module's; this module depends on no sibling.

use std::collections::BTreeMap;
use std::time::Instant;

use guidebench_core::request::{
    AudioStats, FinishReason, GenerationRequest, GenerationResponse, RequestTimings, ToolCall,
};

use super::{SNIPPET_CHARS, STREAM_EVENTS};
use crate::config::RequestFormat;
use crate::error::{OpenAiError, snippet};
use crate::protocol::{
    AudioBody, AudioUsage, Body, FunctionPart, OutputEvent, OutputItem, PooledBody, ResponseObject,
    ResponsesEvent, ToolCallPart, Usage, data_payload,
};

/// A finish reason as the server wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RawFinish {
    Length,
    Stop,
    /// `tool_calls` (or the older `function_call`).
    ToolCalls,
}

/// What has arrived of one response.
#[derive(Debug, Default)]
pub(super) struct Output {
    pub(super) text: String,
    pub(super) events: Vec<OutputEvent>,
    pub(super) usage: Option<Usage>,
    pub(super) finish: Option<RawFinish>,
    /// Whether any chunk carried reasoning text.
    pub(super) reasoned: bool,
    /// When the first event carrying answer text (not reasoning) was read,
    /// once some reasoning came before it.
    pub(super) first_content: Option<Instant>,
    /// Whether the answer is the Responses API's (typed events, `output`
    /// items) rather than chat or text completions' (`choices`).
    pub(super) responses: bool,
    /// The Responses API answer's id.
    pub(super) response_id: Option<String>,
    /// Whether the answer is an audio endpoint's (`text` and an audio
    /// usage; vLLM's transcription chunks or OpenAI's `transcript.text.*`
    /// events).
    pub(super) audio: bool,
    /// The usage of an audio answer.
    pub(super) audio_usage: Option<AudioUsage>,
    /// The tool calls assembled so far, by their `index`.
    pub(super) tool_calls: BTreeMap<u32, ToolCall>,
    /// How many tool-call parts (whole calls or stream fragments) arrived.
    pub(super) tool_parts: usize,
    /// When the first event carrying a tool-call part was read.
    pub(super) first_tool_call: Option<Instant>,
    /// The Responses API function call streamed last (by its
    /// `output_index`), for events that do not name theirs.
    pub(super) current_call: Option<u32>,
}

impl Output {
    /// Handles one SSE line; `Ok(true)` at `[DONE]`.
    pub(super) fn on_line(
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
    pub(super) fn on_body(
        &mut self,
        body: &[u8],
        url: &str,
    ) -> std::result::Result<(), OpenAiError> {
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

/// What an audio request sent: the clip's length as its file states it
/// (else the seconds the server's usage says it heard), its size, and the
/// tokens the server charged for it.
pub(super) fn audio_stats(
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
pub(super) fn pooled_response(
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use guidebench_core::sampling::Sampling;

    use super::*;

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
