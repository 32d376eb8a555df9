//! The CPU kernels of the projections, one file per instruction set, and
//! the one place that picks among them.
//!
//! - [`portable`]: plain Rust, every CPU; the order of every sum that the
//!   vector kernels keep, one value at a time.
//! - `avx2`: AVX2 with FMA and F16C (eight lanes).
//! - `avx512`: AVX-512F (sixteen lanes).
//! - `avx512_bf16`: AVX-512 BF16 (`vdpbf16ps`), for bf16 weights when
//!   the activations may be rounded to bf16 too (an option, not exact).
//!
//! Two kinds of kernel live in each file:
//!
//! - **dot-product kernels** (`rows_times_*`) for weights as stored,
//!   `(out, in)` f32 rows: a tied LM head that shares the embeddings, and
//!   every projection on a CPU without AVX2. Every output is one dot
//!   product summed in 16 lanes, then pairwise ([`portable::dot`]).
//! - **packed kernels** for weights packed at load into panels of
//!   [`PANEL`] output rows stored input-major ([`crate::packed`]): tiles
//!   of a few input rows by one to three panels, for f32 weights and for
//!   bf16 and f16 weights kept at two bytes ([`PackedElem`]), each weight
//!   widened to f32 exactly as it is loaded. Every output is summed input
//!   value by input value from the first, one fused multiply-add each, in
//!   f32, so every kernel gives the same bits, and bf16 or f16 weights
//!   give the bits of the same weights upcast to f32.
//!
//! The plan that cuts a packed or quantized product into tasks, blocks
//! and bands is [`sched`]'s, beside the kernels but used by none of them;
//! what each packed tile fetches ahead is [`crate::packed`]'s; the
//! projection layer that chooses between packed and stored weights is
//! [`crate::proj`]'s. No kernel imports them.

mod features;
pub(crate) mod portable;
pub(crate) mod sched;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512_bf16;

#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::{finish_avx2, rows_times_avx2};
#[cfg(target_arch = "x86_64")]
pub(crate) use avx512::{sum_lanes_avx512, sum_lanes16_avx512};
pub(crate) use features::Features;
pub(crate) use portable::rows_times_portable;

/// Lanes of the dot product's accumulator.
pub(crate) const LANES: usize = 16;

/// Bytes per cache line.
pub(crate) const LINE_BYTES: usize = 64;

/// f32 values per 64-byte cache line.
pub(crate) const LINE_VALUES: usize = LINE_BYTES / std::mem::size_of::<f32>();

/// The kernels an elementwise, attention or projection pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// One value at a time.
    Portable,
    /// Eight lanes at a time (AVX2, FMA and F16C).
    Avx2,
    /// Sixteen lanes at a time where a kernel has an AVX-512F version,
    /// eight where it has only AVX2.
    Avx512,
}

impl Path {
    /// Every path, the portable one first and the fastest last.
    pub(crate) const ALL: [Path; 3] = [Path::Portable, Path::Avx2, Path::Avx512];

    /// The fastest path this CPU runs ([`Features`], detected once).
    pub(crate) fn best() -> Path {
        Path::best_on(Features::get())
    }

    /// The fastest path a CPU with `features` runs.
    fn best_on(features: Features) -> Path {
        Path::ALL
            .into_iter()
            .rev()
            .find(|p| p.runs_on(features))
            .unwrap_or(Path::Portable)
    }

    /// Whether a CPU with `features` runs the path: the AVX-512 one
    /// needs AVX2, FMA and F16C too (its attention kernels use them).
    fn runs_on(self, features: Features) -> bool {
        match self {
            Path::Portable => true,
            Path::Avx2 => features.avx2,
            Path::Avx512 => features.avx512f && features.avx2,
        }
    }

    /// Every path this CPU runs, for the tests that force each (saying
    /// which it cannot).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Path> {
        let features = Features::get();
        Path::ALL
            .into_iter()
            .filter(|p| {
                let runs = p.runs_on(features);
                match p {
                    Path::Avx2 if !runs => {
                        eprintln!("this CPU has no AVX2+FMA+F16C: that path is not tested here")
                    }
                    Path::Avx512 if !runs => {
                        eprintln!("this CPU has no AVX-512F: that path is not tested here")
                    }
                    _ => {}
                }
                runs
            })
            .collect()
    }
}

