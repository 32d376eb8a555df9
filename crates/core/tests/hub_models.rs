//! `model=ORG/NAME`, `ORG/NAME:QUANT` and tokenizers by name, against
//! testkit's stand-in Hub serving the project's own fixtures (never the
//! network): what is downloaded, what is not, and what the folder opens
//! as.

use std::path::Path;

use guidebench_core::Error;
use guidebench_core::model::{ModelFolder, ModelSearch, weight_files};
use guidebench_hub::{HubSettings, Token};
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};
use guidebench_testkit::gguf::{GgufType, write_gguf_fixture};
use guidebench_testkit::hub::{RepoKind, StandInHub};

struct Hub {
    hub: StandInHub,
    cache: tempfile::TempDir,
    _folders: Vec<tempfile::TempDir>,
}

impl Hub {
    fn new() -> Hub {
        Hub {
            hub: StandInHub::start(),
            cache: tempfile::tempdir().expect("tempdir"),
            _folders: Vec::new(),
        }
    }

    fn search(&self, token: Option<&str>) -> ModelSearch {
        let settings = HubSettings::new(&self.hub.endpoint(), self.cache.path().join("hub"))
            .with_token(token.and_then(Token::new));
        ModelSearch::new(settings, self.cache.path().join("guidebench"))
    }

    /// The files downloaded so far (repository paths), in order.
    fn downloads(&self) -> Vec<String> {
        self.hub
            .requests()
            .into_iter()
            .filter(|r| r.is_download())
            .filter_map(|r| r.file)
            .collect()
    }

    /// A sharded safetensors model as the fixture generator writes it,
    /// with a PyTorch checkpoint beside it that no engine reads.
    fn add_sharded_model(&mut self, id: &str) {
        let dir = tempfile::tempdir().expect("tempdir");
        write_llama_fixture(dir.path(), &FixtureSpec::sharded()).expect("fixture");
        std::fs::write(dir.path().join("pytorch_model.bin"), b"not read").expect("write");
        self.hub.add_repo(RepoKind::Model, id, "main", dir.path());
        self._folders.push(dir);
    }

    /// A GGUF repository: the same model in Q8_0 and Q4_K_M, named as
    /// llama.cpp's converter names them.
    fn add_gguf_repo(&mut self, id: &str) {
        let repo = tempfile::tempdir().expect("tempdir");
        for (ty, name) in [
            (GgufType::Q8_0, "Tiny-Q8_0.gguf"),
            (GgufType::Q4K, "Tiny-Q4_K_M.gguf"),
        ] {
            let one = tempfile::tempdir().expect("tempdir");
            write_gguf_fixture(one.path(), &FixtureSpec::gguf_tiny(), ty).expect("gguf");
            std::fs::rename(one.path().join("model.gguf"), repo.path().join(name)).expect("move");
        }
        std::fs::write(repo.path().join("README.md"), "# Tiny GGUF").expect("write");
        self.hub.add_repo(RepoKind::Model, id, "main", repo.path());
        self._folders.push(repo);
    }
}

fn name(path: &Path) -> String {
    path.file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_safetensors_model_by_name_downloads_its_shards_and_text_files_and_opens() {
    let mut hub = Hub::new();
    hub.add_sharded_model("org/tiny");
    let dir = hub.search(None).resolve("org/tiny").expect("downloaded");
    let folder = ModelFolder::from_path(&dir).expect("opens");
    assert_eq!(folder.dir(), dir);
    let shards: Vec<String> = weight_files(&dir)
        .expect("the shards")
        .iter()
        .map(|p| name(p))
        .collect();
    assert_eq!(shards.len(), 3, "{shards:?}");
    let downloads = hub.downloads();
    assert!(
        downloads.iter().all(|f| !f.ends_with(".bin")),
        "{downloads:?}"
    );
    for needed in [
        "config.json",
        "tokenizer.json",
        "model.safetensors.index.json",
    ] {
        assert!(
            downloads.iter().any(|f| f == needed),
            "{needed}: {downloads:?}"
        );
    }
    assert_eq!(
        downloads
            .iter()
            .filter(|f| f.ends_with(".safetensors"))
            .count(),
        3
    );

    // A second resolution: one revision lookup, no download.
    hub.hub.clear_requests();
    assert_eq!(hub.search(None).resolve("org/tiny").expect("cached"), dir);
    assert!(hub.downloads().is_empty(), "{:?}", hub.hub.requests());
}

#[test]
fn a_gguf_repository_by_quantization_downloads_that_file_alone() {
    let mut hub = Hub::new();
    hub.add_gguf_repo("org/Tiny-GGUF");
    let path = hub
        .search(None)
        .resolve("org/Tiny-GGUF:q4_k_m")
        .expect("downloaded");
    assert_eq!(name(&path), "Tiny-Q4_K_M.gguf");
    let folder = ModelFolder::from_path(&path).expect("opens");
    assert_eq!(folder.gguf_file(), Some(path.as_path()));
    assert_eq!(hub.downloads(), ["Tiny-Q4_K_M.gguf"]);

    let by_file = hub
        .search(None)
        .resolve("org/Tiny-GGUF/Tiny-Q8_0.gguf")
        .expect("by file name");
    assert_eq!(name(&by_file), "Tiny-Q8_0.gguf");

    let err = hub
        .search(None)
        .resolve("org/Tiny-GGUF:Q5_0")
        .expect_err("no such quantization");
    let text = err.to_string();
    assert!(text.contains("Q4_K_M, Q8_0"), "{text}");
    assert!(err.is_usage());
    let err = hub
        .search(None)
        .resolve("org/Tiny-GGUF")
        .expect_err("no config.json");
    assert!(err.to_string().contains("org/Tiny-GGUF:QUANT"), "{err}");
}

#[test]
fn a_tokenizer_by_name_downloads_no_weights() {
    let mut hub = Hub::new();
    hub.add_sharded_model("org/tiny");
    let dir = hub
        .search(None)
        .resolve_tokenizer("org/tiny")
        .expect("tokenizer");
    assert!(dir.join("tokenizer.json").is_file());
    let downloads = hub.downloads();
    assert!(
        downloads
            .iter()
            .all(|f| !f.ends_with(".safetensors") && f != "config.json"),
        "{downloads:?}"
    );
    guidebench_core::tokenizer::HfTokenizer::from_dir(&dir).expect("loads");
}

#[test]
fn a_gated_model_needs_hf_token_and_runs_with_it() {
    let mut hub = Hub::new();
    hub.add_sharded_model("org/gated");
    hub.hub.gate(RepoKind::Model, "org/gated", "hf_good");
    let err = hub.search(None).resolve("org/gated").expect_err("no token");
    let text = err.to_string();
    assert!(
        text.contains("org/gated") && text.contains("HF_TOKEN"),
        "{text}"
    );
    assert!(err.is_usage(), "a token problem is a usage error: {text}");
    assert!(hub.downloads().is_empty());
    let dir = hub
        .search(Some("hf_good"))
        .resolve("org/gated")
        .expect("with the token");
    ModelFolder::from_path(&dir).expect("opens");
}

#[test]
fn a_name_the_hub_does_not_have_lists_what_was_tried() {
    let hub = Hub::new();
    let err = hub
        .search(None)
        .resolve("org/missing")
        .expect_err("missing");
    let Error::ModelNotFound { tried, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(tried.len(), 2, "{tried:?}");
    assert!(tried[0].contains("local folder"), "{tried:?}");
    assert!(tried[1].contains("Hugging Face Hub"), "{tried:?}");
    assert!(err.is_usage());
}
