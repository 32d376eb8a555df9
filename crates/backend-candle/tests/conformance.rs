//! The step-engine conformance suite of `guidebench-testkit`, run against
//! the candle engine in `f32` on the CPU.

use std::path::Path;

use guidebench_candle::{CandleEngine, CandleOptions};

fn load(dir: &Path) -> CandleEngine {
    let options = CandleOptions {
        threads: Some(2),
        ..CandleOptions::default()
    };
    CandleEngine::load(dir.to_str(), &options).expect("the fixture loads")
}

guidebench_testkit::conformance_tests!(load);
