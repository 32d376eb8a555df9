//! The AVX-512F kernels: sixteen lanes.

use std::arch::x86_64::__m512;

use super::portable::finish_dot;
use super::{
    Fetch, Kernel, LANES, LINE_BYTES, PANEL, PackedDtype, PackedElem, SpreadFetch, TILE_PANELS,
    TILE_ROWS, Tile,
};

/// Weight rows per AVX-512 tile.
const TILE_W: usize = 4;
/// Input rows per AVX-512 tile.
const TILE_X: usize = 6;

/// [`super::rows_times`] in tiles of up to [`TILE_W`] weight rows by [`TILE_X`]
/// input rows, one 16-lane accumulator per output: each weight vector
/// loaded serves six input rows, each input vector four weight rows.
#[target_feature(enable = "avx512f")]
pub(crate) fn rows_times_avx512(x: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize) {
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
                (4, 6) => dot_tile_avx512::<4, 6>(xs, ws, out, i, m, k),
                (4, 5) => dot_tile_avx512::<4, 5>(xs, ws, out, i, m, k),
                (4, 4) => dot_tile_avx512::<4, 4>(xs, ws, out, i, m, k),
                (4, 3) => dot_tile_avx512::<4, 3>(xs, ws, out, i, m, k),
                (4, 2) => dot_tile_avx512::<4, 2>(xs, ws, out, i, m, k),
                (4, _) => dot_tile_avx512::<4, 1>(xs, ws, out, i, m, k),
                (_, 6) => dot_tile_avx512::<1, 6>(xs, ws, out, i, m, k),
                (_, 5) => dot_tile_avx512::<1, 5>(xs, ws, out, i, m, k),
                (_, 4) => dot_tile_avx512::<1, 4>(xs, ws, out, i, m, k),
                (_, 3) => dot_tile_avx512::<1, 3>(xs, ws, out, i, m, k),
                (_, 2) => dot_tile_avx512::<1, 2>(xs, ws, out, i, m, k),
                (_, _) => dot_tile_avx512::<1, 1>(xs, ws, out, i, m, k),
            }
        }
        i += rows;
    }
}

