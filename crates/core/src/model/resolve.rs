//! Resolving `model=` to a folder: a local folder or `.gguf` file, a
//! registered built-in model, or a snapshot in the local Hugging Face
//! cache.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use hf_hub::{Cache, Repo, RepoType};

use super::files::CONFIG_JSON;
use crate::registry;
use crate::{Error, Result};

/// The prefix of built-in models (`builtin:tiny`).
pub const BUILTIN_PREFIX: &str = "builtin:";

/// Where [`ModelSearch::resolve`] looks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelSearch {
    /// The Hugging Face hub cache (the folder holding `models--ORG--NAME`),
    /// if one is known.
    pub hub_cache: Option<PathBuf>,
    /// guidebench's cache root, handed to built-in models' constructors.
    pub cache_root: PathBuf,
}

impl ModelSearch {
    /// Explicit places: a Hugging Face hub cache (if any) and guidebench's
    /// cache root. Tests use this instead of setting environment variables.
    pub fn new(hub_cache: Option<PathBuf>, cache_root: PathBuf) -> Self {
        ModelSearch {
            hub_cache,
            cache_root,
        }
    }

    /// The places the environment names: [`hub_cache_dir`] and
    /// [`cache_root`].
    pub fn from_env() -> Self {
        ModelSearch {
            hub_cache: hub_cache_dir(),
            cache_root: cache_root(),
        }
    }

    /// Resolves a model spec to a folder, trying in order:
    ///
    /// 1. `builtin:NAME`: the registered [`BuiltinModel`](registry::BuiltinModel)
    ///    `NAME`, made under [`cache_root`](Self::cache_root) if needed; an
    ///    unknown name is [`Error::UnknownName`] listing the registered ones;
    /// 2. an existing local folder, or a local `.gguf` file, as given
    ///    (a folder holding one `.gguf` file and no `config.json` is read
    ///    as that file by [`ModelFolder`](super::ModelFolder));
    /// 3. `ORG/NAME` or `ORG/NAME@REVISION` (default `main`): the snapshot
    ///    of that revision in the Hugging Face cache, found through
    ///    `hf-hub`'s cache API (`refs/REVISION`, or a snapshot named
    ///    `REVISION` for a commit hash) and holding a `config.json`. Only
    ///    the local cache is read; nothing is downloaded.
    ///
    /// Anything else is [`Error::ModelNotFound`], listing what was tried.
    pub fn resolve(&self, spec: &str) -> Result<PathBuf> {
        if let Some(name) = spec.strip_prefix(BUILTIN_PREFIX) {
            let model = registry::builtin_models()?.get(name)?;
            return (model.create)(&self.cache_root);
        }
        let path = Path::new(spec);
        if path.is_dir() || (path.is_file() && super::gguf::is_gguf_path(path)) {
            return Ok(path.to_owned());
        }
        let mut tried = vec![if path.exists() {
            format!("local folder `{spec}` (it is not a folder, nor a .gguf file)")
        } else {
            format!("local folder `{spec}`")
        }];
        if let Some((id, revision)) = hub_id(spec) {
            match &self.hub_cache {
                Some(root) => match hub_snapshot(root, id, revision) {
                    Ok(dir) => return Ok(dir),
                    Err(description) => tried.push(description),
                },
                None => tried.push(
                    "the Hugging Face cache (none known: HF_HUB_CACHE, HF_HOME and HOME are unset)"
                        .into(),
                ),
            }
        }
        Err(Error::ModelNotFound {
            model: spec.to_owned(),
            tried,
        })
    }
}

/// Resolves `model=` with the places the environment names; see
/// [`ModelSearch::resolve`].
pub fn resolve(spec: &str) -> Result<PathBuf> {
    ModelSearch::from_env().resolve(spec)
}

/// The Hugging Face hub cache, as `huggingface_hub` finds it:
/// `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`
/// (`None` without `HOME`). Empty variables count as unset.
pub fn hub_cache_dir() -> Option<PathBuf> {
    hub_cache_dir_from(|key| std::env::var_os(key))
}

fn hub_cache_dir_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let var = |key: &str| var(key).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|home| home.join("hub")))
        .or_else(|| var("HOME").map(|home| home.join(".cache/huggingface/hub")))
}

