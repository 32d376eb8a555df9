//! A plain reference forward pass: the ground truth engines are checked
//! against.
//!
//! [`ReferenceModel`] runs a Llama-family decoder (Llama, Mistral, Qwen2,
//! Qwen3) with straightforward loops over `f32` weights, summing in `f64`,
//! one position at a time and with no cache: slow, but short enough to
//! read in one sitting and free of any engine's kernels. It reads an
//! ordinary Hugging Face model folder, the kind
//! [`write_llama_fixture`](crate::fixtures::write_llama_fixture) writes:
//!
//! - `config.json` in the transformers 4 layout (`rope_theta`) or the
//!   transformers 5 layout (`rope_parameters.rope_theta`), with an optional
//!   `head_dim`, q/k/v biases (`qwen2`, or `attention_bias: true`), per-head
//!   q/k RMS norms (`qwen3`) and tied embeddings (`tie_word_embeddings`);
//! - `model.safetensors`, or shards listed in
//!   `model.safetensors.index.json`, with F32 weights, or BF16 and F16
//!   weights, upcast exactly to `f32` (so a bf16 checkpoint's reference is
//!   the same weights computed in `f32`).
//!
//! What it does not implement it rejects at [`ReferenceModel::load`]
//! rather than computing something else: RoPE scaling of any kind
//! (including `llama3`), activations other than SiLU, MLP biases and
//! weights in other dtypes. Sliding-window attention is ignored, which is
//! exact as long as sequences are shorter than the window.
//!
//! ```no_run
//! use guidebench_testkit::reference::{ReferenceModel, top_two_gap};
//!
//! let model = ReferenceModel::load("path/to/model".as_ref())?;
//! let logits = model.logits(&[5, 6, 7]);
//! assert!(top_two_gap(&logits).is_some_and(|gap| gap > 1e-3));
//! let continuation = model.greedy(&[5, 6, 7], 8);
//! assert_eq!(continuation.len(), 8);
//! # Ok::<(), guidebench_testkit::Error>(())
//! ```

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Result};

pub mod llava;
pub use llava::{ReferenceLlava, ReferenceVision};

/// A decoder-only transformer held as plain `f32` vectors, computing
/// logits with simple loops. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct ReferenceModel {
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    vocab: usize,
    eps: f64,
    theta: f64,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    /// `None` when the head is tied to the embeddings.
    lm_head: Option<Vec<f32>>,
    /// Round every matrix-vector product's input to 8-bit blocks of this
    /// many values ([`ReferenceModel::with_activation_blocks`]).
    activation_block: Option<usize>,
}

/// One greedy decoding step of [`ReferenceModel::greedy_steps`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GreedyStep {
    /// The token picked: the largest logit (the lowest id among equal ones).
    pub token: u32,
    /// The largest logit minus the second largest, at this step.
    pub gap: f32,
}

/// A weight matrix `[rows, cols]` (row-major) with an optional bias.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    pub(crate) weight: Vec<f32>,
    pub(crate) bias: Option<Vec<f32>>,
}

