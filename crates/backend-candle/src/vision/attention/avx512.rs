//! The tower attention's product for AVX-512F: sixteen lanes, tiles of
//! [`ROWS`] rows by two vectors, the last columns under a mask.

use std::arch::x86_64::{
    __m512, __mmask16, _mm512_fmadd_ps, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps,
    _mm512_set1_ps, _mm512_setzero_ps,
};

use super::Gemm;

/// Rows of `C` one tile takes.
const ROWS: usize = 8;

/// `C = A B` ([`super::gemm_on`]), sixteen lanes at a time.
///
/// # Safety
/// The CPU must support AVX-512F, and `a`, `b` and `c` must hold the
/// matrices `g` describes (`Gemm::fits`).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn gemm_avx512(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    let mut j = 0;
    while j < g.n {
        let w = (g.n - j).min(32);
        let (m0, m1) = (mask(w.min(16)), mask(w.saturating_sub(16)));
        let mut i = 0;
        while i + ROWS <= g.m {
            // SAFETY: rows `i..i + ROWS` and columns `j..j + w` are in the
            // matrices; the caller vouches for the buffers and the CPU.
            unsafe { tile::<ROWS>(g, a, b, c, i, j, m0, m1) };
            i += ROWS;
        }
        while i < g.m {
            // SAFETY: as above, for row `i`.
            unsafe { tile::<1>(g, a, b, c, i, j, m0, m1) };
            i += 1;
        }
        j += 32;
    }
}

/// The first `lanes` (at most 16) lanes.
fn mask(lanes: usize) -> __mmask16 {
    ((1u32 << lanes) - 1) as __mmask16
}

/// Rows `i..i + R`, columns `j..` under the masks `m0` (the first
/// sixteen) and `m1` (the next sixteen), of `C = A B`.
///
/// # Safety
/// AVX-512F; rows `i..i + R` of `A` and `C`, and the masked columns from
/// `j` of `B` and `C`, within the buffers.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn tile<const R: usize>(
    g: Gemm,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    i: usize,
    j: usize,
    m0: __mmask16,
    m1: __mmask16,
) {
    let mut acc0: [__m512; R] = [_mm512_setzero_ps(); R];
    let mut acc1: [__m512; R] = [_mm512_setzero_ps(); R];
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    for kk in 0..g.k {
        // SAFETY: row `kk` of `B` from column `j`: the masked lanes are
        // within it (the caller's contract); masked-off lanes are not read.
        let (b0, b1) = unsafe {
            let row = bp.add(kk * g.ldb + j);
            (
                _mm512_maskz_loadu_ps(m0, row),
                _mm512_maskz_loadu_ps(m1, row.wrapping_add(16)),
            )
        };
        for r in 0..R {
            // SAFETY: element `(i + r, kk)` of `A` is in `a`.
            let av = _mm512_set1_ps(unsafe { *ap.add((i + r) * g.lda + kk) });
            acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
            acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
        }
    }
    for r in 0..R {
        // SAFETY: row `i + r` of `C` from column `j`, the masked lanes
        // only.
        unsafe {
            let out = c.as_mut_ptr().add((i + r) * g.ldc + j);
            _mm512_mask_storeu_ps(out, m0, acc0[r]);
            _mm512_mask_storeu_ps(out.wrapping_add(16), m1, acc1[r]);
        }
    }
}
