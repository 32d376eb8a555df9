//! The vision side of a LLaVA-style model: a CLIP vision tower and the
//! projector, batched over the images of a prefill.
//!
//! Every image of a prefill group goes through the tower batched, in
//! groups of at most [`ENCODE_GROUP`] (`[images, positions, width]`), the
//! projections on the text decoder's packed kernels, everything on rows
//! of host memory (the layers' host passes: `layers`): the patch
//! convolution as one matrix product over all patches (a stride-`p` convolution with a `p × p`
//! kernel is a product of the flattened patches by the flattened kernel),
//! the class and position embeddings, `pre_layrnorm`, then the encoder
//! layers up to the deepest selected state (pre-norm attention over all
//! positions, no mask, and the MLP), the class token dropped under the
//! `default` strategy, the selected states concatenated, and the
//! projector `linear_2(act(linear_1(x)))`. It runs in `f32` on the CPU
//! whatever the checkpoint's dtype (2-byte weights are
//! widened: the embeddings and norms once at load, the projections'
//! as the packed kernels read them): the tower is a small part of a
//! VLM's weights, and this keeps its features exact. The features
//! come back as rows of the text model's width, in image order, for the
//! decoder to write over the image tokens' embeddings.

use candle_core::{DType, Tensor};
use guidebench_core::vision::{FeatureSelect, PreparedImage, VisionLanguageConfig};

use super::layers::{EncoderLayer, LayerNorm, LayerScratch, LayerShape, Linear, add_rows, gelu_of};
use crate::activation::Gelu;
use crate::error::Result;
use crate::model::Weights;

/// Images the tower encodes at once (a prefill's images go through in
/// groups of at most this many).
pub const ENCODE_GROUP: usize = 8;

