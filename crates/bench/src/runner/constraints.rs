//! Constraints: when a benchmark stops sending.

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use guidebench_core::options::{KindArgs, OptionSpec, OptionType, check_options};
use guidebench_core::{Error, Result};

use super::aliases::{self, Component};
use crate::analysis::saturation::{SaturationDetector, SaturationOptions, SaturationVerdict};
pub use crate::record::{SaturationMode, SaturationReport};

/// Why a benchmark stopped sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `max_requests` requests were sent.
    MaxRequests,
    /// `max_duration` passed.
    MaxDuration,
    /// `max_errors` requests failed.
    MaxErrors,
    /// The error rate over the last `window` requests exceeded `rate`.
    MaxErrorRate,
    /// The data ran out.
    DataExhausted,
    /// The over-saturation watch (in `enforce` mode) saw the in-flight
    /// count and TTFT grow without bound.
    OverSaturated,
    /// `min_requests` requests completed (successfully or not); sending
    /// went on until then, so the load never tailed off.
    MinRequests,
    /// The error rate over every request completed in the run so far (all
    /// benchmarks) exceeded `max_global_error_rate`: no further benchmark
    /// starts.
    MaxGlobalErrorRate,
    /// The user interrupted the run.
    Interrupted,
}

/// The error-rate constraint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ErrorRate {
    /// The largest tolerated fraction of errors, in [0, 1].
    pub rate: f64,
    /// How many of the latest completed requests the rate is taken over.
    pub window: usize,
}

/// The global error-rate constraint: the error rate over every request
/// completed in the run so far, every benchmark included.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GlobalErrorRate {
    /// The largest tolerated fraction of errors, in [0, 1].
    pub rate: f64,
    /// Requests that must have completed in the run before the rate is judged.
    pub min_requests: u64,
    /// Requests completed by the run's earlier benchmarks (set by the
    /// session before each benchmark).
    #[serde(skip)]
    pub earlier_completed: u64,
    /// Of them, errors.
    #[serde(skip)]
    pub earlier_errors: u64,
}

impl GlobalErrorRate {
    /// Whether `errors` out of `completed` requests (the whole run's)
    /// exceed the rate, once enough requests completed.
    // Casts: counts far below 2^52.
    pub fn exceeded(&self, completed: u64, errors: u64) -> bool {
        completed > 0
            && completed >= self.min_requests
            && errors as f64 / completed as f64 > self.rate
    }
}

/// Every constraint of a benchmark; each applies per benchmark.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Constraints {
    /// Stop sending after this many requests.
    pub max_requests: Option<u64>,
    /// Stop sending after this long.
    pub max_duration: Option<Duration>,
    /// Stop once this many requests failed.
    pub max_errors: Option<u64>,
    /// Stop once the recent error rate exceeds a bound.
    pub max_error_rate: Option<ErrorRate>,
    /// Watch for a run that only measures a growing queue.
    pub over_saturation: Option<OverSaturation>,
    /// Stop once this many requests completed (sending continues until
    /// then; requests still in flight get the grace period).
    pub min_requests: Option<u64>,
    /// Stop this benchmark, and the run, once the error rate over the
    /// whole run exceeds a bound.
    pub max_global_error_rate: Option<GlobalErrorRate>,
}

/// The over-saturation constraint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OverSaturation {
    /// What a verdict does.
    pub mode: SaturationMode,
    /// The detector's settings.
    pub options: SaturationOptions,
}

/// The detector and what it concluded, during one benchmark.
#[derive(Debug)]
struct SaturationWatch {
    mode: SaturationMode,
    detector: SaturationDetector,
    fired: Option<SaturationVerdict>,
}

/// The defaults of the `over_saturation` constraint's options, keyed by
/// option name: enforce mode and the detector's [`SaturationOptions`],
/// which [`over_saturation`] applies.
#[derive(Debug, Serialize)]
struct OverSaturationDefaults {
    mode: SaturationMode,
    #[serde(serialize_with = "guidebench_core::options::serialize_seconds")]
    min_duration: f64,
    #[serde(serialize_with = "guidebench_core::options::serialize_seconds")]
    window: f64,
    #[serde(serialize_with = "guidebench_core::options::serialize_seconds")]
    bin: f64,
    min_bins: usize,
    confidence: f64,
}

