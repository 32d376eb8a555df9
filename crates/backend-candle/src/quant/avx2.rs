//! The AVX2 kernels: 32 weight values at a time, `vpmaddubsw` (unsigned
//! weight bytes by signed activation bytes, pairs summed to i16) then
//! `vpmaddwd` (pairs of i16 by scales or ones, summed to i32). Every sum
//! of integers is exact; the f32 steps are the portable kernels'.

use std::arch::x86_64::*;

use super::repack::group_block_bytes;
use super::tile::quantize_row_body;
use super::{
    ActTile, GroupOut, Q4_0_BYTES, Q4K_BYTES, Q5K_BYTES, QK_K, QuantType, TILE_ROWS, add_k, f16_at,
    k_scales,
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
        QuantType::Q4_0 => by_rows!(lanes, Q4_0_BYTES; t.rows; w, t, out),
        QuantType::Q5K => by_rows!(k4, true; t.rows; w, t, out),
        _ => unreachable!("{ty} is repacked"),
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

/// The 32 values of a Q4_0 block (`BYTES` its size; offsets
/// removed) at `block`, as i8.
///
/// # Safety
///
/// `block` points to a whole block.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn lanes_values<const BYTES: usize>(block: *const u8) -> __m256i {
    match BYTES {
        // SAFETY: 16 bytes of nibbles after the scale, in the block.
        Q4_0_BYTES => _mm256_sub_epi8(unsafe { nibbles(block.add(2)) }, _mm256_set1_epi8(8)),
        _ => unreachable!("only Q4_0 is not repacked"),
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

/// A group of [`super::repack::GROUP`] repacked weight rows of `ty` times
/// the tile's rows into `out[..rows]`: the 16 lanes of the AVX-512
/// kernels as two halves of eight.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn group_times_tile(ty: QuantType, gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    assert!((1..=TILE_ROWS).contains(&t.rows));
    let nb = t.k / ty.block_values();
    let sums = if ty.block_values() == QK_K { 16 } else { 1 };
    assert!(
        gb.len() >= nb * group_block_bytes(ty)
            && t.qs.len() >= t.rows * t.k
            && t.d.len() >= t.rows * nb
            && t.bsums.len() >= t.rows * nb * sums
    );
    // SAFETY: the sizes the kernels read are asserted just above, and
    // `by_rows!` instantiates each kernel with `R == t.rows`.
    unsafe {
        match ty {
            QuantType::Q8_0 => by_rows!(q8_0_group; t.rows; gb, t, out),
            QuantType::Q5_0 => by_rows!(q5_0_group; t.rows; gb, t, out),
            QuantType::Q4K => by_rows!(q4k_group; t.rows; gb, t, out),
            QuantType::Q6K => by_rows!(q6k_group; t.rows; gb, t, out),
            QuantType::Q4_0 | QuantType::Q5K => unreachable!("{ty} is not repacked"),
        }
    }
}

/// Four activation values at `at` (as one i32) in every lane.
///
/// # Safety
///
/// `at..at + 4` is readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn four(at: *const i8) -> __m256i {
    // SAFETY: by the caller's promise.
    _mm256_set1_epi32(unsafe { at.cast::<i32>().read_unaligned() })
}

/// The eight f16 at `at` as f32.
///
/// # Safety
///
/// `at..at + 16` is readable.
#[target_feature(enable = "avx2,f16c")]
unsafe fn scales8(at: *const u8) -> __m256 {
    // SAFETY: by the caller's promise.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(at.cast()) })
}

/// `acc + (d * yd) * isum`, lane by lane ([`super::add_block`]).
#[target_feature(enable = "avx2")]
fn add_scaled(acc: __m256, d: __m256, yd: f32, isum: __m256i) -> __m256 {
    let scale = _mm256_mul_ps(d, _mm256_set1_ps(yd));
    _mm256_add_ps(acc, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(isum)))
}

/// Each i32 lane's low 16 bits in both its halves (for `vpmaddwd`).
#[target_feature(enable = "avx2")]
fn both_halves(v: __m256i) -> __m256i {
    _mm256_or_si256(
        _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)),
        _mm256_slli_epi32::<16>(v),
    )
}

/// Stores the halves' accumulators.
#[target_feature(enable = "avx2")]
fn store<const R: usize>(acc: &[[__m256; 2]; R], out: &mut GroupOut) {
    for (o, acc) in out.iter_mut().zip(acc) {
        for (h, acc) in acc.iter().enumerate() {
            // SAFETY: eight f32 of 16.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(8 * h), *acc) };
        }
    }
}

