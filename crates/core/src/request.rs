//! The request model: what a benchmark asks a backend for, and what it gets back.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
pub use crate::media::{AudioStats, ImageStats, MediaSource};
use crate::sampling::Sampling;

/// One part of a chat message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// Where the image comes from.
        source: MediaSource,
    },
    /// An audio clip.
    Audio {
        /// Where the clip comes from.
        source: MediaSource,
    },
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text { text: text.into() }
    }
}

/// One message of a chat conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The content, in order.
    pub content: Vec<ContentPart>,
    /// For an assistant message, the tool calls it made; for a `tool`
    /// message, the call it answers. `None` for any other message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<MessageTool>,
}

/// What a message of a tool-calling conversation says of tool calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageTool {
    /// An assistant message's tool calls (OpenAI's `tool_calls`).
    Calls(Vec<ToolCall>),
    /// A `tool` message's answer to the call with this id (OpenAI's
    /// `tool_call_id`).
    Answers(String),
}

impl ChatMessage {
    /// A message with text content only.
    pub fn text(role: impl Into<String>, text: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: vec![ContentPart::text(text)],
            tool: None,
        }
    }

    /// An assistant message with its tool calls, and its text (empty
    /// when it had none).
    pub fn tool_calls(text: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        let text = text.into();
        ChatMessage {
            role: "assistant".into(),
            content: if text.is_empty() {
                Vec::new()
            } else {
                vec![ContentPart::text(text)]
            },
            tool: Some(MessageTool::Calls(calls)),
        }
    }

    /// A `tool` message: the result of the call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, result: impl Into<String>) -> Self {
        ChatMessage {
            role: "tool".into(),
            content: vec![ContentPart::text(result)],
            tool: Some(MessageTool::Answers(call_id.into())),
        }
    }
}

/// What the model is asked to continue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestInput {
    /// A prompt, used as is unless a template is applied.
    Text(String),
    /// A chat conversation, rendered through the request format.
    Chat(Vec<ChatMessage>),
}

/// Which tool, if any, a chat request asks the model to call: OpenAI's
/// `tool_choice`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// `"auto"`: the model decides.
    #[default]
    Auto,
    /// `"none"`: the model must not call a tool.
    None,
    /// `"required"`: the model must call at least one tool.
    Required,
    /// `{"type": "function", "function": {"name": ...}}`: the model must
    /// call this function.
    Function(String),
}

impl ToolChoice {
    /// Reads OpenAI's `tool_choice` value: `"auto"`, `"none"`, `"required"`
    /// or `{"type": "function", "function": {"name": ...}}`; `None` for
    /// anything else.
    pub fn from_json(value: &serde_json::Value) -> Option<Self> {
        match value {
            serde_json::Value::String(s) => match s.as_str() {
                "auto" => Some(ToolChoice::Auto),
                "none" => Some(ToolChoice::None),
                "required" => Some(ToolChoice::Required),
                _ => None,
            },
            serde_json::Value::Object(o) => o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(serde_json::Value::as_str)
                .map(|name| ToolChoice::Function(name.to_owned())),
            _ => None,
        }
    }

    /// OpenAI's `tool_choice` value.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::Function(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}})
            }
        }
    }
}

/// The tools a chat request offers the model, as GuideLLM sends them
/// (its `tools_column` and `tool_choice`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolSet {
    /// The tool definitions, each in OpenAI's chat shape
    /// (`{"type": "function", "function": {"name", "description",
    /// "parameters"}}`), sent as they are.
    pub tools: Vec<serde_json::Value>,
    /// What the model is asked to do with them.
    pub choice: ToolChoice,
    /// Whether this turn expects the model to answer with a tool call
    /// (GuideLLM's `client_tool_call` turn): an answer without one is then
    /// handled by the run's `tool_call_missing_behavior`, and its tool-call
    /// count is recorded as 0 rather than left out.
    #[serde(default)]
    pub expect_call: bool,
}

/// A tool call the model made: a function name and its arguments (a JSON
/// text, as the model generated it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, which a later `tool` message answers.
    pub id: String,
    /// The function called.
    pub name: String,
    /// The arguments, as generated (usually JSON).
    pub arguments: String,
}

