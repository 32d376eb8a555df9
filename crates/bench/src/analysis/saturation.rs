//! Over-saturation: the system no longer keeps up and only queues.
//!
//! [`SaturationDetector`] watches two series over a sliding window: the
//! number of requests in flight when each request is sent, and the time to
//! first token. An over-saturated system shows both growing without bound.
//!
//! Requests that are close in time share the same queue, so their samples
//! are far from independent; a regression over every request would claim a
//! precision it does not have. Each series is therefore averaged into time
//! bins of `bin_s` seconds (the in-flight count by send time, TTFT by the
//! time the first token came, so that a bin is complete once its time has
//! passed), and the bin means are regressed on the bin centres: the test's
//! sample size is the number of bins. Neighbouring bins still share a
//! queue, so the sample is shrunk further by the lag-1 autocorrelation `r`
//! of the residuals, to `bins × (1 - r) / (1 + r)` effective bins (`r`
//! taken in [0, 0.99], at least 3), and the slope's standard error and the
//! t quantile's degrees of freedom follow from that.
//!
//! [`SaturationDetector::check`] fires when, no earlier than
//! `min_duration_s` into the benchmark, over the bins of the last
//! `window_s` seconds both series have at least `min_bins` bins and for
//! both:
//!
//! 1. the lower bound of the two-sided t interval of the slope at
//!    `confidence` is above 0: the growth is significant;
//! 2. the same holds for the earlier half of the bins and for the later half
//!    on their own: the growth is sustained, not one burst that the queue
//!    will drain;
//! 3. the fitted growth across the bins (slope × span of the bin centres) is
//!    material: at least [`MIN_RELATIVE_GROWTH`] of the mean of the bin
//!    means, and for the in-flight count also at least
//!    [`MIN_IN_FLIGHT_GROWTH`] request.
//!
//! Each check judges the window afresh. The rule errs towards not firing,
//! since a false alarm cuts a healthy run short. In a simulated queue (8
//! servers, Poisson arrivals, exponential service, checked every second for
//! 120 s, 200 runs each), a stationary load at 70 % of capacity never fired
//! and one at 90 % fired in 3 runs, while overloads at 120 % and 150 % were
//! caught in about 2 runs of 3 and 9 of 10; a mild overload (110 %) is
//! caught in about 1 run of 3 within that time, because a queue's random
//! walk hides a small drift for a while. Without rule 2 and the
//! autocorrelation allowance, 70 % load fired in most runs.
//!
//! A concurrent (closed-loop) profile holds its in-flight count fixed, so
//! the detector is meant for rate-driven profiles, where an overloaded
//! system's queue grows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::stats::{Interval, line_fit, t_critical};

/// The least fitted growth over the window, as a fraction of the window's
/// mean, that counts as material.
pub const MIN_RELATIVE_GROWTH: f64 = 0.1;
/// The least fitted growth of the in-flight count over the window, in
/// requests, that counts as material.
pub const MIN_IN_FLIGHT_GROWTH: f64 = 1.0;

/// How the detector judges saturation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SaturationOptions {
    /// No verdict before this many seconds into the benchmark.
    pub min_duration_s: f64,
    /// The sliding window the slopes are fitted over, in seconds.
    pub window_s: f64,
    /// The width of a time bin, in seconds; must be positive.
    pub bin_s: f64,
    /// The fewest non-empty bins a series needs to be tested (at least 6,
    /// so that each half has 3).
    pub min_bins: usize,
    /// The two-sided confidence of the slope intervals, in (0, 1).
    pub confidence: f64,
}

impl Default for SaturationOptions {
    fn default() -> Self {
        Self {
            min_duration_s: 30.0,
            window_s: 60.0,
            bin_s: 1.0,
            min_bins: 10,
            confidence: 0.95,
        }
    }
}

/// The growth test of one series over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlopeTest {
    /// The fitted slope of the bin means, in the series' unit per second.
    pub slope: f64,
    /// The interval of the slope at the detector's confidence.
    pub interval: Interval,
    /// The number of bins fitted: the test's sample size.
    pub bins: usize,
    /// The number of independent bins they count as, given the
    /// autocorrelation of the residuals.
    pub effective_bins: f64,
    /// The fitted growth across the bins: slope × span of their centres.
    pub growth: f64,
    /// The mean of the bin means.
    pub mean: f64,
    /// Whether the slope is also significantly positive in the earlier half
    /// of the bins and in the later half on their own.
    pub sustained: bool,
}

