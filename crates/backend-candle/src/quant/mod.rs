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
//! 1. each activation row is quantized once per call (or once for all
//!    the weights of one input that take the same format: `QuantInput`),
//!    in blocks of 32 for Q8_0, Q4_0 and Q5_0 weights (one scale
//!    `max |x| / 127`, rounded to
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
//! every tile of the band before the next run (the plan is
//! `cpu::sched`'s, shared with the packed products).
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
//! - One input is quantized once per activation format for all the
//!   weights it meets, each product with the bits it gets alone:
//!   `an_input_is_quantized_once_per_activation_format_for_all_its_weights`.
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
use crate::cpu::sched::{SharedOut, TaskPlan, Work};

use rayon::prelude::*;

mod acts;
pub(crate) mod portable;
mod tile;

pub(crate) mod repack;

use repack::{GROUP, group_block_bytes, pack_group, repacked, unpack_block};

pub(crate) use acts::{Acts, QuantInput};
pub(crate) use tile::ActTile;

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
/// takes them all over its run of weight rows ([`TaskPlan`]).
const SMALL_GROUPS: usize = 4;

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
    quant_matmul_input_with(path, &mut QuantInput::new(x, m, w.k), w, out, ldo);
}

/// [`quant_matmul`] of `input`'s rows, quantized for `w`'s activation
/// format unless an earlier product of the same input already did: the
/// bits of [`quant_matmul`] on the same rows, with one quantization per
/// format for all the weights of one input.
///
/// # Panics
///
/// As [`quant_matmul`]; also when `input`'s rows are not `w`'s width.
pub(crate) fn quant_matmul_input(
    input: &mut QuantInput<'_>,
    w: &QuantWeight,
    out: &mut [f32],
    ldo: usize,
) {
    quant_matmul_input_with(Path::best().for_type(w.ty), input, w, out, ldo);
}

/// [`quant_matmul_input`] on `path`.
fn quant_matmul_input_with(
    path: Path,
    input: &mut QuantInput<'_>,
    w: &QuantWeight,
    out: &mut [f32],
    ldo: usize,
) {
    assert!(
        path.runs_here(),
        "this CPU does not run the {} kernels",
        path.name()
    );
    let (x, m) = (input.values(), input.rows());
    assert_eq!(
        input.cols(),
        w.k,
        "rows of {} values for a weight of {} columns",
        input.cols(),
        w.k
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
    let acts = input.acts(w.ty.block_values());
    if repacked(w.ty) {
        grouped_matmul(path, acts, m, w, out, ldo);
        return;
    }
    let ty = w.ty;
    let block = (BLOCK_BYTES / w.row_bytes().max(1)).max(1);
    let plan = TaskPlan::new(Work {
        rows: m,
        tile_rows: TILE_ROWS,
        units: n,
        run: block,
        few_tiles: SMALL_GROUPS,
        unit_multiple: 1,
    });
    let out = SharedOut::new(out, ldo);
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
    let plan = TaskPlan::new(Work {
        rows: m,
        tile_rows: TILE_ROWS,
        units: n.div_ceil(GROUP),
        run,
        few_tiles: SMALL_GROUPS,
        unit_multiple: 1,
    });
    let out = SharedOut::new(out, ldo);
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
                        unsafe { out.cols(first + r, gi * GROUP, cols) }
                            .copy_from_slice(&v[..cols]);
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests;
