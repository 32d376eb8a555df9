//! Two runs side by side: is the difference real?
//!
//! Benchmarks are paired by name. For each pair, the means of TTFT, ITL
//! (per request) and latency are compared with Welch's t interval of the
//! difference (no assumption of equal variances), p95s by their
//! distribution-free intervals (different only when the two intervals do
//! not overlap, a conservative test), and the attainment of the objectives
//! by Newcombe's interval of a difference of proportions (built from the
//! two Wilson intervals). Throughputs are shown without a verdict: one run
//! gives one window, not a sample of them.

use std::fmt::Write as _;

use serde::Serialize;

use super::model::{BenchmarkReport, Report};
use super::table::{Align, Column, Table};
use crate::analysis::stats::{Interval, t_critical};
use crate::metrics::{CONFIDENCE, Distribution};

/// What a difference amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The candidate is better, beyond chance at [`CONFIDENCE`].
    Better,
    /// The candidate is worse, beyond chance.
    Worse,
    /// The difference is within chance.
    NoDifference,
    /// The numbers do not say (no samples, or no interval for the metric).
    Unknown,
}

/// One metric of one benchmark in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricComparison {
    /// The metric (`ttft mean ms`, ...).
    pub metric: &'static str,
    /// The baseline's value.
    pub baseline: Option<f64>,
    /// The candidate's value.
    pub candidate: Option<f64>,
    /// The interval of candidate − baseline, where one exists.
    pub difference: Option<Interval>,
    /// What the difference amounts to.
    pub verdict: Verdict,
    /// `(candidate − baseline) / baseline` in percent, where both exist and
    /// the baseline is not 0.
    pub change_percent: Option<f64>,
    /// Whether less is better for this metric (times), or more (rates,
    /// attainment).
    pub lower_is_better: bool,
}

impl MetricComparison {
    /// A row with its change in percent filled in.
    fn new(
        metric: &'static str,
        baseline: Option<f64>,
        candidate: Option<f64>,
        difference: Option<Interval>,
        verdict: Verdict,
        lower_is_better: bool,
    ) -> Self {
        let change_percent = match (baseline, candidate) {
            (Some(a), Some(c)) if a != 0.0 => Some((c - a) / a * 100.0),
            _ => None,
        };
        MetricComparison {
            metric,
            baseline,
            candidate,
            difference,
            verdict,
            change_percent,
            lower_is_better,
        }
    }

    /// Which side has the better value (`"baseline"` or `"candidate"`),
    /// whether or not the difference is beyond chance; `None` when they are
    /// equal or one is missing.
    pub fn better_side(&self) -> Option<&'static str> {
        let (a, c) = (self.baseline?, self.candidate?);
        if a == c {
            return None;
        }
        Some(if (c < a) == self.lower_is_better {
            "candidate"
        } else {
            "baseline"
        })
    }
}

/// One benchmark in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchmarkComparison {
    /// The benchmark's name in both runs.
    pub name: String,
    /// Its metrics.
    pub metrics: Vec<MetricComparison>,
}

/// Two runs compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The benchmarks both runs have.
    pub benchmarks: Vec<BenchmarkComparison>,
    /// Benchmarks only the baseline has.
    pub only_in_baseline: Vec<String>,
    /// Benchmarks only the candidate has.
    pub only_in_candidate: Vec<String>,
}

/// Welch's interval of `b.mean − a.mean`, in the distributions' unit.
#[allow(clippy::cast_precision_loss)] // counts are far below 2^52.
fn welch(a: &Distribution, b: &Distribution) -> Option<Interval> {
    if a.count < 2 || b.count < 2 {
        return None;
    }
    // The reports keep the population deviation; the sample variance of
    // the mean is std² / (n − 1).
    let va = a.std * a.std / (a.count - 1) as f64;
    let vb = b.std * b.std / (b.count - 1) as f64;
    let se = (va + vb).sqrt();
    let diff = b.mean - a.mean;
    if se == 0.0 {
        return Some(Interval {
            lower: diff,
            upper: diff,
        });
    }
    let dof = (va + vb).powi(2) / (va * va / (a.count - 1) as f64 + vb * vb / (b.count - 1) as f64);
    let t = t_critical(CONFIDENCE, dof)?;
    Some(Interval {
        lower: diff - t * se,
        upper: diff + t * se,
    })
}

