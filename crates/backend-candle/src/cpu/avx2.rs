//! The AVX2 kernels (with FMA and F16C): eight lanes.

use std::arch::x86_64::__m256;

use super::portable::finish_dot;
use super::{
    Fetch, Kernel, LANES, LINE_VALUES, MOST_PANELS, PANEL, PackedDtype, PackedElem, SpreadFetch,
    Tile,
};

/// The most input rows per AVX2 tile.
const TILE_X_AVX2: usize = 6;
/// Bytes of weight rows the AVX2 kernel keeps in the L2 cache at a time.
const BLOCK_BYTES: usize = 128 * 1024;

/// [`super::rows_times`] in tiles of one weight row by up to [`TILE_X_AVX2`]
/// input rows, each output's 16 lanes in two 8-lane accumulators (12 of
/// the 16 registers): each weight vector loaded serves up to six input
/// rows, and the weights are read as one sequential stream (for few input
/// rows a tile of two weight rows, two streams, read memory more slowly
/// here; for many, when six input rows would not fit the L1 cache, the
/// paired tiles of [`dot_tile_paired_avx2`] are faster). The weight rows go in
/// blocks of [`BLOCK_BYTES`]; every group of input rows passes over a
/// block (from the L2 cache after the first group) before the next block
/// is read. The input rows are split into groups of nearly equal size
/// (8 rows: 4 + 4, not 6 + 2).
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
/// tiles ([`dot_tile_paired_avx2`]) or tiles of one weight row.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn rows_times_avx2_tiles(
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
    m: usize,
    k: usize,
    pairs: bool,
) {
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
                    3 => dot_tile_paired_avx2::<3>(xs, wb, ob, i, m, k, ahead),
                    2 => dot_tile_paired_avx2::<2>(xs, wb, ob, i, m, k, ahead),
                    _ => dot_tile_paired_avx2::<1>(xs, wb, ob, i, m, k, ahead),
                }
                i += rows;
                continue;
            }
            match rows {
                6 => dot_tile_avx2::<6>(xs, wb, ob, i, m, k, ahead),
                5 => dot_tile_avx2::<5>(xs, wb, ob, i, m, k, ahead),
                4 => dot_tile_avx2::<4>(xs, wb, ob, i, m, k, ahead),
                3 => dot_tile_avx2::<3>(xs, wb, ob, i, m, k, ahead),
                2 => dot_tile_avx2::<2>(xs, wb, ob, i, m, k, ahead),
                _ => dot_tile_avx2::<1>(xs, wb, ob, i, m, k, ahead),
            }
            i += rows;
        }
    }
}

