//! A report given as a scenario (`-c benchmarks.json`) re-runs its
//! settings.
//!
//! - A report guidebench wrote (GuideLLM's document with guidebench's
//!   under its `guidebench` key, or `schema=guidebench` alone) keeps the
//!   command line that ran it (`config.command`, secrets redacted); the
//!   CLI parses that command again and puts the flags given now on top
//!   ([`ReportSettings::Command`]).
//! - A report GuideLLM wrote keeps its scenario under `config` (metadata,
//!   spec, benchmarks): as GuideLLM itself does, that scenario is read
//!   ([`ReportSettings::GuideLlm`]) and mapped like a GuideLLM scenario
//!   file.

use std::path::Path;

use serde_json::Value;

use super::read::read_value;
use crate::report::GUIDEBENCH_KEY;
use crate::{Error, Result};

/// What a report file holds to re-run.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportSettings {
    /// guidebench's report: its command line, word by word (the program
    /// first), as recorded.
    Command(Vec<String>),
    /// GuideLLM's report: its scenario (`metadata`, `spec`, `benchmarks`).
    GuideLlm(Value),
}

/// guidebench's report inside a file's document: the embedded one, or the
/// document itself when it is one (`config` and `benchmarks`, the config
/// without GuideLLM's `spec`).
fn guidebench_report(value: &Value) -> Option<&Value> {
    if let Some(embedded) = value.get(GUIDEBENCH_KEY) {
        return Some(embedded);
    }
    let config = value.get("config")?;
    (config.is_object() && config.get("spec").is_none() && value.get("benchmarks").is_some())
        .then_some(value)
}

/// What the document, read from a scenario file, holds to re-run, when it
/// is a report; `None` when it is a scenario.
///
/// # Errors
///
/// [`Error::InvalidScenario`] for a guidebench report without a recorded
/// command (written before reports kept it), or whose command is not a
/// `guidebench run` command line.
pub fn report_settings(path: &Path, value: &Value) -> Result<Option<ReportSettings>> {
    let invalid = |reason: String| Error::InvalidScenario {
        path: path.to_owned(),
        reason,
    };
    if let Some(report) = guidebench_report(value) {
        let Some(command) = report.pointer("/config/command").and_then(Value::as_str) else {
            return Err(invalid(
                "a guidebench report without the command that ran it (`config.command`): \
                 written by an older guidebench, it cannot be re-run; its settings are in \
                 `config`"
                    .to_owned(),
            ));
        };
        let words = shlex::split(command)
            .filter(|words| words.get(1).map(String::as_str) == Some("run"))
            .ok_or_else(|| {
                invalid(format!(
                    "its recorded command is not a `guidebench run` command line: {command}"
                ))
            })?;
        return Ok(Some(ReportSettings::Command(words)));
    }
    // GuideLLM's reports keep their scenario under `config`, which
    // GuideLLM's own `--scenario` reads.
    match value.get("config") {
        Some(config @ Value::Object(fields)) if fields.contains_key("spec") => {
            Ok(Some(ReportSettings::GuideLlm(config.clone())))
        }
        _ => Ok(None),
    }
}

/// Reads a scenario file and says what it holds to re-run when it is a
/// report; `None` for a scenario.
///
/// # Errors
///
/// As [`report_settings`], and [`Error::ReadScenario`] or
/// [`Error::InvalidScenario`] for a file that cannot be read.
pub fn read_report_settings(path: &Path) -> Result<Option<ReportSettings>> {
    report_settings(path, &read_value(path)?)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn settings(value: &Value) -> Result<Option<ReportSettings>> {
        report_settings(Path::new("benchmarks.json"), value)
    }

    #[test]
    fn an_embedded_guidebench_report_gives_its_command_word_by_word() {
        let value = json!({
            "metadata": {}, "config": {"spec": {}}, "benchmarks": [],
            "guidebench": {
                "config": {"command": "guidebench run --data 'kind=synthetic_text,prompt_tokens=8'"},
                "benchmarks": []
            }
        });
        assert_eq!(
            settings(&value).unwrap(),
            Some(ReportSettings::Command(vec![
                "guidebench".into(),
                "run".into(),
                "--data".into(),
                "kind=synthetic_text,prompt_tokens=8".into()
            ]))
        );
    }

    #[test]
    fn a_guidebench_schema_report_gives_its_command_too() {
        let value = json!({
            "config": {"command": "guidebench run --seed 3"},
            "benchmarks": []
        });
        assert!(matches!(
            settings(&value).unwrap(),
            Some(ReportSettings::Command(words)) if words == ["guidebench", "run", "--seed", "3"]
        ));
    }

    #[test]
    fn a_report_without_a_command_says_it_cannot_be_re_run() {
        let value = json!({"config": {"backend": {}}, "benchmarks": []});
        let err = settings(&value).unwrap_err().to_string();
        assert!(
            err.contains("config.command") && err.contains("benchmarks.json"),
            "{err}"
        );
        let value = json!({"config": {"command": "guidebench export x.json"}, "benchmarks": []});
        let err = settings(&value).unwrap_err().to_string();
        assert!(err.contains("not a `guidebench run`"), "{err}");
    }

    #[test]
    fn guidellm_s_report_gives_its_scenario_and_a_scenario_gives_nothing() {
        let value = json!({"metadata": {}, "config": {"spec": {"data": []}}, "benchmarks": []});
        assert_eq!(
            settings(&value).unwrap(),
            Some(ReportSettings::GuideLlm(json!({"spec": {"data": []}})))
        );
        assert_eq!(settings(&json!({"spec": {}})).unwrap(), None);
        assert_eq!(settings(&json!({"backend": "kind=offline"})).unwrap(), None);
    }

    #[test]
    fn guidellm_s_own_report_re_runs_its_scenario_but_not_its_outputs() {
        // Written by GuideLLM 0.8.1 itself: every field at its default is
        // written out, and each maps or is GuideLLM's default.
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/guidellm/benchmarks.json");
        let scenario = super::super::Scenario::read(&path).expect("GuideLLM's report re-runs");
        let object = |value: Option<&super::super::KindValue>| match value {
            Some(super::super::KindValue::Object(map)) => Value::Object(map.clone()),
            other => panic!("an object, got {other:?}"),
        };
        let backend = object(scenario.backend.as_ref());
        assert_eq!(backend["kind"], "openai_http");
        assert_eq!(backend["model"], "tiny");
        assert_eq!(backend["request_format"], "chat");
        assert!(
            backend["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("http://127.0.0.1:"))
        );
        for gone in [
            "api_key",
            "api_routes",
            "extras",
            "timeout",
            "follow_redirects",
        ] {
            assert!(backend.get(gone).is_none(), "{gone} in {backend}");
        }
        let profile = object(scenario.profile.as_ref());
        assert_eq!(profile["kind"], "concurrent");
        assert_eq!(profile["streams"], json!([1, 2]));
        let Some(super::super::OneOrMany::Many(data)) = &scenario.data else {
            panic!("data: {:?}", scenario.data);
        };
        let data = object(data.first());
        assert_eq!(
            data,
            json!({"kind": "synthetic_text", "prompt_tokens": 16, "output_tokens": 8, "turns": 1})
        );
        assert_eq!(scenario.tokenizer.as_deref(), Some("tok"));
        assert_eq!(scenario.seed, Some(42));
        assert!(scenario.output.is_none(), "{:?}", scenario.output);
    }
}
