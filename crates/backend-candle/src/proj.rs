//! Linear layers on the CPU. Where the CPU has AVX2 and FMA (and so
//! with AVX-512; [`packs_weights`]), f32 weights are packed at load into
//! panels of 16 output rows and every product, one decoding row or a
//! prefill chunk, goes through the packed kernels ([`crate::packed`]).
//! Elsewhere,
//! and for a weight shared with another layer (a tied LM head), weights
//! stay as stored: when few rows go through (decoding steps of up to
//! [`small_rows`] rows), each weight row is read once, straight from
//! memory, and dotted with every input row, split over rayon's threads;
//! larger inputs go to the `gemm` crate's blocked product. All of them
//! write into buffers the caller keeps; so does the decoding step's
//! attention, which reads each slot of the KV cache in place.
//!
//! In the dot-product kernel every output element is one dot product with
//! a fixed summation order (16 lanes of fused multiply-adds, then a
//! pairwise sum of the lanes), whichever tile computes it, so a row's
//! result does not depend on how many rows run beside it as long as they
//! all take this path (the packed kernel keeps its own order for every
//! row count).

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Device, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::aligned::{aligned, aligned_copy};
use crate::arena::WeightArena;
use crate::cpu::{Features, Path, rows_times};
use crate::packed::{PackedWeight, packed_matmul};
use crate::quant::{QuantInput, QuantType, QuantWeight, quant_matmul_input};

/// Inputs of at most this many rows use the dot-product kernel when the
/// CPU has neither AVX-512 nor AVX2 with FMA.
pub const SMALL_ROWS: usize = 8;

/// With AVX2 and FMA the dot-product kernel computes tiles of one weight
/// row by up to 6 input rows in registers; it beats candle's matmul up to
/// this many rows.
pub const SMALL_ROWS_AVX2: usize = 32;

/// With AVX-512 the dot-product kernel computes tiles of 4 weight rows by
/// 6 input rows in registers; it beats candle's matmul (which packs the
/// whole weight on every call) up to this many rows.
pub const SMALL_ROWS_AVX512: usize = 64;

/// The most rows that go to the dot-product kernel on this CPU (by the
/// path [`rows_times`] runs).
pub fn small_rows() -> usize {
    match Path::best() {
        Path::Avx512 => SMALL_ROWS_AVX512,
        Path::Avx2 => SMALL_ROWS_AVX2,
        Path::Portable => SMALL_ROWS,
    }
}

/// The projection kernel this CPU runs: `avx512, packed weights`,
/// `avx2+fma, packed weights` or `portable` (the last on weights as
/// stored).
pub fn kernel_path() -> &'static str {
    match Path::best() {
        Path::Avx512 => "avx512, packed weights",
        Path::Avx2 => "avx2+fma, packed weights",
        Path::Portable => "portable",
    }
}

/// Whether f32 CPU projections are packed at load ([`Proj::new`]): with
/// AVX2 and FMA (and so with AVX-512), where the packed kernels ran faster
/// than the dot-product kernels at 1, 8 and 32 rows and than the `gemm`
/// crate's prefill product (`docs/candle-measurements.md`). Not without AVX2,
/// where the packed kernel has only portable code and the `gemm` crate
/// has vector kernels (NEON, SSE).
pub fn packs_weights() -> bool {
    Features::get().avx2
}

/// Whether `weight` is bf16 or f16 on the CPU: always packed, at two
/// bytes a value, whatever the CPU (the portable packed kernel where it
/// has no AVX2).
fn is_half_on_cpu(weight: &Tensor) -> bool {
    matches!(weight.device(), Device::Cpu) && matches!(weight.dtype(), DType::BF16 | DType::F16)
}

/// A linear layer (`y = x W^T + b`, `W` as `(out, in)`).
#[derive(Debug, Clone)]
pub struct Proj {
    weight: Weight,
    bias: Option<Tensor>,
}

