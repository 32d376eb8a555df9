//! How a product of activation rows by a weight is cut into rayon tasks,
//! and the output those tasks share: one plan for the packed products
//! ([`crate::packed`]) and the quantized ones ([`crate::quant`]).
//!
//! The `m` activation rows go in tiles of nearly equal size (9 rows in
//! tiles of up to 8: 5 + 4, not 8 + 1), the weight's units (rows, groups
//! of rows, panels) in runs small enough to stay in the L2 cache. With
//! few tiles (a decoding step) a task takes about a quarter of a
//! thread's share of the units for every tile; with more (a prefill
//! chunk), one run for a band of [`BAND_TILES`] tiles, so the product is
//! split into many tasks of nearly equal work. A task walks its units run
//! by run, each run against every tile of its band, so a run's weights
//! stay in cache while the tiles go by.
//!
//! The plan only says which outputs a task computes and in what order it
//! visits them; every output is still one kernel's sum, so the plan
//! changes no bits. Tasks write disjoint outputs, through [`SharedOut`].

use std::marker::PhantomData;
use std::ops::Range;

/// With more tiles than the plan's `few_tiles` (a prefill chunk), a task
/// takes one run of units for a band of this many tiles. On a 2-core
/// Xeon with AVX-512, the 32 packed projections of a `builtin:tiny`
/// prefill chunk took 5-18 % less time at 512 rows (seven runs) and
/// 1-8 % less at 128 (five runs) than with tasks of panels for every
/// row (medians of 10 in one process); bands of 2, 8 and 16 tiles and
/// tasks of two runs ran no faster than 4 tiles by one run. Splitting by
/// units alone left one thread with up to a task more than the other (a
/// 2,816-output projection in 8 tasks: 96 panels against 80).
pub(crate) const BAND_TILES: usize = 4;

/// What a product gives [`TaskPlan::new`] to cut.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Work {
    /// Activation rows `m`.
    pub(crate) rows: usize,
    /// The most activation rows one kernel call takes (a tile).
    pub(crate) tile_rows: usize,
    /// The weight's units: what a task owns a range of (weight rows,
    /// groups of rows, panels).
    pub(crate) units: usize,
    /// Units of a run: what the tiles of a band go through before the
    /// next run (kept in the L2 cache meanwhile).
    pub(crate) run: usize,
    /// Up to this many tiles (decoding steps), every task takes them all
    /// over its units.
    pub(crate) few_tiles: usize,
    /// With few tiles, a task owns a multiple of this many units (a
    /// kernel's width in units).
    pub(crate) unit_multiple: usize,
}

/// How a product is cut into rayon tasks ([`TaskPlan::tasks`] of them):
/// the units and the band of tiles each task owns, the runs it walks
/// its units in, and the rows of each tile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskPlan {
    units: usize,
    run: usize,
    per_task: usize,
    tiles: usize,
    base: usize,
    extra: usize,
    band: usize,
    bands: usize,
}

impl TaskPlan {
    /// The plan of `work` on rayon's current thread count.
    pub(crate) fn new(work: Work) -> Self {
        let Work {
            rows: m,
            tile_rows,
            units,
            run,
            few_tiles,
            unit_multiple,
        } = work;
        let tiles = m.div_ceil(tile_rows.max(1)).max(1);
        let threads = rayon::current_num_threads().max(1);
        let (per_task, band) = if tiles <= few_tiles {
            let per_task = units
                .div_ceil(threads * 4)
                .max(1)
                .next_multiple_of(unit_multiple.max(1));
            (per_task, tiles)
        } else {
            (run.max(1), BAND_TILES)
        };
        // One tile passes over the units once: no runs to keep in cache
        // (and the same order of work as runs of any length).
        let run = if tiles == 1 { per_task } else { run.max(1) };
        TaskPlan {
            units,
            run,
            per_task,
            tiles,
            base: m / tiles,
            extra: m % tiles,
            band,
            bands: tiles.div_ceil(band),
        }
    }

    /// How many tasks there are. With bands, consecutive tasks share
    /// their units, so a thread that runs them one after another (rayon
    /// splits the range in halves) finds them in its L2 cache for every
    /// band after the first.
    pub(crate) fn tasks(&self) -> usize {
        self.units.div_ceil(self.per_task) * self.bands
    }

    /// The units task `task` owns, and the tiles of its band.
    pub(crate) fn task(&self, task: usize) -> (Range<usize>, Range<usize>) {
        let (task, band) = (task / self.bands, task % self.bands);
        (
            task * self.per_task..((task + 1) * self.per_task).min(self.units),
            band * self.band..((band + 1) * self.band).min(self.tiles),
        )
    }

    /// `owned` in runs of at most the plan's run of units.
    pub(crate) fn runs(&self, owned: Range<usize>) -> impl Iterator<Item = Range<usize>> {
        let (run, end) = (self.run, owned.end);
        owned
            .step_by(run)
            .map(move |start| start..(start + run).min(end))
    }

    /// Units in a run.
    pub(crate) fn run(&self) -> usize {
        self.run
    }

    /// How many tiles the activation rows make.
    pub(crate) fn tiles(&self) -> usize {
        self.tiles
    }

    /// The first activation row of tile `g`, and its number of rows.
    pub(crate) fn tile(&self, g: usize) -> (usize, usize) {
        (
            g * self.base + g.min(self.extra),
            self.base + usize::from(g < self.extra),
        )
    }
}

