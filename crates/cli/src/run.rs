//! `guidebench run`: the flags into bench's [`Flags`], the live display,
//! Ctrl-C, and the exit code; bench plans and runs the benchmarks (one
//! backend, or several side by side) and writes the report.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::anyhow;
use clap::Args;
use guidebench_bench::runner::Observer;
use guidebench_bench::scenario::Flags;
use guidebench_bench::session::Progress;
use guidebench_bench::side_by_side::RunProgress;
use tokio::sync::watch;

use crate::Failure;
use crate::display::Display;

mod rerun;

/// The default backend: the embedded default model on the candle engine
/// (generated on first use; no download).
#[cfg(feature = "candle")]
pub const DEFAULT_BACKEND: &str = "kind=offline,engine=candle,model=builtin:tiny";
/// The default backend: without the candle engine compiled in, the mock.
#[cfg(not(feature = "candle"))]
pub const DEFAULT_BACKEND: &str = "kind=offline,engine=mock";

/// Arguments of `guidebench run`. GuideLLM 0.8.1's spellings are accepted
/// where they mean the same (`--config`/`-c`, `-l`, `--disable-console`,
/// `--disable-console-interactive`, `--metrics`, `--override KEY VALUES`,
/// `--seed kind=static,value=N`, `--tokenizer kind=hf_auto,model=NAME`);
/// see docs/command-line.md.
#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// A JSON or YAML file with the same fields as these flags, or a GuideLLM scenario
    /// (metadata, spec, benchmarks); flags win.
    #[arg(long, short = 'c', visible_alias = "config")]
    scenario: Option<PathBuf>,
    /// The backend: `kind=NAME,key=value,...` (see `guidebench backends`), with the
    /// requests' sampling as `sampling.temperature=0.7,sampling.top_p=0.9,sampling.top_k=50,
    /// sampling.seed=1,sampling.stop=a;b,sampling.max_tokens=N,sampling.ignore_eos=true`.
    /// Repeat it to run the same data and profile against each backend in turn (each
    /// loaded before its own benchmarks and unloaded after) into one report.
    #[arg(long)]
    backend: Vec<String>,
    /// The data: `kind=NAME,key=value,...` (repeatable; several are merged into one
    /// request per row); the kinds are listed in help.
    #[arg(long)]
    data: Vec<String>,
    /// The load profile: `kind=NAME,key=value,...`; the kinds are listed in help.
    #[arg(long)]
    profile: Option<String>,
    /// Per-request latency objectives: `ttft=200ms,itl=50ms,itl_p95=80ms,tpot=60ms,latency=5s`
    /// (any subset); reports attainment and goodput, and the goodput profile searches by them.
    #[arg(long)]
    slo: Option<String>,
    /// GuideLLM's metrics options: `kind=generative,slo.ttft_ms=200,slo.tpot_ms=50`; its
    /// latency objectives become --slo (ttft_ms: ttft, tpot_ms: itl, e2el_ms: latency).
    #[arg(long)]
    metrics: Option<String>,
    /// When a benchmark stops: max_requests, min_requests, max_duration, max_errors,
    /// max_error_rate, max_global_error_rate, over_saturation (repeatable; a list value
    /// gives one value per benchmark).
    #[arg(long)]
    constraint: Vec<String>,
    /// Where the report goes besides the console table (repeatable): `kind=NAME,path=FILE`,
    /// or a file name whose extension picks the kind.
    #[arg(long)]
    output: Vec<String>,
    /// A tokenizer.json (or a model folder) for synthetic data, instead of the backend's;
    /// GuideLLM's `kind=hf_auto,model=PATH` too.
    #[arg(long)]
    tokenizer: Option<String>,
    /// Seed of the synthetic data and of Poisson arrivals: `N`, or GuideLLM's
    /// `kind=static,value=N`.
    #[arg(long)]
    seed: Option<String>,
    /// Left out of the metrics at the start: a request count (20), a time (10s) or a
    /// fraction of the benchmark (10%).
    #[arg(long)]
    warmup: Option<String>,
    /// Left out of the metrics at the end: a request count (20), a time (10s) or a
    /// fraction (10%).
    #[arg(long)]
    cooldown: Option<String>,
    /// How long requests in flight may finish once sending was cut off by a time or error
    /// constraint (default 30s); an interrupt (Ctrl-C) stops them at once instead.
    #[arg(long)]
    grace_period: Option<String>,
    /// A label for the report: `key=value` (repeatable).
    #[arg(long, short = 'l')]
    label: Vec<String>,
    /// No live progress display (it is also off when standard error is not a terminal).
    #[arg(long, visible_alias = "disable-console-interactive")]
    disable_progress: bool,
    /// Nothing on the console but errors: no summary table, no progress, no updates.
    #[arg(long, visible_alias = "disable-console-outputs")]
    disable_console: bool,
    /// Check everything the run would use (options, kinds, outputs, data files, the
    /// tokenizer) and exit without starting a backend: 0 when it would start, 2 with the
    /// first problem otherwise. Nothing is written.
    #[arg(long)]
    dry_run: bool,
    /// Sets one field on top of the scenario and the flags (repeatable):
    /// `profile.streams=1;2;4`, `constraint.max_requests.count=50`,
    /// `backend.KEY=V`, `data.KEY=V`, `slo.KEY=V`, `warmup=10%`, `seed=N`; or, as
    /// GuideLLM writes it, `--override profile.streams 1,2,4` (one benchmark per value).
    #[arg(long = "override", value_names = ["KEY=VALUE", "VALUES"], num_args = 1..=2)]
    overrides: Vec<String>,
    /// GuideLLM's data pipeline flags: their defaults are what guidebench
    /// does; anything else is refused with what to write instead.
    #[command(flatten)]
    pipeline: GuideLlmPipeline,
}