/// One tile: `out[j * m + first + r] = dot(xs[r], ws[j])` for `W`-row
/// steps over `ws` (all of its rows when `W` is 1) and `R` rows of `xs`.
#[target_feature(enable = "avx512f")]
fn dot_tile_avx512<const W: usize, const R: usize>(
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
    // The loads below read `R` rows of `xs` and `W` rows of each step.
    assert!(k > 0 && xs.len() >= R * k);
    let main = k - k % LANES;
    for (step, ws) in ws.chunks_exact(W * k).enumerate() {
        // acc[r][j]: input row r against weight row j
        let mut acc: [[__m512; W]; R] = [[_mm512_setzero_ps(); W]; R];
        let mut at = 0;
        while at < main {
            // SAFETY: `at + 16 <= main <= k`; `ws` holds `W` rows of `k`
            // (its chunks are exact) and `xs` `R` rows (asserted above);
            // unaligned loads.
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

/// The pairwise sum of [`super::portable::finish_dot`] (lane `l` plus lane `l + 8`, then
/// `l + 4`, `l + 2`, `l + 1`) in registers: the same additions, so the
/// same bits.
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

/// The most input rows per AVX-512 packed tile.
const AVX512_ROWS: usize = 8;

/// The most adjacent panels per AVX-512 packed tile.
const AVX512_PANELS: usize = 3;

/// The AVX-512 packed kernels for weights of `T`.
///
/// # Safety
///
/// The CPU must support AVX-512F: the kernels handed out run its
/// instructions.
pub(crate) unsafe fn kernel<T: PackedElem>() -> Kernel<T> {
    Kernel {
        tile: |xs, rows, panels, width, k, fetch, out| {
            // SAFETY: handed out only by `kernel`, whose caller promises
            // AVX-512F.
            unsafe { tile_avx512_rows::<T>(xs, rows, panels, width, k, fetch, out) }
        },
        rows: AVX512_ROWS,
        panels: AVX512_PANELS,
        streams: true,
        one_row: [None, None],
    }
}

/// [`tile_avx512`]'s fetch modes: nothing, [`Fetch::Spread`] and
/// [`Fetch::Streams`].
const NOTHING: u8 = 0;
/// See [`NOTHING`].
const SPREAD: u8 = 1;
/// See [`NOTHING`].
const STREAMS: u8 = 2;

/// How far ahead of its reads an AVX-512 tile fetches each panel's
/// stream, in bytes (512 f32 values). On a 2-core Xeon with AVX-512
/// (weights from its L3 cache), the 33 products of a builtin:tiny step
/// took 15 % less time at 1 row and 22 % less at 8 rows than with the
/// hardware prefetcher alone (medians of 40), 512 or 1 024 values ahead,
/// while 2 048 and 4 096 gained less; at 32 rows, 3-9 % less than
/// fetching the next block as the AVX2 kernel does (three runs).
const STREAM_AHEAD_BYTES: usize = 2048;

/// Sixteen packed weights from `p` as f32: f32 loaded as they are, bf16
/// shifted into the high half of each lane, f16 converted; every value
/// exact.
///
/// # Safety
///
/// `p` points to sixteen readable values.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn load16<T: PackedElem>(p: *const T) -> __m512 {
    use std::arch::x86_64::{
        __m256i, _mm256_loadu_si256, _mm512_castsi512_ps, _mm512_cvtepu16_epi32, _mm512_cvtph_ps,
        _mm512_loadu_ps, _mm512_slli_epi32,
    };
    // SAFETY: sixteen values from `p` are readable (the caller's
    // promise): 64 bytes of f32, 32 of bf16 or f16; unaligned loads.
    unsafe {
        match T::DTYPE {
            PackedDtype::F32 => _mm512_loadu_ps(p.cast()),
            PackedDtype::Bf16 => {
                let half = _mm256_loadu_si256(p.cast::<__m256i>());
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(half)))
            }
            PackedDtype::F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p.cast::<__m256i>())),
        }
    }
}

/// [`tile_avx512`] for `rows` (1 to [`AVX512_ROWS`]) input rows and
/// `width` (1 to [`AVX512_PANELS`]) panels, fetching what `fetch` says.
#[target_feature(enable = "avx512f")]
fn tile_avx512_rows<T: PackedElem>(
    xs: &[f32],
    rows: usize,
    panels: &[T],
    width: usize,
    k: usize,
    fetch: Fetch<'_, T>,
    out: &mut Tile,
) {
    let (ahead, mode) = match fetch {
        Fetch::Nothing => (&[][..], NOTHING),
        Fetch::Spread(ahead) => (ahead, SPREAD),
        Fetch::Streams => (&[][..], STREAMS),
    };
    match (width, mode) {
        (3, NOTHING) => tile_avx512_width::<T, 3, NOTHING>(xs, rows, panels, k, ahead, out),
        (3, SPREAD) => tile_avx512_width::<T, 3, SPREAD>(xs, rows, panels, k, ahead, out),
        (3, _) => tile_avx512_width::<T, 3, STREAMS>(xs, rows, panels, k, ahead, out),
        (2, NOTHING) => tile_avx512_width::<T, 2, NOTHING>(xs, rows, panels, k, ahead, out),
        (2, SPREAD) => tile_avx512_width::<T, 2, SPREAD>(xs, rows, panels, k, ahead, out),
        (2, _) => tile_avx512_width::<T, 2, STREAMS>(xs, rows, panels, k, ahead, out),
        (_, NOTHING) => tile_avx512_width::<T, 1, NOTHING>(xs, rows, panels, k, ahead, out),
        (_, SPREAD) => tile_avx512_width::<T, 1, SPREAD>(xs, rows, panels, k, ahead, out),
        (_, _) => tile_avx512_width::<T, 1, STREAMS>(xs, rows, panels, k, ahead, out),
    }
}

