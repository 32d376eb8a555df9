//! Projection weights packed once at load for the CPU: `(out, in)`
//! weights (f32, or bf16 and f16 kept at two bytes) regrouped into panels of [`PANEL`] output rows, each panel
//! stored input-major (for every input value, the panel's 16 weights side
//! by side, one cache line). A product then broadcasts one input value and
//! multiplies it into 16 outputs: with AVX2, two 8-lane multiply-adds,
//! keeping up to 6 input rows × 16 outputs in registers (8 loads per 12
//! multiply-adds at 6 rows); with AVX-512, one 16-lane multiply-add per
//! panel, keeping up to 8 input rows × 3 panels in registers (11 loads
//! per 24 multiply-adds). The same for a prefill chunk as for one
//! decoding row, each panel read as one sequential stream. The panels
//! live in [`WeightArena`] chunks, in 2 MiB pages where Linux grants
//! them.
//!
//! Every output is summed in one fixed order, input value by input value
//! from the first (one fused multiply-add each), whichever kernel and tile
//! computes it and however many rows run beside it, so the AVX-512, AVX2
//! and portable kernels give the same bits, a row alone gives the bits it
//! gets in a batch, and prefill gives the bits of decoding.
//!
//! The kernels themselves, one file per instruction set, are
//! [`crate::cpu`]'s, and the plan of tasks, blocks and bands is
//! [`crate::cpu::sched`]'s (shared with the quantized products); this
//! file packs the weights and runs a product's tiles.

use rayon::prelude::*;

use crate::arena::{ArenaBuf, WeightArena};
use crate::cpu::sched::{SharedOut, TaskPlan, Work};
use crate::cpu::{
    Fetch, Kernel, MOST_PANELS, PANEL, PackedDtype, PackedElem, TILE_PANELS, TILE_ROWS, best_kernel,
};

/// Bytes of panels a group of input rows works through before the next
/// group passes over the same panels (kept in the L2 cache meanwhile).
const BLOCK_BYTES: usize = 128 * 1024;

/// Up to this many groups of input rows (up to 36 rows with AVX2, 48 with
/// AVX-512: decoding steps), tiles fetch ahead what their kernel's
/// [`Kernel::streams`] says, and every task takes all the groups over its
/// run of panels.
const PREFETCH_GROUPS: usize = 6;

/// An `(n, k)` weight in panels of [`PANEL`] rows (the last one padded
/// with zero rows), on a 64-byte boundary, in a [`WeightArena`]'s memory,
/// its values stored as [`PackedWeight::dtype`] says.
pub struct PackedWeight {
    data: ArenaBuf,
    n: usize,
    k: usize,
    dtype: PackedDtype,
    /// bf16 weights only: products round the activations to bf16 too
    /// (`vdpbf16ps`, where the CPU has it).
    bf16_activations: bool,
}

impl PackedWeight {
    /// Packs the row-major `(n, k)` weight `w` (at least `n * k` values)
    /// into memory of its own.
    #[cfg(test)]
    pub fn pack<T: PackedElem>(w: &[T], n: usize, k: usize) -> Self {
        Self::pack_in(w, n, k, &WeightArena::new())
    }

    /// Packs the row-major `(n, k)` weight `w` (at least `n * k` values
    /// of f32, `half::bf16` or `half::f16`, kept as they are) into memory
    /// from `arena`.
    pub fn pack_in<T: PackedElem>(w: &[T], n: usize, k: usize, arena: &WeightArena) -> Self {
        let len = n.div_ceil(PANEL) * PANEL * k;
        let mut data = arena.alloc((len * std::mem::size_of::<T>()).div_ceil(4));
        for (p, panel) in data.typed_mut::<T>()[..len]
            .chunks_exact_mut(PANEL * k.max(1))
            .enumerate()
        {
            for c in 0..PANEL.min(n - p * PANEL) {
                let row = &w[(p * PANEL + c) * k..(p * PANEL + c + 1) * k];
                for (i, v) in row.iter().enumerate() {
                    panel[i * PANEL + c] = *v;
                }
            }
        }
        PackedWeight {
            data,
            n,
            k,
            dtype: T::DTYPE,
            bf16_activations: false,
        }
    }

    /// The weight with its products rounding the activations to bf16 too
    /// (`on`), where it is bf16 and the CPU has AVX-512 BF16: twice the
    /// multiply-adds per instruction, not exact. Other weights and CPUs
    /// keep the exact kernels.
    pub fn with_bf16_activations(mut self, on: bool) -> Self {
        self.set_bf16_activations(on);
        self
    }

