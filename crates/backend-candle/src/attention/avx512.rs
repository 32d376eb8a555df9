//! The attention kernels for AVX-512F: sixteen lanes for the scores and
//! the weighted sum (the softmax stays on [`super::avx2`]'s eight).

use super::avx2::{fetch_keys_values, scores_avx2};
use super::{SCORE_KEYS, columns_one_at_a_time};
use crate::cpu::avx512::load16;
use crate::cpu::{LANES, PackedElem, sum_lanes_avx512, sum_lanes16_avx512};

/// Query heads one tile of [`scores_avx512`] takes at most.
const SCORE_HEADS_AVX512: usize = 4;

/// [`scores_avx2`] sixteen lanes at a time: tiles of sixteen scores where
/// the heads allow (four heads by four keys: 8 loads per 16 multiply-adds,
/// and the sixteen pairwise ends together), the rest in tiles of up to
/// [`SCORE_HEADS_AVX512`] heads by [`SCORE_KEYS`] keys (12 accumulators, 7
/// loads per 12 multiply-adds), each product the same 16 lanes and the
/// same pairwise end, so the same bits. A head size that is not a multiple
/// of 16 goes through [`scores_avx2`].
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(super) fn scores_avx512<T: PackedElem>(
    keys: &[T],
    q: &[f32],
    values: &[T],
    scores: &mut [f32],
    total: usize,
    d: usize,
) {
    if d == 0 || !d.is_multiple_of(LANES) {
        scores_avx2(keys, q, values, scores, total, d);
        return;
    }
    assert!(
        keys.len() >= total * d && values.len() >= total * d && scores.len() >= q.len() / d * total
    );
    let rep = q.len() / d;
    let mut h = 0;
    while h < rep {
        let heads = (rep - h).min(SCORE_HEADS_AVX512);
        let qs = &q[h * d..];
        // Keys in tiles that give sixteen scores (four heads by four keys,
        // two by eight, one by sixteen), which finish together; what is
        // left, and three heads, in tiles of up to three keys.
        let wide = match heads {
            1 | 2 | 4 => 16 / heads,
            _ => 0,
        };
        let mut j = 0;
        while j < total {
            let n = match total - j {
                left if wide > 0 && left >= wide => wide,
                left => left.min(SCORE_KEYS),
            };
            // The first heads' pass reads the keys from memory: it asks for
            // them, and for the values, ahead.
            if h == 0 {
                fetch_keys_values(keys, values, j * d, n * d);
            }
            let ks = &keys[j * d..(j + n) * d];
            match (heads, n) {
                (4, 4) => score_tile_avx512::<T, 4, 4>(ks, qs, scores, total, j, h, d),
                (2, 8) => score_tile_avx512::<T, 2, 8>(ks, qs, scores, total, j, h, d),
                (1, 16) => score_tile_avx512::<T, 1, 16>(ks, qs, scores, total, j, h, d),
                (4, 3) => score_tile_avx512::<T, 4, 3>(ks, qs, scores, total, j, h, d),
                (4, 2) => score_tile_avx512::<T, 4, 2>(ks, qs, scores, total, j, h, d),
                (4, _) => score_tile_avx512::<T, 4, 1>(ks, qs, scores, total, j, h, d),
                (3, 3) => score_tile_avx512::<T, 3, 3>(ks, qs, scores, total, j, h, d),
                (3, 2) => score_tile_avx512::<T, 3, 2>(ks, qs, scores, total, j, h, d),
                (3, _) => score_tile_avx512::<T, 3, 1>(ks, qs, scores, total, j, h, d),
                (2, 3) => score_tile_avx512::<T, 2, 3>(ks, qs, scores, total, j, h, d),
                (2, 2) => score_tile_avx512::<T, 2, 2>(ks, qs, scores, total, j, h, d),
                (2, _) => score_tile_avx512::<T, 2, 1>(ks, qs, scores, total, j, h, d),
                (_, 3) => score_tile_avx512::<T, 1, 3>(ks, qs, scores, total, j, h, d),
                (_, 2) => score_tile_avx512::<T, 1, 2>(ks, qs, scores, total, j, h, d),
                (_, _) => score_tile_avx512::<T, 1, 1>(ks, qs, scores, total, j, h, d),
            }
            j += n;
        }
        h += heads;
    }
}

/// The 16-lane partial dot products of query heads `0..H` (the first `H`
/// rows of `qs`) with keys `0..J` (the `J` rows of `ks`), `d` a multiple
/// of 16: accumulator `[h][jj]` holds, in each lane, the sum of every 16th
/// product from that lane on, which [`sum_lanes_avx512`] ends.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
#[allow(clippy::needless_range_loop)]
fn score_lanes_avx512<T: PackedElem, const H: usize, const J: usize>(
    ks: &[T],
    qs: &[f32],
    d: usize,
) -> [[std::arch::x86_64::__m512; J]; H] {
    use std::arch::x86_64::{__m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_setzero_ps};
    assert!(ks.len() >= J * d && qs.len() >= H * d && d.is_multiple_of(LANES));
    let mut acc: [[__m512; J]; H] = [[_mm512_setzero_ps(); J]; H];
    let mut at = 0;
    while at < d {
        // SAFETY: `at + 16 <= d`; `ks` holds `J` rows and `qs` at least
        // `H` rows of `d` values (asserted above); unaligned loads.
        unsafe {
            let mut qv = [_mm512_setzero_ps(); H];
            for h in 0..H {
                qv[h] = _mm512_loadu_ps(qs.as_ptr().add(h * d + at));
            }
            for jj in 0..J {
                let kv = load16(ks.as_ptr().add(jj * d + at));
                for h in 0..H {
                    acc[h][jj] = _mm512_fmadd_ps(kv, qv[h], acc[h][jj]);
                }
            }
        }
        at += LANES;
    }
    acc
}

