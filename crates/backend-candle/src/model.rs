//! One parameterised decoder for Llama, Mistral, Qwen2 and Qwen3, with a
//! KV cache by sequence slot and per-row positions. Two paths compute the
//! same layers: in f32 on the CPU, prefill and decoding steps run on
//! buffers the cache keeps, straight on the weights' memory (no tensor per
//! operation, nothing allocated in a decoding step); other dtypes and
//! devices run candle tensor operations, prefill left-padded and masked.
//!
//! Weights are named as in the checkpoint (`model.layers.0.self_attn.q_proj.weight`, ...).

use std::collections::HashMap;
use std::sync::Arc;
#[cfg(feature = "phase-clock")]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(feature = "phase-clock")]
use std::time::Duration;
use std::time::Instant;

use candle_core::{CpuStorage, DType, Device, Module, Tensor};
use candle_nn::{Embedding, VarBuilder};
use rayon::prelude::*;

use crate::activation::silu_mul_rows;
use crate::aligned::AlignedBuf;
use crate::arena::WeightArena;
use crate::attention::{QueryShape, SlotView, decode_attention, decode_attention_scratch};
use crate::cpu::PackedElem;
use crate::error::{CandleError, Result};
use crate::gguf::{GgufTensors, RawQuant, SharedGguf};
use crate::proj::{Proj, QuantPart, candle_runs, cpu_f32_slice, quant_weight};
use crate::quant::QuantWeight;
use guidebench_core::model::DecoderConfig;

/// A `VarBuilder` that knows its full prefix, so that a missing weight is
/// reported by its full name.
#[derive(Clone)]
pub struct Weights {
    vb: VarBuilder<'static>,
    prefix: String,
    /// Where the projections are packed: shared by every prefix.
    arena: WeightArena,
    /// bf16 projections round their activations to bf16 too.
    bf16_activations: bool,
    /// A GGUF file's tensors, whose quantized matrices projections take
    /// at their stored size ([`Weights::quant`]).
    gguf: Option<Arc<GgufTensors>>,
    /// Quantized matrices run candle's repacked kernels where those take
    /// them ([`QuantPart`]); else this crate's.
    candle_quant: bool,
}

impl Weights {
    /// Weights from named tensors, converted to `dtype` on `device`.
    pub fn from_tensors(tensors: HashMap<String, Tensor>, dtype: DType, device: &Device) -> Self {
        Weights {
            vb: VarBuilder::from_tensors(tensors, dtype, device),
            prefix: String::new(),
            arena: WeightArena::new(),
            bf16_activations: false,
            gguf: None,
            candle_quant: false,
        }
    }

    /// Weights read from `files` one tensor at a time as the decoder asks
    /// for them, converted to `dtype` on `device`.
    pub fn from_files(
        files: crate::loader::SafetensorsFiles,
        dtype: DType,
        device: &Device,
    ) -> Self {
        Weights {
            vb: VarBuilder::from_backend(Box::new(files), dtype, device.clone()),
            prefix: String::new(),
            arena: WeightArena::new(),
            bf16_activations: false,
            gguf: None,
            candle_quant: false,
        }
    }

    /// Weights read from a GGUF file one tensor at a time as the decoder
    /// asks for them: quantized matrices at their stored size, float
    /// tensors converted to `dtype` on `device`.
    pub fn from_gguf(tensors: GgufTensors, dtype: DType, device: &Device) -> Self {
        let tensors = Arc::new(tensors);
        Weights {
            vb: VarBuilder::from_backend(
                Box::new(SharedGguf(Arc::clone(&tensors))),
                dtype,
                device.clone(),
            ),
            prefix: String::new(),
            arena: WeightArena::new(),
            bf16_activations: false,
            gguf: Some(tensors),
            candle_quant: false,
        }
    }

    /// The quantized matrix `name` `(rows, cols)` at its stored size, when
    /// the weights are a GGUF file's and it is quantized there.
    fn quant(&self, name: &str, rows: usize, cols: usize) -> Result<Option<RawQuant>> {
        match &self.gguf {
            Some(tensors) => Ok(tensors.quant(&self.full_name(name), rows, cols)?),
            None => Ok(None),
        }
    }

    /// The weights with quantized matrices run by candle's repacked
    /// kernels where those take them (`quant_kernels=candle`): faster on
    /// CPUs with VNNI, but on candle's own process-wide thread pool and
    /// with a repacked copy beside the stored bytes; this crate's kernels
    /// otherwise (the default).
    pub fn with_candle_quant_kernels(mut self, on: bool) -> Self {
        self.candle_quant = on;
        self
    }

    /// Whether any weight is quantized (a GGUF file's).
    pub fn is_quantized(&self) -> bool {
        self.gguf.as_ref().is_some_and(|t| t.is_quantized())
    }

    /// The same weights under `name.`.
    pub fn pp(&self, name: impl std::fmt::Display) -> Self {
        let name = name.to_string();
        Weights {
            vb: self.vb.pp(&name),
            prefix: if self.prefix.is_empty() {
                name
            } else {
                format!("{}.{name}", self.prefix)
            },
            arena: self.arena.clone(),
            bf16_activations: self.bf16_activations,
            gguf: self.gguf.clone(),
            candle_quant: self.candle_quant,
        }
    }

    /// The weights with their bf16 projections rounding the activations
    /// to bf16 too (`vdpbf16ps` where the CPU has AVX-512 BF16): an
    /// option, not exact ([`PackedWeight::with_bf16_activations`](crate::kernels::PackedWeight::with_bf16_activations)).
    pub fn with_bf16_activations(mut self, on: bool) -> Self {
        self.bf16_activations = on;
        self
    }

    fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// Whether the tensor `name` exists here.
    pub fn contains(&self, name: &str) -> bool {
        self.vb.contains_tensor(name)
    }

    /// The tensor `name`, checked against `shape`.
    pub fn get(&self, shape: impl Into<candle_core::Shape>, name: &str) -> Result<Tensor> {
        if !self.vb.contains_tensor(name) {
            return Err(CandleError::MissingWeight {
                name: self.full_name(name),
            });
        }
        Ok(self.vb.get(shape, name)?)
    }

    /// The dtype weights are converted to.
    pub fn dtype(&self) -> DType {
        self.vb.dtype()
    }

    /// The dtype activations, norms, rotary tables and the KV cache are
    /// computed in: f32 for bf16 and f16 weights on the CPU (the
    /// projections widen the weights as they read them, exactly, and sum
    /// in f32), else the weights' dtype.
    pub fn compute_dtype(&self) -> DType {
        if self.device().is_cpu() && is_half(self.dtype()) {
            DType::F32
        } else {
            self.dtype()
        }
    }

    /// The device weights live on.
    pub fn device(&self) -> &Device {
        self.vb.device()
    }
}

/// Whether `dtype` is one of the two-byte floats the CPU keeps packed.
fn is_half(dtype: DType) -> bool {
    matches!(dtype, DType::BF16 | DType::F16)
}

/// A linear layer's weight `(out, in)` as stored.
enum Part {
    /// A float tensor.
    Float(Tensor),
    /// A quantized matrix (a GGUF file's), at its stored size.
    Quant(RawQuant),
}

/// A linear layer's weight and optional bias, as stored.
type LinearParts = (Part, Option<Tensor>);

fn linear_parts(w: &Weights, in_dim: usize, out_dim: usize, bias: bool) -> Result<LinearParts> {
    let weight = match w.quant("weight", out_dim, in_dim)? {
        Some(raw) => Part::Quant(raw),
        None => Part::Float(w.get((out_dim, in_dim), "weight")?),
    };
    let bias = if bias {
        Some(w.get(out_dim, "bias")?)
    } else {
        None
    };
    Ok((weight, bias))
}

fn linear(w: &Weights, in_dim: usize, out_dim: usize, bias: bool) -> Result<Proj> {
    let (weight, bias) = linear_parts(w, in_dim, out_dim, bias)?;
    match weight {
        Part::Float(weight) => {
            Ok(Proj::new(weight, bias, &w.arena)?.with_bf16_activations(w.bf16_activations))
        }
        Part::Quant(raw) => Ok(Proj::quant(vec![quant_part(w, raw)?], bias)?),
    }
}

/// The float linear layer `w` holds (`weight` `(out_dim, in_dim)`, and
/// `bias` when asked), on the engine's packed kernels with `f32`
/// activations: a vision tower's projections.
pub(crate) fn float_linear(w: &Weights, in_dim: usize, out_dim: usize, bias: bool) -> Result<Proj> {
    let weight = w.get((out_dim, in_dim), "weight")?;
    let bias = match bias {
        true => Some(w.get(out_dim, "bias")?),
        false => None,
    };
    Ok(Proj::new(weight, bias, &w.arena)?)
}

/// A quantized matrix with the kernel `w` asks for.
fn quant_part(w: &Weights, raw: RawQuant) -> Result<QuantPart> {
    Ok(QuantPart::new(
        raw.ty,
        raw.rows,
        raw.cols,
        &raw.bytes,
        !w.candle_quant,
    )?)
}

/// A quantized matrix on this crate's kernels, for row lookups
/// (embeddings) and a tied head.
fn quant_table(raw: &RawQuant) -> Result<QuantWeight> {
    Ok(quant_weight(raw.ty, raw.rows, raw.cols, &raw.bytes)?)
}

/// Projections of the same input stacked into one (their outputs side by
/// side, in order); only the stacked weight becomes a `Proj`, so it is the
/// only one packed. Quantized parts of one type are stacked into one
/// matrix (rows are whole blocks); of several types (a Q4_K_M file's q
/// and k in Q4_K beside v in Q6_K), each writes its own columns of the
/// output.
fn stacked(w: &Weights, parts: Vec<LinearParts>) -> Result<Proj> {
    let biases: Option<Vec<&Tensor>> = parts.iter().map(|(_, bias)| bias.as_ref()).collect();
    let bias = match biases {
        Some(b) => Some(Tensor::cat(&b, 0)?),
        None => None,
    };
    let mut floats = Vec::new();
    let mut quants = Vec::new();
    for (weight, _) in parts {
        match weight {
            Part::Float(t) => floats.push(t),
            Part::Quant(raw) => quants.push(raw),
        }
    }
    if !quants.is_empty() {
        if !floats.is_empty() {
            return Err(candle_core::Error::Msg(
                "projections of one input are partly quantized and partly not: not supported"
                    .into(),
            )
            .into());
        }
        let one_type = quants
            .windows(2)
            .all(|p| p[0].ty == p[1].ty && p[0].cols == p[1].cols);
        let weights = if one_type {
            let first = &quants[0];
            let rows = quants.iter().map(|q| q.rows).sum();
            let (ty, cols) = (first.ty, first.cols);
            let bytes = quants.into_iter().flat_map(|q| q.bytes).collect();
            vec![quant_part(
                w,
                RawQuant {
                    ty,
                    rows,
                    cols,
                    bytes,
                },
            )?]
        } else {
            quants
                .into_iter()
                .map(|q| quant_part(w, q))
                .collect::<Result<_>>()?
        };
        return Ok(Proj::quant(weights, bias)?);
    }
    let weight = Tensor::cat(&floats, 0)?;
    Ok(Proj::new(weight, bias, &w.arena)?.with_bf16_activations(w.bf16_activations))
}

