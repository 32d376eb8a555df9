//! A BERT-family encoder (BERT, XLM-RoBERTa) for sentence embeddings, as
//! sentence-transformers computes them from a published model folder,
//! and the engine that runs it behind the offline backend
//! ([`EncoderEngine`], chosen by [`create`] from the folder's
//! `config.json`).
//!
//! [`BertEncoder::open`] reads the folder: `config.json`
//! ([`BertConfig`]: `model_type` `bert` or `xlm-roberta`), the
//! safetensors weights named as transformers' `BertModel` or
//! `XLMRobertaModel.save_pretrained` names them (`embeddings.*`,
//! `encoder.layer.N.*`; a `bert.` or `roberta.` prefix is taken too), and
//! sentence-transformers' `modules.json` with its pooling module's
//! `config.json` and `sentence_bert_config.json` ([`SentenceConfig`]:
//! mean or CLS pooling, whether a `Normalize` module follows, the
//! `max_seq_length` inputs are cut to).
//!
//! The two architectures differ only in their embeddings: XLM-RoBERTa
//! counts positions from `pad_token_id + 1` (transformers'
//! `create_position_ids_from_input_ids`; the padding, on the right and
//! hidden from attention, takes no part), and has one token type.
//!
//! [`BertEncoder::embed`] runs one forward pass over a whole batch of
//! token id sequences (each as the tokenizer gives it, `[CLS]` and
//! `[SEP]` included), padded on the right to the longest: the
//! embeddings (word, token type 0, absolute position from the
//! architecture's first position) and their layer
//! norm, then the post-norm layers (self-attention over every position
//! of the text, the padding hidden from it by an additive mask; the
//! feed-forward layer with GELU), all in `f32` on the CPU, the
//! projections on the engine's packed kernels. The padding changes no
//! text's vectors (beyond the rounding of a sum's order). Each text's
//! token vectors are then pooled (the mean over its own tokens, or its
//! first token's vector) and, under `Normalize`, divided by their length
//! (at least 1e-12, as `torch.nn.functional.normalize`).

mod config;
pub mod engine;

pub use config::{
    BertActivation, BertConfig, CONFIG_JSON, EncoderKind, MODULES_JSON, Pooling,
    SENTENCE_BERT_CONFIG_JSON, SentenceConfig,
};
pub use engine::{ENCODER_REFUSED_OPTIONS, Embedded, EncoderEngine, create, truncate};

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use guidebench_core::engine::LoadError;

use crate::arena::WeightArena;
use crate::error::{CandleError, Result};
use crate::loader::SafetensorsFiles;
use crate::model::Weights;
use crate::proj::Proj;

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
            weight: w.get(d, "weight")?,
            bias: w.get(d, "bias")?,
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

/// The linear layer `w` holds (`weight` `(rows, cols)` and `bias`).
fn linear(w: &Weights, arena: &WeightArena, rows: usize, cols: usize) -> Result<Proj> {
    let weight = w.get((rows, cols), "weight")?;
    let bias = w.get(rows, "bias")?;
    Ok(Proj::new(weight, Some(bias), arena)?)
}

/// One BERT layer: self-attention, then the feed-forward layer, each
/// added to its input and layer-normed.
#[derive(Debug, Clone)]
struct Layer {
    /// `query`, `key` and `value` stacked: one product for the three.
    qkv: Proj,
    attn_out: Proj,
    attn_norm: LayerNorm,
    up: Proj,
    down: Proj,
    out_norm: LayerNorm,
}

impl Layer {
    fn load(w: &Weights, arena: &WeightArena, c: &BertConfig) -> Result<Self> {
        let (d, eps) = (c.hidden_size, c.layer_norm_eps);
        let s = w.pp("attention.self");
        let (mut weights, mut biases) = (Vec::new(), Vec::new());
        for name in ["query", "key", "value"] {
            weights.push(s.pp(name).get((d, d), "weight")?);
            biases.push(s.pp(name).get(d, "bias")?);
        }
        let qkv = Proj::new(
            Tensor::cat(&weights, 0)?,
            Some(Tensor::cat(&biases, 0)?),
            arena,
        )?;
        let o = w.pp("attention.output");
        Ok(Layer {
            qkv,
            attn_out: linear(&o.pp("dense"), arena, d, d)?,
            attn_norm: LayerNorm::load(&o.pp("LayerNorm"), d, eps)?,
            up: linear(&w.pp("intermediate.dense"), arena, c.intermediate_size, d)?,
            down: linear(&w.pp("output.dense"), arena, d, c.intermediate_size)?,
            out_norm: LayerNorm::load(&w.pp("output.LayerNorm"), d, eps)?,
        })
    }
}

