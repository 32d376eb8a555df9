//! The flags of a run and its scenario file merged into plans: a flag given
//! wins over the file's field, and `--override` applies on top of both.

use std::path::PathBuf;

use super::{Scenario, apply_overrides};
use crate::outputs::{self, Output};
use crate::session::PlanArgs;
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
    /// `--tokenizer`.
    pub tokenizer: Option<PathBuf>,
    /// `--seed`.
    pub seed: Option<u64>,
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
    /// `--override KEY=VALUE` (repeatable).
    pub overrides: Vec<String>,
}

/// What a run does: one plan per backend, the outputs, and whether the
/// live progress display is wanted.
#[derive(Debug)]
pub struct RunPlan {
    /// One per backend, in the order given; several run side by side.
    pub plans: Vec<PlanArgs>,
    /// Where the report goes.
    pub outputs: Vec<Output>,
    /// Neither the flag nor the file turned the live progress display off.
    pub progress: bool,
}

impl Flags {
    /// The flags and the scenario file merged (flags win) into what the
    /// session takes, one plan per backend; `default_backend` runs when
    /// neither names one.
    ///
    /// # Errors
    ///
    /// A scenario file that cannot be read or mapped, a malformed
    /// `--label`, `--output` or `--override`.
    pub fn plan(self, default_backend: &str) -> Result<RunPlan> {
        let scenario = match &self.scenario {
            Some(path) => Scenario::read(path)?,
            None => Scenario::default(),
        };
        let pick = |flags: Vec<String>, from_file: Option<Vec<String>>| {
            if flags.is_empty() {
                from_file.unwrap_or_default()
            } else {
                flags
            }
        };
        let output = pick(self.output, scenario.output.as_ref().map(|o| o.to_args()));
        let outputs = outputs::parse_all(&output)?;
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
        let base = PlanArgs {
            backend: String::new(),
            data: pick(self.data, scenario.data.as_ref().map(|d| d.to_args())),
            profile: self
                .profile
                .or_else(|| scenario.profile.as_ref().map(|p| p.to_arg())),
            constraints: pick(
                self.constraint,
                scenario.constraint.as_ref().map(|c| c.to_args()),
            ),
            tokenizer: self.tokenizer.or(scenario.tokenizer.map(PathBuf::from)),
            seed: self.seed.or(scenario.seed),
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
                .or_else(|| scenario.slo.as_ref().map(|s| s.to_arg())),
        };
        let plans = backends
            .into_iter()
            .map(|backend| {
                let mut plan = PlanArgs {
                    backend,
                    ..base.clone()
                };
                apply_overrides(&mut plan, &self.overrides)?;
                Ok(plan)
            })
            .collect::<Result<Vec<_>>>()?;
        let progress = !(self.disable_progress || scenario.disable_progress == Some(true));
        Ok(RunPlan {
            plans,
            outputs,
            progress,
        })
    }
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
            seed: Some(7),
            label: vec!["run=b".into()],
            overrides: vec!["warmup=2".into()],
            ..Flags::default()
        };
        let run = flags.plan("kind=unused").expect("plans");
        assert_eq!(run.plans.len(), 2);
        assert_eq!(
            run.plans[1].backend,
            "kind=offline,engine=mock,batch_size=2"
        );
        for plan in &run.plans {
            assert_eq!(plan.seed, Some(7));
            assert_eq!(plan.profile.as_deref(), Some("kind=synchronous"));
            assert_eq!(plan.warmup.as_deref(), Some("2"));
            assert!(plan.keep_text, "side by side keeps the texts");
            assert_eq!(plan.labels.len(), 2);
        }
        assert_eq!((run.outputs, run.progress), (vec![Output::Console], false));
    }

    #[test]
    fn without_a_backend_the_default_runs_and_a_bad_label_is_a_usage_error() {
        let run = Flags::default()
            .plan("kind=offline,engine=mock")
            .expect("plans");
        assert_eq!(run.plans[0].backend, "kind=offline,engine=mock");
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