/// An RMS norm with a learned scale.
#[derive(Debug, Clone)]
struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn load(w: &Weights, size: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm {
            weight: w.get(size, "weight")?.to_dtype(w.compute_dtype())?,
            eps: eps as f32,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.contiguous()?;
        Ok(candle_nn::ops::rms_norm(&x, &self.weight, self.eps)?)
    }

    /// Normalizes each row of `x` into `out` (f32 on the CPU), rows split
    /// over rayon's threads when there are [`PARALLEL_VALUES`] values or
    /// more, with the bits of [`RmsNorm::forward`].
    fn rows(&self, x: &[f32], out: &mut [f32]) -> Result<()> {
        let (storage, layout) = self.weight.storage_and_layout();
        let alpha = cpu_f32_slice(&storage, layout)?;
        let n = alpha.len();
        let rows = x.len().min(out.len()) / n.max(1);
        let (x, out) = (&x[..rows * n], &mut out[..rows * n]);
        let block = |(src, dst): (&[f32], &mut [f32])| {
            dst.copy_from_slice(src);
            normalize_rows(dst, alpha, self.eps);
        };
        if x.len() >= PARALLEL_VALUES {
            x.par_chunks(NORM_ROWS * n)
                .zip(out.par_chunks_mut(NORM_ROWS * n))
                .for_each(block);
        } else {
            block((x, out));
        }
        Ok(())
    }

    /// Adds each row of `y` to the row of `x` (the residual addition) and
    /// normalizes the sum into `out`, in blocks of [`NORM_ROWS`] rows so
    /// that the norm reads the sums while they are in the L1 cache; rows
    /// split over rayon's threads as in [`RmsNorm::rows`]. The bits of
    /// [`add_in_place`] then [`RmsNorm::rows`].
    fn add_rows(&self, x: &mut [f32], y: &[f32], out: &mut [f32]) -> Result<()> {
        let (storage, layout) = self.weight.storage_and_layout();
        let alpha = cpu_f32_slice(&storage, layout)?;
        let n = alpha.len();
        let rows = x.len().min(y.len()).min(out.len()) / n.max(1);
        let (x, y, out) = (&mut x[..rows * n], &y[..rows * n], &mut out[..rows * n]);
        let block = |((x, y), dst): ((&mut [f32], &[f32]), &mut [f32])| {
            add_in_place(x, y);
            dst.copy_from_slice(x);
            normalize_rows(dst, alpha, self.eps);
        };
        if x.len() >= PARALLEL_VALUES {
            x.par_chunks_mut(NORM_ROWS * n)
                .zip(y.par_chunks(NORM_ROWS * n))
                .zip(out.par_chunks_mut(NORM_ROWS * n))
                .for_each(block);
        } else {
            block(((x, y), out));
        }
        Ok(())
    }

    /// Normalizes each row of `x` in place (f32 on the CPU), with the bits
    /// of [`RmsNorm::forward`].
    fn rows_in_place(&self, x: &mut [f32]) -> Result<()> {
        let (storage, layout) = self.weight.storage_and_layout();
        let alpha = cpu_f32_slice(&storage, layout)?;
        normalize_rows(x, alpha, self.eps);
        Ok(())
    }
}

/// Rows whose sums of squares [`normalize_rows`] takes side by side.
const NORM_ROWS: usize = 8;

/// Divides each row of `rows` (`alpha.len()` values each; a partial last
/// row is left as it is) by its root mean square (`eps` added under the
/// root) and scales it by `alpha`, as candle's `rms_norm` does. Each
/// row's squares are summed in order, one after another, as candle sums
/// them (so the same bits); [`NORM_ROWS`] rows' sums run side by side, so
/// that while one row's additions wait on each other the other rows' go
/// on (one row at a time, a decoding step's norms waited on the latency
/// of every addition).
fn normalize_rows(rows: &mut [f32], alpha: &[f32], eps: f32) {
    let n = alpha.len();
    if n == 0 {
        return;
    }
    let mut blocks = rows.chunks_exact_mut(NORM_ROWS * n);
    for block in &mut blocks {
        let mut sums = [0f32; NORM_ROWS];
        for i in 0..n {
            for (r, sum) in sums.iter_mut().enumerate() {
                let v = block[r * n + i];
                *sum += v * v;
            }
        }
        for (row, sum) in block.chunks_exact_mut(n).zip(sums) {
            scale_row(row, alpha, sum, eps);
        }
    }
    for row in blocks.into_remainder().chunks_exact_mut(n) {
        let sum = row.iter().map(|&v| v * v).sum::<f32>();
        scale_row(row, alpha, sum, eps);
    }
}

/// Divides `row` by the root of its mean square (`sum` its squares' sum,
/// `eps` added under the root) and scales it by `alpha`.
fn scale_row(row: &mut [f32], alpha: &[f32], sum: f32, eps: f32) {
    let m = (sum / row.len() as f32 + eps).sqrt();
    for (v, a) in row.iter_mut().zip(alpha) {
        *v = *v / m * *a;
    }
}

/// Writes one position's keys `k` and values `v` (`(kv_heads, head_dim)`)
/// of `layer` at `pos` of the host slot `slot`.
fn write_host(
    slots: &mut [Option<SlotKv>],
    slot: usize,
    layer: usize,
    pos: usize,
    k: &[f32],
    v: &[f32],
    head_dim: usize,
) -> Result<()> {
    let s = slot_of_mut(slots, slot)?;
    if pos >= s.capacity {
        return Err(candle_core::Error::Msg(format!(
            "KV cache overflow in slot {slot}: position {pos} of {}",
            s.capacity
        ))
        .into());
    }
    let KvData::Host(host) = &mut s.data else {
        return Err(
            candle_core::Error::Msg("a step on host buffers needs a host cache".into()).into(),
        );
    };
    // (kv_heads, head_dim) into (kv_heads, capacity, head_dim)
    host.write(layer, s.capacity, pos, 1, k, v, head_dim);
    Ok(())
}

/// `src` widened to f32 into `dst`, value by value (exact).
fn widen<T: Copy>(src: &[T], dst: &mut [f32], to_f32: fn(T) -> f32) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = to_f32(*s);
    }
}

/// Elementwise work on fewer values than this (a decoding step's rows)
/// runs on the calling thread: spreading it over rayon's threads costs
/// more than it saves.
const PARALLEL_VALUES: usize = 1 << 16;

/// `x += y` row by row (`width` values each), rows split over rayon's
/// threads when there are [`PARALLEL_VALUES`] values or more.
fn add_in_place_par(x: &mut [f32], y: &[f32], width: usize) {
    if x.len() >= PARALLEL_VALUES {
        x.par_chunks_mut(width)
            .zip(y.par_chunks(width))
            .for_each(|(x, y)| add_in_place(x, y));
    } else {
        add_in_place(x, y);
    }
}

/// `x += y`, value by value.
fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += *b;
    }
}

/// Rotates one head `(head_dim)` by the position's `cos` and `sin`
/// (`head_dim / 2` each), halves not interleaved, with the bits of
/// candle's `rope`.
fn rope_in_place(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    let (x1, x2) = head.split_at_mut(cos.len());
    for (((a, b), c), s) in x1.iter_mut().zip(x2.iter_mut()).zip(cos).zip(sin) {
        let (x, y) = (*a, *b);
        *a = x * c - y * s;
        *b = x * s + y * c;
    }
}

/// Precomputed rotary tables, gathered per row and position.
#[derive(Debug, Clone)]
struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    fn new(cfg: &DecoderConfig, max_len: usize, dtype: DType, device: &Device) -> Result<Self> {
        let freqs = cfg.inv_freqs();
        let half = freqs.len();
        let mut cos = Vec::with_capacity(max_len * half);
        let mut sin = Vec::with_capacity(max_len * half);
        for pos in 0..max_len {
            for f in &freqs {
                let angle = pos as f64 * f;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Ok(Rope {
            cos: Tensor::from_vec(cos, (max_len, half), device)?.to_dtype(dtype)?,
            sin: Tensor::from_vec(sin, (max_len, half), device)?.to_dtype(dtype)?,
        })
    }

    /// `positions` is `(batch, seq)` of u32; returns cos and sin as
    /// `(batch, seq, head_dim / 2)`.
    fn gather(&self, positions: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, t) = positions.dims2()?;
        let flat = positions.flatten_all()?;
        let half = self.cos.dim(1)?;
        let cos = self.cos.index_select(&flat, 0)?.reshape((b, t, half))?;
        let sin = self.sin.index_select(&flat, 0)?.reshape((b, t, half))?;
        Ok((cos, sin))
    }
}

/// One sequence's keys and values on the CPU, one buffer per layer each,
/// `(kv_heads, capacity, head_dim)`, in the cache's KV dtype.
#[derive(Debug)]
enum HostKv {
    /// Four bytes a value.
    F32 {
        keys: Vec<Vec<f32>>,
        values: Vec<Vec<f32>>,
    },
    /// bfloat16, two bytes.
    Bf16 {
        keys: Vec<Vec<half::bf16>>,
        values: Vec<Vec<half::bf16>>,
    },
    /// IEEE half, two bytes.
    F16 {
        keys: Vec<Vec<half::f16>>,
        values: Vec<Vec<half::f16>>,
    },
}

/// One sequence's key buffers and value buffers, one per layer each.
type Layers<'a, T> = (&'a [Vec<T>], &'a [Vec<T>]);

/// A value type of the KV cache on the CPU: f32, bf16 or f16.
trait KvElem: PackedElem {
    /// The value nearest `v` (ties to even).
    fn from_f32(v: f32) -> Self;
    /// The layers of `kv` when they hold this type.
    fn layers(kv: &HostKv) -> Option<Layers<'_, Self>>;
}

/// [`KvElem`] for a value type that one variant of [`HostKv`] holds.
macro_rules! kv_elem {
    ($t:ty, $variant:ident, $from:expr) => {
        impl KvElem for $t {
            fn from_f32(v: f32) -> Self {
                $from(v)
            }
            fn layers(kv: &HostKv) -> Option<Layers<'_, Self>> {
                match kv {
                    HostKv::$variant { keys, values } => Some((keys, values)),
                    _ => None,
                }
            }
        }
    };
}

kv_elem!(f32, F32, std::convert::identity);
kv_elem!(half::bf16, Bf16, half::bf16::from_f32);
kv_elem!(half::f16, F16, half::f16::from_f32);

/// `src` `(heads, t, head_dim)` into `dst` `(heads, capacity, head_dim)`
/// at position `at`, rounded to `T`.
fn store_rows<T: KvElem>(
    dst: &mut [T],
    src: &[f32],
    capacity: usize,
    at: usize,
    t: usize,
    head_dim: usize,
) {
    for (head, src) in src.chunks_exact(t * head_dim).enumerate() {
        let start = (head * capacity + at) * head_dim;
        for (d, s) in dst[start..start + t * head_dim].iter_mut().zip(src) {
            *d = T::from_f32(*s);
        }
    }
}

impl HostKv {
    /// Zeroed room for `layers` layers of `n` values each, in `dtype`.
    fn zeros(dtype: DType, layers: usize, n: usize) -> Result<Self> {
        Ok(match dtype {
            DType::F32 => HostKv::F32 {
                keys: (0..layers).map(|_| touched_zeros(n)).collect(),
                values: (0..layers).map(|_| touched_zeros(n)).collect(),
            },
            DType::BF16 => HostKv::Bf16 {
                keys: (0..layers).map(|_| touched_zeros(n)).collect(),
                values: (0..layers).map(|_| touched_zeros(n)).collect(),
            },
            DType::F16 => HostKv::F16 {
                keys: (0..layers).map(|_| touched_zeros(n)).collect(),
                values: (0..layers).map(|_| touched_zeros(n)).collect(),
            },
            other => {
                return Err(candle_core::Error::Msg(format!(
                    "a KV cache on the CPU holds f32, bf16 or f16, not {other:?}"
                ))
                .into());
            }
        })
    }

    /// Writes `t` positions of keys `k` and values `v` (`(kv_heads, t,
    /// head_dim)` each) of `layer` from position `at`, rounded to the
    /// cache's dtype.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        layer: usize,
        capacity: usize,
        at: usize,
        t: usize,
        k: &[f32],
        v: &[f32],
        head_dim: usize,
    ) {
        match self {
            HostKv::F32 { keys, values } => {
                store_rows(&mut keys[layer], k, capacity, at, t, head_dim);
                store_rows(&mut values[layer], v, capacity, at, t, head_dim);
            }
            HostKv::Bf16 { keys, values } => {
                store_rows(&mut keys[layer], k, capacity, at, t, head_dim);
                store_rows(&mut values[layer], v, capacity, at, t, head_dim);
            }
            HostKv::F16 { keys, values } => {
                store_rows(&mut keys[layer], k, capacity, at, t, head_dim);
                store_rows(&mut values[layer], v, capacity, at, t, head_dim);
            }
        }
    }
}

/// One layer's keys or values for one sequence, `(kv_heads, capacity,
/// head_dim)`.
#[derive(Debug)]
enum KvData {
    /// On the CPU for the host-buffer path: plain memory that decoding
    /// steps read and write in place.
    Host(HostKv),
    /// Other dtypes and devices: candle tensors `(1, kv_heads, capacity,
    /// head_dim)`.
    Tensors {
        keys: Vec<Tensor>,
        values: Vec<Tensor>,
    },
}

/// One sequence's keys and values in every layer, with its own length.
#[derive(Debug)]
struct SlotKv {
    data: KvData,
    len: usize,
    capacity: usize,
}

/// The buffers of prefill and decoding steps on the CPU in f32, kept
/// between calls so that a decoding step in steady state allocates
/// nothing.
#[derive(Debug, Default)]
struct StepBuffers {
    /// The tokens of the call, one after another across its sequences.
    tokens: Vec<HostToken>,
    /// Each sequence's last position after the final norm, `(rows,
    /// hidden)`.
    last: AlignedBuf,
    /// The layers' activations.
    activations: ActivationBufs,
}

/// One token going through the blocks on host buffers.
#[derive(Debug, Clone, Copy)]
struct HostToken {
    /// The token id.
    id: u32,
    /// The slot of its sequence.
    slot: usize,
    /// Its position in the sequence.
    pos: usize,
    /// Its sequence's index in the call, when it is the sequence's last
    /// token (whose logits come back).
    last_of: Option<usize>,
    /// The row of the image features that takes the place of its
    /// embedding (an image token of a prompt with images).
    feature: Option<usize>,
}

