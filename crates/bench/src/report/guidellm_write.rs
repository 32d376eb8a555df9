//! guidebench reports written as GuideLLM 0.8.1's `benchmarks.json`
//! (`GenerativeBenchmarksReport`, report schema version 2): the inverse of
//! [`super::guidellm::from_guidellm`], so that GuideLLM's own `guidellm
//! export` (console, CSV, HTML) opens a guidebench run.
//!
//! What maps to what ([`to_guidellm`]):
//!
//! - each record becomes a `GenerativeRequestStats` in `requests`
//!   (`successful`, `errored`, `incomplete`): its send as `request_start`
//!   (and `resolve_start`), its end as `request_end` (and `resolve_end`; a
//!   request without an end is cut at the benchmark's end, where
//!   guidebench's concurrency ends it too), its planned send as
//!   `targeted_start`, first and last token, its token instants as
//!   `token_iterations` (and `request_iterations`), prompt and output tokens
//!   as usage, output text, a failure as `Label("message")`, its turn;
//!   warm-up and cool-down records are kept where GuideLLM's window leaves
//!   them out too, so the lists and the metrics agree;
//! - every metric is compiled from those requests as GuideLLM's
//!   `GenerativeMetrics.compile` does, over the records guidebench measured,
//!   with GuideLLM's statistics ported below (`DistributionSummary.from_values`,
//!   `Percentiles.from_pdf`, `rate_distribution_from_timings`,
//!   `concurrency_distribution_from_timings`, `_merge_sorted_times_with_weights`).
//!   So they are GuideLLM's definitions, not guidebench's: a percentile is
//!   the first value whose cumulative probability reaches it (guidebench
//!   interpolates), TPOT and ITL are weighted by tokens, a request without a
//!   latency counts 0. Intervals use guidebench's estimators, which are
//!   GuideLLM's (Student t, order statistics), at guidebench's confidence;
//! - each benchmark's strategy is GuideLLM's (`trace` for a replay); the
//!   scenario (`config`) takes what GuideLLM's models accept of guidebench's
//!   configuration: backend, profile, constraints, data, tokenizer, seed,
//!   warm-up and cool-down, labels.
//!
//! GuideLLM has no place for the rest: an in-process backend is written as
//! `openai_http` with an empty target (each benchmark's `config.backend`
//! says what ran); scheduler delays guidebench does not measure are
//! GuideLLM's "unknown", -1; objectives (`--slo`), conclusions and
//! server-side fields (round trips, cached tokens) are left out.

use serde_json::{Map, Value, json};

use super::micros_as_secs;
use super::model::{BenchmarkReport, Report};
use crate::analysis::stats::{Interval, mean_interval, quantile_interval};
use crate::metrics::CONFIDENCE;
use crate::record::{CompactAudio, CompactRecord, CompactRecords, count_as_f64};
use guidebench_core::request::{RequestError, RequestStatus};

/// GuideLLM's percentile fields and the quantile each reports.
const PERCENTILES: [(&str, f64); 11] = [
    ("p001", 0.001),
    ("p01", 0.01),
    ("p05", 0.05),
    ("p10", 0.1),
    ("p25", 0.25),
    ("p50", 0.5),
    ("p75", 0.75),
    ("p90", 0.9),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p999", 0.999),
];

/// GuideLLM's merge threshold for event times (0.1 ms), and its tolerance.
const THRESHOLD: f64 = 1e-4;
const EPSILON: f64 = 1e-6;

/// The report as GuideLLM 0.8.1's `benchmarks.json` document (schema version 2).
pub fn to_guidellm(report: &Report) -> Value {
    let (profile, overrides) = profile_args(report);
    let benchmarks = benchmarks(report, &profile, Requests::Listed);
    let os = match report.environment.os.as_str() {
        "linux" => "Linux",
        "macos" => "macOS",
        "windows" => "Windows",
        other => other,
    };
    json!({
        "metadata": {
            "version": 2,
            "guidellm_version": "0.8.1",
            "python_version": "n/a",
            "platform": format!("{os}-{}", report.environment.arch),
        },
        "config": scenario(report, profile, overrides),
        "benchmarks": benchmarks,
        "conclusions": [],
    })
}

/// Whether a benchmark's `requests` lists its per-request stats.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Requests {
    /// Every request's `GenerativeRequestStats`, as GuideLLM writes them.
    Listed,
    /// Empty lists: for readers of the metrics alone (the console tables),
    /// which need not build a JSON object per request.
    Left,
}

/// Each benchmark of the report as GuideLLM writes it.
fn benchmarks(report: &Report, profile: &Value, requests: Requests) -> Vec<Value> {
    let run_id = format!("guidebench-{}", report.created.0);
    (report.benchmarks.iter().enumerate())
        .map(|(i, b)| benchmark(report, b, i, &run_id, profile, requests))
        .collect()
}

/// Each benchmark of [`to_guidellm`]'s document with its metrics, times and
/// configuration, but empty request lists.
pub(crate) fn benchmarks_without_requests(report: &Report) -> Vec<Value> {
    let (profile, _) = profile_args(report);
    benchmarks(report, &profile, Requests::Left)
}

// ---------------------------------------------------------------------------
// The scenario: guidebench's configuration as GuideLLM's BenchmarkScenario.

fn scenario(report: &Report, profile: Value, overrides: Vec<Value>) -> Value {
    let config = &report.config;
    let mut data: Vec<Value> = each(config.get("data"))
        .into_iter()
        .filter_map(data_args)
        .collect();
    if data.is_empty() {
        // No data GuideLLM can name: an empty list rather than made-up data.
        data.push(json!({"kind": "in_memory_item_list", "data": []}));
    }
    let mut spec = json!({
        "backend": backend_args(&backend_config(report, None)),
        "profile": profile,
        "constraints": spec_constraints(config.get("constraints")),
        "data": data,
        "outputs": [],
        "metrics": {"kind": "generative", "warnings": [], "confidence": CONFIDENCE},
    });
    let tokenizer = config.get("tokenizer");
    if let Some(model) = tokenizer.and_then(|t| t.as_str().or_else(|| t.get("model")?.as_str())) {
        spec["tokenizer"] = json!({"kind": "hf_auto", "model": model});
    }
    if let Some(seed) = config.get("seed").filter(|s| s.is_u64()) {
        spec["seed"] = json!({"kind": "static", "value": seed});
    }
    let labels: Map<String, Value> = (config.get("labels").and_then(Value::as_object).into_iter())
        .flatten()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str()
                    .map_or_else(|| v.to_string(), str::to_owned)
                    .into(),
            )
        })
        .collect();
    json!({"metadata": {"labels": labels}, "spec": spec, "benchmarks": overrides})
}

/// A value or the items of a list.
fn each(value: Option<&Value>) -> Vec<&Value> {
    match value {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(Value::Null) | None => Vec::new(),
        Some(one) => vec![one],
    }
}

/// The fields of `from` that `table` names (`name`, or `ours:theirs`),
/// under GuideLLM's names; delays and time-outs in seconds, standard
/// deviations whole, flags as booleans. A number of 0 or less, guidebench's
/// "none" where GuideLLM wants a positive number, is left out.
fn fields(from: &Value, table: &str) -> Map<String, Value> {
    let field = |entry: &str| {
        let (ours, theirs) = entry.split_once(':').unwrap_or((entry, entry));
        let value = from.get(ours).filter(|v| !v.is_null())?;
        let value = if theirs.contains("delay") || theirs.starts_with("timeout") {
            json!(seconds(value)?)
        } else if theirs == "output_tokens_stdev" || theirs == "prompt_tokens_stdev" {
            json!(value.as_f64()?.round())
        } else if ["stream", "http2", "validate_backend"].contains(&theirs) {
            json!(value.as_bool().or_else(|| value.as_str()?.parse().ok())?)
        } else {
            value.clone()
        };
        let positive = value.as_f64().is_none_or(|n| n > 0.0);
        positive.then(|| (theirs.to_owned(), value))
    };
    table.split_whitespace().filter_map(field).collect()
}

/// Seconds from a number, a serialised duration (`{secs, nanos}`) or a
/// string with a unit (`300s`, `500ms`, `2m`).
fn seconds(value: &Value) -> Option<f64> {
    if let Some(secs) = value.as_f64() {
        return Some(secs);
    }
    if let (Some(s), Some(n)) = (value.get("secs"), value.get("nanos")) {
        return Some(s.as_f64()? + n.as_f64()? / 1e9);
    }
    let text = value.as_str()?.trim();
    let units = [
        ("ms", 1e-3),
        ("us", 1e-6),
        ("s", 1.0),
        ("m", 60.0),
        ("h", 3600.0),
    ];
    let (number, scale) = (units.iter())
        .find_map(|(unit, scale)| Some((text.strip_suffix(unit)?, *scale)))
        .unwrap_or((text, 1.0));
    number.trim().parse::<f64>().ok().map(|n| n * scale)
}

/// The backend a benchmark ran against as guidebench configured it (a
/// `kind=…,key=value` string read into an object), with the model the
/// backend reported where the configuration names none.
fn backend_config(report: &Report, label: Option<&str>) -> Map<String, Value> {
    let side = label.and_then(|l| report.backends.iter().find(|b| b.label == l));
    let config = side.map_or_else(
        || each(report.config.get("backend")).first().copied(),
        |b| Some(&b.config),
    );
    let mut map = match config {
        Some(Value::Object(map)) => map.clone(),
        Some(Value::String(text)) => (text.split(',').enumerate())
            .filter_map(|(i, part)| match part.split_once('=') {
                Some((k, v)) => Some((k.trim().to_owned(), v.trim().into())),
                None => (i == 0).then(|| ("kind".to_owned(), part.trim().into())),
            })
            .collect(),
        _ => Map::new(),
    };
    let facts = side.map_or(&report.environment.backend, |b| &b.environment);
    let model = facts
        .get("model")
        .or_else(|| facts.get("engine")?.get("model"));
    if let (false, Some(model)) = (map.contains_key("model"), model) {
        map.insert("model".into(), model.clone());
    }
    map
}

/// GuideLLM's `openai_http` arguments; an in-process backend has no
/// GuideLLM counterpart and is written with an empty target.
fn backend_args(backend: &Map<String, Value>) -> Value {
    let backend = Value::Object(backend.clone());
    if backend["kind"] != "openai_http" {
        let model = backend.get("model").and_then(Value::as_str);
        return json!({"kind": "openai_http", "target": "", "model": model.unwrap_or_default()});
    }
    let table = "target model stream http2 validate:validate_backend timeout connect_timeout:timeout_connect";
    let mut args = fields(&backend, table);
    args.insert("kind".into(), "openai_http".into());
    if let Some(format) = backend.get("request_format").and_then(Value::as_str) {
        let path = match format {
            "text" | "/v1/completions" => "/v1/completions",
            "embeddings" | "/v1/embeddings" => "/v1/embeddings",
            "pooling" | "/pooling" => "/pooling",
            "responses" | "/v1/responses" => "/v1/responses",
            _ => "/v1/chat/completions",
        };
        args.insert("request_format".into(), path.into());
    }
    let extras = fields(&backend, "headers extra_body:body");
    if !extras.is_empty() {
        args.insert("extras".into(), Value::Object(extras));
    }
    Value::Object(args)
}