/// A CLIP vision tower and a LLaVA projector. See the [vision module docs](crate::vision).
#[derive(Debug, Clone)]
pub struct VisionTower {
    /// The patch convolution as a linear layer: `(width, 3 p p)`.
    patch: Linear,
    /// The class embedding: `width` values.
    class: Vec<f32>,
    /// The position embeddings: `positions × width` values.
    positions: Vec<f32>,
    pre_norm: LayerNorm,
    layers: Vec<EncoderLayer>,
    proj1: Linear,
    proj2: Linear,
    /// The projector's activation.
    projector_act: Gelu,
    /// The encoder layers' shape.
    shape: LayerShape,
    config: VisionLanguageConfig,
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
        let values = |t: Tensor| -> Result<Vec<f32>> {
            Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
        };
        Ok(VisionTower {
            patch: Linear::from_weight(patch, Vec::new())?,
            class: values(e.get(d, "class_embedding")?)?,
            positions: values(
                e.pp("position_embedding")
                    .get((c.positions(), d), "weight")?,
            )?,
            pre_norm: LayerNorm::load(&v.pp("pre_layrnorm"), d, eps)?,
            layers,
            proj1: Linear::load(
                &projector.pp("linear_1"),
                t,
                config.projector_in(),
                config.projector_bias,
            )?,
            proj2: Linear::load(&projector.pp("linear_2"), t, t, config.projector_bias)?,
            projector_act: gelu_of(config.projector_act)?,
            shape,
            config: config.clone(),
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

    /// [`VisionTower::encode`] on one group of images, on rows of host
    /// memory: the patches gathered into rows and multiplied by the
    /// flattened kernel in one product, the class and position
    /// embeddings added, `pre_layrnorm`, the layers in place (the selected
    /// states copied out as they pass), then the projector, its bias and
    /// activation in one pass after `linear_1`.
    fn encode_group(&self, images: &[&PreparedImage]) -> Result<Vec<f32>> {
        if images.is_empty() {
            return Ok(Vec::new());
        }
        let c = &self.config.vision;
        let (n, s, p, d) = (images.len(), c.image_size, c.patch_size, c.hidden_size);
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
        }
        let side = s / p;
        let patches = side * side;
        let rows_of = |i: usize| images[i].pixels.as_slice();
        let flat = gather_patches(n, 3, s, p, rows_of);
        let mut embedded = vec![0f32; n * patches * d];
        self.patch.forward_into(&flat, n * patches, &mut embedded)?;
        let t = patches + 1;
        let mut x = vec![0f32; n * t * d];
        for (frame, emb) in x
            .chunks_exact_mut(t * d)
            .zip(embedded.chunks_exact(patches * d))
        {
            let (class_row, rest) = frame.split_at_mut(d);
            for ((o, c), q) in class_row
                .iter_mut()
                .zip(&self.class)
                .zip(&self.positions[..d])
            {
                *o = *c + *q;
            }
            for ((o, e), q) in rest.iter_mut().zip(emb).zip(&self.positions[d..]) {
                *o = *e + *q;
            }
        }
        let mut normed = vec![0f32; n * t * d];
        self.pre_norm.forward_rows(&x, &mut normed);
        let mut x = normed;
        let layers = &self.config.feature_layers;
        let mut states: Vec<Option<Vec<f32>>> = vec![None; self.layers.len() + 1];
        if layers.contains(&0) {
            states[0] = Some(x.clone());
        }
        let mut scratch = LayerScratch::new(n * t, self.shape);
        for (i, layer) in self.layers.iter().enumerate() {
            layer.forward_rows(&mut x, n, t, &mut scratch)?;
            if layers.contains(&(i + 1)) {
                states[i + 1] = Some(x.clone());
            }
        }
        drop(scratch);
        let skip = usize::from(self.config.feature_select == FeatureSelect::Patches);
        let tokens = t - skip;
        let width = self.config.projector_in();
        let mut selected = vec![0f32; n * tokens * width];
        for (at, &layer) in layers.iter().enumerate() {
            let state = states
                .get(layer)
                .and_then(|s| s.as_ref())
                .ok_or_else(|| candle_core::Error::Msg(format!("no state of layer {layer}")))?;
            for f in 0..n {
                for r in 0..tokens {
                    let src = &state[((f * t) + skip + r) * d..((f * t) + skip + r + 1) * d];
                    let row = (f * tokens + r) * width;
                    selected[row + at * d..row + (at + 1) * d].copy_from_slice(src);
                }
            }
        }
        let text = self.config.text_hidden_size;
        let mut hidden = vec![0f32; n * tokens * text];
        self.proj1
            .forward_act(&selected, n * tokens, self.projector_act, &mut hidden)?;
        let mut out = vec![0f32; n * tokens * text];
        self.proj2.forward_into(&hidden, n * tokens, &mut out)?;
        add_rows(&mut out, self.proj2.bias());
        Ok(out)
    }
}

/// The patches of `n` frames of `channels × size × size` pixels
/// (`frame(i)`: frame `i`'s values) as rows of `channels p p` values in
/// the flattened kernel's (channel, row, column) order, frame after
/// frame, patch rows top to bottom: a stride-`p` convolution with a
/// `p × p` kernel is the product of these rows by the flattened kernel.
pub(super) fn gather_patches<'a>(
    n: usize,
    channels: usize,
    size: usize,
    p: usize,
    frame: impl Fn(usize) -> &'a [f32],
) -> Vec<f32> {
    let side = size / p;
    let width = channels * p * p;
    let mut rows = vec![0f32; n * side * side * width];
    for (f, out) in rows.chunks_exact_mut(side * side * width).enumerate() {
        let pixels = frame(f);
        for (patch, row) in out.chunks_exact_mut(width).enumerate() {
            let (py, px) = (patch / side, patch % side);
            for c in 0..channels {
                for r in 0..p {
                    let at = (c * size + py * p + r) * size + px * p;
                    let to = (c * p + r) * p;
                    row[to..to + p].copy_from_slice(&pixels[at..at + p]);
                }
            }
        }
    }
    rows
}