/// Room for the layers' activations, one row per token.
#[derive(Debug, Default)]
struct ActivationBufs {
    x: AlignedBuf,
    normed: AlignedBuf,
    qkv: AlignedBuf,
    attn: AlignedBuf,
    proj: AlignedBuf,
    gate_up: AlignedBuf,
    act: AlignedBuf,
    out_t: AlignedBuf,
    scores: AlignedBuf,
}

/// The layers' activations for up to `rows` tokens.
struct Activations<'a> {
    /// The residual stream, `(rows, hidden)`.
    x: &'a mut [f32],
    /// A norm's output, `(rows, hidden)`.
    normed: &'a mut [f32],
    /// Queries, keys and values side by side, `(rows, (heads + 2 *
    /// kv_heads) * head_dim)`.
    qkv: &'a mut [f32],
    /// Attention output, `(rows, heads * head_dim)`.
    attn: &'a mut [f32],
    /// A projection back to the hidden size, `(rows, hidden)`.
    proj: &'a mut [f32],
    /// Gate and up projections side by side, `(rows, 2 * intermediate)`.
    gate_up: &'a mut [f32],
    /// The gated activation, `(rows, intermediate)`.
    act: &'a mut [f32],
    /// The dot-product kernel's transposed output (weights as stored).
    out_t: &'a mut [f32],
    /// Attention scores.
    scores: &'a mut [f32],
}

impl ActivationBufs {
    /// Activations for up to `rows` tokens attending to at most `room`
    /// positions, `kernel_rows` of them at once through the dot-product
    /// kernel (which needs scratch for its transposed output).
    fn get(
        &mut self,
        cfg: &DecoderConfig,
        rows: usize,
        kernel_rows: usize,
        room: usize,
    ) -> Activations<'_> {
        let (h, nh, nkv, hd) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let (qkv_n, inter) = ((nh + 2 * nkv) * hd, cfg.intermediate_size);
        let widest = cfg.vocab_size.max(qkv_n).max(2 * inter).max(h);
        let shape = host_query_shape(cfg, rows);
        Activations {
            x: self.x.get(rows * h),
            normed: self.normed.get(rows * h),
            qkv: self.qkv.get(rows * qkv_n),
            attn: self.attn.get(rows * nh * hd),
            proj: self.proj.get(rows * h),
            gate_up: self.gate_up.get(rows * 2 * inter),
            act: self.act.get(rows * inter),
            out_t: self.out_t.get(kernel_rows * widest),
            scores: self.scores.get(decode_attention_scratch(shape, room)),
        }
    }
}

/// The KV cache by sequence slot: a fixed set of slots, each holding one
/// sequence with its own length and room reserved for it when it was
/// prefilled, so a new sequence can join while others are decoding and a
/// decoding step writes into memory that is already there.
#[derive(Debug)]
pub struct SlotCache {
    slots: Vec<Option<SlotKv>>,
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    dtype: DType,
    /// The dtype of the keys and values on the host-buffer path.
    kv_dtype: DType,
    device: Device,
    buffers: StepBuffers,
}

impl SlotCache {
    /// An empty cache of `max_slots` slots for a decoder computing in
    /// `dtype`, holding keys and values in `kv_dtype` on the host-buffer
    /// path (f32 on the CPU; `kv_dtype` f32, bf16 or f16) and in `dtype`
    /// elsewhere.
    pub fn new(
        cfg: &DecoderConfig,
        max_slots: usize,
        dtype: DType,
        kv_dtype: DType,
        device: &Device,
    ) -> Self {
        SlotCache {
            slots: (0..max_slots).map(|_| None).collect(),
            layers: cfg.num_hidden_layers,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            dtype,
            kv_dtype,
            device: device.clone(),
            buffers: StepBuffers {
                tokens: Vec::with_capacity(max_slots),
                ..StepBuffers::default()
            },
        }
    }

    /// The dtype keys and values are kept in.
    pub fn kv_dtype(&self) -> DType {
        if self.is_host() {
            self.kv_dtype
        } else {
            self.dtype
        }
    }

    /// Whether slots are plain memory for the host-buffer path (f32
    /// compute on the CPU).
    fn is_host(&self) -> bool {
        self.device.is_cpu() && self.dtype == DType::F32
    }

    /// Slots in the cache.
    pub fn max_slots(&self) -> usize {
        self.slots.len()
    }

    /// Positions cached for the sequence in `slot`, if it holds one.
    pub fn len(&self, slot: usize) -> Option<usize> {
        self.slots.get(slot)?.as_ref().map(|kv| kv.len)
    }

    /// Slots holding a sequence.
    pub fn occupied(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Frees `slot` and its memory.
    pub fn retire(&mut self, slot: usize) {
        if let Some(s) = self.slots.get_mut(slot) {
            *s = None;
        }
    }

    /// Reserves `capacity` positions in the free `slot`.
    fn open(&mut self, slot: usize, capacity: usize) -> Result<()> {
        let data = if self.is_host() {
            let n = self.kv_heads * capacity * self.head_dim;
            KvData::Host(HostKv::zeros(self.kv_dtype, self.layers, n)?)
        } else {
            let shape = (1, self.kv_heads, capacity, self.head_dim);
            let mut keys = Vec::with_capacity(self.layers);
            let mut values = Vec::with_capacity(self.layers);
            for _ in 0..self.layers {
                keys.push(Tensor::zeros(shape, self.dtype, &self.device)?);
                values.push(Tensor::zeros(shape, self.dtype, &self.device)?);
            }
            KvData::Tensors { keys, values }
        };
        let Some(entry) = self.slots.get_mut(slot) else {
            return Err(candle_core::Error::Msg(format!(
                "slot {slot} is out of range (the engine has {} slots)",
                self.slots.len()
            ))
            .into());
        };
        if entry.is_some() {
            return Err(candle_core::Error::Msg(format!("slot {slot} is already in use")).into());
        }
        *entry = Some(SlotKv {
            data,
            len: 0,
            capacity,
        });
        Ok(())
    }

    fn slot(&self, slot: usize) -> Result<&SlotKv> {
        slot_of(&self.slots, slot)
    }

    /// Writes `k`, `v` (`(1, kv_heads, t, head_dim)`) of `layer` at
    /// position `at` of `slot`.
    fn write(
        &mut self,
        slot: usize,
        layer: usize,
        at: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<()> {
        let t = k.dim(2)?;
        let head_dim = self.head_dim;
        let kv = slot_of_mut(&mut self.slots, slot)?;
        if at + t > kv.capacity {
            return Err(candle_core::Error::Msg(format!(
                "KV cache overflow in slot {slot}: {at} + {t} > {}",
                kv.capacity
            ))
            .into());
        }
        match &mut kv.data {
            KvData::Tensors { keys, values } => {
                keys[layer].slice_set(&k.contiguous()?, 2, at)?;
                values[layer].slice_set(&v.contiguous()?, 2, at)?;
            }
            KvData::Host(host) => {
                let (k, v) = (k.contiguous()?, v.contiguous()?);
                let (k_storage, k_layout) = k.storage_and_layout();
                let (v_storage, v_layout) = v.storage_and_layout();
                let k = cpu_f32_slice(&k_storage, k_layout)?;
                let v = cpu_f32_slice(&v_storage, v_layout)?;
                // (kv_heads, t, head_dim) into (kv_heads, capacity, head_dim)
                host.write(layer, kv.capacity, at, t, k, v, head_dim);
            }
        }
        Ok(())
    }

    /// Marks `t` more positions of `slot` as cached.
    fn advance(&mut self, slot: usize, t: usize) -> Result<()> {
        slot_of_mut(&mut self.slots, slot)?.len += t;
        Ok(())
    }
}

/// The queries of `rows` tokens on host buffers: each token's row of
/// queries, keys and values side by side, queries first.
fn host_query_shape(cfg: &DecoderConfig, rows: usize) -> QueryShape {
    let (nh, nkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
    QueryShape {
        rows,
        kv_heads: nkv,
        rep: nh / nkv.max(1),
        head_dim: cfg.head_dim,
        row_stride: (nh + 2 * nkv) * cfg.head_dim,
    }
}

/// `n` zeros whose memory pages are all touched now, when a slot's room is
/// reserved, so that decoding steps do not fault them in one page at a
/// time.
fn touched_zeros<T: Default + Copy>(n: usize) -> Vec<T> {
    let page_values = 4096 / std::mem::size_of::<T>().max(1);
    let mut values = vec![T::default(); n];
    for v in values.iter_mut().step_by(page_values) {
        *v = std::hint::black_box(T::default());
    }
    values
}

fn no_sequence(slot: usize) -> CandleError {
    candle_core::Error::Msg(format!("slot {slot} holds no sequence")).into()
}

fn slot_of(slots: &[Option<SlotKv>], slot: usize) -> Result<&SlotKv> {
    slots
        .get(slot)
        .and_then(Option::as_ref)
        .ok_or_else(|| no_sequence(slot))
}

fn slot_of_mut(slots: &mut [Option<SlotKv>], slot: usize) -> Result<&mut SlotKv> {
    slots
        .get_mut(slot)
        .and_then(Option::as_mut)
        .ok_or_else(|| no_sequence(slot))
}

/// `layer` of the host slot `slot`, attending to `len` positions; an
/// empty view (which attention rejects) when the slot holds no host
/// sequence.
fn host_view<T: KvElem>(
    slots: &[Option<SlotKv>],
    slot: usize,
    layer: usize,
    len: usize,
) -> SlotView<'_, T> {
    let host = match slots.get(slot).and_then(Option::as_ref) {
        Some(SlotKv {
            data: KvData::Host(host),
            capacity,
            ..
        }) => T::layers(host).map(|layers| (layers, *capacity)),
        _ => None,
    };
    match host {
        Some(((keys, values), capacity)) => SlotView {
            keys: &keys[layer],
            values: &values[layer],
            capacity,
            len,
        },
        None => SlotView {
            keys: &[],
            values: &[],
            capacity: 0,
            len: 0,
        },
    }
}

/// [`decode_attention`] for the tokens whose queries are in `q`, token
/// `i` attending to `len(i)` positions of layer `layer` of slot
/// `slot(i)` of the host cache, whose keys and values are `kv_dtype`.
#[allow(clippy::too_many_arguments)]
fn attend_host(
    kv_dtype: DType,
    slots: &[Option<SlotKv>],
    slot: &(impl Fn(usize) -> (usize, usize) + Sync),
    layer: usize,
    q: &[f32],
    shape: QueryShape,
    scale: f32,
    out: &mut [f32],
    scores: &mut [f32],
) -> candle_core::Result<()> {
    fn on<T: KvElem>(
        slots: &[Option<SlotKv>],
        slot: &(impl Fn(usize) -> (usize, usize) + Sync),
        layer: usize,
        q: &[f32],
        shape: QueryShape,
        scale: f32,
        out: &mut [f32],
        scores: &mut [f32],
    ) -> candle_core::Result<()> {
        let view = |i: usize| {
            let (s, len) = slot(i);
            host_view::<T>(slots, s, layer, len)
        };
        decode_attention(q, shape, &view, scale, out, scores)
    }
    match kv_dtype {
        DType::BF16 => on::<half::bf16>(slots, slot, layer, q, shape, scale, out, scores),
        DType::F16 => on::<half::f16>(slots, slot, layer, q, shape, scale, out, scores),
        _ => on::<f32>(slots, slot, layer, q, shape, scale, out, scores),
    }
}

/// Which positions one forward pass adds, and for which slots.
#[derive(Clone, Copy)]
enum Pass<'a> {
    /// New sequences, left-padded to a common length `t`: row `i` goes to
    /// `slots[i]` and starts after `pads[i]` padding positions.
    Prefill {
        slots: &'a [usize],
        pads: &'a [usize],
    },
    /// One new position per running sequence, row `i` in `slots[i]` at
    /// position `lens[i]` (its cached length before this step).
    Decode {
        slots: &'a [usize],
        lens: &'a [usize],
    },
}

/// What every layer of one forward pass shares.
#[derive(Clone, Copy)]
struct Step<'a> {
    /// Rotary tables gathered for the new positions, `(b, t, head_dim / 2)`.
    cos: &'a Tensor,
    sin: &'a Tensor,
    /// Additive f32 mask `(b, 1, 1, t, T)`: for a prefill over the new
    /// positions; for a decoding step that does not take the CPU kernel,
    /// over each row's cached positions padded to the longest.
    mask: Option<&'a Tensor>,
    pass: Pass<'a>,
}

