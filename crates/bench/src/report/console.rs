//! Plain-text summary tables for the console.

use std::fmt::Write as _;

use super::model::Report;
use super::table::{Align, CONSOLE_WIDTH, Column, Table, width};
use super::{fixed, ms_at};
use crate::analysis::goodput::Verdict;
use crate::metrics::Distribution;
use crate::record::Conclusion;
use crate::record::{SaturationMode, SaturationReport};
use serde_json::Value;

/// Milliseconds with three significant figures or more: two decimals
/// under 10 ms, one under 1 s, none above.
fn ms_cell(value: Option<f64>) -> String {
    match value {
        Some(v) if v.abs() >= 1000.0 => fixed(Some(v), 0),
        Some(v) if v.abs() >= 10.0 => fixed(Some(v), 1),
        v => fixed(v, 2),
    }
}

/// What a run benchmarked, one line each: the backend(s) (engine, library,
/// model, device, threads, dtype, load time, scheduler), the machine, the data
/// and the profile.
pub fn what_ran(report: &Report) -> String {
    let mut out = String::new();
    if report.backends.is_empty() {
        let _ = writeln!(
            out,
            "Benchmarked: {}",
            describe_backend(&report.environment.backend, &report.config["backend"])
        );
    } else {
        let _ = writeln!(out, "Benchmarked side by side:");
        for run in &report.backends {
            let what = if run.environment.is_empty() {
                describe_backend(&run.environment, &run.config)
            } else {
                describe_backend(&run.environment, &Value::Null)
            };
            let _ = writeln!(out, "  {}: {what}", run.label);
        }
    }
    let env = &report.environment;
    let _ = writeln!(
        out,
        "Machine: {}, {} logical cores ({} available), {} {}",
        env.cpu_model.as_deref().unwrap_or("unknown CPU"),
        env.logical_cores,
        env.available_parallelism,
        env.os,
        env.arch
    );
    let kinds: Vec<String> = report.config["data"]
        .as_array()
        .map(|data| data.iter().map(describe_kind).collect())
        .unwrap_or_default();
    if !kinds.is_empty() || !report.config["profile"].is_null() {
        let profile = &report.config["profile"];
        // A fixed list of strategies reads best as the strategies.
        let profile = match profile.get("strategies").and_then(Value::as_array) {
            Some(strategies) if profile["kind"] == "fixed" => strategies
                .iter()
                .map(describe_kind)
                .collect::<Vec<_>>()
                .join("; "),
            _ => describe_kind(profile),
        };
        let _ = writeln!(out, "Data: {}; profile: {profile}", kinds.join(" + "));
    }
    let mut wrapped: String = out.lines().map(|l| wrap(l, CONSOLE_WIDTH)).collect();
    wrapped.push('\n');
    wrapped
}

/// `line` (and a newline) broken at spaces into lines no wider than
/// `limit` where it can be, continuation lines indented by four spaces (a
/// single word wider than that stays whole).
fn wrap(line: &str, limit: usize) -> String {
    const INDENT: &str = "    ";
    let mut out = String::new();
    let mut rest = line;
    let mut indent = "";
    loop {
        let room = limit.saturating_sub(indent.len());
        if width(rest) <= room {
            break;
        }
        let lead = rest.len() - rest.trim_start().len();
        let Some((at, _)) = rest
            .char_indices()
            .rev()
            .find(|&(i, c)| c == ' ' && i > lead && width(&rest[..i]) <= room)
        else {
            break;
        };
        out.push_str(indent);
        out.push_str(rest[..at].trim_end());
        out.push('\n');
        rest = rest[at..].trim_start();
        indent = INDENT;
    }
    out.push_str(indent);
    out.push_str(rest);
    out.push('\n');
    out
}

/// `kind a=1 b=2` from a `{kind, ...}` object (a JSON string as is).
fn describe_kind(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut parts: Vec<String> = map
                .get("kind")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .into_iter()
                .collect();
            for (key, v) in map {
                if key == "kind" || v.is_null() {
                    continue;
                }
                match v {
                    Value::String(s) => parts.push(format!("{key}={s}")),
                    other => parts.push(format!("{key}={other}")),
                }
            }
            parts.join(" ")
        }
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// One backend in words, from what it said of itself at validation (and,
/// when it never got that far, from its configuration).
fn describe_backend(info: &serde_json::Map<String, Value>, config: &Value) -> String {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let mut parts = Vec::new();
    let engine = info.get("engine").and_then(Value::as_object);
    match (text(info.get("backend")), engine) {
        (Some(kind), Some(engine)) => {
            let name = text(engine.get("engine")).unwrap_or_default();
            match text(engine.get("library")) {
                Some(library) if !library.is_empty() => {
                    parts.push(format!("{kind} engine {name} ({library})"));
                }
                _ => parts.push(format!("{kind} engine {name}")),
            }
            if let Some(model) = text(engine.get("model")) {
                parts.push(format!("model {model}"));
            }
            if let Some(device) = text(engine.get("device")) {
                parts.push(device);
            }
            if let Some(threads) = engine.get("threads").and_then(Value::as_u64) {
                let plural = if threads == 1 { "" } else { "s" };
                parts.push(format!("{threads} thread{plural}"));
            }
            if let Some(dtype) = text(engine.get("dtype")) {
                parts.push(dtype);
            }
        }
        _ => {
            if let Some(target) = text(info.get("target")) {
                parts.push(format!("openai_http {target}"));
            } else if let Some(kind) = text(config.get("kind")) {
                parts.push(kind);
            }
            if let Some(model) = text(info.get("model")).or_else(|| text(config.get("model"))) {
                parts.push(format!("model {model}"));
            }
            if let Some(endpoint) = text(info.get("endpoint")) {
                parts.push(endpoint);
            }
        }
    }
    if let Some(load) = info.get("load_time_s").and_then(Value::as_f64) {
        parts.push(format!("loaded in {load:.2} s"));
    }
    match text(info.get("scheduling")).as_deref() {
        Some("static") => parts.push(format!(
            "static batching (batch {}, timeout {} ms)",
            info.get("batch_size")
                .map_or_else(|| "-".into(), ToString::to_string),
            info.get("batch_timeout_s")
                .and_then(Value::as_f64)
                .map_or_else(|| "-".into(), |s| format!("{}", s * 1e3))
        )),
        Some("continuous") => parts.push(format!(
            "continuous batching (up to {} running)",
            info.get("max_running")
                .map_or_else(|| "-".into(), ToString::to_string)
        )),
        _ => {}
    }
    if parts.is_empty() {
        "an unnamed backend".into()
    } else {
        parts.join(", ")
    }
}

