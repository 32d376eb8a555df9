//! The step-engine conformance suite of `guidebench-testkit`, run against
//! the tch engine in `f32` on the CPU: the same stored tokens and logits
//! every engine is checked against, the loading checks every
//! safetensors engine shares, and the checks through the registry.

use std::path::Path;

use guidebench_core::engine::EngineOptions;
use guidebench_core::open::OpenStep;
use guidebench_tch::{TchEngine, TchOptions};

fn load(dir: &Path) -> TchEngine {
    let options = TchOptions {
        common: EngineOptions {
            threads: Some(2),
            ..EngineOptions::default()
        },
        ..TchOptions::default()
    };
    TchEngine::load(dir.to_str(), &options).unwrap_or_else(|e| panic!("the fixture loads: {e}"))
}

guidebench_testkit::conformance_tests!(load);

/// The engine from `model=` with the shared options given, its own at
/// their defaults, its error kept.
fn load_with(model: &str, common: EngineOptions) -> guidebench_tch::error::Result<TchEngine> {
    TchEngine::load(
        Some(model),
        &TchOptions {
            common,
            ..TchOptions::default()
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
        registered: "tch",
        "dtype=f32,threads=1",
        "model.safetensors",
        super::load
    );
}
