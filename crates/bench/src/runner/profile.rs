//! Load profiles: how requests are sent.

use std::time::Duration;

use guidebench_core::rng::{self, SeededRng};
use rand_distr::{Distribution, Exp};
use serde::Serialize;

use guidebench_core::options::{KindArgs, OptionSpec, OptionType, check_options};
use guidebench_core::{Error, Result};

use super::aliases::{self, Component};
use crate::analysis::goodput::GoodputOptions;

/// How one benchmark sends its requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Strategy {
    /// One request at a time.
    Synchronous,
    /// Exactly `streams` requests in flight.
    Concurrent {
        /// Requests in flight.
        streams: usize,
        /// The streams start spread evenly over this long: stream `k` of
        /// `n` sends its first request at `k / n · rampup`.
        #[serde(
            rename = "rampup_s",
            serialize_with = "as_seconds",
            skip_serializing_if = "Duration::is_zero"
        )]
        rampup: Duration,
    },
    /// As many requests in flight as allowed, sent as fast as possible.
    Throughput {
        /// The most requests in flight.
        max_concurrency: usize,
        /// The slots start spread evenly over this long, and no slot sends
        /// a second request before it ends (as GuideLLM's throughput ramp).
        #[serde(
            rename = "rampup_s",
            serialize_with = "as_seconds",
            skip_serializing_if = "Duration::is_zero"
        )]
        rampup: Duration,
    },
    /// Request `i` is sent at `start + i / rate`; with a ramp-up, the rate
    /// grows linearly from 0 to `rate` over it first.
    Constant {
        /// Requests per second.
        rate: f64,
        /// The most requests in flight, if limited.
        max_concurrency: Option<usize>,
        /// How long the rate takes to grow linearly from 0 to `rate`.
        #[serde(
            rename = "rampup_s",
            serialize_with = "as_seconds",
            skip_serializing_if = "Duration::is_zero"
        )]
        rampup: Duration,
    },
    /// Exponential gaps with mean `1 / rate`, from a seeded generator.
    Poisson {
        /// Mean requests per second.
        rate: f64,
        /// Seed of the gap generator.
        seed: u64,
        /// The most requests in flight, if limited.
        max_concurrency: Option<usize>,
    },
    /// Each request at `start + time_scale × offset`, where the offset is
    /// the one its data recorded (a trace's timestamp minus the first one,
    /// from `--data kind=trace`).
    Replay {
        /// The factor applied to recorded offsets: 0.01 replays a trace 100
        /// times faster, 2 at half its pace.
        time_scale: f64,
        /// The most requests in flight, if limited.
        max_concurrency: Option<usize>,
    },
}

fn as_seconds<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Strategy {
    /// Exactly `streams` requests in flight, all started at once.
    pub fn concurrent(streams: usize) -> Self {
        Strategy::Concurrent {
            streams,
            rampup: Duration::ZERO,
        }
    }

    /// Up to `max_concurrency` requests in flight, all started at once.
    pub fn throughput(max_concurrency: usize) -> Self {
        Strategy::Throughput {
            max_concurrency,
            rampup: Duration::ZERO,
        }
    }

    /// A constant `rate` from the start, without a ramp-up.
    pub fn constant(rate: f64, max_concurrency: Option<usize>) -> Self {
        Strategy::Constant {
            rate,
            max_concurrency,
            rampup: Duration::ZERO,
        }
    }

    /// How long the strategy ramps up (zero without a ramp-up).
    pub fn rampup(&self) -> Duration {
        match self {
            Strategy::Concurrent { rampup, .. }
            | Strategy::Throughput { rampup, .. }
            | Strategy::Constant { rampup, .. } => *rampup,
            Strategy::Synchronous | Strategy::Poisson { .. } | Strategy::Replay { .. } => {
                Duration::ZERO
            }
        }
    }

    /// When slot `slot` of a strategy without a schedule may send its first
    /// request, and from when it may send later ones, as offsets from the
    /// benchmark start: spread evenly over the ramp-up.
    // Casts: slot counts are far below 2^52.
    pub fn slot_start(&self, slot: usize) -> (Duration, Duration) {
        match self {
            Strategy::Concurrent { streams, rampup } => (
                rampup.mul_f64(slot as f64 / *streams as f64),
                Duration::ZERO,
            ),
            Strategy::Throughput {
                max_concurrency,
                rampup,
            } => (
                rampup.mul_f64(slot as f64 / *max_concurrency as f64),
                *rampup,
            ),
            _ => (Duration::ZERO, Duration::ZERO),
        }
    }

    /// The most requests in flight, if the strategy limits them.
    pub fn concurrency_limit(&self) -> Option<usize> {
        match self {
            Strategy::Synchronous => Some(1),
            Strategy::Concurrent { streams, .. } => Some(*streams),
            Strategy::Throughput {
                max_concurrency, ..
            } => Some(*max_concurrency),
            Strategy::Constant {
                max_concurrency, ..
            }
            | Strategy::Poisson {
                max_concurrency, ..
            }
            | Strategy::Replay {
                max_concurrency, ..
            } => *max_concurrency,
        }
    }

    /// For rate-based strategies, the send offsets from the benchmark start;
    /// `None` for strategies that send as soon as a slot is free, and for a
    /// replay, whose offsets come with its requests.
    pub fn schedule(&self) -> Option<Schedule> {
        match self {
            Strategy::Constant { rate, rampup, .. } => Some(Schedule::Constant {
                rate: *rate,
                rampup_s: rampup.as_secs_f64(),
                next: 0,
            }),
            Strategy::Poisson { rate, seed, .. } => Some(Schedule::Poisson {
                rate: *rate,
                rng: Box::new(rng::seeded(*seed, 0)),
                elapsed: 0.0,
            }),
            _ => None,
        }
    }

    /// A short description for progress and tables (`constant@5.00/s`).
    pub fn label(&self) -> String {
        match self {
            Strategy::Synchronous => "synchronous".into(),
            Strategy::Concurrent { streams, .. } => format!("concurrent@{streams}"),
            Strategy::Throughput {
                max_concurrency, ..
            } => format!("throughput@{max_concurrency}"),
            Strategy::Constant { rate, .. } => format!("constant@{rate:.2}/s"),
            Strategy::Poisson { rate, .. } => format!("poisson@{rate:.2}/s"),
            Strategy::Replay { time_scale, .. } => format!("replay@{time_scale}x"),
        }
    }
}

