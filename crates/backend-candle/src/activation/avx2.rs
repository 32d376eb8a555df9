//! The activations for AVX2 with FMA: eight lanes.

use super::{
    ERF_CLAMP, ERF_DEN, ERF_NUM, EXP_HIGH, EXP_LOW, EXP_POLY, Gelu, LN2_HIGH, LN2_LOW, QUICK_GELU,
    TANH_CUBE, TANH_SCALE, gelu_bias_portable, silu_mul_portable,
};

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

/// One row of [`super::gelu_bias_rows`], eight values at a time: the
/// portable kernel's operations lane by lane.
#[target_feature(enable = "avx2,fma")]
pub(super) fn gelu_bias_avx2(act: Gelu, x: &mut [f32], bias: Option<&[f32]>) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_div_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps,
        _mm256_setzero_ps, _mm256_storeu_ps,
    };
    let n = match bias {
        Some(b) => x.len().min(b.len()),
        None => x.len(),
    };
    let main = n - n % 8;
    let one = _mm256_set1_ps(1.0);
    let mut at = 0;
    while at < main {
        // SAFETY: `at + 8 <= main <= n`, within `x` and any `bias`.
        unsafe {
            let p = x.as_mut_ptr().add(at);
            let b = match bias {
                Some(b) => _mm256_loadu_ps(b.as_ptr().add(at)),
                None => _mm256_setzero_ps(),
            };
            let v = match bias {
                Some(_) => _mm256_add_ps(_mm256_loadu_ps(p), b),
                None => _mm256_loadu_ps(p),
            };
            let y = match act {
                Gelu::Quick => {
                    let e = exp_avx2(_mm256_mul_ps(v, _mm256_set1_ps(-QUICK_GELU)));
                    _mm256_div_ps(v, _mm256_add_ps(one, e))
                }
                Gelu::Tanh => {
                    let cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
                    let u = _mm256_add_ps(v, _mm256_mul_ps(cube, _mm256_set1_ps(TANH_CUBE)));
                    let e = exp_avx2(_mm256_mul_ps(u, _mm256_set1_ps(-TANH_SCALE)));
                    _mm256_div_ps(v, _mm256_add_ps(one, e))
                }
                Gelu::Erf => {
                    let e = erf_avx2(_mm256_mul_ps(
                        v,
                        _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2),
                    ));
                    _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5), v), _mm256_add_ps(one, e))
                }
            };
            _mm256_storeu_ps(p, y);
        }
        at += 8;
    }
    gelu_bias_portable(act, &mut x[main..n], bias.map(|b| &b[main..n]));
}

/// `erf` for eight lanes, as [`super::erf_poly`] computes it.
#[target_feature(enable = "avx2,fma")]
fn erf_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::{
        _mm256_div_ps, _mm256_fmadd_ps, _mm256_max_ps, _mm256_min_ps, _mm256_mul_ps, _mm256_set1_ps,
    };
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(-ERF_CLAMP)),
        _mm256_set1_ps(ERF_CLAMP),
    );
    let x2 = _mm256_mul_ps(x, x);
    let mut p = _mm256_set1_ps(ERF_NUM[0]);
    for c in &ERF_NUM[1..] {
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(*c));
    }
    let p = _mm256_mul_ps(p, x);
    let mut q = _mm256_set1_ps(ERF_DEN[0]);
    for c in &ERF_DEN[1..] {
        q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(*c));
    }
    _mm256_div_ps(p, q)
}
