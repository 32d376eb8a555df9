//! The AVX-512 kernels (F, BW and VNNI): 64 weight values at a time.
//! The K-quants run `vpmaddubsw` then `vpdpwssd` (pairs of i16 by the
//! sub-blocks' scales, added into i32 lanes in one instruction); Q8_0,
//! Q4_0 and Q5_0 take two blocks per register and `vpdpbusd` (four
//! unsigned-by-signed byte products into each i32 lane). Every sum of
//! integers is exact; the f32 steps are the portable kernels', so the
//! bits are theirs.

use std::arch::x86_64::*;

use super::avx2::{hsum2, lanes_values, reduce16};
use super::repack::group_block_bytes;
use super::{
    ActTile, GroupOut, Q4_0_BYTES, Q4K_BYTES, Q5K_BYTES, QK_K, QuantType, TILE_ROWS, add_k, f16_at,
    k_scales,
};

/// One weight row of `ty` times the tile's rows into `out[..rows]`.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vnni")]
pub(crate) fn row_times_tile(ty: QuantType, w: &[u8], t: &ActTile<'_>, out: &mut [f32; TILE_ROWS]) {
    assert!((1..=TILE_ROWS).contains(&t.rows));
    match ty {
        QuantType::Q4_0 => super::avx2::by_rows!(lanes, Q4_0_BYTES; t.rows; w, t, out),
        QuantType::Q5K => super::avx2::by_rows!(k4, true; t.rows; w, t, out),
        _ => unreachable!("{ty} is repacked"),
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
    // SAFETY: whole blocks.
    unsafe { join(lanes_values::<BYTES>(first), lanes_values::<BYTES>(second)) }
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

/// A group of [`super::repack::GROUP`] repacked weight rows of `ty` times the tile's
/// rows into `out[..rows]`, one output a 32-bit lane.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
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
            QuantType::Q8_0 => super::avx2::by_rows!(q8_0_group; t.rows; gb, t, out),
            QuantType::Q5_0 => super::avx2::by_rows!(q5_0_group; t.rows; gb, t, out),
            QuantType::Q4K => super::avx2::by_rows!(q4k_group; t.rows; gb, t, out),
            QuantType::Q6K => super::avx2::by_rows!(q6k_group; t.rows; gb, t, out),
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
#[target_feature(enable = "avx512f")]
unsafe fn four(at: *const i8) -> __m512i {
    // SAFETY: by the caller's promise.
    _mm512_set1_epi32(unsafe { at.cast::<i32>().read_unaligned() })
}

/// The 16 f16 at `at` as f32.
///
/// # Safety
///
/// `at..at + 32` is readable.
#[target_feature(enable = "avx512f")]
unsafe fn scales16(at: *const u8) -> __m512 {
    // SAFETY: by the caller's promise.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(at.cast()) })
}

/// `acc + (d * yd) * isum`, lane by lane ([`super::add_block`]).
#[target_feature(enable = "avx512f")]
fn add_scaled(acc: __m512, d: __m512, yd: f32, isum: __m512i) -> __m512 {
    let scale = _mm512_mul_ps(d, _mm512_set1_ps(yd));
    _mm512_add_ps(acc, _mm512_mul_ps(scale, _mm512_cvtepi32_ps(isum)))
}

/// Q8_0 or Q5_0 blocks' unsigned values (`w`, value + `OFFSET`) times
/// activation row `r`'s block `b`: the exact sums `sum q * y`.
///
/// # Safety
///
/// Row `r`'s block `b` is in `t.qs` and its sum in `t.bsums`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn block_sums<const OFFSET: i32>(
    w: &[__m512i; 8],
    t: &ActTile<'_>,
    r: usize,
    b: usize,
) -> __m512i {
    let nb = t.k / 32;
    // SAFETY: by the caller's promise.
    unsafe {
        let y = t.qs.as_ptr().add(r * t.k + b * 32);
        let mut s = [_mm512_setzero_si512(); 4];
        for (c, w) in w.iter().enumerate() {
            s[c % 4] = _mm512_dpbusd_epi32(s[c % 4], *w, four(y.add(4 * c)));
        }
        let off = _mm512_set1_epi32(OFFSET * i32::from(*t.bsums.get_unchecked(r * nb + b)));
        let sum = _mm512_add_epi32(_mm512_add_epi32(s[0], s[1]), _mm512_add_epi32(s[2], s[3]));
        _mm512_sub_epi32(sum, off)
    }
}

/// Q8_0: the values stored unsigned (value + 128) for `vpdpbusd`, the
/// 128 times the activations' block sum taken off.
///
/// # Safety
///
/// `gb` holds the `t.k / block` group-blocks of a group, and `t` holds `R`
/// rows (`R == t.rows`) of `t.k` values with their scales and sums: what
/// [`group_times_tile`] asserts before it calls a kernel.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn q8_0_group<const R: usize>(gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    let nb = t.k / 32;
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        // SAFETY: group-block `b` is in `gb`, the activations in `t`
        // (this function's safety contract).
        unsafe {
            let at = gb.as_ptr().add(b * group_block_bytes(QuantType::Q8_0));
            let d = scales16(at);
            let w: [__m512i; 8] =
                std::array::from_fn(|c| _mm512_loadu_si512(at.add(32 + 64 * c).cast()));
            for (r, acc) in acc.iter_mut().enumerate() {
                let isum = block_sums::<128>(&w, t, r, b);
                *acc = add_scaled(*acc, d, *t.d.get_unchecked(r * nb + b), isum);
            }
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        // SAFETY: 16 f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), acc) };
    }
}

