//! The quantized activation tile a product kernel takes, and the portable
//! steps that quantize one activation row into it. Below both the
//! quantizer (`acts.rs`) and the kernels of each instruction set, which
//! compile the same steps with their own instructions.

use super::QK_K;

/// Up to [`super::TILE_ROWS`] quantized activation rows, for a kernel: `qs` is
/// `rows * k` values, `d` one scale per block, `bsums` 16 sums per
/// 256-value block or one per 32-value block.
#[derive(Clone, Copy)]
pub(crate) struct ActTile<'a> {
    pub(crate) qs: &'a [i8],
    pub(crate) d: &'a [f32],
    pub(crate) bsums: &'a [i16],
    pub(crate) rows: usize,
    pub(crate) k: usize,
}

/// The steps of quantizing one activation row (portable; the AVX2 path
/// compiles the same body with its instructions): the maximum over 16
/// lanes, each value times `127 / max` rounded to the nearest, ties to
/// even.
#[inline(always)]
pub(super) fn quantize_row_body(
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    bsums: &mut [i16],
    sum_len: usize,
    block: usize,
) {
    for (b, (x, qs)) in x
        .chunks_exact(block)
        .zip(qs.chunks_exact_mut(block))
        .enumerate()
    {
        let mut lanes = [0f32; 16];
        for x in x.chunks_exact(16) {
            for (lane, v) in lanes.iter_mut().zip(x) {
                *lane = lane.max(v.abs());
            }
        }
        let amax = lanes.iter().fold(0f32, |a, v| a.max(*v));
        let id = if amax == 0.0 { 0.0 } else { 127.0 / amax };
        // 32-value blocks keep their scale as ggml's `block_q8_0` does, in
        // f16 (llama.cpp's products then use that rounded scale); 256-value
        // ones in f32, as `block_q8_K` does.
        d[b] = if block == QK_K {
            amax / 127.0
        } else {
            half::f16::from_f32(amax / 127.0).to_f32()
        };
        for (q, v) in qs.iter_mut().zip(x) {
            *q = (v * id).round_ties_even() as i8;
        }
    }
    for (s, qs) in bsums.iter_mut().zip(qs.chunks_exact(sum_len)) {
        *s = qs.iter().map(|q| i16::from(*q)).sum();
    }
}
