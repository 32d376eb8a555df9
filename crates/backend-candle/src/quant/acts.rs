//! Activation rows quantized once per product, as llama.cpp does: blocks
//! of 32 values (Q8_0, for Q8_0, Q4_0 and Q5_0 weights) or of 256 (Q8_K,
//! with the sums of each 16 values, for the K-quants), and the tiles of
//! them a kernel takes.

use rayon::prelude::*;

use super::QK_K;
use super::tile::{ActTile, quantize_row_body};
use crate::cpu::Features;

/// Activation rows quantized for one product: blocks of 32 (Q8_0) or 256
/// (Q8_K, with the sums of each 16 values) of i8, each with an f32 scale.
pub(crate) struct Acts {
    /// Values per row.
    pub(super) k: usize,
    /// Values per block.
    pub(super) block: usize,
    /// `m * k` values.
    pub(super) qs: Vec<i8>,
    /// One scale per block, row by row.
    pub(super) d: Vec<f32>,
    /// The sum of each 16 values (256-value blocks) or of each block
    /// (32-value blocks), row by row.
    pub(super) bsums: Vec<i16>,
}

/// Values quantized a rayon task at a time.
const QUANTIZE_CHUNK: usize = 64 * 1024;

impl Acts {
    /// The `m` rows of `x` (`k` values each) in blocks of `block` values:
    /// scale `max |x| / 127` (rounded to f16 in 32-value blocks), values
    /// `x * (127 / max |x|)` rounded to the nearest, ties to even (all zero
    /// for an all-zero block).
    pub(crate) fn quantize(x: &[f32], m: usize, k: usize, block: usize) -> Acts {
        let nb = k / block;
        let mut acts = Acts {
            k,
            block,
            qs: vec![0; m * k],
            d: vec![0.0; m * nb],
            bsums: vec![0; m * k / sum_len(block)],
        };
        if k == 0 {
            return acts;
        }
        let x = &x[..m * k];
        let rows_per_task = (QUANTIZE_CHUNK / k).max(1);
        let rows = x
            .par_chunks(k)
            .zip(acts.qs.par_chunks_mut(k))
            .zip(acts.d.par_chunks_mut(nb));
        rows.zip(acts.bsums.par_chunks_mut(k / sum_len(block)))
            .with_min_len(rows_per_task)
            .for_each(|(((x, qs), d), bsums)| quantize_row(x, qs, d, bsums, sum_len(block), block));
        acts
    }

    /// Rows `first..first + rows`.
    pub(super) fn tile(&self, first: usize, rows: usize) -> ActTile<'_> {
        let nb = self.k / self.block;
        let (k, sums) = (self.k, self.k / sum_len(self.block));
        ActTile {
            qs: &self.qs[first * k..(first + rows) * k],
            d: &self.d[first * nb..(first + rows) * nb],
            bsums: &self.bsums[first * sums..(first + rows) * sums],
            rows,
            k,
        }
    }
}

/// One input's `m` activation rows of `k` values, quantized at most once
/// per activation format (blocks of 32 for Q8_0, Q4_0 and Q5_0 weights,
/// of 256 for the K-quants) however many weights it meets: the parts of
/// a projection of mixed types (a Q4_K_M model's q, k and v: Q4_K, Q4_K
/// and Q6_K) share one quantization. Each format's rows are the bits
/// [`Acts::quantize`] gives, so a product gives the bits it gets alone.
pub(crate) struct QuantInput<'a> {
    /// The rows, as given.
    x: &'a [f32],
    /// Rows.
    m: usize,
    /// Values per row.
    k: usize,
    /// The rows in 32-value blocks, once quantized.
    q8_0: Option<Acts>,
    /// The rows in 256-value blocks, once quantized.
    q8_k: Option<Acts>,
}

impl<'a> QuantInput<'a> {
    /// The `m` rows of `k` values at the start of `x`, not yet quantized.
    pub(crate) fn new(x: &'a [f32], m: usize, k: usize) -> Self {
        QuantInput {
            x,
            m,
            k,
            q8_0: None,
            q8_k: None,
        }
    }

    /// The rows as given.
    pub(crate) fn values(&self) -> &'a [f32] {
        self.x
    }

    /// Rows `m`.
    pub(crate) fn rows(&self) -> usize {
        self.m
    }

    /// Values per row `k`.
    pub(crate) fn cols(&self) -> usize {
        self.k
    }

    /// The rows in blocks of `block` values (32 or [`QK_K`]), quantized
    /// on the first call for that size.
    pub(crate) fn acts(&mut self, block: usize) -> &Acts {
        debug_assert!(
            block == 32 || block == QK_K,
            "no activation format of {block}"
        );
        let (x, m, k) = (self.x, self.m, self.k);
        let slot = if block == QK_K {
            &mut self.q8_k
        } else {
            &mut self.q8_0
        };
        slot.get_or_insert_with(|| Acts::quantize(x, m, k, block))
    }

    /// How many times the rows were quantized: once per activation
    /// format used, the only way a format's rows come to be held.
    #[cfg(test)]
    pub(crate) fn quantizations(&self) -> usize {
        usize::from(self.q8_0.is_some()) + usize::from(self.q8_k.is_some())
    }
}

/// Values per activation sum: 16 in 256-value blocks, the block in
/// 32-value ones.
fn sum_len(block: usize) -> usize {
    if block == QK_K { 16 } else { block }
}

/// One activation row `x` into `qs`, one scale per block of `block`
/// values into `d`, and the sum of each `sum_len` values into `bsums`;
/// compiled for AVX2 where the CPU has it (the same bits: every step is
/// exact or rounded once, and a maximum is one in any order).
fn quantize_row(
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    bsums: &mut [i16],
    sum_len: usize,
    block: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if Features::get().avx2 {
        // SAFETY: the CPU runs AVX2 and FMA (just checked).
        unsafe { super::avx2::quantize_row_avx2(x, qs, d, bsums, sum_len, block) };
        return;
    }
    quantize_row_body(x, qs, d, bsums, sum_len, block);
}
