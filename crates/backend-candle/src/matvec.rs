//! Projections for decoding steps: when few rows go through a linear
//! layer (decoding steps of up to [`small_rows`] rows), each weight row is
//! read once, straight from memory, and dotted with every input row, split
//! over rayon's threads. Larger inputs (prefill) go to the `gemm` crate's
//! blocked product. Both write into buffers the caller keeps; so does the
//! decoding step's attention, which reads each slot of the KV cache in
//! place.
//!
//! Every output element is one dot product with a fixed summation order
//! (16 lanes of fused multiply-adds, then a pairwise sum of the lanes),
//! whichever kernel computes it, so a row's result does not depend on how
//! many rows run beside it as long as they all take this path.

use candle_core::{CpuStorage, CustomOp2, DType, Device, Layout, Shape, Tensor};
use candle_nn::Linear;
use rayon::prelude::*;

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

/// The decoding kernel this CPU runs: `avx512`, `avx2+fma` or `portable`.
pub fn kernel_path() -> &'static str {
    if has_avx512() {
        "avx512"
    } else if has_avx2_fma() {
        "avx2+fma"
    } else {
        "portable"
    }
}

fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Lanes of the dot product's accumulator.
const LANES: usize = 16;

/// A linear layer (`y = x W^T + b`, `W` as `(out, in)`).
#[derive(Debug, Clone)]
pub struct Proj {
    linear: Linear,
    small: bool,
}