/// [`tile_avx512`] for `rows` input rows and `P` panels.
#[target_feature(enable = "avx512f")]
fn tile_avx512_width<T: PackedElem, const P: usize, const FETCH: u8>(
    xs: &[f32],
    rows: usize,
    panels: &[T],
    k: usize,
    ahead: &[T],
    out: &mut Tile,
) {
    match rows {
        8 => tile_avx512::<T, 8, P, FETCH>(xs, panels, k, ahead, out),
        7 => tile_avx512::<T, 7, P, FETCH>(xs, panels, k, ahead, out),
        6 => tile_avx512::<T, 6, P, FETCH>(xs, panels, k, ahead, out),
        5 => tile_avx512::<T, 5, P, FETCH>(xs, panels, k, ahead, out),
        4 => tile_avx512::<T, 4, P, FETCH>(xs, panels, k, ahead, out),
        3 => tile_avx512::<T, 3, P, FETCH>(xs, panels, k, ahead, out),
        2 => tile_avx512::<T, 2, P, FETCH>(xs, panels, k, ahead, out),
        _ => tile_avx512::<T, 1, P, FETCH>(xs, panels, k, ahead, out),
    }
}

/// One AVX-512 packed tile: `R` input rows by `P` adjacent panels in
/// `R * P` 16-lane accumulators; for every input value, each panel's
/// vector loaded (and widened) once and each row's value broadcast, so
/// `P + R` loads per `R * P` multiply-adds and `P` weight streams read
/// side by side. With `FETCH` [`STREAMS`], each panel's line
/// [`STREAM_AHEAD_BYTES`] ahead is requested as the tile goes, one per
/// panel and cache line of the panel; with [`SPREAD`], the lines of
/// `ahead`, one every few input values. Each output's sum is the same as
/// in the portable tile.
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // `r` indexes the inputs and the accumulators
fn tile_avx512<T: PackedElem, const R: usize, const P: usize, const FETCH: u8>(
    xs: &[f32],
    panels: &[T],
    k: usize,
    ahead: &[T],
    out: &mut Tile,
) {
    use std::arch::x86_64::{
        _MM_HINT_T0, _mm_prefetch, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps,
    };
    assert!(R <= TILE_ROWS && P <= TILE_PANELS);
    assert!(xs.len() >= R * k && panels.len() >= P * PANEL * k);
    let size = std::mem::size_of::<T>();
    let stride = PANEL * k;
    // Values ahead, and the input values one cache line of a panel
    // spans (one for f32, two for two-byte values).
    let ahead_values = STREAM_AHEAD_BYTES / size;
    let per_line = (LINE_BYTES / (PANEL * size)).max(1);
    let mut acc: [[__m512; P]; R] = [[_mm512_setzero_ps(); P]; R];
    let mut spread = SpreadFetch::new(ahead, k);
    for i in 0..k {
        if FETCH == SPREAD {
            spread.step();
        }
        // SAFETY: `i < k`: `panels` holds `P` panels of `16 * k` values
        // and `xs` `R` rows of `k` (asserted above); unaligned loads.
        unsafe {
            let w = panels.as_ptr().add(i * PANEL);
            if FETCH == STREAMS && i % per_line == 0 {
                // Lines past a panel's end (or the weight's) are
                // fetched for nothing: a prefetch never faults.
                for q in 0..P {
                    let line = w.wrapping_add(q * stride + ahead_values);
                    _mm_prefetch::<_MM_HINT_T0>(line.cast());
                }
            }
            let mut wv = [_mm512_setzero_ps(); P];
            for (q, v) in wv.iter_mut().enumerate() {
                *v = load16(w.add(q * stride));
            }
            for r in 0..R {
                let v = _mm512_set1_ps(*xs.as_ptr().add(r * k + i));
                for (a, w) in acc[r].iter_mut().zip(&wv) {
                    *a = _mm512_fmadd_ps(v, *w, *a);
                }
            }
        }
    }
    for (row, acc) in out.iter_mut().zip(&acc) {
        for (chunk, a) in row.chunks_exact_mut(PANEL).zip(acc) {
            // SAFETY: `chunk` holds 16 values; unaligned store.
            unsafe { _mm512_storeu_ps(chunk.as_mut_ptr(), *a) };
        }
    }
}
