//! # guidebench
//!
//! The `guidebench` command line as a library, so that a third party can
//! build a `guidebench` binary that also contains its own engines or
//! backends:
//!
//! ```no_run
//! // In the third party's binary crate:
//! // use my_engine_crate as _; // links the crate, and so its registrations
//! fn main() -> std::process::ExitCode {
//!     guidebench::main()
//! }
//! ```
//!
//! Exit codes: 0 success, 1 the run failed, 2 bad usage (a wrong option,
//! an unknown name, a missing file).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod display;
mod engines;
#[cfg(feature = "openai")]
mod mock_server;
mod run;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use guidebench_bench::outputs::{self, Output};
use guidebench_bench::report::Report;

/// Benchmark LLM inference: TTFT, ITL, TPOT, latency and throughput.
#[derive(Debug, Parser)]
#[command(name = "guidebench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a benchmark.
    Run(Box<run::RunArgs>),
    /// List the registered backend kinds and engines with their options.
    Backends,
    /// Re-render a saved JSON report.
    Export(ExportArgs),
    /// Compare saved JSON reports (or the backends of one) benchmark by
    /// benchmark, saying which differences are beyond chance.
    Compare(CompareArgs),
    /// Serve an OpenAI-compatible mock server with configurable latencies and faults.
    #[cfg(feature = "openai")]
    MockServer(Box<mock_server::MockServerArgs>),
}

/// Arguments of `guidebench export`.
#[derive(Debug, clap::Args)]
struct ExportArgs {
    /// A report written by `--output kind=json,path=FILE`, or GuideLLM
    /// 0.8.1's `benchmarks.json` (default: `benchmarks.json` here, as in
    /// GuideLLM).
    #[arg(default_value = "benchmarks.json")]
    file: std::path::PathBuf,
    /// Where it goes: console, json, yaml, csv, html, plot (repeatable;
    /// default console).
    #[arg(long)]
    output: Vec<String>,
}

/// Arguments of `guidebench compare`.
#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// Saved reports (`--output kind=json,path=FILE`): the first is the
    /// baseline and each other is compared with it. A report of several
    /// backends side by side counts as one run per backend, so one such
    /// report compares its backends.
    #[arg(required = true, num_args = 1..)]
    reports: Vec<std::path::PathBuf>,
    /// Write the comparison as JSON to this file as well (one object; an
    /// array of them, one per candidate, with more than two runs).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Write a self-contained HTML page to this file as well: the
    /// differences, and every run's load curves, distributions and
    /// timelines overlaid, one colour per run.
    #[arg(long)]
    html: Option<std::path::PathBuf>,
}

/// Exit code: the run failed.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code: bad usage.
pub const EXIT_USAGE: u8 = 2;

/// Exit code: interrupted by Ctrl-C (a partial report was written).
pub const EXIT_INTERRUPTED: u8 = 130;

/// An error of the binary, with the exit code it maps to.
pub(crate) enum Failure {
    /// Bad usage: exit 2.
    Usage(anyhow::Error),
    /// The run failed: exit 1.
    Run(anyhow::Error),
    /// Interrupted; the partial report was written: exit 130.
    Interrupted,
    /// Interrupted before any benchmark ran (during a download): exit
    /// 130, no report.
    InterruptedEarly(anyhow::Error),
}

impl From<guidebench_bench::Error> for Failure {
    fn from(err: guidebench_bench::Error) -> Self {
        if err.is_usage() {
            Failure::Usage(err.into())
        } else {
            Failure::Run(err.into())
        }
    }
}

impl From<guidebench_core::Error> for Failure {
    fn from(err: guidebench_core::Error) -> Self {
        if err.is_usage() {
            Failure::Usage(err.into())
        } else {
            Failure::Run(err.into())
        }
    }
}

