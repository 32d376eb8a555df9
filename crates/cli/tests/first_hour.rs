//! What a new user, or one coming from GuideLLM 0.8.1, meets in the first
//! hour: outputs checked before the run and never lost after it, the
//! console table beside every file, GuideLLM's spellings of the same
//! flags, help that lists every kind, and no false saturation warning.

mod common;

use std::path::Path;
use std::process::Output;

use common::{guidebench, guidebench_in, read_json, text};

/// The lines of standard error that report an error.
fn error_lines(out: &Output) -> Vec<String> {
    text(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("error: "))
        .map(str::to_owned)
        .collect()
}

const MOCK: &str = "kind=offline,engine=mock";
const SMALL: &str = "kind=synthetic_text,prompt_tokens=8,output_tokens=2";
const FOUR: &str = "kind=max_requests,count=4";

#[test]
fn an_output_in_a_missing_folder_is_refused_before_anything_runs_with_one_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    // An engine that cannot load: had the run started, it would exit 1.
    let out = guidebench_in(
        dir.path(),
        &[
            "run",
            "--backend",
            "kind=offline,engine=mock,fail_load=true",
            "--output",
            "kind=json,path=nodir/r.json",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        error_lines(&out),
        ["error: --output `nodir/r.json`: the folder `nodir` does not exist"],
        "{stderr}"
    );
    assert!(!stderr.contains("starting the backend"), "{stderr}");
}

#[cfg(target_os = "linux")]
#[test]
fn an_output_that_fails_after_the_run_leaves_the_report_in_a_fallback_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    // /dev/full opens for writing and then refuses every byte.
    let out = guidebench_in(
        dir.path(),
        &[
            "run",
            "--backend",
            MOCK,
            "--data",
            SMALL,
            "--constraint",
            FOUR,
            "--output",
            "kind=json,path=/dev/full",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let errors = error_lines(&out);
    assert_eq!(errors.len(), 2, "{stderr}");
    assert_eq!(
        errors[0],
        "error: cannot write the JSON report to /dev/full: No space left on device (os error 28)"
    );
    let fallback = errors[1]
        .strip_prefix("error: the report was written to ")
        .and_then(|rest| rest.strip_suffix(" instead"))
        .unwrap_or_else(|| panic!("no fallback path in {stderr}"));
    assert!(
        Path::new(fallback).starts_with(dir.path().canonicalize().expect("canonical")),
        "in the current folder: {fallback}"
    );
    let report = read_json(Path::new(fallback));
    assert_eq!(report["benchmarks"][0]["metrics"]["successful"]["count"], 4);
}

#[test]
fn the_console_table_prints_beside_a_file_unless_the_console_is_disabled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("r.json");
    let json = json.to_str().expect("utf-8 path");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--backend",
            MOCK,
            "--data",
            SMALL,
            "--constraint",
            FOUR,
            "--output",
            json,
        ];
        args.extend_from_slice(extra);
        guidebench(&args)
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("TTFT ms"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        read_json(Path::new(json))["benchmarks"][0]["metrics"]["successful"]["count"],
        4
    );

    let quiet = run(&["--disable-console"]);
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet.stderr));
    assert_eq!(text(&quiet.stdout), "", "no table");
    assert_eq!(text(&quiet.stderr), "", "no progress or updates");
}

