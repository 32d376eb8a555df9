//! The mock server's configuration: [`MockServerConfig`], the options that
//! build it ([`OPTIONS`], what `guidebench mock-server` accepts), and the
//! flags of GuideLLM's mock server that have no meaning here
//! ([`REFUSED_GUIDELLM_FLAGS`]), refused with what to write instead.

use std::sync::Arc;
use std::time::Duration;

use guidebench_core::options::{
    OptionSpec, OptionType, check_options, from_map, serialize_duration,
};
use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};
use guidebench_core::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[cfg(doc)]
use super::MockServer;

/// The context named in option errors.
const CONTEXT: &str = "mock-server";

/// The options of the mock server (what `guidebench mock-server` accepts
/// besides where to listen).
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional("model", OptionType::String, "the model id the server lists")
        .default_from::<MockServerConfig>(),
    OptionSpec::optional("ttft", OptionType::Latency, "time to the first token").default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "ttft_std",
        OptionType::Latency,
        "standard deviation of ttft",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "ttft_per_request",
        OptionType::Latency,
        "added to ttft for each other request in flight when one arrives (latency that grows with load)",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional("itl", OptionType::Latency, "time between tokens").default_from::<MockServerConfig>(),
    OptionSpec::optional("itl_std", OptionType::Latency, "standard deviation of itl")
        .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "output_tokens",
        OptionType::Int,
        "tokens per response (capped by max_tokens); default: max_tokens",
    ),
    OptionSpec::optional(
        "output_tokens_std",
        OptionType::Float,
        "standard deviation of output_tokens",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "tokens_per_event",
        OptionType::Int,
        "tokens carried by each streamed event",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "reasoning_tokens",
        OptionType::Int,
        "leading tokens sent as reasoning_content (chat)",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "error_after",
        OptionType::Int,
        "answer an error status to every request after the first N",
    ),
    OptionSpec::optional(
        "error_rate",
        OptionType::Float,
        "fraction of requests answered with an error status",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional("error_status", OptionType::Int, "the injected error status")
        .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "error_message",
        OptionType::String,
        "the message of injected errors (the body's error.message)",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "reset_rate",
        OptionType::Float,
        "fraction of requests whose connection is closed mid-answer",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "stall_rate",
        OptionType::Float,
        "fraction of requests that stop answering after the first token",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "truncate_rate",
        OptionType::Float,
        "fraction of streams that end early without [DONE]",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "malformed_rate",
        OptionType::Float,
        "fraction of responses with an invalid JSON chunk",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional("seed", OptionType::Int, "seed of latency and fault draws")
        .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "tokenizer",
        OptionType::String,
        "tokenizer.json or model directory for prompt token counts; default: whitespace words",
    ),
    OptionSpec::optional(
        "keep_alive_timeout",
        OptionType::Duration,
        "close a connection idle for this long; default: never",
    ),
    OptionSpec::optional(
        "keep_alive_max",
        OptionType::Int,
        "serve at most N requests per connection; default: no limit",
    ),
    OptionSpec::optional(
        "connection_close",
        OptionType::Bool,
        "answer every request with `Connection: close` and close the connection",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "announce_keep_alive",
        OptionType::Bool,
        "announce the limits (`Keep-Alive: timeout=T, max=M`, `Connection: close` on the last \
         response); false closes connections without warning",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "shutdown_grace",
        OptionType::Duration,
        "how long shutdown lets open responses finish",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "record_timings",
        OptionType::Bool,
        "record when each streamed token was written, served at GET /debug/timings",
    )
    .default_from::<MockServerConfig>(),
    OptionSpec::optional(
        "audio_tokens_per_second",
        OptionType::Float,
        "prompt tokens charged per second of an uploaded audio clip (transcriptions, \
         translations)",
    )
    .default_from::<MockServerConfig>(),
];