impl SlopeTest {
    fn grows(&self, least: f64) -> bool {
        self.interval.lower > 0.0 && self.growth >= least && self.sustained
    }
}

/// Why the detector judged the run over-saturated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaturationVerdict {
    /// When, in seconds into the benchmark.
    pub at_s: f64,
    /// The test of the in-flight count, in requests.
    pub in_flight: SlopeTest,
    /// The test of the time to first token, in seconds.
    pub ttft: SlopeTest,
    /// The verdict as a sentence.
    pub reason: String,
}

/// One series of samples, summed per time bin.
#[derive(Debug, Default)]
struct Series {
    /// Bin index -> (sum, count).
    bins: BTreeMap<i64, (f64, u32)>,
}

impl Series {
    fn add(&mut self, bin: i64, value: f64) {
        let entry = self.bins.entry(bin).or_default();
        entry.0 += value;
        entry.1 += 1;
    }

    /// Drops every bin before `first`.
    fn keep_from(&mut self, first: i64) {
        while let Some(oldest) = self.bins.first_entry()
            && *oldest.key() < first
        {
            oldest.remove();
        }
    }

    /// The bin centres and bin means up to bin `last`.
    // Casts: bin indices far below 2^52.
    fn means(&self, last: i64, bin_s: f64) -> (Vec<f64>, Vec<f64>) {
        self.bins
            .range(..=last)
            .map(|(&bin, &(sum, count))| ((bin as f64 + 0.5) * bin_s, sum / f64::from(count)))
            .unzip()
    }

    /// The growth test of the bins up to bin `last`.
    fn test(&self, last: i64, options: &SaturationOptions) -> Option<SlopeTest> {
        let (xs, ys) = self.means(last, options.bin_s);
        if xs.len() < options.min_bins.max(6) {
            return None;
        }
        let mut test = slope_test(&xs, &ys, options.confidence)?;
        let rises = |from: usize, to: usize| {
            slope_test(&xs[from..to], &ys[from..to], options.confidence)
                .is_some_and(|t| t.interval.lower > 0.0)
        };
        let n = xs.len();
        test.sustained = rises(0, n.div_ceil(2)) && rises(n / 2, n);
        Some(test)
    }
}

/// Regresses `ys` on `xs`, allowing for the lag-1 autocorrelation of the
/// residuals: neighbouring bins still share a queue, so n bins count as
/// n (1 - r) / (1 + r) independent ones (r clamped to [0, 0.99], at least 3).
// Casts: bin counts far below 2^52.
fn slope_test(xs: &[f64], ys: &[f64], confidence: f64) -> Option<SlopeTest> {
    let fit = line_fit(xs, ys)?;
    let residuals: Vec<f64> = xs.iter().zip(ys).map(|(x, y)| y - fit.at(*x)).collect();
    let lagged: f64 = residuals.windows(2).map(|w| w[0] * w[1]).sum();
    let r = if fit.sse > 0.0 {
        (lagged / fit.sse).clamp(0.0, 0.99)
    } else {
        0.0
    };
    let n = xs.len() as f64;
    let effective = (n * (1.0 - r) / (1.0 + r)).max(3.0);
    let se = fit.slope_se * ((n - 2.0) / (effective - 2.0)).sqrt();
    let half = t_critical(confidence, effective - 2.0)? * se;
    Some(SlopeTest {
        slope: fit.slope,
        interval: Interval {
            lower: fit.slope - half,
            upper: fit.slope + half,
        },
        bins: xs.len(),
        effective_bins: effective,
        growth: fit.slope * (xs[xs.len() - 1] - xs[0]),
        mean: ys.iter().sum::<f64>() / n,
        sustained: false,
    })
}

/// Detects over-saturation from the sends and first tokens of one benchmark.
#[derive(Debug)]
pub struct SaturationDetector {
    options: SaturationOptions,
    in_flight: Series,
    ttft: Series,
    /// The latest time seen, in seconds into the benchmark.
    latest_s: f64,
    last: Option<(SlopeTest, SlopeTest)>,
}

impl SaturationDetector {
    /// A detector with nothing recorded.
    pub fn new(options: SaturationOptions) -> Self {
        Self {
            options,
            in_flight: Series::default(),
            ttft: Series::default(),
            latest_s: f64::NEG_INFINITY,
            last: None,
        }
    }

    // Casts: saturates; times are far below 2^63 bins.
    fn bin(&self, at_s: f64) -> i64 {
        (at_s / self.options.bin_s).floor() as i64
    }

