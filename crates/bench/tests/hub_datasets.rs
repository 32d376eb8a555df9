//! Hugging Face datasets by name (`--data kind=hf|huggingface,source=ORG/NAME`,
//! `kind=file,path=ORG/NAME`), fetched through the Hub client from
//! testkit's stand-in Hub into a temporary Hugging Face cache; never the
//! network. The Parquet files are written here with the arrow and parquet
//! crates, as the columnar tests write theirs.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use guidebench_bench::data::{
    DataItem, DataSource, create_source, resolve_kind, with_hub_settings,
};
use guidebench_bench::session::{BackendArgs, Plan, PlanArgs, Session};
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::RequestInput;
use guidebench_hub::{HubSettings, Token};
use guidebench_testkit::ByteTokenizer;
use guidebench_testkit::hub::{HubRequest, RepoKind, StandInHub};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde_json::Value;
use tempfile::TempDir;

/// Writes `texts` as a snappy-compressed Parquet file of `prompt` and
/// `output_tokens` columns at `dir/file`.
fn parquet(dir: &Path, file: &str, texts: &[&str]) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().expect("folder")).expect("folder");
    let lengths: Vec<i32> = (1..=texts.len()).map(|n| 4 * n as i32).collect();
    let batch = RecordBatch::try_from_iter([
        (
            "prompt",
            Arc::new(StringArray::from(texts.to_vec())) as ArrayRef,
        ),
        (
            "output_tokens",
            Arc::new(Int32Array::from(lengths)) as ArrayRef,
        ),
    ])
    .expect("batch");
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let file = std::fs::File::create(&path).expect("create");
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
}

fn write(dir: &Path, file: &str, text: &str) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().expect("folder")).expect("folder");
    std::fs::write(path, text).expect("write");
}

/// A dataset repository in the layout `push_to_hub` writes: a train split
/// in two shards, a test split, a card and a stray JSON file.
fn questions() -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    parquet(
        dir.path(),
        "data/train-00000-of-00002.parquet",
        &["train one", "train two"],
    );
    parquet(
        dir.path(),
        "data/train-00001-of-00002.parquet",
        &["train three"],
    );
    parquet(
        dir.path(),
        "data/test-00000-of-00001.parquet",
        &["held out"],
    );
    write(dir.path(), "README.md", "# questions\n");
    write(
        dir.path(),
        "data/notes.json",
        "{\"prompt\": \"not data\"}\n",
    );
    dir
}

/// Settings for the stand-in Hub and a cache folder: no token, online.
fn settings(hub: &StandInHub, cache: &Path) -> HubSettings {
    HubSettings::new(&hub.endpoint(), cache.to_owned())
}

/// Every item of a `--data` argument read with `settings`, or the error.
fn read(settings: &HubSettings, arg: &str) -> guidebench_bench::Result<Vec<DataItem>> {
    with_hub_settings(settings.clone(), || {
        let mut source: Box<dyn DataSource> = create_source(
            parse_kind_args(arg).expect("parses"),
            Arc::new(ByteTokenizer::default()),
            7,
        )?;
        let mut items = Vec::new();
        while let Some(item) = source.next_item()? {
            items.push(item);
        }
        Ok(items)
    })
}

fn texts(items: &[DataItem]) -> Vec<String> {
    items
        .iter()
        .map(|item| match &item.input {
            RequestInput::Text(text) => text.clone(),
            other => panic!("expected text, got {other:?}"),
        })
        .collect()
}

/// The files whose bytes were downloaded, sorted.
fn downloads(requests: &[HubRequest]) -> Vec<String> {
    let mut files: Vec<String> = requests
        .iter()
        .filter(|r| r.is_download())
        .filter_map(|r| r.file.clone())
        .collect();
    files.sort();
    files
}

