//! The portable kernels: plain Rust for every CPU, one value at a time,
//! in the order of every sum that the vector kernels keep (so the same
//! bits).

use super::{Fetch, Kernel, LANES, PANEL, PackedElem, Tile};

/// `out[j * m + i] = dot(x[i], w[j])` for the weight rows in `w` (each
/// `k` values; `x` holds `m` rows).
#[inline(always)]
pub(crate) fn rows_times_portable(x: &[f32], w: &[f32], out: &mut [f32], m: usize, k: usize) {
    for (w_row, out) in w.chunks_exact(k).zip(out.chunks_exact_mut(m)) {
        for (x_row, o) in x.chunks_exact(k).zip(out.iter_mut()) {
            *o = dot(x_row, w_row);
        }
    }
}

/// The dot-product kernels' sum: 16 lanes of fused multiply-adds, then
/// [`finish_dot`].
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let main = a.len() - a.len() % LANES;
    let (a_main, a_rest) = a.split_at(main);
    let (b_main, b_rest) = b.split_at(main);
    let mut acc = [0f32; LANES];
    for (x, y) in a_main.chunks_exact(LANES).zip(b_main.chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    finish_dot(acc, a_rest, b_rest)
}

/// Adds the tail products to the lanes, then sums the lanes pairwise, in a
/// fixed order.
#[inline(always)]
pub(crate) fn finish_dot(mut acc: [f32; LANES], a_rest: &[f32], b_rest: &[f32]) -> f32 {
    for (l, (x, y)) in a_rest.iter().zip(b_rest).enumerate() {
        acc[l] = x.mul_add(*y, acc[l]);
    }
    let mut width = LANES / 2;
    while width > 0 {
        for l in 0..width {
            acc[l] += acc[l + width];
        }
        width /= 2;
    }
    acc[0]
}

/// The portable packed kernels for weights of `T`.
pub(crate) fn kernel<T: PackedElem>() -> Kernel<T> {
    Kernel {
        tile: tile_portable::<T>,
        rows: 6,
        panels: 1,
        streams: false,
        one_row: [None, None],
    }
}

/// The portable packed tile: the same multiply-adds as the vector ones,
/// in the same order, one value at a time, each weight widened to f32.
fn tile_portable<T: PackedElem>(
    xs: &[f32],
    rows: usize,
    panels: &[T],
    width: usize,
    k: usize,
    _fetch: Fetch<'_, T>,
    out: &mut Tile,
) {
    for (r, out) in out[..rows].iter_mut().enumerate() {
        let x_row = &xs[r * k..(r + 1) * k];
        for (q, acc) in out.chunks_exact_mut(PANEL).take(width).enumerate() {
            let panel = &panels[q * PANEL * k..(q + 1) * PANEL * k];
            acc.fill(0.0);
            for (x, w) in x_row.iter().zip(panel.chunks_exact(PANEL)) {
                for (a, w) in acc.iter_mut().zip(w) {
                    *a = x.mul_add(w.to_f32(), *a);
                }
            }
        }
    }
}
