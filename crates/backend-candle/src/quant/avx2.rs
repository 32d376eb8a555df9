//! The AVX2 kernels: 32 weight values at a time, `vpmaddubsw` (unsigned
//! weight bytes by signed activation bytes, pairs summed to i16) then
//! `vpmaddwd` (pairs of i16 by scales or ones, summed to i32). Every sum
//! of integers is exact; the f32 steps are the portable kernels'.

use std::arch::x86_64::*;

use super::{
    ActTile, Q4_0_BYTES, Q4K_BYTES, Q5_0_BYTES, Q5K_BYTES, Q6K_BYTES, Q8_0_BYTES, QK_K, QuantType,
    TILE_ROWS, add_k, add_q6k, f16_at, k_scales,
};

/// Runs `$kernel::<R, ..>` for the tile's row count `R`.
macro_rules! by_rows {
    ($kernel:ident $(, $flag:expr)?; $rows:expr; $($arg:expr),*) => {
        match $rows {
            1 => $kernel::<1 $(, $flag)?>($($arg),*),
            2 => $kernel::<2 $(, $flag)?>($($arg),*),
            3 => $kernel::<3 $(, $flag)?>($($arg),*),
            4 => $kernel::<4 $(, $flag)?>($($arg),*),
            5 => $kernel::<5 $(, $flag)?>($($arg),*),
            6 => $kernel::<6 $(, $flag)?>($($arg),*),
            7 => $kernel::<7 $(, $flag)?>($($arg),*),
            _ => $kernel::<8 $(, $flag)?>($($arg),*),
        }
    };
}
pub(crate) use by_rows;

/// One weight row of `ty` times the tile's rows into `out[..rows]`.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn row_times_tile(ty: QuantType, w: &[u8], t: &ActTile<'_>, out: &mut [f32; TILE_ROWS]) {
    assert!((1..=TILE_ROWS).contains(&t.rows));
    match ty {
        QuantType::Q8_0 => by_rows!(lanes, Q8_0_BYTES; t.rows; w, t, out),
        QuantType::Q4_0 => by_rows!(lanes, Q4_0_BYTES; t.rows; w, t, out),
        QuantType::Q5_0 => by_rows!(lanes, Q5_0_BYTES; t.rows; w, t, out),
        QuantType::Q4K => by_rows!(k4, false; t.rows; w, t, out),
        QuantType::Q5K => by_rows!(k4, true; t.rows; w, t, out),
        QuantType::Q6K => by_rows!(q6k; t.rows; w, t, out),
    }
}

/// The sums of the eight i32 lanes of `a` and of `b`.
#[target_feature(enable = "avx2")]
pub(crate) fn hsum2(a: __m256i, b: __m256i) -> (i32, i32) {
    let pairs = _mm256_hadd_epi32(a, b);
    let quads = _mm_add_epi32(
        _mm256_castsi256_si128(pairs),
        _mm256_extracti128_si256::<1>(pairs),
    );
    let sums = _mm_hadd_epi32(quads, quads);
    (_mm_cvtsi128_si32(sums), _mm_extract_epi32::<1>(sums))
}

/// The 16 bytes of nibbles at `at` as 32 unsigned values: the low
/// nibbles, then the high ones.
///
/// # Safety
///
/// `at..at + 16` is readable.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn nibbles(at: *const u8) -> __m256i {
    // SAFETY: 16 bytes, readable by the caller's promise.
    let raw = unsafe { _mm_loadu_si128(at.cast()) };
    let low = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(raw, low);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(raw), low);
    _mm256_set_m128i(hi, lo)
}

/// The fifth bits of a Q5_0 block at `block` (bytes 2..6), bit `i` of
/// the little-endian u32 for value `i`.
///
/// # Safety
///
/// `block` points to a whole Q5_0 block.
#[inline(always)]
pub(crate) unsafe fn q5_0_high(block: *const u8) -> u32 {
    // SAFETY: bytes 2..6 of the block.
    u32::from_le_bytes(unsafe { block.add(2).cast::<[u8; 4]>().read() })
}

/// The 32 values of a Q8_0, Q4_0 or Q5_0 block (`BYTES` its size;
/// offsets removed) at `block`, as i8.
///
/// # Safety
///
/// `block` points to a whole block.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn lanes_values<const BYTES: usize>(block: *const u8) -> __m256i {
    match BYTES {
        // SAFETY: 16 bytes of nibbles after the scale, in the block.
        Q4_0_BYTES => _mm256_sub_epi8(unsafe { nibbles(block.add(2)) }, _mm256_set1_epi8(8)),
        Q5_0_BYTES => {
            // SAFETY: 16 bytes of nibbles after the scale and fifth bits,
            // in the block.
            let q = unsafe { nibbles(block.add(6)) };
            // Byte `i` of `qh` in bytes `8 i..8 i + 8`, then each byte's
            // own bit (`i % 8`) picked out: all ones where it is set.
            // SAFETY: a whole block.
            let qh = _mm256_set1_epi32(unsafe { q5_0_high(block) } as i32);
            let spread = _mm256_setr_epi64x(
                0,
                0x0101_0101_0101_0101,
                0x0202_0202_0202_0202,
                0x0303_0303_0303_0303,
            );
            let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
            let set =
                _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(qh, spread), bit), bit);
            // `nibble - 16` as i8 (`0xF0 | nibble`) where the bit is clear,
            // `nibble` where it is set.
            _mm256_or_si256(q, _mm256_andnot_si256(set, _mm256_set1_epi8(0xF0_u8 as i8)))
        }
        // SAFETY: 32 values after the scale, in the block.
        _ => unsafe { _mm256_loadu_si256(block.add(2).cast()) },
    }
}

