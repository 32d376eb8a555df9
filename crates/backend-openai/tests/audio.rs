//! The audio endpoints, `/v1/audio/transcriptions` and
//! `/v1/audio/translations`: the upload, the answers in vLLM's and
//! OpenAI's shapes, the clip's length, the token instants against the
//! instants the mock server wrote them, the faults, and the requests an
//! audio endpoint cannot take.
//!
//! The clips in `tests/fixtures/audio/` were written by libsndfile
//! (`scripts/audio-fixtures`): 4,321 samples of a tone, 16 kHz mono.
//! Nothing here is timed: the checks on instants are causal (a token
//! cannot be read before its write began), and the stalled request runs on
//! a paused clock.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::media::probe_audio;
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{
    AudioStats, ChatMessage, ContentPart, FinishReason, GenerationRequest, GenerationResponse,
    MediaSource, RequestInput,
};
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig, StreamTimings};
use guidebench_openai::{OpenAiConfig, OpenAiHttpBackend, error_label};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::HeldClock;

/// The fixtures' samples per channel and rate.
const SAMPLES: u64 = 4_321;
const RATE: u32 = 16_000;
/// The clips' length in seconds.
const SECONDS: f64 = 4_321.0 / 16_000.0;
/// The mock's default charge for them: ceil(0.2700625 s × 25 per second).
const AUDIO_TOKENS: u32 = 7;
/// The transcript's length the mock is set to.
const TOKENS: u32 = 6;
const TRANSCRIPT: &str = " the quick brown fox jumps over";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/audio/{name}"))
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).expect("the fixture is checked in")
}

/// A single-turn request holding `parts`.
fn request(id: u64, parts: Vec<ContentPart>) -> GenerationRequest {
    request_of(id, vec![user(parts)])
}

fn request_of(id: u64, messages: Vec<ChatMessage>) -> GenerationRequest {
    GenerationRequest::new(
        id,
        RequestInput::Chat(messages),
        Sampling::fixed_length(4).expect("valid"),
    )
}

fn user(content: Vec<ContentPart>) -> ChatMessage {
    ChatMessage {
        role: "user".into(),
        content,
        tool: None,
    }
}

fn clip(source: MediaSource) -> ContentPart {
    ContentPart::Audio { source }
}

fn wav_file() -> ContentPart {
    clip(MediaSource::Path(fixture("tone.wav")))
}

fn flac_bytes() -> ContentPart {
    clip(MediaSource::Bytes {
        mime: "audio/flac".into(),
        data: Arc::from(fixture_bytes("tone.flac")),
    })
}

async fn recording_server(config: MockServerConfig) -> MockServer {
    MockServer::start(MockServerConfig {
        ttft: Duration::from_millis(3),
        itl: Duration::from_millis(1),
        output_tokens: Some(TOKENS),
        record_timings: true,
        record_requests: true,
        ..config
    })
    .await
    .expect("mock server starts")
}

/// A started backend for `target` from its `--backend` arguments.
async fn backend(target: &str, args: &str) -> OpenAiHttpBackend {
    let args = parse_kind_args(&format!(
        "kind=openai_http,target={target},request_id_header=x-request-id,{args}"
    ))
    .expect("arguments");
    let backend = OpenAiHttpBackend::new(OpenAiConfig::from_args(args).expect("config"));
    backend.startup().await.expect("startup");
    backend
}

fn audio_of(response: &GenerationResponse) -> AudioStats {
    response.audio.expect("an audio answer carries its clip")
}