/// A BERT-family sentence-embedding model (BERT or XLM-RoBERTa). See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct BertEncoder {
    config: BertConfig,
    sentence: SentenceConfig,
    /// `(vocab, width)`.
    word: Tensor,
    /// `(positions, width)`.
    position: Tensor,
    /// Token type 0's row, `(1, 1, width)`.
    token_type: Tensor,
    norm: LayerNorm,
    layers: Vec<Layer>,
    device: Device,
}

/// An input the encoder cannot run, as this crate's error.
fn bad_input(reason: String) -> CandleError {
    CandleError::from(candle_core::Error::Msg(reason))
}

impl BertEncoder {
    /// Reads the sentence-transformers folder `dir` of a BERT or
    /// XLM-RoBERTa encoder: its `config.json`, `modules.json`, pooling
    /// config, `sentence_bert_config.json` and safetensors weights (onto
    /// the CPU, in `f32`: bf16 and f16 checkpoints are widened, exactly,
    /// as they load). A missing file is an error
    /// naming its path; an unsupported activation, pooling mode or module
    /// one naming the value.
    pub fn open(dir: &Path) -> Result<Self> {
        let config = BertConfig::from_dir(dir)?;
        let sentence = SentenceConfig::from_dir(dir)?;
        if let Some(width) = sentence.dimension.filter(|w| *w != config.hidden_size) {
            return Err(config::invalid(
                &sentence.pooling_config,
                format!(
                    "word_embedding_dimension {width} differs from the encoder's hidden_size {}",
                    config.hidden_size
                ),
            ));
        }
        let files = guidebench_core::model::weight_files(dir)
            .map_err(|e| CandleError::from(LoadError::Model(e)))?;
        let device = Device::Cpu;
        let weights = Weights::from_files(SafetensorsFiles::open(&files)?, DType::F32, &device);
        Self::load(&weights, config, sentence)
    }

    /// The encoder of `config` from `weights` (at their root, or under
    /// `bert.` or `roberta.` as [`EncoderKind::weight_prefix`] says),
    /// pooled as `sentence` says.
    pub fn load(weights: &Weights, config: BertConfig, sentence: SentenceConfig) -> Result<Self> {
        let prefix = config.kind.weight_prefix();
        let w = if !weights.contains("embeddings.word_embeddings.weight")
            && weights.contains(&format!("{prefix}.embeddings.word_embeddings.weight"))
        {
            weights.pp(prefix)
        } else {
            weights.clone()
        };
        let d = config.hidden_size;
        let e = w.pp("embeddings");
        let arena = WeightArena::new();
        let layers = (0..config.num_layers)
            .map(|i| Layer::load(&w.pp("encoder.layer").pp(i), &arena, &config))
            .collect::<Result<Vec<_>>>()?;
        Ok(BertEncoder {
            word: e
                .pp("word_embeddings")
                .get((config.vocab_size, d), "weight")?,
            position: e
                .pp("position_embeddings")
                .get((config.max_position_embeddings, d), "weight")?,
            token_type: e
                .pp("token_type_embeddings")
                .get((config.type_vocab_size, d), "weight")?
                .narrow(0, 0, 1)?
                .reshape((1, 1, d))?,
            norm: LayerNorm::load(&e.pp("LayerNorm"), d, config.layer_norm_eps)?,
            layers,
            device: weights.device().clone(),
            config,
            sentence,
        })
    }

    /// The encoder's shape.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The pooling and normalisation.
    pub fn sentence(&self) -> &SentenceConfig {
        &self.sentence
    }

    /// Width of the sentence vectors.
    pub fn dim(&self) -> usize {
        self.config.hidden_size
    }

    /// The most tokens of one input, `[CLS]` and `[SEP]` (or `<s>` and
    /// `</s>`) included: sentence-transformers' `max_seq_length`, at most
    /// the positions the encoder has ([`BertConfig::max_tokens`]).
    pub fn max_seq_length(&self) -> usize {
        let positions = self.config.max_tokens();
        self.sentence
            .max_seq_length
            .map_or(positions, |m| m.min(positions))
    }

