//! The Responses API's request (`request_format=responses`): its body
//! ([`responses_body`]: `instructions`, `input` items, `max_output_tokens`,
//! the tools in the API's flat shape and its `tool_choice`), and the
//! conversation state behind `server_history`: the ids of earlier answers
//! ([`ResponseIds`]), each kept under the hash of the conversation it
//! ended ([`ConversationKey`]), so that a later turn sends
//! `previous_response_id` and only the items after that answer.
//!
//! The parent's send path calls [`responses_body`] and, once an answer is
//! read, remembers its id. The sibling `body` module supplies the sampling
//! fields, the tool-call constraint, media and `extra_body`; asked for a
//! Responses request's body, it builds it here (without conversation
//! state). Reading the answer is the `answer` module's.

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::Mutex;

use base64::Engine as _;
use guidebench_core::Result;
use guidebench_core::request::{
    ChatMessage, ContentPart, GenerationRequest, MediaSource, MessageTool, RequestInput, ToolCall,
    ToolChoice, ToolSet,
};
use serde_json::{Map, Value, json};

use super::body::{
    FUNCTION_FIELDS, constrain_tool_call_body, finish_body, image_url, insert_sampling, read_media,
};
use super::lock;
use crate::config::OpenAiConfig;

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

/// `tool_choice` as the Responses API spells it: `"auto"`, `"none"`,
/// `"required"`, or `{"type": "function", "name"}` for a named function.
fn responses_tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Function(name) => json!({"type": "function", "name": name}),
        other => other.to_json(),
    }
}

/// How many answers' ids a run keeps for `server_history`; the oldest are
/// forgotten first.
const REMEMBERED_RESPONSES: usize = 65_536;

/// The ids of Responses API answers, each under the key of the
/// conversation it ended ([`ConversationKey::answered`]).
#[derive(Debug, Default)]
pub(super) struct ResponseIds {
    by_key: HashMap<u64, String>,
    order: VecDeque<u64>,
}

impl ResponseIds {
    /// Keeps `id` as the answer that ended the conversation `key`.
    pub(super) fn remember(&mut self, key: u64, id: String) {
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
pub(super) struct ConversationKey(DefaultHasher);

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
    pub(super) fn answered<'c>(
        mut self,
        answer: &str,
        calls: impl IntoIterator<Item = &'c ToolCall>,
    ) -> u64 {
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
pub(super) fn responses_body(
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
            json!({"type": "input_image", "image_url": image_url(source)?})
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use guidebench_core::sampling::Sampling;

    use super::*;
    use crate::backend::fixtures::{body_of, config, weather_tools};
    use crate::config::RequestFormat;

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
        let err = responses_body(&c, "m", &request, None).expect_err("media answer");
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
}
