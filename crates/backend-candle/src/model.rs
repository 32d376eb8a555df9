//! One parameterised decoder for Llama, Mistral, Qwen2 and Qwen3, with a
//! batched KV cache, left padding and per-row positions.
//!
//! Weights are named as in the checkpoint (`model.layers.0.self_attn.q_proj.weight`, ...).

use std::collections::HashMap;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Embedding, VarBuilder};

use crate::config::ModelConfig;
use crate::error::{CandleError, Result};
use crate::matvec::{DecodeAttention, Proj};

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
    fn new(cfg: &ModelConfig, max_len: usize, dtype: DType, device: &Device) -> Result<Self> {
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

/// Keys and values of every layer for a batch of rows, preallocated.
#[derive(Debug)]
pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for `batch` rows of up to `capacity` positions.
    pub fn new(
        cfg: &ModelConfig,
        batch: usize,
        capacity: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let shape = (batch, cfg.num_key_value_heads, capacity, cfg.head_dim);
        let mut keys = Vec::with_capacity(cfg.num_hidden_layers);
        let mut values = Vec::with_capacity(cfg.num_hidden_layers);
        for _ in 0..cfg.num_hidden_layers {
            keys.push(Tensor::zeros(shape, dtype, device)?);
            values.push(Tensor::zeros(shape, dtype, device)?);
        }
        Ok(KvCache {
            keys,
            values,
            len: 0,
            capacity,
        })
    }

    /// Positions filled so far (including left padding).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rows in the cache.
    pub fn batch(&self) -> Result<usize> {
        Ok(match self.keys.first() {
            Some(k) => k.dim(0)?,
            None => 0,
        })
    }

    /// Writes `k`, `v` (`(batch, kv_heads, t, head_dim)`) after what is
    /// cached for `layer`, and returns all keys and values so far.
    fn append(&self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = k.dim(2)?;
        if self.len + t > self.capacity {
            return Err(candle_core::Error::Msg(format!(
                "KV cache overflow: {} + {t} > {}",
                self.len, self.capacity
            ))
            .into());
        }
        let (keys, values) = (&self.keys[layer], &self.values[layer]);
        keys.slice_set(&k.contiguous()?, 2, self.len)?;
        values.slice_set(&v.contiguous()?, 2, self.len)?;
        Ok((
            keys.narrow(2, 0, self.len + t)?,
            values.narrow(2, 0, self.len + t)?,
        ))
    }

    /// Stacks caches of the same length and capacity along the batch axis.
    pub fn join(mut caches: Vec<KvCache>) -> Result<Self> {
        if caches.len() == 1
            && let Some(cache) = caches.pop()
        {
            return Ok(cache);
        }
        let Some(first) = caches.first() else {
            return Err(candle_core::Error::Msg("no caches to join".into()).into());
        };
        let (len, capacity, layers) = (first.len, first.capacity, first.keys.len());
        let mut keys = Vec::with_capacity(layers);
        let mut values = Vec::with_capacity(layers);
        for layer in 0..layers {
            let k: Vec<&Tensor> = caches.iter().map(|c| &c.keys[layer]).collect();
            let v: Vec<&Tensor> = caches.iter().map(|c| &c.values[layer]).collect();
            keys.push(Tensor::cat(&k, 0)?);
            values.push(Tensor::cat(&v, 0)?);
        }
        Ok(KvCache {
            keys,
            values,
            len,
            capacity,
        })
    }

    /// Keeps only the rows `rows` (indices into the current batch), in that order.
    pub fn select_rows(&mut self, rows: &[u32]) -> Result<()> {
        let Some(first) = self.keys.first() else {
            return Ok(());
        };
        let index = Tensor::new(rows, first.device())?;
        for t in self.keys.iter_mut().chain(self.values.iter_mut()) {
            *t = t.index_select(&index, 0)?;
        }
        Ok(())
    }
}

