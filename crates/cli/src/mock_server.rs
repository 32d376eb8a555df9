//! `guidebench mock-server`: an OpenAI-compatible server with configurable
//! latencies and faults, for testing a pipeline without a model.

use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;
use guidebench_core::options::parse_kind_args;
use guidebench_openai::mock_server::{MockServerConfig, serve};
use serde_json::{Map, Value};

use crate::Failure;

/// Arguments of `guidebench mock-server`.
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
    /// Time to the first token (`50ms`).
    #[arg(long)]
    ttft: Option<String>,
    /// Time between tokens (`10ms`).
    #[arg(long)]
    itl: Option<String>,
    /// Tokens per answer, unless the request asks for fewer.
    #[arg(long)]
    output_tokens: Option<u64>,
    /// A tokenizer.json or model folder for prompt token counts.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
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
}

fn options(args: &MockServerArgs) -> Result<Map<String, Value>, Failure> {
    let mut options = Map::new();
    for pair in &args.set {
        let parsed = parse_kind_args(&format!("kind=mock-server,{pair}"))?;
        options.extend(parsed.options);
    }
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            options.insert(key.to_owned(), value);
        }
    };
    put("model", args.model.clone().map(Value::String));
    put("ttft", args.ttft.clone().map(Value::String));
    put("itl", args.itl.clone().map(Value::String));
    put("output_tokens", args.output_tokens.map(Value::from));
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