/// The spec's profile and the per-benchmark overrides: GuideLLM's sweep
/// for a guidebench sweep, else the strategies that ran, as one profile
/// with a list when they differ in that list only, else the first with one
/// override per later benchmark.
fn profile_args(report: &Report) -> (Value, Vec<Value>) {
    let config = &report.config;
    let phases = |mut profile: Map<String, Value>| {
        profile.insert("warmup".into(), phase(config.get("warmup")));
        profile.insert("cooldown".into(), phase(config.get("cooldown")));
        Value::Object(profile)
    };
    let profile = config.get("profile").unwrap_or(&Value::Null);
    if profile["kind"] == "sweep" {
        let mut args = fields(profile, "sweep_size max_concurrency strategy:strategy_type");
        args.insert("kind".into(), "sweep".into());
        args.insert(
            "rampup_duration".into(),
            json!(profile["rampup_s"].as_f64().unwrap_or(0.0)),
        );
        return (phases(args), vec![Value::Null]);
    }
    let mut strategies: Vec<Value> = report.benchmarks.iter().map(strategy).collect();
    if strategies.is_empty() {
        strategies = each(profile.get("strategies"))
            .into_iter()
            .map(|s| strategy_of(s, ""))
            .collect();
    }
    let args: Vec<Map<String, Value>> = strategies.iter().map(profile_of).collect();
    let Some(first) = args.first().cloned() else {
        return (
            phases(profile_of(&json!({"type_": "synchronous"}))),
            vec![Value::Null],
        );
    };
    let key = match first["kind"].as_str() {
        Some("concurrent") => "streams",
        Some("constant" | "poisson") => "rate",
        _ => "",
    };
    let without = |m: &Map<String, Value>| {
        let mut m = m.clone();
        m.remove(key);
        m
    };
    if args.iter().all(|a| without(a) == without(&first)) {
        let mut merged = first.clone();
        if !key.is_empty() {
            let values = args
                .iter()
                .flat_map(|a| each(a.get(key)))
                .cloned()
                .collect();
            merged.insert(key.into(), Value::Array(values));
        }
        return (phases(merged), vec![Value::Null]);
    }
    let later = args[1..]
        .iter()
        .map(|a| json!({"profile": phases(a.clone())}));
    (
        phases(first),
        std::iter::once(Value::Null).chain(later).collect(),
    )
}

/// GuideLLM's profile arguments for one strategy (in GuideLLM's form).
fn profile_of(strategy: &Value) -> Map<String, Value> {
    let kind = match strategy["type_"].as_str().unwrap_or("synchronous") {
        "trace" => "replay",
        other => other,
    };
    let table = match kind {
        "concurrent" => "streams rampup_duration",
        "throughput" => "max_concurrency rampup_duration",
        "constant" => "rate max_concurrency rampup_duration",
        "poisson" => "rate max_concurrency",
        "replay" => "time_scale",
        _ => "",
    };
    let mut args = fields(strategy, table);
    for list in ["streams", "rate"] {
        if let Some(v) = args.get_mut(list) {
            *v = json!([v.clone()]);
        }
    }
    if kind == "throughput" {
        args.entry("max_concurrency").or_insert(Value::Null);
    }
    args.insert("kind".into(), kind.into());
    args
}

/// GuideLLM's `TransientPhaseConfig` for guidebench's warm-up or cool-down.
fn phase(value: Option<&Value>) -> Value {
    let first = value
        .and_then(Value::as_object)
        .and_then(|o| o.iter().next());
    let (percent, count, mode) = match first {
        Some((k, v)) if k == "seconds" => (None, Some(v), "duration"),
        Some((k, v)) if k == "requests" => (None, Some(v), "requests"),
        Some((k, v)) if k == "fraction" && v.as_f64().is_some_and(|f| f < 1.0) => {
            (Some(v), None, "prefer_requests")
        }
        Some((k, v)) if k == "seconds_or_requests" => (None, Some(v), "prefer_duration"),
        _ => (None, None, "prefer_duration"),
    };
    json!({"percent": percent, "value": count, "mode": mode})
}

/// GuideLLM's constraint arguments for one guidebench `Constraints` object
/// (an error rate GuideLLM cannot take, 0 or 1, is left out).
fn constraint_args(c: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut add = |kind: &str, mut args: Map<String, Value>| {
        args.insert("kind".into(), kind.into());
        args.insert("stopping_scope".into(), "current".into());
        out.push(Value::Object(args));
    };
    for kind in ["max_requests", "max_errors", "min_requests"] {
        if let Some(n) = c.get(kind).filter(|n| n.as_u64().is_some_and(|n| n > 0)) {
            add(kind, Map::from_iter([("count".to_owned(), n.clone())]));
        }
    }
    if let Some(secs) = c.get("max_duration").and_then(seconds).filter(|s| *s > 0.0) {
        add(
            "max_duration",
            Map::from_iter([("seconds".to_owned(), json!(secs))]),
        );
    }
    let rate = |r: &&Value| r["rate"].as_f64().is_some_and(|r| r > 0.0 && r < 1.0);
    if let Some(r) = c.get("max_error_rate").filter(rate) {
        add("max_error_rate", fields(r, "rate window"));
    }
    if let Some(r) = c.get("max_global_error_rate").filter(rate) {
        add(
            "max_global_error_rate",
            fields(r, "rate min_requests:minimum"),
        );
    }
    if let Some(o) = c.get("over_saturation").filter(|o| o.is_object()) {
        add("over_saturation", fields(o, "mode"));
    }
    out
}

/// The spec's constraints: per-benchmark values (a list of `Constraints`)
/// become GuideLLM's list values.
fn spec_constraints(constraints: Option<&Value>) -> Vec<Value> {
    let per: Vec<Vec<Value>> = each(constraints).into_iter().map(constraint_args).collect();
    let mut merged = per.first().cloned().unwrap_or_default();
    for args in &mut merged {
        let kind = args["kind"].clone();
        for key in ["count", "seconds", "rate"] {
            let values: Vec<Value> = (per.iter())
                .filter_map(|list| list.iter().find(|a| a["kind"] == kind)?.get(key).cloned())
                .collect();
            if values.len() == per.len() && values.iter().any(|v| *v != values[0]) {
                args[key] = Value::Array(values);
            }
        }
    }
    merged
}

/// GuideLLM's data arguments for one guidebench data source, where GuideLLM
/// has the kind.
fn data_args(item: &Value) -> Option<Value> {
    let kind = item.get("kind")?.as_str()?;
    let file_kind = |path: &str| match path.rsplit_once('.')?.1.to_ascii_lowercase().as_str() {
        "json" | "jsonl" => Some("json_file"),
        "csv" => Some("csv_file"),
        "txt" => Some("text_file"),
        "parquet" => Some("parquet_file"),
        "arrow" => Some("arrow_file"),
        _ => None,
    };
    let path = item
        .get("path")
        .or_else(|| item.get("source"))
        .and_then(Value::as_str);
    let (theirs, table) = match kind {
        "synthetic_text" => (
            kind,
            "prompt_tokens prompt_tokens_stdev prompt_tokens_min prompt_tokens_max output_tokens output_tokens_stdev output_tokens_min output_tokens_max turns first_turn_prompt_tokens:first_prompt_tokens prefix_tokens turn_delay:delay turn_delay_stdev:delay_stdev turn_delay_min:delay_min turn_delay_max:delay_max",
        ),
        "synthetic_image" => (
            kind,
            "width height resolution aspect_ratio format jpeg_quality content images_per_request output_tokens output_tokens_stdev output_tokens_min output_tokens_max seed",
        ),
        "trace" | "mooncake" => {
            let kind = if kind == "trace" {
                "trace_synthetic"
            } else {
                kind
            };
            (
                kind,
                "timestamp_column input_length_column:prompt_tokens_column output_length_column:output_tokens_column",
            )
        }
        "file" | "hf" | "huggingface" => {
            let format = item
                .get("format")
                .and_then(Value::as_str)
                .map(|f| format!(".{f}"));
            return Some(
                match format
                    .as_deref()
                    .or(path)
                    .and_then(file_kind)
                    .filter(|_| kind == "file")
                {
                    Some(k) => json!({"kind": k, "path": path?}),
                    None => json!({"kind": "huggingface", "source": path?}),
                },
            );
        }
        "json_file" | "csv_file" | "text_file" | "parquet_file" | "arrow_file" => {
            return Some(json!({"kind": kind, "path": path?}));
        }
        _ => return None,
    };
    let mut args = fields(item, table);
    args.insert("kind".into(), theirs.into());
    if theirs != kind || kind == "mooncake" {
        args.insert(
            "source".into(),
            json!({"kind": file_kind(path?).unwrap_or("json_file"), "path": path?}),
        );
    }
    (kind != "synthetic_text" || args.contains_key("prompt_tokens")).then_some(Value::Object(args))
}

// ---------------------------------------------------------------------------
// One benchmark.

/// GuideLLM's scheduling strategy of a benchmark, from its profile (or,
/// failing that, its name); `synchronous` when neither names one.
fn strategy(b: &BenchmarkReport) -> Value {
    match &b.profile {
        Value::String(kind) => strategy_of(&json!({"kind": kind}), &b.name),
        other => strategy_of(other, &b.name),
    }
}

fn strategy_of(profile: &Value, name: &str) -> Value {
    let (kind, number) = match profile["kind"].as_str() {
        Some(kind) => (kind, ""),
        None => name.split_once('@').unwrap_or((name, "")),
    };
    let number: Option<f64> = number
        .trim_end_matches("/s")
        .trim_end_matches('x')
        .parse()
        .ok();
    let get = |key: &str| {
        profile
            .get(key)
            .filter(|v| !v.is_null())
            .cloned()
            .or_else(|| number.map(|n| json!(n)))
    };
    let limit = profile
        .get("max_concurrency")
        .cloned()
        .unwrap_or(Value::Null);
    let rampup = profile["rampup_s"].as_f64().unwrap_or(0.0);
    match kind {
        "concurrent" if get("streams").is_some() => {
            json!({"type_": kind, "streams": get("streams"), "max_concurrency": get("streams"), "rampup_duration": rampup})
        }
        "throughput" => {
            json!({"type_": kind, "max_concurrency": get("max_concurrency"), "rampup_duration": rampup})
        }
        "constant" if get("rate").is_some() => {
            json!({"type_": kind, "rate": get("rate"), "max_concurrency": limit, "rampup_duration": rampup})
        }
        "poisson" if get("rate").is_some() => {
            let mut poisson = json!({"type_": kind, "rate": get("rate"), "max_concurrency": limit});
            if let Some(seed) = profile.get("seed").filter(|s| s.is_u64()) {
                poisson["random_seed"] = seed.clone();
            }
            poisson
        }
        "replay" if get("time_scale").is_some() => {
            json!({"type_": "trace", "time_scale": get("time_scale"), "max_concurrency": limit})
        }
        _ => json!({"type_": "synchronous", "max_concurrency": 1}),
    }
}