/// Q8_0: the values (stored unsigned, `^ 0x80` undoes it), `|q|` by `y`
/// with `q`'s sign (`vpmaddubsw`, no pair saturates),
/// then pairs to i32 (`vpmaddwd` by ones).
///
/// # Safety
///
/// `gb` holds the `t.k / block` group-blocks of a group, and `t` holds `R`
/// rows (`R == t.rows`) of `t.k` values with their scales and sums: what
/// [`group_times_tile`] asserts before it calls a kernel.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_group<const R: usize>(gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    let nb = t.k / 32;
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for b in 0..nb {
        // SAFETY: group-block `b` is in `gb`, the activations in `t`
        // (this function's safety contract).
        unsafe {
            let at = gb.as_ptr().add(b * group_block_bytes(QuantType::Q8_0));
            for h in 0..2 {
                let d = scales8(at.add(16 * h));
                let w: [__m256i; 8] = std::array::from_fn(|c| {
                    let stored = _mm256_loadu_si256(at.add(32 + 64 * c + 32 * h).cast());
                    _mm256_xor_si256(stored, _mm256_set1_epi8(0x80_u8 as i8))
                });
                let aw: [__m256i; 8] = std::array::from_fn(|c| _mm256_abs_epi8(w[c]));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let y = t.qs.as_ptr().add(r * t.k + b * 32);
                    let mut s = _mm256_setzero_si256();
                    for c in 0..8 {
                        let p =
                            _mm256_maddubs_epi16(aw[c], _mm256_sign_epi8(four(y.add(4 * c)), w[c]));
                        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
                    }
                    acc[h] = add_scaled(acc[h], d, *t.d.get_unchecked(r * nb + b), s);
                }
            }
        }
    }
    store(&acc, out);
}

/// Q5_0: the unsigned values (value + 16) by `vpmaddubsw`, four chunks
/// added in i16 (at most 31496), the 16 times the block sum taken off.
///
/// # Safety
///
/// `gb` holds the `t.k / block` group-blocks of a group, and `t` holds `R`
/// rows (`R == t.rows`) of `t.k` values with their scales and sums: what
/// [`group_times_tile`] asserts before it calls a kernel.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_group<const R: usize>(gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    let nb = t.k / 32;
    let ones = _mm256_set1_epi16(1);
    let low = _mm256_set1_epi8(0x0F);
    let fifth = _mm256_set1_epi8(0x10);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for b in 0..nb {
        // SAFETY: as in `q8_0_group`.
        unsafe {
            let at = gb.as_ptr().add(b * group_block_bytes(QuantType::Q5_0));
            for h in 0..2 {
                let d = scales8(at.add(16 * h));
                let qh = _mm256_loadu_si256(at.add(32 + 32 * h).cast());
                let nib: [__m256i; 4] = std::array::from_fn(|v| {
                    _mm256_loadu_si256(at.add(96 + 64 * v + 32 * h).cast())
                });
                let w: [__m256i; 8] = std::array::from_fn(|c| {
                    let moved = match c {
                        0 => _mm256_slli_epi32::<4>(qh),
                        1 => _mm256_slli_epi32::<3>(qh),
                        2 => _mm256_slli_epi32::<2>(qh),
                        3 => _mm256_slli_epi32::<1>(qh),
                        4 => qh,
                        5 => _mm256_srli_epi32::<1>(qh),
                        6 => _mm256_srli_epi32::<2>(qh),
                        _ => _mm256_srli_epi32::<3>(qh),
                    };
                    let nibble = if c < 4 {
                        _mm256_and_si256(nib[c], low)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16::<4>(nib[c - 4]), low)
                    };
                    _mm256_or_si256(nibble, _mm256_and_si256(moved, fifth))
                });
                for (r, acc) in acc.iter_mut().enumerate() {
                    let y = t.qs.as_ptr().add(r * t.k + b * 32);
                    let p = |c: usize| _mm256_maddubs_epi16(w[c], four(y.add(4 * c)));
                    let s0 = _mm256_add_epi16(
                        _mm256_add_epi16(p(0), p(1)),
                        _mm256_add_epi16(p(2), p(3)),
                    );
                    let s1 = _mm256_add_epi16(
                        _mm256_add_epi16(p(4), p(5)),
                        _mm256_add_epi16(p(6), p(7)),
                    );
                    let off =
                        _mm256_set1_epi32(-16 * i32::from(*t.bsums.get_unchecked(r * nb + b)));
                    let s = _mm256_add_epi32(
                        _mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones)),
                        off,
                    );
                    acc[h] = add_scaled(acc[h], d, *t.d.get_unchecked(r * nb + b), s);
                }
            }
        }
    }
    store(&acc, out);
}

