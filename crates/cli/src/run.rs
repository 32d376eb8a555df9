//! `guidebench run`: benchmarks of one backend under a load profile.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use clap::Args;
use guidebench_core::backend::Backend;
use guidebench_core::data::{DATA_KINDS, DataItem, create_source};
use guidebench_core::options::{KindArgs, check_options, parse_kind_args, parse_seconds};
use guidebench_core::registry;
use guidebench_core::report::{BenchmarkReport, Report};
use guidebench_core::request::GenerationRequest;
use guidebench_core::runner::{
    BenchmarkRun, Constraints, Observer, Phase, Profile, RunOptions, StopReason, Strategy,
    measured, run_benchmark, sweep_rates,
};
use guidebench_core::sampling::{Sampling, SamplingParams};
use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::Failure;
use crate::display::Display;
use crate::output::{self, Output};
use crate::scenario::Scenario;

/// The default backend: the embedded default model on the candle engine
/// (generated on first use; no download).
#[cfg(feature = "candle")]
pub const DEFAULT_BACKEND: &str = "kind=offline,engine=candle,model=builtin:tiny";
/// The default backend: without the candle engine compiled in, the mock.
#[cfg(not(feature = "candle"))]
pub const DEFAULT_BACKEND: &str = "kind=offline,engine=mock";
/// The default data.
pub const DEFAULT_DATA: &str = "kind=synthetic_text,prompt_tokens=256,output_tokens=128";
/// The default profile.
pub const DEFAULT_PROFILE: &str = "kind=throughput";
/// Requests per benchmark when nothing else bounds it.
const DEFAULT_MAX_REQUESTS: u64 = 100;
/// Tokens a request may generate when the data does not say.
const DEFAULT_MAX_TOKENS: u32 = 256;
/// Items prepared ahead of the sender when the count is open-ended.
const FEED_BUFFER: usize = 1024;
/// Up to this many items are all prepared before the timed phase, so that
/// making prompts never slows the sender.
const FEED_PREPARED: usize = 50_000;

/// Arguments of `guidebench run`.
#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// A JSON or YAML file with the same fields as these flags; flags win.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// The backend: `kind=NAME,key=value,...` (see `guidebench backends`).
    #[arg(long)]
    backend: Option<String>,
    /// The data: `kind=synthetic_text,...` or `kind=file,path=...` (repeatable).
    #[arg(long)]
    data: Vec<String>,
    /// The load profile: synchronous, concurrent, throughput, constant, poisson, sweep.
    #[arg(long)]
    profile: Option<String>,
    /// When a benchmark stops: max_requests, max_duration, max_errors, max_error_rate (repeatable).
    #[arg(long)]
    constraint: Vec<String>,
    /// Where the report goes: console, json, csv, html (repeatable; default console).
    #[arg(long)]
    output: Vec<String>,
    /// A tokenizer.json (or a model folder) for synthetic data, instead of the backend's.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Seed of the synthetic data and of Poisson arrivals.
    #[arg(long)]
    seed: Option<u64>,
    /// Left out of the metrics at the start: a request count (20) or a time (10s).
    #[arg(long)]
    warmup: Option<String>,
    /// Left out of the metrics at the end: a request count (20) or a time (10s).
    #[arg(long)]
    cooldown: Option<String>,
    /// How long requests in flight may finish once sending stopped (default 30s).
    #[arg(long)]
    grace_period: Option<String>,
    /// A label for the report: `key=value` (repeatable).
    #[arg(long)]
    label: Vec<String>,
    /// No live progress display (it is also off when standard error is not a terminal).
    #[arg(long)]
    disable_progress: bool,
}

/// Everything the command line asks for, checked before anything starts.
struct Plan {
    backend: KindArgs,
    data: Vec<KindArgs>,
    profile: Profile,
    constraints: Constraints,
    outputs: Vec<Output>,
    tokenizer: Option<PathBuf>,
    seed: u64,
    warmup: Option<Phase>,
    cooldown: Option<Phase>,
    options: RunOptions,
    labels: BTreeMap<String, String>,
    progress: bool,
    config: Value,
}

fn usage(err: impl Into<anyhow::Error>) -> Failure {
    Failure::Usage(err.into())
}

