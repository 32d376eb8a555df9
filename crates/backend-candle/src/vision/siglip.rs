//! The SigLIP vision tower of SmolVLM (Idefics3): frames in, one state
//! of the tower's width per patch out.
//!
//! As transformers' `SmolVLMVisionTransformer` computes it: the patch
//! convolution (stride = kernel = patch size, with its bias) as one
//! matrix product over the flattened patches of every frame, the learned
//! position embedding added (no class token), the pre-norm encoder
//! layers (attention over a frame's patches, biases on every projection,
//! the MLP with the configured activation), then `post_layernorm`.
//!
//! Frames are always whole tiles here (the processor splits an image
//! into tiles of exactly the tower's `image_size`), so transformers'
//! patch attention mask is all ones: attention needs no mask, and every
//! frame takes the same position ids. Those ids are transformers' own
//! ([`position_ids`]): it buckets fractional patch coordinates against
//! `torch.arange(1/side, 1, 1/side)` in `f32`, which for some sides
//! (19, 25, 29, 31, ...) repeats a position and skips one; the published
//! models' sides (26, 27, 32) give every patch its own row.

use candle_core::{DType, Device, Tensor};
use guidebench_core::vision::SiglipVisionConfig;

use super::layers::{EncoderLayer, LayerNorm, LayerScratch, LayerShape};
use crate::error::Result;
use crate::model::Weights;

/// A SigLIP vision tower. See the [vision module docs](crate::vision).
#[derive(Debug, Clone)]
pub struct SiglipTower {
    /// The flattened patch kernel, transposed: `(3 p p, width)`.
    patch_t: Tensor,
    /// The convolution's bias: `(1, width)`.
    patch_bias: Tensor,
    /// The position embedding of each patch of a whole frame, in patch
    /// order: `(1, patches, width)`.
    positions: Tensor,
    layers: Vec<EncoderLayer>,
    post_norm: LayerNorm,
    config: SiglipVisionConfig,
    device: Device,
}

impl SiglipTower {
    /// Loads the tower from `v` (the vision model's prefix:
    /// `embeddings`, `encoder.layers`, `post_layernorm`), in `f32`.
    pub fn load(v: &Weights, c: &SiglipVisionConfig) -> Result<Self> {
        let (d, p, eps) = (c.hidden_size, c.patch_size, c.layer_norm_eps);
        let e = v.pp("embeddings");
        let conv = e.pp("patch_embedding");
        let patch = conv
            .get((d, c.num_channels, p, p), "weight")?
            .to_dtype(DType::F32)?
            .reshape((d, c.num_channels * p * p))?;
        let ids = position_ids(c.patches_per_side());
        let ids = Tensor::from_vec(ids, c.patches(), v.device())?;
        let positions = e
            .pp("position_embedding")
            .get((c.patches(), d), "weight")?
            .to_dtype(DType::F32)?
            .index_select(&ids, 0)?
            .unsqueeze(0)?;
        let shape = LayerShape {
            d,
            intermediate: c.intermediate_size,
            heads: c.num_attention_heads,
            eps,
            act: c.hidden_act,
        };
        let layers = (0..c.num_hidden_layers)
            .map(|i| EncoderLayer::load(&v.pp("encoder.layers").pp(i), shape))
            .collect::<Result<Vec<_>>>()?;
        Ok(SiglipTower {
            patch_t: patch.t()?.contiguous()?,
            patch_bias: conv.get(d, "bias")?.to_dtype(DType::F32)?.unsqueeze(0)?,
            positions,
            layers,
            post_norm: LayerNorm::load(&v.pp("post_layernorm"), d, eps)?,
            config: c.clone(),
            device: v.device().clone(),
        })
    }