/// The send offsets of a rate-based strategy, an endless iterator.
pub enum Schedule {
    /// `i / rate`; with a ramp-up of `R` seconds the rate grows linearly
    /// from 0 over `R`, so `rate · t² / (2R)` requests are due by `t ≤ R`:
    /// request `i` is sent at `√(2iR / rate)` while `i ≤ rate · R / 2`, and
    /// at `R + (i − rate · R / 2) / rate` after.
    Constant {
        /// Requests per second.
        rate: f64,
        /// The ramp-up in seconds (0: none).
        rampup_s: f64,
        /// The next index.
        next: u64,
    },
    /// Cumulative exponential gaps.
    Poisson {
        /// Mean requests per second.
        rate: f64,
        /// The gap generator.
        rng: Box<SeededRng>,
        /// Seconds up to the previous send.
        elapsed: f64,
    },
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Schedule::Constant {
                rate,
                rampup_s,
                next,
            } => {
                write!(
                    f,
                    "Schedule::Constant {{ rate: {rate}, rampup_s: {rampup_s}, next: {next} }}"
                )
            }
            Schedule::Poisson { rate, elapsed, .. } => {
                write!(
                    f,
                    "Schedule::Poisson {{ rate: {rate}, elapsed: {elapsed} }}"
                )
            }
        }
    }
}

impl Iterator for Schedule {
    type Item = Duration;

    // Casts: request indices stay far below 2^52.
    fn next(&mut self) -> Option<Duration> {
        let secs = match self {
            Schedule::Constant {
                rate,
                rampup_s,
                next,
            } => {
                let i = *next as f64;
                *next += 1;
                let ramped = *rate * *rampup_s / 2.0;
                if *rampup_s > 0.0 && i <= ramped {
                    (2.0 * i * *rampup_s / *rate).sqrt()
                } else {
                    *rampup_s + (i - ramped) / *rate
                }
            }
            Schedule::Poisson { rate, rng, elapsed } => {
                let at = *elapsed;
                // Exponential gaps of mean 1 / rate (rate > 0 is checked
                // when the profile is built).
                *elapsed += Exp::new(*rate).map_or(f64::INFINITY, |gap| gap.sample(&mut **rng));
                at
            }
        };
        Duration::try_from_secs_f64(secs).ok()
    }
}

fn positive_int(context: &str, key: &str, value: &serde_json::Value) -> Result<usize> {
    value
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n >= 1)
        .ok_or_else(|| Error::InvalidOption {
            context: context.into(),
            key: key.into(),
            reason: format!("must be a whole number of at least 1, got {value}"),
        })
}

fn positive_rate(context: &str, value: &serde_json::Value) -> Result<f64> {
    value
        .as_f64()
        .filter(|r| r.is_finite() && *r > 0.0)
        .ok_or_else(|| Error::InvalidOption {
            context: context.into(),
            key: "rate".into(),
            reason: format!("must be a positive number of requests per second, got {value}"),
        })
}

/// The value, or each item of a list value.
fn each(value: Option<&serde_json::Value>) -> Vec<Option<&serde_json::Value>> {
    match value {
        Some(serde_json::Value::Array(items)) => items.iter().map(Some).collect(),
        other => vec![other],
    }
}

/// The default of `rampup` (none), the same for every kind that has the
/// option: help prints it and [`rampup`] applies it.
#[derive(Debug, Serialize)]
struct RampupDefaults {
    #[serde(serialize_with = "guidebench_core::options::serialize_duration")]
    rampup: Duration,
}

impl Default for RampupDefaults {
    fn default() -> Self {
        RampupDefaults {
            rampup: Duration::ZERO,
        }
    }
}

/// The defaults of the `throughput` profile's options (besides `rampup`),
/// as [`Profile::from_args`] applies them; keyed by option name.
#[derive(Debug, Serialize)]
struct ThroughputDefaults {
    max_concurrency: usize,
}

impl Default for ThroughputDefaults {
    fn default() -> Self {
        ThroughputDefaults {
            max_concurrency: 256,
        }
    }
}

/// The defaults of the `async` profile's options (besides `rampup`), as
/// [`Profile::from_args`] applies them; keyed by option name.
#[derive(Debug, Serialize)]
struct AsyncDefaults {
    strategy: RateKind,
}

impl Default for AsyncDefaults {
    fn default() -> Self {
        AsyncDefaults {
            strategy: RateKind::Constant,
        }
    }
}

/// The defaults of the `sweep` profile's options (besides `rampup`), as
/// [`Profile::from_args`] applies them; keyed by option name. Its
/// throughput run has the `throughput` profile's concurrency.
#[derive(Debug, Serialize)]
struct SweepDefaults {
    sweep_size: usize,
    max_concurrency: usize,
    strategy: RateKind,
}

