//! GuideLLM's report files (`benchmarks.json`) read as guidebench reports,
//! so `export` and `compare` open them beside guidebench's own.
//!
//! The schema is GuideLLM 0.8.1's `GenerativeBenchmarksReport` (report
//! schema version 2): `metadata` (`version`, `guidellm_version`, ...),
//! `config` (the scenario that ran), `benchmarks` (each with its
//! `config.strategy`, `scheduler_metrics`, `metrics` of status-split
//! distributions, and `requests` split into `successful`, `errored` and
//! `incomplete`). A file is recognised by those top-level keys, never by
//! its name ([`is_guidellm_report`]).
//!
//! What converts ([`from_guidellm`]):
//!
//! - each benchmark, named as guidebench names the same strategy
//!   (`synchronous`, `concurrent@2`, `throughput@8`, `constant@4.00/s`,
//!   `poisson@4.00/s`, `replay@1x`) so that `compare` pairs it with a
//!   guidebench run of the same load, its profile in guidebench's form,
//!   and its measured window;
//! - the metrics are GuideLLM's own numbers, computed by GuideLLM from
//!   every request: request counts, latency, TTFT, ITL per request (its
//!   `inter_token_latency_ms`), TPOT, prompt, output and total tokens
//!   (count, mean, median, min, max, standard deviation, percentiles and,
//!   at 95 % confidence, the intervals GuideLLM gives), requests/s, output
//!   and total tokens/s and mean concurrency (the means of its rate and
//!   concurrency distributions over the window), the dispatch delay;
//! - the per-request records GuideLLM kept (all of them unless its
//!   `sample_size` thinned them): times, token counts, output text, the
//!   error of a failed request (labelled from its exception: `http_status`
//!   with the status, `timeout`, `connection`), the turn of a conversation;
//!   requests outside the window are kept as warm-up or cool-down.
//!
//! What cannot be carried is left out, and the converted report says so
//! under `environment.backend.guidellm.notes`: GuideLLM keeps each
//! request's first and last token time only (the records space the tokens
//! between them evenly, and ITL per gap stays empty), and it has no
//! counterpart of several guidebench fields (client footprint, finish
//! reasons).

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::metrics::{AudioMetrics, BenchmarkMetrics, StatusMetrics, audio_seconds_per_s};
use super::model::{BenchmarkReport, Environment, Report};
use crate::analysis::stats::Interval;
use crate::metrics::{CONFIDENCE, Distribution};
use crate::record::{CompactRecords, CompactTurn, Excluded};
use crate::{Error, Result};
use guidebench_core::clock::Timestamp;
use guidebench_core::request::{
    AudioStats, RequestError, RequestRecord, RequestStatus, RequestTimings,
};

/// The GuideLLM report schema version this build reads (the one GuideLLM
/// 0.8.1 writes).
pub const GUIDELLM_SCHEMA_VERSION: u64 = 2;

/// The most token instants a converted record spaces out; a longer answer
/// keeps its output token count but only this many instants.
const MAX_INSTANTS: u32 = 1 << 20;

/// Whether `value` is a report written by GuideLLM: an object without
/// guidebench's `schema_version`, with a `benchmarks` list and either a
/// `metadata` object naming `guidellm_version` or benchmarks of GuideLLM's
/// type (`generative_benchmark`, as older GuideLLM versions wrote).
pub fn is_guidellm_report(value: &Value) -> bool {
    let Some(map) = value.as_object() else {
        return false;
    };
    if map.contains_key("schema_version") {
        return false;
    }
    let Some(benchmarks) = map.get("benchmarks").and_then(Value::as_array) else {
        return false;
    };
    let named = map
        .get("metadata")
        .and_then(|m| m.get("guidellm_version"))
        .is_some();
    named
        || benchmarks
            .iter()
            .any(|b| b.get("type_").and_then(Value::as_str) == Some("generative_benchmark"))
}

