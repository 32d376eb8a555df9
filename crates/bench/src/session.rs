//! A benchmark session: a checked [`Plan`] run as benchmarks against one
//! backend.
//!
//! [`Plan::new`] parses and checks every option a run takes (backend kind
//! and options, the `sampling.*` group, data kinds and their options, the
//! profile, constraints, phases) before anything heavy starts, so a typo is
//! reported before a model is loaded. [`Session::run`] then starts the
//! backend, expands the profile into strategies (a sweep measures
//! synchronous and throughput first, then the rates between), feeds each
//! benchmark from the data sources on a thread of its own, leaves warm-up
//! and cool-down requests out of the metrics (keeping their records), and
//! returns the [`Report`].
//!
//! Nothing is dropped silently: a data item that cannot become a request
//! fails the run with an error naming the item and the field, unless its
//! data source says `on_error=skip`, in which case it is counted in the
//! benchmark's `extra.data_skipped` and reported
//! (`with_on_error_skip_a_zero_length_row_and_a_malformed_line_are_counted`).
//!
//! No run is lost to what could be checked first: before the backend
//! starts, [`Session::prepare`] loads `--tokenizer`, reads every data
//! source (a file's rows parsed and made into requests, a dataset found in
//! the cache), so that a malformed line, a row the run cannot send, a
//! missing dataset or a bad tokenizer is a usage error with no model
//! loaded (`a_malformed_data_line_is_a_usage_error_raised_before_the_backend_starts`,
//! `a_row_with_invalid_sampling_fails_before_the_backend_starts`,
//! `a_dataset_missing_from_the_cache_fails_before_the_backend_starts`,
//! `a_tokenizer_that_cannot_be_loaded_fails_before_the_backend_starts`).
//! A tokenizer is required only by data that cuts synthetic prompts to
//! exact counts
//! (`a_file_of_text_prompts_needs_no_tokenizer_but_synthetic_prompts_do`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use guidebench_core::backend::{Backend, ValidationReport};
use guidebench_core::model::ModelSearch;
use guidebench_core::options::{
    KindArgs, OptionSpec, OptionType, check_options, parse_kind_args, parse_seconds,
};
use guidebench_core::redact;
use guidebench_core::registry;
use guidebench_core::request::{ChatMessage, GenerationRequest, RequestInput, RequestStatus};
use guidebench_core::sampling::SamplingParams;
use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};

use crate::data::{
    DataDefaults, DataItem, DataSource, PreparedSource, is_item_error, resolve_kind,
};
use crate::planner::{Finished, Planner};
use crate::report::{BenchmarkReport, Report, client_saturation};
use crate::runner::{
    BenchmarkRun, ConstraintPlan, Constraints, Conversation, Job, NoObserver, Observer, Phase,
    PlannedTurn, Profile, RunOptions, StopReason, Strategy, compact_measured, run_benchmark,
};
use crate::slo::Slo;
use crate::{Error, Result};

/// The default data.
pub const DEFAULT_DATA: &str = "kind=synthetic_text,prompt_tokens=256,output_tokens=128";
/// The default profile.
pub const DEFAULT_PROFILE: &str = "kind=throughput";
/// The default seed of synthetic data and Poisson arrivals.
pub const DEFAULT_SEED: u64 = 42;
/// Requests per benchmark when nothing else bounds it.
pub const DEFAULT_MAX_REQUESTS: u64 = 100;
/// Tokens a request may generate when neither the data nor
/// `sampling.max_tokens` says.
pub const DEFAULT_MAX_TOKENS: u32 = 256;
/// Items prepared ahead of the sender when the count is open-ended.
const FEED_BUFFER: usize = 1024;
/// Up to this many items are all prepared before the timed phase, so that
/// making prompts never slows the sender.
const FEED_PREPARED: usize = 50_000;

/// The fields of the backend option's `sampling` group
/// (`sampling.temperature=0.7,...`), for checking and for help output.
pub const SAMPLING_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "temperature",
        OptionType::Float,
        "softmax temperature, >= 0; 0 is greedy",
    )
    .default_from::<SamplingDefaults>(),
    OptionSpec::optional(
        "top_p",
        OptionType::Float,
        "nucleus mass in (0, 1]; 1 is off",
    )
    .default_from::<SamplingDefaults>(),
    OptionSpec::optional(
        "top_k",
        OptionType::Int,
        "keep the k most likely tokens; 0 is off",
    )
    .default_from::<SamplingDefaults>(),
    OptionSpec::optional(
        "seed",
        OptionType::Int,
        "seed of every request's sampler (default: derived from the request id)",
    ),
    OptionSpec::optional("stop", OptionType::String, "stop strings, separated by `;`"),
    OptionSpec::optional(
        "max_tokens",
        OptionType::Int,
        "tokens to generate when the data does not fix the length",
    )
    .default_from::<SamplingDefaults>(),
    OptionSpec::optional(
        "ignore_eos",
        OptionType::Bool,
        "generate past end-of-sequence (default: true when the data fixes the length)",
    ),
];

/// The defaults of [`SAMPLING_OPTIONS`] as a request gets them, keyed by
/// option name: `max_tokens` is what [`to_request`] gives an item whose
/// length neither the data nor the run fixes, and the others are what
/// [`SamplingParams::validate`] fills in for a field nobody set.
#[derive(Debug, Serialize)]
struct SamplingDefaults {
    #[serde(serialize_with = "crate::data::serialize_number")]
    temperature: f64,
    #[serde(serialize_with = "crate::data::serialize_number")]
    top_p: f64,
    top_k: u32,
    max_tokens: u32,
}

