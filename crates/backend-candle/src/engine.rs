//! The `candle` engine: batched generation over [`Decoder`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::{DType, Device};
use guidebench_core::engine::{
    CheckedEngineOptions, DeviceRequest, EngineDescription, EngineOptions, LoadError, PrefillDone,
};
use guidebench_core::generation::{Decode, Logits, ModelText, Prefill, StepEngine, StepLimits};
use guidebench_core::model::{ComputeDtype, DtypeChoice, ModelFolder};
use guidebench_core::open::OpenStep;
use guidebench_core::options::{OptionSpec, OptionType};
use guidebench_core::vision::{ImageProcessor, VisionFamily};
use serde::{Deserialize, Serialize};

use crate::error::{CandleError, Result};
use crate::loader;
use crate::model::{Decoder, PrefillImages, SlotCache, Weights};
use crate::vision::{ImageEncoder, SmolVlmTower, VisionTower};

/// The engine's options (`engine=candle,key=value,...`): the shared ones
/// ([`EngineOptions`]) and candle's own.
pub const OPTIONS: &[OptionSpec] = &[
    EngineOptions::DTYPE,
    OptionSpec::optional(
        "kv_dtype",
        OptionType::Choice(&["auto", "f32", "bf16", "f16"]),
        "the KV cache's dtype; auto: the compute dtype (f32 on the CPU, exact); \
         bf16 or f16 halve attention's reads, rounding keys and values",
    )
    .default_from::<CandleOptions>(),
    OptionSpec::optional(
        "activations",
        OptionType::Choice(&["f32", "bf16"]),
        "bf16: with bf16 weights on a CPU with AVX-512 BF16, round the activations \
         to bf16 too (vdpbf16ps: faster, not exact)",
    )
    .default_from::<CandleOptions>(),
    OptionSpec::optional(
        "quant_kernels",
        OptionType::Choice(&["own", "candle"]),
        "GGUF files: own (this engine's kernels, on its threads, weights at their \
         stored size) or candle (candle's repacked Q8_0/Q4_K/Q6_K tiles where they take \
         the matrix: its own process-wide thread pool, which ignores threads=, and a \
         repacked copy of those weights)",
    )
    .default_from::<CandleOptions>(),
    OptionSpec::optional(
        "mmproj",
        OptionType::String,
        "with model=TEXT.gguf: llama.cpp's mmproj GGUF of the model's vision tower and \
         projector (SmolVLM / Idefics3: clip.projector_type=idefics3), images prepared and \
         laid out as llama.cpp's mtmd does",
    ),
    EngineOptions::THREADS.with_description("CPU threads (default: all available)"),
    EngineOptions::DEVICE.with_description("cpu, or cuda[:N] with the `cuda` feature"),
    EngineOptions::MAX_SEQ_LEN,
    EngineOptions::MAX_SLOTS,
];

/// The model when none is given.
pub const DEFAULT_MODEL: &str = "builtin:tiny";

/// Typed engine options; an unset key takes the value of
/// `CandleOptions::default()`, which is also what help prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CandleOptions {
    /// `dtype` (`auto`: the stored dtype when it is bf16 or f16, else
    /// f32), `device` (`cpu` or `cuda[:N]`), `threads` (default: all
    /// available), `max_seq_len`, `max_slots`.
    #[serde(flatten)]
    pub common: EngineOptions,
    /// `auto` (default: the compute dtype), `f32`, `bf16` or `f16`.
    pub kv_dtype: String,
    /// `f32` (default) or `bf16` (bf16 weights, AVX-512 BF16).
    pub activations: String,
    /// GGUF files: `own` (default) or `candle` kernels for quantized
    /// products.
    pub quant_kernels: String,
    /// llama.cpp's mmproj file of a GGUF model's vision tower and
    /// projector (`model=TEXT.gguf,mmproj=MMPROJ.gguf`); none by default.
    pub mmproj: Option<String>,
}

impl Default for CandleOptions {
    fn default() -> Self {
        CandleOptions {
            common: EngineOptions::default(),
            kv_dtype: "auto".into(),
            activations: "f32".into(),
            quant_kernels: "own".into(),
            mmproj: None,
        }
    }
}

/// The dtypes `dtype=auto` runs as stored: the engine has a fast path for
/// each (2-byte weights on the CPU, the device's own types on CUDA).
pub const AUTO_DTYPES: &[ComputeDtype] =
    &[ComputeDtype::F32, ComputeDtype::Bf16, ComputeDtype::F16];

