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
//!    expanded ([`expand_image_tokens`]) as the model's own processor
//!    expands it: into that image's token count (LLaVA), or into the token
//!    ids the processor laid the image out as ([`PreparedImage::prompt`]:
//!    SmolVLM's tiles, row tokens and global view, [`SmolVlmProcessor`]).
//!    The expanded length is the request's prompt-token count;
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
mod processor;
mod smolvlm;
mod smolvlm_config;

pub use crate::media::{ImageStats, media_name, read_media};

pub use clip::{
    ClipImageProcessor, PREPROCESSOR_CONFIG_JSON, PROCESSOR_CONFIG_JSON, Resample, ResizeTo,
    center_crop, output_size, to_rgb,
};
pub use config::{
    ClipVisionConfig, FeatureSelect, VisionActivation, VisionLanguageConfig, VisionWeightNames,
};
pub(crate) use config::{is_llava, split_llava};
pub use processor::{ImageProcessor, PreparedImage, expand_image_tokens};
pub use smolvlm::{
    DEFAULT_IMAGE_SEQ_LEN, MAX_IMAGE_SIZE, PillowFilter, SmolVlmBatch, SmolVlmFlavor, SmolVlmImage,
    SmolVlmImageProcessor, SmolVlmProcessor, SmolVlmTokens, longest_edge_size, pad_frames,
    pillow_resize, pillow_resize_horizontal_first, tile_multiple_size,
};
pub use smolvlm_config::{SiglipVisionConfig, SmolVlmConfig, VisionFamily};
pub(crate) use smolvlm_config::{smolvlm_kind, split_smolvlm};