impl Default for OverSaturationDefaults {
    fn default() -> Self {
        let detector = SaturationOptions::default();
        OverSaturationDefaults {
            mode: SaturationMode::Enforce,
            min_duration: detector.min_duration_s,
            window: detector.window_s,
            bin: detector.bin_s,
            min_bins: detector.min_bins,
            confidence: detector.confidence,
        }
    }
}

/// The defaults of the `max_error_rate` constraint's options, as
/// [`Constraints::from_args`] applies them; keyed by option name.
#[derive(Debug, Serialize)]
struct ErrorRateDefaults {
    window: usize,
}

impl Default for ErrorRateDefaults {
    fn default() -> Self {
        ErrorRateDefaults { window: 30 }
    }
}

/// The defaults of the `max_global_error_rate` constraint's options, as
/// [`Constraints::from_args`] applies them; keyed by option name.
#[derive(Debug, Serialize)]
struct GlobalErrorRateDefaults {
    min_requests: u64,
}

impl Default for GlobalErrorRateDefaults {
    fn default() -> Self {
        GlobalErrorRateDefaults { min_requests: 30 }
    }
}

const OVER_SATURATION: &[OptionSpec] = &[
    OptionSpec::optional(
        "mode",
        OptionType::Choice(&["monitor", "enforce"]),
        "monitor reports when it fired; enforce also stops sending",
    )
    .default_from::<OverSaturationDefaults>(),
    OptionSpec::optional(
        "min_duration",
        OptionType::Duration,
        "no verdict before this long into a benchmark",
    )
    .default_from::<OverSaturationDefaults>(),
    OptionSpec::optional(
        "window",
        OptionType::Duration,
        "the latest stretch of the run the slopes are fitted over",
    )
    .default_from::<OverSaturationDefaults>(),
    OptionSpec::optional(
        "bin",
        OptionType::Duration,
        "samples are averaged per bin; the tests count bins, not requests",
    )
    .default_from::<OverSaturationDefaults>(),
    OptionSpec::optional(
        "min_bins",
        OptionType::Int,
        "bins needed before a slope is tested",
    )
    .default_from::<OverSaturationDefaults>(),
    OptionSpec::optional(
        "confidence",
        OptionType::Float,
        "confidence that both slopes are positive",
    )
    .default_from::<OverSaturationDefaults>(),
];
const MAX_REQUESTS: &[OptionSpec] = &[OptionSpec::optional(
    "count",
    OptionType::Int,
    "requests to send (a list: one value per benchmark)",
)
.required()];
const MIN_REQUESTS: &[OptionSpec] = &[OptionSpec::optional(
    "count",
    OptionType::Int,
    "stop once this many requests completed, sending until then (a list: one per benchmark)",
)
.required()];
const MAX_DURATION: &[OptionSpec] = &[OptionSpec::optional(
    "seconds",
    OptionType::Duration,
    "how long to send (a list: one value per benchmark)",
)
.required()];
const MAX_ERRORS: &[OptionSpec] = &[OptionSpec::optional(
    "count",
    OptionType::Int,
    "errors tolerated (a list: one value per benchmark)",
)
.required()];
const MAX_GLOBAL_ERROR_RATE: &[OptionSpec] = &[
    OptionSpec::optional(
        "rate",
        OptionType::Float,
        "largest tolerated error fraction over the whole run, 0 to 1",
    )
    .required(),
    OptionSpec::optional(
        "min_requests",
        OptionType::Int,
        "requests completed in the run before the rate is judged",
    )
    .default_from::<GlobalErrorRateDefaults>(),
];
const MAX_ERROR_RATE: &[OptionSpec] = &[
    OptionSpec::optional(
        "rate",
        OptionType::Float,
        "largest tolerated error fraction, 0 to 1 (a list: one value per benchmark)",
    )
    .required(),
    OptionSpec::optional(
        "window",
        OptionType::Int,
        "latest requests the rate is taken over",
    )
    .default_from::<ErrorRateDefaults>(),
];

