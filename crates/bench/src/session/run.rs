//! The run of a checked plan ([`Session`]): the data read and checked,
//! the backend started, one benchmark after another as the profile's
//! planner chooses them, each fed by its own data feed, and the report.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use guidebench_core::backend::{Backend, ValidationReport};
use guidebench_core::model::ModelSearch;
use guidebench_core::redact;
use guidebench_core::request::RequestStatus;
use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};

use super::feed::{FEED_BUFFER, FEED_PREPARED, Fed, Feed, FeedSource, to_job};
use super::plan::{DEFAULT_MAX_REQUESTS, Plan};
use crate::data::{OnError, PreparedSource};
use crate::planner::{Finished, Planner};
use crate::report::{BenchmarkReport, Report, client_saturation};
use crate::runner::{
    BenchmarkRun, Constraints, NoObserver, Observer, Phase, StopReason, Strategy, compact_measured,
    run_benchmark,
};
use crate::{Error, Result};

/// What a session tells whoever shows progress. Every method has a
/// default that does nothing.
pub trait Progress: Send {
    /// A step before the benchmarks (starting the backend, ...).
    fn phase(&mut self, message: &str) {
        let _ = message;
    }
    /// A benchmark starts; `total` is its request count when known. The
    /// observer sees its sends and records.
    fn benchmark(&mut self, label: &str, total: Option<u64>) -> Arc<dyn Observer> {
        let _ = (label, total);
        Arc::new(NoObserver)
    }
    /// A benchmark ended after `seconds`.
    fn benchmark_done(&mut self, label: &str, seconds: f64) {
        let _ = (label, seconds);
    }
}

/// Progress that shows nothing.
#[derive(Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {}

/// What a session reads and checks before the backend starts
/// ([`Session::prepare`]).
pub struct PreparedData {
    /// The `--tokenizer`, loaded (once the backend is up, the backend's
    /// where there is no `--tokenizer`).
    tokenizer: Option<Arc<dyn Tokenizer>>,
    /// Each data source's data, with what to do with a bad item.
    sources: Vec<(PreparedSource, OnError)>,
}

impl std::fmt::Debug for PreparedData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedData")
            .field("tokenizer", &self.tokenizer.is_some())
            .field("sources", &self.sources)
            .finish()
    }
}

/// A checked plan, ready to run.
#[derive(Debug)]
pub struct Session {
    plan: Plan,
}

