//! The flags of a run and its scenario file merged into plans: a flag given
//! wins over the file's field, and `--override` applies on top of both.
//!
//! GuideLLM 0.8.1's spellings of the same flags are read here too, where
//! the meaning is the same: `--seed kind=static,value=N`,
//! `--tokenizer kind=hf_auto,model=NAME`, `--metrics
//! kind=generative,slo.ttft_ms=200` and `--disable-console`. Each is held
//! by a test below; an option whose meaning differs is refused with what to
//! write instead.

use std::path::PathBuf;

use guidebench_core::options::parse_kind_args;
use serde_json::{Value, json};

use super::column_mapper::{ColumnMappings, MAPPER_FLAG};
use super::env::EnvSettings;
use super::file::Scenario;
use super::guidellm;
use super::overrides::{apply_overrides, override_from_pair};
use super::read::read_value;
use super::run_plan::RunPlan;
use crate::outputs::{self, Output};
use crate::session::{BackendArgs, PlanArgs};
use crate::{Error, Result};

/// The flags of `guidebench run`, as given (each empty or absent when not
/// given).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--scenario`: a scenario file.
    pub scenario: Option<PathBuf>,
    /// `--backend` (repeatable: several run side by side).
    pub backend: Vec<String>,
    /// `--data` (repeatable).
    pub data: Vec<String>,
    /// `--profile`.
    pub profile: Option<String>,
    /// `--slo`.
    pub slo: Option<String>,
    /// `--constraint` (repeatable).
    pub constraint: Vec<String>,
    /// `--output` (repeatable).
    pub output: Vec<String>,
    /// `--tokenizer`: a path, or GuideLLM's `kind=hf_auto,model=NAME`.
    pub tokenizer: Option<String>,
    /// `--seed`: a number, or GuideLLM's `kind=static,value=N`.
    pub seed: Option<String>,
    /// `--warmup`.
    pub warmup: Option<String>,
    /// `--cooldown`.
    pub cooldown: Option<String>,
    /// `--grace-period`.
    pub grace_period: Option<String>,
    /// `--label key=value` (repeatable).
    pub label: Vec<String>,
    /// `--disable-progress`.
    pub disable_progress: bool,
    /// `--disable-console`: no summary table, progress or updates on the
    /// console.
    pub disable_console: bool,
    /// `--metrics`: GuideLLM's metrics options (its `slo` becomes `--slo`).
    pub metrics: Option<String>,
    /// `--data-column-mapper`: GuideLLM's column mappings, each becoming
    /// a column option of every `--data` that has columns (see
    /// `scenario::column_mapper`).
    pub data_column_mapper: Option<String>,
    /// `--override KEY=VALUE` (repeatable).
    pub overrides: Vec<String>,
    /// GuideLLM's settings from the environment, as (name, value) pairs
    /// (others are left alone): read below the scenario file and the
    /// flags, or refused by name (see [`super::env`]).
    pub guidellm_env: Vec<(String, String)>,
}

