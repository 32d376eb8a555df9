//! The attention kernels for AVX2 with FMA and F16C: eight lanes.

use super::{SCORE_KEYS, columns_one_at_a_time, scores_portable};
use crate::activation::exp_avx2;
use crate::cpu::avx2::load8;
use crate::cpu::{LANES, LINE_BYTES, PackedElem, as_f32, finish_avx2, rows_times_avx2};

/// How far ahead of the scores' reads the keys and values are fetched, in
/// bytes (512 f32 values). Batch-32 decoding attention over 8 layers of
/// builtin:tiny (32 rows, 2 KV heads of 160 positions, a scan between
/// layers; medians of 40, one process, 2-core Xeon with AVX-512) took
/// 12-15 % less time with it, on the AVX2 and the AVX-512 kernels alike
/// (three runs).
const FETCH_AHEAD_BYTES: usize = 2048;

/// For the `len` values of keys from `from` that a tile of scores is
/// about to read: asks for the values at the same positions into the L2
/// cache for the weighted sum that follows, and for the keys (into the L1
/// cache) and values (L2) [`FETCH_AHEAD_BYTES`] values further on: a block's
/// keys and values are read as two streams, which the hardware prefetcher
/// ramps up to too slowly for 40 KB of each.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn fetch_keys_values<T: PackedElem>(keys: &[T], values: &[T], from: usize, len: usize) {
    use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T1, _mm_prefetch};
    let size = std::mem::size_of::<T>();
    let (line, ahead) = (LINE_BYTES / size, FETCH_AHEAD_BYTES / size);
    // Past a block's end the lines are fetched for nothing: a prefetch
    // never faults, and `wrapping_add` makes no reference out of bounds.
    for at in (from..from + len).step_by(line) {
        _mm_prefetch::<_MM_HINT_T1>(values.as_ptr().wrapping_add(at).cast());
        _mm_prefetch::<_MM_HINT_T0>(keys.as_ptr().wrapping_add(at + ahead).cast());
        _mm_prefetch::<_MM_HINT_T1>(values.as_ptr().wrapping_add(at + ahead).cast());
    }
}

/// `scores[r * total + j]` = the dot product of key `j` with query head
/// `r`, for the `rep` heads in `q` (`rep * d` values): each key is read once
/// for all the heads, in tiles of two heads by [`SCORE_KEYS`] keys (12
/// accumulators, 10 loads per 12 multiply-adds); each product keeps the 16
/// lanes and the pairwise end of the dot product of `rows_times_portable`,
/// so the same bits. While the keys go by, the values of the same positions
/// are asked into the cache for the weighted sum that follows. A head size
/// that is not a multiple of 16 goes through `rows_times_avx2`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn scores_avx2<T: PackedElem>(
    keys: &[T],
    q: &[f32],
    values: &[T],
    scores: &mut [f32],
    total: usize,
    d: usize,
) {
    if d == 0 || !d.is_multiple_of(LANES) {
        match as_f32(keys) {
            Some(keys) => rows_times_avx2(keys, q, scores, total, d),
            None => scores_portable(keys, q, scores, total, d),
        }
        return;
    }
    assert!(
        keys.len() >= total * d && values.len() >= total * d && scores.len() >= q.len() / d * total
    );
    let rep = q.len() / d;
    let mut j = 0;
    while j < total {
        let n = (total - j).min(SCORE_KEYS);
        fetch_keys_values(keys, values, j * d, n * d);
        let ks = &keys[j * d..(j + n) * d];
        let mut h = 0;
        while h < rep {
            let qs = &q[h * d..];
            match (rep - h >= 2, n) {
                (true, 3) => score_tile_avx2::<T, 2, 3>(ks, qs, scores, total, j, h, d),
                (true, 2) => score_tile_avx2::<T, 2, 2>(ks, qs, scores, total, j, h, d),
                (true, _) => score_tile_avx2::<T, 2, 1>(ks, qs, scores, total, j, h, d),
                (false, 3) => score_tile_avx2::<T, 1, 3>(ks, qs, scores, total, j, h, d),
                (false, 2) => score_tile_avx2::<T, 1, 2>(ks, qs, scores, total, j, h, d),
                (false, _) => score_tile_avx2::<T, 1, 1>(ks, qs, scores, total, j, h, d),
            }
            h += 2;
        }
        j += n;
    }
}