#[derive(Debug, Clone)]
struct Layer {
    input_norm: Vec<f32>,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    /// Per-head RMS norms on queries and keys (Qwen3).
    qk_norm: Option<(Vec<f32>, Vec<f32>)>,
    post_norm: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl ReferenceModel {
    /// Reads `dir/config.json` and the model's safetensors weights.
    ///
    /// Fails, naming the file and key or tensor, if the config lacks a
    /// field, asks for something the reference does not implement, or a
    /// weight is missing, has the wrong shape or is not F32, BF16 or F16.
    pub fn load(dir: &Path) -> Result<Self> {
        let (config, config_path) = read_config(dir)?;
        let mut weights = Weights::read(dir)?;
        ReferenceModel::from_parts(&config, &config_path, &mut weights, "model", "lm_head")
    }

    /// The decoder of `config` from `weights`, its body under `body`
    /// (`model`) and its head named `head` (`lm_head`).
    pub(crate) fn from_parts(
        config: &Value,
        config_path: &Path,
        weights: &mut Weights,
        body: &str,
        head: &str,
    ) -> Result<Self> {
        let c = Config::read(config, config_path)?;
        let (h, hd, inter) = (c.hidden, c.head_dim, c.inter);
        let (q_rows, kv_rows) = (c.heads * hd, c.kv_heads * hd);
        let embed = weights.take(&format!("{body}.embed_tokens.weight"), &[c.vocab, h])?;
        let mut layers = Vec::with_capacity(c.layers);
        for l in 0..c.layers {
            let p = format!("{body}.layers.{l}");
            let mut linear = |name: &str, rows, cols, bias| {
                weights.linear(&format!("{p}.{name}"), rows, cols, bias)
            };
            let q = linear("self_attn.q_proj", q_rows, h, c.qkv_bias)?;
            let k = linear("self_attn.k_proj", kv_rows, h, c.qkv_bias)?;
            let v = linear("self_attn.v_proj", kv_rows, h, c.qkv_bias)?;
            let o = linear("self_attn.o_proj", h, q_rows, false)?;
            let gate = linear("mlp.gate_proj", inter, h, false)?;
            let up = linear("mlp.up_proj", inter, h, false)?;
            let down = linear("mlp.down_proj", h, inter, false)?;
            let qk_norm = if c.qk_norm {
                Some((
                    weights.take(&format!("{p}.self_attn.q_norm.weight"), &[hd])?,
                    weights.take(&format!("{p}.self_attn.k_norm.weight"), &[hd])?,
                ))
            } else {
                None
            };
            layers.push(Layer {
                input_norm: weights.take(&format!("{p}.input_layernorm.weight"), &[h])?,
                q,
                k,
                v,
                o,
                qk_norm,
                post_norm: weights.take(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                gate,
                up,
                down,
            });
        }
        let norm = weights.take(&format!("{body}.norm.weight"), &[h])?;
        let lm_head = if c.tied {
            None
        } else {
            Some(weights.take(&format!("{head}.weight"), &[c.vocab, h])?)
        };
        Ok(ReferenceModel {
            hidden: h,
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: hd,
            vocab: c.vocab,
            eps: c.eps,
            theta: c.theta,
            embed,
            layers,
            norm,
            lm_head,
            activation_block: None,
        })
    }

    /// This model with the input of every matrix-vector product rounded
    /// to 8-bit integers in blocks of `block` values, one scale per block
    /// (the largest magnitude over 127), as engines on quantized weights
    /// round their activations before the integer dot products (llama.cpp
    /// and candle: blocks of 32 beside `Q8_0` weights, `Q8_K` blocks of 256
    /// beside K-quants). Not a reference: a stand-in for such an engine, to
    /// see how far from the reference its logits may drift.
    pub fn with_activation_blocks(mut self, block: usize) -> Self {
        self.activation_block = Some(block.max(1));
        self
    }

    /// `W x (+ b)`, `x` rounded first if activations are rounded.
    fn project(&self, weight: &[f32], bias: Option<&[f32]>, x: &[f32]) -> Vec<f32> {
        match self.activation_block {
            None => matvec_rows(weight, bias, x),
            Some(block) => matvec_rows(weight, bias, &round_blocks(x, block)),
        }
    }

    fn linear(&self, linear: &Linear, x: &[f32]) -> Vec<f32> {
        self.project(&linear.weight, linear.bias.as_deref(), x)
    }

    /// The number of logits per position (`vocab_size` of the config).
    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// The logits of the next token after `tokens` (the last position
    /// only), one per vocabulary entry.
    ///
    /// # Panics
    ///
    /// If `tokens` is empty or holds an id `>= vocab_size()`.
    pub fn logits(&self, tokens: &[u32]) -> Vec<f32> {
        let states = self.hidden_states(tokens);
        let last = states.last().map(Vec::as_slice).unwrap_or_default();
        self.head(last)
    }

    /// The logits after every prefix of `tokens`: row `i` is what
    /// [`logits`](Self::logits) gives for `tokens[..=i]` (one pass, as a
    /// causal model computes them), for checking a whole continuation
    /// teacher-forced.
    ///
    /// # Panics
    ///
    /// As [`logits`](Self::logits).
    pub fn logits_per_position(&self, tokens: &[u32]) -> Vec<Vec<f32>> {
        self.hidden_states(tokens)
            .iter()
            .map(|x| self.head(x))
            .collect()
    }

    /// The final norm and the LM head on one position's hidden state.
    fn head(&self, x: &[f32]) -> Vec<f32> {
        let x = rms(x, &self.norm, self.eps);
        // a tied head reads the embedding matrix
        let head = self.lm_head.as_deref().unwrap_or(&self.embed);
        self.project(head, None, &x)
    }

    /// The embedding row of `token`.
    ///
    /// # Panics
    ///
    /// If `token >= vocab_size()`.
    pub fn embedding(&self, token: u32) -> Vec<f32> {
        let (t, h) = (token as usize, self.hidden);
        assert!(t < self.vocab, "token {t} is outside the vocabulary");
        self.embed[t * h..(t + 1) * h].to_vec()
    }

    /// The model width.
    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// The hidden state of every position after the last layer.
    fn hidden_states(&self, tokens: &[u32]) -> Vec<Vec<f32>> {
        assert!(!tokens.is_empty(), "the reference needs at least one token");
        let xs = tokens.iter().map(|&t| self.embedding(t)).collect();
        self.hidden_states_of(xs)
    }

    /// The logits of the next token after a prompt given as its input
    /// rows (embeddings, or features in their place).
    ///
    /// # Panics
    ///
    /// If `rows` is empty or a row is not `hidden_size()` wide.
    pub fn logits_of_rows(&self, rows: Vec<Vec<f32>>) -> Vec<f32> {
        let states = self.hidden_states_of(rows);
        let last = states.last().map(Vec::as_slice).unwrap_or_default();
        self.head(last)
    }

    /// The hidden state of every position after the last layer, from the
    /// input rows.
    fn hidden_states_of(&self, mut xs: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        assert!(!xs.is_empty(), "the reference needs at least one position");
        assert!(
            xs.iter().all(|x| x.len() == self.hidden),
            "every input row is hidden_size wide"
        );
        let hd = self.head_dim;
        let group = self.heads / self.kv_heads;
        for layer in &self.layers {
            // queries, keys and values of every position, RoPE applied
            let mut qs = Vec::with_capacity(xs.len());
            let mut ks = Vec::with_capacity(xs.len());
            let mut vs = Vec::with_capacity(xs.len());
            for (pos, x) in xs.iter().enumerate() {
                let n = rms(x, &layer.input_norm, self.eps);
                let mut q = self.linear(&layer.q, &n);
                let mut k = self.linear(&layer.k, &n);
                let v = self.linear(&layer.v, &n);
                for head in q.chunks_mut(hd) {
                    if let Some((q_norm, _)) = &layer.qk_norm {
                        let normed = rms(head, q_norm, self.eps);
                        head.copy_from_slice(&normed);
                    }
                    self.rope(head, pos);
                }
                for head in k.chunks_mut(hd) {
                    if let Some((_, k_norm)) = &layer.qk_norm {
                        let normed = rms(head, k_norm, self.eps);
                        head.copy_from_slice(&normed);
                    }
                    self.rope(head, pos);
                }
                qs.push(q);
                ks.push(k);
                vs.push(v);
            }
            for (pos, x) in xs.iter_mut().enumerate() {
                // causal attention: position `pos` sees positions 0..=pos
                let mut attn = vec![0f32; self.heads * hd];
                for head in 0..self.heads {
                    let kvh = head / group;
                    let q = &qs[pos][head * hd..(head + 1) * hd];
                    let scores: Vec<f64> = ks[..=pos]
                        .iter()
                        .map(|k| dot(q, &k[kvh * hd..(kvh + 1) * hd]) / (hd as f64).sqrt())
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = exps.iter().sum();
                    for d in 0..hd {
                        let mut acc = 0f64;
                        for (v, e) in vs.iter().zip(&exps) {
                            acc += e / total * f64::from(v[kvh * hd + d]);
                        }
                        attn[head * hd + d] = acc as f32;
                    }
                }
                let o = self.linear(&layer.o, &attn);
                for (x, o) in x.iter_mut().zip(o) {
                    *x += o;
                }
                // SwiGLU MLP
                let n = rms(x, &layer.post_norm, self.eps);
                let gate = self.linear(&layer.gate, &n);
                let up = self.linear(&layer.up, &n);
                let act: Vec<f32> = gate
                    .iter()
                    .zip(&up)
                    .map(|(g, u)| (f64::from(*g) / (1.0 + (-f64::from(*g)).exp())) as f32 * u)
                    .collect();
                let down = self.linear(&layer.down, &act);
                for (x, d) in x.iter_mut().zip(down) {
                    *x += d;
                }
            }
        }
        xs
    }

    /// `n` tokens of greedy continuation of `prompt`, with no stopping at
    /// an EOS token.
    ///
    /// # Panics
    ///
    /// As [`logits`](Self::logits).
    pub fn greedy(&self, prompt: &[u32], n: usize) -> Vec<u32> {
        self.greedy_steps(prompt, n)
            .into_iter()
            .map(|s| s.token)
            .collect()
    }

    /// [`greedy`](Self::greedy), with the top-two logit gap of each step,
    /// to check that float noise cannot flip a pick.
    ///
    /// # Panics
    ///
    /// As [`logits`](Self::logits).
    pub fn greedy_steps(&self, prompt: &[u32], n: usize) -> Vec<GreedyStep> {
        let mut tokens = prompt.to_vec();
        let mut steps = Vec::with_capacity(n);
        for _ in 0..n {
            let logits = self.logits(&tokens);
            let token = argmax(&logits);
            tokens.push(token);
            steps.push(GreedyStep {
                token,
                gap: top_two_gap(&logits).unwrap_or(f32::INFINITY),
            });
        }
        steps
    }

    /// Rotates one head's vector by its position, in the "rotate half"
    /// layout of Hugging Face Llama (pairs `i` and `i + d/2`).
    fn rope(&self, x: &mut [f32], pos: usize) {
        let d = x.len();
        for i in 0..d / 2 {
            let freq = 1.0 / self.theta.powf(2.0 * i as f64 / d as f64);
            let (s, c) = (pos as f64 * freq).sin_cos();
            let (a, b) = (f64::from(x[i]), f64::from(x[i + d / 2]));
            x[i] = (a * c - b * s) as f32;
            x[i + d / 2] = (a * s + b * c) as f32;
        }
    }
}

/// The index of the largest entry (the lowest index among equal ones);
/// 0 for an empty slice.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in logits.iter().enumerate() {
        if *v > logits[best] {
            best = i;
        }
    }
    u32::try_from(best).unwrap_or(u32::MAX)
}

