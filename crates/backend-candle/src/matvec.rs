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

use crate::arena::WeightArena;
use crate::packed::{PackedWeight, packed_matmul};

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

/// The most rows that go to the dot-product kernel on this CPU.
pub fn small_rows() -> usize {
    if has_avx512() {
        SMALL_ROWS_AVX512
    } else if has_avx2_fma() {
        SMALL_ROWS_AVX2
    } else {
        SMALL_ROWS
    }
}

/// The projection kernel this CPU runs: `avx512, packed weights`,
/// `avx2+fma, packed weights` or `portable` (the last on weights as
/// stored).
pub fn kernel_path() -> &'static str {
    if !packs_weights() {
        "portable"
    } else if has_avx512() {
        "avx512, packed weights"
    } else {
        "avx2+fma, packed weights"
    }
}

/// Whether f32 CPU projections are packed at load ([`Proj::new`]): with
/// AVX2 and FMA (and so with AVX-512), where the packed kernels ran faster
/// than the dot-product kernels at 1, 8 and 32 rows and than the `gemm`
/// crate's prefill product (`docs/candle-engine.md`). Not without AVX2,
/// where the packed kernel has only portable code and the `gemm` crate
/// has vector kernels (NEON, SSE).
pub fn packs_weights() -> bool {
    has_avx2_fma()
}

pub(crate) fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The kernels an elementwise or attention pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// One value at a time.
    Portable,
    /// Eight lanes at a time (AVX2 and FMA).
    Avx2,
    /// Sixteen lanes at a time where a kernel has an AVX-512F version,
    /// eight where it has only AVX2.
    Avx512,
}

impl Path {
    /// The fastest path this CPU runs.
    pub(crate) fn best() -> Path {
        if has_avx512() {
            Path::Avx512
        } else if has_avx2_fma() {
            Path::Avx2
        } else {
            Path::Portable
        }
    }

    /// Every path this CPU runs, for the tests that force each (saying
    /// which it cannot).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Path> {
        let mut paths = vec![Path::Portable];
        if has_avx2_fma() {
            paths.push(Path::Avx2);
        } else {
            eprintln!("this CPU has no AVX2+FMA: that path is not tested here");
        }
        if has_avx512() {
            paths.push(Path::Avx512);
        } else {
            eprintln!("this CPU has no AVX-512F: that path is not tested here");
        }
        paths
    }
}

