//! Reports of requests to an audio endpoint (transcriptions,
//! translations), from records made directly: the audio metrics (seconds
//! per request, real-time factor, seconds of audio per second), the
//! console line and CSV columns that show them and stay away from text-only
//! runs, GuideLLM's `audio` summary and per-request `audio_*` usage in
//! benchmarks.json (read back by the GuideLLM reader), and a saved report
//! that recomputes to the same numbers.

use guidebench_bench::report::guidellm_write::to_guidellm;
use guidebench_bench::report::{
    BenchmarkMetrics, BenchmarkReport, CompactRecords, Report, console_summary, to_csv,
};
use guidebench_core::clock::Timestamp;
use guidebench_core::request::{
    AudioStats, FinishReason, RequestRecord, RequestStatus, RequestTimings,
};
use guidebench_testkit as _;
use serde_json::Value;

const ORIGIN_NS: i64 = 1_700_000_000_000_000_000;

/// `ms` milliseconds after a fixed origin.
fn ms(ms: i64) -> Timestamp {
    Timestamp(ORIGIN_NS + ms * 1_000_000)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

fn clip(seconds: f64, samples: u64, bytes: u64, tokens: u32) -> AudioStats {
    AudioStats {
        seconds: Some(seconds),
        samples: Some(samples),
        bytes,
        tokens: Some(tokens),
    }
}

/// A transcription served from `start` to `end` ms: `tokens` prompt tokens
/// (the audio's), three output tokens.
fn transcribed(id: u64, start: i64, end: i64, audio: Option<AudioStats>) -> RequestRecord {
    RequestRecord {
        id,
        status: RequestStatus::Success,
        error: None,
        prompt_tokens: audio.and_then(|a| a.tokens).or(Some(12)),
        output_tokens: 3,
        finish_reason: Some(FinishReason::Stop),
        text: Some("the quick fox".into()),
        images: None,
        timings: RequestTimings {
            start: Some(ms(start)),
            tokens: vec![ms(end - 30), ms(end - 20), ms(end - 10)],
            end: Some(ms(end)),
            ..RequestTimings::default()
        },
        cut_short_of: None,
        tool_calls: None,
        audio,
    }
}

/// Over a 2 s window: a 10 s clip answered in 0.5 s (RTF 0.05), a 4 s clip
/// answered in 1 s (RTF 0.25), a failure, and a 2 s clip cut short by the
/// end of the run.
fn audio_records() -> Vec<RequestRecord> {
    let mut cut = RequestRecord::incomplete(4, ms(1_500));
    cut.audio = Some(clip(2.0, 32_000, 64_044, 30));
    vec![
        transcribed(1, 0, 500, Some(clip(10.0, 160_000, 320_044, 150))),
        transcribed(2, 100, 1_100, Some(clip(4.0, 64_000, 128_044, 60))),
        RequestRecord::error(
            3,
            &guidebench_core::Error::ShuttingDown,
            ms(1_200),
            ms(1_300),
        ),
        cut,
    ]
}

fn report_of(records: &[RequestRecord]) -> Report {
    let mut report = Report::new(serde_json::json!({
        "backend": "kind=openai_http,target=http://127.0.0.1:8000,model=whisper-1",
    }));
    report.benchmarks.push(BenchmarkReport::from_records(
        "synchronous",
        "synchronous".into(),
        ms(0),
        ms(2_000),
        records,
    ));
    report
}

fn audio_report() -> Report {
    report_of(&audio_records())
}

fn text_report() -> Report {
    report_of(&[transcribed(1, 0, 500, None), transcribed(2, 600, 900, None)])
}

#[test]
fn audio_metrics_give_seconds_per_request_the_real_time_factor_and_seconds_of_audio_per_second() {
    let report = audio_report();
    let m = &report.benchmarks[0].metrics;
    let served = m.successful.audio.as_ref().expect("served clips");
    assert_eq!(served.requests, 2);
    assert!(close(served.seconds.mean, 7.0), "{}", served.seconds.mean);
    assert!(close(served.total_seconds, 14.0));
    // 0.5 s / 10 s and 1 s / 4 s.
    let rtf = &served.real_time_factor;
    assert_eq!(rtf.count, 2);
    assert!(close(rtf.min, 0.05) && close(rtf.max, 0.25), "{rtf:?}");
    assert!(close(rtf.median, 0.15));
    assert!(close(rtf.at(95.0).expect("p95"), 0.05 + 0.2 * 0.95));
    assert!(close(served.tokens.mean, 105.0));
    assert_eq!((served.total_tokens, served.total_bytes), (210, 448_088));
    assert!(close(served.samples.max, 160_000.0));
    // 14 s of audio served over a 2 s window.
    let per_s = m.audio_seconds_per_s.expect("audio was sent");
    assert!(close(per_s, 7.0), "{per_s}");
    // The clip cut short counts among all clips, never in the RTF.
    let all = m.all.audio.as_ref().expect("every clip");
    assert_eq!((all.requests, all.real_time_factor.count), (3, 2));
    assert!(close(all.total_seconds, 16.0));
    let cut = m.incomplete.audio.as_ref().expect("the cut clip");
    assert_eq!((cut.requests, cut.real_time_factor.count), (1, 0));
    assert!(
        m.errored.audio.is_none(),
        "the failure sent no clip we know of"
    );
}

#[test]
fn the_real_time_factor_matches_the_request_records_own() {
    let records = audio_records();
    let report = report_of(&records);
    let rtf = &report.benchmarks[0]
        .metrics
        .successful
        .audio
        .as_ref()
        .expect("clips");
    let mut own: Vec<f64> = records
        .iter()
        .filter(|r| r.is_success())
        .filter_map(RequestRecord::real_time_factor)
        .collect();
    own.sort_by(f64::total_cmp);
    assert_eq!(
        (rtf.real_time_factor.min, rtf.real_time_factor.max),
        (own[0], own[1])
    );
}

#[test]
fn a_text_only_run_has_no_audio_block_anywhere() {
    let report = text_report();
    let m = &report.benchmarks[0].metrics;
    assert!(m.all.audio.is_none() && m.successful.audio.is_none());
    assert_eq!(m.audio_seconds_per_s, None);
    let json = serde_json::to_value(m).expect("json");
    assert!(json.get("audio_seconds_per_s").is_none());
    assert!(json["successful"].get("audio").is_none());
    assert!(json["all"].get("audio").is_none());
    let text = console_summary(&report);
    assert!(!text.contains("audio in"), "{text}");
    assert!(!text.contains("Audio Metrics Statistics"), "{text}");
}

#[test]
fn the_console_shows_one_audio_line_with_seconds_rtf_and_audio_seconds_per_second() {
    let report = audio_report();
    let text = console_summary(&report);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("audio in")).collect();
    assert_eq!(lines.len(), 1, "{text}");
    let line = lines[0];
    assert!(
        line.contains("3 requests sent clips, 5.33 s of audio per request"),
        "{line}"
    );
    assert!(
        line.contains("real-time factor p50 0.150, p95 0.240"),
        "{line}"
    );
    assert!(line.ends_with("7.00 s of audio per s"), "{line}");
    assert!(
        text.contains("Audio Metrics Statistics (Completed Requests)"),
        "GuideLLM's audio table: {text}"
    );
}

