//! The portable kernels: plain Rust, every CPU. They define what every
//! vector kernel computes: the same exact integer sums per weight block,
//! combined in f32 by the same helpers of [`super`] in the same order, so
//! every path gives these bits.

use super::repack::{GROUP, group_block_bytes, unpack_block};
use super::{
    ActTile, GroupOut, Q4_0_BYTES, Q5K_BYTES, Q6K_BYTES, QK_K, QuantType, TILE_ROWS, add_block,
    add_k, add_lanes, f16_at, k_scales, q6k_values, reduce16,
};

/// The 32 values of a Q8_0 weight block as i8.
fn q8_0_values(block: &[u8]) -> [i8; 32] {
    std::array::from_fn(|i| block[2 + i] as i8)
}

/// The 32 values of a Q4_0 weight block, offset removed (-8..=7): low
/// nibbles first, then high nibbles.
fn q4_0_values(block: &[u8]) -> [i8; 32] {
    std::array::from_fn(|i| {
        let byte = block[2 + i % 16];
        let nibble = if i < 16 { byte & 0x0F } else { byte >> 4 };
        nibble as i8 - 8
    })
}

/// The 32 values of a Q5_0 weight block, offset removed (-16..=15): the
/// low nibbles of bytes 6..22 then their high nibbles, value `i` taking
/// bit `i` of the little-endian u32 at bytes 2..6 as its fifth bit.
fn q5_0_values(block: &[u8]) -> [i8; 32] {
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    std::array::from_fn(|i| {
        let byte = block[6 + i % 16];
        let nibble = if i < 16 { byte & 0x0F } else { byte >> 4 };
        let fifth = ((qh >> i) & 1) as u8;
        (nibble | (fifth << 4)) as i8 - 16
    })
}

/// A Q8_0, Q4_0 or Q5_0 weight row (`BYTES` a block, values from `values`)
/// times the tile's rows: 16 f32 lanes per row, block `b` in lanes
/// `8 * (b % 2)..`, lane `l` taking the sum of values `4 l..4 l + 4`.
fn lanes_rows<const BYTES: usize>(
    w: &[u8],
    t: &ActTile<'_>,
    values: fn(&[u8]) -> [i8; 32],
    out: &mut [f32; TILE_ROWS],
) {
    let nb = t.k / 32;
    let mut lanes = [[0f32; 16]; TILE_ROWS];
    for (b, block) in w.chunks_exact(BYTES).take(nb).enumerate() {
        let q = values(block);
        let dw = f16_at(block, 0);
        for (r, lanes) in lanes.iter_mut().enumerate().take(t.rows) {
            let y = &t.qs[r * t.k + b * 32..][..32];
            let mut sums = [0i32; 8];
            for (l, sum) in sums.iter_mut().enumerate() {
                *sum = (4 * l..4 * l + 4)
                    .map(|i| i32::from(q[i]) * i32::from(y[i]))
                    .sum();
            }
            let half = &mut lanes[8 * (b % 2)..][..8];
            add_lanes(half, dw * t.d[r * nb + b], &sums);
        }
    }
    for (o, lanes) in out.iter_mut().zip(&lanes).take(t.rows) {
        *o = reduce16(lanes);
    }
}

/// A Q4_0 weight row times the tile's rows.
pub(crate) fn q4_0_rows(w: &[u8], t: &ActTile<'_>, out: &mut [f32; TILE_ROWS]) {
    lanes_rows::<Q4_0_BYTES>(w, t, q4_0_values, out);
}

/// The 256 unsigned values of a Q4_K block (`high` none) or Q5_K block
/// (`high` its 32 bytes of fifth bits), without scales: sub-block `s`
/// (32 values) is chunk `s / 2`'s low nibbles when `s` is even, high
/// nibbles when odd, plus 16 where bit `s` of `high[i]` is set.
fn k4_values(qs: &[u8], high: Option<&[u8]>) -> [u8; QK_K] {
    std::array::from_fn(|v| {
        let (s, i) = (v / 32, v % 32);
        let byte = qs[32 * (s / 2) + i];
        let low = if s % 2 == 0 { byte & 0x0F } else { byte >> 4 };
        match high {
            Some(h) if h[i] & (1 << s) != 0 => low + 16,
            _ => low,
        }
    })
}

/// A Q4_K (`BYTES` 144, `FIFTH` false) or Q5_K (176, true) weight row
/// times the tile's rows.
fn k4_rows<const BYTES: usize, const FIFTH: bool>(
    w: &[u8],
    t: &ActTile<'_>,
    out: &mut [f32; TILE_ROWS],
) {
    let nb = t.k / QK_K;
    let mut acc = [0f32; TILE_ROWS];
    for (b, block) in w.chunks_exact(BYTES).take(nb).enumerate() {
        let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
        let (sc, mins) = k_scales(&block[4..16]);
        let q = if FIFTH {
            k4_values(&block[48..176], Some(&block[16..48]))
        } else {
            k4_values(&block[16..144], None)
        };
        for (r, acc) in acc.iter_mut().enumerate().take(t.rows) {
            let y = &t.qs[r * t.k + b * QK_K..][..QK_K];
            let bsums = &t.bsums[(r * nb + b) * 16..][..16];
            let (isum, msum) = k4_sums(&q, &sc, &mins, y, bsums);
            *acc = add_k(*acc, d, dmin, t.d[r * nb + b], isum, msum);
        }
    }
    out[..t.rows].copy_from_slice(&acc[..t.rows]);
}