/// Lanes of the dot product's accumulator.
pub(crate) const LANES: usize = 16;

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
        if packs_weights() {
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
        if matches!(weight.device(), Device::Cpu) && weight.dtype() == DType::F32 {
            let (n, k) = weight.dims2()?;
            let weight = weight.contiguous()?;
            let (storage, layout) = weight.storage_and_layout();
            let packed = PackedWeight::pack_in(cpu_f32_slice(&storage, layout)?, n, k, arena);
            return Ok(Proj {
                weight: Weight::Packed(Arc::new(packed)),
                bias,
            });
        }
        Ok(Self::shared(weight, bias))
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

    /// The weight's `(out, in)`.
    pub fn dims(&self) -> (usize, usize) {
        match &self.weight {
            Weight::Packed(p) => (p.rows(), p.cols()),
            Weight::Plain { weight, .. } => {
                let dims = weight.dims();
                match dims {
                    [n, k] => (*n, *k),
                    _ => (weight.elem_count(), 1),
                }
            }
        }
    }

    /// Bytes of the weight and the bias as the checkpoint stores them
    /// (what one product must read).
    pub fn bytes(&self) -> usize {
        let (n, k) = self.dims();
        let weight = match &self.weight {
            Weight::Packed(_) => n * k * std::mem::size_of::<f32>(),
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
            Weight::Packed(_) => true,
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
            Weight::Packed(packed) => x2.contiguous()?.apply_op1_no_bwd(&PackedMatmul(packed))?,
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

/// Values per 64-byte cache line.
pub(crate) const LINE_VALUES: usize = 64 / std::mem::size_of::<f32>();

/// `values` copied into a buffer where they start on a 64-byte boundary:
/// the buffer and the index of the first value.
pub(crate) fn aligned_copy(values: impl ExactSizeIterator<Item = f32>) -> (Vec<f32>, usize) {
    let n = values.len();
    let mut data: Vec<f32> = Vec::with_capacity(n + LINE_VALUES);
    let misaligned = (data.as_ptr() as usize % 64) / std::mem::size_of::<f32>();
    let offset = (LINE_VALUES - misaligned) % LINE_VALUES;
    data.resize(offset, 0.0);
    data.extend(values);
    data.resize(n + LINE_VALUES, 0.0);
    (data, offset)
}

/// A growable f32 buffer whose values start on a 64-byte boundary, kept
/// between decoding steps: it allocates only when asked for more values
/// than it ever held.
#[derive(Debug, Default)]
pub struct AlignedBuf {
    data: Vec<f32>,
    offset: usize,
    len: usize,
}

impl AlignedBuf {
    /// The first `len` values (zeros when new), growing the buffer if it
    /// holds fewer.
    pub fn get(&mut self, len: usize) -> &mut [f32] {
        if len > self.len {
            let (data, offset) = aligned_copy(std::iter::repeat_n(0.0, len));
            (self.data, self.offset, self.len) = (data, offset, len);
        }
        &mut self.data[self.offset..self.offset + len]
    }
}

/// Whether the first value of the f32 CPU tensor `t` sits on a 64-byte
/// boundary.
fn is_aligned(t: &Tensor) -> bool {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        candle_core::Storage::Cpu(CpuStorage::F32(data)) => data
            .get(layout.start_offset()..)
            .is_some_and(|values| (values.as_ptr() as usize).is_multiple_of(64)),
        _ => false,
    }
}

/// The f32 CPU tensor `t`, or a copy of it whose first value sits on a
/// 64-byte boundary when it does not (candle's own buffers are only 16-byte
/// aligned), so that rows of a multiple of 16 values load in whole cache
/// lines. Other tensors, and `t` itself if copying fails, come back as
/// they are.
pub fn aligned(t: &Tensor) -> Tensor {
    if !matches!(t.device(), Device::Cpu) || t.dtype() != DType::F32 || is_aligned(t) {
        return t.clone();
    }
    let copy = || -> candle_core::Result<Tensor> {
        let n = t.elem_count();
        let (data, offset) = aligned_copy(t.flatten_all()?.to_vec1::<f32>()?.into_iter());
        Tensor::from_vec(data, n + LINE_VALUES, t.device())?
            .narrow(0, offset, n)?
            .reshape(t.shape())
    };
    copy().unwrap_or_else(|_| t.clone())
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

/// `out[j * m + i] = dot(x[i], w[j])` for the weight rows in `w`.
fn rows_times(x: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx512() {
            // SAFETY: the CPU supports AVX-512F, checked just above.
            unsafe { rows_times_avx512(x, w, out, m, k) };
            return;
        }
        if has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above.
            unsafe { rows_times_avx2(x, w, out, m, k) };
            return;
        }
    }
    rows_times_portable(x, w, out, m, k);
}

/// Weight rows per AVX-512 tile.
#[cfg(target_arch = "x86_64")]
const TILE_W: usize = 4;
/// Input rows per AVX-512 tile.
#[cfg(target_arch = "x86_64")]
const TILE_X: usize = 6;

/// [`rows_times`] in tiles of up to [`TILE_W`] weight rows by [`TILE_X`]
/// input rows, one 16-lane accumulator per output: each weight vector
/// loaded serves six input rows, each input vector four weight rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn rows_times_avx512(x: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize) {
    if k == 0 || x.len() < m * k {
        out.fill(0.0);
        return;
    }
    // Input rows outer: a group of `TILE_X` input rows stays in the L1
    // cache while the weight rows stream past it (from memory on the
    // first group, from the L2 cache after).
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(TILE_X);
        let xs = &x[i * k..(i + rows) * k];
        for (ws, out) in w.chunks(TILE_W * k).zip(out.chunks_mut(TILE_W * m)) {
            match (ws.len() / k, rows) {
                (4, 6) => tile_avx512::<4, 6>(xs, ws, out, i, m, k),
                (4, 5) => tile_avx512::<4, 5>(xs, ws, out, i, m, k),
                (4, 4) => tile_avx512::<4, 4>(xs, ws, out, i, m, k),
                (4, 3) => tile_avx512::<4, 3>(xs, ws, out, i, m, k),
                (4, 2) => tile_avx512::<4, 2>(xs, ws, out, i, m, k),
                (4, _) => tile_avx512::<4, 1>(xs, ws, out, i, m, k),
                (_, 6) => tile_avx512::<1, 6>(xs, ws, out, i, m, k),
                (_, 5) => tile_avx512::<1, 5>(xs, ws, out, i, m, k),
                (_, 4) => tile_avx512::<1, 4>(xs, ws, out, i, m, k),
                (_, 3) => tile_avx512::<1, 3>(xs, ws, out, i, m, k),
                (_, 2) => tile_avx512::<1, 2>(xs, ws, out, i, m, k),
                (_, _) => tile_avx512::<1, 1>(xs, ws, out, i, m, k),
            }
        }
        i += rows;
    }
}