impl Flags {
    /// The flags, the scenario file and GuideLLM's environment settings
    /// merged (flags win over the file, the file over the environment)
    /// into what the session takes, one plan per backend, each
    /// `--backend` parsed here once ([`BackendArgs::parse`]);
    /// `default_backend` runs when none names one.
    ///
    /// # Errors
    ///
    /// A GuideLLM environment setting guidebench refuses
    /// ([`Error::Env`], naming every one), a scenario file that cannot be
    /// read or mapped, a malformed `--backend` or a sampling field it
    /// gives that is wrong (see [`BackendArgs::parse`]), a malformed
    /// `--label`, `--output`, `--seed`, `--tokenizer`, `--metrics`,
    /// `--data-column-mapper` or `--override`, a column mapping that does
    /// not fit the data, or an output file that cannot be written.
    pub fn plan(self, default_backend: &str) -> Result<RunPlan> {
        let env = EnvSettings::read(self.guidellm_env)?;
        let scenario = env.under(match &self.scenario {
            Some(path) => Scenario::read(path)?,
            None => Scenario::default(),
        });
        let pick = |flags: Vec<String>, from_file: Option<Vec<String>>| {
            if flags.is_empty() {
                from_file.unwrap_or_default()
            } else {
                flags
            }
        };
        let output = pick(self.output, scenario.output.as_ref().map(|o| o.to_args()));
        let quiet = self.disable_console || scenario.disable_console == Some(true);
        let mut outputs = outputs::parse_all_in(&output, env.results_dir.as_deref())?;
        if quiet {
            outputs.retain(|o| *o != Output::Console);
        } else if !outputs.contains(&Output::Console) {
            outputs.insert(0, Output::Console);
        }
        // Before anything runs: no run is lost to a path.
        outputs::check_all(&outputs)?;
        let seed = self.seed.as_deref().map(parse_seed).transpose()?;
        let tokenizer = match self.tokenizer.as_deref() {
            Some(arg) => parse_tokenizer(arg)?,
            None => None,
        };
        let metrics_slo = match self.metrics.as_deref() {
            Some(arg) => parse_metrics(arg)?,
            None => None,
        };
        if metrics_slo.is_some() && self.slo.is_some() {
            return Err(Error::Flag {
                flag: "--metrics",
                reason: "sets latency objectives and so does --slo: give them once, \
                         as --slo ttft=200ms,itl=50ms"
                    .to_owned(),
            });
        }
        let mut labels = scenario.label.clone().unwrap_or_default();
        for label in &self.label {
            let (key, value) = label
                .split_once('=')
                .ok_or_else(|| Error::LabelSyntax(label.clone()))?;
            labels.insert(key.trim().to_owned(), value.trim().to_owned());
        }
        let backends = if self.backend.is_empty() {
            vec![
                scenario
                    .backend
                    .as_ref()
                    .map_or_else(|| default_backend.to_owned(), |b| b.to_arg()),
            ]
        } else {
            self.backend
        };
        let side_by_side = backends.len() > 1;
        // The flag wins over the scenario file's `data_column_mapper`,
        // and either maps the columns of whichever data wins.
        // The environment's, below both.
        let mut mappings = match (&self.data_column_mapper, &self.scenario) {
            (Some(arg), _) => ColumnMappings::from_flag(arg)?,
            (None, Some(path)) => ColumnMappings::from_scenario_file(path, &read_value(path)?)?,
            (None, None) => ColumnMappings::default(),
        };
        if self.data_column_mapper.is_none()
            && mappings == ColumnMappings::default()
            && let Some(from_env) = env.column_mappings()
        {
            mappings = from_env.clone();
        }
        let mut data = pick(self.data, scenario.data.as_ref().map(|d| d.to_args()));
        mappings.apply(&mut data)?;
        let base = PlanArgs {
            backend: BackendArgs::default(),
            data,
            profile: self
                .profile
                .or_else(|| scenario.profile.as_ref().map(|p| p.to_arg())),
            constraints: pick(
                self.constraint,
                scenario.constraint.as_ref().map(|c| c.to_args()),
            ),
            tokenizer: tokenizer.or(scenario.tokenizer.map(PathBuf::from)),
            seed: seed.or(scenario.seed),
            warmup: self
                .warmup
                .or_else(|| scenario.warmup.as_ref().map(|w| w.to_arg())),
            cooldown: self
                .cooldown
                .or_else(|| scenario.cooldown.as_ref().map(|c| c.to_arg())),
            grace_period: self
                .grace_period
                .or_else(|| scenario.grace_period.as_ref().map(|g| g.to_arg())),
            labels,
            // Side by side, the texts are compared request by request.
            keep_text: side_by_side || outputs.iter().any(Output::wants_text),
            slo: self
                .slo
                .or(metrics_slo)
                .or_else(|| scenario.slo.as_ref().map(|s| s.to_arg())),
        };
        let plans = backends
            .into_iter()
            .map(|backend| {
                // `--backend` is parsed here, once: the overrides set
                // fields of the parsed value.
                let mut plan = PlanArgs {
                    backend: BackendArgs::parse(&backend)?,
                    ..base.clone()
                };
                apply_overrides(&mut plan, &self.overrides)?;
                env.fill_defaults(&mut plan);
                mappings.check_backend(&plan.backend.args)?;
                Ok(plan)
            })
            .collect::<Result<Vec<_>>>()?;
        let progress = !(quiet || self.disable_progress || scenario.disable_progress == Some(true));
        Ok(RunPlan {
            plans,
            outputs,
            progress,
            quiet,
        })
    }
}

/// The command line as one shell-quoted string, for the report: the
/// program by its file name, then every argument as given, its secrets
/// redacted before it is kept anywhere (see [`guidebench_core::redact`]).
#[must_use]
pub fn command_line(mut args: Vec<String>) -> String {
    if let Some(program) = args.first_mut()
        && let Some(name) = std::path::Path::new(program.as_str()).file_name()
    {
        *program = name.to_string_lossy().into_owned();
    }
    let args = guidebench_core::redact::redact_command_line(&args);
    shlex::try_join(args.iter().map(String::as_str)).unwrap_or_else(|_| args.join(" "))
}

