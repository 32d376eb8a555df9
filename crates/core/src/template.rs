//! Shared request formatting: `request_format` (plain, the model's chat
//! template, a custom Jinja template) and multimodal placeholders.
//!
//! Chat templates are rendered with [minijinja] set up the way Hugging Face
//! `transformers` sets up Jinja2 for `apply_chat_template`: `trim_blocks`
//! and `lstrip_blocks` on, `keep_trailing_newline` off (Jinja2's default:
//! one trailing newline of the template source is dropped), loop controls,
//! `raise_exception`, `strftime_now`, and a `tojson` that writes JSON like
//! Python's `json.dumps` (no HTML escaping, `", "` and `": "` separators).
//! Python string methods (`.strip()`, `.startswith()`, `.split()`, ...)
//! come from `minijinja_contrib::pycompat`.

use std::fmt;
use std::path::PathBuf;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde};
use minijinja::{AutoEscape, Environment, ErrorKind, Value};
use serde::Serialize;

use crate::request::{ChatMessage, ContentPart, MediaSource, RequestInput};
use crate::tokenizer::SpecialTokens;
use crate::{Error, Result};

/// How a request's input becomes prompt text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RequestFormat {
    /// The prompt text as is (chat messages joined by newlines).
    #[default]
    Plain,
    /// The model's own chat template.
    DefaultTemplate,
    /// A Jinja template read from a file.
    TemplateFile(PathBuf),
    /// A Jinja template given inline.
    Inline(String),
}

impl RequestFormat {
    /// Parses `plain`, `default-template`, inline Jinja (anything with `{{`
    /// or `{%`), or a path to a template file (which must exist; it is read
    /// when the [`PromptFormatter`] is built).
    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "plain" => Ok(RequestFormat::Plain),
            "default-template" => Ok(RequestFormat::DefaultTemplate),
            inline if inline.contains("{{") || inline.contains("{%") => {
                Ok(RequestFormat::Inline(inline.to_owned()))
            }
            path => {
                let path = PathBuf::from(path);
                if path.is_file() {
                    Ok(RequestFormat::TemplateFile(path))
                } else {
                    Err(Error::Template(format!(
                        "request_format `{}` is neither `plain`, `default-template`, an inline \
                         Jinja template nor an existing template file",
                        path.display()
                    )))
                }
            }
        }
    }
}

/// Placeholders written into the prompt text for non-text content parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholders {
    /// Written for each image part. Default `<image>`.
    pub image: String,
    /// Written for each audio part. Default `<|audio|>`.
    pub audio: String,
}

impl Default for Placeholders {
    fn default() -> Self {
        Placeholders {
            image: "<image>".into(),
            audio: "<|audio|>".into(),
        }
    }
}

/// A request's input after formatting.
#[derive(Debug, Clone, PartialEq)]
pub struct FormattedPrompt {
    /// The prompt text.
    pub text: String,
    /// Whether the tokenizer should add its special tokens (false when a
    /// template wrote them).
    pub add_special_tokens: bool,
    /// Images, in placeholder order.
    pub images: Vec<MediaSource>,
    /// Audio clips, in placeholder order.
    pub audio: Vec<MediaSource>,
}

/// A chat message as a template sees it: `{"role": ..., "content": ...}`,
/// the content already flattened to text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateMessage {
    /// `system`, `user`, `assistant`, ...
    pub role: String,
    /// The message's text, placeholders included.
    pub content: String,
}

/// The name the compiled template has inside its environment.
const TEMPLATE_NAME: &str = "chat_template";

