//! The crate's error type.

use std::time::Duration;

/// Everything that can go wrong talking to an OpenAI-compatible server, or
/// running the mock server.
///
/// The backend hands these to the runner wrapped in
/// [`guidebench_core::Error::Backend`], under each variant's own stable
/// [`label`](OpenAiError::label), which reports show.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenAiError {
    /// The server answered with an error status.
    #[error("{url} answered HTTP {status}: {message}")]
    HttpStatus {
        /// The URL requested.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The server's error message (or the start of its body).
        message: String,
    },

    /// The request did not finish within the configured `timeout`.
    #[error("{url} did not finish within {:.3}s", after.as_secs_f64())]
    Timeout {
        /// The URL requested.
        url: String,
        /// The configured limit.
        after: Duration,
    },

    /// The connection failed, was refused or was reset.
    #[error("{url}: {reason}")]
    Connection {
        /// The URL requested.
        url: String,
        /// The underlying error, with its causes.
        reason: String,
    },

    /// The event stream ended before the server said it was done.
    #[error("the stream from {url} ended {detail}")]
    StreamTruncated {
        /// The URL requested.
        url: String,
        /// What had arrived when it ended.
        detail: String,
    },

    /// The server sent something that is not the JSON it should be.
    #[error("{url} sent invalid JSON ({reason}): {snippet}")]
    MalformedResponse {
        /// The URL requested.
        url: String,
        /// The parser's message.
        reason: String,
        /// The start of the offending text.
        snippet: String,
    },

    /// The server reported an error inside a successful response (an SSE
    /// `error` event).
    #[error("{url} reported: {message}")]
    ServerError {
        /// The URL requested.
        url: String,
        /// The server's message.
        message: String,
    },

    /// A chat turn that expected a tool call was answered without one,
    /// under `tool_call_missing_behavior=error_stop`.
    #[error("{url} answered a turn that expected a tool call without one")]
    ToolCallMissing {
        /// The URL requested.
        url: String,
    },
    /// A request an audio endpoint (`transcriptions`, `translations`)
    /// cannot take: it must hold exactly one audio clip, given as a file,
    /// bytes or a `data:` URL, in a conversation turn without history.
    #[error("{url}: {reason}")]
    AudioInput {
        /// The URL the request was for.
        url: String,
        /// What is wrong with the request.
        reason: String,
    },

    /// `validate` could not confirm the server is ready.
    #[error("the server at {url} is not ready: {reason}")]
    NotReady {
        /// The URL checked.
        url: String,
        /// What failed.
        reason: String,
    },

    /// The mock server could not accept connections. (The I/O error is the
    /// message, not also the source, so that it is not printed twice.)
    #[error("{0}")]
    MockServer(std::io::Error),
}

impl OpenAiError {
    /// A stable, machine-readable label for this error.
    ///
    /// Core reports it as the error's label (see
    /// [`guidebench_core::Error::Backend`]).
    pub fn label(&self) -> &'static str {
        match self {
            OpenAiError::HttpStatus { .. } => "http_status",
            OpenAiError::Timeout { .. } => "timeout",
            OpenAiError::Connection { .. } => "connection",
            OpenAiError::StreamTruncated { .. } => "stream_truncated",
            OpenAiError::MalformedResponse { .. } => "malformed_response",
            OpenAiError::ServerError { .. } => "server_error",
            OpenAiError::ToolCallMissing { .. } => "tool_call_missing",
            OpenAiError::AudioInput { .. } => "audio_input",
            OpenAiError::NotReady { .. } => "unreachable",
            OpenAiError::MockServer(_) => "mock_server",
        }
    }

    /// The crate's own error inside a core error, if it holds one.
    pub fn from_core(error: &guidebench_core::Error) -> Option<&OpenAiError> {
        match error {
            guidebench_core::Error::Backend { error, .. }
            | guidebench_core::Error::Engine(error) => error.downcast_ref::<OpenAiError>(),
            _ => None,
        }
    }

    /// What the server answered, for an error it answered: the HTTP status
    /// of an error status, and the server's own message on one line.
    pub fn server_answer(&self) -> (Option<u16>, Option<String>) {
        match self {
            OpenAiError::HttpStatus {
                status, message, ..
            } => (Some(*status), Some(first_line(message))),
            OpenAiError::ServerError { message, .. } => (None, Some(first_line(message))),
            _ => (None, None),
        }
    }
}

impl From<OpenAiError> for guidebench_core::Error {
    fn from(error: OpenAiError) -> Self {
        let (status, server_message) = error.server_answer();
        guidebench_core::Error::backend_answer(error.label(), status, server_message, error)
    }
}

/// The label of a core error; for this crate's errors, their own label.
pub fn error_label(error: &guidebench_core::Error) -> &'static str {
    error.label()
}

/// The error and its chain of causes, as one line.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The start of `text`, at most `max` characters, for error messages.
pub(crate) fn snippet(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

/// The first non-empty line of `text`, trimmed, at most 200 characters.
pub(crate) fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("");
    snippet(line, 200)
}
