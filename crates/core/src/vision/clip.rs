//! `CLIPImageProcessor`: see [`ClipImageProcessor`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use image::imageops::FilterType;
use image::{DynamicImage, ImageBuffer, Rgb, RgbImage, Rgba};
use serde_json::Value;

use super::config::VisionLanguageConfig;
use super::processor::{ImageProcessor, PreparedImage};
use crate::files::{
    parse_json as parse_model_json, read_optional_json, read_required as read_model_file,
};
use crate::media::{MediaSource, media_name, read_media};
use crate::{Error, Result};

/// `preprocessor_config.json`.
pub const PREPROCESSOR_CONFIG_JSON: &str = "preprocessor_config.json";
/// `processor_config.json`.
pub const PROCESSOR_CONFIG_JSON: &str = "processor_config.json";

/// A folder's image-processor settings: `preprocessor_config.json`, or,
/// where a folder has none (as transformers 5's `save_pretrained` writes
/// it), the `image_processor` object of `processor_config.json`; and
/// `processor_config.json` itself, when there is one.
pub(crate) struct ProcessorConfigs {
    /// The image processor's settings.
    pub config: Value,
    /// The file they came from, for errors.
    pub path: PathBuf,
    /// `processor_config.json`, parsed, if the folder has it.
    pub processor: Option<Value>,
    /// Its path.
    pub processor_path: PathBuf,
}

impl ProcessorConfigs {
    /// Reads them from `dir`; one of the two sources of the settings is
    /// required.
    pub(crate) fn read(dir: &Path) -> Result<Self> {
        let processor_path = dir.join(PROCESSOR_CONFIG_JSON);
        let processor = read_optional_json(&processor_path)?;
        let nested = processor
            .as_ref()
            .and_then(|p| p.get("image_processor"))
            .filter(|v| v.is_object());
        let path = dir.join(PREPROCESSOR_CONFIG_JSON);
        let (config, path) = match (path.exists(), nested) {
            (false, Some(nested)) => (nested.clone(), processor_path.clone()),
            _ => {
                let what = "the image processor config (or an `image_processor` object in \
                            processor_config.json)";
                let text = read_model_file(&path, what)?;
                (parse_model_json(&text, &path)?, path)
            }
        };
        Ok(ProcessorConfigs {
            config,
            path,
            processor,
            processor_path,
        })
    }
}

/// How an image is resized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeTo {
    /// The shortest edge to this many pixels, the aspect ratio kept.
    ShortestEdge(u32),
    /// Exactly this height and width.
    Exact {
        /// Height in pixels.
        height: u32,
        /// Width in pixels.
        width: u32,
    },
}

/// The resampling filter (Pillow's `resample` numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resample {
    /// `0`: nearest neighbour.
    Nearest,
    /// `1`: Lanczos (3 lobes).
    Lanczos,
    /// `2`: bilinear.
    Bilinear,
    /// `3`: bicubic (`a = -0.5`).
    Bicubic,
}

impl Resample {
    fn from_pillow(n: u64) -> std::result::Result<Self, String> {
        match n {
            0 => Ok(Resample::Nearest),
            1 => Ok(Resample::Lanczos),
            2 => Ok(Resample::Bilinear),
            3 => Ok(Resample::Bicubic),
            4 => Err("resample 4 (box) has no counterpart in the image crate".into()),
            5 => Err("resample 5 (hamming) has no counterpart in the image crate".into()),
            other => Err(format!("resample {other} is not a Pillow filter (0 to 5)")),
        }
    }

    fn filter(self) -> FilterType {
        match self {
            Resample::Nearest => FilterType::Nearest,
            Resample::Lanczos => FilterType::Lanczos3,
            Resample::Bilinear => FilterType::Triangle,
            Resample::Bicubic => FilterType::CatmullRom,
        }
    }
}

