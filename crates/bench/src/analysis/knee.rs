//! The throughput knee: where output tokens/s against concurrency stops
//! rising and flattens.
//!
//! [`find_knee`] fits two least-squares segments, split at each measured
//! level in turn: a rising one through the levels up to the breakpoint and a
//! tail through the breakpoint and the levels above it. A split is a knee
//! only when all of these hold:
//!
//! - at least [`MIN_POINTS`] distinct levels were measured;
//! - the rising segment rises;
//! - the tail's slope is at most [`MAX_TAIL_SLOPE_RATIO`] of the rising
//!   slope;
//! - two segments cut the squared error of one line by at least
//!   [`MIN_FIT_GAIN`];
//! - the throughput at the breakpoint is at least [`MIN_THROUGHPUT_FRACTION`]
//!   of the peak.
//!
//! Of the splits that qualify, the one with the least squared error wins; the
//! knee is where its two lines cross. When none qualifies, the reason names
//! the first rule that the best-fitting split broke, and its diagnostics are
//! kept so a report can show how near it came.
//!
//! [`grid`] and [`refinement`] choose the levels to measure: an even grid
//! first, then extra levels around a knee once one is found.

use serde::{Deserialize, Serialize};

use super::stats::{LineFit, line_fit};

/// The fewest distinct concurrency levels a knee is looked for in.
pub const MIN_POINTS: usize = 5;
/// The largest tail slope, as a fraction of the rising slope.
pub const MAX_TAIL_SLOPE_RATIO: f64 = 0.25;
/// The smallest share of one line's squared error that two segments remove.
pub const MIN_FIT_GAIN: f64 = 0.5;
/// The smallest throughput at the breakpoint, as a fraction of the peak.
pub const MIN_THROUGHPUT_FRACTION: f64 = 0.85;
/// One line's squared error below this share of the throughput range squared
/// makes the curve a line.
const LINEAR_SSE: f64 = 1e-12;

/// The outcome of [`find_knee`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KneeFit {
    /// Whether a knee was found.
    pub found: bool,
    /// Why, or why not, as a sentence.
    pub reason: String,
    /// Where the two segments cross, in concurrency units; only when found.
    pub knee: Option<f64>,
    /// The first measured concurrency at or above the knee; only when found.
    pub saturation_concurrency: Option<f64>,
    /// The measured concurrency the segments were split at. When no knee was
    /// found, this and the fields below describe the best-fitting split that
    /// was rejected (absent when no split could be tried).
    pub breakpoint: Option<f64>,
    /// The rising segment's slope, in tokens/s per stream.
    pub rising_slope: Option<f64>,
    /// The tail's slope, in tokens/s per stream.
    pub tail_slope: Option<f64>,
    /// The tail slope over the rising slope.
    pub slope_ratio: Option<f64>,
    /// 1 - (sse two segments / sse one line).
    pub fit_gain: Option<f64>,
    /// The throughput at the breakpoint over the peak throughput.
    pub throughput_fraction: Option<f64>,
    /// (concurrency, tokens/s) as fitted: sorted, duplicates averaged.
    pub points: Vec<(f64, f64)>,
}

impl KneeFit {
    fn none(reason: String, points: Vec<(f64, f64)>) -> Self {
        Self {
            found: false,
            reason,
            knee: None,
            saturation_concurrency: None,
            breakpoint: None,
            rising_slope: None,
            tail_slope: None,
            slope_ratio: None,
            fit_gain: None,
            throughput_fraction: None,
            points,
        }
    }
}

/// One split of the curve at a measured level.
struct Split {
    index: usize,
    rising: LineFit,
    tail: LineFit,
    sse: f64,
    slope_ratio: f64,
    fit_gain: f64,
    throughput_fraction: f64,
}

impl Split {
    /// The first acceptance rule this split breaks, as a sentence.
    fn rejection(&self) -> Option<String> {
        if self.rising.slope <= 0.0 {
            Some("Throughput does not rise before any breakpoint".into())
        } else if self.slope_ratio > MAX_TAIL_SLOPE_RATIO {
            Some(format!(
                "The tail still rises at {:.0} % of the rising slope (at most {:.0} % is a knee)",
                self.slope_ratio * 100.0,
                MAX_TAIL_SLOPE_RATIO * 100.0
            ))
        } else if self.fit_gain < MIN_FIT_GAIN {
            Some(format!(
                "Two segments fit only {:.0} % better than one line (at least {:.0} % is a knee)",
                self.fit_gain * 100.0,
                MIN_FIT_GAIN * 100.0
            ))
        } else if self.throughput_fraction < MIN_THROUGHPUT_FRACTION {
            Some(format!(
                "Throughput at the breakpoint is only {:.0} % of the peak (at least {:.0} % is a knee)",
                self.throughput_fraction * 100.0,
                MIN_THROUGHPUT_FRACTION * 100.0
            ))
        } else {
            None
        }
    }
}

