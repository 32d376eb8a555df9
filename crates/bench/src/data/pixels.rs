//! Synthetic pictures and their encoding, for `--data kind=synthetic_image`.
//!
//! The four kinds of picture are GuideLLM 0.8.1's (`utils/vision.py`,
//! `synthesize_image`), drawn in the same order from a seeded generator:
//!
//! * `gradient`: a linear blend between two random colours along a random
//!   direction, its sample points displaced by two smooth random flow
//!   fields (16×16 values each, scaled up bicubically as Pillow does, by up
//!   to 80 pixels), so that it compresses like a photograph and differs
//!   from one image to the next;
//! * `noise`: every byte random (the hardest to compress);
//! * `solid`: one random colour;
//! * `checkerboard`: two random colours in square tiles of a random side
//!   of 8 to 32 pixels.
//!
//! The generator is guidebench's ([`guidebench_core::rng`]), not NumPy's,
//! so the pixels are not byte-equal to GuideLLM's; the same seed and index
//! always give the same pixels and the same encoded bytes. Pictures are
//! encoded with the `image` crate as JPEG (at a quality of 1 to 100) or
//! PNG (zlib's default level, as Pillow's level 6).

use std::f32::consts::TAU;

use guidebench_core::rng::SeededRng;
use image::ImageEncoder;
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use rand::{Rng, RngExt};
use serde::Serialize;

/// What a synthetic picture shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Content {
    /// A smooth, distorted two-colour gradient.
    #[default]
    Gradient,
    /// Random bytes.
    Noise,
    /// One colour.
    Solid,
    /// Two colours in square tiles.
    Checkerboard,
}

impl Content {
    /// The option's words, in the order of the variants.
    pub const CHOICES: &'static [&'static str] = &["gradient", "noise", "solid", "checkerboard"];

    /// The content a word names.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "gradient" => Some(Content::Gradient),
            "noise" => Some(Content::Noise),
            "solid" => Some(Content::Solid),
            "checkerboard" => Some(Content::Checkerboard),
            _ => None,
        }
    }
}

/// How a synthetic picture is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// JPEG, at the configured quality.
    #[default]
    Jpeg,
    /// PNG.
    Png,
}

impl Format {
    /// The option's words, in the order of the variants.
    pub const CHOICES: &'static [&'static str] = &["jpeg", "png"];

    /// The format a word names.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "jpeg" => Some(Format::Jpeg),
            "png" => Some(Format::Png),
            _ => None,
        }
    }

    /// The MIME type of its bytes.
    pub fn mime(self) -> &'static str {
        match self {
            Format::Jpeg => "image/jpeg",
            Format::Png => "image/png",
        }
    }
}

/// The side of each random flow field of a gradient, before scaling.
const FLOW_SIDE: usize = 16;
/// How far, in pixels, the flow fields move a gradient's sample points.
const FLOW_PIXELS: f32 = 80.0;

/// A `width` × `height` RGB picture (row-major, three bytes a pixel) of
/// `content`, drawn from `rng`.
pub fn synthesize(width: u32, height: u32, content: Content, rng: &mut SeededRng) -> Vec<u8> {
    let (w, h) = (width as usize, height as usize);
    match content {
        Content::Gradient => gradient(w, h, rng),
        Content::Noise => {
            let mut pixels = vec![0u8; w * h * 3];
            rng.fill_bytes(&mut pixels);
            pixels
        }
        Content::Solid => {
            let color = random_color(rng);
            color.repeat(w * h)
        }
        Content::Checkerboard => {
            let a = random_color(rng);
            let b = random_color(rng);
            let tile = rng.random_range(8..=32usize);
            let mut pixels = Vec::with_capacity(w * h * 3);
            for y in 0..h {
                for x in 0..w {
                    let odd = ((y / tile) % 2) ^ ((x / tile) % 2) == 1;
                    pixels.extend_from_slice(if odd { &b } else { &a });
                }
            }
            pixels
        }
    }
}

/// A random colour.
fn random_color(rng: &mut SeededRng) -> [u8; 3] {
    [rng.random(), rng.random(), rng.random()]
}

