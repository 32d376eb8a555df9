//! One parameterised decoder for Llama, Mistral, Qwen2 and Qwen3, with a
//! batched KV cache, left padding and per-row positions.
//!
//! Weights are named as in the checkpoint (`model.layers.0.self_attn.q_proj.weight`, ...).

use std::collections::HashMap;

use candle_core::{CpuStorage, DType, Device, Module, Tensor};
use candle_nn::{Embedding, VarBuilder};

use crate::error::{CandleError, Result};
use crate::matvec::{DecodeAttention, Proj};
use guidebench_core::model::DecoderConfig;

/// A `VarBuilder` that knows its full prefix, so that a missing weight is
/// reported by its full name.
#[derive(Clone)]
pub struct Weights {
    vb: VarBuilder<'static>,
    prefix: String,
}

impl Weights {
    /// Weights from named tensors, converted to `dtype` on `device`.
    pub fn from_tensors(tensors: HashMap<String, Tensor>, dtype: DType, device: &Device) -> Self {
        Weights {
            vb: VarBuilder::from_tensors(tensors, dtype, device),
            prefix: String::new(),
        }
    }

    /// The same weights under `name.`.
    pub fn pp(&self, name: impl std::fmt::Display) -> Self {
        let name = name.to_string();
        Weights {
            vb: self.vb.pp(&name),
            prefix: if self.prefix.is_empty() {
                name
            } else {
                format!("{}.{name}", self.prefix)
            },
        }
    }

    fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// Whether the tensor `name` exists here.
    pub fn contains(&self, name: &str) -> bool {
        self.vb.contains_tensor(name)
    }

    /// The tensor `name`, checked against `shape`.
    pub fn get(&self, shape: impl Into<candle_core::Shape>, name: &str) -> Result<Tensor> {
        if !self.vb.contains_tensor(name) {
            return Err(CandleError::MissingWeight {
                name: self.full_name(name),
            });
        }
        Ok(self.vb.get(shape, name)?)
    }

    /// The dtype weights are converted to.
    pub fn dtype(&self) -> DType {
        self.vb.dtype()
    }

    /// The device weights live on.
    pub fn device(&self) -> &Device {
        self.vb.device()
    }
}

/// A linear layer's weight `(out, in)` and optional bias, as stored.
type LinearParts = (Tensor, Option<Tensor>);

fn linear_parts(w: &Weights, in_dim: usize, out_dim: usize, bias: bool) -> Result<LinearParts> {
    let weight = w.get((out_dim, in_dim), "weight")?;
    let bias = if bias {
        Some(w.get(out_dim, "bias")?)
    } else {
        None
    };
    Ok((weight, bias))
}

fn linear(w: &Weights, in_dim: usize, out_dim: usize, bias: bool) -> Result<Proj> {
    let (weight, bias) = linear_parts(w, in_dim, out_dim, bias)?;
    Ok(Proj::new(weight, bias))
}

/// Projections of the same input stacked into one (their outputs side by
/// side, in order); only the stacked weight becomes a `Proj`, so it is the
/// only one copied for alignment.
fn stacked(parts: &[LinearParts]) -> Result<Proj> {
    let weights: Vec<&Tensor> = parts.iter().map(|(weight, _)| weight).collect();
    let weight = Tensor::cat(&weights, 0)?;
    let biases: Option<Vec<&Tensor>> = parts.iter().map(|(_, bias)| bias.as_ref()).collect();
    let bias = match biases {
        Some(b) => Some(Tensor::cat(&b, 0)?),
        None => None,
    };
    Ok(Proj::new(weight, bias))
}

/// An RMS norm with a learned scale.
#[derive(Debug, Clone)]
struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn load(w: &Weights, size: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm {
            weight: w.get(size, "weight")?,
            eps: eps as f32,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.contiguous()?;
        Ok(candle_nn::ops::rms_norm(&x, &self.weight, self.eps)?)
    }
}

/// Precomputed rotary tables, gathered per row and position.
#[derive(Debug, Clone)]
struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    fn new(cfg: &DecoderConfig, max_len: usize, dtype: DType, device: &Device) -> Result<Self> {
        let freqs = cfg.inv_freqs();
        let half = freqs.len();
        let mut cos = Vec::with_capacity(max_len * half);
        let mut sin = Vec::with_capacity(max_len * half);
        for pos in 0..max_len {
            for f in &freqs {
                let angle = pos as f64 * f;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Ok(Rope {
            cos: Tensor::from_vec(cos, (max_len, half), device)?.to_dtype(dtype)?,
            sin: Tensor::from_vec(sin, (max_len, half), device)?.to_dtype(dtype)?,
        })
    }

    /// `positions` is `(batch, seq)` of u32; returns cos and sin as
    /// `(batch, seq, head_dim / 2)`.
    fn gather(&self, positions: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, t) = positions.dims2()?;
        let flat = positions.flatten_all()?;
        let half = self.cos.dim(1)?;
        let cos = self.cos.index_select(&flat, 0)?.reshape((b, t, half))?;
        let sin = self.sin.index_select(&flat, 0)?.reshape((b, t, half))?;
        Ok((cos, sin))
    }
}

