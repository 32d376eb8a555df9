//! The blocks of the decoder, each with `load` from its weights and a
//! `forward` on candle tensors: the RMS norm (with its row kernels for
//! host buffers), the rotary tables, self-attention with grouped
//! key/value heads, the gated MLP and the pre-norm decoder layer.

use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;

use super::cache::{KvData, SlotCache, attend_host};
use super::weights::{Weights, linear, linear_parts, stacked};
use crate::activation::silu_mul_rows;
use crate::attention::{QueryShape, decode_attention_scratch};
use crate::error::Result;
use crate::proj::{Proj, cpu_f32_slice};
use guidebench_core::model::DecoderConfig;

/// An RMS norm with a learned scale.
#[derive(Debug, Clone)]
pub(super) struct RmsNorm {
    pub(super) weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    pub(super) fn load(w: &Weights, size: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm {
            weight: w.get(size, "weight")?.to_dtype(w.compute_dtype())?,
            eps: eps as f32,
        })
    }

    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.contiguous()?;
        Ok(candle_nn::ops::rms_norm(&x, &self.weight, self.eps)?)
    }

    /// Normalizes each row of `x` into `out` (f32 on the CPU), rows split
    /// over rayon's threads when there are [`PARALLEL_VALUES`] values or
    /// more, with the bits of [`RmsNorm::forward`].
    pub(super) fn rows(&self, x: &[f32], out: &mut [f32]) -> Result<()> {
        let (storage, layout) = self.weight.storage_and_layout();
        let alpha = cpu_f32_slice(&storage, layout)?;
        let n = alpha.len();
        let rows = x.len().min(out.len()) / n.max(1);
        let (x, out) = (&x[..rows * n], &mut out[..rows * n]);
        let block = |(src, dst): (&[f32], &mut [f32])| {
            dst.copy_from_slice(src);
            normalize_rows(dst, alpha, self.eps);
        };
        if x.len() >= PARALLEL_VALUES {
            x.par_chunks(NORM_ROWS * n)
                .zip(out.par_chunks_mut(NORM_ROWS * n))
                .for_each(block);
        } else {
            block((x, out));
        }
        Ok(())
    }

    /// Adds each row of `y` to the row of `x` (the residual addition) and
    /// normalizes the sum into `out`, in blocks of [`NORM_ROWS`] rows so
    /// that the norm reads the sums while they are in the L1 cache; rows
    /// split over rayon's threads as in [`RmsNorm::rows`]. The bits of
    /// [`add_in_place`] then [`RmsNorm::rows`].
    pub(super) fn add_rows(&self, x: &mut [f32], y: &[f32], out: &mut [f32]) -> Result<()> {
        let (storage, layout) = self.weight.storage_and_layout();
        let alpha = cpu_f32_slice(&storage, layout)?;
        let n = alpha.len();
        let rows = x.len().min(y.len()).min(out.len()) / n.max(1);
        let (x, y, out) = (&mut x[..rows * n], &y[..rows * n], &mut out[..rows * n]);
        let block = |((x, y), dst): ((&mut [f32], &[f32]), &mut [f32])| {
            add_in_place(x, y);
            dst.copy_from_slice(x);
            normalize_rows(dst, alpha, self.eps);
        };
        if x.len() >= PARALLEL_VALUES {
            x.par_chunks_mut(NORM_ROWS * n)
                .zip(y.par_chunks(NORM_ROWS * n))
                .zip(out.par_chunks_mut(NORM_ROWS * n))
                .for_each(block);
        } else {
            block(((x, y), out));
        }
        Ok(())
    }

    /// Normalizes each row of `x` in place (f32 on the CPU), with the bits
    /// of [`RmsNorm::forward`].
    pub(super) fn rows_in_place(&self, x: &mut [f32]) -> Result<()> {
        let (storage, layout) = self.weight.storage_and_layout();
        let alpha = cpu_f32_slice(&storage, layout)?;
        normalize_rows(x, alpha, self.eps);
        Ok(())
    }
}

/// Rows whose sums of squares [`normalize_rows`] takes side by side.
const NORM_ROWS: usize = 8;

/// Divides each row of `rows` (`alpha.len()` values each; a partial last
/// row is left as it is) by its root mean square (`eps` added under the
/// root) and scales it by `alpha`, as candle's `rms_norm` does. Each
/// row's squares are summed in order, one after another, as candle sums
/// them (so the same bits); [`NORM_ROWS`] rows' sums run side by side, so
/// that while one row's additions wait on each other the other rows' go
/// on (one row at a time, a decoding step's norms waited on the latency
/// of every addition).
fn normalize_rows(rows: &mut [f32], alpha: &[f32], eps: f32) {
    let n = alpha.len();
    if n == 0 {
        return;
    }
    let mut blocks = rows.chunks_exact_mut(NORM_ROWS * n);
    for block in &mut blocks {
        let mut sums = [0f32; NORM_ROWS];
        for i in 0..n {
            for (r, sum) in sums.iter_mut().enumerate() {
                let v = block[r * n + i];
                *sum += v * v;
            }
        }
        for (row, sum) in block.chunks_exact_mut(n).zip(sums) {
            scale_row(row, alpha, sum, eps);
        }
    }
    for row in blocks.into_remainder().chunks_exact_mut(n) {
        let sum = row.iter().map(|&v| v * v).sum::<f32>();
        scale_row(row, alpha, sum, eps);
    }
}

