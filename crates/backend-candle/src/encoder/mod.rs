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
//! `create_position_ids_from_input_ids`, which skips transformers'
//! padding; there is none here), and has one token type.
//!
//! [`BertEncoder::embed`] runs one forward pass over a whole batch of
//! token id sequences (each as the tokenizer gives it, `[CLS]` and
//! `[SEP]` included), all in `f32` on rows of host memory, the texts
//! packed back to back with no padding (in groups of at most
//! [`GROUP_ROWS`] rows, each through the whole stack): the embeddings
//! (word, token type 0, absolute position from the architecture's first
//! position, counted in each text) and their layer norm, then the
//! post-norm layers (`layer`: self-attention of each text over its own
//! positions, so no mask; the feed-forward layer with GELU) on the
//! vision towers' blocks and the engine's packed projection kernels.
//! A text's vectors do not depend on the texts beside it. Each text's
//! token vectors are then pooled (the mean over its tokens, or its first
//! token's vector) and, under `Normalize`, divided by their length (at
//! least 1e-12, as `torch.nn.functional.normalize`).
//!
//! | guarantee | test |
//! |---|---|
//! | transformers' last hidden state, sentence-transformers' vectors (BERT, XLM-RoBERTa; mean and CLS pooling) | `tests/encoder.rs` |
//! | a text's vector alone, and among longer and shorter texts, to rounding | `tests/encoder.rs` |
//! | a layer over packed texts of three lengths: candle's tensor ops on each text | unit test of `layer` |
//! | the attention over frames of their own lengths: the same bits on every kernel path, each frame's values wherever it sits | unit tests of `vision::layers::attention` |

mod config;
pub mod engine;
mod layer;

pub use config::{
    BertActivation, BertConfig, CONFIG_JSON, EncoderKind, MODULES_JSON, Pooling,
    SENTENCE_BERT_CONFIG_JSON, SentenceConfig,
};
pub use engine::{ENCODER_REFUSED_OPTIONS, Embedded, EncoderEngine, create, truncate};

use std::path::Path;

use candle_core::{DType, Device};
use guidebench_core::engine::LoadError;
use rayon::prelude::*;

use self::layer::BertLayer;
use crate::error::{CandleError, Result};
use crate::loader::SafetensorsFiles;
use crate::model::Weights;
use crate::vision::layers::{LayerNorm, LayerScratch, f32_values};

/// Rows (tokens) one group of texts takes at most: a batch's texts go
/// through the whole stack of layers a group at a time, packed back to
/// back, so that a group's buffers stay in the caches (a text longer
/// than this is a group of its own).
pub const GROUP_ROWS: usize = 1024;