/// Runs the command line with the process's arguments and returns the
/// exit code.
pub fn main() -> ExitCode {
    let command = Cli::command().mut_subcommand("run", |run| guidellm_flags(run::kinds_help(run)));
    let matches = command.get_matches();
    if let Some(message) = matches
        .subcommand_matches("run")
        .and_then(guidellm_flag_given)
    {
        eprintln!("error: {message}");
        return ExitCode::from(EXIT_USAGE);
    }
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    // GUIDEBENCH_LOG, else GuideLLM's console log level
    // (GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL, loguru's levels; `run`
    // refuses one that is no level), else warnings.
    // A set GUIDEBENCH_LOG that is no filter is bad usage, said before
    // anything runs, not silently replaced.
    let filter = match log_filter(std::env::var_os(LOG_VAR)) {
        Ok(Some(filter)) => filter,
        Ok(None) => {
            let vars = std::env::vars_os().filter_map(|(name, value)| {
                Some((name.into_string().ok()?, value.into_string().ok()?))
            });
            tracing_subscriber::EnvFilter::new(
                guidebench_bench::scenario::env::console_log_filter(vars).unwrap_or("warn"),
            )
        }
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| PlainUnlessTerminal)
        .init();
    let result = match cli.command {
        Command::Backends => list_backends(),
        Command::Run(args) => run::run(*args),
        Command::Export(args) => export(&args),
        Command::Compare(args) => compare(&args),
        #[cfg(feature = "openai")]
        Command::MockServer(args) => mock_server::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(err)) => {
            eprintln!("error: {}", one_line(&err));
            ExitCode::from(EXIT_USAGE)
        }
        Err(Failure::Run(err)) => {
            eprintln!("error: {}", one_line(&err));
            ExitCode::from(EXIT_FAILURE)
        }
        Err(Failure::Interrupted) => {
            eprintln!("interrupted: the report covers what ran before the interrupt");
            ExitCode::from(EXIT_INTERRUPTED)
        }
        Err(Failure::InterruptedEarly(err)) => {
            eprintln!("interrupted before the run: {}", one_line(&err));
            ExitCode::from(EXIT_INTERRUPTED)
        }
    }
}

/// An error and its causes on one line, joined by `: `, each said once: a
/// cause whose text the line already holds (an error whose message shows
/// its source, and which also returns it as its source) is left out.
fn one_line(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

/// The environment variable of guidebench's own log filter.
const LOG_VAR: &str = "GUIDEBENCH_LOG";

/// The log filter `GUIDEBENCH_LOG` gives: `None` when it is unset or
/// empty; an error naming the variable and the parse error when it is set
/// to something that is no filter (`guidebench=loud`).
fn log_filter(
    value: Option<std::ffi::OsString>,
) -> Result<Option<tracing_subscriber::EnvFilter>, String> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let Some(text) = value.to_str() else {
        return Err(format!("{LOG_VAR} is not UTF-8 text"));
    };
    tracing_subscriber::EnvFilter::try_new(text)
        .map(Some)
        .map_err(|e| {
            format!(
                "{LOG_VAR}=`{text}` is not a log filter: {e} (e.g. {LOG_VAR}=info or \
                 {LOG_VAR}=guidebench=debug,warn)"
            )
        })
}

/// GuideLLM's earlier top-level flags of `guidellm benchmark` (before its
/// scenario-shaped options), which `guidebench run` does not have, with
/// what to write instead: `{}` stands for the value given.
const GUIDELLM_FLAGS: &[(&str, &str)] = &[
    ("target", "--backend kind=openai_http,target={}"),
    (
        "backend-type",
        "--backend kind={} (a server: kind=openai_http; in process: kind=offline,engine=NAME)",
    ),
    (
        "backend-args",
        "the options on --backend: --backend kind=NAME,KEY=VALUE,...",
    ),
    ("model", "--backend KIND,...,model={}"),
    ("processor", "--tokenizer {}"),
    (
        "data-args",
        "the options on --data: --data kind=NAME,KEY=VALUE,...",
    ),
    ("rate-type", "--profile kind={}"),
    (
        "rate",
        "the profile's own option: --profile kind=constant,rate={} (or poisson; \
         kind=concurrent,streams={} for concurrent)",
    ),
    ("max-seconds", "--constraint kind=max_duration,seconds={}"),
    ("max-requests", "--constraint kind=max_requests,count={}"),
    ("max-errors", "--constraint kind=max_errors,count={}"),
    ("max-error-rate", "--constraint kind=max_error_rate,rate={}"),
    (
        "max-global-error-rate",
        "--constraint kind=max_global_error_rate,rate={}",
    ),
    ("random-seed", "--seed {}"),
    ("output-path", "--output {}"),
    (
        "warmup-percent",
        "--warmup P% (a fraction 0.1 is --warmup 10%)",
    ),
    (
        "cooldown-percent",
        "--cooldown P% (a fraction 0.1 is --cooldown 10%)",
    ),
];

/// `run` with [`GUIDELLM_FLAGS`] as hidden flags, so that each is answered
/// with what to write instead ([`guidellm_flag_given`]) rather than clap's
/// "unexpected argument".
fn guidellm_flags(run: clap::Command) -> clap::Command {
    GUIDELLM_FLAGS.iter().fold(run, |run, (flag, _)| {
        run.arg(
            clap::Arg::new(*flag)
                .long(*flag)
                .hide(true)
                .num_args(0..=1)
                .action(clap::ArgAction::Append),
        )
    })
}