fn benchmark(
    report: &Report,
    b: &BenchmarkReport,
    index: usize,
    run_id: &str,
    profile: &Value,
    requests: Requests,
) -> Value {
    let strategy = strategy(b);
    let window = (b.start.as_secs_f64(), b.end.as_secs_f64());
    let reqs: Vec<Req> = b
        .records
        .records
        .iter()
        .map(|r| Req::of(&b.records, r, window.1, b.metrics.pooled))
        .collect();
    let schedule = matches!(
        strategy["type_"].as_str(),
        Some("constant" | "poisson" | "trace")
    );
    let request_start = reqs.iter().filter_map(|r| r.start).fold(window.0, f64::min);
    let request_end = reqs.iter().map(Req::end_time).fold(window.1, f64::max);
    let run_start = reqs
        .iter()
        .filter_map(|r| r.targeted)
        .fold(request_start, f64::min);
    let count = |s: RequestStatus| reqs.iter().filter(|r| r.status == s).count();
    let made = [
        RequestStatus::Success,
        RequestStatus::Error,
        RequestStatus::Incomplete,
    ]
    .map(count);
    // Warm-up and cool-down records that GuideLLM's window would measure
    // are left out, so that the lists and the metrics agree (guidebench's
    // own report keeps every record).
    let listed = |s: RequestStatus| -> Value {
        if requests == Requests::Left {
            return json!([]);
        }
        let inside =
            |r: &Req| r.end_time() >= window.0 && r.start.unwrap_or(r.end_time()) <= window.1;
        (reqs
            .iter()
            .filter(|r| r.status == s && (r.measured || !inside(r))))
        .map(Req::json)
        .collect()
    };
    let constraints = match report.config.get("constraints") {
        Some(Value::Array(items)) => items.get(index.min(items.len().saturating_sub(1))),
        other => other,
    };
    let constraints: Map<String, Value> = (constraints.map(constraint_args).into_iter().flatten())
        .map(|args| {
            let kind = args["kind"].as_str().unwrap_or_default().to_owned();
            (
                kind.clone(),
                json!({"type_": kind, "args": args, "current_index": index}),
            )
        })
        .collect();
    let mut environment = serde_json::to_value(&report.environment).unwrap_or(Value::Null);
    if let Some(env) = environment.as_object_mut() {
        env.remove("backend");
    }
    // GuideLLM writes `mean or -1.0`: unknown (and 0) as -1.
    let avg = |values: Vec<f64>| {
        let mean = values.iter().sum::<f64>() / count_as_f64(values.len().max(1));
        if mean == 0.0 { -1.0 } else { mean }
    };
    let targeted_delay = avg(reqs.iter().filter_map(Req::dispatch_delay).collect());
    let request_time = avg(reqs.iter().filter_map(Req::latency).collect());
    let exhausted = b.extra.get("stop_reason").and_then(Value::as_str) == Some("data_exhausted");
    json!({
        "type_": "generative_benchmark",
        "config": {
            "id_": format!("{run_id}-{index}"),
            "run_id": run_id,
            "run_index": index,
            "strategy": strategy,
            "constraints": constraints,
            "sample_size": null,
            "warmup": phase(report.config.get("warmup")),
            "cooldown": phase(report.config.get("cooldown")),
            "prefer_response_metrics": true,
            "slo": null,
            "confidence": CONFIDENCE,
            "warnings": [],
            "profile": profile,
            "requests": {"data": report.config.get("data")},
            "backend": backend_config(report, b.backend.as_deref()),
            "environment": environment,
        },
        "scheduler_state": {
            "start_time": run_start,
            "end_time": request_end,
            "start_requests_time": request_start,
            "end_requests_time": request_end,
            "end_queuing_constraints": {},
            "end_processing_constraints": {},
            "scheduler_constraints": {},
            "progress": {},
            "created_requests": reqs.len(),
            "processed_requests": reqs.len(),
            "successful_requests": made[0],
            "errored_requests": made[1],
            "cancelled_requests": made[2],
        },
        "scheduler_metrics": {
            "start_time": run_start,
            "request_start_time": request_start,
            "measure_start_time": window.0,
            "measure_end_time": window.1,
            "request_end_time": request_end,
            "end_time": request_end,
            "requests_made": {"successful": made[0], "errored": made[1], "incomplete": made[2], "total": reqs.len()},
            "generation_delay": Summary::from_values(&[], None, false).json(),
            "queued_time_avg": -1.0,
            "resolve_start_delay_avg": -1.0,
            "resolve_targeted_start_delay_avg": targeted_delay,
            "request_start_delay_avg": -1.0,
            "request_targeted_start_delay_avg": targeted_delay,
            "request_time_avg": request_time,
            "resolve_end_delay_avg": -1.0,
            "resolve_time_avg": request_time,
            "finalized_delay_avg": -1.0,
            "processed_delay_avg": -1.0,
            "dataset_incomplete": !exhausted,
            "strategy_type": strategy["type_"],
        },
        "metrics": metrics(&reqs, window, schedule),
        "requests": {
            "successful": listed(RequestStatus::Success),
            "errored": listed(RequestStatus::Error),
            "incomplete": listed(RequestStatus::Incomplete),
            "total": null,
        },
        "warnings": [],
        "start_time": window.0,
        "end_time": window.1,
        "duration": window.1 - window.0,
        "warmup_duration": window.0 - request_start,
        "cooldown_duration": request_end - window.1,
    })
}

// ---------------------------------------------------------------------------
// One request as GuideLLM sees it, with GuideLLM's derived values
// (`GenerativeRequestStats`' properties).

/// A count of samples or bytes as GuideLLM's float.
#[allow(clippy::cast_precision_loss)] // a clip's samples and bytes are far below 2^53.
fn amount_as_f64(n: u64) -> f64 {
    n as f64
}

struct Req<'a> {
    id: u64,
    status: RequestStatus,
    measured: bool,
    targeted: Option<f64>,
    start: Option<f64>,
    end: Option<f64>,
    resolve_end: f64,
    first: Option<f64>,
    first_output: Option<f64>,
    last: Option<f64>,
    iterations: u32,
    prompt: Option<u32>,
    /// (images, image tokens).
    images: Option<(u32, u32)>,
    /// The output usage: none for a failure that produced nothing, or for
    /// an embeddings or pooling answer.
    output: Option<u32>,
    text: Option<&'a str>,
    /// An embeddings or pooling answer: no output usage, not even words.
    pooled: bool,
    error: Option<&'a RequestError>,
    /// (conversation, turn index).
    turn: Option<(u64, u32)>,
    /// (tool calls, whether text came with them), for an answer to a
    /// request that offered tools.
    tools: Option<(u32, bool)>,
    /// The clip a request to an audio endpoint sent.
    audio: Option<CompactAudio>,
}

impl<'a> Req<'a> {
    /// `cut`: when the benchmark ended, the end of a request without one;
    /// `pooled`: the benchmark's answers were vectors (embeddings,
    /// pooling), which have no output usage at all, as GuideLLM writes them.
    fn of(records: &'a CompactRecords, r: &'a CompactRecord, cut: f64, pooled: bool) -> Self {
        let at = |o: Option<i64>| o.map(|o| micros_as_secs(records.origin_us.saturating_add(o)));
        let (start, end, first, last) = (
            at(r.start),
            at(r.end),
            at(r.first_token),
            at(r.last_token()),
        );
        let latest = [start, last, at(r.scheduled)]
            .into_iter()
            .flatten()
            .fold(cut, f64::max);
        Req {
            id: r.id,
            status: r.status,
            measured: r.excluded.is_none(),
            targeted: at(r.scheduled),
            start,
            end,
            resolve_end: end.unwrap_or(latest),
            first,
            first_output: r.reasoning.as_ref().map_or(first, |x| at(x.first_content)),
            last,
            iterations: u32::try_from(r.token_count()).unwrap_or(u32::MAX),
            prompt: r.prompt_tokens,
            images: r.images.map(|i| (i.count, i.tokens)),
            output: (!pooled && (r.output_tokens > 0 || r.status == RequestStatus::Success))
                .then_some(r.output_tokens),
            text: r.text.as_deref(),
            pooled,
            error: records.error_of(r),
            turn: r.turn.as_ref().map(|t| (t.conversation, t.index)),
            tools: r.tool_calls.as_ref().map(|t| (t.count, t.with_text)),
            audio: r.audio.as_deref().copied(),
        }
    }

    /// GuideLLM's input `text_tokens`: the prompt tokens less the image
    /// and audio tokens among them; none for a request to an audio
    /// endpoint whose prompt was all audio (GuideLLM's audio handler
    /// counts its prompt as `audio_tokens` only).
    fn input_text_tokens(&self) -> Option<u32> {
        let images = self.images.map_or(0, |i| i.1);
        let audio = self.audio_tokens().unwrap_or(0);
        let text = self
            .prompt
            .map(|p| p.saturating_sub(images).saturating_sub(audio));
        text.filter(|t| self.audio.is_none() || *t > 0)
    }
    /// GuideLLM's `audio_tokens`: the prompt tokens charged for the clip.
    fn audio_tokens(&self) -> Option<u32> {
        self.audio.and_then(|a| a.tokens)
    }
    /// GuideLLM's `audio_samples`.
    fn audio_samples(&self) -> Option<f64> {
        self.audio.and_then(|a| a.samples).map(amount_as_f64)
    }
    /// GuideLLM's `audio_seconds`.
    fn audio_seconds(&self) -> Option<f64> {
        self.audio.and_then(|a| a.seconds)
    }
    /// GuideLLM's `audio_bytes`.
    fn audio_bytes(&self) -> Option<f64> {
        self.audio.map(|a| amount_as_f64(a.bytes))
    }

    /// GuideLLM's `tool_call_count`: set on an answer with tool calls, and
    /// 0 on a turn that expected one.
    fn tool_call_count(&self) -> Option<u32> {
        self.tools.map(|(count, _)| count)
    }
    /// GuideLLM's `tool_call_tokens`: the output tokens of an answer made
    /// of tool calls only.
    fn tool_call_tokens(&self) -> Option<u32> {
        matches!(self.tools, Some((1.., false))).then(|| self.output_tokens().unwrap_or(0))
    }
    /// GuideLLM's `mixed_content_tool_tokens`: the output tokens of an
    /// answer with text and tool calls.
    fn mixed_content_tool_tokens(&self) -> Option<u32> {
        matches!(self.tools, Some((1.., true))).then(|| self.output_tokens().unwrap_or(0))
    }