/// The mock's answers, per endpoint in GuideLLM's spelling, streamed and
/// not: the transcript, the server's token counts, the clip's exact
/// length, and token instants never before the server's writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_audio_endpoints_give_the_transcript_tokens_and_the_clip_s_exact_length() {
    let mock = recording_server(MockServerConfig::default()).await;
    for (endpoint, part, file, bytes) in [
        ("/v1/audio/transcriptions", wav_file(), "tone.wav", 8_686),
        ("/v1/audio/translations", flac_bytes(), "audio.flac", 2_514),
    ] {
        for stream in [true, false] {
            let b = backend(
                &mock.url(),
                &format!("request_format={endpoint},stream={stream}"),
            )
            .await;
            let endpoint_id = if file == "tone.wav" { 10 } else { 20 };
            let id = endpoint_id + u64::from(stream);
            let r = b
                .resolve(request(
                    id,
                    vec![ContentPart::text("ignored"), part.clone()],
                ))
                .await
                .unwrap_or_else(|e| panic!("{endpoint} stream={stream}: {e}"));
            let what = format!("{endpoint} stream={stream}");
            assert_eq!(r.text, TRANSCRIPT, "{what}");
            assert_eq!(
                r.output_tokens, TOKENS,
                "{what}: the server's completion tokens"
            );
            assert_eq!(
                r.prompt_tokens, AUDIO_TOKENS,
                "{what}: the server's audio tokens"
            );
            assert_eq!(r.finish_reason, FinishReason::Eos, "{what}");
            assert_eq!(
                audio_of(&r),
                AudioStats {
                    seconds: Some(SECONDS),
                    samples: Some(SAMPLES),
                    bytes,
                    tokens: Some(AUDIO_TOKENS),
                },
                "{what}"
            );

            // The upload as the server read it.
            let recorded = mock.recorded();
            let sent = &recorded.last().expect("recorded").body;
            assert_eq!(sent["model"], "mock-model", "{what}");
            assert_eq!(sent["file"]["filename"], file, "{what}");
            assert_eq!(sent["file"]["bytes"], bytes, "{what}");
            for field in [
                "stream",
                "stream_include_usage",
                "stream_continuous_usage_stats",
            ] {
                let expected = if stream {
                    Value::from("true")
                } else {
                    Value::Null
                };
                assert_eq!(sent[field], expected, "{what}: {field}");
            }

            // Token instants against the server's writes.
            let timings = common::written_timings(&mock, &[id.to_string()]).await;
            let server: &StreamTimings = timings
                .iter()
                .find(|t| t.id == id.to_string())
                .unwrap_or_else(|| panic!("{what}: the server recorded request {id}"));
            let tokens = &r.timings.tokens;
            assert_eq!(tokens.len(), TOKENS as usize, "{what}");
            let first_written = server.events[0].written_ns.expect("written");
            let last_written = server.events.last().and_then(|e| e.written_ns);
            let last_written = last_written.expect("written");
            let (first, last) = (tokens[0].0, tokens[tokens.len() - 1].0);
            assert!(
                first >= first_written,
                "{what}: TTFT before the first write"
            );
            assert!(
                last >= last_written,
                "{what}: the last token before the last write"
            );
            let start = r.timings.start.expect("start").0;
            assert!(start <= server.received_ns, "{what}");
            assert!(first - start >= first_written - server.arrived_ns, "{what}");
            if stream {
                assert_eq!(
                    server.events.len(),
                    TOKENS as usize,
                    "{what}: a chunk a token"
                );
                for (read, event) in tokens.iter().zip(&server.events) {
                    assert!(read.0 >= event.written_ns.expect("written"), "{what}");
                }
            } else {
                assert_eq!(server.events.len(), 1, "{what}: one whole answer");
                assert!(tokens.iter().all(|t| *t == tokens[0]), "{what}");
            }
            b.shutdown().await.expect("shutdown");
        }
    }
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn the_short_names_reach_the_same_endpoints_without_v1_in_the_target() {
    let mock = recording_server(MockServerConfig::default()).await;
    for (name, path) in [
        ("transcriptions", "/v1/audio/transcriptions"),
        ("translations", "/v1/audio/translations"),
    ] {
        let b = backend(
            &format!("{}/v1", mock.url()),
            &format!("request_format={name}"),
        )
        .await;
        let r = b
            .resolve(request(1, vec![wav_file()]))
            .await
            .expect("served");
        assert_eq!(r.text, TRANSCRIPT);
        assert_eq!(mock.recorded().last().expect("recorded").path, path);
    }
    mock.shutdown().await.expect("mock shutdown");
}

