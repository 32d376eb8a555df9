//! One CSV row per benchmark.

use std::path::Path;

use super::model::{BenchmarkReport, Report};
use super::{ms_at, ms_mean};
use crate::metrics::Distribution;
use guidebench_core::{Error, Result};

/// The CSV header. Times are in milliseconds; ITL is the per-gap
/// distribution; percentiles are of successful requests.
const FIXED_HEADER: [&str; 10] = [
    "name",
    "profile",
    "requests_ok",
    "requests_errored",
    "requests_incomplete",
    "duration_s",
    "requests_per_s",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "mean_concurrency",
];

const TIMED: [&str; 4] = ["latency", "ttft", "itl", "tpot"];
const PERCENTILES: [(f64, &str); 3] = [(50.0, "p50"), (95.0, "p95"), (99.0, "p99")];

fn number(value: Option<f64>) -> String {
    value.map_or_else(String::new, |v| format!("{v:.3}"))
}

fn header() -> Vec<String> {
    let mut cols: Vec<String> = FIXED_HEADER.iter().map(|s| (*s).to_owned()).collect();
    for metric in TIMED {
        for (_, p) in PERCENTILES {
            cols.push(format!("{metric}_{p}_ms"));
        }
    }
    cols.push("dispatch_delay_mean_ms".to_owned());
    for extra in SLO_COLUMNS
        .iter()
        .chain(&TOOL_COLUMNS)
        .chain(&AUDIO_COLUMNS)
    {
        cols.push((*extra).to_owned());
    }
    cols
}

/// Objective columns, empty without `--slo`.
const SLO_COLUMNS: [&str; 3] = [
    "slo_attainment",
    "goodput_requests_per_s",
    "goodput_output_tokens_per_s",
];

/// Tool-call columns, empty without tool calls: calls per answer and the
/// time to first tool call of successful requests.
const TOOL_COLUMNS: [&str; 4] = [
    "tool_calls_mean",
    "ttftc_p50_ms",
    "ttftc_p95_ms",
    "ttftc_p99_ms",
];

/// Audio columns, empty without audio clips: the mean seconds of audio per
/// request, the median and p95 real-time factor of successful requests
/// (latency / audio seconds) and the seconds of audio they sent per second
/// of the window.
const AUDIO_COLUMNS: [&str; 4] = [
    "audio_seconds_mean",
    "rtf_p50",
    "rtf_p95",
    "audio_seconds_per_s",
];

fn row(b: &BenchmarkReport) -> Vec<String> {
    let m = &b.metrics;
    let s = &m.successful;
    let mut cells = vec![
        b.name.clone(),
        b.profile_label(),
        s.count.to_string(),
        m.errored.count.to_string(),
        m.incomplete.count.to_string(),
        number(Some(m.duration_s)),
        number(Some(m.requests_per_s)),
        // Not applicable (empty) for embeddings and pooling answers.
        number((!m.pooled).then_some(m.output_tokens_per_s)),
        number(Some(m.total_tokens_per_s)),
        number(Some(m.mean_concurrency)),
    ];
    let timed: [&Distribution; 4] = [&s.latency, &s.ttft, &s.itl, &s.tpot];
    for d in timed {
        for (p, _) in PERCENTILES {
            cells.push(number(ms_at(d, p)));
        }
    }
    cells.push(number(ms_mean(&m.dispatch_delay)));
    let slo = m.slo.as_ref();
    cells.push(number(slo.and_then(|s| s.attainment)));
    cells.push(number(slo.map(|s| s.goodput_requests_per_s)));
    cells.push(number(slo.map(|s| s.goodput_output_tokens_per_s)));
    cells.push(number(s.tool_calls.as_ref().map(|d| d.mean)));
    for (p, _) in PERCENTILES {
        cells.push(number(s.ttftc.as_ref().and_then(|d| ms_at(d, p))));
    }
    let clips = m.all.audio.as_ref();
    cells.push(number(
        clips.and_then(|a| (a.seconds.count > 0).then_some(a.seconds.mean)),
    ));
    let rtf = s
        .audio
        .as_ref()
        .map(|a| &a.real_time_factor)
        .filter(|d| d.count > 0);
    cells.push(number(rtf.and_then(|d| d.at(50.0))));
    cells.push(number(rtf.and_then(|d| d.at(95.0))));
    cells.push(number(m.audio_seconds_per_s));
    cells
}

