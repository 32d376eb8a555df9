//! The stand-in Hugging Face Hub, through a plain HTTP client: what the
//! real Hub answers to the requests `huggingface_hub` makes.

use std::io::{Read as _, Write as _};
use std::path::Path;

use guidebench_testkit::hub::{RepoKind, Server, StandInHub};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use sha2::{Digest as _, Sha256};
use tempfile::TempDir;

/// `hello\n`, whose git blob id is known.
const HELLO_BLOB: &str = "ce013625030ba8dba906f756967f9e9ca394464a";

/// Deterministic bytes that are not UTF-8.
fn binary(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed | 0x80)
        .collect()
}

fn write(dir: &Path, path: &str, data: &[u8]) {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

/// A model folder: text files, an LFS file by extension at the root and
/// one in a folder, and a regular file in a folder.
fn model_folder() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "config.json", b"hello\n");
    write(dir.path(), "README.md", b"# tiny\n");
    write(dir.path(), "model.safetensors", &binary(300_000, 1));
    write(dir.path(), "onnx/model.onnx", &binary(5_000, 2));
    write(dir.path(), "nested/notes.txt", b"notes\n");
    dir
}

fn sha256(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A client that does not follow redirects, as `huggingface_hub`'s HEAD.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

async fn get_json(url: &str) -> serde_json::Value {
    let response = client().get(url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{url}");
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

#[tokio::test]
async fn the_info_lists_the_files_and_the_commit_at_every_spelling_of_the_revision() {
    let hub = StandInHub::start();
    let folder = model_folder();
    let commit = hub.add_repo(RepoKind::Model, "org/tiny", "main", folder.path());
    assert_eq!(commit.len(), 40);
    assert!(
        commit
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    // The same content gives the same commit.
    let again = StandInHub::start();
    assert_eq!(
        again.add_repo(RepoKind::Model, "org/other", "main", folder.path()),
        commit
    );

    let base = format!("{}/api/models/org/tiny", hub.endpoint());
    for url in [
        base.clone(),
        format!("{base}/revision/main"),
        format!("{base}/revision/{commit}"),
    ] {
        let info = get_json(&url).await;
        assert_eq!(info["id"], "org/tiny");
        assert_eq!(info["sha"], commit.as_str());
        assert_eq!(info["private"], false);
        assert_eq!(info["gated"], false);
        assert!(info["_id"].is_string());
        assert!(info["lastModified"].is_string());
        let mut files: Vec<&str> = info["siblings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["rfilename"].as_str().unwrap())
            .collect();
        files.sort_unstable();
        assert_eq!(
            files,
            [
                "README.md",
                "config.json",
                "model.safetensors",
                "nested/notes.txt",
                "onnx/model.onnx"
            ]
        );
        assert!(info["siblings"][0].get("size").is_none());
    }

    let info = get_json(&format!("{base}/revision/main?blobs=true")).await;
    let sibling = |name: &str| {
        info["siblings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["rfilename"] == name)
            .unwrap()
            .clone()
    };
    let config = sibling("config.json");
    assert_eq!(config["size"], 6);
    assert_eq!(config["blobId"], HELLO_BLOB);
    assert!(config.get("lfs").is_none());
    let model = sibling("model.safetensors");
    assert_eq!(model["size"], 300_000);
    assert_eq!(model["lfs"]["size"], 300_000);
    assert_eq!(model["lfs"]["sha256"], sha256(&binary(300_000, 1)).as_str());
    let pointer_size = model["lfs"]["pointerSize"].as_u64().unwrap();
    assert!((120..140).contains(&pointer_size), "{pointer_size}");
    assert_ne!(model["blobId"], model["lfs"]["sha256"]);
}

#[tokio::test]
async fn the_tree_lists_folders_and_files_with_the_ids_git_gives_them() {
    let hub = StandInHub::start();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a/b", b"hello\n");
    write(dir.path(), "a.txt", b"hello\n");
    write(dir.path(), "a/weights.safetensors", &binary(1000, 3));
    hub.add_repo(RepoKind::Model, "org/tree", "main", dir.path());

    let base = format!("{}/api/models/org/tree/tree/main", hub.endpoint());
    let top = get_json(&base).await;
    let entries: Vec<(&str, &str)> = top
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), e["path"].as_str().unwrap()))
        .collect();
    assert_eq!(entries, [("directory", "a"), ("file", "a.txt")]);
    assert_eq!(top[1]["oid"], HELLO_BLOB);
    assert_eq!(top[1]["size"], 6);

    let all = get_json(&format!("{base}?recursive=true&expand=false")).await;
    let paths: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["a", "a.txt", "a/b", "a/weights.safetensors"]);
    let lfs = &all[3]["lfs"];
    assert_eq!(lfs["oid"], sha256(&binary(1000, 3)).as_str());
    assert_eq!(lfs["size"], 1000);

    // Without the LFS file, the folder's id is the one git computes for a
    // tree holding `b` (`git write-tree`).
    let plain = tempfile::tempdir().unwrap();
    write(plain.path(), "a/b", b"hello\n");
    write(plain.path(), "a.txt", b"hello\n");
    hub.add_repo(RepoKind::Model, "org/tree", "plain", plain.path());
    let top = get_json(&format!(
        "{}/api/models/org/tree/tree/plain",
        hub.endpoint()
    ))
    .await;
    assert_eq!(top[0]["oid"], "f09792be40f18f537c28b624b7bc7771f25082e1");

    let inside = get_json(&format!("{base}/a")).await;
    assert_eq!(inside.as_array().unwrap().len(), 2);
    let missing = client().get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        header(missing.headers(), "x-error-code"),
        Some("EntryNotFound")
    );
}

#[tokio::test]
async fn a_small_file_resolves_to_its_bytes_with_its_blob_id_as_etag() {
    let hub = StandInHub::start();
    let folder = model_folder();
    let commit = hub.add_repo(RepoKind::Model, "org/tiny", "main", folder.path());
    let url = format!("{}/org/tiny/resolve/main/config.json", hub.endpoint());

    let head = client().head(&url).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    let headers = head.headers();
    assert_eq!(
        header(headers, "etag"),
        Some(format!("\"{HELLO_BLOB}\"").as_str())
    );
    assert_eq!(header(headers, "x-repo-commit"), Some(commit.as_str()));
    assert_eq!(header(headers, "content-length"), Some("6"));
    assert_eq!(header(headers, "accept-ranges"), Some("bytes"));
    assert!(headers.get("x-linked-etag").is_none());
    assert!(headers.get("location").is_none());

    let get = client().get(&url).send().await.unwrap();
    assert_eq!(get.status(), StatusCode::OK);
    assert_eq!(
        header(get.headers(), "x-repo-commit"),
        Some(commit.as_str())
    );
    assert_eq!(get.bytes().await.unwrap().as_ref(), b"hello\n");

    // A file in a folder, at the commit id.
    let nested = format!(
        "{}/org/tiny/resolve/{commit}/nested/notes.txt",
        hub.endpoint()
    );
    let get = client().get(&nested).send().await.unwrap();
    assert_eq!(get.status(), StatusCode::OK);
    assert_eq!(get.bytes().await.unwrap().as_ref(), b"notes\n");
}

#[tokio::test]
async fn an_lfs_file_redirects_to_another_origin_whose_bytes_hash_to_the_linked_etag() {
    let hub = StandInHub::start();
    let folder = model_folder();
    let commit = hub.add_repo(RepoKind::Model, "org/tiny", "main", folder.path());

    for (path, data) in [
        ("model.safetensors", binary(300_000, 1)),
        ("onnx/model.onnx", binary(5_000, 2)),
    ] {
        let url = format!("{}/org/tiny/resolve/main/{path}", hub.endpoint());
        let head = client().head(&url).send().await.unwrap();
        assert_eq!(head.status(), StatusCode::FOUND, "{path}");
        let headers = head.headers();
        assert_eq!(header(headers, "x-repo-commit"), Some(commit.as_str()));
        let linked = format!("\"{}\"", sha256(&data));
        assert_eq!(header(headers, "x-linked-etag"), Some(linked.as_str()));
        let size = data.len().to_string();
        assert_eq!(header(headers, "x-linked-size"), Some(size.as_str()));
        // The redirect's own length is its short body's, not the file's.
        let short: u64 = header(headers, "content-length").unwrap().parse().unwrap();
        assert!(short < 1000, "{short}");
        let location = header(headers, "location").unwrap().to_owned();
        assert!(location.starts_with(&format!("{}/repos/", hub.cdn_endpoint())));
        assert_ne!(hub.cdn_endpoint(), hub.endpoint());

        // A GET redirects the same way.
        let get = client().get(&url).send().await.unwrap();
        assert_eq!(get.status(), StatusCode::FOUND);

        let cdn = client().get(&location).send().await.unwrap();
        assert_eq!(cdn.status(), StatusCode::OK);
        assert_eq!(header(cdn.headers(), "content-length"), Some(size.as_str()));
        assert_eq!(header(cdn.headers(), "accept-ranges"), Some("bytes"));
        let cdn_etag = header(cdn.headers(), "etag").unwrap().to_owned();
        assert_ne!(cdn_etag, linked, "the CDN's ETag is its own");
        let name = path.rsplit('/').next().unwrap();
        assert!(
            header(cdn.headers(), "content-disposition")
                .unwrap()
                .contains(&format!("filename=\"{name}\""))
        );
        let body = cdn.bytes().await.unwrap();
        assert_eq!(format!("\"{}\"", sha256(&body)), linked);

        let cdn_head = client().head(&location).send().await.unwrap();
        assert_eq!(cdn_head.status(), StatusCode::OK);
        assert_eq!(
            header(cdn_head.headers(), "content-length"),
            Some(size.as_str())
        );
    }
}

#[tokio::test]
async fn a_file_over_10_mib_is_in_lfs_whatever_its_name() {
    let hub = StandInHub::start();
    let dir = tempfile::tempdir().unwrap();
    let big = binary(10 * 1024 * 1024 + 1, 4);
    write(dir.path(), "weights.dat", &big);
    write(dir.path(), "small.dat", &binary(1000, 4));
    hub.add_repo(RepoKind::Model, "org/big", "main", dir.path());

    let small = format!("{}/org/big/resolve/main/small.dat", hub.endpoint());
    assert_eq!(
        client().head(&small).send().await.unwrap().status(),
        StatusCode::OK
    );
    let url = format!("{}/org/big/resolve/main/weights.dat", hub.endpoint());
    let head = client().head(&url).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::FOUND);
    let location = header(head.headers(), "location").unwrap().to_owned();
    let body = client()
        .get(&location)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body.len(), big.len());
    assert_eq!(sha256(&body), sha256(&big));

    // A cut far past what the socket buffers still delivers every byte
    // before it.
    hub.cut_once("weights.dat", 9_000_000);
    let mut response = client().get(&location).send().await.unwrap();
    let mut received = 0;
    while let Ok(Some(chunk)) = response.chunk().await {
        received += chunk.len();
    }
    assert_eq!(received, 9_000_000);
}