impl Default for SweepDefaults {
    fn default() -> Self {
        SweepDefaults {
            sweep_size: 10,
            max_concurrency: ThroughputDefaults::default().max_concurrency,
            strategy: RateKind::Constant,
        }
    }
}

/// The defaults of the `replay` profile's options, as
/// [`Profile::from_args`] applies them; keyed by option name.
#[derive(Debug, Serialize)]
struct ReplayDefaults {
    time_scale: f64,
}

impl Default for ReplayDefaults {
    fn default() -> Self {
        ReplayDefaults { time_scale: 1.0 }
    }
}

/// The defaults of the `goodput` profile's options, keyed by option name:
/// those of [`GoodputOptions`], which [`goodput`] applies.
#[derive(Debug, Serialize)]
struct GoodputDefaults {
    target: f64,
    confidence: f64,
    initial_streams: usize,
    max_streams: usize,
    tolerance: f64,
    max_probes: usize,
    max_extensions: usize,
}

impl Default for GoodputDefaults {
    fn default() -> Self {
        let search = GoodputOptions::default();
        GoodputDefaults {
            target: search.target,
            confidence: search.confidence,
            initial_streams: search.initial,
            max_streams: search.max_level,
            tolerance: search.tolerance,
            max_probes: search.max_probes,
            max_extensions: search.max_extensions,
        }
    }
}

/// The defaults of the `knee` profile's options, as [`knee`] applies them;
/// keyed by option name.
#[derive(Debug, Serialize)]
struct KneeDefaults {
    min_streams: usize,
    count: usize,
    refine: bool,
    points_each_side: usize,
    max_step: usize,
}

impl Default for KneeDefaults {
    fn default() -> Self {
        KneeDefaults {
            min_streams: 1,
            count: 8,
            refine: false,
            points_each_side: 5,
            max_step: 5,
        }
    }
}

const RAMPUP_STREAMS: OptionSpec = OptionSpec::optional(
    "rampup",
    OptionType::Duration,
    "the streams start spread evenly over this long instead of all at once",
)
.default_from::<RampupDefaults>();
const RAMPUP_RATE: OptionSpec = OptionSpec::optional(
    "rampup",
    OptionType::Duration,
    "the rate grows linearly from 0 to its target over this long",
)
.default_from::<RampupDefaults>();
const SYNCHRONOUS: &[OptionSpec] = &[];
const CONCURRENT: &[OptionSpec] = &[
    OptionSpec::optional(
        "streams",
        OptionType::Any,
        "requests in flight (a list runs one benchmark per value)",
    )
    .required(),
    RAMPUP_STREAMS,
];
const THROUGHPUT: &[OptionSpec] = &[
    OptionSpec::optional(
        "max_concurrency",
        OptionType::Any,
        "the most requests in flight",
    )
    .default_from::<ThroughputDefaults>(),
    RAMPUP_STREAMS,
];
const CONSTANT: &[OptionSpec] = &[
    OptionSpec::optional(
        "rate",
        OptionType::Any,
        "requests per second (a list runs one benchmark per value)",
    )
    .required(),
    OptionSpec::optional(
        "max_concurrency",
        OptionType::Int,
        "the most requests in flight",
    ),
    RAMPUP_RATE,
];
const ASYNC: &[OptionSpec] = &[
    OptionSpec::optional(
        "rate",
        OptionType::Any,
        "requests per second (a list runs one benchmark per value)",
    )
    .required(),
    OptionSpec::optional(
        "strategy",
        OptionType::Choice(&["constant", "poisson"]),
        "evenly spaced sends, or exponential gaps (GuideLLM's asynchronous profile)",
    )
    .default_from::<AsyncDefaults>(),
    OptionSpec::optional(
        "max_concurrency",
        OptionType::Int,
        "the most requests in flight",
    ),
    OptionSpec::optional(
        "seed",
        OptionType::Int,
        "seed of the arrival process (poisson; default: the run's seed)",
    ),
    OptionSpec::optional(
        "rampup",
        OptionType::Duration,
        "constant only: the rate grows linearly from 0 to its target over this long",
    )
    .default_from::<RampupDefaults>(),
];
const POISSON: &[OptionSpec] = &[
    OptionSpec::optional("rate", OptionType::Any, "mean requests per second").required(),
    OptionSpec::optional(
        "seed",
        OptionType::Int,
        "seed of the arrival process (default: the run's seed)",
    ),
    OptionSpec::optional(
        "max_concurrency",
        OptionType::Int,
        "the most requests in flight",
    ),
];
const SWEEP: &[OptionSpec] = &[
    OptionSpec::optional(
        "sweep_size",
        OptionType::Int,
        "benchmarks in all: synchronous, throughput, and constant rates between",
    )
    .default_from::<SweepDefaults>(),
    OptionSpec::optional(
        "max_concurrency",
        OptionType::Int,
        "the throughput run's concurrency",
    )
    .default_from::<SweepDefaults>(),
    OptionSpec::optional(
        "strategy",
        OptionType::Choice(&["constant", "poisson"]),
        "how the rates between are sent: evenly spaced, or exponential gaps",
    )
    .default_from::<SweepDefaults>(),
    OptionSpec::optional(
        "seed",
        OptionType::Int,
        "seed of the poisson arrivals (default: the run's seed)",
    ),
    OptionSpec::optional(
        "rampup",
        OptionType::Duration,
        "the throughput run's slots start spread evenly over this long",
    )
    .default_from::<RampupDefaults>(),
];

