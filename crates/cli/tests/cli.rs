//! The `guidebench` binary end to end, with the mock engine.

use std::process::{Command, Output};

fn guidebench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_guidebench"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn run_with_the_mock_engine_prints_a_summary_and_exits_zero() {
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,batch_size=8",
        "--data",
        "kind=synthetic_text,prompt_tokens=32,output_tokens=16",
        "--constraint",
        "kind=max_requests,count=100",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("100 ok, 0 failed"), "{stdout}");
    for line in ["output tokens/s:", "TTFT median:", "ITL median:"] {
        assert!(stdout.contains(line), "missing `{line}` in {stdout}");
    }
}

#[test]
fn backends_lists_the_offline_kind_and_the_mock_engine_with_options() {
    let out = guidebench(&["backends"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("offline"), "{stdout}");
    assert!(stdout.contains("mock"), "{stdout}");
    assert!(stdout.contains("batch_timeout"), "{stdout}");
    assert!(stdout.contains("fail_on_batch"), "{stdout}");
}

#[test]
fn bad_options_exit_2_with_a_one_line_reason() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--backend", "kind=offline,engine=mock,batch_sise=8"],
            "batch_sise",
        ),
        (
            &["run", "--backend", "kind=offline,engine=nope"],
            "available: ",
        ),
        (&["run", "--backend", "engine=mock"], "kind"),
        (
            &[
                "run",
                "--backend",
                "kind=offline,engine=mock,batch_timeout=0",
            ],
            "batch_timeout",
        ),
        (
            &[
                "run",
                "--backend",
                "kind=offline,engine=mock,batch_size=zero",
            ],
            "batch_size",
        ),
        (&["run", "--profile", "kind=warp"], "warp"),
        (
            &["run", "--constraint", "kind=max_requests,count=-1"],
            "count",
        ),
        (
            &["run", "--data", "kind=synthetic_text,prompt_tokens=4"],
            "output_tokens",
        ),
    ];
    for (args, needle) in cases {
        let out = guidebench(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{args:?}: one line, got {stderr}"
        );
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: `{needle}` not in {stderr}"
        );
    }
}

#[test]
fn an_engine_that_fails_to_load_exits_1() {
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,fail_load=true",
        "--constraint",
        "kind=max_requests,count=4",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("failed to load"), "{stderr}");
}

#[test]
fn a_failing_batch_is_reported_and_the_run_goes_on() {
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,batch_size=4,batch_timeout=1h,fail_on_batch=1",
        "--profile",
        "kind=concurrent,streams=4",
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=4",
        "--constraint",
        "kind=max_requests,count=12",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("8 ok, 4 failed"), "{stdout}");
    assert!(stdout.contains("engine: 4"), "{stdout}");
}
