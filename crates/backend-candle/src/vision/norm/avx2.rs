//! The layer norm for AVX2 with FMA: eight lanes.

use std::arch::x86_64::{
    _mm256_add_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps,
    _mm256_setzero_ps, _mm256_storeu_ps, _mm256_sub_ps,
};

use super::{finish_portable, sum_lanes};

/// One row of [`super::layer_norm_rows`], eight values at a time: the
/// portable kernel's operations lane by lane.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn layer_norm_avx2(
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    eps: f32,
    out: &mut [f32],
) {
    let d = x.len().min(weight.len()).min(bias.len()).min(out.len());
    let main = d - d % 8;
    let mut sum_v = _mm256_setzero_ps();
    let mut at = 0;
    while at < main {
        // SAFETY: `at + 8 <= main <= d`, within `x`.
        sum_v = _mm256_add_ps(sum_v, unsafe { _mm256_loadu_ps(x.as_ptr().add(at)) });
        at += 8;
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds eight values.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum_v) };
    let mut sum = sum_lanes(lanes);
    for v in &x[main..d] {
        sum += *v;
    }
    let mean = sum / d as f32;
    let mean_v = _mm256_set1_ps(mean);
    let mut var_v = _mm256_setzero_ps();
    let mut at = 0;
    while at < main {
        // SAFETY: as above.
        let c = _mm256_sub_ps(unsafe { _mm256_loadu_ps(x.as_ptr().add(at)) }, mean_v);
        var_v = _mm256_fmadd_ps(c, c, var_v);
        at += 8;
    }
    // SAFETY: `lanes` holds eight values.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), var_v) };
    let mut var = sum_lanes(lanes);
    for v in &x[main..d] {
        let c = *v - mean;
        var = c.mul_add(c, var);
    }
    let rstd = 1.0 / (var / d as f32 + eps).sqrt();
    let rstd_v = _mm256_set1_ps(rstd);
    let mut at = 0;
    while at < main {
        // SAFETY: `at + 8 <= main <= d`, within every slice.
        unsafe {
            let c = _mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(at)), mean_v);
            let y = _mm256_mul_ps(
                _mm256_mul_ps(c, rstd_v),
                _mm256_loadu_ps(weight.as_ptr().add(at)),
            );
            let y = _mm256_add_ps(y, _mm256_loadu_ps(bias.as_ptr().add(at)));
            _mm256_storeu_ps(out.as_mut_ptr().add(at), y);
        }
        at += 8;
    }
    finish_portable(
        &x[main..d],
        &weight[main..d],
        &bias[main..d],
        mean,
        rstd,
        &mut out[main..d],
    );
}
