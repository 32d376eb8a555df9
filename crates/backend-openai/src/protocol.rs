//! The OpenAI wire format as far as the client reads it: response and
//! stream-chunk shapes, a server-sent-events line splitter, and the rule
//! that turns event arrival instants into per-token timestamps.

use std::borrow::Cow;
use std::time::Instant;

use guidebench_core::clock::{Clock, Timestamp};
use serde::Deserialize;

/// Token usage as the server reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct Usage {
    #[serde(default)]
    pub prompt_tokens: Option<u32>,
    #[serde(default)]
    pub completion_tokens: Option<u32>,
    #[serde(default)]
    pub completion_tokens_details: Option<CompletionDetails>,
}

impl Usage {
    /// Reasoning tokens, where the server breaks them out.
    pub fn reasoning_tokens(&self) -> Option<u32> {
        self.completion_tokens_details
            .and_then(|d| d.reasoning_tokens)
    }
}

/// `usage.completion_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct CompletionDetails {
    #[serde(default)]
    pub reasoning_tokens: Option<u32>,
}

/// An `error` object inside a body or an event.
#[derive(Debug, Deserialize)]
pub(crate) struct ApiError<'a> {
    #[serde(borrow, default)]
    pub message: Option<Cow<'a, str>>,
}

/// An `error` field: an object with a message, or a bare string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum ErrorField<'a> {
    Object(#[serde(borrow)] ApiError<'a>),
    Text(#[serde(borrow)] Cow<'a, str>),
    Other(serde::de::IgnoredAny),
}

impl ErrorField<'_> {
    pub fn message(&self) -> String {
        match self {
            ErrorField::Object(ApiError { message: Some(m) }) => m.to_string(),
            ErrorField::Text(m) => m.to_string(),
            _ => "unspecified error".to_string(),
        }
    }
}

/// Output text fields of a streamed delta or a full message.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Message<'a> {
    #[serde(borrow, default)]
    pub content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub reasoning: Option<Cow<'a, str>>,
    /// Tool calls: whole in a message, in fragments in a streamed delta
    /// (`null` is read as none).
    #[serde(borrow, default)]
    pub tool_calls: Option<Vec<ToolCallPart<'a>>>,
}

/// One entry of `tool_calls`: a whole call in a message, a fragment of
/// one in a streamed delta (the first fragment of a call has its `id` and
/// function `name`, later ones pieces of its `arguments`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ToolCallPart<'a> {
    /// Which call of the answer this is a part of (absent in a whole
    /// message, where the position says it).
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(borrow, default)]
    pub id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub function: Option<FunctionPart<'a>>,
}

/// `function` of a tool call or a fragment of one.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct FunctionPart<'a> {
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub arguments: Option<Cow<'a, str>>,
}

/// One choice of a chunk or a response (chat and text shapes at once).
#[derive(Debug, Deserialize)]
pub(crate) struct Choice<'a> {
    #[serde(borrow, default)]
    pub delta: Option<Message<'a>>,
    #[serde(borrow, default)]
    pub message: Option<Message<'a>>,
    #[serde(borrow, default)]
    pub text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub finish_reason: Option<Cow<'a, str>>,
}

impl<'a> Choice<'a> {
    /// The output text and the reasoning text this choice carries.
    pub fn texts(&self) -> (Option<&str>, Option<&str>) {
        let message = self.delta.as_ref().or(self.message.as_ref());
        let content = message
            .and_then(|m| m.content.as_deref())
            .or(self.text.as_deref());
        let reasoning =
            message.and_then(|m| m.reasoning_content.as_deref().or(m.reasoning.as_deref()));
        (content, reasoning)
    }

    /// The tool calls (or fragments of them) this choice carries.
    pub fn tool_calls(&self) -> &[ToolCallPart<'a>] {
        self.delta
            .as_ref()
            .or(self.message.as_ref())
            .and_then(|m| m.tool_calls.as_deref())
            .unwrap_or(&[])
    }
}

