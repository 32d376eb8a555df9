//! libtorch's matrix-multiplication peak, as the libtorch benches measure
//! it (`tch_bench`, `products_bench`).

use std::time::Instant;

use tch::{Device, Kind, Tensor};

/// libtorch's f32 rate on a prefill-shaped product (4096 x 512 by
/// 512 x 2816, the shape of [`MatmulPeak`](crate::machine::MatmulPeak)), FLOP/s, best of 5
/// after a warm-up.
pub fn tch_matmul_peak() -> Result<f64, tch::TchError> {
    let _guard = tch::no_grad_guard();
    let (m, k, n) = (4096i64, 512i64, 2816i64);
    let a = Tensor::f_randn([m, k], (Kind::Float, Device::Cpu))?;
    let w = Tensor::f_randn([n, k], (Kind::Float, Device::Cpu))?.tr();
    // into one kept output: a fresh 46 MB one per product would add its
    // page faults to the time
    let c = Tensor::f_zeros([m, n], (Kind::Float, Device::Cpu))?;
    let mut best = f64::INFINITY;
    for _ in 0..6 {
        let start = Instant::now();
        let out = a.f_matmul_out(&c, &w)?;
        std::hint::black_box(&out);
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok((2 * m * k * n) as f64 / best)
}