/// Newcombe's interval of `p_b − p_a` from the two Wilson intervals.
fn newcombe(pa: f64, a: Interval, pb: f64, b: Interval) -> Interval {
    let diff = pb - pa;
    Interval {
        lower: diff - ((pb - b.lower).powi(2) + (a.upper - pa).powi(2)).sqrt(),
        upper: diff + ((b.upper - pb).powi(2) + (pa - a.lower).powi(2)).sqrt(),
    }
}

/// The verdict of a difference interval; `lower_is_better` for times.
fn verdict_of(difference: Option<Interval>, lower_is_better: bool) -> Verdict {
    match difference {
        None => Verdict::Unknown,
        Some(i) if i.lower > 0.0 => {
            if lower_is_better {
                Verdict::Worse
            } else {
                Verdict::Better
            }
        }
        Some(i) if i.upper < 0.0 => {
            if lower_is_better {
                Verdict::Better
            } else {
                Verdict::Worse
            }
        }
        Some(_) => Verdict::NoDifference,
    }
}

fn mean_row(metric: &'static str, a: &Distribution, b: &Distribution) -> MetricComparison {
    let scaled = |i: Interval| Interval {
        lower: i.lower * 1e3,
        upper: i.upper * 1e3,
    };
    let difference = welch(a, b).map(scaled);
    MetricComparison::new(
        metric,
        (a.count > 0).then_some(a.mean * 1e3),
        (b.count > 0).then_some(b.mean * 1e3),
        difference,
        verdict_of(difference, true),
        true,
    )
}

fn p95_row(metric: &'static str, a: &Distribution, b: &Distribution) -> MetricComparison {
    let at = |d: &Distribution| (d.count > 0).then(|| d.at(95.0)).flatten();
    let verdict = match (a.interval_at(95.0), b.interval_at(95.0)) {
        (Some(ia), Some(ib)) if ib.lower > ia.upper => Verdict::Worse,
        (Some(ia), Some(ib)) if ib.upper < ia.lower => Verdict::Better,
        (Some(_), Some(_)) => Verdict::NoDifference,
        _ => Verdict::Unknown,
    };
    MetricComparison::new(
        metric,
        at(a).map(|v| v * 1e3),
        at(b).map(|v| v * 1e3),
        None,
        verdict,
        true,
    )
}

fn rate_row(metric: &'static str, a: f64, b: f64) -> MetricComparison {
    MetricComparison::new(metric, Some(a), Some(b), None, Verdict::Unknown, false)
}

fn compare_benchmark(a: &BenchmarkReport, b: &BenchmarkReport) -> BenchmarkComparison {
    let (sa, sb) = (&a.metrics.successful, &b.metrics.successful);
    let mut metrics = vec![
        rate_row(
            "requests/s",
            a.metrics.requests_per_s,
            b.metrics.requests_per_s,
        ),
        rate_row(
            "output tokens/s",
            a.metrics.output_tokens_per_s,
            b.metrics.output_tokens_per_s,
        ),
        mean_row("TTFT mean ms", &sa.ttft, &sb.ttft),
        p95_row("TTFT p95 ms", &sa.ttft, &sb.ttft),
        mean_row("ITL mean ms", &sa.itl_per_request, &sb.itl_per_request),
        mean_row("latency mean ms", &sa.latency, &sb.latency),
        p95_row("latency p95 ms", &sa.latency, &sb.latency),
    ];
    if let (Some(x), Some(y)) = (&a.metrics.slo, &b.metrics.slo) {
        let difference = match (
            x.attainment,
            x.attainment_interval,
            y.attainment,
            y.attainment_interval,
        ) {
            (Some(pa), Some(ia), Some(pb), Some(ib)) => Some(newcombe(pa, ia, pb, ib)),
            _ => None,
        };
        let percent = |i: Interval| Interval {
            lower: i.lower * 100.0,
            upper: i.upper * 100.0,
        };
        metrics.push(MetricComparison::new(
            "attainment %",
            x.attainment.map(|p| p * 100.0),
            y.attainment.map(|p| p * 100.0),
            difference.map(percent),
            verdict_of(difference, false),
            false,
        ));
    }
    BenchmarkComparison {
        name: b.name.clone(),
        metrics,
    }
}

