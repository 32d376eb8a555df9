//! The fixture generator: pinned output, determinism and errors.

use std::path::Path;

use guidebench_builtins::Error;
use guidebench_builtins::fixtures::{
    FixtureDtype, FixtureSpec, builtin_model_dir_in, write_llama_fixture,
};
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
fn the_bf16_and_f16_fixtures_are_pinned_byte_for_byte() {
    for (spec, config, weights) in [
        (
            FixtureSpec::bf16(),
            "19d55636e35b2b8d3285c4d7cf2c529b8766580510cd0c555bdd0d003a34adc8",
            "6f4b0ec180a0480ff12fdef478e67c06f46712ad7eb27028e328855841fec865",
        ),
        (
            FixtureSpec::f16(),
            "f596de83591fe233d4dcf94f8d8cbd886c00e56661b92d0076616f9409b8b23b",
            "62dd08b3cff29024d5117dc51e40b4f4bfea796cc5d92154b6af87307c5fa6ee",
        ),
    ] {
        assert_pinned(
            &spec,
            &[
                ("config.json", config),
                GENERATION_CONFIG,
                ("model.safetensors", weights),
                TOKENIZER,
                TOKENIZER_CONFIG,
            ],
        );
    }
}

/// Every tensor of `dir`'s single or sharded weights: name, dtype and
/// values read back as `f32`.
fn tensors(dir: &Path) -> Vec<(String, safetensors::Dtype, Vec<f32>)> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    for file in files {
        let bytes = std::fs::read(&file).expect("read");
        let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
        for (name, view) in st.iter() {
            let data = view.data();
            let values = match view.dtype() {
                safetensors::Dtype::F32 => data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                safetensors::Dtype::BF16 => data
                    .chunks_exact(2)
                    .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                safetensors::Dtype::F16 => data
                    .chunks_exact(2)
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                other => panic!("{name}: unexpected dtype {other:?}"),
            };
            out.push((name.to_owned(), view.dtype(), values));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn config(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("config.json")).expect("config");
    serde_json::from_str(&text).expect("json")
}

#[test]
fn bf16_and_f16_fixtures_hold_the_f32_weights_rounded_to_nearest_even() {
    let f32_dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(f32_dir.path(), &FixtureSpec::tiny()).expect("fixture");
    let reference = tensors(f32_dir.path());
    for (dtype, stored, config_name) in [
        (FixtureDtype::Bf16, safetensors::Dtype::BF16, "bfloat16"),
        (FixtureDtype::F16, safetensors::Dtype::F16, "float16"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        write_llama_fixture(dir.path(), &FixtureSpec::tiny().in_dtype(dtype)).expect("fixture");
        let got = tensors(dir.path());
        assert_eq!(got.len(), reference.len());
        for ((name, st_dtype, values), (ref_name, _, ref_values)) in got.iter().zip(&reference) {
            assert_eq!(name, ref_name);
            assert_eq!(*st_dtype, stored, "{name}");
            let rounded: Vec<u32> = ref_values
                .iter()
                .map(|v| dtype.round(*v).to_bits())
                .collect();
            let values: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
            assert!(
                rounded == values,
                "{name}: not the f32 values rounded to {dtype:?}"
            );
        }
        assert_eq!(config(dir.path())["torch_dtype"], config_name);
    }
    // Ties go to even: 1 + 2^-8 is halfway between two bf16 values.
    assert_eq!(FixtureDtype::Bf16.round(1.0 + 1.0 / 256.0), 1.0);
    assert_eq!(
        FixtureDtype::Bf16.round(1.0 + 3.0 / 256.0),
        1.0 + 4.0 / 256.0
    );
    assert_eq!(FixtureDtype::F16.round(1.0 + 1.0 / 2048.0), 1.0);
}

#[test]
fn the_config_states_the_dtype_in_its_layout_or_not_at_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = FixtureSpec::transformers5().in_dtype(FixtureDtype::Bf16);
    write_llama_fixture(dir.path(), &spec).expect("fixture");
    let c = config(dir.path());
    assert_eq!(c["dtype"], "bfloat16");
    assert!(c.get("torch_dtype").is_none(), "{c}");

    let silent = FixtureSpec {
        config_states_dtype: false,
        ..FixtureSpec::f16()
    };
    write_llama_fixture(dir.path(), &silent).expect("fixture");
    let c = config(dir.path());
    assert!(
        c.get("torch_dtype").is_none() && c.get("dtype").is_none(),
        "{c}"
    );
    assert!(
        tensors(dir.path())
            .iter()
            .all(|(_, d, _)| *d == safetensors::Dtype::F16)
    );
}

#[test]
fn a_sharded_bf16_index_counts_two_bytes_a_value() {
    let (a, b) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    write_llama_fixture(a.path(), &FixtureSpec::sharded()).expect("f32");
    let bf16 = FixtureSpec::sharded().in_dtype(FixtureDtype::Bf16);
    write_llama_fixture(b.path(), &bf16).expect("bf16");
    let total = |dir: &Path| {
        let text =
            std::fs::read_to_string(dir.join("model.safetensors.index.json")).expect("index");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        v["metadata"]["total_size"].as_u64().expect("total_size")
    };
    assert_eq!(total(a.path()), 2 * total(b.path()));
    assert_eq!(tensors(b.path()).len(), tensors(a.path()).len());
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