fn plan(args: RunArgs) -> Result<Plan, Failure> {
    let scenario = match &args.scenario {
        Some(path) => Scenario::read(path).map_err(usage)?,
        None => Scenario::default(),
    };
    let backend = args
        .backend
        .or_else(|| scenario.backend.as_ref().map(|b| b.to_arg()))
        .unwrap_or_else(|| DEFAULT_BACKEND.to_owned());
    let data = if args.data.is_empty() {
        scenario
            .data
            .as_ref()
            .map_or_else(|| vec![DEFAULT_DATA.to_owned()], |d| d.to_args())
    } else {
        args.data
    };
    let profile = args
        .profile
        .or_else(|| scenario.profile.as_ref().map(|p| p.to_arg()))
        .unwrap_or_else(|| DEFAULT_PROFILE.to_owned());
    let constraint = if args.constraint.is_empty() {
        scenario
            .constraint
            .as_ref()
            .map(|c| c.to_args())
            .unwrap_or_default()
    } else {
        args.constraint
    };
    let output = if args.output.is_empty() {
        scenario
            .output
            .as_ref()
            .map(|o| o.to_args())
            .unwrap_or_default()
    } else {
        args.output
    };
    let seed = args.seed.or(scenario.seed).unwrap_or(42);
    let phase = |flag: &str, value: Option<String>| -> Result<Option<Phase>, Failure> {
        value
            .map(|v| Phase::parse(flag, &v).map_err(Failure::from))
            .transpose()
    };
    let warmup = phase(
        "warmup",
        args.warmup
            .or_else(|| scenario.warmup.as_ref().map(|w| w.to_arg())),
    )?;
    let cooldown = phase(
        "cooldown",
        args.cooldown
            .or_else(|| scenario.cooldown.as_ref().map(|c| c.to_arg())),
    )?;
    let grace_period = match args
        .grace_period
        .or_else(|| scenario.grace_period.as_ref().map(|g| g.to_arg()))
    {
        Some(text) => {
            let secs = parse_seconds(&Value::String(text.clone()))
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| {
                    usage(anyhow!(
                        "--grace-period must be a time like 30s, got `{text}`"
                    ))
                })?;
            Duration::from_secs_f64(secs)
        }
        None => RunOptions::default().grace_period,
    };
    let mut labels = scenario.label.clone().unwrap_or_default();
    for label in &args.label {
        let (key, value) = label
            .split_once('=')
            .ok_or_else(|| usage(anyhow!("--label must be key=value, got `{label}`")))?;
        labels.insert(key.trim().to_owned(), value.trim().to_owned());
    }

    let backend = parse_kind_args(&backend)?;
    let data = data
        .iter()
        .map(|d| parse_kind_args(d))
        .collect::<Result<Vec<_>, _>>()?;
    // Check the data options now, before a model is loaded for nothing.
    for args in &data {
        let mut probe = args.clone();
        if let Some((_, specs)) = DATA_KINDS.iter().find(|(k, _)| *k == args.kind) {
            check_options(&format!("data {}", args.kind), &[specs], &mut probe.options)?;
        }
        if let Some(path) = args.options.get("path").and_then(Value::as_str)
            && !std::path::Path::new(path).exists()
        {
            return Err(usage(anyhow!("the data file `{path}` does not exist")));
        }
    }
    let profile = Profile::from_args(parse_kind_args(&profile)?, seed)?;
    let constraints = Constraints::from_args(
        constraint
            .iter()
            .map(|c| parse_kind_args(c))
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    let outputs = output::parse_all(&output)?;
    let keep_text = outputs.iter().any(Output::wants_text);
    let config = json!({
        "backend": backend_config(&backend),
        "data": data.iter().map(kind_config).collect::<Vec<_>>(),
        "profile": profile,
        "constraints": constraints,
        "seed": seed,
        "warmup": warmup,
        "cooldown": cooldown,
        "grace_period_s": grace_period.as_secs_f64(),
        "labels": labels,
    });
    Ok(Plan {
        backend,
        data,
        profile,
        constraints,
        outputs,
        tokenizer: args.tokenizer.or(scenario.tokenizer.map(PathBuf::from)),
        seed,
        warmup,
        cooldown,
        options: RunOptions {
            grace_period,
            keep_text,
        },
        labels,
        progress: !(args.disable_progress || scenario.disable_progress == Some(true))
            && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        config,
    })
}

fn kind_config(args: &KindArgs) -> Value {
    let mut map = args.options.clone();
    map.insert("kind".into(), Value::String(args.kind.clone()));
    Value::Object(map)
}

