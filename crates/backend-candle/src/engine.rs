//! The `candle` engine: batched generation over [`Decoder`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use guidebench_core::engine::{
    Engine, EngineConfig, EngineDescription, EngineOutput, EngineRequest,
};
use guidebench_core::options::{OptionSpec, OptionType};
use guidebench_core::request::FinishReason;
use guidebench_core::sampler::Sampler;
use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};
use serde::Deserialize;

use crate::config::ModelConfig;
use crate::error::{CandleError, Result};
use crate::loader;
use crate::model::{Decoder, Weights};

/// The engine's options (`engine=candle,key=value,...`).
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "dtype",
        OptionType::Choice(&["f32", "bf16", "f16"]),
        "compute dtype",
    )
    .with_default("f32"),
    OptionSpec::optional(
        "threads",
        OptionType::Int,
        "CPU threads (default: all available)",
    ),
    OptionSpec::optional(
        "device",
        OptionType::String,
        "cpu, or cuda[:N] with the `cuda` feature",
    )
    .with_default("cpu"),
    OptionSpec::optional(
        "max_seq_len",
        OptionType::Int,
        "longest prompt + output (default: the model's max_position_embeddings)",
    ),
];

/// Typed engine options.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CandleOptions {
    /// `f32` (default), `bf16` or `f16`.
    pub dtype: Option<String>,
    /// CPU threads; default: all available.
    pub threads: Option<i64>,
    /// `cpu` (default) or `cuda[:N]`.
    pub device: Option<String>,
    /// Longest prompt + output; default: the model's
    /// `max_position_embeddings`.
    pub max_seq_len: Option<i64>,
}

fn parse_dtype(text: Option<&str>) -> Result<DType> {
    match text.unwrap_or("f32") {
        "f32" | "float32" => Ok(DType::F32),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        "f16" | "float16" => Ok(DType::F16),
        other => Err(CandleError::InvalidOption {
            key: "dtype",
            reason: format!("expected f32, bf16 or f16, got `{other}`"),
        }),
    }
}

fn parse_device(text: Option<&str>) -> Result<Device> {
    let text = text.unwrap_or("cpu");
    if text == "cpu" {
        return Ok(Device::Cpu);
    }
    if let Some(rest) = text.strip_prefix("cuda") {
        let ordinal = match rest.strip_prefix(':') {
            Some(n) => n
                .parse::<usize>()
                .map_err(|_| CandleError::UnsupportedDevice {
                    device: text.to_owned(),
                    reason: "expected cuda or cuda:N".into(),
                })?,
            None if rest.is_empty() => 0,
            None => {
                return Err(CandleError::UnsupportedDevice {
                    device: text.to_owned(),
                    reason: "expected cuda or cuda:N".into(),
                });
            }
        };
        if cfg!(feature = "cuda") {
            return Ok(Device::new_cuda(ordinal)?);
        }
        return Err(CandleError::UnsupportedDevice {
            device: text.to_owned(),
            reason: "this build has no CUDA support; rebuild with the `cuda` feature \
                     (e.g. `cargo install guidebench --features cuda`)"
                .into(),
        });
    }
    Err(CandleError::UnsupportedDevice {
        device: text.to_owned(),
        reason: "supported devices: cpu, cuda[:N] (with the `cuda` feature)".into(),
    })
}

fn positive(value: Option<i64>, key: &'static str) -> Result<Option<usize>> {
    match value {
        None => Ok(None),
        Some(v) => usize::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .map(Some)
            .ok_or_else(|| CandleError::InvalidOption {
                key,
                reason: format!("must be a positive integer, got {v}"),
            }),
    }
}

/// A loaded model with its tokenizer, ready to generate.
pub struct CandleEngine {
    decoder: Decoder,
    tokenizer: Arc<HfTokenizer>,
    eos_ids: Vec<u32>,
    pad_id: u32,
    model: String,
    dir: PathBuf,
    device_name: String,
    pool: Option<rayon::ThreadPool>,
    threads: usize,
}