    /// The tower's last states of `n` frames (`pixels`: `[n, 3, size,
    /// size]` back to back): `(n patches, width)`, frame after frame.
    /// The patch product and the embeddings as tensors, then the layers
    /// and `post_layernorm` on rows of host memory.
    pub fn forward(&self, pixels: Vec<f32>, n: usize) -> Result<Tensor> {
        let c = &self.config;
        let (p, d, ch) = (c.patch_size, c.hidden_size, c.num_channels);
        let side = c.patches_per_side();
        let patches = c.patches();
        // (n, 3, side, p, side, p) -> (n, side, side, 3, p, p): each patch's
        // values in the kernel's (channel, row, column) order.
        let x = Tensor::from_vec(pixels, (n, ch, side, p, side, p), &self.device)?
            .permute((0, 2, 4, 1, 3, 5))?
            .contiguous()?
            .reshape((n * patches, ch * p * p))?
            .matmul(&self.patch_t)?
            .broadcast_add(&self.patch_bias)?
            .reshape((n, patches, d))?
            .broadcast_add(&self.positions)?;
        let mut x = x.flatten_all()?.to_vec1::<f32>()?;
        let shape = self.layers.first().map(EncoderLayer::shape);
        if let Some(shape) = shape {
            let mut scratch = LayerScratch::new(n * patches, shape);
            for layer in &self.layers {
                layer.forward_rows(&mut x, n, patches, &mut scratch)?;
            }
        }
        let mut out = vec![0f32; n * patches * d];
        self.post_norm.forward_rows(&x, &mut out);
        Ok(Tensor::from_vec(out, (n * patches, d), &self.device)?)
    }
}

/// The position id of each patch of a whole frame of `side × side`
/// patches, row by row, as transformers' `SmolVLMVisionEmbeddings`
/// computes them on the CPU with an all-ones patch mask: each row's and
/// column's fractional coordinate `i · (1 / side)` (in `f32`, clamped
/// below 1) bucketed (`right=True`) against
/// `torch.arange(1 / side, 1.0, 1 / side)`, then `row · side + column`.
pub fn position_ids(side: usize) -> Vec<u32> {
    let bounds = arange_boundaries(side);
    let step = 1.0f32 / side as f32;
    let bucket = |i: usize| -> usize {
        let x = (i as f32 * step).min(1.0 - 1e-6);
        bounds.iter().filter(|&&b| b <= x).count()
    };
    let buckets: Vec<usize> = (0..side).map(bucket).collect();
    let mut ids = Vec::with_capacity(side * side);
    for &r in &buckets {
        for &c in &buckets {
            ids.push(u32::try_from(r * side + c).unwrap_or(u32::MAX));
        }
    }
    ids
}

/// `torch.arange(1 / side, 1.0, 1 / side)` in `f32` as torch computes it
/// on the CPU: `ceil((1 - step) / step)` values, `start + step · i` in
/// `f64` rounded to `f32`, except that the vectorized kernel fills whole
/// pairs of 8-lane vectors from each vector's rounded first value
/// (`f32(first) + k · step`, in `f64`, rounded). Checked against torch
/// 2.13 for every side from 1 to 199.
fn arange_boundaries(side: usize) -> Vec<f32> {
    const LANES: usize = 8;
    let step = 1.0 / side as f64;
    let len = ((1.0 - step) / step).ceil().max(0.0) as usize;
    let vectorized = len / (2 * LANES) * (2 * LANES);
    (0..len)
        .map(|i| {
            if i < vectorized {
                let first = i / LANES * LANES;
                let base = (step + step * first as f64) as f32;
                (f64::from(base) + (i - first) as f64 * step) as f32
            } else {
                (step + step * i as f64) as f32
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows (and columns) `position_ids` takes for `side`.
    fn buckets(side: usize) -> Vec<u32> {
        position_ids(side)[..side].to_vec()
    }

    #[test]
    fn whole_frames_of_the_published_sides_give_each_patch_its_own_position() {
        for side in [4, 26, 27, 32] {
            let ids = position_ids(side);
            let want: Vec<u32> = (0..(side * side) as u32).collect();
            assert_eq!(ids, want, "side {side}");
        }
    }

    /// torch 2.13's ids (printed by `SmolVLMVisionEmbeddings`' bucketing
    /// on the CPU) where `f32` rounding repeats a position.
    #[test]
    fn sides_where_torch_repeats_a_position_repeat_it_here_too() {
        let mut want19: Vec<u32> = (0..19).collect();
        want19[12] = 11;
        assert_eq!(buckets(19), want19);
        let want25 = [
            0, 1, 2, 3, 4, 4, 6, 7, 8, 8, 9, 10, 11, 12, 14, 14, 16, 17, 17, 19, 19, 21, 22, 22, 24,
        ];
        assert_eq!(buckets(25), want25);
        let want31 = [
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 16, 18, 19, 20, 20, 22, 23,
            24, 24, 26, 27, 28, 28, 30,
        ];
        assert_eq!(buckets(31), want31);
        // Row r, column c: r's bucket times the side plus c's.
        assert_eq!(position_ids(19)[12 * 19 + 12], 11 * 19 + 11);
    }
}
