//! # guidebench-tch
//!
//! The `tch` engine: one parameterised decoder for Llama, Mistral, Qwen2
//! and Qwen3 checkpoints in the Hugging Face layout, written with libtorch
//! tensor operations through the [`tch`] crate, as a model executor: it
//! implements core's [`StepEngine`](guidebench_core::generation::StepEngine)
//! (prefill new sequences into a KV cache by slot, one batched decoding
//! step, retire) and core's generation loop does everything else.
//!
//! ```text
//! eval "$(scripts/native tch)"    # once: builds .native/libtorch, sets LIBTORCH
//! cargo run -p guidebench --features tch -- run \
//!     --backend kind=offline,engine=tch,model=builtin:tiny,threads=2 ...
//! ```
//!
//! ## The library
//!
//! `tch` 0.26 binds libtorch 2.13 exactly. It is linked at build time:
//! `LIBTORCH` names a libtorch folder (`scripts/native tch` makes one from
//! the PyPI `torch` wheel), or `LIBTORCH_USE_PYTORCH=1` takes the PyTorch
//! of `python3`. This crate's build script sets that folder as an rpath of
//! its tests and examples and hands it to the `guidebench` binary's build
//! script, so nothing needs `LD_LIBRARY_PATH` (see `docs/tch-engine.md`).
//!
//! ## `model=`
//!
//! Resolved and read by [`guidebench_core::model::ModelFolder`] (a local
//! folder, `builtin:NAME`, or `org/name` in the local Hugging Face cache),
//! the same decoder description every engine reads. This crate reads the
//! safetensors weights (one file or shards) by their Hugging Face names
//! ([`model::Weights`]).
//!
//! ## The forward pass
//!
//! Under `no_grad`. A prefill right-pads the new prompts to the longest;
//! an additive mask (0 or -inf) is causal and hides the padding, each row's positions
//! start at 0, and the logits come from each row's last real position.
//! Keys and values go to the sequences' rows of the [`cache::KvCache`]; a
//! decoding step writes each row's new position at its own length and
//! attends over the cached positions with a mask (libtorch's
//! `scaled_dot_product_attention`, grouped key/value heads).
//!
//! ## Options
//!
//! `dtype` (`f32` default, `bf16`, `f16`), `threads` (libtorch intra-op
//! threads; default: libtorch's choice), `device` (`cpu` default;
//! `cuda[:N]` when libtorch has CUDA), `max_seq_len` (default: the
//! model's `max_position_embeddings`), `max_slots` (default 256). See
//! [`OPTIONS`].
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]
#![forbid(unsafe_code)]

pub mod cache;
pub mod engine;
pub mod error;
pub mod model;

pub use engine::{OPTIONS, TchEngine, TchOptions};
pub use error::TchError;

/// The engine's registered name.
pub const ENGINE_NAME: &str = "tch";

/// The `tch` crate this engine is built against.
pub const TCH_VERSION: &str = "0.26.0";

/// The libtorch version `tch` 0.26 binds.
pub const LIBTORCH_VERSION: &str = "2.13.0";

guidebench_core::register_engine! {
    name: ENGINE_NAME,
    description: "libtorch engine through tch: Llama/Mistral/Qwen2/Qwen3 safetensors, batched with a KV cache by slot",
    options: OPTIONS,
    create: guidebench_core::open::create_step_engine::<TchEngine>,
}

/// A dimension as libtorch's `i64`; model dimensions are far below
/// `i64::MAX`.
pub(crate) fn dim(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