/// One sequence's keys and values in every layer, `(1, kv_heads,
/// capacity, head_dim)` each, with its own length.
#[derive(Debug)]
struct SlotKv {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    len: usize,
    capacity: usize,
}

/// The KV cache by sequence slot: a fixed set of slots, each holding one
/// sequence with its own length and room reserved for it when it was
/// prefilled, so a new sequence can join while others are decoding and a
/// decoding step writes into memory that is already there.
#[derive(Debug)]
pub struct SlotCache {
    slots: Vec<Option<SlotKv>>,
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    dtype: DType,
    device: Device,
}

impl SlotCache {
    /// An empty cache of `max_slots` slots.
    pub fn new(cfg: &DecoderConfig, max_slots: usize, dtype: DType, device: &Device) -> Self {
        SlotCache {
            slots: (0..max_slots).map(|_| None).collect(),
            layers: cfg.num_hidden_layers,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            dtype,
            device: device.clone(),
        }
    }

    /// Slots in the cache.
    pub fn max_slots(&self) -> usize {
        self.slots.len()
    }

    /// Positions cached for the sequence in `slot`, if it holds one.
    pub fn len(&self, slot: usize) -> Option<usize> {
        self.slots.get(slot)?.as_ref().map(|kv| kv.len)
    }

    /// Slots holding a sequence.
    pub fn occupied(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Frees `slot` and its memory.
    pub fn retire(&mut self, slot: usize) {
        if let Some(s) = self.slots.get_mut(slot) {
            *s = None;
        }
    }

    /// Reserves `capacity` positions in the free `slot`.
    fn open(&mut self, slot: usize, capacity: usize) -> Result<()> {
        let shape = (1, self.kv_heads, capacity, self.head_dim);
        let mut keys = Vec::with_capacity(self.layers);
        let mut values = Vec::with_capacity(self.layers);
        for _ in 0..self.layers {
            keys.push(Tensor::zeros(shape, self.dtype, &self.device)?);
            values.push(Tensor::zeros(shape, self.dtype, &self.device)?);
        }
        let Some(entry) = self.slots.get_mut(slot) else {
            return Err(candle_core::Error::Msg(format!(
                "slot {slot} is out of range (the engine has {} slots)",
                self.slots.len()
            ))
            .into());
        };
        if entry.is_some() {
            return Err(candle_core::Error::Msg(format!("slot {slot} is already in use")).into());
        }
        *entry = Some(SlotKv {
            keys,
            values,
            len: 0,
            capacity,
        });
        Ok(())
    }

    fn slot(&self, slot: usize) -> Result<&SlotKv> {
        self.slots
            .get(slot)
            .and_then(Option::as_ref)
            .ok_or_else(|| candle_core::Error::Msg(format!("slot {slot} holds no sequence")).into())
    }

    /// Writes `k`, `v` (`(1, kv_heads, t, head_dim)`) of `layer` at
    /// position `at` of `slot`.
    fn write(&self, slot: usize, layer: usize, at: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let kv = self.slot(slot)?;
        let t = k.dim(2)?;
        if at + t > kv.capacity {
            return Err(candle_core::Error::Msg(format!(
                "KV cache overflow in slot {slot}: {at} + {t} > {}",
                kv.capacity
            ))
            .into());
        }
        kv.keys[layer].slice_set(&k.contiguous()?, 2, at)?;
        kv.values[layer].slice_set(&v.contiguous()?, 2, at)?;
        Ok(())
    }

    /// Marks `t` more positions of `slot` as cached.
    fn advance(&mut self, slot: usize, t: usize) -> Result<()> {
        match self.slots.get_mut(slot).and_then(Option::as_mut) {
            Some(kv) => {
                kv.len += t;
                Ok(())
            }
            None => Err(candle_core::Error::Msg(format!("slot {slot} holds no sequence")).into()),
        }
    }
}

/// Which positions one forward pass adds, and for which slots.
#[derive(Clone, Copy)]
enum Pass<'a> {
    /// New sequences, left-padded to a common length `t`: row `i` goes to
    /// `slots[i]` and starts after `pads[i]` padding positions.
    Prefill {
        slots: &'a [usize],
        pads: &'a [usize],
    },
    /// One new position per running sequence, row `i` in `slots[i]` at
    /// position `lens[i]` (its cached length before this step).
    Decode {
        slots: &'a [usize],
        lens: &'a [usize],
    },
}