/// How a [`Proj`] holds its weight.
#[derive(Debug, Clone)]
enum Weight {
    /// f32 on the CPU, packed at load: every product, of any number of
    /// rows, goes through [`packed_matmul`].
    Packed(Arc<PackedWeight>),
    /// As stored, `(out, in)`: a weight shared with another layer (a tied
    /// LM head shares the embeddings), or one not f32 on the CPU. With
    /// `small` (f32 on the CPU, contiguous) few rows go through the
    /// dot-product kernel and more through the `gemm` crate; otherwise
    /// candle's matmul.
    Plain { weight: Tensor, small: bool },
    /// Quantized matrices (a GGUF file's), rows side by side in the
    /// output in order (several when the stacked projections are of
    /// different types); any number of rows, each part through its
    /// kernel ([`QuantPart`]).
    Quant(Vec<QuantPart>),
}

/// One quantized matrix of a [`Proj`] and the kernel that runs it.
///
/// This crate's kernels ([`crate::quant::quant_matmul`]) run every type on the engine's
/// threads, weights at their stored size (repacked in groups of 16 rows).
/// With `quant_kernels=candle`, candle's quantized matmul runs the Q8_0,
/// Q4_K and Q6_K matrices its repacked 16-row tiles take ([`candle_runs`]:
/// rows of whole 256-value blocks, outputs in sixteens; Q8_0 only with
/// VNNI), on candle's own process-wide thread pool and with a repacked
/// copy beside the stored bytes; measured side by side in
/// `bench/formats` (`docs/candle-measurements.md`).
#[derive(Debug, Clone)]
pub enum QuantPart {
    /// This crate's kernels on the stored bytes.
    Ours(Arc<QuantWeight>),
    /// candle's `QMatMul` (its repacked tiles).
    Candle {
        /// The matmul.
        mm: Arc<candle_core::quantized::QMatMul>,
        /// Rows (outputs), values per row, and the stored bytes.
        rows: usize,
        cols: usize,
        bytes: usize,
    },
}

/// Whether candle's repacked kernel runs a `ty` matrix of `rows` by
/// `cols` on this CPU (see [`QuantPart`]): Q4_K and Q6_K with AVX2, FMA
/// and F16C; Q8_0 only with a VNNI tier of candle's kernels, AVX-512F, BW
/// and VNNI (all three enabled by its 512-bit kernels) or AVX2, FMA and
/// AVX-VNNI.
pub fn candle_runs(ty: QuantType, rows: usize, cols: usize) -> bool {
    let features = Features::get();
    let shape = cols > 0 && cols.is_multiple_of(256) && rows.is_multiple_of(16);
    shape
        && match ty {
            QuantType::Q4K | QuantType::Q6K => features.avx2,
            QuantType::Q8_0 => features.candle_vnni(),
            _ => false,
        }
}

/// The matrix `rows` by `cols` of `ty` blocks (`bytes`, row after row) for
/// this crate's kernels, its size checked.
pub fn quant_weight(
    ty: QuantType,
    rows: usize,
    cols: usize,
    bytes: &[u8],
) -> candle_core::Result<QuantWeight> {
    QuantWeight::new(ty, rows, cols, bytes)
        .map_err(|e| candle_core::Error::Msg(format!("a {} matrix: {e}", ty.name())))
}

impl QuantPart {
    /// The matrix `rows` by `cols` of `ty` blocks (`bytes`, row after
    /// row), with the kernel [`candle_runs`] picks, or ours when
    /// `force_ours`.
    pub fn new(
        ty: QuantType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
        force_ours: bool,
    ) -> candle_core::Result<Self> {
        if !force_ours && candle_runs(ty, rows, cols) {
            let qt = candle_core::quantized::ggml_file::qtensor_from_ggml(
                ty.ggml(),
                bytes,
                vec![rows, cols],
                &Device::Cpu,
            )?;
            return Ok(QuantPart::Candle {
                mm: Arc::new(candle_core::quantized::QMatMul::from_qtensor(qt)?),
                rows,
                cols,
                bytes: bytes.len(),
            });
        }
        Ok(QuantPart::Ours(Arc::new(quant_weight(
            ty, rows, cols, bytes,
        )?)))
    }

