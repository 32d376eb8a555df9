//! The request of the audio endpoints (`/v1/audio/transcriptions`,
//! `/v1/audio/translations`): one clip uploaded as `multipart/form-data`,
//! as GuideLLM sends it.
//!
//! The form holds `model`, with streaming GuideLLM's flattened stream
//! options (`stream=true`, `stream_include_usage=true`,
//! `stream_continuous_usage_stats=true`), each `extra_body` entry as a
//! field of its own (a string as it is, any other value as its JSON text),
//! and last the `file` part: the clip's bytes with a file name (the path's
//! own, else `audio.<ext>` from the MIME type) and its MIME type. The body
//! is built once as bytes, so a send repeated on a fresh connection sends
//! exactly the same upload, as a JSON body is.
//!
//! The clip is the request's one audio content part (a file, bytes, or a
//! `data:` URL); text parts are not sent (GuideLLM sends none). No clip,
//! several, a clip only an `http(s)` URL names (a file cannot be uploaded
//! from it), or a turn with history (GuideLLM refuses multi-turn audio)
//! fail the request as `audio_input`.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::Arc;

use guidebench_core::media::{AudioProbe, probe_audio, read_media};
use guidebench_core::request::{ContentPart, GenerationRequest, MediaSource, RequestInput};
use guidebench_core::{Error, Result};
use serde_json::Value;

use crate::backend::mime_from_path;
use crate::config::OpenAiConfig;
use crate::error::OpenAiError;

/// An audio request's body, and what it sent.
#[derive(Debug)]
pub(crate) struct AudioUpload {
    /// The whole `multipart/form-data` body.
    pub body: Vec<u8>,
    /// Its `Content-Type`, with the boundary.
    pub content_type: String,
    /// Bytes of the clip.
    pub bytes: u64,
    /// The clip's length, from its own file.
    pub probe: Option<AudioProbe>,
}

/// The clip a request sends: its bytes, file name and MIME type.
struct Clip {
    data: Arc<[u8]>,
    file_name: String,
    mime: String,
}

/// The upload of `request` to an audio endpoint at `url` (named in
/// errors).
///
/// # Errors
///
/// [`OpenAiError::AudioInput`] (`audio_input`) for a request without
/// exactly one uploadable clip or with history; core's media error for a
/// clip whose bytes cannot be read.
pub(crate) fn audio_upload(
    config: &OpenAiConfig,
    model: &str,
    request: &GenerationRequest,
    url: &str,
) -> Result<AudioUpload> {
    let clip = clip(request, url)?;
    let mut fields: Vec<(String, String)> = vec![("model".into(), model.to_owned())];
    if config.stream {
        for name in [
            "stream",
            "stream_include_usage",
            "stream_continuous_usage_stats",
        ] {
            fields.push((name.into(), "true".into()));
        }
    }
    for (key, value) in &config.extra_body {
        let value = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        // Its keys win, as they do in a JSON body.
        fields.retain(|(name, _)| name != key);
        fields.push((key.clone(), value));
    }
    let boundary = boundary(request.id, &clip.data, &fields);
    let mut body = Vec::with_capacity(clip.data.len() + 512);
    for (name, value) in &fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"\r\n\r\n{value}\r\n",
                quoted(name)
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\n\
             Content-Type: {}\r\n\r\n",
            quoted(&clip.file_name),
            clip.mime
        )
        .as_bytes(),
    );
    body.extend_from_slice(&clip.data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    Ok(AudioUpload {
        body,
        content_type: format!("multipart/form-data; boundary={boundary}"),
        bytes: clip.data.len() as u64,
        probe: probe_audio(&clip.data, Some(&clip.mime))
            .or_else(|| probe_audio(&clip.data, Some(&clip.file_name))),
    })
}

