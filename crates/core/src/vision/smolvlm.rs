//! `SmolVLMImageProcessor` (the Idefics3 family's image splitting): see
//! [`SmolVlmImageProcessor`]; the processor the generation loop takes,
//! with the prompt layout as token ids ([`SmolVlmProcessor`]); and
//! Pillow's resampling, ported to its fixed-point arithmetic
//! ([`pillow_resize`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use image::{ImageBuffer, RgbImage};
use serde_json::Value;

use super::clip::{ProcessorConfigs, to_rgb};
use super::processor::{ImageProcessor, PreparedImage};
use crate::files::read_optional_json;
use crate::media::{MediaSource, media_name, read_media};
use crate::tokenizer::{HfTokenizer, Tokenizer};
use crate::{Error, Result};

/// The largest side transformers lets an image keep after the
/// longest-edge resize (`MAX_IMAGE_SIZE`, "4k").
pub const MAX_IMAGE_SIZE: u32 = 4096;

/// `processor_config.json`'s `image_seq_len` where it has none
/// (`SmolVLMProcessor`'s default).
pub const DEFAULT_IMAGE_SEQ_LEN: usize = 169;

/// A Pillow resampling filter of the convolution kind (`Image.resize`
/// with `resample=1..=5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PillowFilter {
    /// `1`: Lanczos, 3 lobes.
    Lanczos,
    /// `2`: bilinear (triangle).
    Bilinear,
    /// `3`: bicubic, `a = -0.5`.
    Bicubic,
    /// `4`: box.
    Box,
    /// `5`: Hamming.
    Hamming,
}

impl PillowFilter {
    /// The filter of Pillow's `resample` number; nearest (`0`) is an
    /// affine transform in Pillow, not a convolution, and is refused.
    pub fn from_pillow(n: u64) -> std::result::Result<Self, String> {
        match n {
            1 => Ok(PillowFilter::Lanczos),
            2 => Ok(PillowFilter::Bilinear),
            3 => Ok(PillowFilter::Bicubic),
            4 => Ok(PillowFilter::Box),
            5 => Ok(PillowFilter::Hamming),
            0 => Err("resample 0 (nearest) is not supported for this processor".into()),
            other => Err(format!("resample {other} is not a Pillow filter (0 to 5)")),
        }
    }

    /// The filter's half-width at scale 1.
    fn support(self) -> f64 {
        match self {
            PillowFilter::Box => 0.5,
            PillowFilter::Bilinear | PillowFilter::Hamming => 1.0,
            PillowFilter::Bicubic => 2.0,
            PillowFilter::Lanczos => 3.0,
        }
    }

