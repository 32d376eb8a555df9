//! Projection weights packed once at load for the CPU: `(out, in)` f32
//! weights regrouped into panels of [`PANEL`] output rows, each panel
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

use rayon::prelude::*;

use crate::arena::{ArenaBuf, WeightArena};
use crate::matvec::LINE_VALUES;

/// Output rows per panel.
pub const PANEL: usize = 16;

/// Bytes of panels a group of input rows works through before the next
/// group passes over the same panels (kept in the L2 cache meanwhile).
const BLOCK_BYTES: usize = 128 * 1024;

/// The most input rows per tile of any kernel.
const TILE_ROWS: usize = 8;

/// The most adjacent panels per tile of any kernel.
const TILE_PANELS: usize = 3;

/// Up to this many groups of input rows (up to 36 rows with AVX2, 48 with
/// AVX-512: decoding steps), tiles fetch ahead what their kernel's
/// [`Kernel::streams`] says, and every task takes all the groups over its
/// run of panels.
const PREFETCH_GROUPS: usize = 6;

/// With more groups than [`PREFETCH_GROUPS`] (a prefill chunk), a task
/// takes one block of panels for a band of this many groups: the product
/// is then split into many tasks of nearly equal work, where splitting
/// by panels alone left one thread with up to a task more than the other
/// (a 2,816-output projection in 8 tasks: 96 panels against 80). On a
/// 2-core Xeon with AVX-512, the 32 projections of a `builtin:tiny`
/// prefill chunk took 5-18 % less time at 512 rows (seven runs) and
/// 1-8 % less at 128 (five runs) than with tasks of panels for every
/// row (medians of 10 in one process); bands of 2, 8 and 16 groups and
/// tasks of two blocks ran no faster than 4 groups by one block.
const BAND_GROUPS: usize = 4;

/// An `(n, k)` weight in panels of [`PANEL`] rows (the last one padded
/// with zero rows), on a 64-byte boundary, in a [`WeightArena`]'s memory.
pub struct PackedWeight {
    data: ArenaBuf,
    n: usize,
    k: usize,
}

impl PackedWeight {
    /// Packs the row-major `(n, k)` weight `w` (at least `n * k` values)
    /// into memory of its own.
    #[cfg(test)]
    pub fn pack(w: &[f32], n: usize, k: usize) -> Self {
        Self::pack_in(w, n, k, &WeightArena::new())
    }

    /// Packs the row-major `(n, k)` weight `w` (at least `n * k` values)
    /// into memory from `arena`.
    pub fn pack_in(w: &[f32], n: usize, k: usize, arena: &WeightArena) -> Self {
        let len = n.div_ceil(PANEL) * PANEL * k;
        let mut data = arena.alloc(len);
        for (p, panel) in data
            .values_mut()
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
        PackedWeight { data, n, k }
    }

    /// Output rows `n`.
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Input values per row `k`.
    pub fn cols(&self) -> usize {
        self.k
    }

    /// The packed values: `n` rounded up to whole panels, times `k`.
    fn values(&self) -> &[f32] {
        self.data.values()
    }

    /// Row `j` of the weight as it was before packing.
    #[cfg(test)]
    pub fn row(&self, j: usize) -> Vec<f32> {
        let panel = &self.values()[(j / PANEL) * PANEL * self.k..];
        (0..self.k).map(|i| panel[i * PANEL + j % PANEL]).collect()
    }
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWeight")
            .field("rows", &self.n)
            .field("cols", &self.k)
            .finish_non_exhaustive()
    }
}

