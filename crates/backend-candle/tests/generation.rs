//! Batched generation, stopping rules, errors, and the engine behind the
//! offline backend.

use std::path::Path;

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::{Engine, EngineOptions, EngineOutput, EngineRequest};
use guidebench_core::generation::{StepEngine, StepRunner};
use guidebench_core::open::OpenStep;
use guidebench_core::sampling::Sampling;
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

fn fixture(spec: &FixtureSpec) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(dir.path(), spec).expect("fixture");
    dir
}

fn load(dir: &Path) -> StepRunner<CandleEngine> {
    CandleEngine::runner(dir.to_str(), &CandleOptions::default()).expect("load")
}

/// Every request's output; panics on any error.
fn run(engine: &mut StepRunner<CandleEngine>, batch: &[EngineRequest]) -> Vec<EngineOutput> {
    engine
        .generate(batch)
        .expect("batch")
        .into_iter()
        .map(|r| r.expect("request"))
        .collect()
}

fn request(id: u64, prompt: &str, sampling: Sampling) -> EngineRequest {
    EngineRequest {
        prepared_images: Vec::new(),
        id,
        prompt: prompt.to_owned(),
        add_special_tokens: true,
        images: Vec::new(),
        audio: Vec::new(),
        sampling,
    }
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling::fixed_length(max_tokens).expect("sampling")
}

const PROMPTS: [&str; 5] = [
    "bree",
    "stai glouck bree trandoo pleasing gaist vorn, kail stou 512 bo",
    "hello there",
    "",
    "gla mou ten sti fai ba ro ke",
];

// Greedy tokens, logits, batching, eos, stop strings, seeds and bf16/f16
// against f32 are the conformance suite's (tests/conformance.rs); these
// are candle's own.

#[test]
fn a_two_byte_kv_cache_is_said_and_generates_and_bf16_activations_need_bf16_weights() {
    let dir = fixture(&FixtureSpec::tiny());
    for kv in ["bf16", "f16"] {
        let options = CandleOptions {
            common: EngineOptions {
                threads: Some(1),
                ..EngineOptions::default()
            },
            kv_dtype: kv.into(),
            ..CandleOptions::default()
        };
        let mut engine = CandleEngine::runner(dir.path().to_str(), &options).expect("load");
        let out = run(&mut engine, &[request(0, PROMPTS[1], greedy(4))]);
        assert_eq!(out[0].token_ids.len(), 4);
        let said = engine.describe().dtype.expect("a dtype");
        assert!(said.ends_with(&format!(", KV cache {kv}")), "{said}");
    }
    // The default is exact: nothing more to say.
    let engine = CandleEngine::load(dir.path().to_str(), &CandleOptions::default()).expect("load");
    let said = engine.describe().dtype.expect("a dtype");
    assert!(!said.contains("KV cache"), "{said}");
    // bf16 activations on f32 weights: refused, naming the option.
    let err = CandleEngine::load(
        dir.path().to_str(),
        &CandleOptions {
            activations: "bf16".into(),
            ..CandleOptions::default()
        },
    )
    .expect_err("f32 weights")
    .to_string();
    assert!(
        err.contains("activations") && err.contains("bf16 weights"),
        "{err}"
    );
    // With bf16 weights: where the CPU has AVX-512 BF16 it runs and says
    // so; elsewhere the error says why.
    let options = CandleOptions {
        common: EngineOptions {
            dtype: Some("bf16".into()),
            ..EngineOptions::default()
        },
        activations: "bf16".into(),
        ..CandleOptions::default()
    };
    match CandleEngine::load(dir.path().to_str(), &options) {
        Ok(engine) => {
            assert!(guidebench_candle::kernels::has_bf16_dot());
            let said = engine.describe().dtype.expect("a dtype");
            assert!(said.ends_with(", bf16 activations"), "{said}");
        }
        Err(err) => {
            assert!(!guidebench_candle::kernels::has_bf16_dot());
            assert!(err.to_string().contains("AVX-512 BF16"), "{err}");
        }
    }
}

#[test]
fn image_inputs_are_rejected_clearly() {
    let dir = fixture(&FixtureSpec::tiny());
    let mut engine = load(dir.path());
    let mut req = request(0, "look <image>", greedy(2));
    req.images
        .push(guidebench_core::request::MediaSource::Path("x.png".into()));
    let err = engine
        .generate(&[req])
        .expect("batch")
        .remove(0)
        .expect_err("images");
    assert!(err.to_string().contains("image"), "{err}");
}

// --- errors ------------------------------------------------------------

// The load errors every safetensors engine shares (a missing folder or
// file, bad JSON, bad shared options, ...) are the conformance suite's
// load_checks (tests/conformance.rs); these are candle's own.

#[test]
fn cuda_without_the_cuda_feature_says_how_to_get_it() {
    let dir = fixture(&FixtureSpec::tiny());
    let options = CandleOptions {
        common: EngineOptions {
            device: Some("cuda".into()),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    };
    let result = CandleEngine::load(dir.path().to_str(), &options);
    if cfg!(not(feature = "cuda")) {
        let err = result.expect_err("no CUDA in this build").to_string();
        assert!(err.contains("`cuda` feature"), "{err}");
    }
}

#[test]
fn the_registry_lists_candles_options_in_its_order() {
    let registration = guidebench_core::registry::engines()
        .expect("registry")
        .get("candle")
        .expect("candle is registered");
    let options: Vec<&str> = registration.options.iter().map(|o| o.name).collect();
    assert_eq!(
        options,
        [
            "dtype",
            "kv_dtype",
            "activations",
            "quant_kernels",
            "mmproj",
            "threads",
            "device",
            "max_seq_len",
            "max_slots"
        ]
    );
}

// Load errors through the registry and the engine behind the offline
// backend are the conformance suite's (tests/conformance.rs, `registered`).