#[tokio::test]
async fn ranges_answer_206_with_content_range_on_the_hub_and_the_cdn() {
    let hub = StandInHub::start();
    let folder = model_folder();
    hub.add_repo(RepoKind::Model, "org/tiny", "main", folder.path());
    let lfs = binary(300_000, 1);
    let head = client()
        .head(format!(
            "{}/org/tiny/resolve/main/model.safetensors",
            hub.endpoint()
        ))
        .send()
        .await
        .unwrap();
    let cdn = header(head.headers(), "location").unwrap().to_owned();
    let regular = format!("{}/org/tiny/resolve/main/nested/notes.txt", hub.endpoint());

    let cases: [(&str, &str, &[u8], &str); 6] = [
        (
            &cdn,
            "bytes=1000-",
            &lfs[1000..],
            "bytes 1000-299999/300000",
        ),
        (&cdn, "bytes=10-19", &lfs[10..20], "bytes 10-19/300000"),
        (
            &cdn,
            "bytes=-5",
            &lfs[299_995..],
            "bytes 299995-299999/300000",
        ),
        (
            &cdn,
            "bytes=299990-400000",
            &lfs[299_990..],
            "bytes 299990-299999/300000",
        ),
        (&regular, "bytes=2-", b"tes\n", "bytes 2-5/6"),
        (&regular, "bytes=0-0", b"n", "bytes 0-0/6"),
    ];
    for (url, range, expected, content_range) in cases {
        let response = client()
            .get(url)
            .header("range", range)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(
            header(response.headers(), "content-range"),
            Some(content_range)
        );
        let length = expected.len().to_string();
        assert_eq!(
            header(response.headers(), "content-length"),
            Some(length.as_str())
        );
        assert_eq!(
            response.bytes().await.unwrap().as_ref(),
            expected,
            "{range}"
        );
    }
    for url in [&cdn, &regular] {
        let response = client()
            .get(url)
            .header("range", "bytes=300000-")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::RANGE_NOT_SATISFIABLE);
        assert!(
            header(response.headers(), "content-range")
                .unwrap()
                .starts_with("bytes */")
        );
    }
}

