//! One parameterised decoder for Llama, Mistral, Qwen2 and Qwen3, written
//! with libtorch tensor operations, over the [`KvCache`].
//!
//! Weights are taken by their names in the checkpoint
//! (`model.layers.0.self_attn.q_proj.weight`, ...), each checked against the
//! shape `config.json` implies. The q, k and v projections are stacked into
//! one matrix, and so are the MLP's gate and up projections, so a layer runs
//! four matrix products.

use std::collections::HashMap;
use std::path::PathBuf;

use guidebench_core::engine::LoadError;
use guidebench_core::model::DecoderConfig;
use tch::{Device, Kind, Tensor};

use crate::cache::KvCache;
use crate::dim;
use crate::error::{Result, TchError};

/// The checkpoint's tensors by name, read from safetensors files, handed
/// out converted to the compute dtype on the compute device.
pub struct Weights {
    tensors: HashMap<String, Tensor>,
    kind: Kind,
    device: Device,
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weights")
            .field("tensors", &self.tensors.len())
            .field("kind", &self.kind)
            .field("device", &self.device)
            .finish()
    }
}

impl Weights {
    /// Reads every tensor of `files` (one file, or the shards of a sharded
    /// checkpoint) into host memory, in their stored dtype.
    pub fn read(files: &[PathBuf], kind: Kind, device: Device) -> Result<Self> {
        let mut tensors = HashMap::new();
        for file in files {
            let part = Tensor::read_safetensors(file).map_err(|e| {
                TchError::from(LoadError::InvalidWeights {
                    path: file.clone(),
                    reason: e.to_string(),
                })
            })?;
            tensors.extend(part);
        }
        Ok(Weights {
            tensors,
            kind,
            device,
        })
    }

    /// Whether the checkpoint has `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Takes the tensor `name` out (so its host copy is freed once
    /// converted), checked against `shape`, in the compute dtype on the
    /// compute device.
    pub fn take(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let tensor = self.tensors.remove(name).ok_or_else(|| {
            TchError::from(LoadError::MissingWeight {
                name: name.to_owned(),
            })
        })?;
        let expected: Vec<i64> = shape.iter().copied().map(dim).collect();
        let found = tensor.size();
        if found != expected {
            return Err(TchError::WeightShape {
                name: name.to_owned(),
                found,
                expected,
            });
        }
        Ok(tensor.f_to_kind(self.kind)?.f_to_device(self.device)?)
    }
}

/// A projection: the checkpoint's weight `(out, in)` stored transposed,
/// `(in, out)` row-major, so that `x @ weight` needs no repacking of the
/// weight in every call (libtorch's `linear` on the `(out, in)` layout
/// copies it into panels each time, most of a decoding step's work at
/// small batches), and an optional bias.
#[derive(Debug)]
struct Linear {
    /// `(in, out)`: `x (rows, in) x weight`.
    weight: Tensor,
    /// The same weight as stored, `(out, in)`, when the decoder keeps both
    /// layouts ([`Decoder::keep_both_layouts`]).
    weight_out_in: Option<Tensor>,
    bias: Option<Tensor>,
}

/// Inputs of this many rows go through the `(out, in)` copy of a weight
/// when there is one: with MKL on an AVX2 CPU, `weight (out, in) x x^T`
/// is faster than `x x weight (in, out)` for decoding steps of 4 to 64
/// rows (one row is a matrix-vector product, fastest on `(in, out)`; a
/// prefill's thousands of rows gain nothing).
const OUT_IN_ROWS: std::ops::RangeInclusive<i64> = 4..=64;

impl Linear {
    fn load(
        w: &mut Weights,
        name: &str,
        in_dim: usize,
        out_dim: usize,
        bias: bool,
    ) -> Result<Self> {
        let weight = w.take(&format!("{name}.weight"), &[out_dim, in_dim])?;
        Ok(Linear {
            weight: weight.f_transpose(0, 1)?.f_contiguous()?,
            weight_out_in: None,
            bias: if bias {
                Some(w.take(&format!("{name}.bias"), &[out_dim])?)
            } else {
                None
            },
        })
    }

