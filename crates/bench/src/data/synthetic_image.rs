//! `--data kind=synthetic_image`: requests of synthetic pictures and a
//! line of text, GuideLLM 0.8.1's kind of the same name.
//!
//! Each item is one user message: `images_per_request` pictures (JPEG or
//! PNG bytes, [`MediaSource::Bytes`]) followed by the `prompt` text, so
//! that a chat template or the plain format writes each image's
//! placeholder before the text, and the OpenAI backend sends each as an
//! `image_url` part holding a base64 `data:` URL, as GuideLLM does.
//! GuideLLM's rows carry the images alone; the text is guidebench's, and
//! `prompt=` (empty) leaves it out.
//!
//! The size is resolved as GuideLLM's `_resolve_dimensions` resolves it
//! (`width`, `height`, a `resolution` preset, an `aspect_ratio`, each side
//! rounded down to an even number). The pictures ([`ImageContent`]) come
//! from the `pixels` module: image `row × images_per_request + i` of the
//! `seed` is drawn from its own stream, so that every image differs from
//! every other and a seed always gives the same bytes. Output lengths are
//! drawn as `synthetic_text` draws them ([`LengthDistribution`]), from the
//! run's seed as GuideLLM draws them from its `random_seed`.
//!
//! Guarantees, each held by a test: the size resolution and its errors
//! (`sizes_resolve_from_presets_and_aspect_ratios_as_guidellm_does`,
//! `a_size_that_cannot_be_resolved_names_the_key`, below); the same seed
//! gives the same bytes and another seed others
//! (`the_same_seed_gives_the_same_images_and_another_seed_others`); images
//! decode to the size and format asked for
//! (`images_decode_to_the_size_and_format_asked_for`); the images come
//! before the text (`two_images_per_request_come_before_the_text_and_templates_place_them_so`;
//! these three in `tests/synthetic_image.rs`).
//!
//! [`ImageContent`]: super::ImageContent

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use super::pixels::{self, Content, Format};
use super::synthetic::LengthDistribution;
use super::{DataItem, DataSource, int_option, seed_option, string_option, u32_option};
use crate::{Error, Result};
use guidebench_core::Error as CoreError;
use guidebench_core::options::{OptionSpec, OptionType};
use guidebench_core::request::{ContentPart, MediaSource};
use guidebench_core::rng::{self, SeededRng};

/// The name of this data kind.
pub(super) const KIND: &str = "synthetic_image";

/// GuideLLM's resolution presets: name, width, height.
pub const RESOLUTIONS: &[(&str, u32, u32)] = &[
    ("240p", 426, 240),
    ("360p", 640, 360),
    ("480p", 854, 480),
    ("540p", 960, 540),
    ("720p", 1280, 720),
    ("1080p", 1920, 1080),
    ("1440p", 2560, 1440),
    ("2160p", 3840, 2160),
    ("4k", 3840, 2160),
];

/// The longest side an image may have: JPEG's limit (PNG is held to it
/// too, so that a typo cannot ask for gigabytes of pixels).
pub const MAX_SIDE: u32 = 65_535;

/// The stream of the run's seed that output lengths are drawn from; images
/// use the streams of their index, so that the two never meet.
const STREAM_LENGTHS: u64 = u64::MAX;