/// `out[j * m + i] = dot(x[i], w[j])` for the weight rows in `w` (each
/// `k` values; `x` holds `m` rows), on the fastest dot-product kernel this
/// CPU runs.
pub(crate) fn rows_times(x: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize) {
    match Path::best() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Path::best` answers `Avx512` only where the CPU
        // supports AVX-512F.
        Path::Avx512 => unsafe { avx512::rows_times_avx512(x, w, out, m, k) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Path::best` answers `Avx2` only where the CPU supports
        // AVX2, FMA and F16C.
        Path::Avx2 => unsafe { avx2::rows_times_avx2(x, w, out, m, k) },
        _ => portable::rows_times_portable(x, w, out, m, k),
    }
}

/// How a packed weight stores its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackedDtype {
    /// Four bytes a value.
    F32,
    /// bfloat16: two bytes, the high half of an f32.
    Bf16,
    /// IEEE half precision: two bytes.
    F16,
}

impl PackedDtype {
    /// `f32`, `bf16` or `f16`.
    pub fn name(self) -> &'static str {
        match self {
            PackedDtype::F32 => "f32",
            PackedDtype::Bf16 => "bf16",
            PackedDtype::F16 => "f16",
        }
    }

    /// Bytes a value.
    pub fn size(self) -> usize {
        match self {
            PackedDtype::F32 => 4,
            PackedDtype::Bf16 | PackedDtype::F16 => 2,
        }
    }
}

mod sealed {
    /// Only the value types below are packed.
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// A value type the packed kernels read: `f32`, or `half::bf16` and
/// `half::f16` kept at two bytes and widened to f32 (exactly) as they
/// are loaded. Any bit pattern is a value of each, and none needs more
/// than four-byte alignment.
pub trait PackedElem: sealed::Sealed + Copy + Default + Send + Sync + 'static {
    /// How the value is stored.
    const DTYPE: PackedDtype;

    /// The value as f32, exactly.
    fn to_f32(self) -> f32;
}

impl PackedElem for f32 {
    const DTYPE: PackedDtype = PackedDtype::F32;

    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl PackedElem for half::bf16 {
    const DTYPE: PackedDtype = PackedDtype::Bf16;

    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
}

impl PackedElem for half::f16 {
    const DTYPE: PackedDtype = PackedDtype::F16;

    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
}

/// `values` as f32, when `T` is f32.
pub(crate) fn as_f32<T: PackedElem>(values: &[T]) -> Option<&[f32]> {
    if T::DTYPE != PackedDtype::F32 {
        return None;
    }
    // SAFETY: `T` is f32 (the only `PackedElem` whose dtype is F32): the
    // same type, length and memory.
    Some(unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<f32>(), values.len()) })
}

/// Output rows per panel of a packed weight.
pub const PANEL: usize = 16;

/// The most input rows per tile of any packed kernel.
pub(crate) const TILE_ROWS: usize = 8;

/// The most adjacent panels per tile of any packed kernel.
pub(crate) const TILE_PANELS: usize = 3;

/// The most panels a [`PanelsFn`] takes at a time.
pub(crate) const MOST_PANELS: usize = 4;

/// One tile's outputs: up to [`TILE_ROWS`] rows of up to [`TILE_PANELS`]
/// panels' columns.
pub(crate) type Tile = [[f32; TILE_PANELS * PANEL]; TILE_ROWS];

/// What a tile asks into the caches while it computes: a hint, which the
/// result does not depend on.
#[derive(Clone, Copy)]
pub(crate) enum Fetch<'a, T> {
    /// Nothing: the hardware prefetcher follows the panels.
    Nothing,
    /// These values, spread over the tile's input values (one group's
    /// share of the next block).
    Spread(&'a [T]),
    /// Each panel's stream a fixed distance ahead of where the tile reads
    /// it (the AVX-512 kernel's first group of rows).
    Streams,
}