/// The request's one audio clip.
fn clip(request: &GenerationRequest, url: &str) -> Result<Clip> {
    let refuse = |reason: String| -> Error {
        OpenAiError::AudioInput {
            url: url.to_owned(),
            reason,
        }
        .into()
    };
    let messages = match &request.input {
        RequestInput::Text(_) => {
            return Err(refuse(
                "the request holds no audio clip; an audio endpoint transcribes exactly one \
                 (map the data's audio column)"
                    .into(),
            ));
        }
        RequestInput::Chat(messages) => messages,
    };
    let answered = messages
        .iter()
        .any(|m| matches!(m.role.as_str(), "assistant" | "tool"));
    let asked = messages.iter().filter(|m| m.role == "user").count();
    if answered || asked > 1 {
        return Err(refuse(
            "an audio endpoint takes a single turn: this conversation turn has history \
             (GuideLLM refuses multi-turn audio requests too)"
                .into(),
        ));
    }
    let sources: Vec<&MediaSource> = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|part| match part {
            ContentPart::Audio { source } => Some(source),
            _ => None,
        })
        .collect();
    let source = match sources.as_slice() {
        [one] => *one,
        [] => {
            return Err(refuse(
                "the request holds no audio clip; an audio endpoint transcribes exactly one".into(),
            ));
        }
        several => {
            return Err(refuse(format!(
                "the request holds {} audio clips; an audio endpoint transcribes exactly one",
                several.len()
            )));
        }
    };
    let (mime, file_name) = match source {
        MediaSource::Path(path) => {
            let mime = mime_from_path(path, "audio").to_owned();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .map_or_else(|| default_name(&mime), str::to_owned);
            (mime, name)
        }
        MediaSource::Bytes { mime, .. } => (mime.clone(), default_name(mime)),
        MediaSource::Url(address) => {
            let Some(rest) = address.strip_prefix("data:") else {
                return Err(refuse(format!(
                    "the audio clip {} is a URL, which cannot be uploaded as a file: give \
                     a local file, the bytes or a data: URL",
                    guidebench_core::media::media_name(source)
                )));
            };
            let meta = rest.split_once(',').map_or("", |(meta, _)| meta);
            let mime = meta.split(';').next().unwrap_or("").trim();
            let mime = if mime.is_empty() { "audio/wav" } else { mime }.to_owned();
            let name = default_name(&mime);
            (mime, name)
        }
    };
    let data = read_media(source)?;
    Ok(Clip {
        data,
        file_name,
        mime,
    })
}

/// `audio.<ext>` for a clip of `mime` without a file name.
fn default_name(mime: &str) -> String {
    let subtype = mime
        .split(';')
        .next()
        .and_then(|m| m.trim().rsplit('/').next())
        .unwrap_or("")
        .to_ascii_lowercase();
    let extension = match subtype.as_str() {
        "wav" | "x-wav" | "wave" | "vnd.wave" => "wav",
        "mpeg" | "mp3" | "mpeg3" | "x-mpeg-3" => "mp3",
        "flac" | "x-flac" => "flac",
        "ogg" | "vorbis" | "opus" => "ogg",
        "mp4" | "m4a" | "x-m4a" | "aac" => "m4a",
        "webm" => "webm",
        other if !other.is_empty() && other.chars().all(|c| c.is_ascii_alphanumeric()) => other,
        _ => "wav",
    };
    format!("audio.{extension}")
}

/// A name or file name inside a `Content-Disposition` quoted string.
fn quoted(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .map(|c| if c == '"' { '\'' } else { c })
        .collect()
}

/// A boundary that occurs nowhere in the clip or the fields: a hash of the
/// request, salted again in the (never seen) case it does.
fn boundary(id: u64, data: &[u8], fields: &[(String, String)]) -> String {
    let mut salt = 0u64;
    loop {
        let mut hasher = DefaultHasher::new();
        (id, salt, data.len()).hash(&mut hasher);
        data[..data.len().min(4096)].hash(&mut hasher);
        let boundary = format!("guidebench-{:016x}{:08x}", hasher.finish(), salt);
        let needle = boundary.as_bytes();
        let clashes = data.windows(needle.len()).any(|w| w == needle)
            || fields
                .iter()
                .any(|(k, v)| k.contains(&boundary) || v.contains(&boundary));
        if !clashes {
            return boundary;
        }
        salt += 1;
    }
}

#[cfg(test)]
mod tests {
    use guidebench_core::request::ChatMessage;
    use guidebench_core::sampling::Sampling;

    use super::*;
    use crate::config::RequestFormat;

