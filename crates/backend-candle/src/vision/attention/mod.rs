//! A vision tower's (and the sentence encoder's) attention on the CPU,
//! in f32: every position of a frame attends to every position of the
//! same frame (no mask), each head on its own, the queries, keys and
//! values read in place from the rows of the fused q/k/v product
//! (`[q | k | v]`, heads side by side in each). A tower's frames all have
//! the same length ([`TowerShape`]); the encoder's texts are frames of
//! their own lengths packed back to back ([`Frames`]), so that no padding
//! is computed and no mask is needed.
//!
//! Per frame, the keys are first transposed (`(heads, head_dim, t)`);
//! then each block of [`QUERY_BLOCK`] query rows, head after head, takes
//! its scores (`q K^T`, a product of the block by the transposed keys),
//! the decoder's softmax (`crate::attention::softmax_scaled`, the scale
//! applied inside it), and the weighted sum (the probabilities by `V`),
//! written straight into its heads' columns of the output rows. Blocks
//! run in parallel; a block's scores (`QUERY_BLOCK × t`) stay in the
//! caches.
//!
//! Both products are one small kernel, `C = A B` on row-major strided
//! matrices, every element of `C` summed over `k` in order with one fused
//! multiply-add per term: the portable kernel here, eight lanes a time
//! with AVX2 (`avx2`), sixteen with AVX-512F (`avx512`); every path gives
//! the same bits (tested by forcing each).

use rayon::prelude::*;

use crate::attention::softmax_scaled;
use crate::cpu::Path;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

/// Query rows one task takes (its scores: this many rows of `t`).
pub(crate) const QUERY_BLOCK: usize = 32;

/// The shape of one attention call: `frames` frames of `t` positions,
/// `heads` heads of `head_dim` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TowerShape {
    /// Frames (images or tiles).
    pub frames: usize,
    /// Positions per frame.
    pub t: usize,
    /// Heads.
    pub heads: usize,
    /// Values per head.
    pub head_dim: usize,
}

/// Frames of their own lengths packed back to back (a batch of texts, no
/// padding): frame `f` is rows `bounds[f]..bounds[f + 1]`, so `bounds`
/// holds `frames + 1` ascending row numbers, the first 0; `heads` heads
/// of `head_dim` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frames<'a> {
    /// Each frame's first row, then the rows of all.
    pub bounds: &'a [usize],
    /// Heads.
    pub heads: usize,
    /// Values per head.
    pub head_dim: usize,
}

impl Frames<'_> {
    /// The model width, `heads * head_dim`.
    fn d(self) -> usize {
        self.heads * self.head_dim
    }

    /// The rows of every frame.
    fn rows(self) -> usize {
        self.bounds.last().copied().unwrap_or(0)
    }

    /// Each frame's rows, as ranges.
    fn ranges(self) -> impl Iterator<Item = std::ops::Range<usize>> {
        self.bounds.windows(2).map(|w| w[0]..w[1])
    }
}

/// Attention over each frame's positions: `qkv` holds `frames * t` rows
/// of `3 d` values (`[q | k | v]`), `out` gets `frames * t` rows of `d`
/// (the heads side by side); scores are multiplied by `scale` before the
/// softmax. On the fastest kernels this CPU runs.
pub(crate) fn tower_attention(shape: TowerShape, qkv: &[f32], scale: f32, out: &mut [f32]) {
    tower_attention_on(Path::best(), shape, qkv, scale, out);
}

/// [`tower_attention`] on the kernels of `path` (which the CPU must
/// support), so that tests reach every path: [`frames_attention_on`] on
/// frames of `t` rows each.
pub(crate) fn tower_attention_on(
    path: Path,
    shape: TowerShape,
    qkv: &[f32],
    scale: f32,
    out: &mut [f32],
) {
    let bounds: Vec<usize> = (0..=shape.frames).map(|f| f * shape.t).collect();
    let frames = Frames {
        bounds: &bounds,
        heads: shape.heads,
        head_dim: shape.head_dim,
    };
    frames_attention_on(path, frames, qkv, scale, out);
}

