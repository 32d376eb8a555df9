//! JSONL, JSON, CSV and plain text data files, read into rows.

use std::path::Path;

use serde_json::{Map, Value};

use super::{Row, note_columns};
use crate::{Error, Result};

/// Reads one JSON object per non-blank line; a line that is not one is a
/// [`Row::bad`] naming what is wrong.
pub(super) fn read_jsonl(text: &str) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut present = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let location = format!("line {}", index + 1);
        let row = match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(fields)) => {
                note_columns(&mut present, &fields);
                Row {
                    location,
                    fields,
                    bad: None,
                    csv: false,
                }
            }
            Ok(_) => bad_row(location, "expected a JSON object".to_string()),
            Err(e) => bad_row(location, invalid_json(&e)),
        };
        rows.push(row);
    }
    (rows, present)
}

/// A record that could not be read.
fn bad_row(location: String, reason: String) -> Row {
    Row {
        location,
        fields: Map::new(),
        bad: Some(reason),
        csv: false,
    }
}

/// serde's account of malformed JSON, without its `at line L column C`
/// (the location says where), with the column in front.
fn invalid_json(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    let message = message.strip_suffix(&suffix).unwrap_or(&message);
    format!("invalid JSON at column {}: {message}", error.column())
}

/// Reads a JSON list of objects (or an object whose only field is one);
/// an item that is not an object is a [`Row::bad`].
///
/// # Errors
///
/// [`Error::Row`] naming the line of malformed JSON, or saying that the
/// document is not a list.
pub(super) fn read_json(path: &Path, text: &str) -> Result<(Vec<Row>, Vec<String>)> {
    let value: Value = serde_json::from_str(text).map_err(|e| Error::Row {
        path: path.to_path_buf(),
        location: Some(format!("line {}", e.line())),
        column: None,
        reason: invalid_json(&e),
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
        rows.push(match value {
            Value::Object(fields) => {
                note_columns(&mut present, &fields);
                Row {
                    location,
                    fields,
                    bad: None,
                    csv: false,
                }
            }
            _ => bad_row(location, "expected a JSON object".to_string()),
        });
    }
    Ok((rows, present))
}

/// Reads a CSV file with a header row; every cell is text. A record that
/// cannot be read (the wrong number of cells) is a [`Row::bad`].
///
/// # Errors
///
/// [`Error::Row`] when the header row cannot be read.
pub(super) fn read_csv(path: &Path, text: &str) -> Result<(Vec<Row>, Vec<String>)> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    let location = |e: &csv::Error| e.position().map(|p| format!("line {}", p.line()));
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| Error::Row {
            path: path.to_path_buf(),
            location: location(&e),
            column: None,
            reason: format!("invalid CSV: {e}"),
        })?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = match record {
            Ok(record) => record,
            Err(e) => {
                let at = location(&e).unwrap_or_else(|| format!("record {}", rows.len() + 1));
                rows.push(bad_row(at, format!("invalid CSV: {e}")));
                continue;
            }
        };
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
            bad: None,
            csv: true,
        });
    }
    Ok((rows, headers))
}

/// Reads a plain text file: each non-blank line is one prompt, in the
/// column `text` (GuideLLM's `text_file`).
pub(super) fn read_text(text: &str) -> (Vec<Row>, Vec<String>) {
    let rows = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            let mut fields = Map::new();
            fields.insert("text".to_string(), Value::String(line.to_string()));
            Row {
                location: format!("line {}", index + 1),
                fields,
                bad: None,
                csv: false,
            }
        })
        .collect();
    (rows, vec!["text".to_string()])
}