    /// Rows (outputs).
    pub fn rows(&self) -> usize {
        match self {
            QuantPart::Ours(w) => w.rows(),
            QuantPart::Candle { rows, .. } => *rows,
        }
    }

    /// Values per row (inputs).
    pub fn cols(&self) -> usize {
        match self {
            QuantPart::Ours(w) => w.cols(),
            QuantPart::Candle { cols, .. } => *cols,
        }
    }

    /// The bytes the file stores it in.
    pub fn stored_bytes(&self) -> usize {
        match self {
            QuantPart::Ours(w) => w.stored_bytes(),
            QuantPart::Candle { bytes, .. } => *bytes,
        }
    }

    /// `x` (`m` rows of `cols`) times the matrix into `out`, row `i` at
    /// `out[i * ldo..]`.
    #[cfg(test)]
    fn matmul(&self, x: &[f32], m: usize, out: &mut [f32], ldo: usize) -> candle_core::Result<()> {
        self.matmul_input(&mut QuantInput::new(x, m, self.cols()), out, ldo)
    }

    /// `input`'s rows times the matrix into `out`, row `i` at
    /// `out[i * ldo..]`; this crate's kernels quantize the rows only where
    /// no earlier part of the same input took the same activation format.
    fn matmul_input(
        &self,
        input: &mut QuantInput<'_>,
        out: &mut [f32],
        ldo: usize,
    ) -> candle_core::Result<()> {
        match self {
            QuantPart::Ours(w) => quant_matmul_input(input, w, out, ldo),
            QuantPart::Candle { mm, rows, cols, .. } => {
                let (x, m) = (input.values(), input.rows());
                use candle_core::Module;
                let xs = Tensor::from_slice(&x[..m * cols], (m, *cols), &Device::Cpu)?;
                let ys = mm.forward(&xs)?;
                let (storage, layout) = ys.storage_and_layout();
                let ys = cpu_f32_slice(&storage, layout)?;
                for (i, row) in ys.chunks_exact(*rows).enumerate() {
                    out[i * ldo..i * ldo + rows].copy_from_slice(row);
                }
            }
        }
        Ok(())
    }
}

impl Proj {
    /// Wraps `weight` `(out, in)` and an optional `bias` `(out)`: packed
    /// into memory from `arena` ([`Proj::packed`]) where the packed kernel
    /// is the fastest this CPU has ([`packs_weights`]), as it is
    /// ([`Proj::shared`]) elsewhere.
    pub fn new(
        weight: Tensor,
        bias: Option<Tensor>,
        arena: &WeightArena,
    ) -> candle_core::Result<Self> {
        if packs_weights() || is_half_on_cpu(&weight) {
            Self::packed(weight, bias, arena)
        } else {
            Ok(Self::shared(weight, bias))
        }
    }

    /// Wraps `weight` `(out, in)` and an optional `bias` `(out)`, an f32
    /// weight on the CPU packed ([`PackedWeight`]) into memory from
    /// `arena` and the tensor dropped; any other weight as it is.
    pub fn packed(
        weight: Tensor,
        bias: Option<Tensor>,
        arena: &WeightArena,
    ) -> candle_core::Result<Self> {
        if !matches!(weight.device(), Device::Cpu) {
            return Ok(Self::shared(weight, bias));
        }
        let (n, k) = weight.dims2()?;
        let weight = weight.contiguous()?;
        let (storage, layout) = weight.storage_and_layout();
        let candle_core::Storage::Cpu(cpu) = &*storage else {
            candle_core::bail!("packing: expected a weight on the CPU");
        };
        let (start, end) = layout.contiguous_offsets().ok_or_else(|| {
            candle_core::Error::Msg("packing: expected a contiguous weight".into())
        })?;
        let packed = match cpu {
            CpuStorage::F32(data) => PackedWeight::pack_in(&data[start..end], n, k, arena),
            CpuStorage::BF16(data) => PackedWeight::pack_in(&data[start..end], n, k, arena),
            CpuStorage::F16(data) => PackedWeight::pack_in(&data[start..end], n, k, arena),
            _ => {
                drop(storage);
                return Ok(Self::shared(weight, bias));
            }
        };
        // The products run in f32 whatever the weights' dtype: so does
        // the bias.
        let bias = bias.map(|b| b.to_dtype(DType::F32)).transpose()?;
        Ok(Proj {
            weight: Weight::Packed(Arc::new(packed)),
            bias,
        })
    }

