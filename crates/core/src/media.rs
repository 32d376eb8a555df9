//! Images and audio clips as a request carries them ([`MediaSource`]),
//! how their bytes are read in process ([`read_media`]), and what a
//! request's images cost ([`ImageStats`]). Below both the request model
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
