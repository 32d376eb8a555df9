//! The options of the `openai_http` backend kind.

use std::time::Duration;

use guidebench_core::options::{
    KindArgs, OptionSpec, OptionType, check_options, from_map, serialize_duration,
};
use guidebench_core::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The context named in option errors.
const CONTEXT: &str = "backend openai_http";

/// The options of the `openai_http` backend kind.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "target",
        OptionType::String,
        "the server's base URL (http://host:port, a trailing /v1 is accepted)",
    )
    .required(),
    OptionSpec::optional(
        "model",
        OptionType::String,
        "the model to request (then GET /v1/models is never called); default: the first id \
         GET /v1/models lists, asked once before the run",
    ),
    OptionSpec::optional(
        "request_format",
        OptionType::Choice(&[
            "chat",
            "text",
            "responses",
            "embeddings",
            "pooling",
            "transcriptions",
            "translations",
        ]),
        "chat (/v1/chat/completions), text (/v1/completions), responses (/v1/responses), \
         embeddings (/v1/embeddings), pooling (vLLM's /pooling), transcriptions \
         (/v1/audio/transcriptions) or translations (/v1/audio/translations); GuideLLM's \
         spellings /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, \
         /pooling, /v1/audio/transcriptions and /v1/audio/translations are accepted",
    )
    .default_from::<OpenAiDefaults>(),
    OptionSpec::optional(
        "server_history",
        OptionType::Bool,
        "with request_format=responses: later turns of a conversation send the previous \
         answer's previous_response_id and only their new input, the server keeping the \
         history; false sends the whole history as input items (as GuideLLM's option)",
    )
    .default_from::<OpenAiDefaults>(),
    OptionSpec::optional(
        "tool_call_missing_behavior",
        OptionType::Choice(&["ignore_continue", "ignore_stop", "error_stop"]),
        "what a chat turn that expected a tool call does when the model answered without one: \
         ignore_continue (go on with the conversation), ignore_stop (record the turn as \
         incomplete and end the conversation) or error_stop (fail the turn as \
         tool_call_missing and end the conversation), as GuideLLM's option",
    )
    .default_from::<OpenAiDefaults>(),
    OptionSpec::optional(
        "validate",
        OptionType::Bool,
        "check the server before the run (GET /health); false skips it (GuideLLM's \
         validate_backend is accepted)",
    )
    .default_from::<OpenAiDefaults>(),
    OptionSpec::optional(
        "stream",
        OptionType::Bool,
        "stream tokens as server-sent events (with stream_options.include_usage)",
    )
    .default_from::<OpenAiDefaults>(),
    OptionSpec::optional(
        "api_key",
        OptionType::String,
        "bearer token; default: the OPENAI_API_KEY environment variable",
    ),
    OptionSpec::optional(
        "headers",
        OptionType::Object,
        "extra HTTP headers, as an object of strings",
    ),
    OptionSpec::optional(
        "extra_body",
        OptionType::Object,
        "an object merged into every request body (its keys win)",
    ),
    OptionSpec::optional(
        "timeout",
        OptionType::Duration,
        "the most one request may take, from sending to the last byte",
    )
    .default_from::<OpenAiDefaults>(),
    OptionSpec::optional(
        "connect_timeout",
        OptionType::Duration,
        "the most connecting may take (GuideLLM's timeout_connect is accepted)",
    )
    .default_from::<OpenAiDefaults>(),
    OptionSpec::optional(
        "http2",
        OptionType::Bool,
        "use HTTP/2 (prior knowledge for http://, ALPN for https://)",
    )
    .default_from::<OpenAiDefaults>(),
    OptionSpec::optional(
        "verify",
        OptionType::Bool,
        "verify the TLS certificate and host name of an https:// target; false accepts any \
         certificate (self-signed, expired, another host's) and warns; no effect on http:// \
         (GuideLLM's default is false)",
    )
    .default_from::<OpenAiDefaults>(),
    OptionSpec::optional(
        "drain_timeout",
        OptionType::Duration,
        "how long shutdown waits for requests in flight before cancelling them",
    )
    .default_from::<OpenAiDefaults>(),
    OptionSpec::optional(
        "request_id_header",
        OptionType::String,
        "send each request's id (unique within a run) in this HTTP header, e.g. x-request-id; \
         default: none",
    ),
];

