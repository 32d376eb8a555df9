//! The reference of a LLaVA-style model: a CLIP vision tower and the
//! projector in plain loops (`f64` sums), in front of the
//! [`ReferenceModel`] decoder, reading the folder on its own (not through
//! core's config reader, which the engines share).
//!
//! As transformers' `LlavaForConditionalGeneration`: the tower's
//! embeddings (the patch convolution, the class embedding, the position
//! embeddings), `pre_layrnorm`, the encoder layers up to the deepest state
//! of `vision_feature_layer` (state 0 the embeddings after the pre-norm,
//! state `i` the output of layer `i`, negative indexes from the end), the
//! class token dropped under the `default` strategy, the states
//! concatenated, `linear_2(act(linear_1(x)))`, and the projected features
//! written over the prompt's image-token positions in order.

use std::path::Path;

use serde_json::Value;

use super::{GreedyStep, Linear, ReferenceModel, Weights, argmax, dot, read_config, top_two_gap};
use crate::error::{Error, Result};

/// One CLIP encoder layer.
#[derive(Debug, Clone)]
struct VisionLayer {
    ln1: (Vec<f32>, Vec<f32>),
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    ln2: (Vec<f32>, Vec<f32>),
    fc1: Linear,
    fc2: Linear,
}

/// The activations the reference knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    QuickGelu,
    Gelu,
}

impl Act {
    fn read(name: &str, path: &Path) -> Result<Self> {
        match name {
            "quick_gelu" => Ok(Act::QuickGelu),
            "gelu" => Ok(Act::Gelu),
            other => Err(Error::InvalidConfig {
                path: path.to_owned(),
                reason: format!("activation `{other}` is not implemented (quick_gelu, gelu)"),
            }),
        }
    }

    fn apply(self, x: f32) -> f32 {
        let x = f64::from(x);
        let y = match self {
            Act::QuickGelu => x / (1.0 + (-1.702 * x).exp()),
            Act::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        };
        y as f32
    }
}

/// The error function in `f64` to about 1e-15: its Taylor series near
/// zero, the continued fraction of `erfc` beyond.
fn erf(x: f64) -> f64 {
    let z = x.abs();
    let value = if z < 3.0 {
        // erf z = 2/sqrt(pi) * sum (-1)^n z^(2n+1) / (n! (2n+1))
        let (mut term, mut sum, mut n) = (z, z, 0.0);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -z * z / n;
            sum += term / (2.0 * n + 1.0);
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        // erfc z = exp(-z²)/sqrt(pi) * 1/(z + 1/2/(z + 1/(z + 3/2/(z + ...))))
        let mut f = z;
        for k in (1..60).rev() {
            f = z + f64::from(k) / 2.0 / f;
        }
        1.0 - (-z * z).exp() / std::f64::consts::PI.sqrt() / f
    };
    if x < 0.0 { -value } else { value }
}

/// A CLIP vision tower and a LLaVA projector in plain loops.
#[derive(Debug, Clone)]
pub struct ReferenceVision {
    hidden: usize,
    heads: usize,
    image_size: usize,
    patch: usize,
    eps: f64,
    act: Act,
    patch_weight: Vec<f32>,
    class: Vec<f32>,
    positions: Vec<f32>,
    pre_norm: (Vec<f32>, Vec<f32>),
    layers: Vec<VisionLayer>,
    feature_layers: Vec<usize>,
    keep_class: bool,
    proj1: Linear,
    proj2: Linear,
    proj_act: Act,
}

fn layer_norm(x: &[f32], (w, b): &(Vec<f32>, Vec<f32>), eps: f64) -> Vec<f32> {
    let n = x.len() as f64;
    let mean = x.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
    let var = x
        .iter()
        .map(|v| (f64::from(*v) - mean).powi(2))
        .sum::<f64>()
        / n;
    let r = 1.0 / (var + eps).sqrt();
    x.iter()
        .zip(w.iter().zip(b))
        .map(|(v, (w, b))| ((f64::from(*v) - mean) * r * f64::from(*w) + f64::from(*b)) as f32)
        .collect()
}

fn apply(linear: &Linear, x: &[f32]) -> Vec<f32> {
    super::matvec_rows(&linear.weight, linear.bias.as_deref(), x)
}

