//! `guidebench run -c REPORT`: a report guidebench wrote re-runs the
//! command that ran it, with the flags given now on top (GuideLLM's reports
//! are read as scenarios by bench: [`guidebench_bench::scenario::rerun`]).

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::{Parser, Subcommand};
use guidebench_bench::outputs::Output;
use guidebench_bench::scenario::rerun::{ReportSettings, read_report_settings};
use guidebench_core::redact::REDACTED;

use super::RunArgs;
use crate::Failure;

/// The recorded command line, parsed as the binary parses it.
#[derive(Debug, Parser)]
#[command(name = "guidebench")]
struct Recorded {
    #[command(subcommand)]
    command: RecordedCommand,
}

#[derive(Debug, Subcommand)]
enum RecordedCommand {
    Run(Box<RunArgs>),
}

/// A re-run of a report.
pub(super) struct Rerun {
    /// The report given as the scenario.
    pub(super) report: PathBuf,
    /// The command line that runs now, program first (recorded in the new
    /// report).
    pub(super) words: Vec<String>,
}

impl Rerun {
    /// Refuses an output that would write over the report being re-run
    /// (`benchmarks.json`, the default, in the report's own folder).
    pub(super) fn check_outputs(&self, outputs: &[Output]) -> Result<(), Failure> {
        let same = |path: &Path| match (path.canonicalize(), self.report.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        match outputs
            .iter()
            .filter_map(Output::path)
            .find(|path| same(path))
        {
            Some(path) => Err(Failure::Usage(anyhow!(
                "the re-run would write over the report it repeats, {}; give another file with \
                 --output (e.g. --output rerun.json)",
                path.display()
            ))),
            None => Ok(()),
        }
    }
}

/// The run's arguments: when `--scenario` names a report guidebench wrote,
/// its recorded command with `args` on top, and the [`Rerun`]; otherwise
/// `args` as they are.
///
/// # Errors
///
/// A usage failure for a report that cannot be read or re-run, a recorded
/// command that no longer parses, or one that hides a secret (redacted
/// when the report was written) that the flags do not give again.
pub(super) fn resolve(args: RunArgs) -> Result<(RunArgs, Option<Rerun>), Failure> {
    let Some(path) = args.scenario.clone() else {
        return Ok((args, None));
    };
    if !path.is_file() {
        return Ok((args, None));
    }
    let Some(ReportSettings::Command(words)) = read_report_settings(&path)? else {
        return Ok((args, None));
    };
    let usage = |why: String| Failure::Usage(anyhow!("{}: {why}", path.display()));
    let recorded = Recorded::try_parse_from(&words)
        .map_err(|e| usage(format!("its recorded command no longer parses: {e}")))?;
    let RecordedCommand::Run(recorded) = recorded.command;
    let secret_given =
        !args.backend.is_empty() || args.overrides.iter().any(|o| o.starts_with("backend."));
    if let Some(word) = words.iter().find(|w| w.contains(REDACTED))
        && !secret_given
    {
        return Err(usage(format!(
            "its command hides a secret (`{word}`), which was not kept; give it again with \
             --override backend.KEY=VALUE, or the whole --backend"
        )));
    }
    let merged = args.over(*recorded);
    if merged.scenario.as_deref() == Some(path.as_path()) {
        return Err(usage(
            "its recorded command re-runs the report itself (-c with the same file)".to_owned(),
        ));
    }
    let words = merged.to_words();
    Ok((
        merged,
        Some(Rerun {
            report: path,
            words,
        }),
    ))
}

/// The kind of a `kind=…` argument (or a JSON object's), to match
/// constraints given now with the recorded ones.
fn kind_of(arg: &str) -> String {
    guidebench_core::options::parse_kind_args(arg)
        .map(|args| args.kind)
        .unwrap_or_else(|_| arg.to_owned())
}

impl RunArgs {
    /// These flags on top of `recorded`: each flag given now replaces the
    /// recorded one (a constraint only the recorded one of its kind);
    /// labels and overrides add to the recorded ones; the outputs are only
    /// these (or the defaults): a re-run does not write over the files of
    /// the run it repeats.
    fn over(self, recorded: RunArgs) -> RunArgs {
        let list = |now: Vec<String>, then: Vec<String>| if now.is_empty() { then } else { now };
        let given: Vec<String> = self.constraint.iter().map(|c| kind_of(c)).collect();
        let mut constraint: Vec<String> = recorded
            .constraint
            .into_iter()
            .filter(|c| !given.contains(&kind_of(c)))
            .collect();
        constraint.extend(self.constraint);
        let mut label = recorded.label;
        label.extend(self.label);
        let mut overrides = recorded.overrides;
        overrides.extend(self.overrides);
        let pipeline = super::GuideLlmPipeline {
            data_column_mapper: self
                .pipeline
                .data_column_mapper
                .or(recorded.pipeline.data_column_mapper),
            data_preprocessors: list(
                self.pipeline.data_preprocessors,
                recorded.pipeline.data_preprocessors,
            ),
            data_finalizer: self
                .pipeline
                .data_finalizer
                .or(recorded.pipeline.data_finalizer),
            data_loader: self.pipeline.data_loader.or(recorded.pipeline.data_loader),
        };
        RunArgs {
            scenario: recorded.scenario,
            backend: list(self.backend, recorded.backend),
            data: list(self.data, recorded.data),
            profile: self.profile.or(recorded.profile),
            slo: self.slo.or(recorded.slo),
            metrics: self.metrics.or(recorded.metrics),
            constraint,
            output: self.output,
            tokenizer: self.tokenizer.or(recorded.tokenizer),
            seed: self.seed.or(recorded.seed),
            warmup: self.warmup.or(recorded.warmup),
            cooldown: self.cooldown.or(recorded.cooldown),
            grace_period: self.grace_period.or(recorded.grace_period),
            label,
            disable_progress: self.disable_progress,
            disable_console: self.disable_console,
            dry_run: self.dry_run,
            overrides,
            pipeline,
        }
    }

