//! # guidebench-builtins
//!
//! What the `guidebench` binary ships besides its engines:
//!
//! - [`MockEngine`], registered as engine `mock`: deterministic output
//!   tokens derived from the prompt, configurable load, prefill and
//!   per-token time, and fault injection. Usable from the command line
//!   (`--backend kind=offline,engine=mock`) to dry-run a pipeline.
//! - [`MockProbe`]: what tests use to watch and steer a mock engine
//!   (creation count, batch sizes, overlap detection, gates that hold a
//!   load or a generate until the test releases it).
//! - [`ByteTokenizer`]: a tokenizer with one token per byte, the mock
//!   engine's.
//! - `builtin:tiny`, the default model, and [`fixtures`], the generator
//!   it comes from: deterministic model folders (random weights from a
//!   fixed seed, a byte-level BPE tokenizer trained here, configs in the
//!   transformers 4 and 5 layouts), written with the `safetensors` crate
//!   so no engine is involved. The test fixtures every engine shares are
//!   made by the same generator.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod error;
pub mod fixtures;
mod mock;
pub mod probe;
pub mod tokenizer;

pub use error::{Error, Result};
pub use mock::{InjectedFailure, MockEngine, MockOptions, OPTIONS as MOCK_OPTIONS};
pub use probe::{Gate, MockProbe};
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
