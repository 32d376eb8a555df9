//! The JSON bodies of chat completions, text completions, embeddings and
//! pooling requests ([`build_body`]), and the pieces the Responses API's
//! body shares with them: the sampling fields, the constraint of a turn
//! that expects a tool call, media read into data URLs, `extra_body`
//! merged in.
//!
//! The parent's send path calls [`build_body`], and for a Responses API
//! request the sibling `responses` module, which builds its body from the
//! pieces here (the dependency runs one way: nothing here calls it).
//! Audio uploads are not JSON: the crate's `audio` module builds them
//! (with [`mime_from_path`] from here).

use std::path::Path;

use base64::Engine as _;
use guidebench_core::request::{
    ChatMessage, ContentPart, GenerationRequest, MediaSource, MessageTool, RequestInput, ToolSet,
};
use guidebench_core::template::{Placeholders, PromptFormatter, RequestFormat as TemplateFormat};
use guidebench_core::tokenizer::SpecialTokens;
use guidebench_core::{Error, Result};
use serde_json::{Map, Value, json};

use crate::config::{OpenAiConfig, RequestFormat};

/// The JSON body of a completion request.
pub(super) fn build_body(
    config: &OpenAiConfig,
    model: &str,
    request: &GenerationRequest,
) -> Result<Vec<u8>> {
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
            return Err(Error::Config(
                "a Responses API body is built by the responses module, with its conversation"
                    .into(),
            ));
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
pub(super) fn insert_sampling(
    body: &mut Map<String, Value>,
    request: &GenerationRequest,
    max_key: &str,
) {
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
pub(super) fn constrain_tool_call_body(
    body: &mut Map<String, Value>,
    tools: &ToolSet,
    max_key: &str,
) {
    if tools.expect_call {
        for key in ["ignore_eos", "stop", max_key] {
            body.remove(key);
        }
    }
}

/// The fields of a function tool's definition, nested under `function` in
/// the chat shape and at the top in the Responses API's.
pub(super) const FUNCTION_FIELDS: [&str; 4] = ["name", "description", "parameters", "strict"];

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

/// `body` with `extra_body` merged in (its keys win), as JSON bytes.
pub(super) fn finish_body(config: &OpenAiConfig, mut body: Map<String, Value>) -> Result<Vec<u8>> {
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

/// The URL an image is sent as: its own URL, else its bytes (read from
/// its file) as a data URL.
pub(super) fn image_url(source: &MediaSource) -> Result<String> {
    Ok(match source {
        MediaSource::Url(url) => url.clone(),
        MediaSource::Path(path) => data_url(mime_from_path(path, "image"), &read_media(path)?),
        MediaSource::Bytes { mime, data } => data_url(mime, data),
    })
}

fn content_part(part: &ContentPart) -> Result<Value> {
    Ok(match part {
        ContentPart::Text { text } => json!({"type": "text", "text": text}),
        ContentPart::Image { source } => {
            json!({"type": "image_url", "image_url": {"url": image_url(source)?}})
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

pub(super) fn read_media(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

pub(super) fn data_url(mime: &str, data: &[u8]) -> String {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use guidebench_core::request::ToolCall;
    use guidebench_core::sampling::{Sampling, SamplingParams};

    use super::*;
    use crate::backend::fixtures::{body_of, config, weather_tools};

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
}
