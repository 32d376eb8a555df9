//! What a run does, planned from the flags ([`RunPlan`]), and its one
//! entry: every plan checked and every backend created before the first
//! one starts, then the benchmarks run ([`RunPlan::run`]), or only checked
//! ([`RunPlan::dry_run`]).

use std::sync::Arc;

use guidebench_core::backend::Backend;
use tokio::sync::watch;

use crate::Result;
use crate::outputs::Output;
use crate::report::Report;
use crate::session::{Plan, PlanArgs, Session};
use crate::side_by_side::{self, RunProgress};

/// What a run does: one plan per backend, the outputs, and whether the
/// live progress display is wanted.
#[derive(Debug)]
pub struct RunPlan {
    /// One per backend, in the order given; several run side by side.
    pub plans: Vec<PlanArgs>,
    /// Where the report goes: the console first, unless the console is
    /// off; every file checked writable.
    pub outputs: Vec<Output>,
    /// Neither the flag nor the file turned the live progress display off.
    pub progress: bool,
    /// `--disable-console`: nothing on the console but errors.
    pub quiet: bool,
}

/// Every plan checked, with its backend created (not started).
type Checked = (Vec<Plan>, Vec<Arc<dyn Backend>>);

impl RunPlan {
    /// Checks every plan and creates every backend, without starting
    /// any: an option anywhere that is wrong is reported before a model
    /// loads.
    fn check(&self) -> Result<Checked> {
        let plans = self
            .plans
            .iter()
            .cloned()
            .map(Plan::new)
            .collect::<Result<Vec<_>>>()?;
        let backends = plans
            .iter()
            .map(Plan::create_backend)
            .collect::<Result<Vec<_>>>()?;
        Ok((plans, backends))
    }

    /// Checks everything the run would use without starting a backend:
    /// every plan and backend (as [`RunPlan::run`] does first), then each
    /// plan's data read and made into requests and its tokenizer loaded
    /// ([`Session::prepare`]). Returns the number of backends checked.
    ///
    /// # Errors
    ///
    /// The first problem found, a usage error ([`crate::Error::is_usage`])
    /// but where a file cannot be read.
    pub fn dry_run(&self) -> Result<usize> {
        let (plans, backends) = self.check()?;
        for plan in plans {
            Session::new(plan).prepare()?;
        }
        Ok(backends.len())
    }

    /// Runs the benchmarks: every plan is checked and every backend
    /// created before the first one starts; then one backend's session,
    /// or several side by side ([`side_by_side::run`]), into one report.
    /// `cancel` turning true stops sending and marks the report
    /// interrupted.
    ///
    /// # Errors
    ///
    /// A plan or backend that fails its checks (before anything starts),
    /// or the run's error ([`side_by_side::run`]).
    pub async fn run(
        &self,
        progress: &mut impl RunProgress,
        cancel: watch::Receiver<bool>,
    ) -> Result<Report> {
        let (plans, backends) = self.check()?;
        side_by_side::run(plans, backends, progress, cancel).await
    }
}
