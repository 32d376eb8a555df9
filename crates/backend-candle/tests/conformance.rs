//! The step-engine conformance suite of `guidebench-testkit`, run against
//! the candle engine on the CPU with its default `dtype=auto`: on the
//! `f32` fixtures (it runs `f32`), and on the same fixtures stored in bf16
//! and f16 (it runs their stored dtype, and must give what `f32` gives on
//! the same weights: the exact path).

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

mod bf16 {
    use guidebench_testkit::fixtures::FixtureDtype;

    guidebench_testkit::conformance_tests!(super::load, FixtureDtype::Bf16);
}

mod f16 {
    use guidebench_testkit::fixtures::FixtureDtype;

    guidebench_testkit::conformance_tests!(super::load, FixtureDtype::F16);
}
