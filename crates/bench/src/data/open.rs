//! The `path` option of the kinds that read files (`file`, `trace`): a
//! data file, or a Hugging Face dataset (fetched into the Hugging Face
//! cache where it lacks the split's files), read into rows.

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::rows::{self, Format, Row};
use super::{hf, string_option};
use crate::{Error, Result};
use guidebench_core::Error as CoreError;

/// The split of a Hugging Face dataset read when `split` is not given.
pub(super) const DEFAULT_SPLIT: &str = "train";

/// The rows of the file named by the `path` option, in the format of the
/// `format` option or of its extension, and the columns present (in order
/// of appearance).
pub(super) fn read_rows(
    context: &str,
    options: &Map<String, Value>,
) -> Result<(PathBuf, Vec<Row>, Vec<String>)> {
    let path = string_option(options, "path").ok_or_else(|| {
        Error::from(CoreError::MissingOption {
            context: context.to_string(),
            key: "path".to_string(),
        })
    })?;
    let path = PathBuf::from(path);
    if !path.exists()
        && let Some(id) = hf::DatasetId::parse(&path.to_string_lossy())
    {
        let (snapshot, files) = hf::fetch(
            &id,
            string_option(options, "split").unwrap_or(DEFAULT_SPLIT),
            string_option(options, "config"),
            string_option(options, "hub_cache").map(PathBuf::from),
        )?;
        let mut rows = Vec::new();
        let mut present = Vec::new();
        for file in &files {
            let label = file
                .strip_prefix(&snapshot)
                .unwrap_or(file)
                .display()
                .to_string();
            let format = match Format::of_path(file)? {
                Format::Parquet => Format::Parquet,
                _ => Format::Arrow,
            };
            rows::read_into(file, format, Some(&label), &mut rows, &mut present)?;
        }
        return Ok((snapshot, rows, present));
    }
    let format = match string_option(options, "format").and_then(Format::from_name) {
        Some(format) => format,
        None => Format::of_path(&path)?,
    };
    let mut rows = Vec::new();
    let mut present = Vec::new();
    rows::read_into(&path, format, None, &mut rows, &mut present)?;
    Ok((path, rows, present))
}