/// The defaults of [`OPTIONS`] as [`OpenAiConfig::new`] and
/// [`OpenAiConfig::from_args`] apply them, keyed by option name: what help
/// prints for an option is what an unset option gets.
#[derive(Debug, Serialize)]
struct OpenAiDefaults {
    request_format: RequestFormat,
    server_history: bool,
    tool_call_missing_behavior: ToolCallMissing,
    validate: bool,
    stream: bool,
    #[serde(serialize_with = "serialize_duration")]
    timeout: Duration,
    #[serde(serialize_with = "serialize_duration")]
    connect_timeout: Duration,
    http2: bool,
    verify: bool,
    #[serde(serialize_with = "serialize_duration")]
    drain_timeout: Duration,
}

impl Default for OpenAiDefaults {
    fn default() -> Self {
        OpenAiDefaults {
            request_format: RequestFormat::default(),
            server_history: false,
            tool_call_missing_behavior: ToolCallMissing::ErrorStop,
            validate: true,
            stream: true,
            timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            http2: false,
            verify: true,
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// Which endpoint requests go to; written `chat`, `text`, `responses`,
/// `embeddings`, `pooling`, `transcriptions` or `translations` (the
/// `request_format` option), or as GuideLLM writes them,
/// `/v1/chat/completions`, `/v1/completions`, `/v1/responses`,
/// `/v1/embeddings`, `/pooling`, `/v1/audio/transcriptions` or
/// `/v1/audio/translations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestFormat {
    /// `/v1/chat/completions` with `messages`.
    #[default]
    Chat,
    /// `/v1/completions` with `prompt`.
    Text,
    /// OpenAI's Responses API, `/v1/responses` with `input` items; streamed
    /// as typed events (`response.output_text.delta`, `response.completed`).
    Responses,
    /// `/v1/embeddings` with `input`: one answer of vectors, never
    /// streamed, no output tokens.
    Embeddings,
    /// vLLM's `/pooling` with `input`: as `Embeddings`, the vectors under
    /// `data[].data`.
    Pooling,
    /// `/v1/audio/transcriptions`: one audio clip uploaded as
    /// `multipart/form-data`, answered with its transcript (`text`), whole
    /// or streamed.
    Transcriptions,
    /// `/v1/audio/translations`: as `Transcriptions`, the transcript in
    /// English.
    Translations,
}

impl RequestFormat {
    /// The endpoint's path under the target.
    pub fn path(self) -> &'static str {
        match self {
            RequestFormat::Chat => "/v1/chat/completions",
            RequestFormat::Text => "/v1/completions",
            RequestFormat::Responses => "/v1/responses",
            RequestFormat::Embeddings => "/v1/embeddings",
            RequestFormat::Pooling => "/pooling",
            RequestFormat::Transcriptions => "/v1/audio/transcriptions",
            RequestFormat::Translations => "/v1/audio/translations",
        }
    }

    /// The option's value that names it (`chat`, `text`, `responses`,
    /// `embeddings`, `pooling`, `transcriptions`, `translations`).
    pub fn name(self) -> &'static str {
        match self {
            RequestFormat::Chat => "chat",
            RequestFormat::Text => "text",
            RequestFormat::Responses => "responses",
            RequestFormat::Embeddings => "embeddings",
            RequestFormat::Pooling => "pooling",
            RequestFormat::Transcriptions => "transcriptions",
            RequestFormat::Translations => "translations",
        }
    }

    /// Whether the endpoint answers with vectors rather than generated
    /// tokens (`embeddings`, `pooling`): it is never streamed, and TTFT,
    /// inter-token latency and output tokens do not apply.
    pub fn pools(self) -> bool {
        matches!(self, RequestFormat::Embeddings | RequestFormat::Pooling)
    }

    /// Whether the endpoint takes one audio clip as a `multipart/form-data`
    /// upload and answers with its transcript (`transcriptions`,
    /// `translations`).
    pub fn audio(self) -> bool {
        matches!(
            self,
            RequestFormat::Transcriptions | RequestFormat::Translations
        )
    }
}

