//! The AVX-512 kernels (BW and VNNI): 64 weight values at a time.

use super::{ActTile, QuantType, TILE_ROWS};

/// One weight row of `ty` times the tile's rows into `out[..rows]`.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vnni")]
pub(crate) fn row_times_tile(ty: QuantType, w: &[u8], t: &ActTile<'_>, out: &mut [f32; TILE_ROWS]) {
    super::avx2::row_times_tile(ty, w, t, out)
}
