//! The AVX-512 BF16 kernel (`vdpbf16ps`), an option for bf16 weights
//! (`activations=bf16`): the activations are rounded to bf16 too, and
//! each instruction multiplies pairs of inputs by pairs of weights and
//! adds both products to sixteen f32 sums, twice the multiply-adds of an
//! f32 `vfmadd` per instruction. Not exact: rounding the activations
//! changes the sums (the default kernels keep f32 activations and give
//! the bits of the weights upcast to f32); how far, and how often a
//! greedy token changes, is measured in `docs/candle-engine.md`.
//!
//! The panels are the packed layout every kernel reads (input-major, 16
//! outputs per input value): a tile interleaves two inputs' rows of a
//! panel into one register of pairs as it loads them, so the weights are
//! packed once for every kernel.

use std::arch::x86_64::{__m256bh, __m256i, __m512, __m512bh, __m512i};

use super::{Fetch, Kernel, PANEL, TILE_PANELS, TILE_ROWS, Tile};

/// The most input rows per tile.
const ROWS: usize = 8;

/// The most adjacent panels per tile.
const PANELS: usize = 3;

/// Input values per step of a tile: sixteen, rounded to bf16 in one
/// instruction, eight pairs.
const STEP: usize = 16;

/// How far ahead of its reads a tile fetches each panel's stream, in
/// bytes (as the AVX-512 kernel does for decoding steps).
const STREAM_AHEAD_BYTES: usize = 2048;

/// The `vdpbf16ps` packed kernels for bf16 weights.
///
/// # Safety
///
/// The CPU must support this kernel: AVX-512F, BW and VL with BF16
/// ([`Features::avx512_bf16`](super::Features::avx512_bf16)).
pub(crate) unsafe fn kernel() -> Kernel<half::bf16> {
    Kernel {
        tile: |xs, rows, panels, width, k, fetch, out| {
            let streams = matches!(fetch, Fetch::Streams);
            // SAFETY: handed out only by `kernel`, whose caller promises
            // the CPU runs it.
            unsafe {
                match (width, streams) {
                    (3, false) => tile_width::<3, false>(xs, rows, panels, k, out),
                    (3, true) => tile_width::<3, true>(xs, rows, panels, k, out),
                    (2, false) => tile_width::<2, false>(xs, rows, panels, k, out),
                    (2, true) => tile_width::<2, true>(xs, rows, panels, k, out),
                    (_, false) => tile_width::<1, false>(xs, rows, panels, k, out),
                    (_, true) => tile_width::<1, true>(xs, rows, panels, k, out),
                }
            }
        },
        rows: ROWS,
        panels: PANELS,
        streams: true,
        one_row: [None, None],
    }
}

/// [`tile`] for `rows` (1 to [`ROWS`]) input rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
fn tile_width<const P: usize, const STREAMS: bool>(
    xs: &[f32],
    rows: usize,
    panels: &[half::bf16],
    k: usize,
    out: &mut Tile,
) {
    match rows {
        8 => tile::<8, P, STREAMS>(xs, panels, k, out),
        7 => tile::<7, P, STREAMS>(xs, panels, k, out),
        6 => tile::<6, P, STREAMS>(xs, panels, k, out),
        5 => tile::<5, P, STREAMS>(xs, panels, k, out),
        4 => tile::<4, P, STREAMS>(xs, panels, k, out),
        3 => tile::<3, P, STREAMS>(xs, panels, k, out),
        2 => tile::<2, P, STREAMS>(xs, panels, k, out),
        _ => tile::<1, P, STREAMS>(xs, panels, k, out),
    }
}

