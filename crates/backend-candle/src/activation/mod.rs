//! Elementwise activations on the CPU, f32: the exponential the softmax
//! and SiLU use, and the MLP's `silu(gate) * up`. With AVX2 and FMA they
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
#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};
    use guidebench_testkit::conformance::largest_difference;

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
