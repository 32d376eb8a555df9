//! The blocks both vision towers share: a linear layer on the engine's
//! packed kernels, a layer norm, the activations, and the pre-norm
//! encoder layer (CLIP's and SigLIP's are the same block, named the same
//! way: `layer_norm1`, `self_attn.{q,k,v,out}_proj` with biases,
//! `layer_norm2`, `mlp.fc1`, `mlp.fc2`).

use candle_core::{DType, Tensor};
use guidebench_core::engine::LoadError;
use guidebench_core::vision::VisionActivation;

use crate::error::{CandleError, Result};
use crate::model::{Weights, float_linear};
use crate::proj::{Proj, cpu_f32_slice, packs_weights};

/// A linear layer on the engine's packed projection kernels (the text
/// decoder's), `x W^T + b` on rows of host memory.
#[derive(Debug, Clone)]
pub(super) struct Linear {
    proj: Proj,
    /// Outputs per row.
    n: usize,
}

impl Linear {
    /// `weight` `(rows, cols)` and, where `bias`, `bias` `(rows)`.
    pub(super) fn load(w: &Weights, rows: usize, cols: usize, bias: bool) -> Result<Self> {
        Ok(Linear {
            proj: float_linear(w, cols, rows, bias)?,
            n: rows,
        })
    }

    /// `x`: `(rows, in)` on the CPU.
    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.contiguous()?;
        let (rows, _) = x.dims2()?;
        let (storage, layout) = x.storage_and_layout();
        let input = cpu_f32_slice(&storage, layout)?;
        let mut out = vec![0f32; rows * self.n];
        // The plain kernel's transposed scratch, where weights are not
        // packed (CPUs without AVX2).
        let mut scratch = match packs_weights() {
            true => Vec::new(),
            false => vec![0f32; rows * self.n],
        };
        self.proj
            .forward_rows(input, rows, &mut scratch, &mut out)?;
        drop(storage);
        Ok(Tensor::from_vec(out, (rows, self.n), x.device())?)
    }
}

/// A layer norm with its weight and bias in `f32`.
#[derive(Debug, Clone)]
pub(super) struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl LayerNorm {
    /// `weight` and `bias` of width `d`.
    pub(super) fn load(w: &Weights, d: usize, eps: f64) -> Result<Self> {
        Ok(LayerNorm {
            weight: w.get(d, "weight")?.to_dtype(DType::F32)?,
            bias: w.get(d, "bias")?.to_dtype(DType::F32)?,
            eps: eps as f32,
        })
    }

    /// `x`: rows of width `d`.
    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::layer_norm(
            x,
            &self.weight,
            &self.bias,
            self.eps,
        )?)
    }
}

/// `act(x)`, for the activations the towers and projectors name.
pub(super) fn activate(act: VisionActivation, x: &Tensor) -> Result<Tensor> {
    Ok(match act {
        VisionActivation::QuickGelu => (x * candle_nn::ops::sigmoid(&(x * 1.702)?)?)?,
        VisionActivation::Gelu => x.gelu_erf()?,
        VisionActivation::GeluTanh => x.gelu()?,
        other => {
            return Err(CandleError::from(LoadError::InvalidOption {
                key: "model",
                reason: format!("vision activation {other:?} is not implemented"),
            }));
        }
    })
}

/// The shape of an encoder layer.
#[derive(Debug, Clone, Copy)]
pub(super) struct LayerShape {
    /// Width.
    pub d: usize,
    /// MLP width.
    pub intermediate: usize,
    /// Attention heads.
    pub heads: usize,
    /// Epsilon of the layer norms.
    pub eps: f64,
    /// The MLP activation.
    pub act: VisionActivation,
}

/// One pre-norm encoder layer: attention over every position of a frame
/// (no mask, biases on all four projections), then the MLP, each added
/// to its input.
#[derive(Debug, Clone)]
pub(super) struct EncoderLayer {
    norm1: LayerNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    shape: LayerShape,
}

impl EncoderLayer {
    /// The layer under `l` (`encoder.layers.{i}`).
    pub(super) fn load(l: &Weights, shape: LayerShape) -> Result<Self> {
        let (d, eps) = (shape.d, shape.eps);
        let a = l.pp("self_attn");
        let linear = |name: &str| Linear::load(&a.pp(name), d, d, true);
        Ok(EncoderLayer {
            norm1: LayerNorm::load(&l.pp("layer_norm1"), d, eps)?,
            q: linear("q_proj")?,
            k: linear("k_proj")?,
            v: linear("v_proj")?,
            out: linear("out_proj")?,
            norm2: LayerNorm::load(&l.pp("layer_norm2"), d, eps)?,
            fc1: Linear::load(&l.pp("mlp.fc1"), shape.intermediate, d, true)?,
            fc2: Linear::load(&l.pp("mlp.fc2"), d, shape.intermediate, true)?,
            shape,
        })
    }

    /// The layer on `(n t, width)` rows: `n` frames of `t` positions,
    /// each frame attending to its own positions only.
    pub(super) fn forward(&self, x: &Tensor, n: usize, t: usize) -> Result<Tensor> {
        let heads = self.shape.heads;
        let hd = self.shape.d / heads;
        let h = self.norm1.forward(x)?;
        let split = |y: Tensor| -> candle_core::Result<Tensor> {
            y.reshape((n, t, heads, hd))?.transpose(1, 2)?.contiguous()
        };
        let q = split((self.q.forward(&h)? * (1.0 / (hd as f64).sqrt()))?)?;
        let k = split(self.k.forward(&h)?)?;
        let v = split(self.v.forward(&h)?)?;
        let scores = q.matmul(&k.t()?.contiguous()?)?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let attn = weights
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((n * t, heads * hd))?;
        let x = (x + self.out.forward(&attn)?)?;
        let h = activate(self.shape.act, &self.fc1.forward(&self.norm2.forward(&x)?)?)?;
        Ok((x + self.fc2.forward(&h)?)?)
    }
}