/// A packed kernel over `width` adjacent panels (at most the kernel's
/// [`Kernel::panels`]): `out[r][16 * q + c] = sum_i xs[r * k + i] *
/// (panel q)[i * 16 + c]` for the `rows` rows of `xs` (arguments: `xs`,
/// `rows`, `panels`, holding them all, `width`, `k`, `fetch`, `out`),
/// fetching into the caches meanwhile what `fetch` says.
pub(crate) type TileFn<T> = fn(&[f32], usize, &[T], usize, usize, Fetch<'_, T>, &mut Tile);

/// A packed kernel over several adjacent panels for one input row
/// (arguments: `xs`, `panels`, holding them all, `k`, `out`): `out[16 * q
/// + c] = sum_i xs[i] * (panel q)[i * 16 + c]`, each output summed as
/// [`TileFn`] sums it.
pub(crate) type PanelsFn<T> = fn(&[f32], &[T], usize, &mut [f32; MOST_PANELS * PANEL]);

/// The packed kernels one product runs, for weights of `T`.
#[derive(Clone, Copy)]
pub(crate) struct Kernel<T> {
    /// The tile kernel.
    pub tile: TileFn<T>,
    /// The most input rows [`Kernel::tile`] takes.
    pub rows: usize,
    /// The most adjacent panels [`Kernel::tile`] takes.
    pub panels: usize,
    /// For decoding steps' few groups of rows: whether the first group's
    /// tiles fetch each panel's stream a short distance ahead
    /// ([`Fetch::Streams`]) and the other groups share the next block
    /// ([`Fetch::Spread`]), or every group takes its share of the next
    /// block (and a single group fetches nothing).
    pub streams: bool,
    /// For a single input row: kernels over several panels at a time, as
    /// (panels, kernel), the widest first; a row takes the widest that
    /// the panels left in its task fill, and [`Kernel::tile`] for a last
    /// single panel.
    pub one_row: [Option<(usize, PanelsFn<T>)>; 2],
}

/// The fastest packed kernels this CPU runs for weights of `T`: AVX-512
/// where the CPU has AVX-512F, else AVX2 where it has AVX2, FMA and F16C,
/// else the portable one.
pub(crate) fn best_kernel<T: PackedElem>() -> Kernel<T> {
    match Path::best() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Path::best` answers `Avx512` only where the CPU
        // supports AVX-512F.
        Path::Avx512 => unsafe { avx512::kernel::<T>() },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Path::best` answers `Avx2` only where the CPU supports
        // AVX2, FMA and F16C.
        Path::Avx2 => unsafe { avx2::kernel::<T>() },
        _ => portable::kernel::<T>(),
    }
}

/// The packed kernels for bf16 weights with activations rounded to bf16
/// too (`vdpbf16ps`) where the CPU has AVX-512 BF16; elsewhere the exact
/// ones ([`best_kernel`]).
pub(crate) fn bf16_dot_kernel() -> Kernel<half::bf16> {
    #[cfg(target_arch = "x86_64")]
    if Features::get().avx512_bf16 {
        // SAFETY: the CPU runs it, checked just above.
        return unsafe { avx512_bf16::kernel() };
    }
    best_kernel()
}

/// Whether this CPU has the `vdpbf16ps` kernel.
pub fn has_bf16_dot() -> bool {
    Features::get().avx512_bf16
}

/// [`Fetch::Spread`] as a tile goes: the lines of `ahead`, one every few
/// of the tile's `k` input values (a prefetch per input value at most, so
/// the memory stream runs beside the arithmetic rather than in bursts).
#[cfg(target_arch = "x86_64")]
pub(crate) struct SpreadFetch<'a, T> {
    ahead: &'a [T],
    /// Lines of `ahead`.
    lines: usize,
    /// Input values from one line to the next.
    every: usize,
    /// Input values until the next line.
    countdown: usize,
    /// The next line.
    line: usize,
}

#[cfg(target_arch = "x86_64")]
impl<'a, T> SpreadFetch<'a, T> {
    /// Values of `T` per cache line.
    const LINE: usize = LINE_BYTES / std::mem::size_of::<T>();

    pub(crate) fn new(ahead: &'a [T], k: usize) -> Self {
        let lines = ahead.len().div_ceil(Self::LINE);
        let every = if lines == 0 {
            usize::MAX
        } else {
            k.div_ceil(lines).max(1)
        };
        SpreadFetch {
            ahead,
            lines,
            every,
            countdown: 0,
            line: 0,
        }
    }

