//! `--data kind=synthetic_audio`: requests of one synthetic audio clip and
//! a line of text, for audio endpoints (transcriptions, translations) and
//! audio chat models.
//!
//! GuideLLM 0.8.1 has no such kind (it has `synthetic_image` and
//! `synthetic_video`); this one is guidebench's, shaped as
//! [`synthetic_image`](super::synthetic_image) is.
//!
//! Each item is one user message: a WAV clip (PCM, 16-bit, `channels`
//! channels, written by `hound`) as [`MediaSource::Bytes`] of type
//! `audio/wav`, followed by the `prompt` text (`prompt=` empty leaves it
//! out). A clip lasts `seconds`, drawn per request from a normal
//! distribution of `seconds_stdev` clamped to `seconds_min`..`seconds_max`
//! (the spelling of `synthetic_text`'s `prompt_tokens` spread), and holds
//! `round(seconds × sample_rate)` frames: a linear tone sweep (its start
//! and end frequencies drawn per clip) with uniform noise of amplitude
//! `noise` over it. Clip `i` is drawn from stream `i` of the seed, the
//! clip lengths and output lengths from streams of their own, so that the
//! same seed always gives the same bytes and every clip of a benchmark
//! differs from every other.
//!
//! Guarantees, each held by a test in `tests/synthetic_audio.rs`: every
//! clip is a valid WAV of the length, rate and channels asked for
//! (`each_clip_is_a_wav_of_the_length_rate_and_channels_asked_for`); the
//! same seed gives the same bytes and another seed others
//! (`the_same_seed_gives_the_same_clips_and_another_seed_others`); the
//! length spread stays within its bounds and is drawn
//! (`clip_lengths_follow_the_spread_within_its_bounds`); bad options name
//! their key and unknown ones list the valid keys
//! (`a_bad_option_names_its_key_and_an_unknown_one_lists_the_valid_keys`);
//! a session sends each request its own clip, then the text
//! (`a_session_sends_each_request_its_own_clip_then_the_text`).
//! The defaults help prints are the ones applied
//! (`every_synthetic_audio_default_help_prints_is_the_one_parsing_applies`,
//! below).

use std::f64::consts::TAU;
use std::io::Cursor;
use std::sync::Arc;

use rand::RngExt;
use rand_distr::{Distribution, Normal};
use serde::Serialize;
use serde_json::{Map, Value};

use super::synthetic::LengthDistribution;
use super::{DataItem, DataSource, int_option, seed_option, string_option};
use crate::{Error, Result};
use guidebench_core::Error as CoreError;
use guidebench_core::options::{OptionSpec, OptionType};
use guidebench_core::request::{ContentPart, MediaSource};
use guidebench_core::rng::{self, SeededRng};

/// The name of this data kind.
pub(super) const KIND: &str = "synthetic_audio";

/// The MIME type of the clips.
pub const MIME: &str = "audio/wav";

/// The longest clip, in seconds: an hour (115 MB of 16 kHz mono PCM), so
/// that a typo cannot ask for gigabytes.
pub const MAX_SECONDS: f64 = 3600.0;

/// The lowest and highest sample rates accepted, in Hz.
pub const SAMPLE_RATES: (u32, u32) = (1000, 384_000);

/// The most channels a clip may have.
pub const MAX_CHANNELS: u16 = 8;

/// The stream of the seed that clip lengths are drawn from; clips use the
/// streams of their index, so that the two never meet.
const STREAM_SECONDS: u64 = u64::MAX;

/// The stream of the seed that output lengths are drawn from.
const STREAM_LENGTHS: u64 = u64::MAX - 1;

/// The options of `--data kind=synthetic_audio`.
pub const SYNTHETIC_AUDIO_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional("seconds", OptionType::Float, "mean clip length in seconds")
        .default_from::<SyntheticAudioDefaults>(),
    OptionSpec::optional(
        "seconds_stdev",
        OptionType::Float,
        "standard deviation of the clip length in seconds (normal distribution)",
    )
    .default_from::<SyntheticAudioDefaults>(),
    OptionSpec::optional("seconds_min", OptionType::Float, "shortest clip in seconds")
        .default_from::<SyntheticAudioDefaults>(),
    OptionSpec::optional("seconds_max", OptionType::Float, "longest clip in seconds")
        .default_from::<SyntheticAudioDefaults>(),
    OptionSpec::optional(
        "sample_rate",
        OptionType::Int,
        "samples per second per channel, 1000 to 384000",
    )
    .default_from::<SyntheticAudioDefaults>(),
    OptionSpec::optional(
        "channels",
        OptionType::Int,
        "channels of each clip, 1 (mono) to 8",
    )
    .default_from::<SyntheticAudioDefaults>(),
    OptionSpec::optional(
        "noise",
        OptionType::Float,
        "amplitude of the uniform noise over the tone sweep, 0 to 1 (full scale is 1)",
    )
    .default_from::<SyntheticAudioDefaults>(),
    OptionSpec::optional(
        "prompt",
        OptionType::String,
        "the text after the clip (empty: the clip alone)",
    )
    .default_from::<SyntheticAudioDefaults>(),
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
    .default_from::<SyntheticAudioDefaults>(),
    OptionSpec::optional(
        "output_tokens_min",
        OptionType::Int,
        "fewest tokens to generate",
    )
    .default_from::<SyntheticAudioDefaults>(),
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
        "seed of the clips and lengths (default: the run's seed)",
    ),
    super::ON_ERROR,
];

