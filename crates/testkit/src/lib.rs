//! # guidebench-testkit
//!
//! Mock engines and fixtures for testing guidebench and third-party
//! backends without a model:
//!
//! - [`MockEngine`], registered as engine `mock`: deterministic output
//!   tokens derived from the prompt, configurable load, prefill and
//!   per-token time, and fault injection. Usable from the command line
//!   (`--backend kind=offline,engine=mock`) to dry-run a pipeline.
//! - [`MockProbe`]: what tests use to watch and steer a mock engine
//!   (creation count, batch sizes, overlap detection, gates that hold a
//!   load or a generate until the test releases it).
//! - [`MockStepEngine`]: a step engine (core's `StepEngine`) with
//!   deterministic logits that checks every rule of the step contract,
//!   for tests of the generation loop and of schedulers.
//! - [`ByteTokenizer`]: a tokenizer with one token per byte.
//!
//! And the shared test models every engine is checked against:
//!
//! - [`fixtures`]: the generator of deterministic model folders (random
//!   weights from a fixed seed, a byte-level BPE tokenizer trained here,
//!   configs in the transformers 4 and 5 layouts), written with the
//!   `safetensors` crate so no engine is involved; also the built-in
//!   default model (`builtin:tiny`).
//! - [`gguf`]: the same fixtures quantized (`F32`, `Q8_0`, a `Q4_K_M`
//!   mix, `Q6_K`) into one `model.gguf` as llama.cpp lays it out, and
//!   their reference folder (the dequantized weights in `f32`).
//! - [`reference`](mod@reference): [`ReferenceModel`](reference::ReferenceModel), a plain
//!   forward pass in loops that serves as the ground truth.
//! - [`expected`]: stored prompt tokens, greedy continuations and
//!   first-step logits of the shared fixtures, for engines to compare
//!   against without running the reference.
//! - [`machine`]: what the engine benches measure of the machine (CPU
//!   name, load, matrix-multiplication peak, memory bandwidth).
//! - [`roofline`]: the lower bound of a generation the engine benches
//!   divide by (the model's FLOPs and bytes, attention included, over
//!   the measured peak and bandwidth).
//! - [`conformance`]: the suite every step engine runs against itself
//!   (greedy tokens and logits on the shared fixtures, batching, stopping
//!   rules, seeded sampling, per-request errors, timings), as one call or
//!   one `#[test]` per check with [`conformance_tests!`].
#![deny(missing_docs)]

pub mod backend;
pub mod conformance;
mod error;
pub mod expected;
pub mod fixtures;
pub mod gguf;
pub mod machine;
mod mock;
mod probe;
pub mod reference;
pub mod roofline;
mod step;
mod tokenizer;

pub use error::{Error, Result};
pub use mock::{InjectedFailure, MockEngine, MockOptions, OPTIONS as MOCK_OPTIONS};
pub use probe::{Gate, MockProbe};
pub use step::{MockStepEngine, StepCall, StepLog};
pub use tokenizer::ByteTokenizer;

guidebench_core::register_builtin_model! {
    name: "tiny",
    description: "a 26.7M-parameter Llama with random weights from a fixed seed and a tokenizer trained here; generated on first use",
    create: builtin_tiny,
}

/// Generates (once) and finds `builtin:tiny` under the cache root.
fn builtin_tiny(root: &std::path::Path) -> guidebench_core::Result<std::path::PathBuf> {
    fixtures::builtin_model_dir_in(root, "tiny").map_err(|e| guidebench_core::Error::EngineLoad {
        engine: "builtin:tiny".into(),
        reason: e.to_string(),
    })
}