/// Divides `row` by the root of its mean square (`sum` its squares' sum,
/// `eps` added under the root) and scales it by `alpha`.
fn scale_row(row: &mut [f32], alpha: &[f32], sum: f32, eps: f32) {
    let m = (sum / row.len() as f32 + eps).sqrt();
    for (v, a) in row.iter_mut().zip(alpha) {
        *v = *v / m * *a;
    }
}

/// Elementwise work on fewer values than this (a decoding step's rows)
/// runs on the calling thread: spreading it over rayon's threads costs
/// more than it saves.
pub(super) const PARALLEL_VALUES: usize = 1 << 16;

/// `x += y`, value by value.
pub(super) fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += *b;
    }
}

/// Precomputed rotary tables, gathered per row and position.
#[derive(Debug, Clone)]
pub(super) struct Rope {
    pub(super) cos: Tensor,
    pub(super) sin: Tensor,
}

impl Rope {
    pub(super) fn new(
        cfg: &DecoderConfig,
        max_len: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
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
    pub(super) fn gather(&self, positions: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, t) = positions.dims2()?;
        let flat = positions.flatten_all()?;
        let half = self.cos.dim(1)?;
        let cos = self.cos.index_select(&flat, 0)?.reshape((b, t, half))?;
        let sin = self.sin.index_select(&flat, 0)?.reshape((b, t, half))?;
        Ok((cos, sin))
    }
}

/// Which positions one forward pass adds, and for which slots.
#[derive(Clone, Copy)]
pub(super) enum Pass<'a> {
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
pub(super) struct Step<'a> {
    /// Rotary tables gathered for the new positions, `(b, t, head_dim / 2)`.
    pub(super) cos: &'a Tensor,
    pub(super) sin: &'a Tensor,
    /// Additive f32 mask `(b, 1, 1, t, T)`: for a prefill over the new
    /// positions; for a decoding step that does not take the CPU kernel,
    /// over each row's cached positions padded to the longest.
    pub(super) mask: Option<&'a Tensor>,
    pub(super) pass: Pass<'a>,
}