/// A CLIP image processor: one model's preprocessing, read from its
/// folder.
///
/// `CLIPImageProcessor`, as a model folder's `preprocessor_config.json`
/// configures it: convert to RGB (an alpha channel composited over white,
/// as transformers does), resize (the shortest edge to
/// `size.shortest_edge`, or to `size.height` × `size.width`) with the
/// configured resampling, center crop to `crop_size`, rescale, normalize,
/// channels first.
///
/// Every step but the resampling is transformers' arithmetic to the bit:
/// the output size of a shortest-edge resize (`int(edge * long / short)`),
/// the crop's offsets (`(size - crop) // 2`, zero padding where the crop is
/// larger), the rescale in `f64` rounded to `f32`, and the normalization
/// in `f32`. An image that needs no resize (its shortest edge already the
/// target) therefore gives exactly transformers' pixel values. Resizing
/// uses the `image` crate's filters (bicubic is Catmull-Rom, as Pillow's
/// `a = -0.5` cubic; bilinear is its triangle filter; Lanczos its
/// 3-lobe), which compute in floating point where Pillow uses fixed-point
/// coefficients on 8-bit values, so a resized pixel can differ from
/// Pillow's by a few levels (see `docs/multimodal.md` for the measured
/// difference). Pillow's box and Hamming filters have no `image`
/// counterpart and are refused at load.
#[derive(Debug, Clone, PartialEq)]
pub struct ClipImageProcessor {
    image_token_id: u32,
    image_token: String,
    tokens: usize,
    resize: Option<(ResizeTo, Resample)>,
    crop: Option<(u32, u32)>,
    rescale: Option<f64>,
    normalize: Option<([f32; 3], [f32; 3])>,
    /// The size the vision tower takes, `(height, width)`.
    input: (u32, u32),
    /// Where the config came from, for messages.
    source: PathBuf,
}

impl ClipImageProcessor {
    /// Reads the image processor's settings from
    /// `dir/preprocessor_config.json`, or, where a folder has none (as
    /// transformers 5's `save_pretrained` writes it), from the
    /// `image_processor` object of `dir/processor_config.json`; one of
    /// them is required. `processor_config.json`'s `patch_size`,
    /// `num_additional_image_tokens` and `vision_feature_select_strategy`
    /// must give the token count the model's own config gives, and its
    /// `image_token` names the placeholder. `vision` describes the model;
    /// `image_token` is the image token's text in the vocabulary, when
    /// the tokenizer has one.
    pub fn from_dir(
        dir: &Path,
        vision: &VisionLanguageConfig,
        image_token: Option<String>,
    ) -> Result<Self> {
        let ProcessorConfigs {
            config,
            path,
            processor,
            processor_path,
        } = ProcessorConfigs::read(dir)?;
        ClipImageProcessor::from_configs(&config, &path, processor.as_ref(), vision, image_token)
            .map_err(|reason| Error::InvalidModelConfig {
                path: path.clone(),
                reason,
            })
            .and_then(|p| p.check_processor(processor.as_ref(), &processor_path, vision))
    }

