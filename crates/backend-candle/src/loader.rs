//! Finding a model folder and reading its safetensors weights.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use crate::error::{CandleError, Result};

/// The prefix of built-in generated models (`builtin:tiny`).
pub const BUILTIN_PREFIX: &str = "builtin:";

/// Resolves `model=` to a folder: an existing directory, a `builtin:` name
/// (generated into the cache on first use), or a Hugging Face Hub id found
/// in the local HF cache. `None` means `builtin:tiny`.
pub fn resolve_model(model: Option<&str>) -> Result<PathBuf> {
    let model = model.unwrap_or("builtin:tiny");
    if let Some(name) = model.strip_prefix(BUILTIN_PREFIX) {
        return crate::fixtures::builtin_model_dir(name);
    }
    let path = Path::new(model);
    if path.is_dir() {
        return Ok(path.to_owned());
    }
    let mut tried = vec![path.to_owned()];
    if looks_like_hub_id(model) {
        for root in hub_cache_roots() {
            let repo = root.join(format!("models--{}", model.replace('/', "--")));
            match snapshot(&repo) {
                Some(dir) => return Ok(dir),
                None => tried.push(repo),
            }
        }
    }
    Err(CandleError::ModelNotFound {
        model: model.to_owned(),
        tried,
    })
}

fn looks_like_hub_id(model: &str) -> bool {
    let mut parts = model.split('/');
    matches!((parts.next(), parts.next(), parts.next()), (Some(a), Some(b), None) if !a.is_empty() && !b.is_empty() && !a.starts_with('.'))
}

/// Where the Hugging Face cache may be: `HF_HUB_CACHE`, `HF_HOME/hub`,
/// `~/.cache/huggingface/hub`.
fn hub_cache_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(dir) = std::env::var_os("HF_HUB_CACHE") {
        roots.push(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("HF_HOME") {
        roots.push(PathBuf::from(dir).join("hub"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".cache/huggingface/hub"));
    }
    roots
}

/// The snapshot of a cached repo: the revision `refs/main` names, else the
/// only (or first, by name) snapshot holding a `config.json`.
fn snapshot(repo: &Path) -> Option<PathBuf> {
    let snapshots = repo.join("snapshots");
    if let Ok(rev) = std::fs::read_to_string(repo.join("refs/main")) {
        let dir = snapshots.join(rev.trim());
        if dir.join("config.json").is_file() {
            return Some(dir);
        }
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("config.json").is_file())
        .collect();
    dirs.sort();
    dirs.into_iter().next()
}

/// The safetensors files of a model folder: the shards named by
/// `model.safetensors.index.json`, else `model.safetensors`, else every
/// `*.safetensors` file, sorted.
pub fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| CandleError::io(&index, e))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|source| CandleError::Json {
                path: index.clone(),
                source,
            })?;
        let Some(map) = value
            .get("weight_map")
            .and_then(serde_json::Value::as_object)
        else {
            return Err(CandleError::InvalidConfig {
                path: index,
                reason: "no `weight_map` object".into(),
            });
        };
        let files: BTreeSet<&str> = map.values().filter_map(serde_json::Value::as_str).collect();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| CandleError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|ext| ext == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(CandleError::NoWeights {
            dir: dir.to_owned(),
        });
    }
    Ok(files)
}

/// Reads every tensor of `files` onto `device`, in their stored dtype.
pub fn load_tensors(files: &[PathBuf], device: &Device) -> Result<HashMap<String, Tensor>> {
    let mut tensors = HashMap::new();
    for file in files {
        if !file.is_file() {
            return Err(CandleError::io(
                file,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such safetensors file"),
            ));
        }
        let part = candle_core::safetensors::load(file, device).map_err(|e| {
            CandleError::InvalidConfig {
                path: file.clone(),
                reason: format!("cannot read safetensors: {e}"),
            }
        })?;
        tensors.extend(part);
    }
    Ok(tensors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_org_slash_name() {
        assert!(looks_like_hub_id("Qwen/Qwen3-0.6B"));
        assert!(!looks_like_hub_id("a/b/c"));
        assert!(!looks_like_hub_id("plain"));
        assert!(!looks_like_hub_id("./x"));
    }

    #[test]
    fn cached_hub_models_resolve_to_their_snapshot() {
        let root = tempfile::tempdir().expect("tempdir");
        let repo = root.path().join("models--org--name");
        let snap = repo.join("snapshots/abc123");
        std::fs::create_dir_all(&snap).expect("mkdir");
        std::fs::create_dir_all(repo.join("refs")).expect("mkdir");
        std::fs::write(repo.join("refs/main"), "abc123\n").expect("write");
        std::fs::write(snap.join("config.json"), "{}").expect("write");
        assert_eq!(snapshot(&repo), Some(snap));
        assert_eq!(snapshot(&root.path().join("models--x--y")), None);
    }
}