/// The mock server's behaviour.
///
/// It serializes as the options of [`OPTIONS`] (durations as text such as
/// `10ms`, which the options accept), leaving out what only code sets (the
/// tokenizer, `record_requests`, `tokio_timer`): its [`Default`] is what
/// [`MockServerConfig::from_options`] gives an unset option and what help
/// prints as the option's default.
#[derive(Clone, Serialize)]
pub struct MockServerConfig {
    /// The model id the server lists and echoes.
    pub model: String,
    /// Mean time to the first token.
    #[serde(serialize_with = "serialize_duration")]
    pub ttft: Duration,
    /// Standard deviation of the time to the first token.
    #[serde(serialize_with = "serialize_duration")]
    pub ttft_std: Duration,
    /// Added to the time to the first token for each other completion
    /// request in flight when a request arrives: a latency that grows with
    /// load, as a saturated server's does.
    #[serde(serialize_with = "serialize_duration")]
    pub ttft_per_request: Duration,
    /// Mean time between tokens.
    #[serde(serialize_with = "serialize_duration")]
    pub itl: Duration,
    /// Standard deviation of the time between tokens.
    #[serde(serialize_with = "serialize_duration")]
    pub itl_std: Duration,
    /// Mean output tokens per response (capped by `max_tokens`); `None`
    /// produces `max_tokens`.
    pub output_tokens: Option<u32>,
    /// Standard deviation of the output token count.
    pub output_tokens_std: f64,
    /// Tokens carried by each streamed event (at least 1).
    pub tokens_per_event: u32,
    /// Leading tokens of a chat response sent as `reasoning_content`.
    pub reasoning_tokens: u32,
    /// Answer `error_status` to every completion request after the first N.
    pub error_after: Option<u64>,
    /// Fraction of completion requests answered with `error_status`.
    pub error_rate: f64,
    /// The status of injected errors.
    pub error_status: u16,
    /// The message of injected errors (`error.message` of the body).
    pub error_message: String,
    /// Fraction of requests whose connection is closed mid-answer.
    pub reset_rate: f64,
    /// Fraction of requests that stop answering after the first token.
    pub stall_rate: f64,
    /// Fraction of streams that end early without `[DONE]`.
    pub truncate_rate: f64,
    /// Fraction of responses with an invalid JSON chunk.
    pub malformed_rate: f64,
    /// Seed of latency and fault draws.
    pub seed: u64,
    /// Counts prompt tokens; `None` counts whitespace-separated words.
    #[serde(skip)]
    pub tokenizer: Option<Arc<dyn Tokenizer>>,
    /// Keep every completion request (see [`MockServer::recorded`]).
    #[serde(skip)]
    pub record_requests: bool,
    /// Record when each streamed token was written (see the module docs,
    /// [`MockServer::timings`] and `GET /debug/timings`).
    pub record_timings: bool,
    /// How long shutdown lets open responses finish before closing them.
    #[serde(serialize_with = "serialize_duration")]
    pub shutdown_grace: Duration,
    /// Close a connection that has had no response in progress for this
    /// long; `None` keeps idle connections open.
    #[serde(serialize_with = "serialize_optional_duration")]
    pub keep_alive_timeout: Option<Duration>,
    /// Serve at most this many requests per connection; `None`: no limit.
    pub keep_alive_max: Option<u64>,
    /// Answer every request with `Connection: close` and close the
    /// connection after it.
    pub connection_close: bool,
    /// Announce the limits (`Keep-Alive: timeout=T, max=M` on every
    /// response, `Connection: close` on a connection's last); when false
    /// they are enforced without warning (see the module docs).
    pub announce_keep_alive: bool,
    /// Prompt tokens charged per second of an uploaded audio clip, rounded
    /// up (GuideLLM's mock's `audio_tokens_per_second`, default 25).
    pub audio_tokens_per_second: f64,
    /// Wait for streamed events on tokio's timer instead of the precise
    /// timer thread: to the millisecond only, but on tokio's clock, so a
    /// test that pauses it gets every event at exactly its planned instant
    /// (see the module docs).
    #[serde(skip)]
    pub tokio_timer: bool,
}

/// [`serialize_duration`] for a duration that may be unset (`null`).
fn serialize_optional_duration<S: serde::Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => serialize_duration(duration, serializer),
        None => serializer.serialize_none(),
    }
}

impl std::fmt::Debug for MockServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServerConfig")
            .field("model", &self.model)
            .field("ttft", &self.ttft)
            .field("ttft_std", &self.ttft_std)
            .field("ttft_per_request", &self.ttft_per_request)
            .field("itl", &self.itl)
            .field("itl_std", &self.itl_std)
            .field("output_tokens", &self.output_tokens)
            .field("output_tokens_std", &self.output_tokens_std)
            .field("tokens_per_event", &self.tokens_per_event)
            .field("reasoning_tokens", &self.reasoning_tokens)
            .field("error_after", &self.error_after)
            .field("error_rate", &self.error_rate)
            .field("error_status", &self.error_status)
            .field("error_message", &self.error_message)
            .field("reset_rate", &self.reset_rate)
            .field("stall_rate", &self.stall_rate)
            .field("truncate_rate", &self.truncate_rate)
            .field("malformed_rate", &self.malformed_rate)
            .field("seed", &self.seed)
            .field("tokenizer", &self.tokenizer.is_some())
            .field("record_requests", &self.record_requests)
            .field("record_timings", &self.record_timings)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("keep_alive_timeout", &self.keep_alive_timeout)
            .field("keep_alive_max", &self.keep_alive_max)
            .field("connection_close", &self.connection_close)
            .field("announce_keep_alive", &self.announce_keep_alive)
            .field("audio_tokens_per_second", &self.audio_tokens_per_second)
            .field("tokio_timer", &self.tokio_timer)
            .finish()
    }
}

