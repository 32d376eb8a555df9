//! The mock server's audio endpoints, `POST /v1/audio/transcriptions` and
//! `POST /v1/audio/translations` (and both without `/v1`).
//!
//! A request is a `multipart/form-data` upload, as OpenAI's API and vLLM
//! take it: a `file` part (the clip) and a `model` field are required (a
//! 400 names the one missing, as GuideLLM's mock refuses them); `stream`
//! (`true`) streams the answer and `stream_include_usage` (`true`) adds the
//! usage chunk; other fields are accepted and ignored, among them
//! `stream_continuous_usage_stats` (vLLM would add the usage so far to
//! every chunk; the mock sends it once, in the usage chunk). A file that is not a
//! clip the server can read (WAV, FLAC, MP3, Ogg) is answered 400, as a
//! real server that cannot decode it does.
//!
//! The transcript is made of the mock's fixed words, one per token; its
//! length is `output_tokens` (drawn as for chat), else 16 tokens, since an
//! audio request asks for no limit. A stream is vLLM's: `transcription.chunk`
//! events with `choices[0].delta.content`, timed as chat's chunks are
//! (`ttft`, `itl` per token, `tokens_per_event`, the jitter of their
//! standard deviations, `ttft_per_request` for each other request in
//! flight), the last with `finish_reason: "stop"`, then the usage chunk
//! and `[DONE]`. A non-streamed answer, `{"text", "usage"}`, is sent whole
//! when the last token would have been. The faults and the recorded write
//! instants apply as to chat (a whole answer is recorded as one event of
//! 0 tokens, as an embeddings answer is).
//!
//! The usage is `{prompt_tokens, completion_tokens, total_tokens,
//! seconds}`: `seconds` is the clip's length as core's
//! [`probe_audio`] reads it from the
//! file's own header or frames (exact, where GuideLLM's mock estimates it
//! from the upload's size and an assumed bit rate), and `prompt_tokens`
//! is `ceil(seconds × audio_tokens_per_second)` (default 25, GuideLLM's).

use std::sync::Arc;

use bytes::Bytes;
use guidebench_core::media::probe_audio;
use hyper::Request;
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use serde_json::{Map, Value, json};

use super::Shared;
use super::body::{Answer, bad_request, status_fault, stream_answer, whole_step};
use super::chat::{Ids, Usage, plan_stream};
use super::connection::ConnState;
use super::plan::{Fault, Rng, decide_fault, last_token_at, output_length, queue_wait, words};
use super::request::{Arrival, record_request, timing_slot};

/// Which audio endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Task {
    /// `/v1/audio/transcriptions`.
    Transcription,
    /// `/v1/audio/translations`.
    Translation,
}

/// The uploaded file of a form.
struct Upload {
    data: Bytes,
    file_name: Option<String>,
    content_type: Option<String>,
}

/// A form as the server read it: its text fields and its `file`.
#[derive(Default)]
struct Form {
    fields: Map<String, Value>,
    file: Option<Upload>,
}

impl Form {
    /// Whether a field is `true` (as a form writes a boolean).
    fn flag(&self, name: &str) -> bool {
        self.fields
            .get(name)
            .and_then(Value::as_str)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }
}

/// Reads a `multipart/form-data` body.
async fn read_form(body: Bytes, boundary: String) -> Result<Form, String> {
    let chunks = futures::stream::once(async move { Ok::<_, std::convert::Infallible>(body) });
    let mut multipart = multer::Multipart::new(chunks, boundary);
    let mut form = Form::default();
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return Err(format!("invalid multipart/form-data body: {e}")),
        };
        let name = field.name().unwrap_or("").to_owned();
        if name == "file" {
            let file_name = field.file_name().map(str::to_owned);
            let content_type = field.content_type().map(ToString::to_string);
            let data = field
                .bytes()
                .await
                .map_err(|e| format!("invalid `file` part: {e}"))?;
            form.file = Some(Upload {
                data,
                file_name,
                content_type,
            });
        } else {
            let text = field
                .text()
                .await
                .map_err(|e| format!("invalid `{name}` field: {e}"))?;
            form.fields.insert(name, Value::String(text));
        }
    }
    Ok(form)
}