/// Every constraint kind with its options, for help output.
pub const CONSTRAINT_KINDS: &[(&str, &[OptionSpec])] = &[
    ("max_duration", MAX_DURATION),
    ("max_error_rate", MAX_ERROR_RATE),
    ("max_errors", MAX_ERRORS),
    ("max_global_error_rate", MAX_GLOBAL_ERROR_RATE),
    ("max_requests", MAX_REQUESTS),
    ("min_requests", MIN_REQUESTS),
    ("over_saturation", OVER_SATURATION),
];

fn count(context: &str, value: Option<&serde_json::Value>) -> Result<u64> {
    value
        .and_then(serde_json::Value::as_u64)
        .filter(|&n| n >= 1)
        .ok_or_else(|| Error::InvalidOption {
            context: context.into(),
            key: "count".into(),
            reason: format!(
                "must be a whole number of at least 1, got {}",
                value.map_or_else(|| "nothing".to_owned(), ToString::to_string)
            ),
        })
}

fn over_saturation(
    context: &str,
    o: &serde_json::Map<String, serde_json::Value>,
) -> Result<OverSaturation> {
    let d = OverSaturationDefaults::default();
    let invalid = |key: &str, reason: String| Error::InvalidOption {
        context: context.into(),
        key: key.into(),
        reason,
    };
    let seconds = |key: &str, default: f64, positive: bool| -> Result<f64> {
        let Some(value) = o.get(key) else {
            return Ok(default);
        };
        value
            .as_f64()
            .filter(|s| s.is_finite() && (*s > 0.0 || (!positive && *s >= 0.0)))
            .ok_or_else(|| invalid(key, format!("must be a positive time, got {value}")))
    };
    let options = SaturationOptions {
        min_duration_s: seconds("min_duration", d.min_duration, false)?,
        window_s: seconds("window", d.window, true)?,
        bin_s: seconds("bin", d.bin, true)?,
        min_bins: match o.get("min_bins") {
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n >= 3)
                .ok_or_else(|| invalid("min_bins", format!("must be at least 3, got {v}")))?,
            None => d.min_bins,
        },
        confidence: match o.get("confidence") {
            Some(v) => v.as_f64().filter(|c| *c > 0.0 && *c < 1.0).ok_or_else(|| {
                invalid(
                    "confidence",
                    format!("must be strictly between 0 and 1, got {v}"),
                )
            })?,
            None => d.confidence,
        },
    };
    if options.window_s < options.bin_s * 3.0 {
        return Err(invalid(
            "window",
            format!(
                "must hold at least 3 bins of {} s, got {} s",
                options.bin_s, options.window_s
            ),
        ));
    }
    let mode = match o.get("mode").and_then(serde_json::Value::as_str) {
        Some("monitor") => SaturationMode::Monitor,
        Some(_) => SaturationMode::Enforce,
        None => d.mode,
    };
    Ok(OverSaturation { mode, options })
}

type Options = serde_json::Map<String, serde_json::Value>;

/// The value of each list-valued option for benchmark `index` (the last
/// value repeats), and how many values the longest list has, with its key.
fn at_index(
    context: &str,
    options: &serde_json::Map<String, serde_json::Value>,
    index: usize,
) -> Result<(Options, Option<(String, usize)>)> {
    let mut longest: Option<(String, usize)> = None;
    let mut resolved = serde_json::Map::new();
    for (key, value) in options {
        let value = match value {
            serde_json::Value::Array(items) => {
                let Some(last) = items.len().checked_sub(1) else {
                    return Err(Error::InvalidOption {
                        context: context.into(),
                        key: key.clone(),
                        reason: "the list is empty".into(),
                    });
                };
                if longest.as_ref().is_none_or(|(_, n)| items.len() > *n) {
                    longest = Some((key.clone(), items.len()));
                }
                items[index.min(last)].clone()
            }
            other => other.clone(),
        };
        resolved.insert(key.clone(), value);
    }
    Ok((resolved, longest))
}

/// The constraints of every benchmark of a run. A list value
/// (`count=100;200;400`) gives one value per benchmark: the i-th benchmark
/// takes the i-th value, and the last value repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstraintPlan {
    /// The constraints of benchmark 0, 1, … up to the longest list
    /// (never empty; later benchmarks take the last).
    per_benchmark: Vec<Constraints>,
    /// Each option given a list: the constraint kind, the key, its length.
    lists: Vec<(String, String, usize)>,
}

