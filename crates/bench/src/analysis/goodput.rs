//! Goodput search: the highest concurrency whose requests meet the latency
//! objectives.
//!
//! A level's attainment is the share of its determined requests that met
//! every objective. Its verdict comes from the Wilson interval of those
//! counts at `confidence`: [`Verdict::Pass`] when the lower bound reaches
//! `target`, [`Verdict::Fail`] when the upper bound is below it, and
//! [`Verdict::Undecided`] otherwise; the point estimate never decides.
//!
//! The search doubles from `initial` until a level does not pass (capped at
//! `max_level`), then bisects between the highest passing level and the
//! lowest level that did not, and stops once they are at most
//! `max(1, tolerance × pass)` apart. When the first level does not pass, it
//! halves down to 1.
//!
//! An undecided level is run again and its counts pooled with its earlier
//! runs, up to `max_extensions` re-runs. Still undecided after that, it
//! bounds the search from above like a failure, though it is not reported
//! as one, so the answer is always a level proven to pass. A run that a
//! constraint cut short (`aborted`) is recorded but never a bound, and ends
//! the search. `max_probes` counts every run, re-runs included.

use serde::{Deserialize, Serialize};

use super::stats::{Interval, wilson};

/// How the goodput search runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GoodputOptions {
    /// The attainment a level must be proven to reach, in (0, 1]; at 1 no
    /// finite run can prove it.
    pub target: f64,
    /// The two-sided confidence of the attainment intervals, in (0, 1).
    pub confidence: f64,
    /// The first level run.
    pub initial: usize,
    /// The highest level run.
    pub max_level: usize,
    /// The search stops once the bracket is at most this fraction of the
    /// passing level wide (and at least 1).
    pub tolerance: f64,
    /// The most runs, re-runs included.
    pub max_probes: usize,
    /// The most re-runs of one undecided level.
    pub max_extensions: usize,
}

impl Default for GoodputOptions {
    fn default() -> Self {
        Self {
            target: 0.95,
            confidence: 0.95,
            initial: 1,
            max_level: 1024,
            tolerance: 0.1,
            max_probes: 15,
            max_extensions: 2,
        }
    }
}

/// What a level's counts prove about its attainment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The whole interval is at or above the target.
    Pass,
    /// The whole interval is below the target.
    Fail,
    /// The interval straddles the target, or there is none; also every
    /// aborted run, which decides nothing.
    Undecided,
}

/// One run of the search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The concurrency run.
    pub level: usize,
    /// Requests that met every objective, pooled over this level's runs so
    /// far (an aborted run's own).
    pub conforming: u64,
    /// Requests whose conformance could be determined, pooled likewise.
    pub determined: u64,
    /// conforming / determined; 0 when nothing was determined.
    pub attainment: f64,
    /// The Wilson interval of the attainment; none when nothing was
    /// determined.
    pub interval: Option<Interval>,
    /// What the counts prove.
    pub verdict: Verdict,
    /// 0 for a level's first run, 1 and up for the pooled re-runs.
    pub extension: usize,
    /// Whether a constraint cut the run short.
    pub aborted: bool,
}

/// Where the search stands, and why it stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoodputConclusion {
    /// The highest level proven to pass.
    pub best: Option<usize>,
    /// The attainment interval of the best level.
    pub best_interval: Option<Interval>,
    /// The lowest level proven to fail.
    pub lowest_failing: Option<usize>,
    /// Levels still undecided after their re-runs, ascending.
    pub undecided: Vec<usize>,
    /// Why the search stopped: `converged`, `max_level_reached`,
    /// `max_probes_exhausted`, `objectives_unmet_at_minimum`,
    /// `undecided_at_minimum`, `aborted`, or `in_progress` while it runs.
    pub stop_reason: String,
    /// Every run, in order.
    pub probes: Vec<Probe>,
    /// The outcome as a sentence.
    pub message: String,
}

/// What to run next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Run this level.
    Probe(usize),
    /// The search is over; see [`GoodputSearch::conclusion`].
    Done,
}