/// `kv_dtype`: `None` for `auto`.
fn parse_kv_dtype(text: &str) -> Result<Option<DType>> {
    match text {
        "auto" => Ok(None),
        "f32" | "float32" => Ok(Some(DType::F32)),
        "bf16" | "bfloat16" => Ok(Some(DType::BF16)),
        "f16" | "float16" => Ok(Some(DType::F16)),
        other => Err(CandleError::from(LoadError::InvalidOption {
            key: "kv_dtype",
            reason: format!("expected auto, f32, bf16 or f16, got `{other}`"),
        })),
    }
}

/// `activations`: whether they are rounded to bf16, which needs bf16
/// weights and a CPU with AVX-512 BF16.
fn parse_activations(text: &str, weights: DType, device: &Device) -> Result<bool> {
    match text {
        "f32" => Ok(false),
        "bf16" if weights != DType::BF16 || !device.is_cpu() => {
            Err(CandleError::from(LoadError::InvalidOption {
                key: "activations",
                reason: format!(
                    "bf16 activations need bf16 weights on the CPU (dtype=bf16, device=cpu); \
                     this run has {weights:?} weights"
                ),
            }))
        }
        "bf16" if !crate::kernels::has_bf16_dot() => {
            Err(CandleError::from(LoadError::InvalidOption {
                key: "activations",
                reason: "bf16 activations need a CPU with AVX-512 BF16 (vdpbf16ps); this one \
                     has none"
                    .into(),
            }))
        }
        "bf16" => Ok(true),
        other => Err(CandleError::from(LoadError::InvalidOption {
            key: "activations",
            reason: format!("expected f32 or bf16, got `{other}`"),
        })),
    }
}

/// `quant_kernels`: whether candle's repacked kernels run the quantized
/// matrices they take.
fn parse_quant_kernels(text: &str) -> Result<bool> {
    match text {
        "own" => Ok(false),
        "candle" => Ok(true),
        other => Err(CandleError::from(LoadError::InvalidOption {
            key: "quant_kernels",
            reason: format!("expected own or candle, got `{other}`"),
        })),
    }
}

fn candle_dtype(dtype: ComputeDtype) -> DType {
    match dtype {
        ComputeDtype::F32 => DType::F32,
        ComputeDtype::Bf16 => DType::BF16,
        ComputeDtype::F16 => DType::F16,
    }
}

/// candle's device for `device=`: the CPU, or a CUDA device where this
/// build has the `cuda` feature.
fn candle_device(device: DeviceRequest) -> Result<Device> {
    match device {
        DeviceRequest::Cpu => Ok(Device::Cpu),
        DeviceRequest::Cuda(ordinal) if cfg!(feature = "cuda") => Ok(Device::new_cuda(ordinal)?),
        other => Err(CandleError::from(LoadError::UnsupportedDevice {
            device: other.to_string(),
            reason: "this build has no CUDA support; rebuild with the `cuda` feature \
                     (e.g. `cargo install guidebench --features cuda`)"
                .into(),
        })),
    }
}

/// `f32`, `bf16`, `f16` (candle's name for others).
fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        other => other.as_str(),
    }
}

/// A loaded model with its tokenizer: a step engine (prefill, decoding
/// step, retire on a KV cache by slot) that core's generation loop drives.
pub struct CandleEngine {
    decoder: Decoder,
    cache: SlotCache,
    pad_id: u32,
    model: String,
    dir: PathBuf,
    device_name: String,
    dtype: DtypeChoice,
    pool: rayon::ThreadPool,
    threads: usize,
    /// Scratch for the decoding step's slots and tokens.
    slots: Vec<usize>,
    tokens: Vec<u32>,
    /// A vision-language model's image encoder and image processor
    /// (LLaVA's, SmolVLM's).
    vision: Option<Vision>,
}

/// The vision side of a loaded vision-language model.
struct Vision {
    encoder: ImageEncoder,
    processor: Arc<dyn ImageProcessor>,
}

/// The vision families this engine runs besides LLaVA, which every
/// engine's folder opens as.
const VISION_FAMILIES: &[VisionFamily] = &[VisionFamily::SmolVlm];

impl std::fmt::Debug for CandleEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleEngine")
            .field("model", &self.model)
            .field("dir", &self.dir)
            .field("config", self.decoder.config())
            .field("dtype", &self.decoder.dtype())
            .field("dtype_choice", &self.dtype.to_string())
            .field("device", &self.device_name)
            .field("threads", &self.threads)
            .field("max_slots", &self.cache.max_slots())
            .finish_non_exhaustive()
    }
}

impl OpenStep for CandleEngine {
    const NAME: &'static str = crate::ENGINE_NAME;
    const DEFAULT_MODEL: Option<&'static str> = Some(DEFAULT_MODEL);
    type Options = CandleOptions;
    type Error = CandleError;