/// GuideLLM 0.8.1's data pipeline flags, with the one value (its default)
/// that describes what guidebench does, and what to write instead of any
/// other: `(flag, default kind, instead)`. `--data-column-mapper` is not
/// here: its mappings are read ([`ColumnMappings`]).
const GUIDELLM_PIPELINE: &[(&str, &str, &str)] = &[
    (
        "--data-preprocessor",
        "encode_media",
        "media columns are encoded as they are read (image_column=, audio_column=)",
    ),
    (
        "--data-finalizer",
        "generative",
        "every data row becomes a generation request",
    ),
    (
        "--data-loader",
        "pytorch",
        "data is read by guidebench itself, whole and checked before the run",
    ),
];

/// Checks GuideLLM's data pipeline flags (`--data-preprocessor`, ...,
/// each with the values given): GuideLLM's default is accepted, since it
/// is what guidebench does; anything else is refused saying what to write
/// instead. `--data-column-mapper` is checked as the column mapper reads
/// it, which [`Flags::plan`] applies.
///
/// # Errors
///
/// [`Error::Flag`] for the first value that is not the flag's default (or
/// not a column mapper guidebench reads).
pub fn check_guidellm_pipeline(given: &[(&str, &[String])]) -> Result<()> {
    for (flag, values) in given {
        if *flag == MAPPER_FLAG {
            for value in *values {
                ColumnMappings::from_flag(value)?;
            }
            continue;
        }
        let Some((flag, default, instead)) = GUIDELLM_PIPELINE.iter().find(|(f, ..)| f == flag)
        else {
            continue;
        };
        for value in *values {
            let kind = parse_kind_args(value).map(|args| (args.kind, args.options.is_empty()));
            if !matches!(kind, Ok((ref kind, true)) if kind == default) {
                return Err(Error::Flag {
                    flag,
                    reason: format!(
                        "{value}: guidebench has only GuideLLM's default (kind={default}); \
                         {instead}"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Each `--override` as `KEY=VALUE`: GuideLLM's two-argument form (a key,
/// which has no `=`, then its values) is turned into it (see
/// [`super::override_from_pair`]).
///
/// # Errors
///
/// [`Error::Flag`] for a key given without its values.
pub fn overrides_from_args(items: &[String]) -> Result<Vec<String>> {
    let mut overrides = Vec::new();
    let mut items = items.iter();
    while let Some(item) = items.next() {
        if item.contains('=') {
            overrides.push(item.clone());
            continue;
        }
        let Some(values) = items.next() else {
            return Err(Error::Flag {
                flag: "--override",
                reason: format!("takes KEY=VALUE or KEY VALUES, got `{item}` alone"),
            });
        };
        overrides.push(override_from_pair(item, values));
    }
    Ok(overrides)
}

/// `--seed`: a whole number, or GuideLLM's `kind=static,value=N` (its
/// `value` defaults to 42, as in GuideLLM).
fn parse_seed(arg: &str) -> Result<u64> {
    let bad = |why: String| Error::Flag {
        flag: "--seed",
        reason: format!("{why}; write a whole number (--seed 42) or kind=static,value=42"),
    };
    let arg = arg.trim();
    if let Ok(seed) = arg.parse() {
        return Ok(seed);
    }
    if !arg.starts_with('{') && !arg.contains('=') {
        return Err(bad(format!("`{arg}` is not a whole number")));
    }
    let args = parse_kind_args(arg)?;
    if args.kind != "static" {
        return Err(bad(format!(
            "GuideLLM's seed kind `{}` has no guidebench meaning",
            args.kind
        )));
    }
    let mut seed = 42;
    for (key, value) in &args.options {
        match (key.as_str(), value.as_u64()) {
            ("value", Some(value)) => seed = value,
            ("value", None) => {
                return Err(bad(format!("`value` must be a whole number, got {value}")));
            }
            (key, _) => {
                return Err(bad(format!(
                    "unknown option `{key}` (kind=static takes value)"
                )));
            }
        }
    }
    Ok(seed)
}

/// `--tokenizer`: a path (a `tokenizer.json` or a model folder, or a model
/// id in the local Hugging Face cache), or GuideLLM's
/// `kind=huggingface_auto|hf_auto,model=NAME`; without `model` the
/// backend's own tokenizer is used, as in GuideLLM.
fn parse_tokenizer(arg: &str) -> Result<Option<PathBuf>> {
    let trimmed = arg.trim();
    if !(trimmed.starts_with('{') || trimmed.starts_with("kind=")) {
        return Ok(Some(PathBuf::from(arg)));
    }
    let bad = |why: String| Error::Flag {
        flag: "--tokenizer",
        reason: format!("{why}; write a path (--tokenizer PATH) or kind=hf_auto,model=PATH"),
    };
    let args = parse_kind_args(trimmed)?;
    if !matches!(args.kind.as_str(), "huggingface_auto" | "hf_auto") {
        return Err(bad(format!(
            "GuideLLM's tokenizer kind `{}` has no guidebench meaning",
            args.kind
        )));
    }
    let mut model = None;
    for (key, value) in &args.options {
        match (key.as_str(), value) {
            ("model" | "source" | "path", Value::String(name)) => model = Some(PathBuf::from(name)),
            ("model" | "source" | "path", Value::Null) => model = None,
            ("load_kwargs", Value::Object(kwargs)) if kwargs.is_empty() => {}
            ("load_kwargs", _) => {
                return Err(bad(
                    "`load_kwargs` is not supported: guidebench reads tokenizer.json as it is"
                        .to_owned(),
                ));
            }
            (key, _) => {
                return Err(bad(format!(
                    "unknown option `{key}` (kind=hf_auto takes model, load_kwargs)"
                )));
            }
        }
    }
    Ok(model)
}

/// `--metrics`: GuideLLM's metrics options, mapped as a GuideLLM scenario's
/// `spec.metrics` is: `slo.ttft_ms`, `slo.tpot_ms` and `slo.e2el_ms`
/// become `--slo` objectives; anything else is refused, naming it. `kind`
/// may be left out (GuideLLM's only kind is `generative`).
fn parse_metrics(arg: &str) -> Result<Option<String>> {
    let trimmed = arg.trim();
    let arg = if trimmed.starts_with('{') || trimmed.contains("kind=") {
        trimmed.to_owned()
    } else {
        format!("kind=generative,{trimmed}")
    };
    let args = parse_kind_args(&arg)?;
    let mut metrics = args.options;
    metrics.insert("kind".into(), Value::String(args.kind));
    let converted =
        guidellm::convert(&json!({"spec": {"metrics": metrics}})).map_err(|fields| {
            Error::Flag {
                flag: "--metrics",
                reason: format!(
                    "has options guidebench cannot map: {}; guidebench reads only latency \
                 objectives from it (slo.ttft_ms, slo.tpot_ms, slo.e2el_ms), or write them as \
                 --slo ttft=200ms,itl=50ms,latency=5s",
                    fields.replace("spec.metrics.", "")
                ),
            }
        })?;
    Ok(converted
        .get("slo")
        .and_then(Value::as_str)
        .map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_scenario_file_and_overrides_apply_to_every_backend() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("scenario.yaml");
        std::fs::write(
            &path,
            "backend: kind=offline,engine=mock\nprofile: kind=synchronous\nseed: 3\n\
             label: {team: a}\ndisable_progress: true\n",
        )
        .expect("write");
        let flags = Flags {
            scenario: Some(path),
            backend: vec![
                "kind=offline,engine=mock".into(),
                "kind=offline,engine=mock,batch_size=2".into(),
            ],
            seed: Some("7".into()),
            label: vec!["run=b".into()],
            overrides: vec!["warmup=2".into()],
            ..Flags::default()
        };
        let run = flags.plan("kind=unused").expect("plans");
        assert_eq!(run.plans.len(), 2);
        assert_eq!(
            run.plans[1].backend,
            BackendArgs::parse("kind=offline,engine=mock,batch_size=2").expect("parses")
        );
        for plan in &run.plans {
            assert_eq!(plan.seed, Some(7));
            assert_eq!(plan.profile.as_deref(), Some("kind=synchronous"));
            assert_eq!(plan.warmup.as_deref(), Some("2"));
            assert!(plan.keep_text, "side by side keeps the texts");
            assert_eq!(plan.labels.len(), 2);
        }
        // No output given: the defaults, as GuideLLM's run writes them.
        assert_eq!(
            (run.outputs, run.progress),
            (crate::outputs::run_defaults(), false)
        );
    }

    #[test]
    fn the_console_table_comes_with_every_file_output_unless_the_console_is_off() {
        let dir = tempfile::tempdir().expect("tempdir");
        let json = dir.path().join("r.json").display().to_string();
        let run = Flags {
            output: vec![json.clone()],
            ..Flags::default()
        }
        .plan("kind=offline,engine=mock")
        .expect("plans");
        assert_eq!(run.outputs.len(), 2);
        assert_eq!(run.outputs[0], Output::Console);
        assert!(run.progress && !run.quiet);
        let run = Flags {
            output: vec![json, "kind=console".into()],
            disable_console: true,
            ..Flags::default()
        }
        .plan("kind=offline,engine=mock")
        .expect("plans");
        assert_eq!(run.outputs.len(), 1);
        assert_eq!(run.outputs[0].kind().name, "json");
        assert!(!run.progress && run.quiet);
        let err = Flags {
            output: vec![dir.path().join("no/r.csv").display().to_string()],
            ..Flags::default()
        }
        .plan("kind=offline,engine=mock")
        .expect_err("no folder");
        assert!(
            err.is_usage() && err.to_string().contains("does not exist"),
            "{err}"
        );
    }

    #[test]
    fn guidellm_spellings_of_seed_tokenizer_and_metrics_mean_the_same_here() {
        let plan = |flags: Flags| {
            flags
                .plan("kind=offline,engine=mock")
                .map(|mut run| run.plans.remove(0))
        };
        let p = plan(Flags {
            seed: Some("kind=static,value=7".into()),
            tokenizer: Some("kind=hf_auto,model=my/tokenizer".into()),
            metrics: Some("kind=generative,slo.ttft_ms=200,slo.e2el_ms=5000".into()),
            ..Flags::default()
        })
        .expect("plans");
        assert_eq!(p.seed, Some(7));
        assert_eq!(p.tokenizer, Some(PathBuf::from("my/tokenizer")));
        assert_eq!(p.slo.as_deref(), Some("ttft=200ms,latency=5000ms"));
        // A GuideLLM scenario's `spec.tokenizer` reads the same.
        let dir = tempfile::tempdir().expect("tempdir");
        let scenario = dir.path().join("guidellm.json");
        std::fs::write(
            &scenario,
            r#"{"spec": {"tokenizer": {"kind": "hf_auto", "model": "my/tokenizer"}}}"#,
        )
        .expect("write");
        let p = plan(Flags {
            scenario: Some(scenario),
            ..Flags::default()
        })
        .expect("plans");
        assert_eq!(p.tokenizer, Some(PathBuf::from("my/tokenizer")));
        let p = plan(Flags {
            seed: Some("kind=static".into()),
            tokenizer: Some("kind=huggingface_auto".into()),
            metrics: Some("slo.tpot_ms=50".into()),
            ..Flags::default()
        })
        .expect("plans");
        assert_eq!(p.seed, Some(42), "GuideLLM's default value");
        assert_eq!(p.tokenizer, None, "the backend's own, as in GuideLLM");
        assert_eq!(p.slo.as_deref(), Some("itl=50ms"));
        let p = plan(Flags {
            seed: Some("9".into()),
            tokenizer: Some("tok.json".into()),
            ..Flags::default()
        })
        .expect("plans");
        assert_eq!(
            (p.seed, p.tokenizer),
            (Some(9), Some(PathBuf::from("tok.json")))
        );

        for (flags, needle) in [
            (
                Flags {
                    seed: Some("kind=random".into()),
                    ..Flags::default()
                },
                "kind=static,value=42",
            ),
            (
                Flags {
                    seed: Some("soon".into()),
                    ..Flags::default()
                },
                "whole number",
            ),
            (
                Flags {
                    tokenizer: Some("kind=tiktoken".into()),
                    ..Flags::default()
                },
                "--tokenizer PATH",
            ),
            (
                Flags {
                    metrics: Some("kind=generative,sample_size=10".into()),
                    ..Flags::default()
                },
                "`sample_size`",
            ),
            (
                Flags {
                    metrics: Some("slo.ttft_ms=200".into()),
                    slo: Some("ttft=100ms".into()),
                    ..Flags::default()
                },
                "give them once",
            ),
        ] {
            let err = plan(flags).expect_err(needle);
            assert!(err.is_usage(), "{err}");
            assert!(err.to_string().contains(needle), "`{needle}` in {err}");
        }
    }

    #[test]
    fn without_a_backend_the_default_runs_and_a_bad_label_is_a_usage_error() {
        let run = Flags::default()
            .plan("kind=offline,engine=mock")
            .expect("plans");
        assert_eq!(
            run.plans[0].backend,
            BackendArgs::parse("kind=offline,engine=mock").expect("parses")
        );
        assert!(run.progress);
        let err = Flags {
            label: vec!["team".into()],
            ..Flags::default()
        }
        .plan("kind=offline,engine=mock")
        .expect_err("bad label");
        assert!(err.is_usage(), "{err}");
        assert_eq!(err.to_string(), "--label must be key=value, got `team`");
    }
}
