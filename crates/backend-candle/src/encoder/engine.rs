//! The encoder as core's [`Engine`]: `guidebench run --backend
//! kind=offline,engine=candle,model=<a sentence-transformers folder>`
//! embeds each micro-batch the offline backend hands it.
//!
//! [`create`] is the candle engine's registry constructor: a folder whose
//! `config.json` names a BERT-family encoder ([`EncoderKind::of_dir`])
//! opens as an [`EncoderEngine`]; anything else (a decoder, a GGUF file,
//! a folder that cannot be read) goes to the step engine unchanged
//! ([`create_step_engine`]).
//!
//! Guarantees, each with the test that holds it:
//!
//! - one forward pass per batch, every request's text in it
//!   (`tests/encoder_offline.rs`,
//!   `an_encoder_folder_runs_behind_the_offline_backend_in_one_forward_per_batch`);
//! - each text tokenized with its special tokens and cut to
//!   sentence-transformers' `max_seq_length` as the tokenizer's own
//!   truncation cuts it ([`truncate`]; `tests/encoder.rs`,
//!   `a_text_longer_than_max_seq_length_is_cut_as_sentence_transformers_cuts_it`);
//! - a request without text to embed fails alone, the rest of its batch
//!   runs (`a_request_without_text_fails_alone_and_the_rest_of_its_batch_is_embedded`);
//! - options that mean nothing to an encoder ([`ENCODER_REFUSED_OPTIONS`]),
//!   a device other than the CPU and a dtype other than f32 are refused by
//!   name (`options_an_encoder_has_no_use_for_are_refused_by_name`);
//! - `scheduling=continuous` is refused at startup by core's offline
//!   backend: the engine has no step engine, it runs whole micro-batches
//!   (`continuous_scheduling_is_refused_for_an_encoder_saying_to_use_static`).

use std::path::Path;
use std::sync::Arc;

use guidebench_core::Error as CoreError;
use guidebench_core::engine::{
    DeviceRequest, Engine, EngineConfig, EngineDescription, EngineOutput, EngineRequest, LoadError,
    load_error,
};
use guidebench_core::model::{ComputeDtype, DtypeChoice, StoredDtype, resolve};
use guidebench_core::open::{OpenStep, create_step_engine};
use guidebench_core::request::FinishReason;
use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};

use super::{BertEncoder, EncoderKind, Pooling};
use crate::engine::{CandleEngine, CandleOptions};
use crate::error::{CandleError, Result};

/// The candle options that mean nothing to an encoder (a KV cache, its
/// slots, generated lengths, bf16 activations, GGUF kernels, a vision
/// projector file): given with an encoder folder, each is refused by name.
pub const ENCODER_REFUSED_OPTIONS: &[&str] = &[
    "kv_dtype",
    "activations",
    "quant_kernels",
    "max_seq_len",
    "max_slots",
    "mmproj",
];

/// The candle engine's registry constructor: an [`EncoderEngine`] for a
/// folder whose `config.json` names a BERT or XLM-RoBERTa encoder, else
/// the decoder through [`create_step_engine`], unchanged.
pub fn create(config: &EngineConfig) -> guidebench_core::Result<Box<dyn Engine>> {
    let Ok(model) = CandleEngine::model_or_default(config.model.as_deref()) else {
        return create_step_engine::<CandleEngine>(config);
    };
    // A name that does not resolve, a GGUF file or an unreadable config
    // are the step engine's to report, as they always were.
    let encoder = resolve(model)
        .ok()
        .filter(|dir| dir.is_dir())
        .and_then(|dir| match EncoderKind::of_dir(&dir) {
            Ok(Some(_)) => Some(dir),
            _ => None,
        });
    let Some(dir) = encoder else {
        return create_step_engine::<CandleEngine>(config);
    };
    let fail = |err: CandleError| load_error(crate::ENGINE_NAME, err);
    if let Some(key) = ENCODER_REFUSED_OPTIONS
        .iter()
        .find(|key| config.options.contains_key(**key))
    {
        return Err(fail(CandleError::from(LoadError::InvalidOption {
            key,
            reason: format!(
                "`{}` is a sentence-embedding encoder, which has no use for `{key}` (it takes \
                 dtype, threads and device; inputs are cut to sentence_bert_config.json's \
                 max_seq_length)",
                dir.display()
            ),
        })));
    }
    let options: CandleOptions = config.parse_options()?;
    EncoderEngine::open_dir(model, &dir, &options)
        .map(|engine| Box::new(engine) as Box<dyn Engine>)
        .map_err(fail)
}

