//! Images and audio clips as a request carries them ([`MediaSource`]),
//! how their bytes are read in process ([`read_media`]), what a
//! request's images cost ([`ImageStats`]), how long an audio clip is by
//! its own file ([`probe_audio`]) and what an audio request sent
//! ([`AudioStats`]). Below both the request model
//! ([`crate::request`]) and the image processors ([`crate::vision`]),
//! which re-export these items.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Where the bytes of an image or an audio clip come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaSource {
    /// A local file.
    Path(PathBuf),
    /// A URL (`https://…` or a `data:` URL).
    Url(String),
    /// Raw bytes with their MIME type.
    Bytes {
        /// The MIME type, e.g. `image/png`.
        mime: String,
        /// The encoded bytes.
        #[serde(skip)]
        data: Arc<[u8]>,
    },
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

/// What a request's audio input was, for an audio endpoint
/// (transcriptions, translations): the clip's length as its own file
/// states it, its size, and the prompt tokens the server charged for it.
/// GuideLLM's names for the same figures are `audio_seconds`,
/// `audio_samples`, `audio_bytes` and `audio_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AudioStats {
    /// Seconds of audio sent, from the file's own header or frames;
    /// `None` where the format gives no length without decoding it all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Samples per channel sent, where the file states them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// Bytes of the uploaded file.
    pub bytes: u64,
    /// Prompt tokens the server charged for the audio (its answer's
    /// `usage.prompt_tokens`), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u32>,
}

/// How long an audio clip is, as its own file states it: read by
/// [`probe_audio`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AudioProbe {
    /// Its length in seconds (`samples / sample_rate`).
    pub seconds: f64,
    /// Samples per channel.
    pub samples: u64,
    /// Samples per second per channel.
    pub sample_rate: u32,
    /// Channels, where the file says (an MP3 or Ogg stream may not until
    /// decoded).
    pub channels: Option<u16>,
}

/// The length of the audio clip `bytes` (WAV, FLAC, MP3 or Ogg), from its
/// header where it states the length (a WAV data chunk, FLAC's stream
/// info, an MP3 Xing/LAME tag, an Ogg stream's last granule position),
/// else by walking its frames without decoding them (an MP3 without a
/// tag). An MP3's encoder delay and padding are left out where its LAME
/// tag states them, so the samples are those the encoder was given.
///
/// `hint` is the clip's MIME type (`audio/wav`) or file name
/// (`clip.flac`), used as a first guess at the format; the bytes decide.
/// `None` for bytes that are not a clip of these formats, or one that
/// states no sample rate.
pub fn probe_audio(bytes: &[u8], hint: Option<&str>) -> Option<AudioProbe> {
    use symphonia::core::formats::FormatOptions;
    use symphonia::core::io::MediaSourceStream;
    use symphonia::core::meta::MetadataOptions;
    use symphonia::core::probe::Hint;

    let mut format_hint = Hint::new();
    if let Some(hint) = hint {
        let hint = hint.trim().to_ascii_lowercase();
        if hint.contains('/') && !hint.contains('.') {
            format_hint.mime_type(hint.split(';').next().unwrap_or(&hint).trim());
        } else if let Some((_, extension)) = hint.rsplit_once('.') {
            format_hint.with_extension(extension);
        }
    }
    let source = std::io::Cursor::new(bytes.to_vec());
    let stream = MediaSourceStream::new(Box::new(source), Default::default());
    let options = FormatOptions {
        enable_gapless: true,
        ..FormatOptions::default()
    };
    let probed = symphonia::default::get_probe()
        .format(&format_hint, stream, &options, &MetadataOptions::default())
        .ok()?;
    let mut reader = probed.format;
    let track = reader.default_track()?;
    let track_id = track.id;
    let params = track.codec_params.clone();
    let sample_rate = params.sample_rate.filter(|rate| *rate > 0)?;
    let samples = match params.n_frames {
        Some(frames) => frames,
        // No length in the header: the frames' own durations, summed
        // (less the padding and delay the reader trims), without decoding.
        None => {
            let mut frames = 0u64;
            while let Ok(packet) = reader.next_packet() {
                if packet.track_id() == track_id {
                    let trimmed = u64::from(packet.trim_start) + u64::from(packet.trim_end);
                    frames += packet.dur.saturating_sub(trimmed);
                }
            }
            frames
        }
    };
    // Cast: a sample count below 2^53 is exact in an f64.
    let seconds = samples as f64 / f64::from(sample_rate);
    Some(AudioProbe {
        seconds,
        samples,
        sample_rate,
        channels: params.channels.and_then(|c| u16::try_from(c.count()).ok()),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A 16-bit PCM WAV file of `samples` samples per channel, written
    /// by hand (the real encoders' files are checked in the openai
    /// backend's tests, where the fixtures live).
    fn wav(samples: u32, rate: u32, channels: u16) -> Vec<u8> {
        let data = samples * u32::from(channels) * 2;
        let mut out = Vec::new();
        out.extend_from_slice(b"RIFF");
        out.extend_from_slice(&(36 + data).to_le_bytes());
        out.extend_from_slice(b"WAVEfmt ");
        out.extend_from_slice(&16u32.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&channels.to_le_bytes());
        out.extend_from_slice(&rate.to_le_bytes());
        out.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
        out.extend_from_slice(&(channels * 2).to_le_bytes());
        out.extend_from_slice(&16u16.to_le_bytes());
        out.extend_from_slice(b"data");
        out.extend_from_slice(&data.to_le_bytes());
        out.resize(out.len() + data as usize, 0);
        out
    }

    #[test]
    fn a_wav_clip_s_length_is_read_from_its_header_whatever_the_hint() {
        let clip = wav(12_345, 8_000, 2);
        for hint in [
            None,
            Some("audio/wav"),
            Some("clip.WAV"),
            Some("audio/mpeg"),
        ] {
            let probe = probe_audio(&clip, hint).expect("a WAV clip");
            assert_eq!(probe.samples, 12_345, "{hint:?}");
            assert_eq!(probe.sample_rate, 8_000);
            assert_eq!(probe.channels, Some(2));
            assert!((probe.seconds - 12_345.0 / 8_000.0).abs() < 1e-12);
        }
    }

    #[test]
    fn bytes_that_are_no_audio_clip_have_no_length() {
        assert_eq!(probe_audio(b"", None), None);
        assert_eq!(probe_audio(b"not audio at all", Some("audio/wav")), None);
        let mut cut = wav(100, 16_000, 1);
        cut.truncate(20);
        assert_eq!(probe_audio(&cut, Some("x.wav")), None);
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