/// The tool calls of one answer: how many, whether text came with them,
/// and the calls themselves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallOutput {
    /// How many tool calls the answer made (GuideLLM's `tool_call_count`);
    /// 0 for a turn that expected a call and got none.
    pub count: u32,
    /// Whether the answer also carried text content (GuideLLM's mixed
    /// content and tool call turn): its output tokens are then GuideLLM's
    /// `mixed_content_tool_tokens`, else its `tool_call_tokens`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_text: bool,
    /// When the first event carrying a tool call arrived (a streamed
    /// `delta.tool_calls`; the whole answer's instant when not streamed).
    /// Tool-call deltas are output tokens, so the timings' `tokens` hold
    /// this instant too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<Timestamp>,
    /// The calls, in the order of their `index`. A record keeps them only
    /// when it keeps the generated text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ToolCall>,
}

impl ToolCallOutput {
    /// These calls as a record keeps them: their contents (ids, names,
    /// arguments) only when it keeps the generated text; the count, the
    /// text flag and the first call's instant always.
    #[must_use]
    pub fn kept(mut self, keep_text: bool) -> Self {
        if !keep_text {
            self.calls.clear();
        }
        self
    }
}

/// A validated generation request.
///
/// Built with [`GenerationRequest::new`]; sampling parameters are validated
/// before a request exists, so backends and engines never check them again.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationRequest {
    /// An identifier unique within a run.
    pub id: u64,
    /// The prompt or conversation.
    pub input: RequestInput,
    /// Validated sampling parameters (including `max_tokens`).
    pub sampling: Sampling,
    /// The prompt's token count as the data source computed it, if known.
    pub expected_prompt_tokens: Option<u32>,
    /// The tools offered to the model, for a chat request that has some.
    pub tools: Option<ToolSet>,
}

impl GenerationRequest {
    /// A request with validated sampling.
    pub fn new(id: u64, input: RequestInput, sampling: Sampling) -> Self {
        GenerationRequest {
            id,
            input,
            sampling,
            expected_prompt_tokens: None,
            tools: None,
        }
    }

    /// A plain text request.
    pub fn text(id: u64, prompt: impl Into<String>, sampling: Sampling) -> Self {
        GenerationRequest::new(id, RequestInput::Text(prompt.into()), sampling)
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// `max_tokens` was reached.
    Length,
    /// The end-of-sequence token was generated.
    Eos,
    /// A stop string appeared.
    Stop,
    /// The run was interrupted ([`crate::backend::Backend::interrupt`]):
    /// generation stopped early and the output is what was generated
    /// until then. The runner records such a request as incomplete, with
    /// its tokens.
    Interrupted,
    /// The model stopped to call tools (OpenAI's `tool_calls` finish
    /// reason).
    ToolCalls,
}

/// The timings of one request, in wall-clock time through one anchor
/// ([`crate::clock::Clock::global`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestTimings {
    /// When the scheduler meant to send the request (set by the runner).
    pub scheduled: Option<Timestamp>,
    /// When the caller handed the request to the backend.
    pub start: Option<Timestamp>,
    /// When the request entered the backend's queue.
    pub queued: Option<Timestamp>,
    /// When the request's batch started generating.
    pub dispatched: Option<Timestamp>,
    /// The instant of every generated token, first token first.
    pub tokens: Vec<Timestamp>,
    /// When the caller received the result.
    pub end: Option<Timestamp>,
    /// Times the request was sent again because its first send failed
    /// before the server could have answered (a pooled connection the
    /// server had closed). `start` is then the send that succeeded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// For a response that reasoned first (a streamed chat whose deltas
    /// carried `reasoning_content` or `reasoning`): when the first token of
    /// the answer itself arrived, after the reasoning. `tokens` counts
    /// reasoning and answer tokens alike, so TTFT is the first reasoning
    /// token; this instant gives the time to the first output token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_content: Option<Timestamp>,
    /// For a response that reasoned first: how many of its output tokens
    /// were reasoning (the server's `completion_tokens_details`, else the
    /// tokens that arrived before the first answer token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u32>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference.
fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl RequestTimings {
    /// When the first token was produced.
    pub fn first_token(&self) -> Option<Timestamp> {
        self.tokens.first().copied()
    }

    /// When the last token was produced.
    pub fn last_token(&self) -> Option<Timestamp> {
        self.tokens.last().copied()
    }

    /// Time to first token, in seconds: first token − request start.
    pub fn ttft(&self) -> Option<f64> {
        Some(self.first_token()?.secs_since(self.start?))
    }

    /// Mean inter-token latency of this request, in seconds:
    /// (last token − first token) / (tokens − 1). `None` with fewer than two tokens.
    // Casts: token counts are far below 2^52.
    pub fn itl_mean(&self) -> Option<f64> {
        let n = self.tokens.len();
        if n < 2 {
            return None;
        }
        Some(self.last_token()?.secs_since(self.first_token()?) / (n - 1) as f64)
    }

    /// Every gap between consecutive tokens, in seconds.
    pub fn itl_gaps(&self) -> impl Iterator<Item = f64> + '_ {
        self.tokens.windows(2).map(|w| w[1].secs_since(w[0]))
    }

