//! The plan of a run: [`PlanArgs`] as the user wrote them, checked into a
//! [`Plan`] before anything heavy starts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use guidebench_core::backend::Backend;
use guidebench_core::options::{KindArgs, check_options, parse_kind_args, parse_seconds};
use guidebench_core::redact;
use guidebench_core::registry;
use guidebench_core::sampling::SamplingParams;

use super::backend::BackendArgs;
use crate::data::{DataDefaults, OnError, resolve_kind};
use crate::runner::{ConstraintPlan, Phase, Profile, RunOptions};
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

/// A run as the user wrote it: the backend parsed where it was given,
/// every other field text or absent; defaults are filled in by
/// [`Plan::new`].
#[derive(Debug, Clone, Default)]
pub struct PlanArgs {
    /// `--backend kind=NAME,...`, with its `sampling.*` group, parsed.
    pub backend: BackendArgs,
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
        let BackendArgs {
            args: backend,
            sampling,
        } = args.backend;
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