/// Self-attention with grouped key/value heads.
#[derive(Debug, Clone)]
struct Attention {
    /// `q_proj`, `k_proj` and `v_proj` stacked: one projection per step.
    qkv_proj: Proj,
    o_proj: Proj,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl Attention {
    fn load(w: &Weights, cfg: &DecoderConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        let (nh, nkv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let (q_norm, k_norm) = if cfg.qk_norm {
            (
                Some(RmsNorm::load(&w.pp("q_norm"), hd, cfg.rms_norm_eps)?),
                Some(RmsNorm::load(&w.pp("k_norm"), hd, cfg.rms_norm_eps)?),
            )
        } else {
            (None, None)
        };
        Ok(Attention {
            qkv_proj: stacked(
                w,
                vec![
                    linear_parts(&w.pp("q_proj"), h, nh * hd, cfg.qkv_bias)?,
                    linear_parts(&w.pp("k_proj"), h, nkv * hd, cfg.qkv_bias)?,
                    linear_parts(&w.pp("v_proj"), h, nkv * hd, cfg.qkv_bias)?,
                ],
            )?,
            o_proj: linear(&w.pp("o_proj"), nh * hd, h, cfg.o_bias)?,
            q_norm,
            k_norm,
            num_heads: nh,
            num_kv_heads: nkv,
            head_dim: hd,
        })
    }

    /// `x`: `(b, t, hidden)`. Writes the new keys and values into each
    /// row's slot and attends over what the slot holds.
    fn forward(
        &self,
        x: &Tensor,
        step: &Step<'_>,
        cache: &mut SlotCache,
        layer: usize,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (nh, nkv, hd) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let qkv = self.qkv_proj.forward(x)?;
        let q = qkv.narrow(2, 0, nh * hd)?.reshape((b, t, nh, hd))?;
        let k = qkv.narrow(2, nh * hd, nkv * hd)?.reshape((b, t, nkv, hd))?;
        let v = qkv
            .narrow(2, (nh + nkv) * hd, nkv * hd)?
            .reshape((b, t, nkv, hd))?;
        let q = match &self.q_norm {
            Some(norm) => norm.forward(&q)?,
            None => q,
        };
        let k = match &self.k_norm {
            Some(norm) => norm.forward(&k)?,
            None => k,
        };
        let q = candle_nn::rotary_emb::rope(&q.transpose(1, 2)?.contiguous()?, step.cos, step.sin)?;
        let k = candle_nn::rotary_emb::rope(&k.transpose(1, 2)?.contiguous()?, step.cos, step.sin)?;
        let v = v.transpose(1, 2)?.contiguous()?;
        let scale = 1.0 / (hd as f64).sqrt();
        match step.pass {
            Pass::Prefill { slots, pads } => {
                for (i, (&slot, &pad)) in slots.iter().zip(pads).enumerate() {
                    let len = t - pad;
                    cache.write(
                        slot,
                        layer,
                        0,
                        &k.narrow(0, i, 1)?.narrow(2, pad, len)?,
                        &v.narrow(0, i, 1)?.narrow(2, pad, len)?,
                    )?;
                }
                let out = self.attend(&q, &k, &v, step.mask, scale)?;
                Ok(self.o_proj.forward(&out)?)
            }
            Pass::Decode { slots, lens } => {
                for (i, (&slot, &at)) in slots.iter().zip(lens).enumerate() {
                    cache.write(slot, layer, at, &k.narrow(0, i, 1)?, &v.narrow(0, i, 1)?)?;
                }
                let out = match step.mask {
                    None => self.attend_cached(&q, slots, lens, cache, layer, scale)?,
                    Some(mask) => {
                        let (keys, values) = gather_padded(cache, slots, lens, layer)?;
                        self.attend(&q, &keys, &values, Some(mask), scale)?
                    }
                };
                Ok(self.o_proj.forward(&out)?)
            }
        }
    }

    /// A decoding step's attention with the CPU kernel, reading every
    /// row's keys and values in place in its slot.
    fn attend_cached(
        &self,
        q: &Tensor,
        slots: &[usize],
        lens: &[usize],
        cache: &SlotCache,
        layer: usize,
        scale: f64,
    ) -> Result<Tensor> {
        let (b, nh, _, hd) = q.dims4()?;
        let nkv = self.num_kv_heads;
        let shape = QueryShape {
            rows: b,
            kv_heads: nkv,
            rep: nh / nkv,
            head_dim: hd,
            row_stride: nh * hd,
        };
        let longest = lens.iter().max().map_or(1, |len| len + 1);
        let device = q.device().clone();
        let q = q.contiguous()?;
        let (storage, layout) = q.storage_and_layout();
        let q = cpu_f32_slice(&storage, layout)?;
        let mut out = vec![0f32; b * nh * hd];
        let mut scores = vec![0f32; decode_attention_scratch(shape, longest)];
        let slot = |i: usize| (slots[i], lens[i] + 1);
        attend_host(
            cache.kv_dtype,
            &cache.slots,
            &slot,
            layer,
            q,
            shape,
            scale as f32,
            &mut out,
            &mut scores,
        )?;
        Ok(Tensor::from_vec(out, (b, 1, nh * hd), &device)?)
    }

    /// Attention of `q` `(b, heads, t, head_dim)` over `keys`, `values`
    /// `(b, kv_heads, T, head_dim)` with an additive mask `(b, 1, 1, t, T)`;
    /// returns `(b, t, heads * head_dim)`.
    fn attend(
        &self,
        q: &Tensor,
        keys: &Tensor,
        values: &Tensor,
        mask: Option<&Tensor>,
        scale: f64,
    ) -> Result<Tensor> {
        let (b, nh, t, hd) = q.dims4()?;
        let nkv = self.num_kv_heads;
        let total = keys.dim(2)?;
        // Grouped heads: the `rep` query heads that share a key/value head
        // are stacked along the sequence axis, so keys are never copied.
        let rep = nh / nkv;
        let q = q.reshape((b, nkv, rep * t, hd))?;
        let scores = (q.matmul(&keys.t()?)? * scale)?
            .to_dtype(DType::F32)?
            .reshape((b, nkv, rep, t, total))?;
        let scores = match mask {
            Some(mask) => scores.broadcast_add(mask)?,
            None => scores,
        };
        let probs = candle_nn::ops::softmax_last_dim(&scores)?
            .to_dtype(values.dtype())?
            .reshape((b, nkv, rep * t, total))?;
        Ok(probs
            .matmul(values)?
            .reshape((b, nh, t, hd))?
            .transpose(1, 2)?
            .reshape((b, t, nh * hd))?)
    }
}

/// The cached keys and values of `layer` for each row (`lens[i] + 1`
/// positions), zero-padded to the longest: `(b, kv_heads, T, head_dim)`.
fn gather_padded(
    cache: &SlotCache,
    slots: &[usize],
    lens: &[usize],
    layer: usize,
) -> Result<(Tensor, Tensor)> {
    let longest = lens.iter().map(|len| len + 1).max().unwrap_or(1);
    let mut keys = Vec::with_capacity(slots.len());
    let mut values = Vec::with_capacity(slots.len());
    for (&slot, &len) in slots.iter().zip(lens) {
        let KvData::Tensors { keys: k, values: v } = &cache.slot(slot)?.data else {
            return Err(candle_core::Error::Msg(
                "a host cache is read in place, not gathered".into(),
            )
            .into());
        };
        let n = len + 1;
        keys.push(
            k[layer]
                .narrow(2, 0, n)?
                .pad_with_zeros(2, 0, longest - n)?,
        );
        values.push(
            v[layer]
                .narrow(2, 0, n)?
                .pad_with_zeros(2, 0, longest - n)?,
        );
    }
    Ok((Tensor::cat(&keys, 0)?, Tensor::cat(&values, 0)?))
}

/// The gated (SwiGLU) MLP.
#[derive(Debug, Clone)]
struct Mlp {
    /// `gate_proj` and `up_proj` stacked: one projection per step.
    gate_up_proj: Proj,
    intermediate: usize,
    down_proj: Proj,
}

impl Mlp {
    fn load(w: &Weights, cfg: &DecoderConfig) -> Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Mlp {
            gate_up_proj: stacked(
                w,
                vec![
                    linear_parts(&w.pp("gate_proj"), h, i, false)?,
                    linear_parts(&w.pp("up_proj"), h, i, false)?,
                ],
            )?,
            intermediate: i,
            down_proj: linear(&w.pp("down_proj"), i, h, false)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate_up = self.gate_up_proj.forward(x)?;
        let last = gate_up.rank() - 1;
        let i = self.intermediate;
        if gate_up.dtype() == DType::F32 && gate_up.device().is_cpu() {
            // the host path's silu, so that both paths give the same bits
            let gate_up = gate_up.contiguous()?;
            let (storage, layout) = gate_up.storage_and_layout();
            let values = cpu_f32_slice(&storage, layout)?;
            let mut act = vec![0f32; values.len() / 2];
            silu_mul_rows(values, i, &mut act);
            let mut dims = gate_up.dims().to_vec();
            dims[last] = i;
            let act = Tensor::from_vec(act, dims, gate_up.device())?;
            return Ok(self.down_proj.forward(&act)?);
        }
        let gate = candle_nn::ops::silu(&gate_up.narrow(last, 0, i)?)?;
        let up = gate_up.narrow(last, i, i)?;
        Ok(self.down_proj.forward(&(gate * up)?)?)
    }
}

/// One pre-norm decoder block.
#[derive(Debug, Clone)]
struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl DecoderLayer {
    fn load(w: &Weights, cfg: &DecoderConfig) -> Result<Self> {
        Ok(DecoderLayer {
            input_layernorm: RmsNorm::load(
                &w.pp("input_layernorm"),
                cfg.hidden_size,
                cfg.rms_norm_eps,
            )?,
            self_attn: Attention::load(&w.pp("self_attn"), cfg)?,
            post_attention_layernorm: RmsNorm::load(
                &w.pp("post_attention_layernorm"),
                cfg.hidden_size,
                cfg.rms_norm_eps,
            )?,
            mlp: Mlp::load(&w.pp("mlp"), cfg)?,
        })
    }

    fn forward(
        &self,
        x: &Tensor,
        step: &Step<'_>,
        cache: &mut SlotCache,
        layer: usize,
    ) -> Result<Tensor> {
        let h = self.input_layernorm.forward(x)?;
        let h = self.self_attn.forward(&h, step, cache, layer)?;
        let x = (x + h)?;
        let h = self.post_attention_layernorm.forward(&x)?;
        let h = self.mlp.forward(&h)?;
        Ok((x + h)?)
    }
}

/// The most bytes of attention scores one prefill group may hold.
pub const PREFILL_SCORE_BUDGET: usize = 256 << 20;

/// The most prompt tokens one chunk of a prefill on host buffers carries
/// through the blocks.
pub const PREFILL_CHUNK_TOKENS: usize = 512;

/// Where the host path's time went, summed over the passes run while
/// [`Decoder::time_phases`] was on (feature `phase-clock`).
#[cfg(feature = "phase-clock")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// Passes timed: prefill calls, or decoding steps.
    pub passes: u64,
    /// In the projections, the LM head's included.
    pub projections: Duration,
    /// In attention: scores, softmax and weighted sums.
    pub attention: Duration,
    /// In the RMS norms (the final one's included) and the residual
    /// additions done with them.
    pub norms: Duration,
    /// In the rotary embeddings of queries and keys (and their q/k norms,
    /// where the model has them) and writing keys and values to the cache.
    pub rotary: Duration,
    /// In the MLP's activation, `silu(gate) * up`.
    pub activation: Duration,
    /// In the residual additions not done with the norm that follows them
    /// (the last layer's, before the final norm; the others are in
    /// [`PhaseTimes::norms`]).
    pub additions: Duration,
    /// In the whole of the passes: every phase above and the rest (the
    /// embeddings, the step's bookkeeping).
    pub total: Duration,
}

/// [`PhaseTimes`] of prefill and of decoding steps (feature
/// `phase-clock`).
#[cfg(feature = "phase-clock")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseReport {
    /// Prefill calls.
    pub prefill: PhaseTimes,
    /// Decoding steps.
    pub decoding: PhaseTimes,
}

/// What a host pass is, for the phase clock.
#[derive(Debug, Clone, Copy)]
enum HostPass {
    Prefill = 0,
    Decoding = 1,
}

/// The clock behind [`Decoder::time_phases`]: per pass kind, the passes
/// and the nanoseconds of each phase of [`PhaseTimes`] and of whole
/// passes. A clone starts with a clock of its own, stopped.
#[cfg(feature = "phase-clock")]
#[derive(Debug, Default)]
struct PhaseClock {
    on: AtomicBool,
    counts: [[AtomicU64; 8]; 2],
}