/// Attention over each frame's own positions, frames of any lengths
/// packed back to back ([`Frames`]): `qkv` holds the rows of every frame,
/// `3 d` values each (`[q | k | v]`), `out` gets as many rows of `d`
/// (the heads side by side); scores are multiplied by `scale` before the
/// softmax. No position sees another frame's, so no mask is needed. On
/// the fastest kernels this CPU runs.
pub(crate) fn frames_attention(frames: Frames<'_>, qkv: &[f32], scale: f32, out: &mut [f32]) {
    frames_attention_on(Path::best(), frames, qkv, scale, out);
}

/// [`frames_attention`] on the kernels of `path` (which the CPU must
/// support). A frame's values depend on its own rows only: the same
/// bits wherever it sits and whatever frames are beside it.
pub(crate) fn frames_attention_on(
    path: Path,
    frames: Frames<'_>,
    qkv: &[f32],
    scale: f32,
    out: &mut [f32],
) {
    let (d, heads, hd, rows) = (frames.d(), frames.heads, frames.head_dim, frames.rows());
    assert!(
        frames.bounds.first().is_none_or(|b| *b == 0)
            && frames.bounds.windows(2).all(|w| w[0] <= w[1]),
        "attention: frame bounds must start at 0 and ascend"
    );
    assert!(qkv.len() >= rows * 3 * d && out.len() >= rows * d);
    if rows == 0 || d == 0 {
        return;
    }
    let longest = frames.ranges().map(|r| r.len()).max().unwrap_or(0);
    // Keys transposed: frame f of `t` rows from row `r0`, head h at
    // `r0 * d + h * hd * t`.
    let mut keys_t = vec![0f32; rows * d];
    split_frames(frames, &mut keys_t, d)
        .into_par_iter()
        .flat_map(|(range, frame_kt)| {
            let t = range.len();
            frame_kt
                .par_chunks_mut(hd * t)
                .enumerate()
                .map(move |(h, kt)| (range.clone(), h, kt))
        })
        .for_each(|(range, h, kt)| {
            let t = range.len();
            let frame = &qkv[range.start * 3 * d..range.end * 3 * d];
            for (j, row) in frame.chunks_exact(3 * d).enumerate() {
                let key = &row[d + h * hd..d + (h + 1) * hd];
                for (c, v) in key.iter().enumerate() {
                    kt[c * t + j] = *v;
                }
            }
        });
    split_frames(frames, &mut out[..rows * d], d)
        .into_par_iter()
        .flat_map(|(range, frame_out)| {
            frame_out
                .par_chunks_mut(QUERY_BLOCK * d)
                .enumerate()
                .map(move |(b, rows)| (range.clone(), b, rows))
        })
        .for_each_init(
            || vec![0f32; QUERY_BLOCK * longest],
            |scores, (range, b, rows)| {
                let t = range.len();
                let m = rows.len() / d;
                let r0 = b * QUERY_BLOCK;
                let frame = &qkv[range.start * 3 * d..range.end * 3 * d];
                let frame_kt = &keys_t[range.start * d..range.end * d];
                let scores = &mut scores[..m * t];
                for h in 0..heads {
                    let q = &frame[r0 * 3 * d + h * hd..];
                    let kt = &frame_kt[h * hd * t..(h + 1) * hd * t];
                    let scores_of = Gemm {
                        m,
                        n: t,
                        k: hd,
                        lda: 3 * d,
                        ldb: t,
                        ldc: t,
                    };
                    gemm_on(path, scores_of, q, kt, scores);
                    for probs in scores.chunks_exact_mut(t) {
                        softmax_scaled(path, probs, scale);
                    }
                    let v = &frame[2 * d + h * hd..];
                    let sum_of = Gemm {
                        m,
                        n: hd,
                        k: t,
                        lda: t,
                        ldb: 3 * d,
                        ldc: d,
                    };
                    gemm_on(path, sum_of, scores, v, &mut rows[h * hd..]);
                }
            },
        );
}

/// `buf` (`width` values a row) cut into each non-empty frame's rows,
/// with the frame's row range.
fn split_frames<'b>(
    frames: Frames<'_>,
    mut buf: &'b mut [f32],
    width: usize,
) -> Vec<(std::ops::Range<usize>, &'b mut [f32])> {
    let mut parts = Vec::with_capacity(frames.bounds.len());
    for range in frames.ranges() {
        let (frame, rest) = std::mem::take(&mut buf).split_at_mut(range.len() * width);
        buf = rest;
        if !range.is_empty() {
            parts.push((range, frame));
        }
    }
    parts
}