impl Session {
    /// A session that will run `plan`.
    pub fn new(plan: Plan) -> Self {
        Session { plan }
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Starts `backend`, runs every benchmark of the plan, shuts the
    /// backend down, and returns the report. `cancel` turning true stops
    /// sending (requests in flight get the grace period) and marks the
    /// report interrupted.
    ///
    /// A data item that cannot become a request once the benchmarks have
    /// started stops the run: the report covers what ran, and
    /// [`Report::failure`] says why (with `on_error=skip` the item is
    /// counted instead).
    ///
    /// Everything that can fail without the backend is checked first
    /// ([`Session::prepare`]): a bad data file or row, a dataset missing
    /// from the cache or a tokenizer that cannot be loaded fails before the
    /// backend starts, so before a model loads.
    ///
    /// # Errors
    ///
    /// The data or tokenizer failing their checks (a usage error,
    /// [`Error::is_usage`]), the backend failing to start or validate, no
    /// tokenizer for data that needs one (synthetic prompts), or a data
    /// source or item that fails before the first request is sent.
    pub async fn run(
        &self,
        backend: Arc<dyn Backend>,
        progress: &mut dyn Progress,
        cancel: watch::Receiver<bool>,
    ) -> Result<Report> {
        let prepared = self.prepare()?;
        progress.phase("starting the backend and loading the model");
        let result = self.measure(&backend, prepared, progress, cancel).await;
        // Interrupted while the backend started (a model loading): the
        // load may still hold it, and the interrupt asks for an exit
        // within a second, so its shutdown is not waited for past that.
        let shutdown = match &result {
            Ok(report) if report.interrupted && report.benchmarks.is_empty() => {
                tokio::time::timeout(INTERRUPTED_SHUTDOWN, backend.shutdown())
                    .await
                    .unwrap_or(Ok(()))
            }
            _ => backend.shutdown().await,
        };
        let report = result?;
        shutdown?;
        Ok(report)
    }

    /// Everything that can be read and checked without the backend, done
    /// before it starts (so before a model loads): the `--tokenizer` file
    /// loaded, and every data source's data read and checked (a file's
    /// rows parsed and each made into a request, a dataset found in the
    /// cache).
    ///
    /// # Errors
    ///
    /// [`Error::Flag`] for a `--tokenizer` that cannot be loaded; a data
    /// file, dataset or row that fails (see [`PreparedSource::new`]), or a
    /// row that cannot become a request ([`Error::Item`]); all usage
    /// errors.
    pub fn prepare(&self) -> Result<PreparedData> {
        let plan = &self.plan;
        let tokenizer: Option<Arc<dyn Tokenizer>> = match &plan.tokenizer {
            Some(path) => {
                // A local file or folder as given, else a Hub name whose
                // tokenizer files are fetched into the cache.
                let path = if path.exists() {
                    path.clone()
                } else {
                    let search = ModelSearch::from_env();
                    let name = path.to_string_lossy();
                    search
                        .resolve_tokenizer(&name)
                        .map_err(|source| Error::HubTokenizer {
                            name: name.into_owned(),
                            cache: search.hub.cache.clone(),
                            source: Box::new(source),
                        })?
                };
                let loaded = if path.is_dir() {
                    HfTokenizer::from_dir(&path)
                } else {
                    HfTokenizer::from_file(&path)
                };
                Some(Arc::new(loaded.map_err(|e| Error::Flag {
                    flag: "--tokenizer",
                    reason: format!("cannot load `{}`: {e}", path.display()),
                })?))
            }
            None => None,
        };
        let sources = plan
            .data
            .iter()
            .map(|data| {
                Ok((
                    PreparedSource::new(data.args.clone(), data.on_error, plan.seed)?,
                    data.on_error,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        // Data read into memory (a file's rows) is made into requests once
        // here, so that a row the run cannot send (a `top_p` above 1)
        // fails before the backend starts too.
        for (source, on_error) in &sources {
            if *on_error == OnError::Skip || !source.checked_before_the_run() {
                continue;
            }
            let mut items = source.source(None)?;
            while let Some(item) = items.next_item()? {
                to_job(0, item, &plan.sampling)?;
            }
        }
        Ok(PreparedData { tokenizer, sources })
    }

    async fn measure(
        &self,
        backend: &Arc<dyn Backend>,
        prepared: PreparedData,
        progress: &mut dyn Progress,
        cancel: watch::Receiver<bool>,
    ) -> Result<Report> {
        let plan = &self.plan;
        // Ctrl-C while the backend starts (a model loading for seconds)
        // ends the run at once: the report says it was interrupted before
        // any benchmark, and is written as any interrupted report is.
        // (An in-process backend loads its model as it is validated.)
        let mut interrupted = cancel.clone();
        let validation = tokio::select! {
            validation = async {
                backend.startup().await?;
                backend.validate().await
            } => validation?,
            Ok(_) = interrupted.wait_for(|cancelled| *cancelled) => {
                tracing::info!("interrupted while the backend started");
                let mut report = Report::new(plan.config());
                report.interrupted = true;
                return Ok(report);
            }
        };
        let mut data = prepared;
        if data.tokenizer.is_none() {
            data.tokenizer = backend.tokenizer();
        }
        // A tokenizer is needed only to cut synthetic prompts to exact
        // counts; file prompts are counted by the backend without one.
        // A server's backend has none of its own: as GuideLLM does, the
        // tokenizer of the model id it serves is fetched from the Hub.
        if data.tokenizer.is_none()
            && data
                .sources
                .iter()
                .any(|(source, _)| source.needs_tokenizer())
        {
            data.tokenizer = Some(served_model_tokenizer(&validation).await?);
        }
        // Make every source once before the first benchmark: a failure
        // comes before anything is sent.
        for (source, _) in &data.sources {
            source.source(data.tokenizer.clone())?;
        }

        let mut report = Report::new(plan.config());
        report.environment.backend = validation.info.clone();
        if let Some(load) = validation.load_time {
            report
                .environment
                .backend
                .insert("load_time_s".into(), json!(load.as_secs_f64()));
        }
        if !plan.labels.is_empty() {
            report
                .environment
                .backend
                .insert("labels".into(), json!(plan.labels));
        }
        // What a backend says of itself may name its secrets (a target
        // URL with a password); the report keeps it redacted.
        redact::redact_object(&mut report.environment.backend);

        let mut planner = Planner::new(&plan.profile);
        let mut next = planner.next(None);
        // Requests completed and failed by the benchmarks so far, for the
        // global error rate.
        let (mut completed, mut errors) = (0u64, 0u64);
        while let Some(strategy) = next {
            let mut constraints = plan
                .constraints
                .for_benchmark(report.benchmarks.len())
                .clone();
            if let Some(global) = &mut constraints.max_global_error_rate {
                global.earlier_completed = completed;
                global.earlier_errors = errors;
            }
            let (mut run, fed, constraints) = self
                .one_benchmark(
                    backend,
                    &data,
                    &strategy,
                    constraints,
                    progress,
                    cancel.clone(),
                )
                .await?;
            let interrupted = run.stop_reason == StopReason::Interrupted;
            completed += run
                .records
                .iter()
                .filter(|r| r.status != RequestStatus::Incomplete)
                .count() as u64;
            errors += run
                .records
                .iter()
                .filter(|r| r.status == RequestStatus::Error)
                .count() as u64;
            let global_stop = constraints
                .max_global_error_rate
                .filter(|g| g.exceeded(completed, errors));
            let success_rate = run.success_rate();
            let mut benchmark = self.benchmark_report(&mut run, &constraints);
            if fed.skipped > 0 {
                benchmark
                    .extra
                    .insert("data_skipped".into(), json!(fed.skipped));
            }
            report.benchmarks.push(benchmark);
            if let Some(err) = fed.error {
                report.failure = Some(err.to_string());
                break;
            }
            if interrupted {
                report.interrupted = true;
                break;
            }
            if let Some(global) = global_stop {
                // Casts: counts far below 2^52.
                let rate = errors as f64 / completed as f64;
                let why = format!(
                    "max_global_error_rate: {errors} of the {completed} requests completed so far \
                     failed ({:.1} % > {:.1} %); no further benchmark was run",
                    rate * 100.0,
                    global.rate * 100.0
                );
                tracing::warn!("{why}");
                if let Some(last) = report.benchmarks.last_mut() {
                    last.extra
                        .insert("stop_reason".into(), json!(StopReason::MaxGlobalErrorRate));
                    last.extra.insert("run_stopped".into(), json!(why));
                }
                break;
            }
            next = planner.next(report.benchmarks.last().map(|benchmark| Finished {
                strategy: &strategy,
                report: benchmark,
                success_rate,
                stop: run.stop_reason,
            }));
        }
        report.conclusion = planner.conclusion();
        Ok(report)
    }

    /// The benchmark's report; the run's records are moved into it (the
    /// run keeps none).
    fn benchmark_report(
        &self,
        run: &mut BenchmarkRun,
        constraints: &Constraints,
    ) -> BenchmarkReport {
        let plan = &self.plan;
        let resolve =
            |phase: Phase| phase.resolve(constraints.max_requests, constraints.max_duration);
        let sent = run.records.len();
        let m = compact_measured(run, plan.warmup.map(resolve), plan.cooldown.map(resolve));
        let mut report = BenchmarkReport::new(
            run.strategy.label(),
            serde_json::to_value(&run.strategy).unwrap_or(Value::Null),
            m.start,
            m.end,
            m.records,
        );
        report.client = run.footprint;
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        if let Some(flag) = client_saturation(&report, run.end.secs_since(run.start), cores) {
            report.extra.insert(
                "client_saturated".into(),
                serde_json::to_value(flag).unwrap_or(Value::Null),
            );
        }
        if plan.warmup.is_some() {
            report.warmup_excluded = Some(m.warmup_excluded);
        }
        if plan.cooldown.is_some() {
            report.cooldown_excluded = Some(m.cooldown_excluded);
        }
        report.extra.insert(
            "stop_reason".into(),
            serde_json::to_value(run.stop_reason).unwrap_or(Value::Null),
        );
        report.extra.insert("requests_sent".into(), json!(sent));
        if let Some(saturation) = &run.saturation {
            report.extra.insert(
                "over_saturation".into(),
                serde_json::to_value(saturation).unwrap_or(Value::Null),
            );
        }
        if let Some(slo) = &plan.slo {
            report.apply_slo(slo);
        }
        report
    }

    async fn one_benchmark(
        &self,
        backend: &Arc<dyn Backend>,
        data: &PreparedData,
        strategy: &Strategy,
        mut constraints: Constraints,
        progress: &mut dyn Progress,
        cancel: watch::Receiver<bool>,
    ) -> Result<(BenchmarkRun, Fed, Constraints)> {
        let plan = &self.plan;
        let sources = data
            .sources
            .iter()
            .map(|(source, on_error)| {
                Ok(FeedSource {
                    kind: source.kind().to_owned(),
                    on_error: *on_error,
                    source: source.source(data.tokenizer.clone())?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // One request per row of every source: as many as the shortest
        // source has, known when every source says.
        let finite: Option<usize> = sources
            .iter()
            .map(|s| s.source.len_hint())
            .collect::<Option<Vec<usize>>>()
            .and_then(|lens| lens.into_iter().min());
        if constraints.is_unbounded() && finite.is_none() {
            constraints.max_requests = Some(DEFAULT_MAX_REQUESTS);
        }
        let total = match (
            constraints.max_requests.or(constraints.min_requests),
            finite,
        ) {
            (Some(n), Some(f)) => Some(n.min(f as u64)),
            (Some(n), None) => Some(n),
            (None, Some(f)) if constraints.max_duration.is_none() => Some(f as u64),
            _ => None,
        };
        let ahead = total.map_or(FEED_BUFFER, |n| {
            usize::try_from(n)
                .unwrap_or(FEED_PREPARED)
                .clamp(1, FEED_PREPARED)
        });
        let (mut rx, feed) = Feed::start(sources, plan.sampling.clone(), ahead).await?;

        let observer = progress.benchmark(&strategy.label(), total);
        let run = run_benchmark(
            Arc::clone(backend),
            &mut rx,
            strategy,
            &constraints,
            &plan.options,
            observer,
            cancel,
        )
        .await;
        // Dropping the receiver ends a feed still preparing items.
        drop(rx);
        progress.benchmark_done(&strategy.label(), run.end.secs_since(run.start));
        Ok((run, feed.finish(), constraints))
    }
}

/// How long an interrupt during the backend's start waits for its
/// shutdown (a model load that cannot stop) before the run ends anyway.
const INTERRUPTED_SHUTDOWN: Duration = Duration::from_millis(500);

/// The tokenizer of the model a backend serves (`info["model"]` of its
/// validation, a server's model id), fetched from the Hub by that id: the
/// tokenizer files only, never weights.
///
/// # Errors
///
/// [`Error::NoTokenizer`] when the backend names no model, or
/// [`Error::NoServedTokenizer`] saying what was tried with the id (a
/// local name such as `mock-model` is not a Hub name; a Hub repository
/// without `tokenizer.json`; the Hub's own error).
async fn served_model_tokenizer(validation: &ValidationReport) -> Result<Arc<dyn Tokenizer>> {
    let Some(model) = validation.info.get("model").and_then(|m| m.as_str()) else {
        return Err(Error::NoTokenizer);
    };
    let model = model.to_owned();
    let id = model.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        let dir = ModelSearch::from_env().resolve_tokenizer(&id)?;
        HfTokenizer::from_dir(&dir)
    })
    .await
    .map_err(|e| Error::NoServedTokenizer {
        model: model.clone(),
        usage: false,
        reason: format!("the tokenizer's download stopped: {e}"),
    })?;
    match loaded {
        Ok(tokenizer) => Ok(Arc::new(tokenizer)),
        Err(e) => Err(Error::NoServedTokenizer {
            model,
            usage: e.is_usage(),
            reason: e.to_string(),
        }),
    }
}