/// A kernel over `width` adjacent panels (at most the kernel's
/// [`Kernel::panels`]): `out[r][16 * q + c] = sum_i xs[r * k + i] * (panel
/// q)[i * 16 + c]` for the `rows` rows of `xs` (arguments: `xs`, `rows`,
/// `panels`, holding them all, `width`, `k`, `fetch`, `out`), fetching
/// into the caches meanwhile what `fetch` says.
type TileFn = fn(&[f32], usize, &[f32], usize, usize, Fetch<'_>, &mut Tile);

/// What a tile asks into the caches while it computes: a hint, which the
/// result does not depend on.
#[derive(Clone, Copy)]
enum Fetch<'a> {
    /// Nothing: the hardware prefetcher follows the panels.
    Nothing,
    /// These values, spread over the tile's input values (one group's
    /// share of the next block).
    Spread(&'a [f32]),
    /// Each panel's stream a fixed distance ahead of where the tile reads
    /// it (the AVX-512 kernel's first group of rows).
    Streams,
}

/// A kernel over several adjacent panels for one input row (arguments:
/// `xs`, `panels`, holding them all, `k`, `out`): `out[16 * q + c] =
/// sum_i xs[i] * (panel q)[i * 16 + c]`, each output summed as [`TileFn`]
/// sums it.
type PanelsFn = fn(&[f32], &[f32], usize, &mut [f32; MOST_PANELS * PANEL]);

/// One tile's outputs: up to [`TILE_ROWS`] rows of up to [`TILE_PANELS`]
/// panels' columns.
type Tile = [[f32; TILE_PANELS * PANEL]; TILE_ROWS];

/// The most panels a [`PanelsFn`] takes at a time.
const MOST_PANELS: usize = 4;

/// The kernels one product runs.
#[derive(Clone, Copy)]
struct Kernel {
    tile: TileFn,
    /// The most input rows [`Kernel::tile`] takes.
    rows: usize,
    /// The most adjacent panels [`Kernel::tile`] takes.
    panels: usize,
    /// For decoding steps' few groups of rows: whether the first group's
    /// tiles fetch each panel's stream a short distance ahead
    /// ([`Fetch::Streams`]) and the other groups share the next block
    /// ([`Fetch::Spread`]), or every group takes its share of the next
    /// block (and a single group fetches nothing).
    streams: bool,
    /// For a single input row: kernels over several panels at a time, as
    /// (panels, kernel), the widest first; a row takes the widest that
    /// the panels left in its task fill, and [`Kernel::tile`] for a last
    /// single panel.
    one_row: &'static [(usize, PanelsFn)],
}

/// `out` `(m, n)` = `x` `(m, k)` times the packed weight transposed, split
/// over rayon's threads by panels; the fastest kernel this CPU runs.
pub fn packed_matmul(x: &[f32], m: usize, w: &PackedWeight, out: &mut [f32]) {
    packed_matmul_with(x, m, w, out, best_kernel())
}

/// The portable kernel.
const PORTABLE: Kernel = Kernel {
    tile: tile_portable,
    rows: 6,
    panels: 1,
    streams: false,
    one_row: &[],
};

/// The AVX2 kernels (with FMA).
#[cfg(target_arch = "x86_64")]
const AVX2: Kernel = Kernel {
    tile: |xs, rows, panels, _width, k, fetch, out| {
        let ahead = match fetch {
            Fetch::Spread(ahead) => ahead,
            Fetch::Nothing | Fetch::Streams => &[],
        };
        // SAFETY: handed out only by `best_kernel` (and the tests) once
        // the CPU is known to support AVX2 and FMA.
        unsafe { tile_avx2_rows(xs, rows, panels, k, ahead, out) }
    },
    rows: 6,
    panels: 1,
    streams: false,
    one_row: ONE_ROW_AVX2,
};

/// The AVX-512 kernels.
#[cfg(target_arch = "x86_64")]
const AVX512: Kernel = Kernel {
    tile: |xs, rows, panels, width, k, fetch, out| {
        // SAFETY: handed out only by `best_kernel` (and the tests) once
        // the CPU is known to support AVX-512F.
        unsafe { tile_avx512_rows(xs, rows, panels, width, k, fetch, out) }
    },
    rows: AVX512_ROWS,
    panels: AVX512_PANELS,
    streams: true,
    one_row: &[],
};

/// The AVX2 kernels over several panels for one input row.
#[cfg(target_arch = "x86_64")]
const ONE_ROW_AVX2: &[(usize, PanelsFn)] = &[
    (4, |xs, panels, k, out| {
        // SAFETY: these are handed out only by `best_kernel` (and the
        // tests) once the CPU is known to support AVX2 and FMA.
        unsafe { panels_avx2::<4>(xs, panels, k, out) }
    }),
    (2, |xs, panels, k, out| {
        // SAFETY: as above.
        unsafe { panels_avx2::<2>(xs, panels, k, out) }
    }),
];

/// The AVX-512 kernels when the CPU has AVX-512F, else the AVX2 ones when
/// it has AVX2 and FMA, else the portable one.
fn best_kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::matvec::has_avx512() {
            return AVX512;
        }
        if crate::matvec::has_avx2_fma() {
            return AVX2;
        }
    }
    PORTABLE
}

