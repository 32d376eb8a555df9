//! `POST /v1/chat/completions` and `POST /v1/completions`: the fields of a
//! request the mock reads, the tool call a chat request may get
//! ([`ToolAnswer`]), and the answer, streamed as chunks ([`plan_stream`],
//! whose plan the audio endpoints share) or whole; with the JSON of chunks,
//! usage and ids (see the [`mock_server`](super) docs' `# Timing`,
//! `# Output length` and `# Tool calls`).

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use hyper::Request;
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;

use super::Shared;
use super::body::{Answer, bad_request, status_fault, stream_answer, whole_answer};
use super::connection::ConnState;
use super::plan::{
    Fault, Rng, Step, decide_fault, event_gap, last_token_at, output_length, queue_wait, words,
};
use super::request::{Arrival, count_tokens, parse_body, record_request, timing_slot};

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

#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
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

pub(super) async fn completion(
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

/// The tool call a chat answer makes instead of text: one call of the
/// function `tool_choice` names, else of the first tool.
#[derive(Debug, Clone)]
pub(super) struct ToolAnswer {
    /// The call's id: `call_mock_N`, N the request's number.
    pub(super) id: String,
    /// The function called.
    pub(super) name: String,
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
    pub(super) fn offered(
        tools: &[Value],
        tool_choice: Option<&Value>,
        index: u64,
    ) -> Option<Self> {
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
    pub(super) fn fragment(from: u32, n: u32, first: bool, last: bool) -> String {
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

#[derive(Debug, Clone, Copy)]
pub(super) struct Usage {
    pub(super) prompt: u32,
    pub(super) completion: u32,
    pub(super) reasoning: u32,
    /// Seconds of an uploaded audio clip (audio endpoints).
    pub(super) seconds: Option<f64>,
}

impl Usage {
    pub(super) fn json(self) -> String {
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

pub(super) struct Ids<'a> {
    pub(super) index: u64,
    /// Chat completions (else text completions, or audio).
    pub(super) chat: bool,
    /// An audio endpoint's answer: vLLM's `transcription.chunk`s, with
    /// chat's `delta.content`.
    pub(super) audio: bool,
    pub(super) model: &'a str,
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
pub(super) fn plan_stream(
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
