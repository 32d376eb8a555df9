//! A self-contained HTML report: one page rendered from a minijinja
//! template with HTML auto-escaping, its charts inline SVG drawn by
//! [`super::chart`], its style inline; no script, no font, nothing loaded
//! from anywhere.
//!
//! The page fits 1280 px without scrolling sideways: tables wrap their
//! text, charts scale to a grid column. What it shows:
//!
//! * a summary row per benchmark, with its warnings (errors, an
//!   interruption, a client or target that saturated) beside its numbers;
//! * the answers (objectives, goodput or knee conclusion) and the
//!   confidence intervals;
//! * load curves: TTFT, ITL and latency (p50 solid, p95 dashed) against
//!   achieved requests/s and output tokens/s, across the benchmarks;
//! * per benchmark: the CDFs of TTFT, ITL (per gap) and latency, and a
//!   timeline of requests in flight, output tokens/s, TTFT per request and
//!   dispatch delay, warm-up and cool-down shaded;
//! * the environment, the command line (when the report has it, under
//!   `config.command`) and the configuration.
//!
//! Series are runs: one colour per backend label of a report
//! ([`BenchmarkReport::backend`]), so a report that benchmarked two
//! backends side by side reads as a comparison, and one colour per report
//! in [`comparison_to_html`]. Guarantees and the tests that hold them:
//! the page loads nothing (`the_page_loads_nothing_from_anywhere`), every
//! chart has data (`every_chart_on_the_page_has_drawn_data`), text from the
//! report is escaped (`hostile_names_and_command_lines_are_escaped`), the
//! layout fits 1280 px (`the_layout_is_held_to_1280_px`).

use std::path::Path;

use minijinja::{AutoEscape, Environment};
use serde::Serialize;
use serde_json::{Map, Value};

use super::chart::{Band, Chart, Mark, PALETTE, Rule, Series, cdf_points};
use super::compare::{Comparison, Verdict, compare};
use super::model::{BenchmarkReport, Report};
use super::{count_as_f64, fixed, format_utc, micros_as_secs, ms_at, ms_mean};
use crate::metrics::Distribution;
use crate::record::{CompactRecord, Excluded};
use crate::{Error, Result};
use guidebench_core::request::RequestStatus;

/// The page template.
const TEMPLATE: &str = include_str!("../../templates/report.html");

/// A run drawn in one colour: a whole report, or the benchmarks of one
/// backend label within it.
#[derive(Debug, Clone)]
pub(crate) struct Run<'a> {
    /// Its name in legends (empty for the only run of a plain report).
    pub label: String,
    /// Index into the palette.
    pub colour: usize,
    /// Its benchmarks, in the order they ran.
    pub benchmarks: Vec<&'a BenchmarkReport>,
}

/// The runs of `report`: one per distinct backend label, in order of first
/// appearance, labelled `prefix` and the backend label; colours from
/// `first_colour` on.
pub(crate) fn runs_of<'a>(report: &'a Report, prefix: &str, first_colour: usize) -> Vec<Run<'a>> {
    let mut runs: Vec<(Option<&str>, Vec<&BenchmarkReport>)> = Vec::new();
    for b in &report.benchmarks {
        let key = b.backend.as_deref();
        match runs.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(b),
            None => runs.push((key, vec![b])),
        }
    }
    runs.into_iter()
        .enumerate()
        .map(|(i, (backend, benchmarks))| Run {
            label: match (prefix.is_empty(), backend) {
                (true, Some(b)) => b.to_owned(),
                (true, None) => String::new(),
                (false, Some(b)) => format!("{prefix} {b}"),
                (false, None) => prefix.to_owned(),
            },
            colour: first_colour + i,
            benchmarks,
        })
        .collect()
}

