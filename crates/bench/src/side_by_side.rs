//! Runs of one backend, or of several side by side: the same benchmarks
//! against each backend in turn, into one report (see
//! [`report::combine`]).

use std::sync::Arc;

use guidebench_core::backend::Backend;
use tokio::sync::watch;

use crate::Result;
use crate::report::{self, Report};
use crate::runner::Observer;
use crate::session::{Plan, Progress, Session};

/// Progress of a run that may hold several backends: the session's
/// progress, and a line that stays on screen (a backend that failed while
/// the next one runs).
pub trait RunProgress: Progress {
    /// Shows a line that stays.
    fn note(&mut self, line: &str);
}

/// Runs the plans, one backend each (`backends[i]` created from
/// `plans[i]`): one plan is one [`Session`]; several run side by side
/// (see [`side_by_side`]).
///
/// # Errors
///
/// The session's error with one plan; with several, the first backend's
/// error when none produced a report.
pub async fn run(
    mut plans: Vec<Plan>,
    mut backends: Vec<Arc<dyn Backend>>,
    progress: &mut impl RunProgress,
    cancel: watch::Receiver<bool>,
) -> Result<Report> {
    if plans.len() == 1
        && backends.len() == 1
        && let (Some(plan), Some(backend)) = (plans.pop(), backends.pop())
    {
        return Session::new(plan).run(backend, progress, cancel).await;
    }
    side_by_side(plans, backends, progress, cancel).await
}

/// Runs every plan (the same benchmarks, one backend each) in turn: each
/// backend is started and loaded before its own benchmarks and shut down
/// after them; one that cannot start is reported and the next one runs;
/// an interrupt stops the run. The reports become one, each benchmark
/// labelled with its backend.
///
/// # Errors
///
/// The first backend's error when no backend produced a report, or a
/// configuration error when the run was interrupted before any did.
pub async fn side_by_side(
    plans: Vec<Plan>,
    backends: Vec<Arc<dyn Backend>>,
    progress: &mut impl RunProgress,
    cancel: watch::Receiver<bool>,
) -> Result<Report> {
    let labels =
        report::backend_labels(&plans.iter().map(|p| p.backend.clone()).collect::<Vec<_>>());
    // Outputs are compared where every backend is an in-process engine
    // and decoding is greedy: only then must the texts agree.
    let compare_outputs = plans
        .iter()
        .all(|p| p.backend.kind == "offline" && p.sampling.temperature.is_none_or(|t| t == 0.0));
    let mut outcomes = Vec::with_capacity(plans.len());
    let mut first_error = None;
    for ((plan, backend), label) in plans.into_iter().zip(backends).zip(labels) {
        if *cancel.borrow() {
            break;
        }
        let config = plan.config()["backend"].clone();
        let mut labelled = Labelled {
            progress: &mut *progress,
            label: &label,
        };
        let result = Session::new(plan)
            .run(backend, &mut labelled, cancel.clone())
            .await;
        let report = result.map_err(|e| {
            let text = e.to_string();
            progress.note(&format!("{label}: {text}"));
            first_error.get_or_insert(e);
            text
        });
        outcomes.push(report::BackendOutcome {
            label,
            config,
            report,
        });
    }
    match report::combine(outcomes, compare_outputs) {
        Some(report) => Ok(report),
        None => Err(first_error.unwrap_or_else(|| {
            guidebench_core::Error::Config("no backend ran: the run was interrupted".into()).into()
        })),
    }
}

/// Progress of one backend of a side-by-side run: its label before each
/// phase and benchmark.
struct Labelled<'a, P> {
    progress: &'a mut P,
    label: &'a str,
}

impl<P: RunProgress> Progress for Labelled<'_, P> {
    fn phase(&mut self, message: &str) {
        self.progress.phase(&format!("{}: {message}", self.label));
    }

    fn benchmark(&mut self, name: &str, total: Option<u64>) -> Arc<dyn Observer> {
        self.progress
            .benchmark(&format!("{} · {name}", self.label), total)
    }

    fn benchmark_done(&mut self, name: &str, seconds: f64) {
        self.progress
            .benchmark_done(&format!("{} · {name}", self.label), seconds);
    }
}