/// One tile: `out[j * m + first + r] = dot(xs[r], ws[j])` for `W`-row
/// steps over `ws` (all of its rows when `W` is 1) and `R` rows of `xs`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn tile_avx512<const W: usize, const R: usize>(
    xs: &[f32],
    ws: &[f32],
    out: &mut [f32],
    first: usize,
    m: usize,
    k: usize,
) {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_setzero_ps, _mm512_storeu_ps,
    };
    let main = k - k % LANES;
    for (step, ws) in ws.chunks_exact(W * k).enumerate() {
        // acc[r][j]: input row r against weight row j
        let mut acc: [[__m512; W]; R] = [[_mm512_setzero_ps(); W]; R];
        let mut at = 0;
        while at < main {
            // SAFETY: `at + 16 <= main <= k`; `ws` holds `W` rows and `xs`
            // `R` rows of `k` values each (the callers' chunks); unaligned
            // loads.
            unsafe {
                let mut wv = [_mm512_setzero_ps(); W];
                for (j, v) in wv.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(ws.as_ptr().add(j * k + at));
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    let xv = _mm512_loadu_ps(xs.as_ptr().add(r * k + at));
                    for (a, w) in acc.iter_mut().zip(&wv) {
                        *a = _mm512_fmadd_ps(xv, *w, *a);
                    }
                }
            }
            at += LANES;
        }
        for (r, acc) in acc.iter().enumerate() {
            let x_row = &xs[r * k..(r + 1) * k];
            for (j, a) in acc.iter().enumerate() {
                let at = (step * W + j) * m + first + r;
                if main == k {
                    out[at] = sum_lanes_avx512(*a);
                    continue;
                }
                let mut lanes = [0f32; LANES];
                // SAFETY: `lanes` holds 16 f32s; unaligned store.
                unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *a) };
                let w_row = &ws[j * k..(j + 1) * k];
                out[at] = finish_dot(lanes, &x_row[main..], &w_row[main..]);
            }
        }
    }
}

/// The pairwise sum of [`finish_dot`] (lane `l` plus lane `l + 8`, then
/// `l + 4`, `l + 2`, `l + 1`) in registers: the same additions, so the
/// same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(crate) fn sum_lanes_avx512(v: std::arch::x86_64::__m512) -> f32 {
    use std::arch::x86_64::{
        _mm_add_ps, _mm_add_ss, _mm_cvtss_f32, _mm_movehl_ps, _mm_shuffle_ps, _mm256_add_ps,
        _mm256_castpd_ps, _mm256_castps256_ps128, _mm256_extractf128_ps, _mm512_castps_pd,
        _mm512_castps512_ps256, _mm512_extractf64x4_pd,
    };
    let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    let v8 = _mm256_add_ps(_mm512_castps512_ps256(v), high);
    let v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps::<1>(v8));
    let v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
    let v1 = _mm_add_ss(v2, _mm_shuffle_ps::<0b01>(v2, v2));
    _mm_cvtss_f32(v1)
}