    fn end_time(&self) -> f64 {
        self.end.unwrap_or(self.resolve_end)
    }
    fn latency(&self) -> Option<f64> {
        Some(self.end? - self.start?)
    }
    fn dispatch_delay(&self) -> Option<f64> {
        Some(self.start? - self.targeted?)
    }
    fn output_tokens(&self) -> Option<u32> {
        self.output
            .or((self.iterations > 0).then_some(self.iterations))
    }
    fn out(&self) -> f64 {
        f64::from(self.output_tokens().unwrap_or(0))
    }
    fn total_tokens(&self) -> Option<u32> {
        let (prompt, output) = (self.prompt, self.output_tokens());
        (prompt.is_some() || output.is_some())
            .then(|| prompt.unwrap_or(0).saturating_add(output.unwrap_or(0)))
    }
    fn ttft_ms(&self) -> Option<f64> {
        Some(1000.0 * (self.first? - self.start?))
    }
    fn ttfot_ms(&self) -> Option<f64> {
        Some(1000.0 * (self.first_output? - self.start?))
    }
    fn tpot_ms(&self) -> Option<f64> {
        let last = self.last.unwrap_or_else(|| self.end_time());
        (self.out() > 0.0).then_some(1000.0 * (last - self.start?) / self.out())
    }
    fn itl_ms(&self) -> Option<f64> {
        (self.out() > 1.0).then_some(1000.0 * (self.last? - self.first?) / (self.out() - 1.0))
    }
    /// GuideLLM's ITL weight: the output tokens after the first.
    fn itl(&self) -> Vec<(f64, f64)> {
        let tokens = if self.out() > 0.0 { self.out() } else { 1.0 };
        vec![(self.itl_ms().unwrap_or(0.0), tokens - 1.0)]
    }
    fn per_iteration(&self) -> Option<f64> {
        (self.out() > 1.0 && self.iterations > 1)
            .then(|| (self.out() - 1.0) / (f64::from(self.iterations) - 1.0))
    }
    fn prompt_timing(&self) -> (f64, f64) {
        (
            self.first.unwrap_or_else(|| self.end_time()),
            f64::from(self.prompt.unwrap_or(0)),
        )
    }
    /// The token iterations after the first, spaced evenly from the first
    /// to the last (numpy's `linspace`), as GuideLLM has no per-iteration times.
    fn iter_timings(&self) -> Vec<(f64, f64)> {
        let (Some(first), Some(last), Some(per)) = (self.first, self.last, self.per_iteration())
        else {
            return Vec::new();
        };
        let step = (last - first) / (f64::from(self.iterations) - 1.0);
        let at = |i: u32| {
            if i + 1 == self.iterations {
                last
            } else {
                f64::from(i) * step + first
            }
        };
        (1..self.iterations).map(|i| (at(i), per)).collect()
    }
    fn output_timings(&self) -> Vec<(f64, f64)> {
        match (self.first, self.last) {
            (Some(first), Some(_)) if self.iterations > 1 => {
                let one = if self.out() > 0.0 { 1.0 } else { 0.0 };
                std::iter::once((first, one))
                    .chain(self.iter_timings())
                    .collect()
            }
            _ => vec![(self.last.unwrap_or_else(|| self.end_time()), self.out())],
        }
    }

    fn json(&self) -> Value {
        let usage = |text: Option<u32>,
                     images: Option<(u32, u32)>,
                     counts: Option<(usize, usize)>| {
            let total = (text.is_some() || images.is_some())
                .then(|| text.unwrap_or(0).saturating_add(images.map_or(0, |i| i.1)));
            let (words, chars) = (counts.map(|c| c.0), counts.map(|c| c.1));
            let (images, image_tokens) = (images.map(|i| i.0), images.map(|i| i.1));
            json!({"text_tokens": text, "text_words": words, "text_characters": chars, "image_tokens": image_tokens, "image_count": images, "total_tokens": total})
        };
        let counts = self
            .text
            .filter(|_| !self.pooled)
            .map(|t| (t.split_whitespace().count(), t.chars().count()));
        let (status, error) = match self.status {
            RequestStatus::Success => ("completed", None),
            RequestStatus::Error => ("errored", Some(error_text(self.error))),
            RequestStatus::Incomplete => ("cancelled", None),
        };
        let latency = self.latency().filter(|l| *l != 0.0);
        let per_second = |n: Option<u32>| Some(f64::from(n?) / latency?);
        let id = self.id.to_string();
        let mut output_metrics = usage(self.output, None, counts);
        output_metrics["tool_call_tokens"] = json!(self.tool_call_tokens());
        output_metrics["mixed_content_tool_tokens"] = json!(self.mixed_content_tool_tokens());
        output_metrics["tool_call_count"] = json!(self.tool_call_count());
        let mut input_metrics = usage(self.input_text_tokens(), self.images, None);
        if let Some(audio) = &self.audio {
            // GuideLLM's total counts every modality's tokens.
            let total = [
                self.input_text_tokens(),
                self.images.map(|i| i.1),
                audio.tokens,
            ]
            .into_iter()
            .flatten()
            .fold(None, |sum: Option<u32>, t| {
                Some(sum.unwrap_or(0).saturating_add(t))
            });
            input_metrics["audio_tokens"] = json!(audio.tokens);
            input_metrics["audio_samples"] = json!(audio.samples);
            input_metrics["audio_seconds"] = json!(audio.seconds);
            input_metrics["audio_bytes"] = json!(audio.bytes);
            input_metrics["total_tokens"] = json!(total);
        }
        json!({
            "type_": "generative_request_stats",
            "request_id": id,
            "output": self.text,
            "info": {
                "request_id": id,
                "conversation_id": self.turn.map(|t| t.0.to_string()),
                "turn_index": self.turn.map_or(0, |t| t.1),
                "preceding_nodes": self.turn.map_or(0, |t| t.1),
                "status": status,
                "timings": {
                    "targeted_start": self.targeted,
                    "resolve_start": self.start,
                    "request_start": self.start,
                    "first_token_iteration": self.first,
                    "first_output_token_iteration": self.first_output,
                    "last_token_iteration": self.last,
                    "request_iterations": self.iterations,
                    "token_iterations": self.iterations,
                    "request_end": self.end,
                    "resolve_end": self.resolve_end,
                },
                "error": error,
                "started_at": self.start,
                "completed_at": self.end_time(),
            },
            "input_metrics": input_metrics,
            "output_metrics": output_metrics,
            "request_start_time": self.start,
            "request_end_time": self.end_time(),
            "request_latency": self.latency(),
            "request_dispatch_delay": self.dispatch_delay(),
            "turn_predecessor_delay": self.dispatch_delay().map(|_| 0.0),
            "turn_scheduling_delay": self.dispatch_delay(),
            "request_scheduled_latency": self.end.zip(self.targeted).map(|(e, t)| e - t),
            "prompt_tokens": self.prompt,
            "output_tokens": self.output_tokens(),
            "total_tokens": self.total_tokens(),
            "time_to_first_token_ms": self.ttft_ms(),
            "time_per_output_token_ms": self.tpot_ms(),
            "inter_token_latency_ms": self.itl_ms(),
            "tokens_per_second": per_second(self.total_tokens()),
            "output_tokens_per_second": per_second(self.output_tokens()),
            "time_to_first_output_token_ms": self.ttfot_ms(),
            "iter_tokens_per_iteration": self.per_iteration(),
            "output_tokens_per_iteration": self.output_tokens().filter(|_| self.iterations > 0).map(|n| f64::from(n) / f64::from(self.iterations)),
        })
    }
}

/// A failed request's error as GuideLLM's text, the exception's class and
/// message (`EnginePanic("…")`, `HTTPStatusError("status '503': …")`), as
/// [`super::guidellm`] reads back label and status.
fn error_text(error: Option<&RequestError>) -> String {
    let Some(e) = error else {
        return "Error(\"unknown\")".to_owned();
    };
    let class: String = match e.label.as_str() {
        "http_status" => "HTTPStatusError".to_owned(),
        label => (label.split('_'))
            .flat_map(|w| {
                w.chars()
                    .take(1)
                    .flat_map(char::to_uppercase)
                    .chain(w.chars().skip(1))
            })
            .collect(),
    };
    match e.status {
        Some(status) if e.label == "http_status" => {
            format!("{class}(\"status '{status}': {}\")", e.message)
        }
        _ => format!("{class}(\"{}\")", e.message),
    }
}

// ---------------------------------------------------------------------------
// GenerativeMetrics.compile, over the measured requests.

/// Requests by status, in GuideLLM's order: successful, incomplete, errored.
type Groups<'r, 'a> = [Vec<&'r Req<'a>>; 3];

/// The measured requests that overlap `window` (GuideLLM's
/// `get_within_range`), a request without a start counting at its end.
fn groups<'r, 'a>(
    reqs: &'r [Req<'a>],
    window: (f64, f64),
    start: impl Fn(&Req) -> Option<f64>,
    end: impl Fn(&Req) -> Option<f64>,
) -> Groups<'r, 'a> {
    let mut out: Groups = [Vec::new(), Vec::new(), Vec::new()];
    for r in reqs.iter().filter(|r| r.measured) {
        let Some(e) = end(r) else { continue };
        if e >= window.0 && start(r).unwrap_or(e) <= window.1 {
            let slot = match r.status {
                RequestStatus::Success => 0,
                RequestStatus::Incomplete => 1,
                RequestStatus::Error => 2,
            };
            out[slot].push(r);
        }
    }
    out
}

/// One list per status of what `f` gives each request.
fn collect<T>(g: &Groups, f: impl Fn(&Req) -> Vec<T>) -> [Vec<T>; 3] {
    g.each_ref()
        .map(|list| list.iter().flat_map(|r| f(r)).collect())
}

/// GuideLLM's `StatusDistributionSummary` of per-status lists.
fn by_status<T: Clone>(lists: &[Vec<T>; 3], f: impl Fn(&[T]) -> Summary) -> Value {
    let total = lists.concat();
    json!({"successful": f(&lists[0]).json(), "errored": f(&lists[2]).json(), "incomplete": f(&lists[1]).json(), "total": f(&total).json()})
}

/// `from_values_function`: one value per request (`None` skipped).
fn values(g: &Groups, ci: bool, f: impl Fn(&Req) -> Option<f64>) -> Value {
    weighted(g, ci, |r| f(r).map(|v| (v, 1.0)).into_iter().collect())
}

/// `from_values_function` with (value, weight) pairs.
fn weighted(g: &Groups, ci: bool, f: impl Fn(&Req) -> Vec<(f64, f64)>) -> Value {
    by_status(&collect(g, f), |v| Summary::from_values(v, None, ci))
}