    /// [`PackedWeight::with_bf16_activations`] in place.
    pub(crate) fn set_bf16_activations(&mut self, on: bool) {
        self.bf16_activations = on && self.dtype == PackedDtype::Bf16;
    }

    /// Whether products round the activations to bf16
    /// ([`PackedWeight::with_bf16_activations`]).
    pub fn bf16_activations(&self) -> bool {
        self.bf16_activations
    }

    /// Output rows `n`.
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Input values per row `k`.
    pub fn cols(&self) -> usize {
        self.k
    }

    /// How the values are stored.
    pub fn dtype(&self) -> PackedDtype {
        self.dtype
    }

    /// Bytes of the packed values (the padding of the last panel
    /// included).
    pub fn bytes(&self) -> usize {
        self.n.div_ceil(PANEL) * PANEL * self.k * self.dtype.size()
    }

    /// The packed values: `n` rounded up to whole panels, times `k`.
    ///
    /// # Panics
    ///
    /// If they are not stored as `T`.
    fn values<T: PackedElem>(&self) -> &[T] {
        assert_eq!(T::DTYPE, self.dtype, "packed values read as another dtype");
        &self.data.typed::<T>()[..self.n.div_ceil(PANEL) * PANEL * self.k]
    }

    /// Row `j` of the weight, widened to f32, into `out` (`k` values): an
    /// embedding row read from a tied LM head.
    pub fn row_into(&self, j: usize, out: &mut [f32]) -> Option<()> {
        fn gather<T: PackedElem>(w: &PackedWeight, j: usize, out: &mut [f32]) {
            let panel = &w.values::<T>()[(j / PANEL) * PANEL * w.k..];
            for (i, o) in out.iter_mut().enumerate() {
                *o = panel[i * PANEL + j % PANEL].to_f32();
            }
        }
        if j >= self.n || out.len() != self.k {
            return None;
        }
        match self.dtype {
            PackedDtype::F32 => gather::<f32>(self, j, out),
            PackedDtype::Bf16 => gather::<half::bf16>(self, j, out),
            PackedDtype::F16 => gather::<half::f16>(self, j, out),
        }
        Some(())
    }

    /// Row `j` of the weight, widened to f32.
    #[cfg(test)]
    pub fn row(&self, j: usize) -> Vec<f32> {
        let mut out = vec![0f32; self.k];
        self.row_into(j, &mut out).expect("a row of the weight");
        out
    }
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWeight")
            .field("rows", &self.n)
            .field("cols", &self.k)
            .field("dtype", &self.dtype)
            .finish_non_exhaustive()
    }
}

/// `out` `(m, n)` = `x` `(m, k)` times the packed weight transposed, split
/// over rayon's threads by panels; the fastest kernels this CPU runs for
/// the weight's dtype.
pub fn packed_matmul(x: &[f32], m: usize, w: &PackedWeight, out: &mut [f32]) {
    match w.dtype {
        PackedDtype::F32 => packed_matmul_with(x, m, w, out, best_kernel::<f32>()),
        PackedDtype::Bf16 if w.bf16_activations => {
            packed_matmul_with(x, m, w, out, crate::cpu::bf16_dot_kernel())
        }
        PackedDtype::Bf16 => packed_matmul_with(x, m, w, out, best_kernel::<half::bf16>()),
        PackedDtype::F16 => packed_matmul_with(x, m, w, out, best_kernel::<half::f16>()),
    }
}