    /// The filter's weight at `x`, as Pillow's `Resample.c` computes it.
    fn weight(self, x: f64) -> f64 {
        fn sinc(x: f64) -> f64 {
            if x == 0.0 {
                return 1.0;
            }
            let x = x * std::f64::consts::PI;
            x.sin() / x
        }
        match self {
            PillowFilter::Box => {
                if x > -0.5 && x <= 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            PillowFilter::Bilinear => {
                let x = x.abs();
                if x < 1.0 { 1.0 - x } else { 0.0 }
            }
            PillowFilter::Hamming => {
                let x = x.abs();
                if x == 0.0 {
                    1.0
                } else if x >= 1.0 {
                    0.0
                } else {
                    let x = x * std::f64::consts::PI;
                    // Pillow writes these constants as C floats.
                    x.sin() / x * (f64::from(0.54f32) + f64::from(0.46f32) * x.cos())
                }
            }
            PillowFilter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            PillowFilter::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

/// Fractional bits of Pillow's 8-bit resampling coefficients.
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// One axis of a resize: for each output pixel the first input pixel it
/// reads and its fixed-point weights (Pillow's `precompute_coeffs` and
/// `normalize_coeffs_8bpc`).
fn coefficients(in_size: u32, out_size: u32, filter: PillowFilter) -> Vec<(usize, Vec<i32>)> {
    let scale = f64::from(in_size) / f64::from(out_size);
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let ss = 1.0 / filterscale;
    (0..out_size)
        .map(|xx| {
            let center = (f64::from(xx) + 0.5) * scale;
            // C's (int) casts: truncation toward zero.
            let xmin = ((center - support + 0.5) as i64).max(0);
            let xmax = ((center + support + 0.5) as i64).min(i64::from(in_size)) - xmin;
            let mut k: Vec<f64> = (0..xmax.max(0))
                .map(|x| filter.weight(((x + xmin) as f64 - center + 0.5) * ss))
                .collect();
            let ww: f64 = k.iter().sum();
            if ww != 0.0 {
                k.iter_mut().for_each(|w| *w /= ww);
            }
            let one = f64::from(1u32 << PRECISION_BITS);
            let fixed = k
                .iter()
                .map(|&w| {
                    if w < 0.0 {
                        (-0.5 + w * one) as i32
                    } else {
                        (0.5 + w * one) as i32
                    }
                })
                .collect();
            (usize::try_from(xmin).unwrap_or(0), fixed)
        })
        .collect()
}

/// Pillow's rounding of a fixed-point sum to 8 bits.
fn clip8(sum: i64) -> u8 {
    (sum >> PRECISION_BITS).clamp(0, 255) as u8
}

/// `Image.resize((width, height), resample=filter)` of Pillow 13 on an
/// RGB image, to the bit: Pillow's weights in `f64`, rounded to 22-bit
/// fixed point, one pass per side that changes, each rounded to 8 bits.
/// The horizontal pass runs first, except where the height shrinks by
/// more than twice as many pixels as the width does (Pillow 13's order;
/// Pillow up to 12 always runs the horizontal pass first, so such a
/// resize can differ from theirs by a few levels).
pub fn pillow_resize(image: &RgbImage, width: u32, height: u32, filter: PillowFilter) -> RgbImage {
    let (w0, h0) = image.dimensions();
    if (w0, h0) == (width, height) {
        return image.clone();
    }
    if width == 0 || height == 0 || w0 == 0 || h0 == 0 {
        return RgbImage::new(width, height);
    }
    let vertical_first =
        height < h0 && 2 * (i64::from(w0) - i64::from(width)) < i64::from(h0) - i64::from(height);
    if vertical_first {
        let tall = resample_vertical(image, height, filter);
        resample_horizontal(&tall, width, filter)
    } else {
        let wide = resample_horizontal(image, width, filter);
        resample_vertical(&wide, height, filter)
    }
}

/// [`pillow_resize`] with the horizontal pass always first (where both
/// sides change), as Pillow up to 12 and llama.cpp's `img_tool::resize`
/// (its port of Pillow's `Resample.c`) run it.
pub fn pillow_resize_horizontal_first(
    image: &RgbImage,
    width: u32,
    height: u32,
    filter: PillowFilter,
) -> RgbImage {
    let (w0, h0) = image.dimensions();
    if (w0, h0) == (width, height) {
        return image.clone();
    }
    if width == 0 || height == 0 || w0 == 0 || h0 == 0 {
        return RgbImage::new(width, height);
    }
    let wide = resample_horizontal(image, width, filter);
    resample_vertical(&wide, height, filter)
}

/// Pillow's horizontal pass (`ImagingResampleHorizontal_8bpc`): every row
/// resampled to `width`; the image itself where it has that width.
fn resample_horizontal(image: &RgbImage, width: u32, filter: PillowFilter) -> RgbImage {
    let (w0, h0) = image.dimensions();
    if w0 == width {
        return image.clone();
    }
    let half = 1i64 << (PRECISION_BITS - 1);
    let coeffs = coefficients(w0, width, filter);
    let (src, w0) = (image.as_raw(), w0 as usize);
    let mut out = vec![0u8; width as usize * h0 as usize * 3];
    for y in 0..h0 as usize {
        let row = &src[y * w0 * 3..(y + 1) * w0 * 3];
        for (xx, (xmin, k)) in coeffs.iter().enumerate() {
            for c in 0..3 {
                let sum = k.iter().enumerate().fold(half, |s, (x, &w)| {
                    s + i64::from(row[(xmin + x) * 3 + c]) * i64::from(w)
                });
                out[(y * width as usize + xx) * 3 + c] = clip8(sum);
            }
        }
    }
    ImageBuffer::from_raw(width, h0, out).unwrap_or_default()
}

/// Pillow's vertical pass (`ImagingResampleVertical_8bpc`): every column
/// resampled to `height`; the image itself where it has that height.
fn resample_vertical(image: &RgbImage, height: u32, filter: PillowFilter) -> RgbImage {
    let (w0, h0) = image.dimensions();
    if h0 == height {
        return image.clone();
    }
    let half = 1i64 << (PRECISION_BITS - 1);
    let coeffs = coefficients(h0, height, filter);
    let (src, w) = (image.as_raw(), w0 as usize);
    let mut out = vec![0u8; w * height as usize * 3];
    for (yy, (ymin, k)) in coeffs.iter().enumerate() {
        for x in 0..w {
            for c in 0..3 {
                let sum = k.iter().enumerate().fold(half, |s, (y, &wt)| {
                    s + i64::from(src[((ymin + y) * w + x) * 3 + c]) * i64::from(wt)
                });
                out[(yy * w + x) * 3 + c] = clip8(sum);
            }
        }
    }
    ImageBuffer::from_raw(w0, height, out).unwrap_or_default()
}

/// transformers' size for the longest-edge resize, `(height, width)`: the
/// longest side to `longest_edge`, the other `int(longest / aspect)`
/// rounded up to even, then both scaled below [`MAX_IMAGE_SIZE`] the same
/// way (`get_resize_output_image_size` of `image_processing_smolvlm`),
/// in Python's floating point.
pub fn longest_edge_size(height: u32, width: u32, longest_edge: u32) -> (u32, u32) {
    let (mut h, mut w) = (f64::from(height), f64::from(width));
    let aspect = w / h;
    if w >= h {
        w = f64::from(longest_edge);
        h = (w / aspect).trunc();
        if h % 2.0 != 0.0 {
            h += 1.0;
        }
    } else {
        h = f64::from(longest_edge);
        w = (h * aspect).trunc();
        if w % 2.0 != 0.0 {
            w += 1.0;
        }
    }
    let (h, w) = (h.max(1.0), w.max(1.0));
    let aspect = w / h;
    let max = f64::from(MAX_IMAGE_SIZE);
    let (h, w) = if w >= h && w > max {
        ((max / aspect).trunc(), max)
    } else if h > w && h > max {
        (max, (max * aspect).trunc())
    } else {
        (h, w)
    };
    (h.max(1.0) as u32, w.max(1.0) as u32)
}

/// transformers' `resize_for_vision_encoder` size, `(height, width)`:
/// the longest side rounded up to a multiple of `tile`, the other side
/// `int(longest / aspect)` rounded up to a multiple of `tile`.
pub fn tile_multiple_size(height: u32, width: u32, tile: u32) -> (u32, u32) {
    let (h, w, t) = (f64::from(height), f64::from(width), f64::from(tile));
    let aspect = w / h;
    let up = |v: f64| (v / t).ceil() * t;
    let (h, w) = if w >= h {
        let w = up(w);
        (up((w / aspect).trunc()), w)
    } else {
        let h = up(h);
        (h, up((h * aspect).trunc()))
    };
    (h as u32, w as u32)
}

/// The special tokens a SmolVLM prompt spells an image with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmolVlmTokens {
    /// One image position (`<image>`), also the prompt's placeholder.
    pub image: String,
    /// Around each tile and after the global view
    /// (`<fake_token_around_image>`).
    pub fake_image: String,
    /// Before the global view (`<global-img>`).
    pub global_image: String,
}

impl Default for SmolVlmTokens {
    fn default() -> Self {
        SmolVlmTokens {
            image: "<image>".into(),
            fake_image: "<fake_token_around_image>".into(),
            global_image: "<global-img>".into(),
        }
    }
}

/// Whose preprocessing and prompt layout a [`SmolVlmImageProcessor`]
/// reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmolVlmFlavor {
    /// transformers' `SmolVLMImageProcessor` (Pillow backend) and
    /// `SmolVLMProcessor`: a Hugging Face folder.
    Transformers,
    /// llama.cpp's mtmd for `clip.projector_type=idefics3` (an mmproj
    /// GGUF): the longest-edge resize and the resize to whole tiles
    /// (each side rounded up to a multiple of the tile on its own),
    /// every resize Pillow's arithmetic with the horizontal pass first,
    /// always split (a 1 × 1 grid too), the global view the tiled image
    /// resized to one tile (mtmd rescales `level / 255` in `f32`, which
    /// is transformers' value for every level); the layout as mtmd
    /// writes it: no newline after the last row, then
    /// the vocabulary's `"\n\n"` token before the global view.
    LlamaCpp,
}

/// One image as SmolVLM takes it: its frames (the tiles row by row, then
/// the global view; or the global view alone) and its tile grid.
#[derive(Debug, Clone, PartialEq)]
pub struct SmolVlmImage {
    /// Pixel values, `[frames, 3, tile, tile]`, after every step of the
    /// processor (resize, split, rescale, normalize).
    pub pixels: Vec<f32>,
    /// Frames: `rows * cols + 1` when split, 1 when not.
    pub frames: usize,
    /// The side of a frame in pixels.
    pub tile: usize,
    /// Rows of tiles (0 when the image is not split).
    pub rows: usize,
    /// Columns of tiles (0 when the image is not split).
    pub cols: usize,
    /// Wall time spent reading, decoding and preparing it.
    pub prepare_time: Duration,
}

/// A batch of images padded to the most frames of any of them, as
/// transformers pads `pixel_values` (`do_pad`).
#[derive(Debug, Clone, PartialEq)]
pub struct SmolVlmBatch {
    /// `[images, frames, 3, tile, tile]`, missing frames zero.
    pub pixels: Vec<f32>,
    /// `[images, frames, tile, tile]`: 1 on an image's own frames, 0 on
    /// padding (`pixel_attention_mask`).
    pub mask: Vec<u8>,
    /// Images in the batch.
    pub images: usize,
    /// Frames per image after padding.
    pub frames: usize,
    /// The side of a frame in pixels.
    pub tile: usize,
}

/// Pads the frames of `images` (all of one tile size) to the most any of
/// them has. Fails where the tile sizes differ.
pub fn pad_frames(images: &[SmolVlmImage]) -> Result<SmolVlmBatch> {
    let tile = images.first().map_or(0, |i| i.tile);
    if let Some(other) = images.iter().find(|i| i.tile != tile) {
        return Err(Error::Media {
            media: "image batch".into(),
            reason: format!("frames of {tile} and {} pixels in one batch", other.tile),
        });
    }
    let frames = images.iter().map(|i| i.frames).max().unwrap_or(0);
    let area = tile * tile;
    let mut pixels = vec![0f32; images.len() * frames * 3 * area];
    let mut mask = vec![0u8; images.len() * frames * area];
    for (i, image) in images.iter().enumerate() {
        let at = i * frames * 3 * area;
        pixels[at..at + image.pixels.len()].copy_from_slice(&image.pixels);
        let at = i * frames * area;
        mask[at..at + image.frames * area].fill(1);
    }
    Ok(SmolVlmBatch {
        pixels,
        mask,
        images: images.len(),
        frames,
        tile,
    })
}

/// A SmolVLM image processor: one model's preprocessing, read from its
/// folder.
///
/// `SmolVLMImageProcessor` as transformers' Pillow backend runs it, as a
/// model folder's `preprocessor_config.json` configures it: convert to
/// RGB, resize the longest edge to `size.longest_edge` (the other side
/// by the aspect ratio, rounded up to even; [`longest_edge_size`]); with
/// `do_image_splitting`, resize again to multiples of the tile
/// (`max_image_size.longest_edge`; [`tile_multiple_size`]) and, where
/// that is larger than one tile, crop the tiles row by row and add the
/// whole image resized to one tile as the global view; without it,
/// resize to one tile. Then rescale (in `f64`, rounded to `f32`) and
/// normalize (in `f32`), channels first.
///
/// Every resize is Pillow's ([`pillow_resize`], its fixed-point
/// arithmetic ported), so a decoded image gives transformers' pixel
/// values to the bit. JPEG files are decoded by the `image` crate where
/// Pillow uses libjpeg-turbo, which can differ by a few levels.
///
/// The prompt spells each image as `SmolVLMProcessor` does
/// ([`image_prompt`](Self::image_prompt)): per tile
/// `<fake_token_around_image><row_r_col_c>` and `image_seq_len` image
/// tokens, a newline after each row, then the global view.
#[derive(Debug, Clone, PartialEq)]
pub struct SmolVlmImageProcessor {
    convert_rgb: bool,
    resize: Option<u32>,
    filter: PillowFilter,
    split: bool,
    tile: u32,
    rescale: Option<f64>,
    normalize: Option<([f32; 3], [f32; 3])>,
    image_seq_len: usize,
    tokens: SmolVlmTokens,
    flavor: SmolVlmFlavor,
    /// Where the config came from, for messages.
    source: PathBuf,
}

/// The `image_processor_type`s this processor reads.
/// (Idefics3's image processor is the same code in transformers.)
const SMOLVLM_PROCESSORS: &[&str] = &[
    "SmolVLMImageProcessor",
    "SmolVLMImageProcessorFast",
    "SmolVLMImageProcessorPil",
    "Idefics3ImageProcessor",
    "Idefics3ImageProcessorFast",
    "Idefics3ImageProcessorPil",
];

impl SmolVlmImageProcessor {
    /// Reads the image processor's settings from
    /// `dir/preprocessor_config.json`, or, where a folder has none, from
    /// the `image_processor` object of `dir/processor_config.json`; one of
    /// them is required. `processor_config.json`'s `image_seq_len` gives
    /// the image tokens per frame ([`DEFAULT_IMAGE_SEQ_LEN`] without it),
    /// and `tokenizer_config.json`'s `extra_special_tokens` the token
    /// texts where it names them.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let ProcessorConfigs {
            config,
            path,
            processor,
            processor_path,
        } = ProcessorConfigs::read(dir)?;
        let image_seq_len = match processor.as_ref().and_then(|p| p.get("image_seq_len")) {
            None | Some(Value::Null) => DEFAULT_IMAGE_SEQ_LEN,
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::InvalidModelConfig {
                    path: processor_path.clone(),
                    reason: format!("`image_seq_len` {v} must be a positive count"),
                })?,
        };
        let tokenizer_path = dir.join("tokenizer_config.json");
        let mut tokens = SmolVlmTokens::default();
        if let Some(extra) = read_optional_json(&tokenizer_path)?
            .as_ref()
            .and_then(|t| t.get("extra_special_tokens"))
        {
            let text = |key: &str| extra.get(key).and_then(Value::as_str).map(str::to_owned);
            if let Some(t) = text("image_token") {
                tokens.image = t;
            }
            if let Some(t) = text("fake_image_token") {
                tokens.fake_image = t;
            }
            if let Some(t) = text("global_image_token") {
                tokens.global_image = t;
            }
        }
        SmolVlmImageProcessor::from_config(&config, &path, image_seq_len, tokens).map_err(
            |reason| Error::InvalidModelConfig {
                path: path.clone(),
                reason,
            },
        )
    }

    /// The processor of one image processor config (`path` names it in
    /// messages); the reason where a key is invalid.
    pub fn from_config(
        config: &Value,
        path: &Path,
        image_seq_len: usize,
        tokens: SmolVlmTokens,
    ) -> std::result::Result<Self, String> {
        if let Some(kind) = config.get("image_processor_type").and_then(Value::as_str)
            && !SMOLVLM_PROCESSORS.contains(&kind)
        {
            return Err(format!(
                "image processor `{kind}` is not supported here; supported: {}",
                SMOLVLM_PROCESSORS.join(", ")
            ));
        }
        let flag = |key: &str| -> std::result::Result<bool, String> {
            match config.get(key) {
                None | Some(Value::Null) => Ok(true),
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| format!("`{key}` {v} is not a boolean")),
            }
        };
        let edge = |key: &str| -> std::result::Result<u32, String> {
            let v = config
                .get(key)
                .and_then(|s| s.get("longest_edge"))
                .ok_or_else(|| format!("`{key}.longest_edge` is missing"))?;
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("`{key}.longest_edge` {v} must be a positive size"))
        };
        let filter = match config.get("resample") {
            None | Some(Value::Null) => PillowFilter::Lanczos,
            Some(v) => PillowFilter::from_pillow(
                v.as_u64()
                    .ok_or_else(|| format!("`resample` {v} is not a Pillow filter number"))?,
            )?,
        };
        let resize = if flag("do_resize")? {
            Some(edge("size")?)
        } else {
            None
        };
        let tile = edge("max_image_size")?;
        let rescale = if flag("do_rescale")? {
            match config.get("rescale_factor") {
                None | Some(Value::Null) => Some(1.0 / 255.0),
                Some(v) => Some(
                    v.as_f64()
                        .ok_or_else(|| format!("`rescale_factor` {v} is not a number"))?,
                ),
            }
        } else {
            None
        };
        let normalize = if flag("do_normalize")? {
            let three = |key: &str| -> std::result::Result<[f32; 3], String> {
                match config.get(key) {
                    // IMAGENET_STANDARD_MEAN / _STD.
                    None | Some(Value::Null) => Ok([0.5; 3]),
                    Some(Value::Number(n)) => Ok([n.as_f64().unwrap_or(0.5) as f32; 3]),
                    Some(Value::Array(a)) if a.len() == 3 => {
                        let mut out = [0f32; 3];
                        for (o, v) in out.iter_mut().zip(a) {
                            *o = v
                                .as_f64()
                                .ok_or_else(|| format!("`{key}` holds {v}, not a number"))?
                                as f32;
                        }
                        Ok(out)
                    }
                    Some(v) => Err(format!("`{key}` {v} must be 3 numbers")),
                }
            };
            let (mean, std) = (three("image_mean")?, three("image_std")?);
            if std.contains(&0.0) {
                return Err("`image_std` must not hold a zero".into());
            }
            Some((mean, std))
        } else {
            None
        };
        Ok(SmolVlmImageProcessor {
            convert_rgb: flag("do_convert_rgb")?,
            resize,
            filter,
            split: flag("do_image_splitting")?,
            tile,
            rescale,
            normalize,
            image_seq_len,
            tokens,
            flavor: SmolVlmFlavor::Transformers,
            source: path.to_owned(),
        })
    }

    /// llama.cpp's idefics3 preprocessing ([`SmolVlmFlavor::LlamaCpp`]):
    /// tiles of `tile` pixels, images resized to `longest_edge` first
    /// (`clip.vision.preproc_image_size`), Lanczos, normalized with
    /// `mean` and `std` (`clip.vision.image_mean`, `image_std`);
    /// `source` (the mmproj file) names it in messages.
    pub fn llama_cpp(
        tile: u32,
        longest_edge: u32,
        mean: [f32; 3],
        std: [f32; 3],
        image_seq_len: usize,
        source: &Path,
    ) -> Self {
        SmolVlmImageProcessor {
            convert_rgb: true,
            resize: Some(longest_edge),
            filter: PillowFilter::Lanczos,
            split: true,
            tile,
            rescale: Some(1.0 / 255.0),
            normalize: Some((mean, std)),
            image_seq_len,
            tokens: SmolVlmTokens::default(),
            flavor: SmolVlmFlavor::LlamaCpp,
            source: source.to_owned(),
        }
    }

    /// Whose preprocessing and layout this is.
    pub fn flavor(&self) -> SmolVlmFlavor {
        self.flavor
    }

    /// The side of a tile (and of the global view) in pixels.
    pub fn tile(&self) -> usize {
        self.tile as usize
    }

    /// Image tokens per frame (`image_seq_len`).
    pub fn image_seq_len(&self) -> usize {
        self.image_seq_len
    }

    /// Whether images are split into tiles (`do_image_splitting`).
    pub fn splits(&self) -> bool {
        self.split
    }

    /// The same processor with image splitting on or off, as
    /// transformers' `do_image_splitting=` argument sets it per call.
    pub fn with_splitting(self, split: bool) -> Self {
        SmolVlmImageProcessor { split, ..self }
    }

    /// The token texts the prompt spells images with.
    pub fn tokens(&self) -> &SmolVlmTokens {
        &self.tokens
    }

    /// Where the settings were read from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The frames of decoded RGB pixels, as 8-bit images: the tiles row
    /// by row and the global view, with `(rows, cols)` (`(0, 0)` when not
    /// split).
    pub fn frames(&self, image: &RgbImage) -> (Vec<RgbImage>, usize, usize) {
        if self.flavor == SmolVlmFlavor::LlamaCpp {
            return self.llama_cpp_frames(image);
        }
        let resized;
        let mut image = image;
        if let Some(edge) = self.resize {
            let (h, w) = longest_edge_size(image.height(), image.width(), edge);
            resized = pillow_resize(image, w, h, self.filter);
            image = &resized;
        }
        let t = self.tile;
        if !self.split {
            return (vec![pillow_resize(image, t, t, self.filter)], 0, 0);
        }
        let (h, w) = tile_multiple_size(image.height(), image.width(), t);
        let image = pillow_resize(image, w, h, self.filter);
        if h <= t && w <= t {
            return (vec![image], 0, 0);
        }
        // (h - t) // t + 1 tiles down, (w - t) // t + 1 across.
        let (rows, cols) = ((h - t) / t + 1, (w - t) / t + 1);
        let mut frames = Vec::with_capacity((rows * cols + 1) as usize);
        for r in 0..rows {
            for c in 0..cols {
                frames.push(image::imageops::crop_imm(&image, c * t, r * t, t, t).to_image());
            }
        }
        frames.push(pillow_resize(&image, t, t, self.filter));
        (frames, rows as usize, cols as usize)
    }

    /// mtmd's idefics3 frames: see [`SmolVlmFlavor::LlamaCpp`].
    fn llama_cpp_frames(&self, image: &RgbImage) -> (Vec<RgbImage>, usize, usize) {
        let resize = |image: &RgbImage, w: u32, h: u32| {
            pillow_resize_horizontal_first(image, w, h, self.filter)
        };
        let t = self.tile;
        let resized;
        let mut image = image;
        if let Some(edge) = self.resize {
            // mtmd: the longest side to `edge`, the other `int(edge /
            // aspect)` (aspect in f64) rounded up to even.
            let (w0, h0) = (f64::from(image.width()), f64::from(image.height()));
            let aspect = w0 / h0;
            let (w, h) = if w0 >= h0 {
                let h = (f64::from(edge) / aspect) as u32;
                (edge, h + h % 2)
            } else {
                let w = (f64::from(edge) * aspect) as u32;
                (w + w % 2, edge)
            };
            resized = resize(image, w.max(1), h.max(1));
            image = &resized;
        }
        let (cols, rows) = (image.width().div_ceil(t), image.height().div_ceil(t));
        let refined = resize(image, cols * t, rows * t);
        let mut frames = Vec::with_capacity((rows * cols + 1) as usize);
        for r in 0..rows {
            for c in 0..cols {
                frames.push(image::imageops::crop_imm(&refined, c * t, r * t, t, t).to_image());
            }
        }
        frames.push(resize(&refined, t, t));
        (frames, rows as usize, cols as usize)
    }

    /// Prepares decoded RGB pixels (what [`prepare`](Self::prepare) does
    /// after decoding).
    pub fn pixels(&self, image: &RgbImage) -> SmolVlmImage {
        let started = Instant::now();
        let (frames, rows, cols) = self.frames(image);
        let t = self.tile as usize;
        let area = t * t;
        let mut pixels = vec![0f32; frames.len() * 3 * area];
        for (f, frame) in frames.iter().enumerate() {
            for (x, y, pixel) in frame.enumerate_pixels() {
                let at = y as usize * t + x as usize;
                for c in 0..3 {
                    let level = pixel.0[c];
                    let mut v = f32::from(level);
                    if let Some(factor) = self.rescale {
                        // transformers rescales in f64, then casts to f32
                        // (mtmd's `level / 255.0f` gives the same f32 for
                        // every level: `mtmd_rescaling_in_f32_gives_transformers_values`).
                        v = (f64::from(level) * factor) as f32;
                    }
                    if let Some((mean, std)) = &self.normalize {
                        v = (v - mean[c]) / std[c];
                    }
                    pixels[(f * 3 + c) * area + at] = v;
                }
            }
        }
        SmolVlmImage {
            pixels,
            frames: frames.len(),
            tile: t,
            rows,
            cols,
            prepare_time: started.elapsed(),
        }
    }

    /// Reads, decodes and prepares one image.
    pub fn prepare(&self, source: &MediaSource) -> Result<SmolVlmImage> {
        let started = Instant::now();
        let bytes = read_media(source)?;
        let decoded = image::load_from_memory(&bytes).map_err(|err| Error::Media {
            media: media_name(source),
            reason: format!("cannot decode the image: {err}"),
        })?;
        let rgb = if self.convert_rgb {
            to_rgb(&decoded)
        } else {
            decoded.to_rgb8()
        };
        let mut image = self.pixels(&rgb);
        image.prepare_time = started.elapsed();
        Ok(image)
    }

    /// The prompt text that stands for an image of `rows` × `cols` tiles
    /// (`(0, 0)`: not split), as `SmolVLMProcessor` writes it in place of
    /// the image's placeholder.
    pub fn image_prompt(&self, rows: usize, cols: usize) -> String {
        let SmolVlmTokens {
            image,
            fake_image,
            global_image,
        } = &self.tokens;
        let seq = image.repeat(self.image_seq_len);
        let global = format!("{fake_image}{global_image}{seq}{fake_image}");
        if rows == 0 && cols == 0 {
            return global;
        }
        let mut out = String::new();
        for r in 1..=rows {
            for c in 1..=cols {
                out.push_str(&format!("{fake_image}<row_{r}_col_{c}>{seq}"));
            }
            out.push('\n');
        }
        out.push('\n');
        out.push_str(&global);
        out
    }

    /// The image positions an image of `rows` × `cols` tiles takes.
    pub fn image_positions(&self, rows: usize, cols: usize) -> usize {
        (rows * cols + 1) * self.image_seq_len
    }

    /// `prompt` with each image placeholder replaced by its image's
    /// [`image_prompt`](Self::image_prompt), in order, before tokenizing
    /// (as `SmolVLMProcessor` expands it). Fails when the prompt has not
    /// exactly one placeholder per image; `request` names the request.
    pub fn expand_prompt(
        &self,
        request: u64,
        prompt: &str,
        images: &[SmolVlmImage],
    ) -> Result<String> {
        let placeholder = self.tokens.image.as_str();
        let parts: Vec<&str> = prompt.split(placeholder).collect();
        if parts.len() - 1 != images.len() {
            return Err(Error::ImagePlaceholders {
                request,
                images: images.len(),
                placeholders: parts.len() - 1,
                token: placeholder.to_owned(),
            });
        }
        let mut out = String::with_capacity(prompt.len());
        for (part, image) in parts.iter().zip(images) {
            out.push_str(part);
            out.push_str(&self.image_prompt(image.rows, image.cols));
        }
        out.push_str(parts.last().copied().unwrap_or_default());
        Ok(out)
    }
}