impl Default for MockServerConfig {
    /// Zero latency, `max_tokens` output, no faults.
    fn default() -> Self {
        MockServerConfig {
            model: "mock-model".into(),
            ttft: Duration::ZERO,
            ttft_std: Duration::ZERO,
            ttft_per_request: Duration::ZERO,
            itl: Duration::ZERO,
            itl_std: Duration::ZERO,
            output_tokens: None,
            output_tokens_std: 0.0,
            tokens_per_event: 1,
            reasoning_tokens: 0,
            error_after: None,
            error_rate: 0.0,
            error_status: 500,
            error_message: "mock: injected error".into(),
            reset_rate: 0.0,
            stall_rate: 0.0,
            truncate_rate: 0.0,
            malformed_rate: 0.0,
            seed: 0,
            tokenizer: None,
            record_requests: false,
            record_timings: false,
            shutdown_grace: Duration::from_secs(1),
            keep_alive_timeout: None,
            keep_alive_max: None,
            connection_close: false,
            announce_keep_alive: true,
            audio_tokens_per_second: 25.0,
            tokio_timer: false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOptions {
    model: Option<String>,
    ttft: Option<f64>,
    ttft_std: Option<f64>,
    ttft_per_request: Option<f64>,
    itl: Option<f64>,
    itl_std: Option<f64>,
    output_tokens: Option<i64>,
    output_tokens_std: Option<f64>,
    tokens_per_event: Option<i64>,
    reasoning_tokens: Option<i64>,
    error_after: Option<i64>,
    error_rate: Option<f64>,
    error_status: Option<i64>,
    error_message: Option<String>,
    reset_rate: Option<f64>,
    stall_rate: Option<f64>,
    truncate_rate: Option<f64>,
    malformed_rate: Option<f64>,
    seed: Option<i64>,
    tokenizer: Option<String>,
    shutdown_grace: Option<f64>,
    keep_alive_timeout: Option<f64>,
    keep_alive_max: Option<i64>,
    connection_close: Option<bool>,
    announce_keep_alive: Option<bool>,
    record_timings: Option<bool>,
    audio_tokens_per_second: Option<f64>,
}

fn invalid(key: &str, reason: String) -> Error {
    Error::InvalidOption {
        context: CONTEXT.into(),
        key: key.into(),
        reason,
    }
}

fn duration(key: &str, value: Option<f64>, default: Duration) -> Result<Duration> {
    value.map_or(Ok(default), |secs| seconds(key, secs))
}

fn seconds(key: &str, secs: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| invalid(key, format!("must be a duration >= 0, got {secs}s")))
}

fn rate(key: &str, value: Option<f64>, default: f64) -> Result<f64> {
    let p = value.unwrap_or(default);
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(invalid(key, format!("must be in [0, 1], got {p}")))
    }
}

fn count<T: TryFrom<i64>>(key: &str, value: i64, min: i64) -> Result<T> {
    if value < min {
        return Err(invalid(key, format!("must be at least {min}, got {value}")));
    }
    T::try_from(value).map_err(|_| invalid(key, format!("{value} is too large")))
}

/// GuideLLM 0.8.1's mock-server flags without a meaning here, with what
/// to write instead (see [`refuse_guidellm_flag`]).
pub const REFUSED_GUIDELLM_FLAGS: &[(&str, &str)] = &[
    (
        "--request-latency",
        "a non-streamed answer takes the same time as a streamed one here: \
         --ttft-ms plus --itl-ms per token",
    ),
    (
        "--max-concurrent-requests",
        "this server does not queue requests; make the latency grow with load with \
         --set ttft_per_request=5ms",
    ),
    (
        "--image-tokens and --video-tokens",
        "this server charges no prompt tokens for a chat request's images or video, only for \
         its text (an uploaded audio clip is charged with --audio-tokens-per-second)",
    ),
    (
        "--log-request-received",
        "set GUIDEBENCH_LOG=debug to log the server's requests",
    ),
];

/// Refuses the first of GuideLLM's mock-server flags given (by its entry in
/// [`REFUSED_GUIDELLM_FLAGS`]), saying what to write instead.
///
/// # Errors
///
/// [`Error::InvalidOption`] naming the flag.
pub fn refuse_guidellm_flag(given: &[&str]) -> Result<()> {
    match REFUSED_GUIDELLM_FLAGS
        .iter()
        .find(|(flag, _)| given.contains(flag))
    {
        Some((flag, instead)) => Err(Error::InvalidOption {
            context: "mock-server (GuideLLM's flag has no meaning here)".into(),
            key: (*flag).to_owned(),
            reason: (*instead).to_owned(),
        }),
        None => Ok(()),
    }
}

/// A latency flag's value as the option takes it: `--ttft 50ms` (a
/// duration with its unit) or GuideLLM's `--ttft-ms 50`. A bare number in
/// the first is refused, since GuideLLM's users mean milliseconds and a
/// duration reads seconds.
///
/// # Errors
///
/// [`Error::InvalidOption`] for a bare number, saying what to write.
pub fn latency_flag(flag: &str, with_unit: Option<&str>, ms: Option<f64>) -> Result<Option<Value>> {
    match (with_unit, ms) {
        (Some(value), _) if value.trim().parse::<f64>().is_ok() => Err(Error::InvalidOption {
            context: "mock-server".into(),
            key: format!("--{flag}"),
            reason: format!(
                "give the unit (--{flag} {value}ms) or write --{flag}-ms {value} as GuideLLM does"
            ),
        }),
        (Some(value), _) => Ok(Some(Value::String(value.to_owned()))),
        (None, ms) => Ok(ms.map(|ms| Value::String(format!("{ms}ms")))),
    }
}

impl MockServerConfig {
    /// The configuration from options checked against [`OPTIONS`]
    /// (durations as seconds or text such as `50ms`).
    ///
    /// # Errors
    ///
    /// Core's option errors for an unknown key, a value of the wrong type or
    /// out of range; a tokenizer that cannot be loaded.
    pub fn from_options(mut options: Map<String, Value>) -> Result<Self> {
        check_options(CONTEXT, &[OPTIONS], &mut options)?;
        let raw: RawOptions = from_map(CONTEXT, &options)?;
        let defaults = MockServerConfig::default();
        let tokenizer: Option<Arc<dyn Tokenizer>> = match raw.tokenizer {
            None => None,
            Some(path) => {
                let path = std::path::PathBuf::from(path);
                let tokenizer = if path.is_dir() {
                    HfTokenizer::from_dir(&path)?
                } else {
                    HfTokenizer::from_file(&path)?
                };
                Some(Arc::new(tokenizer))
            }
        };
        let output_tokens_std = raw.output_tokens_std.unwrap_or(defaults.output_tokens_std);
        let audio_tokens_per_second = raw
            .audio_tokens_per_second
            .unwrap_or(defaults.audio_tokens_per_second);
        if !(audio_tokens_per_second.is_finite() && audio_tokens_per_second >= 0.0) {
            return Err(invalid(
                "audio_tokens_per_second",
                format!("must be a number >= 0, got {audio_tokens_per_second}"),
            ));
        }
        if output_tokens_std < 0.0 {
            return Err(invalid(
                "output_tokens_std",
                format!("must be >= 0, got {output_tokens_std}"),
            ));
        }
        Ok(MockServerConfig {
            model: raw.model.unwrap_or(defaults.model),
            ttft: duration("ttft", raw.ttft, defaults.ttft)?,
            ttft_std: duration("ttft_std", raw.ttft_std, defaults.ttft_std)?,
            ttft_per_request: duration(
                "ttft_per_request",
                raw.ttft_per_request,
                defaults.ttft_per_request,
            )?,
            itl: duration("itl", raw.itl, defaults.itl)?,
            itl_std: duration("itl_std", raw.itl_std, defaults.itl_std)?,
            output_tokens: match raw.output_tokens {
                Some(n) => Some(count("output_tokens", n, 1)?),
                None => defaults.output_tokens,
            },
            output_tokens_std,
            tokens_per_event: match raw.tokens_per_event {
                Some(n) => count("tokens_per_event", n, 1)?,
                None => defaults.tokens_per_event,
            },
            reasoning_tokens: match raw.reasoning_tokens {
                Some(n) => count("reasoning_tokens", n, 0)?,
                None => defaults.reasoning_tokens,
            },
            error_after: match raw.error_after {
                Some(n) => Some(count("error_after", n, 0)?),
                None => defaults.error_after,
            },
            error_rate: rate("error_rate", raw.error_rate, defaults.error_rate)?,
            error_status: match raw.error_status {
                None => defaults.error_status,
                Some(s) if (400..600).contains(&s) => count("error_status", s, 400)?,
                Some(s) => {
                    return Err(invalid(
                        "error_status",
                        format!("must be in 400..=599, got {s}"),
                    ));
                }
            },
            error_message: raw.error_message.unwrap_or(defaults.error_message),
            reset_rate: rate("reset_rate", raw.reset_rate, defaults.reset_rate)?,
            stall_rate: rate("stall_rate", raw.stall_rate, defaults.stall_rate)?,
            truncate_rate: rate("truncate_rate", raw.truncate_rate, defaults.truncate_rate)?,
            malformed_rate: rate(
                "malformed_rate",
                raw.malformed_rate,
                defaults.malformed_rate,
            )?,
            seed: raw.seed.map_or(defaults.seed, i64::cast_unsigned),
            tokenizer,
            record_requests: defaults.record_requests,
            record_timings: raw.record_timings.unwrap_or(defaults.record_timings),
            shutdown_grace: duration(
                "shutdown_grace",
                raw.shutdown_grace,
                defaults.shutdown_grace,
            )?,
            keep_alive_timeout: match raw.keep_alive_timeout {
                None => defaults.keep_alive_timeout,
                Some(secs) if secs > 0.0 => Some(seconds("keep_alive_timeout", secs)?),
                Some(secs) => {
                    return Err(invalid(
                        "keep_alive_timeout",
                        format!("must be positive, got {secs}s"),
                    ));
                }
            },
            keep_alive_max: match raw.keep_alive_max {
                Some(n) => Some(count("keep_alive_max", n, 1)?),
                None => defaults.keep_alive_max,
            },
            connection_close: raw.connection_close.unwrap_or(defaults.connection_close),
            announce_keep_alive: raw
                .announce_keep_alive
                .unwrap_or(defaults.announce_keep_alive),
            audio_tokens_per_second,
            tokio_timer: defaults.tokio_timer,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn options_build_a_config_with_durations_and_rates() {
        let mut options = Map::new();
        options.insert("ttft".into(), json!("50ms"));
        options.insert("itl".into(), json!("10ms"));
        options.insert("output_tokens".into(), json!(32));
        options.insert("error_rate".into(), json!(0.25));
        let c = MockServerConfig::from_options(options).expect("valid");
        assert_eq!(c.ttft, Duration::from_millis(50));
        assert_eq!(c.itl, Duration::from_millis(10));
        assert_eq!(c.output_tokens, Some(32));
        assert!((c.error_rate - 0.25).abs() < 1e-12);

        // A latency without its unit: 0.01 ms or 0.01 s?
        let mut bare = Map::new();
        bare.insert("itl".into(), json!(0.01));
        let err = MockServerConfig::from_options(bare).expect_err("ambiguous");
        assert!(err.to_string().contains("`0.01ms` or `0.01s`"), "{err}");

        let mut bad = Map::new();
        bad.insert("error_rate".into(), json!(2));
        let err = MockServerConfig::from_options(bad).expect_err("out of range");
        assert_eq!(err.label(), "invalid_option");
        let mut unknown = Map::new();
        unknown.insert("ttfb".into(), json!(1));
        let err = MockServerConfig::from_options(unknown).expect_err("unknown");
        assert!(err.to_string().contains("ttft"));
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
        assert_eq!(text("model").as_deref(), Some("mock-model"));
        assert_eq!(text("ttft").as_deref(), Some("0s"));
        assert_eq!(text("tokens_per_event").as_deref(), Some("1"));
        assert_eq!(text("error_status").as_deref(), Some("500"));
        assert_eq!(text("announce_keep_alive").as_deref(), Some("true"));
        assert_eq!(text("shutdown_grace").as_deref(), Some("1s"));
        assert_eq!(text("output_tokens"), None);
        assert_eq!(text("keep_alive_timeout"), None);

        let c = MockServerConfig::from_options(Map::new()).expect("valid");
        let d = MockServerConfig::default();
        assert_eq!(c.model, d.model);
        assert_eq!(c.ttft, d.ttft);
        assert_eq!(c.itl, d.itl);
        assert_eq!(c.output_tokens, d.output_tokens);
        assert_eq!(c.tokens_per_event, d.tokens_per_event);
        assert_eq!(c.error_status, d.error_status);
        assert_eq!(c.error_rate.to_bits(), d.error_rate.to_bits());
        assert_eq!(c.shutdown_grace, d.shutdown_grace);
        assert_eq!(c.keep_alive_timeout, d.keep_alive_timeout);
        assert_eq!(c.announce_keep_alive, d.announce_keep_alive);
    }
}
