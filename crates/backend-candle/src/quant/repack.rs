//! The repacked layout of Q8_0, Q5_0, Q4_K and Q6_K weights: groups of
//! [`GROUP`] rows, each block of the group's rows interleaved so that one
//! 64-byte load holds four values of each of the 16 rows, one 32-bit lane
//! a row (the lane `vpdpbusd` sums into). A group-block is exactly the
//! bytes of its 16 row blocks, reordered (bits of the Q5_0 fifth bits and
//! the Q6_K values moved, nothing widened):
//!
//! - Q8_0 (544 bytes): the 16 f16 scales, then for chunk `c` (0..8) 64
//!   bytes, lane `r` holding row `r`'s values `4c..4c + 4` made unsigned
//!   (`^ 0x80`: value + 128, what `vpdpbusd` multiplies).
//! - Q5_0 (352 bytes): the 16 f16 scales; 16 u32 of fifth bits, bit `8i
//!   + c` of row `r`'s for value `4c + i`; then for `v` (0..4) 64 bytes,
//!   lane `r` holding row `r`'s nibble bytes `4v..4v + 4` (low nibbles:
//!   values `4v..`, chunk `v`; high nibbles: values `16 + 4v..`, chunk
//!   `4 + v`).
//! - Q4_K (2304 bytes): 16 f16 `d`, 16 f16 `dmin`; for `t` (0..3) 64
//!   bytes, lane `r` holding row `r`'s scale bytes `4t..4t + 4`; then for
//!   the sub-block pair `p` (0..4) and chunk `c` (0..8) 64 bytes, lane `r`
//!   holding row `r`'s nibble bytes `32p + 4c..32p + 4c + 4` (low nibbles:
//!   sub-block `2p`, values `4c..`; high: sub-block `2p + 1`).
//! - Q6_K (3360 bytes): 16 f16 `d`; for scale `g` (0..16) 16 bytes, one
//!   i8 a row; then for `v` (0..32) 64 bytes of low four bits, lane `r`
//!   byte `i` holding those of row `r`'s value `4v + i` in its low nibble
//!   and of `4 (v + 32) + i` in its high one; then for `h` (0..16) 64
//!   bytes of high bit pairs, lane `r` byte `i` bits `2s..2s + 2` holding
//!   those of value `4 (h + 16 s) + i`.
//!
//! Rows past the last whole group stay in ggml's row layout after the
//! groups; a product packs them into a group (zero rows added) per call.

use super::{Q4K_BYTES, Q5_0_BYTES, Q6K_BYTES, Q8_0_BYTES, QK_K, QuantType, q6k_values};

/// Weight rows per group.
pub(crate) const GROUP: usize = 16;

/// Whether weights of `ty` are repacked into groups.
pub(crate) fn repacked(ty: QuantType) -> bool {
    matches!(
        ty,
        QuantType::Q8_0 | QuantType::Q5_0 | QuantType::Q4K | QuantType::Q6K
    )
}

/// The block of row `r` of `rows` (each a row's `nb` blocks), or none past
/// the rows given.
fn row_block<'a>(rows: &[&'a [u8]], r: usize, b: usize, size: usize) -> Option<&'a [u8]> {
    rows.get(r).map(|row| &row[b * size..(b + 1) * size])
}

/// Packs up to [`GROUP`] rows (`rows`, ggml's layout, `nb` blocks each)
/// into `out` (`nb` group-blocks); missing rows are zero bytes.
pub(crate) fn pack_group(ty: QuantType, rows: &[&[u8]], nb: usize, out: &mut [u8]) {
    let size = ty.block_bytes();
    let gsize = size * GROUP;
    out[..nb * gsize].fill(0);
    for b in 0..nb {
        let out = &mut out[b * gsize..(b + 1) * gsize];
        for r in 0..GROUP {
            let Some(block) = row_block(rows, r, b, size) else {
                continue;
            };
            pack_block(ty, block, r, out);
        }
    }
}

