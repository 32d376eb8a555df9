//! Parquet and Arrow IPC data files, read into the same rows as JSONL, so
//! that `--data kind=file` maps their columns with the same code.
//!
//! Every column becomes a JSON value: text as a string, integers and
//! floats as numbers, booleans, lists as JSON lists and structs as JSON
//! objects (so a `messages` column of `{role, content}` structs is a chat),
//! dictionary-encoded columns as their values, binary cells as a base64
//! `data:` URL of type `application/octet-stream` ([`BINARY_PREFIX`]).
//! Columns of other types (dates, times, decimals) read as null.
//!
//! The Hugging Face `datasets` library stores an `Audio` or `Image`
//! feature as a struct `{bytes: binary, path: string}`: it reads as
//! `{"bytes": "data:application/octet-stream;base64,...", "path":
//! "clip.wav"}` (`bytes` null where the file holds the path alone), which
//! the media columns of `--data kind=file` turn into the clip's bytes with
//! the MIME type of the path's extension.
//!
//! Parquet files may be uncompressed or snappy-compressed (what the Hugging
//! Face `datasets` library and pandas write by default). Arrow IPC files
//! may be in the file format (Feather v2) or the stream format (what
//! `datasets` keeps in its cache and writes with `save_to_disk`).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{ArrowError, DataType};
use serde_json::{Map, Number, Value};

use super::{BINARY_PREFIX, Row};
use crate::{Error, Result};
use guidebench_core::Error as CoreError;

/// The magic bytes that open an Arrow IPC file (as opposed to a stream).
const ARROW_FILE_MAGIC: &[u8] = b"ARROW1";

/// Reads the rows of a Parquet file into `rows`, noting its columns in
/// `present`; locations are `row N`, after `label` when given.
pub(super) fn read_parquet(
    path: &Path,
    label: Option<&str>,
    rows: &mut Vec<Row>,
    present: &mut Vec<String>,
) -> Result<()> {
    let bad = |e: parquet::errors::ParquetError| CoreError::io(path, std::io::Error::other(e));
    let file = File::open(path).map_err(|e| CoreError::io(path, e))?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(bad)?
        .build()
        .map_err(bad)?;
    let mut number = 0;
    for batch in reader {
        let batch = batch.map_err(|e| arrow_error(path, e))?;
        push_batch(&batch, label, &mut number, rows, present);
    }
    Ok(())
}

/// Reads the rows of an Arrow IPC file, in the file or the stream format,
/// into `rows`, noting its columns in `present`; locations are `row N`,
/// after `label` when given.
pub(super) fn read_arrow(
    path: &Path,
    label: Option<&str>,
    rows: &mut Vec<Row>,
    present: &mut Vec<String>,
) -> Result<()> {
    let mut file = File::open(path).map_err(|e| CoreError::io(path, e))?;
    let mut magic = [0_u8; 6];
    let is_file = file.read_exact(&mut magic).is_ok() && magic == ARROW_FILE_MAGIC;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| CoreError::io(path, e))?;
    let batches: Box<dyn Iterator<Item = std::result::Result<RecordBatch, ArrowError>>> = if is_file
    {
        Box::new(
            arrow_ipc::reader::FileReader::try_new(file, None).map_err(|e| arrow_error(path, e))?,
        )
    } else {
        Box::new(
            arrow_ipc::reader::StreamReader::try_new(BufReader::new(file), None)
                .map_err(|e| arrow_error(path, e))?,
        )
    };
    let mut number = 0;
    for batch in batches {
        let batch = batch.map_err(|e| arrow_error(path, e))?;
        push_batch(&batch, label, &mut number, rows, present);
    }
    Ok(())
}

/// An Arrow error while reading `path`.
fn arrow_error(path: &Path, error: ArrowError) -> Error {
    CoreError::io(path, std::io::Error::other(error)).into()
}

/// Appends the rows of one batch; `number` counts the file's rows so far.
fn push_batch(
    batch: &RecordBatch,
    label: Option<&str>,
    number: &mut usize,
    rows: &mut Vec<Row>,
    present: &mut Vec<String>,
) {
    let schema = batch.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    for name in &names {
        if !present.iter().any(|p| p == name) {
            present.push((*name).to_string());
        }
    }
    for index in 0..batch.num_rows() {
        *number += 1;
        let fields: Map<String, Value> = names
            .iter()
            .zip(batch.columns())
            .map(|(name, column)| ((*name).to_string(), value(column.as_ref(), index)))
            .collect();
        rows.push(Row {
            location: match label {
                Some(label) => format!("{label}, row {number}"),
                None => format!("row {number}"),
            },
            fields,
            bad: None,
            csv: false,
        });
    }
}

/// The JSON value of one cell.
fn value(array: &dyn Array, index: usize) -> Value {
    if array.is_null(index) {
        return Value::Null;
    }
    macro_rules! number {
        ($type:ty) => {
            Value::from(array.as_primitive::<$type>().value(index))
        };
    }
    let float = |f: f64| Number::from_f64(f).map_or(Value::Null, Value::Number);
    match array.data_type() {
        DataType::Boolean => Value::Bool(array.as_boolean().value(index)),
        DataType::Int8 => number!(Int8Type),
        DataType::Int16 => number!(Int16Type),
        DataType::Int32 => number!(Int32Type),
        DataType::Int64 => number!(Int64Type),
        DataType::UInt8 => number!(UInt8Type),
        DataType::UInt16 => number!(UInt16Type),
        DataType::UInt32 => number!(UInt32Type),
        DataType::UInt64 => number!(UInt64Type),
        DataType::Float32 => float(f64::from(array.as_primitive::<Float32Type>().value(index))),
        DataType::Float64 => float(array.as_primitive::<Float64Type>().value(index)),
        DataType::Utf8 => Value::from(array.as_string::<i32>().value(index)),
        DataType::LargeUtf8 => Value::from(array.as_string::<i64>().value(index)),
        DataType::Utf8View => Value::from(array.as_string_view().value(index)),
        DataType::Binary => binary(array.as_binary::<i32>().value(index)),
        DataType::LargeBinary => binary(array.as_binary::<i64>().value(index)),
        DataType::BinaryView => binary(array.as_binary_view().value(index)),
        DataType::FixedSizeBinary(_) => binary(array.as_fixed_size_binary().value(index)),
        DataType::List(_) => list(array.as_list::<i32>().value(index).as_ref()),
        DataType::LargeList(_) => list(array.as_list::<i64>().value(index).as_ref()),
        DataType::FixedSizeList(..) => list(array.as_fixed_size_list().value(index).as_ref()),
        DataType::Struct(fields) => {
            let object = array.as_struct();
            Value::Object(
                fields
                    .iter()
                    .zip(object.columns())
                    .map(|(field, column)| (field.name().clone(), value(column.as_ref(), index)))
                    .collect(),
            )
        }
        DataType::Dictionary(..) => {
            let dictionary = array.as_any_dictionary();
            let key = dictionary.normalized_keys()[index];
            value(dictionary.values().as_ref(), key)
        }
        _ => Value::Null,
    }
}

/// A binary cell as a base64 `data:` URL ([`BINARY_PREFIX`]).
fn binary(bytes: &[u8]) -> Value {
    use base64::Engine as _;
    let mut url = String::with_capacity(BINARY_PREFIX.len() + bytes.len().div_ceil(3) * 4);
    url.push_str(BINARY_PREFIX);
    base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut url);
    Value::String(url)
}

/// Every element of a list value.
fn list(array: &dyn Array) -> Value {
    Value::Array((0..array.len()).map(|i| value(array, i)).collect())
}
