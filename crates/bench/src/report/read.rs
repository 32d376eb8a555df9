//! Reading a report file: guidebench's own JSON (its schema version
//! checked, the metrics recomputed from the records) or GuideLLM's
//! `benchmarks.json`, told apart by content. It sits above the report
//! model and the GuideLLM converter, which know nothing of each other's
//! reading.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use serde_json::Value;

use super::document::GUIDEBENCH_KEY;
use super::guidellm;
use super::model::{GUIDEBENCH_VERSION, Report, SCHEMA_VERSION};
use crate::{Error, Result};
use guidebench_core::Error as CoreError;

impl Report {
    /// A report from JSON text; `context` names the source in errors.
    /// Fails with [`Error::NotAReport`] or [`Error::SchemaVersion`] on JSON
    /// that is not a report of the schema version this build reads. The metrics are recomputed from the records (see
    /// [`Report::from_json_value`]).
    pub fn from_json_str(json: &str, context: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(json).map_err(|source| {
            Error::from(CoreError::Json {
                context: context.to_owned(),
                source,
            })
        })?;
        Report::from_json_value(value, context)
    }

    /// A report from a parsed JSON value; see [`Report::from_json_str`].
    ///
    /// The metrics are recomputed from the records rather than taken from
    /// the JSON, so they are bit-identical to the metrics computed before
    /// saving (`serde_json` parses a float to within one ulp only). A
    /// GuideLLM report guidebench wrote holds guidebench's own report
    /// under its `guidebench` key, which is read whole; any other GuideLLM
    /// report is converted (see [`guidellm`]).
    pub fn from_json_value(mut value: Value, context: &str) -> Result<Self> {
        if let Some(own) = value
            .as_object_mut()
            .filter(|map| !map.contains_key("schema_version"))
            .and_then(|map| map.remove(GUIDEBENCH_KEY))
            .filter(|own| own.get("schema_version").is_some())
        {
            return Report::from_json_value(own, context);
        }
        if guidellm::is_guidellm_report(&value) {
            return guidellm::from_guidellm(value, context);
        }
        match value.get("schema_version") {
            None => {
                return Err(Error::NotAReport {
                    context: context.to_owned(),
                });
            }
            Some(v) if v.as_u64() != Some(u64::from(SCHEMA_VERSION)) => {
                return Err(Error::SchemaVersion {
                    context: context.to_owned(),
                    found: v.to_string(),
                    version: GUIDEBENCH_VERSION,
                    reads: SCHEMA_VERSION,
                });
            }
            Some(_) => {}
        }
        let mut report: Report = serde_json::from_value(value).map_err(|source| {
            Error::from(CoreError::Json {
                context: context.to_owned(),
                source,
            })
        })?;
        for benchmark in &mut report.benchmarks {
            benchmark.recompute();
        }
        Ok(report)
    }

    /// Reads a report file, recomputing the metrics from the records (see
    /// [`Report::from_json_value`]): JSON, or YAML for a `.yaml`/`.yml`
    /// file (what `--output kind=yaml` writes).
    pub fn read_json(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| CoreError::io(path, e))?;
        let context = format!("`{}`", path.display());
        let yaml = matches!(
            path.extension()
                .and_then(|e| e.to_str())
                .map(str::to_ascii_lowercase)
                .as_deref(),
            Some("yaml" | "yml")
        );
        let value: Value = if yaml {
            serde_yaml_ng::from_reader(BufReader::new(file)).map_err(|source| Error::ReadYaml {
                context: context.clone(),
                source,
            })?
        } else {
            serde_json::from_reader(BufReader::new(file)).map_err(|source| {
                Error::from(CoreError::Json {
                    context: context.clone(),
                    source,
                })
            })?
        };
        Report::from_json_value(value, &context)
    }
}