/// The lane sums of 16 vectors at once, `H` rows of `J` (`H * J` = 16):
/// lane `h * J + j` of the result is [`sum_lanes_avx512`] of `v[h][j]`,
/// bit for bit (the same additions of the same pairs: the 256-bit halves,
/// then the 128-bit quarters, then the pairs and the last two), in 15
/// vector additions and 30 shuffles where 16 separate sums take 64
/// additions and 64 extractions or shuffles.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn sum_lanes16_avx512<const H: usize, const J: usize>(
    v: &[[std::arch::x86_64::__m512; J]; H],
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::{__m512, _mm512_add_ps, _mm512_shuffle_f32x4, _mm512_shuffle_ps};
    assert!(H * J == 16);
    // Each stage adds the two halves of every source's partial sums and
    // packs two sources' results into one vector; after four stages lane
    // `4 * a + b` holds the sum of source `4 * b + a`, so the sources go
    // in transposed.
    let src: [__m512; 16] = std::array::from_fn(|i| {
        let at = (i % 4) * 4 + i / 4;
        v[at / J][at % J]
    });
    // 256-bit halves: [x low + x high | y low + y high].
    let halves: [__m512; 8] = std::array::from_fn(|i| {
        let (x, y) = (src[2 * i], src[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(x, y),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(x, y),
        )
    });
    // 128-bit quarters of each 256-bit half.
    let quarters: [__m512; 4] = std::array::from_fn(|i| {
        let (x, y) = (halves[2 * i], halves[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y),
        )
    });
    // Values 0 and 1 plus values 2 and 3 of every quarter.
    let pairs: [__m512; 2] = std::array::from_fn(|i| {
        let (x, y) = (quarters[2 * i], quarters[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_ps::<0b01_00_01_00>(x, y),
            _mm512_shuffle_ps::<0b11_10_11_10>(x, y),
        )
    });
    // The last two of every pair.
    _mm512_add_ps(
        _mm512_shuffle_ps::<0b10_00_10_00>(pairs[0], pairs[1]),
        _mm512_shuffle_ps::<0b11_01_11_01>(pairs[0], pairs[1]),
    )
}

/// The most input rows per AVX2 tile.
#[cfg(target_arch = "x86_64")]
const TILE_X_AVX2: usize = 6;
/// Bytes of weight rows the AVX2 kernel keeps in the L2 cache at a time.
#[cfg(target_arch = "x86_64")]
const BLOCK_BYTES: usize = 128 * 1024;

/// [`rows_times`] in tiles of one weight row by up to [`TILE_X_AVX2`]
/// input rows, each output's 16 lanes in two 8-lane accumulators (12 of
/// the 16 registers): each weight vector loaded serves up to six input
/// rows, and the weights are read as one sequential stream (for few input
/// rows a tile of two weight rows, two streams, read memory more slowly
/// here; for many, when six input rows would not fit the L1 cache, the
/// paired tiles of [`tile_paired_avx2`] are faster). The weight rows go in
/// blocks of [`BLOCK_BYTES`]; every group of input rows passes over a
/// block (from the L2 cache after the first group) before the next block
/// is read. The input rows are split into groups of nearly equal size
/// (8 rows: 4 + 4, not 6 + 2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn rows_times_avx2(x: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize) {
    // Paired tiles once the product is bound by arithmetic, and only when
    // a group of the single tiles' input rows would not fit the L1 cache
    // beside the weights: at k = 512 they were slower, at k = 1408 faster.
    let pairs =
        m >= PAIRED_FROM_AVX2 && TILE_X_AVX2 * k * std::mem::size_of::<f32>() > L1_INPUT_BYTES;
    rows_times_avx2_tiles(x, w, out, m, k, pairs);
}

/// [`rows_times_avx2`] with the tile shape chosen by the caller: paired
/// tiles ([`tile_paired_avx2`]) or tiles of one weight row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn rows_times_avx2_tiles(x: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize, pairs: bool) {
    if k == 0 || x.len() < m * k {
        out.fill(0.0);
        return;
    }
    let block = (BLOCK_BYTES / (k * std::mem::size_of::<f32>())).max(1);
    let groups = m.div_ceil(if pairs {
        TILE_X_PAIRED_AVX2
    } else {
        TILE_X_AVX2
    });
    let (base, extra) = (m / groups, m % groups);
    for (b, (wb, ob)) in w
        .chunks(block * k)
        .zip(out.chunks_mut(block * m))
        .enumerate()
    {
        // The next block, brought into the L2 cache while this one is
        // computed: each group of input rows fetches its share. One group
        // passes over each block once, as the hardware prefetcher expects.
        let next = match w.get((b + 1) * block * k..) {
            Some(rest) if groups > 1 => &rest[..rest.len().min(block * k)],
            _ => &[][..],
        };
        let share = next.len().div_ceil(groups);
        let mut i = 0;
        for g in 0..groups {
            let rows = base + usize::from(g < extra);
            let xs = &x[i * k..(i + rows) * k];
            let ahead = next
                .get(g * share..)
                .map_or(&[][..], |a| &a[..a.len().min(share)]);
            if pairs {
                match rows {
                    3 => tile_paired_avx2::<3>(xs, wb, ob, i, m, k, ahead),
                    2 => tile_paired_avx2::<2>(xs, wb, ob, i, m, k, ahead),
                    _ => tile_paired_avx2::<1>(xs, wb, ob, i, m, k, ahead),
                }
                i += rows;
                continue;
            }
            match rows {
                6 => tile_avx2::<6>(xs, wb, ob, i, m, k, ahead),
                5 => tile_avx2::<5>(xs, wb, ob, i, m, k, ahead),
                4 => tile_avx2::<4>(xs, wb, ob, i, m, k, ahead),
                3 => tile_avx2::<3>(xs, wb, ob, i, m, k, ahead),
                2 => tile_avx2::<2>(xs, wb, ob, i, m, k, ahead),
                _ => tile_avx2::<1>(xs, wb, ob, i, m, k, ahead),
            }
            i += rows;
        }
    }
}