/// The CSV's header and its first row, as cells by column name.
fn csv_cells(report: &Report) -> Vec<(String, String)> {
    let csv = to_csv(report);
    let mut lines = csv.lines();
    let header = lines.next().expect("a header");
    let row = lines.next().expect("a row");
    header
        .split(',')
        .map(str::to_owned)
        .zip(
            row.rsplit(',')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .map(str::to_owned),
        )
        .collect()
}

fn cell<'c>(cells: &'c [(String, String)], name: &str) -> &'c str {
    &cells
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .1
}

#[test]
fn the_csv_has_audio_columns_filled_for_audio_and_empty_for_text() {
    let cells = csv_cells(&audio_report());
    assert_eq!(cell(&cells, "audio_seconds_mean"), "5.333");
    assert_eq!(cell(&cells, "rtf_p50"), "0.150");
    assert_eq!(cell(&cells, "rtf_p95"), "0.240");
    assert_eq!(cell(&cells, "audio_seconds_per_s"), "7.000");
    let cells = csv_cells(&text_report());
    for name in [
        "audio_seconds_mean",
        "rtf_p50",
        "rtf_p95",
        "audio_seconds_per_s",
    ] {
        assert_eq!(cell(&cells, name), "", "{name}");
    }
}

fn at<'v>(value: &'v Value, path: &[&str]) -> &'v Value {
    path.iter().fold(value, |v, k| &v[*k])
}