/// The largest logit minus the second largest (0 when the largest value
/// occurs twice); `None` for fewer than two logits.
pub fn top_two_gap(logits: &[f32]) -> Option<f32> {
    if logits.len() < 2 {
        return None;
    }
    let (mut first, mut second) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in logits {
        if v > first {
            second = first;
            first = v;
        } else if v > second {
            second = v;
        }
    }
    Some(first - second)
}

pub(crate) fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(a, b)| f64::from(*a) * f64::from(*b))
        .sum()
}

/// `x` rounded to 8-bit integers in blocks of `block` values, each block
/// scaled by its largest magnitude over 127 (a last block may be short).
fn round_blocks(x: &[f32], block: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for chunk in x.chunks(block) {
        let amax = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
        if amax == 0.0 {
            out.extend(chunk.iter().map(|_| 0f32));
            continue;
        }
        let d = amax / 127.0;
        out.extend(
            chunk
                .iter()
                .map(|v| (v / d).round().clamp(-127.0, 127.0) * d),
        );
    }
    out
}

pub(crate) fn matvec_rows(weight: &[f32], bias: Option<&[f32]>, x: &[f32]) -> Vec<f32> {
    let mut y: Vec<f32> = weight
        .chunks_exact(x.len())
        .map(|row| dot(row, x) as f32)
        .collect();
    if let Some(bias) = bias {
        for (y, b) in y.iter_mut().zip(bias) {
            *y += b;
        }
    }
    y
}