    /// Time per output token, in seconds: (last token − request start) / tokens.
    // Casts: token counts are far below 2^52.
    pub fn tpot(&self) -> Option<f64> {
        let n = self.tokens.len();
        if n == 0 {
            return None;
        }
        Some(self.last_token()?.secs_since(self.start?) / n as f64)
    }

    /// Time to the first token of the answer itself, after any reasoning,
    /// in seconds: first content token − request start. `None` unless the
    /// backend reported reasoning ([`RequestTimings::first_content`]).
    pub fn ttfot(&self) -> Option<f64> {
        Some(self.first_content?.secs_since(self.start?))
    }

    /// Request latency, in seconds: end − start.
    pub fn latency(&self) -> Option<f64> {
        Some(self.end?.secs_since(self.start?))
    }
}

/// What a backend returns for a request that it served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationResponse {
    /// The request's id.
    pub id: u64,
    /// The generated text.
    pub text: String,
    /// The generated token ids, where the backend knows them.
    pub token_ids: Vec<u32>,
    /// Prompt tokens as the engine counted them.
    pub prompt_tokens: u32,
    /// Output tokens as the engine counted them.
    pub output_tokens: u32,
    /// Why generation stopped.
    pub finish_reason: FinishReason,
    /// The request's timings.
    pub timings: RequestTimings,
    /// For a request with images served by an in-process engine: how
    /// many, the prompt tokens they took (counted in `prompt_tokens`) and
    /// the time spent preparing and encoding them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageStats>,
    /// For a request that offered tools ([`GenerationRequest::tools`]):
    /// the answer's tool calls, when it made some or was expected to
    /// ([`ToolSet::expect_call`]: then a count of 0); `None` otherwise,
    /// and from backends that know no tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<ToolCallOutput>,
    /// For a request to an audio endpoint: the clip it sent and what the
    /// server charged for it; `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioStats>,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    /// The backend served it.
    Success,
    /// The backend or engine failed it.
    Error,
    /// It was cut short (the run stopped before it finished).
    Incomplete,
}

/// Why a request failed: a stable label and a message, and what the
/// server answered when it answered (its HTTP status, its own message).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestError {
    /// The stable label of the error (see [`crate::Error::label`]).
    pub label: String,
    /// The error's message.
    pub message: String,
    /// The HTTP status the server answered, for an error status (see
    /// [`crate::Error::server_answer`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The server's own message, on one line, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_message: Option<String>,
}

impl RequestError {
    /// An error with a label and a message and no server answer.
    pub fn new(label: impl Into<String>, message: impl Into<String>) -> Self {
        RequestError {
            label: label.into(),
            message: message.into(),
            status: None,
            server_message: None,
        }
    }

    /// The error of `error`: its label, its message and what the server
    /// answered, if it carries that.
    pub fn of(error: &crate::Error) -> Self {
        let (status, server_message) = error.server_answer();
        RequestError {
            label: error.label().to_owned(),
            message: error.to_string(),
            status,
            server_message: server_message.map(str::to_owned),
        }
    }
}