/// The summary table: one row per benchmark (and backend, side by side);
/// two tables when one would be wider than [`CONSOLE_WIDTH`].
fn summary_tables(report: &Report) -> String {
    let r = Align::Right;
    let side_by_side = report.benchmarks.iter().any(|b| b.backend.is_some());
    let incomplete = report
        .benchmarks
        .iter()
        .any(|b| b.metrics.incomplete.count > 0);
    let mut head = Vec::new();
    if side_by_side {
        head.push(Column::new("", "Backend", Align::Left));
    }
    head.push(Column::new("", "Benchmark", Align::Left));
    let ident = |b: &super::model::BenchmarkReport| {
        let mut cells = Vec::new();
        if side_by_side {
            cells.push(b.backend.clone().unwrap_or_default());
        }
        cells.push(b.name.clone());
        cells
    };
    let mut counts = vec![
        Column::new("Requests", "ok", r),
        Column::new("Requests", "errors", r),
    ];
    if incomplete {
        counts.push(Column::new("Requests", "incomplete", r));
    }
    counts.push(Column::new("", "req/s", r));
    counts.push(Column::new("", "out tok/s", r));
    let groups = ["Latency ms", "TTFT ms", "ITL ms", "TPOT ms"];
    let metric_columns = |names: &[&'static str]| -> Vec<Column> {
        names
            .iter()
            .flat_map(|&g| [Column::new(g, "p50", r), Column::new(g, "p95", r)])
            .collect()
    };
    let count_cells = |b: &super::model::BenchmarkReport| {
        let m = &b.metrics;
        let mut cells = vec![m.successful.count.to_string(), m.errored.count.to_string()];
        if incomplete {
            cells.push(m.incomplete.count.to_string());
        }
        cells.push(format!("{:.2}", m.requests_per_s));
        cells.push(if m.pooled {
            NOT_APPLICABLE.to_owned()
        } else {
            format!("{:.1}", m.output_tokens_per_s)
        });
        cells
    };
    let metric_cells = |b: &super::model::BenchmarkReport, names: &[&str]| {
        let s = &b.metrics.successful;
        names
            .iter()
            .flat_map(|&g| {
                let d = match g {
                    "Latency ms" => &s.latency,
                    "TTFT ms" => &s.ttft,
                    "ITL ms" => &s.itl,
                    _ => &s.tpot,
                };
                if b.metrics.pooled && g != "Latency ms" {
                    return [NOT_APPLICABLE.to_owned(), NOT_APPLICABLE.to_owned()];
                }
                [ms_cell(ms_at(d, 50.0)), ms_cell(ms_at(d, 95.0))]
            })
            .collect::<Vec<_>>()
    };
    let table = |with_counts: bool, names: &[&'static str]| {
        let mut columns = head.clone();
        if with_counts {
            columns.extend(counts.iter().copied());
        }
        columns.extend(metric_columns(names));
        let rows = report
            .benchmarks
            .iter()
            .map(|b| {
                let mut row = ident(b);
                if with_counts {
                    row.extend(count_cells(b));
                }
                row.extend(metric_cells(b, names));
                row
            })
            .collect();
        Table { columns, rows }.render()
    };
    // Fewer columns per table until each fits.
    let layouts: [&[(bool, &[&'static str])]; 4] = [
        &[(true, &groups)],
        &[(true, &groups[..2]), (false, &groups[2..])],
        &[(true, &[]), (false, &groups[..2]), (false, &groups[2..])],
        &[
            (true, &[]),
            (false, &groups[..1]),
            (false, &groups[1..2]),
            (false, &groups[2..3]),
            (false, &groups[3..]),
        ],
    ];
    let mut out = String::new();
    for layout in layouts {
        let tables: Vec<String> = layout
            .iter()
            .map(|&(with_counts, names)| table(with_counts, names))
            .collect();
        out = tables.join("\n");
        if out.lines().all(|l| width(l) <= CONSOLE_WIDTH) {
            break;
        }
    }
    out
}

/// What a cell shows for a figure that does not apply to the benchmark
/// (TTFT, ITL, TPOT and output tokens of embeddings or pooling answers).
pub(crate) const NOT_APPLICABLE: &str = "n/a";

/// For a benchmark whose answers were vectors (embeddings, pooling): its
/// throughput in inputs and input tokens, and what does not apply.
fn pooled_line(b: &super::model::BenchmarkReport) -> String {
    let m = &b.metrics;
    if !m.pooled {
        return String::new();
    }
    format!(
        "embeddings in {}: {:.2} inputs/s, {:.1} input tok/s (answers are vectors: TTFT, ITL, \
         TPOT and output tokens do not apply)\n",
        b.label(),
        m.requests_per_s,
        m.prompt_tokens_per_s
    )
}

/// The most distinct answers shown per error label.
const ANSWERS_SHOWN: usize = 3;

/// The most characters of one error message shown.
const MESSAGE_CHARS: usize = 80;

/// `text` in at most `max` characters: a longer one is cut at its end, at a
/// character boundary, with a `…` as its last character. Never cut in the
/// middle, where a message says its numbers ("has 1 image(s) but 2 image
/// tokens").
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The errors of a benchmark, by label, each with its status codes and the
/// first line of each distinct message, with counts:
/// `errors in B: http_status (10): 503 ×7 "model overloaded", 429 ×3 "rate
/// limited"`; one line for one label, else a line per label under the
/// heading. Empty without errors.
fn error_lines(b: &super::model::BenchmarkReport) -> String {
    if b.metrics.errors_by_label.is_empty() {
        return String::new();
    }
    let answers = super::metrics::errors_by_answer(&b.records);
    let entries: Vec<String> = b
        .metrics
        .errors_by_label
        .iter()
        .map(|(label, n)| {
            let Some(list) = answers.get(label).filter(|list| !list.is_empty()) else {
                return format!("{label} ({n})");
            };
            let mut shown: Vec<String> = list
                .iter()
                .take(ANSWERS_SHOWN)
                .map(|a| {
                    let message = shorten(&a.message, MESSAGE_CHARS);
                    match a.status {
                        Some(status) => format!("{status} ×{} \"{message}\"", a.count),
                        None => format!("×{} \"{message}\"", a.count),
                    }
                })
                .collect();
            if list.len() > ANSWERS_SHOWN {
                shown.push(format!("{} more", list.len() - ANSWERS_SHOWN));
            }
            format!("{label} ({n}): {}", shown.join(", "))
        })
        .collect();
    // Writing to a String cannot fail.
    let mut out = String::new();
    if let [one] = entries.as_slice() {
        let _ = writeln!(out, "errors in {}: {one}", b.label());
    } else {
        let _ = writeln!(out, "errors in {}:", b.label());
        for entry in &entries {
            let _ = writeln!(out, "  {entry}");
        }
    }
    out
}

/// The console summary of a report: what ran (backend, engine, model,
/// device, threads, load time, machine, data, profile), then one row per
/// benchmark with median and p95 latency, TTFT, ITL (per gap) and TPOT of
/// successful requests in milliseconds, requests/s, output tokens/s and
/// the request counts, in tables no wider than 120 columns; then the
/// errors by label, if any, and the answers. Plain text with aligned
/// columns.
pub fn console_summary(report: &Report) -> String {
    let mut out = what_ran(report);
    if report.interrupted && report.benchmarks.is_empty() {
        out.push_str("(interrupted before any benchmark ran: nothing was measured)\n");
        return out;
    }
    if report.interrupted {
        out.push_str("(interrupted: the run stopped early; the last benchmark may be partial)\n");
    }
    if let Some(failure) = &report.failure {
        let _ = writeln!(out, "(failed: {failure}; the last benchmark is partial)");
    }
    out.push_str(&summary_tables(report));
    for b in &report.benchmarks {
        out.push_str(&pooled_line(b));
    }
    out.push_str(&agreement_lines(report));
    for b in &report.benchmarks {
        out.push_str(&error_lines(b));
    }
    for b in &report.benchmarks {
        if b.metrics.retries > 0 {
            let _ = writeln!(
                out,
                "retries in {}: {} (sent again on a fresh connection the server had closed)",
                b.label(),
                b.metrics.retries
            );
        }
    }
    for b in &report.benchmarks {
        out.push_str(&image_line(b));
    }
    for b in &report.benchmarks {
        out.push_str(&tool_call_line(b));
    }
    for b in &report.benchmarks {
        out.push_str(&audio_line(b));
    }
    for b in &report.benchmarks {
        if let Some(skipped) = b
            .extra
            .get("data_skipped")
            .and_then(serde_json::Value::as_u64)
        {
            let _ = writeln!(
                out,
                "data items skipped in {}: {skipped} (on_error=skip; see the log for each)",
                b.label()
            );
        }
    }
    for b in &report.benchmarks {
        out.push_str(&cut_short_line(b));
    }
    for b in &report.benchmarks {
        let (warmup, cooldown) = (b.warmup_excluded, b.cooldown_excluded);
        if let Some(warning) =
            crate::runner::nothing_measured(warmup, cooldown, b.metrics.all.count)
        {
            let _ = writeln!(out, "warning: in {}: {warning}", b.label());
        }
    }
    for b in &report.benchmarks {
        if let Some(client) = &b.client {
            let _ = writeln!(out, "client in {}: {}", b.label(), client.summary());
        }
    }
    out.push_str(&uncertainty_table(report));
    out.push_str(&super::console_guidellm::guidellm_tables(report));
    out.push_str(&answers_text(report));
    for b in &report.benchmarks {
        if let Some(reasons) = b
            .extra
            .get("client_saturated")
            .and_then(|f| f.get("reasons"))
        {
            let reasons: Vec<&str> = reasons
                .as_array()
                .map(|r| r.iter().filter_map(serde_json::Value::as_str).collect())
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "client saturated in {}: {} (the client, not the target, may have set the pace)",
                b.label(),
                reasons.join("; ")
            );
        }
    }
    out
}

/// A warning for the measured requests of a benchmark that a length limit
/// stopped before the output tokens they asked for (finish reason
/// `length`, [`CompactRecord::cut_short_of`]): the model's context (an
/// engine's `max_seq_len`) or the server's own limit cut them, so their
/// output lengths are not the ones asked for.
///
/// [`CompactRecord::cut_short_of`]: crate::record::CompactRecord::cut_short_of
fn cut_short_line(b: &super::model::BenchmarkReport) -> String {
    let measured = || b.records.records.iter().filter(|r| r.excluded.is_none());
    let cut: Vec<_> = measured()
        .filter_map(|r| r.cut_short_of.map(|asked| (r.output_tokens, asked)))
        .collect();
    if cut.is_empty() {
        return String::new();
    }
    let successes = measured()
        .filter(|r| r.status == guidebench_core::request::RequestStatus::Success)
        .count();
    #[allow(clippy::cast_precision_loss)] // a display.
    let (made, asked) = (
        cut.iter().map(|(made, _)| f64::from(*made)).sum::<f64>() / cut.len() as f64,
        cut.iter().map(|(_, asked)| f64::from(*asked)).sum::<f64>() / cut.len() as f64,
    );
    format!(
        "warning: in {}: {} of {successes} successful requests stopped at a length limit before \
         their max_tokens ({made:.1} of {asked:.1} output tokens on average): the model's context \
         (the engine's max_seq_len) or the server's limit cut them; shorten the prompts or raise \
         the limit\n",
        b.label(),
        cut.len(),
    )
}

/// What a benchmark's images cost, for one whose requests an in-process
/// vision engine served with images: how many per request, the image
/// tokens among the prompt tokens, and the vision encoder's share of TTFT.
fn image_line(b: &super::model::BenchmarkReport) -> String {
    let m = &b.metrics.successful;
    let (Some(images), Some(tokens), Some(encode)) = (&m.images, &m.image_tokens, &m.vision_encode)
    else {
        return String::new();
    };
    let ms = |s: f64| format!("{:.1}", s * 1e3);
    format!(
        "images in {}: {} requests with images, {:.1} per request, {:.0} image tokens per \
         request (counted in prompt tokens, mean {:.0}); vision encoder p50 {} ms, p95 {} ms \
         (inside TTFT p50 {} ms)\n",
        b.label(),
        images.count,
        images.mean,
        tokens.mean,
        m.prompt_tokens.mean,
        ms(encode.median),
        ms(encode.at(95.0).unwrap_or(encode.max)),
        ms(m.ttft.median),
    )
}

/// What a benchmark's tool calls were, for one whose requests offered
/// tools: the answers counted (those with calls, and turns that expected a
/// call), calls per answer, the time to first tool call and the answers
/// that expected a call and made none.
fn tool_call_line(b: &super::model::BenchmarkReport) -> String {
    let m = &b.metrics.successful;
    let Some(calls) = &m.tool_calls else {
        return String::new();
    };
    let ms = |s: f64| format!("{:.1}", s * 1e3);
    let first = m.ttftc.as_ref().map_or_else(String::new, |d| {
        format!(
            "; time to first tool call p50 {} ms, p95 {} ms",
            ms(d.median),
            ms(d.at(95.0).unwrap_or(d.max))
        )
    });
    let answered = m.ttftc.as_ref().map_or(0, |d| d.count);
    format!(
        "tool calls in {}: {} of {} answers called tools, {:.2} calls per answer{first}\n",
        b.label(),
        answered,
        calls.count,
        calls.mean,
    )
}

/// What a benchmark's audio clips were, for one whose requests went to an
/// audio endpoint: the clips sent, the seconds of audio per request, the
/// real-time factor of the successful requests (latency / audio seconds;
/// below 1, faster than the clip plays) and the seconds of audio served
/// per wall second.
fn audio_line(b: &super::model::BenchmarkReport) -> String {
    let Some(audio) = &b.metrics.all.audio else {
        return String::new();
    };
    let served = b.metrics.successful.audio.as_ref();
    let rtf = served
        .map(|a| &a.real_time_factor)
        .filter(|d| d.count > 0)
        .map_or_else(String::new, |d| {
            format!(
                "; real-time factor p50 {:.3}, p95 {:.3}",
                d.median,
                d.at(95.0).unwrap_or(d.max)
            )
        });
    let seconds = if audio.seconds.count > 0 {
        format!("{:.2} s of audio per request", audio.seconds.mean)
    } else {
        "no clip stated its length".to_owned()
    };
    format!(
        "audio in {}: {} requests sent clips, {seconds}{rtf}; {} s of audio per s\n",
        b.label(),
        audio.requests,
        fixed(b.metrics.audio_seconds_per_s, 2),
    )
}

/// Whether side-by-side backends gave the same outputs, a line per
/// benchmark and backend.
fn agreement_lines(report: &Report) -> String {
    let mut out = String::new();
    for a in &report.agreement {
        let verdict = if a.compared == 0 {
            "no request completed on both".to_owned()
        } else if a.agreed == a.compared {
            format!("all {} outputs identical", a.compared)
        } else {
            let ids: Vec<String> = a.differing.iter().map(ToString::to_string).collect();
            format!(
                "{} of {} outputs identical; first differing requests: {}",
                a.agreed,
                a.compared,
                ids.join(", ")
            )
        };
        let _ = writeln!(
            out,
            "greedy outputs, {} vs {} in {}: {verdict}",
            a.backend, a.reference, a.benchmark
        );
    }
    out
}

/// The objectives' table, the over-saturation lines and the profile's
/// conclusion, as text (empty when the run had none of them).
pub(crate) fn answers_text(report: &Report) -> String {
    let mut out = objectives_table(report);
    out.push_str(&saturation_lines(report));
    if let Some(conclusion) = &report.conclusion {
        out.push_str(&conclusion_lines(conclusion));
    }
    out
}

/// `mean ± half-width` in ms, or the mean alone when no interval.
fn mean_cell(d: &Distribution) -> String {
    if d.count == 0 {
        return "-".into();
    }
    match d.mean_interval {
        Some(i) => format!(
            "{:.2} ±{:.2}",
            d.mean * 1e3,
            (i.upper - i.lower) / 2.0 * 1e3
        ),
        None => format!("{:.2}", d.mean * 1e3),
    }
}

/// `[lower, upper]` in ms of the p-th percentile, or `-`.
fn percentile_cell(d: &Distribution, p: f64) -> String {
    d.interval_at(p).map_or_else(
        || "-".into(),
        |i| format!("[{:.2}, {:.2}]", i.lower * 1e3, i.upper * 1e3),
    )
}

/// Confidence intervals of the means and of p95 of successful requests.
fn uncertainty_table(report: &Report) -> String {
    let col = |group, title| Column::new(group, title, Align::Right);
    let columns = vec![
        Column::new("", "Benchmark", Align::Left),
        col("TTFT ms", "mean"),
        col("TTFT ms", "p95 interval"),
        col("ITL ms", "mean"),
        col("Latency ms", "mean"),
        col("Latency ms", "p95 interval"),
    ];
    let rows: Vec<Vec<String>> = report
        .benchmarks
        .iter()
        .filter(|b| b.metrics.successful.count >= 2)
        .map(|b| {
            let s = &b.metrics.successful;
            let pooled = |cell: String| {
                if b.metrics.pooled {
                    NOT_APPLICABLE.to_owned()
                } else {
                    cell
                }
            };
            vec![
                b.label(),
                pooled(mean_cell(&s.ttft)),
                pooled(percentile_cell(&s.ttft, 95.0)),
                pooled(mean_cell(&s.itl_per_request)),
                mean_cell(&s.latency),
                percentile_cell(&s.latency, 95.0),
            ]
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n95 % confidence intervals (successful requests; ITL per request):\n{}",
        Table { columns, rows }.render()
    )
}

/// Attainment and goodput per benchmark, when the run set objectives.
fn objectives_table(report: &Report) -> String {
    let Some(objectives) = report
        .benchmarks
        .iter()
        .find_map(|b| b.metrics.slo.as_ref().map(|s| s.objectives))
    else {
        return String::new();
    };
    let col = |group, title| Column::new(group, title, Align::Right);
    let columns = vec![
        Column::new("", "Benchmark", Align::Left),
        col("Requests", "met"),
        col("Requests", "missed"),
        col("Requests", "undetermined"),
        col("Attainment", "%"),
        col("Attainment", "95 % interval"),
        col("Goodput", "req/s"),
        col("Goodput", "out tok/s"),
        Column::new("", "misses", Align::Left),
    ];
    let rows = report
        .benchmarks
        .iter()
        .filter_map(|b| {
            let s = b.metrics.slo.as_ref()?;
            Some(vec![
                b.label(),
                s.conforming.to_string(),
                s.violating.to_string(),
                s.undetermined.to_string(),
                fixed(s.attainment.map(|a| a * 100.0), 1),
                s.attainment_interval.map_or_else(
                    || "-".into(),
                    |i| format!("[{:.1}, {:.1}]", i.lower * 100.0, i.upper * 100.0),
                ),
                format!("{:.2}", s.goodput_requests_per_s),
                format!("{:.1}", s.goodput_output_tokens_per_s),
                s.misses
                    .iter()
                    .map(|(name, n)| format!("{name} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ])
        })
        .collect();
    format!(
        "\nObjectives: {}\n{}",
        objectives.describe(),
        Table { columns, rows }.render()
    )
}

/// A line per benchmark the over-saturation watch covered.
fn saturation_lines(report: &Report) -> String {
    let mut out = String::new();
    for b in &report.benchmarks {
        let Some(watch) = b
            .extra
            .get("over_saturation")
            .and_then(|v| serde_json::from_value::<SaturationReport>(v.clone()).ok())
        else {
            continue;
        };
        let _ = match &watch.fired {
            Some(verdict) => writeln!(
                out,
                "over-saturation in {}: at {:.1} s, {} ({})",
                b.label(),
                verdict.at_s,
                verdict.reason,
                match watch.mode {
                    SaturationMode::Enforce => "sending stopped",
                    SaturationMode::Monitor => "monitor only",
                }
            ),
            None => writeln!(out, "over-saturation in {}: not detected", b.label()),
        };
    }
    out
}

/// What a goodput search or a knee fit concluded.
fn conclusion_lines(conclusion: &Conclusion) -> String {
    let mut out = String::new();
    match conclusion {
        Conclusion::Goodput(g) => {
            let _ = writeln!(out, "\nGoodput search: {}", g.message);
            let probes: Vec<String> = g
                .probes
                .iter()
                .map(|p| {
                    format!(
                        "{}{} {:.1}% {}",
                        p.level,
                        if p.extension > 0 { "+" } else { "" },
                        p.attainment * 100.0,
                        match p.verdict {
                            Verdict::Pass => "pass",
                            Verdict::Fail => "fail",
                            Verdict::Undecided => "undecided",
                        }
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "probes (streams attainment verdict): {}",
                probes.join(", ")
            );
        }
        Conclusion::Knee(k) => {
            let fit = &k.fit;
            match (fit.found, fit.knee, fit.saturation_concurrency) {
                (true, Some(knee), Some(saturation)) => {
                    let _ = writeln!(
                        out,
                        "\nKnee: output tokens/s stops rising at {knee:.1} streams (first level \
                         at or past it: {saturation}); rising {:.1} tok/s per stream, then {:.1}; \
                         fit gain {:.2}",
                        fit.rising_slope.unwrap_or(0.0),
                        fit.tail_slope.unwrap_or(0.0),
                        fit.fit_gain.unwrap_or(0.0),
                    );
                }
                _ => {
                    let _ = writeln!(out, "\nKnee: none found: {}", fit.reason);
                }
            }
            if !k.refinement.is_empty() {
                let levels: Vec<String> = k.refinement.iter().map(ToString::to_string).collect();
                let _ = writeln!(out, "refined around it at {} streams", levels.join(", "));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::table::GAP;
    use crate::report::tests::sample_report;

    /// The summary's lines from the table's group heading on.
    fn table_lines(text: &str) -> Vec<&str> {
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("Latency ms"))
            .expect("a table");
        lines[at..].to_vec()
    }

    #[test]
    fn the_console_summary_has_one_aligned_row_per_benchmark() {
        let report = sample_report();
        let text = console_summary(&report);
        let lines = table_lines(&text);
        assert!(lines[0].contains("Latency ms") && lines[0].contains("TPOT ms"));
        assert!(lines[1].starts_with("Benchmark"));
        assert!(lines[2].chars().all(|c| c == '-'));
        assert!(lines[3].starts_with("synchronous"));
        assert!(lines[4].starts_with("<script>"));
        // Every row ends where the rule ends: right-aligned numbers line up.
        let rule = width(lines[2]);
        for line in &lines[1..5] {
            assert_eq!(width(line), rule, "{line:?}");
        }
        // Group headings sit over their columns.
        let latency_column =
            lines[1].find("out tok/s").expect("column") + "out tok/s".len() + GAP.len();
        assert_eq!(lines[0].find("Latency ms"), Some(latency_column));
        assert!(text.contains("errors in <script>alert(1)</script>: engine_panic (1)"));
    }

    /// A benchmark whose failed requests carry these answers: (label,
    /// status, server message, count).
    fn failing(answers: &[(&'static str, Option<u16>, &str, u64)]) -> Report {
        use guidebench_core::clock::Timestamp;
        use guidebench_core::request::RequestRecord;
        let at = |ms: i64| Timestamp(ms * 1_000_000);
        let mut records = Vec::new();
        for &(label, status, message, count) in answers {
            for _ in 0..count {
                let id = records.len() as u64;
                let error = guidebench_core::Error::backend_answer(
                    label,
                    status,
                    Some(message.to_owned()),
                    std::io::Error::other(format!(
                        "http://h/v1/chat/completions answered HTTP {}: {message}\n<more>",
                        status.unwrap_or(0)
                    )),
                );
                records.push(RequestRecord::error(id, &error, at(1), at(2)));
            }
        }
        let mut report = Report::new(serde_json::json!({}));
        report
            .benchmarks
            .push(super::super::model::BenchmarkReport::from_records(
                "synchronous",
                "synchronous".into(),
                at(0),
                at(1_000),
                &records,
            ));
        report
    }

    #[test]
    fn errors_show_their_status_codes_and_each_distinct_server_message_once() {
        let report = failing(&[
            ("http_status", Some(429), "rate limited", 3),
            ("http_status", Some(503), "model overloaded", 7),
        ]);
        let text = console_summary(&report);
        let line = text
            .lines()
            .find(|l| l.starts_with("errors in"))
            .expect("an errors line");
        assert_eq!(
            line,
            "errors in synchronous: http_status (10): 503 ×7 \"model overloaded\", \
             429 ×3 \"rate limited\""
        );
        // Several labels: a line each; a message without status keeps no code.
        let report = failing(&[
            ("http_status", Some(500), "a", 1),
            ("http_status", Some(500), "b", 1),
            ("http_status", Some(500), "c", 1),
            ("http_status", Some(502), "Bad Gateway", 2),
            ("server_error", None, "out of memory", 1),
        ]);
        let text = console_summary(&report);
        let at = text.find("errors in synchronous:\n").expect("a heading");
        let lines: Vec<&str> = text[at..].lines().skip(1).take(2).collect();
        assert_eq!(
            lines,
            [
                "  http_status (5): 502 ×2 \"Bad Gateway\", 500 ×1 \"a\", 500 ×1 \"b\", 1 more",
                "  server_error (1): ×1 \"out of memory\""
            ]
        );
    }

    #[test]
    fn a_long_error_message_is_cut_at_its_end_and_never_in_the_middle() {
        let long = "request 0 has 1 image(s) but the prompt has 2 image tokens: each \
                    image needs exactly one image token in the prompt text";
        let short = shorten(long, MESSAGE_CHARS);
        assert_eq!(short.chars().count(), MESSAGE_CHARS);
        assert!(short.ends_with('…'), "{short}");
        let kept = short.trim_end_matches('…');
        assert!(long.starts_with(kept), "{short}");
        assert!(kept.contains("has 1 image(s) but the prompt has 2 image tokens"));
        // Multi-byte characters are never split.
        let wide = "é".repeat(100);
        assert_eq!(shorten(&wide, 10), format!("{}…", "é".repeat(9)));
        assert_eq!(shorten("short", MESSAGE_CHARS), "short");
    }

    #[test]
    fn the_console_summary_shows_the_numbers_in_milliseconds() {
        let report = sample_report();
        let m = &report.benchmarks[0].metrics;
        let text = console_summary(&report);
        let row = table_lines(&text)[3];
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[1], "10");
        assert_eq!(cells[2], "0");
        assert_eq!(cells[4], format!("{:.2}", m.requests_per_s));
        let ms = |seconds: f64| ms_cell(Some(seconds * 1e3));
        // The incomplete column is there only when a request was.
        let at = usize::from(text.contains("incomplete"));
        assert_eq!(cells[5 + at], ms(m.successful.latency.median));
        assert_eq!(cells[7 + at], ms(m.successful.ttft.median));
        assert_eq!(cells[9 + at], ms(m.successful.itl.median));
        // Three significant figures or more, at every scale.
        assert_eq!(ms_cell(Some(1.234_56)), "1.23");
        assert_eq!(ms_cell(Some(140.0)), "140.0");
        assert_eq!(ms_cell(Some(50_578.82)), "50579");
    }

    #[test]
    fn the_console_says_first_what_it_benchmarked() {
        let mut report = sample_report();
        report.environment.backend = serde_json::json!({
            "backend": "offline",
            "engine": {"engine": "candle", "library": "candle 0.11", "model": "builtin:tiny",
                       "device": "cpu", "threads": 2},
            "scheduling": "static", "batch_size": 32, "batch_timeout_s": 0.01,
            "load_time_s": 1.25,
        })
        .as_object()
        .cloned()
        .expect("an object");
        let text = console_summary(&report);
        let mut lines = text.lines();
        let first = lines.next().expect("a first line");
        assert_eq!(
            first,
            "Benchmarked: offline engine candle (candle 0.11), model builtin:tiny, cpu, 2 threads, \
             loaded in 1.25 s, static batching"
        );
        assert_eq!(
            lines.next(),
            Some("    (batch 32, timeout 10 ms)"),
            "wrapped at 120 columns"
        );
        assert!(lines.next().expect("line").starts_with("Machine: "));
    }

    #[test]
    fn the_console_names_the_dtype_the_engine_ran_and_why() {
        let mut report = sample_report();
        report.environment.backend = serde_json::json!({
            "backend": "offline",
            "engine": {"engine": "candle", "model": "m", "device": "cpu", "threads": 2,
                       "dtype": "bf16 (auto: config.json torch_dtype)"},
        })
        .as_object()
        .cloned()
        .expect("an object");
        let text = console_summary(&report);
        let first = text.lines().next().expect("a first line");
        assert_eq!(
            first,
            "Benchmarked: offline engine candle, model m, cpu, 2 threads, \
             bf16 (auto: config.json torch_dtype)"
        );
    }

    #[test]
    fn what_ran_is_wrapped_to_the_console_width() {
        let mut report = sample_report();
        report.environment.backend.insert(
            "target".into(),
            serde_json::json!(format!("http://{}.example:8000", "x".repeat(150))),
        );
        let text = what_ran(&report);
        for line in text.lines() {
            // A single word wider than the console stays whole.
            assert!(
                width(line) <= CONSOLE_WIDTH || !line.trim().contains(' '),
                "{line}"
            );
        }
        assert!(
            text.contains("\n    "),
            "continuation lines are indented: {text}"
        );
        assert_eq!(wrap("a b c", 3), "a b\n    c\n");
        assert_eq!(wrap("short", 120), "short\n");
    }

    #[test]
    fn a_summary_wider_than_the_console_splits_into_narrower_tables() {
        let mut report = sample_report();
        let mut wide = report.benchmarks[0].clone();
        wide.name = "constant@123.45/s-with-a-long-name".into();
        report.benchmarks.push(wide);
        // Large values: every cell at its widest.
        for b in &mut report.benchmarks {
            for d in [
                &mut b.metrics.successful.latency,
                &mut b.metrics.successful.ttft,
                &mut b.metrics.successful.itl,
                &mut b.metrics.successful.tpot,
            ] {
                for p in &mut d.percentiles {
                    p.1 = 123_456.0;
                }
                d.median = 123_456.0;
            }
            b.metrics.incomplete.count = 12_345;
            b.backend = Some("candle engine_args.threads=2".into());
        }
        let text = console_summary(&report);
        let summary = text.split("95 % confidence").next().expect("text");
        for line in summary.lines().filter(|l| l.contains("  ")) {
            assert!(width(line) <= CONSOLE_WIDTH, "{} wide: {line}", width(line));
        }
        assert!(
            text.contains("Latency ms") && text.contains("TPOT ms"),
            "{text}"
        );
        assert!(
            text.lines().filter(|l| l.starts_with("Backend")).count() >= 2,
            "several tables, each naming the backend: {text}"
        );
    }

    #[test]
    fn retries_and_the_client_footprint_get_a_line_each() {
        let text = console_summary(&sample_report());
        assert!(
            text.contains("retries in synchronous: 1 (sent again on a fresh connection"),
            "{text}"
        );
        assert!(
            text.contains(
                "client in synchronous: CPU 0.375 s (user 0.250 s, system 0.125 s, \
                 37.500 ms per request), peak RSS 48.0 MiB"
            ),
            "{text}"
        );
        assert!(!text.contains("client in <script>"), "{text}");
    }

    #[test]
    fn a_benchmark_whose_client_could_not_keep_up_gets_a_line_with_its_reasons() {
        let mut report = sample_report();
        assert!(!console_summary(&report).contains("client saturated"));
        report.benchmarks[0].extra.insert(
            "client_saturated".into(),
            serde_json::json!({"reasons": ["reason one", "reason two"], "available_cores": 2}),
        );
        let text = console_summary(&report);
        assert!(
            text.contains("client saturated in synchronous: reason one; reason two"),
            "{text}"
        );
    }

    #[test]
    fn objectives_intervals_and_a_goodput_answer_are_shown_under_the_summary() {
        use crate::analysis::goodput::{GoodputOptions, GoodputSearch};
        let mut report = sample_report();
        let slo = crate::slo::Slo::parse("ttft=50ms").expect("valid");
        for b in &mut report.benchmarks {
            b.apply_slo(&slo);
        }
        let mut search = GoodputSearch::new(GoodputOptions {
            initial: 4,
            ..GoodputOptions::default()
        });
        let _ = search.record(4, 100, 100, false);
        let _ = search.record(8, 0, 100, false);
        report.conclusion = Some(Conclusion::Goodput(search.conclusion()));
        let text = console_summary(&report);
        assert!(text.contains("Objectives: ttft ≤ 50 ms"), "{text}");
        // Every request of the sample has a 40 ms TTFT; the failure misses.
        let row = text
            .lines()
            .find(|l| l.starts_with("<script>") && l.contains("error 1"))
            .expect("the objectives row of the second benchmark");
        assert!(row.contains("90.9"), "10 of 11 met: {row}");
        assert!(text.contains("95 % confidence intervals"), "{text}");
        assert!(text.contains("Goodput search:"), "{text}");
        assert!(text.contains("4 100.0% pass, 8 0.0% fail"), "{text}");
        assert!(super::super::to_html(&report).contains("<h2>Answers</h2>"));
    }

    #[test]
    fn an_embeddings_benchmark_shows_not_applicable_for_token_figures_and_its_input_rate() {
        use crate::report::tests::served_at;
        let mut report = sample_report();
        report.benchmarks.truncate(1);
        let generating = console_summary(&report);
        assert!(!generating.contains("n/a"), "{generating}");
        assert!(!generating.contains("inputs/s"), "{generating}");
        let b = &mut report.benchmarks[0];
        let records: Vec<_> = (0..4)
            .map(|i| served_at(i, i64::try_from(i).expect("small") * 10, &[], 30, 12))
            .collect();
        b.records = crate::record::CompactRecords::from_records(b.start, &records);
        b.recompute();
        assert!(b.metrics.pooled);
        let text = console_summary(&report);
        let row = table_lines(&text)[3];
        let cells: Vec<&str> = row.split_whitespace().collect();
        // ok, errors, req/s, out tok/s, then latency, TTFT, ITL, TPOT p50/p95.
        let at = cells.len() - 12;
        assert_eq!(cells[at], "4", "{row}");
        assert_eq!(cells[at + 3], "n/a", "out tok/s: {row}");
        assert_ne!(cells[at + 4], "n/a", "latency applies: {row}");
        assert_eq!(&cells[at + 6..], ["n/a"; 6], "TTFT, ITL, TPOT: {row}");
        let m = &report.benchmarks[0].metrics;
        let line = format!(
            "embeddings in {}: {:.2} inputs/s, {:.1} input tok/s",
            report.benchmarks[0].label(),
            m.requests_per_s,
            m.prompt_tokens_per_s
        );
        assert!(text.contains(&line), "{text}");
        assert!(m.prompt_tokens_per_s > 0.0);
    }

    #[test]
    fn a_benchmark_with_tool_calls_gets_a_line_with_their_count_and_time_to_first_call() {
        use crate::report::tests::served_at;
        use guidebench_core::request::ToolCallOutput;
        let mut report = sample_report();
        assert!(
            !console_summary(&report).contains("tool calls in"),
            "none without tools"
        );
        let mut records: Vec<_> = (0..4).map(|i| served_at(i, 0, &[40, 50], 60, 12)).collect();
        for (record, count) in records.iter_mut().zip([1, 1, 2, 0]) {
            record.tool_calls = Some(ToolCallOutput {
                count,
                with_text: false,
                first: (count > 0).then(|| crate::report::tests::ms(40)),
                calls: Vec::new(),
            });
        }
        report.benchmarks[0] = crate::report::BenchmarkReport::from_records(
            "synchronous",
            "synchronous".into(),
            crate::report::tests::ms(0),
            crate::report::tests::ms(1_000),
            &records,
        );
        let text = console_summary(&report);
        let line = text
            .lines()
            .find(|l| l.starts_with("tool calls in"))
            .expect("a tool-call line");
        assert!(
            line.contains("3 of 4 answers called tools, 1.00 calls per answer"),
            "{line}"
        );
        assert!(
            line.contains("time to first tool call p50 40.0 ms"),
            "{line}"
        );
    }

    #[test]
    fn an_empty_distribution_shows_a_dash() {
        let mut report = sample_report();
        report.benchmarks.truncate(1);
        report.benchmarks[0].records.records.clear();
        report.benchmarks[0].recompute();
        report.interrupted = true;
        let text = console_summary(&report);
        assert!(text.contains("\n(interrupted"));
        let row = table_lines(&text)[3];
        assert!(row.ends_with('-'), "{row}");
    }
}