/// Compares `candidate` with `baseline`, benchmark by benchmark (paired by
/// name, first occurrence).
pub fn compare(baseline: &Report, candidate: &Report) -> Comparison {
    let find = |report: &'_ Report, name: &str| -> Option<usize> {
        report.benchmarks.iter().position(|b| b.name == name)
    };
    let mut comparison = Comparison {
        benchmarks: Vec::new(),
        only_in_baseline: Vec::new(),
        only_in_candidate: Vec::new(),
    };
    for b in &candidate.benchmarks {
        match find(baseline, &b.name) {
            Some(i) => {
                if !comparison.benchmarks.iter().any(|c| c.name == b.name) {
                    comparison
                        .benchmarks
                        .push(compare_benchmark(&baseline.benchmarks[i], b));
                }
            }
            None => comparison.only_in_candidate.push(b.name.clone()),
        }
    }
    for a in &baseline.benchmarks {
        if find(candidate, &a.name).is_none() {
            comparison.only_in_baseline.push(a.name.clone());
        }
    }
    comparison
}

/// The runs of `report` to compare, named `name`: the report itself, or,
/// when its benchmarks carry several backend labels (a run of several
/// backends side by side), one report per label, named `name label`, its
/// benchmarks without the label.
pub fn split_by_backend(name: &str, report: &Report) -> Vec<(String, Report)> {
    let mut labels: Vec<Option<&str>> = Vec::new();
    for b in &report.benchmarks {
        if !labels.contains(&b.backend.as_deref()) {
            labels.push(b.backend.as_deref());
        }
    }
    if labels.len() < 2 {
        return vec![(name.to_owned(), report.clone())];
    }
    labels
        .into_iter()
        .map(|label| {
            let mut part = report.clone();
            part.benchmarks.retain(|b| b.backend.as_deref() == label);
            for b in &mut part.benchmarks {
                b.backend = None;
            }
            let named = match (name.is_empty(), label) {
                (_, None) => name.to_owned(),
                (true, Some(l)) => l.to_owned(),
                (false, Some(l)) => format!("{name} {l}"),
            };
            (named, part)
        })
        .collect()
}