#[test]
fn benchmarks_json_has_guidellm_s_audio_summary_and_each_request_s_audio_usage() {
    let document = to_guidellm(&audio_report());
    let metrics = &document["benchmarks"][0]["metrics"];
    let seconds = at(metrics, &["audio", "seconds", "input"]);
    assert_eq!(seconds["successful"]["count"], 2);
    assert!(close(
        seconds["successful"]["mean"].as_f64().expect("mean"),
        7.0
    ));
    assert_eq!(seconds["incomplete"]["count"], 1);
    assert_eq!(seconds["errored"]["count"], 0);
    assert_eq!(seconds["total"]["count"], 3);
    assert!(
        at(metrics, &["audio", "seconds", "output"]).is_null(),
        "a transcription's audio is its input only"
    );
    assert!(at(metrics, &["audio", "seconds", "total"]).is_null());
    for (key, mean) in [
        ("tokens", 105.0),
        ("samples", 112_000.0),
        ("bytes", 224_044.0),
    ] {
        let got = at(metrics, &["audio", key, "input", "successful", "mean"])
            .as_f64()
            .unwrap_or_else(|| panic!("audio.{key}"));
        assert!(close(got, mean), "audio.{key}: {got}");
    }
    // The prompt was all audio: no input text tokens, as GuideLLM's audio
    // handler counts it.
    assert!(at(metrics, &["text", "tokens", "input"]).is_null());
    let served = document["benchmarks"][0]["requests"]["successful"]
        .as_array()
        .expect("the served requests");
    let first = served
        .iter()
        .find(|r| r["request_id"] == "1")
        .expect("request 1");
    let input = &first["input_metrics"];
    assert_eq!(input["audio_seconds"], 10.0);
    assert_eq!(input["audio_samples"], 160_000);
    assert_eq!(input["audio_bytes"], 320_044);
    assert_eq!(input["audio_tokens"], 150);
    assert_eq!(input["total_tokens"], 150);
    assert!(input["text_tokens"].is_null());
    assert_eq!(first["prompt_tokens"], 150);
}

#[test]
fn a_text_only_benchmarks_json_keeps_the_audio_summary_empty() {
    let document = to_guidellm(&text_report());
    let audio = &document["benchmarks"][0]["metrics"]["audio"];
    for key in ["tokens", "samples", "seconds", "bytes"] {
        assert!(audio[key]["input"].is_null(), "{key}");
    }
    let first = &document["benchmarks"][0]["requests"]["successful"][0];
    assert!(first["input_metrics"].get("audio_seconds").is_none());
    assert_eq!(first["input_metrics"]["text_tokens"], 12);
}