/// RMS norm: `x / sqrt(mean(x²) + eps) * w`.
fn rms(x: &[f32], weight: &[f32], eps: f64) -> Vec<f32> {
    let ms = x.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter()
        .zip(weight)
        .map(|(v, w)| (f64::from(*v) * r) as f32 * w)
        .collect()
}

/// The parts of `config.json` the reference uses, validated.
struct Config {
    hidden: usize,
    inter: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    vocab: usize,
    eps: f64,
    theta: f64,
    qkv_bias: bool,
    qk_norm: bool,
    tied: bool,
}

impl Config {
    fn read(config: &Value, path: &Path) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidConfig {
            path: path.to_owned(),
            reason,
        };
        let size = |key: &str| -> Result<Option<usize>> {
            match &config[key] {
                Value::Null => Ok(None),
                v => v
                    .as_u64()
                    .and_then(|v| usize::try_from(v).ok())
                    .filter(|v| *v > 0)
                    .map(Some)
                    .ok_or_else(|| invalid(format!("`{key}` must be a positive integer"))),
            }
        };
        let required = |key: &str| size(key)?.ok_or_else(|| invalid(format!("`{key}` is missing")));
        let flag = |key: &str| -> Result<bool> {
            match &config[key] {
                Value::Null => Ok(false),
                Value::Bool(b) => Ok(*b),
                _ => Err(invalid(format!("`{key}` must be a boolean"))),
            }
        };

