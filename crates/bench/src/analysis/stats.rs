//! Interval estimators: a proportion (Wilson), a mean (Student t), a
//! percentile (order statistics) and the slope of a least-squares line.
//!
//! The quantiles of the normal, Student t and binomial distributions come
//! from `statrs`. Every function takes a two-sided `confidence` in (0, 1) and
//! answers `None` rather than an interval its input cannot support.

use serde::{Deserialize, Serialize};
use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF, Normal, StudentsT};

/// A two-sided confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The lower bound.
    pub lower: f64,
    /// The upper bound.
    pub upper: f64,
}

impl Interval {
    /// Whether `value` lies in the interval, bounds included.
    pub fn contains(&self, value: f64) -> bool {
        self.lower <= value && value <= self.upper
    }
}

fn valid_confidence(confidence: f64) -> bool {
    confidence > 0.0 && confidence < 1.0
}

/// The standard normal quantile that leaves `(1 - confidence) / 2` above it.
fn z(confidence: f64) -> f64 {
    Normal::standard().inverse_cdf(0.5 + confidence / 2.0)
}

/// Degrees of freedom above which the normal quantile stands in for the t
/// one: statrs' inversion drifts beyond about 10^5 (and stops converging
/// near 10^9), while here t and normal differ by under 10^-4 relative for
/// confidences up to 0.999.
const NORMAL_DOF: f64 = 3e4;

/// The Student t quantile with `dof` degrees of freedom that leaves
/// `(1 - confidence) / 2` above it; `None` when `dof` is not positive.
pub(crate) fn t_critical(confidence: f64, dof: f64) -> Option<f64> {
    if dof > NORMAL_DOF {
        return Some(z(confidence));
    }
    let t = StudentsT::new(0.0, 1.0, dof).ok()?;
    Some(t.inverse_cdf(0.5 + confidence / 2.0))
}

/// Wilson score interval of a proportion; None when trials == 0 or
/// confidence not in (0,1).
///
/// Also `None` when `successes > trials`. The bounds lie in [0, 1] and are
/// exactly 0 for no successes and exactly 1 when every trial succeeded, so
/// that a perfect record is never reported as just below perfect.
// Casts: counts far below 2^52 convert exactly.
pub fn wilson(successes: u64, trials: u64, confidence: f64) -> Option<Interval> {
    if trials == 0 || successes > trials || !valid_confidence(confidence) {
        return None;
    }
    let n = trials as f64;
    let p = successes as f64 / n;
    let z = z(confidence);
    let z2n = z * z / n;
    let centre = (p + z2n / 2.0) / (1.0 + z2n);
    let half = z / (1.0 + z2n) * (p * (1.0 - p) / n + z2n / (4.0 * n)).sqrt();
    Some(Interval {
        lower: if successes == 0 {
            0.0
        } else {
            (centre - half).max(0.0)
        },
        upper: if successes == trials {
            1.0
        } else {
            (centre + half).min(1.0)
        },
    })
}

/// Two-sided Student-t interval of the mean; None with fewer than 2 values.
///
/// Also `None` when `confidence` is not in (0, 1) or a value is not finite.
/// The values are taken as independent draws: the interval says how well
/// this sample located its own mean, not how far it moves between runs.
// Casts: sample sizes far below 2^52.
pub fn mean_interval(values: &[f64], confidence: f64) -> Option<Interval> {
    if values.len() < 2 || !valid_confidence(confidence) || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let half = t_critical(confidence, n - 1.0)? * (variance / n).sqrt();
    Some(Interval {
        lower: mean - half,
        upper: mean + half,
    })
}

/// Distribution-free interval of the p-th percentile (p in 0..=100) from
/// sorted values, by order statistics (binomial ranks); None when the sample
/// is too small for the confidence.
///
/// `sorted` must be in ascending order; both bounds are observations. The
/// number of observations below the true percentile is binomial(n, p/100),
/// so the lower bound is the highest rank that count falls short of with
/// probability at most (1 - confidence)/2, and the upper bound likewise from
/// above; the coverage is at least `confidence` whatever the distribution.
///
/// A sample is too small when even its extreme observations do not bracket
/// the percentile at that confidence: at 95 % a median needs 6 observations,
/// p90 needs 35, p95 72, p99 368 and p99.9 3688 (about
/// `ln((1 - confidence) / 2) / ln(p / 100)`). The 0th and 100th percentiles,
/// the minimum and maximum, never have such an interval. Also `None` for `p`
/// outside 0..=100 or `confidence` outside (0, 1).
pub fn quantile_interval(sorted: &[f64], p: f64, confidence: f64) -> Option<Interval> {
    let q = p / 100.0;
    if !(q > 0.0 && q < 1.0 && valid_confidence(confidence)) || sorted.is_empty() {
        return None;
    }
    debug_assert!(sorted.is_sorted(), "quantile_interval needs sorted values");
    let n = sorted.len() as u64;
    let below = Binomial::new(q, n).ok()?;
    let tail = (1.0 - confidence) / 2.0;
    // The CDF rises with k: the first rank whose CDF passes `tail` is one
    // past the lower bound; the first that reaches 1 - tail is the upper.
    let lower = first_rank(n, |k| below.cdf(k) > tail).checked_sub(1)?;
    let upper = first_rank(n, |k| below.cdf(k) >= 1.0 - tail);
    if upper >= n {
        return None;
    }
    let at = |rank: u64| {
        usize::try_from(rank)
            .ok()
            .and_then(|i| sorted.get(i).copied())
    };
    Some(Interval {
        lower: at(lower)?,
        upper: at(upper)?,
    })
}