fn packed_matmul_with<T: PackedElem>(
    x: &[f32],
    m: usize,
    w: &PackedWeight,
    out: &mut [f32],
    kernel: Kernel<T>,
) {
    let (n, k) = (w.n, w.k);
    assert!(x.len() >= m * k && out.len() >= m * n);
    let (x, out) = (&x[..m * k], &mut out[..m * n]);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let panels = n.div_ceil(PANEL);
    let panel_len = PANEL * k;
    let width = kernel.panels.clamp(1, TILE_PANELS);
    let values = w.values::<T>();
    // Groups of input rows of nearly equal size (8 rows in tiles of 6:
    // 4 + 4, not 6 + 2). Decoding steps: a few tasks per thread, each a
    // run of whole tiles for every group. Many groups: tasks of one block
    // by a band of groups (`sched::BAND_TILES`). Each task writes its own
    // elements of `out`. One group passes over the panels once: no blocks
    // to keep in the L2 cache (and a single row's panel pairs may span
    // them).
    let block = (BLOCK_BYTES / (panel_len * std::mem::size_of::<T>()))
        .max(1)
        .next_multiple_of(width);
    let plan = TaskPlan::new(Work {
        rows: m,
        tile_rows: kernel.rows.clamp(1, TILE_ROWS),
        units: panels,
        run: block,
        few_tiles: PREFETCH_GROUPS,
        unit_multiple: width,
    });
    let (groups, block) = (plan.tiles(), plan.run());
    let prefetch = groups <= PREFETCH_GROUPS;
    // Fetching ahead hides the wait on memory of decoding steps' few
    // groups. The AVX2 kernel fetches the next block, each group its
    // share, while the other groups compute; with one group it leaves the
    // stream to the hardware prefetcher (the 33 products of a batch-1
    // step took 2-13 % longer with a block fetched ahead, 5 runs on an AMD
    // EPYC). The AVX-512 kernel's first group fetches each panel's stream
    // a short distance ahead, and the other groups share the next block
    // ([`Kernel::streams`]; on a 2-core Xeon the 33 products of a step
    // took 1-7 % less at 16 to 40 rows than with the streams in every
    // group and no block fetched, medians of 40, eight pairs in two runs;
    // every group sharing the next block, as with AVX2, was 3-9 % slower
    // at 32 rows than streams alone). With many groups (a prefill
    // chunk) the wait is a small part of a block's time, and a 512-row
    // product ran about 5 % slower with a block fetched ahead (AVX2) and
    // no faster with the streams (AVX-512).
    let out = SharedOut::new(out, n);
    (0..plan.tasks()).into_par_iter().for_each(|task| {
        let (owned, groups_here) = plan.task(task);
        let (mut tile, mut several_out) = (
            [[0f32; TILE_PANELS * PANEL]; TILE_ROWS],
            [0f32; MOST_PANELS * PANEL],
        );
        for block_range in plan.runs(owned) {
            let (b, end) = (block_range.start, block_range.end);
            for g in groups_here.clone() {
                let (i, rows) = plan.tile(g);
                let xs = &x[i * k..(i + rows) * k];
                let mut p = b;
                while p < end {
                    // One input row: several panels at a time, more
                    // independent sums and more memory streams.
                    let several = match rows {
                        1 => kernel.one_row.iter().flatten().find(|(w, _)| p + w <= end),
                        _ => None,
                    };
                    if let Some(&(width, run)) = several {
                        let panels = &values[p * panel_len..(p + width) * panel_len];
                        run(xs, panels, k, &mut several_out);
                        let cols = (width * PANEL).min(n - p * PANEL);
                        // SAFETY: panels `p..p + width` of this
                        // band's rows are this task's own: no other
                        // task writes these elements.
                        unsafe { out.cols(i, p * PANEL, cols) }
                            .copy_from_slice(&several_out[..cols]);
                        p += width;
                        continue;
                    }
                    let width = width.min(end - p);
                    let tile_panels = &values[p * panel_len..(p + width) * panel_len];
                    // With the AVX2 kernel, group g's share of these
                    // panels one block ahead, fetched while this tile
                    // is computed: the memory stream keeps going while
                    // the other groups multiply from the L2 cache.
                    // Past the end of this task too: the thread that
                    // ran it usually runs the next task (rayon splits
                    // the tasks' range in halves), whose first block
                    // was otherwise read from memory while every
                    // group waited (the 33 products of a step took
                    // 7-9 % longer that way at 8 rows and 3-6 % at
                    // 32, medians of 40 in five runs).
                    let fetch = match p + block {
                        _ if !prefetch => Fetch::Nothing,
                        _ if kernel.streams && g == 0 => Fetch::Streams,
                        q if q < panels && groups > 1 => {
                            let next = &values[q * panel_len..(q + width).min(panels) * panel_len];
                            // The groups that fetch the next block
                            // share it.
                            let (fetchers, index) = match kernel.streams {
                                true => (groups - 1, g - 1),
                                false => (groups, g),
                            };
                            let share = next.len().div_ceil(fetchers);
                            let from = (index * share).min(next.len());
                            Fetch::Spread(&next[from..(from + share).min(next.len())])
                        }
                        _ => Fetch::Nothing,
                    };
                    (kernel.tile)(xs, rows, tile_panels, width, k, fetch, &mut tile);
                    let cols = (width * PANEL).min(n - p * PANEL);
                    for (r, values) in tile[..rows].iter().enumerate() {
                        // SAFETY: panels `p..p + width` of this
                        // band's rows are this task's own: no other
                        // task writes these elements.
                        unsafe { out.cols(i + r, p * PANEL, cols) }
                            .copy_from_slice(&values[..cols]);
                    }
                    p += width;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::portable;

    /// The order every kernel keeps: one fused multiply-add per input
    /// value, from the first, on the weights widened to f32.
    fn reference<T: PackedElem>(x: &[f32], w: &[T]) -> f32 {
        x.iter()
            .zip(w)
            .fold(0.0, |acc, (x, w)| x.mul_add(w.to_f32(), acc))
    }

    #[test]
    fn packing_keeps_every_weight_row_in_its_stored_dtype() {
        let (n, k) = (37, 9);
        let w: Vec<f32> = (0..n * k).map(|i| i as f32 * 0.37).collect();
        let packed = PackedWeight::pack(&w, n, k);
        assert_eq!((packed.rows(), packed.cols()), (n, k));
        assert_eq!(packed.dtype(), PackedDtype::F32);
        assert!((packed.values::<f32>().as_ptr() as usize).is_multiple_of(64));
        for j in 0..n {
            assert_eq!(packed.row(j), w[j * k..(j + 1) * k], "row {j}");
        }
        // Two bytes a value: half the memory, each row as it rounds.
        let b: Vec<half::bf16> = w.iter().map(|v| half::bf16::from_f32(*v)).collect();
        let packed_b = PackedWeight::pack(&b, n, k);
        assert_eq!(packed_b.dtype(), PackedDtype::Bf16);
        assert_eq!(2 * packed_b.bytes(), packed.bytes());
        let f: Vec<half::f16> = w.iter().map(|v| half::f16::from_f32(*v)).collect();
        let packed_f = PackedWeight::pack(&f, n, k);
        for j in 0..n {
            let want_b: Vec<f32> = b[j * k..(j + 1) * k].iter().map(|v| v.to_f32()).collect();
            let want_f: Vec<f32> = f[j * k..(j + 1) * k].iter().map(|v| v.to_f32()).collect();
            assert_eq!(packed_b.row(j), want_b, "bf16 row {j}");
            assert_eq!(packed_f.row(j), want_f, "f16 row {j}");
        }
        let mut row = vec![0f32; k];
        assert!(
            packed_b.row_into(n, &mut row).is_none(),
            "a row past the end"
        );
        assert!(
            packed_b.row_into(0, &mut row[1..]).is_none(),
            "a short buffer"
        );
    }

    /// Every packed kernel this CPU can run for weights of `T`, by name,
    /// each forced, with variants of their tile shapes.
    fn kernels<T: PackedElem>() -> Vec<(&'static str, Kernel<T>)> {
        let portable = portable::kernel::<T>();
        let mut kernels: Vec<(&str, Kernel<T>)> = vec![
            ("portable", portable),
            (
                "portable, tiles of 8 rows by 3 panels",
                Kernel {
                    rows: 8,
                    panels: 3,
                    ..portable
                },
            ),
        ];
        #[cfg(target_arch = "x86_64")]
        {
            let features = crate::cpu::Features::get();
            if features.avx512f {
                // SAFETY: the CPU supports AVX-512F, checked just above.
                let avx512 = unsafe { crate::cpu::avx512::kernel::<T>() };
                kernels.push(("avx512", avx512));
                kernels.push((
                    "avx512, tiles of one panel",
                    Kernel {
                        panels: 1,
                        ..avx512
                    },
                ));
            } else {
                eprintln!("this CPU has no AVX-512F: that kernel is not tested here");
            }
            if features.avx2 {
                // SAFETY: the CPU supports AVX2, FMA and F16C, checked
                // just above.
                let avx2 = unsafe { crate::cpu::avx2::kernel::<T>() };
                kernels.push(("avx2+fma", avx2));
                kernels.push((
                    "avx2+fma, two panels at most",
                    Kernel {
                        one_row: [avx2.one_row[1], None],
                        ..avx2
                    },
                ));
                kernels.push((
                    "avx2+fma, one panel at a time",
                    Kernel {
                        one_row: [None, None],
                        ..avx2
                    },
                ));
            } else {
                eprintln!("this CPU has no AVX2+FMA+F16C: that kernel is not tested here");
            }
        }
        kernels
    }

    #[test]
    fn every_kernel_gives_the_bits_of_one_multiply_add_per_input_value() {
        every_kernel_on::<f32>(|v| v);
    }

    #[test]
    fn every_kernel_on_bf16_weights_gives_the_bits_of_the_weights_upcast_to_f32() {
        every_kernel_on::<half::bf16>(half::bf16::from_f32);
    }

    #[test]
    fn every_kernel_on_f16_weights_gives_the_bits_of_the_weights_upcast_to_f32() {
        every_kernel_on::<half::f16>(half::f16::from_f32);
    }

    #[test]
    fn the_bf16_dot_kernel_sums_bf16_activations_by_bf16_weights_within_f32_rounding() {
        let kernel = crate::cpu::bf16_dot_kernel();
        // Without AVX-512 BF16 the exact kernel stands in: it multiplies
        // the f32 activations, unrounded.
        let rounds = crate::cpu::has_bf16_dot();
        if !rounds {
            eprintln!("this CPU has no AVX-512 BF16: the exact kernel stands in for it");
        }
        for k in [1usize, 7, 16, 64, 70, 512, 1408] {
            for (m, n) in [
                (1usize, 1usize),
                (1, 40),
                (3, 40),
                (8, 48),
                (13, 100),
                (70, 21),
            ] {
                let x: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.13).sin()).collect();
                let w: Vec<half::bf16> = (0..n * k)
                    .map(|i| half::bf16::from_f32((i as f32 * 0.91).cos()))
                    .collect();
                let packed = PackedWeight::pack(&w, n, k).with_bf16_activations(true);
                assert!(packed.bf16_activations());
                let mut out = vec![f32::NAN; m * n];
                packed_matmul_with(&x, m, &packed, &mut out, kernel);
                for i in 0..m {
                    for j in 0..n {
                        // In f64 on the rounded activations: the products
                        // are exact; each sum may round once per value.
                        let (mut want, mut size) = (0f64, 0f64);
                        for c in 0..k {
                            let value = x[i * k + c];
                            let a = if rounds {
                                f64::from(half::bf16::from_f32(value).to_f32())
                            } else {
                                f64::from(value)
                            };
                            let p = a * f64::from(w[j * k + c].to_f32());
                            want += p;
                            size += p.abs();
                        }
                        let got = f64::from(out[i * n + j]);
                        let bound = (k as f64 + 1.0) * f64::from(f32::EPSILON) * size;
                        assert!(
                            (got - want).abs() <= bound,
                            "k {k}, {m} x {n}: input {i}, weight {j}: {got} against {want}"
                        );
                    }
                }
            }
        }
        // f32 and f16 weights keep the exact kernels.
        let f: Vec<f32> = vec![0.5; 32];
        assert!(
            !PackedWeight::pack(&f, 2, 16)
                .with_bf16_activations(true)
                .bf16_activations()
        );
    }

    /// Every kernel for weights of `T` (made from f32 by `from`), on rows
    /// from one to a prefill chunk, whole tiles and remainders of every
    /// size, outputs that fill whole panels and leave a partial one, and
    /// lengths that span several blocks of panels; on one thread too (a
    /// task then holds enough panels for a single row to take four at a
    /// time on any machine).
    fn every_kernel_on<T: PackedElem>(from: fn(f32) -> T) {
        let one_thread = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a thread pool");
        for (name, kernel) in kernels::<T>() {
            one_thread.install(|| check_kernel(name, kernel, from));
            check_kernel(name, kernel, from);
        }
    }

    /// [`every_kernel_on`] for one kernel, on the current thread pool.
    fn check_kernel<T: PackedElem>(name: &str, kernel: Kernel<T>, from: fn(f32) -> T) {
        for k in [1usize, 7, 64, 512, 1408] {
            for (m, n) in [
                (1usize, 1usize),
                (1, 16),
                (1, 40),
                (1, 130),
                (2, 17),
                (3, 40),
                (5, 9),
                (6, 33),
                (7, 64),
                (13, 100),
                (32, 48),
                (70, 21),
                // Many groups of rows: bands of groups over several
                // blocks, groups of 8 and 7 rows.
                (50, 100),
                (70, 100),
                (4, 200),
                (1, 1020),
                (1, 1030),
            ] {
                let x: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.13).sin()).collect();
                let w: Vec<T> = (0..n * k).map(|i| from((i as f32 * 0.91).cos())).collect();
                let packed = PackedWeight::pack(&w, n, k);
                let mut out = vec![f32::NAN; m * n];
                packed_matmul_with(&x, m, &packed, &mut out, kernel);
                for i in 0..m {
                    for j in 0..n {
                        let want = reference(&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
                        assert_eq!(
                            out[i * n + j].to_bits(),
                            want.to_bits(),
                            "{name}, {:?}: k {k}, {m} input rows, {n} weight rows: input {i}, \
                             weight {j}",
                            T::DTYPE
                        );
                    }
                }
            }
        }
    }
}
