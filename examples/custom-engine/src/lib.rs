//! # A third-party step engine for guidebench
//!
//! This crate lives outside guidebench's own crates and adds an engine,
//! `reference`: a Llama-family decoder (Llama, Mistral, Qwen2, Qwen3 with
//! `f32` safetensors weights) written in plain Rust loops, with its own KV
//! cache by slot. It is a teaching executor, not a fast one: every line is
//! the model's math, and nothing hides behind a tensor library.
//!
//! What makes it a guidebench engine:
//!
//! 1. implement [`StepEngine`]: [`limits`](StepEngine::limits),
//!    [`prefill`](StepEngine::prefill) new sequences into free slots,
//!    [`decode`](StepEngine::decode) one token for running sequences,
//!    [`retire`](StepEngine::retire) a slot, plus a description.
//!    Everything about requests (tokenizing, sampling, stopping, budgets,
//!    timings, per-request errors) is core's generation loop, not the
//!    engine's, and the tokenizer and end-of-sequence ids are the model
//!    folder's, read by core ([`ModelText`]);
//! 2. implement [`OpenStep`]: its name, its options type, its error type
//!    (core's [`LoadError`] here) and [`open`](OpenStep::open), which reads
//!    the model folder and returns the engine with the folder's
//!    [`ModelText`]; core does the rest (options parsed, `model=` or its
//!    default, load errors mapped, the engine put inside the generation
//!    loop that turns it into the whole-batch engine the offline backend
//!    drives);
//! 3. register it with [`guidebench_core::register_engine!`], its `create`
//!    being [`create_step_engine::<ReferenceEngine>`](create_step_engine);
//! 4. have a binary name this crate once (`use guidebench_example_custom_engine as _;`)
//!    so the linker keeps the registration; see `src/main.rs`;
//! 5. run `guidebench-testkit`'s conformance suite against it: see
//!    `tests/conformance.rs`.
//!
//! ## The executor
//!
//! A slot holds one sequence's KV cache: for every layer, the keys and
//! values (after RoPE) of each position so far. Prefill runs a sequence's
//! prompt through the model position by position, each position appending
//! its keys and values to the slot's cache and attending to everything
//! before it; only the last position's logits are computed. A decoding
//! step does the same for one new token of each running row, reading that
//! row's own cache. Rows are independent, so a batch gives each sequence
//! exactly what it gives alone.
//!
//! Sums run in `f64`, as in `guidebench_testkit::reference`, so the
//! logits agree with the stored reference to well within the suite's
//! tolerance.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use guidebench_core::engine::{EngineDescription, LoadError};
use guidebench_core::generation::{
    Decode, Logits, ModelText, Prefill, PrefillDone, StepEngine, StepLimits,
};
use guidebench_core::model::{DecoderConfig, ModelFolder};
use guidebench_core::open::{OpenStep, create_step_engine};
use guidebench_core::options::{OptionSpec, OptionType};
use guidebench_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// The engine's name in the registry (`engine=reference`).
pub const ENGINE_NAME: &str = "reference";

/// The `reference` engine's options.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "max_slots",
        OptionType::Int,
        "the most sequences in the KV cache at once",
    )
    .default_from::<ReferenceOptions>(),
    OptionSpec::optional(
        "max_seq_len",
        OptionType::Int,
        "longest prompt + output (default: the model's max_position_embeddings)",
    ),
];

guidebench_core::register_engine! {
    name: ENGINE_NAME,
    description: "example third-party step engine: a Llama in plain Rust loops with a KV cache by slot",
    options: OPTIONS,
    create: create_step_engine::<ReferenceEngine>,
}

/// Typed options (`engine=reference,max_slots=4,...`); an unset key takes
/// the value of `ReferenceOptions::default()`, which help prints.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReferenceOptions {
    /// The most sequences held at once; default 8.
    pub max_slots: usize,
    /// Longest sequence; default: the model's `max_position_embeddings`.
    pub max_seq_len: Option<usize>,
}

impl Default for ReferenceOptions {
    fn default() -> Self {
        ReferenceOptions {
            max_slots: 8,
            max_seq_len: None,
        }
    }
}

/// The step engine: see the crate docs.
pub struct ReferenceEngine {
    model: Model,
    /// One entry per slot: the KV cache of the sequence it holds.
    slots: Vec<Option<SlotCache>>,
    max_seq_len: usize,
    name: String,
}

impl std::fmt::Debug for ReferenceEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceEngine")
            .field("model", &self.name)
            .field("slots", &self.slots.len())
            .field("max_seq_len", &self.max_seq_len)
            .finish_non_exhaustive()
    }
}