/// The smallest rank in 0..n where the monotone `holds` is true, or n.
fn first_rank(n: u64, holds: impl Fn(u64) -> bool) -> u64 {
    let (mut low, mut high) = (0, n);
    while low < high {
        let middle = low + (high - low) / 2;
        if holds(middle) {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    low
}

/// An ordinary least-squares line `y = intercept + slope * x`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LineFit {
    /// The value of the line at x = 0.
    pub intercept: f64,
    /// The change in y per unit of x.
    pub slope: f64,
    /// The sum of squared residuals.
    pub sse: f64,
    /// The standard error of the slope; 0 when two points fix the line.
    pub slope_se: f64,
    /// The number of points fitted.
    pub n: usize,
}

impl LineFit {
    /// The line's value at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }
}

/// Ordinary least squares; None with fewer than 2 points or no spread in x.
/// slope_se is NaN/inf-free: 0 when n == 2.
///
/// Also `None` when the slices differ in length or hold a value that is not
/// finite.
// Casts: point counts far below 2^52.
pub fn line_fit(xs: &[f64], ys: &[f64]) -> Option<LineFit> {
    let n = xs.len();
    if n < 2 || ys.len() != n || xs.iter().chain(ys).any(|v| !v.is_finite()) {
        return None;
    }
    let count = n as f64;
    let x_mean = xs.iter().sum::<f64>() / count;
    let y_mean = ys.iter().sum::<f64>() / count;
    let (mut sxx, mut sxy) = (0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxx += (x - x_mean) * (x - x_mean);
        sxy += (x - x_mean) * (y - y_mean);
    }
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = y_mean - slope * x_mean;
    let sse: f64 = xs
        .iter()
        .zip(ys)
        .map(|(x, y)| (y - intercept - slope * x).powi(2))
        .sum();
    let slope_se = if n > 2 {
        (sse / (count - 2.0) / sxx).sqrt()
    } else {
        0.0
    };
    Some(LineFit {
        intercept,
        slope,
        sse,
        slope_se,
        n,
    })
}

/// Two-sided interval of the slope at `confidence` (t with n-2 dof); None
/// when n < 3.
///
/// Also `None` when `confidence` is not in (0, 1).
// Casts: point counts far below 2^52.
pub fn slope_interval(fit: &LineFit, confidence: f64) -> Option<Interval> {
    if fit.n < 3 || !valid_confidence(confidence) {
        return None;
    }
    let half = t_critical(confidence, (fit.n - 2) as f64)? * fit.slope_se;
    Some(Interval {
        lower: fit.slope - half,
        upper: fit.slope + half,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::rng::seeded;
    use rand_distr::{Distribution, Exp};

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    #[test]
    fn wilson_matches_the_published_interval_for_eight_of_ten() {
        let i = wilson(8, 10, 0.95).expect("interval");
        assert!(
            close(i.lower, 0.4902, 1e-4) && close(i.upper, 0.9433, 1e-4),
            "{i:?}"
        );
    }

    #[test]
    fn wilson_is_exactly_zero_or_one_at_the_edges() {
        let none = wilson(0, 50, 0.95).expect("interval");
        assert_eq!(none.lower, 0.0);
        assert!(close(none.upper, 0.0713, 1e-4), "{none:?}");
        let all = wilson(50, 50, 0.95).expect("interval");
        assert_eq!(all.upper, 1.0);
        assert!(close(all.lower, 0.9287, 1e-4), "{all:?}");
    }

    #[test]
    fn wilson_refuses_what_it_cannot_bound() {
        assert_eq!(wilson(0, 0, 0.95), None);
        assert_eq!(wilson(3, 2, 0.95), None);
        assert_eq!(wilson(1, 2, 1.0), None);
        assert_eq!(wilson(1, 2, 0.0), None);
        assert_eq!(wilson(1, 2, f64::NAN), None);
    }

    #[test]
    fn the_mean_interval_matches_a_hand_computation() {
        // Mean 5, sample sd sqrt(2.5), t(0.975, 4) = 2.776445.
        let i = mean_interval(&[3.0, 4.0, 5.0, 6.0, 7.0], 0.95).expect("interval");
        let half = 2.776_445 * (2.5_f64 / 5.0).sqrt();
        assert!(
            close(i.lower, 5.0 - half, 1e-5) && close(i.upper, 5.0 + half, 1e-5),
            "{i:?}"
        );
        assert_eq!(mean_interval(&[1.0], 0.95), None);
        assert_eq!(mean_interval(&[1.0, f64::NAN], 0.95), None);
    }

    #[test]
    fn the_t_quantile_matches_tables_and_meets_the_normal_one_for_huge_samples() {
        let t = |dof| t_critical(0.95, dof).expect("quantile");
        assert!(close(t(1.0), 12.706_205, 1e-5) && close(t(10.0), 2.228_139, 1e-5));
        assert!(close(t(10_000.0), 1.960_201, 1e-5));
        assert!(close(t(1e9), 1.959_964, 1e-5) && close(t(1e7), 1.959_964, 1e-5));
        assert_eq!(t_critical(0.95, 0.0), None);
    }

    #[test]
    fn the_quantile_interval_covers_the_true_median_about_as_often_as_promised() {
        let n = 101;
        let exp = Exp::new(1.0).expect("rate");
        let trials: u32 = 4000;
        let mut covered = 0;
        for seed in 0..u64::from(trials) {
            let mut rng = seeded(seed, 1);
            let mut sample: Vec<f64> = (0..n).map(|_| exp.sample(&mut rng)).collect();
            sample.sort_by(f64::total_cmp);
            let i = quantile_interval(&sample, 50.0, 0.95).expect("101 values bound a median");
            covered += u32::from(i.contains(std::f64::consts::LN_2));
        }
        // The ranks chosen (41st and 61st of 101) cover the median with
        // probability 0.954; three standard errors of 4000 trials either side.
        let rate = f64::from(covered) / f64::from(trials);
        assert!((0.944..=0.964).contains(&rate), "coverage {rate}");
    }

    #[test]
    fn the_quantile_interval_needs_enough_values_for_its_confidence() {
        let values: Vec<f64> = (0..100).map(f64::from).collect();
        assert_eq!(quantile_interval(&values[..5], 50.0, 0.95), None);
        assert!(quantile_interval(&values[..6], 50.0, 0.95).is_some());
        assert_eq!(quantile_interval(&values[..71], 95.0, 0.95), None);
        let p95 = quantile_interval(&values[..72], 95.0, 0.95).expect("72 values bound p95");
        assert_eq!(p95.upper, 71.0);
        assert_eq!(quantile_interval(&values, 0.0, 0.95), None);
        assert_eq!(quantile_interval(&values, 100.0, 0.95), None);
        assert_eq!(quantile_interval(&values, 101.0, 0.95), None);
    }

    #[test]
    fn the_quantile_interval_brackets_the_sample_median_symmetrically() {
        let values: Vec<f64> = (0..101).map(f64::from).collect();
        let i = quantile_interval(&values, 50.0, 0.95).expect("interval");
        assert_eq!(i.lower + i.upper, 100.0, "{i:?}");
        assert!(i.lower < 50.0 && i.upper > 50.0);
    }

    #[test]
    fn an_exact_line_has_no_slope_error() {
        let xs = [1.0, 2.0, 3.0, 4.0, 5.0];
        let ys = xs.map(|x| 2.0 * x + 1.0);
        let fit = line_fit(&xs, &ys).expect("fit");
        assert_eq!(
            (fit.intercept, fit.slope, fit.sse, fit.slope_se),
            (1.0, 2.0, 0.0, 0.0)
        );
        let i = slope_interval(&fit, 0.95).expect("interval");
        assert_eq!((i.lower, i.upper), (2.0, 2.0));
    }

    #[test]
    fn two_points_fix_a_line_without_an_interval() {
        let fit = line_fit(&[0.0, 2.0], &[1.0, 2.0]).expect("fit");
        assert_eq!((fit.slope, fit.slope_se, fit.n), (0.5, 0.0, 2));
        assert_eq!(slope_interval(&fit, 0.95), None);
        assert_eq!(line_fit(&[1.0], &[1.0]), None);
        assert_eq!(line_fit(&[3.0, 3.0, 3.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(line_fit(&[1.0, 2.0], &[1.0]), None);
    }

    #[test]
    fn the_slope_interval_matches_a_hand_computation() {
        // x 1..=4, y 1,3,2,4: slope 0.8, sse 1.8, sxx 5, se sqrt(0.18),
        // t(0.975, 2) = 4.302653.
        let fit = line_fit(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]).expect("fit");
        assert!(close(fit.slope, 0.8, 1e-12) && close(fit.sse, 1.8, 1e-12));
        assert!(close(fit.slope_se, 0.18_f64.sqrt(), 1e-12));
        let i = slope_interval(&fit, 0.95).expect("interval");
        let half = 4.302_653 * 0.18_f64.sqrt();
        assert!(
            close(i.lower, 0.8 - half, 1e-5) && close(i.upper, 0.8 + half, 1e-5),
            "{i:?}"
        );
    }
}