    fn from_configs(
        config: &Value,
        path: &Path,
        processor: Option<&Value>,
        vision: &VisionLanguageConfig,
        image_token: Option<String>,
    ) -> std::result::Result<Self, String> {
        if let Some(kind) = config.get("image_processor_type").and_then(Value::as_str)
            && !matches!(kind, "CLIPImageProcessor" | "CLIPImageProcessorFast")
        {
            return Err(format!(
                "image processor `{kind}` is not supported; supported: CLIPImageProcessor"
            ));
        }
        let flag = |key: &str| config.get(key).and_then(Value::as_bool).unwrap_or(true);
        let side = |v: &Value, key: &str| -> std::result::Result<u32, String> {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("`{key}` {v} must be a positive size"))
        };
        // A size is a number (a square, or a shortest edge for `size`) or
        // {shortest_edge} or {height, width}.
        let hw = |v: &Value, key: &str| -> std::result::Result<(u32, u32), String> {
            match (v.get("height"), v.get("width")) {
                (Some(h), Some(w)) => Ok((side(h, key)?, side(w, key)?)),
                _ => side(v, key).map(|n| (n, n)),
            }
        };
        let resample = match config.get("resample") {
            None | Some(Value::Null) => Resample::Bicubic,
            Some(v) => Resample::from_pillow(
                v.as_u64()
                    .ok_or_else(|| format!("`resample` {v} is not a Pillow filter number"))?,
            )?,
        };
        let resize = if flag("do_resize") {
            let size = config.get("size").ok_or("`size` is missing")?;
            let to = match size.get("shortest_edge") {
                Some(edge) => ResizeTo::ShortestEdge(side(edge, "size.shortest_edge")?),
                None if size.is_number() => ResizeTo::ShortestEdge(side(size, "size")?),
                None => {
                    let (height, width) = hw(size, "size")?;
                    ResizeTo::Exact { height, width }
                }
            };
            Some((to, resample))
        } else {
            None
        };
        let crop = if flag("do_center_crop") {
            let crop = config.get("crop_size").ok_or("`crop_size` is missing")?;
            Some(hw(crop, "crop_size")?)
        } else {
            None
        };
        let rescale = if flag("do_rescale") {
            Some(
                config
                    .get("rescale_factor")
                    .and_then(Value::as_f64)
                    .unwrap_or(1.0 / 255.0),
            )
        } else {
            None
        };
        let triple = |key: &str, default: [f32; 3]| -> std::result::Result<[f32; 3], String> {
            match config.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(Value::Array(list)) if list.len() == 3 => {
                    let mut out = [0f32; 3];
                    for (o, v) in out.iter_mut().zip(list) {
                        *o = v
                            .as_f64()
                            .ok_or_else(|| format!("`{key}` holds {v}, not a number"))?
                            as f32;
                    }
                    Ok(out)
                }
                Some(v) => v
                    .as_f64()
                    .map(|x| [x as f32; 3])
                    .ok_or_else(|| format!("`{key}` {v} must be three numbers")),
            }
        };
        let normalize = if flag("do_normalize") {
            // OpenAI CLIP's statistics, transformers' defaults.
            let mean = triple("image_mean", [0.481_454_66, 0.457_827_5, 0.408_210_73])?;
            let std = triple("image_std", [0.268_629_54, 0.261_302_6, 0.275_777_1])?;
            if std.contains(&0.0) {
                return Err("`image_std` holds a zero".into());
            }
            Some((mean, std))
        } else {
            None
        };
        let image_size = u32::try_from(vision.vision.image_size).unwrap_or(u32::MAX);
        let output = crop.or(match resize {
            Some((ResizeTo::Exact { height, width }, _)) => Some((height, width)),
            _ => None,
        });
        if let Some((h, w)) = output
            && (h, w) != (image_size, image_size)
        {
            return Err(format!(
                "the processor makes {h}×{w} images and the vision tower takes \
                 {image_size}×{image_size} (vision_config.image_size)"
            ));
        }
        let image_token = processor
            .and_then(|p| p.get("image_token"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(image_token)
            .unwrap_or_else(|| "<image>".into());
        Ok(ClipImageProcessor {
            image_token_id: vision.image_token_id,
            image_token,
            tokens: vision.image_tokens(),
            resize,
            crop,
            rescale,
            normalize,
            input: (image_size, image_size),
            source: path.to_owned(),
        })
    }

    /// Fails when `processor_config.json` expands an image into another
    /// number of tokens than the model makes features (transformers would
    /// fail at the first image).
    fn check_processor(
        self,
        processor: Option<&Value>,
        path: &Path,
        vision: &VisionLanguageConfig,
    ) -> Result<Self> {
        let Some(processor) = processor else {
            return Ok(self);
        };
        let number = |key: &str| processor.get(key).and_then(Value::as_u64);
        let Some(patch) = number("patch_size").filter(|&p| p > 0) else {
            return Ok(self);
        };
        let additional = number("num_additional_image_tokens").unwrap_or(0);
        let side = u64::from(self.input.0);
        let mut count = (side / patch) * (side / patch) + additional;
        if processor
            .get("vision_feature_select_strategy")
            .and_then(Value::as_str)
            .unwrap_or("default")
            == "default"
        {
            count = count.saturating_sub(1);
        }
        if usize::try_from(count).ok() != Some(vision.image_tokens()) {
            return Err(Error::InvalidModelConfig {
                path: path.to_owned(),
                reason: format!(
                    "it expands an image into {count} tokens (patch_size {patch}, \
                     num_additional_image_tokens {additional}) where the model makes {} \
                     features per image",
                    vision.image_tokens()
                ),
            });
        }
        Ok(self)
    }

    /// The prompt positions each image takes.
    pub fn tokens_per_image(&self) -> usize {
        self.tokens
    }

    /// The `(height, width)` of the prepared pixels.
    pub fn input_size(&self) -> (u32, u32) {
        self.input
    }

    /// The resize step, if any.
    pub fn resize(&self) -> Option<(ResizeTo, Resample)> {
        self.resize
    }

    /// Prepares decoded RGB pixels (what [`ImageProcessor::prepare`] does
    /// after decoding): `[3, height, width]` values, channel-major.
    pub fn pixels(&self, image: &RgbImage) -> Result<Vec<f32>> {
        let resized;
        let mut image = image;
        if let Some((to, resample)) = self.resize {
            let (h, w) = output_size(image.height(), image.width(), to);
            if (w, h) != image.dimensions() {
                resized = image::imageops::resize(image, w, h, resample.filter());
                image = &resized;
            }
        }
        let cropped;
        if let Some((h, w)) = self.crop {
            cropped = center_crop(image, h, w);
            image = &cropped;
        }
        if (image.height(), image.width()) != self.input {
            return Err(Error::Media {
                media: "image".into(),
                reason: format!(
                    "prepared to {}×{}, the vision tower takes {}×{} ({} has no crop)",
                    image.height(),
                    image.width(),
                    self.input.0,
                    self.input.1,
                    self.source.display()
                ),
            });
        }
        let (h, w) = (image.height() as usize, image.width() as usize);
        let mut out = vec![0f32; 3 * h * w];
        for (x, y, pixel) in image.enumerate_pixels() {
            let at = y as usize * w + x as usize;
            for c in 0..3 {
                let mut v = f32::from(pixel.0[c]);
                if let Some(factor) = self.rescale {
                    // transformers rescales in f64, then casts to f32.
                    v = (f64::from(pixel.0[c]) * factor) as f32;
                }
                if let Some((mean, std)) = &self.normalize {
                    v = (v - mean[c]) / std[c];
                }
                out[c * h * w + at] = v;
            }
        }
        Ok(out)
    }
}

