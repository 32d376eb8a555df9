//! Whether the client kept up: a flag on a benchmark whose own numbers show
//! that the benchmarking process, not the target, set the pace.
//!
//! The rule (also in `docs/metrics.md`) flags a benchmark when either holds:
//!
//! * **dispatch delay**: for a rate-based profile (requests have a planned
//!   send), the 95th percentile of the dispatch delay (actual − planned
//!   send) exceeds the larger of the mean gap between planned sends and
//!   [`MIN_DISPATCH_BOUND_S`] — the client is more than a whole gap late for
//!   one request in twenty, so the arrival process it claims is not the one
//!   the server saw (judged with at least [`MIN_PLANNED`] planned sends);
//! * **CPU**: the client used at least [`CPU_SHARE`] of every available
//!   core over a benchmark of at least [`MIN_CPU_WALL_S`] (CPU time ÷ wall
//!   time ÷ available cores) —
//!   timings then include waiting for a core. With an in-process engine the
//!   engine's threads are left out ([`ClientFootprint::engine_cpu_s`]): an
//!   engine that keeps every core busy is doing its job, not slowing the
//!   client.
//!
//! [`ClientFootprint::engine_cpu_s`]: crate::record::ClientFootprint::engine_cpu_s
//!
//! The flag is kept in the benchmark's `extra.client_saturated` and printed
//! as one console line.

use serde::{Deserialize, Serialize};

use super::{BenchmarkReport, count_as_f64, micros_as_secs};

/// The smallest dispatch-delay bound, in seconds: below it, delays are
/// timer and scheduling jitter rather than a client falling behind.
pub const MIN_DISPATCH_BOUND_S: f64 = 1e-3;

/// The share of all available cores at which the client counts as CPU-bound.
pub const CPU_SHARE: f64 = 0.9;

/// The fewest planned sends the dispatch rule judges (a 95th percentile of
/// fewer is little more than the maximum).
pub const MIN_PLANNED: usize = 20;

/// The shortest benchmark, in seconds, the CPU rule judges (CPU time is
/// counted in scheduler ticks: over a shorter run its share is noise).
pub const MIN_CPU_WALL_S: f64 = 1.0;

/// Why a benchmark's client could not keep up (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientSaturation {
    /// One sentence per rule that fired.
    pub reasons: Vec<String>,
    /// The dispatch delay's 95th percentile, in seconds, for a rate-based
    /// profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_delay_p95_s: Option<f64>,
    /// The bound it was held to, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_bound_s: Option<f64>,
    /// Cores the client kept busy on average (its CPU time ÷ wall time; an
    /// in-process engine's threads left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores_used: Option<f64>,
    /// The cores available to the process.
    pub available_cores: usize,
}

/// The flag for `report`, whose client footprint covers `wall_s` seconds,
/// on a machine with `available_cores`; `None` when the client kept up.
pub fn client_saturation(
    report: &BenchmarkReport,
    wall_s: f64,
    available_cores: usize,
) -> Option<ClientSaturation> {
    let mut flag = ClientSaturation {
        reasons: Vec::new(),
        dispatch_delay_p95_s: None,
        dispatch_bound_s: None,
        cpu_cores_used: None,
        available_cores,
    };

    let delay = &report.metrics.dispatch_delay;
    let planned = report.records.measured().filter_map(|r| r.scheduled).fold(
        None,
        |span: Option<(i64, i64, usize)>, at| {
            Some(span.map_or((at, at, 1), |(lo, hi, n)| (lo.min(at), hi.max(at), n + 1)))
        },
    );
    // A rate-based profile plans every send; other profiles plan none (only
    // a retried send has one) and are not held to a schedule.
    let rate_based = planned.is_some_and(|(_, _, n)| n == report.records.measured().count());
    if let (Some(p95), Some((lo, hi, n))) = (delay.at(95.0).filter(|_| delay.count > 0), planned)
        && rate_based
        && n >= MIN_PLANNED
    {
        let gap = micros_as_secs(hi - lo) / count_as_f64(n - 1);
        let bound = gap.max(MIN_DISPATCH_BOUND_S);
        flag.dispatch_delay_p95_s = Some(p95);
        flag.dispatch_bound_s = Some(bound);
        if p95 > bound {
            flag.reasons.push(format!(
                "dispatch delay p95 {:.3} ms > {:.3} ms (the larger of the mean gap between \
                 planned sends, {:.3} ms, and 1 ms)",
                p95 * 1e3,
                bound * 1e3,
                gap * 1e3
            ));
        }
    }

    if let Some(client) = &report.client
        && wall_s >= MIN_CPU_WALL_S
        && available_cores > 0
    {
        let cores = client.client_cpu_s() / wall_s;
        flag.cpu_cores_used = Some(cores);
        if cores >= CPU_SHARE * count_as_f64(available_cores) {
            let who = if client.engine_cpu_s.is_some() {
                "the client's threads (the in-process engine's left out)"
            } else {
                "the process"
            };
            flag.reasons.push(format!(
                "{who} kept {cores:.2} of {available_cores} available cores busy \
                 (at least {:.0} %)",
                CPU_SHARE * 100.0
            ));
        }
    }

    (!flag.reasons.is_empty()).then_some(flag)
}

#[cfg(test)]
mod tests {
    use guidebench_core::clock::Timestamp;
    use guidebench_core::request::{RequestRecord, RequestStatus, RequestTimings};

