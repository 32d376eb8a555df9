//! The image processor contract: one image prepared as the model takes it
//! ([`PreparedImage`]), the processor that prepares it
//! ([`ImageProcessor`]), and the expansion of image tokens in a prompt
//! ([`expand_image_tokens`]).

use std::sync::Arc;
use std::time::Duration;

use crate::media::MediaSource;
use crate::{Error, Result};

/// One image as the model takes it: normalized pixel values and the number
/// of prompt positions it fills.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedImage {
    /// Pixel values, channel-major (`[channels, height, width]`), after
    /// every step of the model's processor (resize, crop, rescale,
    /// normalize).
    pub pixels: Vec<f32>,
    /// Channels (3 for RGB).
    pub channels: usize,
    /// Height in pixels.
    pub height: usize,
    /// Width in pixels.
    pub width: usize,
    /// Prompt positions the image takes (its image tokens).
    pub tokens: usize,
    /// Wall time spent reading, decoding and preparing it.
    pub prepare_time: Duration,
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

/// Expands each occurrence of `image_token` in `tokens` into as many
/// copies as the matching image takes (`images[i].tokens` for the `i`-th
/// occurrence). Fails when the prompt has not exactly one image token per
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
        .map(|image| image.tokens.saturating_sub(1))
        .sum();
    let mut out = Vec::with_capacity(tokens.len() + extra);
    let mut next = images.iter();
    for &token in tokens {
        if token == image_token
            && let Some(image) = next.next()
        {
            out.extend(std::iter::repeat_n(image_token, image.tokens));
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
            channels: 3,
            height: 1,
            width: 1,
            tokens,
            prepare_time: Duration::ZERO,
        })
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
