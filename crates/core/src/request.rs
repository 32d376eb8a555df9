//! The request model: what a benchmark asks a backend for, and what it gets back.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
pub use crate::media::{ImageStats, MediaSource};
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
    /// `system`, `user`, `assistant`, ...
    pub role: String,
    /// The content, in order.
    pub content: Vec<ContentPart>,
}

impl ChatMessage {
    /// A message with text content only.
    pub fn text(role: impl Into<String>, text: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: vec![ContentPart::text(text)],
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
}

impl GenerationRequest {
    /// A request with validated sampling.
    pub fn new(id: u64, input: RequestInput, sampling: Sampling) -> Self {
        GenerationRequest {
            id,
            input,
            sampling,
            expected_prompt_tokens: None,
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
        }
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
}
