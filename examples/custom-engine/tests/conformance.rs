//! The step-engine conformance suite of `guidebench-testkit`, run against
//! this crate's engine: the few lines any engine crate needs.

use std::path::Path;

use guidebench_core::open::OpenStep;
use guidebench_example_custom_engine::{ReferenceEngine, ReferenceOptions};

fn load(dir: &Path) -> ReferenceEngine {
    let model = dir.to_str().expect("a UTF-8 path");
    ReferenceEngine::load(Some(model), &ReferenceOptions::default()).expect("the fixture loads")
}

guidebench_testkit::conformance_tests!(load);

// Through the registry: the offline backend against direct calls, and
// load errors with their own labels.
mod registered {
    guidebench_testkit::conformance_tests!(
        registered: "reference",
        "max_slots=8",
        "model.safetensors",
        super::load
    );
}
