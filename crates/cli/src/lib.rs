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

mod display;
mod engines;
#[cfg(feature = "openai")]
mod mock_server;
mod run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use guidebench_bench::outputs::{self, OUTPUT_KINDS, Output};
use guidebench_bench::report::Report;
use guidebench_core::options::OptionSpec;
use guidebench_core::registry;

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
    MockServer(mock_server::MockServerArgs),
}

/// Arguments of `guidebench export`.
#[derive(Debug, clap::Args)]
struct ExportArgs {
    /// A report written by `--output kind=json,path=FILE`.
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
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GUIDEBENCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
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
            eprintln!("error: {err:#}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(Failure::Run(err)) => {
            eprintln!("error: {err:#}");
            ExitCode::from(EXIT_FAILURE)
        }
        Err(Failure::Interrupted) => {
            eprintln!("interrupted: the report covers what ran before the interrupt");
            ExitCode::from(EXIT_INTERRUPTED)
        }
    }
}

fn print_options(options: &[OptionSpec]) {
    for spec in options {
        let default = spec
            .default_text()
            .map(|d| format!(" (default {d})"))
            .unwrap_or_default();
        let required = if spec.required { " (required)" } else { "" };
        println!(
            "      {:<22} {:<9} {}{}{}",
            spec.name,
            guidebench_core::options::describe_type(spec.ty),
            spec.description,
            default,
            required
        );
    }
}

fn export(args: &ExportArgs) -> Result<(), Failure> {
    let report = Report::read_json(&args.file)?;
    let outputs = outputs::parse_all(&args.output)?;
    write_outputs(&outputs, &report)
}

/// Writes the report to every output; each failure is shown, and the
/// first one is the run's failure.
pub(crate) fn write_outputs(outputs: &[Output], report: &Report) -> Result<(), Failure> {
    let Err(failures) = outputs::write_all(outputs, report) else {
        return Ok(());
    };
    let mut first = None;
    for err in failures.into_iter().map(anyhow::Error::from) {
        eprintln!("error: {err:#}");
        first.get_or_insert(err);
    }
    first.map_or(Ok(()), |err| Err(Failure::Run(err)))
}

fn compare(args: &CompareArgs) -> Result<(), Failure> {
    let outputs = guidebench_bench::compare::CompareOutputs {
        json: args.json.as_deref(),
        html: args.html.as_deref(),
    };
    guidebench_bench::compare::compare_reports(&args.reports, outputs, |text| print!("{text}"))?;
    Ok(())
}

/// One part of `guidebench backends`: a title, then each kind's name,
/// one line about it (empty for kinds listed by name only) and its
/// options.
struct OptionSection {
    title: &'static str,
    kinds: Vec<(&'static str, &'static str, &'static [OptionSpec])>,
}

/// Every option list a user can set, as `guidebench backends` prints them.
fn option_sections() -> Result<Vec<OptionSection>, Failure> {
    let named = |kinds: &[(&'static str, &'static [OptionSpec])]| {
        kinds
            .iter()
            .map(|(name, options)| (*name, "", *options))
            .collect()
    };
    let mut sections = vec![
        OptionSection {
            title: "Backend kinds (--backend kind=NAME,...):",
            kinds: (registry::backends()?.iter())
                .map(|b| (b.name, b.description, b.options))
                .collect(),
        },
        OptionSection {
            title: "Engines (--backend kind=offline,engine=NAME,...):",
            kinds: (registry::engines()?.iter())
                .map(|e| (e.name, e.description, e.options))
                .collect(),
        },
        OptionSection {
            title: "Sampling (--backend ...,sampling.KEY=VALUE; a data row's own column wins):",
            kinds: vec![("", "", guidebench_bench::session::SAMPLING_OPTIONS)],
        },
        OptionSection {
            title: "Data (--data kind=NAME,...):",
            kinds: (guidebench_bench::data::DATA_KINDS.iter())
                .map(|k| (k.name, "", k.options))
                .collect(),
        },
        OptionSection {
            title: "Profiles (--profile kind=NAME,...):",
            kinds: named(guidebench_bench::runner::PROFILE_KINDS),
        },
        OptionSection {
            title: "Constraints (--constraint kind=NAME,...):",
            kinds: named(guidebench_bench::runner::CONSTRAINT_KINDS),
        },
        OptionSection {
            title: "Objectives (--slo KEY=VALUE,...):",
            kinds: vec![("", "", guidebench_bench::slo::SLO_OPTIONS)],
        },
        OptionSection {
            title: "Outputs (--output kind=NAME,...):",
            kinds: OUTPUT_KINDS
                .iter()
                .map(|k| (k.name, "", k.options))
                .collect(),
        },
    ];
    #[cfg(feature = "openai")]
    sections.push(OptionSection {
        title: "Mock server (guidebench mock-server --set KEY=VALUE):",
        kinds: vec![("mock-server", "", guidebench_openai::mock_server::OPTIONS)],
    });
    Ok(sections)
}

fn list_backends() -> Result<(), Failure> {
    for (i, section) in option_sections()?.iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("{}", section.title);
        for (name, description, options) in &section.kinds {
            match (*name, *description) {
                ("", _) => {}
                (name, "") => println!("  {name}"),
                (name, description) => println!("  {name:<14} {description}"),
            }
            print_options(options);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec that names a typed default (`default_from`) whose struct has
    /// no field of the spec's name would print no default at all: every
    /// such spec, in every list `guidebench backends` prints, resolves.
    #[test]
    fn every_default_help_prints_comes_from_a_field_of_its_typed_struct() {
        let mut checked = 0;
        let Ok(sections) = option_sections() else {
            panic!("the registries do not load");
        };
        for section in sections {
            for (kind, _, options) in &section.kinds {
                for spec in options.iter().filter(|spec| spec.default.is_some()) {
                    assert!(
                        spec.default_text().is_some(),
                        "{} {kind}: `{}` names {:?}, which has no such field",
                        section.title,
                        spec.name,
                        spec.default,
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 50, "only {checked} defaults were checked");
    }
}
