//! Elementwise activations on the CPU, f32: the exponential the softmax
//! and SiLU use, the MLP's `silu(gate) * up`, and the vision towers'
//! GELUs with their bias (`gelu_bias_rows`: quick_gelu, the tanh GELU,
//! the erf GELU with a rational error function; eight lanes with AVX2,
//! which the AVX-512 path runs too). With AVX2 and FMA they
//! run eight lanes at a time, and `silu(gate) * up` sixteen with AVX-512;
//! the portable path performs the same operations one value at a time, so
//! every path gives the same bits.
//!
//! This file holds the portable activations and the choice among the
//! paths; the vector kernels are one file per instruction set (`avx2`,
//! `avx512`).

use rayon::prelude::*;

use crate::cpu::Path;

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::exp_avx2;

/// `e^x` as [`exp_avx2`] computes it, one value at a time: the same
/// operations, so the same bits.
pub(crate) fn exp_poly(x: f32) -> f32 {
    if x < EXP_LOW {
        return 0.0;
    }
    // max and min rather than clamp: like the vector instructions, they
    // turn a NaN into EXP_LOW
    #[allow(clippy::manual_clamp)]
    let x = x.max(EXP_LOW).min(EXP_HIGH);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = (-n).mul_add(LN2_HIGH, x);
    let r = (-n).mul_add(LN2_LOW, r);
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p.mul_add(r, *c);
    }
    let p = p.mul_add(r * r, r) + 1.0;
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Below this, [`exp_poly`] is 0.
const EXP_LOW: f32 = -87.336_55;
/// Above this, [`exp_poly`] overflows.
const EXP_HIGH: f32 = 88.376_26;
/// ln 2 in two parts: `n * LN2_HIGH` is exact for the `n` that occur.
const LN2_HIGH: f32 = 0.693_359_4;
/// The rest of ln 2.
const LN2_LOW: f32 = -2.121_944_4e-4;
/// Cephes' polynomial for `e^r - 1 - r` over `r^2`, highest power first.
const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];

/// `out[i] = silu(gate[i]) * up[i]` for every row of `gate_up` (each row
/// `inter` gate values, then `inter` up values), `out` `inter` values a
/// row; silu(g) = g / (1 + e^-g) with [`exp_poly`]'s exponential, sixteen
/// lanes at a time with AVX-512, eight with AVX2 (the same bits every
/// way).
pub fn silu_mul_rows(gate_up: &[f32], inter: usize, out: &mut [f32]) {
    silu_mul_rows_on(Path::best(), gate_up, inter, out);
}

fn silu_mul_rows_on(path: Path, gate_up: &[f32], inter: usize, out: &mut [f32]) {
    if inter == 0 {
        return;
    }
    let row = |(gu, out): (&[f32], &mut [f32])| {
        let (gate, up) = gu.split_at(inter);
        #[cfg(target_arch = "x86_64")]
        match path {
            // SAFETY: `Path::Avx512` is only taken when the CPU supports
            // AVX-512F.
            Path::Avx512 => return unsafe { avx512::silu_mul_avx512(gate, up, out) },
            // SAFETY: `Path::Avx2` is only taken when the CPU supports AVX2
            // and FMA.
            Path::Avx2 => return unsafe { avx2::silu_mul_avx2(gate, up, out) },
            Path::Portable => {}
        }
        silu_mul_portable(gate, up, out);
    };
    // Elementwise work: worth spreading over threads only when large.
    if out.len() >= 1 << 14 {
        gate_up
            .par_chunks_exact(2 * inter)
            .zip(out.par_chunks_exact_mut(inter))
            .for_each(row);
    } else {
        gate_up
            .chunks_exact(2 * inter)
            .zip(out.chunks_exact_mut(inter))
            .for_each(row);
    }
}

/// One row of [`silu_mul_rows`] (or the last values of one), one value at
/// a time: the operations of the vector kernels, so the same bits.
fn silu_mul_portable(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, g), u) in out.iter_mut().zip(gate).zip(up) {
        *o = *g / (1.0 + exp_poly(-*g)) * *u;
    }
}
/// The GELU variants the vision towers and projectors name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gelu {
    /// CLIP's `quick_gelu`: `x sigmoid(1.702 x)`.
    Quick,
    /// `gelu_pytorch_tanh`: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
    /// x^3)))`, computed as the equal `x / (1 + e^(-2 sqrt(2/pi) (x +
    /// 0.044715 x^3)))`.
    Tanh,
    /// The exact GELU, `0.5 x (1 + erf(x / sqrt 2))`, with [`erf_poly`]'s
    /// error function.
    Erf,
}

