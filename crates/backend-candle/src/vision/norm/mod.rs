//! The towers' layer norm on rows of host memory, f32: each row's mean
//! and variance (two passes, eight partial sums each, summed in one fixed
//! order), then `(x - mean) / sqrt(var + eps) * weight + bias`. With AVX2
//! eight lanes at a time (`avx2`, also the AVX-512 path's kernel); the
//! portable kernel here mirrors the lanes, so every path gives the same
//! bits (tested by forcing each). The post-norm encoders (BERT) add a
//! projection's output to the residual rows and norm the sum in one pass
//! over each row (`residual_layer_norm_rows`).

use rayon::prelude::*;

use crate::cpu::Path;

#[cfg(target_arch = "x86_64")]
mod avx2;

/// Rows of `x` (each `weight.len()` values) normalized into `out`, on
/// the fastest kernels this CPU runs, rows spread over rayon's threads.
pub(crate) fn layer_norm_rows(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    layer_norm_rows_on(Path::best(), x, weight, bias, eps, out);
}

/// [`layer_norm_rows`] on the kernels of `path` (which the CPU must
/// support).
pub(crate) fn layer_norm_rows_on(
    path: Path,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    eps: f32,
    out: &mut [f32],
) {
    let d = weight.len();
    assert!(
        bias.len() == d && x.len() == out.len(),
        "layer norm: shapes differ"
    );
    if d == 0 {
        return;
    }
    x.par_chunks_exact(d)
        .zip(out.par_chunks_exact_mut(d))
        .with_min_len(8)
        .for_each(|(x, out)| layer_norm_row(path, x, weight, bias, eps, out));
}

/// Post-norm residual rows, in place: every row of `x` becomes
/// `layer_norm(x + (y + bias))` (a biased projection's output `y` added
/// to its input `x`, then normed with `weight`, `norm_bias` and `eps`, as
/// BERT's `*Output` blocks compute it); `y` is left holding the sum. Rows
/// spread over rayon's threads, on the fastest kernels this CPU runs.
pub(crate) fn residual_layer_norm_rows(
    x: &mut [f32],
    y: &mut [f32],
    bias: &[f32],
    norm: (&[f32], &[f32], f32),
) {
    residual_layer_norm_rows_on(Path::best(), x, y, bias, norm);
}

/// [`residual_layer_norm_rows`] on the kernels of `path` (which the CPU
/// must support): the sums are one addition each (the same bits on every
/// path), the norm [`layer_norm_rows_on`]'s per-row kernel.
pub(crate) fn residual_layer_norm_rows_on(
    path: Path,
    x: &mut [f32],
    y: &mut [f32],
    bias: &[f32],
    (weight, norm_bias, eps): (&[f32], &[f32], f32),
) {
    let d = weight.len();
    assert!(
        bias.len() == d && norm_bias.len() == d && x.len() == y.len(),
        "residual layer norm: shapes differ"
    );
    if d == 0 {
        return;
    }
    x.par_chunks_exact_mut(d)
        .zip(y.par_chunks_exact_mut(d))
        .with_min_len(8)
        .for_each(|(x, y)| {
            for ((s, v), b) in y.iter_mut().zip(x.iter()).zip(bias) {
                *s = *v + (*s + *b);
            }
            layer_norm_row(path, y, weight, norm_bias, eps, x);
        });
}