fn shown(requests: &[HubRequest]) -> String {
    requests
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_dataset_named_by_source_and_split_downloads_only_that_splits_parquet_files_into_the_cache() {
    let hub = StandInHub::start();
    let repo = questions();
    let commit = hub.add_repo(RepoKind::Dataset, "org/questions", "main", repo.path());
    let cache = tempfile::tempdir().expect("cache");

    let items = read(
        &settings(&hub, cache.path()),
        "kind=huggingface,source=org/questions,split=train",
    )
    .expect("read");
    assert_eq!(texts(&items), ["train one", "train two", "train three"]);
    assert_eq!(items[2].output_tokens, Some(4));
    assert!(
        items[2]
            .origin
            .ends_with("data/train-00001-of-00002.parquet, row 1"),
        "{}",
        items[2].origin
    );

    let requests = hub.requests();
    assert_eq!(
        downloads(&requests),
        [
            "data/train-00000-of-00002.parquet",
            "data/train-00001-of-00002.parquet"
        ],
        "{}",
        shown(&requests)
    );
    assert!(requests.iter().all(|r| r.authorization.is_none()));

    // The standard cache layout: refs/main, the snapshot's links, blobs.
    let folder = cache.path().join("datasets--org--questions");
    assert_eq!(
        std::fs::read_to_string(folder.join("refs/main")).expect("refs/main"),
        commit
    );
    let snapshot = folder.join("snapshots").join(&commit);
    for file in [
        "data/train-00000-of-00002.parquet",
        "data/train-00001-of-00002.parquet",
    ] {
        let link = snapshot.join(file);
        assert!(link.is_file(), "{}", link.display());
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("metadata")
                .file_type()
                .is_symlink(),
            "{} links into blobs/",
            link.display()
        );
    }
    for absent in [
        "data/test-00000-of-00001.parquet",
        "README.md",
        "data/notes.json",
    ] {
        assert!(!snapshot.join(absent).exists(), "{absent} was not selected");
    }
    let blobs = std::fs::read_dir(folder.join("blobs"))
        .expect("blobs")
        .count();
    assert_eq!(blobs, 2);
}

#[test]
fn a_config_is_chosen_by_config_or_guidellms_load_kwargs_name() {
    let hub = StandInHub::start();
    let repo = tempfile::tempdir().expect("repo");
    parquet(repo.path(), "alpha/questions-train.parquet", &["alpha"]);
    parquet(
        repo.path(),
        "beta/questions-train.parquet",
        &["beta one", "beta two"],
    );
    hub.add_repo(RepoKind::Dataset, "org/configs", "main", repo.path());
    let cache = tempfile::tempdir().expect("cache");
    let settings = settings(&hub, cache.path());

    let beta = read(
        &settings,
        "kind=hf,source=org/configs,load_kwargs.name=beta,load_kwargs.split=train",
    )
    .expect("beta");
    assert_eq!(texts(&beta), ["beta one", "beta two"]);
    assert_eq!(downloads(&hub.requests()), ["beta/questions-train.parquet"]);

    // GuideLLM reads `name` as the dataset, like `source`.
    let alpha = read(&settings, "kind=huggingface,name=org/configs,config=alpha").expect("alpha");
    assert_eq!(texts(&alpha), ["alpha"]);

    // Two configs hold the split and none is `default`: choose one.
    let err = read(&settings, "kind=huggingface,source=org/configs").expect_err("ambiguous");
    let message = err.to_string();
    assert!(err.is_usage(), "{message}");
    assert!(message.contains("alpha, beta"), "{message}");
    assert!(message.contains("config=NAME"), "{message}");

    // `name` beside `source` is the dataset given twice, not a config.
    let err = read(&settings, "kind=hf,source=org/configs,name=beta")
        .expect_err("name is not the config");
    let message = err.to_string();
    assert!(err.is_usage(), "{message}");
    assert!(message.contains("load_kwargs.name"), "{message}");
}

