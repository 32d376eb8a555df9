//! `--scenario FILE`: the same fields as the flags, in JSON or YAML.

use std::path::Path;

use anyhow::{Context, anyhow};
use serde::Deserialize;
use serde_json::Value;

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
    /// `--slo`
    pub slo: Option<KindValue>,
}

impl Scenario {
    /// Reads a scenario file: YAML for `.yaml`/`.yml`, JSON otherwise.
    pub fn read(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the scenario `{}`", path.display()))?;
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if yaml {
            serde_yaml_ng::from_str(&text)
                .map_err(|e| anyhow!("invalid scenario `{}`: {e}", path.display()))
        } else {
            serde_json::from_str(&text)
                .map_err(|e| anyhow!("invalid scenario `{}`: {e}", path.display()))
        }
    }
}
