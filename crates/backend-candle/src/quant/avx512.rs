//! The AVX-512 kernels (F, BW and VNNI): 64 weight values at a time.
//! The K-quants run `vpmaddubsw` then `vpdpwssd` (pairs of i16 by the
//! sub-blocks' scales, added into i32 lanes in one instruction); Q8_0,
//! Q4_0 and Q5_0 take two blocks per register and `vpdpbusd` (four
//! unsigned-by-signed byte products into each i32 lane). Every sum of
//! integers is exact; the f32 steps are the portable kernels', so the
//! bits are theirs.

use std::arch::x86_64::*;

use super::avx2::{hsum2, lanes_values, nibbles, q5_0_high, q6k_chunks, reduce16};
use super::{
    ActTile, Q4_0_BYTES, Q4K_BYTES, Q5_0_BYTES, Q5K_BYTES, Q6K_BYTES, Q8_0_BYTES, QK_K, QuantType,
    TILE_ROWS, add_k, add_q6k, f16_at, k_scales,
};

/// One weight row of `ty` times the tile's rows into `out[..rows]`.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vnni")]
pub(crate) fn row_times_tile(ty: QuantType, w: &[u8], t: &ActTile<'_>, out: &mut [f32; TILE_ROWS]) {
    assert!((1..=TILE_ROWS).contains(&t.rows));
    match ty {
        QuantType::Q8_0 => super::avx2::by_rows!(lanes, Q8_0_BYTES; t.rows; w, t, out),
        QuantType::Q4_0 => super::avx2::by_rows!(lanes, Q4_0_BYTES; t.rows; w, t, out),
        QuantType::Q5_0 => super::avx2::by_rows!(lanes, Q5_0_BYTES; t.rows; w, t, out),
        QuantType::Q4K => super::avx2::by_rows!(k4, false; t.rows; w, t, out),
        QuantType::Q5K => super::avx2::by_rows!(k4, true; t.rows; w, t, out),
        QuantType::Q6K => super::avx2::by_rows!(q6k; t.rows; w, t, out),
    }
}

/// `lo` in the low 256 bits, `hi` in the high.
#[target_feature(enable = "avx512f")]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// The sum of the halves of `v`.
#[target_feature(enable = "avx512f")]
fn halves(v: __m512i) -> __m256i {
    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
}

/// Indices for `vpermw` from a register of i16 (`from`) to 32 lanes,
/// lane `i` taking `first + i / per`.
#[target_feature(enable = "avx512f")]
fn spread(first: usize, per: usize) -> __m512i {
    let idx: [i16; 32] = std::array::from_fn(|i| (first + i / per) as i16);
    // SAFETY: 32 i16 on the stack.
    unsafe { _mm512_loadu_si512(idx.as_ptr().cast()) }
}

/// The values of two Q8_0, Q4_0 or Q5_0 blocks (`BYTES` a block;
/// offsets removed) as i8, `first`'s in the low 256 bits.
///
/// # Safety
///
/// `first` and `second` point to whole blocks.
#[target_feature(enable = "avx2,avx512f,avx512bw")]
unsafe fn pair_values<const BYTES: usize>(first: *const u8, second: *const u8) -> __m512i {
    if BYTES == Q5_0_BYTES {
        // SAFETY: 16 bytes of nibbles after the scale and fifth bits of
        // each block; the fifth bits, in the blocks.
        let (q, qh) = unsafe {
            (
                join(nibbles(first.add(6)), nibbles(second.add(6))),
                u64::from(q5_0_high(first)) | (u64::from(q5_0_high(second)) << 32),
            )
        };
        // `nibble - 16` as i8 (`0xF0 | nibble`) where the fifth bit is
        // clear, `nibble` where it is set.
        _mm512_or_si512(
            q,
            _mm512_maskz_mov_epi8(!qh, _mm512_set1_epi8(0xF0_u8 as i8)),
        )
    } else {
        // SAFETY: whole blocks.
        unsafe { join(lanes_values::<BYTES>(first), lanes_values::<BYTES>(second)) }
    }
}

