//! The `tch` engine: the [`Decoder`] as a step engine with a KV cache by
//! slot.

use std::path::{Path, PathBuf};

use guidebench_core::engine::{
    CheckedEngineOptions, DeviceRequest, EngineDescription, EngineOptions, LoadError, PrefillDone,
};
use guidebench_core::generation::{Decode, Logits, ModelText, Prefill, StepEngine, StepLimits};
use guidebench_core::model::{ComputeDtype, DtypeChoice, ModelFolder};
use guidebench_core::open::OpenStep;
use guidebench_core::options::{OptionSpec, OptionType};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::cache::KvCache;
use crate::dim;
use crate::error::{Result, TchError};
use crate::model::{Decoder, Pass, Weights};

/// The engine's options (`engine=tch,key=value,...`): the shared ones
/// ([`EngineOptions`]) and tch's own.
pub const OPTIONS: &[OptionSpec] = &[
    EngineOptions::DTYPE,
    EngineOptions::THREADS
        .with_description("libtorch intra-op threads (default: libtorch's choice, one per core)"),
    EngineOptions::DEVICE.with_description("cpu, or cuda[:N] when libtorch was built with CUDA"),
    EngineOptions::MAX_SEQ_LEN,
    EngineOptions::MAX_SLOTS,
    OptionSpec::optional(
        "dual_layout",
        OptionType::Bool,
        "also keep each projection weight as stored (out, in), for decoding steps of 4 to 64 \
         rows, which MKL multiplies faster that way; doubles the projections' memory",
    )
    .default_from::<TchOptions>(),
];

/// The model when none is given.
pub const DEFAULT_MODEL: &str = "builtin:tiny";

/// Typed engine options; an unset key takes the value of
/// `TchOptions::default()`, which is also what help prints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TchOptions {
    /// `dtype` (`auto`: the stored dtype when it is bf16 or f16, else
    /// f32), `device` (`cpu` or `cuda[:N]`), `threads` (libtorch intra-op
    /// threads; default: libtorch's own choice), `max_seq_len`,
    /// `max_slots`.
    #[serde(flatten)]
    pub common: EngineOptions,
    /// Also keep each projection weight as `(out, in)` for decoding steps
    /// of 4 to 64 rows; default false.
    pub dual_layout: bool,
}

/// The dtypes `dtype=auto` runs as stored: libtorch computes in each, on
/// the CPU (bf16 and f16 with its own kernels) and on CUDA.
pub const AUTO_DTYPES: &[ComputeDtype] =
    &[ComputeDtype::F32, ComputeDtype::Bf16, ComputeDtype::F16];

fn tch_kind(dtype: ComputeDtype) -> Kind {
    match dtype {
        ComputeDtype::F32 => Kind::Float,
        ComputeDtype::Bf16 => Kind::BFloat16,
        ComputeDtype::F16 => Kind::Half,
    }
}

/// libtorch's device for `device=`: the CPU, or a CUDA device only where
/// libtorch has CUDA and the device exists.
fn tch_device(device: DeviceRequest) -> Result<Device> {
    let ordinal = match device {
        DeviceRequest::Cuda(ordinal) => ordinal,
        _ => return Ok(Device::Cpu),
    };
    let unsupported = |reason: String| {
        TchError::from(LoadError::UnsupportedDevice {
            device: device.to_string(),
            reason,
        })
    };
    if !tch::Cuda::is_available() {
        return Err(unsupported(
            "this libtorch has no CUDA (or no GPU is visible); the libtorch that \
             `scripts/native tch` builds is CPU-only: point LIBTORCH at a CUDA libtorch 2.13"
                .into(),
        ));
    }
    let count = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
    if ordinal >= count {
        return Err(unsupported(format!("libtorch sees {count} CUDA device(s)")));
    }
    Ok(Device::Cuda(ordinal))
}