impl Default for SamplingDefaults {
    fn default() -> Self {
        let max_tokens = DEFAULT_MAX_TOKENS;
        // A request that sets nothing but its length, as validation fills
        // it in. It cannot fail (the length is at least 1); if it did, NaN
        // would serialize as null, help would print no default, and the
        // test of these defaults would fail.
        let filled = SamplingParams {
            max_tokens: Some(max_tokens),
            ..SamplingParams::default()
        }
        .validate();
        let (temperature, top_p, top_k) = filled.map_or((f32::NAN, f32::NAN, 0), |s| {
            (s.temperature, s.top_p, s.top_k)
        });
        SamplingDefaults {
            temperature: f64::from(temperature),
            top_p: f64::from(top_p),
            top_k,
            max_tokens,
        }
    }
}

/// A run as the user wrote it: every field is text or absent, defaults are
/// filled in by [`Plan::new`].
#[derive(Debug, Clone, Default)]
pub struct PlanArgs {
    /// `--backend kind=NAME,...`, with an optional `sampling.*` group.
    pub backend: String,
    /// `--data kind=NAME,...` (empty: [`DEFAULT_DATA`]).
    pub data: Vec<String>,
    /// `--profile kind=NAME,...` (absent: [`DEFAULT_PROFILE`]).
    pub profile: Option<String>,
    /// `--constraint kind=NAME,...`.
    pub constraints: Vec<String>,
    /// A tokenizer file or model folder for the data, instead of the backend's.
    pub tokenizer: Option<PathBuf>,
    /// The seed (absent: [`DEFAULT_SEED`]).
    pub seed: Option<u64>,
    /// Warm-up: a request count (`20`), a time (`10s`) or a fraction of
    /// the benchmark (`10%`).
    pub warmup: Option<String>,
    /// Cool-down: a request count, a time or a fraction.
    pub cooldown: Option<String>,
    /// How long requests in flight may finish once sending stopped (`30s`).
    pub grace_period: Option<String>,
    /// Labels kept with the report.
    pub labels: BTreeMap<String, String>,
    /// Keep each request's generated text in its record.
    pub keep_text: bool,
    /// `--slo ttft=200ms,...`: per-request latency objectives.
    pub slo: Option<String>,
}

pub use crate::data::OnError;

/// One `--data` source, checked.
#[derive(Debug, Clone)]
pub struct DataPlan {
    /// The kind and its options (without `on_error`).
    pub args: KindArgs,
    /// What to do with an item that cannot become a request.
    pub on_error: OnError,
}

/// Everything a run asks for, parsed and checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The backend kind and its options, without the `sampling` group.
    pub backend: KindArgs,
    /// The run's sampling (`sampling.*`); a data item's own fields win.
    pub sampling: SamplingParams,
    /// The data sources: with several, each request merges one item of
    /// every source, as GuideLLM merges its datasets.
    pub data: Vec<DataPlan>,
    /// The load profile.
    pub profile: Profile,
    /// When each benchmark stops (list values: one per benchmark).
    pub constraints: ConstraintPlan,
    /// A tokenizer for the data instead of the backend's.
    pub tokenizer: Option<PathBuf>,
    /// The seed of synthetic data and Poisson arrivals.
    pub seed: u64,
    /// Left out of the metrics at the start.
    pub warmup: Option<Phase>,
    /// Left out of the metrics at the end.
    pub cooldown: Option<Phase>,
    /// Grace period and whether to keep text.
    pub options: RunOptions,
    /// Labels kept with the report.
    pub labels: BTreeMap<String, String>,
    /// Per-request latency objectives, if any.
    pub slo: Option<Slo>,
}