fn packed_matmul_with(x: &[f32], m: usize, w: &PackedWeight, out: &mut [f32], kernel: Kernel) {
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
    let values = w.values();
    // Groups of input rows of nearly equal size (8 rows in tiles of 6:
    // 4 + 4, not 6 + 2).
    let groups = m.div_ceil(kernel.rows.clamp(1, TILE_ROWS));
    let (base, extra) = (m / groups, m % groups);
    let prefetch = groups <= PREFETCH_GROUPS;
    // Decoding steps: a few tasks per thread, each a run of whole tiles
    // for every group. Many groups: tasks of one block by a band of
    // groups ([`BAND_GROUPS`]). Each task writes its own elements of
    // `out`.
    let threads = rayon::current_num_threads().max(1);
    let block = (BLOCK_BYTES / (panel_len * std::mem::size_of::<f32>()))
        .max(1)
        .next_multiple_of(width);
    let (per_task, band) = if prefetch {
        let per_task = panels.div_ceil(threads * 4).max(1).next_multiple_of(width);
        (per_task, groups)
    } else {
        (block, BAND_GROUPS)
    };
    // One group passes over the panels once: no blocks to keep in the L2
    // cache (and a single row's panel pairs may span them).
    let block = if groups == 1 { per_task } else { block };
    let bands = groups.div_ceil(band);
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
    let out = SharedOut {
        ptr: out.as_mut_ptr(),
        m,
        n,
    };
    // With bands, consecutive tasks share their block, so a thread that
    // runs them one after another (rayon splits the range in halves)
    // finds it in its L2 cache for every band after the first.
    (0..panels.div_ceil(per_task) * bands)
        .into_par_iter()
        .for_each(|task| {
            let (task, band_index) = (task / bands, task % bands);
            let first = task * per_task;
            let last = (first + per_task).min(panels);
            let first_group = band_index * band;
            let groups_here = first_group..(first_group + band).min(groups);
            let (mut tile, mut several_out) = (
                [[0f32; TILE_PANELS * PANEL]; TILE_ROWS],
                [0f32; MOST_PANELS * PANEL],
            );
            let mut b = first;
            while b < last {
                let end = (b + block).min(last);
                // The first row of the band's first group.
                let mut i = first_group * base + first_group.min(extra);
                for g in groups_here.clone() {
                    let rows = base + usize::from(g < extra);
                    let xs = &x[i * k..(i + rows) * k];
                    let mut p = b;
                    while p < end {
                        // One input row: several panels at a time, more
                        // independent sums and more memory streams.
                        let several = match rows {
                            1 => kernel.one_row.iter().find(|(w, _)| p + w <= end),
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
                                let next =
                                    &values[q * panel_len..(q + width).min(panels) * panel_len];
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
                    i += rows;
                }
                b = end;
            }
        });
}

/// The `(m, n)` output, handed to rayon's tasks, which write disjoint
/// parts of it (columns, of a band of rows): each through slices of its
/// own elements only.
#[derive(Clone, Copy)]
struct SharedOut {
    ptr: *mut f32,
    m: usize,
    n: usize,
}

// SAFETY: the pointer is only written through in `packed_matmul_with`,
// where every task writes disjoint elements.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// Columns `col..col + cols` of row `row`.
    ///
    /// # Safety
    ///
    /// No other slice of these elements may be alive while this one is.
    unsafe fn cols<'a>(&self, row: usize, col: usize, cols: usize) -> &'a mut [f32] {
        assert!(row < self.m && col + cols <= self.n);
        // SAFETY: inside the `m * n` values `ptr` points to (asserted);
        // exclusive by the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(row * self.n + col), cols) }
    }
}

/// The portable kernel: the same multiply-adds as the vector ones, in the
/// same order, one value at a time.
fn tile_portable(
    xs: &[f32],
    rows: usize,
    panels: &[f32],
    width: usize,
    k: usize,
    _fetch: Fetch<'_>,
    out: &mut Tile,
) {
    for (r, out) in out[..rows].iter_mut().enumerate() {
        let x_row = &xs[r * k..(r + 1) * k];
        for (q, acc) in out.chunks_exact_mut(PANEL).take(width).enumerate() {
            let panel = &panels[q * PANEL * k..(q + 1) * PANEL * k];
            acc.fill(0.0);
            for (x, w) in x_row.iter().zip(panel.chunks_exact(PANEL)) {
                for (a, w) in acc.iter_mut().zip(w) {
                    *a = x.mul_add(*w, *a);
                }
            }
        }
    }
}

/// [`Fetch::Spread`] as a tile goes: the lines of `ahead`, one every few
/// of the tile's `k` input values (a prefetch per input value at most, so
/// the memory stream runs beside the arithmetic rather than in bursts).
#[cfg(target_arch = "x86_64")]
struct SpreadFetch<'a> {
    ahead: &'a [f32],
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
impl<'a> SpreadFetch<'a> {
    fn new(ahead: &'a [f32], k: usize) -> Self {
        let lines = ahead.len().div_ceil(LINE_VALUES);
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
    fn step(&mut self) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        if self.countdown == 0 && self.line < self.lines {
            // SAFETY: `line < lines`: a pointer into `ahead`; a prefetch
            // reads nothing.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(
                    self.ahead.as_ptr().add(self.line * LINE_VALUES).cast(),
                );
            }
            self.line += 1;
            self.countdown = self.every;
        }
        self.countdown = self.countdown.wrapping_sub(1);
    }
}