/// A stream chunk or a whole (non-streamed) response.
#[derive(Debug, Deserialize)]
pub(crate) struct Body<'a> {
    #[serde(borrow, default)]
    pub choices: Vec<Choice<'a>>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(borrow, default)]
    pub error: Option<ErrorField<'a>>,
}

/// `usage` of a Responses API answer (`input_tokens`, `output_tokens`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct ResponsesUsage {
    #[serde(default)]
    pub input_tokens: Option<u32>,
    #[serde(default)]
    pub output_tokens: Option<u32>,
    #[serde(default)]
    pub output_tokens_details: Option<CompletionDetails>,
}

impl From<ResponsesUsage> for Usage {
    fn from(usage: ResponsesUsage) -> Self {
        Usage {
            prompt_tokens: usage.input_tokens,
            completion_tokens: usage.output_tokens,
            completion_tokens_details: usage.output_tokens_details,
        }
    }
}

/// A text part of a Responses API output item: `output_text` in a
/// `message`, `reasoning_text` or `summary_text` in a `reasoning` item.
#[derive(Debug, Deserialize)]
pub(crate) struct OutputPart<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub text: Option<Cow<'a, str>>,
}

/// One item of a Responses API answer's `output` (or the `item` of a
/// `response.output_item.added` / `.done` event): a `message`, a
/// `reasoning` item, or a `function_call` (`call_id`, `name`,
/// `arguments`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct OutputItem<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub content: Option<Vec<OutputPart<'a>>>,
    #[serde(borrow, default)]
    pub summary: Option<Vec<OutputPart<'a>>>,
    /// A function call's id, which a later `function_call_output` names.
    #[serde(borrow, default)]
    pub call_id: Option<Cow<'a, str>>,
    /// The function a function call calls.
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// A function call's arguments (a JSON text, as generated).
    #[serde(borrow, default)]
    pub arguments: Option<Cow<'a, str>>,
}

impl OutputItem<'_> {
    /// Whether the item is a function call.
    pub fn is_function_call(&self) -> bool {
        self.kind.as_deref() == Some("function_call")
    }
}

/// `incomplete_details` of a Responses API answer.
#[derive(Debug, Deserialize)]
pub(crate) struct IncompleteDetails<'a> {
    #[serde(borrow, default)]
    pub reason: Option<Cow<'a, str>>,
}

/// A Responses API answer: the whole body of a non-streamed one, or the
/// `response` of a `response.created`, `response.completed`,
/// `response.incomplete` or `response.failed` event.
#[derive(Debug, Deserialize)]
pub(crate) struct ResponseObject<'a> {
    #[serde(borrow, default)]
    pub id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub status: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub output: Option<Vec<OutputItem<'a>>>,
    #[serde(default)]
    pub usage: Option<ResponsesUsage>,
    #[serde(borrow, default)]
    pub error: Option<ErrorField<'a>>,
    #[serde(borrow, default)]
    pub incomplete_details: Option<IncompleteDetails<'a>>,
}

impl ResponseObject<'_> {
    /// Whether the answer stopped at `max_output_tokens`.
    pub fn hit_max_output_tokens(&self) -> bool {
        self.incomplete_details
            .as_ref()
            .and_then(|d| d.reason.as_deref())
            == Some("max_output_tokens")
    }

    /// The answer's output text (its `message` items' `output_text`
    /// parts) and its reasoning text (its `reasoning` items' text and
    /// summary parts), each empty when absent.
    pub fn texts(&self) -> (String, String) {
        let mut text = String::new();
        let mut reasoning = String::new();
        for item in self.output.iter().flatten() {
            match item.kind.as_deref() {
                Some("message") => {
                    for part in item.content.iter().flatten() {
                        if part.kind.as_deref() == Some("output_text")
                            && let Some(t) = &part.text
                        {
                            text.push_str(t);
                        }
                    }
                }
                Some("reasoning") => {
                    let parts = item.content.iter().chain(&item.summary).flatten();
                    for part in parts {
                        if let Some(t) = &part.text {
                            reasoning.push_str(t);
                        }
                    }
                }
                _ => {}
            }
        }
        (text, reasoning)
    }
}