/// A Q5_K weight row times the tile's rows.
pub(crate) fn q5k_rows(w: &[u8], t: &ActTile<'_>, out: &mut [f32; TILE_ROWS]) {
    k4_rows::<Q5K_BYTES, true>(w, t, out);
}

/// The exact sums of a Q4_K or Q5_K block (`q` its unsigned values, `sc`
/// and `mins` its scales) against activations `y` (256) with sums
/// `bsums` (16): the scaled value sum and the minimums' sum.
fn k4_sums(q: &[u8; QK_K], sc: &[u8; 8], mins: &[u8; 8], y: &[i8], bsums: &[i16]) -> (i32, i32) {
    let mut isum = 0i32;
    for (s, scale) in sc.iter().enumerate() {
        let part: i32 = (32 * s..32 * s + 32)
            .map(|v| i32::from(q[v]) * i32::from(y[v]))
            .sum();
        isum += i32::from(*scale) * part;
    }
    let msum: i32 = (0..16)
        .map(|g| i32::from(bsums[g]) * i32::from(mins[g / 2]))
        .sum();
    (isum, msum)
}

/// The exact sum of a Q6_K block (`q` its unsigned values, `sc` its
/// scales) against activations `y` (256) with sums `bsums` (16), the
/// offset of 32 removed.
fn q6k_sum(q: &[u8; QK_K], sc: &[i32; 16], y: &[i8], bsums: &[i16]) -> i32 {
    let mut isum = 0i32;
    let mut csum = 0i32;
    for g in 0..16 {
        let part: i32 = (16 * g..16 * g + 16)
            .map(|v| i32::from(q[v]) * i32::from(y[v]))
            .sum();
        isum += sc[g] * part;
        csum += sc[g] * i32::from(bsums[g]);
    }
    isum - 32 * csum
}

/// A group of [`GROUP`] repacked weight rows of `ty` (`gb`, its
/// group-blocks) times the tile's rows into `out[r][lane]`: each output
/// one f32, block by block ([`add_block`], [`add_k`]).
pub(crate) fn group_rows(ty: QuantType, gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    let nb = t.k / ty.block_values();
    let gsize = group_block_bytes(ty);
    let mut acc = [[0f32; GROUP]; TILE_ROWS];
    let mut block = [0u8; Q6K_BYTES];
    for (b, g) in gb.chunks_exact(gsize).take(nb).enumerate() {
        for lane in 0..GROUP {
            unpack_block(ty, g, lane, &mut block);
            for (r, acc) in acc.iter_mut().enumerate().take(t.rows) {
                let acc = &mut acc[lane];
                let yd = t.d[r * nb + b];
                match ty {
                    QuantType::Q8_0 | QuantType::Q5_0 => {
                        let q = if ty == QuantType::Q8_0 {
                            q8_0_values(&block)
                        } else {
                            q5_0_values(&block)
                        };
                        let y = &t.qs[r * t.k + b * 32..][..32];
                        let isum: i32 = (0..32).map(|i| i32::from(q[i]) * i32::from(y[i])).sum();
                        *acc = add_block(*acc, f16_at(&block, 0), yd, isum);
                    }
                    QuantType::Q4K => {
                        let (d, dmin) = (f16_at(&block, 0), f16_at(&block, 2));
                        let (sc, mins) = k_scales(&block[4..16]);
                        let q = k4_values(&block[16..144], None);
                        let y = &t.qs[r * t.k + b * QK_K..][..QK_K];
                        let bsums = &t.bsums[(r * nb + b) * 16..][..16];
                        let (isum, msum) = k4_sums(&q, &sc, &mins, y, bsums);
                        *acc = add_k(*acc, d, dmin, yd, isum, msum);
                    }
                    QuantType::Q6K => {
                        let q = q6k_values(&block);
                        let sc: [i32; 16] =
                            std::array::from_fn(|g| i32::from(block[192 + g] as i8));
                        let y = &t.qs[r * t.k + b * QK_K..][..QK_K];
                        let bsums = &t.bsums[(r * nb + b) * 16..][..16];
                        let isum = q6k_sum(&q, &sc, y, bsums);
                        *acc = add_block(*acc, f16_at(&block, 208), yd, isum);
                    }
                    QuantType::Q4_0 | QuantType::Q5K => unreachable!("{ty} is not repacked"),
                }
            }
        }
    }
    out[..t.rows].copy_from_slice(&acc[..t.rows]);
}