/// A Q8_0, Q4_0 or Q5_0 weight row (`BYTES` a block) times `R`
/// activation rows: two blocks a register, the even one in lanes 0-7,
/// the odd one in 8-15, the lanes of [`super::portable`].
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vnni")]
fn lanes<const R: usize, const BYTES: usize>(
    w: &[u8],
    t: &ActTile<'_>,
    out: &mut [f32; TILE_ROWS],
) {
    let (k, nb) = (t.k, t.k / 32);
    assert!(t.rows == R && w.len() >= nb * BYTES && t.qs.len() >= R * k && t.d.len() >= R * nb);
    let zero = _mm512_setzero_si512();
    let pick = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let mut acc = [_mm512_setzero_ps(); R];
    let mut b = 0;
    while b < nb {
        // Blocks `b` and `b + 1` (the last block alone: no lanes 8-15).
        let pair = b + 1 < nb;
        let first = &w[b * BYTES..(b + 1) * BYTES];
        let second = if pair {
            &w[(b + 1) * BYTES..(b + 2) * BYTES]
        } else {
            first
        };
        // SAFETY: `first` and `second` are whole blocks.
        let q = unsafe { pair_values::<BYTES>(first.as_ptr(), second.as_ptr()) };
        let dw = _mm512_permutexvar_ps(
            pick,
            _mm512_castps128_ps512(_mm_setr_ps(f16_at(first, 0), f16_at(second, 0), 0.0, 0.0)),
        );
        let aq = _mm512_abs_epi8(q);
        let negative = _mm512_movepi8_mask(q);
        let keep: __mmask16 = if pair { 0xFFFF } else { 0x00FF };
        for (r, acc) in acc.iter_mut().enumerate() {
            let y = &t.qs[r * k + b * 32..][..if pair { 64 } else { 32 }];
            // SAFETY: 64 activation values, or 32 and zeros.
            let y = unsafe {
                if pair {
                    _mm512_loadu_si512(y.as_ptr().cast())
                } else {
                    _mm512_castsi256_si512(_mm256_loadu_si256(y.as_ptr().cast()))
                }
            };
            // |q| * (y with q's sign), four products a lane.
            let signed = _mm512_mask_sub_epi8(y, negative, zero, y);
            let sums = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, aq, signed));
            let yd = &t.d[r * nb + b..];
            let yd = _mm_setr_ps(yd[0], if pair { yd[1] } else { 0.0 }, 0.0, 0.0);
            let yd = _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(yd));
            let scale = _mm512_mul_ps(dw, yd);
            *acc = _mm512_mask_add_ps(*acc, keep, *acc, _mm512_mul_ps(scale, sums));
        }
        b += 2;
    }
    for (o, acc) in out.iter_mut().zip(&acc) {
        let even = _mm512_castps512_ps256(*acc);
        let odd = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*acc)));
        *o = reduce16(even, odd);
    }
}

/// A Q4_K (`FIFTH` false) or Q5_K weight row times `R` activation rows:
/// two sub-blocks (64 values) a register.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vnni")]
fn k4<const R: usize, const FIFTH: bool>(w: &[u8], t: &ActTile<'_>, out: &mut [f32; TILE_ROWS]) {
    let bytes = if FIFTH { Q5K_BYTES } else { Q4K_BYTES };
    let (k, nb) = (t.k, t.k / QK_K);
    assert!(
        t.rows == R
            && w.len() >= nb * bytes
            && t.qs.len() >= R * k
            && t.d.len() >= R * nb
            && t.bsums.len() >= R * nb * 16
    );
    let low = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let spreads: [__m512i; 4] = std::array::from_fn(|c| spread(2 * c, 16));
    let mut acc = [0f32; R];
    for b in 0..nb {
        let block = &w[b * bytes..(b + 1) * bytes];
        let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
        let (sc, mins) = k_scales(&block[4..16]);
        let sc: [i16; 8] = std::array::from_fn(|i| i16::from(sc[i]));
        // SAFETY: 8 i16 on the stack.
        let sc = _mm512_castsi128_si512(unsafe { _mm_loadu_si128(sc.as_ptr().cast()) });
        let mins: [i16; 16] = std::array::from_fn(|i| i16::from(mins[i / 2]));
        // SAFETY: 16 i16 on the stack.
        let mins = unsafe { _mm256_loadu_si256(mins.as_ptr().cast()) };
        let qs = &block[if FIFTH { 48 } else { 16 }..];
        // SAFETY: the fifth bits are bytes 16..48 of a Q5_K block.
        let qh = FIFTH.then(|| unsafe { _mm256_loadu_si256(block[16..48].as_ptr().cast()) });
        let mut isum = [_mm512_setzero_si512(); R];
        for c in 0..4 {
            // SAFETY: chunk `c`'s 32 bytes of nibbles, in the block.
            let raw = unsafe { _mm256_loadu_si256(qs[32 * c..].as_ptr().cast()) };
            let mut lo = _mm256_and_si256(raw, low);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), low);
            if let Some(qh) = qh {
                let shift = |s: usize| _mm_cvtsi32_si128(s as i32);
                let bit_lo = _mm256_and_si256(_mm256_srl_epi16(qh, shift(2 * c)), one);
                let bit_hi = _mm256_and_si256(_mm256_srl_epi16(qh, shift(2 * c + 1)), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(bit_lo));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16::<4>(bit_hi));
            }
            let u = join(lo, hi);
            let sv = _mm512_permutexvar_epi16(spreads[c], sc);
            for (r, isum) in isum.iter_mut().enumerate() {
                let y = &t.qs[r * k + b * QK_K + 64 * c..][..64];
                // SAFETY: 64 activation values, in `t.qs`.
                let y = unsafe { _mm512_loadu_si512(y.as_ptr().cast()) };
                *isum = _mm512_dpwssd_epi32(*isum, _mm512_maddubs_epi16(u, y), sv);
            }
        }
        for (r, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
            let bsums = &t.bsums[(r * nb + b) * 16..][..16];
            // SAFETY: 16 i16, in `t.bsums`.
            let bsums = unsafe { _mm256_loadu_si256(bsums.as_ptr().cast()) };
            let (isum, msum) = hsum2(halves(isum), _mm256_madd_epi16(bsums, mins));
            *acc = add_k(*acc, d, dmin, t.d[r * nb + b], isum, msum);
        }
    }
    out[..R].copy_from_slice(&acc);
}