    use super::*;
    use crate::report::{ClientFootprint, CompactRecords};

    const MS: i64 = 1_000_000;

    /// A benchmark of requests planned every `gap_ms` and sent `late_ms[i]` after.
    fn benchmark(gap_ms: i64, late_ms: &[i64], cpu_s: Option<f64>) -> BenchmarkReport {
        let origin = Timestamp(1_000_000 * MS);
        let records: Vec<RequestRecord> = late_ms
            .iter()
            .zip(0i64..)
            .map(|(&late, i)| {
                let planned = origin.0 + i * gap_ms * MS;
                RequestRecord {
                    id: u64::try_from(i).expect("small"),
                    status: RequestStatus::Success,
                    error: None,
                    prompt_tokens: Some(1),
                    output_tokens: 1,
                    finish_reason: None,
                    text: None,
                    images: None,
                    timings: RequestTimings {
                        scheduled: Some(Timestamp(planned)),
                        start: Some(Timestamp(planned + late * MS)),
                        tokens: vec![Timestamp(planned + late * MS + MS)],
                        end: Some(Timestamp(planned + late * MS + 2 * MS)),
                        ..RequestTimings::default()
                    },
                    cut_short_of: None,
                    tool_calls: None,
                    audio: None,
                }
            })
            .collect();
        let end = Timestamp(origin.0 + 1_000 * MS);
        let mut report = BenchmarkReport::new(
            "constant",
            serde_json::Value::Null,
            origin,
            end,
            CompactRecords::from_records(origin, &records),
        );
        report.client = cpu_s.map(|cpu_s| ClientFootprint {
            cpu_user_s: cpu_s,
            cpu_system_s: 0.0,
            cpu_s,
            engine_cpu_s: None,
            cpu_per_request_ms: None,
            peak_rss_bytes: 0,
        });
        report
    }

    #[test]
    fn a_client_on_schedule_with_cores_to_spare_is_not_flagged() {
        let report = benchmark(10, &[0; 40], Some(0.5));
        assert_eq!(client_saturation(&report, 1.0, 4), None);
    }

    #[test]
    fn a_dispatch_delay_p95_beyond_the_gap_between_planned_sends_is_flagged() {
        // Planned every 10 ms; every fifth request is 25 ms late: p95 25 ms > 10 ms.
        let late: Vec<i64> = (0..40).map(|i| if i % 5 == 0 { 25 } else { 0 }).collect();
        let flag = client_saturation(&benchmark(10, &late, None), 1.0, 4).expect("flagged");
        assert_eq!(flag.reasons.len(), 1, "{flag:?}");
        assert!(flag.reasons[0].starts_with("dispatch delay p95 25.000 ms > 10.000 ms"));
        assert_eq!(flag.dispatch_bound_s, Some(0.01));
        // Late by less than the gap: not flagged.
        let late: Vec<i64> = (0..40).map(|i| if i % 5 == 0 { 8 } else { 0 }).collect();
        assert_eq!(client_saturation(&benchmark(10, &late, None), 1.0, 4), None);
    }

    #[test]
    fn the_dispatch_bound_is_never_below_one_millisecond() {
        // Planned back to back (gap 0): a 0.9 ms p95 stays under the 1 ms floor.
        let report = benchmark(0, &[0; 40], None);
        let flag = client_saturation(&report, 1.0, 4);
        assert_eq!(flag, None);
        // Too few planned sends to judge a 95th percentile.
        let late = [5; MIN_PLANNED - 1];
        assert_eq!(client_saturation(&benchmark(0, &late, None), 1.0, 4), None);
        let late: Vec<i64> = (0..40).map(|i| if i % 2 == 0 { 2 } else { 0 }).collect();
        let flag = client_saturation(&benchmark(0, &late, None), 1.0, 4).expect("flagged");
        assert_eq!(flag.dispatch_bound_s, Some(MIN_DISPATCH_BOUND_S));
    }

    #[test]
    fn a_process_using_nine_tenths_of_every_core_is_flagged() {
        let flag = client_saturation(&benchmark(10, &[0; 40], Some(3.6)), 1.0, 4).expect("flagged");
        assert_eq!(flag.cpu_cores_used, Some(3.6));
        assert!(
            flag.reasons[0].contains("3.60 of 4 available cores"),
            "{flag:?}"
        );
        assert_eq!(
            client_saturation(&benchmark(10, &[0; 40], Some(3.5)), 1.0, 4),
            None
        );
        // Under a second, CPU time is too coarse to judge.
        let short = benchmark(10, &[0; 40], Some(0.5));
        assert_eq!(client_saturation(&short, 0.5, 1), None);
    }

    #[test]
    fn an_in_process_engine_busy_on_every_core_does_not_flag_the_client() {
        let mut report = benchmark(10, &[0; 40], Some(3.9));
        if let Some(client) = report.client.as_mut() {
            client.engine_cpu_s = Some(3.8);
        }
        assert_eq!(client_saturation(&report, 1.0, 4), None);
        // The client's own threads on every core still are flagged.
        if let Some(client) = report.client.as_mut() {
            client.engine_cpu_s = Some(0.2);
        }
        let flag = client_saturation(&report, 1.0, 4).expect("flagged");
        assert!(
            flag.reasons[0].starts_with(
                "the client's threads (the in-process engine's left out) kept 3.70 of 4"
            ),
            "{flag:?}"
        );
    }
}