impl std::fmt::Debug for CandleEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleEngine")
            .field("model", &self.model)
            .field("dir", &self.dir)
            .field("config", self.decoder.config())
            .field("dtype", &self.decoder.dtype())
            .field("device", &self.device_name)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

/// What [`CandleEngine::load_dir`] reads from a model folder.
struct LoadedModel {
    decoder: Decoder,
    tokenizer: HfTokenizer,
    eos_ids: Vec<u32>,
    pad_id: u32,
}

/// One request's state during a generation.
struct Row {
    sampler: Sampler,
    tokens: Vec<u32>,
    instants: Vec<Instant>,
    /// Prompt length (real tokens, no padding).
    prompt_len: usize,
    /// Most tokens this row may generate.
    limit: usize,
    finish: Option<FinishReason>,
    stop: Vec<String>,
    ignore_eos: bool,
    /// Byte length of the text kept when a stop string matched.
    stop_at: Option<usize>,
}

impl CandleEngine {
    /// Creates the engine from `engine=candle,...` (the registry entry).
    pub fn create(config: &EngineConfig) -> guidebench_core::Result<Box<dyn Engine>> {
        let options: CandleOptions = config.parse_options()?;
        CandleEngine::load(config.model.as_deref(), &options)
            .map(|e| Box::new(e) as Box<dyn Engine>)
            .map_err(CandleError::into_load_error)
    }