/// Without the `phase-clock` feature the clock never runs: its readings
/// compile to nothing.
#[cfg(not(feature = "phase-clock"))]
#[derive(Debug, Default, Clone)]
struct PhaseClock {}

#[cfg(feature = "phase-clock")]
impl Clone for PhaseClock {
    fn clone(&self) -> Self {
        PhaseClock::default()
    }
}

impl PhaseClock {
    const PROJECTIONS: usize = 1;
    const ATTENTION: usize = 2;
    const NORMS: usize = 4;
    const ROTARY: usize = 5;
    const ACTIVATION: usize = 6;
    const ADDITIONS: usize = 7;
}

#[cfg(not(feature = "phase-clock"))]
impl PhaseClock {
    /// Never an instant: the clock does not run.
    #[inline(always)]
    fn start(&self) -> Option<Instant> {
        None
    }

    #[inline(always)]
    fn add(&self, _pass: HostPass, _phase: usize, _start: Option<Instant>) {}

    #[inline(always)]
    fn pass(&self, _pass: HostPass, _start: Option<Instant>) {}
}

#[cfg(feature = "phase-clock")]
impl PhaseClock {
    const PASSES: usize = 0;
    const TOTAL: usize = 3;

    /// The instant a timed phase starts, if the clock runs.
    fn start(&self) -> Option<Instant> {
        self.on.load(Ordering::Relaxed).then(Instant::now)
    }

