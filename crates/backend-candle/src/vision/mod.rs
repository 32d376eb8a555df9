//! The vision side of the vision-language models the engine runs, each
//! turning a prefill's prepared images into feature rows of the text
//! model's width, which the decoder writes over the image tokens'
//! embeddings in prompt order:
//!
//! - [`VisionTower`] (`clip`): LLaVA's CLIP tower and projector, one
//!   frame per image;
//! - [`SmolVlmTower`] (`smolvlm`): SmolVLM's (Idefics3's) SigLIP tower
//!   (`siglip`) and pixel-shuffle connector (`connector`), over every
//!   tile and global view of each image;
//! - [`ImageEncoder`]: whichever of the two a folder holds, as the engine
//!   calls it.
//!
//! Both share their blocks (`layers`: the packed linear layer, the layer
//! norm, the activations, the pre-norm encoder layer), run in `f32`
//! whatever the checkpoint's dtype, and encode all the images of a
//! prefill group batched.
//!
//! | guarantee | test |
//! |---|---|
//! | LLaVA: transformers' tokens and logits | `tests/conformance.rs` (`images`) |
//! | SmolVLM: transformers' 8 greedy tokens on every stored case, first logits within 1e-4 | `tests/smolvlm.rs` |
//! | SmolVLM: a prefill of several image requests gives each one's tokens alone | `tests/smolvlm.rs` |
//! | frames in small groups give the features of one group | `tests/smolvlm.rs` |
//! | transformers' pixel shuffle and position ids | unit tests of `connector` and `siglip` |

mod clip;
mod connector;
pub(crate) mod layers;
mod siglip;
mod smolvlm;

pub use clip::{ENCODE_GROUP, VisionTower};
pub use connector::{Connector, pixel_shuffle};
pub use siglip::{SiglipTower, position_ids};
pub use smolvlm::{ENCODE_ROWS, SmolVlmTower};

use guidebench_core::vision::PreparedImage;

use crate::error::Result;

/// The image encoder of a loaded vision-language model.
#[derive(Debug, Clone)]
pub enum ImageEncoder {
    /// LLaVA: a CLIP tower and its projector.
    Llava(VisionTower),
    /// SmolVLM, Idefics3: a SigLIP tower and the pixel-shuffle connector.
    SmolVlm(SmolVlmTower),
}

impl ImageEncoder {
    /// Feature rows (image tokens) `image` takes.
    pub fn rows(&self, image: &PreparedImage) -> usize {
        match self {
            ImageEncoder::Llava(tower) => tower.tokens_per_image(),
            ImageEncoder::SmolVlm(tower) => tower.rows(image),
        }
    }

    /// The features of `images`, batched: [`rows`](Self::rows) rows of
    /// the text model's width per image, image after image, as `f32`
    /// values back to back.
    pub fn encode(&self, images: &[&PreparedImage]) -> Result<Vec<f32>> {
        match self {
            ImageEncoder::Llava(tower) => tower.encode(images),
            ImageEncoder::SmolVlm(tower) => tower.encode(images),
        }
    }
}
