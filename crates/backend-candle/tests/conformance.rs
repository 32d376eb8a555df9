//! The step-engine conformance suite of `guidebench-testkit`, run against
//! the candle engine on the CPU with its default `dtype=auto`: on the
//! `f32` fixtures (it runs `f32`), and on the same fixtures stored in bf16
//! and f16 (it runs their stored dtype, and must give what `f32` gives on
//! the same weights: the exact path); and on GGUF fixtures in F32, Q8_0,
//! a Q4_K_M mix and Q6_K, with the load errors of broken GGUF files; and
//! the loading checks every safetensors engine shares.

use std::path::Path;

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::EngineOptions;
use guidebench_core::open::OpenStep;

fn load(dir: &Path) -> CandleEngine {
    let options = CandleOptions {
        common: EngineOptions {
            threads: Some(2),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    };
    CandleEngine::load(dir.to_str(), &options).expect("the fixture loads")
}

guidebench_testkit::conformance_tests!(load);

mod bf16 {
    use guidebench_testkit::fixtures::FixtureDtype;

    guidebench_testkit::conformance_tests!(super::load, FixtureDtype::Bf16);
}

mod f16 {
    use guidebench_testkit::fixtures::FixtureDtype;

    guidebench_testkit::conformance_tests!(super::load, FixtureDtype::F16);
}

/// The engine as `guidebench run` loads it, its error kept.
fn try_load(dir: &Path) -> guidebench_candle::error::Result<CandleEngine> {
    let options = CandleOptions {
        common: EngineOptions {
            threads: Some(2),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    };
    CandleEngine::load(dir.to_str(), &options)
}

// GGUF files (testkit writes them as llama.cpp lays them out; the folder
// holds model.gguf alone): F32 must give the reference's tokens; the
// quantized types follow the dequantized weights' reference within the
// suite's tolerances for activations rounded to 8-bit blocks.
mod gguf_f32 {
    use guidebench_testkit::gguf::GgufType;

    guidebench_testkit::conformance_tests!(gguf: super::load, GgufType::F32);
}

mod gguf_q8_0 {
    use guidebench_testkit::gguf::GgufType;

    guidebench_testkit::conformance_tests!(gguf: super::load, GgufType::Q8_0);
}

mod gguf_q4_k_m {
    use guidebench_testkit::gguf::GgufType;

    guidebench_testkit::conformance_tests!(gguf: super::load, GgufType::Q4K);
}

mod gguf_q6_k {
    use guidebench_testkit::gguf::GgufType;

    guidebench_testkit::conformance_tests!(gguf: super::load, GgufType::Q6K);
}

mod gguf_errors {
    guidebench_testkit::conformance_tests!(gguf_load_errors: super::try_load);
}

/// The engine from `model=` with the shared options given, its own at
/// their defaults, its error kept.
fn load_with(model: &str, common: EngineOptions) -> guidebench_candle::error::Result<CandleEngine> {
    CandleEngine::load(
        Some(model),
        &CandleOptions {
            common,
            ..CandleOptions::default()
        },
    )
}

// What loading a safetensors folder does: missing and broken files, bad
// shared options, configs that load to the same or another model, bf16
// and f16 against f32.
mod load {
    guidebench_testkit::conformance_tests!(load_checks: super::load_with);
}

// Through the registry: the offline backend against direct calls, and
// load errors with their own labels.
mod registered {
    guidebench_testkit::conformance_tests!(
        registered: "candle",
        "dtype=f32,threads=1",
        "model.safetensors",
        super::load
    );
}

// The tiny LLaVA fixture: images through the CLIP tower and the projector,
// against transformers' tokens.
mod images {
    guidebench_testkit::conformance_tests!(images: super::load);
}

#[test]
fn images_through_the_offline_backend_match_direct_calls() {
    guidebench_testkit::conformance::images_through_the_offline_backend_match_direct_calls(
        "candle",
        "threads=2",
        load,
    );
}

#[test]
fn a_prompt_holding_its_own_placeholders_gives_transformers_tokens() {
    guidebench_testkit::conformance::a_prompt_holding_its_own_placeholders_gives_transformers_tokens(
        "candle",
        "threads=2",
    );
}