/// GuideLLM 0.8.1's names of `openai_http` options whose meaning is ours,
/// and the name they stand for here.
const ALIASES: &[(&str, &str)] = &[
    ("validate_backend", "validate"),
    ("timeout_connect", "connect_timeout"),
];

/// GuideLLM 0.8.1's `request_format` values that mean one of ours.
const FORMAT_ALIASES: &[(&str, &str)] = &[
    ("/v1/chat/completions", "chat"),
    ("/v1/completions", "text"),
    ("/v1/responses", "responses"),
    ("/v1/embeddings", "embeddings"),
    ("/pooling", "pooling"),
    ("/v1/audio/transcriptions", "transcriptions"),
    ("/v1/audio/translations", "translations"),
];

/// GuideLLM 0.8.1's `openai_http` options that have no equal here, and
/// what to write instead.
const REFUSED: &[(&str, &str)] = &[
    (
        "max_tokens",
        "the output length comes from the data (output_tokens) or from \
         `sampling.max_tokens=N` on --backend",
    ),
    (
        "extras",
        "write `extra_body.KEY=VALUE` for the request body and `headers.NAME=VALUE` for headers",
    ),
    (
        "api_routes",
        "routes are fixed (/health, /v1/models, /v1/chat/completions, /v1/completions, \
         /v1/responses, /v1/embeddings, /pooling, /v1/audio/transcriptions, \
         /v1/audio/translations) under `target`; put a path prefix in `target`",
    ),
];

/// GuideLLM 0.8.1's `openai_http` switches that guidebench always has on:
/// `true` is accepted (and changes nothing), `false` is refused with the
/// reason.
const ALWAYS_ON: &[(&str, &str)] = &[(
    "follow_redirects",
    "redirects are always followed (up to 10)",
)];