/// Q5_0: the values unsigned (value + 16, nibble and fifth bit), the 16
/// times the activations' block sum taken off.
///
/// # Safety
///
/// `gb` holds the `t.k / block` group-blocks of a group, and `t` holds `R`
/// rows (`R == t.rows`) of `t.k` values with their scales and sums: what
/// [`group_times_tile`] asserts before it calls a kernel.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn q5_0_group<const R: usize>(gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    let nb = t.k / 32;
    let low = _mm512_set1_epi8(0x0F);
    let fifth = _mm512_set1_epi8(0x10);
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        // SAFETY: as in `q8_0_group`.
        unsafe {
            let at = gb.as_ptr().add(b * group_block_bytes(QuantType::Q5_0));
            let d = scales16(at);
            let qh = _mm512_loadu_si512(at.add(32).cast());
            let nib: [__m512i; 4] =
                std::array::from_fn(|v| _mm512_loadu_si512(at.add(96 + 64 * v).cast()));
            // Chunk `c`'s fifth bits: bit `8i + c` of the lane to `8i + 4`.
            let high = |c: usize| {
                let moved = match c {
                    0 => _mm512_slli_epi32::<4>(qh),
                    1 => _mm512_slli_epi32::<3>(qh),
                    2 => _mm512_slli_epi32::<2>(qh),
                    3 => _mm512_slli_epi32::<1>(qh),
                    4 => qh,
                    5 => _mm512_srli_epi32::<1>(qh),
                    6 => _mm512_srli_epi32::<2>(qh),
                    _ => _mm512_srli_epi32::<3>(qh),
                };
                _mm512_and_si512(moved, fifth)
            };
            let w: [__m512i; 8] = std::array::from_fn(|c| {
                let nibble = if c < 4 {
                    _mm512_and_si512(nib[c], low)
                } else {
                    _mm512_and_si512(_mm512_srli_epi16::<4>(nib[c - 4]), low)
                };
                _mm512_or_si512(nibble, high(c))
            });
            for (r, acc) in acc.iter_mut().enumerate() {
                let isum = block_sums::<16>(&w, t, r, b);
                *acc = add_scaled(*acc, d, *t.d.get_unchecked(r * nb + b), isum);
            }
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        // SAFETY: 16 f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), acc) };
    }
}