/// A product's output, rows of `ldo` values, handed to rayon's tasks,
/// which write disjoint elements of it (columns of a band of rows), each
/// through writes or slices of its own elements only.
#[derive(Clone, Copy)]
pub(crate) struct SharedOut<'a> {
    ptr: *mut f32,
    len: usize,
    ldo: usize,
    /// The output is borrowed for as long as the tasks run.
    out: PhantomData<&'a mut [f32]>,
}

// SAFETY: the pointer comes from a `&mut [f32]` borrowed for `'a`; it is
// only written through by tasks that write disjoint elements (the
// promise of `set` and `cols`).
unsafe impl Send for SharedOut<'_> {}
// SAFETY: as above.
unsafe impl Sync for SharedOut<'_> {}

impl<'a> SharedOut<'a> {
    /// `out`, in rows of `ldo` values.
    pub(crate) fn new(out: &'a mut [f32], ldo: usize) -> Self {
        SharedOut {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            ldo,
            out: PhantomData,
        }
    }

    /// Writes element `(row, col)`.
    ///
    /// # Safety
    ///
    /// No other task may write or read this element meanwhile.
    #[inline(always)]
    pub(crate) unsafe fn set(&self, row: usize, col: usize, value: f32) {
        let at = row * self.ldo + col;
        assert!(at < self.len);
        // SAFETY: inside the `len` values `ptr` points to (asserted);
        // exclusive by the caller's promise.
        unsafe { *self.ptr.add(at) = value };
    }

    /// Columns `col..col + cols` of row `row`.
    ///
    /// # Safety
    ///
    /// No other task may write or read these elements, and no other
    /// slice of them may be alive, while this one is.
    #[inline(always)]
    pub(crate) unsafe fn cols(&self, row: usize, col: usize, cols: usize) -> &'a mut [f32] {
        let at = row * self.ldo + col;
        assert!(at + cols <= self.len && col + cols <= self.ldo);
        // SAFETY: inside the `len` values `ptr` points to (asserted);
        // exclusive by the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), cols) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (unit, activation row) pair the plan of `work` visits, in
    /// task order, planned on `pool`.
    fn visits(work: Work, pool: &rayon::ThreadPool) -> Vec<(usize, usize)> {
        let plan = pool.install(|| TaskPlan::new(work));
        let mut seen = Vec::new();
        for task in 0..plan.tasks() {
            let (owned, tiles) = plan.task(task);
            for run in plan.runs(owned) {
                for g in tiles.clone() {
                    let (first, count) = plan.tile(g);
                    for unit in run.clone() {
                        for row in first..first + count {
                            seen.push((unit, row));
                        }
                    }
                }
            }
        }
        seen
    }

    #[test]
    fn every_unit_meets_every_row_exactly_once() {
        let pools: Vec<rayon::ThreadPool> = [1, 2, 3]
            .into_iter()
            .map(|threads| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("a pool")
            })
            .collect();
        for rows in [1usize, 3, 8, 9, 33, 40, 100, 512] {
            for units in [1usize, 5, 16, 100, 177] {
                for (run, few_tiles, unit_multiple) in [(1, 4, 1), (7, 4, 1), (6, 6, 3), (40, 6, 2)]
                {
                    for pool in &pools {
                        let work = Work {
                            rows,
                            tile_rows: 8,
                            units,
                            run,
                            few_tiles,
                            unit_multiple,
                        };
                        let mut seen = visits(work, pool);
                        seen.sort_unstable();
                        let want: Vec<(usize, usize)> = (0..units)
                            .flat_map(|u| (0..rows).map(move |r| (u, r)))
                            .collect();
                        let threads = pool.current_num_threads();
                        assert_eq!(seen, want, "{work:?} on {threads} threads");
                    }
                }
            }
        }
    }

    #[test]
    fn tiles_are_of_nearly_equal_size() {
        let plan = TaskPlan::new(Work {
            rows: 9,
            tile_rows: 8,
            units: 4,
            run: 4,
            few_tiles: 4,
            unit_multiple: 1,
        });
        assert_eq!(plan.tiles(), 2);
        assert_eq!((plan.tile(0), plan.tile(1)), ((0, 5), (5, 4)));
    }

    #[test]
    fn many_tiles_go_in_bands_of_one_run_each() {
        let plan = TaskPlan::new(Work {
            rows: 80,
            tile_rows: 8,
            units: 30,
            run: 10,
            few_tiles: 4,
            unit_multiple: 1,
        });
        // 10 tiles in bands of 4, 4 and 2; three runs of 10 units.
        assert_eq!(plan.tasks(), 9);
        assert_eq!(plan.task(0), (0..10, 0..4));
        assert_eq!(plan.task(2), (0..10, 8..10));
        assert_eq!(plan.task(4), (10..20, 4..8));
    }

    #[test]
    fn a_task_of_few_tiles_owns_a_multiple_of_the_unit_multiple() {
        let plan = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("a pool")
            .install(|| {
                TaskPlan::new(Work {
                    rows: 16,
                    tile_rows: 8,
                    units: 100,
                    run: 9,
                    few_tiles: 6,
                    unit_multiple: 3,
                })
            });
        // 100 units over 2 threads x 4: 13, up to a multiple of 3.
        assert_eq!(plan.task(0), (0..15, 0..2));
        assert_eq!(plan.tasks(), 7);
        assert_eq!(plan.runs(0..15).collect::<Vec<_>>(), [0..9, 9..15]);
    }
}