    /// Projections of the same input stacked into one, outputs side by side.
    fn stacked(parts: Vec<Linear>) -> Result<Self> {
        let weights: Vec<&Tensor> = parts.iter().map(|p| &p.weight).collect();
        let weight = Tensor::f_cat(&weights, 1)?;
        let biases: Option<Vec<&Tensor>> = parts.iter().map(|p| p.bias.as_ref()).collect();
        let bias = match biases {
            Some(b) => Some(Tensor::f_cat(&b, 0)?),
            None => None,
        };
        Ok(Linear {
            weight,
            weight_out_in: None,
            bias,
        })
    }

    /// Keeps a second copy of the weight as `(out, in)`.
    fn keep_out_in(&mut self) -> Result<()> {
        self.weight_out_in = Some(self.weight.f_transpose(0, 1)?.f_contiguous()?);
        Ok(())
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let out_in = match &self.weight_out_in {
            Some(w) => out_in_product(x, w)?,
            None => None,
        };
        let y = match out_in {
            Some(y) => y,
            None => x.f_matmul(&self.weight)?,
        };
        Ok(match &self.bias {
            Some(bias) => y.f_add(bias)?,
            None => y,
        })
    }

    fn numel(&self) -> usize {
        self.weight.numel() + self.bias.as_ref().map_or(0, Tensor::numel)
    }
}

/// `x (..., in)` times the `(out, in)` weight `w` as `w x^T`, transposed
/// back to `(..., out)`, when `x` has [`OUT_IN_ROWS`] rows; `None` (the
/// caller uses the `(in, out)` weight) otherwise.
fn out_in_product(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    let mut shape = x.size();
    let Some((&last, lead)) = shape.split_last() else {
        return Ok(None);
    };
    let rows: i64 = lead.iter().product();
    if !OUT_IN_ROWS.contains(&rows) {
        return Ok(None);
    }
    if let Some(out) = shape.last_mut() {
        *out = w.size()[0];
    }
    Ok(Some(
        w.f_matmul(&x.f_reshape([rows, last])?.f_transpose(0, 1)?)?
            .f_transpose(0, 1)?
            .f_contiguous()?
            .f_view(shape.as_slice())?,
    ))
}

/// An RMS norm over the last dimension, with a learned scale.
#[derive(Debug)]
struct RmsNorm {
    weight: Tensor,
    size: i64,
    eps: f64,
}

impl RmsNorm {
    fn load(w: &mut Weights, name: &str, size: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm {
            weight: w.take(&format!("{name}.weight"), &[size])?,
            size: dim(size),
            eps,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.f_rms_norm([self.size], Some(&self.weight), self.eps)?)
    }
}

/// Rotary tables for every position, `(max_seq_len, head_dim)`: cos of
/// each angle twice (`[cos, cos]`) and sin with the first half negated
/// (`[-sin, sin]`), so that a rotation is two products and a sum.
#[derive(Debug)]
struct Rope {
    cos: Tensor,
    sin: Tensor,
    head_dim: i64,
}

impl Rope {
    fn new(cfg: &DecoderConfig, max_len: usize, kind: Kind, device: Device) -> Result<Self> {
        let freqs = cfg.inv_freqs();
        let half = freqs.len();
        let mut cos = Vec::with_capacity(max_len * 2 * half);
        let mut sin = Vec::with_capacity(max_len * 2 * half);
        for pos in 0..max_len {
            // Positions are exact in f64 far beyond any context length.
            let pos = pos as f64;
            let at = cos.len();
            for f in &freqs {
                let angle = pos * f;
                cos.push(angle.cos() as f32);
                sin.push(-(angle.sin() as f32));
            }
            cos.extend_from_within(at..);
            sin.extend_from_within(at..);
            for s in &mut sin[at + half..] {
                *s = -*s;
            }
        }
        let table = |v: &[f32]| -> Result<Tensor> {
            Ok(Tensor::f_from_slice(v)?
                .f_view([dim(max_len), dim(2 * half)])?
                .f_to_kind(kind)?
                .f_to_device(device)?)
        };
        Ok(Rope {
            cos: table(&cos)?,
            sin: table(&sin)?,
            head_dim: dim(2 * half),
        })
    }

    /// The tables' rows for `positions` `(b, t)`, shaped `(b, t, 1,
    /// head_dim)` to broadcast over heads.
    fn gather(&self, positions: &Tensor) -> Result<(Tensor, Tensor)> {
        let size = positions.size();
        let shape = [size[0], size[1], 1, self.head_dim];
        let flat = positions.f_flatten(0, -1)?;
        let cos = self.cos.f_index_select(0, &flat)?.f_view(shape)?;
        let sin = self.sin.f_index_select(0, &flat)?.f_view(shape)?;
        Ok((cos, sin))
    }
}

