//! The image processor contract: one image prepared as the model takes it
//! ([`PreparedImage`]: one frame, or several with their tile grid), the
//! processor that prepares it ([`ImageProcessor`]), and the expansion of
//! each image's placeholder in a prompt ([`expand_image_tokens`]): the
//! image token repeated (LLaVA), or the token ids the processor laid the
//! image out as (SmolVLM's tiles and global view).

use std::sync::Arc;
use std::time::Duration;

use crate::media::MediaSource;
use crate::{Error, Result};

/// One image as the model takes it: normalized pixel values (one frame,
/// or several: tiles and a global view), the prompt positions its
/// features fill, and what its placeholder expands to.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedImage {
    /// Pixel values, frame by frame, each channel-major
    /// (`[frames, channels, height, width]`), after every step of the
    /// model's processor (resize, crop or split, rescale, normalize).
    pub pixels: Vec<f32>,
    /// Frames: 1 for a LLaVA image; for SmolVLM the tiles row by row and
    /// then the global view (`rows * cols + 1`), or the global view alone.
    pub frames: usize,
    /// Rows of tiles (0 when the image is one frame, not split).
    pub rows: usize,
    /// Columns of tiles (0 when the image is one frame, not split).
    pub cols: usize,
    /// Channels (3 for RGB).
    pub channels: usize,
    /// Height of a frame in pixels.
    pub height: usize,
    /// Width of a frame in pixels.
    pub width: usize,
    /// Prompt positions the image's features take (its image tokens).
    pub tokens: usize,
    /// The token ids its placeholder expands to, where the processor lays
    /// the image out itself (SmolVLM: per tile
    /// `<fake_token_around_image><row_r_col_c>` and its image tokens, then
    /// the global view, tokenized as the model's processor tokenizes that
    /// text); `None`: the image token repeated [`tokens`](Self::tokens)
    /// times (LLaVA).
    pub prompt: Option<Vec<u32>>,
    /// Wall time spent reading, decoding and preparing it.
    pub prepare_time: Duration,
}

impl PreparedImage {
    /// The prompt tokens its placeholder expands to.
    pub fn prompt_len(&self) -> usize {
        self.prompt.as_ref().map_or(self.tokens, Vec::len)
    }
}

/// Prepares images for one model, the way its processor config says.
/// Shared between the engine thread and the threads that prepare images
/// ahead of it.
pub trait ImageProcessor: Send + Sync + std::fmt::Debug {
    /// The token id that stands for one image position in the prompt.
    fn image_token_id(&self) -> u32;

    /// The image token as text (`<image>`), for messages.
    fn image_token(&self) -> String;

    /// Reads and prepares one image.
    fn prepare(&self, source: &MediaSource) -> Result<PreparedImage>;
}

/// Expands each occurrence of `image_token` in `tokens` into what the
/// matching image stands for in the prompt (the `i`-th occurrence for
/// `images[i]`): its [`prompt`](PreparedImage::prompt) ids where the
/// processor laid it out, else `images[i].tokens` copies of the image
/// token. Fails when the prompt has not exactly one image token per
/// image.
pub fn expand_image_tokens(
    request: u64,
    tokens: &[u32],
    image_token: u32,
    image_token_text: &str,
    images: &[Arc<PreparedImage>],
) -> Result<Vec<u32>> {
    let placeholders = tokens.iter().filter(|&&t| t == image_token).count();
    if placeholders != images.len() {
        return Err(Error::ImagePlaceholders {
            request,
            images: images.len(),
            placeholders,
            token: image_token_text.to_owned(),
        });
    }
    let extra: usize = images
        .iter()
        .map(|image| image.prompt_len().saturating_sub(1))
        .sum();
    let mut out = Vec::with_capacity(tokens.len() + extra);
    let mut next = images.iter();
    for &token in tokens {
        if token == image_token
            && let Some(image) = next.next()
        {
            match &image.prompt {
                Some(ids) => out.extend_from_slice(ids),
                None => out.extend(std::iter::repeat_n(image_token, image.tokens)),
            }
        } else {
            out.push(token);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(tokens: usize) -> Arc<PreparedImage> {
        Arc::new(PreparedImage {
            pixels: Vec::new(),
            frames: 1,
            rows: 0,
            cols: 0,
            channels: 3,
            height: 1,
            width: 1,
            tokens,
            prompt: None,
            prepare_time: Duration::ZERO,
        })
    }

    /// An image its processor laid out as `ids` (4 image positions).
    fn laid_out(ids: &[u32]) -> Arc<PreparedImage> {
        let mut image = (*image(4)).clone();
        image.prompt = Some(ids.to_vec());
        Arc::new(image)
    }

    #[test]
    fn an_image_the_processor_laid_out_expands_to_its_own_ids() {
        let out = expand_image_tokens(
            1,
            &[1, 9, 2, 9, 3],
            9,
            "<image>",
            &[laid_out(&[5, 9, 9, 6, 9, 9, 5]), image(2)],
        )
        .expect("expands");
        assert_eq!(out, vec![1, 5, 9, 9, 6, 9, 9, 5, 2, 9, 9, 3]);
        assert_eq!(laid_out(&[5, 9]).prompt_len(), 2);
        assert_eq!(image(3).prompt_len(), 3);
    }

    #[test]
    fn each_image_token_becomes_as_many_positions_as_its_image_takes() {
        let out = expand_image_tokens(1, &[1, 9, 2, 9, 3], 9, "<image>", &[image(3), image(2)])
            .expect("expands");
        assert_eq!(out, vec![1, 9, 9, 9, 2, 9, 9, 3]);
    }

    #[test]
    fn a_prompt_without_one_image_token_per_image_is_refused_with_both_counts() {
        let err = expand_image_tokens(7, &[1, 2], 9, "<image>", &[image(3)]).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("request 7"), "{message}");
        assert!(message.contains("1 image"), "{message}");
        assert!(message.contains("0 `<image>`"), "{message}");
    }

    /// A stray image token in a prompt without images is refused too, with
    /// the typed error naming both counts (no image, one token).
    #[test]
    fn an_image_token_in_a_prompt_without_images_is_refused_with_both_counts() {
        let err = expand_image_tokens(5, &[1, 9, 2], 9, "<image>", &[]).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::ImagePlaceholders { request: 5, images: 0, placeholders: 1, token }
                    if token == "<image>"
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("0 image(s)"), "{message}");
        assert!(message.contains("1 `<image>` token(s)"), "{message}");
        // Without the token, a prompt without images is left as it is.
        let plain = expand_image_tokens(5, &[1, 2], 9, "<image>", &[]).expect("no images");
        assert_eq!(plain, vec![1, 2]);
    }
}
