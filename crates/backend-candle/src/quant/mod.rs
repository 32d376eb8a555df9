//! Matrix products with weights kept in ggml's block formats (GGUF
//! tensors): Q8_0, Q4_0, Q5_0, Q4_K, Q5_K and Q6_K, on the CPU.
//!
//! A [`QuantWeight`] holds an `(n, k)` weight as the bytes of its GGUF
//! tensor, at the size it is stored: nothing is widened. Q8_0, Q5_0,
//! Q4_K and Q6_K weights are repacked when made: each group of
//! 16 rows (`repack::GROUP`) becomes, block by block, the bytes of its
//! 16 row blocks reordered so that one 64-byte load holds four values of
//! each row, a row per 32-bit lane (the layouts are in `repack.rs`); rows
//! past the last whole group stay in ggml's layout and a product packs
//! them into a group of their own. Q4_0 and Q5_K weights keep ggml's row
//! layout. [`quant_matmul`] multiplies `m` f32 activation rows by a
//! weight, as llama.cpp does:
//!
//! 1. each activation row is quantized once per call, in blocks of 32 for
//!    Q8_0, Q4_0 and Q5_0 weights (one scale `max |x| / 127`, rounded to
//!    f16 as ggml's `block_q8_0` keeps it, 32 i8 and their sum) and of 256
//!    for the K-quants (the scale in f32, as `block_q8_K` keeps it, with
//!    the sums of each 16 values, for the K-quants' minimums and offsets);
//! 2. each weight block meets each activation block in integer
//!    arithmetic, exact. For the repacked types one instruction serves 16
//!    weight rows: with AVX-512 VNNI, `vpdpbusd` of four weight bytes of
//!    each row (unsigned: Q8_0's values `^ 0x80`, Q5_0's and Q6_K's with
//!    their offsets, the offsets' products taken off through the
//!    activations' sums) by four activation bytes broadcast, each
//!    sub-block's sum times its scale by `vpmulld`, Q4_K's minimums by
//!    `vpdpwssd`; with AVX2, the same lanes as two halves of eight,
//!    `vpmaddubsw` then `vpmaddwd`;
//! 3. those integer sums are scaled and added up in f32, one f32 per
//!    output, block by block (below), so a group's 16 outputs are one
//!    vector of lanes: no horizontal sum.
//!
//! Work is split over rayon's threads by groups of weight rows (rows for
//! Q4_0 and Q5_K) and, for many activation rows, by bands of them;
//! within a task a group-block is read once per tile of up to
//! [`TILE_ROWS`] activation rows and serves all of them from registers,
//! and a run of groups small enough for the L2 cache is gone through by
//! every tile of the band before the next run.
//!
//! ## The order of the sums
//!
//! - Q8_0 and Q5_0: one f32 per output, starting at 0; block by block,
//!   plus its scale (`d_w * d_x`, in f32) times the exact integer sum of
//!   the block (`add_block`).
//! - Q4_0 (not repacked): 16 f32 lanes per output. Block `b` adds to lanes
//!   `8 (b % 2) + l` (`l` < 8) its scale (`d_w * d_x`, in f32) times the
//!   exact sum of its values `4 l..4 l + 4`; the lanes are then added
//!   `i + 8`, `i + 4`, `i + 2`, `i + 1` into lane 0 (`reduce16`).
//! - The K-quants: one f32 per output; block by block, the exact integer
//!   sum of the block (scales and offsets applied in integers) times
//!   `d_w * d_x`, then, for Q4_K and Q5_K, minus the exact sum of the
//!   minimums times `dmin_w * d_x` (`add_k`, `add_block`).
//!
//! Every kernel keeps that order (the portable kernels of the repacked
//! types unpack each row's block and add it in the same order; the
//! vector kernels add lane by lane with separate multiplies and adds, no
//! fused multiply-add), so every path gives the same bits, and a row
//! gives the same bits alone as in any batch.
//!
//! ## Guarantees, and the tests that hold them
//!
//! - [`QuantWeight::dequantize_row`] gives the bits of candle's
//!   `to_float` for every type:
//!   `dequantized_rows_give_the_bits_of_candles_to_float_for_every_type`.
//! - A product is the f64 product of the dequantized weight and the
//!   quantized-dequantized activations within rounding, and the product
//!   with the activations as given within the error of quantizing them, for
//!   every type, path and row count, leaving the output's other columns
//!   alone (`ldo > n`):
//!   `every_type_and_path_matches_the_product_of_dequantized_values`.
//! - Every path gives the portable path's bits:
//!   `every_path_gives_the_bits_of_the_portable_path`.
//! - A row alone gives the bits it gets in a batch of 33, on one thread
//!   and on many: `a_row_alone_gives_the_bits_it_gets_in_a_batch`.
//! - A weight of the wrong byte length or a row length that is not whole
//!   blocks is refused:
//!   `a_weight_of_the_wrong_size_is_refused`.
//!
//! ## Against candle's kernels
//!
//! The example `quant_bench` times, on a 2048 x 2048 weight made by
//! candle's quantizer, [`quant_matmul`] against candle 0.11's
//! `QMatMul::forward` (its whole product; it repacks Q8_0, Q4_K and Q6_K
//! weights into tiles of 16 rows for `vpdpbusd` on x86 with AVX-512
//! VNNI, and runs on its own spinning thread pool, so it is timed in a
//! process of its own; ours runs inside a rayon pool's `install`, as the
//! engine calls it). Microseconds, the median over six processes of
//! medians of 100 products, on a 2-core AMD EPYC with AVX-512 VNNI shared
//! with other builds (loads 1.5-2.5; one process's median moved by up to
//! 2x). "before" is these kernels before the weights were repacked (a
//! per-row kernel with a horizontal integer sum and a scalar f32 step per
//! weight block), timed the same way:
//!
//! ```text
//! quant_bench types=Q8_0,Q4_K,Q6_K,Q5_0 reps=100 paths=avx2 vec_dot=false qmatmul=false
//! quant_bench types=Q8_0,Q4_K,Q6_K,Q5_0 reps=100 paths=none ours=false vec_dot=false
//!
//! type  m    before  ours avx512-vnni  ours avx2  candle QMatMul
//! Q8_0  1       112          34             48            48
//! Q8_0  8       567         154            348           156
//! Q8_0  32     2456         509           1181           575
//! Q4_K  1       110          24             43            41
//! Q4_K  8       930          97            233           152
//! Q4_K  32     3311         390            887           576
//! Q6_K  1        95          43             72            95
//! Q6_K  8       629         111            303           197
//! Q6_K  32     2450         441           1174           774
//! Q5_0  1       199          28             51          1566
//! Q5_0  8       678         111            230         11906
//! Q5_0  32     2756         476            940         49307
//! ```
//!
//! (Timed from outside the pool, as the bench did before, "before" was
//! 232/468/1490 us for Q8_0 at 1/8/32 rows, 88/430/1516 for Q4_K,
//! 153/380/1456 for Q6_K, and ours 37/135/451, 46/95/358, 47/120/391.)
//!
//! At 128 and 512 rows (prefill; from outside the pool, two processes
//! each): Q8_0 1880-3100 and 5800-6600 us against candle's 1880-2000 and
//! 8500-9300 (before: 5800-7600 and 22600); Q4_K 1190-1250 and 4500-5000
//! against 1660-1810 and 6600-6800 (before: 5800-6100 and 25000-29900);
//! Q6_K 1220-2360 and 4700-4900 against 2100-2600 and 8500-10000
//! (before: 5600-5900 and 22300-27200).
//!
//! So the repacked kernels are 2.5-9x faster than before and as fast as
//! candle's repacked `QMatMul` or faster (Q8_0 level with it, Q4_K and
//! Q6_K 1.5-2x faster at 8 and 32 rows), on rayon's threads and the
//! engine's thread count. The AVX2 kernels (no `vpdpbusd`: two
//! instructions and an add where it takes one) run at about half the
//! AVX-512 speed on this CPU. Q4_0 and Q5_K are not repacked and keep the
//! row kernels (numbers of the earlier table: Q4_0 90/379/1384 us at
//! 1/8/32 rows, 4-6x faster than candle's; Q5_K 102/425/1565 on the
//! AVX2 kernel, which [`quant_matmul`] runs for Q5_K on AVX-512 CPUs
//! too, the AVX-512 one having been slower at 8 and 32 rows).

