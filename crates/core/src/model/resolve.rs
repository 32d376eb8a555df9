//! Resolving `model=` to a folder: a local folder or `.gguf` file, a
//! registered built-in model, or a Hugging Face Hub name, from the local
//! cache or downloaded into it ([`hub`](super::hub)).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use guidebench_hub::HubSettings;

use super::hub::{HubModel, WeightFormat, fetch_model, fetch_tokenizer, parse_spec};
use crate::{Error, Result};

/// The prefix of built-in models (`builtin:tiny`).
pub const BUILTIN_PREFIX: &str = "builtin:";

/// Where [`ModelSearch::resolve`] looks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelSearch {
    /// The Hub and the Hugging Face cache (endpoint, token, cache folder,
    /// offline mode).
    pub hub: HubSettings,
    /// guidebench's cache root, handed to built-in models' constructors.
    pub cache_root: PathBuf,
}

impl ModelSearch {
    /// Explicit places: the Hub's settings and guidebench's cache root.
    /// Tests use this instead of setting environment variables.
    pub fn new(hub: HubSettings, cache_root: PathBuf) -> Self {
        ModelSearch { hub, cache_root }
    }

    /// The places the environment names: [`HubSettings::from_env`] and
    /// [`cache_root`].
    pub fn from_env() -> Self {
        ModelSearch {
            hub: HubSettings::from_env(),
            cache_root: cache_root(),
        }
    }

    /// Resolves a model spec to a folder (or GGUF file) for an engine
    /// that reads safetensors weights; see [`resolve_for`](Self::resolve_for).
    pub fn resolve(&self, spec: &str) -> Result<PathBuf> {
        self.resolve_for(spec, WeightFormat::Safetensors)
    }

    /// Resolves a model spec, trying in order:
    ///
    /// 1. `builtin:NAME`: the registered [`BuiltinModel`](super::BuiltinModel)
    ///    `NAME`, made under [`cache_root`](Self::cache_root) if needed; an
    ///    unknown name is [`Error::UnknownName`] listing the registered ones;
    /// 2. an existing local folder, or a local `.gguf` file, as given
    ///    (a folder holding one `.gguf` file and no `config.json` is read
    ///    as that file by [`ModelFolder`](super::ModelFolder));
    /// 3. a Hub name: `ORG/NAME[@REVISION]` (the files an engine reading
    ///    `weights` needs), `ORG/NAME:QUANT` or `ORG/NAME/FILE.gguf` (one
    ///    GGUF file): from the Hugging Face cache, downloaded into it when
    ///    missing (see [`hub`](super::hub); nothing is sent offline or when
    ///    a commit's snapshot already holds them).
    ///
    /// # Errors
    ///
    /// [`Error::ModelNotFound`] listing what was tried (a name that is
    /// neither a path nor a Hub name, or a repository the Hub does not
    /// have); [`Error::Hub`] for the Hub's other answers (gated, offline,
    /// unreachable, no such quantization).
    pub fn resolve_for(&self, spec: &str, weights: WeightFormat) -> Result<PathBuf> {
        if let Some(name) = spec.strip_prefix(BUILTIN_PREFIX) {
            let model = super::builtin::builtin_models()?.get(name)?;
            return (model.create)(&self.cache_root);
        }
        let path = Path::new(spec);
        if path.is_dir() || (path.is_file() && super::gguf::is_gguf_path(path)) {
            return Ok(path.to_owned());
        }
        let local = if path.exists() {
            format!("local folder `{spec}` (it is not a folder, nor a .gguf file)")
        } else {
            format!("local folder `{spec}`")
        };
        let Some((repo, model)) = parse_spec(spec) else {
            return Err(Error::ModelNotFound {
                model: spec.to_owned(),
                tried: vec![
                    local,
                    "a Hub name (it is not ORG/NAME, ORG/NAME:QUANT or ORG/NAME/FILE.gguf)".into(),
                ],
            });
        };
        fetch_model(&self.hub, &repo, &model, weights).map_err(|e| not_found(spec, local, e))
    }

