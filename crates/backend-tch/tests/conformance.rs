//! The step-engine conformance suite of `guidebench-testkit`, run against
//! the tch engine in `f32` on the CPU: the same stored tokens and logits
//! every engine is checked against.

use std::path::Path;

use guidebench_tch::{TchEngine, TchOptions};

fn load(dir: &Path) -> TchEngine {
    let options = TchOptions {
        threads: Some(2),
        ..TchOptions::default()
    };
    TchEngine::load(dir.to_str(), &options).unwrap_or_else(|e| panic!("the fixture loads: {e}"))
}

guidebench_testkit::conformance_tests!(load);