/// SmolVLM's processor as the generation loop takes it (an
/// [`ImageProcessor`]): the image processor ([`SmolVlmImageProcessor`])
/// and the model's tokenizer, so that each prepared image carries the
/// token ids its placeholder expands to.
///
/// `SmolVLMProcessor` expands each `<image>` of the prompt text into the
/// image's layout ([`SmolVlmImageProcessor::image_prompt`]) and then
/// tokenizes the whole text. Here the prompt is tokenized with its
/// placeholders and each placeholder's id is replaced by the layout text
/// tokenized alone (without special tokens). The two agree because the
/// tokenizer splits text at its added tokens before anything else, and
/// the layout begins and ends with one (`<fake_token_around_image>`),
/// as the placeholder itself is one; held on the fixture's prompts by
/// `an_image_through_the_contract_expands_to_transformers_input_ids`.
#[derive(Debug, Clone)]
pub struct SmolVlmProcessor {
    images: SmolVlmImageProcessor,
    tokenizer: Arc<HfTokenizer>,
    image_token_id: u32,
}

impl SmolVlmProcessor {
    /// The processor of `images` with the model's `tokenizer`, in which
    /// `image_token_id` is the image token (`images.tokens().image`).
    pub fn new(
        images: SmolVlmImageProcessor,
        tokenizer: Arc<HfTokenizer>,
        image_token_id: u32,
    ) -> Self {
        SmolVlmProcessor {
            images,
            tokenizer,
            image_token_id,
        }
    }