/// Q4_K: a sub-block's eight chunks by `vpmaddubsw` added in i16 (at most
/// 30480), then times its scale (`vpmaddwd`); the minimums by
/// `vpmaddwd` against pairs of the activations' sums of 16.
///
/// # Safety
///
/// `gb` holds the `t.k / block` group-blocks of a group, and `t` holds `R`
/// rows (`R == t.rows`) of `t.k` values with their scales and sums: what
/// [`group_times_tile`] asserts before it calls a kernel.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_group<const R: usize>(gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    let nb = t.k / QK_K;
    let low = _mm256_set1_epi8(0x0F);
    let m6 = _mm256_set1_epi32(63);
    let m4 = _mm256_set1_epi32(0x0F);
    let top = _mm256_set1_epi32(0x30);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for b in 0..nb {
        // SAFETY: as in `q8_0_group`.
        unsafe {
            let at = gb.as_ptr().add(b * group_block_bytes(QuantType::Q4K));
            for h in 0..2 {
                let d = scales8(at.add(16 * h));
                let dmin = scales8(at.add(32 + 16 * h));
                let z0 = _mm256_loadu_si256(at.add(64 + 32 * h).cast());
                let z1 = _mm256_loadu_si256(at.add(128 + 32 * h).cast());
                let z2 = _mm256_loadu_si256(at.add(192 + 32 * h).cast());
                let shr = |v: __m256i, s: u32| _mm256_srl_epi32(v, _mm_cvtsi32_si128(s as i32));
                let scale = |s: usize| {
                    let s = s as u32;
                    if s < 4 {
                        _mm256_and_si256(shr(z0, 8 * s), m6)
                    } else {
                        let s = s - 4;
                        _mm256_or_si256(
                            _mm256_and_si256(shr(z2, 8 * s), m4),
                            _mm256_and_si256(shr(z0, 8 * s + 2), top),
                        )
                    }
                };
                let min = |s: usize| {
                    let s = s as u32;
                    if s < 4 {
                        _mm256_and_si256(shr(z1, 8 * s), m6)
                    } else {
                        let s = s - 4;
                        _mm256_or_si256(
                            _mm256_and_si256(shr(z2, 8 * s + 4), m4),
                            _mm256_and_si256(shr(z1, 8 * s + 2), top),
                        )
                    }
                };
                let mut isum = [_mm256_setzero_si256(); R];
                for p in 0..4 {
                    let q = at.add(256 + 512 * p + 32 * h);
                    let v: [__m256i; 8] =
                        std::array::from_fn(|c| _mm256_loadu_si256(q.add(64 * c).cast()));
                    let (s_lo, s_hi) = (both_halves(scale(2 * p)), both_halves(scale(2 * p + 1)));
                    for (r, isum) in isum.iter_mut().enumerate() {
                        let y = t.qs.as_ptr().add(r * t.k + b * QK_K + 64 * p);
                        let mut a = _mm256_setzero_si256();
                        let mut e = _mm256_setzero_si256();
                        for (c, v) in v.iter().enumerate() {
                            let lo = _mm256_and_si256(*v, low);
                            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(*v), low);
                            a = _mm256_add_epi16(a, _mm256_maddubs_epi16(lo, four(y.add(4 * c))));
                            e = _mm256_add_epi16(
                                e,
                                _mm256_maddubs_epi16(hi, four(y.add(32 + 4 * c))),
                            );
                        }
                        let part = _mm256_add_epi32(
                            _mm256_madd_epi16(a, s_lo),
                            _mm256_madd_epi16(e, s_hi),
                        );
                        *isum = _mm256_add_epi32(*isum, part);
                    }
                }
                let mins: [__m256i; 8] = std::array::from_fn(|s| both_halves(min(s)));
                for (r, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
                    let sums = t.bsums.as_ptr().add((r * nb + b) * 16);
                    let mut msum = _mm256_setzero_si256();
                    for (s, mins) in mins.iter().enumerate() {
                        let pair =
                            _mm256_set1_epi32(sums.add(2 * s).cast::<i32>().read_unaligned());
                        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(*mins, pair));
                    }
                    let yd = _mm256_set1_ps(*t.d.get_unchecked(r * nb + b));
                    let a = _mm256_add_ps(
                        acc[h],
                        _mm256_mul_ps(_mm256_mul_ps(d, yd), _mm256_cvtepi32_ps(isum)),
                    );
                    acc[h] = _mm256_sub_ps(
                        a,
                        _mm256_mul_ps(_mm256_mul_ps(dmin, yd), _mm256_cvtepi32_ps(msum)),
                    );
                }
            }
        }
    }
    store(&acc, out);
}