use crate::cpu::Features;
use std::ops::Range;

use rayon::prelude::*;

pub(crate) mod portable;

pub(crate) mod repack;

use repack::{GROUP, group_block_bytes, pack_group, repacked, unpack_block};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

/// Values per K-quant block.
pub(crate) const QK_K: usize = 256;

/// Bytes per Q8_0 block: an f16 scale, 32 i8.
pub(crate) const Q8_0_BYTES: usize = 34;
/// Bytes per Q4_0 block: an f16 scale, 16 bytes of nibbles.
pub(crate) const Q4_0_BYTES: usize = 18;
/// Bytes per Q5_0 block: an f16 scale, 4 bytes of fifth bits (bit `j`
/// of their little-endian u32 for value `j`), 16 bytes of nibbles.
pub(crate) const Q5_0_BYTES: usize = 22;
/// Bytes per Q4_K block: f16 `d` and `dmin`, 12 bytes of 6-bit scales and
/// minimums, 128 bytes of nibbles.
pub(crate) const Q4K_BYTES: usize = 144;
/// Bytes per Q5_K block: as Q4_K, with 32 bytes of fifth bits before the
/// nibbles.
pub(crate) const Q5K_BYTES: usize = 176;
/// Bytes per Q6_K block: 128 bytes of low nibbles, 64 of high bit pairs,
/// 16 i8 scales, an f16 `d`.
pub(crate) const Q6K_BYTES: usize = 210;

/// The most activation rows one kernel call takes (a tile).
pub const TILE_ROWS: usize = 8;

/// Bytes of weight rows a tile of activation rows goes through before the
/// next tile of the band passes over the same rows (kept in the L2 cache
/// meanwhile).
const BLOCK_BYTES: usize = 256 * 1024;

/// Up to this many tiles of activation rows (decoding steps), every task
/// takes them all over its run of weight rows.
const SMALL_GROUPS: usize = 4;

/// With more tiles than [`SMALL_GROUPS`] (a prefill chunk), a task takes
/// one run of weight rows ([`BLOCK_BYTES`]) for a band of this many tiles.
const BAND_GROUPS: usize = 4;

/// A ggml block format of a weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum QuantType {
    /// 32 values: an f16 scale and 4-bit values offset by 8.
    Q4_0,
    /// 32 values: an f16 scale and 5-bit values offset by 16.
    Q5_0,
    /// 32 values: an f16 scale and i8 values.
    Q8_0,
    /// 256 values: f16 scale and minimum, eight sub-blocks of 32 with
    /// 6-bit scales and minimums, 4-bit values.
    Q4K,
    /// As Q4_K with 5-bit values.
    Q5K,
    /// 256 values: an f16 scale, sixteen i8 scales of 16 values, 6-bit
    /// values offset by 32.
    Q6K,
}

impl QuantType {
    /// Every type, for tests and benches.
    pub const ALL: [QuantType; 6] = [
        QuantType::Q8_0,
        QuantType::Q4_0,
        QuantType::Q5_0,
        QuantType::Q4K,
        QuantType::Q5K,
        QuantType::Q6K,
    ];

    /// The type of a candle (GGUF) dtype, when it is one of these.
    pub fn from_ggml(dtype: candle_core::quantized::GgmlDType) -> Option<QuantType> {
        use candle_core::quantized::GgmlDType;
        match dtype {
            GgmlDType::Q4_0 => Some(QuantType::Q4_0),
            GgmlDType::Q5_0 => Some(QuantType::Q5_0),
            GgmlDType::Q8_0 => Some(QuantType::Q8_0),
            GgmlDType::Q4K => Some(QuantType::Q4K),
            GgmlDType::Q5K => Some(QuantType::Q5K),
            GgmlDType::Q6K => Some(QuantType::Q6K),
            _ => None,
        }
    }

    /// candle's (ggml's) name for the type.
    pub fn ggml(self) -> candle_core::quantized::GgmlDType {
        use candle_core::quantized::GgmlDType;
        match self {
            QuantType::Q4_0 => GgmlDType::Q4_0,
            QuantType::Q5_0 => GgmlDType::Q5_0,
            QuantType::Q8_0 => GgmlDType::Q8_0,
            QuantType::Q4K => GgmlDType::Q4K,
            QuantType::Q5K => GgmlDType::Q5K,
            QuantType::Q6K => GgmlDType::Q6K,
        }
    }

    /// Values per block: 32 or 256.
    pub fn block_values(self) -> usize {
        match self {
            QuantType::Q4_0 | QuantType::Q5_0 | QuantType::Q8_0 => 32,
            QuantType::Q4K | QuantType::Q5K | QuantType::Q6K => QK_K,
        }
    }

    /// Bytes per block, as ggml lays it out.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantType::Q4_0 => Q4_0_BYTES,
            QuantType::Q5_0 => Q5_0_BYTES,
            QuantType::Q8_0 => Q8_0_BYTES,
            QuantType::Q4K => Q4K_BYTES,
            QuantType::Q5K => Q5K_BYTES,
            QuantType::Q6K => Q6K_BYTES,
        }
    }

    /// ggml's name: `Q4_0`, `Q5_0`, `Q8_0`, `Q4_K`, `Q5_K` or `Q6_K`.
    pub fn name(self) -> &'static str {
        match self {
            QuantType::Q4_0 => "Q4_0",
            QuantType::Q5_0 => "Q5_0",
            QuantType::Q8_0 => "Q8_0",
            QuantType::Q4K => "Q4_K",
            QuantType::Q5K => "Q5_K",
            QuantType::Q6K => "Q6_K",
        }
    }
}

impl std::fmt::Display for QuantType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a [`QuantWeight`] could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// The row length is not a whole number of blocks.
    #[error("{ty} rows of {k} values are not whole blocks of {block}")]
    NotWholeBlocks {
        /// The weight's type.
        ty: QuantType,
        /// The row length.
        k: usize,
        /// Values per block.
        block: usize,
    },
    /// The bytes are not those of the shape.
    #[error("a {ty} weight of {n} x {k} takes {want} bytes, not {got}")]
    WrongLength {
        /// The weight's type.
        ty: QuantType,
        /// Rows.
        n: usize,
        /// Values per row.
        k: usize,
        /// Bytes the shape takes.
        want: usize,
        /// Bytes given.
        got: usize,
    },
}

/// An `(n, k)` weight in a ggml block format, from the bytes of a GGUF
/// tensor whose ggml shape is `[k, n]` (row `j` is `k / block_values`
/// blocks, rows back to back), kept in memory of its own at that size:
/// as given (Q4_0, Q5_K) or reordered into groups of 16 rows (Q8_0,
/// Q5_0, Q4_K, Q6_K; see the module's docs).
#[derive(Clone)]
pub struct QuantWeight {
    ty: QuantType,
    n: usize,
    k: usize,
    bytes: Vec<u8>,
}