        let model_type = config["model_type"].as_str().unwrap_or_default();
        if !["llama", "mistral", "qwen2", "qwen3"].contains(&model_type) {
            return Err(invalid(format!(
                "model_type `{model_type}` is not one the reference implements \
                 (llama, mistral, qwen2, qwen3)"
            )));
        }
        if let Some(act) = config["hidden_act"].as_str().filter(|a| *a != "silu") {
            return Err(invalid(format!(
                "hidden_act `{act}` is not implemented (silu only)"
            )));
        }
        if flag("mlp_bias")? {
            return Err(invalid("MLP biases are not implemented".into()));
        }

        // transformers 4: rope_theta and rope_scaling; transformers 5:
        // rope_parameters {rope_theta, rope_type}
        let params = &config["rope_parameters"];
        let theta = config["rope_theta"]
            .as_f64()
            .or_else(|| params["rope_theta"].as_f64())
            .filter(|t| *t > 0.0)
            .ok_or_else(|| {
                invalid("`rope_theta` (or `rope_parameters.rope_theta`) is missing".into())
            })?;
        for scaling in [&config["rope_scaling"], params] {
            let kind = scaling["rope_type"]
                .as_str()
                .or_else(|| scaling["type"].as_str());
            let unscaled = match scaling {
                Value::Null => true,
                Value::Object(_) => kind.is_none_or(|k| k == "default"),
                _ => false,
            };
            if !unscaled {
                return Err(invalid(format!(
                    "RoPE scaling {scaling} is not implemented by the reference"
                )));
            }
        }

        let hidden = required("hidden_size")?;
        let heads = required("num_attention_heads")?;
        let kv_heads = size("num_key_value_heads")?.unwrap_or(heads);
        let head_dim = size("head_dim")?.unwrap_or(hidden / heads);
        if !heads.is_multiple_of(kv_heads) || !head_dim.is_multiple_of(2) || head_dim == 0 {
            return Err(invalid(format!(
                "{heads} heads, {kv_heads} KV heads and head_dim {head_dim} do not fit together"
            )));
        }
        Ok(Config {
            hidden,
            inter: required("intermediate_size")?,
            layers: required("num_hidden_layers")?,
            heads,
            kv_heads,
            head_dim,
            vocab: required("vocab_size")?,
            eps: config["rms_norm_eps"]
                .as_f64()
                .ok_or_else(|| invalid("`rms_norm_eps` is missing".into()))?,
            theta,
            qkv_bias: model_type == "qwen2" || flag("attention_bias")?,
            qk_norm: model_type == "qwen3",
            tied: flag("tie_word_embeddings")?,
        })
    }
}

/// `dir/config.json`, parsed, and its path.
pub(crate) fn read_config(dir: &Path) -> Result<(Value, PathBuf)> {
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
    let config: Value =
        serde_json::from_str(&text).map_err(|e| Error::json(config_path.display(), e))?;
    Ok((config, config_path))
}

/// Every tensor of the model's safetensors files, as `f32`, with its shape.
pub(crate) struct Weights {
    dir: PathBuf,
    tensors: HashMap<String, (Vec<usize>, Vec<f32>)>,
}