/// The usage error for the first of [`GUIDELLM_FLAGS`] given to `run`.
fn guidellm_flag_given(run: &clap::ArgMatches) -> Option<String> {
    GUIDELLM_FLAGS.iter().find_map(|(flag, instead)| {
        let mut values = run.get_many::<String>(flag)?;
        let value = values.next().map_or("N", String::as_str);
        Some(format!(
            "--{flag} is GuideLLM's flag, not guidebench's: write {}",
            instead.replace("{}", value)
        ))
    })
}

fn export(args: &ExportArgs) -> Result<(), Failure> {
    let report = Report::read_json(&args.file)?;
    let outputs = outputs::parse_all_or(&args.output, outputs::export_defaults)?;
    outputs::check_all(&outputs)?;
    write_outputs(&outputs, &report)
}

/// Writes the report to every output and says on standard error which
/// files it wrote; the failures are the run's failure, one line each,
/// printed once (by [`main`]).
pub(crate) fn write_outputs(outputs: &[Output], report: &Report) -> Result<(), Failure> {
    match outputs::write_all(outputs, report) {
        Ok(written) => {
            say_written(&written);
            Ok(())
        }
        Err((failures, written)) => {
            say_written(&written);
            Err(Failure::Run(anyhow::anyhow!(
                "{}",
                failure_lines(&failures, None)
            )))
        }
    }
}

/// One `wrote FILE (WHAT, N benchmarks)` line per file written, on
/// standard error (standard output holds the console report).
fn say_written(written: &[String]) {
    for line in written {
        eprintln!("wrote {line}");
    }
}

/// Writes a run's report to every output and lists the files written;
/// when a file could not be written and no JSON output holds the report,
/// the report goes to a fallback file whose path ends the message.
/// With `quiet` (`--disable-console`), the files written are not listed.
pub(crate) fn write_run_outputs(
    outputs: &[Output],
    report: &Report,
    quiet: bool,
) -> Result<(), Failure> {
    let failed = match outputs::write_all_keeping(outputs, report) {
        Ok(written) => {
            if !quiet {
                say_written(&written);
            }
            return Ok(());
        }
        Err(failed) => failed,
    };
    if !quiet {
        say_written(&failed.written);
    }
    Err(Failure::Run(anyhow::anyhow!(
        "{}",
        failure_lines(&failed.failures, failed.fallback.as_ref())
    )))
}

/// Each failure on its own line (the first follows `error: `), then where
/// the report went instead.
fn failure_lines(
    failures: &[guidebench_bench::Error],
    fallback: Option<&Result<std::path::PathBuf, guidebench_bench::Error>>,
) -> String {
    let mut lines: Vec<String> = failures.iter().map(outputs::failure_message).collect();
    match fallback {
        Some(Ok(path)) => lines.push(format!(
            "the report was written to {} instead",
            path.display()
        )),
        Some(Err(err)) => lines.push(format!(
            "the report could not be kept either: {}",
            outputs::failure_message(err)
        )),
        None => {}
    }
    lines.join("\nerror: ")
}

/// Standard error for logs, with the colour codes taken out whenever it is
/// not a terminal: a log file (the live display sends standard error to
/// one while it is on screen) or a pipe gets plain text.
struct PlainUnlessTerminal;

impl Write for PlainUnlessTerminal {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut stderr = std::io::stderr().lock();
        if std::io::IsTerminal::is_terminal(&stderr) {
            stderr.write_all(buf)?;
        } else {
            stderr.write_all(&anstream::adapter::strip_bytes(buf).into_vec())?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

fn compare(args: &CompareArgs) -> Result<(), Failure> {
    let outputs = guidebench_bench::compare::CompareOutputs {
        json: args.json.as_deref(),
        html: args.html.as_deref(),
    };
    guidebench_bench::compare::compare_reports(&args.reports, outputs, |text| print!("{text}"))?;
    Ok(())
}

fn list_backends() -> Result<(), Failure> {
    // The mock server's options come with the openai feature.
    let extra: &[guidebench_bench::help::OptionSection] = &[
        #[cfg(feature = "openai")]
        guidebench_bench::help::OptionSection {
            title: "Mock server (guidebench mock-server --set KEY=VALUE):",
            kinds: vec![("mock-server", "", guidebench_openai::mock_server::OPTIONS)],
        },
    ];
    let mut sections = guidebench_bench::help::option_sections(extra.to_vec())?;
    engines::list_absent_apart(&mut sections);
    print!("{}", guidebench_bench::help::options_text(&sections));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_that_shows_its_source_prints_it_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let err = anyhow::Error::from(guidebench_core::Error::Io {
            path: "r.json".into(),
            source: io,
        });
        assert_eq!(one_line(&err), "cannot read `r.json`: No such file");
        let err = anyhow::anyhow!("inner cause").context("outer");
        assert_eq!(one_line(&err), "outer: inner cause");
    }
}