/// guidebench's cache folder (built-in models are made under it):
/// `$GUIDEBENCH_CACHE`, else `$XDG_CACHE_HOME/guidebench`, else
/// `~/.cache/guidebench`, else `guidebench-cache` in the temporary folder.
/// Empty variables count as unset.
pub fn cache_root() -> PathBuf {
    cache_root_from(|key| std::env::var_os(key))
}

fn cache_root_from(var: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    let var = |key: &str| var(key).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("GUIDEBENCH_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|dir| dir.join("guidebench")))
        .or_else(|| var("HOME").map(|home| home.join(".cache/guidebench")))
        .unwrap_or_else(|| std::env::temp_dir().join("guidebench-cache"))
}

/// `ORG/NAME[@REVISION]` split into the repo id and the revision (default
/// `main`), if the spec has that shape.
fn hub_id(spec: &str) -> Option<(&str, &str)> {
    let (id, revision) = spec.split_once('@').unwrap_or((spec, "main"));
    let mut parts = id.split('/');
    let well_formed = matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(org), Some(name), None)
            if !org.is_empty() && !name.is_empty() && !org.starts_with('.') && !name.starts_with('.')
    );
    // A revision names a ref or a snapshot inside the repo's folder.
    let revision_ok = !revision.is_empty()
        && Path::new(revision)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    (well_formed && revision_ok).then_some((id, revision))
}

