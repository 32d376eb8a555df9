//! The activations for AVX-512F: sixteen lanes, the operations of
//! [`super::avx2`]'s on wider vectors.

use super::{EXP_HIGH, EXP_LOW, EXP_POLY, LN2_HIGH, LN2_LOW, silu_mul_portable};

/// One row of [`super::silu_mul_rows`], sixteen values at a time: the operations
/// of [`super::avx2::silu_mul_avx2`] on wider vectors, so the same bits.
#[target_feature(enable = "avx512f")]
pub(super) fn silu_mul_avx512(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_div_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps,
        _mm512_setzero_ps, _mm512_storeu_ps, _mm512_sub_ps,
    };
    let n = out.len().min(gate.len()).min(up.len());
    let main = n - n % 16;
    let one = _mm512_set1_ps(1.0);
    let mut at = 0;
    while at < main {
        // SAFETY: `at + 16 <= main <= n`, within all three slices.
        unsafe {
            let g = _mm512_loadu_ps(gate.as_ptr().add(at));
            let u = _mm512_loadu_ps(up.as_ptr().add(at));
            let e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
            let v = _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u);
            _mm512_storeu_ps(out.as_mut_ptr().add(at), v);
        }
        at += 16;
    }
    silu_mul_portable(&gate[main..n], &up[main..n], &mut out[main..n]);
}

/// [`super::avx2::exp_avx2`] for sixteen lanes: the same operations, so the same bits.
#[target_feature(enable = "avx512f")]
fn exp_avx512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::{
        _CMP_LT_OQ, _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEAREST_INT, _mm512_add_epi32, _mm512_add_ps,
        _mm512_castsi512_ps, _mm512_cmp_ps_mask, _mm512_cvtps_epi32, _mm512_fmadd_ps,
        _mm512_fnmadd_ps, _mm512_maskz_mul_ps, _mm512_max_ps, _mm512_min_ps, _mm512_mul_ps,
        _mm512_roundscale_ps, _mm512_set1_epi32, _mm512_set1_ps, _mm512_slli_epi32,
    };
    let low = _mm512_set1_ps(EXP_LOW);
    let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, low);
    let x = _mm512_min_ps(_mm512_max_ps(x, low), _mm512_set1_ps(EXP_HIGH));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    // x - n ln 2, with ln 2 in two parts
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HIGH), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LOW), r);
    let mut p = _mm512_set1_ps(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
    }
    let p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    let p = _mm512_add_ps(p, _mm512_set1_ps(1.0));
    // times 2^n, through the exponent bits; 0 below EXP_LOW
    let scale = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    _mm512_maskz_mul_ps(!below, p, _mm512_castsi512_ps(scale))
}
