//! A self-contained HTML report: inline CSS and SVG, no scripts, no network.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::model::{BenchmarkReport, Report};
use super::{count_as_f64, fixed, format_utc, ms_at, ms_mean};
use crate::metrics::Distribution;
use guidebench_core::{Error, Result};

/// `text` with `&`, `<`, `>`, `"` and `'` escaped, safe in element content
/// and in quoted attributes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
h1, h2, h3 { font-weight: 600; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.6rem; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f6f6; padding: 0.8rem; overflow-x: auto; }
.warn { background: #fff3cd; border: 1px solid #e0c060; padding: 0.5rem; }
svg text { font-size: 12px; font-family: system-ui, sans-serif; }
";

/// A table row of cells, numbers right-aligned.
fn tr(out: &mut String, cells: &[(String, bool)]) {
    out.push_str("<tr>");
    for (cell, numeric) in cells {
        let class = if *numeric { " class=\"num\"" } else { "" };
        let _ = write!(out, "<td{class}>{}</td>", escape(cell));
    }
    out.push_str("</tr>\n");
}

fn th(out: &mut String, headers: &[&str]) {
    out.push_str("<tr>");
    for h in headers {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr>\n");
}

fn text(s: impl Into<String>) -> (String, bool) {
    (s.into(), false)
}

fn num(s: impl Into<String>) -> (String, bool) {
    (s.into(), true)
}

/// A horizontal bar chart of `(label, value)` pairs.
fn bar_chart(out: &mut String, title: &str, items: &[(String, f64)]) {
    const LABEL_W: f64 = 220.0;
    const BAR_W: f64 = 420.0;
    const ROW_H: f64 = 24.0;
    let max = items.iter().map(|(_, v)| *v).fold(0.0, f64::max);
    let height = ROW_H * count_as_f64(items.len()) + 30.0;
    let _ = write!(
        out,
        "<figure><figcaption>{}</figcaption>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{:.0}\" height=\"{height:.0}\" role=\"img\">\n",
        escape(title),
        LABEL_W + BAR_W + 90.0
    );
    for (i, (label, value)) in items.iter().enumerate() {
        let y = 10.0 + ROW_H * count_as_f64(i);
        let w = if max > 0.0 { value / max * BAR_W } else { 0.0 };
        let short: String = label.chars().take(32).collect();
        let _ = writeln!(
            out,
            "<text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{LABEL_W:.0}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.0}\" fill=\"#4a7bd0\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            LABEL_W - 8.0,
            y + 14.0,
            escape(&short),
            ROW_H - 6.0,
            LABEL_W + w + 6.0,
            y + 14.0,
            escape(&format!("{value:.2}"))
        );
    }
    out.push_str("</svg></figure>\n");
}

fn summary_table(out: &mut String, report: &Report) {
    out.push_str("<table>\n");
    th(
        out,
        &[
            "Benchmark",
            "Profile",
            "OK",
            "Errors",
            "Incomplete",
            "Duration s",
            "req/s",
            "out tok/s",
            "total tok/s",
            "Concurrency",
            "Latency p50 ms",
            "Latency p95 ms",
            "TTFT p50 ms",
            "TTFT p95 ms",
            "ITL p50 ms",
            "ITL p95 ms",
            "TPOT p50 ms",
            "TPOT p95 ms",
        ],
    );
    for b in &report.benchmarks {
        let m = &b.metrics;
        let s = &m.successful;
        let mut cells = vec![
            text(b.name.clone()),
            text(b.profile_label()),
            num(s.count.to_string()),
            num(m.errored.count.to_string()),
            num(m.incomplete.count.to_string()),
            num(format!("{:.3}", m.duration_s)),
            num(format!("{:.2}", m.requests_per_s)),
            num(format!("{:.1}", m.output_tokens_per_s)),
            num(format!("{:.1}", m.total_tokens_per_s)),
            num(format!("{:.2}", m.mean_concurrency)),
        ];
        for d in [&s.latency, &s.ttft, &s.itl, &s.tpot] {
            cells.push(num(fixed(ms_at(d, 50.0), 2)));
            cells.push(num(fixed(ms_at(d, 95.0), 2)));
        }
        tr(out, &cells);
    }
    out.push_str("</table>\n");
}

fn distribution_row(out: &mut String, name: &str, d: &Distribution, scale: f64, decimals: usize) {
    let v = |x: f64| {
        if d.count == 0 {
            num("-")
        } else {
            num(format!("{:.decimals$}", x * scale))
        }
    };
    let p = |q: f64| v(d.at(q).unwrap_or(0.0));
    tr(
        out,
        &[
            text(name),
            num(d.count.to_string()),
            v(d.mean),
            v(d.std),
            v(d.min),
            p(50.0),
            p(90.0),
            p(95.0),
            p(99.0),
            v(d.max),
        ],
    );
}

fn benchmark_details(out: &mut String, b: &BenchmarkReport) {
    let m = &b.metrics;
    let _ = writeln!(out, "<h3>{}</h3>", escape(&b.name));
    out.push_str("<table>\n");
    let mut facts: Vec<(String, String)> = vec![
        ("Profile".into(), b.profile_label()),
        ("Start".into(), format_utc(b.start)),
        ("Duration s".into(), format!("{:.3}", m.duration_s)),
        (
            "Requests ok / errored / incomplete / all".into(),
            format!(
                "{} / {} / {} / {}",
                m.successful.count, m.errored.count, m.incomplete.count, m.all.count
            ),
        ),
        (
            "Mean dispatch delay ms".into(),
            fixed(ms_mean(&m.dispatch_delay), 3),
        ),
    ];
    if let Some(n) = b.warmup_excluded {
        facts.push(("Warm-up requests excluded".into(), n.to_string()));
    }
    if let Some(n) = b.cooldown_excluded {
        facts.push(("Cool-down requests excluded".into(), n.to_string()));
    }
    for (label, n) in &m.errors_by_label {
        facts.push((format!("Errors: {label}"), n.to_string()));
    }
    for (key, value) in &b.extra {
        facts.push((key.clone(), value_text(value)));
    }
    for (k, v) in facts {
        tr(out, &[text(k), text(v)]);
    }
    out.push_str("</table>\n<table>\n");
    th(
        out,
        &[
            "Successful requests",
            "count",
            "mean",
            "std",
            "min",
            "p50",
            "p90",
            "p95",
            "p99",
            "max",
        ],
    );
    let s = &m.successful;
    let timed = [
        ("Latency ms", &s.latency),
        ("TTFT ms", &s.ttft),
        ("ITL ms (per gap)", &s.itl),
        ("ITL ms (per request)", &s.itl_per_request),
        ("TPOT ms", &s.tpot),
        ("Dispatch delay ms (all requests)", &m.dispatch_delay),
    ];
    for (name, d) in timed {
        distribution_row(out, name, d, 1e3, 2);
    }
    for (name, d) in [
        ("Prompt tokens", &s.prompt_tokens),
        ("Output tokens", &s.output_tokens),
        ("Total tokens", &s.total_tokens),
    ] {
        distribution_row(out, name, d, 1.0, 1);
    }
    out.push_str("</table>\n");
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The report as one self-contained HTML page: the summary table, bar
/// charts of throughput and latency (inline SVG), per-benchmark details,
/// the environment and the configuration. All text is escaped; the page
/// loads nothing and runs no script.
pub fn to_html(report: &Report) -> String {
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(
        out,
        "<title>guidebench report {}</title>\n<style>{STYLE}</style>\n</head>\n<body>",
        escape(&format_utc(report.created))
    );
    let _ = writeln!(
        out,
        "<h1>guidebench report</h1>\n<p>Created {} by guidebench {} (report schema {}).</p>",
        escape(&format_utc(report.created)),
        escape(&report.guidebench_version),
        report.schema_version
    );
    if report.interrupted {
        out.push_str(
            "<p class=\"warn\">The run was interrupted: the last benchmark may be partial.</p>\n",
        );
    }
    out.push_str("<h2>Summary</h2>\n");
    summary_table(&mut out, report);
    if !report.benchmarks.is_empty() {
        let items = |f: &dyn Fn(&BenchmarkReport) -> f64| -> Vec<(String, f64)> {
            report
                .benchmarks
                .iter()
                .map(|b| (b.name.clone(), f(b)))
                .collect()
        };
        bar_chart(
            &mut out,
            "Output tokens/s",
            &items(&|b| b.metrics.output_tokens_per_s),
        );
        bar_chart(
            &mut out,
            "TTFT p50 (ms)",
            &items(&|b| ms_at(&b.metrics.successful.ttft, 50.0).unwrap_or(0.0)),
        );
        bar_chart(
            &mut out,
            "ITL p50 (ms, per gap)",
            &items(&|b| ms_at(&b.metrics.successful.itl, 50.0).unwrap_or(0.0)),
        );
    }
    let answers = super::console::answers_text(report);
    if !answers.trim().is_empty() {
        let _ = writeln!(
            out,
            "<h2>Answers</h2>\n<pre>{}</pre>",
            escape(answers.trim())
        );
    }
    out.push_str("<h2>Benchmarks</h2>\n");
    for b in &report.benchmarks {
        benchmark_details(&mut out, b);
    }
    out.push_str("<h2>Environment</h2>\n<table>\n");
    let env = &report.environment;
    let mut facts: Vec<(String, String)> = vec![
        ("guidebench".into(), env.guidebench_version.clone()),
        ("OS".into(), env.os.clone()),
        ("Architecture".into(), env.arch.clone()),
        ("CPU".into(), env.cpu_model.clone().unwrap_or_default()),
        ("Logical cores".into(), env.logical_cores.to_string()),
        (
            "Available parallelism".into(),
            env.available_parallelism.to_string(),
        ),
        ("Host".into(), env.hostname.clone().unwrap_or_default()),
    ];
    for (key, value) in &env.backend {
        facts.push((key.clone(), value_text(value)));
    }
    for (k, v) in facts {
        tr(&mut out, &[text(k), text(v)]);
    }
    out.push_str("</table>\n<h2>Configuration</h2>\n<pre>");
    let config = serde_json::to_string_pretty(&report.config).unwrap_or_default();
    out.push_str(&escape(&config));
    out.push_str("</pre>\n</body>\n</html>\n");
    out
}

/// Writes [`to_html`] to `path`.
pub fn write_html(report: &Report, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, to_html(report)).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn the_html_report_contains_the_numbers_and_the_environment() {
        let report = sample_report();
        let html = to_html(&report);
        let m = &report.benchmarks[0].metrics;
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains(&format!("{:.2}", m.requests_per_s)));
        assert!(html.contains(&format!("{:.1}", m.output_tokens_per_s)));
        assert!(html.contains(&format!("{:.2}", m.successful.ttft.median * 1e3)));
        assert!(html.contains(&format!(
            "{:.2}",
            m.successful.itl.at(95.0).expect("p95") * 1e3
        )));
        assert!(html.contains("<svg"));
        assert!(html.contains(&escape(&report.environment.os)));
        assert!(html.contains("mock &lt;fast&gt;"));
        assert!(html.contains("offline,engine=mock"));
        assert!(html.contains("engine_panic"));
    }

    #[test]
    fn the_html_report_escapes_a_script_in_a_label() {
        let html = to_html(&sample_report());
        assert!(!html.contains("<script"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!html.contains("<link") && !html.contains("src=\""));
    }

    #[test]
    fn escaping_covers_every_special_character() {
        assert_eq!(escape("a&b<c>d\"e'f"), "a&amp;b&lt;c&gt;d&quot;e&#39;f");
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
}
