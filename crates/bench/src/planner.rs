//! What a profile runs next, given what its benchmarks measured: fixed
//! lists run in order, a sweep adds rates between its synchronous and
//! throughput rates, a goodput search probes concurrency levels by the
//! attainment of the objectives, a knee profile fits its grid and may
//! refine it.

use std::collections::VecDeque;

use crate::analysis::goodput::{GoodputSearch, Next};
use crate::analysis::knee::{KneeFit, find_knee, refinement};
pub use crate::record::{Conclusion, KneeConclusion};
use crate::report::BenchmarkReport;
use crate::runner::profile::RateKind;
use crate::runner::{Profile, StopReason, Strategy, sweep_rates};

/// A benchmark that just finished, as a planner sees it.
#[derive(Debug, Clone, Copy)]
pub struct Finished<'a> {
    /// What it ran.
    pub strategy: &'a Strategy,
    /// What it measured.
    pub report: &'a BenchmarkReport,
    /// Successful requests per second over the whole run, warm-up and
    /// cool-down included: the sweep's fallback where the measured window
    /// holds no successful request.
    pub success_rate: f64,
    /// Why it stopped sending.
    pub stop: StopReason,
}

/// The state of a profile between benchmarks.
#[derive(Debug)]
pub enum Planner {
    /// Strategies known up front.
    Fixed(VecDeque<Strategy>),
    /// Synchronous, throughput, then the rates between.
    Sweep {
        /// Benchmarks in all.
        sweep_size: usize,
        /// How the rates between are sent, and the Poisson seed.
        rates_as: (RateKind, u64),
        /// Strategies not yet run.
        queue: VecDeque<Strategy>,
        /// The rates measured so far.
        rates: Vec<f64>,
    },
    /// A goodput search.
    Goodput(Box<GoodputSearch>),
    /// A knee grid, its fit, and a refinement.
    Knee(Box<KneeState>),
}

/// The knee profile's progress.
#[derive(Debug)]
pub struct KneeState {
    queue: VecDeque<usize>,
    initial_left: usize,
    measured: Vec<(f64, f64)>,
    levels: Vec<usize>,
    refine: bool,
    points_each_side: usize,
    max_step: usize,
    initial: Option<KneeFit>,
    refinement: Vec<usize>,
}

impl Planner {
    /// The planner of `profile`.
    pub fn new(profile: &Profile) -> Self {
        match profile {
            Profile::Fixed { strategies } => Planner::Fixed(strategies.iter().cloned().collect()),
            Profile::Sweep {
                sweep_size,
                max_concurrency,
                strategy,
                seed,
                rampup,
            } => Planner::Sweep {
                sweep_size: *sweep_size,
                rates_as: (*strategy, *seed),
                queue: VecDeque::from([
                    Strategy::Synchronous,
                    Strategy::Throughput {
                        max_concurrency: *max_concurrency,
                        rampup: *rampup,
                    },
                ]),
                rates: Vec::new(),
            },
            Profile::Goodput { search } => Planner::Goodput(Box::new(GoodputSearch::new(*search))),
            Profile::Knee {
                streams,
                refine,
                points_each_side,
                max_step,
            } => Planner::Knee(Box::new(KneeState {
                queue: streams.iter().copied().collect(),
                initial_left: streams.len(),
                measured: Vec::new(),
                levels: Vec::new(),
                refine: *refine,
                points_each_side: *points_each_side,
                max_step: *max_step,
                initial: None,
                refinement: Vec::new(),
            })),
        }
    }

    /// The next strategy to run after `finished` (`None` for the first),
    /// or `None` when the profile is done.
    pub fn next(&mut self, finished: Option<Finished<'_>>) -> Option<Strategy> {
        match self {
            Planner::Fixed(queue) => queue.pop_front(),
            Planner::Sweep {
                sweep_size,
                rates_as: (kind, seed),
                queue,
                rates,
            } => {
                if let Some(done) = finished {
                    rates.push(measured_rate(&done));
                    if let [synchronous, throughput] = rates[..] {
                        queue.extend(
                            sweep_rates(synchronous, throughput, *sweep_size)
                                .into_iter()
                                .map(|rate| kind.strategy(rate, *seed, None)),
                        );
                    }
                }
                queue.pop_front()
            }
            Planner::Goodput(search) => {
                let level = match finished {
                    None => search.first(),
                    Some(done) => {
                        let Strategy::Concurrent { streams, .. } = *done.strategy else {
                            return None;
                        };
                        let (conforming, determined) = done
                            .report
                            .metrics
                            .slo
                            .as_ref()
                            .map_or((0, 0), |s| (s.conforming, s.determined()));
                        let aborted = done.stop == StopReason::OverSaturated;
                        match search.record(streams, conforming, determined, aborted) {
                            Next::Probe(level) => level,
                            Next::Done => return None,
                        }
                    }
                };
                Some(Strategy::concurrent(level))
            }
            Planner::Knee(state) => state.next(finished),
        }
    }