/// `POST /v1/audio/transcriptions` and `POST /v1/audio/translations` (see
/// the module docs).
pub(super) async fn audio(
    shared: Arc<Shared>,
    conn: &Arc<ConnState>,
    request: Request<Incoming>,
    path: String,
    task: Task,
) -> Answer {
    let boundary = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| multer::parse_boundary(v).ok());
    let (arrival, body) = match Arrival::read_raw(&shared, request).await {
        Ok(read) => read,
        Err(answer) => return answer,
    };
    let Arrival {
        received,
        parts,
        arrived,
        active,
        others,
        index,
        value: _,
    } = arrival;
    let Some(boundary) = boundary else {
        return bad_request(
            "an audio request must be multipart/form-data (with a boundary) holding `file` and \
             `model`",
        );
    };
    let form = match read_form(body, boundary).await {
        Ok(form) => form,
        Err(reason) => return bad_request(&reason),
    };
    let Some(file) = &form.file else {
        return bad_request("Missing 'file' in form-data");
    };
    if !form.fields.contains_key("model") {
        return bad_request("Missing 'model' in form-data");
    }
    let hint = file.content_type.as_deref().or(file.file_name.as_deref());
    let Some(clip) = probe_audio(&file.data, hint) else {
        return bad_request(&format!(
            "the uploaded file ({} bytes) is not an audio clip this server can read \
             (WAV, FLAC, MP3 or Ogg)",
            file.data.len()
        ));
    };
    let stream = form.flag("stream");
    let include_usage = form.flag("stream_include_usage");
    let mut recorded = form.fields.clone();
    recorded.insert(
        "file".into(),
        json!({
            "filename": file.file_name,
            "content_type": file.content_type,
            "bytes": file.data.len(),
        }),
    );
    record_request(&shared, &parts, path, Value::Object(recorded));

    let config = &shared.config;
    let mut rng = Rng::new(config.seed, index);
    let fault = decide_fault(config, &mut rng, index);
    if fault == Fault::Status {
        return status_fault(config);
    }
    // No limit is asked: the drawn length, else chat's default, ends at
    // `stop`.
    let (tokens, _) = output_length(config, &mut rng, None);
    let finish = "stop";
    let charged = (clip.seconds * config.audio_tokens_per_second).ceil();
    // Cast: clamped to the range of u32 first.
    let prompt = charged.clamp(0.0, f64::from(u32::MAX)) as u32;
    let usage = Usage {
        prompt,
        completion: tokens,
        reasoning: 0,
        seconds: Some(clip.seconds),
    };
    let ids = Ids {
        index,
        chat: false,
        audio: true,
        model: &shared.model_json,
    };
    tracing::trace!(index, ?task, seconds = clip.seconds, "mock audio request");
    let ttft = rng.duration(config.ttft, config.ttft_std) + queue_wait(config, others);
    if stream {
        let steps = plan_stream(
            &shared,
            &ids,
            &mut rng,
            arrived + ttft,
            arrived,
            usage,
            finish,
            include_usage,
            fault,
            None,
        );
        let timings = timing_slot(&shared, conn, &parts, index, received, arrived, steps.len());
        return stream_answer(&shared, steps, timings, active, "text/event-stream");
    }
    let end = last_token_at(config, &mut rng, arrived + ttft, tokens);
    let answer = whole_step(&shared, fault, end, || {
        format!(
            r#"{{"text":{},"usage":{}}}"#,
            Value::String(words(0, tokens)),
            usage.json()
        )
    })
    .await?;
    let timings = timing_slot(&shared, conn, &parts, index, received, arrived, 1);
    stream_answer(&shared, vec![answer], timings, active, "application/json")
}
