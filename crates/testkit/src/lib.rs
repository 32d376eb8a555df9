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
//! - [`ByteTokenizer`]: a tokenizer with one token per byte.
#![deny(missing_docs)]

mod mock;
mod probe;
mod tokenizer;

pub use mock::{InjectedFailure, MockEngine, MockOptions, OPTIONS as MOCK_OPTIONS};
pub use probe::{Gate, MockProbe};
pub use tokenizer::ByteTokenizer;