impl Default for ConstraintPlan {
    fn default() -> Self {
        ConstraintPlan {
            per_benchmark: vec![Constraints::default()],
            lists: Vec::new(),
        }
    }
}

impl Serialize for ConstraintPlan {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        if self.lists.is_empty() {
            self.per_benchmark[0].serialize(s)
        } else {
            self.per_benchmark.serialize(s)
        }
    }
}

impl ConstraintPlan {
    /// Parses every `--constraint kind=…`, list values included, and
    /// GuideLLM's option names as [`super::aliases`] says.
    ///
    /// # Errors
    ///
    /// An unknown kind or option, or a value out of range, naming the
    /// constraint and the key.
    pub fn from_args(args: impl IntoIterator<Item = KindArgs>) -> Result<Self> {
        let mut args: Vec<KindArgs> = args.into_iter().collect();
        for arg in &mut args {
            aliases::apply(Component::Constraint, &arg.kind, &mut arg.options)?;
        }
        // The same kind twice would leave one of them unused: refused.
        for (i, arg) in args.iter().enumerate() {
            if let Some(first) = args[..i].iter().find(|a| a.kind == arg.kind) {
                return Err(Error::InvalidOption {
                    context: format!("constraint {}", arg.kind),
                    key: "kind".into(),
                    reason: format!(
                        "given twice ({} and {}): give it once; a list (count=4;10) gives one \
                         value per benchmark",
                        options_text(&first.options),
                        options_text(&arg.options)
                    ),
                });
            }
        }
        let mut lists = Vec::new();
        for arg in &args {
            let (_, longest) = at_index(&format!("constraint {}", arg.kind), &arg.options, 0)?;
            if let Some((key, n)) = longest
                && n > 1
            {
                lists.push((arg.kind.clone(), key, n));
            }
        }
        let benchmarks = lists.iter().map(|(_, _, n)| *n).max().unwrap_or(1);
        let per_benchmark = (0..benchmarks)
            .map(|index| Constraints::parse_at(&args, index))
            .collect::<Result<Vec<_>>>()?;
        Ok(ConstraintPlan {
            per_benchmark,
            lists,
        })
    }

    /// The constraints of benchmark `index` (from 0).
    pub fn for_benchmark(&self, index: usize) -> &Constraints {
        &self.per_benchmark[index.min(self.per_benchmark.len() - 1)]
    }

    /// Checks that no list is longer than the benchmarks the profile runs,
    /// when that number is known up front.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming the constraint and its key.
    pub fn check_benchmarks(&self, benchmarks: Option<usize>) -> Result<()> {
        let Some(benchmarks) = benchmarks else {
            return Ok(());
        };
        match self.lists.iter().find(|(_, _, n)| *n > benchmarks) {
            Some((kind, key, n)) => Err(Error::InvalidOption {
                context: format!("constraint {kind}"),
                key: key.clone(),
                reason: format!(
                    "gives {n} values, one per benchmark, but the profile runs {benchmarks} \
                     benchmark{}",
                    if benchmarks == 1 { "" } else { "s" }
                ),
            }),
            None => Ok(()),
        }
    }
}

/// A constraint's options as `key=value,…`, for an error.
fn options_text(options: &serde_json::Map<String, serde_json::Value>) -> String {
    let text: Vec<String> = options
        .iter()
        .map(|(key, value)| match value {
            serde_json::Value::String(s) => format!("{key}={s}"),
            other => format!("{key}={other}"),
        })
        .collect();
    if text.is_empty() {
        "no options".to_owned()
    } else {
        text.join(",")
    }
}

impl Constraints {
    /// Parses every `--constraint kind=…` of a run with one benchmark.
    ///
    /// # Errors
    ///
    /// As [`ConstraintPlan::from_args`], and a list value (one value per
    /// benchmark takes a [`ConstraintPlan`]).
    pub fn from_args(args: impl IntoIterator<Item = KindArgs>) -> Result<Self> {
        let plan = ConstraintPlan::from_args(args)?;
        if let Some((kind, key, _)) = plan.lists.first() {
            return Err(Error::InvalidOption {
                context: format!("constraint {kind}"),
                key: key.clone(),
                reason: "a list gives one value per benchmark; this run has one".into(),
            });
        }
        Ok(plan.per_benchmark[0].clone())
    }