/// Why the search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Converged,
    MaxLevel,
    MaxProbes,
    UnmetAtMinimum,
    UndecidedAtMinimum,
    Aborted,
}

impl Stop {
    fn code(self) -> &'static str {
        match self {
            Self::Converged => "converged",
            Self::MaxLevel => "max_level_reached",
            Self::MaxProbes => "max_probes_exhausted",
            Self::UnmetAtMinimum => "objectives_unmet_at_minimum",
            Self::UndecidedAtMinimum => "undecided_at_minimum",
            Self::Aborted => "aborted",
        }
    }
}

/// The search for the highest concurrency meeting the objectives.
#[derive(Debug, Clone)]
pub struct GoodputSearch {
    options: GoodputOptions,
    probes: Vec<Probe>,
    /// The highest level proven to pass.
    pass: Option<usize>,
    /// The lowest level that failed or stayed undecided.
    bound: Option<usize>,
    stop: Option<Stop>,
}

impl GoodputSearch {
    /// A search that has run nothing.
    pub fn new(options: GoodputOptions) -> Self {
        Self {
            options,
            probes: Vec::new(),
            pass: None,
            bound: None,
            stop: None,
        }
    }

    /// The first level to run: `initial`, within 1..=`max_level`.
    pub fn first(&self) -> usize {
        self.options.initial.min(self.options.max_level).max(1)
    }

    /// Records the run at `level` (conforming / determined requests;
    /// `aborted` when a constraint cut it short) and says what to run next.
    ///
    /// A run at the level of an undecided last run pools with it. Conforming
    /// counts above `determined` are taken as `determined`. Once the search
    /// is done, further runs are ignored.
    // Casts: request counts far below 2^52.
    pub fn record(
        &mut self,
        level: usize,
        conforming: u64,
        determined: u64,
        aborted: bool,
    ) -> Next {
        if self.stop.is_some() {
            return Next::Done;
        }
        let conforming = conforming.min(determined);
        let pooled_with = self.probes.last().filter(|p| {
            p.level == level && p.verdict == Verdict::Undecided && !p.aborted && !aborted
        });
        let (extension, conforming, determined) = match pooled_with {
            Some(p) => (
                p.extension + 1,
                p.conforming + conforming,
                p.determined + determined,
            ),
            None => (0, conforming, determined),
        };
        let interval = wilson(conforming, determined, self.options.confidence);
        let verdict = match interval {
            _ if aborted => Verdict::Undecided,
            Some(i) if i.lower >= self.options.target => Verdict::Pass,
            Some(i) if i.upper < self.options.target => Verdict::Fail,
            _ => Verdict::Undecided,
        };
        self.probes.push(Probe {
            level,
            conforming,
            determined,
            attainment: if determined == 0 {
                0.0
            } else {
                conforming as f64 / determined as f64
            },
            interval,
            verdict,
            extension,
            aborted,
        });
        let next = if aborted {
            Err(Stop::Aborted)
        } else if verdict == Verdict::Undecided && extension < self.options.max_extensions {
            Ok(level)
        } else {
            match verdict {
                Verdict::Pass => self.pass = self.pass.max(Some(level)),
                _ => self.bound = Some(self.bound.map_or(level, |b| b.min(level))),
            }
            self.advance()
        };
        match next {
            Ok(_) if self.probes.len() >= self.options.max_probes => self.finish(Stop::MaxProbes),
            Ok(level) => Next::Probe(level),
            Err(stop) => self.finish(stop),
        }
    }

    fn finish(&mut self, stop: Stop) -> Next {
        self.stop = Some(stop);
        Next::Done
    }

