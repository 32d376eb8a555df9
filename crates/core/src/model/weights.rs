//! Listing a model folder's safetensors weight files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::files::{parse_json, read_required};
use crate::{Error, Result};

/// The index of sharded weights.
const INDEX_JSON: &str = "model.safetensors.index.json";
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
    let mut files = Vec::with_capacity(names.len());
    for name in names {
        // A shard is a file inside the folder, never a path out of it.
        let inside = Path::new(name)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside {
            return Err(invalid(format!(
                "shard `{name}` is not a file of the folder"
            )));
        }
        let shard = dir.join(name);
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

#[cfg(test)]
mod tests {
    use super::*;

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
