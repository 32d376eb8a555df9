//! The goodput search end to end: the binary against its own mock server,
//! whose time to first token grows by 20 ms for each other request in
//! flight, so that 24 streams meet a 470 ms objective and 25 do not.

mod common;

use common::{guidebench, read_json, text};

#[cfg(unix)]
#[test]
fn the_goodput_search_finds_the_highest_concurrency_meeting_the_objective() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokenizer = common::tokenizer_in(dir.path());
    let server = common::MockServer::start(&["--itl", "1ms", "--set", "ttft_per_request=20ms"]);
    let json = dir.path().join("report.json");
    let run = guidebench(&[
        "run",
        "--backend",
        &format!("kind=openai_http,target={}", server.url),
        "--tokenizer",
        tokenizer.to_str().expect("utf-8 path"),
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=2",
        "--profile",
        "kind=goodput",
        "--slo",
        "ttft=470ms",
        "--constraint",
        "kind=max_requests,count=80",
        "--output",
        &format!("kind=json,path={}", json.display()),
        "--output",
        "kind=console",
    ]);
    drop(server);
    let stdout = text(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let report = read_json(&json);
    let conclusion = &report["conclusion"];
    assert_eq!(conclusion["kind"], "goodput", "{conclusion}");
    assert_eq!(conclusion["best"], 24, "{conclusion}");
    let failing = conclusion["lowest_failing"]
        .as_u64()
        .expect("a failing level");
    assert!((25..=26).contains(&failing), "{conclusion}");
    assert!(stdout.contains("Goodput search:"), "{stdout}");
    assert!(stdout.contains("Objectives: ttft ≤ 470 ms"), "{stdout}");
}