/// Sorts the points by concurrency and averages duplicates; an error names
/// the first point that is not a positive finite concurrency with a finite,
/// non-negative throughput.
// Casts: duplicate counts are small.
fn prepare(points: &[(f64, f64)]) -> Result<Vec<(f64, f64)>, String> {
    if let Some((c, t)) = points
        .iter()
        .find(|(c, t)| !(c.is_finite() && *c > 0.0 && t.is_finite() && *t >= 0.0))
    {
        return Err(format!(
            "The point ({c}, {t}) is not a positive concurrency with a non-negative throughput"
        ));
    }
    let mut sorted = points.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64, usize)> = Vec::new();
    for (c, t) in sorted {
        match merged.last_mut() {
            Some(last) if last.0 == c => {
                last.1 += t;
                last.2 += 1;
            }
            _ => merged.push((c, t, 1)),
        }
    }
    Ok(merged
        .into_iter()
        .map(|(c, sum, n)| (c, sum / n as f64))
        .collect())
}

/// Finds the throughput knee in (concurrency, output tokens/s) points.
pub fn find_knee(points: &[(f64, f64)]) -> KneeFit {
    let points = match prepare(points) {
        Ok(points) => points,
        Err(reason) => return KneeFit::none(reason, Vec::new()),
    };
    let n = points.len();
    if n < MIN_POINTS {
        return KneeFit::none(
            format!("A knee needs at least {MIN_POINTS} distinct concurrency levels; found {n}"),
            points,
        );
    }
    let (xs, ys): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    let peak = ys.iter().copied().fold(f64::MIN, f64::max);
    let low = ys.iter().copied().fold(f64::MAX, f64::min);
    let Some(one_line) = line_fit(&xs, &ys).filter(|_| peak > low) else {
        return KneeFit::none("Throughput does not vary with concurrency".into(), points);
    };
    if one_line.sse <= LINEAR_SSE * (peak - low).powi(2) {
        return KneeFit::none(
            "The throughput curve is approximately linear".into(),
            points,
        );
    }
    // The rising segment has at least three levels, and so does the tail
    // except with only five levels, where it may have two.
    let last = if n == MIN_POINTS { n - 2 } else { n - 3 };
    let splits: Vec<Split> = (2..=last)
        .filter_map(|index| {
            let rising = line_fit(&xs[..=index], &ys[..=index])?;
            let tail = line_fit(&xs[index..], &ys[index..])?;
            let sse = rising.sse + tail.sse;
            Some(Split {
                index,
                rising,
                tail,
                sse,
                slope_ratio: tail.slope / rising.slope,
                fit_gain: 1.0 - sse / one_line.sse,
                throughput_fraction: ys[index] / peak,
            })
        })
        .collect();
    let least_sse = |a: &&Split, b: &&Split| a.sse.total_cmp(&b.sse);
    let accepted = splits
        .iter()
        .filter(|s| s.rejection().is_none())
        .min_by(least_sse);
    let Some(best) = accepted.or_else(|| splits.iter().min_by(least_sse)) else {
        return KneeFit::none("No breakpoint could be fitted".into(), points);
    };
    let mut fit = KneeFit {
        breakpoint: Some(xs[best.index]),
        rising_slope: Some(best.rising.slope),
        tail_slope: Some(best.tail.slope),
        slope_ratio: Some(best.slope_ratio),
        fit_gain: Some(best.fit_gain),
        throughput_fraction: Some(best.throughput_fraction),
        ..KneeFit::none(String::new(), Vec::new())
    };
    if let Some(reason) = best.rejection() {
        fit.reason = reason;
        fit.points = points;
        return fit;
    }
    // Where the lines cross, if that lies between the breakpoint's measured
    // neighbours; the breakpoint itself otherwise.
    let (before, after) = (xs[best.index - 1], xs[best.index + 1]);
    let crossing =
        (best.tail.intercept - best.rising.intercept) / (best.rising.slope - best.tail.slope);
    let knee = if crossing.is_finite() && (before..=after).contains(&crossing) {
        crossing
    } else {
        xs[best.index]
    };
    let slack = (xs[n - 1] - xs[0]) * 1e-9;
    fit.found = true;
    fit.reason = format!(
        "Throughput rises at {:.1} tokens/s per stream, then flattens to {:.1} from about {knee:.1} streams",
        best.rising.slope, best.tail.slope
    );
    fit.knee = Some(knee);
    fit.saturation_concurrency = xs.iter().copied().find(|&x| x >= knee - slack);
    fit.points = points;
    fit
}