/// GuideLLM's gradient: a blend from one random colour to another along a
/// random direction, sampled at points moved by two smooth flow fields.
fn gradient(w: usize, h: usize, rng: &mut SeededRng) -> Vec<u8> {
    let a = random_color(rng).map(f32::from);
    let b = random_color(rng).map(f32::from);
    let angle = rng.random_range(0.0..TAU);
    let mut flow = || {
        (0..FLOW_SIDE * FLOW_SIDE)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect::<Vec<_>>()
    };
    let (flow_x, flow_y) = (flow(), flow());
    let dx = resize_bicubic(&flow_x, FLOW_SIDE, FLOW_SIDE, w, h);
    let dy = resize_bicubic(&flow_y, FLOW_SIDE, FLOW_SIDE, w, h);

    let (cos, sin) = (angle.cos(), angle.sin());
    let (max_x, max_y) = (w.saturating_sub(1) as f32, h.saturating_sub(1) as f32);
    let mut projection = Vec::with_capacity(w * h);
    let (mut low, mut high) = (f32::INFINITY, f32::NEG_INFINITY);
    for y in 0..h {
        for x in 0..w {
            let i = y * w + x;
            let sx = (x as f32 + dx[i] * FLOW_PIXELS).clamp(0.0, max_x);
            let sy = (y as f32 + dy[i] * FLOW_PIXELS).clamp(0.0, max_y);
            let xs = sx / max_x.max(1.0) * 2.0 - 1.0;
            let ys = sy / max_y.max(1.0) * 2.0 - 1.0;
            let p = xs * cos + ys * sin;
            low = low.min(p);
            high = high.max(p);
            projection.push(p);
        }
    }
    let span = (high - low).max(1e-6);
    let mut pixels = Vec::with_capacity(w * h * 3);
    for p in projection {
        let t = (p - low) / span;
        for c in 0..3 {
            // Truncated as NumPy's `astype(uint8)` does, after the clip.
            pixels.push((a[c] + t * (b[c] - a[c])).clamp(0.0, 255.0) as u8);
        }
    }
    pixels
}

