//! `guidebench mock-server`: an OpenAI-compatible server with configurable
//! latencies and faults, for testing a pipeline without a model. It serves
//! chat and text completions, the Responses API (`/v1/responses`, streamed
//! events and `previous_response_id`), `/v1/embeddings` and vLLM's `/pooling` (an
//! embeddings or pooling answer comes whole after `--ttft`, with the same
//! faults as a non-streamed completion), and `/v1/audio/transcriptions` and
//! `/v1/audio/translations` (a clip uploaded as `multipart/form-data`,
//! charged `--audio-tokens-per-second` prompt tokens per second of it; see
//! [`guidebench_openai::mock_server`]).

use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;
use guidebench_core::options::parse_kind_args;
use guidebench_openai::mock_server::{MockServerConfig, latency_flag, refuse_guidellm_flag, serve};
use serde_json::{Map, Value};

use crate::Failure;

/// Arguments of `guidebench mock-server`. GuideLLM 0.8.1's flags in
/// milliseconds (`--ttft-ms 50`) are accepted beside the ones that take a
/// duration with its unit (`--ttft 50ms`); a bare number there is refused,
/// since GuideLLM's users mean milliseconds and guidebench's durations
/// would read seconds.
#[derive(Debug, Args)]
pub struct MockServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The model id the server lists.
    #[arg(long)]
    model: Option<String>,
    /// Time to the first token, with its unit (`50ms`); for embeddings and
    /// pooling, the time to the whole answer.
    #[arg(long, conflicts_with = "ttft_ms")]
    ttft: Option<String>,
    /// Time to the first token in milliseconds, as GuideLLM writes it.
    #[arg(long)]
    ttft_ms: Option<f64>,
    /// Standard deviation of the time to the first token in milliseconds.
    #[arg(long)]
    ttft_ms_std: Option<f64>,
    /// Time between tokens, with its unit (`10ms`).
    #[arg(long, conflicts_with = "itl_ms")]
    itl: Option<String>,
    /// Time between tokens in milliseconds, as GuideLLM writes it.
    #[arg(long)]
    itl_ms: Option<f64>,
    /// Standard deviation of the time between tokens in milliseconds.
    #[arg(long)]
    itl_ms_std: Option<f64>,
    /// Tokens per answer, unless the request asks for fewer.
    #[arg(long)]
    output_tokens: Option<u64>,
    /// Standard deviation of the tokens per answer.
    #[arg(long)]
    output_tokens_std: Option<f64>,
    /// Prompt tokens charged per second of an uploaded audio clip
    /// (transcriptions, translations), rounded up; default 25, as GuideLLM's.
    #[arg(long)]
    audio_tokens_per_second: Option<f64>,
    /// A tokenizer.json or model folder for prompt token counts.
    #[arg(long, visible_alias = "processor")]
    tokenizer: Option<PathBuf>,
    /// Answer HTTP 500 to every completion request after the first N (GuideLLM's flag;
    /// `--set error_after=N` too).
    #[arg(long)]
    fail_after_requests: Option<u64>,
    /// GuideLLM's worker processes: accepted and without effect, since one server here
    /// serves any number of connections on every core.
    #[arg(long)]
    workers: Option<u64>,
    /// Close connections idle for this long (`5s`), announced as
    /// `Keep-Alive: timeout=N` like llama.cpp's server.
    #[arg(long)]
    keep_alive_timeout: Option<String>,
    /// Serve at most N requests per connection, announced as `max=N`
    /// and `Connection: close` on the last.
    #[arg(long)]
    keep_alive_max: Option<u64>,
    /// Answer every request with `Connection: close`.
    #[arg(long)]
    connection_close: bool,
    /// Any other option, `KEY=VALUE` (`guidebench backends` lists them).
    #[arg(long = "set")]
    set: Vec<String>,
    /// GuideLLM's flags that have no meaning here, refused with what to
    /// write instead.
    #[command(flatten)]
    refused: RefusedGuideLlmFlags,
}

/// GuideLLM 0.8.1 mock-server flags without a guidebench meaning: each is
/// refused with what to write instead.
#[derive(Debug, Args)]
struct RefusedGuideLlmFlags {
    #[arg(long, hide = true)]
    request_latency: Option<String>,
    #[arg(long, hide = true)]
    request_latency_std: Option<String>,
    #[arg(long, hide = true)]
    max_concurrent_requests: Option<String>,
    #[arg(long, hide = true)]
    image_tokens: Option<String>,
    #[arg(long, hide = true)]
    video_tokens: Option<String>,
    #[arg(long, hide = true)]
    log_request_received: bool,
}