impl QuantWeight {
    /// The weight of type `ty`, `n` rows of `k` values, from its tensor's
    /// bytes (copied, and repacked for Q8_0, Q5_0, Q4_K and Q6_K).
    ///
    /// # Errors
    ///
    /// When `k` is not a multiple of the block or `bytes` is not `n * k /
    /// block_values * block_bytes` long.
    pub fn new(ty: QuantType, n: usize, k: usize, bytes: &[u8]) -> Result<QuantWeight, QuantError> {
        let block = ty.block_values();
        if !k.is_multiple_of(block) {
            return Err(QuantError::NotWholeBlocks { ty, k, block });
        }
        let want = n
            .checked_mul(k / block)
            .and_then(|blocks| blocks.checked_mul(ty.block_bytes()));
        if want != Some(bytes.len()) {
            return Err(QuantError::WrongLength {
                ty,
                n,
                k,
                want: want.unwrap_or(usize::MAX),
                got: bytes.len(),
            });
        }
        if !repacked(ty) {
            return Ok(QuantWeight {
                ty,
                n,
                k,
                bytes: bytes.to_vec(),
            });
        }
        let row_len = k / block * ty.block_bytes();
        let group_len = row_len * GROUP;
        let full = n / GROUP;
        let mut packed = vec![0u8; bytes.len()];
        let (groups, tail) = packed.split_at_mut(full * group_len);
        groups
            .par_chunks_mut(group_len.max(1))
            .enumerate()
            .for_each(|(g, out)| {
                let rows: Vec<&[u8]> = (0..GROUP)
                    .map(|r| &bytes[(g * GROUP + r) * row_len..][..row_len])
                    .collect();
                pack_group(ty, &rows, k / block, out);
            });
        tail.copy_from_slice(&bytes[full * group_len..]);
        Ok(QuantWeight {
            ty,
            n,
            k,
            bytes: packed,
        })
    }

    /// The block format.
    pub fn ty(&self) -> QuantType {
        self.ty
    }

    /// Rows `n` (outputs).
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Values per row `k` (inputs).
    pub fn cols(&self) -> usize {
        self.k
    }

    /// Bytes held: as many as the GGUF tensor's.
    pub fn stored_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Bytes of one row.
    fn row_bytes(&self) -> usize {
        self.k / self.ty.block_values() * self.ty.block_bytes()
    }

    /// Row `j`'s blocks (a weight not repacked, or a row past the
    /// groups).
    fn row(&self, j: usize) -> &[u8] {
        let len = self.row_bytes();
        &self.bytes[j * len..(j + 1) * len]
    }

    /// Whole groups of rows (repacked weights; none for the others).
    fn full_groups(&self) -> usize {
        if repacked(self.ty) { self.n / GROUP } else { 0 }
    }

    /// Group `g`'s group-blocks (`g < full_groups()`).
    fn group(&self, g: usize) -> &[u8] {
        let len = self.row_bytes() * GROUP;
        &self.bytes[g * len..(g + 1) * len]
    }

    /// Group `g` (the last, not whole) packed into `out`, zero rows added.
    fn pack_tail(&self, g: usize, out: &mut Vec<u8>) {
        let rows: Vec<&[u8]> = (g * GROUP..self.n).map(|j| self.row(j)).collect();
        out.resize(self.row_bytes() * GROUP, 0);
        pack_group(self.ty, &rows, self.k / self.ty.block_values(), out);
    }

    /// Row `j` dequantized to f32 into `out[..k]` (an embedding lookup),
    /// with the bits of ggml's (and candle's) dequantization.
    ///
    /// # Panics
    ///
    /// When `j >= rows()` or `out` is shorter than `k`.
    pub fn dequantize_row(&self, j: usize, out: &mut [f32]) {
        assert!(j < self.n, "row {j} of a weight of {} rows", self.n);
        let (ty, bytes) = (self.ty, self.ty.block_bytes());
        let values = ty.block_values();
        if j < self.full_groups() * GROUP {
            let mut block = [0u8; Q6K_BYTES];
            for (gb, out) in self
                .group(j / GROUP)
                .chunks_exact(group_block_bytes(ty))
                .zip(out[..self.k].chunks_exact_mut(values))
            {
                unpack_block(ty, gb, j % GROUP, &mut block);
                dequantize_block(ty, &block[..bytes], out);
            }
            return;
        }
        for (block, out) in self
            .row(j)
            .chunks_exact(bytes)
            .zip(out[..self.k].chunks_exact_mut(values))
        {
            dequantize_block(ty, block, out);
        }
    }
}

impl std::fmt::Debug for QuantWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantWeight")
            .field("ty", &self.ty)
            .field("rows", &self.n)
            .field("cols", &self.k)
            .finish_non_exhaustive()
    }
}

/// One block of `ty` into `out` (its values), in ggml's order of
/// operations.
fn dequantize_block(ty: QuantType, block: &[u8], out: &mut [f32]) {
    match ty {
        QuantType::Q8_0 => {
            let d = f16_at(block, 0);
            for (o, q) in out.iter_mut().zip(&block[2..34]) {
                *o = f32::from(*q as i8) * d;
            }
        }
        QuantType::Q4_0 => {
            let d = f16_at(block, 0);
            for (i, q) in block[2..18].iter().enumerate() {
                out[i] = f32::from((q & 0x0F) as i8 - 8) * d;
                out[i + 16] = f32::from((q >> 4) as i8 - 8) * d;
            }
        }
        QuantType::Q5_0 => {
            let d = f16_at(block, 0);
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            let fifth = |j: usize| (((qh >> j) & 1) << 4) as u8;
            for (i, q) in block[6..22].iter().enumerate() {
                out[i] = f32::from(((q & 0x0F) | fifth(i)) as i8 - 16) * d;
                out[i + 16] = f32::from(((q >> 4) | fifth(i + 16)) as i8 - 16) * d;
            }
        }
        QuantType::Q4K | QuantType::Q5K => {
            let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
            let (sc, mins) = k_scales(&block[4..16]);
            let (high, qs) = match ty {
                QuantType::Q5K => (Some(&block[16..48]), &block[48..176]),
                _ => (None, &block[16..144]),
            };
            for (s, out) in out.chunks_exact_mut(32).enumerate() {
                let scale = d * f32::from(sc[s]);
                let min = dmin * f32::from(mins[s]);
                for (i, o) in out.iter_mut().enumerate() {
                    let byte = qs[32 * (s / 2) + i];
                    let mut q = if s % 2 == 0 { byte & 0x0F } else { byte >> 4 };
                    if high.is_some_and(|h| h[i] & (1 << s) != 0) {
                        q += 16;
                    }
                    *o = scale * f32::from(q) - min;
                }
            }
        }
        QuantType::Q6K => {
            let d = f16_at(block, 208);
            let q = q6k_values(block);
            for (v, o) in out.iter_mut().enumerate() {
                let scale = d * f32::from(block[192 + v / 16] as i8);
                *o = scale * f32::from(q[v] as i8 - 32);
            }
        }
    }
}

/// The 256 unsigned 6-bit values of a Q6_K block (the offset of 32 not
/// removed).
pub(crate) fn q6k_values(block: &[u8]) -> [u8; QK_K] {
    let (ql, qh) = (&block[..128], &block[128..192]);
    std::array::from_fn(|v| {
        let (h, c, l) = (v / 128, (v % 128) / 32, v % 32);
        let low = ql[64 * h + 32 * (c % 2) + l];
        let low = if c < 2 { low & 0x0F } else { low >> 4 };
        let high = (qh[32 * h + l] >> (2 * c)) & 3;
        low | (high << 4)
    })
}

