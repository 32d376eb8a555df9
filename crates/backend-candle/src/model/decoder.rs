//! The decoder: its parts, how it is loaded, what it reports about
//! itself, and the cache it makes. Its passes are in [`super::host`]
//! (host buffers) and [`super::tensor`] (candle tensors).

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::Embedding;

use super::cache::SlotCache;
use super::clock::PhaseClock;
#[cfg(feature = "phase-clock")]
use super::clock::PhaseReport;
use super::layers::{DecoderLayer, RmsNorm, Rope};
use super::weights::{Weights, is_half, linear, quant_part, quant_table};
use crate::error::Result;
use crate::proj::{Proj, QuantPart, candle_runs};
use crate::quant::QuantWeight;
use guidebench_core::model::DecoderConfig;
#[cfg(feature = "phase-clock")]
use std::sync::atomic::Ordering;

/// The most bytes of attention scores one prefill group may hold.
pub const PREFILL_SCORE_BUDGET: usize = 256 << 20;

/// The most prompt tokens one chunk of a prefill on host buffers carries
/// through the blocks.
pub const PREFILL_CHUNK_TOKENS: usize = 512;

/// Where the embedding rows come from.
#[derive(Debug, Clone)]
pub(super) enum Embeddings {
    /// A table in the compute dtype, for both paths.
    Table(Embedding),
    /// bf16 or f16 rows on the CPU, widened to f32 as tokens come (host
    /// buffers only).
    Half(Tensor),
    /// The rows of the tied LM head, packed at two bytes (host buffers
    /// only): the table is not kept twice.
    Head,
    /// Quantized rows (a GGUF file's), dequantized as tokens come (host
    /// buffers only); a tied head on this crate's kernels reads the same
    /// weight.
    Quant(Arc<QuantWeight>),
}

/// Image features for a prefill: rows of `hidden_size` values (the
/// projected features of every image of the call, one row per image
/// token), and which rows each sequence's image tokens take, in order.
#[derive(Debug, Clone, Copy)]
pub struct PrefillImages<'a> {
    /// The image token's id.
    pub token: u32,
    /// The feature rows, back to back.
    pub features: &'a [f32],
    /// Per sequence of the call, the range of its rows (empty for a
    /// prompt without images).
    pub rows: &'a [std::ops::Range<usize>],
}

/// The decoder: embeddings, blocks, final norm and LM head.
#[derive(Debug, Clone)]
pub struct Decoder {
    pub(super) embed_tokens: Embeddings,
    pub(super) layers: Vec<DecoderLayer>,
    pub(super) norm: RmsNorm,
    pub(super) lm_head: Proj,
    pub(super) rope: Rope,
    pub(super) config: DecoderConfig,
    pub(super) max_seq_len: usize,
    /// The compute dtype ([`Weights::compute_dtype`]).
    pub(super) dtype: DType,
    /// The dtype the weights are kept in (of the float ones, where some
    /// are quantized).
    pub(super) weight_dtype: DType,
    /// Whether projections are quantized (a GGUF file's): every pass runs
    /// on host buffers.
    pub(super) quantized: bool,
    /// The dtype of the KV cache on the host-buffer path.
    pub(super) kv_dtype: DType,
    pub(super) device: Device,
    pub(super) clock: PhaseClock,
}

impl Decoder {
    /// Builds the decoder from checkpoint weights, with rotary tables for
    /// `max_seq_len` positions.
    pub fn load(w: &Weights, cfg: &DecoderConfig, max_seq_len: usize) -> Result<Self> {
        Decoder::load_named(w, cfg, max_seq_len, "model", "lm_head")
    }

