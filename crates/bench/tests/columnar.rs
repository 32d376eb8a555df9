//! Parquet and Arrow IPC data files, and Hugging Face datasets in a local
//! cache, through `--data kind=file`: the files are written here with the
//! arrow and parquet crates, into temporary folders.

use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder};
use arrow_array::{ArrayRef, Float64Array, Int32Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Fields};
use guidebench_bench::data::{DataItem, DataSource, create_source, with_hub_settings};
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{ChatMessage, RequestInput};
use guidebench_hub::HubSettings;
use guidebench_testkit::ByteTokenizer;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

/// Every item of a `--data` argument, or the error building the source.
fn read(arg: &str) -> Result<Vec<DataItem>, String> {
    let mut source: Box<dyn DataSource> = create_source(
        parse_kind_args(arg).map_err(|e| e.to_string())?,
        Arc::new(ByteTokenizer::default()),
        7,
    )
    .map_err(|e| e.to_string())?;
    let mut items = Vec::new();
    while let Some(item) = source.next_item().map_err(|e| e.to_string())? {
        items.push(item);
    }
    Ok(items)
}

/// Questions, output lengths and temperatures, as typed columns.
fn questions(texts: &[&str]) -> RecordBatch {
    let count = texts.len();
    let lengths: Vec<i32> = (1..=count).map(|n| 10 * n as i32).collect();
    RecordBatch::try_from_iter([
        (
            "question",
            Arc::new(StringArray::from(texts.to_vec())) as ArrayRef,
        ),
        (
            "max_tokens",
            Arc::new(Int32Array::from(lengths)) as ArrayRef,
        ),
        (
            "temperature",
            Arc::new(Float64Array::from(vec![0.5; count])) as ArrayRef,
        ),
    ])
    .expect("batch")
}

/// Writes `batch` as a snappy-compressed Parquet file.
fn write_parquet(path: &Path, batch: &RecordBatch) {
    std::fs::create_dir_all(path.parent().expect("folder")).expect("folder");
    let file = std::fs::File::create(path).expect("create");
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties)).expect("writer");
    writer.write(batch).expect("write");
    writer.close().expect("close");
}

/// A ShareGPT column: a list of `{from, value}` structs per row.
fn sharegpt(rows: &[&[(&str, &str)]]) -> RecordBatch {
    let fields = Fields::from(vec![
        Field::new("from", DataType::Utf8, true),
        Field::new("value", DataType::Utf8, true),
    ]);
    let mut list = ListBuilder::new(StructBuilder::from_fields(fields, 8));
    for row in rows {
        for (from, value) in *row {
            let message = list.values();
            message
                .field_builder::<StringBuilder>(0)
                .expect("from")
                .append_value(from);
            message
                .field_builder::<StringBuilder>(1)
                .expect("value")
                .append_value(value);
            message.append(true);
        }
        list.append(true);
    }
    RecordBatch::try_from_iter([("conversations", Arc::new(list.finish()) as ArrayRef)])
        .expect("batch")
}

#[test]
fn a_parquet_file_maps_its_columns_like_a_jsonl_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("prompts.parquet");
    write_parquet(&path, &questions(&["why?", "how so?"]));
    let items = read(&format!("kind=file,path=\"{}\"", path.display())).expect("items");
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].input, RequestInput::Text("why?".to_string()));
    assert_eq!(items[0].output_tokens, Some(10), "max_tokens, an int32");
    assert_eq!(items[0].prompt_tokens, Some(4), "counted by the tokenizer");
    assert_eq!(items[0].sampling.temperature, Some(0.5), "a float64");
    assert_eq!(items[1].output_tokens, Some(20));
    assert!(
        items[1].origin.ends_with("prompts.parquet, row 2"),
        "{}",
        items[1].origin
    );

    // A named column that is not there lists the file's columns.
    let err = read(&format!(
        "kind=file,path=\"{}\",prompt_column=prompt",
        path.display()
    ))
    .expect_err("no such column");
    assert!(
        err.contains("question, max_tokens, temperature"),
        "the columns present: {err}"
    );
}