    /// The image processor.
    pub fn image_processor(&self) -> &SmolVlmImageProcessor {
        &self.images
    }

    /// The token ids of the layout of an image of `rows` × `cols` tiles
    /// (`(0, 0)`: not split): its
    /// [`image_prompt`](SmolVlmImageProcessor::image_prompt) tokenized
    /// without special tokens. Fails where the tokenizer does not read
    /// the layout's image tokens as the image token (`media` names the
    /// image).
    pub fn layout_ids(&self, rows: usize, cols: usize, media: &str) -> Result<Vec<u32>> {
        let ids = match self.images.flavor {
            SmolVlmFlavor::Transformers => self
                .tokenizer
                .encode(&self.images.image_prompt(rows, cols), false)?,
            SmolVlmFlavor::LlamaCpp => self.llama_cpp_layout(rows, cols, media)?,
        };
        let found = ids.iter().filter(|&&t| t == self.image_token_id).count();
        let want = self.images.image_positions(rows, cols);
        if found != want {
            return Err(Error::Media {
                media: media.to_owned(),
                reason: format!(
                    "the tokenizer reads the image's layout ({rows} × {cols} tiles) as {found} \
                     image tokens (id {}), not {want}",
                    self.image_token_id
                ),
            });
        }
        Ok(ids)
    }

