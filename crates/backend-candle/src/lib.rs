//! # guidebench-candle
//!
//! The `candle` engine (pure Rust, the default engine): one parameterised
//! decoder for Llama, Mistral, Qwen2 and Qwen3 checkpoints in the Hugging
//! Face layout, as a model executor: it implements core's
//! [`StepEngine`](guidebench_core::generation::StepEngine) (prefill new
//! sequences into a KV cache by slot, one batched decoding step, retire)
//! and core's generation loop does everything else (validation, budgets,
//! sampling, end of sequence, stop strings, timings, text).
//!
//! ```text
//! guidebench run --backend kind=offline,engine=candle,model=builtin:tiny,dtype=f32,threads=4
//! ```
//!
//! ## `model=`
//!
//! Resolved and read by [`guidebench_core::model::ModelFolder`]: a local
//! folder, `builtin:NAME` (`builtin:tiny` is the default), or `org/name`
//! already in the local Hugging Face cache. This crate reads only the
//! safetensors weights, into candle tensors.
//!
//! ## Options
//!
//! `dtype` is `auto` (the default), `f32`, `bf16` or `f16`. `auto` reads
//! the checkpoint's stored dtype
//! ([`ModelFolder::stored_dtype`](guidebench_core::model::ModelFolder::stored_dtype):
//! `config.json`'s `dtype`, else its `torch_dtype`, else the floating dtype
//! most bytes of the safetensors weights use, read from each file's
//! header) and runs it when it is bf16 or f16 (on the CPU the weights stay
//! at two bytes, with f32 activations and f32 sums: the bits of the same
//! weights upcast to f32), else f32. An explicit value runs as given. The
//! description carries the choice and why to the console and the reports
//! (`bf16 (auto: config.json torch_dtype)`).
//!
//! `kv_dtype` is `auto` (the compute dtype: f32 on the CPU, exact), `f32`,
//! `bf16` or `f16` (keys and values rounded as they are written, half the
//! bytes for attention to read). `activations=bf16` (bf16 weights on a CPU
//! with AVX-512 BF16) rounds the activations to bf16 too and runs
//! `vdpbf16ps`: faster, not exact. `threads` (default: all CPUs), `device`
//! (`cpu` default; `cuda[:N]` needs the `cuda` feature), `max_seq_len`
//! (default: the model's `max_position_embeddings`), `max_slots`
//! (sequences held at once, default 256).
//!
//! ## Sentence-embedding encoders
//!
//! A `model=` folder whose `config.json` names a BERT or XLM-RoBERTa
//! encoder (`model_type` `bert` / `xlm-roberta`, or `architectures`
//! `BertModel` / `XLMRobertaModel`) with sentence-transformers' files
//! runs as an [`encoder::EncoderEngine`] instead: each micro-batch of the
//! offline backend embedded in one forward pass, answers with no
//! generated tokens (reported as pooled). It takes `dtype` (`auto` or
//! `f32`), `threads` and `device=cpu`; the decoder's other options are
//! refused by name, and so is `scheduling=continuous`. See
//! [`encoder`].
//!
//! ## The forward pass
//!
//! A prefill left-pads the new prompts of a group to the longest; an
//! attention mask hides the padding and each row gets its own positions,
//! so a sequence's logits do not depend on what it is batched with. Its
//! keys and values go to the sequence's own slot ([`model::SlotCache`]),
//! with room reserved for its whole budget; a decoding step writes one
//! position per slot and, on the CPU, attends over each slot in
//! place. Retiring a slot frees it at once, so a new sequence can join
//! while others decode.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod activation;
mod aligned;
mod arena;
mod attention;
mod cpu;
pub mod encoder;
pub mod engine;
pub mod error;
pub mod gguf;
pub mod loader;
pub mod model;
mod packed;
mod proj;
pub mod quant;
pub mod vision;

pub use engine::{CandleEngine, CandleOptions, OPTIONS};
pub use error::CandleError;
pub use proj::kernel_path;

/// The packed projection kernel on its own, as the engine runs it, for
/// benches that time a step's products beside another library's
/// (`bench/products`): pack an `(n, k)` weight once, then
/// [`packed_matmul`](kernels::packed_matmul) `(m, k)` inputs by it on
/// rayon's threads.
pub mod kernels {
    pub use crate::arena::{ArenaBuf, WeightArena};
    pub use crate::cpu::{PANEL, PackedDtype, PackedElem, has_bf16_dot};
    pub use crate::packed::{PackedWeight, packed_matmul};
}

/// The engine's registered name.
pub const ENGINE_NAME: &str = "candle";

/// The candle version this crate is built against.
pub const CANDLE_VERSION: &str = "0.11";

guidebench_core::register_engine! {
    name: ENGINE_NAME,
    description: "pure-Rust engine on candle: Llama/Mistral/Qwen2/Qwen3 safetensors, batched with a KV cache; BERT/XLM-RoBERTa sentence-transformers folders as embedding encoders",
    options: OPTIONS,
    inputs: &["image"],
    create: encoder::create,
}