    /// Wraps `weight` `(out, in)` as it is, for a weight another layer
    /// also reads (packing would copy it): an f32 CPU weight is only
    /// aligned (shared, if it already is).
    pub fn shared(weight: Tensor, bias: Option<Tensor>) -> Self {
        let small = matches!(weight.device(), Device::Cpu)
            && weight.dtype() == DType::F32
            && weight.is_contiguous();
        let weight = if small { aligned(&weight) } else { weight };
        Proj {
            weight: Weight::Plain { weight, small },
            bias,
        }
    }

    /// Wraps quantized matrices `(out_i, in)`, their outputs side by side
    /// in order, and an optional bias `(sum of out_i)` (in f32).
    pub fn quant(parts: Vec<QuantPart>, bias: Option<Tensor>) -> candle_core::Result<Self> {
        let Some(first) = parts.first() else {
            candle_core::bail!("a quantized projection needs a matrix");
        };
        if parts.iter().any(|p| p.cols() != first.cols()) {
            candle_core::bail!("quantized projections of one input differ in their input width");
        }
        let bias = bias.map(|b| b.to_dtype(DType::F32)).transpose()?;
        Ok(Proj {
            weight: Weight::Quant(parts),
            bias,
        })
    }

    /// The weight's `(out, in)`.
    pub fn dims(&self) -> (usize, usize) {
        match &self.weight {
            Weight::Packed(p) => (p.rows(), p.cols()),
            Weight::Quant(parts) => (
                parts.iter().map(|p| p.rows()).sum(),
                parts.first().map_or(0, |p| p.cols()),
            ),
            Weight::Plain { weight, .. } => {
                let dims = weight.dims();
                match dims {
                    [n, k] => (*n, *k),
                    _ => (weight.elem_count(), 1),
                }
            }
        }
    }

    /// The layer with its products rounding the activations to bf16 too
    /// where its weight is packed bf16 and the CPU has AVX-512 BF16
    /// ([`PackedWeight::with_bf16_activations`]); as it is otherwise.
    pub fn with_bf16_activations(mut self, on: bool) -> Self {
        if let Weight::Packed(packed) = &mut self.weight
            && let Some(p) = Arc::get_mut(packed)
        {
            p.set_bf16_activations(on);
        }
        self
    }

    /// Whether products round the activations to bf16.
    pub fn bf16_activations(&self) -> bool {
        matches!(&self.weight, Weight::Packed(p) if p.bf16_activations())
    }

    /// Row `j` of a packed weight, widened to f32, into `out` (`in`
    /// values): the embedding rows of a tied LM head kept at two bytes.
    /// `None` for a weight as stored, a row past the end or a short
    /// buffer.
    pub fn packed_row_into(&self, j: usize, out: &mut [f32]) -> Option<()> {
        match &self.weight {
            Weight::Packed(p) => p.row_into(j, out),
            Weight::Quant(_) | Weight::Plain { .. } => None,
        }
    }

    /// Bytes of the weight and the bias as the checkpoint stores them
    /// (what one product must read).
    pub fn bytes(&self) -> usize {
        let (n, k) = self.dims();
        let weight = match &self.weight {
            Weight::Packed(p) => n * k * p.dtype().size(),
            Weight::Quant(parts) => parts.iter().map(|p| p.stored_bytes()).sum(),
            Weight::Plain { weight, .. } => weight.elem_count() * weight.dtype().size_in_bytes(),
        };
        weight
            + self
                .bias
                .as_ref()
                .map_or(0, |b| b.elem_count() * b.dtype().size_in_bytes())
    }