/// One request's outcome, whatever it was: what metrics are computed from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The request's id.
    pub id: u64,
    /// How it ended.
    pub status: RequestStatus,
    /// Why it failed, for [`RequestStatus::Error`].
    pub error: Option<RequestError>,
    /// Prompt tokens, when the backend reported them.
    pub prompt_tokens: Option<u32>,
    /// Output tokens produced (0 when none).
    pub output_tokens: u32,
    /// Why generation stopped, for a success.
    pub finish_reason: Option<FinishReason>,
    /// The generated text, when kept.
    pub text: Option<String>,
    /// What its images cost, for a request with images served by an
    /// in-process engine ([`GenerationResponse::images`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageStats>,
    /// Timings; for an error, at least the start and end the caller saw.
    pub timings: RequestTimings,
    /// For a success that a length limit stopped (finish reason `length`)
    /// before the output tokens it asked for: how many it asked for
    /// (`max_tokens`). The model's context (an engine's `max_seq_len`) or
    /// the server's own limit cut it. Set by the runner
    /// ([`RequestRecord::note_max_tokens`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_short_of: Option<u32>,
    /// For a request that offered tools: the answer's tool calls (absent
    /// when it made none and none was expected;
    /// [`RequestRecord::expecting_a_tool_call`] gives a turn that expected
    /// one and failed a count of 0). The calls' contents are kept only
    /// with the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<ToolCallOutput>,
    /// For a request to an audio endpoint that was served: the clip it
    /// sent ([`GenerationResponse::audio`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioStats>,
}

impl RequestRecord {
    /// Notes the output tokens the request asked for: a success that a
    /// length limit stopped before them gets [`RequestRecord::cut_short_of`].
    pub fn note_max_tokens(&mut self, max_tokens: u32) {
        if self.status == RequestStatus::Success
            && self.finish_reason == Some(FinishReason::Length)
            && self.output_tokens < max_tokens
        {
            self.cut_short_of = Some(max_tokens);
        }
    }

    /// The record of a served request.
    pub fn success(response: GenerationResponse, keep_text: bool) -> Self {
        RequestRecord {
            id: response.id,
            status: RequestStatus::Success,
            error: None,
            prompt_tokens: Some(response.prompt_tokens),
            output_tokens: response.output_tokens,
            finish_reason: Some(response.finish_reason),
            text: keep_text.then_some(response.text),
            images: response.images,
            timings: response.timings,
            cut_short_of: None,
            tool_calls: response.tool_calls.map(|t| t.kept(keep_text)),
            audio: response.audio,
        }
    }

    /// The record of a failed request, with the times the caller saw.
    pub fn error(id: u64, error: &crate::Error, start: Timestamp, end: Timestamp) -> Self {
        RequestRecord {
            id,
            status: RequestStatus::Error,
            error: Some(RequestError::of(error)),
            prompt_tokens: None,
            output_tokens: 0,
            finish_reason: None,
            text: None,
            images: None,
            timings: RequestTimings {
                start: Some(start),
                end: Some(end),
                ..RequestTimings::default()
            },
            cut_short_of: None,
            tool_calls: None,
            audio: None,
        }
    }

    /// The record of a request the run stopped before it finished.
    pub fn incomplete(id: u64, start: Timestamp) -> Self {
        RequestRecord {
            id,
            status: RequestStatus::Incomplete,
            error: None,
            prompt_tokens: None,
            output_tokens: 0,
            finish_reason: None,
            text: None,
            images: None,
            timings: RequestTimings {
                start: Some(start),
                ..RequestTimings::default()
            },
            cut_short_of: None,
            tool_calls: None,
            audio: None,
        }
    }

    /// The record of a request an interrupt cut short
    /// ([`FinishReason::Interrupted`]): incomplete, with the tokens it
    /// had and their instants.
    pub fn interrupted(response: GenerationResponse, keep_text: bool) -> Self {
        RequestRecord {
            id: response.id,
            status: RequestStatus::Incomplete,
            error: None,
            prompt_tokens: Some(response.prompt_tokens),
            output_tokens: response.output_tokens,
            finish_reason: None,
            text: keep_text.then_some(response.text),
            images: response.images,
            timings: response.timings,
            cut_short_of: None,
            tool_calls: response.tool_calls.map(|t| t.kept(keep_text)),
            audio: response.audio,
        }
    }

