//! What the engine benches measure of the machine they run on, so that
//! every bench states it the same way: the CPU's name, the load average,
//! the f32 matrix-multiplication peak and the memory bandwidth the
//! roofline divides by.

use std::time::Instant;

use rayon::prelude::*;

/// The CPU's model name (Linux; the architecture elsewhere), for the
/// record.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned())
}

/// The 1-minute load average (Linux; `?` elsewhere), for the record.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// The shortest of `times` runs of `f`, in seconds.
pub fn best_time(times: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..times {
        let start = Instant::now();
        f();
        best = best.min(start.elapsed().as_secs_f64());
    }
    best
}

/// A rayon pool of `threads` threads (at least one).
fn pool(threads: usize) -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
}

/// The f32 matrix-multiplication peak: the `gemm` crate's rate (the
/// product candle's matmul and the candle engine's prefill run) on a
/// prefill-shaped product, 4096 x 512 by 512 x 2816, written into an
/// output kept from one measure to the next. A fresh 46 MB output per
/// product (as candle's matmul allocates) adds its page faults to the
/// time: 13-28 % slower on a 2-core machine, a peak that much too low.
pub struct MatmulPeak {
    pool: rayon::ThreadPool,
    threads: usize,
    a: Vec<f32>,
    w: Vec<f32>,
    c: Vec<f32>,
}

impl MatmulPeak {
    /// The product's shape: `(m, k, n)`, `(m, k)` times `(n, k)`
    /// transposed.
    pub const SHAPE: (usize, usize, usize) = (4096, 512, 2816);

    /// The inputs and the output, on a pool of `threads` threads.
    pub fn new(threads: usize) -> Result<MatmulPeak, rayon::ThreadPoolBuildError> {
        let (m, k, n) = Self::SHAPE;
        let values = |len: usize, step: f32| (0..len).map(|i| (i as f32 * step).sin()).collect();
        Ok(MatmulPeak {
            pool: pool(threads)?,
            threads: threads.max(1),
            a: values(m * k, 0.37),
            w: values(n * k, 0.71),
            c: vec![0f32; m * n],
        })
    }

    /// FLOP/s, best of `times` products.
    pub fn measure(&mut self, times: usize) -> f64 {
        let (m, k, n) = Self::SHAPE;
        let parallelism = if self.threads > 1 {
            gemm::Parallelism::Rayon(self.threads)
        } else {
            gemm::Parallelism::None
        };
        let (a, w, c) = (&self.a, &self.w, &mut self.c);
        let best = self.pool.install(|| {
            best_time(times, || {
                // SAFETY: `a` holds m * k values read as (m, k) row-major,
                // `w` n * k read as its transpose (k, n), `c` m * n written
                // as (m, n) row-major (all sized in `new`); `c` is a `&mut`
                // and overlaps neither input.
                unsafe {
                    gemm::gemm(
                        m,
                        n,
                        k,
                        c.as_mut_ptr(),
                        1,
                        n as isize,
                        false,
                        a.as_ptr(),
                        1,
                        k as isize,
                        w.as_ptr(),
                        k as isize,
                        1,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        parallelism,
                    );
                }
                std::hint::black_box(&*c);
            })
        });
        (2 * m * k * n) as f64 / best
    }
}

/// Sequential streams each thread reads side by side in
/// [`Bandwidth::read`].
const STREAMS: usize = 4;

/// Memory bandwidth over a 1 GiB buffer (several times the last-level
/// cache of the machines the benches run on) or one of a given size,
/// split over a pool of `threads` threads.
pub struct Bandwidth {
    pool: rayon::ThreadPool,
    threads: usize,
    src: Vec<f32>,
    /// The copy's destination, allocated by the first [`Bandwidth::copy`]
    /// (a probe that only reads never needs it).
    dst: Vec<f32>,
}

impl Bandwidth {
    /// A 1 GiB buffer (touched here; a copy's destination, another 1 GiB,
    /// comes with the first [`Bandwidth::copy`]), on a pool of `threads`
    /// threads.
    pub fn new(threads: usize) -> Result<Bandwidth, rayon::ThreadPoolBuildError> {
        Self::with_bytes(threads, 1 << 30)
    }

    /// A buffer of `bytes` instead of 1 GiB: the rate at which a
    /// working set of that size is read over and over (as decoding steps
    /// read the weights), which the last-level cache helps once it holds
    /// a share of it.
    pub fn with_bytes(
        threads: usize,
        bytes: usize,
    ) -> Result<Bandwidth, rayon::ThreadPoolBuildError> {
        let len = (bytes / std::mem::size_of::<f32>()).max(1);
        Ok(Bandwidth {
            pool: pool(threads)?,
            threads: threads.max(1),
            src: (0..len).map(|i| i as f32).collect(),
            dst: Vec::new(),
        })
    }

    /// Bytes/s of a sum over the buffer, best of `times`.
    pub fn read(&self, times: usize) -> f64 {
        let chunk = self.src.len().div_ceil(self.threads);
        let bytes = std::mem::size_of_val(self.src.as_slice()) as f64;
        let src = &self.src;
        bytes
            / self.pool.install(|| {
                best_time(times, || {
                    // Each thread reads its chunk as STREAMS sequential
                    // streams side by side (more requests in flight than
                    // one stream keeps, as the engines' kernels read
                    // several weight rows or panels at once), each into 8
                    // independent sums, so the loop is bound by memory,
                    // not by the latency of one chain of additions.
                    let sum: f32 = src
                        .par_chunks(chunk)
                        .map(|c| {
                            let part = c.len() / STREAMS;
                            let mut acc = [[0f32; 8]; STREAMS];
                            for j in (0..part - part % 8).step_by(8) {
                                for (s, acc) in acc.iter_mut().enumerate() {
                                    let block = &c[s * part + j..s * part + j + 8];
                                    for (a, v) in acc.iter_mut().zip(block) {
                                        *a += v;
                                    }
                                }
                            }
                            acc.iter().flatten().sum::<f32>()
                        })
                        .sum();
                    std::hint::black_box(sum);
                })
            })
    }

    /// Bytes/s read and written by a copy of the buffer, best of `times`.
    pub fn copy(&mut self, times: usize) -> f64 {
        let chunk = self.src.len().div_ceil(self.threads);
        let bytes = 2.0 * std::mem::size_of_val(self.src.as_slice()) as f64;
        if self.dst.len() != self.src.len() {
            self.dst = vec![0f32; self.src.len()];
        }
        let (src, dst) = (&self.src, &mut self.dst);
        bytes
            / self.pool.install(|| {
                best_time(times, || {
                    dst.par_chunks_mut(chunk)
                        .zip(src.par_chunks(chunk))
                        .for_each(|(d, s)| d.copy_from_slice(s));
                    std::hint::black_box(&*dst);
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_that_only_reads_allocates_no_copy_destination() {
        let mut probe = Bandwidth::with_bytes(1, 1 << 16).expect("pool");
        assert!(probe.read(1) > 0.0);
        assert!(probe.dst.is_empty(), "{} values", probe.dst.len());
        assert!(probe.copy(1) > 0.0);
        assert_eq!(probe.dst, probe.src);
    }
}
