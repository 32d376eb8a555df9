//! The tower attention's product for AVX2 with FMA: eight lanes, tiles
//! of [`ROWS`] rows by two vectors, the last columns under a mask.

use std::arch::x86_64::{
    __m256, __m256i, _mm256_cmpgt_epi32, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_maskload_ps,
    _mm256_maskstore_ps, _mm256_set1_epi32, _mm256_set1_ps, _mm256_setr_epi32, _mm256_setzero_ps,
    _mm256_storeu_ps,
};

use super::Gemm;

/// Rows of `C` one tile takes.
const ROWS: usize = 4;

/// `C = A B` ([`super::gemm_on`]), eight lanes at a time.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `a`, `b` and `c` must hold the
/// matrices `g` describes (`Gemm::fits`).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn gemm_avx2(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    let mut j = 0;
    while j < g.n {
        let w = (g.n - j).min(16);
        let full = w == 16;
        let (m0, m1) = (mask(w.min(8)), mask(w.saturating_sub(8)));
        let mut i = 0;
        while i + ROWS <= g.m {
            // SAFETY: rows `i..i + ROWS` and columns `j..j + w` are in the
            // matrices; the caller vouches for the buffers and the CPU.
            unsafe {
                match full {
                    true => tile::<ROWS, true>(g, a, b, c, i, j, m0, m1),
                    false => tile::<ROWS, false>(g, a, b, c, i, j, m0, m1),
                }
            };
            i += ROWS;
        }
        while i < g.m {
            // SAFETY: as above, for row `i`.
            unsafe {
                match full {
                    true => tile::<1, true>(g, a, b, c, i, j, m0, m1),
                    false => tile::<1, false>(g, a, b, c, i, j, m0, m1),
                }
            };
            i += 1;
        }
        j += 16;
    }
}

/// The first `lanes` (at most 8) lanes, as `vmaskmovps` takes them.
#[target_feature(enable = "avx2")]
fn mask(lanes: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(lanes as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// Rows `i..i + R`, columns `j..` (all sixteen where `FULL`, else those
/// under the masks `m0` and `m1`), of `C = A B`.
///
/// # Safety
/// AVX2 and FMA; rows `i..i + R` of `A` and `C`, and the (masked) columns
/// from `j` of `B` and `C`, within the buffers.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn tile<const R: usize, const FULL: bool>(
    g: Gemm,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    i: usize,
    j: usize,
    m0: __m256i,
    m1: __m256i,
) {
    let mut acc0: [__m256; R] = [_mm256_setzero_ps(); R];
    let mut acc1: [__m256; R] = [_mm256_setzero_ps(); R];
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    for kk in 0..g.k {
        // SAFETY: row `kk` of `B` from column `j`: all sixteen values
        // where `FULL`, else the masked lanes, are within it; masked-off
        // lanes are not read.
        let (b0, b1) = unsafe {
            let row = bp.add(kk * g.ldb + j);
            match FULL {
                true => (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8))),
                false => (
                    _mm256_maskload_ps(row, m0),
                    _mm256_maskload_ps(row.wrapping_add(8), m1),
                ),
            }
        };
        for r in 0..R {
            // SAFETY: element `(i + r, kk)` of `A` is in `a`.
            let av = _mm256_set1_ps(unsafe { *ap.add((i + r) * g.lda + kk) });
            acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
            acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
        }
    }
    for r in 0..R {
        // SAFETY: row `i + r` of `C` from column `j`: sixteen values where
        // `FULL`, else the masked lanes only.
        unsafe {
            let out = c.as_mut_ptr().add((i + r) * g.ldc + j);
            match FULL {
                true => {
                    _mm256_storeu_ps(out, acc0[r]);
                    _mm256_storeu_ps(out.add(8), acc1[r]);
                }
                false => {
                    _mm256_maskstore_ps(out, m0, acc0[r]);
                    _mm256_maskstore_ps(out.wrapping_add(8), m1, acc1[r]);
                }
            }
        }
    }
}
