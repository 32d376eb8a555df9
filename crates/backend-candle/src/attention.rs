//! A decoding step's attention on the CPU, in f32: one new position per
//! row against the keys and values its slot of the KV cache holds, read in
//! place (kept in f32, or at two bytes in bf16 or f16 and widened as they
//! are loaded, exactly: the same sums as on the same values in f32). Prefill on host buffers runs it once per prompt token. With AVX2
//! and FMA the scores, the softmax and the weighted sum run eight lanes at
//! a time, with AVX-512 the scores and the weighted sum sixteen, each key
//! and each value read once for all the query heads that share it; every
//! path gives the same bits (the portable one mirrors the lanes).

use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use crate::activation::exp_avx2;
use crate::activation::exp_poly;
#[cfg(target_arch = "x86_64")]
use crate::cpu::avx2::load8;
#[cfg(target_arch = "x86_64")]
use crate::cpu::avx512::load16;
#[cfg(target_arch = "x86_64")]
use crate::cpu::{
    LANES, LINE_BYTES, finish_avx2, rows_times_avx2, sum_lanes_avx512, sum_lanes16_avx512,
};
use crate::cpu::{PackedElem, Path, as_f32, portable, rows_times_portable};

/// One row's keys and values in its slot of the KV cache, for a decoding
/// step's attention.
#[derive(Debug, Clone, Copy)]
pub struct SlotView<'a, T = f32> {
    /// Keys, laid out `(kv_heads, capacity, head_dim)`.
    pub keys: &'a [T],
    /// Values, laid out as the keys.
    pub values: &'a [T],
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
pub fn decode_attention<'a, T: PackedElem>(
    q: &[f32],
    shape: QueryShape,
    slot: &(impl Fn(usize) -> SlotView<'a, T> + Sync),
    scale: f32,
    out: &mut [f32],
    scores: &mut [f32],
) -> candle_core::Result<()> {
    decode_attention_on(Path::best(), q, shape, slot, scale, out, scores)
}