/// The options of `--data kind=synthetic_image`.
pub const SYNTHETIC_IMAGE_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional("width", OptionType::Int, "image width in pixels"),
    OptionSpec::optional("height", OptionType::Int, "image height in pixels"),
    OptionSpec::optional(
        "resolution",
        OptionType::String,
        "a size preset: 240p, 360p, 480p, 540p, 720p, 1080p, 1440p, 2160p or 4k (width and \
         height, when given, win over it)",
    ),
    OptionSpec::optional(
        "aspect_ratio",
        OptionType::String,
        "W:H or W/H: gives the side not given from the one that is (the height of a resolution \
         preset included)",
    ),
    OptionSpec::optional(
        "format",
        OptionType::Choice(Format::CHOICES),
        "how the images are encoded",
    )
    .default_from::<SyntheticImageDefaults>(),
    OptionSpec::optional(
        "jpeg_quality",
        OptionType::Int,
        "JPEG quality, 1 to 100 (format=jpeg only)",
    )
    .default_from::<SyntheticImageDefaults>(),
    OptionSpec::optional(
        "content",
        OptionType::Choice(Content::CHOICES),
        "what the images show: a distorted two-colour gradient, random noise, one colour, or a \
         checkerboard",
    )
    .default_from::<SyntheticImageDefaults>(),
    OptionSpec::optional(
        "images_per_request",
        OptionType::Int,
        "images in each request, before the prompt",
    )
    .default_from::<SyntheticImageDefaults>(),
    OptionSpec::optional(
        "prompt",
        OptionType::String,
        "the text after the images (empty: images only, as GuideLLM's rows)",
    )
    .default_from::<SyntheticImageDefaults>(),
    OptionSpec::optional(
        "output_tokens",
        OptionType::Int,
        "mean number of tokens to generate (absent: up to sampling.max_tokens, stopping at end \
         of sequence)",
    ),
    OptionSpec::optional(
        "output_tokens_stdev",
        OptionType::Float,
        "standard deviation of the output length (normal distribution)",
    )
    .default_from::<SyntheticImageDefaults>(),
    OptionSpec::optional(
        "output_tokens_min",
        OptionType::Int,
        "fewest tokens to generate",
    )
    .default_from::<SyntheticImageDefaults>(),
    OptionSpec::optional(
        "output_tokens_max",
        OptionType::Int,
        "most tokens to generate",
    ),
    OptionSpec::optional(
        "count",
        OptionType::Int,
        "how many requests to generate (unlimited when absent)",
    ),
    OptionSpec::optional(
        "seed",
        OptionType::Int,
        "seed of the images (output lengths follow the run's seed, as in GuideLLM)",
    )
    .default_from::<SyntheticImageDefaults>(),
    super::ON_ERROR,
];

/// The defaults of [`SYNTHETIC_IMAGE_OPTIONS`] as
/// [`SyntheticImageConfig::from_options`] applies them; keyed by option
/// name. The size has none (it must be given), nor have `output_tokens`
/// (absent, the run's `sampling.max_tokens` applies), `output_tokens_max`
/// (no bound) and `count` (unlimited).
#[derive(Debug, Serialize)]
struct SyntheticImageDefaults {
    format: Format,
    jpeg_quality: u8,
    content: Content,
    images_per_request: u32,
    prompt: String,
    #[serde(serialize_with = "super::serialize_number")]
    output_tokens_stdev: f64,
    output_tokens_min: u32,
    seed: u64,
}

impl Default for SyntheticImageDefaults {
    fn default() -> Self {
        SyntheticImageDefaults {
            format: Format::Jpeg,
            jpeg_quality: 85,
            content: Content::Gradient,
            images_per_request: 1,
            prompt: "Describe the image.".to_owned(),
            output_tokens_stdev: 0.0,
            output_tokens_min: 1,
            seed: 42,
        }
    }
}

/// Settings of a [`SyntheticImageSource`].
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticImageConfig {
    /// Image width in pixels (even).
    pub width: u32,
    /// Image height in pixels (even).
    pub height: u32,
    /// How the images are encoded.
    pub format: Format,
    /// JPEG quality, 1 to 100.
    pub jpeg_quality: u8,
    /// What the images show.
    pub content: Content,
    /// Images in each request.
    pub images_per_request: u32,
    /// The text after the images; empty for none.
    pub prompt: String,
    /// Output lengths; `None` leaves the length to the run.
    pub output_tokens: Option<LengthDistribution>,
    /// How many items to yield; unlimited when `None`.
    pub count: Option<u64>,
    /// The seed of the images.
    pub seed: u64,
    /// The seed of the output lengths (the run's).
    pub lengths_seed: u64,
}

