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
//! widened: the embeddings and norms once at load, the projections'
//! as the packed kernels read them): the tower is a small part of a
//! VLM's weights, and this keeps its features exact. The features
//! come back as rows of the text model's width, in image order, for the
//! decoder to write over the image tokens' embeddings.

use candle_core::{D, DType, Device, Tensor};
use guidebench_core::vision::{FeatureSelect, PreparedImage, VisionLanguageConfig};

use super::layers::{EncoderLayer, LayerNorm, LayerShape, Linear, activate};
use crate::error::Result;
use crate::model::Weights;

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
        let shape = LayerShape {
            d,
            intermediate: c.intermediate_size,
            heads: c.num_attention_heads,
            eps,
            act: c.hidden_act,
        };
        let layers = (0..config.layers_to_run())
            .map(|i| EncoderLayer::load(&v.pp("encoder.layers").pp(i), shape))
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
            if (image.channels, image.height, image.width) != (3, s, s)
                || image.pixels.len() != 3 * s * s
            {
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
            x = layer.forward(&x, n, t)?;
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
}