/// The shape of `C = A B`: `A` `(m, k)` with rows `lda` apart, `B`
/// `(k, n)` with rows `ldb` apart, `C` `(m, n)` with rows `ldc` apart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
}

impl Gemm {
    /// Whether `a`, `b` and `c` hold the matrices.
    fn fits(self, a: &[f32], b: &[f32], c: &[f32]) -> bool {
        let need = |rows: usize, cols: usize, ld: usize| match rows {
            0 => 0,
            r => (r - 1) * ld + cols,
        };
        (self.m == 0 || self.n == 0 || self.k == 0)
            || (a.len() >= need(self.m, self.k, self.lda)
                && b.len() >= need(self.k, self.n, self.ldb)
                && c.len() >= need(self.m, self.n, self.ldc)
                && self.k <= self.lda
                && self.n <= self.ldb
                && self.n <= self.ldc)
    }
}

/// `C = A B` on the kernels of `path` (C overwritten; element `(i, j)`
/// is `fma(a[i][k-1], b[k-1][j], ... fma(a[i][0], b[0][j], 0))`, the
/// same bits on every path).
pub(crate) fn gemm_on(path: Path, g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(g.fits(a, b, c), "attention product: buffers too short");
    if g.m == 0 || g.n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    match path {
        // SAFETY: `Path::Avx512` is only taken when the CPU supports
        // AVX-512F; the buffers hold the matrices (checked above).
        Path::Avx512 => return unsafe { avx512::gemm_avx512(g, a, b, c) },
        // SAFETY: `Path::Avx2` is only taken when the CPU supports AVX2
        // and FMA; the buffers hold the matrices (checked above).
        Path::Avx2 => return unsafe { avx2::gemm_avx2(g, a, b, c) },
        Path::Portable => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = path;
    gemm_portable(g, a, b, c, 0..g.n);
}

/// Columns `cols` of `C = A B`, one value at a time in the vector
/// kernels' order.
fn gemm_portable(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32], cols: std::ops::Range<usize>) {
    for i in 0..g.m {
        let a_row = &a[i * g.lda..i * g.lda + g.k];
        for j in cols.clone() {
            let mut acc = 0f32;
            for (kk, av) in a_row.iter().enumerate() {
                acc = av.mul_add(b[kk * g.ldb + j], acc);
            }
            c[i * g.ldc + j] = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in [-1, 1) from a small linear congruential generator.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Attention of one head of one frame, in f64, the plain way.
    fn reference(shape: TowerShape, qkv: &[f32], scale: f32) -> Vec<f32> {
        let TowerShape {
            frames,
            t,
            heads,
            head_dim: hd,
        } = shape;
        let d = heads * hd;
        let mut out = vec![0f32; frames * t * d];
        for f in 0..frames {
            for h in 0..heads {
                let at = |r: usize, part: usize, c: usize| {
                    f64::from(qkv[(f * t + r) * 3 * d + part * d + h * hd + c])
                };
                for i in 0..t {
                    let s: Vec<f64> = (0..t)
                        .map(|j| {
                            (0..hd).map(|c| at(i, 0, c) * at(j, 1, c)).sum::<f64>()
                                * f64::from(scale)
                        })
                        .collect();
                    let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = s.iter().map(|v| (v - max).exp()).collect();
                    let total: f64 = e.iter().sum();
                    for c in 0..hd {
                        let v: f64 = (0..t).map(|j| e[j] / total * at(j, 2, c)).sum();
                        out[(f * t + i) * d + h * hd + c] = v as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_path_gives_the_bits_of_the_portable_product() {
        for (m, n, k) in [(1, 1, 1), (5, 37, 9), (9, 64, 70), (33, 21, 16), (4, 48, 3)] {
            let g = Gemm {
                m,
                n,
                k,
                lda: k + 3,
                ldb: n + 5,
                ldc: n + 2,
            };
            let a = values(m * g.lda, 1);
            let b = values(k * g.ldb, 2);
            let mut want = vec![7f32; m * g.ldc];
            gemm_portable(g, &a, &b, &mut want, 0..n);
            for path in Path::available() {
                let mut got = vec![7f32; m * g.ldc];
                gemm_on(path, g, &a, &b, &mut got);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{path:?} {m}x{n}x{k}"
                );
            }
        }
    }

    #[test]
    fn attention_matches_the_plain_computation_and_every_path_gives_the_same_bits() {
        for shape in [
            TowerShape {
                frames: 2,
                t: 37,
                heads: 3,
                head_dim: 8,
            },
            TowerShape {
                frames: 1,
                t: 70,
                heads: 2,
                head_dim: 20,
            },
        ] {
            let d = shape.heads * shape.head_dim;
            let qkv = values(shape.frames * shape.t * 3 * d, 3);
            let scale = 1.0 / (shape.head_dim as f32).sqrt();
            let want = reference(shape, &qkv, scale);
            let mut first: Option<Vec<f32>> = None;
            for path in Path::available() {
                let mut got = vec![0f32; shape.frames * shape.t * d];
                tower_attention_on(path, shape, &qkv, scale, &mut got);
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(g, w)| (g - w).abs())
                    .fold(0f32, f32::max);
                assert!(worst < 1e-5, "{path:?}: off by {worst}");
                match &first {
                    None => first = Some(got),
                    Some(f) => assert_eq!(
                        f.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{path:?}"
                    ),
                }
            }
        }
    }

    /// `qkv` rows of frames of `lengths` (values from `seed`) and their
    /// bounds.
    fn packed(lengths: &[usize], d: usize, seed: u64) -> (Vec<usize>, Vec<f32>) {
        let mut bounds = vec![0usize];
        for t in lengths {
            bounds.push(bounds[bounds.len() - 1] + t);
        }
        let rows = bounds[lengths.len()];
        (bounds, values(rows * 3 * d, seed))
    }

    #[test]
    fn frames_of_their_own_lengths_give_the_bits_of_each_frame_alone_on_every_path() {
        let (heads, head_dim) = (3usize, 8usize);
        let d = heads * head_dim;
        let scale = 1.0 / (head_dim as f32).sqrt();
        // lengths around the query block (32): shorter, longer, one row,
        // an empty frame
        let lengths = [37usize, 1, 0, 64, 5, 33];
        let (bounds, qkv) = packed(&lengths, d, 11);
        let rows = bounds[lengths.len()];
        let mut first: Option<Vec<u32>> = None;
        for path in Path::available() {
            let frames = Frames {
                bounds: &bounds,
                heads,
                head_dim,
            };
            let mut got = vec![f32::NAN; rows * d];
            frames_attention_on(path, frames, &qkv, scale, &mut got);
            for (f, t) in lengths.iter().enumerate() {
                let (r0, r1) = (bounds[f], bounds[f + 1]);
                let alone = TowerShape {
                    frames: 1,
                    t: *t,
                    heads,
                    head_dim,
                };
                let mut want = vec![0f32; t * d];
                tower_attention_on(path, alone, &qkv[r0 * 3 * d..r1 * 3 * d], scale, &mut want);
                assert_eq!(
                    got[r0 * d..r1 * d]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{path:?} frame {f} of {t} rows"
                );
                let plain = reference(alone, &qkv[r0 * 3 * d..r1 * 3 * d], scale);
                let worst = want
                    .iter()
                    .zip(&plain)
                    .map(|(g, w)| (g - w).abs())
                    .fold(0f32, f32::max);
                assert!(worst < 1e-5, "{path:?} frame {f}: off by {worst}");
            }
            let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            match &first {
                None => first = Some(bits),
                Some(f) => assert_eq!(f, &bits, "{path:?}"),
            }
        }
    }

    #[test]
    fn frames_of_one_length_give_the_towers_bits() {
        let shape = TowerShape {
            frames: 3,
            t: 19,
            heads: 2,
            head_dim: 16,
        };
        let d = shape.heads * shape.head_dim;
        let (bounds, qkv) = packed(&[19, 19, 19], d, 5);
        for path in Path::available() {
            let mut tower = vec![0f32; 3 * 19 * d];
            tower_attention_on(path, shape, &qkv, 0.25, &mut tower);
            let frames = Frames {
                bounds: &bounds,
                heads: shape.heads,
                head_dim: shape.head_dim,
            };
            let mut packed = vec![0f32; 3 * 19 * d];
            frames_attention_on(path, frames, &qkv, 0.25, &mut packed);
            assert_eq!(
                tower.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                packed.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{path:?}"
            );
        }
    }
}
