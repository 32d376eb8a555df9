//! The report as YAML: the same document as the JSON report (same fields,
//! same records), for readers who prefer YAML. Held by
//! `a_yaml_report_reads_back_as_the_same_report`.

use std::path::Path;

use super::model::Report;
use crate::{Error, Result};

/// The report as a YAML document.
pub fn to_yaml(report: &Report) -> Result<String> {
    serde_yaml_ng::to_string(report).map_err(|source| Error::Yaml {
        context: "the report".into(),
        source,
    })
}

/// Writes [`to_yaml`] to `path`.
pub fn write_yaml(report: &Report, path: impl AsRef<Path>) -> Result<()> {
    write_yaml_value(report, path.as_ref())
}

/// Writes any serialisable document as YAML to `path`.
pub(crate) fn write_yaml_value(value: &impl serde::Serialize, path: &Path) -> Result<()> {
    let yaml = serde_yaml_ng::to_string(value).map_err(|source| Error::Yaml {
        context: format!("`{}`", path.display()),
        source,
    })?;
    std::fs::write(path, yaml).map_err(|e| guidebench_core::Error::io(path, e).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn a_yaml_report_reads_back_as_the_same_report() {
        let report = sample_report();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("report.yaml");
        write_yaml(&report, &path).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.starts_with("schema_version: 1\n"), "{text:.80}");
        let loaded: Report = serde_yaml_ng::from_str(&text).expect("parse");
        assert_eq!(loaded, report);
        // The same document as the JSON report.
        let as_json: serde_json::Value = serde_yaml_ng::from_str(&text).expect("parse");
        assert_eq!(as_json, serde_json::to_value(&report).expect("to json"));
    }
}