/// What every layer of one forward pass shares.
#[derive(Clone, Copy)]
struct Step<'a> {
    /// Rotary tables gathered for the new positions, `(b, t, head_dim / 2)`.
    cos: &'a Tensor,
    sin: &'a Tensor,
    /// Additive f32 mask `(b, 1, 1, t, T)`.
    mask: &'a Tensor,
    /// The same mask as plain values when `t == 1` on the CPU in f32.
    decode_mask: Option<&'a [f32]>,
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
    fn load(w: &Weights, cfg: &ModelConfig) -> Result<Self> {
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

    /// `x`: `(b, t, hidden)`; `mask`: additive f32 `(b, 1, 1, t, T)` where
    /// `T` is the cached length after this step.
    fn forward(
        &self,
        x: &Tensor,
        step: &Step<'_>,
        cache: &KvCache,
        layer: usize,
    ) -> Result<Tensor> {
        let Step {
            cos,
            sin,
            mask,
            decode_mask,
        } = *step;
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
        let q = candle_nn::rotary_emb::rope(&q.transpose(1, 2)?.contiguous()?, cos, sin)?;
        let k = candle_nn::rotary_emb::rope(&k.transpose(1, 2)?.contiguous()?, cos, sin)?;
        let v = v.transpose(1, 2)?;
        let (keys, values) = cache.append(layer, &k, &v)?;
        let total = keys.dim(2)?;
        if let Some(mask) = decode_mask
            && t == 1
            && DecodeAttention::supports(&q, &keys)
        {
            let op = DecodeAttention {
                mask,
                scale: (1.0 / (hd as f64).sqrt()) as f32,
            };
            let q = q.reshape((b, nkv, nh / nkv, hd))?;
            let out = q.apply_op3_no_bwd(&keys, &values, &op)?;
            return Ok(self.o_proj.forward(&out)?);
        }

        // Grouped heads: the `rep` query heads that share a key/value head
        // are stacked along the sequence axis, so keys are never copied.
        let rep = nh / nkv;
        let q = q.reshape((b, nkv, rep * t, hd))?;
        let scale = 1.0 / (hd as f64).sqrt();
        let scores = (q.matmul(&keys.t()?)? * scale)?
            .to_dtype(DType::F32)?
            .reshape((b, nkv, rep, t, total))?
            .broadcast_add(mask)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?
            .to_dtype(values.dtype())?
            .reshape((b, nkv, rep * t, total))?;
        let out = probs
            .matmul(&values)?
            .reshape((b, nh, t, hd))?
            .transpose(1, 2)?
            .reshape((b, t, nh * hd))?;
        Ok(self.o_proj.forward(&out)?)
    }
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
    fn load(w: &Weights, cfg: &ModelConfig) -> Result<Self> {
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
    fn load(w: &Weights, cfg: &ModelConfig) -> Result<Self> {
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
        cache: &KvCache,
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
    config: ModelConfig,
    max_seq_len: usize,
    dtype: DType,
    device: Device,
}

impl Decoder {
    /// Builds the decoder from checkpoint weights, with rotary tables for
    /// `max_seq_len` positions.
    pub fn load(w: &Weights, cfg: &ModelConfig, max_seq_len: usize) -> Result<Self> {
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
    pub fn config(&self) -> &ModelConfig {
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

    /// An empty cache for `batch` rows and `capacity` positions.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<KvCache> {
        KvCache::new(&self.config, batch, capacity, self.dtype, &self.device)
    }

    /// One forward pass for the whole batch.
    ///
    /// - `input_ids`, `positions`: `(b, t)` u32, `t` new tokens per row;
    /// - `mask`: additive f32 `(b, 1, 1, t, cache.len() + t)`, 0 where a
    ///   query may attend and `-inf` where not;
    ///
    /// Appends the new keys and values to `cache` and returns the f32
    /// logits of the last position of every row, `(b, vocab)`.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let (_, t) = input_ids.dims2()?;
        let (cos, sin) = self.rope.gather(positions)?;
        let mut x = self.embed_tokens.forward(input_ids)?;
        // One new position per row: the mask as plain values, for the
        // decoding-step attention.
        let decode_mask = if t == 1 && mask.dtype() == DType::F32 && mask.device().is_cpu() {
            Some(mask.flatten_all()?.to_vec1::<f32>()?)
        } else {
            None
        };
        let step = Step {
            cos: &cos,
            sin: &sin,
            mask,
            decode_mask: decode_mask.as_deref(),
        };
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, &step, cache, i)?;
        }
        cache.len += t;
        let last = x.narrow(1, t - 1, 1)?;
        let last = self.norm.forward(&last)?;
        let logits = self.lm_head.forward(&last)?.squeeze(1)?;
        Ok(logits.to_dtype(DType::F32)?)
    }

    /// Additive attention mask for `t` new positions after `past` cached
    /// ones, for rows left-padded by `pads[i]` positions.
    pub fn mask(&self, pads: &[usize], past: usize, t: usize) -> Result<Tensor> {
        let total = past + t;
        let mut data = Vec::with_capacity(pads.len() * t * total);
        for &pad in pads {
            for q in 0..t {
                let qpos = past + q;
                for k in 0..total {
                    // A padding query attends to itself only, so that no
                    // row of the softmax is empty.
                    let ok = (k >= pad && k <= qpos) || k == qpos;
                    data.push(if ok { 0.0f32 } else { f32::NEG_INFINITY });
                }
            }
        }
        Ok(Tensor::from_vec(
            data,
            (pads.len(), 1, 1, t, total),
            &self.device,
        )?)
    }

    /// Logits `(b, vocab)` as one `Vec<f32>` per row.
    pub fn logits_to_vec(logits: &Tensor) -> Result<Vec<Vec<f32>>> {
        Ok(logits.to_dtype(DType::F32)?.to_vec2::<f32>()?)
    }

    /// Batched prefill of `prompts` (left-padded with `pad_id` to the
    /// longest): returns a cache holding them, the last-position logits of
    /// each row, and the padding of each row.
    ///
    /// Rows are run in groups small enough that the attention scores of a
    /// group stay within [`PREFILL_SCORE_BUDGET`] bytes; the groups' caches
    /// are then joined, so a long-prompt batch does not need memory
    /// quadratic in its length times its size at once.
    pub fn prefill(
        &self,
        prompts: &[Vec<u32>],
        pad_id: u32,
        capacity: usize,
    ) -> Result<(KvCache, Tensor, Vec<usize>)> {
        self.prefill_in_groups(prompts, pad_id, capacity, PREFILL_SCORE_BUDGET)
    }

    /// [`Decoder::prefill`] with an explicit score budget in bytes.
    pub fn prefill_in_groups(
        &self,
        prompts: &[Vec<u32>],
        pad_id: u32,
        capacity: usize,
        score_budget: usize,
    ) -> Result<(KvCache, Tensor, Vec<usize>)> {
        let b = prompts.len();
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let per_row = self.config.num_attention_heads * longest * longest * 4;
        let group = (score_budget / per_row.max(1)).clamp(1, b.max(1));
        let pads: Vec<usize> = prompts.iter().map(|p| longest - p.len()).collect();
        let mut caches = Vec::new();
        let mut logits = Vec::new();
        for (chunk, chunk_pads) in prompts.chunks(group).zip(pads.chunks(group)) {
            let rows = chunk.len();
            let mut ids = Vec::with_capacity(rows * longest);
            let mut positions = Vec::with_capacity(rows * longest);
            for (prompt, &pad) in chunk.iter().zip(chunk_pads) {
                ids.extend(std::iter::repeat_n(pad_id, pad));
                ids.extend_from_slice(prompt);
                positions.extend(std::iter::repeat_n(0u32, pad));
                positions.extend((0..prompt.len()).map(|p| u32::try_from(p).unwrap_or(u32::MAX)));
            }
            let ids = Tensor::from_vec(ids, (rows, longest), &self.device)?;
            let positions = Tensor::from_vec(positions, (rows, longest), &self.device)?;
            let mask = self.mask(chunk_pads, 0, longest)?;
            let mut cache = self.new_cache(rows, capacity.max(longest))?;
            logits.push(self.forward(&ids, &positions, &mask, &mut cache)?);
            caches.push(cache);
        }
        let cache = KvCache::join(caches)?;
        let logits = Tensor::cat(&logits, 0)?;
        Ok((cache, logits, pads))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{FixtureSpec, write_llama_fixture};

    #[test]
    fn prefill_in_groups_of_one_row_equals_one_group_and_continues_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_llama_fixture(dir.path(), &FixtureSpec::tiny()).expect("fixture");
        let config = ModelConfig::from_file(&dir.path().join("config.json")).expect("config");
        let tensors = crate::loader::load_tensors(
            &crate::loader::weight_files(dir.path()).expect("files"),
            &Device::Cpu,
        )
        .expect("tensors");
        let weights = Weights::from_tensors(tensors, DType::F32, &Device::Cpu);
        let decoder = Decoder::load(&weights, &config, 64).expect("decoder");
        let prompts = vec![vec![5, 6, 7, 8, 9], vec![10], vec![11, 12, 13]];
        let (mut one, l1, pads) = decoder.prefill(&prompts, 2, 8).expect("one group");
        let (mut many, l2, _) = decoder
            .prefill_in_groups(&prompts, 2, 8, 1)
            .expect("groups");
        assert_eq!(pads, vec![0, 4, 2]);
        // the same up to float noise of differently shaped matmuls
        let close = |a: &Tensor, b: &Tensor| {
            let a = Decoder::logits_to_vec(a).expect("vec");
            let b = Decoder::logits_to_vec(b).expect("vec");
            let worst = a
                .iter()
                .flatten()
                .zip(b.iter().flatten())
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "max |diff| {worst}");
        };
        close(&l1, &l2);
        assert_eq!(many.batch().expect("batch"), 3);
        // one decode step on both caches gives the same logits
        let ids = Tensor::new(&[[1u32], [2], [3]], &Device::Cpu).expect("ids");
        let pos = Tensor::new(&[[5u32], [1], [3]], &Device::Cpu).expect("pos");
        let mask = decoder.mask(&pads, one.len(), 1).expect("mask");
        let a = decoder.forward(&ids, &pos, &mask, &mut one).expect("a");
        let b = decoder.forward(&ids, &pos, &mask, &mut many).expect("b");
        close(&a, &b);
    }
}
