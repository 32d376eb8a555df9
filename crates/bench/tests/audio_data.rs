//! Audio and image cells of `--data kind=file` as the Hugging Face
//! `datasets` library stores them: a Parquet file written by `datasets`
//! with its `Audio` and `Image` features (`{bytes, path}` structs), read
//! through the public API. The fixtures come from
//! `scripts/audio-data-fixtures` (libsndfile's WAV and FLAC, Pillow's PNG,
//! `datasets`' Parquet); the tests run in `crates/bench`, the folder the
//! path-only file's relative paths are written against.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use guidebench_bench::Error;
use guidebench_bench::data::{DataItem, OnError, PreparedSource};
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{ContentPart, MediaSource, RequestInput};

const FIXTURES: &str = "tests/fixtures/audio-data";

fn fixture(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(name)
}

fn bytes_of(name: &str) -> Arc<[u8]> {
    Arc::from(std::fs::read(fixture(name)).expect("fixture"))
}

/// Every item of a `--data` argument, read as a session reads it.
fn read(arg: &str) -> Result<Vec<DataItem>, Error> {
    let prepared = PreparedSource::new(parse_kind_args(arg).expect("parses"), OnError::Fail, 1)?;
    let mut source = prepared.source(None)?;
    Ok(std::iter::from_fn(|| source.next_item().expect("item")).collect())
}

/// The parts of an item's one user message.
fn parts(item: &DataItem) -> &[ContentPart] {
    let RequestInput::Chat(messages) = &item.input else {
        panic!("a chat, got {:?}", item.input);
    };
    let [message] = messages.as_slice() else {
        panic!("one message, got {messages:?}");
    };
    assert_eq!(message.role, "user");
    &message.content
}

/// The MIME type and bytes of a media source given as bytes.
fn bytes(source: &MediaSource) -> (&str, &Arc<[u8]>) {
    match source {
        MediaSource::Bytes { mime, data } => (mime, data),
        other => panic!("bytes, got {other:?}"),
    }
}

#[test]
fn a_datasets_parquet_file_with_embedded_audio_gives_each_row_its_clip_bytes_and_type() {
    let path = fixture("hf-embedded.parquet");
    let items = read(&format!("kind=file,path={}", path.display())).expect("reads");
    assert_eq!(items.len(), 2);
    let picture = bytes_of("picture.png");
    for (item, (prompt, clip, mime)) in items.iter().zip([
        ("Transcribe the first clip.", "clip-a.wav", "audio/wav"),
        ("Transcribe the second clip.", "clip-b.flac", "audio/flac"),
    ]) {
        let [text, image, audio] = parts(item) else {
            panic!("text, image and audio, got {:?}", parts(item));
        };
        assert_eq!(text, &ContentPart::text(prompt));
        let ContentPart::Image { source } = image else {
            panic!("an image, got {image:?}");
        };
        assert_eq!(bytes(source), ("image/png", &picture));
        let ContentPart::Audio { source } = audio else {
            panic!("audio, got {audio:?}");
        };
        let (got_mime, data) = bytes(source);
        assert_eq!(got_mime, mime, "{clip}");
        assert_eq!(data, &bytes_of(clip), "{clip}: the very bytes written");
    }

    // The same file through GuideLLM's name of the kind.
    let again = read(&format!("kind=parquet_file,path={}", path.display())).expect("reads");
    assert_eq!(again.len(), 2);
    assert_eq!(again[1].input, items[1].input);
}

#[test]
fn a_datasets_arrow_file_from_save_to_disk_gives_the_same_requests_as_its_parquet_file() {
    let arrow = read(&format!(
        "kind=file,path={}",
        fixture("hf-embedded.arrow").display()
    ))
    .expect("reads");
    let parquet = read(&format!(
        "kind=file,path={}",
        fixture("hf-embedded.parquet").display()
    ))
    .expect("reads");
    let inputs = |items: &[DataItem]| items.iter().map(|i| i.input.clone()).collect::<Vec<_>>();
    assert_eq!(arrow.len(), 2);
    assert_eq!(inputs(&arrow), inputs(&parquet));
}