    /// Adds the time since `start` to `phase` of `pass`.
    fn add(&self, pass: HostPass, phase: usize, start: Option<Instant>) {
        if let Some(start) = start {
            let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.counts[pass as usize][phase].fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Ends a pass of `pass` that started at `start`.
    fn pass(&self, pass: HostPass, start: Option<Instant>) {
        if start.is_some() {
            self.counts[pass as usize][Self::PASSES].fetch_add(1, Ordering::Relaxed);
        }
        self.add(pass, Self::TOTAL, start);
    }

    /// The sums so far, reset to zero.
    fn take(&self) -> PhaseReport {
        let times = |pass: HostPass| {
            let [
                passes,
                projections,
                attention,
                total,
                norms,
                rotary,
                activation,
                additions,
            ] = self.counts[pass as usize]
                .each_ref()
                .map(|c| c.swap(0, Ordering::Relaxed));
            PhaseTimes {
                passes,
                projections: Duration::from_nanos(projections),
                attention: Duration::from_nanos(attention),
                norms: Duration::from_nanos(norms),
                rotary: Duration::from_nanos(rotary),
                activation: Duration::from_nanos(activation),
                additions: Duration::from_nanos(additions),
                total: Duration::from_nanos(total),
            }
        };
        PhaseReport {
            prefill: times(HostPass::Prefill),
            decoding: times(HostPass::Decoding),
        }
    }
}

/// Where the embedding rows come from.
#[derive(Debug, Clone)]
enum Embeddings {
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
    embed_tokens: Embeddings,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Proj,
    rope: Rope,
    config: DecoderConfig,
    max_seq_len: usize,
    /// The compute dtype ([`Weights::compute_dtype`]).
    dtype: DType,
    /// The dtype the weights are kept in (of the float ones, where some
    /// are quantized).
    weight_dtype: DType,
    /// Whether projections are quantized (a GGUF file's): every pass runs
    /// on host buffers.
    quantized: bool,
    /// The dtype of the KV cache on the host-buffer path.
    kv_dtype: DType,
    device: Device,
    clock: PhaseClock,
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
    fn host_only(&self) -> bool {
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

    /// Whether decoding steps take the CPU attention kernel (f32 on the
    /// CPU), which reads each slot in place and needs no mask.
    fn decodes_in_place(&self) -> bool {
        self.device.is_cpu() && self.dtype == DType::F32
    }

    /// One forward pass over `t` new positions of `b` rows: embeddings,
    /// blocks (writing keys and values into the rows' slots), final norm
    /// and LM head on the last position. Returns f32 logits `(b, vocab)`.
    fn forward(
        &self,
        input_ids: &Tensor,
        positions: &Tensor,
        mask: Option<&Tensor>,
        pass: Pass<'_>,
        cache: &mut SlotCache,
    ) -> Result<Tensor> {
        let (_, t) = input_ids.dims2()?;
        let (cos, sin) = self.rope.gather(positions)?;
        let Embeddings::Table(table) = &self.embed_tokens else {
            return Err(candle_core::Error::Msg(
                "bf16 and f16 weights on the CPU run on host buffers only".into(),
            )
            .into());
        };
        let mut x = table.forward(input_ids)?;
        let step = Step {
            cos: &cos,
            sin: &sin,
            mask,
            pass,
        };
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, &step, cache, i)?;
        }
        let last = x.narrow(1, t - 1, 1)?;
        let last = self.norm.forward(&last)?;
        let logits = self.lm_head.forward(&last)?.squeeze(1)?;
        Ok(logits.to_dtype(DType::F32)?)
    }

    /// One decoding step: appends `tokens[i]` to the sequence in
    /// `slots[i]` and returns the f32 logits of the new positions,
    /// `(b, vocab)`.
    pub fn decode(&self, slots: &[usize], tokens: &[u32], cache: &mut SlotCache) -> Result<Tensor> {
        let b = slots.len();
        if self.host_only() {
            let mut out = vec![0f32; b * self.config.vocab_size];
            self.decode_host(slots, tokens, cache, &mut out)?;
            return Ok(Tensor::from_vec(
                out,
                (b, self.config.vocab_size),
                &self.device,
            )?);
        }
        let mut lens = Vec::with_capacity(b);
        for &slot in slots {
            let kv = cache.slot(slot)?;
            if kv.len >= kv.capacity {
                return Err(candle_core::Error::Msg(format!(
                    "slot {slot} is full ({} positions)",
                    kv.capacity
                ))
                .into());
            }
            lens.push(kv.len);
        }
        let positions: Vec<u32> = lens
            .iter()
            .map(|&len| u32::try_from(len).unwrap_or(u32::MAX))
            .collect();
        let ids = Tensor::from_slice(tokens, (b, 1), &self.device)?;
        let positions = Tensor::from_vec(positions, (b, 1), &self.device)?;
        let mask = if self.decodes_in_place() {
            None
        } else {
            let longest = lens.iter().max().map_or(1, |len| len + 1);
            let mut data = Vec::with_capacity(b * longest);
            for &len in &lens {
                data.extend(
                    (0..longest).map(|j| if j <= len { 0.0f32 } else { f32::NEG_INFINITY }),
                );
            }
            Some(Tensor::from_vec(data, (b, 1, 1, 1, longest), &self.device)?)
        };
        let logits = self.forward(
            &ids,
            &positions,
            mask.as_ref(),
            Pass::Decode { slots, lens: &lens },
            cache,
        )?;
        for &slot in slots {
            cache.advance(slot, 1)?;
        }
        Ok(logits)
    }

    /// One decoding step as [`Decoder::decode`], its f32 logits written
    /// into `out` (`(b, vocab)`, row after row). In f32 on the CPU, when
    /// every projection takes `b` rows on host buffers (any number with
    /// packed weights, up to the dot-product kernel's rows otherwise), the
    /// step runs on buffers the cache keeps and allocates nothing;
    /// otherwise it goes through [`Decoder::decode`] with the same result.
    pub fn decode_into(
        &self,
        slots: &[usize],
        tokens: &[u32],
        cache: &mut SlotCache,
        out: &mut [f32],
    ) -> Result<()> {
        if cache.is_host() && self.projections_take(slots.len()) {
            self.decode_host(slots, tokens, cache, out)
        } else {
            let logits = self.decode(slots, tokens, cache)?;
            Self::copy_logits(&logits, out)
        }
    }

    /// Whether every projection takes `rows` rows on host buffers
    /// ([`Proj::takes_rows`]).
    fn projections_take(&self, rows: usize) -> bool {
        self.lm_head.takes_rows(rows)
            && self.layers.iter().all(|l| {
                [
                    &l.self_attn.qkv_proj,
                    &l.self_attn.o_proj,
                    &l.mlp.gate_up_proj,
                    &l.mlp.down_proj,
                ]
                .into_iter()
                .all(|p| p.takes_rows(rows))
            })
    }

    /// [`Decoder::decode_into`] on host buffers: the arithmetic of the
    /// tensor path, operation by operation, so the same bits.
    fn decode_host(
        &self,
        slots: &[usize],
        tokens: &[u32],
        cache: &mut SlotCache,
        out: &mut [f32],
    ) -> Result<()> {
        let m = slots.len();
        let (h, vocab) = (self.config.hidden_size, self.config.vocab_size);
        if tokens.len() != m || out.len() != m * vocab {
            return Err(candle_core::Error::Msg(format!(
                "decoding step: {m} slots, {} tokens and room for {} logits of {vocab}",
                tokens.len(),
                out.len()
            ))
            .into());
        }
        let SlotCache {
            slots: kv,
            buffers,
            kv_dtype,
            ..
        } = cache;
        let kv_dtype = *kv_dtype;
        let StepBuffers {
            tokens: step,
            last,
            activations,
        } = buffers;
        step.clear();
        // Buffers are sized for the rows' reserved room, not their
        // lengths, so that they do not grow step by step.
        let mut room = 1;
        for (row, (&slot, &id)) in slots.iter().zip(tokens).enumerate() {
            let s = slot_of(kv, slot)?;
            if s.len >= s.capacity {
                return Err(candle_core::Error::Msg(format!(
                    "slot {slot} is full ({} positions)",
                    s.capacity
                ))
                .into());
            }
            room = room.max(s.capacity);
            step.push(HostToken {
                id,
                slot,
                pos: s.len,
                last_of: Some(row),
                feature: None,
            });
        }
        let mut acts = activations.get(&self.config, m, m, room);
        let last = last.get(m * h);
        let pass = self.clock.start();
        self.blocks_host(HostPass::Decoding, step, kv, kv_dtype, &[], &mut acts, last)?;
        let since = self.clock.start();
        self.lm_head.forward_rows(last, m, acts.out_t, out)?;
        self.clock
            .add(HostPass::Decoding, PhaseClock::PROJECTIONS, since);
        self.clock.pass(HostPass::Decoding, pass);
        for &slot in slots {
            slot_of_mut(kv, slot)?.len += 1;
        }
        Ok(())
    }

    /// The embedding row of each token of `part` into the rows of `x`
    /// (`hidden` values each), widened to f32 where the table is kept at
    /// two bytes.
    fn embed_rows(&self, part: &[HostToken], features: &[f32], x: &mut [f32]) -> Result<()> {
        let h = self.config.hidden_size;
        self.embed_token_rows(part, x)?;
        // Image features over their tokens' embeddings.
        for (row, token) in x.chunks_exact_mut(h).zip(part) {
            if let Some(at) = token.feature {
                let src = features.get(at * h..(at + 1) * h).ok_or_else(|| {
                    candle_core::Error::Msg(format!(
                        "image feature row {at} is past the {} rows encoded",
                        features.len() / h
                    ))
                })?;
                row.copy_from_slice(src);
            }
        }
        Ok(())
    }

    /// The embedding row of each token of `part`, from the table.
    fn embed_token_rows(&self, part: &[HostToken], x: &mut [f32]) -> Result<()> {
        let h = self.config.hidden_size;
        let outside =
            |id: u32| candle_core::Error::Msg(format!("token {id} is outside the vocabulary"));
        match &self.embed_tokens {
            Embeddings::Table(table) => {
                let table = table.embeddings();
                let (storage, layout) = table.storage_and_layout();
                let table = cpu_f32_slice(&storage, layout)?;
                for (row, token) in x.chunks_exact_mut(h).zip(part) {
                    let at = token.id as usize * h;
                    let src = table.get(at..at + h).ok_or_else(|| outside(token.id))?;
                    row.copy_from_slice(src);
                }
            }
            Embeddings::Half(table) => {
                let (storage, layout) = table.storage_and_layout();
                let start = layout.start_offset();
                for (row, token) in x.chunks_exact_mut(h).zip(part) {
                    let at = start + token.id as usize * h;
                    let widened = match &*storage {
                        candle_core::Storage::Cpu(CpuStorage::BF16(data)) => data
                            .get(at..at + h)
                            .map(|src| widen(src, row, half::bf16::to_f32)),
                        candle_core::Storage::Cpu(CpuStorage::F16(data)) => data
                            .get(at..at + h)
                            .map(|src| widen(src, row, half::f16::to_f32)),
                        _ => {
                            return Err(candle_core::Error::Msg(
                                "expected bf16 or f16 embeddings on the CPU".into(),
                            )
                            .into());
                        }
                    };
                    widened.ok_or_else(|| outside(token.id))?;
                }
            }
            Embeddings::Quant(table) => {
                for (row, token) in x.chunks_exact_mut(h).zip(part) {
                    if token.id as usize >= table.rows() {
                        return Err(outside(token.id).into());
                    }
                    table.dequantize_row(token.id as usize, row);
                }
            }
            Embeddings::Head => {
                for (row, token) in x.chunks_exact_mut(h).zip(part) {
                    self.lm_head
                        .packed_row_into(token.id as usize, row)
                        .ok_or_else(|| outside(token.id))?;
                }
            }
        }
        Ok(())
    }

    /// The decoder blocks over `part` on host buffers, one activation row
    /// per token: embeddings, then every layer (each token's keys and
    /// values written at its position of its slot, its attention over
    /// its slot's first `pos + 1` positions), then the final norm of each
    /// token that ends its sequence into row `last_of` of `last`. The
    /// tensor path's operations, in its order; the phase clock counts
    /// them under `kind`.
    // The pass, its tokens and image features, the cache and the scratch:
    // one call per chunk on the hot path, no struct to fill per call.
    #[allow(clippy::too_many_arguments)]
    fn blocks_host(
        &self,
        kind: HostPass,
        part: &[HostToken],
        kv: &mut [Option<SlotKv>],
        kv_dtype: DType,
        features: &[f32],
        acts: &mut Activations<'_>,
        last: &mut [f32],
    ) -> Result<()> {
        let cfg = &self.config;
        let t = part.len();
        let (h, nh, nkv, hd) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let (qkv_n, inter) = ((nh + 2 * nkv) * hd, cfg.intermediate_size);
        let shape = host_query_shape(cfg, t);
        let (x, normed, qkv, attn, proj, gate_up, act) = (
            &mut acts.x[..t * h],
            &mut acts.normed[..t * h],
            &mut acts.qkv[..t * qkv_n],
            &mut acts.attn[..t * nh * hd],
            &mut acts.proj[..t * h],
            &mut acts.gate_up[..t * 2 * inter],
            &mut acts.act[..t * inter],
        );
        let (out_t, scores) = (&mut *acts.out_t, &mut *acts.scores);
        self.embed_rows(part, features, x)?;
        let (cos_storage, cos_layout) = self.rope.cos.storage_and_layout();
        let (sin_storage, sin_layout) = self.rope.sin.storage_and_layout();
        let cos = cpu_f32_slice(&cos_storage, cos_layout)?;
        let sin = cpu_f32_slice(&sin_storage, sin_layout)?;
        let half = hd / 2;
        let scale = (1.0 / (hd as f64).sqrt()) as f32;
        for (li, layer) in self.layers.iter().enumerate() {
            let a = &layer.self_attn;
            // The layers after the first had their input norm, with the
            // residual addition before it, at the end of the one before.
            if li == 0 {
                let since = self.clock.start();
                layer.input_layernorm.rows(x, normed)?;
                self.clock.add(kind, PhaseClock::NORMS, since);
            }
            let since = self.clock.start();
            a.qkv_proj.forward_rows(normed, t, out_t, qkv)?;
            self.clock.add(kind, PhaseClock::PROJECTIONS, since);
            let since = self.clock.start();
            for (row, token) in qkv.chunks_exact_mut(qkv_n).zip(part) {
                let pos = token.pos;
                let (Some(cos), Some(sin)) = (
                    cos.get(pos * half..(pos + 1) * half),
                    sin.get(pos * half..(pos + 1) * half),
                ) else {
                    return Err(candle_core::Error::Msg(format!(
                        "position {pos} is past the rotary table ({} positions)",
                        self.max_seq_len
                    ))
                    .into());
                };
                let (q, rest) = row.split_at_mut(nh * hd);
                let (k, v) = rest.split_at_mut(nkv * hd);
                for (heads, norm) in [(q, &a.q_norm), (&mut *k, &a.k_norm)] {
                    if let Some(norm) = norm {
                        norm.rows_in_place(heads)?;
                    }
                    for head in heads.chunks_exact_mut(hd) {
                        rope_in_place(head, cos, sin);
                    }
                }
                write_host(kv, token.slot, li, pos, k, v, hd)?;
            }
            self.clock.add(kind, PhaseClock::ROTARY, since);
            let slot = |i: usize| (part[i].slot, part[i].pos + 1);
            let since = self.clock.start();
            attend_host(kv_dtype, kv, &slot, li, qkv, shape, scale, attn, scores)?;
            self.clock.add(kind, PhaseClock::ATTENTION, since);
            let since = self.clock.start();
            a.o_proj.forward_rows(attn, t, out_t, proj)?;
            self.clock.add(kind, PhaseClock::PROJECTIONS, since);
            let since = self.clock.start();
            layer.post_attention_layernorm.add_rows(x, proj, normed)?;
            self.clock.add(kind, PhaseClock::NORMS, since);
            let since = self.clock.start();
            layer
                .mlp
                .gate_up_proj
                .forward_rows(normed, t, out_t, gate_up)?;
            self.clock.add(kind, PhaseClock::PROJECTIONS, since);
            let since = self.clock.start();
            silu_mul_rows(gate_up, inter, act);
            self.clock.add(kind, PhaseClock::ACTIVATION, since);
            let since = self.clock.start();
            layer.mlp.down_proj.forward_rows(act, t, out_t, proj)?;
            self.clock.add(kind, PhaseClock::PROJECTIONS, since);
            let since = self.clock.start();
            match self.layers.get(li + 1) {
                Some(next) => {
                    next.input_layernorm.add_rows(x, proj, normed)?;
                    self.clock.add(kind, PhaseClock::NORMS, since);
                }
                None => {
                    add_in_place_par(x, proj, h);
                    self.clock.add(kind, PhaseClock::ADDITIONS, since);
                }
            }
        }
        // A decoding step ends every row's sequence, in order: one call
        // normalizes them side by side.
        let since = self.clock.start();
        if part
            .iter()
            .enumerate()
            .all(|(i, token)| token.last_of == Some(i))
        {
            self.norm.rows(x, &mut last[..t * h])?;
        } else {
            for (row, token) in x.chunks_exact(h).zip(part) {
                if let Some(seq) = token.last_of {
                    self.norm.rows(row, &mut last[seq * h..(seq + 1) * h])?;
                }
            }
        }
        self.clock.add(kind, PhaseClock::NORMS, since);
        Ok(())
    }

    /// [`Decoder::prefill`] with the f32 logits of each prompt's last
    /// position written into `out` (`(b, vocab)`, row after row). In f32
    /// on the CPU the prompts' tokens go through the blocks in chunks of at
    /// most [`PREFILL_CHUNK_TOKENS`], one after another across sequences
    /// (no padding), on buffers the cache keeps; otherwise through
    /// [`Decoder::prefill`].
    pub fn prefill_into(
        &self,
        seqs: &[(usize, &[u32], usize)],
        pad_id: u32,
        cache: &mut SlotCache,
        out: &mut [f32],
    ) -> Result<()> {
        self.prefill_into_chunks(seqs, None, pad_id, cache, out, PREFILL_CHUNK_TOKENS)
    }

    /// [`Decoder::prefill_into`] with image features over the prompts'
    /// image tokens (host buffers only: on other paths an error).
    pub fn prefill_images_into(
        &self,
        seqs: &[(usize, &[u32], usize)],
        images: &PrefillImages<'_>,
        pad_id: u32,
        cache: &mut SlotCache,
        out: &mut [f32],
    ) -> Result<()> {
        if !cache.is_host() {
            return Err(
                candle_core::Error::Msg("images run on the CPU (device=cpu) only".into()).into(),
            );
        }
        self.prefill_into_chunks(seqs, Some(images), pad_id, cache, out, PREFILL_CHUNK_TOKENS)
    }

    /// [`Decoder::prefill_into`] with chunks of at most `chunk_tokens`.
    fn prefill_into_chunks(
        &self,
        seqs: &[(usize, &[u32], usize)],
        images: Option<&PrefillImages<'_>>,
        pad_id: u32,
        cache: &mut SlotCache,
        out: &mut [f32],
        chunk_tokens: usize,
    ) -> Result<()> {
        if cache.is_host() {
            for (opened, &(slot, prompt, capacity)) in seqs.iter().enumerate() {
                if let Err(err) = cache.open(slot, capacity.max(prompt.len())) {
                    // Only the slots this call opened: a slot already in
                    // use keeps its sequence.
                    for &(slot, _, _) in &seqs[..opened] {
                        cache.retire(slot);
                    }
                    return Err(err);
                }
            }
            let result = self.prefill_host(seqs, images, cache, out, chunk_tokens);
            for &(slot, prompt, _) in seqs {
                match &result {
                    Ok(()) => cache.advance(slot, prompt.len())?,
                    Err(_) => cache.retire(slot),
                }
            }
            result
        } else {
            let logits = self.prefill(seqs, pad_id, cache)?;
            Self::copy_logits(&logits, out)
        }
    }

    /// [`Decoder::prefill_into`] on host buffers, into slots already
    /// opened (and left at length 0: the caller advances them).
    fn prefill_host(
        &self,
        seqs: &[(usize, &[u32], usize)],
        images: Option<&PrefillImages<'_>>,
        cache: &mut SlotCache,
        out: &mut [f32],
        chunk_tokens: usize,
    ) -> Result<()> {
        let b = seqs.len();
        let (h, vocab) = (self.config.hidden_size, self.config.vocab_size);
        if out.len() != b * vocab {
            return Err(candle_core::Error::Msg(format!(
                "prefill: {b} sequences and room for {} logits of {vocab}",
                out.len()
            ))
            .into());
        }
        let SlotCache {
            slots: kv,
            buffers,
            kv_dtype,
            ..
        } = cache;
        let kv_dtype = *kv_dtype;
        let StepBuffers {
            tokens,
            last,
            activations,
        } = buffers;
        tokens.clear();
        let mut room = 1;
        for (row, &(slot, prompt, _)) in seqs.iter().enumerate() {
            if prompt.is_empty() {
                return Err(
                    candle_core::Error::Msg(format!("sequence {row} has no tokens")).into(),
                );
            }
            room = room.max(slot_of(kv, slot)?.capacity);
            let n = prompt.len();
            // The sequence's image tokens take its feature rows in order.
            let (mut next, end) = images
                .and_then(|i| i.rows.get(row))
                .map_or((0, 0), |r| (r.start, r.end));
            let start = next;
            let image_token = images.map(|i| i.token);
            for (pos, &id) in prompt.iter().enumerate() {
                let feature = (Some(id) == image_token && next < end).then(|| {
                    next += 1;
                    next - 1
                });
                tokens.push(HostToken {
                    id,
                    slot,
                    pos,
                    last_of: (pos + 1 == n).then_some(row),
                    feature,
                });
            }
            if next != end {
                return Err(candle_core::Error::Msg(format!(
                    "sequence {row} has {} image feature rows and {} image tokens",
                    end - start,
                    next - start
                ))
                .into());
            }
        }
        let features = images.map_or(&[][..], |i| i.features);
        // Chunks small enough that their activations stay in the caches
        // and their attention scores within the budget.
        let per_token_scores = self.config.num_attention_heads * room * std::mem::size_of::<f32>();
        let chunk = (PREFILL_SCORE_BUDGET / per_token_scores).clamp(1, chunk_tokens.max(1));
        let rows = chunk.min(tokens.len());
        // The dot-product kernel (weights as stored) takes chunks and the
        // last positions of at most `small_rows` rows.
        let kernel_rows = crate::proj::small_rows().min(rows.max(b));
        let mut acts = activations.get(&self.config, rows, kernel_rows, room);
        let last = last.get(b * h);
        let pass = self.clock.start();
        for part in tokens.chunks(chunk) {
            self.blocks_host(
                HostPass::Prefill,
                part,
                kv,
                kv_dtype,
                features,
                &mut acts,
                last,
            )?;
        }
        let since = self.clock.start();
        self.lm_head.forward_rows(last, b, acts.out_t, out)?;
        self.clock
            .add(HostPass::Prefill, PhaseClock::PROJECTIONS, since);
        self.clock.pass(HostPass::Prefill, pass);
        Ok(())
    }

    /// Additive attention mask for prompts left-padded by `pads[i]`
    /// positions to a common length `t`: `(b, 1, 1, t, t)`.
    pub fn prefill_mask(&self, pads: &[usize], t: usize) -> Result<Tensor> {
        let mut data = Vec::with_capacity(pads.len() * t * t);
        for &pad in pads {
            for q in 0..t {
                for k in 0..t {
                    // A padding query attends to itself only, so that no
                    // row of the softmax is empty.
                    let ok = (k >= pad && k <= q) || k == q;
                    data.push(if ok { 0.0f32 } else { f32::NEG_INFINITY });
                }
            }
        }
        Ok(Tensor::from_vec(
            data,
            (pads.len(), 1, 1, t, t),
            &self.device,
        )?)
    }

    /// Prefills new sequences into free slots: `seqs[i]` is `(slot,
    /// prompt, capacity)`, the slot reserving room for `capacity`
    /// positions (at least the prompt). Returns the f32 logits of each
    /// prompt's last position, `(b, vocab)`, in order.
    ///
    /// Prompts are left-padded with `pad_id` to the longest of their group;
    /// groups are small enough that their attention scores stay within
    /// [`PREFILL_SCORE_BUDGET`] bytes, so a long-prompt batch does not need
    /// memory quadratic in its length times its size at once.
    pub fn prefill(
        &self,
        seqs: &[(usize, &[u32], usize)],
        pad_id: u32,
        cache: &mut SlotCache,
    ) -> Result<Tensor> {
        self.prefill_in_groups(seqs, pad_id, cache, PREFILL_SCORE_BUDGET)
    }

    /// [`Decoder::prefill`] with an explicit score budget in bytes.
    pub fn prefill_in_groups(
        &self,
        seqs: &[(usize, &[u32], usize)],
        pad_id: u32,
        cache: &mut SlotCache,
        score_budget: usize,
    ) -> Result<Tensor> {
        let b = seqs.len();
        if self.host_only() {
            let mut out = vec![0f32; b * self.config.vocab_size];
            self.prefill_into(seqs, pad_id, cache, &mut out)?;
            return Ok(Tensor::from_vec(
                out,
                (b, self.config.vocab_size),
                &self.device,
            )?);
        }
        let longest = seqs
            .iter()
            .map(|(_, p, _)| p.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let per_row = self.config.num_attention_heads * longest * longest * 4;
        let group = (score_budget / per_row.max(1)).clamp(1, b.max(1));
        let mut logits = Vec::new();
        for chunk in seqs.chunks(group) {
            let rows = chunk.len();
            let longest = chunk.iter().map(|(_, p, _)| p.len()).max().unwrap_or(1);
            let pads: Vec<usize> = chunk.iter().map(|(_, p, _)| longest - p.len()).collect();
            let slots: Vec<usize> = chunk.iter().map(|(slot, _, _)| *slot).collect();
            let mut ids = Vec::with_capacity(rows * longest);
            let mut positions = Vec::with_capacity(rows * longest);
            for ((_, prompt, _), &pad) in chunk.iter().zip(&pads) {
                ids.extend(std::iter::repeat_n(pad_id, pad));
                ids.extend_from_slice(prompt);
                positions.extend(std::iter::repeat_n(0u32, pad));
                positions.extend((0..prompt.len()).map(|p| u32::try_from(p).unwrap_or(u32::MAX)));
            }
            for &(slot, prompt, capacity) in chunk {
                cache.open(slot, capacity.max(prompt.len()))?;
            }
            let ids = Tensor::from_vec(ids, (rows, longest), &self.device)?;
            let positions = Tensor::from_vec(positions, (rows, longest), &self.device)?;
            let mask = self.prefill_mask(&pads, longest)?;
            let result = self.forward(
                &ids,
                &positions,
                Some(&mask),
                Pass::Prefill {
                    slots: &slots,
                    pads: &pads,
                },
                cache,
            );
            match result {
                Ok(l) => logits.push(l),
                Err(err) => {
                    for &(slot, _, _) in chunk {
                        cache.retire(slot);
                    }
                    return Err(err);
                }
            }
            for &(slot, prompt, _) in chunk {
                cache.advance(slot, prompt.len())?;
            }
        }
        Ok(Tensor::cat(&logits, 0)?)
    }

    /// Logits `(b, vocab)` as one `Vec<f32>` per row.
    pub fn logits_to_vec(logits: &Tensor) -> Result<Vec<Vec<f32>>> {
        Ok(logits.to_dtype(DType::F32)?.to_vec2::<f32>()?)
    }

    /// Copies f32 logits `(b, vocab)` into `out`, row after row.
    pub fn copy_logits(logits: &Tensor, out: &mut [f32]) -> Result<()> {
        let logits = logits.to_dtype(DType::F32)?.contiguous()?;
        let (storage, layout) = logits.storage_and_layout();
        match &*storage {
            candle_core::Storage::Cpu(CpuStorage::F32(data)) => {
                let start = layout.start_offset();
                let src = data.get(start..start + out.len()).ok_or_else(|| {
                    candle_core::Error::Msg("logits are shorter than the buffer".into())
                })?;
                out.copy_from_slice(src);
                Ok(())
            }
            _ => {
                drop(storage);
                let rows = logits.flatten_all()?.to_vec1::<f32>()?;
                if rows.len() != out.len() {
                    return Err(
                        candle_core::Error::Msg("logits do not fill the buffer".into()).into(),
                    );
                }
                out.copy_from_slice(&rows);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_testkit::conformance::largest_difference;
    use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

    fn tiny_decoder(dtype: DType) -> (tempfile::TempDir, Decoder) {
        decoder_of(&FixtureSpec::tiny(), dtype)
    }

    fn decoder_of(spec: &FixtureSpec, dtype: DType) -> (tempfile::TempDir, Decoder) {
        decoder_rounded(spec, dtype, dtype)
    }

    /// A decoder of `spec`'s weights rounded to `stored` (as a checkpoint
    /// in that dtype holds them), loaded as `dtype`.
    fn decoder_rounded(
        spec: &FixtureSpec,
        stored: DType,
        dtype: DType,
    ) -> (tempfile::TempDir, Decoder) {
        let dir = tempfile::tempdir().expect("tempdir");
        write_llama_fixture(dir.path(), spec).expect("fixture");
        let config = DecoderConfig::from_file(&dir.path().join("config.json")).expect("config");
        let tensors = crate::loader::load_tensors(
            &guidebench_core::model::weight_files(dir.path()).expect("files"),
            &Device::Cpu,
        )
        .expect("tensors")
        .into_iter()
        .map(|(name, t)| (name, t.to_dtype(stored).expect("rounded")))
        .collect();
        let weights = Weights::from_tensors(tensors, dtype, &Device::Cpu);
        (dir, Decoder::load(&weights, &config, 64).expect("decoder"))
    }

    #[test]
    fn bf16_activations_stay_near_the_exact_path_and_agree_on_most_greedy_tokens() {
        // The option rounds activations to bf16 (vdpbf16ps where the CPU
        // has it): the logits move a little. Both decoders are fed the
        // exact path's tokens (so one early difference does not make
        // every later step differ), and the share of steps whose greedy
        // token agrees is measured; the fixtures' tokens have clear
        // margins, so nearly all do.
        let (mut agree, mut steps, mut largest) = (0usize, 0usize, 0f32);
        for spec in [
            FixtureSpec::tiny(),
            FixtureSpec::qwen3(),
            FixtureSpec::tied(),
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            write_llama_fixture(dir.path(), &spec).expect("fixture");
            let config = DecoderConfig::from_file(&dir.path().join("config.json")).expect("config");
            let files = guidebench_core::model::weight_files(dir.path()).expect("files");
            let load = |on: bool| {
                let files = crate::loader::SafetensorsFiles::open(&files).expect("files");
                let weights =
                    Weights::from_files(files, DType::BF16, &Device::Cpu).with_bf16_activations(on);
                Decoder::load(&weights, &config, 64).expect("decoder")
            };
            let (exact, rounded) = (load(false), load(true));
            assert!(!exact.bf16_activations());
            assert_eq!(rounded.bf16_activations(), crate::cpu::has_bf16_dot());
            let vocab = config.vocab_size;
            let prompts: [&[u32]; 2] = [&[5, 6, 7, 8, 9], &[11, 12, 13]];
            let seqs: Vec<(usize, &[u32], usize)> = prompts
                .iter()
                .enumerate()
                .map(|(i, p)| (i, *p, 32))
                .collect();
            let (mut c1, mut c2) = (exact.new_cache(2), rounded.new_cache(2));
            let (mut a, mut b) = (vec![0f32; 2 * vocab], vec![0f32; 2 * vocab]);
            exact
                .prefill_into(&seqs, 2, &mut c1, &mut a)
                .expect("prefill");
            rounded
                .prefill_into(&seqs, 2, &mut c2, &mut b)
                .expect("prefill");
            for _ in 0..16 {
                let ta: Vec<u32> = a.chunks_exact(vocab).map(greedy).collect();
                let tb: Vec<u32> = b.chunks_exact(vocab).map(greedy).collect();
                agree += ta.iter().zip(&tb).filter(|(x, y)| x == y).count();
                steps += ta.len();
                largest = largest.max(largest_difference(&a, &b).1);
                exact
                    .decode_into(&[0, 1], &ta, &mut c1, &mut a)
                    .expect("step");
                rounded
                    .decode_into(&[0, 1], &ta, &mut c2, &mut b)
                    .expect("step");
            }
        }
        eprintln!(
            "bf16 activations: {agree} of {steps} greedy tokens as the exact path's, the \
             logits within {largest}"
        );
        assert!(largest < 0.5, "the logits moved by {largest}");
        assert!(
            agree * 10 >= steps * 9,
            "{agree} of {steps} greedy tokens agree"
        );
    }

    /// The index of the largest logit.
    fn greedy(logits: &[f32]) -> u32 {
        let best = logits
            .iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, v)| {
                if *v > bv { (i, *v) } else { (bi, bv) }
            });
        best.0 as u32
    }

    #[test]
    fn bf16_and_f16_weights_give_the_logits_of_the_same_weights_upcast_to_f32() {
        // Llama, q/k/v biases (Qwen2), q/k norms (Qwen3) and a tied LM
        // head, whose embedding rows come from the packed head. Two-byte
        // weights stay at two bytes; the f32 decoder reads them widened.
        // Where f32 weights are packed too, every product sums in the same
        // order: the same bits. Elsewhere (no AVX2: f32 weights as stored)
        // and for a tied head in f32 (as stored), the same logits up to
        // the order of the sums.
        let prompts: [&[u32]; 3] = [&[5, 6, 7, 8, 9], &[10], &[11, 12, 13]];
        for spec in [
            FixtureSpec::tiny(),
            FixtureSpec::qwen2(),
            FixtureSpec::qwen3(),
            FixtureSpec::tied(),
        ] {
            for stored in [DType::BF16, DType::F16] {
                let (_a, half) = decoder_rounded(&spec, stored, stored);
                assert_eq!(half.kv_dtype(), DType::F32, "an exact KV cache by default");
                let (_b, upcast) = decoder_rounded(&spec, stored, DType::F32);
                assert_eq!(half.weight_dtype(), stored);
                assert_eq!(half.dtype(), DType::F32, "computed in f32");
                let exact = crate::proj::packs_weights() && !spec.tie_word_embeddings;
                let name = format!("{} in {stored:?}", spec.model_type);
                let seqs: Vec<(usize, &[u32], usize)> = prompts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (i, *p, 8))
                    .collect();
                let (mut c1, mut c2) = (half.new_cache(4), upcast.new_cache(4));
                let vocab = half.config().vocab_size;
                let (mut got, mut want) = (vec![0f32; 3 * vocab], vec![0f32; 3 * vocab]);
                let check = |got: &[f32], want: &[f32], what: &str| {
                    let diff = got
                        .iter()
                        .zip(want)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0f32, f32::max);
                    if exact {
                        assert!(
                            got.iter()
                                .zip(want)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{name}: {what}: max |diff| {diff}"
                        );
                    } else {
                        assert!(diff < 1e-4, "{name}: {what}: {diff}");
                    }
                };
                half.prefill_into(&seqs, 2, &mut c1, &mut got)
                    .expect("prefill");
                upcast
                    .prefill_into(&seqs, 2, &mut c2, &mut want)
                    .expect("prefill");
                check(&got, &want, "prefill");
                for step in 0..3u32 {
                    let tokens = [1 + step, 2 + step, 3 + step];
                    half.decode_into(&[0, 1, 2], &tokens, &mut c1, &mut got)
                        .expect("step");
                    upcast
                        .decode_into(&[0, 1, 2], &tokens, &mut c2, &mut want)
                        .expect("step");
                    check(&got, &want, "decoding step");
                }
                // Half the projections' bytes.
                assert_eq!(
                    2 * half.lm_head.bytes(),
                    upcast.lm_head.bytes(),
                    "{name}: the LM head kept at two bytes"
                );
            }
        }
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        let a = Decoder::logits_to_vec(a).expect("vec");
        let b = Decoder::logits_to_vec(b).expect("vec");
        a.iter()
            .flatten()
            .zip(b.iter().flatten())
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    }

    #[test]
    fn prefill_in_groups_of_one_row_equals_one_group_and_decoding_continues_the_same() {
        let (_dir, decoder) = tiny_decoder(DType::F32);
        let prompts: [&[u32]; 3] = [&[5, 6, 7, 8, 9], &[10], &[11, 12, 13]];
        let seqs: Vec<(usize, &[u32], usize)> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (i, *p, 8))
            .collect();
        let mut one = decoder.new_cache(4);
        let mut many = decoder.new_cache(4);
        let l1 = decoder.prefill(&seqs, 2, &mut one).expect("one group");
        let l2 = decoder
            .prefill_in_groups(&seqs, 2, &mut many, 1)
            .expect("groups");
        assert!(max_diff(&l1, &l2) < 1e-4);
        assert_eq!(
            [one.len(0), one.len(1), one.len(2)],
            [Some(5), Some(1), Some(3)]
        );
        let a = decoder.decode(&[0, 1, 2], &[1, 2, 3], &mut one).expect("a");
        let b = decoder
            .decode(&[0, 1, 2], &[1, 2, 3], &mut many)
            .expect("b");
        assert!(max_diff(&a, &b) < 1e-4);
        assert_eq!(one.len(1), Some(2));
    }

