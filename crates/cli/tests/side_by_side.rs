//! Several backends in one run (`--backend` repeated): the same data and
//! profile against each in turn, one report whose benchmarks carry their
//! backend's label, each backend's own facts, whether greedy outputs
//! agreed, and a backend that cannot start reported without losing the
//! others.

mod common;

use common::{guidebench, read_json, text};

const DATA: &str = "kind=synthetic_text,prompt_tokens=16,output_tokens=8";

#[test]
fn two_backends_run_the_same_benchmarks_into_one_labelled_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,token_time=1ms",
        "--backend",
        "kind=offline,engine=mock,token_time=2ms",
        "--data",
        DATA,
        "--profile",
        "kind=concurrent,streams=2",
        "--constraint",
        "kind=max_requests,count=6",
        "--output",
        &format!("kind=json,path={}", json.display()),
        "--output",
        "kind=console",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    let report = read_json(&json);

    let labels: Vec<&str> = report["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|b| b["label"].as_str().expect("label"))
        .collect();
    assert_eq!(labels, ["mock token_time=1ms", "mock token_time=2ms"]);
    let benchmarks = report["benchmarks"].as_array().expect("benchmarks");
    let per_backend: Vec<(&str, &str, usize)> = benchmarks
        .iter()
        .map(|b| {
            (
                b["backend"].as_str().expect("labelled"),
                b["name"].as_str().expect("name"),
                b["records"]["records"].as_array().expect("records").len(),
            )
        })
        .collect();
    assert_eq!(
        per_backend,
        [
            ("mock token_time=1ms", "concurrent@2", 6),
            ("mock token_time=2ms", "concurrent@2", 6)
        ],
        "the same benchmark, once per backend"
    );
    // Each backend said what it is and how long it took to load.
    for backend in report["backends"].as_array().expect("backends") {
        assert_eq!(backend["environment"]["engine"]["engine"], "mock");
        assert!(
            backend["environment"]["load_time_s"].is_number(),
            "{backend}"
        );
    }
    // The mock derives its tokens from the prompt: greedy outputs agree.
    let agreement = &report["agreement"][0];
    assert_eq!(agreement["benchmark"], "concurrent@2");
    assert_eq!(agreement["compared"], 6, "{agreement}");
    assert_eq!(agreement["agreed"], 6, "{agreement}");
    // The exact command line is kept.
    let command = report["config"]["command"].as_str().expect("command");
    let words = shlex::split(command).expect("shell words");
    assert!(
        words
            .windows(2)
            .any(|w| w[0] == "--backend" && w[1] == "kind=offline,engine=mock,token_time=2ms"),
        "{command}"
    );

    // The console names both backends and says the outputs agreed.
    assert!(stdout.contains("Benchmarked side by side:"), "{stdout}");
    assert!(
        stdout.contains("  mock token_time=1ms: offline engine mock"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "greedy outputs, mock token_time=2ms vs mock token_time=1ms in concurrent@2: \
             all 6 outputs identical"
        ),
        "{stdout}"
    );
    let rows = stdout
        .lines()
        .filter(|l| l.starts_with("mock token_time=") && l.contains("concurrent@2"))
        .count();
    assert!(rows >= 2, "a row per backend: {stdout}");
}

#[test]
fn a_backend_that_cannot_start_is_reported_and_the_others_still_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,fail_load=true",
        "--backend",
        "kind=offline,engine=mock",
        "--data",
        DATA,
        "--constraint",
        "kind=max_requests,count=4",
        "--output",
        &format!("kind=json,path={}", json.display()),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report = read_json(&json);
    let backends = report["backends"].as_array().expect("backends");
    assert_eq!(backends.len(), 2);
    let failure = backends[0]["failure"].as_str().expect("the first failed");
    assert!(!failure.is_empty());
    assert!(backends[1].get("failure").is_none(), "{}", backends[1]);
    let benchmarks = report["benchmarks"].as_array().expect("benchmarks");
    assert_eq!(benchmarks.len(), 1, "the second backend still ran");
    assert_eq!(benchmarks[0]["backend"], "mock");
    assert!(
        report["failure"]
            .as_str()
            .expect("the run failed")
            .starts_with("mock fail_load=true: "),
        "{}",
        report["failure"]
    );
}

#[test]
fn every_backend_is_checked_before_the_first_one_starts() {
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock",
        "--backend",
        "kind=offline,engine=no_such_engine",
        "--data",
        DATA,
        "--constraint",
        "kind=max_requests,count=4",
    ]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("no_such_engine"), "{stderr}");
    assert!(!stderr.contains("benchmark "), "nothing ran: {stderr}");
}