/// Asks for the cache lines of `ahead` that weight row `j` of `rows`
/// covers to be brought into the L2 cache (an even share per row).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_share(ahead: &[f32], j: usize, rows: usize) {
    use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
    if ahead.is_empty() {
        return;
    }
    let (from, to) = (j * ahead.len() / rows, (j + 1) * ahead.len() / rows);
    let mut at = from - from % LINE_VALUES;
    while at < to {
        // SAFETY: `at < to <= ahead.len()`: a pointer into `ahead`; a
        // prefetch reads nothing.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.as_ptr().add(at).cast()) };
        at += LINE_VALUES;
    }
}

/// One AVX2 tile: `out[j * m + first + r] = dot(xs[r], ws[j])` for every
/// weight row `j` of `ws` and the `R` rows of `xs`; lanes 0..8 of each dot
/// product in one accumulator and 8..16 in another, so the same bits as
/// [`dot`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn tile_avx2<const R: usize>(
    xs: &[f32],
    ws: &[f32],
    out: &mut [f32],
    first: usize,
    m: usize,
    k: usize,
    ahead: &[f32],
) {
    use std::arch::x86_64::{__m256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps};
    let main = k - k % LANES;
    let n = ws.len() / k;
    for (j, w_row) in ws.chunks_exact(k).enumerate() {
        prefetch_share(ahead, j, n);
        let mut lo: [__m256; R] = [_mm256_setzero_ps(); R];
        let mut hi: [__m256; R] = [_mm256_setzero_ps(); R];
        let mut at = 0;
        while at < main {
            // SAFETY: `at + 16 <= main <= k`, the length of `w_row` and of
            // each of the `R` rows of `xs` (the callers' chunks); unaligned
            // loads.
            unsafe {
                let w0 = _mm256_loadu_ps(w_row.as_ptr().add(at));
                let w1 = _mm256_loadu_ps(w_row.as_ptr().add(at + 8));
                for r in 0..R {
                    let p = xs.as_ptr().add(r * k + at);
                    lo[r] = _mm256_fmadd_ps(_mm256_loadu_ps(p), w0, lo[r]);
                    hi[r] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(8)), w1, hi[r]);
                }
            }
            at += LANES;
        }
        for r in 0..R {
            let x_row = &xs[r * k..(r + 1) * k];
            out[j * m + first + r] = finish_avx2(lo[r], hi[r], &x_row[main..], &w_row[main..]);
        }
    }
}

/// One AVX2 dot product's end: lanes 0..8 in `lo` and 8..16 in `hi`, the
/// tail products (`x_rest` times `w_rest`, past the last 16 values) added
/// to the lanes, then [`finish_dot`]'s pairwise sum. Without a tail the sum
/// runs in registers (the same additions in the same order, so the same
/// bits) instead of storing the 16 lanes and reading them back.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) fn finish_avx2(
    lo: std::arch::x86_64::__m256,
    hi: std::arch::x86_64::__m256,
    x_rest: &[f32],
    w_rest: &[f32],
) -> f32 {
    use std::arch::x86_64::{
        _mm_add_ps, _mm_add_ss, _mm_cvtss_f32, _mm_movehl_ps, _mm_shuffle_ps, _mm256_add_ps,
        _mm256_castps256_ps128, _mm256_extractf128_ps, _mm256_storeu_ps,
    };
    if x_rest.is_empty() {
        let v8 = _mm256_add_ps(lo, hi);
        let v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps::<1>(v8));
        let v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
        let v1 = _mm_add_ss(v2, _mm_shuffle_ps::<0b01>(v2, v2));
        return _mm_cvtss_f32(v1);
    }
    let mut lanes = [0f32; LANES];
    // SAFETY: `lanes` holds 16 f32s; unaligned stores.
    unsafe {
        _mm256_storeu_ps(lanes.as_mut_ptr(), lo);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi);
    }
    finish_dot(lanes, x_rest, w_rest)
}