#[test]
fn a_repository_holding_only_a_json_file_is_read_from_the_hubs_parquet_conversion() {
    let hub = StandInHub::start();
    let repo = tempfile::tempdir().expect("repo");
    write(
        repo.path(),
        "prompts.json",
        "[{\"prompt\": \"raw one\"}, {\"prompt\": \"raw two\"}]\n",
    );
    write(repo.path(), "README.md", "# stored as JSON\n");
    hub.add_repo(RepoKind::Dataset, "org/jsononly", "main", repo.path());
    let converted = tempfile::tempdir().expect("conversion");
    parquet(
        converted.path(),
        "default/train/0000.parquet",
        &["converted one", "converted two"],
    );
    parquet(
        converted.path(),
        "default/test/0000.parquet",
        &["converted test"],
    );
    let conversion = hub.add_repo(
        RepoKind::Dataset,
        "org/jsononly",
        "refs/convert/parquet",
        converted.path(),
    );
    let cache = tempfile::tempdir().expect("cache");

    let items = read(
        &settings(&hub, cache.path()),
        "kind=huggingface,source=org/jsononly",
    )
    .expect("read");
    assert_eq!(texts(&items), ["converted one", "converted two"]);
    let requests = hub.requests();
    assert_eq!(
        downloads(&requests),
        ["default/train/0000.parquet"],
        "{}",
        shown(&requests)
    );
    assert!(
        requests
            .iter()
            .any(|r| r.path.contains("/revision/refs%2Fconvert%2Fparquet")),
        "{}",
        shown(&requests)
    );
    assert!(
        cache
            .path()
            .join("datasets--org--jsononly/snapshots")
            .join(&conversion)
            .join("default/train/0000.parquet")
            .is_file()
    );

    // Offline, the converted files in the cache answer; nothing is sent.
    hub.clear_requests();
    let offline = settings(&hub, cache.path()).with_offline(true);
    let again = read(&offline, "kind=huggingface,source=org/jsononly").expect("offline");
    assert_eq!(texts(&again), ["converted one", "converted two"]);
    assert!(hub.requests().is_empty(), "{}", shown(&hub.requests()));
}

#[test]
fn a_second_run_downloads_nothing_and_sends_only_the_info_request() {
    let hub = StandInHub::start();
    let repo = questions();
    hub.add_repo(RepoKind::Dataset, "org/questions", "main", repo.path());
    let cache = tempfile::tempdir().expect("cache");
    let settings = settings(&hub, cache.path());

    let first = read(&settings, "kind=huggingface,source=org/questions").expect("first");
    hub.clear_requests();
    // Our own spelling reads the same dataset from the same cache.
    let second = read(&settings, "kind=file,path=org/questions,split=train").expect("second");
    assert_eq!(texts(&second), texts(&first));
    let requests = hub.requests();
    assert_eq!(requests.len(), 1, "{}", shown(&requests));
    assert_eq!(requests[0].method, "GET");
    assert!(
        requests[0]
            .path
            .starts_with("/api/datasets/org/questions/revision/main"),
        "{}",
        requests[0]
    );
}

#[test]
fn offline_mode_reads_the_cache_and_sends_nothing() {
    let hub = StandInHub::start();
    let repo = questions();
    hub.add_repo(RepoKind::Dataset, "org/questions", "main", repo.path());
    let cache = tempfile::tempdir().expect("cache");
    read(
        &settings(&hub, cache.path()),
        "kind=hf,source=org/questions,split=train",
    )
    .expect("online");
    hub.clear_requests();

    let offline = settings(&hub, cache.path()).with_offline(true);
    let items = read(&offline, "kind=hf,source=org/questions,split=train").expect("offline");
    assert_eq!(texts(&items), ["train one", "train two", "train three"]);

    // A split the cache does not hold is not fetched offline.
    let err = read(&offline, "kind=hf,source=org/questions,split=test").expect_err("not cached");
    let message = err.to_string();
    assert!(err.is_usage(), "{message}");
    assert!(message.contains("split `test`"), "{message}");
    assert!(message.contains("HF_HUB_OFFLINE=1"), "{message}");
    assert!(hub.requests().is_empty(), "{}", shown(&hub.requests()));
}

#[test]
fn offline_mode_without_the_dataset_in_the_cache_says_offline_mode_is_on() {
    let hub = StandInHub::start();
    let repo = questions();
    hub.add_repo(RepoKind::Dataset, "org/questions", "main", repo.path());
    let cache = tempfile::tempdir().expect("cache");
    let offline = settings(&hub, cache.path()).with_offline(true);

    let err =
        read(&offline, "kind=huggingface,source=org/questions").expect_err("offline, not cached");
    let message = err.to_string();
    assert!(err.is_usage(), "{message}");
    assert!(message.contains("`org/questions`"), "{message}");
    assert!(message.contains("offline mode is on"), "{message}");
    assert!(message.contains("HF_HUB_OFFLINE"), "{message}");
    assert!(hub.requests().is_empty(), "{}", shown(&hub.requests()));
}