/// One tile of [`scores_avx512`]: query heads `h0..h0 + H` (the first `H`
/// rows of `qs`) against keys `j0..j0 + J` (the `J` rows of `ks`), `d` a
/// multiple of 16, the 16 lanes of every 16 values in one accumulator. A
/// tile of sixteen scores (`H * J` = 16) ends their pairwise sums together
/// ([`sum_lanes16_avx512`]); a smaller one ends each on its own. The same
/// bits either way.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
fn score_tile_avx512<T: PackedElem, const H: usize, const J: usize>(
    ks: &[T],
    qs: &[f32],
    scores: &mut [f32],
    total: usize,
    j0: usize,
    h0: usize,
    d: usize,
) {
    use std::arch::x86_64::_mm512_storeu_ps;
    let acc = score_lanes_avx512::<T, H, J>(ks, qs, d);
    if H * J == 16 {
        // Lane `h * J + jj`: head `h`, key `jj`.
        let mut lanes = [0f32; 16];
        // SAFETY: `lanes` holds 16 values; unaligned store.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), sum_lanes16_avx512(&acc)) };
        for (h, lanes) in lanes.chunks_exact(J).enumerate() {
            let at = (h0 + h) * total + j0;
            scores[at..at + J].copy_from_slice(lanes);
        }
    } else {
        for (h, acc) in acc.iter().enumerate() {
            for (jj, acc) in acc.iter().enumerate() {
                scores[(h0 + h) * total + j0 + jj] = sum_lanes_avx512(*acc);
            }
        }
    }
}

/// [`super::avx2::weighted_sum_avx2`] sixteen lanes at a time: up to four heads by up
/// to 64 columns (16 accumulators) while the positions' values go by, so a
/// head size of 64 reads the values once in all. Columns past the last
/// 16 go one at a time. The same sums in the same order, so the same bits.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(super) fn weighted_sum_avx512<T: PackedElem>(
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
        while d - c >= 16 {
            let chunks = ((d - c) / 16).min(4);
            match (heads, chunks) {
                (4, 4) => head_columns_avx512::<T, 4, 4>(probs, values, total, d, h, c, out),
                (4, 3) => head_columns_avx512::<T, 4, 3>(probs, values, total, d, h, c, out),
                (4, 2) => head_columns_avx512::<T, 4, 2>(probs, values, total, d, h, c, out),
                (4, _) => head_columns_avx512::<T, 4, 1>(probs, values, total, d, h, c, out),
                (3, 4) => head_columns_avx512::<T, 3, 4>(probs, values, total, d, h, c, out),
                (3, 3) => head_columns_avx512::<T, 3, 3>(probs, values, total, d, h, c, out),
                (3, 2) => head_columns_avx512::<T, 3, 2>(probs, values, total, d, h, c, out),
                (3, _) => head_columns_avx512::<T, 3, 1>(probs, values, total, d, h, c, out),
                (2, 4) => head_columns_avx512::<T, 2, 4>(probs, values, total, d, h, c, out),
                (2, 3) => head_columns_avx512::<T, 2, 3>(probs, values, total, d, h, c, out),
                (2, 2) => head_columns_avx512::<T, 2, 2>(probs, values, total, d, h, c, out),
                (2, _) => head_columns_avx512::<T, 2, 1>(probs, values, total, d, h, c, out),
                (_, 4) => head_columns_avx512::<T, 1, 4>(probs, values, total, d, h, c, out),
                (_, 3) => head_columns_avx512::<T, 1, 3>(probs, values, total, d, h, c, out),
                (_, 2) => head_columns_avx512::<T, 1, 2>(probs, values, total, d, h, c, out),
                (_, _) => head_columns_avx512::<T, 1, 1>(probs, values, total, d, h, c, out),
            }
            c += 16 * chunks;
        }
        columns_one_at_a_time(probs, values, total, d, h..h + heads, c, out);
        h += heads;
    }
}

/// Columns `c..c + 16 * C` of heads `h0..h0 + H` of
/// [`weighted_sum_avx512`].
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn head_columns_avx512<T: PackedElem, const H: usize, const C: usize>(
    probs: &[f32],
    values: &[T],
    total: usize,
    d: usize,
    h0: usize,
    c: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps,
    };
    assert!(
        c + 16 * C <= d
            && values.len() >= total * d
            && probs.len() >= (h0 + H) * total
            && out.len() >= (h0 + H) * d
    );
    let mut acc: [[__m512; C]; H] = [[_mm512_setzero_ps(); C]; H];
    for j in 0..total {
        // SAFETY: `j < total` and `c + 16 * C <= d`: inside `values`;
        // `(h0 + h) * total + j` inside `probs` (asserted above).
        unsafe {
            let v = values.as_ptr().add(j * d + c);
            let mut vv = [_mm512_setzero_ps(); C];
            for i in 0..C {
                vv[i] = load16(v.add(16 * i));
            }
            for h in 0..H {
                let p = _mm512_set1_ps(*probs.as_ptr().add((h0 + h) * total + j));
                for i in 0..C {
                    acc[h][i] = _mm512_fmadd_ps(p, vv[i], acc[h][i]);
                }
            }
        }
    }
    for h in 0..H {
        for i in 0..C {
            // SAFETY: `(h0 + h) * d + c + 16 * i + 16 <= (h0 + H) * d <=
            // out.len()`.
            unsafe {
                _mm512_storeu_ps(out.as_mut_ptr().add((h0 + h) * d + c + 16 * i), acc[h][i]);
            }
        }
    }
}