    /// The arguments as a `guidebench run` command line, program first.
    fn to_words(&self) -> Vec<String> {
        let mut words = vec!["guidebench".to_owned(), "run".to_owned()];
        let mut flag = |name: &str, value: &str| words.push(format!("--{name}={value}"));
        if let Some(scenario) = &self.scenario {
            flag("scenario", &scenario.to_string_lossy());
        }
        let single = [
            ("profile", &self.profile),
            ("slo", &self.slo),
            ("metrics", &self.metrics),
            ("tokenizer", &self.tokenizer),
            ("seed", &self.seed),
            ("warmup", &self.warmup),
            ("cooldown", &self.cooldown),
            ("grace-period", &self.grace_period),
            ("data-column-mapper", &self.pipeline.data_column_mapper),
            ("data-finalizer", &self.pipeline.data_finalizer),
            ("data-loader", &self.pipeline.data_loader),
        ];
        let lists = [
            ("backend", &self.backend),
            ("data", &self.data),
            ("constraint", &self.constraint),
            ("output", &self.output),
            ("label", &self.label),
            ("data-preprocessor", &self.pipeline.data_preprocessors),
            // Pairs (`KEY VALUES`) stay pairs: the flat list is read two
            // by two where an item has no `=`.
            ("override", &self.overrides),
        ];
        for (name, values) in lists {
            for value in values {
                flag(name, value);
            }
        }
        for (name, value) in single {
            if let Some(value) = value {
                flag(name, value);
            }
        }
        if self.disable_progress {
            words.push("--disable-progress".to_owned());
        }
        if self.disable_console {
            words.push("--disable-console".to_owned());
        }
        words
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> RunArgs {
        let RecordedCommand::Run(args) = Recorded::try_parse_from(words).expect("parses").command;
        *args
    }

    #[test]
    fn flags_given_now_replace_the_recorded_ones_and_the_outputs_are_not_repeated() {
        let recorded = parse(&[
            "guidebench",
            "run",
            "--backend",
            "kind=offline,engine=mock",
            "--data",
            "kind=synthetic_text,prompt_tokens=8,output_tokens=2",
            "--constraint",
            "kind=max_requests,count=4",
            "--constraint",
            "kind=max_duration,seconds=9",
            "--output",
            "old.json",
            "--label",
            "a=1",
            "--override",
            "profile.streams",
            "1,2",
        ]);
        let now = parse(&[
            "guidebench",
            "run",
            "--constraint",
            "kind=max_requests,count=10",
            "--label",
            "b=2",
            "--seed",
            "7",
        ]);
        let merged = now.over(recorded);
        assert_eq!(merged.backend, ["kind=offline,engine=mock"]);
        assert_eq!(
            merged.constraint,
            ["kind=max_duration,seconds=9", "kind=max_requests,count=10"]
        );
        assert!(merged.output.is_empty(), "{:?}", merged.output);
        assert_eq!(merged.label, ["a=1", "b=2"]);
        assert_eq!(merged.seed.as_deref(), Some("7"));
        // The command it records parses back to the same arguments.
        let again = parse(
            &merged
                .to_words()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert_eq!(format!("{again:?}"), format!("{merged:?}"));
    }
}