#[tokio::test]
async fn cut_once_drops_the_connection_after_the_given_bytes_and_a_range_resumes() {
    let hub = StandInHub::start();
    let folder = model_folder();
    hub.add_repo(RepoKind::Model, "org/tiny", "main", folder.path());
    let lfs = binary(300_000, 1);
    let head = client()
        .head(format!(
            "{}/org/tiny/resolve/main/model.safetensors",
            hub.endpoint()
        ))
        .send()
        .await
        .unwrap();
    let cdn = header(head.headers(), "location").unwrap().to_owned();

    hub.cut_once("model.safetensors", 100_000);
    let mut response = client().get(&cdn).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(response.headers(), "content-length"), Some("300000"));
    let mut received = Vec::new();
    let error = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => received.extend_from_slice(&chunk),
            Ok(None) => panic!("the body ended without an error"),
            Err(error) => break error,
        }
    };
    assert!(error.is_body() || error.is_decode(), "{error:?}");
    assert_eq!(received.len(), 100_000);
    assert_eq!(received, lfs[..100_000]);

    // Resuming where it stopped completes the file; the cut was once.
    let rest = client()
        .get(&cdn)
        .header("range", "bytes=100000-")
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), StatusCode::PARTIAL_CONTENT);
    received.extend_from_slice(&rest.bytes().await.unwrap());
    assert_eq!(sha256(&received), sha256(&lfs));

    // A cut inside a range counts from the range's start; a regular file
    // is cut on the Hub itself, by its path.
    hub.cut_once("nested/notes.txt", 2);
    let regular = format!("{}/org/tiny/resolve/main/nested/notes.txt", hub.endpoint());
    let cut = client()
        .get(&regular)
        .header("range", "bytes=1-")
        .send()
        .await
        .unwrap();
    assert_eq!(header(cut.headers(), "content-length"), Some("5"));
    assert!(cut.bytes().await.is_err());
    let whole = client().get(&regular).send().await.unwrap();
    assert_eq!(whole.bytes().await.unwrap().as_ref(), b"notes\n");
}

