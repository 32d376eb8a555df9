//! The fixture generator: pinned output, determinism and errors.

use std::path::Path;

use guidebench_testkit::Error;
use guidebench_testkit::fixtures::{FixtureSpec, builtin_model_dir_in, write_llama_fixture};
use sha2::{Digest, Sha256};

/// `(file, sha256)` of every file in `dir`, sorted by name.
fn hashes(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| {
            let path = entry.expect("entry").path();
            let bytes = std::fs::read(&path).expect("read");
            let hex = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, hex)
        })
        .collect();
    out.sort();
    out
}

fn assert_pinned(spec: &FixtureSpec, want: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(dir.path(), spec).expect("fixture");
    let got = hashes(dir.path());
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(f, h)| ((*f).to_owned(), (*h).to_owned()))
        .collect();
    assert_eq!(
        got, want,
        "the generator's output changed; if that is deliberate, update these \
         hashes and regenerate the stored expectations"
    );
}

// The hashes are those of the files the candle-based generator wrote
// before the generator moved here (checked file by file for every spec).
const CONFIG: (&str, &str) = (
    "config.json",
    "690ccd890bdec06faecc2cbeb63da365ab15c42eb5c20f3d74589561dac1f8a0",
);
const GENERATION_CONFIG: (&str, &str) = (
    "generation_config.json",
    "648a255fa52465487ad2b89820c05980ed6a629e7692e984291d8c1f08634240",
);
const TOKENIZER: (&str, &str) = (
    "tokenizer.json",
    "1f3598f679fbf703634fb3687e628e35ddb1da264a36dc893a94fc1d995c1101",
);
const TOKENIZER_CONFIG: (&str, &str) = (
    "tokenizer_config.json",
    "b6b33bee5b618ca16cada79f273fed5b12b8103a36531cf269787e6b7f8c4c4d",
);

#[test]
fn the_tiny_fixture_is_byte_for_byte_what_it_always_was() {
    assert_pinned(
        &FixtureSpec::tiny(),
        &[
            CONFIG,
            GENERATION_CONFIG,
            (
                "model.safetensors",
                "c724112d3f0c3c8e097ea976b2400db5536818f0b8c6e5d1902246a81991a499",
            ),
            TOKENIZER,
            TOKENIZER_CONFIG,
        ],
    );
}

#[test]
fn the_sharded_fixture_is_byte_for_byte_what_it_always_was() {
    assert_pinned(
        &FixtureSpec::sharded(),
        &[
            CONFIG,
            GENERATION_CONFIG,
            (
                "model-00001-of-00003.safetensors",
                "5db77c9b63a9a57f1e0f442f766971f640c16f1ec9a145f5a2418f75fd44440c",
            ),
            (
                "model-00002-of-00003.safetensors",
                "906f62c7f1e653a549a59c9594924d2e1441de5e6354264c0f0ea4360a5589dd",
            ),
            (
                "model-00003-of-00003.safetensors",
                "d89fbd02bbcf2a1e5e5b370b50603fa4b3c8120210a7917e537f5bbe36ae9fab",
            ),
            (
                "model.safetensors.index.json",
                "50c2435d6854c80dc6778edc07e5957665455617e976b2b7b1b9766bf3f7f345",
            ),
            TOKENIZER,
            TOKENIZER_CONFIG,
        ],
    );
}

#[test]
fn two_runs_of_the_generator_write_the_same_files() {
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(a.path(), &FixtureSpec::qwen3()).expect("fixture");
    write_llama_fixture(b.path(), &FixtureSpec::qwen3()).expect("fixture");
    assert_eq!(hashes(a.path()), hashes(b.path()));
}

#[test]
fn a_spec_whose_heads_do_not_divide_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = FixtureSpec {
        num_key_value_heads: 3,
        ..FixtureSpec::tiny()
    };
    let err = write_llama_fixture(dir.path(), &spec).expect_err("rejected");
    assert!(matches!(err, Error::InvalidSpec { .. }), "{err}");
}

#[test]
fn an_unknown_builtin_name_lists_the_known_ones() {
    let root = tempfile::tempdir().expect("tempdir");
    let err = builtin_model_dir_in(root.path(), "huge").expect_err("unknown");
    assert!(
        matches!(&err, Error::UnknownBuiltin { name, known } if name == "huge" && known == &["tiny"]),
        "{err}"
    );
    assert!(err.to_string().contains("available: tiny"), "{err}");
}