    /// The record of a turn that expected a tool call
    /// ([`ToolSet::expect_call`]): one that failed or was cut short
    /// without an answer gets a tool-call count of 0, as GuideLLM counts
    /// it; a record with its answer's calls is left as it is.
    #[must_use]
    pub fn expecting_a_tool_call(mut self) -> Self {
        self.tool_calls.get_or_insert_with(ToolCallOutput::default);
        self
    }

    /// Time to the first tool call, in seconds: first tool-call event −
    /// request start. `None` for an answer without tool calls.
    pub fn ttftc(&self) -> Option<f64> {
        let first = self.tool_calls.as_ref()?.first?;
        Some(first.secs_since(self.timings.start?))
    }

    /// How many tool calls the answer made: `None` unless the request
    /// offered tools and the answer made calls or was expected to.
    pub fn tool_call_count(&self) -> Option<u32> {
        self.tool_calls.as_ref().map(|t| t.count)
    }

    /// The real-time factor of an audio request: its latency (end −
    /// start) over the seconds of audio it sent; below 1 the server
    /// answered faster than the clip plays. `None` without audio seconds
    /// or timings.
    pub fn real_time_factor(&self) -> Option<f64> {
        let seconds = self.audio?.seconds.filter(|s| *s > 0.0)?;
        let latency = self.timings.end?.secs_since(self.timings.start?);
        Some(latency / seconds)
    }