/// The defaults of [`SYNTHETIC_AUDIO_OPTIONS`] as
/// [`SyntheticAudioConfig::from_options`] applies them; keyed by option
/// name. `output_tokens` has none (absent, the run's `sampling.max_tokens`
/// applies), nor have `output_tokens_max` (no bound), `count` (unlimited)
/// and `seed` (the run's).
#[derive(Debug, Serialize)]
struct SyntheticAudioDefaults {
    #[serde(serialize_with = "super::serialize_number")]
    seconds: f64,
    #[serde(serialize_with = "super::serialize_number")]
    seconds_stdev: f64,
    #[serde(serialize_with = "super::serialize_number")]
    seconds_min: f64,
    #[serde(serialize_with = "super::serialize_number")]
    seconds_max: f64,
    sample_rate: u32,
    channels: u16,
    #[serde(serialize_with = "super::serialize_number")]
    noise: f64,
    prompt: String,
    #[serde(serialize_with = "super::serialize_number")]
    output_tokens_stdev: f64,
    output_tokens_min: u32,
}

impl Default for SyntheticAudioDefaults {
    fn default() -> Self {
        SyntheticAudioDefaults {
            seconds: 5.0,
            seconds_stdev: 0.0,
            seconds_min: 0.1,
            seconds_max: MAX_SECONDS,
            sample_rate: 16_000,
            channels: 1,
            noise: 0.05,
            prompt: "Transcribe the audio.".to_owned(),
            output_tokens_stdev: 0.0,
            output_tokens_min: 1,
        }
    }
}

/// Clip lengths: a normal distribution of seconds clamped to `[min, max]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SecondsDistribution {
    /// The mean, in seconds.
    pub mean: f64,
    /// The standard deviation; 0 gives the mean every time.
    pub stdev: f64,
    /// The shortest clip.
    pub min: f64,
    /// The longest clip.
    pub max: f64,
}

impl SecondsDistribution {
    /// Draws one length in seconds.
    pub fn sample<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let value = match Normal::new(self.mean, self.stdev) {
            Ok(normal) if self.stdev > 0.0 => normal.sample(rng),
            _ => self.mean,
        };
        value.clamp(self.min, self.max)
    }
}

/// Settings of a [`SyntheticAudioSource`].
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticAudioConfig {
    /// Clip lengths.
    pub seconds: SecondsDistribution,
    /// Samples per second per channel.
    pub sample_rate: u32,
    /// Channels of each clip.
    pub channels: u16,
    /// Amplitude of the noise, 0 to 1.
    pub noise: f64,
    /// The text after the clip; empty for none.
    pub prompt: String,
    /// Output lengths; `None` leaves the length to the run.
    pub output_tokens: Option<LengthDistribution>,
    /// How many items to yield; unlimited when `None`.
    pub count: Option<u64>,
    /// The seed of the clips and of the lengths.
    pub seed: u64,
}