#[tokio::test]
async fn a_gated_repository_answers_401_without_a_token_403_with_another_and_200_with_its_own() {
    let hub = StandInHub::start();
    let folder = model_folder();
    hub.add_repo(RepoKind::Model, "org/gated", "main", folder.path());
    hub.gate(RepoKind::Model, "org/gated", "hf_good");

    for path in ["config.json", "model.safetensors"] {
        let url = format!("{}/org/gated/resolve/main/{path}", hub.endpoint());
        let anonymous = client().head(&url).send().await.unwrap();
        assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            header(anonymous.headers(), "x-error-code"),
            Some("GatedRepo")
        );
        assert!(
            header(anonymous.headers(), "x-error-message")
                .unwrap()
                .contains("org/gated")
        );

        let other = client()
            .head(&url)
            .bearer_auth("hf_other")
            .send()
            .await
            .unwrap();
        assert_eq!(other.status(), StatusCode::FORBIDDEN);
        assert_eq!(header(other.headers(), "x-error-code"), Some("GatedRepo"));

        let allowed = client()
            .get(&url)
            .bearer_auth("hf_good")
            .send()
            .await
            .unwrap();
        assert!(allowed.status().is_success() || allowed.status() == StatusCode::FOUND);
        if allowed.status() == StatusCode::FOUND {
            // The signed CDN URL needs no token.
            let location = header(allowed.headers(), "location").unwrap().to_owned();
            let cdn = client().get(&location).send().await.unwrap();
            assert_eq!(cdn.status(), StatusCode::OK);
        }
    }

    // Its info stays public, as on the Hub, and says it is gated.
    let info = get_json(&format!("{}/api/models/org/gated", hub.endpoint())).await;
    assert_eq!(info["gated"], "manual");
    assert!(
        hub.requests()
            .iter()
            .filter(|r| r.server == Server::Cdn)
            .all(|r| r.authorization.is_none())
    );
}