/// One server-sent event of a streamed Responses API answer; its `type`
/// says which fields it has.
#[derive(Debug, Deserialize)]
pub(crate) struct ResponsesEvent<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    /// The text of a `*.delta` event.
    #[serde(borrow, default)]
    pub delta: Option<Cow<'a, str>>,
    /// Which output item an item or function-call event is about.
    #[serde(default)]
    pub output_index: Option<u32>,
    /// The item of a `response.output_item.added` / `.done` event.
    #[serde(borrow, default)]
    pub item: Option<OutputItem<'a>>,
    /// The whole arguments of a `response.function_call_arguments.done`.
    #[serde(borrow, default)]
    pub arguments: Option<Cow<'a, str>>,
    /// The function of a `response.function_call_arguments.done`, where
    /// the server names it.
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// The answer, in `response.*` lifecycle events.
    #[serde(borrow, default)]
    pub response: Option<ResponseObject<'a>>,
    /// The message of an `error` event.
    #[serde(borrow, default)]
    pub message: Option<Cow<'a, str>>,
    /// The code of an `error` event (a string or a number).
    #[serde(default)]
    pub code: Option<serde_json::Value>,
    /// An `error` object, as some servers send one in place of an event.
    #[serde(borrow, default)]
    pub error: Option<ErrorField<'a>>,
}

impl ResponsesEvent<'_> {
    /// The message of an `error` event: its code and message.
    pub fn error_message(&self) -> String {
        let code = match &self.code {
            Some(serde_json::Value::String(c)) if !c.is_empty() => Some(c.clone()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        match (code, self.message.as_deref().filter(|m| !m.is_empty())) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (None, Some(message)) => message.to_owned(),
            (Some(code), None) => code,
            (None, None) => match &self.error {
                Some(error) => error.message(),
                None => "an error event without a message".to_owned(),
            },
        }
    }
}

/// One vector of an embeddings or pooling answer: numbers, rows of
/// numbers (vLLM's token-level pooling), or with `encoding_format=base64`
/// little-endian `f32` bytes in base64.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Vector<'a> {
    Numbers(Vec<f64>),
    Rows(Vec<Vec<f64>>),
    Base64(#[serde(borrow)] Cow<'a, str>),
}

impl Vector<'_> {
    /// How many numbers it holds; an error for base64 text that is not
    /// whole `f32` values.
    pub fn len(&self) -> Result<usize, String> {
        match self {
            Vector::Numbers(v) => Ok(v.len()),
            Vector::Rows(rows) => Ok(rows.iter().map(Vec::len).sum()),
            Vector::Base64(text) => {
                use base64::Engine as _;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text.as_bytes())
                    .map_err(|e| format!("a base64 vector that does not decode: {e}"))?;
                if bytes.len() % 4 == 0 {
                    Ok(bytes.len() / 4)
                } else {
                    Err(format!(
                        "a base64 vector of {} bytes, not whole 32-bit floats",
                        bytes.len()
                    ))
                }
            }
        }
    }
}

/// One item of `data` in an embeddings answer (`embedding`) or a vLLM
/// pooling answer (`data`).
#[derive(Debug, Deserialize)]
pub(crate) struct PooledItem<'a> {
    #[serde(borrow, default)]
    pub embedding: Option<Vector<'a>>,
    #[serde(borrow, default)]
    pub data: Option<Vector<'a>>,
}

/// A whole embeddings or pooling answer.
#[derive(Debug, Deserialize)]
pub(crate) struct PooledBody<'a> {
    #[serde(borrow, default)]
    pub data: Option<Vec<PooledItem<'a>>>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(borrow, default)]
    pub error: Option<ErrorField<'a>>,
}

/// What an embeddings or pooling answer held: its vectors and their
/// sizes, and the server's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pooled {
    /// The vectors answered, one per input.
    pub vectors: usize,
    /// The numbers in the first vector.
    pub dimensions: usize,
    /// The usage, if the server reported it (`prompt_tokens`).
    pub usage: Option<Usage>,
}