/// transformers' `get_resize_output_image_size` for a shortest-edge
/// target (`default_to_square=False`): `(height, width)`.
pub fn output_size(height: u32, width: u32, to: ResizeTo) -> (u32, u32) {
    match to {
        ResizeTo::Exact { height, width } => (height, width),
        ResizeTo::ShortestEdge(edge) => {
            let (short, long) = if width <= height {
                (width, height)
            } else {
                (height, width)
            };
            // int(edge * long / short), in floating point as Python does.
            let new_long = (f64::from(edge) * f64::from(long) / f64::from(short)) as u32;
            if width <= height {
                (new_long, edge)
            } else {
                (edge, new_long)
            }
        }
    }
}

/// transformers' `center_crop`: the `height` × `width` window at
/// `((H - height) // 2, (W - width) // 2)`, zero padded (centered the same
/// way) where the image is smaller.
pub fn center_crop(image: &RgbImage, height: u32, width: u32) -> RgbImage {
    let (w0, h0) = image.dimensions();
    if (w0, h0) == (width, height) {
        return image.clone();
    }
    // Offsets of the window in the (padded) image: Python's floor
    // division of possibly negative differences.
    let top = (i64::from(h0) - i64::from(height)).div_euclid(2);
    let left = (i64::from(w0) - i64::from(width)).div_euclid(2);
    ImageBuffer::from_fn(width, height, |x, y| {
        let (sx, sy) = (i64::from(x) + left, i64::from(y) + top);
        match (u32::try_from(sx), u32::try_from(sy)) {
            (Ok(sx), Ok(sy)) if sx < w0 && sy < h0 => *image.get_pixel(sx, sy),
            _ => Rgb([0, 0, 0]),
        }
    })
}

/// transformers' `convert_to_rgb`: an image with an alpha channel is
/// composited over opaque white (Pillow's `alpha_composite`, in its
/// integer arithmetic), any other converted as is.
pub fn to_rgb(image: &DynamicImage) -> RgbImage {
    if !image.color().has_alpha() {
        return image.to_rgb8();
    }
    let rgba = image.to_rgba8();
    ImageBuffer::from_fn(rgba.width(), rgba.height(), |x, y| {
        let Rgba([r, g, b, a]) = *rgba.get_pixel(x, y);
        Rgb([r, g, b].map(|c| over_white(c, a)))
    })
}

/// One channel of Pillow's `alpha_composite` of `(c, a)` over opaque
/// white: 7 bits of precision, divisions by 255 rounded by shifts.
fn over_white(c: u8, a: u8) -> u8 {
    const PRECISION: u32 = 7;
    if a == 0 {
        return 255;
    }
    let (c, a) = (u32::from(c), u32::from(a));
    // With an opaque destination the output alpha is 255 * 255 and
    // Pillow's coefficients are a·2⁷ and (255 − a)·2⁷ exactly.
    let coef1 = a << PRECISION;
    let coef2 = (255 << PRECISION) - coef1;
    let tmp = c * coef1 + 255 * coef2 + (0x80 << PRECISION);
    let div255 = ((tmp >> 8) + tmp) >> 8;
    u8::try_from(div255 >> PRECISION).unwrap_or(u8::MAX)
}