#[tokio::test]
async fn unknown_repositories_revisions_and_files_carry_the_hub_error_codes() {
    let hub = StandInHub::start();
    let folder = model_folder();
    let commit = hub.add_repo(RepoKind::Model, "org/tiny", "main", folder.path());
    let endpoint = hub.endpoint();

    let cases = [
        // An unknown repository: 401 without a token, 404 with one.
        (
            format!("{endpoint}/api/models/org/nope"),
            None,
            401,
            "RepoNotFound",
        ),
        (
            format!("{endpoint}/api/models/org/nope"),
            Some("hf_x"),
            404,
            "RepoNotFound",
        ),
        (
            format!("{endpoint}/org/nope/resolve/main/config.json"),
            None,
            401,
            "RepoNotFound",
        ),
        (
            format!("{endpoint}/org/nope/resolve/main/config.json"),
            Some("hf_x"),
            404,
            "RepoNotFound",
        ),
        // The model is not a dataset.
        (
            format!("{endpoint}/api/datasets/org/tiny"),
            None,
            401,
            "RepoNotFound",
        ),
        (
            format!("{endpoint}/datasets/org/tiny/resolve/main/config.json"),
            None,
            401,
            "RepoNotFound",
        ),
        // An unknown revision.
        (
            format!("{endpoint}/api/models/org/tiny/revision/v9"),
            None,
            404,
            "RevisionNotFound",
        ),
        (
            format!("{endpoint}/org/tiny/resolve/v9/config.json"),
            None,
            404,
            "RevisionNotFound",
        ),
        // An unknown file.
        (
            format!("{endpoint}/org/tiny/resolve/main/nope.json"),
            None,
            404,
            "EntryNotFound",
        ),
        (
            format!("{endpoint}/org/tiny/resolve/main/onnx/nope.onnx"),
            None,
            404,
            "EntryNotFound",
        ),
    ];
    for (url, token, status, code) in cases {
        let mut request = client().head(&url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{url}");
        assert_eq!(
            header(response.headers(), "x-error-code"),
            Some(code),
            "{url}"
        );
        assert!(response.headers().contains_key("x-error-message"), "{url}");
        if code == "EntryNotFound" {
            assert_eq!(
                header(response.headers(), "x-repo-commit"),
                Some(commit.as_str())
            );
        }
    }
    let body = client()
        .get(format!("{endpoint}/api/models/org/nope"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(body["error"].is_string());
}

#[tokio::test]
async fn a_dataset_ref_with_slashes_resolves_encoded_or_not_beside_main() {
    let hub = StandInHub::start();
    let main = tempfile::tempdir().unwrap();
    write(main.path(), "README.md", b"# data\n");
    let parquet = tempfile::tempdir().unwrap();
    let table = binary(4_000, 5);
    write(parquet.path(), "default/train/0000.parquet", &table);
    let main_commit = hub.add_repo(RepoKind::Dataset, "org/data", "main", main.path());
    let commit = hub.add_repo(
        RepoKind::Dataset,
        "org/data",
        "refs/convert/parquet",
        parquet.path(),
    );
    assert_ne!(commit, main_commit);

    let endpoint = hub.endpoint();
    for revision in ["refs%2Fconvert%2Fparquet", "refs/convert/parquet"] {
        let info = get_json(&format!(
            "{endpoint}/api/datasets/org/data/revision/{revision}"
        ))
        .await;
        assert_eq!(info["sha"], commit.as_str());
        assert_eq!(
            info["siblings"][0]["rfilename"],
            "default/train/0000.parquet"
        );
        assert!(info.get("modelId").is_none());

        let url =
            format!("{endpoint}/datasets/org/data/resolve/{revision}/default/train/0000.parquet");
        let head = client().head(&url).send().await.unwrap();
        assert_eq!(head.status(), StatusCode::FOUND, "{url}");
        assert_eq!(
            header(head.headers(), "x-repo-commit"),
            Some(commit.as_str())
        );
        let location = header(head.headers(), "location").unwrap().to_owned();
        let body = client()
            .get(&location)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(body.as_ref(), table.as_slice());

        let tree = get_json(&format!(
            "{endpoint}/api/datasets/org/data/tree/{revision}/default?recursive=true"
        ))
        .await;
        assert_eq!(tree.as_array().unwrap().len(), 2);
    }
    // The other revision is still there.
    let info = get_json(&format!("{endpoint}/api/datasets/org/data")).await;
    assert_eq!(info["sha"], main_commit.as_str());
    let readme = client()
        .get(format!(
            "{endpoint}/datasets/org/data/resolve/main/README.md"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(readme.bytes().await.unwrap().as_ref(), b"# data\n");
}

#[tokio::test]
async fn requests_are_recorded_in_order_with_their_headers() {
    let hub = StandInHub::start();
    let folder = model_folder();
    hub.add_repo(RepoKind::Model, "org/tiny", "main", folder.path());
    let endpoint = hub.endpoint();

    get_json(&format!("{endpoint}/api/models/org/tiny/revision/main")).await;
    let head = client()
        .head(format!(
            "{endpoint}/org/tiny/resolve/main/onnx%2Fmodel.onnx"
        ))
        .bearer_auth("hf_token")
        .send()
        .await
        .unwrap();
    let location = header(head.headers(), "location").unwrap().to_owned();
    client()
        .get(&location)
        .header("range", "bytes=10-")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    client()
        .get(format!("{endpoint}/org/tiny/resolve/main/config.json"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();

    let requests = hub.requests();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    let [info, head, cdn, config] = requests.as_slice() else {
        unreachable!()
    };
    assert_eq!(info.server, Server::Hub);
    assert_eq!(info.path, "/api/models/org/tiny/revision/main");
    assert!(!info.is_download());

    assert_eq!(head.method, "HEAD");
    assert_eq!(head.path, "/org/tiny/resolve/main/onnx%2Fmodel.onnx");
    assert_eq!(head.authorization.as_deref(), Some("Bearer hf_token"));
    assert_eq!(head.status, 302);
    assert_eq!(head.file.as_deref(), Some("onnx/model.onnx"));
    assert!(!head.is_download());

    assert_eq!(cdn.server, Server::Cdn);
    assert_eq!(cdn.method, "GET");
    assert!(location.ends_with(&cdn.path));
    assert_eq!(cdn.range.as_deref(), Some("bytes=10-"));
    assert_eq!(cdn.authorization, None);
    assert_eq!(cdn.status, 206);
    assert!(cdn.is_download());
    assert_eq!(cdn.file_name(), Some("model.onnx"));

    assert!(config.is_download());
    assert_eq!(config.file_name(), Some("config.json"));
    assert_eq!(config.server, Server::Hub);

    hub.clear_requests();
    assert!(hub.requests().is_empty());
}

/// One HTTP/1.0 exchange over a plain socket, from a sync test.
fn raw_get(endpoint: &str, path: &str) -> std::io::Result<String> {
    let address = endpoint.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

#[test]
fn the_hub_serves_sync_tests_too_and_stops_on_drop() {
    let hub = StandInHub::start();
    let folder = model_folder();
    let commit = hub.add_repo(RepoKind::Model, "org/tiny", "main", folder.path());
    let answer = raw_get(&hub.endpoint(), "/org/tiny/resolve/main/config.json").unwrap();
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains(&format!("x-repo-commit: {commit}"))
    );
    assert!(answer.ends_with("\r\n\r\nhello\n"), "{answer}");

    let endpoint = hub.endpoint();
    let cdn = hub.cdn_endpoint();
    drop(hub);
    assert!(raw_get(&endpoint, "/api/models/org/tiny").is_err());
    assert!(raw_get(&cdn, "/").is_err());
}
