//! Times [`quant_matmul`] (every kernel path this CPU runs) beside
//! candle's kernels on the same GGUF-format weight: candle's
//! `GgmlType::vec_dot` (one weight row by one quantized activation row,
//! split over rayon's threads by weight rows as ours is, the activations'
//! quantization counted) and candle's `QMatMul::forward` (its whole
//! quantized product, repacked kernels included where it has them).
//!
//! ```text
//! cargo run --release -p guidebench-engine-bench --example quant_bench [n=2048] [k=2048] [ms=1,8,32] [types=Q8_0,Q4_K,Q6_K] [reps=20] [paths=portable,avx2,avx512-vnni] [ours=true] [vec_dot=true] [qmatmul=true]
//! ```
//!
//! `paths` picks which of our kernel paths are timed one by one,
//! `ours=false` leaves out ours on the best path, `vec_dot=false` and
//! `qmatmul=false` candle's two. candle's `QMatMul` runs on candle's own
//! thread pool, whose threads spin between products and take cores from
//! rayon's: time it in a process of its own (`paths=none ours=false
//! vec_dot=false`) and ours in another (`qmatmul=false`).
//!
//! Everything runs inside a rayon pool's `install`, as the engine runs
//! its forward passes. Each line: the type, rows `m`, the implementation, the median time of
//! a product over `reps` runs (after two not timed), and the weight bytes
//! read per second at that time (`GB/s`, each weight block read once).

use std::time::Instant;

use candle_core::quantized::k_quants::{
    BlockQ4_0, BlockQ4K, BlockQ5_0, BlockQ5K, BlockQ6K, BlockQ8_0, GgmlType,
};
use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use guidebench_candle::quant::{
    QuantType, QuantWeight, kernel_path, quant_matmul, quant_matmul_on, runnable_paths,
};
use rayon::prelude::*;

/// The median of `reps` timed runs of `f` (after two not timed), in
/// seconds.
fn median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    f();
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Blocks of `T` read from a tensor's bytes.
fn blocks<T: GgmlType>(bytes: &[u8]) -> Vec<T> {
    bytes
        .chunks_exact(std::mem::size_of::<T>())
        .map(|chunk| {
            // SAFETY: candle's blocks are `repr(C)` integers and f16 of
            // exactly this size: any bytes are one.
            unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<T>()) }
        })
        .collect()
}

/// candle's `vec_dot`, every weight row by every activation row, the
/// activations quantized first, split over rayon's threads by weight rows.
fn candle_vec_dot<T: GgmlType>(w: &[T], x: &[f32], m: usize, n: usize, k: usize, out: &mut [f32]) {
    let per_row = k / T::BLCK_SIZE;
    let per_x = k / T::VecDotType::BLCK_SIZE;
    let mut xq = vec![T::VecDotType::zeros(); m * per_x];
    for (x, xq) in x.chunks_exact(k).zip(xq.chunks_exact_mut(per_x)) {
        T::VecDotType::from_float(x, xq);
    }
    let rows_per_task = n.div_ceil(rayon::current_num_threads() * 4).max(1);
    // Output transposed, (n, m): each task writes its own rows.
    out.par_chunks_mut(rows_per_task * m)
        .enumerate()
        .for_each(|(task, out)| {
            for (jj, out) in out.chunks_exact_mut(m).enumerate() {
                let j = task * rows_per_task + jj;
                let row = &w[j * per_row..(j + 1) * per_row];
                for (i, o) in out.iter_mut().enumerate() {
                    *o = T::vec_dot(k, row, &xq[i * per_x..(i + 1) * per_x]);
                }
            }
        });
}

/// The sizes and what to time.
struct Plan {
    n: usize,
    k: usize,
    ms: Vec<usize>,
    reps: usize,
    /// Kernel paths of ours to time one by one.
    paths: Vec<String>,
    /// Whether to time candle's per-row `vec_dot`.
    vec_dot: bool,
    /// Whether to time candle's `QMatMul::forward`.
    qmatmul: bool,
    /// Whether to time ours on the best path.
    ours: bool,
}