#[test]
fn a_missing_split_lists_the_splits_the_dataset_has() {
    let hub = StandInHub::start();
    let repo = questions();
    hub.add_repo(RepoKind::Dataset, "org/questions", "main", repo.path());
    let cache = tempfile::tempdir().expect("cache");

    let err = read(
        &settings(&hub, cache.path()),
        "kind=huggingface,source=org/questions,split=validation",
    )
    .expect_err("no such split");
    let message = err.to_string();
    assert!(err.is_usage(), "{message}");
    assert!(message.contains("split `validation`"), "{message}");
    assert!(message.contains("splits test, train"), "{message}");
    assert!(
        message.contains("no Parquet conversion"),
        "the conversion was looked for too: {message}"
    );
    assert!(downloads(&hub.requests()).is_empty());
}

#[test]
fn a_gated_dataset_without_a_token_names_hf_token() {
    let hub = StandInHub::start();
    let repo = questions();
    hub.add_repo(RepoKind::Dataset, "org/gated", "main", repo.path());
    hub.gate(RepoKind::Dataset, "org/gated", "hf_granted");
    let cache = tempfile::tempdir().expect("cache");

    let err = read(
        &settings(&hub, cache.path()),
        "kind=huggingface,source=org/gated",
    )
    .expect_err("gated");
    let message = err.to_string();
    assert!(err.is_usage(), "{message}");
    assert!(message.contains("`org/gated` is gated"), "{message}");
    assert!(message.contains("HF_TOKEN"), "{message}");
    assert!(downloads(&hub.requests()).is_empty());

    // With a token that has access, it downloads.
    let granted = settings(&hub, cache.path()).with_token(Token::new("hf_granted"));
    let items = read(&granted, "kind=huggingface,source=org/gated").expect("granted");
    assert_eq!(items.len(), 3);
}

#[test]
fn a_dataset_the_hub_does_not_have_is_a_usage_error_naming_it() {
    let hub = StandInHub::start();
    let cache = tempfile::tempdir().expect("cache");
    let err = read(
        &settings(&hub, cache.path()),
        "kind=huggingface,source=org/nothing",
    )
    .expect_err("not found");
    let message = err.to_string();
    assert!(err.is_usage(), "{message}");
    assert!(message.contains("`org/nothing` was not found"), "{message}");
    assert!(message.contains(&hub.endpoint()), "{message}");
}

#[test]
fn an_unreachable_hub_falls_back_to_the_cache_and_without_it_names_the_endpoint() {
    let hub = StandInHub::start();
    let repo = questions();
    hub.add_repo(RepoKind::Dataset, "org/questions", "main", repo.path());
    let cache = tempfile::tempdir().expect("cache");
    let online = settings(&hub, cache.path());
    read(&online, "kind=huggingface,source=org/questions").expect("online");
    drop(hub);

    // The Hub is gone: the cached snapshot answers.
    let items = read(&online, "kind=huggingface,source=org/questions").expect("cached");
    assert_eq!(texts(&items), ["train one", "train two", "train three"]);

    // Without the cache, a failure to start (not a usage error) that says
    // where it looked and what to do.
    let empty = tempfile::tempdir().expect("empty cache");
    let endpoint = online.endpoint.clone();
    let err = read(
        &HubSettings::new(&endpoint, empty.path().to_owned()),
        "kind=huggingface,source=org/questions",
    )
    .expect_err("unreachable");
    let message = err.to_string();
    assert!(!err.is_usage(), "{message}");
    assert!(message.contains(&endpoint), "{message}");
    assert!(message.contains("HF_HUB_OFFLINE=1"), "{message}");
}

#[test]
fn the_session_downloads_the_dataset_when_it_prepares_before_the_backend_starts() {
    let hub = StandInHub::start();
    let repo = questions();
    hub.add_repo(RepoKind::Dataset, "org/questions", "main", repo.path());
    let cache = tempfile::tempdir().expect("cache");
    let plan = Plan::new(PlanArgs {
        backend: BackendArgs::parse("kind=offline,engine=mock").expect("parses"),
        data: vec!["kind=huggingface,source=org/questions,split=train".to_owned()],
        ..PlanArgs::default()
    })
    .expect("the plan takes a dataset name");
    // Planning checks the arguments only; nothing is sent.
    assert!(hub.requests().is_empty(), "{}", shown(&hub.requests()));

    let session = Session::new(plan);
    with_hub_settings(settings(&hub, cache.path()), || session.prepare()).expect("prepared");
    assert_eq!(downloads(&hub.requests()).len(), 2);
}