/// Row-major host inputs of one step, reused between steps.
#[derive(Debug, Default)]
struct Scratch {
    ids: Vec<i64>,
    positions: Vec<i64>,
    /// Additive attention mask: 0 where a query may attend, -inf where not.
    mask: Vec<f32>,
    index: Vec<i64>,
    /// For each row of a decoding step, the sequence (of the call) it
    /// computes, if any.
    named: Vec<Option<usize>>,
}

/// A loaded model with its tokenizer: a step engine (prefill, decoding
/// step, retire on a KV cache by slot) that core's generation loop drives.
pub struct TchEngine {
    decoder: Decoder,
    cache: KvCache,
    scratch: Scratch,
    pad_id: u32,
    model: String,
    dir: PathBuf,
    device_name: String,
    dtype: DtypeChoice,
    threads: usize,
}

impl std::fmt::Debug for TchEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TchEngine")
            .field("model", &self.model)
            .field("dir", &self.dir)
            .field("config", self.decoder.config())
            .field("kind", &self.decoder.kind())
            .field("dtype", &self.dtype.to_string())
            .field("device", &self.device_name)
            .field("threads", &self.threads)
            .field("max_slots", &self.cache.max_slots())
            .finish_non_exhaustive()
    }
}

impl OpenStep for TchEngine {
    const NAME: &'static str = crate::ENGINE_NAME;
    const DEFAULT_MODEL: Option<&'static str> = Some(DEFAULT_MODEL);
    type Options = TchOptions;
    type Error = TchError;

    /// Opens `model` (a folder, `builtin:tiny`, or a hub id in the local
    /// HF cache): the engine and what core read of the model's text side.
    ///
    /// `threads` sets libtorch's intra-op threads for the calling thread
    /// (the engine thread), which every step then uses.
    fn open(model: &str, options: &TchOptions) -> Result<(Self, ModelText)> {
        let CheckedEngineOptions {
            dtype: request,
            device,
            threads,
            max_seq_len,
            max_slots,
        } = options
            .common
            .check(|key, reason| TchError::from(LoadError::InvalidOption { key, reason }))?;
        let device = tch_device(device)?;
        if let Some(n) = threads {
            let n = i32::try_from(n).map_err(|_| {
                TchError::from(LoadError::InvalidOption {
                    key: "threads",
                    reason: format!("{n} is too many"),
                })
            })?;
            tch::set_num_threads(n);
        }
        let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
        let folder = ModelFolder::open(model)?;
        let choice = DtypeChoice::choose(request, folder.stored_dtype(), AUTO_DTYPES);
        let kind = tch_kind(choice.dtype);
        let config = folder.config();
        let max_seq_len = max_seq_len.unwrap_or(config.max_position_embeddings);
        let _no_grad = tch::no_grad_guard();
        let decoder = {
            let mut weights = Weights::read(&folder.weight_files()?, kind, device)?;
            let mut decoder = Decoder::load(&mut weights, config, max_seq_len)?;
            if options.dual_layout {
                decoder.keep_both_layouts()?;
            }
            decoder
        };
        let device_name = match device {
            Device::Cuda(n) => format!("cuda:{n}"),
            _ => "cpu".to_owned(),
        };
        let engine = TchEngine {
            cache: KvCache::new(
                max_slots,
                config.num_hidden_layers,
                config.num_key_value_heads,
                config.head_dim,
                kind,
                device,
            ),
            decoder,
            scratch: Scratch::default(),
            pad_id: folder.pad_token_id(),
            model: model.to_owned(),
            dir: folder.dir().to_owned(),
            device_name,
            dtype: choice,
            threads,
        };
        Ok((engine, ModelText::from_folder(&folder)))
    }
}