    /// The next level once the last run was decided, or why to stop.
    // Casts: levels far below 2^52.
    fn advance(&self) -> Result<usize, Stop> {
        let max_level = self.options.max_level.max(1);
        match (self.pass, self.bound) {
            (pass, None) => {
                let current = pass.unwrap_or_else(|| self.first());
                if current >= max_level {
                    Err(Stop::MaxLevel)
                } else {
                    Ok(current.saturating_mul(2).min(max_level))
                }
            }
            (None, Some(bound)) if bound <= 1 => {
                let at_one = self
                    .probes
                    .iter()
                    .rev()
                    .find(|p| p.level <= 1 && !p.aborted);
                Err(if at_one.is_some_and(|p| p.verdict == Verdict::Fail) {
                    Stop::UnmetAtMinimum
                } else {
                    Stop::UndecidedAtMinimum
                })
            }
            (None, Some(bound)) => Ok(bound / 2),
            (Some(pass), Some(bound)) => {
                let gap = bound.saturating_sub(pass);
                if gap as f64 <= (self.options.tolerance * pass as f64).max(1.0) {
                    Err(Stop::Converged)
                } else {
                    Ok(pass + gap / 2)
                }
            }
        }
    }

    /// Levels whose latest decided run stayed undecided, ascending.
    fn undecided(&self) -> Vec<usize> {
        let mut levels: Vec<usize> = Vec::new();
        for (i, probe) in self.probes.iter().enumerate() {
            let latest = !self.probes[i + 1..]
                .iter()
                .any(|p| p.level == probe.level && !p.aborted);
            if latest && !probe.aborted && probe.verdict == Verdict::Undecided {
                levels.push(probe.level);
            }
        }
        levels.sort_unstable();
        levels.dedup();
        levels
    }

    /// Where the search stands: its bounds, every run, and why it stopped.
    pub fn conclusion(&self) -> GoodputConclusion {
        let decided = |verdict| {
            self.probes
                .iter()
                .filter(move |p| p.verdict == verdict && !p.aborted)
                .map(|p| p.level)
        };
        let best = decided(Verdict::Pass).max();
        let best_interval = best.and_then(|level| {
            self.probes
                .iter()
                .rev()
                .find(|p| p.level == level && p.verdict == Verdict::Pass)?
                .interval
        });
        let lowest_failing = decided(Verdict::Fail).min();
        let undecided = self.undecided();
        GoodputConclusion {
            message: self.message(best, lowest_failing, &undecided),
            best,
            best_interval,
            lowest_failing,
            undecided,
            stop_reason: self.stop.map_or("in_progress", Stop::code).to_owned(),
            probes: self.probes.clone(),
        }
    }