const REPLAY: &[OptionSpec] = &[
    OptionSpec::optional(
        "time_scale",
        OptionType::Float,
        "factor on the trace's recorded offsets: 0.01 replays it 100 times faster",
    )
    .default_from::<ReplayDefaults>(),
    OptionSpec::optional(
        "max_concurrency",
        OptionType::Int,
        "the most requests in flight",
    ),
];

const GOODPUT: &[OptionSpec] = &[
    OptionSpec::optional(
        "target",
        OptionType::Float,
        "fraction of requests that must meet every objective (--slo), in (0, 1)",
    )
    .default_from::<GoodputDefaults>(),
    OptionSpec::optional(
        "confidence",
        OptionType::Float,
        "confidence of the attainment interval that decides a level",
    )
    .default_from::<GoodputDefaults>(),
    OptionSpec::optional("initial_streams", OptionType::Int, "the first level probed")
        .default_from::<GoodputDefaults>(),
    OptionSpec::optional("max_streams", OptionType::Int, "the highest level probed")
        .default_from::<GoodputDefaults>(),
    OptionSpec::optional(
        "tolerance",
        OptionType::Float,
        "stop once the bracket is within this fraction of the passing level",
    )
    .default_from::<GoodputDefaults>(),
    OptionSpec::optional(
        "max_probes",
        OptionType::Int,
        "benchmarks the search may run, re-runs included",
    )
    .default_from::<GoodputDefaults>(),
    OptionSpec::optional(
        "max_extensions",
        OptionType::Int,
        "re-runs of a level whose interval straddles the target",
    )
    .default_from::<GoodputDefaults>(),
];
const KNEE: &[OptionSpec] = &[
    OptionSpec::optional(
        "streams",
        OptionType::Any,
        "the concurrency grid, at least 5 levels (or min_streams, max_streams, count)",
    ),
    OptionSpec::optional("min_streams", OptionType::Int, "the grid's lowest level")
        .default_from::<KneeDefaults>(),
    OptionSpec::optional("max_streams", OptionType::Int, "the grid's highest level"),
    OptionSpec::optional("count", OptionType::Int, "levels in the grid, at least 5")
        .default_from::<KneeDefaults>(),
    OptionSpec::optional(
        "refine",
        OptionType::Bool,
        "run a finer grid around the knee found",
    )
    .default_from::<KneeDefaults>(),
    OptionSpec::optional(
        "points_each_side",
        OptionType::Int,
        "refinement levels on each side of the knee",
    )
    .default_from::<KneeDefaults>(),
    OptionSpec::optional(
        "max_step",
        OptionType::Int,
        "largest spacing of the refinement levels",
    )
    .default_from::<KneeDefaults>(),
];

/// Every profile kind with its options, for help output.
pub const PROFILE_KINDS: &[(&str, &[OptionSpec])] = &[
    ("async", ASYNC),
    ("concurrent", CONCURRENT),
    ("constant", CONSTANT),
    ("goodput", GOODPUT),
    ("knee", KNEE),
    ("poisson", POISSON),
    ("replay", REPLAY),
    ("sweep", SWEEP),
    ("synchronous", SYNCHRONOUS),
    ("throughput", THROUGHPUT),
];

/// How a rate is sent: evenly spaced or with exponential gaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateKind {
    /// Evenly spaced sends.
    Constant,
    /// Exponential gaps from a seeded generator.
    Poisson,
}

impl RateKind {
    /// The strategy sending `rate` this way.
    pub fn strategy(self, rate: f64, seed: u64, max_concurrency: Option<usize>) -> Strategy {
        match self {
            RateKind::Constant => Strategy::constant(rate, max_concurrency),
            RateKind::Poisson => Strategy::Poisson {
                rate,
                seed,
                max_concurrency,
            },
        }
    }
}

/// What `--profile` asks for.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Profile {
    /// Fixed strategies, one benchmark each, in order.
    Fixed {
        /// The strategies.
        strategies: Vec<Strategy>,
    },
    /// Synchronous, then throughput, then constant rates evenly spaced
    /// between the two measured rates: `sweep_size` benchmarks in all.
    Sweep {
        /// Benchmarks in all (at least 2).
        sweep_size: usize,
        /// The throughput run's concurrency.
        max_concurrency: usize,
        /// How the rates between are sent.
        strategy: RateKind,
        /// Seed of Poisson arrivals.
        seed: u64,
        /// The throughput run's ramp-up.
        #[serde(
            rename = "rampup_s",
            serialize_with = "as_seconds",
            skip_serializing_if = "Duration::is_zero"
        )]
        rampup: Duration,
    },
    /// A search over concurrency for the highest level at which the
    /// objectives' attainment reaches its target.
    Goodput {
        /// The search's settings.
        search: GoodputOptions,
    },
    /// A concurrency grid and a two-segment fit of output tokens/s
    /// against concurrency, optionally refined around the knee.
    Knee {
        /// The grid, increasing.
        streams: Vec<usize>,
        /// Whether to run a finer grid around the knee.
        refine: bool,
        /// Refinement levels on each side.
        points_each_side: usize,
        /// Largest refinement spacing.
        max_step: usize,
    },
}