/// A GuideLLM report (see the module docs) as a guidebench [`Report`];
/// `context` names the source in errors.
///
/// # Errors
///
/// [`Error::GuideLlmReport`], naming `context` and what is wrong: a
/// GuideLLM report of another schema version than
/// [`GUIDELLM_SCHEMA_VERSION`], or one whose fields do not have GuideLLM
/// 0.8.1's shape.
pub fn from_guidellm(value: Value, context: &str) -> Result<Report> {
    let refuse = |reason: String| Error::GuideLlmReport {
        context: context.to_owned(),
        reason,
    };
    let version = value
        .get("metadata")
        .and_then(|m| m.get("version"))
        .and_then(Value::as_u64);
    if version != Some(GUIDELLM_SCHEMA_VERSION) {
        let written_by = value
            .get("metadata")
            .and_then(|m| m.get("guidellm_version"))
            .and_then(Value::as_str)
            .map_or_else(
                || "an older GuideLLM".to_owned(),
                |v| format!("GuideLLM {v}"),
            );
        let found = version.map_or_else(
            || "no schema version".to_owned(),
            |v| format!("schema version {v}"),
        );
        return Err(refuse(format!(
            "it has {found} (written by {written_by}), and guidebench reads GuideLLM's report \
             schema version {GUIDELLM_SCHEMA_VERSION} only, the one GuideLLM 0.8.1 writes; \
             re-export it with GuideLLM 0.8.1 (`guidellm export`)"
        )));
    }
    let file: File = serde_json::from_value(value)
        .map_err(|e| refuse(format!("{e} (not the shape of GuideLLM 0.8.1's report)")))?;
    Ok(convert(file))
}

// ---------------------------------------------------------------------------
// GuideLLM 0.8.1's schema, as much of it as converts. Unknown fields are
// ignored; fields GuideLLM always writes are required.

#[derive(Deserialize)]
struct File {
    metadata: Metadata,
    #[serde(default)]
    config: Value,
    benchmarks: Vec<Benchmark>,
    #[serde(default)]
    conclusions: Vec<Value>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    guidellm_version: String,
    #[serde(default)]
    python_version: String,
    #[serde(default)]
    platform: String,
}

#[derive(Deserialize)]
struct Benchmark {
    config: BenchmarkConfig,
    scheduler_metrics: SchedulerMetrics,
    metrics: Metrics,
    #[serde(default)]
    requests: Requests,
    #[serde(default)]
    warnings: Vec<Value>,
}

#[derive(Deserialize)]
struct BenchmarkConfig {
    #[serde(default)]
    id_: Option<String>,
    strategy: Value,
    #[serde(default)]
    sample_size: Option<u64>,
    #[serde(default)]
    warmup: Value,
    #[serde(default)]
    cooldown: Value,
    #[serde(default)]
    slo: Value,
    #[serde(default)]
    confidence: Option<f64>,
}

#[derive(Deserialize)]
struct SchedulerMetrics {
    measure_start_time: f64,
    measure_end_time: f64,
    #[serde(default)]
    requests_made: Option<Totals>,
}

#[derive(Deserialize, Clone, Copy, Default)]
struct Totals {
    successful: u64,
    errored: u64,
    incomplete: u64,
    total: u64,
}

#[derive(Deserialize)]
struct Metrics {
    request_totals: Totals,
    requests_per_second: StatusDist,
    request_concurrency: StatusDist,
    request_latency: StatusDist,
    #[serde(default)]
    request_dispatch_delay: Option<StatusDist>,
    prompt_token_count: StatusDist,
    output_token_count: StatusDist,
    total_token_count: StatusDist,
    time_to_first_token_ms: StatusDist,
    time_per_output_token_ms: StatusDist,
    inter_token_latency_ms: StatusDist,
    output_tokens_per_second: StatusDist,
    tokens_per_second: StatusDist,
}

#[derive(Deserialize)]
struct StatusDist {
    successful: Dist,
    errored: Dist,
    incomplete: Dist,
    total: Dist,
}

#[derive(Deserialize)]
struct Dist {
    mean: f64,
    median: f64,
    std_dev: f64,
    min: f64,
    max: f64,
    count: usize,
    percentiles: BTreeMap<String, f64>,
    #[serde(default)]
    mean_ci: Option<Ci>,
    #[serde(default)]
    percentile_cis: Option<BTreeMap<String, Option<Ci>>>,
}

#[derive(Deserialize, Clone, Copy)]
struct Ci {
    lower: f64,
    upper: f64,
}

#[derive(Deserialize, Default)]
struct Requests {
    #[serde(default)]
    successful: Option<Vec<Request>>,
    #[serde(default)]
    errored: Option<Vec<Request>>,
    #[serde(default)]
    incomplete: Option<Vec<Request>>,
}

#[derive(Deserialize)]
struct Request {
    info: Info,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default)]
    input_metrics: Option<InputUsage>,
}

/// The audio figures of a request's `input_metrics` (GuideLLM's
/// `UsageMetrics`); the rest is read from the request's own fields.
#[derive(Deserialize, Default)]
struct InputUsage {
    #[serde(default)]
    audio_tokens: Option<f64>,
    #[serde(default)]
    audio_samples: Option<f64>,
    #[serde(default)]
    audio_seconds: Option<f64>,
    #[serde(default)]
    audio_bytes: Option<f64>,
}