#[test]
fn a_bare_binary_column_is_typed_by_its_header() {
    let items = read(&format!(
        "kind=file,path={}",
        fixture("bare-binary.parquet").display()
    ))
    .expect("reads");
    let [item] = items.as_slice() else {
        panic!("one item, got {items:?}");
    };
    let [text, ContentPart::Audio { source }] = parts(item) else {
        panic!("text then audio, got {:?}", parts(item));
    };
    assert_eq!(text, &ContentPart::text("Transcribe the bare clip."));
    assert_eq!(bytes(source), ("audio/flac", &bytes_of("clip-b.flac")));
}

#[test]
fn a_datasets_parquet_file_holding_paths_gives_the_local_files() {
    let items = read(&format!(
        "kind=file,path={}",
        fixture("hf-paths.parquet").display()
    ))
    .expect("reads");
    let sources: Vec<&MediaSource> = items
        .iter()
        .flat_map(|item| parts(item).iter())
        .filter_map(|part| match part {
            ContentPart::Audio { source } => Some(source),
            _ => None,
        })
        .collect();
    assert_eq!(
        sources,
        [
            &MediaSource::Path(fixture("clip-a.wav")),
            &MediaSource::Path(fixture("clip-b.flac")),
        ]
    );
}

#[test]
fn audio_columns_are_found_by_guidellms_names_and_bytes_without_a_path_take_their_headers_type() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().expect("dir");
    let flac = base64::engine::general_purpose::STANDARD.encode(bytes_of("clip-b.flac"));
    let wav = std::fs::canonicalize(fixture("clip-a.wav")).expect("fixture");
    let data = dir.path().join("rows.jsonl");
    std::fs::write(
        &data,
        format!(
            "{{\"prompt\": \"a\", \"Speech\": {{\"bytes\": \"{flac}\", \"path\": null}}}}\n\
             {{\"prompt\": \"b\", \"Speech\": {{\"bytes\": null, \"path\": \"{}\"}}}}\n\
             {{\"prompt\": \"c\", \"Speech\": {{\"bytes\": null, \"path\": null}}}}\n",
            wav.display()
        ),
    )
    .expect("write");
    let items = read(&format!("kind=file,path={}", data.display())).expect("reads");
    let [first, second, third] = items.as_slice() else {
        panic!("three items, got {items:?}");
    };
    let ContentPart::Audio { source } = &parts(first)[1] else {
        panic!("audio, got {:?}", parts(first));
    };
    assert_eq!(bytes(source), ("audio/flac", &bytes_of("clip-b.flac")));
    let ContentPart::Audio { source } = &parts(second)[1] else {
        panic!("audio, got {:?}", parts(second));
    };
    assert_eq!(source, &MediaSource::Path(wav));
    // An empty media struct is no media: a plain prompt.
    assert_eq!(third.input, RequestInput::Text("c".to_owned()));
}

#[test]
fn media_bytes_whose_type_cannot_be_told_are_a_row_error_naming_the_column() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("rows.jsonl");
    std::fs::write(
        &data,
        "{\"prompt\": \"a\", \"audio\": {\"bytes\": \"aGVsbG8=\", \"path\": \"clip.xyz\"}}\n",
    )
    .expect("write");
    let err = read(&format!("kind=file,path={}", data.display())).expect_err("unknown type");
    let Error::Row {
        location, column, ..
    } = &err
    else {
        panic!("a row error, got {err}");
    };
    assert_eq!(location.as_deref(), Some("line 1"));
    assert_eq!(column.as_deref(), Some("audio"));
    let message = err.to_string();
    assert!(
        message.contains("clip.xyz") && message.contains("wav, mp3, flac, ogg"),
        "{message}"
    );
}