impl Proj {
    /// Wraps `weight` `(out, in)` and an optional `bias` `(out)`.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Self {
        let small = matches!(weight.device(), Device::Cpu)
            && weight.dtype() == DType::F32
            && weight.is_contiguous();
        let weight = if small { aligned(&weight) } else { weight };
        Proj {
            linear: Linear::new(weight, bias),
            small,
        }
    }

    /// The weight `(out, in)`.
    pub fn weight(&self) -> &Tensor {
        self.linear.weight()
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.linear.bias()
    }

    /// Whether inputs of `rows` rows go through the dot-product kernel: an
    /// f32 CPU weight and no more rows than the kernel serves.
    pub fn takes_rows(&self, rows: usize) -> bool {
        self.small && rows <= small_rows()
    }

    /// `x` (`rows` rows of `in` values) times the weight, plus the bias,
    /// into `out` (`rows` rows of `out` values), f32 weights on the CPU
    /// only. Rows the dot-product kernel takes ([`Proj::takes_rows`]) go
    /// through it, with the bits of [`Proj::forward`] and no allocation
    /// (`out_t` is its scratch room for `rows * out` values); more rows go
    /// through the `gemm` crate's blocked product that candle's matmul
    /// runs, straight into `out`. Inputs that start on a 64-byte boundary
    /// are read fastest.
    pub fn forward_rows(
        &self,
        x: &[f32],
        rows: usize,
        out_t: &mut [f32],
        out: &mut [f32],
    ) -> candle_core::Result<()> {
        if !self.small {
            candle_core::bail!("host matmul: expected a contiguous f32 weight on the CPU");
        }
        let (n, k) = self.linear.weight().dims2()?;
        let (storage, layout) = self.linear.weight().storage_and_layout();
        let w = cpu_f32_slice(&storage, layout)?;
        let (Some(x), Some(out)) = (x.get(..rows * k), out.get_mut(..rows * n)) else {
            candle_core::bail!("host matmul: buffers shorter than {rows} rows");
        };
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
        if let Some(bias) = self.linear.bias() {
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
        let y = if !self.small || rows > small_rows() || x.dtype() != DType::F32 {
            x2.matmul(&self.linear.weight().t()?)?
        } else {
            x2.contiguous()?
                .apply_op2_no_bwd(self.linear.weight(), &SmallMatmul)?
        };
        let y = match self.linear.bias() {
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

/// Values per 64-byte cache line.
const LINE_VALUES: usize = 64 / std::mem::size_of::<f32>();

/// `values` copied into a buffer where they start on a 64-byte boundary:
/// the buffer and the index of the first value.
fn aligned_copy(values: impl ExactSizeIterator<Item = f32>) -> (Vec<f32>, usize) {
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
        for (j, col) in out_t.chunks_exact(m).enumerate() {
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
fn sum_lanes_avx512(v: std::arch::x86_64::__m512) -> f32 {
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

/// The most input rows per AVX2 tile.
#[cfg(target_arch = "x86_64")]
const TILE_X_AVX2: usize = 6;
/// Bytes of weight rows the AVX2 kernel keeps in the L2 cache at a time.
#[cfg(target_arch = "x86_64")]
const BLOCK_BYTES: usize = 128 * 1024;

/// [`rows_times`] in tiles of one weight row by up to [`TILE_X_AVX2`]
/// input rows, each output's 16 lanes in two 8-lane accumulators (12 of
/// the 16 registers): each weight vector loaded serves up to six input
/// rows, and the weights are read as one sequential stream (a tile of two
/// weight rows, two streams, read memory more slowly here). The weight
/// rows go in blocks of [`BLOCK_BYTES`]; every group of input rows passes
/// over a block (from the L2 cache after the first group) before the next
/// block is read. The input rows are split into groups of nearly equal
/// size (8 rows: 4 + 4, not 6 + 2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn rows_times_avx2(x: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize) {
    if k == 0 || x.len() < m * k {
        out.fill(0.0);
        return;
    }
    let block = (BLOCK_BYTES / (k * std::mem::size_of::<f32>())).max(1);
    let groups = m.div_ceil(TILE_X_AVX2);
    let (base, extra) = (m / groups, m % groups);
    for (wb, ob) in w.chunks(block * k).zip(out.chunks_mut(block * m)) {
        let mut i = 0;
        for g in 0..groups {
            let rows = base + usize::from(g < extra);
            let xs = &x[i * k..(i + rows) * k];
            match rows {
                6 => tile_avx2::<6>(xs, wb, ob, i, m, k),
                5 => tile_avx2::<5>(xs, wb, ob, i, m, k),
                4 => tile_avx2::<4>(xs, wb, ob, i, m, k),
                3 => tile_avx2::<3>(xs, wb, ob, i, m, k),
                2 => tile_avx2::<2>(xs, wb, ob, i, m, k),
                _ => tile_avx2::<1>(xs, wb, ob, i, m, k),
            }
            i += rows;
        }
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
) {
    use std::arch::x86_64::{
        __m256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    let main = k - k % LANES;
    for (j, w_row) in ws.chunks_exact(k).enumerate() {
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
            let mut lanes = [0f32; LANES];
            // SAFETY: `lanes` holds 16 f32s; unaligned stores.
            unsafe {
                _mm256_storeu_ps(lanes.as_mut_ptr(), lo[r]);
                _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi[r]);
            }
            let x_row = &xs[r * k..(r + 1) * k];
            out[j * m + first + r] = finish_dot(lanes, &x_row[main..], &w_row[main..]);
        }
    }
}

#[inline(always)]
fn rows_times_portable(x: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize) {
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

/// One row's keys and values in its slot of the KV cache, for a decoding
/// step's attention.
#[derive(Debug, Clone, Copy)]
pub struct SlotView<'a> {
    /// Keys, laid out `(kv_heads, capacity, head_dim)`.
    pub keys: &'a [f32],
    /// Values, laid out as the keys.
    pub values: &'a [f32],
    /// Positions the slot has room for.
    pub capacity: usize,
    /// Positions attended to: the cached length, the new one included.
    pub len: usize,
}

/// The shape of a decoding step's queries: `rows` rows of `kv_heads`
/// groups of `rep` query heads of `head_dim` values, row `i` starting at
/// `i * row_stride`.
#[derive(Debug, Clone, Copy)]
pub struct QueryShape {
    /// Rows (sequences) in the step.
    pub rows: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Query heads per key/value head.
    pub rep: usize,
    /// Values per head.
    pub head_dim: usize,
    /// Values from one row's queries to the next's.
    pub row_stride: usize,
}

/// Scratch values [`decode_attention`] needs for `shape` when the longest
/// row attends to `longest` positions.
pub fn decode_attention_scratch(shape: QueryShape, longest: usize) -> usize {
    shape.rows * shape.kv_heads * shape.rep * longest
}

/// Attention for one new position per row (a decoding step), f32 on the
/// CPU, reading each row's keys and values in place in its slot
/// (`slot(i)` for row `i`), with no allocation. Writes `out` `(rows,
/// kv_heads * rep * head_dim)`, the heads side by side; `scores` is
/// scratch room of [`decode_attention_scratch`] values. Scores are
/// multiplied by `scale` before the softmax.
pub fn decode_attention<'a>(
    q: &[f32],
    shape: QueryShape,
    slot: &(impl Fn(usize) -> SlotView<'a> + Sync),
    scale: f32,
    out: &mut [f32],
    scores: &mut [f32],
) -> candle_core::Result<()> {
    let QueryShape {
        rows: b,
        kv_heads: g,
        rep,
        head_dim: d,
        row_stride,
    } = shape;
    let mut longest = 0;
    for i in 0..b {
        let view = slot(i);
        let need = g * view.capacity * d;
        if view.len < 1
            || view.len > view.capacity
            || view.keys.len() < need
            || view.values.len() < need
        {
            candle_core::bail!("decode attention: row {i} does not fit its slot");
        }
        longest = longest.max(view.len);
    }
    let block_scores = rep * longest;
    if q.len() < (b.max(1) - 1) * row_stride + g * rep * d
        || out.len() < b * g * rep * d
        || scores.len() < b * g * block_scores
    {
        candle_core::bail!("decode attention: buffers shorter than the step");
    }
    let block = |(index, (out, scores)): (usize, (&mut [f32], &mut [f32]))| {
        let (row, head) = (index / g, index % g);
        let view = slot(row);
        let q0 = row * row_stride + head * rep * d;
        let q = &q[q0..q0 + rep * d];
        let total = view.len;
        let k0 = head * view.capacity * d;
        let keys = &view.keys[k0..k0 + total * d];
        let values = &view.values[k0..k0 + total * d];
        // scores[j * rep + r]: query head r against position j; the keys
        // of one (row, head) block are read once for all `rep` query heads
        // that share them.
        let scores = &mut scores[..total * rep];
        rows_times(q, keys, scores, rep, d);
        for r in 0..rep {
            let mut max = f32::NEG_INFINITY;
            for s in scores[r..].iter_mut().step_by(rep) {
                *s *= scale;
                max = max.max(*s);
            }
            let mut sum = 0f32;
            for s in scores[r..].iter_mut().step_by(rep) {
                *s = (*s - max).exp();
                sum += *s;
            }
            let inv = 1.0 / sum;
            for s in scores[r..].iter_mut().step_by(rep) {
                *s *= inv;
            }
        }
        out.fill(0.0);
        for (p, v) in scores.chunks_exact(rep).zip(values.chunks_exact(d)) {
            for (out, p) in out.chunks_exact_mut(d).zip(p) {
                if *p == 0.0 {
                    continue;
                }
                for (o, v) in out.iter_mut().zip(v) {
                    *o += p * v;
                }
            }
        }
    };
    let out = &mut out[..b * g * rep * d];
    let scores = &mut scores[..b * g * block_scores];
    if b * g > 1 {
        out.par_chunks_mut(rep * d)
            .zip(scores.par_chunks_mut(block_scores))
            .enumerate()
            .for_each(block);
    } else {
        out.chunks_mut(rep * d)
            .zip(scores.chunks_mut(block_scores))
            .enumerate()
            .for_each(block);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Module;

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
        // blocks.
        for (name, kernel) in kernels() {
            for k in [64usize, 70, 512] {
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
    fn small_rows_match_candle_matmul() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1., (37, 70), &dev).expect("w");
        let b = Tensor::randn(0f32, 1., 37, &dev).expect("b");
        let proj = Proj::new(w.clone(), Some(b.clone()));
        let reference = Linear::new(w, Some(b));
        for rows in [1, 3, SMALL_ROWS, small_rows()] {
            let x = Tensor::randn(0f32, 1., (rows, 1, 70), &dev).expect("x");
            let got = proj.forward(&x).expect("proj");
            let want = reference.forward(&x).expect("linear");
            assert_eq!(got.dims(), want.dims());
            let diff = max_abs_diff(&got, &want);
            assert!(diff < 1e-4, "rows {rows}: max |diff| {diff}");
        }
    }

    #[test]
    fn decode_attention_matches_candle_ops_on_slots_of_different_lengths() {
        let dev = Device::Cpu;
        let (b, g, rep, d) = (3, 2, 2, 20);
        let caps = [9usize, 6, 12];
        let lens = [6usize, 1, 12];
        let q = Tensor::randn(0f32, 1., (b, g, rep, d), &dev).expect("q");
        let slots: Vec<(Tensor, Tensor)> = caps
            .iter()
            .map(|&cap| {
                (
                    Tensor::randn(0f32, 1., (g, cap, d), &dev).expect("k"),
                    Tensor::randn(0f32, 1., (g, cap, d), &dev).expect("v"),
                )
            })
            .collect();
        let data: Vec<(Vec<f32>, Vec<f32>)> = slots
            .iter()
            .map(|(k, v)| {
                (
                    k.flatten_all().expect("flat").to_vec1().expect("k"),
                    v.flatten_all().expect("flat").to_vec1().expect("v"),
                )
            })
            .collect();
        let scale = 0.3f32;
        // The queries of each row followed by 5 values the kernel must skip.
        let stride = g * rep * d + 5;
        let flat: Vec<f32> = q.flatten_all().expect("flat").to_vec1().expect("q");
        let mut strided = vec![f32::NAN; b * stride];
        for (row, src) in flat.chunks_exact(g * rep * d).enumerate() {
            strided[row * stride..row * stride + g * rep * d].copy_from_slice(src);
        }
        let shape = QueryShape {
            rows: b,
            kv_heads: g,
            rep,
            head_dim: d,
            row_stride: stride,
        };
        let view = |i: usize| SlotView {
            keys: &data[i].0,
            values: &data[i].1,
            capacity: caps[i],
            len: lens[i],
        };
        let mut out = vec![f32::NAN; b * g * rep * d];
        let mut scores = vec![f32::NAN; decode_attention_scratch(shape, 12)];
        decode_attention(&strided, shape, &view, scale, &mut out, &mut scores).expect("attention");
        let got = Tensor::from_vec(out, (b, g, rep, d), &dev).expect("out");
        for (row, (k, v)) in slots.iter().enumerate() {
            let k = k.narrow(1, 0, lens[row]).expect("narrow");
            let v = v.narrow(1, 0, lens[row]).expect("narrow");
            let q = q.get(row).expect("row");
            let scores =
                (q.matmul(&k.t().expect("t")).expect("mm") * f64::from(scale)).expect("scale");
            let probs = candle_nn::ops::softmax_last_dim(&scores).expect("softmax");
            let want = probs.matmul(&v.contiguous().expect("c")).expect("mm");
            let diff = max_abs_diff(&got.get(row).expect("row"), &want);
            assert!(diff < 1e-5, "row {row}: max |diff| {diff}");
        }
    }
}