impl InputUsage {
    /// The request's audio clip, when GuideLLM recorded any audio figure
    /// (a count that is not a whole number in range is left unknown).
    fn audio(&self) -> Option<AudioStats> {
        let whole = |v: Option<f64>| {
            v.filter(|v| v.is_finite() && *v >= 0.0 && v.fract() == 0.0 && *v < 1.8e19)
        };
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // checked by `whole`.
        let (tokens, samples, bytes) = (
            whole(self.audio_tokens).and_then(|t| u32::try_from(t as u64).ok()),
            whole(self.audio_samples).map(|n| n as u64),
            whole(self.audio_bytes).map(|n| n as u64),
        );
        let seconds = self.audio_seconds.filter(|s| s.is_finite());
        (tokens.is_some() || samples.is_some() || bytes.is_some() || seconds.is_some()).then_some(
            AudioStats {
                seconds,
                samples,
                bytes: bytes.unwrap_or(0),
                tokens,
            },
        )
    }
}

#[derive(Deserialize)]
struct Info {
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default)]
    turn_index: u32,
    timings: Timings,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Timings {
    #[serde(default)]
    targeted_start: Option<f64>,
    #[serde(default)]
    resolve_start: Option<f64>,
    #[serde(default)]
    request_start: Option<f64>,
    #[serde(default)]
    first_token_iteration: Option<f64>,
    #[serde(default)]
    last_token_iteration: Option<f64>,
    #[serde(default)]
    request_end: Option<f64>,
    #[serde(default)]
    resolve_end: Option<f64>,
}