/// The options `--data ARG` stands for, or the error.
fn resolved(arg: &str) -> guidebench_bench::Result<serde_json::Map<String, Value>> {
    let (kind, args) = resolve_kind(parse_kind_args(arg).expect("parses"))?;
    assert_eq!(kind.name, "file", "{arg}");
    Ok(args.options)
}

#[test]
fn guidellm_dataset_keys_given_two_ways_must_agree_and_unhonoured_load_kwargs_are_refused() {
    // GuideLLM's keys in ours.
    let options = resolved(
        "kind=huggingface,src=org/set,load_kwargs.name=cfg,load_kwargs.split=test,\
         load_kwargs.revision=v2,load_kwargs.streaming=false",
    )
    .expect("translated");
    assert_eq!(options["path"], "org/set@v2");
    assert_eq!(options["config"], "cfg");
    assert_eq!(options["split"], "test");
    for gone in ["src", "load_kwargs"] {
        assert!(!options.contains_key(gone), "{gone}: {options:?}");
    }
    // The same value given two ways is one value.
    let options =
        resolved("kind=hf,source=org/set,path=org/set,split=train,load_kwargs.split=train")
            .expect("agreeing");
    assert_eq!(options["path"], "org/set");

    let refused = |arg: &str, words: &[&str]| {
        let err = resolved(arg).expect_err(arg);
        let message = err.to_string();
        assert!(err.is_usage(), "{arg}: {message}");
        for word in words {
            assert!(message.contains(word), "{arg}: `{word}` not in {message}");
        }
        message
    };
    refused("kind=hf,path=org/a,source=org/b", &["org/a", "org/b"]);
    refused(
        "kind=hf,source=org/a,from=org/b",
        &["from", "org/a", "org/b"],
    );
    refused(
        "kind=huggingface,source=org/a,split=train,load_kwargs.split=test",
        &["load_kwargs.split", "train", "test"],
    );
    refused(
        "kind=hf,source=org/a,config=x,load_kwargs.name=y",
        &["load_kwargs.name", "config"],
    );
    refused(
        "kind=hf,source=org/a@v1,load_kwargs.revision=v2",
        &["load_kwargs.revision", "v1", "v2"],
    );
    let message = refused(
        "kind=hf,source=org/a,load_kwargs.token=hf_secret_value",
        &["load_kwargs.token", "HF_TOKEN"],
    );
    assert!(!message.contains("hf_secret_value"), "{message}");
    refused(
        "kind=hf,source=org/a,load_kwargs.streaming=true",
        &["load_kwargs.streaming", "count=N"],
    );
    refused(
        "kind=hf,source=org/a,load_kwargs.cache_dir=/tmp/x",
        &["load_kwargs.cache_dir", "hub_cache", "HF_HUB_CACHE"],
    );
    refused(
        "kind=hf,source=org/a,load_kwargs.trust_remote_code=true",
        &["load_kwargs.trust_remote_code", "refs/convert/parquet"],
    );
    refused(
        "kind=hf,source=org/a,load_kwargs.data_files=x.json",
        &["load_kwargs.data_files", "split=NAME"],
    );
    refused(
        "kind=hf,source=org/a,load_kwargs.num_proc=4",
        &["load_kwargs.num_proc", "name (the config), split, revision"],
    );
    refused("kind=hf,source=org/a,load_kwargs=x", &["load_kwargs"]);

    // A key GuideLLM 0.8.1 does not take either is an unknown option.
    let cache = tempfile::tempdir().expect("cache");
    let offline =
        HubSettings::new("http://127.0.0.1:9", cache.path().to_owned()).with_offline(true);
    let err =
        read(&offline, "kind=hf,source=org/a,data_kwargs.name=x").expect_err("unknown option");
    assert!(err.to_string().contains("data_kwargs"), "{err}");
}