/// One row of [`layer_norm_rows_on`].
fn layer_norm_row(path: Path, x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if path != Path::Portable {
        // SAFETY: the vector paths are only taken when the CPU supports
        // AVX2 and FMA; every slice holds `d` values.
        return unsafe { avx2::layer_norm_avx2(x, weight, bias, eps, out) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = path;
    layer_norm_portable(x, weight, bias, eps, out);
}

/// Eight partial sums added in the one order every path uses.
fn sum_lanes(l: [f32; 8]) -> f32 {
    ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

/// One row, one value at a time in the vector kernel's order.
fn layer_norm_portable(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    let d = x.len();
    let main = d - d % 8;
    let mut lanes = [0f32; 8];
    for (j, v) in x[..main].iter().enumerate() {
        lanes[j % 8] += *v;
    }
    let mut sum = sum_lanes(lanes);
    for v in &x[main..] {
        sum += *v;
    }
    let mean = sum / d as f32;
    let mut lanes = [0f32; 8];
    for (j, v) in x[..main].iter().enumerate() {
        let c = *v - mean;
        lanes[j % 8] = c.mul_add(c, lanes[j % 8]);
    }
    let mut var = sum_lanes(lanes);
    for v in &x[main..] {
        let c = *v - mean;
        var = c.mul_add(c, var);
    }
    let rstd = 1.0 / (var / d as f32 + eps).sqrt();
    finish_portable(x, weight, bias, mean, rstd, out);
}

/// `(x - mean) * rstd * weight + bias`, one value at a time.
fn finish_portable(x: &[f32], weight: &[f32], bias: &[f32], mean: f32, rstd: f32, out: &mut [f32]) {
    for (((o, v), w), b) in out.iter_mut().zip(x).zip(weight).zip(bias) {
        *o = (*v - mean) * rstd * *w + *b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    #[test]
    fn every_path_gives_the_same_bits_and_candles_layer_norm_within_rounding() {
        let dev = Device::Cpu;
        for d in [1usize, 7, 8, 20, 768] {
            let rows = 5;
            let x = Tensor::randn(0.5f32, 2., (rows, d), &dev).expect("x");
            let w = Tensor::randn(1f32, 0.5, d, &dev).expect("w");
            let b = Tensor::randn(0f32, 0.5, d, &dev).expect("b");
            let want: Vec<f32> = candle_nn::ops::layer_norm(&x, &w, &b, 1e-5)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .expect("candle");
            let vec = |t: &Tensor| -> Vec<f32> {
                t.flatten_all().and_then(|t| t.to_vec1()).expect("values")
            };
            let (x, w, b) = (vec(&x), vec(&w), vec(&b));
            let mut first: Option<Vec<u32>> = None;
            for path in Path::available() {
                let mut got = vec![0f32; rows * d];
                layer_norm_rows_on(path, &x, &w, &b, 1e-5, &mut got);
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(g, w)| (g - w).abs())
                    .fold(0f32, f32::max);
                assert!(worst < 1e-4, "{path:?} d={d}: off by {worst}");
                let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                match &first {
                    None => first = Some(bits),
                    Some(f) => assert_eq!(f, &bits, "{path:?} d={d}"),
                }
            }
        }
    }

    #[test]
    fn the_residual_norm_is_the_sum_then_the_norm_with_the_same_bits_on_every_path() {
        let dev = Device::Cpu;
        let vec =
            |t: Tensor| -> Vec<f32> { t.flatten_all().and_then(|t| t.to_vec1()).expect("values") };
        for d in [7usize, 8, 384] {
            let rows = 6;
            let x = vec(Tensor::randn(0.5f32, 2., (rows, d), &dev).expect("x"));
            let y = vec(Tensor::randn(0f32, 1., (rows, d), &dev).expect("y"));
            let bias = vec(Tensor::randn(0f32, 0.5, d, &dev).expect("bias"));
            let w = vec(Tensor::randn(1f32, 0.5, d, &dev).expect("w"));
            let b = vec(Tensor::randn(0f32, 0.5, d, &dev).expect("b"));
            let mut first: Option<Vec<u32>> = None;
            for path in Path::available() {
                let sum: Vec<f32> = x
                    .iter()
                    .zip(&y)
                    .enumerate()
                    .map(|(i, (x, y))| *x + (*y + bias[i % d]))
                    .collect();
                let mut want = vec![0f32; rows * d];
                layer_norm_rows_on(path, &sum, &w, &b, 1e-12, &mut want);
                let (mut got, mut room) = (x.clone(), y.clone());
                residual_layer_norm_rows_on(path, &mut got, &mut room, &bias, (&w, &b, 1e-12));
                let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{path:?} d={d}");
                assert_eq!(bits(&room), bits(&sum), "{path:?} d={d}");
                match &first {
                    None => first = Some(bits(&got)),
                    Some(f) => assert_eq!(f, &bits(&got), "{path:?} d={d}"),
                }
            }
        }
    }
}
