//! The Hub client against testkit's stand-in Hub (never the network):
//! the cache layout, what is sent and what is not, the token's reach,
//! resumed downloads, offline mode and the errors a user reads.

use std::path::{Path, PathBuf};

use guidebench_hub::{Error, Hub, HubSettings, RepoKind, RepoRef, Snapshot, Token, block_on};
use guidebench_testkit::hub::{RepoKind as Kind, Server, StandInHub};

const TOKEN: &str = "hf_stand_in_token";

/// A model folder: small JSON files, a 3 MB weight file (an LFS file the
/// Hub redirects to its CDN) and a file in a subfolder.
fn model_folder() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let weights: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(
        dir.path().join("config.json"),
        br#"{"model_type": "llama"}"#,
    )
    .expect("write");
    std::fs::write(dir.path().join("tokenizer.json"), b"{}").expect("write");
    std::fs::write(dir.path().join("model.safetensors"), &weights).expect("write");
    std::fs::write(dir.path().join("pytorch_model.bin"), b"not wanted").expect("write");
    std::fs::create_dir_all(dir.path().join("onnx")).expect("mkdir");
    std::fs::write(dir.path().join("onnx/model.onnx"), b"graph").expect("write");
    (dir, weights)
}

struct Fixture {
    hub: StandInHub,
    cache: tempfile::TempDir,
    commit: String,
    weights: Vec<u8>,
    _folder: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let hub = StandInHub::start();
    let (folder, weights) = model_folder();
    let commit = hub.add_repo(Kind::Model, "org/model", "main", folder.path());
    Fixture {
        hub,
        cache: tempfile::tempdir().expect("tempdir"),
        commit,
        weights,
        _folder: folder,
    }
}

impl Fixture {
    fn settings(&self) -> HubSettings {
        HubSettings::new(&self.hub.endpoint(), self.cache.path().to_owned())
    }
}

fn repo(id: &str, revision: Option<&str>) -> RepoRef {
    RepoRef::new(RepoKind::Model, id, revision).expect("a Hub name")
}

/// `config.json` and `model.safetensors`, when the repository has them.
fn weights_and_config(files: &[String]) -> guidebench_hub::Result<Vec<String>> {
    Ok(files
        .iter()
        .filter(|f| *f == "config.json" || *f == "model.safetensors")
        .cloned()
        .collect())
}

fn snapshot(settings: HubSettings, repo: &RepoRef) -> guidebench_hub::Result<Snapshot> {
    let repo = repo.clone();
    block_on(async move {
        Hub::new(settings)?
            .snapshot(&repo, &weights_and_config)
            .await
    })
    .expect("a runtime")
}

fn repo_dir(cache: &Path) -> PathBuf {
    cache.join("models--org--model")
}

#[test]
fn selected_files_land_in_the_standard_cache_layout_and_nothing_else_is_downloaded() {
    let f = fixture();
    let got = snapshot(f.settings(), &repo("org/model", None)).expect("downloaded");
    let dir = repo_dir(f.cache.path());
    assert_eq!(got.commit, f.commit);
    assert_eq!(got.dir, dir.join("snapshots").join(&f.commit));
    assert_eq!(
        std::fs::read_to_string(dir.join("refs/main")).expect("refs/main"),
        f.commit
    );
    let weights = got.dir.join("model.safetensors");
    assert_eq!(std::fs::read(&weights).expect("weights"), f.weights);
    // A relative link into blobs/, named by the file's ETag (its SHA-256).
    let link = std::fs::read_link(&weights).expect("a symlink");
    assert!(link.starts_with("../../blobs"), "{}", link.display());
    assert!(dir.join("snapshots").join(&f.commit).join(&link).is_file());
    let mut listed: Vec<_> = std::fs::read_dir(&got.dir)
        .expect("snapshot")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    assert_eq!(listed, ["config.json", "model.safetensors"]);
    let downloads: Vec<_> = f
        .hub
        .requests()
        .into_iter()
        .filter(|r| r.is_download())
        .filter_map(|r| r.file)
        .collect();
    assert_eq!(downloads.len(), 2, "{downloads:?}");
    assert!(
        !downloads
            .iter()
            .any(|d| d.ends_with(".bin") || d.ends_with(".onnx"))
    );
}

#[test]
fn a_second_run_downloads_nothing_and_a_cached_commit_sends_nothing() {
    let f = fixture();
    snapshot(f.settings(), &repo("org/model", None)).expect("first");
    f.hub.clear_requests();
    let again = snapshot(f.settings(), &repo("org/model", None)).expect("second");
    assert!(again.downloaded.is_empty());
    let sent = f.hub.requests();
    assert_eq!(sent.len(), 1, "one revision lookup: {sent:?}");
    assert!(
        sent[0]
            .path
            .starts_with("/api/models/org/model/revision/main")
    );

    f.hub.clear_requests();
    let pinned = snapshot(f.settings(), &repo("org/model", Some(&f.commit))).expect("commit");
    assert_eq!(pinned.dir, again.dir);
    assert!(f.hub.requests().is_empty(), "{:?}", f.hub.requests());
}

