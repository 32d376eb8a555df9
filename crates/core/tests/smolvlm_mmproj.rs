//! llama.cpp's mmproj file joined with a GGUF text model
//! (`ModelFolder::with_mmproj`), on the stored SmolVLM GGUF files
//! (`crates/testkit/gguf/smolvlm`, llama.cpp's converter's output for
//! testkit's `SmolVlmSpec::tiny_gguf` fixture): the metadata gives the
//! folder's own vision config, and every broken input is a typed error
//! naming the file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use guidebench_core::Error;
use guidebench_core::model::ModelFolder;
use guidebench_core::tokenizer::HfTokenizer;
use guidebench_core::vision::{
    SmolVlmFlavor, SmolVlmImageProcessor, SmolVlmProcessor, VisionFamily,
};
use guidebench_testkit::smolvlm::{SmolVlmSpec, smolvlm_gguf_file, write_smolvlm_fixture};

fn text_gguf() -> ModelFolder {
    let path = smolvlm_gguf_file("text-f32.gguf");
    ModelFolder::open_with_vision(path.to_str().expect("utf-8"), &[VisionFamily::SmolVlm])
        .expect("the text GGUF opens")
}

/// A copy of the stored f32 mmproj file in `dir`, changed by `edit`.
fn edited_mmproj(dir: &Path, edit: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut bytes = std::fs::read(smolvlm_gguf_file("mmproj-f32.gguf")).expect("read");
    edit(&mut bytes);
    let path = dir.join("mmproj.gguf");
    std::fs::write(&path, bytes).expect("write");
    path
}

#[test]
fn the_mmproj_metadata_gives_the_vision_config_of_the_folder_it_was_converted_from() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_smolvlm_fixture(dir.path(), &SmolVlmSpec::tiny_gguf()).expect("write");
    let folder = ModelFolder::open_with_vision(
        dir.path().to_str().expect("utf-8"),
        &[VisionFamily::SmolVlm],
    )
    .expect("the folder opens");
    for mmproj in ["mmproj-f32.gguf", "mmproj-f16.gguf"] {
        let path = smolvlm_gguf_file(mmproj);
        let pair = text_gguf().with_mmproj(&path).expect("the pair opens");
        let (want, got) = (
            folder.smolvlm().expect("vision"),
            pair.smolvlm().expect("vision"),
        );
        assert_eq!(got.vision, want.vision, "{mmproj}");
        assert_eq!(got.scale_factor, want.scale_factor);
        assert_eq!(got.image_token_id, want.image_token_id);
        assert_eq!(got.text_hidden_size, want.text_hidden_size);
        assert_eq!(got.image_seq_len(), want.image_seq_len());
        assert_eq!(pair.mmproj_file(), Some(path.as_path()));
        let (want, got) = (
            folder
                .smolvlm_processor()
                .expect("processor")
                .image_processor(),
            pair.smolvlm_processor()
                .expect("processor")
                .image_processor(),
        );
        assert_eq!(got.flavor(), SmolVlmFlavor::LlamaCpp);
        assert_eq!(want.flavor(), SmolVlmFlavor::Transformers);
        assert_eq!(got.tile(), want.tile());
        assert_eq!(got.image_seq_len(), want.image_seq_len());
        assert!(got.splits());
        assert_eq!(
            pair.config(),
            text_gguf().config(),
            "the text side is unchanged"
        );
    }
}

#[test]
fn an_mmproj_for_a_hugging_face_folder_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_smolvlm_fixture(dir.path(), &SmolVlmSpec::tiny_gguf()).expect("write");
    let folder = ModelFolder::open_with_vision(
        dir.path().to_str().expect("utf-8"),
        &[VisionFamily::SmolVlm],
    )
    .expect("the folder opens");
    let path = smolvlm_gguf_file("mmproj-f32.gguf");
    let err = folder
        .with_mmproj(&path)
        .expect_err("a folder takes no mmproj");
    assert!(
        matches!(&err, Error::InvalidModelConfig { path: p, .. } if *p == path),
        "{err:?}"
    );
    assert!(err.to_string().contains("GGUF"), "{err}");
}

