//! The activations for AVX2 with FMA: eight lanes.

use super::{EXP_HIGH, EXP_LOW, EXP_POLY, LN2_HIGH, LN2_LOW, silu_mul_portable};

/// One row of [`super::silu_mul_rows`], eight values at a time.
#[target_feature(enable = "avx2,fma")]
pub(super) fn silu_mul_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_div_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps,
        _mm256_setzero_ps, _mm256_storeu_ps, _mm256_sub_ps,
    };
    let n = out.len().min(gate.len()).min(up.len());
    let main = n - n % 8;
    let one = _mm256_set1_ps(1.0);
    let mut at = 0;
    while at < main {
        // SAFETY: `at + 8 <= main <= n`, within all three slices.
        unsafe {
            let g = _mm256_loadu_ps(gate.as_ptr().add(at));
            let u = _mm256_loadu_ps(up.as_ptr().add(at));
            let e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
            let v = _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
            _mm256_storeu_ps(out.as_mut_ptr().add(at), v);
        }
        at += 8;
    }
    silu_mul_portable(&gate[main..n], &up[main..n], &mut out[main..n]);
}

/// `e^x` for eight lanes (Cephes' single-precision polynomial; within
/// 2 ulp of `f32::exp` over the range a softmax uses, and 0 below -87.3).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn exp_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::{
        _CMP_LT_OQ, _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEAREST_INT, _mm256_add_epi32, _mm256_add_ps,
        _mm256_andnot_ps, _mm256_castsi256_ps, _mm256_cmp_ps, _mm256_cvtps_epi32, _mm256_fmadd_ps,
        _mm256_fnmadd_ps, _mm256_max_ps, _mm256_min_ps, _mm256_mul_ps, _mm256_round_ps,
        _mm256_set1_epi32, _mm256_set1_ps, _mm256_slli_epi32,
    };
    let low = _mm256_set1_ps(EXP_LOW);
    let below = _mm256_cmp_ps::<_CMP_LT_OQ>(x, low);
    let x = _mm256_min_ps(_mm256_max_ps(x, low), _mm256_set1_ps(EXP_HIGH));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    // x - n ln 2, with ln 2 in two parts
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HIGH), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LOW), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
    }
    let p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    let p = _mm256_add_ps(p, _mm256_set1_ps(1.0));
    // times 2^n, through the exponent bits
    let scale = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_andnot_ps(below, _mm256_mul_ps(p, _mm256_castsi256_ps(scale)))
}