fn options(args: &MockServerArgs) -> Result<Map<String, Value>, Failure> {
    let r = &args.refused;
    let given = [
        (r.request_latency.is_some() || r.request_latency_std.is_some())
            .then_some("--request-latency"),
        r.max_concurrent_requests
            .is_some()
            .then_some("--max-concurrent-requests"),
        (r.image_tokens.is_some() || r.video_tokens.is_some())
            .then_some("--image-tokens and --video-tokens"),
        r.log_request_received.then_some("--log-request-received"),
    ];
    refuse_guidellm_flag(&given.into_iter().flatten().collect::<Vec<_>>())?;
    let mut options = Map::new();
    for pair in &args.set {
        let parsed = parse_kind_args(&format!("kind=mock-server,{pair}"))?;
        options.extend(parsed.options);
    }
    let ttft = latency_flag("ttft", args.ttft.as_deref(), args.ttft_ms)?;
    let itl = latency_flag("itl", args.itl.as_deref(), args.itl_ms)?;
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            options.insert(key.to_owned(), value);
        }
    };
    put("model", args.model.clone().map(Value::String));
    put("ttft", ttft);
    put(
        "ttft_std",
        latency_flag("ttft_std", None, args.ttft_ms_std)?,
    );
    put("itl", itl);
    put("itl_std", latency_flag("itl_std", None, args.itl_ms_std)?);
    put("output_tokens", args.output_tokens.map(Value::from));
    put("output_tokens_std", args.output_tokens_std.map(Value::from));
    put(
        "audio_tokens_per_second",
        args.audio_tokens_per_second.map(Value::from),
    );
    put("error_after", args.fail_after_requests.map(Value::from));
    put(
        "keep_alive_timeout",
        args.keep_alive_timeout.clone().map(Value::String),
    );
    put("keep_alive_max", args.keep_alive_max.map(Value::from));
    put(
        "connection_close",
        args.connection_close.then_some(Value::Bool(true)),
    );
    put(
        "tokenizer",
        args.tokenizer
            .as_ref()
            .map(|p| Value::String(p.display().to_string())),
    );
    Ok(options)
}

/// Runs the server until Ctrl-C.
pub fn run(args: &MockServerArgs) -> Result<(), Failure> {
    let config = MockServerConfig::from_options(options(args)?)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Run(anyhow!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        let address = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .map_err(|e| Failure::Run(anyhow!("cannot listen on {address}: {e}")))?;
        let bound = listener
            .local_addr()
            .map_err(|e| Failure::Run(anyhow!("cannot read the bound address: {e}")))?;
        println!("mock server listening on http://{bound}/v1 (Ctrl-C stops it)");
        serve(config, listener, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Failure::Run(e.into()))
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        args: MockServerArgs,
    }

    fn config(flags: &[&str]) -> Result<MockServerConfig, String> {
        let command =
            Command::try_parse_from(std::iter::once("mock-server").chain(flags.iter().copied()))
                .map_err(|e| e.to_string())?;
        let options = options(&command.args).map_err(|failure| match failure {
            Failure::Usage(e) | Failure::Run(e) | Failure::InterruptedEarly(e) => format!("{e:#}"),
            Failure::Interrupted => "interrupted".to_owned(),
        })?;
        MockServerConfig::from_options(options).map_err(|e| e.to_string())
    }

    #[test]
    fn guidellm_s_audio_tokens_per_second_sets_what_an_audio_clip_is_charged() {
        let c = config(&["--audio-tokens-per-second", "12.5"]).expect("accepted");
        assert!((c.audio_tokens_per_second - 12.5).abs() < f64::EPSILON);
        let c = config(&[]).expect("defaults");
        assert!(
            (c.audio_tokens_per_second - 25.0).abs() < f64::EPSILON,
            "GuideLLM's default"
        );
        let err = config(&["--audio-tokens-per-second=-1"]).expect_err("negative");
        assert!(err.contains("audio_tokens_per_second"), "{err}");
    }

    #[test]
    fn image_and_video_token_flags_stay_refused_with_what_the_server_charges() {
        for flag in ["--image-tokens", "--video-tokens"] {
            let err = config(&[flag, "10"]).expect_err("refused");
            assert!(err.contains("--image-tokens and --video-tokens"), "{err}");
            assert!(err.contains("--audio-tokens-per-second"), "{err}");
        }
    }
}
