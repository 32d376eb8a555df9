//! GuideLLM 0.8.1's console tables, drawn from the GuideLLM document of a
//! report ([`super::guidellm_write::to_guidellm`]) in guidebench's plain-text table style.
//!
//! GuideLLM prints, in this order: "Run Summary Info", a table per
//! modality that ran ("Text Metrics Statistics", "Image Metrics
//! Statistics", ...), "Request Token Statistics", "Request Latency
//! Statistics" and "Server Throughput Statistics". The latency table is
//! left out here: guidebench's own summary shows those numbers already.
//! Every number is GuideLLM's, one decimal as GuideLLM shows it; a value
//! GuideLLM has not computed shows as `-`.

use serde_json::Value;

use super::guidellm_write::benchmarks_without_requests;
use super::model::Report;
use super::table::{Align, CONSOLE_WIDTH, Column, Table};

/// A group of adjacent columns that stay together when a table is split:
/// the columns and, per benchmark, their cells.
struct Block {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
}

/// Which value of a GuideLLM `DistributionSummary` a cell shows.
#[derive(Clone, Copy)]
enum Stat {
    Median,
    Mean,
    P95,
}

impl Stat {
    /// The column title of the statistic.
    const fn title(self) -> &'static str {
        match self {
            Stat::Median => "mdn",
            Stat::Mean => "mean",
            Stat::P95 => "p95",
        }
    }

    /// The statistic of `status` (`successful`, `total`, ...) of a
    /// `StatusDistributionSummary`; `null` when GuideLLM has none.
    fn of<'v>(self, summary: &'v Value, status: &str) -> &'v Value {
        let d = &summary[status];
        match self {
            Stat::Median => &d["median"],
            Stat::Mean => &d["mean"],
            Stat::P95 => &d["percentiles"]["p95"],
        }
    }
}

/// A number as GuideLLM's `safe_format_number` shows it: an integer as
/// is, any other number with one decimal, nothing as `-`.
fn number(value: &Value) -> String {
    match value {
        Value::Number(n) if n.is_u64() || n.is_i64() => n.to_string(),
        Value::Number(n) => n.as_f64().map_or_else(|| "-".into(), |v| format!("{v:.1}")),
        _ => "-".into(),
    }
}

/// Seconds since the Unix epoch as `HH:MM:SS` in UTC (GuideLLM shows the
/// local time; `-` where GuideLLM shows `N/A`).
fn clock(value: &Value) -> String {
    value
        .as_f64()
        .filter(|s| (0.0..=2f64.powi(31)).contains(s))
        .and_then(|s| jiff::SignedDuration::try_from_secs_f64(s).ok())
        .and_then(|d| jiff::Timestamp::from_duration(d).ok())
        .map_or_else(|| "-".into(), |t| t.strftime("%H:%M:%S").to_string())
}

/// A right-aligned column under `group`.
const fn col(group: &'static str, title: &'static str) -> Column {
    Column::new(group, title, Align::Right)
}

/// The value at `path` (keys from the benchmark down), `null` where absent.
fn at<'v>(benchmark: &'v Value, path: &[&str]) -> &'v Value {
    path.iter().fold(benchmark, |v, key| &v[*key])
}

/// A block of one column per statistic of the `StatusDistributionSummary`
/// at `path` in each benchmark, for `status`; and whether any value is
/// there.
fn stats_block(
    benchmarks: &[Value],
    group: &'static str,
    path: &[&str],
    status: &str,
    stats: &[Stat],
) -> (Block, bool) {
    let values: Vec<Vec<&Value>> = benchmarks
        .iter()
        .map(|b| stats.iter().map(|s| s.of(at(b, path), status)).collect())
        .collect();
    let has_data = values.iter().flatten().any(|v| !v.is_null());
    let block = Block {
        columns: stats.iter().map(|s| col(group, s.title())).collect(),
        rows: values
            .iter()
            .map(|row| row.iter().map(|v| number(v)).collect())
            .collect(),
    };
    (block, has_data)
}

