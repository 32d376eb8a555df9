//! Data files read into rows: the lower layer of the data kinds that read
//! files (`file`, `trace`), which map rows to requests.
//!
//! A [`Row`] is one record with its fields as JSON values and where it is
//! (`line 3`, `item 2`, `row 7`) for error messages. JSONL, JSON, CSV and
//! plain text files are read by `text`, Parquet and Arrow IPC files by
//! `columnar`; [`Format`] is the table of formats and file extensions.
//! Nothing here knows what a column means.
//!
//! A record that cannot be read (a malformed JSONL line, a CSV record with
//! the wrong number of cells) is a [`Row`] too, with [`Row::bad`] saying
//! why, so that the kinds above can fail on it naming the line, or skip it
//! under `on_error=skip`; only a file that cannot be read as a whole (a
//! malformed JSON document, a CSV header) is an error here.

use std::path::Path;

use serde_json::{Map, Value};

use crate::{Error, Result};
use guidebench_core::Error as CoreError;

mod columnar;
mod text;

/// How a binary cell of a Parquet or Arrow file reads: this prefix, then
/// its bytes in base64 (a `data:` URL).
pub(crate) const BINARY_PREFIX: &str = "data:application/octet-stream;base64,";

/// The formats a data file may have.
pub(crate) const FORMATS: &[&str] = &["jsonl", "json", "csv", "parquet", "arrow", "text"];

/// The extensions of data files (a `path` with one is never a dataset id).
pub(crate) const EXTENSIONS: &[&str] = &[
    "jsonl", "ndjson", "json", "csv", "parquet", "arrow", "feather", "ipc",
];

/// A data file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// One JSON object per line.
    Jsonl,
    /// A JSON list of objects.
    Json,
    /// Comma-separated values with a header row.
    Csv,
    /// Apache Parquet.
    Parquet,
    /// Arrow IPC, file (Feather v2) or stream format.
    Arrow,
    /// Plain text, one prompt per non-blank line (in column `text`), as
    /// GuideLLM's `text_file` reads it; chosen with `format=text` only.
    Text,
}

impl Format {
    /// The format of a `format=NAME` option (one of [`FORMATS`]).
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "jsonl" => Some(Format::Jsonl),
            "json" => Some(Format::Json),
            "csv" => Some(Format::Csv),
            "parquet" => Some(Format::Parquet),
            "arrow" => Some(Format::Arrow),
            "text" => Some(Format::Text),
            _ => None,
        }
    }

    /// The format named by the file's extension.
    pub(crate) fn of_path(path: &Path) -> Result<Self> {
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match extension.as_deref() {
            Some("jsonl" | "ndjson") => Ok(Format::Jsonl),
            Some("json") => Ok(Format::Json),
            Some("csv") => Ok(Format::Csv),
            Some("parquet") => Ok(Format::Parquet),
            Some("arrow" | "feather" | "ipc") => Ok(Format::Arrow),
            _ => Err(Error::DataFormat {
                path: path.to_path_buf(),
                formats: FORMATS.join("|"),
            }),
        }
    }
}

/// One record of the file, with where it is for error messages.
#[derive(Debug)]
pub(crate) struct Row {
    /// `line 3` or `item 2`.
    pub(crate) location: String,
    /// The record's fields (none when the record is [`Row::bad`]).
    pub(crate) fields: Map<String, Value>,
    /// Why the record could not be read, when it could not (its fields are
    /// then empty).
    pub(crate) bad: Option<String>,
    /// Whether the values are CSV text (JSON is then looked for in cells).
    pub(crate) csv: bool,
}

/// Reads the rows of the file `path`, in `format`, into `rows`, noting its
/// columns in `present` (in order of appearance). Columnar files locate
/// their rows as `row N`, after `label` when given.
pub(crate) fn read_into(
    path: &Path,
    format: Format,
    label: Option<&str>,
    rows: &mut Vec<Row>,
    present: &mut Vec<String>,
) -> Result<()> {
    let (read, columns) = match format {
        Format::Parquet => return columnar::read_parquet(path, label, rows, present),
        Format::Arrow => return columnar::read_arrow(path, label, rows, present),
        Format::Jsonl | Format::Json | Format::Csv | Format::Text => {
            let text = std::fs::read_to_string(path).map_err(|e| CoreError::io(path, e))?;
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            match format {
                Format::Jsonl => text::read_jsonl(text),
                Format::Json => text::read_json(path, text)?,
                Format::Text => text::read_text(text),
                _ => text::read_csv(path, text)?,
            }
        }
    };
    rows.extend(read);
    for column in columns {
        if !present.contains(&column) {
            present.push(column);
        }
    }
    Ok(())
}

/// Adds the keys of `fields` not seen yet to `present`, in order.
pub(super) fn note_columns(present: &mut Vec<String>, fields: &Map<String, Value>) {
    for key in fields.keys() {
        if !present.contains(key) {
            present.push(key.clone());
        }
    }
}

/// A CSV cell that holds JSON of the wanted shape, parsed; otherwise `None`.
pub(crate) fn json_in_cell(text: &str) -> Option<Value> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') || trimmed.starts_with('{') {
        serde_json::from_str(trimmed).ok()
    } else {
        None
    }
}