    /// Moves the clock to `now_s` and drops the bins that left the window.
    fn advance(&mut self, now_s: f64) {
        self.latest_s = self.latest_s.max(now_s);
        let first = self.bin(self.latest_s - self.options.window_s);
        self.in_flight.keep_from(first);
        self.ttft.keep_from(first);
    }

    /// A request was sent `at_s` seconds into the benchmark with `in_flight`
    /// requests then in flight (including it).
    // Casts: in-flight counts far below 2^52.
    pub fn on_send(&mut self, at_s: f64, in_flight: usize) {
        if at_s.is_finite() {
            self.advance(at_s);
            self.in_flight.add(self.bin(at_s), in_flight as f64);
        }
    }

    /// A request sent at `sent_s` got its first token after `ttft_s`.
    pub fn on_first_token(&mut self, sent_s: f64, ttft_s: f64) {
        let at_s = sent_s + ttft_s;
        if at_s.is_finite() {
            self.advance(at_s);
            self.ttft.add(self.bin(at_s), ttft_s);
        }
    }

    /// Whether the run is over-saturated at `now_s`: Some once both the
    /// in-flight count and TTFT grow significantly over the window, not
    /// before min_duration_s. Keeps memory bounded (drops what left the
    /// window).
    ///
    /// The module documentation states the rule.
    pub fn check(&mut self, now_s: f64) -> Option<SaturationVerdict> {
        if !now_s.is_finite() {
            return None;
        }
        self.advance(now_s);
        let last = self.bin(now_s);
        let in_flight = self.in_flight.test(last, &self.options)?;
        let ttft = self.ttft.test(last, &self.options)?;
        self.last = Some((in_flight.clone(), ttft.clone()));
        let saturated = now_s >= self.options.min_duration_s
            && in_flight.grows(MIN_IN_FLIGHT_GROWTH.max(MIN_RELATIVE_GROWTH * in_flight.mean))
            && ttft.grows(MIN_RELATIVE_GROWTH * ttft.mean);
        saturated.then(|| SaturationVerdict {
            at_s: now_s,
            reason: format!(
                "Over the last {:.0} s the requests in flight grew by {:.1} to about {:.1} and the time to first token by {:.0} ms to about {:.0} ms, both significantly at {:.0} % confidence",
                in_flight.bins as f64 * self.options.bin_s,
                in_flight.growth,
                in_flight.mean + in_flight.growth / 2.0,
                ttft.growth * 1e3,
                (ttft.mean + ttft.growth / 2.0) * 1e3,
                self.options.confidence * 100.0
            ),
            in_flight,
            ttft,
        })
    }

