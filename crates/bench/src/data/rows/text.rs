//! JSONL, JSON and CSV data files, read into rows.

use std::path::Path;

use serde_json::Value;

use super::{Row, note_columns};
use crate::{Error, Result};
use guidebench_core::Error as CoreError;

/// Reads one JSON object per non-blank line.
pub(super) fn read_jsonl(path: &Path, text: &str) -> Result<(Vec<Row>, Vec<String>)> {
    let mut rows = Vec::new();
    let mut present = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let location = format!("line {}", index + 1);
        let value: Value = serde_json::from_str(line).map_err(|source| CoreError::Json {
            context: format!("`{}`, {location}", path.display()),
            source,
        })?;
        rows.push(object_row(path, location, value, &mut present)?);
    }
    Ok((rows, present))
}

/// A row from a JSON object; anything else is an error naming the place.
fn object_row(
    path: &Path,
    location: String,
    value: Value,
    present: &mut Vec<String>,
) -> Result<Row> {
    let Value::Object(fields) = value else {
        return Err(Error::Row {
            path: path.to_path_buf(),
            location: Some(location),
            column: None,
            reason: "expected a JSON object".to_string(),
        });
    };
    note_columns(present, &fields);
    Ok(Row {
        location,
        fields,
        csv: false,
    })
}

/// Reads a JSON list of objects (or an object whose only field is one).
pub(super) fn read_json(path: &Path, text: &str) -> Result<(Vec<Row>, Vec<String>)> {
    let value: Value = serde_json::from_str(text).map_err(|source| CoreError::Json {
        context: format!("`{}`", path.display()),
        source,
    })?;
    let list = match value {
        Value::Array(list) => list,
        Value::Object(mut object) if object.len() == 1 => match object.values_mut().next() {
            Some(Value::Array(list)) => std::mem::take(list),
            _ => Vec::new(),
        },
        _ => {
            return Err(Error::Row {
                path: path.to_path_buf(),
                location: None,
                column: None,
                reason: "expected a JSON list of objects".to_string(),
            });
        }
    };
    let mut rows = Vec::new();
    let mut present = Vec::new();
    for (index, value) in list.into_iter().enumerate() {
        let location = format!("item {}", index + 1);
        rows.push(object_row(path, location, value, &mut present)?);
    }
    Ok((rows, present))
}

/// Reads a CSV file with a header row; every cell is text.
pub(super) fn read_csv(path: &Path, text: &str) -> Result<(Vec<Row>, Vec<String>)> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    let bad = |e: csv::Error| Error::Row {
        path: path.to_path_buf(),
        location: e.position().map(|p| format!("line {}", p.line())),
        column: None,
        reason: format!("invalid CSV: {e}"),
    };
    let headers: Vec<String> = reader
        .headers()
        .map_err(bad)?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(bad)?;
        let line = record.position().map_or(rows.len() + 2, |p| {
            usize::try_from(p.line()).unwrap_or(usize::MAX)
        });
        let fields = headers
            .iter()
            .zip(record.iter())
            .map(|(h, v)| (h.clone(), Value::String(v.to_string())))
            .collect();
        rows.push(Row {
            location: format!("line {line}"),
            fields,
            csv: true,
        });
    }
    Ok((rows, headers))
}