/// A Q8_0, Q4_0 or Q5_0 weight row (`BYTES` a block) times `R`
/// activation rows, in the lanes of [`super::portable`]: two eight-lane
/// accumulators per row, even and odd blocks.
#[target_feature(enable = "avx2,fma")]
fn lanes<const R: usize, const BYTES: usize>(
    w: &[u8],
    t: &ActTile<'_>,
    out: &mut [f32; TILE_ROWS],
) {
    let (k, nb) = (t.k, t.k / 32);
    assert!(t.rows == R && w.len() >= nb * BYTES && t.qs.len() >= R * k && t.d.len() >= R * nb);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for b in 0..nb {
        let block = &w[b * BYTES..(b + 1) * BYTES];
        let dw = f16_at(block, 0);
        // SAFETY: `block` is a whole block.
        let q = unsafe { lanes_values::<BYTES>(block.as_ptr()) };
        let aq = _mm256_abs_epi8(q);
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: row `r`'s block `b` is in `t.qs` (asserted above).
            let y = unsafe { _mm256_loadu_si256(t.qs.as_ptr().add(r * k + b * 32).cast()) };
            // |q| * (y with q's sign): the products q * y, the first
            // factor unsigned as `vpmaddubsw` wants (|-128| = 128 as u8;
            // with |y| <= 127 no pair saturates).
            let pairs = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(y, q));
            let sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
            let scale = _mm256_set1_ps(dw * t.d[r * nb + b]);
            acc[b % 2] = _mm256_add_ps(acc[b % 2], _mm256_mul_ps(scale, sums));
        }
    }
    for (o, acc) in out.iter_mut().zip(&acc) {
        *o = reduce16(acc[0], acc[1]);
    }
}

/// [`super::reduce16`] of the lanes `even` (0-7) and `odd` (8-15).
#[target_feature(enable = "avx2")]
pub(crate) fn reduce16(even: __m256, odd: __m256) -> f32 {
    let s8 = _mm256_add_ps(even, odd);
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2)))
}

/// A Q4_K (`FIFTH` false) or Q5_K weight row times `R` activation rows.
#[target_feature(enable = "avx2,fma")]
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
    let mut acc = [0f32; R];
    for b in 0..nb {
        let block = &w[b * bytes..(b + 1) * bytes];
        let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
        let (sc, mins) = k_scales(&block[4..16]);
        let mins: [i16; 16] = std::array::from_fn(|i| i16::from(mins[i / 2]));
        // SAFETY: 16 i16 on the stack.
        let mins = unsafe { _mm256_loadu_si256(mins.as_ptr().cast()) };
        let qs = &block[if FIFTH { 48 } else { 16 }..];
        // SAFETY: the fifth bits are bytes 16..48 of a Q5_K block.
        let qh = FIFTH.then(|| unsafe { _mm256_loadu_si256(block[16..48].as_ptr().cast()) });
        let mut isum = [_mm256_setzero_si256(); R];
        for c in 0..4 {
            // SAFETY: chunk `c`'s 32 bytes of nibbles, in the block.
            let raw = unsafe { _mm256_loadu_si256(qs[32 * c..].as_ptr().cast()) };
            let mut lo = _mm256_and_si256(raw, low);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), low);
            if let Some(qh) = qh {
                // Bit `2c` of each byte for the low sub-block, `2c + 1`
                // for the high one, as 16.
                let shift = |s: usize| _mm_cvtsi32_si128(s as i32);
                let bit_lo = _mm256_and_si256(_mm256_srl_epi16(qh, shift(2 * c)), one);
                let bit_hi = _mm256_and_si256(_mm256_srl_epi16(qh, shift(2 * c + 1)), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(bit_lo));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16::<4>(bit_hi));
            }
            let s_lo = _mm256_set1_epi16(i16::from(sc[2 * c]));
            let s_hi = _mm256_set1_epi16(i16::from(sc[2 * c + 1]));
            for (r, isum) in isum.iter_mut().enumerate() {
                let y = t.qs[r * k + b * QK_K + 64 * c..][..64].as_ptr();
                // SAFETY: 64 activation values, in `t.qs`.
                let (y0, y1) = unsafe {
                    (
                        _mm256_loadu_si256(y.cast()),
                        _mm256_loadu_si256(y.add(32).cast()),
                    )
                };
                let p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s_lo);
                let p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s_hi);
                *isum = _mm256_add_epi32(*isum, _mm256_add_epi32(p_lo, p_hi));
            }
        }
        for (r, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
            let bsums = &t.bsums[(r * nb + b) * 16..][..16];
            // SAFETY: 16 i16, in `t.bsums`.
            let bsums = unsafe { _mm256_loadu_si256(bsums.as_ptr().cast()) };
            let (isum, msum) = hsum2(isum, _mm256_madd_epi16(bsums, mins));
            *acc = add_k(*acc, d, dmin, t.d[r * nb + b], isum, msum);
        }
    }
    out[..R].copy_from_slice(&acc);
}