/// Asks for the cache lines of `ahead` that weight row `j` of `rows`
/// covers to be brought into the L2 cache (an even share per row).
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
/// [`super::portable::dot`].
#[target_feature(enable = "avx2,fma")]
fn dot_tile_avx2<const R: usize>(
    xs: &[f32],
    ws: &[f32],
    out: &mut [f32],
    first: usize,
    m: usize,
    k: usize,
    ahead: &[f32],
) {
    use std::arch::x86_64::{_mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps};
    // The loads below read `R` rows of `xs` and whole rows of `ws`.
    assert!(k > 0 && xs.len() >= R * k);
    let main = k - k % LANES;
    let n = ws.len() / k;
    for (j, w_row) in ws.chunks_exact(k).enumerate() {
        prefetch_share(ahead, j, n);
        let mut lo: [__m256; R] = [_mm256_setzero_ps(); R];
        let mut hi: [__m256; R] = [_mm256_setzero_ps(); R];
        let mut at = 0;
        while at < main {
            // SAFETY: `at + 16 <= main <= k`, the length of `w_row`, and
            // `xs` holds `R` rows of `k` (asserted above); unaligned loads.
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
const PAIRED_FROM_AVX2: usize = 8;
/// Bytes of input rows a group of AVX2 tiles may keep in the L1 cache
/// (of 32 KiB or more) while weight rows stream past.
const L1_INPUT_BYTES: usize = 24 * 1024;
/// The most input rows per paired AVX2 tile.
const TILE_X_PAIRED_AVX2: usize = 3;

/// [`dot_tile_avx2`] over two weight rows at a time (the last, odd one alone):
/// each input vector loaded serves both rows, each weight vector the `R`
/// input rows; each output keeps its two 8-lane accumulators (12 of the
/// 16 registers at `R` = 3), so the same bits as [`super::portable::dot`].
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::needless_range_loop)] // `r` indexes both rows' accumulators and the inputs
fn dot_tile_paired_avx2<const R: usize>(
    xs: &[f32],
    ws: &[f32],
    out: &mut [f32],
    first: usize,
    m: usize,
    k: usize,
    ahead: &[f32],
) {
    use std::arch::x86_64::{_mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps};
    // The loads below read `R` rows of `xs` and whole rows of `ws`.
    assert!(k > 0 && xs.len() >= R * k);
    let main = k - k % LANES;
    let pairs = ws.len() / (2 * k);
    for p in 0..pairs {
        prefetch_share(ahead, p, pairs);
        let (w0, w1) = ws[2 * p * k..(2 * p + 2) * k].split_at(k);
        let mut lo: [[__m256; R]; 2] = [[_mm256_setzero_ps(); R]; 2];
        let mut hi: [[__m256; R]; 2] = [[_mm256_setzero_ps(); R]; 2];
        let mut at = 0;
        while at < main {
            // SAFETY: `at + 16 <= main <= k`, the length of `w0` and `w1`,
            // and `xs` holds `R` rows of `k` (asserted above); unaligned
            // loads.
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
        dot_tile_avx2::<R>(
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

/// The AVX2 packed kernels for weights of `T`.
///
/// # Safety
///
/// The CPU must support AVX2, FMA and F16C: the kernels handed out run
/// their instructions.
pub(crate) unsafe fn kernel<T: PackedElem>() -> Kernel<T> {
    Kernel {
        tile: |xs, rows, panels, _width, k, fetch, out| {
            let ahead = match fetch {
                Fetch::Spread(ahead) => ahead,
                Fetch::Nothing | Fetch::Streams => &[],
            };
            // SAFETY: handed out only by `kernel`, whose caller promises
            // AVX2, FMA and F16C.
            unsafe { tile_avx2_rows::<T>(xs, rows, panels, k, ahead, out) }
        },
        rows: 6,
        panels: 1,
        streams: false,
        one_row: [
            Some((4, |xs, panels, k, out| {
                // SAFETY: as above.
                unsafe { panels_avx2::<T, 4>(xs, panels, k, out) }
            })),
            Some((2, |xs, panels, k, out| {
                // SAFETY: as above.
                unsafe { panels_avx2::<T, 2>(xs, panels, k, out) }
            })),
        ],
    }
}

/// Eight packed weights from `p` as f32: f32 loaded as they are, bf16
/// shifted into the high half of each lane, f16 converted (F16C); every
/// value exact.
///
/// # Safety
///
/// `p` points to eight readable values.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn load8<T: PackedElem>(p: *const T) -> __m256 {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm256_castsi256_ps, _mm256_cvtepu16_epi32, _mm256_cvtph_ps,
        _mm256_loadu_ps, _mm256_slli_epi32,
    };
    // SAFETY: eight values from `p` are readable (the caller's promise):
    // 32 bytes of f32, 16 of bf16 or f16; unaligned loads.
    unsafe {
        match T::DTYPE {
            PackedDtype::F32 => _mm256_loadu_ps(p.cast()),
            PackedDtype::Bf16 => {
                let half = _mm_loadu_si128(p.cast::<__m128i>());
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(half)))
            }
            PackedDtype::F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast::<__m128i>())),
        }
    }
}

/// [`tile_avx2`] for `rows` (1 to 6) input rows.
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_avx2_rows<T: PackedElem>(
    xs: &[f32],
    rows: usize,
    panel: &[T],
    k: usize,
    ahead: &[T],
    out: &mut Tile,
) {
    if ahead.is_empty() {
        tile_avx2_fetching::<T, false>(xs, rows, panel, k, ahead, out)
    } else {
        tile_avx2_fetching::<T, true>(xs, rows, panel, k, ahead, out)
    }
}

/// [`tile_avx2`] for `rows` input rows, fetching `ahead` or not.
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_avx2_fetching<T: PackedElem, const FETCH: bool>(
    xs: &[f32],
    rows: usize,
    panel: &[T],
    k: usize,
    ahead: &[T],
    out: &mut Tile,
) {
    match rows {
        6 => tile_avx2::<T, 6, FETCH>(xs, panel, k, ahead, out),
        5 => tile_avx2::<T, 5, FETCH>(xs, panel, k, ahead, out),
        4 => tile_avx2::<T, 4, FETCH>(xs, panel, k, ahead, out),
        3 => tile_avx2::<T, 3, FETCH>(xs, panel, k, ahead, out),
        2 => tile_avx2::<T, 2, FETCH>(xs, panel, k, ahead, out),
        _ => tile_avx2::<T, 1, FETCH>(xs, panel, k, ahead, out),
    }
}