/// `blocks` beside the `labels` column, in as few tables as keep every
/// line within [`CONSOLE_WIDTH`]; each table repeats the labels.
fn render(labels: &[String], blocks: &[Block]) -> String {
    let table = |blocks: &[&Block]| {
        let mut columns = vec![Column::new("", "Benchmark", Align::Left)];
        let mut rows: Vec<Vec<String>> = labels.iter().map(|l| vec![l.clone()]).collect();
        for block in blocks {
            columns.extend(block.columns.iter().copied());
            for (row, cells) in rows.iter_mut().zip(&block.rows) {
                row.extend(cells.iter().cloned());
            }
        }
        Table { columns, rows }.render()
    };
    let fits = |text: &str| text.lines().all(|l| l.chars().count() <= CONSOLE_WIDTH);
    let mut tables = Vec::new();
    let mut current: Vec<&Block> = Vec::new();
    for block in blocks {
        current.push(block);
        if current.len() > 1 && !fits(&table(&current)) {
            current.pop();
            tables.push(table(&current));
            current = vec![block];
        }
    }
    if !current.is_empty() {
        tables.push(table(&current));
    }
    tables.join("\n")
}

/// A titled section: a blank line, the title, the tables.
fn section(title: &str, tables: &str) -> String {
    format!("\n{title}:\n{tables}")
}

/// "Run Summary Info": timings, request counts and token totals.
fn run_summary(labels: &[String], benchmarks: &[Value]) -> String {
    let mut blocks = vec![Block {
        columns: vec![
            col("Timings", "start UTC"),
            col("Timings", "end UTC"),
            col("Timings", "dur s"),
            col("Timings", "warm s"),
            col("Timings", "cool s"),
        ],
        rows: benchmarks
            .iter()
            .map(|b| {
                vec![
                    clock(&b["start_time"]),
                    clock(&b["end_time"]),
                    number(&b["duration"]),
                    number(&b["warmup_duration"]),
                    number(&b["cooldown_duration"]),
                ]
            })
            .collect(),
    }];
    let statuses = [
        ("comp", "successful"),
        ("inc", "incomplete"),
        ("err", "errored"),
    ];
    blocks.push(Block {
        columns: statuses.iter().map(|(t, _)| col("Requests", t)).collect(),
        rows: benchmarks
            .iter()
            .map(|b| {
                let totals = &b["metrics"]["request_totals"];
                statuses.iter().map(|(_, s)| number(&totals[s])).collect()
            })
            .collect(),
    });
    for (group, key) in [
        ("Input tokens", "prompt_token_count"),
        ("Output tokens", "output_token_count"),
    ] {
        blocks.push(Block {
            columns: statuses.iter().map(|(t, _)| col(group, t)).collect(),
            rows: benchmarks
                .iter()
                .map(|b| {
                    let summary = &b["metrics"][key];
                    (statuses.iter())
                        .map(|(_, s)| number(&summary[s]["total_sum"]))
                        .collect()
                })
                .collect(),
        });
    }
    section("Run Summary Info", &render(labels, &blocks))
}

/// A modality's metrics: (key in the document, input per request, input
/// per second, output per request, output per second group headings).
type MetricGroups = [(&'static str, [&'static str; 4])];

const TEXT: &MetricGroups = &[
    (
        "tokens",
        [
            "Input tok/req",
            "Input tok/s",
            "Output tok/req",
            "Output tok/s",
        ],
    ),
    (
        "words",
        [
            "Input words/req",
            "Input words/s",
            "Output words/req",
            "Output words/s",
        ],
    ),
    (
        "characters",
        [
            "Input chars/req",
            "Input chars/s",
            "Output chars/req",
            "Output chars/s",
        ],
    ),
];

const IMAGE: &MetricGroups = &[
    (
        "tokens",
        [
            "Input tok/req",
            "Input tok/s",
            "Output tok/req",
            "Output tok/s",
        ],
    ),
    (
        "images",
        [
            "Input images/req",
            "Input images/s",
            "Output images/req",
            "Output images/s",
        ],
    ),
    (
        "pixels",
        [
            "Input pixels/req",
            "Input pixels/s",
            "Output pixels/req",
            "Output pixels/s",
        ],
    ),
    (
        "bytes",
        [
            "Input bytes/req",
            "Input bytes/s",
            "Output bytes/req",
            "Output bytes/s",
        ],
    ),
];

const AUDIO: &MetricGroups = &[
    (
        "tokens",
        [
            "Input tok/req",
            "Input tok/s",
            "Output tok/req",
            "Output tok/s",
        ],
    ),
    (
        "samples",
        [
            "Input samples/req",
            "Input samples/s",
            "Output samples/req",
            "Output samples/s",
        ],
    ),
    (
        "seconds",
        [
            "Input sec/req",
            "Input sec/s",
            "Output sec/req",
            "Output sec/s",
        ],
    ),
    (
        "bytes",
        [
            "Input bytes/req",
            "Input bytes/s",
            "Output bytes/req",
            "Output bytes/s",
        ],
    ),
];

