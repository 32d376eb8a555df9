//! `compare`: saved reports (or the backends of one) benchmark by
//! benchmark, against the first as baseline (see [`report::compare`] for
//! the statistics).

use std::path::{Path, PathBuf};

use crate::report::{self, Report};
use crate::{Error, Result};

/// Where a comparison goes besides the text.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompareOutputs<'a> {
    /// The comparison as JSON: one object, or an array of them (one per
    /// candidate) with more than two runs.
    pub json: Option<&'a Path>,
    /// A self-contained HTML page: the differences, and every run's load
    /// curves, distributions and timelines overlaid.
    pub html: Option<&'a Path>,
}

/// Compares saved reports: the first run is the baseline and each other
/// is compared with it. A report of several backends side by side counts
/// as one run per backend (so one such report compares its backends). A
/// run is named by its file name, or by its path when two files share a
/// name. Each candidate's comparison text goes to `print` as soon as it is
/// ready; then the files of `outputs` are written.
///
/// # Errors
///
/// A report that cannot be read; fewer than two runs
/// ([`Error::OneRun`]); a candidate with no benchmark name in common with
/// the baseline ([`Error::NothingInCommon`]); a file that cannot be
/// written.
pub fn compare_reports(
    reports: &[PathBuf],
    outputs: CompareOutputs<'_>,
    mut print: impl FnMut(&str),
) -> Result<()> {
    let name_of = |path: &Path| {
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let shared = reports
            .iter()
            .filter(|p| p.file_name() == path.file_name())
            .count();
        if shared > 1 || file.is_empty() {
            path.display().to_string()
        } else {
            file
        }
    };
    let mut runs = Vec::new();
    for path in reports {
        let report = Report::read_json(path)?;
        runs.extend(report::split_by_backend(&name_of(path), &report));
    }
    let Some(((base_name, baseline), candidates)) = runs.split_first() else {
        return Err(Error::NoReport);
    };
    if candidates.is_empty() {
        return Err(Error::OneRun(base_name.clone()));
    }
    let mut comparisons = Vec::new();
    for (name, candidate) in candidates {
        let comparison = report::compare(baseline, candidate);
        if comparison.benchmarks.is_empty() {
            return Err(Error::NothingInCommon {
                baseline: base_name.clone(),
                candidate: name.clone(),
                only_in_baseline: comparison.only_in_baseline.join(", "),
                only_in_candidate: comparison.only_in_candidate.join(", "),
            });
        }
        print(&format!(
            "baseline {base_name} vs candidate {name} (95 % intervals of candidate − baseline; \
             means by Welch's t, p95 by non-overlapping intervals, attainment by Newcombe)\n"
        ));
        print(&report::comparison_text(&comparison));
        comparisons.push((name, comparison));
    }
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).map_err(|source| Error::WriteFile {
            path: path.to_owned(),
            source,
        })
    };
    if let Some(path) = outputs.json {
        let value = match comparisons.as_slice() {
            [(_, only)] => serde_json::to_value(only),
            many => serde_json::to_value(
                many.iter()
                    .map(|(name, c)| {
                        serde_json::json!({
                            "baseline": base_name,
                            "candidate": name,
                            "comparison": c,
                        })
                    })
                    .collect::<Vec<_>>(),
            ),
        }
        .map_err(Error::ComparisonJson)?;
        let text = serde_json::to_string_pretty(&value).map_err(Error::ComparisonJson)?;
        write(path, text + "\n")?;
    }
    if let Some(path) = outputs.html {
        write(path, report::comparison_to_html(&runs)?)?;
    }
    Ok(())
}
