//! `guidebench run`: a benchmark of one backend under one load profile.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use clap::Args;
use guidebench_core::backend::Backend;
use guidebench_core::clock::Timestamp;
use guidebench_core::metrics::Distribution;
use guidebench_core::options::{OptionSpec, OptionType, check_options, from_map, parse_kind_args};
use guidebench_core::registry;
use guidebench_core::request::{GenerationRequest, RequestRecord};
use guidebench_core::sampling::Sampling;
use guidebench_core::stdio::StdioRedirect;
use guidebench_core::synthetic::SyntheticText;
use serde::Deserialize;

use crate::Failure;

/// Arguments of `guidebench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The backend: `kind=NAME,key=value,...` (see `guidebench backends`).
    #[arg(long, default_value = "kind=offline,engine=mock")]
    backend: String,
    /// The data: `kind=synthetic_text,prompt_tokens=N,output_tokens=N[,seed=S]`.
    #[arg(
        long,
        default_value = "kind=synthetic_text,prompt_tokens=256,output_tokens=128"
    )]
    data: Vec<String>,
    /// The load profile: `kind=synchronous`, `kind=concurrent,streams=N` or
    /// `kind=throughput[,max_concurrency=N]`.
    #[arg(long, default_value = "kind=throughput")]
    profile: String,
    /// When to stop: `kind=max_requests,count=N` or `kind=max_duration,seconds=S`.
    #[arg(long)]
    constraint: Vec<String>,
    /// No live progress line (it is also off when standard error is not a terminal).
    #[arg(long)]
    disable_progress: bool,
}

const SYNTHETIC_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional("prompt_tokens", OptionType::Int, "tokens per prompt").required(),
    OptionSpec::optional(
        "output_tokens",
        OptionType::Int,
        "tokens to generate per request",
    )
    .required(),
    OptionSpec::optional("seed", OptionType::Int, "seed of the text generator").with_default("42"),
];

#[derive(Debug, Deserialize)]
struct SyntheticArgs {
    prompt_tokens: u32,
    output_tokens: u32,
    seed: Option<u64>,
}

const SYNCHRONOUS_OPTIONS: &[OptionSpec] = &[];
const CONCURRENT_OPTIONS: &[OptionSpec] =
    &[OptionSpec::optional("streams", OptionType::Int, "requests in flight").required()];
const THROUGHPUT_OPTIONS: &[OptionSpec] = &[OptionSpec::optional(
    "max_concurrency",
    OptionType::Int,
    "the most requests in flight",
)
.with_default("256")];
const MAX_REQUESTS_OPTIONS: &[OptionSpec] =
    &[OptionSpec::optional("count", OptionType::Int, "requests to send").required()];
const MAX_DURATION_OPTIONS: &[OptionSpec] =
    &[OptionSpec::optional("seconds", OptionType::Duration, "how long to send").required()];

fn usage(err: impl Into<anyhow::Error>) -> Failure {
    Failure::Usage(err.into())
}

fn positive(key: &str, value: &serde_json::Value) -> Result<u64, Failure> {
    value.as_u64().filter(|&n| n > 0).ok_or_else(|| {
        usage(anyhow!(
            "`{key}` must be a whole number of at least 1, got {value}"
        ))
    })
}

/// What the command line asks for, checked.
struct Plan {
    progress: bool,
    synthetic: SyntheticArgs,
    concurrency: usize,
    profile: String,
    max_requests: Option<u64>,
    max_duration: Option<Duration>,
}

