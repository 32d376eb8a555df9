//! SmolVLM's (Idefics3's) image encoder: the [SigLIP tower](super::siglip)
//! and the [connector](super::connector), batched over every frame of a
//! prefill's images.
//!
//! An image comes prepared as its frames (tiles row by row, then the
//! global view; the global view alone when it is not split), each a whole
//! tile of the tower's `image_size`. Every frame of every image of the
//! call goes through the tower and the connector together, in groups of
//! at most [`ENCODE_ROWS`] patches, and each frame gives `image_seq_len`
//! feature rows: the features come back image after image, frame after
//! frame, which is the order of the image tokens in the prompt (each
//! frame's tokens follow its `<row_r_col_c>` or `<global-img>` token), as
//! transformers scatters them.
//!
//! transformers drops frames whose pixel values are all zero (the
//! padding frames of a batch of images with fewer tiles than others) and
//! then fails where the remaining features do not fill the image tokens.
//! Frames here are never padding, so an all-zero frame (which
//! SmolVLM's normalization cannot give from real pixels) is refused,
//! naming the image, as transformers would fail on it.

use guidebench_core::vision::{PreparedImage, SmolVlmConfig};

use super::connector::Connector;
use super::siglip::SiglipTower;
use crate::error::Result;
use crate::model::Weights;

/// The most patches one group of frames carries through the tower
/// (SmolVLM-256M's 512-pixel tiles of 16-pixel patches are 1,024 a frame:
/// 4 frames a group, whose attention scores are 12 heads × 4 × 1,024²
/// values, 201 MB).
pub const ENCODE_ROWS: usize = 4096;

/// The SigLIP tower and connector of a SmolVLM-family model. See the
/// [vision module docs](crate::vision).
#[derive(Debug, Clone)]
pub struct SmolVlmTower {
    tower: SiglipTower,
    connector: Connector,
    config: SmolVlmConfig,
    /// Frames per group.
    group: usize,
}

impl SmolVlmTower {
    /// Loads the tower and the connector, named as `config.weight_names`
    /// says (`model.vision_model`, `model.connector.modality_projection`).
    pub fn load(w: &Weights, config: &SmolVlmConfig) -> Result<Self> {
        let names = &config.weight_names;
        Ok(SmolVlmTower {
            tower: SiglipTower::load(&w.pp(&names.vision_model), &config.vision)?,
            connector: Connector::load(&w.pp(&names.projector), config)?,
            config: config.clone(),
            group: (ENCODE_ROWS / config.vision.patches()).max(1),
        })
    }

    /// The tower with groups of at most `frames` frames (at least one).
    pub fn with_group_frames(mut self, frames: usize) -> Self {
        self.group = frames.max(1);
        self
    }

    /// Feature rows (image tokens) of `image`: `image_seq_len` per frame.
    pub fn rows(&self, image: &PreparedImage) -> usize {
        image.frames * self.config.image_seq_len()
    }

    /// The features of `images`, batched over all their frames: one row
    /// of the text model's width per image token, image after image, as
    /// `f32` values back to back.
    pub fn encode(&self, images: &[&PreparedImage]) -> Result<Vec<f32>> {
        let frames = self.frames(images)?;
        let mut features = Vec::new();
        for group in frames.chunks(self.group) {
            let n = group.len();
            let pixels: Vec<f32> = group.iter().flat_map(|f| f.iter().copied()).collect();
            let states = self.tower.forward(pixels, n)?;
            let x = self.connector.forward(&states, n)?;
            features.extend(x.flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(features)
    }

    /// Every frame of `images`, in order, each checked to be a whole tile
    /// of real pixels.
    fn frames<'a>(&self, images: &[&'a PreparedImage]) -> Result<Vec<&'a [f32]>> {
        let c = &self.config.vision;
        let s = c.image_size;
        let frame = c.num_channels * s * s;
        let mut out = Vec::new();
        for (i, image) in images.iter().enumerate() {
            if (image.channels, image.height, image.width) != (c.num_channels, s, s)
                || image.frames == 0
                || image.pixels.len() != image.frames * frame
            {
                return Err(candle_core::Error::Msg(format!(
                    "image {i}: {} frame(s) of {}×{}×{} in {} values, for a tower taking \
                     frames of {}×{s}×{s}",
                    image.frames,
                    image.channels,
                    image.height,
                    image.width,
                    image.pixels.len(),
                    c.num_channels
                ))
                .into());
            }
            for (f, values) in image.pixels.chunks(frame).enumerate() {
                if values.iter().all(|&v| v == 0.0) {
                    return Err(candle_core::Error::Msg(format!(
                        "image {i}: frame {f} is all zeros, which SmolVLM takes for padding \
                         and drops (transformers then fails: its features would not fill \
                         the image tokens)"
                    ))
                    .into());
                }
                out.push(values);
            }
        }
        Ok(out)
    }
}