impl Plan {
    /// Parses and checks every option of `args`. Nothing is started and no
    /// model is loaded: an unknown data kind, a bad option anywhere or a
    /// missing data file is reported here.
    ///
    /// # Errors
    ///
    /// A usage error ([`Error::is_usage`]) naming the option at fault.
    pub fn new(args: PlanArgs) -> Result<Plan> {
        let mut backend = parse_kind_args(&args.backend)?;
        let sampling = take_sampling(&mut backend)?;
        let mut data = Vec::new();
        let data_args: Vec<&str> = if args.data.is_empty() {
            vec![DEFAULT_DATA]
        } else {
            args.data.iter().map(String::as_str).collect()
        };
        for text in data_args {
            data.push(check_data(parse_kind_args(text)?)?);
        }
        let seed = args.seed.unwrap_or(DEFAULT_SEED);
        let mut profile_args = parse_kind_args(args.profile.as_deref().unwrap_or(DEFAULT_PROFILE))?;
        // GuideLLM gives warm-up and cool-down in the profile; the flags win.
        let (profile_warmup, profile_cooldown) = Phase::take_from_profile(&mut profile_args)?;
        let profile = Profile::from_args(profile_args, seed)?;
        let constraints = ConstraintPlan::from_args(
            args.constraints
                .iter()
                .map(|c| parse_kind_args(c))
                .collect::<guidebench_core::Result<Vec<_>>>()?,
        )?;
        constraints.check_benchmarks(profile.benchmarks_known())?;
        let phase = |flag: &str, value: &Option<String>| -> Result<Option<Phase>> {
            Ok(value
                .as_deref()
                .map(|v| Phase::parse(flag, v))
                .transpose()?)
        };
        let grace_period = match &args.grace_period {
            Some(text) => {
                let secs = parse_seconds(&Value::String(text.clone()))
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| Error::Flag {
                        flag: "--grace-period",
                        reason: format!("must be a time like 30s, got `{text}`"),
                    })?;
                Duration::from_secs_f64(secs)
            }
            None => RunOptions::default().grace_period,
        };
        let slo = args.slo.as_deref().map(Slo::parse).transpose()?;
        if matches!(profile, Profile::Goodput { .. }) && slo.is_none() {
            return Err(Error::GoodputWithoutSlo);
        }
        // A replay follows each item's recorded send time; data that has
        // none would be sent all at once. Only the kind tells, so this is
        // refused before anything is read.
        if profile.replays()
            && !data
                .iter()
                .any(|d| crate::data::gives_send_times(&d.args.kind))
        {
            let kinds: Vec<String> = data
                .iter()
                .map(|d| format!("kind={}", d.args.kind))
                .collect();
            return Err(Error::Flag {
                flag: "--profile",
                reason: format!(
                    "kind=replay sends each request at the time its data recorded, but --data {} \
                     records no send times (every request would go at once); replay data that \
                     does: --data kind=trace,path=FILE (JSONL, JSON or CSV rows with a send time in \
                     the column timestamp_column= names, default `timestamp`, in \
                     timestamp_unit=s or ms) or kind=mooncake,path=FILE, or choose another \
                     profile (kind=constant,rate=N, kind=poisson,rate=N)",
                    kinds.join(" ")
                ),
            });
        }
        // A path that does not exist may be a Hub name (`ORG/NAME`),
        // fetched when the data is prepared.
        if let Some(path) = &args.tokenizer
            && !path.exists()
            && !guidebench_core::model::is_hub_name(&path.to_string_lossy())
        {
            return Err(Error::NoSuchFile {
                what: "tokenizer",
                path: path.clone(),
            });
        }
        Ok(Plan {
            backend,
            sampling,
            data,
            profile,
            constraints,
            tokenizer: args.tokenizer,
            seed,
            warmup: phase("warmup", &args.warmup)?.or(profile_warmup),
            cooldown: phase("cooldown", &args.cooldown)?.or(profile_cooldown),
            options: RunOptions {
                grace_period,
                keep_text: args.keep_text,
            },
            labels: args.labels,
            slo,
        })
    }

    /// Creates the backend from the registry (cheap: engines load their
    /// model at [`Backend::startup`]).
    ///
    /// # Errors
    ///
    /// An unknown backend kind or engine (listing the available ones), or
    /// options the backend refuses.
    pub fn create_backend(&self) -> Result<Arc<dyn Backend>> {
        Ok(Arc::from(registry::create_backend(self.backend.clone())?))
    }

    /// The resolved configuration, as the report keeps it, with secrets
    /// redacted by [`guidebench_core::redact`] (in the backend, the data,
    /// the labels, anywhere).
    pub fn config(&self) -> Value {
        let mut config = json!({
            "backend": kind_config(&self.backend),
            "sampling": self.sampling,
            "data": self.data.iter().map(|d| {
                let mut value = kind_config(&d.args);
                if let Some(map) = value.as_object_mut() {
                    map.insert("on_error".into(), json!(d.on_error));
                }
                value
            }).collect::<Vec<_>>(),
            "profile": self.profile,
            "constraints": self.constraints,
            "seed": self.seed,
            "warmup": self.warmup,
            "cooldown": self.cooldown,
            "grace_period_s": self.options.grace_period.as_secs_f64(),
            "labels": self.labels,
            "slo": self.slo,
        });
        redact::redact_value(&mut config);
        config
    }
}

/// Takes the `sampling` group out of the backend's options and checks it.
fn take_sampling(backend: &mut KindArgs) -> Result<SamplingParams> {
    let invalid = |key: &str, reason: String| {
        Error::Core(guidebench_core::Error::InvalidOption {
            context: format!("backend {}", backend.kind),
            key: key.to_owned(),
            reason,
        })
    };
    // GuideLLM's backend option `max_tokens` (the output length when the
    // data does not fix it) is `sampling.max_tokens` here.
    if let Some(max_tokens) = backend.options.remove("max_tokens") {
        match backend
            .options
            .entry("sampling")
            .or_insert_with(|| Value::Object(Map::new()))
        {
            Value::Object(group) if group.contains_key("max_tokens") => {
                return Err(invalid(
                    "max_tokens",
                    "is GuideLLM's spelling of sampling.max_tokens, which is given too; give \
                     one of them"
                        .into(),
                ));
            }
            Value::Object(group) => {
                group.insert("max_tokens".into(), max_tokens);
            }
            // Not a group: refused below.
            _ => {}
        }
    }
    let Some(group) = backend.options.remove("sampling") else {
        return Ok(SamplingParams::default());
    };
    let Value::Object(mut group) = group else {
        return Err(invalid(
            "sampling",
            "give its fields as sampling.temperature=0.7,sampling.top_p=0.9,...".into(),
        ));
    };
    if let Some(key) = group
        .keys()
        .find(|k| !SAMPLING_OPTIONS.iter().any(|o| o.name == k.as_str()))
    {
        return Err(Error::Core(guidebench_core::Error::UnknownOption {
            context: format!("backend {}", backend.kind),
            key: format!("sampling.{key}"),
            valid: SAMPLING_OPTIONS
                .iter()
                .map(|o| format!("sampling.{}", o.name))
                .collect(),
        }));
    }
    // `stop=a;b` is two stop strings.
    if let Some(Value::String(stop)) = group.get("stop") {
        let list: Vec<Value> = stop
            .split(';')
            .map(|s| Value::String(s.to_owned()))
            .collect();
        group.insert("stop".into(), Value::Array(list));
    }
    // One field at a time, so that a wrong type names its key.
    for (key, value) in &group {
        let mut one = Map::new();
        one.insert(key.clone(), value.clone());
        serde_json::from_value::<SamplingParams>(Value::Object(one))
            .map_err(|e| invalid(&format!("sampling.{key}"), e.to_string()))?;
    }
    let params: SamplingParams = serde_json::from_value(Value::Object(group))
        .map_err(|e| invalid("sampling", e.to_string()))?;
    // Range checks, with a stand-in length when the data decides it.
    SamplingParams {
        max_tokens: Some(params.max_tokens.unwrap_or(1)),
        ..params.clone()
    }
    .validate()
    .map_err(|err| match err {
        guidebench_core::Error::InvalidRequest { field, reason } => {
            invalid(&format!("sampling.{field}"), reason)
        }
        other => Error::Core(other),
    })?;
    Ok(params)
}