/// One tile: `R` input rows by `P` adjacent panels in `R * P` sixteen-lane
/// f32 sums. For every sixteen input values, each row's values are
/// rounded to bf16 (nearest, ties to even) and kept as eight pairs; for
/// every pair, each panel's two rows of sixteen weights are loaded and
/// interleaved into one register of sixteen pairs, and one `vdpbf16ps`
/// per row and panel adds both products to every output's sum. Input
/// values past the last whole sixteen are rounded the same way and
/// multiplied one at a time in f32 (their products are exact, as the
/// instruction's are).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[allow(clippy::needless_range_loop)] // `r` indexes the pairs and the sums
fn tile<const R: usize, const P: usize, const STREAMS: bool>(
    xs: &[f32],
    panels: &[half::bf16],
    k: usize,
    out: &mut Tile,
) {
    use std::arch::x86_64::{
        _MM_HINT_T0, _mm_prefetch, _mm256_loadu_si256, _mm512_castsi256_si512, _mm512_castsi512_ps,
        _mm512_cvtepu16_epi32, _mm512_cvtneps_pbh, _mm512_dpbf16_ps, _mm512_fmadd_ps,
        _mm512_loadu_epi16, _mm512_loadu_ps, _mm512_permutex2var_epi16, _mm512_set1_epi32,
        _mm512_set1_ps, _mm512_setzero_ps, _mm512_slli_epi32, _mm512_storeu_ps,
    };
    assert!(R <= TILE_ROWS && P <= TILE_PANELS);
    assert!(xs.len() >= R * k && panels.len() >= P * PANEL * k);
    let stride = PANEL * k;
    let main = k - k % STEP;
    // Lane `2c` takes value `c` of the first input's row, lane `2c + 1`
    // value `c` of the second's (indices 32 and on pick from the second
    // register).
    let interleave: [u16; 32] = std::array::from_fn(|l| (l / 2 + 32 * (l % 2)) as u16);
    // SAFETY: `interleave` holds 32 u16 values; unaligned load.
    let interleave: __m512i = unsafe { _mm512_loadu_epi16(interleave.as_ptr().cast()) };
    let ahead = STREAM_AHEAD_BYTES / std::mem::size_of::<half::bf16>();
    let mut acc: [[__m512; P]; R] = [[_mm512_setzero_ps(); P]; R];
    let mut pairs = [[0u32; STEP / 2]; R];
    let mut at = 0;
    while at < main {
        for r in 0..R {
            // SAFETY: `at + 16 <= main <= k`: inside row `r` of `xs`
            // (asserted above); unaligned load, then the sixteen rounded
            // values stored as eight pairs.
            unsafe {
                let v = _mm512_loadu_ps(xs.as_ptr().add(r * k + at));
                let rounded = std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(v));
                std::ptr::write_unaligned(pairs[r].as_mut_ptr().cast::<__m256i>(), rounded);
            }
        }
        for j in 0..STEP / 2 {
            let i = at + 2 * j;
            let mut wv = [_mm512_setzero_ps(); P];
            for (q, w) in wv.iter_mut().enumerate() {
                // SAFETY: `i + 1 < k`: rows `i` and `i + 1` of panel `q`
                // (16 values each) are inside `panels` (asserted above);
                // unaligned loads. A prefetch never faults.
                unsafe {
                    let p = panels.as_ptr().add(q * stride + i * PANEL);
                    if STREAMS {
                        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(ahead).cast());
                    }
                    let first = _mm512_castsi256_si512(_mm256_loadu_si256(p.cast()));
                    let second = _mm512_castsi256_si512(_mm256_loadu_si256(p.add(PANEL).cast()));
                    *w = _mm512_castsi512_ps(_mm512_permutex2var_epi16(first, interleave, second));
                }
            }
            for r in 0..R {
                // SAFETY: plain register work; the casts reinterpret 512
                // bits as 32 bf16 values.
                unsafe {
                    let x = _mm512_set1_epi32(pairs[r][j] as i32);
                    for (a, w) in acc[r].iter_mut().zip(&wv) {
                        let w = std::mem::transmute::<__m512, __m512bh>(*w);
                        let x = std::mem::transmute::<__m512i, __m512bh>(x);
                        *a = _mm512_dpbf16_ps(*a, w, x);
                    }
                }
            }
        }
        at += STEP;
    }
    // The last values, one at a time: each a bf16 activation times a row
    // of sixteen bf16 weights, exact products added in f32.
    for i in main..k {
        let mut wv = [_mm512_setzero_ps(); P];
        for (q, w) in wv.iter_mut().enumerate() {
            // SAFETY: `i < k`: row `i` of panel `q` is inside `panels`;
            // bf16 widened by a shift into the high half of each lane.
            unsafe {
                let p = panels.as_ptr().add(q * stride + i * PANEL);
                let v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast()));
                *w = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v));
            }
        }
        for r in 0..R {
            let x = half::bf16::from_f32(xs[r * k + i]).to_f32();
            let x = _mm512_set1_ps(x);
            for (a, w) in acc[r].iter_mut().zip(&wv) {
                *a = _mm512_fmadd_ps(x, *w, *a);
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