impl ReferenceVision {
    fn load(config: &Value, path: &Path, weights: &mut Weights, v5: bool) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidConfig {
            path: path.to_owned(),
            reason,
        };
        let vc = &config["vision_config"];
        let size = |key: &str| -> Result<usize> {
            vc[key]
                .as_u64()
                .and_then(|v| usize::try_from(v).ok())
                .filter(|v| *v > 0)
                .ok_or_else(|| invalid(format!("`vision_config.{key}` is missing")))
        };
        let (d, inter, n_layers, heads) = (
            size("hidden_size")?,
            size("intermediate_size")?,
            size("num_hidden_layers")?,
            size("num_attention_heads")?,
        );
        let (image_size, patch) = (size("image_size")?, size("patch_size")?);
        let text_hidden = config["text_config"]["hidden_size"]
            .as_u64()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| invalid("`text_config.hidden_size` is missing".into()))?;
        let states = n_layers + 1;
        let index = |v: &Value| -> Result<usize> {
            let i = v
                .as_i64()
                .ok_or_else(|| invalid(format!("`vision_feature_layer` {v}")))?;
            let i = if i < 0 { states as i64 + i } else { i };
            usize::try_from(i)
                .ok()
                .filter(|&i| i < states)
                .ok_or_else(|| invalid(format!("`vision_feature_layer` {v} is out of range")))
        };
        let feature_layers = match &config["vision_feature_layer"] {
            Value::Array(list) => list.iter().map(index).collect::<Result<Vec<_>>>()?,
            Value::Null => vec![index(&Value::from(-2))?],
            v => vec![index(v)?],
        };
        let keep_class = match config["vision_feature_select_strategy"].as_str() {
            None | Some("default") => false,
            Some("full") => true,
            Some(other) => return Err(invalid(format!("strategy `{other}`"))),
        };
        let act = Act::read(vc["hidden_act"].as_str().unwrap_or("quick_gelu"), path)?;
        let proj_act = Act::read(
            config["projector_hidden_act"].as_str().unwrap_or("gelu"),
            path,
        )?;
        let bias = config["multimodal_projector_bias"]
            .as_bool()
            .unwrap_or(true);
        let (vision, projector) = if v5 {
            (
                "model.vision_tower.vision_model",
                "model.multi_modal_projector",
            )
        } else {
            ("vision_tower.vision_model", "multi_modal_projector")
        };
        let mut norm = |name: &str| -> Result<(Vec<f32>, Vec<f32>)> {
            Ok((
                weights.take(&format!("{name}.weight"), &[d])?,
                weights.take(&format!("{name}.bias"), &[d])?,
            ))
        };
        let pre_norm = norm(&format!("{vision}.pre_layrnorm"))?;
        let deepest = feature_layers.iter().copied().max().unwrap_or(0);
        let mut layers = Vec::with_capacity(deepest);
        for l in 0..deepest {
            let at = format!("{vision}.encoder.layers.{l}");
            let mut norm = |name: &str| -> Result<(Vec<f32>, Vec<f32>)> {
                Ok((
                    weights.take(&format!("{at}.{name}.weight"), &[d])?,
                    weights.take(&format!("{at}.{name}.bias"), &[d])?,
                ))
            };
            let (ln1, ln2) = (norm("layer_norm1")?, norm("layer_norm2")?);
            let mut linear =
                |name: &str, rows, cols| weights.linear(&format!("{at}.{name}"), rows, cols, true);
            layers.push(VisionLayer {
                ln1,
                q: linear("self_attn.q_proj", d, d)?,
                k: linear("self_attn.k_proj", d, d)?,
                v: linear("self_attn.v_proj", d, d)?,
                o: linear("self_attn.out_proj", d, d)?,
                ln2,
                fc1: linear("mlp.fc1", inter, d)?,
                fc2: linear("mlp.fc2", d, inter)?,
            });
        }
        let positions = (image_size / patch).pow(2) + 1;
        let projector_in = d * feature_layers.len();
        Ok(ReferenceVision {
            hidden: d,
            heads,
            image_size,
            patch,
            eps: vc["layer_norm_eps"].as_f64().unwrap_or(1e-5),
            act,
            patch_weight: weights.take(
                &format!("{vision}.embeddings.patch_embedding.weight"),
                &[d, 3, patch, patch],
            )?,
            class: weights.take(&format!("{vision}.embeddings.class_embedding"), &[d])?,
            positions: weights.take(
                &format!("{vision}.embeddings.position_embedding.weight"),
                &[positions, d],
            )?,
            pre_norm,
            layers,
            feature_layers,
            keep_class,
            proj1: weights.linear(
                &format!("{projector}.linear_1"),
                text_hidden,
                projector_in,
                bias,
            )?,
            proj2: weights.linear(
                &format!("{projector}.linear_2"),
                text_hidden,
                text_hidden,
                bias,
            )?,
            proj_act,
        })
    }

    /// Prompt positions one image takes.
    pub fn image_tokens(&self) -> usize {
        (self.image_size / self.patch).pow(2) + usize::from(self.keep_class)
    }

    /// The projected features of one image (`pixels`: `[3, size, size]`
    /// channel-major, already prepared), one row per image token.
    ///
    /// # Panics
    ///
    /// If `pixels` is not `3 * size * size` long.
    pub fn features(&self, pixels: &[f32]) -> Vec<Vec<f32>> {
        let (s, p, d) = (self.image_size, self.patch, self.hidden);
        assert_eq!(pixels.len(), 3 * s * s, "pixels of a {s}×{s} RGB image");
        let side = s / p;
        // Embeddings: the class embedding, then each patch's convolution.
        let mut xs: Vec<Vec<f32>> = vec![self.class.clone()];
        for py in 0..side {
            for px in 0..side {
                let mut patch = Vec::with_capacity(3 * p * p);
                for c in 0..3 {
                    for ky in 0..p {
                        for kx in 0..p {
                            patch.push(pixels[c * s * s + (py * p + ky) * s + px * p + kx]);
                        }
                    }
                }
                xs.push(super::matvec_rows(&self.patch_weight, None, &patch));
            }
        }
        for (i, x) in xs.iter_mut().enumerate() {
            for (v, pos) in x.iter_mut().zip(&self.positions[i * d..(i + 1) * d]) {
                *v += pos;
            }
        }
        let mut states = vec![
            xs.iter()
                .map(|x| layer_norm(x, &self.pre_norm, self.eps))
                .collect::<Vec<_>>(),
        ];
        for layer in &self.layers {
            let x = states.last().cloned().unwrap_or_default();
            states.push(self.layer(layer, x));
        }
        let skip = usize::from(!self.keep_class);
        let rows = states[0].len() - skip;
        (0..rows)
            .map(|r| {
                let input: Vec<f32> = self
                    .feature_layers
                    .iter()
                    .flat_map(|&l| states[l][r + skip].iter().copied())
                    .collect();
                let hidden: Vec<f32> = apply(&self.proj1, &input)
                    .into_iter()
                    .map(|v| self.proj_act.apply(v))
                    .collect();
                apply(&self.proj2, &hidden)
            })
            .collect()
    }

    fn layer(&self, layer: &VisionLayer, mut xs: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        let hd = self.hidden / self.heads;
        let normed: Vec<Vec<f32>> = xs
            .iter()
            .map(|x| layer_norm(x, &layer.ln1, self.eps))
            .collect();
        let qs: Vec<Vec<f32>> = normed.iter().map(|x| apply(&layer.q, x)).collect();
        let ks: Vec<Vec<f32>> = normed.iter().map(|x| apply(&layer.k, x)).collect();
        let vs: Vec<Vec<f32>> = normed.iter().map(|x| apply(&layer.v, x)).collect();
        let scale = 1.0 / (hd as f64).sqrt();
        for (i, x) in xs.iter_mut().enumerate() {
            let mut attn = vec![0f32; self.hidden];
            for h in 0..self.heads {
                let q = &qs[i][h * hd..(h + 1) * hd];
                let scores: Vec<f64> = ks
                    .iter()
                    .map(|k| dot(q, &k[h * hd..(h + 1) * hd]) * scale)
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = exps.iter().sum();
                for j in 0..hd {
                    let acc: f64 = vs
                        .iter()
                        .zip(&exps)
                        .map(|(v, e)| e / total * f64::from(v[h * hd + j]))
                        .sum();
                    attn[h * hd + j] = acc as f32;
                }
            }
            for (x, o) in x.iter_mut().zip(apply(&layer.o, &attn)) {
                *x += o;
            }
            let n = layer_norm(x, &layer.ln2, self.eps);
            let up: Vec<f32> = apply(&layer.fc1, &n)
                .into_iter()
                .map(|v| self.act.apply(v))
                .collect();
            for (x, m) in x.iter_mut().zip(apply(&layer.fc2, &up)) {
                *x += m;
            }
        }
        xs
    }
}