/// Q4_K: per sub-block pair, the 16 chunks of nibbles by `vpdpbusd`,
/// each sub-block's sum times its scale (`vpmulld`); the minimums by
/// `vpdpwssd` against pairs of the activations' sums of 16.
///
/// # Safety
///
/// `gb` holds the `t.k / block` group-blocks of a group, and `t` holds `R`
/// rows (`R == t.rows`) of `t.k` values with their scales and sums: what
/// [`group_times_tile`] asserts before it calls a kernel.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn q4k_group<const R: usize>(gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    let nb = t.k / QK_K;
    let low = _mm512_set1_epi8(0x0F);
    let m6 = _mm512_set1_epi32(63);
    let m4 = _mm512_set1_epi32(0x0F);
    let top = _mm512_set1_epi32(0x30);
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        // SAFETY: as in `q8_0_group`.
        unsafe {
            let at = gb.as_ptr().add(b * group_block_bytes(QuantType::Q4K));
            let d = scales16(at);
            let dmin = scales16(at.add(32));
            let z0 = _mm512_loadu_si512(at.add(64).cast());
            let z1 = _mm512_loadu_si512(at.add(128).cast());
            let z2 = _mm512_loadu_si512(at.add(192).cast());
            let shr = |v: __m512i, s: u32| _mm512_srl_epi32(v, _mm_cvtsi32_si128(s as i32));
            // Scale and minimum of sub-block `s` of every lane's row.
            let scale = |s: usize| {
                let s = s as u32;
                if s < 4 {
                    _mm512_and_si512(shr(z0, 8 * s), m6)
                } else {
                    let s = s - 4;
                    _mm512_or_si512(
                        _mm512_and_si512(shr(z2, 8 * s), m4),
                        _mm512_and_si512(shr(z0, 8 * s + 2), top),
                    )
                }
            };
            let min = |s: usize| {
                let s = s as u32;
                if s < 4 {
                    _mm512_and_si512(shr(z1, 8 * s), m6)
                } else {
                    let s = s - 4;
                    _mm512_or_si512(
                        _mm512_and_si512(shr(z2, 8 * s + 4), m4),
                        _mm512_and_si512(shr(z1, 8 * s + 2), top),
                    )
                }
            };
            let mut isum = [_mm512_setzero_si512(); R];
            for p in 0..4 {
                let q = at.add(256 + 512 * p);
                let v: [__m512i; 8] =
                    std::array::from_fn(|c| _mm512_loadu_si512(q.add(64 * c).cast()));
                let lo: [__m512i; 8] = std::array::from_fn(|c| _mm512_and_si512(v[c], low));
                let hi: [__m512i; 8] =
                    std::array::from_fn(|c| _mm512_and_si512(_mm512_srli_epi16::<4>(v[c]), low));
                let (s_lo, s_hi) = (scale(2 * p), scale(2 * p + 1));
                for (r, isum) in isum.iter_mut().enumerate() {
                    let y = t.qs.as_ptr().add(r * t.k + b * QK_K + 64 * p);
                    let mut a = _mm512_setzero_si512();
                    let mut h = _mm512_setzero_si512();
                    for c in 0..8 {
                        a = _mm512_dpbusd_epi32(a, lo[c], four(y.add(4 * c)));
                        h = _mm512_dpbusd_epi32(h, hi[c], four(y.add(32 + 4 * c)));
                    }
                    let part =
                        _mm512_add_epi32(_mm512_mullo_epi32(a, s_lo), _mm512_mullo_epi32(h, s_hi));
                    *isum = _mm512_add_epi32(*isum, part);
                }
            }
            // Each minimum in both i16 halves of its lane.
            let mins: [__m512i; 8] = std::array::from_fn(|s| {
                let m = min(s);
                _mm512_or_si512(m, _mm512_slli_epi32::<16>(m))
            });
            for (r, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
                let sums = t.bsums.as_ptr().add((r * nb + b) * 16);
                let mut msum = _mm512_setzero_si512();
                for (s, mins) in mins.iter().enumerate() {
                    let pair = _mm512_set1_epi32(sums.add(2 * s).cast::<i32>().read_unaligned());
                    msum = _mm512_dpwssd_epi32(msum, *mins, pair);
                }
                let yd = _mm512_set1_ps(*t.d.get_unchecked(r * nb + b));
                let a = _mm512_add_ps(
                    *acc,
                    _mm512_mul_ps(_mm512_mul_ps(d, yd), _mm512_cvtepi32_ps(isum)),
                );
                *acc = _mm512_sub_ps(
                    a,
                    _mm512_mul_ps(_mm512_mul_ps(dmin, yd), _mm512_cvtepi32_ps(msum)),
                );
            }
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        // SAFETY: 16 f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), acc) };
    }
}