fn plan(args: &RunArgs) -> Result<Plan, Failure> {
    let [data] = args.data.as_slice() else {
        return Err(usage(anyhow!("exactly one --data is supported for now")));
    };
    let mut data = parse_kind_args(data)?;
    if data.kind != "synthetic_text" {
        return Err(usage(anyhow!(
            "unknown data kind `{}`; available: synthetic_text",
            data.kind
        )));
    }
    check_options(
        "data synthetic_text",
        &[SYNTHETIC_OPTIONS],
        &mut data.options,
    )?;
    let synthetic: SyntheticArgs = from_map("data synthetic_text", &data.options)?;
    if synthetic.output_tokens == 0 {
        return Err(usage(anyhow!("`output_tokens` must be at least 1")));
    }

    let mut profile = parse_kind_args(&args.profile)?;
    let concurrency = match profile.kind.as_str() {
        "synchronous" => {
            check_options(
                "profile synchronous",
                &[SYNCHRONOUS_OPTIONS],
                &mut profile.options,
            )?;
            1
        }
        "concurrent" => {
            check_options(
                "profile concurrent",
                &[CONCURRENT_OPTIONS],
                &mut profile.options,
            )?;
            positive("streams", &profile.options["streams"])?
        }
        "throughput" => {
            check_options(
                "profile throughput",
                &[THROUGHPUT_OPTIONS],
                &mut profile.options,
            )?;
            match profile.options.get("max_concurrency") {
                Some(v) => positive("max_concurrency", v)?,
                None => 256,
            }
        }
        other => {
            return Err(usage(anyhow!(
                "unknown profile kind `{other}`; available: concurrent, synchronous, throughput"
            )));
        }
    };

    let mut max_requests = None;
    let mut max_duration = None;
    for constraint in &args.constraint {
        let mut c = parse_kind_args(constraint)?;
        match c.kind.as_str() {
            "max_requests" => {
                check_options(
                    "constraint max_requests",
                    &[MAX_REQUESTS_OPTIONS],
                    &mut c.options,
                )?;
                max_requests = Some(positive("count", &c.options["count"])?);
            }
            "max_duration" => {
                check_options(
                    "constraint max_duration",
                    &[MAX_DURATION_OPTIONS],
                    &mut c.options,
                )?;
                let secs = c.options["seconds"].as_f64().unwrap_or(0.0);
                let duration = Duration::try_from_secs_f64(secs)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| usage(anyhow!("`seconds` must be positive, got {secs}")))?;
                max_duration = Some(duration);
            }
            other => {
                return Err(usage(anyhow!(
                    "unknown constraint kind `{other}`; available: max_duration, max_requests"
                )));
            }
        }
    }
    if max_requests.is_none() && max_duration.is_none() {
        max_requests = Some(100);
    }
    Ok(Plan {
        progress: !args.disable_progress && std::io::stderr().is_terminal(),
        synthetic,
        concurrency: usize::try_from(concurrency).unwrap_or(usize::MAX),
        profile: profile.kind,
        max_requests,
        max_duration,
    })
}

/// Runs `guidebench run`.
pub fn run(args: RunArgs) -> Result<(), Failure> {
    let backend_args = parse_kind_args(&args.backend)?;
    let plan = plan(&args)?;
    let backend: Arc<dyn Backend> = Arc::from(registry::create_backend(backend_args)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(Failure::Run)?;
    runtime.block_on(benchmark(backend, plan))
}

/// Counters the workers update and the live display reads.
#[derive(Debug, Default)]
struct Progress {
    done: AtomicU64,
    errors: AtomicU64,
    output_tokens: AtomicU64,
}

/// The live progress line, drawn on the terminal while engine output goes to
/// a log file (so nothing an engine prints can break the line).
struct LiveDisplay {
    redirect: StdioRedirect,
    log_path: PathBuf,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl LiveDisplay {
    fn start(progress: Arc<Progress>, total: Option<u64>) -> std::io::Result<Self> {
        let log_path = std::env::temp_dir().join(format!("guidebench-{}.log", std::process::id()));
        let log = std::fs::File::create(&log_path)?;
        let redirect = StdioRedirect::to_file(&log)?;
        let mut terminal = redirect.terminal()?;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let started = Instant::now();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                let done = progress.done.load(Ordering::Relaxed);
                let errors = progress.errors.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64().max(1e-9);
                #[allow(clippy::cast_precision_loss)] // a display.
                let rate = progress.output_tokens.load(Ordering::Relaxed) as f64 / secs;
                let target = total.map_or_else(String::new, |n| format!("/{n}"));
                let _ = write!(
                    terminal,
                    "\r\x1b[2K{done}{target} requests · {errors} errors · {rate:.0} output tok/s · {secs:.1} s"
                );
                let _ = terminal.flush();
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => {
                        let _ = write!(terminal, "\r\x1b[2K");
                        let _ = terminal.flush();
                        break;
                    }
                }
            }
        });
        Ok(LiveDisplay {
            redirect,
            log_path,
            stop,
            task,
        })
    }

    async fn finish(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        drop(self.redirect);
        match std::fs::metadata(&self.log_path) {
            Ok(meta) if meta.len() > 0 => {
                eprintln!("engine output was written to {}", self.log_path.display());
            }
            _ => {
                let _ = std::fs::remove_file(&self.log_path);
            }
        }
    }
}

async fn benchmark(backend: Arc<dyn Backend>, plan: Plan) -> Result<(), Failure> {
    let progress = Arc::new(Progress::default());
    let display = if plan.progress {
        LiveDisplay::start(Arc::clone(&progress), plan.max_requests).ok()
    } else {
        None
    };
    let result = measure(Arc::clone(&backend), &plan, &progress).await;
    if let Some(display) = display {
        display.finish().await;
    }
    let (records, elapsed, load_time) = result?;
    println!(
        "profile:         {} with {} in flight ({})",
        plan.profile,
        plan.concurrency,
        match (plan.max_requests, plan.max_duration) {
            (Some(n), Some(d)) => format!("{n} requests or {:.1} s", d.as_secs_f64()),
            (Some(n), None) => format!("{n} requests"),
            (None, Some(d)) => format!("{:.1} s", d.as_secs_f64()),
            (None, None) => String::new(),
        }
    );
    if let Some(load) = load_time {
        println!(
            "engine load:     {:.3} s (outside every measurement)",
            load.as_secs_f64()
        );
    }
    summarize(&records, elapsed)
}