impl ImageProcessor for ClipImageProcessor {
    fn image_token_id(&self) -> u32 {
        self.image_token_id
    }

    fn image_token(&self) -> String {
        self.image_token.clone()
    }

    fn prepare(&self, source: &MediaSource) -> Result<PreparedImage> {
        let started = Instant::now();
        let bytes = read_media(source)?;
        let name = || media_name(source);
        let decoded = image::load_from_memory(&bytes).map_err(|err| Error::Media {
            media: name(),
            reason: format!("cannot decode the image: {err}"),
        })?;
        let pixels = self.pixels(&to_rgb(&decoded)).map_err(|err| match err {
            Error::Media { reason, .. } => Error::Media {
                media: name(),
                reason,
            },
            other => other,
        })?;
        Ok(PreparedImage {
            pixels,
            frames: 1,
            rows: 0,
            cols: 0,
            channels: 3,
            height: self.input.0 as usize,
            width: self.input.1 as usize,
            tokens: self.tokens,
            prompt: None,
            prepare_time: started.elapsed(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vision::config::{FeatureSelect, VisionWeightNames};
    use serde_json::json;

    fn vision(image_size: usize) -> VisionLanguageConfig {
        let config = json!({
            "model_type": "llava",
            "image_token_index": 3,
            "text_config": {"hidden_size": 64},
            "vision_config": {"hidden_size": 32, "num_attention_heads": 2,
                              "num_hidden_layers": 2, "image_size": image_size, "patch_size": 8}
        });
        let names =
            VisionWeightNames::detect(["language_model.model.embed_tokens.weight"]).expect("names");
        super::super::config::split_llava(&config, Path::new("config.json"), names)
            .expect("llava")
            .1
    }

    fn processor(config: Value) -> std::result::Result<ClipImageProcessor, String> {
        ClipImageProcessor::from_configs(&config, Path::new("p.json"), None, &vision(32), None)
    }

    fn clip_config() -> Value {
        json!({
            "image_processor_type": "CLIPImageProcessor",
            "do_resize": true, "size": {"shortest_edge": 32}, "resample": 3,
            "do_center_crop": true, "crop_size": {"height": 32, "width": 32},
            "do_rescale": true, "rescale_factor": 0.00392156862745098,
            "do_normalize": true,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711]
        })
    }

    #[test]
    fn a_shortest_edge_resize_keeps_the_aspect_ratio_as_transformers_rounds_it() {
        let to = ResizeTo::ShortestEdge(336);
        assert_eq!(output_size(480, 640, to), (336, 448));
        assert_eq!(output_size(640, 480, to), (448, 336));
        // int(336 * 500 / 333) = int(504.50...) = 504
        assert_eq!(output_size(333, 500, to), (336, 504));
        assert_eq!(output_size(10, 10, to), (336, 336));
    }

    #[test]
    fn the_center_crop_takes_pythons_floor_offsets_and_pads_with_zeros() {
        let image = ImageBuffer::from_fn(5, 4, |x, y| Rgb([x as u8, y as u8, 9]));
        let crop = center_crop(&image, 2, 2);
        // top = (4 - 2) // 2 = 1, left = (5 - 2) // 2 = 1
        assert_eq!(crop.get_pixel(0, 0).0, [1, 1, 9]);
        let padded = center_crop(&image, 6, 5);
        // top = (4 - 6) // 2 = -1: the first row is padding.
        assert_eq!(padded.get_pixel(0, 0).0, [0, 0, 0]);
        assert_eq!(padded.get_pixel(0, 1).0, [0, 0, 9]);
    }

    /// A crop larger than the image by an odd amount pads one more row
    /// (column) before the image than after it, as transformers'
    /// `center_crop` does (it puts the image at `ceil(pad / 2)` in the
    /// padded canvas, then crops at `(H - height) // 2` from there): a
    /// 4 x 4 image cropped to 5 rows of 7 has one row of padding above and
    /// none below, two columns left and one right.
    #[test]
    fn an_odd_padding_puts_the_extra_row_and_column_before_the_image_as_transformers_does() {
        let image = ImageBuffer::from_fn(4, 4, |x, y| Rgb([10 + x as u8, 20 + y as u8, 9]));
        let crop = center_crop(&image, 5, 7);
        assert_eq!(crop.dimensions(), (7, 5));
        // The image's row and column at each output row and column, `None`
        // for padding.
        let rows = [None, Some(0u8), Some(1), Some(2), Some(3)];
        let columns = [None, None, Some(0u8), Some(1), Some(2), Some(3), None];
        for (y, row) in rows.iter().enumerate() {
            for (x, column) in columns.iter().enumerate() {
                let want = match (row, column) {
                    (Some(r), Some(c)) => [10 + c, 20 + r, 9],
                    _ => [0, 0, 0],
                };
                assert_eq!(
                    crop.get_pixel(x as u32, y as u32).0,
                    want,
                    "output row {y}, column {x}"
                );
            }
        }
    }

    #[test]
    fn pixels_are_rescaled_in_f64_and_normalized_in_f32_channels_first() {
        let p = processor(clip_config()).expect("processor");
        let image = ImageBuffer::from_fn(32, 32, |x, y| Rgb([x as u8 * 8, y as u8, 200]));
        let pixels = p.pixels(&image).expect("pixels");
        assert_eq!(pixels.len(), 3 * 32 * 32);
        let expect = |v: u8, c: usize| {
            let mean = [0.481_454_66f32, 0.457_827_5, 0.408_210_73][c];
            let std = [0.268_629_54f32, 0.261_302_6, 0.275_777_1][c];
            ((f64::from(v) * 0.003_921_568_627_450_98) as f32 - mean) / std
        };
        // Pixel (x=3, y=5): red 24, green 5, blue 200.
        let at = 5 * 32 + 3;
        assert_eq!(pixels[at], expect(24, 0));
        assert_eq!(pixels[1024 + at], expect(5, 1));
        assert_eq!(pixels[2048 + at], expect(200, 2));
    }

    #[test]
    fn transparent_pixels_are_composited_over_white_as_pillow_rounds_them() {
        assert_eq!(over_white(10, 255), 10);
        assert_eq!(over_white(10, 0), 255);
        // 10·128/255 + 255·127/255 = 132.02: Pillow gives 132.
        assert_eq!(over_white(10, 128), 132);
        let image =
            DynamicImage::ImageRgba8(ImageBuffer::from_pixel(1, 1, Rgba([0, 100, 200, 64])));
        // Pillow: Image.alpha_composite(white, (0, 100, 200, 64)) = (191, 216, 241).
        assert_eq!(to_rgb(&image).get_pixel(0, 0).0, [191, 216, 241]);
    }

    #[test]
    fn a_larger_image_is_resized_and_cropped_to_the_towers_size() {
        let p = processor(clip_config()).expect("processor");
        let image = ImageBuffer::from_fn(64, 48, |x, _| Rgb([x as u8 * 4, 0, 0]));
        let pixels = p.pixels(&image).expect("pixels");
        assert_eq!(pixels.len(), 3 * 32 * 32);
    }

    #[test]
    fn processors_the_tower_cannot_take_are_refused_with_the_reason() {
        let mut config = clip_config();
        config["crop_size"] = json!({"height": 30, "width": 30});
        let err = processor(config).expect_err("crop size");
        assert!(err.contains("30×30") && err.contains("image_size"), "{err}");
        let mut config = clip_config();
        config["resample"] = json!(4);
        assert!(processor(config).expect_err("box").contains("box"));
        let mut config = clip_config();
        config["image_processor_type"] = json!("SiglipImageProcessor");
        assert!(
            processor(config)
                .expect_err("siglip")
                .contains("SiglipImageProcessor")
        );
    }

    #[test]
    fn a_processor_config_that_expands_to_another_count_is_refused() {
        let vl = vision(32);
        assert_eq!(vl.feature_select, FeatureSelect::Patches);
        let p = processor(clip_config()).expect("processor");
        let good = json!({"patch_size": 8, "num_additional_image_tokens": 1,
                          "vision_feature_select_strategy": "default"});
        assert!(
            p.clone()
                .check_processor(Some(&good), Path::new("pc.json"), &vl)
                .is_ok()
        );
        let bad = json!({"patch_size": 8, "vision_feature_select_strategy": "default"});
        let err = p
            .check_processor(Some(&bad), Path::new("pc.json"), &vl)
            .expect_err("15 tokens")
            .to_string();
        assert!(err.contains("15 tokens") && err.contains("16"), "{err}");
    }
}