/// What every layer of one forward pass shares.
#[derive(Clone, Copy)]
struct Step<'a> {
    /// Rotary tables gathered for the new positions, `(b, t, head_dim / 2)`.
    cos: &'a Tensor,
    sin: &'a Tensor,
    /// Additive f32 mask `(b, 1, 1, t, T)`: for a prefill over the new
    /// positions; for a decoding step that does not take the CPU kernel,
    /// over each row's cached positions padded to the longest.
    mask: Option<&'a Tensor>,
    pass: Pass<'a>,
}

/// Self-attention with grouped key/value heads.
#[derive(Debug, Clone)]
struct Attention {
    /// `q_proj`, `k_proj` and `v_proj` stacked: one projection per step.
    qkv_proj: Proj,
    o_proj: Proj,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl Attention {
    fn load(w: &Weights, cfg: &DecoderConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        let (nh, nkv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let (q_norm, k_norm) = if cfg.qk_norm {
            (
                Some(RmsNorm::load(&w.pp("q_norm"), hd, cfg.rms_norm_eps)?),
                Some(RmsNorm::load(&w.pp("k_norm"), hd, cfg.rms_norm_eps)?),
            )
        } else {
            (None, None)
        };
        Ok(Attention {
            qkv_proj: stacked(&[
                linear_parts(&w.pp("q_proj"), h, nh * hd, cfg.qkv_bias)?,
                linear_parts(&w.pp("k_proj"), h, nkv * hd, cfg.qkv_bias)?,
                linear_parts(&w.pp("v_proj"), h, nkv * hd, cfg.qkv_bias)?,
            ])?,
            o_proj: linear(&w.pp("o_proj"), nh * hd, h, cfg.o_bias)?,
            q_norm,
            k_norm,
            num_heads: nh,
            num_kv_heads: nkv,
            head_dim: hd,
        })
    }

    /// `x`: `(b, t, hidden)`. Writes the new keys and values into each
    /// row's slot and attends over what the slot holds.
    fn forward(
        &self,
        x: &Tensor,
        step: &Step<'_>,
        cache: &SlotCache,
        layer: usize,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (nh, nkv, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let qkv = self.qkv_proj.forward(x)?;
        let q = qkv.narrow(2, 0, nh * hd)?.reshape((b, t, nh, hd))?;
        let k = qkv.narrow(2, nh * hd, nkv * hd)?.reshape((b, t, nkv, hd))?;
        let v = qkv
            .narrow(2, (nh + nkv) * hd, nkv * hd)?
            .reshape((b, t, nkv, hd))?;
        let q = match &self.q_norm {
            Some(norm) => norm.forward(&q)?,
            None => q,
        };
        let k = match &self.k_norm {
            Some(norm) => norm.forward(&k)?,
            None => k,
        };
        let q = candle_nn::rotary_emb::rope(&q.transpose(1, 2)?.contiguous()?, step.cos, step.sin)?;
        let k = candle_nn::rotary_emb::rope(&k.transpose(1, 2)?.contiguous()?, step.cos, step.sin)?;
        let v = v.transpose(1, 2)?.contiguous()?;
        let scale = 1.0 / (hd as f64).sqrt();
        match step.pass {
            Pass::Prefill { slots, pads } => {
                for (i, (&slot, &pad)) in slots.iter().zip(pads).enumerate() {
                    let len = t - pad;
                    cache.write(
                        slot,
                        layer,
                        0,
                        &k.narrow(0, i, 1)?.narrow(2, pad, len)?,
                        &v.narrow(0, i, 1)?.narrow(2, pad, len)?,
                    )?;
                }
                let out = self.attend(&q, &k, &v, step.mask, scale)?;
                Ok(self.o_proj.forward(&out)?)
            }
            Pass::Decode { slots, lens } => {
                for (i, (&slot, &at)) in slots.iter().zip(lens).enumerate() {
                    cache.write(slot, layer, at, &k.narrow(0, i, 1)?, &v.narrow(0, i, 1)?)?;
                }
                let out = match step.mask {
                    None => self.attend_cached(&q, slots, lens, cache, layer, scale)?,
                    Some(mask) => {
                        let (keys, values) = gather_padded(cache, slots, lens, layer)?;
                        self.attend(&q, &keys, &values, Some(mask), scale)?
                    }
                };
                Ok(self.o_proj.forward(&out)?)
            }
        }
    }

    /// A decoding step's attention with the CPU kernel, reading every
    /// row's keys and values in place in its slot.
    fn attend_cached(
        &self,
        q: &Tensor,
        slots: &[usize],
        lens: &[usize],
        cache: &SlotCache,
        layer: usize,
        scale: f64,
    ) -> Result<Tensor> {
        let (b, nh, _, hd) = q.dims4()?;
        let nkv = self.num_kv_heads;
        let mut guards = Vec::with_capacity(b);
        let mut caps = Vec::with_capacity(b);
        for &slot in slots {
            let kv = cache.slot(slot)?;
            guards.push((
                kv.keys[layer].storage_and_layout().0,
                kv.values[layer].storage_and_layout().0,
            ));
            caps.push(kv.capacity);
        }
        let keys = guards
            .iter()
            .map(|(k, _)| cpu_f32(k))
            .collect::<Result<Vec<_>>>()?;
        let values = guards
            .iter()
            .map(|(_, v)| cpu_f32(v))
            .collect::<Result<Vec<_>>>()?;
        let attended: Vec<usize> = lens.iter().map(|len| len + 1).collect();
        let op = DecodeAttention {
            keys: &keys,
            values: &values,
            caps: &caps,
            lens: &attended,
            scale: scale as f32,
        };
        let q = q.reshape((b, nkv, nh / nkv, hd))?;
        Ok(q.apply_op1_no_bwd(&op)?)
    }

    /// Attention of `q` `(b, heads, t, head_dim)` over `keys`, `values`
    /// `(b, kv_heads, T, head_dim)` with an additive mask `(b, 1, 1, t, T)`;
    /// returns `(b, t, heads * head_dim)`.
    fn attend(
        &self,
        q: &Tensor,
        keys: &Tensor,
        values: &Tensor,
        mask: Option<&Tensor>,
        scale: f64,
    ) -> Result<Tensor> {
        let (b, nh, t, hd) = q.dims4()?;
        let nkv = self.num_kv_heads;
        let total = keys.dim(2)?;
        // Grouped heads: the `rep` query heads that share a key/value head
        // are stacked along the sequence axis, so keys are never copied.
        let rep = nh / nkv;
        let q = q.reshape((b, nkv, rep * t, hd))?;
        let scores = (q.matmul(&keys.t()?)? * scale)?
            .to_dtype(DType::F32)?
            .reshape((b, nkv, rep, t, total))?;
        let scores = match mask {
            Some(mask) => scores.broadcast_add(mask)?,
            None => scores,
        };
        let probs = candle_nn::ops::softmax_last_dim(&scores)?
            .to_dtype(values.dtype())?
            .reshape((b, nkv, rep * t, total))?;
        Ok(probs
            .matmul(values)?
            .reshape((b, nh, t, hd))?
            .transpose(1, 2)?
            .reshape((b, t, nh * hd))?)
    }
}

/// The values of an f32 CPU storage.
fn cpu_f32(storage: &candle_core::Storage) -> Result<&[f32]> {
    match storage {
        candle_core::Storage::Cpu(CpuStorage::F32(data)) => Ok(data.as_slice()),
        _ => Err(
            candle_core::Error::Msg("decode attention: expected an f32 CPU cache".into()).into(),
        ),
    }
}

/// The cached keys and values of `layer` for each row (`lens[i] + 1`
/// positions), zero-padded to the longest: `(b, kv_heads, T, head_dim)`.
fn gather_padded(
    cache: &SlotCache,
    slots: &[usize],
    lens: &[usize],
    layer: usize,
) -> Result<(Tensor, Tensor)> {
    let longest = lens.iter().map(|len| len + 1).max().unwrap_or(1);
    let mut keys = Vec::with_capacity(slots.len());
    let mut values = Vec::with_capacity(slots.len());
    for (&slot, &len) in slots.iter().zip(lens) {
        let kv = cache.slot(slot)?;
        let n = len + 1;
        keys.push(
            kv.keys[layer]
                .narrow(2, 0, n)?
                .pad_with_zeros(2, 0, longest - n)?,
        );
        values.push(
            kv.values[layer]
                .narrow(2, 0, n)?
                .pad_with_zeros(2, 0, longest - n)?,
        );
    }
    Ok((Tensor::cat(&keys, 0)?, Tensor::cat(&values, 0)?))
}

/// The gated (SwiGLU) MLP.
#[derive(Debug, Clone)]
struct Mlp {
    /// `gate_proj` and `up_proj` stacked: one projection per step.
    gate_up_proj: Proj,
    intermediate: usize,
    down_proj: Proj,
}

impl Mlp {
    fn load(w: &Weights, cfg: &DecoderConfig) -> Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Mlp {
            gate_up_proj: stacked(&[
                linear_parts(&w.pp("gate_proj"), h, i, false)?,
                linear_parts(&w.pp("up_proj"), h, i, false)?,
            ])?,
            intermediate: i,
            down_proj: linear(&w.pp("down_proj"), i, h, false)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate_up = self.gate_up_proj.forward(x)?;
        let last = gate_up.rank() - 1;
        let i = self.intermediate;
        let gate = candle_nn::ops::silu(&gate_up.narrow(last, 0, i)?)?;
        let up = gate_up.narrow(last, i, i)?;
        Ok(self.down_proj.forward(&(gate * up)?)?)
    }
}

/// One pre-norm decoder block.
#[derive(Debug, Clone)]
struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl DecoderLayer {
    fn load(w: &Weights, cfg: &DecoderConfig) -> Result<Self> {
        Ok(DecoderLayer {
            input_layernorm: RmsNorm::load(
                &w.pp("input_layernorm"),
                cfg.hidden_size,
                cfg.rms_norm_eps,
            )?,
            self_attn: Attention::load(&w.pp("self_attn"), cfg)?,
            post_attention_layernorm: RmsNorm::load(
                &w.pp("post_attention_layernorm"),
                cfg.hidden_size,
                cfg.rms_norm_eps,
            )?,
            mlp: Mlp::load(&w.pp("mlp"), cfg)?,
        })
    }

    fn forward(
        &self,
        x: &Tensor,
        step: &Step<'_>,
        cache: &SlotCache,
        layer: usize,
    ) -> Result<Tensor> {
        let h = self.input_layernorm.forward(x)?;
        let h = self.self_attn.forward(&h, step, cache, layer)?;
        let x = (x + h)?;
        let h = self.post_attention_layernorm.forward(&x)?;
        let h = self.mlp.forward(&h)?;
        Ok((x + h)?)
    }
}

/// The most bytes of attention scores one prefill group may hold.
pub const PREFILL_SCORE_BUDGET: usize = 256 << 20;

/// The decoder: embeddings, blocks, final norm and LM head.
#[derive(Debug, Clone)]
pub struct Decoder {
    embed_tokens: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Proj,
    rope: Rope,
    config: DecoderConfig,
    max_seq_len: usize,
    dtype: DType,
    device: Device,
}

impl Decoder {
    /// Builds the decoder from checkpoint weights, with rotary tables for
    /// `max_seq_len` positions.
    pub fn load(w: &Weights, cfg: &DecoderConfig, max_seq_len: usize) -> Result<Self> {
        let m = w.pp("model");
        let embeddings = m
            .pp("embed_tokens")
            .get((cfg.vocab_size, cfg.hidden_size), "weight")?;
        // A tied LM head shares the embeddings: aligned here once, so that
        // it does not hold an aligned copy of its own.
        let embeddings = if cfg.tie_word_embeddings {
            crate::matvec::aligned(&embeddings)
        } else {
            embeddings
        };
        let lm_head = if cfg.tie_word_embeddings {
            Proj::new(embeddings.clone(), None)
        } else {
            linear(&w.pp("lm_head"), cfg.hidden_size, cfg.vocab_size, false)?
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| DecoderLayer::load(&m.pp("layers").pp(i), cfg))
            .collect::<Result<Vec<_>>>()?;
        Ok(Decoder {
            embed_tokens: Embedding::new(embeddings, cfg.hidden_size),
            layers,
            norm: RmsNorm::load(&m.pp("norm"), cfg.hidden_size, cfg.rms_norm_eps)?,
            lm_head,
            rope: Rope::new(cfg, max_seq_len, w.dtype(), w.device())?,
            config: cfg.clone(),
            max_seq_len,
            dtype: w.dtype(),
            device: w.device().clone(),
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// The longest sequence (prompt and output) this decoder handles.
    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// The compute dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Bytes of weights one decoding step reads for one row: every
    /// projection, norm and the LM head, plus one embedding row.
    pub fn weight_bytes_per_step(&self) -> usize {
        fn bytes(t: &Tensor) -> usize {
            t.elem_count() * t.dtype().size_in_bytes()
        }
        fn linear_bytes(l: &Proj) -> usize {
            bytes(l.weight()) + l.bias().map_or(0, bytes)
        }
        let mut total = linear_bytes(&self.lm_head) + bytes(&self.norm.weight);
        total += self.config.hidden_size * self.dtype.size_in_bytes();
        for layer in &self.layers {
            let a = &layer.self_attn;
            total += [&a.qkv_proj, &a.o_proj]
                .into_iter()
                .map(linear_bytes)
                .sum::<usize>();
            total += [&a.q_norm, &a.k_norm]
                .into_iter()
                .flatten()
                .map(|n| bytes(&n.weight))
                .sum::<usize>();
            let m = &layer.mlp;
            total += [&m.gate_up_proj, &m.down_proj]
                .into_iter()
                .map(linear_bytes)
                .sum::<usize>();
            total += bytes(&layer.input_layernorm.weight)
                + bytes(&layer.post_attention_layernorm.weight);
        }
        total
    }

    /// Floating-point operations of the LM head for one position.
    pub fn lm_head_flops(&self) -> usize {
        2 * self.lm_head.weight().elem_count()
    }

    /// Floating-point operations of the decoder blocks' projections for
    /// one token (two per weight: a multiply and an add), the part of a
    /// prefill that grows with prompt tokens times rows; attention scores
    /// and the LM head (run on the last position only) are not counted.
    pub fn flops_per_token(&self) -> usize {
        self.layers
            .iter()
            .map(|layer| {
                let (a, m) = (&layer.self_attn, &layer.mlp);
                [&a.qkv_proj, &a.o_proj, &m.gate_up_proj, &m.down_proj]
                    .into_iter()
                    .map(|p| 2 * p.weight().elem_count())
                    .sum::<usize>()
            })
            .sum()
    }

    /// An empty cache of `max_slots` slots.
    pub fn new_cache(&self, max_slots: usize) -> SlotCache {
        SlotCache::new(&self.config, max_slots, self.dtype, &self.device)
    }

    /// Whether decoding steps take the CPU attention kernel (f32 on the
    /// CPU), which reads each slot in place and needs no mask.
    fn decodes_in_place(&self) -> bool {
        self.device.is_cpu() && self.dtype == DType::F32
    }

    /// One forward pass over `t` new positions of `b` rows: embeddings,
    /// blocks (writing keys and values into the rows' slots), final norm
    /// and LM head on the last position. Returns f32 logits `(b, vocab)`.
    fn forward(
        &self,
        input_ids: &Tensor,
        positions: &Tensor,
        mask: Option<&Tensor>,
        pass: Pass<'_>,
        cache: &SlotCache,
    ) -> Result<Tensor> {
        let (_, t) = input_ids.dims2()?;
        let (cos, sin) = self.rope.gather(positions)?;
        let mut x = self.embed_tokens.forward(input_ids)?;
        let step = Step {
            cos: &cos,
            sin: &sin,
            mask,
            pass,
        };
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, &step, cache, i)?;
        }
        let last = x.narrow(1, t - 1, 1)?;
        let last = self.norm.forward(&last)?;
        let logits = self.lm_head.forward(&last)?.squeeze(1)?;
        Ok(logits.to_dtype(DType::F32)?)
    }

    /// One decoding step: appends `tokens[i]` to the sequence in
    /// `slots[i]` and returns the f32 logits of the new positions,
    /// `(b, vocab)`.
    pub fn decode(&self, slots: &[usize], tokens: &[u32], cache: &mut SlotCache) -> Result<Tensor> {
        let b = slots.len();
        let mut lens = Vec::with_capacity(b);
        for &slot in slots {
            let kv = cache.slot(slot)?;
            if kv.len >= kv.capacity {
                return Err(candle_core::Error::Msg(format!(
                    "slot {slot} is full ({} positions)",
                    kv.capacity
                ))
                .into());
            }
            lens.push(kv.len);
        }
        let positions: Vec<u32> = lens
            .iter()
            .map(|&len| u32::try_from(len).unwrap_or(u32::MAX))
            .collect();
        let ids = Tensor::from_slice(tokens, (b, 1), &self.device)?;
        let positions = Tensor::from_vec(positions, (b, 1), &self.device)?;
        let mask = if self.decodes_in_place() {
            None
        } else {
            let longest = lens.iter().max().map_or(1, |len| len + 1);
            let mut data = Vec::with_capacity(b * longest);
            for &len in &lens {
                data.extend(
                    (0..longest).map(|j| if j <= len { 0.0f32 } else { f32::NEG_INFINITY }),
                );
            }
            Some(Tensor::from_vec(data, (b, 1, 1, 1, longest), &self.device)?)
        };
        let logits = self.forward(
            &ids,
            &positions,
            mask.as_ref(),
            Pass::Decode { slots, lens: &lens },
            cache,
        )?;
        for &slot in slots {
            cache.advance(slot, 1)?;
        }
        Ok(logits)
    }

    /// Additive attention mask for prompts left-padded by `pads[i]`
    /// positions to a common length `t`: `(b, 1, 1, t, t)`.
    pub fn prefill_mask(&self, pads: &[usize], t: usize) -> Result<Tensor> {
        let mut data = Vec::with_capacity(pads.len() * t * t);
        for &pad in pads {
            for q in 0..t {
                for k in 0..t {
                    // A padding query attends to itself only, so that no
                    // row of the softmax is empty.
                    let ok = (k >= pad && k <= q) || k == q;
                    data.push(if ok { 0.0f32 } else { f32::NEG_INFINITY });
                }
            }
        }
        Ok(Tensor::from_vec(
            data,
            (pads.len(), 1, 1, t, t),
            &self.device,
        )?)
    }

    /// Prefills new sequences into free slots: `seqs[i]` is `(slot,
    /// prompt, capacity)`, the slot reserving room for `capacity`
    /// positions (at least the prompt). Returns the f32 logits of each
    /// prompt's last position, `(b, vocab)`, in order.
    ///
    /// Prompts are left-padded with `pad_id` to the longest of their group;
    /// groups are small enough that their attention scores stay within
    /// [`PREFILL_SCORE_BUDGET`] bytes, so a long-prompt batch does not need
    /// memory quadratic in its length times its size at once.
    pub fn prefill(
        &self,
        seqs: &[(usize, &[u32], usize)],
        pad_id: u32,
        cache: &mut SlotCache,
    ) -> Result<Tensor> {
        self.prefill_in_groups(seqs, pad_id, cache, PREFILL_SCORE_BUDGET)
    }

    /// [`Decoder::prefill`] with an explicit score budget in bytes.
    pub fn prefill_in_groups(
        &self,
        seqs: &[(usize, &[u32], usize)],
        pad_id: u32,
        cache: &mut SlotCache,
        score_budget: usize,
    ) -> Result<Tensor> {
        let b = seqs.len();
        let longest = seqs
            .iter()
            .map(|(_, p, _)| p.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let per_row = self.config.num_attention_heads * longest * longest * 4;
        let group = (score_budget / per_row.max(1)).clamp(1, b.max(1));
        let mut logits = Vec::new();
        for chunk in seqs.chunks(group) {
            let rows = chunk.len();
            let longest = chunk.iter().map(|(_, p, _)| p.len()).max().unwrap_or(1);
            let pads: Vec<usize> = chunk.iter().map(|(_, p, _)| longest - p.len()).collect();
            let slots: Vec<usize> = chunk.iter().map(|(slot, _, _)| *slot).collect();
            let mut ids = Vec::with_capacity(rows * longest);
            let mut positions = Vec::with_capacity(rows * longest);
            for ((_, prompt, _), &pad) in chunk.iter().zip(&pads) {
                ids.extend(std::iter::repeat_n(pad_id, pad));
                ids.extend_from_slice(prompt);
                positions.extend(std::iter::repeat_n(0u32, pad));
                positions.extend((0..prompt.len()).map(|p| u32::try_from(p).unwrap_or(u32::MAX)));
            }
            for &(slot, prompt, capacity) in chunk {
                cache.open(slot, capacity.max(prompt.len()))?;
            }
            let ids = Tensor::from_vec(ids, (rows, longest), &self.device)?;
            let positions = Tensor::from_vec(positions, (rows, longest), &self.device)?;
            let mask = self.prefill_mask(&pads, longest)?;
            let result = self.forward(
                &ids,
                &positions,
                Some(&mask),
                Pass::Prefill {
                    slots: &slots,
                    pads: &pads,
                },
                cache,
            );
            match result {
                Ok(l) => logits.push(l),
                Err(err) => {
                    for &(slot, _, _) in chunk {
                        cache.retire(slot);
                    }
                    return Err(err);
                }
            }
            for &(slot, prompt, _) in chunk {
                cache.advance(slot, prompt.len())?;
            }
        }
        Ok(Tensor::cat(&logits, 0)?)
    }

    /// Logits `(b, vocab)` as one `Vec<f32>` per row.
    pub fn logits_to_vec(logits: &Tensor) -> Result<Vec<Vec<f32>>> {
        Ok(logits.to_dtype(DType::F32)?.to_vec2::<f32>()?)
    }

    /// Copies f32 logits `(b, vocab)` into `out`, row after row.
    pub fn copy_logits(logits: &Tensor, out: &mut [f32]) -> Result<()> {
        let logits = logits.to_dtype(DType::F32)?.contiguous()?;
        let (storage, layout) = logits.storage_and_layout();
        match &*storage {
            candle_core::Storage::Cpu(CpuStorage::F32(data)) => {
                let start = layout.start_offset();
                let src = data.get(start..start + out.len()).ok_or_else(|| {
                    candle_core::Error::Msg("logits are shorter than the buffer".into())
                })?;
                out.copy_from_slice(src);
                Ok(())
            }
            _ => {
                drop(storage);
                let rows = logits.flatten_all()?.to_vec1::<f32>()?;
                if rows.len() != out.len() {
                    return Err(
                        candle_core::Error::Msg("logits do not fill the buffer".into()).into(),
                    );
                }
                out.copy_from_slice(&rows);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

    fn tiny_decoder(dtype: DType) -> (tempfile::TempDir, Decoder) {
        let dir = tempfile::tempdir().expect("tempdir");
        write_llama_fixture(dir.path(), &FixtureSpec::tiny()).expect("fixture");
        let config = DecoderConfig::from_file(&dir.path().join("config.json")).expect("config");
        let tensors = crate::loader::load_tensors(
            &guidebench_core::model::weight_files(dir.path()).expect("files"),
            &Device::Cpu,
        )
        .expect("tensors");
        let weights = Weights::from_tensors(tensors, dtype, &Device::Cpu);
        (dir, Decoder::load(&weights, &config, 64).expect("decoder"))
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        let a = Decoder::logits_to_vec(a).expect("vec");
        let b = Decoder::logits_to_vec(b).expect("vec");
        a.iter()
            .flatten()
            .zip(b.iter().flatten())
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    }

    #[test]
    fn prefill_in_groups_of_one_row_equals_one_group_and_decoding_continues_the_same() {
        let (_dir, decoder) = tiny_decoder(DType::F32);
        let prompts: [&[u32]; 3] = [&[5, 6, 7, 8, 9], &[10], &[11, 12, 13]];
        let seqs: Vec<(usize, &[u32], usize)> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (i, *p, 8))
            .collect();
        let mut one = decoder.new_cache(4);
        let mut many = decoder.new_cache(4);
        let l1 = decoder.prefill(&seqs, 2, &mut one).expect("one group");
        let l2 = decoder
            .prefill_in_groups(&seqs, 2, &mut many, 1)
            .expect("groups");
        assert!(max_diff(&l1, &l2) < 1e-4);
        assert_eq!(
            [one.len(0), one.len(1), one.len(2)],
            [Some(5), Some(1), Some(3)]
        );
        let a = decoder.decode(&[0, 1, 2], &[1, 2, 3], &mut one).expect("a");
        let b = decoder
            .decode(&[0, 1, 2], &[1, 2, 3], &mut many)
            .expect("b");
        assert!(max_diff(&a, &b) < 1e-4);
        assert_eq!(one.len(1), Some(2));
    }

    #[test]
    fn a_sequence_decodes_the_same_alone_and_beside_a_sequence_that_joined_later() {
        for dtype in [DType::F32, DType::BF16] {
            let (_dir, decoder) = tiny_decoder(dtype);
            let mut alone = decoder.new_cache(2);
            decoder
                .prefill(&[(0, &[5, 6, 7], 8)], 2, &mut alone)
                .expect("prefill");
            decoder.decode(&[0], &[9], &mut alone).expect("step");
            let want = decoder.decode(&[0], &[10], &mut alone).expect("step");

            let mut shared = decoder.new_cache(2);
            decoder
                .prefill(&[(1, &[5, 6, 7], 8)], 2, &mut shared)
                .expect("prefill");
            decoder.decode(&[1], &[9], &mut shared).expect("step");
            // a longer sequence joins slot 0 between two decoding steps
            decoder
                .prefill(&[(0, &[20, 21, 22, 23, 24, 25, 26], 12)], 2, &mut shared)
                .expect("join");
            let both = decoder
                .decode(&[0, 1], &[4, 10], &mut shared)
                .expect("step");
            let got = both.narrow(0, 1, 1).expect("row");
            let tolerance = if dtype == DType::F32 { 0.0 } else { 1e-2 };
            assert!(max_diff(&got, &want) <= tolerance, "{dtype:?}");
            shared.retire(0);
            assert_eq!((shared.len(0), shared.occupied()), (None, 1));
        }
    }

    #[test]
    fn decoding_past_a_slots_reserved_room_is_an_error_not_a_wrong_answer() {
        let (_dir, decoder) = tiny_decoder(DType::F32);
        let mut cache = decoder.new_cache(1);
        decoder
            .prefill(&[(0, &[5, 6], 3)], 2, &mut cache)
            .expect("prefill");
        decoder.decode(&[0], &[7], &mut cache).expect("fits");
        let err = decoder.decode(&[0], &[8], &mut cache).expect_err("full");
        assert!(err.to_string().contains("full"), "{err}");
        assert!(decoder.decode(&[1], &[8], &mut cache).is_err());
    }
}