#[test]
fn offline_mode_sends_nothing_reads_the_cache_and_says_so_when_it_lacks_a_file() {
    let f = fixture();
    let offline = f.settings().with_offline(true);
    let err = snapshot(offline.clone(), &repo("org/model", None)).expect_err("empty cache");
    assert!(matches!(err, Error::Offline { .. }), "{err}");
    assert!(err.to_string().contains("HF_HUB_OFFLINE=1"), "{err}");
    assert!(err.is_usage());
    assert!(f.hub.requests().is_empty());

    snapshot(f.settings(), &repo("org/model", None)).expect("online");
    f.hub.clear_requests();
    let cached = snapshot(offline.clone(), &repo("org/model", None)).expect("from the cache");
    assert_eq!(cached.commit, f.commit);
    let more = block_on(async move {
        Hub::new(offline)?
            .snapshot(&repo("org/model", None), &|_| {
                Ok(vec!["tokenizer.json".into()])
            })
            .await
    })
    .expect("runtime")
    .expect_err("not cached");
    assert!(more.to_string().contains("`tokenizer.json`"), "{more}");
    assert!(f.hub.requests().is_empty(), "{:?}", f.hub.requests());
}

#[test]
fn the_token_goes_to_the_hub_and_never_across_the_redirect_to_the_cdn() {
    let f = fixture();
    f.hub.gate(Kind::Model, "org/model", TOKEN);
    let settings = f.settings().with_token(Token::new(TOKEN));
    snapshot(settings, &repo("org/model", None)).expect("with the token");
    let sent = f.hub.requests();
    assert!(sent.iter().any(|r| r.server == Server::Cdn), "{sent:?}");
    for request in &sent {
        match request.server {
            Server::Hub => assert_eq!(
                request.authorization.as_deref(),
                Some(format!("Bearer {TOKEN}").as_str()),
                "{request}"
            ),
            Server::Cdn => assert_eq!(request.authorization, None, "{request}"),
        }
    }
}

#[test]
fn a_gated_repository_says_to_accept_its_terms_and_set_hf_token() {
    let f = fixture();
    f.hub.gate(Kind::Model, "org/model", TOKEN);
    let without = snapshot(f.settings(), &repo("org/model", None)).expect_err("no token");
    let text = without.to_string();
    assert!(
        matches!(
            without,
            Error::Gated {
                token_sent: false,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("org/model") && text.contains("HF_TOKEN"),
        "{text}"
    );
    assert!(text.contains("accept"), "{text}");
    assert!(without.is_usage());
    let wrong = f.settings().with_token(Token::new("hf_other"));
    let err = snapshot(wrong, &repo("org/model", None)).expect_err("no access");
    assert!(
        matches!(
            err,
            Error::Gated {
                token_sent: true,
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.to_string().contains("hf_other"), "{err}");
}

#[test]
fn a_cut_download_leaves_nothing_in_the_snapshot_and_the_next_run_resumes_it() {
    let f = fixture();
    f.hub.cut_once("model.safetensors", 1_000_000);
    let err = snapshot(f.settings(), &repo("org/model", None)).expect_err("cut");
    assert!(err.to_string().contains("resumes"), "{err}");
    let snapshot_file = repo_dir(f.cache.path())
        .join("snapshots")
        .join(&f.commit)
        .join("model.safetensors");
    assert!(!snapshot_file.exists(), "a truncated file in the snapshot");
    let partial: Vec<_> = std::fs::read_dir(repo_dir(f.cache.path()).join("blobs"))
        .expect("blobs")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "incomplete"))
        .collect();
    assert_eq!(partial.len(), 1, "{partial:?}");
    let kept = std::fs::metadata(&partial[0]).expect("partial").len();
    assert!(kept > 0 && kept <= 1_000_000, "{kept}");

    f.hub.clear_requests();
    snapshot(f.settings(), &repo("org/model", None)).expect("resumed");
    assert_eq!(std::fs::read(&snapshot_file).expect("whole"), f.weights);
    let ranged: Vec<_> = f
        .hub
        .requests()
        .into_iter()
        .filter(|r| r.server == Server::Cdn && r.method == "GET")
        .collect();
    assert_eq!(ranged.len(), 1, "{ranged:?}");
    assert_eq!(
        ranged[0].range.as_deref(),
        Some(format!("bytes={kept}-").as_str())
    );
    assert!(!partial[0].exists(), "the part became the blob");
}

#[test]
fn a_missing_repository_revision_or_file_is_named() {
    let f = fixture();
    let err = snapshot(f.settings(), &repo("org/nothing", None)).expect_err("no repo");
    assert!(matches!(err, Error::RepoNotFound { .. }), "{err}");
    assert!(err.to_string().contains("org/nothing"), "{err}");
    let err = snapshot(f.settings(), &repo("org/model", Some("v9"))).expect_err("no revision");
    assert!(matches!(err, Error::RevisionNotFound { .. }), "{err}");
    let settings = f.settings();
    let err = block_on(async move {
        Hub::new(settings)?
            .snapshot(&repo("org/model", None), &|_| Ok(vec!["nope.json".into()]))
            .await
    })
    .expect("runtime")
    .expect_err("no file");
    assert!(matches!(err, Error::FileNotFound { .. }), "{err}");
    assert!(err.to_string().contains("nope.json"), "{err}");
    assert!(err.is_usage());
}

#[test]
fn an_unreachable_hub_names_the_endpoint_and_offline_mode_and_is_not_a_usage_error() {
    let cache = tempfile::tempdir().expect("tempdir");
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let settings = HubSettings::new(&format!("http://127.0.0.1:{port}"), cache.path().to_owned());
    let err = snapshot(settings, &repo("org/model", None)).expect_err("unreachable");
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("127.0.0.1:{port}")) && text.contains("HF_HUB_OFFLINE=1"),
        "{text}"
    );
    assert!(!err.is_usage());
}
