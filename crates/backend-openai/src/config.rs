//! The options of the `openai_http` backend kind.

use std::time::Duration;

use guidebench_core::options::{KindArgs, OptionSpec, OptionType, check_options, from_map};
use guidebench_core::{Error, Result};
use serde::Deserialize;
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
        "the model to request; default: the first id of GET /v1/models",
    ),
    OptionSpec::optional(
        "request_format",
        OptionType::Choice(&["chat", "text"]),
        "chat (/v1/chat/completions) or text (/v1/completions)",
    )
    .with_default("chat"),
    OptionSpec::optional(
        "stream",
        OptionType::Bool,
        "stream tokens as server-sent events (with stream_options.include_usage)",
    )
    .with_default("true"),
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
    .with_default("300s"),
    OptionSpec::optional(
        "connect_timeout",
        OptionType::Duration,
        "the most connecting may take",
    )
    .with_default("10s"),
    OptionSpec::optional(
        "http2",
        OptionType::Bool,
        "use HTTP/2 (prior knowledge for http://, ALPN for https://)",
    )
    .with_default("false"),
    OptionSpec::optional(
        "drain_timeout",
        OptionType::Duration,
        "how long shutdown waits for requests in flight before cancelling them",
    )
    .with_default("30s"),
    OptionSpec::optional(
        "request_id_header",
        OptionType::String,
        "send each request's id (unique within a run) in this HTTP header, e.g. x-request-id; \
         default: none",
    ),
];

/// Which endpoint requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestFormat {
    /// `/v1/chat/completions` with `messages`.
    #[default]
    Chat,
    /// `/v1/completions` with `prompt`.
    Text,
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
        Ok(OpenAiConfig {
            base_url: normalise_target(target)?,
            model: None,
            request_format: RequestFormat::Chat,
            stream: true,
            api_key: None,
            headers: Vec::new(),
            extra_body: Map::new(),
            timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            http2: false,
            drain_timeout: Duration::from_secs(30),
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
        check_options(CONTEXT, &[OPTIONS], &mut options)?;
        let raw: RawArgs = from_map(CONTEXT, &options)?;
        let mut config = OpenAiConfig::new(&raw.target)?;
        config.model = raw.model.filter(|m| !m.trim().is_empty());
        config.request_format = match raw.request_format.as_deref() {
            Some("text") => RequestFormat::Text,
            _ => RequestFormat::Chat,
        };
        config.stream = raw.stream.unwrap_or(true);
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
        if let Some(t) = raw.timeout {
            config.timeout = positive("timeout", t)?;
        }
        if let Some(t) = raw.connect_timeout {
            config.connect_timeout = positive("connect_timeout", t)?;
        }
        if let Some(t) = raw.drain_timeout {
            config.drain_timeout = non_negative("drain_timeout", t)?;
        }
        config.http2 = raw.http2.unwrap_or(false);
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
    request_format: Option<String>,
    stream: Option<bool>,
    api_key: Option<String>,
    headers: Option<Map<String, Value>>,
    extra_body: Option<Map<String, Value>>,
    timeout: Option<f64>,
    connect_timeout: Option<f64>,
    http2: Option<bool>,
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
    fn an_unknown_option_lists_the_valid_ones() {
        let args = parse_kind_args("kind=openai_http,target=http://x,bogus=1").expect("parse");
        let err = OpenAiConfig::from_args(args).expect_err("unknown");
        assert_eq!(err.label(), "unknown_option");
        assert!(err.to_string().contains("request_format"));
    }

    #[test]
    fn a_missing_target_is_reported() {
        let args = parse_kind_args("kind=openai_http").expect("parse");
        let err = OpenAiConfig::from_args(args).expect_err("missing");
        assert_eq!(err.label(), "missing_option");
    }
}