/// `rate_distribution_from_timings_function`: (time, amount) events.
fn rates(g: &Groups, window: (f64, f64), f: impl Fn(&Req) -> Vec<(f64, f64)>) -> Value {
    by_status(&collect(g, f), |v| rate_summary(v, Some(window)))
}

fn totals(g: &Groups) -> Value {
    let n = g.iter().map(Vec::len).sum::<usize>();
    json!({"successful": g[0].len(), "errored": g[2].len(), "incomplete": g[1].len(), "total": n})
}

fn metrics(reqs: &[Req], window: (f64, f64), schedule: bool) -> Value {
    let all = groups(reqs, window, |r| r.start, |r| Some(r.end_time()));
    let first = groups(reqs, window, |r| r.start, |r| r.first);
    let after_first = groups(reqs, window, |r| r.first, |r| Some(r.end_time()));
    let first_output = groups(reqs, window, |r| r.start, |r| r.first_output);
    let zero = |v: Option<f64>| Some(v.unwrap_or(0.0));
    // Schedule-relative metrics only for strategies with an arrival schedule.
    let scheduled = |ci: bool, f: &dyn Fn(&Req) -> Option<f64>| {
        if schedule {
            values(&all, ci, f)
        } else {
            Value::Null
        }
    };
    let roots: Vec<(f64, f64)> = (all.iter().flatten())
        .filter(|r| r.turn.is_none_or(|t| t.1 == 0))
        .filter_map(|r| Some((r.dispatch_delay()?, 1.0)))
        .collect();
    let spans = collect(&all, |r| {
        r.start
            .map(|s| (s, r.end_time(), 1.0))
            .into_iter()
            .collect()
    });
    let nobody: Groups = Default::default();
    let none = || summary_of(&nobody, |_| (None, None));
    let nulls =
        |keys: &[&str]| Value::Object(keys.iter().map(|k| ((*k).to_owned(), none())).collect());
    json!({
        "request_totals": totals(&all),
        "requests_per_second": rates(&all, window, |r| vec![(r.end_time(), 1.0)]),
        "request_concurrency": by_status(&spans, |v| concurrency_summary(v, Some(window))),
        "request_latency": values(&all, true, |r| zero(r.latency())),
        "request_dispatch_delay": scheduled(true, &|r| r.dispatch_delay()),
        "request_scheduled_latency": scheduled(true, &|r| Some(r.end? - r.targeted?)),
        "turn_predecessor_delay": scheduled(false, &|r| r.dispatch_delay().map(|_| 0.0)),
        "turn_scheduling_delay": scheduled(false, &|r| r.dispatch_delay()),
        "root_dispatch_delay": (!roots.is_empty()).then(|| Summary::from_values(&roots, None, false).json()),
        "request_streaming_iterations_count": values(&all, true, |r| Some(f64::from(r.iterations))),
        "prompt_token_count": values(&all, true, |r| Some(r.prompt.map_or(0.0, f64::from))),
        "output_token_count": values(&all, true, |r| Some(r.out())),
        "total_token_count": values(&all, true, |r| Some(r.total_tokens().map_or(0.0, f64::from))),
        "time_to_first_token_ms": values(&first, true, |r| zero(r.ttft_ms())),
        "time_to_first_output_token_ms": values(&first_output, true, |r| zero(r.ttfot_ms())),
        "time_per_output_token_ms": weighted(&all, false, |r| vec![(r.tpot_ms().unwrap_or(0.0), r.out())]),
        "inter_token_latency_ms": weighted(&after_first, false, |r| r.itl()),
        "time_to_last_round_trip_ms": values(&all, true, |_| Some(0.0)),
        "avg_round_trip_time_ms": values(&all, true, |_| Some(0.0)),
        "prompt_tokens_per_second": rates(&all, window, |r| vec![r.prompt_timing()]),
        "output_tokens_per_second": rates(&all, window, |r| r.output_timings()),
        "tokens_per_second": rates(&all, window, |r| std::iter::once(r.prompt_timing()).chain(r.output_timings()).collect()),
        "output_tokens_per_iteration": weighted(&all, false, |r| r.output_timings().into_iter().map(|(_, n)| (n, 1.0)).collect()),
        "iter_tokens_per_iteration": weighted(&all, false, |r| r.iter_timings().into_iter().map(|(_, n)| (n, 1.0)).collect()),
        "text": {
            "tokens": summary_of(&all, |r| (r.input_text_tokens().map(f64::from), r.output.map(f64::from))),
            "words": summary_of(&all, |r| (None, r.text.map(|t| count_as_f64(t.split_whitespace().count())))),
            "characters": summary_of(&all, |r| (None, r.text.map(|t| count_as_f64(t.chars().count())))),
        },
        "image": {
            "tokens": summary_of(&all, |r| (r.images.map(|i| f64::from(i.1)), None)),
            "images": summary_of(&all, |r| (r.images.map(|i| f64::from(i.0)), None)),
            "pixels": none(),
            "bytes": none(),
        },
        "video": nulls(&["tokens", "frames", "seconds", "bytes"]),
        "audio": {
            "tokens": summary_of(&all, |r| (r.audio_tokens().map(f64::from), None)),
            "samples": summary_of(&all, |r| (r.audio_samples(), None)),
            "seconds": summary_of(&all, |r| (r.audio_seconds(), None)),
            "bytes": summary_of(&all, |r| (r.audio_bytes(), None)),
        },
        "tool_call": {
            "tokens": summary_of(&all, |r| (None, r.tool_call_tokens().map(f64::from))),
            "mixed_tokens": summary_of(&all, |r| (None, r.mixed_content_tool_tokens().map(f64::from))),
            "count": summary_of(&all, |r| (None, r.tool_call_count().map(f64::from))),
        },
        "turns": turns(&all, &first, &after_first),
        "slo_attainment": null,
        "slo_determined_requests": 0,
        "request_goodput": null,
    })
}

/// Per status, each request's (start, end, value) of one usage property.
type Rows = [Vec<(f64, f64, Option<f64>)>; 3];

/// `GenerativeMetricsSummary.compile` for one usage property: `f` gives a
/// request's (input, output) value; rates and concurrency without a window.
fn summary_of(g: &Groups, f: impl Fn(&Req) -> (Option<f64>, Option<f64>)) -> Value {
    let rows = |output: bool| -> Rows {
        collect(g, |r| {
            let (input, out) = f(r);
            let start = r
                .start
                .filter(|s| *s != 0.0 && (input.is_some() || out.is_some()));
            start
                .map(|s| (s, r.end_time(), if output { out } else { input }))
                .into_iter()
                .collect()
        })
    };
    let some = |rows: &Rows| rows.iter().flatten().any(|r| r.2.is_some());
    let (input, output) = (rows(false), rows(true));
    let total = (some(&input) && some(&output))
        .then(|| [0, 1, 2].map(|s| [input[s].clone(), output[s].clone()].concat()));
    let mut out = Map::new();
    for (name, rows) in [
        ("input", Some(input)),
        ("output", Some(output)),
        ("total", total),
    ] {
        let parts = rows.filter(some).map(|r| {
            let values = r.each_ref().map(|l| {
                l.iter()
                    .filter_map(|x| Some((x.2?, 1.0)))
                    .collect::<Vec<_>>()
            });
            let rates = r.each_ref().map(|l| {
                l.iter()
                    .map(|x| (x.1, x.2.unwrap_or(0.0)))
                    .collect::<Vec<_>>()
            });
            let spans = r.each_ref().map(|l| {
                l.iter()
                    .map(|x| (x.0, x.1, x.2.unwrap_or(0.0)))
                    .collect::<Vec<_>>()
            });
            [
                by_status(&values, |v| Summary::from_values(v, None, false)),
                by_status(&rates, |v| rate_summary(v, None)),
                by_status(&spans, |v| concurrency_summary(v, None)),
            ]
        });
        let [values, rates, spans] = parts.unwrap_or([Value::Null, Value::Null, Value::Null]);
        out.insert(name.into(), values);
        out.insert(format!("{name}_per_second"), rates);
        out.insert(format!("{name}_concurrency"), spans);
    }
    Value::Object(out)
}

/// `GenerativeTurnMetrics.compile_by_turn`: `null` unless some request is
/// a later turn of a conversation.
fn turns(all: &Groups, first: &Groups, after_first: &Groups) -> Value {
    let turn = |r: &&Req| r.turn.map_or(0, |t| t.1);
    let mut indices: Vec<u32> = [all, first, after_first]
        .iter()
        .flat_map(|g| g.iter().flatten())
        .map(turn)
        .collect();
    indices.sort_unstable();
    indices.dedup();
    if indices.iter().all(|&t| t == 0) {
        return Value::Null;
    }
    let turns = indices.into_iter().map(|t| {
        let (a, f, i) = (at_turn(all, t), at_turn(first, t), at_turn(after_first, t));
        json!({
            "turn_index": t,
            "request_totals": totals(&a),
            "request_latency": values(&a, false, |r| Some(r.latency().unwrap_or(0.0))),
            "prompt_token_count": values(&a, false, |r| Some(r.prompt.map_or(0.0, f64::from))),
            "time_to_first_token_ms": values(&f, false, |r| Some(r.ttft_ms().unwrap_or(0.0))),
            "inter_token_latency_ms": weighted(&i, false, |r| r.itl()),
        })
    });
    Value::Array(turns.collect())
}

/// The requests of turn index `turn`.
fn at_turn<'r, 'a>(g: &Groups<'r, 'a>, turn: u32) -> Groups<'r, 'a> {
    g.each_ref().map(|l| {
        l.iter()
            .copied()
            .filter(|r| r.turn.map_or(0, |t| t.1) == turn)
            .collect()
    })
}

// ---------------------------------------------------------------------------
// GuideLLM's statistics (schemas/base/statistics.py), ported.

/// GuideLLM's `DistributionSummary` (without a `pdf`).
#[derive(Debug, Clone, Default, PartialEq)]
struct Summary {
    mean: f64,
    median: f64,
    mode: f64,
    variance: f64,
    std_dev: f64,
    min: f64,
    max: f64,
    count: u64,
    percentiles: [f64; 11],
    mean_ci: Option<Interval>,
    percentile_cis: Option<[Option<Interval>; 11]>,
}

/// A sum of weights as a count, rounded as Python's `round` (halves to even).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped into u64's range.
fn rounded(weights: f64) -> u64 {
    weights.round_ties_even().clamp(0.0, 1.8e19) as u64
}