/// Q6_K: a scale group's four chunks by `vpmaddubsw`, two added in i16
/// (at most 32004), times the group's scale (`vpmaddwd`), and 32 times
/// the activations' sum of the group times the scale taken off.
///
/// # Safety
///
/// `gb` holds the `t.k / block` group-blocks of a group, and `t` holds `R`
/// rows (`R == t.rows`) of `t.k` values with their scales and sums: what
/// [`group_times_tile`] asserts before it calls a kernel.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_group<const R: usize>(gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    let nb = t.k / QK_K;
    let low = _mm256_set1_epi8(0x0F);
    let top = _mm256_set1_epi8(0x30);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for b in 0..nb {
        // SAFETY: as in `q8_0_group`.
        unsafe {
            let at = gb.as_ptr().add(b * group_block_bytes(QuantType::Q6K));
            for h in 0..2 {
                let d = scales8(at.add(16 * h));
                let mut isum = [_mm256_setzero_si256(); R];
                for g in 0..16 {
                    let (q, gi) = (g % 4, g / 4);
                    let sc = both_halves(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        at.add(32 + 16 * g + 8 * h).cast(),
                    )));
                    let u: [__m256i; 4] = std::array::from_fn(|e| {
                        let hb =
                            _mm256_loadu_si256(at.add(2336 + 64 * (4 * q + e) + 32 * h).cast());
                        let la =
                            || _mm256_loadu_si256(at.add(288 + 64 * (4 * q + e) + 32 * h).cast());
                        let lb = || {
                            _mm256_loadu_si256(at.add(288 + 64 * (16 + 4 * q + e) + 32 * h).cast())
                        };
                        let (lows, high) = match gi {
                            0 => (la(), _mm256_slli_epi16::<4>(hb)),
                            1 => (lb(), _mm256_slli_epi16::<2>(hb)),
                            2 => (_mm256_srli_epi16::<4>(la()), hb),
                            _ => (_mm256_srli_epi16::<4>(lb()), _mm256_srli_epi16::<2>(hb)),
                        };
                        _mm256_or_si256(_mm256_and_si256(lows, low), _mm256_and_si256(high, top))
                    });
                    for (r, isum) in isum.iter_mut().enumerate() {
                        let y = t.qs.as_ptr().add(r * t.k + b * QK_K + 16 * g);
                        let p = |e: usize| _mm256_maddubs_epi16(u[e], four(y.add(4 * e)));
                        let s0 = _mm256_madd_epi16(_mm256_add_epi16(p(0), p(1)), sc);
                        let s1 = _mm256_madd_epi16(_mm256_add_epi16(p(2), p(3)), sc);
                        let bsum = i32::from(*t.bsums.get_unchecked((r * nb + b) * 16 + g));
                        let off = -16 * bsum;
                        let off = _mm256_set1_epi32((off & 0xFFFF) | (off << 16));
                        let part =
                            _mm256_add_epi32(_mm256_add_epi32(s0, s1), _mm256_madd_epi16(sc, off));
                        *isum = _mm256_add_epi32(*isum, part);
                    }
                }
                for (r, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
                    acc[h] = add_scaled(acc[h], d, *t.d.get_unchecked(r * nb + b), isum);
                }
            }
        }
    }
    store(&acc, out);
}

/// [`super::acts`]' `quantize_row` compiled for AVX2.
#[target_feature(enable = "avx2,fma")]
pub(super) fn quantize_row_avx2(
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    bsums: &mut [i16],
    sum_len: usize,
    block: usize,
) {
    quantize_row_body(x, qs, d, bsums, sum_len, block);
}
