//! The vision side of a LLaVA-style model: a CLIP vision tower and the
//! projector, batched over the images of a prefill.
//!
//! Every image of a prefill group goes through the tower batched, in
//! groups of at most [`ENCODE_GROUP`] (`[images, positions, width]`), the
//! projections on the text decoder's packed kernels: the patch convolution as one matrix
//! product over all patches (a stride-`p` convolution with a `p × p`
//! kernel is a product of the flattened patches by the flattened kernel),
//! the class and position embeddings, `pre_layrnorm`, then the encoder
//! layers up to the deepest selected state (pre-norm attention over all
//! positions, no mask, and the MLP), the class token dropped under the
//! `default` strategy, the selected states concatenated, and the
//! projector `linear_2(act(linear_1(x)))`. It runs in `f32` on the
//! engine's device whatever the checkpoint's dtype (2-byte weights are
//! widened once at load): the tower is a small part of a VLM's weights,
//! and this keeps its features exact. The features come back as rows of
//! the text model's width, in image order, for the decoder to write over
//! the image tokens' embeddings.

use candle_core::{D, DType, Device, Tensor};
use guidebench_core::engine::LoadError;
use guidebench_core::vision::{
    FeatureSelect, PreparedImage, VisionActivation, VisionLanguageConfig,
};

use crate::error::{CandleError, Result};
use crate::model::{Weights, float_linear};
use crate::proj::{Proj, cpu_f32_slice, packs_weights};

/// A linear layer on the engine's packed projection kernels (the text
/// decoder's), `x W^T + b` on rows of host memory.
#[derive(Debug, Clone)]
struct Linear {
    proj: Proj,
    /// Outputs per row.
    n: usize,
}

impl Linear {
    fn load(w: &Weights, rows: usize, cols: usize, bias: bool) -> Result<Self> {
        Ok(Linear {
            proj: float_linear(w, cols, rows, bias)?,
            n: rows,
        })
    }