/// `with_specials` (a text's tokens with the special tokens the
/// tokenizer adds) cut to `max` tokens as the tokenizer's own truncation
/// cuts one text: the text's tokens (`plain`, the same text without
/// special tokens) lose their end, the special tokens around them stay
/// (`[CLS] … [SEP]`, `<s> … </s>`). A text that fits is returned as it
/// is. Should `plain` not appear inside `with_specials`, the tokens are
/// cut keeping the last one.
pub fn truncate(with_specials: Vec<u32>, plain: &[u32], max: usize) -> Vec<u32> {
    if with_specials.len() <= max {
        return with_specials;
    }
    let added = with_specials.len().saturating_sub(plain.len());
    let prefix = (0..=added).find(|&p| with_specials.get(p..p + plain.len()) == Some(plain));
    match prefix {
        Some(p) if added < max => {
            let mut out = Vec::with_capacity(max);
            out.extend_from_slice(&with_specials[..p]);
            out.extend_from_slice(&plain[..max - added]);
            out.extend_from_slice(&with_specials[p + plain.len()..]);
            out
        }
        _ => {
            let mut out = with_specials[..max.saturating_sub(1)].to_vec();
            out.extend(with_specials.last());
            out.truncate(max);
            out
        }
    }
}

/// One text's sentence vector and the tokens it embedded, or the text's
/// own error.
pub type Embedded = guidebench_core::Result<(Vec<f32>, usize)>;

/// A sentence-embedding encoder as an [`Engine`]: each batch tokenized
/// and embedded in one forward pass; each answer carries the tokens it
/// embedded and no generated token. See the [module docs](self).
pub struct EncoderEngine {
    encoder: BertEncoder,
    tokenizer: Arc<HfTokenizer>,
    model: String,
    dtype: DtypeChoice,
    pool: rayon::ThreadPool,
    threads: usize,
    forward_passes: u64,
}

impl std::fmt::Debug for EncoderEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncoderEngine")
            .field("model", &self.model)
            .field("config", self.encoder.config())
            .field("sentence", self.encoder.sentence())
            .field("threads", &self.threads)
            .field("forward_passes", &self.forward_passes)
            .finish_non_exhaustive()
    }
}

impl EncoderEngine {
    /// Opens `model` (a folder, or a Hub name in the local cache, as
    /// [`resolve`] finds it) as an encoder with the candle `options`
    /// (`dtype`, `threads`, `device`; the others are not looked at here:
    /// [`create`] refuses them when given).
    pub fn open(model: &str, options: &CandleOptions) -> Result<Self> {
        let dir = resolve(model)?;
        Self::open_dir(model, &dir, options)
    }

