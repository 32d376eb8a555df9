//! GGUF files in the candle engine: testkit's fixtures, written as
//! llama.cpp lays them out, against the same weights as a safetensors
//! folder.

use std::path::Path;

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::EngineOptions;
use guidebench_core::generation::first_step_logits;
use guidebench_core::open::OpenStep;
use guidebench_testkit::conformance::largest_difference;
use guidebench_testkit::fixtures::FixtureSpec;
use guidebench_testkit::gguf::{GgufType, gguf_fixtures, gguf_reference_dir, write_gguf_fixture};

fn load(dir: &Path) -> CandleEngine {
    CandleEngine::load(dir.to_str(), &CandleOptions::default()).expect("load")
}

/// The fixture `spec` as a GGUF file of `ty` and as the f32 safetensors
/// folder of its dequantized weights.
fn pair(spec: &FixtureSpec, ty: GgufType) -> [tempfile::TempDir; 2] {
    let gguf = tempfile::tempdir().expect("tempdir");
    write_gguf_fixture(gguf.path(), spec, ty).expect("gguf fixture");
    let reference = tempfile::tempdir().expect("tempdir");
    gguf_reference_dir(reference.path(), spec, ty).expect("reference folder");
    [gguf, reference]
}

const TEXTS: [&str; 3] = [
    "stai glouck bree trandoo pleasing gaist vorn, kail stou 512 bo",
    "hello there",
    "gla mou ten sti fai ba ro ke",
];

/// The first-step logits of each text on `engine`, with the prompt ids.
fn logits_of(engine: &mut CandleEngine, texts: &[&str]) -> Vec<(Vec<u32>, Vec<f32>)> {
    let model = engine.model_dir().to_str().expect("UTF-8");
    let tokenizer = guidebench_core::generation::ModelText::open(model)
        .expect("text")
        .tokenizer;
    let prompts: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| tokenizer.encode(t, true).expect("encode"))
        .collect();
    let rows = first_step_logits(engine, &prompts).expect("logits");
    prompts.into_iter().zip(rows).collect()
}

#[test]
fn an_f32_gguf_gives_the_bits_of_its_safetensors_folder() {
    for (name, spec) in gguf_fixtures() {
        let [gguf, reference] = pair(&spec, GgufType::F32);
        let from_gguf = logits_of(&mut load(gguf.path()), &TEXTS);
        let from_folder = logits_of(&mut load(reference.path()), &TEXTS);
        for ((ids, a), (want_ids, b)) in from_gguf.iter().zip(&from_folder) {
            assert_eq!(ids, want_ids, "{name}: the GGUF vocabulary's ids");
            let (at, diff) = largest_difference(a, b);
            assert_eq!(diff, 0.0, "{name}: logit {at} differs by {diff}");
        }
    }
}

/// Quantized files: logits within what quantizing the activations (to 8
/// bits a value, per block, as llama.cpp does) costs of the f32 logits of
/// the dequantized weights: 5 % of the largest logit. Measured on these
/// fixtures with the final kernels: 0.9-2.1 % (Q8_0), 1.4-3.3 % (the
/// Q4_K_M mix), 1.1-3.1 % (Q6_K), the tied fixtures the largest.
#[test]
fn quantized_ggufs_give_the_logits_of_their_dequantized_weights() {
    for ty in [GgufType::Q8_0, GgufType::Q4K, GgufType::Q6K] {
        for (name, spec) in gguf_fixtures() {
            let [gguf, reference] = pair(&spec, ty);
            let from_gguf = logits_of(&mut load(gguf.path()), &TEXTS);
            let from_folder = logits_of(&mut load(reference.path()), &TEXTS);
            for ((ids, a), (want_ids, b)) in from_gguf.iter().zip(&from_folder) {
                assert_eq!(ids, want_ids, "{name} {ty:?}: the GGUF vocabulary's ids");
                let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                let (at, diff) = largest_difference(a, b);
                assert!(
                    diff <= 0.05 * scale,
                    "{name} {ty:?}: logit {at} differs by {diff} (largest logit {scale})"
                );
            }
        }
    }
}

#[test]
fn a_gguf_describes_its_stored_types() {
    let spec = FixtureSpec::gguf_tiny();
    let [gguf, _] = pair(&spec, GgufType::Q4K);
    let engine = load(gguf.path());
    let text = engine.dtype_choice().to_string();
    assert!(text.contains("Q4_K"), "{text}");
    assert!(
        text.contains("Q6_K"),
        "the mix names its head's type: {text}"
    );
}

#[test]
fn an_explicit_dtype_on_a_gguf_is_refused_with_the_reason() {
    let spec = FixtureSpec::gguf_tiny();
    let [gguf, _] = pair(&spec, GgufType::Q8_0);
    let options = CandleOptions {
        common: EngineOptions {
            dtype: Some("f32".into()),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    };
    let err = CandleEngine::load(gguf.path().to_str(), &options).expect_err("dtype=f32");
    let text = err.to_string();
    assert!(text.contains("GGUF") && text.contains("dtype"), "{text}");
}

/// `quant_kernels=candle` runs the same file on candle's repacked kernels
/// where they take the matrix: the same prompt ids, logits within what
/// the two kernels' different activation rounding costs (as the own
/// kernels are held to against the reference); a misspelt value is
/// refused naming the key.
#[test]
fn candles_quantized_kernels_give_the_logits_of_the_engines_own() {
    let spec = FixtureSpec::gguf_tiny();
    let [gguf, _] = pair(&spec, GgufType::Q4K);
    let candle = CandleOptions {
        quant_kernels: "candle".into(),
        ..CandleOptions::default()
    };
    let own = logits_of(&mut load(gguf.path()), &TEXTS);
    let theirs = logits_of(
        &mut CandleEngine::load(gguf.path().to_str(), &candle).expect("load"),
        &TEXTS,
    );
    for ((ids, a), (want_ids, b)) in theirs.iter().zip(&own) {
        assert_eq!(ids, want_ids);
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let (at, diff) = largest_difference(a, b);
        assert!(
            diff <= 0.05 * scale,
            "logit {at} differs by {diff} (largest {scale})"
        );
    }
    let typo = CandleOptions {
        quant_kernels: "candel".into(),
        ..CandleOptions::default()
    };
    let err = CandleEngine::load(gguf.path().to_str(), &typo).expect_err("a typo");
    assert!(err.to_string().contains("quant_kernels"), "{err}");
}