    /// Resolves `--tokenizer` (or a server's model id): an existing file
    /// or folder as given, else a Hub name whose tokenizer files (never
    /// its weights) are fetched into the cache; returns the path to load.
    ///
    /// # Errors
    ///
    /// As [`resolve_for`](Self::resolve_for), for the tokenizer files.
    pub fn resolve_tokenizer(&self, spec: &str) -> Result<PathBuf> {
        let path = Path::new(spec);
        if path.exists() {
            return Ok(path.to_owned());
        }
        let local = format!("a local file or folder `{spec}`");
        match parse_spec(spec) {
            Some((repo, HubModel::Folder)) => {
                fetch_tokenizer(&self.hub, &repo).map_err(|e| not_found(spec, local, e))
            }
            _ => Err(Error::ModelNotFound {
                model: spec.to_owned(),
                tried: vec![local, "a Hub name (it is not ORG/NAME[@REVISION])".into()],
            }),
        }
    }
}

/// A repository the Hub does not have is [`Error::ModelNotFound`] with
/// the local folder tried first; other errors pass as they are.
fn not_found(spec: &str, local: String, error: Error) -> Error {
    match error {
        Error::Hub(hub) if matches!(*hub, guidebench_hub::Error::RepoNotFound { .. }) => {
            Error::ModelNotFound {
                model: spec.to_owned(),
                tried: vec![local, format!("the Hugging Face Hub: {hub}")],
            }
        }
        other => other,
    }
}

/// Whether `spec` has the shape of a Hub name (`ORG/NAME[@REVISION]`,
/// `ORG/NAME:QUANT`, `ORG/NAME/FILE.gguf`), whether or not it exists.
pub fn is_hub_name(spec: &str) -> bool {
    parse_spec(spec).is_some()
}

/// Resolves `model=` with the places the environment names; see
/// [`ModelSearch::resolve`].
pub fn resolve(spec: &str) -> Result<PathBuf> {
    ModelSearch::from_env().resolve(spec)
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

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: &str = "1111111111111111111111111111111111111111";
    const V2: &str = "2222222222222222222222222222222222222222";

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
            for file in ["config.json", "tokenizer.json", "model.safetensors"] {
                std::fs::write(snapshot.join(file), "{}").expect("write");
            }
        }
        root
    }

    /// Offline: the cache alone answers, nothing is sent.
    fn search(hub: &Path) -> ModelSearch {
        let settings = HubSettings::new("http://127.0.0.1:9", hub.to_owned()).with_offline(true);
        ModelSearch::new(settings, hub.join("guidebench"))
    }

    #[test]
    fn a_cached_hub_model_resolves_to_the_snapshot_its_ref_names() {
        let hub = fake_hub(&[
            ("models--org--name", "main", MAIN),
            ("models--org--name", "v2", V2),
        ]);
        let search = search(hub.path());
        let repo = hub.path().join("models--org--name");
        assert_eq!(
            search.resolve("org/name").expect("main"),
            repo.join("snapshots").join(MAIN)
        );
        assert_eq!(
            search.resolve("org/name@v2").expect("branch"),
            repo.join("snapshots").join(V2)
        );
        // a commit hash names its snapshot directly
        assert_eq!(
            search.resolve(&format!("org/name@{V2}")).expect("commit"),
            repo.join("snapshots").join(V2)
        );
        assert_eq!(
            search.resolve_tokenizer("org/name").expect("tokenizer"),
            repo.join("snapshots").join(MAIN)
        );
    }

    #[test]
    fn a_model_not_in_the_cache_offline_says_offline_mode_is_on() {
        let hub = fake_hub(&[("models--org--name", "main", MAIN)]);
        let search = search(hub.path());
        for spec in ["org/other", "org/name@nope"] {
            let err = search.resolve(spec).expect_err("not cached");
            let text = err.to_string();
            assert!(text.contains("HF_HUB_OFFLINE=1"), "{text}");
            assert!(
                text.contains(spec.split('@').next().unwrap_or(spec)),
                "{text}"
            );
            assert!(err.is_usage(), "{text}");
        }
        let err = search.resolve("no/such/path").expect_err("neither");
        assert!(
            matches!(err, Error::ModelNotFound { ref tried, .. } if tried.len() == 2),
            "{err}"
        );
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
    fn the_environment_names_guidebench_s_cache() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| OsString::from(v))
            }
        };
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