/// The report as CSV: a header, then one row per benchmark with its name,
/// profile, successful / errored / incomplete request counts, window length
/// (s), requests/s, output and total tokens/s, mean concurrency, the median,
/// p95 and p99 of latency, TTFT, ITL (per gap) and TPOT of successful
/// requests (ms), the mean dispatch delay (ms), and with `--slo` the
/// attainment and goodput (requests/s, output tokens/s), then with tool
/// calls their mean per answer and the median, p95 and p99 time to first
/// tool call (ms), then with audio clips the mean seconds of audio per
/// request, the median and p95 real-time factor of successful requests and
/// the seconds of audio per second. Empty cells mark
/// values that do not exist.
/// Fields are quoted by the `csv` crate's writer where they need it.
pub fn to_csv(report: &Report) -> String {
    let mut bytes = Vec::new();
    // Writing to memory fails only on a bug: the text is then cut short
    // and the error logged.
    if let Err(err) = write_records(report, &mut bytes) {
        tracing::error!(error = %err, "the CSV could not be written in full");
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Writes [`to_csv`] to `path`.
pub fn write_csv(report: &Report, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    write_records(report, file).map_err(|e| Error::io(path, std::io::Error::other(e)))
}

fn write_records(report: &Report, out: impl std::io::Write) -> csv::Result<()> {
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(out);
    writer.write_record(header())?;
    for b in &report.benchmarks {
        writer.write_record(row(b))?;
    }
    writer.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn the_csv_has_a_header_and_one_row_per_benchmark() {
        let report = sample_report();
        let csv = to_csv(&report);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with(
            "name,profile,requests_ok,requests_errored,requests_incomplete,duration_s,"
        ));
        assert!(lines[0].contains("latency_p50_ms,latency_p95_ms,latency_p99_ms,ttft_p50_ms"));
        assert!(lines[0].ends_with(
            "dispatch_delay_mean_ms,slo_attainment,goodput_requests_per_s,goodput_output_tokens_per_s,\
             tool_calls_mean,ttftc_p50_ms,ttftc_p95_ms,ttftc_p99_ms,\
             audio_seconds_mean,rtf_p50,rtf_p95,audio_seconds_per_s"
        ));
        let columns = lines[0].split(',').count();
        assert_eq!(columns, 34);
        assert!(
            lines[1].ends_with(",,,,"),
            "no audio, empty audio cells: {}",
            lines[1]
        );
        let first: Vec<&str> = lines[1].split(',').collect();
        assert_eq!(first.len(), columns);
        let m = &report.benchmarks[0].metrics;
        assert_eq!(&first[..5], &["synchronous", "synchronous", "10", "0", "0"]);
        assert_eq!(first[6], format!("{:.3}", m.requests_per_s));
        assert_eq!(
            first[10],
            format!("{:.3}", m.successful.latency.median * 1e3)
        );
        assert_eq!(first[22], format!("{:.3}", m.dispatch_delay.mean * 1e3));
        // The profile is JSON with commas and quotes: quoted and escaped.
        assert!(lines[2].starts_with(
            "<script>alert(1)</script>,\"{\"\"kind\"\":\"\"concurrent\"\",\"\"streams\"\":4}\",10,1,1,"
        ));
    }

    #[test]
    fn the_csv_is_written_to_a_file() {
        let report = sample_report();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("report.csv");
        write_csv(&report, &path).expect("write");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            to_csv(&report)
        );
    }
}
