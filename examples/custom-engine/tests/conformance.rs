//! The step-engine conformance suite of `guidebench-testkit`, run against
//! this crate's engine: the few lines any engine crate needs.

use std::path::Path;

use guidebench_example_custom_engine::{ReferenceEngine, ReferenceOptions};

fn load(dir: &Path) -> ReferenceEngine {
    let model = dir.to_str().expect("a UTF-8 path");
    ReferenceEngine::load(model, &ReferenceOptions::default()).expect("the fixture loads")
}

guidebench_testkit::conformance_tests!(load);
