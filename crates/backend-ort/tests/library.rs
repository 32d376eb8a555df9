//! A file that is not an ONNX Runtime library is a clear load error.
//!
//! Alone in its test binary: ONNX Runtime is loaded once per process, so
//! this must run before any test loads the real library.

use guidebench_core::open::OpenStep;
use guidebench_ort::{OrtEngine, OrtError, OrtOptions};
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

#[test]
fn a_file_that_is_not_the_library_is_a_load_error_that_says_how_to_get_one() {
    let dir = tempfile::tempdir().expect("a temp dir");
    write_llama_fixture(dir.path(), &FixtureSpec::tiny()).expect("the fixture is written");
    let fake = dir.path().join("libonnxruntime.so");
    std::fs::write(&fake, b"not a shared library").expect("write");
    let options = OrtOptions {
        ort_library: Some(fake.display().to_string()),
        ..OrtOptions::default()
    };
    let err = OrtEngine::load(Some(dir.path().to_str().expect("UTF-8")), &options)
        .expect_err("the load fails");
    assert!(matches!(err, OrtError::LibraryLoad { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("libonnxruntime.so"), "{text}");
    assert!(text.contains("scripts/native ort"), "{text}");
}