    /// mtmd's idefics3 layout as token ids: per tile
    /// `<fake_token_around_image><row_r_col_c>` (tokenized with special
    /// tokens) and `image_seq_len` image positions, the `"\n"` token
    /// between rows (none after the last), then the `"\n\n"`,
    /// `<fake_token_around_image>` and `<global-img>` tokens, the global
    /// view's positions and `<fake_token_around_image>`. mtmd looks each
    /// single token up by its text; one the vocabulary lacks is refused
    /// here, naming it.
    fn llama_cpp_layout(&self, rows: usize, cols: usize, media: &str) -> Result<Vec<u32>> {
        let one = |text: &str| -> Result<u32> {
            match self.tokenizer.encode(text, false)?.as_slice() {
                [id] => Ok(*id),
                ids => Err(Error::Media {
                    media: media.to_owned(),
                    reason: format!(
                        "llama.cpp's idefics3 layout needs {text:?} as one token of the                          vocabulary; the tokenizer reads it as {} tokens",
                        ids.len()
                    ),
                }),
            }
        };
        let SmolVlmTokens {
            fake_image,
            global_image,
            ..
        } = &self.images.tokens;
        let seq = std::iter::repeat_n(self.image_token_id, self.images.image_seq_len);
        let mut ids = Vec::new();
        for r in 1..=rows {
            for c in 1..=cols {
                let start = format!("{fake_image}<row_{r}_col_{c}>");
                ids.extend(self.tokenizer.encode(&start, false)?);
                ids.extend(seq.clone());
            }
            if r != rows {
                ids.push(one("\n")?);
            }
        }
        ids.push(one("\n\n")?);
        ids.push(one(fake_image)?);
        ids.push(one(global_image)?);
        ids.extend(seq);
        ids.push(one(fake_image)?);
        Ok(ids)
    }