fn run_type<T: GgmlType>(ty: QuantType, plan: &Plan) {
    let Plan {
        n,
        k,
        ref ms,
        reps,
        ref paths,
        vec_dot,
        qmatmul: time_qmatmul,
        ours,
    } = *plan;
    let dtype = ty.ggml();
    let values: Vec<f32> = (0..n * k)
        .map(|i| ((i as f32) * 0.618).sin() * 0.05)
        .collect();
    let dense = Tensor::from_vec(values, (n, k), &Device::Cpu).expect("a tensor");
    let qt = QTensor::quantize(&dense, dtype).expect("quantized");
    let bytes = qt.data().expect("bytes").into_owned();
    let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
    let candle_blocks = blocks::<T>(&bytes);
    let qmatmul = QMatMul::from_qtensor(qt).expect("a QMatMul");
    let gb = w.stored_bytes() as f64 / 1e9;
    for &m in ms {
        let x: Vec<f32> = (0..m * k).map(|i| ((i as f32) * 0.37).cos()).collect();
        let mut out = vec![0f32; m * n];
        let line = |what: &str, secs: f64| {
            println!(
                "{:<5} m={m:<4} {what:<28} {:>10.1} us {:>8.2} GB/s",
                ty.name(),
                secs * 1e6,
                gb / secs
            );
        };
        for path in runnable_paths() {
            if (path == "portable" && m > 8) || !paths.iter().any(|p| p == path) {
                continue;
            }
            let secs = median_secs(reps, || quant_matmul_on(path, &x, m, &w, &mut out, n));
            line(&format!("ours {path}"), secs);
        }
        if ours {
            let secs = median_secs(reps, || quant_matmul(&x, m, &w, &mut out, n));
            line(&format!("ours (best: {})", kernel_path(ty)), secs);
        }
        if vec_dot {
            let secs = median_secs(reps, || {
                candle_vec_dot(&candle_blocks, &x, m, n, k, &mut out);
            });
            line("candle vec_dot per row", secs);
        }
        if time_qmatmul {
            let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).expect("a tensor");
            let secs = median_secs(reps, || {
                let y = qmatmul.forward(&xt).expect("a product");
                std::hint::black_box(y);
            });
            line("candle QMatMul::forward", secs);
        }
    }
}

fn main() {
    let mut n = 2048;
    let mut k = 2048;
    let mut ms = vec![1usize, 8, 32];
    let mut types = vec![QuantType::Q8_0, QuantType::Q4K, QuantType::Q6K];
    let mut reps = 20;
    let mut paths: Vec<String> = runnable_paths().iter().map(|p| p.to_string()).collect();
    let mut vec_dot = true;
    let mut qmatmul = true;
    let mut ours = true;
    for arg in std::env::args().skip(1) {
        let (key, value) = arg.split_once('=').expect("key=value arguments");
        match key {
            "n" => n = value.parse().expect("a number"),
            "k" => k = value.parse().expect("a number"),
            "reps" => reps = value.parse().expect("a number"),
            "paths" => paths = value.split(',').map(str::to_string).collect(),
            "vec_dot" => vec_dot = value.parse().expect("true or false"),
            "qmatmul" => qmatmul = value.parse().expect("true or false"),
            "ours" => ours = value.parse().expect("true or false"),
            "ms" => {
                ms = value
                    .split(',')
                    .map(|v| v.parse().expect("a number"))
                    .collect();
            }
            "types" => {
                types = value
                    .split(',')
                    .map(|v| {
                        QuantType::ALL
                            .into_iter()
                            .find(|t| t.name() == v)
                            .expect("a type: Q8_0, Q4_0, Q5_0, Q4_K, Q5_K or Q6_K")
                    })
                    .collect();
            }
            _ => panic!("unknown argument {key}"),
        }
    }
    println!(
        "weight {n} x {k}, {} threads, paths: {}",
        rayon::current_num_threads(),
        runnable_paths().join(", ")
    );
    let plan = Plan {
        n,
        k,
        ms,
        reps,
        paths,
        vec_dot,
        qmatmul,
        ours,
    };
    // Products called from one of the pool's threads, as the engine
    // calls them (inside `install`): no hand-over from an outside thread
    // to the pool and back per product.
    let pool = rayon::ThreadPoolBuilder::new()
        .build()
        .expect("a thread pool");
    pool.install(|| {
        for ty in types {
            match ty {
                QuantType::Q4_0 => run_type::<BlockQ4_0>(ty, &plan),
                QuantType::Q5_0 => run_type::<BlockQ5_0>(ty, &plan),
                QuantType::Q8_0 => run_type::<BlockQ8_0>(ty, &plan),
                QuantType::Q4K => run_type::<BlockQ4K>(ty, &plan),
                QuantType::Q5K => run_type::<BlockQ5K>(ty, &plan),
                QuantType::Q6K => run_type::<BlockQ6K>(ty, &plan),
            }
        }
    });
}