/// Row `r`'s `block` into the group-block `out`.
fn pack_block(ty: QuantType, block: &[u8], r: usize, out: &mut [u8]) {
    match ty {
        QuantType::Q8_0 => {
            out[2 * r..2 * r + 2].copy_from_slice(&block[..2]);
            for c in 0..8 {
                for i in 0..4 {
                    out[32 + 64 * c + 4 * r + i] = block[2 + 4 * c + i] ^ 0x80;
                }
            }
        }
        QuantType::Q5_0 => {
            out[2 * r..2 * r + 2].copy_from_slice(&block[..2]);
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            let mut packed = 0u32;
            for v in 0..32 {
                let (c, i) = (v / 4, v % 4);
                packed |= ((qh >> v) & 1) << (8 * i + c);
            }
            out[32 + 4 * r..][..4].copy_from_slice(&packed.to_le_bytes());
            for v in 0..4 {
                out[96 + 64 * v + 4 * r..][..4].copy_from_slice(&block[6 + 4 * v..][..4]);
            }
        }
        QuantType::Q4K => {
            out[2 * r..2 * r + 2].copy_from_slice(&block[..2]);
            out[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&block[2..4]);
            for t in 0..3 {
                out[64 + 64 * t + 4 * r..][..4].copy_from_slice(&block[4 + 4 * t..][..4]);
            }
            for p in 0..4 {
                for c in 0..8 {
                    out[256 + 512 * p + 64 * c + 4 * r..][..4]
                        .copy_from_slice(&block[16 + 32 * p + 4 * c..][..4]);
                }
            }
        }
        QuantType::Q6K => {
            out[2 * r..2 * r + 2].copy_from_slice(&block[208..210]);
            for g in 0..16 {
                out[32 + 16 * g + r] = block[192 + g];
            }
            let q = q6k_values(block);
            for v in 0..32 {
                for i in 0..4 {
                    let (lo, hi) = (q[4 * v + i] & 0x0F, q[4 * (v + 32) + i] & 0x0F);
                    out[288 + 64 * v + 4 * r + i] = lo | (hi << 4);
                }
            }
            for h in 0..16 {
                for i in 0..4 {
                    let mut byte = 0u8;
                    for s in 0..4 {
                        byte |= (q[4 * (h + 16 * s) + i] >> 4) << (2 * s);
                    }
                    out[2336 + 64 * h + 4 * r + i] = byte;
                }
            }
        }
        QuantType::Q4_0 | QuantType::Q5K => unreachable!("{ty} is not repacked"),
    }
}

/// Row `r`'s block, in ggml's layout, from the group-block `gb`, into
/// `out` (`block_bytes` long).
pub(crate) fn unpack_block(ty: QuantType, gb: &[u8], r: usize, out: &mut [u8]) {
    match ty {
        QuantType::Q8_0 => {
            out[..2].copy_from_slice(&gb[2 * r..2 * r + 2]);
            for c in 0..8 {
                for i in 0..4 {
                    out[2 + 4 * c + i] = gb[32 + 64 * c + 4 * r + i] ^ 0x80;
                }
            }
        }
        QuantType::Q5_0 => {
            out[..2].copy_from_slice(&gb[2 * r..2 * r + 2]);
            let p = &gb[32 + 4 * r..][..4];
            let packed = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            let mut qh = 0u32;
            for v in 0..32 {
                let (c, i) = (v / 4, v % 4);
                qh |= ((packed >> (8 * i + c)) & 1) << v;
            }
            out[2..6].copy_from_slice(&qh.to_le_bytes());
            for v in 0..4 {
                out[6 + 4 * v..][..4].copy_from_slice(&gb[96 + 64 * v + 4 * r..][..4]);
            }
        }
        QuantType::Q4K => {
            out[..2].copy_from_slice(&gb[2 * r..2 * r + 2]);
            out[2..4].copy_from_slice(&gb[32 + 2 * r..32 + 2 * r + 2]);
            for t in 0..3 {
                out[4 + 4 * t..][..4].copy_from_slice(&gb[64 + 64 * t + 4 * r..][..4]);
            }
            for p in 0..4 {
                for c in 0..8 {
                    out[16 + 32 * p + 4 * c..][..4]
                        .copy_from_slice(&gb[256 + 512 * p + 64 * c + 4 * r..][..4]);
                }
            }
        }
        QuantType::Q6K => {
            out[208..210].copy_from_slice(&gb[2 * r..2 * r + 2]);
            for g in 0..16 {
                out[192 + g] = gb[32 + 16 * g + r];
            }
            let q = q6k_group_values(gb, r);
            // ggml's layout (see `q6k_values`).
            out[..192].fill(0);
            for (v, q) in q.iter().enumerate() {
                let (h, c, l) = (v / 128, (v % 128) / 32, v % 32);
                let at = 64 * h + 32 * (c % 2) + l;
                out[at] |= if c < 2 { q & 0x0F } else { (q & 0x0F) << 4 };
                out[128 + 32 * h + l] |= (q >> 4) << (2 * c);
            }
        }
        QuantType::Q4_0 | QuantType::Q5K => unreachable!("{ty} is not repacked"),
    }
}

/// The 256 unsigned 6-bit values of row `r` of a Q6_K group-block.
pub(crate) fn q6k_group_values(gb: &[u8], r: usize) -> [u8; QK_K] {
    std::array::from_fn(|value| {
        let (j, i) = (value / 4, value % 4);
        let low = gb[288 + 64 * (j % 32) + 4 * r + i] >> (4 * (j / 32)) & 0x0F;
        let high = (gb[2336 + 64 * (j % 16) + 4 * r + i] >> (2 * (j / 16))) & 3;
        low | (high << 4)
    })
}

/// Bytes of a group-block of `ty`.
pub(crate) const fn group_block_bytes(ty: QuantType) -> usize {
    GROUP
        * match ty {
            QuantType::Q8_0 => Q8_0_BYTES,
            QuantType::Q5_0 => Q5_0_BYTES,
            QuantType::Q4K => Q4K_BYTES,
            QuantType::Q6K => Q6K_BYTES,
            _ => 0,
        }
}
