//! Listing a model folder's safetensors weight files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::files::{parse_json, read_required};
use crate::{Error, Result};

/// The index of sharded weights.
pub(crate) const INDEX_JSON: &str = "model.safetensors.index.json";
/// Unsharded weights.
const SINGLE: &str = "model.safetensors";

/// The safetensors files of a model folder: the shards named by
/// `model.safetensors.index.json` (each once, sorted; each must exist),
/// else `model.safetensors`, else every `*.safetensors` file, sorted.
///
/// Errors name the path: an index without a `weight_map` object, or naming
/// a shard outside the folder, is [`Error::InvalidModelConfig`]; a missing
/// shard, or a folder without any safetensors file, is
/// [`Error::MissingModelFile`].
pub fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join(INDEX_JSON);
    if index.is_file() {
        return indexed_shards(dir, &index);
    }
    let single = dir.join(SINGLE);
    if single.is_file() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|ext| ext == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::MissingModelFile {
            path: single,
            what: "safetensors weights (model.safetensors, model.safetensors.index.json or *.safetensors)",
        });
    }
    Ok(files)
}

fn indexed_shards(dir: &Path, index: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for name in shard_names(index)? {
        let shard = dir.join(&name);
        if !shard.is_file() {
            return Err(Error::MissingModelFile {
                path: shard,
                what: "a weight shard named by model.safetensors.index.json",
            });
        }
        files.push(shard);
    }
    Ok(files)
}

/// The shards `model.safetensors.index.json` at `index` names, each once,
/// sorted; each a file inside the folder, never a path out of it.
pub(crate) fn shard_names(index: &Path) -> Result<Vec<String>> {
    let text = read_required(index, "the weight index")?;
    let value = parse_json(&text, index)?;
    let invalid = |reason: String| Error::InvalidModelConfig {
        path: index.to_owned(),
        reason,
    };
    let Some(map) = value.get("weight_map").and_then(Value::as_object) else {
        return Err(invalid("no `weight_map` object".into()));
    };
    let names: BTreeSet<&str> = map.values().filter_map(Value::as_str).collect();
    if names.is_empty() {
        return Err(invalid("`weight_map` names no shard".into()));
    }
    names
        .into_iter()
        .map(|name| {
            let inside = Path::new(name)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            if inside {
                Ok(name.to_owned())
            } else {
                Err(invalid(format!(
                    "shard `{name}` is not a file of the folder"
                )))
            }
        })
        .collect()
}

/// The most header bytes a safetensors file may have (the format's own
/// limit, 100 MB).
const MAX_HEADER: u64 = 100_000_000;

/// One tensor of a safetensors file, as its header describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetensorsEntry {
    /// Its name.
    pub name: String,
    /// Its dtype as the format names it (`F32`, `BF16`, `F16`, `I64`, ...).
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Where its bytes start, from the start of the file.
    pub offset: u64,
    /// How many bytes it has.
    pub len: u64,
}

/// The tensors of the safetensors file at `path`, read from its header
/// alone (an 8-byte little-endian length, then that much JSON mapping each
/// tensor to `{dtype, shape, data_offsets}`, and an optional
/// `__metadata__`): the `safetensors` crate's `read_metadata` wants the
/// whole file in memory. Each entry's bytes are checked to lie within the
/// file, and to be as many as its shape times its dtype's size where the
/// dtype is one whose size is known. A file that cannot be read, is too
/// short, or whose header is not such JSON is
/// [`Error::InvalidModelConfig`] naming it.
pub fn safetensors_header(path: &Path) -> Result<Vec<SafetensorsEntry>> {
    use std::io::Read;
    let invalid = |reason: String| Error::InvalidModelConfig {
        path: path.to_owned(),
        reason,
    };
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|e| invalid(format!("its header: {e}")))?;
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER || 8 + n > size {
        return Err(invalid(format!(
            "a header of {n} bytes in a file of {size}"
        )));
    }
    let mut json = Vec::new();
    file.take(n)
        .read_to_end(&mut json)
        .map_err(|e| invalid(format!("its header: {e}")))?;
    let header: std::collections::BTreeMap<String, Value> =
        serde_json::from_slice(&json).map_err(|e| invalid(format!("its header: {e}")))?;
    let data_start = 8 + n;
    let mut entries = Vec::with_capacity(header.len());
    for (name, info) in header {
        if name == "__metadata__" {
            continue;
        }
        let entry = header_entry(&name, &info, data_start, size).map_err(&invalid)?;
        entries.push(entry);
    }
    Ok(entries)
}