impl Weights {
    /// Reads `model.safetensors`, or every shard that
    /// `model.safetensors.index.json` names.
    pub(crate) fn read(dir: &Path) -> Result<Self> {
        let index_path = dir.join("model.safetensors.index.json");
        let files: BTreeSet<String> = if index_path.is_file() {
            let text =
                std::fs::read_to_string(&index_path).map_err(|e| Error::io(&index_path, e))?;
            let index: Value =
                serde_json::from_str(&text).map_err(|e| Error::json(index_path.display(), e))?;
            let map = index["weight_map"]
                .as_object()
                .ok_or_else(|| Error::InvalidConfig {
                    path: index_path.clone(),
                    reason: "`weight_map` is missing".into(),
                })?;
            map.values()
                .map(|file| {
                    file.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| Error::InvalidConfig {
                            path: index_path.clone(),
                            reason: format!("`weight_map` holds a non-string file name {file}"),
                        })
                })
                .collect::<Result<_>>()?
        } else {
            BTreeSet::from(["model.safetensors".to_owned()])
        };
        let mut tensors = HashMap::new();
        for file in files {
            let path = dir.join(&file);
            let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|source| {
                Error::Safetensors {
                    path: path.clone(),
                    source,
                }
            })?;
            for (name, view) in st.iter() {
                let bytes = view.data();
                // bf16 and f16 values are upcast exactly: the reference
                // computes on the same weights in f32.
                let data = match view.dtype() {
                    safetensors::Dtype::F32 => bytes
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect(),
                    safetensors::Dtype::BF16 => bytes
                        .chunks_exact(2)
                        .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                        .collect(),
                    safetensors::Dtype::F16 => bytes
                        .chunks_exact(2)
                        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                        .collect(),
                    other => {
                        return Err(Error::InvalidWeight {
                            dir: dir.to_owned(),
                            name: name.to_owned(),
                            reason: format!(
                                "dtype {other:?}; the reference reads F32, BF16 and F16 only"
                            ),
                        });
                    }
                };
                tensors.insert(name.to_owned(), (view.shape().to_vec(), data));
            }
        }
        Ok(Weights {
            dir: dir.to_owned(),
            tensors,
        })
    }

    /// Removes and returns `NAME.weight` `[rows, cols]` and, if `bias`,
    /// `NAME.bias` `[rows]`.
    pub(crate) fn linear(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        bias: bool,
    ) -> Result<Linear> {
        Ok(Linear {
            weight: self.take(&format!("{name}.weight"), &[rows, cols])?,
            bias: if bias {
                Some(self.take(&format!("{name}.bias"), &[rows])?)
            } else {
                None
            },
        })
    }

    /// Whether the tensor `name` is (still) there.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Removes and returns the tensor `name`, checking its shape.
    pub(crate) fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let invalid = |reason: String| Error::InvalidWeight {
            dir: self.dir.clone(),
            name: name.to_owned(),
            reason,
        };
        let (got, data) = self
            .tensors
            .remove(name)
            .ok_or_else(|| invalid("missing".into()))?;
        if got != shape {
            return Err(invalid(format!("shape {got:?}, expected {shape:?}")));
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_two_gap_is_the_distance_between_the_two_largest_values() {
        assert_eq!(top_two_gap(&[1.0, 4.0, 2.5, -3.0]), Some(1.5));
        assert_eq!(top_two_gap(&[2.0, 2.0, 1.0]), Some(0.0));
        assert_eq!(top_two_gap(&[1.0]), None);
    }

    #[test]
    fn activation_blocks_round_each_block_to_its_own_scale() {
        let x = [127.0, 0.4, -0.6, 63.5, 0.0, 0.2];
        assert_eq!(round_blocks(&x, 3), [127.0, 0.0, -1.0, 63.5, 0.0, 0.0]);
        assert_eq!(round_blocks(&[0.0, 0.0], 2), [0.0, 0.0]);
    }

    #[test]
    fn argmax_picks_the_lowest_id_among_equal_maxima() {
        assert_eq!(argmax(&[0.0, 3.0, 1.0, 3.0]), 1);
        assert_eq!(argmax(&[]), 0);
    }
}