/// Rotates `x` `(b, t, heads, head_dim)` by the gathered angles in the
/// Hugging Face convention, `x * cos + rotate_half(x) * sin` (the two
/// halves of each head are the pairs): with the tables of [`Rope`],
/// `x * [cos, cos] + [x2, x1] * [-sin, sin]`.
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let half = x.size()[3] / 2;
    let swapped = Tensor::f_cat(&[x.f_narrow(3, half, half)?, x.f_narrow(3, 0, half)?], 3)?;
    Ok(x.f_mul(cos)?.f_add(&swapped.f_mul(sin)?)?)
}

/// Which positions one forward pass adds, and where their keys and values
/// go in the cache.
#[derive(Clone, Copy)]
pub(crate) enum Pass<'a> {
    /// New sequences in cache rows `row0..row0 + b`, at positions `0..t`
    /// (right-padded).
    Prefill {
        /// The first cache row.
        row0: i64,
    },
    /// One new position for each of the cache's first `b` rows: `index`
    /// `(b,)` is each row's flat position in the cache, and attention runs
    /// over the first `total` positions.
    Decode {
        /// Flat cache index of each row's new position.
        index: &'a Tensor,
        /// Positions attended to (the longest row's length plus one).
        total: i64,
    },
}

/// What every layer of a forward pass shares.
struct Step<'a> {
    cos: &'a Tensor,
    sin: &'a Tensor,
    /// Additive `(b, 1, t, T)` in the compute dtype: 0 where a query may
    /// attend to a key, `-inf` where not.
    mask: &'a Tensor,
    pass: Pass<'a>,
}