/// One header entry, checked against the data's room in a file of `size`
/// bytes whose data starts at `data_start`.
fn header_entry(
    name: &str,
    info: &Value,
    data_start: u64,
    size: u64,
) -> std::result::Result<SafetensorsEntry, String> {
    let dtype = info
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("tensor {name}: no dtype"))?;
    let shape: Vec<usize> = info
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|s| {
            s.iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect()
        })
        .ok_or_else(|| format!("tensor {name}: no shape"))?;
    let offsets: Vec<u64> = info
        .get("data_offsets")
        .and_then(Value::as_array)
        .and_then(|o| o.iter().map(Value::as_u64).collect())
        .ok_or_else(|| format!("tensor {name}: no data offsets"))?;
    let [begin, end] = offsets[..] else {
        return Err(format!("tensor {name}: data offsets {offsets:?}"));
    };
    let len = end
        .checked_sub(begin)
        .ok_or_else(|| format!("tensor {name}: data offsets {begin}..{end}"))?;
    let width: Option<u64> = match dtype {
        "F64" | "I64" | "U64" => Some(8),
        "F32" | "I32" | "U32" => Some(4),
        "BF16" | "F16" | "I16" | "U16" => Some(2),
        "I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => Some(1),
        _ => None,
    };
    let elements = shape
        .iter()
        .try_fold(1u64, |n, d| n.checked_mul(u64::try_from(*d).ok()?));
    let fits = match (width, elements) {
        (Some(w), Some(e)) => e.checked_mul(w) == Some(len),
        (None, _) => true,
        (Some(_), None) => false,
    };
    if !fits || data_start.checked_add(end).is_none_or(|last| last > size) {
        return Err(format!(
            "tensor {name}: {shape:?} {dtype} does not fit bytes {begin}..{end} of the data"
        ));
    }
    Ok(SafetensorsEntry {
        name: name.to_owned(),
        dtype: dtype.to_owned(),
        shape,
        offset: data_start + begin,
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file: `header` JSON, then `data` bytes.
    fn safetensors_file(dir: &Path, header: &str, data: usize) -> PathBuf {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.resize(bytes.len() + data, 0);
        let path = dir.join("model.safetensors");
        std::fs::write(&path, bytes).expect("write");
        path
    }

    #[test]
    fn a_safetensors_header_gives_each_tensors_place_and_a_bad_one_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}"#;
        let path = safetensors_file(dir.path(), good, 20);
        let entries = safetensors_header(&path).expect("a header");
        let start = 8 + good.len() as u64;
        assert_eq!(
            entries,
            [
                SafetensorsEntry {
                    name: "a".into(),
                    dtype: "BF16".into(),
                    shape: vec![2, 3],
                    offset: start,
                    len: 12,
                },
                SafetensorsEntry {
                    name: "b".into(),
                    dtype: "F32".into(),
                    shape: vec![2],
                    offset: start + 12,
                    len: 8,
                },
            ]
        );
        // Data cut short, a shape that does not fit its bytes, offsets
        // backwards, and a header that is not JSON: each names the file.
        for (header, data) in [
            (good, 19),
            (
                r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                8,
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#,
                8,
            ),
            ("not json", 0),
        ] {
            let path = safetensors_file(dir.path(), header, data);
            let err = safetensors_header(&path).expect_err("a bad header");
            assert!(matches!(err, Error::InvalidModelConfig { .. }), "{err}");
            assert!(err.to_string().contains("model.safetensors"), "{err}");
        }
    }

    fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        dir
    }

    #[test]
    fn the_index_names_the_shards_each_once_in_order() {
        let dir = folder(&[
            (
                INDEX_JSON,
                r#"{"metadata": {}, "weight_map": {"a": "model-00002-of-00002.safetensors",
                    "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}}"#,
            ),
            ("model-00001-of-00002.safetensors", ""),
            ("model-00002-of-00002.safetensors", ""),
            ("stray.safetensors", ""),
        ]);
        assert_eq!(
            weight_files(dir.path()).expect("files"),
            vec![
                dir.path().join("model-00001-of-00002.safetensors"),
                dir.path().join("model-00002-of-00002.safetensors"),
            ]
        );
    }

    #[test]
    fn a_missing_shard_or_a_broken_index_names_the_path() {
        let dir = folder(&[(INDEX_JSON, r#"{"weight_map": {"a": "gone.safetensors"}}"#)]);
        let err = weight_files(dir.path()).expect_err("missing shard");
        assert!(
            matches!(err, Error::MissingModelFile { ref path, .. } if path == &dir.path().join("gone.safetensors")),
            "{err}"
        );
        let dir = folder(&[(INDEX_JSON, r#"{"weights": {}}"#)]);
        let err = weight_files(dir.path()).expect_err("no weight_map");
        assert!(
            matches!(err, Error::InvalidModelConfig { ref path, .. } if path.ends_with(INDEX_JSON)),
            "{err}"
        );
        let dir = folder(&[(INDEX_JSON, r#"{"weight_map": {"a": "../x.safetensors"}}"#)]);
        let err = weight_files(dir.path()).expect_err("outside");
        assert!(matches!(err, Error::InvalidModelConfig { .. }), "{err}");
    }

    #[test]
    fn model_safetensors_wins_over_other_files_and_else_all_are_sorted() {
        let dir = folder(&[("model.safetensors", ""), ("extra.safetensors", "")]);
        assert_eq!(
            weight_files(dir.path()).expect("files"),
            vec![dir.path().join("model.safetensors")]
        );
        let dir = folder(&[
            ("b.safetensors", ""),
            ("a.safetensors", ""),
            ("config.json", "{}"),
        ]);
        assert_eq!(
            weight_files(dir.path()).expect("files"),
            vec![
                dir.path().join("a.safetensors"),
                dir.path().join("b.safetensors")
            ]
        );
    }

    #[test]
    fn a_folder_without_weights_says_so() {
        let dir = folder(&[("config.json", "{}")]);
        let err = weight_files(dir.path()).expect_err("no weights");
        assert!(matches!(err, Error::MissingModelFile { .. }), "{err}");
        assert!(err.to_string().contains("safetensors"), "{err}");
    }
}