/// The f16 at `bytes[at..at + 2]` (little-endian) as f32.
#[inline(always)]
pub(crate) fn f16_at(bytes: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// The eight 6-bit scales and eight 6-bit minimums of a Q4_K or Q5_K
/// block from its 12 bytes: sub-blocks 0-3 in the low six bits of bytes
/// 0-3 (scales) and 4-7 (minimums); 4-7 in the nibbles of bytes 8-11
/// with their top two bits in the top bits of bytes 0-7.
#[inline(always)]
pub(crate) fn k_scales(packed: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mins = [0u8; 8];
    for s in 0..4 {
        sc[s] = packed[s] & 63;
        mins[s] = packed[s + 4] & 63;
        sc[s + 4] = (packed[s + 8] & 0x0F) | ((packed[s] >> 6) << 4);
        mins[s + 4] = (packed[s + 8] >> 4) | ((packed[s + 4] >> 6) << 4);
    }
    (sc, mins)
}

/// Adds one Q4_K or Q5_K block to an output: its exact value sum times
/// `d * yd`, less its exact minimum sum times `dmin * yd`.
#[inline(always)]
pub(crate) fn add_k(acc: f32, d: f32, dmin: f32, yd: f32, isum: i32, msum: i32) -> f32 {
    let acc = acc + (d * yd) * isum as f32;
    acc - (dmin * yd) * msum as f32
}

/// Adds one Q8_0, Q5_0 or Q6_K block to an output: its exact sum times
/// `d * yd`.
#[inline(always)]
pub(crate) fn add_block(acc: f32, d: f32, yd: f32, isum: i32) -> f32 {
    acc + (d * yd) * isum as f32
}

/// Adds one Q8_0, Q4_0 or Q5_0 block's eight lane sums to eight lanes, each
/// times `scale`: what `vmulps` then `vaddps` do.
#[inline(always)]
pub(crate) fn add_lanes(lanes: &mut [f32], scale: f32, sums: &[i32; 8]) {
    for (lane, sum) in lanes.iter_mut().zip(sums) {
        *lane += scale * *sum as f32;
    }
}

/// Sixteen lanes into one: `i + 8`, then `i + 4`, `i + 2`, `i + 1`.
#[inline(always)]
pub(crate) fn reduce16(lanes: &[f32; 16]) -> f32 {
    let s8: [f32; 8] = std::array::from_fn(|i| lanes[i] + lanes[i + 8]);
    let s4: [f32; 4] = std::array::from_fn(|i| s8[i] + s8[i + 4]);
    let s2: [f32; 2] = std::array::from_fn(|i| s4[i] + s4[i + 2]);
    s2[0] + s2[1]
}

/// Activation rows quantized for one product: blocks of 32 (Q8_0) or 256
/// (Q8_K, with the sums of each 16 values) of i8, each with an f32 scale.
pub(crate) struct Acts {
    /// Values per row.
    k: usize,
    /// Values per block.
    block: usize,
    /// `m * k` values.
    qs: Vec<i8>,
    /// One scale per block, row by row.
    d: Vec<f32>,
    /// The sum of each 16 values (256-value blocks) or of each block
    /// (32-value blocks), row by row.
    bsums: Vec<i16>,
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
    fn tile(&self, first: usize, rows: usize) -> ActTile<'_> {
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
        unsafe { quantize_row_avx2(x, qs, d, bsums, sum_len, block) };
        return;
    }
    quantize_row_body(x, qs, d, bsums, sum_len, block);
}

/// [`quantize_row`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn quantize_row_avx2(
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    bsums: &mut [i16],
    sum_len: usize,
    block: usize,
) {
    quantize_row_body(x, qs, d, bsums, sum_len, block);
}

/// [`quantize_row`]'s steps: the maximum over 16 lanes, each value
/// times `127 / max` rounded to the nearest, ties to even.
#[inline(always)]
fn quantize_row_body(
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    bsums: &mut [i16],
    sum_len: usize,
    block: usize,
) {
    for (b, (x, qs)) in x
        .chunks_exact(block)
        .zip(qs.chunks_exact_mut(block))
        .enumerate()
    {
        let mut lanes = [0f32; 16];
        for x in x.chunks_exact(16) {
            for (lane, v) in lanes.iter_mut().zip(x) {
                *lane = lane.max(v.abs());
            }
        }
        let amax = lanes.iter().fold(0f32, |a, v| a.max(*v));
        let id = if amax == 0.0 { 0.0 } else { 127.0 / amax };
        // 32-value blocks keep their scale as ggml's `block_q8_0` does, in
        // f16 (llama.cpp's products then use that rounded scale); 256-value
        // ones in f32, as `block_q8_K` does.
        d[b] = if block == QK_K {
            amax / 127.0
        } else {
            half::f16::from_f32(amax / 127.0).to_f32()
        };
        for (q, v) in qs.iter_mut().zip(x) {
            *q = (v * id).round_ties_even() as i8;
        }
    }
    for (s, qs) in bsums.iter_mut().zip(qs.chunks_exact(sum_len)) {
        *s = qs.iter().map(|q| i16::from(*q)).sum();
    }
}

/// Up to [`TILE_ROWS`] quantized activation rows, for a kernel: `qs` is
/// `rows * k` values, `d` one scale per block, `bsums` 16 sums per
/// 256-value block or one per 32-value block.
#[derive(Clone, Copy)]
pub(crate) struct ActTile<'a> {
    pub(crate) qs: &'a [i8],
    pub(crate) d: &'a [f32],
    pub(crate) bsums: &'a [i16],
    pub(crate) rows: usize,
    pub(crate) k: usize,
}

/// The kernels a product runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// Plain Rust.
    Portable,
    /// AVX2 (256-bit integer multiply-adds).
    Avx2,
    /// AVX-512 BW with VNNI (512-bit, `vpdpbusd` / `vpdpwssd`).
    Avx512Vnni,
}

impl Path {
    /// The fastest path this CPU runs ([`Features`], detected once).
    pub(crate) fn best() -> Path {
        Path::best_on(Features::get())
    }

    /// The fastest path a CPU with `features` runs.
    fn best_on(features: Features) -> Path {
        Path::ALL
            .into_iter()
            .rev()
            .find(|p| p.runs_on(features))
            .unwrap_or(Path::Portable)
    }

    /// The path [`quant_matmul`] runs for `ty` where this one is the
    /// best: the AVX2 kernels for Q5_K on AVX-512 CPUs (faster there; see
    /// the module's numbers).
    pub(crate) fn for_type(self, ty: QuantType) -> Path {
        match (self, ty) {
            (Path::Avx512Vnni, QuantType::Q5K) => Path::Avx2,
            _ => self,
        }
    }

    /// Whether this CPU runs the path.
    pub(crate) fn runs_here(self) -> bool {
        self.runs_on(Features::get())
    }

    /// Whether a CPU with `features` runs the path: what its kernels'
    /// `#[target_feature]` attributes enable (AVX2, FMA and F16C; the
    /// AVX-512 one AVX-512F, BW and VNNI as well).
    fn runs_on(self, features: Features) -> bool {
        match self {
            Path::Portable => true,
            Path::Avx2 => features.avx2,
            Path::Avx512Vnni => features.avx2 && features.avx512_vnni,
        }
    }

    /// The path's name in bench output.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Path::Portable => "portable",
            Path::Avx2 => "avx2",
            Path::Avx512Vnni => "avx512-vnni",
        }
    }

    /// Every path, the portable one first and the fastest last.
    pub(crate) const ALL: [Path; 3] = [Path::Portable, Path::Avx2, Path::Avx512Vnni];
}

/// Which kernel path runs on this CPU for `ty`: `avx512-vnni`, `avx2` or
/// `portable`.
pub fn kernel_path(ty: QuantType) -> &'static str {
    Path::best().for_type(ty).name()
}

/// The kernel paths this CPU runs, by name (`portable`, then `avx2` and
/// `avx512-vnni` where the CPU has them), for benches that time each.
pub fn runnable_paths() -> Vec<&'static str> {
    Path::ALL
        .into_iter()
        .filter(|p| p.runs_here())
        .map(Path::name)
        .collect()
}

/// [`quant_matmul`] on the kernel path named `path` (one of
/// [`runnable_paths`]), for benches.
///
/// # Panics
///
/// As [`quant_matmul`]; also when this CPU does not run `path`.
pub fn quant_matmul_on(
    path: &str,
    x: &[f32],
    m: usize,
    w: &QuantWeight,
    out: &mut [f32],
    ldo: usize,
) {
    let path = Path::ALL
        .into_iter()
        .find(|p| p.name() == path)
        .unwrap_or_else(|| panic!("no kernel path {path}"));
    quant_matmul_with(path, x, m, w, out, ldo);
}

