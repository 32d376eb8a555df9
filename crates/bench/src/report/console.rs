//! Plain-text summary tables for the console.

use std::fmt::Write as _;

use super::model::Report;
use super::{fixed, ms_at};

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// A column: a group heading shared with its neighbours (may be empty), a
/// title, and an alignment.
struct Column {
    group: &'static str,
    title: &'static str,
    align: Align,
}

/// A text table with aligned columns and an optional group heading row.
struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
}

const GAP: &str = "  ";

fn width(s: &str) -> usize {
    s.chars().count()
}

fn pad(s: &str, width_: usize, align: Align) -> String {
    let fill = " ".repeat(width_.saturating_sub(width(s)));
    match align {
        Align::Left => format!("{s}{fill}"),
        Align::Right => format!("{fill}{s}"),
    }
}

impl Table {
    fn render(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| width(c.title)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        // Group spans: (group, first column, last column).
        let mut spans: Vec<(&str, usize, usize)> = Vec::new();
        for (i, c) in self.columns.iter().enumerate() {
            match spans.last_mut() {
                Some((g, _, last)) if !c.group.is_empty() && *g == c.group => *last = i,
                _ => spans.push((c.group, i, i)),
            }
        }
        // Widen a span's last column when its heading is wider than the span.
        for &(group, first, last) in &spans {
            let span: usize =
                widths[first..=last].iter().sum::<usize>() + GAP.len() * (last - first);
            if width(group) > span {
                widths[last] += width(group) - span;
            }
        }
        let mut out = String::new();
        if spans.iter().any(|(g, _, _)| !g.is_empty()) {
            let cells: Vec<String> = spans
                .iter()
                .map(|&(group, first, last)| {
                    let span =
                        widths[first..=last].iter().sum::<usize>() + GAP.len() * (last - first);
                    pad(group, span, Align::Left)
                })
                .collect();
            out.push_str(cells.join(GAP).trim_end());
            out.push('\n');
        }
        let line = |cells: Vec<String>| cells.join(GAP).trim_end().to_owned();
        out.push_str(&line(
            self.columns
                .iter()
                .zip(&widths)
                .map(|(c, &w)| pad(c.title, w, c.align))
                .collect(),
        ));
        out.push('\n');
        let rule: usize = widths.iter().sum::<usize>() + GAP.len() * widths.len().saturating_sub(1);
        out.push_str(&"-".repeat(rule));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(
                self.columns
                    .iter()
                    .zip(&widths)
                    .zip(row)
                    .map(|((c, &w), cell)| pad(cell, w, c.align))
                    .collect(),
            ));
            out.push('\n');
        }
        out
    }
}

/// The console summary of a report: one row per benchmark with median and
/// p95 latency, TTFT, ITL (per gap) and TPOT of successful requests in
/// milliseconds, requests/s, output tokens/s and the request counts; then
/// the errors by label, if any. Plain text with aligned columns.
pub fn console_summary(report: &Report) -> String {
    const fn col(group: &'static str, title: &'static str, align: Align) -> Column {
        Column {
            group,
            title,
            align,
        }
    }
    let r = Align::Right;
    let columns = vec![
        col("", "Benchmark", Align::Left),
        col("Requests", "ok", r),
        col("Requests", "errors", r),
        col("Requests", "incomplete", r),
        col("", "req/s", r),
        col("", "out tok/s", r),
        col("Latency ms", "p50", r),
        col("Latency ms", "p95", r),
        col("TTFT ms", "p50", r),
        col("TTFT ms", "p95", r),
        col("ITL ms", "p50", r),
        col("ITL ms", "p95", r),
        col("TPOT ms", "p50", r),
        col("TPOT ms", "p95", r),
    ];
    let rows = report
        .benchmarks
        .iter()
        .map(|b| {
            let m = &b.metrics;
            let s = &m.successful;
            let mut row = vec![
                b.name.clone(),
                s.count.to_string(),
                m.errored.count.to_string(),
                m.incomplete.count.to_string(),
                format!("{:.2}", m.requests_per_s),
                format!("{:.1}", m.output_tokens_per_s),
            ];
            for d in [&s.latency, &s.ttft, &s.itl, &s.tpot] {
                row.push(fixed(ms_at(d, 50.0), 2));
                row.push(fixed(ms_at(d, 95.0), 2));
            }
            row
        })
        .collect();
    let mut out = String::new();
    if report.interrupted {
        out.push_str("(interrupted: the run stopped early; the last benchmark may be partial)\n");
    }
    if let Some(failure) = &report.failure {
        let _ = writeln!(out, "(failed: {failure}; the last benchmark is partial)");
    }
    out.push_str(&Table { columns, rows }.render());
    for b in &report.benchmarks {
        if b.metrics.errors_by_label.is_empty() {
            continue;
        }
        let list: Vec<String> = b
            .metrics
            .errors_by_label
            .iter()
            .map(|(label, n)| format!("{label} ({n})"))
            .collect();
        // Writing to a String cannot fail.
        let _ = writeln!(out, "errors in {}: {}", b.name, list.join(", "));
    }
    for b in &report.benchmarks {
        if b.metrics.retries > 0 {
            let _ = writeln!(
                out,
                "retries in {}: {} (sent again on a fresh connection the server had closed)",
                b.name, b.metrics.retries
            );
        }
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
                b.name
            );
        }
    }
    for b in &report.benchmarks {
        if let Some(client) = &b.client {
            let _ = writeln!(out, "client in {}: {}", b.name, client.summary());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn the_console_summary_has_one_aligned_row_per_benchmark() {
        let report = sample_report();
        let text = console_summary(&report);
        let lines: Vec<&str> = text.lines().collect();
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

    #[test]
    fn the_console_summary_shows_the_numbers_in_milliseconds() {
        let report = sample_report();
        let m = &report.benchmarks[0].metrics;
        let text = console_summary(&report);
        let row = text.lines().nth(3).expect("first row");
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[1], "10");
        assert_eq!(cells[2], "0");
        assert_eq!(cells[4], format!("{:.2}", m.requests_per_s));
        assert_eq!(
            cells[6],
            format!("{:.2}", m.successful.latency.median * 1e3)
        );
        assert_eq!(cells[8], format!("{:.2}", m.successful.ttft.median * 1e3));
        assert_eq!(cells[10], format!("{:.2}", m.successful.itl.median * 1e3));
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
    fn an_empty_distribution_shows_a_dash() {
        let mut report = sample_report();
        report.benchmarks.truncate(1);
        report.benchmarks[0].records.records.clear();
        report.benchmarks[0].recompute();
        report.interrupted = true;
        let text = console_summary(&report);
        assert!(text.starts_with("(interrupted"));
        let row = text.lines().nth(4).expect("row");
        assert!(row.ends_with('-'), "{row}");
    }
}