    /// [`Decoder::load`] with the body's tensors under `body` (`model`)
    /// and the LM head named `head` (`lm_head`): a composite model's text
    /// model (`language_model.model`, `language_model.lm_head`).
    pub fn load_named(
        w: &Weights,
        cfg: &DecoderConfig,
        max_seq_len: usize,
        body: &str,
        head: &str,
    ) -> Result<Self> {
        let m = w.pp(body);
        let (lm_head, embed_tokens) =
            match m
                .pp("embed_tokens")
                .quant("weight", cfg.vocab_size, cfg.hidden_size)?
            {
                // Quantized embeddings (a GGUF file's): rows dequantized as
                // tokens come; a tied LM head reads the same blocks (or
                // candle's repacked copy where its kernel runs them).
                Some(raw) => {
                    let table = Arc::new(quant_table(&raw)?);
                    if cfg.tie_word_embeddings {
                        // The head on candle's kernel, where asked and it
                        // takes the matrix: its repacked copy beside the
                        // table.
                        let head = match w.candle_quant && candle_runs(raw.ty, raw.rows, raw.cols) {
                            true => quant_part(w, raw)?,
                            false => QuantPart::Ours(Arc::clone(&table)),
                        };
                        (Proj::quant(vec![head], None)?, Embeddings::Quant(table))
                    } else {
                        (
                            linear(&w.pp(head), cfg.hidden_size, cfg.vocab_size, false)?,
                            Embeddings::Quant(table),
                        )
                    }
                }
                None => Self::float_embeddings(w, &m, head, cfg)?,
            };
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| DecoderLayer::load(&m.pp("layers").pp(i), cfg))
            .collect::<Result<Vec<_>>>()?;
        Ok(Decoder {
            embed_tokens,
            layers,
            norm: RmsNorm::load(&m.pp("norm"), cfg.hidden_size, cfg.rms_norm_eps)?,
            lm_head,
            rope: Rope::new(cfg, max_seq_len, w.compute_dtype(), w.device())?,
            config: cfg.clone(),
            max_seq_len,
            dtype: w.compute_dtype(),
            weight_dtype: w.dtype(),
            quantized: w.is_quantized(),
            // The compute dtype: on the CPU f32 whatever the weights, so
            // that the default path is exact (`with_kv_dtype` keeps two
            // bytes, as llama.cpp does by default).
            kv_dtype: w.compute_dtype(),
            device: w.device().clone(),
            clock: PhaseClock::default(),
        })
    }

    /// The LM head and the embeddings from float tensors.
    fn float_embeddings(
        w: &Weights,
        m: &Weights,
        head: &str,
        cfg: &DecoderConfig,
    ) -> Result<(Proj, Embeddings)> {
        let embeddings = m
            .pp("embed_tokens")
            .get((cfg.vocab_size, cfg.hidden_size), "weight")?;
        let half = w.device().is_cpu() && is_half(w.dtype());
        // A tied LM head shares the embeddings: in f32 aligned here once,
        // so that it does not hold an aligned copy of its own; in bf16 or
        // f16 on the CPU packed at two bytes, and the embedding rows read
        // from it.
        let embeddings = if cfg.tie_word_embeddings && !half {
            crate::aligned::aligned(&embeddings)
        } else {
            embeddings
        };
        Ok(match (cfg.tie_word_embeddings, half) {
            (true, true) => (
                Proj::new(embeddings, None, &w.arena)?.with_bf16_activations(w.bf16_activations),
                Embeddings::Head,
            ),
            (true, false) => (
                Proj::shared(embeddings.clone(), None),
                Embeddings::Table(Embedding::new(embeddings, cfg.hidden_size)),
            ),
            (false, half) => (
                linear(&w.pp(head), cfg.hidden_size, cfg.vocab_size, false)?,
                match half {
                    true => Embeddings::Half(embeddings),
                    false => Embeddings::Table(Embedding::new(embeddings, cfg.hidden_size)),
                },
            ),
        })
    }

    /// Starts or stops timing the phases of prefill and decoding steps on
    /// host buffers (f32 on the CPU; other paths are not timed): two clock
    /// readings around every projection and attention call while on.
    /// Bench-only: with the `phase-clock` feature.
    #[cfg(feature = "phase-clock")]
    pub fn time_phases(&self, on: bool) {
        self.clock.on.store(on, Ordering::Relaxed);
    }

    /// The phase times summed since the last call, or since timing
    /// started (see [`Decoder::time_phases`]).
    #[cfg(feature = "phase-clock")]
    pub fn take_phase_times(&self) -> PhaseReport {
        self.clock.take()
    }

    /// The model's configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// The longest sequence (prompt and output) this decoder handles.
    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// The compute dtype: activations, norms and the KV cache (f32 on
    /// the CPU for bf16 and f16 weights).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dtype the projections' weights are kept in.
    pub fn weight_dtype(&self) -> DType {
        self.weight_dtype
    }

    /// Whether the projections round their activations to bf16 too
    /// ([`Weights::with_bf16_activations`]) and the CPU runs it.
    pub fn bf16_activations(&self) -> bool {
        crate::cpu::has_bf16_dot() && self.lm_head.bf16_activations()
    }

    /// The dtype of the KV cache's keys and values ([`Decoder::new_cache`]).
    pub fn kv_dtype(&self) -> DType {
        self.kv_dtype
    }

    /// The decoder with its KV cache in `kv` (f32, bf16 or f16): on the
    /// host-buffer path (f32 compute on the CPU), keys and values are
    /// rounded to `kv` as they are written and widened as attention reads
    /// them; elsewhere the cache holds the compute dtype, and another is
    /// an error.
    pub fn with_kv_dtype(mut self, kv: DType) -> Result<Self> {
        let host = self.device.is_cpu() && self.dtype == DType::F32;
        let allowed = match host {
            true => matches!(kv, DType::F32 | DType::BF16 | DType::F16),
            false => kv == self.dtype,
        };
        if !allowed {
            return Err(candle_core::Error::Msg(format!(
                "a KV cache in {kv:?} is not supported here: on the CPU it holds f32, bf16 \
                 or f16; elsewhere the compute dtype ({:?})",
                self.dtype
            ))
            .into());
        }
        self.kv_dtype = kv;
        Ok(self)
    }

    /// Whether every pass runs on host buffers (bf16 or f16 weights on
    /// the CPU, computed in f32): the tensor path is not used.
    pub(super) fn host_only(&self) -> bool {
        self.device.is_cpu() && (is_half(self.weight_dtype) || self.quantized)
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Bytes of weights one decoding step reads for one row: every
    /// projection, norm and the LM head, plus one embedding row, at the
    /// size they are stored in (what the roofline cannot tell from the
    /// config of a quantized or half-precision model).
    pub fn weight_bytes_per_step(&self) -> usize {
        fn bytes(t: &Tensor) -> usize {
            t.elem_count() * t.dtype().size_in_bytes()
        }
        let mut total = self.lm_head.bytes() + bytes(&self.norm.weight);
        total += self.config.hidden_size * self.weight_dtype.size_in_bytes();
        for layer in &self.layers {
            let a = &layer.self_attn;
            total += [&a.qkv_proj, &a.o_proj]
                .into_iter()
                .map(Proj::bytes)
                .sum::<usize>();
            total += [&a.q_norm, &a.k_norm]
                .into_iter()
                .flatten()
                .map(|n| bytes(&n.weight))
                .sum::<usize>();
            let m = &layer.mlp;
            total += [&m.gate_up_proj, &m.down_proj]
                .into_iter()
                .map(Proj::bytes)
                .sum::<usize>();
            total += bytes(&layer.input_layernorm.weight)
                + bytes(&layer.post_attention_layernorm.weight);
        }
        total
    }

    /// Bytes of the KV cache one row reads per attended position in a
    /// decoding step, over all layers (its keys and values), in the dtype
    /// the cache keeps (what the roofline cannot tell from the config).
    pub fn kv_bytes_per_position(&self) -> usize {
        let cfg = &self.config;
        let kv = match self.device.is_cpu() && self.dtype == DType::F32 {
            true => self.kv_dtype,
            false => self.dtype,
        };
        self.layers.len() * 2 * cfg.num_key_value_heads * cfg.head_dim * kv.size_in_bytes()
    }

    /// An empty cache of `max_slots` slots.
    pub fn new_cache(&self, max_slots: usize) -> SlotCache {
        SlotCache::new(
            &self.config,
            max_slots,
            self.dtype,
            self.kv_dtype,
            &self.device,
        )
    }
}