/// A modality's table (GuideLLM's `_print_modality_table`): per metric
/// with data, its per-request median and p95 and its per-second median
/// and mean of successful requests; the inputs' tables, then the
/// outputs'. Empty when the modality has no data.
fn modality(labels: &[String], benchmarks: &[Value], name: &str, metrics: &MetricGroups) -> String {
    let per_request = [Stat::Median, Stat::P95];
    let per_second = [Stat::Median, Stat::Mean];
    let mut input = Vec::new();
    let mut output = Vec::new();
    let (mut input_has_data, mut output_has_data) = (false, false);
    for &(key, groups) in metrics {
        let side = |side: &str, group_req, group_s| {
            let rate = format!("{side}_per_second");
            let (req, req_data) = stats_block(
                benchmarks,
                group_req,
                &["metrics", name, key, side],
                "successful",
                &per_request,
            );
            let (s, s_data) = stats_block(
                benchmarks,
                group_s,
                &["metrics", name, key, &rate],
                "successful",
                &per_second,
            );
            ([req, s], req_data || s_data)
        };
        let (input_blocks, has_input) = side("input", groups[0], groups[1]);
        let (output_blocks, has_output) = side("output", groups[2], groups[3]);
        if !(has_input || has_output) {
            continue;
        }
        input_has_data |= has_input;
        output_has_data |= has_output;
        input.extend(input_blocks);
        output.extend(output_blocks);
    }
    let mut tables = Vec::new();
    if input_has_data {
        tables.push(render(labels, &input));
    }
    if output_has_data {
        tables.push(render(labels, &output));
    }
    if tables.is_empty() {
        return String::new();
    }
    let mut title: String = name.chars().take(1).flat_map(char::to_uppercase).collect();
    title.extend(name.chars().skip(1));
    section(
        &format!("{title} Metrics Statistics (Completed Requests)"),
        &tables.join("\n"),
    )
}

/// "Request Token Statistics": tokens and stream iterations per request,
/// median and p95 of successful requests.
fn request_tokens(labels: &[String], benchmarks: &[Value]) -> String {
    let stats = [Stat::Median, Stat::P95];
    let blocks: Vec<Block> = [
        ("Input tok/req", "prompt_token_count"),
        ("Output tok/req", "output_token_count"),
        ("Total tok/req", "total_token_count"),
        ("Stream iter/req", "request_streaming_iterations_count"),
        ("Output tok/iter", "output_tokens_per_iteration"),
    ]
    .into_iter()
    .map(|(group, key)| stats_block(benchmarks, group, &["metrics", key], "successful", &stats).0)
    .collect();
    section(
        "Request Token Statistics (Completed Requests)",
        &render(labels, &blocks),
    )
}

/// "Server Throughput Statistics": concurrency (median, mean) and the mean
/// requests and tokens per second, over all requests.
fn throughput(labels: &[String], benchmarks: &[Value]) -> String {
    let concurrency = stats_block(
        benchmarks,
        "Concurrency",
        &["metrics", "request_concurrency"],
        "total",
        &[Stat::Median, Stat::Mean],
    )
    .0;
    let mut rates = Block {
        columns: Vec::new(),
        rows: vec![Vec::new(); benchmarks.len()],
    };
    for (title, key) in [
        ("requests", "requests_per_second"),
        ("input tok", "prompt_tokens_per_second"),
        ("output tok", "output_tokens_per_second"),
        ("total tok", "tokens_per_second"),
    ] {
        let (block, _) = stats_block(
            benchmarks,
            "Per second, mean",
            &["metrics", key],
            "total",
            &[Stat::Mean],
        );
        rates.columns.push(col("Per second, mean", title));
        for (row, cells) in rates.rows.iter_mut().zip(block.rows) {
            row.extend(cells);
        }
    }
    section(
        "Server Throughput Statistics (All Requests)",
        &render(labels, &[concurrency, rates]),
    )
}