/// [`tile_avx2`] for `rows` (1 to 6) input rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn tile_avx2_rows(xs: &[f32], rows: usize, panel: &[f32], k: usize, ahead: &[f32], out: &mut Tile) {
    if ahead.is_empty() {
        tile_avx2_fetching::<false>(xs, rows, panel, k, ahead, out)
    } else {
        tile_avx2_fetching::<true>(xs, rows, panel, k, ahead, out)
    }
}

/// [`tile_avx2`] for `rows` input rows, fetching `ahead` or not.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn tile_avx2_fetching<const FETCH: bool>(
    xs: &[f32],
    rows: usize,
    panel: &[f32],
    k: usize,
    ahead: &[f32],
    out: &mut Tile,
) {
    match rows {
        6 => tile_avx2::<6, FETCH>(xs, panel, k, ahead, out),
        5 => tile_avx2::<5, FETCH>(xs, panel, k, ahead, out),
        4 => tile_avx2::<4, FETCH>(xs, panel, k, ahead, out),
        3 => tile_avx2::<3, FETCH>(xs, panel, k, ahead, out),
        2 => tile_avx2::<2, FETCH>(xs, panel, k, ahead, out),
        _ => tile_avx2::<1, FETCH>(xs, panel, k, ahead, out),
    }
}

/// One AVX2 tile: `R` input rows by one panel's 16 outputs in 2 × `R`
/// accumulators; for every input value, the panel's two vectors loaded
/// once and the `R` rows' values broadcast. With `FETCH`, the cache lines
/// of `ahead` are requested along the way, one every few input values (a
/// prefetch per iteration at most, so the memory stream runs beside the
/// arithmetic rather than in bursts).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::needless_range_loop)] // `r` indexes the inputs and the accumulators
fn tile_avx2<const R: usize, const FETCH: bool>(
    xs: &[f32],
    panel: &[f32],
    k: usize,
    ahead: &[f32],
    out: &mut Tile,
) {
    use std::arch::x86_64::{
        __m256, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps,
        _mm256_storeu_ps,
    };
    assert!(xs.len() >= R * k && panel.len() >= PANEL * k);
    let mut lo: [__m256; R] = [_mm256_setzero_ps(); R];
    let mut hi: [__m256; R] = [_mm256_setzero_ps(); R];
    let mut spread = SpreadFetch::new(ahead, k);
    for i in 0..k {
        if FETCH {
            spread.step();
        }
        // SAFETY: `i < k`: the panel holds `16 * k` values and `xs` `R`
        // rows of `k` (asserted above); unaligned loads.
        unsafe {
            let w = panel.as_ptr().add(i * PANEL);
            let w0 = _mm256_loadu_ps(w);
            let w1 = _mm256_loadu_ps(w.add(8));
            for r in 0..R {
                let v = _mm256_broadcast_ss(&*xs.as_ptr().add(r * k + i));
                lo[r] = _mm256_fmadd_ps(v, w0, lo[r]);
                hi[r] = _mm256_fmadd_ps(v, w1, hi[r]);
            }
        }
    }
    for (r, row) in out.iter_mut().take(R).enumerate() {
        // SAFETY: `row` holds 16 values; unaligned stores.
        unsafe {
            _mm256_storeu_ps(row.as_mut_ptr(), lo[r]);
            _mm256_storeu_ps(row.as_mut_ptr().add(8), hi[r]);
        }
    }
}