#[test]
fn an_arrow_file_or_stream_of_sharegpt_rows_gives_conversations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let batch = sharegpt(&[
        &[("human", "hello"), ("gpt", "recorded"), ("human", "again")],
        &[("system", "be brief"), ("human", "one question")],
    ]);
    let file = dir.path().join("chats.arrow");
    let mut writer = arrow_ipc::writer::FileWriter::try_new(
        std::fs::File::create(&file).expect("create"),
        &batch.schema(),
    )
    .expect("writer");
    writer.write(&batch).expect("write");
    writer.finish().expect("finish");
    let stream = dir.path().join("chats.feather");
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(
        std::fs::File::create(&stream).expect("create"),
        &batch.schema(),
    )
    .expect("writer");
    writer.write(&batch).expect("write");
    writer.finish().expect("finish");

    for path in [file, stream] {
        let items = read(&format!("kind=file,path=\"{}\"", path.display())).expect("items");
        assert_eq!(items.len(), 2, "{}", path.display());
        assert_eq!(
            items[0].input,
            RequestInput::Chat(vec![ChatMessage::text("user", "hello")])
        );
        assert_eq!(items[0].turns.len(), 1, "the human messages are the turns");
        assert_eq!(
            items[0].turns[0].input,
            RequestInput::Chat(vec![ChatMessage::text("user", "again")])
        );
        assert_eq!(
            items[1].input,
            RequestInput::Chat(vec![
                ChatMessage::text("system", "be brief"),
                ChatMessage::text("user", "one question"),
            ])
        );
        assert!(items[1].turns.is_empty());
    }
}

/// A fake hub cache holding `org/name` at commit `abc123` (`refs/main`),
/// with a train and a test split, and a `v2` tag at commit `def456`.
const MAIN_COMMIT: &str = "abc1230000000000000000000000000000000000";
const TAG_COMMIT: &str = "def4560000000000000000000000000000000000";

/// Reads `arg` offline: the cache alone answers, nothing is sent.
fn read_offline(root: &Path, arg: &str) -> Result<Vec<DataItem>, String> {
    let settings = HubSettings::new("http://127.0.0.1:9", root.to_owned()).with_offline(true);
    with_hub_settings(settings, || read(arg))
}

/// A dataset in a Hugging Face cache laid out as `huggingface_hub`
/// writes it.
fn hub_cache(root: &Path) {
    let folder = root.join("datasets--org--name");
    std::fs::create_dir_all(folder.join("refs")).expect("refs");
    std::fs::write(folder.join("refs/main"), MAIN_COMMIT).expect("main");
    std::fs::write(folder.join("refs/v2"), format!("{TAG_COMMIT}\n")).expect("tag");
    let snapshot = folder.join("snapshots").join(MAIN_COMMIT);
    write_parquet(
        &snapshot.join("data/train-00000-of-00002.parquet"),
        &questions(&["train one"]),
    );
    write_parquet(
        &snapshot.join("data/train-00001-of-00002.parquet"),
        &questions(&["train two"]),
    );
    write_parquet(
        &snapshot.join("data/test-00000-of-00001.parquet"),
        &questions(&["test one"]),
    );
    write_parquet(
        &folder
            .join("snapshots")
            .join(TAG_COMMIT)
            .join("default/train/0000.parquet"),
        &questions(&["tagged"]),
    );
    std::fs::write(snapshot.join("README.md"), "# a dataset\n").expect("readme");
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

#[test]
fn a_dataset_in_the_local_hugging_face_cache_is_read_by_split_and_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    hub_cache(dir.path());
    let root = dir.path();

    let train = read_offline(root, "kind=file,path=org/name").expect("train");
    assert_eq!(texts(&train), ["train one", "train two"], "both shards");
    assert!(
        train[1]
            .origin
            .ends_with("data/train-00001-of-00002.parquet, row 1"),
        "{}",
        train[1].origin
    );
    let test = read_offline(root, "kind=file,path=org/name,split=test").expect("test");
    assert_eq!(texts(&test), ["test one"]);
    let tagged = read_offline(root, "kind=file,path=org/name@v2").expect("tag");
    assert_eq!(texts(&tagged), ["tagged"], "a config/split folder layout");
    let commit =
        read_offline(root, &format!("kind=file,path=org/name@{TAG_COMMIT}")).expect("commit");
    assert_eq!(texts(&commit), ["tagged"]);
}

#[test]
fn a_dataset_missing_from_the_cache_offline_names_it_and_says_offline_mode_is_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    hub_cache(dir.path());
    let root = dir.path();

    let err = read_offline(root, "kind=file,path=other/set").expect_err("missing");
    assert!(err.contains("`other/set`"), "{err}");
    assert!(err.contains("HF_HUB_OFFLINE=1"), "{err}");

    let err = read_offline(root, "kind=file,path=org/name@v9").expect_err("no revision");
    assert!(err.contains("`v9`"), "{err}");
    assert!(err.contains("HF_HUB_OFFLINE=1"), "{err}");

    let err = read_offline(root, "kind=file,path=org/name,split=validation").expect_err("no split");
    assert!(err.contains("validation"), "{err}");
}
