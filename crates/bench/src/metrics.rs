//! Summary statistics over per-request values.

use serde::{Deserialize, Serialize};

use crate::analysis::stats::{Interval, mean_interval, quantile_interval};

/// The percentiles every distribution reports.
pub const PERCENTILES: [f64; 10] = [1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9];

/// Summary statistics of a set of values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Number of values.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// The 50th percentile.
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Population standard deviation.
    pub std: f64,
    /// `(p, value)` for each of [`PERCENTILES`].
    pub percentiles: Vec<(f64, f64)>,
    /// The [`CONFIDENCE`] interval of the mean (Student t); absent with
    /// fewer than 2 values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_interval: Option<Interval>,
    /// `(p, interval)`: the distribution-free [`CONFIDENCE`] interval of
    /// each of [`PERCENTILES`] that the sample is large enough to bound
    /// (order statistics; see [`quantile_interval`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percentile_intervals: Vec<(f64, Interval)>,
}

/// The confidence of the intervals every distribution reports.
pub const CONFIDENCE: f64 = 0.95;

/// The `p`-th percentile (0–100) of sorted values, interpolating linearly
/// between closest ranks (numpy's default method).
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    // rank is within [0, last]: the casts below cannot truncate or wrap.
    let rank = (p.clamp(0.0, 100.0) / 100.0) * last as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

impl Distribution {
    /// Statistics of `values` (NaNs are ignored). Empty input gives a
    /// distribution with count 0 and zeros elsewhere.
    // Casts: counts are far below 2^52.
    pub fn from_values(values: impl IntoIterator<Item = f64>) -> Self {
        let mut sorted: Vec<f64> = values.into_iter().filter(|v| !v.is_nan()).collect();
        if sorted.is_empty() {
            return Distribution::default();
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len() as f64;
        let mean = sorted.iter().sum::<f64>() / n;
        let var = sorted.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        let pct = |p| percentile(&sorted, p).unwrap_or(0.0);
        Distribution {
            count: sorted.len(),
            mean,
            median: pct(50.0),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            std: var.sqrt(),
            percentiles: PERCENTILES.iter().map(|&p| (p, pct(p))).collect(),
            mean_interval: mean_interval(&sorted, CONFIDENCE),
            percentile_intervals: PERCENTILES
                .iter()
                .filter_map(|&p| Some((p, quantile_interval(&sorted, p, CONFIDENCE)?)))
                .collect(),
        }
    }

    /// The interval of percentile `p`, if it is one of [`PERCENTILES`] and
    /// the sample bounds it.
    pub fn interval_at(&self, p: f64) -> Option<Interval> {
        self.percentile_intervals
            .iter()
            .find(|(q, _)| (q - p).abs() < 1e-9)
            .map(|&(_, i)| i)
    }

    /// The value at percentile `p`, if it is one of [`PERCENTILES`].
    pub fn at(&self, p: f64) -> Option<f64> {
        self.percentiles
            .iter()
            .find(|(q, _)| (q - p).abs() < 1e-9)
            .map(|&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        let d = Distribution::from_values(values);
        assert_eq!(d.count, 10);
        assert!((d.median - 5.5).abs() < 1e-12);
        assert!((d.at(90.0).expect("p90") - 9.1).abs() < 1e-12);
        assert!((d.at(1.0).expect("p1") - 1.09).abs() < 1e-12);
        assert!((d.mean - 5.5).abs() < 1e-12);
        assert!((d.std - 8.25f64.sqrt()).abs() < 1e-12);
        assert_eq!((d.min, d.max), (1.0, 10.0));
    }

    #[test]
    fn unsorted_samples_give_the_same_statistics_as_sorted_ones() {
        // 1..=10 out of order, with the extremes in the middle: taken as
        // they come, min, max and every percentile would be wrong.
        let values = [7.0, 3.0, 10.0, 1.0, 9.0, 2.0, 8.0, 5.0, 4.0, 6.0];
        let d = Distribution::from_values(values);
        assert_eq!((d.min, d.max), (1.0, 10.0));
        assert!((d.median - 5.5).abs() < 1e-12, "{}", d.median);
        for (p, expected) in [
            (1.0, 1.09),
            (10.0, 1.9),
            (25.0, 3.25),
            (50.0, 5.5),
            (75.0, 7.75),
            (90.0, 9.1),
            (99.0, 9.91),
        ] {
            let got = d.at(p).expect("a reported percentile");
            assert!(
                (got - expected).abs() < 1e-12,
                "p{p}: {got}, not {expected}"
            );
        }
        assert!((d.mean - 5.5).abs() < 1e-12);
        assert!((d.std - 8.25f64.sqrt()).abs() < 1e-12);
        let descending = Distribution::from_values(values.iter().rev().copied());
        assert_eq!(d, descending, "the order of the samples does not matter");
    }

    #[test]
    fn empty_input_has_count_zero() {
        let d = Distribution::from_values(Vec::<f64>::new());
        assert_eq!(d.count, 0);
        assert_eq!(d.at(50.0), None);
    }
}
