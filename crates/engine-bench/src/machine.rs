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

/// The arithmetic ceiling: FLOP/s of fused multiply-adds alone, every
/// thread running independent chains of them on values that stay in
/// registers (nothing read from memory), at the widest vector width the
/// CPU has (16 lanes with AVX-512, 8 with AVX2 and FMA). No product
/// reaches it; it shows how much of a product's time goes to anything but
/// the multiply-adds (waiting for weights, loads, stores).
pub struct FmaPeak {
    pool: rayon::ThreadPool,
    threads: usize,
}

/// Multiply-adds per chain per call of a loop.
const FMA_ITERATIONS: usize = 1 << 22;

/// A vector width [`FmaPeak`]'s loop runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FmaWidth {
    /// 16 lanes (AVX-512F).
    Avx512,
    /// 8 lanes (AVX2 with FMA).
    Avx2,
}

impl FmaWidth {
    /// Every width, the widest first.
    pub const ALL: [FmaWidth; 2] = [FmaWidth::Avx512, FmaWidth::Avx2];

    /// Its name as the benches print it (`avx512`, `avx2`).
    pub fn name(self) -> &'static str {
        match self {
            FmaWidth::Avx512 => "avx512",
            FmaWidth::Avx2 => "avx2",
        }
    }

    /// f32 lanes per multiply-add.
    pub fn lanes(self) -> usize {
        match self {
            FmaWidth::Avx512 => 16,
            FmaWidth::Avx2 => 8,
        }
    }

    /// Whether this CPU runs it.
    pub fn detected(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                FmaWidth::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
                FmaWidth::Avx2 => {
                    std::arch::is_x86_feature_detected!("avx2")
                        && std::arch::is_x86_feature_detected!("fma")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }
}

impl std::fmt::Display for FmaWidth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FmaPeak {
    /// On a pool of `threads` threads.
    pub fn new(threads: usize) -> Result<FmaPeak, rayon::ThreadPoolBuildError> {
        Ok(FmaPeak {
            pool: pool(threads)?,
            threads: threads.max(1),
        })
    }

    /// The vector widths this CPU can run the loop at, the widest first;
    /// none where it has neither AVX-512 nor AVX2 with FMA (then there is
    /// no ceiling to measure).
    pub fn widths() -> Vec<FmaWidth> {
        FmaWidth::ALL.into_iter().filter(|w| w.detected()).collect()
    }

    /// The widest of [`FmaPeak::widths`].
    pub fn width() -> Option<FmaWidth> {
        FmaWidth::ALL.into_iter().find(|w| w.detected())
    }

    /// FLOP/s of every thread's loop at the widest width, run side by
    /// side, best of `times`; `None` where [`FmaPeak::width`] is.
    pub fn measure(&self, times: usize) -> Option<f64> {
        self.measure_at(Self::width()?, times)
    }

    /// [`FmaPeak::measure`] at `width`; `None` where this CPU does not
    /// run it.
    pub fn measure_at(&self, width: FmaWidth, times: usize) -> Option<f64> {
        if !width.detected() {
            return None;
        }
        let flops_per_thread = (2 * width.lanes() * FMA_CHAINS * FMA_ITERATIONS) as f64;
        let threads = self.threads;
        let best = self.pool.install(|| {
            best_time(times, || {
                let sum: f32 = (0..threads)
                    .into_par_iter()
                    .map(|t| fma_loop(width, t))
                    .sum();
                std::hint::black_box(sum);
            })
        });
        Some(threads as f64 * flops_per_thread / best)
    }
}

/// Independent chains of multiply-adds per thread: more than the two
/// units' four cycles of latency keep busy (8), each in a register of
/// its own.
const FMA_CHAINS: usize = 12;

/// `FMA_CHAINS` chains (written out, so that each stays in a register)
/// of `FMA_ITERATIONS` multiply-adds `acc = acc * m + a` (which stays
/// finite), with `$fmadd` on `$start`; the chains' last values.
#[cfg(target_arch = "x86_64")]
macro_rules! fma_chains {
    ($fmadd:ident, $start:expr, $m:expr, $a:expr) => {{
        let (m, a) = ($m, $a);
        let (mut c0, mut c1, mut c2, mut c3) = ($start, $start, $start, $start);
        let (mut c4, mut c5, mut c6, mut c7) = ($start, $start, $start, $start);
        let (mut c8, mut c9, mut c10, mut c11) = ($start, $start, $start, $start);
        for _ in 0..FMA_ITERATIONS {
            c0 = $fmadd(c0, m, a);
            c1 = $fmadd(c1, m, a);
            c2 = $fmadd(c2, m, a);
            c3 = $fmadd(c3, m, a);
            c4 = $fmadd(c4, m, a);
            c5 = $fmadd(c5, m, a);
            c6 = $fmadd(c6, m, a);
            c7 = $fmadd(c7, m, a);
            c8 = $fmadd(c8, m, a);
            c9 = $fmadd(c9, m, a);
            c10 = $fmadd(c10, m, a);
            c11 = $fmadd(c11, m, a);
        }
        [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11]
    }};
}

/// One thread's loop at `width`; returns a sum of its chains so that
/// nothing is optimised away.
fn fma_loop(width: FmaWidth, seed: usize) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        let start = 1.0 + seed as f32 * 1e-3;
        // SAFETY: `FmaPeak::measure_at` runs only a width detected on
        // this CPU, and each function is compiled for its width's
        // features.
        match width {
            FmaWidth::Avx512 => unsafe { fma_loop_avx512(start) },
            FmaWidth::Avx2 => unsafe { fma_loop_avx2(start) },
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (width, seed);
        0.0
    }
}

/// The loop in 16-lane multiply-adds.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_loop_avx512(start: f32) -> f32 {
    use std::arch::x86_64::*;
    let chains = fma_chains!(
        _mm512_fmadd_ps,
        _mm512_set1_ps(start),
        _mm512_set1_ps(0.999_999),
        _mm512_set1_ps(1e-6)
    );
    chains.iter().map(|&v| _mm512_reduce_add_ps(v)).sum()
}

/// The loop in 8-lane multiply-adds.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_loop_avx2(start: f32) -> f32 {
    use std::arch::x86_64::*;
    let chains = fma_chains!(
        _mm256_fmadd_ps,
        _mm256_set1_ps(start),
        _mm256_set1_ps(0.999_999),
        _mm256_set1_ps(1e-6)
    );
    let mut lanes = [0f32; 8];
    let mut sum = 0.0;
    for v in chains {
        // SAFETY: `lanes` holds the 8 values an unaligned store writes.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
        sum += lanes.iter().sum::<f32>();
    }
    sum
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

    #[test]
    fn the_arithmetic_ceiling_is_measured_at_every_width_the_cpu_runs() {
        let fma = FmaPeak::new(1).expect("pool");
        assert_eq!(fma.measure(1).is_some(), FmaPeak::width().is_some());
        for width in FmaPeak::widths() {
            // at least 0.1 GFLOP/s, even on a core other tests share (a
            // full suite on 2 cores measured 0.8): the loop ran and was
            // counted in FLOPs, not in calls; and no more than one core
            // can do (two 16-lane units at 5 GHz: 320 GFLOP/s), so the
            // loop was not optimised away
            let peak = fma.measure_at(width, 1).expect("a width this CPU runs");
            assert!((1e8..1e12).contains(&peak), "{width}: {peak}");
        }
        for width in FmaWidth::ALL {
            assert_eq!(fma.measure_at(width, 1).is_some(), width.detected());
        }
    }
}