    /// Loads `model` (a folder, `builtin:tiny`, or a hub id in the local
    /// HF cache; `None` is `builtin:tiny`).
    pub fn load(model: Option<&str>, options: &CandleOptions) -> Result<Self> {
        let dtype = parse_dtype(options.dtype.as_deref())?;
        let device = parse_device(options.device.as_deref())?;
        let threads = positive(options.threads, "threads")?;
        let max_seq_len = positive(options.max_seq_len, "max_seq_len")?;
        let dir = loader::resolve_model(model)?;
        // Generation always runs inside the engine's own pool, so that the
        // thread driving a decoding step is one of the pool's workers: with
        // the caller's thread outside the pool, it and the pool's idle
        // workers would compete for the same cores.
        let threads = threads.unwrap_or_else(candle_core::utils::get_num_threads);
        let pool = Some(
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("candle-{i}"))
                .build()
                .map_err(|e| CandleError::InvalidOption {
                    key: "threads",
                    reason: e.to_string(),
                })?,
        );
        let load = || CandleEngine::load_dir(&dir, dtype, &device, max_seq_len);
        let LoadedModel {
            decoder,
            tokenizer,
            eos_ids,
            pad_id,
        } = match &pool {
            Some(pool) => pool.install(load)?,
            None => load()?,
        };
        let device_name = match device.location() {
            candle_core::DeviceLocation::Cpu => "cpu".to_owned(),
            candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
            candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
        };
        Ok(CandleEngine {
            decoder,
            tokenizer: Arc::new(tokenizer),
            eos_ids,
            pad_id,
            model: model.unwrap_or("builtin:tiny").to_owned(),
            dir,
            device_name,
            threads,
            pool,
        })
    }

    fn load_dir(
        dir: &Path,
        dtype: DType,
        device: &Device,
        max_seq_len: Option<usize>,
    ) -> Result<LoadedModel> {
        let config = ModelConfig::from_file(&dir.join("config.json"))?;
        let tokenizer = HfTokenizer::from_dir(dir).map_err(CandleError::Tokenizer)?;
        let files = loader::weight_files(dir)?;
        let tensors = loader::load_tensors(&files, device)?;
        let weights = Weights::from_tensors(tensors, dtype, device);
        let max_seq_len = max_seq_len.unwrap_or(config.max_position_embeddings);
        let decoder = Decoder::load(&weights, &config, max_seq_len)?;

        let special = tokenizer.special_tokens();
        let mut eos_ids: Vec<u32> = special.eos.iter().map(|t| t.id).collect();
        for id in &config.eos_token_ids {
            if !eos_ids.contains(id) {
                eos_ids.push(*id);
            }
        }
        let pad_id = special
            .pad
            .as_ref()
            .map(|t| t.id)
            .or_else(|| eos_ids.first().copied())
            .unwrap_or(0);
        Ok(LoadedModel {
            decoder,
            tokenizer,
            eos_ids,
            pad_id,
        })
    }

    /// The decoder.
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// The folder the model was loaded from.
    pub fn model_dir(&self) -> &Path {
        &self.dir
    }

    /// End-of-sequence ids (tokenizer's, then the config's).
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// The logits after a batched prefill of `prompts` (token ids), one
    /// row per prompt: what the first generated token is drawn from.
    pub fn first_step_logits(&self, prompts: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let run = || -> Result<Vec<Vec<f32>>> {
            let (_, logits, _) = self.decoder.prefill(prompts, self.pad_id, 0)?;
            Decoder::logits_to_vec(&logits)
        };
        match &self.pool {
            Some(pool) => pool.install(run),
            None => run(),
        }
    }

    /// Batched generation; see [`Engine::generate`].
    pub fn generate_batch(&self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>> {
        match &self.pool {
            Some(pool) => pool.install(|| self.run_batch(batch)),
            None => self.run_batch(batch),
        }
    }

    fn encode(&self, request: &EngineRequest) -> Result<Vec<u32>> {
        let mut ids = self
            .tokenizer
            .encode(&request.prompt, request.add_special_tokens)
            .map_err(CandleError::Tokenizer)?;
        if ids.is_empty() {
            match &self.tokenizer.special_tokens().bos {
                Some(bos) => ids.push(bos.id),
                None => return Err(CandleError::EmptyPrompt { id: request.id }),
            }
        }
        let max = self.decoder.max_seq_len();
        if ids.len() > max {
            return Err(CandleError::PromptTooLong {
                id: request.id,
                tokens: ids.len(),
                max,
            });
        }
        Ok(ids)
    }

    fn run_batch(&self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let max_seq = self.decoder.max_seq_len();
        let prompts = batch
            .iter()
            .map(|r| self.encode(r))
            .collect::<Result<Vec<_>>>()?;
        let mut rows: Vec<Row> = batch
            .iter()
            .zip(&prompts)
            .map(|(request, prompt)| {
                let budget = max_seq + 1 - prompt.len();
                Row {
                    sampler: Sampler::new(&request.sampling, request.id),
                    tokens: Vec::new(),
                    instants: Vec::new(),
                    prompt_len: prompt.len(),
                    limit: usize::try_from(request.sampling.max_tokens)
                        .unwrap_or(usize::MAX)
                        .min(budget)
                        .max(1),
                    finish: None,
                    stop: request.sampling.stop.clone(),
                    ignore_eos: request.sampling.ignore_eos,
                    stop_at: None,
                }
            })
            .collect();

        let longest = prompts.iter().map(Vec::len).max().unwrap_or(1);
        let most_steps = rows.iter().map(|r| r.limit).max().unwrap_or(1);
        let capacity = longest + most_steps - 1;
        let (mut cache, logits, mut pads) =
            self.decoder.prefill(&prompts, self.pad_id, capacity)?;
        let logits = Decoder::logits_to_vec(&logits)?;
        let now = Instant::now();
        // Which request each cache row holds.
        let mut slots: Vec<usize> = (0..batch.len()).collect();
        for (i, row_logits) in logits.iter().enumerate() {
            self.accept(&mut rows[i], row_logits, now)?;
        }

        loop {
            // Drop finished rows from the cache when enough of them piled up.
            let live: Vec<u32> = slots
                .iter()
                .enumerate()
                .filter(|(_, r)| rows[**r].finish.is_none())
                .map(|(i, _)| u32::try_from(i).unwrap_or(u32::MAX))
                .collect();
            if live.is_empty() {
                break;
            }
            if live.len() < slots.len() && (slots.len() - live.len()) * 4 >= slots.len() {
                cache.select_rows(&live)?;
                slots = live.iter().map(|&i| slots[i as usize]).collect();
                pads = live.iter().map(|&i| pads[i as usize]).collect();
            }
            let b = slots.len();
            let mut ids = Vec::with_capacity(b);
            let mut positions = Vec::with_capacity(b);
            for &r in &slots {
                let row = &rows[r];
                ids.push(row.tokens.last().copied().unwrap_or(self.pad_id));
                let pos = row.prompt_len + row.tokens.len() - 1;
                positions.push(u32::try_from(pos.min(max_seq - 1)).unwrap_or(u32::MAX));
            }
            let device = self.decoder.device();
            let ids = Tensor::from_vec(ids, (b, 1), device)?;
            let positions = Tensor::from_vec(positions, (b, 1), device)?;
            let mask = self.decoder.mask(&pads, cache.len(), 1)?;
            let logits = self.decoder.forward(&ids, &positions, &mask, &mut cache)?;
            let logits = Decoder::logits_to_vec(&logits)?;
            let now = Instant::now();
            for (slot, row_logits) in slots.iter().zip(&logits) {
                let row = &mut rows[*slot];
                if row.finish.is_none() {
                    self.accept(row, row_logits, now)?;
                }
            }
        }

        rows.into_iter()
            .map(|row| {
                let mut text = self
                    .tokenizer
                    .decode(&row.tokens, true)
                    .map_err(CandleError::Tokenizer)?;
                if let Some(at) = row.stop_at {
                    text.truncate(at);
                }
                Ok(EngineOutput {
                    token_ids: row.tokens,
                    text,
                    prompt_tokens: u32::try_from(row.prompt_len).unwrap_or(u32::MAX),
                    finish_reason: row.finish.unwrap_or(FinishReason::Length),
                    token_instants: row.instants,
                })
            })
            .collect()
    }

    /// Samples the next token of `row` and decides whether the row is done.
    fn accept(&self, row: &mut Row, logits: &[f32], now: Instant) -> Result<()> {
        let token = row.sampler.sample(logits);
        row.tokens.push(token);
        row.instants.push(now);
        if !row.ignore_eos && self.eos_ids.contains(&token) {
            row.finish = Some(FinishReason::Eos);
        } else if !row.stop.is_empty() {
            let text = self
                .tokenizer
                .decode(&row.tokens, true)
                .map_err(CandleError::Tokenizer)?;
            if let Some(at) = row.stop.iter().filter_map(|s| text.find(s.as_str())).min() {
                row.stop_at = Some(at);
                row.finish = Some(FinishReason::Stop);
            }
        }
        if row.finish.is_none() && row.tokens.len() >= row.limit {
            row.finish = Some(FinishReason::Length);
        }
        Ok(())
    }
}

impl Engine for CandleEngine {
    fn generate(&mut self, batch: &[EngineRequest]) -> guidebench_core::Result<Vec<EngineOutput>> {
        for request in batch {
            if !request.images.is_empty() || !request.audio.is_empty() {
                return Err(guidebench_core::Error::UnsupportedInput {
                    engine: crate::ENGINE_NAME.into(),
                    input: if request.images.is_empty() {
                        "audio"
                    } else {
                        "image"
                    },
                });
            }
        }
        self.generate_batch(batch)
            .map_err(guidebench_core::Error::engine)
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        Arc::clone(&self.tokenizer) as Arc<dyn Tokenizer>
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription {
            engine: crate::ENGINE_NAME.into(),
            library: format!("candle {}", crate::CANDLE_VERSION),
            model: self.model.clone(),
            device: self.device_name.clone(),
            threads: Some(self.threads),
        }
    }
}