#[test]
fn a_run_without_output_leaves_benchmarks_json_and_csv_here_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = guidebench_in(
        dir.path(),
        &[
            "run",
            "--backend",
            MOCK,
            "--data",
            SMALL,
            "--constraint",
            FOUR,
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        text(&out.stdout).contains("TTFT ms"),
        "the console table too"
    );
    let wrote: Vec<&str> = stderr.lines().filter(|l| l.starts_with("wrote ")).collect();
    assert_eq!(
        wrote,
        [
            "wrote benchmarks.json (JSON: GuideLLM's report with guidebench's, 1 benchmark)",
            "wrote benchmarks.csv (CSV, 1 benchmark)",
        ],
        "{stderr}"
    );
    // GuideLLM's document, with guidebench's report inside.
    let document = common::read_json_document(&dir.path().join("benchmarks.json"));
    assert_eq!(document["metadata"]["version"], 2);
    assert_eq!(
        document["benchmarks"][0]["metrics"]["request_totals"]["successful"],
        4
    );
    let report = read_json(&dir.path().join("benchmarks.json"));
    assert_eq!(report["benchmarks"][0]["metrics"]["successful"]["count"], 4);
    let csv = std::fs::read_to_string(dir.path().join("benchmarks.csv")).expect("CSV");
    assert_eq!(csv.lines().count(), 2, "a header and one benchmark: {csv}");

    // `export` with no output writes what GuideLLM's does: the console,
    // JSON, HTML and CSV.
    std::fs::remove_file(dir.path().join("benchmarks.csv")).expect("rm");
    let export = guidebench_in(dir.path(), &["export"]);
    let stderr = text(&export.stderr);
    assert_eq!(export.status.code(), Some(0), "{stderr}");
    for file in ["benchmarks.json", "benchmarks.html", "benchmarks.csv"] {
        assert!(dir.path().join(file).is_file(), "{file}: {stderr}");
        assert!(
            stderr.contains(&format!("wrote {file} (")),
            "{file}: {stderr}"
        );
    }
    assert_eq!(
        read_json(&dir.path().join("benchmarks.json")),
        report,
        "export rewrote the same report"
    );
}

#[test]
fn a_file_name_picks_its_kind_and_a_kind_alone_writes_benchmarks_here() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = guidebench_in(
        dir.path(),
        &[
            "run",
            "--backend",
            MOCK,
            "--data",
            SMALL,
            "--constraint",
            FOUR,
            "--output",
            "out.csv",
            "--output",
            "kind=json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let csv = std::fs::read_to_string(dir.path().join("out.csv")).expect("CSV by extension");
    assert_eq!(csv.lines().count(), 2, "a header and one benchmark: {csv}");
    let report = read_json(&dir.path().join("benchmarks.json"));
    assert_eq!(report["benchmarks"][0]["metrics"]["successful"]["count"], 4);
    // `export` alone reads benchmarks.json here, as GuideLLM's does.
    let export = guidebench_in(dir.path(), &["export"]);
    assert_eq!(export.status.code(), Some(0), "{}", text(&export.stderr));
    assert!(
        text(&export.stdout).contains("TTFT ms"),
        "{}",
        text(&export.stdout)
    );

    let out = guidebench_in(dir.path(), &["run", "--output", "out.txt"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("kind=out.txt"), "{stderr}");
    assert!(stderr.contains("kind=NAME,path=out.txt"), "{stderr}");
}

#[test]
fn guidellm_spellings_of_run_flags_are_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("scenario.yaml");
    std::fs::write(
        &scenario,
        format!("backend: {MOCK}\ndata: {SMALL}\nprofile: kind=concurrent\n"),
    )
    .expect("write scenario");
    let scenario = scenario.to_str().expect("utf-8 path");
    for config in ["-c", "--config"] {
        let json = dir.path().join(format!("r{config}.json"));
        let out = guidebench(&[
            "run",
            config,
            scenario,
            "--constraint",
            FOUR,
            "--override",
            "profile.streams",
            "1,2",
            "--seed",
            "kind=static,value=7",
            "--metrics",
            "kind=generative,slo.ttft_ms=200,slo.tpot_ms=50",
            "--tokenizer",
            "kind=hf_auto",
            "-l",
            "team=a",
            "--disable-console-interactive",
            "--data-loader",
            "kind=pytorch",
            "--output",
            json.to_str().expect("utf-8 path"),
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{config}: {}",
            text(&out.stderr)
        );
        let report = read_json(&json);
        let names: Vec<&str> = report["benchmarks"]
            .as_array()
            .expect("benchmarks")
            .iter()
            .filter_map(|b| b["name"].as_str())
            .collect();
        assert_eq!(names, ["concurrent@1", "concurrent@2"], "{config}");
        let config_of = &report["config"];
        assert_eq!(config_of["seed"], 7);
        assert_eq!(config_of["labels"]["team"], "a");
        assert_eq!(config_of["slo"]["ttft"], 0.2);
        assert_eq!(config_of["slo"]["itl"], 0.05);
    }
}

#[test]
fn guidellm_options_with_another_meaning_are_refused_saying_what_to_write() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--metrics", "kind=generative,confidence=0.9"],
            "--slo ttft=200ms",
        ),
        (&["run", "--seed", "kind=random"], "kind=static,value=42"),
        (
            &[
                "run",
                "--tokenizer",
                "kind=hf_auto,model=x,load_kwargs.use_fast=true",
            ],
            "load_kwargs",
        ),
        (&["run", "--override", "profile.streams"], "KEY VALUES"),
        (&["run", "--data-loader", "kind=custom"], "kind=pytorch"),
        (
            &["run", "--data-column-mapper", "kind=mine"],
            "prompt_column=",
        ),
        (&["mock-server", "--ttft", "50"], "--ttft 50ms"),
        (&["mock-server", "--itl", "10"], "--itl-ms 10"),
        (
            &["mock-server", "--request-latency", "3"],
            "--ttft-ms plus --itl-ms",
        ),
    ];
    for (args, needle) in cases {
        let out = guidebench(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        let errors = error_lines(&out);
        assert_eq!(errors.len(), 1, "{args:?}: {stderr}");
        assert!(
            errors[0].contains(needle),
            "{args:?}: `{needle}` in {stderr}"
        );
    }
}