/// A compiled Jinja chat template, rendered like Hugging Face
/// `apply_chat_template` renders it (see the [module docs](self)).
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; syntax errors are [`Error::Template`] with
    /// minijinja's message.
    pub fn new(source: impl Into<String>) -> Result<Self> {
        let source = source.into();
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| Error::Template(describe(&e)))?;
        env.set_syntax(syntax);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source.clone())
            .map_err(|e| Error::Template(describe(&e)))?;
        Ok(ChatTemplate { env, source })
    }

    /// The template's source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders the template with the variables `messages`,
    /// `add_generation_prompt`, `bos_token` and `eos_token` (and `tools`
    /// and `documents` set to none, as `transformers` does without tools).
    ///
    /// `messages` are usually [`TemplateMessage`]s; anything that serialises
    /// to a list of maps works. A `raise_exception(msg)` in the template is
    /// an [`Error::Template`] whose message contains `msg`.
    pub fn render<M: Serialize>(
        &self,
        messages: &[M],
        add_generation_prompt: bool,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| Error::Template(describe(&e)))?;
        let ctx = minijinja::context! {
            messages => Value::from(Serde(messages)),
            add_generation_prompt => add_generation_prompt,
            bos_token => bos_token,
            eos_token => eos_token,
            tools => Value::from(()),
            documents => Value::from(()),
        };
        template
            .render(ctx)
            .map_err(|e| Error::Template(describe(&e)))
    }
}

/// A minijinja error with its chain of causes, on one line.
fn describe(err: &minijinja::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `raise_exception(msg)`: fails the rendering with `msg`.
fn raise_exception(message: Value) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(
        ErrorKind::InvalidOperation,
        format!("raise_exception: {message}"),
    ))
}

/// `strftime_now(fmt)`: the current UTC time formatted with `fmt`.
///
/// `transformers` uses local time; a benchmark has no reason to depend on
/// the machine's time zone, so this uses UTC.
fn strftime_now(format: &str) -> std::result::Result<String, minijinja::Error> {
    format_utc(format, jiff::Timestamp::now())
}

/// Formats a UTC time with `strftime` directives (`%Y %m %d %e %j %H %I %M
/// %S %p %B %b %A %a %%`, `%-d` for no padding, ...).
fn format_utc(format: &str, at: jiff::Timestamp) -> std::result::Result<String, minijinja::Error> {
    jiff::fmt::strtime::format(format, at).map_err(|e| {
        minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now({format:?}): {e}"),
        )
    })
}

/// `tojson`, as `transformers` defines it: Python's `json.dumps(value,
/// ensure_ascii=False, indent=None, separators=None, sort_keys=False)`,
/// with those keyword arguments. A positional argument is the indent, as
/// in Jinja2's own `tojson`.
fn tojson(
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let indent = match indent {
        Some(indent) => Some(indent),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match v.as_str() {
            Some(text) => Some(text.to_owned()),
            None => Some(" ".repeat(usize::try_from(v)?)),
        },
    };
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let separators = kwargs.get::<Option<Vec<String>>>("separators")?;
    kwargs.assert_all_used()?;
    let (item_sep, key_sep) = match separators {
        Some(pair) => match <[String; 2]>::try_from(pair) {
            Ok([item, key]) => (item, key),
            Err(_) => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: separators must be a pair (item_separator, key_separator)",
                ));
            }
        },
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };

    let bad = |e: serde_json::Error| {
        minijinja::Error::new(ErrorKind::BadSerialization, "tojson: cannot serialise")
            .with_source(e)
    };
    let mut json = serde_json::to_value(value).map_err(bad)?;
    if sort_keys {
        sort_json_keys(&mut json);
    }
    let mut out = Vec::new();
    let formatter = PyJsonFormatter {
        item_sep: item_sep.into_bytes(),
        key_sep: key_sep.into_bytes(),
        indent: indent.map(String::into_bytes),
        depth: 0,
        has_value: false,
    };
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    json.serialize(&mut serializer).map_err(bad)?;
    let text = String::from_utf8(out).map_err(|e| {
        minijinja::Error::new(ErrorKind::BadSerialization, "tojson: invalid UTF-8").with_source(e)
    })?;
    Ok(Value::from(if ensure_ascii {
        escape_non_ascii(&text)
    } else {
        text
    }))
}

fn sort_json_keys(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.sort_keys();
            map.values_mut().for_each(sort_json_keys);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(sort_json_keys),
        _ => {}
    }
}

