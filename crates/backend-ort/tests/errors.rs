//! Loading the ort engine: where the graph is found, and the load errors
//! (each says what is wrong and what to do).

mod common;

use std::path::Path;

use guidebench_core::open::OpenStep;
use guidebench_ort::{OrtEngine, OrtError, OrtOptions};
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    write_llama_fixture(dir.path(), &FixtureSpec::tiny()).expect("the fixture is written");
    dir
}

fn load_err(dir: &Path, options: &OrtOptions) -> OrtError {
    OrtEngine::load(Some(dir.to_str().expect("UTF-8")), options).expect_err("the load fails")
}

#[test]
fn a_missing_library_says_how_to_get_one() {
    let dir = fixture();
    let options = OrtOptions {
        ort_library: Some("/nonexistent/libonnxruntime.so".into()),
        ..OrtOptions::default()
    };
    let err = load_err(dir.path(), &options);
    assert!(matches!(err, OrtError::LibraryNotFound { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("/nonexistent/libonnxruntime.so"), "{text}");
    assert!(text.contains("scripts/native ort"), "{text}");
}

#[test]
fn a_folder_without_a_graph_names_the_files_looked_for() {
    if !common::ready() {
        return;
    }
    let dir = fixture();
    let err = load_err(dir.path(), &common::options());
    assert!(matches!(err, OrtError::NoGraph { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("model.onnx") && text.contains("onnx/decoder_model_merged.onnx"),
        "{text}"
    );
}

#[test]
fn a_graph_without_logits_is_refused() {
    if !common::ready() {
        return;
    }
    let dir = fixture();
    common::export(dir.path(), &["--logits-name", "scores"]);
    let err = load_err(dir.path(), &common::options());
    assert!(matches!(err, OrtError::UnsupportedGraph { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("no `logits` output"), "{text}");
    assert!(text.contains("scores float32[?, ?, "), "{text}");
}

#[test]
fn a_graph_with_unknown_inputs_is_refused_with_the_list_of_inputs() {
    if !common::ready() {
        return;
    }
    let dir = fixture();
    common::export(dir.path(), &["--extra-input", "token_type_ids"]);
    let err = load_err(dir.path(), &common::options());
    assert!(matches!(err, OrtError::UnsupportedGraph { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("inputs the engine does not understand: token_type_ids"),
        "{text}"
    );
    assert!(
        text.contains("input_ids int64[?, ?]")
            && text.contains("past_key_values.1.value float32[?, 2, ?, 16]"),
        "{text}"
    );
}

fn edit_config(dir: &Path, key: &str, value: u64) {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).expect("read config.json");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    config[key] = value.into();
    std::fs::write(&path, config.to_string()).expect("write config.json");
}

#[test]
fn a_config_that_disagrees_with_the_graph_is_refused() {
    if !common::ready() {
        return;
    }
    for (key, value, what) in [
        (
            "num_hidden_layers",
            3,
            "the number of layers: the graph has 2, config.json says 3",
        ),
        (
            "num_key_value_heads",
            4,
            "the number of key/value heads: the graph has 2, config.json says 4",
        ),
    ] {
        let dir = fixture();
        common::export(dir.path(), &[]);
        edit_config(dir.path(), key, value);
        let err = load_err(dir.path(), &common::options());
        assert!(matches!(err, OrtError::ConfigMismatch { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(what), "{key}: {text}");
    }
}

#[test]
fn cuda_needs_a_library_with_the_cuda_provider() {
    if !common::ready() {
        return;
    }
    let dir = fixture();
    common::export(dir.path(), &[]);
    let options = OrtOptions {
        execution_provider: "cuda".into(),
        ..common::options()
    };
    match OrtEngine::load(Some(dir.path().to_str().expect("UTF-8")), &options) {
        // A GPU build of ONNX Runtime on a machine with a GPU.
        Ok(engine) => assert!(engine.layout().has_past),
        Err(err) => {
            assert!(
                matches!(err, OrtError::UnsupportedProvider { .. }),
                "{err:?}"
            );
            assert!(err.to_string().contains("cuda"), "{err}");
        }
    }
}

#[test]
fn the_engine_is_registered_as_ort() {
    let names: Vec<&str> = guidebench_core::registry::engines()
        .expect("the registry builds")
        .names()
        .collect();
    assert!(names.contains(&"ort"), "{names:?}");
}

#[test]
fn a_merged_decoder_under_onnx_is_found_with_its_external_data() {
    if !common::ready() {
        return;
    }
    let dir = fixture();
    common::export(dir.path(), &[]);
    let sub = dir.path().join("onnx");
    std::fs::create_dir(&sub).expect("mkdir");
    let graph = sub.join("decoder_model_merged.onnx");
    std::fs::rename(dir.path().join("model.onnx"), &graph).expect("move the graph");
    std::fs::rename(
        dir.path().join("model.onnx_data"),
        sub.join("model.onnx_data"),
    )
    .expect("move its data");
    let engine = OrtEngine::load(
        Some(dir.path().to_str().expect("UTF-8")),
        &common::options(),
    )
    .unwrap_or_else(|e| panic!("the moved graph loads: {e}"));
    assert_eq!(engine.layout().path, graph);
    assert_eq!(engine.layout().layers, 2);
}