impl SyntheticImageConfig {
    /// The settings described by checked options (see
    /// [`SYNTHETIC_IMAGE_OPTIONS`]); `run_seed` seeds the output lengths.
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidOption`] naming the key: a size that cannot be
    /// resolved (none given, an unknown preset, a malformed aspect ratio, a
    /// side of 0 or above [`MAX_SIDE`]), a value out of its range, or an
    /// output-length option without `output_tokens`.
    pub fn from_options(
        context: &str,
        options: &Map<String, Value>,
        run_seed: u64,
    ) -> Result<Self> {
        let invalid = |key: &str, reason: String| {
            Error::from(CoreError::InvalidOption {
                context: context.to_owned(),
                key: key.to_owned(),
                reason,
            })
        };
        let d = SyntheticImageDefaults::default();
        let (width, height) = resolve_size(
            u32_option(context, options, "width", 1)?,
            u32_option(context, options, "height", 1)?,
            string_option(options, "resolution"),
            string_option(options, "aspect_ratio"),
        )
        .map_err(|fault| invalid(fault.key, fault.reason))?;

        let output_tokens = LengthDistribution::optional_output(
            context,
            options,
            d.output_tokens_stdev,
            d.output_tokens_min,
        )?;
        let seed = seed_option(options, d.seed);
        Ok(SyntheticImageConfig {
            width,
            height,
            format: string_option(options, "format")
                .and_then(Format::parse)
                .unwrap_or(d.format),
            jpeg_quality: int_option(context, options, "jpeg_quality", 1, 100)?
                .and_then(|q| u8::try_from(q).ok())
                .unwrap_or(d.jpeg_quality),
            content: string_option(options, "content")
                .and_then(Content::parse)
                .unwrap_or(d.content),
            images_per_request: u32_option(context, options, "images_per_request", 1)?
                .unwrap_or(d.images_per_request),
            prompt: string_option(options, "prompt").map_or(d.prompt, str::to_owned),
            output_tokens,
            count: int_option(context, options, "count", 0, i64::MAX)?
                .and_then(|n| u64::try_from(n).ok()),
            seed,
            lengths_seed: run_seed,
        })
    }

    /// Image `index` (GuideLLM's `row_index * images_per_request +
    /// img_idx`), encoded: always the same bytes for one seed and index.
    ///
    /// # Errors
    ///
    /// [`CoreError::Media`] when the encoder refuses the picture (not for
    /// a size [`SyntheticImageConfig::from_options`] accepted).
    pub fn image(&self, index: u64) -> guidebench_core::Result<Vec<u8>> {
        let mut draws: SeededRng = rng::seeded(self.seed, index);
        let pixels = pixels::synthesize(self.width, self.height, self.content, &mut draws);
        pixels::encode(
            &pixels,
            self.width,
            self.height,
            self.format,
            self.jpeg_quality,
        )
        .map_err(|e| CoreError::Media {
            media: format!("synthetic image {index}"),
            reason: e.to_string(),
        })
    }
}

/// Why the options give no image size: the key at fault and what is wrong.
#[derive(Debug)]
struct SizeFault {
    key: &'static str,
    reason: String,
}

/// `W:H` or `W/H` as a ratio, as GuideLLM's `parse_aspect_ratio` reads it
/// (split at `:` if there is one, else at `/`); `None` unless both are
/// numbers and the ratio is finite and positive.
fn parse_aspect_ratio(text: &str) -> Option<f64> {
    let separator = if text.contains(':') { ':' } else { '/' };
    let (w, h) = text.split_once(separator)?;
    let (w, h) = (w.trim().parse::<f64>().ok()?, h.trim().parse::<f64>().ok()?);
    let ratio = w / h;
    (ratio.is_finite() && ratio > 0.0).then_some(ratio)
}

/// The image size from the options, as GuideLLM's `_resolve_dimensions`
/// gives it: a `resolution` preset supplies the height and the width (the
/// width from the height and `aspect_ratio` when one is given) where
/// `width` and `height` do not; without a preset, `aspect_ratio` gives the
/// missing side from the other (rounded half to even, as Python's
/// `round`). Both sides are then rounded down to even numbers. An aspect
/// ratio is checked even where it is not needed (GuideLLM reads it only
/// then).
fn resolve_size(
    width: Option<u32>,
    height: Option<u32>,
    resolution: Option<&str>,
    aspect_ratio: Option<&str>,
) -> std::result::Result<(u32, u32), SizeFault> {
    let ratio = match aspect_ratio {
        None => None,
        Some(text) => Some(parse_aspect_ratio(text).ok_or_else(|| SizeFault {
            key: "aspect_ratio",
            reason: format!("expected 'W:H' or 'W/H' with positive numbers, got '{text}'"),
        })?),
    };
    let (mut w, mut h) = (width.map(f64::from), height.map(f64::from));
    if let Some(name) = resolution {
        let lower = name.to_lowercase();
        let Some(&(_, preset_w, preset_h)) = RESOLUTIONS.iter().find(|(n, _, _)| *n == lower)
        else {
            let known: Vec<&str> = RESOLUTIONS.iter().map(|(n, _, _)| *n).collect();
            return Err(SizeFault {
                key: "resolution",
                reason: format!("unknown resolution '{name}'; known: {}", known.join(", ")),
            });
        };
        let height = *h.get_or_insert(f64::from(preset_h));
        if w.is_none() {
            w = Some(ratio.map_or(f64::from(preset_w), |r| (height * r).round_ties_even()));
        }
    } else if let Some(r) = ratio {
        match (w, h) {
            (None, Some(height)) => w = Some((height * r).round_ties_even()),
            (Some(width), None) => h = Some((width / r).round_ties_even()),
            _ => {}
        }
    }
    let (Some(w), Some(h)) = (w, h) else {
        return Err(SizeFault {
            key: if w.is_none() { "width" } else { "height" },
            reason: "is not given: synthetic_image requires width and height, either explicitly \
                     or via resolution/aspect_ratio"
                .to_owned(),
        });
    };
    let (w, h) = (w - w % 2.0, h - h % 2.0);
    for (key, side) in [("width", w), ("height", h)] {
        if side <= 0.0 {
            return Err(SizeFault {
                key,
                reason: format!(
                    "the resolved image size must be positive, got {w}x{h} (each side is \
                     rounded down to an even number)"
                ),
            });
        }
        if side > f64::from(MAX_SIDE) {
            return Err(SizeFault {
                key,
                reason: format!(
                    "the resolved image size {w}x{h} is too large: each side is at most \
                     {MAX_SIDE} pixels"
                ),
            });
        }
    }
    // Whole numbers in 2..=MAX_SIDE: the casts are exact.
    Ok((w as u32, h as u32))
}