/// One weight row times a tile of activation rows on `path`.
#[inline]
fn row_times_tile(
    path: Path,
    ty: QuantType,
    w: &[u8],
    t: &ActTile<'_>,
    out: &mut [f32; TILE_ROWS],
) {
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `quant_matmul_with` runs a path only where the CPU runs
        // it (`Path::runs_here`: AVX2 and FMA).
        Path::Avx2 => unsafe { avx2::row_times_tile(ty, w, t, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above (AVX2, FMA, AVX-512F, BW and VNNI).
        Path::Avx512Vnni => unsafe { avx512::row_times_tile(ty, w, t, out) },
        _ => match ty {
            QuantType::Q4_0 => portable::q4_0_rows(w, t, out),
            QuantType::Q5K => portable::q5k_rows(w, t, out),
            _ => unreachable!("{ty} is repacked"),
        },
    }
}

/// A group of weight rows times a tile of activation rows: `[r][lane]`.
pub(crate) type GroupOut = [[f32; GROUP]; TILE_ROWS];

/// A group of [`GROUP`] repacked weight rows times a tile of activation
/// rows on `path`.
#[inline]
fn group_times_tile(path: Path, ty: QuantType, gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `quant_matmul_with` runs a path only where the CPU runs
        // it (`Path::runs_here`: AVX2, FMA and F16C).
        Path::Avx2 => unsafe { avx2::group_times_tile(ty, gb, t, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above (and AVX-512F, BW and VNNI).
        Path::Avx512Vnni => unsafe { avx512::group_times_tile(ty, gb, t, out) },
        _ => portable::group_rows(ty, gb, t, out),
    }
}

/// `out[i * ldo + j] = sum_c x[i * k + c] * W[j][c]` for `i < m`, `j <
/// n`, on rayon's threads, on the fastest kernels this CPU runs; the
/// other elements of `out` are left as they are (`ldo >= n` lets several
/// weights write side by side into one output row).
///
/// # Panics
///
/// When `x` is shorter than `m * k`, `ldo < n`, or `out` is shorter than
/// `(m - 1) * ldo + n`.
pub fn quant_matmul(x: &[f32], m: usize, w: &QuantWeight, out: &mut [f32], ldo: usize) {
    quant_matmul_with(Path::best().for_type(w.ty), x, m, w, out, ldo);
}

/// [`quant_matmul`] on `path`.
///
/// # Panics
///
/// As [`quant_matmul`]; also when this CPU does not run `path`.
pub(crate) fn quant_matmul_with(
    path: Path,
    x: &[f32],
    m: usize,
    w: &QuantWeight,
    out: &mut [f32],
    ldo: usize,
) {
    assert!(
        path.runs_here(),
        "this CPU does not run the {} kernels",
        path.name()
    );
    let (n, k) = (w.n, w.k);
    assert!(
        x.len() >= m * k,
        "{m} rows of {k} values in {} values",
        x.len()
    );
    assert!(ldo >= n, "output rows of {ldo} for {n} outputs");
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        out.len() >= (m - 1) * ldo + n,
        "{m} output rows of {ldo} in {} values",
        out.len()
    );
    if k == 0 {
        for i in 0..m {
            out[i * ldo..i * ldo + n].fill(0.0);
        }
        return;
    }
    let acts = Acts::quantize(x, m, k, w.ty.block_values());
    if repacked(w.ty) {
        grouped_matmul(path, &acts, m, w, out, ldo);
        return;
    }
    let ty = w.ty;
    let block = (BLOCK_BYTES / w.row_bytes().max(1)).max(1);
    let plan = TaskPlan::new(m, n, block);
    let out = SharedOut {
        ptr: out.as_mut_ptr(),
        len: out.len(),
        ldo,
    };
    (0..plan.tasks()).into_par_iter().for_each(|task| {
        let (rows, tiles) = plan.task(task);
        let mut tile_out = [0f32; TILE_ROWS];
        for run in plan.runs(rows) {
            for g in tiles.clone() {
                let (first, count) = plan.tile(g);
                let t = acts.tile(first, count);
                for j in run.clone() {
                    row_times_tile(path, ty, w.row(j), &t, &mut tile_out);
                    for (r, v) in tile_out[..count].iter().enumerate() {
                        // SAFETY: output column `j` of this band's rows is
                        // this task's own.
                        unsafe { out.set(first + r, j, *v) };
                    }
                }
            }
        }
    });
}

/// [`quant_matmul_with`] for a repacked weight: tasks over runs of
/// groups of weight rows (and bands of tiles of activation rows).
fn grouped_matmul(path: Path, acts: &Acts, m: usize, w: &QuantWeight, out: &mut [f32], ldo: usize) {
    let (n, ty) = (w.n, w.ty);
    let full = w.full_groups();
    let run = (BLOCK_BYTES / (w.row_bytes() * GROUP).max(1)).max(1);
    let plan = TaskPlan::new(m, n.div_ceil(GROUP), run);
    let out = SharedOut {
        ptr: out.as_mut_ptr(),
        len: out.len(),
        ldo,
    };
    (0..plan.tasks()).into_par_iter().for_each(|task| {
        let (owned, tiles) = plan.task(task);
        let mut tile_out = [[0f32; GROUP]; TILE_ROWS];
        let mut tail = Vec::new();
        if owned.end > full {
            w.pack_tail(full, &mut tail);
        }
        for run in plan.runs(owned) {
            for g in tiles.clone() {
                let (first, count) = plan.tile(g);
                let t = acts.tile(first, count);
                for gi in run.clone() {
                    let gb = if gi < full { w.group(gi) } else { &tail[..] };
                    group_times_tile(path, ty, gb, &t, &mut tile_out);
                    let cols = (n - gi * GROUP).min(GROUP);
                    for (r, v) in tile_out[..count].iter().enumerate() {
                        // SAFETY: output columns of group `gi` of this
                        // band's rows are this task's own.
                        unsafe { out.set_run(first + r, gi * GROUP, &v[..cols]) };
                    }
                }
            }
        }
    });
}

/// How a product is cut into rayon tasks, for both the row-wise and the
/// repacked kernels: the `m` activation rows into tiles of nearly equal
/// size (9 rows: 5 + 4), and the weight's `units` (rows, or groups of
/// rows) into tasks. With few tiles (decoding), a task takes about a
/// quarter of a thread's share of units for every tile; with more (a
/// prefill chunk), one run of `run` units for a band of
/// [`BAND_GROUPS`] tiles. A task walks its units in runs of `run`, each
/// run against every tile of its band, so a run's weights stay in cache.
#[derive(Debug, Clone, Copy)]
struct TaskPlan {
    units: usize,
    run: usize,
    per_task: usize,
    tiles: usize,
    base: usize,
    extra: usize,
    band: usize,
    bands: usize,
}

impl TaskPlan {
    fn new(m: usize, units: usize, run: usize) -> Self {
        let tiles = m.div_ceil(TILE_ROWS);
        let threads = rayon::current_num_threads().max(1);
        let (per_task, band) = if tiles <= SMALL_GROUPS {
            (units.div_ceil(threads * 4).max(1), tiles)
        } else {
            (run, BAND_GROUPS)
        };
        TaskPlan {
            units,
            run,
            per_task,
            tiles,
            base: m / tiles,
            extra: m % tiles,
            band,
            bands: tiles.div_ceil(band),
        }
    }

    /// How many tasks there are.
    fn tasks(&self) -> usize {
        self.units.div_ceil(self.per_task) * self.bands
    }

    /// The units task `task` owns, and the tiles of its band.
    fn task(&self, task: usize) -> (Range<usize>, Range<usize>) {
        let (task, band) = (task / self.bands, task % self.bands);
        (
            task * self.per_task..((task + 1) * self.per_task).min(self.units),
            band * self.band..((band + 1) * self.band).min(self.tiles),
        )
    }

    /// `owned` in runs of at most `run` units.
    fn runs(&self, owned: Range<usize>) -> impl Iterator<Item = Range<usize>> {
        let (run, end) = (self.run, owned.end);
        owned
            .step_by(run)
            .map(move |start| start..(start + run).min(end))
    }

    /// The first activation row of tile `g`, and its number of rows.
    fn tile(&self, g: usize) -> (usize, usize) {
        (
            g * self.base + g.min(self.extra),
            self.base + usize::from(g < self.extra),
        )
    }
}

/// The output, handed to rayon's tasks, which write disjoint elements of
/// it (columns of a band of rows).
#[derive(Clone, Copy)]
struct SharedOut {
    ptr: *mut f32,
    len: usize,
    ldo: usize,
}

// SAFETY: the pointer is only written through in `quant_matmul_with`,
// where every task writes disjoint elements.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// Writes element `(row, col)`.
    ///
    /// # Safety
    ///
    /// No other task may write or read this element meanwhile.
    #[inline(always)]
    unsafe fn set(&self, row: usize, col: usize, value: f32) {
        let at = row * self.ldo + col;
        assert!(at < self.len);
        // SAFETY: inside the `len` values `ptr` points to (asserted);
        // exclusive by the caller's promise.
        unsafe { *self.ptr.add(at) = value };
    }

    /// Writes `values` at `(row, col..)`.
    ///
    /// # Safety
    ///
    /// No other task may write or read these elements meanwhile.
    #[inline(always)]
    unsafe fn set_run(&self, row: usize, col: usize, values: &[f32]) {
        let at = row * self.ldo + col;
        assert!(at + values.len() <= self.len && col + values.len() <= self.ldo);
        // SAFETY: inside the `len` values `ptr` points to (asserted);
        // exclusive by the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.ptr.add(at), values.len()) };
    }
}