impl TchEngine {
    /// The dtype it runs and why (`dtype=auto` resolved against the
    /// checkpoint's stored dtype).
    pub fn dtype_choice(&self) -> &DtypeChoice {
        &self.dtype
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

    /// Whether each projection weight is also kept as `(out, in)`
    /// (`dual_layout=true`).
    pub fn keeps_both_layouts(&self) -> bool {
        self.decoder.keeps_both_layouts()
    }

    /// libtorch's intra-op threads for this engine.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Every step runs without autograd and with the engine's threads
    /// (libtorch keeps both per thread).
    fn enter(&self) -> tch::NoGradGuard {
        let threads = i32::try_from(self.threads).unwrap_or(i32::MAX);
        if tch::get_num_threads() != threads {
            tch::set_num_threads(threads);
        }
        tch::no_grad_guard()
    }

    /// Prefills the new sequences as one batch, right-padded to the
    /// longest: row `i`'s tokens at positions `0..len_i`, a causal mask
    /// that also hides the padding, and the logits of each row's last real
    /// position.
    fn run_prefill(&mut self, seqs: &[Prefill<'_>], logits: &mut Logits) -> Result<()> {
        let _guard = self.enter();
        let slots: Vec<usize> = seqs.iter().map(|s| s.slot).collect();
        self.cache.check_free(&slots)?;
        let b = seqs.len();
        let t = seqs.iter().map(|s| s.tokens.len()).max().unwrap_or(0);
        let max_len = seqs.iter().map(|s| s.max_len).max().unwrap_or(0);
        if let Some(empty) = seqs.iter().find(|s| s.tokens.is_empty()) {
            return Err(TchError::Cache(format!(
                "the prompt for slot {} has no tokens",
                empty.slot
            )));
        }
        if t > self.decoder.max_seq_len() {
            return Err(TchError::Cache(format!(
                "a prompt of {t} tokens is longer than max_seq_len {}",
                self.decoder.max_seq_len()
            )));
        }
        self.cache.reserve(b, max_len.max(t))?;
        let s = &mut self.scratch;
        s.ids.clear();
        s.positions.clear();
        s.mask.clear();
        s.index.clear();
        for (i, seq) in seqs.iter().enumerate() {
            let len = seq.tokens.len();
            s.ids.extend(seq.tokens.iter().map(|&id| i64::from(id)));
            s.ids
                .extend(std::iter::repeat_n(i64::from(self.pad_id), t - len));
            s.positions.extend((0..t).map(dim));
            for q in 0..t {
                s.mask.extend((0..t).map(|k| allowed(k <= q && k < len)));
            }
            s.index.push(dim(i * t + len - 1));
        }
        let (bt, tt) = (dim(b), dim(t));
        let ids = self.decoder.upload(&s.ids, &[bt, tt])?;
        let positions = self.decoder.upload(&s.positions, &[bt, tt])?;
        let mask = self.decoder.upload_mask(&s.mask, &[bt, 1, tt, tt])?;
        let pick = self.decoder.upload(&s.index, &[bt])?;
        let row0 = dim(self.cache.occupied());
        let out = self.decoder.forward(
            &ids,
            &positions,
            &mask,
            Pass::Prefill { row0 },
            Some(&pick),
            &mut self.cache,
        )?;
        copy_logits(&out, logits.rows_mut(b))?;
        for seq in seqs {
            self.cache.occupy(seq.slot, seq.tokens.len());
        }
        Ok(())
    }

    /// One decoding step over every row of the cache (rows are dense), each
    /// named sequence's row at its own position; rows the call does not
    /// name write to their scratch position and are not returned.
    fn run_decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()> {
        let _guard = self.enter();
        let n = self.cache.occupied();
        let capacity = self.cache.capacity();
        let s = &mut self.scratch;
        s.named.clear();
        s.named.resize(n, None);
        s.ids.clear();
        s.ids.resize(n, i64::from(self.pad_id));
        for (i, seq) in seqs.iter().enumerate() {
            let row = self.cache.row(seq.slot)?;
            if s.named[row].replace(i).is_some() {
                return Err(TchError::Cache(format!("slot {} is named twice", seq.slot)));
            }
            s.ids[row] = i64::from(seq.token);
        }
        let mut total = 1;
        s.positions.clear();
        s.index.clear();
        for (row, len) in self.cache.lens().enumerate() {
            if s.named[row].is_some() {
                if len >= capacity {
                    return Err(TchError::Cache(format!(
                        "the sequence in row {row} is full ({capacity} positions)"
                    )));
                }
                total = total.max(len + 1);
                s.positions.push(dim(len));
                s.index.push(self.cache.flat_index(row, Some(len)));
            } else {
                s.positions.push(0);
                s.index.push(self.cache.flat_index(row, None));
            }
        }
        s.mask.clear();
        for (row, len) in self.cache.lens().enumerate() {
            let named = s.named[row].is_some();
            s.mask
                .extend((0..total).map(|k| allowed(if named { k <= len } else { k == 0 })));
        }
        let (nt, tt) = (dim(n), dim(total));
        let ids = self.decoder.upload(&s.ids, &[nt, 1])?;
        let positions = self.decoder.upload(&s.positions, &[nt, 1])?;
        let mask = self.decoder.upload_mask(&s.mask, &[nt, 1, 1, tt])?;
        let index = self.decoder.upload(&s.index, &[nt])?;
        let out = self.decoder.forward(
            &ids,
            &positions,
            &mask,
            Pass::Decode {
                index: &index,
                total: tt,
            },
            None,
            &mut self.cache,
        )?;
        // Rows of the output in the order of the call.
        let in_order = seqs.len() == n && s.named.iter().enumerate().all(|(r, i)| *i == Some(r));
        if in_order {
            copy_logits(&out, logits.rows_mut(n))?;
        } else {
            let mut rows = vec![0i64; seqs.len()];
            for (row, named) in s.named.iter().enumerate() {
                if let Some(i) = named {
                    rows[*i] = dim(row);
                }
            }
            let rows = self.decoder.upload(&rows, &[dim(seqs.len())])?;
            copy_logits(&out.f_index_select(0, &rows)?, logits.rows_mut(seqs.len()))?;
        }
        for row in 0..n {
            if self.scratch.named[row].is_some() {
                self.cache.advance(row);
            }
        }
        Ok(())
    }
}

/// An additive mask entry. Every query row keeps at least one key (its
/// own position, or key 0 for padding and rows a step does not name), so
/// no softmax sees only `-inf`.
fn allowed(yes: bool) -> f32 {
    if yes { 0.0 } else { f32::NEG_INFINITY }
}

/// Copies f32 logits `(rows, vocab)` into the loop's buffer.
fn copy_logits(out: &Tensor, dst: &mut [f32]) -> Result<()> {
    let out = if out.device() == Device::Cpu {
        out.shallow_clone()
    } else {
        out.f_to_device(Device::Cpu)?
    };
    if out.numel() != dst.len() {
        return Err(TchError::Cache(format!(
            "the decoder returned {} logits where {} were expected",
            out.numel(),
            dst.len()
        )));
    }
    let n = dst.len();
    out.f_copy_data(dst, n)?;
    Ok(())
}

impl StepEngine for TchEngine {
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
        self.run_prefill(seqs, logits)?;
        Ok(PrefillDone::default())
    }

    fn decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> guidebench_core::Result<()> {
        Ok(self.run_decode(seqs, logits)?)
    }

    fn retire(&mut self, slot: usize) {
        self.cache.retire(slot);
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription {
            engine: crate::ENGINE_NAME.into(),
            library: format!(
                "libtorch {} (tch {})",
                crate::LIBTORCH_VERSION,
                crate::TCH_VERSION
            ),
            model: self.model.clone(),
            device: self.device_name.clone(),
            threads: Some(self.threads),
            dtype: Some(self.dtype.to_string()),
        }
    }
}