/// The backend's configuration for the report, without secrets.
fn backend_config(args: &KindArgs) -> Value {
    let mut value = kind_config(args);
    if let Some(map) = value.as_object_mut() {
        for key in ["api_key", "headers"] {
            if map.contains_key(key) {
                map.insert(key.into(), Value::String("(redacted)".into()));
            }
        }
    }
    value
}

/// Runs `guidebench run`.
pub fn run(args: RunArgs) -> Result<(), Failure> {
    let plan = plan(args)?;
    let backend: Arc<dyn Backend> = Arc::from(registry::create_backend(plan.backend.clone())?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Run(anyhow!("cannot start the async runtime: {e}")))?;
    runtime.block_on(benchmark(backend, plan))
}

/// Ctrl-C: the first stops sending (in-flight requests get the grace
/// period); a second ends the grace period at once.
fn watch_interrupts() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.send(true).is_err() {
                break;
            }
        }
    });
    rx
}

async fn benchmark(backend: Arc<dyn Backend>, plan: Plan) -> Result<(), Failure> {
    let cancel = watch_interrupts();
    let mut display = Display::start(plan.progress);
    display.phase("starting the backend and loading the model");
    let result = measure(&backend, &plan, &mut display, cancel.clone()).await;
    let shutdown = backend.shutdown().await;
    display.finish();
    let report = result?;
    shutdown?;

    output::write_all(&plan.outputs, &report).map_err(Failure::Run)?;
    if report.interrupted {
        return Err(Failure::Interrupted);
    }
    if report
        .benchmarks
        .iter()
        .all(|b| b.metrics.successful.count == 0)
    {
        return Err(Failure::Run(anyhow!("no request succeeded")));
    }
    Ok(())
}

async fn measure(
    backend: &Arc<dyn Backend>,
    plan: &Plan,
    display: &mut Display,
    cancel: watch::Receiver<bool>,
) -> Result<Report, Failure> {
    backend.startup().await?;
    let validation = backend.validate().await?;
    let tokenizer: Arc<dyn Tokenizer> = match &plan.tokenizer {
        Some(path) if path.is_dir() => Arc::new(HfTokenizer::from_dir(path)?),
        Some(path) => Arc::new(HfTokenizer::from_file(path)?),
        None => backend.tokenizer().ok_or_else(|| {
            usage(anyhow!(
                "the backend has no tokenizer; give one with --tokenizer PATH"
            ))
        })?,
    };
    // Check the data before the first benchmark: a bad file fails fast.
    for data in &plan.data {
        create_source(data.clone(), Arc::clone(&tokenizer), plan.seed)?;
    }

    let mut report = Report::new(plan.config.clone());
    report.environment.backend = validation.info.clone();
    if let Some(load) = validation.load_time {
        report
            .environment
            .backend
            .insert("load_time_s".into(), json!(load.as_secs_f64()));
    }
    if !plan.labels.is_empty() {
        report
            .environment
            .backend
            .insert("labels".into(), json!(plan.labels));
    }

    let mut strategies: Vec<Strategy> = match &plan.profile {
        Profile::Fixed { strategies } => strategies.clone(),
        Profile::Sweep {
            max_concurrency, ..
        } => vec![
            Strategy::Synchronous,
            Strategy::Throughput {
                max_concurrency: *max_concurrency,
            },
        ],
    };
    let mut runs: Vec<BenchmarkRun> = Vec::new();
    let mut index = 0;
    while index < strategies.len() {
        let strategy = strategies[index].clone();
        let run = one_benchmark(
            backend,
            plan,
            &tokenizer,
            &strategy,
            display,
            cancel.clone(),
        )
        .await?;
        let interrupted = run.stop_reason == StopReason::Interrupted;
        report.benchmarks.push(benchmark_report(plan, &run));
        runs.push(run);
        if interrupted {
            report.interrupted = true;
            break;
        }
        if let Profile::Sweep { sweep_size, .. } = plan.profile
            && index == 1
        {
            let rates = sweep_rates(runs[0].success_rate(), runs[1].success_rate(), sweep_size);
            strategies.extend(rates.into_iter().map(|rate| Strategy::Constant {
                rate,
                max_concurrency: None,
            }));
        }
        index += 1;
    }
    Ok(report)
}