/// The TTFT and latency objectives (seconds) of the first benchmark of
/// `runs` that was judged against objectives.
fn objectives(runs: &[Run<'_>]) -> (Option<f64>, Option<f64>) {
    runs.iter()
        .flat_map(|r| &r.benchmarks)
        .find_map(|b| b.metrics.slo.as_ref())
        .map_or((None, None), |s| (s.objectives.ttft, s.objectives.latency))
}

/// A dashed line at an objective of `seconds`, drawn in ms.
fn objective_rule(vertical: bool, seconds: Option<f64>) -> Option<Rule> {
    let ms = seconds? * 1e3;
    Some(Rule {
        vertical,
        at: ms,
        label: format!("objective {ms:.0} ms"),
    })
}

/// `label stat`, or `stat` alone for an unnamed run.
fn series_label(run: &Run<'_>, stat: &str) -> String {
    if run.label.is_empty() {
        stat.to_owned()
    } else {
        format!("{} {stat}", run.label)
    }
}

/// A chart ready for the page.
#[derive(Debug, Serialize)]
struct ChartView {
    svg: String,
}

/// Only the charts that have something to draw.
fn views(charts: Vec<Chart>) -> Vec<ChartView> {
    charts
        .into_iter()
        .filter(Chart::has_data)
        .map(|c| ChartView { svg: c.to_svg() })
        .collect()
}

type Statistic = fn(&BenchmarkReport) -> &Distribution;

/// TTFT, ITL and latency (p50 and p95, ms) against achieved requests/s and
/// output tokens/s: one chart per pair, one colour per run.
pub(crate) fn load_curves(runs: &[Run<'_>]) -> Vec<Chart> {
    type Rate = fn(&BenchmarkReport) -> f64;
    let xs: [(&str, Rate); 2] = [
        ("achieved requests/s", |b| b.metrics.requests_per_s),
        ("output tokens/s", |b| b.metrics.output_tokens_per_s),
    ];
    let ys: [(&str, Statistic); 3] = [
        ("TTFT", |b| &b.metrics.successful.ttft),
        ("ITL", |b| &b.metrics.successful.itl),
        ("Latency", |b| &b.metrics.successful.latency),
    ];
    let (ttft_objective, latency_objective) = objectives(runs);
    let mut charts = Vec::new();
    for (x_name, x_of) in xs {
        for (y_name, y_of) in ys {
            let mut chart = Chart::new(
                format!("{y_name} against {x_name}"),
                x_name,
                format!("{y_name} ms"),
            );
            chart.rules.extend(match y_name {
                "TTFT" => objective_rule(false, ttft_objective),
                "Latency" => objective_rule(false, latency_objective),
                _ => None,
            });
            for run in runs {
                for (p, dashed) in [(50.0, false), (95.0, true)] {
                    let mut points: Vec<(f64, f64)> = run
                        .benchmarks
                        .iter()
                        .filter_map(|b| Some((x_of(b), ms_at(y_of(b), p)?)))
                        .collect();
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let series = Series::new(
                        series_label(run, &format!("p{p:.0}")),
                        run.colour,
                        Mark::LinePoints,
                    )
                    .with_points(points);
                    chart
                        .series
                        .push(if dashed { series.dashed() } else { series });
                }
            }
            charts.push(chart);
        }
    }
    charts
}

/// Successful measured records.
fn served(b: &BenchmarkReport) -> impl Iterator<Item = &CompactRecord> {
    b.records
        .measured()
        .filter(|r| r.status == RequestStatus::Success)
}

fn us_as_ms(us: i64) -> f64 {
    micros_as_secs(us) * 1e3
}

/// The CDFs of TTFT, ITL (per gap) and latency of the benchmarks named
/// `name`, one series per run that has it.
fn distributions(name: &str, runs: &[Run<'_>]) -> Vec<Chart> {
    type Values = fn(&BenchmarkReport) -> Vec<f64>;
    let metrics: [(&str, Values); 3] = [
        ("TTFT", |b| {
            served(b)
                .filter_map(|r| Some(us_as_ms(r.first_token?.saturating_sub(r.start?))))
                .collect()
        }),
        ("ITL (per gap)", |b| {
            served(b)
                .flat_map(|r| r.token_gaps.iter().map(|&g| f64::from(g) / 1e3))
                .collect()
        }),
        ("Latency", |b| {
            served(b)
                .filter_map(|r| Some(us_as_ms(r.end?.saturating_sub(r.start?))))
                .collect()
        }),
    ];
    let (ttft_objective, latency_objective) = objectives(runs);
    metrics
        .into_iter()
        .map(|(metric, values)| {
            let mut chart = Chart::new(
                format!("{metric}: cumulative distribution"),
                format!("{metric} ms"),
                "share of requests ≤ x".replace(
                    "requests",
                    if metric.starts_with("ITL") {
                        "gaps"
                    } else {
                        "requests"
                    },
                ),
            );
            chart.rules.extend(match metric {
                "TTFT" => objective_rule(true, ttft_objective),
                "Latency" => objective_rule(true, latency_objective),
                _ => None,
            });
            for run in runs {
                for b in run.benchmarks.iter().filter(|b| b.name == name) {
                    chart.series.push(
                        Series::new(series_label(run, "CDF"), run.colour, Mark::Step)
                            .with_points(cdf_points(values(b))),
                    );
                }
            }
            chart
        })
        .collect()
}

/// A round bin width, in µs, for about 60 bins over `span_us`.
fn bin_width_us(span_us: i64) -> i64 {
    let raw = (span_us / 60).max(1_000);
    let magnitude = 10_i64.pow(raw.ilog10());
    [1, 2, 5, 10]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|w| *w >= raw)
        .unwrap_or(10 * magnitude)
}

/// The mean number of requests in flight over bins of a round width (about
/// 60 over the run), as step points `(bin start s, mean)` with the last
/// bin's end; `events` are `(µs offset, +1 send / −1 end)`. A step per send
/// and end would draw a solid block for a synchronous run; the mean per
/// bin shows the level and its changes.
fn mean_in_flight(mut events: Vec<(i64, i64)>) -> Vec<(f64, f64)> {
    events.sort_unstable();
    let (Some(&(lo, _)), Some(&(hi, _))) = (events.first(), events.last()) else {
        return Vec::new();
    };
    let width = bin_width_us(hi - lo);
    let first = lo.div_euclid(width);
    let bins = usize::try_from(hi.div_euclid(width) - first + 1).unwrap_or(1);
    // µs × requests accumulated in each bin.
    let mut area = vec![0.0_f64; bins];
    let mut level = 0_i64;
    let mut at = lo;
    for (next, change) in events {
        // Spread `level` over [at, next) bin by bin.
        let mut from = at;
        while from < next && level != 0 {
            let k = from.div_euclid(width);
            let to = next.min((k + 1) * width);
            if let Some(a) = usize::try_from(k - first)
                .ok()
                .and_then(|i| area.get_mut(i))
            {
                #[allow(clippy::cast_precision_loss)] // µs spans and counts far below 2^52.
                let added = (to - from) as f64 * level as f64;
                *a += added;
            }
            from = to;
        }
        at = next;
        level += change;
    }
    #[allow(clippy::cast_precision_loss)] // a bin's width in µs.
    let width_f = width as f64;
    let mut points: Vec<(f64, f64)> = (first..)
        .zip(&area)
        .map(|(k, a)| (micros_as_secs(k.saturating_mul(width)), a / width_f))
        .collect();
    if let Some(&(x, y)) = points.last() {
        points.push((x + micros_as_secs(width), y));
    }
    points
}

/// Requests in flight, output tokens/s, TTFT per request and dispatch
/// delay over the run, in seconds from the benchmark's start, for the
/// benchmarks named `name` (one series per run); warm-up and cool-down
/// shaded.
fn timelines(name: &str, runs: &[Run<'_>]) -> Vec<Chart> {
    let x = "seconds from the benchmark's start";
    let mut in_flight = Chart::new("Requests in flight (mean per bin)", x, "requests");
    let mut tokens = Chart::new("Output tokens/s", x, "tokens/s");
    let mut ttft = Chart::new("TTFT of each request (by send time)", x, "TTFT ms");
    ttft.rules.extend(objective_rule(false, objectives(runs).0));
    let mut delay = Chart::new("Dispatch delay (actual − planned send)", x, "delay ms");
    let (mut warmup, mut cooldown) = (None::<(f64, f64)>, None::<(f64, f64)>);
    let widen = |band: &mut Option<(f64, f64)>, from: f64, to: f64| {
        *band = Some(band.map_or((from, to), |(a, b)| (a.min(from), b.max(to))));
    };
    for run in runs {
        for b in run.benchmarks.iter().filter(|b| b.name == name) {
            let records = &b.records.records;
            let duration = b.metrics.duration_s;
            // Requests in flight: +1 at each send, −1 at each end (an
            // unfinished request ends with the window).
            let end_us = b.records.offset_of(b.end);
            let mut events: Vec<(i64, i64)> = Vec::with_capacity(records.len() * 2);
            for r in records {
                if let Some(start) = r.start {
                    events.push((start, 1));
                    events.push((r.end.unwrap_or(end_us.max(start)), -1));
                }
            }
            in_flight.series.push(
                Series::new(series_label(run, "in flight"), run.colour, Mark::Step)
                    .with_points(mean_in_flight(events)),
            );
            // Output tokens/s, by bins of a round width.
            let instants: Vec<i64> = records.iter().flat_map(|r| r.token_offsets()).collect();
            if let (Some(&lo), Some(&hi)) = (instants.iter().min(), instants.iter().max()) {
                let width = bin_width_us(hi - lo);
                let first = lo.div_euclid(width);
                let bins = usize::try_from((hi.div_euclid(width) - first) + 1).unwrap_or(1);
                let mut counts = vec![0_usize; bins];
                for t in instants {
                    if let Some(c) = usize::try_from(t.div_euclid(width) - first)
                        .ok()
                        .and_then(|i| counts.get_mut(i))
                    {
                        *c += 1;
                    }
                }
                let width_s = micros_as_secs(width);
                let mut points: Vec<(f64, f64)> = (first..)
                    .zip(&counts)
                    .map(|(k, &c)| {
                        (
                            micros_as_secs(k.saturating_mul(width)),
                            count_as_f64(c) / width_s,
                        )
                    })
                    .collect();
                if let Some(&(last_x, last_y)) = points.last() {
                    points.push((last_x + width_s, last_y));
                }
                tokens.series.push(
                    Series::new(series_label(run, "output tokens/s"), run.colour, Mark::Step)
                        .with_points(points),
                );
            }
            ttft.series.push(
                Series::new(series_label(run, "TTFT"), run.colour, Mark::Points).with_points(
                    records
                        .iter()
                        .filter(|r| r.status == RequestStatus::Success)
                        .filter_map(|r| {
                            let start = r.start?;
                            Some((
                                micros_as_secs(start),
                                us_as_ms(r.first_token?.saturating_sub(start)),
                            ))
                        })
                        .collect(),
                ),
            );
            delay.series.push(
                Series::new(
                    series_label(run, "dispatch delay"),
                    run.colour,
                    Mark::Points,
                )
                .with_points(
                    records
                        .iter()
                        .filter_map(|r| {
                            let planned = r.scheduled?;
                            Some((
                                micros_as_secs(planned),
                                us_as_ms(r.start?.saturating_sub(planned)),
                            ))
                        })
                        .collect(),
                ),
            );
            for r in records {
                let (Some(start), why) = (r.start, r.excluded) else {
                    continue;
                };
                let end = micros_as_secs(r.end.unwrap_or(start));
                match why {
                    Some(Excluded::Warmup) => widen(&mut warmup, micros_as_secs(start), 0.0),
                    Some(Excluded::Cooldown) => widen(&mut cooldown, duration, end),
                    None => {}
                }
            }
        }
    }
    let mut charts = vec![in_flight, tokens, ttft, delay];
    for chart in &mut charts {
        if let Some((from, to)) = warmup {
            chart.bands.push(Band {
                from,
                to,
                label: "warm-up",
            });
        }
        if let Some((from, to)) = cooldown {
            chart.bands.push(Band {
                from,
                to,
                label: "cool-down",
            });
        }
    }
    charts
}

/// One row of the summary table.
#[derive(Debug, Serialize)]
struct SummaryRow {
    anchor: String,
    name: String,
    run: String,
    colour: &'static str,
    profile: String,
    ok: usize,
    errors: usize,
    incomplete: usize,
    requests_per_s: String,
    output_tokens_per_s: String,
    concurrency: String,
    cells: Vec<String>,
    warnings: Vec<String>,
}

/// A `label: value` line.
#[derive(Debug, Serialize)]
struct Fact {
    label: String,
    value: String,
}

fn fact(label: impl Into<String>, value: impl Into<String>) -> Fact {
    Fact {
        label: label.into(),
        value: value.into(),
    }
}

/// One row of a distribution table.
#[derive(Debug, Serialize)]
struct DistributionRow {
    name: &'static str,
    cells: Vec<String>,
}

/// One benchmark of one run, in its section.
#[derive(Debug, Serialize)]
struct BenchmarkRunView {
    run: String,
    colour: &'static str,
    facts: Vec<Fact>,
    warnings: Vec<String>,
    errors: Vec<Fact>,
    distributions: Vec<DistributionRow>,
}

/// Every benchmark of one name, across the runs.
#[derive(Debug, Serialize)]
struct BenchmarkSection {
    anchor: String,
    name: String,
    distributions: Vec<ChartView>,
    timelines: Vec<ChartView>,
    runs: Vec<BenchmarkRunView>,
}

/// One run in the legend of the page.
#[derive(Debug, Serialize)]
struct RunView {
    label: String,
    colour: &'static str,
}

/// One metric of a comparison.
#[derive(Debug, Serialize)]
struct DeltaRow {
    benchmark: String,
    metric: &'static str,
    baseline: String,
    candidate: String,
    change: String,
    better: &'static str,
    verdict: &'static str,
}

/// One candidate against the baseline.
#[derive(Debug, Serialize)]
struct ComparisonView {
    baseline: String,
    candidate: String,
    rows: Vec<DeltaRow>,
    only_in_baseline: Vec<String>,
    only_in_candidate: Vec<String>,
}

/// Everything the template reads.
#[derive(Debug, Serialize)]
struct Page {
    title: String,
    subtitle: String,
    runs: Vec<RunView>,
    notes: Vec<String>,
    summary: Vec<SummaryRow>,
    multi_run: bool,
    answers: String,
    intervals: Vec<Vec<String>>,
    load_curves: Vec<ChartView>,
    benchmarks: Vec<BenchmarkSection>,
    comparisons: Vec<ComparisonView>,
    environment: Vec<Fact>,
    engine: Vec<Fact>,
    command: Option<String>,
    config: Option<String>,
}

fn colour(run: &Run<'_>) -> &'static str {
    PALETTE[run.colour % PALETTE.len()]
}

/// An id for a benchmark's section: `b-` and its position.
fn anchor(i: usize) -> String {
    format!("b-{i}")
}

/// The warnings of one benchmark: errors, an interruption, saturation.
fn warnings_of(b: &BenchmarkReport, interrupted_last: bool) -> Vec<String> {
    let m = &b.metrics;
    let mut out = Vec::new();
    if interrupted_last {
        out.push("interrupted: this benchmark may be partial".to_owned());
    }
    if m.errored.count > 0 {
        let labels: Vec<String> = m
            .errors_by_label
            .iter()
            .map(|(l, n)| format!("{l} {n}"))
            .collect();
        out.push(format!(
            "{} errored ({})",
            m.errored.count,
            labels.join(", ")
        ));
    }
    if m.incomplete.count > 0 {
        out.push(format!("{} incomplete at the end", m.incomplete.count));
    }
    if let Some(reasons) = b
        .extra
        .get("client_saturated")
        .and_then(|f| f.get("reasons"))
        .and_then(Value::as_array)
    {
        let reasons: Vec<&str> = reasons.iter().filter_map(Value::as_str).collect();
        out.push(format!(
            "client saturated: {} (the client, not the target, may have set the pace)",
            reasons.join("; ")
        ));
    }
    if let Some(fired) = b
        .extra
        .get("over_saturation")
        .and_then(|s| s.get("fired"))
        .filter(|f| !f.is_null())
    {
        let at = fired.get("at_s").and_then(Value::as_f64).unwrap_or(0.0);
        let reason = fired.get("reason").and_then(Value::as_str).unwrap_or("");
        out.push(format!("over-saturated at {at:.1} s: {reason}"));
    }
    out
}

fn summary_rows(
    runs: &[Run<'_>],
    sections: &[String],
    interrupted_last: Option<&str>,
) -> Vec<SummaryRow> {
    let mut rows = Vec::new();
    for run in runs {
        for b in &run.benchmarks {
            let m = &b.metrics;
            let s = &m.successful;
            let mut cells = Vec::new();
            for d in [&s.latency, &s.ttft, &s.itl, &s.tpot] {
                cells.push(fixed(ms_at(d, 50.0), 2));
                cells.push(fixed(ms_at(d, 95.0), 2));
            }
            let section = sections.iter().position(|n| *n == b.name).unwrap_or(0);
            rows.push(SummaryRow {
                anchor: anchor(section),
                name: b.name.clone(),
                run: run.label.clone(),
                colour: colour(run),
                profile: b.profile_label(),
                ok: s.count,
                errors: m.errored.count,
                incomplete: m.incomplete.count,
                requests_per_s: format!("{:.2}", m.requests_per_s),
                output_tokens_per_s: format!("{:.1}", m.output_tokens_per_s),
                concurrency: format!("{:.2}", m.mean_concurrency),
                cells,
                warnings: warnings_of(b, interrupted_last == Some(b.name.as_str())),
            });
        }
    }
    rows
}

fn distribution_row(
    name: &'static str,
    d: &Distribution,
    scale: f64,
    decimals: usize,
) -> DistributionRow {
    let v = |x: f64| {
        if d.count == 0 {
            "-".to_owned()
        } else {
            format!("{:.decimals$}", x * scale)
        }
    };
    let p = |q: f64| d.at(q).map_or_else(|| "-".to_owned(), &v);
    DistributionRow {
        name,
        cells: vec![
            d.count.to_string(),
            v(d.mean),
            v(d.std),
            v(d.min),
            p(50.0),
            p(90.0),
            p(95.0),
            p(99.0),
            v(d.max),
        ],
    }
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn benchmark_run_view(run: &Run<'_>, b: &BenchmarkReport, interrupted: bool) -> BenchmarkRunView {
    let m = &b.metrics;
    let mut facts = vec![
        fact("Profile", b.profile_label()),
        fact("Start", format_utc(b.start)),
        fact("Duration s", format!("{:.3}", m.duration_s)),
        fact(
            "Requests ok / errored / incomplete / all",
            format!(
                "{} / {} / {} / {}",
                m.successful.count, m.errored.count, m.incomplete.count, m.all.count
            ),
        ),
        fact(
            "Mean dispatch delay ms",
            fixed(ms_mean(&m.dispatch_delay), 3),
        ),
    ];
    if let Some(n) = b.warmup_excluded {
        facts.push(fact("Warm-up requests excluded", n.to_string()));
    }
    if let Some(n) = b.cooldown_excluded {
        facts.push(fact("Cool-down requests excluded", n.to_string()));
    }
    if m.retries > 0 {
        facts.push(fact(
            "Sends retried on a fresh connection",
            m.retries.to_string(),
        ));
    }
    if let Some(client) = &b.client {
        facts.push(fact("Client", client.summary()));
    }
    for (key, value) in &b.extra {
        if key != "client_saturated" && key != "over_saturation" {
            facts.push(fact(key.clone(), value_text(value)));
        }
    }
    let s = &m.successful;
    let mut distributions = vec![
        distribution_row("Latency ms", &s.latency, 1e3, 2),
        distribution_row("TTFT ms", &s.ttft, 1e3, 2),
        distribution_row("ITL ms (per gap)", &s.itl, 1e3, 2),
        distribution_row("ITL ms (per request)", &s.itl_per_request, 1e3, 2),
        distribution_row("TPOT ms", &s.tpot, 1e3, 2),
        distribution_row(
            "Dispatch delay ms (all requests)",
            &m.dispatch_delay,
            1e3,
            2,
        ),
    ];
    for (name, d) in [
        ("Prompt tokens", &s.prompt_tokens),
        ("Output tokens", &s.output_tokens),
        ("Total tokens", &s.total_tokens),
    ] {
        distributions.push(distribution_row(name, d, 1.0, 1));
    }
    BenchmarkRunView {
        run: run.label.clone(),
        colour: colour(run),
        facts,
        warnings: warnings_of(b, interrupted),
        errors: m
            .errors_by_label
            .iter()
            .map(|(l, n)| fact(l.clone(), n.to_string()))
            .collect(),
        distributions,
    }
}

/// Benchmark names in order of first appearance across the runs.
fn section_names(runs: &[Run<'_>]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for b in runs.iter().flat_map(|r| &r.benchmarks) {
        if !names.contains(&b.name) {
            names.push(b.name.clone());
        }
    }
    names
}

/// The name of the interrupted benchmark of `report` (its last), if any.
fn interrupted_name(report: &Report) -> Option<&str> {
    report
        .interrupted
        .then(|| report.benchmarks.last().map(|b| b.name.as_str()))
        .flatten()
}

fn sections(
    runs: &[Run<'_>],
    names: &[String],
    interrupted: &[Option<&str>],
) -> Vec<BenchmarkSection> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| BenchmarkSection {
            anchor: anchor(i),
            name: name.clone(),
            distributions: views(distributions(name, runs)),
            timelines: views(timelines(name, runs)),
            runs: runs
                .iter()
                .zip(interrupted)
                .flat_map(|(run, stopped)| {
                    run.benchmarks
                        .iter()
                        .filter(|b| b.name == *name)
                        .map(move |b| benchmark_run_view(run, b, *stopped == Some(name.as_str())))
                })
                .collect(),
        })
        .collect()
}

/// `mean ± half-width` in ms, or the mean alone.
fn mean_cell(d: &Distribution) -> String {
    match (d.count, d.mean_interval) {
        (0, _) => "-".into(),
        (_, Some(i)) => format!(
            "{:.2} ±{:.2}",
            d.mean * 1e3,
            (i.upper - i.lower) / 2.0 * 1e3
        ),
        (_, None) => format!("{:.2}", d.mean * 1e3),
    }
}

/// `[lower, upper]` in ms of the p-th percentile, or `-`.
fn percentile_cell(d: &Distribution, p: f64) -> String {
    d.interval_at(p).map_or_else(
        || "-".into(),
        |i| format!("[{:.2}, {:.2}]", i.lower * 1e3, i.upper * 1e3),
    )
}

fn interval_rows(runs: &[Run<'_>]) -> Vec<Vec<String>> {
    runs.iter()
        .flat_map(|run| run.benchmarks.iter().map(move |b| (run, b)))
        .filter(|(_, b)| b.metrics.successful.count >= 2)
        .map(|(run, b)| {
            let s = &b.metrics.successful;
            vec![
                b.name.clone(),
                run.label.clone(),
                mean_cell(&s.ttft),
                percentile_cell(&s.ttft, 95.0),
                mean_cell(&s.itl_per_request),
                mean_cell(&s.latency),
                percentile_cell(&s.latency, 95.0),
            ]
        })
        .collect()
}

/// `map` flattened to `a.b: value` facts, nested objects as dotted keys.
fn flatten(prefix: &str, map: &Map<String, Value>, out: &mut Vec<Fact>) {
    for (key, value) in map {
        let label = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Value::Object(inner) => flatten(&label, inner, out),
            Value::Null => {}
            other => out.push(fact(label, value_text(other))),
        }
    }
}

fn machine_facts(report: &Report) -> Vec<Fact> {
    let env = &report.environment;
    vec![
        fact("guidebench", env.guidebench_version.clone()),
        fact("OS / architecture", format!("{} / {}", env.os, env.arch)),
        fact("CPU", env.cpu_model.clone().unwrap_or_default()),
        fact(
            "Cores (logical / available)",
            format!("{} / {}", env.logical_cores, env.available_parallelism),
        ),
        fact("Host", env.hostname.clone().unwrap_or_default()),
    ]
}

/// Engine facts (model, load time, batch, scheduler) and the sampling
/// settings of the configuration.
fn engine_facts(report: &Report) -> Vec<Fact> {
    let mut facts = Vec::new();
    flatten("", &report.environment.backend, &mut facts);
    // Side by side: each backend's own facts under its label, what stopped
    // one, and whether greedy outputs agreed.
    for run in &report.backends {
        flatten(&run.label, &run.environment, &mut facts);
        if let Some(failure) = &run.failure {
            facts.push(fact(format!("{}: failed", run.label), failure.clone()));
        }
    }
    for a in &report.agreement {
        facts.push(fact(
            format!(
                "greedy outputs, {} vs {} in {}",
                a.backend, a.reference, a.benchmark
            ),
            format!("{} of {} identical", a.agreed, a.compared),
        ));
    }
    if let Some(Value::Object(sampling)) = report.config.get("sampling") {
        flatten("sampling", sampling, &mut facts);
    }
    facts
}

/// The command line the report was made by, when it has one
/// (`config.command`, a string or a list of arguments).
fn command_of(report: &Report) -> Option<String> {
    match report.config.get("command")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(args) => Some(
            args.iter()
                .map(|a| {
                    let a = value_text(a);
                    if a.is_empty()
                        || a.contains(|c: char| {
                            c.is_whitespace() || "'\"$`\\;&|<>(){}*?".contains(c)
                        })
                    {
                        format!("'{}'", a.replace('\'', "'\\''"))
                    } else {
                        a
                    }
                })
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

fn render(page: &Page, what: &'static str) -> Result<String> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.add_template("report.html", TEMPLATE)
        .and_then(|()| env.get_template("report.html"))
        .and_then(|t| t.render(minijinja::Value::from(minijinja::value::Serde(page))))
        .map_err(|source| Error::Render { what, source })
}

/// The page of one report; see the module docs.
pub fn render_html(report: &Report) -> Result<String> {
    let runs = runs_of(report, "", 0);
    let names = section_names(&runs);
    let interrupted = vec![interrupted_name(report); runs.len()];
    let mut notes = Vec::new();
    if report.interrupted {
        notes.push("The run was interrupted: the last benchmark may be partial.".to_owned());
    }
    if let Some(failure) = &report.failure {
        notes.push(format!("The run failed: {failure}"));
    }
    let answers = super::console::answers_text(report);
    let page = Page {
        title: "guidebench report".into(),
        subtitle: format!(
            "Created {} by guidebench {} (report schema {}).",
            format_utc(report.created),
            report.guidebench_version,
            report.schema_version
        ),
        runs: runs
            .iter()
            .filter(|r| !r.label.is_empty())
            .map(|r| RunView {
                label: r.label.clone(),
                colour: colour(r),
            })
            .collect(),
        notes,
        summary: summary_rows(&runs, &names, interrupted_name(report)),
        multi_run: runs.len() > 1,
        answers: answers.trim_matches('\n').to_owned(),
        intervals: interval_rows(&runs),
        load_curves: views(load_curves(&runs)),
        benchmarks: sections(&runs, &names, &interrupted),
        comparisons: Vec::new(),
        environment: machine_facts(report),
        engine: engine_facts(report),
        command: command_of(report),
        config: serde_json::to_string_pretty(&report.config).ok(),
    };
    render(&page, "HTML report")
}

/// The report as one self-contained HTML page (see the module docs). A
/// template error, which the tests rule out, renders as a page saying so.
pub fn to_html(report: &Report) -> String {
    render_html(report).unwrap_or_else(|err| {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><meta charset=\"utf-8\"><title>guidebench report\
             </title><p>{}</p></html>\n",
            super::chart::escape(&err.to_string())
        )
    })
}

/// Writes the report's page to `path`.
pub fn write_html(report: &Report, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let html = render_html(report)?;
    std::fs::write(path, html).map_err(|e| guidebench_core::Error::io(path, e).into())
}

fn delta_rows(comparison: &Comparison) -> Vec<DeltaRow> {
    let mut rows = Vec::new();
    for b in &comparison.benchmarks {
        for m in &b.metrics {
            rows.push(DeltaRow {
                benchmark: b.name.clone(),
                metric: m.metric,
                baseline: fixed(m.baseline, 2),
                candidate: fixed(m.candidate, 2),
                change: m.change_percent.map_or_else(
                    || "-".to_owned(),
                    |p| format!("{p:+.1} %").replace('-', "−"),
                ),
                better: m.better_side().unwrap_or(""),
                verdict: match m.verdict {
                    Verdict::Better | Verdict::Worse => "yes",
                    Verdict::NoDifference => "no, within chance",
                    Verdict::Unknown => "",
                },
            });
        }
    }
    rows
}

/// Several reports on one page: the first is the baseline; each run (a
/// report, or one backend label of it) is one colour in every chart. A
/// delta table compares each other report with the baseline, benchmark by
/// benchmark (paired by name); load curves, CDFs and timelines are
/// overlaid. `reports` pairs each report with its name (a file name).
pub fn comparison_to_html(reports: &[(String, Report)]) -> Result<String> {
    let mut runs = Vec::new();
    let mut interrupted = Vec::new();
    for (label, report) in reports {
        let before = runs.len();
        runs.extend(runs_of(report, label, before));
        interrupted.resize(runs.len(), interrupted_name(report));
    }
    let names = section_names(&runs);
    let mut comparisons = Vec::new();
    if let Some(((base_label, baseline), others)) = reports.split_first() {
        for (label, candidate) in others {
            let c = compare(baseline, candidate);
            comparisons.push(ComparisonView {
                baseline: base_label.clone(),
                candidate: label.clone(),
                rows: delta_rows(&c),
                only_in_baseline: c.only_in_baseline,
                only_in_candidate: c.only_in_candidate,
            });
        }
    }
    let mut environment = Vec::new();
    let mut engine = Vec::new();
    for (label, report) in reports {
        for f in machine_facts(report) {
            environment.push(fact(format!("{label}: {}", f.label), f.value));
        }
        for f in engine_facts(report) {
            engine.push(fact(format!("{label}: {}", f.label), f.value));
        }
    }
    let summary = summary_rows(&runs, &names, None);
    let page = Page {
        title: "guidebench comparison".into(),
        subtitle: format!(
            "{} reports; the first, {}, is the baseline.",
            reports.len(),
            reports.first().map_or("", |(l, _)| l.as_str())
        ),
        runs: runs
            .iter()
            .map(|r| RunView {
                label: r.label.clone(),
                colour: colour(r),
            })
            .collect(),
        notes: reports
            .iter()
            .filter(|(_, r)| r.interrupted)
            .map(|(l, _)| {
                format!("{l}: the run was interrupted; its last benchmark may be partial.")
            })
            .collect(),
        summary,
        multi_run: true,
        answers: String::new(),
        intervals: interval_rows(&runs),
        load_curves: views(load_curves(&runs)),
        benchmarks: sections(&runs, &names, &interrupted),
        comparisons,
        environment,
        engine,
        command: None,
        config: None,
    };
    render(&page, "comparison page")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    /// The sample report with a sweep's worth of benchmarks on two backend
    /// labels and a hostile command line.
    fn two_backend_report() -> Report {
        let mut report = sample_report();
        let mut more = Vec::new();
        for (i, b) in report.benchmarks.iter().enumerate() {
            let mut copy = b.clone();
            copy.backend = Some("fast".into());
            for r in &mut copy.records.records {
                r.end = r
                    .end
                    .map(|e| e + 20_000 * i64::try_from(i + 1).expect("small"));
            }
            copy.recompute();
            more.push(copy);
        }
        for b in &mut report.benchmarks {
            b.backend = Some("slow \"<b>\"".into());
        }
        report.benchmarks.extend(more);
        report.config["command"] =
            Value::from("guidebench run --output 'kind=html,path=</pre><script>x()</script>'");
        report
    }

    #[test]
    fn the_html_report_contains_the_numbers_and_the_environment() {
        let report = sample_report();
        let html = render_html(&report).expect("renders");
        let m = &report.benchmarks[0].metrics;
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains(&format!("{:.2}", m.requests_per_s)));
        assert!(html.contains(&format!("{:.1}", m.output_tokens_per_s)));
        assert!(html.contains(&format!("{:.2}", m.successful.ttft.median * 1e3)));
        assert!(html.contains(&format!(
            "{:.2}",
            m.successful.itl.at(95.0).expect("p95") * 1e3
        )));
        assert!(html.contains(&report.environment.os));
        assert!(html.contains("mock &lt;fast&gt;"));
        assert!(html.contains("offline,engine=mock"));
        assert!(html.contains("engine_panic"));
        for title in [
            "TTFT against achieved requests/s",
            "Latency against output tokens/s",
            "TTFT: cumulative distribution",
            "ITL (per gap): cumulative distribution",
            "Requests in flight",
            "Output tokens/s",
            "TTFT of each request",
            "Dispatch delay",
        ] {
            assert!(html.contains(title), "no chart `{title}`");
        }
    }

    #[test]
    fn the_page_loads_nothing_from_anywhere() {
        for html in [
            render_html(&two_backend_report()).expect("renders"),
            comparison_to_html(&[
                ("a.json".into(), sample_report()),
                ("b.json".into(), two_backend_report()),
            ])
            .expect("renders"),
        ] {
            for needle in [
                "src=",
                "href=\"http",
                "url(",
                "@import",
                "<link",
                "<script",
                "<iframe",
            ] {
                assert!(!html.contains(needle), "the page has `{needle}`");
            }
            // Links stay within the page.
            for href in html.split("href=\"").skip(1) {
                assert!(href.starts_with('#'), "a link leaves the page: {href:.40}");
            }
        }
    }

    #[test]
    fn every_chart_on_the_page_has_drawn_data() {
        let mut report = two_backend_report();
        // Without planned sends, the first benchmark has no dispatch delay
        // to draw: its chart is left out rather than drawn empty.
        for b in report
            .benchmarks
            .iter_mut()
            .filter(|b| b.name == "synchronous")
        {
            for r in &mut b.records.records {
                r.scheduled = None;
            }
        }
        let html = render_html(&report).expect("renders");
        let charts: Vec<&str> = html.split("<svg class=\"chart\"").skip(1).collect();
        // 6 load curves, then per benchmark 3 CDFs and 4 timelines (3
        // without dispatch delays).
        assert_eq!(charts.len(), 6 + 6 + 7, "charts on the page");
        for chart in charts {
            assert!(!chart.contains("data-points=\"0\""), "{chart:.200}");
            assert!(chart.contains("<path class=\"series\"") || chart.contains("<circle"));
        }
    }

    #[test]
    fn each_backend_label_is_its_own_colour() {
        let html = render_html(&two_backend_report()).expect("renders");
        let load = html
            .split("<svg class=\"chart\"")
            .nth(1)
            .expect("a load curve");
        assert!(
            load.contains(PALETTE[0]) && load.contains(PALETTE[1]),
            "{load}"
        );
        assert!(load.contains("fast p50") && load.contains("slow &quot;&lt;b&gt;&quot; p95"));
    }

    #[test]
    fn the_environment_names_the_dtype_the_engine_ran_and_why() {
        let mut report = sample_report();
        report.environment.backend = serde_json::json!({
            "engine": {"engine": "candle", "dtype": "f16 (auto: config.json dtype)"},
        })
        .as_object()
        .cloned()
        .expect("an object");
        let html = render_html(&report).expect("renders");
        let environment = html.split("id=\"environment\"").nth(1).expect("section");
        assert!(
            environment.contains("engine.dtype")
                && environment.contains("f16 (auto: config.json dtype)"),
            "{environment}"
        );
    }

    #[test]
    fn each_backend_of_a_side_by_side_run_is_described_with_its_agreement() {
        use crate::report::{BackendRun, OutputAgreement};
        let mut report = two_backend_report();
        report.environment.backend.clear();
        for (label, engine) in [("fast", "candle"), ("slow \"<b>\"", "ort")] {
            let environment = serde_json::json!({"engine": {"engine": engine}, "load_time_s": 1.5});
            report.backends.push(BackendRun {
                label: label.into(),
                config: serde_json::json!({"kind": "offline"}),
                environment: environment.as_object().cloned().expect("object"),
                interrupted: false,
                failure: None,
                conclusion: None,
            });
        }
        report.agreement.push(OutputAgreement {
            benchmark: "synchronous".into(),
            reference: "fast".into(),
            backend: "slow".into(),
            compared: 10,
            agreed: 9,
            differing: vec![4],
        });
        let html = render_html(&report).expect("renders");
        let environment = html.split("id=\"environment\"").nth(1).expect("section");
        assert!(environment.contains("fast.engine.engine"), "{environment}");
        assert!(environment.contains("candle") && environment.contains("ort"));
        assert!(
            environment.contains("greedy outputs, slow vs fast in synchronous")
                && environment.contains("9 of 10 identical"),
            "{environment}"
        );
    }

    #[test]
    fn hostile_names_and_command_lines_are_escaped() {
        let html = render_html(&two_backend_report()).expect("renders");
        assert!(!html.contains("<script"), "a script got through");
        assert!(!html.contains("<b>"));
        // minijinja escapes `/` too.
        assert!(html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
        assert!(
            html.contains("&lt;&#x2f;pre&gt;&lt;script&gt;x()&lt;&#x2f;script&gt;"),
            "the command line"
        );
    }

    #[test]
    fn a_command_given_as_arguments_is_quoted_for_a_shell() {
        let mut report = sample_report();
        report.config["command"] =
            serde_json::json!(["guidebench", "run", "--slo", "ttft=1s, itl=2ms"]);
        assert_eq!(
            command_of(&report).as_deref(),
            Some("guidebench run --slo 'ttft=1s, itl=2ms'")
        );
    }

    #[test]
    fn requests_in_flight_are_averaged_over_each_bin() {
        // Two requests over 0–60 ms and 30–60 ms: bins of 1 ms, one
        // request in flight until 30 ms, two after.
        let points = mean_in_flight(vec![(0, 1), (30_000, 1), (60_000, -1), (60_000, -1)]);
        assert_eq!(points.first(), Some(&(0.0, 1.0)));
        assert_eq!(points[29], (0.029, 1.0));
        assert_eq!(points[30], (0.03, 2.0));
        assert_eq!(points[59].1, 2.0);
        // The last bin starts at 60 ms, when both have ended.
        assert_eq!(points[60].1, 0.0);
        // Half a bin of one request: a mean of one half.
        let half = mean_in_flight(vec![(0, 1), (500, -1), (2_000, 1), (2_000, -1)]);
        assert_eq!(half[0], (0.0, 0.5));
    }

    #[test]
    fn objectives_are_drawn_on_the_ttft_and_latency_charts() {
        let mut report = sample_report();
        let slo = crate::slo::Slo {
            ttft: Some(0.05),
            latency: Some(0.2),
            ..crate::slo::Slo::default()
        };
        for b in &mut report.benchmarks {
            b.apply_slo(&slo);
        }
        let html = render_html(&report).expect("renders");
        let with_rule = |needle: &str| {
            html.split("<svg class=\"chart\"")
                .filter(|c| c.contains(needle))
                .count()
        };
        // 2 load curves + per benchmark a CDF and the per-request chart.
        assert_eq!(with_rule("objective 50 ms"), 2 + 2 * 2);
        assert_eq!(with_rule("objective 200 ms"), 2 + 2);
        assert_eq!(with_rule("class=\"rule\""), 2 + 2 + 2 * 3);
    }

    #[test]
    fn the_layout_is_held_to_1280_px() {
        let html = render_html(&sample_report()).expect("renders");
        assert!(html.contains("max-width: 1240px"), "the page's width");
        assert!(html.contains("overflow-wrap: anywhere"), "long names wrap");
        assert!(html.contains("svg.chart { width: 100%"), "charts scale");
        assert!(html.contains("grid-template-columns"), "charts in a grid");
        for svg in html.split("<svg").skip(1) {
            let tag = svg.split('>').next().unwrap_or_default();
            assert!(!tag.contains("width="), "a chart of fixed width: {tag}");
        }
    }

    #[test]
    fn warnings_are_shown_beside_the_benchmark_they_concern() {
        let mut report = sample_report();
        report.interrupted = true;
        report.benchmarks[0].extra.insert(
            "client_saturated".into(),
            serde_json::json!({"reasons": ["dispatch delay p95 above the gap"], "available_cores": 2}),
        );
        let html = render_html(&report).expect("renders");
        assert!(html.contains("client saturated: dispatch delay p95 above the gap"));
        assert!(html.contains("interrupted: this benchmark may be partial"));
        assert!(html.contains("1 errored (engine_panic 1)"));
        assert!(html.contains("1 incomplete at the end"));
    }

    #[test]
    fn a_report_without_benchmarks_renders_a_page_without_charts() {
        let mut report = Report::new(Value::Null);
        report.interrupted = true;
        let html = render_html(&report).expect("renders");
        assert!(!html.contains("<svg"));
        assert!(html.contains("The run was interrupted"));
        let page = comparison_to_html(&[("a".into(), report.clone()), ("b".into(), report)])
            .expect("renders");
        assert!(!page.contains("<svg"));
    }

    #[test]
    fn the_html_report_is_written_to_a_file() {
        let report = sample_report();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("report.html");
        write_html(&report, &path).expect("write");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            to_html(&report)
        );
    }

    #[test]
    fn the_comparison_page_marks_the_better_side_of_each_metric() {
        let baseline = sample_report();
        let mut slower = sample_report();
        for b in &mut slower.benchmarks {
            for r in &mut b.records.records {
                r.first_token = r.first_token.map(|t| t + 50_000);
                r.end = r.end.map(|t| t + 50_000);
            }
            b.recompute();
        }
        let html =
            comparison_to_html(&[("base.json".into(), baseline), ("slow.json".into(), slower)])
                .expect("renders");
        assert!(html.contains("base.json") && html.contains("slow.json"));
        let row = html
            .split("<tr")
            .find(|r| r.contains("TTFT mean ms"))
            .expect("a TTFT row");
        assert!(row.contains("class=\"num better\""), "{row}");
        assert!(row.contains("<td class=\"better\">base.json</td>"), "{row}");
        assert!(row.contains("<td>yes</td>"), "beyond chance: {row}");
        assert!(html.split("<svg class=\"chart\"").count() > 6);
    }
}