/// Self-attention with grouped key/value heads.
#[derive(Debug, Clone)]
pub(super) struct Attention {
    /// `q_proj`, `k_proj` and `v_proj` stacked: one projection per step.
    pub(super) qkv_proj: Proj,
    pub(super) o_proj: Proj,
    pub(super) q_norm: Option<RmsNorm>,
    pub(super) k_norm: Option<RmsNorm>,
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
            qkv_proj: stacked(
                w,
                vec![
                    linear_parts(&w.pp("q_proj"), h, nh * hd, cfg.qkv_bias)?,
                    linear_parts(&w.pp("k_proj"), h, nkv * hd, cfg.qkv_bias)?,
                    linear_parts(&w.pp("v_proj"), h, nkv * hd, cfg.qkv_bias)?,
                ],
            )?,
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
        cache: &mut SlotCache,
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
        let shape = QueryShape {
            rows: b,
            kv_heads: nkv,
            rep: nh / nkv,
            head_dim: hd,
            row_stride: nh * hd,
        };
        let longest = lens.iter().max().map_or(1, |len| len + 1);
        let device = q.device().clone();
        let q = q.contiguous()?;
        let (storage, layout) = q.storage_and_layout();
        let q = cpu_f32_slice(&storage, layout)?;
        let mut out = vec![0f32; b * nh * hd];
        let mut scores = vec![0f32; decode_attention_scratch(shape, longest)];
        let slot = |i: usize| (slots[i], lens[i] + 1);
        attend_host(
            cache.kv_dtype,
            &cache.slots,
            &slot,
            layer,
            q,
            shape,
            scale as f32,
            &mut out,
            &mut scores,
        )?;
        Ok(Tensor::from_vec(out, (b, 1, nh * hd), &device)?)
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

/// The cached keys and values of `layer` for each row (`lens[i] + 1`
/// positions), zero-padded to the longest: `(b, kv_heads, T, head_dim)`.
pub(super) fn gather_padded(
    cache: &SlotCache,
    slots: &[usize],
    lens: &[usize],
    layer: usize,
) -> Result<(Tensor, Tensor)> {
    let longest = lens.iter().map(|len| len + 1).max().unwrap_or(1);
    let mut keys = Vec::with_capacity(slots.len());
    let mut values = Vec::with_capacity(slots.len());
    for (&slot, &len) in slots.iter().zip(lens) {
        let KvData::Tensors { keys: k, values: v } = &cache.slot(slot)?.data else {
            return Err(candle_core::Error::Msg(
                "a host cache is read in place, not gathered".into(),
            )
            .into());
        };
        let n = len + 1;
        keys.push(
            k[layer]
                .narrow(2, 0, n)?
                .pad_with_zeros(2, 0, longest - n)?,
        );
        values.push(
            v[layer]
                .narrow(2, 0, n)?
                .pad_with_zeros(2, 0, longest - n)?,
        );
    }
    Ok((Tensor::cat(&keys, 0)?, Tensor::cat(&values, 0)?))
}

/// The gated (SwiGLU) MLP.
#[derive(Debug, Clone)]
pub(super) struct Mlp {
    /// `gate_proj` and `up_proj` stacked: one projection per step.
    pub(super) gate_up_proj: Proj,
    intermediate: usize,
    pub(super) down_proj: Proj,
}

impl Mlp {
    fn load(w: &Weights, cfg: &DecoderConfig) -> Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Mlp {
            gate_up_proj: stacked(
                w,
                vec![
                    linear_parts(&w.pp("gate_proj"), h, i, false)?,
                    linear_parts(&w.pp("up_proj"), h, i, false)?,
                ],
            )?,
            intermediate: i,
            down_proj: linear(&w.pp("down_proj"), i, h, false)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate_up = self.gate_up_proj.forward(x)?;
        let last = gate_up.rank() - 1;
        let i = self.intermediate;
        if gate_up.dtype() == DType::F32 && gate_up.device().is_cpu() {
            // the host path's silu, so that both paths give the same bits
            let gate_up = gate_up.contiguous()?;
            let (storage, layout) = gate_up.storage_and_layout();
            let values = cpu_f32_slice(&storage, layout)?;
            let mut act = vec![0f32; values.len() / 2];
            silu_mul_rows(values, i, &mut act);
            let mut dims = gate_up.dims().to_vec();
            dims[last] = i;
            let act = Tensor::from_vec(act, dims, gate_up.device())?;
            return Ok(self.down_proj.forward(&act)?);
        }
        let gate = candle_nn::ops::silu(&gate_up.narrow(last, 0, i)?)?;
        let up = gate_up.narrow(last, i, i)?;
        Ok(self.down_proj.forward(&(gate * up)?)?)
    }
}

/// One pre-norm decoder block.
#[derive(Debug, Clone)]
pub(super) struct DecoderLayer {
    pub(super) input_layernorm: RmsNorm,
    pub(super) self_attn: Attention,
    pub(super) post_attention_layernorm: RmsNorm,
    pub(super) mlp: Mlp,
}

impl DecoderLayer {
    pub(super) fn load(w: &Weights, cfg: &DecoderConfig) -> Result<Self> {
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

    pub(super) fn forward(
        &self,
        x: &Tensor,
        step: &Step<'_>,
        cache: &mut SlotCache,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norms_of_many_rows_at_once_and_after_the_residual_addition_give_the_expected_bits() {
        // rows in blocks of NORM_ROWS and a remainder, and (4096 values a
        // row) enough values to split the rows over threads
        for (rows, n) in [(1, 48), (7, 48), (8, 48), (9, 48), (33, 48), (17, 4096)] {
            let x: Vec<f32> = (0..rows * n)
                .map(|i| ((i * 7919 % 1000) as f32 * 0.013).sin() * 3.0)
                .collect();
            let alpha: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.01).collect();
            let norm = RmsNorm {
                weight: Tensor::from_vec(alpha, n, &Device::Cpu).expect("weight"),
                eps: 1e-6,
            };
            let input = Tensor::from_vec(x.clone(), (rows, n), &Device::Cpu).expect("input");
            let expected: Vec<f32> = norm
                .forward(&input)
                .and_then(|t| Ok(t.flatten_all()?.to_vec1()?))
                .expect("candle's norm");
            let mut out = vec![0f32; rows * n];
            norm.rows(&x, &mut out).expect("rows");
            let mut in_place = x.clone();
            norm.rows_in_place(&mut in_place).expect("in place");
            for got in [&out, &in_place] {
                let same = got
                    .iter()
                    .zip(&expected)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{rows} rows of {n}: not candle's bits");
            }
            // the residual addition with the norm: the bits of the
            // addition, then the norm
            let y: Vec<f32> = x.iter().map(|v| v * 0.5 - 0.25).collect();
            let mut sum = x.clone();
            add_in_place(&mut sum, &y);
            let mut expected = vec![0f32; rows * n];
            norm.rows(&sum, &mut expected).expect("rows");
            let (mut added, mut fused) = (x.clone(), vec![0f32; rows * n]);
            norm.add_rows(&mut added, &y, &mut fused).expect("add_rows");
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&added), bits(&sum), "{rows} rows of {n}: the sums");
            assert_eq!(
                bits(&fused),
                bits(&expected),
                "{rows} rows of {n}: the norms"
            );
        }
    }
}