#[cfg(test)]
mod tests {
    use candle_core::quantized::GgmlDType;
    use candle_core::quantized::k_quants::{
        BlockQ4_0, BlockQ4K, BlockQ5_0, BlockQ5K, BlockQ6K, BlockQ8_0, GgmlType,
    };

    use super::*;

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// Uniform in (-1, 1).
        fn unit(&mut self) -> f32 {
            ((self.next() >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        }
    }

    /// Values of varying size: most in (-1, 1), some blocks scaled up or
    /// down, a few zeros.
    fn values(rng: &mut Rng, len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let scale = [1.0, 0.01, 3.0, 1.0][(i / 32) % 4];
                if rng.next().is_multiple_of(97) {
                    0.0
                } else {
                    rng.unit() * scale
                }
            })
            .collect()
    }

    /// The bytes of candle's blocks.
    fn as_bytes<T>(blocks: &[T]) -> Vec<u8> {
        // SAFETY: candle's blocks are `repr(C)` with no padding (their
        // sizes are asserted to be the ggml block sizes): plain bytes.
        unsafe {
            std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks))
        }
        .to_vec()
    }

    /// Blocks of `T` read from bytes.
    fn from_bytes<T: GgmlType>(bytes: &[u8]) -> Vec<T> {
        let size = std::mem::size_of::<T>();
        bytes
            .chunks_exact(size)
            .map(|chunk| {
                // SAFETY: `size` bytes; any bytes are a value of candle's
                // blocks (integers and f16).
                unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<T>()) }
            })
            .collect()
    }

    /// candle's quantization of `x` (rows of `k`) to `T`, as bytes.
    fn candle_quantize<T: GgmlType>(x: &[f32]) -> Vec<u8> {
        let mut blocks = vec![T::zeros(); x.len() / T::BLCK_SIZE];
        T::from_float(x, &mut blocks);
        as_bytes(&blocks)
    }

    /// candle's dequantization of blocks of `T`.
    fn candle_dequantize<T: GgmlType>(bytes: &[u8]) -> Vec<f32> {
        let blocks = from_bytes::<T>(bytes);
        let mut out = vec![0f32; blocks.len() * T::BLCK_SIZE];
        T::to_float(&blocks, &mut out);
        out
    }

    fn candle_quantize_as(ty: QuantType, x: &[f32]) -> Vec<u8> {
        match ty {
            QuantType::Q8_0 => candle_quantize::<BlockQ8_0>(x),
            QuantType::Q4_0 => candle_quantize::<BlockQ4_0>(x),
            QuantType::Q5_0 => candle_quantize::<BlockQ5_0>(x),
            QuantType::Q4K => candle_quantize::<BlockQ4K>(x),
            QuantType::Q5K => candle_quantize::<BlockQ5K>(x),
            QuantType::Q6K => candle_quantize::<BlockQ6K>(x),
        }
    }

    fn candle_dequantize_as(ty: QuantType, bytes: &[u8]) -> Vec<f32> {
        match ty {
            QuantType::Q8_0 => candle_dequantize::<BlockQ8_0>(bytes),
            QuantType::Q4_0 => candle_dequantize::<BlockQ4_0>(bytes),
            QuantType::Q5_0 => candle_dequantize::<BlockQ5_0>(bytes),
            QuantType::Q4K => candle_dequantize::<BlockQ4K>(bytes),
            QuantType::Q5K => candle_dequantize::<BlockQ5K>(bytes),
            QuantType::Q6K => candle_dequantize::<BlockQ6K>(bytes),
        }
    }

    /// Random bytes for `blocks` blocks of `ty`, every f16 scale set to
    /// a finite value of either sign between 1e-3 and 0.1 (the minimums'
    /// scale positive): every bit pattern of the values and 6-bit scales.
    fn random_blocks(rng: &mut Rng, ty: QuantType, blocks: usize) -> Vec<u8> {
        let size = ty.block_bytes();
        let mut bytes: Vec<u8> = (0..blocks * size).map(|_| rng.next() as u8).collect();
        for block in bytes.chunks_exact_mut(size) {
            let mut scale = |signed: bool| {
                let v = 1e-3 + 0.099 * (rng.unit() + 1.0) / 2.0;
                let v = if signed && rng.next().is_multiple_of(2) {
                    -v
                } else {
                    v
                };
                half::f16::from_f32(v).to_le_bytes()
            };
            match ty {
                QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q5_0 => {
                    block[..2].copy_from_slice(&scale(true));
                }
                QuantType::Q4K | QuantType::Q5K => {
                    block[..2].copy_from_slice(&scale(true));
                    block[2..4].copy_from_slice(&scale(false));
                }
                QuantType::Q6K => block[208..].copy_from_slice(&scale(true)),
            }
        }
        bytes
    }

    #[test]
    fn each_path_is_taken_only_where_the_cpu_has_every_feature_its_kernels_use() {
        let avx2 = Features {
            avx2: true,
            ..Features::default()
        };
        let vnni_alone = Features {
            avx512f: true,
            avx512_vnni: true,
            ..Features::default()
        };
        let vnni = Features {
            avx512f: true,
            avx512_vnni: true,
            ..avx2
        };
        assert_eq!(Path::best_on(Features::default()), Path::Portable);
        assert_eq!(Path::best_on(avx2), Path::Avx2);
        assert_eq!(Path::best_on(vnni_alone), Path::Portable);
        assert_eq!(Path::best_on(vnni), Path::Avx512Vnni);
        assert_eq!(Path::best(), Path::best_on(Features::get()));
        for path in Path::ALL {
            assert_eq!(path.runs_here(), path.runs_on(Features::get()));
        }
    }

    /// Every path this CPU runs, saying which it cannot.
    fn paths() -> Vec<Path> {
        Path::ALL
            .into_iter()
            .filter(|p| {
                let runs = p.runs_here();
                if !runs {
                    eprintln!(
                        "this CPU does not run the {} kernels: not tested here",
                        p.name()
                    );
                }
                runs
            })
            .collect()
    }

    fn one_thread() -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a thread pool")
    }

    /// Row lengths for `ty`: an odd and an even number of blocks.
    fn lengths(ty: QuantType) -> [usize; 2] {
        match ty.block_values() {
            32 => [96, 512],
            _ => [256, 768],
        }
    }

    #[test]
    fn block_sizes_and_names_are_ggmls() {
        for (ty, dtype) in [
            (QuantType::Q8_0, GgmlDType::Q8_0),
            (QuantType::Q4_0, GgmlDType::Q4_0),
            (QuantType::Q5_0, GgmlDType::Q5_0),
            (QuantType::Q4K, GgmlDType::Q4K),
            (QuantType::Q5K, GgmlDType::Q5K),
            (QuantType::Q6K, GgmlDType::Q6K),
        ] {
            assert_eq!(QuantType::from_ggml(dtype), Some(ty));
            assert_eq!(ty.block_values(), dtype.block_size(), "{ty}");
            assert_eq!(ty.block_bytes(), dtype.type_size(), "{ty}");
        }
        assert_eq!(QuantType::from_ggml(GgmlDType::F16), None);
        let names: Vec<&str> = QuantType::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q5_K", "Q6_K"]);
    }

    #[test]
    fn dequantized_rows_give_the_bits_of_candles_to_float_for_every_type() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        // A whole group of repacked rows and rows past it.
        let (n, k) = (GROUP + 5, 512);
        for ty in QuantType::ALL {
            // Blocks candle makes from random values, and random bytes.
            let made = candle_quantize_as(ty, &values(&mut rng, n * k));
            let random = random_blocks(&mut rng, ty, n * k / ty.block_values());
            for bytes in [made, random] {
                let want = candle_dequantize_as(ty, &bytes);
                let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
                assert_eq!(w.stored_bytes(), bytes.len());
                let mut row = vec![f32::NAN; k + 3];
                for j in 0..n {
                    w.dequantize_row(j, &mut row);
                    for c in 0..k {
                        assert_eq!(
                            row[c].to_bits(),
                            want[j * k + c].to_bits(),
                            "{ty}: row {j}, value {c}: {} against {}",
                            row[c],
                            want[j * k + c]
                        );
                    }
                    assert!(row[k].is_nan(), "{ty}: wrote past k");
                }
            }
        }
    }

    /// What was left in the output's other columns.
    const UNTOUCHED: f32 = -7.25;

    /// `w` times `x` (`m` rows) on `path`, into rows of `ldo`.
    fn product(path: Path, x: &[f32], m: usize, w: &QuantWeight, ldo: usize) -> Vec<f32> {
        let mut out = vec![UNTOUCHED; m * ldo];
        quant_matmul_with(path, x, m, w, &mut out, ldo);
        out
    }

    /// Tight tolerance: against the dequantized weight times the
    /// quantized-dequantized activations, summed in f64, the product is
    /// off by at most `1e-6 * sum |x^| |w^|` (its only errors are f32
    /// roundings: of the blocks' scales, of each block's integer sum, of
    /// the sum over at most 24 blocks, and the reference's own rounding of
    /// each dequantized weight; the worst seen here is under 1e-7).
    const TIGHT: f64 = 1e-6;

    /// Loose tolerance: against the dequantized weight times the
    /// activations as given, at most `1e-2 * sum |x| |w^|`. Quantizing a
    /// value moves it by at most `max |x| / 254` of its block, under
    /// 0.4 % of the values here (uniform in (-1, 1) times the block's
    /// size) and so under 1 % of the sum of the products' sizes.
    const LOOSE: f64 = 1e-2;

    /// A task's weight rows longer than one cache run ([`BLOCK_BYTES`])
    /// are gone through run after run: on one thread (tasks of a quarter
    /// of the rows), a repacked type (Q8_0, 4,003 rows of 256: runs of 60
    /// groups) and a row-wise one (Q4_0, 7,301 rows: runs of 1,820 rows)
    /// give every output its own product, on every path.
    #[test]
    fn rows_past_the_first_cache_run_get_their_own_products() {
        let mut rng = Rng(0x5eed_0fc0_ffee);
        let k = 256;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a pool");
        for (ty, n) in [(QuantType::Q8_0, 4003), (QuantType::Q4_0, 7301)] {
            let bytes = random_blocks(&mut rng, ty, n * k / ty.block_values());
            let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
            let x = values(&mut rng, k);
            let acts = Acts::quantize(&x, 1, k, ty.block_values());
            let xq: Vec<f64> = (0..k)
                .map(|c| f64::from(acts.qs[c]) * f64::from(acts.d[c / acts.block]))
                .collect();
            let mut row = vec![0f32; k];
            for path in paths() {
                let out = pool.install(|| product(path, &x, 1, &w, n));
                for (j, got) in out.iter().enumerate() {
                    w.dequantize_row(j, &mut row);
                    let (exact, size) = row.iter().zip(&xq).fold((0f64, 0f64), |(e, s), (w, x)| {
                        (e + f64::from(*w) * x, s + (f64::from(*w) * x).abs())
                    });
                    assert!(
                        (f64::from(*got) - exact).abs() <= TIGHT * size,
                        "{ty}, {}: output {j} of {n}: {got} against {exact}",
                        path.name()
                    );
                }
            }
        }
    }

    #[test]
    fn every_type_and_path_matches_the_product_of_dequantized_values() {
        let mut rng = Rng(0x0bad_5eed_cafe_f00d);
        let n = 37;
        let ldo = n + 5;
        for ty in QuantType::ALL {
            for k in lengths(ty) {
                let bytes = random_blocks(&mut rng, ty, n * k / ty.block_values());
                let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
                let mut wf = vec![0f32; n * k];
                for (j, row) in wf.chunks_exact_mut(k).enumerate() {
                    w.dequantize_row(j, row);
                }
                for m in [1usize, 3, 8, 33] {
                    let x = values(&mut rng, m * k);
                    let acts = Acts::quantize(&x, m, k, ty.block_values());
                    let xq: Vec<f64> = (0..m * k)
                        .map(|i| {
                            let (row, c) = (i / k, i % k);
                            let d = acts.d[row * (k / acts.block) + c / acts.block];
                            f64::from(acts.qs[i]) * f64::from(d)
                        })
                        .collect();
                    for path in paths() {
                        let out = product(path, &x, m, &w, ldo);
                        for i in 0..m {
                            for j in 0..n {
                                let got = f64::from(out[i * ldo + j]);
                                let (mut exact, mut size) = (0f64, 0f64);
                                let (mut plain, mut plain_size) = (0f64, 0f64);
                                for c in 0..k {
                                    let wv = f64::from(wf[j * k + c]);
                                    exact += xq[i * k + c] * wv;
                                    size += (xq[i * k + c] * wv).abs();
                                    plain += f64::from(x[i * k + c]) * wv;
                                    plain_size += (f64::from(x[i * k + c]) * wv).abs();
                                }
                                let what = format!(
                                    "{ty}, {}: k {k}, {m} rows: row {i}, output {j}: {got}",
                                    path.name()
                                );
                                assert!(
                                    (got - exact).abs() <= TIGHT * size,
                                    "{what} against {exact} (quantized activations)"
                                );
                                assert!(
                                    (got - plain).abs() <= LOOSE * plain_size,
                                    "{what} against {plain} (activations as given)"
                                );
                            }
                            for j in n..ldo {
                                assert_eq!(
                                    out[i * ldo + j].to_bits(),
                                    UNTOUCHED.to_bits(),
                                    "{ty}, {}: row {i}, column {j} past the outputs was written",
                                    path.name()
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Activation rows of 32-value blocks whose `max |x|` is `amax[r][b]`
    /// (the block's value 5, negative in odd blocks); every other value is
    /// `amax * t / 127` with `|t| <= 126.3` and `t` at least 0.2 from a
    /// tie (`t` an integer in -126..=126 plus a multiple of 0.1 in
    /// -0.3..=0.3), so its i8 is the same whether it is divided by
    /// `amax / 127` or by that rounded to f16.
    fn q8_0_rows(amax: &[&[f32]]) -> Vec<f32> {
        let mut x = Vec::new();
        for row in amax {
            for (b, &amax) in row.iter().enumerate() {
                for i in 0..32 {
                    x.push(if i == 5 {
                        if b % 2 == 1 { -amax } else { amax }
                    } else {
                        let q = ((i * 29 + b * 13) % 253) as f32 - 126.0;
                        let frac = ((i % 7) as f32 - 3.0) * 0.1;
                        amax * (q + frac) / 127.0
                    });
                }
            }
        }
        x
    }

    /// Maxima whose `amax / 127` is not an f16: rounding it to f16 moves
    /// it by 3.8e-4 of itself for 0.3 and 0.6, 1.8e-4 for 0.4 and 1.5e-4
    /// for 0.9.
    const ROUNDED_MAXIMA: [f32; 4] = [0.3, 0.6, 0.4, 0.9];

    /// A 32-value activation block keeps the scale ggml's `block_q8_0`
    /// stores: `max |x| / 127` rounded to f16 (llama.cpp's products use
    /// that rounded scale), not the f32 quotient.
    #[test]
    fn a_32_value_activation_block_s_scale_is_max_over_127_rounded_to_f16() {
        let m = ROUNDED_MAXIMA;
        let x = q8_0_rows(&[&m[..2], &m[2..]]);
        let acts = Acts::quantize(&x, 2, 64, 32);
        for (b, block) in x.chunks_exact(32).enumerate() {
            let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
            let quotient = amax / 127.0;
            let want = half::f16::from_f32(quotient).to_f32();
            assert_ne!(
                want.to_bits(),
                quotient.to_bits(),
                "block {b}: {quotient} is an f16"
            );
            assert_eq!(
                acts.d[b].to_bits(),
                want.to_bits(),
                "block {b}: scale {} where ggml keeps {want} (max {amax})",
                acts.d[b]
            );
        }
    }

    /// A Q8_0 product is ggml's arithmetic: over the blocks, the weight's
    /// f16 scale times the activations' f16 scale times the exact sum of
    /// the blocks' i8 products, the activations' i8 being `round(x / d)`
    /// with `d = max |x| / 127` (ggml's `quantize_row_q8_0_ref` divides
    /// by the f32 quotient and keeps it rounded to f16). Computed here by
    /// hand on hand-made weight blocks (a repacked group of 16 rows and a
    /// row past it), on every path, within [`TIGHT`]: the f32 quotient as
    /// the activations' scale is off by over 100 times that.
    #[test]
    fn a_q8_0_product_is_ggmls_sum_of_f16_scales_times_exact_integer_sums() {
        let (n, k, m) = (GROUP + 1, 96, 2);
        let m3 = ROUNDED_MAXIMA;
        let rows: [&[f32]; 2] = [&m3[..3], &[m3[1], m3[3], m3[0]]];
        let x = q8_0_rows(&rows);
        // ggml's reference quantization of each activation block.
        let mut xq = vec![0i32; m * k];
        let mut x_scale = vec![0f64; m * k / 32];
        let mut x_quotient = vec![0f64; m * k / 32];
        for (b, block) in x.chunks_exact(32).enumerate() {
            let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = 1.0 / d;
            let rounded = half::f16::from_f32(d).to_f32();
            for (c, v) in block.iter().enumerate() {
                let q = (v * id).round();
                assert_eq!(q, (v / rounded).round(), "block {b}, value {c}: near a tie");
                xq[b * 32 + c] = q as i32;
            }
            x_scale[b] = f64::from(rounded);
            x_quotient[b] = f64::from(d);
        }
        // Hand-made weight blocks: an f16 scale, and i8 that follow the
        // activations' so that the sums do not cancel.
        let mut bytes = Vec::new();
        let mut w_scale = vec![0f64; n * k / 32];
        let mut wq = vec![0i32; n * k];
        for j in 0..n {
            for b in 0..k / 32 {
                let d = half::f16::from_f32(0.01 + 0.002 * j as f32 + 0.0007 * b as f32);
                w_scale[j * (k / 32) + b] = f64::from(d.to_f32());
                bytes.extend_from_slice(&d.to_le_bytes());
                for c in b * 32..(b + 1) * 32 {
                    let q = (xq[c] / 2 + ((j + c) % 5) as i32 - 2).clamp(-127, 127);
                    wq[j * k + c] = q;
                    bytes.push(q as i8 as u8);
                }
            }
        }
        let w = QuantWeight::new(QuantType::Q8_0, n, k, &bytes).expect("a weight");
        for path in paths() {
            let out = product(path, &x, m, &w, n);
            for i in 0..m {
                for j in 0..n {
                    let (mut ggml, mut quotient, mut size) = (0f64, 0f64, 0f64);
                    for b in 0..k / 32 {
                        let isum: i32 = (b * 32..(b + 1) * 32)
                            .map(|c| wq[j * k + c] * xq[i * k + c])
                            .sum();
                        let wd = w_scale[j * (k / 32) + b];
                        let xb = i * (k / 32) + b;
                        ggml += wd * x_scale[xb] * f64::from(isum);
                        quotient += wd * x_quotient[xb] * f64::from(isum);
                        size += (wd * x_scale[xb] * f64::from(isum)).abs();
                    }
                    let got = f64::from(out[i * n + j]);
                    let what = format!("{}: row {i}, output {j}: {got}", path.name());
                    assert!(
                        (quotient - ggml).abs() > 100.0 * TIGHT * size,
                        "{what}: the f32 quotient gives {quotient}, as ggml's {ggml}"
                    );
                    assert!(
                        (got - ggml).abs() <= TIGHT * size,
                        "{what} against ggml's {ggml} (with the f32 quotient: {quotient})"
                    );
                }
            }
        }
    }

    #[test]
    fn every_path_gives_the_bits_of_the_portable_path() {
        let mut rng = Rng(0x5151_2323_aaaa_0101);
        let pool = one_thread();
        for ty in QuantType::ALL {
            for k in lengths(ty) {
                let n = 21;
                let bytes = random_blocks(&mut rng, ty, n * k / ty.block_values());
                let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
                for m in [1usize, 2, 5, 8, 9, 33, 70] {
                    let x = values(&mut rng, m * k);
                    let want = product(Path::Portable, &x, m, &w, n);
                    for path in paths() {
                        for got in [
                            product(path, &x, m, &w, n),
                            pool.install(|| product(path, &x, m, &w, n)),
                        ] {
                            for (e, (g, want)) in got.iter().zip(&want).enumerate() {
                                assert_eq!(
                                    g.to_bits(),
                                    want.to_bits(),
                                    "{ty}, {}: k {k}, {m} rows: row {}, output {}: {g} against {want}",
                                    path.name(),
                                    e / n,
                                    e % n
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_row_alone_gives_the_bits_it_gets_in_a_batch() {
        let mut rng = Rng(0x7777_1111_3333_9999);
        let pool = one_thread();
        let (n, m) = (19, 33);
        for ty in QuantType::ALL {
            let k = lengths(ty)[1];
            let bytes = random_blocks(&mut rng, ty, n * k / ty.block_values());
            let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
            let x = values(&mut rng, m * k);
            for path in paths() {
                let batch = product(path, &x, m, &w, n);
                for i in 0..m {
                    let row = &x[i * k..(i + 1) * k];
                    for alone in [
                        product(path, row, 1, &w, n),
                        pool.install(|| product(path, row, 1, &w, n)),
                    ] {
                        for j in 0..n {
                            assert_eq!(
                                alone[j].to_bits(),
                                batch[i * n + j].to_bits(),
                                "{ty}, {}: row {i}, output {j}",
                                path.name()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_weight_of_the_wrong_size_is_refused() {
        for ty in QuantType::ALL {
            let (n, k) = (3, 2 * ty.block_values());
            let len = n * 2 * ty.block_bytes();
            let bytes = vec![0u8; len + 1];
            assert!(QuantWeight::new(ty, n, k, &bytes[..len]).is_ok(), "{ty}");
            for wrong in [len - 1, len + 1, 0] {
                let err = QuantWeight::new(ty, n, k, &bytes[..wrong]).expect_err("refused");
                assert!(matches!(err, QuantError::WrongLength { .. }), "{ty}: {err}");
                assert!(
                    matches!(err, QuantError::WrongLength { want, got, .. } if want == len && got == wrong),
                    "{ty}: {err}"
                );
            }
            let err = QuantWeight::new(ty, n, k + 16, &bytes[..len]).expect_err("refused");
            assert!(
                matches!(err, QuantError::NotWholeBlocks { .. }),
                "{ty}: {err}"
            );
        }
    }

    #[test]
    fn an_empty_product_writes_zeros_or_nothing() {
        let w = QuantWeight::new(QuantType::Q8_0, 4, 0, &[]).expect("a weight");
        let mut out = vec![UNTOUCHED; 2 * 6];
        quant_matmul(&[], 2, &w, &mut out, 6);
        assert_eq!(&out[..4], &[0.0; 4]);
        assert_eq!(&out[6..10], &[0.0; 4]);
        assert_eq!(out[4], UNTOUCHED);
        quant_matmul(&[], 0, &w, &mut [], 6);
    }
}
