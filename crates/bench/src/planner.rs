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
    /// Successful requests per second, as the sweep measures rates.
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
                    rates.push(done.success_rate);
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

impl KneeState {
    fn next(&mut self, finished: Option<Finished<'_>>) -> Option<Strategy> {
        if let Some(done) = finished
            && let Strategy::Concurrent { streams, .. } = *done.strategy
        {
            #[allow(clippy::cast_precision_loss)] // stream counts are small.
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