    /// [`open`](Self::open) on the folder `dir` that `model` resolved to.
    fn open_dir(model: &str, dir: &Path, options: &CandleOptions) -> Result<Self> {
        let checked = options
            .common
            .check(|key, reason| CandleError::from(LoadError::InvalidOption { key, reason }))?;
        if checked.device != DeviceRequest::Cpu {
            return Err(CandleError::from(LoadError::UnsupportedDevice {
                device: checked.device.to_string(),
                reason: "the sentence-embedding encoder runs on the CPU only".into(),
            }));
        }
        let dtype = DtypeChoice::choose(checked.dtype, stored_dtype(dir)?, &[ComputeDtype::F32]);
        if dtype.dtype != ComputeDtype::F32 {
            return Err(CandleError::from(LoadError::InvalidOption {
                key: "dtype",
                reason: format!(
                    "the sentence-embedding encoder computes in f32 (bf16 and f16 checkpoints \
                     are widened to f32 as they load); dtype={} is not supported: use auto or f32",
                    dtype.dtype
                ),
            }));
        }
        let threads = checked
            .threads
            .unwrap_or_else(candle_core::utils::get_num_threads);
        let pool = crate::engine::engine_pool(threads, "candle-encoder")?;
        let encoder = pool.install(|| BertEncoder::open(dir))?;
        let tokenizer = HfTokenizer::from_file(dir.join("tokenizer.json"))?;
        Ok(EncoderEngine {
            encoder,
            tokenizer: Arc::new(tokenizer),
            model: model.to_owned(),
            dtype,
            pool,
            threads,
            forward_passes: 0,
        })
    }

    /// The encoder inside.
    pub fn encoder(&self) -> &BertEncoder {
        &self.encoder
    }

    /// Forward passes run so far: one per non-empty batch.
    pub fn forward_passes(&self) -> u64 {
        self.forward_passes
    }

    /// The tokens the encoder embeds for `text`: the tokenizer's, special
    /// tokens added, cut to [`BertEncoder::max_seq_length`] by
    /// [`truncate`]. A text with no token of its own (empty, or only
    /// whitespace) is an error.
    pub fn tokenize(&self, text: &str) -> guidebench_core::Result<Vec<u32>> {
        let with_specials = self.tokenizer.encode(text, true)?;
        let max = self.encoder.max_seq_length();
        let plain = self.tokenizer.encode(text, false)?;
        if plain.is_empty() {
            return Err(CoreError::InvalidRequest {
                field: "prompt",
                reason: "has no text to embed (the tokenizer gives it no token)".into(),
            });
        }
        let ids = truncate(with_specials, &plain, max);
        let vocab = self.encoder.config().vocab_size;
        if let Some(id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(CoreError::InvalidRequest {
                field: "prompt",
                reason: format!(
                    "has token id {id}, past the encoder's vocabulary of {vocab} (the tokenizer \
                     does not match the model)"
                ),
            });
        }
        Ok(ids)
    }

    /// Each text's sentence vector and token count, the texts that
    /// tokenize embedded together in one forward pass; a text that does
    /// not ([`tokenize`](Self::tokenize)) is its own error. An error of
    /// the forward pass itself fails the whole call.
    pub fn embed_texts(&mut self, texts: &[&str]) -> guidebench_core::Result<Vec<Embedded>> {
        let tokenized: Vec<guidebench_core::Result<Vec<u32>>> =
            texts.iter().map(|text| self.tokenize(text)).collect();
        let batch: Vec<&[u32]> = tokenized
            .iter()
            .filter_map(|ids| ids.as_ref().ok().map(Vec::as_slice))
            .collect();
        let mut vectors = if batch.is_empty() {
            Vec::new()
        } else {
            let encoder = &self.encoder;
            let vectors = self.pool.install(|| encoder.embed(&batch))?;
            self.forward_passes += 1;
            vectors
        }
        .into_iter();
        Ok(tokenized
            .into_iter()
            .map(|ids| {
                let ids = ids?;
                let vector = vectors.next().ok_or_else(|| {
                    CoreError::from(CandleError::from(candle_core::Error::Msg(
                        "the encoder returned fewer vectors than texts".into(),
                    )))
                })?;
                Ok((vector, ids.len()))
            })
            .collect())
    }

    /// What the description says after the library: the architecture, the
    /// pooling and `max_seq_length`.
    fn encoder_text(&self) -> String {
        let sentence = self.encoder.sentence();
        let pooling = match sentence.pooling {
            Pooling::Mean => "mean pooling",
            Pooling::Cls => "CLS pooling",
        };
        let normalized = if sentence.normalize {
            ", normalized"
        } else {
            ""
        };
        format!(
            "{} sentence encoder, {pooling}{normalized}, max_seq_length {}",
            self.encoder.config().kind.display_name(),
            self.encoder.max_seq_length()
        )
    }
}