#[tokio::test]
async fn the_mock_charges_audio_tokens_per_second_of_the_clip() {
    let mock = recording_server(MockServerConfig {
        audio_tokens_per_second: 100.0,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock.url(), "request_format=transcriptions").await;
    let r = b
        .resolve(request(1, vec![wav_file()]))
        .await
        .expect("served");
    // ceil(0.2700625 × 100)
    assert_eq!(r.prompt_tokens, 28);
    assert_eq!(audio_of(&r).tokens, Some(28));
    mock.shutdown().await.expect("mock shutdown");
}

#[test]
fn the_probe_reads_the_exact_length_of_clips_real_encoders_wrote() {
    for (name, hint) in [
        ("tone.wav", "audio/wav"),
        ("tone.flac", "tone.flac"),
        ("tone.mp3", "audio/mpeg"),
        ("tone.ogg", "audio/ogg"),
    ] {
        let bytes = fixture_bytes(name);
        for hint in [Some(hint), None] {
            let probe = probe_audio(&bytes, hint).unwrap_or_else(|| panic!("{name} is a clip"));
            assert_eq!(probe.samples, SAMPLES, "{name} {hint:?}");
            assert_eq!(probe.sample_rate, RATE, "{name}");
            assert!((probe.seconds - SECONDS).abs() < 1e-12, "{name}");
        }
    }
}

/// Each fault the mock injects reaches the request with its label.
#[tokio::test]
async fn every_fault_of_the_mock_fails_an_audio_request_with_its_label() {
    let faults: [(&str, MockServerConfig, bool, &str); 7] = [
        (
            "error",
            MockServerConfig {
                error_rate: 1.0,
                error_status: 503,
                ..MockServerConfig::default()
            },
            true,
            "http_status",
        ),
        (
            "error",
            MockServerConfig {
                error_rate: 1.0,
                ..MockServerConfig::default()
            },
            false,
            "http_status",
        ),
        (
            "malformed",
            MockServerConfig {
                malformed_rate: 1.0,
                ..MockServerConfig::default()
            },
            true,
            "malformed_response",
        ),
        (
            "malformed",
            MockServerConfig {
                malformed_rate: 1.0,
                ..MockServerConfig::default()
            },
            false,
            "malformed_response",
        ),
        (
            "truncate",
            MockServerConfig {
                truncate_rate: 1.0,
                ..MockServerConfig::default()
            },
            true,
            "stream_truncated",
        ),
        (
            "truncate",
            MockServerConfig {
                truncate_rate: 1.0,
                ..MockServerConfig::default()
            },
            false,
            "malformed_response",
        ),
        (
            "reset",
            MockServerConfig {
                reset_rate: 1.0,
                ..MockServerConfig::default()
            },
            true,
            "connection",
        ),
    ];
    for (fault, config, stream, label) in faults {
        let mock = recording_server(config).await;
        let b = backend(
            &mock.url(),
            &format!("request_format=/v1/audio/transcriptions,stream={stream}"),
        )
        .await;
        let err = b
            .resolve(request(1, vec![wav_file()]))
            .await
            .expect_err("the fault fails the request");
        assert_eq!(error_label(&err), label, "{fault} stream={stream}: {err}");
        if label == "http_status" {
            assert!(err.to_string().contains("injected error"), "{err}");
        }
        b.shutdown().await.expect("shutdown");
        mock.shutdown().await.expect("mock shutdown");
    }
    // A reset of a whole answer, too.
    let mock = recording_server(MockServerConfig {
        reset_rate: 1.0,
        ..MockServerConfig::default()
    })
    .await;
    let b = backend(&mock.url(), "request_format=translations,stream=false").await;
    let err = b
        .resolve(request(1, vec![wav_file()]))
        .await
        .expect_err("reset");
    assert_eq!(error_label(&err), "connection", "{err}");
    mock.shutdown().await.expect("mock shutdown");
}

/// On a clock that moves only when the test moves it: a stalled audio
/// request fails with a timeout when its 200 ms are up, streamed or not.
#[tokio::test(start_paused = true)]
async fn a_stalled_audio_answer_fails_with_timeout_instead_of_hanging() {
    let _clock = HeldClock::hold();
    let mock = MockServer::start(MockServerConfig {
        stall_rate: 1.0,
        tokio_timer: true,
        ..MockServerConfig::default()
    })
    .await
    .expect("mock server starts");
    for stream in [true, false] {
        let b = Arc::new(
            backend(
                &mock.url(),
                &format!("request_format=transcriptions,stream={stream},timeout=200ms"),
            )
            .await,
        );
        let arrivals = mock.stats().requests;
        let started = tokio::time::Instant::now();
        let client = Arc::clone(&b);
        let pending = tokio::spawn(async move {
            let err = client
                .resolve(request(1, vec![wav_file()]))
                .await
                .expect_err("stalled");
            (err, tokio::time::Instant::now())
        });
        while mock.stats().requests == arrivals {
            tokio::task::yield_now().await;
        }
        for _ in 0..1_000 {
            if pending.is_finished() {
                break;
            }
            tokio::time::advance(Duration::from_millis(1)).await;
            tokio::task::yield_now().await;
        }
        let (err, failed_at) = pending.await.expect("the request task");
        assert_eq!(error_label(&err), "timeout", "stream={stream}: {err}");
        assert_eq!(
            failed_at - started,
            Duration::from_millis(200),
            "stream={stream}"
        );
    }
}

/// What an audio endpoint cannot take fails that request, before anything
/// is sent, with `audio_input` and a message saying why.
#[tokio::test]
async fn requests_without_exactly_one_uploadable_clip_or_with_history_are_refused_clearly() {
    let mock = recording_server(MockServerConfig::default()).await;
    let b = backend(&mock.url(), "request_format=/v1/audio/transcriptions").await;
    let text = GenerationRequest::text(1, "no audio", Sampling::fixed_length(4).expect("valid"));
    let history = request_of(
        5,
        vec![
            user(vec![wav_file()]),
            ChatMessage::text("assistant", "an earlier transcript"),
            user(vec![wav_file()]),
        ],
    );
    let cases = [
        (text, "no audio clip"),
        (
            request(2, vec![ContentPart::text("just text")]),
            "no audio clip",
        ),
        (request(3, vec![wav_file(), flac_bytes()]), "2 audio clips"),
        (
            request(
                4,
                vec![clip(MediaSource::Url("https://example.com/a.wav".into()))],
            ),
            "cannot be uploaded as a file",
        ),
        (history, "history"),
    ];
    for (request, needle) in cases {
        let id = request.id;
        let err = b.resolve(request).await.expect_err("refused");
        assert_eq!(error_label(&err), "audio_input", "request {id}: {err}");
        let message = err.to_string();
        assert!(message.contains(needle), "request {id}: {message}");
    }
    assert!(
        mock.recorded().is_empty(),
        "nothing reached the server: {:?}",
        mock.recorded()
    );
    mock.shutdown().await.expect("mock shutdown");
}

/// A multipart body by hand, as any client may send it.
fn form(parts: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "test-boundary-7f3a";
    let mut body = Vec::new();
    for (name, file_name, data) in parts {
        let disposition = match file_name {
            Some(file) => format!("form-data; name=\"{name}\"; filename=\"{file}\""),
            None => format!("form-data; name=\"{name}\""),
        };
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[tokio::test]
async fn the_mock_answers_400_naming_a_missing_file_or_model_or_an_unreadable_clip() {
    let mock = recording_server(MockServerConfig::default()).await;
    let wav = fixture_bytes("tone.wav");
    let client = reqwest::Client::new();
    for (parts, needle) in [
        (vec![("model", None, &b"m"[..])], "Missing 'file'"),
        (vec![("file", Some("a.wav"), &wav[..])], "Missing 'model'"),
        (
            vec![
                ("model", None, &b"m"[..]),
                ("file", Some("a.wav"), &b"noise"[..]),
            ],
            "not an audio clip",
        ),
    ] {
        for path in ["/v1/audio/transcriptions", "/audio/translations"] {
            let (content_type, body) = form(&parts);
            let answer = client
                .post(format!("{}{path}", mock.url()))
                .header("content-type", content_type)
                .body(body)
                .send()
                .await
                .expect("answered");
            assert_eq!(answer.status(), reqwest::StatusCode::BAD_REQUEST, "{path}");
            let text = answer.text().await.expect("a body");
            assert!(text.contains(needle), "{path}: {text}");
        }
    }
    let answer = client
        .post(format!("{}/v1/audio/transcriptions", mock.url()))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status(), reqwest::StatusCode::BAD_REQUEST);
    mock.shutdown().await.expect("mock shutdown");
}

/// A server that answers every request with `answer` (a content type and
/// a body), after reading the request whole; its URL.
async fn serve(content_type: &'static str, answer: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (name, value) = l.split_once(':')?;
                                name.eq_ignore_ascii_case("content-length")
                                    .then(|| value.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n",
                    answer.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

async fn resolve_against(
    content_type: &'static str,
    answer: &str,
    stream: bool,
    part: ContentPart,
) -> guidebench_core::Result<GenerationResponse> {
    let url = serve(content_type, answer.to_owned()).await;
    let b = backend(
        &url,
        &format!("request_format=transcriptions,stream={stream},model=whisper-1,validate=false"),
    )
    .await;
    b.resolve(request(1, vec![part])).await
}

/// The answers of OpenAI's API, as its reference shows them
/// (platform.openai.com/docs/api-reference/audio/createTranscription):
///
/// whisper-1: `{"text": "...", "usage": {"type": "duration", "seconds": 9}}`
///
/// gpt-4o-transcribe: `{"text": "...", "usage": {"type": "tokens",
/// "input_tokens": 14, "input_token_details": {"text_tokens": 0,
/// "audio_tokens": 14}, "output_tokens": 45, "total_tokens": 59}}`
///
/// streamed: `data: {"type":"transcript.text.delta","delta":"I",...}` per
/// delta, then `data: {"type":"transcript.text.done","text":"I see
/// skies of blue.","usage":{"type":"tokens",...}}`.
#[tokio::test]
async fn openai_s_answer_shapes_give_their_text_tokens_and_seconds() {
    // whisper-1: no tokens, the seconds it heard; a clip the probe cannot
    // read takes the server's seconds.
    let noise = clip(MediaSource::Bytes {
        mime: "audio/webm".into(),
        data: Arc::from(&b"not a clip the probe reads"[..]),
    });
    let whisper = r#"{"text":"Imagine the wildest idea.","usage":{"type":"duration","seconds":9}}"#;
    let r = resolve_against("application/json", whisper, false, noise)
        .await
        .expect("served");
    assert_eq!(r.text, "Imagine the wildest idea.");
    assert_eq!(r.prompt_tokens, 0, "no tokens in a duration usage");
    assert_eq!(r.output_tokens, 1, "one answer without token counts");
    assert_eq!(
        audio_of(&r),
        AudioStats {
            seconds: Some(9.0),
            samples: None,
            bytes: 26,
            tokens: None,
        }
    );
    // The clip's own length wins over the server's.
    let r = resolve_against("application/json", whisper, false, wav_file())
        .await
        .expect("served");
    assert_eq!(audio_of(&r).seconds, Some(SECONDS));

    let tokens = r#"{"text":"Imagine the wildest idea.","usage":{"type":"tokens","input_tokens":14,
        "input_token_details":{"text_tokens":0,"audio_tokens":14},"output_tokens":45,
        "total_tokens":59}}"#;
    let r = resolve_against("application/json", tokens, false, wav_file())
        .await
        .expect("served");
    assert_eq!((r.prompt_tokens, r.output_tokens), (14, 45));
    assert_eq!(audio_of(&r).tokens, Some(14));

    let typed = [
        r#"{"type":"transcript.text.delta","delta":"I"}"#,
        r#"{"type":"transcript.text.delta","delta":" see"}"#,
        r#"{"type":"transcript.text.delta","delta":" skies of blue."}"#,
        r#"{"type":"transcript.text.done","text":"I see skies of blue.","usage":{"type":"tokens","input_tokens":14,"input_token_details":{"text_tokens":0,"audio_tokens":14},"output_tokens":6,"total_tokens":20}}"#,
    ]
    .iter()
    .map(|e| format!("data: {e}\n\n"))
    .collect::<String>();
    let r = resolve_against("text/event-stream", &typed, true, wav_file())
        .await
        .expect("served");
    assert_eq!(r.text, "I see skies of blue.");
    assert_eq!((r.prompt_tokens, r.output_tokens), (14, 6));
    assert_eq!(r.timings.tokens.len(), 6, "six tokens over three deltas");
    assert_eq!(r.finish_reason, FinishReason::Eos);
    assert_eq!(audio_of(&r).seconds, Some(SECONDS));

    // A typed stream cut before `transcript.text.done` is truncated.
    let cut = typed
        .split("data: {\"type\":\"transcript.text.done\"")
        .next()
        .expect("head");
    let err = resolve_against("text/event-stream", cut, true, wav_file())
        .await
        .expect_err("truncated");
    assert_eq!(error_label(&err), "stream_truncated", "{err}");
}

#[tokio::test]
async fn a_whole_answer_without_text_is_malformed_and_an_empty_transcript_is_valid() {
    let err = resolve_against(
        "application/json",
        r#"{"usage":{"type":"duration","seconds":1}}"#,
        false,
        wav_file(),
    )
    .await
    .expect_err("no text");
    assert_eq!(error_label(&err), "malformed_response", "{err}");
    assert!(err.to_string().contains("no `text`"), "{err}");
    let r = resolve_against("application/json", r#"{"text":""}"#, false, wav_file())
        .await
        .expect("silence is a transcript");
    assert_eq!((r.text.as_str(), r.output_tokens), ("", 0));
    let err = resolve_against(
        "application/json",
        r#"{"error":{"message":"audio too short"}}"#,
        false,
        wav_file(),
    )
    .await
    .expect_err("an error body");
    assert_eq!(error_label(&err), "server_error", "{err}");
    assert!(err.to_string().contains("audio too short"), "{err}");
}

/// vLLM's streamed transcription, with `stream_continuous_usage_stats`:
/// every chunk carries the usage so far; the last usage counts.
#[tokio::test]
async fn vllm_s_transcription_chunks_with_running_usage_give_the_final_counts() {
    let chunks = [
        r#"{"id":"trsc-1","object":"transcription.chunk","created":0,"model":"w","choices":[{"delta":{"content":" And"},"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}"#,
        r#"{"id":"trsc-1","object":"transcription.chunk","created":0,"model":"w","choices":[{"delta":{"content":" so"},"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#,
        r#"{"id":"trsc-1","object":"transcription.chunk","created":0,"model":"w","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#,
        "[DONE]",
    ]
    .iter()
    .map(|e| format!("data: {e}\n\n"))
    .collect::<String>();
    let r = resolve_against("text/event-stream", &chunks, true, wav_file())
        .await
        .expect("served");
    assert_eq!(r.text, " And so");
    assert_eq!((r.prompt_tokens, r.output_tokens), (9, 2));
    assert_eq!(r.timings.tokens.len(), 2);
    assert_eq!(audio_of(&r).tokens, Some(9));
}