/// Evenly spaced distinct integer levels from min to max inclusive (count >=
/// 2), for the initial grid.
///
/// Levels are rounded to the nearest integer and duplicates dropped, so a
/// range narrower than `count` gives every level in it. `min` is taken as at
/// least 1, a count below 2 as 2, and `max` below `min` as `min`.
pub fn grid(min: usize, max: usize, count: usize) -> Vec<usize> {
    let min = min.max(1);
    let max = max.max(min);
    let steps = count.max(2) - 1;
    let span = max - min;
    let mut levels: Vec<usize> = (0..=steps)
        .map(|k| min + (k * span + steps / 2) / steps)
        .collect();
    levels.dedup();
    levels
}

/// Extra levels around a found knee not yet measured: up to `each_side` on
/// each side of the saturation concurrency, spacing chosen from the gap to
/// the neighbouring measured points and at most `max_step`; empty when no
/// knee.
///
/// The levels on each side split the gap to the neighbouring measured level
/// evenly (at least 1 apart, at most `max_step`) and stay strictly inside it,
/// since the knee lies between the breakpoint's neighbours. Above the highest
/// measured level, or below the lowest, the spacing of the other side is
/// used (levels stay at least 1). Sorted, distinct, none in `measured`.
// Casts: concurrency levels are small positive integers.
pub fn refinement(
    fit: &KneeFit,
    measured: &[usize],
    each_side: usize,
    max_step: usize,
) -> Vec<usize> {
    let Some(centre) = fit.saturation_concurrency.filter(|_| fit.found) else {
        return Vec::new();
    };
    let centre = centre.round().max(1.0) as usize;
    let below = measured.iter().copied().filter(|&m| m < centre).max();
    let above = measured.iter().copied().filter(|&m| m > centre).min();
    let step = |gap: Option<usize>| {
        gap.map(|gap| (gap as f64 / (each_side + 1) as f64).clamp(1.0, max_step.max(1) as f64))
    };
    let step_below = step(below.map(|b| centre - b));
    let step_above = step(above.map(|a| a - centre));
    let mut levels = Vec::new();
    for k in 1..=each_side {
        let k = k as f64;
        if let Some(step) = step_below.or(step_above) {
            let level = (centre as f64 - k * step).round();
            if level >= 1.0 && below.is_none_or(|b| level > b as f64) {
                levels.push(level as usize);
            }
        }
        if let Some(step) = step_above.or(step_below) {
            let level = (centre as f64 + k * step).round();
            if above.is_none_or(|a| level < a as f64) {
                levels.push(level as usize);
            }
        }
    }
    levels.retain(|l| !measured.contains(l) && *l != centre);
    levels.sort_unstable();
    levels.dedup();
    levels
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::rng::seeded;
    use rand_distr::{Distribution, Normal};

    const GRID: [usize; 10] = [1, 2, 4, 8, 12, 16, 20, 24, 32, 48];

    fn curve(levels: &[usize], mut f: impl FnMut(f64) -> f64) -> Vec<(f64, f64)> {
        levels.iter().map(|&c| (c as f64, f(c as f64))).collect()
    }

    fn flat_after_16(c: f64) -> f64 {
        100.0 * c.min(16.0)
    }

    #[test]
    fn a_curve_that_flattens_at_sixteen_streams_has_its_knee_there() {
        let fit = find_knee(&curve(&GRID, flat_after_16));
        assert!(fit.found, "{}", fit.reason);
        let knee = fit.knee.expect("knee");
        assert!((knee - 16.0).abs() <= 0.5, "{knee}");
        assert_eq!(fit.saturation_concurrency, Some(16.0));
        assert_eq!(fit.breakpoint, Some(16.0));
        assert!((fit.rising_slope.expect("slope") - 100.0).abs() < 1e-9);
        assert!(fit.tail_slope.expect("slope").abs() < 1e-9);
        assert_eq!(fit.points.len(), GRID.len());
    }

    #[test]
    fn a_noisy_curve_that_flattens_at_sixteen_streams_has_its_knee_near_there() {
        let noise = Normal::new(0.0, 0.02).expect("sd");
        for seed in 0..20 {
            let mut rng = seeded(seed, 7);
            let points = curve(&GRID, |c| flat_after_16(c) * (1.0 + noise.sample(&mut rng)));
            let fit = find_knee(&points);
            assert!(fit.found, "seed {seed}: {}", fit.reason);
            let knee = fit.knee.expect("knee");
            assert!((knee - 16.0).abs() <= 0.5, "seed {seed}: {knee}");
        }
    }

    #[test]
    fn repeated_levels_are_averaged_and_sorted() {
        let mut points = curve(&GRID, flat_after_16);
        points.reverse();
        points.push((16.0, 1500.0));
        points.push((16.0, 1700.0));
        let fit = find_knee(&points);
        assert_eq!(fit.points, curve(&GRID, flat_after_16));
    }

    #[test]
    fn a_straight_line_has_no_knee() {
        let fit = find_knee(&curve(&GRID, |c| 100.0 * c));
        assert!(!fit.found);
        assert!(
            fit.reason.contains("approximately linear"),
            "{}",
            fit.reason
        );
        assert_eq!((fit.knee, fit.breakpoint), (None, None));
    }

    #[test]
    fn fewer_than_five_levels_have_no_knee() {
        let fit = find_knee(&curve(&[1, 2, 4, 8], flat_after_16));
        assert!(!fit.found);
        assert!(fit.reason.contains("at least 5"), "{}", fit.reason);
    }

    #[test]
    fn a_tail_that_still_rises_steeply_is_no_knee() {
        let fit = find_knee(&curve(&GRID, |c| {
            100.0 * c.min(16.0) + 50.0 * (c - 16.0).max(0.0)
        }));
        assert!(!fit.found);
        assert!(fit.reason.contains("tail still rises"), "{}", fit.reason);
        assert_eq!(fit.knee, None);
        assert!(fit.slope_ratio.expect("diagnostics kept") > MAX_TAIL_SLOPE_RATIO);
    }

    #[test]
    fn a_breakpoint_far_below_the_peak_is_no_knee() {
        // Rises steeply to 8 streams, then keeps climbing slowly to a peak
        // far above the breakpoint's throughput.
        let fit = find_knee(&curve(&GRID, |c| {
            100.0 * c.min(8.0) + 20.0 * (c - 8.0).max(0.0)
        }));
        assert!(!fit.found);
        assert!(fit.reason.contains("of the peak"), "{}", fit.reason);
    }

    #[test]
    fn invalid_points_are_named() {
        let fit = find_knee(&[(1.0, 10.0), (0.0, 5.0)]);
        assert!(!fit.found);
        assert!(fit.reason.contains("(0, 5)"), "{}", fit.reason);
    }

    #[test]
    fn the_grid_is_even_distinct_and_inclusive() {
        assert_eq!(grid(1, 64, 8), vec![1, 10, 19, 28, 37, 46, 55, 64]);
        assert_eq!(grid(4, 8, 10), vec![4, 5, 6, 7, 8]);
        assert_eq!(grid(1, 1, 5), vec![1]);
        assert_eq!(grid(0, 3, 0), vec![1, 3]);
    }

    #[test]
    fn refinement_adds_unmeasured_levels_around_the_knee_only() {
        let fit = find_knee(&curve(&GRID, flat_after_16));
        assert_eq!(refinement(&fit, &GRID, 5, 5), vec![13, 14, 15, 17, 18, 19]);
        assert_eq!(refinement(&fit, &GRID, 1, 5), vec![14, 18]);
        let more = [1, 2, 4, 8, 12, 14, 16, 20, 24, 32, 48];
        assert_eq!(refinement(&fit, &more, 2, 5), vec![15, 17, 19]);
    }

    #[test]
    fn refinement_steps_are_capped_and_need_a_knee() {
        let coarse = [1, 2, 4, 8, 16, 32, 64, 96, 128];
        let fit = find_knee(&curve(&coarse, |c| 100.0 * c.min(32.0)));
        assert_eq!(fit.saturation_concurrency, Some(32.0));
        assert_eq!(refinement(&fit, &coarse, 2, 4), vec![24, 28, 36, 40]);
        let line = find_knee(&curve(&GRID, |c| 100.0 * c));
        assert!(refinement(&line, &GRID, 5, 5).is_empty());
    }
}