impl Engine for EncoderEngine {
    /// Embeds the whole batch in one forward pass: per request, no token
    /// ids or instants, `prompt_tokens` the tokens it embedded, finished
    /// as [`FinishReason::Eos`] (as core's pooled answers are). The
    /// special tokens are always added, as sentence-transformers adds
    /// them, whatever `add_special_tokens` says (an encoder has no chat
    /// template to have written them).
    fn generate(
        &mut self,
        batch: &[EngineRequest],
    ) -> guidebench_core::Result<Vec<guidebench_core::Result<EngineOutput>>> {
        let texts: Vec<&str> = batch.iter().map(|r| r.prompt.as_str()).collect();
        let embedded = self.embed_texts(&texts)?;
        Ok(batch
            .iter()
            .zip(embedded)
            .map(|(request, result)| {
                if !request.images.is_empty() || !request.audio.is_empty() {
                    return Err(CoreError::UnsupportedInput {
                        engine: crate::ENGINE_NAME.into(),
                        input: if request.images.is_empty() {
                            "audio"
                        } else {
                            "image"
                        },
                        hint: "; a sentence-embedding encoder takes text only".into(),
                    });
                }
                let (_, tokens) = result?;
                Ok(EngineOutput {
                    token_ids: Vec::new(),
                    text: String::new(),
                    prompt_tokens: u32::try_from(tokens).unwrap_or(u32::MAX),
                    finish_reason: FinishReason::Eos,
                    token_instants: Vec::new(),
                    images: None,
                })
            })
            .collect())
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        Arc::clone(&self.tokenizer) as Arc<dyn Tokenizer>
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription {
            engine: crate::ENGINE_NAME.into(),
            library: format!("candle {} ({})", crate::CANDLE_VERSION, self.encoder_text()),
            model: self.model.clone(),
            device: "cpu".into(),
            threads: Some(self.threads),
            dtype: Some(self.dtype.to_string()),
        }
    }
}

/// The checkpoint's stored dtype: `config.json`'s `dtype`, else its
/// `torch_dtype`, else the safetensors headers' (as the decoder reads it).
fn stored_dtype(dir: &Path) -> Result<Option<StoredDtype>> {
    let path = dir.join(super::CONFIG_JSON);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| CandleError::from(LoadError::Model(CoreError::io(&path, e))))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|source| {
        CandleError::from(LoadError::Model(CoreError::Json {
            context: path.display().to_string(),
            source,
        }))
    })?;
    let name = |key: &str| value.get(key).and_then(serde_json::Value::as_str);
    if let Some(stored) = StoredDtype::from_config(name("dtype"), name("torch_dtype")) {
        return Ok(Some(stored));
    }
    let files = guidebench_core::model::weight_files(dir)
        .map_err(|e| CandleError::from(LoadError::Model(e)))?;
    Ok(StoredDtype::from_safetensors_headers(&files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_that_fits_is_left_as_it_is() {
        assert_eq!(truncate(vec![2, 7, 8, 3], &[7, 8], 4), [2, 7, 8, 3]);
    }

    #[test]
    fn a_long_text_loses_the_end_of_its_own_tokens_and_keeps_both_special_tokens() {
        assert_eq!(
            truncate(vec![2, 7, 8, 9, 10, 3], &[7, 8, 9, 10], 4),
            [2, 7, 8, 3]
        );
        // No opening token (a tokenizer that only closes).
        assert_eq!(truncate(vec![7, 8, 9, 10, 3], &[7, 8, 9, 10], 3), [7, 8, 3]);
    }

    #[test]
    fn tokens_that_do_not_contain_the_plain_text_are_cut_keeping_the_last() {
        assert_eq!(truncate(vec![2, 7, 8, 9, 3], &[1, 1], 3), [2, 7, 3]);
        assert_eq!(truncate(vec![2, 7, 3], &[7], 1), [3]);
    }
}