/// Python's `ensure_ascii=True`: every character outside printable ASCII
/// as `\uXXXX` (UTF-16 surrogate pairs above U+FFFF). Control characters
/// are already escaped by the serialiser, and non-ASCII characters only
/// appear inside strings.
fn escape_non_ascii(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if u32::from(c) < 0x7f {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Writes JSON the way Python's `json.dumps` lays it out.
struct PyJsonFormatter {
    item_sep: Vec<u8>,
    key_sep: Vec<u8>,
    indent: Option<Vec<u8>>,
    depth: usize,
    has_value: bool,
}

impl PyJsonFormatter {
    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        w.write_all(bracket)
    }

    fn item<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(&self.item_sep)?;
        }
        self.newline(w)
    }

    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if let Some(indent) = &self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.depth {
                w.write_all(indent)?;
            }
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for PyJsonFormatter {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(&self.key_sep)
    }

    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Formats requests for one model: built once, used for every request.
#[derive(Debug)]
pub struct PromptFormatter {
    template: Option<ChatTemplate>,
    bos_token: String,
    eos_token: String,
    placeholders: Placeholders,
}

impl PromptFormatter {
    /// Resolves `format` against the model's own template and special tokens.
    ///
    /// `Plain` uses no template; `DefaultTemplate` compiles `model_template`
    /// (an error if the model has none); `TemplateFile` reads and compiles
    /// the file; `Inline` compiles the text. The template's `bos_token` and
    /// `eos_token` are the texts of `special_tokens`' BOS and first EOS
    /// token (empty when absent).
    pub fn new(
        format: &RequestFormat,
        model_template: Option<&str>,
        special_tokens: &SpecialTokens,
        placeholders: Placeholders,
    ) -> Result<Self> {
        let template = match format {
            RequestFormat::Plain => None,
            RequestFormat::DefaultTemplate => {
                let source = model_template.ok_or_else(|| {
                    Error::Template(
                        "the model has no chat template; use request_format=plain or give a \
                         template file or inline template"
                            .into(),
                    )
                })?;
                Some(ChatTemplate::new(source)?)
            }
            RequestFormat::TemplateFile(path) => {
                let source = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
                Some(ChatTemplate::new(source).map_err(|e| match e {
                    Error::Template(msg) => Error::Template(format!("`{}`: {msg}", path.display())),
                    other => other,
                })?)
            }
            RequestFormat::Inline(source) => Some(ChatTemplate::new(source.as_str())?),
        };
        let bos_token = special_tokens
            .bos
            .as_ref()
            .map(|t| t.text.clone())
            .unwrap_or_default();
        let eos_token = special_tokens
            .eos
            .first()
            .map(|t| t.text.clone())
            .unwrap_or_default();
        Ok(PromptFormatter {
            template,
            bos_token,
            eos_token,
            placeholders,
        })
    }

    /// The compiled template, unless the format is plain.
    pub fn template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    /// Formats one request's input.
    ///
    /// A message's content becomes one string: its parts in order, text
    /// parts as they are (empty ones dropped), each image part as the image
    /// placeholder and each audio part as the audio placeholder, joined by
    /// a single space. Images and audio clips are collected in the order
    /// they appear. Where the request's texts already hold one placeholder
    /// per image (as vLLM's and transformers' processors take a prompt
    /// such as `"<image>\nWhat is shown?"`), the images take those in
    /// order and no placeholder is added; the same for audio.
    ///
    /// Without a template, text is used as is and chat messages' contents
    /// are joined by `"\n"`; the tokenizer adds its special tokens. With a
    /// template, text is one `user` message, the template is rendered with
    /// `add_generation_prompt` true, and the tokenizer adds no special
    /// tokens (the template wrote them).
    pub fn format(&self, input: &RequestInput) -> Result<FormattedPrompt> {
        let mut images = Vec::new();
        let mut audio = Vec::new();
        let messages: Vec<TemplateMessage> = match input {
            RequestInput::Text(text) => {
                if self.template.is_none() {
                    return Ok(FormattedPrompt {
                        text: text.clone(),
                        add_special_tokens: true,
                        images,
                        audio,
                    });
                }
                vec![TemplateMessage {
                    role: "user".into(),
                    content: text.clone(),
                }]
            }
            RequestInput::Chat(chat) => {
                let in_place = self.placeholders_in_place(chat);
                chat.iter()
                    .map(|message| TemplateMessage {
                        role: message.role.clone(),
                        content: self.flatten(&message.content, in_place, &mut images, &mut audio),
                    })
                    .collect()
            }
        };
        let (text, add_special_tokens) = match &self.template {
            None => {
                let contents: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
                (contents.join("\n"), true)
            }
            Some(template) => (
                template.render(&messages, true, &self.bos_token, &self.eos_token)?,
                false,
            ),
        };
        Ok(FormattedPrompt {
            text,
            add_special_tokens,
            images,
            audio,
        })
    }