/// A Q6_K weight row times `R` activation rows: two 32-value chunks (four
/// scales of 16 values) a register.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vnni")]
fn q6k<const R: usize>(w: &[u8], t: &ActTile<'_>, out: &mut [f32; TILE_ROWS]) {
    let (k, nb) = (t.k, t.k / QK_K);
    assert!(
        t.rows == R
            && w.len() >= nb * Q6K_BYTES
            && t.qs.len() >= R * k
            && t.d.len() >= R * nb
            && t.bsums.len() >= R * nb * 16
    );
    let spreads: [__m512i; 4] = std::array::from_fn(|p| spread(4 * p, 8));
    let mut acc = [0f32; R];
    for b in 0..nb {
        let block = &w[b * Q6K_BYTES..(b + 1) * Q6K_BYTES];
        let d = f16_at(block, 208);
        let p = block.as_ptr();
        // SAFETY: the 16 scales are bytes 192..208 of the block.
        let scales16 = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(p.add(192).cast()) });
        let scales = _mm512_castsi256_si512(scales16);
        let mut isum = [_mm512_setzero_si512(); R];
        for h in 0..2 {
            // SAFETY: bytes 64h..64h + 64 (low nibbles) and 128 + 32h..
            // 160 + 32h (high bits) of the block.
            let (ql0, ql1, qh) = unsafe {
                (
                    _mm256_loadu_si256(p.add(64 * h).cast()),
                    _mm256_loadu_si256(p.add(64 * h + 32).cast()),
                    _mm256_loadu_si256(p.add(128 + 32 * h).cast()),
                )
            };
            let [u0, u1, u2, u3] = q6k_chunks(ql0, ql1, qh);
            for (pair, u) in [join(u0, u1), join(u2, u3)].into_iter().enumerate() {
                let sv = _mm512_permutexvar_epi16(spreads[2 * h + pair], scales);
                for (r, isum) in isum.iter_mut().enumerate() {
                    let y = &t.qs[r * k + b * QK_K + 128 * h + 64 * pair..][..64];
                    // SAFETY: 64 activation values, in `t.qs`.
                    let y = unsafe { _mm512_loadu_si512(y.as_ptr().cast()) };
                    *isum = _mm512_dpwssd_epi32(*isum, _mm512_maddubs_epi16(u, y), sv);
                }
            }
        }
        for (r, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
            let bsums = &t.bsums[(r * nb + b) * 16..][..16];
            // SAFETY: 16 i16, in `t.bsums`.
            let bsums = unsafe { _mm256_loadu_si256(bsums.as_ptr().cast()) };
            let (isum, csum) = hsum2(halves(isum), _mm256_madd_epi16(bsums, scales16));
            *acc = add_q6k(*acc, d, t.d[r * nb + b], isum - 32 * csum);
        }
    }
    out[..R].copy_from_slice(&acc);
}
