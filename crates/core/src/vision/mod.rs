//! Images for vision-language engines: the contract between a request's
//! images, the engine's image processor and the generation loop.
//!
//! A vision-language step engine (candle's LLaVA models) hands the loop an
//! [`ImageProcessor`] ([`StepEngine::image_processor`]). For every request
//! with images:
//!
//! 1. each image is read ([`read_media`]: a local file, a `data:` URL or
//!    bytes; an `http(s)` URL is refused, the in-process engine fetches
//!    nothing) and prepared by the processor into a [`PreparedImage`]:
//!    pixel values exactly as the model's processor config says, and the
//!    number of prompt positions (image tokens) it takes. The offline
//!    backend prepares images on its image threads
//!    ([`IMAGE_THREAD_NAME`](crate::offline::IMAGE_THREAD_NAME), counted
//!    as the engine's CPU) before the request reaches the engine thread;
//!    the loop prepares the ones that arrive unprepared;
//! 2. the prompt is tokenized and each occurrence of the model's image
//!    token (the placeholder `<image>` written by the request format) is
//!    expanded into that image's token count ([`expand_image_tokens`]), as
//!    the model's own processor expands it. The expanded length is the
//!    request's prompt-token count;
//! 3. the prefill receives the prepared images of each sequence in order
//!    ([`Prefill::images`]); the engine encodes them (batched over the
//!    prefill group), writes the projected features at the image-token
//!    positions and reports the encoder's wall time
//!    (the [`PrefillDone`] its prefill returns), which every request of the group
//!    with images carries in its [`ImageStats`].
//!
//! [`StepEngine::image_processor`]: crate::engine::StepEngine::image_processor
//! [`PrefillDone`]: crate::engine::PrefillDone
//! [`Prefill::images`]: crate::engine::Prefill::images

mod clip;
mod config;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::request::MediaSource;
use crate::{Error, Result};

pub use clip::{
    ClipImageProcessor, PREPROCESSOR_CONFIG_JSON, PROCESSOR_CONFIG_JSON, Resample, ResizeTo,
    center_crop, output_size, to_rgb,
};
pub use config::{
    ClipVisionConfig, FeatureSelect, VisionActivation, VisionLanguageConfig, VisionWeightNames,
};
pub(crate) use config::{is_llava, split_llava};

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

/// What a request's images cost: how many, the prompt positions they took,
/// and the time spent preparing and encoding them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageStats {
    /// Images in the request.
    pub images: u32,
    /// Prompt tokens the images took (part of the prompt-token count).
    pub image_tokens: u32,
    /// Wall time spent reading, decoding and preparing the images.
    pub prepare: Duration,
    /// Wall time of the vision encoder (and projector) in the prefill that
    /// took the request: part of its time to first token.
    pub encode: Duration,
}

/// The bytes of an image or audio source: a local file, a `data:` URL
/// (base64 or percent-free plain data) or bytes given inline. An
/// `http(s)://` URL is refused: an in-process engine fetches nothing.
pub fn read_media(source: &MediaSource) -> Result<Arc<[u8]>> {
    match source {
        MediaSource::Bytes { data, .. } => Ok(Arc::clone(data)),
        MediaSource::Path(path) => std::fs::read(path)
            .map(Arc::from)
            .map_err(|err| Error::Media {
                media: path.display().to_string(),
                reason: err.to_string(),
            }),
        MediaSource::Url(url) => {
            let Some(rest) = url.strip_prefix("data:") else {
                return Err(Error::Media {
                    media: url.clone(),
                    reason: "an in-process engine reads local files and data: URLs only; \
                             download the image or send it with kind=openai_http"
                        .into(),
                });
            };
            let Some((meta, payload)) = rest.split_once(',') else {
                return Err(Error::Media {
                    media: shorten(url),
                    reason: "a data: URL needs a comma before its data".into(),
                });
            };
            if meta.ends_with(";base64") {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .decode(payload.trim())
                    .map(Arc::from)
                    .map_err(|err| Error::Media {
                        media: shorten(url),
                        reason: format!("bad base64: {err}"),
                    })
            } else {
                Ok(Arc::from(payload.as_bytes()))
            }
        }
    }
}

/// How `source` is named in messages: the path, the URL (a data URL cut
/// short) or the bytes' MIME type.
pub fn media_name(source: &MediaSource) -> String {
    match source {
        MediaSource::Path(path) => path.display().to_string(),
        MediaSource::Url(url) => shorten(url),
        MediaSource::Bytes { mime, data } => format!("{} bytes of {mime}", data.len()),
    }
}

/// A data URL cut for messages.
fn shorten(url: &str) -> String {
    match url.char_indices().nth(48) {
        Some((at, _)) => format!("{}…", &url[..at]),
        None => url.to_owned(),
    }
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

    #[test]
    fn data_urls_and_files_are_read_and_web_urls_are_refused() {
        let url = MediaSource::Url("data:image/png;base64,aGVsbG8=".into());
        assert_eq!(&*read_media(&url).expect("base64"), b"hello");
        let plain = MediaSource::Url("data:text/plain,hi".into());
        assert_eq!(&*read_media(&plain).expect("plain"), b"hi");
        let web = MediaSource::Url("https://example.com/cat.png".into());
        let err = read_media(&web).unwrap_err().to_string();
        assert!(err.contains("https://example.com/cat.png"), "{err}");
        assert!(err.contains("openai_http"), "{err}");
        let missing = MediaSource::Path("/no/such/image.png".into());
        let err = read_media(&missing).unwrap_err().to_string();
        assert!(err.contains("/no/such/image.png"), "{err}");
    }
}