/// Self-attention with grouped key/value heads.
#[derive(Debug)]
struct Attention {
    qkv_proj: Linear,
    o_proj: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl Attention {
    fn load(w: &mut Weights, name: &str, cfg: &DecoderConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        let (nh, nkv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let (q_norm, k_norm) = if cfg.qk_norm {
            let eps = cfg.rms_norm_eps;
            (
                Some(RmsNorm::load(w, &format!("{name}.q_norm"), hd, eps)?),
                Some(RmsNorm::load(w, &format!("{name}.k_norm"), hd, eps)?),
            )
        } else {
            (None, None)
        };
        Ok(Attention {
            qkv_proj: Linear::stacked(vec![
                Linear::load(w, &format!("{name}.q_proj"), h, nh * hd, cfg.qkv_bias)?,
                Linear::load(w, &format!("{name}.k_proj"), h, nkv * hd, cfg.qkv_bias)?,
                Linear::load(w, &format!("{name}.v_proj"), h, nkv * hd, cfg.qkv_bias)?,
            ])?,
            o_proj: Linear::load(w, &format!("{name}.o_proj"), nh * hd, h, cfg.o_bias)?,
            q_norm,
            k_norm,
            heads: dim(nh),
            kv_heads: dim(nkv),
            head_dim: dim(hd),
        })
    }

    /// `x`: `(b, t, hidden)`. Writes the new keys and values into the
    /// cache and attends over what the rows hold.
    fn forward(
        &self,
        x: &Tensor,
        step: &Step<'_>,
        cache: &mut KvCache,
        layer: usize,
    ) -> Result<Tensor> {
        let size = x.size();
        let (b, t) = (size[0], size[1]);
        let (nh, nkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let qkv = self.qkv_proj.forward(x)?;
        // Queries and keys side by side (`heads + kv_heads` heads), rotated
        // together.
        let qk = qkv
            .f_narrow(2, 0, (nh + nkv) * hd)?
            .f_reshape([b, t, nh + nkv, hd])?;
        let v = qkv
            .f_narrow(2, (nh + nkv) * hd, nkv * hd)?
            .f_reshape([b, t, nkv, hd])?;
        let qk = match (&self.q_norm, &self.k_norm) {
            (Some(q_norm), Some(k_norm)) => Tensor::f_cat(
                &[
                    q_norm.forward(&qk.f_narrow(2, 0, nh)?)?,
                    k_norm.forward(&qk.f_narrow(2, nh, nkv)?)?,
                ],
                2,
            )?,
            _ => qk,
        };
        let qk = rotate(&qk, step.cos, step.sin)?;
        let q = qk.f_narrow(2, 0, nh)?;
        let k = qk.f_narrow(2, nh, nkv)?;
        let (keys, values) = match step.pass {
            Pass::Prefill { row0 } => {
                cache.write_prefill(layer, row0, &k, &v)?;
                (k.f_transpose(1, 2)?, v.f_transpose(1, 2)?)
            }
            Pass::Decode { index, total } => {
                cache.write_decode(layer, index, &k, &v)?;
                cache.attended(layer, b, total)?
            }
        };
        let out = Tensor::f_scaled_dot_product_attention(
            &q.f_transpose(1, 2)?,
            &keys,
            &values,
            Some(step.mask),
            0.0,
            false,
            None,
            nkv != nh,
        )?;
        let out = out.f_transpose(1, 2)?.f_reshape([b, t, nh * hd])?;
        self.o_proj.forward(&out)
    }
}

/// The gated (SwiGLU) MLP.
#[derive(Debug)]
struct Mlp {
    gate_up_proj: Linear,
    down_proj: Linear,
    intermediate: i64,
}

impl Mlp {
    fn load(w: &mut Weights, name: &str, cfg: &DecoderConfig) -> Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Mlp {
            gate_up_proj: Linear::stacked(vec![
                Linear::load(w, &format!("{name}.gate_proj"), h, i, false)?,
                Linear::load(w, &format!("{name}.up_proj"), h, i, false)?,
            ])?,
            down_proj: Linear::load(w, &format!("{name}.down_proj"), i, h, false)?,
            intermediate: dim(i),
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate_up = self.gate_up_proj.forward(x)?;
        let i = self.intermediate;
        let gate = gate_up.f_narrow(-1, 0, i)?.f_silu()?;
        let up = gate_up.f_narrow(-1, i, i)?;
        self.down_proj.forward(&gate.f_mul(&up)?)
    }
}

/// One pre-norm decoder block.
#[derive(Debug)]
struct Block {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl Block {
    fn load(w: &mut Weights, name: &str, cfg: &DecoderConfig) -> Result<Self> {
        let (h, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        Ok(Block {
            input_layernorm: RmsNorm::load(w, &format!("{name}.input_layernorm"), h, eps)?,
            self_attn: Attention::load(w, &format!("{name}.self_attn"), cfg)?,
            post_attention_layernorm: RmsNorm::load(
                w,
                &format!("{name}.post_attention_layernorm"),
                h,
                eps,
            )?,
            mlp: Mlp::load(w, &format!("{name}.mlp"), cfg)?,
        })
    }

    fn forward(
        &self,
        x: &Tensor,
        step: &Step<'_>,
        cache: &mut KvCache,
        layer: usize,
    ) -> Result<Tensor> {
        let h = self.input_layernorm.forward(x)?;
        let x = x.f_add(&self.self_attn.forward(&h, step, cache, layer)?)?;
        let h = self.post_attention_layernorm.forward(&x)?;
        Ok(x.f_add(&self.mlp.forward(&h)?)?)
    }
}

/// The decoder: embeddings, blocks, final norm and LM head.
#[derive(Debug)]
pub struct Decoder {
    embed_tokens: Tensor,
    blocks: Vec<Block>,
    norm: RmsNorm,
    /// `None` when the head is tied to the embeddings.
    lm_head: Option<Linear>,
    rope: Rope,
    config: DecoderConfig,
    max_seq_len: usize,
    kind: Kind,
    device: Device,
}

impl Decoder {
    /// Builds the decoder from checkpoint weights, with rotary tables for
    /// `max_seq_len` positions.
    pub fn load(w: &mut Weights, cfg: &DecoderConfig, max_seq_len: usize) -> Result<Self> {
        let embed_tokens = w.take(
            "model.embed_tokens.weight",
            &[cfg.vocab_size, cfg.hidden_size],
        )?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(Linear::load(
                w,
                "lm_head",
                cfg.hidden_size,
                cfg.vocab_size,
                false,
            )?)
        };
        let blocks = (0..cfg.num_hidden_layers)
            .map(|i| Block::load(w, &format!("model.layers.{i}"), cfg))
            .collect::<Result<Vec<_>>>()?;
        Ok(Decoder {
            embed_tokens,
            blocks,
            norm: RmsNorm::load(w, "model.norm", cfg.hidden_size, cfg.rms_norm_eps)?,
            lm_head,
            rope: Rope::new(cfg, max_seq_len, w.kind, w.device)?,
            config: cfg.clone(),
            max_seq_len,
            kind: w.kind,
            device: w.device,
        })
    }

    /// Keeps a second copy of every projection weight (and of an untied LM
    /// head) as stored, `(out, in)`, which decoding steps of 4 to 64 rows
    /// multiply faster with MKL; the projections then take twice their
    /// memory. The results are the same products, summed in another
    /// order.
    pub fn keep_both_layouts(&mut self) -> Result<()> {
        for block in &mut self.blocks {
            block.self_attn.qkv_proj.keep_out_in()?;
            block.self_attn.o_proj.keep_out_in()?;
            block.mlp.gate_up_proj.keep_out_in()?;
            block.mlp.down_proj.keep_out_in()?;
        }
        if let Some(head) = &mut self.lm_head {
            head.keep_out_in()?;
        }
        Ok(())
    }

    /// Whether [`keep_both_layouts`](Self::keep_both_layouts) ran.
    pub fn keeps_both_layouts(&self) -> bool {
        self.blocks
            .first()
            .is_some_and(|b| b.mlp.down_proj.weight_out_in.is_some())
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
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Parameters one decoding step reads for one row: every projection
    /// and norm, the LM head, and one embedding row.
    pub fn parameters_per_step(&self) -> usize {
        let mut total = self.config.hidden_size + self.norm.weight.numel();
        total += match &self.lm_head {
            Some(head) => head.numel(),
            None => self.embed_tokens.numel(),
        };
        for b in &self.blocks {
            let a = &b.self_attn;
            total += a.qkv_proj.numel() + a.o_proj.numel();
            total += [&a.q_norm, &a.k_norm]
                .into_iter()
                .flatten()
                .map(|n| n.weight.numel())
                .sum::<usize>();
            total += b.mlp.gate_up_proj.numel() + b.mlp.down_proj.numel();
            total += b.input_layernorm.weight.numel() + b.post_attention_layernorm.weight.numel();
        }
        total
    }

    /// Runs `ids` `(b, t)` at `positions` `(b, t)` through the blocks
    /// (writing keys and values into the cache as `pass` says) and returns
    /// the hidden states of the positions `pick` names in the flattened
    /// `(b * t)` rows, as f32 logits `(pick.len(), vocab)`.
    pub(crate) fn forward(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        pass: Pass<'_>,
        pick: Option<&Tensor>,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        let (cos, sin) = self.rope.gather(positions)?;
        let step = Step {
            cos: &cos,
            sin: &sin,
            mask,
            pass,
        };
        let mut x = Tensor::f_embedding(&self.embed_tokens, ids, -1, false, false)?;
        for (layer, block) in self.blocks.iter().enumerate() {
            x = block.forward(&x, &step, cache, layer)?;
        }
        let hidden = x.f_reshape([-1, dim(self.config.hidden_size)])?;
        let last = match pick {
            Some(index) => hidden.f_index_select(0, index)?,
            None => hidden,
        };
        let last = self.norm.forward(&last)?;
        let logits = match &self.lm_head {
            Some(head) => head.forward(&last)?,
            None => last.f_linear::<&Tensor>(&self.embed_tokens, None)?,
        };
        Ok(logits.f_to_kind(Kind::Float)?.f_contiguous()?)
    }

    /// An additive attention mask from the host, in the compute dtype on
    /// the device (converted once per forward pass, not in every layer).
    pub(crate) fn upload_mask(&self, data: &[f32], shape: &[i64]) -> Result<Tensor> {
        let mask = self.upload(data, shape)?;
        Ok(if self.kind == Kind::Float {
            mask
        } else {
            mask.f_to_kind(self.kind)?
        })
    }

    /// Host tensors for the device: `Tensor::from_slice` then a move when
    /// the device is not the CPU.
    pub(crate) fn upload<T: tch::kind::Element>(
        &self,
        data: &[T],
        shape: &[i64],
    ) -> Result<Tensor> {
        let t = Tensor::f_from_slice(data)?.f_view(shape)?;
        Ok(if self.device == Device::Cpu {
            t
        } else {
            t.f_to_device(self.device)?
        })
    }
}