    /// What the profile concluded, for profiles that conclude something.
    pub fn conclusion(&self) -> Option<Conclusion> {
        match self {
            Planner::Goodput(search) => Some(Conclusion::Goodput(search.conclusion())),
            Planner::Knee(state) => Some(Conclusion::Knee(Box::new(KneeConclusion {
                initial: state
                    .initial
                    .clone()
                    .unwrap_or_else(|| find_knee(&state.measured)),
                refinement: state.refinement.clone(),
                fit: find_knee(&state.measured),
            }))),
            Planner::Fixed(_) | Planner::Sweep { .. } => None,
        }
    }
}

/// The rate a sweep spaces its rates from: successful requests per second
/// over the measured window, the one the report shows, so that warm-up
/// and cool-down, left out of the report, do not move the sweep past the
/// maximum it reports; the whole run's rate where the window holds none.
fn measured_rate(done: &Finished<'_>) -> f64 {
    let windowed = done.report.metrics.requests_per_s;
    if windowed.is_finite() && windowed > 0.0 {
        windowed
    } else {
        done.success_rate
    }
}

impl KneeState {
    fn next(&mut self, finished: Option<Finished<'_>>) -> Option<Strategy> {
        if let Some(done) = finished
            && let Strategy::Concurrent { streams, .. } = *done.strategy
        {
            // Casts: stream counts are small.
            self.measured
                .push((streams as f64, done.report.metrics.output_tokens_per_s));
            self.levels.push(streams);
            self.initial_left = self.initial_left.saturating_sub(1);
            if self.initial_left == 0 && self.initial.is_none() {
                let fit = find_knee(&self.measured);
                if self.refine {
                    self.refinement =
                        refinement(&fit, &self.levels, self.points_each_side, self.max_step);
                    self.queue.extend(self.refinement.iter().copied());
                }
                self.initial = Some(fit);
            }
        }
        self.queue.pop_front().map(Strategy::concurrent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::clock::Timestamp;

    use crate::record::CompactRecords;

    /// A finished benchmark whose window measured `windowed` successful
    /// requests per second and whose whole run sent `whole` per second.
    fn finished<'a>(
        strategy: &'a Strategy,
        report: &'a mut BenchmarkReport,
        windowed: f64,
        whole: f64,
    ) -> Finished<'a> {
        report.metrics.requests_per_s = windowed;
        Finished {
            strategy,
            report,
            success_rate: whole,
            stop: StopReason::MaxRequests,
        }
    }

    fn empty_report() -> BenchmarkReport {
        BenchmarkReport::new(
            "b",
            serde_json::Value::Null,
            Timestamp(0),
            Timestamp(1),
            CompactRecords::new(Timestamp(0)),
        )
    }

    fn rates(strategies: &[Strategy]) -> Vec<f64> {
        strategies
            .iter()
            .map(|s| match s {
                Strategy::Constant { rate, .. } => *rate,
                other => panic!("not a rate: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_sweep_spaces_its_rates_from_the_measured_window_not_the_whole_run() {
        let profile = Profile::Sweep {
            sweep_size: 4,
            max_concurrency: 8,
            strategy: RateKind::Constant,
            seed: 1,
            rampup: std::time::Duration::ZERO,
        };
        let mut planner = Planner::new(&profile);
        let synchronous = planner.next(None).expect("synchronous");
        // Warm-up and cool-down cut, the window measured 2/s and 11/s; the
        // whole runs, slow edges included, 1/s and 5/s.
        let mut report = empty_report();
        let throughput = planner
            .next(Some(finished(&synchronous, &mut report, 2.0, 1.0)))
            .expect("throughput");
        let mut report = empty_report();
        let first = planner
            .next(Some(finished(&throughput, &mut report, 11.0, 5.0)))
            .expect("a rate");
        let mut between = vec![first];
        while let Some(next) =
            planner.next(Some(finished(&throughput, &mut empty_report(), 1.0, 1.0)))
        {
            between.push(next);
        }
        assert_eq!(rates(&between), vec![5.0, 8.0]);
    }

    #[test]
    fn a_sweep_whose_window_measured_nothing_falls_back_to_the_whole_run() {
        let profile = Profile::Sweep {
            sweep_size: 3,
            max_concurrency: 8,
            strategy: RateKind::Constant,
            seed: 1,
            rampup: std::time::Duration::ZERO,
        };
        let mut planner = Planner::new(&profile);
        let synchronous = planner.next(None).expect("synchronous");
        let throughput = planner
            .next(Some(finished(&synchronous, &mut empty_report(), 0.0, 2.0)))
            .expect("throughput");
        let rate = planner
            .next(Some(finished(&throughput, &mut empty_report(), 6.0, 3.0)))
            .expect("a rate");
        assert_eq!(rates(&[rate]), vec![4.0]);
    }
}
