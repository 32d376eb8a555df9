//! Hugging Face datasets from the local cache, never downloaded.
//!
//! `path=org/name` (or `org/name@revision`), when no such local file
//! exists, names a dataset in the Hugging Face hub cache: `$HF_HUB_CACHE`,
//! else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
//! `~/.cache/huggingface/hub`. Its folder `datasets--org--name` holds
//! `refs/<revision>` (the commit of a branch or tag; `main` by default) and
//! `snapshots/<commit>/...`, the files. The split's files are the Parquet
//! files (else the Arrow files) of the snapshot whose path names the split:
//! `data/train-00000-of-00001.parquet`, `<config>/train/0000.parquet`,
//! `<config>/name-train.parquet`, `train.parquet`. `config` keeps those
//! under one config folder.

use std::path::{Path, PathBuf};

use crate::{Error, Result};
use guidebench_core::Error as CoreError;

/// A dataset named `org/name`, with an optional revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DatasetId {
    /// `org/name`.
    pub(super) name: String,
    /// A branch, tag or commit (`main` when absent).
    pub(super) revision: Option<String>,
}

impl DatasetId {
    /// `org/name` or `org/name@revision`; `None` for anything else (a
    /// relative file path with an extension, an absolute path).
    pub(super) fn parse(text: &str) -> Option<Self> {
        let (name, revision) = match text.split_once('@') {
            Some((name, revision)) => (name, Some(revision)),
            None => (text, None),
        };
        let (org, repo) = name.split_once('/')?;
        let part = |s: &str| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        let data_file = Path::new(repo).extension().is_some_and(|e| {
            let e = e.to_string_lossy().to_ascii_lowercase();
            super::rows::EXTENSIONS.contains(&e.as_str())
        });
        if !part(org) || !part(repo) || data_file || revision.is_some_and(|r| r.is_empty()) {
            return None;
        }
        Some(DatasetId {
            name: name.to_string(),
            revision: revision.map(str::to_string),
        })
    }
}

/// The hub cache folder, by the environment as `huggingface_hub` reads it.
fn hub_cache() -> Option<PathBuf> {
    hub_cache_from(|name| std::env::var_os(name))
}

/// The hub cache folder, given how to read an environment variable.
fn hub_cache_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    if let Some(cache) = var("HF_HUB_CACHE") {
        return Some(PathBuf::from(cache));
    }
    if let Some(home) = var("HF_HOME") {
        return Some(PathBuf::from(home).join("hub"));
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(xdg).join("huggingface").join("hub"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".cache/huggingface/hub"))
}

/// The snapshot folder of the dataset and the files of its split, in
/// name order, from the hub cache `cache` (default: by the environment);
/// an error names the places looked in.
pub(super) fn resolve(
    id: &DatasetId,
    split: &str,
    config: Option<&str>,
    cache: Option<PathBuf>,
) -> Result<(PathBuf, Vec<PathBuf>)> {
    let revision = id.revision.as_deref().unwrap_or("main");
    let missing = |looked: &[PathBuf], what: &str| Error::DatasetNotCached {
        name: id.name.clone(),
        what: what.to_string(),
        looked: looked.to_vec(),
    };
    let Some(cache) = cache.or_else(hub_cache) else {
        return Err(missing(&[], "no cache"));
    };
    let folder = cache.join(format!("datasets--{}", id.name.replace('/', "--")));
    if !folder.is_dir() {
        return Err(missing(&[folder], "no such folder"));
    }
    let reference = folder.join("refs").join(revision);
    let commit = match std::fs::read_to_string(&reference) {
        Ok(commit) => commit.trim().to_string(),
        Err(_) => revision.to_string(),
    };
    let snapshot = folder.join("snapshots").join(&commit);
    if !snapshot.is_dir() {
        return Err(missing(
            &[reference, snapshot],
            &format!("no snapshot of revision `{revision}`"),
        ));
    }
    let mut files = Vec::new();
    walk(&snapshot, &mut files).map_err(|e| CoreError::io(&snapshot, e))?;
    files.sort();
    let in_split = |path: &PathBuf| {
        let relative = path.strip_prefix(&snapshot).unwrap_or(path);
        let parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().to_ascii_lowercase())
            .collect();
        let Some((file, folders)) = parts.split_last() else {
            return false;
        };
        let stem = file
            .rsplit_once('.')
            .map_or(file.as_str(), |(stem, _)| stem);
        let named = folders.iter().any(|f| f == split)
            || stem == split
            || stem.starts_with(&format!("{split}-"))
            || stem.ends_with(&format!("-{split}"))
            || stem.contains(&format!("-{split}-"));
        let configured = config.is_none_or(|c| folders.first().is_some_and(|f| *f == c));
        named && configured
    };
    let with = |extensions: &[&str]| -> Vec<PathBuf> {
        files
            .iter()
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| extensions.contains(&e.to_string_lossy().as_ref()))
            })
            .filter(|p| in_split(p))
            .cloned()
            .collect()
    };
    let mut chosen = with(&["parquet"]);
    if chosen.is_empty() {
        chosen = with(&["arrow"]);
    }
    if chosen.is_empty() {
        return Err(Error::DatasetSplit {
            name: id.name.clone(),
            split: split.to_string(),
            config: config.map(str::to_string),
            snapshot,
        });
    }
    Ok((snapshot, chosen))
}

/// Every file under `folder` (links followed), recursively.
fn walk(folder: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(folder)? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, files)?;
        } else if path.is_file() {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dataset_id_is_org_and_name_with_an_optional_revision() {
        assert_eq!(
            DatasetId::parse("org/name@v1"),
            Some(DatasetId {
                name: "org/name".to_string(),
                revision: Some("v1".to_string()),
            })
        );
        assert!(DatasetId::parse("lmsys/chat-1m").is_some());
        assert_eq!(DatasetId::parse("data/prompts.jsonl"), None);
        assert_eq!(DatasetId::parse("/abs/path"), None);
        assert_eq!(DatasetId::parse("a/b/c"), None);
        assert_eq!(DatasetId::parse("../x"), None);
        assert_eq!(DatasetId::parse("prompts.parquet"), None);
    }

    #[test]
    fn the_cache_is_found_as_huggingface_hub_finds_it() {
        let env = |set: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                set.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        const ALL: &[(&str, &str)] = &[
            ("HF_HUB_CACHE", "/hub"),
            ("HF_HOME", "/hf"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(hub_cache_from(env(ALL)), Some(PathBuf::from("/hub")));
        assert_eq!(
            hub_cache_from(env(&ALL[1..])),
            Some(PathBuf::from("/hf/hub"))
        );
        assert_eq!(
            hub_cache_from(env(&ALL[2..])),
            Some(PathBuf::from("/home/u/.cache/huggingface/hub"))
        );
        assert_eq!(hub_cache_from(env(&[])), None);
    }
}