/// One tile of [`scores_avx2`]: query heads `h0..h0 + H` (the first `H`
/// rows of `qs`) against keys `j0..j0 + J` (the `J` rows of `ks`), `d` a
/// multiple of 16. Lanes 0..8 of every 16 values accumulate in `lo`, 8..16
/// in `hi`, as in `rows_times_avx2`'s tiles.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn score_tile_avx2<T: PackedElem, const H: usize, const J: usize>(
    ks: &[T],
    qs: &[f32],
    scores: &mut [f32],
    total: usize,
    j0: usize,
    h0: usize,
    d: usize,
) {
    use std::arch::x86_64::{__m256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps};
    assert!(ks.len() >= J * d && qs.len() >= H * d && d.is_multiple_of(LANES));
    let mut lo: [[__m256; J]; H] = [[_mm256_setzero_ps(); J]; H];
    let mut hi: [[__m256; J]; H] = [[_mm256_setzero_ps(); J]; H];
    let mut at = 0;
    while at < d {
        // SAFETY: `at + 16 <= d`; `ks` holds `J` rows and `qs` at least
        // `H` rows of `d` values (asserted above); unaligned loads.
        unsafe {
            for (half, acc) in [(0, &mut lo), (8, &mut hi)] {
                let mut qv = [_mm256_setzero_ps(); H];
                for h in 0..H {
                    qv[h] = _mm256_loadu_ps(qs.as_ptr().add(h * d + at + half));
                }
                for jj in 0..J {
                    let kv = load8(ks.as_ptr().add(jj * d + at + half));
                    for h in 0..H {
                        acc[h][jj] = _mm256_fmadd_ps(kv, qv[h], acc[h][jj]);
                    }
                }
            }
        }
        at += LANES;
    }
    for h in 0..H {
        for jj in 0..J {
            scores[(h0 + h) * total + j0 + jj] = finish_avx2(lo[h][jj], hi[h][jj], &[], &[]);
        }
    }
}

/// `probs` scaled by `scale`, then a softmax over it, in place.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn softmax_avx2(probs: &mut [f32], scale: f32) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_loadu_ps, _mm256_max_ps, _mm256_mul_ps, _mm256_set1_ps,
        _mm256_setzero_ps, _mm256_storeu_ps, _mm256_sub_ps,
    };
    let main = probs.len() - probs.len() % 8;
    let scale_v = _mm256_set1_ps(scale);
    let mut max_v = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut at = 0;
    while at < main {
        // SAFETY: `at + 8 <= main <= probs.len()`; unaligned loads and
        // stores.
        unsafe {
            let p = probs.as_mut_ptr().add(at);
            let v = _mm256_mul_ps(_mm256_loadu_ps(p), scale_v);
            _mm256_storeu_ps(p, v);
            max_v = _mm256_max_ps(max_v, v);
        }
        at += 8;
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds 8 f32s.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), max_v) };
    let mut max = lanes.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
    for s in &mut probs[main..] {
        *s *= scale;
        max = max.max(*s);
    }
    let max_v = _mm256_set1_ps(max);
    let mut sum_v = _mm256_setzero_ps();
    let rest = probs.len() - main;
    let mut tail = [0f32; 8];
    tail[..rest].copy_from_slice(&probs[main..]);
    // past the tail: exp(-inf - max) = 0 adds nothing
    for v in &mut tail[rest..] {
        *v = f32::NEG_INFINITY;
    }
    let mut at = 0;
    while at < main {
        // SAFETY: as above.
        unsafe {
            let p = probs.as_mut_ptr().add(at);
            let e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(p), max_v));
            _mm256_storeu_ps(p, e);
            sum_v = _mm256_add_ps(sum_v, e);
        }
        at += 8;
    }
    // SAFETY: `tail` holds 8 f32s.
    unsafe {
        let e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(tail.as_ptr()), max_v));
        _mm256_storeu_ps(tail.as_mut_ptr(), e);
        sum_v = _mm256_add_ps(sum_v, e);
        _mm256_storeu_ps(lanes.as_mut_ptr(), sum_v);
    }
    probs[main..].copy_from_slice(&tail[..rest]);
    let inv = 1.0 / lanes.iter().sum::<f32>();
    let inv_v = _mm256_set1_ps(inv);
    let mut at = 0;
    while at < main {
        // SAFETY: as above.
        unsafe {
            let p = probs.as_mut_ptr().add(at);
            _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_loadu_ps(p), inv_v));
        }
        at += 8;
    }
    for s in &mut probs[main..] {
        *s *= inv;
    }
}