impl Profile {
    /// Parses `--profile kind=…`; list values (`streams=1;4;16`) give one
    /// benchmark per value. GuideLLM's option names are read as
    /// [`super::aliases`] says.
    pub fn from_args(mut args: KindArgs, default_seed: u64) -> Result<Self> {
        let Some((_, specs)) = PROFILE_KINDS.iter().find(|(k, _)| *k == args.kind) else {
            return Err(Error::UnknownName {
                what: "profile kind",
                name: args.kind,
                available: PROFILE_KINDS.iter().map(|(k, _)| (*k).to_owned()).collect(),
            });
        };
        let context = format!("profile {}", args.kind);
        aliases::apply(Component::Profile, &args.kind, &mut args.options)?;
        check_options(&context, &[specs], &mut args.options)?;
        let o = &args.options;
        let opt_limit = |key: &str| -> Result<Option<usize>> {
            o.get(key)
                .map(|v| positive_int(&context, key, v))
                .transpose()
        };
        let rampup = rampup(&context, o.get("rampup"))?;
        let seed = o
            .get("seed")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(default_seed);
        let rates = || -> Result<Vec<f64>> {
            each(o.get("rate"))
                .into_iter()
                .map(|v| positive_rate(&context, v.unwrap_or(&serde_json::Value::Null)))
                .collect()
        };
        let strategies = match args.kind.as_str() {
            "synchronous" => vec![Strategy::Synchronous],
            "concurrent" => each(o.get("streams"))
                .into_iter()
                .map(|v| {
                    Ok(Strategy::Concurrent {
                        streams: positive_int(
                            &context,
                            "streams",
                            v.unwrap_or(&serde_json::Value::Null),
                        )?,
                        rampup,
                    })
                })
                .collect::<Result<_>>()?,
            "throughput" => each(o.get("max_concurrency"))
                .into_iter()
                .map(|v| {
                    Ok(Strategy::Throughput {
                        max_concurrency: match v {
                            Some(v) => positive_int(&context, "max_concurrency", v)?,
                            None => ThroughputDefaults::default().max_concurrency,
                        },
                        rampup,
                    })
                })
                .collect::<Result<_>>()?,
            "constant" | "async" | "poisson" => {
                let limit = opt_limit("max_concurrency")?;
                let kind = match args.kind.as_str() {
                    "poisson" => RateKind::Poisson,
                    "async" => rate_kind(o.get("strategy"), AsyncDefaults::default().strategy),
                    _ => RateKind::Constant,
                };
                if kind == RateKind::Poisson && !rampup.is_zero() {
                    return Err(Error::InvalidOption {
                        context,
                        key: "rampup".into(),
                        reason: "a ramp-up applies to constant rates, not to poisson arrivals"
                            .into(),
                    });
                }
                rates()?
                    .into_iter()
                    .map(|rate| match kind {
                        RateKind::Constant => Strategy::Constant {
                            rate,
                            max_concurrency: limit,
                            rampup,
                        },
                        RateKind::Poisson => kind.strategy(rate, seed, limit),
                    })
                    .collect()
            }
            "replay" => {
                let time_scale = match o.get("time_scale") {
                    None => ReplayDefaults::default().time_scale,
                    Some(v) => v
                        .as_f64()
                        .filter(|t| t.is_finite() && *t > 0.0)
                        .ok_or_else(|| Error::InvalidOption {
                            context: context.clone(),
                            key: "time_scale".into(),
                            reason: format!("must be a positive number, got {v}"),
                        })?,
                };
                vec![Strategy::Replay {
                    time_scale,
                    max_concurrency: opt_limit("max_concurrency")?,
                }]
            }
            "sweep" => {
                let d = SweepDefaults::default();
                let sweep_size = opt_limit("sweep_size")?.unwrap_or(d.sweep_size);
                if sweep_size < 2 {
                    return Err(Error::InvalidOption {
                        context,
                        key: "sweep_size".into(),
                        reason: format!("must be at least 2, got {sweep_size}"),
                    });
                }
                return Ok(Profile::Sweep {
                    sweep_size,
                    max_concurrency: opt_limit("max_concurrency")?.unwrap_or(d.max_concurrency),
                    strategy: rate_kind(o.get("strategy"), d.strategy),
                    seed,
                    rampup,
                });
            }
            "goodput" => return goodput(&context, o),
            "knee" => return knee(&context, o),
            _ => unreachable!("kinds come from PROFILE_KINDS"),
        };
        Ok(Profile::Fixed { strategies })
    }
}

/// The `strategy` option (`constant` or `poisson`, checked against the
/// spec's choices), or `default` when absent.
fn rate_kind(value: Option<&serde_json::Value>, default: RateKind) -> RateKind {
    match value.and_then(serde_json::Value::as_str) {
        Some("poisson") => RateKind::Poisson,
        Some(_) => RateKind::Constant,
        None => default,
    }
}

/// The `rampup` option: a non-negative time ([`RampupDefaults`] when absent).
fn rampup(context: &str, value: Option<&serde_json::Value>) -> Result<Duration> {
    let Some(value) = value else {
        return Ok(RampupDefaults::default().rampup);
    };
    value
        .as_f64()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| Error::InvalidOption {
            context: context.into(),
            key: "rampup".into(),
            reason: format!("must be a time of at least 0, like 10s, got {value}"),
        })
}

impl Profile {
    /// How many benchmarks the profile runs, when that is known before the
    /// first one (a fixed list or a sweep); `None` for searches.
    pub fn benchmarks_known(&self) -> Option<usize> {
        match self {
            Profile::Fixed { strategies } => Some(strategies.len()),
            Profile::Sweep { sweep_size, .. } => Some(*sweep_size),
            Profile::Goodput { .. } | Profile::Knee { .. } => None,
        }
    }

    /// Whether a benchmark of the profile replays its data's recorded send
    /// offsets ([`Strategy::Replay`]), so that its data must give them
    /// ([`DataItem::at`](crate::data::DataItem::at)).
    pub fn replays(&self) -> bool {
        match self {
            Profile::Fixed { strategies } => strategies
                .iter()
                .any(|strategy| matches!(strategy, Strategy::Replay { .. })),
            Profile::Sweep { .. } | Profile::Goodput { .. } | Profile::Knee { .. } => false,
        }
    }
}

