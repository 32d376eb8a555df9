//! Shared by the ort engine's tests: the ONNX export of the testkit
//! fixtures, through the project's own scripts.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use guidebench_core::engine::{EngineOptions, EngineRequest};
use guidebench_core::generation::{ModelText, StepRunner};
use guidebench_core::open::OpenStep;
use guidebench_core::sampling::Sampling;
use guidebench_ort::{OrtEngine, OrtOptions};
use guidebench_testkit::expected::{PromptExpectation, stored};
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

/// The checkout.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether the tests can run: `python3` is there (else they are skipped
/// with a message). Runs `scripts/native ort` once per process, which
/// creates the venv with `onnx` and `numpy` and fetches ONNX Runtime
/// unless they are already cached.
pub fn ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        let python = Command::new("python3").arg("--version").output();
        if !python.is_ok_and(|o| o.status.success()) {
            eprintln!("SKIPPED: python3 is not installed; the ONNX fixtures cannot be exported");
            return false;
        }
        let status = Command::new(root().join("scripts/native"))
            .arg("ort")
            .stdout(std::process::Stdio::null())
            .status()
            .expect("scripts/native runs");
        assert!(status.success(), "`scripts/native ort` failed");
        true
    })
}

/// Writes `dir/model.onnx` from the fixture's safetensors with the
/// project's exporter (`extra` are its options, e.g. `--no-past`).
pub fn export(dir: &Path, extra: &[&str]) {
    let out = Command::new(root().join(".venv/bin/python"))
        .arg(root().join("scripts/export_onnx_fixture.py"))
        .arg(dir)
        .args(extra)
        .output()
        .expect("the exporter runs");
    assert!(
        out.status.success(),
        "the exporter failed on {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The options the tests load with.
pub fn options() -> OrtOptions {
    OrtOptions {
        common: EngineOptions {
            threads: Some(2),
            max_slots: Some(8),
            ..EngineOptions::default()
        },
        ..OrtOptions::default()
    }
}

/// Exports the fixture in `dir` with `extra` and loads it.
pub fn load_with(dir: &Path, extra: &[&str]) -> OrtEngine {
    export(dir, extra);
    let model = dir.to_str().expect("a UTF-8 path");
    OrtEngine::load(Some(model), &options()).unwrap_or_else(|e| panic!("the fixture loads: {e}"))
}

/// What core reads of the model folder `engine` was loaded from: its
/// tokenizer and end-of-sequence ids.
pub fn text(engine: &OrtEngine) -> ModelText {
    let model = engine.model_dir().to_str().expect("a UTF-8 path");
    ModelText::open(model).unwrap_or_else(|e| panic!("core reads the tokenizer: {e}"))
}

/// `engine` in core's generation loop, with its folder's [`text`].
pub fn runner(engine: OrtEngine) -> StepRunner<OrtEngine> {
    let text = text(&engine);
    StepRunner::new(engine, text)
}

/// Exports the fixture in `dir` as Optimum would and loads it.
pub fn load(dir: &Path) -> OrtEngine {
    load_with(dir, &[])
}

/// The `tiny` fixture exported to ONNX in a temp folder, its stored
/// prompts, and the engine loaded with `max_slots`.
pub fn tiny_with_slots(max_slots: i64) -> (tempfile::TempDir, Vec<PromptExpectation>, OrtEngine) {
    let dir = tempfile::tempdir().expect("a temp dir");
    write_llama_fixture(dir.path(), &FixtureSpec::tiny()).expect("the fixture is written");
    export(dir.path(), &[]);
    let with_slots = OrtOptions {
        common: EngineOptions {
            max_slots: Some(max_slots),
            ..options().common
        },
        ..options()
    };
    let model = dir.path().to_str().expect("a UTF-8 path");
    let engine = OrtEngine::load(Some(model), &with_slots).expect("the fixture loads");
    let prompts = stored()
        .expect("the stored expectations parse")
        .fixture("tiny")
        .expect("tiny is stored")
        .prompts
        .clone();
    (dir, prompts, engine)
}

/// A request for `prompt` generating exactly `max_tokens` tokens.
pub fn request(id: usize, prompt: &PromptExpectation, max_tokens: u32) -> EngineRequest {
    EngineRequest {
        prepared_images: Vec::new(),
        id: id as u64,
        prompt: prompt.text.clone(),
        add_special_tokens: true,
        images: Vec::new(),
        audio: Vec::new(),
        sampling: Sampling::fixed_length(max_tokens).expect("valid sampling"),
    }
}