/// A BERT-family sentence-embedding model (BERT or XLM-RoBERTa). See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct BertEncoder {
    config: BertConfig,
    sentence: SentenceConfig,
    /// The word embeddings: `vocab × width` values.
    word: Vec<f32>,
    /// The position embeddings: `positions × width` values.
    position: Vec<f32>,
    /// Token type 0's row: `width` values.
    token_type: Vec<f32>,
    norm: LayerNorm,
    layers: Vec<BertLayer>,
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
        let layers = (0..config.num_layers)
            .map(|i| BertLayer::load(&w.pp("encoder.layer").pp(i), &config))
            .collect::<Result<Vec<_>>>()?;
        let token_types = e
            .pp("token_type_embeddings")
            .get((config.type_vocab_size, d), "weight")?;
        Ok(BertEncoder {
            word: f32_values(
                &e.pp("word_embeddings")
                    .get((config.vocab_size, d), "weight")?,
            )?,
            position: f32_values(
                &e.pp("position_embeddings")
                    .get((config.max_position_embeddings, d), "weight")?,
            )?,
            token_type: f32_values(&token_types.narrow(0, 0, 1)?)?,
            norm: LayerNorm::load(&e.pp("LayerNorm"), d, config.layer_norm_eps)?,
            layers,
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
        let mut vectors = Vec::with_capacity(batch.len());
        self.forward(batch, |rows| {
            let mut v = match self.sentence.pooling {
                Pooling::Cls => rows[..d].to_vec(),
                Pooling::Mean => {
                    let mut sum = vec![0f32; d];
                    for row in rows.chunks_exact(d) {
                        for (s, x) in sum.iter_mut().zip(row) {
                            *s += x;
                        }
                    }
                    let count = (rows.len() / d) as f32;
                    sum.iter_mut().for_each(|s| *s /= count);
                    sum
                }
            };
            if self.sentence.normalize {
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                v.iter_mut().for_each(|x| *x /= norm);
            }
            vectors.push(v);
        })?;
        Ok(vectors)
    }

    /// Each text's last hidden state (the encoder's output before
    /// pooling): its tokens' vectors, `len × width` values row after
    /// row; computed in one pass as [`BertEncoder::embed`] computes it.
    pub fn last_hidden_states(&self, batch: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let mut states = Vec::with_capacity(batch.len());
        self.forward(batch, |rows| states.push(rows.to_vec()))?;
        Ok(states)
    }

    /// Checks `batch` and runs the encoder over it, texts packed back to
    /// back in groups of at most [`GROUP_ROWS`] rows: `each` gets every
    /// text's last hidden state (its rows), in order.
    fn forward(&self, batch: &[&[u32]], mut each: impl FnMut(&[f32])) -> Result<()> {
        self.check(batch)?;
        let d = self.config.hidden_size;
        let mut group_rows = 0;
        let mut groups = vec![0usize];
        for (i, text) in batch.iter().enumerate() {
            if group_rows > 0 && group_rows + text.len() > GROUP_ROWS {
                groups.push(i);
                group_rows = 0;
            }
            group_rows += text.len();
        }
        groups.push(batch.len());
        groups.dedup();
        let most_rows = groups
            .windows(2)
            .map(|g| batch[g[0]..g[1]].iter().map(|t| t.len()).sum::<usize>())
            .max()
            .unwrap_or(0);
        let mut scratch = LayerScratch::with_widths(most_rows, d, self.config.intermediate_size);
        let mut x = vec![0f32; most_rows * d];
        for group in groups.windows(2) {
            let texts = &batch[group[0]..group[1]];
            let mut bounds = Vec::with_capacity(texts.len() + 1);
            bounds.push(0);
            for text in texts {
                bounds.push(bounds[bounds.len() - 1] + text.len());
            }
            let rows = bounds[texts.len()];
            let x = &mut x[..rows * d];
            self.embeddings(texts, &mut scratch.h[..rows * d]);
            self.norm.forward_rows(&scratch.h[..rows * d], x);
            for layer in &self.layers {
                layer.forward_rows(x, &bounds, &mut scratch)?;
            }
            for r in bounds.windows(2) {
                each(&x[r[0] * d..r[1] * d]);
            }
        }
        Ok(())
    }

    /// Every text of `batch` fits the encoder: at least one token, at most
    /// [`BertConfig::max_tokens`], each below `vocab_size`; otherwise an
    /// error naming the first text at fault.
    fn check(&self, batch: &[&[u32]]) -> Result<()> {
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
        Ok(())
    }

    /// The embeddings of `texts` (checked) packed back to back into `out`,
    /// one row per token: its word's row plus token type 0's plus its
    /// position's (counted from the architecture's first position in each
    /// text), added in that order.
    fn embeddings(&self, texts: &[&[u32]], out: &mut [f32]) {
        let (d, first) = (self.config.hidden_size, self.config.position_offset);
        let tokens: Vec<(usize, usize)> = texts
            .iter()
            .flat_map(|text| {
                text.iter()
                    .enumerate()
                    .map(move |(p, id)| (*id as usize, first + p))
            })
            .collect();
        out.par_chunks_exact_mut(d)
            .zip(tokens)
            .with_min_len(16)
            .for_each(|(row, (id, p))| {
                let word = &self.word[id * d..(id + 1) * d];
                let position = &self.position[p * d..(p + 1) * d];
                for (((o, w), t), p) in row.iter_mut().zip(word).zip(&self.token_type).zip(position)
                {
                    *o = (*w + *t) + *p;
                }
            });
    }
}