    /// The constraints of benchmark `index`: each list value resolved.
    fn parse_at(args: &[KindArgs], index: usize) -> Result<Self> {
        let mut constraints = Constraints::default();
        for arg in args {
            let Some((_, specs)) = CONSTRAINT_KINDS.iter().find(|(k, _)| *k == arg.kind) else {
                return Err(Error::UnknownName {
                    what: "constraint kind",
                    name: arg.kind.clone(),
                    available: CONSTRAINT_KINDS
                        .iter()
                        .map(|(k, _)| (*k).to_owned())
                        .collect(),
                });
            };
            let context = format!("constraint {}", arg.kind);
            let (mut options, _) = at_index(&context, &arg.options, index)?;
            check_options(&context, &[specs], &mut options)?;
            let o = &options;
            match arg.kind.as_str() {
                "max_requests" => constraints.max_requests = Some(count(&context, o.get("count"))?),
                "min_requests" => constraints.min_requests = Some(count(&context, o.get("count"))?),
                "max_errors" => constraints.max_errors = Some(count(&context, o.get("count"))?),
                "max_duration" => {
                    let secs = o
                        .get("seconds")
                        .and_then(serde_json::Value::as_f64)
                        .unwrap_or(0.0);
                    let duration = Duration::try_from_secs_f64(secs)
                        .ok()
                        .filter(|d| !d.is_zero())
                        .ok_or_else(|| Error::InvalidOption {
                            context: context.clone(),
                            key: "seconds".into(),
                            reason: format!("must be positive, got {secs}"),
                        })?;
                    constraints.max_duration = Some(duration);
                }
                "max_error_rate" | "max_global_error_rate" => {
                    let rate = o
                        .get("rate")
                        .and_then(serde_json::Value::as_f64)
                        .unwrap_or(-1.0);
                    if !(0.0..=1.0).contains(&rate) {
                        return Err(Error::InvalidOption {
                            context,
                            key: "rate".into(),
                            reason: format!("must be between 0 and 1, got {rate}"),
                        });
                    }
                    if arg.kind == "max_global_error_rate" {
                        let min_requests = match o.get("min_requests") {
                            Some(v) => v.as_u64().ok_or_else(|| Error::InvalidOption {
                                context: context.clone(),
                                key: "min_requests".into(),
                                reason: format!("must be a whole number, got {v}"),
                            })?,
                            None => GlobalErrorRateDefaults::default().min_requests,
                        };
                        constraints.max_global_error_rate = Some(GlobalErrorRate {
                            rate,
                            min_requests,
                            earlier_completed: 0,
                            earlier_errors: 0,
                        });
                    } else {
                        let window = match o.get("window") {
                            Some(v) => {
                                usize::try_from(count(&context, Some(v))?).unwrap_or(usize::MAX)
                            }
                            None => ErrorRateDefaults::default().window,
                        };
                        constraints.max_error_rate = Some(ErrorRate { rate, window });
                    }
                }
                "over_saturation" => {
                    constraints.over_saturation = Some(over_saturation(&context, o)?);
                }
                _ => unreachable!("kinds come from CONSTRAINT_KINDS"),
            }
        }
        Ok(constraints)
    }

    /// Whether nothing would ever stop a benchmark with endless data.
    pub fn is_unbounded(&self) -> bool {
        self.max_requests.is_none() && self.max_duration.is_none() && self.min_requests.is_none()
    }
}

/// The running state of the constraints during one benchmark.
#[derive(Debug, Default)]
pub struct ConstraintState {
    sent: u64,
    completed: u64,
    errors: u64,
    recent: VecDeque<bool>,
    recent_errors: usize,
    saturation: Option<SaturationWatch>,
}

impl ConstraintState {
    /// A fresh state for `constraints`, watching for over-saturation if
    /// they ask to.
    pub fn new(constraints: &Constraints) -> Self {
        ConstraintState {
            saturation: constraints.over_saturation.map(|o| SaturationWatch {
                mode: o.mode,
                detector: SaturationDetector::new(o.options),
                fired: None,
            }),
            ..ConstraintState::default()
        }
    }

