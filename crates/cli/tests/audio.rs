//! Audio transcription and translation end to end, through the binary:
//! `guidebench run` with GuideLLM's `request_format=/v1/audio/transcriptions`
//! or `/v1/audio/translations` and `--data kind=synthetic_audio` against
//! `guidebench mock-server` injecting HTTP errors. Each run counts its
//! errors and goes on; every served request reports the exact length of the
//! clip it uploaded and its real-time factor; the console has the audio
//! line; GuideLLM's document has the audio summary and each request's
//! `input_metrics.audio_seconds`.
#![cfg(unix)]

mod common;

use common::{MockServer, accounted, guidebench, read_json, read_json_document, text};

const REQUESTS: u64 = 12;

#[test]
fn transcription_and_translation_runs_report_each_clips_seconds_and_count_injected_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = MockServer::start(&[
        "--ttft",
        "1ms",
        "--itl",
        "1ms",
        "--audio-tokens-per-second",
        "10",
        "--set",
        "error_rate=0.25",
        "--set",
        "seed=5",
    ]);
    for (format, name) in [
        ("/v1/audio/transcriptions", "transcriptions"),
        ("/v1/audio/translations", "translations"),
    ] {
        let json = dir.path().join(format!("{name}.json"));
        let output = guidebench(&[
            "run",
            "--backend",
            &format!(
                "kind=openai_http,target={},model=m,request_format={format}",
                server.url
            ),
            "--data",
            "kind=synthetic_audio,seconds=1.5",
            "--profile",
            "kind=synchronous",
            "--constraint",
            &format!("kind=max_requests,count={REQUESTS}"),
            "--output",
            &format!("kind=json,path={}", json.display()),
            "--output",
            "kind=console",
            "--disable-progress",
        ]);
        let console = text(&output.stdout);
        assert!(
            output.status.success(),
            "{format}: request errors are reported, not fatal\n{console}\n{}",
            text(&output.stderr)
        );
        let report = read_json(&json);
        let counts = accounted(&report, 0);
        assert_eq!(counts.total(), REQUESTS, "{format}: {counts:?}");
        assert!(
            counts.errored > 0 && counts.successful > 0,
            "{format}: some of each: {counts:?}"
        );
        assert_eq!(
            counts.errors_by_label.keys().collect::<Vec<_>>(),
            ["http_status"],
            "{format}"
        );
        let benchmark = &report["benchmarks"][0];
        for r in benchmark["records"]["records"].as_array().expect("records") {
            if r["status"] == "success" {
                // 1.5 s at 16 kHz, read back from the uploaded WAV's header;
                // the server charged ceil(1.5 × 10) tokens for it.
                assert_eq!(r["audio"]["seconds"], 1.5, "{format}: {r}");
                assert_eq!(r["audio"]["samples"], 24_000, "{format}: {r}");
                assert_eq!(r["audio"]["tokens"], 15, "{format}: {r}");
                // The transcript's length is the server's (the mock's 16
                // words): these endpoints take no output length.
                assert_eq!(r["output_tokens"], 16, "{format}: {r}");
            }
        }
        let metrics = &benchmark["metrics"];
        let audio = &metrics["successful"]["audio"];
        assert_eq!(audio["seconds"]["mean"], 1.5, "{format}: {audio}");
        let rtf = audio["real_time_factor"]["median"]
            .as_f64()
            .expect("a real-time factor");
        assert!(
            rtf > 0.0 && rtf < 1.0,
            "{format}: a 1.5 s clip in ms: {rtf}"
        );
        assert!(
            metrics["audio_seconds_per_s"].as_f64().expect("audio s/s") > 1.0,
            "{format}: {metrics}"
        );
        assert!(
            console.contains("s of audio per request") && console.contains("real-time factor"),
            "{format}\n{console}"
        );
        // GuideLLM's document: the clip's seconds per request, and the audio
        // summary.
        let document = read_json_document(&json);
        let benchmark = &document["benchmarks"][0];
        let first = &benchmark["requests"]["successful"][0];
        assert_eq!(
            first["input_metrics"]["audio_seconds"], 1.5,
            "{format}: {first}"
        );
        assert_eq!(first["input_metrics"]["audio_tokens"], 15, "{format}");
        let seconds = &benchmark["metrics"]["audio"]["seconds"]["input"]["successful"];
        assert_eq!(seconds["mean"], 1.5, "{format}: {seconds}");
    }
}