/// Checks one `--data` argument against its kind's options, without
/// reading anything but whether a named file exists. A GuideLLM name of a
/// kind (`csv_file`) is kept as the kind it stands for (`file`,
/// `format=csv`).
fn check_data(args: KindArgs) -> Result<DataPlan> {
    let (kind, mut args) = resolve_kind(args)?;
    let mut probe = args.options.clone();
    check_options(&format!("data {}", kind.name), &[kind.options], &mut probe)?;
    let on_error = match args.options.remove("on_error") {
        Some(Value::String(s)) if s == "skip" => OnError::Skip,
        Some(_) => OnError::Fail,
        None => DataDefaults::default().on_error,
    };
    if let Some(path) = args.options.get("path").and_then(Value::as_str)
        && !std::path::Path::new(path).exists()
        && !(kind.datasets && crate::data::names_a_dataset(path))
    {
        return Err(Error::NoSuchFile {
            what: "data file",
            path: path.into(),
        });
    }
    Ok(DataPlan { args, on_error })
}

fn kind_config(args: &KindArgs) -> Value {
    let mut map = args.options.clone();
    map.insert("kind".into(), Value::String(args.kind.clone()));
    Value::Object(map)
}

/// What a session tells whoever shows progress. Every method has a
/// default that does nothing.
pub trait Progress: Send {
    /// A step before the benchmarks (starting the backend, ...).
    fn phase(&mut self, message: &str) {
        let _ = message;
    }
    /// A benchmark starts; `total` is its request count when known. The
    /// observer sees its sends and records.
    fn benchmark(&mut self, label: &str, total: Option<u64>) -> Arc<dyn Observer> {
        let _ = (label, total);
        Arc::new(NoObserver)
    }
    /// A benchmark ended after `seconds`.
    fn benchmark_done(&mut self, label: &str, seconds: f64) {
        let _ = (label, seconds);
    }
}

/// Progress that shows nothing.
#[derive(Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {}

/// What a session reads and checks before the backend starts
/// ([`Session::prepare`]).
pub struct PreparedData {
    /// The `--tokenizer`, loaded (once the backend is up, the backend's
    /// where there is no `--tokenizer`).
    tokenizer: Option<Arc<dyn Tokenizer>>,
    /// Each data source's data, with what to do with a bad item.
    sources: Vec<(PreparedSource, OnError)>,
}

impl std::fmt::Debug for PreparedData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedData")
            .field("tokenizer", &self.tokenizer.is_some())
            .field("sources", &self.sources)
            .finish()
    }
}

/// A checked plan, ready to run.
#[derive(Debug)]
pub struct Session {
    plan: Plan,
}