/// `out[r]` (`d` values) = the sum over positions `j` of
/// `probs[r * total + j]` times `values[j]`, for the `rep` heads, up to
/// four heads at a time: 16 output columns of each head in registers
/// (eight accumulators) while the positions' values go by in order, each
/// value vector loaded once for all the heads (one head at a time loaded
/// it once per head, one load per multiply-add). Every output is the same
/// sum in the same order as the portable path's, so the same bits.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn weighted_sum_avx2<T: PackedElem>(
    probs: &[f32],
    values: &[T],
    total: usize,
    rep: usize,
    d: usize,
    out: &mut [f32],
) {
    assert!(probs.len() >= rep * total && values.len() >= total * d && out.len() >= rep * d);
    let mut h = 0;
    while h < rep {
        let heads = (rep - h).min(4);
        let mut c = 0;
        while d - c >= 8 {
            let wide = d - c >= 16;
            match (heads, wide) {
                (4, true) => head_columns_avx2::<T, 4, 2>(probs, values, total, d, h, c, out),
                (3, true) => head_columns_avx2::<T, 3, 2>(probs, values, total, d, h, c, out),
                (2, true) => head_columns_avx2::<T, 2, 2>(probs, values, total, d, h, c, out),
                (_, true) => head_columns_avx2::<T, 1, 2>(probs, values, total, d, h, c, out),
                (4, false) => head_columns_avx2::<T, 4, 1>(probs, values, total, d, h, c, out),
                (3, false) => head_columns_avx2::<T, 3, 1>(probs, values, total, d, h, c, out),
                (2, false) => head_columns_avx2::<T, 2, 1>(probs, values, total, d, h, c, out),
                (_, false) => head_columns_avx2::<T, 1, 1>(probs, values, total, d, h, c, out),
            }
            c += if wide { 16 } else { 8 };
        }
        columns_one_at_a_time(probs, values, total, d, h..h + heads, c, out);
        h += heads;
    }
}

/// Columns `c..c + 8 * C` of heads `h0..h0 + H` of
/// [`weighted_sum_avx2`].
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn head_columns_avx2<T: PackedElem, const H: usize, const C: usize>(
    probs: &[f32],
    values: &[T],
    total: usize,
    d: usize,
    h0: usize,
    c: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::{
        __m256, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    assert!(
        c + 8 * C <= d
            && values.len() >= total * d
            && probs.len() >= (h0 + H) * total
            && out.len() >= (h0 + H) * d
    );
    let mut acc: [[__m256; C]; H] = [[_mm256_setzero_ps(); C]; H];
    for j in 0..total {
        // SAFETY: `j < total` and `c + 8 * C <= d`: inside `values`;
        // `(h0 + h) * total + j` inside `probs` (asserted above).
        unsafe {
            let v = values.as_ptr().add(j * d + c);
            let mut vv = [_mm256_setzero_ps(); C];
            for i in 0..C {
                vv[i] = load8(v.add(8 * i));
            }
            for h in 0..H {
                let p = _mm256_broadcast_ss(&*probs.as_ptr().add((h0 + h) * total + j));
                for i in 0..C {
                    acc[h][i] = _mm256_fmadd_ps(p, vv[i], acc[h][i]);
                }
            }
        }
    }
    for h in 0..H {
        for i in 0..C {
            // SAFETY: `(h0 + h) * d + c + 8 * i + 8 <= (h0 + H) * d <=
            // out.len()`.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add((h0 + h) * d + c + 8 * i), acc[h][i]) };
        }
    }
}