    /// Records that a request was sent `at_s` seconds into the benchmark
    /// with `in_flight` requests then in flight (itself included).
    pub fn on_started(&mut self, at_s: f64, in_flight: usize) {
        if let Some(watch) = &mut self.saturation {
            watch.detector.on_send(at_s, in_flight);
        }
    }

    /// Records the end of a request sent at `sent_s` (with its TTFT, if it
    /// had a first token) at `now_s`; returns [`StopReason::OverSaturated`]
    /// once the watch fires in `enforce` mode.
    pub fn on_ended(&mut self, sent_s: f64, ttft_s: Option<f64>, now_s: f64) -> Option<StopReason> {
        let watch = self.saturation.as_mut()?;
        if let Some(ttft) = ttft_s {
            watch.detector.on_first_token(sent_s, ttft);
        }
        if watch.fired.is_some() {
            return None;
        }
        let verdict = watch.detector.check(now_s)?;
        tracing::warn!(at_s = verdict.at_s, reason = %verdict.reason, "over-saturation");
        watch.fired = Some(verdict);
        (watch.mode == SaturationMode::Enforce).then_some(StopReason::OverSaturated)
    }

    /// What the over-saturation watch saw, if there was one.
    pub fn saturation_report(&self) -> Option<SaturationReport> {
        self.saturation.as_ref().map(|watch| SaturationReport {
            mode: watch.mode,
            fired: watch.fired.clone(),
            last: watch.detector.state(),
        })
    }

    /// Whether another request may be sent, `elapsed` into the benchmark.
    pub fn may_send(&self, constraints: &Constraints, elapsed: Duration) -> Result<(), StopReason> {
        if constraints.max_requests.is_some_and(|n| self.sent >= n) {
            return Err(StopReason::MaxRequests);
        }
        if constraints.max_duration.is_some_and(|d| elapsed >= d) {
            return Err(StopReason::MaxDuration);
        }
        Ok(())
    }

    /// Records a send.
    pub fn on_send(&mut self) {
        self.sent += 1;
    }