impl Session {
    /// A session that will run `plan`.
    pub fn new(plan: Plan) -> Self {
        Session { plan }
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Starts `backend`, runs every benchmark of the plan, shuts the
    /// backend down, and returns the report. `cancel` turning true stops
    /// sending (requests in flight get the grace period) and marks the
    /// report interrupted.
    ///
    /// A data item that cannot become a request once the benchmarks have
    /// started stops the run: the report covers what ran, and
    /// [`Report::failure`] says why (with `on_error=skip` the item is
    /// counted instead).
    ///
    /// Everything that can fail without the backend is checked first
    /// ([`Session::prepare`]): a bad data file or row, a dataset missing
    /// from the cache or a tokenizer that cannot be loaded fails before the
    /// backend starts, so before a model loads.
    ///
    /// # Errors
    ///
    /// The data or tokenizer failing their checks (a usage error,
    /// [`Error::is_usage`]), the backend failing to start or validate, no
    /// tokenizer for data that needs one (synthetic prompts), or a data
    /// source or item that fails before the first request is sent.
    pub async fn run(
        &self,
        backend: Arc<dyn Backend>,
        progress: &mut dyn Progress,
        cancel: watch::Receiver<bool>,
    ) -> Result<Report> {
        let prepared = self.prepare()?;
        progress.phase("starting the backend and loading the model");
        let result = self.measure(&backend, prepared, progress, cancel).await;
        // Interrupted while the backend started (a model loading): the
        // load may still hold it, and the interrupt asks for an exit
        // within a second, so its shutdown is not waited for past that.
        let shutdown = match &result {
            Ok(report) if report.interrupted && report.benchmarks.is_empty() => {
                tokio::time::timeout(INTERRUPTED_SHUTDOWN, backend.shutdown())
                    .await
                    .unwrap_or(Ok(()))
            }
            _ => backend.shutdown().await,
        };
        let report = result?;
        shutdown?;
        Ok(report)
    }

    /// Everything that can be read and checked without the backend, done
    /// before it starts (so before a model loads): the `--tokenizer` file
    /// loaded, and every data source's data read and checked (a file's
    /// rows parsed and each made into a request, a dataset found in the
    /// cache).
    ///
    /// # Errors
    ///
    /// [`Error::Flag`] for a `--tokenizer` that cannot be loaded; a data
    /// file, dataset or row that fails (see [`PreparedSource::new`]), or a
    /// row that cannot become a request ([`Error::Item`]); all usage
    /// errors.
    pub fn prepare(&self) -> Result<PreparedData> {
        let plan = &self.plan;
        let tokenizer: Option<Arc<dyn Tokenizer>> = match &plan.tokenizer {
            Some(path) => {
                // A local file or folder as given, else a Hub name whose
                // tokenizer files are fetched into the cache.
                let path = if path.exists() {
                    path.clone()
                } else {
                    let search = ModelSearch::from_env();
                    let name = path.to_string_lossy();
                    search
                        .resolve_tokenizer(&name)
                        .map_err(|source| Error::HubTokenizer {
                            name: name.into_owned(),
                            cache: search.hub.cache.clone(),
                            source: Box::new(source),
                        })?
                };
                let loaded = if path.is_dir() {
                    HfTokenizer::from_dir(&path)
                } else {
                    HfTokenizer::from_file(&path)
                };
                Some(Arc::new(loaded.map_err(|e| Error::Flag {
                    flag: "--tokenizer",
                    reason: format!("cannot load `{}`: {e}", path.display()),
                })?))
            }
            None => None,
        };
        let sources = plan
            .data
            .iter()
            .map(|data| {
                Ok((
                    PreparedSource::new(data.args.clone(), data.on_error, plan.seed)?,
                    data.on_error,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        // Data read into memory (a file's rows) is made into requests once
        // here, so that a row the run cannot send (a `top_p` above 1)
        // fails before the backend starts too.
        for (source, on_error) in &sources {
            if *on_error == OnError::Skip || !source.checked_before_the_run() {
                continue;
            }
            let mut items = source.source(None)?;
            while let Some(item) = items.next_item()? {
                to_job(0, item, &plan.sampling)?;
            }
        }
        Ok(PreparedData { tokenizer, sources })
    }

    async fn measure(
        &self,
        backend: &Arc<dyn Backend>,
        prepared: PreparedData,
        progress: &mut dyn Progress,
        cancel: watch::Receiver<bool>,
    ) -> Result<Report> {
        let plan = &self.plan;
        // Ctrl-C while the backend starts (a model loading for seconds)
        // ends the run at once: the report says it was interrupted before
        // any benchmark, and is written as any interrupted report is.
        // (An in-process backend loads its model as it is validated.)
        let mut interrupted = cancel.clone();
        let validation = tokio::select! {
            validation = async {
                backend.startup().await?;
                backend.validate().await
            } => validation?,
            Ok(_) = interrupted.wait_for(|cancelled| *cancelled) => {
                tracing::info!("interrupted while the backend started");
                let mut report = Report::new(plan.config());
                report.interrupted = true;
                return Ok(report);
            }
        };
        let mut data = prepared;
        if data.tokenizer.is_none() {
            data.tokenizer = backend.tokenizer();
        }
        // A tokenizer is needed only to cut synthetic prompts to exact
        // counts; file prompts are counted by the backend without one.
        // A server's backend has none of its own: as GuideLLM does, the
        // tokenizer of the model id it serves is fetched from the Hub.
        if data.tokenizer.is_none()
            && data
                .sources
                .iter()
                .any(|(source, _)| source.needs_tokenizer())
        {
            data.tokenizer = Some(served_model_tokenizer(&validation).await?);
        }
        // Make every source once before the first benchmark: a failure
        // comes before anything is sent.
        for (source, _) in &data.sources {
            source.source(data.tokenizer.clone())?;
        }

        let mut report = Report::new(plan.config());
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
        // What a backend says of itself may name its secrets (a target
        // URL with a password); the report keeps it redacted.
        redact::redact_object(&mut report.environment.backend);

        let mut planner = Planner::new(&plan.profile);
        let mut next = planner.next(None);
        // Requests completed and failed by the benchmarks so far, for the
        // global error rate.
        let (mut completed, mut errors) = (0u64, 0u64);
        while let Some(strategy) = next {
            let mut constraints = plan
                .constraints
                .for_benchmark(report.benchmarks.len())
                .clone();
            if let Some(global) = &mut constraints.max_global_error_rate {
                global.earlier_completed = completed;
                global.earlier_errors = errors;
            }
            let (mut run, fed, constraints) = self
                .one_benchmark(
                    backend,
                    &data,
                    &strategy,
                    constraints,
                    progress,
                    cancel.clone(),
                )
                .await?;
            let interrupted = run.stop_reason == StopReason::Interrupted;
            completed += run
                .records
                .iter()
                .filter(|r| r.status != RequestStatus::Incomplete)
                .count() as u64;
            errors += run
                .records
                .iter()
                .filter(|r| r.status == RequestStatus::Error)
                .count() as u64;
            let global_stop = constraints
                .max_global_error_rate
                .filter(|g| g.exceeded(completed, errors));
            let success_rate = run.success_rate();
            let mut benchmark = self.benchmark_report(&mut run, &constraints);
            if fed.skipped > 0 {
                benchmark
                    .extra
                    .insert("data_skipped".into(), json!(fed.skipped));
            }
            report.benchmarks.push(benchmark);
            if let Some(err) = fed.error {
                report.failure = Some(err.to_string());
                break;
            }
            if interrupted {
                report.interrupted = true;
                break;
            }
            if let Some(global) = global_stop {
                // Casts: counts far below 2^52.
                let rate = errors as f64 / completed as f64;
                let why = format!(
                    "max_global_error_rate: {errors} of the {completed} requests completed so far \
                     failed ({:.1} % > {:.1} %); no further benchmark was run",
                    rate * 100.0,
                    global.rate * 100.0
                );
                tracing::warn!("{why}");
                if let Some(last) = report.benchmarks.last_mut() {
                    last.extra
                        .insert("stop_reason".into(), json!(StopReason::MaxGlobalErrorRate));
                    last.extra.insert("run_stopped".into(), json!(why));
                }
                break;
            }
            next = planner.next(report.benchmarks.last().map(|benchmark| Finished {
                strategy: &strategy,
                report: benchmark,
                success_rate,
                stop: run.stop_reason,
            }));
        }
        report.conclusion = planner.conclusion();
        Ok(report)
    }

    /// The benchmark's report; the run's records are moved into it (the
    /// run keeps none).
    fn benchmark_report(
        &self,
        run: &mut BenchmarkRun,
        constraints: &Constraints,
    ) -> BenchmarkReport {
        let plan = &self.plan;
        let resolve =
            |phase: Phase| phase.resolve(constraints.max_requests, constraints.max_duration);
        let sent = run.records.len();
        let m = compact_measured(run, plan.warmup.map(resolve), plan.cooldown.map(resolve));
        let mut report = BenchmarkReport::new(
            run.strategy.label(),
            serde_json::to_value(&run.strategy).unwrap_or(Value::Null),
            m.start,
            m.end,
            m.records,
        );
        report.client = run.footprint;
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        if let Some(flag) = client_saturation(&report, run.end.secs_since(run.start), cores) {
            report.extra.insert(
                "client_saturated".into(),
                serde_json::to_value(flag).unwrap_or(Value::Null),
            );
        }
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
        report.extra.insert("requests_sent".into(), json!(sent));
        if let Some(saturation) = &run.saturation {
            report.extra.insert(
                "over_saturation".into(),
                serde_json::to_value(saturation).unwrap_or(Value::Null),
            );
        }
        if let Some(slo) = &plan.slo {
            report.apply_slo(slo);
        }
        report
    }

    async fn one_benchmark(
        &self,
        backend: &Arc<dyn Backend>,
        data: &PreparedData,
        strategy: &Strategy,
        mut constraints: Constraints,
        progress: &mut dyn Progress,
        cancel: watch::Receiver<bool>,
    ) -> Result<(BenchmarkRun, Fed, Constraints)> {
        let plan = &self.plan;
        let sources = data
            .sources
            .iter()
            .map(|(source, on_error)| {
                Ok(FeedSource {
                    kind: source.kind().to_owned(),
                    on_error: *on_error,
                    source: source.source(data.tokenizer.clone())?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // One request per row of every source: as many as the shortest
        // source has, known when every source says.
        let finite: Option<usize> = sources
            .iter()
            .map(|s| s.source.len_hint())
            .collect::<Option<Vec<usize>>>()
            .and_then(|lens| lens.into_iter().min());
        if constraints.is_unbounded() && finite.is_none() {
            constraints.max_requests = Some(DEFAULT_MAX_REQUESTS);
        }
        let total = match (
            constraints.max_requests.or(constraints.min_requests),
            finite,
        ) {
            (Some(n), Some(f)) => Some(n.min(f as u64)),
            (Some(n), None) => Some(n),
            (None, Some(f)) if constraints.max_duration.is_none() => Some(f as u64),
            _ => None,
        };
        let ahead = total.map_or(FEED_BUFFER, |n| {
            usize::try_from(n)
                .unwrap_or(FEED_PREPARED)
                .clamp(1, FEED_PREPARED)
        });
        let (mut rx, feed) = Feed::start(sources, plan.sampling.clone(), ahead).await?;

        let observer = progress.benchmark(&strategy.label(), total);
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
        // Dropping the receiver ends a feed still preparing items.
        drop(rx);
        progress.benchmark_done(&strategy.label(), run.end.secs_since(run.start));
        Ok((run, feed.finish(), constraints))
    }
}

/// How long an interrupt during the backend's start waits for its
/// shutdown (a model load that cannot stop) before the run ends anyway.
const INTERRUPTED_SHUTDOWN: Duration = Duration::from_millis(500);

/// A data item as a validated request: the item's own sampling fields win
/// over the run's, its output length over `max_tokens`.
///
/// # Errors
///
/// [`Error::Item`], naming the item and the field at fault.
pub fn to_request(id: u64, item: DataItem, run: &SamplingParams) -> Result<GenerationRequest> {
    let DataItem {
        input,
        prompt_tokens,
        output_tokens,
        sampling,
        origin,
        at: _,
        turns: _,
        history: _,
    } = item;
    let mut params = SamplingParams {
        temperature: sampling.temperature.or(run.temperature),
        top_p: sampling.top_p.or(run.top_p),
        top_k: sampling.top_k.or(run.top_k),
        seed: sampling.seed.or(run.seed),
        max_tokens: sampling.max_tokens.or(run.max_tokens),
        ignore_eos: sampling.ignore_eos.or(run.ignore_eos),
        stop: sampling.stop.or_else(|| run.stop.clone()),
    };
    match output_tokens {
        // A fixed output length is what the data asks to measure.
        Some(n) => {
            params.max_tokens = Some(n);
            params.ignore_eos.get_or_insert(true);
        }
        None => {
            params
                .max_tokens
                .get_or_insert(SamplingDefaults::default().max_tokens);
        }
    }
    let sampling = params
        .validate()
        .map_err(|source| Error::Item { origin, source })?;
    let mut request = GenerationRequest::new(id, input, sampling);
    request.expected_prompt_tokens = prompt_tokens;
    Ok(request)
}

/// The messages of a turn's input: text is one user message.
fn messages(input: RequestInput) -> Vec<ChatMessage> {
    match input {
        RequestInput::Text(text) => vec![ChatMessage::text("user", text)],
        RequestInput::Chat(messages) => messages,
    }
}

/// A data item as the runner's job: a request, or the first turn of a
/// conversation with its later turns planned (ids `id + 1`, `id + 2`, …,
/// each validated with the item's sampling and its own output length).
///
/// # Errors
///
/// [`Error::Item`], naming the item and the field at fault.
pub fn to_job(id: u64, mut item: DataItem, run: &SamplingParams) -> Result<Job> {
    let turns = std::mem::take(&mut item.turns);
    if turns.is_empty() {
        return Ok(to_request(id, item, run)?.into());
    }
    let history = item.history;
    let current = messages(std::mem::replace(
        &mut item.input,
        RequestInput::Text(String::new()),
    ));
    item.input = RequestInput::Chat(current.clone());
    let (sampling, origin) = (item.sampling.clone(), item.origin.clone());
    let request = to_request(id, item, run)?;
    let rest = (id + 1..)
        .zip(turns)
        .map(|(turn_id, turn)| {
            let planned = to_request(
                turn_id,
                DataItem {
                    input: RequestInput::Text(String::new()),
                    prompt_tokens: None,
                    output_tokens: turn.output_tokens,
                    sampling: sampling.clone(),
                    origin: origin.clone(),
                    at: None,
                    turns: Vec::new(),
                    history,
                },
                run,
            )?;
            Ok(PlannedTurn {
                id: turn_id,
                messages: messages(turn.input),
                sampling: planned.sampling,
                think: turn.think,
            })
        })
        .collect::<Result<_>>()?;
    Ok(Job {
        conversation: Some(Box::new(Conversation {
            id,
            turn: 0,
            history,
            before: Vec::new(),
            current,
            rest,
            waited: None,
            predecessor_end: None,
        })),
        ..request.into()
    })
}

/// One data source as the feed uses it.
struct FeedSource {
    kind: String,
    on_error: OnError,
    source: Box<dyn DataSource>,
}

/// What the feed of one benchmark did besides sending requests.
#[derive(Debug, Default)]
struct Fed {
    /// Items skipped (`on_error=skip`).
    skipped: u64,
    /// The error that stopped the feed after the benchmark started.
    error: Option<Error>,
}

/// The next row of every source, in source order: `Ok(None)` once any
/// source is exhausted (the data ends with the shortest source, as
/// GuideLLM's does); `Ok(Some(None))` for a row one of whose items
/// `on_error=skip` skips.
fn next_row(sources: &mut [FeedSource]) -> Result<Option<Option<Vec<DataItem>>>> {
    let mut row = Vec::with_capacity(sources.len());
    let mut skip = false;
    for feed in sources.iter_mut() {
        match feed.source.next_item() {
            Ok(Some(item)) => row.push(item),
            Ok(None) => return Ok(None),
            Err(err) if feed.on_error == OnError::Skip && is_item_error(&err) => {
                tracing::warn!(error = %err, "data item skipped");
                skip = true;
            }
            Err(source) => {
                return Err(Error::Source {
                    kind: feed.kind.clone(),
                    source: Box::new(source),
                });
            }
        }
    }
    Ok(Some((!skip).then_some(row)))
}

/// Turns rows into requests and sends them until the data ends or the
/// receiver is gone; says `ready` once `ahead` requests are prepared. With
/// several sources each request merges one item of every source
/// ([`crate::data::merge`]); a row that cannot become a request is skipped
/// where any of its sources says `on_error=skip`.
fn feed_items(
    sources: &mut [FeedSource],
    sampling: &SamplingParams,
    tx: &mpsc::Sender<Job>,
    skipped: &AtomicU64,
    ahead: usize,
    ready: &mut Option<oneshot::Sender<Result<()>>>,
) -> Result<()> {
    let mut id = 0u64;
    let skips = sources.iter().any(|s| s.on_error == OnError::Skip);
    while let Some(row) = next_row(sources)? {
        let Some(row) = row else {
            skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let job = crate::data::merge(row).and_then(|item| {
            let at = item.at;
            to_job(id, item, sampling).map(|job| Job { at, ..job })
        });
        let job = match job {
            Ok(job) => job,
            Err(err) if skips => {
                tracing::warn!(error = %err, "data item skipped");
                skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(err) => return Err(err),
        };
        id += 1 + job.conversation.as_ref().map_or(0, |c| c.rest.len() as u64);
        if tx.blocking_send(job).is_err() {
            return Ok(());
        }
        if usize::try_from(id).unwrap_or(usize::MAX) >= ahead
            && let Some(ready) = ready.take()
        {
            let _ = ready.send(Ok(()));
        }
    }
    Ok(())
}

/// The data feed of one benchmark: a thread that turns items into
/// requests ahead of the sender.
struct Feed {
    skipped: Arc<AtomicU64>,
    error: Arc<Mutex<Option<Error>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Feed {
    /// Starts the thread and waits until `ahead` requests are prepared (or
    /// the data ends). An error before then is returned here.
    async fn start(
        mut sources: Vec<FeedSource>,
        sampling: SamplingParams,
        ahead: usize,
    ) -> Result<(mpsc::Receiver<Job>, Feed)> {
        let (tx, rx) = mpsc::channel::<Job>(ahead);
        let (ready_tx, ready_rx) = oneshot::channel::<Result<()>>();
        let skipped = Arc::new(AtomicU64::new(0));
        let error: Arc<Mutex<Option<Error>>> = Arc::new(Mutex::new(None));
        let thread = {
            let skipped = Arc::clone(&skipped);
            let error = Arc::clone(&error);
            std::thread::Builder::new()
                .name("guidebench-data".into())
                .spawn(move || {
                    let mut ready = Some(ready_tx);
                    let outcome =
                        feed_items(&mut sources, &sampling, &tx, &skipped, ahead, &mut ready);
                    match (outcome, ready.take()) {
                        (Ok(()), Some(ready)) => {
                            let _ = ready.send(Ok(()));
                        }
                        (Ok(()), None) => {}
                        (Err(err), Some(ready)) => {
                            let _ = ready.send(Err(err));
                        }
                        (Err(err), None) => {
                            tracing::error!(error = %err, "the data feed stopped the run");
                            *error.lock().unwrap_or_else(PoisonError::into_inner) = Some(err);
                        }
                    }
                })
                .map_err(|source| Error::Start {
                    what: "the data thread",
                    source,
                })?
        };
        if let Ok(Err(err)) = ready_rx.await {
            return Err(err);
        }
        Ok((
            rx,
            Feed {
                skipped,
                error,
                thread: Some(thread),
            },
        ))
    }

    /// Waits for the thread (its receiver must be gone) and returns what it
    /// did.
    fn finish(mut self) -> Fed {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        Fed {
            skipped: self.skipped.load(Ordering::Relaxed),
            error: self
                .error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        }
    }
}

/// The tokenizer of the model a backend serves (`info["model"]` of its
/// validation, a server's model id), fetched from the Hub by that id: the
/// tokenizer files only, never weights.
///
/// # Errors
///
/// [`Error::NoTokenizer`] when the backend names no model, or
/// [`Error::NoServedTokenizer`] saying what was tried with the id (a
/// local name such as `mock-model` is not a Hub name; a Hub repository
/// without `tokenizer.json`; the Hub's own error).
async fn served_model_tokenizer(validation: &ValidationReport) -> Result<Arc<dyn Tokenizer>> {
    let Some(model) = validation.info.get("model").and_then(|m| m.as_str()) else {
        return Err(Error::NoTokenizer);
    };
    let model = model.to_owned();
    let id = model.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        let dir = ModelSearch::from_env().resolve_tokenizer(&id)?;
        HfTokenizer::from_dir(&dir)
    })
    .await
    .map_err(|e| Error::NoServedTokenizer {
        model: model.clone(),
        usage: false,
        reason: format!("the tokenizer's download stopped: {e}"),
    })?;
    match loaded {
        Ok(tokenizer) => Ok(Arc::new(tokenizer)),
        Err(e) => Err(Error::NoServedTokenizer {
            model,
            usage: e.is_usage(),
            reason: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::History;
    use guidebench_core::request::RequestInput;

    fn item(sampling: SamplingParams, output_tokens: Option<u32>) -> DataItem {
        DataItem {
            input: RequestInput::Text("hello".into()),
            prompt_tokens: Some(5),
            output_tokens,
            sampling,
            origin: "data.jsonl, line 7".into(),
            at: None,
            turns: Vec::new(),
            history: History::Full,
        }
    }

    #[test]
    fn a_rows_sampling_wins_over_the_runs_and_the_data_fixes_the_length() {
        let run = SamplingParams {
            temperature: Some(0.7),
            top_p: Some(0.9),
            seed: Some(3),
            stop: Some(vec!["x".into()]),
            max_tokens: Some(50),
            ..SamplingParams::default()
        };
        let row = SamplingParams {
            temperature: Some(0.2),
            ..SamplingParams::default()
        };
        let request = to_request(4, item(row, Some(9)), &run).expect("valid");
        let s = &request.sampling;
        assert_eq!(s.temperature, 0.2, "the row's own value");
        assert_eq!(s.top_p, 0.9, "the run's value where the row has none");
        assert_eq!(s.seed, Some(3));
        assert_eq!(s.stop, vec!["x".to_owned()]);
        assert_eq!(s.max_tokens, 9, "the data's length");
        assert!(s.ignore_eos, "a fixed length is generated in full");

        let open = to_request(5, item(SamplingParams::default(), None), &run).expect("valid");
        assert_eq!(open.sampling.max_tokens, 50);
        assert!(!open.sampling.ignore_eos);
        let default = to_request(
            6,
            item(SamplingParams::default(), None),
            &SamplingParams::default(),
        )
        .expect("valid");
        assert_eq!(default.sampling.max_tokens, DEFAULT_MAX_TOKENS);
    }

    #[test]
    fn the_help_shows_the_max_tokens_default_the_code_uses() {
        let spec = SAMPLING_OPTIONS
            .iter()
            .find(|o| o.name == "max_tokens")
            .expect("listed");
        assert_eq!(
            spec.default_text(),
            Some(DEFAULT_MAX_TOKENS.to_string()),
            "the help text"
        );
    }

    #[test]
    fn every_sampling_default_help_prints_is_the_one_a_request_gets() {
        let shown = |name: &str| {
            SAMPLING_OPTIONS
                .iter()
                .find(|o| o.name == name)
                .and_then(OptionSpec::default_text)
        };
        assert_eq!(shown("temperature").as_deref(), Some("0"));
        assert_eq!(shown("top_p").as_deref(), Some("1"));
        assert_eq!(shown("top_k").as_deref(), Some("0"));
        assert_eq!(shown("max_tokens").as_deref(), Some("256"));

        // A run and an item that set nothing get the struct's values.
        let mut backend = parse_kind_args("kind=offline,engine=mock").expect("parses");
        let run = take_sampling(&mut backend).expect("no sampling group");
        let request = to_request(1, item(SamplingParams::default(), None), &run).expect("valid");
        let d = SamplingDefaults::default();
        assert_eq!(f64::from(request.sampling.temperature), d.temperature);
        assert_eq!(f64::from(request.sampling.top_p), d.top_p);
        assert_eq!(request.sampling.top_k, d.top_k);
        assert_eq!(request.sampling.max_tokens, d.max_tokens);
    }

    #[test]
    fn an_invalid_item_names_its_origin_and_field() {
        let row = SamplingParams {
            top_p: Some(0.0),
            ..SamplingParams::default()
        };
        let err =
            to_request(0, item(row, Some(2)), &SamplingParams::default()).expect_err("top_p 0");
        let message = err.to_string();
        assert!(message.starts_with("data.jsonl, line 7: "), "{message}");
        assert!(message.contains("top_p"), "{message}");
    }

    /// Items, then an error at item `fail_at`.
    struct Failing {
        produced: usize,
        fail_at: usize,
    }

    impl DataSource for Failing {
        fn next_item(&mut self) -> Result<Option<DataItem>> {
            self.produced += 1;
            if self.produced == self.fail_at {
                return Err(Error::Core(guidebench_core::Error::Config(
                    "row unreadable".into(),
                )));
            }
            Ok(Some(item(SamplingParams::default(), Some(1))))
        }
    }

    fn failing(fail_at: usize) -> Vec<FeedSource> {
        vec![FeedSource {
            kind: "test".into(),
            on_error: OnError::Fail,
            source: Box::new(Failing {
                produced: 0,
                fail_at,
            }),
        }]
    }

    #[tokio::test]
    async fn a_source_failing_after_the_run_started_is_reported_not_dropped() {
        let (mut rx, feed) = Feed::start(failing(5), SamplingParams::default(), 2)
            .await
            .expect("two items are ready before the failure");
        let mut received = 0;
        while rx.recv().await.is_some() {
            received += 1;
        }
        assert_eq!(received, 4);
        let fed = feed.finish();
        let err = fed.error.expect("the failure is kept for the report");
        assert!(err.to_string().contains("row unreadable"), "{err}");
        assert!(err.to_string().contains("`test`"), "{err}");
    }

    #[tokio::test]
    async fn a_source_failing_before_the_run_fails_the_start() {
        let err = Feed::start(failing(2), SamplingParams::default(), 8)
            .await
            .err()
            .expect("fails before enough items are ready");
        assert!(err.to_string().contains("row unreadable"), "{err}");
    }
}