    /// Whether [`Proj::forward_rows`] takes inputs of `rows` rows: a
    /// packed weight takes any number; a plain f32 CPU weight as many as
    /// the dot-product kernel serves.
    pub fn takes_rows(&self, rows: usize) -> bool {
        match &self.weight {
            Weight::Packed(_) | Weight::Quant(_) => true,
            Weight::Plain { small, .. } => *small && rows <= small_rows(),
        }
    }

    /// `x` (`rows` rows of `in` values) times the weight, plus the bias,
    /// into `out` (`rows` rows of `out` values), f32 weights on the CPU
    /// only, with the bits of [`Proj::forward`] and no allocation. A packed
    /// weight goes through [`packed_matmul`]; for a plain one, rows the
    /// dot-product kernel takes ([`Proj::takes_rows`]) go through it
    /// (`out_t` is its scratch room for `rows * out` values), more through
    /// the `gemm` crate's blocked product that candle's matmul runs,
    /// straight into `out`.
    pub fn forward_rows(
        &self,
        x: &[f32],
        rows: usize,
        out_t: &mut [f32],
        out: &mut [f32],
    ) -> candle_core::Result<()> {
        let (n, k) = self.dims();
        let (Some(x), Some(out)) = (x.get(..rows * k), out.get_mut(..rows * n)) else {
            candle_core::bail!("host matmul: buffers shorter than {rows} rows");
        };
        match &self.weight {
            Weight::Packed(packed) => packed_matmul(x, rows, packed, out),
            Weight::Quant(_) => self.forward_unbiased(x, rows, out)?,
            Weight::Plain { weight, small } => {
                if !small {
                    candle_core::bail!("host matmul: expected a contiguous f32 weight on the CPU");
                }
                let (storage, layout) = weight.storage_and_layout();
                let w = cpu_f32_slice(&storage, layout)?;
                if w.len() < n * k {
                    candle_core::bail!("host matmul: weight shorter than {n} x {k}");
                }
                if self.takes_rows(rows) {
                    let Some(out_t) = out_t.get_mut(..rows * n) else {
                        candle_core::bail!("small matmul: scratch shorter than {rows} rows");
                    };
                    small_matmul_into(x, w, rows, k, out_t, out);
                } else {
                    gemm_into(x, w, rows, k, out);
                }
            }
        }
        if let Some(bias) = &self.bias {
            let (storage, layout) = bias.storage_and_layout();
            let bias = cpu_f32_slice(&storage, layout)?;
            out.par_chunks_mut(n).for_each(|row| {
                for (o, b) in row.iter_mut().zip(bias) {
                    *o += *b;
                }
            });
        }
        Ok(())
    }

    /// `x` times quantized weights into `out`, without the bias.
    fn forward_unbiased(&self, x: &[f32], rows: usize, out: &mut [f32]) -> candle_core::Result<()> {
        let Weight::Quant(parts) = &self.weight else {
            candle_core::bail!("expected a quantized projection");
        };
        let (n, k) = self.dims();
        if x.len() < rows * k || out.len() < rows * n {
            candle_core::bail!("quantized matmul: buffers shorter than {rows} rows");
        }
        // One quantization of the rows per activation format, shared by
        // the parts (a Q4_K_M model's q, k and v: Q4_K, Q4_K and Q6_K).
        let mut input = QuantInput::new(x, rows, k);
        let mut at = 0;
        for part in parts {
            part.matmul_input(&mut input, &mut out[at..], n)?;
            at += part.rows();
        }
        Ok(())
    }