/// `--data kind=synthetic_image`: see the [module docs](self).
#[derive(Debug)]
pub struct SyntheticImageSource {
    config: Arc<SyntheticImageConfig>,
    lengths: SeededRng,
    produced: u64,
}

impl SyntheticImageSource {
    /// A source with `config`, from its first item.
    pub fn new(config: Arc<SyntheticImageConfig>) -> Self {
        SyntheticImageSource {
            lengths: rng::seeded(config.lengths_seed, STREAM_LENGTHS),
            config,
            produced: 0,
        }
    }
}

impl DataSource for SyntheticImageSource {
    fn next_item(&mut self) -> Result<Option<DataItem>> {
        let config = &self.config;
        if config.count.is_some_and(|count| self.produced >= count) {
            return Ok(None);
        }
        let row = self.produced;
        self.produced += 1;
        let origin = format!("{KIND} item {}", self.produced);
        let output_tokens = config.output_tokens.map(|d| d.sample(&mut self.lengths));
        let per_request = u64::from(config.images_per_request);
        let mut content = Vec::with_capacity(config.images_per_request as usize + 1);
        for i in 0..per_request {
            let index = row.wrapping_mul(per_request).wrapping_add(i);
            let data = config.image(index).map_err(|source| Error::Item {
                origin: origin.clone(),
                source,
            })?;
            content.push(ContentPart::Image {
                source: MediaSource::Bytes {
                    mime: config.format.mime().to_owned(),
                    data: Arc::from(data),
                },
            });
        }
        Ok(Some(DataItem::media_request(
            content,
            &config.prompt,
            output_tokens,
            origin,
        )))
    }

