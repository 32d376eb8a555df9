//! # guidebench-testkit
//!
//! Mock engines and fixtures for testing guidebench and third-party
//! backends without a model (a dev-dependency only):
//!
//! - [`MockEngine`], registered as engine `mock`, and [`MockProbe`], what
//!   tests use to watch and steer it (both from `guidebench-builtins`,
//!   which the binary ships).
//! - [`MockStepEngine`]: a step engine (core's `StepEngine`) with
//!   deterministic logits that checks every rule of the step contract,
//!   for tests of the generation loop and of schedulers.
//! - [`ByteTokenizer`]: a tokenizer with one token per byte.
//! - [`backend::MockBackend`]: a scripted `Backend` for the runner's
//!   tests (per request: time to first token, time between tokens,
//!   tokens, a failure or a hang, a gate), on tokio's clock.
//! - [`hub::StandInHub`]: a stand-in Hugging Face Hub on 127.0.0.1 that
//!   serves local folders as model and dataset repositories with the
//!   Hub's file API (info, tree, `resolve`, LFS files redirected to a
//!   second "CDN" origin, gated repositories, the Hub's error codes), for
//!   testing Hub clients without the network.
//!
//! And the shared test models every engine is checked against:
//!
//! - [`fixtures`]: the generator of deterministic model folders (random
//!   weights from a fixed seed, a byte-level BPE tokenizer trained here,
//!   configs in the transformers 4 and 5 layouts), written with the
//!   `safetensors` crate so no engine is involved; `guidebench-builtins`
//!   holds it, as it makes the built-in default model (`builtin:tiny`).
//! - [`gguf`]: the same fixtures quantized (`F32`, `Q8_0`, a `Q4_K_M`
//!   mix, `Q6_K`) into one `model.gguf` as llama.cpp lays it out, and
//!   their reference folder (the dequantized weights in `f32`).
//! - [`reference`](mod@reference): [`ReferenceModel`](reference::ReferenceModel), a plain
//!   forward pass in loops that serves as the ground truth.
//! - [`expected`]: stored prompt tokens, greedy continuations and
//!   first-step logits of the shared fixtures, for engines to compare
//!   against without running the reference.
//! - [`conformance`]: the suite every step engine runs against itself
//!   (greedy tokens and logits on the shared fixtures, batching, stopping
//!   rules, seeded sampling, per-request errors, timings), as one call or
//!   one `#[test]` per check with [`conformance_tests!`].
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod backend;
pub mod bert;
pub mod conformance;
mod error;
pub mod expected;
pub mod gguf;
pub mod hub;
pub mod llava;
pub mod reference;
pub mod smolvlm;
mod step;

pub use error::{Error, Result};
pub use guidebench_builtins::fixtures;
pub use guidebench_builtins::{
    ByteTokenizer, Gate, InjectedFailure, MOCK_OPTIONS, MockEngine, MockOptions, MockProbe,
};
// The mock step engine's gates and tokenizer are the mock engine's.
use guidebench_builtins::{probe, tokenizer};
pub use step::{MockStepEngine, StepCall, StepLog};
