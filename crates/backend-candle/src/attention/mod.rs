//! A decoding step's attention on the CPU, in f32: one new position per
//! row against the keys and values its slot of the KV cache holds, read in
//! place (kept in f32, or at two bytes in bf16 or f16 and widened as they
//! are loaded, exactly: the same sums as on the same values in f32). Prefill on host buffers runs it once per prompt token. With AVX2
//! and FMA the scores, the softmax and the weighted sum run eight lanes at
//! a time, with AVX-512 the scores and the weighted sum sixteen, each key
//! and each value read once for all the query heads that share it; every
//! path gives the same bits (the portable one mirrors the lanes).
//!
//! This file holds the shapes, the portable kernels and the choice among
//! the paths; the vector kernels are one file per instruction set:
//! `avx2` (eight lanes, the softmax of every vector path) and `avx512`
//! (sixteen lanes for the scores and the weighted sum).

use rayon::prelude::*;

use crate::activation::exp_poly;
use crate::cpu::{PackedElem, Path, as_f32, portable, rows_times_portable};

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(target_arch = "x86_64")]
mod avx512;

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
                avx512::scores_avx512(keys, q, values, scores, total, d);
                for probs in scores.chunks_exact_mut(total) {
                    avx2::softmax_avx2(probs, scale);
                }
                avx512::weighted_sum_avx512(scores, values, total, rep, d, out);
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
                avx2::scores_avx2(keys, q, values, scores, total, d);
                for probs in scores.chunks_exact_mut(total) {
                    avx2::softmax_avx2(probs, scale);
                }
                avx2::weighted_sum_avx2(scores, values, total, rep, d, out);
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

/// `probs` multiplied by `scale`, then a softmax over it, in place, on
/// the kernels of `path` (which the CPU must support): the softmax of
/// every decoding step's attention, for other attention passes (the
/// vision towers'). The same bits on every path.
pub(crate) fn softmax_scaled(path: Path, probs: &mut [f32], scale: f32) {
    #[cfg(target_arch = "x86_64")]
    if path != Path::Portable {
        // SAFETY: the vector paths are only taken when the CPU supports
        // AVX2, FMA and F16C (the AVX-512 path needs them too).
        unsafe { avx2::softmax_avx2(probs, scale) };
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = path;
    softmax_portable(probs, scale);
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

/// Key rows one tile of the vector kernels' scores takes.
#[cfg(target_arch = "x86_64")]
const SCORE_KEYS: usize = 3;

/// `avx2::softmax_avx2` one value at a time, with the same eight partial sums:
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
