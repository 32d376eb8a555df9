//! # guidebench-candle
//!
//! The `candle` engine (pure Rust, the default engine): one parameterised
//! decoder for Llama, Mistral, Qwen2 and Qwen3 checkpoints in the Hugging
//! Face layout, with real batched generation (one forward pass per
//! decoding step for the whole batch, a KV cache, left padding with
//! per-row positions), and the generated models the project tests with
//! ([`fixtures`]), including the built-in default model `builtin:tiny`.
//!
//! ```text
//! guidebench run --backend kind=offline,engine=candle,model=builtin:tiny,dtype=f32,threads=4
//! ```
//!
//! ## `model=`
//!
//! - a local folder: `config.json`, `model.safetensors` (or shards listed
//!   in `model.safetensors.index.json`), `tokenizer.json`, and optionally
//!   `tokenizer_config.json` (special tokens, chat template) and
//!   `generation_config.json` (end-of-sequence ids, one or a list);
//! - `builtin:tiny` (also the default): a ~25M-parameter Llama with random
//!   weights from a fixed seed, generated once into
//!   `$GUIDEBENCH_CACHE` / `$XDG_CACHE_HOME/guidebench` /
//!   `~/.cache/guidebench`, under `builtin/tiny-v1/`;
//! - `org/name`: a model already in the local Hugging Face cache
//!   (`$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`); nothing
//!   is downloaded.
//!
//! ## Options
//!
//! `dtype` (`f32` default, `bf16`, `f16`), `threads` (default: all CPUs),
//! `device` (`cpu` default; `cuda[:N]` needs the `cuda` feature),
//! `max_seq_len` (default: the model's `max_position_embeddings`).
//!
//! ## Generation
//!
//! Prompts of a batch are left-padded to the longest; an attention mask
//! hides the padding and each row gets its own positions, so a request's
//! output does not depend on what it is batched with. Every row samples
//! with its own [`guidebench_core::sampler::Sampler`]; a row stops at
//! `max_tokens`, at any end-of-sequence id (unless `ignore_eos`), at a stop
//! string, or at `max_seq_len`. Finished rows are dropped from the batch
//! (and its KV cache) once a quarter of the rows have finished.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod config;
pub mod engine;
pub mod error;
pub mod fixtures;
pub mod loader;
mod matvec;
pub mod model;

pub use config::{Architecture, ModelConfig, RopeScaling};
pub use engine::{CandleEngine, CandleOptions, OPTIONS};
pub use error::CandleError;
pub use fixtures::{ConfigLayout, FixtureSpec, write_llama_fixture};

/// The engine's registered name.
pub const ENGINE_NAME: &str = "candle";

/// The candle version this crate is built against.
pub const CANDLE_VERSION: &str = "0.11";

guidebench_core::register_engine! {
    name: ENGINE_NAME,
    description: "pure-Rust engine on candle: Llama/Mistral/Qwen2/Qwen3 safetensors, batched with a KV cache",
    options: OPTIONS,
    create: CandleEngine::create,
}
