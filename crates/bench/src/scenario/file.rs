//! The fields of a scenario file ([`Scenario`]), read as JSON or YAML,
//! a GuideLLM scenario or report mapped onto them.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::read::read_value;
use super::{guidellm, rerun};
use crate::{Error, Result};

/// A `kind=…` option as a scenario gives it: the flag's text, or an object.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum KindValue {
    /// `kind=NAME,key=value`
    Text(String),
    /// `{"kind": "NAME", "key": value}`
    Object(serde_json::Map<String, Value>),
}

impl KindValue {
    /// The value as the flag would take it.
    pub fn to_arg(&self) -> String {
        match self {
            KindValue::Text(text) => text.clone(),
            KindValue::Object(map) => Value::Object(map.clone()).to_string(),
        }
    }
}

/// One value or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// A single value.
    One(KindValue),
    /// Several.
    Many(Vec<KindValue>),
}

impl OneOrMany {
    /// Each value as a flag argument.
    pub fn to_args(&self) -> Vec<String> {
        match self {
            OneOrMany::One(v) => vec![v.to_arg()],
            OneOrMany::Many(vs) => vs.iter().map(KindValue::to_arg).collect(),
        }
    }
}

/// A number of seconds or requests, or text such as `10s`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PhaseValue {
    /// A number.
    Number(serde_json::Number),
    /// Text.
    Text(String),
}

impl PhaseValue {
    /// The value as the flag would take it.
    pub fn to_arg(&self) -> String {
        match self {
            PhaseValue::Number(n) => n.to_string(),
            PhaseValue::Text(t) => t.clone(),
        }
    }
}

/// The fields of a scenario file; every one is optional, and a flag given
/// on the command line wins over it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// `--backend`
    pub backend: Option<KindValue>,
    /// `--data`
    pub data: Option<OneOrMany>,
    /// `--profile`
    pub profile: Option<KindValue>,
    /// `--constraint`
    #[serde(alias = "constraints")]
    pub constraint: Option<OneOrMany>,
    /// `--output`
    #[serde(alias = "outputs")]
    pub output: Option<OneOrMany>,
    /// `--tokenizer`
    pub tokenizer: Option<String>,
    /// `--seed`
    pub seed: Option<u64>,
    /// `--warmup`
    pub warmup: Option<PhaseValue>,
    /// `--cooldown`
    pub cooldown: Option<PhaseValue>,
    /// `--label key=value`
    #[serde(alias = "labels")]
    pub label: Option<std::collections::BTreeMap<String, String>>,
    /// `--grace-period`
    pub grace_period: Option<PhaseValue>,
    /// `--disable-progress`
    pub disable_progress: Option<bool>,
    /// `--disable-console`
    pub disable_console: Option<bool>,
    /// `--slo`
    pub slo: Option<KindValue>,
}

impl Scenario {
    /// Reads a scenario file: YAML for `.yaml`/`.yml`, JSON otherwise.
    ///
    /// # Errors
    ///
    /// [`Error::MissingScenario`] (for a GuideLLM built-in scenario name,
    /// saying so), [`Error::ReadScenario`], [`Error::InvalidScenario`]
    /// (a value of the wrong type named by its field path) or, for a
    /// GuideLLM scenario, [`Error::GuideLlm`] naming every field that
    /// cannot be mapped.
    pub fn read(path: &Path) -> Result<Scenario> {
        let invalid = |reason: String| Error::InvalidScenario {
            path: path.to_owned(),
            reason,
        };
        let value = read_value(path)?;
        // A report given as a scenario: GuideLLM's keeps its scenario
        // under `config`; guidebench's is re-run from its command line by
        // the command line ([`rerun`]).
        let value = match rerun::report_settings(path, &value)? {
            // Where the report went is not where the re-run goes: its
            // outputs are the flags' (or the defaults).
            Some(rerun::ReportSettings::GuideLlm(mut config)) => {
                if let Some(spec) = config.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.remove("outputs");
                }
                config
            }
            Some(rerun::ReportSettings::Command(_)) => {
                return Err(invalid(
                    "a guidebench report, re-run by `guidebench run -c FILE` itself; it \
                     cannot be a scenario's part"
                        .to_owned(),
                ));
            }
            None => value,
        };
        let value = if guidellm::is_guidellm(&value) {
            guidellm::convert(&value).map_err(|fields| Error::GuideLlm {
                path: path.to_owned(),
                fields,
            })?
        } else {
            value
        };
        // The error names the field path (`label: invalid type: …`).
        serde_path_to_error::deserialize(value).map_err(|e| invalid(e.to_string()))
    }
}