    /// Opens `model` (a folder, `builtin:tiny`, or a hub id in the local
    /// HF cache): the engine and what core read of the model's text side.
    fn open(model: &str, options: &CandleOptions) -> Result<(Self, ModelText)> {
        let CheckedEngineOptions {
            dtype: request,
            device,
            threads,
            max_seq_len,
            max_slots,
        } = options
            .common
            .check(|key, reason| CandleError::from(LoadError::InvalidOption { key, reason }))?;
        let device = candle_device(device)?;
        let folder = ModelFolder::open_with_vision(model, VISION_FAMILIES)?;
        let folder = match &options.mmproj {
            Some(mmproj) => folder.with_mmproj(mmproj)?,
            None => folder,
        };
        // On a GGUF file: its own types, any other dtype refused with why.
        let choice = folder.dtype_choice(request, AUTO_DTYPES)?;
        let dtype = candle_dtype(choice.dtype);
        let kv_dtype = parse_kv_dtype(&options.kv_dtype)?;
        let bf16_activations = parse_activations(&options.activations, dtype, &device)?;
        let candle_kernels = parse_quant_kernels(&options.quant_kernels)?;
        // Generation always runs inside the engine's own pool, so that the
        // thread driving a decoding step is one of the pool's workers: with
        // the caller's thread outside the pool, it and the pool's idle
        // workers would compete for the same cores.
        let threads = threads.unwrap_or_else(candle_core::utils::get_num_threads);
        let pool = engine_pool(threads, "candle")?;
        let (llava, smolvlm) = (folder.vision().cloned(), folder.smolvlm().cloned());
        let (decoder, encoder) = pool.install(|| -> Result<(Decoder, Option<ImageEncoder>)> {
            let config = folder.config();
            // Each tensor is read as the decoder asks for it, packed (or,
            // quantized, kept as stored) and dropped: no whole copy of the
            // checkpoint beside the weights.
            let weights = match folder.gguf_file() {
                Some(path) => {
                    let tensors = crate::gguf::GgufTensors::open(path, config)?;
                    let dtype = tensors.float_dtype();
                    Weights::from_gguf(tensors, dtype, &device)
                }
                None => {
                    let files = loader::SafetensorsFiles::open(&folder.weight_files()?)?;
                    Weights::from_files(files, dtype, &device)
                }
            }
            .with_bf16_activations(bf16_activations)
            .with_candle_quant_kernels(candle_kernels);
            let max_seq_len = max_seq_len.unwrap_or(config.max_position_embeddings);
            // A vision-language model's text model under the names its
            // checkpoint gives it, and its image encoder.
            let named = |names: &guidebench_core::vision::VisionWeightNames| {
                Decoder::load_named(
                    &weights,
                    config,
                    max_seq_len,
                    &names.text_model,
                    &names.lm_head,
                )
            };
            let (decoder, encoder) = match (&llava, &smolvlm) {
                (Some(vision), _) => (
                    named(&vision.weight_names)?,
                    Some(ImageEncoder::Llava(VisionTower::load(&weights, vision)?)),
                ),
                (None, Some(vision)) => match folder.mmproj_file() {
                    // llama.cpp's pair: the text model from its GGUF, the
                    // tower and projector from the mmproj file, in f32.
                    Some(mmproj) => {
                        let tower = crate::gguf::GgufTensors::open_mmproj(mmproj)?;
                        let tower = Weights::from_gguf(tower, DType::F32, &device);
                        (
                            Decoder::load(&weights, config, max_seq_len)?,
                            Some(ImageEncoder::SmolVlm(SmolVlmTower::load(&tower, vision)?)),
                        )
                    }
                    None => (
                        named(&vision.weight_names)?,
                        Some(ImageEncoder::SmolVlm(SmolVlmTower::load(&weights, vision)?)),
                    ),
                },
                (None, None) => (Decoder::load(&weights, config, max_seq_len)?, None),
            };
            let decoder = match kv_dtype {
                Some(kv) => decoder.with_kv_dtype(kv)?,
                None => decoder,
            };
            Ok((decoder, encoder))
        })?;
        let vision = match (encoder, folder.images()) {
            (Some(encoder), Some(processor)) => Some(Vision { encoder, processor }),
            _ => None,
        };
        let device_name = match device.location() {
            candle_core::DeviceLocation::Cpu => "cpu".to_owned(),
            candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
            candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
        };
        let engine = CandleEngine {
            cache: decoder.new_cache(max_slots),
            decoder,
            pad_id: folder.pad_token_id(),
            model: model.to_owned(),
            dir: folder.dir().to_owned(),
            device_name,
            dtype: choice,
            threads,
            pool,
            slots: Vec::with_capacity(max_slots),
            tokens: Vec::with_capacity(max_slots),
            vision,
        };
        Ok((engine, ModelText::from_folder(&folder)))
    }
}

