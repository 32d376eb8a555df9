//! Benchmark metrics and reports.
//!
//! A run's per-request records are kept in compact form
//! ([`CompactRecords`]); every metric ([`BenchmarkMetrics`]) is computed
//! from that form, so a saved [`Report`] re-reads, re-reports and merges
//! exactly. A report renders as versioned JSON ([`Report::write_json`]),
//! YAML ([`to_yaml`]), CSV ([`to_csv`]), console tables
//! ([`console_summary`]), a self-contained HTML page ([`to_html`]; several
//! runs on one page with [`comparison_to_html`]) and a PNG of the main
//! charts ([`write_plot`]).
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_precision_loss,
    clippy::cast_sign_loss
)]

mod chart;
mod compare;
mod console;
mod console_guidellm;
mod csv;
mod document;
pub mod guidellm;
pub mod guidellm_write;
mod html;
mod keeping_up;
mod metrics;
mod model;
mod plot;
mod read;
mod side_by_side;
mod table;
mod yaml;

pub use crate::record::{
    ClientFootprint, CompactAudio, CompactRecord, CompactRecords, CompactTurn, Excluded,
    ProcessUsage, round_to_micros,
};
pub use compare::{
    BenchmarkComparison, Comparison, MetricComparison, Verdict, compare, comparison_text,
    split_by_backend,
};
pub use console::console_summary;
pub use csv::{to_csv, write_csv};
pub use document::{
    GUIDEBENCH_KEY, Schema, report_document, write_json_document, write_yaml_document,
};
pub use html::{comparison_to_html, render_html, to_html, write_html};
pub use keeping_up::{
    CPU_SHARE, ClientSaturation, MIN_CPU_WALL_S, MIN_DISPATCH_BOUND_S, MIN_PLANNED,
    client_saturation,
};
pub use metrics::{AudioMetrics, BenchmarkMetrics, StatusMetrics, TurnMetrics, answers_are_pooled};
pub use model::{
    BackendRun, BenchmarkReport, Environment, GUIDEBENCH_VERSION, OutputAgreement, Report,
    SCHEMA_VERSION,
};
pub use plot::{PLOT_SIZE, write_plot};
pub use side_by_side::{BackendOutcome, backend_labels, combine};
pub use yaml::{to_yaml, write_yaml};

use crate::metrics::Distribution;
use crate::record::count_as_f64;
use guidebench_core::clock::Timestamp;

/// Microseconds as seconds.
#[allow(clippy::cast_precision_loss)] // |µs| below 2^53 (285 years) converts exactly.
fn micros_as_secs(us: i64) -> f64 {
    us as f64 / 1e6
}

/// A distribution's value at percentile `p` (one of
/// [`crate::metrics::PERCENTILES`]), in milliseconds; `None` when empty.
fn ms_at(d: &Distribution, p: f64) -> Option<f64> {
    if d.count == 0 {
        return None;
    }
    d.at(p).map(|v| v * 1e3)
}

/// A distribution's mean in milliseconds; `None` when empty.
fn ms_mean(d: &Distribution) -> Option<f64> {
    (d.count > 0).then_some(d.mean * 1e3)
}

/// `value` with `decimals` decimals, or `-` when absent.
fn fixed(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// A timestamp as `YYYY-MM-DD HH:MM:SS UTC`.
fn format_utc(at: Timestamp) -> String {
    let seconds = at.0.div_euclid(1_000_000_000);
    jiff::Timestamp::from_second(seconds).map_or_else(
        |_| format!("{seconds} s after the Unix epoch"),
        |t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use guidebench_core::request::{FinishReason, RequestRecord, RequestStatus, RequestTimings};

    pub(crate) use crate::record::testing::{ms, served_at};

    /// A served request with uneven token gaps, starting at `start` ms.
    fn served(id: u64, start: i64) -> RequestRecord {
        let offsets = [40, 55, 61, 90, 97, 130];
        RequestRecord {
            id,
            status: RequestStatus::Success,
            error: None,
            prompt_tokens: Some(64),
            output_tokens: 6,
            finish_reason: Some(FinishReason::Length),
            text: Some(format!("answer {id}")),
            images: None,
            timings: RequestTimings {
                scheduled: Some(ms(start - 1)),
                start: Some(ms(start)),
                queued: Some(ms(start + 1)),
                dispatched: Some(ms(start + 2)),
                tokens: offsets
                    .iter()
                    .map(|o| Timestamp(ms(start + o).0 + 123_456))
                    .collect(),
                end: Some(ms(start + 140)),
                retries: 0,
                first_content: None,
                reasoning_tokens: None,
            },
            cut_short_of: None,
            tool_calls: None,
            audio: None,
        }
    }

    /// A report with two benchmarks, one of them with an errored and an
    /// incomplete request, and a label that needs escaping.
    pub(crate) fn sample_report() -> Report {
        let mut report = Report::new(serde_json::json!({
            "backend": "offline,engine=mock",
            "rate": [1.0, 2.0],
        }));
        report
            .environment
            .backend
            .insert("engine".into(), "mock <fast>".into());
        let mut first: Vec<RequestRecord> = (0..10)
            .map(|i| served(i, i64::try_from(i).expect("small") * 100))
            .collect();
        first[3].timings.retries = 1;
        let mut sync = BenchmarkReport::from_records(
            "synchronous",
            "synchronous".into(),
            ms(0),
            ms(1_000),
            &first,
        );
        sync.client = Some(ClientFootprint {
            cpu_user_s: 0.25,
            cpu_system_s: 0.125,
            cpu_s: 0.375,
            engine_cpu_s: None,
            cpu_per_request_ms: Some(37.5),
            peak_rss_bytes: 48 << 20,
        });
        report.benchmarks.push(sync);
        let mut second: Vec<RequestRecord> = (10..20)
            .map(|i| served(i, 2_000 + (i64::try_from(i).expect("small") - 10) * 30))
            .collect();
        second.push(RequestRecord::error(
            20,
            &guidebench_core::Error::EnginePanic("boom".into()),
            ms(2_100),
            ms(2_150),
        ));
        second.push(RequestRecord::incomplete(21, ms(2_400)));
        let mut bench = BenchmarkReport::new(
            "<script>alert(1)</script>",
            serde_json::json!({"kind": "concurrent", "streams": 4}),
            ms(2_000),
            ms(2_500),
            CompactRecords::from_records(ms(2_000), &second),
        );
        bench.warmup_excluded = Some(2);
        report.benchmarks.push(bench);
        report
    }

    #[test]
    fn utc_dates_follow_the_gregorian_calendar() {
        assert_eq!(format_utc(Timestamp(0)), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            format_utc(Timestamp(1_700_000_000_000_000_000)),
            "2023-11-14 22:13:20 UTC"
        );
        assert_eq!(
            format_utc(Timestamp(951_782_400_000_000_000)),
            "2000-02-29 00:00:00 UTC"
        );
        assert_eq!(
            format_utc(Timestamp(-1_000_000_000)),
            "1969-12-31 23:59:59 UTC"
        );
    }
}