    /// `x`: `(..., in)`; returns `(..., out)`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dims = x.dims();
        let k = dims.last().copied().unwrap_or(0);
        let rows = x.elem_count() / k.max(1);
        // One (rows, in) x (in, out) product for the whole input: candle's
        // `Linear` would run one product per batch row against a broadcast
        // weight, reading (and packing) the weight once per row.
        let x2 = x.reshape((rows, k))?;
        let y = match &self.weight {
            Weight::Packed(packed) => x2
                .to_dtype(DType::F32)?
                .contiguous()?
                .apply_op1_no_bwd(&PackedMatmul(packed))?,
            Weight::Quant(_) => {
                // On host buffers: quantized weights run nowhere else.
                let x = x2.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                let (n, _) = self.dims();
                let mut out = vec![0f32; rows * n];
                self.forward_unbiased(&x, rows, &mut out)?;
                Tensor::from_vec(out, (rows, n), x2.device())?
            }
            Weight::Plain { weight, small } => {
                if !small || rows > small_rows() || x.dtype() != DType::F32 {
                    x2.matmul(&weight.t()?)?
                } else {
                    x2.contiguous()?.apply_op2_no_bwd(weight, &SmallMatmul)?
                }
            }
        };
        let y = match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        let mut out_dims = dims.to_vec();
        if let Some(last) = out_dims.last_mut() {
            *last = y.dim(1)?;
        }
        y.reshape(out_dims)
    }
}

/// `x (m, k)` times a packed weight `(n, k)` transposed, f32 on the CPU.
struct PackedMatmul<'a>(&'a PackedWeight);

impl CustomOp1 for PackedMatmul<'_> {
    fn name(&self) -> &'static str {
        "packed-matmul"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, k) = l.shape().dims2()?;
        let w = self.0;
        if k != w.cols() {
            candle_core::bail!("packed matmul: inner dims {k} and {} differ", w.cols());
        }
        let x = f32_slice(s, l)?;
        let mut out = vec![0f32; m * w.rows()];
        packed_matmul(x, m, w, &mut out);
        Ok((CpuStorage::F32(out), Shape::from((m, w.rows()))))
    }
}

/// `x (m, k)` times `w (n, k)` transposed, f32 on the CPU.
struct SmallMatmul;

/// The values of a contiguous f32 CPU storage under `layout`.
pub fn cpu_f32_slice<'a>(
    storage: &'a candle_core::Storage,
    layout: &Layout,
) -> candle_core::Result<&'a [f32]> {
    match storage {
        candle_core::Storage::Cpu(s) => f32_slice(s, layout),
        _ => candle_core::bail!("expected an f32 tensor on the CPU"),
    }
}

fn f32_slice<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else {
        candle_core::bail!("small matmul: expected f32");
    };
    match l.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => candle_core::bail!("small matmul: expected contiguous inputs"),
    }
}