/// One input row against `P` adjacent panels (`panels`, `16 * P`
/// outputs) with AVX2: `2 * P` accumulators, so `2 * P` independent chains
/// of multiply-adds where one panel has two (a single row is bound by
/// their latency, not by the arithmetic), and `P` streams of weights read
/// side by side (fewer streams per thread read memory more slowly here:
/// the 33 products of a batch-1 step took 5-12 % longer with two panels at
/// a time than with four, medians of 40 in nine runs; six were no faster
/// than four). Each output's sum is the same as in [`tile_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn panels_avx2<const P: usize>(
    xs: &[f32],
    panels: &[f32],
    k: usize,
    out: &mut [f32; MOST_PANELS * PANEL],
) {
    use std::arch::x86_64::{
        __m256, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps,
        _mm256_storeu_ps,
    };
    assert!(xs.len() >= k && panels.len() >= P * PANEL * k && P <= MOST_PANELS);
    let stride = PANEL * k;
    let mut acc: [[__m256; 2]; P] = [[_mm256_setzero_ps(); 2]; P];
    for i in 0..k {
        // SAFETY: `i < k`: `xs` holds `k` values and `panels` `P` panels
        // of `16 * k` (asserted above); unaligned loads.
        unsafe {
            let v = _mm256_broadcast_ss(&*xs.as_ptr().add(i));
            let w = panels.as_ptr().add(i * PANEL);
            for (q, acc) in acc.iter_mut().enumerate() {
                let w = w.add(q * stride);
                acc[0] = _mm256_fmadd_ps(v, _mm256_loadu_ps(w), acc[0]);
                acc[1] = _mm256_fmadd_ps(v, _mm256_loadu_ps(w.add(8)), acc[1]);
            }
        }
    }
    for (chunk, a) in out.chunks_exact_mut(8).zip(acc.iter().flatten()) {
        // SAFETY: `chunk` holds 8 values; unaligned store.
        unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), *a) };
    }
}

/// The most input rows per AVX-512 tile.
#[cfg(target_arch = "x86_64")]
const AVX512_ROWS: usize = 8;

/// The most adjacent panels per AVX-512 tile.
#[cfg(target_arch = "x86_64")]
const AVX512_PANELS: usize = 3;

/// [`tile_avx512`]'s fetch modes: nothing, [`Fetch::Spread`] and
/// [`Fetch::Streams`].
#[cfg(target_arch = "x86_64")]
const NOTHING: u8 = 0;
/// See [`NOTHING`].
#[cfg(target_arch = "x86_64")]
const SPREAD: u8 = 1;
/// See [`NOTHING`].
#[cfg(target_arch = "x86_64")]
const STREAMS: u8 = 2;

/// How far ahead of its reads an AVX-512 tile fetches each panel's
/// stream, in values (2 KiB). On a 2-core Xeon with AVX-512 (weights from
/// its L3 cache), the 33 products of a builtin:tiny step took 15 % less
/// time at 1 row and 22 % less at 8 rows than with the hardware
/// prefetcher alone (medians of 40), 512 or 1 024 values ahead, while
/// 2 048 and 4 096 gained less; at 32 rows, 3-9 % less than fetching the
/// next block as the AVX2 kernel does (three runs).
#[cfg(target_arch = "x86_64")]
const STREAM_AHEAD: usize = 512;