/// GuideLLM's percentile keys and the percentiles guidebench reports
/// (GuideLLM's `p001`, the 0.1th, has no counterpart).
const PERCENTILE_KEYS: [(&str, f64); 10] = [
    ("p01", 1.0),
    ("p05", 5.0),
    ("p10", 10.0),
    ("p25", 25.0),
    ("p50", 50.0),
    ("p75", 75.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p999", 99.9),
];

// ---------------------------------------------------------------------------
// The conversion.

fn convert(file: File) -> Report {
    let mut notes = Map::new();
    notes.insert(
        "metrics".into(),
        "GuideLLM's own distributions, computed by GuideLLM from every request; a guidebench \
         JSON written from this report recomputes them from the records when read"
            .into(),
    );
    notes.insert(
        "token_times".into(),
        "GuideLLM keeps each request's first and last token time only: the records space the \
         tokens between them evenly, and ITL per gap is left empty (ITL per request is \
         GuideLLM's inter_token_latency_ms)"
            .into(),
    );
    notes.insert(
        "throughput".into(),
        "requests/s and tokens/s are the means of GuideLLM's rate distributions of successful \
         requests over the measured window; mean concurrency is the mean of its concurrency \
         distribution of all requests"
            .into(),
    );
    notes.insert(
        "not_carried".into(),
        "GuideLLM's time to first output token, streaming iterations, word, character, \
         image, video, audio and tool-call metrics, scheduler timings; guidebench's client \
         footprint and finish reasons, which GuideLLM does not record"
            .into(),
    );
    let mut benchmarks = Vec::with_capacity(file.benchmarks.len());
    for benchmark in file.benchmarks {
        let (report, benchmark_notes) = convert_benchmark(benchmark);
        for note in benchmark_notes {
            notes.insert(format!("{}.{}", report.name, note.0), note.1.into());
        }
        benchmarks.push(report);
    }
    if !file.conclusions.is_empty() {
        notes.insert(
            "conclusions".into(),
            "GuideLLM's profile conclusions (knee, goodput search) are kept under \
             config.guidellm_conclusions, not as a guidebench conclusion"
                .into(),
        );
    }
    let version = &file.metadata.guidellm_version;
    let mut backend = Map::new();
    let spec = file.config.get("spec").cloned().unwrap_or(Value::Null);
    if let Some(spec_backend) = spec.get("backend").and_then(Value::as_object) {
        for (from, to) in [
            ("kind", "backend"),
            ("target", "target"),
            ("model", "model"),
            ("request_format", "endpoint"),
        ] {
            if let Some(v) = spec_backend.get(from).filter(|v| !v.is_null()) {
                backend.insert(to.into(), v.clone());
            }
        }
    }
    backend.insert(
        "guidellm".into(),
        json!({
            "version": version,
            "report_schema_version": GUIDELLM_SCHEMA_VERSION,
            "python_version": file.metadata.python_version,
            "platform": file.metadata.platform,
            "notes": notes,
        }),
    );
    let (os, arch) = os_and_arch(&file.metadata.platform);
    let mut config = match spec {
        Value::Object(map) => Value::Object(map),
        _ => Value::Object(Map::new()),
    };
    // The profile as the benchmarks ran it (GuideLLM's own `profile` does
    // not show `--override`'s values), GuideLLM's kept beside it.
    if let Some(theirs) = config.get("profile").cloned() {
        config["guidellm_profile"] = theirs;
    }
    config["profile"] = match benchmarks.as_slice() {
        [one] => one.profile.clone(),
        many => json!({
            "kind": "fixed",
            "strategies": many.iter().map(|b| b.profile.clone()).collect::<Vec<_>>(),
        }),
    };
    if let Some(labels) = file
        .config
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .filter(|l| l.as_object().is_some_and(|l| !l.is_empty()))
    {
        config["labels"] = labels.clone();
    }
    if !file.conclusions.is_empty() {
        config["guidellm_conclusions"] = Value::Array(file.conclusions);
    }
    prune(&mut config);
    guidebench_core::redact::redact_value(&mut config);
    guidebench_core::redact::redact_object(&mut backend);
    let created = benchmarks
        .iter()
        .map(|b| b.end)
        .max()
        .unwrap_or_else(Timestamp::now);
    let mut report = Report::new(config);
    report.created = created;
    report.environment = Environment {
        guidebench_version: format!("none: run by GuideLLM {version}"),
        os,
        arch,
        cpu_model: None,
        logical_cores: 0,
        available_parallelism: 0,
        hostname: None,
        backend,
    };
    report.benchmarks = benchmarks;
    report
}

/// One benchmark, and its notes (`(key, text)`) on what it could not carry.
fn convert_benchmark(b: Benchmark) -> (BenchmarkReport, Vec<(&'static str, String)>) {
    let mut notes = Vec::new();
    let start = timestamp(b.scheduler_metrics.measure_start_time).unwrap_or(Timestamp(0));
    let end = timestamp(b.scheduler_metrics.measure_end_time).unwrap_or(start);
    let (name, profile) = strategy(&b.config.strategy);
    let (records, excluded) = records(&b.requests, start, end);
    let kept = records.len();
    let made = b
        .scheduler_metrics
        .requests_made
        .unwrap_or(b.metrics.request_totals);
    if let Some(size) = b.config.sample_size {
        notes.push((
            "records",
            format!(
                "GuideLLM kept at most {size} requests of each status (sample_size); the records \
                 hold {kept} of the {} it made",
                made.total
            ),
        ));
    }
    let confidence_ok = b
        .config
        .confidence
        .is_none_or(|c| (c - CONFIDENCE).abs() < 1e-9);
    if !confidence_ok {
        notes.push((
            "intervals",
            format!(
                "GuideLLM's intervals are at {} confidence, not guidebench's {CONFIDENCE}: left out",
                b.config.confidence.unwrap_or_default()
            ),
        ));
    }
    if !b.config.slo.is_null() {
        notes.push((
            "slo",
            "GuideLLM's objectives and attainment are not carried (guidebench's --slo differs)"
                .to_owned(),
        ));
    }
    let metrics = metrics(&b.metrics, &records, start, end, confidence_ok);
    let mut report = BenchmarkReport::with_metrics(name, profile, start, end, records, metrics);
    if phase_set(&b.config.warmup) || excluded.0 > 0 {
        report.warmup_excluded = Some(excluded.0);
    }
    if phase_set(&b.config.cooldown) || excluded.1 > 0 {
        report.cooldown_excluded = Some(excluded.1);
    }
    report
        .extra
        .insert("requests_sent".into(), json!(made.total));
    if let Some(id) = &b.config.id_ {
        report.extra.insert("guidellm_id".into(), json!(id));
    }
    let warnings: Vec<Value> = b
        .warnings
        .iter()
        .filter_map(|w| w.get("message").cloned())
        .collect();
    if !warnings.is_empty() {
        report
            .extra
            .insert("guidellm_warnings".into(), Value::Array(warnings));
    }
    (report, notes)
}

/// Whether GuideLLM's warm-up or cool-down (`{percent, value, mode}`) was
/// set.
fn phase_set(phase: &Value) -> bool {
    ["percent", "value"]
        .iter()
        .any(|k| phase.get(*k).is_some_and(|v| !v.is_null()))
}

/// The benchmark's name and profile as guidebench writes them for the same
/// strategy.
fn strategy(strategy: &Value) -> (String, Value) {
    let kind = strategy
        .get("type_")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let number = |key: &str| strategy.get(key).and_then(Value::as_f64);
    let count = |key: &str| strategy.get(key).and_then(Value::as_u64);
    let mut profile = Map::new();
    let name = match kind {
        "synchronous" => {
            profile.insert("kind".into(), "synchronous".into());
            "synchronous".to_owned()
        }
        "concurrent" => {
            let streams = count("streams").unwrap_or(1);
            profile.insert("kind".into(), "concurrent".into());
            profile.insert("streams".into(), streams.into());
            format!("concurrent@{streams}")
        }
        "throughput" => {
            profile.insert("kind".into(), "throughput".into());
            match count("max_concurrency") {
                Some(n) => {
                    profile.insert("max_concurrency".into(), n.into());
                    format!("throughput@{n}")
                }
                None => "throughput".to_owned(),
            }
        }
        "constant" | "poisson" => {
            let rate = number("rate").unwrap_or(0.0);
            profile.insert("kind".into(), kind.into());
            profile.insert("rate".into(), json!(rate));
            if kind == "poisson"
                && let Some(seed) = count("random_seed")
            {
                profile.insert("seed".into(), seed.into());
            }
            profile.insert(
                "max_concurrency".into(),
                count("max_concurrency").map_or(Value::Null, Value::from),
            );
            format!("{kind}@{rate:.2}/s")
        }
        "trace" => {
            let scale = number("time_scale").unwrap_or(1.0);
            profile.insert("kind".into(), "replay".into());
            profile.insert("time_scale".into(), json!(scale));
            format!("replay@{scale}x")
        }
        other => {
            profile.insert("kind".into(), other.into());
            other.to_owned()
        }
    };
    if let Some(rampup) = number("rampup_duration").filter(|r| *r > 0.0) {
        profile.insert("rampup_s".into(), json!(rampup));
    }
    (name, Value::Object(profile))
}

/// The kept requests as compact records over the window `start..end`,
/// ordered by start and numbered from 0, and how many of them fall before
/// the window (warm-up) and after it (cool-down), as GuideLLM's window
/// test has it (a request counts when it overlaps the window).
fn records(requests: &Requests, start: Timestamp, end: Timestamp) -> (CompactRecords, (u64, u64)) {
    let mut all: Vec<(RequestStatus, &Request)> = Vec::new();
    for (status, list) in [
        (RequestStatus::Success, &requests.successful),
        (RequestStatus::Error, &requests.errored),
        (RequestStatus::Incomplete, &requests.incomplete),
    ] {
        all.extend(list.iter().flatten().map(|r| (status, r)));
    }
    let began = |r: &Request| {
        let t = &r.info.timings;
        t.request_start.or(t.resolve_start).or(t.request_end)
    };
    all.sort_by(|a, b| {
        began(a.1)
            .unwrap_or(f64::INFINITY)
            .total_cmp(&began(b.1).unwrap_or(f64::INFINITY))
    });
    let multi_turn = all.iter().any(|(_, r)| r.info.turn_index > 0);
    let mut conversations: HashMap<&str, u64> = HashMap::new();
    let mut compact = CompactRecords::new(start);
    let (mut warmup, mut cooldown) = (0, 0);
    for (id, (status, request)) in (0u64..).zip(all) {
        let record = record(id, status, request);
        let t = &record.timings;
        let ended = t.end.or(t.start);
        let started = t.start.or(t.end);
        compact.push(&record);
        let Some(last) = compact.records.last_mut() else {
            continue;
        };
        if ended.is_some_and(|e| e < start) {
            last.excluded = Some(Excluded::Warmup);
            warmup += 1;
        } else if started.is_some_and(|s| s > end) {
            last.excluded = Some(Excluded::Cooldown);
            cooldown += 1;
        }
        if multi_turn && let Some(conversation) = request.info.conversation_id.as_deref() {
            let first = *conversations.entry(conversation).or_insert(id);
            last.turn = Some(Box::new(CompactTurn {
                conversation: first,
                index: request.info.turn_index,
                waited_us: None,
            }));
        }
    }
    (compact, (warmup, cooldown))
}

/// One GuideLLM request as a guidebench record.
fn record(id: u64, status: RequestStatus, request: &Request) -> RequestRecord {
    let t = &request.info.timings;
    let output_tokens = request.output_tokens.unwrap_or(0);
    let first = t.first_token_iteration.and_then(timestamp);
    let last = t.last_token_iteration.and_then(timestamp);
    let tokens = match (first, last) {
        (Some(first), Some(last)) if output_tokens >= 2 && last > first => {
            spaced(first, last, output_tokens.min(MAX_INSTANTS))
        }
        (Some(first), _) => vec![first],
        _ => Vec::new(),
    };
    let error = match status {
        RequestStatus::Error => Some(request_error(request.info.error.as_deref().unwrap_or(""))),
        _ => None,
    };
    RequestRecord {
        id,
        status,
        error,
        prompt_tokens: request.prompt_tokens,
        output_tokens,
        finish_reason: None,
        text: request.output.clone(),
        images: None,
        timings: RequestTimings {
            scheduled: t.targeted_start.and_then(timestamp),
            start: t.request_start.or(t.resolve_start).and_then(timestamp),
            tokens,
            end: t.request_end.or(t.resolve_end).and_then(timestamp),
            ..RequestTimings::default()
        },
        cut_short_of: None,
        tool_calls: None,
        audio: request.input_metrics.as_ref().and_then(InputUsage::audio),
    }
}

/// `n ≥ 2` instants from `first` to `last`, evenly spaced.
fn spaced(first: Timestamp, last: Timestamp, n: u32) -> Vec<Timestamp> {
    let span = i128::from(last.0) - i128::from(first.0);
    let steps = i128::from(n - 1);
    (0..n)
        .map(|i| {
            let offset = span * i128::from(i) / steps;
            Timestamp(
                first
                    .0
                    .saturating_add(i64::try_from(offset).unwrap_or(i64::MAX)),
            )
        })
        .collect()
}

/// Seconds since the epoch as a [`Timestamp`] (nearest nanosecond); `None`
/// when not finite or out of range.
#[allow(clippy::cast_possible_truncation)] // range-checked just before.
fn timestamp(secs: f64) -> Option<Timestamp> {
    let ns = (secs * 1e9).round();
    // i64 holds ±9.2e18 ns; stay inside it.
    (ns.is_finite() && ns.abs() < 9.0e18).then_some(Timestamp(ns as i64))
}

/// GuideLLM's error text (`HTTPStatusError("Server error '500 Internal
/// Server Error' for url ...")`) as a labelled error: the label from the
/// exception's class (`http_status` with the status from the text,
/// `timeout`, `connection`, else the class in snake case), the message the
/// text inside the class's parentheses, on its first line.
fn request_error(text: &str) -> RequestError {
    let text = text.trim();
    let class_end = text.find('(').filter(|&i| {
        i > 0
            && text[..i]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    let (class, inner) = match class_end {
        Some(i) => (
            &text[..i],
            text[i + 1..]
                .trim_end()
                .trim_end_matches(')')
                .trim_matches(|c| c == '"' || c == '\''),
        ),
        None => ("", text),
    };
    let message = inner.lines().next().unwrap_or("").trim();
    let message = if message.is_empty() {
        "GuideLLM recorded no error message"
    } else {
        message
    };
    let label = match class {
        "HTTPStatusError" => "http_status".to_owned(),
        c if c.contains("Timeout") => "timeout".to_owned(),
        "ConnectError"
        | "RemoteProtocolError"
        | "ReadError"
        | "WriteError"
        | "NetworkError"
        | "ConnectionError"
        | "ConnectionResetError"
        | "ConnectionRefusedError" => "connection".to_owned(),
        "" => "error".to_owned(),
        c => snake_case(c),
    };
    let mut error = RequestError::new(label, message);
    if class == "HTTPStatusError" {
        error.status = http_status(message);
    }
    error
}

/// The first three-digit number after a quote (httpx: `'500 Internal
/// Server Error'`).
fn http_status(message: &str) -> Option<u16> {
    message.split('\'').skip(1).find_map(|part| {
        let code = part.split(' ').next()?;
        (code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit()))
            .then(|| code.parse().ok())
            .flatten()
    })
}

/// `ValueError` → `value_error`.
fn snake_case(class: &str) -> String {
    let mut out = String::with_capacity(class.len() + 4);
    let mut previous_lower = false;
    for c in class.chars() {
        if c.is_ascii_uppercase() {
            if previous_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            previous_lower = false;
        } else {
            out.push(c);
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
    }
    out
}

/// The benchmark's metrics: GuideLLM's distributions, and from the records
/// only what GuideLLM has no number for (errors by label).
fn metrics(
    m: &Metrics,
    records: &CompactRecords,
    start: Timestamp,
    end: Timestamp,
    intervals: bool,
) -> BenchmarkMetrics {
    let status = |pick: fn(&StatusDist) -> &Dist, count: u64, of: Option<RequestStatus>| {
        let d = |s: &StatusDist, scale: f64| distribution(pick(s), scale, intervals);
        // GuideLLM's audio summary has no real-time factor: the clips are
        // measured from the requests it kept.
        let audio = AudioMetrics::compute(
            records
                .measured()
                .filter(|r| of.is_none_or(|s| r.status == s)),
        );
        StatusMetrics {
            count: usize::try_from(count).unwrap_or(usize::MAX),
            latency: d(&m.request_latency, 1.0),
            ttft: d(&m.time_to_first_token_ms, 1e-3),
            itl: Distribution::default(),
            itl_per_request: d(&m.inter_token_latency_ms, 1e-3),
            tpot: d(&m.time_per_output_token_ms, 1e-3),
            prompt_tokens: d(&m.prompt_token_count, 1.0),
            output_tokens: d(&m.output_token_count, 1.0),
            total_tokens: d(&m.total_token_count, 1.0),
            ttfot: None,
            reasoning_tokens: None,
            images: None,
            image_tokens: None,
            vision_encode: None,
            ttftc: None,
            tool_calls: None,
            tool_call_tokens: None,
            mixed_content_tool_tokens: None,
            audio,
        }
    };
    let totals = m.request_totals;
    let mut errors_by_label: BTreeMap<String, usize> = BTreeMap::new();
    for r in records.measured() {
        if let Some(error) = r
            .error
            .and_then(|i| records.errors.get(usize::try_from(i).ok()?))
        {
            *errors_by_label.entry(error.label.clone()).or_default() += 1;
        }
    }
    let labelled: usize = errors_by_label.values().sum();
    let errored = usize::try_from(totals.errored).unwrap_or(usize::MAX);
    if labelled < errored {
        // Errors GuideLLM did not keep a record of (sample_size).
        *errors_by_label.entry("unrecorded".into()).or_default() += errored - labelled;
    }
    BenchmarkMetrics {
        duration_s: end.secs_since(start),
        successful: status(
            |s| &s.successful,
            totals.successful,
            Some(RequestStatus::Success),
        ),
        errored: status(|s| &s.errored, totals.errored, Some(RequestStatus::Error)),
        incomplete: status(
            |s| &s.incomplete,
            totals.incomplete,
            Some(RequestStatus::Incomplete),
        ),
        all: status(|s| &s.total, totals.total, None),
        requests_per_s: m.requests_per_second.successful.mean,
        output_tokens_per_s: m.output_tokens_per_second.successful.mean,
        total_tokens_per_s: m.tokens_per_second.successful.mean,
        // GuideLLM has no input rate of its own: total less output.
        prompt_tokens_per_s: (m.tokens_per_second.successful.mean
            - m.output_tokens_per_second.successful.mean)
            .max(0.0),
        pooled: super::metrics::answers_are_pooled(records),
        mean_concurrency: m.request_concurrency.total.mean,
        dispatch_delay: m
            .request_dispatch_delay
            .as_ref()
            .map_or_else(Distribution::default, |d| {
                distribution(&d.total, 1.0, intervals)
            }),
        errors_by_label,
        retries: 0,
        slo: None,
        audio_seconds_per_s: audio_seconds_per_s(records, end.secs_since(start).max(0.0)),
        by_turn: Vec::new(),
    }
}

/// GuideLLM's distribution summary in guidebench's form, its values times
/// `scale` (milliseconds to seconds: 1e-3); intervals only when `intervals`.
fn distribution(d: &Dist, scale: f64, intervals: bool) -> Distribution {
    if d.count == 0 {
        return Distribution::default();
    }
    let scaled = |ci: Ci| Interval {
        lower: ci.lower * scale,
        upper: ci.upper * scale,
    };
    Distribution {
        count: d.count,
        mean: d.mean * scale,
        median: d.median * scale,
        min: d.min * scale,
        max: d.max * scale,
        std: d.std_dev * scale,
        percentiles: PERCENTILE_KEYS
            .iter()
            .filter_map(|&(key, p)| Some((p, d.percentiles.get(key)? * scale)))
            .collect(),
        mean_interval: d.mean_ci.filter(|_| intervals).map(scaled),
        percentile_intervals: if intervals {
            PERCENTILE_KEYS
                .iter()
                .filter_map(|&(key, p)| {
                    let ci = (*d.percentile_cis.as_ref()?.get(key)?)?;
                    Some((p, scaled(ci)))
                })
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// `os` and `arch` from Python's `platform.platform()`
/// (`Linux-6.8.0-x86_64-with-glibc2.36`, `macOS-14.5-arm64-arm-64bit`).
fn os_and_arch(platform: &str) -> (String, String) {
    let mut parts = platform.split('-');
    let os = match parts.next().unwrap_or("") {
        "macOS" | "Darwin" => "macos".to_owned(),
        other => other.to_ascii_lowercase(),
    };
    let arch = platform
        .split('-')
        .find(|p| {
            matches!(
                *p,
                "x86_64" | "aarch64" | "arm64" | "AMD64" | "i686" | "ppc64le" | "s390x" | "riscv64"
            )
        })
        .map(|a| match a {
            "arm64" => "aarch64".to_owned(),
            "AMD64" => "x86_64".to_owned(),
            other => other.to_owned(),
        })
        .unwrap_or_default();
    (os, arch)
}

/// Removes nulls, empty objects and empty lists, recursively (GuideLLM
/// writes every unset option as `null`).
fn prune(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.values_mut().for_each(prune);
            map.retain(|_, v| !is_empty(v));
        }
        Value::Array(items) => items.iter_mut().for_each(prune),
        _ => {}
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guidellm_error_texts_become_labelled_errors_with_their_status() {
        let e = request_error(
            "HTTPStatusError(\"Server error '503 Service Unavailable' for url \
             'http://h/v1/chat/completions'\\nFor more information check: https://x\")",
        );
        assert_eq!(e.label, "http_status");
        assert_eq!(e.status, Some(503));
        assert!(e.message.starts_with("Server error '503"), "{}", e.message);
        assert_eq!(request_error("ReadTimeout('timed out')").label, "timeout");
        assert_eq!(request_error("ConnectError('refused')").label, "connection");
        assert_eq!(request_error("ValueError('bad')").label, "value_error");
        assert_eq!(request_error("something odd").label, "error");
        assert!(!request_error("").message.is_empty());
    }

    #[test]
    fn strategies_take_guidebench_names_and_profiles() {
        let named = |v: Value| strategy(&v).0;
        assert_eq!(named(json!({"type_": "synchronous"})), "synchronous");
        assert_eq!(
            named(json!({"type_": "concurrent", "streams": 4})),
            "concurrent@4"
        );
        assert_eq!(
            named(json!({"type_": "throughput", "max_concurrency": 8})),
            "throughput@8"
        );
        assert_eq!(
            named(json!({"type_": "constant", "rate": 2.5})),
            "constant@2.50/s"
        );
        assert_eq!(
            named(json!({"type_": "poisson", "rate": 1})),
            "poisson@1.00/s"
        );
        assert_eq!(
            named(json!({"type_": "trace", "time_scale": 0.5})),
            "replay@0.5x"
        );
        let (_, profile) =
            strategy(&json!({"type_": "concurrent", "streams": 2, "rampup_duration": 1.5}));
        assert_eq!(
            profile,
            json!({"kind": "concurrent", "streams": 2, "rampup_s": 1.5})
        );
    }

    #[test]
    fn tokens_are_spaced_evenly_from_the_first_to_the_last() {
        let t = spaced(Timestamp(1_000), Timestamp(4_000), 4);
        assert_eq!(t, [1_000, 2_000, 3_000, 4_000].map(Timestamp));
    }

    #[test]
    fn the_platform_string_gives_os_and_arch() {
        assert_eq!(
            os_and_arch("Linux-6.8.0-x86_64-with-glibc2.36"),
            ("linux".into(), "x86_64".into())
        );
        assert_eq!(
            os_and_arch("macOS-14.5-arm64-arm-64bit"),
            ("macos".into(), "aarch64".into())
        );
    }

    #[test]
    fn only_guidellm_shaped_json_is_taken_for_a_guidellm_report() {
        assert!(is_guidellm_report(
            &json!({"metadata": {"guidellm_version": "0.8.1"}, "benchmarks": []})
        ));
        assert!(is_guidellm_report(
            &json!({"benchmarks": [{"type_": "generative_benchmark"}]})
        ));
        assert!(!is_guidellm_report(&json!({"benchmarks": []})));
        assert!(!is_guidellm_report(&json!({
            "schema_version": 1,
            "metadata": {"guidellm_version": "0.8.1"},
            "benchmarks": []
        })));
    }

    #[test]
    fn another_guidellm_schema_version_is_refused_with_what_to_do() {
        let err = from_guidellm(
            json!({"metadata": {"version": 1, "guidellm_version": "0.4.0"}, "benchmarks": []}),
            "`old.json`",
        )
        .expect_err("refused");
        let message = err.to_string();
        assert!(
            message.starts_with("`old.json` is a GuideLLM report"),
            "{message}"
        );
        assert_eq!(err.label(), "invalid_report");
        assert!(
            message.contains("schema version 1 (written by GuideLLM 0.4.0)"),
            "{message}"
        );
        assert!(message.contains("guidellm export"), "{message}");
        assert!(err.is_usage());
        let err = from_guidellm(
            json!({
                "metadata": {"version": 2, "guidellm_version": "0.8.1"},
                "benchmarks": [{"config": {"strategy": {"type_": "synchronous"}}}]
            }),
            "`cut.json`",
        )
        .expect_err("refused");
        let message = err.to_string();
        assert!(
            message.contains("missing field `scheduler_metrics`"),
            "{message}"
        );
        assert!(err.is_usage());
    }
}