impl Summary {
    /// `DistributionSummary.from_values`: (value, weight) pairs, equal
    /// values merged and zero weights dropped; `count` defaults to the
    /// rounded sum of the weights; intervals only with `uncertainty`
    /// (GuideLLM's `SampleUncertainty`).
    fn from_values(values: &[(f64, f64)], count: Option<u64>, uncertainty: bool) -> Self {
        if values.is_empty() {
            return Summary::default();
        }
        let intervals = if uncertainty {
            estimate(values)
        } else {
            (None, None)
        };
        let count = count.unwrap_or_else(|| rounded(values.iter().map(|v| v.1).sum()));
        let mut sorted = values.to_vec();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut pdf = merge_equal(&sorted);
        pdf.retain(|p| p.1 > 0.0);
        if pdf.iter().map(|p| p.1).sum::<f64>() <= EPSILON {
            pdf.iter_mut().for_each(|p| p.1 = 1.0);
        }
        let total: f64 = pdf.iter().map(|p| p.1).sum();
        pdf.iter_mut().for_each(|p| p.1 /= total);
        Summary::from_pdf(&pdf, count, intervals)
    }

    /// `DistributionSummary.from_pdf` of sorted (value, probability) pairs,
    /// with `Percentiles.from_pdf`: a percentile is the first value whose
    /// cumulative probability reaches it.
    fn from_pdf(
        pdf: &[(f64, f64)],
        count: u64,
        cis: (Option<Interval>, Option<[Option<Interval>; 11]>),
    ) -> Self {
        let (mean_ci, percentile_cis) = cis;
        let (Some(&(min, _)), Some(&(max, _))) = (pdf.first(), pdf.last()) else {
            return Summary {
                count,
                mean_ci,
                percentile_cis,
                ..Summary::default()
            };
        };
        let cdf: Vec<f64> = (pdf.iter())
            .scan(0.0, |sum, p| {
                *sum += p.1;
                Some(*sum)
            })
            .collect();
        let percentiles =
            PERCENTILES.map(|(_, q)| pdf[cdf.partition_point(|&c| c < q).min(pdf.len() - 1)].0);
        let mean: f64 = pdf.iter().map(|(v, p)| v * p).sum();
        let mode = pdf.iter().fold((min, f64::NEG_INFINITY), |best, &(v, p)| {
            if p > best.1 { (v, p) } else { best }
        });
        let variance: f64 = pdf.iter().map(|(v, p)| (v - mean).powi(2) * p).sum();
        let std_dev = variance.sqrt();
        let median = percentiles[5];
        Summary {
            mean,
            median,
            mode: mode.0,
            variance,
            std_dev,
            min,
            max,
            count,
            percentiles,
            mean_ci,
            percentile_cis,
        }
    }

    fn json(&self) -> Value {
        let ci = |i: Option<Interval>| i.map(|i| json!({"lower": i.lower, "upper": i.upper}));
        let keys = PERCENTILES.iter().map(|(k, _)| (*k).to_owned());
        let percentiles: Map<String, Value> = keys
            .clone()
            .zip(self.percentiles.map(|p| json!(p)))
            .collect();
        let cis = (self.percentile_cis)
            .map(|cis| keys.zip(cis.map(|c| json!(ci(c)))).collect::<Map<_, _>>());
        #[allow(clippy::cast_precision_loss)] // counts far below 2^53.
        let total_sum = self.mean * self.count as f64;
        json!({
            "mean": self.mean, "median": self.median, "mode": self.mode, "variance": self.variance,
            "std_dev": self.std_dev, "min": self.min, "max": self.max, "count": self.count,
            "total_sum": total_sum, "percentiles": percentiles, "pdf": null,
            "mean_ci": ci(self.mean_ci), "percentile_cis": cis,
        })
    }
}

/// `SampleUncertainty.estimate`: intervals of the mean and of every
/// percentile, for two or more observations of weight 1.
fn estimate(values: &[(f64, f64)]) -> (Option<Interval>, Option<[Option<Interval>; 11]>) {
    if values.len() < 2 || values.iter().any(|v| v.1 != 1.0) {
        return (None, None);
    }
    let mut sorted: Vec<f64> = values.iter().map(|v| v.0).collect();
    let mean = mean_interval(&sorted, CONFIDENCE);
    sorted.sort_by(f64::total_cmp);
    (
        mean,
        Some(PERCENTILES.map(|(_, q)| quantile_interval(&sorted, q * 100.0, CONFIDENCE))),
    )
}

/// Sorted (key, weight) pairs with equal keys summed (`np.unique`).
fn merge_equal(sorted: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(sorted.len());
    for &(t, w) in sorted {
        match out.last_mut() {
            Some(last) if last.0 == t => last.1 += w,
            _ => out.push((t, w)),
        }
    }
    out
}

/// `_merge_sorted_times_with_weights` of (time, weight) pairs: equal times
/// summed, then each time within `THRESHOLD` of a group's first (through
/// gaps of at most `THRESHOLD`) merged into that first time.
fn merge_times(mut times: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(times.len());
    let (mut group, mut previous) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for (t, w) in merge_equal(&times) {
        match merged.last_mut() {
            Some(last) if t - previous <= THRESHOLD && t <= group + THRESHOLD => last.1 += w,
            _ => {
                merged.push((t, w));
                group = t;
            }
        }
        previous = t;
    }
    merged
}

/// `DistributionSummary.rate_distribution_from_timings`: (time, amount)
/// events as rates over the time around each, weighted by that time.
fn rate_summary(events: &[(f64, f64)], window: Option<(f64, f64)>) -> Summary {
    let events = match window {
        Some((start, end)) => (std::iter::once((start, 0.0))
            .chain(events.iter().copied().filter(|e| e.0 >= start)))
        .filter(|e| e.0 <= end)
        .chain(std::iter::once((end, 0.0)))
        .collect(),
        None => events.to_vec(),
    };
    let times = merge_times(events);
    let n = times.len();
    if n <= 1 {
        return Summary::default();
    }
    let mid = |i: usize| (times[i].0 + times[i + 1].0) / 2.0;
    let duration = |i: usize| match i {
        0 => mid(0) - times[0].0,
        i if i == n - 1 => (times[i].0 - mid(i - 1)).max(EPSILON),
        i => mid(i) - mid(i - 1),
    };
    let rates: Vec<(f64, f64)> = (0..n)
        .map(|i| (times[i].1 / duration(i), duration(i)))
        .collect();
    Summary::from_values(
        &rates,
        Some(rounded(times.iter().map(|t| t.1).sum())),
        false,
    )
}