/// Chunk `j` (values `4j..4j + 4` of each row, unsigned 6-bit) of the
/// Q6_K group-block at `at`.
///
/// # Safety
///
/// `at` points to a whole Q6_K group-block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn q6k_chunk(at: *const u8, j: usize) -> __m512i {
    let (low, top) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
    // SAFETY: the chunk's low and high bits, in the group-block.
    let (lows, highs) = unsafe {
        (
            _mm512_loadu_si512(at.add(288 + 64 * (j % 32)).cast()),
            _mm512_loadu_si512(at.add(2336 + 64 * (j % 16)).cast()),
        )
    };
    let (lows, high) = match j / 16 {
        0 => (lows, _mm512_slli_epi16::<4>(highs)),
        1 => (lows, _mm512_slli_epi16::<2>(highs)),
        2 => (_mm512_srli_epi16::<4>(lows), highs),
        _ => (_mm512_srli_epi16::<4>(lows), _mm512_srli_epi16::<2>(highs)),
    };
    _mm512_or_si512(_mm512_and_si512(lows, low), _mm512_and_si512(high, top))
}

/// Q6_K: each scale group's four chunks by `vpdpbusd` from 32 times the
/// activations' sum of the group taken off, times the group's scale
/// (`vpmulld`).
///
/// # Safety
///
/// `gb` holds the `t.k / block` group-blocks of a group, and `t` holds `R`
/// rows (`R == t.rows`) of `t.k` values with their scales and sums: what
/// [`group_times_tile`] asserts before it calls a kernel.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn q6k_group<const R: usize>(gb: &[u8], t: &ActTile<'_>, out: &mut GroupOut) {
    let nb = t.k / QK_K;
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        // SAFETY: as in `q8_0_group`.
        unsafe {
            let at = gb.as_ptr().add(b * group_block_bytes(QuantType::Q6K));
            let d = scales16(at);
            let mut isum = [_mm512_setzero_si512(); R];
            for g in 0..16 {
                let mut u = [_mm512_setzero_si512(); 4];
                for (e, u) in u.iter_mut().enumerate() {
                    *u = q6k_chunk(at, 4 * g + e);
                }
                let sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(at.add(32 + 16 * g).cast()));
                for (r, isum) in isum.iter_mut().enumerate() {
                    let y = t.qs.as_ptr().add(r * t.k + b * QK_K + 16 * g);
                    let sum = *t.bsums.get_unchecked((r * nb + b) * 16 + g);
                    let mut dot = _mm512_set1_epi32(-32 * i32::from(sum));
                    for (e, u) in u.iter().enumerate() {
                        dot = _mm512_dpbusd_epi32(dot, *u, four(y.add(4 * e)));
                    }
                    *isum = _mm512_add_epi32(*isum, _mm512_mullo_epi32(dot, sc));
                }
            }
            for (r, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
                *acc = add_scaled(*acc, d, *t.d.get_unchecked(r * nb + b), isum);
            }
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        // SAFETY: 16 f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), acc) };
    }
}