impl SyntheticAudioConfig {
    /// The settings described by checked options (see
    /// [`SYNTHETIC_AUDIO_OPTIONS`]); `run_seed` where `seed` is absent.
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidOption`] naming the key: a length that is not a
    /// positive number of at most [`MAX_SECONDS`], a spread whose bounds
    /// do not hold its mean, a sample rate, channel count or noise out of
    /// range, or an output-length option without `output_tokens`.
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
        let d = SyntheticAudioDefaults::default();
        let seconds_of = |key: &str, default: f64, least: f64| -> Result<f64> {
            let Some(value) = options.get(key) else {
                return Ok(default);
            };
            match value.as_f64() {
                Some(s) if s.is_finite() && s >= least && s <= MAX_SECONDS => Ok(s),
                _ => Err(invalid(
                    key,
                    format!(
                        "must be a number of seconds {} 0 and at most {MAX_SECONDS}, got {value}",
                        if least > 0.0 { "above" } else { "of at least" }
                    ),
                )),
            }
        };
        // The smallest positive length: one sample at the highest rate.
        let tiny = 1.0 / f64::from(SAMPLE_RATES.1);
        let mean = seconds_of("seconds", d.seconds, tiny)?;
        let seconds = SecondsDistribution {
            mean,
            stdev: seconds_of("seconds_stdev", d.seconds_stdev, 0.0)?,
            // Without seconds_min, a mean below the default minimum is its
            // own minimum.
            min: seconds_of("seconds_min", d.seconds_min.min(mean), tiny)?,
            max: seconds_of("seconds_max", d.seconds_max, tiny)?,
        };
        if seconds.max < seconds.min {
            return Err(invalid(
                "seconds_max",
                format!(
                    "must be at least seconds_min ({}), got {}",
                    seconds.min, seconds.max
                ),
            ));
        }
        if seconds.mean < seconds.min {
            return Err(invalid(
                "seconds_min",
                format!(
                    "must be at most seconds ({}), the mean it bounds, got {}",
                    seconds.mean, seconds.min
                ),
            ));
        }
        if seconds.mean > seconds.max {
            return Err(invalid(
                "seconds_max",
                format!(
                    "must be at least seconds ({}), the mean it bounds, got {}",
                    seconds.mean, seconds.max
                ),
            ));
        }
        let (low, high) = SAMPLE_RATES;
        let sample_rate = int_option(
            context,
            options,
            "sample_rate",
            i64::from(low),
            i64::from(high),
        )?
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(d.sample_rate);
        let channels = int_option(context, options, "channels", 1, i64::from(MAX_CHANNELS))?
            .and_then(|n| u16::try_from(n).ok())
            .unwrap_or(d.channels);
        let noise = match options.get("noise") {
            None => d.noise,
            Some(value) => match value.as_f64() {
                Some(n) if (0.0..=1.0).contains(&n) => n,
                _ => {
                    return Err(invalid(
                        "noise",
                        format!("must be a number from 0 to 1, got {value}"),
                    ));
                }
            },
        };
        let output_tokens = LengthDistribution::optional_output(
            context,
            options,
            d.output_tokens_stdev,
            d.output_tokens_min,
        )?;
        let seed = seed_option(options, run_seed);
        Ok(SyntheticAudioConfig {
            seconds,
            sample_rate,
            channels,
            noise,
            prompt: string_option(options, "prompt").map_or(d.prompt, str::to_owned),
            output_tokens,
            count: int_option(context, options, "count", 0, i64::MAX)?
                .and_then(|n| u64::try_from(n).ok()),
            seed,
        })
    }

    /// How many frames (samples per channel) a clip of `seconds` holds: at
    /// least one.
    pub fn frames(&self, seconds: f64) -> u32 {
        let frames = (seconds * f64::from(self.sample_rate)).round();
        // In 1..=MAX_SECONDS × 384000 (< 2^31) after the clamp: exact.
        frames.clamp(1.0, MAX_SECONDS * f64::from(SAMPLE_RATES.1)) as u32
    }

    /// Clip `index` of `frames` frames, as WAV bytes: always the same bytes
    /// for one seed, index and length.
    ///
    /// # Errors
    ///
    /// [`CoreError::Media`] when the WAV writer fails (not for settings
    /// [`SyntheticAudioConfig::from_options`] accepted).
    pub fn clip(&self, index: u64, frames: u32) -> guidebench_core::Result<Vec<u8>> {
        let fail = |reason: String| CoreError::Media {
            media: format!("synthetic audio clip {index}"),
            reason,
        };
        let mut draws: SeededRng = rng::seeded(self.seed, index);
        let rate = f64::from(self.sample_rate);
        let nyquist = rate / 2.0;
        // A sweep between two tones drawn for this clip, up or down, kept
        // below the Nyquist frequency.
        let start = draws.random_range(100.0..1000.0_f64).min(nyquist * 0.45);
        let end = draws.random_range(1000.0..4000.0_f64).min(nyquist * 0.9);
        let (start, end) = if draws.random_bool(0.5) {
            (start, end)
        } else {
            (end, start)
        };
        let duration = f64::from(frames) / rate;
        let amplitude = 0.6 * (1.0 - self.noise);
        let spec = hound::WavSpec {
            channels: self.channels,
            sample_rate: self.sample_rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let bytes = usize::from(self.channels) * 2 * frames as usize;
        let mut out = Cursor::new(Vec::with_capacity(bytes + 44));
        {
            let mut writer =
                hound::WavWriter::new(&mut out, spec).map_err(|e| fail(e.to_string()))?;
            for frame in 0..frames {
                let t = f64::from(frame) / rate;
                // The phase of a linear chirp: the integral of its
                // frequency, start + (end - start) t / duration.
                let phase = TAU * (start * t + (end - start) * t * t / (2.0 * duration));
                let tone = amplitude * phase.sin();
                for _ in 0..self.channels {
                    let noise = if self.noise > 0.0 {
                        self.noise * draws.random_range(-1.0..=1.0_f64)
                    } else {
                        0.0
                    };
                    // Within -1..=1 by construction: the cast is exact
                    // after rounding and clamping.
                    let sample = ((tone + noise) * f64::from(i16::MAX))
                        .round()
                        .clamp(f64::from(i16::MIN), f64::from(i16::MAX))
                        as i16;
                    writer
                        .write_sample(sample)
                        .map_err(|e| fail(e.to_string()))?;
                }
            }
            writer.finalize().map_err(|e| fail(e.to_string()))?;
        }
        Ok(out.into_inner())
    }
}

/// `--data kind=synthetic_audio`: see the [module docs](self).
#[derive(Debug)]
pub struct SyntheticAudioSource {
    config: Arc<SyntheticAudioConfig>,
    seconds: SeededRng,
    lengths: SeededRng,
    produced: u64,
}

impl SyntheticAudioSource {
    /// A source with `config`, from its first item.
    pub fn new(config: Arc<SyntheticAudioConfig>) -> Self {
        SyntheticAudioSource {
            seconds: rng::seeded(config.seed, STREAM_SECONDS),
            lengths: rng::seeded(config.seed, STREAM_LENGTHS),
            config,
            produced: 0,
        }
    }
}

impl DataSource for SyntheticAudioSource {
    fn next_item(&mut self) -> Result<Option<DataItem>> {
        let config = &self.config;
        if config.count.is_some_and(|count| self.produced >= count) {
            return Ok(None);
        }
        let index = self.produced;
        self.produced += 1;
        let origin = format!("{KIND} item {}", self.produced);
        let frames = config.frames(config.seconds.sample(&mut self.seconds));
        let output_tokens = config.output_tokens.map(|d| d.sample(&mut self.lengths));
        let data = config.clip(index, frames).map_err(|source| Error::Item {
            origin: origin.clone(),
            source,
        })?;
        let clip = ContentPart::Audio {
            source: MediaSource::Bytes {
                mime: MIME.to_owned(),
                data: Arc::from(data),
            },
        };
        Ok(Some(DataItem::media_request(
            vec![clip],
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

    fn config(input: &str) -> Result<SyntheticAudioConfig> {
        let mut options = parse_kind_args(input).expect("parses").options;
        check_options(KIND, &[SYNTHETIC_AUDIO_OPTIONS], &mut options)?;
        SyntheticAudioConfig::from_options(KIND, &options, 7)
    }

    #[test]
    fn every_synthetic_audio_default_help_prints_is_the_one_parsing_applies() {
        let shown = |name: &str| {
            SYNTHETIC_AUDIO_OPTIONS
                .iter()
                .find(|o| o.name == name)
                .and_then(OptionSpec::default_text)
        };
        assert_eq!(shown("seconds").as_deref(), Some("5"));
        assert_eq!(shown("seconds_stdev").as_deref(), Some("0"));
        assert_eq!(shown("seconds_min").as_deref(), Some("0.1"));
        assert_eq!(shown("seconds_max").as_deref(), Some("3600"));
        assert_eq!(shown("sample_rate").as_deref(), Some("16000"));
        assert_eq!(shown("channels").as_deref(), Some("1"));
        assert_eq!(shown("noise").as_deref(), Some("0.05"));
        assert_eq!(shown("prompt").as_deref(), Some("Transcribe the audio."));
        assert_eq!(shown("seed"), None, "the run's seed");

        let c = config("kind=synthetic_audio").expect("config");
        let d = SyntheticAudioDefaults::default();
        assert_eq!(
            c.seconds,
            SecondsDistribution {
                mean: d.seconds,
                stdev: d.seconds_stdev,
                min: d.seconds_min,
                max: d.seconds_max
            }
        );
        assert_eq!(c.sample_rate, d.sample_rate);
        assert_eq!(c.channels, d.channels);
        assert_eq!(c.noise, d.noise);
        assert_eq!(c.prompt, d.prompt);
        assert_eq!(c.output_tokens, None);
        assert_eq!(c.count, None);
        assert_eq!(c.seed, 7, "the run's seed");
    }

    #[test]
    fn a_mean_below_the_default_minimum_is_its_own_minimum() {
        let c = config("kind=synthetic_audio,seconds=0.05").expect("config");
        assert_eq!(c.seconds.min, 0.05);
        assert_eq!(c.frames(c.seconds.mean), 800);
    }
}