/// GuideLLM 0.8.1's data pipeline flags. Its defaults describe what
/// guidebench does anyway and are accepted; any other value is refused,
/// saying how guidebench does the same, except the column mapper's
/// `column_mappings`, which become column options of `--data`.
#[derive(Debug, Args, Default)]
struct GuideLlmPipeline {
    #[arg(long, hide = true)]
    data_column_mapper: Option<String>,
    #[arg(long = "data-preprocessor", hide = true)]
    data_preprocessors: Vec<String>,
    #[arg(long, hide = true)]
    data_finalizer: Option<String>,
    #[arg(long, hide = true)]
    data_loader: Option<String>,
}

/// The help of `--data`, `--profile` and `--output`, listing every kind
/// from the registries, so that help never lags behind them.
pub fn kinds_help(cmd: clap::Command) -> clap::Command {
    let (data, profiles, outputs) = guidebench_bench::help::kind_names();
    let help = |text: String| move |arg: clap::Arg| arg.help(text.clone()).long_help(text);
    cmd.mut_arg(
        "data",
        help(format!(
            "The data: `kind=NAME,key=value,...` (repeatable; several are merged into one request per row, as GuideLLM merges them), NAME one \
             of {data}; `guidebench backends` lists their options"
        )),
    )
    .mut_arg(
        "profile",
        help(format!(
            "The load profile: `kind=NAME,key=value,...`, NAME one of {profiles}"
        )),
    )
    .mut_arg(
        "output",
        help(format!(
            "Where the report goes besides the console table (repeatable): \
             `kind=NAME,path=FILE` with NAME one of {outputs} (a file kind without path \
             writes benchmarks.EXT here), or a file name whose extension picks the kind \
             (out.json, .csv, .html, .yaml, .png)"
        )),
    )
}

impl RunArgs {
    /// The flags as bench takes them.
    fn into_flags(self) -> Result<Flags, Failure> {
        use guidebench_bench::scenario::env;
        let pipeline = &self.pipeline;
        // The column mapper is checked here and applied by the plan.
        guidebench_bench::scenario::check_guidellm_pipeline(&[
            (
                "--data-column-mapper",
                pipeline.data_column_mapper.as_slice(),
            ),
            (
                "--data-preprocessor",
                pipeline.data_preprocessors.as_slice(),
            ),
            ("--data-finalizer", pipeline.data_finalizer.as_slice()),
            ("--data-loader", pipeline.data_loader.as_slice()),
        ])?;
        let overrides = guidebench_bench::scenario::overrides_from_args(&self.overrides)?;
        // GuideLLM's settings in the environment: every one refused is
        // named before anything runs; those read are said, as GuideLLM
        // says them (unless the console is off).
        let mut guidellm_env: Vec<(String, String)> = std::env::vars_os()
            .map(|(name, value)| {
                (
                    name.to_string_lossy().into_owned(),
                    value.to_string_lossy().into_owned(),
                )
            })
            .filter(|(name, _)| env::is_guidellm_var(name))
            .collect();
        guidellm_env.sort();
        let settings = env::EnvSettings::read(guidellm_env.clone())?;
        if !self.disable_console && !settings.used.is_empty() {
            eprintln!(
                "GuideLLM environment settings used (a scenario file and flags win over them): {}",
                settings.used.join(", ")
            );
        }
        Ok(Flags {
            scenario: self.scenario,
            backend: self.backend,
            data: self.data,
            profile: self.profile,
            slo: self.slo,
            constraint: self.constraint,
            output: self.output,
            tokenizer: self.tokenizer,
            seed: self.seed,
            warmup: self.warmup,
            cooldown: self.cooldown,
            grace_period: self.grace_period,
            label: self.label,
            disable_progress: self.disable_progress,
            disable_console: self.disable_console,
            metrics: self.metrics,
            data_column_mapper: self.pipeline.data_column_mapper,
            overrides,
            guidellm_env,
        })
    }
}