/// Renames GuideLLM's spellings of our options to ours, in place.
///
/// # Errors
///
/// [`Error::InvalidOption`] for a GuideLLM option with no equal here
/// (saying what to write instead), or one given under both names.
fn accept_guidellm_spellings(options: &mut Map<String, Value>) -> Result<()> {
    // GuideLLM's validate_backend may also name a route, a URL or a request
    // to send; only its true/false form means ours.
    if let Some(value) = options.get("validate_backend")
        && !matches!(value, Value::Bool(_))
        && value
            .as_str()
            .and_then(|s| s.trim().parse::<bool>().ok())
            .is_none()
    {
        return Err(invalid(
            "validate_backend",
            format!(
                "GuideLLM's `validate_backend={value}` (a route, URL or request) has no equal: \
                 write validate=true (GET /health) or validate=false"
            ),
        ));
    }
    for (theirs, ours) in ALIASES {
        if let Some(value) = options.remove(*theirs) {
            if options.contains_key(*ours) {
                return Err(invalid(
                    theirs,
                    format!("`{theirs}` is GuideLLM's name for `{ours}`: give one of them"),
                ));
            }
            options.insert((*ours).to_owned(), value);
        }
    }
    for (theirs, instead) in REFUSED {
        if options.contains_key(*theirs) {
            return Err(invalid(
                theirs,
                format!("GuideLLM's `{theirs}` has no equal in guidebench: {instead}"),
            ));
        }
    }
    for (theirs, reason) in ALWAYS_ON {
        if let Some(value) = options.remove(*theirs) {
            let on = match &value {
                Value::Bool(b) => Some(*b),
                Value::String(s) => s.trim().parse::<bool>().ok(),
                _ => None,
            };
            if on != Some(true) {
                return Err(invalid(
                    theirs,
                    format!("GuideLLM's `{theirs}={value}` cannot be followed: {reason}"),
                ));
            }
        }
    }
    if let Some(Value::String(format)) = options.get_mut("request_format") {
        let trimmed = format.trim().trim_end_matches('/');
        if let Some((_, ours)) = FORMAT_ALIASES.iter().find(|(theirs, _)| *theirs == trimmed) {
            *format = (*ours).to_owned();
        } else if trimmed.starts_with('/') {
            let known: Vec<String> = FORMAT_ALIASES
                .iter()
                .map(|(theirs, ours)| format!("{theirs} ({ours})"))
                .collect();
            return Err(invalid(
                "request_format",
                format!(
                    "`{format}` is not supported; the endpoints known are {}",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// What a chat turn that expected a tool call
/// ([`ToolSet::expect_call`](guidebench_core::request::ToolSet::expect_call))
/// does when the model answered without one: GuideLLM's
/// `tool_call_missing_behavior`, with its names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallMissing {
    /// The answer is a success and the conversation goes on.
    IgnoreContinue,
    /// The turn is recorded as incomplete and the conversation ends
    /// (GuideLLM cancels the remaining turns).
    IgnoreStop,
    /// The turn fails as `tool_call_missing` and the conversation ends
    /// (GuideLLM's default).
    #[default]
    ErrorStop,
}

/// The configuration of an [`OpenAiHttpBackend`](crate::OpenAiHttpBackend).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiConfig {
    /// The server's base URL, without a trailing `/v1` or `/`.
    pub base_url: String,
    /// The model to request; `None` asks `GET /v1/models`.
    pub model: Option<String>,
    /// Which endpoint requests go to.
    pub request_format: RequestFormat,
    /// With [`RequestFormat::Responses`]: whether a later turn of a
    /// conversation sends `previous_response_id` (the id of the answer to
    /// the turn before) and only its new input, the server keeping the
    /// history (GuideLLM's `server_history`, default `false`). Without it,
    /// or when the previous answer is not known, the whole history is sent
    /// as input items.
    pub server_history: bool,
    /// What a turn that expected a tool call does when the answer has none.
    pub tool_call_missing_behavior: ToolCallMissing,
    /// Whether `validate` checks the server (`GET /health`) before the run.
    /// Without a `model`, the models are listed once before the run
    /// either way.
    pub validate: bool,
    /// Whether to stream.
    pub stream: bool,
    /// The bearer token, if any.
    pub api_key: Option<String>,
    /// Extra HTTP headers.
    pub headers: Vec<(String, String)>,
    /// Merged into every request body; its keys win.
    pub extra_body: Map<String, Value>,
    /// The most one request may take.
    pub timeout: Duration,
    /// The most connecting may take.
    pub connect_timeout: Duration,
    /// Whether to use HTTP/2.
    pub http2: bool,
    /// Whether the TLS certificate (and host name) of an `https://` target
    /// is verified. `false` accepts any certificate, and the backend warns
    /// at startup; it changes nothing for `http://`. GuideLLM's default is
    /// `false`, ours `true`.
    pub verify: bool,
    /// How long shutdown waits for requests in flight before cancelling them.
    pub drain_timeout: Duration,
    /// The HTTP header (a valid name, lower-case) that carries each
    /// request's id, if any: how a server's own records (the mock server's
    /// write instants) are joined to the client's.
    pub request_id_header: Option<String>,
}

impl OpenAiConfig {
    /// A configuration with defaults for the server at `target`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] when `target` is not an `http://` or
    /// `https://` URL.
    pub fn new(target: &str) -> Result<Self> {
        let defaults = OpenAiDefaults::default();
        Ok(OpenAiConfig {
            base_url: normalise_target(target)?,
            model: None,
            request_format: defaults.request_format,
            server_history: defaults.server_history,
            tool_call_missing_behavior: defaults.tool_call_missing_behavior,
            validate: defaults.validate,
            stream: defaults.stream,
            api_key: None,
            headers: Vec::new(),
            extra_body: Map::new(),
            timeout: defaults.timeout,
            connect_timeout: defaults.connect_timeout,
            http2: defaults.http2,
            verify: defaults.verify,
            drain_timeout: defaults.drain_timeout,
            request_id_header: None,
        })
    }

    /// The configuration from a parsed `kind=openai_http,...` argument.
    /// `api_key` falls back to the `OPENAI_API_KEY` environment variable.
    ///
    /// # Errors
    ///
    /// Core's option errors: an unknown key (with the valid ones), a value
    /// of the wrong type, a missing `target`.
    pub fn from_args(args: KindArgs) -> Result<Self> {
        let mut options = args.options;
        accept_guidellm_spellings(&mut options)?;
        check_options(CONTEXT, &[OPTIONS], &mut options)?;
        let raw: RawArgs = from_map(CONTEXT, &options)?;
        let defaults = OpenAiDefaults::default();
        let mut config = OpenAiConfig::new(&raw.target)?;
        config.model = raw.model.filter(|m| !m.trim().is_empty());
        config.request_format = raw.request_format.unwrap_or(defaults.request_format);
        config.server_history = raw.server_history.unwrap_or(defaults.server_history);
        if config.server_history && config.request_format != RequestFormat::Responses {
            return Err(invalid(
                "server_history",
                format!(
                    "server_history=true is only supported with request_format=responses \
                     (/v1/responses), not `{}`",
                    config.request_format.name()
                ),
            ));
        }
        config.tool_call_missing_behavior = raw
            .tool_call_missing_behavior
            .unwrap_or(defaults.tool_call_missing_behavior);
        config.validate = raw.validate.unwrap_or(defaults.validate);
        config.stream = raw.stream.unwrap_or(defaults.stream);
        config.api_key = raw
            .api_key
            .or_else(|| std::env::var("OPENAI_API_KEY").ok())
            .filter(|k| !k.is_empty());
        if let Some(headers) = raw.headers {
            for (name, value) in headers {
                let value = match value {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    // Header values are secrets (guidebench_core::redact):
                    // the error does not show the value.
                    _ => {
                        return Err(invalid(
                            "headers",
                            format!("header `{name}` must be a string, a number or a boolean"),
                        ));
                    }
                };
                config.headers.push((name, value));
            }
        }
        config.extra_body = raw.extra_body.unwrap_or_default();
        config.timeout = match raw.timeout {
            Some(t) => positive("timeout", t)?,
            None => defaults.timeout,
        };
        config.connect_timeout = match raw.connect_timeout {
            Some(t) => positive("connect_timeout", t)?,
            None => defaults.connect_timeout,
        };
        config.drain_timeout = match raw.drain_timeout {
            Some(t) => non_negative("drain_timeout", t)?,
            None => defaults.drain_timeout,
        };
        config.http2 = raw.http2.unwrap_or(defaults.http2);
        config.verify = raw.verify.unwrap_or(defaults.verify);
        if let Some(name) = raw.request_id_header {
            let name = reqwest::header::HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|e| invalid("request_id_header", format!("`{name}`: {e}")))?;
            config.request_id_header = Some(name.as_str().to_owned());
        }
        Ok(config)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArgs {
    target: String,
    model: Option<String>,
    request_format: Option<RequestFormat>,
    server_history: Option<bool>,
    tool_call_missing_behavior: Option<ToolCallMissing>,
    validate: Option<bool>,
    stream: Option<bool>,
    api_key: Option<String>,
    headers: Option<Map<String, Value>>,
    extra_body: Option<Map<String, Value>>,
    timeout: Option<f64>,
    connect_timeout: Option<f64>,
    http2: Option<bool>,
    verify: Option<bool>,
    drain_timeout: Option<f64>,
    request_id_header: Option<String>,
}

fn invalid(key: &str, reason: String) -> Error {
    Error::InvalidOption {
        context: CONTEXT.into(),
        key: key.into(),
        reason,
    }
}

fn positive(key: &str, secs: f64) -> Result<Duration> {
    if secs > 0.0 {
        Duration::try_from_secs_f64(secs).map_err(|e| invalid(key, e.to_string()))
    } else {
        Err(invalid(key, format!("must be positive, got {secs}s")))
    }
}

fn non_negative(key: &str, secs: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| invalid(key, format!("must be a duration >= 0, got {secs}s")))
}

/// `http://host:port/v1/` → `http://host:port`.
fn normalise_target(target: &str) -> Result<String> {
    let mut base = target.trim().trim_end_matches('/');
    if let Some(stripped) = base.strip_suffix("/v1") {
        base = stripped.trim_end_matches('/');
    }
    let url = reqwest::Url::parse(base)
        .map_err(|e| invalid("target", format!("`{target}` is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid(
            "target",
            format!("`{target}` must be an http:// or https:// URL with a host"),
        ));
    }
    Ok(base.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::options::parse_kind_args;

    #[test]
    fn a_trailing_v1_and_slash_are_stripped_from_the_target() {
        for t in [
            "http://h:8000",
            "http://h:8000/",
            "http://h:8000/v1",
            "http://h:8000/v1/",
        ] {
            assert_eq!(normalise_target(t).expect("valid"), "http://h:8000");
        }
        assert!(normalise_target("ftp://h").is_err());
        assert!(normalise_target("not a url").is_err());
    }

    #[test]
    fn options_are_parsed_and_typed() {
        let args = parse_kind_args(
            "kind=openai_http,target=http://x:1/v1,model=m,request_format=text,stream=false,\
             api_key=k,headers.X-A=1,extra_body.ignore_eos=false,timeout=2s,connect_timeout=50ms,http2=true",
        )
        .expect("parse");
        let c = OpenAiConfig::from_args(args).expect("config");
        assert_eq!(c.base_url, "http://x:1");
        assert_eq!(c.model.as_deref(), Some("m"));
        assert_eq!(c.request_format, RequestFormat::Text);
        assert!(!c.stream && c.http2);
        assert_eq!(c.api_key.as_deref(), Some("k"));
        assert_eq!(c.headers, vec![("X-A".to_string(), "1".to_string())]);
        assert_eq!(c.extra_body.get("ignore_eos"), Some(&Value::Bool(false)));
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert_eq!(c.connect_timeout, Duration::from_millis(50));
    }

    #[test]
    fn a_request_id_header_must_be_a_valid_header_name() {
        let args =
            parse_kind_args("kind=openai_http,target=http://x,request_id_header=X-Request-Id")
                .expect("parse");
        let c = OpenAiConfig::from_args(args).expect("config");
        assert_eq!(c.request_id_header.as_deref(), Some("x-request-id"));
        let args = parse_kind_args("kind=openai_http,target=http://x,request_id_header=a b")
            .expect("parse");
        let err = OpenAiConfig::from_args(args).expect_err("invalid name");
        assert_eq!(err.label(), "invalid_option");
    }

    #[test]
    fn tool_call_missing_behavior_takes_guidellms_values_and_defaults_to_error_stop() {
        let config = |extra: &str| {
            OpenAiConfig::from_args(
                parse_kind_args(&format!("kind=openai_http,target=http://x{extra}"))
                    .expect("parse"),
            )
        };
        assert_eq!(
            config("").expect("config").tool_call_missing_behavior,
            ToolCallMissing::ErrorStop
        );
        for (value, behavior) in [
            ("ignore_continue", ToolCallMissing::IgnoreContinue),
            ("ignore_stop", ToolCallMissing::IgnoreStop),
            ("error_stop", ToolCallMissing::ErrorStop),
        ] {
            let c = config(&format!(",tool_call_missing_behavior={value}")).expect("config");
            assert_eq!(c.tool_call_missing_behavior, behavior);
        }
        assert!(config(",tool_call_missing_behavior=retry").is_err());
    }

    #[test]
    fn an_unknown_option_lists_the_valid_ones() {
        let args = parse_kind_args("kind=openai_http,target=http://x,bogus=1").expect("parse");
        let err = OpenAiConfig::from_args(args).expect_err("unknown");
        assert_eq!(err.label(), "unknown_option");
        assert!(err.to_string().contains("request_format"));
    }

    #[test]
    fn every_default_help_prints_is_the_one_parsing_applies() {
        for spec in OPTIONS.iter().filter(|s| s.default.is_some()) {
            assert!(
                spec.default_text().is_some(),
                "`{}` names a default its struct lacks",
                spec.name
            );
        }
        let text = |name: &str| {
            OPTIONS
                .iter()
                .find(|s| s.name == name)
                .and_then(OptionSpec::default_text)
        };
        assert_eq!(text("request_format").as_deref(), Some("chat"));
        assert_eq!(text("server_history").as_deref(), Some("false"));
        assert_eq!(text("validate").as_deref(), Some("true"));
        assert_eq!(text("stream").as_deref(), Some("true"));
        assert_eq!(text("timeout").as_deref(), Some("300s"));
        assert_eq!(text("connect_timeout").as_deref(), Some("10s"));
        assert_eq!(text("http2").as_deref(), Some("false"));
        assert_eq!(text("verify").as_deref(), Some("true"));
        assert_eq!(text("drain_timeout").as_deref(), Some("30s"));

        let args = parse_kind_args("kind=openai_http,target=http://x").expect("parse");
        let c = OpenAiConfig::from_args(args).expect("config");
        let d = OpenAiDefaults::default();
        assert_eq!(c.request_format, d.request_format);
        assert_eq!(c.server_history, d.server_history);
        assert_eq!(c.validate, d.validate);
        assert_eq!(c.stream, d.stream);
        assert_eq!(c.timeout, d.timeout);
        assert_eq!(c.connect_timeout, d.connect_timeout);
        assert_eq!(c.http2, d.http2);
        assert_eq!(c.verify, d.verify);
        assert_eq!(c.drain_timeout, d.drain_timeout);
        // `api_key` may come from the environment; the rest is the defaults.
        let mut from_new = OpenAiConfig::new("http://x").expect("config");
        from_new.api_key.clone_from(&c.api_key);
        assert_eq!(from_new, c);
    }

    #[test]
    fn guidellm_options_that_differ_are_refused_saying_what_to_write() {
        let refused = |extra: &str| {
            let args = parse_kind_args(&format!("kind=openai_http,target=http://x,{extra}"))
                .expect("parse");
            OpenAiConfig::from_args(args)
                .expect_err("refused")
                .to_string()
        };
        assert!(refused("max_tokens=64").contains("sampling.max_tokens"));
        assert!(refused("extras.body.a=1").contains("extra_body"));
        assert!(refused("follow_redirects=false").contains("always followed"));
        let other = refused("request_format=/v1/audio/speech");
        assert!(
            other.contains("`/v1/audio/speech` is not supported"),
            "{other}"
        );
        for known in [
            "/v1/chat/completions (chat)",
            "/v1/completions (text)",
            "/v1/responses (responses)",
            "/v1/embeddings (embeddings)",
            "/pooling (pooling)",
            "/v1/audio/transcriptions (transcriptions)",
            "/v1/audio/translations (translations)",
        ] {
            assert!(other.contains(known), "{other}");
        }
        assert!(refused("request_format=/v1/realtime").contains("/pooling (pooling)"));
        assert!(refused("validate=true,validate_backend=true").contains("give one of them"));
        assert!(refused("validate_backend=/v1/models").contains("validate=false"));
        // What guidebench always does is accepted.
        let args = parse_kind_args(
            "kind=openai_http,target=http://x,verify=true,follow_redirects=true,\
             request_format=/v1/chat/completions",
        )
        .expect("parse");
        let c = OpenAiConfig::from_args(args).expect("accepted");
        assert_eq!(c.request_format, RequestFormat::Chat);
        assert!(c.validate);
    }

    #[test]
    fn guidellm_s_embeddings_and_pooling_spellings_name_those_endpoints() {
        let format = |value: &str| {
            let args = parse_kind_args(&format!(
                "kind=openai_http,target=http://x,request_format={value}"
            ))
            .expect("parse");
            OpenAiConfig::from_args(args).map(|c| c.request_format)
        };
        for (value, expected) in [
            ("/v1/embeddings", RequestFormat::Embeddings),
            ("embeddings", RequestFormat::Embeddings),
            ("/pooling", RequestFormat::Pooling),
            ("pooling", RequestFormat::Pooling),
        ] {
            assert_eq!(format(value).expect("accepted"), expected, "{value}");
        }
        assert_eq!(RequestFormat::Embeddings.path(), "/v1/embeddings");
        assert_eq!(RequestFormat::Pooling.path(), "/pooling");
        assert!(RequestFormat::Pooling.pools() && !RequestFormat::Chat.pools());
        // GuideLLM's path without its /v1 (or vLLM's path with one) is not
        // a spelling GuideLLM accepts.
        for value in ["/embeddings", "/v1/pooling"] {
            let err = format(value).expect_err("refused");
            assert!(
                err.to_string().contains("/v1/embeddings (embeddings)"),
                "{err}"
            );
        }
        let err = format("embedding").expect_err("not a choice");
        assert!(err.to_string().contains("pooling"), "{err}");
    }

    #[test]
    fn guidellm_s_responses_spelling_names_the_responses_endpoint_and_server_history_needs_it() {
        let config = |extra: &str| {
            let args = parse_kind_args(&format!("kind=openai_http,target=http://x,{extra}"))
                .expect("parse");
            OpenAiConfig::from_args(args)
        };
        for value in ["/v1/responses", "/v1/responses/", "responses"] {
            let c = config(&format!("request_format={value}")).expect("accepted");
            assert_eq!(c.request_format, RequestFormat::Responses, "{value}");
            assert!(!c.server_history, "GuideLLM's default is false");
        }
        assert_eq!(RequestFormat::Responses.path(), "/v1/responses");
        assert_eq!(RequestFormat::Responses.name(), "responses");
        assert!(!RequestFormat::Responses.pools());
        let c = config("request_format=/v1/responses,server_history=true").expect("accepted");
        assert!(c.server_history);
        let err = config("request_format=chat,server_history=true").expect_err("refused");
        assert!(
            err.to_string()
                .contains("only supported with request_format=responses"),
            "{err}"
        );
        assert!(
            !config("server_history=false")
                .expect("false is fine anywhere")
                .server_history
        );
    }

    #[test]
    fn guidellm_s_audio_spellings_and_short_names_name_the_audio_endpoints() {
        let format = |value: &str| {
            let args = parse_kind_args(&format!(
                "kind=openai_http,target=http://x,request_format={value}"
            ))
            .expect("parse");
            OpenAiConfig::from_args(args).map(|c| c.request_format)
        };
        for (value, expected) in [
            ("/v1/audio/transcriptions", RequestFormat::Transcriptions),
            ("/v1/audio/transcriptions/", RequestFormat::Transcriptions),
            ("transcriptions", RequestFormat::Transcriptions),
            ("/v1/audio/translations", RequestFormat::Translations),
            ("translations", RequestFormat::Translations),
        ] {
            assert_eq!(format(value).expect("accepted"), expected, "{value}");
        }
        for (format, path, name) in [
            (
                RequestFormat::Transcriptions,
                "/v1/audio/transcriptions",
                "transcriptions",
            ),
            (
                RequestFormat::Translations,
                "/v1/audio/translations",
                "translations",
            ),
        ] {
            assert_eq!((format.path(), format.name()), (path, name));
            assert!(format.audio() && !format.pools());
        }
        assert!(!RequestFormat::Chat.audio());
        let err = format("transcription").expect_err("not a choice");
        assert!(err.to_string().contains("translations"), "{err}");
    }

    #[test]
    fn verify_false_is_accepted_and_turns_certificate_checks_off() {
        for spelling in ["verify=false", "verify=False"] {
            let args = parse_kind_args(&format!("kind=openai_http,target=https://x,{spelling}"))
                .expect("parse");
            let c = OpenAiConfig::from_args(args).expect("accepted");
            assert!(!c.verify, "{spelling}");
        }
    }

    #[test]
    fn certificates_are_verified_unless_verify_false_is_given() {
        let args = parse_kind_args("kind=openai_http,target=https://x").expect("parse");
        assert!(OpenAiConfig::from_args(args).expect("config").verify);
        assert!(OpenAiConfig::new("https://x").expect("config").verify);
        let args = parse_kind_args("kind=openai_http,target=https://x,verify=true").expect("parse");
        assert!(OpenAiConfig::from_args(args).expect("config").verify);
        let args =
            parse_kind_args("kind=openai_http,target=https://x,verify=maybe").expect("parse");
        let err = OpenAiConfig::from_args(args).expect_err("not a boolean");
        assert!(err.to_string().contains("verify"), "{err}");
    }

    #[test]
    fn a_missing_target_is_reported() {
        let args = parse_kind_args("kind=openai_http").expect("parse");
        let err = OpenAiConfig::from_args(args).expect_err("missing");
        assert_eq!(err.label(), "missing_option");
    }
}