impl OpenStep for ReferenceEngine {
    const NAME: &'static str = ENGINE_NAME;
    const DEFAULT_MODEL: Option<&'static str> = Some("builtin:tiny");
    type Options = ReferenceOptions;
    // No failure of its own: core's shared load errors are enough. An
    // engine with its own wraps them (`Load(#[from] LoadError)`) and
    // implements `EngineError` with `guidebench_core::engine_error!`.
    type Error = LoadError;

    /// Opens `model` (a folder, `builtin:NAME`, or a hub id in the local
    /// Hugging Face cache). Core reads the config, tokenizer and generation
    /// config the same way for every engine, once; the weights are ours to
    /// read.
    fn open(
        model: &str,
        options: &ReferenceOptions,
    ) -> std::result::Result<(Self, ModelText), LoadError> {
        let folder = ModelFolder::open(model)?;
        let config = folder.config().clone();
        let invalid = |reason: String| LoadError::InvalidWeights {
            path: folder.dir().to_owned(),
            reason,
        };
        let mut tensors = read_f32_tensors(&folder.weight_files()?).map_err(invalid)?;
        let model_weights = Model::from_tensors(&config, &mut tensors).map_err(invalid)?;
        let max_slots = options.max_slots.max(1);
        let engine = ReferenceEngine {
            model: model_weights,
            slots: (0..max_slots).map(|_| None).collect(),
            max_seq_len: options
                .max_seq_len
                .unwrap_or(config.max_position_embeddings),
            name: model.to_owned(),
        };
        Ok((engine, ModelText::from_folder(&folder)))
    }
}

impl ReferenceEngine {
    /// Sequences held now.
    pub fn occupied_slots(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    fn slot_error(slot: usize, what: &str) -> Error {
        Error::Engine(format!("slot {slot}: {what}").into())
    }
}

impl StepEngine for ReferenceEngine {
    fn limits(&self) -> StepLimits {
        StepLimits {
            max_slots: self.slots.len(),
            max_seq_len: self.max_seq_len,
            vocab_size: self.model.vocab,
        }
    }