/// One AVX2 packed tile: `R` input rows by one panel's 16 outputs in
/// 2 × `R` accumulators; for every input value, the panel's two vectors
/// loaded (and widened) once and the `R` rows' values broadcast. With
/// `FETCH`, the cache lines of `ahead` are requested along the way, one
/// every few input values (a prefetch per iteration at most, so the
/// memory stream runs beside the arithmetic rather than in bursts).
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // `r` indexes the inputs and the accumulators
fn tile_avx2<T: PackedElem, const R: usize, const FETCH: bool>(
    xs: &[f32],
    panel: &[T],
    k: usize,
    ahead: &[T],
    out: &mut Tile,
) {
    use std::arch::x86_64::{
        _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    assert!(xs.len() >= R * k && panel.len() >= PANEL * k);
    let mut lo: [__m256; R] = [_mm256_setzero_ps(); R];
    let mut hi: [__m256; R] = [_mm256_setzero_ps(); R];
    let mut spread = SpreadFetch::new(ahead, k);
    for i in 0..k {
        if FETCH {
            spread.step();
        }
        // SAFETY: `i < k`: the panel holds `16 * k` values and `xs` `R`
        // rows of `k` (asserted above); unaligned loads.
        unsafe {
            let w = panel.as_ptr().add(i * PANEL);
            let w0 = load8(w);
            let w1 = load8(w.add(8));
            for r in 0..R {
                let v = _mm256_broadcast_ss(&*xs.as_ptr().add(r * k + i));
                lo[r] = _mm256_fmadd_ps(v, w0, lo[r]);
                hi[r] = _mm256_fmadd_ps(v, w1, hi[r]);
            }
        }
    }
    for (r, row) in out.iter_mut().take(R).enumerate() {
        // SAFETY: `row` holds 16 values; unaligned stores.
        unsafe {
            _mm256_storeu_ps(row.as_mut_ptr(), lo[r]);
            _mm256_storeu_ps(row.as_mut_ptr().add(8), hi[r]);
        }
    }
}

/// One input row against `P` adjacent panels (`panels`, `16 * P`
/// outputs) with AVX2: `2 * P` accumulators, so `2 * P` independent chains
/// of multiply-adds where one panel has two (a single row is bound by
/// their latency, not by the arithmetic), and `P` streams of weights read
/// side by side (fewer streams per thread read memory more slowly here:
/// the 33 products of a batch-1 step took 5-12 % longer with two panels at
/// a time than with four, medians of 40 in nine runs; six were no faster
/// than four). Each output's sum is the same as in [`tile_avx2`].
#[target_feature(enable = "avx2,fma,f16c")]
fn panels_avx2<T: PackedElem, const P: usize>(
    xs: &[f32],
    panels: &[T],
    k: usize,
    out: &mut [f32; MOST_PANELS * PANEL],
) {
    use std::arch::x86_64::{
        _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    assert!(xs.len() >= k && panels.len() >= P * PANEL * k && P <= MOST_PANELS);
    let stride = PANEL * k;
    let mut acc: [[__m256; 2]; P] = [[_mm256_setzero_ps(); 2]; P];
    for i in 0..k {
        // SAFETY: `i < k`: `xs` holds `k` values and `panels` `P` panels
        // of `16 * k` (asserted above); unaligned loads.
        unsafe {
            let v = _mm256_broadcast_ss(&*xs.as_ptr().add(i));
            let w = panels.as_ptr().add(i * PANEL);
            for (q, acc) in acc.iter_mut().enumerate() {
                let w = w.add(q * stride);
                acc[0] = _mm256_fmadd_ps(v, load8(w), acc[0]);
                acc[1] = _mm256_fmadd_ps(v, load8(w.add(8)), acc[1]);
            }
        }
    }
    for (chunk, a) in out.chunks_exact_mut(8).zip(acc.iter().flatten()) {
        // SAFETY: `chunk` holds 8 values; unaligned store.
        unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), *a) };
    }
}