impl CustomOp2 for SmallMatmul {
    fn name(&self) -> &'static str {
        "small-matmul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, k) = l1.shape().dims2()?;
        let (n, k2) = l2.shape().dims2()?;
        if k != k2 {
            candle_core::bail!("small matmul: inner dims {k} and {k2} differ");
        }
        let x = f32_slice(s1, l1)?;
        let w = f32_slice(s2, l2)?;
        // The inputs on a cache-line boundary too (a small copy).
        let x_copy;
        let x = if (x.as_ptr() as usize).is_multiple_of(64) {
            x
        } else {
            let (data, offset) = aligned_copy(x.iter().copied());
            x_copy = data;
            &x_copy[offset..offset + x.len()]
        };
        let mut out = vec![0f32; m * n];
        let mut out_t = if m == 1 {
            Vec::new()
        } else {
            vec![0f32; n * m]
        };
        small_matmul_into(x, w, m, k, &mut out_t, &mut out);
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

/// `out` `(m, n)` = `x` `(m, k)` times `w` `(n, k)` transposed through the
/// `gemm` crate, on rayon's threads; every slice at least that long.
fn gemm_into(x: &[f32], w: &[f32], m: usize, k: usize, out: &mut [f32]) {
    let n = out.len() / m.max(1);
    assert!(x.len() >= m * k && w.len() >= n * k && out.len() >= m * n);
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: `x` holds `m * k` values read as (m, k) row-major, `w`
    // `n * k` read as its transpose (k, n) (row stride 1, column stride
    // k), `out` `m * n` written as (m, n) row-major, all checked just
    // above; `out` is a `&mut` and so overlaps neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// `out` `(m, n)` = `x` `(m, k)` times `w` `(n, k)` transposed, split over
/// rayon's threads by weight rows; `out_t` is scratch room for `(n, m)`
/// (unused when `m` is 1).
fn small_matmul_into(x: &[f32], w: &[f32], m: usize, k: usize, out_t: &mut [f32], out: &mut [f32]) {
    let n = out.len() / m.max(1);
    // The kernel writes (n, m): each task fills whole weight rows.
    let target = if m == 1 {
        &mut *out
    } else {
        &mut out_t[..n * m]
    };
    let threads = rayon::current_num_threads().max(1);
    // A few tasks per thread, of at least 16 weight rows each, in whole
    // tiles.
    let rows_per_task = n.div_ceil(threads * 4).max(16).next_multiple_of(4);
    target
        .par_chunks_mut(rows_per_task * m)
        .zip(w.par_chunks(rows_per_task * k))
        .for_each(|(out, w)| rows_times(x, w, out, m, k));
    if m > 1 {
        for (j, col) in out_t[..n * m].chunks_exact(m).enumerate() {
            for (i, v) in col.iter().enumerate() {
                out[i * n + j] = *v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Module;
    use candle_nn::Linear;

    /// The largest absolute difference between two tensors of one shape.
    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .and_then(|d| d.abs())
            .and_then(|d| d.flatten_all())
            .and_then(|d| d.max(0))
            .and_then(|d| d.to_scalar::<f32>())
            .expect("difference of two tensors of one shape")
    }

    #[test]
    fn packed_and_plain_projections_match_candle_matmul_at_every_row_count() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1., (37, 70), &dev).expect("w");
        let b = Tensor::randn(0f32, 1., 37, &dev).expect("b");
        let reference = Linear::new(w.clone(), Some(b.clone()));
        let projs = [
            (
                "packed",
                Proj::packed(w.clone(), Some(b.clone()), &WeightArena::new()).expect("packed"),
            ),
            ("plain", Proj::shared(w, Some(b))),
        ];
        for (name, proj) in &projs {
            assert_eq!(proj.dims(), (37, 70), "{name}");
            for rows in [1, 3, SMALL_ROWS, small_rows(), small_rows() + 5] {
                let x = Tensor::randn(0f32, 1., (rows, 1, 70), &dev).expect("x");
                let got = proj.forward(&x).expect("proj");
                let want = reference.forward(&x).expect("linear");
                assert_eq!(got.dims(), want.dims());
                let diff = max_abs_diff(&got, &want);
                assert!(diff < 1e-4, "{name}, rows {rows}: max |diff| {diff}");
                if !proj.takes_rows(rows) {
                    continue;
                }
                // The host path gives the tensor path's bits.
                let xs = x.flatten_all().and_then(|x| x.to_vec1::<f32>()).expect("x");
                let (mut out_t, mut out) = (vec![0f32; rows * 37], vec![0f32; rows * 37]);
                proj.forward_rows(&xs, rows, &mut out_t, &mut out)
                    .expect("host");
                let got = got
                    .flatten_all()
                    .and_then(|x| x.to_vec1::<f32>())
                    .expect("y");
                assert!(
                    got.iter()
                        .zip(&out)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name}, rows {rows}: host and tensor paths differ"
                );
            }
        }
        assert!(projs[0].1.takes_rows(small_rows() + 5));
    }

    /// candle's repacked kernel and this crate's give the same products
    /// of the same blocks within what their different activation
    /// rounding costs (both quantize each activation row to 8-bit blocks;
    /// they differ in rounding and summation order): 1 % of the sum of
    /// the products' sizes, at 1, 8 and 33 rows, for every type candle's
    /// kernel takes; each kernel forced in turn, so both run on any CPU
    /// where [`candle_runs`] says candle's would.
    #[test]
    fn candles_quantized_kernel_and_ours_agree_on_the_same_blocks() {
        let (n, k) = (32, 512);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 0.2)
            .collect();
        let weight = Tensor::from_vec(w, (n, k), &Device::Cpu).expect("weight");
        for ty in [QuantType::Q8_0, QuantType::Q4K, QuantType::Q6K] {
            let qt =
                candle_core::quantized::QTensor::quantize(&weight, ty.ggml()).expect("quantize");
            let bytes = qt.data().expect("bytes").into_owned();
            let ours = QuantPart::new(ty, n, k, &bytes, true).expect("ours");
            assert!(matches!(ours, QuantPart::Ours(_)));
            let theirs = QuantPart::new(ty, n, k, &bytes, false).expect("candle's");
            if !candle_runs(ty, n, k) {
                assert!(matches!(theirs, QuantPart::Ours(_)), "{ty}");
                continue;
            }
            assert!(matches!(theirs, QuantPart::Candle { .. }), "{ty}");
            let mut row = vec![0f32; k];
            let QuantPart::Ours(table) = &ours else {
                unreachable!()
            };
            for m in [1, 8, 33] {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 104_729 % 2003) as f32 / 2003.0 - 0.5) * 3.0)
                    .collect();
                let (mut a, mut b) = (vec![0f32; m * n], vec![0f32; m * n]);
                ours.matmul(&x, m, &mut a, n).expect("ours");
                theirs.matmul(&x, m, &mut b, n).expect("candle's");
                for i in 0..m {
                    for j in 0..n {
                        table.dequantize_row(j, &mut row);
                        let size: f32 = row
                            .iter()
                            .zip(&x[i * k..(i + 1) * k])
                            .map(|(w, x)| (w * x).abs())
                            .sum();
                        let (a, b) = (a[i * n + j], b[i * n + j]);
                        assert!(
                            (a - b).abs() <= 0.01 * size,
                            "{ty}, {m} rows, row {i} column {j}: ours {a}, candle's {b} \
                             (sum of sizes {size})"
                        );
                    }
                }
            }
        }
    }

    /// A projection of mixed quantized types (a Q4_K_M model's q, k and
    /// v: Q4_K, Q4_K, Q6_K; then with a Q8_0 part, another activation
    /// format) gives the bits of its parts run one by one, each quantizing
    /// the input on its own, at 1, 8 and 33 rows.
    #[test]
    fn a_mixed_type_projection_gives_the_bits_of_its_parts_run_one_by_one() {
        let k = 512;
        let quantized = |ty: QuantType, n: usize, seed: usize| {
            let w: Vec<f32> = (0..n * k)
                .map(|i| (((i + seed) * 7919 % 1013) as f32 / 1013.0 - 0.5) * 0.2)
                .collect();
            let weight = Tensor::from_vec(w, (n, k), &Device::Cpu).expect("weight");
            let qt =
                candle_core::quantized::QTensor::quantize(&weight, ty.ggml()).expect("quantize");
            let bytes = qt.data().expect("bytes").into_owned();
            QuantWeight::new(ty, n, k, &bytes).expect("a weight")
        };
        for types in [
            &[QuantType::Q4K, QuantType::Q4K, QuantType::Q6K][..],
            &[
                QuantType::Q6K,
                QuantType::Q8_0,
                QuantType::Q4K,
                QuantType::Q5_0,
            ],
        ] {
            let weights: Vec<QuantWeight> = types
                .iter()
                .enumerate()
                .map(|(i, ty)| quantized(*ty, 32 + 16 * i, 101 * i))
                .collect();
            let n: usize = weights.iter().map(QuantWeight::rows).sum();
            let parts = weights
                .iter()
                .map(|w| QuantPart::Ours(Arc::new(w.clone())))
                .collect();
            let proj = Proj::quant(parts, None).expect("a projection");
            for m in [1, 8, 33] {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 104_729 % 2003) as f32 / 2003.0 - 0.5) * 3.0)
                    .collect();
                let mut together = vec![f32::NAN; m * n];
                proj.forward_rows(&x, m, &mut [], &mut together)
                    .expect("the projection");
                let mut alone = vec![f32::NAN; m * n];
                let mut at = 0;
                for w in &weights {
                    crate::quant::quant_matmul(&x, m, w, &mut alone[at..], n);
                    at += w.rows();
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&together), bits(&alone), "{types:?}, {m} rows");
            }
        }
    }
}