    fn prefill(&mut self, seqs: &[Prefill<'_>], logits: &mut Logits) -> Result<PrefillDone> {
        let rows = logits.rows_mut(seqs.len());
        let vocab = self.model.vocab;
        for (seq, row) in seqs.iter().zip(rows.chunks_exact_mut(vocab)) {
            // The loop only names free slots; an engine still says so
            // rather than overwrite a sequence.
            let entry = self
                .slots
                .get_mut(seq.slot)
                .ok_or_else(|| Self::slot_error(seq.slot, "no such slot"))?;
            if entry.is_some() {
                return Err(Self::slot_error(seq.slot, "prefilled while occupied"));
            }
            let mut cache = SlotCache::new(&self.model, seq.max_len);
            let (last, rest) = seq
                .tokens
                .split_last()
                .ok_or_else(|| Self::slot_error(seq.slot, "empty prompt"))?;
            // Every prompt position fills the cache; only the last one's
            // logits are needed.
            for &token in rest {
                self.model.forward(token, &mut cache, None)?;
            }
            self.model.forward(*last, &mut cache, Some(row))?;
            *entry = Some(cache);
        }
        Ok(PrefillDone::default())
    }

    fn decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()> {
        let rows = logits.rows_mut(seqs.len());
        let vocab = self.model.vocab;
        for (seq, row) in seqs.iter().zip(rows.chunks_exact_mut(vocab)) {
            let cache = self
                .slots
                .get_mut(seq.slot)
                .and_then(Option::as_mut)
                .ok_or_else(|| Self::slot_error(seq.slot, "decoded while empty"))?;
            self.model.forward(seq.token, cache, Some(row))?;
        }
        Ok(())
    }

    fn retire(&mut self, slot: usize) {
        if let Some(entry) = self.slots.get_mut(slot) {
            *entry = None;
        }
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription {
            engine: ENGINE_NAME.into(),
            library: "guidebench-example-custom-engine".into(),
            model: self.name.clone(),
            device: "cpu".into(),
            threads: Some(1),
            dtype: None,
        }
    }
}

// ---------------------------------------------------------------------------
// The model

/// Tensors by name: shape and `f32` values.
type Tensors = HashMap<String, (Vec<usize>, Vec<f32>)>;

/// One sequence's KV cache: per layer, the keys and values of every
/// position so far, `kv_heads * head_dim` values per position.
struct SlotCache {
    layers: Vec<LayerCache>,
    /// Positions held.
    len: usize,
    /// The most positions this sequence may hold (its `max_len`).
    capacity: usize,
}

struct LayerCache {
    keys: Vec<f32>,
    values: Vec<f32>,
}

impl SlotCache {
    /// An empty cache with room for `capacity` positions, reserved up
    /// front.
    fn new(model: &Model, capacity: usize) -> Self {
        let width = model.kv_heads * model.head_dim;
        SlotCache {
            layers: model
                .layers
                .iter()
                .map(|_| LayerCache {
                    keys: Vec::with_capacity(capacity * width),
                    values: Vec::with_capacity(capacity * width),
                })
                .collect(),
            len: 0,
            capacity,
        }
    }
}

/// A weight matrix `[rows, cols]`, row-major, with an optional bias.
struct Linear {
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
}

impl Linear {
    /// `W x (+ b)`.
    fn apply(&self, x: &[f32]) -> Vec<f32> {
        let mut y: Vec<f32> = self
            .weight
            .chunks_exact(x.len())
            .map(|row| dot(row, x) as f32)
            .collect();
        if let Some(bias) = &self.bias {
            for (y, b) in y.iter_mut().zip(bias) {
                *y += b;
            }
        }
        y
    }
}

struct Layer {
    input_norm: Vec<f32>,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    /// Per-head RMS norms of queries and keys (Qwen3).
    qk_norm: Option<(Vec<f32>, Vec<f32>)>,
    post_norm: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

struct Model {
    vocab: usize,
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f64,
    /// RoPE inverse frequencies, one per pair of a head's dimensions
    /// (core applies the config's RoPE scaling).
    inv_freqs: Vec<f64>,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    /// `None`: tied to the embeddings.
    lm_head: Option<Vec<f32>>,
}

impl Model {
    fn from_tensors(c: &DecoderConfig, tensors: &mut Tensors) -> std::result::Result<Self, String> {
        let (h, hd, inter) = (c.hidden_size, c.head_dim, c.intermediate_size);
        let (q_rows, kv_rows) = (c.num_attention_heads * hd, c.num_key_value_heads * hd);
        let mut take = |name: &str, shape: &[usize]| -> std::result::Result<Vec<f32>, String> {
            let (got, data) = tensors
                .remove(name)
                .ok_or_else(|| format!("missing weight `{name}`"))?;
            if got != shape {
                return Err(format!(
                    "weight `{name}` has shape {got:?}, expected {shape:?}"
                ));
            }
            Ok(data)
        };
        let embed = take("model.embed_tokens.weight", &[c.vocab_size, h])?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for l in 0..c.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let mut linear = |name: &str, rows: usize, cols: usize, bias: bool| {
                Ok::<_, String>(Linear {
                    weight: take(&format!("{p}.{name}.weight"), &[rows, cols])?,
                    bias: if bias {
                        Some(take(&format!("{p}.{name}.bias"), &[rows])?)
                    } else {
                        None
                    },
                })
            };
            let q = linear("self_attn.q_proj", q_rows, h, c.qkv_bias)?;
            let k = linear("self_attn.k_proj", kv_rows, h, c.qkv_bias)?;
            let v = linear("self_attn.v_proj", kv_rows, h, c.qkv_bias)?;
            let o = linear("self_attn.o_proj", h, q_rows, c.o_bias)?;
            let gate = linear("mlp.gate_proj", inter, h, false)?;
            let up = linear("mlp.up_proj", inter, h, false)?;
            let down = linear("mlp.down_proj", h, inter, false)?;
            let qk_norm = if c.qk_norm {
                Some((
                    take(&format!("{p}.self_attn.q_norm.weight"), &[hd])?,
                    take(&format!("{p}.self_attn.k_norm.weight"), &[hd])?,
                ))
            } else {
                None
            };
            layers.push(Layer {
                input_norm: take(&format!("{p}.input_layernorm.weight"), &[h])?,
                post_norm: take(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                q,
                k,
                v,
                o,
                qk_norm,
                gate,
                up,
                down,
            });
        }
        let norm = take("model.norm.weight", &[h])?;
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            Some(take("lm_head.weight", &[c.vocab_size, h])?)
        };
        Ok(Model {
            vocab: c.vocab_size,
            hidden: h,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: hd,
            eps: c.rms_norm_eps,
            inv_freqs: c.inv_freqs(),
            embed,
            layers,
            norm,
            lm_head,
        })
    }