    /// Whether the request was served.
    pub fn is_success(&self) -> bool {
        self.status == RequestStatus::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_length_stop_short_of_max_tokens_is_noted_as_cut_short() {
        let response = |output_tokens: u32, finish_reason| GenerationResponse {
            id: 0,
            text: String::new(),
            token_ids: Vec::new(),
            prompt_tokens: 250,
            output_tokens,
            finish_reason,
            timings: RequestTimings::default(),
            images: None,
            tool_calls: None,
            audio: None,
        };
        let noted = |output_tokens, finish_reason| {
            let mut record = RequestRecord::success(response(output_tokens, finish_reason), false);
            record.note_max_tokens(16);
            record.cut_short_of
        };
        assert_eq!(
            noted(7, FinishReason::Length),
            Some(16),
            "the context cut it"
        );
        assert_eq!(noted(16, FinishReason::Length), None, "max_tokens reached");
        assert_eq!(noted(7, FinishReason::Eos), None, "the model ended it");
        assert_eq!(noted(7, FinishReason::Stop), None, "a stop string ended it");
        let mut interrupted =
            RequestRecord::interrupted(response(7, FinishReason::Interrupted), false);
        interrupted.note_max_tokens(16);
        assert_eq!(
            interrupted.cut_short_of, None,
            "incomplete, counted as such"
        );
    }

    fn ts(ms: i64) -> Timestamp {
        Timestamp(ms * 1_000_000)
    }

    #[test]
    fn latency_metrics_follow_their_definitions() {
        let t = RequestTimings {
            start: Some(ts(1_000)),
            tokens: vec![ts(1_100), ts(1_120), ts(1_160), ts(1_200)],
            end: Some(ts(1_210)),
            ..Default::default()
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(t.ttft().expect("ttft"), 0.100));
        // (1200 - 1100) / 3 gaps
        assert!(close(t.itl_mean().expect("itl"), 0.100 / 3.0));
        let gaps: Vec<f64> = t.itl_gaps().collect();
        assert_eq!(gaps.len(), 3);
        assert!(close(gaps[0], 0.020) && close(gaps[1], 0.040) && close(gaps[2], 0.040));
        // (1200 - 1000) / 4 tokens
        assert!(close(t.tpot().expect("tpot"), 0.050));
        assert!(close(t.latency().expect("latency"), 0.210));
    }

    #[test]
    fn a_single_token_has_no_inter_token_latency() {
        let t = RequestTimings {
            start: Some(ts(0)),
            tokens: vec![ts(5)],
            ..Default::default()
        };
        assert_eq!(t.itl_mean(), None);
        assert_eq!(t.itl_gaps().count(), 0);
    }

    #[test]
    fn an_error_record_keeps_the_stable_label_and_message() {
        let err = crate::Error::ShuttingDown;
        let record = RequestRecord::error(7, &err, ts(1), ts(3));
        assert_eq!(record.status, RequestStatus::Error);
        let detail = record.error.expect("error detail");
        assert_eq!(detail.label, "shutting_down");
        assert_eq!(detail.message, err.to_string());
        assert!((record.timings.latency().expect("latency") - 0.002).abs() < 1e-12);
    }

    #[test]
    fn an_error_record_keeps_the_status_and_message_a_server_answered() {
        let err = crate::Error::backend_answer(
            "http_status",
            Some(503),
            Some("model overloaded".into()),
            std::io::Error::other("http://h/v1/chat/completions answered HTTP 503"),
        );
        let detail = RequestRecord::error(1, &err, ts(1), ts(2))
            .error
            .expect("error detail");
        assert_eq!(detail.status, Some(503));
        assert_eq!(detail.server_message.as_deref(), Some("model overloaded"));
        // Absent fields are left out of the JSON, and old records read.
        let json = serde_json::to_value(RequestError::new("timeout", "slow")).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"label": "timeout", "message": "slow"})
        );
        let back: RequestError = serde_json::from_value(json).expect("reads");
        assert_eq!(back, RequestError::new("timeout", "slow"));
    }

    #[test]
    fn tool_choice_reads_and_writes_openais_values() {
        for (json, choice) in [
            (serde_json::json!("auto"), ToolChoice::Auto),
            (serde_json::json!("none"), ToolChoice::None),
            (serde_json::json!("required"), ToolChoice::Required),
            (
                serde_json::json!({"type": "function", "function": {"name": "get_weather"}}),
                ToolChoice::Function("get_weather".into()),
            ),
        ] {
            assert_eq!(ToolChoice::from_json(&json), Some(choice.clone()));
            assert_eq!(choice.to_json(), json);
        }
        assert_eq!(ToolChoice::from_json(&serde_json::json!("always")), None);
    }

    #[test]
    fn records_without_tool_fields_still_read_and_are_written_without_them() {
        let record = RequestRecord::incomplete(4, ts(1));
        let mut json = serde_json::to_value(&record).expect("json");
        assert!(json.get("tool_calls").is_none(), "absent when none");
        json.as_object_mut().expect("object").remove("cut_short_of");
        let back: RequestRecord = serde_json::from_value(json).expect("old records read");
        assert_eq!(back, record);
        let reason: FinishReason = serde_json::from_str("\"tool_calls\"").expect("reads");
        assert_eq!(reason, FinishReason::ToolCalls);
    }

    #[test]
    fn a_turn_that_expected_a_tool_call_and_failed_counts_zero_calls_and_an_answer_keeps_its_own() {
        let failed = RequestRecord::error(1, &crate::Error::ShuttingDown, ts(1), ts(2));
        assert_eq!(
            failed.tool_call_count(),
            None,
            "nothing expected, nothing counted"
        );
        assert_eq!(failed.expecting_a_tool_call().tool_call_count(), Some(0));
        let mut answered = RequestRecord::incomplete(2, ts(1));
        answered.tool_calls = Some(ToolCallOutput {
            count: 2,
            ..ToolCallOutput::default()
        });
        assert_eq!(answered.expecting_a_tool_call().tool_call_count(), Some(2));
    }

    #[test]
    fn a_record_keeps_tool_call_contents_only_when_it_keeps_text() {
        let response = GenerationResponse {
            audio: None,
            id: 3,
            text: String::new(),
            token_ids: Vec::new(),
            prompt_tokens: 5,
            output_tokens: 4,
            finish_reason: FinishReason::ToolCalls,
            timings: RequestTimings {
                start: Some(ts(0)),
                ..Default::default()
            },
            images: None,
            tool_calls: Some(ToolCallOutput {
                count: 1,
                with_text: false,
                first: Some(ts(30)),
                calls: vec![ToolCall {
                    id: "call_0".into(),
                    name: "f".into(),
                    arguments: "{}".into(),
                }],
            }),
        };
        let kept = RequestRecord::success(response.clone(), true);
        assert_eq!(kept.tool_calls.expect("tools").calls.len(), 1);
        let dropped = RequestRecord::success(response, false);
        assert_eq!(dropped.tool_call_count(), Some(1), "the count stays");
        assert!((dropped.ttftc().expect("ttftc") - 0.030).abs() < 1e-12);
        assert!(dropped.tool_calls.expect("tools").calls.is_empty());
    }
}
