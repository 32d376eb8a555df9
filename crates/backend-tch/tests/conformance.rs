//! The step-engine conformance suite of `guidebench-testkit`, run against
//! the tch engine in `f32` on the CPU: the same stored tokens and logits
//! every engine is checked against.

use std::path::Path;

use guidebench_core::engine::EngineOptions;
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