    fn len_hint(&self) -> Option<usize> {
        self.config
            .count
            .map(|count| usize::try_from(count.saturating_sub(self.produced)).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::options::{check_options, parse_kind_args};

    /// The settings of a `--data` argument of this kind, checked.
    fn config(input: &str) -> Result<SyntheticImageConfig> {
        let mut options = parse_kind_args(input).expect("parses").options;
        check_options(KIND, &[SYNTHETIC_IMAGE_OPTIONS], &mut options)?;
        SyntheticImageConfig::from_options(KIND, &options, 7)
    }

    fn size(options: &str) -> (u32, u32) {
        let c =
            config(&format!("kind={KIND},{options}")).unwrap_or_else(|e| panic!("{options}: {e}"));
        (c.width, c.height)
    }

    /// The key and message of the error `options` give.
    fn fault(options: &str) -> (String, String) {
        match config(&format!("kind={KIND},{options}")) {
            Err(Error::Core(ref e @ CoreError::InvalidOption { ref key, .. })) => {
                (key.clone(), e.to_string())
            }
            Err(other) => panic!("{options}: {other}"),
            Ok(c) => panic!("{options} should fail, gave {}x{}", c.width, c.height),
        }
    }

    #[test]
    fn every_synthetic_image_default_help_prints_is_the_one_parsing_applies() {
        let shown = |name: &str| {
            SYNTHETIC_IMAGE_OPTIONS
                .iter()
                .find(|o| o.name == name)
                .and_then(OptionSpec::default_text)
        };
        // That every spec's default resolves is the CLI's test over every
        // option list; here, the values.
        assert_eq!(shown("format").as_deref(), Some("jpeg"));
        assert_eq!(shown("jpeg_quality").as_deref(), Some("85"));
        assert_eq!(shown("content").as_deref(), Some("gradient"));
        assert_eq!(shown("images_per_request").as_deref(), Some("1"));
        assert_eq!(shown("prompt").as_deref(), Some("Describe the image."));
        assert_eq!(shown("seed").as_deref(), Some("42"));
        assert_eq!(shown("output_tokens").as_deref(), None);

        // Only a size: every other value is the struct's.
        let c = config("kind=synthetic_image,width=64,height=32").expect("config");
        let d = SyntheticImageDefaults::default();
        assert_eq!(c.format, d.format);
        assert_eq!(c.jpeg_quality, d.jpeg_quality);
        assert_eq!(c.content, d.content);
        assert_eq!(c.images_per_request, d.images_per_request);
        assert_eq!(c.prompt, d.prompt);
        assert_eq!(c.seed, d.seed);
        assert_eq!(c.output_tokens, None);
        assert_eq!(c.count, None);
        assert_eq!(c.lengths_seed, 7, "output lengths follow the run's seed");
        let c = config("kind=synthetic_image,width=64,height=32,output_tokens=9").expect("config");
        let lengths = c.output_tokens.expect("output lengths");
        assert_eq!(
            (lengths.mean, lengths.stdev, lengths.min, lengths.max),
            (9.0, d.output_tokens_stdev, d.output_tokens_min, u32::MAX)
        );
    }

    #[test]
    fn sizes_resolve_from_presets_and_aspect_ratios_as_guidellm_does() {
        for (options, want) in [
            ("width=640,height=480", (640, 480)),
            ("resolution=720p", (1280, 720)),
            ("resolution=1080P", (1920, 1080)),
            ("resolution=4k", (3840, 2160)),
            ("resolution=2160p", (3840, 2160)),
            // 240p is 426 wide, already even.
            ("resolution=240p", (426, 240)),
            // The preset's height with the ratio's width.
            ("resolution=720p,aspect_ratio=4:3", (960, 720)),
            ("resolution=480p,aspect_ratio=1/1", (480, 480)),
            // Given sides win over the preset's; the other stays the preset's.
            ("resolution=720p,height=600", (1280, 600)),
            ("resolution=720p,width=1000", (1000, 720)),
            ("resolution=720p,height=601,aspect_ratio=16:9", (1068, 600)),
            // Without a preset, the ratio gives the missing side.
            ("height=720,aspect_ratio=16:9", (1280, 720)),
            ("width=1000,aspect_ratio=16/9", (1000, 562)),
            // Given both, the ratio is not used (as in GuideLLM).
            ("width=300,height=200,aspect_ratio=16:9", (300, 200)),
            // Odd sides are rounded down to even ones.
            ("width=641,height=481", (640, 480)),
            // 101 × 1.5 = 151.5: half to even gives 152 (Python's round).
            ("height=101,aspect_ratio=3:2", (152, 100)),
            // 150.5 rounds to 150 either way once made even.
            ("height=43,aspect_ratio=3.5:1", (150, 42)),
            ("width=2,height=2", (2, 2)),
        ] {
            assert_eq!(size(options), want, "{options}");
        }
    }

    #[test]
    fn a_size_that_cannot_be_resolved_names_the_key() {
        let (key, message) = fault("resolution=8k");
        assert_eq!(key, "resolution");
        assert!(message.contains("unknown resolution '8k'"), "{message}");
        for preset in ["240p", "720p", "1080p", "2160p", "4k"] {
            assert!(message.contains(preset), "{message}");
        }

        for (options, missing) in [
            ("format=png", "width"),
            ("width=640", "height"),
            ("height=480", "width"),
            ("aspect_ratio=16:9", "width"),
        ] {
            let (key, message) = fault(options);
            assert_eq!(key, missing, "{options}");
            assert!(
                message.contains("requires width and height")
                    && message.contains("resolution/aspect_ratio"),
                "{message}"
            );
        }

        for bad in [
            "16x9", "16:", ":9", "16:0", "0:9", "a/b", "16:9:1", "-16:9", "inf:1",
        ] {
            let (key, message) = fault(&format!("height=720,aspect_ratio={bad}"));
            assert_eq!(key, "aspect_ratio", "{bad}");
            assert!(message.contains("'W:H' or 'W/H'"), "{message}");
        }

        // A side rounded down to nothing, or one past JPEG's limit.
        let (key, message) = fault("width=1,height=8");
        assert_eq!(key, "width");
        assert!(message.contains("must be positive, got 0x8"), "{message}");
        let (key, _) = fault("width=8,height=1");
        assert_eq!(key, "height");
        let (key, message) = fault("height=40000,aspect_ratio=2:1");
        assert_eq!(key, "width");
        assert!(message.contains("at most 65535"), "{message}");
        let (key, _) = fault("width=0,height=8");
        assert_eq!(key, "width");
    }
}