/// `DistributionSummary.concurrency_distribution_from_timings`: how many
/// (start, end, weight) intervals are open over time, weighted by how long
/// each level lasts.
fn concurrency_summary(intervals: &[(f64, f64, f64)], window: Option<(f64, f64)>) -> Summary {
    let kept: Vec<_> = (intervals.iter())
        .filter(|i| window.is_none_or(|(start, end)| i.1 >= start && i.0 <= end))
        .collect();
    let count = u64::try_from(kept.len()).unwrap_or(u64::MAX);
    let changes = kept
        .iter()
        .map(|i| (i.0, i.2))
        .chain(kept.iter().map(|i| (i.1, -i.2)));
    let mut times = merge_times(changes.collect());
    if let (Some((start, end)), false) = (window, times.is_empty()) {
        let at = times.partition_point(|t| t.0 < start);
        let prior: f64 = times[..at].iter().map(|t| t.1).sum();
        times.splice(..at, [(start, prior)]);
        times.truncate(times.partition_point(|t| t.0 <= end));
        times.push((end, 0.0));
    }
    let levels: Vec<f64> = (times.iter())
        .scan(0.0, |level, t| {
            *level += t.1;
            Some(level.max(0.0))
        })
        .collect();
    if levels.len() <= 1 {
        let one: Vec<(f64, f64)> = levels
            .first()
            .filter(|_| count > 0)
            .map(|&l| (l, 1.0))
            .into_iter()
            .collect();
        return Summary::from_values(&one, None, false);
    }
    let spans: Vec<(f64, f64)> = times
        .windows(2)
        .zip(&levels)
        .map(|(w, &l)| (l, (w[1].0 - w[0].0).max(0.0)))
        .collect();
    if spans.iter().any(|s| s.1 > 0.0) {
        Summary::from_values(&spans, Some(count), false)
    } else {
        Summary::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Distribution;
    use crate::record::compact::CompactReasoning;
    use crate::record::{CompactImages, CompactTurn, Excluded};
    use crate::report::guidellm::from_guidellm;
    use crate::report::tests::{ms, sample_report, served_at};
    use crate::report::{BackendRun, StatusMetrics};
    use guidebench_core::request::RequestRecord;

    /// Equal to a microsecond (float Unix seconds hold today's times to
    /// about 0.24 µs) for times, and exactly for counts of tokens.
    fn close(a: f64, b: f64, what: &str) {
        assert!((a - b).abs() <= 1e-6 + 1e-9 * b.abs(), "{what}: {a} != {b}");
    }

    /// Equal means and (where `percentiles`) percentiles.
    fn same(a: &Distribution, b: &Distribution, percentiles: bool, what: &str) {
        close(a.mean, b.mean, what);
        if percentiles {
            for ((p, x), (_, y)) in a.percentiles.iter().zip(&b.percentiles) {
                close(*x, *y, &format!("{what} p{p}"));
            }
        }
    }

    /// The sample report with its second benchmark named as its strategy,
    /// a warm-up record sent before the window and another that overlaps it.
    fn named_report() -> Report {
        let mut report = sample_report();
        let second = &mut report.benchmarks[1];
        second.name = "concurrent@4".into();
        let mut early = CompactRecords::from_records(
            ms(0),
            &[served_at(30, 1_700, &[1_740, 1_750], 1_760, 64)],
        );
        early.records[0].excluded = Some(Excluded::Warmup);
        let mut overlapping = CompactRecords::from_records(
            ms(0),
            &[served_at(31, 1_900, &[1_950, 2_050], 2_060, 64)],
        );
        overlapping.records[0].excluded = Some(Excluded::Warmup);
        second.records.merge(&early);
        second.records.merge(&overlapping);
        second.recompute();
        report
    }

    #[test]
    fn tool_calls_are_written_under_guidellms_tool_call_names() {
        use guidebench_core::request::ToolCallOutput;
        let tools = |count, with_text| {
            Some(ToolCallOutput {
                count,
                with_text,
                first: Some(ms(50)),
                calls: Vec::new(),
            })
        };
        let mut only = served_at(1, 0, &[50, 60, 70], 80, 10);
        only.tool_calls = tools(1, false);
        let mut mixed = served_at(2, 0, &[50, 60], 80, 10);
        mixed.tool_calls = tools(2, true);
        let mut missing = served_at(3, 0, &[50], 80, 10);
        missing.tool_calls = tools(0, true);
        let plain = served_at(4, 0, &[50], 80, 10);
        let mut report = sample_report();
        report.benchmarks.truncate(1);
        report.benchmarks[0] = crate::report::BenchmarkReport::from_records(
            "synchronous",
            "synchronous".into(),
            ms(0),
            ms(1_000),
            &[only, mixed, missing, plain],
        );
        let value = to_guidellm(&report);
        let benchmark = &value["benchmarks"][0];
        let tool_call = &benchmark["metrics"]["tool_call"];
        let mean = |name: &str| tool_call[name]["output"]["successful"]["mean"].as_f64();
        assert_eq!(mean("count"), Some(1.0), "1, 2 and the missing call's 0");
        assert_eq!(tool_call["count"]["output"]["successful"]["count"], 3);
        assert_eq!(
            mean("tokens"),
            Some(3.0),
            "the tool-only answer's output tokens"
        );
        assert_eq!(mean("mixed_tokens"), Some(2.0));
        let requests = benchmark["requests"]["successful"]
            .as_array()
            .expect("requests");
        let output = |id: &str| {
            requests
                .iter()
                .find(|r| r["request_id"] == id)
                .map(|r| r["output_metrics"].clone())
                .expect("the request")
        };
        assert_eq!(output("1")["tool_call_count"], 1);
        assert_eq!(output("1")["tool_call_tokens"], 3);
        assert_eq!(output("1")["mixed_content_tool_tokens"], Value::Null);
        assert_eq!(output("2")["mixed_content_tool_tokens"], 2);
        assert_eq!(output("3")["tool_call_count"], 0);
        assert_eq!(output("4")["tool_call_count"], Value::Null);
    }

    #[test]
    fn a_report_converted_to_guidellm_reads_back_with_the_same_counts_and_latencies() {
        let report = named_report();
        let value = to_guidellm(&report);
        let back = from_guidellm(value.clone(), "test").expect("reads back");
        assert_eq!(back.benchmarks.len(), 2);
        for (ours, theirs) in report.benchmarks.iter().zip(&back.benchmarks) {
            assert_eq!(theirs.name, ours.name);
            let (a, b) = (&ours.metrics, &theirs.metrics);
            for (x, y, status) in [
                (&a.successful, &b.successful, "successful"),
                (&a.errored, &b.errored, "errored"),
                (&a.incomplete, &b.incomplete, "incomplete"),
                (&a.all, &b.all, "all"),
            ] {
                assert_eq!(x.count, y.count, "{} {status}", ours.name);
            }
            assert_eq!(b.errors_by_label, a.errors_by_label);
            let (x, y) = (&a.successful, &b.successful);
            // Every successful request has the same timings: GuideLLM's
            // percentiles and guidebench's interpolated ones agree.
            same(&x.latency, &y.latency, true, "latency");
            same(&x.ttft, &y.ttft, true, "ttft");
            same(&x.itl_per_request, &y.itl_per_request, true, "itl");
            same(&x.tpot, &y.tpot, true, "tpot");
            same(&x.prompt_tokens, &y.prompt_tokens, true, "prompt tokens");
            same(&x.output_tokens, &y.output_tokens, true, "output tokens");
            same(
                &a.errored.latency,
                &b.errored.latency,
                true,
                "errored latency",
            );
        }
        // The warm-up record GuideLLM's window would measure is left out;
        // the one before the window is kept, and read back as warm-up.
        let listed = &value["benchmarks"][1]["requests"]["successful"];
        let ids: Vec<&str> = listed
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|r| r["request_id"].as_str())
            .collect();
        assert!(ids.contains(&"30") && !ids.contains(&"31"), "{ids:?}");
        assert_eq!(back.benchmarks[1].warmup_excluded, Some(1));
        assert_eq!(
            value["benchmarks"][1]["scheduler_metrics"]["requests_made"]["total"],
            14
        );
    }

    #[test]
    fn only_guidellm_fields_are_written_at_the_top_of_the_document() {
        let value = to_guidellm(&sample_report());
        let keys: Vec<&String> = value.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["metadata", "config", "benchmarks", "conclusions"]);
        assert_eq!(value["metadata"]["version"], 2);
        assert_eq!(value["metadata"]["guidellm_version"], "0.8.1");
        let spec = &value["config"]["spec"];
        // An in-process engine has no GuideLLM backend: openai_http, no target.
        assert_eq!(
            spec["backend"],
            json!({"kind": "openai_http", "target": "", "model": ""})
        );
        assert_eq!(spec["data"][0]["kind"], "in_memory_item_list");
        let benchmark = &value["benchmarks"][0];
        assert_eq!(benchmark["config"]["backend"]["kind"], "offline");
        assert_eq!(benchmark["config"]["strategy"]["type_"], "synchronous");
        assert!(
            benchmark["metrics"]["request_dispatch_delay"].is_null(),
            "no arrival schedule"
        );
    }

    #[test]
    fn a_served_backend_and_its_profile_constraints_and_data_map_to_guidellm_arguments() {
        let mut report = sample_report();
        report.config = json!({
            "backend": {"kind": "openai_http", "target": "http://h:8000", "model": "m", "request_format": "text",
                        "timeout": "30s", "validate": false, "api_key": "[redacted]"},
            "data": [{"kind": "synthetic_text", "prompt_tokens": 16, "output_tokens": 8, "output_tokens_stdev": 2.5,
                      "turn_delay": "250ms", "on_error": "fail"},
                     {"kind": "file", "path": "prompts.jsonl"}, {"kind": "hf", "source": "org/set"}],
            "constraints": [{"max_requests": 20, "max_duration": {"secs": 2, "nanos": 500_000_000},
                             "max_error_rate": {"rate": 0.5, "window": 10}},
                            {"max_requests": 30, "max_duration": {"secs": 2, "nanos": 500_000_000}}],
            "warmup": {"requests": 2}, "seed": 7, "labels": {"team": "perf"},
        });
        report.benchmarks[0].profile =
            json!({"kind": "constant", "rate": 2.0, "max_concurrency": null});
        report.benchmarks[1].profile =
            json!({"kind": "constant", "rate": 4.0, "max_concurrency": null});
        let value = to_guidellm(&report);
        let spec = &value["config"]["spec"];
        assert_eq!(
            spec["backend"],
            json!({"target": "http://h:8000", "model": "m", "validate_backend": false,
            "timeout": 30.0, "kind": "openai_http", "request_format": "/v1/completions"})
        );
        assert_eq!(spec["profile"]["rate"], json!([2.0, 4.0]));
        assert_eq!(
            spec["profile"]["warmup"],
            json!({"percent": null, "value": 2, "mode": "requests"})
        );
        assert_eq!(value["config"]["benchmarks"], json!([null]));
        assert_eq!(spec["constraints"][0]["count"], json!([20, 30]));
        assert_eq!(spec["constraints"][1]["seconds"], json!(2.5));
        assert_eq!(
            spec["data"],
            json!([
            {"prompt_tokens": 16, "output_tokens": 8, "output_tokens_stdev": 3.0, "delay": 0.25, "kind": "synthetic_text"},
            {"kind": "json_file", "path": "prompts.jsonl"}, {"kind": "huggingface", "source": "org/set"}])
        );
        assert_eq!(spec["seed"], json!({"kind": "static", "value": 7}));
        assert_eq!(
            value["config"]["metadata"]["labels"],
            json!({"team": "perf"})
        );
        let second = &value["benchmarks"][1]["config"];
        assert_eq!(second["constraints"]["max_requests"]["args"]["count"], 30);
        assert!(second["constraints"].get("max_error_rate").is_none());
        assert!(value["benchmarks"][1]["metrics"]["request_dispatch_delay"].is_object());
        // Strategies of different kinds: the first, then one override each.
        report.benchmarks[1].profile = json!({"kind": "concurrent", "streams": 4});
        let value = to_guidellm(&report);
        assert_eq!(value["config"]["spec"]["profile"]["kind"], "constant");
        assert_eq!(
            value["config"]["benchmarks"][1]["profile"]["streams"],
            json!([4])
        );
        // A side-by-side benchmark carries its own backend.
        report.backends.push(BackendRun {
            label: "b".into(),
            config: json!({"kind": "offline", "engine": "mock"}),
            environment: Map::from_iter([("model".to_owned(), json!("tiny"))]),
            interrupted: false,
            failure: None,
            conclusion: None,
        });
        report.benchmarks[1].backend = Some("b".into());
        let value = to_guidellm(&report);
        assert_eq!(
            value["benchmarks"][1]["config"]["backend"],
            json!({"kind": "offline", "engine": "mock", "model": "tiny"})
        );
    }

    /// A run with an HTTP error status and an engine panic.
    fn failures_report() -> Report {
        let mut report = sample_report();
        let mut records = vec![served_at(1, 0, &[10, 20], 30, 8)];
        let mut failed =
            RequestRecord::error(2, &guidebench_core::Error::ShuttingDown, ms(5), ms(9));
        let mut http = RequestError::new("http_status", "HTTP 503 from the server");
        http.status = Some(503);
        failed.error = Some(http);
        records.push(failed);
        records.push(RequestRecord::error(
            3,
            &guidebench_core::Error::EnginePanic("boom".into()),
            ms(6),
            ms(8),
        ));
        report.benchmarks = vec![BenchmarkReport::from_records(
            "synchronous",
            "synchronous".into(),
            ms(0),
            ms(40),
            &records,
        )];
        report
    }

    #[test]
    fn failures_read_back_with_their_label_and_http_status() {
        let value = to_guidellm(&failures_report());
        let errored = &value["benchmarks"][0]["requests"]["errored"];
        assert_eq!(
            errored[0]["info"]["error"],
            "HTTPStatusError(\"status '503': HTTP 503 from the server\")"
        );
        assert_eq!(
            errored[1]["info"]["error"],
            "EnginePanic(\"engine panicked: boom\")"
        );
        let back = from_guidellm(value, "test").expect("reads back");
        let records = &back.benchmarks[0].records;
        let errors: Vec<(&str, Option<u16>)> = (records.records.iter())
            .filter_map(|r| records.error_of(r))
            .map(|e| (e.label.as_str(), e.status))
            .collect();
        assert_eq!(errors, [("http_status", Some(503)), ("engine_panic", None)]);
    }

    /// A request with images, then a conversation's second turn that
    /// reasoned before answering, with its text.
    fn turns_report() -> Report {
        let mut report = sample_report();
        let mut records = CompactRecords::from_records(
            ms(0),
            &[
                served_at(1, 0, &[10, 20, 30], 40, 100),
                served_at(2, 50, &[70, 80, 90], 100, 120),
            ],
        );
        records.records[0].images = Some(CompactImages {
            count: 2,
            tokens: 60,
            prepare_us: 0,
            encode_us: 0,
        });
        records.records[1].turn = Some(Box::new(CompactTurn {
            conversation: 1,
            index: 1,
            waited_us: Some(10_000),
        }));
        records.records[1].text = Some("two words".into());
        // Reasoning until 80 ms: the answer's first token 30 ms after the send.
        records.records[1].reasoning = Some(Box::new(CompactReasoning {
            first_content: Some(80_000),
            tokens: Some(2),
        }));
        report.benchmarks = vec![BenchmarkReport::new(
            "concurrent@1",
            json!({"kind": "concurrent", "streams": 1}),
            ms(0),
            ms(100),
            records,
        )];
        report
    }

    #[test]
    fn turns_images_and_reasoning_become_guidellm_metrics_and_usage() {
        let report = turns_report();
        let value = to_guidellm(&report);
        let metrics = &value["benchmarks"][0]["metrics"];
        assert_eq!(metrics["turns"][1]["turn_index"], 1);
        assert_eq!(metrics["turns"][1]["request_totals"]["successful"], 1);
        assert_eq!(
            metrics["image"]["images"]["input"]["successful"]["mean"],
            2.0
        );
        assert_eq!(metrics["text"]["tokens"]["input"]["total"]["mean"], 80.0);
        assert_eq!(
            metrics["text"]["words"]["output"]["successful"]["mean"],
            2.0
        );
        assert!(
            metrics["text"]["words"]["input"].is_null()
                && metrics["text"]["words"]["total"].is_null()
        );
        assert!(metrics["video"]["tokens"]["input"].is_null());
        let stats = StatusMetrics::compute(&report.benchmarks[0].records.records);
        let ttft_ms = metrics["time_to_first_token_ms"]["successful"]["mean"]
            .as_f64()
            .expect("ttft");
        close(ttft_ms / 1e3, stats.ttft.mean, "ttft");
        // GuideLLM's TTFOT is every request's: the first token's where it
        // did not reason (10 ms), the answer's where it did (30 ms).
        let ttfot = &metrics["time_to_first_output_token_ms"]["successful"];
        close(ttfot["mean"].as_f64().expect("ttfot") / 1e3, 0.020, "ttfot");
    }

    #[test]
    fn embeddings_answers_are_written_with_null_output_and_token_latencies_as_guidellm_does() {
        let records: Vec<_> = (0..3)
            .map(|i| served_at(i, i64::try_from(i).expect("small") * 10, &[], 40, 16))
            .collect();
        let mut report = Report::new(Value::Null);
        report.benchmarks = vec![BenchmarkReport::from_records(
            "synchronous",
            json!({"kind": "synchronous"}),
            ms(0),
            ms(100),
            &records,
        )];
        assert!(report.benchmarks[0].metrics.pooled);
        let value = to_guidellm(&report);
        let benchmark = &value["benchmarks"][0];
        for r in benchmark["requests"]["successful"]
            .as_array()
            .expect("listed")
        {
            // GuideLLM's EmbeddingsRequestHandler: no output usage at all.
            for key in [
                "output_tokens",
                "time_to_first_token_ms",
                "inter_token_latency_ms",
                "time_per_output_token_ms",
                "output_tokens_per_second",
            ] {
                assert!(r[key].is_null(), "{key}: {r}");
            }
            assert!(r["output_metrics"]["text_words"].is_null(), "{r}");
            assert!(r["output_metrics"]["total_tokens"].is_null(), "{r}");
            assert_eq!(r["prompt_tokens"], 16);
            assert_eq!(r["total_tokens"], 16);
            assert!(r["request_latency"].as_f64().expect("latency") > 0.0);
        }
        let metrics = &benchmark["metrics"];
        assert_eq!(metrics["time_to_first_token_ms"]["successful"]["count"], 0);
        assert_eq!(metrics["inter_token_latency_ms"]["successful"]["count"], 0);
        assert_eq!(metrics["prompt_token_count"]["successful"]["mean"], 16.0);
        assert_eq!(metrics["request_totals"]["successful"], 3);
        // And it reads back as an embeddings benchmark.
        let back = from_guidellm(value, "test").expect("reads back");
        assert!(back.benchmarks[0].metrics.pooled);
        // The scenario names GuideLLM's endpoint.
        for (ours, theirs) in [
            ("embeddings", "/v1/embeddings"),
            ("pooling", "/pooling"),
            ("responses", "/v1/responses"),
        ] {
            report.config = json!({"backend": {"kind": "openai_http", "target": "http://x",
                "request_format": ours}});
            let value = to_guidellm(&report);
            let backend = &value["config"]["spec"]["backend"];
            assert_eq!(backend["request_format"], theirs, "{backend}");
        }
    }

    // The expected numbers below are GuideLLM 0.8.1's own, printed by
    // `guidellm.schemas.base.statistics.DistributionSummary` (mean, median,
    // mode, variance, min, max, count, then the 11 percentiles p001..p999).
    fn expect(s: &Summary, stats: [f64; 6], count: u64, percentiles: [f64; 11]) {
        let got = [s.mean, s.median, s.mode, s.variance, s.min, s.max];
        for (g, e) in got
            .iter()
            .zip(stats)
            .chain(s.percentiles.iter().zip(percentiles))
        {
            assert!(
                (g - e).abs() <= 1e-9 * e.abs().max(1.0),
                "{got:?} {:?}: {g} != {e}",
                s.percentiles
            );
        }
        assert_eq!(s.count, count);
    }

    #[test]
    fn percentiles_are_guidellms_first_value_reaching_each_probability() {
        // DistributionSummary.from_values([7.0, 3.0, 10.0, 1.0, 9.0, 2.0, 8.0, 5.0, 4.0, 6.0])
        let values = [7.0, 3.0, 10.0, 1.0, 9.0, 2.0, 8.0, 5.0, 4.0, 6.0].map(|v| (v, 1.0));
        let s = Summary::from_values(&values, None, true);
        expect(
            &s,
            [5.5, 5.0, 1.0, 8.25, 1.0, 10.0],
            10,
            [1.0, 1.0, 1.0, 1.0, 3.0, 5.0, 8.0, 10.0, 10.0, 10.0, 10.0],
        );
        assert!(
            s.mean_ci.is_some()
                && s.percentile_cis
                    .is_some_and(|c| c[5].is_some() && c[10].is_none())
        );
        // DistributionSummary.from_values([(2.0, 3.0), (1.0, 1.0), (4.0, 0.5), (2.0, 1.5), (3.0, 0.0)])
        let weighted = [(2.0, 3.0), (1.0, 1.0), (4.0, 0.5), (2.0, 1.5), (3.0, 0.0)];
        let s = Summary::from_values(&weighted, None, true);
        expect(
            &s,
            [2.0, 2.0, 2.0, 0.5, 1.0, 4.0],
            6,
            [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 4.0, 4.0, 4.0],
        );
        assert_eq!(
            (s.mean_ci, s.percentile_cis),
            (None, None),
            "weighted: no intervals"
        );
    }

    #[test]
    fn rate_and_concurrency_distributions_are_guidellms() {
        // DistributionSummary.rate_distribution_from_timings([10.0, 10.00005, 10.2, 10.5,
        //     10.50002, 10.50009, 11.0, 11.7, 12.0, 9.5, 12.5], start_time=10.0, end_time=12.0)
        let events = [
            10.0, 10.00005, 10.2, 10.5, 10.50002, 10.50009, 11.0, 11.7, 12.0, 9.5, 12.5,
        ]
        .map(|t| (t, 1.0));
        let s = rate_summary(&events, Some((10.0, 12.0)));
        let (low, high) = (1.666_666_666_666_667_6, 20.000_000_000_000_07);
        expect(
            &s,
            [4.5, 2.0, low, 18.166_666_666_666_72, low, high],
            9,
            [
                low,
                low,
                low,
                low,
                low,
                2.0,
                6.666_666_666_666_651,
                7.499_999_999_999_994,
                7.499_999_999_999_994,
                high,
                high,
            ],
        );
        // DistributionSummary.rate_distribution_from_timings([(10.1, 3.0), (10.10003, 2.0),
        //     (10.6, 5.0), (11.9, 1.0)], start_time=10.0, end_time=12.0)
        let s = rate_summary(
            &[(10.1, 3.0), (10.10003, 2.0), (10.6, 5.0), (11.9, 1.0)],
            Some((10.0, 12.0)),
        );
        let (a, b, c) = (
            1.428_571_428_571_43,
            5.555_555_555_555_554,
            16.666_666_666_666_725,
        );
        expect(
            &s,
            [5.5, b, b, 26.019_841_269_841_407, 0.0, c],
            11,
            [0.0, 0.0, 0.0, a, a, b, b, c, c, c, c],
        );
        // DistributionSummary.concurrency_distribution_from_timings([(9.0, 10.5), (10.0, 11.0),
        //     (10.2, 10.20004), (10.3, 12.5), (10.9, 11.5), (12.2, 13.0), (8.0, 9.5)],
        //     start_time=10.0, end_time=12.0)
        let spans = [
            (9.0, 10.5),
            (10.0, 11.0),
            (10.2, 10.20004),
            (10.3, 12.5),
            (10.9, 11.5),
            (12.2, 13.0),
            (8.0, 9.5),
        ];
        let s = concurrency_summary(&spans.map(|(a, b)| (a, b, 1.0)), Some((10.0, 12.0)));
        expect(
            &s,
            [
                1.899_999_999_999_999_5,
                2.0,
                2.0,
                0.389_999_999_999_999_35,
                1.0,
                3.0,
            ],
            5,
            [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0],
        );
        // DistributionSummary.concurrency_distribution_from_timings([(1.0, 2.0, 3.0), (1.5, 3.0, 2.0)])
        let s = concurrency_summary(&[(1.0, 2.0, 3.0), (1.5, 3.0, 2.0)], None);
        expect(
            &s,
            [3.0, 2.0, 2.0, 1.5, 2.0, 5.0],
            2,
            [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 5.0, 5.0, 5.0, 5.0],
        );
    }

    /// Failures, turns, images and an empty benchmark: each document
    /// passes the JSON Schema exported from GuideLLM 0.8.1's own report
    /// model (`scripts/guidellm-schema`). GuideLLM itself loading and
    /// exporting a run's file is `scripts/guidellm-open`.
    #[test]
    fn every_kind_of_report_gives_a_document_guidellm_s_schema_accepts() {
        let schema: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/guidellm/report.schema.json"
        ))
        .expect("schema JSON");
        let validator = jsonschema::validator_for(&schema).expect("a valid schema");
        let mut empty = Report::new(Value::Null);
        let at = guidebench_core::clock::Timestamp(1_700_000_000_000_000_000);
        empty.benchmarks.push(BenchmarkReport::from_records(
            "empty",
            Value::Null,
            at,
            at,
            &[],
        ));
        for (name, report) in [
            ("sample", named_report()),
            ("failures", failures_report()),
            ("turns", turns_report()),
            ("empty", empty),
        ] {
            let document = to_guidellm(&report);
            let violations: Vec<String> = validator
                .iter_errors(&document)
                .map(|e| format!("{}: {e}", e.instance_path()))
                .collect();
            assert_eq!(violations, Vec::<String>::new(), "{name}");
        }
    }
}
