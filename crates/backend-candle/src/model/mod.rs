//! One parameterised decoder for Llama, Mistral, Qwen2 and Qwen3, with a
//! KV cache by sequence slot and per-row positions. Two paths compute the
//! same layers: in f32 on the CPU, prefill and decoding steps run on
//! buffers the cache keeps, straight on the weights' memory (no tensor per
//! operation, nothing allocated in a decoding step); other dtypes and
//! devices run candle tensor operations, prefill left-padded and masked.
//!
//! Weights are named as in the checkpoint (`model.layers.0.self_attn.q_proj.weight`, ...).
//!
//! By layer, from the bottom:
//!
//! - `weights`: [`Weights`] and the linear layers built from them;
//! - `layers`: the blocks (RMS norm, rotary tables, attention, MLP, the
//!   decoder layer), each with `load` and a `forward` on tensors;
//! - `buffers` and `cache`: the host passes' scratch and the KV cache by
//!   slot ([`SlotCache`]);
//! - `clock`: the phase clock (feature `phase-clock`);
//! - `decoder`: [`Decoder`], its loading and what it reports;
//! - `host` and `tensor`: its passes on host buffers and on candle
//!   tensors.

mod buffers;
mod cache;
mod clock;
mod decoder;
mod host;
mod layers;
mod tensor;
mod weights;

#[cfg(test)]
mod tests;

pub use cache::SlotCache;
#[cfg(feature = "phase-clock")]
pub use clock::{PhaseReport, PhaseTimes};
pub use decoder::{Decoder, PREFILL_CHUNK_TOKENS, PREFILL_SCORE_BUDGET, PrefillImages};
pub use weights::Weights;
pub(crate) use weights::float_linear;