    /// Runs `token` at the next position of `cache`, appending its keys
    /// and values to every layer's cache, and writes the next-token
    /// logits into `logits` if given.
    fn forward(&self, token: u32, cache: &mut SlotCache, logits: Option<&mut [f32]>) -> Result<()> {
        let t = token as usize;
        if t >= self.vocab {
            return Err(Error::Engine(
                format!("token {token} is outside the vocabulary of {}", self.vocab).into(),
            ));
        }
        if cache.len >= cache.capacity {
            return Err(Error::Engine(
                format!(
                    "a sequence grew past the {} positions it was prefilled for",
                    cache.capacity
                )
                .into(),
            ));
        }
        let (h, hd) = (self.hidden, self.head_dim);
        let pos = cache.len;
        let group = self.heads / self.kv_heads;
        let mut x = self.embed[t * h..(t + 1) * h].to_vec();
        for (layer, kv) in self.layers.iter().zip(&mut cache.layers) {
            // This position's query, key and value; RoPE on q and k.
            let n = rms(&x, &layer.input_norm, self.eps);
            let mut q = layer.q.apply(&n);
            let mut k = layer.k.apply(&n);
            let v = layer.v.apply(&n);
            for head in q.chunks_exact_mut(hd) {
                if let Some((q_norm, _)) = &layer.qk_norm {
                    let normed = rms(head, q_norm, self.eps);
                    head.copy_from_slice(&normed);
                }
                self.rope(head, pos);
            }
            for head in k.chunks_exact_mut(hd) {
                if let Some((_, k_norm)) = &layer.qk_norm {
                    let normed = rms(head, k_norm, self.eps);
                    head.copy_from_slice(&normed);
                }
                self.rope(head, pos);
            }
            // Into the cache: it now holds positions 0..=pos.
            kv.keys.extend_from_slice(&k);
            kv.values.extend_from_slice(&v);
            let width = self.kv_heads * hd;
            // Attention over the cached positions (causal by construction).
            let mut attn = vec![0f32; self.heads * hd];
            for head in 0..self.heads {
                let kvh = head / group;
                let q = &q[head * hd..(head + 1) * hd];
                let scores: Vec<f64> = kv
                    .keys
                    .chunks_exact(width)
                    .map(|k| dot(q, &k[kvh * hd..(kvh + 1) * hd]) / (hd as f64).sqrt())
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                for d in 0..hd {
                    let acc: f64 = kv
                        .values
                        .chunks_exact(width)
                        .zip(&weights)
                        .map(|(v, w)| w / total * f64::from(v[kvh * hd + d]))
                        .sum();
                    attn[head * hd + d] = acc as f32;
                }
            }
            for (x, o) in x.iter_mut().zip(layer.o.apply(&attn)) {
                *x += o;
            }
            // SwiGLU MLP.
            let n = rms(&x, &layer.post_norm, self.eps);
            let up = layer.up.apply(&n);
            let act: Vec<f32> = layer
                .gate
                .apply(&n)
                .iter()
                .zip(&up)
                .map(|(g, u)| (f64::from(*g) / (1.0 + (-f64::from(*g)).exp())) as f32 * u)
                .collect();
            for (x, d) in x.iter_mut().zip(layer.down.apply(&act)) {
                *x += d;
            }
        }
        cache.len += 1;
        if let Some(logits) = logits {
            let x = rms(&x, &self.norm, self.eps);
            let head = self.lm_head.as_deref().unwrap_or(&self.embed);
            for (logit, row) in logits.iter_mut().zip(head.chunks_exact(h)) {
                *logit = dot(row, &x) as f32;
            }
        }
        Ok(())
    }

    /// Rotates one head's vector by its position, in the "rotate half"
    /// layout of Hugging Face Llama (pairs `i` and `i + d/2`).
    fn rope(&self, x: &mut [f32], pos: usize) {
        let half = x.len() / 2;
        for (i, freq) in self.inv_freqs.iter().enumerate().take(half) {
            let (s, c) = (pos as f64 * freq).sin_cos();
            let (a, b) = (f64::from(x[i]), f64::from(x[i + half]));
            x[i] = (a * c - b * s) as f32;
            x[i + half] = (a * s + b * c) as f32;
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(a, b)| f64::from(*a) * f64::from(*b))
        .sum()
}

/// RMS norm: `x / sqrt(mean(x²) + eps) * w`.
fn rms(x: &[f32], weight: &[f32], eps: f64) -> Vec<f32> {
    let ms = x.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter()
        .zip(weight)
        .map(|(v, w)| (f64::from(*v) * r) as f32 * w)
        .collect()
}

/// Every tensor of the safetensors `files`, as `f32` with its shape; other
/// dtypes are refused.
fn read_f32_tensors(files: &[PathBuf]) -> std::result::Result<Tensors, String> {
    let mut tensors = HashMap::new();
    for path in files {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        for (name, view) in file.iter() {
            if view.dtype() != safetensors::Dtype::F32 {
                return Err(format!(
                    "{}: weight `{name}` is {:?}; this engine reads F32 only",
                    path.display(),
                    view.dtype()
                ));
            }
            let data = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            tensors.insert(name.to_owned(), (view.shape().to_vec(), data));
        }
    }
    Ok(tensors)
}
