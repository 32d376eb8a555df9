//! # guidebench-ort
//!
//! The `ort` engine: a decoder-only LM exported to ONNX in the layout of
//! Hugging Face Optimum (`model.onnx` or `decoder_model_merged.onnx`, at
//! the top of the model folder or under `onnx/`), run by ONNX Runtime
//! through the [`ort`] crate. It implements core's
//! [`StepEngine`](guidebench_core::generation::StepEngine) (prefill new
//! sequences into a KV cache by slot, one batched decoding step, retire)
//! and core's generation loop does everything else.
//!
//! ```text
//! eval "$(scripts/native ort)"    # once: fetches ONNX Runtime, sets ORT_DYLIB_PATH
//! guidebench run --backend kind=offline,engine=ort,model=path/to/exported,threads=4
//! ```
//!
//! ## The library
//!
//! ONNX Runtime is loaded at run time (`ort`'s `load-dynamic`), never
//! linked or downloaded at build time, so this crate builds anywhere; see
//! [`library`] for where it is looked for (`ort_library=`, then
//! `ORT_DYLIB_PATH`, then the project's `.native/` that `scripts/native
//! ort` fills).
//!
//! ## The graph
//!
//! [`graph::GraphLayout`] reads the number of layers, key/value heads,
//! head size and cache type from the session's own inputs and checks them
//! against `config.json` (read by core's
//! [`ModelFolder`](guidebench_core::model::ModelFolder), with the
//! tokenizer and end-of-sequence ids). A graph without past inputs runs
//! with full recomputation (and a warning); inputs it does not know are an
//! error that lists what the graph has.
//!
//! ## Batching
//!
//! A prefill left-pads the new prompts to the longest, with an
//! `attention_mask` hiding the padding, `position_ids` from 0 for each
//! row, and an empty past; its `present.N.key/value` outputs are kept as
//! they are, as the keys and values of its rows ([`cache::KvCache`]). A
//! decoding step over the same rows in the same order feeds the last
//! run's `present` values back as `past` with no copy (the mask marks each
//! row's real positions, each row gets its own position id); only when
//! the running set has changed (an admission or a retirement) is the past
//! gathered once, each row's real positions copied into a fresh batch
//! right-padded to the longest.
//!
//! ## Options
//!
//! `threads` (intra-op), `inter_threads`, `graph_optimization`
//! (`disable`, `basic`, `extended`, `all`), `execution_provider` (`cpu`;
//! `cuda` when the loaded library has it), `ort_library`, `max_seq_len`,
//! `max_slots`. See [`OPTIONS`].
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]
#![forbid(unsafe_code)]

pub mod cache;
pub mod engine;
pub mod error;
pub mod graph;
pub mod library;

pub use engine::{OPTIONS, OrtEngine, OrtOptions, RunTimes};
pub use error::OrtError;

/// The engine's registered name.
pub const ENGINE_NAME: &str = "ort";

/// The `ort` crate this engine is built against.
pub const ORT_CRATE_VERSION: &str = "2.0.0-rc.15";

guidebench_core::register_engine! {
    name: ENGINE_NAME,
    description: "ONNX Runtime engine: Optimum-layout ONNX decoders, batched with a KV cache by slot",
    options: OPTIONS,
    create: guidebench_core::open::create_step_engine::<OrtEngine>,
}