fn benchmark_report(plan: &Plan, run: &BenchmarkRun) -> BenchmarkReport {
    let m = measured(run, plan.warmup, plan.cooldown);
    let mut report = BenchmarkReport::from_records(
        run.strategy.label(),
        serde_json::to_value(&run.strategy).unwrap_or(Value::Null),
        m.start,
        m.end,
        m.records.iter().copied(),
    );
    report.client = run.footprint;
    if plan.warmup.is_some() {
        report.warmup_excluded = Some(m.warmup_excluded);
    }
    if plan.cooldown.is_some() {
        report.cooldown_excluded = Some(m.cooldown_excluded);
    }
    report.extra.insert(
        "stop_reason".into(),
        serde_json::to_value(run.stop_reason).unwrap_or(Value::Null),
    );
    report
        .extra
        .insert("requests_sent".into(), json!(run.records.len()));
    report
}

async fn one_benchmark(
    backend: &Arc<dyn Backend>,
    plan: &Plan,
    tokenizer: &Arc<dyn Tokenizer>,
    strategy: &Strategy,
    display: &mut Display,
    cancel: watch::Receiver<bool>,
) -> Result<BenchmarkRun, Failure> {
    let mut sources = plan
        .data
        .iter()
        .map(|d| create_source(d.clone(), Arc::clone(tokenizer), plan.seed))
        .collect::<Result<Vec<_>, _>>()?;
    let finite: Option<usize> = sources.iter().map(|s| s.len_hint()).sum::<Option<usize>>();
    let mut constraints = plan.constraints.clone();
    if constraints.is_unbounded() && finite.is_none() {
        constraints.max_requests = Some(DEFAULT_MAX_REQUESTS);
    }
    let total = match (constraints.max_requests, finite) {
        (Some(n), Some(f)) => Some(n.min(f as u64)),
        (Some(n), None) => Some(n),
        (None, Some(f)) if constraints.max_duration.is_none() => Some(f as u64),
        _ => None,
    };

    // Prepare requests ahead of the sender, on a thread of their own.
    let ahead = total.map_or(FEED_BUFFER, |n| {
        usize::try_from(n)
            .unwrap_or(FEED_PREPARED)
            .clamp(1, FEED_PREPARED)
    });
    let (tx, mut rx) = mpsc::channel::<GenerationRequest>(ahead);
    let (ready_tx, ready_rx) =
        tokio::sync::oneshot::channel::<Result<(), guidebench_core::Error>>();
    let want_ready = ahead;
    std::thread::Builder::new()
        .name("guidebench-data".into())
        .spawn(move || {
            let mut ready = Some(ready_tx);
            let mut id = 0u64;
            let mut turn = 0usize;
            while !sources.is_empty() {
                let index = turn % sources.len();
                let item = match sources[index].next_item() {
                    Ok(Some(item)) => item,
                    Ok(None) => {
                        sources.remove(index);
                        continue;
                    }
                    Err(err) => {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(Err(err));
                        } else {
                            tracing::error!(error = %err, "data source failed");
                        }
                        return;
                    }
                };
                turn += 1;
                let request = match to_request(id, item) {
                    Ok(request) => request,
                    Err(err) => {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(Err(err));
                        }
                        return;
                    }
                };
                id += 1;
                if tx.blocking_send(request).is_err() {
                    return;
                }
                if usize::try_from(id).unwrap_or(usize::MAX) >= want_ready
                    && let Some(ready) = ready.take()
                {
                    let _ = ready.send(Ok(()));
                }
            }
            if let Some(ready) = ready.take() {
                let _ = ready.send(Ok(()));
            }
        })
        .map_err(|e| Failure::Run(anyhow!("cannot start the data thread: {e}")))?;
    if let Ok(Err(err)) = ready_rx.await {
        return Err(err.into());
    }

    let observer: Arc<dyn Observer> = Arc::new(display.benchmark(&strategy.label(), total));
    let run = run_benchmark(
        Arc::clone(backend),
        &mut rx,
        strategy,
        &constraints,
        &plan.options,
        observer,
        cancel,
    )
    .await;
    display.benchmark_done(&strategy.label(), run.end.secs_since(run.start));
    Ok(run)
}

/// A data item as a validated request.
fn to_request(id: u64, item: DataItem) -> Result<GenerationRequest, guidebench_core::Error> {
    let sampling = match item.output_tokens {
        Some(n) => Sampling::fixed_length(n)?,
        None => SamplingParams {
            max_tokens: Some(DEFAULT_MAX_TOKENS),
            ..SamplingParams::default()
        }
        .validate()?,
    };
    let mut request = GenerationRequest::new(id, item.input, sampling);
    request.expected_prompt_tokens = item.prompt_tokens;
    Ok(request)
}