fn fraction(
    context: &str,
    key: &str,
    value: Option<&serde_json::Value>,
    default: f64,
) -> Result<f64> {
    let Some(value) = value else {
        return Ok(default);
    };
    value
        .as_f64()
        .filter(|v| *v > 0.0 && *v < 1.0)
        .ok_or_else(|| Error::InvalidOption {
            context: context.into(),
            key: key.into(),
            reason: format!("must be strictly between 0 and 1, got {value}"),
        })
}

fn goodput(context: &str, o: &serde_json::Map<String, serde_json::Value>) -> Result<Profile> {
    let d = GoodputDefaults::default();
    let int = |key: &str, default: usize| -> Result<usize> {
        o.get(key)
            .map_or(Ok(default), |v| positive_int(context, key, v))
    };
    let search = GoodputOptions {
        target: fraction(context, "target", o.get("target"), d.target)?,
        confidence: fraction(context, "confidence", o.get("confidence"), d.confidence)?,
        initial: int("initial_streams", d.initial_streams)?,
        max_level: int("max_streams", d.max_streams)?,
        tolerance: match o.get("tolerance") {
            Some(v) => v
                .as_f64()
                .filter(|t| *t > 0.0 && *t <= 1.0)
                .ok_or_else(|| Error::InvalidOption {
                    context: context.into(),
                    key: "tolerance".into(),
                    reason: format!("must be in (0, 1], got {v}"),
                })?,
            None => d.tolerance,
        },
        max_probes: int("max_probes", d.max_probes)?,
        max_extensions: match o.get("max_extensions") {
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| Error::InvalidOption {
                    context: context.into(),
                    key: "max_extensions".into(),
                    reason: format!("must be a whole number, got {v}"),
                })?,
            None => d.max_extensions,
        },
    };
    if search.initial > search.max_level {
        return Err(Error::InvalidOption {
            context: context.into(),
            key: "initial_streams".into(),
            reason: format!(
                "must not exceed max_streams ({}), got {}",
                search.max_level, search.initial
            ),
        });
    }
    Ok(Profile::Goodput { search })
}

fn knee(context: &str, o: &serde_json::Map<String, serde_json::Value>) -> Result<Profile> {
    let d = KneeDefaults::default();
    let int = |key: &str| -> Result<Option<usize>> {
        o.get(key)
            .map(|v| positive_int(context, key, v))
            .transpose()
    };
    let streams = match o.get("streams") {
        Some(value) => {
            let mut levels = each(Some(value))
                .into_iter()
                .map(|v| positive_int(context, "streams", v.unwrap_or(&serde_json::Value::Null)))
                .collect::<Result<Vec<_>>>()?;
            levels.sort_unstable();
            levels.dedup();
            levels
        }
        None => {
            let Some(max) = int("max_streams")? else {
                return Err(Error::InvalidOption {
                    context: context.into(),
                    key: "streams".into(),
                    reason: "give the grid as streams=1;2;4;8;16;32 or as max_streams=N \
                             (with min_streams and count)"
                        .into(),
                });
            };
            let min = int("min_streams")?.unwrap_or(d.min_streams);
            let count = int("count")?.unwrap_or(d.count);
            if min >= max {
                return Err(Error::InvalidOption {
                    context: context.into(),
                    key: "max_streams".into(),
                    reason: format!("must exceed min_streams ({min}), got {max}"),
                });
            }
            crate::analysis::knee::grid(min, max, count)
        }
    };
    if streams.len() < 5 {
        return Err(Error::InvalidOption {
            context: context.into(),
            key: "streams".into(),
            reason: format!(
                "a knee fit needs at least 5 distinct levels, got {}",
                streams.len()
            ),
        });
    }
    Ok(Profile::Knee {
        streams,
        refine: o
            .get("refine")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(d.refine),
        points_each_side: int("points_each_side")?.unwrap_or(d.points_each_side),
        max_step: int("max_step")?.unwrap_or(d.max_step),
    })
}

