//! SmolVLM's connector: the tower's states of each frame pixel-shuffled
//! by `scale_factor` (each `s × s` block of patches becomes one position
//! `s²` times as wide), then `modality_projection.proj`, a linear layer
//! without bias into the text model's width.

use candle_core::Tensor;
use guidebench_core::vision::SmolVlmConfig;

use super::layers::Linear;
use crate::error::Result;
use crate::model::Weights;

/// The pixel shuffle and the projection. See the [vision module docs](crate::vision).
#[derive(Debug, Clone)]
pub struct Connector {
    proj: Linear,
    /// The shuffle factor.
    scale: usize,
    /// Patches along a side of a frame.
    side: usize,
    /// The tower's width.
    width: usize,
}

impl Connector {
    /// Loads `proj.weight` under `w` (`model.connector.modality_projection`).
    pub fn load(w: &Weights, c: &SmolVlmConfig) -> Result<Self> {
        Ok(Connector {
            proj: Linear::load(&w.pp("proj"), c.text_hidden_size, c.connector_in(), false)?,
            scale: c.scale_factor,
            side: c.vision.patches_per_side(),
            width: c.vision.hidden_size,
        })
    }

    /// The features of `n` frames' states (`(n patches, width)`):
    /// `(n image_seq_len, text width)`, frame after frame.
    pub fn forward(&self, states: &Tensor, n: usize) -> Result<Tensor> {
        let x = pixel_shuffle(states, n, self.side, self.width, self.scale)?;
        self.proj.forward(&x)
    }
}

/// transformers' `SmolVLMConnector.pixel_shuffle` on `n` frames of
/// `side × side` states of width `d` (`(n side², d)`): output position
/// `(r, c)` of a frame (row by row over the `side / s` blocks) holds the
/// states of patches `(r s + i, c s + j)` for `i`, then `j`, in `0..s`,
/// back to back: `(n side² / s², d s²)`.
pub fn pixel_shuffle(x: &Tensor, n: usize, side: usize, d: usize, s: usize) -> Result<Tensor> {
    let blocks = side / s;
    Ok(x.reshape((n, blocks, s, blocks, s, d))?
        .permute((0, 1, 3, 2, 4, 5))?
        .contiguous()?
        .reshape((n * blocks * blocks, s * s * d))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn shuffled(values: usize, n: usize, side: usize, d: usize, s: usize) -> Vec<u32> {
        let x = Tensor::arange(0u32, values as u32, &Device::Cpu).expect("arange");
        pixel_shuffle(&x, n, side, d, s)
            .and_then(|t| Ok(t.flatten_all()?.to_vec1::<u32>()?))
            .expect("shuffles")
    }

    /// What torch 2.13 gives for `SmolVLMConnector.pixel_shuffle` on
    /// `arange` inputs.
    #[test]
    fn the_shuffle_gives_transformers_order() {
        assert_eq!(
            shuffled(32, 1, 4, 2, 2),
            [
                0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15, 16, 17, 18, 19, 24, 25, 26,
                27, 20, 21, 22, 23, 28, 29, 30, 31
            ]
        );
        assert_eq!(
            shuffled(36, 1, 6, 1, 3),
            [
                0, 1, 2, 6, 7, 8, 12, 13, 14, 3, 4, 5, 9, 10, 11, 15, 16, 17, 18, 19, 20, 24, 25,
                26, 30, 31, 32, 21, 22, 23, 27, 28, 29, 33, 34, 35
            ]
        );
    }

    #[test]
    fn frames_are_shuffled_each_on_its_own() {
        let two = shuffled(64, 2, 4, 2, 2);
        let one = shuffled(32, 1, 4, 2, 2);
        assert_eq!(&two[..32], one.as_slice());
        let second: Vec<u32> = one.iter().map(|v| v + 32).collect();
        assert_eq!(&two[32..], second.as_slice());
    }
}