    /// The latest slope tests, for reporting even when it never fired.
    ///
    /// The (in-flight, TTFT) pair of the latest check that could test both.
    pub fn state(&self) -> Option<(SlopeTest, SlopeTest)> {
        self.last.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::rng::seeded;
    use rand_distr::{Distribution, Exp, Normal};

    // Casts: small positive counts.
    fn count(value: f64) -> usize {
        value.round().max(1.0) as usize
    }

    /// Sends at 10/s while requests complete at 5/s, first in first out:
    /// the request sent at t waits about t, so its first token comes at 2t.
    fn growing_queue(detector: &mut SaturationDetector, seconds: u32) -> Option<SaturationVerdict> {
        for k in 0..seconds * 10 {
            let sent = f64::from(k) / 10.0;
            detector.on_send(sent, count(1.0 + (5.0 * sent).floor()));
            if k % 2 == 0 {
                let earlier = f64::from(k / 2) / 10.0;
                detector.on_first_token(earlier, earlier + 0.05);
            }
            if (k + 1) % 10 == 0
                && let Some(verdict) = detector.check(f64::from((k + 1) / 10))
            {
                return Some(verdict);
            }
        }
        None
    }

    #[test]
    fn a_linearly_growing_queue_fires_after_the_minimum_duration() {
        let mut detector = SaturationDetector::new(SaturationOptions::default());
        let verdict = growing_queue(&mut detector, 120).expect("fires");
        assert_eq!(verdict.at_s, 30.0);
        assert!((verdict.in_flight.slope - 5.0).abs() < 0.2, "{verdict:?}");
        assert!((verdict.ttft.slope - 0.5).abs() < 0.05, "{verdict:?}");
        assert!(verdict.reason.contains("grew by"), "{}", verdict.reason);
    }

    #[test]
    fn a_growing_queue_does_not_fire_before_the_minimum_duration() {
        let options = SaturationOptions {
            min_duration_s: 45.0,
            ..SaturationOptions::default()
        };
        let mut detector = SaturationDetector::new(options);
        assert_eq!(growing_queue(&mut detector, 44), None);
        let (in_flight, ttft) = detector
            .state()
            .expect("tested before the minimum duration");
        assert!(in_flight.interval.lower > 0.0 && ttft.interval.lower > 0.0);
        assert_eq!(
            growing_queue(&mut SaturationDetector::new(options), 120).map(|v| v.at_s),
            Some(45.0)
        );
    }

    #[test]
    fn a_stationary_system_never_fires() {
        let gaps = Exp::new(10.0).expect("rate");
        let in_flight = Normal::new(8.0_f64, 2.0).expect("sd");
        let ttft = Normal::new(0.05_f64, 0.01).expect("sd");
        for seed in 0..200 {
            let mut rng = seeded(seed, 3);
            let mut detector = SaturationDetector::new(SaturationOptions::default());
            let mut now = 0.0;
            for second in 1..=120 {
                let until = f64::from(second);
                loop {
                    now += gaps.sample(&mut rng);
                    if now >= until {
                        break;
                    }
                    detector.on_send(now, count(in_flight.sample(&mut rng)));
                    detector.on_first_token(now, ttft.sample(&mut rng).max(0.001));
                }
                now = until;
                let verdict = detector.check(until);
                assert_eq!(verdict, None, "seed {seed} at {until} s");
            }
            let (in_flight, ttft) = detector.state().expect("tested");
            assert!(
                in_flight.bins >= 55 && ttft.bins >= 55,
                "{in_flight:?} {ttft:?}"
            );
        }
    }

    /// A first-in first-out queue with 8 servers, Poisson arrivals
    /// at 10/s and exponential service at `load` of capacity, checked every
    /// second for 120 s; whether the detector fired.
    fn queue_fires(seed: u64, load: f64) -> bool {
        let gaps = Exp::new(10.0).expect("rate");
        let service = Exp::new(10.0 / (load * 8.0)).expect("rate");
        let mut rng = seeded(seed, 9);
        let mut detector = SaturationDetector::new(SaturationOptions::default());
        let mut free = [0.0_f64; 8];
        let mut finishes: Vec<f64> = Vec::new();
        let mut first_tokens: Vec<(f64, f64)> = Vec::new();
        let mut now = 0.0;
        for second in 1..=120 {
            let until = f64::from(second);
            loop {
                now += gaps.sample(&mut rng);
                if now >= until {
                    break;
                }
                let server = (0..free.len())
                    .min_by(|&a, &b| free[a].total_cmp(&free[b]))
                    .unwrap_or(0);
                let start = free[server].max(now);
                free[server] = start + service.sample(&mut rng);
                finishes.retain(|&f| f > now);
                finishes.push(free[server]);
                detector.on_send(now, finishes.len());
                first_tokens.push((now, start - now + 0.05));
            }
            now = until;
            first_tokens.retain(|&(sent, ttft)| {
                let due = sent + ttft <= until;
                if due {
                    detector.on_first_token(sent, ttft);
                }
                !due
            });
            if detector.check(until).is_some() {
                return true;
            }
        }
        false
    }

    #[test]
    fn a_queue_below_capacity_rarely_fires_and_one_far_above_it_mostly_does() {
        let fired = |load| (0..100).filter(|&seed| queue_fires(seed, load)).count();
        let (below, above) = (fired(0.7), fired(1.5));
        assert!(below <= 2, "{below} of 100 runs at 70 % load fired");
        assert!(above >= 85, "only {above} of 100 runs at 150 % load fired");
    }

    #[test]
    fn memory_stays_within_the_window() {
        let mut detector = SaturationDetector::new(SaturationOptions::default());
        for k in 0..100_000_u32 {
            let at = f64::from(k) / 10.0;
            detector.on_send(at, 8);
            detector.on_first_token(at, 0.05);
            assert!(detector.in_flight.bins.len() <= 62 && detector.ttft.bins.len() <= 62);
        }
        assert!(detector.check(10_000.0).is_none());
        assert!(detector.in_flight.bins.len() <= 61);
    }

    #[test]
    fn too_few_bins_give_no_test() {
        let mut detector = SaturationDetector::new(SaturationOptions::default());
        for k in 0..50_u32 {
            detector.on_send(f64::from(k) / 10.0, 1);
            detector.on_first_token(f64::from(k) / 10.0, 0.05);
        }
        assert_eq!(detector.check(5.0), None);
        assert_eq!(detector.state(), None);
    }
}