#[cfg(unix)]
#[test]
fn the_mock_server_takes_guidellm_millisecond_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokenizer = common::tokenizer_in(dir.path());
    let server = common::MockServer::start(&["--ttft-ms", "20", "--itl-ms", "1", "--workers", "2"]);
    let json = dir.path().join("report.json");
    let out = guidebench(&[
        "run",
        "--backend",
        &format!("kind=openai_http,target={}", server.url),
        "--tokenizer",
        tokenizer.to_str().expect("utf-8 path"),
        "--data",
        SMALL,
        "--constraint",
        FOUR,
        "--output",
        json.to_str().expect("utf-8 path"),
    ]);
    drop(server);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ttft = read_json(&json)["benchmarks"][0]["metrics"]["successful"]["ttft"]["min"]
        .as_f64()
        .expect("ttft");
    // 20 milliseconds, not 20 seconds.
    assert!((0.020..5.0).contains(&ttft), "{ttft}");
}

#[test]
fn run_help_lists_every_data_profile_and_output_kind() {
    let out = guidebench(&["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    let kinds = guidebench_bench::data::DATA_KINDS
        .iter()
        .map(|k| k.name)
        .chain(
            guidebench_bench::runner::PROFILE_KINDS
                .iter()
                .map(|(k, _)| *k),
        )
        .chain(
            guidebench_bench::outputs::OUTPUT_KINDS
                .iter()
                .map(|k| k.name),
        );
    for kind in kinds {
        assert!(help.contains(kind), "`{kind}` not in {help}");
    }
}

/// README's first command, on the mock engine: an in-process engine's
/// threads are not the client's, so nothing warns that the client set the
/// pace.
#[test]
fn the_readme_first_run_on_the_mock_engine_prints_no_saturation_warning() {
    let out = guidebench(&["run", "--backend", MOCK]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("throughput@256"), "{stdout}");
    for shown in [&stdout, &stderr] {
        assert!(!shown.contains("client saturated"), "{shown}");
    }
}

/// Four conversations of three turns: the total counts a conversation once
/// (as `max_requests` does), the requests are one per turn, and the line
/// that ends the benchmark says how they add up.
#[test]
fn conversations_progress_adds_later_turns_to_the_requests_it_announced() {
    let out = guidebench(&[
        "run",
        "--backend",
        MOCK,
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=2,turns=3,count=4",
        "--disable-progress",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("sending up to 4 requests"),
        "the total: {stderr}"
    );
    assert!(
        stderr.contains("12 requests done (4 first and 8 later turns of conversations)"),
        "{stderr}"
    );
}

/// Side by side, a backend that cannot load is said as it happens, and the
/// run's final error does not say it again.
#[test]
fn a_backend_that_fails_beside_another_is_said_once() {
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,fail_load=true",
        "--backend",
        MOCK,
        "--constraint",
        FOUR,
        "--disable-console",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("injected load failure").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        error_lines(&out),
        ["error: the run failed; the reason is printed above"]
    );
}