    fn config(stream: bool) -> OpenAiConfig {
        let mut c = OpenAiConfig::new("http://127.0.0.1:1").expect("config");
        c.request_format = RequestFormat::Transcriptions;
        c.stream = stream;
        c
    }

    fn request(parts: Vec<ContentPart>) -> GenerationRequest {
        GenerationRequest::new(
            3,
            RequestInput::Chat(vec![ChatMessage {
                role: "user".into(),
                tool: None,
                content: parts,
            }]),
            Sampling::fixed_length(4).expect("valid"),
        )
    }

    fn bytes_clip(mime: &str) -> ContentPart {
        ContentPart::Audio {
            source: MediaSource::Bytes {
                mime: mime.into(),
                data: Arc::from(&b"RIFF-not-really"[..]),
            },
        }
    }

    #[test]
    fn a_streamed_upload_holds_the_model_guidellm_s_stream_fields_extras_and_the_file() {
        let mut c = config(true);
        c.extra_body.insert("language".into(), Value::from("en"));
        c.extra_body.insert("temperature".into(), Value::from(0.5));
        let upload = audio_upload(
            &c,
            "whisper",
            &request(vec![bytes_clip("audio/x-wav")]),
            "u",
        )
        .expect("upload");
        let boundary = upload
            .content_type
            .strip_prefix("multipart/form-data; boundary=")
            .expect("a boundary");
        let text = String::from_utf8_lossy(&upload.body);
        for (name, value) in [
            ("model", "whisper"),
            ("stream", "true"),
            ("stream_include_usage", "true"),
            ("stream_continuous_usage_stats", "true"),
            ("language", "en"),
            ("temperature", "0.5"),
        ] {
            let field = format!("name=\"{name}\"\r\n\r\n{value}\r\n--{boundary}");
            assert!(text.contains(&field), "{name}: {text}");
        }
        assert!(
            text.contains(
                "name=\"file\"; filename=\"audio.wav\"\r\nContent-Type: audio/x-wav\r\n\r\n\
                 RIFF-not-really\r\n"
            ),
            "{text}"
        );
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
        assert_eq!(upload.bytes, 15);
        assert_eq!(upload.probe, None, "not a real clip");
        let whole = audio_upload(
            &config(false),
            "m",
            &request(vec![bytes_clip("audio/mpeg")]),
            "u",
        )
        .expect("upload");
        let text = String::from_utf8_lossy(&whole.body);
        assert!(!text.contains("stream"), "{text}");
        assert!(text.contains("filename=\"audio.mp3\""), "{text}");
    }

    #[test]
    fn a_file_keeps_its_name_and_a_data_url_its_mime_type() {
        let dir = std::env::temp_dir().join(format!("guidebench-audio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("speech.flac");
        std::fs::write(&path, b"fLaC").expect("write");
        let upload = audio_upload(
            &config(false),
            "m",
            &request(vec![ContentPart::Audio {
                source: MediaSource::Path(path.clone()),
            }]),
            "u",
        )
        .expect("upload");
        let text = String::from_utf8_lossy(&upload.body);
        assert!(
            text.contains("filename=\"speech.flac\"\r\nContent-Type: audio/flac"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).ok();
        let data_url = ContentPart::Audio {
            source: MediaSource::Url("data:audio/ogg;base64,T2dnUw==".into()),
        };
        let upload =
            audio_upload(&config(false), "m", &request(vec![data_url]), "u").expect("upload");
        let text = String::from_utf8_lossy(&upload.body);
        assert!(
            text.contains("filename=\"audio.ogg\"\r\nContent-Type: audio/ogg\r\n\r\nOggS\r\n"),
            "{text}"
        );
    }

    #[test]
    fn default_names_follow_the_mime_type() {
        for (mime, name) in [
            ("audio/wav", "audio.wav"),
            ("audio/mpeg", "audio.mp3"),
            ("audio/x-flac", "audio.flac"),
            ("audio/webm; codecs=opus", "audio.webm"),
            ("audio/x-m4a", "audio.m4a"),
            ("", "audio.wav"),
        ] {
            assert_eq!(default_name(mime), name, "{mime}");
        }
    }
}