/// The snapshot folder of `id` at `revision` under the hub cache `root`;
/// on failure, a description of what was looked at.
fn hub_snapshot(root: &Path, id: &str, revision: &str) -> std::result::Result<PathBuf, String> {
    let repo = Repo::with_revision(id.to_owned(), RepoType::Model, revision.to_owned());
    let repo_dir = root.join(repo.folder_name());
    let cache = Cache::new(root.to_owned());
    if let Some(dir) = cache
        .repo(repo)
        .get(CONFIG_JSON)
        .and_then(|config| config.parent().map(Path::to_path_buf))
    {
        return Ok(dir);
    }
    // A commit hash has no ref file: its snapshot is named after it.
    let snapshot = repo_dir.join("snapshots").join(revision);
    if snapshot.join(CONFIG_JSON).is_file() {
        return Ok(snapshot);
    }
    Err(format!(
        "the Hugging Face cache: `{}` (a config.json in the snapshot that refs/{revision} names, \
         or in snapshots/{revision})",
        repo_dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make_test_model(root: &Path) -> Result<PathBuf> {
        let dir = root.join("builtin/core-test-model");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(dir)
    }

    crate::register_builtin_model! {
        name: "core-test-model",
        description: "An empty folder, for core's own tests",
        create: make_test_model,
    }

    /// A hub cache laid out as `huggingface_hub` writes it: the ref file
    /// holds the commit hash, without a newline.
    fn fake_hub(repos: &[(&str, &str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("tempdir");
        for (folder, reference, commit) in repos {
            let repo = root.path().join(folder);
            let snapshot = repo.join("snapshots").join(commit);
            std::fs::create_dir_all(&snapshot).expect("mkdir");
            std::fs::create_dir_all(repo.join("refs")).expect("mkdir");
            std::fs::write(repo.join("refs").join(reference), commit).expect("write");
            std::fs::write(snapshot.join("config.json"), "{}").expect("write");
        }
        root
    }

    fn search(hub: &Path) -> ModelSearch {
        ModelSearch::new(Some(hub.to_owned()), hub.join("guidebench"))
    }

    #[test]
    fn hub_ids_are_org_slash_name_with_an_optional_revision() {
        assert_eq!(hub_id("Qwen/Qwen3-0.6B"), Some(("Qwen/Qwen3-0.6B", "main")));
        assert_eq!(hub_id("org/name@v1.0"), Some(("org/name", "v1.0")));
        assert_eq!(hub_id("a/b/c"), None);
        assert_eq!(hub_id("plain"), None);
        assert_eq!(hub_id("./x"), None);
        assert_eq!(hub_id("org/.."), None);
        assert_eq!(hub_id("org/name@"), None);
        assert_eq!(hub_id("org/name@../../x"), None);
    }

    #[test]
    fn a_cached_hub_model_resolves_to_the_snapshot_its_ref_names() {
        let hub = fake_hub(&[
            ("models--org--name", "main", "abc123"),
            ("models--org--name", "v2", "def456"),
        ]);
        let search = search(hub.path());
        let repo = hub.path().join("models--org--name");
        assert_eq!(
            search.resolve("org/name").expect("main"),
            repo.join("snapshots/abc123")
        );
        assert_eq!(
            search.resolve("org/name@v2").expect("branch"),
            repo.join("snapshots/def456")
        );
        // a commit hash names its snapshot directly
        assert_eq!(
            search.resolve("org/name@def456").expect("commit"),
            repo.join("snapshots/def456")
        );
    }

    #[test]
    fn a_model_not_in_the_cache_names_what_was_tried() {
        let hub = fake_hub(&[("models--org--name", "main", "abc123")]);
        let search = search(hub.path());
        for spec in ["org/other", "org/name@nope"] {
            let err = search.resolve(spec).expect_err("not cached");
            let Error::ModelNotFound { model, tried } = &err else {
                panic!("{err}");
            };
            assert_eq!(model, spec);
            assert_eq!(tried.len(), 2, "{tried:?}");
            assert!(tried[0].contains(spec), "{tried:?}");
            assert!(tried[1].contains("models--org--"), "{tried:?}");
            assert!(err.is_usage());
        }
        let err = search.resolve("no/such/path").expect_err("neither");
        assert!(
            matches!(err, Error::ModelNotFound { ref tried, .. } if tried.len() == 1),
            "{err}"
        );
        let no_hub = ModelSearch::new(None, hub.path().to_owned());
        let err = no_hub.resolve("org/name").expect_err("no hub cache");
        assert!(err.to_string().contains("HF_HUB_CACHE"), "{err}");
    }

    #[test]
    fn a_local_folder_wins_and_a_file_is_not_a_folder() {
        let hub = fake_hub(&[]);
        let search = search(hub.path());
        let local = hub.path().join("local-model");
        std::fs::create_dir_all(&local).expect("mkdir");
        let spec = local.to_str().expect("utf-8");
        assert_eq!(search.resolve(spec).expect("local"), local);

        let file = hub.path().join("weights.bin");
        std::fs::write(&file, "").expect("write");
        let err = search
            .resolve(file.to_str().expect("utf-8"))
            .expect_err("a file");
        assert!(err.to_string().contains("not a folder"), "{err}");
    }

    #[test]
    fn builtin_models_are_made_under_the_cache_root_and_unknown_ones_list_the_known() {
        let hub = fake_hub(&[]);
        let search = search(hub.path());
        assert_eq!(
            search.resolve("builtin:core-test-model").expect("builtin"),
            hub.path().join("guidebench/builtin/core-test-model")
        );
        let err = search.resolve("builtin:nope").expect_err("unknown");
        assert!(
            matches!(err, Error::UnknownName { ref available, .. }
                if available.iter().any(|n| n == "core-test-model")),
            "{err}"
        );
        assert!(err.to_string().contains("builtin model `nope`"), "{err}");
    }

    #[test]
    fn the_environment_names_the_caches_in_huggingface_order() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let all = env(&[
            ("HF_HUB_CACHE", "/hub"),
            ("HF_HOME", "/hf"),
            ("HOME", "/home/u"),
        ]);
        assert_eq!(hub_cache_dir_from(all), Some(PathBuf::from("/hub")));
        let home = env(&[
            ("HF_HUB_CACHE", ""),
            ("HF_HOME", "/hf"),
            ("HOME", "/home/u"),
        ]);
        assert_eq!(hub_cache_dir_from(home), Some(PathBuf::from("/hf/hub")));
        let user = env(&[("HOME", "/home/u")]);
        assert_eq!(
            hub_cache_dir_from(user),
            Some(PathBuf::from("/home/u/.cache/huggingface/hub"))
        );
        assert_eq!(hub_cache_dir_from(env(&[])), None);

        assert_eq!(
            cache_root_from(env(&[("GUIDEBENCH_CACHE", "/g"), ("XDG_CACHE_HOME", "/x")])),
            PathBuf::from("/g")
        );
        assert_eq!(
            cache_root_from(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/home/u")])),
            PathBuf::from("/x/guidebench")
        );
        assert_eq!(
            cache_root_from(env(&[("HOME", "/home/u")])),
            PathBuf::from("/home/u/.cache/guidebench")
        );
    }
}