    /// A prepared SmolVLM image as the contract holds it: its frames,
    /// grid, image positions and layout ids.
    pub fn to_prepared(&self, image: SmolVlmImage, media: &str) -> Result<PreparedImage> {
        let prompt = self.layout_ids(image.rows, image.cols, media)?;
        Ok(PreparedImage {
            tokens: self.images.image_positions(image.rows, image.cols),
            prompt: Some(prompt),
            frames: image.frames,
            rows: image.rows,
            cols: image.cols,
            channels: 3,
            height: image.tile,
            width: image.tile,
            pixels: image.pixels,
            prepare_time: image.prepare_time,
        })
    }
}

impl ImageProcessor for SmolVlmProcessor {
    fn image_token_id(&self) -> u32 {
        self.image_token_id
    }

    fn image_token(&self) -> String {
        self.images.tokens().image.clone()
    }

    fn prepare(&self, source: &MediaSource) -> Result<PreparedImage> {
        let started = Instant::now();
        let image = self.images.prepare(source)?;
        let mut prepared = self.to_prepared(image, &media_name(source))?;
        prepared.prepare_time = started.elapsed();
        Ok(prepared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_edge_resize_rounds_the_other_side_up_to_even_as_transformers_does() {
        // 30 × 44 (w × h) to a longest edge of 64: int(64 * 30 / 44) = 43, made 44.
        assert_eq!(longest_edge_size(44, 30, 64), (64, 44));
        // 64 × 20: int(64 / 3.2) = 20, already even.
        assert_eq!(longest_edge_size(20, 64, 64), (20, 64));
        // Up as well as down.
        assert_eq!(longest_edge_size(32, 32, 64), (64, 64));
        assert_eq!(longest_edge_size(480, 640, 1456), (1092, 1456));
        // Both sides stay within 4096.
        assert_eq!(longest_edge_size(100, 9000, 4096), (46, 4096));
        // int(4096 / 9000) = 0 is even: the side is then raised to 1.
        assert_eq!(longest_edge_size(9000, 1, 4096), (4096, 1));
        // A longest edge above 4096 is scaled back below it.
        assert_eq!(longest_edge_size(3, 9000, 8000), (1, 4096));
        assert_eq!(longest_edge_size(7, 5, 5000), (4096, 2926));
    }

    #[test]
    fn the_tile_resize_rounds_both_sides_up_to_whole_tiles() {
        assert_eq!(tile_multiple_size(44, 64, 32), (64, 64));
        assert_eq!(tile_multiple_size(20, 64, 32), (32, 64));
        assert_eq!(tile_multiple_size(64, 44, 32), (64, 64));
        assert_eq!(tile_multiple_size(1092, 1456, 364), (1092, 1456));
        assert_eq!(tile_multiple_size(1093, 1456, 364), (1456, 1456));
        assert_eq!(tile_multiple_size(10, 10, 32), (32, 32));
    }

    #[test]
    fn pillows_filters_weigh_as_its_resample_c_does() {
        assert_eq!(PillowFilter::Lanczos.weight(0.0), 1.0);
        assert_eq!(PillowFilter::Lanczos.weight(3.0), 0.0);
        assert_eq!(PillowFilter::Bicubic.weight(1.5), -0.0625);
        assert_eq!(PillowFilter::Bilinear.weight(0.25), 0.75);
        assert_eq!(PillowFilter::Box.weight(0.5), 1.0);
        assert_eq!(PillowFilter::Box.weight(-0.5), 0.0);
        assert_eq!(PillowFilter::Hamming.weight(1.0), 0.0);
        assert!(PillowFilter::from_pillow(0).is_err());
        assert!(PillowFilter::from_pillow(6).is_err());
    }

    /// Values Pillow 13 gives: `Image.resize` of a 4 × 1 RGB row
    /// `[0, 85, 170, 255]` (every channel) to 3 × 1 and to 7 × 1 with
    /// Lanczos.
    const PILLOW_4_TO_3: [u8; 3] = [14, 128, 241];
    const PILLOW_4_TO_7: [u8; 7] = [0, 20, 77, 128, 178, 235, 255];

    #[test]
    fn a_one_pass_lanczos_resize_gives_pillows_levels() {
        let row = ImageBuffer::from_fn(4, 1, |x, _| image::Rgb([(x * 85) as u8; 3]));
        let levels = |image: &RgbImage| image.pixels().map(|p| p.0[0]).collect::<Vec<u8>>();
        assert_eq!(
            levels(&pillow_resize(&row, 3, 1, PillowFilter::Lanczos)),
            PILLOW_4_TO_3
        );
        assert_eq!(
            levels(&pillow_resize(&row, 7, 1, PillowFilter::Lanczos)),
            PILLOW_4_TO_7
        );
        assert_eq!(pillow_resize(&row, 4, 1, PillowFilter::Lanczos), row);
    }

    /// A 4 × 9 grey image to 3 × 3 with Lanczos: the height shrinks by 6
    /// pixels, the width by 1, so Pillow 13 runs the vertical pass first
    /// (the other order gives other levels here).
    #[test]
    fn llama_cpp_resizes_run_the_horizontal_pass_first_whatever_the_sides() {
        // The 4 × 9 image of the Pillow 13 test below, whose order matters.
        let image = ImageBuffer::from_fn(4, 9, |x, y| {
            image::Rgb([
                ((x * 37 + y * 91) % 256) as u8,
                (x * 50) as u8,
                (y * 20) as u8,
            ])
        });
        let want = resample_vertical(
            &resample_horizontal(&image, 3, PillowFilter::Lanczos),
            3,
            PillowFilter::Lanczos,
        );
        assert_eq!(
            pillow_resize_horizontal_first(&image, 3, 3, PillowFilter::Lanczos),
            want
        );
        assert_eq!(
            pillow_resize_horizontal_first(&image, 4, 9, PillowFilter::Lanczos),
            image
        );
    }

    fn llama_cpp_processor() -> SmolVlmImageProcessor {
        SmolVlmImageProcessor::llama_cpp(32, 64, [0.5; 3], [0.5; 3], 4, Path::new("mm.gguf"))
    }

    #[test]
    fn mtmd_splits_even_a_one_tile_image_and_adds_the_global_view() {
        let processor = llama_cpp_processor();
        // 20 × 20: resized to 64 × 64, 2 × 2 tiles and the global view.
        let square = RgbImage::from_pixel(20, 20, image::Rgb([10, 20, 30]));
        let (frames, rows, cols) = processor.frames(&square);
        assert_eq!((frames.len(), rows, cols), (5, 2, 2));
        // A processor whose longest edge is the tile: one tile, still
        // split (a 1 × 1 grid and the global view; transformers gives
        // one frame).
        let one = SmolVlmImageProcessor::llama_cpp(32, 32, [0.5; 3], [0.5; 3], 4, Path::new("m"));
        let (frames, rows, cols) = one.frames(&square);
        assert_eq!((frames.len(), rows, cols), (2, 1, 1));
        assert!(frames.iter().all(|f| f.dimensions() == (32, 32)));
        // 64 × 20 (the fixture's strip): 64 × 20 → 64 × 32, 1 × 2 tiles.
        let strip = RgbImage::from_pixel(64, 20, image::Rgb([1, 2, 3]));
        let (frames, rows, cols) = processor.frames(&strip);
        assert_eq!((frames.len(), rows, cols), (3, 1, 2));
        // 30 × 100: 20 × 64 (int(64 × 0.3) = 19, rounded up to even),
        // then each side up to whole tiles on its own: 32 × 64.
        let tall = RgbImage::from_pixel(30, 100, image::Rgb([1, 2, 3]));
        let (_, rows, cols) = processor.frames(&tall);
        assert_eq!((rows, cols), (2, 1));
    }

    #[test]
    fn mtmd_rescaling_in_f32_gives_transformers_values() {
        for level in 0..=255u8 {
            let mtmd = f32::from(level) / 255.0;
            let transformers = (f64::from(level) * (1.0 / 255.0)) as f32;
            assert_eq!(mtmd.to_bits(), transformers.to_bits(), "level {level}");
        }
    }

    #[test]
    fn mtmd_normalizes_with_the_files_mean_and_std() {
        let processor = SmolVlmImageProcessor::llama_cpp(
            32,
            32,
            [0.25, 0.5, 0.75],
            [0.5, 0.25, 0.125],
            4,
            Path::new("m"),
        );
        let image = RgbImage::from_pixel(32, 32, image::Rgb([51, 128, 255]));
        let out = processor.pixels(&image);
        let area = 32 * 32;
        for (c, (level, (mean, std))) in [51u8, 128, 255]
            .into_iter()
            .zip([(0.25f32, 0.5f32), (0.5, 0.25), (0.75, 0.125)])
            .enumerate()
        {
            let want = (f32::from(level) / 255.0 - mean) / std;
            assert_eq!(out.pixels[c * area], want, "channel {c}");
        }
        // 1 × 1 tiles and the global view, each a uniform frame.
        assert_eq!(out.frames, 2);
    }

    #[test]
    fn a_resize_that_mostly_shrinks_the_height_runs_the_vertical_pass_first_as_pillow_13() {
        const ROWS: [[u8; 4]; 9] = [
            [95, 130, 194, 217],
            [207, 235, 15, 163],
            [33, 215, 217, 130],
            [248, 189, 16, 69],
            [184, 232, 205, 78],
            [169, 61, 125, 10],
            [29, 240, 66, 19],
            [182, 39, 59, 4],
            [59, 81, 222, 44],
        ];
        const PILLOW: [[u8; 3]; 3] = [[160, 162, 148], [179, 158, 61], [98, 114, 42]];
        let image =
            ImageBuffer::from_fn(4, 9, |x, y| image::Rgb([ROWS[y as usize][x as usize]; 3]));
        let got = pillow_resize(&image, 3, 3, PillowFilter::Lanczos);
        for (y, row) in PILLOW.iter().enumerate() {
            for (x, &level) in row.iter().enumerate() {
                assert_eq!(
                    got.get_pixel(x as u32, y as u32).0,
                    [level; 3],
                    "({x}, {y})"
                );
            }
        }
        let other = resample_vertical(
            &resample_horizontal(&image, 3, PillowFilter::Lanczos),
            3,
            PillowFilter::Lanczos,
        );
        assert_ne!(other, got, "the order matters for this image");
    }
}