/// GuideLLM's console tables for `report`, in GuideLLM's order, without
/// its latency table: "Run Summary Info", "Text Metrics Statistics",
/// "Image Metrics Statistics" (only when images ran), "Audio Metrics
/// Statistics" (only when audio clips were sent), "Request Token
/// Statistics" and "Server Throughput Statistics". Each table is no wider
/// than [`CONSOLE_WIDTH`] (wider ones split in two, or more). Empty for a
/// report without benchmarks.
pub(crate) fn guidellm_tables(report: &Report) -> String {
    // The metrics alone: no JSON object per request.
    let benchmarks = benchmarks_without_requests(report);
    let labels: Vec<String> = report.benchmarks.iter().map(|b| b.label()).collect();
    let n = labels.len().min(benchmarks.len());
    if n == 0 {
        return String::new();
    }
    let (labels, benchmarks) = (&labels[..n], &benchmarks[..n]);
    let mut out = run_summary(labels, benchmarks);
    out.push_str(&modality(labels, benchmarks, "text", TEXT));
    out.push_str(&modality(labels, benchmarks, "image", IMAGE));
    out.push_str(&modality(labels, benchmarks, "audio", AUDIO));
    out.push_str(&request_tokens(labels, benchmarks));
    out.push_str(&throughput(labels, benchmarks));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::CompactImages;
    use crate::report::guidellm_write::to_guidellm;
    use crate::report::tests::sample_report;

    /// The sections of `text`, by title (the line that ends in `:`), each
    /// with its rows by benchmark label: the cells after the label, across
    /// the tables a wide section was split into.
    fn sections(text: &str, labels: &[String]) -> Vec<(String, Vec<Vec<String>>)> {
        let mut out: Vec<(String, Vec<Vec<String>>)> = Vec::new();
        for line in text.lines() {
            if let Some(title) = line.strip_suffix(':') {
                out.push((title.to_owned(), vec![Vec::new(); labels.len()]));
                continue;
            }
            let Some((_, rows)) = out.last_mut() else {
                continue;
            };
            for (label, row) in labels.iter().zip(rows.iter_mut()) {
                if let Some(rest) = line.strip_prefix(label.as_str())
                    && rest.starts_with("  ")
                {
                    row.extend(rest.split_whitespace().map(str::to_owned));
                }
            }
        }
        out
    }

    /// The rows of the section titled `title`.
    fn rows<'s>(sections: &'s [(String, Vec<Vec<String>>)], title: &str) -> &'s [Vec<String>] {
        &sections
            .iter()
            .find(|(t, _)| t == title)
            .unwrap_or_else(|| panic!("no section {title}: {sections:?}"))
            .1
    }

    #[test]
    fn the_tables_hold_the_counts_and_token_numbers_of_the_guidellm_document() {
        let report = sample_report();
        let labels: Vec<String> = report.benchmarks.iter().map(|b| b.label()).collect();
        let document = to_guidellm(&report);
        let text = guidellm_tables(&report);
        let sections = sections(&text, &labels);
        let titles: Vec<&str> = sections.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            titles,
            [
                "Run Summary Info",
                "Text Metrics Statistics (Completed Requests)",
                "Request Token Statistics (Completed Requests)",
                "Server Throughput Statistics (All Requests)",
            ],
            "GuideLLM's order, without its latency table: {text}"
        );
        for (i, b) in document["benchmarks"]
            .as_array()
            .expect("benchmarks")
            .iter()
            .enumerate()
        {
            let m = &b["metrics"];
            let totals = &m["request_totals"];
            let sum = |key: &str, s: &str| number(&m[key][s]["total_sum"]);
            let summary = &rows(&sections, "Run Summary Info")[i];
            assert_eq!(
                summary[5..],
                [
                    number(&totals["successful"]),
                    number(&totals["incomplete"]),
                    number(&totals["errored"]),
                    sum("prompt_token_count", "successful"),
                    sum("prompt_token_count", "incomplete"),
                    sum("prompt_token_count", "errored"),
                    sum("output_token_count", "successful"),
                    sum("output_token_count", "incomplete"),
                    sum("output_token_count", "errored"),
                ],
                "{text}"
            );
            assert_eq!(summary[2], number(&b["duration"]));
            let tokens = &rows(&sections, "Request Token Statistics (Completed Requests)")[i];
            let stat = |key: &str, s: Stat| number(s.of(&m[key], "successful"));
            assert_eq!(
                tokens[..6],
                [
                    stat("prompt_token_count", Stat::Median),
                    stat("prompt_token_count", Stat::P95),
                    stat("output_token_count", Stat::Median),
                    stat("output_token_count", Stat::P95),
                    stat("total_token_count", Stat::Median),
                    stat("total_token_count", Stat::P95),
                ],
                "{text}"
            );
            let throughput = &rows(&sections, "Server Throughput Statistics (All Requests)")[i];
            let total = |key: &str, s: Stat| number(s.of(&m[key], "total"));
            assert_eq!(
                throughput[..],
                [
                    total("request_concurrency", Stat::Median),
                    total("request_concurrency", Stat::Mean),
                    total("requests_per_second", Stat::Mean),
                    total("prompt_tokens_per_second", Stat::Mean),
                    total("output_tokens_per_second", Stat::Mean),
                    total("tokens_per_second", Stat::Mean),
                ],
                "{text}"
            );
        }
        // The sample's own numbers: 10 requests of 64 prompt and 6 output
        // tokens; then 10 served, 1 incomplete and 1 errored.
        let summary = rows(&sections, "Run Summary Info");
        assert_eq!(summary[0][5..8], ["10", "0", "0"]);
        assert_eq!(summary[0][8], "640.0");
        assert_eq!(summary[0][11], "60.0");
        assert_eq!(summary[1][5..8], ["10", "1", "1"]);
        let tokens = rows(&sections, "Request Token Statistics (Completed Requests)");
        assert_eq!(
            tokens[0][..6],
            ["64.0", "64.0", "6.0", "6.0", "70.0", "70.0"]
        );
        // Text: input tokens per request first, output tokens in a table of
        // their own.
        let text_rows = rows(&sections, "Text Metrics Statistics (Completed Requests)");
        assert_eq!(text_rows[0][..2], ["64.0", "64.0"], "{text}");
    }

    /// The sample side by side under long labels, with images and large
    /// numbers.
    fn long_labels() -> Report {
        let mut report = sample_report();
        for (i, b) in report.benchmarks.iter_mut().enumerate() {
            b.backend = Some("candle engine_args.threads=2".into());
            b.name = if i == 0 {
                "constant@4.00/s-with-a-long-name".into()
            } else {
                "concurrent@8".into()
            };
            for r in &mut b.records.records {
                r.images = Some(CompactImages {
                    count: 12,
                    tokens: 123_456,
                    prepare_us: 0,
                    encode_us: 0,
                });
            }
        }
        report
    }

    #[test]
    fn every_line_fits_in_120_columns_even_with_long_labels() {
        let report = long_labels();
        let text = guidellm_tables(&report);
        assert!(text.contains("candle engine_args.threads=2 · concurrent@8"));
        for line in text.lines() {
            let width = line.chars().count();
            assert!(width <= CONSOLE_WIDTH, "{width} wide: {line}\n{text}");
        }
        // Wide sections were split, each part naming the benchmarks.
        let headers = text.lines().filter(|l| l.starts_with("Benchmark")).count();
        assert!(headers > 6, "{headers} tables: {text}");
        let whole = crate::report::console_summary(&report);
        assert!(whole.contains(&text), "the summary shows the tables");
    }

    #[test]
    fn the_image_table_appears_only_when_images_ran() {
        let title = "Image Metrics Statistics (Completed Requests):";
        let text = guidellm_tables(&sample_report());
        assert!(!text.contains(title), "{text}");
        let mut report = sample_report();
        report.benchmarks[1].records.records[0].images = Some(CompactImages {
            count: 2,
            tokens: 60,
            prepare_us: 0,
            encode_us: 0,
        });
        let text = guidellm_tables(&report);
        let at = text.find(title).unwrap_or_else(|| panic!("{text}"));
        let labels: Vec<String> = report.benchmarks.iter().map(|b| b.label()).collect();
        let sections = sections(&text[at..], &labels);
        let images = &sections[0].1;
        // Image tokens and images per request; no pixels or bytes, and no
        // output side: only the inputs' table.
        assert_eq!(images[1][..2], ["60.0", "60.0"], "{text}");
        assert_eq!(images[0][..2], ["-", "-"], "{text}");
        assert!(!text[at..].contains("Input pixels") && !text[at..].contains("Output images"));
        assert!(text.find("Text Metrics").is_some_and(|t| t < at));
    }

    #[test]
    fn numbers_and_times_are_shown_as_guidellm_shows_them() {
        assert_eq!(number(&serde_json::json!(5)), "5");
        assert_eq!(number(&serde_json::json!(85.0)), "85.0");
        assert_eq!(number(&serde_json::json!(0.349)), "0.3");
        assert_eq!(number(&Value::Null), "-");
        assert_eq!(clock(&serde_json::json!(1_700_000_000.5)), "22:13:20");
        assert_eq!(clock(&serde_json::json!(-1.0)), "-");
        assert_eq!(guidellm_tables(&Report::new(serde_json::json!({}))), "");
    }
}