    /// Each text's sentence vector, computed in one forward pass over the
    /// whole batch (see the [module docs](self)). Every sequence must hold
    /// at least one token, at most [`BertConfig::max_tokens`], each below
    /// `vocab_size`; otherwise an error says which text is at fault.
    pub fn embed(&self, batch: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let d = self.config.hidden_size;
        let Some((values, t)) = self.forward(batch)? else {
            return Ok(Vec::new());
        };
        let vectors = batch
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let rows = &values[i * t * d..(i * t + text.len()) * d];
                let mut v = match self.sentence.pooling {
                    Pooling::Cls => rows[..d].to_vec(),
                    Pooling::Mean => {
                        let mut sum = vec![0f32; d];
                        for row in rows.chunks_exact(d) {
                            for (s, x) in sum.iter_mut().zip(row) {
                                *s += x;
                            }
                        }
                        let count = text.len() as f32;
                        sum.iter_mut().for_each(|s| *s /= count);
                        sum
                    }
                };
                if self.sentence.normalize {
                    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                    v.iter_mut().for_each(|x| *x /= norm);
                }
                v
            })
            .collect();
        Ok(vectors)
    }

    /// Each text's last hidden state (the encoder's output before
    /// pooling): its own tokens' vectors, `len × width` values row after
    /// row, the padding dropped; computed in one pass as
    /// [`BertEncoder::embed`] computes it.
    pub fn last_hidden_states(&self, batch: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let d = self.config.hidden_size;
        let Some((values, t)) = self.forward(batch)? else {
            return Ok(Vec::new());
        };
        Ok(batch
            .iter()
            .enumerate()
            .map(|(i, text)| values[i * t * d..(i * t + text.len()) * d].to_vec())
            .collect())
    }

    /// Checks `batch` and runs the encoder over it padded to its longest
    /// text: the last hidden state `(texts, longest, width)` as values,
    /// and the longest; `None` for an empty batch.
    fn forward(&self, batch: &[&[u32]]) -> Result<Option<(Vec<f32>, usize)>> {
        let c = &self.config;
        for (i, text) in batch.iter().enumerate() {
            if text.is_empty() {
                return Err(bad_input(format!("text {i} has no tokens")));
            }
            if text.len() > c.max_tokens() {
                return Err(bad_input(format!(
                    "text {i} has {} tokens, more than the encoder's {} positions",
                    text.len(),
                    c.max_tokens()
                )));
            }
            if let Some(id) = text.iter().find(|&&id| id as usize >= c.vocab_size) {
                return Err(bad_input(format!(
                    "text {i} has token id {id}, past the vocabulary of {}",
                    c.vocab_size
                )));
            }
        }
        let Some(t) = batch.iter().map(|text| text.len()).max() else {
            return Ok(None);
        };
        let (n, d) = (batch.len(), c.hidden_size);
        let mut ids = Vec::with_capacity(n * t);
        let mut mask = Vec::with_capacity(n * t);
        for text in batch {
            let pad = t - text.len();
            ids.extend_from_slice(text);
            ids.extend(std::iter::repeat_n(0u32, pad));
            mask.extend(std::iter::repeat_n(0f32, text.len()));
            // What transformers adds to a padded key's score: its
            // probability comes out exactly zero.
            mask.extend(std::iter::repeat_n(f32::MIN, pad));
        }
        let ids = Tensor::from_vec(ids, n * t, &self.device)?;
        let mask = Tensor::from_vec(mask, (n, 1, 1, t), &self.device)?;
        let x = self
            .word
            .index_select(&ids, 0)?
            .reshape((n, t, d))?
            .broadcast_add(&self.token_type)?
            .broadcast_add(
                &self
                    .position
                    .narrow(0, c.position_offset, t)?
                    .unsqueeze(0)?,
            )?;
        let mut x = self.norm.forward(&x.reshape((n * t, d))?)?;
        for layer in &self.layers {
            x = self.layer(layer, &x, &mask, n, t)?;
        }
        Ok(Some((x.flatten_all()?.to_vec1::<f32>()?, t)))
    }

    /// One layer on `(n t, width)` rows of `n` texts of `t` positions.
    fn layer(&self, l: &Layer, x: &Tensor, mask: &Tensor, n: usize, t: usize) -> Result<Tensor> {
        let c = &self.config;
        let (d, heads, hd) = (c.hidden_size, c.num_heads, c.head_dim());
        let qkv = l.qkv.forward(x)?;
        let split = |i: usize| -> candle_core::Result<Tensor> {
            qkv.narrow(1, i * d, d)?
                .reshape((n, t, heads, hd))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (q, k, v) = (split(0)?, split(1)?, split(2)?);
        let scores = (q.matmul(&k.t()?.contiguous()?)? / (hd as f64).sqrt())?;
        let probs = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(mask)?)?;
        let attn = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((n * t, d))?;
        let x = l.attn_norm.forward(&(x + l.attn_out.forward(&attn)?)?)?;
        let h = l.up.forward(&x)?;
        let h = match c.hidden_act {
            BertActivation::Gelu => h.gelu_erf()?,
            BertActivation::GeluTanh => h.gelu()?,
        };
        l.out_norm.forward(&(&x + l.down.forward(&h)?)?)
    }
}