/// Pillow's bicubic kernel (`a = -0.5`).
fn bicubic(x: f64) -> f64 {
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

/// The taps of a resampling from `input` to `output` samples, as Pillow
/// computes them (`precompute_coeffs`): for each output sample, the first
/// input sample it reads and the normalised weights.
fn taps(input: usize, output: usize) -> Vec<(usize, Vec<f64>)> {
    const SUPPORT: f64 = 2.0;
    let scale = input as f64 / output as f64;
    let filter_scale = scale.max(1.0);
    let support = SUPPORT * filter_scale;
    (0..output)
        .map(|out| {
            let center = (out as f64 + 0.5) * scale;
            // Truncation toward zero, as Pillow's `(int)` casts.
            let first = ((center - support + 0.5) as i64).max(0) as usize;
            let last = ((center + support + 0.5) as i64).clamp(0, input as i64) as usize;
            let mut weights: Vec<f64> = (first..last)
                .map(|i| bicubic((i as f64 - center + 0.5) / filter_scale))
                .collect();
            let sum: f64 = weights.iter().sum();
            if sum != 0.0 {
                for weight in &mut weights {
                    *weight /= sum;
                }
            }
            (first, weights)
        })
        .collect()
}

/// A `from_w` × `from_h` field of floats resized to `to_w` × `to_h` with
/// Pillow's bicubic filter (horizontal pass, then vertical).
fn resize_bicubic(
    field: &[f32],
    from_w: usize,
    from_h: usize,
    to_w: usize,
    to_h: usize,
) -> Vec<f32> {
    let across = taps(from_w, to_w);
    let mut wide = vec![0f32; to_w * from_h];
    for y in 0..from_h {
        let row = &field[y * from_w..(y + 1) * from_w];
        for (x, (first, weights)) in across.iter().enumerate() {
            let sum: f64 = weights
                .iter()
                .zip(&row[*first..])
                .map(|(w, v)| w * f64::from(*v))
                .sum();
            wide[y * to_w + x] = sum as f32;
        }
    }
    let down = taps(from_h, to_h);
    let mut out = vec![0f32; to_w * to_h];
    for (y, (first, weights)) in down.iter().enumerate() {
        let line = &mut out[y * to_w..(y + 1) * to_w];
        for (k, weight) in weights.iter().enumerate() {
            let src = &wide[(first + k) * to_w..(first + k + 1) * to_w];
            for (o, v) in line.iter_mut().zip(src) {
                *o += (weight * f64::from(*v)) as f32;
            }
        }
    }
    out
}

/// `pixels` (RGB, `width` × `height`) encoded as `format`; `jpeg_quality`
/// (1 to 100) applies to JPEG only.
///
/// # Errors
///
/// The encoder's, for a size the format cannot hold.
pub fn encode(
    pixels: &[u8],
    width: u32,
    height: u32,
    format: Format,
    jpeg_quality: u8,
) -> image::ImageResult<Vec<u8>> {
    let mut out = Vec::new();
    match format {
        Format::Jpeg => JpegEncoder::new_with_quality(&mut out, jpeg_quality).write_image(
            pixels,
            width,
            height,
            image::ExtendedColorType::Rgb8,
        )?,
        Format::Png => {
            PngEncoder::new_with_quality(&mut out, CompressionType::Default, FilterType::Adaptive)
                .write_image(pixels, width, height, image::ExtendedColorType::Rgb8)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::rng;

    #[test]
    fn bicubic_taps_sum_to_one_and_a_constant_field_stays_constant() {
        for (from, to) in [(16, 64), (16, 7), (16, 16), (16, 1)] {
            for (_, weights) in taps(from, to) {
                let sum: f64 = weights.iter().sum();
                assert!((sum - 1.0).abs() < 1e-9, "{from}->{to}: {sum}");
            }
        }
        let field = vec![0.25f32; FLOW_SIDE * FLOW_SIDE];
        let resized = resize_bicubic(&field, FLOW_SIDE, FLOW_SIDE, 40, 30);
        assert_eq!(resized.len(), 40 * 30);
        assert!(resized.iter().all(|v| (v - 0.25).abs() < 1e-5));
    }

    #[test]
    fn every_content_fills_the_picture_and_the_same_generator_draws_it_again() {
        for content in [
            Content::Gradient,
            Content::Noise,
            Content::Solid,
            Content::Checkerboard,
        ] {
            let a = synthesize(33, 20, content, &mut rng::seeded(5, 1));
            let b = synthesize(33, 20, content, &mut rng::seeded(5, 1));
            assert_eq!(a.len(), 33 * 20 * 3, "{content:?}");
            assert_eq!(a, b, "{content:?}");
        }
    }

    #[test]
    fn a_solid_picture_has_one_colour_and_a_checkerboard_two() {
        let colours = |pixels: &[u8]| {
            let mut seen: Vec<&[u8]> = pixels.chunks(3).collect();
            seen.sort_unstable();
            seen.dedup();
            seen.len()
        };
        let solid = synthesize(40, 40, Content::Solid, &mut rng::seeded(1, 0));
        assert_eq!(colours(&solid), 1);
        // 80 pixels hold at least two tiles (of at most 32) across.
        let board = synthesize(80, 80, Content::Checkerboard, &mut rng::seeded(1, 0));
        assert_eq!(colours(&board), 2);
    }

    #[test]
    fn a_gradient_spans_from_one_colour_to_the_other() {
        let mut generator = rng::seeded(3, 0);
        let pixels = synthesize(64, 48, Content::Gradient, &mut generator);
        let mut again = rng::seeded(3, 0);
        let a = random_color(&mut again);
        let b = random_color(&mut again);
        // Each channel runs over its two colours' range, end to end.
        for c in 0..3 {
            let channel: Vec<u8> = pixels.iter().skip(c).step_by(3).copied().collect();
            let (low, high) = (a[c].min(b[c]), a[c].max(b[c]));
            let (min, max) = (
                channel.iter().min().copied().unwrap_or_default(),
                channel.iter().max().copied().unwrap_or_default(),
            );
            assert!(min >= low && max <= high, "channel {c}: {min}..{max}");
            assert!(
                min <= low.saturating_add(1) && max + 1 >= high,
                "channel {c}"
            );
        }
    }
}