    fn message(&self, best: Option<usize>, failing: Option<usize>, undecided: &[usize]) -> String {
        let target = format!(
            "attainment of at least {:.1} % at {:.0} % confidence",
            self.options.target * 100.0,
            self.options.confidence * 100.0
        );
        let above = match (
            failing,
            undecided.iter().find(|&&u| best.is_none_or(|b| u > b)),
        ) {
            (Some(f), Some(&u)) if u < f => format!("; {u} streams could not be decided"),
            (Some(f), _) => format!("; {f} streams fail"),
            (None, Some(u)) => format!("; {u} streams could not be decided"),
            (None, None) => String::new(),
        };
        let so_far = |b: Option<usize>| {
            b.map_or_else(
                || "no level has been proven to meet it".to_owned(),
                |b| format!("{b} streams is the highest level proven to meet it so far"),
            )
        };
        match (self.stop, best) {
            (None, _) => format!("The search for {target} is still running: {}", so_far(best)),
            (Some(Stop::Converged), Some(b)) => {
                format!("{b} streams is the highest concurrency proven to meet {target}{above}")
            }
            (Some(Stop::MaxLevel), Some(b)) => format!(
                "Every level up to the ceiling of {b} streams met {target}; the limit lies higher"
            ),
            (Some(Stop::MaxProbes), Some(b)) => format!(
                "The search ran out of runs before converging on {target}: {b} streams is only a lower bound{above}"
            ),
            (Some(Stop::MaxProbes), None) => format!(
                "The search ran out of runs before any level was proven to meet {target}{above}"
            ),
            (Some(Stop::Aborted), _) => format!(
                "A constraint cut the last run short, which stopped the search for {target}: {}",
                so_far(best)
            ),
            (Some(Stop::UndecidedAtMinimum), _) => format!(
                "No concurrency was proven to meet {target}, but {undecided:?} streams could not be decided; run longer probes before concluding the objectives cannot be met"
            ),
            _ => format!("No concurrency meets {target}: even 1 stream fails"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search against a system that answers (conforming,
    /// determined) for a level and its run number there.
    fn run(
        options: GoodputOptions,
        system: impl Fn(usize, usize) -> (u64, u64),
    ) -> GoodputConclusion {
        let mut search = GoodputSearch::new(options);
        let mut level = search.first();
        let mut runs_here = 0;
        for _ in 0..100 {
            let (conforming, determined) = system(level, runs_here);
            match search.record(level, conforming, determined, false) {
                Next::Probe(next) => {
                    runs_here = if next == level { runs_here + 1 } else { 0 };
                    level = next;
                }
                Next::Done => return search.conclusion(),
            }
        }
        panic!("the search did not end");
    }

    fn frontier_24(level: usize, _: usize) -> (u64, u64) {
        if level <= 24 { (100, 100) } else { (0, 100) }
    }

    fn levels(conclusion: &GoodputConclusion) -> Vec<usize> {
        conclusion.probes.iter().map(|p| p.level).collect()
    }

    #[test]
    fn a_known_frontier_at_24_streams_is_found_by_doubling_then_bisection() {
        let c = run(GoodputOptions::default(), frontier_24);
        assert_eq!(levels(&c), vec![1, 2, 4, 8, 16, 32, 24, 28, 26]);
        assert_eq!((c.best, c.lowest_failing), (Some(24), Some(26)));
        assert_eq!(c.stop_reason, "converged");
        assert!(c.undecided.is_empty());
        let interval = c.best_interval.expect("interval");
        assert_eq!(interval.upper, 1.0);
        assert!(interval.lower >= 0.95);
        assert!(
            c.message.starts_with("24 streams is the highest"),
            "{}",
            c.message
        );
        assert!(c.message.contains("26 streams fail"), "{}", c.message);
    }

    #[test]
    fn a_level_straddling_the_target_is_rerun_and_pooled_until_decided() {
        // 60/64 straddles 0.95; 400 more conforming requests prove it.
        let system = |level: usize, run: usize| match level {
            ..=2 => (100, 100),
            4 if run == 0 => (60, 64),
            4 => (400, 400),
            _ => (0, 100),
        };
        let c = run(GoodputOptions::default(), system);
        assert_eq!(levels(&c), vec![1, 2, 4, 4, 8, 6, 5]);
        let (first, second) = (&c.probes[2], &c.probes[3]);
        assert_eq!((first.verdict, first.extension), (Verdict::Undecided, 0));
        assert_eq!(
            (second.conforming, second.determined, second.extension),
            (460, 464, 1)
        );
        assert_eq!(second.verdict, Verdict::Pass);
        assert_eq!(
            (c.best, c.lowest_failing, c.stop_reason.as_str()),
            (Some(4), Some(5), "converged")
        );
    }

    #[test]
    fn a_level_still_undecided_after_its_reruns_bounds_the_search_without_failing() {
        let system = |level: usize, _: usize| match level {
            ..=3 => (100, 100),
            4 => (60, 64),
            _ => (0, 100),
        };
        let c = run(GoodputOptions::default(), system);
        assert_eq!(levels(&c), vec![1, 2, 4, 4, 4, 3]);
        let last_rerun = &c.probes[4];
        assert_eq!(
            (
                last_rerun.conforming,
                last_rerun.determined,
                last_rerun.extension
            ),
            (180, 192, 2)
        );
        assert_eq!(last_rerun.verdict, Verdict::Undecided);
        assert_eq!(
            (c.best, c.lowest_failing, c.undecided.clone()),
            (Some(3), None, vec![4])
        );
        assert_eq!(c.stop_reason, "converged");
        assert!(
            c.message.contains("4 streams could not be decided"),
            "{}",
            c.message
        );
    }

    #[test]
    fn running_out_of_probes_is_reported_as_a_lower_bound() {
        let options = GoodputOptions {
            max_probes: 4,
            ..GoodputOptions::default()
        };
        let c = run(options, frontier_24);
        assert_eq!(levels(&c), vec![1, 2, 4, 8]);
        assert_eq!(
            (c.best, c.stop_reason.as_str()),
            (Some(8), "max_probes_exhausted")
        );
        assert!(c.message.contains("lower bound"), "{}", c.message);
    }

    #[test]
    fn reruns_count_against_the_probe_budget() {
        let options = GoodputOptions {
            max_probes: 2,
            ..GoodputOptions::default()
        };
        let c = run(
            options,
            |level, _| if level == 1 { (60, 64) } else { (100, 100) },
        );
        assert_eq!(levels(&c), vec![1, 1]);
        assert_eq!(
            (c.best, c.stop_reason.as_str()),
            (None, "max_probes_exhausted")
        );
        assert_eq!(c.undecided, vec![1]);
    }

    #[test]
    fn a_system_failing_everywhere_has_no_answer_and_says_so() {
        let options = GoodputOptions {
            initial: 8,
            ..GoodputOptions::default()
        };
        let c = run(options, |_, _| (0, 100));
        assert_eq!(levels(&c), vec![8, 4, 2, 1]);
        assert_eq!((c.best, c.lowest_failing), (None, Some(1)));
        assert_eq!(c.stop_reason, "objectives_unmet_at_minimum");
        assert!(c.message.contains("even 1 stream fails"), "{}", c.message);
    }

    #[test]
    fn a_proven_failure_at_one_stream_is_unmet_even_after_an_undecided_level() {
        let options = GoodputOptions {
            initial: 4,
            ..GoodputOptions::default()
        };
        let c = run(
            options,
            |level, _| if level == 4 { (9, 10) } else { (0, 100) },
        );
        assert_eq!(levels(&c), vec![4, 4, 4, 2, 1]);
        assert_eq!((c.undecided.clone(), c.lowest_failing), (vec![4], Some(1)));
        assert_eq!(c.stop_reason, "objectives_unmet_at_minimum");
    }

    #[test]
    fn a_system_undecided_at_one_stream_is_not_called_failing() {
        let c = run(GoodputOptions::default(), |_, _| (9, 10));
        assert_eq!(levels(&c), vec![1, 1, 1]);
        assert_eq!((c.best, c.lowest_failing), (None, None));
        assert_eq!(c.stop_reason, "undecided_at_minimum");
        assert!(c.message.contains("run longer probes"), "{}", c.message);
    }

    #[test]
    fn a_system_passing_everywhere_stops_at_the_ceiling() {
        let options = GoodputOptions {
            max_level: 100,
            ..GoodputOptions::default()
        };
        let c = run(options, |_, _| (100, 100));
        assert_eq!(levels(&c), vec![1, 2, 4, 8, 16, 32, 64, 100]);
        assert_eq!(
            (c.best, c.stop_reason.as_str()),
            (Some(100), "max_level_reached")
        );
        assert!(
            c.message.contains("ceiling of 100 streams"),
            "{}",
            c.message
        );
    }

    #[test]
    fn an_aborted_run_is_recorded_but_never_a_bound_and_ends_the_search() {
        let mut search = GoodputSearch::new(GoodputOptions::default());
        assert_eq!(search.record(1, 100, 100, false), Next::Probe(2));
        assert_eq!(search.record(2, 50, 50, true), Next::Done);
        let c = search.conclusion();
        assert_eq!(
            (c.best, c.lowest_failing, c.stop_reason.as_str()),
            (Some(1), None, "aborted")
        );
        assert!(c.probes[1].aborted && c.probes[1].verdict == Verdict::Undecided);
        assert!(c.undecided.is_empty());
        assert_eq!(search.record(4, 100, 100, false), Next::Done);
    }

    #[test]
    fn a_search_in_progress_says_so() {
        let mut search = GoodputSearch::new(GoodputOptions::default());
        assert_eq!(search.first(), 1);
        assert_eq!(search.conclusion().stop_reason, "in_progress");
        search.record(1, 100, 100, false);
        let c = search.conclusion();
        assert_eq!((c.best, c.stop_reason.as_str()), (Some(1), "in_progress"));
        assert!(c.message.contains("still running"), "{}", c.message);
    }
}