/// [`decode_attention`] on the kernels of `path` (which the CPU must
/// support), so that tests reach every path.
fn decode_attention_on<'a, T: PackedElem>(
    path: Path,
    q: &[f32],
    shape: QueryShape,
    slot: &(impl Fn(usize) -> SlotView<'a, T> + Sync),
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
        attend_block(
            path,
            q,
            keys,
            values,
            d,
            scale,
            out,
            &mut scores[..total * rep],
        );
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

/// One (row, key/value head) block of a decoding step's attention: the
/// `rep` query heads in `q` (`rep * d` values) against the `total`
/// positions of `keys` and `values` (`total * d` each); `out` gets the
/// heads' outputs side by side, `scores` (`rep * total` values) holds each
/// head's probabilities, one head after another, on the kernels of
/// `path`.
#[allow(clippy::too_many_arguments)]
fn attend_block<T: PackedElem>(
    path: Path,
    q: &[f32],
    keys: &[T],
    values: &[T],
    d: usize,
    scale: f32,
    out: &mut [f32],
    scores: &mut [f32],
) {
    let total = keys.len() / d.max(1);
    let rep = q.len() / d.max(1);
    #[cfg(target_arch = "x86_64")]
    match path {
        Path::Avx512 => {
            // As below, sixteen lanes at a time but for the softmax.
            // SAFETY: `Path::Avx512` is only taken when the CPU supports
            // AVX-512F (and so AVX2 and FMA).
            unsafe {
                scores_avx512(keys, q, values, scores, total, d);
                for probs in scores.chunks_exact_mut(total) {
                    softmax_avx2(probs, scale);
                }
                weighted_sum_avx512(scores, values, total, rep, d, out);
            }
            return;
        }
        Path::Avx2 => {
            // scores[r * total + j] = dot(k_j, q_r): each key is read once
            // for all the query heads that share it, and each value once
            // for all their weighted sums.
            // SAFETY: `Path::Avx2` is only taken when the CPU supports
            // AVX2 and FMA.
            unsafe {
                scores_avx2(keys, q, values, scores, total, d);
                for probs in scores.chunks_exact_mut(total) {
                    softmax_avx2(probs, scale);
                }
                weighted_sum_avx2(scores, values, total, rep, d, out);
            }
            return;
        }
        Path::Portable => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = path;
    scores_portable(keys, q, scores, total, d);
    for probs in scores.chunks_exact_mut(total.max(1)) {
        softmax_portable(probs, scale);
    }
    out.fill(0.0);
    for (r, out) in out.chunks_exact_mut(d).enumerate() {
        let probs = &scores[r * total..(r + 1) * total];
        for (p, v) in probs.iter().zip(values.chunks_exact(d)) {
            for (o, v) in out.iter_mut().zip(v) {
                *o = p.mul_add(v.to_f32(), *o);
            }
        }
    }
}

/// `scores[r * total + j]` = the dot product of key `j` with query head
/// `r`, one value at a time: the dot-product kernels' sum
/// ([`portable::dot`]) on the keys widened to f32.
fn scores_portable<T: PackedElem>(
    keys: &[T],
    q: &[f32],
    scores: &mut [f32],
    total: usize,
    d: usize,
) {
    if let Some(keys) = as_f32(keys) {
        rows_times_portable(keys, q, scores, total, d);
        return;
    }
    let mut key = [0f32; 512];
    for (j, k) in keys.chunks_exact(d.max(1)).take(total).enumerate() {
        for (r, q) in q.chunks_exact(d.max(1)).enumerate() {
            scores[r * total + j] = if d <= key.len() {
                for (w, v) in key.iter_mut().zip(k) {
                    *w = v.to_f32();
                }
                portable::dot(&key[..d], q)
            } else {
                let widened: Vec<f32> = k.iter().map(|v| v.to_f32()).collect();
                portable::dot(&widened, q)
            };
        }
    }
}

/// Key rows one tile of [`scores_avx2`] takes.
#[cfg(target_arch = "x86_64")]
const SCORE_KEYS: usize = 3;

/// How far ahead of the scores' reads the keys and values are fetched, in
/// bytes (512 f32 values). Batch-32 decoding attention over 8 layers of
/// builtin:tiny (32 rows, 2 KV heads of 160 positions, a scan between
/// layers; medians of 40, one process, 2-core Xeon with AVX-512) took
/// 12-15 % less time with it, on the AVX2 and the AVX-512 kernels alike
/// (three runs).
#[cfg(target_arch = "x86_64")]
const FETCH_AHEAD_BYTES: usize = 2048;

/// For the `len` values of keys from `from` that a tile of scores is
/// about to read: asks for the values at the same positions into the L2
/// cache for the weighted sum that follows, and for the keys (into the L1
/// cache) and values (L2) [`FETCH_AHEAD`] values further on: a block's
/// keys and values are read as two streams, which the hardware prefetcher
/// ramps up to too slowly for 40 KB of each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn fetch_keys_values<T: PackedElem>(keys: &[T], values: &[T], from: usize, len: usize) {
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn scores_avx2<T: PackedElem>(
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
#[cfg(target_arch = "x86_64")]
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

/// [`softmax_avx2`] one value at a time, with the same eight partial sums:
/// the same bits.
fn softmax_portable(probs: &mut [f32], scale: f32) {
    let mut max = f32::NEG_INFINITY;
    for s in probs.iter_mut() {
        *s *= scale;
        max = max.max(*s);
    }
    let mut lanes = [0f32; 8];
    for (j, s) in probs.iter_mut().enumerate() {
        *s = exp_poly(*s - max);
        lanes[j % 8] += *s;
    }
    let inv = 1.0 / lanes.iter().sum::<f32>();
    for s in probs.iter_mut() {
        *s *= inv;
    }
}

/// `probs` scaled by `scale`, then a softmax over it, in place.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn softmax_avx2(probs: &mut [f32], scale: f32) {
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn weighted_sum_avx2<T: PackedElem>(
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

/// Columns `c..d` of heads `heads` of a weighted sum, one value at a
/// time in the vector kernels' order (the columns past their last whole
/// vector).
#[cfg(target_arch = "x86_64")]
fn columns_one_at_a_time<T: PackedElem>(
    probs: &[f32],
    values: &[T],
    total: usize,
    d: usize,
    heads: std::ops::Range<usize>,
    c: usize,
    out: &mut [f32],
) {
    for r in heads {
        let p = &probs[r * total..(r + 1) * total];
        for (i, o) in out[r * d + c..(r + 1) * d].iter_mut().enumerate() {
            *o = 0.0;
            for (j, p) in p.iter().enumerate() {
                *o = p.mul_add(values[j * d + c + i].to_f32(), *o);
            }
        }
    }
}

/// Columns `c..c + 8 * C` of heads `h0..h0 + H` of
/// [`weighted_sum_avx2`].
#[cfg(target_arch = "x86_64")]
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

/// Query heads one tile of [`scores_avx512`] takes at most.
#[cfg(target_arch = "x86_64")]
const SCORE_HEADS_AVX512: usize = 4;

/// [`scores_avx2`] sixteen lanes at a time: tiles of sixteen scores where
/// the heads allow (four heads by four keys: 8 loads per 16 multiply-adds,
/// and the sixteen pairwise ends together), the rest in tiles of up to
/// [`SCORE_HEADS_AVX512`] heads by [`SCORE_KEYS`] keys (12 accumulators, 7
/// loads per 12 multiply-adds), each product the same 16 lanes and the
/// same pairwise end, so the same bits. A head size that is not a multiple
/// of 16 goes through [`scores_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn scores_avx512<T: PackedElem>(
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
#[cfg(target_arch = "x86_64")]
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
#[cfg(target_arch = "x86_64")]
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

/// [`weighted_sum_avx2`] sixteen lanes at a time: up to four heads by up
/// to 64 columns (16 accumulators) while the positions' values go by, so a
/// head size of 64 reads the values once in all. Columns past the last
/// 16 go one at a time. The same sums in the same order, so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn weighted_sum_avx512<T: PackedElem>(
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
#[cfg(target_arch = "x86_64")]
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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};
    use guidebench_testkit::conformance::largest_difference;

    /// The largest |difference| between `got` and the tensor `want`.
    fn largest(got: &[f32], want: &Tensor) -> f32 {
        let want: Vec<f32> = want
            .flatten_all()
            .and_then(|t| t.to_vec1())
            .expect("values");
        largest_difference(got, &want).1
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
        for path in Path::available() {
            let mut out = vec![f32::NAN; b * g * rep * d];
            let mut scores = vec![f32::NAN; decode_attention_scratch(shape, 12)];
            decode_attention_on(path, &strided, shape, &view, scale, &mut out, &mut scores)
                .expect("attention");
            for (row, (k, v)) in slots.iter().enumerate() {
                let k = k.narrow(1, 0, lens[row]).expect("narrow");
                let v = v.narrow(1, 0, lens[row]).expect("narrow");
                let q = q.get(row).expect("row");
                let scores =
                    (q.matmul(&k.t().expect("t")).expect("mm") * f64::from(scale)).expect("scale");
                let probs = candle_nn::ops::softmax_last_dim(&scores).expect("softmax");
                let want = probs.matmul(&v.contiguous().expect("c")).expect("mm");
                let per_row = g * rep * d;
                let diff = largest(&out[row * per_row..(row + 1) * per_row], &want);
                assert!(diff < 1e-5, "{path:?}: row {row}: max |diff| {diff}");
            }
        }
    }

    #[test]
    fn attention_gives_the_same_bits_on_every_path() {
        // Head sizes with and without a tail past 16 values; 1 to 8 query
        // heads per key/value head (whole and partial tiles of heads);
        // lengths around the eight lanes and the tiles of keys.
        for (rep, d) in [
            (1usize, 64usize),
            (2, 16),
            (3, 20),
            (4, 64),
            (5, 8),
            (8, 128),
            (6, 32),
            (3, 48),
            (2, 24),
        ] {
            for len in [1usize, 7, 8, 9, 33, 130] {
                let shape = QueryShape {
                    rows: 2,
                    kv_heads: 1,
                    rep,
                    head_dim: d,
                    row_stride: rep * d,
                };
                let q: Vec<f32> = (0..2 * rep * d).map(|i| (i as f32 * 0.37).sin()).collect();
                let keys: Vec<f32> = (0..len * d).map(|i| (i as f32 * 0.71).cos()).collect();
                let values: Vec<f32> = (0..len * d).map(|i| (i as f32 * 0.53).sin()).collect();
                let view = |i: usize| SlotView {
                    keys: &keys,
                    values: &values,
                    capacity: len,
                    len: len - i.min(len - 1),
                };
                let run = |path: Path| {
                    let mut out = vec![f32::NAN; 2 * rep * d];
                    let mut scores = vec![f32::NAN; decode_attention_scratch(shape, len)];
                    decode_attention_on(path, &q, shape, &view, 0.4, &mut out, &mut scores)
                        .expect("attention");
                    out.into_iter().map(f32::to_bits).collect::<Vec<_>>()
                };
                let portable = run(Path::Portable);
                for path in Path::available() {
                    assert_eq!(
                        run(path),
                        portable,
                        "{path:?}: rep {rep}, head_dim {d}, length {len}"
                    );
                }
                // Keys and values kept at two bytes: the bits of the same
                // values widened to f32, on every path.
                half_kv_matches_f32(&q, shape, &keys, &values, half::bf16::from_f32);
                half_kv_matches_f32(&q, shape, &keys, &values, half::f16::from_f32);
            }
        }
    }

    /// Attention over `keys` and `values` rounded by `round` and kept so,
    /// against the same rounded values widened to f32, on every path.
    fn half_kv_matches_f32<T: PackedElem>(
        q: &[f32],
        shape: QueryShape,
        keys: &[f32],
        values: &[f32],
        round: fn(f32) -> T,
    ) {
        let (hk, hv): (Vec<T>, Vec<T>) = (
            keys.iter().map(|v| round(*v)).collect(),
            values.iter().map(|v| round(*v)).collect(),
        );
        let (wk, wv): (Vec<f32>, Vec<f32>) = (
            hk.iter().map(|v| v.to_f32()).collect(),
            hv.iter().map(|v| v.to_f32()).collect(),
        );
        let d = shape.head_dim;
        let len = keys.len() / d;
        let out_len = shape.rows * shape.kv_heads * shape.rep * d;
        for path in Path::available() {
            let mut got = vec![f32::NAN; out_len];
            let mut want = vec![f32::NAN; out_len];
            let mut scores = vec![f32::NAN; decode_attention_scratch(shape, len)];
            let lens = |i: usize| len - i.min(len - 1);
            let half_view = |i: usize| SlotView {
                keys: &hk,
                values: &hv,
                capacity: len,
                len: lens(i),
            };
            let wide_view = |i: usize| SlotView {
                keys: &wk,
                values: &wv,
                capacity: len,
                len: lens(i),
            };
            decode_attention_on(path, q, shape, &half_view, 0.4, &mut got, &mut scores)
                .expect("attention");
            decode_attention_on(path, q, shape, &wide_view, 0.4, &mut want, &mut scores)
                .expect("attention");
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{path:?}, {:?}: rep {}, head_dim {d}, length {len}",
                T::DTYPE,
                shape.rep
            );
        }
    }
}