/// From this many input rows on, the AVX2 kernel computes tiles of two
/// weight rows by up to [`TILE_X_PAIRED_AVX2`] input rows: 10 loads per
/// 12 multiply-adds instead of 14, which matters once the product is bound
/// by arithmetic rather than by reading the weights.
#[cfg(target_arch = "x86_64")]
const PAIRED_FROM_AVX2: usize = 8;
/// Bytes of input rows a group of AVX2 tiles may keep in the L1 cache
/// (of 32 KiB or more) while weight rows stream past.
#[cfg(target_arch = "x86_64")]
const L1_INPUT_BYTES: usize = 24 * 1024;
/// The most input rows per paired AVX2 tile.
#[cfg(target_arch = "x86_64")]
const TILE_X_PAIRED_AVX2: usize = 3;

/// [`tile_avx2`] over two weight rows at a time (the last, odd one alone):
/// each input vector loaded serves both rows, each weight vector the `R`
/// input rows; each output keeps its two 8-lane accumulators (12 of the
/// 16 registers at `R` = 3), so the same bits as [`dot`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::needless_range_loop)] // `r` indexes both rows' accumulators and the inputs
fn tile_paired_avx2<const R: usize>(
    xs: &[f32],
    ws: &[f32],
    out: &mut [f32],
    first: usize,
    m: usize,
    k: usize,
    ahead: &[f32],
) {
    use std::arch::x86_64::{__m256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps};
    let main = k - k % LANES;
    let pairs = ws.len() / (2 * k);
    for p in 0..pairs {
        prefetch_share(ahead, p, pairs);
        let (w0, w1) = ws[2 * p * k..(2 * p + 2) * k].split_at(k);
        let mut lo: [[__m256; R]; 2] = [[_mm256_setzero_ps(); R]; 2];
        let mut hi: [[__m256; R]; 2] = [[_mm256_setzero_ps(); R]; 2];
        let mut at = 0;
        while at < main {
            // SAFETY: `at + 16 <= main <= k`, the length of `w0`, `w1` and
            // of each of the `R` rows of `xs` (the callers' chunks);
            // unaligned loads.
            unsafe {
                let a = _mm256_loadu_ps(w0.as_ptr().add(at));
                let b = _mm256_loadu_ps(w1.as_ptr().add(at));
                for r in 0..R {
                    let v = _mm256_loadu_ps(xs.as_ptr().add(r * k + at));
                    lo[0][r] = _mm256_fmadd_ps(v, a, lo[0][r]);
                    lo[1][r] = _mm256_fmadd_ps(v, b, lo[1][r]);
                }
                let a = _mm256_loadu_ps(w0.as_ptr().add(at + 8));
                let b = _mm256_loadu_ps(w1.as_ptr().add(at + 8));
                for r in 0..R {
                    let v = _mm256_loadu_ps(xs.as_ptr().add(r * k + at + 8));
                    hi[0][r] = _mm256_fmadd_ps(v, a, hi[0][r]);
                    hi[1][r] = _mm256_fmadd_ps(v, b, hi[1][r]);
                }
            }
            at += LANES;
        }
        for (half, w_row) in [w0, w1].into_iter().enumerate() {
            let j = 2 * p + half;
            for r in 0..R {
                let x_row = &xs[r * k..(r + 1) * k];
                out[j * m + first + r] =
                    finish_avx2(lo[half][r], hi[half][r], &x_row[main..], &w_row[main..]);
            }
        }
    }
    if ws.len() / k > 2 * pairs {
        let last = 2 * pairs;
        tile_avx2::<R>(
            xs,
            &ws[last * k..(last + 1) * k],
            &mut out[last * m..],
            first,
            m,
            k,
            &[],
        );
    }
}