impl PooledBody<'_> {
    /// The answer's vectors, each read from `field` of its item
    /// (`embedding` or `data`); an error names what is missing or wrong.
    pub fn vectors(&self, field: &str) -> Result<Pooled, String> {
        let items = self
            .data
            .as_deref()
            .ok_or_else(|| "no `data` list in the answer".to_owned())?;
        if items.is_empty() {
            return Err("an empty `data` list: no vector was answered".to_owned());
        }
        let mut dimensions = 0;
        for (i, item) in items.iter().enumerate() {
            let vector = if field == "embedding" {
                item.embedding.as_ref()
            } else {
                item.data.as_ref()
            };
            let vector = vector.ok_or_else(|| format!("`data[{i}]` has no `{field}`"))?;
            let len = vector
                .len()
                .map_err(|e| format!("`data[{i}].{field}`: {e}"))?;
            if i == 0 {
                dimensions = len;
            }
        }
        Ok(Pooled {
            vectors: items.len(),
            dimensions,
            usage: self.usage,
        })
    }
}

/// `usage` of an audio answer (transcriptions, translations), in any of
/// the shapes servers write: vLLM's (and GuideLLM's mock's)
/// `{prompt_tokens, completion_tokens, total_tokens, seconds}`, OpenAI
/// whisper-1's `{"type": "duration", "seconds"}`, or OpenAI
/// gpt-4o-transcribe's `{"type": "tokens", "input_tokens",
/// "output_tokens", "input_token_details": {"audio_tokens"}}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub(crate) struct AudioUsage {
    #[serde(default)]
    pub prompt_tokens: Option<u32>,
    #[serde(default)]
    pub completion_tokens: Option<u32>,
    #[serde(default)]
    pub input_tokens: Option<u32>,
    #[serde(default)]
    pub output_tokens: Option<u32>,
    #[serde(default)]
    pub input_token_details: Option<InputTokenDetails>,
    /// Seconds of audio the server heard.
    #[serde(default)]
    pub seconds: Option<f64>,
}

/// `usage.input_token_details` of an OpenAI transcription.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct InputTokenDetails {
    #[serde(default)]
    pub audio_tokens: Option<u32>,
}

impl AudioUsage {
    /// The prompt tokens: `prompt_tokens`, else `input_tokens`, else the
    /// audio tokens.
    pub fn prompt(&self) -> Option<u32> {
        self.prompt_tokens
            .or(self.input_tokens)
            .or_else(|| self.audio_tokens())
    }

    /// The tokens charged for the audio: `input_token_details.audio_tokens`,
    /// else the prompt tokens (all of a vLLM prompt is the audio).
    pub fn audio_tokens(&self) -> Option<u32> {
        self.input_token_details
            .and_then(|d| d.audio_tokens)
            .or(self.prompt_tokens)
            .or(self.input_tokens)
    }

    /// The output tokens: `completion_tokens`, else `output_tokens`.
    pub fn output(&self) -> Option<u32> {
        self.completion_tokens.or(self.output_tokens)
    }

    /// The usage in the chat shape, for the token counts.
    pub fn tokens(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt(),
            completion_tokens: self.output(),
            completion_tokens_details: None,
        }
    }
}

/// A whole audio answer, or one event of a streamed one: vLLM's
/// `transcription.chunk` (`choices[].delta.content`, `usage`), or OpenAI's
/// typed events (`transcript.text.delta` with `delta`,
/// `transcript.text.done` with `text` and `usage`); a whole answer is
/// `{"text", "usage"}`.
#[derive(Debug, Deserialize)]
pub(crate) struct AudioBody<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub delta: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub choices: Vec<Choice<'a>>,
    #[serde(default)]
    pub usage: Option<AudioUsage>,
    #[serde(borrow, default)]
    pub error: Option<ErrorField<'a>>,
}

/// Splits a byte stream into lines without copying complete lines: only a
/// partial line at the end of a network read is kept for the next one.
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    partial: Vec<u8>,
}