/// [`tile_avx512`] for `rows` (1 to [`AVX512_ROWS`]) input rows and
/// `width` (1 to [`AVX512_PANELS`]) panels, fetching what `fetch` says.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn tile_avx512_rows(
    xs: &[f32],
    rows: usize,
    panels: &[f32],
    width: usize,
    k: usize,
    fetch: Fetch<'_>,
    out: &mut Tile,
) {
    let (ahead, mode) = match fetch {
        Fetch::Nothing => (&[][..], NOTHING),
        Fetch::Spread(ahead) => (ahead, SPREAD),
        Fetch::Streams => (&[][..], STREAMS),
    };
    match (width, mode) {
        (3, NOTHING) => tile_avx512_width::<3, NOTHING>(xs, rows, panels, k, ahead, out),
        (3, SPREAD) => tile_avx512_width::<3, SPREAD>(xs, rows, panels, k, ahead, out),
        (3, _) => tile_avx512_width::<3, STREAMS>(xs, rows, panels, k, ahead, out),
        (2, NOTHING) => tile_avx512_width::<2, NOTHING>(xs, rows, panels, k, ahead, out),
        (2, SPREAD) => tile_avx512_width::<2, SPREAD>(xs, rows, panels, k, ahead, out),
        (2, _) => tile_avx512_width::<2, STREAMS>(xs, rows, panels, k, ahead, out),
        (_, NOTHING) => tile_avx512_width::<1, NOTHING>(xs, rows, panels, k, ahead, out),
        (_, SPREAD) => tile_avx512_width::<1, SPREAD>(xs, rows, panels, k, ahead, out),
        (_, _) => tile_avx512_width::<1, STREAMS>(xs, rows, panels, k, ahead, out),
    }
}

/// [`tile_avx512`] for `rows` input rows and `P` panels.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn tile_avx512_width<const P: usize, const FETCH: u8>(
    xs: &[f32],
    rows: usize,
    panels: &[f32],
    k: usize,
    ahead: &[f32],
    out: &mut Tile,
) {
    match rows {
        8 => tile_avx512::<8, P, FETCH>(xs, panels, k, ahead, out),
        7 => tile_avx512::<7, P, FETCH>(xs, panels, k, ahead, out),
        6 => tile_avx512::<6, P, FETCH>(xs, panels, k, ahead, out),
        5 => tile_avx512::<5, P, FETCH>(xs, panels, k, ahead, out),
        4 => tile_avx512::<4, P, FETCH>(xs, panels, k, ahead, out),
        3 => tile_avx512::<3, P, FETCH>(xs, panels, k, ahead, out),
        2 => tile_avx512::<2, P, FETCH>(xs, panels, k, ahead, out),
        _ => tile_avx512::<1, P, FETCH>(xs, panels, k, ahead, out),
    }
}