type Records = Vec<RequestRecord>;

async fn measure(
    backend: Arc<dyn Backend>,
    plan: &Plan,
    progress: &Arc<Progress>,
) -> Result<(Records, Duration, Option<Duration>), Failure> {
    backend.startup().await?;
    let report = backend.validate().await?;
    let tokenizer = backend.tokenizer().ok_or_else(|| {
        Failure::Run(anyhow!(
            "the backend has no tokenizer to build synthetic prompts with"
        ))
    })?;

    let pool = plan
        .max_requests
        .map_or(256, |n| usize::try_from(n.min(256)).unwrap_or(256));
    let mut generator = SyntheticText::new(tokenizer.as_ref(), plan.synthetic.seed.unwrap_or(42));
    let prompts: Vec<String> = (0..pool)
        .map(|_| generator.prompt(plan.synthetic.prompt_tokens as usize))
        .collect::<Result<_, _>>()?;
    let prompts = Arc::new(prompts);
    let sampling = Sampling::fixed_length(plan.synthetic.output_tokens)?;

    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = plan.max_duration.map(|d| started + d);
    let mut workers = Vec::with_capacity(plan.concurrency);
    for _ in 0..plan.concurrency {
        let backend = Arc::clone(&backend);
        let next = Arc::clone(&next);
        let prompts = Arc::clone(&prompts);
        let sampling = sampling.clone();
        let limit = plan.max_requests;
        let progress = Arc::clone(progress);
        workers.push(tokio::spawn(async move {
            let mut records = Vec::new();
            loop {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let id = next.fetch_add(1, Ordering::Relaxed);
                if limit.is_some_and(|n| id >= n) {
                    break;
                }
                let index = usize::try_from(id).unwrap_or(0) % prompts.len();
                let request = GenerationRequest::text(id, prompts[index].clone(), sampling.clone());
                let start = Timestamp::now();
                let record = match backend.resolve(request).await {
                    Ok(response) => RequestRecord::success(response, false),
                    Err(err) => {
                        progress.errors.fetch_add(1, Ordering::Relaxed);
                        RequestRecord::error(id, &err, start, Timestamp::now())
                    }
                };
                progress
                    .output_tokens
                    .fetch_add(u64::from(record.output_tokens), Ordering::Relaxed);
                progress.done.fetch_add(1, Ordering::Relaxed);
                records.push(record);
            }
            records
        }));
    }
    let mut records: Records = Vec::new();
    for worker in workers {
        records.extend(worker.await.map_err(|e| Failure::Run(e.into()))?);
    }
    let elapsed = started.elapsed();
    backend.shutdown().await?;
    Ok((records, elapsed, report.load_time))
}

#[allow(clippy::cast_precision_loss)] // counts far below 2^52.
fn summarize(records: &[RequestRecord], elapsed: Duration) -> Result<(), Failure> {
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_success()).collect();
    let mut errors: std::collections::BTreeMap<&str, (usize, &str)> = Default::default();
    for error in records.iter().filter_map(|r| r.error.as_ref()) {
        let entry = errors
            .entry(error.label.as_str())
            .or_insert((0, error.message.as_str()));
        entry.0 += 1;
    }
    let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    let output_tokens: u64 = ok.iter().map(|r| u64::from(r.output_tokens)).sum();
    let ms = |d: Distribution| d.median * 1e3;
    let ttft = Distribution::from_values(ok.iter().filter_map(|r| r.timings.ttft()));
    let itl = Distribution::from_values(ok.iter().flat_map(|r| r.timings.itl_gaps()));
    let tpot = Distribution::from_values(ok.iter().filter_map(|r| r.timings.tpot()));
    let latency = Distribution::from_values(ok.iter().filter_map(|r| r.timings.latency()));

    println!(
        "requests:        {} ok, {} failed",
        ok.len(),
        records.len() - ok.len()
    );
    for (label, (count, message)) in &errors {
        println!("  {label}: {count} (e.g. {message})");
    }
    println!("duration:        {secs:.3} s");
    println!("requests/s:      {:.2}", ok.len() as f64 / secs);
    println!("output tokens/s: {:.1}", output_tokens as f64 / secs);
    println!("TTFT median:     {:.3} ms", ms(ttft));
    println!("ITL median:      {:.3} ms", ms(itl));
    println!("TPOT median:     {:.3} ms", ms(tpot));
    println!("latency median:  {:.3} ms", ms(latency));
    if ok.is_empty() {
        return Err(Failure::Run(anyhow!("no request succeeded")));
    }
    Ok(())
}