    /// Whether the texts of `chat` already hold one placeholder per image
    /// (and per audio clip): `(images, audio)`. Where they do, the media
    /// take those placeholders in order and none is added; where they hold
    /// none, each medium gets its own where it stands; any other count is
    /// left for the engine to refuse (the added placeholders make it
    /// wrong).
    fn placeholders_in_place(&self, chat: &[ChatMessage]) -> (bool, bool) {
        let (mut images, mut audio, mut image_marks, mut audio_marks) = (0, 0, 0, 0);
        let count = |text: &str, mark: &str| {
            if mark.is_empty() {
                0
            } else {
                text.matches(mark).count()
            }
        };
        for part in chat.iter().flat_map(|m| &m.content) {
            match part {
                ContentPart::Text { text } => {
                    image_marks += count(text, &self.placeholders.image);
                    audio_marks += count(text, &self.placeholders.audio);
                }
                ContentPart::Image { .. } => images += 1,
                ContentPart::Audio { .. } => audio += 1,
            }
        }
        (
            images > 0 && image_marks == images,
            audio > 0 && audio_marks == audio,
        )
    }

    /// A message's content as one string; media are pushed in order, each
    /// with its placeholder unless the texts hold them (`in_place`).
    fn flatten(
        &self,
        parts: &[ContentPart],
        (images_in_place, audio_in_place): (bool, bool),
        images: &mut Vec<MediaSource>,
        audio: &mut Vec<MediaSource>,
    ) -> String {
        let mut pieces: Vec<&str> = Vec::with_capacity(parts.len());
        for part in parts {
            match part {
                ContentPart::Text { text } => {
                    if !text.is_empty() {
                        pieces.push(text);
                    }
                }
                ContentPart::Image { source } => {
                    images.push(source.clone());
                    if !images_in_place {
                        pieces.push(&self.placeholders.image);
                    }
                }
                ContentPart::Audio { source } => {
                    audio.push(source.clone());
                    if !audio_in_place {
                        pieces.push(&self.placeholders.audio);
                    }
                }
            }
        }
        pieces.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::SpecialToken;

    const CHATML: &str = "{{ bos_token }}
{%- for message in messages %}
    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
";

    fn special() -> SpecialTokens {
        SpecialTokens {
            bos: Some(SpecialToken {
                text: "<s>".into(),
                id: 1,
            }),
            eos: vec![
                SpecialToken {
                    text: "</s>".into(),
                    id: 2,
                },
                SpecialToken {
                    text: "<|im_end|>".into(),
                    id: 3,
                },
            ],
            pad: None,
        }
    }

    fn formatter(format: RequestFormat, model_template: Option<&str>) -> Result<PromptFormatter> {
        PromptFormatter::new(&format, model_template, &special(), Placeholders::default())
    }

    fn chat() -> RequestInput {
        RequestInput::Chat(vec![
            ChatMessage::text("system", "Be brief."),
            ChatMessage::text("user", "Hi"),
        ])
    }

    fn image(name: &str) -> ContentPart {
        ContentPart::Image {
            source: MediaSource::Path(name.into()),
        }
    }

    fn audio(name: &str) -> ContentPart {
        ContentPart::Audio {
            source: MediaSource::Url(name.into()),
        }
    }

    fn multimodal() -> RequestInput {
        RequestInput::Chat(vec![
            ChatMessage {
                role: "user".into(),
                tool: None,
                content: vec![
                    image("a.png"),
                    ContentPart::text("What is in these?"),
                    audio("https://x/1.wav"),
                    image("b.png"),
                ],
            },
            ChatMessage {
                role: "user".into(),
                tool: None,
                content: vec![ContentPart::text("And this?"), image("c.png")],
            },
        ])
    }

    #[test]
    fn plain_text_passes_through_unchanged() {
        let f = formatter(RequestFormat::Plain, Some(CHATML)).expect("formatter");
        let text = "  Some prompt\nwith lines  ";
        let out = f.format(&RequestInput::Text(text.into())).expect("format");
        assert_eq!(out.text, text);
        assert!(out.add_special_tokens);
        assert!(out.images.is_empty() && out.audio.is_empty());
        assert!(f.template().is_none());
    }

    #[test]
    fn plain_chat_joins_message_contents_with_newlines() {
        let f = formatter(RequestFormat::Plain, None).expect("formatter");
        let out = f.format(&chat()).expect("format");
        assert_eq!(out.text, "Be brief.\nHi");
        assert!(out.add_special_tokens);
    }

    #[test]
    fn the_default_template_renders_the_models_chat_template() {
        let f = formatter(RequestFormat::DefaultTemplate, Some(CHATML)).expect("formatter");
        let out = f.format(&chat()).expect("format");
        assert_eq!(
            out.text,
            "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\n"
        );
        assert!(!out.add_special_tokens);
    }

    #[test]
    fn a_text_prompt_is_one_user_message_for_a_template() {
        let f = formatter(RequestFormat::DefaultTemplate, Some(CHATML)).expect("formatter");
        let out = f
            .format(&RequestInput::Text("Hello".into()))
            .expect("format");
        assert_eq!(
            out.text,
            "<s><|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(!out.add_special_tokens);
    }

    #[test]
    fn a_llama3_like_template_with_eos_and_generation_prompt_renders() {
        let template = "{{ bos_token }}{% for message in messages %}\
            {{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + \
            message['content'] | trim + eos_token }}{% endfor %}\
            {% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
        let f = formatter(RequestFormat::DefaultTemplate, Some(template)).expect("formatter");
        let out = f
            .format(&RequestInput::Chat(vec![ChatMessage::text(
                "user", " Hi \n",
            )]))
            .expect("format");
        assert_eq!(
            out.text,
            "<s><|start_header_id|>user<|end_header_id|>\n\nHi</s>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }

    #[test]
    fn blocks_are_trimmed_and_stripped_like_transformers_does() {
        let template = "{% for message in messages %}
  {% if message.role == 'user' %}
[U]{{ message.content }}
  {% endif %}
{% endfor %}
";
        let f = formatter(RequestFormat::Inline(template.into()), None).expect("formatter");
        let out = f
            .format(&RequestInput::Chat(vec![
                ChatMessage::text("user", "a"),
                ChatMessage::text("assistant", "b"),
                ChatMessage::text("user", "c"),
            ]))
            .expect("format");
        assert_eq!(out.text, "[U]a\n[U]c\n");
    }

    #[test]
    fn one_trailing_newline_of_the_template_is_dropped_like_jinja2() {
        let f = formatter(RequestFormat::Inline("{{ 'x' }}\n".into()), None).expect("formatter");
        let out = f
            .format(&RequestInput::Text(String::new()))
            .expect("format");
        assert_eq!(out.text, "x");
        let f = formatter(RequestFormat::Inline("{{ 'x' }}\n\n".into()), None).expect("formatter");
        let out = f
            .format(&RequestInput::Text(String::new()))
            .expect("format");
        assert_eq!(out.text, "x\n");
    }

    #[test]
    fn a_custom_template_is_read_from_a_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("custom.jinja");
        std::fs::write(
            &path,
            "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}>",
        )
        .expect("write");
        let format = RequestFormat::parse(path.to_str().expect("utf-8")).expect("parse");
        assert_eq!(format, RequestFormat::TemplateFile(path.clone()));
        let f = formatter(format, None).expect("formatter");
        let out = f.format(&chat()).expect("format");
        assert_eq!(out.text, "[system] Be brief.\n[user] Hi\n>");
        assert!(!out.add_special_tokens);
    }

    #[test]
    fn an_inline_template_is_rendered() {
        let format =
            RequestFormat::parse("{{ bos_token }}{{ messages[-1].content }}{{ eos_token }}")
                .expect("parse");
        assert!(matches!(format, RequestFormat::Inline(_)));
        let f = formatter(format, None).expect("formatter");
        let out = f.format(&chat()).expect("format");
        assert_eq!(out.text, "<s>Hi</s>");
    }

    #[test]
    fn request_formats_parse() {
        assert_eq!(
            RequestFormat::parse("plain").expect("plain"),
            RequestFormat::Plain
        );
        assert_eq!(
            RequestFormat::parse("default-template").expect("default"),
            RequestFormat::DefaultTemplate
        );
        assert_eq!(
            RequestFormat::parse("{% if true %}x{% endif %}").expect("inline"),
            RequestFormat::Inline("{% if true %}x{% endif %}".into())
        );
    }

    #[test]
    fn raise_exception_surfaces_as_a_template_error_with_its_message() {
        let template = "{% for message in messages %}\
            {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\
            {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\
            {% endif %}{{ message['content'] }}{% endfor %}";
        let f = formatter(RequestFormat::Inline(template.into()), None).expect("formatter");
        let ok = f
            .format(&RequestInput::Chat(vec![
                ChatMessage::text("user", "a"),
                ChatMessage::text("assistant", "b"),
            ]))
            .expect("alternating roles render");
        assert_eq!(ok.text, "ab");
        let err = f
            .format(&RequestInput::Chat(vec![
                ChatMessage::text("user", "a"),
                ChatMessage::text("user", "b"),
            ]))
            .expect_err("roles do not alternate");
        assert!(matches!(err, Error::Template(_)), "{err}");
        assert!(
            err.to_string()
                .contains("Conversation roles must alternate user/assistant/user/assistant/..."),
            "{err}"
        );
    }

    #[test]
    fn a_missing_default_template_is_a_clear_error() {
        let err = formatter(RequestFormat::DefaultTemplate, None).expect_err("no template");
        assert!(matches!(err, Error::Template(_)), "{err}");
        assert!(
            err.to_string().contains("the model has no chat template"),
            "{err}"
        );
        assert!(err.to_string().contains("request_format=plain"), "{err}");
    }

    #[test]
    fn a_missing_template_file_names_the_path() {
        let err = RequestFormat::parse("/no/such/dir/template.jinja").expect_err("missing");
        assert!(matches!(err, Error::Template(_)), "{err}");
        assert!(
            err.to_string().contains("/no/such/dir/template.jinja"),
            "{err}"
        );

        // a file that disappears after parsing: the read names it
        let path = PathBuf::from("/no/such/dir/gone.jinja");
        let err = formatter(RequestFormat::TemplateFile(path.clone()), None).expect_err("gone");
        assert!(
            matches!(err, Error::Io { path: ref p, .. } if p == &path),
            "{err}"
        );
    }

    #[test]
    fn a_syntax_error_is_a_template_error_with_minijinjas_message() {
        let err = formatter(RequestFormat::Inline("{% for x in %}".into()), None)
            .expect_err("syntax error");
        assert!(
            matches!(err, Error::Template(ref m) if m.contains("syntax error")),
            "{err}"
        );

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("broken.jinja");
        std::fs::write(&path, "{% if %}").expect("write");
        let err = formatter(RequestFormat::TemplateFile(path), None).expect_err("syntax error");
        assert!(err.to_string().contains("broken.jinja"), "{err}");
    }

    #[test]
    fn python_string_methods_work() {
        let template = "{% for message in messages %}\
            {% if message['content'].strip().startswith('/') %}cmd:{{ message['content'].strip()[1:] }}\
            {% else %}{{ message['content'].strip().split(' ') | join('_') }}{% endif %}|\
            {% endfor %}{{ 'abc'.upper() }}";
        let f = formatter(RequestFormat::Inline(template.into()), None).expect("formatter");
        let out = f
            .format(&RequestInput::Chat(vec![
                ChatMessage::text("user", "  /reset  "),
                ChatMessage::text("user", " hello big world\n"),
            ]))
            .expect("format");
        assert_eq!(out.text, "cmd:reset|hello_big_world|ABC");
    }

    #[test]
    fn loop_controls_and_namespaces_work() {
        let template = "{% set ns = namespace(n=0) %}{% for m in messages %}\
            {% if m.role == 'system' %}{% continue %}{% endif %}\
            {% set ns.n = ns.n + 1 %}{% if ns.n > 1 %}{% break %}{% endif %}{{ m.content }}\
            {% endfor %}:{{ ns.n }}";
        let f = formatter(RequestFormat::Inline(template.into()), None).expect("formatter");
        let out = f
            .format(&RequestInput::Chat(vec![
                ChatMessage::text("system", "s"),
                ChatMessage::text("user", "a"),
                ChatMessage::text("user", "b"),
            ]))
            .expect("format");
        assert_eq!(out.text, "a:2");
    }

    #[test]
    fn tojson_writes_json_like_python() {
        let template = "{{ messages | tojson }}\n{{ messages[0] | tojson(indent=2) }}\n\
            {{ {'b': 1, 'a': [1.5, none, true]} | tojson(sort_keys=true, separators=(',', ':')) }}\n\
            {{ 'é<>' | tojson(ensure_ascii=true) }}";
        let f = formatter(RequestFormat::Inline(template.into()), None).expect("formatter");
        let out = f
            .format(&RequestInput::Chat(vec![ChatMessage::text(
                "user",
                "<b>café</b> & 'x'",
            )]))
            .expect("format");
        assert_eq!(
            out.text,
            "[{\"role\": \"user\", \"content\": \"<b>café</b> & 'x'\"}]\n\
             {\n  \"role\": \"user\",\n  \"content\": \"<b>café</b> & 'x'\"\n}\n\
             {\"a\":[1.5,null,true],\"b\":1}\n\
             \"\\u00e9<>\""
        );
    }

    #[test]
    fn strftime_formats_utc_dates() {
        let at = |secs| jiff::Timestamp::from_second(secs).expect("in range");
        // 2024-07-23 14:05:09 UTC, a Tuesday
        let t = at(1_721_743_509);
        assert_eq!(format_utc("%d %b %Y", t).expect("format"), "23 Jul 2024");
        assert_eq!(
            format_utc("%A %-d %B %y, %H:%M:%S %I%p day %j %%", t).expect("format"),
            "Tuesday 23 July 24, 14:05:09 02PM day 205 %"
        );
        assert_eq!(
            format_utc("%Y-%m-%d %a", at(0)).expect("format"),
            "1970-01-01 Thu"
        );
        // 2000-02-29, a leap day
        assert_eq!(
            format_utc("%Y-%m-%d %j", at(951_782_400)).expect("format"),
            "2000-02-29 060"
        );
        let f = formatter(
            RequestFormat::Inline("{{ strftime_now('%Y') | length }}".into()),
            None,
        )
        .expect("formatter");
        let out = f
            .format(&RequestInput::Text(String::new()))
            .expect("format");
        assert_eq!(out.text, "4");
    }

    #[test]
    fn multimodal_placeholders_appear_in_order_and_media_are_collected_in_order() {
        let f = formatter(RequestFormat::Plain, None).expect("formatter");
        let out = f.format(&multimodal()).expect("format");
        assert_eq!(
            out.text,
            "<image> What is in these? <|audio|> <image>\nAnd this? <image>"
        );
        assert_eq!(
            out.images,
            vec![
                MediaSource::Path("a.png".into()),
                MediaSource::Path("b.png".into()),
                MediaSource::Path("c.png".into()),
            ]
        );
        assert_eq!(out.audio, vec![MediaSource::Url("https://x/1.wav".into())]);

        let f = formatter(RequestFormat::DefaultTemplate, Some(CHATML)).expect("formatter");
        let out = f.format(&multimodal()).expect("format");
        assert_eq!(
            out.text,
            "<s><|im_start|>user\n<image> What is in these? <|audio|> <image><|im_end|>\n\
             <|im_start|>user\nAnd this? <image><|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(out.images.len(), 3);
        assert_eq!(out.audio.len(), 1);
    }

    #[test]
    fn a_prompt_holding_one_placeholder_per_image_keeps_them_where_it_put_them() {
        let f = formatter(RequestFormat::Plain, None).expect("formatter");
        let chat = |text: &str, images: usize| {
            let mut content = vec![ContentPart::Text { text: text.into() }];
            content.extend((0..images).map(|i| image(&format!("{i}.png"))));
            RequestInput::Chat(vec![ChatMessage {
                role: "user".into(),
                tool: None,
                content,
            }])
        };
        // One image, one placeholder: used in place, as LlavaProcessor and
        // vLLM take `"<image>\nWhat is shown?"`.
        let out = f
            .format(&chat("<image>\nWhat is shown?", 1))
            .expect("format");
        assert_eq!(out.text, "<image>\nWhat is shown?");
        assert_eq!(out.images, vec![MediaSource::Path("0.png".into())]);
        let out = f.format(&chat("a <image> b <image> c", 2)).expect("format");
        assert_eq!(out.text, "a <image> b <image> c");
        assert_eq!(out.images.len(), 2);
        // None in the text: each image gets its own, as before.
        let out = f.format(&chat("What is shown?", 1)).expect("format");
        assert_eq!(out.text, "What is shown? <image>");
        // Another count: added anyway, so the engine refuses the request
        // (two placeholders, one image) rather than guessing.
        let out = f.format(&chat("<image> and <image>", 1)).expect("format");
        assert_eq!(out.text.matches("<image>").count(), 3);
        // A placeholder spread over messages counts for the request.
        let split = RequestInput::Chat(vec![
            ChatMessage::text("system", "Look at <image> closely."),
            ChatMessage {
                role: "user".into(),
                tool: None,
                content: vec![
                    image("a.png"),
                    ContentPart::Text {
                        text: "Well?".into(),
                    },
                ],
            },
        ]);
        let out = f.format(&split).expect("format");
        assert_eq!(out.text, "Look at <image> closely.\nWell?");
    }

    #[test]
    fn custom_placeholders_are_used() {
        let placeholders = Placeholders {
            image: "<|image_pad|>".into(),
            audio: "<AUDIO>".into(),
        };
        let f = PromptFormatter::new(&RequestFormat::Plain, None, &special(), placeholders)
            .expect("formatter");
        let out = f.format(&multimodal()).expect("format");
        assert_eq!(
            out.text,
            "<|image_pad|> What is in these? <AUDIO> <|image_pad|>\nAnd this? <|image_pad|>"
        );
    }

    #[test]
    fn missing_special_tokens_render_as_empty_strings() {
        let f = PromptFormatter::new(
            &RequestFormat::Inline("[{{ bos_token }}|{{ eos_token }}]".into()),
            None,
            &SpecialTokens::default(),
            Placeholders::default(),
        )
        .expect("formatter");
        let out = f.format(&RequestInput::Text("x".into())).expect("format");
        assert_eq!(out.text, "[|]");
    }
}
