//! The document a JSON or YAML report file holds: GuideLLM 0.8.1's report
//! (which GuideLLM itself opens) with guidebench's own report under its
//! `guidebench` key, or guidebench's report alone ([`Schema`]). Reading
//! either back is [`Report::from_json_value`]'s job.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::guidellm_write;
use super::model::Report;
use crate::{Error, Result};

/// Which document a JSON or YAML output holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Schema {
    /// GuideLLM 0.8.1's report (schema version 2), which GuideLLM's
    /// `export`, its HTML page and tools built on its `benchmarks.json`
    /// open, with guidebench's own report under the top-level
    /// `guidebench` key (GuideLLM ignores it; guidebench reads it back
    /// whole).
    #[default]
    #[serde(rename = "guidellm")]
    GuideLlm,
    /// guidebench's own report alone.
    Guidebench,
}

impl Schema {
    /// How a "wrote" line names the document.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Schema::GuideLlm => "GuideLLM's report with guidebench's",
            Schema::Guidebench => "guidebench's report",
        }
    }
}

/// The document a JSON or YAML output holds (see [`Schema`]).
///
/// # Errors
///
/// The report does not serialise (a number JSON cannot hold).
pub fn report_document(report: &Report, schema: Schema) -> Result<Value> {
    let own = serde_json::to_value(report).map_err(|source| {
        Error::from(guidebench_core::Error::Json {
            context: "the report".into(),
            source,
        })
    })?;
    Ok(match schema {
        Schema::Guidebench => own,
        Schema::GuideLlm => {
            let mut document = guidellm_write::to_guidellm(report);
            if let Value::Object(map) = &mut document {
                map.insert(GUIDEBENCH_KEY.to_owned(), own);
            }
            document
        }
    })
}

/// The key of GuideLLM's document that holds guidebench's own report.
pub const GUIDEBENCH_KEY: &str = "guidebench";

/// Writes [`report_document`] as JSON to `path`.
///
/// # Errors
///
/// The document does not serialise, or the file cannot be written.
pub fn write_json_document(report: &Report, path: &Path, schema: Schema) -> Result<()> {
    if schema == Schema::Guidebench {
        return report.write_json(path);
    }
    let document = report_document(report, schema)?;
    let mut text = serde_json::to_string(&document).map_err(|source| {
        Error::from(guidebench_core::Error::Json {
            context: format!("`{}`", path.display()),
            source,
        })
    })?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| guidebench_core::Error::io(path, e).into())
}

/// Writes [`report_document`] as YAML to `path`.
///
/// # Errors
///
/// The document does not serialise, or the file cannot be written.
pub fn write_yaml_document(report: &Report, path: &Path, schema: Schema) -> Result<()> {
    super::yaml::write_yaml_value(&report_document(report, schema)?, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    /// The JSON Schema of GuideLLM 0.8.1's report, exported from its own
    /// pydantic model by `scripts/guidellm-schema`.
    const GUIDELLM_SCHEMA: &str = include_str!("../../tests/fixtures/guidellm/report.schema.json");

    /// A report GuideLLM 0.8.1 wrote (`scripts/guidellm-report`).
    const GUIDELLM_WROTE: &str = include_str!("../../tests/fixtures/guidellm/benchmarks.json");

    fn validator() -> jsonschema::Validator {
        let schema: Value = serde_json::from_str(GUIDELLM_SCHEMA).expect("schema JSON");
        jsonschema::validator_for(&schema).expect("a valid schema")
    }

    /// Every place `document` breaks the schema, one line each.
    fn violations(document: &Value) -> Vec<String> {
        validator()
            .iter_errors(document)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect()
    }

    #[test]
    fn the_schema_accepts_the_report_guidellm_itself_wrote() {
        let wrote: Value = serde_json::from_str(GUIDELLM_WROTE).expect("JSON");
        assert_eq!(violations(&wrote), Vec::<String>::new());
    }

    #[test]
    fn guidebench_s_guidellm_document_follows_guidellm_s_schema() {
        let report = sample_report();
        let document = report_document(&report, Schema::GuideLlm).expect("document");
        assert_eq!(violations(&document), Vec::<String>::new());
        assert_eq!(
            document[GUIDEBENCH_KEY],
            report_document(&report, Schema::Guidebench).expect("own"),
            "guidebench's report rides along whole"
        );
    }

    #[test]
    fn a_document_missing_a_field_guidellm_requires_breaks_the_schema() {
        let mut document = report_document(&sample_report(), Schema::GuideLlm).expect("document");
        let metrics = document["benchmarks"][0]["metrics"]
            .as_object_mut()
            .expect("metrics");
        assert!(metrics.remove("request_latency").is_some());
        let found = violations(&document);
        assert!(
            found
                .iter()
                .any(|v| v.contains("/benchmarks/0/metrics") && v.contains("request_latency")),
            "{found:?}"
        );
    }
}