impl LineSplitter {
    /// Calls `on_line` with every complete line of `chunk` (without its
    /// `\n` or `\r\n`), stopping early when it returns `Ok(true)`.
    pub fn feed<E>(
        &mut self,
        chunk: &[u8],
        mut on_line: impl FnMut(&[u8]) -> Result<bool, E>,
    ) -> Result<bool, E> {
        let mut rest = chunk;
        if !self.partial.is_empty() {
            let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                self.partial.extend_from_slice(rest);
                return Ok(false);
            };
            self.partial.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let line = std::mem::take(&mut self.partial);
            let stop = on_line(trim_cr(&line))?;
            self.partial = line;
            self.partial.clear();
            if stop {
                return Ok(true);
            }
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if on_line(trim_cr(&rest[..end]))? {
                return Ok(true);
            }
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
        Ok(false)
    }

    /// The bytes of an unfinished last line.
    pub fn remainder(&self) -> &[u8] {
        &self.partial
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The payload of an SSE `data:` line, or `None` for other lines
/// (comments, `event:`, `id:`, blank separators).
pub(crate) fn data_payload(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(b"data:")?;
    Some(rest.strip_prefix(b" ").unwrap_or(rest))
}

/// An event that carried output text: when its bytes were read, and how
/// many bytes of text (content and reasoning) it carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutputEvent {
    pub at: Instant,
    pub text_bytes: u32,
}

/// Turns the events that carried output text into one timestamp per output
/// token.
///
/// The rule, with `E` events and `U` output tokens from the server's usage:
///
/// * **`U == E`** (one token per event, the common case): each event's
///   instant is its token's instant.
/// * **`U > E`** (some events carry several tokens): the `U` tokens are
///   apportioned to the events in proportion to the length of the text each
///   carried (largest remainders, ties to the earlier event), at least one
///   per event. The tokens of the first event all get its instant (they
///   arrived together; the first of them defines TTFT). A later event
///   carrying `k` tokens that arrived a gap `g` after the previous event
///   gets its tokens at `g/k, 2g/k, …, g` after that event: each of them
///   counts `g/k` towards inter-token latency, never one token for the whole
///   gap, and the last lands on the event's own instant.
/// * **`U < E`** (some events carry partial tokens): `U` of the instants are
///   kept, evenly picked, always including the first and the last.
/// * **`U` unknown** (no usage): one token per event.
/// * **`E == 0`, `U > 0`** (a non-streamed response): every token gets the
///   instant `fallback`, when the whole response arrived.
///
/// Whatever the split, the mean inter-token latency stays
/// `(last − first) / (U − 1)`.
pub(crate) fn token_timestamps(
    events: &[OutputEvent],
    usage_tokens: Option<u32>,
    fallback: Instant,
) -> (Vec<Timestamp>, u32) {
    let clock = Clock::global();
    let e = events.len();
    let Some(u) = usage_tokens else {
        let count = u32::try_from(e).unwrap_or(u32::MAX);
        return (events.iter().map(|ev| clock.wall(ev.at)).collect(), count);
    };
    let n = u as usize;
    if e == 0 {
        return (vec![clock.wall(fallback); n], u);
    }
    if n == 0 {
        return (Vec::new(), 0);
    }
    let mut out = Vec::with_capacity(n);
    if n == e {
        out.extend(events.iter().map(|ev| clock.wall(ev.at)));
    } else if n > e {
        let counts = apportion(events, n);
        out.resize(counts[0], clock.wall(events[0].at));
        for (pair, &k) in events.windows(2).zip(&counts[1..]) {
            let gap = pair[1].at.saturating_duration_since(pair[0].at);
            for m in 1..=k {
                // Casts: token counts are small.
                let offset = gap.mul_f64(m as f64 / k as f64);
                out.push(clock.wall(pair[0].at + offset));
            }
        }
    } else if n == 1 {
        out.push(clock.wall(events[0].at));
    } else {
        // Pick n of the e instants, evenly, first and last included.
        for m in 0..n {
            let index = (m * (e - 1) + (n - 1) / 2) / (n - 1);
            out.push(clock.wall(events[index.min(e - 1)].at));
        }
    }
    (out, u)
}

/// Shares `total` (at least the number of events) tokens out over the
/// events in proportion to their text length, at least one each.
fn apportion(events: &[OutputEvent], total: usize) -> Vec<usize> {
    let weights: Vec<u128> = events
        .iter()
        .map(|ev| u128::from(ev.text_bytes.max(1)))
        .collect();
    let sum: u128 = weights.iter().sum();
    let total_w = total as u128;
    let mut counts: Vec<usize> = weights
        .iter()
        .map(|w| usize::try_from(total_w * w / sum).unwrap_or(total))
        .collect();
    let mut left = total.saturating_sub(counts.iter().sum());
    if left > 0 {
        let mut order: Vec<usize> = (0..events.len()).collect();
        // Largest remainder first; the sort is stable, so ties go to the earlier event.
        order.sort_by_key(|&i| std::cmp::Reverse(total_w * weights[i] % sum));
        for &i in order.iter().cycle() {
            if left == 0 {
                break;
            }
            counts[i] += 1;
            left -= 1;
        }
    }
    // At least one token per event, taken from the largest counts.
    for i in 0..counts.len() {
        if counts[i] == 0 {
            let Some(max) = (0..counts.len()).max_by_key(|&j| (counts[j], std::cmp::Reverse(j)))
            else {
                break;
            };
            if counts[max] > 1 {
                counts[max] -= 1;
                counts[i] = 1;
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ms(base: Instant, v: &[u64]) -> Vec<OutputEvent> {
        weighted(base, &v.iter().map(|&m| (m, 1)).collect::<Vec<_>>())
    }

    fn weighted(base: Instant, v: &[(u64, u32)]) -> Vec<OutputEvent> {
        v.iter()
            .map(|&(m, text_bytes)| OutputEvent {
                at: base + Duration::from_millis(m),
                text_bytes,
            })
            .collect()
    }

    fn rel(base: Instant, ts: &[Timestamp]) -> Vec<f64> {
        let b = Clock::global().wall(base);
        ts.iter()
            .map(|t| (t.secs_since(b) * 1e3 * 100.0).round() / 100.0)
            .collect()
    }

    #[test]
    fn one_token_per_event_keeps_every_instant() {
        let base = Instant::now();
        let (ts, n) = token_timestamps(&ms(base, &[10, 20, 30]), Some(3), base);
        assert_eq!(n, 3);
        assert_eq!(rel(base, &ts), vec![10.0, 20.0, 30.0]);
    }

    #[test]
    fn events_with_several_tokens_split_their_gap_in_proportion_to_their_text() {
        let base = Instant::now();
        // Texts of 4, 4 and 1 units: 9 tokens split 4, 4, 1.
        let events = weighted(base, &[(10, 20), (50, 20), (60, 5)]);
        let (ts, n) = token_timestamps(&events, Some(9), base);
        assert_eq!(n, 9);
        assert_eq!(
            rel(base, &ts),
            vec![10.0, 10.0, 10.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
        );
        // Equal texts: 7 tokens over 3 events -> 3, 2, 2 (the remainder to the earliest).
        let (ts, _) = token_timestamps(&ms(base, &[10, 30, 50]), Some(7), base);
        assert_eq!(
            rel(base, &ts),
            vec![10.0, 10.0, 10.0, 20.0, 30.0, 40.0, 50.0]
        );
    }

    #[test]
    fn every_event_keeps_at_least_one_token() {
        let base = Instant::now();
        let events = weighted(base, &[(0, 100), (10, 0), (20, 0)]);
        let (ts, n) = token_timestamps(&events, Some(4), base);
        assert_eq!(n, 4);
        assert_eq!(rel(base, &ts), vec![0.0, 0.0, 10.0, 20.0]);
    }

    #[test]
    fn fewer_tokens_than_events_keep_the_first_and_last_instants() {
        let base = Instant::now();
        let (ts, n) = token_timestamps(&ms(base, &[1, 2, 3, 4, 5]), Some(3), base);
        assert_eq!(n, 3);
        assert_eq!(rel(base, &ts), vec![1.0, 3.0, 5.0]);
    }

    #[test]
    fn without_usage_each_event_is_a_token_and_without_events_the_response_instant_is_used() {
        let base = Instant::now();
        let (ts, n) = token_timestamps(&ms(base, &[5, 9]), None, base);
        assert_eq!((n, ts.len()), (2, 2));
        let end = base + Duration::from_millis(3);
        let (ts, n) = token_timestamps(&[], Some(4), end);
        assert_eq!(n, 4);
        assert_eq!(rel(base, &ts), vec![3.0; 4]);
    }

    fn pooled(json: &str, field: &str) -> Result<Pooled, String> {
        let body: PooledBody<'_> = serde_json::from_str(json).map_err(|e| e.to_string())?;
        body.vectors(field)
    }

    #[test]
    fn an_embeddings_answer_gives_its_vectors_and_prompt_tokens() {
        let answer = r#"{"object":"list","data":[
            {"object":"embedding","index":0,"embedding":[0.1,-0.2,0.3]},
            {"object":"embedding","index":1,"embedding":[1,2,3]}],
            "model":"m","usage":{"prompt_tokens":7,"total_tokens":7}}"#;
        let p = pooled(answer, "embedding").expect("parsed");
        assert_eq!((p.vectors, p.dimensions), (2, 3));
        assert_eq!(p.usage.and_then(|u| u.prompt_tokens), Some(7));
        assert_eq!(p.usage.and_then(|u| u.completion_tokens), None);
        // Two f32 in base64 (encoding_format=base64).
        let b64 = r#"{"data":[{"embedding":"AACAPwAAAEA="}]}"#;
        let p = pooled(b64, "embedding").expect("base64");
        assert_eq!((p.vectors, p.dimensions, p.usage), (1, 2, None));
    }

    #[test]
    fn a_pooling_answer_gives_its_vectors_under_data() {
        let answer = r#"{"id":"pool-1","object":"list","data":[
            {"index":0,"object":"pooling","data":[[0.5,0.5],[0.25,0.75]]}],
            "usage":{"prompt_tokens":2,"total_tokens":2,"completion_tokens":0}}"#;
        let p = pooled(answer, "data").expect("parsed");
        assert_eq!((p.vectors, p.dimensions), (1, 4));
        assert_eq!(p.usage.and_then(|u| u.prompt_tokens), Some(2));
        // The embeddings field is not where a pooling answer keeps it.
        let err = pooled(answer, "embedding").expect_err("wrong field");
        assert!(err.contains("`data[0]` has no `embedding`"), "{err}");
    }

    #[test]
    fn an_answer_without_vectors_or_with_broken_ones_is_refused() {
        let err = pooled(r#"{"usage":{"prompt_tokens":1}}"#, "embedding").expect_err("none");
        assert!(err.contains("no `data`"), "{err}");
        let err = pooled(r#"{"data":[]}"#, "embedding").expect_err("empty");
        assert!(err.contains("empty"), "{err}");
        let err = pooled(r#"{"data":[{"embedding":"AAA="}]}"#, "embedding").expect_err("2 bytes");
        assert!(err.contains("not whole 32-bit floats"), "{err}");
        let err = pooled(r#"{"data":[{"embedding":"*"}]}"#, "embedding").expect_err("not b64");
        assert!(err.contains("does not decode"), "{err}");
    }

    #[test]
    fn lines_split_across_reads_are_joined() {
        let mut s = LineSplitter::default();
        let mut lines = Vec::new();
        for chunk in [
            &b"data: a"[..],
            b"b\r\n\r\ndata: c\n",
            b"\nda",
            b"ta: [DONE]\n",
        ] {
            s.feed::<()>(chunk, |l| {
                lines.push(String::from_utf8_lossy(l).into_owned());
                Ok(false)
            })
            .expect("feed");
        }
        assert_eq!(lines, vec!["data: ab", "", "data: c", "", "data: [DONE]"]);
        assert!(s.remainder().is_empty());
        assert_eq!(data_payload(b"data: x"), Some(&b"x"[..]));
        assert_eq!(data_payload(b"data:x"), Some(&b"x"[..]));
        assert_eq!(data_payload(b": comment"), None);
    }
}