/// Shuffles of a Q6_K half-block's eight i16 scales (in both 128-bit
/// lanes) that give chunk `c`'s: scale `2c` in the low lane, `2c + 1` in
/// the high one.
#[target_feature(enable = "avx2")]
fn q6k_scale_shuffles() -> [__m256i; 4] {
    std::array::from_fn(|c| {
        let (a, b) = (4 * c as i8, 4 * c as i8 + 2);
        let lo = _mm_set_epi8(
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
        );
        let hi = _mm_set_epi8(
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
        );
        _mm256_set_m128i(hi, lo)
    })
}

/// The four 32-value chunks of a Q6_K half-block (unsigned 6-bit values)
/// from its 64 bytes of low nibbles (`ql0`, `ql1`) and 32 of high bit
/// pairs (`qh`).
#[target_feature(enable = "avx2")]
pub(crate) fn q6k_chunks(ql0: __m256i, ql1: __m256i, qh: __m256i) -> [__m256i; 4] {
    let low = _mm256_set1_epi8(0x0F);
    let bits = |mask: u8| _mm256_and_si256(qh, _mm256_set1_epi8(mask as i8));
    [
        _mm256_or_si256(
            _mm256_and_si256(ql0, low),
            _mm256_slli_epi16::<4>(bits(0x03)),
        ),
        _mm256_or_si256(
            _mm256_and_si256(ql1, low),
            _mm256_slli_epi16::<2>(bits(0x0C)),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), low),
            bits(0x30),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low),
            _mm256_srli_epi16::<2>(bits(0xC0)),
        ),
    ]
}

/// A Q6_K weight row times `R` activation rows.
#[target_feature(enable = "avx2,fma")]
fn q6k<const R: usize>(w: &[u8], t: &ActTile<'_>, out: &mut [f32; TILE_ROWS]) {
    let (k, nb) = (t.k, t.k / QK_K);
    assert!(
        t.rows == R
            && w.len() >= nb * Q6K_BYTES
            && t.qs.len() >= R * k
            && t.d.len() >= R * nb
            && t.bsums.len() >= R * nb * 16
    );
    let shuffles = q6k_scale_shuffles();
    let mut acc = [0f32; R];
    for b in 0..nb {
        let block = &w[b * Q6K_BYTES..(b + 1) * Q6K_BYTES];
        let d = f16_at(block, 208);
        let p = block.as_ptr();
        // SAFETY: the 16 scales are bytes 192..208 of the block.
        let scales = unsafe { _mm_loadu_si128(p.add(192).cast()) };
        let scales16 = _mm256_cvtepi8_epi16(scales);
        let mut isum = [_mm256_setzero_si256(); R];
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
            let half_scales = _mm_cvtepi8_epi16(if h == 0 {
                scales
            } else {
                _mm_srli_si128::<8>(scales)
            });
            let half_scales = _mm256_broadcastsi128_si256(half_scales);
            for (c, u) in q6k_chunks(ql0, ql1, qh).into_iter().enumerate() {
                let sv = _mm256_shuffle_epi8(half_scales, shuffles[c]);
                for (r, isum) in isum.iter_mut().enumerate() {
                    let y = t.qs[r * k + b * QK_K + 128 * h + 32 * c..][..32].as_ptr();
                    // SAFETY: 32 activation values, in `t.qs`.
                    let y = unsafe { _mm256_loadu_si256(y.cast()) };
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), sv);
                    *isum = _mm256_add_epi32(*isum, p);
                }
            }
        }
        for (r, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
            let bsums = &t.bsums[(r * nb + b) * 16..][..16];
            // SAFETY: 16 i16, in `t.bsums`.
            let bsums = unsafe { _mm256_loadu_si256(bsums.as_ptr().cast()) };
            let (isum, csum) = hsum2(isum, _mm256_madd_epi16(bsums, scales16));
            *acc = add_q6k(*acc, d, t.d[r * nb + b], isum - 32 * csum);
        }
    }
    out[..R].copy_from_slice(&acc);
}