    /// `x`: `(rows, in)` on the CPU.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
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
struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl LayerNorm {
    fn load(w: &Weights, d: usize, eps: f64) -> Result<Self> {
        Ok(LayerNorm {
            weight: w.get(d, "weight")?.to_dtype(DType::F32)?,
            bias: w.get(d, "bias")?.to_dtype(DType::F32)?,
            eps: eps as f32,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::layer_norm(
            x,
            &self.weight,
            &self.bias,
            self.eps,
        )?)
    }
}

fn activate(act: VisionActivation, x: &Tensor) -> Result<Tensor> {
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

/// One CLIP encoder layer.
#[derive(Debug, Clone)]
struct EncoderLayer {
    norm1: LayerNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

/// Images the tower encodes at once (a prefill's images go through in
/// groups of at most this many).
pub const ENCODE_GROUP: usize = 8;

/// A CLIP vision tower and a LLaVA projector. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct VisionTower {
    /// The flattened patch kernel, transposed: `(3 p p, width)`.
    patch_t: Tensor,
    /// `(1, 1, width)`.
    class: Tensor,
    /// `(1, positions, width)`.
    positions: Tensor,
    pre_norm: LayerNorm,
    layers: Vec<EncoderLayer>,
    proj1: Linear,
    proj2: Linear,
    config: VisionLanguageConfig,
    device: Device,
}

impl VisionTower {
    /// Loads the tower's layers up to the deepest selected state and the
    /// projector, named as `config.weight_names` says.
    pub fn load(w: &Weights, config: &VisionLanguageConfig) -> Result<Self> {
        let c = &config.vision;
        let (d, p, eps) = (c.hidden_size, c.patch_size, c.layer_norm_eps);
        let v = w.pp(&config.weight_names.vision_model);
        let e = v.pp("embeddings");
        let patch = e
            .pp("patch_embedding")
            .get((d, c.num_channels, p, p), "weight")?
            .to_dtype(DType::F32)?
            .reshape((d, c.num_channels * p * p))?;
        let layers = (0..config.layers_to_run())
            .map(|i| {
                let l = v.pp("encoder.layers").pp(i);
                let a = l.pp("self_attn");
                let linear = |name: &str, rows, cols| Linear::load(&a.pp(name), rows, cols, true);
                Ok(EncoderLayer {
                    norm1: LayerNorm::load(&l.pp("layer_norm1"), d, eps)?,
                    q: linear("q_proj", d, d)?,
                    k: linear("k_proj", d, d)?,
                    v: linear("v_proj", d, d)?,
                    out: linear("out_proj", d, d)?,
                    norm2: LayerNorm::load(&l.pp("layer_norm2"), d, eps)?,
                    fc1: Linear::load(&l.pp("mlp.fc1"), c.intermediate_size, d, true)?,
                    fc2: Linear::load(&l.pp("mlp.fc2"), d, c.intermediate_size, true)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let projector = w.pp(&config.weight_names.projector);
        let t = config.text_hidden_size;
        Ok(VisionTower {
            patch_t: patch.t()?.contiguous()?,
            class: e
                .get(d, "class_embedding")?
                .to_dtype(DType::F32)?
                .reshape((1, 1, d))?,
            positions: e
                .pp("position_embedding")
                .get((c.positions(), d), "weight")?
                .to_dtype(DType::F32)?
                .unsqueeze(0)?,
            pre_norm: LayerNorm::load(&v.pp("pre_layrnorm"), d, eps)?,
            layers,
            proj1: Linear::load(
                &projector.pp("linear_1"),
                t,
                config.projector_in(),
                config.projector_bias,
            )?,
            proj2: Linear::load(&projector.pp("linear_2"), t, t, config.projector_bias)?,
            config: config.clone(),
            device: w.device().clone(),
        })
    }

    /// Image tokens per image.
    pub fn tokens_per_image(&self) -> usize {
        self.config.image_tokens()
    }

    /// The projected features of `images`, batched: one row of the text
    /// model's width per image token, image after image, as `f32` values
    /// back to back.
    pub fn encode(&self, images: &[&PreparedImage]) -> Result<Vec<f32>> {
        // Groups small enough that a layer's activations stay near the
        // caches (at ViT-B/16's shape, 8 images are 1,576 rows and an MLP
        // activation 19 MB): 32 images at once ran 4.65 images/s on a
        // 2-core Xeon where groups of 8 ran 5.47 (bench/vision).
        let mut features = Vec::new();
        for group in images.chunks(ENCODE_GROUP) {
            features.extend(self.encode_group(group)?);
        }
        Ok(features)
    }

    /// [`VisionTower::encode`] on one group of images.
    fn encode_group(&self, images: &[&PreparedImage]) -> Result<Vec<f32>> {
        if images.is_empty() {
            return Ok(Vec::new());
        }
        let c = &self.config.vision;
        let (n, s, p, d) = (images.len(), c.image_size, c.patch_size, c.hidden_size);
        let mut pixels = Vec::with_capacity(n * 3 * s * s);
        for image in images {
            if (image.channels, image.height, image.width) != (3, s, s) {
                return Err(candle_core::Error::Msg(format!(
                    "an image of {}×{}×{} for a tower taking 3×{s}×{s}",
                    image.channels, image.height, image.width
                ))
                .into());
            }
            pixels.extend_from_slice(&image.pixels);
        }
        let side = s / p;
        let patches = side * side;
        // (n, 3, side, p, side, p) -> (n, side, side, 3, p, p): each patch's
        // values in the kernel's (channel, row, column) order.
        let x = Tensor::from_vec(pixels, (n, 3, side, p, side, p), &self.device)?
            .permute((0, 2, 4, 1, 3, 5))?
            .contiguous()?
            .reshape((n * patches, 3 * p * p))?
            .matmul(&self.patch_t)?
            .reshape((n, patches, d))?;
        let class = self.class.broadcast_as((n, 1, d))?;
        let x = Tensor::cat(&[&class, &x], 1)?.broadcast_add(&self.positions)?;
        let t = patches + 1;
        let mut x = self.pre_norm.forward(&x.reshape((n * t, d))?)?;
        let mut states = vec![x.clone()];
        for layer in &self.layers {
            x = self.layer(layer, &x, n, t)?;
            states.push(x.clone());
        }
        let skip = usize::from(self.config.feature_select == FeatureSelect::Patches);
        let tokens = t - skip;
        let selected = self
            .config
            .feature_layers
            .iter()
            .map(|&i| states[i].reshape((n, t, d))?.narrow(1, skip, tokens))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let x =
            Tensor::cat(&selected, D::Minus1)?.reshape((n * tokens, self.config.projector_in()))?;
        let x = activate(self.config.projector_act, &self.proj1.forward(&x)?)?;
        let x = self.proj2.forward(&x)?;
        Ok(x.flatten_all()?.to_vec1::<f32>()?)
    }

    /// One encoder layer on `(n t, width)` rows of `n` images.
    fn layer(&self, l: &EncoderLayer, x: &Tensor, n: usize, t: usize) -> Result<Tensor> {
        let c = &self.config.vision;
        let (heads, hd) = (c.num_attention_heads, c.head_dim());
        let h = l.norm1.forward(x)?;
        let split = |y: Tensor| -> candle_core::Result<Tensor> {
            y.reshape((n, t, heads, hd))?.transpose(1, 2)?.contiguous()
        };
        let q = split((l.q.forward(&h)? * (1.0 / (hd as f64).sqrt()))?)?;
        let k = split(l.k.forward(&h)?)?;
        let v = split(l.v.forward(&h)?)?;
        let scores = q.matmul(&k.t()?.contiguous()?)?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let attn = weights
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((n * t, heads * hd))?;
        let x = (x + l.out.forward(&attn)?)?;
        let h = activate(c.hidden_act, &l.fc1.forward(&l.norm2.forward(&x)?)?)?;
        Ok((x + l.fc2.forward(&h)?)?)
    }
}