/// The constant rates a sweep runs after its synchronous and throughput
/// benchmarks: `sweep_size − 2` rates evenly spaced strictly between the
/// two measured rates (requests per second).
// Casts: sweep sizes are small.
pub fn sweep_rates(synchronous_rate: f64, throughput_rate: f64, sweep_size: usize) -> Vec<f64> {
    let between = sweep_size.saturating_sub(2);
    let (lo, hi) = if synchronous_rate <= throughput_rate {
        (synchronous_rate, throughput_rate)
    } else {
        (throughput_rate, synchronous_rate)
    };
    let step = (hi - lo) / (between + 1) as f64;
    (1..=between).map(|i| lo + step * i as f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::options::parse_kind_args;

    fn profile(arg: &str) -> Result<Profile> {
        Profile::from_args(parse_kind_args(arg)?, 7)
    }

    #[test]
    fn constant_sends_at_exact_multiples_of_one_over_rate() {
        let offsets: Vec<Duration> = Strategy::constant(4.0, None)
            .schedule()
            .expect("rate based")
            .take(5)
            .collect();
        let expected: Vec<Duration> = (0..5).map(|i| Duration::from_millis(250 * i)).collect();
        assert_eq!(offsets, expected);
    }

    #[test]
    fn poisson_is_reproducible_by_seed_and_its_mean_rate_is_close() {
        let take = |seed| -> Vec<Duration> {
            Strategy::Poisson {
                rate: 50.0,
                seed,
                max_concurrency: None,
            }
            .schedule()
            .expect("rate based")
            .take(20_001)
            .collect()
        };
        let a = take(1);
        assert_eq!(a, take(1), "same seed, same arrivals");
        assert_ne!(a, take(2), "another seed, other arrivals");
        assert_eq!(a[0], Duration::ZERO);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        let mean_rate = 20_000.0 / a[20_000].as_secs_f64();
        assert!(
            (mean_rate - 50.0).abs() < 50.0 * 0.03,
            "mean rate {mean_rate}"
        );
    }

    #[test]
    fn sweep_rates_are_evenly_spaced_strictly_between_the_measured_rates() {
        let rates = sweep_rates(2.0, 12.0, 6);
        assert_eq!(rates, vec![4.0, 6.0, 8.0, 10.0]);
        assert!(sweep_rates(2.0, 12.0, 2).is_empty());
        assert_eq!(sweep_rates(12.0, 2.0, 3), vec![7.0]);
    }

    #[test]
    fn list_values_run_one_benchmark_per_value() {
        let p = profile("kind=concurrent,streams=1;4;16").expect("valid");
        assert_eq!(
            p,
            Profile::Fixed {
                strategies: vec![
                    Strategy::concurrent(1),
                    Strategy::concurrent(4),
                    Strategy::concurrent(16),
                ]
            }
        );
        let p = profile("kind=constant,rate=0.5;2,max_concurrency=8").expect("valid");
        assert!(matches!(p, Profile::Fixed { ref strategies } if strategies.len() == 2));
    }

    #[test]
    fn profile_errors_name_the_value_and_the_kinds() {
        let err = profile("kind=warp").expect_err("unknown");
        assert!(
            err.to_string().contains(
                "available: async, concurrent, constant, goodput, knee, poisson, replay, sweep, synchronous, throughput"
            ),
            "{err}"
        );
        let err = profile("kind=constant,rate=0").expect_err("zero rate");
        assert!(err.to_string().contains("rate"), "{err}");
        let err = profile("kind=concurrent").expect_err("no streams");
        assert!(err.to_string().contains("streams"), "{err}");
        let err = profile("kind=sweep,sweep_size=1").expect_err("too small");
        assert!(err.to_string().contains("sweep_size"), "{err}");
        let err = profile("kind=throughput,max_concurrency=0").expect_err("zero");
        assert!(err.to_string().contains("max_concurrency"), "{err}");
    }

    #[test]
    fn replay_takes_a_positive_time_scale_and_has_no_schedule_of_its_own() {
        let p = profile("kind=replay,time_scale=0.01").expect("valid");
        let Profile::Fixed { strategies } = p else {
            panic!("a fixed profile");
        };
        assert_eq!(
            strategies,
            vec![Strategy::Replay {
                time_scale: 0.01,
                max_concurrency: None
            }]
        );
        assert!(strategies[0].schedule().is_none());
        assert_eq!(strategies[0].label(), "replay@0.01x");
        let p = profile("kind=replay").expect("default scale");
        assert!(
            matches!(p, Profile::Fixed { ref strategies } if strategies[0] == Strategy::Replay { time_scale: 1.0, max_concurrency: None })
        );
        for bad in ["0", "-1"] {
            let err = profile(&format!("kind=replay,time_scale={bad}")).expect_err("not positive");
            assert!(err.to_string().contains("time_scale"), "{err}");
        }
    }

    #[test]
    fn poisson_takes_the_run_seed_unless_given_one() {
        let p = profile("kind=poisson,rate=3").expect("valid");
        assert!(
            matches!(p, Profile::Fixed { ref strategies } if strategies[0] == Strategy::Poisson { rate: 3.0, seed: 7, max_concurrency: None })
        );
    }

    #[test]
    fn a_ramped_constant_schedule_integrates_the_linear_rate_exactly() {
        let offsets: Vec<f64> = Strategy::Constant {
            rate: 4.0,
            max_concurrency: None,
            rampup: Duration::from_secs(3),
        }
        .schedule()
        .expect("rate based")
        .take(10)
        .map(|d| d.as_secs_f64())
        .collect();
        // 4 t² / 6 requests are due by t ≤ 3 s (6 by the end of the ramp-up),
        // then one every 250 ms.
        for (i, at) in offsets.iter().enumerate() {
            let i = i as f64;
            let want = if i <= 6.0 {
                (i * 6.0 / 4.0).sqrt()
            } else {
                3.0 + (i - 6.0) / 4.0
            };
            assert!((at - want).abs() < 1e-9, "request {i}: {at} vs {want}");
        }
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn rampup_is_an_option_of_concurrent_throughput_and_constant() {
        let p = profile("kind=concurrent,streams=2;4,rampup=10s").expect("valid");
        assert_eq!(
            p,
            Profile::Fixed {
                strategies: vec![
                    Strategy::Concurrent {
                        streams: 2,
                        rampup: Duration::from_secs(10)
                    },
                    Strategy::Concurrent {
                        streams: 4,
                        rampup: Duration::from_secs(10)
                    },
                ]
            }
        );
        let p = profile("kind=throughput,max_concurrency=8,rampup=500ms").expect("valid");
        assert!(
            matches!(p, Profile::Fixed { ref strategies } if strategies[0].rampup() == Duration::from_millis(500))
        );
        let p = profile("kind=constant,rate=5,rampup=2").expect("valid");
        assert!(
            matches!(p, Profile::Fixed { ref strategies } if strategies[0].rampup() == Duration::from_secs(2))
        );
        let err = profile("kind=poisson,rate=5,rampup=2s").expect_err("not for poisson");
        assert!(err.to_string().contains("rampup"), "{err}");
        let err = profile("kind=concurrent,streams=2,rampup=-1s").expect_err("negative");
        assert!(err.to_string().contains("rampup"), "{err}");
        let json = serde_json::to_value(Strategy::Concurrent {
            streams: 2,
            rampup: Duration::from_millis(1_500),
        })
        .expect("json");
        assert_eq!(json["rampup_s"], 1.5);
        let json = serde_json::to_value(Strategy::concurrent(2)).expect("json");
        assert!(json.get("rampup_s").is_none(), "{json}");
    }

    #[test]
    fn async_is_constant_unless_its_strategy_is_poisson() {
        let p = profile("kind=async,rate=1;2,rampup=4s").expect("valid");
        assert_eq!(
            p,
            Profile::Fixed {
                strategies: vec![
                    Strategy::Constant {
                        rate: 1.0,
                        max_concurrency: None,
                        rampup: Duration::from_secs(4)
                    },
                    Strategy::Constant {
                        rate: 2.0,
                        max_concurrency: None,
                        rampup: Duration::from_secs(4)
                    },
                ]
            }
        );
        let p = profile("kind=async,rate=3,strategy=poisson,max_concurrency=5").expect("valid");
        assert_eq!(
            p,
            Profile::Fixed {
                strategies: vec![Strategy::Poisson {
                    rate: 3.0,
                    seed: 7,
                    max_concurrency: Some(5)
                }]
            }
        );
        let err = profile("kind=async,rate=3,strategy=poisson,rampup=1s").expect_err("ramp");
        assert!(err.to_string().contains("rampup"), "{err}");
        let err = profile("kind=async,rate=3,strategy=burst").expect_err("choice");
        assert!(err.to_string().contains("strategy"), "{err}");
    }

    #[test]
    fn a_sweep_takes_a_rate_strategy_and_a_throughput_rampup() {
        let p =
            profile("kind=sweep,sweep_size=5,strategy=poisson,seed=9,rampup=3s").expect("valid");
        assert_eq!(
            p,
            Profile::Sweep {
                sweep_size: 5,
                max_concurrency: 256,
                strategy: RateKind::Poisson,
                seed: 9,
                rampup: Duration::from_secs(3),
            }
        );
        assert_eq!(p.benchmarks_known(), Some(5));
        let p = profile("kind=sweep").expect("valid");
        assert!(matches!(
            p,
            Profile::Sweep {
                strategy: RateKind::Constant,
                seed: 7,
                ..
            }
        ));
    }

    #[test]
    fn every_profile_default_help_prints_is_the_one_parsing_applies() {
        let rampup = RampupDefaults::default().rampup;
        let throughput = ThroughputDefaults::default();
        assert_eq!(
            profile("kind=throughput").expect("valid"),
            Profile::Fixed {
                strategies: vec![Strategy::Throughput {
                    max_concurrency: throughput.max_concurrency,
                    rampup,
                }]
            }
        );
        assert_eq!(
            profile("kind=async,rate=2").expect("valid"),
            Profile::Fixed {
                strategies: vec![AsyncDefaults::default().strategy.strategy(2.0, 7, None)]
            }
        );
        let sweep = SweepDefaults::default();
        assert_eq!(
            profile("kind=sweep").expect("valid"),
            Profile::Sweep {
                sweep_size: sweep.sweep_size,
                max_concurrency: sweep.max_concurrency,
                strategy: sweep.strategy,
                seed: 7,
                rampup,
            }
        );
        assert_eq!(
            profile("kind=replay").expect("valid"),
            Profile::Fixed {
                strategies: vec![Strategy::Replay {
                    time_scale: ReplayDefaults::default().time_scale,
                    max_concurrency: None,
                }]
            }
        );
        let goodput = GoodputDefaults::default();
        let Profile::Goodput { search } = profile("kind=goodput").expect("valid") else {
            panic!("a goodput search");
        };
        assert_eq!(
            (
                search.target,
                search.initial,
                search.max_level,
                search.max_probes
            ),
            (
                goodput.target,
                goodput.initial_streams,
                goodput.max_streams,
                goodput.max_probes
            )
        );
        let knee = KneeDefaults::default();
        let p = profile("kind=knee,max_streams=64").expect("valid");
        let Profile::Knee {
            streams,
            refine,
            points_each_side,
            max_step,
        } = p
        else {
            panic!("a knee grid");
        };
        assert_eq!(streams.first(), Some(&knee.min_streams));
        assert_eq!(
            streams,
            crate::analysis::knee::grid(knee.min_streams, 64, knee.count)
        );
        assert_eq!(
            (refine, points_each_side, max_step),
            (knee.refine, knee.points_each_side, knee.max_step)
        );
        let text = |kind: &str, key: &str| {
            PROFILE_KINDS
                .iter()
                .find(|(k, _)| *k == kind)
                .and_then(|(_, specs)| specs.iter().find(|s| s.name == key))
                .and_then(OptionSpec::default_text)
        };
        assert_eq!(
            text("throughput", "max_concurrency").as_deref(),
            Some("256")
        );
        assert_eq!(text("sweep", "strategy").as_deref(), Some("constant"));
        assert_eq!(text("constant", "rampup").as_deref(), Some("0s"));
        assert_eq!(text("goodput", "max_streams").as_deref(), Some("1024"));
        assert_eq!(text("knee", "refine").as_deref(), Some("false"));
        assert_eq!(
            text("poisson", "seed"),
            None,
            "the run's seed, not a fixed one"
        );
    }
}