impl CandleEngine {
    /// The dtype it runs and why (`dtype=auto` resolved against the
    /// checkpoint's stored dtype).
    pub fn dtype_choice(&self) -> &DtypeChoice {
        &self.dtype
    }

    /// What the description says of the dtypes: the compute dtype and
    /// why, then a KV cache or activations that differ from it.
    fn dtype_text(&self) -> String {
        let mut text = self.dtype.to_string();
        let kv = self.cache.kv_dtype();
        if kv != self.decoder.dtype() {
            text.push_str(&format!(", KV cache {}", dtype_name(kv)));
        }
        if self.decoder.bf16_activations() {
            text.push_str(", bf16 activations");
        }
        text
    }

    /// The decoder.
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// The folder the model was loaded from.
    pub fn model_dir(&self) -> &Path {
        &self.dir
    }

    /// Sequences in the KV cache now.
    pub fn occupied_slots(&self) -> usize {
        self.cache.occupied()
    }

    /// A prefill; returns the time its images spent in the vision tower
    /// (zero without images).
    fn run_prefill(&mut self, seqs: &[Prefill<'_>], logits: &mut Logits) -> Result<Duration> {
        let rows: Vec<(usize, &[u32], usize)> =
            seqs.iter().map(|s| (s.slot, s.tokens, s.max_len)).collect();
        let (decoder, cache, pad_id) = (&self.decoder, &mut self.cache, self.pad_id);
        let out = logits.rows_mut(seqs.len());
        if seqs.iter().all(|s| s.images.is_empty()) {
            self.pool
                .install(|| decoder.prefill_into(&rows, pad_id, cache, out))?;
            return Ok(Duration::ZERO);
        }
        let Some(vision) = &self.vision else {
            return Err(CandleError::from(LoadError::InvalidOption {
                key: "model",
                reason: "images reached a model without a vision tower".into(),
            }));
        };
        // Every image of the group through the tower at once; each
        // sequence's image tokens take its images' rows, in order.
        let images: Vec<_> = seqs
            .iter()
            .flat_map(|s| s.images.iter().map(|i| &**i))
            .collect();
        let encoder = &vision.encoder;
        let mut ranges = Vec::with_capacity(seqs.len());
        let mut at = 0;
        for seq in seqs {
            let n: usize = seq.images.iter().map(|i| encoder.rows(i)).sum();
            ranges.push(at..at + n);
            at += n;
        }
        let started = Instant::now();
        let features = self.pool.install(|| encoder.encode(&images))?;
        let spent = started.elapsed();
        let images = PrefillImages {
            token: vision.processor.image_token_id(),
            features: &features,
            rows: &ranges,
        };
        self.pool
            .install(|| decoder.prefill_images_into(&rows, &images, pad_id, cache, out))?;
        Ok(spent)
    }

    fn run_decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()> {
        self.slots.clear();
        self.tokens.clear();
        for s in seqs {
            self.slots.push(s.slot);
            self.tokens.push(s.token);
        }
        let (decoder, cache) = (&self.decoder, &mut self.cache);
        let (slots, tokens) = (&self.slots, &self.tokens);
        let out = logits.rows_mut(seqs.len());
        self.pool
            .install(|| decoder.decode_into(slots, tokens, cache, out))
    }
}

impl StepEngine for CandleEngine {
    fn limits(&self) -> StepLimits {
        StepLimits {
            max_slots: self.cache.max_slots(),
            max_seq_len: self.decoder.max_seq_len(),
            vocab_size: self.decoder.config().vocab_size,
        }
    }

    fn prefill(
        &mut self,
        seqs: &[Prefill<'_>],
        logits: &mut Logits,
    ) -> guidebench_core::Result<PrefillDone> {
        Ok(PrefillDone::with_vision(self.run_prefill(seqs, logits)?))
    }

    fn decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> guidebench_core::Result<()> {
        Ok(self.run_decode(seqs, logits)?)
    }

    fn retire(&mut self, slot: usize) {
        self.cache.retire(slot);
    }

    fn image_processor(&self) -> Option<Arc<dyn ImageProcessor>> {
        self.vision.as_ref().map(|v| Arc::clone(&v.processor))
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription {
            engine: crate::ENGINE_NAME.into(),
            library: format!("candle {}", crate::CANDLE_VERSION),
            model: self.model.clone(),
            device: self.device_name.clone(),
            threads: Some(self.threads),
            dtype: Some(self.dtype_text()),
        }
    }
}

/// The engine's own rayon pool of `threads` threads, named `PREFIX-N`
/// (a pool that cannot be built is the `threads` option's error).
pub(crate) fn engine_pool(threads: usize, prefix: &'static str) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("{prefix}-{i}"))
        .build()
        .map_err(|e| {
            CandleError::from(LoadError::InvalidOption {
                key: "threads",
                reason: e.to_string(),
            })
        })
}