    /// Requests sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Records a completed request; returns why to stop, if a limit on
    /// errors or on completed requests was reached.
    // Casts: window sizes are small.
    pub fn on_complete(&mut self, constraints: &Constraints, failed: bool) -> Option<StopReason> {
        self.completed += 1;
        if failed {
            self.errors += 1;
        }
        if constraints.max_errors.is_some_and(|n| self.errors >= n) {
            return Some(StopReason::MaxErrors);
        }
        if let Some(global) = constraints.max_global_error_rate
            && global.exceeded(
                global.earlier_completed + self.completed,
                global.earlier_errors + self.errors,
            )
        {
            return Some(StopReason::MaxGlobalErrorRate);
        }
        if let Some(ErrorRate { rate, window }) = constraints.max_error_rate {
            self.recent.push_back(failed);
            self.recent_errors += usize::from(failed);
            if self.recent.len() > window && self.recent.pop_front() == Some(true) {
                self.recent_errors -= 1;
            }
            if self.recent.len() == window && self.recent_errors as f64 / window as f64 > rate {
                return Some(StopReason::MaxErrorRate);
            }
        }
        if constraints
            .min_requests
            .is_some_and(|n| self.completed >= n)
        {
            return Some(StopReason::MinRequests);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::options::parse_kind_args;

    fn constraints(args: &[&str]) -> Result<Constraints> {
        Constraints::from_args(
            args.iter()
                .map(|a| parse_kind_args(a))
                .collect::<Result<Vec<_>>>()?,
        )
    }

    #[test]
    fn the_same_constraint_kind_given_twice_is_refused_naming_both() {
        let err = constraints(&["kind=max_requests,count=4", "kind=max_requests,count=10"])
            .expect_err("one of them would be dropped");
        assert!(err.is_usage(), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("max_requests") && text.contains("count=4") && text.contains("count=10"),
            "{text}"
        );
        // Two kinds, and one kind with a list, are fine.
        assert!(constraints(&["kind=max_requests,count=4", "kind=max_errors,count=1"]).is_ok());
    }

    #[test]
    fn max_requests_stops_sending_after_count() {
        let c = constraints(&["kind=max_requests,count=3"]).expect("valid");
        let mut s = ConstraintState::default();
        for _ in 0..3 {
            assert!(s.may_send(&c, Duration::ZERO).is_ok());
            s.on_send();
        }
        assert_eq!(s.may_send(&c, Duration::ZERO), Err(StopReason::MaxRequests));
    }

    #[test]
    fn max_duration_stops_sending_once_elapsed() {
        let c = constraints(&["kind=max_duration,seconds=2s"]).expect("valid");
        let s = ConstraintState::default();
        assert!(s.may_send(&c, Duration::from_millis(1_999)).is_ok());
        assert_eq!(
            s.may_send(&c, Duration::from_secs(2)),
            Err(StopReason::MaxDuration)
        );
    }

    #[test]
    fn max_errors_stops_at_the_nth_error() {
        let c = constraints(&["kind=max_errors,count=2"]).expect("valid");
        let mut s = ConstraintState::default();
        assert_eq!(s.on_complete(&c, true), None);
        assert_eq!(s.on_complete(&c, false), None);
        assert_eq!(s.on_complete(&c, true), Some(StopReason::MaxErrors));
    }

    #[test]
    fn max_error_rate_waits_for_a_full_window_then_stops_above_the_rate() {
        let c = constraints(&["kind=max_error_rate,rate=0.5,window=4"]).expect("valid");
        let mut s = ConstraintState::default();
        // 3 errors out of 3: the window is not full yet.
        for _ in 0..3 {
            assert_eq!(s.on_complete(&c, true), None);
        }
        // 3 of 4 > 0.5.
        assert_eq!(s.on_complete(&c, false), Some(StopReason::MaxErrorRate));

        let mut s = ConstraintState::default();
        for failed in [true, false, true, false, true, false] {
            assert_eq!(s.on_complete(&c, failed), None, "exactly half is tolerated");
        }
    }

    #[test]
    fn constraint_errors_are_clear() {
        let err = constraints(&["kind=max_tokens,count=1"]).expect_err("unknown");
        assert!(
            err.to_string().contains(
                "available: max_duration, max_error_rate, max_errors, max_global_error_rate, \
                 max_requests, min_requests, over_saturation"
            ),
            "{err}"
        );
        let err = constraints(&["kind=over_saturation,window=1s"]).expect_err("too short");
        assert!(err.to_string().contains("window"), "{err}");
        let err = constraints(&["kind=max_requests,count=0"]).expect_err("zero");
        assert!(err.to_string().contains("count"), "{err}");
        let err = constraints(&["kind=max_error_rate,rate=2"]).expect_err("rate");
        assert!(err.to_string().contains("between 0 and 1"), "{err}");
        let err = constraints(&["kind=max_duration,seconds=0"]).expect_err("zero");
        assert!(err.to_string().contains("positive"), "{err}");
    }

    fn plan(args: &[&str]) -> Result<ConstraintPlan> {
        ConstraintPlan::from_args(
            args.iter()
                .map(|a| parse_kind_args(a))
                .collect::<Result<Vec<_>>>()?,
        )
    }

    #[test]
    fn a_list_value_gives_the_ith_benchmark_the_ith_value_and_the_last_repeats() {
        let p = plan(&[
            "kind=max_requests,count=100;200;400",
            "kind=max_duration,seconds=10s;20s",
            "kind=max_errors,count=5",
        ])
        .expect("valid");
        let at = |i| {
            let c = p.for_benchmark(i);
            (
                c.max_requests,
                c.max_duration.map(|d| d.as_secs()),
                c.max_errors,
            )
        };
        assert_eq!(at(0), (Some(100), Some(10), Some(5)));
        assert_eq!(at(1), (Some(200), Some(20), Some(5)));
        assert_eq!(at(2), (Some(400), Some(20), Some(5)));
        assert_eq!(
            at(7),
            (Some(400), Some(20), Some(5)),
            "the last value repeats"
        );
        let json = serde_json::to_value(&p).expect("json");
        assert_eq!(json.as_array().map(Vec::len), Some(3), "{json}");
    }

    #[test]
    fn a_list_longer_than_the_benchmarks_known_up_front_names_the_constraint() {
        let p = plan(&["kind=max_requests,count=100;200;400"]).expect("valid");
        assert!(p.check_benchmarks(Some(3)).is_ok());
        assert!(
            p.check_benchmarks(None).is_ok(),
            "searches decide as they go"
        );
        let err = p.check_benchmarks(Some(2)).expect_err("too long");
        let message = err.to_string();
        assert!(message.contains("constraint max_requests"), "{message}");
        assert!(message.contains("count"), "{message}");
        assert!(message.contains("3 values"), "{message}");
        let err = plan(&["kind=max_requests,count=100;0"]).expect_err("each value is checked");
        assert!(err.to_string().contains("count"), "{err}");
        let err = constraints(&["kind=max_requests,count=1;2"]).expect_err("one benchmark");
        assert!(err.to_string().contains("count"), "{err}");
    }

    #[test]
    fn min_requests_stops_once_that_many_requests_completed_failed_or_not() {
        let c = constraints(&["kind=min_requests,count=3"]).expect("valid");
        assert!(!c.is_unbounded());
        let mut s = ConstraintState::default();
        for _ in 0..10 {
            s.on_send();
        }
        assert!(
            s.may_send(&c, Duration::ZERO).is_ok(),
            "sends are not counted"
        );
        assert_eq!(s.on_complete(&c, false), None);
        assert_eq!(s.on_complete(&c, true), None);
        assert_eq!(s.on_complete(&c, false), Some(StopReason::MinRequests));
    }

    #[test]
    fn the_global_error_rate_waits_for_its_minimum_then_stops_above_the_rate() {
        let c =
            constraints(&["kind=max_global_error_rate,rate=0.25,min_requests=4"]).expect("valid");
        let global = c.max_global_error_rate.expect("set");
        assert_eq!((global.rate, global.min_requests), (0.25, 4));
        let mut s = ConstraintState::default();
        // Two errors of three: above the rate, but fewer than 4 completed.
        assert_eq!(s.on_complete(&c, true), None);
        assert_eq!(s.on_complete(&c, true), None);
        assert_eq!(s.on_complete(&c, false), None);
        assert_eq!(
            s.on_complete(&c, false),
            Some(StopReason::MaxGlobalErrorRate),
            "2 of 4 > 25 %"
        );
        assert!(!global.exceeded(8, 2), "exactly the rate is tolerated");
        assert!(global.exceeded(8, 3));
        let c = constraints(&["kind=max_global_error_rate,rate=0.1"]).expect("valid");
        assert_eq!(c.max_global_error_rate.map(|g| g.min_requests), Some(30));
    }

    #[test]
    fn every_constraint_default_help_prints_is_the_one_parsing_applies() {
        let c = constraints(&["kind=over_saturation"]).expect("valid");
        let d = OverSaturationDefaults::default();
        let watch = c.over_saturation.expect("set");
        assert_eq!(watch.mode, d.mode);
        assert_eq!(
            (
                watch.options.min_duration_s,
                watch.options.window_s,
                watch.options.bin_s,
                watch.options.min_bins,
                watch.options.confidence
            ),
            (d.min_duration, d.window, d.bin, d.min_bins, d.confidence)
        );
        let c = constraints(&["kind=max_error_rate,rate=0.5"]).expect("valid");
        assert_eq!(
            c.max_error_rate.map(|r| r.window),
            Some(ErrorRateDefaults::default().window)
        );
        let c = constraints(&["kind=max_global_error_rate,rate=0.5"]).expect("valid");
        assert_eq!(
            c.max_global_error_rate.map(|g| g.min_requests),
            Some(GlobalErrorRateDefaults::default().min_requests)
        );
        let text = |kind: &str, key: &str| {
            CONSTRAINT_KINDS
                .iter()
                .find(|(k, _)| *k == kind)
                .and_then(|(_, specs)| specs.iter().find(|s| s.name == key))
                .and_then(OptionSpec::default_text)
        };
        assert_eq!(text("over_saturation", "mode").as_deref(), Some("enforce"));
        assert_eq!(
            text("over_saturation", "min_duration").as_deref(),
            Some("30s")
        );
        assert_eq!(text("over_saturation", "bin").as_deref(), Some("1s"));
        assert_eq!(
            text("over_saturation", "confidence").as_deref(),
            Some("0.95")
        );
        assert_eq!(text("max_error_rate", "window").as_deref(), Some("30"));
        assert_eq!(
            text("max_global_error_rate", "min_requests").as_deref(),
            Some("30")
        );
    }
}