#[inline(always)]
pub(crate) fn rows_times_portable(x: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize) {
    for (w_row, out) in w.chunks_exact(k).zip(out.chunks_exact_mut(m)) {
        for (x_row, o) in x.chunks_exact(k).zip(out.iter_mut()) {
            *o = dot(x_row, w_row);
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let main = a.len() - a.len() % LANES;
    let (a_main, a_rest) = a.split_at(main);
    let (b_main, b_rest) = b.split_at(main);
    let mut acc = [0f32; LANES];
    for (x, y) in a_main.chunks_exact(LANES).zip(b_main.chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    finish_dot(acc, a_rest, b_rest)
}

/// Adds the tail products to the lanes, then sums the lanes pairwise, in a
/// fixed order.
#[inline(always)]
fn finish_dot(mut acc: [f32; LANES], a_rest: &[f32], b_rest: &[f32]) -> f32 {
    for (l, (x, y)) in a_rest.iter().zip(b_rest).enumerate() {
        acc[l] = x.mul_add(*y, acc[l]);
    }
    let mut width = LANES / 2;
    while width > 0 {
        for l in 0..width {
            acc[l] += acc[l + width];
        }
        width /= 2;
    }
    acc[0]
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

    /// A `rows_times` kernel: `(x, w, out, m, k)`.
    type Kernel = fn(&[f32], &[f32], &mut [f32], usize, usize);

    /// Every kernel this CPU can run, by name, each forced (not only the
    /// one [`rows_times`] picks here).
    fn kernels() -> Vec<(&'static str, Kernel)> {
        let mut kernels: Vec<(&'static str, Kernel)> = vec![("portable", rows_times_portable)];
        #[cfg(target_arch = "x86_64")]
        {
            if has_avx2_fma() {
                // SAFETY: the CPU supports AVX2 and FMA, checked just above.
                kernels.push(("avx2+fma", |x, w, o, m, k| unsafe {
                    rows_times_avx2(x, w, o, m, k)
                }));
                // SAFETY: as above.
                kernels.push(("avx2+fma, single-row tiles", |x, w, o, m, k| unsafe {
                    rows_times_avx2_tiles(x, w, o, m, k, false)
                }));
                // SAFETY: as above.
                kernels.push(("avx2+fma, paired tiles", |x, w, o, m, k| unsafe {
                    rows_times_avx2_tiles(x, w, o, m, k, true)
                }));
            } else {
                eprintln!("this CPU has no AVX2+FMA: that kernel is not tested here");
            }
            if has_avx512() {
                // SAFETY: the CPU supports AVX-512F, checked just above.
                kernels.push(("avx512", |x, w, o, m, k| unsafe {
                    rows_times_avx512(x, w, o, m, k)
                }));
            } else {
                eprintln!("this CPU has no AVX-512: that kernel is not tested here");
            }
        }
        kernels
    }

    #[test]
    fn every_kernel_gives_the_same_bits_as_the_portable_dot_product() {
        // Lengths with and without a tail past the last 16 values; input
        // and weight rows that fill whole tiles of every kernel and leave
        // remainders, up to the most rows a decoding step sends here; 130
        // weight rows of 512 values span three of the AVX2 kernel's
        // blocks; at 1408 values the paired tiles take 8 rows and more.
        for (name, kernel) in kernels() {
            for k in [64usize, 70, 512, 1408] {
                for (m, n) in [
                    (1usize, 1usize),
                    (2, 3),
                    (3, 2),
                    (5, 9),
                    (7, 4),
                    (13, 11),
                    (32, 6),
                    (SMALL_ROWS_AVX2, 5),
                    (SMALL_ROWS_AVX512 + 1, 3),
                    (7, 130),
                ] {
                    let x: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.13).sin()).collect();
                    let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.91).cos()).collect();
                    let mut fast = vec![f32::NAN; n * m];
                    kernel(&x, &w, &mut fast, m, k);
                    for j in 0..n {
                        for i in 0..m {
                            let want = dot(&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
                            assert_eq!(
                                fast[j * m + i].to_bits(),
                                want.to_bits(),
                                "{name}: k {k}, {m} input rows, {n} weight rows: input {i}, \
                                 weight {j}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn weights_are_aligned_once_and_shared_after() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1., (37, 70), &dev).expect("w");
        let a = aligned(&w);
        assert!(is_aligned(&a));
        assert_eq!(max_abs_diff(&a, &w), 0.0);
        // Aligning an aligned tensor (a tied LM head) shares it.
        assert_eq!(aligned(&a).id(), a.id());
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
}