/// `x = act(x + bias)` for every row of `x` (each `bias.len()` values),
/// rows spread over rayon's threads, on the fastest kernels this CPU
/// runs: eight lanes at a time with AVX2 (the AVX-512 path runs the same
/// kernel), one value at a time otherwise, the same bits every way.
pub(crate) fn gelu_bias_rows(act: Gelu, x: &mut [f32], bias: &[f32]) {
    gelu_bias_rows_on(Path::best(), act, x, bias);
}

/// [`gelu_bias_rows`] on the kernels of `path` (which the CPU must
/// support). An empty `bias` is no bias (rows of any width).
pub(crate) fn gelu_bias_rows_on(path: Path, act: Gelu, x: &mut [f32], bias: &[f32]) {
    let width = match bias.len() {
        0 => x.len().clamp(1, 1 << 14),
        n => n,
    };
    let row = |x: &mut [f32]| {
        let bias = match bias.len() {
            0 => None,
            _ => Some(bias),
        };
        #[cfg(target_arch = "x86_64")]
        if path != Path::Portable {
            // SAFETY: the vector paths are only taken when the CPU
            // supports AVX2 and FMA.
            return unsafe { avx2::gelu_bias_avx2(act, x, bias) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = path;
        gelu_bias_portable(act, x, bias);
    };
    if x.len() >= 1 << 14 {
        x.par_chunks_mut(width).with_min_len(4).for_each(row);
    } else {
        x.chunks_mut(width).for_each(row);
    }
}

/// `act(x + bias)` one value at a time: the operations of the vector
/// kernel, so the same bits.
fn gelu_bias_portable(act: Gelu, x: &mut [f32], bias: Option<&[f32]>) {
    let one = |v: f32| match act {
        Gelu::Quick => v / (1.0 + exp_poly(v * -QUICK_GELU)),
        Gelu::Tanh => {
            let cube = v * v * v;
            let u = v + cube * TANH_CUBE;
            v / (1.0 + exp_poly(u * -TANH_SCALE))
        }
        Gelu::Erf => 0.5 * v * (1.0 + erf_poly(v * std::f32::consts::FRAC_1_SQRT_2)),
    };
    match bias {
        Some(bias) => {
            for (v, b) in x.iter_mut().zip(bias) {
                *v = one(*v + *b);
            }
        }
        None => {
            for v in x.iter_mut() {
                *v = one(*v);
            }
        }
    }
}

/// `quick_gelu`'s factor.
const QUICK_GELU: f32 = 1.702;
/// The cube's factor of the tanh GELU.
const TANH_CUBE: f32 = 0.044_715;
/// `2 sqrt(2 / pi)`: the tanh GELU as a sigmoid.
const TANH_SCALE: f32 = 1.595_769;
/// `erf_poly`'s odd numerator, highest power first (x^13 .. x^1): the
/// rational approximation of Eigen's `generic_fast_erf_float`, within a
/// few ulp of `erf` in f32.
#[allow(clippy::excessive_precision)]
const ERF_NUM: [f32; 7] = [
    -2.726_142_258_013_06e-10,
    2.770_681_424_959_02e-08,
    -2.101_024_020_825_08e-06,
    -5.692_506_394_623_46e-05,
    -7.349_906_303_268_55e-04,
    -2.954_599_808_540_25e-03,
    -1.609_603_332_624_15e-02,
];
/// `erf_poly`'s even denominator, highest power first (x^8 .. x^0).
#[allow(clippy::excessive_precision)]
const ERF_DEN: [f32; 5] = [
    -1.456_607_184_649_96e-05,
    -2.133_740_552_789_05e-04,
    -1.682_826_974_382_03e-03,
    -7.373_329_167_204_68e-03,
    -1.426_473_905_141_89e-02,
];
/// Beyond this, `erf` is ±1 in f32.
const ERF_CLAMP: f32 = 4.0;

/// `erf(x)`: `x` clamped to ±4, then an odd polynomial over an even one
/// (Horner's rule with fused multiply-adds), as `avx2::erf_avx2` computes
/// it lane by lane.
pub(crate) fn erf_poly(x: f32) -> f32 {
    #[allow(clippy::manual_clamp)]
    let x = x.max(-ERF_CLAMP).min(ERF_CLAMP);
    let x2 = x * x;
    let mut p = ERF_NUM[0];
    for c in &ERF_NUM[1..] {
        p = p.mul_add(x2, *c);
    }
    let p = p * x;
    let mut q = ERF_DEN[0];
    for c in &ERF_DEN[1..] {
        q = q.mul_add(x2, *c);
    }
    p / q
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};
    use guidebench_testkit::conformance::largest_difference;

    #[test]
    fn every_gelu_matches_candles_within_rounding_and_every_path_gives_the_same_bits() {
        let dev = Device::Cpu;
        let (rows, width) = (3usize, 37usize);
        let x = Tensor::randn(0f32, 3., (rows, width), &dev).expect("x");
        let bias = Tensor::randn(0f32, 1., width, &dev).expect("bias");
        let sum = x.broadcast_add(&bias).expect("sum");
        let quick = (&sum * candle_nn::ops::sigmoid(&(&sum * 1.702).expect("scaled")).expect("s"))
            .expect("quick");
        let cases = [
            (Gelu::Quick, quick),
            (Gelu::Tanh, sum.gelu().expect("tanh")),
            (Gelu::Erf, sum.gelu_erf().expect("erf")),
        ];
        let flat =
            |t: &Tensor| -> Vec<f32> { t.flatten_all().and_then(|t| t.to_vec1()).expect("values") };
        let (x, bias) = (flat(&x), flat(&bias));
        for (act, want) in cases {
            let want = flat(&want);
            let mut first: Option<Vec<u32>> = None;
            for path in Path::available() {
                let mut got = x.clone();
                gelu_bias_rows_on(path, act, &mut got, &bias);
                let (_, worst) = largest_difference(&got, &want);
                assert!(worst < 2e-6, "{act:?} {path:?}: off by {worst}");
                let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                match &first {
                    None => first = Some(bits),
                    Some(f) => assert_eq!(f, &bits, "{act:?} {path:?}"),
                }
            }
        }
    }

    #[test]
    fn the_rational_error_function_is_within_a_few_ulp_of_the_exact_one() {
        let mut x = -5.0f64;
        while x < 5.0 {
            let want = candle_core::cpu::erf::erf_f64(x) as f32;
            let got = erf_poly(x as f32);
            assert!((got - want).abs() <= 4e-7, "erf({x}) = {got}, want {want}");
            x += 0.0037;
        }
    }

    #[test]
    fn the_polynomial_exponential_is_within_two_ulp_of_the_standard_one() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp_poly(x), x.exp());
            let ulp = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulp <= 2, "exp({x}) = {got}, want {want} ({ulp} ulp)");
            x += 0.013;
        }
        assert_eq!(exp_poly(-100.0), 0.0);
        assert_eq!(exp_poly(0.0), 1.0);
    }

    #[test]
    fn silu_gives_the_same_bits_on_every_path_and_matches_candle() {
        let inter = 37;
        let rows = 3;
        // every seventh value large enough that e^-g is 0 or clamped
        let gate_up: Vec<f32> = (0..rows * 2 * inter)
            .map(|i| (i as f32 * 0.77).sin() * if i % 7 == 0 { 120.0 } else { 12.0 })
            .collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let run = |path: Path| {
            let mut out = vec![f32::NAN; rows * inter];
            silu_mul_rows_on(path, &gate_up, inter, &mut out);
            out
        };
        let portable = run(Path::Portable);
        for path in Path::available() {
            assert_eq!(bits(&run(path)), bits(&portable), "{path:?}");
        }
        let fast = run(Path::best());
        let dev = Device::Cpu;
        let t = Tensor::from_vec(gate_up, (rows, 2 * inter), &dev).expect("t");
        let want = (candle_nn::ops::silu(&t.narrow(1, 0, inter).expect("gate")).expect("silu")
            * t.narrow(1, inter, inter).expect("up"))
        .expect("mul");
        let want: Vec<f32> = want
            .flatten_all()
            .and_then(|t| t.to_vec1())
            .expect("values");
        let (_, diff) = largest_difference(&fast, &want);
        assert!(diff < 1e-5, "max |diff| {diff}");
    }
}
