//! `POST /v1/responses`: OpenAI's Responses API on chat's latency model and
//! faults: the fields of a request the mock reads, the answers kept for
//! `previous_response_id`, the response object, and the typed events of a
//! stream (a function call's events are in `responses_tools`; see the
//! [`mock_server`](super) docs' `# Timing` and `# Tool calls`).

use std::sync::Arc;

use bytes::Bytes;
use hyper::Request;
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::body::{Answer, bad_request, status_fault, stream_answer, whole_answer};
use super::chat::{ToolAnswer, Usage};
use super::connection::ConnState;
use super::plan::{
    Fault, Rng, Step, decide_fault, event_gap, last_token_at, output_length, queue_wait, words,
};
use super::request::{Arrival, count_tokens, parse_body, record_request, timing_slot};
use super::{Shared, lock, responses_tools};

/// The fields of a Responses API request that the mock reads.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ResponsesRequest {
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
    pub(super) tools: Vec<Value>,
    #[serde(default)]
    pub(super) tool_choice: Option<Value>,
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
pub(super) async fn responses(
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
pub(super) fn response_event(kind: &str, sequence: &mut u32, mut fields: Value) -> Bytes {
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