#[test]
fn a_missing_or_corrupt_mmproj_is_a_typed_error_naming_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("absent.gguf");
    let err = text_gguf().with_mmproj(&missing).expect_err("missing");
    assert!(
        matches!(&err, Error::MissingModelFile { path, .. } if *path == missing),
        "{err:?}"
    );
    // Cut short inside the tensor data, and inside the header.
    for keep in [100_000, 200] {
        let path = edited_mmproj(dir.path(), |b| b.truncate(keep));
        let err = text_gguf().with_mmproj(&path).expect_err("truncated");
        assert!(
            matches!(&err, Error::InvalidGguf { path: p, .. } if *p == path),
            "{keep}: {err:?}"
        );
        assert!(err.to_string().contains("mmproj.gguf"), "{err}");
    }
    // Not a GGUF file at all.
    let path = dir.path().join("mmproj.gguf");
    std::fs::write(&path, b"not a gguf file").expect("write");
    let err = text_gguf().with_mmproj(&path).expect_err("garbage");
    assert!(matches!(&err, Error::InvalidGguf { .. }), "{err:?}");
}

/// Replaces the first `from` in `bytes` with `to` (of the same length).
fn replace(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("the text is in the file");
    bytes[at..at + to.len()].copy_from_slice(to);
}

#[test]
fn another_projector_type_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Gemma 3n's projector, a name of the same length.
    let path = edited_mmproj(dir.path(), |b| replace(b, b"idefics3", b"gemma3nv"));
    let err = text_gguf().with_mmproj(&path).expect_err("gemma3nv");
    assert!(
        matches!(&err, Error::UnsupportedArchitecture { model_type, .. }
            if model_type.contains("gemma3nv")),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("idefics3") && text.contains("mmproj.gguf"),
        "{text}"
    );
}

#[test]
fn a_missing_metadata_key_is_named_with_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The key renamed (same length): as if the converter had not written it.
    let path = edited_mmproj(dir.path(), |b| {
        replace(
            b,
            b"clip.vision.preproc_image_size",
            b"clip.vision.preproc_image_sizX",
        )
    });
    let err = text_gguf().with_mmproj(&path).expect_err("no preproc size");
    assert!(matches!(&err, Error::InvalidGguf { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("preproc_image_size") && text.contains("mmproj.gguf"),
        "{text}"
    );
}

/// mtmd looks `"\n\n"` up as one token before the global view (and its
/// server answers "Invalid token" where the vocabulary lacks it): a
/// vocabulary without it is refused here with the reason.
#[test]
fn the_llama_cpp_layout_needs_two_newlines_as_one_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = SmolVlmSpec::tiny();
    write_smolvlm_fixture(dir.path(), &spec).expect("write");
    let tok = Arc::new(HfTokenizer::from_file(dir.path().join("tokenizer.json")).expect("loads"));
    let id = tok.inner().token_to_id("<image>").expect("<image>");
    let images = |tok: &Arc<HfTokenizer>| {
        let p = SmolVlmImageProcessor::llama_cpp(32, 64, [0.5; 3], [0.5; 3], 4, Path::new("m"));
        SmolVlmProcessor::new(p, Arc::clone(tok), id)
    };
    let err = images(&tok)
        .layout_ids(1, 2, "strip.png")
        .expect_err("no \\n\\n token");
    let text = err.to_string();
    assert!(
        text.contains("strip.png") && text.contains("\\n\\n"),
        "{text}"
    );
    // With the token (the GGUF source fixture): per tile the fake token,
    // its row/column token and 4 image positions, no newline after the
    // one row, then "\n\n", the fake and global tokens, 4 positions and
    // the fake token.
    let dir = tempfile::tempdir().expect("tempdir");
    write_smolvlm_fixture(dir.path(), &SmolVlmSpec::tiny_gguf()).expect("write");
    let tok = Arc::new(HfTokenizer::from_file(dir.path().join("tokenizer.json")).expect("loads"));
    let ids = images(&tok)
        .layout_ids(1, 2, "strip.png")
        .expect("lays out");
    let piece = |t: &str| tok.inner().token_to_id(t).expect(t);
    let (fake, global, pair) = (
        piece("<fake_token_around_image>"),
        piece("<global-img>"),
        piece("\n\n"),
    );
    let mut want = vec![fake, piece("<row_1_col_1>"), id, id, id, id];
    want.extend([fake, piece("<row_1_col_2>"), id, id, id, id]);
    want.extend([pair, fake, global, id, id, id, id, fake]);
    assert_eq!(ids, want);
}