/// A LLaVA-style model in plain loops: [`ReferenceVision`] in front of
/// [`ReferenceModel`]. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct ReferenceLlava {
    text: ReferenceModel,
    vision: ReferenceVision,
    image_token: u32,
}

impl ReferenceLlava {
    /// Reads a LLaVA folder (`config.json` with `text_config` and
    /// `vision_config`, safetensors weights named as transformers 4 or 5
    /// saves them).
    pub fn load(dir: &Path) -> Result<Self> {
        let (config, path) = read_config(dir)?;
        let mut weights = Weights::read(dir)?;
        let v5 = weights.contains("model.language_model.embed_tokens.weight");
        let (body, head) = if v5 {
            ("model.language_model", "lm_head")
        } else {
            ("language_model.model", "language_model.lm_head")
        };
        let mut text_config = config["text_config"].clone();
        if let Some(obj) = text_config.as_object_mut() {
            obj.entry("model_type").or_insert_with(|| "llama".into());
        }
        let text = ReferenceModel::from_parts(&text_config, &path, &mut weights, body, head)?;
        let vision = ReferenceVision::load(&config, &path, &mut weights, v5)?;
        let image_token = config["image_token_index"]
            .as_u64()
            .or_else(|| config["image_token_id"].as_u64())
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| Error::InvalidConfig {
                path: path.clone(),
                reason: "`image_token_index` is missing".into(),
            })?;
        Ok(ReferenceLlava {
            text,
            vision,
            image_token,
        })
    }

    /// The text model.
    pub fn text(&self) -> &ReferenceModel {
        &self.text
    }

    /// The vision tower and projector.
    pub fn vision(&self) -> &ReferenceVision {
        &self.vision
    }

    /// The image token's id.
    pub fn image_token(&self) -> u32 {
        self.image_token
    }

    /// `prompt` (with one image token per image) with each image token
    /// expanded into as many as the image takes.
    pub fn expand(&self, prompt: &[u32], images: usize) -> Vec<u32> {
        let n = self.vision.image_tokens();
        let mut out = Vec::new();
        let mut left = images;
        for &t in prompt {
            if t == self.image_token && left > 0 {
                out.extend(std::iter::repeat_n(t, n));
                left -= 1;
            } else {
                out.push(t);
            }
        }
        out
    }

    /// The input rows of an expanded prompt: token embeddings, and the
    /// features of `images` (prepared pixels, in order) over the
    /// image-token positions.
    ///
    /// # Panics
    ///
    /// If the image tokens are not `images.len()` runs of the image's
    /// token count.
    pub fn input_rows(&self, tokens: &[u32], images: &[&[f32]]) -> Vec<Vec<f32>> {
        let mut features = images
            .iter()
            .flat_map(|pixels| self.vision.features(pixels))
            .collect::<Vec<_>>()
            .into_iter();
        let rows: Vec<Vec<f32>> = tokens
            .iter()
            .map(|&t| {
                if t == self.image_token {
                    features
                        .next()
                        .expect("no more image features than image tokens")
                } else {
                    self.text.embedding(t)
                }
            })
            .collect();
        assert!(
            features.next().is_none(),
            "as many image tokens as features"
        );
        rows
    }

    /// `n` greedy tokens after the expanded prompt `tokens` with `images`,
    /// with the top-two gap of each step (no stopping at EOS).
    pub fn greedy_steps(&self, tokens: &[u32], images: &[&[f32]], n: usize) -> Vec<GreedyStep> {
        let mut rows = self.input_rows(tokens, images);
        let mut steps = Vec::with_capacity(n);
        for _ in 0..n {
            let logits = self.text.logits_of_rows(rows.clone());
            let token = argmax(&logits);
            rows.push(self.text.embedding(token));
            steps.push(GreedyStep {
                token,
                gap: top_two_gap(&logits).unwrap_or(f32::INFINITY),
            });
        }
        steps
    }

    /// The first step's logits after the expanded prompt with `images`.
    pub fn logits(&self, tokens: &[u32], images: &[&[f32]]) -> Vec<f32> {
        self.text.logits_of_rows(self.input_rows(tokens, images))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_agrees_with_known_values() {
        for (x, want) in [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.5, 0.999_593_047_982_555),
            (3.5, 0.999_999_256_901_627_7),
        ] {
            assert!((erf(x) - want).abs() < 1e-14, "erf({x}) = {}", erf(x));
            assert!((erf(-x) + want).abs() < 1e-14);
        }
    }
}