#[test]
fn the_audio_benchmarks_json_is_accepted_by_guidellm_s_schema() {
    let schema: Value = serde_json::from_str(include_str!("fixtures/guidellm/report.schema.json"))
        .expect("schema JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let document = to_guidellm(&audio_report());
    let violations: Vec<String> = validator
        .iter_errors(&document)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert_eq!(violations, Vec::<String>::new());
}

#[test]
fn the_guidellm_reader_reads_each_request_s_audio_back() {
    let mut document = to_guidellm(&audio_report());
    // As GuideLLM itself would have written it: no guidebench report
    // inside.
    if let Some(map) = document.as_object_mut() {
        map.remove("guidebench");
    }
    let read = Report::from_json_value(document, "the audio document").expect("it reads");
    let b = &read.benchmarks[0];
    let mut clips: Vec<AudioStats> = b
        .records
        .to_records()
        .into_iter()
        .filter_map(|r| r.audio)
        .collect();
    clips.sort_by_key(|a| a.bytes);
    assert_eq!(
        clips,
        vec![
            clip(2.0, 32_000, 64_044, 30),
            clip(4.0, 64_000, 128_044, 60),
            clip(10.0, 160_000, 320_044, 150),
        ]
    );
    let served = b.metrics.successful.audio.as_ref().expect("served clips");
    assert!(close(served.seconds.mean, 7.0));
    assert!(close(served.real_time_factor.median, 0.15));
    assert!(close(b.metrics.audio_seconds_per_s.expect("audio"), 7.0));
}

#[test]
fn a_saved_audio_report_recomputes_to_exactly_the_same_metrics() {
    let report = audio_report();
    let json = report.to_json_string().expect("json");
    let back = Report::from_json_str(&json, "the saved report").expect("it reads");
    let (before, after): (&BenchmarkMetrics, &BenchmarkMetrics) =
        (&report.benchmarks[0].metrics, &back.benchmarks[0].metrics);
    assert_eq!(before, after);
    assert_eq!(
        back.benchmarks[0].records.to_records(),
        report.benchmarks[0].records.to_records()
    );
}

#[test]
fn clips_with_any_figures_round_trip_through_compact_records_and_json() {
    let mut odd = transcribed(
        1,
        0,
        500,
        Some(AudioStats {
            seconds: Some(16_000.0 / 44_100.0),
            samples: None,
            bytes: u64::MAX,
            tokens: None,
        }),
    );
    odd.text = None;
    let records = vec![odd, transcribed(2, 0, 500, None)];
    let compact = CompactRecords::from_records(ms(0), &records);
    assert_eq!(compact.to_records(), records);
    let json = serde_json::to_string(&compact).expect("json");
    let back: CompactRecords = serde_json::from_str(&json).expect("parse");
    assert_eq!(back.to_records(), records);
}

#[test]
fn a_report_saved_as_json_or_yaml_keeps_every_clip_to_the_last_bit() {
    let mut records = audio_records();
    for (record, seconds) in records.iter_mut().zip([16_000.0 / 44_100.0, 0.1 + 0.2]) {
        if let Some(audio) = record.audio.as_mut() {
            audio.seconds = Some(seconds);
        }
    }
    let report = report_of(&records);
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let yaml = dir.path().join("report.yaml");
    report.write_json(&json).expect("write json");
    guidebench_bench::report::write_yaml(&report, &yaml).expect("write yaml");
    for path in [json, yaml] {
        let back = Report::read_json(&path).expect("it reads");
        assert_eq!(
            back.benchmarks[0].records.to_records(),
            records,
            "{}",
            path.display()
        );
        assert_eq!(
            back.benchmarks[0].metrics,
            report.benchmarks[0].metrics,
            "{}",
            path.display()
        );
    }
}

#[test]
fn each_turn_of_a_conversation_gets_the_audio_of_its_own_requests() {
    use guidebench_bench::report::CompactTurn;
    let records = vec![
        transcribed(1, 0, 500, Some(clip(10.0, 160_000, 320_044, 150))),
        transcribed(2, 600, 1_000, Some(clip(2.0, 32_000, 64_044, 30))),
    ];
    let mut compact = CompactRecords::from_records(ms(0), &records);
    for (index, record) in (0u32..).zip(compact.records.iter_mut()) {
        record.turn = Some(Box::new(CompactTurn {
            conversation: 1,
            index,
            waited_us: (index > 0).then_some(100_000),
        }));
    }
    let m = BenchmarkMetrics::compute(&compact, ms(0), ms(2_000));
    let seconds: Vec<f64> = m
        .by_turn
        .iter()
        .map(|t| t.successful.audio.as_ref().expect("a clip").seconds.mean)
        .collect();
    assert_eq!(seconds, [10.0, 2.0]);
    let rtf = &m.by_turn[1].successful.audio.as_ref().expect("a clip");
    assert!(close(rtf.real_time_factor.mean, 0.2));
}