/// One AVX-512 tile: `R` input rows by `P` adjacent panels in `R * P`
/// 16-lane accumulators; for every input value, each panel's vector
/// loaded once and each row's value broadcast, so `P + R` loads per
/// `R * P` multiply-adds and `P` weight streams read side by side. With
/// `FETCH` [`STREAMS`], each panel's line [`STREAM_AHEAD`] values ahead is
/// requested as the tile goes, one per panel and input value; with
/// [`SPREAD`], the lines of `ahead`, one every few input values, as in
/// [`tile_avx2`]. Each output's sum is the same as in [`tile_portable`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // `r` indexes the inputs and the accumulators
fn tile_avx512<const R: usize, const P: usize, const FETCH: u8>(
    xs: &[f32],
    panels: &[f32],
    k: usize,
    ahead: &[f32],
    out: &mut Tile,
) {
    use std::arch::x86_64::{
        __m512, _MM_HINT_T0, _mm_prefetch, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps,
        _mm512_setzero_ps, _mm512_storeu_ps,
    };
    assert!(R <= TILE_ROWS && P <= TILE_PANELS);
    assert!(xs.len() >= R * k && panels.len() >= P * PANEL * k);
    let stride = PANEL * k;
    let mut acc: [[__m512; P]; R] = [[_mm512_setzero_ps(); P]; R];
    let mut spread = SpreadFetch::new(ahead, k);
    for i in 0..k {
        if FETCH == SPREAD {
            spread.step();
        }
        // SAFETY: `i < k`: `panels` holds `P` panels of `16 * k` values
        // and `xs` `R` rows of `k` (asserted above); unaligned loads.
        unsafe {
            let w = panels.as_ptr().add(i * PANEL);
            if FETCH == STREAMS {
                // Lines past a panel's end (or the weight's) are
                // fetched for nothing: a prefetch never faults.
                for q in 0..P {
                    let line = w.wrapping_add(q * stride + STREAM_AHEAD);
                    _mm_prefetch::<_MM_HINT_T0>(line.cast());
                }
            }
            let mut wv = [_mm512_setzero_ps(); P];
            for (q, v) in wv.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(w.add(q * stride));
            }
            for r in 0..R {
                let v = _mm512_set1_ps(*xs.as_ptr().add(r * k + i));
                for (a, w) in acc[r].iter_mut().zip(&wv) {
                    *a = _mm512_fmadd_ps(v, *w, *a);
                }
            }
        }
    }
    for (row, acc) in out.iter_mut().zip(&acc) {
        for (chunk, a) in row.chunks_exact_mut(PANEL).zip(acc) {
            // SAFETY: `chunk` holds 16 values; unaligned store.
            unsafe { _mm512_storeu_ps(chunk.as_mut_ptr(), *a) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order every kernel keeps: one fused multiply-add per input
    /// value, from the first.
    fn reference(x: &[f32], w: &[f32]) -> f32 {
        x.iter().zip(w).fold(0.0, |acc, (x, w)| x.mul_add(*w, acc))
    }

    #[test]
    fn packing_keeps_every_weight_row() {
        let (n, k) = (37, 9);
        let w: Vec<f32> = (0..n * k).map(|i| i as f32).collect();
        let packed = PackedWeight::pack(&w, n, k);
        assert_eq!((packed.rows(), packed.cols()), (n, k));
        assert!((packed.values().as_ptr() as usize).is_multiple_of(64));
        for j in 0..n {
            assert_eq!(packed.row(j), w[j * k..(j + 1) * k], "row {j}");
        }
    }

    #[test]
    fn every_kernel_gives_the_bits_of_one_multiply_add_per_input_value() {
        // Rows from one to a prefill chunk, whole tiles and remainders of
        // every size; outputs that fill whole panels and leave a partial
        // one; lengths that span several blocks of panels.
        let mut kernels: Vec<(&str, Kernel)> = vec![
            ("portable", PORTABLE),
            (
                "portable, tiles of 8 rows by 3 panels",
                Kernel {
                    rows: 8,
                    panels: 3,
                    ..PORTABLE
                },
            ),
        ];
        if crate::matvec::has_avx512() {
            kernels.push(("avx512", AVX512));
            kernels.push((
                "avx512, tiles of one panel",
                Kernel {
                    panels: 1,
                    ..AVX512
                },
            ));
        } else {
            eprintln!("this CPU has no AVX-512F: that kernel is not tested here");
        }
        if crate::matvec::has_avx2_fma() {
            let avx2 = AVX2;
            kernels.push(("avx2+fma", avx2));
            kernels.push((
                "avx2+fma, two panels at most",
                Kernel {
                    one_row: &ONE_ROW_AVX2[1..],
                    ..avx2
                },
            ));
            kernels.push((
                "avx2+fma, one panel at a time",
                Kernel {
                    one_row: &[],
                    ..avx2
                },
            ));
        } else {
            eprintln!("this CPU has no AVX2+FMA: that kernel is not tested here");
        }
        // On one thread too: a task then holds enough panels for a single
        // row to take four at a time on any machine.
        let one_thread = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a thread pool");
        for (name, kernel) in kernels {
            one_thread.install(|| check_kernel(name, kernel));
            check_kernel(name, kernel);
        }
    }

    /// [`every_kernel_gives_the_bits_of_one_multiply_add_per_input_value`]
    /// for one kernel, on the current thread pool.
    fn check_kernel(name: &str, kernel: Kernel) {
        {
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
                    let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.91).cos()).collect();
                    let packed = PackedWeight::pack(&w, n, k);
                    let mut out = vec![f32::NAN; m * n];
                    packed_matmul_with(&x, m, &packed, &mut out, kernel);
                    for i in 0..m {
                        for j in 0..n {
                            let want = reference(&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
                            assert_eq!(
                                out[i * n + j].to_bits(),
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
}