/// Runs `guidebench run`: every option is checked before the backend
/// starts; the session runs the benchmarks; the report is written even
/// when the run failed part-way.
pub fn run(args: RunArgs) -> Result<(), Failure> {
    // A report given as the scenario re-runs its recorded command, the
    // flags given now on top; the new report records that command.
    let (args, rerun) = rerun::resolve(args)?;
    if let Some(rerun) = &rerun
        && !args.disable_console
    {
        eprintln!(
            "re-running {}: {}",
            rerun.report.display(),
            guidebench_bench::scenario::command_line(rerun.words.clone())
        );
    }
    let dry_run = args.dry_run;
    let run = args.into_flags()?.plan(DEFAULT_BACKEND)?;
    if let Some(rerun) = &rerun {
        rerun.check_outputs(&run.outputs)?;
    }
    let quiet = run.quiet;
    let progress = run.progress && std::io::IsTerminal::is_terminal(&std::io::stderr());
    if dry_run {
        // What a run checks before its backend starts: every option and
        // backend, the data read and made into requests, the tokenizer
        // loaded.
        let backends = run.dry_run()?;
        if !quiet {
            eprintln!(
                "dry run: {backends} backend(s): every option, kind and output, the data and the \
                 tokenizer checked (the model is not loaded); nothing ran, nothing was written"
            );
        }
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(guidebench_bench::record::CLIENT_THREAD_NAME)
        .build()
        .map_err(|e| Failure::Run(anyhow!("cannot start the async runtime: {e}")))?;
    let (report, said) = runtime.block_on(async {
        let cancel = watch_interrupts();
        let mut display = Display::start(progress, quiet);
        let report = run.run(&mut display, cancel).await;
        (report, display.finish())
    });
    let mut report = match report {
        Ok(report) => report,
        // A Ctrl-C during a download (before any benchmark ran): nothing
        // to report, exit as interrupted.
        Err(err) if guidebench_hub::progress::downloads_cancelled() => {
            return Err(Failure::InterruptedEarly(err.into()));
        }
        Err(err) => return Err(err.into()),
    };
    if let Some(config) = report.config.as_object_mut() {
        let command = guidebench_bench::scenario::command_line(
            rerun.map_or_else(|| std::env::args().collect(), |rerun| rerun.words),
        );
        config.insert("command".into(), command.into());
    }

    crate::write_run_outputs(&run.outputs, &report, quiet)?;
    if report.interrupted {
        return Err(Failure::Interrupted);
    }
    if let Some(failure) = &report.failure {
        // Said once: a failure the display showed as it happened is not
        // repeated.
        if said.iter().any(|line| line == failure) {
            return Err(Failure::Run(anyhow!(
                "the run failed; the reason is printed above"
            )));
        }
        return Err(Failure::Run(anyhow!("{failure}")));
    }
    if !report.any_success() {
        return Err(Failure::Run(anyhow!("no request succeeded")));
    }
    Ok(())
}

/// How long a second Ctrl-C lets the process finish writing the report
/// before it exits anyway (with 130): long enough to write what was
/// recorded, short enough to feel immediate when something (an engine that
/// cannot stop mid-batch) holds the shutdown.
const SECOND_INTERRUPT_EXIT: std::time::Duration = std::time::Duration::from_millis(1500);

/// Ctrl-C: the first stops sending and interrupts the backend: requests
/// not handed to the engine or server yet are cancelled, generations and
/// streams stop at their next step or event with the tokens they have
/// (recorded as incomplete), and the partial report is written. A second
/// ends every wait at once and makes sure the process exits (130) shortly
/// after, whatever still runs.
fn watch_interrupts() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut seen = 0u32;
        while tokio::signal::ctrl_c().await.is_ok() {
            seen += 1;
            // Nobody listens once the benchmarks ended; the count still
            // matters then.
            let _ = tx.send(true);
            // A model, tokenizer or dataset downloading stops at its next
            // chunk, its part kept for the next run to resume.
            guidebench_hub::cancel_downloads();
            if seen == 2 {
                std::thread::spawn(|| {
                    std::thread::sleep(SECOND_INTERRUPT_EXIT);
                    eprintln!("interrupted twice: exiting without waiting any longer");
                    std::process::exit(130);
                });
            }
        }
    });
    rx
}

impl Progress for Display {
    fn phase(&mut self, message: &str) {
        Display::phase(self, message);
    }

    fn benchmark(&mut self, label: &str, total: Option<u64>) -> Arc<dyn Observer> {
        Arc::new(Display::benchmark(self, label, total))
    }

    fn benchmark_done(&mut self, label: &str, seconds: f64) {
        Display::benchmark_done(self, label, seconds);
    }
}

impl RunProgress for Display {
    fn note(&mut self, line: &str) {
        Display::failure(self, line);
    }
}