/// The comparison as text: one table row per benchmark and metric.
pub fn comparison_text(comparison: &Comparison) -> String {
    let r = Align::Right;
    let columns = vec![
        Column::new("", "Benchmark", Align::Left),
        Column::new("", "metric", Align::Left),
        Column::new("", "baseline", r),
        Column::new("", "candidate", r),
        Column::new("", "change", r),
        Column::new("", "better", Align::Left),
        Column::new("", "95 % interval of the difference", r),
        Column::new("", "verdict", Align::Left),
    ];
    let number = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.2}"));
    let mut rows = Vec::new();
    for b in &comparison.benchmarks {
        for (i, m) in b.metrics.iter().enumerate() {
            let change = m
                .change_percent
                .map_or_else(|| "-".into(), |p| format!("{p:+.1} %"));
            rows.push(vec![
                if i == 0 {
                    b.name.clone()
                } else {
                    String::new()
                },
                m.metric.to_owned(),
                number(m.baseline),
                number(m.candidate),
                change,
                m.better_side().unwrap_or("").to_owned(),
                m.difference.map_or_else(String::new, |d| {
                    format!("[{:+.2}, {:+.2}]", d.lower, d.upper)
                }),
                match m.verdict {
                    Verdict::Better => "better",
                    Verdict::Worse => "worse",
                    Verdict::NoDifference => "within chance",
                    Verdict::Unknown => "",
                }
                .to_owned(),
            ]);
        }
    }
    let mut out = Table { columns, rows }.render();
    for (which, names) in [
        ("baseline", &comparison.only_in_baseline),
        ("candidate", &comparison.only_in_candidate),
    ] {
        if !names.is_empty() {
            let _ = writeln!(out, "only in the {which}: {}", names.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    fn distribution(values: &[f64]) -> Distribution {
        Distribution::from_values(values.iter().copied())
    }

    #[test]
    fn welchs_interval_matches_a_hand_computation() {
        // a: 1..=5 (mean 3, sample variance 2.5); b: 3..=7 (mean 5).
        let a = distribution(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        let b = distribution(&[3.0, 4.0, 5.0, 6.0, 7.0]);
        let i = welch(&a, &b).expect("two samples");
        // se = sqrt(0.5 + 0.5) = 1, dof = 8, t(0.975, 8) = 2.306.
        assert!((i.lower - (2.0 - 2.306)).abs() < 1e-3, "{i:?}");
        assert!((i.upper - (2.0 + 2.306)).abs() < 1e-3, "{i:?}");
    }

    #[test]
    fn a_slower_candidate_is_worse_and_an_identical_one_within_chance() {
        let baseline = sample_report();
        let same = compare(&baseline, &baseline);
        assert_eq!(same.benchmarks.len(), 2);
        for m in &same.benchmarks[0].metrics {
            assert!(
                matches!(m.verdict, Verdict::NoDifference | Verdict::Unknown),
                "{m:?}"
            );
        }
        // Every token 50 ms later: TTFT and latency grow, ITL does not.
        let mut slower = sample_report();
        for b in &mut slower.benchmarks {
            for r in &mut b.records.records {
                r.first_token = r.first_token.map(|t| t + 50_000);
                r.end = r.end.map(|t| t + 50_000);
            }
            b.recompute();
        }
        let c = compare(&baseline, &slower);
        let verdict = |metric: &str| {
            c.benchmarks[0]
                .metrics
                .iter()
                .find(|m| m.metric == metric)
                .map(|m| m.verdict)
        };
        assert_eq!(verdict("TTFT mean ms"), Some(Verdict::Worse));
        assert_eq!(verdict("latency mean ms"), Some(Verdict::Worse));
        assert_eq!(verdict("ITL mean ms"), Some(Verdict::NoDifference));
        let text = comparison_text(&c);
        assert!(
            text.contains("worse") && text.contains("within chance"),
            "{text}"
        );
    }

    #[test]
    fn the_better_side_follows_the_direction_of_each_metric() {
        let time =
            |a, c| MetricComparison::new("t", Some(a), Some(c), None, Verdict::Unknown, true);
        let rate =
            |a, c| MetricComparison::new("r", Some(a), Some(c), None, Verdict::Unknown, false);
        assert_eq!(time(10.0, 8.0).better_side(), Some("candidate"));
        assert_eq!(time(8.0, 10.0).better_side(), Some("baseline"));
        assert_eq!(rate(10.0, 12.0).better_side(), Some("candidate"));
        assert_eq!(rate(12.0, 10.0).better_side(), Some("baseline"));
        assert_eq!(rate(12.0, 12.0).better_side(), None);
        let change = time(10.0, 8.0).change_percent.expect("a change");
        assert!((change + 20.0).abs() < 1e-9, "{change}");
        assert_eq!(time(0.0, 8.0).change_percent, None);
    }

    #[test]
    fn a_report_of_two_backends_splits_into_two_runs_to_compare() {
        let mut report = sample_report();
        let mut second = report.benchmarks[0].clone();
        report.benchmarks[0].backend = Some("a".into());
        report.benchmarks[1].backend = Some("a".into());
        second.backend = Some("b".into());
        report.benchmarks.push(second);
        let runs = split_by_backend("run.json", &report);
        let names: Vec<&str> = runs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["run.json a", "run.json b"]);
        assert_eq!(runs[0].1.benchmarks.len(), 2);
        assert_eq!(runs[1].1.benchmarks.len(), 1);
        assert!(
            runs.iter()
                .all(|(_, r)| r.benchmarks.iter().all(|b| b.backend.is_none()))
        );
        let c = compare(&runs[0].1, &runs[1].1);
        assert_eq!(c.benchmarks.len(), 1, "paired by name");
        assert_eq!(split_by_backend("plain.json", &sample_report()).len(), 1);
    }

    #[test]
    fn benchmarks_without_a_partner_are_named() {
        let baseline = sample_report();
        let mut candidate = sample_report();
        candidate.benchmarks[1].name = "concurrent@8".into();
        let c = compare(&baseline, &candidate);
        assert_eq!(c.benchmarks.len(), 1);
        assert_eq!(c.only_in_candidate, vec!["concurrent@8".to_owned()]);
        assert_eq!(
            c.only_in_baseline,
            vec!["<script>alert(1)</script>".to_owned()]
        );
    }
}