    /// One input value: the next line of `ahead` when its turn has come.
    #[inline(always)]
    pub(crate) fn step(&mut self) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        if self.countdown == 0 && self.line < self.lines {
            // SAFETY: `line < lines`: a pointer into `ahead`; a prefetch
            // reads nothing.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(self.ahead.as_ptr().add(self.line * Self::LINE).cast());
            }
            self.line += 1;
            self.countdown = self.every;
        }
        self.countdown = self.countdown.wrapping_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `rows_times` kernel: `(x, w, out, m, k)`.
    type DotKernel = fn(&[f32], &[f32], &mut [f32], usize, usize);

    /// Every dot-product kernel this CPU can run, by name, each forced
    /// (not only the one [`rows_times`] picks here).
    fn dot_kernels() -> Vec<(&'static str, DotKernel)> {
        let mut kernels: Vec<(&'static str, DotKernel)> =
            vec![("portable", portable::rows_times_portable)];
        #[cfg(target_arch = "x86_64")]
        {
            let features = Features::get();
            if features.avx2 {
                // SAFETY: the CPU supports AVX2, FMA and F16C, checked
                // just above.
                kernels.push(("avx2+fma", |x, w, o, m, k| unsafe {
                    avx2::rows_times_avx2(x, w, o, m, k)
                }));
                // SAFETY: as above.
                kernels.push(("avx2+fma, single-row tiles", |x, w, o, m, k| unsafe {
                    avx2::rows_times_avx2_tiles(x, w, o, m, k, false)
                }));
                // SAFETY: as above.
                kernels.push(("avx2+fma, paired tiles", |x, w, o, m, k| unsafe {
                    avx2::rows_times_avx2_tiles(x, w, o, m, k, true)
                }));
            } else {
                eprintln!("this CPU has no AVX2+FMA+F16C: that kernel is not tested here");
            }
            if features.avx512f {
                // SAFETY: the CPU supports AVX-512F, checked just above.
                kernels.push(("avx512", |x, w, o, m, k| unsafe {
                    avx512::rows_times_avx512(x, w, o, m, k)
                }));
            } else {
                eprintln!("this CPU has no AVX-512: that kernel is not tested here");
            }
        }
        kernels
    }

    #[test]
    fn every_dot_product_kernel_gives_the_same_bits_as_the_portable_dot_product() {
        // Lengths with and without a tail past the last 16 values; input
        // and weight rows that fill whole tiles of every kernel and leave
        // remainders, up to the most rows a decoding step sends here; 130
        // weight rows of 512 values span three of the AVX2 kernel's
        // blocks; at 1408 values the paired tiles take 8 rows and more.
        for (name, kernel) in dot_kernels() {
            for k in [64usize, 70, 512, 1408] {
                for (m, n) in [
                    (1usize, 1usize),
                    (2, 3),
                    (3, 2),
                    (5, 9),
                    (7, 4),
                    (13, 11),
                    (32, 6),
                    (32, 5),
                    (65, 3),
                    (7, 130),
                ] {
                    let x: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.13).sin()).collect();
                    let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.91).cos()).collect();
                    let mut fast = vec![f32::NAN; n * m];
                    kernel(&x, &w, &mut fast, m, k);
                    for j in 0..n {
                        for i in 0..m {
                            let want =
                                portable::dot(&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
                            assert_eq!(
                                fast[j * m + i].to_bits(),
                                want.to_bits(),
                                "{name}: k {k}, {m} input rows, {n} weight rows: input {i}, \
                                 weight {j}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn each_path_is_taken_only_where_the_cpu_has_every_feature_its_kernels_use() {
        let avx2 = Features {
            avx2: true,
            ..Features::default()
        };
        let avx512f_alone = Features {
            avx512f: true,
            ..Features::default()
        };
        let avx512 = Features {
            avx512f: true,
            ..avx2
        };
        assert_eq!(Path::best_on(Features::default()), Path::Portable);
        assert_eq!(Path::best_on(avx2), Path::Avx2);
        assert_eq!(Path::best_on(avx512f_alone), Path::Portable);
        assert_eq!(Path::best_on(avx512), Path::Avx512);
        assert_eq!(Path::best(), Path::best_on(Features::get()));
    }

    #[test]
    fn half_values_widen_to_the_f32_they_round_from() {
        // Every bf16 and f16 bit pattern: the widening the packed kernels
        // use (and the portable one's `to_f32`) against the `half` crate's.
        for bits in 0..=u16::MAX {
            let b = half::bf16::from_bits(bits);
            let f = half::f16::from_bits(bits);
            let (want_b, want_f) = (b.to_f32(), f.to_f32());
            let (got_b, got_f) = (PackedElem::to_f32(b), PackedElem::to_f32(f));
            assert!(
                got_b.to_bits() == want_b.to_bits() || (got_b.is_nan() && want_b.is_nan()),
                "bf16 {bits:#06x}"
            );
            assert!(
                got_f.to_bits() == want_f.to_bits() || (got_f.is_nan() && want_f.is_nan()),
                "f16 {bits:#06x}"
            );
        }
    }
}