    #[test]
    fn a_sequence_decodes_the_same_alone_and_beside_a_sequence_that_joined_later() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let (_dir, decoder) = tiny_decoder(dtype);
            let mut alone = decoder.new_cache(2);
            decoder
                .prefill(&[(0, &[5, 6, 7], 8)], 2, &mut alone)
                .expect("prefill");
            decoder.decode(&[0], &[9], &mut alone).expect("step");
            let want = decoder.decode(&[0], &[10], &mut alone).expect("step");

            let mut shared = decoder.new_cache(2);
            decoder
                .prefill(&[(1, &[5, 6, 7], 8)], 2, &mut shared)
                .expect("prefill");
            decoder.decode(&[1], &[9], &mut shared).expect("step");
            // a longer sequence joins slot 0 between two decoding steps
            decoder
                .prefill(&[(0, &[20, 21, 22, 23, 24, 25, 26], 12)], 2, &mut shared)
                .expect("join");
            let both = decoder
                .decode(&[0, 1], &[4, 10], &mut shared)
                .expect("step");
            let got = both.narrow(0, 1, 1).expect("row");
            assert_eq!(max_diff(&got, &want), 0.0, "{dtype:?}");
            shared.retire(0);
            assert_eq!((shared.len(0), shared.occupied()), (None, 1));
        }
    }

    #[test]
    fn decoding_steps_on_host_buffers_give_the_bits_of_the_tensor_path() {
        // Llama, q/k/v biases (Qwen2), q/k norms (Qwen3), a tied LM head;
        // rows of different lengths, one row alone, and rows joining.
        for spec in [
            FixtureSpec::tiny(),
            FixtureSpec::qwen2(),
            FixtureSpec::qwen3(),
            FixtureSpec::tied(),
        ] {
            let (_dir, decoder) = decoder_of(&spec, DType::F32);
            let vocab = decoder.config().vocab_size;
            let prompts: [&[u32]; 3] = [&[5, 6, 7, 8, 9], &[10], &[11, 12, 13]];
            let seqs: Vec<(usize, &[u32], usize)> = prompts
                .iter()
                .enumerate()
                .map(|(i, p)| (i, *p, 12))
                .collect();
            let mut tensors = decoder.new_cache(4);
            let mut host = decoder.new_cache(4);
            decoder.prefill(&seqs, 2, &mut tensors).expect("prefill");
            decoder.prefill(&seqs, 2, &mut host).expect("prefill");
            let steps: [(&[usize], &[u32]); 4] = [
                (&[0, 1, 2], &[1, 2, 3]),
                (&[1], &[4]),
                (&[2, 0], &[5, 6]),
                (&[0, 1, 2], &[7, 8, 9]),
            ];
            for (slots, tokens) in steps {
                let want = decoder
                    .decode(slots, tokens, &mut tensors)
                    .expect("tensor step");
                let want: Vec<u32> = Decoder::logits_to_vec(&want)
                    .expect("vec")
                    .into_iter()
                    .flatten()
                    .map(f32::to_bits)
                    .collect();
                let mut got = vec![f32::NAN; slots.len() * vocab];
                decoder
                    .decode_host(slots, tokens, &mut host, &mut got)
                    .expect("host step");
                let got: Vec<u32> = got.into_iter().map(f32::to_bits).collect();
                assert!(got == want, "{}: slots {slots:?}", spec.model_type);
                for &slot in slots {
                    assert_eq!(host.len(slot), tensors.len(slot));
                }
            }
        }
    }

    #[test]
    fn prefill_on_host_buffers_matches_the_tensor_path_in_chunks_of_any_size() {
        // Mixed lengths; chunks that split sequences, hold one token, or
        // hold the whole prefill; more sequences than the dot-product
        // kernel takes at once, so that an LM head on weights as stored
        // takes the blocked product.
        for spec in [FixtureSpec::qwen2(), FixtureSpec::qwen3()] {
            let (_dir, decoder) = decoder_of(&spec, DType::F32);
            let vocab = decoder.config().vocab_size;
            let prompts: Vec<Vec<u32>> = (0..crate::proj::small_rows() + 3)
                .map(|i| {
                    (0..1 + (i * 5) % 11)
                        .map(|j| 3 + ((i + 2 * j) % 40) as u32)
                        .collect()
                })
                .collect();
            let seqs: Vec<(usize, &[u32], usize)> = prompts
                .iter()
                .enumerate()
                .map(|(i, p)| (i, p.as_slice(), 16))
                .collect();
            let slots: Vec<usize> = (0..seqs.len()).collect();
            let next: Vec<u32> = (0..seqs.len()).map(|i| 7 + i as u32 % 9).collect();
            let mut tensors = decoder.new_cache(seqs.len());
            let want = decoder.prefill(&seqs, 2, &mut tensors).expect("prefill");
            let want = Decoder::logits_to_vec(&want).expect("vec");
            let want_next = decoder.decode(&slots, &next, &mut tensors).expect("step");
            let want_next = Decoder::logits_to_vec(&want_next).expect("vec");
            for chunk in [1, 3, 7, 4096] {
                let mut host = decoder.new_cache(seqs.len());
                let mut got = vec![f32::NAN; seqs.len() * vocab];
                decoder
                    .prefill_into_chunks(&seqs, None, 2, &mut host, &mut got, chunk)
                    .expect("host prefill");
                let mut got_next = vec![f32::NAN; seqs.len() * vocab];
                decoder
                    .decode_into(&slots, &next, &mut host, &mut got_next)
                    .expect("host step");
                let want: Vec<f32> = want.iter().flatten().copied().collect();
                let want_next: Vec<f32> = want_next.iter().flatten().copied().collect();
                for (name, got, want) in [("prefill", &got, &want), ("step", &got_next, &want_next)]
                {
                    let (at, diff) = largest_difference(got, want);
                    assert!(
                        diff < 1e-4,
                        "{}, chunk {chunk}, {name}: |difference| {diff} at {at}",
                        spec.model_type
                    );
                }
                for (slot, prompt) in prompts.iter().enumerate() {
                    assert_eq!(host.len(slot), Some(prompt.len() + 1));
                }
            }
        }
    }

    #[test]
    fn norms_of_many_rows_at_once_and_after_the_residual_addition_give_the_expected_bits() {
        // rows in blocks of NORM_ROWS and a remainder, and (4096 values a
        // row) enough values to split the rows over threads
        for (rows, n) in [(1, 48), (7, 48), (8, 48), (9, 48), (33, 48), (17, 4096)] {
            let x: Vec<f32> = (0..rows * n)
                .map(|i| ((i * 7919 % 1000) as f32 * 0.013).sin() * 3.0)
                .collect();
            let alpha: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.01).collect();
            let norm = RmsNorm {
                weight: Tensor::from_vec(alpha, n, &Device::Cpu).expect("weight"),
                eps: 1e-6,
            };
            let input = Tensor::from_vec(x.clone(), (rows, n), &Device::Cpu).expect("input");
            let expected: Vec<f32> = norm
                .forward(&input)
                .and_then(|t| Ok(t.flatten_all()?.to_vec1()?))
                .expect("candle's norm");
            let mut out = vec![0f32; rows * n];
            norm.rows(&x, &mut out).expect("rows");
            let mut in_place = x.clone();
            norm.rows_in_place(&mut in_place).expect("in place");
            for got in [&out, &in_place] {
                let same = got
                    .iter()
                    .zip(&expected)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{rows} rows of {n}: not candle's bits");
            }
            // the residual addition with the norm: the bits of the
            // addition, then the norm
            let y: Vec<f32> = x.iter().map(|v| v * 0.5 - 0.25).collect();
            let mut sum = x.clone();
            add_in_place(&mut sum, &y);
            let mut expected = vec![0f32; rows * n];
            norm.rows(&sum, &mut expected).expect("rows");
            let (mut added, mut fused) = (x.clone(), vec![0f32; rows * n]);
            norm.add_rows(&mut added, &y, &mut fused).expect("add_rows");
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&added), bits(&sum), "{rows} rows of {n}: the sums");
            assert_eq!(
                bits(&fused),
                bits(&expected),
                "{rows} rows of {n}: the norms"
            );
        }
    }

    #[cfg(feature = "phase-clock")]
    #[test]
    fn phase_times_count_every_host_pass_and_fit_within_it() {
        let (_dir, decoder) = tiny_decoder(DType::F32);
        let vocab = decoder.config().vocab_size;
        let mut cache = decoder.new_cache(2);
        let mut out = vec![0f32; 2 * vocab];
        let decode = |cache: &mut SlotCache, out: &mut [f32]| {
            decoder
                .decode_into(&[0, 1], &[3, 4], cache, out)
                .expect("step");
        };
        decoder.time_phases(true);
        decoder
            .prefill_into(&[(0, &[5, 6, 7], 8), (1, &[8], 8)], 2, &mut cache, &mut out)
            .expect("prefill");
        for _ in 0..3 {
            decode(&mut cache, &mut out);
        }
        let report = decoder.take_phase_times();
        for (times, passes) in [(report.prefill, 1), (report.decoding, 3)] {
            assert_eq!(times.passes, passes, "{report:?}");
            let phases = [
                times.projections,
                times.attention,
                times.norms,
                times.rotary,
                times.activation,
                times.additions,
            ];
            assert!(phases.iter().all(|t| *t > Duration::ZERO), "{report:?}");
            assert!(phases.iter().sum::<Duration>() <= times.total, "{report:?}");
        }
        // taken: the sums start again from zero
        assert_eq!(decoder.take_phase_times(), PhaseReport::default());
        // stopped: nothing is timed
        decoder.time_phases(false);
        decode(&mut cache, &mut out);
        assert_eq!(decoder.take_phase_times(), PhaseReport::default());
    }

    #[test]
    fn a_failed_prefill_on_host_buffers_frees_the_slots_it_opened_and_no_other() {
        let (_dir, decoder) = tiny_decoder(DType::F32);
        let vocab = decoder.config().vocab_size;
        let mut cache = decoder.new_cache(2);
        let mut out = vec![0f32; 2 * vocab];
        // the second prompt holds a token outside the vocabulary
        let bad = [5, u32::try_from(vocab).expect("vocab") + 3];
        let err = decoder
            .prefill_into(&[(0, &[5, 6], 8), (1, &bad, 8)], 2, &mut cache, &mut out)
            .expect_err("bad token");
        assert!(err.to_string().contains("outside the vocabulary"), "{err}");
        assert_eq!(cache.occupied(), 0);
        // and the slots take the next prefill
        decoder
            .prefill_into(&[(0, &[5, 6], 8), (1, &[7], 8)], 2, &mut cache, &mut out)
            .expect("prefill");
        assert_eq!((cache.len(0), cache.len(1)), (Some(2), Some(1)));
        // a prefill into a slot in use fails without taking that slot's
        // sequence (or the free slot it opened first) with it
        cache.retire(0);
        let err = decoder
            .prefill_into(&[(0, &[5], 8), (1, &[6], 8)], 2, &mut cache, &mut out)
            .expect_err("slot 1 is in use");
        assert!(err.to_string().contains("in use"), "{err}");
        assert_eq!((cache.len(0), cache.len(1)), (None, Some(1)));
    }

    #[test]
    fn decoding_past_a_slots_reserved_room_is_an_error_not_a_wrong_answer() {
        let (_dir, decoder) = tiny_decoder(DType::F32);
        let mut cache = decoder.new_cache(1);
        decoder
            .prefill(&[(0, &[5, 6], 3)], 2, &mut cache)
            .expect("prefill");
        decoder.decode(&[0], &[7], &mut cache).expect("fits");
        let err = decoder.decode(&[0], &[8], &mut cache).expect_err("full");
        assert!(err.to_string().contains("full"), "{err}");
        assert!(decoder.decode(&[1], &[8], &mut cache).is_err());
    }
}
